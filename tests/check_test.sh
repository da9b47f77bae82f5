#!/bin/bash
# SPDX-License-Identifier: MIT
# check_test.sh — `dlock check` on the embedded file backend: verdicts of the
# fault scenarios, the checker on a hand-made history, and clean-up on
# SIGTERM. Needs $DLOCK (the built CLI) and python3; asserts on JSON only,
# never on timings.
set -u
. "$(dirname "$0")/testlib.sh"
preamble
TMP=$(mktemp -d "${TMPDIR:-/tmp}/dlock-check-test.XXXXXX")
BG=
cleanup() {
    [ -n "$BG" ] && kill -KILL "$BG" 2>/dev/null
    rm -rf "$TMP"
}
trap cleanup EXIT
URL="file://$TMP/locks"


# --- 1. the checker alone, on a history with a known overlap and a known
#        stale write (w=3 writes after losing the lock to w=1)
cat >"$TMP/broken.hist" <<'EOF'
# hand-made: one overlap, one stale write accepted
run scenario=handmade mode=fenced backend=file caps=0x1 ttl_ms=0 fencing=1
1000 acquire w=1
1100 acquired w=1 token=1
1200 read w=1 token=1 value=0
1300 write_accepted w=1 token=1 value=1
1400 release w=1
2000 acquire w=2
2100 acquired w=2 token=2
2120 read w=2 token=2 value=1
2150 write_accepted w=2 token=2 value=2
2180 acquire w=3
2200 acquired w=3 token=3
2250 release w=2
2600 read w=3 token=3 value=2
2700 lost w=3 token=3
2800 acquire w=1
2900 acquired w=1 token=4
3000 read w=1 token=4 value=2
3100 write_accepted w=3 token=3 value=3
3200 write_accepted w=1 token=4 value=3
3300 release w=1
3400 final value=3
EOF
"$DLOCK" check --check-history "$TMP/broken.hist" --json >"$TMP/broken.json"
rc=$?
[ $rc -eq 1 ] && ok "broken history: exit 1" || bad "broken history: exit $rc, want 1"
jcheck "$TMP/broken.json" "broken history: one overlap found" \
    'd["scenarios"][0]["overlaps"] == 1'
jcheck "$TMP/broken.json" "broken history: one stale write accepted found" \
    'd["scenarios"][0]["stale_writes_accepted"] == 1 and d["scenarios"][0]["lost_increments"] == 1'
jcheck "$TMP/broken.json" "broken history: verdict fail" 'd["scenarios"][0]["verdict"] == "fail"'
out=$("$DLOCK" check --check-history "$TMP/broken.hist")
echo "$out" | grep -q "handmade" && echo "$out" | grep -q "fail" &&
    ok "broken history: table names the run and the verdict" || bad "table: $out"

printf '10 acquired w=1 token=nope\n' >"$TMP/garbage.hist"
"$DLOCK" check --check-history "$TMP/garbage.hist" 2>"$TMP/err"
rc=$?
[ $rc -eq 64 ] && grep -q "line 1" "$TMP/err" && ok "malformed history: exit 64 naming the line" ||
    bad "malformed history: exit $rc, $(cat "$TMP/err")"

# --- 1b. the checker on server faults: a violation after a data loss that
#         the backend says it cannot survive is expected, not a failure
cat >"$TMP/loss.hist" <<'EOF'
run scenario=restart mode=fenced backend=redis caps=0x121 ttl_ms=1000 fencing=1
1000 acquire w=1
1100 acquired w=1 token=7
1200 read w=1 token=7 value=6
2000 server_killed value=0
2000 data_loss value=1
3000 server_started value=0
3100 acquire w=2
3200 acquired w=2 token=1
3300 read w=2 token=1 value=6
3400 write_accepted w=1 token=7 value=7
3500 release w=1
3600 write_rejected w=2 token=1 value=7
3700 release w=2
4000 final value=7
EOF
"$DLOCK" check --check-history "$TMP/loss.hist" --json >"$TMP/loss.json"
rc=$?
[ $rc -eq 0 ] && ok "data loss beyond the claim: exit 0" || bad "data loss beyond the claim: exit $rc"
jcheck "$TMP/loss.json" "data loss beyond the claim: expected-violation, counted as such" \
    'd["scenarios"][0]["verdict"] == "expected-violation" and d["scenarios"][0]["fenced"]["overlaps_expected"] == 1 and d["scenarios"][0]["fenced"]["token_regressions_expected"] == 1 and d["scenarios"][0]["fenced"]["fresh_writes_rejected"] == 1'
sed 's/data_loss value=1/data_loss value=0/' "$TMP/loss.hist" >"$TMP/loss0.hist"
"$DLOCK" check --check-history "$TMP/loss0.hist" --json >"$TMP/loss0.json"
jcheck "$TMP/loss0.json" "data loss within the claim: the same violations fail" \
    'd["scenarios"][0]["verdict"] == "fail"'
