/* SPDX-License-Identifier: MIT */
/*
 * redlock.c — `redlock://h1:p1,h2:p2,...`: Redlock over N independent Redis
 * masters (exclusive locks).
 *
 * Acquire sends the same request to all N masters at once (not one after
 * another) with a per-node timeout small next to the TTL, and succeeds when a
 * quorum (N/2+1) granted it and time is left:
 *
 *   validity = ttl - (last reply - first send) - drift,  drift = ttl/100 + 2 ms
 *
 * all on the monotonic clock, measured from *before* the first send. Failed
 * attempts are released on every node and retried after a random delay.
 * Renewal needs a quorum too and computes its validity the same way.
 *
 * Fencing: each node keeps a counter that its grant increments. The token
 * is the maximum over the granting quorum; when the quorum's values differ,
 * that maximum is written back to it before reporting success, so every
 * node of the quorum holds at least the token. Any later quorum overlaps
 * this one in at least one node, whose next increment is larger — as long
 * as no node loses its data. A node restarted at once without persistence
 * forgets the lock and its counter: if it was one of a holder's bare
 * majority, another client can form a quorum (and get a lower token) while
 * the holder still holds. Redlock's answer is the "delayed restart" (stay
 * down for a ttl) or fsync'ed persistence; the backend is marked weak
 * fencing because neither is ours to enforce.
 */
#include "internal.h"

/* The operations need hiredis; the descriptor's facts at the end do not. */
#ifdef DLOCK_HAVE_REDIS
#include "redis_int.h"

#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* How much longer an open waits for the masters' answers to the lock
 * code's load once a quorum answered (see rl_client_open). */
#define RL_LOAD_SETTLE_MS 100

typedef struct rlclient {
    rconf cf;
    rnode *nodes;
    int n;
    int quorum;
    char self[300];
} rlclient;

static rlclient *rl_of(dlock_client *c)
{
    return c->bstate;
}

static int node_timeout(const rlclient *rc, int ttl_ms)
{
    int t = ttl_ms / 10;
    if (t < 10)
        t = 10;
    return t < rc->cf.op_timeout_ms ? t : rc->cf.op_timeout_ms;
}

/* The per-node timeout of an operation on l, cut to l's bound (the core's
 * op_deadline_ns: an acquisition's deadline plus its margin, or the moment
 * a renewed lease would be declared lost). */
static int bounded_node_timeout(const rlclient *rc, const dlock_lock *l)
{
    return rd_ms(l, node_timeout(rc, l->opts.ttl_ms));
}

/* The bounds of a renewal of leases of ttl_ms (l carries the core's bound:
 * the moment the lease, or the earliest of a batch's, would be declared
 * lost). Connecting waits at most the per-node timeout, as an acquisition's
 * does, into *connect_ms; the replies, returned, may take until the bound:
 * a renewal confirmed late is still worth its lease counted from before it
 * left, and a quorum's replies to hundreds of renewals take longer than a
 * tenth of a lease on a loaded machine. */
static int renewal_timeout(const rlclient *rc, const dlock_lock *l, int ttl_ms, int *connect_ms)
{
    *connect_ms = rd_ms(l, node_timeout(rc, ttl_ms));
    return rd_ms(l, rc->cf.op_timeout_ms);
}

/*
 * Whether the replies so far decide a quorum operation (arg: the quorum):
 * out[i*stride] is node i's reply. Error replies (a node that forgot the
 * script) count neither way.
 */
static bool decided_by(redisReply *const *out, int n, int stride, int quorum,
                       bool (*yes)(const redisReply *))
{
    int y = 0, no = 0;
    for (int i = 0; i < n; i++) {
        const redisReply *r = out[i * stride];
        if (!r || r->type == REDIS_REPLY_ERROR)
            continue;
        if (yes(r))
            y++;
        else
            no++;
    }
    return y >= quorum || no > n - quorum;
}

static bool is_grant(const redisReply *r) /* racq: {1, token} */
{
    return r->type == REDIS_REPLY_ARRAY && r->elements == 2 &&
           r->element[0]->type == REDIS_REPLY_INTEGER && r->element[0]->integer == 1;
}

static bool is_one(const redisReply *r)
{
    return r->type == REDIS_REPLY_INTEGER && r->integer == 1;
}

static bool is_reply(const redisReply *r)
{
    (void)r;
    return true;
}

static bool grant_decided(redisReply *const *out, int n, int ncmd, void *quorum)
{
    (void)ncmd; /* one command */
    return decided_by(out, n, 1, *(int *)quorum, is_grant);
}

static bool yes_decided(redisReply *const *out, int n, int ncmd, void *quorum)
{
    (void)ncmd;
    return decided_by(out, n, 1, *(int *)quorum, is_one);
}

