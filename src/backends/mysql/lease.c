/* SPDX-License-Identifier: MIT */
/*
 * lease.c — MySQL's mode=lease, one of the backend's three modes
 * (mysql.c: what they share; my_int.h).
 *
 * TABLE (default dlock_lease): one row per held (name, slot), slot 0 for a
 * lock (and a semaphore of 1), N * 8192 + i (i < N) for a semaphore of N
 * permits (MY_LEASE_SLOT_BASE): owner, expires (the server's clock,
 * UTC_TIMESTAMP(6): no time zone or DST can move it), holder, since, value.
 * A released row is kept, free (no owner, an expiry in 1970). One
 * statement takes a free or expired row and draws the token: an UPDATE of
 * the row joined to the name's counter in TABLE_token, which raises it with
 * LAST_INSERT_ID(token + 1) (the OK packet's insert id: no result set).
 * Both rows are locked and committed together, so no pause of the taker
 * can put a take and its token apart: tokens rise with grants, and the
 * token a holder has is the counter's while it holds. The counter, one per
 * name, survives releases and covers every slot of a semaphore. A take
 * that finds no row makes the rows (free) and tries again (lease_take).
 *
 * MySQL has no notification. Waiters queue on GET_LOCK of a companion name
 * ("dlock-w:" and a hash): the first of them holds it and polls the table
 * with jittered exponential backoff (2 ms doubling to 50 ms); the others
 * sleep in the server's queue and poll nothing. The server's load is one
 * poller per waited-for name, however many wait.
 *
 * One name is one lock: a taker that took its row looks (the next
 * statement, a fresh snapshot) for a held row of the name outside its own
 * slots; if there is one, it deletes its row and waits (an exclusive taker
 * so waits for every permit), or, a semaphore taker that finds a semaphore
 * of other permits, is refused (DLOCK_ECONFLICT). Of two takers of
 * different kinds at once, at least one sees the other.
 */
#include "my_int.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MY_LEASE_SLOT_BASE(permits) ((permits) > 1 ? (int)(permits) << 13 : 0)

/* A released row's expiry: long past, so that every take finds it free. */
#define MY_LEASE_FREE "1970-01-01 00:00:01"

/* A take that finds no free row makes the rows it needs (if missing) on
 * its first try and on every MY_LEASE_MAKE_EVERY-th after (rows an older
 * dlock deleted while we waited), not on every poll of a held name. */
#define MY_LEASE_MAKE_EVERY 16

/* Time kept back from a take's bound for lease_drop_mine, so that an
 * acquisition still ends by its deadline plus DL_DEADLINE_MARGIN_MS. */
#define MY_LEASE_DROP_MS 50

/* Our row at slot deleted, should a take cut short have left it (it may
 * still have run on the server, and would shut every other taker out for
 * a lease): on another connection (the one cut short is unusable), by the
 * acquisition's bound. A take still running on the server then is not
 * waited for (the bound is spent): its row stays until its lease ends. */
static void lease_drop_mine(dlock_lock *l, int slot)
{
    myclient *mc = mc_of(l->c);
    int64_t until = dl_deadline_in(dl_op_timeout_ms(l, mc->op_timeout_ms));
    char ignored[200];
    my_conn *k;
    if (dl_now_ns() >= until || my_conn_get(mc, false, until, -1, &k, ignored, sizeof ignored))
        return;
    my_arg f[] = {A_S(l->name), A_I(slot), A_S(l->owner)};
    my_res r = {0};
    (void)my_q_exec(k, mc->sql_lease_free, f, 3, &r, until, -1, ignored, sizeof ignored);
    my_res_free(&r);
    if (k->broken)
        k->failed = true; /* closed, not pooled (no KILL: its bound is spent) */
    my_conn_put(mc, k);
}

/* One statement that takes the row at slot, if free or expired, and draws
 * the name's next token with it (sql_lease_take): *token is that token, or
 * 0 when the row was held. A take that finds no row makes it where it is
 * missing (make: see MY_LEASE_MAKE_EVERY; make_token: the name's counter
 * row too), then tries again. */