cat >"$TMP/late.hist" <<'EOF'
run scenario=pause-acquire mode=fenced backend=redis caps=0x121 ttl_ms=1 fencing=1
0 acquire w=1
5000 paused w=1
1600000 resumed w=1
1700000 acquired w=1 token=3
1700100 state w=1 token=3 value=3
1800000 release w=1
EOF
"$DLOCK" check --check-history "$TMP/late.hist" --json >"$TMP/late.json"
jcheck "$TMP/late.json" "a grant reported after its lease: fail, late_grants 1" \
    'd["scenarios"][0]["verdict"] == "fail" and d["scenarios"][0]["late_grants"] == 1 and d["scenarios"][0]["overlaps"] == 0'
cat >"$TMP/held.hist" <<'EOF'
run scenario=pause mode=fenced backend=redis caps=0x121 ttl_ms=1 fencing=1
0 acquire w=1
100 acquired w=1 token=3
200 read w=1 token=3 value=0
300 paused w=1
2000000 resumed w=1
2000100 state w=1 token=3 value=2 rc=0
2000200 lost_notified w=1 token=3
2000300 write_rejected w=1 token=3 value=1
2000400 release w=1
EOF
"$DLOCK" check --check-history "$TMP/held.hist" --json >"$TMP/held.json"
jcheck "$TMP/held.json" "HELD after being stopped past the lease: fail" \
    'd["scenarios"][0]["verdict"] == "fail" and d["scenarios"][0]["fenced"]["state_held_late"] == 1 and "could no longer hold" in d["scenarios"][0]["note"]'
sed 's/value=2 rc=0/value=3 rc=1/' "$TMP/held.hist" >"$TMP/lost.hist"
"$DLOCK" check --check-history "$TMP/lost.hist" --json >"$TMP/lost.json"
jcheck "$TMP/lost.json" "LOST after being stopped past the lease: pass, notification timed from SIGCONT" \
    'd["scenarios"][0]["verdict"] == "pass" and d["scenarios"][0]["fenced"]["state_lost_seen"] == 1 and d["scenarios"][0]["fenced"]["loss_notified_after_stop"] == 1'

# --- 1c. the checker on a holder cut off from the servers (partition): it
#         holds until it is told of the loss; told after its lease ran out on
#         the servers (here after w=2 took the lock), or never, fails
cat >"$TMP/cut.hist" <<'EOF'
run scenario=partition mode=fenced backend=redis caps=0x121 ttl_ms=3000 fencing=1
0 acquire w=1
100000 acquired w=1 token=1
200000 read w=1 token=1 value=0
1600000000 partitioned w=1 value=3100000000
3068000000 lost_notified w=1 token=1
3100000000 acquire w=2
3150000000 acquired w=2 token=2
3150100000 read w=2 token=2 value=0
3150200000 state w=1 token=1 value=3 rc=1
3150300000 write_rejected w=1 token=1 value=1
3150400000 release w=1
3150500000 write_accepted w=2 token=2 value=1
3150600000 release w=2
5000000000 healed w=1
EOF
"$DLOCK" check --check-history "$TMP/cut.hist" --json >"$TMP/cut.json"
jcheck "$TMP/cut.json" "cut off, told 32 ms before its lease ran out on the servers: pass" \
    'd["scenarios"][0]["verdict"] == "pass" and d["scenarios"][0]["partitions"] == 1 and d["scenarios"][0]["told_before_expiry_min_ms"] == 32.0 and d["scenarios"][0]["overlaps"] == 0'
sed 's/^3068000000 lost_notified/3150150000 lost_notified/' "$TMP/cut.hist" >"$TMP/cutlate.hist"
"$DLOCK" check --check-history "$TMP/cutlate.hist" --json >"$TMP/cutlate.json"
jcheck "$TMP/cutlate.json" "cut off, told after another worker took the lock: fail, an overlap and a late loss" \
    'd["scenarios"][0]["verdict"] == "fail" and d["scenarios"][0]["overlaps"] == 1 and d["scenarios"][0]["loss_told_late"] == 1 and d["scenarios"][0]["told_before_expiry_min_ms"] < 0'
grep -v lost_notified "$TMP/cut.hist" >"$TMP/cutnever.hist"
"$DLOCK" check --check-history "$TMP/cutnever.hist" --json >"$TMP/cutnever.json"
jcheck "$TMP/cutnever.json" "cut off, never told: fail, its holding lasts until its release" \
    'd["scenarios"][0]["verdict"] == "fail" and d["scenarios"][0]["overlaps"] == 1 and d["scenarios"][0]["loss_untold"] == 1 and d["scenarios"][0]["told_before_expiry_min_ms"] is None'

