#!/usr/bin/env bash
# cli_redis_test.sh — dlock(1) on a lease backend: a real redis-server on a
# spare loopback port. Covers what the file backend cannot: an unreachable
# backend (exit 69), password redaction, lease renewal while holding, and a
# lease that expires while dlock is stopped (the command is killed, exit 75),
# and an operator's `dlock break` (the holder's command is stopped, the next
# waiter gets a higher token).
# Skipped (exit 0) when redis-server is not installed.
set -euo pipefail

DLOCK=${DLOCK:?set DLOCK to the dlock binary}
. "$(dirname "$0")/testlib.sh"
need_redis "$DLOCK"

TMP=$(mktemp -d "${TMPDIR:-/tmp}/dlock-cli-redis.XXXXXX")
BG=()
REDIS_PID=
cleanup() {
    local p
    exec 2>/dev/null # bash's job notices for the processes killed below
    for p in "${BG[@]}"; do
        kill -CONT "$p" 2>/dev/null || true
        kill -9 "$p" 2>/dev/null || true
    done
    if [[ -s $TMP/cmd.pid ]]; then kill -9 "$(cat "$TMP/cmd.pid")" 2>/dev/null || true; fi
    if [[ -n $REDIS_PID ]]; then
        kill -TERM "$REDIS_PID" 2>/dev/null || true # exits 0: no "Killed" notice
        wait "$REDIS_PID" 2>/dev/null || true
    fi
    rm -rf "$TMP"
}
trap cleanup EXIT

passed=0
fail() {
    echo "FAIL: $*" >&2
    [[ -s $TMP/err ]] && { echo "--- stderr:" >&2; cat "$TMP/err" >&2; }
    echo "$passed passed, 1 failed" >&2
    exit 1
}
pass() { passed=$((passed + 1)); }
expect() {
    local want=$1 rc=0
    shift
    "$@" >"$TMP/out" 2>"$TMP/err" || rc=$?
    [[ $rc == "$want" ]] || fail "'$*' exited $rc, expected $want"
}
now_ms() { echo $(($(date +%s%N) / 1000000)); }
alive() {
    [[ -r /proc/$1/stat ]] || return 1
    [[ $(sed -E 's/.*\) (.).*/\1/' "/proc/$1/stat" 2>/dev/null) != Z ]]
}

free_port() {
    python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1]); s.close()'
}
PORT=$(free_port)
PASS=s3cretpw
redis-server --port "$PORT" --bind 127.0.0.1 --save '' --appendonly no --dir "$TMP" \
    --requirepass "$PASS" --logfile "$TMP/redis.log" </dev/null >/dev/null 2>&1 &
REDIS_PID=$!
for _ in $(seq 100); do
    [[ $(redis-cli -p "$PORT" -a "$PASS" --no-auth-warning ping 2>/dev/null) == PONG ]] && break
    sleep 0.1
done
[[ $(redis-cli -p "$PORT" -a "$PASS" --no-auth-warning ping) == PONG ]] || fail "redis did not start"
URL="redis://:$PASS@127.0.0.1:$PORT"
dl() { "$DLOCK" --url "$URL" "$@"; }

# ---- unreachable backend: 69, and no password in the message -----------------
DEAD=$(free_port)
expect 69 "$DLOCK" --url "redis://:$PASS@127.0.0.1:$DEAD" run x -- true
! grep -q "$PASS" "$TMP/err" || fail "password printed"
[[ $(wc -l <"$TMP/err") == 1 ]] || fail "unreachable: not one line"
expect 69 "$DLOCK" --url "redis://:$PASS@127.0.0.1:$DEAD" status x
pass

# ---- the command's environment: DLOCK_URL without the password ---------------
expect 0 dl run env -- sh -c 'echo "$DLOCK_TOKEN $DLOCK_URL"'
read -r tok url <"$TMP/out"
[[ $tok =~ ^[0-9]+$ && $url == "redis://:***@127.0.0.1:$PORT" ]] || fail "child env: $(cat "$TMP/out")"
pass

