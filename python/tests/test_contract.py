# SPDX-License-Identifier: MIT
"""The lock contract through Python, on every backend the servers run for."""
import asyncio
import gc
import os
import select
import signal
import subprocess
import sys
import threading
import time

import pytest

import dlock
from conftest import dlock_cli, need, spawn_py, wait_for


def test_acquire_release_token(client, name):
    lk = client.lock(name)
    assert lk.state == dlock.State.IDLE and lk.token == 0 and not lk.held
    assert lk.acquire() is True
    assert lk.held and lk.state == dlock.State.HELD and lk.count == 1
    assert lk.token > 0
    lk.release()
    assert lk.state == dlock.State.IDLE and lk.token == 0
    with pytest.raises(dlock.NotHeld):
        lk.release()


def test_with_block_and_timeout_argument(client, name):
    with client.lock(name, timeout=10) as lk:
        assert lk.held and lk.token > 0
    assert not lk.held


def test_tokens_rise(client, name):
    need(client, dlock.Caps.FENCING, "fencing tokens")
    a, b = client.lock(name), client.lock(name)
    seen = []
    for lk in (a, b, a, b):
        with lk:
            seen.append(lk.token)
    assert seen == sorted(seen) and len(set(seen)) == 4, seen


def test_busy_and_timeout(url, client, name):
    holder = client.lock(name)
    holder.acquire()
    with dlock.Client(url) as c2:
        lk = c2.lock(name)
        with pytest.raises(dlock.Busy) as ei:
            lk.acquire(timeout=0)
        assert ei.value.code == -3 and ei.value.errname == "EBUSY" and str(ei.value)
        t0 = time.monotonic()
        with pytest.raises(dlock.Timeout):
            lk.acquire(timeout=0.3)
        took = time.monotonic() - t0
        assert took >= 0.25, took
        assert lk.state == dlock.State.IDLE
        holder.release()
        lk.acquire(timeout=30)  # nothing of the timed-out wait is in the way
        lk.release()


def test_reentry(client, name):
    lk = client.lock(name)
    lk.acquire()
    tok = lk.token
    lk.acquire(timeout=0)
    assert lk.count == 2 and lk.token == tok
    lk.release()
    assert lk.held and lk.count == 1
    lk.release()
    assert not lk.held


def test_shared(url, client, name):
    need(client, dlock.Caps.SHARED, "shared locks")
    r1 = client.lock(name, shared=True)
    with dlock.Client(url) as c2:
        r2 = c2.lock(name, shared=True)
        w = c2.lock(name)
        r1.acquire(timeout=10)
        r2.acquire(timeout=10)
        assert r1.held and r2.held and r1.kind == "shared"
        with pytest.raises(dlock.Busy):
            w.acquire(timeout=0)
        r1.release()
        r2.release()
        w.acquire(timeout=30)
        w.release()


def test_semaphore(url, client, name):
    need(client, dlock.Caps.SEMAPHORE, "semaphores")
    with dlock.Client(url) as c2:
        a = client.lock(name, permits=2)
        b = c2.lock(name, permits=2)
        c = c2.lock(name + "x", permits=2)
        third = dlock.Client(url)
        try:
            t = third.lock(name, permits=2)
            a.acquire(timeout=10)
            b.acquire(timeout=10)
            assert a.permits == 2 and a.kind == "semaphore"
            with pytest.raises(dlock.Busy):
                t.acquire(timeout=0)
            a.release()
            t.acquire(timeout=30)
            t.release()
            b.release()
            del c
        finally:
            third.close()


COUNTER = r"""
import os, sys, time, dlock
url, name, path, n = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
with dlock.Client(url) as c:
    lk = c.lock(name)
    for _ in range(n):
        with lk:
            with open(path) as f:
                v = int(f.read() or 0)
            time.sleep(0.001)
            with open(path + ".tmp", "w") as f:
                f.write(str(v + 1))
            os.replace(path + ".tmp", path)
print("done")
"""


