#!/usr/bin/env python3
"""PyTorch DDP reference for dtrain's data-parallel throughput: torchvision ResNet-50 on
224x224 images (configs/resnet50_synthetic.toml), or ResNet-18 with the small-image stem on
32x32 images and 10 classes (configs/resnet18_cifar_synthetic.toml); synthetic data resident on
each GPU, bf16 autocast, channels_last, SGD momentum 0.9, lr 0.1, DistributedDataParallel with
25 MiB buckets and gradients as bucket views, one process per GPU.

usage: mpirun -np N [-x MASTER_PORT=P] bench_torch_ddp.py [--model resnet50|resnet18_cifar]
           [--batch 128] [--warmup 20] [--steps 100] [--sync-bn]
       bench_torch_ddp.py ... [--cuda-graph] [--gpu-busy]   (one process: no DDP)
--cuda-graph captures the whole step (forward, backward, SGD) once and replays it, as in
PyTorch's "whole-network capture" recipe: the same kernels without the host's launches.
--gpu-busy then profiles 10 steps (torch.profiler) and prints the GPU's kernel time per step
beside the step's wall time: a step whose kernels fill much less than its wall time waits on
the host's launches.
Ranks come from Open MPI's environment (OMPI_COMM_WORLD_RANK, _SIZE, _LOCAL_RANK); the process
group meets at MASTER_ADDR:MASTER_PORT (default 127.0.0.1:29500).
Prints one line on rank 0: "torch ddp MODEL N GPU(s) batch B per GPU bf16 channels_last:
img/s: X", X over all GPUs.
"""
import argparse
import os
import sys
import time

try:
    import torch
    import torch.distributed as dist
    import torchvision
    from torch.nn.parallel import DistributedDataParallel
except ImportError as error:
    sys.exit(f"bench_torch_ddp.py: {error}; on Debian: apt-get install python3-torch "
             "python3-torchvision (run with /usr/bin/python3)")


def build_model(name):
    """The model, its image size, its classes and its weight decay, as dtrain's config has them."""
    if name == "resnet50":
        return torchvision.models.resnet50(), 224, 1000, 5e-5
    # dtrain's small stem: a 3x3 stride-1 first convolution and no max-pool.
    model = torchvision.models.resnet18(num_classes=10)
    model.conv1 = torch.nn.Conv2d(3, 64, kernel_size=3, stride=1, padding=1, bias=False)
    model.maxpool = torch.nn.Identity()
    return model, 32, 10, 5e-4


def print_gpu_busy(step, wall_ms, steps=10):
    """The kernels' (and copies') summed time per step, from torch.profiler's CUDA events."""
    from torch.profiler import ProfilerActivity, profile
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for _ in range(steps):
            step()
        torch.cuda.synchronize()
    cuda = torch.autograd.DeviceType.CUDA
    events = [e for e in prof.events() if e.device_type == cuda]
    busy_ms = sum(e.time_range.elapsed_us() for e in events) / 1e3 / steps
    print(f"gpu busy per step: {busy_ms:.3f} ms of a {wall_ms:.3f} ms step "
          f"({100 * busy_ms / wall_ms:.0f}%), {len(events) // steps} kernels and copies a step",
          flush=True)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--model", choices=["resnet50", "resnet18_cifar"], default="resnet50")
    parser.add_argument("--batch", type=int, default=128, help="images per GPU per step")
    parser.add_argument("--warmup", type=int, default=20)
    parser.add_argument("--steps", type=int, default=100)
    parser.add_argument("--sync-bn", action="store_true",
                        help="torch.nn.SyncBatchNorm over all ranks (dtrain: model.sync_batchnorm)")
    parser.add_argument("--cuda-graph", action="store_true",
                        help="one GPU: replay the step as a CUDA graph (torch.cuda.graph)")
    parser.add_argument("--gpu-busy", action="store_true",
                        help="one GPU: print the kernels' time per step against its wall time")
    args = parser.parse_args()

    rank = int(os.environ.get("OMPI_COMM_WORLD_RANK", 0))
    world = int(os.environ.get("OMPI_COMM_WORLD_SIZE", 1))
    local_rank = int(os.environ.get("OMPI_COMM_WORLD_LOCAL_RANK", 0))
    device = torch.device("cuda", local_rank)
    torch.cuda.set_device(device)
    if world > 1:
        os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
        os.environ.setdefault("MASTER_PORT", "29500")
        dist.init_process_group("nccl", rank=rank, world_size=world, device_id=device)

    torch.backends.cudnn.benchmark = True
    model, image_size, classes, weight_decay = build_model(args.model)
    model = model.to(device, memory_format=torch.channels_last)
    if args.sync_bn and world > 1:
        model = torch.nn.SyncBatchNorm.convert_sync_batchnorm(model)
    if world > 1:
        model = DistributedDataParallel(model, device_ids=[local_rank], bucket_cap_mb=25,
                                        gradient_as_bucket_view=True)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9,
                                weight_decay=weight_decay)
    images = torch.randn(args.batch, 3, image_size, image_size, device=device).to(
        memory_format=torch.channels_last)
    labels = torch.randint(0, classes, (args.batch,), device=device)

    def step(zero_grad=True):
        # Capture needs autocast's weight-cast cache off; eager runs keep PyTorch's default.
        with torch.autocast("cuda", dtype=torch.bfloat16, cache_enabled=not args.cuda_graph):
            loss = torch.nn.functional.cross_entropy(model(images), labels)
        loss.backward()
        optimizer.step()
        if zero_grad:
            optimizer.zero_grad(set_to_none=True)

    if args.cuda_graph:
        if world > 1:
            raise SystemExit("bench_torch_ddp.py: --cuda-graph runs on one GPU (no DDP)")
        side = torch.cuda.Stream()  # warm up off the default stream, as capture requires
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            for _ in range(args.warmup):
                step()
        torch.cuda.current_stream().wait_stream(side)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):  # backward writes the gradients afresh at each replay
            step(zero_grad=False)
        step = graph.replay  # noqa: F811
    for _ in range(args.warmup):
        step()
    torch.cuda.synchronize()
    if world > 1:
        dist.barrier()  # every rank starts the clock with the others ready
    start = time.perf_counter()
    for _ in range(args.steps):
        step()
    torch.cuda.synchronize()
    seconds = time.perf_counter() - start
    if rank == 0:
        print(f"torch ddp {args.model} {world} GPU(s) batch {args.batch} per GPU bf16 channels_last"
              f"{' sync_bn' if args.sync_bn else ''}{' cuda_graph' if args.cuda_graph else ''}: "
              f"img/s: {args.batch * world * args.steps / seconds:.0f}", flush=True)
    if args.gpu_busy and world == 1:
        print_gpu_busy(step, 1e3 * seconds / args.steps)
    if world > 1:
        dist.destroy_process_group()


if __name__ == "__main__":
    main()
