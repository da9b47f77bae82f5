#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# docs_test.sh — the manual pages stay true to the code: every function of
# include/dlock.h has a page (its NAME line, which CMake turns into a link
# page) and is in libdlock(3); the pages render without warnings and carry
# one date; every command of `dlock --help` and every option of its help
# is in dlock(1); every environment variable the code reads is in its
# ENVIRONMENT section; every source file names the licence.
#
# Needs: DLOCK (the built dlock), DLOCK_SOURCE_DIR (the source tree).
set -uo pipefail
DLOCK=${DLOCK:?set DLOCK to the dlock binary}
SRC=${DLOCK_SOURCE_DIR:-$(cd "$(dirname "$0")/.." && pwd)}
. "$SRC/tests/testlib.sh"
DOCS=$SRC/docs

# ---- libdlock(3) and the function pages --------------------------------------
funcs=$(sed -n 's/^DLOCK_EXTERN[^(]*[ *]\(dlock_[a-z_]*\)(.*/\1/p' "$SRC/include/dlock.h" | sort -u)
[ "$(echo "$funcs" | wc -l)" -ge 30 ] && ok "dlock.h: $(echo "$funcs" | wc -l) functions found" ||
    bad "dlock.h: functions not found"
names=$(grep -h '^dlock_.* \\- ' "$DOCS"/man3/*.3 | sed 's/ \\- .*//; s/, /\n/g' | sort)
missing=$(comm -23 <(echo "$funcs") <(echo "$names" | sort -u))
[ -z "$missing" ] && ok "every dlock.h function is in a page's NAME line" ||
    bad "functions without a page: $(echo $missing)"
dup=$(echo "$names" | uniq -d)
[ -z "$dup" ] && ok "no function is in two pages" || bad "in two pages: $(echo $dup)"
unknown=$(comm -13 <(echo "$funcs") <(echo "$names" | sort -u))
[ -z "$unknown" ] && ok "every function named in the pages exists" ||
    bad "pages name functions dlock.h lacks: $(echo $unknown)"
notinlib=$(for f in $funcs; do grep -q "$f(" "$DOCS/libdlock.3" || echo "$f"; done)
[ -z "$notinlib" ] && ok "libdlock(3) has every function in its SYNOPSIS" ||
    bad "not in libdlock(3): $(echo $notinlib)"
for p in "$DOCS"/man3/*.3; do
    page=$(basename "$p" .3)
    grep -q "^\.BR $page (3)" "$DOCS/libdlock.3" && ok "libdlock(3) refers to $page(3)" ||
        bad "libdlock(3) SEE ALSO lacks $page(3)"
done

# ---- every page renders cleanly, with one date ---------------------------------
pages=("$DOCS"/dlock.1 "$DOCS"/libdlock.3 "$DOCS"/man3/*.3)
if command -v groff >/dev/null; then
    for p in "${pages[@]}"; do
        w=$(groff -man -ww -z "$p" 2>&1)
        [ -z "$w" ] && ok "$(basename "$p") renders without warnings" ||
            bad "$(basename "$p"): $w"
    done
else
    ok "groff missing: rendering not checked"
fi
dates=$(sed -n 's/^\.TH [^ ]* [0-9] "\([^"]*\)".*/\1/p' "${pages[@]}" | sort -u)
[ "$(echo "$dates" | wc -l)" = 1 ] && ok "one date on every page ($dates)" ||
    bad "pages carry several dates: $(echo $dates)"

# ---- dlock(1) --------------------------------------------------------------------
MAN1=$DOCS/dlock.1
# the .TH line's text with the roff escapes of '-' undone
plain=$(sed 's/\\-/-/g; s/\\f[BIRP]//g' "$MAN1")
synopsis=$(echo "$plain" | sed -n '/^\.SH SYNOPSIS/,/^\.SH /p')
cmds=$("$DLOCK" --help | sed -n '/^commands:/,/^$/s/^  \([a-z]\+\) .*/\1/p')
[ -n "$cmds" ] && ok "dlock --help lists commands" || bad "no commands in dlock --help"
commands=$(echo "$plain" | sed -n '/^\.SH COMMANDS/,/^\.SH /p')
# (here-strings, not pipes into grep -q: with pipefail a grep that stops
# reading early would fail the pipe)
for c in $cmds; do
    grep -q "^\.B.* $c\b\|^\.B $c\b" <<<"$synopsis" &&
        ok "dlock(1) SYNOPSIS has $c" || bad "dlock(1) SYNOPSIS lacks $c"
    grep -q "^\.B[IR]* \"\?$c\b" <<<"$commands" &&
        ok "dlock(1) COMMANDS has $c" || bad "dlock(1) COMMANDS lacks $c"
    # each option in the usage lines of `dlock help CMD` is in the command's
    # SYNOPSIS entry (the .br-separated block that starts with it)
    entry=$(awk -v c="$c" '/^\.br/ { if (hit) exit; blk = ""; next }
        { blk = blk "\n" $0 } $0 ~ "^\\.B " c "$" || $0 ~ "^\\.B dlock " c { hit = 1 }
        END { if (hit) print blk }' <<<"$synopsis")
    case $c in bench | check | help) continue ;; esac
    usage=$("$DLOCK" help "$c" | sed '/^$/q')
    for o in $(grep -o -- '--\?[a-zA-Z][a-z-]*' <<<"$usage" | grep -v -- '--url' | sort -u); do
        grep -q -- "$o\b" <<<"$entry" && ok "dlock(1) SYNOPSIS of $c has $o" ||
            bad "dlock(1) SYNOPSIS of $c lacks $o (dlock help $c has it)"
    done
done
# every long option of every command's help (bench and check keep theirs in
# their own help and docs) is in dlock(1)
for c in $cmds; do
    case $c in bench | check | help) continue ;; esac
    for o in $("$DLOCK" help "$c" | grep -o -- '--[a-z][a-z-]*' | sort -u); do
        grep -q -- "$o\b" <<<"$plain" && ok "dlock(1) has $c $o" ||
            bad "dlock(1) lacks $o of $c"
    done
