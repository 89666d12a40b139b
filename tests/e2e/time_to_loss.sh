#!/usr/bin/env bash
# scripts/time_to_loss.py on real runs: a finished run is "done", a diverged one "failed" with
# the trainer's error, a run whose last line is cut short (still writing) is read without
# it; a bad line elsewhere, a step record without its step time and a target that is not a
# number are answered with one line and exit 2, no traceback. With every python3 here (it
# needs no package), as `python3` on PATH may not be Debian's.
#   usage: time_to_loss.sh TRAINER SOURCE_DIR
set -uo pipefail
. "$(dirname "$0")/lib/fashion_mnist.sh"
sweep=$work/sweep
for run in done diverged; do
  nan=()
  [ $run = diverged ] && nan=(--set "debug.nan_loss_steps=[3]")
  "$trainer" --config "$source_dir/configs/fashion_mnist.toml" --set run.out_dir="$sweep" \
    --set run.name=$run --set train.max_steps=6 --set run.log_every=2 --set data.batch_size=8 \
    --set dist.strategy=single "${nan[@]}" >"$work/$run.log" 2>&1
done
mkdir "$sweep/writing"
head -c -10 "$sweep/done/metrics.jsonl" >"$sweep/writing/metrics.jsonl"
mkdir -p "$work/bad_line/run" "$work/no_step_ms/run"
{ echo '{"kind":"step",'; cat "$sweep/done/metrics.jsonl"; } >"$work/bad_line/run/metrics.jsonl"
echo '{"kind":"step","step":2,"loss/train":1}' >"$work/no_step_ms/run/metrics.jsonl"

for python in $(which -a python3 | awk '!seen[$0]++'); do
  table=$("$python" "$source_dir/scripts/time_to_loss.py" "$sweep" 9 2>&1) ||
    { echo "FAIL: $python: $table"; exit 1; }
  for expected in " (2) | 2." "| diverged | " " | failed: the training loss is NaN in steps 3 to 4" \
    "| writing | " " | still writing |"; do
    [[ $table == *"$expected"* ]] || { echo "FAIL: $python: no \"$expected\" in: $table"; exit 1; }
  done
  [[ $(grep -c '^| done | .* (2) | 2\..* | done |$' <<<"$table") == 1 ]] ||
    { echo "FAIL: $python: $table"; exit 1; }
  # EXPECTED ARGUMENT...: exit 2 with the one line EXPECTED.
  refused() {
    local expected=$1 said
    shift
    said=$("$python" "$source_dir/scripts/time_to_loss.py" "$@" 2>&1)
    [ $? -eq 2 ] && [ "$said" = "time_to_loss.py: $expected" ] ||
      { echo "FAIL: $python $*: expected exit 2 and \"$expected\", got: $said"; exit 1; }
  }
  refused 'target "abc": give a loss, a number such as 0.5' "$sweep" 1 abc
  refused "$work/bad_line/run/metrics.jsonl:1: not a JSON record (Expecting property name \
enclosed in double quotes)" "$work/bad_line" 1
  refused "$work/no_step_ms/run/metrics.jsonl:1: a step record without a number for \
\"time/step_ms\"" "$work/no_step_ms" 1
  refused "$work/none: no such directory (give a sweep's OUT_DIR)" "$work/none" 1
  echo "ok: $python: runs marked done, failed and still writing; mistakes in one line, exit 2"
done
