# SPDX-License-Identifier: MIT
"""dlock — distributed locks over the systems you already run.

One API over every libdlock backend, chosen by URL: the embedded ``file://``
backend (kernel locks, no server), ``redis://`` (and Sentinel, Cluster,
``redlock://``), ``zk://``, ``etcd://``, ``postgres://``, ``mysql://`` and
``memcached://``. Every lock gives a fencing token, says at once when it is
lost (callback, event, descriptor), and waiters sleep instead of polling::

    import dlock

    with dlock.Client("redis://127.0.0.1:6379") as client:
        with client.lock("refund-42", ttl=30, timeout=5) as lk:
            use(lk.token)            # pass the fencing token to what you protect

``dlock.Client()`` with no URL takes ``$DLOCK_URL``, else the embedded file
backend. Errors are ``dlock.Error`` subclasses, one per library code
(``Busy``, ``Timeout``, ``Lost``, ``Unreachable``, ``InvalidURL`` ...).
``async with client.lock(...)`` works in asyncio. Work that must happen
once, even when several processes are asked to do it (a claim)::

    with client.once("refund-42") as job:
        if job.replayed:             # it ran already: its recorded outcome
            reply(job.result)
        else:                        # this caller runs it (job.attempt > 1: a retry)
            job.finish(result=refund())

``async with client.once(...)`` is the same in asyncio; ``client.inspect_claim``
reads a claim's record and ``client.forget_claim`` resets it. See docs/python.md.
"""
from __future__ import annotations

import asyncio
import atexit
import enum
import inspect as _inspect
import os
from typing import Any, Callable, Iterable, List, NamedTuple, Optional, Sequence

from . import _dlock
from ._dlock import (  # noqa: F401  (the exception classes, one per DLOCK_E* code)
    Busy,
    Cancelled,
    Conflict,
    Error,
    InvalidArgument,
    InvalidName,
    InvalidURL,
    IOFailure,
    Lost,
    NotFound,
    NotHeld,
    NotSupported,
    OutOfMemory,
    PermissionDenied,
    ProtocolError,
    Timeout,
    Unreachable,
)

__all__ = [
    "Client", "Lock", "Claim", "ClaimState", "ClaimInfo", "State", "Caps", "Info", "Backend", "backends", "version",
    "Error", "InvalidArgument", "NotSupported", "Busy", "Timeout", "Lost", "NotHeld",
    "Unreachable", "ProtocolError", "OutOfMemory", "Cancelled", "IOFailure",
    "PermissionDenied", "NotFound", "InvalidURL", "InvalidName", "Conflict",
]
__version__ = "0.1.0"

atexit.register(_dlock._shutdown)


class State(enum.IntEnum):
    """The state of a lock handle (dlock_state)."""

    IDLE = 0     #: not held, not waiting
    WAITING = 1  #: inside acquire()
    HELD = 2     #: held
    LOST = 3     #: was held; its lease or session is gone (or it was broken)


class ClaimState(enum.IntEnum):
    """The state of a claim (dlock_claim_state)."""

    RUN = 0        #: this caller runs it (the lock is held)
    DONE = 1       #: it ran: its outcome is recorded
    RUNNING = 2    #: a runner started it (alive or dead)
    ABANDONED = 3  #: its last runner gave it up


class Caps(enum.IntFlag):
    """What a backend (or a client's URL mode) offers: DLOCK_CAP_* bits."""

    NONE = 0
    FENCING = 1 << 0          #: strictly increasing tokens
    FAIR = 1 << 1             #: FIFO waiting available
    SHARED = 1 << 2           #: read-write locks (shared=True)
    SEMAPHORE = 1 << 3        #: counting semaphores (permits=N)
    SESSION = 1 << 4          #: liveness bound to a session/connection
    LEASE = 1 << 5            #: liveness by lease and background renewal
    NATIVE_BLOCKING = 1 << 6  #: waiters sleep in the server or kernel
    ELECTION = 1 << 7         #: native leader election
    FENCING_WEAK = 1 << 8     #: tokens can go back after a server failure
    CLAIMS = 1 << 9           #: keeps claims (dlock once, dlock_claim_begin)


