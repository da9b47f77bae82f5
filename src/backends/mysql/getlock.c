/* SPDX-License-Identifier: MIT */
/*
 * getlock.c — MySQL's mode=getlock (the default), one of the backend's
 * three modes (mysql.c: what they share; my_int.h).
 *
 * GET_LOCK on a connection of its own per held lock, taken from the
 * client's pool and given back once RELEASE_LOCK has answered, so no lock
 * can leak into a session someone else uses. The
 * server queues the waiters and wakes one per release; GET_LOCK's own
 * timeout bounds a timed wait on the server's side. Names longer than the
 * server's 64-character limit become "dlock:" and a 128-bit hash; the table
 * (default "dlock_live") keeps the full name beside that key, so a
 * collision is an error, never a silently shared lock.
 *
 * SELECT GET_LOCK(key, timeout) takes the lock; the next statement, on
 * the same connection, draws the token from the server run's memory and
 * records the holder in TABLE_live (MEMORY), writing no InnoDB log: see
 * "Tokens" in mysql.c for why tokens still rise across a crash of the
 * server.
 * The token comes back in the reply's insert id (LAST_INSERT_ID(x) sets
 * it): no result set.
 */
#include "my_int.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* getlock: the name's GET_LOCK on *kp (a pooled connection when NULL),
 * waiting until deadline_ns (0: a try): 0 held, or the error, set on l,
 * with the connection given back. With drawn, and the procedure there
 * (my_take_draws), the grant's draw comes in the same round trip, the
 * take procedure's (see build_sql in mysql.c): drawn->made says so. */
static int key_take(dlock_lock *l, int64_t deadline_ns, my_conn **kp, my_drawn *drawn)
{
    myclient *mc = mc_of(l->c);
    mylock *ml = l->bstate;
    char why[400];
    int cancel = deadline_ns == 0 ? -1 : dl_cancel_fd(l);
    my_conn *k = *kp;
    my_res r = {0};
    int rc, early = 0;
    bool granted;
    *kp = NULL;
    for (;;) {
        if (!k) {
            rc = my_conn_get(mc, false, my_hard_bound(l), cancel, &k, why, sizeof why);
            if (rc)
                return dl_connect_err(l, deadline_ns, rc, why, mc->redacted);
        }
        bool call = drawn && my_take_draws(l, k);
        double wait_s = my_wait_seconds(deadline_ns);
        my_arg a[] = {A_S(ml->key), A_D(wait_s)};
        my_arg ca[] = {A_S(ml->key), A_S(l->name), A_D(wait_s), A_S(mc->holder)};
        rc = my_q_exec(k, call ? mc->sql_take_call[atomic_load(&mc->take_which)] : mc->sql_queue,
                       call ? ca : a, call ? 4 : 2,
                       &r, my_wait_bound(l, deadline_ns), cancel, why, sizeof why);
        granted = rc == 0 && my_cell(&r, 0, 0) && strcmp(my_cell(&r, 0, 0), "1") == 0;
        if (granted && call && my_cell(&r, 0, 1) && my_cell(&r, 0, 2)) {
            drawn->made = true;
            drawn->affected = strtoull(my_cell(&r, 0, 1), NULL, 10);
            drawn->insert_id = strtoull(my_cell(&r, 0, 2), NULL, 10);
        }
        my_res_free(&r);
        /* The server ended the session (KILL, a restart) or the wait
         * (GET_LOCK's NULL, a statement limit) before its time: ask again
         * until the deadline — a waiter is only told when time is up. */
        bool ended = rc && my_session_ended(&k, rc, deadline_ns);
        bool cut_short = rc ? !ended && my_interrupted(k) : !granted;
        if (rc && call && !ended && !k->broken && (!cut_short || my_time_left(deadline_ns))) {
            /* A CALL cut short (KILL QUERY) may have been granted before
             * its end, and one refused (the procedure dropped, not ours to
             * call) is not asked again (GET_LOCK alone from now on): either
             * way its connection goes, which lets go of all it took, and
             * the take is asked again. */
            if (!cut_short)
                atomic_store(&mc->take_on, false);
            ended = !cut_short;
            k->failed = true;
            my_conn_close(k);
            k = NULL;
        }
        if (!ended && !(cut_short && my_time_left(deadline_ns)))
            break;
        early += cut_short;
        rc = my_retry_pause(deadline_ns, cancel);
        if (rc) {
            my_conn_put(mc, k);
            return dl_lock_err(l, rc, "lock \"%s\": canceled", l->name);
        }
    }
    if (rc)
        return my_take_failed(l, deadline_ns, k, rc, why, early);
    if (!granted) {
        my_conn_put(mc, k);
        return my_not_taken(l, deadline_ns, early);
    }
    *kp = k;
    return 0;
}

