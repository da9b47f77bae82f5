/* SPDX-License-Identifier: MIT */
/*
 * lease.c — PostgreSQL's mode=lease, one of the backend's three modes
 * (postgres.c: what they share; pg_int.h).
 *
 * A lock is a row (name, slot) of the lease table: owned while `owner` is
 * set and `expires` — the server's clock, never ours — is ahead. Taking it
 * is one statement that inserts the row or takes over a free or expired one
 * (the row lock ON CONFLICT takes re-checks the condition, so two takers
 * cannot both win); a semaphore of N permits has N slots and a taker gets
 * the first free one. One name is one lock: an exclusive lock (and a
 * semaphore of 1) is slot 0, a semaphore of N permits slots N * 8192 + i
 * (PG_LEASE_SLOT_BASE), and a take waits while a row of the name outside
 * its own slots is held — an exclusive taker for every permit — except a
 * semaphore taker that finds a semaphore of other permits: that is
 * DLOCK_ECONFLICT. Two takers of different kinds insert different rows, so
 * each looks again after its take (the statement after it, a fresh
 * snapshot) and gives its row back if it finds the other held: of two at
 * once, at least one sees the other. Renewal and release check the owner. Tokens come from
 * the table's sequence (nextval is never rolled back and never repeats).
 * Nothing lives in a session between statements: the lock survives a
 * connection's end, and renewal may use any connection (transaction-mode
 * poolers work for holders).
 *
 * Waiting: a waiter queues in the waiters' table (TABLE_wait: its arrival
 * and a liveness stamp it refreshes every second) and LISTENs on a channel
 * of its own; a release NOTIFYs the first live waiter only, in the same
 * statement. Nobody takes a free row while a live waiter queued before it
 * (a newcomer: any live waiter) wants it, so the row goes in arrival order.
 * A waiter also wakes when the holder's row would expire (the take-over)
 * and at least every second (a NOTIFY may be lost: a transaction-mode
 * pooler does not carry LISTEN; a waiter that died leaves the queue when
 * its stamp runs out, 3 s).
 */
#include "pg_int.h"

#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* lease: a queued waiter (row w of TABLE_wait) that lives: its stamp is
 * fresh and the session it queued from is still there (a waiter killed
 * with -9 ends its session at once; its stamp would hold the ones behind it
 * back for up to 3 s). pid is NULL in rows queued by older versions. */
#define LEASE_WAITER_LIVE(w)                                                                 \
    w ".alive >= clock_timestamp() AND (" w ".pid IS NULL OR EXISTS (SELECT 1 FROM "         \
    "pg_stat_get_activity(" w ".pid)))"

#define PG_LEASE_RECHECK_MS 1000
/* The first slot of a lock's kind (see above): the permits are slot >> 13. */
#define PG_LEASE_SLOT_BASE(permits) ((permits) > 1 ? (int)(permits) << 13 : 0)
#define PG_LEASE_SLOTS_OF(k) /* k's slot is not one of this taker's ($6, $5 of them) */      \
    "(" k ".slot < $6::int OR " k ".slot >= $6::int + $5::int)"

