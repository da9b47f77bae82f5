/* SPDX-License-Identifier: MIT */
/*
 * zk.c — ZooKeeper: ephemeral sequential znodes, a watch on the
 * predecessor only.
 *
 * Layout: every lock name is a container znode CHROOT/dlock/NAME (names are
 * printable ASCII without '/', never "." or "..": valid znode names as they
 * are). Each acquisition creates one ephemeral sequential child
 *
 *     KIND-OWNER-SEQUENCE      KIND: "x" exclusive, "r" shared, "sN" semaphore of N
 *
 * whose data is "HOLDER\nVALUE" (the holder's description; a leader's value
 * after the newline). Children in sequence order form the queue; a node
 * holds when no earlier node excludes it (exclusive: none earlier; shared:
 * no earlier non-reader; semaphore: fewer than N earlier, all semaphore
 * nodes). A waiter watches one node — the one whose going can let it in —
 * so a release wakes one waiter. The token is the holder node's creation
 * zxid: it rises with every create in the ensemble, leader changes included.
 * The owner id in the node's name finds the node again when a create's
 * reply is lost (Curator's "protected" mode).
 *
 * Liveness is the session. The client asks for a proof that the session
 * lives at the leader at least every ttl/3 (one sync per client, shared by
 * its locks; see zk_confirm) and the core's watchdog declares every lock
 * lost when no proof came for 2/3 of the negotiated session timeout past
 * its send time — before the leader can expire the session and let another
 * client in. Reads are no proof: a follower cut off from the leader answers
 * them while the leader expires the session.
 * Session expiry and the deletion of a holder's node (dlock break) are
 * reported at once through watches.
 *
 * Only the asynchronous API of the C client is used: its synchronous calls
 * cannot be bounded by a deadline. Each request is a zk_call, listed in the
 * client; the waiter polls an eventfd (and the cancel descriptor) while the
 * client's completion thread fills the call in. A waiter that gives up
 * leaves the call to the completion, which frees it (and deletes a node
 * created too late).
 */
#include "internal.h"
#include "support/support.h"
#include "zk_nodes.h"

static const dl_scheme zk_schemes[] = {
    {"zk", "zk", 2181, true, DL_PATH_CHROOT},
    {NULL, NULL, 0, false, DL_PATH_NONE},
};

/* The facts, the same whether the client library is built in or not. */
#define ZK_CAPS                                                                              \
    (DLOCK_CAP_FENCING | DLOCK_CAP_FAIR | DLOCK_CAP_SHARED | DLOCK_CAP_SEMAPHORE |           \
     DLOCK_CAP_SESSION | DLOCK_CAP_NATIVE_BLOCKING | DLOCK_CAP_ELECTION | DLOCK_CAP_CLAIMS)
#define ZK_LIVENESS                                                                          \
    "ephemeral znode of the client's session: gone when the session ends or expires; the "  \
    "holder is told before the leader can expire it (no sync answered through the leader "  \
    "for 2/3 of the session timeout); a paused holder learns only when it runs again "       \
    "(fencing catches it)"
#define ZK_FENCING                                                                           \
    "creation zxid of the holder's znode: rises with every write of the ensemble, across "   \
    "leader changes, while a quorum lives; in ?layout=curator, curator-rw and kazoo (Curator's " \
    "and kazoo's lock nodes, no semaphores; curator: no shared locks) it orders the peers' "   \
    "holders too"

#ifdef DLOCK_HAVE_ZK
#include "zk_int.h"

#include <zookeeper/zookeeper.h>

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define ZK_DEFAULT_SESSION_MS 10000

zkclient *zc_of(dlock_client *c)
{
    return c->bstate;
}

/* dir/name into buf: false if it does not fit. */
bool zk_pjoin(char *buf, size_t len, const char *dir, const char *name)
{
    int n = snprintf(buf, len, "%s/%s", dir, name);
    return n >= 0 && (size_t)n < len;
}

/* ---- acquisition ------------------------------------------------------------------ */

/* Why dlock's layout will not lock beside a child it does not make (kid,
 * of parent): what it is and the layout that would speak it. Another
 * library's contender there would take the lock by its own rule while we
 * hold it by ours. */
static const char *foreign_why(const char *parent, const char *kid, char *buf, size_t len)
{
    static const char *const whose[ZK_LAYOUTS] = {
        [ZK_LAYOUT_CURATOR] = "an Apache Curator InterProcessMutex node",
        [ZK_LAYOUT_CURATOR_RW] = "an Apache Curator InterProcessReadWriteLock node",
        [ZK_LAYOUT_KAZOO] = "a kazoo Lock node",
    };
    int peer = zk_foreign_layout(kid);
    if (peer > 0)
        snprintf(buf, len,
                 "%.250s holds \"%.80s\", %s, not one of dlock's: refused rather than ignored; "
                 "to lock beside %s, use ?layout=%s with the lock's path (docs/zk.md)",
                 parent, kid, whose[peer], peer == ZK_LAYOUT_KAZOO ? "kazoo" : "Curator",
                 zk_layout_name(peer));
    else
        snprintf(buf, len,
                 "%.250s holds \"%.80s\", a node not of dlock's making: refused rather than "
                 "ignored (?layout=curator, curator-rw or kazoo speak those libraries' "
                 "nodes; docs/zk.md)",
                 parent, kid);
    return buf;
}

/* Our node, found by the owner id in its name after a create whose reply
 * was lost, if it belongs to this session (a node of an older session is
 * never ours to hold). ZOK with path and czxid, ZNONODE if none. The read
 * follows a sync (pipelined: a session's requests are served in order):
 * the member may be one the session just moved to, behind the leader, and
 * a create the leader took must be seen; one it did not take never will
 * be (see session_move). */
static int find_own(zk_op *op, dlock_lock *l, int64_t until_ns, char *path, size_t len,
                    int64_t *czxid)
{
    zklock *zl = l->bstate;
    zk_call *sync = zk_send(op, CALL_SYNC, zk_sync_path(op->zc), NULL, 0, NULL);
    zk_call *kids = zk_send(op, CALL_CHILDREN, zl->parent, NULL, 0, NULL);
    int rc = zk_result(op, kids, until_ns);
    int synced = rc == ZOK ? zk_result(op, sync, until_ns) : rc; /* answered before kids */
    zk_call_drop(sync);
    if (rc == ZOK && synced != ZOK)
        rc = synced;
    if (rc != ZOK) {
        zk_call_drop(kids);
        return rc;
    }
    int found = -1;
    size_t leaf_len = strlen(zl->leaf);
    for (int i = 0; i < kids->nkids && found < 0; i++)
        if (strncmp(kids->kids[i], zl->leaf, leaf_len) == 0)
            found = i;
    if (found >= 0 && !zk_pjoin(path, len, zl->parent, kids->kids[found]))
        found = -1;
    zk_call_drop(kids);
    if (found < 0)
        return ZNONODE;
    zk_call *st = NULL;
    rc = zk_do(op, CALL_STAT, path, NULL, until_ns, &st);
    if (rc != ZOK)
        return rc;
    const clientid_t *me = zoo_client_id(op->zh);
    bool mine = me && st->stat.ephemeralOwner == me->client_id;
    *czxid = st->stat.czxid;
    zk_call_drop(st);
    if (!mine) {
        (void)zk_do(op, CALL_VOID, path, NULL, until_ns, NULL);
        return ZNONODE;
    }
    return ZOK;
}

