/* SPDX-License-Identifier: MIT */
/*
 * conn.c — connections to Redis servers for the whole Redis family.
 *
 * hiredis connects and parses replies; this file adds what a lock needs on
 * top: per-call deadlines and cancellation (we send the requests ourselves
 * and poll the socket together with the lock's cancel eventfd before each
 * redisBufferRead), pipelining, the same command on many
 * servers at once (Redlock), and a small pool of idle connections per server
 * so that one client serves many threads and many lock names.
 */
#include "redis_int.h"
#include "redis_cluster.h"

#include <errno.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>

#define POOL_MAX_IDLE 64
/* A connection whose unread replies pile up is on a slow server: close it. */
#define POOL_MAX_OWED 8
/* How long a write may wait for room in the socket buffer. */
#define SEND_WAIT_MS 2000

void rcmd_init(rcmd *c)
{
    c->argc = 0;
}

void rcmd_addlen(rcmd *c, const char *s, size_t n)
{
    if (c->argc >= RD_MAXARGS)
        abort(); /* a programming error: commands are built from constants */
    c->argv[c->argc] = s;
    c->len[c->argc] = n;
    c->argc++;
}

void rcmd_add(rcmd *c, const char *s)
{
    rcmd_addlen(c, s, strlen(s));
}

void rcmd_addll(rcmd *c, long long v, char *buf)
{
    int n = snprintf(buf, 24, "%lld", v);
    rcmd_addlen(c, buf, (size_t)n);
}

void rnode_init(rnode *n, const char *host, int port)
{
    memset(n, 0, sizeof *n);
    snprintf(n->host, sizeof n->host, "%s", host);
    n->port = port;
    pthread_mutex_init(&n->mu, NULL);
    dl_pool_init(&n->idle, POOL_MAX_IDLE);
}

static void free_conn(rconn *c)
{
    redisFree(c->ctx);
    free(c);
}

static void free_pooled(dl_pooled *it)
{
    free_conn(dl_container_of(it, rconn, pooled));
}

void rnode_destroy(rnode *n)
{
    dl_pool_stop(&n->idle, free_pooled);
    dl_pool_fini(&n->idle);
    if (n->connecting)
        redisFree(n->connecting);
    n->connecting = NULL;
    pthread_mutex_destroy(&n->mu);
}

void rnode_reset(rnode *n, const char *host, int port)
{
    pthread_mutex_lock(&n->mu);
    redisContext *connecting = n->connecting;
    n->connecting = NULL;
    if (host) {
        snprintf(n->host, sizeof n->host, "%s", host);
        n->port = port;
    }
    n->epoch++;
    pthread_mutex_unlock(&n->mu);
    /* No connection of the old epoch goes in from now on (rconn_put looks
     * at the epoch under mu): the ones idle now are let go. */
    dl_pool_drain(&n->idle, free_pooled);
    if (connecting)
        redisFree(connecting);
}

static struct timeval tv_ms(int ms)
{
    struct timeval tv = {.tv_sec = ms / 1000, .tv_usec = (ms % 1000) * 1000};
    return tv;
}

/* A server's string in an error message: at most max bytes, quoted, with
 * anything unprintable (and quotes and backslashes) escaped. */
static size_t put_quoted(char *buf, size_t len, const char *s, size_t n, size_t max)
{
    static const char hex[] = "0123456789abcdef";
    size_t o = 0;
    if (len < 8)
        return 0;
    buf[o++] = '"';
    size_t i = 0;
    for (; i < n && i < max && o + 6 < len; i++) {
        unsigned char ch = (unsigned char)s[i];
        if (ch == '"' || ch == '\\') {
            buf[o++] = '\\';
            buf[o++] = (char)ch;
        } else if (ch >= 0x20 && ch < 0x7f) {
            buf[o++] = (char)ch;
        } else {
            buf[o++] = '\\';
            buf[o++] = 'x';
            buf[o++] = hex[ch >> 4];
            buf[o++] = hex[ch & 15];
        }
    }
    if (i < n && o + 5 < len) {
        memcpy(buf + o, "...", 3);
        o += 3;
    }
    buf[o++] = '"';
    buf[o] = '\0';
    return o;
}

void rd_reply_desc(const redisReply *r, char *buf, size_t len)
{
    if (!len)
        return;
    if (!r) {
        snprintf(buf, len, "no reply");
        return;
    }
    const char *kind;
    switch (r->type) {
    case REDIS_REPLY_STRING:
        kind = "string ";
        break;
    case REDIS_REPLY_STATUS:
        kind = "status ";
        break;
    case REDIS_REPLY_ERROR:
        kind = "error ";
        break;
    case REDIS_REPLY_INTEGER:
        snprintf(buf, len, "integer %lld", r->integer);
        return;
    case REDIS_REPLY_NIL:
        snprintf(buf, len, "nil");
        return;
    case REDIS_REPLY_ARRAY:
        snprintf(buf, len, "an array of %zu", (size_t)r->elements);
        return;
    default:
        snprintf(buf, len, "a reply of type %d", r->type);
        return;
    }
    int k = snprintf(buf, len, "%s", kind);
    if (k > 0 && (size_t)k < len && r->str)
        put_quoted(buf + k, len - (size_t)k, r->str, r->len, 80);
}

/* A failed reply in one line: the server's error, or what came instead of
 * what was expected. */
static void reply_err(const char *expected, const redisReply *r, char *err, size_t errlen)
{
    if (r && r->type == REDIS_REPLY_ERROR && r->str) {
        int k = snprintf(err, errlen, "redis said ");
        if (k > 0 && (size_t)k < errlen)
            put_quoted(err + k, errlen - (size_t)k, r->str, r->len, 200);
        return;
    }
    char got[160];
    rd_reply_desc(r, got, sizeof got);
    snprintf(err, errlen, "expected %s, got %s", expected, got);
}

/* hiredis 0.14 has no limit of its own (1.x has maxelements). Its default
 * object functions are kept and called; only the array count is checked. */
#if HIREDIS_MAJOR >= 1
typedef size_t rd_count;
#else
typedef int rd_count;
#endif
static const redisReplyObjectFunctions *default_fns;
static redisReplyObjectFunctions bounded_fns;
static pthread_once_t bounded_once = PTHREAD_ONCE_INIT;

static void *bounded_array(const redisReadTask *task, rd_count elements)
{
    if (elements > RD_MAX_ELEMENTS)
        return NULL; /* the reader reports an error, the connection is dropped */
    return default_fns->createArray(task, elements);
}