int pg_lease_build_sql(pgclient *pc)
{
    const char *t = pc->table;
    /* A row of the taker's own owner is free to it: the leftover of a take
     * of this same acquisition whose reply a broken session lost (the
     * handle holds nothing while it acquires). */
    pc->sql_take = dl_fmt_alloc(
        "WITH free AS (SELECT s FROM generate_series($6::int, $6::int + $5::int - 1) AS s "
        "WHERE NOT EXISTS (SELECT 1 FROM %s AS o WHERE o.name = $1 AND (o.slot = s OR "
        PG_LEASE_SLOTS_OF("o") ") AND o.owner IS NOT NULL AND o.owner <> $2 AND "
        "o.expires >= clock_timestamp()) AND NOT EXISTS (SELECT 1 FROM %s AS w WHERE "
        "w.name = $1 AND w.owner <> $2 AND " LEASE_WAITER_LIVE("w") " AND w.since < "
        "coalesce((SELECT m.since FROM %s AS m WHERE m.name = $1 AND m.owner = $2), "
        "'infinity')) ORDER BY s LIMIT 1) "
        "INSERT INTO %s AS t (name, slot, owner, expires, token, holder, since) "
        "SELECT $1, free.s, $2, clock_timestamp() + $3::int * interval '1 millisecond', "
        "nextval('%s'), $4, clock_timestamp() FROM free "
        /* The take-over draws its own token: excluded.token was drawn
         * before this statement waited for the row's lock, maybe behind a
         * holder that drew a larger one, took the row and let it go
         * meanwhile — a later holder would get a smaller token. */
        "ON CONFLICT (name, slot) DO UPDATE SET owner = excluded.owner, "
        "expires = excluded.expires, token = nextval('%s'), holder = excluded.holder, "
        "since = excluded.since, value = NULL "
        "WHERE t.owner IS NULL OR t.expires < clock_timestamp() OR t.owner = excluded.owner "
        "RETURNING t.slot, t.token",
        t, pc->waiters, pc->waiters, t, pc->seq, pc->seq);
    /* When not taken: how long until the first holder's row expires; when
     * taken, the name's rows in the names table (see pg_names_check), one a
     * row, beside it; and a held slot of another kind than the taker's
     * ($2 its first slot, $3 its permits), if any. */
    pc->sql_expiry = dl_fmt_alloc(
        "SELECT e.ms, n.mode, n.tbl, (SELECT min(k.slot) FROM %s AS k WHERE k.name = $1 AND "
        "(k.slot < $2::int OR k.slot >= $2::int + $3::int) AND k.owner IS NOT NULL AND "
        "k.expires >= clock_timestamp()) FROM (SELECT floor(greatest(0, extract(epoch FROM "
        "min(expires) - clock_timestamp()) * 1000)) AS ms FROM %s WHERE name = $1 AND owner IS "
        "NOT NULL) AS e LEFT JOIN %s AS n ON n.name = $1",
        t, t, pc->names);
    /* The release, and a NOTIFY to the first live waiter (at commit). */
    /* A release commits without waiting for a WAL flush (the take, a
     * flushed commit after it, covers it): a release a crash forgets leaves
     * the row to expire, which delays the next holder by at most the lease
     * after a crash, and never makes two. */
    pc->sql_free = dl_fmt_alloc(
        "WITH a AS (SELECT set_config('synchronous_commit', 'off', true)), "
        "r AS (UPDATE %s SET owner = NULL, expires = NULL WHERE name = $1 AND slot = $2 "
        "AND owner = $3 AND (SELECT count(*) FROM a) = 1 RETURNING name), "
        "w AS (SELECT q.owner FROM %s AS q WHERE q.name = $1 AND " LEASE_WAITER_LIVE("q")
        " AND EXISTS (SELECT 1 FROM r) ORDER BY q.since LIMIT 1), "
        "n AS (SELECT pg_notify('dlock_w_' || owner, $1) FROM w), "
        /* the dead waiters' rows found on the way go (a -9 leaves its row) */
        "d AS (DELETE FROM %s AS q WHERE q.name = $1 AND NOT (" LEASE_WAITER_LIVE("q") ")) "
        "SELECT (SELECT count(*) FROM r) WHERE (SELECT count(*) FROM n) >= 0 AND "
        "EXISTS (SELECT 1 FROM r)",
        t, pc->waiters, pc->waiters);
    /* A waiter queues with its session's pid (its liveness beside the
     * stamp; none behind a transaction pooler, whose server sessions are
     * not the waiter's), and removes the dead rows of the name it finds. */
    pc->sql_enqueue = dl_fmt_alloc(
        "WITH d AS (DELETE FROM %s AS q WHERE q.name = $1 AND q.owner <> $2 AND NOT ("
        LEASE_WAITER_LIVE("q") ")) "
        "INSERT INTO %s (name, owner, since, alive, pid) VALUES ($1, $2, clock_timestamp(), "
        "clock_timestamp() + interval '3 seconds', %s) ON CONFLICT (name, owner) "
        "DO UPDATE SET alive = excluded.alive, pid = excluded.pid",
        pc->waiters, pc->waiters, pc->txpool ? "NULL::int" : "pg_backend_pid()");
    pc->sql_refresh = dl_fmt_alloc(
        "UPDATE %s SET alive = clock_timestamp() + interval '3 seconds' WHERE name = $1 AND "
        "owner = $2",
        pc->waiters);
    pc->sql_dequeue = dl_fmt_alloc("DELETE FROM %s WHERE name = $1 AND owner = $2", pc->waiters);
    /* An acquisition that gave up: the row its take may yet have won (see
     * lease_give_up) let go, with a NOTIFY to the first live waiter, and
     * its place in the queue left. */
    pc->sql_give_up = dl_fmt_alloc(
        "WITH r AS (UPDATE %s SET owner = NULL, expires = NULL WHERE name = $1 AND owner = $2 "
        "RETURNING name), "
        "dq AS (DELETE FROM %s WHERE name = $1 AND owner = $2), "
        "w AS (SELECT q.owner FROM %s AS q WHERE q.name = $1 AND q.owner <> $2 AND "
        LEASE_WAITER_LIVE("q") " AND EXISTS (SELECT 1 FROM r) ORDER BY q.since LIMIT 1), "
        "n AS (SELECT pg_notify('dlock_w_' || owner, $1) FROM w) "
        "SELECT (SELECT count(*) FROM r) WHERE (SELECT count(*) FROM n) >= 0",
        t, pc->waiters, pc->waiters);
    pc->sql_setvalue = dl_fmt_alloc(
        "UPDATE %s SET value = $4 WHERE name = $1 AND slot = $2::int AND owner = $3 AND "
        "expires >= clock_timestamp() RETURNING 1",
        t);
    pc->sql_renew = dl_fmt_alloc(
        "UPDATE %s SET expires = clock_timestamp() + $4::int * interval '1 millisecond' "
        "WHERE name = $1 AND slot = $2 AND owner = $3 AND expires >= clock_timestamp() "
        "RETURNING 1",
        t);
    /* Many renewals in one statement: arrays of names, slots, owners and
     * leases; the rows still ours come back by their place in the arrays. */
    pc->sql_renew_many = dl_fmt_alloc(
        "UPDATE %s AS t SET expires = clock_timestamp() + b.ttl * interval '1 millisecond' "
        "FROM unnest($1::text[], $2::int[], $3::text[], $4::int[]) WITH ORDINALITY "
        "AS b(name, slot, owner, ttl, i) WHERE t.name = b.name AND t.slot = b.slot AND "
        "t.owner = b.owner AND t.expires >= clock_timestamp() RETURNING b.i",
        t);
    return pc->sql_take && pc->sql_expiry && pc->sql_free && pc->sql_renew &&
                   pc->sql_renew_many && pc->sql_enqueue &&
                   pc->sql_refresh && pc->sql_dequeue && pc->sql_give_up && pc->sql_setvalue
               ? 0
               : DLOCK_ENOMEM;
}

