/* SPDX-License-Identifier: MIT */
/*
 * rowlock.c — PostgreSQL's mode=rowlock, one of the backend's three modes
 * (postgres.c: what they share; pg_int.h).
 *
 * A lock is the name's row of the rowlock table, locked by SELECT … FOR
 * UPDATE in a transaction left open on a session of its own (watched like
 * an advisory lock's), released by COMMIT. The server queues the waiters
 * on the row; NOWAIT and a transaction-local lock_timeout bound tries and
 * timed waits. The row itself cannot carry the token (a rolled-back
 * transaction would take it back): the token is nextval of the table's
 * sequence, drawn by the statement once it has the row. Who holds a row is
 * read from pg_locks: the holder's transaction holds its own transaction
 * id, which is the locked row's xmax.
 */
#include "pg_int.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* rowlock: the session holding NAME's row: pg_locks of the transaction that locked it. */
#define ROW_HOLDER_JOIN                                                                      \
    "LEFT JOIN pg_locks AS l ON l.locktype = 'transactionid' AND l.transactionid = t.xmax "  \
    "AND l.granted AND l.mode = 'ExclusiveLock' "

int pg_rowlock_build_sql(pgclient *pc)
{
    const char *t = pc->table;
    pc->sql_row_ensure = dl_fmt_alloc("INSERT INTO %s (name) VALUES ($1) ON CONFLICT DO NOTHING", t);
    /* The waiters queue first on a transaction advisory lock on the name's
     * key (FIFO in the server's lock manager), then lock the row, which is
     * free by then: on the row alone, a newcomer could take it between a
     * commit and the next waiter's lock (16-36 %% of sections overtaken with
     * 8 waiters). The commit lets go of both. */
    /* The transaction only locks: its commit (the release) loses nothing a
     * crash would not end anyway, so it is not flushed (synchronous_commit
     * off, for this transaction). The token is drawn by sql_row_info. */
    pc->sql_row_try = dl_fmt_alloc(
        "WITH a AS (SELECT pg_try_advisory_xact_lock($2::bigint) AS ok), l AS (SELECT t.name "
        "FROM %s AS t, a WHERE a.ok AND t.name = $1 FOR UPDATE OF t NOWAIT) "
        "SELECT set_config('synchronous_commit', 'off', true) FROM l",
        t);
    /* set_config first (the join reads s before the row is locked) */
    pc->sql_row_wait = dl_fmt_alloc(
        "WITH s AS (SELECT set_config('lock_timeout', $3, true) AS v), a AS (SELECT "
        "pg_advisory_xact_lock($2::bigint) AS q FROM s), l AS (SELECT t.name FROM "
        "%s AS t, a WHERE t.name = $1 FOR UPDATE OF t) "
        "SELECT set_config('synchronous_commit', 'off', true) FROM l",
        t);
    /* (only when there is one: a write per release made its commit a flush) */
    pc->sql_row_unvalue = dl_fmt_alloc(
        "UPDATE %s SET value = NULL WHERE name = $1 AND owner = $2 AND value IS NOT NULL",
        pc->values);
    pc->sql_row_value = dl_fmt_alloc(
        "UPDATE %s SET value = $3 WHERE name = $1 AND owner = $2 RETURNING 1", pc->values);
    /* who took the row, with its token (drawn here, once the row is ours:
     * see pg_token_ctes) */
    char *tok = pg_token_ctes(pc, "(SELECT 1) AS one", "true");
    pc->sql_row_info = tok ? dl_fmt_alloc(
        "WITH %s INSERT INTO %s AS h (name, owner, token, holder, since) SELECT $1, $2, d.v, $3, "
        "clock_timestamp() FROM d, c ON CONFLICT (name) DO UPDATE SET owner = excluded.owner, "
        "token = excluded.token, holder = excluded.holder, since = excluded.since, value = NULL "
        "RETURNING h.token",
        tok, pc->values) : NULL;
    free(tok);
    return pc->sql_row_ensure && pc->sql_row_try && pc->sql_row_wait &&
                   pc->sql_row_unvalue && pc->sql_row_value && pc->sql_row_info &&
                   pg_run_build_sql(pc) == 0
               ? 0
               : DLOCK_ENOMEM;
}

