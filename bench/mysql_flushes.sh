#!/usr/bin/env bash
# mysql_flushes.sh [SECS] — the server's log flushes per uncontended lock
# cycle in each mysql mode (getlock, lease, rowlock), on a MariaDB started by
# tests/servers.sh with its production durability
# (innodb_flush_log_at_trx_commit=1): Innodb_data_fsyncs and
# Innodb_log_writes before and after `dlock bench -P 1 -D SECS`, divided by
# the cycles the run made. Counts, not times: they hold on a loaded machine.
# Needs $DLOCK (the dlock binary) and the mariadb client.
set -u
DLOCK=${DLOCK:?set DLOCK to the dlock binary}
secs=${1:-3}
here=$(cd "$(dirname "$0")" && pwd)
if [ -z "${DLOCK_TEST_SERVERS:-}" ]; then
  DLOCK_SERVERS_DURABLE=1 exec bash "$here/../tests/servers.sh" run mariadb -- bash "$0" "$@"
fi
status() {
  mariadb --no-defaults --socket="$DLOCK_TEST_MYSQL_SOCKET" -uroot -N -B -e \
    "SELECT SUM(IF(VARIABLE_NAME = 'INNODB_DATA_FSYNCS', VARIABLE_VALUE, 0)), SUM(IF(VARIABLE_NAME = 'INNODB_LOG_WRITES', VARIABLE_VALUE, 0)) FROM information_schema.GLOBAL_STATUS"
}
echo "innodb_flush_log_at_trx_commit=$(mariadb --no-defaults --socket="$DLOCK_TEST_MYSQL_SOCKET" -uroot -N -B -e 'SELECT @@innodb_flush_log_at_trx_commit')"
for m in getlock lease rowlock; do
  url="$DLOCK_TEST_MYSQL?mode=$m"
  "$DLOCK" --url "$url" bench -D 1 --warmup 0 >/dev/null 2>&1 # the tables made
  read -r f0 w0 < <(status)
  n=$("$DLOCK" --url "$url" bench -P 1 -D "$secs" --warmup 0 --json |
    python3 -c 'import json, sys; print(json.load(sys.stdin)["n"])')
  read -r f1 w1 < <(status)
  python3 -c "import sys; m, n, f, w = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4]); print(f'mode={m}: {n} cycles, {f} fsyncs ({f / n:.2f} per cycle), {w} log writes ({w / n:.2f} per cycle)')" \
    "$m" "$n" $((f1 - f0)) $((w1 - w0))
done
