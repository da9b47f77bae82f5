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
``async with client.lock(...)`` works in asyncio. See docs/python.md.
"""
from __future__ import annotations

import asyncio
import atexit
import enum
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
    "Client", "Lock", "State", "Caps", "Info", "Backend", "backends", "version",
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
        loop = asyncio.get_running_loop()
        w = self._start(self.timeout if timeout is ... else _timeout_default(timeout))
        fut = loop.create_future()
        fd = w.fileno()

        def ready() -> None:
            if not fut.done():
                fut.set_result(None)
        loop.add_reader(fd, ready)
        try:
            if not w.done():
                await fut
        except BaseException:
            # Cancelled (or the loop is going): stop the wait, undo it.
            loop.remove_reader(fd)
            w.cancel()
            w.finish(undo=True)
            raise
        loop.remove_reader(fd)
        w.finish()
        return True

    async def release_async(self) -> None:
        """release() without blocking the loop (a network round trip)."""
        loop = asyncio.get_running_loop()
        await loop.run_in_executor(None, self.release)

    async def wait_lost(self) -> None:
        """Return when the held lock is lost (the lost descriptor, read by the loop)."""
        loop = asyncio.get_running_loop()
        fut = loop.create_future()
        fd = self.fileno()

        def ready() -> None:
            if not fut.done():
                fut.set_result(None)
        loop.add_reader(fd, ready)
        try:
            if self.state != State.LOST:
                await fut
        finally:
            loop.remove_reader(fd)

    async def __aenter__(self) -> Lock:
        await self.acquire_async()
        loop = asyncio.get_running_loop()
        task = asyncio.current_task()
        self._aio = [loop, task, False, self.fileno()]

        def on_loss() -> None:
            loop.remove_reader(self._aio[3])
            if task is not None and not task.done():
                self._aio[2] = True
                task.cancel("dlock: lock %r lost" % self.name)
        loop.add_reader(self._aio[3], on_loss)
        return self

    async def __aexit__(self, et, ev, tb) -> None:
        loop, task, cancelled_by_loss, fd = self._aio
        loop.remove_reader(fd)
        del self._aio
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
             timeout: Optional[float] = None) -> Lock:
        """A new :class:`Lock` handle on ``name`` (not yet acquired).

        ttl: lease seconds on lease backends (default 30); fair: FIFO (True),
        any order (False), backend default (None); shared: the reader side of
        a read-write lock; permits: a semaphore of that many holders;
        on_lost(lock): called from a library thread when the held lock is
        lost (must not block); timeout: how long ``with`` waits (None: for
        ever, 0: try once).
        """
        return Lock(self, name, ttl=ttl, fair=fair, shared=shared, permits=permits,
                    on_lost=on_lost, timeout=_timeout_default(timeout))

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
