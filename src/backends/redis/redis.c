/* SPDX-License-Identifier: MIT */
/*
 * redis.c — the `redis://`, `redis+sentinel://` and `redis+cluster://`
 * backend: one master (found directly, through Sentinel, or per slot in a
 * cluster) holding each lock's state, changed only by lock.lua.
 *
 * Acquire is one script call; release is one script call that also hands the
 * lock to the next queued waiter (fair mode), who is blocked in BLPOP on its
 * own list and wakes up already holding the lock, with its token. Non-fair
 * waiters block on a shared list that each release pushes one wake-up to.
 * A waiter re-registers every second or so (its registration is a short
 * lease, so a waiter that died does not block the queue for long) and also
 * looks again when the holder's lease would run out, in case the holder died
 * without releasing. Leases are renewed by the core's renewal thread.
 */
#include "internal.h"

/* The operations need hiredis; the descriptor's facts at the end do not. */
#ifdef DLOCK_HAVE_REDIS
#include "redis_master.h"

#include <errno.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define WAIT_LEASE_MS 3000   /* a queued waiter that does not look in this long is dead */
#define WAIT_REFRESH_MS 1000 /* how often a waiter looks (and re-registers) */

/* ---- finding the master -------------------------------------------------- */

/* Take mu, waiting no longer than ms (-1: as long as it takes). */
static bool lock_within(pthread_mutex_t *mu, int ms)
{
    if (ms < 0)
        return pthread_mutex_lock(mu) == 0;
    if (pthread_mutex_trylock(mu) == 0)
        return true;
    /* pthread_mutex_timedlock counts on the wall clock; a jump of it only
     * shortens or lengthens this wait, which the caller's own bound on
     * each request still limits. */
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    ts.tv_sec += ms / 1000;
    ts.tv_nsec += (long)(ms % 1000) * 1000000L;
    if (ts.tv_nsec >= 1000000000L) {
        ts.tv_sec++;
        ts.tv_nsec -= 1000000000L;
    }
    return pthread_mutex_timedlock(mu, &ts) == 0;
}

/* Whether a sentinel's reply so far names a master. */
static bool master_named(redisReply *const *out, int n, int ncmd, void *arg)
{
    (void)ncmd;
    (void)arg;
    char host[256];
    int port;
    for (int i = 0; i < n; i++)
        if (out[i] && rd_addr_reply(out[i], host, sizeof host, &port) == 0)
            return true;
    return false;
}

/* Ask the sentinels where the master is now, and point `master` there;
 * every wait within rd_ms(l, ...) (l may be NULL). All of them at once,
 * the first to name a master deciding (the first in the URL's order among
 * those that answered by then): a sentinel that is stopped or slow costs
 * nothing while another answers. */
static int sentinel_resolve(rclient *rc, const dlock_lock *l, char *err, size_t errlen)
{
    if (!lock_within(&rc->resolve_mu, rd_ms(l, -1))) {
        snprintf(err, errlen, "no time left to ask the sentinels (another thread is asking)");
        return RD_EIO;
    }
    int rc_out = RD_EIO, n = (int)rc->nsentinels;
    char why[768] = "no sentinel answered", e[256] = "";
    int ms = rd_ms(l, rc->cf.op_timeout_ms);
    if (ms == 0) {
        pthread_mutex_unlock(&rc->resolve_mu);
        snprintf(err, errlen, "no time left to ask the sentinels");
        return RD_EIO;
    }
    int64_t until = dl_deadline_in(ms);
    rconf scf = rc->cf;
    scf.user = scf.password = NULL; /* sentinels have their own auth */
    scf.db = 0;
    rconn *cs[n];
    redisReply *out[n];
    int st[n];
    rconn_get_many(rc->sentinels, n, &scf, cs, n, rd_ms(l, rc->cf.connect_timeout_ms), e,
                   sizeof e);
    if (e[0])
        snprintf(why, sizeof why, "%s", e);
    rcmd cmd;
    rcmd_init(&cmd);
    rcmd_add(&cmd, "SENTINEL");
    rcmd_add(&cmd, "get-master-addr-by-name");
    rcmd_add(&cmd, rc->master_name);
    rconn_call_many(cs, n, &cmd, 1, out, st, dl_ms_left(until), master_named, NULL);
    for (int i = 0; i < n; i++) {
        const rnode *s = &rc->sentinels[i];
        if (cs[i] && st[i] == RD_OWED)
            rconn_put(cs[i]); /* (it drops the late reply on its next call) */
        else if (cs[i] && st[i] != RD_OK)
            rconn_drop(cs[i]);
        else if (cs[i])
            rconn_put(cs[i]);
        redisReply *r = out[i];
        if (!r) {
            if (cs[i] && st[i] != RD_OWED)
                snprintf(why, sizeof why, "sentinel %s:%d: no reply within %d ms", s->host,
                         s->port, ms);
            continue;
        }
        char host[256];
        int port;
        if (rc_out == RD_OK) {
            /* (a master named already, by a sentinel before this one) */
        } else if (rd_addr_reply(r, host, sizeof host, &port) == 0) {
            if (strcmp(rc->master.host, host) != 0 || rc->master.port != port)
                rnode_reset(&rc->master, host, port);
            rc_out = RD_OK;
        } else if (r->type == REDIS_REPLY_NIL) {
            snprintf(why, sizeof why, "sentinel %s:%d does not know master \"%s\"", s->host,
                     s->port, rc->master_name);
        } else {
            rd_reply_desc(r, e, sizeof e);
            snprintf(why, sizeof why,
                     "sentinel %s:%d: master \"%s\": expected an array of {host, port}, got %s",
                     s->host, s->port, rc->master_name, e);
        }
        freeReplyObject(r);
    }
    pthread_mutex_unlock(&rc->resolve_mu);
    if (rc_out != RD_OK)
        snprintf(err, errlen, "%s", why);
    return rc_out;
}

/* Is this error reply one that means "ask again elsewhere" (failover)? */
static bool failover_error(const redisReply *r)
{
    return r && r->type == REDIS_REPLY_ERROR &&
           (strncmp(r->str, "READONLY", 8) == 0 || strncmp(r->str, "MASTERDOWN", 10) == 0 ||
            strncmp(r->str, "LOADING", 7) == 0);
}

rnode *rd_node_for(rclient *rc, const char *key)
{
    if (rc->mode == MODE_CLUSTER)
        return rd_cluster_node(rc->cluster, key);
    return &rc->master;
}

/*
 * Run cmds (pipelined) against the server owning `key`, taking care of what
 * the family needs on every call: a script the server forgot (NOSCRIPT:
 * load it, run again), a master that moved (sentinel failover, cluster
 * MOVED/ASK). A non-idempotent call that failed after sending returns
 * RD_EIO and the caller cleans up by owner id. The reply of the last
 * command decides. No step waits past how->l's bound: when no time is
 * left, nothing more is sent and RD_EIO is returned.
 */
