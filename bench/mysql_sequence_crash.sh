#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# mysql_sequence_crash.sh [TRIES] — does a MariaDB SEQUENCE with a CACHE stay
# monotonic across a crash? On a server with production durability
# (tests/servers.sh, DLOCK_SERVERS_DURABLE=1): make a sequence (CACHE 1000),
# commit an InnoDB write (the log flushed: the sequence is on disk), draw
# two values (the first fills the cache: the sequence's row now says 1001),
# kill -9 the server at once, start it again, draw one more. A crash-safe
# source gives more than the values drawn before. Measured on MariaDB 10.11
# (issue 24): 1 again — the cache's refill is written without a flush of
# the log, and is lost with the server unless a later commit flushed it
# (without the first commit, even the new sequence's row is lost: "Can't
# find record").
set -u
tries=${1:-3}
here=$(cd "$(dirname "$0")" && pwd)
if [ -z "${DLOCK_TEST_SERVERS:-}" ]; then
  DLOCK_SERVERS_DURABLE=1 exec bash "$here/../tests/servers.sh" run mariadb -- bash "$0" "$@"
fi
dir=$DLOCK_TEST_SERVERS
q() { mariadb --no-defaults --socket="$DLOCK_TEST_MYSQL_SOCKET" -uroot -N -B dlock -e "$1" 2>&1; }
echo "innodb_flush_log_at_trx_commit=$(q 'SELECT @@innodb_flush_log_at_trx_commit')"
bad=0
for i in $(seq "$tries"); do
  q "CREATE OR REPLACE SEQUENCE crash_seq_$i START WITH 1 CACHE 1000" >/dev/null
  # a commit of InnoDB flushes the log so far: the sequence is made for sure
  q "CREATE TABLE IF NOT EXISTS crash_flush (i INT PRIMARY KEY) ENGINE=InnoDB; REPLACE INTO crash_flush VALUES ($i)" >/dev/null
  drawn=$(q "SELECT NEXTVAL(crash_seq_$i); SELECT NEXTVAL(crash_seq_$i)" | tail -n 1)
  kill -9 "$(cat "$dir/mariadb.pid")"
  eval "$(cat "$dir/mariadb.cmd") </dev/null >>$dir/mariadb/out 2>&1 &"
  echo $! >"$dir/mariadb.pid" # (servers.sh stops what this file names)
  for _ in $(seq 150); do q 'SELECT 1' >/dev/null && break; sleep 0.2; done
  next=$(q "SELECT NEXTVAL(crash_seq_$i)" | tail -n 1)
  if [[ "$next" =~ ^[0-9]+$ ]] && [ "$next" -gt "$drawn" ]; then verdict=monotonic; else
    verdict="NOT monotonic"; bad=$((bad + 1)); fi
  echo "try $i: drew up to $drawn, after kill -9 and restart: $next: $verdict"
done
echo "$bad of $tries tries not monotonic"
