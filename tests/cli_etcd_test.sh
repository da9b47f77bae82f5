#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# cli_etcd_test.sh — dlock(1) on etcd, the hostile cases: what one run
# writes; a key deleted during a run is a loss; a run longer than
# the lease keeps its lock; conflicts with every -E code run nothing;
# SIGTERM while waiting leaves no key; kill -9 of a holder frees the lock
# when its lease runs out; a lease revoked from outside stops the command at
# once; a holder whose network freezes (a TCP relay SIGSTOPped) has its
# command stopped before the server lets another client in. Real server
# from tests/servers.sh. Skipped (exit 77) without etcd or the etcd backend.
set -u
. "$(dirname "$0")/testlib.sh"
preamble
need_etcd "$DLOCK"
in_servers etcd
. "$here/servers.sh" # srv_free_port
U=$DLOCK_TEST_ETCD # ttl=2: a lock's span is 2 s
port=$(cat "$DLOCK_TEST_SERVERS/etcd.port")
ctl() { ETCDCTL_API=3 etcdctl --endpoints "http://127.0.0.1:$port" "$@"; }
TMP=$(mktemp -d "${TMPDIR:-/tmp}/dlock-cli-etcd.XXXXXX")
relay=
trap '[ -n "$relay" ] && { kill -CONT $relay; kill -9 $relay; } 2>/dev/null; rm -rf "$TMP"' EXIT
now_ms() { date +%s%3N; }

# What one run writes, by the server's own count (first, before any lease of
# this script can expire in the count): the lease's grant, the queueing
# transaction, and the revocation that is the release — 3 raft entries, 2
# revisions (etcdctl lock NAME true: grant, put, delete, and its lease's
# expiry a minute later). The name's marker is written by the first run.
st() { ctl endpoint status -w json | python3 -c 'import json,sys; s=json.load(sys.stdin)[0]["Status"]; print(s["raftIndex"], s["header"]["revision"])'; }
"$DLOCK" --url "$U" run writes -- true || bad "run writes: exit $?"
read -r raft0 rev0 < <(st)
for _ in 1 2 3; do "$DLOCK" --url "$U" run writes -- true || bad "run writes: exit $?"; done
read -r raft1 rev1 < <(st)
[ $((raft1 - raft0)) = 9 ] && [ $((rev1 - rev0)) = 6 ] &&
    ok "3 runs wrote 9 raft entries, 6 revisions" ||
    bad "3 runs wrote $((raft1 - raft0)) raft entries, $((rev1 - rev0)) revisions (expected 9, 6)"
# Its key deleted from outside while the command runs: exit 75, whether the
# client's watch or the release's check finds it.
out=$("$DLOCK" --url "$U" run delrun -- sh -c \
    "ETCDCTL_API=3 etcdctl --endpoints http://127.0.0.1:$port del --prefix dlock/delrun/ >/dev/null" 2>&1)
rc=$?
[ $rc = 75 ] && ok "key deleted during a run: exit 75" || bad "key deleted during a run: exit $rc: $out"
[ -z "$(ctl get --prefix dlock/.clients/ --keys-only)" ] && ok "no client key left" ||
    bad "client keys left: $(ctl get --prefix dlock/.clients/ --keys-only)"

# A run more than twice as long as the lease: kept alive, exit 0.
"$DLOCK" --url "$U" run long -- sleep 5 2>"$TMP/long.err"
rc=$?
[ $rc = 0 ] && ok "a 5 s run on a 2 s lease keeps its lock" ||
    bad "a 5 s run on a 2 s lease: exit $rc: $(cat "$TMP/long.err")"

# Conflicts: nothing runs, whatever the exit code asked for.
"$DLOCK" --url "$U" run held -- sh -c "$(holds_until "$TMP/held.go")" & holder=$!
wait_held "$U" held
for e in 0 3 75; do
    out=$("$DLOCK" --url "$U" run -n -E $e held -- echo RAN 2>/dev/null)
    rc=$?
    [ $rc = $e ] && [ -z "$out" ] && ok "conflict with -n -E $e: exit $e, nothing ran" ||
        bad "conflict with -n -E $e: exit $rc, output '$out'"
done
out=$("$DLOCK" --url "$U" run -w 2 -E 0 held -- echo RAN 2>"$TMP/w.err")
rc=$?
[ $rc = 0 ] && [ -z "$out" ] && ok "conflict with -w 2 -E 0: nothing ran" ||
    bad "conflict with -w 2 -E 0: exit $rc, output '$out', said: $(cat "$TMP/w.err")"
