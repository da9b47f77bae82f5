#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# cli_test.sh — end-to-end tests of dlock(1) on the embedded file backend:
# usage errors, exit codes, the command's environment, waiting, signals,
# loss of the lock, death of dlock itself, and mutual exclusion.
#
# Needs: DLOCK (path of the built dlock binary), bash, python3 (JSON checks).
set -euo pipefail

. "$(dirname "$0")/testlib.sh" # the preamble; its checks are its own (fail stops at the first)
preamble
TMP=$(mktemp -d "${TMPDIR:-/tmp}/dlock-cli-test.XXXXXX")
URL="file://$TMP/locks"
BG=() # background processes we started

cleanup() {
    local p
    for p in "${BG[@]}"; do
        kill -9 "$p" 2>/dev/null || true
    done
    # processes the tested commands wrote down (they should all be gone)
    if compgen -G "$TMP/*.pids" >/dev/null; then
        for p in $(cat "$TMP"/*.pids); do
            kill -9 "$p" 2>/dev/null || true
        done
    fi
    rm -rf "$TMP"
}
trap cleanup EXIT

passed=0
fail() {
    echo "FAIL: $*" >&2
    if [[ -s $TMP/err ]]; then
        echo "--- stderr of the last dlock:" >&2
        cat "$TMP/err" >&2
    fi
    echo "$passed passed, 1 failed" >&2
    exit 1
}
pass() { passed=$((passed + 1)); }

dl() { "$DLOCK" --url "$URL" "$@"; }

# expect CODE CMD...: run CMD, stdout to $TMP/out, stderr to $TMP/err.
expect() {
    local want=$1 rc=0
    shift
    "$@" >"$TMP/out" 2>"$TMP/err" || rc=$?
    [[ $rc == "$want" ]] || fail "'$*' exited $rc, expected $want"
}

# usage_error ARGS...: exit 64 with exactly one line "dlock: ..." on stderr.
usage_error() {
    expect 64 "$DLOCK" "$@"
    [[ $(wc -l <"$TMP/err") == 1 ]] || fail "'dlock $*': stderr is not one line"
    grep -q '^dlock: ' "$TMP/err" || fail "'dlock $*': stderr does not start with 'dlock: '"
    pass
}

# alive PID: the process exists and is not a zombie (a container's init may
# not reap orphans, and zombies run nothing).
alive() {
    [[ -r /proc/$1/stat ]] || return 1
    local st
    st=$(sed -E 's/.*\) (.).*/\1/' "/proc/$1/stat" 2>/dev/null) || return 1
    [[ $st != Z && $st != X ]]
}

now_ms() { echo $(($(date +%s%N) / 1000000)); }

# wait_until SECS CMD...: poll CMD until it succeeds or SECS seconds pass.
wait_until() {
    local end=$(($(now_ms) + $1 * 1000))
    shift
    until "$@"; do
        (($(now_ms) < end)) || return 1
        sleep 0.02
    done
}

# catches PID SIGNUM: the process has its handler for SIGNUM in place (a
# signal sent before that would kill it: a slow start, under ASan or load).
catches() {
    local m
    m=$(awk '/^SigCgt:/ { print $2 }' "/proc/$1/status" 2>/dev/null) && [[ -n $m ]] &&
        (((16#$m >> ($2 - 1)) & 1))
}

# has_lines FILE N: FILE exists and has N lines.
has_lines() { [[ -e $1 && $(wc -l <"$1") == "$2" ]]; }

json_ok() { python3 -c 'import json,sys; json.load(sys.stdin)' <"$1"; }

# Start `dlock hold NAME` in the background; its token lands in $TMP/hold.NAME.
# Start `dlock hold NAME OPTS...` in the background: $HOLD_PID, and its token
# in the file $HOLD_OUT.
HOLD_N=0
start_hold() {
    local name=$1
    shift
    HOLD_N=$((HOLD_N + 1))
    HOLD_OUT=$TMP/hold.$HOLD_N
    # not through dl(): $! must be dlock itself, not a subshell
    "$DLOCK" --url "$URL" hold "$@" "$name" >"$HOLD_OUT" 2>"$HOLD_OUT.err" &
    HOLD_PID=$!
    BG+=("$HOLD_PID")
    wait_until 5 test -s "$HOLD_OUT" || fail "dlock hold $name printed no token"
}

# SIGKILL a background process and reap it, without bash's "Killed" notice.
kill9() {
    exec 3>&2 2>/dev/null
    kill -KILL "$1"
    wait "$1" || true
    exec 2>&3 3>&-
}

stop_hold() {
    kill -TERM "$1"
    local rc=0
    wait "$1" || rc=$?
    [[ $rc == 0 ]] || fail "dlock hold exited $rc after SIGTERM, expected 0"
}

# ---- help and version -------------------------------------------------------
expect 0 "$DLOCK" --help
grep -q 'exit status' "$TMP/out" && grep -q '127' "$TMP/out" && grep -q '75' "$TMP/out" ||
    fail "--help does not list the exit codes"
pass
expect 0 "$DLOCK" --version
grep -qE '^dlock [0-9]+\.[0-9]+\.[0-9]+ \(libdlock [0-9]' "$TMP/out" || fail "--version: $(cat "$TMP/out")"
# the backends built in, and each one that is not with its reason, as
# `dlock backends` has them
grep -qE '^backends: (.* )?file( |$)' "$TMP/out" || fail "--version lacks the backends: $(cat "$TMP/out")"
"$DLOCK" backends --json | python3 -c '
import json, sys
out = open(sys.argv[1]).read().splitlines()
b = json.load(sys.stdin)
assert out[1].split()[1:] == [x["name"] for x in b if x["available"]], out
assert out[2:] == ["not built: %s: %s" % (x["name"], x["missing"]) for x in b if not x["available"]], out
' "$TMP/out" || fail "--version and backends --json disagree: $(cat "$TMP/out")"
pass
expect 0 "$DLOCK" help run
grep -q -- '--kill-grace' "$TMP/out" || fail "help run lacks --kill-grace"
expect 0 "$DLOCK" run --help
pass
# The list in --help, `help CMD`, `CMD --help` and dispatch all come from one
# table in main.c: the generated list keeps its layout, every listed command
# has help, and both ways of asking give the same text.
expect 0 "$DLOCK" --help
sed -n '/^commands:$/,/^$/p' "$TMP/out" >"$TMP/list"
cat >"$TMP/list.want" <<'LIST'
commands:
  run [OPTIONS] NAME -- CMD [ARGS...]
                      take lock NAME, run CMD while holding it, release it
  once [OPTIONS] KEY -- CMD [ARGS...]
                      run CMD once for KEY; duplicates replay its outcome
  hold [OPTIONS] NAME print the fencing token, hold NAME until SIGINT/SIGTERM
  elect [OPTIONS] NAME -- CMD [ARGS...]
                      become leader of NAME, run CMD while leader
  status NAME [--json]   who holds NAME, token, lease, waiters
  leader NAME [--watch]  the value the leader of NAME published
  list [PREFIX] [--json] names of known locks
  break NAME --force     take NAME from its holders (logged to syslog)
  backends [--json]      capabilities and guarantees of every backend
  bench [OPTIONS]        measure the cost of locking (see 'dlock help bench')
  check [OPTIONS]        measure what the lock guarantees (see 'dlock help check')
  help [COMMAND]         this text, or the options of COMMAND
  completion bash        print the bash completion script

LIST
diff -u "$TMP/list.want" "$TMP/list" >&2 || fail "--help: the command list changed"
pass
for c in $(sed -n 's/^  \([a-z]\+\) .*/\1/p' "$TMP/list"); do
    expect 0 "$DLOCK" help "$c"
    [[ -s $TMP/out ]] || fail "help $c printed nothing"
    mv "$TMP/out" "$TMP/help.$c"
    [[ $c == help ]] && continue # 'help --help' asks for a command "--help"
    expect 0 "$DLOCK" "$c" --help
    cmp -s "$TMP/help.$c" "$TMP/out" || fail "'help $c' and '$c --help' differ"
    pass
done
expect 0 "$DLOCK" help
cmp -s "$TMP/help.help" "$TMP/out" || fail "'help' and 'help help' differ"
usage_error help frobnicate
usage_error help run hold

# ---- usage errors -----------------------------------------------------------
usage_error
usage_error frobnicate
usage_error --no-such-option status x
usage_error --url "$URL" run -- true
usage_error --url "$URL" run name true
usage_error --url "$URL" run name --
usage_error --url "$URL" run -w abc name -- true
usage_error --url "$URL" run -w -1 name -- true
usage_error --url "$URL" run -w 1 -n name -- true
usage_error --url "$URL" run --kill-signal FOO name -- true
usage_error --url "$URL" run --kill-grace x name -- true
usage_error --url "$URL" run -E 300 name -- true
usage_error --url "$URL" run --bogus name -- true
usage_error --url "$URL" hold
usage_error --url "$URL" status
usage_error --url 'redis://h:99999' status x
usage_error --url 'gopher://example.org/' status x
usage_error --url "$URL" status ''
usage_error --url "$URL" run 'a/b' -- true
usage_error --url "$URL" run '..' -- true
usage_error --url "$URL" hold "$(printf 'n%.0s' {1..201})"
# the library's limits, said by the CLI in the user's terms (issue 16, 10a-c)
usage_error --url "$URL" run --permits 4097 name -- true
grep -q '1 to 4096' "$TMP/err" || fail "--permits 4097: $(cat "$TMP/err")"
usage_error --url "$URL" run -t 99999999 name -- true
grep -q 'too large' "$TMP/err" && grep -q 'maximum is 2147483 seconds' "$TMP/err" ||
    fail "-t 99999999: $(cat "$TMP/err")"
usage_error --url "$URL" run -w 99999999 name -- true
grep -q 'too large' "$TMP/err" || fail "-w 99999999: $(cat "$TMP/err")"
usage_error --url "$URL" run -t 0.0001 name -- true
grep -q -- '-t 0.0001 is too short' "$TMP/err" && grep -q '0.03 s' "$TMP/err" &&
    ! grep -q '1 ms' "$TMP/err" || fail "-t 0.0001: $(cat "$TMP/err")"
usage_error --url "$URL" run --ttl 0 name -- true
expect 0 "$DLOCK" help run
grep -q -- '--permits N .*4096' "$TMP/out" || fail "help run: --permits range not 1-4096"
pass
# a password in a URL never shows up in a message
expect 69 "$DLOCK" --url 'postgres://user:s3cretpw@127.0.0.1:1/db' status x
! grep -q s3cretpw "$TMP/err" || fail "password printed: $(cat "$TMP/err")"
pass

# ---- exit status of the command ---------------------------------------------
expect 7 dl run st -- sh -c 'exit 7'
pass
expect 0 dl run st -- true
pass
expect $((128 + 10)) dl run st -- sh -c 'kill -USR1 $$'
pass

# ---- the command's environment ----------------------------------------------
expect 0 dl run envtest -- sh -c 'echo "$DLOCK_NAME $DLOCK_TOKEN $DLOCK_URL"'
read -r name tok1 url <"$TMP/out"
[[ $name == envtest && $url == "$URL" && $tok1 =~ ^[0-9]+$ && $tok1 -gt 0 ]] ||
    fail "child environment: $(cat "$TMP/out")"
expect 0 dl run envtest -- sh -c 'echo "$DLOCK_TOKEN"'
tok2=$(cat "$TMP/out")
((tok2 > tok1)) || fail "token did not increase: $tok1 then $tok2"
pass
# DLOCK_URL from the environment selects the backend
expect 0 env DLOCK_URL="$URL" "$DLOCK" run envtest -- sh -c 'echo "$DLOCK_TOKEN"'
(($(cat "$TMP/out") > tok2)) || fail "DLOCK_URL not used: token $(cat "$TMP/out")"
pass

# ---- conflicts, timeouts, -v, status and list while held ---------------------
start_hold busy
holder=$HOLD_PID
[[ $(cat "$HOLD_OUT") =~ ^[0-9]+$ ]] || fail "hold printed $(cat "$HOLD_OUT")"
expect 1 dl run -n busy -- true
pass
expect 42 dl run -n -E 42 busy -- true
pass
# -E 0: a conflict exits 0 but never runs the command (issue 16, item 1)
for how in -n "-w 0.2"; do
    # shellcheck disable=SC2086 # $how is two words on purpose
    expect 0 dl run $how -E 0 busy -- sh -c 'echo "RAN $DLOCK_TOKEN" >"$0"' "$TMP/e0.ran"
    [[ ! -e $TMP/e0.ran ]] || fail "run $how -E 0 ran the command without the lock"
    grep -q 'not acquired' "$TMP/err" && ! grep -q 'cannot release' "$TMP/err" ||
        fail "run $how -E 0: $(cat "$TMP/err")"
done
expect 0 dl elect -n -E 0 busy -- sh -c 'echo RAN >"$0"' "$TMP/e0.ran"
[[ ! -e $TMP/e0.ran ]] || fail "elect -n -E 0 ran the command without the lock"
expect 0 timeout 10 "$DLOCK" --url "$URL" hold -n -E 0 busy
[[ ! -s $TMP/out ]] || fail "hold -n -E 0 printed a token: $(cat "$TMP/out")"
grep -q 'not acquired' "$TMP/err" || fail "hold -n -E 0: $(cat "$TMP/err")"
pass
t0=$(now_ms)
expect 1 dl run -w 0.3 busy -- true
dt=$(($(now_ms) - t0))
((dt >= 250 && dt < 10000)) || fail "-w 0.3 returned after $dt ms"
pass
expect 1 dl -v run -w 1.4 busy -- true
grep -q "held by pid $holder" "$TMP/err" || fail "-v printed no holder line"
pass
expect 0 dl status busy --json
json_ok "$TMP/out" || fail "status --json is not JSON: $(cat "$TMP/out")"
python3 -c 'import json,sys; d=json.load(sys.stdin); assert d["name"]=="busy" and d["held"] is True, d' <"$TMP/out" ||
    fail "status --json: $(cat "$TMP/out")"
expect 0 dl status busy
grep -q '^held: *yes' "$TMP/out" || fail "status: $(cat "$TMP/out")"
pass
expect 0 dl list
grep -qx busy "$TMP/out" && grep -qx envtest "$TMP/out" || fail "list: $(cat "$TMP/out")"
expect 0 dl list --json
json_ok "$TMP/out" || fail "list --json is not JSON: $(cat "$TMP/out")"
expect 0 dl list env --json
[[ $(cat "$TMP/out") == '["envtest"]' ]] || fail "list PREFIX: $(cat "$TMP/out")"
pass
# SIGTERM while waiting: cancelled, exit 128+15, nothing left behind
"$DLOCK" --url "$URL" run busy -- true 2>"$TMP/err" &
waiter=$!
BG+=("$waiter")
sleep 0.3
kill -TERM "$waiter"
rc=0
wait "$waiter" || rc=$?
[[ $rc == 143 ]] || fail "SIGTERM while waiting: exit $rc, expected 143"
pass
# USR1 while waiting is remembered and delivered to the command once it
# runs (issue 16, item 7): here it kills `sleep` (128+10); INT/TERM still
# end the wait (above).
"$DLOCK" --url "$URL" run busy -- sleep 20 2>"$TMP/usr1.err" &
waiter=$!
BG+=("$waiter")
wait_until 10 catches "$waiter" 10 || fail "dlock run never caught SIGUSR1"
kill -USR1 "$waiter"
sleep 0.3
alive "$waiter" || fail "SIGUSR1 ended the wait"
stop_hold "$holder"
rc=0
wait "$waiter" || rc=$?
[[ $rc == 138 ]] || fail "SIGUSR1 received while waiting: exit $rc, expected 138 (delivered)"
pass
start_hold busy
holder=$HOLD_PID
# ... and dropped, saying so, when the lock is never acquired
"$DLOCK" --url "$URL" run -w 1 busy -- true 2>"$TMP/err" &
waiter=$!
BG+=("$waiter")
wait_until 10 catches "$waiter" 12 || fail "dlock run never caught SIGUSR2"
kill -USR2 "$waiter"
rc=0
wait "$waiter" || rc=$?
[[ $rc == 1 ]] || fail "SIGUSR2 while waiting in vain: exit $rc, expected 1"
grep -q 'dropped SIGUSR2' "$TMP/err" || fail "dropped signal not reported: $(cat "$TMP/err")"
pass
stop_hold "$holder"
expect 0 dl run -n busy -- true
pass
expect 0 dl status busy --json
python3 -c 'import json,sys; d=json.load(sys.stdin); assert d["held"] is False, d' <"$TMP/out" ||
    fail "status after release: $(cat "$TMP/out")"
pass

# ---- shared locks and semaphores --------------------------------------------
start_hold rw -s
r1=$HOLD_PID
expect 0 dl run -n -s rw -- true
expect 1 dl run -n rw -- true
stop_hold "$r1"
start_hold sem --permits 2
s1=$HOLD_PID
expect 0 dl run -n --permits 2 sem -- true
start_hold sem --permits 2
s2=$HOLD_PID
expect 1 dl run -n --permits 2 sem -- true
stop_hold "$s1"
stop_hold "$s2"
pass

# ---- one name is one lock: a semaphore shuts an exclusive taker out ---------
# (issue 22: `run -n pool` ran beside two `hold --permits 2 pool`, and
# `--permits 3` made a third holder)
start_hold pool --permits 2
p1=$HOLD_PID
start_hold pool --permits 2
p2=$HOLD_PID
expect 1 dl run -n pool -- touch "$TMP/maintenance"
[[ ! -e $TMP/maintenance ]] || fail "run -n pool ran beside two semaphore holders"
expect 64 dl run -n --permits 3 pool -- touch "$TMP/third"
[[ ! -e $TMP/third ]] || fail "--permits 3 ran as a third holder of a two-permit pool"
[[ $(wc -l <"$TMP/err") == 1 ]] &&
    grep -q 'lock "pool" is a semaphore of 2 permits here (asked: a semaphore of 3)' "$TMP/err" ||
    fail "--permits 3 on a pool of 2: $(cat "$TMP/err")"
expect 64 dl run -n -s pool -- touch "$TMP/third" # file: shared beside permits is refused
grep -q 'is a semaphore of 2 permits here (asked: shared)' "$TMP/err" || fail "-s: $(cat "$TMP/err")"
# an exclusive waiter runs once every permit is back, not before
"$DLOCK" --url "$URL" run -w 30 pool -- touch "$TMP/maintenance" 2>"$TMP/err" &
waiter=$!
BG+=("$waiter")
stop_hold "$p1"
sleep 0.3
[[ ! -e $TMP/maintenance ]] || fail "the exclusive waiter ran while a permit was held"
stop_hold "$p2"
rc=0
wait "$waiter" || rc=$?
[[ $rc == 0 && -e $TMP/maintenance ]] || fail "the exclusive waiter: exit $rc"
expect 0 dl run -n --permits 3 pool -- true # free: any kind again
pass

# ---- command not found / not executable -------------------------------------
expect 127 dl run nf -- "$TMP/no-such-command"
grep -q "cannot execute \"$TMP/no-such-command\": No such file or directory" "$TMP/err" ||
    fail "not found message: $(cat "$TMP/err")"
expect 127 dl run nf -- no-such-command-in-path-xyz
expect 0 dl run -n nf -- true # the lock was released
pass
printf 'echo hi\n' >"$TMP/noexec"
chmod 644 "$TMP/noexec"
expect 126 dl run nf -- "$TMP/noexec"
grep -q 'Permission denied' "$TMP/err" || fail "not executable message: $(cat "$TMP/err")"
pass

# ---- signal forwarding ------------------------------------------------------
"$DLOCK" --url "$URL" run fwd -- sh -c 'trap "echo usr1 >>$0.sig" USR1; trap "echo term >>$0.sig; exit 33" TERM
                     echo ready >$0.ready; while :; do sleep 0.05; done' "$TMP/fwd" 2>"$TMP/err" &
pid=$!
BG+=("$pid")
wait_until 5 test -e "$TMP/fwd.ready" || fail "forwarding: command did not start"
kill -USR1 "$pid"
wait_until 5 grep -qs usr1 "$TMP/fwd.sig" || fail "SIGUSR1 was not forwarded"
kill -TERM "$pid"
rc=0
wait "$pid" || rc=$?
[[ $rc == 33 ]] || fail "forwarded SIGTERM: exit $rc, expected 33"
grep -q term "$TMP/fwd.sig" || fail "SIGTERM was not forwarded"
pass

# ---- loss of the lock: the whole process group goes -------------------------
t0=$(now_ms)
DLOCK_TEST_LOSE_AFTER_MS=300 expect 75 dl run lose -- sh -c \
    'sleep 100 & echo $! >>$0; sleep 100 & echo $! >>$0; echo $$ >>$0; wait' "$TMP/lose.pids"
dt=$(($(now_ms) - t0))
((dt < 10000)) || fail "loss took $dt ms"
[[ $(wc -l <"$TMP/lose.pids") == 3 ]] || fail "loss: pids $(cat "$TMP/lose.pids")"
for p in $(cat "$TMP/lose.pids"); do
    ! alive "$p" || fail "process $p survived the loss of the lock"
done
grep -q 'lost' "$TMP/err" || fail "no message on loss"
pass
# lose_when_ready ARGS...: `dl run --json ARGS` with a forced loss, the
# command writing the time ($TMP/ready) once its traps are set; the loss
# comes 0.2 s after the lock is taken, later (1 s, 5 s) if the command was
# not ready by then (a loaded machine). Sets lost_ms and exit_ms from the
# events (0 if missing); returns 1 if the command was never ready in time.
lose_when_ready() {
    local after
    for after in 200 1000 5000; do
        rm -f "$TMP/ready"
        DLOCK_TEST_LOSE_AFTER_MS=$after expect 75 dl run --json "$@"
        read -r lost_ms exit_ms < <(python3 -c 'import json, sys
ev = {}
for line in open(sys.argv[1]):
    if line.startswith("{"):
        e = json.loads(line); ev.setdefault(e["event"], e["ts_ms"])
print(ev.get("lost", 0), ev.get("exit", 0))' "$TMP/err")
        [[ -s $TMP/ready ]] && (($(cat "$TMP/ready") < lost_ms)) && return 0
    done
    return 1
}
# a command that ignores the kill signal is SIGKILLed after --kill-grace
: >"$TMP/grace.pids"
lose_when_ready --kill-grace 0.8 grace -- sh -c \
    'trap "" TERM; date +%s%3N >$1; echo $$ >>$0; sleep 100 & echo $! >>$0; wait; wait' \
    "$TMP/grace.pids" "$TMP/ready" || fail "--kill-grace: the command was never ready before the loss"
((exit_ms - lost_ms >= 750 && exit_ms - lost_ms < 10000)) ||
    fail "--kill-grace 0.8: the command ended $((exit_ms - lost_ms)) ms after the loss"
for p in $(cat "$TMP/grace.pids"); do
    ! alive "$p" || fail "process $p survived SIGKILL after the grace"
done
pass
# --kill-signal chooses the signal
lose_when_ready --kill-signal USR2 ksig -- sh -c \
    'trap "echo usr2 >$0; exit 0" USR2; date +%s%3N >$1; while :; do sleep 0.05; done' \
    "$TMP/ksig.out" "$TMP/ready" || fail "--kill-signal: the command was never ready before the loss"
grep -q usr2 "$TMP/ksig.out" || fail "--kill-signal USR2 not delivered"
pass
# hold exits 75 on loss
DLOCK_TEST_LOSE_AFTER_MS=200 expect 75 dl hold hloss
pass

# ---- --json: the events, one JSON object a line on stderr -------------------
# events FILE EXPECTED: the lines of FILE that start with '{' parse as JSON,
# their events are EXPECTED (space-separated, in order), each has ts_ms and
# the name; then python3 CHECK (stdin: the list of objects, as e) must hold.
events() {
    python3 - "$@" <<'PY'
import json, sys
path, want = sys.argv[1], sys.argv[2].split()
check = sys.argv[3] if len(sys.argv) > 3 else "True"
e = [json.loads(l) for l in open(path, encoding="utf-8") if l.startswith("{")]
got = [x["event"] for x in e]
assert got == want, "events %s, expected %s" % (got, want)
for x in e:
    assert isinstance(x["ts_ms"], int) and x["ts_ms"] > 1600000000000, x
    assert isinstance(x["name"], str) and x["name"], x
assert eval("(" + check + ")"), "%s does not hold for %s" % (check, e)
PY
}
# run: acquired -> exit -> released; stdout is the command's alone
expect 3 dl run --json jrun -- sh -c 'echo child-out; echo child-err >&2; exit 3'
[[ $(cat "$TMP/out") == child-out ]] || fail "run --json: stdout is not the command's: $(cat "$TMP/out")"
grep -qx child-err "$TMP/err" || fail "run --json: the command's stderr is missing"
events "$TMP/err" "acquired exit released" '
e[0]["name"] == "jrun" and isinstance(e[0]["token"], int) and e[0]["token"] > 0
and e[0]["backend"] == "file" and e[0]["url"] == "'"$URL"'"
and e[0]["holder"].startswith("pid ") and e[0]["waited_ms"] >= 0
and e[1]["status"] == 3 and e[1]["signal"] is None
and e[0]["token"] == e[1]["token"] == e[2]["token"]' || fail "run --json events"
pass
# the command killed by a signal: exit names it
expect 143 dl run --json jsig -- sh -c 'kill -TERM $$'
events "$TMP/err" "acquired exit released" 'e[1]["status"] is None and e[1]["signal"] == "SIGTERM"' ||
    fail "run --json, command killed"
pass
# hold: acquired -> released; stdout is the token alone
"$DLOCK" --url "$URL" hold --json jhold >"$TMP/jhold.out" 2>"$TMP/jhold.err" &
jpid=$!
BG+=("$jpid")
wait_until 5 test -s "$TMP/jhold.out" || fail "hold --json printed no token"
# a conflict with -n: an error line (EBUSY, exit 1), nothing acquired; -q
# silences the message, not the event
expect 1 dl run -n --json jhold -- true
events "$TMP/err" "error" '
e[0]["code"] == "EBUSY" and e[0]["exit"] == 1 and "not acquired" in e[0]["message"]' ||
    fail "run -n --json, conflict"
grep -q '^dlock: run: lock "jhold" not acquired' "$TMP/err" || fail "the conflict's message is missing"
expect 7 dl run -q -w 0.1 -E 7 --json jhold -- true
events "$TMP/err" "error" '
e[0]["code"] == "ETIMEDOUT" and e[0]["exit"] == 7 and "not acquired" in e[0]["message"]' ||
    fail "run -q -w --json, time-out"
! grep -q '^dlock:' "$TMP/err" || fail "-q --json wrote a message"
pass
stop_hold "$jpid"
[[ $(wc -l <"$TMP/jhold.out") == 1 ]] || fail "hold --json: stdout is not one token: $(cat "$TMP/jhold.out")"
events "$TMP/jhold.err" "acquired released" '
e[0]["token"] == e[1]["token"] == int(open("'"$TMP/jhold.out"'").read())' ||
    fail "hold --json events"
pass
# loss (the test hook; on a server backend, dlock break: cli_redis_test.sh):
# acquired -> lost -> exit, and nothing is released
DLOCK_TEST_LOSE_AFTER_MS=200 expect 75 dl run --json jlost -- sleep 30
events "$TMP/err" "acquired lost exit" '
e[1]["token"] == e[0]["token"] and "lost" in e[1]["message"]
and e[2]["signal"] == "SIGTERM"' || fail "run --json, lost"
DLOCK_TEST_LOSE_AFTER_MS=200 expect 75 dl hold --json jhlost
events "$TMP/err" "acquired lost" 'e[1]["token"] == e[0]["token"] and e[1]["message"]' ||
    fail "hold --json, lost"
pass
# elect: elected -> exit -> resigned, with the value escaped and read back whole
jval=$'quote " backslash \\ tab \t caf\xc3\xa9'
expect 0 dl elect --json --value "$jval" jelect -- true
JVAL=$jval events "$TMP/err" "elected exit resigned" '
e[0]["value"] == e[2]["value"] == __import__("os").environ["JVAL"] and e[1]["status"] == 0' ||
    fail "elect --json events"
pass
# a command that cannot be executed: an error line (EXEC, 127) before released
expect 127 dl run --json jexec -- "$TMP/no-such-command"
events "$TMP/err" "acquired error released" 'e[1]["code"] == "EXEC" and e[1]["exit"] == 127' ||
    fail "run --json, not found"
pass

# ---- dlock itself killed ----------------------------------------------------
"$DLOCK" --url "$URL" run killed -- sh -c 'echo $$ >>$0; sleep 100 & echo $! >>$0; wait' "$TMP/killed.pids" 2>"$TMP/err" &
pid=$!
BG+=("$pid")
wait_until 5 has_lines "$TMP/killed.pids" 2 ||
    fail "killed: command did not start"
kill9 "$pid"
t0=$(now_ms)
for p in $(cat "$TMP/killed.pids"); do
    wait_until 5 eval "! alive $p" || fail "process $p outlived a SIGKILLed dlock"
done
dt=$(($(now_ms) - t0))
((dt < 5000)) || fail "the command group took $dt ms to die"
wait_until 2 dl run -n killed -- true 2>/dev/null || fail "lock not free after dlock was killed"
pass
# the guardian SIGKILLed, then dlock: a new guardian was started at once,
# and it ends the command (issue 16, item 8a). The writer is a grandchild:
# the direct child's PDEATHSIG does not reach it.
"$DLOCK" --url "$URL" run guarded -- sh -c '( while :; do echo x >>"$0"; sleep 0.02; done ) & wait' \
    "$TMP/guarded.out" 2>"$TMP/err" &
pid=$!
BG+=("$pid")
wait_until 5 test -s "$TMP/guarded.out" || fail "guarded: the command did not start"
guardian_of() { ps -o pid=,comm= --ppid "$1" | awk '$2 == "dlock-guardian" { print $1 }'; }
g1=$(guardian_of "$pid")
[[ -n $g1 ]] || fail "guarded: no dlock-guardian child of dlock"
kill -KILL "$g1"
wait_until 5 grep -q 'started a new one' "$TMP/err" || fail "guarded: no new guardian"
g2=$(guardian_of "$pid")
[[ -n $g2 && $g2 != "$g1" ]] || fail "guarded: guardian $g1 not replaced (now '$g2')"
kill9 "$pid"
# the writes stop: the file stops growing (the new guardian killed the group)
stopped() {
    local a
    a=$(wc -l <"$TMP/guarded.out")
    sleep 0.3
    [[ $(wc -l <"$TMP/guarded.out") == "$a" ]]
}
wait_until 5 stopped || fail "the command kept writing after its guardian and dlock were killed"
grep -q 'dlock died while holding lock "guarded"' "$TMP/err" ||
    fail "guarded: no message from the new guardian: $(cat "$TMP/err")"
pass
# a SIGKILLed holder frees the lock at once
start_hold crash
kill9 "$HOLD_PID"
expect 0 dl run -n crash -- true
pass

# ---- the lock directory is made by the first lock, not by reading ----------
# (issue 16, item 10f)
NEWDIR=$TMP/fresh/locks
mkdir "$TMP/fresh"
expect 0 "$DLOCK" --url "file://$NEWDIR" status nobody --json
python3 -c 'import json,sys; d=json.load(sys.stdin); assert d["held"] is False, d' <"$TMP/out" ||
    fail "status in a missing directory: $(cat "$TMP/out")"
expect 0 "$DLOCK" --url "file://$NEWDIR" list
[[ ! -s $TMP/out ]] || fail "list in a missing directory: $(cat "$TMP/out")"
expect 1 "$DLOCK" --url "file://$NEWDIR" break --force nobody
[[ ! -e $NEWDIR ]] || fail "a read-only command created the lock directory"
# a directory that cannot be made is still an error at once, made or not
expect 70 "$DLOCK" --url "file://$TMP/no/such/parent" status x
grep -q "cannot create lock directory $TMP/no/such/parent" "$TMP/err" || fail "missing parent: $(cat "$TMP/err")"
[[ ! -e $TMP/no ]] || fail "status created a parent directory"
expect 0 "$DLOCK" --url "file://$NEWDIR" run first -- true
[[ $(stat -c %a "$NEWDIR") == 700 ]] || fail "lock directory mode $(stat -c %a "$NEWDIR"), expected 700"
expect 0 "$DLOCK" --url "file://$NEWDIR" list
[[ $(cat "$TMP/out") == first ]] || fail "list after the first lock: $(cat "$TMP/out")"
pass

# ---- mutual exclusion -------------------------------------------------------
echo 0 >"$TMP/counter"
worker() {
    local i
    for ((i = 0; i < 25; i++)); do
        dl run mutex -- sh -c 'n=$(cat "$0"); sleep 0.001; echo $((n + 1)) >"$0"' "$TMP/counter" ||
            return 1
    done
}
workers=()
for w in 1 2 3 4; do
    worker &
    workers+=("$!")
    BG+=("$!")
done
for p in "${workers[@]}"; do
    wait "$p" || fail "a mutual exclusion worker failed"
done
[[ $(cat "$TMP/counter") == 100 ]] || fail "mutual exclusion: counter is $(cat "$TMP/counter"), expected 100"
pass

# ---- the terminal goes to the command's process group ----------------------
if command -v script >/dev/null 2>&1; then
    # In a pseudo-terminal: the command's group (field 5 of /proc/PID/stat)
    # must be the terminal's foreground group (field 8).
    script -qec "\"$DLOCK\" --url \"$URL\" run tty -- sh -c 'awk \"{print \\\$5, \\\$8}\" /proc/\$\$/stat >$TMP/tty.out'" \
        /dev/null </dev/null >/dev/null 2>&1 || fail "run under a terminal failed"
    read -r pgrp tpgid <"$TMP/tty.out" || fail "run under a terminal: no output"
    [[ $pgrp == "$tpgid" ]] || fail "terminal not handed over: group $pgrp, foreground $tpgid"
    pass
fi

# ---- elect ------------------------------------------------------------------
expect 0 dl elect leader -- sh -c 'echo "$DLOCK_NAME $DLOCK_TOKEN"'
[[ $(cat "$TMP/out") =~ ^leader\ [0-9]+$ ]] || fail "elect: $(cat "$TMP/out")"
pass

# ---- leader -----------------------------------------------------------------
# no leader: exit 1, a line on stderr, nothing (or null) on stdout
expect 1 dl leader chief
[[ ! -s $TMP/out ]] && grep -q 'has no leader' "$TMP/err" || fail "leader, none: $(cat "$TMP/err")"
expect 1 dl leader chief --json
[[ $(cat "$TMP/out") == '{"name":"chief","leader":null,"token":null}' ]] ||
    fail "leader --json: $(cat "$TMP/out")"
usage_error --url "$URL" leader
usage_error --url "$URL" leader chief --force
pass
# --watch from before there is a leader: an empty line, then each leader's
# value as it comes and goes, until SIGTERM (exit 0). Each leader leads until
# the test has seen what it must (never a fixed sleep: a slow start under
# TSan or load would outlast it).
"$DLOCK" --url "$URL" leader --watch chief >"$TMP/watch.out" 2>"$TMP/watch.err" &
watcher=$!
BG+=("$watcher")
watch_says() { printf "$1" | cmp -s - "$TMP/watch.out"; }
wait_until 10 watch_says '\n' || fail "leader --watch, no leader: $(od -c "$TMP/watch.out")"
# lead_until NAME VALUE F: leads NAME with VALUE, says so in F.up, and leads
# until F.go exists
lead_until() {
    dl elect --value "$2" "$1" -- sh -c 'touch "$0.up"; until [ -e "$0.go" ]; do sleep 0.05; done' \
        "$3" >/dev/null 2>>"$TMP/leaders.err"
}
lead_until chief "first one" "$TMP/chief1" &
ch1=$!
BG+=("$ch1")
wait_until 10 test -e "$TMP/chief1.up" || fail "the first leader did not start"
# a leader, seen by `dlock leader` too
expect 0 dl leader chief
[[ $(cat "$TMP/out") == "first one" ]] || fail "leader: $(cat "$TMP/out")"
expect 0 dl leader --json -- chief
[[ $(cat "$TMP/out") =~ ^\{\"name\":\"chief\",\"leader\":\"first\ one\",\"token\":[1-9][0-9]*\}$ ]] ||
    fail "leader --json: $(cat "$TMP/out")"
wait_until 10 watch_says '\nfirst one\n' || fail "leader --watch, first: $(od -c "$TMP/watch.out")"
touch "$TMP/chief1.go"
wait "$ch1" || fail "elect --value exited $?"
wait_until 10 watch_says '\nfirst one\n\n' || fail "leader --watch, the gap: $(od -c "$TMP/watch.out")"
lead_until chief second "$TMP/chief2" &
ch2=$!
BG+=("$ch2")
wait_until 10 watch_says '\nfirst one\n\nsecond\n' || fail "leader --watch, second: $(od -c "$TMP/watch.out")"
touch "$TMP/chief2.go"
wait "$ch2" || fail "second elect exited $?"
wait_until 10 watch_says '\nfirst one\n\nsecond\n\n' || fail "leader --watch, the end: $(od -c "$TMP/watch.out")"
kill -TERM "$watcher"
rc=0
wait "$watcher" || rc=$?
[[ $rc == 0 ]] || fail "leader --watch ended by SIGTERM exited $rc: $(cat "$TMP/watch.err")"
watch_says '\nfirst one\n\nsecond\n\n' || fail "leader --watch printed: $(od -c "$TMP/watch.out")"
pass

# --watch: a new leader that publishes the same value is a line too (told
# apart by its token); the second leader waits for the first to end
"$DLOCK" --url "$URL" leader --watch --json twin >"$TMP/twin.json" 2>"$TMP/twin.err" &
BG+=("$!")
twj=$!
"$DLOCK" --url "$URL" leader --watch twin >"$TMP/twin.txt" 2>>"$TMP/twin.err" &
BG+=("$!")
twt=$!
sames() { [[ $(grep -c "$1" "$2") -ge $3 ]]; }
lead_until twin same "$TMP/twin1" &
tw1=$!
wait_until 10 test -e "$TMP/twin1.up" || fail "the first twin leader did not start"
wait_until 10 sames '"same"' "$TMP/twin.json" 1 && wait_until 10 sames '^same$' "$TMP/twin.txt" 1 ||
    fail "leader --watch did not see the first leader: $(cat "$TMP/twin.json" "$TMP/twin.txt")"
lead_until twin same "$TMP/twin2" &
tw2=$!
touch "$TMP/twin1.go"
wait "$tw1" || fail "the first twin leader exited $?"
wait_until 10 test -e "$TMP/twin2.up" || fail "the second twin leader did not start"
wait_until 10 sames '"same"' "$TMP/twin.json" 2 && wait_until 10 sames '^same$' "$TMP/twin.txt" 2 ||
    fail "leader --watch missed the second leader of the same value: $(cat "$TMP/twin.json" "$TMP/twin.txt")"
touch "$TMP/twin2.go"
wait "$tw2" || fail "the second twin leader exited $?"
kill -TERM "$twj" "$twt"
wait "$twj" || fail "leader --watch --json exited $?"
wait "$twt" || fail "leader --watch exited $?"
python3 - "$TMP/twin.json" <<'PY' || fail "leader --watch --json, twins: $(cat "$TMP/twin.json")"
import json, sys
e = [json.loads(l) for l in open(sys.argv[1])]
same = [x["token"] for x in e if x["leader"] == "same"]
assert len(same) == 2 and same[0] < same[1], e
assert all(x["token"] is None for x in e if x["leader"] is None), e
PY
pass

# ---- completion -------------------------------------------------------------
# the script `dlock completion bash` makes from the command table is valid
# bash and completes commands, each command's options, and after "--" the
# command to run
expect 0 "$DLOCK" completion bash
mv "$TMP/out" "$TMP/completion.bash"
bash -n "$TMP/completion.bash" || fail "completion bash: not valid bash"
usage_error completion zsh
complete_words() { # WORD... : what _dlock offers for the last word
    bash -c '. "$1"; shift; COMP_WORDS=("$@"); COMP_CWORD=$(($# - 1)); _dlock
        printf "%s\n" "${COMPREPLY[@]}"' _ "$TMP/completion.bash" "$@"
}
[[ $(complete_words dlock le | sort | tr '\n' ' ') == "leader " ]] ||
    fail "completion of 'le': $(complete_words dlock le)"
for c in $(sed -n 's/^  \([a-z]\+\) .*/\1/p' "$TMP/list"); do
    # not "| grep -q": grep may quit before the list is written (SIGPIPE, pipefail)
    grep -qx "$c" <<<"$(complete_words dlock -v "${c:0:3}")" || fail "completion lacks command $c"
done
[[ $(complete_words dlock --url "$URL" run --kill-g) == --kill-grace ]] ||
    fail "completion of run --kill-g: $(complete_words dlock --url "$URL" run --kill-g)"
[[ $(complete_words dlock leader x --w) == --watch ]] ||
    fail "completion of leader --w: $(complete_words dlock leader x --w)"
grep -qx bash <<<"$(complete_words dlock run x -- bas)" || fail "completion after --: no bash"
[[ $(complete_words dlock hold --js) == --json ]] || fail "completion of hold --js"
[[ $(complete_words dlock elect --js) == --json ]] || fail "completion of elect --js"
[[ $(complete_words dlock run --js) == --json ]] || fail "completion of run --js"
# bench and check: their options, from the help texts beside their option
# tables, and check's scenario names from its scenario table
[[ $(complete_words dlock bench --comm) == --commandstats ]] || fail "completion of bench --comm"
[[ $(complete_words dlock bench --no-p) == --no-prepare ]] || fail "completion of bench --no-p"
[[ $(complete_words dlock check --check-h) == --check-history ]] || fail "completion of check --check-h"
[[ $(complete_words dlock check --scenario partition-m) == partition-member ]] ||
    fail "completion of check --scenario partition-m"
"$DLOCK" check --list | awk '{ print $1 }' | sort >"$TMP/scen.want"
complete_words dlock check --scenario '' | sort | cmp -s - "$TMP/scen.want" ||
    fail "completion of check --scenario: $(complete_words dlock check --scenario '')"
expect 0 "$DLOCK" help bench
grep -q -- '--commandstats' "$TMP/out" || fail "dlock help bench"
expect 0 "$DLOCK" check --help
grep -q -- '--check-history' "$TMP/out" || fail "dlock check --help"
grep -qx break <<<"$(complete_words dlock help b)" || fail "completion of help b"
pass

# ---- backends ---------------------------------------------------------------
expect 0 "$DLOCK" backends
grep -q '^file ' "$TMP/out" && grep -q 'fencing' "$TMP/out" || fail "backends: $(cat "$TMP/out")"
expect 0 "$DLOCK" backends --json
json_ok "$TMP/out" || fail "backends --json is not JSON"
python3 -c '
import json, sys
b = json.load(sys.stdin)
f = [x for x in b if x["name"] == "file"][0]
assert f["available"] is True and "fencing" in f["capabilities"], f
assert all(x["available"] or x["missing"] for x in b), b
' <"$TMP/out" || fail "backends --json: $(cat "$TMP/out")"
pass

# ---- break on the file backend: refused, naming the holder ------------------
usage_error --url "$URL" break brk
expect 1 dl break --force brk
start_hold brk
expect 70 dl break --force brk
grep -q "pid $HOLD_PID" "$TMP/err" && [[ $(wc -l <"$TMP/err") == 1 ]] ||
    fail "break of a file lock: $(cat "$TMP/err")"
expect 1 dl run -n brk -- true # still held: nothing was taken
stop_hold "$HOLD_PID"
pass

# ---- issue 22: promises that broke under a new user ------------------------
# 1: an explicitly empty --url (an unset variable) is a usage error, never
# the default backend, wherever the option is written; DLOCK_URL does not
# rescue it
for where in global run status; do
    case $where in
    global) usage_error --url "" run -n nightly -- true ;;
    run) usage_error run --url "" -n nightly -- true ;;
    status) usage_error status --url= nightly ;;
    esac
    grep -q -- '--url is empty' "$TMP/err" || fail "--url '' ($where): $(cat "$TMP/err")"
done
expect 64 env DLOCK_URL="$URL" "$DLOCK" --url "" run -n nightly -- sh -c 'echo RAN'
[[ ! -s $TMP/out ]] || fail "--url '' with DLOCK_URL set ran the command"
pass
# 9: the command gets the open-file limit its caller had, not the hard one
expect 0 bash -c 'ulimit -Sn 100 && exec "$0" --url "$1" run nofile -- sh -c "ulimit -Sn"' \
    "$DLOCK" "$URL"
[[ $(cat "$TMP/out") == 100 ]] || fail "the command's soft RLIMIT_NOFILE: $(cat "$TMP/out"), expected 100"
pass

# 6: a command that dies of a signal: dlock dies of the same one after
# giving the lock back (a shell acts on it: bash stops a script on ^C only
# when its child died of SIGINT), with no core file of its own
python3 - "$DLOCK" "$URL" <<'PY' || fail "dlock did not die of its command's signal"
import subprocess, sys
for sig, name in ((2, "INT"), (15, "TERM"), (10, "USR1")):
    p = subprocess.run([sys.argv[1], "--url", sys.argv[2], "run", "diesig", "--", "sh", "-c",
                        "kill -%s $$" % name])
    if p.returncode != -sig:
        sys.exit("command killed by SIG%s: dlock returned %d, expected to die of it"
                 % (name, p.returncode))
PY
expect 0 dl run -n diesig -- true # given back before dying
pass
if command -v script >/dev/null 2>&1; then
    # In a terminal, the command has it: its ^C reaches only its group. The
    # script around dlock must stop all the same, as with flock(1).
    script -qec "bash -c '\"\$0\" --url \"\$1\" run ctrlc -- sh -c \"kill -INT \\\$\\\$\"; echo after >\"\$2\"' \"$DLOCK\" \"$URL\" \"$TMP/ctrlc.after\"" \
        /dev/null </dev/null >/dev/null 2>&1 || true
    [[ ! -e $TMP/ctrlc.after ]] || fail "the script went on after its dlock run was interrupted"
    expect 0 dl run -n ctrlc -- true
    pass
fi

# 10: names that start with '-' (--name for run and elect, or hold -- NAME)
expect 0 dl run --name -dash -- sh -c 'echo "$DLOCK_NAME"'
[[ $(cat "$TMP/out") == -dash ]] || fail "run --name -dash: $(cat "$TMP/out")"
expect 0 dl elect --name=-dash -- true
usage_error --url "$URL" run --name a --name b -- true
"$DLOCK" --url "$URL" hold -- -dash >"$TMP/dash.out" 2>"$TMP/err" &
dash=$!
BG+=("$dash")
wait_until 5 test -s "$TMP/dash.out" || fail "hold -- -dash printed no token"
expect 1 dl run -n --name -dash -- true
expect 0 dl status --json -- -dash
python3 -c 'import json,sys; d=json.load(sys.stdin); assert d["held"] is True, d' <"$TMP/out" ||
    fail "status -- -dash: $(cat "$TMP/out")"
stop_hold "$dash"
pass
# 10: break --json prints JSON when nothing was held (exit 1)
expect 1 dl break --force --json nothing-held
json_ok "$TMP/out" || fail "break --json, nothing held: not JSON: $(cat "$TMP/out")"
python3 -c 'import json,sys; d=json.load(sys.stdin); assert d["broken"] is False and d["name"] == "nothing-held", d' \
    <"$TMP/out" || fail "break --json, nothing held: $(cat "$TMP/out")"
pass
# 10: a lock directory that is a symbolic link is refused as one
mkdir "$TMP/real"
ln -s "$TMP/real" "$TMP/link"
expect 70 "$DLOCK" --url "file://$TMP/link" run x -- true
grep -q 'it is a symbolic link' "$TMP/err" && ! grep -q 'Not a directory' "$TMP/err" ||
    fail "symbolic link lock directory: $(cat "$TMP/err")"
pass

# 8: the shared default directory on a multi-user host: whoever comes first
# owns it, and the others (root's cron job included) used to be refused.
# As root, with two other uids, in a private mount namespace so that the
# host's /var/tmp is untouched.
if [[ $(id -u) == 0 ]] && command -v setpriv >/dev/null &&
    unshare --mount --propagation private true 2>/dev/null; then
    mkdir -m 1777 "$TMP/vartmp"
    cat >"$TMP/multiuser.sh" <<'SH'
DLOCK=$1 OUT=$2
mount --bind "$3" /var/tmp || exit 77
unset DLOCK_URL DLOCK_URL_FD
as() { local uid=$1; shift; setpriv --reuid "$uid" --regid "$uid" --clear-groups "$@"; }
# a user comes first: the directory is theirs, mode 1777
as 65534 "$DLOCK" run -n shared -- true || exit 10
[[ $(stat -c '%u %a' /var/tmp/dlock) == "65534 1777" ]] || exit 11
# another user holds a lock in it; the first user and root are excluded
setpriv --reuid 1 --regid 1 --clear-groups "$DLOCK" hold shared >"$OUT.hold" 2>"$OUT.err" &
holder=$!
for _ in $(seq 200); do [[ -s $OUT.hold ]] && break; sleep 0.05; done
[[ -s $OUT.hold ]] || exit 12
as 65534 "$DLOCK" run -n shared -- true 2>>"$OUT.err"
[[ $? == 1 ]] || exit 13
"$DLOCK" run -n shared -- true 2>>"$OUT.err"
[[ $? == 1 ]] || exit 14
kill -TERM "$holder"
wait "$holder" || exit 15
"$DLOCK" run -n shared -- true 2>>"$OUT.err" || exit 16
# root has taken it over: its first user can no longer remove others' files
[[ $(stat -c '%u %a' /var/tmp/dlock) == "0 1777" ]] || exit 17
# a hard link planted by a user is refused, not written into
as 65534 sh -c 'echo mine >/var/tmp/mine && ln /var/tmp/mine /var/tmp/dlock/hl.lock' || exit 18
"$DLOCK" run -n hl -- true 2>>"$OUT.err"
[[ $? == 70 ]] || exit 19
grep -q 'hl.lock: it has other hard links' "$OUT.err" || exit 20
[[ $(cat /var/tmp/mine) == mine ]] || exit 21
# planted by a user with another mode than dlock's: refused
rm -rf /var/tmp/dlock
as 65534 mkdir -m 0755 /var/tmp/dlock || exit 22
as 1 "$DLOCK" run -n shared -- true 2>>"$OUT.err"
[[ $? == 70 ]] || exit 23
grep -q 'owned by uid 65534 with mode 0755' "$OUT.err" || exit 24
exit 0
SH
    rc=0
    unshare --mount --propagation private bash "$TMP/multiuser.sh" "$DLOCK" "$TMP/mu" \
        "$TMP/vartmp" || rc=$?
    [[ $rc == 0 || $rc == 77 ]] ||
        fail "shared default directory, multi-user: step $rc failed: $(cat "$TMP/mu.err")"
    pass
fi

echo "$passed passed, 0 failed"
