/* SPDX-License-Identifier: MIT */
/*
 * conn.c — the etcd backend's HTTP connections: a request POSTed and its
 * reply read, bounded by a deadline, a cancel descriptor and a stop flag,
 * the connection kept alive for the next one.
 *
 * Two transports behind one set of calls. https:// (etcds://) is
 * libcurl's, loaded only then (see etcd.c). http:// is our own: a socket
 * and reply.c's reader, since libcurl's loading alone cost every
 * short-lived process (dlock run) about 8 ms of CPU, four times the rest
 * of the run (measured with perf: 46 % kernel mapping libraries, 32 % the
 * dynamic linker, 0.5 % dlock).
 */
#include "ec_int.h"

#include <errno.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

enum { PH_IDLE, PH_CONNECTING, PH_SENDING, PH_READING, PH_DONE };

/* curl's write callback: into the connection's body. */
static size_t write_cb(char *data, size_t size, size_t nmemb, void *arg)
{
    ec_conn *k = arg;
    return ec_body_feed(&k->body, data, size * nmemb);
}

static void raw_close(ec_conn *k)
{
    if (k->fd >= 0)
        close(k->fd);
    k->fd = -1;
    k->reusable = false;
}

static void raw_addrs_free(ec_conn *k)
{
    if (k->ai)
        freeaddrinfo(k->ai);
    k->ai = k->ai_next = NULL;
}

void ec_conn_free(ec_conn *k)
{
    if (!k)
        return;
    if (k->multi)
        curl_multi_cleanup(k->multi);
    if (k->easy)
        curl_easy_cleanup(k->easy);
    if (k->hdrs)
        curl_slist_free_all(k->hdrs);
    raw_close(k);
    raw_addrs_free(k);
    free(k->req);
    free(k->body.buf);
    free(k);
}

ec_conn *ec_conn_get(ecclient *ec)
{
    pthread_mutex_lock(&ec->mu);
    ec_conn *k = ec->idle;
    if (k)
        ec->idle = k->next;
    pthread_mutex_unlock(&ec->mu);
    if (!k) {
        k = calloc(1, sizeof *k);
        if (!k)
            return NULL;
        k->fd = -1;
        k->raw = !ec->tls;
        if (!k->raw) {
            k->easy = curl_easy_init();
            k->multi = curl_multi_init();
            if (!k->easy || !k->multi) {
                ec_conn_free(k);
                return NULL;
            }
        }
    }
    k->body.len = 0;
    k->body.toolarge = false;
    k->body.on_line = NULL;
    k->body.arg = NULL;
    return k;
}

void ec_conn_put(ecclient *ec, ec_conn *k)
{
    if (!k)
        return;
    pthread_mutex_lock(&ec->mu);
    k->next = ec->idle;
    ec->idle = k;
    pthread_mutex_unlock(&ec->mu);
}

/* The request's bytes for our own transport. */
static int raw_setup(ec_conn *k, const char *base, const char *path, const char *body,
                     const char *auth)
{
    const char *host = strncmp(base, "http://", 7) == 0 ? base + 7 : base;
    size_t bl = strlen(body);
    size_t cap = strlen(path) + strlen(host) + (auth ? strlen(auth) : 0) + bl + 160;
    if (cap > k->req_cap) {
        char *r = realloc(k->req, cap);
        if (!r)
            return DLOCK_ENOMEM;
        k->req = r;
        k->req_cap = cap;
    }
    int n = snprintf(k->req, cap,
                     "POST %s HTTP/1.1\r\nHost: %s\r\nContent-Type: application/json\r\n"
                     "%s%sContent-Length: %zu\r\n\r\n",
                     path, host, auth ? auth : "", auth ? "\r\n" : "", bl);
    if (n < 0 || (size_t)n + bl >= cap)
        return DLOCK_ENOMEM;
    memcpy(k->req + n, body, bl);
    k->req_len = (size_t)n + bl;
    if (strcmp(k->at, base) != 0)
        raw_close(k); /* kept alive to another endpoint */
    snprintf(k->at, sizeof k->at, "%s", base);
    return 0;
}

