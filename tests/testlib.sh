# testlib.sh — what the shell tests share: one line per check ("ok - ..." or
# "not ok - ..."), assertions on JSON output, and a closing count.
# Source it; end the test with `finish`.
fails=0
passes=0
ok() { echo "ok - $*"; passes=$((passes + 1)); }
bad() { echo "not ok - $*"; fails=$((fails + 1)); }

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
    fi
}

# check_json NAME URL ARGS...: `$DLOCK --url URL check --json ARGS` into
# $TMP/NAME.json (its stderr in $TMP/NAME.err), one line saying whether it
# ran; a run that did not leaves an empty scenario list for the jchecks.
check_json() {
    local name=$1 url=$2
    shift 2
    "$DLOCK" --url "$url" check --json "$@" >"$TMP/$name.json" 2>"$TMP/$name.err"
    local rc=$?
    if [ $rc -le 2 ] && [ -s "$TMP/$name.json" ]; then ok "$name: ran (exit $rc)"; else
        bad "$name: exit $rc: $(head -3 "$TMP/$name.err")"
        echo '{"scenarios":[]}' >"$TMP/$name.json"
    fi
}

# need_zk DLOCK / need_etcd DLOCK: exit 0 ("skipped") unless the server can
# be started here and DLOCK was built with the backend.
need_zk() {
    if [ ! -e /usr/share/java/zookeeper.jar ] || ! command -v java >/dev/null; then
        echo "zookeeper not installed: skipped"
        exit 0
    fi
    if ! "$1" backends | grep '^zk .* yes$' >/dev/null; then
        echo "zk backend not built: skipped"
        exit 0
    fi
}
need_etcd() {
    if ! command -v etcd >/dev/null || ! "$1" backends | grep '^etcd .* yes$' >/dev/null; then
        echo "etcd or the etcd backend missing: skipped"
        exit 0
    fi
}

# need_redis DLOCK: exit 0 ("skipped") unless redis-server, redis-cli and
# redis-sentinel are installed and DLOCK was built with the Redis backends.
need_redis() {
    local tool
    for tool in redis-server redis-cli redis-sentinel; do
        if ! command -v "$tool" >/dev/null; then
            echo "$tool not installed: skipped"
            exit 0
        fi
    done
    # grep reads everything (no -q): quitting at the first match made
    # dlock die of SIGPIPE, and under pipefail the test "skipped" at random
    if ! "$1" backends | grep '^redis .* yes$' >/dev/null; then
        echo "redis backend not built: skipped"
        exit 0
    fi
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

finish() {
    echo "$passes passed, $fails failed"
    [ "$fails" -eq 0 ]
}
