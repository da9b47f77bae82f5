/* SPDX-License-Identifier: MIT */
/*
 * records.c — claims (dlock once) on PostgreSQL: one row per claim key in
 * the table dlock_claims of the lock table's schema, the seeds' unique-index
 * design with an expiry. Every mode's operations table has them (the
 * claims table is the same whatever the mode: a claim is not a lock). The
 * expiry is the server's clock, as the lease mode's; a read ignores a row
 * whose time is over, and each write deletes a few such rows of other keys
 * (SKIP LOCKED: it never waits for another writer). The table is made on
 * the first claim, not at open: a client that never claims needs no
 * CREATE right. A row's ver counts its writes; a write names the ver it
 * read and lands only there (an UPDATE ... WHERE ver = $4, re-checked on
 * the row's newest version by the server), or only where no live row is
 * (ver 0: an INSERT whose conflict updates only an expired row).
 */
#include "pg_int.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Expired rows of other keys a write deletes. */
#define PG_CLAIMS_SWEEP 16

/* The claims table and its index, made when missing (pg_ensure_retry). */
static int claims_ensure_once(dlock_client *c, char *why, size_t wlen)
{
    pgclient *pc = pc_of(c);
    /* the index in the table's schema: "s"."dlock_claims_expires_at" */
    char idx[sizeof pc->claims + 16];
    const char *dot = strchr(pc->claims, '.');
    snprintf(idx, sizeof idx, "%.*s\"dlock_claims_expires_at\"",
             dot ? (int)(dot - pc->claims + 1) : 0, pc->claims);
    char ddl[2][300];
    snprintf(ddl[0], sizeof ddl[0],
             "CREATE TABLE IF NOT EXISTS %s (key text PRIMARY KEY, val bytea NOT NULL, "
             "expires_at timestamptz NOT NULL, ver bigint NOT NULL)",
             pc->claims);
    snprintf(ddl[1], sizeof ddl[1],
             "CREATE INDEX IF NOT EXISTS dlock_claims_expires_at ON %s (expires_at)", pc->claims);
    const char *p[] = {pc->claims, idx};
    const char *const d[] = {ddl[0], ddl[1]};
    return pg_tables_ensure(c, "claims", pc->claims,
                            "SELECT to_regclass($1) IS NOT NULL AND to_regclass($2) IS NOT NULL",
                            2, p, d, 2, why, wlen);
}

static int claims_ensure(dlock_client *c, char *why, size_t wlen)
{
    pgclient *pc = pc_of(c);
    if (atomic_load(&pc->claims_ready))
        return 0;
    int rc = pg_ensure_retry(c, claims_ensure_once, why, wlen);
    if (rc == 0)
        atomic_store(&pc->claims_ready, true);
    return rc;
}

int pg_record_get(dlock_client *c, const char *key, char **val, size_t *len, uint64_t *ver)
{
    pgclient *pc = pc_of(c);
    *val = NULL;
    *len = 0;
    *ver = 0;
    char why[600], sql[300];
    int rc = claims_ensure(c, why, sizeof why);
    if (rc)
        return dl_claim_err(c, rc, "reading", key, why);
    snprintf(sql, sizeof sql,
             "SELECT encode(val, 'hex'), ver FROM %s WHERE key = $1 AND expires_at > "
             "clock_timestamp()",
             pc->claims);
    const char *p[] = {key};
    PGresult *r;
    rc = pg_pool_run_until(c, -1, sql, 1, p, &r, why, sizeof why);
    if (rc)
        return dl_claim_err(c, rc, "reading", key, why);
    bool row = pg_lib.ntuples(r) > 0;
    rc = dl_sql_claim_read(c, key, row ? pg_lib.getvalue(r, 0, 0) : NULL,
                           row ? pg_lib.getvalue(r, 0, 1) : NULL, val, len, ver);
    pg_lib.clear(r);
    return rc;
}

int pg_record_put(dlock_client *c, const char *key, const char *val, size_t len, int64_t ttl_ms,
                  uint64_t ver)
{
    pgclient *pc = pc_of(c);
    char why[600], sql[1200], ttl[24], vers[24];
    int rc = claims_ensure(c, why, sizeof why);
    if (rc)
        return dl_claim_err(c, rc, "writing", key, why);
    /* The sweep's rows are other keys' (key <> $1), so it and the write
     * never touch one row twice. A row comes back where the write landed. */
    int at = snprintf(sql, sizeof sql,
                      "WITH swept AS (DELETE FROM %s WHERE ctid = ANY (ARRAY(SELECT ctid FROM %s "
                      "WHERE expires_at < clock_timestamp() AND key <> $1 LIMIT %d FOR UPDATE "
                      "SKIP LOCKED))) ",
                      pc->claims, pc->claims, PG_CLAIMS_SWEEP);
    if (ver)
        snprintf(sql + at, sizeof sql - (size_t)at,
                 "UPDATE %s SET val = decode($2, 'hex'), expires_at = clock_timestamp() + "
                 "$3::bigint * interval '1 millisecond', ver = ver + 1 WHERE key = $1 AND ver = "
                 "$4::bigint AND expires_at > clock_timestamp() RETURNING 1",
                 pc->claims);
    else /* $4 is 0: one of a row that expired goes on counting */
        snprintf(sql + at, sizeof sql - (size_t)at,
                 "INSERT INTO %s AS t (key, val, expires_at, ver) VALUES ($1, decode($2, 'hex'), "
                 "clock_timestamp() + $3::bigint * interval '1 millisecond', $4::bigint + 1) ON "
                 "CONFLICT (key) DO UPDATE SET val = EXCLUDED.val, expires_at = "
                 "EXCLUDED.expires_at, ver = t.ver + 1 WHERE t.expires_at <= clock_timestamp() "
                 "RETURNING 1",
                 pc->claims);
    char *hex = malloc(2 * len + 1);
    if (!hex)
        return dl_claim_err(c, DLOCK_ENOMEM, "writing", key, "out of memory");
    dl_hex_encode(val, len, hex);
    snprintf(ttl, sizeof ttl, "%" PRId64, ttl_ms);
    /* bigint is signed: a version past its top would be refused, and a
     * count of writes never gets there */
    snprintf(vers, sizeof vers, "%" PRIu64, ver);
    const char *p[] = {key, hex, ttl, vers};
    PGresult *r;
    rc = pg_pool_run_until(c, -1, sql, 4, p, &r, why, sizeof why);
    free(hex);
    if (rc)
        return dl_claim_err(c, rc, "writing", key, why);
    bool landed = pg_lib.ntuples(r) > 0;
    pg_lib.clear(r);
    return landed ? 0 : DL_RECORD_CHANGED;
}

int pg_record_del(dlock_client *c, const char *key)
{
    pgclient *pc = pc_of(c);
    char why[600], sql[200];
    int rc = claims_ensure(c, why, sizeof why);
    if (rc)
        return dl_claim_err(c, rc, "deleting", key, why);
    snprintf(sql, sizeof sql, "DELETE FROM %s WHERE key = $1", pc->claims);
    const char *p[] = {key};
    PGresult *r;
    rc = pg_pool_run_until(c, -1, sql, 1, p, &r, why, sizeof why);
    if (rc)
        return dl_claim_err(c, rc, "deleting", key, why);
    pg_lib.clear(r);
    return 0;
}
