/* SPDX-License-Identifier: MIT */
/*
 * session.c — the ZooKeeper backend's transport: calls to the C client,
 * the session and its watcher, orphaned nodes, requests with deadlines, and
 * a holder's watch on its own node. The lock operations that use them are
 * in zk.c (see zk_int.h).
 */
#include "zk_int.h"

#include <zookeeper/zookeeper.h>

#include <dirent.h>
#include <errno.h>
#include <netdb.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

/* Wake a waiter's poll. */
static void poke(int fd)
{
    uint64_t one = 1;
    if (fd >= 0 && write(fd, &one, sizeof one) < 0) {
        /* only on counter overflow: a wake-up is pending anyway */
    }
}

/* ---- calls ---------------------------------------------------------------- */

/* The request's reply will never come (its outcome is unknown): the
 * connection dropped, nothing came within op_timeout_ms, or the C client
 * dropped the connection on a reply out of order (a request left behind by
 * a move between members, see session_move). */
bool zk_reply_lost(int rc)
{
    return rc == ZCONNECTIONLOSS || rc == ZOPERATIONTIMEOUT || rc == ZRUNTIMEINCONSISTENCY;
}

/*
 * A call lives while anything can still reach it: refs counts the replies
 * and armed watches outstanding (the C client keeps a watch's context until
 * a node event consumes it, and hands every watch each session event). The
 * waiter gives it up with call_drop; whoever drops the last reference of an
 * abandoned call frees it. All under the client's mu.
 */
void zk_call_free(zk_call *k)
{
    free(k->path);
    for (int i = 0; i < k->nkids; i++)
        free(k->kids[i]);
    free(k->kids);
    free(k->data);
    free(k);
}

static void call_unlink(zkclient *zc, zk_call *k)
{
    for (zk_call **pp = &zc->calls; *pp; pp = &(*pp)->next)
        if (*pp == k) {
            *pp = k->next;
            return;
        }
}

/* mu held: one reference gone; frees an abandoned call with none left
 * (true: k is gone). */
static bool call_unref(zk_call *k)
{
    if (--k->refs > 0 || !k->abandoned)
        return false;
    call_unlink(k->zc, k);
    zk_call_free(k);
    return true;
}

/* mu held: a request's completion ran (session_drain waits for none left). */
static void flight_end(zkclient *zc)
{
    if (--zc->in_flight == 0)
        pthread_cond_broadcast(&zc->cv);
}

static zk_call *call_new(zkclient *zc, zhandle_t *zh, enum call_kind kind, int evfd)
{
    zk_call *k = calloc(1, sizeof *k);
    if (!k)
        return NULL;
    k->zc = zc;
    k->zh = zh;
    k->kind = kind;
    k->evfd = evfd;
    pthread_mutex_lock(&zc->mu);
    k->next = zc->calls;
    zc->calls = k;
    pthread_mutex_unlock(&zc->mu);
    return k;
}

/* The waiter is done with k. */
void zk_call_drop(zk_call *k)
{
    if (!k)
        return;
    zkclient *zc = k->zc;
    pthread_mutex_lock(&zc->mu);
    k->abandoned = true;
    k->evfd = -1;
    k->refs++;
    call_unref(k);
    pthread_mutex_unlock(&zc->mu);
}

/* Account for a request about to be sent (mu not held): its reply, and its
 * watch if it sets one. */
static void call_arm(zk_call *k, bool watch)
{
    pthread_mutex_lock(&k->zc->mu);
    k->refs += watch ? 2 : 1;
    k->armed = watch;
    k->zc->in_flight++;
    pthread_mutex_unlock(&k->zc->mu);
}

/* The request could not be sent (rc from the C client): no callback will
 * come; done at once with that error. */
static void call_unsent(zk_call *k, int rc)
{
    pthread_mutex_lock(&k->zc->mu);
    k->refs -= k->armed ? 2 : 1;
    k->armed = false;
    k->rc = rc;
    k->done = true;
    flight_end(k->zc);
    pthread_mutex_unlock(&k->zc->mu);
}

/* A reply came (mu held): record it, wake the waiter, drop its reference.
 * A watch the server did not set (an error reply; for exists, ZNONODE sets
 * one) drops its reference too. True when k is gone. */
static bool call_reply(zk_call *k, int rc, bool watch_set)
{
    /* The C client's ZOPERATIONTIMEOUT: it dropped a connection silent for
     * 2/3 of the session. A connection loss, told as one: ours (zk_result's)
     * is a request silent for op_timeout_ms, and its message says so. */
    k->rc = rc == ZOPERATIONTIMEOUT ? ZCONNECTIONLOSS : rc;
    k->done = true;
    flight_end(k->zc);
    poke(k->evfd);
    if (k->armed && !watch_set) {
        k->armed = false;
        k->refs--;
    }
    return call_unref(k);
}

static void on_void(int rc, const void *data)
{
    zk_call *k = (zk_call *)data;
    zkclient *zc = k->zc;
    pthread_mutex_lock(&zc->mu);
    call_reply(k, rc, false);
    pthread_mutex_unlock(&zc->mu);
}

static void on_stat(int rc, const struct Stat *st, const void *data)
{
    zk_call *k = (zk_call *)data;
    zkclient *zc = k->zc;
    pthread_mutex_lock(&zc->mu);
    if (rc == ZOK && st)
        k->stat = *st;
    call_reply(k, rc, rc == ZOK || rc == ZNONODE);
    pthread_mutex_unlock(&zc->mu);
}

static void on_data(int rc, const char *value, int len, const struct Stat *st, const void *data)
{
    zk_call *k = (zk_call *)data;
    zkclient *zc = k->zc;
    pthread_mutex_lock(&zc->mu);
    if (rc == ZOK && st)
        k->stat = *st;
    if (rc == ZOK && value && len > 0 && !k->abandoned && (k->data = malloc((size_t)len + 1))) {
        memcpy(k->data, value, (size_t)len);
        k->data[len] = '\0';
        k->datalen = len;
    }
    call_reply(k, rc, false);
    pthread_mutex_unlock(&zc->mu);
}

