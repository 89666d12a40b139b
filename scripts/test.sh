#!/usr/bin/env bash
# The README's second command: set up, build, and run the whole test suite (CTest).
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
cd build
exec ctest --output-on-failure --timeout 1500 -j "$(nproc)"
