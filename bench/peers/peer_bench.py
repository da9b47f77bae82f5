#!/usr/bin/python3
# SPDX-License-Identifier: MIT
"""peer_bench.py — the workload of `dlock bench`, run with the client a user
would pick instead of dlock, printing the same JSON fields.

    bench/peers/peer_bench.py --peer NAME --url URL [-P N] [-H US] [-D SECS]
                              [--warmup SECS] [--poll-us US] [--json]
    bench/peers/peer_bench.py --list [URL]

URL is the dlock URL of the server (redis://, zk://, postgres://, mysql://,
memcached://, file://, etcd://): each peer reads from it what its own client
needs. The workload is bench's with one name (-K 1): P worker processes,
each with a connection of its own, loop acquire, busy-wait H us, release,
from a common start time; the first --warmup seconds are not counted, then
-D seconds are. Timestamps are CLOCK_MONOTONIC in every worker (Python's
monotonic_ns, Java's nanoTime, Node's hrtime on Linux), so sections of
different processes compare, and the figures are computed as bench computes
them (bench.c compute()): cycle and wait of the sections begun in the window,
hand-over from the release that let a waiter in, overlaps (violations),
fairness, overtaken. Only the Python standard library is needed here; each
peer needs its own client (scripts/install-deps.sh peers).

Peer `etcdctl` (and `dlock-run`, its dlock side) time another workload, as
issue 24's table does: P shell loops (default 4) each running
`etcdctl lock NAME true` (or `dlock run NAME -- true`) over and over;
ops_per_s is runs per second and cycle_* the time of one run.

Workers speak a line protocol on stdin/stdout: "ready" once connected, then
they read "START_NS END_NS", run, and print one "a b c d" line per section
(acquire start, acquired, release start, released) and "done". A worker that
fails prints "error: ..." on stderr and exits non-zero.
Exit status: 0; 1 violations or a worker failed; 64 usage; 69 the peer's
client is not installed (the message says which package brings it).
"""
import argparse
import glob
import heapq
import json
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time
import urllib.parse

HERE = os.path.dirname(os.path.abspath(__file__))
EX_USAGE, EX_UNAVAILABLE = 64, 69

