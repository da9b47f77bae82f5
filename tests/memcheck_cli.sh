#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
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
check 0 "version" $DLOCK_VG "$DLOCK" --version
check 0 "completion" $DLOCK_VG "$DLOCK" completion bash
check 1 "leader, none" vg leader chief --json
"$DLOCK" --url "$url" elect --value v1 chief -- sleep 60 >/dev/null 2>&1 &
elect=$!
sleep 0.5
check 0 "leader" vg leader chief
# --watch until TERM: the client and the signal pipe go away cleanly
$DLOCK_VG "$DLOCK" --url "$url" leader --watch chief >"$work/watch" 2>&1 &
watcher=$!
sleep 3
kill -TERM "$watcher"
check 0 "leader --watch ended by TERM" wait "$watcher"
grep -qx v1 "$work/watch" || { echo "FAIL: leader --watch printed: $(cat "$work/watch")"; exit 1; }
kill -TERM "$elect"
wait "$elect" || true
DLOCK_TEST_LOSE_AFTER_MS=200 check 75 "forced loss" vg run demo -- sleep 5
echo "$pass passed, 0 failed"
