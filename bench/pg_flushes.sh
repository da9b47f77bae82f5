#!/bin/bash
# SPDX-License-Identifier: MIT
# pg_flushes.sh — WAL flushes (pg_stat_wal's wal_sync, with wal_write and
# wal_records beside it) per uncontended cycle and per 8-waiter hand-over,
# in each PostgreSQL mode, on a server with production durability. Counts,
# not times: on a loaded machine they are what stays comparable (issue 24).
#
#   DLOCK_SERVERS_DURABLE=1 bash tests/servers.sh run postgres -- bash bench/pg_flushes.sh [-D SECS] [MODE...]
#
# Needs PostgreSQL 14+ (pg_stat_wal), $DLOCK_TEST_POSTGRES and
# $DLOCK_TEST_POSTGRES_ADMIN (tests/servers.sh sets both). MODEs: advisory
# lease rowlock (default: all three). The counters are the whole server's:
# the WAL writer's background flushes of asynchronous commits count too.
# One line per mode and workload: flushes/cycle (P=1) or /hand-over (P=8).
set -u
here=$(cd "$(dirname "$0")" && pwd)
DLOCK=${DLOCK:-$here/../build/dlock}
D=2
if [ "${1:-}" = -D ]; then D=$2; shift 2; fi
modes=("$@")
[ ${#modes[@]} -gt 0 ] || modes=(advisory lease rowlock)
: "${DLOCK_TEST_POSTGRES:?run under tests/servers.sh run postgres}"
: "${DLOCK_TEST_POSTGRES_ADMIN:?run under tests/servers.sh run postgres}"
admin() { psql "$DLOCK_TEST_POSTGRES_ADMIN" -XAtq -v ON_ERROR_STOP=1 -c "$1"; }
echo "server: $(admin "SELECT current_setting('fsync') || ' fsync, synchronous_commit ' || current_setting('synchronous_commit')")"
for mode in "${modes[@]}"; do
    url="$DLOCK_TEST_POSTGRES?mode=$mode"
    # first use creates the tables: not counted
    "$DLOCK" --url "$url" bench -P 2 -D 0.3 --warmup 0.1 --json >/dev/null 2>&1
    for w in "uncontended -P 1" "per-op -P 1 --handles per-op" "contended8 -P 8 -H 100"; do
        set -- $w
        row=$1
        shift
        admin "CHECKPOINT" >/dev/null
        admin "SELECT pg_stat_reset_shared('wal')" >/dev/null
        j=$("$DLOCK" --url "$url" bench "$@" -D "$D" --warmup 0.2 --json 2>/dev/null)
        sleep 2 # the WAL writer reports its own flushes at most once a second
        s=$(admin "SELECT wal_records || ' ' || wal_write || ' ' || wal_sync FROM pg_stat_wal")
        python3 - "$mode" "$row" "$j" $s <<'PY'
import json, sys
mode, row, j, rec, wr, sync = sys.argv[1], sys.argv[2], sys.argv[3], *map(int, sys.argv[4:7])
try:
    b = json.loads(j)
except ValueError:
    print(f"{mode:8} {row:11} bench failed: {j[:200]!r}")
    sys.exit(0)
n = b["handovers_all"] if b["P"] > 1 else b["sections_checked"]
per = "hand-over" if b["P"] > 1 else "cycle"
print(f"{mode:8} {row:11} {n:6} {per}s: wal_sync {sync} ({sync / max(n, 1):.3f}/{per}), "
      f"wal_write {wr} ({wr / max(n, 1):.3f}), wal_records {rec} ({rec / max(n, 1):.2f}); "
      f"violations {b['violations']}")
PY
    done
done
