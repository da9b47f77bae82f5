#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""table.py — dlock against its peers, from the lines of `bench/matrix.sh -p`.

    bench/peers/table.py RUN.jsonl [RUN2.jsonl ...] [--json]

For each server setting (durable / test / given) and backend, the three
figures of issue 24 for dlock and every peer: the uncontended cycle
(row uncontended, cycle_p50_us), the 8-waiter throughput and hand-over
(row contended8, ops_per_s and handover_p50_us); on etcd, runs per second of
4 loops (row run4: `dlock run` against `etcdctl lock`). With several
repetitions each figure is the median over them. Then dlock / best peer for
each figure (a time: above 1 is slower; a throughput: below 1 is less), with
the best peer's name and what it does not give (token, owner check, FIFO).
A line with violations is marked: a broken lock, never noise.
--json prints the ratios as one JSON object per backend instead.
Exit status: 0; 1 if a line has violations; 64 usage.
"""
import json
import os
import statistics
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
import rows as matrix_rows  # bench/rows.py  # noqa: E402

# (name, row, field, higher is better)
FIGURES = [
    ("P=1 cycle us", "uncontended", "cycle_p50_us", False),
    ("P=8 ops/s", "contended8", "ops_per_s", True),
    ("P=8 hand-over us", "contended8", "handover_p50_us", False),
    ("4 loops runs/s", "run4", "ops_per_s", True),
    # shown, no ratio: fairness, and the server's writes and flushes
    # (peers/writes.py) per section: a P=8 section is nearly always a hand-over
    ("P=8 min/max", "contended8", "fairness", None),
    ("P=1 writes/cyc", "uncontended", "server_writes_per_section", None),
    ("P=1 flush/cyc", "uncontended", "server_flushes_per_section", None),
    ("P=8 writes/sec", "contended8", "server_writes_per_section", None),
    ("P=8 flush/sec", "contended8", "server_flushes_per_section", None),
    ("writes/run", "run4", "server_writes_per_section", None),
    ("revisions/run", "run4", "server_revisions_per_section", None),
]
W = 18  # column width, at least
DLOCK_SIDES = (None, "dlock-run")  # lines that are dlock's


def lacks(gives):
    if not gives:
        return ""
    out = [what for what, key in (("token", "token"), ("owner check", "owner_check"),
                                  ("FIFO", "fair")) if gives.get(key) is False]
    return "no " + ", no ".join(out) if out else ""


def main(argv):
    as_json = "--json" in argv
    paths = [a for a in argv if a != "--json"]
    if not paths:
        print(__doc__.strip().splitlines()[2].strip(), file=sys.stderr)
        return 64
    # (servers, backend) -> client -> figure name -> [values]
    groups = {}
    gives = {}
    broken = []
    for path in paths:
        for d in matrix_rows.lines(path, "table.py"):
            peer = d.get("peer")
            client = "dlock" if peer in DLOCK_SIDES else peer
            gk = (d.get("servers", "given"), d.get("backend", "?"))
            g = groups.setdefault(gk, {})
            figs = g.setdefault(client, {})
            if peer not in DLOCK_SIDES:
                # per backend: tooz's drivers give different things
                gives[gk + (client,)] = d.get("peer_gives")
            if d.get("violations"):
                broken.append("%s %s on %s: %s violations" % (client, d.get("row"),
                                                               d.get("backend"), d["violations"]))
            for name, row, field, _ in FIGURES:
                v = d.get(field)
                if field == "fairness" and d.get("fairness_min_max"):
                    lo, hi = d["fairness_min_max"]
                    v = lo / hi if hi else None
                if d.get("row") == row and isinstance(v, (int, float)):
                    figs.setdefault(name, []).append(v)
    status = 0
    for (servers, backend), g in sorted(groups.items()):
        med = {c: {f: statistics.median(v) for f, v in figs.items()} for c, figs in g.items()}
        names = [f for f in FIGURES if any(f[0] in m for m in med.values())]
        peers = sorted(c for c in med if c != "dlock")
        ratios = {}
        for name, _, _, higher in names:
            have = [(med[p][name], p) for p in peers if name in med[p]]
            if higher is None or not have or name not in med.get("dlock", {}):
                continue
            best, who = (max if higher else min)(have)
            if best:
                ratios[name] = dict(ratio=round(med["dlock"][name] / best, 3), peer=who,
                                    dlock=med["dlock"][name], best=best,
                                    peer_lacks=lacks(gives.get((servers, backend, who))))
        if as_json:
            print(json.dumps({"servers": servers, "backend": backend, "ratios": ratios}))
            continue
        w = max([W] + [len("%.2f (%s)" % (r["ratio"], r["peer"])) + 2 for r in ratios.values()])
        print("== %s, servers %s" % (backend, servers))
        print("   %-16s" % "client" + "".join("%*s" % (w, n[0]) for n in names) + "   lacks")
        for c in (["dlock"] if "dlock" in med else []) + peers:
            cells = "".join("%*s" % (w, ("%.2f" if n[3] is None else "%.1f") % med[c][n[0]]
                                      if n[0] in med[c] else "-")
                            for n in names)
            print("   %-16s%s   %s" % (c, cells, lacks(gives.get((servers, backend, c)))
                                        if c != "dlock" else ""))
        cells = "".join("%*s" % (w, "%.2f (%s)" % (ratios[n[0]]["ratio"], ratios[n[0]]["peer"])
                                  if n[0] in ratios else "-") for n in names)
        print("   %-16s%s" % ("dlock/best", cells))
    for b in broken:
        print("BROKEN LOCK: " + b)
        status = 1
    return status


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