int rd_run(rclient *rc, const char *key, const rcmd *cmds_in, int n, redisReply **out,
           const rcall *how, char *err, size_t errlen)
{
    rcmd cmds[n]; /* the script call may have to change form (see below) */
    memcpy(cmds, cmds_in, (size_t)n * sizeof *cmds);
    rcmd undo = {0};
    if (how->undo)
        undo = *how->undo;
    const dlock_lock *l = how->l;
    rnode *node = rd_node_for(rc, key);
    bool asking = false;
    for (int attempt = 0; attempt < 4; attempt++) {
        if (!node) {
            snprintf(err, errlen, "no cluster node serves this key's slot");
            return RD_EIO;
        }
        if (rd_ms(l, how->timeout_ms) == 0) {
            snprintf(err, errlen, "no time left before the deadline");
            return RD_EIO;
        }
        int fail;
        rconn *c = rconn_get(node, &rc->cf, rd_ms(l, rc->cf.connect_timeout_ms), &fail, err,
                             errlen);
        if (!c) {
            if (fail == DLOCK_EPROTO)
                return RD_EPROTO;
            if (rc->mode == MODE_SENTINEL && attempt == 0) {
                char why[768];
                if (sentinel_resolve(rc, l, why, sizeof why) == RD_OK)
                    continue;
                /* a long reason is cut short: the message must fit, not be complete */
                if (snprintf(err + strlen(err), errlen - strlen(err), "; %s", why) < 0)
                    err[0] = '\0';
            }
            if (rc->mode == MODE_CLUSTER && attempt == 0) {
                char why[256];
                if (rd_cluster_refresh(rc->cluster, &rc->cf, l, why, sizeof why) == RD_OK) {
                    node = rd_node_for(rc, key);
                    continue;
                }
            }
            return RD_EIO;
        }
        int ms = rd_ms(l, how->timeout_ms);
        if (ms == 0) {
            rconn_put(c); /* nothing sent on it */
            snprintf(err, errlen, "no time left before the deadline");
            return RD_EIO;
        }
        int rcode;
        if (asking) {
            rcmd all[n + 1];
            rcmd_init(&all[0]);
            rcmd_add(&all[0], "ASKING");
            memcpy(&all[1], cmds, (size_t)n * sizeof *cmds);
            redisReply *rs[n + 1];
            rcode = rconn_call(c, all, n + 1, rs, ms, how->cancel_fd, how->sent_ns, err, errlen);
            if (rcode == RD_OK) {
                freeReplyObject(rs[0]);
                memcpy(out, &rs[1], (size_t)n * sizeof *out);
            }
        } else {
            rcode = rconn_call(c, cmds, n, out, ms, how->cancel_fd, how->sent_ns, err, errlen);
        }
        if (rcode != RD_OK) {
            if (rcode == RD_EIO && how->undo)
                rconn_abandon(c, &undo);
            else
                rconn_drop(c);
            if (rcode == RD_EIO && how->retry && attempt == 0) {
                char why[768];
                if (rc->mode == MODE_SENTINEL)
                    (void)sentinel_resolve(rc, l, why, sizeof why);
                else if (rc->mode == MODE_CLUSTER)
                    (void)rd_cluster_refresh(rc->cluster, &rc->cf, l, why, sizeof why);
                node = rd_node_for(rc, key);
                continue;
            }
            return rcode;
        }
        redisReply *last = out[n - 1];
        bool again = false;
        if (rd_script_missing(last)) {
            /* A restarted server, a new cluster node, or a replica
             * promoted before the library reached it: load here and run
             * again (it never ran), as a script if the server has no
             * functions. */
            int lr = rd_load_script(c, &rc->cf, rd_ms(l, rc->cf.op_timeout_ms), err, errlen);
            if (lr != RD_OK) {
                rconn_drop(c);
                for (int i = 0; i < n; i++)
                    freeReplyObject(out[i]);
                return lr;
            }
            for (int i = 0; i < n; i++)
                rd_script_retarget(&cmds[i], &rc->cf);
            if (how->undo)
                rd_script_retarget(&undo, &rc->cf);
            again = true;
        } else if (rc->mode == MODE_CLUSTER && last->type == REDIS_REPLY_ERROR && last->str &&
                   (strncmp(last->str, "MOVED ", 6) == 0 || strncmp(last->str, "ASK ", 4) == 0)) {
            bool ask = last->str[0] == 'A';
            rnode *to = rd_cluster_redirect(rc->cluster, last->str, !ask);
            if (to) {
                node = to;
                asking = ask;
                again = true;
            }
        } else if (failover_error(last) && rc->mode == MODE_SENTINEL) {
            snprintf(err, errlen, "%.200s", last->str);
            char why[768];
            (void)sentinel_resolve(rc, l, why, sizeof why);
            again = how->retry;
            if (!again) {
                rconn_drop(c);
                for (int i = 0; i < n; i++)
                    freeReplyObject(out[i]);
                return RD_EIO;
            }
        }
        if (!again) {
            rconn_put(c);
            return RD_OK;
        }
        rconn_put(c);
        for (int i = 0; i < n; i++)
            freeReplyObject(out[i]);
    }
    snprintf(err, errlen, "too many redirections");
    return RD_EIO;
}

/* A failed call (run's result x) as the lock's error: a server that does
 * not speak Redis is a protocol error, anything else unreachable. */
int rd_call_failed(dlock_lock *l, const char *what, int x, const char *err)
{
    return dl_lock_err(l, x == RD_EPROTO ? DLOCK_EPROTO : DLOCK_EUNREACHABLE,
                       "lock \"%s\": %s: %s (%s)", l->name, what, err, l->c->url->redacted);
}

/* A reply of the wrong shape: what was expected and what came instead. */
int rd_bad_reply(dlock_lock *l, const char *what, const char *expected, const redisReply *r)
{
    char got[160];
    rd_reply_desc(r, got, sizeof got);
    return dl_lock_err(l, DLOCK_EPROTO, "lock \"%s\": %s: expected %s, got %s (%s)", l->name,
                       what, expected, got, l->c->url->redacted);
}

int rd_client_bad_reply(dlock_client *cl, const char *what, const char *name,
                        const char *expected, const redisReply *r)
{
    char got[160];
    rd_reply_desc(r, got, sizeof got);
    return dl_client_err(cl, DLOCK_EPROTO, "%s \"%s\": expected %s, got %s (%s)", what, name,
                         expected, got, cl->url->redacted);
}

int rd_alien(dlock_client *cl, dlock_lock *l, const char *name, const char *key, bool keyed,
             const redisReply *r)
{
    char what[64], own[DL_NAME_MAX + 16];
    if (!rd_alien_reply(r, what, sizeof what))
        return 0;
    if (!keyed) {
        snprintf(own, sizeof own, "dlock:{%s}:lock", name); /* as people name it */
        key = own;
    }
    const char *url = (l ? l->c : cl)->url->redacted;
    if (keyed)
        return l ? dl_lock_err(l, DLOCK_ECONFLICT, ALIEN_KEYED, name, key, what, url)
                 : dl_client_err(cl, DLOCK_ECONFLICT, ALIEN_KEYED, name, key, what, url);
    return l ? dl_lock_err(l, DLOCK_ECONFLICT, ALIEN_OWN, name, key, what, url)
             : dl_client_err(cl, DLOCK_ECONFLICT, ALIEN_OWN, name, key, what, url);
}