/* True when rc says the session is over (the handle is expired, or was
 * when the request was made), and then notes it: a process stopped past
 * its timeout hears of it from a request before the watcher does, and the
 * next op_begin must start a new session. */
static bool session_ended(zkclient *zc, int rc)
{
    if (rc != ZSESSIONEXPIRED && rc != ZINVALIDSTATE)
        return false;
    pthread_mutex_lock(&zc->mu);
    zc->expired = true;
    pthread_mutex_unlock(&zc->mu);
    return true;
}

/* Lost replies an acquisition sends its requests again after (each after
 * a reconnection): a bound for a connection that drops as soon as it is up. */
#define ZK_LOST_MAX 32

/*
 * A request of an acquisition got no reply (rc, see reply_lost): true when
 * it may be sent again — the session is connected again (moved off a member
 * silent for op_timeout_ms, see session_move) before retry_until (-1:
 * never too late). A waiter with time left never gives up on a lost reply:
 * the member it went to may be stopped or cut off while the others serve.
 * A wait for the connection that its deadline ends is an outage run out
 * (l->outage: unreachable, not timed out, as on every backend).
 */
static bool acq_retry(zk_op *op, dlock_lock *l, int64_t retry_until, int rc, int *lost)
{
    if (!zk_reply_lost(rc) || ++*lost > ZK_LOST_MAX)
        return false;
    if (rc == ZOPERATIONTIMEOUT)
        zk_session_move(op->zc, op->zh);
    if (retry_until >= 0 && dl_now_ns() >= retry_until)
        return false;
    if (zk_wait_connected(op->zc, retry_until))
        return true;
    l->outage = true;
    return false;
}

/* Until when an acquisition sends a request again after its reply was lost
 * (see acq_retry): a waiter until its deadline; a try, which waits for no
 * lock but still for the server's answer (as Curator's and kazoo's do), as
 * long as one request may take (op_timeout_ms from its start). A
 * connection dropped for a moment (the C client drops one silent for 2/3
 * of the session; the session lives on) then costs a try nothing. */
static int64_t acq_retry_until(dlock_lock *l, int64_t deadline)
{
    return deadline != 0 ? deadline : zk_req_until(l);
}

/* Create our node and read the queue (pipelined: a session's requests are
 * served in order, so the read sees the create). ZOK with zl->path set and
 * *kids the queue's read in flight. A create whose reply is lost (*unknown)
 * is not sent again before our node is known not to be there (find_own):
 * one left behind would block the queue — us included — until the session
 * ends (Curator's "protected" mode, with the owner id as its GUID). */
static int enqueue(zk_op *op, dlock_lock *l, int64_t retry_until, int64_t *czxid, zk_call **kids,
                   bool *unknown, int64_t *created_sent)
{
    zkclient *zc = op->zc;
    zklock *zl = l->bstate;
    char prefix[ZK_PATH_MAX], data[sizeof zc->self + 2];
    /* (A semaphore of one, which every layout takes, is a peer's
     * exclusive lock.) */
    char kind = l->opts.kind == DLOCK_SHARED ? 'r'
                : l->opts.kind == DLOCK_SEMAPHORE && zc->layout == ZK_LAYOUT_DLOCK ? 's'
                                                                                 : 'x';
    if (zk_leaf_format(zc->layout, kind, l->opts.permits, l->owner, zl->leaf,
                       sizeof zl->leaf) < 0 ||
        !zk_pjoin(prefix, sizeof prefix, zl->parent, zl->leaf))
        return ZBADARGUMENTS;
    snprintf(data, sizeof data, "%s\n", zc->self);
    int parents = 0, lost = 0;
    for (;;) {
        int rc;
        if (*unknown) {
            rc = find_own(op, l, zk_req_until(l), zl->path, sizeof zl->path, czxid);
            if (rc == ZOK) {
                *unknown = false;
                *created_sent = 0; /* found by reads: proves nothing of the session */
                *kids = zk_send(op, CALL_CHILDREN, zl->parent, NULL, 0, NULL);
                return ZOK;
            }
            if (rc == ZNONODE) {
                *unknown = false; /* not there, and never will be: create again */
                continue;
            }
        } else {
            *created_sent = dl_now_ns();
            zk_call *cr =
                zk_send(op, CALL_CREATE, prefix, data, ZOO_EPHEMERAL_SEQUENTIAL, &zc->acl);
            *kids = zk_send(op, CALL_CHILDREN, zl->parent, NULL, 0, NULL);
            rc = zk_result(op, cr, zk_req_until(l));
            if (rc == ZOK) {
                snprintf(zl->path, sizeof zl->path, "%s", cr->path);
                *czxid = cr->stat.czxid;
                zk_call_drop(cr);
                return ZOK;
            }
            zk_call_drop(cr);
            zk_call_drop(*kids);
            *kids = NULL;
            if (rc == ZNONODE && parents++ < 3) {
                rc = zk_ensure_parent(op, zl->parent, zk_req_until(l));
                if (rc == ZOK)
                    continue;
            } else if (zk_reply_lost(rc) || rc == ZSYSTEMERROR) {
                *unknown = true; /* created or not: the reply is lost */
            }
        }
        if (!acq_retry(op, l, retry_until, rc, &lost))
            return rc;
    }
}

/* Give our node up (timeout, cancel, error, a failed try): stop watching
 * it and delete it; a deletion (or a creation) whose outcome is unknown
 * leaves an orphan, deleted once the connection is back. */
static void give_up(zk_op *op, dlock_lock *l, bool unknown)
{
    zklock *zl = l->bstate;
    zk_own_drop(l);
    if (zl->path[0]) {
        /* The delete goes out in any case; its reply is waited for within
         * the caller's bound (deadline + margin) and no longer: one that
         * has not come by then makes an orphan, deleted in the background
         * (waiting 20 ms more overran the bound, issue 23). */
        int64_t until = l->op_deadline_ns ? l->op_deadline_ns : zk_op_until(op->zc);
        int rc = zk_do(op, CALL_VOID, zl->path, NULL, until, NULL);
        if (rc != ZOK && rc != ZNONODE)
            unknown = true;
        zl->path[0] = '\0';
    }
    pthread_mutex_lock(&op->zc->mu);
    bool expired = op->zc->expired; /* its nodes went with it */
    pthread_mutex_unlock(&op->zc->mu);
    if (unknown && !expired)
        zk_orphan_add(op->zc, zl->parent, zl->leaf);
}

