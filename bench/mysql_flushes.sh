#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# mysql_flushes.sh [SECS] [MODE...] — the server's log flushes per
# uncontended lock cycle (P=1) and per 8-waiter hand-over (P=8, 100 µs
# held) in each mysql mode (getlock, lease, rowlock: all three by default),
# on a MariaDB started by tests/servers.sh with its production durability
# (innodb_flush_log_at_trx_commit=1): Innodb_data_fsyncs (on MariaDB 10.11
# it counts the log's fsyncs too; MySQL's Innodb_os_log_fsyncs is printed
# where the server has it) and Innodb_log_writes before and after
# `dlock bench -D SECS`, divided by the cycles or hand-overs of the run.
# Counts, not times: they hold on a loaded machine. The counters are the
# whole server's: InnoDB's background work counts too.
# Needs $DLOCK (the dlock binary) and the mariadb client.
set -u
DLOCK=${DLOCK:?set DLOCK to the dlock binary}
secs=${1:-3}
[ $# -gt 0 ] && shift
modes=("$@")
[ ${#modes[@]} -gt 0 ] || modes=(getlock lease rowlock)
here=$(cd "$(dirname "$0")" && pwd)
if [ -z "${DLOCK_TEST_SERVERS:-}" ]; then
  DLOCK_SERVERS_DURABLE=1 exec bash "$here/../tests/servers.sh" run mariadb -- bash "$0" "$secs" "${modes[@]}"
fi
q() { mariadb --no-defaults --socket="$DLOCK_TEST_MYSQL_SOCKET" -uroot -N -B -e "$1"; }
status() {
  q "SELECT SUM(IF(VARIABLE_NAME = 'INNODB_DATA_FSYNCS', VARIABLE_VALUE, 0)), SUM(IF(VARIABLE_NAME = 'INNODB_OS_LOG_FSYNCS', VARIABLE_VALUE, 0)), SUM(IF(VARIABLE_NAME = 'INNODB_LOG_WRITES', VARIABLE_VALUE, 0)) FROM information_schema.GLOBAL_STATUS"
}
echo "innodb_flush_log_at_trx_commit=$(q 'SELECT @@innodb_flush_log_at_trx_commit'), log_bin=$(q 'SELECT @@log_bin')"
for m in "${modes[@]}"; do
  url="$DLOCK_TEST_MYSQL?mode=$m"
  "$DLOCK" --url "$url" bench -D 1 --warmup 0 >/dev/null 2>&1 # the tables made
  for w in "uncontended -P 1" "contended8 -P 8 -H 100"; do
    set -- $w
    row=$1
    shift
    read -r f0 l0 w0 < <(status)
    j=$("$DLOCK" --url "$url" bench "$@" -D "$secs" --warmup 0 --json 2>/dev/null)
    read -r f1 l1 w1 < <(status)
    python3 - "$m" "$row" "$j" $((f1 - f0)) $((l1 - l0)) $((w1 - w0)) <<'PY'
import json, sys
m, row, j = sys.argv[1], sys.argv[2], sys.argv[3]
f, lf, w = map(int, sys.argv[4:7])
try:
    b = json.loads(j)
except ValueError:
    print(f"mode={m} {row}: bench failed: {j[:200]!r}")
    sys.exit(0)
n = b["handovers_all"] if b["P"] > 1 else b["n"]
per = "hand-over" if b["P"] > 1 else "cycle"
print(f"mode={m:7} {row:11} {n:6} {per}s: Innodb_data_fsyncs {f} ({f / max(n, 1):.3f}/{per}), "
      f"Innodb_os_log_fsyncs {lf}, Innodb_log_writes {w} ({w / max(n, 1):.3f}); "
      f"violations {b.get('violations', 0)}")
PY
  done
done
