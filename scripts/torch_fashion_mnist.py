#!/usr/bin/env python3
"""PyTorch reference for dtrain's time to accuracy on Fashion-MNIST, written the ordinary way:
torchvision's FashionMNIST dataset and transforms (ToTensor, Normalize; with --augment first
RandomCrop(28, padding=2) and RandomHorizontalFlip, dtrain's data.augment), a DataLoader with
worker processes and pinned memory, ResNet-18 with dtrain's small stem (a 3x3 stride-1 first
convolution on one channel, no max-pool), bf16 autocast, channels_last, SGD with momentum and
weight decay on every tensor, and dtrain's schedule (linear warm-up from 0.1 x lr, then a
cosine to 0, stepped every optimizer step; the last short batch dropped, as dtrain does).
Evaluates after every epoch and prints the wall time since the script started.

usage: torch_fashion_mnist.py --data DIR [--epochs 20] [--batch 256] [--lr 0.2]
           [--momentum 0.9] [--nesterov] [--weight-decay 5e-4] [--warmup-epochs 1]
           [--label-smoothing 0] [--augment] [--workers 8] [--target 0.94]
DIR holds Debian's dataset-fashion-mnist files (train-images-idx3-ubyte.gz, ...), copied
into torchvision's layout under a temporary directory. One process per GPU: under mpirun
each rank takes its GPU and 1/N of every batch (DistributedSampler, DistributedDataParallel:
the global batch stays --batch); the process group meets at MASTER_ADDR:MASTER_PORT (default
127.0.0.1:29500).
Prints (rank 0) "epoch E | test accuracy A% | wall S s" per epoch, then
"time to TARGET: S s (epoch E)" or "time to TARGET: never".
"""
import time

START = time.time()

import argparse  # noqa: E402
import gzip  # noqa: E402
import math  # noqa: E402
import os  # noqa: E402
import pathlib  # noqa: E402
import shutil  # noqa: E402
import sys  # noqa: E402
import tempfile  # noqa: E402

try:
    import torch
    import torch.distributed as dist
    import torchvision
    from torch.nn.parallel import DistributedDataParallel
    from torch.utils.data.distributed import DistributedSampler
    from torchvision import transforms
except ImportError as error:
    sys.exit(f"torch_fashion_mnist.py: {error}; on Debian: apt-get install python3-torch "
             "python3-torchvision (run with /usr/bin/python3)")

FILES = ["train-images-idx3-ubyte", "train-labels-idx1-ubyte", "t10k-images-idx3-ubyte",
         "t10k-labels-idx1-ubyte"]


def torchvision_root(data):
    """A temporary root holding FashionMNIST/raw/ with the four IDX files unpacked."""
    root = pathlib.Path(tempfile.mkdtemp(prefix="fashion_mnist_"))
    raw = root / "FashionMNIST" / "raw"
    raw.mkdir(parents=True)
    for name in FILES:
        source = pathlib.Path(data) / name
        if source.exists():
            shutil.copy(source, raw / name)
        else:
            with gzip.open(f"{source}.gz", "rb") as packed, open(raw / name, "wb") as out:
                shutil.copyfileobj(packed, out)
    return root


