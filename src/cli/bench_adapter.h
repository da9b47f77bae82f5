/*
 * bench_adapter.h — what `dlock bench` does differently per backend, in one
 * table chosen by the client's backend name (dlock_client_backend), never by
 * the URL: the baseline round trip, the bare hand-over relay, the servers'
 * command counters, and the removal of what the run's lock names leave
 * behind. A backend without an entry of its own gets the library's tool
 * operations (src/tools.h), which answer DLOCK_ENOTSUP where the backend
 * has none; the harness then reports nothing for that figure.
 */
#ifndef DLOCK_CLI_BENCH_ADAPTER_H
#define DLOCK_CLI_BENCH_ADAPTER_H

#include "dlock.h"
#include "tools.h"

#include <stddef.h>
#include <stdint.h>

typedef struct bench_site {
    /* A client of the run's URL for the library's tool operations (NULL
     * when none could be opened); it never takes a lock, so it starts no
     * thread and may stay open while workers are forked. */
    dlock_client *client;
    const char *url; /* as the client shows it (no password) */
    char dir[4096];  /* file: the lock directory, "" when unknown */
} bench_site;

typedef struct bench_adapter {
    const char *backend; /* dlock_client_backend() name; NULL: every other backend */
    /* Learn from the site what the operations below need (may be NULL). */
    void (*open)(bench_site *s);
    /* Each returns 0, DLOCK_ENOTSUP (the backend has no such figure: none
     * is reported), or another DLOCK_E* code with the reason in err. */
    int (*baseline)(bench_site *s, const char *name, int iters, int64_t max_ns,
                    dh_timing *out, char *err, size_t errlen);
    int (*relay)(bench_site *s, const char *name, int iters, dh_timing *out, char *err,
                 size_t errlen);
    int (*counters)(bench_site *s, const char *name, dh_counters *out, char *err,
                    size_t errlen);
    /* Remove the state that lock `name`, free now, left behind (may be
     * NULL: nothing worth removing). */
    void (*forget)(bench_site *s, const char *name);
} bench_adapter;

/* The adapter of a backend (never NULL). */
const bench_adapter *bench_adapter_for(const char *backend);

#endif
