#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# zk_peers_test.sh — dlock beside the ZooKeeper lock clients people already
# run (issue 27), on a real server: Apache Curator 5.4 (?layout=curator:
# InterProcessMutex; ?layout=curator-rw: InterProcessReadWriteLock; a small
# Java program, tests/peers/CuratorLock.java, compiled here) and kazoo
# (?layout=kazoo: Lock, ReadLock; tests/peers/kazoo_lock.py). For each
# layout: the peer holds and dlock waits (-n conflicts, status shows the
# peer's holder), the peer's release hands the lock to the dlock waiter;
# dlock holds and the peer waits (its own try says busy), dlock's release
# hands the lock to the peer; a crowd of dlock and peer processes adds one
# to a counter file under the lock for a few seconds and loses no update;
# a holder killed with kill -9 on either side is taken over by a waiter on
# the other once its session ends. Shared locks as Curator's and kazoo's
# read/write locks; and dlock's own layout refuses a name that holds a
# Curator node. No timing is asserted. A peer whose client is missing is
# skipped, named (scripts/install-deps.sh peers installs them).
set -u
. "$(dirname "$0")/testlib.sh"
preamble
need_zk "$DLOCK"
PY=/usr/bin/python3
JARS=$(grep -v '^#' "$src/bench/peers/curator.jars" | sed 's|^|:/usr/share/java/|; s|$|.jar|' | tr -d '\n')
layouts=()
if command -v javac >/dev/null && [ -e /usr/share/java/curator-recipes.jar ]; then
    layouts+=(curator curator-rw)
else
    echo "# curator skipped: needs libcurator-recipes-java and a JDK (javac)"
fi
if "$PY" -c 'import kazoo' 2>/dev/null; then
    layouts+=(kazoo)
else
    echo "# kazoo skipped: needs python3-kazoo"
fi
[ ${#layouts[@]} -gt 0 ] || skip "neither Curator (with a JDK) nor kazoo is installed"
in_servers zk

TMP=$(mktemp -d "${TMPDIR:-/tmp}/dlock-zk-peers.XXXXXX")
pids=()
trap 'for p in "${pids[@]}"; do kill -9 "$p" 2>/dev/null; done; rm -rf "$TMP"' EXIT
W=$TMP # the scratch files of the layout under test
HP=${DLOCK_TEST_ZK#zk://}
HP=${HP%%\?*}
SESSION_MS=2000
if [ "${layouts[0]}" = curator ]; then
    javac -nowarn -d "$TMP" -cp "${JARS#:}" "$here/peers/CuratorLock.java" 2>"$TMP/javac.err" ||
        { bad "javac CuratorLock.java: $(head -5 "$TMP/javac.err")"; finish; }
fi

# wait_for FILE REGEX [SECS]: until a line of FILE matches (default 60 s).
wait_for() {
    local i
    for ((i = 0; i < ${3:-60} * 20; i++)); do
        grep -Eq "$2" "$1" 2>/dev/null && return 0
        sleep 0.05
    done
    return 1
}
# wait_file PATH: until it exists (60 s at most).
wait_file() {
    local i
    for ((i = 0; i < 1200; i++)); do
        [ -e "$1" ] && return 0
        sleep 0.05
    done
    return 1
}
# waiters NAME N: until dlock status says N waiters (60 s at most).
waiters() {
    local i
    for ((i = 0; i < 1200; i++)); do
        "$DLOCK" --url "$U" status "$1" 2>/dev/null | grep -Eq "^waiters: *$2\$" && return 0
        sleep 0.05
    done
    return 1
}

# peer KIND MODE ARGS...: the layout's own client on /locks/$NAME; KIND x
# (exclusive: Curator's mutex or write lock, kazoo's Lock), w (the same but
# kazoo's WriteLock: its Lock does not see readers) or r (reader).
peer() {
    local kind=$1
    shift
    case $L in
    curator) kind=mutex ;;
    curator-rw) [ "$kind" = r ] && kind=read || kind=write ;;
    kazoo) case $kind in r) kind=read ;; w) kind=write ;; *) kind=lock ;; esac ;;
    esac
    case $L in
    # exec: the background job's pid is the peer's own, for kill -9
    curator*) exec java -Xss512k -XX:+UseSerialGC -XX:TieredStopAtLevel=1 -cp "$TMP${JARS}" \
        CuratorLock "$HP" "$SESSION_MS" "/locks/$NAME" "$kind" "$@" ;;
    kazoo) exec "$PY" "$here/peers/kazoo_lock.py" "$HP" "$SESSION_MS" "/locks/$NAME" "$kind" "$@" ;;
    esac
}
# hold TAG KIND: the peer takes the lock in the background (released by
# `release TAG`); its pid in $TMP/TAG.pid, its output in $TMP/TAG.out.
hold() {
    mkfifo "$W/$1.in"
    exec {fd}<>"$W/$1.in" # kept open: the peer reads our line, never an end
    peer "$2" hold <"$W/$1.in" >"$W/$1.out" 2>"$W/$1.err" &
    echo $! >"$W/$1.pid"
    pids+=($!)
}
release() { echo go >"$W/$1.in"; }