static const char *base_name(const char *path)
{
    const char *s = strrchr(path, '/');
    return s ? s + 1 : path;
}

/* An acquisition's failure: a request cut short by the caller's deadline is
 * a timeout (DLOCK_ETIMEDOUT), not an unreachable server, unless the
 * deadline came while the session waited for a connection (see acq_retry). */
static int acq_fail(dlock_lock *l, int64_t deadline, int rc, const char *what)
{
    zkclient *zc = zc_of(l->c);
    char err[300];
    if (zk_reply_lost(rc) && dl_deadline_cut(l, DLOCK_EUNREACHABLE, deadline))
        return dl_lock_err(l, DLOCK_ETIMEDOUT,
                           "lock \"%s\": not acquired in time (no reply from ZooKeeper %s "
                           "before the deadline)",
                           l->name, what);
    return dl_lock_err(l, zk_code(rc), "lock \"%s\": %s: %s (%s)", l->name, what,
                       zk_why(zc, rc, err, sizeof err), zc->redacted);
}

/*
 * Wait for the watch w on our predecessor (*q)[*b] to fire (0), the
 * deadline or a cancel; the view is *q (names in *snap), *n nodes, ours at
 * *i. An exclusive waiter also watches the node before its
 * predecessor: once that one goes the predecessor most likely holds, and
 * the waiter reads the queue then, while it holds, so that the
 * predecessor's going lets it in at once — no read on the hand-over's path,
 * and no write either (the predecessor used to touch its node to say it
 * held: a flush per hand-over on a durable ensemble, issue 24). The view
 * is replaced by the fresher one when the predecessor is the same; a node
 * is then watched by at most its owner and two successors.
 */
static int wait_pred(zk_op *op, dlock_lock *l, zk_call *w, zk_call **snap, zk_node **q, int *n,
                     int *i, int *b, int64_t deadline, int cancel_fd)
{
    zklock *zl = l->bstate;
    const bool *lost = zl->own ? &zl->own->lost : NULL;
    zk_call *w2 = NULL;
    bool second = (*q)[*i].pos.kind == 'x' && *b == *i - 1;
    int rc;
    for (;;) {
        bool refresh = false;
        char path[ZK_PATH_MAX];
        if (second && !w2 && *b >= 1 &&
            zk_pjoin(path, sizeof path, zl->parent, (*q)[*b - 1].name)) {
            w2 = zk_watch(op, CALL_STAT, path);
            int rc2 = zk_result(op, w2, zk_req_until(l));
            if (rc2 == ZNONODE) {
                refresh = true; /* gone already */
            } else if (rc2 != ZOK) {
                zk_call_drop(w2); /* (a lost reply: the predecessor's watch goes on) */
                w2 = NULL;
                second = false;
            }
        }
        if (!refresh) {
            rc = zk_call_wait_for(w, &w->fired, lost, w2 ? &w2->fired : NULL, op->evfd, deadline,
                               cancel_fd);
            if (rc || w->fired || !w2 || !w2->fired)
                break;
        }
        zk_call_drop(w2);
        w2 = NULL;
        /* The node before the predecessor went: read the queue. */
        zk_call *kids = NULL;
        zk_node *q2 = NULL;
        int n2 = -1, j = 0;
        if (zk_do(op, CALL_CHILDREN, zl->parent, NULL, zk_req_until(l), &kids) == ZOK)
            n2 = zk_queue_of(op->zc->layout, kids->kids, kids->nkids, &q2, NULL);
        while (j < n2 && strcmp(q2[j].name, (*q)[*i].name) != 0)
            j++;
        if (j >= 1 && j < n2 && strcmp(q2[j - 1].name, (*q)[*b].name) == 0) {
            free(*q);
            zk_call_drop(*snap);
            *snap = kids;
            *q = q2;
            *n = n2;
            *i = j;
            *b = j - 1;
        } else {
            /* the predecessor went meanwhile (its watch says so), or no
             * reply: wait on its watch alone */
            free(q2);
            zk_call_drop(kids);
            second = false;
        }
    }
    zk_call_drop(w2);
    return rc;
}

/* A waiter's state in its queue (dl_queue_acquire's ctx). */
typedef struct zk_waiting {
    zk_op *op;
    dlock_lock *l;
    const char *mine; /* our node's name */
    int64_t deadline;
    int cancel_fd;
    int nlost;     /* replies lost after the create (acq_retry) */
    zk_call *kids; /* a read of the queue under way (NULL: send one) */
    zk_call *snap; /* the last queue read (q's names point into it) */
    zk_node *q;
    int n, i; /* q's length, our place in it */
} zk_waiting;

static int zk_wait_read(void *arg, const void **queue, size_t *stride, int *i)
{
    zk_waiting *z = arg;
    dlock_lock *l = z->l;
    zkclient *zc = zc_of(l->c);
    zklock *zl = l->bstate;
    for (bool swept = false;; swept = true) {
        for (;;) {
            if (!z->kids)
                z->kids = zk_send(z->op, CALL_CHILDREN, zl->parent, NULL, 0, NULL);
            int rc = zk_result(z->op, z->kids, zk_req_until(l));
            if (rc == ZOK)
                break;
            if (!acq_retry(z->op, l, z->deadline, rc, &z->nlost)) {
                (void)session_ended(zc, rc); /* then *again: queue in a new one */
                return acq_fail(l, z->deadline, rc, "reading its queue");
            }
            zk_call_drop(z->kids);
            z->kids = NULL;
        }
        free(z->q);
        z->q = NULL;
        zk_call_drop(z->snap);
        z->snap = z->kids;
        z->kids = NULL;
        int foreign;
        z->n = zk_queue_of(zc->layout, z->snap->kids, z->snap->nkids, &z->q, &foreign);
        if (z->n < 0)
            return dl_lock_err(l, DLOCK_ENOMEM, "out of memory");
        if (foreign >= 0 && zc->layout == ZK_LAYOUT_DLOCK) {
            char why[600];
            return dl_lock_err(l, DLOCK_ECONFLICT, "lock \"%s\": %s", l->name,
                               foreign_why(zl->parent, z->snap->kids[foreign], why, sizeof why));
        }
        /* A node of ours that is not ours to keep: a create whose reply
         * was lost, which the server applied after find_own's read had
         * said it was not there (the request sat in the dropped
         * connection, read once the stopped server ran again, beside the
         * new connection's reads). Ahead of ours it holds the lock
         * against us; behind, it outlives our release: delete it, read
         * again. */
        size_t leaf_len = strlen(zl->leaf);
        bool dropped = false;
        for (int k = 0; k < z->n; k++) {
            char path[ZK_PATH_MAX];
            if (strcmp(z->q[k].name, z->mine) == 0 ||
                strncmp(z->q[k].name, zl->leaf, leaf_len) != 0 ||
                !zk_pjoin(path, sizeof path, zl->parent, z->q[k].name))
                continue;
            int rc = zk_do(z->op, CALL_VOID, path, NULL, zk_req_until(l), NULL);
            dropped = dropped || rc == ZOK || rc == ZNONODE;
        }
        if (dropped && !swept)
            continue;
        z->i = 0;
        while (z->i < z->n && strcmp(z->q[z->i].name, z->mine) != 0)
            z->i++;
        *queue = z->q;
        *stride = sizeof *z->q;
        *i = z->i < z->n ? z->i : -1;
        return 0;
    }
}

