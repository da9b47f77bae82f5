#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# cli_warn_test.sh — issue 28's caps and warnings on real servers:
# `dlock run --max-hold` stops a command whose renewals are healthy (Redis
# with a short lease, renewed through several periods; the file backend)
# and gives the lock back, the reason naming the cap; no warning comes
# while renewals succeed; a holder whose server is frozen (a TCP relay
# SIGSTOPped) gets its --warn-signal and a `warning` event before the
# `lost` one. Orders of events only, no timed assertion.
# Skipped (exit 77) when redis-server is not installed.
set -uo pipefail

. "$(dirname "$0")/testlib.sh"
preamble
need_redis "$DLOCK"

# shellcheck source=servers.sh
. "$here/servers.sh" # srv_redis, srv_free_port
srv_init

TMP=$(mktemp -d "${TMPDIR:-/tmp}/dlock-cli-warn.XXXXXX")
relay=
cleanup() {
    [ -n "$relay" ] && { kill -CONT "$relay"; kill -9 "$relay"; } 2>/dev/null
    rm -rf "$TMP"
    srv_cleanup
}
trap cleanup EXIT

PORT=$(srv_redis warn) || skip "redis did not start"
RURL=redis://127.0.0.1:$PORT
FURL=file://$TMP/locks

# events FILE EVENT: the line numbers of FILE's --json events EVENT
events() { grep -n "^{\"event\":\"$2\"" "$1" | cut -d: -f1; }

# A command that records the signals it gets, then waits to be stopped.
# $1: the file it writes; it says "ready" there once its traps are set.
recorder() {
    printf '%s' "trap 'echo warned >>$1' USR1; trap 'echo term >>$1; exit 0' TERM;
echo ready >>$1; while :; do sleep 0.1; done"
}

# --- usage errors ---------------------------------------------------------
for bad_args in "--max-hold 0" "--max-hold x" "--warn-signal NOPE" "--warn-before 0"; do
    # shellcheck disable=SC2086
    "$DLOCK" --url "$FURL" run $bad_args u -- true 2>"$TMP/err"
    rc=$?
    if [ $rc = 64 ] && grep -q -- "${bad_args%% *}" "$TMP/err"; then
        ok "run $bad_args: usage error naming the option"
    else
        bad "run $bad_args: exit $rc: $(cat "$TMP/err")"
    fi
done
"$DLOCK" --url "$FURL" hold --warn-signal USR1 u 2>"$TMP/err"
rc=$?
[ $rc = 64 ] && ok "hold --warn-signal: usage error (no command)" ||
    bad "hold --warn-signal: exit $rc: $(cat "$TMP/err")"
"$DLOCK" --url "$RURL" run --ttl 2 --warn-before 1.5 u -- true 2>"$TMP/err"
rc=$?
[ $rc = 64 ] && grep -q "warn_ms must be between 0" "$TMP/err" &&
    ok "--warn-before over half the lease: refused (exit 64)" ||
    bad "--warn-before over half the lease: exit $rc: $(cat "$TMP/err")"

# --- max-hold on the file backend (no lease: the core's cap alone) --------
"$DLOCK" --url "$FURL" run --max-hold 0.3 --json mh -- sleep 60 2>"$TMP/f.err"
rc=$?
lost=$(events "$TMP/f.err" lost)
if [ $rc = 75 ] && [ -n "$lost" ] &&
    grep -q '"event":"lost".*max-hold cap of 300 ms was reached' "$TMP/f.err" &&
    grep -q '^dlock: run: .*max-hold cap of 300 ms was reached.*sending SIGTERM' "$TMP/f.err"; then
    ok "file: --max-hold stops the command (exit 75), the reason names the cap"
else
    bad "file: --max-hold: exit $rc"
    sed 's/^/# /' "$TMP/f.err"
fi
"$DLOCK" --url "$FURL" run -n mh -- true 2>"$TMP/err" &&
    ok "file: the capped lock was given back (run -n takes it)" ||
    bad "file: the capped lock is still taken: $(cat "$TMP/err")"

# --- max-hold on Redis, renewals healthy for four lease periods ----------
# A 2 s lease is renewed every 0.5-0.67 s; without those renewals it would
# be lost at about 1.9 s with another reason. No warning may come meanwhile.
rec=$TMP/r.sig
"$DLOCK" --url "$RURL" run --ttl 2 --max-hold 8 --warn-signal USR1 --json rh -- \
    sh -c "$(recorder "$rec")" 2>"$TMP/r.err" &
