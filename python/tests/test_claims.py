# SPDX-License-Identifier: MIT
"""Claims (client.once) and the lock options max_hold, min_hold, on_warn.

On a few URLs only (CI time): file, redis and postgres (advisory locks)
keep claims; memcached keeps none and must refuse them clearly."""
import os
import sys
import threading
import time

import pytest

import dlock
from conftest import LABELS, spawn_py, url_of, wait_for

FEW = [lb for lb in ("file", "redis", "postgres") if lb in LABELS]


def _url(label):
    u = url_of(label)
    if u is None:
        pytest.skip("%s: its server was not started" % label)
    return u


@pytest.fixture(params=FEW)
def few_url(request):
    request.node.user_properties.append(("label", request.param))
    return _url(request.param)


@pytest.fixture
def few_client(few_url):
    c = dlock.Client(few_url)
    yield c
    c.close()


def test_once_replays_after_finish(few_url, few_client, name):
    runs = []
    with few_client.once(name) as job:
        assert job.state == dlock.ClaimState.RUN and not job.replayed and job.open
        assert job.attempt == 1 and job.lock.held and job.token > 0
        runs.append(1)
        job.finish(result=b"refunded 42")
        assert job.state == dlock.ClaimState.DONE and not job.open
    with dlock.Client(few_url) as c2:
        with c2.once(name) as again:
            assert again.replayed and again.state == dlock.ClaimState.DONE
            assert again.result == b"refunded 42" and again.status == 0
            assert again.attempt == 1 and "pid %d" % os.getpid() in again.by
            assert not again.lock.held  # a replay holds nothing
        # run_once: fn does not run again; the recorded result comes back
        assert c2.run_once(name, lambda job: runs.append(2) or b"again") == b"refunded 42"
    assert runs == [1]


def test_once_normal_exit_finishes(few_client, name):
    with few_client.once(name) as job:
        pass  # left without finish(): recorded as success, result b""
    assert job.state == dlock.ClaimState.DONE
    assert few_client.run_once(name, lambda job: b"never") == b""


def test_once_abandoned_runs_again_as_attempt_2(few_client, name):
    with pytest.raises(RuntimeError):
        with few_client.once(name) as job:
            assert job.attempt == 1
            raise RuntimeError("the refund service is down")
    assert job.state == dlock.ClaimState.ABANDONED and not job.lock.held
    with few_client.once(name) as job2:
        assert not job2.replayed and job2.attempt == 2
        job2.finish(result="second try", status=0)
    with few_client.once(name) as job3:
        assert job3.replayed and job3.attempt == 2 and job3.result == b"second try"


def test_once_fingerprint_conflict(few_client, name):
    assert few_client.run_once(name, lambda job: b"r", fingerprint="req-a") == b"r"
    with pytest.raises(dlock.Conflict) as ei:
        few_client.once(name, fingerprint="req-b").begin()
    assert "req-a" in str(ei.value) and "req-b" in str(ei.value)


ONCE_CHILD = r"""
import os, sys, time, dlock
url, key, path = sys.argv[1:4]
with dlock.Client(url, connect_timeout=60) as c:
    with c.once(key, timeout=300) as job:
        if job.replayed:
            print("replayed", job.result.decode(), job.attempt)
        else:
            n = int(open(path).read())
            time.sleep(0.2)  # others arrive meanwhile and wait
            with open(path, "w") as f:
                f.write(str(n + 1))
            job.finish(result="ran-by-%d" % os.getpid())
            print("ran", job.result.decode(), job.attempt)
"""


def test_once_exclusion_across_processes(few_url, name, tmp_path):
    path = tmp_path / "runs"
    path.write_text("0")
    procs = [spawn_py(ONCE_CHILD, few_url, name, path) for _ in range(3)]
    outs = []
    for p in procs:
        out, err = p.communicate(timeout=300)
        assert p.returncode == 0, err[-2000:]
        outs.append(out.split())
    assert path.read_text() == "1"  # the work ran once
    ran = [o for o in outs if o[0] == "ran"]
    assert len(ran) == 1, outs
    assert all(o[1] == ran[0][1] and o[2] == "1" for o in outs), outs  # one result for all