static bool quorum_answered(redisReply *const *out, int n, int ncmd, void *quorum)
{
    (void)ncmd;
    return decided_by(out, n, 1, *(int *)quorum, is_reply);
}

/* A quorum answered a load of the lock code, whatever they said: an error
 * too ("already exists", the usual answer once the code is there, or a
 * server without functions). The others then get RL_LOAD_SETTLE_MS more
 * (see rl_client_open). */
static bool load_answered(redisReply *const *out, int n, int ncmd, void *quorum)
{
    (void)ncmd;
    int answered = 0;
    for (int i = 0; i < n; i++)
        answered += out[i] != NULL;
    return answered >= *(int *)quorum;
}

/* A batch of renewals (ncmd of them) is decided when each one is. */
static bool all_renewals_decided(redisReply *const *out, int n, int ncmd, void *quorum)
{
    for (int j = 0; j < ncmd; j++)
        if (!decided_by(out + j, n, ncmd, *(int *)quorum, is_one))
            return false;
    return true;
}

/*
 * Run one script operation on every node in parallel, returning as soon as
 * enough (NULL: wait for all) says the replies decide it; the nodes still
 * answering keep their request (it is applied there all the same) and their
 * connection drops the late reply on its next use. Nodes that cannot be
 * reached, time out, or answer with an error other than a forgotten script
 * get out[i] == NULL. A node that forgot the script gets it again and a
 * second try. Everything (connects, loads, the second try) ends within
 * timeout_ms; with 0 the request is only written on the connections there
 * are (a give-back that need not be waited for). why (may be NULL) gets the
 * last reason a node failed, for messages. on_all_within: connecting waits
 * at most connect_ms of timeout_ms.
 */
static void on_all_within(rlclient *rc, const rcmd *cmd, redisReply **out, int connect_ms,
                          int timeout_ms, rd_enough_fn *enough, char *why, size_t whylen)
{
    rconn *cs[rc->n];
    int st[rc->n];
    char err[256] = "";
    int64_t until = dl_deadline_in(timeout_ms);
    rconn_get_many(rc->nodes, rc->n, &rc->cf, cs, rc->n,
                   connect_ms < timeout_ms ? connect_ms : timeout_ms, err, sizeof err);
    if (why && err[0])
        snprintf(why, whylen, "%s", err);
    rconn_call_many(cs, rc->n, cmd, 1, out, st, dl_ms_left(until), enough, &rc->quorum);
    bool again = false;
    for (int i = 0; i < rc->n; i++) {
        if (st[i] == RD_OWED) {
            rconn_put(cs[i]);
            cs[i] = NULL;
            continue;
        }
        if (st[i] != RD_OK) {
            if (why && cs[i])
                snprintf(why, whylen, "redis %s:%d: no reply within %d ms", rc->nodes[i].host,
                         rc->nodes[i].port, timeout_ms);
            rconn_drop(cs[i]);
            cs[i] = NULL;
            continue;
        }
        if (rd_script_missing(out[i])) {
            freeReplyObject(out[i]);
            out[i] = NULL;
            if (rd_load_script(cs[i], &rc->cf, dl_ms_left(until), err, sizeof err) == RD_OK) {
                again = true;
                continue;
            }
            if (why)
                snprintf(why, whylen, "%s", err);
            rconn_drop(cs[i]);
            cs[i] = NULL;
            continue;
        }
        rconn_put(cs[i]);
        cs[i] = NULL;
    }
    if (again) {
        rcmd now = *cmd; /* in the form the loads left cf in */
        rd_script_retarget(&now, &rc->cf);
        redisReply *retry[rc->n];
        rconn_call_many(cs, rc->n, &now, 1, retry, st, dl_ms_left(until), NULL, NULL);
        for (int i = 0; i < rc->n; i++) {
            if (!cs[i])
                continue;
            if (st[i] == RD_OK) {
                out[i] = retry[i];
                rconn_put(cs[i]);
            } else {
                rconn_drop(cs[i]);
            }
        }
    }
}

static void on_all(rlclient *rc, const rcmd *cmd, redisReply **out, int timeout_ms,
                   rd_enough_fn *enough, char *why, size_t whylen)
{
    on_all_within(rc, cmd, out, timeout_ms, timeout_ms, enough, why, whylen);
}

/* Describe, into why, the first reply in r that is not what ok accepts. */
static void note_bad(rlclient *rc, redisReply **r, bool (*ok)(const redisReply *),
                     const char *expected, char *why, size_t whylen)
{
    for (int i = 0; i < rc->n; i++) {
        if (r[i] && !ok(r[i])) {
            char got[160];
            rd_reply_desc(r[i], got, sizeof got);
            snprintf(why, whylen, "redis %.64s:%d: expected %s, got %s", rc->nodes[i].host,
                     rc->nodes[i].port, expected, got);
            return;
        }
    }
}

