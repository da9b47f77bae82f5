#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# cli_once_test.sh — `dlock once` (claims that outlive the run) on every
# backend that keeps claims, each against a real server: the embedded file
# backend always, the others started by tests/servers.sh. For each: 20
# processes race one key (exactly one runs, every other prints its result
# and exits with its status); a later duplicate replays, one after the
# retention runs again (attempt 1); --retry-failed reruns only a failed
# claim; kill -9 of the runner's dlock gives the next caller
# DLOCK_ONCE_ATTEMPT=2; another fingerprint is refused naming both; -n
# against a running claim exits 73 and runs nothing; status shows the claim
# and break --force forgets it; a result past 64 KiB is cut, and said. Then
# memcached's one-line refusal. No
# timing is asserted: waits are bounds, and expiry is waited past.
set -u
. "$(dirname "$0")/testlib.sh"
preamble

# Backends with claims besides file: KIND -> servers.sh kind, the URL
# variable it exports and the backend's name. To add one, put its KIND in
# KINDS (the one line).
declare -A SRV=([redis]=redis [rediskey]=redis [sentinel]=sentinel [cluster]=cluster [postgres]=postgres
    [mysql]=mariadb [etcd]=etcd [zk]=zk)
declare -A VAR=([redis]=DLOCK_TEST_REDIS [rediskey]=DLOCK_TEST_REDIS_KEY [sentinel]=DLOCK_TEST_SENTINEL
    [cluster]=DLOCK_TEST_CLUSTER [postgres]=DLOCK_TEST_POSTGRES [mysql]=DLOCK_TEST_MYSQL
    [etcd]=DLOCK_TEST_ETCD [zk]=DLOCK_TEST_ZK)
declare -A BE=([redis]=redis [rediskey]=redis [sentinel]=redis [cluster]=redis [postgres]=postgres [mysql]=mysql
    [etcd]=etcd [zk]=zk)
KINDS=(redis rediskey sentinel cluster postgres mysql etcd zk)

# Only the kinds this build and machine can run (the rest are skipped, said).
run_kinds=()
for k in "${KINDS[@]}"; do
    if "$DLOCK" backends | grep "^${BE[$k]} .* yes\$" >/dev/null &&
        { [[ ${BE[$k]} != redis ]] || command -v redis-sentinel >/dev/null; }; then
        run_kinds+=("$k")
    else
        echo "# $k: not built or no server here: not tested"
    fi
done
have_mc=0
if command -v memcached >/dev/null && "$DLOCK" backends | grep '^memcached .* yes$' >/dev/null; then
    have_mc=1
fi
servers=()
for k in "${run_kinds[@]}"; do
    [[ " ${servers[*]} " == *" ${SRV[$k]} "* ]] || servers+=("${SRV[$k]}")
