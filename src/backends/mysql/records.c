/* SPDX-License-Identifier: MIT */
/*
 * records.c — claims (dlock once) on MySQL/MariaDB: one row per claim key
 * in the table dlock_claims of the URL's database, the seeds' unique-index
 * design with an expiry. Every mode's operations table has them (a claim
 * is not a lock: one table whatever the mode). The expiry is the server's
 * clock (UTC_TIMESTAMP, as the lease mode's); a read ignores a row whose
 * time is over, and each write deletes a few such rows of other keys. The
 * table is made on the first claim, not at open: a client that never
 * claims needs no CREATE right. A row's ver counts its writes; a write
 * names the ver it read and lands only there (UPDATE ... WHERE ver = ?, one
 * statement: InnoDB re-reads the row's newest version under its lock), or,
 * for ver 0, only where no live row is (an expired row updated in place,
 * else an INSERT that a row made meanwhile turns into nothing).
 *
 * The statements are fixed strings: a connection keeps its prepared
 * statements by the address of their text (my_stmt_of).
 */
#include "my_int.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define CLAIMS "dlock_claims"
/* Expired rows of other keys a write deletes (a number, for the SQL). */
#define MY_CLAIMS_SWEEP 4
#define MY_STR_(x) #x
#define MY_STR(x) MY_STR_(x)

static const char sql_ddl[] =
    "CREATE TABLE IF NOT EXISTS " CLAIMS " (name VARBINARY(200) NOT NULL PRIMARY KEY, "
    "val MEDIUMBLOB NOT NULL, expires_at DATETIME(6) NOT NULL, ver BIGINT NOT NULL, "
    "KEY (expires_at)) ENGINE=InnoDB";
static const char sql_get[] =
    "SELECT HEX(val), ver FROM " CLAIMS " WHERE name = ? AND expires_at > UTC_TIMESTAMP(6)";
/* (the WHERE sees the row before the SET) */
static const char sql_put_ver[] =
    "UPDATE " CLAIMS " SET val = UNHEX(?), expires_at = UTC_TIMESTAMP(6) + INTERVAL ? "
    "MICROSECOND, ver = ver + 1 WHERE name = ? AND ver = ? AND expires_at > UTC_TIMESTAMP(6)";
static const char sql_put_expired[] =
    "UPDATE " CLAIMS " SET val = UNHEX(?), expires_at = UTC_TIMESTAMP(6) + INTERVAL ? "
    "MICROSECOND, ver = ver + 1 WHERE name = ? AND expires_at <= UTC_TIMESTAMP(6)";
/* a duplicate changes nothing: 0 rows affected */
static const char sql_put_new[] =
    "INSERT INTO " CLAIMS " (name, val, expires_at, ver) VALUES (?, UNHEX(?), "
    "UTC_TIMESTAMP(6) + INTERVAL ? MICROSECOND, 1) ON DUPLICATE KEY UPDATE name = name";
static const char sql_del[] = "DELETE FROM " CLAIMS " WHERE name = ?";
/* The sweep: a plain read (no locks), then each row by its key, the
 * expiry looked at again: a range DELETE would take gap locks that a
 * concurrent write's insert can deadlock with. */
static const char sql_expired[] = "SELECT name FROM " CLAIMS
                                  " WHERE expires_at < UTC_TIMESTAMP(6) ORDER BY expires_at "
                                  "LIMIT " MY_STR(MY_CLAIMS_SWEEP);
static const char sql_sweep[] =
    "DELETE FROM " CLAIMS " WHERE name = ? AND expires_at < UTC_TIMESTAMP(6)";

/* The claims table, made when missing (a concurrent maker's CREATE may race
 * ours: IF NOT EXISTS, and a retry, as ensure_tables does). */