def test_exclusion_across_processes(url, name, tmp_path):
    path = tmp_path / "counter"
    path.write_text("0")
    P, N = 3, 15
    procs = [spawn_py(COUNTER, url, name, path, N) for _ in range(P)]
    for p in procs:
        out, err = p.communicate(timeout=300)
        assert p.returncode == 0, err[-2000:]
    assert int(path.read_text()) == P * N


def test_threads_share_one_client(client, name):
    inside, total, errors = [0], [0], []
    mu = threading.Lock()

    def work():
        try:
            lk = client.lock(name)
            for _ in range(15):
                with lk:
                    with mu:
                        inside[0] += 1
                        assert inside[0] == 1
                    time.sleep(0.0005)
                    with mu:
                        inside[0] -= 1
                        total[0] += 1
        except BaseException as e:  # reported below
            errors.append(e)
    ts = [threading.Thread(target=work) for _ in range(4)]
    for t in ts:
        t.start()
    for t in ts:
        t.join(300)
    assert not errors, errors
    assert total[0] == 60


def test_one_handle_one_thread(client, name):
    """A second thread using a handle that is waiting gets an error, not a crash."""
    holder = client.lock(name)
    holder.acquire()
    lk = client.lock(name)
    res = []
    t = threading.Thread(target=lambda: res.append(_catch(lk.acquire)))
    t.start()
    wait_for(lambda: lk.state == dlock.State.WAITING, what="the waiter to wait")
    with pytest.raises(dlock.InvalidArgument, match="in use"):
        lk.acquire(timeout=0)
    with pytest.raises(dlock.InvalidArgument, match="in use"):
        client.close()  # not under a waiting thread
    lk.cancel()
    t.join(60)
    assert isinstance(res[0], dlock.Cancelled), res
    holder.release()


def _catch(fn, *a):
    try:
        return fn(*a)
    except BaseException as e:
        return e


def test_cancel_leaves_nothing(url, client, name):
    holder = client.lock(name)
    holder.acquire()
    with dlock.Client(url) as c2:
        lk = c2.lock(name)
        res = []
        t = threading.Thread(target=lambda: res.append(_catch(lk.acquire, 120)))
        t.start()
        wait_for(lambda: lk.state == dlock.State.WAITING, what="the waiter to wait")
        lk.cancel()
        t.join(60)
        assert not t.is_alive()
        assert isinstance(res[0], dlock.Cancelled), res
        assert lk.state == dlock.State.IDLE
        holder.release()
        # the cancelled waiter left no place in any queue: a third taker
        # gets the lock at once
        with dlock.Client(url) as c3:
            with c3.lock(name, timeout=30):
                pass


def test_loss_told_three_ways(client, name):
    seen = []
    lk = client.lock(name, on_lost=lambda l: seen.append((l, threading.get_ident())))
    ev = lk.lost
    lk.acquire()
    fd = lk.fileno()
    assert select.select([fd], [], [], 0)[0] == []
    lk._force_loss()
    assert ev.wait(30) and lk.lost.is_set()
    wait_for(lambda: seen, what="on_lost")
    assert seen[0][0] is lk and seen[0][1] != threading.get_ident()
    assert select.select([fd], [], [], 30)[0] == [fd]
    assert lk.state == dlock.State.LOST and lk.token == 0 and not lk.held
    with pytest.raises(dlock.Lost, match="lost"):
        lk.release()
    assert lk.state == dlock.State.IDLE
    lk.acquire(timeout=30)  # a new holding is not lost
    assert not lk.lost.is_set() and lk.held
    lk.release()


def test_with_block_raises_lost(client, name):
    with pytest.raises(dlock.Lost):
        with client.lock(name) as lk:
            lk._force_loss()
    # the body's own exception is not masked by the loss
    with pytest.raises(KeyError):
        with client.lock(name) as lk:
            lk._force_loss()
            raise KeyError("mine")
    assert lk.lost.is_set()