static bool is_pair(const redisReply *r)
{
    long long a, b;
    return rd_pair_reply(r, &a, &b);
}

static bool is_int01(const redisReply *r)
{
    return r->type == REDIS_REPLY_INTEGER && (r->integer == 0 || r->integer == 1);
}

static void free_all(rlclient *rc, redisReply **r)
{
    for (int i = 0; i < rc->n; i++)
        if (r[i])
            freeReplyObject(r[i]);
}

static bool int_is(const redisReply *r, long long v)
{
    return r && r->type == REDIS_REPLY_INTEGER && r->integer == v;
}

/* Release on every node (owner-checked there), waiting up to timeout_ms for
 * a quorum of answers; returns how many had it. A node that has not answered
 * by then keeps the request and applies it when it gets to it; with 0 it is
 * only written (on the connections there are). */
static int release_all(dlock_lock *l, int timeout_ms)
{
    rlclient *rc = rl_of(l->c);
    rlock *ll = l->bstate;
    rcmd c;
    rd_script_cmd(&c, &rc->cf, ll->key, "rel");
    rcmd_add(&c, l->owner);
    rcmd_add(&c, "x");
    redisReply *r[rc->n];
    on_all(rc, &c, r, timeout_ms, quorum_answered, NULL, 0);
    int had = 0;
    for (int i = 0; i < rc->n; i++)
        had += int_is(r[i], 1);
    free_all(rc, r);
    return had;
}

/* Redlock's random retry delay, so that competing clients do not split the
 * masters again and again: jittered from 5-10 ms doubling up to 25-50 ms
 * (less if the deadline is near); 1 if canceled. */
static int backoff(dlock_lock *l, int64_t deadline, int64_t *step_ns)
{
    int64_t pause = dl_backoff_ns(step_ns, dl_ms_to_ns(50));
    if (deadline > 0 && deadline - dl_now_ns() < pause)
        pause = deadline - dl_now_ns();
    return dl_nap_ns(pause, dl_cancel_fd(l)) == DLOCK_ECANCELED;
}

