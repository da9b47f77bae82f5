#!/bin/bash
# SPDX-License-Identifier: MIT
# matrix.sh — run the fixed `dlock bench` matrix on every backend given, one
# JSON line per row, so that two builds can be compared row by row with
# bench/compare.py, and a run checked against the targets with
# bench/targets.py.
#
#   bench/matrix.sh [-D SECS] [-n REPS] [-o FILE] [-r ROWS] [-S KINDS] [-C] [-p] [URL...]
#
# URLs: the arguments, else $DLOCK_BENCH_URLS (space separated), else the
# embedded file backend in a fresh temporary directory. -S KINDS (e.g.
# "redis,redlock") first starts those servers with tests/servers.sh (redis,
# redlock, sentinel, cluster, zk, postgres, mysql, memcached, etcd) and adds
# their URLs; they are stopped at the end (DLOCK_SERVERS_DURABLE=1: with their
# production durability; each line's "servers" says durable or test). A URL whose backend does not answer is skipped with a note on stderr.
# Rows: -r, else the default rows of each backend (file: uncontended
# contended8 contended64 names10k; redis: uncontended contended8_fair
# contended64_fair contended512_fair names10k redis_set held100k; redlock:
# uncontended contended8 names10k held100k; held100k: one client keeping
# 100 000 leases of 6 s through the run, -L). Every row also counts the servers'
# commands (--commandstats; null where the backend has no counters, as the
# file backend). redis_set is not a bench run:
# `redis-benchmark -c 8 -t set -q` against the same server, for the
# throughput target of names10k.
# The binary: $DLOCK, else build/dlock of this tree, else dlock from PATH.
# Each line is the bench JSON object with "row" (and "label" from
# $BENCH_LABEL, e.g. a commit id) added in front, and "cpus" saying how the
# processes were placed.
# -p (peers, issue 24): after each row, the same workload with every peer
# client of that backend installed here (bench/peers/peer_bench.py: kazoo,
# Curator, redis-py, node-redlock, psycopg2, pymysql, pymemcache, tooz;
# etcd: `etcdctl lock` against `dlock run`, row run4), interleaved with
# dlock (dlock first on odd repetitions, last on even ones), each peer's
# line marked "peer"; rows default to uncontended contended8 (etcd: run4),
# and at the end bench/peers/table.py prints dlock / best peer on stderr.
# Each -p line also has the server's own write counts over its run
# (server_writes*, bench/peers/writes.py), dlock's and the peers' alike.
# -n REPS runs the whole matrix REPS times over (default 1), each line
# marked "rep": 1..REPS; bench/targets.py then judges the median of each
# figure over the repetitions (see bench/README.md for why one run of a
# latency ratio is not enough on a small virtual machine).
# Placement: left to the scheduler, a client and a server that ping each
# other share a CPU some of the time and not at other times, and on a
# virtual machine the two differ four times over (about 17 against 70 us
# for a PING here), so any one figure can land on either. -C (with -S, on
# two or more CPUs) pins the servers started here to CPU 0 and dlock and
# redis-benchmark to the others: every request then crosses CPUs, as it
# crosses a network in a deployment, and two builds compare with less
# noise. On two CPUs it also crowds all servers (five for Redlock) on one
# CPU and all clients on the other, which slows the Redlock and contended
# rows: compare pinned runs with pinned runs only.
set -u
here=$(cd "$(dirname "$0")" && pwd)
D=5
OUT=
ROWS=
KINDS=
PIN=0
PEERS=0
REPS=1
args_for_servers=()
while getopts "D:n:o:r:S:Cph" opt; do
    case $opt in
    D) D=$OPTARG; args_for_servers+=(-D "$OPTARG") ;;
    n) REPS=$OPTARG; args_for_servers+=(-n "$OPTARG") ;;
    o) OUT=$OPTARG; args_for_servers+=(-o "$OPTARG") ;;
    r) ROWS=$OPTARG; args_for_servers+=(-r "$OPTARG") ;;
    S) KINDS=$OPTARG ;;
    C) PIN=1; args_for_servers+=(-C) ;;
    p) PEERS=1; args_for_servers+=(-p) ;;
    h | *)
        sed -n '2,50p' "$0" | sed 's/^# \{0,1\}//'
        [ "$opt" = h ] && exit 0 || exit 64
        ;;
    esac
done
shift $((OPTIND - 1))
case $REPS in
'' | *[!0-9]* | 0) echo "matrix.sh: -n wants a positive number, not '$REPS'" >&2; exit 64 ;;
esac

