#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# The Debian packages as a user gets them: build them (scripts/package.sh),
# install them with apt-get, then, from the installed files only (not this
# checkout's build), build the README's C example with pkg-config (shared
# and static) and with CMake's find_package, run it, and run `dlock run` on
# the embedded file:// backend; finally remove the packages again.
#
# Not a CTest test (hence not named *_test.sh): it needs root (or sudo) and
# installs system packages. scripts/test.sh runs it as a step of its own.
#   tests/package-install.sh [DEBDIR]   the .deb files of DEBDIR, already built,
#                                       instead of building them into build-deb/
set -euo pipefail
top=$(cd "$(dirname "$0")/.." && pwd)
SUDO=""
[ "$(id -u)" -eq 0 ] || SUDO="sudo"
pkgs=(libdlock0 libdlock-dev dlock)
say() { echo "package-install: $*"; }
fail() { echo "package-install: FAILED: $*" >&2; exit 1; }

if [ -n "${1:-}" ]; then
  debs=$(cd "$1" && pwd)
else
  "$top/scripts/package.sh" >/dev/null
  debs=$top/build-deb
fi
files=()
# lintian (installed by scripts/install-deps.sh): no error or warning tag
if command -v lintian >/dev/null; then
  rc=0
  lint=$(lintian --fail-on error,warning "$debs"/*.changes 2>&1) || rc=$?
  lint=$(echo "$lint" | grep -v 'running with root privileges' || true)
  [ $rc -eq 0 ] || { echo "$lint" >&2; fail "lintian"; }
  say "ok - lintian: no error or warning${lint:+ (also: $(echo "$lint" | tr '\n' ' '))}"
fi
for p in "${pkgs[@]}"; do
  f=$(ls "$debs/${p}_"*.deb 2>/dev/null | head -1)
  [ -n "$f" ] || fail "no ${p}_*.deb in $debs"
  files+=("$f")
done

# What was installed before stays (upgraded); what this test installed goes.
installed_before=()
for p in "${pkgs[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" &&
    installed_before+=("$p")
done
work=$(mktemp -d)
cleanup() {
  local remove=()
  for p in "${pkgs[@]}"; do
    [[ " ${installed_before[*]} " == *" $p "* ]] || remove+=("$p")
  done
  if [ ${#remove[@]} -gt 0 ]; then
    DEBIAN_FRONTEND=noninteractive $SUDO apt-get purge -y -qq "${remove[@]}" >/dev/null 2>&1 || true
  fi
  rm -rf "$work"
}
trap cleanup EXIT

say "apt-get install ${files[*]##*/}"
DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq "${files[@]}" >"$work/apt.log" 2>&1 ||
  { cat "$work/apt.log" >&2; fail "apt-get install"; }
for p in "${pkgs[@]}"; do
  dpkg-query -W -f='${Status}' "$p" | grep -q "install ok installed" || fail "$p not installed"
done

# Only the installed files: no pkg-config path or library path of ours.
unset PKG_CONFIG_PATH LD_LIBRARY_PATH CMAKE_PREFIX_PATH
cd "$work"
[ "$(pkg-config --variable=prefix dlock)" = /usr ] || fail "dlock.pc: prefix is not /usr"
cflags=$(pkg-config --cflags dlock)
case $cflags in *hiredis*|*cjson*|*-D*) fail "pkg-config --cflags dlock carries more than dlock.h needs: $cflags" ;; esac
man -w dlock >/dev/null || fail "no dlock(1)"
man -w 3 libdlock >/dev/null || fail "no libdlock(3)"

# The README's C example, a whole program, as written but for its lock
# directory (in $work).
readme=$top/README.md
awk '/^```c$/{f=1;next} /^```$/{f=0} f' "$readme" | sed "s|file:///var/tmp/dlock|file://$work/locks|" >example.c
grep -q dlock_acquire example.c || fail "no C example found in README.md"

run_example() { # binary what
  local out
  out=$("./$1") || fail "$2: the example exited $?"
  [[ $out == "token "[1-9]* ]] || fail "$2: the example printed '$out', not a token"
  say "ok - $2: $out"
}
cc -Wall -Wextra -Werror -o ex_pc example.c $(pkg-config --cflags --libs dlock) ||
  fail "cc with pkg-config"
