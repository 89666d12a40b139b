#!/usr/bin/env bash
# Bad input ends in one clear line and exit code 2: config mistakes, missing and corrupt
# dataset files, impossible batch sizes, a model head narrower than the labels, a run.out_dir
# that cannot be made, no --config, a run directory that holds a run, a damaged checkpoint;
# under mpirun each is said once, as a config warning is.
#   usage: bad_input.sh TRAINER SOURCE_DIR
set -uo pipefail
trainer=$1
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
failures=0

# expect_failure NAME EXPECTED_STDERR_PART -- ARGS...
expect_failure() {
  local name=$1 expected=$2
  shift 3
  "$trainer" "$@" >"$tmp/out" 2>"$tmp/err"
  local code=$?
  if [ "$code" -ne 2 ] || ! grep -qF -- "$expected" "$tmp/err" || grep -q "terminate called\|Exception raised from" "$tmp/err"; then
    echo "FAIL $name: exit $code, stderr:"; cat "$tmp/err"; failures=$((failures + 1))
  else
    echo "ok   $name: $(head -1 "$tmp/err")"
  fi
}

# Every key at its default, and the runs in the temporary directory.
: >"$tmp/defaults.toml"
cfg=(--config "$tmp/defaults.toml" --set run.out_dir="$tmp/runs")

expect_failure "no --config" "--config is required to train" --
printf '[optim]\nlrr = 0.1\n' >"$tmp/typo.toml"
expect_failure "unknown key" "typo.toml:2: optim.lrr: unknown key (did you mean optim.lr?)" -- \
  --config "$tmp/typo.toml"
expect_failure "bad override" "--set data.batch_size: expected an integer, got a string" -- \
  "${cfg[@]}" --set data.batch_size=many
expect_failure "missing dataset" 'data.path "/nonexistent/fmnist": does not exist' -- \
  "${cfg[@]}" --set data.path=/nonexistent/fmnist --set train.max_steps=1
expect_failure "dataset path that is a file" 'data.path "/etc/hostname": not a folder' -- \
  "${cfg[@]}" --set data.path=/etc/hostname --set train.max_steps=1

mkdir -p "$tmp/truncated"
for f in train-images-idx3-ubyte train-labels-idx1-ubyte t10k-images-idx3-ubyte t10k-labels-idx1-ubyte; do
  gzip -dc "/usr/share/datasets/fashion-mnist/$f.gz" | head -c 5000 >"$tmp/truncated/$f"
done
expect_failure "truncated dataset" "truncated" -- \
  "${cfg[@]}" --set data.path="$tmp/truncated" --set train.max_steps=1

expect_failure "ZeRO-3 prefetch below zero" "dist.zero.prefetch: -1 is outside [0, 1024]" -- \
  "${cfg[@]}" --set dist.strategy=zero --set dist.zero.stage=3 --set dist.zero.prefetch=-1
expect_failure "exact SSP reads over messages" "dist.ps.ssp_reads = \"exact\" needs the collective transport" -- \
  "${cfg[@]}" --set dist.strategy=ps --set dist.ps.consistency=ssp --set dist.ps.ssp_reads=exact \
  --set train.max_steps=1
expect_failure "weight prediction over messages" "dist.ps.predict_weights = true needs the collective transport" -- \
  "${cfg[@]}" --set dist.strategy=ps --set dist.ps.consistency=ssp --set dist.ps.predict_weights=true \
  --set train.max_steps=1
# The dry run of another world refuses what that world's start-up would.
expect_failure "dry run: exact SSP reads over messages" "dist.ps.ssp_reads = \"exact\" needs the collective transport" -- \
  "${cfg[@]}" --set dist.strategy=ps --set dist.ps.consistency=ssp --set dist.ps.ssp_reads=exact \
  --dry-run --world-size 3
expect_failure "dry run: a slowed rank outside the world" "debug.slow_ranks: rank 5 is not in this world of 3" -- \
  "${cfg[@]}" --set "debug.slow_ranks=[5]" --set dist.strategy=ddp --dry-run --world-size 3
expect_failure "dry run: single on several ranks" "dist.strategy = \"single\" with 2 ranks" -- \
  "${cfg[@]}" --dry-run --world-size 2
expect_failure "LAMB's clipping under async" "\"async\" with optim.max_grad_norm (LAMB's global gradient clipping)" -- \
  "${cfg[@]}" --set dist.strategy=ps --set dist.ps.consistency=async --set optim.name=lamb \
  --set optim.nesterov=false --set optim.max_grad_norm=1 --dry-run --world-size 3
expect_failure "run.name that climbs out of run.out_dir" "run.name: must be a non-empty name without '/', other than . and .." -- \
  "${cfg[@]}" --set run.name=.. --set train.max_steps=1
expect_failure "batch larger than the dataset" "exceeds the 60000 training samples" -- \
  "${cfg[@]}" --set data.batch_size=100000 --set train.max_steps=1 --set run.device=cpu
expect_failure "a head narrower than the labels" \
  "model.num_classes = 5 is fewer than the dataset's 10 classes (labels 0-9)" -- \
  "${cfg[@]}" --set model.num_classes=5 --set train.max_steps=1 --set run.device=cpu
: >"$tmp/a_file"
expect_failure "run.out_dir through a file" \
  "run.out_dir: cannot create the run's directory $tmp/a_file/" -- \
  "${cfg[@]}" --set run.out_dir="$tmp/a_file" --set train.max_steps=1 --set run.device=cpu