#define PAIR_EXPECTED "an array of 2 integers from the lock script"
#define INT_EXPECTED "an integer from the lock script"

int rd_owned_call(dlock_lock *l, const char *key, const rcmd *c, const char *what,
                  const char *lost)
{
    rclient *rc = rc_of(l->c);
    redisReply *r;
    char err[256];
    rcall how = {.l = l, .timeout_ms = rc->cf.op_timeout_ms, .cancel_fd = -1, .retry = true};
    int x = rd_run(rc, key, c, 1, &r, &how, err, sizeof err);
    if (x != RD_OK)
        return rd_call_failed(l, what, x, err);
    int result = 0;
    if (r->type != REDIS_REPLY_INTEGER)
        result = rd_bad_reply(l, what, INT_EXPECTED, r);
    else if (r->integer != 1)
        result = dl_lock_err(l, DLOCK_ELOST, "lock \"%s\"%s", l->name, lost);
    freeReplyObject(r);
    return result;
}

/* ---- operations ---------------------------------------------------------- */

static int lock_args(dlock_lock *l, rcmd *c, const char *op, char nb[][24], long long wl)
{
    rclient *rc = rc_of(l->c);
    rlock *rl = l->bstate;
    rd_script_cmd(c, &rc->cf, rl->key, op);
    rcmd_add(c, l->owner);
    rcmd_add(c, rl->kind);
    rcmd_addll(c, l->opts.ttl_ms, nb[0]);
    rcmd_addll(c, l->opts.permits, nb[1]);
    rcmd_add(c, l->opts.fair ? "1" : "0");
    rcmd_add(c, rc->self);
    rcmd_addll(c, wl, nb[2]);
    return 0;
}

/* "op OWNER KIND" of the lock script for l (safe to repeat: the script
 * checks the owner). */
static void owner_cmd(dlock_lock *l, const char *op, rcmd *c)
{
    rclient *rc = rc_of(l->c);
    rlock *rl = l->bstate;
    rd_script_cmd(c, &rc->cf, rl->key, op);
    rcmd_add(c, l->owner);
    rcmd_add(c, rl->kind);
}

/* Run owner_cmd(op), within l's bound (none outside acquire and renew). */
static int owner_op(dlock_lock *l, const char *op, redisReply **r, char *err, size_t errlen)
{
    rclient *rc = rc_of(l->c);
    rlock *rl = l->bstate;
    rcmd c;
    owner_cmd(l, op, &c);
    rcall how = {.l = l, .timeout_ms = rc->cf.op_timeout_ms, .cancel_fd = -1, .retry = true};
    return rd_run(rc, rl->key, &c, 1, r, &how, err, errlen);
}

/* Give up waiting: leave the queue, and pass on a lock handed to us. Within
 * the acquisition's bound: when none is left, nothing is sent, and what we
 * may hold lapses by itself — a registration within its wait lease, a
 * grant or hand-over within its ttl, as when a waiter dies. */
static void abort_wait(dlock_lock *l)
{
    redisReply *r;
    char err[256];
    if (owner_op(l, "abort", &r, err, sizeof err) == RD_OK)
        freeReplyObject(r);
}

/* How many replicas the master on the other end of key has connected, by
 * ROLE; -1 if it will not say. */
static long long replicas_of(rclient *rc, const dlock_lock *l, const char *key)
{
    rcmd c;
    rcmd_init(&c);
    rcmd_add(&c, "ROLE");
    redisReply *r;
    char err[256];
    rcall how = {.l = l, .timeout_ms = rc->cf.op_timeout_ms, .cancel_fd = -1, .retry = false};
    if (rd_run(rc, key, &c, 1, &r, &how, err, sizeof err) != RD_OK)
        return -1;
    long long n = -1;
    /* {"master", offset, {{ip, port, offset}...}} */
    if (r->type == REDIS_REPLY_ARRAY && r->elements >= 3 &&
        r->element[0]->type == REDIS_REPLY_STRING && strcmp(r->element[0]->str, "master") == 0 &&
        r->element[2]->type == REDIS_REPLY_ARRAY)
        n = (long long)r->element[2]->elements;
    freeReplyObject(r);
    return n;
}

int rd_confirm_replicated(dlock_lock *l, const char *key, const rcmd *renew)
{
    rclient *rc = rc_of(l->c);
    /* WAIT counts the writes of its own connection, so write (renew) and
     * WAIT on one connection. WAIT's own timeout fits in the acquisition's
     * bound, leaving a quarter of it for the reply to come back. */
    int budget = rd_ms(l, rc->cf.op_timeout_ms + rc->wait_timeout_ms);
    int wt = rc->wait_timeout_ms;
    if (l->op_deadline_ns > 0 && budget - budget / 4 < wt)
        wt = budget - budget / 4 > 0 ? budget - budget / 4 : 1; /* WAIT 0 would be forever */
    rcmd c[2];
    char nb[3][24];
    c[0] = *renew;
    rcmd_init(&c[1]);
    rcmd_add(&c[1], "WAIT");
    rcmd_addll(&c[1], rc->wait_replicas, nb[1]);
    rcmd_addll(&c[1], wt, nb[2]);
    redisReply *r[2];
    char err[256];
    rcall how = {.l = l,
                 .timeout_ms = rc->cf.op_timeout_ms + rc->wait_timeout_ms,
                 .cancel_fd = -1,
                 .retry = true};
    int x = rd_run(rc, key, c, 2, r, &how, err, sizeof err);
    if (x != RD_OK)
        return rd_call_failed(l, "confirming replication", x, err);
    if (r[0]->type != REDIS_REPLY_INTEGER || r[1]->type != REDIS_REPLY_INTEGER) {
        bool first = r[0]->type != REDIS_REPLY_INTEGER;
        int e = rd_bad_reply(l, first ? "confirming replication" : "WAIT",
                             first ? INT_EXPECTED : "an integer (replicas reached)",
                             r[first ? 0 : 1]);
        freeReplyObject(r[0]);
        freeReplyObject(r[1]);
        return e;
    }
    long long acks = r[1]->integer;
    bool renewed = r[0]->integer == 1;
    freeReplyObject(r[0]);
    freeReplyObject(r[1]);
    if (!renewed)
        return dl_lock_err(l, DLOCK_ELOST, "lock \"%s\" was lost before replication", l->name);
    if (acks >= rc->wait_replicas)
        return 0;
    /* Fewer replicas than the URL asks for is the URL's fault (no wait is
     * long enough); replicas that are there but slow are the network's. */
    long long have = replicas_of(rc, l, key);
    if (have >= 0 && have < rc->wait_replicas)
        return dl_lock_err(l, DLOCK_EURL,
                           "lock \"%s\": wait=%d asks for more replicas than the master has "
                           "(%lld connected) (%s)",
                           l->name, rc->wait_replicas, have, l->c->url->redacted);
    return dl_lock_err(l, DLOCK_EUNREACHABLE,
                       "lock \"%s\": only %lld of %d replicas acknowledged the acquisition "
                       "within %d ms (%s)",
                       l->name, acks, rc->wait_replicas, wt, l->c->url->redacted);
}

