/*
 * backend_memcached.c — memcached: add to take, compare-and-swap to release and renew.
 *
 * Not written yet: the descriptor states what the backend will offer, so
 * that `dlock backends` shows the whole product and a memcached URL answers
 * DLOCK_ENOTSUP naming what is missing. Its issue fills in the operations
 * here.
 */
#include "internal.h"

static const dl_scheme memcached_schemes[] = {
    {"memcached", "memcached", 11211, false, DL_PATH_NONE},
    {NULL, NULL, 0, false, DL_PATH_NONE},
};

const dl_backend dl_backend_memcached = {
    .version = DL_BACKEND_V1,
    .name = "memcached",
    .schemes = memcached_schemes,
    .caps = DLOCK_CAP_FENCING | DLOCK_CAP_FENCING_WEAK | DLOCK_CAP_LEASE,
    .liveness = "item expiry renewed with touch",
    .fencing = "incr counter; eviction or restart can reset it (weak)",
    .missing = "the memcached backend is not implemented in this version",
};