/* A wait in the queue that its deadline ended (rc DLOCK_ETIMEDOUT) while
 * the session had no connection (no member answering: a restart, no
 * quorum) is an outage run out: unreachable, as on every backend; a time-out
 * would say the lock was taken. Connected, it is a time-out. */
static int wait_ended(dlock_lock *l, int rc)
{
    zkclient *zc = zc_of(l->c);
    if (rc != DLOCK_ETIMEDOUT)
        return rc;
    pthread_mutex_lock(&zc->mu);
    int64_t since = zc->state != ZOO_CONNECTED_STATE ? zc->disconnected_ns : 0;
    pthread_mutex_unlock(&zc->mu);
    if (!since)
        return rc;
    l->outage = true;
    return dl_lock_err(l, DLOCK_EUNREACHABLE,
                       "lock \"%s\": not acquired: no ZooKeeper server answered for the last "
                       "%lld ms of its wait (%s)",
                       l->name, (long long)((dl_now_ns() - since) / 1000000), zc->redacted);
}

/* Watch the one node whose going can let us in (b; WATCH_CHILDREN: the
 * children) and wait. */
static int zk_wait_on(void *arg, int b, bool *in)
{
    zk_waiting *z = arg;
    dlock_lock *l = z->l;
    zkclient *zc = zc_of(l->c);
    zklock *zl = l->bstate;
    char watched[ZK_PATH_MAX];
    if (b >= 0 && !zk_pjoin(watched, sizeof watched, zl->parent, z->q[b].name))
        b = WATCH_CHILDREN; /* (names of ours always fit) */
    zk_call *w = zk_watch(z->op, b == WATCH_CHILDREN ? CALL_CHILDREN : CALL_STAT,
                          b == WATCH_CHILDREN ? zl->parent : watched);
    int rc = zk_result(z->op, w, zk_req_until(l));
    if (rc == ZOK && b == WATCH_CHILDREN) {
        /* The reply is the queue as the watch began: it may let us in. */
        zk_node *q2 = NULL;
        int n2 = zk_queue_of(zc->layout, w->kids, w->nkids, &q2, NULL);
        int j = 0;
        while (j < n2 && strcmp(q2[j].name, z->mine) != 0)
            j++;
        *in = n2 > 0 && j < n2 && zk_blocker(q2, j) == HOLDS;
        free(q2);
    }
    if (rc == ZOK && !*in) {
        rc = wait_pred(z->op, l, w, &z->snap, &z->q, &z->n, &z->i, &b, z->deadline, z->cancel_fd);
        if (rc) {
            zk_call_drop(w);
            return rc == DLOCK_ECANCELED ? rc
                   : rc == DLOCK_ETIMEDOUT
                       ? wait_ended(l, rc)
                       : dl_lock_err(l, rc, "lock \"%s\": waiting in its queue: %s", l->name,
                                     dlock_strerror(rc));
        }
        rc = w->event == ZOO_DELETED_EVENT ? ZNONODE
             : w->event == ZOO_CHANGED_EVENT ? ZNODEEXISTS
                                              : ZOK;
    } else if (rc != ZOK && rc != ZNONODE && !acq_retry(z->op, l, z->deadline, rc, &z->nlost)) {
        zk_call_drop(w);
        (void)session_ended(zc, rc);
        return acq_fail(l, z->deadline, rc, "watching its queue");
    }
    zk_call_drop(w);
    if (*in || b == WATCH_CHILDREN || rc != ZNONODE)
        return 0; /* read the queue again (unless in; after a lost reply, connected again) */
    /* The node we waited for is gone. Nodes only ever leave the part of
     * the queue before ours (later ones get higher sequence numbers): if
     * what is left of the last read lets us in, it holds now — no need to
     * read the queue again. If not, what is left may be long gone too: one
     * read of the queue rather than a watch on each. */
    memmove(&z->q[b], &z->q[b + 1], sizeof *z->q * (size_t)(z->n - b - 1));
    z->n--;
    z->i--;
    *in = zk_blocker(z->q, z->i) == HOLDS;
    return 0;
}

/* The session is the lease: a lock is valid for 2/3 of its timeout past
 * the last reply asked for (see the top of this file) — the timeout the
 * servers granted, or while none was (a client opened during an election
 * has no session yet) the one asked for. */
static int span_ms(zkclient *zc)
{
    pthread_mutex_lock(&zc->mu);
    int t = zc->negotiated_ms ? zc->negotiated_ms : zc->session_ms;
    pthread_mutex_unlock(&zc->mu);
    return t * 2 / 3 < 30 ? 30 : t * 2 / 3;
}

/* One try; *again when the session expired while it waited (its node went
 * with it) and a new session may try again. A waiter also tries again
 * when no member serves a new session (an election, an outage longer than
 * the session): it rides that out until its deadline, as the C client's
 * own reconnection did before the session counted as expired on the
 * client's side too (silent_expiry). The opening is cut to the
 * acquisition's own bound. */
