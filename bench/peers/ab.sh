#!/bin/bash
# SPDX-License-Identifier: MIT
# ab.sh — two or more dlock builds (or one build under several settings)
# against one peer client, interleaved in one run on the same server: the
# A/B comparison behind a change's figures (issue 24). Rows: the
# uncontended cycle (P=1) and 8 waiters holding 100 us (P=8), as
# bench/matrix.sh's uncontended and contended8; one line per run and
# client with the three figures bench/peers/table.py compares.
#
#   tests/servers.sh run KIND -- bench/peers/ab.sh URLVAR PEER[,PEER...] 'LABEL=CMD;LABEL=CMD...' [REPS]
#
# URLVAR: the variable tests/servers.sh exports (DLOCK_TEST_POSTGRES...);
# PEER: peers of bench/peers/peer_bench.py (psycopg2, pymysql, tooz,
# dlock-py: the Python package, DLOCK_PY_PATH=its pip --target dir...),
# each line labelled with its peer's name; CMDS may be '' (peers only); each
# CMD runs as `CMD --url URL bench ...` (a dlock binary, or `env VAR=V
# path/dlock`); words after ` :: ` in a CMD are more bench options, e.g.
# 'nofair=build/dlock :: --no-fair'. -D seconds per run from $D (default 3); $AB_P the rows'
# waiter counts (default "1 8"); $AB_CPUS pins every client and peer there
# (taskset -c: with the server pinned elsewhere, every round trip crosses
# CPUs, steadier than the scheduler's placement). Example, a durable
# MariaDB, the installed dlock against this tree's:
#
#   DLOCK_SERVERS_DURABLE=1 tests/servers.sh run mariadb -- \
#     bench/peers/ab.sh DLOCK_TEST_MYSQL pymysql 'old=/usr/bin/dlock;new=build/dlock' 3
set -u
here=$(cd "$(dirname "$0")" && pwd)
if [ $# -lt 3 ]; then
    sed -n '2,25p' "$0" | sed 's/^# \{0,1\}//' >&2
    exit 64
fi
url=${!1:-}
IFS=, read -ra peers <<<"$2"
reps=${4:-2}
D=${D:-3}
[ -n "$url" ] || { echo "ab.sh: \$$1 is empty (run it inside tests/servers.sh run)" >&2; exit 64; }
py=${DLOCK_PEERS_PYTHON:-/usr/bin/python3}
err=$(mktemp) || exit 73
trap 'rm -f "$err"' EXIT
one() { # LABEL P CMD...: one run, one line
    local label=$1 P=$2 H=0 line
    shift 2
    [ "$P" = 8 ] && H=100
    line=$(${pin[@]+"${pin[@]}"} "$@" -P "$P" -H "$H" -D "$D" --json 2>"$err" | tail -1)
    "$py" -c '
import json, sys
label, P, line = sys.argv[1:4]
try:
    d = json.loads(line)
except ValueError:
    print("%-10s P=%s failed: %s" % (label, P, open(sys.argv[4]).read().strip()[:300]))
    sys.exit(0)
print("%-10s P=%s cycle_p50_us=%8s ops_per_s=%8s handover_p50_us=%8s violations=%s"
      % (label, P, d.get("cycle_p50_us"), d.get("ops_per_s"), d.get("handover_p50_us"),
         d.get("violations")))
' "$label" "$P" "$line" "$err"
}
pin=()
[ -n "${AB_CPUS:-}" ] && pin=(taskset -c "$AB_CPUS")
IFS=';' read -ra clients <<<"$3"
for _ in $(seq "$reps"); do
    for P in ${AB_P:-1 8}; do
        for peer in "${peers[@]}"; do
            one "$peer" "$P" "$py" "$here/peer_bench.py" --peer "$peer" --url "$url"
        done
        for c in "${clients[@]}"; do
            cmd=${c#*=} opts=
            if [[ $cmd == *' :: '* ]]; then
                opts=${cmd#* :: }
                cmd=${cmd%% :: *}
            fi
            # shellcheck disable=SC2086
            one "${c%%=*}" "$P" $cmd --url "$url" bench -K 1 $opts
        done
    done
done
