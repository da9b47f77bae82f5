#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# interop_redis_test.sh — dlock's key= layout against the real peers on a
# real redis-server: redis-py's Lock (python3-redis) and node-redlock
# (bench/peers/node, scripts/install-deps.sh peers). For each peer: the peer
# holds and dlock waits (and -n conflicts; status names the peer), dlock
# holds and the peer waits, a release on either side hands the lock to the
# waiter on the other, a holder killed with kill -9 is taken over by the
# other side once its TTL ends; a mixed crowd of dlock and redis-py
# processes incrementing one counter in a file loses no update; list and
# break --force see a peer's holder; a key holding what the layout does not
# recognise is refused in both layouts; bench and check take key= URLs.
# No timing is asserted: waits are bounded only so that a hang shows.
# Skipped (77) without redis-server or redis-py; node-redlock's part is
# skipped, saying so, without node or bench/peers/node/node_modules.
set -u
. "$(dirname "$0")/testlib.sh"
preamble
need_redis "$DLOCK"
PY=/usr/bin/python3
[ -x $PY ] || PY=python3
"$PY" -c 'import redis' 2>/dev/null || skip "redis-py not installed (python3-redis)"
in_servers redis

TMP=$(mktemp -d "${TMPDIR:-/tmp}/dlock-interop-redis.XXXXXX")
BG=()
cleanup() {
    local p
    exec 2>/dev/null
    for p in "${BG[@]}"; do kill -9 "$p" 2>/dev/null; done
    rm -rf "$TMP"
}
trap cleanup EXIT