static int release_quietly(dlock_lock *l);

/* A timed waiter's registration (wl) lasts no longer than its wait, so
 * that one whose abort never reaches the server (its bound spent on a
 * loaded machine, its process gone) stops being handed the lock when its
 * deadline passes, and a hand-over it did not collect is taken back then
 * (lock.lua, take_back) instead of standing idle for a whole ttl. */
static long long wait_lease_ms(int64_t deadline, long long wl)
{
    if (deadline <= 0 || wl == 0)
        return wl;
    long long left = dl_ms_left(deadline);
    return left >= wl ? wl : left > 0 ? left : 1;
}

static int redis_acquire(dlock_lock *l, int64_t deadline)
{
    rclient *rc = rc_of(l->c);
    rlock *rl = l->bstate;
    bool fair = l->opts.fair != 0;
    char wake[DL_NAME_MAX + 64]; /* where this waiter blocks */
    if (rd_name_key(l->name, "", wake, sizeof wake) != 0)
        return dl_lock_err(l, DLOCK_ENAME, "lock \"%s\": name too long for a key", l->name);
    size_t pl = strlen(wake);
    if (fair)
        snprintf(wake + pl, sizeof wake - pl, "w:%s", l->owner);
    else
        snprintf(wake + pl, sizeof wake - pl, "sig");
    /* A waiter looks again at least this often; small leases need it more
     * often, since a handed lease is measured from the last look. */
    int refresh = WAIT_REFRESH_MS;
    if (l->opts.ttl_ms / 4 < refresh)
        refresh = l->opts.ttl_ms / 4;
    long long wl = deadline == 0 ? 0 : WAIT_LEASE_MS;
    if (wl && wl < 3LL * refresh)
        wl = 3LL * refresh;

    /* acq and wait may grant or register: when their reply does not come
     * in time, abort follows them on their connection (rconn_abandon). */
    rcmd undo;
    owner_cmd(l, "abort", &undo);
    rcmd c;
    char nb[3][24];
    lock_args(l, &c, "acq", nb, wait_lease_ms(deadline, wl));
    redisReply *r;
    char err[256];
    int64_t sent;
    rcall how = {.l = l,
                 .timeout_ms = rc->cf.op_timeout_ms,
                 .cancel_fd = -1,
                 .sent_ns = &sent,
                 .retry = false,
                 .undo = &undo};
    int x = rd_run(rc, rl->key, &c, 1, &r, &how, err, sizeof err);
    if (x != RD_OK) {
        abort_wait(l);
        return rd_call_failed(l, "acquire", x, err);
    }
    long long granted, value;
    if (!rd_pair_reply(r, &granted, &value)) {
        int e;
        if (!(e = rd_alien(NULL, l, l->name, NULL, false, r)))
            e = rd_bad_reply(l, "acquire", PAIR_EXPECTED, r);
        freeReplyObject(r);
        abort_wait(l);
        return e;
    }
    freeReplyObject(r);
    int64_t safe_start = sent;
    int result = 1;
    while (result == 1) {
        if (granted == -1) { /* a semaphore of other permits is in force */
            if (deadline != 0)
                abort_wait(l);
            result = dl_conflict_err(l, 's', (unsigned)value);
            break;
        }
        if (granted) {
            atomic_store(&l->token, (uint64_t)value);
            l->lease_start_ns = safe_start;
            result = 0;
            break;
        }
        if (deadline == 0) {
            result = dl_lock_err(l, DLOCK_EBUSY, "lock \"%s\" is held by another owner", l->name);
            break;
        }
        int left = dl_ms_left(deadline);
        if (deadline > 0 && left == 0) {
            abort_wait(l);
            result = dl_wait_timed_out(l, NULL);
            break;
        }
        long long slice = value + 2 < refresh ? value + 2 : refresh;
        if (deadline > 0 && left < slice)
            slice = left;
        if (slice < 5)
            slice = 5;
        char tbuf[32];
        snprintf(tbuf, sizeof tbuf, "%.3f", (double)slice / 1000.0);
        rcmd b;
        rcmd_init(&b);
        rcmd_add(&b, "BLPOP");
        rcmd_add(&b, wake);
        rcmd_add(&b, tbuf);
        /* No undo: a blocked connection runs nothing after BLPOP before it
         * returns; abort_wait goes on another one, and the wait leaves it
         * half the deadline's margin should the server not answer (the
         * slice itself ends by the deadline). */
        int bt = (int)slice + rc->cf.op_timeout_ms;
        if (l->op_deadline_ns > 0) {
            int room = dl_ms_left(l->op_deadline_ns -
                                  (int64_t)DL_DEADLINE_MARGIN_MS * 1000000LL / 2);
            if (room < bt)
                bt = room > 0 ? room : 1;
        }
        rcall bhow = {.l = l,
                      .timeout_ms = bt,
                      .cancel_fd = dl_cancel_fd(l),
                      .sent_ns = &sent,
                      .retry = false};
        x = rd_run(rc, rl->key, &b, 1, &r, &bhow, err, sizeof err);
        if (x == RD_CANCELED) {
            abort_wait(l);
            result = dl_lock_err(l, DLOCK_ECANCELED, "lock \"%s\": acquisition canceled", l->name);
            break;
        }
        if (x != RD_OK) {
            abort_wait(l);
            result = rd_call_failed(l, "waiting", x, err); /* past the deadline: see below */
            break;
        }
        bool woken = r->type == REDIS_REPLY_ARRAY && r->elements == 2;
        if (!woken && r->type != REDIS_REPLY_NIL) {
            result = rd_bad_reply(l, "waiting", "nil or an array of 2 from BLPOP", r);
            freeReplyObject(r);
            abort_wait(l);
            break;
        }
        if (woken && fair) {
            /* Handed over by the releaser: we hold it already. */
            granted = rd_handoff_reply(r, &value);
            if (!granted) {
                result = rd_bad_reply(l, "waiting",
                                      "an array of {list, token} from BLPOP (a hand-over)", r);
                freeReplyObject(r);
                abort_wait(l);
                break;
            }
            freeReplyObject(r);
            continue;
        }
        freeReplyObject(r);
        if (!woken)
            safe_start = sent; /* nothing was handed to us before this BLPOP ran */
        /* Look again: a non-fair waiter tries to take the lock; a fair one
         * keeps its place and collects a lock whose holder vanished. */
        lock_args(l, &c, fair ? "wait" : "acq", nb, wait_lease_ms(deadline, wl));
        if (!fair)
            rcmd_add(&c, "1"); /* again: drop the registration if granted */
        x = rd_run(rc, rl->key, &c, 1, &r, &how, err, sizeof err);
        if (x != RD_OK) {
            abort_wait(l);
            result = rd_call_failed(l, "waiting", x, err);
            break;
        }
        if (!rd_pair_reply(r, &granted, &value)) {
            if (!(result = rd_alien(NULL, l, l->name, NULL, false, r)))
                result = rd_bad_reply(l, "waiting", PAIR_EXPECTED, r);
            freeReplyObject(r);
            abort_wait(l);
            break;
        }
        freeReplyObject(r);
        if (!granted)
            safe_start = sent;
        else if (!fair)
            safe_start = sent; /* granted by this very call */
    }
    if (result == 0 && rc->wait_replicas > 0) {
        rcmd renew;
        rd_renew_cmd(&renew, &rc->cf, l, l->opts.ttl_ms, nb[0]);
        result = rd_confirm_replicated(l, rl->key, &renew);
        if (result)
            (void)release_quietly(l);
    }
    /* A request of a timed wait cut short by the deadline bound (after the
     * caller's deadline passed; a server answers BLPOP up to its cron period
     * late) means the wait ran out, not that the server is gone. */
    if (dl_deadline_cut(l, result, deadline))
        result = dl_wait_timed_out_after(l);
    return result;
}