if [ -n "$KINDS" ]; then
    # Again, inside tests/servers.sh, with the URLs of what it started.
    kinds=
    urls=()
    for k in ${KINDS//,/ }; do
        case $k in
        redis) urls+=('$DLOCK_TEST_REDIS') ;;
        redlock) urls+=('$DLOCK_TEST_REDLOCK') ;;
        sentinel) urls+=('$DLOCK_TEST_SENTINEL') ;;
        cluster) urls+=('$DLOCK_TEST_CLUSTER') ;;
        zk) urls+=('$DLOCK_TEST_ZK') ;;
        postgres) urls+=('$DLOCK_TEST_POSTGRES') ;;
        mysql | mariadb) urls+=('$DLOCK_TEST_MYSQL'); k=mariadb ;;
        memcached) urls+=('$DLOCK_TEST_MEMCACHED') ;;
        etcd) urls+=('$DLOCK_TEST_ETCD') ;;
        *) echo "matrix.sh: unknown server kind $k" >&2; exit 64 ;;
        esac
        kinds+=" $k"
    done
    # shellcheck disable=SC2086
    exec bash "$here/../tests/servers.sh" run $kinds -- \
        bash -c 'exec bash "$0" "$@" '"${urls[*]}" "$0" "${args_for_servers[@]}" "$@"
fi

DLOCK=${DLOCK:-}
if [ -z "$DLOCK" ]; then
    if [ -x "$here/../build/dlock" ]; then DLOCK="$here/../build/dlock"; else DLOCK=dlock; fi
fi
if ! command -v "$DLOCK" >/dev/null 2>&1; then
    echo "matrix.sh: no dlock binary (set DLOCK)" >&2
    exit 69
fi

TMP=$(mktemp -d "${TMPDIR:-/tmp}/dlock-matrix.XXXXXX") || exit 73
cleanup() { rm -rf "$TMP"; }
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

if [ $# -gt 0 ]; then
    URLS="$*"
elif [ -n "${DLOCK_BENCH_URLS:-}" ]; then
    URLS=$DLOCK_BENCH_URLS
else
    URLS="file://$TMP/locks"
fi

# The matrix: row name and bench arguments. Add rows at the end only, so
# that files of older builds keep comparing.
row_args() {
    case $1 in
    uncontended) echo "-P 1 -K 1 -H 0" ;;
    contended8) echo "-P 8 -K 1 -H 100" ;;
    contended64) echo "-P 64 -K 1 -H 100" ;;
    names10k) echo "-P 8 -K 10000 -H 0" ;;
    contended8_fair) echo "-P 8 -K 1 -H 100 --fair" ;;
    contended64_fair) echo "-P 64 -K 1 -H 100 --fair" ;;
    contended512_fair) echo "-P 512 -K 1 -H 100 --fair" ;;
    redis_set) echo "" ;;
    run4) echo "" ;; # -p on etcd: 4 loops of dlock run against etcdctl lock (peer_bench.py)
    held100k) echo "-P 1 -K 1 -H 0 -L 100000 --ttl 6" ;;
    *) return 1 ;;
    esac
}

default_rows() {
    if [ "$PEERS" = 1 ]; then
        case $1 in
        etcd://* | etcds://*) echo "run4" ;;
        *) echo "uncontended contended8" ;;
        esac
        return
    fi
    case $1 in
    redis://* | redis+sentinel://* | redis+cluster://*)
        echo "uncontended contended8_fair contended64_fair contended512_fair names10k redis_set held100k" ;;
    redlock://*) echo "uncontended contended8 names10k held100k" ;;
    *) echo "uncontended contended8 contended64 names10k" ;;
    esac
}

# A URL as messages show it: without its password.
shown() { sed -E 's#(://[^:/@,]*:)[^@/]*@#\1***@#' <<<"$1"; }

