#!/usr/bin/env bash
# What a run prints, as a job log sees it: plain lines (no carriage returns or escape codes)
# when stdout is a file, also under mpirun, and train.log holding every line rank 0 printed,
# the start-up banner and the progress lines included.
#   usage: output.sh TRAINER SOURCE_DIR
set -euo pipefail
. "$(dirname "$0")/lib/fashion_mnist.sh"

"$source_dir/scripts/mpirun.sh" -np 2 --oversubscribe "$trainer" \
  --config "$source_dir/configs/fashion_mnist.toml" --set run.out_dir="$work" \
  --set run.name=out --set train.max_steps=6 --set data.batch_size=8 --set run.log_every=2 \
  >"$work/stdout.log" 2>"$work/stderr.log"
if grep -q $'\r\|\033' "$work/stdout.log"; then
  echo "FAIL: terminal control characters in a redirected log"
  exit 1
fi
[ "$(grep -c '^step ' "$work/stdout.log")" -eq 3 ] || { echo "FAIL: step lines"; cat "$work/stdout.log"; exit 1; }
# Every line rank 0 printed is in train.log.
missing=$(grep -vxFf "$work/out/train.log" "$work/stdout.log" || true)
[ -z "$missing" ] || { echo "FAIL: printed but not in train.log:"; echo "$missing"; exit 1; }
grep -q '^dtrain [0-9.]* | LibTorch' "$work/out/train.log" || { echo "FAIL: no banner in train.log"; exit 1; }
grep -q 'final test accuracy' "$work/out/train.log" || { echo "FAIL: no result in train.log"; exit 1; }
echo "output: $(wc -l <"$work/stdout.log") plain lines printed, all in train.log"
# --print-config with the run's --config and --set prints the config the run saved, as it saved it.
"$trainer" --config "$source_dir/configs/fashion_mnist.toml" --set run.out_dir="$work" \
  --set run.name=out --set train.max_steps=6 --set data.batch_size=8 --set run.log_every=2 \
  --print-config >"$work/printed.toml"
cmp -s "$work/printed.toml" "$work/out/config.toml" ||
  { echo "FAIL: --print-config differs from the run's config.toml"; diff "$work/printed.toml" "$work/out/config.toml"; exit 1; }
grep -qx 'batch_size = 8' "$work/printed.toml" || { echo "FAIL: --print-config ignores --set"; exit 1; }
echo "output: --print-config prints the run's resolved config"