static void on_sync(int rc, const char *value, const void *data)
{
    (void)value;
    on_void(rc, data);
}

static void on_children(int rc, const struct String_vector *sv, const void *data)
{
    zk_call *k = (zk_call *)data;
    zkclient *zc = k->zc;
    pthread_mutex_lock(&zc->mu);
    int watch_rc = rc;
    if (rc == ZOK && sv && sv->count > 0 && !k->abandoned) {
        k->kids = calloc((size_t)sv->count, sizeof *k->kids);
        for (int i = 0; k->kids && i < sv->count; i++) {
            if (!(k->kids[i] = strdup(sv->data[i])))
                break;
            k->nkids++;
        }
        if (k->nkids != sv->count)
            rc = ZSYSTEMERROR;
    }
    call_reply(k, rc, watch_rc == ZOK);
    pthread_mutex_unlock(&zc->mu);
}

/* The completion of a request whose outcome nobody waits for (data: the
 * client). */
static void on_ignore(int rc, const void *data)
{
    (void)rc;
    zkclient *zc = (zkclient *)data;
    pthread_mutex_lock(&zc->mu);
    flight_end(zc);
    pthread_mutex_unlock(&zc->mu);
}

/* mu held: delete a node nobody will use, its outcome unwatched. */
static void delete_unused(zkclient *zc, zhandle_t *zh, const char *path)
{
    if (zoo_adelete(zh, path, -1, on_ignore, zc) == ZOK)
        zc->in_flight++;
}

static void on_create(int rc, const char *path, const struct Stat *st, const void *data)
{
    zk_call *k = (zk_call *)data;
    zkclient *zc = k->zc;
    pthread_mutex_lock(&zc->mu);
    if (rc == ZOK && k->abandoned && path) {
        /* Created after its waiter gave up: nobody will use it. */
        delete_unused(zc, k->zh, path);
    } else if (rc == ZOK && path && st) {
        k->stat = *st;
        if (!(k->path = strdup(path)))
            rc = ZSYSTEMERROR; /* the waiter leaves it as an orphan */
    }
    call_reply(k, rc, false);
    pthread_mutex_unlock(&zc->mu);
}

static void tell_lost(zkclient *zc, dlock_lock **lost, int n, const char *why);
static void own_rearm(zk_call *k);

/*
 * The watcher of every node watch. Session events reach every watch the C
 * client keeps (and leave it in place): they only wake the waiter, which
 * looks again. A node event consumes the watch: a waiter's fires; a
 * holder's own node deleted is a loss, its data changed (our own writes)
 * is watched again.
 */
static void node_watcher(zhandle_t *zh, int type, int state, const char *path, void *ctx)
{
    (void)zh;
    (void)path;
    zk_call *k = ctx;
    zkclient *zc = k->zc;
    pthread_mutex_lock(&zc->mu);
    if (type == ZOO_SESSION_EVENT) {
        if (state == ZOO_EXPIRED_SESSION_STATE && k->kind == CALL_WATCH)
            k->fired = true;
        poke(k->evfd);
        pthread_mutex_unlock(&zc->mu);
        return;
    }
    k->armed = false; /* consumed: its reference goes below */
    if (k->kind == CALL_WATCH) {
        k->fired = true;
        k->event = type;
        k->fired_ns = dl_now_ns();
        poke(k->evfd);
        call_unref(k);
    } else if (k->abandoned) {
        call_unref(k);
    } else if (type == ZOO_DELETED_EVENT) {
        dlock_lock *l = k->lock;
        bool held = k->held && !k->lost;
        k->lost = true;
        poke(k->evfd); /* a waiter whose node went stops waiting */
        call_unref(k); /* not abandoned: stays */
        if (held)
            tell_lost(zc, &l, 1,
                      "its znode was deleted (dlock break --force, or the session ended)");
    } else {
        call_unref(k);
        own_rearm(k);
    }
    pthread_mutex_unlock(&zc->mu);
}

/* The reply to a holder's watch on its own node: a node already gone is a
 * loss (the watch the server left then waits for a creation that will
 * never come; its reference stays until the session closes). */
static void on_own(int rc, const struct Stat *st, const void *data)
{
    (void)st;
    zk_call *k = (zk_call *)data;
    zkclient *zc = k->zc;
    pthread_mutex_lock(&zc->mu);
    flight_end(zc);
    bool armed = rc == ZOK || rc == ZNONODE;
    if (k->armed && !armed) {
        k->armed = false;
        k->refs--;
    }
    if (rc == ZNONODE && !k->abandoned && !k->lost) {
        dlock_lock *l = k->lock;
        bool held = k->held;
        k->lost = true;
        poke(k->evfd);
        if (held)
            tell_lost(zc, &l, 1,
                      "its znode was gone (dlock break --force, or the session ended)");
    } else if (zk_reply_lost(rc) && !armed) {
        own_rearm(k); /* the request died with its connection: once more on the next */
    }
    call_unref(k);
    pthread_mutex_unlock(&zc->mu);
}

/* Watch a holder's own node again (mu held). */
static void own_rearm(zk_call *k)
{
    /* (A request sent while the handle closes is lost inside the C client,
     * its memory with it.) */
    if (k->abandoned || k->lost || !k->zh || k->zh == k->zc->closing)
        return;
    k->refs += 2;
    k->armed = true;
    if (zoo_awexists(k->zh, k->path, node_watcher, k, on_own, k) != ZOK) {
        /* The session is going: its end is reported by the session watcher. */
        k->refs -= 2;
        k->armed = false;
    } else {
        k->zc->in_flight++;
    }
}

static bool silent_expiry(zkclient *zc, int64_t *check_ns);

/* Wait until *flag (a field of k) or *flag2 or *flag3 (NULL: none) is set,
 * the deadline (monotonic ns; -1 none) passes or the cancel descriptor
 * fires: 0, DLOCK_ETIMEDOUT or DLOCK_ECANCELED (DLOCK_EIO if poll fails).
 * While disconnected it also wakes when the session counts as expired
 * (silent_expiry). */