static int lease_take(dlock_lock *l, my_conn *k, int slot, bool make, bool make_token,
                      uint64_t *token, char *why, size_t wlen)
{
    myclient *mc = mc_of(l->c);
    int ms = dl_op_timeout_ms(l, mc->op_timeout_ms);
    if (l->op_deadline_ns > 0 && ms > MY_LEASE_DROP_MS)
        ms -= MY_LEASE_DROP_MS; /* (whatever is left, for lease_drop_mine) */
    int64_t until = dl_deadline_in(ms);
    long long ttl_us = (long long)l->opts.ttl_ms * 1000;
    my_arg a[] = {A_S(l->owner),  A_I(ttl_us),   A_S(mc->holder),
                  A_S(mc->holder), A_S(l->name), A_I(slot)};
    my_arg m[] = {A_S(l->name), A_I(slot)};
    my_res r = {0};
    int rc = 0;
    *token = 0;
    for (int attempt = 0; attempt < 2 && !rc; attempt++) {
        rc = my_q_exec(k, mc->sql_lease_take, a, 6, &r, until, -1, why, wlen);
        if (rc && !k->broken && k->last_errno == 1114 && attempt == 0) {
            /* dlock_live full (the trigger's mark, see my_ensure_marks): the
             * rows of names nobody holds or marks go, and the take again */
            my_res_free(&r);
            rc = my_q_exec(k, mc->sql_mark_evict, NULL, 0, &r, until, -1, why, wlen);
            my_res_free(&r);
            if (!rc)
                rc = my_q_exec(k, mc->sql_lease_take, a, 6, &r, until, -1, why, wlen);
        }
        if (rc && !k->broken && k->last_errno == 1213)
            rc = 0; /* a deadlock's victim (InnoDB rolled it back): not taken */
        bool took = rc == 0 && r.affected > 0;
        *token = took ? r.insert_id : 0;
        my_res_free(&r);
        if (took && *token == 0) {
            snprintf(why, wlen, "the server gave no token (LAST_INSERT_ID)");
            lease_drop_mine(l, slot);
            return DLOCK_EPROTO;
        }
        if (rc || took || !make || attempt > 0)
            break;
        rc = my_q_exec(k, mc->sql_lease_make, m, 2, &r, until, -1, why, wlen);
        unsigned long long made = r.affected;
        my_res_free(&r);
        if (!rc && make_token) {
            rc = my_q_exec(k, mc->sql_lease_make_token, m, 1, &r, until, -1, why, wlen);
            made += r.affected;
            my_res_free(&r);
        }
        if (!made)
            break; /* the rows were there: held */
    }
    if (rc)
        lease_drop_mine(l, slot);
    return rc;
}

/* After a take: whether another holder of the name excludes ours: another
 * kind of lease holder (see above), or a getlock or rowlock holder (the
 * name's GET_LOCK is held). Read after our take has committed, so that of
 * two takers of different modes at once at least one sees the other. 0 no;
 * 1 another lease kind, 2 GET_LOCK held (our row given back in both);
 * DLOCK_ECONFLICT (message set), or a code. */
static int lease_other_kind(dlock_lock *l, my_conn *k, int base, int n, char *why, size_t wlen)
{
    myclient *mc = mc_of(l->c);
    mylock *ml = l->bstate;
    int64_t until = dl_deadline_in(dl_op_timeout_ms(l, mc->op_timeout_ms));
    char key[MY_KEY_MAX + 1];
    my_key_of("", l->name, key, sizeof key);
    my_arg a[] = {A_S(l->name), A_I(base), A_I(base + n), A_S(key)};
    my_res r = {0};
    int rc = my_q_exec(k, mc->sql_lease_other, a, 4, &r, until, -1, why, wlen);
    const char *v = rc ? NULL : my_cell(&r, 0, 0);
    const char *is_free = rc ? NULL : my_cell(&r, 0, 1);
    long other = v ? atol(v) : -1;
    bool session_mode = is_free && strcmp(is_free, "1") != 0;
    my_res_free(&r);
    if (rc == 0 && is_free && other < 0 && !session_mode)
        return 0;
    if (rc == 0 && !is_free) {
        snprintf(why, wlen, "the server could not tell whether the name's GET_LOCK is held "
                            "(IS_FREE_LOCK gave NULL)");
        rc = DLOCK_EPROTO;
    }
    my_arg f[] = {A_S(l->name), A_I(ml->slot), A_S(l->owner)};
    if (rc) { /* not known: our row goes back (k may be unusable) */
        lease_drop_mine(l, ml->slot);
        return rc;
    }
    rc = my_q_exec(k, mc->sql_lease_free, f, 3, &r, until, -1, why, wlen);
    my_res_free(&r);
    unsigned in_force = other < 0 ? 0 : (unsigned)(other >> 13);
    if (!rc && in_force > 1 && l->opts.kind == DLOCK_SEMAPHORE && n > 1)
        return dl_conflict_err(l, 's', in_force);
    return rc ? rc : other >= 0 ? 1 : 2;
}

