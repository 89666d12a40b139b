#!/usr/bin/env bash
# ZeRO checkpoints by partition through the trainer: under stages 1 and 3 on 2 ranks every rank
# writes its own optimizer-state file (and no optimizer.pt exists); a stage-3 checkpoint resumes
# on 3 ranks at stage 3 and stage 1, under DDP, under the parameter server, and on one rank
# from model.pt; a stage-1 checkpoint resumes at stage 2 on 3 ranks; a damaged partition file
# stops the resume with one line naming it; a save interrupted mid-write leaves the previous
# checkpoint the newest.
#   usage: ... TRAINER SOURCE_DIR
set -euo pipefail
trainer=$1 source=$2
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
common=(--config "$source/configs/fashion_mnist.toml" --set run.name=r
  --set train.checkpoint_every=6 --set train.keep_checkpoints=5 --set data.batch_size=16
  --set model.width=8 --set schedule.warmup_epochs=0.002 --set run.log_every=6)
run() {  # RANKS OUT_DIR [ARGS...]
  local ranks=$1 out=$2
  shift 2
  "$source/scripts/mpirun.sh" -np "$ranks" --oversubscribe "$trainer" "${common[@]}" \
    --set run.out_dir="$out" "$@" >"$out.log" 2>&1 || { cat "$out.log"; exit 1; }
}
resume_from() {  # CHECKPOINT RANKS NAME [ARGS...]: resumes a copy of CHECKPOINT to step 12
  local checkpoint=$1 ranks=$2 name=$3
  shift 3
  mkdir -p "$tmp/$name/r/checkpoints"
  cp -r "$checkpoint" "$tmp/$name/r/checkpoints/"
  run "$ranks" "$tmp/$name" --set train.max_steps=12 --resume "$@"
  grep -q "resumed from .*step_00000006 at step 6" "$tmp/$name.log" || { cat "$tmp/$name.log"; exit 1; }
  [ -f "$tmp/$name/r/checkpoints/step_00000012/DONE" ] || { cat "$tmp/$name.log"; exit 1; }
  echo "ok: $name"
}
expect_files() {  # DIR FILE...: exactly these optimizer files
  local dir=$1
  shift
  local found
  found=$(cd "$dir" && ls | grep -E '^(optimizer|zero_partition)' | sort | tr '\n' ' ')
  [ "$found" = "$* " ] || { echo "$dir holds $found, expected $*"; exit 1; }
}

run 2 "$tmp/s3" --set dist.strategy=zero --set dist.zero.stage=3 --set train.max_steps=6
s3=$tmp/s3/r/checkpoints/step_00000006
expect_files "$s3" optimizer_slices.pt optimizer_slices.rank0.pt optimizer_slices.rank1.pt
echo "ok: stage 3 on 2 ranks wrote one optimizer file per rank"
run 2 "$tmp/s1" --set dist.strategy=zero --set train.max_steps=6
s1=$tmp/s1/r/checkpoints/step_00000006
expect_files "$s1" optimizer.rank0.pt optimizer.rank1.pt zero_partition.pt
echo "ok: stage 1 on 2 ranks wrote one optimizer file per rank"

resume_from "$s3" 3 s3-to-3-stage3 --set dist.strategy=zero --set dist.zero.stage=3
expect_files "$tmp/s3-to-3-stage3/r/checkpoints/step_00000012" \
  optimizer_slices.pt optimizer_slices.rank0.pt optimizer_slices.rank1.pt optimizer_slices.rank2.pt
resume_from "$s3" 3 s3-to-3-stage1 --set dist.strategy=zero
resume_from "$s3" 2 s3-to-ddp --set dist.strategy=ddp
resume_from "$s3" 2 s3-to-ps --set dist.strategy=ps
resume_from "$s3" 1 s3-to-one-rank --set dist.strategy=ddp
resume_from "$s1" 3 s1-to-3-stage2 --set dist.strategy=zero --set dist.zero.stage=2

# A damaged partition file: one line naming it, and no step taken.
mkdir -p "$tmp/damaged/r/checkpoints"
cp -r "$s3" "$tmp/damaged/r/checkpoints/"
damaged=$tmp/damaged/r/checkpoints/step_00000006/optimizer_slices.rank1.pt
head -c 100 "$s3/optimizer_slices.rank1.pt" >"$damaged"
if "$source/scripts/mpirun.sh" -np 2 --oversubscribe "$trainer" "${common[@]}" \
  --set run.out_dir="$tmp/damaged" --set dist.strategy=zero --set dist.zero.stage=3 \
  --set train.max_steps=12 --resume >"$tmp/damaged.log" 2>&1; then
  cat "$tmp/damaged.log"; echo "a damaged partition file resumed"; exit 1
fi
# In rank 0's error, the one line a launcher that stops the others at once still shows.
grep -q "^error: rank 0: .*$damaged: damaged, does not load" "$tmp/damaged.log" ||
  { cat "$tmp/damaged.log"; exit 1; }
echo "ok: a damaged partition file is named"

# A save interrupted after some ranks wrote their part: the .tmp directory has partitions but
# no DONE; the resume takes step 6 and removes it.
mkdir -p "$tmp/interrupted/r/checkpoints"
cp -r "$s3" "$tmp/interrupted/r/checkpoints/"
mkdir "$tmp/interrupted/r/checkpoints/step_00000009.tmp"
cp "$s3/optimizer_slices.rank0.pt" "$tmp/interrupted/r/checkpoints/step_00000009.tmp/"
run 2 "$tmp/interrupted" --set dist.strategy=zero --set dist.zero.stage=3 \
  --set train.max_steps=12 --resume
grep -q "resumed from .*step_00000006 at step 6" "$tmp/interrupted.log" \
  || { cat "$tmp/interrupted.log"; exit 1; }
[ ! -e "$tmp/interrupted/r/checkpoints/step_00000009.tmp" ] || { echo "tmp left"; exit 1; }
echo "ok: an interrupted save leaves the previous checkpoint the newest"