/* Notifications that came to a session are not needed once read. */
static void drop_notices(pg_conn *k)
{
    PGnotify *nf;
    (void)pg_lib.consumeInput(k->pg);
    while ((nf = pg_lib.notifies(k->pg)) != NULL)
        pg_lib.freemem(nf);
}

/* One round of a lease acquisition on k: the statements in `pre` (LISTEN,
 * the waiter's row), then a take and the time until the first holder's row
 * expires, all pipelined. 1 taken, 0 not (expires_in set), or an error. */
static int lease_try(dlock_lock *l, pg_conn *k, const char *const *pre, const int *npar,
                     int npre, int64_t until, int cancel_fd, long *expires_in, PGresult **names,
                     int *other, char *why, size_t wlen)
{
    *names = NULL;
    *other = -1;
    pgclient *pc = pc_of(l->c);
    pglock *pl = l->bstate;
    char ttl[16], permits[16], self[200], holder[300], base[16];
    snprintf(ttl, sizeof ttl, "%d", l->opts.ttl_ms);
    snprintf(permits, sizeof permits, "%u", l->opts.permits);
    snprintf(base, sizeof base, "%d", PG_LEASE_SLOT_BASE(l->opts.permits));
    dl_self_desc(self, sizeof self);
    snprintf(holder, sizeof holder, "%s %s", l->owner, self);
    const char *p[] = {l->name, l->owner, ttl, holder, permits, base};
    const char *pe[] = {l->name, base, permits};
    int rc = 0;
    for (int i = 0; i < npre && !rc; i++)
        rc = strncmp(pre[i], "LISTEN", 6) == 0 /* (its channel is the waiter's own) */
                 ? pg_stmt_send(k, pre[i], npar[i], p, until, cancel_fd, why, wlen)
                 : pg_stmt_send_fixed(k, pre[i], npar[i], p, until, cancel_fd, why, wlen);
    int64_t sent = dl_now_ns();
    if (!rc)
        rc = pg_stmt_send_fixed(k, pc->sql_take, 6, p, until, cancel_fd, why, wlen);
    /* our row in the names table (unless it was there last time), and
     * after the take, with the expiry, the name's rows (see pg_names_check) */
    const char *mine[] = {l->name, pc->mode, pc->table};
    if (!rc && !pl->named)
        rc = pg_stmt_send_fixed(k, pc->sql_names_add, 3, mine, until, cancel_fd, why, wlen);
    if (!rc)
        rc = pg_stmt_send_fixed(k, pc->sql_expiry, 3, pe, until, cancel_fd, why, wlen);
    PGresult *took = NULL, *r = NULL;
    int after = pl->named ? 2 : 3; /* statements sent after the pre ones */
    while (!rc && k->pending > after) { /* what came before: must have worked */
        rc = pg_stmt_read(k, until, cancel_fd, &r, why, wlen);
        if (!rc && *pg_sqlstate(r)) {
            char line[200];
            rc = pg_code_of_state(pg_sqlstate(r));
            snprintf(why, wlen, "%s", pg_one_line(pg_lib.resultErrorMessage(r), line, sizeof line));
        }
        pg_lib.clear(r);
        r = NULL;
    }
    if (!rc)
        rc = pg_stmt_read(k, until, cancel_fd, &took, why, wlen);
    if (!rc && !pl->named) { /* our row is there from now on */
        rc = pg_stmt_read(k, until, cancel_fd, &r, why, wlen);
        pl->named = !rc && !*pg_sqlstate(r);
        pg_lib.clear(r);
        r = NULL;
    }
    if (!rc)
        rc = pg_stmt_read(k, until, cancel_fd, &r, why, wlen);
    if (!rc && *pg_sqlstate(took)) {
        char line[200];
        rc = pg_code_of_state(pg_sqlstate(took));
        snprintf(why, wlen, "%s", pg_one_line(pg_lib.resultErrorMessage(took), line, sizeof line));
    }
    if (!rc && !*pg_sqlstate(r) && pg_lib.ntuples(r) >= 1 && !pg_lib.getisnull(r, 0, 3))
        *other = atoi(pg_lib.getvalue(r, 0, 3));
    int taken = 0;
    if (!rc && pg_lib.ntuples(took) == 1) {
        pl->slot = atoi(pg_lib.getvalue(took, 0, 0));
        atomic_store(&l->token, strtoull(pg_lib.getvalue(took, 0, 1), NULL, 10));
        l->lease_start_ns = sent; /* counted from before the statement that took it */
        taken = 1;
    } else if (!rc) {
        /* -1: no row is held (a live waiter ahead of us is due to take it) */
        *expires_in = !*pg_sqlstate(r) && pg_lib.ntuples(r) >= 1 && !pg_lib.getisnull(r, 0, 0)
                          ? atol(pg_lib.getvalue(r, 0, 0))
                          : -1;
    }
    pg_lib.clear(took);
    if (taken && !*pg_sqlstate(r)) /* the name's rows: columns 1 and 2 */
        *names = r;
    else
        pg_lib.clear(r);
    return rc ? rc : taken;
}