command -v nvidia-smi >/dev/null || expect_failure "cuda on a machine without it" "no CUDA device is usable" -- \
  "${cfg[@]}" --set run.device=cuda --set train.max_steps=1
# Kineto comes only with CUDA builds of LibTorch (the CPU machines have Debian's).
command -v nvidia-smi >/dev/null || expect_failure "profiling without Kineto" \
  "run.profile_steps: profiling needs a LibTorch with Kineto" -- \
  "${cfg[@]}" --set run.profile_steps=2 --set train.max_steps=3

# A run refused before its first step leaves no run behind: the corrected command may reuse
# the name.
"$trainer" "${cfg[@]}" --set run.name=short --set train.max_steps=2 --set train.eval_every=0 \
  >"$tmp/short.log" 2>&1 || { cat "$tmp/short.log"; failures=$((failures + 1)); }
expect_failure "resume past the run's end" "is at step 2, past this run's 1 steps" -- \
  "${cfg[@]}" --set run.name=branch --set train.max_steps=1 \
  --resume "$tmp/runs/short/checkpoints/step_00000002"
if [ -e "$tmp/runs/branch" ]; then
  echo "FAIL the refused resume left $(ls "$tmp/runs/branch")"; failures=$((failures + 1))
fi

# A run directory that holds a run is refused before anything is written into it.
mkdir -p "$tmp/runs/taken"
echo '[run]' >"$tmp/runs/taken/config.toml"
expect_failure "run directory holds a run" \
  "$tmp/runs/taken already holds a run; pass --resume to continue it or choose another run.name" \
  -- "${cfg[@]}" --set run.name=taken --set train.max_steps=1
if [ "$(ls "$tmp/runs/taken")" != config.toml ]; then
  echo "FAIL run directory holds a run: written into: $(ls "$tmp/runs/taken")"
  failures=$((failures + 1))
fi

# A damaged optimizer state: one line naming the file, not torch's stack trace.
small=("${cfg[@]}" --set run.name=damaged --set run.device=cpu --set train.max_steps=2
  --set data.batch_size=8 --set model.width=4 --set data.num_workers=0)
if "$trainer" "${small[@]}" >"$tmp/out" 2>&1; then
  checkpoint="$tmp/runs/damaged/checkpoints/step_00000002"
  truncate -s 100 "$checkpoint/optimizer.pt"
  expect_failure "damaged optimizer.pt" "$checkpoint/optimizer.pt: damaged, does not load" -- \
    "${small[@]}" --resume "$checkpoint"
else
  echo "FAIL a 2-step run for the damaged checkpoint:"; cat "$tmp/out"; failures=$((failures + 1))
fi

# Under mpirun every rank finds the same mistake: it is reported once, not once per rank, and
# alone: no banner of Open MPI's after it (MPI_ABORT's, or mpirun's on a rank's failing exit).
source_dir=$2
once_under_mpirun() {  # NAME EXPECTED_LINE ARGS...
  local name=$1 expected=$2
  shift 2
  OMP_NUM_THREADS=1 "$source_dir/scripts/mpirun.sh" -np 3 --oversubscribe "$trainer" "$@" \
    >"$tmp/out" 2>&1
  local code=$? count banner
  count=$(grep -cF -- "$expected" "$tmp/out")
  banner=$(grep -cE 'MPI_ABORT|Primary job|mpirun detected|help message|^-{20}' "$tmp/out")
  if [ "$code" -ne 2 ] || [ "$count" -ne 1 ] || [ "$banner" -ne 0 ]; then
    echo "FAIL $name under mpirun -np 3: exit $code, the line $count times, $banner banner" \
      "line(s):"; cat "$tmp/out"
    failures=$((failures + 1))
  else
    echo "ok   $name under mpirun -np 3: once, alone, exit 2"
  fi
}
once_under_mpirun "unknown flag" 'The following argument was not expected: --bogus' --bogus
once_under_mpirun "bad value" '"dpp" is not one of' "${cfg[@]}" --set dist.strategy=dpp
once_under_mpirun "missing dataset" 'data.path "/nonexistent/fmnist": does not exist' \
  "${cfg[@]}" --set run.name=mpirun_missing --set data.path=/nonexistent/fmnist \
  --set train.max_steps=1

# A warning about the config, the same on every rank, is said once too.
OMP_NUM_THREADS=1 "$source_dir/scripts/mpirun.sh" -np 3 --oversubscribe "$trainer" "${cfg[@]}" \
  --set run.name=warned --set run.device=cpu --set train.max_steps=1 --set data.batch_size=8 \
  --set model.width=4 --set dist.strategy=ddp --set dist.zero.stage=2 >"$tmp/out" 2>&1
code=$?
count=$(grep -c 'dist.zero.stage: has no effect under dist.strategy = "ddp"' "$tmp/out")
if [ "$code" -ne 0 ] || [ "$count" -ne 1 ]; then
  echo "FAIL a config warning under mpirun -np 3: exit $code, the line $count times:"; cat "$tmp/out"
  failures=$((failures + 1))
else
  echo "ok   a config warning under mpirun -np 3: once"
fi

[ "$failures" -eq 0 ] && echo "bad input: all cases exit 2 with one clear line"
exit "$failures"