static int rl_acquire(dlock_lock *l, int64_t deadline)
{
    rlclient *rc = rl_of(l->c);
    rlock *ll = l->bstate;
    int ttl = l->opts.ttl_ms;
    char nb[24];
    char why[300] = "";
    int answered_last = rc->n;
    /* Whether a try of this acquisition heard a quorum: then the lock was
     * seen held, and a last try that a loaded machine or a slow master
     * left short of answers (the per-node timeout is a tenth of the
     * lease) ends the wait as timed out, not as unreachable masters. */
    bool heard_quorum = false;
    int64_t step_ns = dl_ms_to_ns(10); /* (see backoff) */
    for (;;) {
        rcmd c;
        rd_script_cmd(&c, &rc->cf, ll->key, "racq");
        rcmd_add(&c, l->owner);
        rcmd_addll(&c, ttl, nb);
        rcmd_add(&c, rc->self);
        redisReply *r[rc->n];
        int64_t t0 = dl_now_ns();
        /* Each try within the acquisition's bound: a grant we could not
         * learn of in time is given back below all the same. */
        int tmo = bounded_node_timeout(rc, l);
        if (tmo == 0) { /* bound reached (after a try that ended at it) */
            char last[sizeof why + 16];
            snprintf(last, sizeof last, "%s%s", why[0] ? "last failure: " : "", why);
            if (answered_last >= rc->quorum || heard_quorum)
                return dl_wait_timed_out(l, last);
            return dl_lock_err(l, DLOCK_EUNREACHABLE,
                               "lock \"%s\": only %d of %d redlock masters answered the last try "
                               "(quorum %d)%s%s",
                               l->name, answered_last, rc->n, rc->quorum, why[0] ? "; " : "",
                               last);
        }
        on_all(rc, &c, r, tmo, grant_decided, why, sizeof why);
        note_bad(rc, r, is_pair, "an array of 2 integers from the lock script", why, sizeof why);
        int granted = 0, answered = 0;
        long long maxtok = 0, mintok = -1;
        bool got[rc->n];
        char toks[160] = ""; /* the granting masters' tokens, for a message */
        size_t tl = 0;
        for (int i = 0; i < rc->n; i++) {
            long long flag, tok;
            got[i] = false;
            if (!rd_pair_reply(r[i], &flag, &tok))
                continue;
            answered++;
            if (flag == 1) {
                if (tl < sizeof toks)
                    tl += (size_t)snprintf(toks + tl, sizeof toks - tl, "%s%d:%lld",
                                           tl ? " " : "", i, tok);
                got[i] = true;
                granted++;
                if (tok > maxtok)
                    maxtok = tok;
                if (mintok < 0 || tok < mintok)
                    mintok = tok;
            }
        }
        free_all(rc, r);
        int64_t validity = (int64_t)ttl * 1000000LL - (dl_now_ns() - t0) - dl_drift_ns(ttl);
        if (granted >= rc->quorum && validity > 0 && mintok == maxtok) {
            /* every granting node stores this token already (racq's INCR) */
            atomic_store(&l->token, (uint64_t)maxtok);
            l->lease_start_ns = t0 - dl_drift_ns(ttl);
            return 0;
        }
        bool published = true;
        if (granted >= rc->quorum && validity > 0) {
            /* Publish the max to the quorum we hold before anyone uses it. */
            long long token = maxtok;
            char tb[24];
            rd_script_cmd(&c, &rc->cf, ll->key, "rtok");
            rcmd_add(&c, l->owner);
            rcmd_addll(&c, token, tb);
            on_all(rc, &c, r, bounded_node_timeout(rc, l), yes_decided, why, sizeof why);
            /* Every node that stored it counts, not only those whose grant
             * we heard: a node whose grant came after we stopped waiting
             * holds our lock too (rtok checks the owner), and the token on
             * any quorum is what makes later tokens higher. (Counting only
             * the heard ones failed tries on a free lock under load: the
             * quorum of yes came from a late node and a heard one had not
             * answered yet.) */
            int stored = 0;
            for (int i = 0; i < rc->n; i++) {
                stored += int_is(r[i], 1);
                if (got[i] && !int_is(r[i], 1) && tl < sizeof toks)
                    tl += (size_t)snprintf(toks + tl, sizeof toks - tl, "; %d: %s", i,
                                           !r[i] ? "no reply"
                                           : r[i]->type == REDIS_REPLY_INTEGER ? "not ours"
                                                                               : "not stored");
            }
            free_all(rc, r);
            validity = (int64_t)ttl * 1000000LL - (dl_now_ns() - t0) - dl_drift_ns(ttl);
            if (stored >= rc->quorum && validity > 0) {
                atomic_store(&l->token, (uint64_t)token);
                l->lease_start_ns = t0 - dl_drift_ns(ttl);
                return 0;
            }
            published = false;
        }
        /* Give back what this try got. The caller learns nothing from the
         * answers, so wait no longer than for the try itself: with a
         * majority down, waiting for a quorum of answers would hold every
         * try (and every retry) for the whole op timeout. */
        release_all(l, bounded_node_timeout(rc, l));
        answered_last = answered;
        heard_quorum = heard_quorum || answered >= rc->quorum;
        if (answered < rc->quorum && deadline == 0)
            return dl_lock_err(l, DLOCK_EUNREACHABLE,
                               "lock \"%s\": only %d of %d redlock masters answered (quorum "
                               "%d)%s%s",
                               l->name, answered, rc->n, rc->quorum,
                               why[0] ? "; last failure: " : "", why);
        if (deadline == 0 && !published)
            return dl_lock_err(l, DLOCK_EBUSY,
                               "lock \"%s\": granted by %d of %d masters, but their tokens "
                               "differed (%s) and the highest did not reach a quorum within %d "
                               "ms: given back%s%s",
                               l->name, granted, rc->n, toks, bounded_node_timeout(rc, l),
                               why[0] ? "; last failure: " : "", why);
        if (deadline == 0 && granted >= rc->quorum && validity <= 0)
            return dl_lock_err(l, DLOCK_EBUSY,
                               "lock \"%s\": granted by %d of %d masters, but only after %lld "
                               "ms of its %d ms lease: given back",
                               l->name, granted, rc->n,
                               (long long)((dl_now_ns() - t0) / 1000000), ttl);
        if (deadline == 0)
            return dl_lock_err(l, DLOCK_EBUSY,
                               "lock \"%s\" is held by another owner (%d of %d masters granted)",
                               l->name, granted, rc->n);
        if (deadline > 0 && dl_ms_left(deadline) == 0) {
            if (!heard_quorum)
                return dl_lock_err(l, DLOCK_EUNREACHABLE,
                                   "lock \"%s\": timed out; only %d of %d redlock masters "
                                   "answered (quorum %d)%s%s",
                                   l->name, answered, rc->n, rc->quorum,
                                   why[0] ? "; last failure: " : "", why);
            if (answered < rc->quorum) {
                char last[sizeof why + 80];
                snprintf(last, sizeof last, "the last try heard only %d of %d masters%s%s",
                         answered, rc->n, why[0] ? ": " : "", why);
                return dl_wait_timed_out(l, last);
            }
            return dl_wait_timed_out(l, NULL);
        }
        if (backoff(l, deadline, &step_ns))
            return dl_lock_err(l, DLOCK_ECANCELED, "lock \"%s\": acquisition canceled", l->name);
        /* A new owner id for the next try: a slow node may apply this try's
         * release after the next try's grant (on another connection), and
         * must not take that grant away while we count it. */
        int e = dl_lock_new_owner(l);
        if (e)
            return e;
    }
}

