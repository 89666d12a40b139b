#!/usr/bin/env bash
# On NCCL, a rank that never joins a collective ends every rank within dist.timeout_s, through
# the communicator's watchdog (the host does not wait on NCCL work), with a message naming the
# operation, its sequence number and the missing rank, and a non-zero exit. The stuck rank's
# own watchdog answers the others' query: it is named with how far it got, "1 (at #1)". Two ranks, one GPU each; 10 s, as
# NCCL's start-up is bounded by the same timeout.
#   usage: expect_nccl_timeout.sh MPIRUN DIST_TESTS
set -uo pipefail
mpirun=$1 tests=$2
log=$(mktemp)
trap 'rm -f "$log"' EXIT
start=$(date +%s)
"$mpirun" -np 2 --oversubscribe -x DTRAIN_TEST_DEVICE=cuda -x DTRAIN_TEST_TIMEOUT_S=10 \
  "$tests" "[stuck]" >"$log" 2>&1
code=$?
elapsed=$(($(date +%s) - start))
cat "$log"
fail() { echo "FAIL: $*"; exit 1; }
[ "$code" -ne 0 ] || fail "exit code 0"
grep -q "all_reduce #2 (16 x Float) did not complete within dist.timeout_s = 10 s" "$log" \
  || fail "no message naming the stuck all_reduce"
grep -q "missing rank(s) 1 (at #1)" "$log" || fail "the message does not name rank 1 at #1"
[ "$elapsed" -lt 45 ] || fail "took ${elapsed} s (bound: 10 s timeout + start-up)"
echo "ok: job ended with exit code $code after ${elapsed} s"
