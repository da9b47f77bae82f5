/* SPDX-License-Identifier: MIT */
/*
 * etcd.c — etcd v3: a lease per client, a key per waiter, a watch on
 * the predecessor.
 *
 * Layout: every acquisition creates one key bound to the client's lease
 *
 *     PREFIX/NAME/KIND-LEASE-OWNER     KIND: "x", "r" or "sN" (src/internal.h)
 *
 * whose value is "HOLDER\nVALUE" (a leader's value after the newline). The
 * keys of a name in create-revision order form its queue; the rule of who
 * holds is the core's (dl_queue_blocker). A waiter watches the deletion of
 * the one key whose going can let it in, and of its own key (a lease that
 * ran out, dlock break), from the revision of the read that queued it, so
 * nothing between the read and the watch is missed; after every wake-up it
 * reads the queue again up to its own key, which also proves its key still
 * exists (Jepsen's etcd 3.4.3 finding: a lock granted after the lease had
 * expired). The token is the key's create revision: it rises with every
 * write of the cluster, across leader changes.
 *
 * Liveness is the client's one lease, granted on first use and kept alive
 * by the client's thread at ttl/4 whatever the number of keys; a lock is
 * valid for the lease's TTL past the sending of the last keep-alive the
 * server answered, and the core's watchdog declares it lost at that
 * deadline on our own clock. Beside its locks each lease has a key
 * PREFIX/.clients/LEASE (lock names never start with '.'): the client's
 * thread watches it, so a revoked or expired lease (the key goes with it)
 * is reported at once, and dlock break touches it to make the holder look
 * at its keys. The same watch (one stream, made anew when a held key joins
 * it) covers every held key: one deleted or overwritten from outside is
 * that lock lost, at once.
 *
 * The transport is etcd's JSON gateway over HTTP/1.1 (conn.c; cJSON):
 * one keep-alive connection per request in flight, taken from a pool (a
 * request moves to the next endpoint when one fails, stalls past half its
 * time, or is not etcd; the client stays with the one that answered); a
 * waiter's watch is one streaming request (HTTP/1.1 cannot add watchers to
 * a stream whose request body is sent). Request bodies are built with
 * snprintf: every string in them is base64 or a decimal number, except the
 * credentials, which cJSON escapes.
 *
 * layout=etcdctl speaks the keys of etcdctl lock and Go's
 * concurrency.Mutex/Election instead: a name is their key prefix, a lock's
 * key NAME/<lease in hex> on the client's lease with an empty value (a
 * leader's value, as Election's), every key under NAME/ an exclusive entry
 * of the queue (as the peers see them), the waiter watching the deletion of
 * the key just before its own (their waitDeletes). A second lock of one
 * client on a name adds -OWNER to the key (the peers' own key is one per
 * lease: two Mutexes of one session share it). No shared kind, no
 * semaphore: the peers have neither. dlock's own layout, for its part,
 * refuses a name whose keys hold one it did not write (ec_foreign).
 */
#include "internal.h"
#include "support/support.h"

static const dl_scheme etcd_schemes[] = {
    {"etcd", "etcd", 2379, true, DL_PATH_NONE},
    {"etcds", "etcds", 2379, true, DL_PATH_NONE},
    {NULL, NULL, 0, false, DL_PATH_NONE},
};

/* The facts, the same whether the client libraries are built in or not. */
#define ETCD_CAPS                                                                            \
    (DLOCK_CAP_FENCING | DLOCK_CAP_FAIR | DLOCK_CAP_SHARED | DLOCK_CAP_SEMAPHORE |           \
     DLOCK_CAP_LEASE | DLOCK_CAP_NATIVE_BLOCKING | DLOCK_CAP_ELECTION | DLOCK_CAP_CLAIMS)
#define ETCD_LIVENESS                                                                        \
    "one lease per client, kept alive at ttl/4; linearizable; the holder is told on its own " \
    "clock before the lease can expire, at once when the lease is revoked or the key "       \
    "deleted; a paused holder learns only when it runs again (fencing catches it). "        \
    "layout=etcdctl: the same lease, the keys of etcdctl lock and elect and Go's "           \
    "concurrency.Mutex and Election (NAME/<lease hex>), which exclude with dlock's both "    \
    "ways; exclusive locks and elections only (shared, semaphore: ENOTSUP, the peers have "  \
    "neither, and would take a reader for a writer)"
#define ETCD_FENCING                                                                         \
    "create revision of the holder's key: rises with every write of the cluster, across "   \
    "leader changes. layout=etcdctl: the same, which orders etcdctl's holders with dlock's " \
    "(etcdctl's ETCD_LOCK_REV is the revision at which it got the lock: its key's create "   \
    "revision only when it did not wait)"
#define ETCD_PARAMS "ttl prefix cacert cert key layout"
/* layout=etcdctl: exclusive locks and elections only (see the top). */
#define ETCDCTL_CAPS                                                                         \
    (DLOCK_CAP_FENCING | DLOCK_CAP_FAIR | DLOCK_CAP_LEASE | DLOCK_CAP_NATIVE_BLOCKING |       \
     DLOCK_CAP_ELECTION)

#ifdef DLOCK_HAVE_ETCD
#include "ec_int.h"

#include <stddef.h>
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <unistd.h>

/*
 * libcurl, for TLS (etcds://) only, is loaded when the first such client
 * opens, not linked: linked, the thirty-odd libraries it pulls in made
 * every dlock process start 2.5 times slower, whatever its backend (`dlock
 * run` on file://: 2.4 ms to 6.1 ms per run); http:// needs none of it
 * (conn.c). The calls below go through this table.
 */
#define EC_LIBCURL "libcurl.so.4"
ec_curl_api ec_curl;

static char lc_error[300]; /* why loading failed, "" when it did not */

static void lc_load(void)
{
    static const dl_sym syms[] = {
#define EC_CURL_SYM(f) {"curl_" #f, offsetof(ec_curl_api, f)},
        EC_CURL_FUNCS(EC_CURL_SYM)
#undef EC_CURL_SYM
    };
    if (dl_load_library(EC_LIBCURL, "libcurl4", syms, sizeof syms / sizeof syms[0], &ec_curl,
                        lc_error, sizeof lc_error) != 0)
        return;
    CURLcode rc = curl_global_init(CURL_GLOBAL_DEFAULT);
    if (rc != CURLE_OK)
        snprintf(lc_error, sizeof lc_error, "libcurl failed to initialize: %s",
                 curl_easy_strerror(rc));
}

#define EC_DEFAULT_TTL_S 10
#define EC_SUSPECT_MS 100 /* closing: the revoke's wait after a request went unanswered */
/* A holder that waited writes its grant time into its key this long after
 * the grant (semaphores at once), unless it released first. */
#define EC_TOUCH_AFTER_MS 100

/* ---- locks ------------------------------------------------------------------------------ */

static int64_t req_until(dlock_lock *l)
{
    ecclient *ec = ec_of(l->c);
    return dl_deadline_in(dl_op_timeout_ms(l, ec->op_ms));
}

/* etcdctl: may el have its name's bare key NAME/<lease>? One lock of the
 * client at a time has it (the others add -OWNER). */
static bool bare_take(ecclient *ec, eclock *el)
{
    bool ok = true;
    pthread_mutex_lock(&ec->mu);
    for (size_t i = 0; i < ec->nbare && ok; i++)
        ok = strcmp(ec->bare[i], el->dir) != 0;
    char *d = ok ? strdup(el->dir) : NULL;
    char **b = d ? realloc(ec->bare, sizeof *b * (ec->nbare + 1)) : NULL;
    if (b) {
        ec->bare = b;
        b[ec->nbare++] = d;
        d = NULL;
    }
    pthread_mutex_unlock(&ec->mu);
    free(d);
    el->bare = b != NULL;
    return el->bare;
}

/* el's key is gone for sure: its bare key may serve another lock. (One
 * whose fate is unknown keeps it: the client's thread deletes that key
 * later without asking whose it is by then.) */