/* One try at every slot, from a random one (so that semaphore takers do
 * not all meet at slot 0): 1 taken (l->token set), 0 all held, 2 held
 * through GET_LOCK (another mode: our take given back), or a code. */
static int lease_try_slots(dlock_lock *l, my_conn *k, char *why, size_t wlen)
{
    mylock *ml = l->bstate;
    int n = l->opts.kind == DLOCK_SEMAPHORE ? (int)l->opts.permits : 1;
    int base = MY_LEASE_SLOT_BASE(n);
    unsigned start = 0;
    if (n > 1)
        (void)dl_random(&start, sizeof start);
    bool make = ml->tries++ % MY_LEASE_MAKE_EVERY == 0;
    for (int i = 0; i < n; i++) {
        int slot = base + (int)((start + (unsigned)i) % (unsigned)n);
        uint64_t token;
        int rc = lease_take(l, k, slot, make, make && i == 0, &token, why, wlen);
        if (rc)
            return rc;
        if (token) {
            ml->slot = slot;
            rc = lease_other_kind(l, k, base, n, why, wlen);
            if (rc == 0)
                atomic_store(&l->token, token);
            return rc == 0 ? 1 : rc == 1 ? 0 : rc;
        }
    }
    return 0;
}

static int lease_acquire(dlock_lock *l, int64_t deadline_ns)
{
    myclient *mc = mc_of(l->c);
    mylock *ml = l->bstate;
    if (l->opts.kind == DLOCK_SHARED)
        return dl_lock_err(l, DLOCK_ENOTSUP,
                           "lock \"%s\": mode=lease has exclusive locks and semaphores, not "
                           "shared locks",
                           l->name);
    char why[400];
    int cancel = deadline_ns == 0 ? -1 : dl_cancel_fd(l);
    my_conn *k = NULL;
    int64_t start = 0;
    int rc = 0, took = 0, early = 0;
    bool queued = false, try_now = true, other_mode = false;
    int64_t backoff_ns = dl_ms_to_ns(MY_LEASE_BACKOFF_MIN_MS);
    ml->tries = 0;
    atomic_store(&l->token, 0);
    my_res r = {0};
    for (;;) {
        if (!k) {
            rc = my_conn_get(mc, false, my_hard_bound(l), cancel, &k, why, sizeof why);
            if (rc)
                return dl_connect_err(l, deadline_ns, rc, why, mc->redacted);
            queued = false;
        }
        if (try_now) {
            try_now = false;
            start = dl_now_ns();
            took = lease_try_slots(l, k, why, sizeof why);
            if (took == 2) { /* a getlock or rowlock holder has the name: held */
                other_mode = true;
                took = 0;
            }
            if (took < 0 && my_session_ended(&k, took, deadline_ns)) {
                rc = my_retry_pause(deadline_ns, cancel);
                if (rc)
                    break;
                try_now = true;
                continue;
            }
            if (took != 0 || deadline_ns == 0)
                break;
        }
        if (!queued && !mc->no_queue) {
            /* behind the other waiters: the first of us polls, the rest
             * sleep in GET_LOCK's queue */
            my_arg a[] = {A_S(ml->key), A_D(my_wait_seconds(deadline_ns))};
            rc = my_q_exec(k, mc->sql_queue, a, 2, &r, my_wait_bound(l, deadline_ns), cancel, why,
                        sizeof why);
            bool first = rc == 0 && my_cell(&r, 0, 0) && strcmp(my_cell(&r, 0, 0), "1") == 0;
            my_res_free(&r);
            if (rc && k->broken && rc != DLOCK_EUNREACHABLE) {
                return my_wait_cut(l, deadline_ns, k, rc, early);
            }
            bool ended = rc && my_session_ended(&k, rc, deadline_ns);
            bool cut_short = rc ? !ended && my_interrupted(k) : !first;
            if (ended || (cut_short && my_time_left(deadline_ns))) {
                /* the server ended the session or the wait before its
                 * time (as getlock.c's key_take does): queue again */
                early += cut_short;
                try_now = true;
                rc = my_retry_pause(deadline_ns, cancel);
                if (rc)
                    break;
                continue;
            }
            if (rc == DLOCK_EPROTO && !cut_short) { /* GET_LOCK refused: poll without a queue */
                mc->no_queue = true;
                rc = 0;
                continue;
            }
            if (rc || !first) {
                if (!rc)
                    rc = DLOCK_ETIMEDOUT;
                break;
            }
            queued = true;
            try_now = true; /* the lease may have ended while we queued */
            continue;
        }
        int64_t pause = dl_backoff_ns(&backoff_ns, dl_ms_to_ns(MY_LEASE_BACKOFF_MAX_MS));
        if (deadline_ns > 0) {
            int64_t left = deadline_ns - dl_now_ns();
            if (left <= 0) {
                rc = DLOCK_ETIMEDOUT;
                break;
            }
            if (pause > left)
                pause = left;
        }
        rc = dl_nap_ns(pause, cancel);
        if (rc)
            break;
        try_now = true;
    }
    if (took < 0) {
        rc = took;
        /* a take is no wait: one our bound cut after it had long gone
         * unanswered found the server silent (a shorter one, near the
         * deadline, is only out of time) */
        if (rc == DLOCK_ETIMEDOUT && k && k->broken &&
            dl_now_ns() - start >= (int64_t)MY_SILENT_MS * 1000000) {
            rc = DLOCK_EUNREACHABLE;
            snprintf(why, sizeof why, "the server did not answer a take of the lease in time "
                                      "(stopped? overloaded?)");
        }
    }
    if (took == 1) /* the lease counts from before the take that succeeded */
        l->lease_start_ns = start;
    if (queued && k && !k->failed) {
        my_arg a[] = {A_S(ml->key)};
        int64_t until = dl_deadline_in(dl_op_timeout_ms(l, mc->op_timeout_ms));
        if (my_q_exec(k, mc->sql_release, a, 1, &r, until, -1, why + 200, 200) != 0)
            k->failed = true; /* closing it lets the next waiter in */
        my_res_free(&r);
    }
    my_conn_put(mc, k);
    if (took == 1 && !rc)
        return 0;
    if ((rc == 0 || rc == DLOCK_ETIMEDOUT) && other_mode)
        return dl_lock_err(l, deadline_ns == 0 ? DLOCK_EBUSY : DLOCK_ETIMEDOUT,
                           "lock \"%s\" is held through its GET_LOCK (mode=getlock, "
                           "mode=rowlock, or a program's own GET_LOCK): one name is one lock "
                           "across modes",
                           l->name);
    if (rc == 0 || rc == DLOCK_ETIMEDOUT)
        return my_not_taken(l, deadline_ns, early);
    if (rc == DLOCK_ECANCELED)
        return dl_lock_err(l, rc, "lock \"%s\": canceled", l->name);
    if (rc == DLOCK_ECONFLICT)
        return rc; /* its message is set */
    return dl_lock_err(l, rc, "lock \"%s\": %s (%s)", l->name, why, mc->redacted);
}

