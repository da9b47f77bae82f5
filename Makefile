# SPDX-License-Identifier: MIT
# A thin front over CMake for people who expect `make`.
BUILD ?= build
PREFIX ?= /usr/local

all:
	cmake -S . -B $(BUILD) -DCMAKE_INSTALL_PREFIX=$(PREFIX) >/dev/null
	cmake --build $(BUILD) -j$$(nproc)

check test:
	scripts/test.sh

demo:
	scripts/demo.sh

# Installs what `make` built, under PREFIX; DESTDIR stages the files under
# another root (packaging): make install DESTDIR=/tmp/stage. It only copies
# (it builds only when nothing is built yet): `sudo make install` after
# `make` leaves no file of root's in the build tree.
install:
	@test -f $(BUILD)/CMakeCache.txt || $(MAKE) all
	DESTDIR=$(DESTDIR) cmake --install $(BUILD) --prefix $(PREFIX)

# Removes what the last install wrote: the files CMake listed in
# install_manifest.txt (under the same DESTDIR), and the directory of our
# own (lib/cmake/dlock).
uninstall:
	@test -f $(BUILD)/install_manifest.txt || { echo "nothing installed from $(BUILD)"; exit 1; }
	sed 's|^|$(DESTDIR)|' $(BUILD)/install_manifest.txt | xargs -d '\n' rm -fv
	sed 's|^|$(DESTDIR)|' $(BUILD)/install_manifest.txt | xargs -d '\n' -n1 dirname | \
	  grep '/dlock$$' | sort -u | xargs -r -d '\n' rmdir --ignore-fail-on-non-empty

clean:
	rm -rf build build-deb build-demo build-asan build-tsan build-memcheck build-fuzz build-nolibs

.PHONY: all check test demo install uninstall clean