int zk_call_wait_for(zk_call *k, const bool *flag, const bool *flag2, const bool *flag3,
                         int evfd, int64_t until_ns, int cancel_fd)
{
    zkclient *zc = k->zc;
    for (;;) {
        int64_t check_ns;
        pthread_mutex_lock(&zc->mu);
        (void)silent_expiry(zc, &check_ns);
        bool set = *flag || (flag2 && *flag2) || (flag3 && *flag3);
        pthread_mutex_unlock(&zc->mu);
        if (set)
            return 0;
        bool check_first = check_ns >= 0 && (until_ns < 0 || check_ns < until_ns);
        int rc = dl_wait_fd(evfd, POLLIN, check_first ? check_ns : until_ns, cancel_fd, NULL);
        if (rc == DLOCK_ETIMEDOUT && check_first)
            continue;
        if (rc)
            return rc;
        uint64_t v;
        (void)!read(evfd, &v, sizeof v);
    }
}

static int call_wait(zk_call *k, int evfd, int64_t until_ns, int cancel_fd)
{
    return zk_call_wait_for(k, &k->done, NULL, NULL, evfd, until_ns, cancel_fd);
}

/* ---- sessions --------------------------------------------------------------- */

/* Tell the holders whose calls are in `lost` (collected under mu) that
 * their lock is gone; mu held on entry and exit (released meanwhile). */
static void tell_lost(zkclient *zc, dlock_lock **lost, int n, const char *why)
{
    dl_teller_tell_locks(&zc->teller, &zc->mu, lost, n, why);
}

/* Every held lock of the client is gone (session expired): mu held. */
static void all_lost(zkclient *zc, const char *why)
{
    for (;;) {
        dlock_lock *lost[64];
        int n = 0;
        for (zk_call *k = zc->calls; k && n < 64; k = k->next)
            if (k->kind == CALL_OWN && !k->abandoned && !k->lost) {
                k->lost = true;
                poke(k->evfd);
                if (k->held)
                    lost[n++] = k->lock;
            }
        if (n == 0)
            return;
        tell_lost(zc, lost, n, why);
    }
}

static void orphans_purge(zkclient *zc, zhandle_t *zh);

/*
 * The session counts as expired once it has been disconnected for its
 * whole timeout: the leader, which has heard nothing of it either, has
 * expired it by then. The C client would learn of that only from a member
 * that answers its next handshake: never, while it goes round members
 * that take the connection and say nothing (stopped, cut off), or a list
 * left with only those (see session_move). A waiter then started a new
 * session only at its deadline, if at all (a client behind a stopped
 * follower once waited out its 20 s so). The next operation opens a new
 * session over every member (Curator does the same). mu held: true when
 * expired; *check_ns gets when to look again (-1: not while connected, or
 * not yet opened).
 */
static bool silent_expiry(zkclient *zc, int64_t *check_ns)
{
    *check_ns = -1;
    if (zc->expired)
        return true;
    if (!zc->zh || zc->state == ZOO_CONNECTED_STATE || !zc->disconnected_ns)
        return false;
    int timeout_ms = zc->negotiated_ms ? zc->negotiated_ms : zc->session_ms;
    int64_t at = zc->disconnected_ns + dl_ms_to_ns(timeout_ms);
    if (dl_now_ns() < at) {
        *check_ns = at;
        return false;
    }
    zc->expired = true;
    /* As the server's word would be (session_watcher): every node of ours
     * is gone, so must be every claim to one, held or waiting — a renewal
     * in the next session must not find a holder's lock still valid. */
    all_lost(zc, "no ZooKeeper member answered for the session's timeout: the session expired "
                 "and its nodes are gone");
    for (zk_call *k = zc->calls; k; k = k->next)
        poke(k->evfd);
    pthread_cond_broadcast(&zc->cv);
    return true;
}

static void session_watcher(zhandle_t *zh, int type, int state, const char *path, void *ctx)
{
    (void)path;
    zkclient *zc = ctx;
    if (type != ZOO_SESSION_EVENT || !zc)
        return;
    pthread_mutex_lock(&zc->mu);
    /* Not an old handle being closed (a new one may speak before
     * session_open has stored it: zc->zh is NULL then). */
    if (zc->zh && zh != zc->zh) {
        pthread_mutex_unlock(&zc->mu);
        return;
    }
    zc->state = state;
    if (state == ZOO_CONNECTED_STATE) {
        zc->connects++;
        zc->disconnected_ns = 0;
        zc->negotiated_ms = zoo_recv_timeout(zh);
        orphans_purge(zc, zh);
    } else if (state == ZOO_CONNECTING_STATE || state == ZOO_ASSOCIATING_STATE) {
        if (!zc->disconnected_ns)
            zc->disconnected_ns = dl_now_ns();
    } else if (state == ZOO_EXPIRED_SESSION_STATE || state == ZOO_AUTH_FAILED_STATE) {
        zc->expired = true;
        all_lost(zc, state == ZOO_AUTH_FAILED_STATE
                         ? "the ZooKeeper server refused the credentials; the session ended"
                         : "the ZooKeeper session expired: its nodes are gone");
    }
    /* Every waiter looks again (a request on a dead session fails fast). */
    for (zk_call *k = zc->calls; k; k = k->next)
        poke(k->evfd);
    pthread_cond_broadcast(&zc->cv);
    pthread_mutex_unlock(&zc->mu);
}

static void log_discard(const char *message)
{
    /* The C client logs every reconnection attempt to stderr by default;
     * failures reach our callers as error codes and messages instead. */
    (void)message;
}


/*
 * A four-letter word's answer from one server (at most len-1 bytes), over a
 * plain TCP connection bounded by the client's timeouts. Written by hand
 * because the C client has no call for a server's mode: four-letter words
 * are ZooKeeper's own admin interface, on the client port. 0, or -1 with
 * errno's reason in why.
 */