/* A statement about the held row (release, renewal): its affected count.
 * ttl_ms > 0: the statement's first argument, the lease's new length. */
static int lease_row(dlock_lock *l, const char *sql, int64_t ttl_ms, unsigned long long *affected)
{
    myclient *mc = mc_of(l->c);
    mylock *ml = l->bstate;
    char why[300];
    my_arg a[4];
    int n = 0;
    if (ttl_ms > 0)
        a[n++] = A_I((long long)ttl_ms * 1000);
    a[n++] = A_S(l->name);
    a[n++] = A_I(ml->slot);
    a[n++] = A_S(l->owner);
    my_res r = {0};
    /* cut to the caller's bound: an acquisition's deadline, a renewal's
     * loss */
    int64_t until = dl_deadline_in(dl_op_timeout_ms(l, mc->op_timeout_ms));
    int rc = my_pool_exec_until(l->c, until, sql, a, n, &r, why, sizeof why);
    *affected = r.affected;
    my_res_free(&r);
    if (rc)
        return dl_lock_err(l, rc, "lock \"%s\": %s (%s)", l->name, why, mc->redacted);
    return 0;
}

static int lease_release(dlock_lock *l)
{
    unsigned long long n = 0;
    int rc = lease_row(l, mc_of(l->c)->sql_lease_free, 0, &n);
    if (rc)
        return rc;
    return n ? 0 : dl_lock_err(l, DLOCK_ELOST, "lock \"%s\": its lease had ended", l->name);
}