static int rl_release(dlock_lock *l)
{
    if (release_all(l, rl_of(l->c)->cf.op_timeout_ms) > 0)
        return 0;
    return dl_lock_err(l, DLOCK_ELOST,
                       "lock \"%s\" had already expired on every master when released",
                       l->name);
}

/* Set the lease to ttl_ms on every master that still has it: a quorum must
 * say yes, in time for the lease to be worth holding on (a renewal), or at
 * all (handing: the release before a minimum, whose lease may be a few
 * milliseconds and is not held on to). */
static int rl_renew_for(dlock_lock *l, int64_t ttl_ms, bool handing)
{
    rlclient *rc = rl_of(l->c);
    int ttl = (int)ttl_ms;
    rcmd c;
    char nb[24];
    rd_renew_cmd(&c, &rc->cf, l, ttl, nb); /* kind "x": redlock locks are exclusive */
    redisReply *r[rc->n];
    int64_t t0 = dl_now_ns();
    /* Within the moment the lease will be declared lost (the core's bound):
     * nothing is sent once it has passed, and running out of time is a
     * transient failure, not a loss (the core decides that). A release
     * (handing) waits no longer than the per-node timeout. */
    int connect_ms;
    int tmo = renewal_timeout(rc, l, l->opts.ttl_ms, &connect_ms);
    if (handing)
        tmo = connect_ms;
    if (tmo == 0 || connect_ms == 0)
        return dl_lock_err(l, DLOCK_EUNREACHABLE,
                           "lock \"%s\": no time left to renew before the lease ends", l->name);
    char why[300] = "";
    on_all_within(rc, &c, r, connect_ms, tmo, yes_decided, why, sizeof why);
    note_bad(rc, r, is_int01, "an integer from the lock script", why, sizeof why);
    int yes = 0, no = 0;
    for (int i = 0; i < rc->n; i++) {
        yes += int_is(r[i], 1);
        no += int_is(r[i], 0);
    }
    free_all(rc, r);
    if (yes >= rc->quorum && handing)
        return 0;
    int64_t validity = (int64_t)ttl * 1000000LL - (dl_now_ns() - t0) - dl_drift_ns(ttl);
    if (yes >= rc->quorum && validity > 0) {
        l->lease_start_ns = t0 - dl_drift_ns(ttl);
        return 0;
    }
    if (no > rc->n - rc->quorum)
        return dl_lock_err(l, DLOCK_ELOST, "lock \"%s\": a quorum of masters no longer has it",
                           l->name);
    return dl_lock_err(l, DLOCK_EUNREACHABLE,
                       "lock \"%s\": renewal reached only %d of %d masters (quorum %d)%s%s",
                       l->name, yes, rc->n, rc->quorum, why[0] ? "; last failure: " : "", why);
}

static int rl_renew(dlock_lock *l)
{
    return rl_renew_for(l, l->opts.ttl_ms, false);
}

/* A quorum's leases set to end at the minimum keep every rival short of a
 * quorum until then: that is the release (the masters that did not answer
 * keep at most a ttl's lease, as after any release that missed them). */
static int rl_release_at(dlock_lock *l, int64_t ms)
{
    return rl_renew_for(l, ms, true);
}

/*
 * Renew many leases at once: every master gets every lock's renew call in
 * one pipelined write, all masters in parallel, and the call returns when
 * each lock's quorum is decided. Each lock's outcome and validity are
 * decided as rl_renew decides them, from the time before the batch left.
 */
