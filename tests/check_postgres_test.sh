#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# check_postgres_test.sh — `dlock check` with faults on PostgreSQL advisory
# locks: a server started by tests/servers.sh, short runs of each scenario,
# verdicts asserted from --json. Never asserts timings. Skipped (exit 77)
# when PostgreSQL or the postgres backend is missing. Needs $DLOCK and
# python3. The full matrix (longer runs) is run by hand: dlock check -D 10.
set -u
. "$(dirname "$0")/testlib.sh"
preamble
if ! ls /usr/lib/postgresql/*/bin/postgres >/dev/null 2>&1 ||
    ! "$DLOCK" backends | grep -q '^postgres .* yes$'; then
    skip "PostgreSQL or the postgres backend missing"
fi
# The server with its production durability (fsync, synchronous_commit on):
# the restart scenarios crash it (every process frozen, then SIGKILL), and
# tokens must not go back, though a grant does not wait for a WAL flush.
DLOCK_SERVERS_DURABLE=1 in_servers postgres

TMP=$(mktemp -d "${TMPDIR:-/tmp}/dlock-check-pg.XXXXXX")
trap 'rm -rf "$TMP"' EXIT
"$DLOCK" --url "$DLOCK_TEST_POSTGRES" check --json -P 3 -D 2 --scenario kill --scenario pause \
    --scenario pause-lost --scenario restart >"$TMP/pg.json" 2>"$TMP/pg.err"
rc=$?
if [ $rc -le 2 ] && [ -s "$TMP/pg.json" ]; then ok "postgres: ran (exit $rc)"; else
    bad "postgres: exit $rc: $(head -3 "$TMP/pg.err")"
    echo '{"scenarios":[]}' >"$TMP/pg.json"
fi
# mode=lease: a row with an expiry on the server's clock; a paused holder
# loses it and fencing must catch its late write.
"$DLOCK" --url "$DLOCK_TEST_POSTGRES_LEASE" check --json -P 3 -D 2 --scenario kill --scenario pause \
    >"$TMP/lease.json" 2>"$TMP/lease.err"
rc=$?
if [ $rc -le 2 ] && [ -s "$TMP/lease.json" ]; then ok "postgres mode=lease: ran (exit $rc)"; else
    bad "postgres mode=lease: exit $rc: $(head -3 "$TMP/lease.err")"
    echo '{"scenarios":[]}' >"$TMP/lease.json"
fi
jcheck "$TMP/lease.json" "lease kill: pass, the lock taken over when the row expired" 'sc("kill")["verdict"] == "pass"'
# Default options: a client stopped with its acquisition in flight (the
# server's sessions are children of the postmaster: all are held back; with
# the postmaster alone stopped, the verdict was 'invalid' every time).
check_json pa "$DLOCK_TEST_POSTGRES_LEASE" --scenario pause-acquire
jcheck "$TMP/pa.json" "lease pause-acquire with default options: pass, the late acquisitions failed" \
    'sc("pause-acquire")["verdict"] == "pass"'
jcheck "$TMP/lease.json" "lease pause past the lease: pass, stale writes rejected, the canary lost updates" \
    'sc("pause")["verdict"] == "pass" and sc("pause")["fenced"]["stale_writes_accepted"] == sc("pause")["fenced"]["stale_writes_accepted_unopposed"] and sc("pause")["canary"]["lost_increments"] > 0'
# mode=rowlock: a row locked by an open transaction, liveness the session.
"$DLOCK" --url "$DLOCK_TEST_POSTGRES_ROW" check --json -P 3 -D 2 --scenario kill \
    --scenario restart >"$TMP/row.json" 2>"$TMP/row.err"
rc=$?
if [ $rc -le 2 ] && [ -s "$TMP/row.json" ]; then ok "postgres mode=rowlock: ran (exit $rc)"; else
    bad "postgres mode=rowlock: exit $rc: $(head -3 "$TMP/row.err")"
    echo '{"scenarios":[]}' >"$TMP/row.json"
fi
jcheck "$TMP/row.json" "rowlock kill: pass, the lock taken over" 'sc("kill")["verdict"] == "pass"'
jcheck "$TMP/row.json" "rowlock restart: pass, holders told, tokens rose (a new epoch after the crash)" \
    'sc("restart")["verdict"] == "pass" and sc("restart")["overlaps"] == 0'
j=$TMP/pg.json
jcheck "$j" "one server found, strong fencing" 'd["servers"] == 1 and not d["fencing_weak"]'
jcheck "$j" "kill: pass, the lock taken over" 'sc("kill")["verdict"] == "pass"'
jcheck "$j" "pause: n/a — a stopped holder keeps its advisory lock" 'sc("pause")["verdict"] == "n/a"'
jcheck "$j" "pause-lost: pass, stale writes rejected, the canary lost updates" \
    'sc("pause-lost")["verdict"] == "pass" and sc("pause-lost")["fenced"]["stale_writes_accepted"] == sc("pause-lost")["fenced"]["stale_writes_accepted_unopposed"] and sc("pause-lost")["canary"]["lost_increments"] > 0'
jcheck "$j" "restart: pass, holders told, tokens rose (a new epoch after the crash: docs/postgres.md)" \
    'sc("restart")["verdict"] == "pass" and sc("restart")["overlaps"] == 0'
finish
