#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""compare.py — compare two bench/matrix.sh outputs row by row.

    bench/compare.py OLD.jsonl NEW.jsonl [--threshold PCT]

Rows are matched by (row, URL scheme); a file of several repetitions
(matrix.sh -n) gives each figure's median over them. For each row it prints the main figures
of both files and the change; a change beyond the threshold (default 10 %)
is marked better or worse (throughput up is better, latencies down are
better). Rows with violations are flagged: a violation is a broken lock,
never noise. Exit status: 0, 1 if any row of NEW has violations, 64 usage.
Only the Python standard library is used.
"""
import argparse
import statistics
import sys

import rows as matrix_rows  # bench/rows.py

# (field, higher is better)
METRICS = [
    ("ops_per_s", True),
    ("cycle_p50_us", False),
    ("cycle_p99_us", False),
    ("wait_p50_us", False),
    ("wait_p99_us", False),
    ("handover_p50_us", False),
    ("handover_p99_us", False),
    ("rtt_p50_us", False),
    ("cycle_rtt_ratio", False),
    ("handover_rtt_ratio", False),
    ("rss_per_lock_bytes", False),
    ("rtt_single_p50_us", False),
    ("server_commands_per_handover", False),
    ("set_rps", True),
]


def load(path):
    """Rows by key; with several repetitions (matrix.sh -n) each figure is the
    median over them (violations: the worst), the rest from the last one."""
    seen, order = matrix_rows.load(path, "compare.py")
    rows = {}
    for key, ds in seen.items():
        d = rows[key] = dict(ds[-1])
        if len(ds) > 1:
            for field, _ in METRICS:
                vs = [x[field] for x in ds if isinstance(x.get(field), (int, float))]
                if vs:
                    d[field] = statistics.median_low(vs)
            d["violations"] = max(x.get("violations", 0) or 0 for x in ds)
            d["reps"] = len(ds)
    return rows, order


def fmt(v):
    if v is None:
        return "-"
    if isinstance(v, float):
        return "%.2f" % v
    return str(v)


def main():
    ap = argparse.ArgumentParser(description="compare two bench/matrix.sh outputs")
    ap.add_argument("old")
    ap.add_argument("new")
    ap.add_argument("--threshold", type=float, default=10.0,
                    help="percent change marked better/worse (default 10)")
    a = ap.parse_args()
    old, old_order = load(a.old)
    new, new_order = load(a.new)
    keys = old_order + [k for k in new_order if k not in old]
    bad = False
    for key in keys:
        o, n = old.get(key), new.get(key)
        print("== %s on %s" % key)
        if o is None or n is None:
            print("   only in %s" % (a.new if o is None else a.old))
            continue
        print("   %-20s %14s %14s %9s" % ("", "old", "new", "change"))
        for field, higher_better in METRICS:
            ov, nv = o.get(field), n.get(field)
            if ov is None and nv is None:
                continue
            change, mark = "", ""
            if isinstance(ov, (int, float)) and isinstance(nv, (int, float)) and ov:
                pct = (nv - ov) * 100.0 / ov
                change = "%+.1f%%" % pct
                if abs(pct) >= a.threshold:
                    mark = "better" if (pct > 0) == higher_better else "worse"
            print("   %-20s %14s %14s %9s %s" % (field, fmt(ov), fmt(nv), change, mark))
        for field in ("reps", "n", "handovers", "fairness_min_max"):
            if field == "reps" and "reps" not in o and "reps" not in n:
                continue
            print("   %-20s %14s %14s" % (field, fmt(o.get(field)), fmt(n.get(field))))
        ovio, nvio = o.get("violations", 0), n.get("violations", 0)
        flag = "   <-- BROKEN LOCK" if nvio else ""
        print("   %-20s %14s %14s%s" % ("violations", fmt(ovio), fmt(nvio), flag))
        if nvio:
            bad = True
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
