#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# check_mysql_test.sh — `dlock check` with faults on MySQL/MariaDB, each of
# its three modes: one server started by tests/servers.sh (kind mariadb,
# shared by the three), short runs of each scenario, verdicts asserted from
# --json. Never asserts timings. Skipped (exit 77) when MariaDB or the mysql
# backend is missing. Needs $DLOCK and python3. The full matrix (longer
# runs) is run by hand: dlock check -D 10.
set -u
. "$(dirname "$0")/testlib.sh"
preamble
if ! { command -v mariadbd || [ -x /usr/sbin/mariadbd ]; } >/dev/null 2>&1 ||
    ! "$DLOCK" backends | grep -q '^mysql .* yes$'; then
    skip "MariaDB or the mysql backend missing"
fi
# The server with its production durability (innodb_flush_log_at_trx_commit=1,
# the doublewrite buffer on): the restart scenarios kill -9 it, and tokens
# must not go back, though a getlock or rowlock grant writes no InnoDB log
# (docs/mysql.md, "Tokens").
DLOCK_SERVERS_DURABLE=1 in_servers mariadb

TMP=$(mktemp -d "${TMPDIR:-/tmp}/dlock-check-mysql.XXXXXX")
trap 'rm -rf "$TMP"' EXIT
# mode=getlock: GET_LOCK on a connection of its own, the lock lives as long
# as the connection; the token is drawn from the server run's memory (a
# MEMORY table, UUID_SHORT()) under an epoch counted in InnoDB once per run.
"$DLOCK" --url "$DLOCK_TEST_MYSQL" check --json -P 3 -D 2 --scenario kill --scenario pause \
    --scenario pause-lost --scenario restart >"$TMP/getlock.json" 2>"$TMP/getlock.err"
rc=$?
if [ $rc -le 2 ] && [ -s "$TMP/getlock.json" ]; then ok "mysql: ran (exit $rc)"; else
    bad "mysql: exit $rc: $(head -3 "$TMP/getlock.err")"
    echo '{"scenarios":[]}' >"$TMP/getlock.json"
fi
# mode=lease: a row with an expiry on the server's clock, renewed every
# ttl/3; a paused holder loses it and fencing must catch its late write.
# The rows are InnoDB's: a server restart keeps the leases and the tokens.
"$DLOCK" --url "$DLOCK_TEST_MYSQL_LEASE" check --json -P 3 -D 2 --scenario kill --scenario pause \
    --scenario restart >"$TMP/lease.json" 2>"$TMP/lease.err"
rc=$?
if [ $rc -le 2 ] && [ -s "$TMP/lease.json" ]; then ok "mysql mode=lease: ran (exit $rc)"; else
    bad "mysql mode=lease: exit $rc: $(head -3 "$TMP/lease.err")"
    echo '{"scenarios":[]}' >"$TMP/lease.json"
fi
jcheck "$TMP/lease.json" "lease kill: pass, the lock taken over when the row expired" 'sc("kill")["verdict"] == "pass"'
jcheck "$TMP/lease.json" "lease pause past the lease: pass, stale writes rejected, the canary lost updates" \
    'sc("pause")["verdict"] == "pass" and sc("pause")["fenced"]["stale_writes_accepted"] == sc("pause")["fenced"]["stale_writes_accepted_unopposed"] and sc("pause")["canary"]["lost_increments"] > 0'
jcheck "$TMP/lease.json" "lease restart: pass, no overlap (the rows and the token table are durable)" \
    'sc("restart")["verdict"] == "pass" and sc("restart")["overlaps"] == 0'
# mode=rowlock: a row locked by an open transaction, liveness the
# connection (as getlock); tokens as getlock's, drawn on the holding
# connection right after the take.
"$DLOCK" --url "$DLOCK_TEST_MYSQL_ROW" check --json -P 3 -D 2 --scenario kill --scenario pause \
    --scenario restart >"$TMP/row.json" 2>"$TMP/row.err"
rc=$?
if [ $rc -le 2 ] && [ -s "$TMP/row.json" ]; then ok "mysql mode=rowlock: ran (exit $rc)"; else
    bad "mysql mode=rowlock: exit $rc: $(head -3 "$TMP/row.err")"
    echo '{"scenarios":[]}' >"$TMP/row.json"
fi
jcheck "$TMP/row.json" "rowlock kill: pass, the lock taken over" 'sc("kill")["verdict"] == "pass"'
jcheck "$TMP/row.json" "rowlock pause: n/a — a stopped holder keeps its row lock (its transaction lives)" \
    'sc("pause")["verdict"] == "n/a"'
jcheck "$TMP/row.json" "rowlock restart: pass, holders told, tokens rose (a new epoch after the crash)" \
    'sc("restart")["verdict"] == "pass" and sc("restart")["overlaps"] == 0'
j=$TMP/getlock.json
jcheck "$j" "one server found, strong fencing" 'd["servers"] == 1 and not d["fencing_weak"]'
jcheck "$j" "kill: pass, the lock taken over" 'sc("kill")["verdict"] == "pass"'
jcheck "$j" "pause: n/a — a stopped holder keeps its GET_LOCK lock while its connection lives" \
    'sc("pause")["verdict"] == "n/a"'
jcheck "$j" "pause-lost: pass, stale writes rejected, the canary lost updates" \
    'sc("pause-lost")["verdict"] == "pass" and sc("pause-lost")["fenced"]["stale_writes_accepted"] == sc("pause-lost")["fenced"]["stale_writes_accepted_unopposed"] and sc("pause-lost")["canary"]["lost_increments"] > 0'
jcheck "$j" "restart: pass, holders told, tokens rose (a new epoch after the crash)" \
    'sc("restart")["verdict"] == "pass" and sc("restart")["overlaps"] == 0'
finish