static void rl_renew_batch(dlock_client *cl, dlock_lock *const *ls, int *rcs, size_t n)
{
    rlclient *rc = rl_of(cl);
    int nc = rc->n, m = (int)n;
    rconn *cs[nc];
    int st[nc];
    rcmd *cmds = malloc(n * sizeof *cmds);
    char(*nb)[24] = malloc(n * sizeof *nb);
    redisReply **out = calloc((size_t)nc * n, sizeof *out);
    if (!cmds || !nb || !out) {
        for (int j = 0; j < m; j++)
            rcs[j] = dl_lock_err(ls[j], DLOCK_ENOMEM, "lock \"%s\": out of memory to renew",
                                 ls[j]->name);
        goto done;
    }
    int min_ttl = ls[0]->opts.ttl_ms;
    for (int j = 0; j < m; j++) {
        rd_renew_cmd(&cmds[j], &rc->cf, ls[j], ls[j]->opts.ttl_ms, nb[j]);
        if (ls[j]->opts.ttl_ms < min_ttl)
            min_ttl = ls[j]->opts.ttl_ms;
    }
    int64_t t0 = dl_now_ns();
    int connect_ms; /* the batch shares one bound (ls[0]'s is the core's for all) */
    int tmo = renewal_timeout(rc, ls[0], min_ttl, &connect_ms);
    if (tmo == 0 || connect_ms == 0) {
        for (int j = 0; j < m; j++)
            rcs[j] = dl_lock_err(ls[j], DLOCK_EUNREACHABLE,
                                 "lock \"%s\": no time left to renew before the lease ends",
                                 ls[j]->name);
        goto done;
    }
    int64_t until = t0 + (int64_t)tmo * 1000000LL;
    char why[300] = "";
    rconn_get_many(rc->nodes, nc, &rc->cf, cs, nc, connect_ms, why, sizeof why);
    rconn_call_many(cs, nc, cmds, m, out, st, dl_ms_left(until), all_renewals_decided,
                    &rc->quorum);
    for (int i = 0; i < nc; i++) {
        if (!cs[i])
            continue;
        if (st[i] == RD_OWED) {
            rconn_put(cs[i]);
            continue;
        }
        if (st[i] != RD_OK) {
            snprintf(why, sizeof why, "redis %s:%d: no reply within %d ms", rc->nodes[i].host,
                     rc->nodes[i].port, tmo);
            rconn_drop(cs[i]);
            continue;
        }
        /* A master that forgot the script (restarted) gets it back for the
         * next renewal; this one is decided by the others. */
        bool missing = false;
        for (int j = 0; j < m && !missing; j++)
            missing = rd_script_missing(out[i * m + j]);
        char err[256];
        if (missing && rd_load_script(cs[i], &rc->cf, dl_ms_left(until), err, sizeof err) != RD_OK) {
            snprintf(why, sizeof why, "%s", err);
            rconn_drop(cs[i]);
        } else {
            rconn_put(cs[i]);
        }
    }
    int64_t elapsed = dl_now_ns() - t0;
    for (int j = 0; j < m; j++) {
        dlock_lock *l = ls[j];
        int ttl = l->opts.ttl_ms, yes = 0, no = 0;
        redisReply *col[nc];
        for (int i = 0; i < nc; i++) {
            col[i] = out[i * m + j];
            yes += int_is(col[i], 1);
            no += int_is(col[i], 0);
        }
        int64_t validity = (int64_t)ttl * 1000000LL - elapsed - dl_drift_ns(ttl);
        if (yes >= rc->quorum && validity > 0) {
            l->lease_start_ns = t0 - dl_drift_ns(ttl);
            rcs[j] = 0;
        } else if (no > nc - rc->quorum) {
            rcs[j] = dl_lock_err(l, DLOCK_ELOST, "lock \"%s\": a quorum of masters no longer has it",
                                 l->name);
        } else {
            char bad[300];
            snprintf(bad, sizeof bad, "%s", why);
            note_bad(rc, col, is_int01, "an integer from the lock script", bad, sizeof bad);
            rcs[j] = dl_lock_err(l, DLOCK_EUNREACHABLE,
                                 "lock \"%s\": renewal reached only %d of %d masters (quorum %d)%s%s",
                                 l->name, yes, nc, rc->quorum, bad[0] ? "; last failure: " : "",
                                 bad);
        }
    }
done:
    if (out)
        for (size_t k = 0; k < (size_t)nc * n; k++)
            if (out[k])
                freeReplyObject(out[k]);
    free(out);
    free(nb);
    free(cmds);
}

static void rl_abandon(dlock_lock *l)
{
    (void)release_all(l, bounded_node_timeout(rl_of(l->c), l));
}

/* A script operation on a name (not a held lock), on every master, until
 * enough (NULL: every master answered or timed out). */
static void on_all_name(rlclient *rc, const char *name, const char *op, redisReply **r,
                        rd_enough_fn *enough)
{
    rd_key key;
    rcmd c;
    rd_name_cmd(&c, &rc->cf, name, key, op);
    on_all(rc, &c, r, rc->cf.op_timeout_ms, enough, NULL, 0);
}

/* Whether the info replies so far decide what inspect says: a quorum of
 * them names one holder, or so few are left to come that no holder can
 * gather a quorum (a quorum answered: it holds the last token issued, any
 * two quorums meet). A stopped minority then costs no wait. */
static bool info_decided(redisReply *const *out, int n, int ncmd, void *quorum)
{
    (void)ncmd;
    int q = *(int *)quorum, answered = 0, best_votes = 0;
    rd_info f[n];
    const char *who[n];
    for (int i = 0; i < n; i++) {
        who[i] = out[i] && rd_info_reply(out[i], &f[i]) == 0 ? f[i].owner : NULL;
        answered += who[i] != NULL;
    }
    for (int i = 0; i < n; i++) {
        if (!who[i] || !who[i][0])
            continue;
        int votes = 0;
        for (int j = 0; j < n; j++)
            votes += who[j] && strcmp(who[j], who[i]) == 0;
        best_votes = votes > best_votes ? votes : best_votes;
    }
    return answered >= q && (best_votes >= q || best_votes + (n - answered) < q);
}

