"""rows.py — reading the JSON lines of bench/matrix.sh, for compare.py and
targets.py (standard library only)."""
import json
import sys


def load(path, tool):
    """Rows keyed by (row, URL scheme), and the keys in file order (a later
    line of the same key replaces an earlier one)."""
    rows = {}
    order = []
    with open(path) as f:
        for n, line in enumerate(f, 1):
            line = line.strip()
            if not line:
                continue
            try:
                d = json.loads(line)
            except ValueError as e:
                sys.exit("%s: %s:%d: not JSON: %s" % (tool, path, n, e))
            scheme = d.get("url", "").split("://")[0] or d.get("backend", "?")
            key = (d.get("row", "?"), scheme)
            if key not in rows:
                order.append(key)
            rows[key] = d
    return rows, order