static void bounded_init(void)
{
    redisReader *probe = redisReaderCreate();
    if (!probe || !probe->fn) {
        if (probe)
            redisReaderFree(probe);
        return;
    }
    default_fns = probe->fn; /* hiredis's static table: outlives the reader */
    bounded_fns = *default_fns;
    bounded_fns.createArray = bounded_array;
    redisReaderFree(probe);
}

void rd_bound_reader(redisReader *r)
{
    pthread_once(&bounded_once, bounded_init);
    if (r && default_fns && r->fn == default_fns)
        r->fn = &bounded_fns;
}

/* Take an idle connection of n, if any; *epoch, host and port for a new one. */
static rconn *take_idle(rnode *n, unsigned *epoch, char *host, size_t hostlen, int *port)
{
    pthread_mutex_lock(&n->mu);
    dl_pooled *it = dl_pool_take(&n->idle, NULL, NULL);
    rconn *c = it ? dl_container_of(it, rconn, pooled) : NULL;
    *epoch = n->epoch;
    snprintf(host, hostlen, "%s", n->host);
    *port = n->port;
    pthread_mutex_unlock(&n->mu);
    return c;
}

/* A connect to a port of this host where nothing listens can be given that
 * very port as its own and succeed, connected to itself (TCP simultaneous
 * open): it would then read its own requests back as replies, and keep the
 * server from starting on its port again. */
static bool self_connected(int fd)
{
    struct sockaddr_storage me, peer;
    socklen_t ml = sizeof me, pl = sizeof peer;
    return getsockname(fd, (struct sockaddr *)&me, &ml) == 0 &&
           getpeername(fd, (struct sockaddr *)&peer, &pl) == 0 && ml == pl &&
           memcmp(&me, &peer, ml) == 0;
}

/* A connected ctx to n made into a connection: keepalive, AUTH, SELECT,
 * their replies waited for at most timeout_ms. On failure *fail (if not
 * NULL) says what kind it was, as a DLOCK_E* code. */
static rconn *setup(rnode *n, unsigned epoch, redisContext *ctx, const rconf *cf, int timeout_ms,
                    int *fail, char *err, size_t errlen)
{
    int dummy;
    if (!fail)
        fail = &dummy;
    *fail = DLOCK_EUNREACHABLE;
    if (self_connected(ctx->fd)) {
        snprintf(err, errlen, "redis %s:%d: Connection refused (nothing listens there)",
                 n->host, n->port);
        redisFree(ctx);
        return NULL;
    }
    (void)redisEnableKeepAlive(ctx);
    rd_bound_reader(ctx->reader);
    rconn *c = calloc(1, sizeof *c);
    if (!c) {
        redisFree(ctx);
        snprintf(err, errlen, "out of memory");
        *fail = DLOCK_ENOMEM;
        return NULL;
    }
    c->ctx = ctx;
    c->node = n;
    c->epoch = epoch;
    rcmd cmds[2];
    int ncmd = 0;
    if (cf->password) {
        rcmd_init(&cmds[ncmd]);
        rcmd_add(&cmds[ncmd], "AUTH");
        if (cf->user)
            rcmd_add(&cmds[ncmd], cf->user);
        rcmd_add(&cmds[ncmd], cf->password);
        ncmd++;
    }
    char dbbuf[24];
    if (cf->db > 0) {
        rcmd_init(&cmds[ncmd]);
        rcmd_add(&cmds[ncmd], "SELECT");
        rcmd_addll(&cmds[ncmd], cf->db, dbbuf);
        ncmd++;
    }
    if (ncmd > 0) {
        redisReply *r[2] = {0};
        char why[256];
        int rc = timeout_ms == 0 ? RD_EIO
                                 : rconn_call(c, cmds, ncmd, r, timeout_ms, -1, NULL, why,
                                              sizeof why);
        if (rc != RD_OK) {
            if (timeout_ms == 0)
                snprintf(why, sizeof why, "no time left to log in");
            snprintf(err, errlen, "redis %s:%d: %s", n->host, n->port, why);
            rconn_drop(c);
            return NULL;
        }
        for (int i = 0; i < ncmd; i++) {
            bool is_auth = i == 0 && cf->password;
            if (rc == RD_OK && (r[i]->type != REDIS_REPLY_STATUS || !r[i]->str ||
                                strcmp(r[i]->str, "OK") != 0)) {
                char what[256];
                reply_err("status \"OK\"", r[i], what, sizeof what);
                /* The server's words never include the password we sent. */
                if (is_auth)
                    snprintf(err, errlen, "redis %s:%d: AUTH failed: %s", n->host, n->port,
                             what);
                else
                    snprintf(err, errlen, "redis %s:%d: database %d: SELECT failed: %s",
                             n->host, n->port, cf->db, what);
                /* A refused login or database is the URL's fault, not the
                 * network's: say so (the CLI's usage/permission exits). */
                if (r[i]->type == REDIS_REPLY_ERROR)
                    *fail = is_auth ? DLOCK_EPERM : DLOCK_EURL;
                else
                    *fail = DLOCK_EPROTO;
                rc = RD_EIO;
            }
            freeReplyObject(r[i]);
        }
        if (rc != RD_OK) {
            rconn_drop(c);
            return NULL;
        }
    }
    return c;
}

rconn *rconn_get(rnode *n, const rconf *cf, int timeout_ms, int *fail, char *err,
                 size_t errlen)
{
    unsigned epoch;
    char host[256];
    int port;
    if (fail)
        *fail = DLOCK_EUNREACHABLE;
    rconn *c = take_idle(n, &epoch, host, sizeof host, &port);
    if (c)
        return c;
    /* No time left (the caller's deadline passed): a connect would wait
     * past it, and hiredis takes a zero timeout as none at all. */
    if (timeout_ms == 0) {
        snprintf(err, errlen, "redis %s:%d: no time left to connect", host, port);
        return NULL;
    }
    int64_t until = timeout_ms < 0 ? -1 : dl_deadline_in(timeout_ms);
    redisContext *ctx =
        redisConnectWithTimeout(host, port, tv_ms(timeout_ms < 0 ? cf->connect_timeout_ms : timeout_ms));
    if (!ctx) {
        snprintf(err, errlen, "redis %s:%d: out of memory", host, port);
        if (fail)
            *fail = DLOCK_ENOMEM;
        return NULL;
    }
    if (ctx->err) {
        snprintf(err, errlen, "redis %s:%d: %s", host, port, ctx->errstr);
        redisFree(ctx);
        return NULL;
    }
    /* A socket timeout bounds every blocking read or write; our calls poll
     * with their own deadlines first. */
    if (redisSetTimeout(ctx, tv_ms(cf->op_timeout_ms)) != REDIS_OK) {
        snprintf(err, errlen, "redis %s:%d: cannot set timeout", host, port);
        redisFree(ctx);
        return NULL;
    }
    /* Logging in shares the connect's time: the whole stays in the bound. */
    return setup(n, epoch, ctx, cf, until < 0 ? cf->connect_timeout_ms : dl_ms_left(until), fail,
                 err, errlen);
}

