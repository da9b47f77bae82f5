#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# Build the libFuzzer targets with clang and run each for SECONDS (default 20)
# on a scratch copy of its seed corpus, so that runs never write into fuzz/.
# Exits non-zero if any target crashes; the crashing input is left in
# build-fuzz/artifacts/.
#
# With FUZZ_SEED set (the test suite sets it), each target instead makes a
# fixed number of runs from that seed (SECONDS stays a cap), so that the gate
# tries much the same inputs every time (libFuzzer's choices also depend a
# little on timing, so not exactly the same); a new finding then comes from
# a change of the code, not from the dice. Without it, each run explores
# from a new random seed: use that to look for bugs.
set -euo pipefail

seconds=${1:-20}
case $seconds in
    ''|*[!0-9]*) echo "usage: $0 [SECONDS]" >&2; exit 64 ;;
esac

top=$(cd "$(dirname "$0")/.." && pwd)
build=$top/build-fuzz
# The memcached, ZooKeeper, claim and file targets need no library: the parsers are ours.
targets=(fuzz_url fuzz_name fuzz_memcached fuzz_zk fuzz_claim fuzz_file)
# The reply target needs hiredis (as the Redis backends do).
if pkg-config --exists hiredis 2>/dev/null; then targets+=(fuzz_reply); fi
# The etcd targets need libcurl and cJSON (as the backend does).
if pkg-config --exists libcurl libcjson 2>/dev/null; then targets+=(fuzz_etcd fuzz_http); fi

CC=clang cmake -S "$top" -B "$build" -DDLOCK_FUZZ=ON -DBUILD_TESTING=OFF \
    -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
# Only the fuzz targets: they compile the parsers themselves.
cmake --build "$build" --target "${targets[@]}" -j"$(nproc)"

mkdir -p "$build/artifacts"
status=0
for t in "${targets[@]}"; do
    corpus=$build/corpus/${t#fuzz_}
    rm -rf "$corpus"
    mkdir -p "$corpus"
    cp "$top/fuzz/corpus/${t#fuzz_}/." "$corpus/" -r
    fixed=()
    if [ -n "${FUZZ_SEED:-}" ]; then
        case $t in # about 10-15 s each here
        fuzz_url) runs=2000000 ;;
        fuzz_name) runs=5000000 ;;
        fuzz_file) runs=5000000 ;;
        fuzz_http) runs=600000 ;;
        fuzz_memcached) runs=300000 ;;
        *) runs=300000 ;;
        esac
        fixed=(-seed="$FUZZ_SEED" -runs="$runs")
        echo "== $t: $runs runs from seed $FUZZ_SEED (at most ${seconds}s)"
    else
        echo "== $t for ${seconds}s"
    fi
    if ! "$build/fuzz/$t" -max_total_time="$seconds" -max_len=5000 -timeout=10 "${fixed[@]}" \
        -artifact_prefix="$build/artifacts/$t-" -print_final_stats=1 "$corpus"; then
        echo "== $t FAILED (see $build/artifacts/)" >&2
        status=1
    fi
done
exit $status