def test_break_by_cli_reaches_on_lost(url, client, name):
    cli = dlock_cli()
    if not cli:
        pytest.skip("no dlock command (DLOCK_CLI)")
    seen = threading.Event()
    lk = client.lock(name, ttl=3, on_lost=lambda l: seen.set())
    lk.acquire()
    tok = lk.token
    env = dict(os.environ, DLOCK_URL=url)
    env.pop("LD_PRELOAD", None)  # (under ASan: the runtime preloaded for Python only)
    r = subprocess.run([cli, "break", name, "--force"], env=env, capture_output=True,
                       text=True, timeout=60)
    if r.returncode == 70 and client.backend == "file":
        pytest.skip("file: %s" % r.stderr.strip()[:200])
    assert r.returncode == 0, r.stderr
    assert seen.wait(60), "on_lost was not called"
    assert lk.lost.wait(10)
    assert select.select([lk.fileno()], [], [], 10)[0] == [lk.fileno()]
    with pytest.raises(dlock.Lost):
        lk.release()
    with dlock.Client(url) as c2:
        with c2.lock(name, timeout=30) as l2:
            if client.caps & dlock.Caps.FENCING:
                assert l2.token > tok


def test_break_from_python(url, client, name):
    lk = client.lock(name, ttl=3)
    lk.acquire()
    try:
        with dlock.Client(url) as c2:
            try:
                info = c2.break_(name)
            except dlock.NotSupported as e:
                pytest.skip(str(e))
            assert isinstance(info, dlock.Info)
            assert lk.lost.wait(60)
            # The holder hears of the loss when its session's socket closes;
            # the server may still be ending that session (MySQL's KILL rolls
            # back after it answers, seen under load on mode=rowlock): a
            # second break is "not held" once the server has let go.
            deadline = time.monotonic() + 30
            while c2.inspect(name).held and time.monotonic() < deadline:
                time.sleep(0.05)
            with pytest.raises(dlock.NotHeld):
                c2.break_(name)
    finally:
        try:
            lk.release()
        except dlock.Error:
            pass


def test_inspect_and_list(client, name):
    lk = client.lock(name)
    with lk:
        info = lk.info()
        assert info.held in (True, None)
        try:
            names = client.list(prefix=name[:12])
        except dlock.NotSupported as e:
            pytest.skip(str(e))
        assert name in names
    assert client.inspect(name).held in (False, None)


def test_acquire_all(url, client, name):
    a, b = client.lock(name + "-a"), client.lock(name + "-b")
    with dlock.Client(url) as c2:
        other = c2.lock(name + "-b")
        other.acquire()
        with pytest.raises((dlock.Timeout, dlock.Busy)):
            client.acquire_all([b, a], timeout=0.3)
        assert not a.held and not b.held
        other.release()
        client.acquire_all([b, a], timeout=30)
        assert a.held and b.held
        client.release_all([a, b])
        assert not a.held and not b.held


def test_election(url, client, name):
    try:
        lead = client.campaign(name, "leader-one", timeout=30)
    except dlock.NotSupported as e:
        pytest.skip(str(e))
    try:
        assert lead.held
        assert client.leader(name) == "leader-one"
        with dlock.Client(url) as c2:
            with pytest.raises((dlock.Timeout, dlock.Busy)):
                c2.campaign(name, "leader-two", timeout=0.2)
            lead.resign()
            wait_for(lambda: c2.leader(name) is None, what="no leader")
            l2 = c2.campaign(name, "leader-two", timeout=30)
            assert c2.leader(name) == "leader-two"
            l2.resign()
    finally:
        if lead.held:
            lead.resign()