int rd_release_result(dlock_lock *l, int x, redisReply *r, const char *err)
{
    if (x != RD_OK)
        return rd_call_failed(l, "release", x, err);
    int result = 0;
    if (r->type != REDIS_REPLY_INTEGER)
        result = rd_bad_reply(l, "release", INT_EXPECTED, r);
    else if (r->integer == 0)
        /* The lease ran out and maybe someone else holds it now: we must
         * not, and did not, touch their lock. */
        result = dl_lock_err(l, DLOCK_ELOST,
                             "lock \"%s\" had already expired when released (lease %d ms)",
                             l->name, l->opts.ttl_ms);
    freeReplyObject(r);
    return result;
}

static int release_quietly(dlock_lock *l)
{
    redisReply *r;
    char err[256];
    int x = owner_op(l, "rel", &r, err, sizeof err);
    return rd_release_result(l, x, r, err);
}

static int redis_release(dlock_lock *l)
{
    return release_quietly(l);
}

/* Every request within l's bound (set by the core: the moment the lease
 * will be declared lost), so a stalled server cannot hold the renewal past
 * the point where it could help; running out of time is a transient
 * failure (EUNREACHABLE): the core, not the backend, decides the loss. */
static int renew_for(dlock_lock *l, int64_t ttl_ms)
{
    rclient *rc = rc_of(l->c);
    rlock *rl = l->bstate;
    rcmd c;
    char nb[24];
    rd_renew_cmd(&c, &rc->cf, l, ttl_ms, nb);
    return rd_owned_call(l, rl->key, &c, "renew", ": lease expired or taken over");
}

static int redis_renew(dlock_lock *l)
{
    return renew_for(l, l->opts.ttl_ms);
}

/* The lease, shortened or lengthened to ms, is the release: the key goes
 * by itself then, and waiters see its PTTL (they look again when it ends). */
static int redis_release_at(dlock_lock *l, int64_t ms)
{
    return renew_for(l, ms);
}

/* ---- renewing many locks at once ------------------------------------------------------ */

/* rcs[i] of a lock renew_on_node leaves to redis_renew (never a DLOCK_E* code). */
enum { RENEW_ALONE = 1 };

/* Whether a reply says "ask elsewhere" (a moved slot, a failover): the
 * lock is renewed again alone by redis_renew, which follows it. */
static bool elsewhere(const redisReply *r)
{
    return r->type == REDIS_REPLY_ERROR && r->str &&
           (strncmp(r->str, "MOVED ", 6) == 0 || strncmp(r->str, "ASK ", 4) == 0 ||
            failover_error(r));
}

/*
 * Renew ls[0..n) on one server, setting every rcs[i]: every renew call in one pipelined write,
 * the replies in one read. A server that forgot the script gets it back
 * and the calls that met its absence go again, once. A connection that
 * fails fails every lock of the batch (transient: each is lost at its own
 * deadline unless a later try succeeds); the sentinels or the cluster are
 * asked where the master is now, for that later try.
 */
static void renew_on_node(rclient *rc, rnode *node, dlock_lock *const *ls, int *rcs, size_t n)
{
    const dlock_lock *bound = ls[0]; /* the core gives the batch one op_deadline_ns */
    size_t *todo = malloc(n * sizeof *todo);
    rcmd *cmds = malloc(n * sizeof *cmds);
    redisReply **out = malloc(n * sizeof *out);
    char(*nb)[24] = malloc(n * sizeof *nb);
    char err[256] = "out of memory";
    int x = RD_EIO;
    rconn *c = NULL;
    size_t nt = n;
    if (todo && cmds && out && nb) {
        int fail = DLOCK_EUNREACHABLE;
        c = node ? rconn_get(node, &rc->cf, rd_ms(bound, rc->cf.connect_timeout_ms), &fail, err,
                             sizeof err)
                 : NULL;
        if (!node)
            snprintf(err, sizeof err, "no cluster node serves this key's slot");
        if (fail == DLOCK_EPROTO)
            x = RD_EPROTO;
    }
    for (size_t i = 0; i < n && todo; i++)
        todo[i] = i;
    for (int attempt = 0; c && nt > 0 && attempt < 2; attempt++) {
        for (size_t k = 0; k < nt; k++)
            rd_renew_cmd(&cmds[k], &rc->cf, ls[todo[k]], ls[todo[k]]->opts.ttl_ms, nb[k]);
        int ms = rd_ms(bound, rc->cf.op_timeout_ms);
        if (ms == 0)
            snprintf(err, sizeof err, "no time left before the deadline");
        x = ms == 0 ? RD_EIO : rconn_call(c, cmds, (int)nt, out, ms, -1, NULL, err, sizeof err);
        if (x != RD_OK) {
            rconn_drop(c);
            c = NULL;
            break;
        }
        size_t again = 0;
        for (size_t k = 0; k < nt; k++) {
            size_t i = todo[k];
            dlock_lock *l = ls[i];
            redisReply *r = out[k];
            if (r->type == REDIS_REPLY_INTEGER && r->integer == 1)
                rcs[i] = 0;
            else if (r->type == REDIS_REPLY_INTEGER)
                rcs[i] = dl_lock_err(l, DLOCK_ELOST, "lock \"%s\": lease expired or taken over",
                                     l->name);
            else if (rd_script_missing(r))
                todo[again++] = i; /* again <= k: nothing unread is overwritten */
            else if (elsewhere(r))
                rcs[i] = RENEW_ALONE;
            else
                rcs[i] = rd_bad_reply(l, "renew", INT_EXPECTED, r);
            freeReplyObject(r);
        }
        nt = again;
        if (nt > 0) {
            x = rd_load_script(c, &rc->cf, rd_ms(bound, rc->cf.op_timeout_ms), err, sizeof err);
            if (x != RD_OK) {
                rconn_drop(c);
                c = NULL;
            } else if (attempt == 1) {
                snprintf(err, sizeof err, "the server forgot the lock script again");
                x = RD_EIO;
            }
        }
    }
    if (c) {
        rconn_put(c);
        if (nt > 0 && x == RD_OK) /* still missing after the second try */
            x = RD_EIO;
    } else if (x != RD_EPROTO) {
        /* Learn where the master is now, for the next try of these locks. */
        char why[768];
        if (rc->mode == MODE_SENTINEL)
            (void)sentinel_resolve(rc, bound, why, sizeof why);
        else if (rc->mode == MODE_CLUSTER)
            (void)rd_cluster_refresh(rc->cluster, &rc->cf, bound, why, sizeof why);
    }
    for (size_t k = 0; k < nt; k++)
        rcs[todo ? todo[k] : k] = rd_call_failed(ls[todo ? todo[k] : k], "renew", x, err);
    for (size_t i = 0; i < n; i++)
        if (rcs[i] == RENEW_ALONE)
            rcs[i] = redis_renew(ls[i]);
    free(nb);
    free(out);
    free(cmds);
    free(todo);
}

