#!/usr/bin/env python3
"""PyTorch reference for dtrain's ResNet-50 throughput: torchvision ResNet-50 on one GPU,
synthetic data resident on the device, SGD momentum, the same batch and precision.

usage: bench_torch_resnet50.py [--batch 128] [--precision bf16|fp16|fp32] [--channels-last]
                               [--warmup 20] [--steps 100]
Prints one line: "torch resnet50 batch B precision P: X img/s".
"""
import argparse
import sys
import time

try:
    import torch
    import torchvision
except ImportError as error:
    sys.exit(f"bench_torch_resnet50.py: {error}; on Debian: apt-get install python3-torch python3-torchvision "
             "(run with /usr/bin/python3)")


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--batch", type=int, default=128)
    parser.add_argument("--precision", default="bf16", choices=["bf16", "fp16", "fp32"])
    parser.add_argument("--channels-last", action="store_true")
    parser.add_argument("--warmup", type=int, default=20)
    parser.add_argument("--steps", type=int, default=100)
    args = parser.parse_args()

    torch.backends.cudnn.benchmark = True
    device = torch.device("cuda")
    model = torchvision.models.resnet50().to(device)
    memory_format = torch.channels_last if args.channels_last else torch.contiguous_format
    model = model.to(memory_format=memory_format)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9, weight_decay=5e-5)
    images = torch.randn(args.batch, 3, 224, 224, device=device).to(memory_format=memory_format)
    labels = torch.randint(0, 1000, (args.batch,), device=device)
    dtype = {"bf16": torch.bfloat16, "fp16": torch.float16, "fp32": None}[args.precision]
    scaler = torch.amp.GradScaler("cuda", enabled=args.precision == "fp16")

    def step():
        with torch.autocast("cuda", dtype=dtype or torch.float32, enabled=dtype is not None):
            loss = torch.nn.functional.cross_entropy(model(images), labels)
        scaler.scale(loss).backward()
        scaler.step(optimizer)
        scaler.update()
        optimizer.zero_grad(set_to_none=True)

    for _ in range(args.warmup):
        step()
    torch.cuda.synchronize()
    start = time.perf_counter()
    for _ in range(args.steps):
        step()
    torch.cuda.synchronize()
    seconds = time.perf_counter() - start
    print(f"torch resnet50 batch {args.batch} precision {args.precision}"
          f"{' channels_last' if args.channels_last else ''}: "
          f"{args.batch * args.steps / seconds:.0f} img/s")


if __name__ == "__main__":
    main()