static void bare_drop(ecclient *ec, eclock *el)
{
    if (!el->bare)
        return;
    pthread_mutex_lock(&ec->mu);
    for (size_t i = 0; i < ec->nbare; i++)
        if (strcmp(ec->bare[i], el->dir) == 0) {
            free(ec->bare[i]);
            ec->bare[i] = ec->bare[--ec->nbare];
            break;
        }
    pthread_mutex_unlock(&ec->mu);
    el->bare = false;
}

/* A waiter gives up: delete its key now, or later when that fails. */
static void give_up(ecclient *ec, eclock *el, bool unknown)
{
    (void)unknown;
    if (!el->key[0]) {
        bare_drop(ec, el);
        return;
    }
    char err[200];
    int64_t until = dl_deadline_in(ec->op_ms < 1000 ? ec->op_ms : 1000);
    /* Within the caller's bound: a server that does not answer by then
     * has the key deleted by the client's thread. */
    if (el->l->op_deadline_ns > 0 && until > el->l->op_deadline_ns)
        until = el->l->op_deadline_ns;
    if (ec_delete_key(ec, el->key, 0, 0, until, NULL, err, sizeof err) != 0) {
        ec_orphan_add(ec, el->key);
        el->bare = false; /* (its name's bare key stays taken: see bare_drop) */
    } else {
        bare_drop(ec, el);
    }
    el->key[0] = '\0';
}

/* What a failed request of an acquisition returns: a lost lease is the
 * cluster's doing (unreachable); a server that did not answer by the
 * caller's deadline is that deadline passing (timed out), unless the
 * acquisition already found no leader or no member before (an outage run
 * out: unreachable, as on every backend; see dl_deadline_cut). */
static int acquire_rc(const dlock_lock *l, int rc, int64_t deadline)
{
    if (rc == DLOCK_ELOST)
        rc = DLOCK_EUNREACHABLE;
    if (dl_deadline_cut(l, rc, deadline))
        rc = DLOCK_ETIMEDOUT;
    return rc;
}

/* A waiter's state in its queue (dl_queue_acquire's ctx). */
typedef struct ec_waiting {
    dlock_lock *l;
    int64_t deadline;
    int cancel_fd;
    int64_t *retry_step_ns; /* dl_retry_transient's, shared with the queueing */
    ec_entry *q;            /* the queue up to our key, ascending; ours last */
    int n;
    int64_t rev;    /* the revision q was read at */
    int64_t ev_rev; /* the revision of the last wait's event */
    /* The store's revision when we learnt of the grant: of the read that
     * found us first, or of the event that let us in (etcdctl's
     * ETCD_LOCK_REV, Mutex's Header().Revision, is the same moment's). */
    int64_t grant_rev;
    bool fresh; /* q is the read that queued us */
} ec_waiting;

static int ec_wait_read(void *arg, const void **queue, size_t *stride, int *i)
{
    ec_waiting *z = arg;
    dlock_lock *l = z->l;
    ecclient *ec = ec_of(l->c);
    eclock *el = l->bstate;
    if (!z->fresh) {
        char err[400];
        int rc;
        free(z->q);
        z->q = NULL;
        do
            rc = ec_read_queue(ec, el, z->ev_rev, req_until(l), &z->q, &z->n, &z->rev, err,
                               sizeof err);
        while (rc && dl_lock_retry_transient(l, &rc, z->deadline, z->retry_step_ns));
        if (rc)
            return dl_lock_err(l, acquire_rc(l, rc, z->deadline),
                               "lock \"%s\": reading its queue: %s (%s)", l->name, err,
                               ec->redacted);
    }
    z->fresh = false;
    z->grant_rev = z->rev;
    int me = z->n - 1; /* ours is the last entry, or gone */
    *queue = z->q;
    *stride = sizeof *z->q;
    *i = me >= 0 && strcmp(z->q[me].key, el->key) == 0 ? me : -1;
    return 0;
}

/* Watch the one key whose going can let us in (any key of the name for the
 * first semaphore waiter; the predecessor's touch too for later ones), and
 * our own. */
static int ec_wait_on(void *arg, int b, bool *in)
{
    ec_waiting *z = arg;
    dlock_lock *l = z->l;
    ecclient *ec = ec_of(l->c);
    eclock *el = l->bstate;
    const ec_entry *q = z->q;
    int i = z->n - 1;
    bool any = b == DL_Q_ANY, puts = !any && q[i].pos.kind == 's';
    bool chain = !any && b == i - 1 && q[b].pos.kind == 'x' && q[i].pos.kind == 'x';
    wait_watch w;
    char err[400];
    int rc = ec_wait_change(ec, any ? el->dir : q[b].key, any ? 0 : q[b].rev, any, puts, chain,
                            el->key, z->rev,
                            z->deadline, l->op_deadline_ns, z->cancel_fd, &w, err, sizeof err);
    if (rc == DLOCK_ECANCELED || rc == DLOCK_ETIMEDOUT)
        return rc;
    if (rc)
        return dl_lock_err(l, rc, "lock \"%s\": watching its queue: %s (%s)", l->name, err,
                           ec->redacted);
    /* An exclusive waiter whose exclusive predecessor was first (the last
     * read found nothing before it, or it wrote its key once it held: see
     * the touch in etcd_acquire), and which saw only that key's deletion,
     * is first: keys before it only ever go, and its own key's deletion
     * would have come in the same stream first (a stream sends events in
     * revision order), or been found when the watches began
     * (changed_since). No read on the hand-over's path. */
    *in = chain && (el->pred_first || w.pred_held) && w.pred_gone && !w.other;
    z->ev_rev = w.ev_rev;
    if (*in)
        z->grant_rev = w.ev_rev;
    return 0;
}

