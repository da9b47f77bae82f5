# SPDX-License-Identifier: MIT
"""rows.py — reading the JSON lines of bench/matrix.sh, for compare.py and
targets.py (standard library only)."""
import json
import sys


# Keys of files written before the command counters had backend-neutral
# names, read as the names they have now.
RENAMED = {
    "redis_commands": "server_commands",
    "redis_commands_total": "server_commands_total",
    "redis_script_calls": "server_commands_internal",
    "redis_servers": "server_commands_servers",
    "redis_commands_per_section": "server_commands_per_section",
    "redis_commands_per_handover": "server_commands_per_handover",
}


def lines(path, tool):
    """The JSON objects of a file, one per non-empty line (older key names
    renamed)."""
    out = []
    with open(path) as f:
        for n, line in enumerate(f, 1):
            line = line.strip()
            if not line:
                continue
            try:
                d = json.loads(line)
            except ValueError as e:
                sys.exit("%s: %s:%d: not JSON: %s" % (tool, path, n, e))
            for old, new in RENAMED.items():
                if old in d and new not in d:
                    d[new] = d.pop(old)
            out.append(d)
    return out


def key(d):
    """(row, URL scheme); a peer's line (matrix.sh -p) is its own row,
    "ROW[PEER]", and so is each server setting but the first ("ROW@durable")."""
    row = d.get("row", "?")
    if d.get("peer"):
        row += "[%s]" % d["peer"]
    if d.get("servers") == "durable":
        row += "@durable"
    return (row, d.get("url", "").split("://")[0] or d.get("backend", "?"))


def load(path, tool):
    """Every line of each (row, URL scheme) key, in file order (one per
    repetition of matrix.sh -n), and the keys in file order."""
    rows = {}
    order = []
    for d in lines(path, tool):
        k = key(d)
        if k not in rows:
            order.append(k)
            rows[k] = []
        rows[k].append(d)
    return rows, order


def load_reps(path, tool):
    """One rows dict (as load gives) per repetition of matrix.sh -n, in
    order; lines without "rep" (older files) are repetition 1."""
    reps = {}
    for d in lines(path, tool):
        reps.setdefault(d.get("rep", 1), {})[key(d)] = d
    return [reps[r] for r in sorted(reps)]
