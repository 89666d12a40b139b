#!/usr/bin/env bash
# scripts/plot_run.py on two real runs: a PNG with a line per run where matplotlib is
# installed; otherwise the one-line hint naming the package, and a non-zero exit. Both it and
# scripts/plot_sweep.py answer a mistaken input or output with one line and exit 2, checked
# before matplotlib is needed.
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
  # Runs of the same name from two sweeps: named with the folder that tells them apart.
  mkdir "$work/other" && cp -r "$work/lr0.1" "$work/other/"
  output=$("$python" "$source_dir/scripts/plot_run.py" "$work/same.png" "$work/lr0.1" \
    "$work/other/lr0.1" "$work/lr0.05" 2>&1)
  [[ $output == *"3 run(s) ($(basename "$work")/lr0.1, other/lr0.1, lr0.05)"* ]] ||
    { echo "FAIL: same-named runs: $output"; exit 1; }
  echo "plot_run: $output"
  printf 'ranks,strategy,repeat,step_ms,img_per_s,exposed_ms\n1,single,1,10,800,\n2,ddp,1,6,1300,1\n' \
    >"$work/sweep.csv"
  output=$("$python" "$source_dir/scripts/plot_sweep.py" "$work/sweep.csv" "$work/sweep.png" 2>&1)
  [ $? -eq 0 ] && [ -s "$work/sweep.png" ] || { echo "FAIL: plot_sweep: $output"; exit 1; }
  echo "plot_sweep: $output"
else
  [ "$status" -ne 0 ] && [[ "$output" == *"apt-get install python3-matplotlib"* ]] ||
    { echo "FAIL: without matplotlib: $output"; exit 1; }
  echo "plot_run: no matplotlib here; the hint is printed: $output"
fi
# The names alone, without matplotlib: parents added only where names clash.
names=$(cd "$source_dir/scripts" && "$python" -c 'import plot_run
print(plot_run.labels(["/a/s1/r", "/b/s1/r", "/a/s2/r", "/a/s2/q", "/a/s2/q"]))')
[ "$names" = "['a/s1/r', 'b/s1/r', 's2/r', 'q', 'q']" ] || { echo "FAIL: names $names"; exit 1; }
# SCRIPT EXPECTED ARGUMENT...: SCRIPT exits 2 with the one line EXPECTED, no traceback.
refused() {
  local script=$1 expected=$2 said
  shift 2
  said=$("$python" "$source_dir/scripts/$script" "$@" 2>&1)
  [ $? -eq 2 ] && [ "$said" = "$expected" ] ||
    { echo "FAIL: $script $*: expected exit 2 and \"$expected\", got: $said"; exit 1; }
}
run=$work/lr0.1
refused plot_run.py "plot_run.py: $work/nothing: no such metrics file (give a run directory or \
its metrics.jsonl)" "$work/x.png" "$work/nothing"
refused plot_run.py "plot_run.py: $work/no: no such directory (for $work/no/x.png)" \
  "$work/no/x.png" "$run"
refused plot_run.py "plot_run.py: $run: not an image to write (the image comes first: \
plot_run.py OUT.png RUN...)" "$run" "$work/lr0.05"
refused plot_run.py "plot_run.py: $work/lr0.1.log:1: not a JSON record (Expecting value)" \
  "$work/x.png" "$work/lr0.1.log"
refused plot_sweep.py "plot_sweep.py: $work/none.csv: no such file" "$work/none.csv" "$work/x.png"
refused plot_sweep.py "plot_sweep.py: $work/no: no such directory (for $work/no/x.png)" \
  "$run/metrics.jsonl" "$work/no/x.png"
refused plot_sweep.py "plot_sweep.py: $run/metrics.jsonl: not a sweep CSV (no step_ms column); \
made by scripts/sweep_strategies.sh" "$run/metrics.jsonl" "$work/x.png"
echo "plot_run, plot_sweep: mistakes answered in one line, exit 2"