static int etcd_acquire(dlock_lock *l, int64_t deadline)
{
    ecclient *ec = ec_of(l->c);
    eclock *el = l->bstate;
    char err[400];
    int64_t lease;
    uint64_t gen;
    bool make_ckey;
    el->key[0] = '\0';
    el->lost = false;
    int cancel_fd = deadline != 0 ? dl_cancel_fd(l) : -1;
    ec_entry *q = NULL;
    int n = 0, rc;
    int64_t retry_step_ns = 0;
    int64_t rev = 0;
    bool unknown = false, waited = false, regranted = false;
    const char *stage;
    /* Queue our key, on the client's lease. */
    for (;;) {
        stage = "no lease";
        rc = ec_lease_ensure(ec, req_until(l), &lease, &gen, &make_ckey, err, sizeof err);
        if (rc == 0) {
            stage = "queueing";
            char key[EC_KEY_MAX];
            if (!ec->etcdctl)
                snprintf(key, sizeof key, "%s%s-%016" PRIx64 "-%s", el->dir, el->kind,
                         (uint64_t)lease, l->owner);
            else if (el->bare || bare_take(ec, el)) /* (Mutex's key: %x of the lease) */
                snprintf(key, sizeof key, "%s%" PRIx64, el->dir, (uint64_t)lease);
            else
                snprintf(key, sizeof key, "%s%" PRIx64 "-%s", el->dir, (uint64_t)lease,
                         l->owner);
            if (unknown && strcmp(key, el->key) != 0) {
                ec_orphan_add(ec, el->key); /* an earlier try's, on a lease since gone */
                unknown = false;
            }
            snprintf(el->key, sizeof el->key, "%s", key);
            el->gen = gen;
            el->lease = lease;
            bool sent = false;
            rc = ec_enqueue(ec, l, el, lease, make_ckey, req_until(l), &q, &n, &rev, &sent, err,
                            sizeof err);
            unknown = unknown || sent;
        }
        if (rc == DLOCK_ELOST && !regranted) {
            /* The lease ended before we heard of it (a process stopped past
             * its TTL): grant a new one and queue there. */
            regranted = true;
            pthread_mutex_lock(&ec->mu);
            if (ec->gen == gen)
                ec->lease_gone = true;
            pthread_mutex_unlock(&ec->mu);
            continue;
        }
        if (rc == 0 || !dl_lock_retry_transient(l, &rc, deadline, &retry_step_ns))
            break;
    }
    if (rc) {
        if (rc == DLOCK_ECONFLICT) /* another program's key: ours is in, take it out */
            give_up(ec, el, false);
        else if (unknown) {
            ec_orphan_add(ec, el->key);
            el->bare = false; /* (its name's bare key stays taken: see bare_drop) */
        } else {
            bare_drop(ec, el);
        }
        el->key[0] = '\0';
        return dl_lock_err(l, acquire_rc(l, rc, deadline), "lock \"%s\": %s: %s (%s)", l->name,
                           stage, err, ec->redacted);
    }
    ec_waiting z = {.l = l,
                    .deadline = deadline,
                    .cancel_fd = cancel_fd,
                    .retry_step_ns = &retry_step_ns,
                    .q = q,
                    .n = n,
                    .rev = rev,
                    .fresh = true};
    dl_queue_waiter qw = {.read = ec_wait_read,
                          .wait = ec_wait_on,
                          .ctx = &z,
                          .vanished = "its key vanished while it waited (the lease expired or "
                                      "was revoked, or dlock break)",
                          .where = ec->redacted};
    int result = dl_queue_acquire(l, deadline, &qw, &waited);
    free(z.q);
    el->grant_rev = z.grant_rev;
    if (result == 0) {
        pthread_mutex_lock(&ec->mu);
        bool gone = ec->gen != el->gen || ec->lease_gone;
        int64_t confirmed = ec->confirmed_ns;
        if (!gone) {
            el->next_held = ec->held;
            ec->held = el;
            el->listed = true;
            el->held_ns = dl_now_ns();
            el->watch_from = el->rev + 1;
            el->watched = false;
            ec_wake(ec); /* (to join the watch in EC_WATCH_HELD_AFTER_MS) */
        }
        pthread_mutex_unlock(&ec->mu);
        if (gone)
            result = dl_lock_err(l, DLOCK_EUNREACHABLE,
                                 "lock \"%s\": the client's lease ended as it was granted (%s)",
                                 l->name, ec->redacted);
        else if (dl_now_ns() - confirmed > dl_ms_to_ns(l->opts.ttl_ms) / 3) {
            /* After a long wait the last keep-alive may be too old for the
             * grant to be worth anything: ask once more. */
            do
                rc = ec_keepalive(ec, req_until(l), err, sizeof err);
            while (rc && dl_lock_retry_transient(l, &rc, deadline, &retry_step_ns));
            if (rc)
                result = dl_lock_err(l, acquire_rc(l, rc, deadline),
                                     "lock \"%s\": renewing the lease as it was granted: %s (%s)",
                                     l->name, err, ec->redacted);
        }
    }
    if (result) {
        ec_held_drop(ec, el);
        give_up(ec, el, false);
        return result;
    }
    if (waited && !ec->etcdctl) {
        /* (The etcdctl layout's key keeps the value its peers give it.)
         * Off our path, the client's thread writes when we got the lock into
         * our value (dlock_inspect's held_ms; until then it says when we
         * queued). The write tells the waiter behind us that we hold: an
         * exclusive one then takes our deletion as its grant without
         * reading the queue (the hand-over keeps one server hop); a later
         * semaphore waiter learns that we took a permit. Dropped when we
         * release first. ignore_lease fails on a key that is gone: it
         * never makes one; the version compare keeps a late touch from
         * overwriting a leader value set meanwhile. */
        el->since_ms = dl_realtime_ms();
        char value[sizeof ec->self + 32], b64k[EC_KEY_MAX * 2], b64v[sizeof value * 2];
        char body[EC_KEY_MAX * 4 + sizeof b64v + 200];
        ec_value_format(ec, el->since_ms, NULL, value, sizeof value);
        ec_b64_encode(el->key, strlen(el->key), b64k);
        ec_b64_encode(value, strlen(value), b64v);
        snprintf(body, sizeof body,
                 "{\"compare\":[{\"key\":\"%s\",\"target\":\"VERSION\",\"result\":\"EQUAL\","
                 "\"version\":\"1\"}],\"success\":[{\"request_put\":{\"key\":\"%s\",\"value\":"
                 "\"%s\",\"ignore_lease\":true}}]}",
                 b64k, b64k, b64v);
        /* A semaphore waiter behind us needs the write at once to learn
         * that a permit went; for the other kinds it only saves the next
         * waiter a read and keeps held_ms exact, which is worth a write
         * (a log flush) only for a hold that lasts: a short one (dlock run
         * of a quick command, a bench cycle) releases before it is due and
         * never writes it. */
        int64_t after_ms = el->kind[0] == 's' ? 0 : EC_TOUCH_AFTER_MS;
        ec_touch t = {.key = strdup(el->key), .body = strdup(body),
                      .due_ns = dl_deadline_in(after_ms)};
        pthread_mutex_lock(&ec->mu);
        ec_touch *ts = t.key && t.body ? realloc(ec->touches, sizeof *ts * (ec->ntouches + 1))
                                       : NULL;
        if (ts) {
            ec->touches = ts;
            ts[ec->ntouches++] = t;
            t = (ec_touch){0};
            ec_wake(ec);
        }
        pthread_mutex_unlock(&ec->mu);
        free(t.key);
        free(t.body);
    }
    pthread_mutex_lock(&ec->mu);
    l->lease_start_ns = ec->confirmed_ns;
    pthread_mutex_unlock(&ec->mu);
    atomic_store(&l->token, (uint64_t)el->rev);
    return 0;
}

/* A release begins: el leaves the client's held keys (its watch) and its
 * grant-time write, if still due, is dropped. */
static void release_begin(ecclient *ec, eclock *el)
{
    ec_held_drop(ec, el);
    pthread_mutex_lock(&ec->mu);
    for (size_t i = 0; i < ec->ntouches; i++)
        if (strcmp(ec->touches[i].key, el->key) == 0) {
            free(ec->touches[i].key);
            free(ec->touches[i].body);
            ec->touches[i--] = ec->touches[--ec->ntouches];
        }
    pthread_mutex_unlock(&ec->mu);
}

/*
 * A release's end, whatever it did to the key (deleted it, or handed it
 * to a lease of its own): rc the request's outcome, done whether the key
 * was still ours. Failed: the message says what did not happen (`what`),
 * and the client's thread deletes the key later, its bare key staying
 * taken; else the bare key is free again (`done` or not: the key is gone,
 * or someone else's). The key is forgotten.
 */
static int release_end(ecclient *ec, dlock_lock *l, int rc, bool done, const char *err,
                       const char *what)
{
    eclock *el = l->bstate;
    int result = 0;
    if (rc == 0)
        bare_drop(ec, el);
    if (rc == 0 && !done)
        result = dl_lock_err(l, DLOCK_ELOST, "lock \"%s\" was lost: its key was already gone, "
                             "or not its own any more",
                             l->name);
    else if (rc) {
        ec_orphan_add(ec, el->key);
        el->bare = false; /* (its name's bare key stays taken: see bare_drop) */
        result = dl_lock_err(l, rc, "lock \"%s\": %s: %s; its key is deleted when etcd "
                             "answers again, or with the lease (%s)",
                             l->name, what, err, ec->redacted);
    }
    el->key[0] = '\0';
    return result;
}

static int etcd_release(dlock_lock *l)
{
    ecclient *ec = ec_of(l->c);
    eclock *el = l->bstate;
    release_begin(ec, el);
    char err[300];
    int64_t deleted = 0;
    int rc;
    if (l->release_closing) {
        /* The client closes next and revokes its lease, which deletes the
         * key: the revocation is the release (one write, not two). Only
         * check, with a read, that the key was ours to the end. */
        char b64[EC_KEY_MAX * 2], body[EC_KEY_MAX * 2 + 64];
        ec_b64_encode(el->key, strlen(el->key), b64);
        snprintf(body, sizeof body, "{\"key\":\"%s\"}", b64);
        cJSON *j = NULL;
        rc = ec_post(ec, "/v3/kv/range", body, req_until(l), -1, &j, NULL, err, sizeof err);
        if (rc == 0)
            deleted = ec_kv_still_ours(ec, el->lease, el->rev,
                                       cJSON_GetArrayItem(ec_jarr(j, "kvs"), 0))
                          ? 1 /* (as good as deleted: the revocation takes it) */
                          : 0;
        cJSON_Delete(j);
    } else {
        rc = ec_delete_key(ec, el->key, el->rev, el->lease, req_until(l), &deleted, err,
                           sizeof err);
    }
    return release_end(ec, l, rc, deleted != 0, err, "release not confirmed");
}