# What each peer is, for the report: the client, what it gives against what
# dlock gives (a fencing token, a release that checks the owner, FIFO).
PEERS = {
    "kazoo": dict(backend="zk", client="kazoo Lock (python3-kazoo)", token=False,
                  owner_check=True, fair=True, needs="python3-kazoo"),
    "curator": dict(backend="zk", client="Apache Curator InterProcessMutex (libcurator-recipes-java, JDK)",
                    token=False, owner_check=True, fair=True,
                    needs="libcurator-recipes-java, a JDK (javac)"),
    # the same, P clients (P sessions) as threads of one JVM: a JVM per
    # process pays its start-up and JIT P times over on a small machine
    "curator-threads": dict(backend="zk", client="Curator InterProcessMutex, P clients in one JVM",
                            token=False, owner_check=True, fair=True,
                            needs="libcurator-recipes-java, a JDK (javac)", one_process=True),
    "redis-py": dict(backend="redis", client="redis-py Lock (python3-redis)", token=False,
                     owner_check=True, fair=False, needs="python3-redis", polls=True),
    "redlock": dict(backend="redis", client="node-redlock 4 on ioredis (npm)", token=False,
                    owner_check=True, fair=False, needs="node, npm modules redlock@4 ioredis",
                    polls=True),
    # not a client anyone would pick: dlock's own protocol with nothing else
    # around it, the floor of dlock's Redis backend (issue 24)
    "redis-c": dict(backend="redis", client="dlock's lock script from a bare hiredis loop",
                    token=True, owner_check=True, fair=True,
                    needs="a C compiler and libhiredis-dev"),
    # bare GET_LOCK / RELEASE_LOCK from the MariaDB connector's blocking
    # calls, as text (pymysql's protocol) and as prepared statements
    # (dlock's): the floor of a GET_LOCK hand-over from C, what a token
    # costs on top of it. Run by name only (not a client anyone would pick,
    # and no token: matrix.sh -p's table compares with the clients people
    # pick).
    "mysql-c": dict(backend="mysql", client="GET_LOCK from a bare libmariadb loop, text",
                    token=False, owner_check=True, fair=True, by_name=True,
                    needs="a C compiler and libmariadb-dev"),
    "mysql-c-prep": dict(backend="mysql",
                         client="GET_LOCK from a bare libmariadb loop, prepared",
                         token=False, owner_check=True, fair=True, by_name=True,
                         needs="a C compiler and libmariadb-dev"),
    # a dlock waiter's take (the take procedure: GET_LOCK and the token's
    # draw in one round trip) from the same bare loop: the server's part of
    # a dlock hand-over, without dlock's client (the procedure is made by a
    # dlock client on first use: $DLOCK runs once first)
    "mysql-c-take": dict(backend="mysql",
                         client="dlock's take procedure from a bare libmariadb loop",
                         token=True, owner_check=True, fair=True, by_name=True,
                         needs="a C compiler, libmariadb-dev and a dlock binary ($DLOCK)"),
    "psycopg2": dict(backend="postgres", client="psycopg2 pg_advisory_lock(hashtext(name))",
                     token=False, owner_check=True, fair=True, needs="python3-psycopg2"),
    "pymysql": dict(backend="mysql", client="pymysql GET_LOCK", token=False, owner_check=True,
                    fair=True, needs="python3-pymysql"),
    "pymemcache": dict(backend="memcached", client="pymemcache add + delete", token=False,
                       owner_check=False, fair=False, needs="python3-pymemcache", polls=True),
    "tooz": dict(backend="*", client="tooz coordinator get_lock (python3-tooz)", token=False,
                 owner_check=None, fair=None, needs="python3-tooz"),
    # the command gets ETCD_LOCK_REV, the lock key's create revision: a token
    "etcdctl": dict(backend="etcd", client="etcdctl lock NAME true", token=True,
                    owner_check=True, fair=True, needs="etcd-client", runs=True),
    "dlock-run": dict(backend="etcd", client="dlock run NAME -- true", token=True,
                      owner_check=True, fair=True, needs="a dlock binary ($DLOCK)", runs=True),
    # dlock's own Python package (python/, issue 29) on any dlock URL:
    # Client(url).lock(name), acquire() from the main thread as a user
    # calls it (the wait on a worker thread, Ctrl-C-able); fairness is the
    # backend's default
    "dlock-py": dict(backend="*", client="dlock Python package (import dlock)", token=True,
                     owner_check=True, fair=None,
                     needs="the dlock package (pip install ./python, or DLOCK_PY_PATH=DIR)"),
}
# tooz's drivers differ in what they give; per backend.
TOOZ = {
    "redis": dict(owner_check=True, fair=False),  # redis-py's Lock underneath
    "postgres": dict(owner_check=True, fair=True),  # pg_advisory_lock on a 2x16-bit md5 key
    "mysql": dict(owner_check=True, fair=False),  # GET_LOCK(name, 0) retried with backoff
    "memcached": dict(owner_check=False, fair=False),  # add retried with backoff; plain delete
    "file": dict(owner_check=True, fair=False),  # fasteners: fcntl lock, blocking
    "zk": dict(owner_check=True, fair=True),  # kazoo's Lock underneath
}


def backend_of(url):
    scheme = url.split("://", 1)[0]
    return {"redis": "redis", "zk": "zk", "postgres": "postgres", "postgresql": "postgres",
            "mysql": "mysql", "memcached": "memcached", "file": "file",
            "etcd": "etcd"}.get(scheme)


def peers_for(backend, by_name=False):
    """The peers of backend that --list names (with by_name: every one that
    runs on it)."""
    out = [p for p, d in PEERS.items()
           if d["backend"] == backend and (by_name or not d.get("by_name"))]
    if backend in TOOZ:
        out.append("tooz")
    if backend:
        out.append("dlock-py")
    return out


def import_dlock():
    """The dlock package: DLOCK_PY_PATH (a pip --target directory) first."""
    extra = os.environ.get("DLOCK_PY_PATH")
    if extra and extra not in sys.path:
        sys.path.insert(0, extra)
    import dlock
    return dlock


def die(code, msg):
    print("peer_bench: " + msg, file=sys.stderr)
    sys.exit(code)


