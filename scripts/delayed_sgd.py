#!/usr/bin/env python3
"""What a delay costs SGD on Fashion-MNIST: the question behind SSP's time to a loss.

One process simulates the updates a parameter server would apply, with no communication,
so that only the delay differs between runs (docs/PERFORMANCE.md, "What a delay costs"):
  --delay D        every gradient is taken at the parameters of D updates before (SSP(k)
                   with exact reads over collectives: D = k);
  --split N        each step is N updates of batch/N at lr/N, one per worker in turn (a
                   server applying each worker's push on arrival, as async does);
  --late K         of --workers N shares of each step's batch, K arrive one step late: the
                   server's updates are BSP's, but the next step reads them without those K
                   shares (a server applying the on-time workers' pushes before a
                   straggler's: K = N is a whole round's delay);
  --dc LAMBDA      DC-ASGD's correction g + lambda' g*g*(w_now - w_read), lambda' = LAMBDA /
                   sqrt(mean square of g) (Zheng et al. 2017, the adaptive variant).
  --fill mean      with --late: the read takes the on-time shares' mean where the late ones
                   would be (their sum scaled by N / (N - K)) instead of counting them as
                   zero (--fill zero), as dist.ps.preview_fill does.
  --model resnet   a small ResNet with BatchNorm (three stages of one basic block, 16-64
                   channels) instead of SimpleCNN: each worker's share normalised alone, as
                   on the workers; --warmup S ramps the lr linearly over the first S steps.
Prints the steps (of the whole batch) to training losses 1.0, 0.7 and 0.5 (a 10-step
moving average) and the last loss. SimpleCNN as in models/, torch on the CPU, one thread.
  usage: delayed_sgd.py [--delay D] [--split N] [--late K --workers N [--fill F]] [--dc L]
                        [--lr LR] [--momentum M] [--model simple|resnet] [--warmup S] ...
"""
import argparse
import gzip
import sys

try:
    import numpy as np
    import torch
    import torch.nn as nn
    import torch.nn.functional as F
except ImportError as e:
    sys.exit(f"delayed_sgd.py: {e}; on Debian: apt install python3-torch python3-numpy "
             "(run with /usr/bin/python3 where another python3 comes first on PATH)")


def load_fashion_mnist(folder):
    def read(name, offset):
        with gzip.open(f"{folder}/{name}") as f:
            return np.frombuffer(f.read(), np.uint8, offset=offset)
    images = read("train-images-idx3-ubyte.gz", 16).reshape(-1, 1, 28, 28)
    x = (torch.tensor(images.astype(np.float32)) / 255.0 - 0.286) / 0.353
    y = torch.tensor(read("train-labels-idx1-ubyte.gz", 8).astype(np.int64))
    return x, y