static int acquire_once(dlock_lock *l, int64_t deadline, bool *again)
{
    zkclient *zc = zc_of(l->c);
    zklock *zl = l->bstate;
    zk_op op;
    char err[300];
    int64_t open_until = dl_deadline_in(dl_op_timeout_ms(l, zc->connect_ms));
    int rc = zk_op_begin_by(zc, true, open_until, &op, err, sizeof err);
    if (rc) {
        *again = deadline != 0 && rc == DLOCK_EUNREACHABLE;
        return dl_lock_err(l, rc, "lock \"%s\": %s (%s)", l->name, err, zc->redacted);
    }
    int cancel_fd = deadline != 0 ? dl_cancel_fd(l) : -1;
    int64_t czxid = 0;
    bool unknown = false, waited = false;
    zk_call *kids = NULL;
    zl->path[0] = '\0';
    /* When the last request the leader answered was sent (our create, a
     * write, or a sync): the lock's validity runs from there (see
     * zk_renew), not from the start of a wait that may have lasted longer
     * than the validity itself. Reads and watches answered by our member
     * do not count (see zk_confirm). */
    int64_t asked = 0, retry_until = acq_retry_until(l, deadline);
    rc = enqueue(&op, l, retry_until, &czxid, &kids, &unknown, &asked);
    if (session_ended(zc, rc)) {
        /* The session ended before the client heard of it (a process
         * stopped past its timeout): start a new one and queue there. */
        zk_op_end(&op);
        rc = zk_op_begin_by(zc, true, open_until, &op, err, sizeof err);
        if (rc)
            return dl_lock_err(l, rc, "lock \"%s\": %s (%s)", l->name, err, zc->redacted);
        zl->path[0] = '\0';
        unknown = false; /* (the old session's nodes went with it) */
        rc = enqueue(&op, l, retry_until, &czxid, &kids, &unknown, &asked);
    }
    if (rc != ZOK) {
        /* The session expired while the create's reply was lost (a stall
         * longer than the session: the node, if made, went with it): a
         * wait may go on in a new session, as one that expired while it
         * waited does. */
        pthread_mutex_lock(&zc->mu);
        *again = zc->expired && deadline != 0 && zk_reply_lost(rc);
        pthread_mutex_unlock(&zc->mu);
        give_up(&op, l, unknown);
        zk_op_end(&op);
        return acq_fail(l, deadline, rc, "creating its node");
    }
    zl->own = zk_own_arm(l, &op, zl->path);
    zk_waiting z = {.op = &op,
                    .l = l,
                    .mine = base_name(zl->path),
                    .deadline = deadline,
                    .cancel_fd = cancel_fd,
                    .kids = kids};
    dl_queue_waiter qw = {.read = zk_wait_read,
                          .wait = zk_wait_on,
                          .ctx = &z,
                          .vanished = "its queue node vanished while it waited (the session "
                                      "expired, or dlock break)",
                          .where = zc->redacted};
    int result = dl_queue_acquire(l, deadline, &qw, &waited);
    free(z.q);
    zk_call_drop(z.snap);
    zk_call_drop(z.kids);
    if (result == 0) {
        pthread_mutex_lock(&zc->mu);
        bool lost = !zl->own || zl->own->lost;
        if (!lost) {
            zl->own->held = true;
            zl->own->evfd = -1;
        }
        pthread_mutex_unlock(&zc->mu);
        if (lost)
            result = dl_lock_err(l, zl->own ? DLOCK_EUNREACHABLE : DLOCK_ENOMEM,
                                 "lock \"%s\": its node vanished as it was granted (%s)",
                                 l->name, zc->redacted);
    }
    if (result) {
        pthread_mutex_lock(&zc->mu);
        *again = zc->expired && deadline != 0 && result != DLOCK_ETIMEDOUT &&
                 result != DLOCK_ECANCELED;
        pthread_mutex_unlock(&zc->mu);
        give_up(&op, l, false);
        zk_op_end(&op);
        return result;
    }
    if (waited && zl->kind[0] == 's' && zc->layout == ZK_LAYOUT_DLOCK) {
        /* Our successor watches us: a semaphore's next waiter becomes the
         * first, which watches the children. The reply does not matter;
         * the watch does. (Not for an exclusive lock: telling the next
         * waiter that we hold would save it one read of the queue after
         * we go, at the price of a write — a flush on a durable ensemble —
         * per hand-over, issue 24.) */
        char data[sizeof zc->self + 2];
        snprintf(data, sizeof data, "%s\n", zc->self);
        zk_call_drop(zk_send(&op, CALL_SET, zl->path, data, 0, NULL));
    }
    /* After a long wait the last proof may be too old for the grant to be
     * worth anything (the core would give it back and queue again, behind
     * later waiters): ask the leader once more. */
    pthread_mutex_lock(&zc->mu);
    if (zc->confirmed_ns > asked)
        asked = zc->confirmed_ns;
    pthread_mutex_unlock(&zc->mu);
    /* Made before its client had a session, the lock took the span of the
     * timeout asked for; the servers may have granted less (their
     * maxSessionTimeout), and a longer span would be declared lost after
     * the leader could expire the session. (Not held yet: only this thread
     * reads it.) */
    l->opts.ttl_ms = span_ms(zc);
    if (dl_now_ns() - asked > dl_ms_to_ns(l->opts.ttl_ms) / 3)
        (void)zk_confirm(&op, zk_req_until(l), &asked);
    l->lease_start_ns = asked;
    zk_op_end(&op);
    atomic_store(&l->token, (uint64_t)czxid);
    return 0;
}

static int zk_acquire(dlock_lock *l, int64_t deadline)
{
    for (;;) {
        bool again = false;
        int rc = acquire_once(l, deadline, &again);
        if (rc == 0 || !again || (deadline > 0 && dl_now_ns() >= deadline))
            return rc;
        /* The session expired while we waited: a new session, a place at
         * the back of the queue, the same deadline; a new owner id, so
         * that nothing left of the old try can match the new node. */
        rc = dl_lock_new_owner(l);
        if (rc)
            return rc;
    }
}

static int zk_release(dlock_lock *l)
{
    zkclient *zc = zc_of(l->c);
    zklock *zl = l->bstate;
    zk_own_drop(l);
    zk_op op;
    char err[300];
    int rc = zk_op_begin(zc, false, &op, err, sizeof err);
    if (rc) {
        zl->path[0] = '\0';
        return dl_lock_err(l, rc == DLOCK_ELOST ? DLOCK_ELOST : rc,
                           "lock \"%s\": %s: its node is gone with it (%s)", l->name, err,
                           zc->redacted);
    }
    rc = zk_do(&op, CALL_VOID, zl->path, NULL, zk_req_until(l), NULL);
    if (rc == ZOPERATIONTIMEOUT)
        zk_session_move(zc, op.zh);
    if (zk_reply_lost(rc) && zk_wait_connected(zc, zk_req_until(l))) /* the session resumed */
        rc = zk_do(&op, CALL_VOID, zl->path, NULL, zk_req_until(l), NULL);
    (void)session_ended(zc, rc); /* (a holder paused past its session hears it here first) */
    pthread_mutex_lock(&zc->mu);
    if (rc != ZOK && zc->expired)
        rc = ZNONODE; /* the session ended: its nodes are gone */
    pthread_mutex_unlock(&zc->mu);
    int result = 0;
    if (rc == ZNONODE)
        result = dl_lock_err(l, DLOCK_ELOST, "lock \"%s\" was lost: its node was already gone",
                             l->name);
    else if (rc != ZOK) {
        zk_orphan_add(zc, zl->parent, zl->leaf);
        result = dl_lock_err(l, zk_code(rc),
                             "lock \"%s\": release not confirmed: %s; its node is deleted when "
                             "the connection returns, or with the session (%s)",
                             l->name, zk_why(zc, rc, err, sizeof err), zc->redacted);
    }
    zl->path[0] = '\0';
    zk_op_end(&op);
    return result;
}

static void zk_abandon(dlock_lock *l)
{
    zklock *zl = l->bstate;
    /* A node seen deleted, or gone with its session, has nothing left to
     * delete; and the loss was told on the C client's completion thread,
     * where a loss callback that releases would otherwise wait for a
     * completion only that thread can deliver (and the session would
     * expire behind it, every lock of the client with it). */
    bool gone = false;
    if (zl->own) {
        pthread_mutex_lock(&zc_of(l->c)->mu);
        gone = zl->own->lost;
        pthread_mutex_unlock(&zc_of(l->c)->mu);
    }
    if (zl->path[0] && !gone)
        (void)zk_release(l);
    else
        zk_own_drop(l);
    zl->path[0] = '\0';
}