done
((have_mc)) && servers+=(memcached)
((${#servers[@]})) && in_servers "${servers[@]}"

TMP=$(mktemp -d "${TMPDIR:-/tmp}/dlock-cli-once.XXXXXX")
BG=()
cleanup() {
    local p
    for p in "${BG[@]}"; do kill -9 "$p" 2>/dev/null || true; done
    rm -rf "$TMP"
}
trap cleanup EXIT

# wait_for FILE: until it exists (at most 60 s: a bound, not a timing)
wait_for() {
    local i
    for i in $(seq 600); do
        [[ -e $1 ]] && return 0
        sleep 0.1
    done
    return 1
}

# once_suite LABEL URL: every check on one backend. Keys are unique per run.
once_suite() {
    local label=$1 url=$2 run=$RANDOM$RANDOM
    local d=$TMP/$label
    mkdir -p "$d"
    # Twenty processes connect at once, beside the rest of the suite, under
    # ASan: a connection may take seconds then, which is not what this
    # test is about (ASan runs saw 3 of 20 racers give up on PostgreSQL).
    local sep='?'
    [[ $url == *'?'* ]] && sep='&'
    local dl=("$DLOCK" --url "$url${sep}connect_timeout_ms=60000")

    # -- 20 racers, one key: exactly one runs --
    local key=race-$run i pids=()
    for i in $(seq 20); do
        "${dl[@]}" once -w 120 "$key" -- sh -c \
            'echo x >>"$0"; sleep 0.2; printf "result of %s" "$DLOCK_ONCE_ATTEMPT" >"$DLOCK_RESULT"; exit 7' \
            "$d/ran" >"$d/out.$i" 2>"$d/err.$i" &
        pids+=($!)
    done
    local rcs=() ran replayed=0 bad_rc=0
    for i in $(seq 20); do
        wait "${pids[$((i - 1))]}"
        rcs+=($?)
    done
    ran=$(wc -l <"$d/ran")
    for i in $(seq 20); do
        [[ ${rcs[$((i - 1))]} == 7 ]] || bad_rc=$((bad_rc + 1))
        if [[ $(cat "$d/out.$i") == "result of 1" ]] && grep -q "already ran (attempt 1, exit 7, at " "$d/err.$i"; then
            replayed=$((replayed + 1))
        fi
    done
    if [[ $ran == 1 && $replayed == 19 && $bad_rc == 0 ]]; then
        ok "$label: 20 racers: the command ran once, 19 replayed its result, all exited 7"
    else
        bad "$label: 20 racers: ran $ran times, $replayed replayed, $bad_rc other exit codes (${rcs[*]}); $(cat "$d"/err.* | sort | uniq -c | head -5)"
    fi

    # -- a later duplicate replays; after the retention it runs again --
    key=later-$run
    "${dl[@]}" once --retain 60 "$key" -- sh -c 'echo first >"$DLOCK_RESULT"' >/dev/null 2>&1
    out=$("${dl[@]}" once --retain 60 "$key" -- sh -c 'echo SHOULD-NOT-RUN; exit 9' 2>"$d/err")
    rc=$?
    if [[ $rc == 0 && $out == first ]] && grep -q 'replayed$' "$d/err"; then
        ok "$label: a later duplicate replays (exit 0, the result, 'replayed' on stderr)"
    else
        bad "$label: later duplicate: exit $rc, out '$out', err $(cat "$d/err")"
    fi
    key=expire-$run
    "${dl[@]}" once --retain 1 "$key" -- true >/dev/null 2>&1
    # Past the retention the claim is gone — when exactly is the server's
    # business (etcd rounds a lease up to whole seconds, at least its
    # minimum TTL, and revokes on the leader's next check): replays until
    # then, one run afterwards, within a bound that is a hang's, not a speed.
    sleep 1
    out='' tries=0
    while ((tries++ < 60)); do
        out=$("${dl[@]}" once --retain 1 "$key" -- sh -c 'echo "ran $DLOCK_ONCE_ATTEMPT"' 2>"$d/err")
        [[ $out == "ran"* ]] && break
        grep -q 'replayed$' "$d/err" || break
        sleep 0.5
    done
    [[ $out == "ran 1" ]] && ok "$label: past --retain the command runs again, attempt 1" ||
        bad "$label: past --retain: out '$out' after $tries tries, err $(cat "$d/err")"

    # -- a result past 65536 bytes is cut to that, and said --
    key=big-$run
    "${dl[@]}" once "$key" -- sh -c 'head -c 70000 /dev/zero | tr "\\0" x >"$DLOCK_RESULT"' \
        >/dev/null 2>"$d/err"
    n=$("${dl[@]}" once "$key" -- true 2>/dev/null | wc -c)
    [[ $n == 65536 ]] && grep -q 'longer than 65536 bytes' "$d/err" &&
        ok "$label: a result of 70000 bytes is recorded cut to 65536, and said" ||
        bad "$label: big result: replayed $n bytes; $(cat "$d/err")"

    # -- --retry-failed reruns only a failed claim --
    key=retry-$run
    "${dl[@]}" once "$key" -- sh -c 'exit 5' >/dev/null 2>&1
    out=$("${dl[@]}" once "$key" -- sh -c 'echo SHOULD-NOT-RUN' 2>/dev/null)
    rc1=$?
    out2=$("${dl[@]}" once --retry-failed "$key" -- sh -c 'echo "ran $DLOCK_ONCE_ATTEMPT"' 2>/dev/null)
    rc2=$?
    out3=$("${dl[@]}" once --retry-failed "$key" -- sh -c 'echo SHOULD-NOT-RUN' 2>/dev/null)
    rc3=$?
    if [[ $rc1 == 5 && -z $out && $rc2 == 0 && $out2 == "ran 2" && $rc3 == 0 && -z $out3 ]]; then
        ok "$label: a failed claim replays its status, --retry-failed reruns it (attempt 2), not a success"
    else
        bad "$label: retry-failed: $rc1 '$out' / $rc2 '$out2' / $rc3 '$out3'"
    fi

    # -- kill -9 of the runner's dlock: the next caller is attempt 2 --
    key=crash-$run
    "${dl[@]}" once -t 2 "$key" -- sh -c 'touch "$0"; exec sleep 60' "$d/started" \
        >/dev/null 2>&1 &
    local runner=$!
    BG+=("$runner")
    if wait_for "$d/started"; then
        kill -9 "$runner"
        wait "$runner" 2>/dev/null
        out=$("${dl[@]}" once -w 60 "$key" -- sh -c 'echo "attempt $DLOCK_ONCE_ATTEMPT"' 2>"$d/err")
        [[ $out == "attempt 2" ]] && ok "$label: after kill -9 of the runner the next caller runs attempt 2" ||
            bad "$label: after kill -9: out '$out', err $(cat "$d/err")"
    else
        bad "$label: the runner to kill never started"
    fi

    # -- another fingerprint is refused, naming both --
    key=fp-$run
    "${dl[@]}" once --fingerprint req-AAA "$key" -- true >/dev/null 2>&1
    "${dl[@]}" once --fingerprint req-BBB "$key" -- touch "$d/fp-ran" >/dev/null 2>"$d/err"
    rc=$?
    if [[ $rc == 64 && ! -e $d/fp-ran ]] && grep -q 'req-BBB' "$d/err" && grep -q 'req-AAA' "$d/err"; then
        ok "$label: another fingerprint: exit 64 naming both, nothing ran"
    else
        bad "$label: fingerprint: exit $rc, err $(cat "$d/err")"
    fi

    # -- -n against a running claim: 73, nothing runs --
    key=busy-$run
    "${dl[@]}" once "$key" -- sh -c 'touch "$0"; while [ ! -e "$1" ]; do sleep 0.05; done' \
        "$d/busy-started" "$d/busy-go" >/dev/null 2>&1 &
    runner=$!
    BG+=("$runner")
    if wait_for "$d/busy-started"; then
        "${dl[@]}" once -n "$key" -- touch "$d/busy-ran" >/dev/null 2>"$d/err"
        rc=$?
        [[ $rc == 73 && ! -e $d/busy-ran ]] && ok "$label: -n while it runs: exit 73, nothing ran" ||
            bad "$label: -n while it runs: exit $rc, ran: $([[ -e $d/busy-ran ]] && echo yes || echo no)"
        "${dl[@]}" status "$key" --json >"$d/status.json" 2>/dev/null
        python3 -c 'import json,sys; d=json.load(open(sys.argv[1])); assert d["held"] and d["claim"]["state"]=="running" and d["claim"]["attempt"]==1, d' "$d/status.json" &&
            ok "$label: status --json shows the running claim and its held lock" ||
            bad "$label: status while running: $(cat "$d/status.json")"
    else
        bad "$label: the busy runner never started"
    fi
    touch "$d/busy-go"
    wait "$runner"

    # -- status shows the claim; break --force forgets it --
    "${dl[@]}" status "$key" >"$d/status" 2>&1
    grep -q '^claim: *done, attempt 1, exit 0' "$d/status" && ok "$label: status shows the finished claim" ||
        bad "$label: status: $(cat "$d/status")"
    "${dl[@]}" break --force "$key" >/dev/null 2>"$d/err"
    rc=$?
    out=$("${dl[@]}" once "$key" -- sh -c 'echo "ran $DLOCK_ONCE_ATTEMPT"' 2>/dev/null)
    [[ $rc == 0 && $out == "ran 1" ]] && grep -q 'forgot claim' "$d/err" &&
        ok "$label: break --force forgets the claim: the next caller runs attempt 1" ||
        bad "$label: break --force: exit $rc, then '$out'; $(cat "$d/err")"
}

once_suite file "file://$TMP/locks"
for k in "${run_kinds[@]}"; do
    var=${VAR[$k]}
    once_suite "$k" "${!var}"
done

if ((have_mc)); then
    "$DLOCK" --url "$DLOCK_TEST_MEMCACHED" once k -- touch "$TMP/mc-ran" >/dev/null 2>"$TMP/mc-err"
    rc=$?
    if [[ $rc == 70 && ! -e $TMP/mc-ran && $(wc -l <"$TMP/mc-err") == 1 ]] &&
        grep -q 'memcached cannot keep a claim: it may evict it at any moment' "$TMP/mc-err"; then
        ok "memcached: refused in one line with the reason, nothing ran"
    else
        bad "memcached: exit $rc: $(cat "$TMP/mc-err")"
    fi
fi

echo "$passes passed, $fails failed"
((fails == 0))
