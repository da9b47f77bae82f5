#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# peers_bench_test.sh — bench/peers/: each peer client installed here runs
# dlock bench's workload for a moment on a real server (redis and memcached
# by default, and the embedded file backend; DLOCK_PEERS_TEST_KINDS="redis
# memcached zk postgres mariadb etcd" for all of them) and prints bench's
# JSON fields with no violations; the overlap detector counts an overlap;
# bad arguments get a one-line error; matrix.sh -p puts dlock and a peer
# side by side and table.py prints the ratio. Peers whose client is missing
# are skipped, each named (scripts/install-deps.sh peers installs them).
# Speed is measured, never asserted. Needs $DLOCK and python3.
set -u
. "$(dirname "$0")/testlib.sh"
preamble
export DLOCK
PY=${DLOCK_PEERS_PYTHON:-}
if [ -z "$PY" ]; then
    if [ -x /usr/bin/python3 ]; then PY=/usr/bin/python3; else PY=python3; fi
fi
export DLOCK_PEERS_PYTHON=$PY
PB="$src/bench/peers/peer_bench.py"
KINDS=${DLOCK_PEERS_TEST_KINDS:-redis memcached}

# Which peers are there: the servers of those only are started.
mapfile -t have < <("$PY" "$PB" --list | awk '$3 == "ok" { print $1 }')
if [ ${#have[@]} -eq 0 ] || { [ ${#have[@]} -eq 2 ] && [ "${have[*]}" = "etcdctl dlock-run" ]; }; then
    skip "no peer client installed (scripts/install-deps.sh peers)"
fi
# shellcheck disable=SC2086
in_servers $KINDS
"$PY" "$PB" --list | awk '$3 != "ok" { print "# peer " $1 " skipped: " $0 }'

TMP=$(mktemp -d "${TMPDIR:-/tmp}/dlock-peers-test.XXXXXX")
trap 'rm -rf "$TMP"' EXIT
FIELDS='("backend", "P", "K", "H", "n", "ops_per_s", "cycle_p50_us", "cycle_p99_us", "wait_p50_us", "wait_p99_us", "handover_p50_us", "handover_p99_us", "handovers", "violations", "fairness_min_max", "peer", "peer_gives")'

is_have() { local p; for p in "${have[@]}"; do [ "$p" = "$1" ] && return 0; done; return 1; }

peer() { # PEER URL P: a short run, its JSON checked, the server's writes counted
    local p=$1 url=$2 P=$3 name
    name="$p-${url%%:*}"
    if ! is_have "$p"; then return; fi
    "$PY" "$src/bench/peers/writes.py" read "$url" >"$TMP/$name.before"
    "$PY" "$PB" --peer "$p" --url "$url" -P "$P" -H 50 -D 0.7 --warmup 0.3 --json \
        >"$TMP/$name.line" 2>"$TMP/$name.err"
    local rc=$?
    if [ $rc -ne 0 ]; then
        bad "$name: exit $rc: $(tail -3 "$TMP/$name.err")"
        return
    fi
    "$PY" "$src/bench/peers/writes.py" read "$url" >"$TMP/$name.after"
    "$PY" "$src/bench/peers/writes.py" add "$TMP/$name.before" "$TMP/$name.after" \
        <"$TMP/$name.line" >"$TMP/$name.json"
    jcheck "$TMP/$name.json" "$name: bench's fields, n > 0, no violations, P $P" \
        "all(k in d for k in $FIELDS) and d['n'] > 0 and d['violations'] == 0 and d['P'] == $P and d['peer'] == '$p'"
    case $p in
    # a node (a key) created and deleted per section: the server's own
    # count says at least two writes each
    kazoo | curator | curator-threads | etcdctl | dlock-run)
        jcheck "$TMP/$name.json" "$name: the server counted >= 2 writes per section" \
            'd["server_writes_per_section"] >= 2' ;;
    esac
    [ "$p" = curator-threads ] &&
        jcheck "$TMP/$name.json" "$name: one JVM, $P clients, each with sections of its own" \
            "d['procs'] == 1 and d['threads_per_proc'] == $P and d['fairness_min_max'][0] > 0"
}

for k in $KINDS; do
    case $k in
    redis) for p in redis-py redlock tooz redis-c; do peer $p "$DLOCK_TEST_REDIS" 3; done ;;
    memcached) for p in pymemcache tooz; do peer $p "$DLOCK_TEST_MEMCACHED" 3; done ;;
    zk) for p in kazoo curator curator-threads tooz; do peer $p "$DLOCK_TEST_ZK" 2; done ;;
    postgres) for p in psycopg2 tooz; do peer $p "$DLOCK_TEST_POSTGRES" 3; done ;;
    mariadb) for p in pymysql tooz mysql-c mysql-c-prep mysql-c-take; do peer $p "$DLOCK_TEST_MYSQL" 3; done ;;
    etcd) for p in etcdctl dlock-run; do peer $p "$DLOCK_TEST_ETCD" 2; done ;;
    esac