class Info(NamedTuple):
    """What is known about a lock name without taking it (None: unknown)."""

    held: Optional[bool]
    holders: Optional[int]
    waiters: Optional[int]
    token: Optional[int]       #: the last token issued
    held_ms: Optional[int]     #: how long the current holder has held it
    lease_ms: Optional[int]    #: the remaining lease
    holder: Optional[str]      #: who holds it ("pid 123 on host")

    @classmethod
    def _of(cls, t: tuple) -> Info:
        held, holders, waiters, token, held_ms, lease_ms, holder = t
        unk = lambda v: None if v is None or v < 0 else v  # noqa: E731
        return cls(None if held < 0 else bool(held), unk(holders), unk(waiters),
                   token or None, unk(held_ms), unk(lease_ms), holder or None)


class ClaimInfo(NamedTuple):
    """A claim's record read without its lock (:meth:`Client.inspect_claim`)."""

    state: ClaimState             #: DONE, RUNNING (alive or dead) or ABANDONED
    attempt: int                  #: the last attempt begun (1 the first)
    status: int                   #: the recorded status (DONE; else 0)
    result: bytes                 #: the recorded result (DONE; else b"")
    by: str                       #: who ran it ("pid 123 on host")
    started_at: Optional[float]   #: when its run started, seconds since the epoch
    finished_at: Optional[float]  #: when it finished (None: not finished)
    fingerprint: Optional[str]    #: the recorded fingerprint (None: none)

    @classmethod
    def _of(cls, t: tuple) -> ClaimInfo:
        state, attempt, status, result, by, started_ms, finished_ms, fp = t
        return cls(ClaimState(state), attempt, status, result, by,
                   started_ms / 1000.0 if started_ms > 0 else None,
                   finished_ms / 1000.0 if finished_ms > 0 else None, fp or None)


class Backend(NamedTuple):
    """One entry of the backend registry (dlock.backends())."""

    name: str                #: "file", "redis", ...
    schemes: tuple           #: the URL schemes it answers
    caps: Caps               #: what it offers
    available: bool          #: usable in this build
    missing: Optional[str]   #: what is missing when not available
    liveness: Optional[str]  #: how a dead holder loses the lock
    fencing: Optional[str]   #: what the tokens promise


def backends() -> List[Backend]:
    """Every backend libdlock knows, built here or not, with its promises."""
    return [Backend(n, tuple(s.split()), Caps(c), bool(a), m, lv, f)
            for n, s, c, a, m, lv, f in _dlock.backends()]


def version() -> str:
    """libdlock's version at run time."""
    return _dlock.version()


def _uncancel(task: Any) -> None:
    """Take back the cancellation a loss asked for (Python >= 3.11)."""
    if task is not None and hasattr(task, "uncancel"):
        task.uncancel()


async def _readable(fd: int, already: Callable[[], bool]) -> None:
    """Return once fd is readable (read by the loop, which is not blocked),
    at once if already() says so."""
    loop = asyncio.get_running_loop()
    fut = loop.create_future()

    def ready() -> None:
        if not fut.done():
            fut.set_result(None)
    loop.add_reader(fd, ready)
    try:
        if not already():
            await fut
    finally:
        loop.remove_reader(fd)


async def _wait_done(w: Any) -> Any:
    """Await a _Wait (an acquisition or a claim's begin on a worker thread)
    through its descriptor, without blocking the loop; returns what its
    finish() returns. Cancelled (or the loop going): the wait is cancelled
    (dlock_cancel) and whatever it took given back, so nothing is left."""
    try:
        await _readable(w.fileno(), w.done)
    except BaseException:
        w.cancel()
        w.finish(undo=True)
        raise
    return w.finish()


def _timeout_default(timeout: Any) -> Any:
    if timeout is not None and (not isinstance(timeout, (int, float)) or timeout < 0):
        raise ValueError("timeout must be None or a number of seconds >= 0")
    return timeout