static int row_inspect(dlock_client *c, const char *name, dlock_info *info)
{
    pgclient *pc = pc_of(c);
    char sql[2400], why[300];
    snprintf(sql, sizeof sql,
             "SELECT l.pid, h.holder, "
             "floor(extract(epoch FROM clock_timestamp() - h.since) * 1000)::bigint, "
             /* waiters: in the queue's advisory lock, and on the row itself
              * (clients of older versions queue there) */
             "(SELECT count(*) FROM pg_locks AS w WHERE NOT w.granted AND "
             "((w.locktype = 'transactionid' AND w.transactionid = t.xmax) OR "
             "(w.locktype = 'tuple' AND w.relation = to_regclass($2) AND "
             "w.page = (t.ctid::text::point)[0]::int AND w.tuple = (t.ctid::text::point)[1]::int)))"
             " + (SELECT count(*) FROM pg_locks AS l WHERE " PG_LOCKS_OF("$3::bigint")
             " AND NOT l.granted), "
             "h.token FROM (SELECT 1) AS one LEFT JOIN %s AS t ON t.name = $1 " ROW_HOLDER_JOIN
             "LEFT JOIN %s AS h ON h.name = $1",
             pc->table, pc->values);
    char key[24];
    snprintf(key, sizeof key, "%" PRId64, pg_key_of(pc, name));
    const char *p[] = {name, pc->table, key};
    PGresult *r;
    int rc = pg_pool_run(c, sql, 3, p, &r, why, sizeof why);
    if (rc)
        return dl_client_err(c, rc, "inspect \"%s\": %s (%s)", name, why, pc->redacted);
    bool held = !pg_lib.getisnull(r, 0, 0);
    info->held = held;
    info->holders = held ? 1 : 0;
    info->waiters = pg_lib.getisnull(r, 0, 3) ? 0 : atoi(pg_lib.getvalue(r, 0, 3));
    info->token = pg_lib.getisnull(r, 0, 4) ? 0 : strtoull(pg_lib.getvalue(r, 0, 4), NULL, 10);
    info->lease_ms = -1;
    info->held_ms = -1;
    if (held && !pg_lib.getisnull(r, 0, 1)) {
        pg_holder_into(r, 1, info); /* written by the holder once it had the row */
        if (!pg_lib.getisnull(r, 0, 2))
            info->held_ms = strtoll(pg_lib.getvalue(r, 0, 2), NULL, 10);
    }
    pg_lib.clear(r);
    return 0;
}

/* The leader's value: beside the row (the row is locked), in TABLE_holder. */
static int row_set_value(dlock_lock *l, const char *value)
{
    pgclient *pc = pc_of(l->c);
    const char *p[] = {l->name, l->owner, value};
    PGresult *r;
    char why[300];
    int rc = pg_pool_run(l->c, pc->sql_row_value, 3, p, &r, why, sizeof why);
    bool ours = !rc && pg_lib.ntuples(r) == 1;
    pg_lib.clear(r);
    if (rc)
        return dl_lock_err(l, rc, "lock \"%s\": publishing the value: %s", l->name, why);
    if (!ours)
        return dl_lock_err(l, DLOCK_ELOST, "lock \"%s\": another holder took it", l->name);
    return 0;
}

/* rowlock: who took the row, with its token, on another pooled session
 * (the row's own is in its transaction) */
static int rowlock_draw(dlock_lock *l, void *arg, char *why, size_t wlen)
{
    pgclient *pc = pc_of(l->c);
    PGresult *r;
    int rc = pg_pool_run_until(l->c, pg_call_until(l), pc->sql_row_info, 3, arg, &r, why, wlen);
    if (rc)
        return rc;
    rc = pg_lib.ntuples(r) == 1 ? 0 : 1;
    if (!rc)
        atomic_store(&l->token, strtoull(pg_lib.getvalue(r, 0, 0), NULL, 10));
    pg_lib.clear(r);
    return rc;
}

/* The grant's statements on t->k: the name's row (committed at once), then
 * the transaction that locks it (its statements take the name, the queue's
 * key and the timeout) and the names table. */
