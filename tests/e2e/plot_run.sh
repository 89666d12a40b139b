#!/usr/bin/env bash
# scripts/plot_run.py on two real runs: a PNG with a line per run where matplotlib is
# installed; otherwise the one-line hint naming the package, and a non-zero exit.
#   usage: plot_run.sh TRAINER SOURCE_DIR
set -uo pipefail
. "$(dirname "$0")/lib/fashion_mnist.sh"
for lr in 0.05 0.1; do
  "$trainer" --config "$source_dir/configs/fashion_mnist.toml" --set run.out_dir="$work" \
    --set run.name="lr$lr" --set optim.lr=$lr --set train.max_steps=4 --set run.log_every=2 \
    --set data.batch_size=8 --set dist.strategy=single >"$work/lr$lr.log" 2>&1 ||
    { echo "FAIL: training"; tail "$work/lr$lr.log"; exit 1; }
done
python=python3
[ -x /usr/bin/python3 ] && python=/usr/bin/python3  # Debian's, where python3-matplotlib lives
output=$("$python" "$source_dir/scripts/plot_run.py" "$work/runs.png" "$work/lr0.05" \
  "$work/lr0.1/metrics.jsonl" 2>&1)
status=$?
if "$python" -c "import matplotlib" 2>/dev/null; then
  [ "$status" -eq 0 ] && [ -s "$work/runs.png" ] || { echo "FAIL: $output"; exit 1; }
  echo "plot_run: $output"
  # A path that holds no run is named.
  missing=$("$python" "$source_dir/scripts/plot_run.py" "$work/x.png" "$work/nothing" 2>&1)
  [[ "$missing" == *"$work/nothing: no such metrics file"* ]] ||
    { echo "FAIL: a missing run is not named: $missing"; exit 1; }
else
  [ "$status" -ne 0 ] && [[ "$output" == *"apt-get install python3-matplotlib"* ]] ||
    { echo "FAIL: without matplotlib: $output"; exit 1; }
  echo "plot_run: no matplotlib here; the hint is printed: $output"
fi
