/* SPDX-License-Identifier: MIT */
/*
 * rowlock.c — MySQL's mode=rowlock, one of the backend's three modes
 * (mysql.c: what they share; my_int.h).
 *
 * TABLE (default dlock_row) has a row per name. On a connection of its own
 * with autocommit off, one statement makes the row if it is missing and
 * locks it — INSERT ... ON DUPLICATE KEY UPDATE takes the exclusive row
 * lock SELECT ... FOR UPDATE takes, and needs no row made beforehand — and
 * COMMIT releases it. innodb_lock_wait_timeout (whole seconds, set when it
 * changes) bounds the wait on the server's side, 0 for a try; our own
 * deadline cuts a timed wait to the millisecond (the connection is then
 * killed). The token is drawn once the row is ours, from TABLE_token on
 * another connection with autocommit: a crashed holder's rollback cannot
 * take it back. TABLE_token also records the holder and its connection id
 * (for dlock break) and the leader's value.
 */
#include "my_int.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int row_acquire(dlock_lock *l, int64_t deadline_ns, bool *lease_held)
{
    myclient *mc = mc_of(l->c);
    mylock *ml = l->bstate;
    if (l->opts.kind != DLOCK_EXCLUSIVE)
        return dl_lock_err(l, DLOCK_ENOTSUP,
                           "lock \"%s\": mode=rowlock locks are exclusive only (mode=lease has "
                           "semaphores)",
                           l->name);
    char why[400];
    int cancel = deadline_ns == 0 ? -1 : dl_cancel_fd(l);
    double s = my_wait_seconds(deadline_ns);
    int wait_s = s >= MY_FOREVER_S ? 100000000 : (int)(s + 0.999);
    my_conn *k = NULL;
    my_res r = {0};
    int rc, early = 0;
again: /* (the session ended while we waited for the name's GET_LOCK) */
    for (int attempt = 0;; attempt++) {
        if (!k) {
            rc = my_conn_get(mc, true, my_hard_bound(l), cancel, &k, why, sizeof why);
            if (rc)
                return dl_connect_err(l, deadline_ns, rc, why, mc->redacted);
            if (deadline_ns > 0) /* at most half the wait's time */
                my_conn_spare(mc, dl_now_ns() + (int64_t)dl_ms_left(deadline_ns) * 500000);
        }
        if (k->lock_wait_s != wait_s) {
            my_arg a[] = {A_I(wait_s)};
            int64_t until =
                dl_deadline_in(dl_op_timeout_ms(l, mc->op_timeout_ms));
            rc = my_q_exec(k, "SET SESSION innodb_lock_wait_timeout = ?", a, 1, &r, until, cancel,
                        why, sizeof why);
            my_res_free(&r);
            if (rc) {
                k->failed = true;
                my_conn_close(k);
                return dl_lock_err(l, rc, "lock \"%s\": %s (%s)", l->name, why, mc->redacted);
            }
            k->lock_wait_s = wait_s;
        }
        /* the server's wait is whole seconds, rounded up: a timed wait is
         * cut at its deadline here (the connection then killed) */
        my_arg a[] = {A_S(l->name)};
        rc = my_q_exec(k, mc->sql_row_lock, a, 1, &r,
                    deadline_ns > 0 ? deadline_ns : my_wait_bound(l, deadline_ns), cancel, why,
                    sizeof why);
        my_res_free(&r);
        if (!rc)
            break;
        /* A name's first holder inserts its row in its own transaction; if
         * that transaction rolls back (the holder died, was killed or
         * broken), InnoDB can pick one of the queued inserts as a deadlock
         * victim and undo it: nothing was held, so ask again. So too when
         * the server ended the session or the statement before its time
         * (as getlock.c's key_take does). */
        bool victim = !k->broken && k->last_errno == 1213 && attempt < 8;
        bool ended = my_session_ended(&k, rc, deadline_ns);
        bool cut_short = !ended && my_interrupted(k);
        if (!(victim && my_time_left(deadline_ns)) && !ended &&
            !(cut_short && my_time_left(deadline_ns)))
            break;
        early += cut_short;
        if (!victim) {
            rc = my_retry_pause(deadline_ns, cancel);
            if (rc) {
                my_conn_put(mc, k);
                return dl_lock_err(l, rc, "lock \"%s\": canceled", l->name);
            }
        }
    }
    if (rc == DLOCK_ETIMEDOUT && !k->broken) {
        /* the server's lock wait ran out: the statement was undone */
        int64_t until = dl_deadline_in(dl_op_timeout_ms(l, mc->op_timeout_ms));
        if (my_q_simple(k, 'r', until, why, sizeof why) != 0)
            k->failed = true;
        my_conn_put(mc, k);
        return my_not_taken(l, deadline_ns, early);
    }
    if (rc)
        return my_take_failed(l, deadline_ns, k, rc, why, early);
    /* The row is ours. A rowlock holder holds GET_LOCK of the name too, as
     * a getlock holder does: the two modes are one lock (and lease mode
     * sees both, see build_sql). Waited for with the row held: behind a
     * getlock holder, or a program's own GET_LOCK of the name. */
    for (;;) {
        my_arg ka[] = {A_S(ml->key), A_D(my_wait_seconds(deadline_ns))};
        rc = my_q_exec(k, mc->sql_queue, ka, 2, &r, my_wait_bound(l, deadline_ns), cancel, why,
                    sizeof why);
        bool got = rc == 0 && my_cell(&r, 0, 0) && strcmp(my_cell(&r, 0, 0), "1") == 0;
        my_res_free(&r);
        if (got)
            break;
        if (rc && k->broken && rc != DLOCK_EUNREACHABLE)
            return my_wait_cut(l, deadline_ns, k, rc, early); /* its end frees the row */
        if (rc && my_session_ended(&k, rc, deadline_ns)) { /* the row went with it */
            rc = my_retry_pause(deadline_ns, cancel);
            if (rc)
                return dl_lock_err(l, rc, "lock \"%s\": canceled", l->name);
            goto again;
        }
        if ((rc == 0 || my_interrupted(k)) && my_time_left(deadline_ns)) {
            early++; /* GET_LOCK's NULL, or the statement my_interrupted */
            rc = my_retry_pause(deadline_ns, cancel);
            if (!rc)
                continue;
        }
        if (rc == 0) { /* GET_LOCK's 0: the wait ran out */
            int64_t until =
                dl_deadline_in(dl_op_timeout_ms(l, mc->op_timeout_ms));
            if (my_q_simple(k, 'r', until, why, sizeof why) != 0)
                k->failed = true;
            my_conn_put(mc, k);
            return dl_lock_err(l, deadline_ns == 0 ? DLOCK_EBUSY : DLOCK_ETIMEDOUT,
                               "lock \"%s\" is held through its GET_LOCK (mode=getlock, "
                               "mode=rowlock on another table, or a program's own GET_LOCK): "
                               "one name is one lock across modes",
                               l->name);
        }
        k->failed = true;
        my_conn_close(k);
        if (rc == DLOCK_ECANCELED)
            return dl_lock_err(l, rc, "lock \"%s\": canceled", l->name);
        return dl_lock_err(l, rc, "lock \"%s\": %s (%s)", l->name, why, mc->redacted);
    }
    rc = my_lease_holds(l, k, why, sizeof why);
    if (rc) {
        if (rc > 0) { /* give the name's GET_LOCK and the row back */
            int64_t until =
                dl_deadline_in(dl_op_timeout_ms(l, mc->op_timeout_ms));
            my_arg ka[] = {A_S(ml->key)};
            if (my_q_exec(k, mc->sql_release, ka, 1, &r, until, -1, why, sizeof why) != 0 ||
                my_q_simple(k, 'r', until, why, sizeof why) != 0)
                k->failed = true;
            my_res_free(&r);
            my_conn_put(mc, k);
            *lease_held = true;
            return 0;
        }
        k->failed = true;
        my_conn_close(k);
        return dl_lock_err(l, rc, "lock \"%s\": %s (%s)", l->name, why, mc->redacted);
    }
    /* ours: the token, on k (see "Tokens": the MEMORY table it writes is
     * not undone by a rollback, and the draw needs the session alive) */
    uint64_t token = 0;
    rc = my_draw_token(l, k, false, false, NULL, &token, why, sizeof why);
    return my_session_hold(l, k, rc, token, why, sizeof why);
}