ldd ./ex_pc | grep -Eq "libdlock.so.0 => /(usr/)?lib/" || fail "ex_pc does not load the installed libdlock.so.0"
run_example ex_pc "pkg-config --cflags --libs dlock"

# libdlock.a, with what pkg-config --static adds (the client libraries' -dev
# packages, which libdlock-dev suggests, give the static links).
if cc -Wall -Werror -o ex_static example.c $(pkg-config --cflags dlock) \
     -Wl,-Bstatic -ldlock -Wl,-Bdynamic $(pkg-config --static --libs dlock | sed 's/-ldlock //') \
     2>"$work/static.log"; then
  ! ldd ./ex_static | grep -q libdlock || fail "ex_static loads libdlock.so"
  run_example ex_static "libdlock.a with pkg-config --static --libs dlock"
else
  cat "$work/static.log" >&2
  fail "static link against libdlock.a (are libhiredis-dev, libzookeeper-mt-dev, libcjson-dev installed?)"
fi

mkdir cm
cat >cm/CMakeLists.txt <<'CMAKE'
cmake_minimum_required(VERSION 3.18)
project(example C)
find_package(dlock 0.1 REQUIRED)
add_executable(example ../example.c)
target_link_libraries(example PRIVATE dlock::dlock)
add_executable(example_static ../example.c)
target_link_libraries(example_static PRIVATE dlock::dlock_static)
CMAKE
cmake -S cm -B cm/build >"$work/cmake.log" 2>&1 && cmake --build cm/build >>"$work/cmake.log" 2>&1 ||
  { cat "$work/cmake.log" >&2; fail "CMake find_package(dlock)"; }
cp cm/build/example ex_cmake
run_example ex_cmake "CMake find_package(dlock) -> dlock::dlock"
cp cm/build/example_static ex_cmake_static
! ldd ./ex_cmake_static | grep -q libdlock || fail "ex_cmake_static (dlock::dlock_static) loads libdlock.so"
run_example ex_cmake_static "CMake find_package(dlock) -> dlock::dlock_static"

[ "$(command -v dlock)" = /usr/bin/dlock ] || fail "dlock on PATH is $(command -v dlock), not /usr/bin/dlock"
/usr/bin/dlock --url "file://$work/locks" run package-test -- true || fail "dlock run NAME -- true"
out=$(/usr/bin/dlock --url "file://$work/locks" run package-test -- sh -c 'echo "$DLOCK_TOKEN"')
[[ $out =~ ^[1-9][0-9]*$ ]] || fail "dlock run gave the command no token ($out)"
say "ok - /usr/bin/dlock run on file://: token $out"
# The client libraries loaded at run time are only Recommends: without one,
# its backend says which package to install. Hidden here in a mount
# namespace of our own (/dev/null over the library), which needs root.
for x in "libcurl.so.4 libcurl4 etcds://127.0.0.1:1" "libpq.so.5 libpq5 postgres://127.0.0.1:1/x" \
         "libmariadb.so.3 libmariadb3 mysql://127.0.0.1:1/x"; do
  set -- $x
  path=$(/sbin/ldconfig -p | awk -v l="$1" '$1 == l {print $NF; exit}')
  if [ -z "$path" ]; then
    out=$(/usr/bin/dlock --url "$3" run package-test -- true 2>&1) && fail "$3 ran without $1"
  elif [ "$(id -u)" -eq 0 ] && unshare -m true 2>/dev/null; then
    out=$(unshare -m sh -c 'mount --bind /dev/null "$0" && exec "$@"' "$path" \
          /usr/bin/dlock --url "$3" run package-test -- true 2>&1) && fail "$3 ran without $1"
  else
    say "skip - $1 present and no mount namespace to hide it in"; continue
  fi
  [[ $out == *"cannot load $1 (Debian: $2)"* ]] || fail "without $1, $3 said: $out"
  say "ok - without $1: $out"
done
say "ok - all (removing the packages it installed)"