/*
 * The holder a quorum of masters agree on: who[i] is what master i shows
 * of its holder (NULL: no answer, "": free), tok[i] its token there.
 * Returns a master that shows it, or -1 when no quorum agrees; *token gets
 * the token most of those masters show (the quorum it was granted or
 * published on; a master that applied a grant of the same try late shows
 * a higher one of its own), ties to the lower.
 */
static int quorum_holder(const rlclient *rc, const char *const *who, const long long *tok,
                         uint64_t *token)
{
    int best = -1, best_votes = 0;
    for (int i = 0; i < rc->n; i++) {
        if (!who[i] || !who[i][0])
            continue;
        int votes = 0;
        for (int j = 0; j < rc->n; j++)
            votes += who[j] && strcmp(who[j], who[i]) == 0;
        if (votes > best_votes) {
            best_votes = votes;
            best = i;
        }
    }
    if (best_votes < rc->quorum)
        return -1;
    int tok_votes = 0;
    for (int i = 0; i < rc->n; i++) {
        if (!who[i] || strcmp(who[i], who[best]) != 0)
            continue;
        int v = 0;
        for (int j = 0; j < rc->n; j++)
            v += who[j] && strcmp(who[j], who[best]) == 0 && tok[j] == tok[i];
        if (v > tok_votes || (v == tok_votes && (uint64_t)tok[i] < *token)) {
            tok_votes = v;
            *token = (uint64_t)tok[i];
        }
    }
    return best;
}

static int rl_inspect(dlock_client *cl, const char *name, dlock_info *info)
{
    rlclient *rc = rl_of(cl);
    redisReply *r[rc->n];
    on_all_name(rc, name, "info", r, info_decided);
    int answered = 0;
    rd_info f[rc->n];
    const char *owner[rc->n];
    long long tok[rc->n];
    for (int i = 0; i < rc->n; i++) {
        owner[i] = NULL;
        if (r[i] && rd_info_reply(r[i], &f[i]) != 0) {
            freeReplyObject(r[i]);
            r[i] = NULL;
        }
        if (!r[i])
            continue;
        answered++;
        owner[i] = f[i].owner;
        tok[i] = f[i].token;
        if ((uint64_t)f[i].last_token > info->token)
            info->token = (uint64_t)f[i].last_token;
    }
    if (answered < rc->quorum) {
        free_all(rc, r);
        return dl_client_err(cl, DLOCK_EUNREACHABLE,
                             "inspect \"%s\": only %d of %d masters answered", name, answered,
                             rc->n);
    }
    int best = quorum_holder(rc, owner, tok, &info->token);
    info->held = best >= 0;
    info->holders = info->held ? 1 : 0;
    if (info->held) {
        snprintf(info->holder, sizeof info->holder, "%s", f[best].holder);
        info->held_ms = f[best].now - f[best].since;
        info->lease_ms = f[best].pttl;
    }
    free_all(rc, r);
    return 0;
}

/* The break clears every master; it broke a holder only if a quorum held it.
 * Keys on fewer (a release that a quorum has answered and the rest have not
 * applied yet, a try's partial grant) held nothing, and saying otherwise
 * would tell an operator that a free lock was taken from someone. */
static int rl_break(dlock_client *cl, const char *name, dlock_info *info)
{
    rlclient *rc = rl_of(cl);
    redisReply *r[rc->n];
    on_all_name(rc, name, "brk", r, NULL);
    int answered = 0;
    dlock_info each[rc->n];
    const char *holder[rc->n];
    long long tok[rc->n];
    for (int i = 0; i < rc->n; i++) {
        memset(&each[i], 0, sizeof each[i]);
        int b = rd_break_reply(r[i], &each[i]);
        answered += b >= 0;
        holder[i] = b > 0 ? each[i].holder : b == 0 ? "" : NULL;
        tok[i] = (long long)each[i].token;
    }
    free_all(rc, r);
    if (answered < rc->n)
        return dl_client_err(cl, DLOCK_EUNREACHABLE,
                             "break \"%s\": only %d of %d masters answered; the others may "
                             "still hold it (run break again when they are back)",
                             name, answered, rc->n);
    int best = quorum_holder(rc, holder, tok, &info->token);
    if (best < 0) {
        info->held = info->holders = 0; /* the core says nothing was held */
        return 0;
    }
    info->held = 1;
    info->holders = 1;
    snprintf(info->holder, sizeof info->holder, "%s", each[best].holder);
    return 0;
}