int ec_conn_setup(ecclient *ec, ec_conn *k, const char *base, const char *path, const char *body,
                  int connect_ms)
{
    k->connect_ms = connect_ms > 0 ? connect_ms : 1;
    pthread_mutex_lock(&ec->mu);
    int rc = 0;
    if (k->raw) {
        rc = raw_setup(k, base, path, body, ec->auth);
        pthread_mutex_unlock(&ec->mu);
        return rc;
    }
    if (k->hdrs)
        curl_slist_free_all(k->hdrs);
    k->hdrs = curl_slist_append(NULL, "Content-Type: application/json");
    if (k->hdrs && ec->auth) {
        struct curl_slist *h2 = curl_slist_append(k->hdrs, ec->auth);
        if (!h2) {
            curl_slist_free_all(k->hdrs);
            k->hdrs = NULL;
        } else {
            k->hdrs = h2;
        }
    }
    pthread_mutex_unlock(&ec->mu);
    if (!k->hdrs)
        return DLOCK_ENOMEM;
    char url[600];
    snprintf(url, sizeof url, "%s%s", base, path);
    CURL *h = k->easy;
    curl_easy_reset(h);
    bool ok = curl_easy_setopt(h, CURLOPT_URL, url) == CURLE_OK &&
              curl_easy_setopt(h, CURLOPT_NOSIGNAL, 1L) == CURLE_OK &&
              curl_easy_setopt(h, CURLOPT_POSTFIELDS, body) == CURLE_OK &&
              curl_easy_setopt(h, CURLOPT_HTTPHEADER, k->hdrs) == CURLE_OK &&
              curl_easy_setopt(h, CURLOPT_WRITEFUNCTION, write_cb) == CURLE_OK &&
              curl_easy_setopt(h, CURLOPT_WRITEDATA, k) == CURLE_OK &&
              curl_easy_setopt(h, CURLOPT_CONNECTTIMEOUT_MS, (long)k->connect_ms) == CURLE_OK &&
              curl_easy_setopt(h, CURLOPT_TCP_NODELAY, 1L) == CURLE_OK &&
              curl_easy_setopt(h, CURLOPT_TCP_KEEPALIVE, 1L) == CURLE_OK &&
              curl_easy_setopt(h, CURLOPT_TCP_KEEPIDLE, 2L) == CURLE_OK &&
              curl_easy_setopt(h, CURLOPT_TCP_KEEPINTVL, 1L) == CURLE_OK &&
              curl_easy_setopt(h, CURLOPT_PROTOCOLS_STR, "https") == CURLE_OK;
    if (ok && ec->cacert)
        ok = curl_easy_setopt(h, CURLOPT_CAINFO, ec->cacert) == CURLE_OK;
    if (ok && ec->cert)
        ok = curl_easy_setopt(h, CURLOPT_SSLCERT, ec->cert) == CURLE_OK;
    if (ok && ec->key)
        ok = curl_easy_setopt(h, CURLOPT_SSLKEY, ec->key) == CURLE_OK;
    return ok ? 0 : DLOCK_ENOMEM;
}

/* ---- our own transport (http://) ---- */

/* The transfer failed: why is what, and detail when not NULL. */
static void raw_fail(ec_conn *k, ec_xres *res, bool unsent, const char *what, const char *detail)
{
    res->failed = true;
    res->unsent = unsent;
    res->code = DLOCK_EUNREACHABLE;
    snprintf(res->why, sizeof res->why, "%s%s%.120s", what, detail ? ": " : "",
             detail ? detail : "");
    raw_close(k);
    k->phase = PH_DONE;
}

