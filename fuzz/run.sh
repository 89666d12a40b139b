#!/usr/bin/env bash
# The fuzz targets as one CTest entry of the main build (so CI fuzzes on every run): builds
# them with clang in a build folder of their own (fuzz/CMakeLists.txt; GCC has no libFuzzer),
# then fuzzes each for DTRAIN_FUZZ_SECONDS (default 15) from its seeds. A finding fails the
# test, with libFuzzer's report and the input kept in BUILD_DIR. Skipped (77) without clang
# and its libFuzzer runtime (Debian: clang, libclang-rt-14-dev; scripts/setup.sh installs them).
#   usage: fuzz/run.sh SOURCE_DIR BUILD_DIR
set -euo pipefail
source_dir=$1 build=$2
seconds=${DTRAIN_FUZZ_SECONDS:-15}
if ! command -v clang++ >/dev/null; then
  echo "skipped: no clang++ (Debian: apt-get install clang libclang-rt-14-dev)"
  exit 77
fi
mkdir -p "$build"
# As scripts/setup.sh: ccache sees paths relative to the checkout. (The precompiled header
# reaches clang through -Xclang with its absolute path, which ccache leaves as it is: files
# that use it still compile anew in another folder; the build is 29 steps.)
export CCACHE_SLOPPINESS=pch_defines,time_macros,include_file_mtime,include_file_ctime
export CCACHE_BASEDIR=$source_dir
cmake -S "$source_dir" -B "$build" -G Ninja -DCMAKE_C_COMPILER=clang \
  -DCMAKE_CXX_COMPILER=clang++ -DCMAKE_BUILD_TYPE=Release -DDTRAIN_FUZZ=ON \
  -DDTRAIN_FUZZ_SECONDS="$seconds" >"$build/configure.log" 2>&1 ||
  { tail -20 "$build/configure.log"; exit 1; }
if ! grep -q "fuzz targets on" "$build/configure.log"; then
  grep "fuzz targets off" "$build/configure.log"
  echo "skipped: clang++ without libFuzzer (Debian: apt-get install libclang-rt-14-dev)"
  exit 77
fi
cmake --build "$build" --target fuzz -j 2 >"$build/build.log" 2>&1 ||
  { tail -30 "$build/build.log"; exit 1; }
cd "$build"
exec ctest --output-on-failure -R '^fuzz\.'
