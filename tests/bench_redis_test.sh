#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# bench_redis_test.sh — short `dlock bench` runs on real Redis servers (one
# master, five Redlock masters) started by tests/servers.sh: the SPEC §7
# fields, the PING baseline (rtt_p50_us, and rtt_single_p50_us for Redlock),
# the bare hand-over relay of contended runs (relay_p50_us), the servers'
# command counts (server_commands*), no violations; bench/matrix.sh and
# bench/targets.py on a one-row matrix. Speed is measured, never asserted.
# Skipped (exit 77) without redis-server or the redis backends. Needs $DLOCK
# and python3.
set -u
. "$(dirname "$0")/testlib.sh"
preamble
need_redis "$DLOCK"
in_servers redis redlock

TMP=$(mktemp -d "${TMPDIR:-/tmp}/dlock-bench-redis.XXXXXX")
trap 'rm -rf "$TMP"' EXIT
SHORT="-D 0.5 --warmup 0.2 --json"


run() { # NAME URL ARGS...: bench into $TMP/NAME.json
    local name=$1 url=$2
    shift 2
    "$DLOCK" --url "$url" bench "$@" >"$TMP/$name.json" 2>"$TMP/$name.err"
    local rc=$?
    [ $rc -eq 0 ] && ok "$name: exit 0" || { bad "$name: exit $rc: $(head -2 "$TMP/$name.err")"; echo '{}' >"$TMP/$name.json"; }
}

FIELDS='("backend", "P", "K", "H", "n", "ops_per_s", "cycle_p50_us", "cycle_p99_us", "wait_p50_us", "wait_p99_us", "handover_p50_us", "handover_p99_us", "handovers", "violations", "fairness_min_max", "rtt_p50_us", "rtt_p99_us", "cycle_rtt_ratio")'

run redis1 "$DLOCK_TEST_REDIS" -P 1 --baseline --commandstats $SHORT
jcheck "$TMP/redis1.json" "redis uncontended: every field, violations 0" \
    "all(k in d for k in $FIELDS) and d['violations'] == 0 and d['n'] > 0"
jcheck "$TMP/redis1.json" "redis uncontended: PING baseline to the master, ratio" \
    'd["rtt_p50_us"] > 0 and d["cycle_rtt_ratio"] > 0 and "PING" in d["baseline"]'
jcheck "$TMP/redis1.json" "redis uncontended: commands counted (FCALL), about two per section" \
    'd["server_commands"]["fcall"] > 0 and 1.5 <= d["server_commands_per_section"] <= 3'

run redis4 "$DLOCK_TEST_REDIS" -P 4 -H 50 --fair --baseline --commandstats $SHORT
jcheck "$TMP/redis4.json" "redis 4 fair waiters: violations 0, hand-overs, ratio to rtt" \
    'd["violations"] == 0 and d["handovers"] > 0 and d["handover_rtt_ratio"] > 0 and d["fair"] is True'
jcheck "$TMP/redis4.json" "redis 4 fair waiters: the bare RPUSH->BLPOP relay measured beside it" \
    'd["relay_p50_us"] > 0 and d["relay_p99_us"] >= d["relay_p50_us"] and d["handover_relay_ratio"] > 0'
jcheck "$TMP/redis4.json" "redis 4 fair waiters: commands per hand-over counted (BLPOP)" \
    'd["server_commands"]["blpop"] > 0 and d["server_commands_per_handover"] > 0'

run redlock1 "$DLOCK_TEST_REDLOCK" -P 1 --baseline --commandstats $SHORT
jcheck "$TMP/redlock1.json" "redlock uncontended: every field, violations 0" \
    "all(k in d for k in $FIELDS) and d['violations'] == 0 and d['backend'] == 'redlock'"
jcheck "$TMP/redlock1.json" "redlock: PING to all masters and to one alone" \
    'd["rtt_p50_us"] > 0 and d["rtt_single_p50_us"] > 0 and "all 5 masters" in d["baseline"] and d["server_commands_servers"] == 5'

run redlock3 "$DLOCK_TEST_REDLOCK" -P 3 -H 50 $SHORT
jcheck "$TMP/redlock3.json" "redlock 3 waiters: violations 0" 'd["violations"] == 0 and d["n"] > 0'

# -L: each of 2 worker processes keeps 300 locks of its own through the run
# (leases of 2 s: renewed several times), on a single master and on Redlock
run held "$DLOCK_TEST_REDIS" -P 2 -L 300 --ttl 2 -D 3 --warmup 0.2 --json
jcheck "$TMP/held.json" "redis -L 300: all 600 still held, none lost, renewals and memory counted" \
    'd["held_per_worker"] == 300 and d["held"] == 600 and d["lost"] == 0 and d["renewals_per_s"] > 0 and 0 < d["renewal_calls_per_s"] < d["renewals_per_s"] and d["rss_per_lock_bytes"] is not None'
run heldrl "$DLOCK_TEST_REDLOCK" -P 1 -L 300 --ttl 2 -D 3 --warmup 0.2 --json
jcheck "$TMP/heldrl.json" "redlock -L 300: all held, none lost, renewed in batches" \
    'd["held"] == 300 and d["lost"] == 0 and 0 < d["renewal_calls_per_s"] < d["renewals_per_s"]'

# the matrix script and the targets on one row of each backend
DLOCK=$DLOCK BENCH_LABEL=test bash "$here/../bench/matrix.sh" -D 0.3 -n 3 -r uncontended \
    -o "$TMP/m.jsonl" "$DLOCK_TEST_REDIS" "$DLOCK_TEST_REDLOCK" 2>"$TMP/m.err"
rc=$?
[ $rc -eq 0 ] && [ "$(wc -l <"$TMP/m.jsonl")" -eq 6 ] &&
    [ "$(grep -c '"rep":3,' "$TMP/m.jsonl")" -eq 2 ] && ok "matrix.sh -n 3: two rows, three times" ||
    bad "matrix.sh: exit $rc, $(cat "$TMP/m.err")"
python3 "$here/../bench/targets.py" "$TMP/m.jsonl" >"$TMP/t.txt"
grep -q "^uncontended cycle / rtt (redis) .* \(met\|MISSED\)" "$TMP/t.txt" &&
    grep -q "^redlock cycle / single-master cycle .* \(met\|MISSED\)" "$TMP/t.txt" &&
    grep -q "runs: [0-9.]* [0-9.]* [0-9.]*; met in [0-3] of 3" "$TMP/t.txt" &&
    ok "targets.py: the two uncontended figures, median of three" || bad "targets.py: $(cat "$TMP/t.txt")"
# the median is a value one repetition had, not a mean
python3 "$here/../bench/targets.py" --json "$TMP/m.jsonl" | python3 -c '
import json, sys
f = [json.loads(l) for l in sys.stdin][0]
sys.exit(0 if f["value"] == sorted(f["reps"])[1] else 1)' &&
    ok "targets.py: median of the repetitions" || bad "targets.py --json: $(python3 "$here/../bench/targets.py" --json "$TMP/m.jsonl" | head -1)"
python3 "$here/../bench/compare.py" "$TMP/m.jsonl" "$TMP/m.jsonl" >"$TMP/c.txt" &&
    grep -q "^== uncontended on redlock" "$TMP/c.txt" && grep -q "^   reps  *3  *3" "$TMP/c.txt" &&
    ok "compare.py: medians of three repetitions per row" || bad "compare.py: $(cat "$TMP/c.txt")"

finish
