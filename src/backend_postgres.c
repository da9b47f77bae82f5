/*
 * backend_postgres.c — PostgreSQL: session advisory locks, or a lease table.
 *
 * Not written yet: the descriptor states what the backend will offer, so
 * that `dlock backends` shows the whole product and a postgres URL answers
 * DLOCK_ENOTSUP naming what is missing. Its issue fills in the operations
 * here.
 */
#include "internal.h"

static const dl_scheme postgres_schemes[] = {
    {"postgres", "postgres", 5432, false, DL_PATH_DBNAME},
    {"postgresql", "postgres", 5432, false, DL_PATH_DBNAME},
    {NULL, NULL, 0, false, DL_PATH_NONE},
};

const dl_backend dl_backend_postgres = {
    .version = DL_BACKEND_V1,
    .name = "postgres",
    .schemes = postgres_schemes,
    .caps = DLOCK_CAP_FENCING | DLOCK_CAP_SHARED | DLOCK_CAP_SESSION | DLOCK_CAP_LEASE |
            DLOCK_CAP_NATIVE_BLOCKING,
    .liveness = "advisory: the connection; lease mode: expiry column renewed",
    .fencing = "sequence-backed token row updated in the acquiring transaction",
    .missing = "the postgres backend is not implemented in this version",
};
