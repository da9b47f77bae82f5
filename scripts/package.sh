#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# Build the Debian packages (libdlock0, libdlock-dev, dlock) from this
# checkout with Debian's own tools (debian/, dpkg-buildpackage), into
# build-deb/ (or $1): the .deb files, .buildinfo and .changes land there.
# The build runs in a copy of the checkout (build-deb/src/, the tracked
# files and any new ones not ignored, uncommitted edits included), so the
# checkout itself gets no build leftovers. Build dependencies come from
# debian/control, installed with apt-get (Debian packages only) when missing.
# No test suite (it needs live servers: scripts/test.sh), no sanitizers.
#   scripts/package.sh [OUTDIR]
set -euo pipefail
top=$(cd "$(dirname "$0")/.." && pwd)
out=$(mkdir -p "${1:-$top/build-deb}" && cd "${1:-$top/build-deb}" && pwd)

SUDO=""
[ "$(id -u)" -eq 0 ] || SUDO="sudo"
apt_install() {
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "$@" >/dev/null
}
# dpkg-buildpackage and debhelper first, then what debian/control asks for.
command -v dpkg-checkbuilddeps >/dev/null && command -v dh >/dev/null ||
  apt_install dpkg-dev debhelper build-essential
if ! (cd "$top" && dpkg-checkbuilddeps 2>/dev/null); then
  echo "package: installing the build dependencies of debian/control"
  $SUDO apt-get update -qq
  (cd "$top" && DEBIAN_FRONTEND=noninteractive $SUDO apt-get build-dep -y -qq --no-install-recommends . >/dev/null)
fi

version=$(cd "$top" && dpkg-parsechangelog -SVersion)
src=$out/src/dlock-$version
rm -rf "$out/src"
mkdir -p "$src"
if git -C "$top" rev-parse --git-dir >/dev/null 2>&1; then
  (cd "$top" && git ls-files -z --cached --others --exclude-standard |
     xargs -0 -r sh -c 'for f; do [ -e "$f" ] && printf "%s\0" "$f"; done' sh |
     tar --null -T - -cf -) | tar -xf - -C "$src"
else # an unpacked tarball: everything but build directories
  (cd "$top" && tar --exclude='./build*' --exclude=./out -cf - .) | tar -xf - -C "$src"
fi

rm -f "$out"/*.deb "$out"/*.buildinfo "$out"/*.changes
echo "package: dpkg-buildpackage in $src"
(cd "$src" && DEB_BUILD_OPTIONS="nocheck parallel=${JOBS:-2} ${DEB_BUILD_OPTIONS:-}" \
   dpkg-buildpackage -b -us -uc) >"$out/build.log" 2>&1 ||
  { tail -40 "$out/build.log" >&2; echo "package: build failed (see $out/build.log)" >&2; exit 1; }
# dpkg-buildpackage writes beside the source directory
mv "$out/src"/*.deb "$out/src"/*.buildinfo "$out/src"/*.changes "$out/"
rm -rf "$out/src"
ls -1 "$out"/*.deb