/* A statement about the held row (release, renewal, value) on a pooled
 * session: 1 when it touched the row, 0 when the row is no longer ours.
 * sql is one of the client's fixed statements (it is prepared). */
static int lease_row(dlock_lock *l, const char *sql, const char *extra, int *touched)
{
    pgclient *pc = pc_of(l->c);
    pglock *pl = l->bstate;
    char slot[16], why[300], line[200];
    snprintf(slot, sizeof slot, "%d", pl->slot);
    const char *p[] = {l->name, slot, l->owner, extra};
    int64_t until = dl_deadline_in(dl_op_timeout_ms(l, pc->op_timeout_ms));
    pg_conn *k;
    PGresult *r;
    char st[8]; /* the result is cleared before the code is looked at */
    for (;;) {
        int rc = pg_conn_get(pc, until, -1, &k, why, sizeof why);
        if (rc)
            return dl_lock_err(l, rc, "lock \"%s\": %s (%s)", l->name, why, pc->redacted);
        bool reused = k->reused;
        rc = pg_run_fixed(k, sql, extra ? 4 : 3, p, until, -1, &r, why, sizeof why);
        snprintf(st, sizeof st, "%s", rc ? "" : pg_sqlstate(r));
        /* (a pooled session that died idle, its goodbye read as the
         * answer or none: again on another, see dl_pool_again) */
        if (reused && (rc == DLOCK_EUNREACHABLE || pg_state_session_ended(st))) {
            pg_lib.clear(r);
            pg_conn_close(k);
            continue;
        }
        if (rc) {
            pg_conn_close(k);
            return dl_lock_err(l, rc == DLOCK_ETIMEDOUT ? DLOCK_EUNREACHABLE : rc,
                               "lock \"%s\": %s (%s)", l->name, why, pc->redacted);
        }
        break;
    }
    if (*st) {
        pg_one_line(pg_lib.resultErrorMessage(r), line, sizeof line);
        pg_lib.clear(r);
        pg_conn_put(pc, k);
        return dl_lock_err(l, pg_code_of_state(st), "lock \"%s\": %s (%s)", l->name, line,
                           pc->redacted);
    }
    *touched = pg_lib.ntuples(r) > 0;
    pg_lib.clear(r);
    drop_notices(k);
    pg_conn_put(pc, k);
    return 0;
}

/*
 * An acquisition that gives up (a cancel, its deadline, an error) on k,
 * which may still carry statements of its own: the server runs them all
 * the same, whatever the caller has been told. A take among them may win
 * the name after the caller heard "not acquired" — measured: a waiter
 * cancelled during its first try, whose take ran 2 ms after the holder's
 * release, left the name held by nobody for its whole lease. So the row
 * such a take may have won is let go and the queue row removed
 * (sql_give_up), on k itself while it works: a session runs its
 * statements in order, so this runs after them. Without k, on another
 * session (k's server session is gone: nothing of it runs later). k is
 * closed either way.
 */
