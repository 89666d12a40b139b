#!/usr/bin/env bash
# DDP, ZeRO-1, ZeRO-2, ZeRO-3 and the parameter server (bsp) over 2 ranks: 6 steps, checkpoint,
# resume, 6 more steps gives bitwise the weights of 12 straight steps (momentum, sharded or
# not, on servers or not, and BatchNorm statistics restored on every rank); and so does a DDP
# checkpoint resumed under ZeRO-1, ZeRO-2 and ZeRO-3.
#   usage: ... TRAINER SOURCE_DIR
set -euo pipefail
trainer=$1 source=$2
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
run() {  # OUT_DIR [ARGS...]
  local out=$1
  shift
  "$source/scripts/mpirun.sh" -np 2 --oversubscribe "$trainer" \
    --config "$source/configs/fashion_mnist.toml" --set run.out_dir="$out" --set run.name=r \
    --set train.max_steps=12 --set train.checkpoint_every=6 --set train.keep_checkpoints=5 \
    --set data.batch_size=16 --set model.width=8 --set schedule.warmup_epochs=0.002 \
    --set run.log_every=6 "$@" >"$out.log" 2>&1 || { cat "$out.log"; exit 1; }
}
args_of() {  # STRATEGY: zeroN is zero at stage N
  case $1 in
    zero2|zero3) echo "--set dist.strategy=zero --set dist.zero.stage=${1#zero}" ;;
    *) echo "--set dist.strategy=$1" ;;
  esac
}
for strategy in ddp zero zero2 zero3 ps; do
  # shellcheck disable=SC2046 # the arguments split on purpose
  run "$tmp/$strategy-straight" $(args_of $strategy)
  mkdir -p "$tmp/$strategy-resumed/r/checkpoints"
  cp -r "$tmp/$strategy-straight/r/checkpoints/step_00000006" "$tmp/$strategy-resumed/r/checkpoints/"
  # shellcheck disable=SC2046
  run "$tmp/$strategy-resumed" $(args_of $strategy) --resume
  grep -q "resumed from .*step_00000006 at step 6" "$tmp/$strategy-resumed.log" \
    || { cat "$tmp/$strategy-resumed.log"; exit 1; }
  cmp "$tmp/$strategy-straight/r/checkpoints/step_00000012/model.pt" \
      "$tmp/$strategy-resumed/r/checkpoints/step_00000012/model.pt"
  echo "ok: resumed $strategy run matches the straight run bitwise"
done
for zero in zero zero2 zero3; do
  mkdir -p "$tmp/ddp-to-$zero/r/checkpoints"
  cp -r "$tmp/ddp-straight/r/checkpoints/step_00000006" "$tmp/ddp-to-$zero/r/checkpoints/"
  # shellcheck disable=SC2046
  run "$tmp/ddp-to-$zero" $(args_of $zero) --resume
  stage=${zero#zero}; stage=${stage:-1}
  grep -q "written by strategy \"ddp\", resumed under \"zero stage $stage\"" "$tmp/ddp-to-$zero.log" \
    || { cat "$tmp/ddp-to-$zero.log"; exit 1; }
  cmp "$tmp/ddp-straight/r/checkpoints/step_00000012/model.pt" \
      "$tmp/ddp-to-$zero/r/checkpoints/step_00000012/model.pt"
  echo "ok: a DDP checkpoint resumed under $zero matches the straight DDP run bitwise"
done
