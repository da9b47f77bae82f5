/* SPDX-License-Identifier: MIT */
/*
 * check_relay.c — per-worker TCP relays between `dlock check` workers and the
 * servers of the URL, for the partition scenario.
 *
 * Each worker gets a relay process of its own (ms_spawn, in the run's process
 * group): one listener on the loopback interface per host of the URL, every
 * accepted connection forwarded to that host. The worker's URL names the
 * relay's ports instead of the servers'. The guarded resource is not behind
 * a relay: only the lock service is cut off.
 *
 * To cut a worker off, the harness asks its relay to freeze: the relay stops
 * itself (SIGSTOP) between two forwarded writes, so that what it last wrote
 * to each server is known (slot->relay_sent_ns). Its connections stay open
 * and nothing flows either way — a network partition as the client sees it:
 * requests are accepted by the kernel and never answered, new connections
 * are queued in the listener's backlog. SIGCONT heals it.
 *
 * Deployments whose servers name other servers to their clients (a
 * primary's address given out by a coordinator, a shard's redirections)
 * would lead the worker around its relay, so they are not relayed: the
 * backend's check adapter says which (dh_topo.direct).
 */
#include "check.h"

#include <errno.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#define RELAY_PAIRS 256      /* connections a worker may have open at once */
#define RELAY_BUF 65536
#define FREEZE_WAIT_NS 2000000000LL

/* ---- the URL ---------------------------------------------------------------- */

int chk_upstreams_parse(const char *url, const dh_topo *topo, chk_upstreams *u,
                        char *why, size_t whylen)
{
    memset(u, 0, sizeof *u);
    if (!url || !*url) {
        snprintf(why, whylen, "no URL to relay");
        return -1;
    }
    /* Only a deployment whose clients connect to the URL's hosts and no
     * other can be relayed: the relays stand in for those hosts. */
    if (!topo->direct) {
        snprintf(why, whylen, "%s", topo->indirect[0] ? topo->indirect
                                                      : "this backend does not say where its "
                                                        "clients connect");
        return -1;
    }
    /* The hosts, with the scheme's default ports, as the library reads them. */
    dh_url parsed;
    if (dh_parse_url(url, &parsed, why, whylen) != 0)
        return -1;
    int nhosts = parsed.nhosts;
    if (nhosts > CHK_RELAY_HOSTS) {
        explicit_bzero(&parsed, sizeof parsed);
        snprintf(why, whylen, "more than %d hosts in the URL", CHK_RELAY_HOSTS);
        return -1;
    }
    for (int i = 0; i < nhosts; i++) {
        snprintf(u->host[i].host, sizeof u->host[i].host, "%s", parsed.host[i].host);
        u->host[i].port = parsed.host[i].port;
    }
    explicit_bzero(&parsed, sizeof parsed);
    /* The text around the hosts, kept as written, so that the worker's URL
     * differs only in its hosts: scheme://[userinfo@] ... [/path][?query] */
    const char *sep = strstr(url, "://");
    if (!sep) {
        snprintf(why, whylen, "not a network URL");
        return -1;
    }
    const char *auth = sep + 3;
    size_t alen = strcspn(auth, "/?#");
    const char *hosts = auth;
    for (size_t i = 0; i < alen; i++)
        if (auth[i] == '@')
            hosts = auth + i + 1;
    const char *end = auth + alen;
    size_t plen = (size_t)(hosts - url);
    if (plen >= sizeof u->prefix || strlen(end) >= sizeof u->suffix) {
        snprintf(why, whylen, "URL too long to relay");
        return -1;
    }
    int written = 1;
    for (const char *p = hosts; p < end; p++)
        written += *p == ',';
    if (nhosts == 0 || written != nhosts || u->host[0].host[0] == '/') {
        snprintf(why, whylen, "the URL's hosts cannot be relayed (a Unix socket, or none)");
        return -1;
    }
    memcpy(u->prefix, url, plen);
    u->prefix[plen] = '\0';
    snprintf(u->suffix, sizeof u->suffix, "%s", end);
    u->n = nhosts;
    u->quorum = topo->quorum > 0 && topo->quorum <= nhosts ? topo->quorum : 1;
    return 0;
}

