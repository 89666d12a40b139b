#!/usr/bin/env python3
"""PyTorch reference for dtrain's image pipeline (data.dataset = "image_folder"), written the
ordinary way: torchvision's ImageFolder over DIR/train with RandomResizedCrop(224),
RandomHorizontalFlip, ToTensor and ImageNet's Normalize; a DataLoader with worker processes,
pinned memory, persistent workers and the default prefetch factor (2 batches a worker),
shuffled (DistributedSampler under mpirun), the last short batch dropped; torchvision
ResNet-50, bf16 autocast, channels_last, SGD momentum 0.9, lr 0.1, weight decay 5e-5
(configs/resnet50_synthetic.toml's optimizer), DistributedDataParallel on more than one rank.
--synthetic trains the same model on one random batch resident on the device: the rate the
loader is measured against.

usage: [mpirun -np N [-x MASTER_PORT=P]] torch_image_folder.py --data DIR [--workers 8]
           [--batch 128] [--warmup 40] [--steps 60] [--log-every 20] [--synthetic]
           [--device cuda|cpu] [--model resnet50|resnet18]
Ranks come from Open MPI's environment (OMPI_COMM_WORLD_RANK, _SIZE, _LOCAL_RANK); the process
group meets at MASTER_ADDR:MASTER_PORT (default 127.0.0.1:29500).

Timing. A few steps on a random device batch first (cuDNN's algorithm search), so that the
loader's workers, which start only after them, do not stack up 2 x workers batches during
that search: such a reserve would be drained in the timed window and inflate its rate. Then
--warmup steps from the loader, then --steps timed ones between two device synchronisations.
Prints one line on rank 0:
  "torch MODEL DATA N GPU(s) batch B per rank bf16 channels_last: img/s: X |
   data wait ms/step: W | CPU cores busy: C"
X over all ranks; W: rank 0's mean time blocked in next() on the loader's iterator; C: rank
0's main process plus its DataLoader worker processes, CPU seconds (user + system, from
/proc/PID/stat) over the timed window's wall seconds. Every --log-every timed steps rank 0
also prints the interval's rate (wall time, no synchronisation), to see that it is steady.
"""
import argparse
import itertools
import os
import sys
import time

try:
    import torch
    import torch.distributed as dist
    import torchvision
    from PIL import Image  # noqa: F401  (torchvision's ImageFolder decodes with Pillow)
    from torch.nn.parallel import DistributedDataParallel
    from torch.utils.data import DataLoader
    from torch.utils.data.distributed import DistributedSampler
    from torchvision import transforms
except ImportError as error:
    sys.exit(f"torch_image_folder.py: {error}; it needs torch, torchvision and Pillow (pip: "
             "torch torchvision pillow; Debian: python3-torch python3-torchvision python3-pil)")

IMAGENET_MEAN = (0.485, 0.456, 0.406)
IMAGENET_STD = (0.229, 0.224, 0.225)
IMAGE_SIZE = 224
SYNTHETIC_CLASSES = 1000  # as configs/resnet50_synthetic.toml
CUDNN_SEARCH_STEPS = 3
CLOCK_TICKS = os.sysconf("SC_CLK_TCK")


def cpu_seconds(pid="self"):
    """User + system CPU seconds of process `pid`, all its threads (0 once it is gone)."""
    try:
        with open(f"/proc/{pid}/stat") as stat:
            # Fields after the command name, which is in parentheses and may hold spaces:
            # state is field 3, utime 14, stime 15.
            fields = stat.read().rsplit(")", 1)[1].split()
    except FileNotFoundError:
        return 0.0
    return (int(fields[11]) + int(fields[12])) / CLOCK_TICKS


def image_loader(args, rank, world, pin_memory):
    """(DataLoader over DIR/train, its sampler or None, its classes)."""
    transform = transforms.Compose([
        transforms.RandomResizedCrop(IMAGE_SIZE),
        transforms.RandomHorizontalFlip(),
        transforms.ToTensor(),
        transforms.Normalize(IMAGENET_MEAN, IMAGENET_STD),
    ])
    dataset = torchvision.datasets.ImageFolder(os.path.join(args.data, "train"), transform)
    sampler = (DistributedSampler(dataset, num_replicas=world, rank=rank, shuffle=True,
                                  drop_last=True) if world > 1 else None)
    loader = DataLoader(dataset, batch_size=args.batch, shuffle=sampler is None, sampler=sampler,
                        num_workers=args.workers, pin_memory=pin_memory,
                        persistent_workers=args.workers > 0, drop_last=True)
    if len(loader) == 0:
        sys.exit(f"torch_image_folder.py: {args.data}/train has {len(dataset)} images, fewer "
                 f"than one batch of {args.batch} per rank on {world} rank(s)")
    return loader, sampler, len(dataset.classes)


def epochs_of(loader, sampler):
    """Every batch of epoch 0, 1, ...: the ordinary loop's `for epoch: for batch in loader`."""
    for epoch in itertools.count():
        if sampler is not None:
            sampler.set_epoch(epoch)
        yield from loader


def worker_pids(loader):
    """The DataLoader's worker processes (persistent: the same ones every epoch)."""
    iterator = loader._iterator  # private, but the only handle on the workers
    return [worker.pid for worker in getattr(iterator, "_workers", [])]