/*
 * dlock's own layout: release, leaving the lock taken for ms more. The
 * client's lease is shared by its locks and revoked when it closes, and an
 * etcd lease cannot be shortened, so the key moves to a lease of its own
 * granted for the rest (whole seconds, rounded up; the cluster may grant
 * its minimum TTL, 2 s on default settings): one transaction, only while
 * the key is still ours (made at its revision, on the client's lease, as
 * ec_delete_key's compare), puts it there with its value kept
 * (ignore_value). The create revision stays, so the token and the queue
 * are unchanged: the waiter behind it watches its deletion, and a put
 * that is not its creation only tells an exclusive waiter that it holds
 * (ec_wait_line), a semaphore waiter to read the queue again. The key's
 * name keeps the client's lease in hex: nothing reads a lease out of a
 * name (inspect and break take the key's own: lease_ms is the rest of the
 * minimum). A later acquisition of the handle draws a new owner, so a new
 * key, and queues behind this one (test_etcd's test_min_hold_handed).
 */
static int etcd_release_at(dlock_lock *l, int64_t ms)
{
    ecclient *ec = ec_of(l->c);
    eclock *el = l->bstate;
    release_begin(ec, el);
    char err[300];
    int64_t lease = 0;
    int rc = ec_lease_grant(ec, ms, req_until(l), &lease, err, sizeof err);
    if (rc)
        return release_end(ec, l, rc, false, err,
                           "its minimum could not be handed to etcd (granting a lease), so it "
                           "goes early");
    char b64[EC_KEY_MAX * 2], body[EC_KEY_MAX * 6 + 400];
    ec_b64_encode(el->key, strlen(el->key), b64);
    snprintf(body, sizeof body,
             "{\"compare\":[{\"key\":\"%s\",\"target\":\"CREATE\",\"result\":\"EQUAL\","
             "\"create_revision\":\"%" PRId64 "\"},{\"key\":\"%s\",\"target\":\"LEASE\","
             "\"result\":\"EQUAL\",\"lease\":\"%" PRId64 "\"}],\"success\":["
             "{\"request_put\":{\"key\":\"%s\",\"lease\":\"%" PRId64 "\","
             "\"ignore_value\":true}}]}",
             b64, el->rev, b64, el->lease, b64, lease);
    cJSON *j = NULL;
    rc = ec_post(ec, "/v3/kv/txn", body, req_until(l), -1, &j, NULL, err, sizeof err);
    bool moved = rc == 0 && cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(j, "succeeded"));
    cJSON_Delete(j);
    /* Not moved (not ours any more), or not known to be (then the lease's
     * revocation deletes the key if it did move, and the client's thread
     * deletes it if it did not: early, as the message says). */
    if (!moved)
        ec_lease_drop(ec, lease);
    return release_end(ec, l, rc, moved, err,
                       "its minimum could not be handed to etcd (moving its key to a lease of "
                       "its own), so it goes early");
}

static void etcd_abandon(dlock_lock *l)
{
    eclock *el = l->bstate;
    if (el->key[0])
        (void)etcd_release(l);
    else
        ec_held_drop(ec_of(l->c), el);
}

/* The lease is the client's: a keep-alive the server answered within
 * ttl/2 (the client's thread sends one every ttl/4) vouches for every lock
 * from when it was sent. */
static int etcd_renew(dlock_lock *l)
{
    ecclient *ec = ec_of(l->c);
    eclock *el = l->bstate;
    pthread_mutex_lock(&ec->mu);
    bool gone = el->lost || ec->lease_gone || ec->gen != el->gen;
    int64_t confirmed = ec->confirmed_ns;
    pthread_mutex_unlock(&ec->mu);
    if (gone)
        return dl_lock_err(l, DLOCK_ELOST,
                           "lock \"%s\": its key is gone (lease expired or revoked, or dlock "
                           "break)", l->name);
    if (dl_now_ns() - confirmed < dl_ms_to_ns(l->opts.ttl_ms) / 2) {
        l->lease_start_ns = confirmed;
        return 0;
    }
    char err[300];
    int rc = ec_keepalive(ec, req_until(l), err, sizeof err);
    if (rc == DLOCK_ELOST)
        return dl_lock_err(l, DLOCK_ELOST, "lock \"%s\": %s", l->name, err);
    if (rc)
        return dl_lock_err(l, rc, "lock \"%s\" is uncertain: %s", l->name, err);
    pthread_mutex_lock(&ec->mu);
    l->lease_start_ns = ec->confirmed_ns;
    pthread_mutex_unlock(&ec->mu);
    return 0;
}

/* ---- what is known about a name -------------------------------------------------------- */

static void dir_of(const ecclient *ec, const char *name, char *buf, size_t len)
{
    if (ec->etcdctl)
        snprintf(buf, len, "%s/", name); /* (concurrency.Mutex's pfx) */
    else
        snprintf(buf, len, "%s/%s/", ec->prefix, name);
}

/* The whole queue of name with values: *q ascending, values[] parallel.
 * dlock's own layout refuses a key it did not write (ec_foreign). */
static int read_all(ecclient *ec, const char *dir, ec_entry **q, char (**values)[320], int *n,
                    char *err, size_t errlen)
{
    char b64k[EC_KEY_MAX * 2], b64e[EC_KEY_MAX * 2], end[EC_KEY_MAX], body[EC_KEY_MAX * 4 + 200];
    ec_range_end(dir, end, sizeof end);
    ec_b64_encode(dir, strlen(dir), b64k);
    ec_b64_encode(end, strlen(end), b64e);
    snprintf(body, sizeof body,
             "{\"key\":\"%s\",\"range_end\":\"%s\",\"sort_target\":\"CREATE\","
             "\"sort_order\":\"ASCEND\"}",
             b64k, b64e);
    cJSON *j = NULL;
    int rc = ec_post(ec, "/v3/kv/range", body, -1, -1, &j, NULL, err, errlen);
    if (rc)
        return rc;
    char foreign[EC_KEY_MAX];
    *n = ec_queue_read(j, dir, false, ec->etcdctl, q, foreign, sizeof foreign);
    *values = NULL;
    if (*n >= 0) {
        *values = calloc((size_t)(*n ? *n : 1), sizeof **values);
        const cJSON *kv;
        int i = 0;
        cJSON_ArrayForEach(kv, ec_jarr(j, "kvs"))
        {
            char key[EC_KEY_MAX];
            if (*values && i < *n && ec_kv_key(kv, key, sizeof key) && strcmp(key, (*q)[i].key) == 0)
                ec_kv_value(kv, (*values)[i++], sizeof **values);
        }
    }
    cJSON_Delete(j);
    if (*n < 0 || !*values) {
        free(*q);
        *q = NULL;
        snprintf(err, errlen, "out of memory");
        return DLOCK_ENOMEM;
    }
    if (foreign[0]) {
        free(*q);
        free(*values);
        *q = NULL;
        *values = NULL;
        return ec_foreign(ec, dir, foreign, err, errlen);
    }
    return 0;
}

/* read_all of name's folder for the client call what ("inspect", "break",
 * "leader of"): 0, or the error set on c. */
static int read_name(dlock_client *c, const char *name, const char *what, ec_entry **q,
                     char (**values)[320], int *n)
{
    ecclient *ec = ec_of(c);
    char dir[EC_KEY_MAX], err[300];
    dir_of(ec, name, dir, sizeof dir);
    *q = NULL;
    *values = NULL;
    *n = 0;
    int rc = read_all(ec, dir, q, values, n, err, sizeof err);
    if (rc)
        return dl_client_err(c, rc, "%s \"%s\": %s (%s)", what, name, err, ec->redacted);
    return 0;
}