/* A batch's locks grouped by the server that holds them (cluster mode). */
typedef struct by_node {
    rnode *node;
    size_t i;
} by_node;

static int by_node_cmp(const void *a, const void *b)
{
    uintptr_t x = (uintptr_t)((const by_node *)a)->node, y = (uintptr_t)((const by_node *)b)->node;
    return x < y ? -1 : x > y;
}

/* Renew a batch: one pipelined round trip per server the batch's locks
 * live on (one but in a cluster, where each slot's master gets its own). */
static void redis_renew_batch(dlock_client *cl, dlock_lock *const *ls, int *rcs, size_t n)
{
    rclient *rc = rc_of(cl);
    if (rc->mode != MODE_CLUSTER) {
        renew_on_node(rc, &rc->master, ls, rcs, n);
        return;
    }
    by_node *g = malloc(n * sizeof *g);
    dlock_lock **sub = malloc(n * sizeof *sub);
    int *subrc = malloc(n * sizeof *subrc);
    if (!g || !sub || !subrc) {
        for (size_t i = 0; i < n; i++)
            rcs[i] = redis_renew(ls[i]);
        goto done;
    }
    for (size_t i = 0; i < n; i++)
        g[i] = (by_node){.node = rd_node_for(rc, ((rlock *)ls[i]->bstate)->key), .i = i};
    qsort(g, n, sizeof *g, by_node_cmp);
    for (size_t a = 0, b; a < n; a = b) {
        size_t k = 0;
        for (b = a; b < n && g[b].node == g[a].node; b++) {
            sub[k++] = ls[g[b].i];
        }
        renew_on_node(rc, g[a].node, sub, subrc, k);
        for (size_t j = 0; j < k; j++)
            rcs[g[a + j].i] = subrc[j];
    }
done:
    free(subrc);
    free(sub);
    free(g);
}

static void redis_abandon(dlock_lock *l)
{
    /* Best effort: the lease will expire anyway, but if the lock is still
     * ours on the server, free it now. */
    (void)release_quietly(l);
}

/* The script's info reply for name, checked: f points into *out. */
int rd_info_call(dlock_client *cl, const char *name, const char *key, const rcmd *c, bool keyed,
                 redisReply **out, rd_info *f)
{
    rclient *rc = rc_of(cl);
    char err[256];
    rcall how = {.timeout_ms = rc->cf.op_timeout_ms, .cancel_fd = -1, .retry = true};
    int x = rd_run(rc, key, c, 1, out, &how, err, sizeof err);
    if (x != RD_OK)
        return dl_client_err(cl, x == RD_EPROTO ? DLOCK_EPROTO : DLOCK_EUNREACHABLE,
                             "inspect \"%s\": %s (%s)", name, err, cl->url->redacted);
    if (rd_info_reply(*out, f) != 0) {
        int e;
        if (!(e = rd_alien(cl, NULL, name, key, keyed, *out)))
            e = rd_client_bad_reply(cl, "inspect", name,
                                    "an array of 12 strings and integers from the lock script",
                                    *out);
        freeReplyObject(*out);
        return e;
    }
    return 0;
}

/* The info of a name, by the lock script's info operation. */
static int info_call(dlock_client *cl, const char *name, redisReply **out, rd_info *f)
{
    rd_key key;
    rcmd c;
    rd_name_cmd(&c, &rc_of(cl)->cf, name, key, "info");
    return rd_info_call(cl, name, key, &c, false, out, f);
}

int rd_inspect_with(dlock_client *cl, const char *name, const char *key, const rcmd *c,
                    bool keyed, dlock_info *info)
{
    redisReply *r;
    rd_info f;
    int x = rd_info_call(cl, name, key, c, keyed, &r, &f);
    if (x)
        return x;
    bool owner = f.owner[0] != '\0';
    info->held = owner || f.readers > 0 || f.permits > 0;
    info->holders = owner ? 1 : (int)(f.readers > 0 ? f.readers : f.permits);
    info->waiters = (int)(f.queued + f.nonfair);
    info->token = (uint64_t)f.last_token;
    if (owner) {
        snprintf(info->holder, sizeof info->holder, "%s", f.holder);
        info->held_ms = f.since > 0 ? f.now - f.since : -1; /* 0: a peer's, unknown */
        info->lease_ms = f.pttl;
    }
    freeReplyObject(r);
    return 0;
}

static int redis_inspect(dlock_client *cl, const char *name, dlock_info *info)
{
    rd_key key;
    rcmd c;
    rd_name_cmd(&c, &rc_of(cl)->cf, name, key, "info");
    return rd_inspect_with(cl, name, key, &c, false, info);
}

int rd_break_with(dlock_client *cl, const char *name, const char *key, const rcmd *c, bool keyed,
                  dlock_info *info)
{
    rclient *rc = rc_of(cl);
    redisReply *r;
    char err[256];
    /* Idempotent: breaking twice breaks nothing more. */
    rcall how = {.timeout_ms = rc->cf.op_timeout_ms, .cancel_fd = -1, .retry = true};
    int x = rd_run(rc, key, c, 1, &r, &how, err, sizeof err);
    if (x != RD_OK)
        return dl_client_err(cl, x == RD_EPROTO ? DLOCK_EPROTO : DLOCK_EUNREACHABLE,
                             "break \"%s\": %s (%s)", name, err, cl->url->redacted);
    int broken = rd_break_reply(r, info);
    if (broken < 0) {
        int e;
        if (!(e = rd_alien(cl, NULL, name, key, keyed, r)))
            e = rd_client_bad_reply(cl, "break", name,
                                    "an array of {count, holder, token} from the lock script", r);
        freeReplyObject(r);
        return e;
    }
    freeReplyObject(r);
    if (broken == 0)
        info->held = info->holders = 0; /* the core says nothing was held */
    return 0;
}

static int redis_break(dlock_client *cl, const char *name, dlock_info *info)
{
    rd_key key;
    rcmd c;
    rd_name_cmd(&c, &rc_of(cl)->cf, name, key, "brk");
    return rd_break_with(cl, name, key, &c, false, info);
}