/* After an ask in the draw found the name's GET_LOCK another's, the next
 * acquisitions of the handle queue at once, 4 of them, twice as many
 * after each busy ask again, up to 64: under contention an ask is only a
 * round trip more before each wait. A granted ask starts again. */
#define MY_ASKS_SKIP_MIN 4
#define MY_ASKS_SKIP_MAX 64

static int get_acquire(dlock_lock *l, int64_t deadline_ns, bool *lease_held)
{
    myclient *mc = mc_of(l->c);
    if (l->opts.kind != DLOCK_EXCLUSIVE)
        return dl_lock_err(l, DLOCK_ENOTSUP,
                           "lock \"%s\": GET_LOCK locks are exclusive only (mode=lease has "
                           "semaphores)",
                           l->name);
    mylock *ml = l->bstate;
    char why[400];
    my_conn *k = NULL;
    uint64_t token;
    int rc = DRAW_UNASKED;
    /* First the GET_LOCK with no wait, asked in the token's draw: a free
     * lock in one round trip. */
    if (ml->asks_skipped > 0) {
        ml->asks_skipped--;
    } else {
        rc = my_conn_get(mc, false, my_hard_bound(l), deadline_ns == 0 ? -1 : dl_cancel_fd(l), &k,
                      why, sizeof why);
        if (rc)
            return dl_connect_err(l, deadline_ns, rc, why, mc->redacted);
        rc = my_draw_token(l, k, true, true, NULL, &token, why, sizeof why);
        if (rc == DRAW_BUSY) {
            ml->asks_skip = ml->asks_skip ? ml->asks_skip * 2 : MY_ASKS_SKIP_MIN;
            if (ml->asks_skip > MY_ASKS_SKIP_MAX)
                ml->asks_skip = MY_ASKS_SKIP_MAX;
            ml->asks_skipped = ml->asks_skip;
            if (deadline_ns == 0) {
                my_conn_put(mc, k);
                return my_not_taken(l, deadline_ns, 0);
            }
        } else if (rc == DRAW_UNASKED && k->failed) {
            my_conn_close(k);
            k = NULL;
        } else if (rc != DRAW_UNASKED) {
            ml->asks_skip = 0;
        }
    }
    if (rc == DRAW_BUSY || rc == DRAW_UNASKED) {
        my_drawn drawn = {0};
        rc = key_take(l, deadline_ns, &k, &drawn);
        if (rc)
            return rc;
        rc = my_draw_token(l, k, true, false, &drawn, &token, why, sizeof why);
    }
    if (rc == 2) {
        my_key_give_back(l, k);
        *lease_held = true;
        return 0;
    }
    return my_session_hold(l, k, rc, token, why, sizeof why);
}

static int getlock_acquire(dlock_lock *l, int64_t deadline_ns)
{
    return my_session_acquire(l, deadline_ns, get_acquire);
}

/* RELEASE_LOCK answers 1 when the lock was ours. */
static int getlock_unlock(dlock_lock *l, my_conn *k, int64_t until, bool *was_held, char *why,
                          size_t wlen)
{
    my_res r = {0};
    int rc = my_release_key(l, k, until, &r, why, wlen);
    *was_held = rc == 0 && my_cell(&r, 0, 0) && strcmp(my_cell(&r, 0, 0), "1") == 0;
    my_res_free(&r);
    return rc;
}

static int getlock_release(dlock_lock *l)
{
    return my_session_release(l, getlock_unlock);
}