/* etcdctl: who holds entry e, into buf: a dlock client says who it is in
 * its client key (PREFIX/.clients/LEASE); a peer is its lease. ckval: that
 * key's value ("" none). */
static void peer_holder(ecclient *ec, const ec_entry *e, char *buf, size_t len, char *ckval,
                        size_t cklen)
{
    ckval[0] = '\0';
    if (e->lease == 0) {
        snprintf(buf, len, "key %.150s, on no lease (neither etcdctl lock's nor dlock's)", e->key);
        return;
    }
    char ckey[EC_KEY_MAX], b64[EC_KEY_MAX * 2], body[EC_KEY_MAX * 2 + 64], err[300];
    ec_ckey_of(ec, e->lease, ckey, sizeof ckey);
    ec_b64_encode(ckey, strlen(ckey), b64);
    snprintf(body, sizeof body, "{\"key\":\"%s\"}", b64);
    cJSON *j = NULL;
    if (ec_post(ec, "/v3/kv/range", body, -1, -1, &j, NULL, err, sizeof err) == 0)
        ec_kv_value(cJSON_GetArrayItem(ec_jarr(j, "kvs"), 0), ckval, cklen);
    cJSON_Delete(j);
    if (ckval[0])
        snprintf(buf, len, "%s, lease %" PRIx64, ckval, (uint64_t)e->lease);
    else
        snprintf(buf, len, "lease %" PRIx64 " (etcdctl lock or Go's concurrency.Mutex: not a "
                           "dlock client)", (uint64_t)e->lease);
}

static int etcd_inspect(dlock_client *c, const char *name, dlock_info *info)
{
    ecclient *ec = ec_of(c);
    char err[300];
    ec_entry *q;
    char(*values)[320];
    int n;
    int rc = read_name(c, name, "inspect", &q, &values, &n);
    if (rc)
        return rc;
    int first, holders = dl_queue_holders(q, sizeof *q, n, &first);
    info->held = holders > 0;
    info->holders = holders;
    info->waiters = n - holders;
    info->held_ms = -1;
    info->lease_ms = -1;
    if (first >= 0) {
        info->token = (uint64_t)q[first].rev;
        if (ec->etcdctl) { /* (the peers record no time: held_ms unknown) */
            char ckval[320];
            peer_holder(ec, &q[first], info->holder, sizeof info->holder, ckval, sizeof ckval);
        } else {
            int64_t since;
            ec_split_value(values[first], info->holder, sizeof info->holder, &since);
            if (since >= 0) {
                int64_t ms = dl_realtime_ms() - since;
                info->held_ms = ms < 0 ? 0 : ms; /* (another host's clock may be ahead) */
            }
        }
        char body[64];
        snprintf(body, sizeof body, "{\"ID\":\"%" PRId64 "\"}", q[first].lease);
        cJSON *j = NULL;
        if (q[first].lease &&
            ec_post(ec, "/v3/lease/timetolive", body, -1, -1, &j, NULL, err, sizeof err) == 0) {
            int64_t ttl = ec_jint(j, "TTL", -1);
            info->lease_ms = ttl >= 0 ? ttl * 1000 : -1;
        }
        cJSON_Delete(j);
    }
    free(q);
    free(values);
    return 0;
}

static int etcd_break(dlock_client *c, const char *name, dlock_info *info)
{
    ecclient *ec = ec_of(c);
    char err[300];
    ec_entry *q;
    char(*values)[320];
    int n;
    int rc = read_name(c, name, "break", &q, &values, &n);
    if (rc)
        return rc;
    int broken = 0, result = 0;
    for (int i = 0; i < n && result == 0; i++) {
        if (dl_queue_blocker(q, sizeof *q, i) != DL_Q_HOLDS)
            continue;
        char holder[sizeof info->holder], ckval[320] = "broken";
        if (ec->etcdctl)
            peer_holder(ec, &q[i], holder, sizeof holder, ckval, sizeof ckval);
        else
            ec_split_value(values[i], holder, sizeof holder, NULL);
        int64_t deleted = 0;
        rc = ec_delete_key(ec, q[i].key, 0, 0, -1, &deleted, err, sizeof err);
        if (rc) {
            result = dl_client_err(c, rc, "break \"%s\": %s (%s)", name, err, ec->redacted);
            break;
        }
        if (!deleted)
            continue;
        if (broken++ == 0) {
            info->token = (uint64_t)q[i].rev;
            snprintf(info->holder, sizeof info->holder, "%s", holder);
        }
        /* Tell a dlock holder at once: it watches its client key. A put
         * bound to its lease goes with it, only where the key exists (a
         * peer's lease has none; a lease gone, nothing to tell), and keeps
         * its value where it was read (etcdctl: status shows it). */
        char ckey[EC_KEY_MAX], b64[EC_KEY_MAX * 2], b64v[sizeof ckval * 2];
        char body[EC_KEY_MAX * 4 + sizeof b64v + 300];
        if (!ckval[0])
            continue; /* (etcdctl: a peer's; nobody watches it) */
        ec_ckey_of(ec, q[i].lease, ckey, sizeof ckey);
        ec_b64_encode(ckey, strlen(ckey), b64);
        ec_b64_encode(ckval, strlen(ckval), b64v);
        snprintf(body, sizeof body,
                 "{\"compare\":[{\"key\":\"%s\",\"target\":\"CREATE\",\"result\":\"GREATER\","
                 "\"create_revision\":\"0\"}],\"success\":[{\"request_put\":{\"key\":\"%s\","
                 "\"value\":\"%s\",\"lease\":\"%" PRId64 "\"}}]}",
                 b64, b64, b64v, q[i].lease);
        (void)ec_post(ec, "/v3/kv/txn", body, -1, -1, NULL, NULL, err, sizeof err);
    }
    free(q);
    free(values);
    if (result)
        return result;
    info->held = broken > 0;
    info->holders = broken; /* 0: the core says nothing was held */
    return 0;
}

static int etcd_set_value(dlock_lock *l, const char *value)
{
    ecclient *ec = ec_of(l->c);
    eclock *el = l->bstate;
    char data[sizeof ec->self + 300], b64k[EC_KEY_MAX * 2], b64v[sizeof data * 2];
    char body[sizeof b64k * 2 + sizeof b64v + 300], err[300];
    if (ec->etcdctl) /* (Election's: the proposal, nothing else) */
        snprintf(data, sizeof data, "%s", value);
    else
        ec_value_format(ec, el->since_ms, value, data, sizeof data);
    ec_b64_encode(el->key, strlen(el->key), b64k);
    ec_b64_encode(data, strlen(data), b64v);
    /* Only while our key exists: a put would make it anew. */
    snprintf(body, sizeof body,
             "{\"compare\":[{\"key\":\"%s\",\"target\":\"CREATE\",\"result\":\"EQUAL\","
             "\"create_revision\":\"%" PRId64 "\"}],"
             "\"success\":[{\"request_put\":{\"key\":\"%s\",\"value\":\"%s\","
             "\"ignore_lease\":true}}]}",
             b64k, el->rev, b64k, b64v);
    cJSON *j = NULL;
    int rc = ec_post(ec, "/v3/kv/txn", body, req_until(l), -1, &j, NULL, err, sizeof err);
    bool ok = rc == 0 && cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(j, "succeeded"));
    cJSON_Delete(j);
    if (rc)
        return dl_lock_err(l, rc, "lock \"%s\": publishing the leader value: %s", l->name, err);
    if (!ok)
        return dl_lock_err(l, DLOCK_ELOST, "lock \"%s\" is no longer held", l->name);
    return 0;
}

/* etcdctl: what `etcdctl lock NAME CMD` gives CMD (its environLockResponse):
 * the holder's key and Mutex's Header().Revision, the store's revision when
 * the grant was learnt, which is the key's create revision only when it did
 * not wait (the token, its create revision, orders holders; this does not). */