/* The endpoint's addresses, for a new connection. */
static bool raw_resolve(ec_conn *k, ec_xres *res)
{
    char host[300], port[16] = "";
    const char *h = strncmp(k->at, "http://", 7) == 0 ? k->at + 7 : k->at;
    const char *colon = h[0] == '[' ? strchr(h, ']') : strrchr(h, ':');
    if (colon && *colon == ']')
        colon = colon[1] == ':' ? colon + 1 : NULL;
    if (!colon || (size_t)(colon - h) >= sizeof host) {
        raw_fail(k, res, true, "bad endpoint", k->at);
        return false;
    }
    size_t hl = (size_t)(colon - h);
    if (h[0] == '[') {
        memcpy(host, h + 1, hl - 2);
        host[hl - 2] = '\0';
    } else {
        memcpy(host, h, hl);
        host[hl] = '\0';
    }
    snprintf(port, sizeof port, "%s", colon + 1);
    /* (blocking, as libcurl's resolver was not: endpoints are addresses or
     * names the system resolves at once, and a connection lives long) */
    struct addrinfo hints = {.ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM,
                             .ai_flags = AI_NUMERICSERV};
    raw_addrs_free(k);
    int g = getaddrinfo(host, port, &hints, &k->ai);
    if (g != 0) {
        k->ai = NULL;
        raw_fail(k, res, true, "cannot resolve the host", gai_strerror(g));
        return false;
    }
    k->ai_next = k->ai;
    return true;
}

/* Connect to the next address (the last one failed with err): false when
 * none is left (res set). */