/* ---- the relay process -------------------------------------------------------- */

typedef struct relay_arg {
    chk_run *r;
    int slot;
    int ctl;
    int n;
    int lfd[CHK_RELAY_HOSTS];
    struct sockaddr_storage to[CHK_RELAY_HOSTS];
    socklen_t tolen[CHK_RELAY_HOSTS];
} relay_arg;

/* One relayed connection: side 0 the worker, side 1 the server. buf[d]
 * holds what was read from side d and not yet written to the other. */
typedef struct pair {
    int fd[2];
    int host;
    size_t len[2], off[2];
    char *buf[2];
} pair;

static void nodelay(int fd)
{
    int one = 1;
    (void)setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
}

static void pair_close(pair *p)
{
    close(p->fd[0]);
    close(p->fd[1]);
    free(p->buf[0]);
    free(p->buf[1]);
    p->fd[0] = p->fd[1] = -1;
}

/* Write what side d read to the other side. -1 when the pair is done. */
static int pair_flush(relay_arg *a, pair *p, int d)
{
    while (p->len[d] > p->off[d]) {
        ssize_t w = send(p->fd[!d], p->buf[d] + p->off[d], p->len[d] - p->off[d],
                         MSG_NOSIGNAL | MSG_DONTWAIT);
        if (w < 0 && errno == EINTR)
            continue;
        if (w < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
            return 0;
        if (w <= 0)
            return -1;
        p->off[d] += (size_t)w;
        if (d == 0) /* it reached the server: the relay's last word there */
            atomic_store(&a->r->sh->slot[a->slot].relay_sent_ns[p->host], ms_now_ns());
    }
    p->len[d] = p->off[d] = 0;
    return 0;
}

static int relay_accept(relay_arg *a, int h, pair *pairs, int *np)
{
    int c = accept4(a->lfd[h], NULL, NULL, SOCK_CLOEXEC);
    if (c < 0)
        return 0;
    int s = socket(a->to[h].ss_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (*np == RELAY_PAIRS || s < 0 || connect(s, (struct sockaddr *)&a->to[h], a->tolen[h]) != 0) {
        /* the server is down (or too many connections): the worker sees a
         * refused connection, as it would without the relay */
        if (s >= 0)
            close(s);
        close(c);
        return 0;
    }
    pair *p = &pairs[(*np)++];
    memset(p, 0, sizeof *p);
    p->fd[0] = c;
    p->fd[1] = s;
    p->host = h;
    p->buf[0] = malloc(RELAY_BUF);
    p->buf[1] = malloc(RELAY_BUF);
    for (int d = 0; d < 2; d++) {
        nodelay(p->fd[d]);
        (void)fcntl(p->fd[d], F_SETFL, fcntl(p->fd[d], F_GETFL) | O_NONBLOCK);
    }
    if (!p->buf[0] || !p->buf[1]) {
        pair_close(p);
        (*np)--;
    }
    return 0;
}

static int relay_main(void *arg)
{
    relay_arg *a = arg;
    pair *pairs = calloc(RELAY_PAIRS, sizeof *pairs);
    struct pollfd *pfd = calloc(1 + CHK_RELAY_HOSTS + 2 * RELAY_PAIRS, sizeof *pfd);
    if (!pairs || !pfd)
        return 1;
    int np = 0;
    for (;;) {
        nfds_t n = 0;
        pfd[n++] = (struct pollfd){.fd = a->ctl, .events = POLLIN};
        for (int h = 0; h < a->n; h++)
            pfd[n++] = (struct pollfd){.fd = a->lfd[h], .events = POLLIN};
        for (int i = 0; i < np; i++)
            for (int d = 0; d < 2; d++) {
                short ev = 0;
                if (pairs[i].len[d] == 0)
                    ev |= POLLIN; /* room to read side d */
                if (pairs[i].len[!d] > 0)
                    ev |= POLLOUT; /* something for side d */
                pfd[n++] = (struct pollfd){.fd = pairs[i].fd[d], .events = ev};
            }
        if (poll(pfd, n, -1) < 0) {
            if (errno == EINTR)
                continue;
            return 1;
        }
        /* The control pipe first: a freeze lands between two forwards. */
        if (pfd[0].revents) {
            char cmd;
            ssize_t got = read(a->ctl, &cmd, 1);
            if (got == 0 || (got < 0 && errno != EINTR && errno != EAGAIN))
                return 0; /* the harness is gone */
            if (got == 1 && cmd == 'F') {
                raise(SIGSTOP);
                continue; /* continued: look again, the world has moved */
            }
        }
        for (int h = 0; h < a->n; h++)
            if (pfd[1 + h].revents & POLLIN)
                relay_accept(a, h, pairs, &np);
        /* pairs accepted just now were not polled: only the first ones */
        int polled = (int)(n - 1 - (nfds_t)a->n) / 2;
        for (int i = 0; i < polled && i < np; i++) {
            pair *p = &pairs[i];
            bool done = false;
            for (int d = 0; d < 2 && !done; d++) {
                short re = pfd[1 + a->n + 2 * i + d].revents;
                if ((re & (POLLIN | POLLHUP | POLLERR)) && p->len[d] == 0) {
                    ssize_t got;
                    do
                        got = recv(p->fd[d], p->buf[d], RELAY_BUF, MSG_DONTWAIT);
                    while (got < 0 && errno == EINTR);
                    if (got == 0 || (got < 0 && errno != EAGAIN && errno != EWOULDBLOCK))
                        done = true;
                    else if (got > 0)
                        p->len[d] = (size_t)got;
                }
                if (!done && pair_flush(a, p, d) != 0)
                    done = true;
            }
            if (done) {
                pair_close(p);
                /* keep the polled order: the rest of this round's revents
                 * refer to the pairs as they were */
                pairs[i].fd[0] = -1;
            }
        }
        /* drop the closed pairs */
        int k = 0;
        for (int i = 0; i < np; i++)
            if (pairs[i].fd[0] >= 0)
                pairs[k++] = pairs[i];
        np = k;
    }
}

/* ---- the harness's side ------------------------------------------------------ */

static void relay_end(chk_run *r, int slot)
{
    chk_relay *rl = &r->relay[slot];
    if (rl->pid > 0) {
        (void)kill(rl->pid, SIGKILL);
        int st;
        while (waitpid(rl->pid, &st, 0) < 0 && errno == EINTR) {
        }
        ms_forget(&r->group, rl->pid);
    }
    if (rl->ctl >= 0)
        close(rl->ctl);
    rl->pid = 0;
    rl->ctl = -1;
    rl->frozen = false;
}

static int resolve(const char *host, int port, struct sockaddr_storage *ss, socklen_t *len)
{
    struct addrinfo hints, *res = NULL;
    memset(&hints, 0, sizeof hints);
    hints.ai_family = AF_UNSPEC;
    hints.ai_socktype = SOCK_STREAM;
    char ps[16];
    snprintf(ps, sizeof ps, "%d", port);
    if (getaddrinfo(host, ps, &hints, &res) != 0 || !res)
        return -EHOSTUNREACH;
    memcpy(ss, res->ai_addr, res->ai_addrlen);
    *len = (socklen_t)res->ai_addrlen;
    freeaddrinfo(res);
    return 0;
}

int chk_relay_start(chk_run *r, int slot)
{
    chk_relay *rl = &r->relay[slot];
    if (rl->pid > 0 || rl->ctl > 0)
        relay_end(r, slot);
    const chk_upstreams *u = &r->up;
    relay_arg ra;
    memset(&ra, 0, sizeof ra);
    ra.r = r;
    ra.slot = slot;
    ra.n = u->n;
    for (int h = 0; h < CHK_RELAY_HOSTS; h++) {
        ra.lfd[h] = -1;
        atomic_store(&r->sh->slot[slot].relay_sent_ns[h], 0);
    }
    int e = 0;
    char ports[CHK_RELAY_HOSTS * 24] = "";
    size_t pl = 0;
    for (int h = 0; h < u->n && e == 0; h++) {
        e = resolve(u->host[h].host, u->host[h].port, &ra.to[h], &ra.tolen[h]);
        if (e)
            break;
        int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
        struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = 0,
                                 .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
        socklen_t sl = sizeof sa;
        if (fd < 0 || bind(fd, (struct sockaddr *)&sa, sizeof sa) != 0 || listen(fd, 128) != 0 ||
            getsockname(fd, (struct sockaddr *)&sa, &sl) != 0) {
            e = -errno;
            if (fd >= 0)
                close(fd);
            break;
        }
        ra.lfd[h] = fd;
        pl += (size_t)snprintf(ports + pl, sizeof ports - pl, "%s127.0.0.1:%d", h ? "," : "",
                               ntohs(sa.sin_port));
    }
    int pp[2] = {-1, -1};
    if (e == 0 && pipe2(pp, O_CLOEXEC) != 0)
        e = -errno;
    /* The rewritten URL must fit whole: a cut one would point elsewhere. */
    if (e == 0 && (size_t)snprintf(rl->url, sizeof rl->url, "%s%s%s", u->prefix, ports,
                                   u->suffix) >= sizeof rl->url) {
        e = -ENAMETOOLONG;
        close(pp[0]);
        close(pp[1]);
    }
    if (e == 0) {
        ra.ctl = pp[0];
        pid_t pid = ms_spawn(&r->group, relay_main, &ra);
        if (pid < 0) {
            e = -errno;
            close(pp[1]);
        } else {
            rl->pid = pid;
            rl->ctl = pp[1];
            rl->frozen = false;
        }
        close(pp[0]);
    }
    for (int h = 0; h < u->n; h++)
        if (ra.lfd[h] >= 0)
            close(ra.lfd[h]);
    return e;
}

int chk_relay_freeze(chk_run *r, int slot)
{
    chk_relay *rl = &r->relay[slot];
    if (rl->pid <= 0)
        return -ESRCH;
    if (rl->frozen)
        return 0;
    char cmd = 'F';
    if (write(rl->ctl, &cmd, 1) != 1)
        return -errno;
    int64_t until = ms_now_ns() + FREEZE_WAIT_NS;
    for (;;) {
        int st;
        pid_t w = waitpid(rl->pid, &st, WUNTRACED | WNOHANG);
        if (w < 0 && errno == EINTR)
            continue;
        if (w == rl->pid && WIFSTOPPED(st))
            break;
        if (w == rl->pid || w < 0) { /* it died instead */
            ms_forget(&r->group, rl->pid);
            rl->pid = 0;
            return -ESRCH;
        }
        if (ms_now_ns() >= until)
            return -ETIMEDOUT;
        ms_sleep_ns(50000);
    }
    rl->frozen = true;
    rl->frozen_ns = ms_now_ns();
    return 0;
}

int chk_relay_thaw(chk_run *r, int slot)
{
    chk_relay *rl = &r->relay[slot];
    if (rl->pid <= 0)
        return -ESRCH;
    if (kill(rl->pid, SIGCONT) != 0)
        return -errno;
    rl->frozen = false;
    return 0;
}

static int cmp_i64(const void *a, const void *b)
{
    int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
    return (x > y) - (x < y);
}

int64_t chk_relay_expiry(const chk_run *r, int slot, int ttl_ms)
{
    const chk_upstreams *u = &r->up;
    int64_t e[CHK_RELAY_HOSTS];
    for (int h = 0; h < u->n; h++) {
        int64_t t = atomic_load(&r->sh->slot[slot].relay_sent_ns[h]);
        /* a server never written to holds nothing of this worker's */
        e[h] = t > 0 ? t + (int64_t)ttl_ms * 1000000 : INT64_MIN;
    }
    qsort(e, (size_t)u->n, sizeof e[0], cmp_i64);
    /* Others can take the lock once `quorum` servers have let it go: at the
     * quorum-th expiry. */
    int64_t at = e[u->quorum - 1];
    return at == INT64_MIN ? 0 : at;
}
