#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# python_test.sh — the Python package (python/, issue 29): built from a copy
# of python/ against this build's libdlock_static.a into a scratch directory
# (pip --no-build-isolation --target, offline, no root; setup.py build_ext
# when pip is missing), then python/tests/ run by pytest against the real
# servers of tests/servers.sh: one pytest parameter per backend URL (file
# always; DLOCK_PY_TEST_KINDS, default the kinds of tests/targets.list's
# `ci` rows, the servers started here, every row whose URL they export a
# label; a kind whose server or backend is missing here is left out,
# named). About a minute and a half. Exits 77 (skipped) without Python's headers,
# setuptools or pytest (scripts/install-deps.sh installs them). Then the
# package's bench peer (bench/peers/peer_bench.py --peer dlock-py) for a
# moment.
# Needs $DLOCK (the built CLI: its directory is the build directory).
set -u
. "$(dirname "$0")/testlib.sh"
preamble
export DLOCK
build=${DLOCK_BUILD_DIR:-$(cd "$(dirname "$DLOCK")" && pwd)}
PY=${DLOCK_PYTHON:-}
if [ -z "$PY" ]; then
    if [ -x /usr/bin/python3 ]; then PY=/usr/bin/python3; else PY=python3; fi
fi

inc=$("$PY" -c 'import sysconfig; print(sysconfig.get_paths()["include"])' 2>/dev/null)
if [ ! -e "$inc/Python.h" ]; then
    skip "no Python.h for $PY (python3-dev)"
fi
if ! "$PY" -c 'import setuptools, pytest' 2>/dev/null; then
    skip "$PY lacks setuptools or pytest (python3-setuptools, python3-pytest)"
fi
if [ ! -e "$build/libdlock_static.a" ]; then
    skip "no $build/libdlock_static.a (set DLOCK_BUILD_DIR)"
fi

# A sanitizer build (scripts/test.sh): ASan runs, its runtime preloaded into
# Python only; a TSan runtime cannot be loaded into an uninstrumented Python.
sanitize=$(sed -n 's/^DLOCK_SANITIZE:[A-Z]*=//p' "$build/CMakeCache.txt" 2>/dev/null)
case $sanitize in
"") ;;
address)
    asanrt=$(clang -print-file-name=libclang_rt.asan-x86_64.so 2>/dev/null)
    if [ ! -e "$asanrt" ]; then
        skip "ASan build, but no clang ASan runtime to preload"
    fi ;;
*) skip "a $sanitize build: the extension cannot be loaded into Python that way" ;;
esac

if [ -z "${DLOCK_TEST_SERVERS:-}" ]; then
    kinds=()
    # the kinds of the ci rows of tests/targets.list, each once
    ci_kinds=$(awk '!/^#/ && NF >= 5 && $5 == "ci" && $3 != "-" {
        n = split($3, k, ","); for (i = 1; i <= n; i++) if (!seen[k[i]]++) printf "%s ", k[i] }' \
        "$here/targets.list")
    for k in ${DLOCK_PY_TEST_KINDS-$ci_kinds}; do
        case $k in
        redis | cluster) command -v redis-server >/dev/null && be=redis ;;
        redlock) command -v redis-server >/dev/null && be=redlock ;;
        sentinel) command -v redis-sentinel >/dev/null && be=redis ;;
        zk) [ -e /usr/share/java/zookeeper.jar ] && command -v java >/dev/null && be=zk ;;
        etcd | etcds) command -v etcd >/dev/null && be=etcd ;;
        postgres) [ -x /usr/lib/postgresql/15/bin/postgres ] && be=postgres ;;
        mariadb) command -v mariadbd >/dev/null && be=mysql ;;
        memcached) command -v memcached >/dev/null && be=memcached ;;
        *) be= ;;
        esac
        # grep reads everything (no -q): see testlib.sh's need_redis
        if [ -n "${be:-}" ] && "$DLOCK" backends | grep "^$be .* yes$" >/dev/null; then
            kinds+=("$k")
        else
            echo "# $k: its server or the $k backend is missing here: not tested"
        fi
        be=
    done
    in_servers "${kinds[@]}"
