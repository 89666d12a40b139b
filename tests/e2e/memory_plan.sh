#!/usr/bin/env bash
# The dry run's model-state memory prediction against what runs measure: for ddp, ZeRO stages
# 1, 2 and 3 and the parameter server (colocated; dedicated at 3 ranks), `--dry-run --world-size N
# --dry-run-json` predicts, a short run under mpirun -np N (2 and 3, oversubscribed) reports
# rank 0's memory/* metrics, and each is within 5% of the prediction (the acceptance bound;
# they are expected to be equal). The ps reports its optimizer state only. With a gradient codec
# (dist.compression) its state (memory/codec_state_mb) is checked too: residuals, DGC's
# momentum, PowerSGD's factors and buffers, over ddp's, ZeRO-2's and the ps's buckets. A dry run under
# mpirun predicts what --world-size predicts for the same N. Bad input: a world size that is
# not a whole number of at least 1, or --world-size without --dry-run: one line, exit 2.
#   usage: memory_plan.sh TRAINER SOURCE_DIR
set -uo pipefail
. "$(dirname "$0")/lib/fashion_mnist.sh"
config="$source_dir/configs/fashion_mnist.toml"
fail() { echo "FAIL: $*"; exit 1; }
# Small and short: CI has 2 cores.
common=(--config "$config" --set run.out_dir="$work" --set model.width=8
        --set data.batch_size=16 --set train.max_steps=4 --set run.log_every=2
        --set train.keep_checkpoints=0)

# check RANKS NAME [SETTINGS...]: predicts, trains, compares.
check() {
  local ranks=$1 name=$2
  shift 2
  "$trainer" "${common[@]}" --set run.name="$name" "$@" --dry-run --world-size "$ranks" \
    --dry-run-json "$work/$name.json" >"$work/$name.dry.log" 2>&1 ||
    { cat "$work/$name.dry.log"; fail "$name: the dry run failed"; }
  "$source_dir/scripts/mpirun.sh" -np "$ranks" --oversubscribe "$trainer" "${common[@]}" \
    --set run.name="$name" "$@" >"$work/$name.log" 2>&1 ||
    { tail "$work/$name.log"; fail "$name: the run failed"; }
  python3 - "$work/$name.json" "$work/$name/metrics.jsonl" "$name" <<'PY' || exit 1
import json, sys
prediction = json.load(open(sys.argv[1]))
rank0 = prediction["ranks"][0]
records = [r for r in map(json.loads, open(sys.argv[2])) if "memory/optimizer_state_mb" in r]
measured = records[-1]
keys = ["parameters_mb", "gradients_mb", "optimizer_state_mb"]
if not all("memory/" + k in measured for k in keys):
    keys = ["optimizer_state_mb"]  # the parameter server reports its state only
codec = [r for r in map(json.loads, open(sys.argv[2])) if "memory/codec_state_mb" in r]
if codec:  # a codec's state is reported in its own records
    measured = dict(measured, **{"memory/codec_state_mb": codec[-1]["memory/codec_state_mb"]})
    keys.append("codec_state_mb")
elif rank0["codec_state_mb"] > 0:
    sys.exit(f"FAIL: {sys.argv[3]}: codec state predicted, none reported")
for key in keys:
    want, got = rank0[key], measured["memory/" + key]
    print(f"{sys.argv[3]}: {key} predicted {want:.4f} MiB, measured {got:.4f} MiB")
    if abs(got - want) > 0.05 * abs(want) + 1e-9:
        sys.exit(f"FAIL: {sys.argv[3]}: {key} measured {got} MiB, not within 5% of {want}")
PY
  echo "ok: $name at $ranks ranks within 5% of the prediction"
}

for ranks in 2 3; do
  check "$ranks" "ddp_np$ranks" --set dist.strategy=ddp
  check "$ranks" "zero1_np$ranks" --set dist.strategy=zero --set dist.zero.stage=1 \
    --set optim.name=adamw --set optim.lr=0.001 --set optim.nesterov=false
  # Buckets of 0.05 MiB cut the model into several, each padded to a multiple of the ranks.
  check "$ranks" "zero2_np$ranks" --set dist.strategy=zero --set dist.zero.stage=2 \
    --set dist.zero.bucket_mb=0.05
  check "$ranks" "zero3_np$ranks" --set dist.strategy=zero --set dist.zero.stage=3
  check "$ranks" "ps_np$ranks" --set dist.strategy=ps --set dist.ps.chunk_mb=0.02
done
check 3 ps_dedicated_np3 --set dist.strategy=ps --set dist.ps.placement=dedicated
check 2 ddp_powersgd_np2 --set dist.strategy=ddp --set dist.compression.kind=powersgd
# At a rank that shrinks no tensor every bucket is sent as it is: no codec state at all.
check 2 ddp_powersgd_exact_np2 --set dist.strategy=ddp --set dist.compression.kind=powersgd \
  --set dist.compression.rank=1024
check 3 zero2_dgc_np3 --set dist.strategy=zero --set dist.zero.stage=2 \
  --set dist.zero.bucket_mb=0.05 --set dist.compression.kind=topk \
  --set dist.compression.momentum=0.9 --set optim.momentum=0 --set optim.nesterov=false