# ---- the peers' clients (in the worker processes) --------------------------

def hostport(u, default_port):
    return u.hostname or "127.0.0.1", u.port or default_port


def zk_hosts(url):
    u = urllib.parse.urlsplit(url)
    q = urllib.parse.parse_qs(u.query)
    session_s = int(q.get("session", ["10000"])[0]) / 1000.0
    return u.netloc.split("@")[-1], max(session_s, 2.0)


def tooz_url(url, backend):
    u = urllib.parse.urlsplit(url)
    if backend == "postgres":
        return urllib.parse.urlunsplit(("postgresql", u.netloc, u.path, "", ""))
    if backend == "zk":
        return "zookeeper://" + u.netloc.split("@")[-1]
    if backend == "file":
        return "file://" + u.path
    return urllib.parse.urlunsplit((u.scheme, u.netloc, u.path, "", ""))


class Peer:
    """acquire() blocks until held; release() gives it back."""


def make_peer(peer, url, name, poll_s):
    backend = backend_of(url)
    u = urllib.parse.urlsplit(url)
    if peer == "kazoo":
        from kazoo.client import KazooClient
        hosts, session_s = zk_hosts(url)
        zk = KazooClient(hosts=hosts, timeout=session_s)
        zk.start(timeout=15)
        lk = zk.Lock("/dlock-peers/" + name, "w%d" % os.getpid())
        p = Peer()
        p.acquire, p.release = lk.acquire, lk.release
        p.close = lambda: (zk.stop(), zk.close())
        return p
    if peer == "redis-py":
        import redis
        host, port = hostport(u, 6379)
        r = redis.Redis(host=host, port=port, password=u.password,
                        db=int(u.path.strip("/") or 0))
        # sleep: the poll interval of a waiter (redis-py polls; its default
        # is 0.1 s, which no one wanting speed keeps).
        lk = r.lock(name, timeout=30, sleep=poll_s)
        p = Peer()
        p.acquire, p.release = lk.acquire, lk.release
        p.close = r.close
        return p
    if peer == "psycopg2":
        import psycopg2
        host, port = hostport(u, 5432)
        conn = psycopg2.connect(host=host, port=port, user=urllib.parse.unquote(u.username or ""),
                                password=urllib.parse.unquote(u.password or ""),
                                dbname=u.path.strip("/") or None)
        conn.autocommit = True
        cur = conn.cursor()

        def acq():
            cur.execute("SELECT pg_advisory_lock(hashtext(%s))", (name,))
            cur.fetchone()

        def rel():
            cur.execute("SELECT pg_advisory_unlock(hashtext(%s))", (name,))
            if cur.fetchone()[0] is not True:
                raise RuntimeError("pg_advisory_unlock: the lock was not held")
        p = Peer()
        p.acquire, p.release, p.close = acq, rel, conn.close
        return p
    if peer == "pymysql":
        import pymysql
        host, port = hostport(u, 3306)
        conn = pymysql.connect(host=host, port=port, user=urllib.parse.unquote(u.username or ""),
                               password=urllib.parse.unquote(u.password or ""),
                               database=u.path.strip("/") or None, autocommit=True)
        cur = conn.cursor()

        def acq():
            cur.execute("SELECT GET_LOCK(%s, 3600)", (name,))
            if cur.fetchone()[0] != 1:
                raise RuntimeError("GET_LOCK did not grant the lock")

        def rel():
            cur.execute("SELECT RELEASE_LOCK(%s)", (name,))
            if cur.fetchone()[0] != 1:
                raise RuntimeError("RELEASE_LOCK: the lock was not held")
        p = Peer()
        p.acquire, p.release, p.close = acq, rel, conn.close
        return p
    if peer == "pymemcache":
        from pymemcache.client.base import Client
        host, port = hostport(u, 11211)
        mc = Client((host, port), no_delay=True)
        me = ("w%d" % os.getpid()).encode()

        def acq():
            # no blocking primitive: add until it is stored, polling
            while not mc.add(name, me, expire=30, noreply=False):
                time.sleep(poll_s)

        def rel():
            mc.delete(name, noreply=False)
        p = Peer()
        p.acquire, p.release, p.close = acq, rel, mc.close
        return p
    if peer == "dlock-py":
        dlock = import_dlock()
        client = dlock.Client(url)
        lk = client.lock(name)

        def acq():
            lk.acquire()
        p = Peer()
        p.acquire, p.release, p.close = acq, lk.release, client.close
        return p
    if peer == "tooz":
        from tooz import coordination
        member = ("w%d" % os.getpid()).encode()
        coord = coordination.get_coordinator(tooz_url(url, backend), member)
        coord.start()
        lk = coord.get_lock(name.encode())

        def acq():
            if not lk.acquire(blocking=True):
                raise RuntimeError("tooz acquire returned False")

        def rel():
            if not lk.release():
                raise RuntimeError("tooz release returned False")
        p = Peer()
        p.acquire, p.release, p.close = acq, rel, coord.stop
        return p
    raise ValueError("no Python client for peer " + peer)