/* Liveness: one sync answered through the leader within ttl/6 (shared by
 * all the client's locks) extends every lock's validity from when it was
 * sent. */
static int zk_renew(dlock_lock *l)
{
    zkclient *zc = zc_of(l->c);
    zklock *zl = l->bstate;
    pthread_mutex_lock(&zc->mu);
    bool gone = (zl->own && zl->own->lost) || zc->expired;
    int64_t now = dl_now_ns(), confirmed = zc->confirmed_ns, disc = zc->disconnected_ns;
    pthread_mutex_unlock(&zc->mu);
    if (gone)
        return dl_lock_err(l, DLOCK_ELOST, "lock \"%s\": its node is gone (session expired, or "
                                           "dlock break)", l->name);
    if (confirmed && now - confirmed < dl_ms_to_ns(l->opts.ttl_ms) / 6) {
        l->lease_start_ns = confirmed;
        return 0;
    }
    if (disc)
        return dl_lock_err(l, DLOCK_EUNREACHABLE,
                           "lock \"%s\" is uncertain: disconnected from ZooKeeper for %lld ms; "
                           "it is lost %d ms after the last reply unless the session resumes",
                           l->name, (long long)((now - disc) / 1000000), l->opts.ttl_ms);
    zk_op op;
    char err[300];
    int rc = zk_op_begin(zc, false, &op, err, sizeof err);
    if (rc)
        return dl_lock_err(l, rc, "lock \"%s\": %s", l->name, err);
    int64_t sent = 0;
    rc = zk_confirm(&op, zk_req_until(l), &sent);
    zk_op_end(&op);
    if (rc == ZOK) {
        l->lease_start_ns = sent;
        return 0;
    }
    if (session_ended(zc, rc))
        return dl_lock_err(l, DLOCK_ELOST, "lock \"%s\": the ZooKeeper session expired", l->name);
    return dl_lock_err(l, zk_code(rc), "lock \"%s\" is uncertain: %s", l->name,
                       zk_why(zc, rc, err, sizeof err));
}

/* ---- what is known about a name ----------------------------------------------------- */

/* read_queue's answer for a queue that dlock's layout refuses (foreign_why
 * says why): not a code of ZooKeeper's. */
#define ZK_FOREIGN (-9000)

/* The queue of name now: *q (malloc'd, names into *kids), its length, or
 * a negative ZooKeeper code (ZK_FOREIGN: why says why); ZNONODE gives an
 * empty queue. */
static int read_queue(zk_op *op, const char *parent, zk_call **kids, zk_node **q, char *why,
                      size_t whylen)
{
    *kids = NULL;
    *q = NULL;
    int rc = zk_do(op, CALL_CHILDREN, parent, NULL, zk_op_until(op->zc), kids);
    if (rc == ZNONODE)
        return 0;
    if (rc != ZOK)
        return rc;
    int foreign;
    int n = zk_queue_of(op->zc->layout, (*kids)->kids, (*kids)->nkids, q, &foreign);
    if (n >= 0 && foreign >= 0 && op->zc->layout == ZK_LAYOUT_DLOCK) {
        foreign_why(parent, (*kids)->kids[foreign], why, whylen);
        free(*q);
        *q = NULL;
        zk_call_drop(*kids);
        *kids = NULL;
        return ZK_FOREIGN;
    }
    return n < 0 ? ZSYSTEMERROR : n;
}

int zk_parent_of(zkclient *zc, const char *name, char *buf, size_t len)
{
    return zk_pjoin(buf, len, zc->base, name) ? 0 : -1;
}

/* A failure of what ("inspect", ...) on name: rc a ZooKeeper code, or
 * ZK_FOREIGN with why. */
static int name_fail(dlock_client *c, const char *what, const char *name, int rc,
                     const char *why)
{
    zkclient *zc = zc_of(c);
    char err[300];
    if (rc == ZK_FOREIGN)
        return dl_client_err(c, DLOCK_ECONFLICT, "%s \"%s\": %s", what, name, why);
    return dl_client_err(c, zk_code(rc), "%s \"%s\": %s (%s)", what, name,
                         zk_why(zc, rc, err, sizeof err), zc->redacted);
}

/* The first holder of name and its node's data/stat (*k, given up by the
 * caller), the counts, or a ZooKeeper code (ZK_FOREIGN: why says why);
 * ZNONODE when nobody holds. */
static int first_holder(zk_op *op, const char *name, int *holders, int *waiters, zk_call **k,
                        char *path, size_t len, char *why, size_t whylen)
{
    char parent[ZK_PATH_MAX];
    if (zk_parent_of(op->zc, name, parent, sizeof parent))
        return ZBADARGUMENTS;
    for (int tries = 0; tries < 5; tries++) {
        zk_call *kids;
        zk_node *q;
        int n = read_queue(op, parent, &kids, &q, why, whylen);
        if (n < 0)
            return n;
        int first, h = dl_queue_holders(q, sizeof *q, n, &first);
        if (first >= 0 && !zk_pjoin(path, len, parent, q[first].name))
            first = -1;
        free(q);
        zk_call_drop(kids);
        *holders = h;
        *waiters = n - h;
        if (first < 0)
            return ZNONODE;
        int rc = zk_do(op, CALL_DATA, path, NULL, zk_op_until(op->zc), k);
        if (rc != ZNONODE)
            return rc; /* (a holder that left meanwhile: look again) */
    }
    return ZOPERATIONTIMEOUT;
}

static int zk_inspect(dlock_client *c, const char *name, dlock_info *info)
{
    zkclient *zc = zc_of(c);
    zk_op op;
    char err[300], path[ZK_PATH_MAX];
    int rc = zk_op_begin(zc, true, &op, err, sizeof err);
    if (rc)
        return dl_client_err(c, rc, "inspect \"%s\": %s (%s)", name, err, zc->redacted);
    zk_call *k = NULL;
    int holders = 0, waiters = 0;
    char why[600];
    rc = first_holder(&op, name, &holders, &waiters, &k, path, sizeof path, why, sizeof why);
    zk_op_end(&op);
    info->lease_ms = -1;
    info->holders = holders;
    info->waiters = waiters;
    if (rc == ZNONODE) {
        info->held = 0;
        return 0;
    }
    if (rc != ZOK)
        return name_fail(c, "inspect", name, rc, why);
    info->held = 1;
    info->token = (uint64_t)k->stat.czxid;
    /* The server's clock stamped the node when it queued. */
    long long ms = (long long)(dl_realtime_ms() - k->stat.ctime);
    info->held_ms = ms < 0 ? 0 : ms;
    zk_split_data(k->data, info->holder, sizeof info->holder);
    zk_call_drop(k);
    return 0;
}

