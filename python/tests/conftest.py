# SPDX-License-Identifier: MIT
"""Fixtures of the dlock package's tests.

The backends come from tests/servers.sh (tests/python_test.sh runs pytest
inside `tests/servers.sh run KINDS --`): every DLOCK_TEST_* URL it exported
is one parameter of the `target` fixture (the rows of tests/targets.list,
the one list of URLs), and `file` always runs (a scratch directory).
DLOCK_PY_TEST_TARGETS="file redis ..." restricts the labels.
A test a backend cannot take is skipped by the client's capabilities, or by
NotSupported from the call itself, with the reason; never by omission.

Environment: DLOCK_CLI (or DLOCK, or DLOCK_BUILD_DIR/dlock, or ../build/dlock)
is the dlock command, for `dlock break`.
"""
import os
import shutil
import subprocess
import sys
import tempfile
import time
import uuid

import pytest

import dlock

HERE = os.path.dirname(os.path.abspath(__file__))
SRC = os.path.dirname(os.path.dirname(HERE))


def read_targets():
    """tests/targets.list, the one list of the URLs the tests run on:
    [(label, environment variable or None for file, run)]. The source tree
    is $DLOCK_SOURCE_DIR (tests/python_test.sh runs a copy of python/),
    else the one this file is in."""
    src = os.environ.get("DLOCK_SOURCE_DIR") or SRC
    rows = []
    with open(os.path.join(src, "tests", "targets.list")) as f:
        for line in f:
            if not line.strip() or line.lstrip().startswith("#"):
                continue
            label, env, _kinds, _build, run = line.split()[:5]
            rows.append((label, None if env == "-" else env, run))
    return rows


# (label, environment variable); None: the file backend in a scratch directory.
# By default the rows CI runs; DLOCK_PY_TEST_TARGETS names any.
_ROWS = read_targets()
TARGETS = [(lb, env) for lb, env, _ in _ROWS]
_only = os.environ.get("DLOCK_PY_TEST_TARGETS", "").split()
LABELS = [lb for lb, _, run in _ROWS if (lb in _only if _only else run == "ci")]
ENV_OF = dict(TARGETS)

_file_dir = None


def url_of(label):
    """The URL of a label, or None when its server was not started."""
    global _file_dir
    env = ENV_OF[label]
    if env is None:
        if _file_dir is None:
            _file_dir = tempfile.mkdtemp(prefix="dlock-py-file.")
        return "file://" + _file_dir
    return os.environ.get(env) or None


def pytest_sessionfinish(session, exitstatus):
    if _file_dir:
        shutil.rmtree(_file_dir, ignore_errors=True)


@pytest.fixture(params=LABELS)
def target(request):
    """(label, url) of one backend; skipped when its server is not running."""
    label = request.param
    request.node.user_properties.append(("label", label))  # (the summary's key)
    url = url_of(label)
    if url is None:
        pytest.skip("%s: $%s is not set (its server was not started)" % (label, ENV_OF[label]))
    return label, url


@pytest.fixture
def url(target):
    return target[1]


@pytest.fixture
def client(url):
    c = dlock.Client(url)
    yield c
    c.close()


@pytest.fixture
def name():
    """A lock name no other test uses."""
    return "py-%d-%s" % (os.getpid(), uuid.uuid4().hex[:10])


def need(client, cap, what):
    if not client.caps & cap:
        pytest.skip("%s: the backend does not offer %s" % (client.backend, what))


def wait_for(cond, timeout=30.0, what="condition"):
    """Poll cond() until true; fail after a generous deadline."""
    end = time.monotonic() + timeout
    while True:
        v = cond()
        if v:
            return v
        if time.monotonic() > end:
            pytest.fail("waited %.0f s for %s" % (timeout, what))
        time.sleep(0.01)


def dlock_cli():
    for c in (os.environ.get("DLOCK_CLI"), os.environ.get("DLOCK"),
              os.path.join(os.environ.get("DLOCK_BUILD_DIR", ""), "dlock")
              if os.environ.get("DLOCK_BUILD_DIR") else None,
              os.path.join(SRC, "build", "dlock")):
        if c and os.access(c, os.X_OK):
            return c
    return shutil.which("dlock")


def py_env():
    """The environment of a child Python: it imports this very dlock package."""
    env = dict(os.environ)
    pkg = os.path.dirname(os.path.dirname(os.path.abspath(dlock.__file__)))
    env["PYTHONPATH"] = pkg + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    return env


def spawn_py(code, *args, **kw):
    """A child Python running code (with sys.argv[1:] = args), pipes on stdio."""
    return subprocess.Popen([sys.executable, "-c", code, *map(str, args)], env=py_env(),
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, **kw)


def pytest_terminal_summary(terminalreporter):
    """One line per backend label: passed, skipped, failed."""
    counts = {}
    for key in ("passed", "skipped", "failed", "error"):
        for rep in terminalreporter.stats.get(key, []):
            nodeid = getattr(rep, "nodeid", "")
            label = dict(getattr(rep, "user_properties", ())).get("label", "-")
            counts.setdefault(label, {}).setdefault(key, 0)
            counts[label][key] += 1
    terminalreporter.write_sep("-", "per backend (label: passed/skipped/failed)")
    for label in sorted(counts):
        c = counts[label]
        terminalreporter.write_line("%-15s %3d passed %3d skipped %3d failed" % (
            label, c.get("passed", 0), c.get("skipped", 0), c.get("failed", 0) + c.get("error", 0)))