BASE=$DLOCK_TEST_REDIS
U="$BASE?key=lock:{name}"
PORT=${BASE##*:}
PEER="$PY $here/redis_py_peer.py"
NODE_DIR=${DLOCK_PEERS_NODE_DIR:-$src/bench/peers/node}
JS="$here/redlock_js_peer.js"
dl() { "$DLOCK" --url "$U" "$@"; } # (not in the background: $! would be a subshell)

# until_line FILE PATTERN SECS: wait (bounded, not timed) for a line.
until_line() {
    local i
    for ((i = 0; i < $3 * 20; i++)); do
        grep -q "$2" "$1" 2>/dev/null && return 0
        sleep 0.05
    done
    return 1
}

# peer_hold KIND NAME TTL_S: a peer holds lock:NAME until its stdin (fd 7)
# closes; its output in $TMP/NAME.peer.
peer_hold() {
    local kind=$1 name=$2 ttl=$3
    rm -f "$TMP/$name.fifo"
    mkfifo "$TMP/$name.fifo"
    if [ "$kind" = redis-py ]; then
        $PEER "$BASE" "lock:$name" hold "$ttl" <"$TMP/$name.fifo" >"$TMP/$name.peer" 2>&1 &
    else
        node "$JS" "$NODE_DIR" "$BASE" "lock:$name" hold "$ttl" <"$TMP/$name.fifo" \
            >"$TMP/$name.peer" 2>&1 &
    fi
    PEER_PID=$!
    BG+=("$PEER_PID")
    exec 7>"$TMP/$name.fifo"
    until_line "$TMP/$name.peer" '^held' 20
}

peer_cmd() { # KIND NAME MODE TTL_S
    if [ "$1" = redis-py ]; then $PEER "$BASE" "lock:$2" "$3" "$4"; else
        node "$JS" "$NODE_DIR" "$BASE" "lock:$2" "$3" "$4"
    fi
}

suite() { # KIND: the peer-by-peer checks
    local k=$1 n rc
    # The peer holds: dlock -n conflicts, status names the peer, a dlock
    # waiter does not run until the peer releases, then does.
    n="$k-a"
    if peer_hold "$k" "$n" 30; then ok "$k holds lock:$n"; else bad "$k did not take lock:$n: $(cat "$TMP/$n.peer")"; fi
    dl run -n "$n" -- true 2>"$TMP/err"
    rc=$?
    [ $rc -eq 1 ] && ok "$k holds: dlock run -n exits 1" || bad "$k holds: dlock run -n exited $rc: $(cat "$TMP/err")"
    dl status "$n" >"$TMP/status" 2>&1
    grep -q 'held: *yes' "$TMP/status" && grep -q 'another library' "$TMP/status" &&
        ok "$k holds: status says held by a client of another library" ||
        bad "$k holds: status: $(cat "$TMP/status")"
    "$DLOCK" --url "$U" run -w 30 "$n" -- sh -c "echo ran >'$TMP/$n.ran'" 2>"$TMP/$n.werr" 7>&- &
    local w=$!
    BG+=("$w")
    sleep 0.3
    [ ! -e "$TMP/$n.ran" ] && ok "$k holds: the dlock waiter waits" || bad "$k holds: the dlock waiter ran while $k held"
    exec 7>&-
    until_line "$TMP/$n.peer" '^released' 20 && ok "$k released its own lock" || bad "$k release: $(cat "$TMP/$n.peer")"
    wait_bounded "$w" 30 "dlock waiter on $n"
    rc=$?
    [ $rc -eq 0 ] && [ -e "$TMP/$n.ran" ] && ok "$k releases: the dlock waiter gets the lock" ||
        bad "$k releases: dlock waiter exit $rc: $(cat "$TMP/$n.werr")"

    # dlock holds: the peer's try fails, its waiter waits, and gets the
    # lock when dlock releases.
    n="$k-b"
    "$DLOCK" --url "$U" hold "$n" >"$TMP/$n.hold" 2>&1 &
    local h=$!
    BG+=("$h")
    until_line "$TMP/$n.hold" '^[0-9]' 20 || bad "dlock hold $n: $(cat "$TMP/$n.hold")"
    peer_cmd "$k" "$n" try 30 >/dev/null 2>"$TMP/err"
    rc=$?
    [ $rc -eq 1 ] && ok "dlock holds: $k's try fails" || bad "dlock holds: $k's try exited $rc: $(cat "$TMP/err")"
    peer_cmd "$k" "$n" wait 30 >"$TMP/$n.peer" 2>&1 7>&- &
    w=$!
    BG+=("$w")
    sleep 0.3
    ! grep -q '^got' "$TMP/$n.peer" && ok "dlock holds: $k's waiter waits" || bad "dlock holds: $k's waiter got the lock"
    kill -TERM "$h"
    wait_bounded "$h" 20 "dlock hold $n"
    wait_bounded "$w" 30 "$k waiter on $n"
    rc=$?
    [ $rc -eq 0 ] && grep -q '^got' "$TMP/$n.peer" && ok "dlock releases: $k's waiter gets the lock" ||
        bad "dlock releases: $k's waiter exit $rc: $(cat "$TMP/$n.peer")"

    # A peer holder killed with kill -9 is taken over once its TTL ends.
    n="$k-c"
    peer_hold "$k" "$n" 1 || bad "$k did not take lock:$n"
    kill -9 "$PEER_PID"
    wait "$PEER_PID" 2>/dev/null
    exec 7>&-
    dl run -w 30 "$n" -- true 2>"$TMP/err"
    rc=$?
    [ $rc -eq 0 ] && ok "$k holder killed -9: dlock takes over after its TTL" || bad "$k killed: dlock exited $rc: $(cat "$TMP/err")"

    # And the other way round: dlock killed -9 (its guardian ends the
    # command), the peer's waiter takes over after dlock's TTL.
    n="$k-d"
    "$DLOCK" --url "$U" run -t 1 "$n" -- sleep 60 2>/dev/null &
    h=$!
    BG+=("$h")
    for ((rc = 0; rc < 100; rc++)); do dl status "$n" 2>/dev/null | grep -q 'held: *yes' && break; sleep 0.05; done
    kill -9 "$h"
    wait "$h" 2>/dev/null
    peer_cmd "$k" "$n" wait 30 >"$TMP/$n.peer" 2>&1
    rc=$?
    [ $rc -eq 0 ] && grep -q '^got' "$TMP/$n.peer" && ok "dlock killed -9: $k takes over after the TTL" ||
        bad "dlock killed: $k waiter exit $rc: $(cat "$TMP/$n.peer")"
}

suite redis-py
if command -v node >/dev/null && [ -d "$NODE_DIR/node_modules/redlock" ]; then
    suite node-redlock
else
    echo "# node-redlock skipped: no node or no $NODE_DIR/node_modules (scripts/install-deps.sh peers)"
fi

# list and break --force see a peer's holder; the peer finds its lock gone.
peer_hold redis-py brk 30 || bad "redis-py did not take lock:brk"
dl list >"$TMP/list" 2>&1
grep -qx brk "$TMP/list" && grep -qx redis-py-a "$TMP/list" &&
    ok "list: a peer's held lock and a name dlock took" || bad "list: $(cat "$TMP/list")"
dl break --force brk >"$TMP/out" 2>&1
rc=$?
[ $rc -eq 0 ] && grep -q 'another library' "$TMP/out" && ok "break --force deletes a peer's lock" ||
    bad "break exit $rc: $(cat "$TMP/out")"
exec 7>&-
until_line "$TMP/brk.peer" '^lost' 20 && ok "the broken peer's release finds the lock gone" ||
    bad "broken peer: $(cat "$TMP/brk.peer")"

# A mixed crowd: 3 dlock and 3 redis-py processes increment one counter
# in a file for 3 s; not one update is lost.
echo 0 >"$TMP/counter"
for i in 1 2 3; do
    (
        n=0
        end=$(($(date +%s) + 3))
        while [ "$(date +%s)" -lt $end ]; do
            dl run -w 60 crowd -- sh -c "v=\$(cat '$TMP/counter'); sleep 0.001; echo \$((v + 1)) >'$TMP/counter'" ||
                exit 1
            n=$((n + 1))
        done
        echo $n >"$TMP/dl$i.n"
    ) &
    BG+=("$!")
    $PEER "$BASE" lock:crowd count 30 "$TMP/counter" 3 >"$TMP/py$i.n" 2>&1 &
    BG+=("$!")
done
for p in "${BG[@]: -6}"; do wait_bounded "$p" 60 "crowd member $p" || bad "crowd member $p failed"; done
total=0
for f in "$TMP"/dl?.n "$TMP"/py?.n; do total=$((total + $(head -c 20 "$f" | tr -cd 0-9))); done
final=$(cat "$TMP/counter")
dln=$(cat "$TMP"/dl?.n | awk '{ s += $1 } END { print s + 0 }')
pyn=$(cat "$TMP"/py?.n | awk '{ s += $1 } END { print s + 0 }')
[ "$final" = "$total" ] && [ "$dln" -gt 0 ] && [ "$pyn" -gt 0 ] &&
    ok "mixed crowd: $dln dlock and $pyn redis-py sections, counter $final: no update lost" ||
    bad "mixed crowd: counter $final, sections $total (dlock $dln, redis-py $pyn)"

# Mixed by mistake. dlock's own layout refuses a lock key it did not
# write, naming what is there and key=; key= refuses a key not a string.
redis-cli -p "$PORT" set 'dlock:{mine}:lock' a-peer-token >/dev/null
"$DLOCK" --url "$BASE" run -w 5 mine -- true 2>"$TMP/err"
rc=$?
[ $rc -eq 64 ] && grep -q 'holds a string that dlock did not write' "$TMP/err" && grep -q 'key=' "$TMP/err" &&
    ok "own layout: a foreign string at dlock's key is refused, suggesting key=" || bad "own layout, string: exit $rc: $(cat "$TMP/err")"
redis-cli -p "$PORT" hset 'dlock:{mine2}:lock' f v >/dev/null
"$DLOCK" --url "$BASE" status mine2 >/dev/null 2>"$TMP/err"
rc=$?
[ $rc -ne 0 ] && grep -q 'holds a hash' "$TMP/err" && ok "own layout: status of a hash at dlock's key names it" ||
    bad "own layout, hash: exit $rc: $(cat "$TMP/err")"
redis-cli -p "$PORT" rpush lock:alist x >/dev/null
dl run -n alist -- true 2>"$TMP/err"
rc=$?
[ $rc -eq 64 ] && grep -q 'lock:alist holds a list' "$TMP/err" && ok "key=: a list at the key is refused, named" ||
    bad "key=, list: exit $rc: $(cat "$TMP/err")"

# Templates: exactly one {name}; one-line errors; what the layout lacks.
for t in 'lock:' 'a{name}b{name}' 'x{name}/dlock-token'; do
    "$DLOCK" --url "$BASE?key=$t" run -n t -- true 2>"$TMP/err"
    rc=$?
    [ $rc -eq 64 ] && [ "$(wc -l <"$TMP/err")" -eq 1 ] && ok "key=$t refused (one line)" ||
        bad "key=$t: exit $rc: $(cat "$TMP/err")"
done
dl run -s -n shared -- true 2>"$TMP/err"
[ $? -ne 0 ] && grep -q 'another mode' "$TMP/err" && ok "key=: shared locks refused (ENOTSUP)" || bad "key= shared: $(cat "$TMP/err")"
dl run --fair -n fair -- true 2>"$TMP/err"
[ $? -ne 0 ] && grep -q 'no FIFO' "$TMP/err" && ok "key=: --fair refused with the reason" || bad "key= fair: $(cat "$TMP/err")"
"$DLOCK" backends | grep -q 'key=' && ok "dlock backends says what key= tokens mean" || bad "dlock backends says nothing of key="

# bench and check take key= URLs.
dl bench -P 3 -D 0.5 --warmup 0.2 --json >"$TMP/bench.json" 2>"$TMP/bench.err"
rc=$?
if [ $rc -eq 0 ]; then
    jcheck "$TMP/bench.json" "bench on a key= URL: sections, no violations" "d['n'] > 0 and d['violations'] == 0"
else
    bad "bench on key=: exit $rc: $(head -3 "$TMP/bench.err")"
fi
check_json check "$U" --scenario none --scenario kill -P 3 -D 2 --ttl 2
jcheck "$TMP/check.json" "check on a key= URL: none and kill pass" \
    "sc('none')['verdict'] == 'pass' and sc('kill')['verdict'] == 'pass'"

finish