for L in "${layouts[@]}"; do
    W=$TMP/$L
    mkdir -p "$W"
    U="zk://$HP/locks?session=$SESSION_MS&layout=$L"

    # ---- the peer holds, dlock waits; the peer's release lets dlock in
    NAME=$L-a
    hold a x
    if wait_for "$W/a.out" '^held$'; then
        out=$("$DLOCK" --url "$U" run -n "$NAME" -- echo RAN 2>"$W/a.n.err")
        rc=$?
        [ $rc = 1 ] && [ -z "$out" ] && ok "$L: the peer holds: dlock -n conflicts (exit 1)" ||
            bad "$L: the peer holds: dlock -n: exit $rc, '$out' $(cat "$W/a.n.err")"
        "$DLOCK" --url "$U" status "$NAME" >"$W/a.st" 2>&1
        case $L in curator*) want='^holder: +[0-9a-f.:]+$' ;; kazoo) want='^holder: +kazoo-test$' ;; esac
        grep -q '^held: *yes' "$W/a.st" && grep -Eq "$want" "$W/a.st" &&
            ok "$L: status shows the peer's holder" || bad "$L: status: $(cat "$W/a.st")"
        "$DLOCK" --url "$U" run -w 60 "$NAME" -- echo GOT >"$W/a.w.out" 2>"$W/a.w.err" &
        w=$!
        if waiters "$NAME" 1 && [ ! -s "$W/a.w.out" ]; then
            ok "$L: a dlock waiter queues behind the peer's holder"
        else
            bad "$L: the dlock waiter: $(cat "$W/a.w.out" "$W/a.w.err")"
        fi
        release a
        wait $w
        rc=$?
        [ $rc = 0 ] && grep -q GOT "$W/a.w.out" &&
            ok "$L: the peer's release hands the lock to the dlock waiter" ||
            bad "$L: after the peer's release: exit $rc: $(cat "$W/a.w.err")"
    else
        bad "$L: the peer did not take a free lock: $(tail -3 "$W/a.err")"
    fi
    wait "$(cat "$W/a.pid")"

    # ---- dlock holds, the peer waits; dlock's release lets the peer in
    NAME=$L-b
    "$DLOCK" --url "$U" run "$NAME" -- sh -c "touch $W/b.held; while [ ! -e $W/b.go ]; do sleep 0.05; done" \
        2>"$W/b.err" &
    d=$!
    pids+=($d)
    if wait_file "$W/b.held"; then
        out=$(peer x try 2>&1)
        [ "$out" = busy ] && ok "$L: dlock holds: the peer's try is refused" ||
            bad "$L: dlock holds: the peer's try: $out"
        hold b x
        if waiters "$NAME" 1 && ! grep -q held "$W/b.out"; then
            ok "$L: the peer queues behind dlock's holder"
        else
            bad "$L: the peer waiting: $(cat "$W/b.out" "$W/b.err")"
        fi
        touch "$W/b.go"
        wait $d
        wait_for "$W/b.out" '^held$' &&
            ok "$L: dlock's release hands the lock to the peer's waiter" ||
            bad "$L: the peer after dlock's release: $(cat "$W/b.out" "$W/b.err")"
        release b
        wait "$(cat "$W/b.pid")"
    else
        bad "$L: dlock did not take a free lock: $(cat "$W/b.err")"
        kill $d
    fi

    # ---- a crowd: 3 dlock processes, 2 peer processes of 2 clients each
    NAME=$L-crowd
    echo 0 >"$W/counter"
    secs=4
    for i in 1 2; do
        peer x count "$W/counter" $secs 2 >"$W/crowd.p$i" 2>"$W/crowd.p$i.err" &
        pids+=($!)
    done
    cpids=()
    for i in 1 2 3; do
        (
            n=0
            end=$(($(date +%s%N) + secs * 1000000000))
            while [ "$(date +%s%N)" -lt "$end" ]; do
                "$DLOCK" --url "$U" run "$NAME" -- sh -c 'read v <"$0"; echo $((v + 1)) >"$0"' \
                    "$W/counter" || exit 1
                n=$((n + 1))
            done
            echo "count $n"
        ) >"$W/crowd.d$i" 2>"$W/crowd.d$i.err" &
        cpids+=($!)
    done
    fine=1
    for p in "${cpids[@]}"; do wait "$p" || fine=0; done
    wait
    dl=0 pe=0
    for i in 1 2 3; do dl=$((dl + $(awk '/^count/ { print $2 }' "$W/crowd.d$i"))); done
    for i in 1 2; do pe=$((pe + $(awk '/^count/ { print $2 } END { if (!NR) print 0 }' "$W/crowd.p$i"))); done
    got=$(cat "$W/counter")
    if [ $fine = 1 ] && [ "$dl" -gt 0 ] && [ "$pe" -gt 0 ] && [ "$got" = $((dl + pe)) ]; then
        ok "$L: a crowd of 3 dlock and 2x2 peer clients: $dl + $pe increments, none lost"
    else
        bad "$L: crowd: counter $got, dlock $dl, peer $pe: $(cat "$W"/crowd.*err | tail -5)"
    fi

    # ---- holders killed with kill -9: the other side takes over after the session
    NAME=$L-kill
    hold k1 x
    if wait_for "$W/k1.out" '^held$'; then
        kill -9 "$(cat "$W/k1.pid")"
        "$DLOCK" --url "$U" run -w 60 "$NAME" -- echo GOT >"$W/k1.w" 2>&1
        rc=$?
        [ $rc = 0 ] && grep -q GOT "$W/k1.w" &&
            ok "$L: a dlock waiter takes over a peer holder killed with kill -9" ||
            bad "$L: after kill -9 of the peer: exit $rc: $(cat "$W/k1.w")"
    else
        bad "$L: the peer did not take a free lock: $(tail -3 "$W/k1.err")"
    fi
    "$DLOCK" --url "$U" run "$NAME" -- sh -c "touch $W/k2.held; sleep 120" 2>/dev/null &
    d=$!
    pids+=($d)
    wait_file "$W/k2.held"
    hold k2 x
    waiters "$NAME" 1
    kill -9 $d
    wait_for "$W/k2.out" '^held$' &&
        ok "$L: a peer waiter takes over a dlock holder killed with kill -9" ||
        bad "$L: after kill -9 of dlock: $(cat "$W/k2.out" "$W/k2.err")"
    release k2
    wait "$(cat "$W/k2.pid")"

    # ---- shared locks, where the layout has them
    case $L in
    curator) out=$("$DLOCK" --url "$U" run -n -s "$NAME" -- true 2>&1)
        rc=$?
        [ $rc != 0 ] && echo "$out" | grep -q 'shared locks only in another mode' &&
            ok "$L: a shared lock is refused (InterProcessMutex has none)" ||
            bad "$L: a shared lock: exit $rc: $out" ;;
    curator-rw | kazoo)
        NAME=$L-rw
        hold r1 r
        if wait_for "$W/r1.out" '^held$'; then
            out=$("$DLOCK" --url "$U" run -n -s "$NAME" -- echo RAN 2>&1)
            [ "$out" = RAN ] && ok "$L: a dlock reader joins the peer's reader" ||
                bad "$L: dlock reader beside the peer's: $out"
            "$DLOCK" --url "$U" run -n "$NAME" -- echo RAN >/dev/null 2>&1
            rc=$?
            [ $rc = 1 ] && ok "$L: a dlock writer is refused while the peer reads" ||
                bad "$L: dlock writer beside the peer's reader: exit $rc"
        else
            bad "$L: the peer's reader: $(tail -3 "$W/r1.err")"
        fi
        release r1
        wait "$(cat "$W/r1.pid")"
        "$DLOCK" --url "$U" run -s "$NAME" -- sh -c "touch $W/r2.held; while [ ! -e $W/r2.go ]; do sleep 0.05; done" \
            2>"$W/r2.err" &
        d=$!
        pids+=($d)
        wait_file "$W/r2.held"
        out=$(peer r try 2>&1)
        out2=$(peer w try 2>&1)
        [ "$out" = held ] && [ "$out2" = busy ] &&
            ok "$L: while dlock reads, the peer's reader enters and its writer is refused" ||
            bad "$L: while dlock reads: the peer's reader $out, writer $out2"
        touch "$W/r2.go"
        wait $d ;;
    esac
done

# ---- dlock's own layout: a Curator node where dlock keeps its queue is
# refused, named, with the layout that would speak it.
if [ "${layouts[0]}" = curator ]; then
    L=curator NAME=dlock/mixed W=$TMP
    hold m x
    if wait_for "$W/m.out" '^held$'; then
        "$DLOCK" --url "zk://$HP/locks?session=$SESSION_MS" run -n mixed -- echo RAN >"$W/m.run" 2>&1
        rc=$?
        [ $rc = 64 ] && grep -q 'InterProcessMutex.*layout=curator' "$W/m.run" && ! grep -q RAN "$W/m.run" &&
            ok "dlock's layout refuses a name holding a Curator node, naming layout=curator" ||
            bad "dlock's layout beside a Curator node: exit $rc: $(cat "$W/m.run")"
    else
        bad "the peer on /locks/dlock/mixed: $(tail -3 "$W/m.err")"
    fi
    release m
    wait "$(cat "$W/m.pid")"
fi
finish