done
peer tooz "file://$TMP/locks" 3

# The overlap detector is bench's: two sections that overlap are one
# violation, a hand-over is timed from the release that let the waiter in.
if "$PY" -c '
import sys
sys.path.insert(0, sys.argv[1])
import peer_bench as pb
ok = pb.compute([[(0, 10, 20, 25)], [(5, 15, 30, 35)]], 2, 0, 100)["violations"] == 1
s = pb.compute([[(0, 10, 20, 25)], [(5, 21, 30, 35)]], 2, 0, 100)
ok = ok and s["violations"] == 0 and s["handovers"] == 1 and s["ho50"] == 1
sys.exit(0 if ok else 1)' "$src/bench/peers"; then
    ok "overlapping sections count as a violation, a hand-over is timed from the release"
else
    bad "the overlap detector or the hand-over timing is wrong"
fi

# Bad arguments: one line, exit 64.
"$PY" "$PB" --peer nosuch --url redis://127.0.0.1:1 >/dev/null 2>"$TMP/u.err"
rc=$?
[ $rc -eq 64 ] && [ "$(wc -l <"$TMP/u.err")" -eq 1 ] && ok "unknown peer: exit 64, one line" ||
    bad "unknown peer: exit $rc: $(cat "$TMP/u.err")"
"$PY" "$PB" --peer kazoo --url "postgres://u:secretpw@127.0.0.1:1/x" >/dev/null 2>"$TMP/u.err"
rc=$?
[ $rc -eq 64 ] && ! grep -q secretpw "$TMP/u.err" && ok "peer of another backend: exit 64, password not shown" ||
    bad "peer of another backend: exit $rc: $(cat "$TMP/u.err")"

# matrix.sh -p: dlock and the peers of one row side by side, then the table.
url=
for k in $KINDS; do
    case $k in memcached) url=$DLOCK_TEST_MEMCACHED ;; redis) url=${url:-$DLOCK_TEST_REDIS} ;; esac
done
if [ -n "$url" ]; then
    bash "$src/bench/matrix.sh" -p -D 0.5 -r uncontended -o "$TMP/m.jsonl" "$url" 2>"$TMP/m.err"
    rc=$?
    [ $rc -eq 0 ] && ok "matrix.sh -p: exit 0" || bad "matrix.sh -p: exit $rc: $(tail -3 "$TMP/m.err")"
    if "$PY" -c '
import json, sys
ls = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
dl = [d for d in ls if "peer" not in d]
pe = [d for d in ls if "peer" in d]
sys.exit(0 if len(dl) == 1 and pe and all(d["row"] == "uncontended" and d["servers"] in ("test", "durable") for d in ls) else 1)' "$TMP/m.jsonl"; then
        ok "matrix.sh -p: a dlock line and the peers' lines, row and servers marked"
    else
        bad "matrix.sh -p: lines: $(head -c 600 "$TMP/m.jsonl")"
    fi
    grep -q '^   dlock/best .*[0-9]\.[0-9][0-9] (' "$TMP/m.err" && ok "matrix.sh -p: table.py prints dlock / best peer" ||
        bad "matrix.sh -p: no ratio line: $(tail -6 "$TMP/m.err")"
fi
finish