static int etcdctl_peer_env(dlock_lock *l, dlock_env_fn fn, void *arg)
{
    eclock *el = l->bstate;
    char rev[24];
    snprintf(rev, sizeof rev, "%" PRId64, el->grant_rev);
    int rc = fn("ETCD_LOCK_KEY", el->key, arg);
    return rc ? rc : fn("ETCD_LOCK_REV", rev, arg);
}

static int etcd_get_value(dlock_client *c, const char *name, char *buf, size_t len)
{
    ecclient *ec = ec_of(c);
    ec_entry *q;
    char(*values)[320];
    int n;
    int rc = read_name(c, name, "leader of", &q, &values, &n);
    if (rc)
        return rc;
    int first;
    (void)dl_queue_holders(q, sizeof *q, n, &first);
    const char *value = NULL;
    if (first >= 0 && ec->etcdctl) /* (as etcdctl elect --listen: the first key's value) */
        value = values[first][0] ? values[first] : NULL;
    else if (first >= 0)
        value = ec_split_value(values[first], NULL, 0, NULL);
    if (value)
        snprintf(buf, len, "%s", value);
    free(q);
    free(values);
    if (first < 0)
        return dl_client_err(c, DLOCK_ENOENT, "no leader for \"%s\"", name);
    return value ? 0 : dl_client_err(c, DLOCK_ENOENT, "no leader value for \"%s\" yet", name);
}

static int etcdctl_name_check(const ecclient *ec, const char *name, char *why, size_t len);

/* Walk the keys from `from` (fl bytes) to end (NULL: the last key), 1000 a
 * page in key order, while they start with must: fn(name, arg) for each
 * key that name_of turns into a lock name. Its non-zero return stops the
 * walk and is returned; *rc: a failed request's code (err says why). */
typedef bool (*ec_name_of_fn)(ecclient *ec, const char *key, const cJSON *kv, char *name,
                              size_t len);
static int walk_names(ecclient *ec, const char *from0, int fl, const char *end, const char *must,
                      ec_name_of_fn name_of, dlock_list_fn fn, void *arg, int *rc, char *err,
                      size_t errlen)
{
    *rc = 0;
    char from[EC_KEY_MAX], b64e[EC_KEY_MAX * 2] = "AA=="; /* ("\0": to the last key) */
    memcpy(from, from0, (size_t)fl + 1);
    if (end)
        ec_b64_encode(end, strlen(end), b64e);
    size_t ml = strlen(must);
    int stop = 0;
    for (bool more = true; more && !stop && fl < (int)sizeof from;) {
        char b64k[EC_KEY_MAX * 2], body[EC_KEY_MAX * 4 + 200];
        ec_b64_encode(from, (size_t)fl, b64k);
        snprintf(body, sizeof body,
                 "{\"key\":\"%s\",\"range_end\":\"%s\",\"keys_only\":true,\"limit\":\"1000\"}",
                 b64k, b64e);
        cJSON *j = NULL;
        if ((*rc = ec_post(ec, "/v3/kv/range", body, -1, -1, &j, NULL, err, errlen)) != 0)
            return 0;
        more = cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(j, "more"));
        int seen = 0;
        const cJSON *kv;
        cJSON_ArrayForEach(kv, ec_jarr(j, "kvs"))
        {
            char key[EC_KEY_MAX], name[EC_KEY_MAX];
            if (!ec_kv_key(kv, key, sizeof key))
                continue;
            seen++;
            if (strncmp(key, must, ml) != 0) {
                more = false; /* keys are in order: no later one has the prefix */
                break;
            }
            /* the next page starts just after this key */
            fl = snprintf(from, sizeof from, "%s", key) + 1;
            if (name_of(ec, key, kv, name, sizeof name) && (stop = fn(name, arg)) != 0)
                break;
        }
        cJSON_Delete(j);
        if (seen == 0)
            more = false;
    }
    return stop;
}

/* A marker's name: the key after PREFIX/.names/ (or .etcdctl-names/). */
static bool marker_name(ecclient *ec, const char *key, const cJSON *kv, char *name, size_t len)
{
    (void)kv;
    size_t bl = strlen(ec->prefix) + 1 + strlen(ec_names_dir(ec));
    if (strlen(key) <= bl)
        return false;
    snprintf(name, len, "%s", key + bl);
    return ec->etcdctl ? etcdctl_name_check(ec, name, NULL, 0) == 0
                       : dlock_name_valid(name, NULL, 0) == 0;
}

/* Every name ever locked has a marker PREFIX/.names/NAME (see enqueue):
 * the walk reads them in key order. */
static int etcd_list(dlock_client *c, const char *prefix, dlock_list_fn fn, void *arg)
{
    ecclient *ec = ec_of(c);
    char base[EC_KEY_MAX], from[EC_KEY_MAX], end[EC_KEY_MAX], err[300];
    snprintf(base, sizeof base, "%s/%s", ec->prefix, ec_names_dir(ec));
    int fl = snprintf(from, sizeof from, "%s%s", base, prefix);
    ec_range_end(base, end, sizeof end);
    int rc, stop = walk_names(ec, from, fl, end, from, marker_name, fn, arg, &rc, err, sizeof err);
    if (rc)
        return dl_client_err(c, rc, "list: %s (%s)", err, ec->redacted);
    return stop;
}

/* etcdctl: may name be a lock name? The peers take any key prefix; dlock
 * takes printable ASCII (status prints names), at most DL_NAME_MAX bytes,
 * not ending in '/' (the peers add it), not inside PREFIX/. (dlock's own
 * client keys and name markers). */
static int etcdctl_name_check(const ecclient *ec, const char *name, char *why, size_t len)
{
    size_t n = strnlen(name, DL_NAME_MAX + 1), pl = strlen(ec->prefix);
    const char *bad = NULL;
    char buf[300];
    if (n == 0)
        bad = "lock name is empty";
    else if (n > DL_NAME_MAX)
        snprintf(buf, sizeof buf, "lock name is longer than %d bytes", DL_NAME_MAX), bad = buf;
    for (size_t i = 0; i < n && !bad; i++)
        if (name[i] < 0x20 || name[i] > 0x7e)
            snprintf(buf, sizeof buf,
                     "lock name has byte 0x%02x at offset %zu (layout=etcdctl takes printable "
                     "ASCII)",
                     (unsigned char)name[i], i),
                bad = buf;
    if (!bad && name[n - 1] == '/')
        bad = "layout=etcdctl: a name is the key prefix etcdctl lock takes, which adds the '/': "
              "it may not end in '/'";
    if (!bad && strncmp(name, ec->prefix, pl) == 0 && name[pl] == '/' && name[pl + 1] == '.')
        snprintf(buf, sizeof buf, "layout=etcdctl: names under %s/. are dlock's own keys",
                 ec->prefix),
            bad = buf;
    if (!bad)
        return 0;
    if (why && len)
        snprintf(why, len, "%s", bad);
    return DLOCK_ENAME;
}

static int etcdctl_name_valid(dlock_client *c, const char *name, char *why, size_t len)
{
    return etcdctl_name_check(ec_of(c), name, why, len);
}

/* etcdctl: the name of a key under the peers' rule, into name: the key
 * without its last part, which is a lease in hex (dlock's second key of a
 * name adds -OWNER), on a lease; false for a key of another shape or
 * dlock's own (PREFIX/.). */
static bool etcdctl_name_of(ecclient *ec, const char *k, const cJSON *kv, char *name, size_t len)
{
    const char *slash = strrchr(k, '/');
    if (!slash || slash == k || ec_jint(kv, "lease", 0) == 0)
        return false;
    size_t hex = strspn(slash + 1, "0123456789abcdef");
    const char *rest = slash + 1 + hex;
    if (hex < 1 || hex > 16 || (*rest && (*rest != '-' || strlen(rest + 1) != DL_OWNER_HEX)))
        return false;
    snprintf(name, len, "%.*s", (int)(slash - k), k);
    return etcdctl_name_check(ec, name, NULL, 0) == 0;
}

