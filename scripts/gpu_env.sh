# Environment for building and running dtrain on a GPU machine (PyTorch's CUDA LibTorch, with
# toml++/Catch2/CLI11/json and libjpeg-turbo/libpng unpacked into ./.deps by
# scripts/prepare_gpu_deps.sh; the trainer loads the last two from there at run time).
# Source it from the project root:  . scripts/gpu_env.sh
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1  # NVLink multicast stays off
export TORCH_PREFIX=$(python3 -c 'import torch;print(torch.utils.cmake_prefix_path)')
# ":"-separated: CMake reads this variable from the environment as a path list.
export CMAKE_PREFIX_PATH="$TORCH_PREFIX:$PWD/.deps/usr"
export LD_LIBRARY_PATH="$PWD/.deps/usr/lib/x86_64-linux-gnu:${LD_LIBRARY_PATH:-}"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