/* Whether name's row is locked, by a shared-lock read that does not wait
 * (autocommit: let go at once); the token table's record beside it. The
 * holder's connection id into conn_id when asked. */
static int row_inspect(dlock_client *c, const char *name, dlock_info *info, char *conn_id,
                       size_t idlen)
{
    myclient *mc = mc_of(c);
    char why[300];
    memset(info, 0, sizeof *info);
    info->held_ms = -1;
    info->lease_ms = -1;
    info->waiters = -1; /* InnoDB's lock waits are PROCESS-privileged */
    char key[MY_KEY_MAX + 1];
    my_key_of("", name, key, sizeof key);
    my_arg a[] = {A_S(name)}, ka[] = {A_S(key), A_S(name)};
    my_res r = {0};
    int rc = my_pool_exec(c, mc->sql_row_probe, a, 1, &r, why, sizeof why);
    bool held;
    if (rc == DLOCK_ETIMEDOUT) {
        held = true; /* NOWAIT met the holder's lock */
    } else if (rc) {
        return dl_client_err(c, rc, "inspect \"%s\": %s (%s)", name, why, mc->redacted);
    } else {
        held = false;
    }
    my_res_free(&r);
    rc = my_pool_exec(c, mc->sql_row_info, ka, 2, &r, why, sizeof why);
    if (rc)
        return dl_client_err(c, rc, "inspect \"%s\": %s (%s)", name, why, mc->redacted);
    info->held = held;
    info->holders = held ? 1 : 0;
    if (!held)
        info->waiters = 0;
    info->token = my_cell(&r, 0, 0) ? strtoull(my_cell(&r, 0, 0), NULL, 10) : 0;
    if (held && my_cell(&r, 0, 1)) {
        snprintf(info->holder, sizeof info->holder, "%s", my_cell(&r, 0, 1));
        info->held_ms = my_cell(&r, 0, 2) ? strtoll(my_cell(&r, 0, 2), NULL, 10) : -1;
    }
    if (conn_id && idlen)
        snprintf(conn_id, idlen, "%s", held && my_cell(&r, 0, 3) ? my_cell(&r, 0, 3) : "");
    my_res_free(&r);
    return 0;
}