/*
 * Connections to several servers at once (Redlock). Idle ones come from the
 * pools; new ones are connected in parallel (non-blocking connects, polled
 * together) for at most wait_ms, or until `need` connections are there. A
 * connect still in progress then is kept
 * by its node and looked at again by the next call, which does not wait for
 * it again: a master that drops packets (a host that is down, not a server
 * that is dead) costs the first call wait_ms and later calls nothing, until
 * its connect times out after the connect timeout and a new one starts.
 */
void rconn_get_many(rnode *nodes, int n, const rconf *cf, rconn **out, int need, int wait_ms,
                    char *err, size_t errlen)
{
    redisContext *ctx[n];
    int64_t deadline[n]; /* of each connect in progress */
    unsigned epoch[n];
    bool slow[n]; /* its connect was in progress before this call */
    int64_t now = dl_now_ns(), until = now + (int64_t)wait_ms * 1000000LL;
    int waiting = 0; /* connects this call waits for */
    int have = 0;
    for (int i = 0; i < n; i++) {
        char host[256];
        int port;
        ctx[i] = NULL;
        slow[i] = false;
        out[i] = take_idle(&nodes[i], &epoch[i], host, sizeof host, &port);
        if (out[i]) {
            have++;
            continue;
        }
        pthread_mutex_lock(&nodes[i].mu);
        if (nodes[i].connecting && nodes[i].connecting_epoch == epoch[i]) {
            ctx[i] = nodes[i].connecting;
            deadline[i] = nodes[i].connecting_until;
            slow[i] = true; /* not waited for again, only looked at */
        } else if (nodes[i].connecting) {
            redisFree(nodes[i].connecting); /* the address changed meanwhile */
        }
        nodes[i].connecting = NULL;
        pthread_mutex_unlock(&nodes[i].mu);
        if (!ctx[i]) {
            ctx[i] = redisConnectNonBlock(host, port);
            deadline[i] = now + (int64_t)cf->connect_timeout_ms * 1000000LL;
            if (!ctx[i] || ctx[i]->err) {
                snprintf(err, errlen, "redis %s:%d: %s", host, port,
                         ctx[i] ? ctx[i]->errstr : "out of memory");
                redisFree(ctx[i]);
                ctx[i] = NULL;
            }
        }
        waiting += ctx[i] && !slow[i];
    }
    for (bool first = true; first || (waiting > 0 && have < need); first = false) {
        struct pollfd p[n];
        int idx[n], k = 0;
        for (int i = 0; i < n; i++)
            if (ctx[i]) {
                p[k] = (struct pollfd){.fd = ctx[i]->fd, .events = POLLOUT};
                idx[k++] = i;
            }
        if (k == 0)
            break;
        int pr = poll(p, (nfds_t)k, waiting > 0 && have < need ? dl_ms_left(until) : 0);
        if (pr < 0 && errno != EINTR)
            break;
        for (int j = 0; j < k && pr > 0; j++) {
            if (!p[j].revents)
                continue;
            int i = idx[j], soerr = 0;
            socklen_t len = sizeof soerr;
            redisContext *c = ctx[i];
            ctx[i] = NULL;
            waiting -= !slow[i];
            if (getsockopt(c->fd, SOL_SOCKET, SO_ERROR, &soerr, &len) != 0 || soerr != 0) {
                snprintf(err, errlen, "redis %s:%d: %s", nodes[i].host, nodes[i].port,
                         strerror(soerr ? soerr : errno));
                redisFree(c);
                continue;
            }
            /* Logging in waits no longer than the connects may. */
            out[i] = setup(&nodes[i], epoch[i], c, cf, dl_ms_left(until), NULL, err, errlen);
            have += out[i] != NULL;
        }
        if (pr == 0 || dl_now_ns() >= until)
            break;
    }
    /* Connects still in progress stay with their node, until their own
     * deadline. */
    now = dl_now_ns();
    for (int i = 0; i < n; i++) {
        if (!ctx[i])
            continue;
        if (!have)
            snprintf(err, errlen, "redis %s:%d: no connection within %d ms", nodes[i].host,
                     nodes[i].port, wait_ms);
        if (now >= deadline[i]) {
            redisFree(ctx[i]);
            continue;
        }
        pthread_mutex_lock(&nodes[i].mu);
        redisContext *old = NULL;
        if (nodes[i].epoch == epoch[i]) {
            old = nodes[i].connecting;
            nodes[i].connecting = ctx[i];
            nodes[i].connecting_until = deadline[i];
            nodes[i].connecting_epoch = epoch[i];
        } else {
            old = ctx[i];
        }
        pthread_mutex_unlock(&nodes[i].mu);
        if (old)
            redisFree(old);
    }
}

void rconn_put(rconn *c)
{
    if (!c)
        return;
    rnode *n = c->node;
    pthread_mutex_lock(&n->mu);
    bool pooled = c->epoch == n->epoch && !c->ctx->err && c->owed <= POOL_MAX_OWED &&
                  dl_pool_put(&n->idle, &c->pooled);
    pthread_mutex_unlock(&n->mu);
    if (!pooled)
        free_conn(c);
}

void rconn_drop(rconn *c)
{
    if (!c)
        return;
    free_conn(c);
}

/* cmd in the wire format (free with redisFreeCommand); length or -1. */
static int format(const rcmd *cmd, char **wire)
{
    /* hiredis 0.14 takes argv without const; it does not modify it. */
    return redisFormatCommandArgv(wire, cmd->argc, (const char **)(uintptr_t)cmd->argv,
                                  cmd->len);
}

