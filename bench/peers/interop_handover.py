# SPDX-License-Identifier: MIT
"""interop_handover.py -- the hand-over between dlock's key= layout and
redis-py's Lock on one key: from the moment the holder starts to let go to
the moment the waiter (waiting for WAIT_S already) has the lock, N rounds
of each pairing, median and p90 in ms. Measures, asserts nothing.

    python3 interop_handover.py DLOCK REDIS_URL [N] [WAIT_S] [PY_SLEEP_S]

A dlock holder is `dlock hold` let go with SIGTERM (the signal's delivery is
in the figure); a dlock waiter is `dlock hold`, which has the lock when it
prints the token. redis-py waits with Lock(sleep=PY_SLEEP_S) (its default
is 0.1 s).
"""
import os
import signal
import statistics
import subprocess
import sys
import threading
import time

import redis


def main():
    dl, url = sys.argv[1], sys.argv[2]
    n = int(sys.argv[3]) if len(sys.argv) > 3 else 20
    wait_s = float(sys.argv[4]) if len(sys.argv) > 4 else 0.3
    py_sleep = float(sys.argv[5]) if len(sys.argv) > 5 else 0.1
    r = redis.Redis.from_url(url)
    kurl = url + "?key=lock:{name}"

    def dl_hold(name):
        p = subprocess.Popen([dl, "--url", kurl, "hold", name], stdout=subprocess.PIPE,
                             stderr=subprocess.DEVNULL, text=True)
        return p

    def py_waiter(name, out):
        lk = r.lock("lock:" + name, timeout=30, sleep=py_sleep)
        lk.acquire()
        out.append(time.monotonic_ns())
        lk.release()

    res = {}
    for holder in ("redis-py", "dlock"):
        for waiter in ("redis-py", "dlock"):
            samples = []
            for i in range(n):
                name = "ho-%s-%s-%d-%d" % (holder, waiter, os.getpid(), i)
                if holder == "redis-py":
                    h = r.lock("lock:" + name, timeout=30)
                    h.acquire()
                else:
                    h = dl_hold(name)
                    h.stdout.readline()  # the token: held
                got = []
                if waiter == "redis-py":
                    w = threading.Thread(target=py_waiter, args=(name, got))
                    w.start()
                else:
                    w = dl_hold(name)
                time.sleep(wait_s)
                t0 = time.monotonic_ns()
                if holder == "redis-py":
                    h.release()
                else:
                    h.send_signal(signal.SIGTERM)
                if waiter == "redis-py":
                    w.join()
                    t1 = got[0]
                else:
                    w.stdout.readline()
                    t1 = time.monotonic_ns()
                    w.send_signal(signal.SIGTERM)
                    w.wait()
                if holder == "dlock":
                    h.wait()
                samples.append((t1 - t0) / 1e6)
            samples.sort()
            res[(holder, waiter)] = samples
            print("%-8s -> %-8s  median %6.1f ms  p90 %6.1f ms  (n=%d)" % (
                holder, waiter, statistics.median(samples), samples[int(0.9 * (n - 1))], n),
                flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
