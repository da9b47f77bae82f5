#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# cli_etcdctl_test.sh — dlock beside etcdctl lock and etcdctl elect on one
# etcd (layout=etcdctl, issue 27), against the real etcdctl: the peer holds
# and dlock waits (and -n conflicts), dlock holds and the peer waits, each
# hands over to the other; a crowd of both increments one counter and
# loses no update; a holder killed with kill -9 on either side is taken
# over once its lease ends; elections both ways; status, list and break on
# the peer's lock; the layout's names; dlock's own layout refuses a name
# whose keys hold etcdctl's. Real server from tests/servers.sh. Skipped
# (exit 77) without etcd, etcdctl or the etcd backend.
set -u
. "$(dirname "$0")/testlib.sh"
preamble
need_etcd "$DLOCK"
command -v etcdctl >/dev/null || skip "etcdctl not installed (Debian: etcd-client)"
in_servers etcd
U=$DLOCK_TEST_ETCD_ETCDCTL # ttl=2, layout=etcdctl
D=$DLOCK_TEST_ETCD         # dlock's own layout
port=$(cat "$DLOCK_TEST_SERVERS/etcd.port")
export ETCDCTL_API=3
EP=http://127.0.0.1:$port
ctl() { etcdctl --endpoints "$EP" "$@"; }
# (etcdctl itself, not ctl, where its pid is wanted: $! of a function run
# in the background is a subshell's)
TMP=$(mktemp -d "${TMPDIR:-/tmp}/dlock-cli-etcdctl.XXXXXX")
pids=()
trap 'for p in "${pids[@]}"; do kill -9 "$p" 2>/dev/null; done; rm -rf "$TMP"' EXIT
now_ms() { date +%s%3N; }
until_file() { # FILE: until it exists (10 s at most)
    for _ in $(seq 100); do [ -e "$1" ] && return 0; sleep 0.1; done
    return 1
}

# ---- names: a key prefix, '/' and all --------------------------------------------
"$DLOCK" --url "$U" run jobs/reindex -- true && ok "layout=etcdctl: name jobs/reindex taken" ||
    bad "layout=etcdctl: name jobs/reindex refused"
for n in "jobs/" "tab$(printf '\t')x" "dlock/.clients/x"; do
    out=$("$DLOCK" --url "$U" run "$n" -- echo RAN 2>&1)
    rc=$?
    [ $rc = 64 ] && ! grep -q RAN <<<"$out" && ok "layout=etcdctl: name '$n' refused: $out" ||
        bad "layout=etcdctl: name '$n': exit $rc: $out"
done
out=$("$DLOCK" --url "$D" run jobs/reindex -- true 2>&1)
[ $? = 64 ] && ok "dlock's own layout still refuses jobs/reindex" || bad "own layout took jobs/reindex: $out"
out=$("$DLOCK" --url "$D&layout=curator" run x -- true 2>&1)
[ $? = 64 ] && grep -q "layout=curator" <<<"$out" && ok "an unknown layout is a URL error: $out" ||
    bad "layout=curator on etcd: $out"

for kind in --shared "--permits 3"; do
    out=$("$DLOCK" --url "$U" run $kind x -- echo RAN 2>&1)
    rc=$?
    [ $rc = 70 ] && grep -q "another mode than this URL" <<<"$out" && ! grep -q RAN <<<"$out" &&
        ok "layout=etcdctl: run $kind is not supported: $out" || bad "layout=etcdctl: run $kind: exit $rc: $out"
done

