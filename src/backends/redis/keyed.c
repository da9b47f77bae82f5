/* SPDX-License-Identifier: MIT */
/*
 * keyed.c — `redis://...?key=TEMPLATE` (and the same on redis+sentinel and
 * redis+cluster): locks in the layout of the SET NX family, redis-py's
 * Lock, node-redlock, redsync, bsm/redislock and tooz, so that dlock and
 * those clients exclude each other on one key.
 *
 * The lock of NAME is the string key the template makes of it, taken with
 * SET NX PX by whoever finds it missing, renewed (PEXPIRE) and deleted only
 * by the client whose value it holds; the peers compare the value with
 * their own token and never read anyone else's. dlock's value is the same
 * holder string as in its own layout (owner id, token, since, holder), as
 * opaque and unique to a peer as its random tokens. Every operation is one
 * call of lock.lua's key= operations (kacq, krel, krenew, kabort, kinfo,
 * kbrk) on the key and three keys dlock keeps beside it (rd_beside_key):
 * the fencing counter, the dlock waiters and their wake-up channel.
 *
 * Peers publish nothing when they release, so a waiter polls with jittered
 * backoff (5 ms doubling to 50 ms, as Redlock retries), reading meanwhile
 * a connection subscribed to KEY/dlock-wake, where a dlock release
 * publishes: dlock waiters wake at once. (Not BLPOP: a blocked command's
 * timeout is only as precise as the server's event loop, 100 ms at hz 10,
 * and the peers' releases are only seen by the timeouts.) Exclusive locks
 * only; tokens order dlock's holders only (a peer takes none).
 */
#include "internal.h"

#ifdef DLOCK_HAVE_REDIS
#include "redis_master.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define WAIT_LEASE_MS 3000 /* a waiter that does not look in this long is gone */
#define POLL_FIRST_MS 5    /* the first pause of a waiter; doubles ... */
#define POLL_MAX_MS 50     /* ... to this */

/* The four keys of a lock: itself, then its counter, waiters, wake-ups,
 * in one allocation of their size (a client may hold many locks). */
enum { K_LOCK, K_TOKEN, K_WAIT, K_WAKE, K_N };
#define K_MAX (RD_TEMPLATE_MAX + DL_NAME_MAX + 32)
typedef struct kkeys {
    char *key[K_N];
    char buf[];
} kkeys;

/* The keys of name under the client's template (free them), or NULL with
 * the error code in *e and a one-line reason in err. */
static kkeys *keys_new(const rclient *rc, const char *name, int *e, char *err, size_t errlen)
{
    static const char *const what[K_N] = {"", "token", "wait", "wake"};
    char tmp[K_N][K_MAX];
    size_t len[K_N], total = 0;
    *e = DLOCK_ENAME;
    snprintf(err, errlen, "name too long for a key");
    if (rd_template_key(rc->key_template, name, tmp[K_LOCK], K_MAX) != 0)
        return NULL;
    for (int i = K_TOKEN; i < K_N; i++)
        if (!rd_beside_key(tmp[K_LOCK], what[i], tmp[i], K_MAX))
            return NULL;
    for (int i = 0; i < K_N; i++)
        total += (len[i] = strlen(tmp[i]) + 1);
    kkeys *k = malloc(sizeof *k + total);
    if (!k) {
        *e = DLOCK_ENOMEM;
        snprintf(err, errlen, "out of memory");
        return NULL;
    }
    char *p = k->buf;
    for (int i = 0; i < K_N; i++) {
        k->key[i] = memcpy(p, tmp[i], len[i]);
        p += len[i];
    }
    return k;
}

static void kcmd(rcmd *c, const rclient *rc, const kkeys *k, const char *op)
{
    const char *keys[K_N] = {k->key[K_LOCK], k->key[K_TOKEN], k->key[K_WAIT], k->key[K_WAKE]};
    rd_script_keys_cmd(c, &rc->cf, K_N, keys, op);
}