int zk_ask(int timeout_ms, const char *host, int port, const char *word, char *buf,
                  size_t len, char *why, size_t whylen)
{
    char ps[16];
    snprintf(ps, sizeof ps, "%d", port);
    struct addrinfo hints = {.ai_socktype = SOCK_STREAM}, *ai = NULL;
    int e = getaddrinfo(host, ps, &hints, &ai);
    if (e) {
        snprintf(why, whylen, "%s", gai_strerror(e));
        return -1;
    }
    int fd = socket(ai->ai_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
    struct timeval tv = {.tv_sec = timeout_ms / 1000, .tv_usec = (timeout_ms % 1000) * 1000};
    bool ok = fd >= 0 && setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv) == 0 &&
              setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv) == 0 &&
              connect(fd, ai->ai_addr, ai->ai_addrlen) == 0 &&
              write(fd, word, strlen(word)) == (ssize_t)strlen(word);
    if (!ok)
        snprintf(why, whylen, "%s", strerror(errno));
    freeaddrinfo(ai);
    size_t n = 0;
    while (ok && n + 1 < len) {
        ssize_t r = read(fd, buf + n, len - 1 - n);
        if (r < 0)
            snprintf(why, whylen, "%s", strerror(errno));
        if (r <= 0)
            break;
        n += (size_t)r;
    }
    buf[n] = '\0';
    if (fd >= 0)
        close(fd);
    if (ok && n == 0)
        snprintf(why, whylen, "no answer to \"%s\"", word);
    return ok && n > 0 ? 0 : -1;
}

/* After no server took the session: does one of them answer, but say it
 * serves no requests (a member without a quorum, hence without a leader)?
 * Asked with "srvr", ZooKeeper's own status word (allowed by default). */
static bool no_quorum(const zkclient *zc)
{
    for (const char *p = zc->hosts; *p;) {
        size_t n = strcspn(p, ",");
        char host[300], buf[512], why[64];
        const char *colon = memrchr(p, ':', n);
        if (colon && n < sizeof host) {
            const char *h = p;
            size_t hl = (size_t)(colon - p);
            if (hl >= 2 && h[0] == '[' && h[hl - 1] == ']') { /* [v6]:port */
                h++;
                hl -= 2;
            }
            memcpy(host, h, hl);
            host[hl] = '\0';
            if (zk_ask(300, host, atoi(colon + 1), "srvr", buf, sizeof buf, why, sizeof why) ==
                    0 &&
                strstr(buf, "not currently serving"))
                return true;
        }
        p += n + (p[n] == ',');
    }
    return false;
}

/* Take "host:port" out of the comma-separated list hosts, in place. */
static void hosts_drop(char *hosts, const char *drop)
{
    size_t dl = strlen(drop);
    for (char *p = hosts; dl && *p;) {
        size_t n = strcspn(p, ",");
        if (n == dl && strncmp(p, drop, n) == 0) {
            if (p[n] == ',')
                memmove(p, p + n + 1, strlen(p + n + 1) + 1);
            else if (p > hosts)
                p[-1] = '\0'; /* the last one: drop its comma too */
            else
                *p = '\0';
            return;
        }
        p += n + (p[n] == ',');
    }
}

static int session_connect(zkclient *zc, int64_t until_ns, bool *no_leader, char *err,
                           size_t errlen)
{
    pthread_mutex_lock(&zc->mu);
    zc->expired = false;
    zc->state = 0;
    zc->disconnected_ns = 0;
    zc->confirmed_ns = 0;
    pthread_mutex_unlock(&zc->mu);
    /*
     * A member that takes the connection but never answers (stopped,
     * overloaded) holds the C client for 2/3 of the session timeout before
     * it moves on, longer than the connect timeout: each try gets a share
     * of the connect time, and the next one goes without the member that
     * did not answer (that session then fails over among the others only).
     */
    char *hosts = strdup(zc->hosts);
    if (!hosts) {
        snprintf(err, errlen, "out of memory");
        return DLOCK_ENOMEM;
    }
    int64_t until = dl_deadline_in(zc->connect_ms);
    if (until_ns >= 0 && until_ns < until)
        until = until_ns;
    zhandle_t *zh;
    bool up, refused;
    for (;;) {
        errno = 0;
        zh = zookeeper_init2(hosts, session_watcher, zc->session_ms, NULL, zc, 0, log_discard);
        if (!zh) {
            snprintf(err, errlen, "cannot start a ZooKeeper client for %s: %s", zc->hosts,
                     errno ? strerror(errno) : "bad host list");
            free(hosts);
            return errno == ENOMEM ? DLOCK_ENOMEM : DLOCK_EURL;
        }
        pthread_mutex_lock(&zc->mu);
        zc->zh = zh;
        pthread_mutex_unlock(&zc->mu);
        int n = 1;
        for (const char *p = hosts; (p = strchr(p, ',')); p++)
            n++;
        int64_t now = dl_now_ns();
        up = zk_wait_connected(zc, now + (until - now) / n);
        pthread_mutex_lock(&zc->mu);
        refused = zc->expired;
        pthread_mutex_unlock(&zc->mu);
        if (up || refused || n == 1 || dl_now_ns() >= until)
            break;
        const char *cur = zoo_get_current_server(zh);
        char drop[300];
        snprintf(drop, sizeof drop, "%s", cur ? cur : "");
        zk_session_close(zc);
        hosts_drop(hosts, drop); /* (not found: a new shuffle of the same) */
        pthread_mutex_lock(&zc->mu);
        zc->expired = false;
        zc->state = 0;
        zc->disconnected_ns = 0;
        pthread_mutex_unlock(&zc->mu);
    }
    pthread_mutex_lock(&zc->mu);
    free(zc->live);
    zc->live = hosts;
    pthread_mutex_unlock(&zc->mu);
    if (!up) {
        if (refused)
            snprintf(err, errlen, "the ZooKeeper server at %s ended the session at once",
                     zc->hosts);
        else if (no_quorum(zc)) {
            if (no_leader)
                *no_leader = true;
            snprintf(err, errlen,
                     "ZooKeeper at %s: the servers answer but serve no requests: the ensemble "
                     "has lost its quorum (no leader)",
                     zc->hosts);
        } else
            snprintf(err, errlen,
                     "no ZooKeeper server at %s answered within %d ms (is it running, and is "
                     "it ZooKeeper?)",
                     zc->hosts, zc->connect_ms);
        return DLOCK_EUNREACHABLE;
    }
    if (zc->cred) {
        int evfd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
        zk_call *k = evfd >= 0 ? call_new(zc, zh, CALL_VOID, evfd) : NULL;
        if (!k) {
            if (evfd >= 0)
                close(evfd);
            snprintf(err, errlen, "out of memory");
            return DLOCK_ENOMEM;
        }
        call_arm(k, false);
        int rc = zoo_add_auth(zh, "digest", zc->cred, (int)strlen(zc->cred), on_void, k);
        if (rc != ZOK)
            call_unsent(k, rc);
        int w = call_wait(k, evfd, dl_deadline_in(zc->op_ms), -1);
        rc = w ? ZOPERATIONTIMEOUT : k->rc;
        zk_call_drop(k);
        close(evfd);
        if (rc != ZOK) {
            snprintf(err, errlen, "ZooKeeper at %s: authentication: %s", zc->hosts, zerror(rc));
            return rc == ZAUTHFAILED ? DLOCK_EPERM : DLOCK_EUNREACHABLE;
        }
    }
    return 0;
}

