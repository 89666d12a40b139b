#!/usr/bin/env bash
# Installs the Debian packages dtrain needs (only those missing), then configures and builds
# into build/. Idempotent: with nothing missing and nothing changed it takes seconds.
#   usage: scripts/setup.sh            (run as root, or with sudo available)
set -euo pipefail
cd "$(dirname "$0")/.."

packages=(
  g++ cmake ninja-build ccache pkg-config
  libtorch-dev libtomlplusplus-dev catch2 libfmt-dev libcli11-dev nlohmann-json3-dev zlib1g-dev
  libjpeg62-turbo-dev libpng-dev  # the image decoder (data/image_decode.cpp)
  libopencv-core-dev libopencv-imgproc-dev libopencv-imgcodecs-dev  # the tests' reference decoder
  libopenmpi-dev openmpi-bin
  dataset-fashion-mnist
  python3-pil  # tests/e2e/image_folder_accuracy.sh writes Fashion-MNIST as PNGs with it
  clang libclang-rt-14-dev  # the fuzz targets (fuzz/run.sh, a test of the suite): libFuzzer
)
missing=()
for package in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$package" 2>/dev/null | grep -q "install ok installed" \
    || missing+=("$package")
done
if ((${#missing[@]})); then
  echo "setup: installing ${missing[*]}"
  sudo=""
  [ "$(id -u)" -eq 0 ] || sudo="sudo"
  $sudo apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends "${missing[@]}"
fi

# ccache must accept the precompiled torch header, or every TU misses the cache.
export CCACHE_SLOPPINESS=pch_defines,time_macros,include_file_mtime,include_file_ctime
# Paths relative to the checkout, so a fresh clone elsewhere reuses the cache.
export CCACHE_BASEDIR="$PWD"
[ -f build/build.ninja ] || cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release
cmake --build build