/*
 * Requests are written here, not by hiredis (which only connects and parses
 * replies): hiredis writes with write(2), and writing to a connection the
 * server has reset (killed, restarted) would raise SIGPIPE, whose default
 * action kills the host program. send(MSG_NOSIGNAL) gets EPIPE instead.
 * Every write is non-blocking (MSG_DONTWAIT) and waits for room in the
 * socket buffer no later than until_ns (-1: SEND_WAIT_MS from now), so that
 * a server that stopped reading cannot hold the caller past its deadline.
 */
/* Write what c has room for of buf[*sent..len), without waiting: false when
 * the connection failed (errno says why). */
static bool send_some(rconn *c, const char *buf, size_t len, size_t *sent)
{
    while (*sent < len) {
        ssize_t n = send(c->ctx->fd, buf + *sent, len - *sent, MSG_NOSIGNAL | MSG_DONTWAIT);
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
            return true;
        if (n <= 0) {
            if (n == 0)
                errno = EPIPE; /* (nothing written) */
            return false;
        }
        *sent += (size_t)n;
    }
    return true;
}

static int send_all(rconn *c, const char *buf, size_t len, int64_t until_ns, char *err,
                    size_t errlen)
{
    if (until_ns < 0)
        until_ns = dl_deadline_in(SEND_WAIT_MS);
    size_t sent = 0;
    while (send_some(c, buf, len, &sent)) {
        if (sent == len)
            return RD_OK;
        struct pollfd p = {.fd = c->ctx->fd, .events = POLLOUT};
        int ms = dl_ms_left(until_ns);
        int pr = ms > 0 ? poll(&p, 1, ms) : 0;
        if (pr > 0 || (pr < 0 && errno == EINTR))
            continue;
        errno = ETIMEDOUT;
        break;
    }
    snprintf(err, errlen, "write: %s", strerror(errno));
    return RD_EIO;
}

void rconn_abandon(rconn *c, const rcmd *undo)
{
    if (!c)
        return;
    char *wire = NULL;
    int wlen = undo ? format(undo, &wire) : -1;
    if (wlen > 0) {
        char err[128];
        /* No waiting: it goes out now or not at all (the server then has
         * only what lapses by itself). */
        (void)send_all(c, wire, (size_t)wlen, dl_now_ns(), err, sizeof err);
    }
    if (wire)
        redisFreeCommand(wire);
    rconn_drop(c);
}

/* The next complete reply already read from c (*reply NULL if none yet),
 * after dropping the late replies of calls that stopped waiting. */
static int next_reply(rconn *c, void **reply)
{
    int rc;
    while ((rc = redisGetReplyFromReader(c->ctx, reply)) == REDIS_OK && *reply && c->owed > 0) {
        freeReplyObject(*reply); /* an earlier call's, no longer wanted */
        c->owed--;
        *reply = NULL;
    }
    return rc;
}

int rconn_call(rconn *c, const rcmd *cmds, int n, redisReply **out, int timeout_ms,
               int cancel_fd, int64_t *sent_ns, char *err, size_t errlen)
{
    for (int i = 0; i < n; i++)
        out[i] = NULL;
    /* Pipelined: all commands in one write. */
    char *wire[n];
    int wlen[n];
    size_t total = 0;
    int rc = RD_OK;
    for (int i = 0; i < n; i++) {
        wire[i] = NULL;
        wlen[i] = rc == RD_OK ? format(&cmds[i], &wire[i]) : -1;
        if (wlen[i] < 0 && rc == RD_OK) {
            snprintf(err, errlen, "cannot format a command (out of memory)");
            rc = RD_EIO;
        }
        total += wlen[i] > 0 ? (size_t)wlen[i] : 0;
    }
    char *buf = NULL;
    if (rc == RD_OK && n > 1) {
        buf = malloc(total);
        if (!buf) {
            snprintf(err, errlen, "out of memory");
            rc = RD_EIO;
        }
        size_t off = 0;
        for (int i = 0; buf && i < n; i++) {
            memcpy(buf + off, wire[i], (size_t)wlen[i]);
            off += (size_t)wlen[i];
        }
    }
    int64_t start = dl_now_ns();
    if (sent_ns)
        *sent_ns = start;
    int64_t deadline = timeout_ms < 0 ? -1 : start + (int64_t)timeout_ms * 1000000LL;
    if (rc == RD_OK)
        rc = send_all(c, n > 1 ? buf : wire[0], total, deadline, err, errlen);
    free(buf);
    for (int i = 0; i < n; i++)
        if (wire[i])
            redisFreeCommand(wire[i]);
    if (rc)
        return rc;
    int got = 0;
    while (got < n) {
        void *reply = NULL;
        if (next_reply(c, &reply) != REDIS_OK) {
            snprintf(err, errlen, "protocol error: %.120s", c->ctx->errstr);
            goto fail;
        }
        if (reply) {
            out[got++] = reply;
            continue;
        }
        int w = dl_wait_fd(c->ctx->fd, POLLIN, deadline, cancel_fd, NULL);
        if (w == DLOCK_ETIMEDOUT) {
            snprintf(err, errlen, "no reply within %d ms", timeout_ms);
            goto fail;
        }
        if (w == DLOCK_EIO) {
            snprintf(err, errlen, "poll: %s", strerror(errno));
            goto fail;
        }
        if (w == DLOCK_ECANCELED) {
            for (int i = 0; i < got; i++)
                freeReplyObject(out[i]);
            for (int i = 0; i < n; i++)
                out[i] = NULL;
            snprintf(err, errlen, "canceled");
            return RD_CANCELED;
        }
        if (redisBufferRead(c->ctx) != REDIS_OK) {
            snprintf(err, errlen, "read: %.120s", c->ctx->errstr);
            goto fail;
        }
    }
    return RD_OK;
fail:
    for (int i = 0; i < got; i++)
        freeReplyObject(out[i]);
    for (int i = 0; i < n; i++)
        out[i] = NULL;
    return RD_EIO;
}

int rconn_read(rconn *c, redisReply **out, int timeout_ms, int cancel_fd, char *err,
               size_t errlen)
{
    *out = NULL;
    int64_t deadline = dl_now_ns() + (int64_t)timeout_ms * 1000000LL;
    for (;;) {
        void *reply = NULL;
        if (next_reply(c, &reply) != REDIS_OK) {
            snprintf(err, errlen, "protocol error: %.120s", c->ctx->errstr);
            return RD_EIO;
        }
        if (reply) {
            *out = reply;
            return RD_OK;
        }
        int w = dl_wait_fd(c->ctx->fd, POLLIN, deadline, cancel_fd, NULL);
        if (w == DLOCK_ETIMEDOUT)
            return RD_OK;
        if (w == DLOCK_ECANCELED) {
            snprintf(err, errlen, "canceled");
            return RD_CANCELED;
        }
        if (w == DLOCK_EIO) {
            snprintf(err, errlen, "poll: %s", strerror(errno));
            return RD_EIO;
        }
        if (redisBufferRead(c->ctx) != REDIS_OK) {
            snprintf(err, errlen, "read: %.120s", c->ctx->errstr);
            return RD_EIO;
        }
    }
}

