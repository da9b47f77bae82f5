#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# cli_atleast_test.sh — `dlock run --at-least SECS` (issue 28) on real
# servers: a command that ends at once keeps its lock taken until SECS after
# the acquisition. On lease backends (redis, its key= layout, redlock, memcached,
# postgres mode=lease, etcd: its key moved to a lease of its own) dlock has
# exited already and a rival `run -n` is refused, `dlock status` says held;
# on session backends (file, zk, postgres advisory, etcd's layout=etcdctl)
# dlock itself stays, holding, and a rival is refused
# meanwhile. After the minimum a rival gets the lock (polled, generous
# bound); without --at-least nothing changes. No timed assertion: a round
# that took longer than its minimum (a starved machine) proves nothing and
# is run again with a longer minimum. Servers from tests/servers.sh.
set -u
. "$(dirname "$0")/testlib.sh"
preamble
need_redis "$DLOCK"
need_zk "$DLOCK"
need_etcd "$DLOCK"
need_backend "$DLOCK" postgres
need_backend "$DLOCK" memcached
command -v memcached >/dev/null || skip "memcached not installed"
ls /usr/lib/postgresql/*/bin/postgres >/dev/null 2>&1 || skip "PostgreSQL not installed"
in_servers redis redlock zk postgres memcached etcd

TMP=$(mktemp -d "${TMPDIR:-/tmp}/dlock-cli-atleast.XXXXXX")
trap 'rm -rf "$TMP"' EXIT
now_ms() { date +%s%3N; }
# free URL NAME: poll until a rival takes NAME at once (60 s at most)
free() {
    for _ in $(seq 300); do
        "$DLOCK" --url "$1" run -n "$2" -- true 2>/dev/null && return 0
        sleep 0.2
    done
    return 1
}

# --- usage errors ---------------------------------------------------------
FURL=file://$TMP/locks
for args in "run --at-least 0 u -- true" "run --at-least x u -- true" \
    "run --at-least 5 --max-hold 2 u -- true" "elect --at-least 1 u -- true"; do
    # shellcheck disable=SC2086
    "$DLOCK" --url "$FURL" $args 2>"$TMP/err"
    rc=$?
    [ $rc = 64 ] && grep -q -- "--at-least" "$TMP/err" &&
        ok "$args: usage error naming --at-least" || bad "$args: exit $rc: $(cat "$TMP/err")"
done

# lease_case LABEL URL: dlock exits at once, the lock stays on the server.
lease_case() {
    local label=$1 u=$2 min=3 try name t0 t1 rc rrc st
    for try in 1 2 3; do
        name=al-$label-$try
        t0=$(now_ms)
        "$DLOCK" --url "$u" run --at-least $min --json "$name" -- true 2>"$TMP/$label.err"
        rc=$?
        "$DLOCK" --url "$u" run -n "$name" -- echo RAN >"$TMP/$label.rival" 2>/dev/null
        rrc=$?
        st=$("$DLOCK" --url "$u" status "$name" 2>&1)
        t1=$(now_ms)
        [ $((t1 - t0)) -lt $((min * 1000)) ] && break
        echo "# $label: the round took $((t1 - t0)) ms, over its ${min} s minimum: again, longer"
        min=$((min * 2))
    done
    if [ $((t1 - t0)) -ge $((min * 1000)) ]; then
        bad "$label: three rounds each outlasted their minimum (machine too slow to tell)"
        return
    fi
    [ $rc = 0 ] && grep -q '^{"event":"released".*"held_until_ms":' "$TMP/$label.err" &&
        ok "$label: dlock exited (status 0), its released event says held_until_ms" ||
        { bad "$label: holder exit $rc"; sed 's/^/# /' "$TMP/$label.err"; }
    [ $rrc = 1 ] && [ ! -s "$TMP/$label.rival" ] &&
        ok "$label: after dlock exited, a rival run -n is refused (exit 1), ran nothing" ||
        bad "$label: rival exit $rrc, output '$(cat "$TMP/$label.rival")'"
    echo "$st" | grep -q 'held: *yes' && ok "$label: dlock status says held" ||
        { bad "$label: status does not say held"; echo "$st" | sed 's/^/# /'; }
    free "$u" "$name" && ok "$label: after the minimum a rival takes it" ||
        bad "$label: still taken after 60 s"
}

# session_case LABEL URL: dlock stays, holding, until the minimum.
session_case() {
    local label=$1 u=$2 min=3 try name t0 t1 rc rrc alive pid
    for try in 1 2 3; do
        name=al-$label-$try
        rm -f "$TMP/$label.ran"
        t0=$(now_ms)
        "$DLOCK" --url "$u" run --at-least $min "$name" -- touch "$TMP/$label.ran" \
            2>"$TMP/$label.err" &
        pid=$!
        for _ in $(seq 200); do [ -e "$TMP/$label.ran" ] && break; sleep 0.05; done
        "$DLOCK" --url "$u" run -n "$name" -- echo RAN >"$TMP/$label.rival" 2>/dev/null
        rrc=$?
        kill -0 $pid 2>/dev/null && alive=1 || alive=0
        t1=$(now_ms)
        wait $pid
        rc=$?
        [ -e "$TMP/$label.ran" ] && [ $((t1 - t0)) -lt $((min * 1000)) ] && break
        echo "# $label: the round took $((t1 - t0)) ms, over its ${min} s minimum: again, longer"
        min=$((min * 2))
    done
    if [ $((t1 - t0)) -ge $((min * 1000)) ]; then
        bad "$label: three rounds each outlasted their minimum (machine too slow to tell)"
        return
    fi
    [ $rrc = 1 ] && [ ! -s "$TMP/$label.rival" ] && [ $alive = 1 ] &&
        ok "$label: the command ended, dlock still holds: a rival run -n is refused" ||
        bad "$label: rival exit $rrc, output '$(cat "$TMP/$label.rival")', dlock alive $alive"
    [ $rc = 0 ] && ok "$label: dlock exited 0 after the minimum" ||
        { bad "$label: holder exit $rc"; sed 's/^/# /' "$TMP/$label.err"; }
    "$DLOCK" --url "$u" run -n "$name" -- true 2>"$TMP/err" &&
        ok "$label: once dlock exited, a rival takes it at once" ||
        bad "$label: not free after dlock exited: $(cat "$TMP/err")"
}

# unchanged LABEL URL: without --at-least a release frees the lock at once.
unchanged() {
    "$DLOCK" --url "$2" run "al-$1-plain" -- true &&
        "$DLOCK" --url "$2" run -n "al-$1-plain" -- true 2>"$TMP/err" &&
        ok "$1: without --at-least the lock is free once the command ended" ||
        bad "$1: without --at-least: $(cat "$TMP/err")"
}

lease_case redis "$DLOCK_TEST_REDIS"
lease_case redis-key "$DLOCK_TEST_REDIS_KEY"
lease_case memcached "$DLOCK_TEST_MEMCACHED"
lease_case pg-lease "$DLOCK_TEST_POSTGRES_LEASE"
lease_case redlock "$DLOCK_TEST_REDLOCK"
lease_case etcd "$DLOCK_TEST_ETCD"
session_case file "$FURL"
session_case zk "$DLOCK_TEST_ZK"
session_case pg-advisory "$DLOCK_TEST_POSTGRES"
session_case etcdctl "$DLOCK_TEST_ETCD_ETCDCTL"
for b in redis:"$DLOCK_TEST_REDIS" memcached:"$DLOCK_TEST_MEMCACHED" file:"$FURL" \
    zk:"$DLOCK_TEST_ZK" pg-advisory:"$DLOCK_TEST_POSTGRES" etcd:"$DLOCK_TEST_ETCD"; do
    unchanged "${b%%:*}" "${b#*:}"
done

# hold --at-least on Redis: stopped at once, it exits and the lock stays.
t0=$(now_ms)
"$DLOCK" --url "$DLOCK_TEST_REDIS" hold --at-least 6 al-hold >"$TMP/hold.out" 2>"$TMP/hold.err" &
hpid=$!
for _ in $(seq 200); do [ -s "$TMP/hold.out" ] && break; sleep 0.05; done
kill -TERM $hpid
wait $hpid
hrc=$?
"$DLOCK" --url "$DLOCK_TEST_REDIS" run -n al-hold -- true 2>/dev/null
rrc=$?
t1=$(now_ms)
if [ $((t1 - t0)) -lt 6000 ]; then
    [ $hrc = 0 ] && [ $rrc = 1 ] &&
        ok "redis: hold --at-least stopped by TERM exits 0, the lock stays taken" ||
        bad "redis: hold --at-least: exit $hrc, rival exit $rrc: $(cat "$TMP/hold.err")"
else
    echo "# hold --at-least: the round took $((t1 - t0)) ms, over its minimum: not judged"
fi
free "$DLOCK_TEST_REDIS" al-hold && ok "redis: after hold's minimum a rival takes it" ||
    bad "redis: al-hold still taken after 60 s"
finish
