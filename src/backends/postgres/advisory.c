/* SPDX-License-Identifier: MIT */
/*
 * advisory.c — PostgreSQL's mode=advisory (the default), one of the
 * backend's three modes (postgres.c: what they share; pg_int.h).
 *
 * A lock is a session advisory lock on a 64-bit
 * key, FNV-1a of the table's name and the lock's name. Each held lock has a
 * connection of its own, taken from the client's pool and given back once
 * the lock is unlocked, so that no lock can leak into a session someone else
 * uses. The server queues the waiters in its lock manager and wakes one per
 * release; lock_timeout bounds a timed wait on the server's side.
 *
 * One statement takes the lock and draws its token: the advisory lock in a
 * CTE, nextval of the table's sequence once the lock is ours (see
 * pg_token_ctes: no WAL flush per grant), then an upsert of the name's row in
 * the table (default "dlock"),
 *
 *     name text PRIMARY KEY, key bigint UNIQUE, token bigint, holder, since, value
 *
 * that records the holder and its token. Two names whose keys collide meet at the unique key:
 * the second one's acquisition fails, naming the first (never a silent
 * shared lock).
 *
 * Liveness is the connection. A thread per client watches the sockets of
 * the connections that hold locks: a server that ends the session (a
 * restart, pg_terminate_backend, dlock break) closes it, and the holder is
 * told at once. A network that goes silent is found by TCP keepalives
 * (2 s idle, then 3 probes 1 s apart, unless the URL says otherwise). A
 * waiter that gives up (timeout, dlock_cancel) has its statement cancelled
 * from another connection and its own closed; on servers from 14 on,
 * client_connection_check_interval also makes a waiting backend whose
 * client died leave the queue within a second.
 */
