/*
 * backend_zk.c — ZooKeeper: ephemeral sequential znodes, a watch on the predecessor.
 *
 * Not written yet: the descriptor states what the backend will offer, so
 * that `dlock backends` shows the whole product and a zk URL answers
 * DLOCK_ENOTSUP naming what is missing. Its issue fills in the operations
 * here.
 */
#include "internal.h"

static const dl_scheme zk_schemes[] = {
    {"zk", "zk", 2181, true, DL_PATH_CHROOT},
    {NULL, NULL, 0, false, DL_PATH_NONE},
};

const dl_backend dl_backend_zk = {
    .version = DL_BACKEND_V1,
    .name = "zk",
    .schemes = zk_schemes,
    .caps = DLOCK_CAP_FENCING | DLOCK_CAP_FAIR | DLOCK_CAP_SHARED | DLOCK_CAP_SEMAPHORE |
            DLOCK_CAP_SESSION | DLOCK_CAP_NATIVE_BLOCKING | DLOCK_CAP_ELECTION,
    .liveness = "ephemeral znode, gone when the session expires",
    .fencing = "creation zxid of the lock znode; monotonic across leader changes",
    .missing = "the zk backend is not implemented in this version",
};