# SIGTERM while waiting: the waiter goes, and so does its key.
"$DLOCK" --url "$U" run -w 10 held -- echo RAN >"$TMP/int.out" 2>/dev/null & w=$!
sleep 0.5
kill -TERM $w
wait $w
rc=$?
[ $rc != 0 ] && [ ! -s "$TMP/int.out" ] && ok "SIGTERM while waiting: exit $rc, nothing ran" ||
    bad "SIGTERM while waiting: exit $rc, ran: $(cat "$TMP/int.out")"
n=$(ctl get --prefix dlock/held/ --keys-only | grep -c .)
[ "$n" = 1 ] && ok "SIGTERM while waiting: no key left (only the holder's)" ||
    bad "SIGTERM while waiting: $n keys under dlock/held/"
touch "$TMP/held.go"
wait $holder

# kill -9 of a holder: the lock is free once its lease runs out.
"$DLOCK" --url "$U" run killed -- sleep 30 & h=$!
wait_held "$U" killed
killed_at=$(now_ms)
kill -9 $h
"$DLOCK" --url "$U" run -w 10 killed -- true 2>/dev/null
rc=$?
[ $rc = 0 ] && ok "kill -9 of a holder: the lock was free after $(( $(now_ms) - killed_at )) ms (lease 2 s)" ||
    bad "kill -9 of a holder: the next run exited $rc"

# The holder's lease revoked from outside: its command is stopped at once.
"$DLOCK" --url "etcd://127.0.0.1:$port?ttl=30" run revoked -- \
    sh -c "trap 'date +%s%3N >$TMP/revoked; exit 1' TERM; sleep 20 & wait" 2>/dev/null & h=$!
wait_held "$U" revoked
lease=$(ctl get --prefix dlock/revoked/ --keys-only | grep . | head -1 | sed -E 's/.*-([0-9a-f]{16})-[0-9a-f]+$/\1/')
at=$(now_ms)
ctl lease revoke "$lease" >/dev/null
wait $h
rc=$?
if [ -s "$TMP/revoked" ] && [ $(( $(cat "$TMP/revoked") - at )) -lt 5000 ] && [ $rc != 0 ]; then
    ok "lease revoked from outside: the command stopped $(( $(cat "$TMP/revoked") - at )) ms later (lease 30 s), exit $rc"
else
    bad "lease revoked from outside (lease $lease): exit $rc, stopped at $(cat "$TMP/revoked" 2>/dev/null || echo never)"
fi

# The holder's key deleted from outside: its command is stopped at once
# (the lease has 30 s left), exit 75; the next holder is granted at once.
"$DLOCK" --url "etcd://127.0.0.1:$port?ttl=30" run deleted -- \
    sh -c "trap 'date +%s%3N >$TMP/deleted; exit 1' TERM; sleep 20 & wait" 2>/dev/null & h=$!
wait_held "$U" deleted
sleep 0.3
key=$(ctl get --prefix dlock/deleted/ --keys-only | grep . | head -1)
at=$(now_ms)
ctl del "$key" >/dev/null
wait $h
rc=$?
if [ -s "$TMP/deleted" ] && [ $(( $(cat "$TMP/deleted") - at )) -lt 1500 ] && [ $rc = 75 ]; then
    ok "key deleted from outside: the command stopped $(( $(cat "$TMP/deleted") - at )) ms later (lease 30 s), exit 75"
else
    bad "key deleted from outside ($key): exit $rc, stopped at $(cat "$TMP/deleted" 2>/dev/null || echo never) (deleted at $at)"
fi

# A holder whose network freezes: its command is stopped before another
# client can have the lock (the server waits the whole lease).
rport=$(srv_free_port)
start_relay "$rport" "$port" || bad "the relay on port $rport never accepted"
"$DLOCK" --url "etcd://127.0.0.1:$rport?ttl=2" run frozen -- \
    sh -c "trap 'date +%s%3N >$TMP/stopped; exit 1' TERM; sleep 20 & wait" 2>"$TMP/frozen.err" & h=$!
wait_held "$U" frozen || bad "frozen holder: never held: $(cat "$TMP/frozen.err")"
kill -STOP $relay
frozen_at=$(now_ms)
"$DLOCK" --url "$U" run -w 10 frozen -- true 2>/dev/null
rc=$?
other_at=$(now_ms)
wait $h
if [ $rc = 0 ] && [ -s "$TMP/stopped" ] && [ "$(cat "$TMP/stopped")" -lt "$other_at" ]; then
    ok "frozen holder: its command stopped $(( $(cat "$TMP/stopped") - frozen_at )) ms after the freeze, another client got the lock after $(( other_at - frozen_at )) ms"
else
    bad "frozen holder: other client exit $rc at +$(( other_at - frozen_at )) ms; command stopped at $(cat "$TMP/stopped" 2>/dev/null || echo never)"
fi
kill -CONT $relay

# ---- an outage that outlasts a wait ends it unreachable (exit 69), not timed out ----
outage_runs_out "$U" etcd "etcd"
finish
