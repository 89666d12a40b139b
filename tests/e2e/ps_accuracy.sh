#!/usr/bin/env bash
# The parameter server's consistency models against each other on Fashion-MNIST, through the
# trainer under mpirun: configs/fashion_mnist_ps.toml (5 epochs) on 2 colocated workers under
# BSP (the same steps as ddp), SSP(2) and async, each evaluated once at the end; async and
# SSP(2) must come within 1.5 points of BSP's test accuracy. A run takes 3.5 min on an idle
# 2-core machine, so this is a CTest entry of its own, apart from parameter_server.sh.
# Measured 2026-11-27: bsp 92.18%, ssp(2) 91.05% and 90.92%, async 91.64% and 91.69%. Two
# workers of equal speed run SSP(2) at its bound, every gradient 2 steps stale, which costs
# most early in training: after 3 epochs SSP(2) trailed by 1.11 to 1.58 points (4 runs), too
# close to the bound for a test, so the test keeps the config's 5.
#   usage: ps_accuracy.sh TRAINER SOURCE_DIR
set -uo pipefail
. "$(dirname "$0")/lib/fashion_mnist.sh"
fail() { echo "FAIL: $*"; exit 1; }
accuracy() { grep -o 'final test accuracy [0-9.]*' "$work/$1.log" | grep -o '[0-9.]*$'; }

for consistency in bsp ssp async; do
  "$source_dir/scripts/mpirun.sh" -np 2 --oversubscribe "$trainer" \
    --config "$source_dir/configs/fashion_mnist_ps.toml" --set run.out_dir="$work" \
    --set run.name=$consistency --set dist.ps.consistency=$consistency \
    --set train.eval_every=0 --set run.log_every=500 >"$work/$consistency.log" 2>&1 ||
    { tail "$work/$consistency.log"; fail "$consistency failed"; }
done
bsp=$(accuracy bsp) ssp=$(accuracy ssp) async=$(accuracy async)
echo "test accuracy after 5 epochs: bsp $bsp%, ssp(2) $ssp%, async $async%"
for pair in "async $async" "ssp(2) $ssp"; do
  set -- $pair
  python3 -c "import sys; sys.exit(not (abs($2 - $bsp) <= 1.5))" ||
    fail "$1 is more than 1.5 points from bsp"
done
echo "ok: async and ssp(2) within 1.5 points of bsp"
