#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# cli_etcd3_test.sh — dlock(1) on a three-member etcd cluster with its first
# member stalled (SIGSTOP: it accepts connections and never answers). The
# clients list that member first: a new run must reach the two healthy
# members well within its -w, and a holder with ttl=10 keeps its lock for
# longer than its lease. Then two members stalled for 4 s (no quorum):
# a waiter with time left waits on instead of giving up. Real cluster from tests/servers.sh. Skipped (exit 77)
# without etcd or the etcd backend.
set -u
. "$(dirname "$0")/testlib.sh"
preamble
need_etcd "$DLOCK"
in_servers etcd3
U=${DLOCK_TEST_ETCD3/ttl=2/ttl=10}
first=$(cat "$DLOCK_TEST_SERVERS/etcd3-1.pid")
TMP=$(mktemp -d "${TMPDIR:-/tmp}/dlock-cli-etcd3.XXXXXX")
trap 'kill -CONT $first 2>/dev/null; rm -rf "$TMP"' EXIT
now_ms() { date +%s%3N; }

# The first member must be a follower: a stalled leader is an election,
# which is not what is tested here (etcdctl move-leader hands it on).
ports=$(echo "$DLOCK_TEST_ETCD3" | sed -E 's|etcd://([^?]*).*|\1|; s|127.0.0.1:||g; s|,| |g')
set -- $ports
status() { # PORT: "MEMBER_ID LEADER_ID" (hex, as etcdctl move-leader takes them)
    ETCDCTL_API=3 etcdctl --endpoints "http://127.0.0.1:$1" endpoint status -w json 2>/dev/null |
        python3 -c 'import json,sys; s=json.load(sys.stdin)[0]["Status"]; print("%x %x" % (s["header"]["member_id"], s["leader"]))'
}
read -r id1 lead <<<"$(status "$1")"
if [ "$id1" = "$lead" ]; then
    read -r id2 _ <<<"$(status "$2")"
    ETCDCTL_API=3 etcdctl --endpoints "http://127.0.0.1:$1" move-leader "$id2" >/dev/null ||
        bad "etcdctl move-leader failed"
fi

# A holder (ttl=10, talking to the first member) whose member stalls: it
# keeps its lease through the two others for longer than the lease.
"$DLOCK" --url "$U" run stalled -- sleep 14 2>"$TMP/holder.err" & holder=$!
wait_held "$U" stalled || bad "the holder did not get the lock"
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

# A waiter through a transient loss of the leader: two members stalled for
# 4 s (the waiter's own among them, so that it reads the queue while there
# is no quorum); with -w 60 it waits on and gets the lock once the holder
# (kept through the outage) is done. The holder's ttl is 15: its last
# keep-alive before the outage may be ttl/4 old, and after it the two
# members resume, elect a leader and serve its next keep-alive. That took
# more than the 3.5 s a ttl of 10 left once in CI (ASan, three tests at a
# time on two cores), and the holder rightly gave its lock up.
second=$(cat "$DLOCK_TEST_SERVERS/etcd3-2.pid")
trap 'kill -CONT $first $second 2>/dev/null; rm -rf "$TMP"' EXIT
sleep 1 # (the first member catches up)
# The holder ends when told, once the cluster serves again (a status read
# needs the quorum): a fixed `sleep 8` ended inside the outage on a loaded
# CI machine, and its release, unconfirmed there, exited 69.
U15=${DLOCK_TEST_ETCD3/ttl=2/ttl=15}
t0=$(now_ms)
"$DLOCK" --url "$U15" run transient -- sh -c "$(holds_until "$TMP/end2")" 2>"$TMP/holder2.err" &
holder=$!
wait_held "$U15" transient || bad "the holder did not get the lock"
held_at=$(( $(now_ms) - t0 ))
"$DLOCK" --url "$U" run -w 60 transient -- true 2>"$TMP/waiter2.err" & waiter=$!
sleep 1
stop_at=$(( $(now_ms) - t0 ))
kill -STOP "$first" "$second"
sleep 4
kill -CONT "$first" "$second"
cont_at=$(( $(now_ms) - t0 ))
for _ in $(seq 300); do
    "$DLOCK" --url "$U" status transient >/dev/null 2>&1 && break
    sleep 0.1
done
served_at=$(( $(now_ms) - t0 ))
touch "$TMP/end2"
wait $holder
hrc=$?
wait $waiter
wrc=$?
[ $hrc = 0 ] && ok "no quorum for 4 s: the ttl=15 holder kept its lock, exit 0 (a status read answered $((served_at - cont_at)) ms after the outage)" ||
    bad "no quorum for 4 s: the ttl=15 holder exited $hrc (ms from its start: held by $held_at," \
        "stalled at $stop_at, resumed at $cont_at, a status read answered at $served_at):" \
        "$(cat "$TMP/holder2.err")"
[ $wrc = 0 ] && ok "no quorum for 4 s: the -w 60 waiter waited on and got the lock, exit 0" ||
    bad "no quorum for 4 s: the -w 60 waiter exited $wrc: $(cat "$TMP/waiter2.err")"
finish