static void rlclient_free(rlclient *rc)
{
    for (int i = 0; i < rc->n; i++)
        rnode_destroy(&rc->nodes[i]);
    free(rc->nodes);
    rd_conf_free(&rc->cf);
    free(rc);
}

static int rl_client_open(dlock_client *cl, const dl_url *u)
{
    rlclient *rc = calloc(1, sizeof *rc);
    if (!rc)
        return dl_client_err(cl, DLOCK_ENOMEM, "out of memory");
    rc->nodes = calloc(u->nhosts, sizeof *rc->nodes);
    if (!rc->nodes || rd_conf_init(&rc->cf, u, &cl->opts) != 0) {
        rlclient_free(rc);
        return dl_client_err(cl, DLOCK_ENOMEM, "out of memory");
    }
    rc->n = (int)u->nhosts;
    rc->quorum = rc->n / 2 + 1;
    for (int i = 0; i < rc->n; i++)
        rnode_init(&rc->nodes[i], u->hosts[i].host, u->hosts[i].port);
    rc->cf.db = u->path && *u->path ? atoi(u->path) : 0;
    dl_self_desc(rc->self, sizeof rc->self);
    /* Load the lock code on every master connected once the first one
     * is, all at once, until a quorum answered and the others had
     * RL_LOAD_SETTLE_MS more: masters of different versions (one without
     * functions answers as fast as the others) settle on one form (see
     * rd_load_script) before the first lock call, and a master that hangs
     * holds up no open by more than that (it was the op timeout, 2 s by
     * default, for every dlock command). One that answers later loads the
     * code when it first says it lacks it. */
    char err[300] = "no master answered";
    rconn *cs[rc->n];
    rconn_get_many(rc->nodes, rc->n, &rc->cf, cs, 1, rc->cf.connect_timeout_ms, err,
                   sizeof err);
    int loaded = rd_load_script_many(cs, rc->n, &rc->cf, rc->cf.op_timeout_ms, load_answered,
                                     &rc->quorum, RL_LOAD_SETTLE_MS, err, sizeof err);
    for (int i = 0; i < rc->n; i++)
        if (cs[i])
            rconn_put(cs[i]);
    if (!loaded) {
        rlclient_free(rc);
        return dl_client_err(cl, strstr(err, "AUTH") ? DLOCK_EPERM : DLOCK_EUNREACHABLE, "%s: %s",
                             u->redacted, err);
    }
    cl->bstate = rc;
    return 0;
}

static void rl_client_close(dlock_client *cl)
{
    rlclient_free(rl_of(cl));
}

static int rl_lock_init(dlock_lock *l)
{
    if (l->opts.kind != DLOCK_EXCLUSIVE) {
        char have[256];
        return dl_lock_err(l, DLOCK_ENOTSUP,
                           "redlock offers exclusive locks only (%s have shared locks and "
                           "semaphores)",
                           dl_backends_with(DLOCK_CAP_SHARED | DLOCK_CAP_SEMAPHORE, have,
                                            sizeof have));
    }
    return rd_lock_init(l);
}

#endif /* DLOCK_HAVE_REDIS */

static const dl_scheme redlock_schemes[] = {
    {"redlock", "redlock", 6379, true, DL_PATH_DB},
    {NULL, NULL, 0, false, DL_PATH_NONE},
};

#ifdef DLOCK_HAVE_REDIS
static const dl_backend_ops rl_ops = {
    .client_open = rl_client_open,
    .client_close = rl_client_close,
    .lock_init = rl_lock_init,
    .lock_fini = rd_lock_fini,
    .acquire = rl_acquire,
    .release = rl_release,
    .renew = rl_renew,
    .renew_batch = rl_renew_batch,
    .abandon = rl_abandon,
    .inspect = rl_inspect,
    .break_lock = rl_break,
    .release_at = rl_release_at,
};
#define RL_OPS .ops = &rl_ops
#else
#define RL_OPS .missing = "this build has no hiredis (install libhiredis-dev and rebuild)"
#endif

const dl_backend dl_backend_redlock = {
    .name = "redlock",
    .schemes = redlock_schemes,
    .caps = DLOCK_CAP_FENCING | DLOCK_CAP_LEASE | DLOCK_CAP_FENCING_WEAK,
    .liveness = "lease on a quorum of independent masters, renewed with a quorum",
    .fencing = "max of the quorum's counters, written back when they differ; a master that "
               "restarts without its data within a ttl can break exclusion and repeat tokens "
               "(use persistence or delayed restarts)",
    .no_claims = "a record on several independent masters has no single truth to read "
                 "back (use redis:// or redis+sentinel:// for claims)",
    RL_OPS,
};