done
# the global options of --help, and every long option the parsers accept
for o in $("$DLOCK" --help | grep -o -- '--[a-z][a-z-]*' | sort -u); do
    grep -q -- "$o\b" <<<"$plain" && ok "dlock(1) has global $o" || bad "dlock(1) lacks $o"
done
for o in $(sed -n "s/^ *{\"\([a-z][a-z-]*\)\", \('.'\|0\), [01], [A-Z_]*},.*/--\1/p" "$SRC"/src/cli/run.c "$SRC"/src/cli/main.c |
    sort -u); do
    grep -q -- "$o\b" <<<"$plain" && ok "dlock(1) has $o (an option dlock takes)" ||
        bad "dlock(1) lacks $o, which dlock takes"
done
# the environment variables the command and the library read
envs=$(grep -ho 'getenv("[A-Z_]*")' "$SRC"/src/cli/*.c "$SRC"/src/*.c | sed 's/getenv("\(.*\)")/\1/' |
    sort -u)
environment=$(echo "$plain" | sed -n '/^\.SH ENVIRONMENT/,/^\.SH /p')
for v in $envs; do
    grep -q "\b$v\b" <<<"$environment" && ok "dlock(1) ENVIRONMENT has $v" ||
        bad "dlock(1) ENVIRONMENT lacks $v"
done

# ---- the licence: every source file says it (SPDX) ----------------------------
if git -C "$SRC" rev-parse --git-dir >/dev/null 2>&1; then
    unlicensed=$(git -C "$SRC" ls-files -- '*.c' '*.h' '*.sh' '*.py' '*.pyi' '*.cmake' '*.in' \
        '*.lua' '*.js' '*.java' '*.1' '*.3' CMakeLists.txt '*/CMakeLists.txt' Makefile |
        while read -r f; do head -c 400 "$SRC/$f" | grep -q 'SPDX-License-Identifier: MIT' || echo "$f"; done)
    [ -z "$unlicensed" ] && ok "every source file carries SPDX-License-Identifier: MIT" ||
        bad "no SPDX line: $(echo $unlicensed)"
fi
finish
