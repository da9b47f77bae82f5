#!/bin/bash
# SPDX-License-Identifier: MIT
# run.sh — dlock against the clients people would pick instead (issue 24),
# interleaved in one run on the same servers, with the servers of
# tests/servers.sh started twice: with the test suite's fast settings and
# with their production durability (DLOCK_SERVERS_DURABLE=1: ZooKeeper
# forceSync, PostgreSQL fsync, MariaDB flush per commit). One JSON line per
# row and client in one file, then bench/peers/table.py's dlock / best peer.
#
#   bench/peers/run.sh [-D SECS] [-n REPS] [-o FILE] [-k KINDS] [-s SETTINGS]
#
# KINDS: server kinds of matrix.sh -S (default redis,zk,postgres,mysql,
# memcached,etcd); the embedded file backend is added to the first setting.
# SETTINGS: test,durable (default both, in that order). -D and -n as in
# matrix.sh (defaults 5 and 3). The peers installed here run; the others are
# named on stderr (scripts/install-deps.sh peers installs them all).
set -u
here=$(cd "$(dirname "$0")" && pwd)
D=5
REPS=3
OUT=peers.jsonl
KINDS=redis,zk,postgres,mysql,memcached,etcd
SETTINGS=test,durable
while getopts "D:n:o:k:s:h" opt; do
    case $opt in
    D) D=$OPTARG ;;
    n) REPS=$OPTARG ;;
    o) OUT=$OPTARG ;;
    k) KINDS=$OPTARG ;;
    s) SETTINGS=$OPTARG ;;
    h | *)
        sed -n '2,17p' "$0" | sed 's/^# \{0,1\}//'
        [ "$opt" = h ] && exit 0 || exit 64
        ;;
    esac
done
TMP=$(mktemp -d "${TMPDIR:-/tmp}/dlock-peers.XXXXXX") || exit 73
trap 'rm -rf "$TMP"' EXIT
trap 'exit 130' INT
trap 'exit 143' TERM
: >"$OUT" || exit 73
status=0
file_url="file://$TMP/locks"
for s in ${SETTINGS//,/ }; do
    case $s in
    test) durable= ;;
    durable) durable=1 ;;
    *) echo "run.sh: -s wants test and/or durable, not $s" >&2; exit 64 ;;
    esac
    DLOCK_SERVERS_DURABLE=$durable bash "$here/../matrix.sh" -p -D "$D" -n "$REPS" -S "$KINDS" \
        -o "$TMP/$s.jsonl" $file_url || status=1
    file_url=
    cat "$TMP/$s.jsonl" >>"$OUT"
done
echo "run.sh: all lines in $OUT; dlock / best peer, both settings:" >&2
"${DLOCK_PEERS_PYTHON:-python3}" "$here/table.py" "$OUT" || status=1
exit $status