def worker(a):
    """One worker process: connect, say ready, run, print the sections."""
    try:
        p = make_peer(a.worker, a.url, a.name, a.poll_us / 1e6)
    except Exception as e:  # the client's own exception types vary
        print("error: connecting: %s" % e, file=sys.stderr)
        return 1
    print("ready", flush=True)
    line = sys.stdin.readline().split()
    if len(line) != 2:
        return 1
    start, end = int(line[0]), int(line[1])
    hold = a.hold_us * 1000
    now = time.monotonic_ns
    if start - now() > 1000000:
        time.sleep((start - now() - 500000) / 1e9)
    while now() < start:
        pass
    recs = []
    try:
        while True:
            t_a = now()
            if t_a >= end:
                break
            p.acquire()
            t_b = now()
            if hold > 0:
                while now() < t_b + hold:
                    pass
            t_c = now()
            p.release()
            recs.append("%d %d %d %d" % (t_a, t_b, t_c, now()))
    except Exception as e:
        print("error: %s" % e, file=sys.stderr)
        return 1
    sys.stdout.write("\n".join(recs) + ("\n" if recs else "") + "done\n")
    sys.stdout.flush()
    try:
        p.close()
    except Exception:
        pass
    return 0


# ---- the harness ------------------------------------------------------------

def available(peer):
    """None when the peer can run here, else what is missing."""
    if peer in ("kazoo", "redis-py", "psycopg2", "pymysql", "pymemcache", "tooz"):
        mod = {"kazoo": "kazoo", "redis-py": "redis", "psycopg2": "psycopg2",
               "pymysql": "pymysql", "pymemcache": "pymemcache", "tooz": "tooz"}[peer]
        try:
            __import__(mod)
        except ImportError:
            return PEERS[peer]["needs"]
        return None
    if peer == "dlock-py":
        try:
            import_dlock()
        except ImportError:
            return PEERS[peer]["needs"]
        return None
    if peer in ("curator", "curator-threads"):
        if not shutil.which("javac") or not os.path.exists(CURATOR_JARS[0]):
            return PEERS[peer]["needs"]
        return None
    if peer == "redlock":
        if not shutil.which("node") or not os.path.isdir(os.path.join(NODE_DIR, "node_modules", "redlock")):
            return PEERS[peer]["needs"] + " (scripts/install-deps.sh peers)"
        return None
    if peer == "redis-c":
        ok = shutil.which("cc") and os.path.exists("/usr/include/hiredis/hiredis.h")
        return None if ok else PEERS[peer]["needs"]
    if peer in MYSQL_C:
        ok = shutil.which("cc") and os.path.exists("/usr/include/mariadb/mysql.h")
        ok = ok and (peer != "mysql-c-take" or dlock_bin())
        return None if ok else PEERS[peer]["needs"]
    if peer == "etcdctl":
        return None if shutil.which("etcdctl") else PEERS[peer]["needs"]
    if peer == "dlock-run":
        return None if dlock_bin() else PEERS[peer]["needs"]
    return "unknown peer"


JAVA = "/usr/share/java/"
with open(os.path.join(HERE, "curator.jars"), encoding="utf-8") as _f:
    CURATOR_JARS = [JAVA + j.strip() + ".jar" for j in _f
                    if j.strip() and not j.startswith("#")]
NODE_DIR = os.environ.get("DLOCK_PEERS_NODE_DIR", os.path.join(HERE, "node"))


