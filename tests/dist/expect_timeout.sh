#!/usr/bin/env bash
# A rank that never joins a collective ends every rank within dist.timeout_s (3 s here), with a
# message naming the operation, its sequence number and the missing rank, and a non-zero exit.
#   usage: expect_timeout.sh MPIRUN DIST_TESTS
set -uo pipefail
mpirun=$1 tests=$2
log=$(mktemp)
trap 'rm -f "$log"' EXIT
start=$(date +%s)
"$mpirun" -np 3 --oversubscribe "$tests" "[stuck]" >"$log" 2>&1
code=$?
elapsed=$(($(date +%s) - start))
cat "$log"
fail() { echo "FAIL: $*"; exit 1; }
[ "$code" -ne 0 ] || fail "exit code 0"
grep -q "all_reduce #2 (16 x Float) did not complete within dist.timeout_s = 3 s" "$log" \
  || fail "no message naming the stuck all_reduce"
grep -q "missing rank(s) 2 (no answer)" "$log" || fail "the message does not name rank 2"
[ "$elapsed" -lt 30 ] || fail "took ${elapsed} s (bound: 3 s timeout + start-up)"
echo "ok: job ended with exit code $code after ${elapsed} s"
