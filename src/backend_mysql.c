/*
 * backend_mysql.c — MySQL / MariaDB: GET_LOCK, or the seeds' unique-index lease table.
 *
 * Not written yet: the descriptor states what the backend will offer, so
 * that `dlock backends` shows the whole product and a mysql URL answers
 * DLOCK_ENOTSUP naming what is missing. Its issue fills in the operations
 * here.
 */
#include "internal.h"

static const dl_scheme mysql_schemes[] = {
    {"mysql", "mysql", 3306, false, DL_PATH_DBNAME},
    {"mariadb", "mysql", 3306, false, DL_PATH_DBNAME},
    {NULL, NULL, 0, false, DL_PATH_NONE},
};

const dl_backend dl_backend_mysql = {
    .version = DL_BACKEND_V1,
    .name = "mysql",
    .schemes = mysql_schemes,
    .caps = DLOCK_CAP_FENCING | DLOCK_CAP_SESSION | DLOCK_CAP_LEASE | DLOCK_CAP_NATIVE_BLOCKING,
    .liveness = "GET_LOCK: the connection; lease mode: expiry column renewed",
    .fencing = "token row updated in the acquiring transaction",
    .missing = "the mysql backend is not implemented in this version",
};