class Lock(_dlock.Lock):
    """One lock handle: made by :meth:`Client.lock`, never directly.

    A context manager, for threads and for asyncio::

        with client.lock("name", timeout=5) as lk:      # Timeout after 5 s
            write(data, token=lk.token)
        async with client.lock("name") as lk:           # does not block the loop
            ...

    ``acquire(timeout=None|0|seconds)`` takes it (``Busy`` / ``Timeout``
    when it cannot), ``release()`` gives it back (``Lost`` if it was lost
    meanwhile). Re-acquiring a held handle is re-entry: counted, same token.
    While held: ``token`` (the fencing token), ``held``, ``state``,
    ``valid_ms``. Loss is told three ways: ``on_lost(lock)`` called from a
    library thread (keep it short), ``lost`` (a ``threading.Event``), and
    ``fileno()`` (readable when lost, for select and event loops). Leaving a
    ``with`` block whose lock was lost raises ``Lost``; in ``async with``
    the task is cancelled at the loss and ``Lost`` raised from the block.

    One thread at a time per handle (``cancel()``, ``token``, ``state``,
    ``held`` and ``lost`` are for any thread); a Client is shared freely.
    """

    __slots__ = ("_aio",)

    @property
    def state(self) -> State:
        """The handle's :class:`State` (IDLE, WAITING, HELD, LOST)."""
        return State(self.state_code)

    @property
    def kind(self) -> str:
        """"exclusive", "shared" or "semaphore"."""
        return ("exclusive", "shared", "semaphore")[self._kind[0]]

    @property
    def permits(self) -> Optional[int]:
        """The semaphore's size (None unless permits= was given)."""
        return self._kind[1] or None

    def info(self) -> Info:
        """What the backend says about this lock's name now (Client.inspect)."""
        return Info._of(self.client._inspect(self.name))

    def locked(self) -> bool:
        """True while this handle holds the lock (as ``held``)."""
        return self.held

    def __enter__(self) -> Lock:
        self.acquire()
        return self

    def __exit__(self, et, ev, tb) -> None:
        try:
            self.release()
        except Lost:
            if et is None:
                raise  # the body's own exception wins; the loss is in .lost

    # ---- asyncio -------------------------------------------------------

    async def acquire_async(self, timeout: Any = ...) -> bool:
        """Take the lock without blocking the event loop.

        The wait runs on a worker thread; the loop is told through a
        descriptor. Cancelling the awaiting task cancels the acquisition
        (dlock_cancel) and gives back anything it took: nothing is left on
        the server.
        """
        await _wait_done(self._start(self.timeout if timeout is ... else
                                     _timeout_default(timeout)))
        return True

    async def release_async(self) -> None:
        """release() without blocking the loop (a network round trip)."""
        loop = asyncio.get_running_loop()
        await loop.run_in_executor(None, self.release)

    async def wait_lost(self) -> None:
        """Return when the held lock is lost (the lost descriptor, read by the loop)."""
        await _readable(self.fileno(), lambda: self.state == State.LOST)

    def _watch_loss(self) -> None:
        """While held in ``async with``: a loss cancels the current task."""
        loop = asyncio.get_running_loop()
        task = asyncio.current_task()
        self._aio = [loop, task, False, self.fileno()]

        def on_loss() -> None:
            loop.remove_reader(self._aio[3])
            if task is not None and not task.done():
                self._aio[2] = True
                task.cancel("dlock: lock %r lost" % self.name)
        loop.add_reader(self._aio[3], on_loss)

    def _unwatch_loss(self) -> tuple:
        """End _watch_loss: (the task, whether a loss cancelled it)."""
        loop, task, cancelled_by_loss, fd = self._aio
        loop.remove_reader(fd)
        del self._aio
        return task, cancelled_by_loss

    async def __aenter__(self) -> Lock:
        await self.acquire_async()
        self._watch_loss()
        return self

    async def __aexit__(self, et, ev, tb) -> None:
        task, cancelled_by_loss = self._unwatch_loss()
        try:
            await self.release_async()
        except Lost as e:
            if cancelled_by_loss and et is asyncio.CancelledError:
                _uncancel(task)
                raise e from None
            if et is None:
                raise
            return None
        if cancelled_by_loss and et is asyncio.CancelledError:
            # lost, then the release said nothing (the handle was reset)
            _uncancel(task)
            raise Lost("lock %r lost" % self.name)

    def __repr__(self) -> str:
        try:
            st = self.state.name
        except Error:
            st = "?"
        return "<dlock.Lock %r %s %s>" % (self.name, self.kind, st)