def simple_cnn(seed):
    torch.manual_seed(seed)
    return nn.Sequential(
        nn.Conv2d(1, 16, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
        nn.Conv2d(16, 32, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2), nn.Flatten(),
        nn.Linear(32 * 49, 128), nn.ReLU(), nn.Linear(128, 10))


class BasicBlock(nn.Module):
    def __init__(self, inputs, outputs, stride):
        super().__init__()
        self.conv1 = nn.Conv2d(inputs, outputs, 3, stride, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(outputs)
        self.conv2 = nn.Conv2d(outputs, outputs, 3, 1, 1, bias=False)
        self.bn2 = nn.BatchNorm2d(outputs)
        self.shortcut = nn.Sequential()
        if stride != 1 or inputs != outputs:
            self.shortcut = nn.Sequential(nn.Conv2d(inputs, outputs, 1, stride, bias=False),
                                          nn.BatchNorm2d(outputs))

    def forward(self, x):
        out = F.relu(self.bn1(self.conv1(x)))
        return F.relu(self.bn2(self.conv2(out)) + self.shortcut(x))


def small_resnet(seed):
    torch.manual_seed(seed)
    return nn.Sequential(
        nn.Conv2d(1, 16, 3, padding=1, bias=False), nn.BatchNorm2d(16), nn.ReLU(),
        BasicBlock(16, 16, 1), BasicBlock(16, 32, 2), BasicBlock(32, 64, 2),
        nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(64, 10))


def train(x, y, a):
    model = small_resnet(a.seed) if a.model == "resnet" else simple_cnn(a.seed)
    params = list(model.parameters())
    weights = [p.detach().clone() for p in params]  # the server's copy
    history = [[w.clone() for w in weights]]  # the last delay + 1 versions
    momentum = [torch.zeros_like(w) for w in weights]
    mean_square = [torch.zeros_like(w) for w in weights]
    batches = torch.Generator().manual_seed(a.seed + 1)
    batch = a.batch // a.split
    late = [torch.zeros_like(w) for w in weights]  # lr x the last step's late shares
    losses = []
    for update in range(a.steps * a.split):
        ramp = min(1.0, (update // a.split + 1) / a.warmup) if a.warmup > 0 else 1.0
        lr = ramp * a.lr / a.split
        read = history[max(0, len(history) - 1 - a.delay)]
        with torch.no_grad():
            for p, r, missing in zip(params, read, late):
                p.copy_(r + missing)
        index = torch.randint(0, len(x), (batch,), generator=batches)
        model.zero_grad()
        if a.late == 0 and a.model == "simple":
            loss = F.cross_entropy(model(x[index]), y[index])
            loss.backward()
        else:  # each worker's share in turn (BatchNorm: normalised alone, as on its worker);
            # the first K shares' gradients are the late ones
            loss = 0.0
            for worker, share in enumerate(index.chunk(a.workers)):
                part = F.cross_entropy(model(x[share]), y[share]) / a.workers
                part.backward()
                loss += part.detach()
                if worker == a.late - 1:
                    late = [lr * p.grad.clone() for p in params]
            if a.late and a.fill == "mean":
                # The read's step is the on-time shares' mean, W / (W - K) times their sum,
                # where the server's counts the late ones as zero: the read lacks
                # lr (g - W / (W - K) (g - g_late)).
                scale = a.workers / (a.workers - a.late)
                late = [lr * p.grad - scale * (lr * p.grad - m) for p, m in zip(params, late)]
        losses.append(float(loss))
        with torch.no_grad():
            for i, p in enumerate(params):
                g = p.grad
                if a.dc > 0:
                    mean_square[i].mul_(0.95).add_(0.05 * g * g)
                    g = g + a.dc / (mean_square[i].sqrt() + 1e-7) * g * g * (weights[i] - read[i])
                momentum[i].mul_(a.momentum).add_(g)
                weights[i] = weights[i] - lr * momentum[i]
        history = (history + [[w.clone() for w in weights]])[-(a.delay + 1):]
    per_step = np.array(losses).reshape(-1, a.split).mean(1)
    smooth = np.convolve(per_step, np.ones(10) / 10, "valid")
    def steps_to(target):
        return next((i + 10 for i, v in enumerate(smooth) if v < target), None)
    return steps_to(1.0), steps_to(0.7), steps_to(0.5), smooth[-1]


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--delay", type=int, default=0)
    p.add_argument("--split", type=int, default=1)
    p.add_argument("--late", type=int, default=0)
    p.add_argument("--workers", type=int, default=4)
    p.add_argument("--dc", type=float, default=0.0)
    p.add_argument("--lr", type=float, default=0.1)
    p.add_argument("--momentum", type=float, default=0.5)
    p.add_argument("--batch", type=int, default=128)
    p.add_argument("--steps", type=int, default=200)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--model", choices=["simple", "resnet"], default="simple")
    p.add_argument("--warmup", type=int, default=0)
    p.add_argument("--fill", choices=["zero", "mean"], default="zero")
    p.add_argument("--data", default="/usr/share/datasets/fashion-mnist")
    a = p.parse_args()
    if not 0 <= a.late <= a.workers or (a.late and (a.delay or a.split > 1)):
        sys.exit("delayed_sgd.py: --late takes 0 to --workers, without --delay or --split")
    if a.fill == "mean" and not 0 < a.late < a.workers:
        sys.exit("delayed_sgd.py: --fill mean takes --late 1 to --workers - 1")
    torch.set_num_threads(1)
    x, y = load_fashion_mnist(a.data)
    to_1, to_07, to_05, last = train(x, y, a)
    show = lambda s: "-" if s is None else str(s)
    print(f"delay {a.delay} split {a.split} late {a.late}/{a.workers} dc {a.dc} lr {a.lr} "
          f"momentum {a.momentum} model {a.model} batch {a.batch} warmup {a.warmup} "
          f"fill {a.fill} "
          f"seed {a.seed}: steps to loss 1.0 {show(to_1)}, 0.7 {show(to_07)}, "
          f"0.5 {show(to_05)}; last loss {last:.3f}")


if __name__ == "__main__":
    main()
