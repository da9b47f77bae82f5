#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# cli_postgres_test.sh — dlock(1) on PostgreSQL advisory locks, the hostile
# cases: conflicts with every -E code run nothing; SIGTERM while waiting
# leaves no waiter in the server's lock queue; kill -9 of a holder frees the
# lock at once (its session ends); a session ended from outside stops the
# command at once; a holder whose network freezes (a TCP relay SIGSTOPped)
# keeps the lock — the server still has its session — and nobody else gets
# it meanwhile. Real server from tests/servers.sh. Skipped (exit 77) without
# PostgreSQL or the postgres backend.
set -u
. "$(dirname "$0")/testlib.sh"
preamble
if ! ls /usr/lib/postgresql/*/bin/postgres >/dev/null 2>&1 ||
    ! "$DLOCK" backends | grep -q '^postgres .* yes$'; then
    skip "PostgreSQL or the postgres backend missing"
fi
in_servers postgres
. "$here/servers.sh" # srv_free_port
U=$DLOCK_TEST_POSTGRES
port=$(cat "$DLOCK_TEST_SERVERS/postgres.port")
sql() { psql "$DLOCK_TEST_POSTGRES_ADMIN" -Atqc "$1"; }
waiting() { sql "SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND NOT granted"; }
TMP=$(mktemp -d "${TMPDIR:-/tmp}/dlock-cli-pg.XXXXXX")
relay=
trap '[ -n "$relay" ] && { kill -CONT $relay; kill -9 $relay; } 2>/dev/null; rm -rf "$TMP"' EXIT
now_ms() { date +%s%3N; }

# Conflicts: nothing runs, whatever the exit code asked for.
"$DLOCK" --url "$U" run held -- sh -c "$(holds_until "$TMP/held.go")" & holder=$!
wait_held "$U" held || bad "held: the holder never held its lock"
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
# SIGTERM while waiting: the waiter goes, and so does its place in the queue.
"$DLOCK" --url "$U" run -w 10 held -- echo RAN >"$TMP/int.out" 2>/dev/null & w=$!
sleep 0.5
[ "$(waiting)" = 1 ] || bad "the waiter is not queued on the server ($(waiting) waiting)"
kill -TERM $w
wait $w
rc=$?
[ $rc != 0 ] && [ ! -s "$TMP/int.out" ] && ok "SIGTERM while waiting: exit $rc, nothing ran" ||
    bad "SIGTERM while waiting: exit $rc, ran: $(cat "$TMP/int.out")"
n=$(waiting)
for _ in $(seq 20); do [ "$n" = 0 ] && break; sleep 0.1; n=$(waiting); done
[ "$n" = 0 ] && ok "SIGTERM while waiting: nothing left in the server's lock queue" ||
    bad "SIGTERM while waiting: $n requests still waiting on the server"
touch "$TMP/held.go"
wait $holder

# kill -9 of a holder: the lock is free as soon as the server sees the
# session closed.
"$DLOCK" --url "$U" run killed -- sleep 30 & h=$!
wait_held "$U" killed || bad "killed: the holder never held its lock"
killed_at=$(now_ms)
kill -9 $h
"$DLOCK" --url "$U" run -w 10 killed -- true 2>/dev/null
rc=$?
[ $rc = 0 ] && ok "kill -9 of a holder: the lock was free after $(( $(now_ms) - killed_at )) ms" ||
    bad "kill -9 of a holder: the next run exited $rc"

# The holder's session ended from outside: its command is stopped at once.
"$DLOCK" --url "$U" run ended -- \
    sh -c "trap 'date +%s%3N >$TMP/ended; exit 1' TERM; sleep 20 & wait" 2>/dev/null & h=$!
wait_held "$U" ended || bad "ended: the holder never held its lock"
at=$(now_ms)
sql "SELECT pg_terminate_backend(pid) FROM pg_locks WHERE locktype = 'advisory' AND granted" >/dev/null
wait $h
rc=$?
if [ -s "$TMP/ended" ] && [ $(( $(cat "$TMP/ended") - at )) -lt 3000 ] && [ $rc != 0 ]; then
    ok "session ended from outside: the command stopped $(( $(cat "$TMP/ended") - at )) ms later, exit $rc"
else
    bad "session ended from outside: exit $rc, stopped at $(cat "$TMP/ended" 2>/dev/null || echo never)"
fi

# A holder whose network freezes: the server keeps its session and so its
# lock; another client must not get it while the holder's command runs.
rport=$(srv_free_port)
start_relay "$rport" "$port" || bad "the relay on port $rport never accepted"
"$DLOCK" --url "postgres://dlock:s3cret@127.0.0.1:$rport/dlock" run frozen -- \
    sh -c "date +%s%3N >$TMP/began; while [ ! -e $TMP/thawed ]; do sleep 0.05; done; date +%s%3N >$TMP/finished" 2>"$TMP/frozen.err" & h=$!
wait_held "$U" frozen || bad "frozen: the holder never held its lock"
kill -STOP $relay
"$DLOCK" --url "$U" run -w 2 frozen -- echo RAN >"$TMP/other.out" 2>/dev/null
rc=$?
kill -CONT $relay
touch "$TMP/thawed" # (the command runs until the relay flows again: its
# release must not meet the frozen relay, whatever this machine's load)
wait $h
hrc=$?
if [ $rc = 1 ] && [ ! -s "$TMP/other.out" ] && [ $hrc = 0 ] && [ -s "$TMP/finished" ]; then
    ok "frozen holder: kept its lock (its command finished, exit 0); the other client timed out (exit 1)"
else
    bad "frozen holder: other client exit $rc ran '$(cat "$TMP/other.out")'; holder exit $hrc: $(cat "$TMP/frozen.err")"
fi

# ---- a wait rides out a restart of the server ---------------------------------------
ride_out_restart "$U" postgres "postgres"
open_in_restart "$U" postgres "postgres"
# a signal while the opening is tried again ends it at once, as a wait's
free=$(srv_free_port)
"$DLOCK" --url "postgres://dlock:pw@127.0.0.1:$free/dlock" run -w 30 closed -- true \
    2>"$TMP/closed.err" &
closed=$!
sleep 0.5
kill -TERM "$closed"
rc=0
wait_bounded "$closed" 5 "SIGTERM while the opening is retried" || rc=$?
[ $rc = 143 ] && ! grep -q ':pw@' "$TMP/closed.err" &&
    ok "SIGTERM while the opening is retried (-w 30, nothing listening): exit 143" ||
    bad "SIGTERM while the opening is retried: exit $rc: $(cat "$TMP/closed.err")"
finish