label=${BENCH_LABEL:-}
label=${label//\\/\\\\}
label=${label//\"/\\\"}

# Which servers: those of tests/servers.sh (with their production
# durability or the test suite's) or whatever the URLs name.
servers=given
if [ -n "${DLOCK_TEST_SERVERS:-}" ]; then
    if [ -n "${DLOCK_SERVERS_DURABLE:-}" ]; then servers="durable"; else servers="test"; fi
fi

emit() { # JSON line
    echo "$1" >>"$TMP/run.jsonl"
    if [ -n "$OUT" ]; then echo "$1" >>"$OUT"; else echo "$1"; fi
}

# -p: the peers of a URL's backend installed here, once per URL.
PEER_PY=${DLOCK_PEERS_PYTHON:-}
if [ -z "$PEER_PY" ]; then
    # Debian's python3, whose dist-packages hold the peers' clients
    if [ -x /usr/bin/python3 ]; then PEER_PY=/usr/bin/python3; else PEER_PY=python3; fi
fi
peer_list() { # URL: the names of the peers that can run, notes for the rest
    "$PEER_PY" "$here/peers/peer_bench.py" --list "$1" | while read -r name _ state rest; do
        if [ "$state" = ok ]; then
            echo "$name"
        else
            echo "matrix.sh: peer $name not run on $(shown "$1"): $state $rest" >&2
        fi
    done
}

# -p: the server's own write counters around each run (peers/writes.py:
# ZooKeeper's zxid, PostgreSQL's WAL records and syncs, MariaDB's row
# writes and log fsyncs, etcd's raft entries, WAL fsyncs and revision), added to the line as
# server_writes*, for dlock and every peer alike.
counters_before() { # URL
    [ "$PEERS" = 1 ] || return 0
    "$PEER_PY" "$here/peers/writes.py" read "$1" >"$TMP/before.json"
}
with_counters() { # URL LINE: LINE with the deltas added
    if [ "$PEERS" = 1 ] && "$PEER_PY" "$here/peers/writes.py" read "$1" >"$TMP/after.json" &&
        "$PEER_PY" "$here/peers/writes.py" add "$TMP/before.json" "$TMP/after.json" <<<"$2"; then
        return 0
    fi
    echo "$2"
}

# One peer on one row: the row's -P and -H (peers have one name: rows with
# -K > 1 or -L are dlock's alone).
run_peer() { # URL ROW PEER
    local url=$1 row=$2 peer=$3 args P=1 H=0 line rc
    # `etcdctl lock` runs a command: it meets `dlock run` on run4 only, and
    # the lock peers never do
    case $peer in
    etcdctl | dlock-run) [ "$row" = run4 ] || return 0 ;;
    *) [ "$row" != run4 ] || return 0 ;;
    esac
    if [ "$row" = run4 ]; then
        P=4
    else
        args=$(row_args "$row") || return 1
        case " $args " in *" -K 1 "*) ;; *) return 0 ;; esac
        case " $args " in *" -L "*) return 0 ;; esac
        # shellcheck disable=SC2086
        set -- $args
        while [ $# -gt 0 ]; do
            case $1 in -P) P=$2; shift ;; -H) H=$2; shift ;; esac
            shift
        done
    fi
    echo "matrix.sh: [$rep/$REPS] $row on $(shown "$url") with $peer ..." >&2
    counters_before "$url"
    line=$(DLOCK="$DLOCK" "${run[@]}" "$PEER_PY" "$here/peers/peer_bench.py" --peer "$peer" \
        --url "$url" -P "$P" -H "$H" -D "$D" --json)
    rc=$?
    if [ -z "$line" ]; then
        echo "matrix.sh: $row on $(shown "$url") with $peer failed (exit $rc)" >&2
        [ $rc -ge 128 ] && exit $rc
        return 1
    fi
    [ $rc -ne 0 ] && echo "matrix.sh: $row on $(shown "$url") with $peer: exit $rc (violations or a failed worker: see its line)" >&2
    line=$(with_counters "$url" "$line")
    emit "{\"row\":\"$row\",\"rep\":$rep,\"label\":\"$label\",\"cpus\":\"$cpus\",\"servers\":\"$servers\",${line#\{}"
    return $rc
}

