#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# cli_zk_test.sh — dlock(1) on ZooKeeper, where a lock's span is its
# session's, not the ttl asked for: a run longer than that span keeps its
# lock (the guardian follows the lock's own deadline); a holder whose
# network freezes (a TCP relay SIGSTOPped) has its command stopped before
# the server lets another client in; conflicts with every -E code run
# nothing; SIGTERM while waiting leaves no queue node. Real server from
# tests/servers.sh. Skipped (exit 77) without ZooKeeper or the zk backend.
set -u
. "$(dirname "$0")/testlib.sh"
preamble
need_zk "$DLOCK"
in_servers zk
. "$here/servers.sh" # srv_free_port
U=$DLOCK_TEST_ZK # session=2000: a lock's span is about 1.3 s
TMP=$(mktemp -d "${TMPDIR:-/tmp}/dlock-cli-zk.XXXXXX")
relay=
trap '[ -n "$relay" ] && { kill -CONT $relay; kill -9 $relay; } 2>/dev/null; rm -rf "$TMP"' EXIT
now_ms() { date +%s%3N; }

# A run twice as long as the lock's span: renewed, exit 0.
"$DLOCK" --url "$U" run long -- sleep 3 2>"$TMP/long.err"
rc=$?
[ $rc = 0 ] && ok "a 3 s run on a 1.3 s span keeps its lock" ||
    bad "a 3 s run on a 1.3 s span: exit $rc: $(cat "$TMP/long.err")"

# Conflicts: nothing runs, whatever the exit code asked for. The holder
# holds until told (a fixed 4 s ran out under TSan at three tests at a
# time, and the SIGTERM case's waiter then got the lock and ran).
"$DLOCK" --url "$U" run held -- sh -c 'while [ ! -e "$0" ]; do sleep 0.05; done' "$TMP/held.stop" & holder=$!
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
# SIGTERM while waiting (a background job of this shell ignores SIGINT):
# the waiter goes, and so does its queue node.
"$DLOCK" --url "$U" run -w 10 held -- echo RAN >"$TMP/int.out" 2>/dev/null & w=$!
sleep 0.5
kill -TERM $w
wait $w
rc=$?
[ $rc != 0 ] && [ ! -s "$TMP/int.out" ] && ok "SIGTERM while waiting: exit $rc, nothing ran" ||
    bad "SIGTERM while waiting: exit $rc, ran: $(cat "$TMP/int.out")"
"$DLOCK" --url "$U" status held 2>/dev/null | grep -q 'waiters: *0' &&
    ok "SIGTERM while waiting: no queue node left" || bad "SIGTERM while waiting: a waiter is left"
touch "$TMP/held.stop"
wait $holder

# A waiter stopped past its session (SIGSTOP of dlock itself): the server
# expires the session and its queue node; continued, the waiter queues again
# on a new session and gets the lock within its -w (it used to give up, 69,
# "invalid zhandle state").
"$DLOCK" --url "$U" run expw -- sleep 5 & holder=$!
wait_held "$U" expw
"$DLOCK" --url "$U" run -w 20 expw -- echo GOT >"$TMP/expw.out" 2>"$TMP/expw.err" & w=$!
wait_waiting "$U" expw
kill -STOP $w
sleep 3.5 # past the 2 s session
kill -CONT $w
wait $w
rc=$?
[ $rc = 0 ] && grep -q GOT "$TMP/expw.out" && ok "a waiter whose session expired waits on and gets the lock" ||
    bad "a waiter whose session expired: exit $rc: $(cat "$TMP/expw.err")"
wait $holder

# A holder whose network freezes: its command is stopped before another
# client can have the lock (the server waits the whole session).
port=$(cat "$DLOCK_TEST_SERVERS/zk.port")
rport=$(srv_free_port)
start_relay "$rport" "$port" || bad "the relay on port $rport never accepted"
"$DLOCK" --url "zk://127.0.0.1:$rport?session=2000" run frozen -- \
    sh -c "trap 'date +%s%3N >$TMP/stopped; exit 1' TERM; sleep 20 & wait" 2>"$TMP/frozen.err" & h=$!
wait_held "$U" frozen
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
# ZooKeeper has no lease: the holder is told of its session.
grep -q "session" "$TMP/frozen.err" && ! grep -q "lease" "$TMP/frozen.err" &&
    ok "frozen holder: told of its session, not of a lease" ||
    bad "frozen holder: told: $(cat "$TMP/frozen.err")"
kill -CONT $relay
kill -9 $relay 2>/dev/null
relay=

# A waiter whose client knows only members that went silent: one member
# was frozen when it connected, so its session kept the other only, which
# then froze. The server expires the session; the C client, going round
# the silent one, would never hear of it (CI saw a waiter behind a stopped
# follower wait out its 20 s so). The session counts as expired on the
# client's side after its timeout, and the waiter queues again over every
# member and gets the lock within its -w. Its first member is drawn at
# random (the list is narrowed in one round of two): two rounds.
relays=()
trap '[ ${#relays[@]} -gt 0 ] && { kill -CONT "${relays[@]}"; kill -9 "${relays[@]}"; } 2>/dev/null; rm -rf "$TMP"' EXIT
for round in 1 2; do
    ra=$(srv_free_port)
    start_relay "$ra" "$port" || bad "the relay on port $ra never accepted"
    relays+=("$relay") && rela=$relay
    rb=$(srv_free_port)
    start_relay "$rb" "$port" || bad "the relay on port $rb never accepted"
    relays+=("$relay") && relb=$relay
    "$DLOCK" --url "$U" run "silent$round" -- sleep 4 & holder=$!
    wait_held "$U" "silent$round" || bad "silent members: the holder never held"
    kill -STOP "$relb"
    "$DLOCK" --url "zk://127.0.0.1:$ra,127.0.0.1:$rb?session=2000" run -w 25 "silent$round" -- \
        echo GOT >"$TMP/silent.out" 2>"$TMP/silent.err" & w=$!
    wait_waiting "$U" "silent$round"
    kill -CONT "$relb"
    kill -STOP "$rela"
    wait $w
    rc=$?
    [ $rc = 0 ] && grep -q GOT "$TMP/silent.out" &&
        ok "silent members (round $round): the waiter queued again in a new session and got the lock" ||
        bad "silent members (round $round): exit $rc: $(cat "$TMP/silent.err")"
    wait $holder
    kill -CONT "$rela"
    kill -9 "$rela" "$relb" 2>/dev/null
    wait "$rela" "$relb" 2>/dev/null
    relays=()
done

# ---- an outage that outlasts a wait ends it unreachable (exit 69), not timed out ----
outage_runs_out "$U" zk "zk"
finish