/* The row, still ours, now ends ttl_ms from now. */
static int lease_renew_for(dlock_lock *l, int64_t ttl_ms)
{
    unsigned long long n = 0;
    int rc = lease_row(l, mc_of(l->c)->sql_lease_renew, ttl_ms, &n);
    if (rc)
        return rc;
    return n ? 0 : dl_lock_err(l, DLOCK_ELOST, "lock \"%s\": its lease had ended", l->name);
}

static int lease_renew(dlock_lock *l)
{
    return lease_renew_for(l, l->opts.ttl_ms);
}

/* The row's end, set to ms from now, is the release (waiters take an
 * ended lease as a dead holder's). */
static int lease_release_at(dlock_lock *l, int64_t ms)
{
    return lease_renew_for(l, ms);
}

static int lease_inspect(dlock_client *c, const char *name, dlock_info *info)
{
    myclient *mc = mc_of(c);
    char why[300], key[MY_KEY_MAX + 1];
    my_key_of("-w", name, key, sizeof key);
    my_arg a[] = {A_S(key), A_S(name), A_S(name)};
    my_res r = {0};
    int rc = my_pool_exec(c, mc->sql_lease_info, a, 3, &r, why, sizeof why);
    if (rc)
        return dl_client_err(c, rc, "inspect \"%s\": %s (%s)", name, why, mc->redacted);
    /* one row per holder, or one with NULL holder columns */
    int holders = 0;
    info->held_ms = -1;
    info->lease_ms = -1;
    for (int i = 0; i < r.nrows; i++) {
        if (!my_cell(&r, i, 2))
            continue;
        holders++;
        if (holders == 1) {
            snprintf(info->holder, sizeof info->holder, "%s", my_cell(&r, i, 2));
            info->held_ms = my_cell(&r, i, 3) ? strtoll(my_cell(&r, i, 3), NULL, 10) : -1;
            info->lease_ms = my_cell(&r, i, 4) ? strtoll(my_cell(&r, i, 4), NULL, 10) : -1;
        }
    }
    info->held = holders > 0;
    info->holders = holders;
    info->token = my_cell(&r, 0, 1) ? strtoull(my_cell(&r, 0, 1), NULL, 10) : 0;
    bool head = my_cell(&r, 0, 0) != NULL; /* the first waiter holds the companion lock */
    my_res_free(&r);
    /* the polling waiter, and those queued behind it where the server
     * counts them; elsewhere unknown while the lock is held */
    int queued = my_key_waiters(c, key);
    info->waiters = queued < 0 ? (holders ? -1 : 0) : (head ? 1 : 0) + queued;
    return 0;
}

/* Give the row back if it is still ours (a grant that came too late); the
 * owner check leaves anyone else's alone. */
