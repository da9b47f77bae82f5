#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# check_etcd_test.sh — `dlock check` with server faults on etcd: a single
# member and a three-member cluster started by tests/servers.sh, short runs
# of each scenario they allow, verdicts asserted from --json. Never asserts
# timings. Skipped (exit 77) when etcd is not installed or the etcd backend
# is not built. Needs $DLOCK and python3. The full matrix (longer runs) is
# run by hand: dlock check -D 10 on DLOCK_TEST_ETCD3.
set -u
. "$(dirname "$0")/testlib.sh"
preamble
need_etcd "$DLOCK"
in_servers etcd etcd3

TMP=$(mktemp -d "${TMPDIR:-/tmp}/dlock-check-etcd.XXXXXX")
trap 'rm -rf "$TMP"' EXIT

# A killed or stopped holder's lock comes free when its lease expires (2 s
# here): those runs last long enough to see the takeover, on the single
# member; the cluster's faults on the three members, with a 5 s lease: the
# checker cannot see renewals, so it holds a holder to one lease from its
# acquisition, and a member's restart (while the holder is parked) takes
# a second or two; after the leader is killed the election takes as long.
check_json etcd-one "$DLOCK_TEST_ETCD" -P 3 -D 4 --scenario kill --scenario pause
check_json etcd3 "${DLOCK_TEST_ETCD3/ttl=2/ttl=5}" -P 3 -D 4 --scenario restart --scenario kill-minority \
    --scenario kill-leader
# A client stopped with its acquisition in flight, with dlock check's
# defaults (no -D): the request lies unread at the one member it went to
# (every member stopped), then the lease runs out while the client is
# stopped. It was 'invalid' when the scenario wanted it at all three.
check_json etcd3pa "$DLOCK_TEST_ETCD3" -P 3 --scenario pause-acquire
j=$TMP/etcd3.json
jcheck "$j" "etcd3: three servers found, strong fencing" 'd["servers"] == 3 and not d["fencing_weak"]'
jcheck "$TMP/etcd-one.json" "etcd kill: pass, the lock taken over" 'sc("kill")["verdict"] == "pass"'
jcheck "$TMP/etcd-one.json" "etcd pause past the lease: pass, stale writes rejected, the canary lost updates" \
    'sc("pause")["verdict"] == "pass" and sc("pause")["fenced"]["stale_writes_accepted"] == sc("pause")["fenced"]["stale_writes_accepted_unopposed"] and sc("pause")["canary"]["lost_increments"] > 0'
jcheck "$j" "etcd3 restart of a member: pass (a cluster keeps its data)" \
    'sc("restart")["verdict"] == "pass" and sc("restart")["overlaps"] == 0'
jcheck "$j" "etcd3 kill-minority (a follower): pass, and the lock went on working" \
    'sc("kill-minority")["verdict"] == "pass" and sc("kill-minority")["fenced"]["sections_after_fault"] > 0'
jcheck "$j" "etcd3 kill-leader: pass, and the lock went on working after the election" \
    'sc("kill-leader")["verdict"] == "pass" and sc("kill-leader")["fenced"]["sections_after_fault"] > 0'
jcheck "$TMP/etcd3pa.json" "etcd3 pause-acquire with default options: pass, acquisitions stopped in flight, none accepted late" \
    'sc("pause-acquire")["verdict"] == "pass" and sc("pause-acquire")["acquisitions_stopped"] > 0 and sc("pause-acquire")["fenced"]["stale_writes_accepted"] == sc("pause-acquire")["fenced"]["stale_writes_accepted_unopposed"]'
finish