void rconn_call_many(rconn **cs, int nc, const rcmd *cmds, int ncmd, redisReply **out, int *st,
                     int timeout_ms, rd_enough_fn *enough, void *arg)
{
    rconn_call_many_settle(cs, nc, cmds, ncmd, out, st, timeout_ms, enough, arg, 0);
}

void rconn_call_many_settle(rconn **cs, int nc, const rcmd *cmds, int ncmd, redisReply **out,
                            int *st, int timeout_ms, rd_enough_fn *enough, void *arg,
                            int settle_ms)
{
    /* Formatted once, as one pipelined write, for every connection; one
     * command (Redlock's acquire and release) is sent as hiredis made it.
     * Many (a batch of renewals) are copied into one buffer sized once:
     * growing it command by command copied it over and over. */
    char *one = NULL, *wire = NULL;
    size_t wlen = 0;
    bool formatted = true;
    if (ncmd == 1) {
        int n = format(&cmds[0], &one);
        formatted = n > 0;
        wlen = formatted ? (size_t)n : 0;
    } else {
        char **each = calloc((size_t)ncmd, sizeof *each);
        int *len = malloc((size_t)ncmd * sizeof *len);
        formatted = each && len;
        for (int j = 0; j < ncmd && formatted; j++) {
            len[j] = format(&cmds[j], &each[j]);
            formatted = len[j] > 0;
            wlen += formatted ? (size_t)len[j] : 0;
        }
        wire = formatted ? malloc(wlen) : NULL;
        formatted = wire != NULL;
        size_t at = 0;
        for (int j = 0; each && j < ncmd; j++) {
            if (formatted) {
                memcpy(wire + at, each[j], (size_t)len[j]);
                at += (size_t)len[j];
            }
            if (each[j])
                redisFreeCommand(each[j]);
        }
        free(each);
        free(len);
    }
    const char *out_wire = one ? one : wire;
    /* Written to every connection at once, as each has room: a server
     * that stopped reading (its socket buffer full) must not hold the
     * others' requests back until the deadline. */
    bool pending[nc]; /* replies still awaited */
    size_t sent[nc];  /* bytes of out_wire written (< wlen: still writing) */
    int got[nc];
    struct pollfd p[nc];
    int64_t deadline = dl_deadline_in(timeout_ms);
    for (int i = 0; i < nc; i++) {
        for (int j = 0; j < ncmd; j++)
            out[i * ncmd + j] = NULL;
        st[i] = RD_EIO;
        got[i] = 0;
        sent[i] = 0;
        pending[i] = formatted && out_wire && cs[i] && send_some(cs[i], out_wire, wlen, &sent[i]);
    }
    bool settling = false; /* enough said so: the rest have settle_ms left */
    for (;;) {
        int n = 0;
        int idx[nc];
        bool fresh = false;
        for (int i = 0; i < nc; i++) {
            while (pending[i]) {
                void *reply = NULL;
                if (next_reply(cs[i], &reply) != REDIS_OK) {
                    pending[i] = false;
                    break;
                }
                if (!reply)
                    break;
                out[i * ncmd + got[i]++] = reply;
                fresh = true;
                if (got[i] == ncmd) {
                    st[i] = RD_OK;
                    pending[i] = false;
                }
            }
            if (!pending[i])
                continue;
            p[n] = (struct pollfd){.fd = cs[i]->ctx->fd,
                                   .events = POLLIN | (sent[i] < wlen ? POLLOUT : 0)};
            idx[n++] = i;
        }
        if (n > 0 && fresh && enough && !settling && enough(out, nc, ncmd, arg)) {
            settling = true;
            int64_t settled = dl_deadline_in(settle_ms);
            if (settled < deadline)
                deadline = settled;
        }
        int ms = dl_ms_left(deadline);
        if (n > 0 && settling && ms == 0) {
            for (int k = 0; k < n; k++) {
                int i = idx[k];
                /* one still writing has half a request on the wire: dropped */
                if (sent[i] < wlen)
                    continue;
                cs[i]->owed += ncmd - got[i];
                st[i] = RD_OWED;
            }
            break;
        }
        if (n == 0 || ms == 0)
            break;
        int pr = poll(p, (nfds_t)n, ms);
        if (pr < 0 && errno != EINTR)
            break;
        for (int k = 0; k < n && pr > 0; k++) {
            int i = idx[k];
            if ((p[k].revents & POLLOUT) && !send_some(cs[i], out_wire, wlen, &sent[i]))
                pending[i] = false;
            else if ((p[k].revents & (short)~POLLOUT) && redisBufferRead(cs[i]->ctx) != REDIS_OK)
                pending[i] = false;
        }
    }
    if (one)
        redisFreeCommand(one);
    free(wire);
}

/* "WHAT LOAD code" (FUNCTION or SCRIPT). */
static void load_cmd(rcmd *cmd, const char *what, const char *code)
{
    rcmd_init(cmd);
    rcmd_add(cmd, what);
    rcmd_add(cmd, "LOAD");
    rcmd_add(cmd, code);
}

/* "WHAT LOAD code" on c (FUNCTION or SCRIPT), waiting until until_ns. */
static int load_call(rconn *c, const char *what, const char *code, int64_t until_ns,
                     redisReply **r, char *err, size_t errlen)
{
    int ms = dl_ms_left(until_ns);
    if (ms == 0) {
        snprintf(err, errlen, "no time left to load the lock code");
        return RD_EIO;
    }
    rcmd cmd;
    load_cmd(&cmd, what, code);
    char why[256];
    int rc = rconn_call(c, &cmd, 1, r, ms, -1, NULL, why, sizeof why);
    if (rc != RD_OK)
        snprintf(err, errlen, "redis %s:%d: %s LOAD: %s", c->node->host, c->node->port, what,
                 why);
    return rc;
}

/* What "FUNCTION LOAD" answered on c (r is freed): RD_OK (the library is
 * there), RD_NEED_SCRIPT (the server takes no functions: cf->scripts is
 * set) or RD_EPROTO (not a Redis answer). */