static void lease_abandon(dlock_lock *l)
{
    (void)lease_release(l);
}

static int lease_inspect_op(dlock_client *c, const char *name, dlock_info *info)
{
    memset(info, 0, sizeof *info);
    return lease_inspect(c, name, info);
}

static int lease_set_value(dlock_lock *l, const char *value)
{
    myclient *mc = mc_of(l->c);
    mylock *ml = l->bstate;
    char why[300];
    my_res r = {0};
    my_arg a[] = {A_S(value), A_S(l->name), A_I(ml->slot), A_S(l->owner)};
    int rc = my_pool_exec(l->c, mc->sql_lease_value, a, 4, &r, why, sizeof why);
    if (!rc && r.affected == 0) {
        my_res_free(&r);
        return dl_lock_err(l, DLOCK_ELOST, "lock \"%s\": its lease is gone", l->name);
    }
    my_res_free(&r);
    if (rc)
        return dl_lock_err(l, rc, "lock \"%s\": publishing the value: %s", l->name, why);
    return 0;
}

static int lease_get_value(dlock_client *c, const char *name, char *buf, size_t len)
{
    char why[300];
    my_res r = {0};
    my_arg a[] = {A_S(name)};
    int rc = my_pool_exec(c, mc_of(c)->sql_lease_getvalue, a, 1, &r, why, sizeof why);
    return my_value_reply(c, name, rc, &r, why, buf, len);
}

/* The rows freed: each holder learns at its next renewal (ttl/3). */
static int lease_break(dlock_client *c, const char *name, dlock_info *broken)
{
    myclient *mc = mc_of(c);
    char why[300];
    int rc = lease_inspect_op(c, name, broken);
    if (dl_nothing_to_break(rc, broken))
        return rc;
    my_res r = {0};
    my_arg a[] = {A_S(name)};
    rc = my_pool_exec(c, mc->sql_lease_free_all, a, 1, &r, why, sizeof why);
    my_res_free(&r);
    if (rc)
        return dl_client_err(c, rc, "break \"%s\": %s (%s)", name, why, mc->redacted);
    return 0;
}

