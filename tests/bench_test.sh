#!/bin/bash
# SPDX-License-Identifier: MIT
# bench_test.sh — short `dlock bench` runs on the embedded file backend:
# every SPEC §7 field present, no violations, the scale modes, clean-up on
# SIGINT. Speed is measured, never asserted. Needs $DLOCK and python3.
set -u
. "$(dirname "$0")/testlib.sh"
preamble
TMP=$(mktemp -d "${TMPDIR:-/tmp}/dlock-bench-test.XXXXXX")
BG=
cleanup() {
    [ -n "$BG" ] && kill -KILL "$BG" 2>/dev/null
    rm -rf "$TMP"
}
trap cleanup EXIT
URL="file://$TMP/locks"
SHORT="-D 0.5 --warmup 0.2 --json"


run() { # NAME ARGS...: runs bench, output in $TMP/NAME.json
    local name=$1
    shift
    "$DLOCK" --url "$URL" bench "$@" >"$TMP/$name.json"
    local rc=$?
    [ $rc -eq 0 ] && ok "$name: exit 0" || bad "$name: exit $rc"
}

FIELDS='("backend", "P", "K", "H", "n", "ops_per_s", "cycle_p50_us", "cycle_p99_us", "wait_p50_us", "wait_p99_us", "handover_p50_us", "handover_p99_us", "handovers", "violations", "fairness_min_max")'

# --- uncontended, with the baseline round trip
run uncontended -P 1 --baseline $SHORT
jcheck "$TMP/uncontended.json" "uncontended: every SPEC field present" "all(k in d for k in $FIELDS)"
jcheck "$TMP/uncontended.json" "uncontended: backend file, P 1, n > 0, violations 0" \
    'd["backend"] == "file" and d["P"] == 1 and d["n"] > 0 and d["violations"] == 0'
jcheck "$TMP/uncontended.json" "uncontended: baseline rtt and ratio" \
    'd["rtt_p50_us"] > 0 and d["cycle_rtt_ratio"] > 0 and "baseline" in d'
jcheck "$TMP/uncontended.json" "uncontended: fairness is [n, n] for one waiter" \
    'd["fairness_min_max"] == [d["n"], d["n"]]'

# --- contended, one name
# -L on a backend without leases: held all through, nothing to renew
run held -P 2 -L 50 $SHORT
jcheck "$TMP/held.json" "-L 50: 100 held, none lost, no renewals (kernel locks)" \
    'd["held_per_worker"] == 50 and d["held"] == 100 and d["lost"] == 0 and d["renewals_per_s"] == 0'
"$DLOCK" --url "$URL" bench -L 0 >/dev/null 2>"$TMP/l0.err"
[ $? -eq 64 ] && grep -q "wants an integer" "$TMP/l0.err" && ok "-L 0: usage error" ||
    bad "-L 0: $(cat "$TMP/l0.err")"

run contended -P 4 -K 1 -H 50 $SHORT
jcheck "$TMP/contended.json" "contended: violations 0 over every section" \
    'd["violations"] == 0 and d["sections_checked"] >= d["n"] > 0'
jcheck "$TMP/contended.json" "contended: 4 processes of one thread, fairness [min, max]" \
    'd["procs"] == 4 and d["threads_per_proc"] == 1 and len(d["fairness_min_max"]) == 2 and d["fairness_min_max"][0] <= d["fairness_min_max"][1]'
jcheck "$TMP/contended.json" "contended: percentiles ordered" \
    'd["cycle_p50_us"] <= d["cycle_p99_us"] and d["wait_p50_us"] <= d["wait_p99_us"] and (d["handovers"] == 0 or d["handover_p50_us"] <= d["handover_p99_us"])'

# --- read-write lock and semaphore
run shared -P 4 --shared --writers 1 -H 20 $SHORT
jcheck "$TMP/shared.json" "shared: violations 0" 'd["violations"] == 0 and d["kind"] == "shared" and d["writers"] == 1'
run semaphore -P 4 --permits 2 -H 20 --fair $SHORT
jcheck "$TMP/semaphore.json" "semaphore: violations 0" \
    'd["violations"] == 0 and d["kind"] == "semaphore" and d["permits"] == 2 and d["fair"] is True'

# --- many waiters: threads inside processes past --max-procs
run threads -P 12 --max-procs 4 -H 5 $SHORT
jcheck "$TMP/threads.json" "threads: 4 processes x 3 threads, violations 0" \
    'd["procs"] == 4 and d["threads_per_proc"] == 3 and d["violations"] == 0'

# --- many names, with the memory probe
run names -P 2 -K 2000 --pick rr $SHORT
jcheck "$TMP/names.json" "names: violations 0, memory per held lock measured" \
    'd["violations"] == 0 and d["K"] == 2000 and d["rss_locks_held"] > 0 and d["rss_per_lock_bytes"] is not None and d["fds_per_lock"] > 0'
run perop -P 2 -K 50 --handles per-op $SHORT
jcheck "$TMP/perop.json" "per-op handles: violations 0" 'd["handles"] == "per_op" and d["violations"] == 0'
[ -z "$(ls -A "$TMP/locks" 2>/dev/null)" ] && ok "lock files removed" || bad "left: $(ls "$TMP/locks" | head)"

# --- human summary
"$DLOCK" --url "$URL" bench -P 2 -D 0.3 --warmup 0 --baseline >"$TMP/human.txt"
rc=$?
[ $rc -eq 0 ] && grep -q "ops/s" "$TMP/human.txt" && grep -q "violations 0" "$TMP/human.txt" &&
    grep -q "baseline" "$TMP/human.txt" && ok "human summary" || bad "human summary: $(cat "$TMP/human.txt")"

# --- usage errors
for args in "-P 0" "-P 513" "-K 0" "--shared --permits 2" "--writers 1" "-D 0" "--pick sideways" "extra"; do
    # shellcheck disable=SC2086
    "$DLOCK" --url "$URL" bench $args >/dev/null 2>&1
    rc=$?
    [ $rc -eq 64 ] && ok "usage: bench $args -> 64" || bad "usage: bench $args -> $rc"
done
"$DLOCK" bench --help | grep -q "handover" && ok "--help" || bad "--help"

# --- SIGINT: partial results, exit 130, every worker reaped
"$DLOCK" --url "$URL" bench -P 4 -H 50 -D 30 --json >"$TMP/int.json" &
BG=$!
sleep 1.5
kids=$(ps -o pid= --ppid "$BG" | tr '\n' ' ')
kill -INT "$BG"
wait "$BG"
rc=$?
BG=
[ $rc -eq 130 ] && ok "SIGINT: exit 130" || bad "SIGINT: exit $rc"
jcheck "$TMP/int.json" "SIGINT: partial results marked interrupted" \
    'd.get("interrupted") is True and d["violations"] == 0'
[ -n "$kids" ] && ok "SIGINT: there were workers" || bad "SIGINT: no workers seen"
sleep 0.2
left=
for k in $kids; do [ -e "/proc/$k" ] && left="$left $k"; done
[ -z "$left" ] && ok "SIGINT: every worker is gone" || bad "SIGINT: still running:$left"

finish