# --- 1d. the checker on claims: per key, a run while another runner lives
#         and holds it, a re-run whose attempt does not grow, a replay of a
#         result nobody recorded and a second record all fail; a re-run after
#         the runner was killed, as attempt 2, replayed as recorded, passes
cat >"$TMP/claims.hist" <<'EOF'
run scenario=claims mode=fenced backend=file caps=0x201 ttl_ms=0 fencing=1
2000 claim_run w=1 token=4 value=1
2100 killed w=1
2200 claim_run w=2 token=4 value=2
2300 claim_finish w=2 token=4 value=5
2400 claim_finished w=2 token=4 value=5
2500 claim_replay w=3 token=4 value=5 rc=2
EOF
"$DLOCK" check --check-history "$TMP/claims.hist" --json >"$TMP/claims.json"
jcheck "$TMP/claims.json" "claims: a re-run after a kill as attempt 2, replayed as recorded: pass" \
    'd["scenarios"][0]["verdict"] == "pass" and d["scenarios"][0]["claim_runs"] == 2 and d["scenarios"][0]["claim_reruns"] == 1 and d["scenarios"][0]["claim_kills"] == 1'
sed 's/^2100 killed w=1/2100 paused w=1/' "$TMP/claims.hist" >"$TMP/claimsdup.hist"
"$DLOCK" check --check-history "$TMP/claimsdup.hist" --json >"$TMP/claimsdup.json"
jcheck "$TMP/claimsdup.json" "claims: a run while the runner lives and holds its lock (no expiry): fail" \
    'd["scenarios"][0]["verdict"] == "fail" and d["scenarios"][0]["claim_duplicates"] == 1 and "still ran it" in d["scenarios"][0]["note"]'
sed -e 's/^2200 claim_run w=2 token=4 value=2/2200 claim_run w=2 token=4 value=1/' \
    -e 's/^2500 claim_replay w=3 token=4 value=5/2500 claim_replay w=3 token=4 value=6/' \
    "$TMP/claims.hist" >"$TMP/claimsbad.hist"
printf '2600 claim_finished w=1 token=4 value=7\n' >>"$TMP/claimsbad.hist"
"$DLOCK" check --check-history "$TMP/claimsbad.hist" --json >"$TMP/claimsbad.json"
jcheck "$TMP/claimsbad.json" "claims: attempt not above, replay of no record, a second record: fail" \
    'd["scenarios"][0]["verdict"] == "fail" and d["scenarios"][0]["claim_attempts_out_of_order"] == 1 and d["scenarios"][0]["claim_replay_mismatches"] == 1 and d["scenarios"][0]["claim_recorded_twice"] == 1'

# --- 2. every scenario on the file backend, with the raw history kept
"$DLOCK" --url "$URL" check -P 3 -D 0.6 --json --history "$TMP/run.hist" >"$TMP/run.json"
rc=$?
[ $rc -eq 0 ] && ok "check on file backend: exit 0" || bad "check on file backend: exit $rc"
jcheck "$TMP/run.json" "check: one object with a scenarios array" \
    'd["backend"] == "file" and [s["name"] for s in d["scenarios"]] == ["none", "kill", "pause", "pause-lost", "pause-acquire", "restart", "failover-cut", "kill-minority", "partition", "kill-leader", "partition-member", "claims"]'
jcheck "$TMP/run.json" "check: server faults are n/a on the file backend, and not run" \
    'all(s["verdict"] == "n/a" and s["fenced"] is None and "no servers" in s["note"] for s in d["scenarios"][4:8] + d["scenarios"][9:11])'
jcheck "$TMP/run.json" "check: partition is n/a on the file backend, and not run" \
    'd["scenarios"][8]["verdict"] == "n/a" and d["scenarios"][8]["fenced"] is None and "do not expire" in d["scenarios"][8]["note"]'
jcheck "$TMP/run.json" "check: counts present in every scenario" \
    'all(all(k in s for k in ("sections", "overlaps", "lost_increments", "stale_writes_rejected", "stale_writes_accepted", "verdict")) for s in d["scenarios"])'
jcheck "$TMP/run.json" "check: no overlap, no stale write accepted anywhere" \
    'all(s["overlaps"] == 0 and s["stale_writes_accepted"] == 0 and s["lost_increments"] == 0 for s in d["scenarios"])'
jcheck "$TMP/run.json" "check: none passes" 'd["scenarios"][0]["verdict"] == "pass"'
jcheck "$TMP/run.json" "check: kill passes, holders were killed inside their section and the lock was taken over" \
    'd["scenarios"][1]["verdict"] == "pass" and d["scenarios"][1]["fenced"]["kills_holding"] > 0 and d["scenarios"][1]["fenced"]["takeovers"] > 0'