def build_model(name, classes):
    return getattr(torchvision.models, name)(num_classes=classes)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--data", help="folder holding train/<class>/*.JPEG "
                                       "(scripts/make_image_folder.py writes one)")
    parser.add_argument("--workers", type=int, default=8, help="DataLoader worker processes")
    parser.add_argument("--batch", type=int, default=128, help="images per rank per step")
    parser.add_argument("--warmup", type=int, default=40, help="untimed steps from the loader")
    parser.add_argument("--steps", type=int, default=60, help="timed steps")
    parser.add_argument("--log-every", type=int, default=20, help="timed steps per rate line")
    parser.add_argument("--synthetic", action="store_true",
                        help="one random batch on the device instead of the folder")
    parser.add_argument("--device", choices=["cuda", "cpu"], default="cuda",
                        help="cpu: for trying the script where there is no GPU (fp32)")
    parser.add_argument("--model", choices=["resnet50", "resnet18"], default="resnet50")
    args = parser.parse_args()
    if not args.synthetic and not args.data:
        parser.error("--data is needed unless --synthetic")
    if args.warmup < 1 or args.steps < 1 or args.log_every < 1:
        parser.error("--warmup, --steps and --log-every must be at least 1 (the first "
                     "loader step starts the workers whose CPU time is counted)")

    rank = int(os.environ.get("OMPI_COMM_WORLD_RANK", 0))
    world = int(os.environ.get("OMPI_COMM_WORLD_SIZE", 1))
    local_rank = int(os.environ.get("OMPI_COMM_WORLD_LOCAL_RANK", 0))
    cuda = args.device == "cuda"
    device = torch.device("cuda", local_rank) if cuda else torch.device("cpu")
    if cuda:
        torch.cuda.set_device(device)
        torch.backends.cudnn.benchmark = True
    if world > 1:
        os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
        os.environ.setdefault("MASTER_PORT", "29500")
        dist.init_process_group("nccl" if cuda else "gloo", rank=rank, world_size=world,
                                **({"device_id": device} if cuda else {}))

    if args.synthetic:
        loader, sampler, classes = None, None, SYNTHETIC_CLASSES
    else:
        loader, sampler, classes = image_loader(args, rank, world, pin_memory=cuda)
    model = build_model(args.model, classes).to(device, memory_format=torch.channels_last)
    if world > 1:
        model = DistributedDataParallel(model, device_ids=[local_rank] if cuda else None,
                                        bucket_cap_mb=25, gradient_as_bucket_view=True)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9, weight_decay=5e-5)
    random_images = torch.randn(args.batch, 3, IMAGE_SIZE, IMAGE_SIZE, device=device).to(
        memory_format=torch.channels_last)
    random_labels = torch.randint(0, classes, (args.batch,), device=device)

    def step(images, labels):
        images = images.to(device, non_blocking=True).contiguous(
            memory_format=torch.channels_last)
        labels = labels.to(device, non_blocking=True)
        with torch.autocast(device.type, dtype=torch.bfloat16, enabled=cuda):
            loss = torch.nn.functional.cross_entropy(model(images), labels)
        loss.backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)

    def synchronize():
        if cuda:
            torch.cuda.synchronize()
        if world > 1:
            dist.barrier()  # every rank starts and stops the clock with the others

    for _ in range(CUDNN_SEARCH_STEPS):
        step(random_images, random_labels)
    batches = (itertools.repeat((random_images, random_labels)) if args.synthetic
               else epochs_of(loader, sampler))
    for _ in range(args.warmup):
        step(*next(batches))

    synchronize()
    pids = [] if args.synthetic else worker_pids(loader)
    cpu_start = sum(cpu_seconds(pid) for pid in ["self", *pids])
    start = interval_start = time.perf_counter()
    waited = 0.0
    for i in range(1, args.steps + 1):
        before = time.perf_counter()
        images, labels = next(batches)
        waited += time.perf_counter() - before
        step(images, labels)
        if rank == 0 and i % args.log_every == 0:
            now = time.perf_counter()
            print(f"steps {i - args.log_every + 1}-{i}: "
                  f"{args.batch * world * args.log_every / (now - interval_start):.0f} img/s",
                  file=sys.stderr, flush=True)
            interval_start = now
    synchronize()
    seconds = time.perf_counter() - start
    cpu = sum(cpu_seconds(pid) for pid in ["self", *pids]) - cpu_start

    if rank == 0:
        data = "synthetic" if args.synthetic else f"DataLoader {args.workers} workers"
        precision = "bf16" if cuda else "fp32"
        ranks = f"{world} GPU(s)" if cuda else f"{world} CPU rank(s)"
        print(f"torch {args.model} {data} {ranks} batch {args.batch} "
              f"per rank {precision} channels_last: "
              f"img/s: {args.batch * world * args.steps / seconds:.0f} | "
              f"data wait ms/step: {1e3 * waited / args.steps:.1f} | "
              f"CPU cores busy: {cpu / seconds:.1f}", flush=True)
    if world > 1:
        dist.destroy_process_group()


if __name__ == "__main__":
    main()
