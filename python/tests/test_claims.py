# SPDX-License-Identifier: MIT
"""Claims (client.once, sync and asyncio; inspect_claim, forget_claim) and
the lock options max_hold, min_hold, on_warn.

On a few URLs only (CI time): file, redis and postgres (advisory locks)
keep claims; memcached keeps none and must refuse them clearly."""
import asyncio
import os
import signal
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


def test_async_once_replays_abandons_and_loses(few_url, few_client, name):
    async def main():
        async with few_client.once(name, fingerprint="req-1") as job:
            assert job.open and job.attempt == 1 and job.lock.held
            await job.finish_async(result=b"sent")
        async with dlock.Client(few_url) as c2:
            async with c2.once(name, fingerprint="req-1") as again:
                assert again.replayed and again.result == b"sent" and not again.lock.held
            with pytest.raises(dlock.Conflict):
                async with c2.once(name, fingerprint="req-2"):
                    pytest.fail("the body of a refused claim ran")
            assert await c2.run_once_async(name, lambda job: b"never") == b"sent"

        other = name + "-b"
        async with few_client.once(other):  # a normal exit finishes (b"")
            pass
        assert few_client.inspect_claim(other).state == dlock.ClaimState.DONE
        few_client.forget_claim(other)
        with pytest.raises(RuntimeError):
            async with few_client.once(other) as job:  # an exception abandons
                raise RuntimeError("down")
        assert job.state == dlock.ClaimState.ABANDONED and not job.lock.held

        async def work(job):
            assert job.attempt == 2
            await asyncio.sleep(0)
            return "second"
        assert await few_client.run_once_async(other, work) == b"second"

        third = name + "-c"
        reached = []
        with pytest.raises(dlock.Lost):
            async with few_client.once(third) as job:  # a loss cancels the body
                job.lock._force_loss()
                await asyncio.sleep(60)
                reached.append(True)
        assert not reached and not job.open
        # nothing recorded, nothing held (a generous wait: a PostgreSQL
        # session's end, which lets its locks go, completes on the server
        # after the client has closed it)
        async with few_client.once(third, timeout=60) as job:
            assert not job.replayed and job.attempt == 2
    asyncio.run(main())


def test_async_once_cancel_while_waiting_leaves_nothing(few_url, few_client, name):
    runner = few_client.once(name).begin()  # runs it (open) while the task waits
    assert runner.open

    async def main():
        async with dlock.Client(few_url) as c2:
            waiting = c2.once(name)
            entered = []

            async def body():
                async with waiting:
                    entered.append(True)
            task = asyncio.create_task(body())
            await asyncio.wait_for(_until(lambda: waiting.lock.state == dlock.State.WAITING),
                                   60)
            task.cancel()
            with pytest.raises(asyncio.CancelledError):
                await task
            assert not entered and waiting.lock.state == dlock.State.IDLE
            runner.abandon()
            # the cancelled wait began nothing and holds nothing: the next
            # caller runs it, as the attempt after the runner's (not Busy
            # for ever; timeout generous as above: a cancelled PostgreSQL
            # waiter's session ends on the server a moment later)
            async with c2.once(name, timeout=60) as job:
                assert job.open and job.attempt == 2
    asyncio.run(main())


async def _until(cond):
    """Yield to the loop (which the waits must not block) until cond()."""
    while not cond():
        await asyncio.sleep(0.01)


def test_inspect_and_forget_claim(few_url, few_client, name):
    c = few_client
    assert c.inspect_claim(name) is None
    with pytest.raises(dlock.NotFound):
        c.forget_claim(name)
    with c.once(name, fingerprint="req-1") as job:
        with dlock.Client(few_url) as c2:  # read without the lock, while it runs
            running = c2.inspect_claim(name)
        assert running.state == dlock.ClaimState.RUNNING and running.attempt == 1
        assert running.finished_at is None and running.started_at is not None
        job.finish(result=b"out", status=3)
    info = c.inspect_claim(name)
    assert isinstance(info, dlock.ClaimInfo)
    assert info.state == dlock.ClaimState.DONE and info.attempt == 1
    assert info.status == 3 and info.result == b"out" and info.fingerprint == "req-1"
    assert "pid %d" % os.getpid() in info.by and info.finished_at >= info.started_at
    with c.once(name, fingerprint="req-1") as job:
        assert job.replayed  # inspect changed nothing
    with pytest.raises(RuntimeError):
        with c.once(name, retry_failed=True, fingerprint="req-1") as job:
            assert job.attempt == 2
            raise RuntimeError("gave up")
    ab = c.inspect_claim(name)
    assert ab.state == dlock.ClaimState.ABANDONED and ab.attempt == 2 and ab.result == b""
    c.forget_claim(name)
    assert c.inspect_claim(name) is None
    with c.once(name, fingerprint="req-2") as job:  # no record: no conflict either
        assert not job.replayed and job.attempt == 1


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
        with pytest.raises(dlock.NotSupported):
            c.inspect_claim(name)
        with pytest.raises(dlock.NotSupported):
            c.forget_claim(name)
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


def test_on_warn_comes_before_on_lost_when_renewals_fail(request, name):
    """The Redis server stops answering (SIGSTOP): renewals fail, the warning
    comes first, then the loss, each with the lock. No timing is asserted:
    the order of the two callbacks is, and the wait for them is generous."""
    request.node.user_properties.append(("label", "redis"))
    if "redis" not in LABELS:
        pytest.skip("redis is not among the labels of this run")
    url = _url("redis")
    pidfile = os.path.join(os.environ.get("DLOCK_TEST_SERVERS", ""), "single.pid")
    if not os.path.exists(pidfile):
        pytest.skip("no %s: the redis server was not started by tests/servers.sh" % pidfile)
    pid = int(open(pidfile).read())
    events = []
    lost = threading.Event()

    def on_warn(lk):
        events.append(("warn", lk))

    def on_lost(lk):
        events.append(("lost", lk))
        lost.set()
    with dlock.Client(url, op_timeout=0.5) as c:
        # warn_before: as early as allowed (half the lease), so that a late
        # wake-up of the watchdog under load still finds the warning due
        # before the loss
        lk = c.lock(name, ttl=1.5, on_warn=on_warn, warn_before=0.75, on_lost=on_lost)
        lk.acquire()
        os.kill(pid, signal.SIGSTOP)
        try:
            assert lost.wait(60), "the lease was not declared lost with its server stopped"
        finally:
            os.kill(pid, signal.SIGCONT)
        assert [what for what, _ in events] == ["warn", "lost"], events
        assert all(got is lk for _, got in events)
        assert lk.state == dlock.State.LOST
        with pytest.raises(dlock.Lost):
            lk.release()
