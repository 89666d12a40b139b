# The GPU check scripts' build: scripts/gpu_env.sh's environment, then gpu_build, which configures
# and builds build-gpu (Ninja, Release, CUDA architectures $CUDAARCHS, default 90: H100/H200).
# Source it from the project root, then call gpu_build with $out set (cmake.log and build.log
# go there), naming the targets (none: all):
#   . scripts/gpu_build.sh
#   gpu_build [TARGET ...]
# A failed configure or build prints the log's telling lines and exits the calling script (1).
. scripts/gpu_env.sh

gpu_build() {
  : "${out:?set out to the output directory before gpu_build}"
  local start targets=()
  [ $# -eq 0 ] || targets=(--target "$@")
  echo "== build"
  start=$(date +%s)
  cmake -S . -B build-gpu -G Ninja -DCMAKE_BUILD_TYPE=Release \
    -DCMAKE_CUDA_ARCHITECTURES="${CUDAARCHS:-90}" >"$out/cmake.log" 2>&1 ||
    { tail -30 "$out/cmake.log"; echo "configuring build-gpu failed: $out/cmake.log" >&2; exit 1; }
  grep "dtrain:" "$out/cmake.log"
  cmake --build build-gpu "${targets[@]}" >"$out/build.log" 2>&1 ||
    { grep -B2 -A12 "error" "$out/build.log" | head -100
      echo "building build-gpu failed: $out/build.log" >&2; exit 1; }
  echo "built in $(($(date +%s) - start)) s"
}
