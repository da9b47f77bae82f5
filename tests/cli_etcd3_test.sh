#!/usr/bin/env bash
# cli_etcd3_test.sh — dlock(1) on a three-member etcd cluster with its first
# member stalled (SIGSTOP: it accepts connections and never answers). The
# clients list that member first: a new run must reach the two healthy
# members well within its -w, and a holder with ttl=10 keeps its lock for
# longer than its lease. Real cluster from tests/servers.sh. Skipped (exit 0)
# without etcd or the etcd backend.
set -u
DLOCK=${DLOCK:?set DLOCK to the dlock binary}
here=$(cd "$(dirname "$0")" && pwd)
. "$here/testlib.sh"
if ! command -v etcd >/dev/null || ! "$DLOCK" backends | grep -q '^etcd .* yes$'; then
    echo "etcd or the etcd backend missing: skipped"
    exit 0
fi
if [ -z "${DLOCK_TEST_SERVERS:-}" ]; then
    exec bash "$here/servers.sh" run etcd3 -- bash "$0" "$@"
fi
U=${DLOCK_TEST_ETCD3/ttl=2/ttl=10}
first=$(cat "$DLOCK_TEST_SERVERS/etcd3-1.pid")
TMP=$(mktemp -d "${TMPDIR:-/tmp}/dlock-cli-etcd3.XXXXXX")
trap 'kill -CONT $first 2>/dev/null; rm -rf "$TMP"' EXIT
now_ms() { date +%s%3N; }
wait_held() { # NAME: until status says held (10 s at most)
    for _ in $(seq 100); do "$DLOCK" --url "$U" status "$1" 2>/dev/null | grep -q 'held: *yes' && return 0; sleep 0.1; done
    return 1
}

# A holder (ttl=10, talking to the first member) whose member stalls: it
# keeps its lease through the two others for longer than the lease.
"$DLOCK" --url "$U" run stalled -- sleep 14 2>"$TMP/holder.err" & holder=$!
wait_held stalled || bad "the holder did not get the lock"
kill -STOP "$first"
stopped_at=$(now_ms)

# A new run, the stalled member listed first: it reaches the others. Its
# first request may spend half the op timeout (2 s) on the stalled member.
t0=$(now_ms)
"$DLOCK" --url "$U" run -w 15 other -- true 2>"$TMP/other.err"
rc=$?
took=$(( $(now_ms) - t0 ))
[ $rc = 0 ] && [ $took -lt 6000 ] && ok "first member stalled: a new run -w 15 got a free lock in $took ms" ||
    bad "first member stalled: a new run -w 15 exited $rc after $took ms: $(cat "$TMP/other.err")"

# A waiter on the holder's lock, also listing the stalled member first:
# granted once the holder is done (and not before).
"$DLOCK" --url "$U" run -w 30 stalled -- true 2>"$TMP/waiter.err" & waiter=$!

wait $holder
hrc=$?
held_for=$(( $(now_ms) - stopped_at ))
[ $hrc = 0 ] && ok "first member stalled: the ttl=10 holder kept its lock ${held_for} ms after the stall, exit 0" ||
    bad "first member stalled: the ttl=10 holder exited $hrc after ${held_for} ms: $(cat "$TMP/holder.err")"
wait $waiter
wrc=$?
[ $wrc = 0 ] && ok "first member stalled: the waiter got the lock after the holder, exit 0" ||
    bad "first member stalled: the waiter exited $wrc: $(cat "$TMP/waiter.err")"
kill -CONT "$first"
finish