static int k_lock_init(dlock_lock *l)
{
    rclient *rc = rc_of(l->c);
    if (l->opts.kind != DLOCK_EXCLUSIVE)
        return dl_lock_err(l, DLOCK_ENOTSUP,
                           "lock \"%s\": key= locks are exclusive only (a SET NX key has one "
                           "holder; the peers have no shared or counting form of it)",
                           l->name);
    if (l->opts.fair == 1)
        return dl_lock_err(l, DLOCK_ENOTSUP,
                           "lock \"%s\": key= locks have no FIFO order (the peers poll, so "
                           "nobody can keep a place in a queue)",
                           l->name);
    char err[64];
    int e;
    kkeys *k = keys_new(rc, l->name, &e, err, sizeof err);
    if (!k)
        return dl_lock_err(l, e, "lock \"%s\": %s", l->name, err);
    l->bstate = k;
    return 0;
}

static void k_lock_fini(dlock_lock *l)
{
    free(l->bstate);
}

/* "op OWNER" on l's keys, within l's bound (safe to repeat: the script
 * checks the owner). */
static int owner_op(dlock_lock *l, const char *op, redisReply **r, char *err, size_t errlen)
{
    rclient *rc = rc_of(l->c);
    kkeys *k = l->bstate;
    rcmd c;
    kcmd(&c, rc, k, op);
    rcmd_add(&c, l->owner);
    rcall how = {.l = l, .timeout_ms = rc->cf.op_timeout_ms, .cancel_fd = -1, .retry = true};
    return rd_run(rc, k->key[K_LOCK], &c, 1, r, &how, err, errlen);
}

/* Give up waiting: leave the waiters, and give back a grant whose reply
 * was lost. Within the acquisition's bound; what is left lapses by itself
 * (the registration within its wait lease, a grant within its ttl). */
static void abort_wait(dlock_lock *l)
{
    redisReply *r;
    char err[256];
    if (owner_op(l, "kabort", &r, err, sizeof err) == RD_OK)
        freeReplyObject(r);
}

static void renew_cmd(rcmd *c, dlock_lock *l, int64_t ttl_ms, char nb[24])
{
    kcmd(c, rc_of(l->c), l->bstate, "krenew");
    rcmd_add(c, l->owner);
    rcmd_addll(c, ttl_ms, nb);
}

/* A connection of its own to the master of l's key, subscribed to the
 * wake-ups of l; NULL (and why in err) if none could be had within l's
 * bound: the waiter then only polls. */
static rconn *subscribe(rclient *rc, dlock_lock *l, const kkeys *k, char *err, size_t errlen)
{
    rnode *node = rd_node_for(rc, k->key[K_LOCK]);
    rconn *c = node ? rconn_get(node, &rc->cf, rd_ms(l, rc->cf.connect_timeout_ms), NULL, err,
                                errlen)
                    : NULL;
    if (!c)
        return NULL;
    rcmd cmd;
    rcmd_init(&cmd);
    rcmd_add(&cmd, "SUBSCRIBE");
    rcmd_add(&cmd, k->key[K_WAKE]);
    redisReply *r;
    int ms = rd_ms(l, rc->cf.op_timeout_ms);
    if (ms == 0 || rconn_call(c, &cmd, 1, &r, ms, -1, NULL, err, errlen) != RD_OK) {
        rconn_drop(c);
        return NULL;
    }
    bool ok = r->type == REDIS_REPLY_ARRAY && r->elements == 3; /* subscribe, channel, 1 */
    freeReplyObject(r);
    if (!ok) {
        rconn_drop(c);
        return NULL;
    }
    return c;
}

static int k_release(dlock_lock *l)
{
    redisReply *r;
    char err[256];
    int x = owner_op(l, "krel", &r, err, sizeof err);
    return rd_release_result(l, x, r, err);
}