static int redis_set_value(dlock_lock *l, const char *value)
{
    rclient *rc = rc_of(l->c);
    rlock *rl = l->bstate;
    rcmd c;
    rd_script_cmd(&c, &rc->cf, rl->key, "setval");
    rcmd_add(&c, l->owner);
    rcmd_add(&c, value);
    return rd_owned_call(l, rl->key, &c, "publishing the leader value", " is no longer held");
}

static int redis_get_value(dlock_client *cl, const char *name, char *buf, size_t len)
{
    redisReply *r;
    rd_info f;
    int x = info_call(cl, name, &r, &f);
    if (x)
        return x;
    bool owner = f.owner[0] != '\0';
    if (owner)
        snprintf(buf, len, "%s", f.value);
    freeReplyObject(r);
    return owner ? 0 : dl_client_err(cl, DLOCK_ENOENT, "no leader for \"%s\"", name);
}

/* SCAN on every master for the keys matching a pattern. */
typedef struct scan_ctx {
    dlock_client *cl;
    const char *pattern;
    int (*fn)(const char *key, size_t len, void *arg);
    void *arg;
    int stop;
} scan_ctx;

static int scan_node(rnode *node, void *arg)
{
    scan_ctx *sc = arg;
    rclient *rc = rc_of(sc->cl);
    char cursor[32] = "0";
    do {
        rconn *c;
        char err[256];
        if (!(c = rconn_get(node, &rc->cf, rc->cf.connect_timeout_ms, NULL, err, sizeof err)))
            return dl_client_err(sc->cl, DLOCK_EUNREACHABLE, "list: %s (%s)", err,
                                 sc->cl->url->redacted);
        rcmd cmd;
        rcmd_init(&cmd);
        rcmd_add(&cmd, "SCAN");
        rcmd_add(&cmd, cursor);
        rcmd_add(&cmd, "MATCH");
        rcmd_add(&cmd, sc->pattern);
        rcmd_add(&cmd, "COUNT");
        rcmd_add(&cmd, "1000");
        redisReply *r;
        if (rconn_call(c, &cmd, 1, &r, rc->cf.op_timeout_ms, -1, NULL, err, sizeof err) != RD_OK) {
            rconn_drop(c);
            return dl_client_err(sc->cl, DLOCK_EUNREACHABLE, "list: redis %s:%d: %s (%s)",
                                 node->host, node->port, err, sc->cl->url->redacted);
        }
        rconn_put(c);
        if (r->type != REDIS_REPLY_ARRAY || r->elements != 2 ||
            r->element[0]->type != REDIS_REPLY_STRING || r->element[0]->len >= sizeof cursor ||
            r->element[1]->type != REDIS_REPLY_ARRAY) {
            char got[160];
            rd_reply_desc(r, got, sizeof got);
            freeReplyObject(r);
            return dl_client_err(sc->cl, DLOCK_EPROTO,
                                 "list: redis %s:%d: expected an array of {cursor, keys} from "
                                 "SCAN, got %s",
                                 node->host, node->port, got);
        }
        snprintf(cursor, sizeof cursor, "%s", r->element[0]->str);
        redisReply *keys = r->element[1];
        for (size_t i = 0; i < keys->elements && !sc->stop; i++)
            if (keys->element[i]->type == REDIS_REPLY_STRING)
                sc->stop = sc->fn(keys->element[i]->str, keys->element[i]->len, sc->arg);
        freeReplyObject(r);
    } while (strcmp(cursor, "0") != 0 && !sc->stop);
    return 0;
}

int rd_scan(dlock_client *cl, const char *pattern,
            int (*fn)(const char *key, size_t len, void *arg), void *arg)
{
    rclient *rc = rc_of(cl);
    scan_ctx sc = {.cl = cl, .pattern = pattern, .fn = fn, .arg = arg};
    int x;
    if (rc->mode == MODE_CLUSTER)
        x = rd_cluster_each_master(rc->cluster, scan_node, &sc);
    else
        x = scan_node(&rc->master, &sc);
    return x ? x : sc.stop;
}

/* dlock list: the token keys, so a name is listed once it has been acquired. */
typedef struct list_ctx {
    dlock_list_fn fn;
    void *arg;
} list_ctx;

static int list_key(const char *k, size_t n, void *arg)
{
    list_ctx *lc = arg;
    char name[DL_NAME_MAX + 1];
    /* dlock:{TAG}:token */
    if (n >= 15 && rd_tag_name(k + 7, n - 7 - 7, name, sizeof name) == 0 &&
        dlock_name_valid(name, NULL, 0) == 0)
        return lc->fn(name, lc->arg);
    return 0;
}

static int redis_list(dlock_client *cl, const char *prefix, dlock_list_fn fn, void *arg)
{
    char pattern[2 * DL_NAME_MAX + 32];
    size_t p = 0;
    p += (size_t)snprintf(pattern, sizeof pattern, "dlock:{");
    for (const char *s = prefix ? prefix : ""; *s && p + 3 < sizeof pattern; s++) {
        if (strchr("*?[]\\", *s))
            pattern[p++] = '\\';
        pattern[p++] = *s == '}' ? RD_BRACE : *s; /* as in the keys (rd_name_key) */
    }
    snprintf(pattern + p, sizeof pattern - p, "*}:token");
    list_ctx lc = {.fn = fn, .arg = arg};
    return rd_scan(cl, pattern, list_key, &lc);
}

/* ---- clients and handles ------------------------------------------------- */

static void rclient_free(rclient *rc)
{
    if (!rc)
        return;
    rnode_destroy(&rc->master);
    for (size_t i = 0; i < rc->nsentinels; i++)
        rnode_destroy(&rc->sentinels[i]);
    free(rc->sentinels);
    if (rc->cluster)
        rd_cluster_free(rc->cluster);
    pthread_mutex_destroy(&rc->resolve_mu);
    free(rc->master_name);
    free(rc->key_template);
    rd_conf_free(&rc->cf);
    free(rc);
}

static int param_int(dlock_client *cl, const dl_url *u, const char *key, int def, int min,
                     int max, int *out)
{
    const char *v = dl_url_param(u, key);
    if (!v) {
        *out = def;
        return 0;
    }
    char *end;
    long x = strtol(v, &end, 10);
    if (!*v || *end || x < min || x > max)
        return dl_client_err(cl, DLOCK_EURL, "%s: parameter %s=%s is not a number in %d..%d",
                             u->redacted, key, v, min, max);
    *out = (int)x;
    return 0;
}

/* What is left of the open's budget, at most op_ms (at least 1 ms: a
 * request needs some time to be answered at all). */
static int open_ms_left(int64_t until, int op_ms)
{
    int left = dl_ms_left(until);
    if (left < 1)
        left = 1;
    return left < op_ms ? left : op_ms;
}