static void lease_give_up(dlock_lock *l, pg_conn *k)
{
    pgclient *pc = pc_of(l->c);
    /* (within the caller's deadline and its margin: a stopped server
     * cannot hold the caller past it; what is left then is a queue row that
     * its stamp ends, and a won row the handle's next take takes back) */
    int64_t until = pg_op_until(pc, l);
    const char *p[] = {l->name, l->owner};
    char why[300];
    int rc = k && pg_lib.status(k->pg) == CONNECTION_OK ? 0 : DLOCK_EUNREACHABLE;
    if (!rc)
        rc = pg_stmt_send_fixed(k, pc->sql_give_up, 2, p, until, -1, why, sizeof why);
    while (!rc && k->pending > 0)
        rc = pg_stmt_read(k, until, -1, NULL, why, sizeof why);
    pg_conn_close(k);
    if (!rc || dl_ms_left(until) == 0)
        return;
    PGresult *r;
    (void)pg_pool_run_until(l->c, until, pc->sql_give_up, 2, p, &r, why, sizeof why);
    pg_lib.clear(r);
}

static int lease_acquire(dlock_lock *l, int64_t deadline_ns)
{
    pgclient *pc = pc_of(l->c);
    char why[300], listen[64];
    int cancel_fd = deadline_ns != 0 ? dl_cancel_fd(l) : -1;
    pg_conn *k;
    int64_t bound = dl_deadline_in(pc->connect_timeout_ms);
    if (deadline_ns > 0 && l->op_deadline_ns < bound)
        bound = l->op_deadline_ns;
    int rc = pg_conn_get(pc, bound, cancel_fd, &k, why, sizeof why);
    if (rc)
        return dl_connect_err(l, deadline_ns, rc, why, pc->redacted);
    /* A waiter listens on a channel of its own and queues in the waiters'
     * table; a release notifies the first live waiter only. */
    snprintf(listen, sizeof listen, "LISTEN \"dlock_w_%s\"", l->owner);
    /* (behind a transaction pooler, no LISTEN: it would stay on a server
     * session that others get next; the waiter re-checks every second) */
    const char *enqueue[] = {listen, pc->sql_enqueue};
    const char *refresh[] = {pc->sql_refresh};
    static const int enqueue_npar[] = {0, 2}, refresh_npar[] = {2};
    bool queued = false, tried = false, enqueuing = false;
    long expires_in = 0;
    int64_t refreshed = 0; /* when our queue row's liveness stamp was last renewed */
    for (;;) {
        int64_t until = dl_deadline_in(dl_op_timeout_ms(l, pc->op_timeout_ms));
        bool last = deadline_ns == 0 || (deadline_ns > 0 && dl_ms_left(deadline_ns) == 0);
        const char *const *pre = NULL;
        const int *npar = NULL;
        int npre = 0;
        if (!last && !queued && tried) { /* (not before the first try: cheap if free) */
            pre = pc->txpool ? enqueue + 1 : enqueue;
            npar = pc->txpool ? enqueue_npar + 1 : enqueue_npar;
            npre = pc->txpool ? 1 : 2;
            enqueuing = true;
        } else if (queued && dl_now_ns() - refreshed >= (int64_t)PG_LEASE_RECHECK_MS * 1000000) {
            /* (not on every wake-up: a NOTIFY's hand-over goes without) */
            pre = refresh;
            npar = refresh_npar;
            npre = 1;
        }
        PGresult *names = NULL;
        int other = -1;
        rc = lease_try(l, k, pre, npar, npre, until, cancel_fd, &expires_in, &names, &other,
                       why, sizeof why);
        tried = true;
        if (npre > 0)
            refreshed = dl_now_ns();
        if (rc == DLOCK_EUNREACHABLE && deadline_ns != 0 && pg_time_left(deadline_ns)) {
            /* the session ended under a waiter: on a new one, it listens
             * and queues again (its queue row keeps its place) */
            pg_conn_close(k);
            rc = pg_conn_get_retry(pc, pg_retry_until_of(pc, l, deadline_ns), cancel_fd, &k, why,
                                sizeof why);
            if (!rc) {
                queued = false;
                continue;
            }
            k = NULL;
        }
        if (rc < 0) {
            lease_give_up(l, k); /* statements of this round may be left on k */
            if (rc == DLOCK_ECANCELED)
                return dl_lock_err(l, rc, "lock \"%s\": canceled", l->name);
            if (rc == DLOCK_ETIMEDOUT && deadline_ns > 0 && dl_ms_left(deadline_ns) == 0)
                return dl_lock_err(l, rc, "lock \"%s\": timed out (%s)", l->name, why);
            return dl_lock_err(l, rc == DLOCK_ETIMEDOUT ? DLOCK_EUNREACHABLE : rc,
                               "lock \"%s\": %s (%s)", l->name, why, pc->redacted);
        }
        queued |= enqueuing;
        enqueuing = false;
        /* Another kind holds the name: a taken row goes back, and a
         * semaphore of other permits is refused rather than waited for. */
        unsigned in_force = other >= 0 ? (unsigned)other >> 13 : 0;
        bool conflict = in_force > 1 && l->opts.kind == DLOCK_SEMAPHORE && l->opts.permits > 1;
        if (rc == 1 && other >= 0) {
            int touched;
            (void)lease_row(l, pc->sql_free, NULL, &touched);
            pg_lib.clear(names);
            names = NULL;
            rc = 0;
            expires_in = -1;
        }
        if (rc == 1 || last || conflict) {
            if (queued) { /* sent, not waited for: read by the session's next statement */
                const char *p[] = {l->name, l->owner};
                (void)pg_stmt_send_fixed(k, pc->sql_dequeue, 2, p, until, -1, why, sizeof why);
                if (!pc->txpool)
                    (void)pg_stmt_send(k, "UNLISTEN *", 0, NULL, until, -1, why, sizeof why);
            }
            drop_notices(k);
            pg_conn_put(pc, k);
            if (rc == 1) {
                rc = pg_names_check(l, names, 1, NULL, why, sizeof why);
                pg_lib.clear(names);
                if (rc) {
                    int touched; /* given back: the other mode's holder keeps the name */
                    (void)lease_row(l, pc->sql_free, NULL, &touched);
                    return dl_lock_err(l, rc, "lock \"%s\": %s", l->name, why);
                }
                return 0;
            }
            if (conflict)
                return dl_conflict_err(l, 's', in_force);
            return dl_lock_err(l, deadline_ns == 0 ? DLOCK_EBUSY : DLOCK_ETIMEDOUT,
                               deadline_ns == 0 ? "lock \"%s\" is held by another owner"
                                                : "lock \"%s\": timed out",
                               l->name);
        }
        if (!queued)
            continue; /* queue, and try again at once */
        /* Wait for our NOTIFY, the holder's expiry, a second (our queue row
         * is refreshed, and a NOTIFY to a waiter that died is made up
         * for), the deadline or a cancel, whichever first. */
        int64_t wake = dl_deadline_in(expires_in >= 0 && expires_in < PG_LEASE_RECHECK_MS
                                                   ? expires_in + 1
                                                   : PG_LEASE_RECHECK_MS);
        if (deadline_ns > 0 && deadline_ns < wake)
            wake = deadline_ns;
        for (;;) {
            PGnotify *nf = pg_lib.notifies(k->pg);
            if (nf) {
                pg_lib.freemem(nf);
                drop_notices(k);
                break;
            }
            rc = dl_wait_fd(pg_lib.socket(k->pg), POLLIN, wake, cancel_fd, NULL);
            if (rc == DLOCK_ETIMEDOUT)
                break;
            if (rc == 0 && (!pg_lib.consumeInput(k->pg) || pg_lib.status(k->pg) != CONNECTION_OK))
                rc = DLOCK_EUNREACHABLE;
            if (rc == DLOCK_EUNREACHABLE && pg_time_left(deadline_ns)) {
                pg_conn_close(k); /* as above: listen and queue again on a new session */
                rc = pg_conn_get_retry(pc, pg_retry_until_of(pc, l, deadline_ns), cancel_fd, &k, why,
                                    sizeof why);
                if (!rc) {
                    queued = false;
                    break;
                }
                k = NULL;
            }
            if (rc) {
                lease_give_up(l, k);
                if (rc == DLOCK_ECANCELED)
                    return dl_lock_err(l, rc, "lock \"%s\": canceled", l->name);
                return dl_lock_err(l, rc, "lock \"%s\": the session broke while waiting (%s)",
                                   l->name, pc->redacted);
            }
        }
    }
}

