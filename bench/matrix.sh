#!/bin/bash
# matrix.sh — run the fixed `dlock bench` matrix on every backend given, one
# JSON line per row, so that two builds can be compared row by row with
# bench/compare.py.
#
#   bench/matrix.sh [-D SECS] [-o FILE] [-r ROWS] [URL...]
#
# URLs: the arguments, else $DLOCK_BENCH_URLS (space separated), else the
# embedded file backend in a fresh temporary directory. A backend issue adds
# its server's URL to the list (the server must already be running; a URL
# whose backend does not answer is skipped with a note on stderr).
# The binary: $DLOCK, else build/dlock of this tree, else dlock from PATH.
# Each line is the bench JSON object with "row" (and "label" from
# $BENCH_LABEL, e.g. a commit id) added in front.
set -u
here=$(cd "$(dirname "$0")" && pwd)
D=5
OUT=
ROWS="uncontended contended8 contended64 names10k"
while getopts "D:o:r:h" opt; do
    case $opt in
    D) D=$OPTARG ;;
    o) OUT=$OPTARG ;;
    r) ROWS=$OPTARG ;;
    h | *)
        sed -n '2,16p' "$0" | sed 's/^# \{0,1\}//'
        [ "$opt" = h ] && exit 0 || exit 64
        ;;
    esac
done
shift $((OPTIND - 1))

DLOCK=${DLOCK:-}
if [ -z "$DLOCK" ]; then
    if [ -x "$here/../build/dlock" ]; then DLOCK="$here/../build/dlock"; else DLOCK=dlock; fi
fi
if ! command -v "$DLOCK" >/dev/null 2>&1; then
    echo "matrix.sh: no dlock binary (set DLOCK)" >&2
    exit 69
fi

TMP=$(mktemp -d "${TMPDIR:-/tmp}/dlock-matrix.XXXXXX") || exit 73
cleanup() { rm -rf "$TMP"; }
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

if [ $# -gt 0 ]; then
    URLS="$*"
elif [ -n "${DLOCK_BENCH_URLS:-}" ]; then
    URLS=$DLOCK_BENCH_URLS
else
    URLS="file://$TMP/locks"
fi

# The matrix: row name and bench arguments. Add rows at the end only, so
# that files of older builds keep comparing.
row_args() {
    case $1 in
    uncontended) echo "-P 1 -K 1 -H 0" ;;
    contended8) echo "-P 8 -K 1 -H 100" ;;
    contended64) echo "-P 64 -K 1 -H 100" ;;
    names10k) echo "-P 8 -K 10000 -H 0" ;;
    *) return 1 ;;
    esac
}

if [ -n "$OUT" ]; then
    : >"$OUT" || exit 73
fi
status=0
for url in $URLS; do
    # Is the backend there at all? A tiny untimed run says.
    if ! "$DLOCK" --url "$url" bench -P 1 -D 0.1 --warmup 0 --no-prepare --json >/dev/null 2>"$TMP/err"; then
        echo "matrix.sh: skipping $url: $(head -1 "$TMP/err")" >&2
        continue
    fi
    for row in $ROWS; do
        if ! args=$(row_args "$row"); then
            echo "matrix.sh: unknown row $row" >&2
            exit 64
        fi
        echo "matrix.sh: $row on $url ..." >&2
        # shellcheck disable=SC2086
        line=$("$DLOCK" --url "$url" bench $args -D "$D" --baseline --json)
        rc=$?
        if [ $rc -ne 0 ] || [ -z "$line" ]; then
            echo "matrix.sh: $row on $url failed (exit $rc)" >&2
            status=1
            [ $rc -ge 128 ] && exit $rc
            continue
        fi
        label=${BENCH_LABEL:-}
        label=${label//\\/\\\\}
        label=${label//\"/\\\"}
        line="{\"row\":\"$row\",\"label\":\"$label\",${line#\{}"
        if [ -n "$OUT" ]; then echo "$line" >>"$OUT"; else echo "$line"; fi
    done
done
exit $status