def dlock_bin():
    d = os.environ.get("DLOCK")
    if d:
        return d
    b = os.path.join(HERE, "..", "..", "build", "dlock")
    return b if os.access(b, os.X_OK) else shutil.which("dlock")


def worker_cmd(a, tmp, name):
    if a.peer in ("curator", "curator-threads"):
        cp = ":".join([tmp] + [j for j in CURATOR_JARS if os.path.exists(j)])
        hosts, session_s = zk_hosts(a.url)
        return ["java", "-Xss512k", "-XX:+UseSerialGC", "-cp", cp, "CuratorPeer", hosts,
                str(int(session_s * 1000)), "/dlock-peers/" + name, str(a.H),
                str(a.P if a.peer == "curator-threads" else 1)]
    if a.peer == "redis-c":
        host, port = hostport(urllib.parse.urlsplit(a.url), 6379)
        return [os.path.join(tmp, "redis_min"), host, str(port), name, str(a.H), REDIS_LUA]
    if a.peer in MYSQL_C:
        u = urllib.parse.urlsplit(a.url)
        host, port = hostport(u, 3306)
        return [os.path.join(tmp, "mysql_min"), host, str(port),
                urllib.parse.unquote(u.username or ""), urllib.parse.unquote(u.password or ""),
                u.path.strip("/"), name, str(a.H),
                {"mysql-c-prep": "prep", "mysql-c-take": "take:" + TAKE_PROC}.get(a.peer, "text")]
    if a.peer == "redlock":
        return ["node", os.path.join(HERE, "redlock_peer.js"), a.url, name, str(a.H),
                str(max(1, a.poll_us // 1000))]
    return [sys.executable, os.path.abspath(__file__), "--worker", a.peer, "--url", a.url,
            "--name", name, "--hold-us", str(a.H), "--poll-us", str(a.poll_us)]


REDIS_LUA = os.path.join(HERE, "..", "..", "src", "backends", "redis", "lock.lua")


MYSQL_C = ("mysql-c", "mysql-c-prep", "mysql-c-take")
TAKE_PROC = "dlock_live_take2"  # the default table's (src/backends/mysql/mysql.c, build_sql)


def cc_worker(tmp, name, *flags):
    """Build the C worker NAME.c of this directory into tmp/NAME."""
    r = subprocess.run(["cc", "-O2", "-o", os.path.join(tmp, name), os.path.join(HERE, name + ".c")]
                       + list(flags), stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    if r.returncode != 0:
        die(1, "cc %s.c failed:\n%s" % (name, r.stdout))


def prepare(a, tmp):
    if a.peer == "redis-c":
        cc_worker(tmp, "redis_min", "-lhiredis")
    if a.peer in MYSQL_C:
        cc_worker(tmp, "mysql_min", "-I/usr/include/mariadb", "-lmariadb")
    if a.peer == "mysql-c-take":  # dlock makes its tables and procedures on first use
        r = subprocess.run([dlock_bin(), "--url", a.url, "run", "peer-bench-setup", "--", "true"],
                           stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        if r.returncode != 0:
            die(1, "dlock could not make its take procedure: " + r.stdout.strip()[-300:])
    if a.peer in ("curator", "curator-threads"):
        cp = ":".join(j for j in CURATOR_JARS if os.path.exists(j))
        r = subprocess.run(["javac", "-nowarn", "-d", tmp, "-cp", cp,
                            os.path.join(HERE, "CuratorPeer.java")],
                           stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        if r.returncode != 0:
            die(1, "javac CuratorPeer.java failed:\n" + r.stdout)


def pct(sorted_v, permille):
    """bench_common.c ms_pct: nearest rank."""
    n = len(sorted_v)
    if n == 0:
        return 0
    rank = min(max((n * permille + 999) // 1000, 1), n)
    return sorted_v[rank - 1]


def compute(recs, P, win_start, win_end):
    """recs: one list of (a, b, c, d) per worker. As bench.c compute() with
    one name."""
    s = dict(n=0, violations=0, overtaken=0, handovers=0, handovers_all=0)
    cyc, wai, ho = [], [], []
    per = [0] * P
    allr = []
    for w, rs in enumerate(recs):
        for r in rs:
            allr.append(r)
            if win_start <= r[0] < win_end:
                cyc.append(r[3] - r[0])
                wai.append(r[1] - r[0])
                per[w] += 1
    s["n"] = len(cyc)
    allr.sort(key=lambda r: r[1])
    rel = sorted(r[2] for r in allr)
    active = []  # release starts of sections still held (a heap in bench.c)
    latest = None
    j = 0
    for r in allr:
        while active and active[0] <= r[1]:
            heapq.heappop(active)
        s["violations"] += len(active)
        heapq.heappush(active, r[2])
        while j < len(rel) and rel[j] < r[1]:
            j += 1
        counted = win_start <= r[0] < win_end
        if j > 0 and r[0] < rel[j - 1]:
            s["handovers_all"] += 1
            if counted:
                ho.append(r[1] - rel[j - 1])
        if latest is not None and latest > r[0] and counted:
            s["overtaken"] += 1
        if latest is None or r[0] > latest:
            latest = r[0]
    cyc.sort(), wai.sort(), ho.sort()
    s["handovers"] = len(ho)
    s["total"] = len(allr)
    s.update(cycle50=pct(cyc, 500), cycle99=pct(cyc, 990), wait50=pct(wai, 500),
             wait99=pct(wai, 990), ho50=pct(ho, 500), ho99=pct(ho, 990))
    s["fmin"], s["fmax"] = min(per), max(per)
    s["measured_s"] = (win_end - win_start) / 1e9
    return s


def run_locks(a, tmp):
    """The lock workload: P workers, one name. Returns (stats, failures)."""
    name = "peer-%d-%d" % (os.getpid(), int(time.time() * 1000) % 1000000)
    if a.peer == "tooz" and backend_of(a.url) == "file":
        os.makedirs(urllib.parse.urlsplit(a.url).path, exist_ok=True)
    cmd = worker_cmd(a, tmp, name)
    procs = []
    errs = []
    nproc = 1 if PEERS[a.peer].get("one_process") else a.P
    try:
        for i in range(nproc):
            ef = open(os.path.join(tmp, "err%d" % i), "w+")
            errs.append(ef)
            procs.append(subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                          stderr=ef, text=True, bufsize=1))
        for i, p in enumerate(procs):
            if p.stdout.readline().strip() != "ready":
                p.wait()
                errs[i].seek(0)
                die(1, "%s worker %d did not start: %s" % (a.peer, i, errs[i].read().strip()[-2000:]))
        t0 = time.monotonic_ns() + 50000000
        win_start = t0 + int(a.warmup * 1e9)
        win_end = win_start + int(a.D * 1e9)
        for p in procs:
            p.stdin.write("%d %d\n" % (t0, win_end))
            p.stdin.flush()
        recs, failed = [], []
        for i, p in enumerate(procs):
            rs = []
            done = False
            for line in p.stdout:
                f = line.split()
                if f == ["done"]:
                    done = True
                    break
                if f == ["next"]:  # the next client of a process of several
                    recs.append(rs)
                    rs = []
                    continue
                rs.append(tuple(int(x) for x in f))
            recs.append(rs)
            if p.wait() != 0 or not done:
                errs[i].seek(0)
                failed.append("worker %d: %s" % (i, errs[i].read().strip()[-500:] or "exit %s" % p.returncode))
        if not failed and len(recs) != a.P:
            failed.append("%d clients' sections, not %d" % (len(recs), a.P))
        recs += [[] for _ in range(a.P - len(recs))]
        return compute(recs, a.P, win_start, win_end), failed
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait()
        for e in errs:
            e.close()


def run_runs(a, tmp):
    """etcdctl / dlock-run: P loops running the command, runs per second."""
    name = "peer-%d" % os.getpid()
    if a.peer == "etcdctl":
        u = urllib.parse.urlsplit(a.url)
        eps = ",".join("http://" + h for h in u.netloc.split("@")[-1].split(","))
        cmd = ["etcdctl", "--endpoints=" + eps, "lock", name, "true"]
    else:
        cmd = [dlock_bin(), "--url", a.url, "run", name, "--", "true"]
    t0 = time.monotonic_ns()
    win_start = t0 + int(a.warmup * 1e9)
    win_end = win_start + int(a.D * 1e9)
    # the loops are the harness's own threads: each starts a run as soon as
    # its last one ended, as a shell loop would
    recs = [[] for _ in range(a.P)]
    failed = []

    def loop(i):
        while True:
            b = time.monotonic_ns()
            if b >= win_end:
                return
            r = subprocess.run(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
            e = time.monotonic_ns()
            if r.returncode != 0:
                failed.append("loop %d: exit %d: %s" % (i, r.returncode, r.stderr.decode()[-300:].strip()))
                return
            recs[i].append((b, e))
    ts = [threading.Thread(target=loop, args=(i,)) for i in range(a.P)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    cyc = sorted(e - b for rs in recs for b, e in rs if win_start <= b < win_end)
    per = [sum(1 for b, e in rs if win_start <= b < win_end) for rs in recs]
    s = dict(n=len(cyc), violations=0, overtaken=None, handovers=0, handovers_all=0,
             total=sum(len(rs) for rs in recs), cycle50=pct(cyc, 500), cycle99=pct(cyc, 990),
             wait50=0, wait99=0, ho50=0, ho99=0, fmin=min(per), fmax=max(per),
             measured_s=(win_end - win_start) / 1e9)
    return s, failed


def client_version(peer):
    """The peer client's version, for the line's "version" (dlock's is its own)."""
    try:
        if peer in ("kazoo", "redis-py", "psycopg2", "pymysql", "pymemcache", "tooz"):
            if peer == "kazoo":
                from kazoo.version import __version__ as v
                return "kazoo " + v
            if peer == "tooz":
                from importlib.metadata import version
                return "tooz " + version("tooz")
            mod = __import__({"redis-py": "redis"}.get(peer, peer))
            return "%s %s" % (peer, getattr(mod, "__version__", "?").split()[0])
        if peer == "dlock-py":
            dlock = import_dlock()
            return "dlock-py %s (libdlock %s)" % (dlock.__version__, dlock.version())
        if peer in ("curator", "curator-threads"):
            jars = sorted(glob.glob(JAVA + "curator-recipes-[0-9]*.jar"))
            return "curator " + os.path.basename(jars[-1])[16:-4] if jars else None
        if peer == "redlock":
            with open(os.path.join(NODE_DIR, "node_modules", "redlock", "package.json")) as f:
                return "redlock " + json.load(f)["version"]
        if peer == "etcdctl":
            out = subprocess.run(["etcdctl", "version"], capture_output=True, text=True).stdout
            return out.splitlines()[0] if out else None
        if peer == "dlock-run":
            out = subprocess.run([dlock_bin(), "--version"], capture_output=True, text=True).stdout
            return out.strip() or None
    except (OSError, ImportError, ValueError, KeyError):
        return None
    return None


def emit(a, s, failed):
    info = dict(PEERS[a.peer])
    backend = backend_of(a.url)
    if a.peer == "tooz":
        info.update(TOOZ.get(backend, {}))
    us = lambda ns, present: round(ns / 1000.0, 2) if present else None
    runs = info.get("runs", False)
    d = {
        "backend": backend, "url": redact(a.url), "peer": a.peer, "peer_client": info["client"],
        "peer_gives": {"token": info["token"], "owner_check": info["owner_check"],
                       "fair": info["fair"]},
        "workload": "runs" if runs else "locks",
        "P": a.P, "K": 1, "H": a.H, "D": a.D, "warmup": a.warmup,
        "n": s["n"], "ops_per_s": round(s["n"] / s["measured_s"], 1) if s["measured_s"] > 0 else 0.0,
        "measured_s": s["measured_s"],
        "cycle_p50_us": us(s["cycle50"], s["n"] > 0), "cycle_p99_us": us(s["cycle99"], s["n"] > 0),
        "wait_p50_us": us(s["wait50"], s["n"] > 0 and not runs),
        "wait_p99_us": us(s["wait99"], s["n"] > 0 and not runs),
        "handover_p50_us": us(s["ho50"], s["handovers"] > 0),
        "handover_p99_us": us(s["ho99"], s["handovers"] > 0),
        "handovers": s["handovers"], "violations": s["violations"],
        "fairness_min_max": [s["fmin"], s["fmax"]], "overtaken": s["overtaken"],
        "kind": "exclusive", "fair": info["fair"], "pick": "random", "ttl_ms": None,
        "procs": 1 if info.get("one_process") else a.P,
        "threads_per_proc": a.P if info.get("one_process") else 1, "handles": "cached",
        "sections_checked": s["total"], "dropped": 0, "prepare_per_name_us": None,
        "rtt_p50_us": None, "rtt_p99_us": None, "cycle_rtt_ratio": None,
        "handover_rtt_ratio": None, "handovers_all": s["handovers_all"],
        "server_commands": None, "server_commands_per_section": None,
        "server_commands_per_handover": None, "version": client_version(a.peer),
    }
    if a.peer in ("redis-py", "redlock", "pymemcache"):
        d["poll_us"] = a.poll_us if a.peer != "redlock" else max(1, a.poll_us // 1000) * 1000
    if failed:
        d["failures"] = failed
    if a.json:
        print(json.dumps(d, separators=(",", ":")))
    else:
        print("%s on %s (%s): P %d, H %d us, %.1f s" % (a.peer, backend, info["client"], a.P, a.H, a.D))
        for k in ("n", "ops_per_s", "cycle_p50_us", "cycle_p99_us", "wait_p50_us",
                  "handover_p50_us", "handover_p99_us", "violations", "fairness_min_max", "overtaken"):
            print("  %-16s %s" % (k, d[k]))
        for f in failed:
            print("  failure: " + f)


def redact(url):
    u = urllib.parse.urlsplit(url)
    if u.password:
        return url.replace(":" + u.password + "@", ":***@", 1)
    return url


def main():
    ap = argparse.ArgumentParser(description="dlock bench's workload, with a peer's client")
    ap.add_argument("--peer")
    ap.add_argument("--url")
    ap.add_argument("-P", type=int, default=1)
    ap.add_argument("-H", type=int, default=0, help="hold, microseconds")
    ap.add_argument("-D", type=float, default=5.0)
    ap.add_argument("--warmup", type=float, default=1.0)
    ap.add_argument("--poll-us", type=int, default=100,
                    help="poll interval of peers that poll (redis-py, pymemcache; node-redlock: "
                         "rounded up to ms); default 100")
    ap.add_argument("--json", action="store_true")
    ap.add_argument("--list", nargs="?", const="", metavar="URL")
    ap.add_argument("--worker", help=argparse.SUPPRESS)
    ap.add_argument("--name", help=argparse.SUPPRESS)
    ap.add_argument("--hold-us", type=int, default=0, help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.worker:
        return worker(a)
    if a.list is not None:
        for p in (peers_for(backend_of(a.list)) if a.list else PEERS):
            why = available(p)
            print("%-16s %-10s %s" % (p, PEERS[p]["backend"], "ok" if why is None else "missing: " + why))
        return 0
    if not a.peer or not a.url:
        die(EX_USAGE, "--peer and --url are needed (--list shows the peers)")
    if a.peer not in PEERS:
        die(EX_USAGE, "unknown peer %s (one of %s)" % (a.peer, ", ".join(PEERS)))
    backend = backend_of(a.url)
    if backend is None or a.peer not in peers_for(backend, by_name=True):
        die(EX_USAGE, "peer %s does not run on %s" % (a.peer, redact(a.url)))
    if a.P < 1 or a.P > 512 or a.H < 0 or a.D <= 0 or a.warmup < 0 or a.poll_us < 1:
        die(EX_USAGE, "wants -P 1..512, -H >= 0, -D > 0, --warmup >= 0, --poll-us >= 1")
    why = available(a.peer)
    if why is not None:
        die(EX_UNAVAILABLE, "peer %s is not installed here: needs %s" % (a.peer, why))
    if PEERS[a.peer].get("runs") and a.P == 1 and "-P" not in sys.argv:
        a.P = 4
    tmp = tempfile.mkdtemp(prefix="dlock-peer.")
    try:
        prepare(a, tmp)
        s, failed = (run_runs if PEERS[a.peer].get("runs") else run_locks)(a, tmp)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    emit(a, s, failed)
    return 1 if (s["violations"] or failed) else 0


if __name__ == "__main__":
    sys.exit(main())