enum { RD_NEED_SCRIPT = 2 };
static int function_loaded(const rconn *c, redisReply *r, rconf *cf, char *err, size_t errlen)
{
    /* The library's name carries its content's hash: one that exists
     * already is this very code, loaded by another client (the server
     * says so before compiling anything, which REPLACE would do). */
    bool loaded = r->type == REDIS_REPLY_STRING ||
                  (r->type == REDIS_REPLY_ERROR && r->str && strstr(r->str, "already exists"));
    if (!loaded && r->type != REDIS_REPLY_ERROR) {
        /* Not a Redis answer at all (a proxy, another protocol): no
         * reason to believe it would take scripts either. */
        char why[256];
        reply_err("the library's name (a string)", r, why, sizeof why);
        snprintf(err, errlen, "redis %s:%d: FUNCTION LOAD: %s", c->node->host, c->node->port,
                 why);
        freeReplyObject(r);
        return RD_EPROTO;
    }
    freeReplyObject(r);
    if (loaded)
        return RD_OK;
    /* No functions here (Redis < 7, or FUNCTION LOAD not allowed):
     * the script does the same, only builds its helpers per call. */
    atomic_store(&cf->scripts, true);
    return RD_NEED_SCRIPT;
}

/* What "SCRIPT LOAD" answered on c (r is freed): RD_OK when it is the lock
 * script's SHA1, else RD_EIO (an error reply) or RD_EPROTO. */
static int script_loaded(const rconn *c, redisReply *r, char *err, size_t errlen)
{
    int rc = RD_OK;
    if (r->type != REDIS_REPLY_STRING || r->len != 40 ||
        memcmp(r->str, rd_lock_script_sha, 40) != 0) {
        char why[256];
        reply_err("the script's SHA1", r, why, sizeof why);
        if (r->type == REDIS_REPLY_STRING)
            snprintf(why + strlen(why), sizeof why - strlen(why), " (not %s)",
                     rd_lock_script_sha);
        snprintf(err, errlen, "redis %s:%d: SCRIPT LOAD: %s", c->node->host, c->node->port,
                 why);
        rc = r->type == REDIS_REPLY_ERROR ? RD_EIO : RD_EPROTO;
    }
    freeReplyObject(r);
    return rc;
}

int rd_load_script(rconn *c, rconf *cf, int timeout_ms, char *err, size_t errlen)
{
    redisReply *r;
    int rc;
    int64_t until = dl_deadline_in(timeout_ms > 0 ? timeout_ms : 0);
    if (!atomic_load(&cf->scripts)) {
        rc = load_call(c, "FUNCTION", rd_lock_script_library, until, &r, err, errlen);
        if (rc != RD_OK)
            return rc;
        rc = function_loaded(c, r, cf, err, errlen);
        if (rc != RD_NEED_SCRIPT)
            return rc;
    }
    rc = load_call(c, "SCRIPT", rd_lock_script, until, &r, err, errlen);
    if (rc != RD_OK)
        return rc;
    return script_loaded(c, r, err, errlen);
}

/* "WHAT LOAD code" on every connection of cs at once (need[i] false skips
 * cs[i]), until enough says the replies suffice: each connection whose
 * reply is refused, or that gave none in time, is dropped; one still owing
 * its reply then goes back to its pool. Either way cs[i] becomes NULL. */
static void load_many(rconn **cs, int n, const bool *need, const char *what, const char *code,
                      int64_t until_ns, rd_enough_fn *enough, void *arg, int settle_ms,
                      rconf *cf, char *err, size_t errlen)
{
    rcmd cmd;
    load_cmd(&cmd, what, code);
    rconn *to[n > 0 ? n : 1];
    redisReply *out[n > 0 ? n : 1];
    int st[n > 0 ? n : 1];
    for (int i = 0; i < n; i++)
        to[i] = need[i] ? cs[i] : NULL;
    rconn_call_many_settle(to, n, &cmd, 1, out, st, dl_ms_left(until_ns), enough, arg,
                           settle_ms);
    for (int i = 0; i < n; i++) {
        if (!to[i])
            continue;
        if (st[i] == RD_OWED) {
            rconn_put(to[i]); /* (it drops the late reply on its next call) */
            cs[i] = NULL;
            continue;
        }
        int rc = RD_EIO;
        if (st[i] != RD_OK || !out[i])
            snprintf(err, errlen, "redis %s:%d: %s LOAD: no reply in time", to[i]->node->host,
                     to[i]->node->port, what);
        else if (*what == 'F')
            rc = function_loaded(to[i], out[i], cf, err, errlen);
        else
            rc = script_loaded(to[i], out[i], err, errlen);
        if (rc == RD_OK || rc == RD_NEED_SCRIPT)
            continue;
        rconn_drop(to[i]);
        cs[i] = NULL;
    }
}

int rd_load_script_many(rconn **cs, int n, rconf *cf, int timeout_ms, rd_enough_fn *enough,
                        void *arg, int settle_ms, char *err, size_t errlen)
{
    int64_t until = dl_deadline_in(timeout_ms > 0 ? timeout_ms : 0);
    bool need[n > 0 ? n : 1];
    for (int i = 0; i < n; i++)
        need[i] = cs[i] != NULL;
    if (!atomic_load(&cf->scripts))
        load_many(cs, n, need, "FUNCTION", rd_lock_script_library, until, enough, arg,
                  settle_ms, cf, err, errlen);
    /* One server without functions turns the client to scripts: every
     * server then needs the script, those that took the library too. */
    if (atomic_load(&cf->scripts)) {
        for (int i = 0; i < n; i++)
            need[i] = cs[i] != NULL;
        load_many(cs, n, need, "SCRIPT", rd_lock_script, until, enough, arg, settle_ms, cf, err,
                  errlen);
    }
    int loaded = 0;
    for (int i = 0; i < n; i++)
        loaded += cs[i] != NULL;
    return loaded;
}

bool rd_script_missing(const redisReply *r)
{
    if (!r || r->type != REDIS_REPLY_ERROR || !r->str)
        return false;
    return strncmp(r->str, "NOSCRIPT", 8) == 0 || strstr(r->str, "Function not found") ||
           (strcasestr(r->str, "unknown command") && strcasestr(r->str, "fcall"));
}

static bool is_int(const redisReply *r)
{
    return r && r->type == REDIS_REPLY_INTEGER;
}