SIGINT_CHILD = r"""
import os, sys, threading, time
url, name, how = sys.argv[1], sys.argv[2], sys.argv[3]
if how == "imported-in-thread":  # the module learns the main thread all the same
    t = threading.Thread(target=lambda: __import__("dlock"))
    t.start()
    t.join()
import dlock

def wait_interrupted():
    c = dlock.Client(url)
    lk = c.lock(name)
    def tell():
        while lk.state != dlock.State.WAITING:
            time.sleep(0.005)
        print("waiting %d" % os.getpid(), flush=True)
    threading.Thread(target=tell, daemon=True).start()
    try:
        lk.acquire()
        print("acquired?!", flush=True)
    except KeyboardInterrupt:
        print("interrupted %s %d" % (lk.state.name, lk.count), flush=True)
    c.close()

if how == "forked-from-thread":  # in the child, the forking thread is the main one
    def fork_here():
        pid = os.fork()
        if pid == 0:
            wait_interrupted()
            os._exit(0)
        _, st = os.waitpid(pid, 0)
        sys.exit(os.waitstatus_to_exitcode(st))
    t = threading.Thread(target=fork_here)
    t.start()
    t.join()
else:
    wait_interrupted()
"""


@pytest.mark.parametrize("how", ["main", "imported-in-thread", "forked-from-thread"])
def test_ctrl_c_interrupts_wait(url, client, name, how):
    """Ctrl-C ends a wait in the thread Python runs signal handlers in, wherever
    the module was imported and after a fork from another thread."""
    holder = client.lock(name)
    holder.acquire()
    p = spawn_py(SIGINT_CHILD, url, name, how)
    try:
        line = p.stdout.readline().split()
        assert line[:1] == ["waiting"], p.stderr.read() if p.poll() else line
        t0 = time.monotonic()
        os.kill(int(line[1]), signal.SIGINT)
        out, err = p.communicate(timeout=60)
        took = time.monotonic() - t0
    finally:
        if p.poll() is None:
            p.kill()
            p.wait()
    assert out.strip() == "interrupted IDLE 0", (out, err)
    assert p.returncode == 0, err
    assert took < 30, took  # "at once": well under a minute on a busy machine
    holder.release()
    with dlock.Client(url) as c2:
        with c2.lock(name, timeout=30):
            pass


SIGUSR1_CHILD = r"""
import signal, sys, threading, time, dlock
url, name = sys.argv[1], sys.argv[2]
got = []
signal.signal(signal.SIGUSR1, lambda s, f: got.append(s))
c = dlock.Client(url)
lk = c.lock(name)
def tell():
    while lk.state != dlock.State.WAITING:
        time.sleep(0.005)
    print("waiting", flush=True)
threading.Thread(target=tell, daemon=True).start()
lk.acquire(timeout=120)
print("acquired %d %s" % (len(got), lk.held), flush=True)
lk.release()
c.close()
"""


def test_signal_handler_that_returns_keeps_waiting(url, client, name):
    """A handler that does not raise runs during the wait; the wait goes on."""
    holder = client.lock(name)
    holder.acquire()
    p = spawn_py(SIGUSR1_CHILD, url, name)
    try:
        assert p.stdout.readline().strip() == "waiting", p.stderr.read() if p.poll() else ""
        p.send_signal(signal.SIGUSR1)
        # the child runs its handler and waits again; whenever the release
        # below comes (before or after that), it ends up holding the lock
        time.sleep(0.3)
        assert p.poll() is None
        holder.release()
        out, err = p.communicate(timeout=120)
    finally:
        if p.poll() is None:
            p.kill()
            p.wait()
    assert p.returncode == 0, err
    assert out.strip() == "acquired 1 True", (out, err)