# ---- a short lease stays held while renewed ---------------------------------
"$DLOCK" --url "$URL" hold -t 1.5 renewed >"$TMP/hold.out" 2>"$TMP/hold.err" &
holder=$!
BG+=("$holder")
for _ in $(seq 100); do [[ -s $TMP/hold.out ]] && break; sleep 0.05; done
sleep 3.5 # more than two leases
expect 1 dl run -n renewed -- true
kill -TERM "$holder"
rc=0
wait "$holder" || rc=$?
[[ $rc == 0 ]] || fail "hold exited $rc"
expect 0 dl run -n renewed -- true
pass

# ---- lease lost while dlock is stopped: command killed, exit 75 --------------
"$DLOCK" --url "$URL" run -t 0.5 --kill-grace 1 paused -- \
    sh -c 'echo $$ >"$0"; exec sleep 60' "$TMP/cmd.pid" 2>"$TMP/err" &
runner=$!
BG+=("$runner")
for _ in $(seq 100); do [[ -s $TMP/cmd.pid ]] && break; sleep 0.05; done
[[ -s $TMP/cmd.pid ]] || fail "paused: the command did not start"
kill -STOP "$runner"
sleep 1.2 # the lease runs out meanwhile
expect 0 dl run -n paused -- true # someone else may take it now
kill -CONT "$runner"
t0=$(now_ms)
rc=0
wait "$runner" || rc=$?
dt=$(($(now_ms) - t0))
[[ $rc == 75 ]] || fail "lease loss: exit $rc, expected 75"
((dt < 2500)) || fail "lease loss noticed after $dt ms"
! alive "$(cat "$TMP/cmd.pid")" || fail "the command survived the loss of the lease"
grep -q 'lost' "$TMP/err" || fail "no message on loss"
pass

# ---- break: an operator takes the lock; the holder's command is stopped ------
"$DLOCK" --url "$URL" run -t 1.5 --kill-grace 1 broken -- \
    sh -c 'echo $$ >"$0"; echo "$DLOCK_TOKEN" >"$0.tok"; exec sleep 60' "$TMP/bcmd.pid" \
    2>"$TMP/brun.err" &
runner=$!
BG+=("$runner")
for _ in $(seq 100); do [[ -s $TMP/bcmd.pid.tok ]] && break; sleep 0.05; done
[[ -s $TMP/bcmd.pid.tok ]] || fail "break: the holder's command did not start"
"$DLOCK" --url "$URL" run -w 20 --fair broken -- sh -c 'echo "$DLOCK_TOKEN"' >"$TMP/next.out" \
    2>"$TMP/next.err" &
next=$!
BG+=("$next")
expect 64 dl break broken
grep -q -- '--force' "$TMP/err" || fail "break without --force: $(cat "$TMP/err")"
expect 0 dl break --force --json broken
python3 -c '
import json, sys
d = json.load(open(sys.argv[1]))
assert d["broken"] is True and d["holders"] == 1 and d["token"] == int(sys.argv[2]), d
assert d["holder"] and "pid" in d["holder"], d' "$TMP/out" "$(cat "$TMP/bcmd.pid.tok")" ||
    fail "break --json: $(cat "$TMP/out")"
! grep -q "$PASS" "$TMP/err" || fail "break printed the password"
rc=0
wait "$runner" || rc=$?
[[ $rc == 75 ]] || fail "broken holder: exit $rc, expected 75 ($(cat "$TMP/brun.err"))"
! alive "$(cat "$TMP/bcmd.pid")" || fail "the broken holder's command survived"
rc=0
wait "$next" || rc=$?
[[ $rc == 0 ]] || fail "the waiter did not get the broken lock: exit $rc ($(cat "$TMP/next.err"))"
(($(cat "$TMP/next.out") > $(cat "$TMP/bcmd.pid.tok"))) || fail "token after break did not rise"
expect 1 dl break --force never-held
pass

echo "$passed passed, 0 failed"