static bool is_str(const redisReply *r)
{
    return r && r->type == REDIS_REPLY_STRING && r->str;
}

/* A string usable as C text: RESP strings may hold NUL bytes. */
static bool is_text(const redisReply *r)
{
    return is_str(r) && memchr(r->str, '\0', r->len) == NULL;
}

bool rd_pair_reply(const redisReply *r, long long *flag, long long *value)
{
    if (!r || r->type != REDIS_REPLY_ARRAY || r->elements != 2 || !is_int(r->element[0]) ||
        !is_int(r->element[1]))
        return false;
    *flag = r->element[0]->integer;
    *value = r->element[1]->integer;
    return true;
}

bool rd_handoff_reply(const redisReply *r, long long *token)
{
    if (!r || r->type != REDIS_REPLY_ARRAY || r->elements != 2 || !is_text(r->element[1]))
        return false;
    char *end;
    errno = 0;
    long long t = strtoll(r->element[1]->str, &end, 10);
    if (errno || end == r->element[1]->str || *end || t <= 0)
        return false;
    *token = t;
    return true;
}

int rd_info_reply(const redisReply *r, rd_info *out)
{
    /* {owner, holder, since, token, pttl, last token, queued, readers,
     *  permits, nonfair, now, value} */
    static const char shape[] = "ssiiiiiiiiis";
    if (!r || r->type != REDIS_REPLY_ARRAY || r->elements != sizeof shape - 1)
        return -1;
    for (size_t i = 0; i < r->elements; i++)
        if (shape[i] == 's' ? !is_text(r->element[i]) : !is_int(r->element[i]))
            return -1;
    redisReply **e = r->element;
    out->owner = e[0]->str;
    out->holder = e[1]->str;
    out->since = e[2]->integer;
    out->token = e[3]->integer;
    out->pttl = e[4]->integer;
    out->last_token = e[5]->integer;
    out->queued = e[6]->integer;
    out->readers = e[7]->integer;
    out->permits = e[8]->integer;
    out->nonfair = e[9]->integer;
    out->now = e[10]->integer;
    out->value = e[11]->str;
    return 0;
}

int rd_addr_reply(const redisReply *r, char *host, size_t hostlen, int *port)
{
    if (!r || r->type != REDIS_REPLY_ARRAY || r->elements != 2 || !is_text(r->element[0]) ||
        !is_text(r->element[1]) || r->element[0]->len == 0 || r->element[0]->len >= hostlen)
        return -1;
    char *end;
    long p = strtol(r->element[1]->str, &end, 10);
    if (end == r->element[1]->str || *end || p < 1 || p > 65535)
        return -1;
    memcpy(host, r->element[0]->str, r->element[0]->len + 1);
    *port = (int)p;
    return 0;
}

int rd_break_reply(const redisReply *r, dlock_info *info)
{
    if (!r || r->type != REDIS_REPLY_ARRAY || r->elements != 3 || !is_int(r->element[0]) ||
        !is_text(r->element[1]) || !is_int(r->element[2]))
        return -1;
    int broken = (int)r->element[0]->integer;
    if (broken > 0) {
        info->held = 1;
        info->holders = (info->holders > 0 ? info->holders : 0) + broken;
    } else if (info->held < 0) {
        info->held = 0;
    }
    if (r->element[1]->len && !info->holder[0])
        snprintf(info->holder, sizeof info->holder, "%s", r->element[1]->str);
    if ((uint64_t)r->element[2]->integer > info->token)
        info->token = (uint64_t)r->element[2]->integer;
    return broken;
}

int rd_name_key(const char *name, const char *suffix, char *buf, size_t len)
{
    size_t o = 0, nl = strlen(name), sl = strlen(suffix);
    if (len < nl + sl + sizeof "dlock:{}:") {
        if (len)
            buf[0] = '\0';
        return -1;
    }
    memcpy(buf, "dlock:{", 7);
    o = 7;
    for (size_t i = 0; i < nl; i++)
        buf[o++] = name[i] == '}' ? RD_BRACE : name[i];
    buf[o++] = '}';
    buf[o++] = ':';
    memcpy(buf + o, suffix, sl + 1);
    return 0;
}

int rd_lock_key(const char *name, char *buf, size_t len)
{
    return rd_name_key(name, "lock", buf, len);
}

int rd_tag_name(const char *tag, size_t n, char *name, size_t len)
{
    if (n == 0 || n >= len)
        return -1;
    for (size_t i = 0; i < n; i++) {
        /* A raw '}' is a key of dlock 0.1.0, which did not encode them:
         * its name now maps to another key. */
        if (tag[i] == '}' || tag[i] == '\0')
            return -1;
        name[i] = tag[i] == RD_BRACE ? '}' : tag[i];
    }
    name[n] = '\0';
    return 0;
}

int rd_conf_init(rconf *cf, const dl_url *u, const dlock_client_opts *opts)
{
    memset(cf, 0, sizeof *cf);
    if ((u->user && !(cf->user = strdup(u->user))) ||
        (u->password && !(cf->password = strdup(u->password)))) {
        rd_conf_free(cf);
        return DLOCK_ENOMEM;
    }
    cf->connect_timeout_ms = opts->connect_timeout_ms;
    cf->op_timeout_ms = opts->op_timeout_ms;
    return 0;
}

void rd_conf_free(rconf *cf)
{
    free(cf->user);
    if (cf->password) {
        explicit_bzero(cf->password, strlen(cf->password));
        free(cf->password);
    }
    cf->user = cf->password = NULL;
}

void rd_script_retarget(rcmd *c, const rconf *cf)
{
    if (c->argc < 2 || (strcmp(c->argv[0], "FCALL") != 0 && strcmp(c->argv[0], "EVALSHA") != 0))
        return; /* not a call of the lock script */
    bool scripts = atomic_load(&cf->scripts);
    c->argv[0] = scripts ? "EVALSHA" : "FCALL";
    c->argv[1] = scripts ? rd_lock_script_sha : rd_lock_script_function;
    c->len[0] = strlen(c->argv[0]);
    c->len[1] = strlen(c->argv[1]);
}

void rd_script_keys_cmd(rcmd *c, const rconf *cf, int nkeys, const char *const *keys,
                        const char *op)
{
    static const char *const counts[] = {"0", "1", "2", "3", "4"};
    rcmd_init(c);
    rcmd_add(c, "FCALL");
    rcmd_add(c, rd_lock_script_function);
    rd_script_retarget(c, cf);
    rcmd_add(c, counts[nkeys]);
    for (int i = 0; i < nkeys; i++)
        rcmd_add(c, keys[i]);
    rcmd_add(c, op);
}