int zk_session_open(zkclient *zc, int64_t until_ns, bool *no_leader, char *err, size_t errlen)
{
    if (no_leader)
        *no_leader = false;
    int rc = session_connect(zc, until_ns, no_leader, err, errlen);
    /* No handle is kept that never connected (or never logged in): the C
     * client would go on round the members the tries above narrowed it to,
     * and an operation would find it "live". The next one opens afresh,
     * over every member. */
    if (rc)
        zk_session_close(zc);
    return rc;
}

/* mu held: wait on cv until a change, the deadline (monotonic; -1 none) or
 * 100 ms; false once the deadline has passed. (cv runs on the wall clock:
 * a slice of 100 ms bounds what a clock step can do.) */
static bool cv_wait_until(zkclient *zc, int64_t until_ns)
{
    if (until_ns >= 0 && dl_now_ns() >= until_ns)
        return false;
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    int64_t wait = until_ns < 0 ? dl_ms_to_ns(100) : until_ns - dl_now_ns();
    if (wait > dl_ms_to_ns(100))
        wait = dl_ms_to_ns(100);
    int64_t rt = (int64_t)ts.tv_sec * 1000000000LL + ts.tv_nsec + wait;
    ts.tv_sec = rt / 1000000000LL;
    ts.tv_nsec = rt % 1000000000LL;
    pthread_cond_timedwait(&zc->cv, &zc->mu, &ts);
    return true;
}

static int connected_socket(zhandle_t *zh);

/* mu held: until no request is in flight or the deadline: true when none is. */
static bool wait_flights(zkclient *zc, int64_t until_ns)
{
    while (zc->in_flight > 0 && cv_wait_until(zc, until_ns))
        ;
    return zc->in_flight == 0;
}

/*
 * Before zookeeper_close: the C client 3.8 fails the requests still in
 * flight at close into the queue of its completion thread, which may have
 * stopped reading it already; their memory is then lost (LeakSanitizer saw
 * it). So let them finish first: their replies, for as long as a request
 * may take; from a member that does not answer, a shutdown of the
 * connection makes the C client fail them at once, through the thread still
 * running. (The session's close request is not sent then: the member would
 * not have answered it either.)
 */
static void session_drain(zkclient *zc, zhandle_t *zh)
{
    pthread_mutex_lock(&zc->mu);
    bool done = wait_flights(zc, dl_deadline_in(zc->op_ms));
    pthread_mutex_unlock(&zc->mu);
    if (done)
        return;
    int fd = connected_socket(zh);
    if (fd < 0 || shutdown(fd, SHUT_RDWR) != 0)
        return; /* not connected: the C client fails them when its connection attempt ends */
    pthread_mutex_lock(&zc->mu);
    (void)wait_flights(zc, dl_deadline_in(zc->op_ms));
    pthread_mutex_unlock(&zc->mu);
}

/* Close the handle (nothing else uses it: rw held for writing, or the
 * client closing) and free the calls only it could still have finished. */
void zk_session_close(zkclient *zc)
{
    zhandle_t *zh = zc->zh;
    if (!zh)
        return;
    session_drain(zc, zh);
    /* Pending completions run (with ZCLOSING) inside zookeeper_close: mu
     * must be free. */
    pthread_mutex_lock(&zc->mu);
    zc->closing = zh;
    pthread_mutex_unlock(&zc->mu);
    zookeeper_close(zh);
    pthread_mutex_lock(&zc->mu);
    zc->closing = NULL;
    zc->zh = NULL;
    zc->in_flight = 0; /* (any the C client lost: see session_drain) */
    for (zk_call **pp = &zc->calls; *pp;) {
        zk_call *k = *pp;
        if (k->zh != zh) {
            pp = &k->next;
        } else if (k->abandoned) {
            *pp = k->next;
            zk_call_free(k);
        } else {
            /* a held lock's watch: its holder drops it at release */
            k->zh = NULL;
            k->armed = false;
            k->refs = 0;
            k->done = k->fired = true;
            pp = &k->next;
        }
    }
    pthread_mutex_unlock(&zc->mu);
}

/* Take the client for an operation (rw for reading), with a live session:
 * an expired one (or none yet, see zk_client_open) is replaced first, the
 * opening cut to until_ns. 0 or a DLOCK_E* code in err. */
