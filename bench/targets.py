#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""targets.py — the figures of one bench/matrix.sh run against their targets.

    bench/targets.py RUN.jsonl [--json]

Every figure is a ratio between rows of the same run (same machine, same
minute), so that the noise of the machine cancels out as far as it can.
When the file holds several repetitions (matrix.sh -n), each figure is
computed per repetition and judged on its median (violations: on the worst
repetition); every repetition's value is printed too. The figures:

  uncontended      cycle_p50 / rtt_p50 (redis://)                   <= 2.4
  redlock          redlock cycle_p50 / redis:// cycle_p50           <= 1.5
  contended8_fair  handover_p50 / rtt_p50                           <= 1.5
                   fairness min/max                                 >= 0.8
                   violations                                       == 0
  contended64_fair handover_p50 / contended8_fair handover_p50      <= 1.5
  and 512          server commands per hand-over                    <= 4
  names10k         ops_per_s / (SET rate of redis-benchmark -c 8 / 2) >= 0.4

and, for information, the 8-waiter hand-over over the server's bare
hand-over chain (one client's RPUSH waking another's BLPOP).

A figure whose rows are missing is reported as such. Exit status: 0 when
every figure present meets its target, 1 otherwise, 64 usage. Only the
Python standard library is used.
"""
import argparse
import json
import sys

import rows as matrix_rows  # bench/rows.py


def figures(rows):
    """The figures of one repetition: dicts with figure, value, op, target,
    detail (and info for figures without a target)."""
    out = []

    def get(row, scheme, field):
        d = rows.get((row, scheme))
        return None if d is None else d.get(field)

    def figure(name, value, op, target, detail):
        out.append({"figure": name, "value": value, "op": op, "target": target,
                    "detail": detail})

    def ratio(x, y):
        return None if x is None or y in (None, 0) else x / y

    c, r = get("uncontended", "redis", "cycle_p50_us"), get("uncontended", "redis", "rtt_p50_us")
    figure("uncontended cycle / rtt (redis)", ratio(c, r), "<=", 2.4,
           "cycle_p50 %s us, rtt_p50 %s us" % (c, r))
    rl = get("uncontended", "redlock", "cycle_p50_us")
    figure("redlock cycle / single-master cycle", ratio(rl, c), "<=", 1.5,
           "redlock cycle_p50 %s us (rtt all %s us, one %s us), redis cycle_p50 %s us" %
           (rl, get("uncontended", "redlock", "rtt_p50_us"),
            get("uncontended", "redlock", "rtt_single_p50_us"), c))
    h8, r8 = get("contended8_fair", "redis", "handover_p50_us"), get("contended8_fair", "redis", "rtt_p50_us")
    figure("8 waiters fair: handover / rtt", ratio(h8, r8), "<=", 1.5,
           "handover_p50 %s us, rtt_p50 %s us" % (h8, r8))
    # Not a target: what the lock adds to the server's own hand-over chain
    # (RPUSH waking a BLPOP), which, unlike a tight PING loop, always
    # involves a process being woken up, as a hand-over does.
    rel8 = get("contended8_fair", "redis", "relay_p50_us")
    figure("8 waiters fair: handover / bare relay", ratio(h8, rel8), None, None,
           "handover_p50 %s us, RPUSH->BLPOP wake p50 %s us" % (h8, rel8))
    fmm = get("contended8_fair", "redis", "fairness_min_max")
    figure("8 waiters fair: fairness min/max", ratio(fmm[0], fmm[1]) if fmm else None, ">=", 0.8,
           "fairness_min_max %s" % (fmm,))
    figure("8 waiters fair: violations", get("contended8_fair", "redis", "violations"), "==", 0, "")
    for n in (64, 512):
        row = "contended%d_fair" % n
        h = get(row, "redis", "handover_p50_us")
        figure("%d waiters: handover / 8-waiter handover" % n, ratio(h, h8), "<=", 1.5,
               "handover_p50 %s us vs %s us" % (h, h8))
        figure("%d waiters: server commands per hand-over" % n,
               get(row, "redis", "server_commands_per_handover"), "<=", 4,
               "commands %s" % (get(row, "redis", "server_commands"),))
        figure("%d waiters: violations" % n, get(row, "redis", "violations"), "==", 0, "")
    ops, setr = get("names10k", "redis", "ops_per_s"), get("redis_set", "redis", "set_rps")
    figure("names10k ops/s / (SET rate / 2)", ratio(ops, setr / 2 if setr else None), ">=", 0.4,
           "ops_per_s %s, redis-benchmark SET %s/s" % (ops, setr))
    return out


def meets(value, op, target):
    if value is None or op is None:
        return None
    return value <= target if op == "<=" else value >= target if op == ">=" else value == target


def median(vs, op):
    """The middle value; of an even count's two middles the one farther from
    meeting the target, so that ties do not flatter (a value some run had)."""
    vs = sorted(vs)
    lo, hi = vs[(len(vs) - 1) // 2], vs[len(vs) // 2]
    return lo if op == ">=" else hi


def main():
    ap = argparse.ArgumentParser(description="bench/matrix.sh figures against their targets")
    ap.add_argument("run")
    ap.add_argument("--json", action="store_true", help="one JSON object per figure")
    a = ap.parse_args()
    reps = [figures(rows) for rows in matrix_rows.load_reps(a.run, "targets.py")]
    if not reps:
        sys.exit("targets.py: %s: no rows" % a.run)
    out = []
    for i, f in enumerate(reps[0]):
        per_rep = [r[i] for r in reps]
        have = [x for x in per_rep if x["value"] is not None]
        # Violations count over every repetition: one broken lock is never noise.
        if f["figure"].endswith("violations") and have:
            chosen = max(have, key=lambda x: x["value"])
        elif have:
            med = median([x["value"] for x in have], f["op"])
            chosen = next(x for x in have if x["value"] == med)
        else:
            chosen = f
        g = {"figure": f["figure"], "value": chosen["value"],
             "target": "(info)" if f["op"] is None else "%s %s" % (f["op"], f["target"]),
             "met": meets(chosen["value"], f["op"], f["target"]), "detail": chosen["detail"]}
        if f["op"] is None:
            g["info"] = True
        if len(reps) > 1:
            g["reps"] = [x["value"] for x in per_rep]
            g["met_in"] = sum(1 for x in per_rep if meets(x["value"], f["op"], f["target"]))
        out.append(g)

    if a.json:
        for f in out:
            print(json.dumps(f))
    else:
        for f in out:
            v = "-" if f["value"] is None else ("%.3f" % f["value"] if isinstance(f["value"], float) else str(f["value"]))
            met = ("info" if f.get("info") else "missing") if f["met"] is None else \
                "met" if f["met"] else "MISSED"
            print("%-44s %9s  %-8s %-8s %s" % (f["figure"], v, f["target"], met, f["detail"]))
            if "reps" in f and f["value"] is not None:
                vals = " ".join("-" if x is None else "%.3f" % x if isinstance(x, float) else str(x)
                                for x in f["reps"])
                print("%-44s %s%s" % ("", "runs: " + vals,
                                      "" if f.get("info") else "; met in %d of %d" %
                                      (f["met_in"], len(f["reps"]))))
    return 1 if any(f["met"] is False for f in out) else 0


if __name__ == "__main__":
    sys.exit(main())
