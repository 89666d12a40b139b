#!/usr/bin/env bash
# MPI's start-up is bounded by dist.timeout_s: with a second rank that never starts MPI (a
# program that only sleeps, started beside the trainer by mpirun's MPMD form), the trainer
# ends within seconds with one line naming the start-up, exit code 3, instead of waiting in
# MPI_Init for ever.   usage: start_timeout.sh TRAINER SOURCE_DIR
set -uo pipefail
trainer=$1 source=$2
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fail() { echo "FAIL: $*"; exit 1; }

start=$(date +%s)
timeout 120 "$source/scripts/mpirun.sh" --oversubscribe -np 1 "$trainer" \
  --config "$source/configs/fashion_mnist.toml" --set run.out_dir="$tmp/runs" --set dist.timeout_s=5 \
  : -np 1 sleep 110 >"$tmp/out" 2>&1
code=$?
elapsed=$(($(date +%s) - start))
cat "$tmp/out"
[ "$code" -ne 124 ] || fail "still waiting in MPI's start-up after 120 s"
[ "$code" -eq 3 ] || fail "exit code $code, expected 3"
grep -qx "error: rank 0: MPI's start-up did not complete within 5 s (dist.timeout_s): a rank did not start, or stopped while starting" \
  "$tmp/out" || fail "no line naming the start-up and its bound"
[ "$elapsed" -lt 60 ] || fail "ended after $elapsed s, the bound was 5 s"
echo "ok: the start-up ended after $elapsed s with exit code $code"
