#!/usr/bin/env bash
# The CLI's main paths under valgrind: every run must end with no memory
# errors and no leaks (valgrind exits 99 otherwise).
set -euo pipefail
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
url="file://$work/locks"
vg() { $DLOCK_VG "$DLOCK" --url "$url" "$@"; }
pass=0
check() { # expected-status description command...
  local want=$1 what=$2; shift 2
  set +e; "$@" >"$work/out" 2>&1; local got=$?; set -e
  if [ "$got" -ne "$want" ]; then
    echo "FAIL: $what: exit $got, expected $want"; cat "$work/out"; exit 1
  fi
  pass=$((pass + 1))
}
check 0 "run true" vg run demo -- true
check 3 "run exit status" vg run demo -- sh -c 'exit 3'
check 127 "run missing command" vg run demo -- /nonexistent/cmd
check 64 "bad name" vg run 'a/b' -- true
check 0 "status" vg status demo --json
check 0 "list" vg list --json
check 0 "backends" $DLOCK_VG "$DLOCK" backends
DLOCK_TEST_LOSE_AFTER_MS=200 check 75 "forced loss" vg run demo -- sleep 5
echo "$pass passed, 0 failed"
