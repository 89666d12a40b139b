#!/usr/bin/env bash
# Ranks started with different configs stop together, with exit code 2 and one message naming
# the rank and key that differ, before any training.   usage: ... TRAINER SOURCE_DIR
set -uo pipefail
trainer=$1 source=$2
config="$source/configs/fashion_mnist.toml"
out=$(mktemp)
trap 'rm -f "$out"' EXIT
"$source/scripts/mpirun.sh" --oversubscribe -np 1 "$trainer" --config "$config" --dry-run \
  : -np 1 "$trainer" --config "$config" --dry-run --set train.epochs=3 >"$out" 2>&1
code=$?
cat "$out"
fail() { echo "FAIL: $*"; exit 1; }
[ "$code" -ne 0 ] || fail "exit code 0"
grep -q "ranks disagree on the resolved config: rank 1: train.epochs = 3 (rank 0: 5)" "$out" \
  || fail "no message naming rank 1 and train.epochs"
echo "ok: mismatched ranks stopped with exit code $code"