jcheck "$TMP/run.json" "check: pause is n/a on the file backend (locks do not expire)" \
    'd["scenarios"][2]["verdict"] == "n/a" and "not applicable" in d["scenarios"][2]["note"] and d["scenarios"][2]["canary"] is None'
jcheck "$TMP/run.json" "check: pause-lost passes, fencing rejected the stale writes" \
    'd["scenarios"][3]["verdict"] == "pass" and d["scenarios"][3]["stale_writes_rejected"] > 0'
jcheck "$TMP/run.json" "check: pause-lost canary lost updates (the fault took effect)" \
    'd["scenarios"][3]["canary"]["lost_increments"] > 0 and d["scenarios"][3]["canary"]["stale_writes_accepted"] > 0'
jcheck "$TMP/run.json" "check: claims passes, no duplicate, attempts in order, replays equal the records" \
    'sc("claims")["verdict"] == "pass" and sc("claims")["claim_duplicates"] == 0 and sc("claims")["claim_attempts_out_of_order"] == 0 and sc("claims")["claim_replay_mismatches"] == 0 and sc("claims")["claim_recorded_twice"] == 0 and "at most once while the holder lives, at least once across crashes" in sc("claims")["note"]'
jcheck "$TMP/run.json" "check: claims runners were killed, their keys ran again (runs > keys, attempt > 1)" \
    'sc("claims")["claim_kills"] > 0 and sc("claims")["claim_runs"] > sc("claims")["claim_keys"] and sc("claims")["claim_reruns"] > 0 and sc("claims")["claim_replays"] > 0'
[ -z "$(ls -A "$TMP/locks" 2>/dev/null)" ] && ok "check: lock files and claim records removed" ||
    bad "check left files: $(ls "$TMP/locks")"

# The dumped history checks to the same counts.
"$DLOCK" check --check-history "$TMP/run.hist" --json >"$TMP/rerun.json"
rc=$?
[ $rc -eq 0 ] && ok "re-check of the dumped history: exit 0" || bad "re-check: exit $rc"
python3 - "$TMP/run.json" "$TMP/rerun.json" <<'EOF' && ok "re-check of the dumped history: same counts" || bad "re-check: counts differ"
import json, sys
live = json.load(open(sys.argv[1]))["scenarios"]
again = json.load(open(sys.argv[2]))["scenarios"]
want = []
for s in live:
    for mode in ("fenced", "canary"):
        if s[mode] is not None:
            want.append((s["name"], s[mode]["sections"], s[mode]["overlaps"],
                         s[mode]["stale_writes_rejected"], s[mode]["stale_writes_accepted"],
                         s[mode]["lost_increments"]))
got = []
for s in again:
    r = s["fenced"] or s["canary"]
    got.append((s["name"], r["sections"], r["overlaps"], r["stale_writes_rejected"],
                r["stale_writes_accepted"], r["lost_increments"]))
if want != got:
    print("# live ", want)
    print("# again", got)
    sys.exit(1)
EOF

# --- 3. human output and usage errors
"$DLOCK" --url "$URL" check -P 2 -D 0.3 --scenario none >"$TMP/table.txt"
rc=$?
[ $rc -eq 0 ] && grep -q "^none .*pass" "$TMP/table.txt" && ok "table output" ||
    bad "table output (exit $rc): $(cat "$TMP/table.txt")"
"$DLOCK" --url "$URL" check --scenario nope 2>/dev/null
[ $? -eq 64 ] && ok "unknown scenario: exit 64" || bad "unknown scenario: not 64"
"$DLOCK" --url "$URL" check -P 1 2>/dev/null
[ $? -eq 64 ] && ok "-P 1: exit 64" || bad "-P 1: not 64"
"$DLOCK" check --list | grep -q "^pause-lost" && ok "--list" || bad "--list"

# --- 4. SIGTERM in the middle: partial results, exit 143, nothing left running
"$DLOCK" --url "$URL" check -P 3 -D 5 --json >"$TMP/term.json" &
BG=$!
sleep 1.5
kids=$(ps -o pid= --ppid "$BG" | tr '\n' ' ')
kill -TERM "$BG"
wait "$BG"
rc=$?
BG=
[ $rc -eq 143 ] && ok "SIGTERM: exit 143" || bad "SIGTERM: exit $rc"
jcheck "$TMP/term.json" "SIGTERM: partial results marked interrupted" 'd["interrupted"] is True'
[ -n "$kids" ] && ok "SIGTERM: there were workers ($kids)" || bad "SIGTERM: no workers seen"
sleep 0.2
left=
for k in $kids; do [ -e "/proc/$k" ] && left="$left $k"; done
[ -z "$left" ] && ok "SIGTERM: every worker is gone" || bad "SIGTERM: still running:$left"

finish