def test_once_refused_without_claims(request, name):
    request.node.user_properties.append(("label", "memcached"))
    if "memcached" not in LABELS:
        pytest.skip("memcached is not among the labels of this run")
    with dlock.Client(_url("memcached")) as c:
        assert not c.caps & dlock.Caps.CLAIMS
        with pytest.raises(dlock.NotSupported) as ei:
            with c.once(name):
                pytest.fail("the body of a refused claim ran")
        assert "claim" in str(ei.value)
        lk = c.lock(name)  # the refusal left nothing held
        lk.acquire(timeout=0)
        lk.release()


def test_max_hold_leads_to_loss_and_a_bad_callback_does_not_crash(few_client, name, monkeypatch):
    unraisable = []
    monkeypatch.setattr(sys, "unraisablehook", lambda u: unraisable.append(u.exc_value))

    def on_lost(lock):
        raise ValueError("a user callback's bug")
    lk = few_client.lock(name, max_hold=0.3, on_lost=on_lost)
    lk.acquire()
    assert lk.lost.wait(60), "max_hold did not end the holding"
    wait_for(lambda: unraisable, 60, "on_lost's exception to reach sys.unraisablehook")
    assert isinstance(unraisable[0], ValueError)
    assert lk.state == dlock.State.LOST
    with pytest.raises(dlock.Lost) as ei:
        lk.release()
    assert "max" in str(ei.value)
    lk.acquire(timeout=0)  # the cap released it on the server
    lk.release()


def test_max_hold_loses_a_claim_which_runs_again(few_client, name):
    with pytest.raises(dlock.Lost):
        with few_client.once(name, max_hold=0.3) as job:
            assert job.lock.lost.wait(60)
    with few_client.once(name) as job2:  # the lost attempt recorded nothing
        assert not job2.replayed and job2.attempt == 2


def test_min_hold_keeps_a_rival_out(few_url, few_client, name):
    MIN_S = 1.5  # generous: acquiring and trying take milliseconds
    with dlock.Client(few_url) as c2:
        rival = c2.lock(name)
        lk = few_client.lock(name, min_hold=MIN_S)
        lk.acquire()
        t_acq = time.monotonic()
        rel = threading.Thread(target=lk.release)  # a session backend waits in it
        rel.start()
        try:
            got = None
            try:
                rival.acquire(timeout=0)
                got = True
            except dlock.Busy:
                got = False
            if time.monotonic() - t_acq >= MIN_S:
                pytest.skip("the machine took over %.0f s between acquiring and trying" % MIN_S)
            assert got is False, "a rival took the lock before min_hold had passed"
        finally:
            rel.join(120)
        assert not rel.is_alive()
        # afterwards it is free: min_hold is a minimum, not a hold for ever
        wait_for(lambda: _try(rival), 60, "the lock to come free after min_hold")
        rival.release()


def _try(lk):
    try:
        return lk.acquire(timeout=0)
    except dlock.Busy:
        return False


def test_lock_option_errors(few_client, name):
    client = few_client
    with pytest.raises(ValueError):
        client.lock(name, max_hold=0)
    with pytest.raises(ValueError):
        client.lock(name, min_hold=-1)
    with pytest.raises(ValueError):
        client.lock(name, warn_before=1)  # without on_warn
    with pytest.raises(TypeError):
        client.lock(name, on_warn=42)
    with pytest.raises(dlock.InvalidArgument):
        client.lock(name, max_hold=1, min_hold=2)  # the minimum above the cap
    lk = client.lock(name, ttl=10, on_warn=lambda lk: None, warn_before=2)
    assert lk.on_warn is not None
    with lk:
        assert lk.held
