#!/usr/bin/env bash
# End to end: the default job (DDP over 2 ranks under mpirun) for one epoch must pass an
# accuracy floor, and write its resolved config, metrics with communication stats, and a
# complete checkpoint.   usage: ... TRAINER SOURCE_DIR
set -euo pipefail
trainer=$1 source=$2
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
floor=0.85

"$source/scripts/mpirun.sh" -np 2 --oversubscribe "$trainer" \
  --config "$source/configs/fashion_mnist.toml" --set train.epochs=1 --set run.out_dir="$tmp" \
  | tee "$tmp/out"
run="$tmp/fashion_mnist_cnn"
accuracy=$(grep '"kind":"final"' "$run/metrics.jsonl" | sed 's/.*"accuracy\/test":\([0-9.]*\).*/\1/')
echo "test accuracy after one epoch: $accuracy (floor $floor)"
awk -v accuracy="$accuracy" -v floor="$floor" 'BEGIN { exit !(accuracy >= floor) }'
grep -q '"comm/exposed_ms"' "$run/metrics.jsonl"
grep -q "2 rank(s) on 1 node(s) | device cpu | 1 torch threads | strategy ddp" "$tmp/out"
test -f "$run/config.toml"
test -f "$run/train.rank1.log"
test -f "$run/checkpoints/step_00000468/DONE"
test -f "$run/checkpoints/step_00000468/model.pt"
