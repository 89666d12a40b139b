#!/usr/bin/env bash
# Compile-checks, on a machine without a GPU, what only the GPU build compiles: the NCCL
# communicator, cuDNN's BatchNorm, and the sources' branches for NCCL, cuDNN and the CUDA
# kernels, by the C++ compiler's -fsyntax-only with the GPU build's definitions, and the CUDA
# kernels (*.cu) by nvcc for sm_90. It needs a CUDA toolkit with nccl.h and cudnn.h (CUDA_HOME,
# default the newest /usr/local/cuda*) and the LibTorch headers the CPU build uses. A CPU
# LibTorch's headers may lack c10/cuda/impl/cuda_cmake_macros.h, which CMake generates for CUDA
# builds: a stand-in is made in a temporary directory. Nothing is linked or run, so this
# catches what would fail a GPU machine's build, not what would fail on its GPU. The headers
# are this machine's LibTorch (Debian 12: 1.13), older than the GPU machines' (2.11): a source
# that uses an API newer than these headers is skipped, and says so. trainer/version.cpp takes
# its generated header from the CPU build (BUILD_DIR, default build).
#   usage: scripts/check_gpu_sources.sh [FILE ...]   (default: every such source)
set -uo pipefail
cd "$(dirname "$0")/.."
cuda=${CUDA_HOME:-$(ls -d /usr/local/cuda* 2>/dev/null | sort -V | tail -1)}
[ -x "$cuda/bin/nvcc" ] || { echo "check_gpu_sources: no CUDA toolkit (set CUDA_HOME)" >&2; exit 2; }
for header in nccl.h cudnn.h; do
  [ -f "$cuda/include/$header" ] ||
    { echo "check_gpu_sources: $cuda/include has no $header" >&2; exit 2; }
done
torch_include=${TORCH_INCLUDE:-/usr/include}
[ -f "$torch_include/torch/csrc/api/include/torch/torch.h" ] ||
  { echo "check_gpu_sources: no LibTorch headers under $torch_include (set TORCH_INCLUDE)" >&2; exit 2; }
shim=$(mktemp -d)
trap 'rm -rf "$shim"' EXIT
if [ ! -f "$torch_include/c10/cuda/impl/cuda_cmake_macros.h" ]; then
  mkdir -p "$shim/c10/cuda/impl"
  echo "#define C10_CUDA_BUILD_SHARED_LIBS" >"$shim/c10/cuda/impl/cuda_cmake_macros.h"
fi
read -ra mpi <<<"$(mpicxx --showme:compile 2>/dev/null)"
includes=(-I. -isystem "$shim" -isystem "$torch_include/torch/csrc/api/include"
  -isystem "$cuda/include")
generated=${BUILD_DIR:-build}/generated
# Sources that use CUDA APIs of LibTorch 2 (CUDAGraph::capture_begin's memory pool and mode).
newer_api=(trainer/graphed_step.cpp tests/dist/ddp/ddp_test.cpp)
torch_major=$(awk '/define TORCH_VERSION_MAJOR/ {print $3}' \
  "$torch_include/torch/csrc/api/include/torch/version.h")
defines=(-DDTRAIN_CUDA=1 -DDTRAIN_NCCL=1 -DDTRAIN_CUDNN=1 -DDTRAIN_CUDA_KERNELS=1
  -DDTRAIN_IMAGE_CODECS=1 -DOMPI_SKIP_MPICXX=1 -DMPICH_SKIP_MPICXX=1 -D_GLIBCXX_USE_CXX11_ABI=1)

files=("$@")
if [ ${#files[@]} -eq 0 ]; then
  mapfile -t files < <({ ls dist/comm/nccl_*.cpp dist/comm/cuda_*.cpp models/batch_norm_cudnn.cpp
    grep -rlE --include='*.cpp' 'DTRAIN_(NCCL|CUDNN|CUDA_KERNELS|CUDA)\b' \
      common data dist models optim trainer tests
    find . -name '*.cu' -not -path './build*' -not -path './.deps/*' | sed 's|^\./||'; } | sort -u)
fi
failed=0
for file in "${files[@]}"; do
  if [ "$torch_major" -lt 2 ] && [[ " ${newer_api[*]} " == *" $file "* ]]; then
    echo "skipped $file (LibTorch $torch_major here; it needs 2's API)"
    continue
  fi
  extra=(-isystem "$generated")
  [[ $file == tests/dist/* ]] && extra+=(-Itests/dist)
  if [[ $file == *.cu ]]; then
    "$cuda/bin/nvcc" -std=c++17 -arch=sm_90 "${includes[@]}" "${defines[@]}" -c "$file" \
      -o /dev/null >"$shim/log" 2>&1
  else
    c++ -std=c++17 -fsyntax-only -Wall -Wextra -Wno-unused-parameter \
      -Wno-deprecated-declarations "${includes[@]}" "${extra[@]}" "${mpi[@]}" "${defines[@]}" \
      "$file" \
      >"$shim/log" 2>&1
  fi
  if [ $? -eq 0 ] && ! grep -q "warning:" "$shim/log"; then
    echo "ok      $file"
  else
    echo "FAILED  $file"
    grep -E "error|warning" "$shim/log" | head -10
    failed=1
  fi
done
exit $failed