static int rowlock_send(dlock_lock *l, pg_try *t)
{
    pgclient *pc = pc_of(l->c);
    pglock *pl = l->bstate;
    pg_conn *k = t->k;
    char line[200];
    int rc = 0;
    const char *sql = t->deadline_ns == 0 ? pc->sql_row_try : pc->sql_row_wait;
    const char *p[] = {l->name, t->key, t->timeout};
    int np = t->deadline_ns == 0 ? 2 : 3;
    const char *ensure[] = {l->name};
    const char *mine[] = {l->name, pc->mode, pc->table}; /* the names table's row */
    while (k->pending > 0 && !rc) /* replies left from the session's last use */
        rc = pg_stmt_read(k, t->until, t->cancel_fd, NULL, t->why, sizeof t->why);
    if (!rc)
        rc = pg_stmt_send_fixed(k, pc->sql_row_ensure, 1, ensure, t->until, t->cancel_fd,
                                t->why, sizeof t->why);
    if (!rc && !pl->named) /* (committed before the transaction: see pg_names_check) */
        rc = pg_stmt_send_fixed(k, pc->sql_names_add, 3, mine, t->until, t->cancel_fd, t->why,
                                sizeof t->why);
    if (!rc)
        rc = pg_stmt_send_fixed(k, "BEGIN", 0, NULL, t->until, t->cancel_fd, t->why,
                                sizeof t->why);
    for (int i = 0; i < (pl->named ? 2 : 3) && !rc; i++) {
        PGresult *r = NULL;
        rc = pg_stmt_read(k, t->until, t->cancel_fd, &r, t->why, sizeof t->why);
        if (!rc && *pg_sqlstate(r)) {
            rc = pg_code_of_state(pg_sqlstate(r));
            snprintf(t->why, sizeof t->why, "%s",
                     pg_one_line(pg_lib.resultErrorMessage(r), line, sizeof line));
        }
        pg_lib.clear(r);
    }
    if (rc && rc != DLOCK_ETIMEDOUT && rc != DLOCK_ECANCELED &&
        !(rc == DLOCK_EUNREACHABLE && t->reused)) {
        pg_conn_close(k);
        t->k = NULL;
        return dl_lock_err(l, rc, "lock \"%s\": %s (%s)", l->name, t->why, pc->redacted);
    }
    if (rc)
        return rc;
    /* The name's rows in the names table, read once it is ours (its own
     * row added before the transaction): see pg_names_check. */
    const char *seq[] = {sql, pc->sql_names_get};
    const int ns[] = {np, 1};
    const char *const *vals[] = {p, mine};
    PGresult **outs[] = {&t->r, &t->names};
    return pg_run_fixed_seq(k, 2, seq, ns, vals, t->until, t->cancel_fd, outs, t->why,
                            sizeof t->why);
}

/* The grant's result (the row, locked), then the token, drawn with who
 * took the row on another session. */
static int rowlock_took(dlock_lock *l, pg_try *t)
{
    pgclient *pc = pc_of(l->c);
    pg_conn *k = t->k;
    if (pg_lib.ntuples(t->r) != 1 && t->deadline_ns == 0) { /* the queue's lock is taken */
        pg_lib.clear(t->r);
        pg_lib.clear(t->names);
        pg_conn_close(k); /* (its transaction is open) */
        return dl_lock_err(l, DLOCK_EBUSY, "lock \"%s\" is held by another owner", l->name);
    }
    if (pg_lib.ntuples(t->r) != 1) { /* its row is gone: dropped by hand? */
        pg_lib.clear(t->r);
        pg_lib.clear(t->names);
        pg_conn_close(k);
        return dl_lock_err(l, DLOCK_EPROTO, "lock \"%s\": its row in %s vanished", l->name,
                           pc->table);
    }
    pg_lib.clear(t->r);
    int rc = pg_names_check(l, t->names, 0, NULL, t->why, sizeof t->why);
    pg_lib.clear(t->names);
    if (rc) {
        pg_conn_close(k); /* the session's end lets go */
        return dl_lock_err(l, rc, "lock \"%s\": %s", l->name, t->why);
    }
    /* the token, and who took the row for dlock_inspect and the leader's
     * value: the row itself stays locked until the release */
    const char *ip[] = {l->name, l->owner, pg_try_holder(l, t)};
    rc = rowlock_draw(l, (void *)ip, t->why, sizeof t->why);
    if (rc == 1) /* no epoch in force */
        rc = pg_draw_under_epoch(l, rowlock_draw, (void *)ip, t->why, sizeof t->why);
    if (rc) {
        pg_conn_close(k); /* its transaction ends, and the row is free */
        /* (on a second pooled session, which may have to connect: time
         * running out there is a timeout, as for the lock's own) */
        char what[sizeof t->why + 32];
        snprintf(what, sizeof what, "recording the holder: %s", t->why);
        return dl_connect_err(l, t->deadline_ns, rc, what, pc->redacted);
    }
    return 0;
}