typedef struct name_set {
    char **v;
    size_t n;
    bool nomem;
} name_set;

static int name_collect(const char *name, void *arg)
{
    name_set *ns = arg;
    char *d = strdup(name), **b = d ? realloc(ns->v, sizeof *b * (ns->n + 1)) : NULL;
    if (!b) {
        free(d);
        ns->nomem = true;
        return 1;
    }
    ns->v = b;
    ns->v[ns->n++] = d;
    return 0;
}

static int cmp_str(const void *a, const void *b)
{
    return strcmp(*(char *const *)a, *(char *const *)b);
}

/* etcdctl: the names dlock locked in this layout (their markers) and those
 * whose peers' keys exist now (the peers keep no record of a name: held
 * or waited for), read from every key at or after prefix. */
static int etcdctl_list(dlock_client *c, const char *prefix, dlock_list_fn fn, void *arg)
{
    ecclient *ec = ec_of(c);
    char base[EC_KEY_MAX], from[EC_KEY_MAX], end[EC_KEY_MAX], err[300];
    snprintf(base, sizeof base, "%s/%s", ec->prefix, ec_names_dir(ec));
    int fl = snprintf(from, sizeof from, "%s%s", base, prefix);
    ec_range_end(base, end, sizeof end);
    name_set ns = {0};
    int rc;
    (void)walk_names(ec, from, fl, end, from, marker_name, name_collect, &ns, &rc, err,
                     sizeof err);
    if (rc == 0 && !ns.nomem) {
        fl = snprintf(from, sizeof from, "%s", prefix);
        (void)walk_names(ec, from, fl ? fl : 1 /* "\0": the first key */, NULL, prefix,
                         etcdctl_name_of, name_collect, &ns, &rc, err, sizeof err);
    }
    int stop = 0;
    if (rc == 0 && ns.n) {
        qsort(ns.v, ns.n, sizeof *ns.v, cmp_str);
        for (size_t i = 0; i < ns.n && !stop; i++)
            if (i == 0 || strcmp(ns.v[i], ns.v[i - 1]) != 0)
                stop = fn(ns.v[i], arg);
    }
    for (size_t i = 0; i < ns.n; i++)
        free(ns.v[i]);
    free(ns.v);
    if (ns.nomem)
        return dl_client_err(c, DLOCK_ENOMEM, "list: out of memory");
    if (rc)
        return dl_client_err(c, rc, "list: %s (%s)", err, ec->redacted);
    return stop;
}

/* ---- clients and handles --------------------------------------------------------------- */

static int etcd_lock_init(dlock_lock *l)
{
    ecclient *ec = ec_of(l->c);
    eclock *el = calloc(1, sizeof *el);
    if (!el)
        return dl_lock_err(l, DLOCK_ENOMEM, "out of memory");
    el->l = l;
    dir_of(ec, l->name, el->dir, sizeof el->dir);
    if (ec->etcdctl) /* (a semaphore of 1: the mutex it is) */
        snprintf(el->kind, sizeof el->kind, "x");
    else
        dl_qkind_format(l, el->kind, sizeof el->kind);
    /* The client's lease is every lock's: valid for its TTL past the last
     * keep-alive answered (see the top of this file). */
    l->opts.ttl_ms = ec->ttl_s * 1000;
    l->bstate = el;
    return 0;
}

static void etcd_lock_fini(dlock_lock *l)
{
    if (l->bstate)
        ec_held_drop(ec_of(l->c), l->bstate);
    free(l->bstate);
    l->bstate = NULL;
}

static void ecclient_free(ecclient *ec)
{
    pthread_mutex_lock(&ec->mu);
    ec->stopping = true;
    ec_wake(ec);
    bool joined = ec->thread_started;
    pthread_mutex_unlock(&ec->mu);
    uint64_t one = 1;
    if (ec->stop_fd >= 0 && write(ec->stop_fd, &one, sizeof one) < 0) {
        /* (an eventfd's counter cannot overflow from one write) */
    }
    if (joined)
        pthread_join(ec->thread, NULL);
    if (ec->stop_fd >= 0)
        close(ec->stop_fd);
    if (ec->wake_fd >= 0)
        close(ec->wake_fd);
    while (ec->idle) {
        ec_conn *k = ec->idle;
        ec->idle = k->next;
        ec_conn_free(k);
    }
    for (size_t i = 0; i < ec->nbare; i++)
        free(ec->bare[i]);
    free(ec->bare);
    for (size_t i = 0; i < ec->norphans; i++)
        free(ec->orphans[i]);
    free(ec->orphans);
    for (size_t i = 0; i < ec->ntouches; i++) {
        free(ec->touches[i].key);
        free(ec->touches[i].body);
    }
    free(ec->touches);
    for (int i = 0; i < ec->nendpoints; i++)
        free(ec->endpoints[i]);
    free(ec->endpoints);
    free(ec->cacert);
    free(ec->cert);
    free(ec->key);
    free(ec->user);
    if (ec->password) {
        explicit_bzero(ec->password, strlen(ec->password));
        free(ec->password);
    }
    if (ec->auth) {
        explicit_bzero(ec->auth, strlen(ec->auth));
        free(ec->auth);
    }
    pthread_cond_destroy(&ec->cv);
    dl_teller_fini(&ec->teller);
    pthread_mutex_destroy(&ec->mu);
    free(ec);
}

static pthread_once_t curl_once = PTHREAD_ONCE_INIT;
static const dl_backend_ops etcd_ops, etcdctl_ops; /* (below) */

/* A readable file named by URL parameter key (NULL when absent). */
static int file_param(dlock_client *c, const dl_url *u, const char *key, char **out)
{
    const char *v = dl_url_param(u, key);
    *out = NULL;
    if (!v)
        return 0;
    if (strcmp(u->scheme, "etcds") != 0)
        return dl_client_err(c, DLOCK_EURL, "%s: %s= needs etcds:// (TLS)", u->redacted, key);
    if (!*v || access(v, R_OK) != 0)
        return dl_client_err(c, DLOCK_EURL, "%s: %s=%s: %s", u->redacted, key, v,
                             *v ? strerror(errno) : "empty file name");
    *out = strdup(v);
    return *out ? 0 : dl_client_err(c, DLOCK_ENOMEM, "out of memory");
}