fi

TMP=$(mktemp -d "${TMPDIR:-/tmp}/dlock-python-test.XXXXXX")
trap 'rm -rf "$TMP"' EXIT
# Build from a copy: the source tree stays clean (pip builds in place).
cp -r "$src/python" "$TMP/pkg"
rm -rf "$TMP/pkg/build" "$TMP/pkg"/*.egg-info
export DLOCK_BUILD_DIR=$build DLOCK_SOURCE_DIR=$src
if [ "$sanitize" = address ]; then
    export CC=clang LDSHARED="clang -shared" \
        CFLAGS="-fsanitize=address,undefined -fno-omit-frame-pointer" \
        LDFLAGS="-fsanitize=address,undefined -shared-libasan"
fi
if "$PY" -m pip --version >/dev/null 2>&1; then
    "$PY" -m pip install -q --no-build-isolation --no-deps --no-index --target "$TMP/site" \
        "$TMP/pkg" >"$TMP/build.log" 2>&1
else
    (cd "$TMP/pkg" && "$PY" setup.py -q build_ext --build-lib "$TMP/site" >"$TMP/build.log" 2>&1 &&
        cp -r dlock/*.py dlock/*.pyi dlock/py.typed "$TMP/site/dlock/")
fi
rc=$?
if [ $rc -ne 0 ] || [ -z "$(ls "$TMP"/site/dlock/_dlock*.so 2>/dev/null)" ]; then
    echo "not ok - building the package failed (exit $rc):"
    tail -30 "$TMP/build.log"
    exit 1
fi
echo "ok - the package built against $build/libdlock_static.a"

# The labels of the URLs servers.sh exported (and file): the rows of
# tests/targets.list whose variable is set.
labels=
while read -r label env _; do
    case $label in "" | "#"*) continue ;; esac
    if [ "$env" = - ] || [ -n "${!env:-}" ]; then labels+="${labels:+ }$label"; fi
done <"$src/tests/targets.list"
export DLOCK_PY_TEST_TARGETS=${DLOCK_PY_TEST_TARGETS:-$labels}
export DLOCK_CLI=$DLOCK
cd "$TMP/pkg/tests" || exit 1
run=()
if [ "$sanitize" = address ]; then
    # Python's own allocations at exit are not ours: no leak report (the
    # memory test measures leaks); every error still aborts
    run=(env LD_PRELOAD="$asanrt" DLOCK_PY_ASAN=1
         ASAN_OPTIONS="${ASAN_OPTIONS:+$ASAN_OPTIONS:}detect_leaks=0:abort_on_error=1")
    echo "# under ASan+UBSan ($asanrt preloaded)"
fi
"${run[@]}" env PYTHONPATH="$TMP/site" PYTHONDONTWRITEBYTECODE=1 "$PY" -m pytest -q -rfEs -p no:cacheprovider \
    </dev/null
rc=$?
cd / || exit 1

# The bench peer of the package (bench/peers/peer_bench.py --peer dlock-py)
# runs bench's workload for a moment: bench's fields, no violation.
mkdir -p "$TMP/bench"
if "${run[@]}" env DLOCK_PY_PATH="$TMP/site" PYTHONDONTWRITEBYTECODE=1 "$PY" \
    "$src/bench/peers/peer_bench.py" --peer dlock-py --url "file://$TMP/bench" -P 2 -H 50 \
    -D 0.5 --warmup 0.2 --json >"$TMP/peer.json" 2>"$TMP/peer.err" &&
    "$PY" -c 'import json, sys
d = json.load(open(sys.argv[1]))
sys.exit(0 if d["n"] > 0 and d["violations"] == 0 and d["peer"] == "dlock-py" and d["P"] == 2 else 1)' "$TMP/peer.json"; then
    echo "ok - bench peer dlock-py: bench's JSON, n > 0, no violations"
else
    echo "not ok - bench peer dlock-py: $(tail -3 "$TMP/peer.err") $(head -c 300 "$TMP/peer.json")"
    rc=1
fi
exit $rc