NESTED_CHILD = r"""
import os, signal, sys, threading, time, dlock
url, name = sys.argv[1], sys.argv[2]
c = dlock.Client(url)
inner = c.lock(name + "-inner", timeout=30)
ran, busy = [], []
def usr1(s, f):
    if not busy:  # (a signal during the inner wait runs this again: no third level)
        busy.append(1)
        try:
            with inner:  # a wait of its own, inside the outer one's call
                pass
        finally:
            busy.pop()
    ran.append(s)
signal.signal(signal.SIGUSR1, usr1)
lk = c.lock(name)
def pester():
    while lk.state != dlock.State.WAITING:
        time.sleep(0.005)
    for _ in range(5000):
        os.kill(os.getpid(), signal.SIGUSR1)
        time.sleep(0.0002)
    time.sleep(0.2)
    print("interrupting", len(ran), flush=True)
    os.kill(os.getpid(), signal.SIGINT)
threading.Thread(target=pester, daemon=True).start()
try:
    lk.acquire(timeout=60)
    print("acquired", flush=True)
except KeyboardInterrupt:
    print("interrupted", lk.state.name, flush=True)
except dlock.Timeout:
    print("timed out: Ctrl-C did not reach the wait", flush=True)
c.close()
"""


def test_handler_that_waits_leaves_ctrl_c_working(url, client, name):
    """Handlers that themselves wait on a lock, run again and again during a
    wait (some of them before the wait has begun again): Ctrl-C afterwards
    still ends the outer wait at once. (Before the fix an inner wait left
    the relay with no acquisition: the outer wait went on deaf to signals,
    here until its timeout, in 7 runs of 10.) The relay is the
    package's, the same for every backend: it is tested on the file backend,
    whose waits a signal every 0.2 ms does not outpace."""
    if not url.startswith("file:"):
        pytest.skip("the signal relay does not depend on the backend: tested on file")
    holder = client.lock(name)
    holder.acquire()
    p = spawn_py(NESTED_CHILD, url, name)
    try:
        out, err = p.communicate(timeout=120)
    finally:
        if p.poll() is None:
            p.kill()
            p.wait()
    holder.release()
    lines = out.split("\n")
    assert lines[0].startswith("interrupting ") and int(lines[0].split()[1]) > 0, (out, err)
    assert lines[1] == "interrupted IDLE", (out, err)
    assert p.returncode == 0, err


def test_asyncio_cancel_leaves_nothing(url, client, name):
    holder = client.lock(name)
    holder.acquire()

    async def main():
        with dlock.Client(url) as c2:
            lk = c2.lock(name)
            entered = []

            async def body():
                async with lk:
                    entered.append(True)
            task = asyncio.create_task(body())
            t0 = time.monotonic()
            while lk.state != dlock.State.WAITING:
                assert time.monotonic() - t0 < 30
                await asyncio.sleep(0.01)
            # the loop is not blocked while the acquisition waits
            await asyncio.sleep(0.05)
            task.cancel()
            with pytest.raises(asyncio.CancelledError):
                await task
            assert not entered and lk.state == dlock.State.IDLE
            holder.release()
            async with c2.lock(name, timeout=30) as l3:
                assert l3.held
    asyncio.run(main())


def test_asyncio_loss_cancels_body(client, name):
    async def main():
        reached = []
        with pytest.raises(dlock.Lost):
            async with client.lock(name) as lk:
                lk._force_loss()
                await asyncio.sleep(60)
                reached.append(True)
        assert not reached
        lk2 = client.lock(name)
        await lk2.acquire_async(timeout=30)
        waiter = asyncio.create_task(lk2.wait_lost())
        await asyncio.sleep(0)
        assert not waiter.done()
        lk2._force_loss()
        await asyncio.wait_for(waiter, 30)
        with pytest.raises(dlock.Lost):
            lk2.release()
    asyncio.run(main())


def test_fork_child_cannot_use_parent_client(client, name):
    lk = client.lock(name)
    lk.acquire()
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: Python only, never the parent's library state
        code = 1
        try:
            os.close(r)
            msgs = []
            for fn in (lambda: lk.acquire(timeout=0), lk.release, lambda: client.lock("x"),
                       lambda: client.url, client.close):
                try:
                    fn()
                    msgs.append("no error")
                except dlock.Error as e:
                    msgs.append("fork" if "fork" in str(e) else str(e))
            os.write(w, (",".join(msgs)).encode())
            del msgs, fn
            code = 0
        finally:
            os._exit(code)
    os.close(w)
    with os.fdopen(r) as f:
        said = f.read()
    _, status = os.waitpid(pid, 0)
    assert os.WIFEXITED(status) and os.WEXITSTATUS(status) == 0
    assert said == ",".join(["fork"] * 5), said
    assert lk.held  # the child's exit took nothing from the parent