pid=$!
wait_bounded $pid 60 "redis --max-hold"
rc=$?
if [ $rc = 75 ] && grep -q '"event":"lost".*max-hold cap of 8000 ms was reached' "$TMP/r.err"; then
    ok "redis: --max-hold stops a command whose renewals succeed (exit 75, the cap named)"
else
    bad "redis: --max-hold: exit $rc"
    sed 's/^/# /' "$TMP/r.err"
fi
if [ -z "$(events "$TMP/r.err" warning)" ] && ! grep -q warned "$rec" 2>/dev/null &&
    grep -q term "$rec"; then
    ok "redis: no warning and no --warn-signal while renewals succeed (the command saw only TERM)"
else
    bad "redis: a warning while renewals succeeded"
    sed 's/^/# /' "$TMP/r.err" "$rec"
fi
"$DLOCK" --url "$RURL" run -n rh -- true 2>"$TMP/err" &&
    ok "redis: the capped lock was released on the server (run -n takes it)" ||
    bad "redis: the capped lock is still taken: $(cat "$TMP/err")"

# --- a frozen server: the warning, then the loss --------------------------
rport=$(srv_free_port)
start_relay "$rport" "$PORT" || bad "the relay on port $rport never accepted"
rec=$TMP/w.sig
"$DLOCK" --url "redis://127.0.0.1:$rport" run --ttl 3 --warn-signal USR1 --json wl -- \
    sh -c "$(recorder "$rec")" 2>"$TMP/w.err" &
pid=$!
for _ in $(seq 300); do
    grep -q ready "$rec" 2>/dev/null && break
    sleep 0.1
done
grep -q ready "$rec" 2>/dev/null || bad "the command under the relay never started"
kill -STOP "$relay"
wait_bounded $pid 60 "frozen relay"
rc=$?
kill -CONT "$relay"
warn=$(events "$TMP/w.err" warning)
lost=$(events "$TMP/w.err" lost)
if [ $rc = 75 ] && [ -n "$warn" ] && [ -n "$lost" ] && [ "$warn" -lt "$lost" ] &&
    [ "$(events "$TMP/w.err" warning | wc -l)" = 1 ]; then
    ok "frozen server: one warning event, before the lost event (exit 75)"
else
    bad "frozen server: exit $rc, warning at line '$warn', lost at line '$lost'"
    sed 's/^/# /' "$TMP/w.err"
fi
if grep -q '"event":"warning".*"signal":"SIGUSR1"' "$TMP/w.err" &&
    grep -q '"event":"lost".*no renewal succeeded' "$TMP/w.err" &&
    grep -q '^dlock: run: lock "wl": no renewal has succeeded for a while' "$TMP/w.err"; then
    ok "frozen server: the warning names the signal, the loss says renewals failed"
else
    bad "frozen server: the events do not say what happened"
    sed 's/^/# /' "$TMP/w.err"
fi
if grep -q warned "$rec" 2>/dev/null; then
    ok "frozen server: the command got --warn-signal (USR1)"
else
    bad "frozen server: the command never got USR1"
    sed 's/^/# /' "$rec"
fi

# --- hold: the same warning event, before the loss ------------------------
# (the relay's connection from the run above is gone with its dlock)
"$DLOCK" --url "redis://127.0.0.1:$rport" hold --ttl 3 --json wh >"$TMP/h.out" 2>"$TMP/h.err" &
pid=$!
for _ in $(seq 300); do
    [ -s "$TMP/h.out" ] && break
    sleep 0.1
done
[ -s "$TMP/h.out" ] || bad "hold under the relay never printed its token"
kill -STOP "$relay"
wait_bounded $pid 60 "hold behind a frozen relay"
rc=$?
kill -CONT "$relay"
warn=$(events "$TMP/h.err" warning)
lost=$(events "$TMP/h.err" lost)
if [ $rc = 75 ] && [ -n "$warn" ] && [ -n "$lost" ] && [ "$warn" -lt "$lost" ] &&
    grep -q '"event":"warning".*"signal":null' "$TMP/h.err"; then
    ok "hold behind a frozen server: a warning event (no signal), then the lost one (exit 75)"
else
    bad "hold behind a frozen server: exit $rc, warning at line '$warn', lost at line '$lost'"
    sed 's/^/# /' "$TMP/h.err"
fi

finish
