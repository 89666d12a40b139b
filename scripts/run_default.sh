#!/usr/bin/env bash
# The README's first command: set up, build, and run the default training job (SimpleCNN on
# Fashion-MNIST, data parallel over 2 CPU ranks under mpirun). Extra arguments go to the
# trainer (e.g. --set ...).
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
exec scripts/mpirun.sh -np 2 build/trainer --config configs/fashion_mnist.toml "$@"