# redis-benchmark -c 8 -t set against the server of a redis:// URL: one
# line {"row":"redis_set",...,"set_rps":N}
redis_set() {
    local url=$1 hostport host port auth=()
    case $url in
    redis://*) ;;
    *) echo "matrix.sh: redis_set: only for redis:// URLs, not $(shown "$url")" >&2; return 1 ;;
    esac
    hostport=${url#redis://}
    if [[ $hostport == *@* ]]; then
        local cred=${hostport%%@*}
        hostport=${hostport#*@}
        auth=(-a "${cred#*:}")
    fi
    hostport=${hostport%%/*}
    hostport=${hostport%%\?*}
    host=${hostport%:*}
    port=${hostport##*:}
    [ "$host" = "$hostport" ] && port=6379
    if ! command -v redis-benchmark >/dev/null; then
        echo "matrix.sh: redis_set: no redis-benchmark" >&2
        return 1
    fi
    local n=$((D * 40000)) out rps
    out=$("${run[@]}" redis-benchmark -h "$host" -p "$port" "${auth[@]}" -c 8 -t set -q -n "$n" 2>/dev/null |
        tr '\r' '\n' | grep '^SET:' | tail -1)
    rps=$(echo "$out" | sed -n 's/^SET: \([0-9.]*\) requests per second.*/\1/p')
    [ -n "$rps" ] || { echo "matrix.sh: redis_set: no figure from redis-benchmark" >&2; return 1; }
    emit "{\"row\":\"redis_set\",\"rep\":$rep,\"label\":\"$label\",\"cpus\":\"$cpus\",\"backend\":\"redis\",\"url\":\"redis://$host:$port\",\"set_rps\":$rps,\"clients\":8,\"requests\":$n}"
}

# Placement (see the top): servers of tests/servers.sh on CPU 0, us on the rest.
ncpu=$(nproc 2>/dev/null || echo 1)
run=()
cpus="scheduler"
if [ "$PIN" = 1 ] && [ -n "${DLOCK_TEST_SERVERS:-}" ] && [ "$ncpu" -ge 2 ] &&
    command -v taskset >/dev/null; then
    for pidf in "$DLOCK_TEST_SERVERS"/*.pid; do
        [ -e "$pidf" ] && taskset -apc 0 "$(cat "$pidf")" >/dev/null 2>&1
    done
    run=(taskset -c "1-$((ncpu - 1))")
    cpus="servers on cpu 0, clients on cpus 1-$((ncpu - 1))"
fi

if [ -n "$OUT" ]; then
    : >"$OUT" || exit 73
fi
status=0
declare -A peers_of
reachable=()
for url in $URLS; do
    # Is the backend there at all? A tiny untimed run says.
    if ! "$DLOCK" --url "$url" bench -P 1 -D 0.1 --warmup 0 --no-prepare --json >/dev/null 2>"$TMP/err"; then
        echo "matrix.sh: skipping $(shown "$url"): $(head -1 "$TMP/err")" >&2
        continue
    fi
    reachable+=("$url")
done
for rep in $(seq "$REPS"); do
    for url in "${reachable[@]}"; do
        rows=${ROWS:-$(default_rows "$url")}
        peers=()
        if [ "$PEERS" = 1 ]; then
            [ -n "${peers_of[$url]+x}" ] || peers_of[$url]=$(peer_list "$url" | grep -vx dlock-run | tr '\n' ' ')
            read -ra peers <<<"${peers_of[$url]}"
        fi
        for row in $rows; do
            if ! args=$(row_args "$row"); then
                echo "matrix.sh: unknown row $row" >&2
                exit 64
            fi
            # -p: who runs first alternates between repetitions, so a
            # drift of the machine's load does not favour either side
            if [ "$PEERS" = 1 ] && [ $((rep % 2)) = 0 ]; then
                for peer in "${peers[@]}"; do run_peer "$url" "$row" "$peer" || status=1; done
            fi
            if [ "$row" = run4 ]; then
                # dlock's side of it is timed by the peers' harness too
                run_peer "$url" "$row" dlock-run || status=1
            elif [ "$row" = redis_set ]; then
                echo "matrix.sh: [$rep/$REPS] $row on $(shown "$url") ..." >&2
                redis_set "$url" || status=1
            else
                echo "matrix.sh: [$rep/$REPS] $row on $(shown "$url") ..." >&2
                counters_before "$url"
                # shellcheck disable=SC2086
                line=$("${run[@]}" "$DLOCK" --url "$url" bench $args -D "$D" --baseline --commandstats --json)
                rc=$?
                [ $rc -eq 0 ] && [ -n "$line" ] && line=$(with_counters "$url" "$line")
                if [ $rc -ne 0 ] || [ -z "$line" ]; then
                    echo "matrix.sh: $row on $(shown "$url") failed (exit $rc)" >&2
                    status=1
                    [ $rc -ge 128 ] && exit $rc
                else
                    emit "{\"row\":\"$row\",\"rep\":$rep,\"label\":\"$label\",\"cpus\":\"$cpus\",\"servers\":\"$servers\",${line#\{}"
                fi
            fi
            if [ "$PEERS" = 1 ] && [ $((rep % 2)) = 1 ]; then
                for peer in "${peers[@]}"; do run_peer "$url" "$row" "$peer" || status=1; done
            fi
        done
    done
done
if [ "$PEERS" = 1 ] && [ -s "$TMP/run.jsonl" ]; then
    "$PEER_PY" "$here/peers/table.py" "$TMP/run.jsonl" >&2 || status=1
fi
exit $status