/* lease_row on a row that must still be ours: DLOCK_ELOST when it was not. */
static int lease_row_kept(dlock_lock *l, const char *sql, const char *extra)
{
    int touched = 0;
    int rc = lease_row(l, sql, extra, &touched);
    if (rc)
        return rc;
    return touched ? 0
                   : dl_lock_err(l, DLOCK_ELOST,
                                 "lock \"%s\": its row had expired or been taken over", l->name);
}

static int lease_release(dlock_lock *l)
{
    return lease_row_kept(l, pc_of(l->c)->sql_free, NULL);
}

/* The row, still ours, now ends ttl_ms from now. */
static int lease_renew_for(dlock_lock *l, int64_t ttl_ms)
{
    char ttl[24];
    snprintf(ttl, sizeof ttl, "%lld", (long long)ttl_ms);
    return lease_row_kept(l, pc_of(l->c)->sql_renew, ttl);
}

static int lease_renew(dlock_lock *l)
{
    return lease_renew_for(l, l->opts.ttl_ms);
}

/* The row's expiry, set to ms from now, is the release: a waiter takes an
 * expired row as it takes a dead holder's. */
static int lease_release_at(dlock_lock *l, int64_t ms)
{
    return lease_renew_for(l, ms);
}

/* Append s to the array literal at *b as one quoted element ("..." with
 * backslash before each quote and backslash: names may hold either). */
static void array_add(char **b, const char *s, bool first)
{
    char *o = *b;
    if (!first)
        *o++ = ',';
    *o++ = '"';
    for (; *s; s++) {
        if (*s == '"' || *s == '\\')
            *o++ = '\\';
        *o++ = *s;
    }
    *o++ = '"';
    *o = '\0';
    *b = o;
}