static int getlock_inspect(dlock_client *c, const char *name, dlock_info *info)
{
    myclient *mc = mc_of(c);
    memset(info, 0, sizeof *info);
    char key[MY_KEY_MAX + 1], why[300];
    my_key_of("", name, key, sizeof key);
    my_arg a[] = {A_S(key), A_S(key), A_S(name)};
    my_res r = {0};
    int rc = my_pool_exec(c, mc->sql_inspect, a, 3, &r, why, sizeof why);
    if (rc)
        return dl_client_err(c, rc, "inspect \"%s\": %s (%s)", name, why, mc->redacted);
    bool held = my_cell(&r, 0, 0) != NULL;
    info->held = held;
    info->holders = held ? 1 : 0;
    info->token = my_cell(&r, 0, 1) ? strtoull(my_cell(&r, 0, 1), NULL, 10) : 0;
    info->held_ms = -1;
    info->lease_ms = -1;
    if (held && my_cell(&r, 0, 2)) {
        snprintf(info->holder, sizeof info->holder, "%s", my_cell(&r, 0, 2));
        if (my_cell(&r, 0, 3))
            info->held_ms = strtoll(my_cell(&r, 0, 3), NULL, 10);
    }
    my_res_free(&r);
    info->waiters = my_key_waiters(c, key);
    if (info->waiters < 0 && !held)
        info->waiters = 0; /* nobody queues for a free lock */
    return 0;
}

/* The leader's value, in the holder's row of TABLE_live, on the connection
 * holding the lock. */
static int getlock_set_value(dlock_lock *l, const char *value)
{
    myclient *mc = mc_of(l->c);
    mylock *ml = l->bstate;
    char why[300];
    my_res r = {0};
    my_conn *k = my_unwatch_conn(l);
    int rc = dl_session_usable(l, k ? &k->sess : NULL);
    if (rc)
        return rc;
    my_arg a[] = {A_S(value), A_S(ml->key), A_S(l->name)};
    int64_t until = dl_deadline_in(dl_op_timeout_ms(l, mc->op_timeout_ms));
    rc = my_q_exec(k, mc->sql_setvalue, a, 3, &r, until, -1, why, sizeof why);
    my_rewatch_conn(l, k);
    my_res_free(&r);
    if (rc)
        return dl_lock_err(l, rc, "lock \"%s\": publishing the value: %s", l->name, why);
    return 0;
}

static int getlock_get_value(dlock_client *c, const char *name, char *buf, size_t len)
{
    char key[MY_KEY_MAX + 1], why[300];
    my_res r = {0};
    my_key_of("", name, key, sizeof key);
    my_arg a[] = {A_S(key), A_S(name)};
    int rc = my_pool_exec(c, mc_of(c)->sql_getvalue, a, 2, &r, why, sizeof why);
    return my_value_reply(c, name, rc, &r, why, buf, len);
}

/* KILL the connection holding the name's GET_LOCK. */
static int getlock_break(dlock_client *c, const char *name, dlock_info *broken)
{
    myclient *mc = mc_of(c);
    char why[300], id[24] = "";
    int rc = getlock_inspect(c, name, broken);
    if (dl_nothing_to_break(rc, broken))
        return rc;
    my_res r = {0};
    char key[MY_KEY_MAX + 1];
    my_key_of("", name, key, sizeof key);
    my_arg a[] = {A_S(key), A_S(key), A_S(name)};
    rc = my_pool_exec(c, mc->sql_inspect, a, 3, &r, why, sizeof why);
    if (!rc && my_cell(&r, 0, 0))
        snprintf(id, sizeof id, "%s", my_cell(&r, 0, 0));
    my_res_free(&r);
    if (rc)
        return dl_client_err(c, rc, "break \"%s\": %s (%s)", name, why, mc->redacted);
    return my_kill_holder(c, name, id);
}

