#!/usr/bin/env bash
# DDP and ZeRO stage 2 with compressed gradients over 2 ranks: 6 steps, checkpoint, resume, 6
# more steps gives bitwise the weights of 12 straight steps (top-k residuals with DGC momentum,
# PowerSGD's residuals and warm-start Q, all in codec_rank{R}.pt); under DDP the same
# checkpoint resumed on 1 rank says that the residuals restart from zero, and trains on, and
# resumed under ZeRO-2 on 2 ranks takes the residuals (kept by parameter) as they are. The
# parameter server (configs/fashion_mnist_ps.toml, collectives, SSP(1) with exact reads) with
# one-bit pushes resumes bitwise too, and so does the messages transport with top-k pushes to a
# dedicated server; PowerSGD over the messages transport is one config error.
#   usage: ... TRAINER SOURCE_DIR
set -euo pipefail
trainer=$1 source=$2
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
run() {  # RANKS OUT_DIR [ARGS...]
  local ranks=$1 out=$2
  shift 2
  "$source/scripts/mpirun.sh" -np "$ranks" --oversubscribe "$trainer" \
    --config "$source/configs/${config:-fashion_mnist_compressed}.toml" --set run.out_dir="$out" \
    --set run.name=r --set train.max_steps=12 --set train.checkpoint_every=6 \
    --set train.keep_checkpoints=5 --set data.batch_size=16 --set model.width=8 \
    --set schedule.warmup_epochs=0.002 --set run.log_every=6 "$@" >"$out.log" 2>&1 \
    || { cat "$out.log"; exit 1; }
}
resume_from_step_6() {  # FROM TO
  mkdir -p "$2/r/checkpoints"
  cp -r "$1/r/checkpoints/step_00000006" "$2/r/checkpoints/"
}
# DGC's momentum correction replaces the optimizer's momentum.
dgc="--set dist.compression.momentum=0.5 --set optim.momentum=0 --set optim.nesterov=false"
zero2="--set dist.strategy=zero --set dist.zero.stage=2 --set dist.zero.bucket_mb=0.02"
for codec in "kind=topk $dgc" "kind=powersgd --set dist.compression.rank=2" \
             "kind=topk $dgc $zero2" "kind=powersgd --set dist.compression.rank=2 $zero2"; do
  name=${codec%% *}
  name=${name#kind=}
  strategy=ddp
  [[ $codec == *"$zero2"* ]] && strategy=zero2
  name=$strategy-$name
  # shellcheck disable=SC2086  # the codec's settings are several words
  set -- --set dist.compression.$codec --set dist.compression.warmup_steps=2
  run 2 "$tmp/$name-straight" "$@"
  test -f "$tmp/$name-straight/r/checkpoints/step_00000006/codec_rank1.pt"
  resume_from_step_6 "$tmp/$name-straight" "$tmp/$name-resumed"
  run 2 "$tmp/$name-resumed" "$@" --resume
  cmp "$tmp/$name-straight/r/checkpoints/step_00000012/model.pt" \
      "$tmp/$name-resumed/r/checkpoints/step_00000012/model.pt"
  echo "ok: resumed $name run matches the straight run bitwise"
  [[ $strategy == ddp ]] || continue
  resume_from_step_6 "$tmp/$name-straight" "$tmp/$name-one-rank"
  run 1 "$tmp/$name-one-rank" "$@" --resume
  grep -q "codec state of 2 ranks, resumed on 1: the error-feedback residuals restart from zero" \
    "$tmp/$name-one-rank.log" || { cat "$tmp/$name-one-rank.log"; exit 1; }
  test -f "$tmp/$name-one-rank/r/checkpoints/step_00000012/DONE"
  echo "ok: $name resumed on 1 rank restarts its residuals and trains on"
done
resume_from_step_6 "$tmp/ddp-topk-straight" "$tmp/ddp-to-zero2"
# shellcheck disable=SC2086
run 2 "$tmp/ddp-to-zero2" --set dist.compression.kind=topk $dgc $zero2 \
  --set dist.compression.warmup_steps=2 --resume
if grep -q "starts fresh\|restart from zero" "$tmp/ddp-to-zero2.log"; then
  cat "$tmp/ddp-to-zero2.log"
  exit 1
fi
test -f "$tmp/ddp-to-zero2/r/checkpoints/step_00000012/codec_rank1.pt"
echo "ok: a ddp top-k checkpoint resumes under ZeRO-2 with its codec state"
# Under another codec, or none, the top-k state is left: said once (by rank 0), naming every
# rank's file.
for kind in none onebit; do
  resume_from_step_6 "$tmp/ddp-topk-straight" "$tmp/topk-to-$kind"
  run 2 "$tmp/topk-to-$kind" --set dist.compression.kind=$kind --set optim.momentum=0 \
    --set optim.nesterov=false --resume
  said='codec state of "topk" (codec_rank0.pt to codec_rank1.pt), not "onebit": the codec starts'
  [[ $kind == none ]] && said='codec state of "topk" (codec_rank0.pt to codec_rank1.pt) not read'
  [ "$(grep -cF "$said" "$tmp/topk-to-$kind.log")" -eq 1 ] || { cat "$tmp/topk-to-$kind.log"; exit 1; }
  echo "ok: a top-k checkpoint resumed under codec $kind says once that its state is left"
done

config=fashion_mnist_ps
ps="--set dist.ps.transport=collectives --set dist.ps.consistency=ssp --set dist.ps.staleness=1
    --set dist.ps.ssp_reads=exact --set dist.compression.kind=onebit --set dist.compression.chunk=64
    --set dist.compression.warmup_steps=2"
# shellcheck disable=SC2086
run 2 "$tmp/ps-onebit-straight" $ps
test -f "$tmp/ps-onebit-straight/r/checkpoints/step_00000006/codec_rank1.pt"
resume_from_step_6 "$tmp/ps-onebit-straight" "$tmp/ps-onebit-resumed"
# shellcheck disable=SC2086
run 2 "$tmp/ps-onebit-resumed" $ps --resume
cmp "$tmp/ps-onebit-straight/r/checkpoints/step_00000012/model.pt" \
    "$tmp/ps-onebit-resumed/r/checkpoints/step_00000012/model.pt"
echo "ok: resumed ps one-bit run over collectives matches the straight run bitwise"
# The messages transport: top-k pushes with DGC momentum to a dedicated server under bsp, each
# worker's residuals and velocity in codec_rank{W}.pt.
msg="--set dist.ps.placement=dedicated --set dist.ps.consistency=bsp --set dist.compression.kind=topk
     $dgc --set dist.compression.warmup_steps=2"
# shellcheck disable=SC2086
run 3 "$tmp/ps-messages-straight" $msg
test -f "$tmp/ps-messages-straight/r/checkpoints/step_00000006/codec_rank1.pt"
resume_from_step_6 "$tmp/ps-messages-straight" "$tmp/ps-messages-resumed"
# shellcheck disable=SC2086
run 3 "$tmp/ps-messages-resumed" $msg --resume
cmp "$tmp/ps-messages-straight/r/checkpoints/step_00000012/model.pt" \
    "$tmp/ps-messages-resumed/r/checkpoints/step_00000012/model.pt"
echo "ok: resumed ps top-k run over messages matches the straight run bitwise"
status=0
"$source/scripts/mpirun.sh" -np 2 --oversubscribe "$trainer" \
  --config "$source/configs/fashion_mnist_ps.toml" --set run.out_dir="$tmp/ps-messages" \
  --set dist.compression.kind=powersgd >"$tmp/ps-messages.log" 2>&1 || status=$?
if [[ $status != 2 ]] || ! grep -q "\"powersgd\" is not available over the parameter server's messages transport" \
    "$tmp/ps-messages.log"; then
  cat "$tmp/ps-messages.log"
  exit 1
fi
echo "ok: PowerSGD over the messages transport is refused in one line"