/* Renew many leases in one statement on one connection: the rows still
 * ours are extended and come back; a lock whose row did not is lost at
 * once. A statement that fails fails every lock of the batch (transient:
 * the core's watchdog decides at each one's deadline). */
static void lease_renew_batch(dlock_client *c, dlock_lock *const *ls, int *rcs, size_t n)
{
    pgclient *pc = pc_of(c);
    size_t names = 3, owners = 3, ints = 3;
    for (size_t i = 0; i < n; i++) {
        names += 2 * strlen(ls[i]->name) + 3;
        owners += DL_OWNER_HEX + 3;
        ints += 16;
    }
    char *buf = malloc(names + owners + 2 * ints);
    bool *kept = calloc(n, sizeof *kept);
    char why[300], line[200];
    int rc = buf && kept ? 0 : DLOCK_ENOMEM;
    snprintf(why, sizeof why, "out of memory");
    const char *p[4] = {0};
    if (!rc) {
        /* names, slots, owners, leases */
        char *a[4] = {buf, buf + names, buf + names + ints, buf + names + ints + owners};
        for (int k = 0; k < 4; k++) {
            p[k] = a[k];
            *a[k]++ = '{';
        }
        for (size_t i = 0; i < n; i++) {
            char num[16];
            array_add(&a[0], ls[i]->name, i == 0);
            snprintf(num, sizeof num, "%d", ((pglock *)ls[i]->bstate)->slot);
            array_add(&a[1], num, i == 0);
            array_add(&a[2], ls[i]->owner, i == 0);
            snprintf(num, sizeof num, "%d", ls[i]->opts.ttl_ms);
            array_add(&a[3], num, i == 0);
        }
        for (int k = 0; k < 4; k++)
            memcpy(a[k], "}", 2);
    }
    int64_t until = dl_deadline_in(dl_op_timeout_ms(ls[0], pc->op_timeout_ms));
    pg_conn *k = NULL;
    if (!rc)
        rc = pg_conn_get(pc, until, -1, &k, why, sizeof why);
    PGresult *r = NULL;
    if (!rc) {
        rc = pg_run_fixed(k, pc->sql_renew_many, 4, p, until, -1, &r, why, sizeof why);
        if (rc) {
            pg_conn_close(k);
            rc = rc == DLOCK_ETIMEDOUT ? DLOCK_EUNREACHABLE : rc;
        } else if (*pg_sqlstate(r)) {
            rc = pg_code_of_state(pg_sqlstate(r));
            snprintf(why, sizeof why, "%s", pg_one_line(pg_lib.resultErrorMessage(r), line, sizeof line));
            pg_conn_put(pc, k);
        } else {
            for (int t = 0; t < pg_lib.ntuples(r); t++) {
                long long i = strtoll(pg_lib.getvalue(r, t, 0), NULL, 10);
                if (i >= 1 && (size_t)i <= n)
                    kept[i - 1] = true;
            }
            drop_notices(k);
            pg_conn_put(pc, k);
        }
        if (r)
            pg_lib.clear(r);
    }
    for (size_t i = 0; i < n; i++)
        rcs[i] = rc ? dl_lock_err(ls[i], rc, "lock \"%s\": %s (%s)", ls[i]->name, why,
                                  pc->redacted)
             : kept[i] ? 0
                       : dl_lock_err(ls[i], DLOCK_ELOST,
                                     "lock \"%s\": its row had expired or been taken over",
                                     ls[i]->name);
    free(kept);
    free(buf);
}

static int lease_set_value(dlock_lock *l, const char *value)
{
    int touched = 0;
    int rc = lease_row(l, pc_of(l->c)->sql_setvalue, value, &touched);
    if (rc)
        return rc;
    return touched ? 0 : dl_lock_err(l, DLOCK_ELOST, "lock \"%s\": no longer ours", l->name);
}

static int lease_inspect(dlock_client *c, const char *name, dlock_info *info)
{
    pgclient *pc = pc_of(c);
    char sql[900], why[300];
    snprintf(sql, sizeof sql,
             "SELECT count(*) FILTER (WHERE " LEASE_HELD "), max(token), "
             "(array_agg(holder ORDER BY since) FILTER (WHERE " LEASE_HELD "))[1], "
             "floor(extract(epoch FROM clock_timestamp() - min(since) FILTER (WHERE " LEASE_HELD
             ")) * 1000)::bigint, "
             "floor(extract(epoch FROM min(expires) FILTER (WHERE " LEASE_HELD
             ") - clock_timestamp()) * 1000)::bigint FROM %s WHERE name = $1",
             pc->table);
    const char *p[] = {name};
    PGresult *r;
    int rc = pg_pool_run(c, sql, 1, p, &r, why, sizeof why);
    if (rc)
        return dl_client_err(c, rc, "inspect \"%s\": %s (%s)", name, why, pc->redacted);
    int holders = atoi(pg_lib.getvalue(r, 0, 0));
    info->held = holders > 0;
    info->holders = holders;
    info->waiters = -1; /* listeners are not visible to other sessions */
    info->token = pg_lib.getisnull(r, 0, 1) ? 0 : strtoull(pg_lib.getvalue(r, 0, 1), NULL, 10);
    info->held_ms = -1;
    info->lease_ms = -1;
    if (holders > 0) {
        pg_holder_into(r, 2, info);
        info->held_ms = pg_lib.getisnull(r, 0, 3) ? -1 : strtoll(pg_lib.getvalue(r, 0, 3), NULL, 10);
        info->lease_ms = pg_lib.getisnull(r, 0, 4) ? -1 : strtoll(pg_lib.getvalue(r, 0, 4), NULL, 10);
    }
    pg_lib.clear(r);
    return 0;
}

