#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# The main job, on the embedded backend (no server needed): several processes
# increment one counter file under `dlock run`, each increment a read, a short
# pause and a write. Without the lock, updates get lost; with it, the count
# comes out exact.
set -euo pipefail
cd "$(dirname "$0")/.."
# The embedded backend needs no server and no client library: only a
# compiler, cmake, make and pkg-config (scripts/test.sh installs the rest).
scripts/install-deps.sh build
cmake -S . -B build-demo -DCMAKE_BUILD_TYPE=RelWithDebInfo -DDLOCK_NO_CLIENT_LIBS=ON \
  -DBUILD_TESTING=OFF >/dev/null
cmake --build build-demo -j"${JOBS:-$(nproc)}" >/dev/null

DLOCK=build-demo/dlock
procs=${PROCS:-6}
runs=${RUNS:-50}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
url="file://$work/locks"
echo 0 >"$work/counter"

increment='v=$(cat "$1"); sleep 0.001; echo $((v + 1)) >"$1"'
start=$(date +%s.%N)
for p in $(seq "$procs"); do
  (
    for _ in $(seq "$runs"); do
      "$DLOCK" --url "$url" run counter -- sh -c "$increment" sh "$work/counter"
    done
  ) &
done
wait
end=$(date +%s.%N)

want=$((procs * runs))
got=$(cat "$work/counter")
secs=$(awk -v a="$start" -v b="$end" 'BEGIN { printf "%.2f", b - a }')
echo "dlock demo: $procs processes x $runs locked increments in ${secs}s: counter = $got (expected $want)"

# The same work without the lock, to show what the lock prevents.
echo 0 >"$work/counter"
for p in $(seq "$procs"); do
  ( for _ in $(seq "$runs"); do sh -c "$increment" sh "$work/counter"; done ) &
done
wait
echo "without the lock:                             counter = $(cat "$work/counter") (updates lost)"
[ "$got" -eq "$want" ]