static int rowlock_acquire(dlock_lock *l, int64_t deadline_ns)
{
    return my_session_acquire(l, deadline_ns, row_acquire);
}

/* The name's GET_LOCK first (a getlock waiter may have it while the row is
 * still ours), then the row, by the commit. */
static int rowlock_unlock(dlock_lock *l, my_conn *k, int64_t until, bool *was_held, char *why,
                          size_t wlen)
{
    my_res r = {0};
    int rc = my_release_key(l, k, until, &r, why, wlen);
    my_res_free(&r);
    if (!rc)
        rc = my_q_simple(k, 'c', until, why, wlen);
    *was_held = rc == 0;
    return rc;
}

static int rowlock_release(dlock_lock *l)
{
    return my_session_release(l, rowlock_unlock);
}

static int rowlock_inspect(dlock_client *c, const char *name, dlock_info *info)
{
    memset(info, 0, sizeof *info);
    return row_inspect(c, name, info, NULL, 0);
}

/* The leader's value: beside the row, in the token table: the holder's
 * token guards it. */
static int rowlock_set_value(dlock_lock *l, const char *value)
{
    myclient *mc = mc_of(l->c);
    mylock *ml = l->bstate;
    char why[300], tok[24];
    snprintf(tok, sizeof tok, "%" PRIu64, atomic_load(&l->token));
    my_res r = {0};
    my_arg a[] = {A_S(value), A_S(ml->key), A_S(l->name), A_S(tok)};
    int rc = my_pool_exec(l->c, mc->sql_row_value, a, 4, &r, why, sizeof why);
    my_res_free(&r);
    if (rc)
        return dl_lock_err(l, rc, "lock \"%s\": publishing the value: %s", l->name, why);
    return 0;
}

