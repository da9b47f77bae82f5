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

install: all
	cmake --install $(BUILD)

clean:
	rm -rf build build-demo build-asan build-tsan build-memcheck build-fuzz build-nolibs

.PHONY: all check test demo install clean
