#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# curator_handover.sh — the hand-over between Apache Curator's
# InterProcessMutex and dlock run on one ZooKeeper lock (layout=curator,
# issue 27), for each pair of sides, N times each, in one run: the median
# and p90 per pair. The holder, once the waiter's node is queued behind it,
# notes the time and releases; the waiter notes the time once it holds.
# dlock's times are its command's (the holder's end, the waiter's start:
# they include dlock's release after its command exits and its command's
# start), Curator's are taken in its JVM right before release() and right
# after acquire() returned. Inside tests/servers.sh's zk, durable:
#
#   DLOCK=build/dlock DLOCK_SERVERS_DURABLE=1 bash tests/servers.sh run zk -- \
#       bench/peers/curator_handover.sh [N]
#
# HO_SIDES: the sides (default "curator dlock"). Needs a JDK (javac) and
# libcurator-recipes-java (scripts/install-deps.sh peers).
set -u
here=$(cd "$(dirname "$0")" && pwd)
N=${1:-15}
D=${DLOCK:?set DLOCK to the dlock binary}
HP=${DLOCK_TEST_ZK:?run inside tests/servers.sh run zk}
HP=${HP#zk://}
HP=${HP%%\?*}
SESSION_MS=4000
U="zk://$HP/locks?session=$SESSION_MS&layout=curator"
JARS=$(grep -v '^#' "$here/curator.jars" | sed 's|^|:/usr/share/java/|; s|$|.jar|' | tr -d '\n')
T=$(mktemp -d)
trap 'rm -rf "$T"' EXIT
javac -nowarn -d "$T" -cp "${JARS#:}" "$here/CuratorHandover.java" || exit 1
curator() { # ARGS of CuratorHandover after the lock path
    java -Xss512k -XX:+UseSerialGC -XX:TieredStopAtLevel=1 -cp "$T$JARS" CuratorHandover \
        "$HP" "$SESSION_MS" "/locks/$name" "$@"
}
for h in ${HO_SIDES:-curator dlock}; do
    for w in ${HO_SIDES:-curator dlock}; do
        : >"$T/$h-$w"
        for i in $(seq "$N"); do
            name=ho-$h-$w-$i-$$
            rm -f "$T/in" "$T/end" "$T/got"
            if [ "$h" = dlock ]; then
                # (its command waits until dlock status counts the waiter)
                "$D" --url "$U" run -w 60 "$name" -- sh -c "touch $T/in; until '$D' --url '$U' status $name 2>/dev/null | grep -Eq '^waiters: *1\$'; do sleep 0.005; done; date +%s%N >$T/end" & hp=$!
            else
                curator hold "$T/in" "$T/end" & hp=$!
            fi
            while [ ! -e "$T/in" ]; do sleep 0.02; done
            if [ "$w" = dlock ]; then
                "$D" --url "$U" run -w 60 "$name" -- sh -c "date +%s%N >$T/got" & wp=$!
            else
                curator wait "$T/got" & wp=$!
            fi
            wait $hp $wp
            echo $((($(cat "$T/got") - $(cat "$T/end")) / 1000)) >>"$T/$h-$w"
        done
        sort -n "$T/$h-$w" | awk -v l="$h -> $w" -f "$here/median_p90.awk"
    done
done
