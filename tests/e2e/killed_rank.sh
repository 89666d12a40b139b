#!/usr/bin/env bash
# A rank killed mid-step (kill -9: no handler runs) ends every rank promptly, with a message
# naming it, under each strategy; the checkpoints written before stay loadable.
#   usage: killed_rank.sh TRAINER SOURCE_DIR
set -uo pipefail
. "$(dirname "$0")/lib/fashion_mnist.sh"

# ps_shared: the parameter server's p2p transport over shared-memory links, whose peers wait
# on their hosts for ring space and messages that a dead rank never gives.
for strategy in ddp zero ps ps_shared; do
  name=killed_$strategy
  extra=()
  [ $strategy = ps_shared ] && extra=(--set dist.ps.transport=p2p --set dist.ps.p2p_links=shared)
  "$source_dir/scripts/mpirun.sh" -np 3 --oversubscribe "$trainer" \
    --config "$source_dir/configs/fashion_mnist.toml" --set run.out_dir="$work" \
    --set run.name="$name" --set dist.strategy=${strategy%_shared} "${extra[@]}" \
    --set data.batch_size=8 \
    --set train.max_steps=100000 --set train.checkpoint_every=5 --set run.log_every=1 \
    --set dist.timeout_s=30 >"$work/$name.log" 2>&1 &
  launcher=$!
  # Once training runs and a checkpoint exists, kill rank 1 outright.
  for _ in $(seq 600); do
    [ -d "$work/$name/checkpoints/step_00000005" ] && break
    sleep 0.1
  done
  victim=""
  for pid in $(pgrep -f "run.name=$name"); do
    if tr '\0' '\n' <"/proc/$pid/environ" 2>/dev/null | grep -qx "OMPI_COMM_WORLD_RANK=1"; then
      victim=$pid
    fi
  done
  [ -n "$victim" ] || { echo "FAIL: $strategy: rank 1 not found"; tail "$work/$name.log"; exit 1; }
  start=$(date +%s)
  kill -9 "$victim"
  # Well inside dist.timeout_s: the others must not wait it out.
  for _ in $(seq 300); do kill -0 "$launcher" 2>/dev/null || break; sleep 0.1; done
  if kill -0 "$launcher" 2>/dev/null; then
    kill -9 "$launcher"
    echo "FAIL: $strategy: the job still ran 30 s after rank 1 was killed"
    exit 1
  fi
  wait "$launcher"
  status=$?
  took=$(($(date +%s) - start))
  [ "$status" -ne 0 ] || { echo "FAIL: $strategy: exit status 0 after a killed rank"; exit 1; }
  grep -q "rank 1" "$work/$name.log" ||
    { echo "FAIL: $strategy: no message names rank 1"; tail "$work/$name.log"; exit 1; }
  compgen -G "$work/$name/checkpoints/step_*/DONE" >/dev/null ||
    { echo "FAIL: $strategy: no complete checkpoint left"; exit 1; }
  echo "$strategy: rank 1 killed; every rank ended in $took s (exit $status), checkpoint intact"
done
