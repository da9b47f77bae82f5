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
     DLOCK_CAP_SESSION | DLOCK_CAP_NATIVE_BLOCKING | DLOCK_CAP_ELECTION)
#define ZK_LIVENESS                                                                          \
    "ephemeral znode of the client's session: gone when the session ends or expires; the "  \
    "holder is told before the leader can expire it (no sync answered through the leader "  \
    "for 2/3 of the session timeout); a paused holder learns only when it runs again "       \
    "(fencing catches it)"
#define ZK_FENCING                                                                           \
    "creation zxid of the holder's znode: rises with every write of the ensemble, across "   \
    "leader changes, while a quorum lives"

#ifdef DLOCK_HAVE_ZK
#include "zk_int.h"

#include <zookeeper/zookeeper.h>

#include <dirent.h>
#include <errno.h>
#include <inttypes.h>
#include <netdb.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

#define ZK_DEFAULT_SESSION_MS 10000

typedef struct zklock {
    char parent[ZK_PATH_MAX];
    char path[ZK_PATH_MAX]; /* our node while waiting or holding, "" none */
    char kind[16];          /* "x", "r", "sN" */
    zk_call *own;           /* the watch on our node while held */
} zklock;

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
static bool reply_lost(int rc)
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
static void call_free(zk_call *k)
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
    call_free(k);
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
    k->rc = rc;
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
    } else if (reply_lost(rc) && !armed) {
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

/* Wait until *flag (a field of k) or *flag2 or *flag3 (NULL: none) is set,
 * the deadline (monotonic ns; -1 none) passes or the cancel descriptor
 * fires: 0, DLOCK_ETIMEDOUT or DLOCK_ECANCELED (DLOCK_EIO if poll fails). */
int zk_call_wait_for(zk_call *k, const bool *flag, const bool *flag2, const bool *flag3,
                         int evfd, int64_t until_ns, int cancel_fd)
{
    zkclient *zc = k->zc;
    for (;;) {
        pthread_mutex_lock(&zc->mu);
        bool set = *flag || (flag2 && *flag2) || (flag3 && *flag3);
        pthread_mutex_unlock(&zc->mu);
        if (set)
            return 0;
        int rc = dl_wait_fd(evfd, POLLIN, until_ns, cancel_fd, NULL);
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

static bool wait_connected(zkclient *zc, int64_t until_ns);
static void session_close(zkclient *zc);

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

/* Connect a new session (zc->zh NULL, rw held for writing or not yet
 * shared) and wait until it is up: 0 or a DLOCK_E* code in err. */
int zk_session_open(zkclient *zc, char *err, size_t errlen)
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
        up = wait_connected(zc, now + (until - now) / n);
        pthread_mutex_lock(&zc->mu);
        refused = zc->expired;
        pthread_mutex_unlock(&zc->mu);
        if (up || refused || n == 1 || dl_now_ns() >= until)
            break;
        const char *cur = zoo_get_current_server(zh);
        char drop[300];
        snprintf(drop, sizeof drop, "%s", cur ? cur : "");
        session_close(zc);
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
        else if (no_quorum(zc))
            snprintf(err, errlen,
                     "ZooKeeper at %s: the servers answer but serve no requests: the ensemble "
                     "has lost its quorum (no leader)",
                     zc->hosts);
        else
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
static void session_close(zkclient *zc)
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
            call_free(k);
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
 * an expired one is replaced first. 0 or a DLOCK_E* code in err. */
static int session_enter(zkclient *zc, bool reopen, char *err, size_t errlen)
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
        session_close(zc);
        rc = zk_session_open(zc, err, errlen);
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
static bool wait_connected(zkclient *zc, int64_t until_ns)
{
    pthread_mutex_lock(&zc->mu);
    while (zc->state != ZOO_CONNECTED_STATE && !zc->expired && cv_wait_until(zc, until_ns))
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
static void session_move(zkclient *zc, zhandle_t *zh)
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
        if (strstr(sv->data[i], o->owner)) {
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
        if (!synced && zoo_async(zh, zc->base, on_sync_ignore, zc) != ZOK)
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

static void orphan_add(zkclient *zc, const char *parent, const char *owner)
{
    zk_orphan *o = calloc(1, sizeof *o);
    if (!o)
        return; /* the node then lives until the session ends */
    o->zc = zc;
    snprintf(o->parent, sizeof o->parent, "%s", parent);
    snprintf(o->owner, sizeof o->owner, "%s", owner);
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
    op->zc = zc;
    int rc = session_enter(zc, reopen, err, errlen);
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
    zk_call *k = call_new(op->zc, op->zh, kind, op->evfd);
    if (!k)
        return NULL;
    call_arm(k, false);
    int len = data ? (int)strlen(data) : -1;
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
        rc = zoo_aset(op->zh, path, data, len, -1, on_stat, k);
        break;
    case CALL_VOID:
        rc = zoo_adelete(op->zh, path, -1, on_void, k);
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
static int zk_confirm(zk_op *op, int64_t until_ns, int64_t *sent)
{
    zkclient *zc = op->zc;
    int64_t t = dl_now_ns();
    int rc = zk_do(op, CALL_SYNC, zc->base, NULL, until_ns, NULL);
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

int64_t zk_op_until(zkclient *zc)
{
    return dl_deadline_in(zc->op_ms);
}

/* The bound of one request of l: op_timeout_ms cut to l's op deadline. */
static int64_t req_until(dlock_lock *l)
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

static zk_call *own_arm(dlock_lock *l, zk_op *op, const char *path)
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
static void own_drop(dlock_lock *l)
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

/* ---- acquisition ------------------------------------------------------------------ */

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
    zk_call *sync = zk_send(op, CALL_SYNC, op->zc->base, NULL, 0, NULL);
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
    for (int i = 0; i < kids->nkids && found < 0; i++)
        if (strstr(kids->kids[i], l->owner))
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
 * silent for op_timeout_ms, see session_move) before the deadline. A
 * waiter with time left never gives up on a lost reply: the member it went
 * to may be stopped or cut off while the others serve. A try (deadline 0)
 * moves the session but does not wait for it.
 */
static bool acq_retry(zk_op *op, int64_t deadline, int rc, int *lost)
{
    if (!reply_lost(rc) || ++*lost > ZK_LOST_MAX)
        return false;
    if (rc == ZOPERATIONTIMEOUT)
        session_move(op->zc, op->zh);
    if (deadline == 0 || (deadline > 0 && dl_now_ns() >= deadline))
        return false;
    return wait_connected(op->zc, deadline);
}

/* Create our node and read the queue (pipelined: a session's requests are
 * served in order, so the read sees the create). ZOK with zl->path set and
 * *kids the queue's read in flight. A create whose reply is lost (*unknown)
 * is not sent again before our node is known not to be there (find_own):
 * one left behind would block the queue — us included — until the session
 * ends (Curator's "protected" mode, with the owner id as its GUID). */
static int enqueue(zk_op *op, dlock_lock *l, int64_t deadline, int64_t *czxid, zk_call **kids,
                   bool *unknown, int64_t *created_sent)
{
    zkclient *zc = op->zc;
    zklock *zl = l->bstate;
    char prefix[ZK_PATH_MAX], data[sizeof zc->self + 2];
    char leaf[64];
    snprintf(leaf, sizeof leaf, "%s-%s-", zl->kind, l->owner);
    if (!zk_pjoin(prefix, sizeof prefix, zl->parent, leaf))
        return ZBADARGUMENTS;
    snprintf(data, sizeof data, "%s\n", zc->self);
    int parents = 0, lost = 0;
    for (;;) {
        int rc;
        if (*unknown) {
            rc = find_own(op, l, req_until(l), zl->path, sizeof zl->path, czxid);
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
            rc = zk_result(op, cr, req_until(l));
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
                rc = zk_ensure_parent(op, zl->parent, req_until(l));
                if (rc == ZOK)
                    continue;
            } else if (reply_lost(rc) || rc == ZSYSTEMERROR) {
                *unknown = true; /* created or not: the reply is lost */
            }
        }
        if (!acq_retry(op, deadline, rc, &lost))
            return rc;
    }
}

/* Give our node up (timeout, cancel, error, a failed try): stop watching
 * it and delete it; a deletion (or a creation) whose outcome is unknown
 * leaves an orphan, deleted once the connection is back. */
static void give_up(zk_op *op, dlock_lock *l, bool unknown)
{
    zklock *zl = l->bstate;
    own_drop(l);
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
        orphan_add(op->zc, zl->parent, l->owner);
}

static const char *base_name(const char *path)
{
    const char *s = strrchr(path, '/');
    return s ? s + 1 : path;
}

/* An acquisition's failure: a request cut short by the caller's deadline is
 * a timeout (DLOCK_ETIMEDOUT), not an unreachable server. */
static int acq_fail(dlock_lock *l, int64_t deadline, int rc, const char *what)
{
    zkclient *zc = zc_of(l->c);
    char err[300];
    if (reply_lost(rc) && deadline > 0 && dl_now_ns() >= deadline)
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
            int rc2 = zk_result(op, w2, req_until(l));
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
        if (zk_do(op, CALL_CHILDREN, zl->parent, NULL, req_until(l), &kids) == ZOK)
            n2 = zk_queue_of(kids->kids, kids->nkids, &q2);
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
    for (;;) {
        if (!z->kids)
            z->kids = zk_send(z->op, CALL_CHILDREN, zl->parent, NULL, 0, NULL);
        int rc = zk_result(z->op, z->kids, req_until(l));
        if (rc == ZOK)
            break;
        if (!acq_retry(z->op, z->deadline, rc, &z->nlost)) {
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
    z->n = zk_queue_of(z->snap->kids, z->snap->nkids, &z->q);
    if (z->n < 0)
        return dl_lock_err(l, DLOCK_ENOMEM, "out of memory");
    z->i = 0;
    while (z->i < z->n && strcmp(z->q[z->i].name, z->mine) != 0)
        z->i++;
    if (z->i == z->n)
        return dl_lock_err(l, DLOCK_EUNREACHABLE,
                           "lock \"%s\": its queue node vanished while it waited "
                           "(the session expired, or dlock break) (%s)",
                           l->name, zc->redacted);
    *queue = z->q;
    *stride = sizeof *z->q;
    *i = z->i;
    return 0;
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
    int rc = zk_result(z->op, w, req_until(l));
    if (rc == ZOK && b == WATCH_CHILDREN) {
        /* The reply is the queue as the watch began: it may let us in. */
        zk_node *q2 = NULL;
        int n2 = zk_queue_of(w->kids, w->nkids, &q2);
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
            return rc == DLOCK_ECANCELED || rc == DLOCK_ETIMEDOUT
                       ? rc
                       : dl_lock_err(l, rc, "lock \"%s\": waiting in its queue: %s", l->name,
                                     dlock_strerror(rc));
        }
        rc = w->event == ZOO_DELETED_EVENT ? ZNONODE
             : w->event == ZOO_CHANGED_EVENT ? ZNODEEXISTS
                                              : ZOK;
    } else if (rc != ZOK && rc != ZNONODE && !acq_retry(z->op, z->deadline, rc, &z->nlost)) {
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

/* One try; *again when the session expired while it waited (its node went
 * with it) and a new session may try again. */
static int acquire_once(dlock_lock *l, int64_t deadline, bool *again)
{
    zkclient *zc = zc_of(l->c);
    zklock *zl = l->bstate;
    zk_op op;
    char err[300];
    int rc = zk_op_begin(zc, true, &op, err, sizeof err);
    if (rc)
        return dl_lock_err(l, rc, "lock \"%s\": %s (%s)", l->name, err, zc->redacted);
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
    int64_t asked = 0;
    rc = enqueue(&op, l, deadline, &czxid, &kids, &unknown, &asked);
    if (session_ended(zc, rc)) {
        /* The session ended before the client heard of it (a process
         * stopped past its timeout): start a new one and queue there. */
        zk_op_end(&op);
        rc = zk_op_begin(zc, true, &op, err, sizeof err);
        if (rc)
            return dl_lock_err(l, rc, "lock \"%s\": %s (%s)", l->name, err, zc->redacted);
        zl->path[0] = '\0';
        unknown = false; /* (the old session's nodes went with it) */
        rc = enqueue(&op, l, deadline, &czxid, &kids, &unknown, &asked);
    }
    if (rc != ZOK) {
        /* The session expired while the create's reply was lost (a stall
         * longer than the session: the node, if made, went with it): a
         * wait may go on in a new session, as one that expired while it
         * waited does. */
        pthread_mutex_lock(&zc->mu);
        *again = zc->expired && deadline != 0 && reply_lost(rc);
        pthread_mutex_unlock(&zc->mu);
        give_up(&op, l, unknown);
        zk_op_end(&op);
        return acq_fail(l, deadline, rc, "creating its node");
    }
    zl->own = own_arm(l, &op, zl->path);
    zk_waiting z = {.op = &op,
                    .l = l,
                    .mine = base_name(zl->path),
                    .deadline = deadline,
                    .cancel_fd = cancel_fd,
                    .kids = kids};
    dl_queue_waiter qw = {.read = zk_wait_read, .wait = zk_wait_on, .ctx = &z};
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
    if (waited && zl->kind[0] == 's') {
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
    if (dl_now_ns() - asked > dl_ms_to_ns(l->opts.ttl_ms) / 3)
        (void)zk_confirm(&op, req_until(l), &asked);
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
    own_drop(l);
    zk_op op;
    char err[300];
    int rc = zk_op_begin(zc, false, &op, err, sizeof err);
    if (rc) {
        zl->path[0] = '\0';
        return dl_lock_err(l, rc == DLOCK_ELOST ? DLOCK_ELOST : rc,
                           "lock \"%s\": %s: its node is gone with it (%s)", l->name, err,
                           zc->redacted);
    }
    rc = zk_do(&op, CALL_VOID, zl->path, NULL, req_until(l), NULL);
    if (rc == ZOPERATIONTIMEOUT)
        session_move(zc, op.zh);
    if (reply_lost(rc) && wait_connected(zc, req_until(l))) /* the session resumed */
        rc = zk_do(&op, CALL_VOID, zl->path, NULL, req_until(l), NULL);
    pthread_mutex_lock(&zc->mu);
    if (rc != ZOK && zc->expired)
        rc = ZNONODE; /* the session ended: its nodes are gone */
    pthread_mutex_unlock(&zc->mu);
    int result = 0;
    if (rc == ZNONODE)
        result = dl_lock_err(l, DLOCK_ELOST, "lock \"%s\" was lost: its node was already gone",
                             l->name);
    else if (rc != ZOK) {
        orphan_add(zc, zl->parent, l->owner);
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
        own_drop(l);
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
    rc = zk_confirm(&op, req_until(l), &sent);
    zk_op_end(&op);
    if (rc == ZOK) {
        l->lease_start_ns = sent;
        return 0;
    }
    if (rc == ZSESSIONEXPIRED)
        return dl_lock_err(l, DLOCK_ELOST, "lock \"%s\": the ZooKeeper session expired", l->name);
    return dl_lock_err(l, zk_code(rc), "lock \"%s\" is uncertain: %s", l->name,
                       zk_why(zc, rc, err, sizeof err));
}

/* ---- what is known about a name ----------------------------------------------------- */

/* The queue of name now: *q (malloc'd, names into *kids), its length, or
 * a negative ZooKeeper code; ZNONODE gives an empty queue. */
static int read_queue(zk_op *op, const char *parent, zk_call **kids, zk_node **q)
{
    *kids = NULL;
    *q = NULL;
    int rc = zk_do(op, CALL_CHILDREN, parent, NULL, zk_op_until(op->zc), kids);
    if (rc == ZNONODE)
        return 0;
    if (rc != ZOK)
        return rc;
    int n = zk_queue_of((*kids)->kids, (*kids)->nkids, q);
    return n < 0 ? ZSYSTEMERROR : n;
}

int zk_parent_of(zkclient *zc, const char *name, char *buf, size_t len)
{
    return zk_pjoin(buf, len, zc->base, name) ? 0 : -1;
}

/* The first holder of name and its node's data/stat (*k, given up by the
 * caller), the counts, or a ZooKeeper code; ZNONODE when nobody holds. */
static int first_holder(zk_op *op, const char *name, int *holders, int *waiters, zk_call **k,
                        char *path, size_t len)
{
    char parent[ZK_PATH_MAX];
    if (zk_parent_of(op->zc, name, parent, sizeof parent))
        return ZBADARGUMENTS;
    for (int tries = 0; tries < 5; tries++) {
        zk_call *kids;
        zk_node *q;
        int n = read_queue(op, parent, &kids, &q);
        if (n < 0)
            return n;
        int first = -1, h = 0;
        for (int i = 0; i < n; i++)
            if (zk_blocker(q, i) == HOLDS) {
                h++;
                if (first < 0)
                    first = i;
            }
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
    rc = first_holder(&op, name, &holders, &waiters, &k, path, sizeof path);
    zk_op_end(&op);
    info->lease_ms = -1;
    info->holders = holders;
    info->waiters = waiters;
    if (rc == ZNONODE) {
        info->held = 0;
        return 0;
    }
    if (rc != ZOK)
        return dl_client_err(c, zk_code(rc), "inspect \"%s\": %s (%s)", name,
                             zk_why(zc, rc, err, sizeof err), zc->redacted);
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
    int n = read_queue(&op, parent, &kids, &q);
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
        result = dl_client_err(c, zk_code(n), "break \"%s\": %s (%s)", name,
                               zk_why(zc, n, err, sizeof err), zc->redacted);
    free(q);
    zk_call_drop(kids);
    zk_op_end(&op);
    if (result)
        return result;
    info->held = broken > 0;
    info->holders = broken;
    if (broken == 0)
        return dl_client_err(c, DLOCK_ENOTHELD, "lock \"%s\" is not held: nothing to break",
                             name);
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
    rc = zk_do(&op, CALL_SET, zl->path, data, req_until(l), NULL);
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
    rc = first_holder(&op, name, &holders, &waiters, &k, path, sizeof path);
    zk_op_end(&op);
    if (rc == ZNONODE)
        return dl_client_err(c, DLOCK_ENOENT, "no leader for \"%s\"", name);
    if (rc != ZOK)
        return dl_client_err(c, zk_code(rc), "leader of \"%s\": %s (%s)", name,
                             zk_why(zc, rc, err, sizeof err), zc->redacted);
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
    rc = zk_do(&op, CALL_CHILDREN, zc->base, NULL, zk_op_until(zc), &kids);
    zk_op_end(&op);
    if (rc == ZNONODE)
        return 0;
    if (rc != ZOK)
        return dl_client_err(c, zk_code(rc), "list: %s (%s)", zk_why(zc, rc, err, sizeof err),
                             zc->redacted);
    int stop = 0;
    size_t plen = strlen(prefix);
    for (int i = 0; i < kids->nkids && !stop; i++)
        if (strncmp(kids->kids[i], prefix, plen) == 0 &&
            dlock_name_valid(kids->kids[i], NULL, 0) == 0)
            stop = fn(kids->kids[i], arg);
    zk_call_drop(kids);
    return stop;
}

/* ---- clients and handles --------------------------------------------------------------- */

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
    dl_qkind_format(l, zl->kind, sizeof zl->kind);
    /* The session is the lease: a lock is valid for 2/3 of its timeout
     * past the last reply asked for (see the top of this file). */
    pthread_mutex_lock(&zc->mu);
    int t = zc->negotiated_ms ? zc->negotiated_ms : zc->session_ms;
    pthread_mutex_unlock(&zc->mu);
    l->opts.ttl_ms = t * 2 / 3 < 30 ? 30 : t * 2 / 3;
    l->bstate = zl;
    return 0;
}

static void zk_lock_fini(dlock_lock *l)
{
    own_drop(l);
    free(l->bstate);
    l->bstate = NULL;
}

void zkclient_free(zkclient *zc)
{
    session_close(zc);
    while (zc->calls) {
        zk_call *k = zc->calls;
        zc->calls = k->next;
        call_free(k);
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
    zkclient *zc = calloc(1, sizeof *zc);
    if (!zc)
        return dl_client_err(c, DLOCK_ENOMEM, "out of memory");
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
    snprintf(zc->base, bl, "%s/dlock", chroot);
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
    c->bstate = zc;
    char err[400];
    int rc = zk_session_open(zc, err, sizeof err);
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
    .release = zk_release,
    .renew = zk_renew,
    .abandon = zk_abandon,
    .inspect = zk_inspect,
    .list = zk_list,
    .set_value = zk_set_value,
    .get_value = zk_get_value,
    .break_lock = zk_break,
};
#define ZK_OPS .ops = &zk_ops

#else /* no ZooKeeper C client */

#define ZK_OPS                                                                               \
    .missing = "this build has no ZooKeeper C client (install libzookeeper-mt-dev and rebuild)"

#endif

const dl_backend dl_backend_zk = {
    .name = "zk",
    .schemes = zk_schemes,
    .params = "session",
    .caps = ZK_CAPS,
    .liveness = ZK_LIVENESS,
    .fencing = ZK_FENCING,
    ZK_OPS,
};
