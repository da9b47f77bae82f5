# SPDX-License-Identifier: MIT
"""Build the dlock package: the C extension dlock._dlock over libdlock.

Where libdlock comes from, first found wins:
  1. DLOCK_BUILD_DIR (or ../build beside this folder): the project's CMake
     build directory; the static libdlock_static.a is linked in (position-
     independent objects), so the package needs no libdlock.so at run time,
     only the backends' client libraries (hiredis, libzookeeper_mt, libcjson).
  2. pkg-config dlock: an installed libdlock (`make install`): linked
     against libdlock.so.

    cmake -S . -B build && cmake --build build -j2
    pip install --no-build-isolation ./python          # offline, Debian's tools
"""
import os
import shlex
import subprocess

from setuptools import Extension, setup

HERE = os.path.dirname(os.path.abspath(__file__))
# the repository (include/dlock.h): DLOCK_SOURCE_DIR when built from a copy
SRC = os.environ.get("DLOCK_SOURCE_DIR") or os.path.dirname(HERE)


def pkgconfig(*args):
    try:
        out = subprocess.run(["pkg-config", *args], check=True, capture_output=True, text=True)
    except (OSError, subprocess.CalledProcessError):
        return None
    return shlex.split(out.stdout)


def pc_field(path, field):
    """A field of a .pc file (Libs.private, Requires.private), as words."""
    with open(path) as f:
        for line in f:
            if line.startswith(field + ":"):
                return line.split(":", 1)[1].split()
    return []


def libdlock():
    """(include_dirs, extra_objects, libraries, library_dirs, extra_link_args)."""
    build = os.environ.get("DLOCK_BUILD_DIR") or os.path.join(SRC, "build")
    static = os.path.join(build, "libdlock_static.a")
    header = os.path.join(SRC, "include", "dlock.h")
    if os.path.exists(static) and os.path.exists(header):
        pc = os.path.join(build, "dlock.pc")
        link = [w for w in pc_field(pc, "Libs.private")] if os.path.exists(pc) else ["-lpthread"]
        requires = pc_field(pc, "Requires.private") if os.path.exists(pc) else []
        if requires:
            more = pkgconfig("--libs", *requires)
            if more is None:
                raise SystemExit("pkg-config --libs %s failed: install the -dev packages "
                                 "(scripts/install-deps.sh)" % " ".join(requires))
            link += more
        return [os.path.join(SRC, "include")], [static], link + ["-ldl"]
    cflags = pkgconfig("--cflags", "dlock")
    libs = pkgconfig("--libs", "dlock")
    if cflags is None or libs is None:
        raise SystemExit("libdlock not found: build the project first (cmake -S . -B build && "
                         "cmake --build build), or set DLOCK_BUILD_DIR, or make install")
    return [w[2:] for w in cflags if w.startswith("-I")], [], libs


include_dirs, objects, link = libdlock()
ext = Extension(
    "dlock._dlock",
    sources=["dlock/_dlock.c"],
    include_dirs=include_dirs,
    extra_objects=objects,
    extra_link_args=link,
    extra_compile_args=["-std=gnu11", "-Wall", "-Wextra", "-Wno-missing-field-initializers",
                        "-Wno-cast-function-type"],
    depends=[os.path.join(SRC, "include", "dlock.h")] + objects,
)

setup(ext_modules=[ext])