/* Give the row back if it is still ours (a grant that came too late); the
 * owner check leaves anyone else's alone. */
static void lease_abandon(dlock_lock *l)
{
    int touched;
    (void)lease_row(l, pc_of(l->c)->sql_free, NULL, &touched);
}

static int lease_get_value(dlock_client *c, const char *name, char *buf, size_t len)
{
    char sql[2400];
    snprintf(sql, sizeof sql,
             "SELECT value FROM %s WHERE name = $1 AND " LEASE_HELD
             " AND value IS NOT NULL ORDER BY since DESC LIMIT 1",
             pc_of(c)->table);
    return pg_value_by(c, name, sql, 1, buf, len);
}

/* The rows taken over (each holder learns at its next renewal, ttl/3) and
 * the first waiter woken. */
static int lease_break(dlock_client *c, const char *name, dlock_info *broken)
{
    pgclient *pc = pc_of(c);
    char sql[900];
    snprintf(sql, sizeof sql,
             "WITH r AS (UPDATE %s SET owner = NULL, expires = NULL WHERE name = $1 AND "
             "owner IS NOT NULL RETURNING name), w AS (SELECT q.owner FROM %s AS q WHERE "
             "q.name = $1 AND " LEASE_WAITER_LIVE("q") " AND EXISTS (SELECT 1 FROM r) "
             "ORDER BY q.since LIMIT 1) SELECT 0, 0 FROM (SELECT count(pg_notify('dlock_w_' || owner, $1)) "
             "FROM w) AS n",
             pc->table, pc->waiters);
    return pg_break_by(c, name, broken, sql, name);
}

/* The table of rows (name, slot), its sequence, and the waiters' table
 * (with the waiter's session pid, which older versions' tables lack). */
int pg_lease_tables(dlock_client *c, char *why, size_t wlen)
{
    pgclient *pc = pc_of(c);
    const char *p[] = {pc->table, pc->seq, pc->waiters};
    char table[1000], seq[1000], waiters[1000], pid[1000];
    snprintf(table, sizeof table,
             "CREATE TABLE IF NOT EXISTS %s (name text NOT NULL, slot int NOT NULL, owner text, "
             "expires timestamptz, token bigint NOT NULL, holder text NOT NULL DEFAULT '', "
             "since timestamptz, value text, PRIMARY KEY (name, slot))",
             pc->table);
    snprintf(seq, sizeof seq, "CREATE SEQUENCE IF NOT EXISTS %s", pc->seq);
    snprintf(waiters, sizeof waiters,
             "CREATE TABLE IF NOT EXISTS %s (name text NOT NULL, owner text NOT NULL, "
             "since timestamptz NOT NULL, alive timestamptz NOT NULL, pid int, "
             "PRIMARY KEY (name, owner))",
             pc->waiters);
    /* a table of an older version: the waiter's session pid */
    snprintf(pid, sizeof pid, "ALTER TABLE %s ADD COLUMN IF NOT EXISTS pid int", pc->waiters);
    const char *ddl[] = {table, seq, waiters, pid};
    return pg_tables_ensure(c, "lock", pc->table,
                            "SELECT to_regclass($1) IS NOT NULL AND to_regclass($2) IS "
                            "NOT NULL AND EXISTS (SELECT 1 FROM pg_attribute WHERE "
                            "attrelid = to_regclass($3) AND attname = 'pid' AND NOT "
                            "attisdropped)",
                            3, p, ddl, 4, why, wlen);
}

const dl_backend_ops pg_lease_ops = {
    .client_open = pg_client_open,
    .client_close = pg_client_close,
    .lock_init = pg_lock_init,
    .lock_fini = pg_lock_fini,
    .acquire = lease_acquire,
    .release = lease_release,
    .renew = lease_renew,
    .renew_batch = lease_renew_batch,
    .abandon = lease_abandon,
    .inspect = lease_inspect,
    .list = pg_list,
    .set_value = lease_set_value,
    .get_value = lease_get_value,
    .break_lock = lease_break,
    PG_RECORD_OPS,
    .release_at = lease_release_at,
};
