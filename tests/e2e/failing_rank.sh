#!/usr/bin/env bash
# A rank that fails ends every rank at once: with one unreadable image in an image folder, a
# 2-rank DDP run under the default dist.timeout_s (300 s) exits with code 2 within seconds,
# with one line naming the rank and the file, no rank blamed for not joining, and no banner of
# Open MPI's after it. An unreadable test image, found only by the evaluation after an epoch of
# training, ends the job the same way, but with that epoch's checkpoint written: fixed, the run
# resumes from it.
# Skipped (77) in a build without a JPEG/PNG decoder.   usage: failing_rank.sh TRAINER SOURCE_DIR
set -uo pipefail
trainer=$1 source=$2
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fail() { echo "FAIL: $*"; exit 1; }

# An 8x8 red RGB PNG, byte for byte.
png() {
  printf '\x89\x50\x4e\x47\x0d\x0a\x1a\x0a\x00\x00\x00\x0d\x49\x48\x44\x52\x00\x00\x00\x08\x00\x00\x00\x08\x08\x02\x00\x00\x00\x4b\x6d\x29\xdc\x00\x00\x00\x11\x49\x44\x41\x54\x78\xda\x63\x38\x21\x27\x87\x15\x31\x0c\x2d\x09\x00\x90\xbf\x41\x01\xcf\x70\xa1\x3c\x00\x00\x00\x00\x49\x45\x4e\x44\xae\x42\x60\x82' >"$1"
}
# 8 training images (2 ranks x batch 2 x 2 steps: every one is read in the first epoch), one
# of them corrupt.
for split in train val; do
  for class in a b; do
    mkdir -p "$tmp/images/$split/$class"
    for i in 0 1 2 3; do png "$tmp/images/$split/$class/$i.png"; done
  done
done
bad="$tmp/images/train/b/3.png"
echo "not a PNG" >"$bad"

: >"$tmp/defaults.toml"
args=(--config "$tmp/defaults.toml" --set run.device=cpu --set run.out_dir="$tmp/runs" --set model.name=simple_cnn
  --set data.dataset=image_folder --set data.path="$tmp/images" --set data.image_size=16
  --set data.batch_size=2 --set data.eval_batch_size=2 --set data.num_workers=0
  --set train.epochs=1 --set dist.strategy=ddp)

"$trainer" "${args[@]}" --set dist.strategy=single --dry-run >"$tmp/dry" 2>&1
if grep -q "this build has no JPEG/PNG decoder" "$tmp/dry"; then
  echo "skipped: this build has no JPEG/PNG decoder"
  exit 77
fi

start=$(date +%s)
timeout 60 "$source/scripts/mpirun.sh" --oversubscribe -np 2 "$trainer" "${args[@]}" \
  >"$tmp/out" 2>&1
code=$?
elapsed=$(($(date +%s) - start))
cat "$tmp/out"
[ "$code" -ne 124 ] || fail "still running after 60 s: the other rank waited for the failed one"
[ "$code" -eq 2 ] || fail "exit code $code, expected 2 (bad input)"
grep -qE "^error: rank [01]: $bad: not a JPEG or PNG" "$tmp/out" \
  || fail "no line naming the rank and $bad"
if grep -qE "missing rank|never joined|did not complete" "$tmp/out"; then
  fail "a rank was blamed for not joining"
fi
! grep -qE "MPI_ABORT|help message" "$tmp/out" || fail "Open MPI's abort banner after the line"
echo "ok: the failing rank ended the job with exit code $code after ${elapsed} s"

# The test image: every training image loads, and the epoch's training survives the failure,
# also under ZeRO-3, whose forwards gather the parameters (the ranks stop evaluating together).
png "$bad"
bad_test="$tmp/images/val/a/1.png"
for strategy in ddp zero3; do
  head -c 20 "$bad" >"$bad_test"
  run=(--set run.name=eval-$strategy --set train.epochs=2)
  [ $strategy = ddp ] || run+=(--set dist.strategy=zero --set dist.zero.stage=3)
  timeout 90 "$source/scripts/mpirun.sh" --oversubscribe -np 2 "$trainer" "${args[@]}" \
    "${run[@]}" >"$tmp/eval" 2>&1
  code=$?
  cat "$tmp/eval"
  [ "$code" -ne 124 ] || fail "$strategy: the run with a damaged test image still ran after 90 s"
  [ "$code" -eq 2 ] || fail "$strategy, damaged test image: exit code $code, expected 2"
  [ "$(grep -c "^error:" "$tmp/eval")" -eq 1 ] || fail "$strategy, damaged test image: not one error line"
  grep -qE "^error: rank [01]: $bad_test: .*\(the training up to step 2 is checkpointed\)$" \
    "$tmp/eval" || fail "$strategy: no line naming $bad_test and the checkpoint of step 2"
  [ -f "$tmp/runs/eval-$strategy/checkpoints/step_00000002/DONE" ] || fail "$strategy: no checkpoint of the epoch"
  ! grep -qE "MPI_ABORT|help message" "$tmp/eval" || fail "$strategy: Open MPI's abort banner after the line"
  png "$bad_test"
  timeout 90 "$source/scripts/mpirun.sh" --oversubscribe -np 2 "$trainer" "${args[@]}" \
    "${run[@]}" --resume >"$tmp/resumed" 2>&1 \
    || { cat "$tmp/resumed"; fail "$strategy: the run did not resume once the image was replaced"; }
  grep -q "resumed from .*step_00000002 at step 2" "$tmp/resumed" \
    || { cat "$tmp/resumed"; fail "$strategy: not resumed from the epoch's checkpoint"; }
  echo "ok: $strategy: a damaged test image ended the run with the epoch checkpointed, and it resumed"
done
