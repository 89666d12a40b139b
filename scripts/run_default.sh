#!/usr/bin/env bash
# The README's first command: set up, build, and run the default training job (SimpleCNN on
# Fashion-MNIST, data parallel over 2 CPU ranks under mpirun). Extra arguments go to the
# trainer (e.g. --set ...). Each call is a new run, runs/fashion_mnist_cnn_<date>_<time>: the
# trainer never writes into a directory that holds a run. To continue one, pass its name:
# scripts/run_default.sh --set run.name=fashion_mnist_cnn_20261126_101500 --resume
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
exec scripts/mpirun.sh -np 2 build/trainer --config configs/fashion_mnist.toml \
  --set run.name="fashion_mnist_cnn_$(date +%Y%m%d_%H%M%S)" "$@"