static bool raw_connect_next(ec_conn *k, ec_xres *res, int err)
{
    int last = err;
    raw_close(k);
    while (k->ai_next) {
        struct addrinfo *a = k->ai_next;
        k->ai_next = a->ai_next;
        int fd = socket(a->ai_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
        if (fd < 0) {
            last = errno;
            continue;
        }
        int one = 1, idle = 2, intvl = 1;
        /* (best effort: a socket without them still works) */
        (void)setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
        (void)setsockopt(fd, SOL_SOCKET, SO_KEEPALIVE, &one, sizeof one);
        (void)setsockopt(fd, IPPROTO_TCP, TCP_KEEPIDLE, &idle, sizeof idle);
        (void)setsockopt(fd, IPPROTO_TCP, TCP_KEEPINTVL, &intvl, sizeof intvl);
        if (connect(fd, a->ai_addr, a->ai_addrlen) == 0 || errno == EINPROGRESS) {
            k->fd = fd;
            k->phase = PH_CONNECTING;
            k->connect_until_ns = dl_deadline_in(k->connect_ms);
            return true;
        }
        last = errno;
        close(fd);
    }
    raw_fail(k, res, true, "cannot connect", strerror(last));
    return false;
}

/* A new connection to k->at: resolved, then its addresses tried in turn. */
static void raw_open(ec_conn *k, ec_xres *res)
{
    if (raw_resolve(k, res))
        (void)raw_connect_next(k, res, ECONNREFUSED);
}

static bool raw_start(ec_conn *k, ec_xres *out)
{
    ec_xres *res = &k->xres;
    memset(res, 0, sizeof *res);
    memset(out, 0, sizeof *out);
    ec_reply_init(&k->reply);
    k->req_off = 0;
    k->got_reply = false;
    k->retried = false;
    k->reused = false;
    if (k->fd >= 0 && k->reusable) {
        /* a kept connection the server closed meanwhile reads as ready */
        struct pollfd p = {.fd = k->fd, .events = POLLIN};
        if (poll(&p, 1, 0) == 0) {
            k->reused = true;
            k->phase = PH_SENDING;
            return true;
        }
    }
    raw_close(k);
    raw_open(k, res); /* (a failure is the pump's to say) */
    return true;
}

static bool body_sink(void *arg, const char *data, size_t n)
{
    ec_conn *k = arg;
    return ec_body_feed(&k->body, data, n) == n;
}

/* A kept-alive connection failed before any reply: the server may have
 * closed it just as we wrote. Once, on a new connection. */
static bool raw_retry(ec_conn *k, ec_xres *res)
{
    if (!k->reused || k->got_reply || k->retried)
        return false;
    k->retried = true;
    k->reused = false;
    k->req_off = 0;
    ec_reply_init(&k->reply);
    raw_open(k, res);
    return true;
}

/* One step of the transfer: true when it moved (try again at once), false
 * when it would block. */
static bool raw_step(ec_conn *k, ec_xres *res)
{
    switch (k->phase) {
    case PH_CONNECTING: {
        int err = 0;
        socklen_t el = sizeof err;
        struct pollfd p = {.fd = k->fd, .events = POLLOUT};
        if (poll(&p, 1, 0) == 0)
            return false;
        if (getsockopt(k->fd, SOL_SOCKET, SO_ERROR, &err, &el) != 0)
            err = errno;
        if (err) {
            (void)raw_connect_next(k, res, err);
            return true;
        }
        k->phase = PH_SENDING;
        return true;
    }
    case PH_SENDING: {
        ssize_t n = send(k->fd, k->req + k->req_off, k->req_len - k->req_off, MSG_NOSIGNAL);
        if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
            return false;
        if (n < 0 && errno == EINTR)
            return true;
        if (n < 0) {
            int e = errno;
            if (!raw_retry(k, res))
                raw_fail(k, res, false, "sending failed", strerror(e));
            return true;
        }
        k->req_off += (size_t)n;
        if (k->req_off == k->req_len)
            k->phase = PH_READING;
        return true;
    }
    case PH_READING: {
        char buf[16384];
        ssize_t n = recv(k->fd, buf, sizeof buf, 0);
        if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
            return false;
        if (n < 0 && errno == EINTR)
            return true;
        int rc;
        if (n <= 0) {
            int e = n < 0 ? errno : 0;
            if (raw_retry(k, res))
                return true;
            rc = ec_reply_eof(&k->reply);
            if (rc == EC_REPLY_BAD) {
                if (e)
                    raw_fail(k, res, false, "receiving failed", strerror(e));
                else
                    raw_fail(k, res, false, k->reply.why, NULL);
                return true;
            }
            k->reusable = false;
        } else {
            k->got_reply = true;
            size_t used = 0;
            rc = ec_reply_feed(&k->reply, buf, (size_t)n, &used, body_sink, k);
            /* bytes after the reply: no part of any request of ours */
            k->reusable = rc == EC_REPLY_DONE && used == (size_t)n && !k->reply.close;
        }
        if (rc == EC_REPLY_MORE)
            return true;
        if (rc == EC_REPLY_DONE) {
            k->phase = PH_DONE;
            if (!k->reusable)
                raw_close(k);
        } else if (rc == EC_REPLY_SINK) {
            raw_fail(k, res, false, k->body.toolarge ? "the reply is too large" : "out of memory",
                     NULL);
            if (!k->body.toolarge)
                res->code = DLOCK_ENOMEM;
        } else {
            raw_fail(k, res, false, "not an HTTP reply", k->reply.why);
        }
        return true;
    }
    default:
        return false;
    }
}

static enum xfer raw_pump(ec_conn *k, int64_t until_ns, int cancel_fd, const bool *stop,
                          ec_xres *out)
{
    ec_xres *res = &k->xres;
    for (;;) {
        while (k->phase != PH_DONE && raw_step(k, res))
            if (stop && *stop && k->phase != PH_DONE)
                return XFER_STOP;
        if (k->phase == PH_DONE) {
            *out = *res;
            return XFER_DONE;
        }
        if (stop && *stop)
            return XFER_STOP;
        int64_t now = dl_now_ns(), end = until_ns;
        if (k->phase == PH_CONNECTING && (end < 0 || k->connect_until_ns < end))
            end = k->connect_until_ns;
        int wait = 1000;
        if (end >= 0) {
            if (end <= now) {
                if (k->phase == PH_CONNECTING && end == k->connect_until_ns) {
                    (void)raw_connect_next(k, res, ETIMEDOUT); /* (connect_timeout_ms) */
                    continue;
                }
                return XFER_TIMEOUT;
            }
            if ((end - now) / 1000000 + 1 < wait)
                wait = (int)((end - now) / 1000000 + 1);
        }
        struct pollfd p[2] = {
            {.fd = k->fd, .events = k->phase == PH_READING ? POLLIN : POLLOUT},
            {.fd = cancel_fd, .events = POLLIN},
        };
        int r = poll(p, cancel_fd >= 0 ? 2 : 1, wait);
        if (r < 0 && errno != EINTR) {
            raw_fail(k, res, false, "poll", strerror(errno));
            continue;
        }
        if (cancel_fd >= 0 && (p[1].revents & POLLIN))
            return XFER_CANCELED;
    }
}

/* ---- either transport ---- */

/* Whether a libcurl failure leaves the request unsent for sure. */
static bool curl_failed_before_send(CURLcode rc)
{
    return rc == CURLE_COULDNT_CONNECT || rc == CURLE_COULDNT_RESOLVE_HOST ||
           rc == CURLE_SSL_CONNECT_ERROR || rc == CURLE_PEER_FAILED_VERIFICATION;
}

static void curl_res(CURLcode rc, ec_xres *res)
{
    res->failed = rc != CURLE_OK;
    res->unsent = curl_failed_before_send(rc);
    res->code = rc == CURLE_OUT_OF_MEMORY ? DLOCK_ENOMEM
                : rc == CURLE_SSL_CACERT_BADFILE || rc == CURLE_SSL_CERTPROBLEM ? DLOCK_EURL
                                                                                : DLOCK_EUNREACHABLE;
    snprintf(res->why, sizeof res->why, "%s", rc == CURLE_OK ? "" : curl_easy_strerror(rc));
}

bool ec_conn_start(ec_conn *k, ec_xres *res)
{
    if (k->raw)
        return raw_start(k, res);
    memset(res, 0, sizeof *res);
    if (curl_multi_add_handle(k->multi, k->easy) != CURLM_OK) {
        curl_res(CURLE_OUT_OF_MEMORY, res);
        return false;
    }
    return true;
}

void ec_conn_stop(ec_conn *k)
{
    if (!k->raw) {
        curl_multi_remove_handle(k->multi, k->easy);
        return;
    }
    if (k->phase != PH_DONE) /* cut short: the rest of the reply would follow */
        raw_close(k);
    k->phase = PH_IDLE;
}

long ec_conn_status(ec_conn *k)
{
    long status = 0;
    if (k->raw)
        return k->reply.status;
    curl_easy_getinfo(k->easy, CURLINFO_RESPONSE_CODE, &status);
    return status;
}

enum xfer ec_conn_pump(ec_conn *k, int64_t until_ns, int cancel_fd, const bool *stop,
                       ec_xres *res)
{
    if (k->raw)
        return raw_pump(k, until_ns, cancel_fd, stop, res);
    for (;;) {
        int running = 0;
        curl_multi_perform(k->multi, &running);
        CURLMsg *m;
        int left;
        bool done = false;
        while ((m = curl_multi_info_read(k->multi, &left)))
            if (m->msg == CURLMSG_DONE) {
                curl_res(m->data.result, res);
                done = true;
            }
        if (done || !running) {
            if (!done)
                curl_res(CURLE_RECV_ERROR, res);
            return XFER_DONE;
        }
        if (stop && *stop)
            return XFER_STOP;
        int wait = 1000;
        if (until_ns >= 0) {
            int64_t left_ns = until_ns - dl_now_ns();
            if (left_ns <= 0)
                return XFER_TIMEOUT;
            if (left_ns / 1000000 + 1 < wait)
                wait = (int)(left_ns / 1000000 + 1);
        }
        struct curl_waitfd extra = {.fd = cancel_fd, .events = CURL_WAIT_POLLIN};
        curl_multi_poll(k->multi, cancel_fd >= 0 ? &extra : NULL, cancel_fd >= 0 ? 1 : 0,
                        wait, NULL);
        if (cancel_fd >= 0 && (extra.revents & CURL_WAIT_POLLIN))
            return XFER_CANCELED;
    }
}

enum xfer ec_conn_run(ec_conn *k, int64_t until_ns, int cancel_fd, const bool *stop,
                      ec_xres *res)
{
    if (!ec_conn_start(k, res))
        return XFER_DONE;
    enum xfer x = ec_conn_pump(k, until_ns, cancel_fd, stop, res);
    ec_conn_stop(k);
    return x;
}