int rd_master_open(dlock_client *cl, const dl_url *u)
{
    int64_t open_until = dl_deadline_in(cl->opts.connect_timeout_ms);
    rclient *rc = calloc(1, sizeof *rc);
    if (!rc)
        return dl_client_err(cl, DLOCK_ENOMEM, "out of memory");
    pthread_mutex_init(&rc->resolve_mu, NULL);
    rnode_init(&rc->master, "", 0);
    rc->mode = strcmp(u->scheme, "redis+sentinel") == 0   ? MODE_SENTINEL
               : strcmp(u->scheme, "redis+cluster") == 0 ? MODE_CLUSTER
                                                          : MODE_SINGLE;
    int x = rd_conf_init(&rc->cf, u, &cl->opts);
    if (x) {
        rclient_free(rc);
        return dl_client_err(cl, x, "out of memory");
    }
    x = param_int(cl, u, "wait", 0, 0, 100, &rc->wait_replicas);
    if (!x)
        x = param_int(cl, u, "wait_timeout", 1000, 1, 600000, &rc->wait_timeout_ms);
    if (!x && rc->mode == MODE_SINGLE && u->path && *u->path)
        rc->cf.db = atoi(u->path);
    dl_self_desc(rc->self, sizeof rc->self);
    const char *tmpl = dl_url_param(u, "key");
    if (!x && tmpl)
        x = rd_keyed_open(cl, rc, tmpl);
    if (x) {
        rclient_free(rc);
        return x;
    }
    char err[300];
    if (rc->mode == MODE_SINGLE) {
        rnode_reset(&rc->master, u->hosts[0].host, u->hosts[0].port);
    } else if (rc->mode == MODE_SENTINEL) {
        rc->master_name = strdup(u->path);
        rc->sentinels = calloc(u->nhosts, sizeof *rc->sentinels);
        if (!rc->master_name || !rc->sentinels) {
            rclient_free(rc);
            return dl_client_err(cl, DLOCK_ENOMEM, "out of memory");
        }
        for (size_t i = 0; i < u->nhosts; i++)
            rnode_init(&rc->sentinels[i], u->hosts[i].host, u->hosts[i].port);
        rc->nsentinels = u->nhosts;
        if (sentinel_resolve(rc, NULL, err, sizeof err) != RD_OK) {
            rclient_free(rc);
            return dl_client_err(cl, DLOCK_EUNREACHABLE, "%s: %s", u->redacted, err);
        }
    } else {
        rc->cluster = rd_cluster_new(u->hosts, u->nhosts);
        if (!rc->cluster) {
            rclient_free(rc);
            return dl_client_err(cl, DLOCK_ENOMEM, "out of memory");
        }
        if (rd_cluster_refresh(rc->cluster, &rc->cf, NULL, err, sizeof err) != RD_OK) {
            rclient_free(rc);
            return dl_client_err(cl, DLOCK_EUNREACHABLE,
                                 "%s: no seed node answered CLUSTER SLOTS (%s)", u->redacted,
                                 err);
        }
    }
    /* Load the script now: it proves the server is there and the
     * credentials work, and gives us its SHA for every later call. */
    rnode *first = rc->mode == MODE_CLUSTER ? rd_cluster_node(rc->cluster, "dlock:{}:lock")
                                            : &rc->master;
    int fail = DLOCK_EUNREACHABLE;
    rconn *c = first ? rconn_get(first, &rc->cf, rc->cf.connect_timeout_ms, &fail, err,
                                 sizeof err)
                     : NULL;
    if (!first)
        snprintf(err, sizeof err, "no node serves slot of the probe key");
    /* Opening, handshake included, takes at most the connect timeout: a
     * caller that must be done by a deadline (dlock run -w) sets it. */
    int lr = c ? rd_load_script(c, &rc->cf, open_ms_left(open_until, rc->cf.op_timeout_ms), err,
                                sizeof err)
               : RD_EIO;
    if (lr != RD_OK) {
        /* A server that was reached but refused us is not "unreachable":
         * a bad database (EURL), credentials or rights (EPERM), or not a
         * Redis server (EPROTO). */
        if (c)
            fail = lr == RD_EPROTO       ? DLOCK_EPROTO
                   : strstr(err, "NOPERM") ? DLOCK_EPERM
                                           : DLOCK_EUNREACHABLE;
        rconn_drop(c);
        if (fail == DLOCK_EUNREACHABLE && rc->mode != MODE_SINGLE) {
            /* The sentinels or the cluster answered, the master they name
             * did not (refused, or reset the connection as it died): a
             * failover under way is the right URL at a bad moment. Open
             * without the probe: the first call finds the master then
             * (rd_run) and loads the code there, and an acquisition with
             * time left rides the failover out (redis_acquire). */
            cl->bstate = rc;
            return 0;
        }
        rclient_free(rc);
        return dl_client_err(cl, fail, "%s: %s", u->redacted, err);
    }
    rconn_put(c);
    cl->bstate = rc;
    return 0;
}

void rd_master_close(dlock_client *cl)
{
    rclient_free(rc_of(cl));
}

#endif /* DLOCK_HAVE_REDIS */

static const dl_scheme redis_schemes[] = {
    {"redis", "redis", 6379, false, DL_PATH_DB},
    {"redis+sentinel", "redis+sentinel", 26379, true, DL_PATH_MASTER},
    {"redis+cluster", "redis+cluster", 6379, true, DL_PATH_DB0},
    {NULL, NULL, 0, false, DL_PATH_NONE},
};

#ifdef DLOCK_HAVE_REDIS
static const dl_backend_ops redis_ops = {
    .client_open = rd_master_open,
    .client_close = rd_master_close,
    .lock_init = rd_lock_init,
    .lock_fini = rd_lock_fini,
    .acquire = redis_acquire,
    .release = redis_release,
    .renew = redis_renew,
    .renew_batch = redis_renew_batch,
    .abandon = redis_abandon,
    .inspect = redis_inspect,
    .break_lock = redis_break,
    .list = redis_list,
    .set_value = redis_set_value,
    .get_value = redis_get_value,
    .record_get = rd_record_get,
    .record_put = rd_record_put,
    .record_del = rd_record_del,
    .release_at = redis_release_at,
};
#define REDIS_OPS .ops = &redis_ops
#else
#define REDIS_OPS .missing = "this build has no hiredis (install libhiredis-dev and rebuild)"
#endif

const dl_backend dl_backend_redis = {
    .name = "redis",
    .schemes = redis_schemes,
    .params = "wait wait_timeout key",
    .caps = DLOCK_CAP_FENCING | DLOCK_CAP_FAIR | DLOCK_CAP_SHARED | DLOCK_CAP_SEMAPHORE |
            DLOCK_CAP_LEASE | DLOCK_CAP_NATIVE_BLOCKING | DLOCK_CAP_FENCING_WEAK |
            DLOCK_CAP_CLAIMS,
    .liveness = "lease (PEXPIRE) renewed every ttl/3; waiters hold short registrations. "
                "key=TEMPLATE: the SET NX PX layout of redis-py, node-redlock, redsync and "
                "tooz, with which it excludes; exclusive locks only (shared, semaphore, fair "
                "and leader values ENOTSUP); waiters poll, a dlock release wakes one",
    .fencing = "per-name INCR counter in the lock's slot; a failover or restart that loses "
               "writes can repeat tokens. key=TEMPLATE: the counter KEY/dlock-token beside "
               "the key orders dlock's holders only (peers take no token)",
    REDIS_OPS,
};
