#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""kazoo_lock.py -- kazoo's own locks (Debian's python3-kazoo), for
tests/zk_peers_test.sh: the peer dlock's ?layout=kazoo locks beside.

    kazoo_lock.py HOSTS SESSION_MS PATH KIND MODE [ARGS]

KIND: lock (Lock), read (ReadLock) or write (WriteLock). MODE as in
CuratorLock.java: hold (print "held", wait for a line on stdin, release,
print "released"), try ("held" or "busy"), count FILE SECS THREADS (THREADS
clients, each its own session, add one to FILE under the lock until SECS
have passed; print "count N").
"""
import sys
import threading
import time

from kazoo.client import KazooClient


def client(hosts, session_ms):
    c = KazooClient(hosts=hosts, timeout=session_ms / 1000.0)
    c.start(timeout=15)
    return c


def lock(c, path, kind):
    make = {"lock": c.Lock, "read": c.ReadLock, "write": c.WriteLock}.get(kind)
    if not make:
        sys.exit("kazoo_lock.py: KIND is lock, read or write, not " + kind)
    return make(path, "kazoo-test")


def main():
    hosts, session_ms, path, kind, mode = sys.argv[1:6]
    session_ms = int(session_ms)
    if mode == "count":
        fname, secs, threads = sys.argv[6], float(sys.argv[7]), int(sys.argv[8])
        end = time.monotonic() + secs
        clients = [client(hosts, session_ms) for _ in range(threads)]
        counts = [0] * threads
        errs = []

        def loop(i):
            try:
                m = lock(clients[i], path, kind)
                while time.monotonic() < end:
                    with m:
                        with open(fname) as f:
                            v = int(f.read().strip()) + 1
                        with open(fname, "w") as f:
                            f.write("%d\n" % v)
                    counts[i] += 1
            except Exception as e:  # reported, and the exit says so
                errs.append(repr(e))

        ts = [threading.Thread(target=loop, args=(i,)) for i in range(threads)]
        for t in ts:
            t.start()
        for t in ts:
            t.join()
        for c in clients:
            c.stop()
            c.close()
        if errs:
            sys.exit("kazoo_lock.py: " + errs[0])
        print("count %d" % sum(counts), flush=True)
        return
    c = client(hosts, session_ms)
    m = lock(c, path, kind)
    if mode == "try":
        got = m.acquire(blocking=False)
        print("held" if got else "busy", flush=True)
        if got:
            m.release()
    elif mode == "hold":
        m.acquire()
        print("held", flush=True)
        sys.stdin.readline()
        m.release()
        print("released", flush=True)
    else:
        sys.exit("kazoo_lock.py: MODE is hold, try or count, not " + mode)
    c.stop()
    c.close()


if __name__ == "__main__":
    main()
