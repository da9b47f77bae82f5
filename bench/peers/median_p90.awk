# SPDX-License-Identifier: MIT
# One line per hand-over in microseconds in, sorted (sort -n); out: "LABEL
# n=N median X ms  p90 Y ms" (awk -v l=LABEL -f median_p90.awk).
{ a[NR] = $1 }
END {
    printf "%-18s n=%d median %.1f ms  p90 %.1f ms\n", l, NR,
        a[int((NR + 1) / 2)] / 1000, a[int(NR * 0.9 + 0.5)] / 1000
}
