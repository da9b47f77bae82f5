# SPDX-License-Identifier: MIT
# testlib.sh — what the shell tests share: the preamble, skipping, one line
# per check ("ok - ..." or "not ok - ..."), assertions on JSON output, and a
# closing count. Every tests/*_test.sh starts
#
#   . "$(dirname "$0")/testlib.sh"
#   preamble                 # $DLOCK checked, $here and $src set
#   need_zk "$DLOCK"         # or a check of its own, then `skip REASON`
#   in_servers zk            # a test that needs servers.sh's servers
#
# and ends with `finish` (cli_test.sh, which stops at its first failure,
# counts its own).

# preamble: $DLOCK must name the built dlock (ctest sets it, and
# DLOCK_SOURCE_DIR); $here is tests/, $src the source tree.
preamble() {
    DLOCK=${DLOCK:?set DLOCK to the dlock binary}
    here=$(cd "$(dirname "$0")" && pwd)
    src=$(cd "$here/.." && pwd)
    hang_guard "${DLOCK_HANG_GUARD_S:-540}"
}

# hang_guard SECS: if this test still runs after SECS (ctest kills shell
# tests at 600 s and shows only their output), print what each of its
# processes is waiting in — the kernel's wait channel and, with gdb, every
# thread's stack — so that a rare hang says where it is the first time it
# happens. One guard per test (the run again inside servers.sh shares it);
# it looks once a second and goes when the test does.
hang_guard() {
    [ -n "${DLOCK_HANG_GUARDED:-}" ] && return
    export DLOCK_HANG_GUARDED=$$
    local top=$$ secs=$1
    # A grandchild, so that a test's bare `wait` does not wait for it.
    ( (
        exec </dev/null
        for ((i = 0; i < secs; i++)); do
            kill -0 "$top" 2>/dev/null || exit 0
            sleep 1
        done
        echo "# hang_guard: still running after $secs s; its processes:"
        local p pids
        pids=$(hang_descendants "$top")
        # shellcheck disable=SC2086 # a list of pids
        ps -o pid,ppid,pgid,stat,etime,wchan:24,args -p "$(echo $pids | tr ' ' ,)" 2>/dev/null
        for p in $pids; do
            case $(cat "/proc/$p/comm" 2>/dev/null) in dlock* | test_*) ;; *) continue ;; esac
            echo "# hang_guard: $p: $(tr '\0' ' ' <"/proc/$p/cmdline" 2>/dev/null)"
            if command -v gdb >/dev/null; then
                timeout 30 gdb -p "$p" -batch -ex 'thread apply all bt' 2>/dev/null |
                    grep -E '^(#|Thread)'
            else
                cat /proc/"$p"/task/*/stack 2>/dev/null
            fi
        done
    ) & )
}

# hang_descendants PID: PID's descendants, one per line (ps's table walked
# from PID down).
hang_descendants() {
    ps -e -o pid=,ppid= | awk -v top="$1" '
        { kids[$2] = kids[$2] " " $1 }
        END { n = split(kids[top], q, " ")
              for (i = 1; i <= n; i++) { print q[i]; m = split(kids[q[i]], more, " ")
                  for (j = 1; j <= m; j++) q[++n] = more[j] } }'
}

# in_servers KIND...: run this test again inside `tests/servers.sh run
# KIND... --` (which starts those servers, exports their DLOCK_TEST_*
# variables and stops them afterwards), unless it already runs there.
# Variables set on the call (DLOCK_SERVERS_DURABLE=1 in_servers postgres)
# reach servers.sh.
in_servers() {
    if [ -z "${DLOCK_TEST_SERVERS:-}" ]; then
        exec bash "$here/servers.sh" run "$@" -- bash "$0"
    fi
}

# skip REASON: the test cannot run here: exit 77, which ctest shows as
# skipped (SKIP_RETURN_CODE 77 on every shell test), never as passed.
skip() {
    echo "skipped: $*"
    exit 77
}

fails=0
passes=0
ok() { echo "ok - $*"; passes=$((passes + 1)); }
# A failure is also kept for tests/servers.sh, which says it again after the
# servers' logs: CI shows a failed test's first and last lines only.
bad() {
    echo "not ok - $*"
    fails=$((fails + 1))
    [ -z "${DLOCK_TEST_SERVERS:-}" ] || echo "not ok - $*" >>"$DLOCK_TEST_SERVERS/failed"
}

# jcheck FILE DESCRIPTION EXPR: EXPR is python over the JSON object d; sc(name)
# is the scenario of that name in `dlock check --json` output. On failure it
# shows each scenario's verdict and note, or else the start of the file.
jcheck() {
    if python3 -c '
import json, sys
d = json.load(open(sys.argv[1]))
def sc(name):
    return next(s for s in d["scenarios"] if s["name"] == name)
sys.exit(0 if eval(sys.argv[2]) else 1)' "$1" "$3"; then ok "$2"; else
        bad "$2"
        python3 -c '
import json, sys
for s in json.load(open(sys.argv[1]))["scenarios"]:
    print("#   %s: %s: %s" % (s["name"], s["verdict"], s["note"]))' "$1" 2>/dev/null ||
            echo "# $(head -c 4000 "$1")"
        # what the check said on stderr (check_json keeps it beside the JSON)
        if [ -s "${1%.json}.err" ]; then sed -n '1,20s/^/#   stderr: /p' "${1%.json}.err"; fi
        if [ -s "${1%.json}.hist" ]; then history_excerpt "$1" "${1%.json}.hist"; fi
    fi
}

# history_excerpt JSON HISTORY: for each failed scenario whose note names a
# first overlap ("w=A token=T acquired at X while w=B (token=U, since Y)"),
# the history's events of those two workers (and the harness's pauses) from
# a second before Y to half a second after X; for one whose note names a
# holder told it still held a lock ("w=A was told it still held the lock
# (token T) at X"), that worker's events (and the harness's) from 4 s
# before X, in the run that issued T: what a CI log needs to tell a
# product's fault from a checker's (the run itself is gone by then).
history_excerpt() {
    python3 - "$1" "$2" <<'PYX' 2>/dev/null
import json, re, sys
d = json.load(open(sys.argv[1]))
lines = open(sys.argv[2]).read().splitlines()
for s in d["scenarios"]:
    note = s.get("note", "")
    m = re.search(r"w=(\d+) token=\d+ acquired at (\d+) while w=(\d+) \(token=\d+, since (\d+)\)",
                  note)
    told = re.search(r"w=(\d+) was told it still held the lock \(token (\d+)\) at (\d+)", note)
    if s["verdict"] != "fail" or not (m or told):
        continue
    if m:
        a, x, b, y = m.group(1), int(m.group(2)), m.group(3), int(m.group(4))
        mode = "mode=fenced"
        print("#   history of %s around its first overlap (w=%s, w=%s):" % (s["name"], a, b))
    else:
        a, x = told.group(1), int(told.group(3))
        b, y, mode = a, x - 3000000000, ""
        print("#   history of %s before w=%s was told it still held token %s:"
              % (s["name"], a, told.group(2)))
    inside, picked = False, []
    for ln in lines:
        if ln.startswith("run "):
            inside = ("scenario=%s " % s["name"]) in ln and mode in ln
            if inside:
                picked.append(ln)
            continue
        f = ln.split()
        if not inside or len(f) < 2 or not f[0].isdigit():
            continue
        t = int(f[0])
        if y - 1000000000 <= t <= x + 500000000 and (
                "w=%s" % a in f or "w=%s" % b in f or not any(w.startswith("w=") for w in f)):
            picked.append(ln)
    # an overlap's first lines; a look's last ones (up to it)
    shown = picked[:150] if m else picked[-150:]
    for ln in shown:
        print("#     " + ln)
    if len(picked) > len(shown):
        print("#     ... (%d lines in all)" % len(picked))
PYX
}

# check_json NAME URL ARGS...: `$DLOCK --url URL check --json ARGS` into
# $TMP/NAME.json (its stderr in $TMP/NAME.err), one line saying whether it
# ran; a run that did not leaves an empty scenario list for the jchecks.
check_json() {
    local name=$1 url=$2
    shift 2
    "$DLOCK" --url "$url" check --json --history "$TMP/$name.hist" "$@" >"$TMP/$name.json" \
        2>"$TMP/$name.err"
    local rc=$?
    if [ $rc -le 2 ] && [ -s "$TMP/$name.json" ]; then ok "$name: ran (exit $rc)"; else
        bad "$name: exit $rc: $(head -3 "$TMP/$name.err")"
        echo '{"scenarios":[]}' >"$TMP/$name.json"
    fi
}

# need_backend DLOCK NAME: skip unless DLOCK was built with backend NAME.
# (grep reads everything, no -q: quitting at the first match made dlock
# die of SIGPIPE, and under pipefail the test "skipped" at random.)
need_backend() {
    "$1" backends | grep "^$2 .* yes\$" >/dev/null || skip "the $2 backend is not built"
}

# need_zk DLOCK / need_etcd DLOCK: skip unless the server can be started
# here and DLOCK was built with the backend.
need_zk() {
    if [ ! -e /usr/share/java/zookeeper.jar ] || ! command -v java >/dev/null; then
        skip "zookeeper not installed"
    fi
    need_backend "$1" zk
}
need_etcd() {
    command -v etcd >/dev/null || skip "etcd not installed"
    need_backend "$1" etcd
}

# need_redis DLOCK: skip unless redis-server, redis-cli and redis-sentinel
# are installed and DLOCK was built with the Redis backends.
need_redis() {
    local tool
    for tool in redis-server redis-cli redis-sentinel; do
        command -v "$tool" >/dev/null || skip "$tool not installed"
    done
    need_backend "$1" redis
}

# wait_bounded PID SECS LABEL: wait for a background job of this shell for
# at most SECS. A job still running then is a hang the test must show, not
# sit in until CTest's 600 s: its processes, their states and (with gdb)
# every thread's stack are printed as TAP comments, it is killed with its
# children, and the status is 124.
wait_bounded() {
    local pid=$1 secs=$2 label=$3 i kids=() p
    for ((i = 0; i < secs * 10; i++)); do
        kill -0 "$pid" 2>/dev/null || { wait "$pid"; return; }
        sleep 0.1
    done
    echo "# $label: pid $pid still running after ${secs}s; its processes:"
    kids=("$pid")
    for ((i = 0; i < ${#kids[@]}; i++)); do
        for p in $(pgrep -P "${kids[$i]}"); do kids+=("$p"); done
    done
    for p in "${kids[@]}"; do
        echo "# pid $p $(awk '/^State|^Threads/ {printf "%s ", $0}' "/proc/$p/status" 2>/dev/null) $(tr '\0' ' ' <"/proc/$p/cmdline" 2>/dev/null)"
        if command -v gdb >/dev/null; then
            timeout 20 gdb -p "$p" -batch -ex 'thread apply all bt' 2>/dev/null |
                grep -E '^(Thread|#)' | sed 's/^/#   /'
        fi
    done
    kill -KILL "${kids[@]}" 2>/dev/null
    wait "$pid" 2>/dev/null
    return 124
}

# start_relay LISTEN_PORT TARGET_PORT: a TCP relay (tcp_relay.py) to freeze
# with SIGSTOP, its pid in $relay; returns once it accepts connections
# (python starts slowly on a loaded machine), 1 if it did not within 10 s.
start_relay() {
    python3 "$here/tcp_relay.py" "$1" "$2" & relay=$!
    for _ in $(seq 100); do
        (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null && return 0
        sleep 0.1
    done
    return 1
}

# wait_held URL NAME: until `dlock status` says NAME is held (10 s at most).
wait_held() {
    for _ in $(seq 100); do
        "$DLOCK" --url "$1" status "$2" 2>/dev/null | grep -q 'held: *yes' && return 0
        sleep 0.1
    done
    return 1
}

# wait_waiting URL NAME: until `dlock status` says one client waits for
# NAME (10 s at most).
wait_waiting() {
    for _ in $(seq 100); do
        "$DLOCK" --url "$1" status "$2" 2>/dev/null | grep -q 'waiters: *1' && return 0
        sleep 0.1
    done
    return 1
}

# zk_mode PORT: the "Mode:" line of the ZooKeeper member on 127.0.0.1:PORT
# ("srvr", its own status word): leader, follower or standalone.
zk_mode() {
    python3 - "$1" <<'PY'
import socket, sys
s = socket.create_connection(("127.0.0.1", int(sys.argv[1])), timeout=2)
s.sendall(b"srvr")
print("".join(l for l in s.makefile().read().splitlines() if l.startswith("Mode:")))
PY
}

# run_in_election URL PID WHAT: with a three-member cluster's leader just
# killed, stop the member PID for 3 s and start `dlock run -w 20` meanwhile:
# the members left answer but have no leader as the client opens (as in an
# election that takes seconds). The client must ride that out within its
# wait and get the lock (CI once saw an opening fail there at once: "cannot
# open backend: etcd has no leader").
run_in_election() {
    local run
    kill -STOP "$2"
    "$DLOCK" --url "$1" run -w 20 in-election -- true 2>"$TMP/election.err" &
    run=$!
    sleep 3
    kill -CONT "$2"
    wait "$run" && ok "$3: a client opened with no leader got the lock once one was elected" ||
        bad "$3: a client opened with no leader: $(cat "$TMP/election.err")"
}

# start_holder URL NAME GO WHAT: `dlock run NAME` in the background
# ($holder, its stderr in GO.err), holding until the file GO exists; false,
# and said, when it never held.
start_holder() {
    rm -f "$3"
    "$DLOCK" --url "$1" run "$2" -- sh -c "$(holds_until "$3")" 2>"$3.err" &
    holder=$!
    wait_held "$1" "$2" && return 0
    bad "$4: the holder never held its lock: $(cat "$3.err")"
    kill "$holder" 2>/dev/null
    return 1
}

# ride_out_restart URL KIND WHAT [kept]: a holder and a waiter (`dlock run
# -w 30`) of one lock; the server (tests/servers.sh's KIND) killed with
# kill -9 and started again 1 s later. The holder is told its lock is lost
# (exit 75) — or, with "kept" (a lease in a durable table), keeps it and
# ends when told, after the restart — and the waiter rides the outage out
# and gets the lock from the server that came back (it once failed at
# once: "Connection refused", exit 69).
ride_out_restart() {
    local url=$1 kind=$2 what=$3 kept=${4:-} holder waiter rc=0 hrc=0 want=75
    [ -n "$kept" ] && want=0
    start_holder "$url" restart-ride "$TMP/ride.go" "$what" || return
    "$DLOCK" --url "$url" run -w 30 restart-ride -- true 2>"$TMP/ride.err" &
    waiter=$!
    sleep 0.5
    srv_dir=${srv_dir:-$DLOCK_TEST_SERVERS} srv_restart "$kind" 1 2>"$TMP/ride.restart" ||
        bad "$what: the server did not come back: $(cat "$TMP/ride.restart")"
    if [ -n "$kept" ]; then
        sleep 1 # the waiter back at its wait, the holder renewing on the server that came back
        kill -0 "$waiter" 2>/dev/null || bad "$what: the waiter ended while the holder kept its lease"
        touch "$TMP/ride.go"
    fi
    wait "$waiter" || rc=$?
    touch "$TMP/ride.go"
    wait "$holder" || hrc=$?
    [ $rc = 0 ] && ok "$what: a waiter rode out a restart of the server (1 s down) and got the lock" ||
        bad "$what: a waiter across a restart of the server exited $rc: $(cat "$TMP/ride.err")"
    [ $hrc = "$want" ] && ok "$what: the holder across the restart exited $hrc, as expected" ||
        bad "$what: the holder across the restart exited $hrc, expected $want: $(cat "$TMP/ride.go.err")"
}

# open_in_restart URL KIND WHAT: `dlock run` started while the server is
# down (killed, started again 2 s later): with -w 30 it waits the restart
# out and gets the lock (it once failed at once: exit 69); without -w (wait
# for ever) it fails at once with exit 69, as for a wrong URL.
open_in_restart() {
    local url=$1 kind=$2 what=$3 restarter rc=0 t0 took old i
    old=$(cat "$DLOCK_TEST_SERVERS/$kind.pid")
    srv_dir=${srv_dir:-$DLOCK_TEST_SERVERS} srv_restart "$kind" 2 2>"$TMP/oir.restart" &
    restarter=$!
    # until the old server is gone (a zombie counts as gone)
    for ((i = 0; i < 100; i++)); do
        [[ $(sed -E 's/.*\) (.).*/\1/' "/proc/$old/stat" 2>/dev/null || echo Z) == Z ]] && break
        sleep 0.02
    done
    t0=$(date +%s%3N)
    "$DLOCK" --url "$url" run open-in-restart -- true 2>"$TMP/oir.err" || rc=$?
    took=$(($(date +%s%3N) - t0))
    [ $rc = 69 ] && [ $took -lt 1500 ] && ok "$what: no -w, the server down: exit 69 in $took ms" ||
        bad "$what: no -w, the server down: exit $rc in $took ms: $(cat "$TMP/oir.err")"
    rc=0
    "$DLOCK" -v --url "$url" run -w 30 open-in-restart -- true 2>"$TMP/oir.err" || rc=$?
    wait "$restarter" || bad "$what: the server did not come back: $(cat "$TMP/oir.restart")"
    [ $rc = 0 ] && grep -q 'cannot open backend yet' "$TMP/oir.err" &&
        ok "$what: -w 30 started while the server was down got the lock once it was back" ||
        bad "$what: -w 30 started while the server was down: exit $rc: $(cat "$TMP/oir.err")"
}

