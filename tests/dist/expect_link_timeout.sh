#!/usr/bin/env bash
# A rank that never sends over a shared link (dist/comm/shared_link.h) ends every rank within
# dist.timeout_s (3 s here), with a message naming the receive, the sender and what it had
# sent, and a non-zero exit.
#   usage: expect_link_timeout.sh MPIRUN DIST_TESTS
set -uo pipefail
mpirun=$1 tests=$2
log=$(mktemp)
trap 'rm -f "$log"' EXIT
start=$(date +%s)
"$mpirun" -np 3 --oversubscribe "$tests" "[stuck_link]" >"$log" 2>&1
code=$?
elapsed=$(($(date +%s) - start))
cat "$log"
fail() { echo "FAIL: $*"; exit 1; }
[ "$code" -ne 0 ] || fail "exit code 0"
grep -q "receive from rank 2 over a shared link, message #0 (64 bytes), did not complete within dist.timeout_s = 3 s: rank 2 has sent 0 message(s)" "$log" \
  || fail "no message naming the stuck receive and its sender"
[ "$elapsed" -lt 30 ] || fail "took ${elapsed} s (bound: 3 s timeout + start-up)"
echo "ok: job ended with exit code $code after ${elapsed} s"