static int session_enter(zkclient *zc, bool reopen, int64_t until_ns, char *err, size_t errlen)
{
    pthread_rwlock_rdlock(&zc->rw);
    pthread_mutex_lock(&zc->mu);
    bool expired = zc->expired || !zc->zh;
    pthread_mutex_unlock(&zc->mu);
    if (!expired)
        return 0;
    if (!reopen) {
        pthread_rwlock_unlock(&zc->rw);
        snprintf(err, errlen, "the ZooKeeper session expired");
        return DLOCK_ELOST;
    }
    pthread_rwlock_unlock(&zc->rw);
    pthread_rwlock_wrlock(&zc->rw);
    int rc = 0;
    pthread_mutex_lock(&zc->mu);
    expired = zc->expired || !zc->zh;
    pthread_mutex_unlock(&zc->mu);
    if (expired) {
        zk_session_close(zc);
        rc = zk_session_open(zc, until_ns, NULL, err, errlen);
    }
    pthread_rwlock_unlock(&zc->rw);
    if (rc)
        return rc;
    pthread_rwlock_rdlock(&zc->rw);
    return 0;
}

static void session_leave(zkclient *zc)
{
    pthread_rwlock_unlock(&zc->rw);
}

/* Until the session is connected again (after a connection loss), the
 * deadline, or its end: true when connected. */
bool zk_wait_connected(zkclient *zc, int64_t until_ns)
{
    int64_t check_ns;
    pthread_mutex_lock(&zc->mu);
    while (zc->state != ZOO_CONNECTED_STATE && !silent_expiry(zc, &check_ns) &&
           cv_wait_until(zc, until_ns))
        ;
    bool up = zc->state == ZOO_CONNECTED_STATE;
    pthread_mutex_unlock(&zc->mu);
    return up;
}

/* Do a and b name the same address and port? */
static bool same_peer(const struct sockaddr_storage *a, const struct sockaddr_storage *b)
{
    if (a->ss_family != b->ss_family)
        return false;
    if (a->ss_family == AF_INET) {
        const struct sockaddr_in *x = (const void *)a, *y = (const void *)b;
        return x->sin_port == y->sin_port && x->sin_addr.s_addr == y->sin_addr.s_addr;
    }
    if (a->ss_family == AF_INET6) {
        const struct sockaddr_in6 *x = (const void *)a, *y = (const void *)b;
        return x->sin6_port == y->sin6_port &&
               memcmp(&x->sin6_addr, &y->sin6_addr, sizeof x->sin6_addr) == 0;
    }
    return false;
}

/* The one descriptor of this process connected to peer: the C client's
 * socket (no API gives it). -1 if none, or several (other clients of the
 * process on the same member: which is ours is not known). */
static int socket_to(const struct sockaddr_storage *peer)
{
    DIR *d = opendir("/proc/self/fd");
    if (!d)
        return -1;
    int found = -1, n = 0;
    for (struct dirent *e; (e = readdir(d));) {
        struct sockaddr_storage a;
        socklen_t al = sizeof a;
        int fd = atoi(e->d_name);
        if (e->d_name[0] < '0' || e->d_name[0] > '9' || fd == dirfd(d) ||
            getpeername(fd, (struct sockaddr *)&a, &al) != 0 || !same_peer(&a, peer))
            continue;
        found = fd;
        n++;
    }
    closedir(d);
    return n == 1 ? found : -1;
}

/* zh's socket: -2 when not connected, -1 when not known for sure (see
 * socket_to). */
static int connected_socket(zhandle_t *zh)
{
    struct sockaddr_storage peer;
    socklen_t plen = sizeof peer;
    memset(&peer, 0, sizeof peer);
    if (!zookeeper_get_connected_host(zh, (struct sockaddr *)&peer, &plen))
        return -2;
    return socket_to(&peer);
}

/*
 * A request on zh went unanswered for op_timeout_ms: the member it went to
 * is stopped, overloaded or cut off. The C client would stay there until
 * nothing came for 2/3 of the session timeout; instead the session moves
 * now. zoo_set_servers without that member (in the C client 3.8 it only
 * takes effect at the next connection), then a shutdown of the client's
 * socket: the C client fails the requests in flight (ZCONNECTIONLOSS) and
 * resumes the same session — ephemeral nodes and watches included — on
 * another member. A request left queued at the silent member cannot take
 * effect later: the leader refuses requests of a session that has moved to
 * another member (find_own reads after a sync for those it took before).
 * No move when the socket is not known for sure (another client of the
 * process on the same member) or no other member is left: the C client
 * then moves on its own. The session counts as disconnected until it is
 * connected again (wait_connected).
 */
void zk_session_move(zkclient *zc, zhandle_t *zh)
{
    char drop[300];
    const char *cur = zoo_get_current_server(zh);
    snprintf(drop, sizeof drop, "%s", cur ? cur : "");
    int fd = connected_socket(zh);
    if (fd == -2)
        return; /* not connected: moving already */
    pthread_mutex_lock(&zc->mu);
    char *rest = zh == zc->zh && zc->state == ZOO_CONNECTED_STATE && zc->live && drop[0]
                     ? strdup(zc->live)
                     : NULL;
    unsigned connects = zc->connects;
    pthread_mutex_unlock(&zc->mu);
    if (!rest)
        return; /* moving already, or the session is gone */
    size_t len = strlen(rest);
    hosts_drop(rest, drop);
    if (!rest[0] || fd < 0) {
        free(rest);
        return;
    }
    /* (a host name is not found by the address the client gives: the list
     * stays, and the client takes the next member in it) */
    if (strlen(rest) < len && zoo_set_servers(zh, rest) == ZOK) {
        pthread_mutex_lock(&zc->mu);
        free(zc->live);
        zc->live = rest;
        rest = NULL;
        pthread_mutex_unlock(&zc->mu);
    }
    free(rest);
    if (shutdown(fd, SHUT_RDWR) != 0)
        return;
    pthread_mutex_lock(&zc->mu);
    if (zc->connects == connects && zc->zh == zh && zc->state == ZOO_CONNECTED_STATE) {
        zc->state = ZOO_CONNECTING_STATE; /* (before the C client says so) */
        if (!zc->disconnected_ns)
            zc->disconnected_ns = dl_now_ns();
    }
    pthread_mutex_unlock(&zc->mu);
}

/* ---- orphans ------------------------------------------------------------------ */

