#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# The whole test suite, as CI runs it: the ordinary build, then clang builds
# with ASan+UBSan and with TSan, then valgrind memcheck, then the fuzzers for
# a short while. Each step is a CTest run over the same tests, but one: the
# Debian packages, built, installed and used (tests/package-install.sh).
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install-deps.sh peers # with the peer clients peers_bench_test runs

jobs=$(nproc)
# Tests at a time: one and a half per core. Most tests wait on servers,
# timers and sleeps, not on the CPU (a whole run at two at a time on two
# cores used 43 % of them: 47 min of CPU in 54.5 min), and each starts its
# own servers on its own ports; every test holds beside two CPU hogs, a
# heavier load than a third test. valgrind's step, bound by the CPU, keeps
# one per core.
test_jobs=$((jobs + (jobs + 1) / 2))
step() { echo; echo "=== $* ==="; }
suite() { # build-dir tests-at-a-time label-args cmake-args...
  local dir=$1 tj=$2 labels=$3; shift 3
  cmake -S . -B "$dir" "$@" >/dev/null
  cmake --build "$dir" -j"$jobs" >/dev/null
  (cd "$dir" && ctest --output-on-failure --timeout 900 -j"$tj" $labels)
}

step "gcc, -Werror, full suite"
suite build "$test_jobs" "" -DCMAKE_BUILD_TYPE=RelWithDebInfo
# The installed library is the public API alone: it exports dlock_* only,
# and carries no harness code (dlock bench and dlock check's operations
# live in the static library dlock_harness).
if nm -D --defined-only build/libdlock.so | awk '{print $3}' | grep -v '^dlock_' >&2 ||
   nm build/libdlock.so | grep -E ' dh_' >&2; then
  echo "libdlock.so exports more than dlock_*, or carries harness code" >&2; exit 1
fi
# -O3 warns about things -O2 does not (format truncation): it must build too.
cmake -S . -B build-release -DCMAKE_BUILD_TYPE=Release >/dev/null
cmake --build build-release -j"$jobs" >/dev/null
# A build without a client library states the same facts of every backend
# (only "available" and "missing" differ): the descriptors are one.
cmake -S . -B build-nolibs -DDLOCK_NO_CLIENT_LIBS=ON -DBUILD_TESTING=OFF >/dev/null
cmake --build build-nolibs -j"$jobs" >/dev/null
facts() { "$1" backends --json | python3 -c 'import json,sys
d=json.load(sys.stdin)
for b in d:
    b.pop("available", None); b.pop("missing", None)
print(json.dumps(d, indent=1))'; }
diff <(facts build-nolibs/dlock) <(facts build/dlock) >&2 ||
  { echo "a build without client libraries states other backend facts" >&2; exit 1; }

if [ -z "${DLOCK_QUICK:-}" ]; then
  step "Debian packages: build, lintian, install, build the README example against them, remove"
  t0=$SECONDS
  tests/package-install.sh
  echo "(Debian packages: $((SECONDS - t0)) s)"

  step "clang, ASan+UBSan"
  # Every test but the fault-injection and benchmark harness (dlock check and
  # bench: minutes of waiting on servers, and the gcc step ran them) and the
  # peers' clients. TSan keeps the harness: it kills, pauses and partitions
  # servers under the library's threads, where races would show.
  ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 \
    suite build-asan "$test_jobs" "-LE harness|peers" -DCMAKE_C_COMPILER=clang -DDLOCK_SANITIZE=address -DCMAKE_BUILD_TYPE=Debug

  step "clang, TSan"
  # Tests fork workers that start threads (lease renewal): TSan can follow.
  TSAN_OPTIONS=halt_on_error=1:die_after_fork=0:suppressions=$PWD/tests/tsan.supp \
    suite build-tsan "$test_jobs" "-LE peers" -DCMAKE_C_COMPILER=clang -DDLOCK_SANITIZE=thread -DCMAKE_BUILD_TYPE=Debug

  step "valgrind memcheck"
  suite build-memcheck "$jobs" "-L memcheck" -DCMAKE_BUILD_TYPE=Debug -DDLOCK_MEMCHECK=ON

  step "fuzzing the parsers (URLs, names, Redis, ZooKeeper, etcd and memcached replies, claims, lock files)"
  # A fixed seed and run count: much the same inputs on every run of the
  # suite (scripts/fuzz.sh alone explores from random seeds).
  FUZZ_SEED=${FUZZ_SEED:-1} scripts/fuzz.sh "${FUZZ_SECONDS:-120}"
fi
echo
# One closing line over the steps above (each a CTest, package or fuzz run that stops
# this script on its first failure).
if [ -z "${DLOCK_QUICK:-}" ]; then echo "steps: 6 passed, 0 failed"; else echo "steps: 1 passed, 0 failed"; fi