# ---- the peer holds, dlock waits ---------------------------------------------------
etcdctl --endpoints "$EP" lock p1 -- sh -c "touch $TMP/p1.in; sleep 2; date +%s%3N >$TMP/p1.end" >/dev/null & pids+=($!)
until_file "$TMP/p1.in" || bad "etcdctl lock p1 never ran its command"
key=$(ctl get --prefix p1/ --keys-only | grep .)
[[ $key =~ ^p1/[0-9a-f]+$ ]] && ok "etcdctl's key is $key" || bad "etcdctl's key: '$key'"
lease=${key#p1/}
"$DLOCK" --url "$U" run -n p1 -- echo RAN >"$TMP/p1.n" 2>&1
rc=$?
[ $rc = 1 ] && ! grep -q RAN "$TMP/p1.n" && ok "etcdctl holds p1: dlock run -n exits 1, nothing ran" ||
    bad "etcdctl holds p1: dlock run -n: exit $rc: $(cat "$TMP/p1.n")"
st=$("$DLOCK" --url "$U" status p1 2>&1)
grep -q 'held: *yes' <<<"$st" && grep -q "holder: *lease $lease (etcdctl lock" <<<"$st" &&
    ok "status shows etcdctl's holder by its lease $lease" || bad "status of p1: $st"
"$DLOCK" --url "$U" list p >"$TMP/list" 2>&1
grep -qx p1 "$TMP/list" && ok "list shows the peer's name p1" || bad "list: $(cat "$TMP/list")"
"$DLOCK" --url "$U" run -w 20 p1 -- sh -c "date +%s%3N >$TMP/p1.dlock" 2>"$TMP/p1.err"
rc=$?
[ $rc = 0 ] && [ "$(cat "$TMP/p1.dlock")" -ge "$(cat "$TMP/p1.end")" ] &&
    ok "etcdctl released p1: the waiting dlock ran after etcdctl's command ended" ||
    bad "p1: dlock exit $rc ($(cat "$TMP/p1.err")), started $(cat "$TMP/p1.dlock" 2>/dev/null), etcdctl ended $(cat "$TMP/p1.end" 2>/dev/null)"
wait

# ---- dlock holds, the peer waits ----------------------------------------------------
"$DLOCK" --url "$U" run p2 -- sh -c "touch $TMP/p2.in; sleep 2; date +%s%3N >$TMP/p2.end" & pids+=($!)
until_file "$TMP/p2.in" || bad "dlock run p2 never ran its command"
key=$(ctl get --prefix p2/ --keys-only | grep .)
[[ $key =~ ^p2/[0-9a-f]+$ ]] && ok "dlock's key is $key, as etcdctl's" || bad "dlock's key: '$key'"
[ -z "$(ctl get "$key" --print-value-only)" ] && ok "dlock's key has an empty value" ||
    bad "dlock's key has a value: $(ctl get "$key" --print-value-only)"
timeout 30 etcdctl --endpoints "$EP" lock p2 -- sh -c "date +%s%3N >$TMP/p2.ctl" >/dev/null
rc=$?
[ $rc = 0 ] && [ "$(cat "$TMP/p2.ctl")" -ge "$(cat "$TMP/p2.end")" ] &&
    ok "dlock released p2: the waiting etcdctl lock ran after dlock's command ended" ||
    bad "p2: etcdctl exit $rc, started $(cat "$TMP/p2.ctl" 2>/dev/null), dlock ended $(cat "$TMP/p2.end" 2>/dev/null)"
wait

# ---- a crowd of both, one counter --------------------------------------------------
echo 0 >"$TMP/counter"
# read, pause, write: two at once lose an update
incr="read n <$TMP/counter; sleep 0.01; echo \$((n + 1)) >$TMP/counter"
end=$(( $(date +%s) + 4 ))
crowd() { # SIDE I: lock and increment until the end, counting successes
    local done=0
    while [ "$(date +%s)" -lt $end ]; do
        if [ "$1" = dlock ]; then
            "$DLOCK" --url "$U" run -w 30 crowd -- sh -c "$incr" 2>>"$TMP/crowd.err" && done=$((done + 1))
        else
            ctl lock crowd -- sh -c "$incr" >/dev/null 2>>"$TMP/crowd.err" && done=$((done + 1))
        fi
    done
    echo $done >"$TMP/crowd.$1.$2"
}
cpids=()
for i in 1 2 3; do
    crowd dlock $i & cpids+=($!)
    crowd etcdctl $i & cpids+=($!)
done
wait "${cpids[@]}"
dl=$(cat "$TMP"/crowd.dlock.* | paste -sd+ | bc)
ec=$(cat "$TMP"/crowd.etcdctl.* | paste -sd+ | bc)
got=$(cat "$TMP/counter")
[ "$got" = $((dl + ec)) ] && [ "$dl" -gt 0 ] && [ "$ec" -gt 0 ] &&
    ok "a crowd of 3 dlock and 3 etcdctl loops: $dl + $ec sections, counter $got: no update lost" ||
    bad "crowd: dlock $dl, etcdctl $ec sections, counter $got; $(head -3 "$TMP/crowd.err")"

# ---- kill -9 of a holder, either side ------------------------------------------------
etcdctl --endpoints "$EP" lock --ttl 2 k1 -- sh -c "echo \$\$ >$TMP/k1.in; exec sleep 60" >/dev/null & k=$!
pids+=($k)
until_file "$TMP/k1.in" || bad "etcdctl lock k1 never ran its command"
at=$(now_ms)
kill -9 $k
kill -9 "$(cat "$TMP/k1.in")" # (its command, orphaned)
"$DLOCK" --url "$U" run -w 20 k1 -- true 2>"$TMP/k1.err"
rc=$?
[ $rc = 0 ] && ok "etcdctl lock (lease 2 s) killed with -9: dlock took k1 $(( $(now_ms) - at )) ms later" ||
    bad "k1 after kill -9 of etcdctl: exit $rc: $(cat "$TMP/k1.err")"
"$DLOCK" --url "$U" run k2 -- sleep 60 & k=$!
pids+=($k)
wait_held "$U" k2 || bad "dlock run k2 never held"
at=$(now_ms)
kill -9 $k
timeout 30 etcdctl --endpoints "$EP" lock k2 true >/dev/null
rc=$?
[ $rc = 0 ] && ok "dlock run (lease 2 s) killed with -9: etcdctl lock took k2 $(( $(now_ms) - at )) ms later" ||
    bad "k2 after kill -9 of dlock: etcdctl exit $rc"

# ---- break --force on the peer's holder -----------------------------------------------
etcdctl --endpoints "$EP" lock b1 -- sh -c "echo \$\$ >$TMP/b1.in; exec sleep 60" >/dev/null & k=$!
pids+=($k)
until_file "$TMP/b1.in" || bad "etcdctl lock b1 never ran its command"
cur=b1
out=$("$DLOCK" --url "$U" break --force b1 2>&1)
rc=$?
[ $rc = 0 ] && grep -q "lease" <<<"$out" && ok "break --force of etcdctl's b1: $out" || bad "break b1: exit $rc: $out"
"$DLOCK" --url "$U" run -n b1 -- true && ok "after the break dlock takes b1 at once" || bad "b1 after the break: exit $?"
kill -9 $k "$(cat "$TMP/$cur.in")" 2>/dev/null

# ---- elections, both ways -----------------------------------------------------------
etcdctl --endpoints "$EP" elect e1 v1 >/dev/null & k=$!
pids+=($k)
for _ in $(seq 100); do [ "$("$DLOCK" --url "$U" leader e1 2>/dev/null)" = v1 ] && break; sleep 0.1; done
[ "$("$DLOCK" --url "$U" leader e1 2>&1)" = v1 ] && ok "etcdctl elect e1 v1 leads: dlock leader says v1" ||
    bad "dlock leader e1: $("$DLOCK" --url "$U" leader e1 2>&1)"
"$DLOCK" --url "$U" elect -w 20 --value v2 e1 -- sh -c "etcdctl --endpoints $EP get --prefix e1/ --sort-by=CREATE -w json >$TMP/e1.json; touch $TMP/e1.in; sleep 3" & e=$!
sleep 0.5
[ ! -e "$TMP/e1.in" ] && ok "dlock elect waits while etcdctl leads" || bad "dlock elect led beside etcdctl"
kill -INT $k # (etcdctl elect resigns on SIGINT)
until_file "$TMP/e1.in" && ok "etcdctl resigned: dlock elect leads" || bad "dlock elect never led"
out=$(timeout 2 etcdctl --endpoints "$EP" elect -l e1)
grep -qx v2 <<<"$out" && ok "etcdctl elect --listen shows dlock's v2" || bad "etcdctl elect -l e1: '$out'"
wait $e
# The leader's value is written with its key, as Election.Campaign does: the
# key the leader saw first has it at version 1 (never empty in between),
# after a wait (e1) and uncontended (e3).
first_kv() { # FILE: "VALUE VERSION" of the first key of an etcdctl get -w json
    python3 -c 'import base64,json,sys; kv=(json.load(open(sys.argv[1])).get("kvs") or [{}])[0]; print(base64.b64decode(kv.get("value","")).decode() or "-", kv.get("version","-"))' "$1"
}
"$DLOCK" --url "$U" elect --value v3 e3 -- sh -c "etcdctl --endpoints $EP get --prefix e3/ -w json >$TMP/e3.json" ||
    bad "dlock elect e3: exit $?"
for t in "e1 v2" "e3 v3"; do
    set -- $t
    got=$(first_kv "$TMP/$1.json")
    [ "$got" = "$2 1" ] &&
        ok "dlock elect $1: its key had the value at its creation (value, version: $got)" ||
        bad "dlock elect $1: the leader's key (value, version): $got"
done

# ---- mixed by mistake: etcdctl lock on dlock's own keys ----------------------------------
etcdctl --endpoints "$EP" lock dlock/m1 -- sh -c "echo \$\$ >$TMP/m1.in; exec sleep 60" >/dev/null & k=$!
pids+=($k)
until_file "$TMP/m1.in" || bad "etcdctl lock dlock/m1 never ran its command"
cur=m1
out=$("$DLOCK" --url "$D" run -w 5 m1 -- echo RAN 2>&1)
rc=$?
[ $rc = 64 ] && grep -q 'layout=etcdctl' <<<"$out" && grep -q '"dlock/m1"' <<<"$out" && ! grep -q RAN <<<"$out" &&
    ok "dlock's own layout refuses m1, whose keys hold etcdctl's: $out" || bad "m1 in dlock's layout: exit $rc: $out"
[ -z "$(ctl get --prefix dlock/m1/ --keys-only | grep -v "^dlock/m1/[0-9a-f]*$" | grep .)" ] &&
    ok "the refused acquisition left no key" || bad "keys left: $(ctl get --prefix dlock/m1/ --keys-only)"
out=$("$DLOCK" --url "$D" status m1 2>&1)
[ $? = 64 ] && grep -q 'layout=etcdctl' <<<"$out" && ok "status in dlock's layout says the same" || bad "status m1: $out"
"$DLOCK" --url "$U" run -n dlock/m1 -- true 2>/dev/null
[ $? = 1 ] && ok "layout=etcdctl sees etcdctl's holder of dlock/m1" || bad "layout=etcdctl took dlock/m1"
kill -9 $k "$(cat "$TMP/$cur.in")" 2>/dev/null
# and the other way: etcdctl lock on a name dlock holds in its own layout
# waits (the peers count every key under the prefix)
"$DLOCK" --url "$D" run m2 -- sh -c "touch $TMP/m2.in; sleep 30" & k=$!
pids+=($k)
until_file "$TMP/m2.in" || bad "dlock run m2 never ran its command"
"$DLOCK" --url "$U" run -n dlock/m2 -- true 2>/dev/null
[ $? = 1 ] && ok "layout=etcdctl counts dlock's own keys under dlock/m2/ as holders" ||
    bad "layout=etcdctl took dlock/m2 beside dlock's own holder"
kill -TERM $k
wait $k 2>/dev/null

# ---- the command's environment: etcdctl lock's ETCD_LOCK_KEY and ETCD_LOCK_REV ----------
# Each command records its ETCD_LOCK_* variables and reads its key (create
# revision) and the store's revision; etcdctl's own commands give the
# reference. dlock replaces an inherited ETCD_LOCK_KEY (etcdctl 3.4 puts
# its own before the inherited environment, so an inherited one wins there).
envcmd() { # TAG: a command for sh -c that records TAG.env and TAG.json
    echo "env | grep '^ETCD_LOCK_' | sort >$TMP/$1.env; etcdctl --endpoints $EP get \"\$ETCD_LOCK_KEY\" -w json >$TMP/$1.json"
}
envfacts() { # TAG: "KEY REV CREATE_REV STORE_REV" of what TAG's command saw
    python3 - "$TMP/$1.env" "$TMP/$1.json" <<'PY'
import base64, json, sys
env = dict(l.rstrip("\n").split("=", 1) for l in open(sys.argv[1]) if "=" in l)
j = json.load(open(sys.argv[2]))
kv = j.get("kvs") or [{}]
key = base64.b64decode(kv[0].get("key", "")).decode()
ok = key == env.get("ETCD_LOCK_KEY")
print(env.get("ETCD_LOCK_KEY", "-"), env.get("ETCD_LOCK_REV", "-"),
      kv[0].get("create_revision", "-") if ok else "nokey", j["header"]["revision"])
PY
}
vars_of() { cut -d= -f1 "$TMP/$1.env" | tr '\n' ' '; }
# uncontended: REV is the key's create revision on both sides
etcdctl --endpoints "$EP" lock v1 -- sh -c "$(envcmd ec1)" >/dev/null 2>&1
ETCD_LOCK_KEY=stale "$DLOCK" --url "$U" run v1 -- sh -c "$(envcmd dl1)"
read -r ek er ec _ <<<"$(envfacts ec1)"
read -r dk dr dc _ <<<"$(envfacts dl1)"
[ "$(vars_of dl1)" = "$(vars_of ec1)" ] && [ "$(vars_of dl1)" = "ETCD_LOCK_KEY ETCD_LOCK_REV " ] &&
    ok "dlock run v1 exports what etcdctl lock v1 does: $(vars_of dl1)" ||
    bad "variables: dlock '$(vars_of dl1)', etcdctl '$(vars_of ec1)'"
[[ $ek =~ ^v1/[0-9a-f]+$ && $dk =~ ^v1/[0-9a-f]+$ ]] &&
    ok "ETCD_LOCK_KEY is the holder's key on both sides (etcdctl $ek, dlock $dk; dlock's replaced an inherited one)" ||
    bad "ETCD_LOCK_KEY: etcdctl '$ek', dlock '$dk'"
[ "$er" = "$ec" ] && [ "$dr" = "$dc" ] &&
    ok "uncontended, ETCD_LOCK_REV is the key's create revision on both sides (etcdctl $er, dlock $dr)" ||
    bad "uncontended ETCD_LOCK_REV: etcdctl $er (created $ec), dlock $dr (created $dc)"
# after a wait: REV is the revision the grant was seen at, past the key's
# creation and not past the store's (both wait behind a dlock holder)
"$DLOCK" --url "$U" run v2 -- sh -c "touch $TMP/v2.in; sleep 1" & k=$!
until_file "$TMP/v2.in" || bad "dlock run v2 never ran its command"
etcdctl --endpoints "$EP" lock v2 -- sh -c "$(envcmd ec2); touch $TMP/v2.ec; sleep 1" >/dev/null 2>&1 & e=$!
"$DLOCK" --url "$U" run -w 20 v2 -- sh -c "$(envcmd dl2)" || bad "dlock run -w v2: exit $?"
wait $k $e
read -r ek er ec es <<<"$(envfacts ec2)"
read -r dk dr dc ds <<<"$(envfacts dl2)"
[ "$ec" != nokey ] && [ "$er" -gt "$ec" ] && [ "$er" -le "$es" ] &&
    ok "etcdctl lock after a wait: ETCD_LOCK_REV $er, past its key's creation $ec (store at $es)" ||
    bad "etcdctl after a wait: REV $er, created $ec, store $es"
[ "$dc" != nokey ] && [ "$dr" -gt "$dc" ] && [ "$dr" -le "$ds" ] &&
    ok "dlock run after a wait: ETCD_LOCK_REV $dr, past its key's creation $dc, as etcdctl's (store at $ds)" ||
    bad "dlock after a wait: REV $dr, created $dc, store $ds"
# dlock's own layout has no such variables; hold's acquired event carries them
out=$("$DLOCK" --url "$D" run v3 -- sh -c 'env | grep ^ETCD_LOCK_' 2>&1)
[ -z "$out" ] && ok "dlock's own layout exports no ETCD_LOCK_*" || bad "own layout exported: $out"
"$DLOCK" --url "$U" hold --json v4 >"$TMP/v4.out" 2>"$TMP/v4.ev" & k=$!
until_file "$TMP/v4.out" && for _ in $(seq 100); do [ -s "$TMP/v4.out" ] && break; sleep 0.1; done
kill -TERM $k; wait $k 2>/dev/null
ev=$(grep '"acquired"' "$TMP/v4.ev")
python3 -c 'import json,re,sys; e=json.loads(sys.argv[1]); sys.exit(0 if re.fullmatch(r"v4/[0-9a-f]+", e["ETCD_LOCK_KEY"]) and int(e["ETCD_LOCK_REV"]) == e["token"] else 1)' "$ev" 2>/dev/null &&
    ok "hold --json: the acquired event carries ETCD_LOCK_KEY and ETCD_LOCK_REV: $ev" ||
    bad "hold --json acquired event: '$ev'"

# ---- bench and check take the layout ---------------------------------------------------
"$DLOCK" --url "$U" bench -P 2 -D 1 --warmup 0 --json >"$TMP/bench.json" 2>"$TMP/bench.err"
rc=$?
[ $rc = 0 ] && python3 -c 'import json,sys; sys.exit(0 if json.load(open(sys.argv[1]))["n"] > 0 else 1)' "$TMP/bench.json" &&
    ok "bench on layout=etcdctl: exit 0 (no violation), $(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["n"])' "$TMP/bench.json") sections" ||
    bad "bench on layout=etcdctl: exit $rc: $(head -3 "$TMP/bench.err") $(head -c 300 "$TMP/bench.json")"
check_json check "$U" -P 3 -D 3 --scenario kill
jcheck "$TMP/check.json" "check on layout=etcdctl: kill passes, the lock taken over" 'sc("kill")["verdict"] == "pass"'
finish
