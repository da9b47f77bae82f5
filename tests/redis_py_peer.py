# SPDX-License-Identifier: MIT
"""redis_py_peer.py -- redis-py's Lock, the peer of dlock's key= layout in
tests/interop_redis_test.sh (and tests/interop_redis_handover.py).

    redis_py_peer.py URL KEY hold TTL_S      take KEY (waiting), print "held",
                                             release when stdin closes
                                             ("released", or "lost" if it was
                                             not ours any more)
    redis_py_peer.py URL KEY try TTL_S       try once: exit 0 taken (and
                                             released), 1 held by another
    redis_py_peer.py URL KEY wait TTL_S      wait, print "got TIME_NS", release
    redis_py_peer.py URL KEY count TTL_S FILE SECS
                                             for SECS seconds: take KEY, read
                                             the number in FILE, pause, write
                                             it + 1, release; print how many
"""
import sys
import time

import redis


def main():
    url, key, mode, ttl = sys.argv[1], sys.argv[2], sys.argv[3], float(sys.argv[4])
    r = redis.Redis.from_url(url.split("?")[0])
    # sleep: redis-py's poll interval while waiting (its default is 0.1 s)
    lock = r.lock(key, timeout=ttl, sleep=0.01)
    if mode == "try":
        if not lock.acquire(blocking=False):
            return 1
        lock.release()
        return 0
    if mode == "hold":
        lock.acquire()
        print("held", flush=True)
        sys.stdin.read()
        try:
            lock.release()
            print("released", flush=True)
        except redis.exceptions.LockError:
            print("lost", flush=True)
        return 0
    if mode == "wait":
        lock.acquire()
        print("got %d" % time.monotonic_ns(), flush=True)
        lock.release()
        return 0
    if mode == "count":
        path, secs = sys.argv[5], float(sys.argv[6])
        end = time.monotonic() + secs
        n = 0
        while time.monotonic() < end:
            with r.lock(key, timeout=ttl, sleep=0.002):
                with open(path) as f:
                    v = int(f.read().strip() or 0)
                time.sleep(0.001)  # a lost update shows, were two inside
                with open(path, "w") as f:
                    f.write("%d\n" % (v + 1))
            n += 1
        print(n, flush=True)
        return 0
    print("unknown mode " + mode, file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main())
