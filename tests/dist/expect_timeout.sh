#!/usr/bin/env bash
# A rank that never takes part ends every rank within dist.timeout_s (3 s here), with a message
# naming what waited for it, and a non-zero exit. TAG picks the case of stuck_rank.cpp (default
# [stuck], a collective); each MESSAGE must appear in the output (default: the all_reduce, its
# sequence number and the missing rank), in the output or in the ranks' log files (each rank
# writes one under DTRAIN_TEST_LOG_DIR: tests/dist_main.cpp).
#   usage: expect_timeout.sh MPIRUN DIST_TESTS [TAG MESSAGE...]
set -uo pipefail
mpirun=$1 tests=$2
tag=${3:-[stuck]}
messages=("${@:4}")
[ ${#messages[@]} -gt 0 ] || messages=(
  "all_reduce #2 (16 x Float) did not complete within dist.timeout_s = 3 s"
  "missing rank(s) 2 (no answer)")
log=$(mktemp)
logs=$(mktemp -d)
trap 'rm -rf "$log" "$logs"' EXIT
start=$(date +%s)
DTRAIN_TEST_LOG_DIR=$logs "$mpirun" -np 3 --oversubscribe -x DTRAIN_TEST_LOG_DIR "$tests" "$tag" \
  >"$log" 2>&1
code=$?
for file in "$logs"/*.log; do
  [ -e "$file" ] && { echo "== $(basename "$file")"; cat "$file"; } >>"$log"
done
elapsed=$(($(date +%s) - start))
cat "$log"
fail() { echo "FAIL: $*"; exit 1; }
[ "$code" -ne 0 ] || fail "exit code 0"
for message in "${messages[@]}"; do
  grep -qF "$message" "$log" || fail "no message \"$message\""
done
[ "$elapsed" -lt 30 ] || fail "took ${elapsed} s (bound: 3 s timeout + start-up)"
echo "ok: job ended with exit code $code after ${elapsed} s"