#include "pg_int.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/*
 * An advisory holder's session takes, with the lock, a lock of the two-key
 * space (objsubid 2) whose keys are its token's halves: pg_locks shows it
 * to every session at once, and it writes nothing. The holder's row in the
 * table, a write (a third of a hand-over), is then needed only at a
 * handle's first grant (see advisory_send). Its session is found by its pid:
 * application_name says who ("dlock pid N on HOST", unless the URL set
 * it), state_change since when (its last statement: the grant). The first
 * key is the token's high half minus 2^31, negative, where applications'
 * two-key locks ((table oid, row), ...) seldom are; and it is only tried:
 * one taken by someone else never holds a grant up (inspect then reads the
 * name's row).
 */
#define TOKEN_LOCK(fn, v)                                                                    \
    fn "(((" v " >> 32) - 2147483648)::int, substring(" v "::bit(64) from 33)::bit(32)::int)"
/* The holders of key with a token lock, the highest token first: tok, who,
 * held_ms (NULL when this role may not see it) (l is pg_locks). */
#define TOKEN_HOLDERS(key)                                                                   \
    "SELECT ((h.classid::bigint - 2147483648) << 32) | h.objid::bigint AS tok, "             \
    "a.application_name AS who, "                                                            \
    "floor(extract(epoch FROM clock_timestamp() - a.state_change) * 1000)::bigint "          \
    "AS held_ms "                                                                            \
    "FROM pg_locks l JOIN pg_locks h ON h.pid = l.pid AND h.locktype = 'advisory' AND "      \
    "h.objsubid = 2 AND h.granted AND h.database = l.database, "                             \
    "pg_stat_get_activity(l.pid) AS a "                                                      \
    "WHERE " PG_LOCKS_OF(key) " AND l.granted ORDER BY 1 DESC"

/* The name that took l's key first (a collision), into buf. */
static void colliding_name(dlock_lock *l, char *buf, size_t len)
{
    pgclient *pc = pc_of(l->c);
    pglock *pl = l->bstate;
    char key[24], why[128], sql[256];
    snprintf(key, sizeof key, "%" PRId64, pl->key);
    snprintf(sql, sizeof sql, "SELECT name FROM %s WHERE key = $1::bigint", pc->table);
    const char *p[] = {key};
    PGresult *r = NULL;
    snprintf(buf, len, "another name");
    if (pg_pool_run_until(l->c, pg_call_until(l), sql, 1, p, &r, why, sizeof why) == 0 &&
        pg_lib.ntuples(r) == 1)
        snprintf(buf, len, "\"%s\"", pg_lib.getvalue(r, 0, 0));
    pg_lib.clear(r);
}

/* A grant whose advisory key is another name's (the table's unique key
 * said so): DLOCK_ENAME, naming it. */
static int key_collision(dlock_lock *l)
{
    pgclient *pc = pc_of(l->c);
    char other[DL_NAME_MAX + 8];
    colliding_name(l, other, sizeof other);
    return dl_lock_err(l, DLOCK_ENAME,
                       "lock \"%s\": its advisory key collides with the one of %s in table %s "
                       "(64-bit hash): use another name",
                       l->name, other, pc->table);
}

/* advisory: the draw alone, on the session k holding the lock */
struct advisory_draw {
    pg_conn *k;
    const char *const *params; /* key, name, holder */
};

static int advisory_draw(dlock_lock *l, void *arg, char *why, size_t wlen)
{
    pgclient *pc = pc_of(l->c);
    struct advisory_draw *a = arg;
    PGresult *r;
    char line[200];
    int rc = pg_run_fixed(a->k, pc->sql_redraw, 3, a->params, pg_op_until(pc, l), -1, &r, why, wlen);
    if (rc)
        return rc;
    if (strcmp(pg_sqlstate(r), "23505") == 0) {
        rc = DLOCK_ENAME; /* (the caller names the other: key_collision) */
        snprintf(why, wlen, "its advisory key collides with another name's");
    } else if (*pg_sqlstate(r)) {
        rc = pg_code_of_state(pg_sqlstate(r));
        snprintf(why, wlen, "%s", pg_one_line(pg_lib.resultErrorMessage(r), line, sizeof line));
    } else if (pg_lib.ntuples(r) == 1 && !pg_lib.getisnull(r, 0, 1)) {
        atomic_store(&l->token, strtoull(pg_lib.getvalue(r, 0, 1), NULL, 10));
    } else {
        rc = 1;
    }
    pg_lib.clear(r);
    return rc;
}

/* The grant's statements on t->k: the lock, with the token and (at a
 * handle's first grant) the holder's row, then the names table. */
static int advisory_send(dlock_lock *l, pg_try *t)
{
    pgclient *pc = pc_of(l->c);
    pglock *pl = l->bstate;
    bool shared = l->opts.kind == DLOCK_SHARED;
    const char *sql;
    const char *mine[] = {l->name, pc->mode, pc->table}; /* the names table's row */
    int np;
    /* The holder's row is written by a handle's first grant: that write
     * catches a name whose key another's has (see key_collision) and lists
     * the name. Later grants leave it out (see TOKEN_LOCK). */
    bool bare = pl->rowed;
    const char *p[4] = {t->key, l->name, bare ? "" : pg_try_holder(l, t), t->timeout};
    /* (bare: the key, the wait's timeout, the names' change counter) */
    const char *pb_try[] = {t->key, pc->names_changes_param};
    const char *pb_wait[] = {t->key, t->timeout, pc->names_changes_param};
    /* A bare wait sets lock_timeout only where its session's differs (a
     * wait for ever: "0", as every session starts). */
    bool sets = t->deadline_ns != 0 && strcmp(t->k->lock_timeout_ms, t->timeout) != 0;
    const char *const *pb = sets ? pb_wait : pb_try;
    if (t->deadline_ns == 0) {
        sql = bare ? pc->sql_bare[0][shared] : shared ? pc->sql_try_r : pc->sql_try_x;
        np = bare ? 2 : 3;
    } else {
        sql = bare ? pc->sql_bare[sets ? 1 : 2][shared] : shared ? pc->sql_wait_r
                                                                 : pc->sql_wait_x;
        np = bare ? (sets ? 3 : 2) : 4;
        /* (a statement that fails closes its session: see pg_session_acquire) */
        if (sets && !t->k->unnamed)
            snprintf(t->k->lock_timeout_ms, sizeof t->k->lock_timeout_ms, "%s", t->timeout);
    }
    /* The name's rows in the names table, read once it is ours (our own
     * row added first unless it was there last time): see pg_names_check. */
    const char *seq[] = {sql, pc->sql_names_add, pc->sql_names_get};
    int ns[] = {np, 3, 1};
    const char *const *vals[] = {bare ? pb : p, mine, mine};
    PGresult **outs[] = {&t->r, NULL, &t->names};
    if (pl->names_seen) /* (a bare grant's, named) no read unless the names changed: took */
        return pg_run_fixed_joint(t->k, 1, seq, ns, vals, t->until, t->cancel_fd, outs, t->why,
                                  sizeof t->why);
    if (pl->named) {
        /* The read alone after the grant: one segment, so one transaction
         * and one reply of the server's, one send of ours. (Read committed,
         * see pg_conn_open: the read's snapshot is still taken after the
         * grant.) The row's add is committed in its own. Where the names'
         * changes are counted, after a try of the writers' lock, so that
         * the handle may read no more while they do not change. */
        const char *names[] = {pc->names};
        bool counted = bare && pc->names_changes_param;
        seq[1] = counted ? pc->sql_names_quiet : seq[2];
        ns[1] = counted ? 1 : ns[2];
        vals[1] = counted ? names : vals[2];
        outs[1] = counted ? &t->quiet : outs[2];
        return pg_run_fixed_joint(t->k, counted ? 3 : 2, seq, ns, vals, t->until, t->cancel_fd,
                                  outs, t->why, sizeof t->why);
    }
    return pg_run_fixed_seq(t->k, 3, seq, ns, vals, t->until, t->cancel_fd, outs, t->why,
                            sizeof t->why);
}

/* The name's rows read after the grant, and looked at (pg_names_check).
 * Read here if the grant's statements did not (the handle had seen them
 * unchanged): on k, after a try of the names writers' lock. A read made
 * after that try succeeded, that found only our row, lets the handle skip
 * the next reads while the counter (changes, epoch, read before it) stays
 * (see names_announce). */
static int names_read_check(dlock_lock *l, pg_try *t, bool counted, int64_t changes,
                            uint64_t epoch)
{
    pgclient *pc = pc_of(l->c);
    pglock *pl = l->bstate;
    int rc = 0;
    if (pl->names_seen) {
        const char *sqls[] = {pc->sql_names_quiet, pc->sql_names_get};
        const int ns[] = {1, 1};
        const char *names[] = {pc->names}, *mine[] = {l->name};
        const char *const *vals[] = {names, mine};
        PGresult **outs[] = {&t->quiet, &t->names};
        rc = pg_run_fixed_joint(t->k, 2, sqls, ns, vals, t->until, -1, outs, t->why,
                                sizeof t->why);
        pl->names_seen = false;
    }
    bool quiet = !rc && t->quiet && pg_lib.resultStatus(t->quiet) == PGRES_TUPLES_OK &&
                 pg_lib.ntuples(t->quiet) == 1 && strcmp(pg_lib.getvalue(t->quiet, 0, 0), "t") == 0;
    if (t->names && pg_lib.resultStatus(t->names) != PGRES_TUPLES_OK) {
        pg_lib.clear(t->names); /* (a statement before it failed: read again) */
        t->names = NULL;
    }
    bool alone = false;
    if (!rc)
        rc = pg_names_check(l, t->names, 0, &alone, t->why, sizeof t->why);
    if (!rc && quiet && alone && counted && t->names) {
        pl->names_seen = true;
        pl->names_changes = changes;
        pl->names_epoch = epoch;
    }
    pg_lib.clear(t->quiet);
    pg_lib.clear(t->names);
    t->quiet = t->names = NULL;
    return rc;
}

/* The grant's result (column ok: whether it was one; the token, or none
 * yet: no epoch in force, drawn here). */
static int advisory_took(dlock_lock *l, pg_try *t)
{
    pgclient *pc = pc_of(l->c);
    pglock *pl = l->bstate;
    pg_conn *k = t->k;
    PGresult *r = t->r;
    if (pg_lib.ntuples(r) != 1 || strcmp(pg_lib.getvalue(r, 0, 0), "t") != 0) {
        pg_lib.clear(r); /* try: someone holds it */
        pg_lib.clear(t->names);
        pg_lib.clear(t->quiet);
        pg_conn_put(pc, k);
        return dl_lock_err(l, DLOCK_EBUSY, "lock \"%s\" is held by another owner", l->name);
    }
    bool drawn = !pg_lib.getisnull(r, 0, 1);
    if (drawn)
        atomic_store(&l->token, strtoull(pg_lib.getvalue(r, 0, 1), NULL, 10));
    /* the names table's change counter once the lock was ours (bare), and
     * the token's epoch: see names_announce */
    bool counted = drawn && pl->rowed && !pg_lib.getisnull(r, 0, 2);
    int64_t changes = counted ? strtoll(pg_lib.getvalue(r, 0, 2), NULL, 10) : 0;
    uint64_t epoch = atomic_load(&l->token) >> PG_EPOCH_SHIFT;
    pg_lib.clear(r);
    int rc = 0;
    if (!(pl->names_seen && counted && changes == pl->names_changes && epoch == pl->names_epoch))
        rc = names_read_check(l, t, counted, changes, epoch);
    if (!rc && !drawn) { /* the lock is ours, and no epoch was in force */
        const char *p[] = {t->key, l->name, pg_try_holder(l, t)};
        struct advisory_draw a = {k, p};
        rc = pg_draw_under_epoch(l, advisory_draw, &a, t->why, sizeof t->why);
        if (rc == DLOCK_ENAME) {
            pg_conn_close(k);
            return key_collision(l);
        }
    }
    if (rc) {
        pg_conn_close(k); /* the session's end lets go */
        return dl_lock_err(l, rc, "lock \"%s\": %s", l->name, t->why);
    }
    pl->rowed = true;
    return 0;
}

static const pg_grant advisory_grant = {
    .send = advisory_send,
    .took = advisory_took,
    .unique_violation = key_collision,
};

static int advisory_acquire(dlock_lock *l, int64_t deadline_ns)
{
    return pg_session_acquire(l, deadline_ns, &advisory_grant);
}

/* Waited for: once release returns, a rival's try finds the lock free, and
 * an unlock that held nothing says the lock was lost. (Sent and not waited
 * for, the cycle was 2.4 x SELECT 1 instead of 3.6, but a try right after
 * the release could still find it held.) The token lock goes with it. */
#define UNLOCK_TOKEN TOKEN_LOCK("pg_advisory_unlock", "$2::bigint")
static int advisory_release(dlock_lock *l)
{
    const char *sql = l->opts.kind == DLOCK_SHARED
                          ? "SELECT pg_advisory_unlock_shared($1::bigint), " UNLOCK_TOKEN
                          : "SELECT pg_advisory_unlock($1::bigint), " UNLOCK_TOKEN;
    return pg_session_release(l, sql, 2, true, NULL);
}
#undef UNLOCK_TOKEN

static int advisory_inspect(dlock_client *c, const char *name, dlock_info *info)
{
    pgclient *pc = pc_of(c);
    char key[24], why[300], sql[2400];
    snprintf(key, sizeof key, "%" PRId64, pg_key_of(pc, name));
    /* the holder by its token lock (g), else (a client of an older version)
     * by the name's row, which the last grant that wrote it left */
    snprintf(sql, sizeof sql,
             "WITH g AS (" TOKEN_HOLDERS("$1::bigint") " LIMIT 1) "
             "SELECT (SELECT count(*) FROM pg_locks l WHERE " PG_LOCKS_OF("$1::bigint")
             " AND l.granted), (SELECT count(*) FROM pg_locks l WHERE " PG_LOCKS_OF("$1::bigint")
             " AND NOT l.granted), t.token, t.holder, "
             "floor(extract(epoch FROM clock_timestamp() - t.since) * 1000)::bigint, "
             "g.tok, g.who, g.held_ms "
             "FROM (SELECT 1) AS one LEFT JOIN %s AS t ON t.name = $2 LEFT JOIN g ON true",
             pc->table);
    const char *p[] = {key, name};
    PGresult *r;
    int rc = pg_pool_run(c, sql, 2, p, &r, why, sizeof why);
    if (rc)
        return dl_client_err(c, rc, "inspect \"%s\": %s (%s)", name, why, pc->redacted);
    int holders = atoi(pg_lib.getvalue(r, 0, 0));
    bool by_lock = !pg_lib.getisnull(r, 0, 5); /* (its token lock: see TOKEN_LOCK) */
    info->held = holders > 0;
    info->holders = holders;
    info->waiters = atoi(pg_lib.getvalue(r, 0, 1));
    info->lease_ms = -1;
    info->held_ms = -1;
    if (by_lock) {
        info->token = strtoull(pg_lib.getvalue(r, 0, 5), NULL, 10);
        /* (its session's application_name: "dlock pid N on HOST") */
        const char *who = pg_lib.getvalue(r, 0, 6);
        if (strncmp(who, "dlock ", 6) == 0)
            who += 6;
        snprintf(info->holder, sizeof info->holder, "%s", who);
        if (!pg_lib.getisnull(r, 0, 7)) /* (NULL: this role may not see it) */
            info->held_ms = strtoll(pg_lib.getvalue(r, 0, 7), NULL, 10);
    } else if (holders > 0 && !pg_lib.getisnull(r, 0, 2)) { /* a holder of an older version */
        info->token = strtoull(pg_lib.getvalue(r, 0, 2), NULL, 10);
        if (!pg_lib.getisnull(r, 0, 3)) /* the last to write it */
            pg_holder_into(r, 3, info);
        if (!pg_lib.getisnull(r, 0, 4))
            info->held_ms = strtoll(pg_lib.getvalue(r, 0, 4), NULL, 10);
    }
    /* (free: no token; the row keeps what a handle's first grant wrote, so
     * its token may be below the last one issued) */
    pg_lib.clear(r);
    return 0;
}

/* The leader's value, in the name's row, on the session holding the lock. */
static int advisory_set_value(dlock_lock *l, const char *value)
{
    pgclient *pc = pc_of(l->c);
    pg_conn *k = pg_unwatch_conn(l);
    int rc = dl_session_usable(l, k ? &k->sess : NULL);
    if (rc)
        return rc;
    char sql[200], why[300];
    char tok[24]; /* (whose value it is: see advisory_get_value) */
    snprintf(tok, sizeof tok, "%" PRIu64, (uint64_t)atomic_load(&l->token));
    snprintf(sql, sizeof sql, "UPDATE %s SET value = $2, token = $3 WHERE name = $1",
             pc->table);
    const char *p[] = {l->name, value, tok};
    PGresult *r;
    int64_t until = dl_deadline_in(dl_op_timeout_ms(l, pc->op_timeout_ms));
    rc = pg_run(k, sql, 3, p, until, -1, &r, why, sizeof why);
    if (!rc && *pg_sqlstate(r)) {
        char line[200];
        rc = pg_code_of_state(pg_sqlstate(r));
        snprintf(why, sizeof why, "%s", pg_one_line(pg_lib.resultErrorMessage(r), line, sizeof line));
    }
    pg_lib.clear(r);
    pg_rewatch_conn(l, k);
    if (rc)
        return dl_lock_err(l, rc, "lock \"%s\": publishing the value: %s", l->name, why);
    return 0;
}

static int advisory_get_value(dlock_client *c, const char *name, char *buf, size_t len)
{
    char sql[2400];
    /* (a value its holder published: the token its set_value wrote is the
     * holder's, or the holder took no token lock, an older client) */
    snprintf(sql, sizeof sql,
             "WITH g AS (" TOKEN_HOLDERS("$2::bigint") ") "
             "SELECT t.value FROM %s AS t WHERE t.name = $1 AND t.value IS NOT NULL AND "
             "EXISTS (SELECT 1 FROM pg_locks l WHERE " PG_LOCKS_OF("$2::bigint")
             " AND l.granted AND l.mode = 'ExclusiveLock') AND (t.token IN (SELECT tok "
             "FROM g) OR NOT EXISTS (SELECT 1 FROM g))",
             pc_of(c)->table);
    return pg_value_by(c, name, sql, 2, buf, len);
}

/* The sessions holding the key ended: their holders are told at once. */
static int advisory_break(dlock_client *c, const char *name, dlock_info *broken)
{
    char key[24];
    snprintf(key, sizeof key, "%" PRId64, pg_key_of(pc_of(c), name));
    return pg_break_by(c, name, broken,
                       PG_BREAK_ENDED "pg_locks l WHERE " PG_LOCKS_OF("$1::bigint")
                                      " AND l.granted) AS t",
                       key);
}

/* The statements that take a lock, with the table's name in them. */
int pg_advisory_build_sql(pgclient *pc)
{
    /* (l: the lock's row, ok; the holder's row written only with a token;
     * (ok, NULL): the lock is ours and no epoch is in force, see pg_token_ctes;
     * f: the token lock, see TOKEN_LOCK) */
#define GRANT_TAIL                                                                           \
    "%s, u AS (INSERT INTO %s AS t (name, key, token, holder, since) "                       \
    "SELECT $2, $1::bigint, d.v, $3, clock_timestamp() FROM d, c "                           \
    "ON CONFLICT (name) DO UPDATE SET token = excluded.token, holder = excluded.holder, "    \
    "since = excluded.since, value = NULL RETURNING t.token), "                              \
    "f AS (SELECT " TOKEN_LOCK("pg_try_advisory_lock", "d.v") " FROM d) "                    \
    "SELECT l.ok, (SELECT u.token FROM u), (SELECT count(*) FROM f) FROM l"
    /* the same without the holder's row (see advisory_send), and with the
     * names table's change counter, once the lock is ours (parameter $N:
     * the sequence's name, or NULL; see names_announce) */
#define BARE_TAIL                                                                            \
    "%s, f AS (SELECT d.v, " TOKEN_LOCK("pg_try_advisory_lock", "d.v") " FROM d, c), "       \
    "v AS (SELECT pg_sequence_last_value(to_regclass($%d)) AS nv FROM l WHERE l.ok) "        \
    "SELECT l.ok, (SELECT f.v FROM f), (SELECT v.nv FROM v) FROM l"
    char *tok = pg_token_ctes(pc, "l", "l.ok");
    char *tail = tok ? dl_fmt_alloc(GRANT_TAIL, tok, pc->table) : NULL;
    char *bare_try = tok ? dl_fmt_alloc(BARE_TAIL, tok, 2) : NULL;
    char *bare_wait = tok ? dl_fmt_alloc(BARE_TAIL, tok, 3) : NULL;
#undef GRANT_TAIL
#undef BARE_TAIL
    free(tok);
    /* set_config first (l reads s): lock_timeout bounds the wait that follows */
    static const char try_x[] = "WITH l AS (SELECT pg_try_advisory_lock($1::bigint) AS ok), %s";
    static const char try_r[] =
        "WITH l AS (SELECT pg_try_advisory_lock_shared($1::bigint) AS ok), %s";
    static const char wait_x[] =
        "WITH s AS (SELECT set_config('lock_timeout', $%d, false) AS v), "
        "l AS (SELECT pg_advisory_lock($1::bigint), true AS ok FROM s), %s";
    static const char wait_r[] =
        "WITH s AS (SELECT set_config('lock_timeout', $%d, false) AS v), "
        "l AS (SELECT pg_advisory_lock_shared($1::bigint), true AS ok FROM s), %s";
    /* (the session's lock_timeout already the wait's: see advisory_send) */
    static const char wait_kept_x[] =
        "WITH l AS (SELECT pg_advisory_lock($1::bigint), true AS ok), %s";
    static const char wait_kept_r[] =
        "WITH l AS (SELECT pg_advisory_lock_shared($1::bigint), true AS ok), %s";
    if (tail && bare_try && bare_wait) {
        pc->sql_try_x = dl_fmt_alloc(try_x, tail);
        pc->sql_try_r = dl_fmt_alloc(try_r, tail);
        pc->sql_wait_x = dl_fmt_alloc(wait_x, 4, tail);
        pc->sql_wait_r = dl_fmt_alloc(wait_r, 4, tail);
        pc->sql_bare[0][0] = dl_fmt_alloc(try_x, bare_try);
        pc->sql_bare[0][1] = dl_fmt_alloc(try_r, bare_try);
        pc->sql_bare[1][0] = dl_fmt_alloc(wait_x, 2, bare_wait);
        pc->sql_bare[1][1] = dl_fmt_alloc(wait_r, 2, bare_wait);
        pc->sql_bare[2][0] = dl_fmt_alloc(wait_kept_x, bare_try);
        pc->sql_bare[2][1] = dl_fmt_alloc(wait_kept_r, bare_try);
        /* the draw alone, on the session holding the lock (after run_ensure) */
        pc->sql_redraw = dl_fmt_alloc("WITH l AS (SELECT true AS ok), %s", tail);
    }
    free(tail);
    free(bare_try);
    free(bare_wait);
    bool bare_ok = true;
    for (size_t i = 0; i < sizeof pc->sql_bare / sizeof pc->sql_bare[0][0]; i++)
        bare_ok = bare_ok && pc->sql_bare[i / 2][i % 2];
    return pc->sql_try_x && pc->sql_try_r && pc->sql_wait_x && pc->sql_wait_r && bare_ok &&
                   pc->sql_redraw && pg_run_build_sql(pc) == 0
               ? 0
               : DLOCK_ENOMEM;
}

/* The table (name, key UNIQUE, token, holder, since, value) and its
 * tokens' sequence, UNLOGGED where it may be (see pg_token_tables_ensure). */
int pg_advisory_tables(dlock_client *c, char *why, size_t wlen)
{
    pgclient *pc = pc_of(c);
    const char *p[] = {pc->table, pc->seq};
    char table[1000], seq[1000];
    snprintf(table, sizeof table,
             "CREATE TABLE IF NOT EXISTS %s (name text PRIMARY KEY, key bigint NOT NULL "
             "UNIQUE, token bigint NOT NULL, holder text NOT NULL DEFAULT '', "
             "since timestamptz, value text)",
             pc->table);
    /* The tokens' sequence, new in this version for an advisory table: it
     * starts above the counters the table's rows kept, in the transaction
     * that creates it, so no name's token goes back. */
    snprintf(seq, sizeof seq,
             "DO $$BEGIN IF to_regclass('%s') IS NULL THEN CREATE SEQUENCE %s; "
             "PERFORM setval('%s', (SELECT coalesce(max(token), 0) + 1 FROM %s), false); "
             "END IF; END$$",
             pc->seq, pc->seq, pc->seq, pc->table);
    const char *ddl[] = {table, seq};
    return pg_token_tables_ensure(c,
                                  "SELECT to_regclass($1) IS NOT NULL AND to_regclass($2) IS "
                                  "NOT NULL",
                                  2, p, ddl, 2, why, wlen);
}

const dl_backend_ops pg_advisory_ops = {
    .client_open = pg_client_open,
    .client_close = pg_client_close,
    .lock_init = pg_lock_init,
    .lock_fini = pg_lock_fini,
    .acquire = advisory_acquire,
    .release = advisory_release,
    .abandon = pg_session_abandon,
    .inspect = advisory_inspect,
    .list = pg_list,
    .set_value = advisory_set_value,
    .get_value = advisory_get_value,
    .break_lock = advisory_break,
    PG_RECORD_OPS,
};