/* getlock's own statements: TABLE_live read by its key. */
int my_getlock_build_sql(myclient *mc)
{
    const char *lv = mc->live;
    /* the holder is the row's only while the connection that wrote it holds
     * the key: another program's GET_LOCK of the same name is not ours */
    mc->sql_inspect = dl_fmt_alloc("SELECT u.id, t.token, IF(t.conn = u.id, t.holder, NULL), "
                                   "IF(t.conn = u.id, " HELD_MS ", NULL) FROM (SELECT "
                                   "IS_USED_LOCK(?) AS id) AS u LEFT JOIN %s AS t ON t.k = ? AND "
                                   "t.name = ?",
                                   "t.since", lv);
    mc->sql_setvalue = dl_fmt_alloc("UPDATE %s SET value = ? WHERE k = ? AND name = ?", lv);
    mc->sql_getvalue = dl_fmt_alloc("SELECT value FROM %s WHERE k = ? AND name = ? AND "
                                    "conn = IS_USED_LOCK(k) AND value IS NOT NULL",
                                    lv);
    mc->sql_list = dl_fmt_alloc("SELECT name FROM %s WHERE name LIKE ? AND token > 0 ORDER BY name",
                                lv);
    return mc->sql_inspect && mc->sql_setvalue && mc->sql_getvalue && mc->sql_list ? 0 : -1;
}

/* TABLE_live, and the session modes' tables (see my_session_tables). */
int my_getlock_tables(myclient *mc, char **ddl, const char **bare)
{
    ddl[0] = my_live_ddl(mc);
    bare[0] = mc->live_bare;
    return ddl[0] ? my_session_tables(ddl, bare) : DLOCK_ENOMEM;
}

/* The take procedure (see build_sql in mysql.c), made if missing: take_on
 * once one is there. take2, whose column draw_base a TABLE_live made by an
 * older dlock gets first (ALTER TABLE); a user that may not add it calls
 * take1. A user that may not make either (no CREATE ROUTINE; MySQL, which
 * does not prepare CREATE PROCEDURE) takes without one: GET_LOCK, then the
 * draw. 0, or a code when k broke. */
static int take_proc_ensure(myclient *mc, my_conn *k, int64_t until, char *why, size_t wlen)
{
    my_res r = {0};
    int rc = 0;
    bool there = false;
    for (int which = 1; which >= 0 && !rc && !there; which--) {
        my_arg a[] = {A_S(mc->take_proc_bare[which])};
        rc = my_q_exec(k, mc->sql_proc_exists, a, 1, &r, until, -1, why, wlen);
        there = rc == 0 && r.nrows == 1;
        my_res_free(&r);
        if (!rc && !there && which == 1) {
            rc = my_q_exec(k, mc->sql_draw_base_add, NULL, 0, &r, until, -1, why, wlen);
            my_res_free(&r);
            bool col = rc == 0 || (!k->broken && k->last_errno == 1060); /* (there already) */
            rc = k->broken ? rc : 0;
            if (!col)
                continue;
        }
        if (!rc && !there) {
            rc = my_q_exec(k, mc->sql_take_proc[which], NULL, 0, &r, until, -1, why, wlen);
            my_res_free(&r);
            there = rc == 0 || (!k->broken && k->last_errno == 1304); /* (a racing maker's) */
            rc = k->broken ? rc : 0;
        }
        if (there)
            atomic_store(&mc->take_which, which);
    }
    atomic_store(&mc->take_on, there);
    return k->broken ? rc : 0;
}

/* The default table's holders have their lease marks kept (see
 * my_ensure_marks), unless the lease table is not ours to read; the take
 * procedure where its draw is the one statement (my_take_draws). */
int my_getlock_tables_made(myclient *mc, my_conn *k, int64_t until, char *why, size_t wlen)
{
    int rc = 0;
    if (!atomic_load(&mc->lease_live_off) && strcmp(mc->live_bare, "dlock_live") == 0)
        rc = my_ensure_marks(mc, k, until, why, wlen);
    if (!rc && (atomic_load(&mc->marks_on) || atomic_load(&mc->lease_live_off)))
        rc = take_proc_ensure(mc, k, until, why, wlen);
    return rc;
}

const dl_backend_ops my_getlock_ops = {
    .client_open = my_client_open,
    .client_close = my_client_close,
    .lock_init = my_lock_init,
    .lock_fini = my_lock_fini,
    .acquire = getlock_acquire,
    .release = getlock_release,
    .abandon = my_session_abandon,
    .inspect = getlock_inspect,
    .list = my_list,
    .set_value = getlock_set_value,
    .get_value = getlock_get_value,
    .break_lock = getlock_break,
    MY_RECORD_OPS,
};