static int rowlock_get_value(dlock_client *c, const char *name, char *buf, size_t len)
{
    char key[MY_KEY_MAX + 1], why[300];
    my_res r = {0};
    dlock_info info;
    int rc = row_inspect(c, name, &info, NULL, 0);
    if (rc)
        return rc;
    if (info.held != 1)
        return dl_client_err(c, DLOCK_ENOENT, "\"%s\" has no leader", name);
    my_key_of("", name, key, sizeof key);
    my_arg a[] = {A_S(key), A_S(name)};
    rc = my_pool_exec(c, mc_of(c)->sql_row_getvalue, a, 2, &r, why, sizeof why);
    return my_value_reply(c, name, rc, &r, why, buf, len);
}

/* KILL the connection whose transaction holds the row. */
static int rowlock_break(dlock_client *c, const char *name, dlock_info *broken)
{
    char id[24] = "";
    memset(broken, 0, sizeof *broken);
    int rc = row_inspect(c, name, broken, id, sizeof id);
    if (dl_nothing_to_break(rc, broken))
        return rc;
    return my_kill_holder(c, name, id);
}

/* rowlock's own statements: the row, and the holder's in TABLE_live. */
int my_rowlock_build_sql(myclient *mc)
{
    const char *t = mc->table, *lv = mc->live;
    mc->sql_row_lock = dl_fmt_alloc(
        "INSERT INTO %s (name) VALUES (?) ON DUPLICATE KEY UPDATE name = VALUES(name)", t);
    mc->sql_row_probe = dl_fmt_alloc(mc->mariadb ? "SELECT name FROM %s WHERE name = ? LOCK IN "
                                                "SHARE MODE NOWAIT"
                                              : "SELECT name FROM %s WHERE name = ? FOR SHARE "
                                                "NOWAIT",
                                  t);
    mc->sql_row_info = dl_fmt_alloc("SELECT token, holder, " HELD_MS ", conn FROM %s WHERE k = ? "
                                    "AND name = ?",
                                    "since", lv);
    mc->sql_row_value =
        dl_fmt_alloc("UPDATE %s SET value = ? WHERE k = ? AND name = ? AND token = ?", lv);
    mc->sql_row_getvalue = dl_fmt_alloc("SELECT value FROM %s WHERE k = ? AND name = ?", lv);
    mc->sql_list = dl_fmt_alloc("SELECT name FROM %s WHERE name LIKE ? AND token > 0 ORDER BY name",
                                lv);
    return mc->sql_row_lock && mc->sql_row_probe && mc->sql_row_info && mc->sql_row_value &&
                   mc->sql_row_getvalue && mc->sql_list
               ? 0
               : -1;
}

/* The table of names, TABLE_live, and the session modes' tables (see
 * my_session_tables). */
int my_rowlock_tables(myclient *mc, char **ddl, const char **bare)
{
    ddl[0] = dl_fmt_alloc("CREATE TABLE IF NOT EXISTS %s (name VARBINARY(200) NOT NULL "
                          "PRIMARY KEY) ENGINE=InnoDB",
                          mc->table);
    ddl[1] = my_live_ddl(mc);
    bare[0] = mc->table_bare;
    bare[1] = mc->live_bare;
    return ddl[0] && ddl[1] ? my_session_tables(ddl, bare) : DLOCK_ENOMEM;
}

const dl_backend_ops my_rowlock_ops = {
    .client_open = my_client_open,
    .client_close = my_client_close,
    .lock_init = my_lock_init,
    .lock_fini = my_lock_fini,
    .acquire = rowlock_acquire,
    .release = rowlock_release,
    .abandon = my_session_abandon,
    .inspect = rowlock_inspect,
    .list = my_list,
    .set_value = rowlock_set_value,
    .get_value = rowlock_get_value,
    .break_lock = rowlock_break,
    MY_RECORD_OPS,
};