static int k_acquire(dlock_lock *l, int64_t deadline)
{
    rclient *rc = rc_of(l->c);
    kkeys *k = l->bstate;
    long long wl = deadline == 0 ? 0 : WAIT_LEASE_MS;
    int64_t step_ns = dl_ms_to_ns(POLL_FIRST_MS);
    rcmd undo; /* a try whose reply does not come in time is undone */
    kcmd(&undo, rc, k, "kabort");
    rcmd_add(&undo, l->owner);
    int result;
    rconn *sub = NULL; /* subscribed to the wake-ups, once waiting */
    for (bool again = false;; again = true) {
        rcmd c;
        char nb[2][24];
        kcmd(&c, rc, k, "kacq");
        rcmd_add(&c, l->owner);
        rcmd_addll(&c, l->opts.ttl_ms, nb[0]);
        rcmd_add(&c, rc->self);
        rcmd_addll(&c, wl, nb[1]);
        if (again)
            rcmd_add(&c, "1"); /* drop the registration if granted */
        redisReply *r;
        char err[256];
        int64_t sent;
        rcall how = {.l = l,
                     .timeout_ms = rc->cf.op_timeout_ms,
                     .cancel_fd = -1,
                     .sent_ns = &sent,
                     .undo = &undo};
        int x = rd_run(rc, k->key[K_LOCK], &c, 1, &r, &how, err, sizeof err);
        if (x != RD_OK) {
            result = rd_call_failed(l, again ? "waiting" : "acquire", x, err);
            break;
        }
        long long granted, pttl;
        if (!rd_pair_reply(r, &granted, &pttl)) {
            if (!(result = rd_alien(NULL, l, l->name, k->key[K_LOCK], true, r)))
                result = rd_bad_reply(l, again ? "waiting" : "acquire",
                                      "an array of 2 integers from the lock script", r);
            freeReplyObject(r);
            break;
        }
        freeReplyObject(r);
        if (granted) {
            atomic_store(&l->token, (uint64_t)pttl);
            l->lease_start_ns = sent; /* granted by this very call */
            result = 0;
            break;
        }
        if (deadline == 0) {
            result = dl_lock_err(l, DLOCK_EBUSY, "lock \"%s\" is held by another owner", l->name);
            break;
        }
        int left = dl_ms_left(deadline);
        if (deadline > 0 && left == 0) {
            result = dl_wait_timed_out(l, NULL);
            break;
        }
        /* Poll, looking again at the latest when the holder's lease ends,
         * subscribed meanwhile to KEY/dlock-wake, where a dlock release
         * publishes: the first time, subscribe and look again at once (a
         * release may have come in between). */
        if (!sub) {
            sub = subscribe(rc, l, k, err, sizeof err);
            if (sub)
                continue;
        }
        int64_t pause_ns = dl_backoff_ns(&step_ns, dl_ms_to_ns(POLL_MAX_MS));
        if (pttl >= 0 && dl_ms_to_ns(pttl + 1) < pause_ns)
            pause_ns = dl_ms_to_ns(pttl + 1);
        if (deadline > 0 && dl_ms_to_ns(left) < pause_ns)
            pause_ns = dl_ms_to_ns(left);
        if (!sub) { /* none to be had: plain polling */
            if (dl_nap_ns(pause_ns, dl_cancel_fd(l)) == DLOCK_ECANCELED) {
                result = dl_lock_err(l, DLOCK_ECANCELED, "lock \"%s\": acquisition canceled",
                                     l->name);
                break;
            }
            continue;
        }
        x = rconn_read(sub, &r, (int)((pause_ns + 999999) / 1000000), dl_cancel_fd(l), err,
                       sizeof err);
        if (x == RD_CANCELED) {
            result = dl_lock_err(l, DLOCK_ECANCELED, "lock \"%s\": acquisition canceled", l->name);
            break;
        }
        if (x != RD_OK) { /* subscribe again on the next turn */
            rconn_drop(sub);
            sub = NULL;
            continue;
        }
        if (r)
            freeReplyObject(r); /* a wake-up: try again */
    }
    if (sub)
        rconn_drop(sub); /* subscribed: never back to the pool */
    if (result == 0) {
        if (rc->wait_replicas == 0)
            return 0;
        rcmd renew;
        char nb[24];
        renew_cmd(&renew, l, l->opts.ttl_ms, nb);
        result = rd_confirm_replicated(l, k->key[K_LOCK], &renew);
        if (result)
            (void)k_release(l);
        return result;
    }
    if (deadline != 0)
        abort_wait(l);
    /* A request cut short by the acquisition's bound after its deadline
     * passed means the wait ran out, not that the server is gone. */
    if (dl_deadline_cut(l, result, deadline))
        result = dl_wait_timed_out_after(l);
    return result;
}

