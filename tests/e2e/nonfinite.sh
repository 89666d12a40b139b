#!/usr/bin/env bash
# A NaN loss on one rank (debug.nan_loss_steps, debug.nan_loss_ranks) through the trainer,
# under mpirun, 2 ranks:
#   - train.nonfinite = "skip", ddp and zero (stages 1, 2 and 3): the step is skipped on every
#     rank with one warning and counted; all four still take the same steps (the same loss at
#     the end);
#     the checkpoint written after the skip resumes to the straight run's loss, bit for bit;
#   - train.nonfinite = "stop", ddp and ps: the run ends non-zero with a line naming the
#     divergence, and the checkpoint before it loads.
#   usage: nonfinite.sh TRAINER SOURCE_DIR
set -uo pipefail
. "$(dirname "$0")/lib/fashion_mnist.sh"
config="$source_dir/configs/fashion_mnist.toml"
fail() { echo "FAIL: $*"; exit 1; }
train() {  # NAME [ARGS...]
  local name=$1
  shift
  "$source_dir/scripts/mpirun.sh" -np 2 --oversubscribe "$trainer" --config "$config" \
    --set run.out_dir="$work" --set run.name="$name" --set data.batch_size=16 \
    --set run.log_every=5 "$@" >"$work/$name.log" 2>&1
}
final_loss() { grep -o 'step 10/10 | epoch 0 | loss [0-9.]*' "$work/$1.log" | grep -o '[0-9.]*$'; }
nan_on_rank_1=(--set "debug.nan_loss_steps=[3]" --set "debug.nan_loss_ranks=[1]")

strategy_args() {  # STRATEGY: zeroN is zero at stage N
  case $1 in
    zero2|zero3) echo "--set dist.strategy=zero --set dist.zero.stage=${1#zero}" ;;
    *) echo "--set dist.strategy=$1" ;;
  esac
}
for strategy in ddp zero zero2 zero3; do
  # shellcheck disable=SC2046 # the arguments split on purpose
  train "skip_$strategy" $(strategy_args $strategy) --set train.nonfinite=skip \
    --set train.max_steps=10 --set train.checkpoint_every=5 "${nan_on_rank_1[@]}" ||
    { tail "$work/skip_$strategy.log"; fail "$strategy: a skipped NaN step ended the run"; }
  [ "$(grep -c 'step 3: loss is nan; its update is skipped' "$work/skip_$strategy.log")" = 1 ] ||
    fail "$strategy: not one warning for step 3"
  grep -q '"loss/skipped_steps":1' "$work/skip_$strategy/metrics.jsonl" ||
    fail "$strategy: the skipped step is not counted"
done
for zero in zero zero2 zero3; do
  [ -n "$(final_loss skip_ddp)" ] && [ "$(final_loss skip_ddp)" = "$(final_loss skip_$zero)" ] ||
    fail "ddp and $zero disagree after the skipped step:" \
      "$(final_loss skip_ddp) $(final_loss skip_$zero)"
done
echo "ok: a NaN on rank 1 skips step 3 on every rank; ddp, zero, zero2 and zero3 end at loss" \
  "$(final_loss skip_ddp)"

# The step-5 checkpoint (after the skip) resumed to step 10: the straight run's loss.
mkdir -p "$work/resumed/checkpoints"
cp -r "$work/skip_ddp/checkpoints/step_00000005" "$work/resumed/checkpoints/"
train resumed --resume --set train.nonfinite=skip --set train.max_steps=10 \
  --set train.checkpoint_every=5 || { tail "$work/resumed.log"; fail "the resume failed"; }
[ "$(final_loss resumed)" = "$(final_loss skip_ddp)" ] ||
  fail "resumed after the skip: loss $(final_loss resumed), straight $(final_loss skip_ddp)"
echo "ok: the checkpoint after the skipped step resumes to the same loss"

for strategy in ddp ps; do
  train "stop_$strategy" --set dist.strategy=$strategy --set train.nonfinite=stop \
    --set train.max_steps=10 --set train.checkpoint_every=2 "${nan_on_rank_1[@]}" &&
    fail "$strategy: a NaN loss under nonfinite = stop ended in exit 0"
  # Found at the next checkpoint (step 4) or report, whichever comes first.
  grep -Eq 'the weights hold NaN or Inf, so they are not checkpointed|training diverged' \
    "$work/stop_$strategy.log" ||
    { tail "$work/stop_$strategy.log"; fail "$strategy: no line names the divergence"; }
  test -s "$work/stop_$strategy/checkpoints/step_00000002/model.pt" ||
    fail "$strategy: the checkpoint before the NaN is gone"
  mkdir -p "$work/after_$strategy/checkpoints"
  cp -r "$work/stop_$strategy/checkpoints/step_00000002" "$work/after_$strategy/checkpoints/"
  train "after_$strategy" --resume --set dist.strategy=$strategy --set train.max_steps=4 ||
    { tail "$work/after_$strategy.log"; fail "$strategy: the checkpoint before the NaN"; }
done
echo "ok: nonfinite = stop ends ddp and ps with the divergence named; their last checkpoint loads"