class Client(_dlock.Client):
    """A connection to one lock backend, shared by any number of locks and threads.

    ``Client(url=None, *, connect_timeout=None, op_timeout=None)``: url is a
    dlock URL (``file:///DIR``, ``redis://[:pass@]host:port``,
    ``zk://h1:2181,h2:2181``, ``etcd://h:2379``, ``postgres://u:p@h/db``,
    ``mysql://u:p@h/db``, ``memcached://h:11211`` ...); None takes
    ``$DLOCK_URL``, else the embedded file backend in its default directory.
    Timeouts are seconds (default: the URL's, else 2 s). A context manager:
    leaving it closes the client, releasing every lock still held through it.

    A client belongs to the process that opened it: after ``os.fork()`` the
    child gets ``dlock.Error`` from it and must open its own.
    """

    __slots__ = ()

    def lock(self, name: str, *, ttl: Optional[float] = None, fair: Optional[bool] = None,
             shared: bool = False, permits: Optional[int] = None,
             on_lost: Optional[Callable[[Lock], Any]] = None,
             timeout: Optional[float] = None, max_hold: Optional[float] = None,
             min_hold: Optional[float] = None,
             on_warn: Optional[Callable[[Lock], Any]] = None,
             warn_before: Optional[float] = None) -> Lock:
        """A new :class:`Lock` handle on ``name`` (not yet acquired).

        ttl: lease seconds on lease backends (default 30); fair: FIFO (True),
        any order (False), backend default (None); shared: the reader side of
        a read-write lock; permits: a semaphore of that many holders;
        on_lost(lock): called from a library thread when the held lock is
        lost (must not block); timeout: how long ``with`` waits (None: for
        ever, 0: try once).

        max_hold: seconds after which the lock is given up even while
        renewals succeed (told as a loss: ``on_lost``, ``lost``, ``Lost``
        from release), so that a stuck holder does not keep it for ever.
        min_hold: seconds the lock stays taken at least, counted from the
        acquisition, even when released sooner (a job run from several
        hosts' cron runs once): where the backend has a lease, an early
        release shortens it to end then and returns at once; elsewhere
        release() waits until then. on_warn(lock): called from a library
        thread when renewals have failed for so long that the lease may be
        lost within warn_before seconds (default a third of ttl, at most
        half of it): checkpoint; lease backends and ZooKeeper only.
        """
        return Lock(self, name, ttl=ttl, fair=fair, shared=shared, permits=permits,
                    on_lost=on_lost, timeout=_timeout_default(timeout), max_hold=max_hold,
                    min_hold=min_hold, on_warn=on_warn, warn_before=warn_before)

    def once(self, key: str, *, keep: Optional[float] = None, timeout: Optional[float] = None,
             retry_failed: bool = False, fingerprint: Optional[str] = None,
             ttl: Optional[float] = None, max_hold: Optional[float] = None,
             on_lost: Optional[Callable[[Lock], Any]] = None) -> Claim:
        """A :class:`Claim` on ``key``: work that must happen once (``dlock once``).

        ``with client.once(key) as job:`` begins it. The first caller runs
        it (``job.replayed`` False, ``job.attempt`` 1) under the exclusive
        lock ``key`` and records its outcome with ``job.finish(result=...)``
        (leaving the block normally finishes it with b"" if you did not);
        every later caller within ``keep`` seconds (default one day) gets
        that outcome (``job.replayed`` True, ``job.result``) without
        running it; one that comes while it runs waits (``timeout``: None
        for ever, 0 ``Busy`` at once, seconds ``Timeout``). A block left by
        an exception abandons it: the next caller runs it as attempt N+1, as
        after a crash. retry_failed: a recorded non-zero status runs again.
        fingerprint: what the work is (a hash of the request); a caller with
        another gets ``Conflict``. ttl, max_hold, on_lost: the lock's, as in
        :meth:`lock`. ``NotSupported`` where the backend keeps no claims
        (memcached, redlock). ``async with`` works too (asyncio).
        """
        return Claim(self, key, keep=keep, timeout=_timeout_default(timeout),
                     retry_failed=retry_failed, fingerprint=fingerprint, ttl=ttl,
                     max_hold=max_hold, on_lost=on_lost)

    def run_once(self, key: str, fn: Callable[[Claim], Any], **opts: Any) -> bytes:
        """Run ``fn(job)`` once for ``key`` and return its result (bytes or
        str, recorded), or the result recorded by the caller who ran it.
        opts: as :meth:`once`. An exception from fn abandons the claim and
        propagates."""
        with self.once(key, **opts) as job:
            if job.replayed:
                return job.result
            r = fn(job)
            if job.open:
                job.finish(result=b"" if r is None else r)
        return job.result

    async def run_once_async(self, key: str, fn: Callable[[Claim], Any], **opts: Any) -> bytes:
        """:meth:`run_once` for asyncio: ``fn(job)`` may be a coroutine
        function; waiting for a running claim does not block the loop and
        cancelling the task cancels the wait (``async with client.once()``)."""
        async with self.once(key, **opts) as job:
            if job.replayed:
                return job.result
            r = fn(job)
            if _inspect.isawaitable(r):
                r = await r
            if job.open:
                await job.finish_async(result=b"" if r is None else r)
        return job.result

    def campaign(self, name: str, value: Optional[str] = None, *,
                 timeout: Optional[float] = None, ttl: Optional[float] = None,
                 on_lost: Optional[Callable[[Lock], Any]] = None) -> Lock:
        """Wait to become the leader of ``name``, publishing ``value`` (<= 255 bytes;
        default "pid N on HOST"); returns the held :class:`Lock`. ``lock.resign()``
        gives leadership up; its loss is told as a lock's."""
        if value is None:
            value = "pid %d on %s" % (os.getpid(), os.uname().nodename)
        lk = Lock(self, name, ttl=ttl, on_lost=on_lost, timeout=_timeout_default(timeout))
        lk._campaign(value, timeout)
        return lk

    def acquire_all(self, locks: Sequence[Lock], timeout: Optional[float] = None) -> None:
        """Acquire every lock of ``locks`` or none (in name order, so that two
        callers never deadlock); the timeout covers the whole set."""
        _dlock._acquire_all(list(locks), _timeout_default(timeout))

    def release_all(self, locks: Iterable[Lock]) -> None:
        """Release every held lock of ``locks``; raise the first error seen
        (``Lost`` for one that was lost) after trying all."""
        first = None
        for lk in reversed(list(locks)):
            try:
                lk.release()
            except Error as e:
                first = first or e
        if first is not None:
            raise first

    def inspect(self, name: str) -> Info:
        """What is known about ``name`` without taking it."""
        return Info._of(self._inspect(name))

    def inspect_claim(self, key: str) -> Optional[ClaimInfo]:
        """The claim record of ``key`` read without its lock
        (``dlock_claim_inspect``): a :class:`ClaimInfo` whose state is DONE
        (its outcome), RUNNING (a runner began it: alive, or dead and the next
        caller runs attempt N+1) or ABANDONED; None when there is none (never
        begun, expired, forgotten). ``NotSupported`` where the backend keeps
        no claims."""
        t = self._claim_inspect(key)
        return None if t is None else ClaimInfo._of(t)

    def forget_claim(self, key: str) -> None:
        """An operator's reset (``dlock_claim_forget``): forget the claim
        record of ``key``, so that the next caller runs it again as attempt 1.
        A runner still running is not stopped (break its lock too:
        :meth:`break_`). ``NotFound`` when there was no record."""
        self._claim_forget(key)

    def break_(self, name: str) -> Info:
        """An operator's forced release: every holder of ``name`` loses it now
        (and is told), the next waiter gets a higher token. Returns what was
        held; ``NotHeld`` if nothing was, ``NotSupported`` where the backend
        cannot take a lock from its holder (file://)."""
        return Info._of(self._break(name))

    @property
    def caps(self) -> Caps:
        """What this client offers (its backend's capabilities, narrowed by the URL's mode)."""
        return Caps(self.caps_code)

    def __enter__(self) -> Client:
        return self

    def __exit__(self, et, ev, tb) -> None:
        self.close()

    async def __aenter__(self) -> Client:
        return self

    async def __aexit__(self, et, ev, tb) -> None:
        self.close()

    def __repr__(self) -> str:
        if self.closed:
            return "<dlock.Client closed>"
        try:
            return "<dlock.Client %s>" % self.url
        except Error:
            return "<dlock.Client of process %d>" % self.pid