static int etcd_client_open(dlock_client *c, const dl_url *u)
{
    if (strcmp(u->scheme, "etcds") == 0) { /* (http:// is conn.c's own) */
        pthread_once(&curl_once, lc_load);
        if (lc_error[0])
            return dl_client_err(c, DLOCK_ENOTSUP, "%s: %s", u->redacted, lc_error);
    }
    const char *t = dl_url_param(u, "ttl");
    long ttl = EC_DEFAULT_TTL_S;
    if (t) {
        char *end;
        errno = 0;
        ttl = strtol(t, &end, 10);
        if (errno || *end || end == t || ttl < 1 || ttl > 86400)
            return dl_client_err(c, DLOCK_EURL,
                                 "%s: ttl=%s: expected the lease's length in seconds (1..86400)",
                                 u->redacted, t);
    }
    const char *prefix = dl_url_param(u, "prefix");
    if (!prefix)
        prefix = "dlock";
    size_t pl = strlen(prefix);
    bool prefix_ok = pl > 0 && pl < 64 && prefix[0] != '/' && prefix[pl - 1] != '/';
    for (size_t i = 0; i < pl && prefix_ok; i++)
        prefix_ok = (prefix[i] >= 'a' && prefix[i] <= 'z') || (prefix[i] >= 'A' && prefix[i] <= 'Z') ||
                    (prefix[i] >= '0' && prefix[i] <= '9') || strchr("_-./", prefix[i]);
    if (!prefix_ok)
        return dl_client_err(c, DLOCK_EURL,
                             "%s: prefix=%s: expected 1..63 characters of A-Z a-z 0-9 _ - . / "
                             "not starting or ending with '/'",
                             u->redacted, prefix);
    const char *layout = dl_url_param(u, "layout");
    bool etcdctl = layout && strcmp(layout, "etcdctl") == 0;
    if (layout && !etcdctl && strcmp(layout, "dlock") != 0)
        return dl_client_err(c, DLOCK_EURL,
                             "%s: layout=%s: expected etcdctl (the keys of etcdctl lock and Go's "
                             "concurrency.Mutex and Election) or dlock (dlock's own, the default)",
                             u->redacted, layout);
    ecclient *ec = calloc(1, sizeof *ec);
    if (!ec)
        return dl_client_err(c, DLOCK_ENOMEM, "out of memory");
    ec->etcdctl = etcdctl;
    pthread_mutex_init(&ec->mu, NULL);
    pthread_condattr_t ca; /* (monotonic: lease_ensure's wait has a deadline) */
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    pthread_cond_init(&ec->cv, &ca);
    dl_teller_init(&ec->teller);
    pthread_condattr_destroy(&ca);
    ec->stop_fd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
    ec->wake_fd = ec->stop_fd < 0 ? -1 : eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
    if (ec->wake_fd < 0) {
        ecclient_free(ec);
        return dl_client_err(c, DLOCK_ENOMEM, "cannot make an eventfd: %s", strerror(errno));
    }
    ec->ttl_s = (int)ttl;
    ec->connect_ms = c->opts.connect_timeout_ms;
    ec->op_ms = c->opts.op_timeout_ms;
    ec->redacted = u->redacted;
    ec->tls = strcmp(u->scheme, "etcds") == 0;
    snprintf(ec->prefix, sizeof ec->prefix, "%s", prefix);
    dl_self_desc(ec->self, sizeof ec->self);
    int rc = file_param(c, u, "cacert", &ec->cacert);
    if (!rc)
        rc = file_param(c, u, "cert", &ec->cert);
    if (!rc)
        rc = file_param(c, u, "key", &ec->key);
    if (!rc && (!ec->cert) != (!ec->key))
        rc = dl_client_err(c, DLOCK_EURL, "%s: cert= and key= go together", u->redacted);
    if (rc) {
        ecclient_free(ec);
        return rc;
    }
    ec->endpoints = calloc(u->nhosts, sizeof *ec->endpoints);
    for (size_t i = 0; ec->endpoints && i < u->nhosts; i++) {
        char buf[400];
        snprintf(buf, sizeof buf, strchr(u->hosts[i].host, ':') ? "%s://[%s]:%d" : "%s://%s:%d",
                 ec->tls ? "https" : "http", u->hosts[i].host, u->hosts[i].port);
        if ((ec->endpoints[i] = strdup(buf)))
            ec->nendpoints++;
    }
    if (u->user) {
        ec->user = strdup(u->user);
        ec->password = strdup(u->password ? u->password : "");
    }
    if (!ec->endpoints || ec->nendpoints != (int)u->nhosts || (u->user && (!ec->user || !ec->password))) {
        ecclient_free(ec);
        return dl_client_err(c, DLOCK_ENOMEM, "out of memory");
    }
    c->bstate = ec;
    char err[400];
    /* connect_timeout_ms bounds the whole opening (dlock run -w sets it to
     * what the wait allows), logging in and the lease included. */
    int64_t start = dl_now_ns(), until = start + dl_ms_to_ns(ec->connect_ms);
    if (ec->user)
        rc = ec_authenticate(ec, until, err, sizeof err);
    if (rc == 0) {
        /* The lease now: a wrong URL fails here, not at the first lock, and
         * the request is one a lock needs anyway. A cluster that answers
         * but grants nothing (an election after its leader went, quorum
         * lost for a while) is the right URL at a bad moment: the opening
         * succeeds, and the first lock grants the lease, riding the
         * election out within its own wait (dl_retry_transient). A member's
         * status needs no leader; the last quarter is kept for asking it. */
        int64_t lease;
        uint64_t gen;
        bool make_ckey;
        rc = ec_lease_ensure(ec, start + (until - start) * 3 / 4, &lease, &gen, &make_ckey, err,
                             sizeof err);
        char status_err[200];
        if (rc == DLOCK_EUNREACHABLE &&
            ec_post(ec, "/v3/maintenance/status", "{}", until, -1, NULL, NULL, status_err,
                    sizeof status_err) == 0)
            rc = 0;
    }
    if (rc) {
        c->bstate = NULL;
        ecclient_free(ec);
        return dl_client_err(c, rc, "%s (%s)", err, u->redacted);
    }
    c->ops = etcdctl ? &etcdctl_ops : &etcd_ops;
    c->caps = etcdctl ? ETCDCTL_CAPS : ETCD_CAPS;
    return 0;
}

static void etcd_client_close(dlock_client *c)
{
    ecclient *ec = ec_of(c);
    if (!ec)
        return;
    /* Revoking the lease deletes every key left on it at once. */
    pthread_mutex_lock(&ec->mu);
    int64_t lease = ec->lease_gone ? 0 : ec->lease;
    ec->stopping = true;
    ec_wake(ec);
    pthread_mutex_unlock(&ec->mu);
    if (lease) {
        /* A cluster that has just left a request unanswered is not waited
         * for (dlock run -w gives up by its bound plus 100 ms): the lease
         * ends the keys anyway, by its TTL. */
        pthread_mutex_lock(&ec->mu);
        int64_t since = dl_now_ns() - ec->timeout_ns;
        pthread_mutex_unlock(&ec->mu);
        int64_t until = dl_deadline_in(ec->timeout_ns && since < dl_ms_to_ns(10000)
                                                   ? EC_SUSPECT_MS : ec->op_ms);
        char body[64], err[200];
        snprintf(body, sizeof body, "{\"ID\":\"%" PRId64 "\"}", lease);
        (void)ec_post(ec, "/v3/lease/revoke", body, until, -1, NULL, NULL, err, sizeof err);
    }
    ecclient_free(ec);
    c->bstate = NULL;
}

static const dl_backend_ops etcd_ops = {
    .client_open = etcd_client_open,
    .client_close = etcd_client_close,
    .lock_init = etcd_lock_init,
    .lock_fini = etcd_lock_fini,
    .acquire = etcd_acquire,
    .rides_out_outages = true,
    .release = etcd_release,
    .renew = etcd_renew,
    .abandon = etcd_abandon,
    .inspect = etcd_inspect,
    .list = etcd_list,
    .set_value = etcd_set_value,
    .get_value = etcd_get_value,
    .break_lock = etcd_break,
    .release_at = etcd_release_at,
    EC_RECORD_OPS,
};
/* layout=etcdctl: the same operations on the peers' keys (ec->etcdctl),
 * their names and their list. */
static const dl_backend_ops etcdctl_ops = {
    .client_open = etcd_client_open,
    .client_close = etcd_client_close,
    .lock_init = etcd_lock_init,
    .lock_fini = etcd_lock_fini,
    .acquire = etcd_acquire,
    .rides_out_outages = true,
    .release = etcd_release,
    .renew = etcd_renew,
    .abandon = etcd_abandon,
    .inspect = etcd_inspect,
    .list = etcdctl_list,
    .set_value = etcd_set_value,
    .get_value = etcd_get_value,
    .break_lock = etcd_break,
    .name_valid = etcdctl_name_valid,
    .peer_env = etcdctl_peer_env,
    EC_RECORD_OPS,
};
#define ETCD_OPS .ops = &etcd_ops

#else /* no libcurl or cJSON */

#define ETCD_OPS                                                                             \
    .missing = "this build has no libcurl or cJSON (install libcurl4-openssl-dev and "        \
               "libcjson-dev and rebuild)"

#endif

const dl_backend dl_backend_etcd = {
    .name = "etcd",
    .schemes = etcd_schemes,
    .params = ETCD_PARAMS,
    .caps = ETCD_CAPS,
    .liveness = ETCD_LIVENESS,
    .fencing = ETCD_FENCING,
    ETCD_OPS,
};