static void on_orphan_children(int rc, const struct String_vector *sv, const void *data)
{
    zk_orphan *o = (zk_orphan *)data;
    zkclient *zc = o->zc;
    pthread_mutex_lock(&zc->mu);
    flight_end(zc);
    o->searching = false;
    bool found = false;
    for (int i = 0; rc == ZOK && sv && i < sv->count; i++)
        if (strncmp(sv->data[i], o->leaf, strlen(o->leaf)) == 0) {
            char path[ZK_PATH_MAX];
            if (zk_pjoin(path, sizeof path, o->parent, sv->data[i]))
                delete_unused(zc, o->zh, path);
            found = true;
        }
    if ((rc == ZOK && !found) || rc == ZNONODE) {
        /* gone: forget it (a node found is looked for again next time) */
        for (zk_orphan **pp = &zc->orphans; *pp; pp = &(*pp)->next)
            if (*pp == o) {
                *pp = o->next;
                free(o);
                break;
            }
    }
    pthread_mutex_unlock(&zc->mu);
}

static void on_sync_ignore(int rc, const char *value, const void *data)
{
    (void)value;
    on_ignore(rc, data);
}

/* Look for every orphan's node (mu held, zh connected), on a member that
 * has caught up with the leader (a sync first: the session may have just
 * moved to a member that has not applied its create yet). */
static void orphans_purge(zkclient *zc, zhandle_t *zh)
{
    if (zh == zc->closing)
        return;
    bool synced = false;
    for (zk_orphan *o = zc->orphans; o; o = o->next) {
        if (o->searching)
            continue;
        if (!synced && zoo_async(zh, zk_sync_path(zc), on_sync_ignore, zc) != ZOK)
            return; /* the session is going: looked for when it is back */
        if (!synced)
            zc->in_flight++;
        synced = true;
        o->zh = zh;
        o->searching = zoo_aget_children(zh, o->parent, 0, on_orphan_children, o) == ZOK;
        if (o->searching)
            zc->in_flight++;
    }
}

void zk_orphan_add(zkclient *zc, const char *parent, const char *leaf)
{
    zk_orphan *o = calloc(1, sizeof *o);
    if (!o)
        return; /* the node then lives until the session ends */
    o->zc = zc;
    snprintf(o->parent, sizeof o->parent, "%s", parent);
    snprintf(o->leaf, sizeof o->leaf, "%s", leaf);
    pthread_mutex_lock(&zc->mu);
    o->next = zc->orphans;
    zc->orphans = o;
    if (zc->state == ZOO_CONNECTED_STATE && zc->zh)
        orphans_purge(zc, zc->zh);
    pthread_mutex_unlock(&zc->mu);
}

/* ---- requests ------------------------------------------------------------------ */

int zk_code(int rc)
{
    switch (rc) {
    case ZNOAUTH:
    case ZAUTHFAILED:
        return DLOCK_EPERM;
    case ZSESSIONEXPIRED:
    case ZCONNECTIONLOSS:
    case ZOPERATIONTIMEOUT:
    case ZCLOSING:
    case ZINVALIDSTATE:
    case ZRUNTIMEINCONSISTENCY:
        return DLOCK_EUNREACHABLE;
    case ZSYSTEMERROR:
        return DLOCK_ENOMEM;
    default:
        return DLOCK_EPROTO;
    }
}

int zk_op_begin(zkclient *zc, bool reopen, zk_op *op, char *err, size_t errlen)
{
    return zk_op_begin_by(zc, reopen, -1, op, err, errlen);
}

int zk_op_begin_by(zkclient *zc, bool reopen, int64_t until_ns, zk_op *op, char *err,
                   size_t errlen)
{
    op->zc = zc;
    int rc = session_enter(zc, reopen, until_ns, err, errlen);
    if (rc)
        return rc;
    op->evfd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
    if (op->evfd < 0) {
        session_leave(zc);
        snprintf(err, errlen, "eventfd: %s", strerror(errno));
        return DLOCK_ENOMEM;
    }
    pthread_mutex_lock(&zc->mu);
    op->zh = zc->zh;
    pthread_mutex_unlock(&zc->mu);
    return 0;
}

void zk_op_end(zk_op *op)
{
    close(op->evfd);
    session_leave(op->zc);
}

/* Send one request (data for CREATE and SET; flags and acl for CREATE):
 * the call, done at once if it could not be sent; NULL when out of memory. */
zk_call *zk_send(zk_op *op, enum call_kind kind, const char *path, const char *data,
                        int flags, const struct ACL_vector *acl)
{
    return zk_send_data(op, kind, path, data, data ? (int)strlen(data) : -1, -1, flags, acl);
}

zk_call *zk_send_data(zk_op *op, enum call_kind kind, const char *path, const char *data, int len,
                      int version, int flags, const struct ACL_vector *acl)
{
    zk_call *k = call_new(op->zc, op->zh, kind, op->evfd);
    if (!k)
        return NULL;
    call_arm(k, false);
    int rc;
    switch (kind) {
    case CALL_CREATE:
        rc = zoo_acreate2(op->zh, path, data, len, acl, flags, on_create, k);
        break;
    case CALL_CHILDREN:
        rc = zoo_aget_children(op->zh, path, 0, on_children, k);
        break;
    case CALL_STAT:
        rc = zoo_aexists(op->zh, path, 0, on_stat, k);
        break;
    case CALL_DATA:
        rc = zoo_aget(op->zh, path, 0, on_data, k);
        break;
    case CALL_SET:
        rc = zoo_aset(op->zh, path, data, len, version, on_stat, k);
        break;
    case CALL_VOID:
        rc = zoo_adelete(op->zh, path, version, on_void, k);
        break;
    case CALL_SYNC:
        rc = zoo_async(op->zh, path, on_sync, k);
        break;
    default:
        rc = ZBADARGUMENTS;
    }
    if (rc != ZOK)
        call_unsent(k, rc);
    return k;
}

/* Wait for k's reply until until_ns: its result (ZOPERATIONTIMEOUT when the
 * bound came first). The call stays the caller's. */