class Claim:
    """Work that must happen once: made by :meth:`Client.once`, never directly.

    A context manager: ``with client.once("refund-42") as job:`` begins the
    claim (:meth:`begin`). Then either ``job.replayed`` is True (it ran
    already: ``job.result``, ``job.status``, ``job.by``, ``job.attempt`` are
    the recorded ones, nothing to do) or this caller runs it
    (``job.state`` RUN, the lock ``job.lock`` held, ``job.token`` its
    fencing token, ``job.attempt`` > 1 when an earlier runner died or gave
    up: check your own side effects first). ``job.finish(result=b"...",
    status=0)`` records the outcome and releases the lock; leaving the
    block normally does it for you (b"", status 0); leaving it by an
    exception abandons (``job.abandon()``): the next caller runs it again
    as the next attempt. ``Lost`` (nothing recorded) when the lock was lost
    meanwhile (its lease ran out, ``max_hold``, ``dlock break``).

    In asyncio, ``async with client.once(key) as job:`` waits on a worker
    thread (the loop runs on; cancelling the task cancels the wait and
    leaves nothing behind), then behaves as ``with``; a loss of the lock
    cancels the body and raises ``Lost``, as in ``async with
    client.lock()``. ``begin_async``, ``finish_async`` and
    ``abandon_async`` are the awaitable forms.
    """

    __slots__ = ("key", "lock", "keep", "timeout", "retry_failed", "fingerprint_arg", "_c",
                 "_ran")

    def __init__(self, client: Client, key: str, *, keep: Optional[float] = None,
                 timeout: Optional[float] = None, retry_failed: bool = False,
                 fingerprint: Optional[str] = None, ttl: Optional[float] = None,
                 max_hold: Optional[float] = None,
                 on_lost: Optional[Callable[[Lock], Any]] = None) -> None:
        self.key = key
        self.lock = Lock(client, key, ttl=ttl, max_hold=max_hold, on_lost=on_lost)
        self.keep = keep
        self.timeout = timeout
        self.retry_failed = bool(retry_failed)
        self.fingerprint_arg = fingerprint
        self._c: Optional[_dlock._Claim] = None
        self._ran = False

    def begin(self, timeout: Any = ...) -> Claim:
        """Take the lock ``key`` and read the record (``dlock_claim_begin``);
        returns self. Once per Claim."""
        self._check_new()
        tmo = self.timeout if timeout is ... else _timeout_default(timeout)
        self._c = self.lock._claim_begin(self.keep, self.retry_failed, self.fingerprint_arg, tmo)
        self._ran = self._c.open
        return self

    async def begin_async(self, timeout: Any = ...) -> Claim:
        """:meth:`begin` without blocking the event loop: the wait runs on a
        worker thread. Cancelling the awaiting task cancels the wait
        (dlock_cancel) and abandons an attempt it had begun meanwhile: the
        next caller runs it at once, nothing is left held."""
        self._check_new()
        tmo = self.timeout if timeout is ... else _timeout_default(timeout)
        self._c = await _wait_done(self.lock._start_claim(self.keep, self.retry_failed,
                                                          self.fingerprint_arg, tmo))
        self._ran = self._c.open
        return self

    async def finish_async(self, result: Any = b"", status: int = 0) -> None:
        """:meth:`finish` without blocking the loop (a network round trip)."""
        loop = asyncio.get_running_loop()
        await loop.run_in_executor(None, self.finish, result, status)

    async def abandon_async(self) -> None:
        """:meth:`abandon` without blocking the loop."""
        loop = asyncio.get_running_loop()
        await loop.run_in_executor(None, self.abandon)

    def _check_new(self) -> None:
        if self._c is not None:
            raise InvalidArgument("claim %r was already begun: make another with "
                                  "client.once()" % self.key)

    def _begun(self) -> _dlock._Claim:
        if self._c is None:
            raise InvalidArgument("claim %r was not begun (use `with` or begin())" % self.key)
        return self._c

    @property
    def state(self) -> ClaimState:
        """RUN while this caller runs it; DONE once it ran (replayed, or
        finished here); ABANDONED after abandon()."""
        return ClaimState(self._begun().state_code)

    @property
    def replayed(self) -> bool:
        """True when it had run already: its recorded outcome is here, nothing to do."""
        return not self._ran and self._begun().state_code == ClaimState.DONE

    @property
    def open(self) -> bool:
        """True while this caller runs it (begun, neither finished nor abandoned)."""
        return self._c is not None and self._c.open

    @property
    def attempt(self) -> int:
        """This run's attempt number while running (1 the first), else the recorded one."""
        return self._begun().attempt

    @property
    def result(self) -> bytes:
        """The recorded result (b"" until it is finished)."""
        return self._begun().result

    @property
    def status(self) -> int:
        """The recorded status (0: success)."""
        return self._begun().status

    @property
    def by(self) -> str:
        """Who ran it ("pid 123 on host")."""
        return self._begun().by

    @property
    def started_at(self) -> Optional[float]:
        """When its run started, seconds since the epoch (None unknown)."""
        ms = self._begun().started_ms
        return ms / 1000.0 if ms > 0 else None

    @property
    def finished_at(self) -> Optional[float]:
        """When it finished, seconds since the epoch (None not finished)."""
        ms = self._begun().finished_ms
        return ms / 1000.0 if ms > 0 else None

    @property
    def fingerprint(self) -> Optional[str]:
        """The recorded fingerprint (None: none)."""
        return self._begun().fingerprint or None

    @property
    def token(self) -> int:
        """The lock's fencing token while running (0 otherwise)."""
        return self.lock.token

    def finish(self, result: Any = b"", status: int = 0) -> None:
        """Record the outcome (result: bytes, or str as UTF-8, at most 65536
        bytes; status: 0 success, else a failure that ``retry_failed``
        callers run again) and release the lock. ``Lost`` (nothing
        recorded) if the lock was lost or another runner started meanwhile."""
        if isinstance(result, str):
            result = result.encode()
        self._begun().finish(result, status)

    def abandon(self) -> None:
        """Give it up without an outcome and release the lock: the next
        caller runs it as the next attempt. ``Lost`` as finish()."""
        self._begun().abandon()

    def __enter__(self) -> Claim:
        return self.begin()

    def __exit__(self, et, ev, tb) -> None:
        if not self.open:
            return None
        if et is None:
            self.finish()
            return None
        try:
            self.abandon()
        except Error:
            pass  # the body's exception wins; the record still names this attempt

    async def __aenter__(self) -> Claim:
        await self.begin_async()
        if self.open:
            self.lock._watch_loss()
        return self

    async def __aexit__(self, et, ev, tb) -> None:
        task, cancelled_by_loss = (self.lock._unwatch_loss() if hasattr(self.lock, "_aio")
                                   else (None, False))
        lost_here = cancelled_by_loss and et is asyncio.CancelledError
        if lost_here:
            _uncancel(task)
        if self.open:
            if et is None:
                await self.finish_async()
            else:
                try:
                    await self.abandon_async()
                except Error:
                    pass  # the body's exception (or the loss) wins
        if lost_here:
            raise Lost("claim %r: its lock was lost (nothing recorded; the next caller runs "
                       "it again)" % self.key)

    def __repr__(self) -> str:
        if self._c is None:
            return "<dlock.Claim %r not begun>" % self.key
        return "<dlock.Claim %r %s attempt %d>" % (self.key, self.state.name, self.attempt)