static int k_renew_for(dlock_lock *l, int64_t ttl_ms)
{
    kkeys *k = l->bstate;
    rcmd c;
    char nb[24];
    renew_cmd(&c, l, ttl_ms, nb);
    return rd_owned_call(l, k->key[K_LOCK], &c, "renew", ": lease expired or taken over");
}

static int k_renew(dlock_lock *l)
{
    return k_renew_for(l, l->opts.ttl_ms);
}

/* As redis.c's: the key's PX, set to ms, is the release (peers and dlock
 * waiters poll for a key that expires). */
static int k_release_at(dlock_lock *l, int64_t ms)
{
    return k_renew_for(l, ms);
}

static void k_abandon(dlock_lock *l)
{
    (void)k_release(l); /* best effort: the lease ends by itself anyway */
}

/* inspect and break: the script call op on the keys of name. */
static int on_name(dlock_client *cl, const char *name, const char *what, const char *op,
                   dlock_info *info)
{
    rclient *rc = rc_of(cl);
    char err[64];
    int e;
    kkeys *k = keys_new(rc, name, &e, err, sizeof err);
    if (!k)
        return dl_client_err(cl, e, "%s \"%s\": %s", what, name, err);
    rcmd c;
    kcmd(&c, rc, k, op);
    if (strcmp(op, "kinfo") == 0)
        e = rd_inspect_with(cl, name, k->key[K_LOCK], &c, true, info);
    else
        e = rd_break_with(cl, name, k->key[K_LOCK], &c, true, info);
    free(k);
    return e;
}

static int k_inspect(dlock_client *cl, const char *name, dlock_info *info)
{
    return on_name(cl, name, "inspect", "kinfo", info);
}

static int k_break(dlock_client *cl, const char *name, dlock_info *info)
{
    return on_name(cl, name, "break", "kbrk", info);
}

static int k_set_value(dlock_lock *l, const char *value)
{
    (void)value;
    return dl_lock_err(l, DLOCK_ENOTSUP,
                       "lock \"%s\": key= locks have no leader values (the peers keep only "
                       "their token in the key)",
                       l->name);
}

static int k_get_value(dlock_client *cl, const char *name, char *buf, size_t len)
{
    (void)buf, (void)len;
    return dl_client_err(cl, DLOCK_ENOTSUP,
                         "\"%s\": key= locks have no leader values (the peers keep only their "
                         "token in the key)",
                         name);
}

/*
 * dlock list: the names dlock has acquired (their counters stay, as in
 * dlock's own layout) and then those held now by anyone (the keys under
 * the template), each once.
 */
typedef struct klist {
    const rclient *rc;
    dlock_list_fn fn;
    void *arg;
    char **seen; /* the names of the first scan, sorted for the second */
    size_t n, cap;
    bool nomem;
} klist;

/* The name key (len bytes) is the lock of under t; -1 if none (another
 * key, or one beside a lock). */
static int name_of(const char *t, const char *key, size_t len, char *name, size_t nlen)
{
    return rd_template_name(t, key, len, name, nlen) == 0 && dlock_name_valid(name, NULL, 0) == 0
               ? 0
               : -1;
}

static int by_name(const void *a, const void *b)
{
    return strcmp(*(char *const *)a, *(char *const *)b);
}

/* The name whose counter key is key (klen bytes), into name; -1 if none. */
static int counter_name(const rclient *rc, const char *key, size_t klen, char *name, size_t len)
{
    size_t sl = strlen(RD_BESIDE "token");
    char lock[K_MAX], again[K_MAX];
    if (klen <= sl || klen - sl >= sizeof lock || memcmp(key + klen - sl, RD_BESIDE "token", sl))
        return -1;
    size_t n = klen - sl;
    memcpy(lock, key, n);
    lock[n] = '\0';
    /* KEY/dlock-token, {KEY}/dlock-token or {S}KEY/dlock-token: whichever
     * is the counter dlock makes for that KEY. */
    const char *close = lock[0] == '{' ? strchr(lock, '}') : NULL;
    for (int form = 0; form < 3; form++) {
        const char *k = lock;
        size_t kl = n;
        if (form > 0 && !close)
            break;
        if (form == 1 && (size_t)(close - lock) == n - 1) {
            k = lock + 1;
            kl = n - 2;
        } else if (form == 2) {
            k = close + 1;
            kl = n - (size_t)(close + 1 - lock);
        } else if (form == 1) {
            continue;
        }
        char cand[K_MAX];
        memcpy(cand, k, kl);
        cand[kl] = '\0';
        if (rd_beside_key(cand, "token", again, sizeof again) && strlen(again) == klen &&
            memcmp(again, key, klen) == 0 &&
            name_of(rc->key_template, cand, kl, name, len) == 0)
            return 0;
    }
    return -1;
}