void rd_script_cmd(rcmd *c, const rconf *cf, const char *key, const char *op)
{
    rd_script_keys_cmd(c, cf, 1, &key, op);
}

void rd_renew_cmd(rcmd *c, const rconf *cf, const dlock_lock *l, int64_t ttl_ms, char nb[24])
{
    const rlock *rl = l->bstate;
    rd_script_cmd(c, cf, rl->key, "renew");
    rcmd_add(c, l->owner);
    rcmd_add(c, rl->kind);
    rcmd_addll(c, ttl_ms, nb);
}

void rd_name_cmd(rcmd *c, const rconf *cf, const char *name, rd_key key, const char *op)
{
    rd_lock_key(name, key, sizeof(rd_key));
    rd_script_cmd(c, cf, key, op);
}

int rd_lock_init(dlock_lock *l)
{
    size_t klen = strlen(l->name) + sizeof "dlock:{}:lock";
    rlock *rl = calloc(1, sizeof *rl + klen);
    if (!rl)
        return dl_lock_err(l, DLOCK_ENOMEM, "out of memory");
    rd_lock_key(l->name, rl->key, klen);
    rl->kind[0] = l->opts.kind == DLOCK_SHARED ? 'r' : l->opts.kind == DLOCK_SEMAPHORE ? 's' : 'x';
    l->bstate = rl;
    return 0;
}

void rd_lock_fini(dlock_lock *l)
{
    free(l->bstate);
}

/* ---- key= templates (the SET NX layout) ---------------------------------- */

int rd_template_check(const char *t, char *err, size_t errlen)
{
    size_t n = strnlen(t, RD_TEMPLATE_MAX + 1);
    const char *at = strstr(t, "{name}");
    if (n == 0 || n > RD_TEMPLATE_MAX) {
        snprintf(err, errlen, "key template must be 1..%d bytes", RD_TEMPLATE_MAX);
        return -1;
    }
    /* The bytes first: the messages below quote the template. */
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)t[i];
        if (c < 0x20 || c >= 0x7f) {
            snprintf(err, errlen, "key template has byte 0x%02x at offset %zu (printable ASCII "
                     "only)", c, i);
            return -1;
        }
    }
    if (!at || strstr(at + 1, "{name}"))
        snprintf(err, errlen,
                 "key template \"%s\" must hold {name} exactly once (e.g. lock:{name})", t);
    else if (strstr(t, RD_BESIDE))
        snprintf(err, errlen, "key template \"%s\" may not contain \"%s\" (dlock's keys beside "
                 "the lock)", t, RD_BESIDE);
    else
        return 0;
    return -1;
}

int rd_template_key(const char *t, const char *name, char *buf, size_t len)
{
    const char *at = strstr(t, "{name}");
    int n = snprintf(buf, len, "%.*s%s%s", (int)(at - t), t, name, at + 6);
    return n < 0 || (size_t)n >= len ? -1 : 0;
}

bool rd_beside_key(const char *key, const char *what, char *buf, size_t len)
{
    /* The lock key plus a suffix keeps its slot when the key has a hash tag;
     * else the whole key becomes the tag; else (a '}' in a key without a
     * tag) nothing can share its slot. */
    size_t kl = strlen(key);
    unsigned slot = rd_key_slot(key, kl);
    int n = snprintf(buf, len, "%s%s%s", key, RD_BESIDE, what);
    if (n < 0 || (size_t)n >= len)
        return false;
    if (rd_key_slot(buf, (size_t)n) == slot)
        return true;
    n = snprintf(buf, len, "{%s}%s%s", key, RD_BESIDE, what);
    if (n >= 0 && (size_t)n < len && rd_key_slot(buf, (size_t)n) == slot)
        return true;
    /* A '}' in a key without a tag: a tag of the smallest number in that
     * slot, {S}KEY/dlock-WHAT (16384 slots: found within a few ten
     * thousand tries, and only for such keys). */
    for (unsigned i = 0; i < 1000000; i++) {
        char tag[16];
        int tl = snprintf(tag, sizeof tag, "%u", i);
        if (rd_key_slot(tag, (size_t)tl) != slot)
            continue;
        n = snprintf(buf, len, "{%s}%s%s%s", tag, key, RD_BESIDE, what);
        return n >= 0 && (size_t)n < len;
    }
    return false;
}

int rd_template_name(const char *t, const char *key, size_t klen, char *name, size_t len)
{
    const char *at = strstr(t, "{name}");
    size_t pre = (size_t)(at - t), suf = strlen(at + 6);
    if (klen <= pre + suf || memcmp(key, t, pre) != 0 ||
        memcmp(key + klen - suf, at + 6, suf) != 0 || klen - pre - suf >= len)
        return -1;
    memcpy(name, key + pre, klen - pre - suf);
    name[klen - pre - suf] = '\0';
    return strlen(name) == klen - pre - suf ? 0 : -1; /* no NUL inside */
}

/* Copy s (n bytes) into buf at *p with glob characters escaped. */
static void glob_escaped(char *buf, size_t len, size_t *p, const char *s, size_t n)
{
    for (size_t i = 0; i < n && *p + 3 < len; i++) {
        if (strchr("*?[]\\", s[i]))
            buf[(*p)++] = '\\';
        buf[(*p)++] = s[i];
    }
    buf[*p] = '\0';
}

void rd_template_pattern(const char *t, const char *prefix, char *buf, size_t len)
{
    const char *at = strstr(t, "{name}");
    size_t p = 0;
    buf[0] = '\0';
    glob_escaped(buf, len, &p, t, (size_t)(at - t));
    if (prefix)
        glob_escaped(buf, len, &p, prefix, strlen(prefix));
    if (p + 2 < len)
        buf[p++] = '*';
    buf[p] = '\0';
    glob_escaped(buf, len, &p, at + 6, strlen(at + 6));
}

bool rd_alien_reply(const redisReply *r, char *what, size_t len)
{
    if (!r || r->type != REDIS_REPLY_ERROR || !r->str)
        return false;
    if (strncmp(r->str, "DLOCKTYPE ", 10) == 0)
        snprintf(what, len, "%.40s", r->str + 10);
    else if (strncmp(r->str, "WRONGTYPE", 9) == 0)
        snprintf(what, len, "value of another type");
    else
        return false;
    return true;
}
