/* SPDX-License-Identifier: MIT */
/*
 * token_crash.h — fencing tokens across a crash of the server that hands
 * them out (PostgreSQL's sequence, MariaDB's epoch): drawers take and give
 * back a lock as fast as they can until the server crashes under them and
 * after it is back. Every token granted after the crash must be above every
 * token granted before it. Include after cmocka.h and testutil.h.
 */
#ifndef DLOCK_TOKEN_CRASH_H
#define DLOCK_TOKEN_CRASH_H

#include <inttypes.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>

#include "dlock.h"

enum { CRASH_BEFORE, CRASH_DURING, CRASH_AFTER, CRASH_DRAWERS = 4 };

typedef struct {
    pthread_t t;
    const char *url;
    char name[64];
    atomic_int *phase;
    _Atomic uint64_t *max_before, *min_after;
    atomic_int grants;
} crash_drawer;

/* What a crash round saw: the highest token granted before the crash, the
 * lowest after it (UINT64_MAX: none), and how many grants in all. */
typedef struct {
    uint64_t max_before, min_after;
    int grants;
} crash_tokens;

static inline void crash_note(_Atomic uint64_t *v, uint64_t t, bool higher)
{
    uint64_t m = atomic_load(v);
    while ((higher ? t > m : t < m) && !atomic_compare_exchange_weak(v, &m, t))
        ;
}

static inline void *crash_drawer_main(void *arg)
{
    crash_drawer *d = arg;
    dlock_client *c = NULL;
    if (dlock_client_open(&c, d->url, NULL) != 0) {
        fprintf(stderr, "# drawer: open %s: %s\n", d->url, dlock_client_errmsg(NULL));
        return NULL;
    }
    dlock_lock *l = NULL;
    if (dlock_lock_new(&l, c, d->name, NULL) != 0) {
        fprintf(stderr, "# drawer: lock %s: %s\n", d->name, dlock_client_errmsg(c));
        dlock_client_close(c);
        return NULL;
    }
    int after = 0;
    int64_t give_up = now_ms() + 60000; /* should the server not come back */
    while (after < 20 && now_ms() < give_up) { /* a few grants after the crash, then done */
        if (dlock_acquire(l, 0) != 0) { /* (during the crash: refused, or no server) */
            sleep_ms(10);
            continue;
        }
        /* the phase when the grant had come back */
        int ph = atomic_load(d->phase);
        uint64_t t = dlock_token(l);
        if (ph == CRASH_BEFORE)
            crash_note(d->max_before, t, true);
        else if (ph == CRASH_AFTER) {
            crash_note(d->min_after, t, false);
            after++;
        }
        atomic_fetch_add(&d->grants, 1);
        (void)dlock_release(l);
    }
    dlock_lock_free(l);
    dlock_client_close(c);
    return NULL;
}

/* One round: a drawer per URL of urls[CRASH_DRAWERS], crash() once they all
 * draw, then until each has had a few grants after it. */
static inline crash_tokens tokens_across_crash(const char *const urls[CRASH_DRAWERS],
                                               void (*crash)(void))
{
    /* (static: a failed assertion leaves this frame while they still run) */
    static crash_drawer d[CRASH_DRAWERS];
    static atomic_int phase;
    static _Atomic uint64_t max_before, min_after;
    atomic_store(&phase, CRASH_BEFORE);
    atomic_store(&max_before, 0);
    atomic_store(&min_after, UINT64_MAX);
    for (int i = 0; i < CRASH_DRAWERS; i++) {
        d[i] = (crash_drawer){.url = urls[i], .phase = &phase, .max_before = &max_before,
                              .min_after = &min_after};
        unique(d[i].name, sizeof d[i].name, "crash");
        assert_int_equal(pthread_create(&d[i].t, NULL, crash_drawer_main, &d[i]), 0);
    }
    /* every drawer going (a slow start, under valgrind, can take seconds),
     * then half a second of them all */
    for (int64_t until = now_ms() + 30000; now_ms() < until;) {
        int going = 0;
        for (int i = 0; i < CRASH_DRAWERS; i++)
            going += atomic_load(&d[i].grants) > 0;
        if (going == CRASH_DRAWERS)
            break;
        sleep_ms(20);
    }
    sleep_ms(500);
    atomic_store(&phase, CRASH_DURING);
    crash();
    atomic_store(&phase, CRASH_AFTER);
    crash_tokens out = {0};
    for (int i = 0; i < CRASH_DRAWERS; i++) {
        assert_int_equal(pthread_join(d[i].t, NULL), 0);
        out.grants += atomic_load(&d[i].grants);
    }
    out.max_before = atomic_load(&max_before);
    out.min_after = atomic_load(&min_after);
    assert_true(out.max_before > 0);
    assert_true(out.min_after != UINT64_MAX);
    if (out.min_after <= out.max_before)
        fail_msg("token %" PRIu64 " granted after the crash, not above %" PRIu64
                 " granted before it",
                 out.min_after, out.max_before);
    return out;
}

#endif