static const pg_grant rowlock_grant = {
    .send = rowlock_send,
    .took = rowlock_took,
};

static int rowlock_acquire(dlock_lock *l, int64_t deadline_ns)
{
    return pg_session_acquire(l, deadline_ns, &rowlock_grant);
}

/* COMMIT; its leader value goes with it (sent, not waited for). */
static int rowlock_release(dlock_lock *l)
{
    return pg_session_release(l, "COMMIT", 0, false, pc_of(l->c)->sql_row_unvalue);
}

static int rowlock_get_value(dlock_client *c, const char *name, char *buf, size_t len)
{
    pgclient *pc = pc_of(c);
    char sql[2400];
    /* beside the locked row, while its holder's transaction lives */
    snprintf(sql, sizeof sql,
             "SELECT v.value FROM %s AS v JOIN %s AS t ON t.name = v.name " ROW_HOLDER_JOIN
             "WHERE v.name = $1 AND l.pid IS NOT NULL AND v.value IS NOT NULL",
             pc->values, pc->table);
    return pg_value_by(c, name, sql, 1, buf, len);
}

/* The sessions holding the row ended: their holders are told at once. */
static int rowlock_break(dlock_client *c, const char *name, dlock_info *broken)
{
    char sql[900];
    snprintf(sql, sizeof sql,
             PG_BREAK_ENDED "%s AS t " ROW_HOLDER_JOIN "WHERE t.name = $1 AND l.pid IS NOT NULL) AS x",
             pc_of(c)->table);
    return pg_break_by(c, name, broken, sql, name);
}

/* The table of names, its sequence (UNLOGGED where it may be: see
 * pg_token_tables_ensure), and TABLE_holder (who took each row last, with its
 * token and the leader's value). */
int pg_rowlock_tables(dlock_client *c, char *why, size_t wlen)
{
    pgclient *pc = pc_of(c);
    const char *p[] = {pc->table, pc->seq, pc->values};
    char table[1000], seq[1000], values[1000];
    snprintf(table, sizeof table, "CREATE TABLE IF NOT EXISTS %s (name text PRIMARY KEY)",
             pc->table);
    snprintf(seq, sizeof seq, "CREATE SEQUENCE IF NOT EXISTS %s", pc->seq);
    snprintf(values, sizeof values,
             "CREATE TABLE IF NOT EXISTS %s (name text PRIMARY KEY, owner text NOT NULL, "
             "token bigint NOT NULL, holder text NOT NULL, since timestamptz, value text)",
             pc->values);
    const char *ddl[] = {table, seq, values};
    return pg_token_tables_ensure(c,
                                  "SELECT to_regclass($1) IS NOT NULL AND to_regclass($2) IS "
                                  "NOT NULL AND to_regclass($3) IS NOT NULL",
                                  3, p, ddl, 3, why, wlen);
}

const dl_backend_ops pg_rowlock_ops = {
    .client_open = pg_client_open,
    .client_close = pg_client_close,
    .lock_init = pg_lock_init,
    .lock_fini = pg_lock_fini,
    .acquire = rowlock_acquire,
    .release = rowlock_release,
    .abandon = pg_session_abandon,
    .inspect = row_inspect,
    .list = pg_list,
    .set_value = row_set_value,
    .get_value = rowlock_get_value,
    .break_lock = rowlock_break,
    PG_RECORD_OPS,
};