static int claims_ensure(dlock_client *c, char *why, size_t wlen)
{
    myclient *mc = mc_of(c);
    if (atomic_load(&mc->claims_ready))
        return 0;
    my_res r;
    my_arg t[] = {A_S(CLAIMS)};
    /* There already? A user without CREATE may use an existing table, and
     * MySQL refuses it CREATE TABLE IF NOT EXISTS even then. */
    int rc = my_pool_exec(c, mc->sql_table_exists, t, 1, &r, why, wlen);
    bool exists = rc == 0 && r.nrows == 1;
    my_res_free(&r);
    for (int attempt = 0; rc == 0 && !exists && attempt < 3; attempt++) {
        rc = my_pool_exec(c, sql_ddl, NULL, 0, &r, why, wlen);
        my_res_free(&r);
        if (rc != DLOCK_EPROTO)
            break;
    }
    if (rc == DLOCK_EPERM) {
        char line[200];
        snprintf(line, sizeof line, "%.190s", why);
        snprintf(why, wlen,
                 "cannot create the claims table `" CLAIMS "` (%s): create it once as a user "
                 "who may (see docs/mysql.md), or grant CREATE on the database",
                 line);
    }
    if (rc == 0)
        atomic_store(&mc->claims_ready, true);
    return rc;
}

int my_record_get(dlock_client *c, const char *key, char **val, size_t *len, uint64_t *ver)
{
    *val = NULL;
    *len = 0;
    *ver = 0;
    char why[600];
    int rc = claims_ensure(c, why, sizeof why);
    if (rc)
        return dl_claim_err(c, rc, "reading", key, why);
    my_res r;
    my_arg a[] = {A_S(key)};
    rc = my_pool_exec(c, sql_get, a, 1, &r, why, sizeof why);
    if (rc)
        return dl_claim_err(c, rc, "reading", key, why);
    rc = dl_sql_claim_read(c, key, my_cell(&r, 0, 0), my_cell(&r, 0, 1), val, len, ver);
    my_res_free(&r);
    return rc;
}

/* A few expired rows of other keys deleted, best effort: a failure here
 * takes nothing from the write that succeeded (the next write sweeps). */
static void claims_sweep(dlock_client *c, const char *key)
{
    char why[300];
    my_res r;
    if (my_pool_exec(c, sql_expired, NULL, 0, &r, why, sizeof why))
        return;
    for (int i = 0; i < r.nrows && i < MY_CLAIMS_SWEEP; i++) {
        const char *name = my_cell(&r, i, 0);
        if (!name || strcmp(name, key) == 0)
            continue;
        my_res d;
        my_arg a[] = {A_S(name)};
        int rc = my_pool_exec(c, sql_sweep, a, 1, &d, why, sizeof why);
        my_res_free(&d);
        if (rc)
            break;
    }
    my_res_free(&r);
}

int my_record_put(dlock_client *c, const char *key, const char *val, size_t len, int64_t ttl_ms,
                  uint64_t ver)
{
    char why[600];
    int rc = claims_ensure(c, why, sizeof why);
    if (rc)
        return dl_claim_err(c, rc, "writing", key, why);
    char *hex = malloc(2 * len + 1);
    if (!hex)
        return dl_claim_err(c, DLOCK_ENOMEM, "writing", key, "out of memory");
    dl_hex_encode(val, len, hex);
    my_res r;
    my_arg a[] = {A_S(hex), A_I(ttl_ms * 1000), A_S(key), A_I(ver)};
    rc = my_pool_exec(c, ver ? sql_put_ver : sql_put_expired, a, ver ? 4 : 3, &r, why,
                      sizeof why);
    unsigned long long landed = r.affected;
    my_res_free(&r);
    if (rc == 0 && !ver && !landed) { /* no expired row: a new one */
        my_arg n[] = {A_S(key), A_S(hex), A_I(ttl_ms * 1000)};
        rc = my_pool_exec(c, sql_put_new, n, 3, &r, why, sizeof why);
        landed = r.affected;
        my_res_free(&r);
    }
    free(hex);
    if (rc)
        return dl_claim_err(c, rc, "writing", key, why);
    if (!landed)
        return DL_RECORD_CHANGED;
    claims_sweep(c, key);
    return 0;
}

int my_record_del(dlock_client *c, const char *key)
{
    char why[600];
    int rc = claims_ensure(c, why, sizeof why);
    if (rc)
        return dl_claim_err(c, rc, "deleting", key, why);
    my_res r;
    my_arg a[] = {A_S(key)};
    rc = my_pool_exec(c, sql_del, a, 1, &r, why, sizeof why);
    my_res_free(&r);
    if (rc)
        return dl_claim_err(c, rc, "deleting", key, why);
    return 0;
}