static int zk_break(dlock_client *c, const char *name, dlock_info *info)
{
    zkclient *zc = zc_of(c);
    zk_op op;
    char err[300], parent[ZK_PATH_MAX];
    if (zk_parent_of(zc, name, parent, sizeof parent))
        return dl_client_err(c, DLOCK_ENAME, "break \"%s\": name too long for the chroot", name);
    int rc = zk_op_begin(zc, true, &op, err, sizeof err);
    if (rc)
        return dl_client_err(c, rc, "break \"%s\": %s (%s)", name, err, zc->redacted);
    zk_call *kids;
    zk_node *q;
    char why[600];
    int n = read_queue(&op, parent, &kids, &q, why, sizeof why);
    int broken = 0, result = 0;
    for (int i = 0; i < n && result == 0; i++) {
        if (zk_blocker(q, i) != HOLDS)
            continue;
        char path[ZK_PATH_MAX];
        if (!zk_pjoin(path, sizeof path, parent, q[i].name))
            continue;
        zk_call *d = NULL;
        if (broken == 0 && zk_do(&op, CALL_DATA, path, NULL, zk_op_until(zc), &d) == ZOK) {
            info->token = (uint64_t)d->stat.czxid;
            zk_split_data(d->data, info->holder, sizeof info->holder);
            zk_call_drop(d);
        }
        /* The holder learns at once: it watches its own node. */
        rc = zk_do(&op, CALL_VOID, path, NULL, zk_op_until(zc), NULL);
        if (rc == ZOK)
            broken++;
        else if (rc != ZNONODE)
            result = dl_client_err(c, zk_code(rc), "break \"%s\": %s (%s)", name,
                                   zk_why(zc, rc, err, sizeof err), zc->redacted);
    }
    if (n < 0)
        result = name_fail(c, "break", name, n, why);
    free(q);
    zk_call_drop(kids);
    zk_op_end(&op);
    if (result)
        return result;
    info->held = broken > 0;
    info->holders = broken; /* 0: the core says nothing was held */
    return 0;
}

static int zk_set_value(dlock_lock *l, const char *value)
{
    zkclient *zc = zc_of(l->c);
    zklock *zl = l->bstate;
    zk_op op;
    char err[300];
    int rc = zk_op_begin(zc, false, &op, err, sizeof err);
    if (rc)
        return dl_lock_err(l, rc, "lock \"%s\": %s", l->name, err);
    char data[sizeof zc->self + 300];
    snprintf(data, sizeof data, "%s\n%s", zc->self, value);
    rc = zk_do(&op, CALL_SET, zl->path, data, zk_req_until(l), NULL);
    zk_op_end(&op);
    if (rc == ZNONODE)
        return dl_lock_err(l, DLOCK_ELOST, "lock \"%s\" is no longer held", l->name);
    if (rc != ZOK)
        return dl_lock_err(l, zk_code(rc), "lock \"%s\": publishing the leader value: %s",
                           l->name, zk_why(zc, rc, err, sizeof err));
    return 0;
}

static int zk_get_value(dlock_client *c, const char *name, char *buf, size_t len)
{
    zkclient *zc = zc_of(c);
    zk_op op;
    char err[300], path[ZK_PATH_MAX];
    int rc = zk_op_begin(zc, true, &op, err, sizeof err);
    if (rc)
        return dl_client_err(c, rc, "leader of \"%s\": %s (%s)", name, err, zc->redacted);
    zk_call *k = NULL;
    int holders, waiters;
    char why[600];
    rc = first_holder(&op, name, &holders, &waiters, &k, path, sizeof path, why, sizeof why);
    zk_op_end(&op);
    if (rc == ZNONODE)
        return dl_client_err(c, DLOCK_ENOENT, "no leader for \"%s\"", name);
    if (rc != ZOK)
        return name_fail(c, "leader of", name, rc, why);
    const char *value = zk_split_data(k->data, NULL, 0);
    if (value)
        snprintf(buf, len, "%s", value);
    zk_call_drop(k);
    return value ? 0 : dl_client_err(c, DLOCK_ENOENT, "no leader value for \"%s\" yet", name);
}

static int zk_list(dlock_client *c, const char *prefix, dlock_list_fn fn, void *arg)
{
    zkclient *zc = zc_of(c);
    zk_op op;
    char err[300];
    int rc = zk_op_begin(zc, true, &op, err, sizeof err);
    if (rc)
        return dl_client_err(c, rc, "list: %s (%s)", err, zc->redacted);
    zk_call *kids = NULL;
    rc = zk_do(&op, CALL_CHILDREN, zk_sync_path(zc), NULL, zk_op_until(zc), &kids);
    zk_op_end(&op);
    if (rc == ZNONODE)
        return 0;
    if (rc != ZOK)
        return dl_client_err(c, zk_code(rc), "list: %s (%s)", zk_why(zc, rc, err, sizeof err),
                             zc->redacted);
    int stop = 0;
    size_t plen = strlen(prefix);
    for (int i = 0; i < kids->nkids && !stop; i++) {
        const char *name = kids->kids[i];
        if (strncmp(name, prefix, plen) != 0 || dlock_name_valid(name, NULL, 0) != 0 ||
            (!zc->base[0] && strcmp(name, "zookeeper") == 0))
            continue;
        stop = fn(name, arg);
    }
    zk_call_drop(kids);
    return stop;
}

/* ---- clients and handles --------------------------------------------------------------- */

/* What each layout offers: no peer has dlock's semaphore in a lock's
 * queue (Curator's InterProcessSemaphoreV2 and kazoo's Semaphore keep
 * leases in nodes of another shape), and InterProcessMutex has no shared
 * side (Curator readers do not see its nodes: curator-rw). */
static const unsigned zk_layout_caps[ZK_LAYOUTS] = {
    [ZK_LAYOUT_DLOCK] = ZK_CAPS,
    [ZK_LAYOUT_CURATOR] = ZK_CAPS & ~(DLOCK_CAP_SHARED | DLOCK_CAP_SEMAPHORE),
    [ZK_LAYOUT_CURATOR_RW] = ZK_CAPS & ~DLOCK_CAP_SEMAPHORE,
    [ZK_LAYOUT_KAZOO] = ZK_CAPS & ~DLOCK_CAP_SEMAPHORE,
};

static int zk_lock_init(dlock_lock *l)
{
    zkclient *zc = zc_of(l->c);
    zklock *zl = calloc(1, sizeof *zl);
    if (!zl)
        return dl_lock_err(l, DLOCK_ENOMEM, "out of memory");
    if (zk_parent_of(zc, l->name, zl->parent, sizeof zl->parent)) {
        free(zl);
        return dl_lock_err(l, DLOCK_ENAME, "lock \"%s\": name too long under the chroot",
                           l->name);
    }
    if (!zc->base[0] && strcmp(l->name, "zookeeper") == 0) {
        free(zl);
        return dl_lock_err(l, DLOCK_ENAME,
                           "lock \"zookeeper\": /zookeeper is the server's own tree (give the "
                           "URL a chroot)");
    }
    dl_qkind_format(l, zl->kind, sizeof zl->kind);
    l->opts.ttl_ms = span_ms(zc);
    l->bstate = zl;
    return 0;
}