int zk_result(zk_op *op, zk_call *k, int64_t until_ns)
{
    if (!k)
        return ZSYSTEMERROR;
    return call_wait(k, op->evfd, until_ns, -1) ? ZOPERATIONTIMEOUT : k->rc;
}

/* Send, wait, and give the call up unless *out takes it (only on ZOK). */
int zk_do(zk_op *op, enum call_kind kind, const char *path, const char *data,
                 int64_t until_ns, zk_call **out)
{
    zk_call *k = zk_send(op, kind, path, data, 0, NULL);
    int rc = zk_result(op, k, until_ns);
    if (out && rc == ZOK)
        *out = k;
    else
        zk_call_drop(k);
    return rc;
}

/*
 * Proof that the session lives at the leader: a sync, which the member we
 * are on passes to the leader and answers only once the leader has. A read
 * is no proof: a follower cut off from the leader answers reads until it
 * notices (syncLimit ticks, often longer than the session), while the
 * leader expires the session and hands its locks on. On success the sync's
 * send time is the client's confirmed_ns (if later) and *sent.
 */
int zk_confirm(zk_op *op, int64_t until_ns, int64_t *sent)
{
    zkclient *zc = op->zc;
    int64_t t = dl_now_ns();
    int rc = zk_do(op, CALL_SYNC, zk_sync_path(zc), NULL, until_ns, NULL);
    if (rc != ZOK)
        return rc;
    *sent = t;
    pthread_mutex_lock(&zc->mu);
    if (t > zc->confirmed_ns)
        zc->confirmed_ns = t;
    pthread_mutex_unlock(&zc->mu);
    return ZOK;
}

/* A watch on path: its existence (kind CALL_STAT) or its children
 * (CALL_CHILDREN); the reply as for zk_send, the event in k->fired. */
zk_call *zk_watch(zk_op *op, enum call_kind kind, const char *path)
{
    zk_call *k = call_new(op->zc, op->zh, CALL_WATCH, op->evfd);
    if (!k)
        return NULL;
    call_arm(k, true);
    int rc = kind == CALL_CHILDREN
                 ? zoo_awget_children(op->zh, path, node_watcher, k, on_children, k)
                 : zoo_awexists(op->zh, path, node_watcher, k, on_stat, k);
    if (rc != ZOK)
        call_unsent(k, rc);
    return k;
}

const char *zk_sync_path(const zkclient *zc)
{
    return zc->base[0] ? zc->base : "/";
}

int64_t zk_op_until(zkclient *zc)
{
    return dl_deadline_in(zc->op_ms);
}

/* The bound of one request of l: op_timeout_ms cut to l's op deadline. */
int64_t zk_req_until(dlock_lock *l)
{
    return dl_deadline_in(dl_op_timeout_ms(l, zc_of(l->c)->op_ms));
}

const char *zk_why(zkclient *zc, int rc, char *buf, size_t len)
{
    if (rc == ZOPERATIONTIMEOUT)
        snprintf(buf, len, "no reply from ZooKeeper in time (op_timeout_ms %d)", zc->op_ms);
    else if (rc == ZNOAUTH)
        snprintf(buf, len, "ZooKeeper: not authorised (another user's lock, or wrong password)");
    else
        snprintf(buf, len, "ZooKeeper: %s", zerror(rc));
    return buf;
}

/* Create one directory of a name's path (the name's node: name_node): ZOK
 * when it is there. The shared directories are open to every user; a
 * name's node carries the client's ACL, so that other users cannot empty
 * its queue. Containers vanish once their last child has gone. */
static int create_dir(zk_op *op, const char *path, bool name_node, int64_t until_ns)
{
    zk_call *k = zk_send(op, CALL_CREATE, path, NULL, name_node ? ZOO_CONTAINER : ZOO_PERSISTENT,
                         name_node ? &op->zc->acl : &ZOO_OPEN_ACL_UNSAFE);
    int rc = zk_result(op, k, until_ns);
    zk_call_drop(k);
    return rc == ZNODEEXISTS ? ZOK : rc;
}

/* Create the persistent path components of base and the name's container
 * node, each if absent. The name's node alone first: the directories
 * above it are there but on a new server, and a create that fails is a
 * write too (an error transaction, flushed like any other). */
int zk_ensure_parent(zk_op *op, const char *parent, int64_t until_ns)
{
    int rc = create_dir(op, parent, true, until_ns);
    if (rc != ZNONODE)
        return rc;
    char p[ZK_PATH_MAX];
    size_t blen = strlen(op->zc->base), plen = strlen(parent);
    for (size_t i = 1; i <= plen; i++) {
        if (parent[i] != '/' && parent[i] != '\0')
            continue;
        memcpy(p, parent, i);
        p[i] = '\0';
        if ((rc = create_dir(op, p, i > blen, until_ns)) != ZOK)
            return rc;
    }
    return ZOK;
}

/* ---- holders' watches on their own node ----------------------------------------- */

zk_call *zk_own_arm(dlock_lock *l, zk_op *op, const char *path)
{
    zk_call *k = call_new(op->zc, op->zh, CALL_OWN, op->evfd);
    if (!k)
        return NULL;
    k->lock = l;
    pthread_mutex_lock(&op->zc->mu);
    if ((k->path = strdup(path)))
        own_rearm(k);
    pthread_mutex_unlock(&op->zc->mu);
    return k;
}

/* Stop watching; waits for a loss being told of to finish (unless this is
 * the thread telling it: a loss callback may release its lock). */
void zk_own_drop(dlock_lock *l)
{
    zklock *zl = l->bstate;
    zk_call *k = zl->own;
    if (!k)
        return;
    zl->own = NULL;
    zkclient *zc = k->zc;
    pthread_mutex_lock(&zc->mu);
    dl_teller_wait(&zc->teller, &zc->mu);
    k->abandoned = true;
    k->evfd = -1;
    k->refs++;
    call_unref(k);
    pthread_mutex_unlock(&zc->mu);
}
