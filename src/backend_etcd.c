/*
 * backend_etcd.c — etcd v3: a lease per client, a key per waiter, a watch on the predecessor.
 *
 * Not written yet: the descriptor states what the backend will offer, so
 * that `dlock backends` shows the whole product and a etcd URL answers
 * DLOCK_ENOTSUP naming what is missing. Its issue fills in the operations
 * here.
 */
#include "internal.h"

static const dl_scheme etcd_schemes[] = {
    {"etcd", "etcd", 2379, true, DL_PATH_NONE},
    {"etcds", "etcds", 2379, true, DL_PATH_NONE},
    {NULL, NULL, 0, false, DL_PATH_NONE},
};

const dl_backend dl_backend_etcd = {
    .version = DL_BACKEND_V1,
    .name = "etcd",
    .schemes = etcd_schemes,
    .caps = DLOCK_CAP_FENCING | DLOCK_CAP_FAIR | DLOCK_CAP_SHARED | DLOCK_CAP_SEMAPHORE |
            DLOCK_CAP_LEASE | DLOCK_CAP_NATIVE_BLOCKING | DLOCK_CAP_ELECTION,
    .liveness = "lease with keep-alive",
    .fencing = "create revision of the waiter key; monotonic",
    .missing = "the etcd backend is not implemented in this version",
};
