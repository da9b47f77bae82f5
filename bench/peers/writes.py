#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""writes.py — the server's own count of its writes, read before and after a
run, so that dlock and each peer can be compared on writes per section
(issue 24: on servers with their production durability every write to the
log is a flush, and a write that looks free with fsync off is not).

    bench/peers/writes.py read URL        one JSON object: the counters now
    bench/peers/writes.py add BEFORE AFTER   reads a bench JSON line on stdin,
                                          prints it with the deltas added

Counters, by backend (standard library and the servers' own CLIs only):
  zk        the last zxid (`srvr`): one per write transaction (create,
            delete, setData, a multi, a session's creation and close)
  postgres  pg_stat_wal: wal_records (WAL records written) and wal_sync
            (WAL flushes; 0 with fsync off), by psql
  mysql     SHOW GLOBAL STATUS: Handler_write + Handler_update +
            Handler_delete (row writes; MariaDB counts the temporary table
            SHOW itself fills apart, as Handler_tmp_*) and
            Innodb_data_fsyncs (log and data file flushes), by the mariadb
            client (password through MYSQL_PWD, never argv)
  etcd      raft log entries (`etcdctl endpoint status`'s raftIndex): every
            write the server makes durable, lease grants and revocations
            included, which the store's revision does not count (it moves
            only when keys change: kept as server_revisions). A lease a
            client leaves to expire (etcdctl lock does) costs a raft entry
            when it expires, a minute later, maybe in another client's run:
            each run is charged for the leases it leaves (new in
            `etcdctl lease list`) and not for the expiries it saw
            (etcd_debugging_server_lease_expired_total on /metrics); flushes
            are the WAL's fsyncs (etcd_disk_wal_fsync_duration_seconds_count),
            as they happened
Elsewhere `read` prints {} and `add` adds nothing. The counts are the
server's, so they include connecting (ZooKeeper sessions) and anything else
the server did meanwhile: read them per section over runs of seconds.
Added fields: server_writes, server_flushes (null where not counted),
server_writes_per_section, server_flushes_per_section, server_writes_what;
on etcd also server_revisions and server_revisions_per_section.
"""
import json
import os
import socket
import subprocess
import sys
import urllib.parse
import urllib.request


def first_host(u):
    h = u.netloc.split("@")[-1].split(",")[0]
    host, _, port = h.rpartition(":")
    return host or h, int(port) if port.isdigit() else None


def read_zk(u):
    host, port = first_host(u)
    with socket.create_connection((host, port or 2181), timeout=5) as s:
        s.sendall(b"srvr")
        data = b""
        while True:
            b = s.recv(4096)
            if not b:
                break
            data += b
    for line in data.decode().splitlines():
        if line.startswith("Zxid:"):
            zxid = int(line.split()[1], 16)
            # the low 32 bits count within an epoch; an epoch change (a new
            # leader) resets them, and a delta across it is not a count
            return dict(writes=zxid & 0xFFFFFFFF, epoch=zxid >> 32, flushes=None,
                        what="zxid (ZooKeeper write transactions)")
    raise RuntimeError("no Zxid in srvr's answer")


def read_postgres(u):
    host, port = first_host(u)
    env = dict(os.environ, PGPASSWORD=urllib.parse.unquote(u.password or ""))
    out = subprocess.run(["psql", "-X", "-A", "-t", "-h", host, "-p", str(port or 5432),
                          "-U", urllib.parse.unquote(u.username or ""), "-d",
                          u.path.strip("/") or "postgres", "-c",
                          "SELECT wal_records, wal_sync FROM pg_stat_wal"],
                         env=env, capture_output=True, text=True, timeout=20, check=True).stdout
    rec, sync = out.strip().split("|")
    return dict(writes=int(rec), flushes=int(sync),
                what="pg_stat_wal wal_records / wal_sync")


def read_mysql(u):
    host, port = first_host(u)
    env = dict(os.environ, MYSQL_PWD=urllib.parse.unquote(u.password or ""))
    out = subprocess.run(["mariadb", "-N", "-B", "-h", host, "-P", str(port or 3306),
                          "-u", urllib.parse.unquote(u.username or ""), "-e",
                          "SHOW GLOBAL STATUS WHERE Variable_name IN ('Handler_write', "
                          "'Handler_update', 'Handler_delete', 'Innodb_data_fsyncs')"],
                         env=env, capture_output=True, text=True, timeout=20, check=True).stdout
    v = dict(line.split("\t") for line in out.strip().splitlines())
    return dict(writes=int(v["Handler_write"]) + int(v["Handler_update"]) + int(v["Handler_delete"]),
                flushes=int(v["Innodb_data_fsyncs"]),
                what="Handler_write+update+delete / Innodb_data_fsyncs")


def read_etcd(u):
    ep = "http://" + u.netloc.split("@")[-1].split(",")[0]

    def ctl(*args):
        return json.loads(subprocess.run(["etcdctl", "--endpoints=" + ep] + list(args) +
                                         ["-w", "json"], capture_output=True, text=True,
                                         timeout=20, check=True).stdout)
    st = ctl("endpoint", "status")[0]["Status"]
    leases = [str(x["id"]) for x in ctl("lease", "list").get("leases") or []]
    metrics = {}
    if u.scheme == "etcd":  # (etcds: the metrics want the client's TLS; not counted)
        with urllib.request.urlopen(ep + "/metrics", timeout=20) as r:
            for line in r.read().decode().splitlines():
                name, _, value = line.partition(" ")
                metrics[name] = value
    fsyncs = metrics.get("etcd_disk_wal_fsync_duration_seconds_count")
    expired = metrics.get("etcd_debugging_server_lease_expired_total")
    return dict(writes=int(st["raftIndex"]), flushes=int(float(fsyncs)) if fsyncs else None,
                revisions=int(st["header"]["revision"]), leases=leases,
                expired=int(float(expired)) if expired else None,
                what="etcd raft entries, the leases a run left to expire included / WAL fsyncs")


READERS = {"zk": read_zk, "postgres": read_postgres, "postgresql": read_postgres,
           "mysql": read_mysql, "etcd": read_etcd}


def main(argv):
    if len(argv) == 2 and argv[0] == "read":
        u = urllib.parse.urlsplit(argv[1])
        r = READERS.get(u.scheme)
        try:
            print(json.dumps(r(u) if r else {}))
        except (OSError, subprocess.SubprocessError, ValueError, KeyError, IndexError,
                RuntimeError) as e:
            # a counter that cannot be read is no reason to lose the run
            print("writes.py: cannot read the counters: %s" % str(e).splitlines()[0][:200],
                  file=sys.stderr)
            print("{}")
        return 0
    if len(argv) == 3 and argv[0] == "add":
        with open(argv[1]) as f:
            before = json.loads(f.read() or "{}")
        with open(argv[2]) as f:
            after = json.loads(f.read() or "{}")
        line = sys.stdin.read().strip()
        d = json.loads(line, object_pairs_hook=dict)
        if "writes" in before and "writes" in after and before.get("epoch") == after.get("epoch"):
            n = (d.get("sections_checked") or 0) + (d.get("dropped") or 0)
            w = after["writes"] - before["writes"]
            fl = (after["flushes"] - before["flushes"]
                  if before.get("flushes") is not None and after.get("flushes") is not None
                  else None)
            if before.get("expired") is not None and after.get("expired") is not None:
                # etcd: expiries of leases earlier runs left are theirs; the
                # leases this run leaves expire later, a raft entry each
                w += (len(set(after.get("leases", [])) - set(before.get("leases", [])))
                      - (after["expired"] - before["expired"]))
            if "revisions" in before and "revisions" in after:
                r = after["revisions"] - before["revisions"]
                d["server_revisions"] = r
                d["server_revisions_per_section"] = round(r / n, 3) if n else None
            d["server_writes"] = w
            d["server_flushes"] = fl
            d["server_writes_per_section"] = round(w / n, 3) if n else None
            d["server_flushes_per_section"] = round(fl / n, 3) if n and fl is not None else None
            d["server_writes_what"] = after["what"]
        print(json.dumps(d, separators=(",", ":")))
        return 0
    print(__doc__.strip().splitlines()[2].strip(), file=sys.stderr)
    return 64


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