/* lease's own statements: the rows and their counters in TABLE_token. */
int my_lease_build_sql(myclient *mc)
{
    const char *t = mc->table, *tk = mc->tokens;
    /* The take and the token in one statement (both rows locked, one
     * commit): a row that is free (released: no owner, an expiry in 1970)
     * or expired becomes ours and the name's counter rises with it. A
     * multiple-table UPDATE's assignments have no set order, so none reads
     * a column another one sets. */
    mc->sql_lease_take = dl_fmt_alloc(
        "UPDATE %s AS l JOIN %s AS tk ON tk.name = l.name SET l.owner = ?, "
        "l.expires = UTC_TIMESTAMP(6) + INTERVAL ? MICROSECOND, l.holder = ?, "
        "l.since = UTC_TIMESTAMP(6), l.value = NULL, tk.token = LAST_INSERT_ID(tk.token + 1), "
        "tk.holder = ?, tk.since = UTC_TIMESTAMP(6), tk.conn = NULL, tk.value = NULL "
        "WHERE l.name = ? AND l.slot = ? AND l.expires < UTC_TIMESTAMP(6)",
        t, tk);
    /* the rows a take needs, made free where missing (a new name, or rows an
     * older dlock deleted); an existing row is left as it is */
    mc->sql_lease_make = dl_fmt_alloc(
        "INSERT INTO %s (name, slot, owner, expires) VALUES (?, ?, '', "
        "'" MY_LEASE_FREE "') ON DUPLICATE KEY UPDATE name = name",
        t);
    mc->sql_lease_make_token = dl_fmt_alloc("INSERT INTO %s (name, token) VALUES (?, 0) ON "
                                            "DUPLICATE KEY UPDATE name = name",
                                            tk);
    mc->sql_lease_renew = dl_fmt_alloc("UPDATE %s SET expires = UTC_TIMESTAMP(6) + INTERVAL ? "
                                       "MICROSECOND WHERE name = ? AND slot = ? AND owner = ? AND "
                                       "expires >= UTC_TIMESTAMP(6)",
                                       t);
    /* released rows are kept, free, for the next take (see above) */
    mc->sql_lease_free = dl_fmt_alloc(
        "UPDATE %s SET owner = '', expires = '" MY_LEASE_FREE "', "
        "holder = NULL, since = NULL, value = NULL WHERE name = ? "
        "AND slot = ? AND owner = ?",
        t);
    mc->sql_lease_other = dl_fmt_alloc(
        "SELECT (SELECT MIN(slot) FROM %s WHERE name = ? AND (slot < "
        "? OR slot >= ?) AND expires >= UTC_TIMESTAMP(6)), "
        "IS_FREE_LOCK(?)",
        t);
    mc->sql_lease_free_all = dl_fmt_alloc(
        "UPDATE %s SET owner = '', expires = '" MY_LEASE_FREE "', "
        "holder = NULL, since = NULL, value = NULL WHERE name = ? "
        "AND owner <> ''",
        t);
    mc->sql_lease_value = dl_fmt_alloc("UPDATE %s SET value = ? WHERE name = ? AND slot = ? AND "
                                       "owner = ? AND expires >= UTC_TIMESTAMP(6)",
                                       t);
    mc->sql_lease_getvalue = dl_fmt_alloc("SELECT value FROM %s WHERE name = ? AND expires >= "
                                          "UTC_TIMESTAMP(6) AND value IS NOT NULL ORDER BY since "
                                          "DESC LIMIT 1",
                                          t);
    mc->sql_lease_info = dl_fmt_alloc(
        "SELECT IS_USED_LOCK(?), tk.token, l.holder, " HELD_MS ", "
        "TIMESTAMPDIFF(MICROSECOND, UTC_TIMESTAMP(6), l.expires) DIV 1000 "
        "FROM (SELECT 1) AS one LEFT JOIN %s AS tk ON tk.name = ? "
        "LEFT JOIN %s AS l ON l.name = ? AND l.expires >= UTC_TIMESTAMP(6) ORDER BY l.since",
        "l.since", tk, t);
    mc->sql_list = dl_fmt_alloc("SELECT DISTINCT name FROM %s WHERE name LIKE ? ORDER BY name",
                                tk);
    return mc->sql_lease_take && mc->sql_lease_renew && mc->sql_lease_free &&
                   mc->sql_lease_free_all && mc->sql_lease_value && mc->sql_lease_getvalue &&
                   mc->sql_lease_info && mc->sql_lease_other && mc->sql_lease_make &&
                   mc->sql_lease_make_token && mc->sql_list
               ? 0
               : -1;
}

/* The table of rows (name, slot) and TABLE_token, the names' counters. */
int my_lease_tables(myclient *mc, char **ddl, const char **bare)
{
    ddl[0] = dl_fmt_alloc(MY_LEASE_DDL, mc->table, MY_HOLDER_COLS);
    ddl[1] = dl_fmt_alloc("CREATE TABLE IF NOT EXISTS %s (name VARBINARY(200) NOT NULL PRIMARY "
                          "KEY, token BIGINT UNSIGNED NOT NULL, conn BIGINT UNSIGNED, %s) "
                          "ENGINE=InnoDB",
                          mc->tokens, MY_HOLDER_COLS);
    bare[0] = mc->table_bare;
    bare[1] = mc->tokens_bare;
    return ddl[0] && ddl[1] ? 0 : DLOCK_ENOMEM;
}

const dl_backend_ops my_lease_ops = {
    .client_open = my_client_open,
    .client_close = my_client_close,
    .lock_init = my_lock_init,
    .lock_fini = my_lock_fini,
    .acquire = lease_acquire,
    .release = lease_release,
    .renew = lease_renew,
    .abandon = lease_abandon,
    .inspect = lease_inspect_op,
    .list = my_list,
    .set_value = lease_set_value,
    .get_value = lease_get_value,
    .break_lock = lease_break,
    MY_RECORD_OPS,
    .release_at = lease_release_at,
};