static int list_counter(const char *key, size_t len, void *arg)
{
    klist *kl = arg;
    char name[DL_NAME_MAX + 1];
    if (counter_name(kl->rc, key, len, name, sizeof name) != 0)
        return 0;
    if (kl->n == kl->cap) {
        size_t cap = kl->cap ? 2 * kl->cap : 64;
        char **v = realloc(kl->seen, cap * sizeof *v);
        if (!v) {
            kl->nomem = true;
            return DLOCK_ENOMEM;
        }
        kl->seen = v;
        kl->cap = cap;
    }
    if (!(kl->seen[kl->n] = strdup(name))) {
        kl->nomem = true;
        return DLOCK_ENOMEM;
    }
    kl->n++;
    return kl->fn(name, kl->arg);
}

static int list_held(const char *key, size_t len, void *arg)
{
    klist *kl = arg;
    char name[DL_NAME_MAX + 1];
    const char *p = name;
    if (name_of(kl->rc->key_template, key, len, name, sizeof name) != 0 ||
        (kl->n && bsearch(&p, kl->seen, kl->n, sizeof *kl->seen, by_name)))
        return 0;
    return kl->fn(name, kl->arg);
}

static int k_list(dlock_client *cl, const char *prefix, dlock_list_fn fn, void *arg)
{
    rclient *rc = rc_of(cl);
    char pattern[2 * (RD_TEMPLATE_MAX + DL_NAME_MAX) + 32];
    klist kl = {.rc = rc, .fn = fn, .arg = arg};
    /* KEY/dlock-token or {KEY}/dlock-token: a '*' on either side of KEY. */
    pattern[0] = '*';
    rd_template_pattern(rc->key_template, prefix, pattern + 1, sizeof pattern - 16);
    strcat(pattern, "*" RD_BESIDE "token");
    int x = rd_scan(cl, pattern, list_counter, &kl);
    if (x == 0) {
        if (kl.n)
            qsort(kl.seen, kl.n, sizeof *kl.seen, by_name);
        rd_template_pattern(rc->key_template, prefix, pattern, sizeof pattern);
        x = rd_scan(cl, pattern, list_held, &kl);
    }
    for (size_t i = 0; i < kl.n; i++)
        free(kl.seen[i]);
    free(kl.seen);
    if (kl.nomem && x == DLOCK_ENOMEM)
        return dl_client_err(cl, DLOCK_ENOMEM, "list: out of memory");
    return x;
}

int rd_keyed_open(dlock_client *cl, rclient *rc, const char *tmpl)
{
    char err[400];
    if (rd_template_check(tmpl, err, sizeof err) != 0)
        return dl_client_err(cl, DLOCK_EURL, "%s: %s", cl->url->redacted, err);
    if (!(rc->key_template = strdup(tmpl)))
        return dl_client_err(cl, DLOCK_ENOMEM, "out of memory");
    cl->ops = &rd_keyed_ops;
    cl->caps = RD_KEYED_CAPS;
    return 0;
}

const dl_backend_ops rd_keyed_ops = {
    .client_open = rd_master_open,
    .client_close = rd_master_close,
    .lock_init = k_lock_init,
    .lock_fini = k_lock_fini,
    .acquire = k_acquire,
    .release = k_release,
    .renew = k_renew,
    .abandon = k_abandon,
    .inspect = k_inspect,
    .break_lock = k_break,
    .list = k_list,
    .set_value = k_set_value,
    .get_value = k_get_value,
    .record_get = rd_record_get,
    .record_put = rd_record_put,
    .record_del = rd_record_del,
    .release_at = k_release_at,
};

#endif /* DLOCK_HAVE_REDIS */