# outage_runs_out URL KIND WHAT: a waiter (`dlock run -w 2`) behind a
# holder, and the server killed and kept down 5 s, longer than the wait:
# the waiter ends unreachable (exit 69) with its reason, by its bound plus
# slack, not timed out (exit 1: that would say the lock was taken) — the
# same on every backend (etcd and ZooKeeper, which ride outages out in their
# own loops, once said exit 1). The holder is told to end afterwards.
outage_runs_out() {
    local url=$1 kind=$2 what=$3 holder waiter restarter rc=0 t0 took
    start_holder "$url" outage-out "$TMP/out.go" "$what" || return
    t0=$(date +%s%3N)
    "$DLOCK" --url "$url" run -w 2 outage-out -- true 2>"$TMP/out.err" &
    waiter=$!
    sleep 0.3
    srv_dir=${srv_dir:-$DLOCK_TEST_SERVERS} srv_restart "$kind" 5 2>"$TMP/out.restart" &
    restarter=$!
    wait "$waiter" || rc=$?
    took=$(($(date +%s%3N) - t0))
    wait "$restarter" || bad "$what: the server did not come back: $(cat "$TMP/out.restart")"
    touch "$TMP/out.go"
    wait "$holder"
    [ $rc = 69 ] && [ "$(wc -l <"$TMP/out.err")" = 1 ] &&
        ok "$what: a -w 2 wait that the server's outage outlasted: exit 69 after $took ms: $(cat "$TMP/out.err")" ||
        bad "$what: a -w 2 wait that the server's outage outlasted: exit $rc after $took ms, expected 69: $(cat "$TMP/out.err")"
}

# A command that notes when it is stopped (SIGTERM), for `dlock run NAME --
# sh -c "$(stopper FILE)"`: the time in ms into FILE, then exit 1.
stopper() { echo "trap 'date +%s%3N >$1; exit 1' TERM; sleep 20 & wait"; }

# A held lock's command for `dlock run NAME -- sh -c "$(holds_until FILE)"`:
# writes its token to FILE.tok, then runs until FILE exists. A holder that
# must still hold at the test's next steps is told when to end, never given
# a fixed sleep (a slow start under a sanitizer or load outlasts any).
holds_until() { echo "echo \$DLOCK_TOKEN >$1.tok; while [ ! -e $1 ]; do sleep 0.05; done"; }

finish() {
    echo "$passes passed, $fails failed"
    [ "$fails" -eq 0 ]
}
