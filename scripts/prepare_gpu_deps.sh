#!/usr/bin/env bash
# Run on a CPU (Debian) machine before working on a GPU machine, which has CUDA LibTorch, NCCL,
# Open MPI and zlib but none of dtrain's other libraries and no network: downloads their Debian
# packages and unpacks them into ./.deps (git-ignored), to travel with the project tree.
# fmt is not among them: PyTorch's LibTorch ships its own, which dtrain then uses header-only.
# libjpeg-turbo and libpng (the image decoder, data/image_decode.cpp) come as library and
# headers: the trainer loads them from .deps at run time (scripts/gpu_env.sh's LD_LIBRARY_PATH).
# zlib1g-dev, which libpng-dev asks for, is not needed: the GPU machine's own zlib serves, and
# its headers in .deps would shadow that zlib's with another version.
set -euo pipefail
cd "$(dirname "$0")/.."
packages=(libtomlplusplus-dev libtomlplusplus3 catch2 libcli11-dev
          nlohmann-json3-dev
          libjpeg62-turbo libjpeg62-turbo-dev libpng16-16 libpng-dev)
tmp=$(mktemp -d)
(cd "$tmp" && apt-get download "${packages[@]}" >/dev/null 2>&1) \
  || { apt-get update -qq && (cd "$tmp" && apt-get download "${packages[@]}"); }
rm -rf .deps && mkdir -p .deps
for deb in "$tmp"/*.deb; do dpkg -x "$deb" .deps; done
rm -rf "$tmp"
echo "unpacked into .deps: ${packages[*]} ($(du -sh .deps | cut -f1))"
