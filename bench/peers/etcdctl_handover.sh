#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# etcdctl_handover.sh — the hand-over between etcdctl lock and dlock run on
# one lock (layout=etcdctl, issue 27): from the end of the holder's command
# to the start of the waiter's, for each pair of sides, N times each; the
# median and p90 per pair. Inside tests/servers.sh's etcd:
#
#   DLOCK=build/dlock bash tests/servers.sh run etcd -- bench/peers/etcdctl_handover.sh [N]
#
# HO_URL: another URL for dlock (default DLOCK_TEST_ETCD_ETCDCTL; with
# DLOCK_TEST_ETCD and HO_SIDES=dlock, dlock's own layout); HO_SIDES: the
# sides (default "etcdctl dlock").
set -u
here=$(cd "$(dirname "$0")" && pwd)
N=${1:-15}
D=${DLOCK:?set DLOCK to the dlock binary}
U=${HO_URL:-$DLOCK_TEST_ETCD_ETCDCTL}
port=$(cat "$DLOCK_TEST_SERVERS/etcd.port")
export ETCDCTL_API=3
T=$(mktemp -d)
trap 'rm -rf "$T"' EXIT
take() { # SIDE NAME CMD
    if [ "$1" = dlock ]; then
        "$D" --url "$U" run -w 30 "$2" -- sh -c "$3"
    else
        etcdctl --endpoints "http://127.0.0.1:$port" lock "$2" -- sh -c "$3" >/dev/null
    fi
}
for h in ${HO_SIDES:-etcdctl dlock}; do
    for w in ${HO_SIDES:-etcdctl dlock}; do
        : >"$T/$h-$w"
        for i in $(seq "$N"); do
            n=ho-$h-$w-$i-$$
            rm -f "$T/in" "$T/end" "$T/got"
            # the holder's command lasts 0.4 s: the waiter is queued by then
            take "$h" "$n" "touch $T/in; sleep 0.4; date +%s%N >$T/end" & hp=$!
            while [ ! -e "$T/in" ]; do sleep 0.02; done
            take "$w" "$n" "date +%s%N >$T/got" & wp=$!
            wait $hp $wp
            echo $((($(cat "$T/got") - $(cat "$T/end")) / 1000)) >>"$T/$h-$w"
        done
        sort -n "$T/$h-$w" | awk -v l="$h -> $w" -f "$here/median_p90.awk"
    done
done