static void zk_lock_fini(dlock_lock *l)
{
    zk_own_drop(l);
    free(l->bstate);
    l->bstate = NULL;
}

void zkclient_free(zkclient *zc)
{
    zk_session_close(zc);
    while (zc->calls) {
        zk_call *k = zc->calls;
        zc->calls = k->next;
        zk_call_free(k);
    }
    while (zc->orphans) {
        zk_orphan *o = zc->orphans;
        zc->orphans = o->next;
        free(o);
    }
    if (zc->cred) {
        explicit_bzero(zc->cred, strlen(zc->cred));
        free(zc->cred);
    }
    free(zc->hosts);
    free(zc->live);
    free(zc->base);
    pthread_rwlock_destroy(&zc->rw);
    pthread_cond_destroy(&zc->cv);
    dl_teller_fini(&zc->teller);
    pthread_mutex_destroy(&zc->mu);
    free(zc);
}

static int zk_client_open(dlock_client *c, const dl_url *u)
{
    const char *s = dl_url_param(u, "session");
    long session = ZK_DEFAULT_SESSION_MS;
    if (s) {
        char *end;
        errno = 0;
        session = strtol(s, &end, 10);
        if (errno || *end || end == s || session < 100 || session > 3600000)
            return dl_client_err(c, DLOCK_EURL,
                                 "%s: session=%s: expected a session timeout in milliseconds "
                                 "(100..3600000)",
                                 u->redacted, s);
    }
    const char *lay = dl_url_param(u, "layout");
    int layout = lay ? zk_layout_named(lay) : ZK_LAYOUT_DLOCK;
    if (layout < 0)
        return dl_client_err(c, DLOCK_EURL,
                             "%s: layout=%s: expected dlock, curator (Apache Curator's "
                             "InterProcessMutex), curator-rw (its InterProcessReadWriteLock) or "
                             "kazoo (kazoo's Lock, ReadLock and WriteLock)",
                             u->redacted, lay);
    zkclient *zc = calloc(1, sizeof *zc);
    if (!zc)
        return dl_client_err(c, DLOCK_ENOMEM, "out of memory");
    zc->layout = layout;
    pthread_mutex_init(&zc->mu, NULL);
    pthread_cond_init(&zc->cv, NULL);
    dl_teller_init(&zc->teller);
    pthread_rwlock_init(&zc->rw, NULL);
    zc->session_ms = (int)session;
    zc->connect_ms = c->opts.connect_timeout_ms;
    zc->op_ms = c->opts.op_timeout_ms;
    zc->redacted = u->redacted;
    dl_self_desc(zc->self, sizeof zc->self);
    size_t hl = 1;
    for (size_t i = 0; i < u->nhosts; i++)
        hl += strlen(u->hosts[i].host) + 16;
    const char *chroot = u->path ? u->path : "";
    size_t bl = strlen(chroot) + sizeof "/dlock";
    zc->hosts = malloc(hl);
    zc->base = malloc(bl);
    if (u->user && (zc->cred = malloc(strlen(u->user) + (u->password ? strlen(u->password) : 0) + 2)))
        sprintf(zc->cred, "%s:%s", u->user, u->password ? u->password : "");
    if (!zc->hosts || !zc->base || (u->user && !zc->cred)) {
        zkclient_free(zc);
        return dl_client_err(c, DLOCK_ENOMEM, "out of memory");
    }
    size_t at = 0;
    for (size_t i = 0; i < u->nhosts; i++)
        at += (size_t)snprintf(zc->hosts + at, hl - at, strchr(u->hosts[i].host, ':') ? "%s[%s]:%d" : "%s%s:%d",
                               i ? "," : "", u->hosts[i].host, u->hosts[i].port);
    /* A peer's lock is the znode its own client is given: CHROOT/NAME. */
    snprintf(zc->base, bl, layout == ZK_LAYOUT_DLOCK ? "%s/dlock" : "%s", chroot);
    if (bl + DL_NAME_MAX + 64 > ZK_PATH_MAX) {
        zkclient_free(zc);
        return dl_client_err(c, DLOCK_EURL, "%s: the chroot is too long", u->redacted);
    }
    if (zc->cred) {
        /* The creator's credentials may do anything; everyone may look. */
        static char auth[] = "auth", empty[] = "", world[] = "world", anyone[] = "anyone";
        zc->acl_entries[0] = (struct ACL){.perms = ZOO_PERM_ALL, .id = {.scheme = auth, .id = empty}};
        zc->acl_entries[1] =
            (struct ACL){.perms = ZOO_PERM_READ, .id = {.scheme = world, .id = anyone}};
        zc->acl = (struct ACL_vector){.count = 2, .data = zc->acl_entries};
    } else {
        zc->acl = ZOO_OPEN_ACL_UNSAFE;
    }
    c->caps = zk_layout_caps[layout];
    c->bstate = zc;
    char err[400];
    /* Members that answer but serve nothing (an election after the leader
     * went, a quorum lost for a while) are the right URL at a bad moment:
     * the client opens without a session, and the first operation opens
     * one; an acquisition rides the election out within its own wait. */
    bool no_leader;
    int rc = zk_session_open(zc, -1, &no_leader, err, sizeof err);
    if (rc == DLOCK_EUNREACHABLE && no_leader)
        rc = 0;
    if (rc) {
        c->bstate = NULL;
        zkclient_free(zc);
        return dl_client_err(c, rc, "%s (%s)", err, u->redacted);
    }
    return 0;
}

static void zk_client_close(dlock_client *c)
{
    zkclient *zc = zc_of(c);
    if (!zc)
        return;
    /* Closing the session deletes its nodes on the server at once. */
    zkclient_free(zc);
    c->bstate = NULL;
}

static const dl_backend_ops zk_ops = {
    .client_open = zk_client_open,
    .client_close = zk_client_close,
    .lock_init = zk_lock_init,
    .lock_fini = zk_lock_fini,
    .acquire = zk_acquire,
    .rides_out_outages = true,
    .release = zk_release,
    .renew = zk_renew,
    .abandon = zk_abandon,
    .inspect = zk_inspect,
    .list = zk_list,
    .set_value = zk_set_value,
    .get_value = zk_get_value,
    .break_lock = zk_break,
    .record_get = zk_record_get,
    .record_put = zk_record_put,
    .record_del = zk_record_del,
};
#define ZK_OPS .ops = &zk_ops

#else /* no ZooKeeper C client */

#define ZK_OPS                                                                               \
    .missing = "this build has no ZooKeeper C client (install libzookeeper-mt-dev and rebuild)"

#endif

const dl_backend dl_backend_zk = {
    .name = "zk",
    .schemes = zk_schemes,
    .params = "session layout",
    .caps = ZK_CAPS,
    .liveness = ZK_LIVENESS,
    .fencing = ZK_FENCING,
    ZK_OPS,
};