def resnet18_small_stem():
    model = torchvision.models.resnet18(num_classes=10)
    model.conv1 = torch.nn.Conv2d(1, 64, kernel_size=3, stride=1, padding=1, bias=False)
    model.maxpool = torch.nn.Identity()
    return model


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--data", required=True)
    parser.add_argument("--epochs", type=int, default=20)
    parser.add_argument("--batch", type=int, default=256)
    parser.add_argument("--lr", type=float, default=0.2)
    parser.add_argument("--momentum", type=float, default=0.9)
    parser.add_argument("--nesterov", action="store_true")
    parser.add_argument("--weight-decay", type=float, default=5e-4)
    parser.add_argument("--warmup-epochs", type=float, default=1.0)
    parser.add_argument("--label-smoothing", type=float, default=0.0)
    parser.add_argument("--augment", action="store_true")
    parser.add_argument("--workers", type=int, default=8)
    parser.add_argument("--target", type=float, default=0.94)
    args = parser.parse_args()

    world = int(os.environ.get("OMPI_COMM_WORLD_SIZE", "1"))
    rank = int(os.environ.get("OMPI_COMM_WORLD_RANK", "0"))
    device = torch.device("cuda", int(os.environ.get("OMPI_COMM_WORLD_LOCAL_RANK", "0")))
    torch.cuda.set_device(device)
    if world > 1:
        os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
        os.environ.setdefault("MASTER_PORT", "29500")
        dist.init_process_group("nccl", rank=rank, world_size=world)

    root = torchvision_root(args.data)
    normalize = [transforms.ToTensor(), transforms.Normalize((0.2860,), (0.3530,))]
    augment = [transforms.RandomCrop(28, padding=2), transforms.RandomHorizontalFlip()]
    train_transform = transforms.Compose((augment if args.augment else []) + normalize)
    train_set = torchvision.datasets.FashionMNIST(root, train=True, transform=train_transform)
    test_set = torchvision.datasets.FashionMNIST(root, train=False,
                                                 transform=transforms.Compose(normalize))
    sampler = DistributedSampler(train_set, drop_last=True) if world > 1 else None
    train_loader = torch.utils.data.DataLoader(
        train_set, batch_size=args.batch // world, shuffle=sampler is None, sampler=sampler,
        drop_last=True, num_workers=args.workers, pin_memory=True, persistent_workers=True)
    test_loader = torch.utils.data.DataLoader(test_set, batch_size=512, num_workers=2,
                                              pin_memory=True, persistent_workers=True)

    torch.backends.cudnn.benchmark = True
    model = resnet18_small_stem().to(device, memory_format=torch.channels_last)
    if world > 1:
        model = DistributedDataParallel(model, device_ids=[device.index])
    optimizer = torch.optim.SGD(model.parameters(), lr=args.lr, momentum=args.momentum,
                                nesterov=args.nesterov, weight_decay=args.weight_decay)
    steps_per_epoch = len(train_loader)
    total = args.epochs * steps_per_epoch
    warmup = round(args.warmup_epochs * steps_per_epoch)

    def factor(step):  # dtrain's optim/schedule.cpp: warm-up from 0.1, then cosine to 0
        if step < warmup:
            return 0.1 + 0.9 * step / warmup
        done = min(step - warmup, total - warmup) / (total - warmup)
        return 0.5 * (1 + math.cos(math.pi * done))

    schedule = torch.optim.lr_scheduler.LambdaLR(optimizer, factor)
    criterion = torch.nn.CrossEntropyLoss(label_smoothing=args.label_smoothing)
    reached = None
    for epoch in range(args.epochs):
        if sampler is not None:
            sampler.set_epoch(epoch)
        model.train()
        for images, labels in train_loader:
            images = images.to(device, non_blocking=True).to(memory_format=torch.channels_last)
            labels = labels.to(device, non_blocking=True)
            with torch.autocast("cuda", dtype=torch.bfloat16):
                loss = criterion(model(images), labels)
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
            optimizer.step()
            schedule.step()
        model.eval()
        correct = 0
        with torch.no_grad(), torch.autocast("cuda", dtype=torch.bfloat16):
            for images, labels in test_loader:
                images = images.to(device, non_blocking=True).to(memory_format=torch.channels_last)
                correct += (model(images).argmax(1).cpu() == labels).sum().item()
        accuracy = correct / len(test_set)  # every rank evaluates the whole test set
        wall = time.time() - START
        if rank == 0:
            print(f"epoch {epoch} | test accuracy {100 * accuracy:.2f}% | wall {wall:.1f} s",
                  flush=True)
        if reached is None and accuracy >= args.target:
            reached = (wall, epoch)
    shutil.rmtree(root)
    if rank == 0:
        print(f"time to {args.target}: "
              + (f"{reached[0]:.1f} s (epoch {reached[1]})" if reached else "never"))
    if world > 1:
        dist.destroy_process_group()


if __name__ == "__main__":
    main()