def test_fork_child_freeing_copies_keeps_parent_lock(url, client, name):
    lk = client.lock(name)
    lk.acquire()
    pid = os.fork()
    if pid == 0:
        try:
            global_refs = [lk, client]
            del global_refs
            gc.collect()
        finally:
            os._exit(0)
    os.waitpid(pid, 0)
    assert lk.held
    with dlock.Client(url) as c2:
        with pytest.raises(dlock.Busy):
            c2.lock(name).acquire(timeout=0)
        # a child may open its own client
    pid = os.fork()
    if pid == 0:
        ok = 1
        try:
            with dlock.Client(url) as c3:
                try:
                    c3.lock(name).acquire(timeout=0)
                except dlock.Busy:
                    ok = 0
        finally:
            os._exit(ok)
    _, status = os.waitpid(pid, 0)
    assert os.WEXITSTATUS(status) == 0
    lk.release()


def test_errors(name):
    with pytest.raises(dlock.InvalidURL):
        dlock.Client("nosuch://x")
    with pytest.raises(dlock.InvalidURL):
        dlock.Client("")
    with dlock.Client("file:///tmp/dlock-py-errors") as c:
        with pytest.raises(dlock.InvalidName):
            c.lock("../x")
        with pytest.raises(ValueError):
            c.lock(name, shared=True, permits=2)
        with pytest.raises(ValueError):
            c.lock(name).acquire(timeout=-1)
    c.close()
    with pytest.raises(dlock.Error, match="closed"):
        c.lock(name)
    assert issubclass(dlock.Timeout, dlock.Error) and dlock.Timeout.code == -4
    if any(b.name == "redis" and b.available for b in dlock.backends()):
        with pytest.raises(dlock.Unreachable):  # at open, or at the first request
            with dlock.Client("redis://127.0.0.1:1", connect_timeout=1) as c:
                c.lock(name).acquire(timeout=0)


def test_backends_and_docs():
    bs = dlock.backends()
    f = [b for b in bs if b.name == "file"][0]
    assert f.available and "file" in f.schemes and f.caps & dlock.Caps.FENCING
    assert dlock.version()
    for obj in (dlock, dlock.Client, dlock.Lock, dlock.Error, dlock.Lost, dlock.Lock.acquire,
                dlock.Lock.release, dlock.Lock.fileno, dlock.Lock.lost, dlock.Lock.token,
                dlock.Client.lock, dlock.Client.campaign, dlock.Client.acquire_all,
                dlock.Client.inspect, dlock.Client.list, dlock.Client.break_,
                dlock.Client.leader, dlock.backends, dlock.State, dlock.Caps, dlock.Info,
                dlock.Client.once, dlock.Client.run_once, dlock.Client.run_once_async,
                dlock.Client.inspect_claim, dlock.Client.forget_claim, dlock.Claim,
                dlock.Claim.begin_async, dlock.Claim.finish_async, dlock.Claim.abandon_async,
                dlock.ClaimInfo, dlock.ClaimState):
        assert obj.__doc__ and obj.__doc__.strip(), obj


def test_close_releases_and_detaches(url, name):
    c = dlock.Client(url)
    lk = c.lock(name)
    lk.acquire()
    c.close()
    c.close()  # twice is fine
    assert c.closed
    with pytest.raises(dlock.Error, match="closed"):
        lk.acquire(timeout=0)
    with dlock.Client(url) as c2:
        with c2.lock(name, timeout=30):  # close() gave it back
            pass
    del lk  # freeing a detached handle is fine
    gc.collect()