check 3 zero2_powersgd_np3 --set dist.strategy=zero --set dist.zero.stage=2 \
  --set dist.zero.bucket_mb=0.05 --set dist.compression.kind=powersgd
check 2 ps_collectives_topk_np2 --set dist.strategy=ps --set dist.ps.transport=collectives \
  --set dist.compression.kind=topk
# A dedicated server pushes nothing: no codec state there (rank 0 is a worker).
check 3 ps_dedicated_onebit_np3 --set dist.strategy=ps --set dist.ps.placement=dedicated \
  --set dist.compression.kind=onebit
python3 - "$work/ps_dedicated_onebit_np3.json" <<'PY' || fail "a dedicated server's codec state"
import json, sys
ranks = json.load(open(sys.argv[1]))["ranks"]
assert ranks[0]["codec_state_mb"] > 0 and ranks[2]["codec_state_mb"] == 0, ranks
# The paper has no figure for a parameter server: null, as the table's "-".
rows = json.load(open(sys.argv[1]))["strategies"]
assert all((r["paper_total_mb"] is None) == r["strategy"].startswith("ps") for r in rows), rows
PY
grep -q "^  rank 2 takes no data and runs on the CPU" "$work/ps_dedicated_onebit_np3.dry.log" ||
  { cat "$work/ps_dedicated_onebit_np3.dry.log"; fail "no 'rank 2 takes no data' line"; }
# With no ranks started, --world-size still says what the start-up would: the ps plan and
# the global batch over the ranks that take data (2 workers beside the dedicated server).
for name in ps_np3 ps_dedicated_np3; do
  for line in "ps plan: [^$]*" "global batch [0-9]* (.* micro-steps) | [0-9]* steps/epoch"; do
    said=$(grep -o "$line" "$work/$name.dry.log" | head -1)
    [ -n "$said" ] && grep -qF "$said" "$work/$name.log" ||
      { cat "$work/$name.dry.log"; fail "$name: --world-size did not say what the run did: $line"; }
  done
done
grep -q "global batch 32 (2 rank(s) x 16" "$work/ps_dedicated_np3.dry.log" ||
  fail "ps_dedicated_np3: the dry run's batch is not over the 2 workers"
echo "ok: --world-size gives the run's ps plan and global batch"

# Under mpirun, the dry run predicts for its own world: the same as --world-size.
"$source_dir/scripts/mpirun.sh" -np 2 --oversubscribe "$trainer" "${common[@]}" \
  --set run.name=zero2_np2 --set dist.strategy=zero --set dist.zero.stage=2 \
  --set dist.zero.bucket_mb=0.05 --dry-run \
  --dry-run-json "$work/launched.json" >"$work/launched.log" 2>&1 ||
  { cat "$work/launched.log"; fail "the dry run under mpirun failed"; }
python3 - "$work/launched.json" "$work/zero2_np2.json" <<'PY' || fail "the two dry runs differ"
import json, sys
a, b = (json.load(open(p)) for p in sys.argv[1:])
assert a["world_size"] == 2 and a["ranks"] == b["ranks"], (a["ranks"], b["ranks"])
PY
grep -q "every strategy at 2 rank(s)" "$work/launched.log" || fail "no comparison table"
echo "ok: a dry run under mpirun -np 2 predicts what --world-size 2 does"

# expect_bad NAME EXPECTED ARGS...: one line naming the problem, exit 2.
expect_bad() {
  local name=$1 expected=$2
  shift 2
  "$trainer" "${common[@]}" "$@" >"$work/bad.out" 2>&1
  local code=$?
  [ "$code" -eq 2 ] && [ "$(wc -l <"$work/bad.out")" -eq 1 ] &&
    grep -qF -- "$expected" "$work/bad.out" ||
    { cat "$work/bad.out"; fail "$name: exit $code, expected one line with: $expected"; }
  echo "ok: $name: $(cat "$work/bad.out")"
}
expect_bad "world size 0" '--world-size "0": give the number of ranks' --dry-run --world-size 0
expect_bad "world size not a number" '--world-size "two"' --dry-run --world-size two
expect_bad "world size not whole" '--world-size "2.5"' --dry-run --world-size 2.5
expect_bad "world size without a dry run" "--world-size is for a dry run" --world-size 2
expect_bad "dedicated servers leave no worker" "leave no worker among 1 rank(s)" --dry-run \
  --world-size 1 --set dist.strategy=ps --set dist.ps.placement=dedicated
expect_bad "global batch past the data" "global batch 80000 at 2 rank(s) exceeds the 60000" \
  --dry-run --world-size 2 --set data.batch_size=40000
# A warmup longer than a run of whole epochs: the same warning as the run's start-up.
"$trainer" "${common[@]}" --set train.max_steps=0 --set train.epochs=1 \
  --set schedule.warmup_epochs=2 --dry-run --world-size 2 >"$work/warmup.out" 2>&1 ||
  { cat "$work/warmup.out"; fail "the dry run with a long warmup failed"; }
grep -q "^warning: schedule.warmup_epochs = 2 is 3750 steps, longer than the run's 1875" \
  "$work/warmup.out" || { cat "$work/warmup.out"; fail "no warning of a warmup past the run"; }
echo "ok: --world-size warns of a warmup longer than the run"
