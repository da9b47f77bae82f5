/* SPDX-License-Identifier: MIT */
/*
 * worker.h — the worker side of bench/peers/peer_bench.py's line protocol,
 * for its C workers (redis_min.c, mysql_min.c): print "ready", read
 * "START_NS END_NS", loop acquire / busy-wait HOLD_US / release from
 * START_NS until END_NS, then print "a b c d" per section
 * (CLOCK_MONOTONIC: acquire start, acquired, release start, released) and
 * "done". The worker's own calls exit the process on an error.
 */
#ifndef DLOCK_PEER_WORKER_H
#define DLOCK_PEER_WORKER_H

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

static int64_t now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

/* The loop: 0, or 1 when the start line is missing or memory runs out. */
static int peer_run(int64_t hold_ns, void (*acquire)(void *), void (*release)(void *), void *arg)
{
    printf("ready\n");
    fflush(stdout);
    long long start, end;
    if (scanf("%lld %lld", &start, &end) != 2)
        return 1;
    while (now_ns() < start) {
    }
    size_t cap = 1 << 16, n = 0;
    int64_t *rec = malloc(cap * sizeof *rec);
    if (!rec)
        return 1;
    for (;;) {
        int64_t a = now_ns();
        if (a >= end)
            break;
        acquire(arg);
        int64_t b = now_ns();
        while (hold_ns > 0 && now_ns() < b + hold_ns) {
        }
        int64_t c = now_ns();
        release(arg);
        int64_t d = now_ns();
        if (n + 4 > cap) {
            int64_t *t = realloc(rec, (cap *= 2) * sizeof *rec);
            if (!t)
                return 1;
            rec = t;
        }
        rec[n++] = a, rec[n++] = b, rec[n++] = c, rec[n++] = d;
    }
    for (size_t i = 0; i < n; i += 4)
        printf("%" PRId64 " %" PRId64 " %" PRId64 " %" PRId64 "\n", rec[i], rec[i + 1], rec[i + 2],
               rec[i + 3]);
    printf("done\n");
    free(rec);
    return 0;
}

#endif
