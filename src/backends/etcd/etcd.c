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
 * The transport is etcd's JSON gateway over HTTP/1.1 (libcurl, cJSON):
 * one keep-alive connection per request in flight, taken from a pool (a
 * request moves to the next endpoint when one fails, stalls past half its
 * time, or is not etcd; the client stays with the one that answered); a
 * waiter's watch is one streaming request (HTTP/1.1 cannot add watchers to
 * a stream whose request body is sent). Request bodies are built with
 * snprintf: every string in them is base64 or a decimal number, except the
 * credentials, which cJSON escapes.
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
     DLOCK_CAP_LEASE | DLOCK_CAP_NATIVE_BLOCKING | DLOCK_CAP_ELECTION)
#define ETCD_LIVENESS                                                                        \
    "one lease per client, kept alive at ttl/4; linearizable; the holder is told on its own " \
    "clock before the lease can expire, at once when the lease is revoked or the key "       \
    "deleted; a paused holder learns only when it runs again (fencing catches it)"
#define ETCD_FENCING                                                                         \
    "create revision of the holder's key: rises with every write of the cluster, across "   \
    "leader changes"
#define ETCD_PARAMS "ttl prefix cacert cert key"

#ifdef DLOCK_HAVE_ETCD
#include "ec_int.h"

#include <stddef.h>
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <poll.h>
#include <sys/eventfd.h>
#include <unistd.h>

/*
 * libcurl is loaded when the first etcd client opens, not linked: linked,
 * the thirty-odd libraries it pulls in made every dlock process start 2.5
 * times slower, whatever its backend (`dlock run` on file://: 2.4 ms to 6.1
 * ms per run). The calls below go through this table.
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

/* ---- the client -------------------------------------------------------------------- */

/* curl's write callback: into the connection's body. */
static size_t write_cb(char *data, size_t size, size_t nmemb, void *arg)
{
    ec_conn *k = arg;
    return ec_body_feed(&k->body, data, size * nmemb);
}

struct eclock {
    eclock *next_held;
    dlock_lock *l;
    bool listed;
    char dir[300];         /* PREFIX/NAME/ (prefix < 64, name <= 200) */
    char key[EC_KEY_MAX];  /* our key while queued or holding, "" none */
    char kind[16];
    int64_t rev;  /* its create revision */
    uint64_t gen; /* the lease it is bound to */
    int64_t since_ms; /* wall clock when it was granted (queued, until then) */
    bool pred_first;  /* exclusive: the last read found only its predecessor before it */
    bool lost;
    /* The client thread's watch on the held key (guarded by ec->mu): */
    int64_t held_ns;    /* when it joined ec->held */
    int64_t watch_from; /* the revision the watch starts at (known intact before it) */
    bool watched;       /* in the current watch stream */
};

ecclient *ec_of(dlock_client *c)
{
    return c->bstate;
}

/* The end of the key range of every key starting with prefix p (p ends in
 * '/', which becomes '0'). */
static void range_end(const char *p, char *out, size_t len)
{
    snprintf(out, len, "%s", p);
    size_t n = strlen(out);
    if (n)
        out[n - 1] = (char)(out[n - 1] + 1);
}

static void conn_free(ec_conn *k)
{
    if (!k)
        return;
    if (k->multi)
        curl_multi_cleanup(k->multi);
    if (k->easy)
        curl_easy_cleanup(k->easy);
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
        k->easy = curl_easy_init();
        k->multi = curl_multi_init();
        if (!k->easy || !k->multi) {
            conn_free(k);
            return NULL;
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

/* Set up k's easy handle for POST path on the endpoint at base ("http://h:p"). */
int ec_conn_setup(ecclient *ec, ec_conn *k, const char *base, const char *path, const char *body,
                      struct curl_slist *hdrs, int connect_ms)
{
    char url[600];
    snprintf(url, sizeof url, "%s%s", base, path);
    CURL *h = k->easy;
    curl_easy_reset(h);
    bool ok = curl_easy_setopt(h, CURLOPT_URL, url) == CURLE_OK &&
              curl_easy_setopt(h, CURLOPT_NOSIGNAL, 1L) == CURLE_OK &&
              curl_easy_setopt(h, CURLOPT_POSTFIELDS, body) == CURLE_OK &&
              curl_easy_setopt(h, CURLOPT_HTTPHEADER, hdrs) == CURLE_OK &&
              curl_easy_setopt(h, CURLOPT_WRITEFUNCTION, write_cb) == CURLE_OK &&
              curl_easy_setopt(h, CURLOPT_WRITEDATA, k) == CURLE_OK &&
              curl_easy_setopt(h, CURLOPT_CONNECTTIMEOUT_MS, (long)(connect_ms > 0 ? connect_ms : 1)) == CURLE_OK &&
              curl_easy_setopt(h, CURLOPT_TCP_NODELAY, 1L) == CURLE_OK &&
              curl_easy_setopt(h, CURLOPT_TCP_KEEPALIVE, 1L) == CURLE_OK &&
              curl_easy_setopt(h, CURLOPT_TCP_KEEPIDLE, 2L) == CURLE_OK &&
              curl_easy_setopt(h, CURLOPT_TCP_KEEPINTVL, 1L) == CURLE_OK &&
              curl_easy_setopt(h, CURLOPT_PROTOCOLS_STR, ec->tls ? "https" : "http") == CURLE_OK;
    if (ok && ec->cacert)
        ok = curl_easy_setopt(h, CURLOPT_CAINFO, ec->cacert) == CURLE_OK;
    if (ok && ec->cert)
        ok = curl_easy_setopt(h, CURLOPT_SSLCERT, ec->cert) == CURLE_OK;
    if (ok && ec->key)
        ok = curl_easy_setopt(h, CURLOPT_SSLKEY, ec->key) == CURLE_OK;
    return ok ? 0 : DLOCK_ENOMEM;
}

/* A transfer is started, pumped (perhaps several times: a stream), and
 * stopped. */
static bool conn_start(ec_conn *k)
{
    return curl_multi_add_handle(k->multi, k->easy) == CURLM_OK;
}

static void conn_stop(ec_conn *k)
{
    curl_multi_remove_handle(k->multi, k->easy);
}

/* Run k's transfer until it ends, until_ns passes, cancel_fd becomes
 * readable or *stop turns true. *res: curl's result when XFER_DONE. */
static enum xfer conn_pump(ec_conn *k, int64_t until_ns, int cancel_fd, const bool *stop,
                           CURLcode *res)
{
    for (;;) {
        int running = 0;
        curl_multi_perform(k->multi, &running);
        CURLMsg *m;
        int left;
        bool done = false;
        while ((m = curl_multi_info_read(k->multi, &left)))
            if (m->msg == CURLMSG_DONE) {
                *res = m->data.result;
                done = true;
            }
        if (done || !running) {
            if (!done)
                *res = CURLE_RECV_ERROR;
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
                          CURLcode *res)
{
    if (!conn_start(k)) {
        *res = CURLE_OUT_OF_MEMORY;
        return XFER_DONE;
    }
    enum xfer x = conn_pump(k, until_ns, cancel_fd, stop, res);
    conn_stop(k);
    return x;
}

/* Whether a transport failure leaves the request unsent for sure (another
 * endpoint may take it without doubt), merely failed, or not a failure. */
static bool curl_failed_before_send(CURLcode rc)
{
    return rc == CURLE_COULDNT_CONNECT || rc == CURLE_COULDNT_RESOLVE_HOST ||
           rc == CURLE_SSL_CONNECT_ERROR || rc == CURLE_PEER_FAILED_VERIFICATION;
}

static int authenticate(ecclient *ec, int64_t until_ns, char *err, size_t errlen);

/* After a request timed out: does that member answer, but know no leader?
 * (A write waits for a quorum; a member's status does not.) Asked within
 * 200 ms and by until_ns, so that a timeout says why when it can without
 * making the caller wait longer. */
static bool no_leader(ecclient *ec, const char *base, int64_t until_ns)
{
    char err[200];
    cJSON *j = NULL;
    int64_t until = dl_deadline_in(200);
    if (until > until_ns)
        until = until_ns;
    if (until - dl_now_ns() < dl_ms_to_ns(5) ||
        ec_post_to(ec, base, "/v3/maintenance/status", "{}", until, -1, &j, NULL, err,
                   sizeof err) != 0)
        return false;
    bool none = ec_juint(j, "leader") == 0;
    cJSON_Delete(j);
    return none;
}

static bool auth_retryable(const char *err)
{
    return strstr(err, "invalid auth token") || strstr(err, "user name is empty") ||
           strstr(err, "auth token is expired");
}

/* The client whose thread this is (NULL on the callers' threads). */
static _Thread_local ecclient *ec_thread_of;

/* The next endpoint after e, which failed: requests that start later
 * begin there, unless another one answered meanwhile. */
static int endpoint_failed(ecclient *ec, int e)
{
    int next = (e + 1) % ec->nendpoints;
    pthread_mutex_lock(&ec->mu);
    if (ec->cur == e)
        ec->cur = next;
    pthread_mutex_unlock(&ec->mu);
    return next;
}

/*
 * POST body to path on the cluster: *out the reply (NULL when out is NULL).
 * With several endpoints, a try that fails, or that has not answered
 * within half the time left (a stalled member), moves to the next
 * endpoint, and so does one that answers but is not etcd; the client
 * starts its later requests at the endpoint that answered last. until_ns
 * bounds everything (-1: the op timeout); cancel_fd ends a wait early.
 * *sent (may be NULL) tells whether the request may have reached a server.
 * only: that endpoint ("http://h:p") and no other, or NULL.
 */
int ec_post_to(ecclient *ec, const char *only, const char *path, const char *body,
                      int64_t until_ns, int cancel_fd, cJSON **out, bool *sent, char *err,
                      size_t errlen)
{
    if (out)
        *out = NULL;
    if (sent)
        *sent = false;
    if (until_ns < 0)
        until_ns = dl_deadline_in(ec->op_ms);
    if (cancel_fd < 0 && ec_thread_of == ec)
        cancel_fd = ec->stop_fd; /* the client's thread: closing the client ends it */
    ec_conn *k = ec_conn_get(ec);
    if (!k) {
        snprintf(err, errlen, "out of memory");
        return DLOCK_ENOMEM;
    }
    bool reauthed = false;
    int result = DLOCK_EUNREACHABLE;
    pthread_mutex_lock(&ec->mu);
    int e = ec->cur;
    pthread_mutex_unlock(&ec->mu);
    snprintf(err, errlen, "no endpoint answered");
    /* what the endpoints that failed said: no leader, not etcd */
    char leaderless[300] = "", impostor[300] = "";
    bool several = !only && ec->nendpoints > 1;
    int max_tries = only ? 1 : 2 * ec->nendpoints + 1;
    for (int tries = 0; tries < max_tries; tries++) {
        int64_t now = dl_now_ns(), left = until_ns - now;
        if (left <= 0) {
            if (tries == 0)
                snprintf(err, errlen, "no time left for the request");
            result = DLOCK_EUNREACHABLE;
            break;
        }
        /* A stalled member must not take the whole time: this try gets
         * half of it when another endpoint can still be tried. */
        int64_t try_until = several && tries + 1 < max_tries ? now + left / 2 : until_ns;
        struct curl_slist *hdrs = curl_slist_append(NULL, "Content-Type: application/json");
        pthread_mutex_lock(&ec->mu);
        struct curl_slist *h2 = hdrs && ec->auth ? curl_slist_append(hdrs, ec->auth) : hdrs;
        pthread_mutex_unlock(&ec->mu);
        if (!h2) {
            curl_slist_free_all(hdrs);
            result = DLOCK_ENOMEM;
            snprintf(err, errlen, "out of memory");
            break;
        }
        hdrs = h2;
        int64_t try_ms = (try_until - now) / 1000000;
        int cms = ec->connect_ms < try_ms ? ec->connect_ms : (int)try_ms;
        const char *base = only ? only : ec->endpoints[e];
        if (ec_conn_setup(ec, k, base, path, body, hdrs, cms)) {
            curl_slist_free_all(hdrs);
            result = DLOCK_ENOMEM;
            snprintf(err, errlen, "out of memory");
            break;
        }
        k->body.len = 0;
        CURLcode res = CURLE_OK;
        enum xfer x = ec_conn_run(k, try_until, cancel_fd, NULL, &res);
        curl_slist_free_all(hdrs);
        if (x == XFER_CANCELED) {
            if (sent)
                *sent = true;
            snprintf(err, errlen, "canceled");
            result = DLOCK_ECANCELED;
            break;
        }
        if (x == XFER_TIMEOUT || res != CURLE_OK) {
            if (sent && !(x == XFER_DONE && curl_failed_before_send(res)))
                *sent = true;
            if (x == XFER_TIMEOUT) {
                pthread_mutex_lock(&ec->mu);
                ec->timeout_ns = dl_now_ns();
                pthread_mutex_unlock(&ec->mu);
            }
            /* (asked once every endpoint had its try: a stalled member would
             * only delay the next one) */
            if (x == XFER_TIMEOUT && strcmp(path, "/v3/maintenance/status") != 0 &&
                (!several || tries + 1 >= ec->nendpoints) && no_leader(ec, base, until_ns))
                snprintf(leaderless, sizeof leaderless,
                         "etcd has no leader, or lost its quorum (%s answers, but knows no "
                         "leader)", base);
            if (x == XFER_TIMEOUT)
                snprintf(err, errlen, "%s did not answer in time", base);
            else if (k->body.toolarge)
                snprintf(err, errlen, "%s sent a reply larger than %u MiB: not etcd?",
                         base, EC_REPLY_MAX >> 20);
            else
                snprintf(err, errlen, "%s: %s", base, curl_easy_strerror(res));
            result = res == CURLE_OUT_OF_MEMORY ? DLOCK_ENOMEM
                     : res == CURLE_SSL_CACERT_BADFILE || res == CURLE_SSL_CERTPROBLEM
                         ? DLOCK_EURL
                         : DLOCK_EUNREACHABLE;
            if (result != DLOCK_EUNREACHABLE)
                break;
            if (!only)
                e = endpoint_failed(ec, e);
            continue;
        }
        if (sent)
            *sent = true;
        long status = 0;
        curl_easy_getinfo(k->easy, CURLINFO_RESPONSE_CODE, &status);
        cJSON *j = k->body.len ? cJSON_ParseWithLength(k->body.buf, k->body.len) : NULL;
        if (!ec_from_etcd(status, j)) {
            /* Not etcd at all: another endpoint may be. */
            cJSON_Delete(j);
            snprintf(impostor, sizeof impostor, "%s answers HTTP %ld but not as etcd's v3 "
                                                "gateway does: not etcd?", base, status);
            snprintf(err, errlen, "%s", impostor);
            result = DLOCK_EPROTO;
            if (!several)
                break;
            e = endpoint_failed(ec, e);
            continue;
        }
        int rc = status != 200 ? ec_gateway_error(base, status, j, err, errlen) : 0;
        if (!only) {
            pthread_mutex_lock(&ec->mu);
            ec->cur = e;
            pthread_mutex_unlock(&ec->mu);
        }
        if (rc) {
            result = rc;
            cJSON_Delete(j);
            if (result == DLOCK_EPERM && ec->user && !reauthed && auth_retryable(err) &&
                strcmp(path, "/v3/auth/authenticate") != 0) {
                reauthed = true;
                char aerr[300];
                int arc = authenticate(ec, until_ns, aerr, sizeof aerr);
                if (arc == 0) {
                    tries--;
                    continue;
                }
                snprintf(err, errlen, "%s", aerr);
                result = arc;
            }
            break;
        }
        if (out)
            *out = j;
        else
            cJSON_Delete(j);
        result = 0;
        break;
    }
    /* No endpoint served: say the most telling thing one of them said. */
    if (result == DLOCK_EUNREACHABLE && leaderless[0])
        snprintf(err, errlen, "%s", leaderless);
    else if (result == DLOCK_EUNREACHABLE && impostor[0]) {
        snprintf(err, errlen, "%s", impostor);
        result = DLOCK_EPROTO;
    }
    ec_conn_put(ec, k);
    return result;
}

int ec_post(ecclient *ec, const char *path, const char *body, int64_t until_ns,
                   int cancel_fd, cJSON **out, bool *sent, char *err, size_t errlen)
{
    return ec_post_to(ec, NULL, path, body, until_ns, cancel_fd, out, sent, err, errlen);
}

/* Log in: a token for the Authorization header of every later request. */
static int authenticate(ecclient *ec, int64_t until_ns, char *err, size_t errlen)
{
    cJSON *req = cJSON_CreateObject();
    char *body = NULL;
    if (req && cJSON_AddStringToObject(req, "name", ec->user) &&
        cJSON_AddStringToObject(req, "password", ec->password ? ec->password : ""))
        body = cJSON_PrintUnformatted(req);
    cJSON_Delete(req);
    if (!body) {
        snprintf(err, errlen, "out of memory");
        return DLOCK_ENOMEM;
    }
    cJSON *j = NULL;
    int rc = ec_post(ec, "/v3/auth/authenticate", body, until_ns, -1, &j, NULL, err, errlen);
    explicit_bzero(body, strlen(body));
    free(body);
    if (rc) {
        if (rc == DLOCK_EPERM)
            snprintf(err, errlen, "etcd refused user \"%s\": wrong user or password, or "
                                  "authentication is not enabled", ec->user);
        return rc;
    }
    const cJSON *t = cJSON_GetObjectItemCaseSensitive(j, "token");
    char *hdr = NULL;
    if (cJSON_IsString(t) && (hdr = malloc(strlen(t->valuestring) + 32)))
        sprintf(hdr, "Authorization: %s", t->valuestring);
    cJSON_Delete(j);
    if (!hdr) {
        snprintf(err, errlen, "etcd's authenticate reply has no token");
        return DLOCK_EPROTO;
    }
    pthread_mutex_lock(&ec->mu);
    free(ec->auth);
    ec->auth = hdr;
    pthread_mutex_unlock(&ec->mu);
    return 0;
}

/* A key's value: "SINCE HOLDER\nVALUE", SINCE the wall-clock ms at which
 * the holder got it (as its own clock says), VALUE a leader's value. */
static void value_format(const ecclient *ec, int64_t since_ms, const char *leader, char *buf,
                         size_t len)
{
    snprintf(buf, len, "%" PRId64 " %s\n%s", since_ms, ec->self, leader ? leader : "");
}

/* ---- the lease ------------------------------------------------------------------- */

static void *client_thread(void *arg);

static void ckey_of(const ecclient *ec, int64_t lease, char *buf, size_t len)
{
    snprintf(buf, len, "%s/.clients/%016" PRIx64, ec->prefix, (uint64_t)lease);
}

/* Keep-alive of the current lease: 0 (confirmed_ns moved), DLOCK_ELOST
 * when the server no longer knows the lease, or a transport error. */
static int keepalive(ecclient *ec, int64_t until_ns, char *err, size_t errlen)
{
    pthread_mutex_lock(&ec->mu);
    int64_t lease = ec->lease;
    uint64_t gen = ec->gen;
    bool gone = ec->lease_gone;
    pthread_mutex_unlock(&ec->mu);
    if (!lease || gone) {
        snprintf(err, errlen, "the client's lease is gone");
        return DLOCK_ELOST;
    }
    char body[64];
    snprintf(body, sizeof body, "{\"ID\":\"%" PRId64 "\"}", lease);
    int64_t sent = dl_now_ns();
    cJSON *j = NULL;
    int rc = ec_post(ec, "/v3/lease/keepalive", body, until_ns, -1, &j, NULL, err, errlen);
    if (rc)
        return rc;
    const cJSON *r = ec_jobj(j, "result");
    int64_t ttl = ec_jint(r, "TTL", 0);
    const cJSON *er = ec_jobj(j, "error");
    cJSON_Delete(j);
    if (!r || er) {
        snprintf(err, errlen, "etcd's keep-alive reply has no result");
        return DLOCK_EPROTO;
    }
    pthread_mutex_lock(&ec->mu);
    if (gen == ec->gen) {
        if (ttl <= 0)
            ec->lease_gone = true;
        else if (sent > ec->confirmed_ns)
            ec->confirmed_ns = sent;
    }
    pthread_mutex_unlock(&ec->mu);
    if (ttl <= 0) {
        snprintf(err, errlen, "the client's lease %" PRId64 " expired or was revoked", lease);
        return DLOCK_ELOST;
    }
    return 0;
}

/*
 * The client's lease, granted when there is none (first use, or after it
 * was lost): *lease, *gen and whether the client key still has to be made
 * (the caller puts it in its first transaction).
 */
int ec_lease_ensure(ecclient *ec, int64_t until_ns, int64_t *lease, uint64_t *gen,
                        bool *make_ckey, char *err, size_t errlen)
{
    if (until_ns < 0)
        until_ns = dl_deadline_in(ec->op_ms);
    pthread_mutex_lock(&ec->mu);
    /* Another thread's grant may be waiting on a stalled server: no
     * longer than our own bound. */
    while (ec->granting && dl_now_ns() < until_ns) {
        struct timespec ts = {.tv_sec = until_ns / 1000000000LL,
                              .tv_nsec = until_ns % 1000000000LL};
        pthread_cond_timedwait(&ec->cv, &ec->mu, &ts);
    }
    if (ec->granting) {
        pthread_mutex_unlock(&ec->mu);
        snprintf(err, errlen, "etcd did not grant the client's lease in time");
        return DLOCK_EUNREACHABLE;
    }
    if (ec->lease && !ec->lease_gone) {
        *lease = ec->lease;
        *gen = ec->gen;
        *make_ckey = !ec->ckey_made;
        pthread_mutex_unlock(&ec->mu);
        return 0;
    }
    ec->granting = true;
    pthread_mutex_unlock(&ec->mu);
    char body[64];
    snprintf(body, sizeof body, "{\"TTL\":\"%d\"}", ec->ttl_s);
    int64_t sent = dl_now_ns();
    cJSON *j = NULL;
    int rc = ec_post(ec, "/v3/lease/grant", body, until_ns, -1, &j, NULL, err, errlen);
    int64_t id = rc ? 0 : ec_jint(j, "ID", 0), ttl = rc ? 0 : ec_jint(j, "TTL", 0);
    if (!rc && (id <= 0 || ttl <= 0)) {
        const cJSON *e = cJSON_GetObjectItemCaseSensitive(j, "error");
        snprintf(err, errlen, "etcd granted no lease%s%.200s", cJSON_IsString(e) ? ": " : "",
                 cJSON_IsString(e) ? e->valuestring : "");
        rc = DLOCK_EPROTO;
    }
    cJSON_Delete(j);
    pthread_mutex_lock(&ec->mu);
    ec->granting = false;
    if (rc == 0) {
        ec->lease = id;
        ec->gen++;
        ec->lease_gone = false;
        ec->ckey_made = false;
        ec->ckey_rev = 0;
        ec->confirmed_ns = sent;
        /* Keep-alives at a quarter of what the server granted (it may
         * grant more than asked, never less). */
        ec->next_ka_ns = sent + dl_ms_to_ns(ttl * 1000) / 4;
        *lease = id;
        *gen = ec->gen;
        *make_ckey = true;
        if (!ec->thread_started) {
            if (pthread_create(&ec->thread, NULL, client_thread, ec) == 0)
                ec->thread_started = true;
            else
                rc = DLOCK_ENOMEM;
        } else if (ec->bgm) {
            curl_multi_wakeup(ec->bgm);
        }
    }
    pthread_cond_broadcast(&ec->cv);
    pthread_mutex_unlock(&ec->mu);
    if (rc == DLOCK_ENOMEM)
        snprintf(err, errlen, "cannot start the client's thread");
    return rc;
}

/* ---- losses ------------------------------------------------------------------------ */

/* Tell the holders in lost[] (marked lost under mu, held on entry),
 * then let go of mu and lost. */
static void tell_lost(ecclient *ec, dlock_lock **lost, int n, const char *why)
{
    dl_teller_tell_locks(&ec->teller, &ec->mu, lost, n, why);
    pthread_mutex_unlock(&ec->mu);
    free(lost);
}

/* Every held lock of lease generation gen is lost (the lease is gone). */
static void lose_gen(ecclient *ec, uint64_t gen, const char *why)
{
    pthread_mutex_lock(&ec->mu);
    if (gen == ec->gen)
        ec->lease_gone = true;
    int n = 0;
    for (eclock *el = ec->held; el; el = el->next_held)
        n++;
    dlock_lock **lost = malloc(sizeof *lost * (size_t)(n ? n : 1));
    n = 0;
    for (eclock *el = ec->held; el && lost; el = el->next_held)
        if (el->gen == gen && !el->lost) {
            el->lost = true;
            lost[n++] = el->l;
        }
    tell_lost(ec, lost, n, why);
}

/* Is kv (from a read or a watch event) still the key a holder got: made at
 * rev (not deleted and made anew), bound to its lease, with our value (an
 * operator's put has neither our lease nor our name)? NULL: it is gone. */
static bool kv_still_ours(const ecclient *ec, const char *dir, const char *key, int64_t rev,
                          const cJSON *kv)
{
    if (!kv || ec_jint(kv, "create_revision", 0) != rev ||
        ec_jint(kv, "lease", 0) != ec_entry_lease(dir, key))
        return false;
    char value[1024], holder[sizeof ec->self];
    ec_kv_value(kv, value, sizeof value);
    ec_split_value(value, holder, sizeof holder, NULL);
    return strcmp(holder, ec->self) == 0;
}

/* The held lock whose key is key and was made at rev is lost: tell its
 * holder (once). */
static void lose_key(ecclient *ec, const char *key, int64_t rev, const char *why)
{
    pthread_mutex_lock(&ec->mu);
    dlock_lock **lost = malloc(sizeof *lost);
    int m = 0;
    for (eclock *el = ec->held; el && lost; el = el->next_held)
        if (!el->lost && el->rev == rev && strcmp(el->key, key) == 0) {
            el->lost = true;
            lost[m++] = el->l;
            break;
        }
    tell_lost(ec, lost, m, why);
}

#define EC_KEY_LOST "its key was deleted or overwritten from outside (dlock break, etcdctl)"

/* Events may have been missed (a break touched our client key, the watch
 * failed): read every held key; the ones gone or no longer ours are lost,
 * the others are known intact up to the read (their watch starts there). */
static void verify_held(ecclient *ec)
{
    typedef struct {
        char key[EC_KEY_MAX], dir[300];
        int64_t rev;
    } held_ref;
    pthread_mutex_lock(&ec->mu);
    int n = 0;
    for (eclock *el = ec->held; el; el = el->next_held)
        n++;
    held_ref *refs = malloc(sizeof *refs * (size_t)(n ? n : 1));
    n = 0;
    for (eclock *el = ec->held; el && refs; el = el->next_held)
        if (!el->lost) {
            snprintf(refs[n].key, sizeof refs[n].key, "%s", el->key);
            snprintf(refs[n].dir, sizeof refs[n].dir, "%s", el->dir);
            refs[n++].rev = el->rev;
        }
    pthread_mutex_unlock(&ec->mu);
    if (!refs)
        return;
    for (int i = 0; i < n; i++) {
        char b64[EC_KEY_MAX * 2], body[EC_KEY_MAX * 2 + 64], err[200];
        ec_b64_encode(refs[i].key, strlen(refs[i].key), b64);
        snprintf(body, sizeof body, "{\"key\":\"%s\"}", b64);
        cJSON *j = NULL;
        if (ec_post(ec, "/v3/kv/range", body, -1, -1, &j, NULL, err, sizeof err) != 0)
            continue; /* the keep-alive decides then */
        const cJSON *kv = cJSON_GetArrayItem(ec_jarr(j, "kvs"), 0);
        bool ours = kv_still_ours(ec, refs[i].dir, refs[i].key, refs[i].rev, kv);
        int64_t at = ec_header_rev(j);
        cJSON_Delete(j);
        if (!ours) {
            lose_key(ec, refs[i].key, refs[i].rev, EC_KEY_LOST);
            continue;
        }
        pthread_mutex_lock(&ec->mu);
        for (eclock *el = ec->held; el; el = el->next_held)
            if (el->rev == refs[i].rev && strcmp(el->key, refs[i].key) == 0 &&
                el->watch_from <= at)
                el->watch_from = at + 1;
        pthread_mutex_unlock(&ec->mu);
    }
    free(refs);
}

/* Take el out of the held list, waiting for a loss callback about it to
 * finish (unless this thread is the one running it). */
static void held_drop(ecclient *ec, eclock *el)
{
    pthread_mutex_lock(&ec->mu);
    if (el->listed) {
        for (eclock **p = &ec->held; *p; p = &(*p)->next_held)
            if (*p == el) {
                *p = el->next_held;
                break;
            }
        el->listed = false;
    }
    dl_teller_wait(&ec->teller, &ec->mu);
    pthread_mutex_unlock(&ec->mu);
}

static void orphan_add(ecclient *ec, const char *key)
{
    char *k = strdup(key);
    pthread_mutex_lock(&ec->mu);
    char **o = k ? realloc(ec->orphans, sizeof *o * (ec->norphans + 1)) : NULL;
    if (o) {
        ec->orphans = o;
        o[ec->norphans++] = k;
        k = NULL;
        if (ec->bgm && ec_thread_of != ec) /* its thread deletes it now */
            curl_multi_wakeup(ec->bgm);
    }
    pthread_mutex_unlock(&ec->mu);
    free(k); /* (out of memory: the lease's end deletes it) */
}

/* Delete key; only while it was made at rev and is bound to lease (rev
 * 0: whatever it is now): a key deleted and made anew, or overwritten from
 * outside, is not ours to delete. *deleted (may be NULL): how many went. */
static int delete_key(ecclient *ec, const char *key, int64_t rev, int64_t lease,
                      int64_t until_ns, int64_t *deleted, char *err, size_t errlen)
{
    char b64[EC_KEY_MAX * 2], body[EC_KEY_MAX * 6 + 300];
    ec_b64_encode(key, strlen(key), b64);
    if (rev > 0)
        snprintf(body, sizeof body,
                 "{\"compare\":[{\"key\":\"%s\",\"target\":\"CREATE\",\"result\":\"EQUAL\","
                 "\"create_revision\":\"%" PRId64 "\"},{\"key\":\"%s\",\"target\":\"LEASE\","
                 "\"result\":\"EQUAL\",\"lease\":\"%" PRId64 "\"}],\"success\":["
                 "{\"request_delete_range\":{\"key\":\"%s\"}}]}",
                 b64, rev, b64, lease, b64);
    else
        snprintf(body, sizeof body, "{\"key\":\"%s\"}", b64);
    cJSON *j = NULL;
    int rc = ec_post(ec, rev > 0 ? "/v3/kv/txn" : "/v3/kv/deleterange", body, until_ns, -1, &j,
                     NULL, err, errlen);
    if (rc == 0 && deleted) {
        const cJSON *r = j;
        if (rev > 0)
            r = cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(j, "succeeded"))
                    ? ec_jobj(cJSON_GetArrayItem(ec_jarr(j, "responses"), 0), "response_delete_range")
                    : NULL;
        *deleted = ec_jint(r, "deleted", 0);
    }
    cJSON_Delete(j);
    return rc;
}

static void orphans_purge(ecclient *ec)
{
    for (;;) {
        pthread_mutex_lock(&ec->mu);
        char *k = ec->norphans ? ec->orphans[--ec->norphans] : NULL;
        pthread_mutex_unlock(&ec->mu);
        if (!k)
            return;
        char err[200];
        if (delete_key(ec, k, 0, 0, -1, NULL, err, sizeof err) != 0) {
            orphan_add(ec, k);
            free(k);
            return;
        }
        free(k);
    }
}

/* ---- the client's thread -------------------------------------------------------------- */

/* The client thread's watch: the client key (a revoked lease, a break) and
 * every held key (deleted or overwritten from outside). */
typedef struct ck_watch {
    ecclient *ec;
    uint64_t gen;
    int e; /* the endpoint it streams from */
    const char *ckey;
    bool deleted, touched, failed;
    int64_t rev; /* the client key's last event */
    /* held keys whose event says they are no longer ours */
    struct ck_gone {
        char key[EC_KEY_MAX];
        int64_t rev;
    } *gone;
    size_t ngone;
} ck_watch;

/* A held key's event: is it still the key its holder got? */
static void ck_held_event(ck_watch *w, const char *key, bool del, const cJSON *kv)
{
    ecclient *ec = w->ec;
    int64_t rev = 0;
    pthread_mutex_lock(&ec->mu);
    for (eclock *el = ec->held; el; el = el->next_held)
        if (!el->lost && strcmp(el->key, key) == 0 &&
            (del || !kv_still_ours(ec, el->dir, el->key, el->rev, kv))) {
            rev = el->rev;
            break;
        }
    pthread_mutex_unlock(&ec->mu);
    if (!rev)
        return; /* ours (our own writes), or not held any more */
    struct ck_gone *g = realloc(w->gone, sizeof *g * (w->ngone + 1));
    if (!g) {
        w->failed = true; /* verify_held finds it */
        return;
    }
    w->gone = g;
    snprintf(g[w->ngone].key, sizeof g[w->ngone].key, "%s", key);
    g[w->ngone++].rev = rev;
}

static void ck_line(void *arg, cJSON *j)
{
    ck_watch *w = arg;
    const cJSON *r = ec_jobj(j, "result");
    if (!r) {
        w->failed = true; /* an error line, or not JSON */
        return;
    }
    if (cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(r, "canceled")))
        w->failed = true; /* (compacted past a watch's start: verify_held) */
    const cJSON *ev;
    cJSON_ArrayForEach(ev, ec_jarr(r, "events"))
    {
        const cJSON *t = cJSON_GetObjectItemCaseSensitive(ev, "type"), *kv = ec_jobj(ev, "kv");
        bool del = cJSON_IsString(t) && strcmp(t->valuestring, "DELETE") == 0;
        char key[EC_KEY_MAX];
        if (!ec_kv_key(kv, key, sizeof key))
            continue;
        if (strcmp(key, w->ckey) != 0) {
            ck_held_event(w, key, del, kv);
            continue;
        }
        int64_t mod = ec_jint(kv, "mod_revision", 0);
        if (mod > w->rev)
            w->rev = mod;
        if (del)
            w->deleted = true;
        else
            w->touched = true; /* PUT: the default type is left out */
    }
}

/* The body of the client thread's watch: the client key from after rev
 * from, every held key from its watch_from (marked watched). NULL: out of
 * memory. Called with ec->mu held. */
static char *ck_watch_body(ecclient *ec, int64_t lease, int64_t from)
{
    size_t n = 1;
    for (eclock *el = ec->held; el; el = el->next_held)
        n++;
    size_t cap = n * (EC_KEY_MAX * 2 + 128);
    char *body = malloc(cap), key[EC_KEY_MAX], b64[EC_KEY_MAX * 2];
    if (!body)
        return NULL;
    ckey_of(ec, lease, key, sizeof key);
    ec_b64_encode(key, strlen(key), b64);
    size_t at = (size_t)snprintf(body, cap,
                                 "{\"create_request\":{\"key\":\"%s\",\"start_revision\":\"%" PRId64
                                 "\"}}",
                                 b64, from + 1);
    for (eclock *el = ec->held; el; el = el->next_held) {
        el->watched = true;
        if (el->lost)
            continue;
        ec_b64_encode(el->key, strlen(el->key), b64);
        at += (size_t)snprintf(body + at, cap - at,
                               "{\"create_request\":{\"key\":\"%s\",\"start_revision\":\"%" PRId64
                               "\"}}",
                               b64, el->watch_from);
    }
    return body;
}

/* The client thread's watch failed (compacted past its start, a member
 * went): the client key still there means the lease lives, and the watch
 * starts again from this read; then the held keys are read likewise. */
static void ckey_verify(ecclient *ec, uint64_t gen)
{
    char key[EC_KEY_MAX], b64[EC_KEY_MAX * 2], body[EC_KEY_MAX * 2 + 64], err[200];
    pthread_mutex_lock(&ec->mu);
    int64_t lease = ec->lease;
    bool current = gen == ec->gen && !ec->lease_gone;
    pthread_mutex_unlock(&ec->mu);
    if (!current)
        return;
    ckey_of(ec, lease, key, sizeof key);
    ec_b64_encode(key, strlen(key), b64);
    snprintf(body, sizeof body, "{\"key\":\"%s\",\"keys_only\":true}", b64);
    cJSON *j = NULL;
    if (ec_post(ec, "/v3/kv/range", body, -1, -1, &j, NULL, err, sizeof err) == 0) {
        bool there = cJSON_GetArraySize(ec_jarr(j, "kvs")) > 0;
        int64_t at = ec_header_rev(j);
        if (there) {
            pthread_mutex_lock(&ec->mu);
            if (gen == ec->gen && ec->ckey_rev < at)
                ec->ckey_rev = at;
            pthread_mutex_unlock(&ec->mu);
        }
        cJSON_Delete(j);
        if (!there) {
            lose_gen(ec, gen, "the client's etcd lease was revoked or expired (its key is "
                              "gone)");
            return;
        }
    }
    verify_held(ec);
}

/* A held key joins the client thread's watch this long after it was
 * granted: a short hold (dlock run -- true) never costs a new watch, and
 * the watch starts at the key's creation, so nothing before is missed. */
#define EC_WATCH_HELD_AFTER_MS 100

/*
 * One thread per client, from the first lease on: keep-alives at ttl/4,
 * the watch on the client key (a revoked lease or a break told at once),
 * deletion of orphaned keys. Blocking requests here are bounded by the op
 * timeout.
 */
static void *client_thread(void *arg)
{
    ecclient *ec = arg;
    ec_thread_of = ec;
    CURLM *m = curl_multi_init();
    pthread_mutex_lock(&ec->mu);
    ec->bgm = m;
    pthread_mutex_unlock(&ec->mu);
    ec_conn *wk = NULL; /* the watch's connection */
    ck_watch w = {.ec = ec};
    char ckey[EC_KEY_MAX] = "";
    struct curl_slist *hdrs = NULL;
    char *body = NULL;
    int64_t retry_watch_ns = 0;
    for (;;) {
        int64_t now = dl_now_ns();
        pthread_mutex_lock(&ec->mu);
        bool stop = ec->stopping;
        uint64_t gen = ec->gen;
        bool live = ec->lease && !ec->lease_gone;
        /* The watch on the client key begins 100 ms after the key, and
         * once a lock has been held that long (before, no holder has
         * anything to be told, and a waiter watches its own key): a
         * short-lived client (dlock run -- true) never costs the server a
         * watch, nor does one that only waits (a dlock run queued behind
         * others), and one that lives on still hears of a revocation in
         * that time (the watch starts from the key's revision). */
        bool have_ckey = ec->ckey_made;
        int64_t watch_from_ns = ec->ckey_ns + dl_ms_to_ns(100);
        int64_t first_held_ns = INT64_MAX;
        for (eclock *el = ec->held; el; el = el->next_held)
            if (!el->lost && el->held_ns < first_held_ns)
                first_held_ns = el->held_ns;
        if (first_held_ns == INT64_MAX)
            watch_from_ns = INT64_MAX;
        else if (first_held_ns + dl_ms_to_ns(EC_WATCH_HELD_AFTER_MS) > watch_from_ns)
            watch_from_ns = first_held_ns + dl_ms_to_ns(EC_WATCH_HELD_AFTER_MS);
        int64_t lease = ec->lease, from = ec->ckey_rev, next_ka = ec->next_ka_ns;
        bool orphans = ec->norphans > 0, verify = ec->verify;
        ec->verify = false;
        /* A held key not in the watch yet joins it (the watch is made
         * anew) once it has been held a little; the watch follows the
         * endpoint that answers. */
        bool rebuild = wk && ec->cur != w.e;
        int64_t next_join = INT64_MAX;
        for (eclock *el = ec->held; el; el = el->next_held)
            if (!el->watched && !el->lost) {
                int64_t due = el->held_ns + dl_ms_to_ns(EC_WATCH_HELD_AFTER_MS);
                if (due <= now)
                    rebuild = rebuild || wk;
                else if (due < next_join)
                    next_join = due;
            }
        pthread_mutex_unlock(&ec->mu);
        if (stop)
            break;
        if (live && now >= next_ka) {
            char err[300];
            int rc = keepalive(ec, -1, err, sizeof err);
            pthread_mutex_lock(&ec->mu);
            /* on failure try again soon: the core's watchdog keeps time */
            ec->next_ka_ns = dl_now_ns() + (rc == 0 ? dl_ms_to_ns(ec->ttl_s * 1000) / 4
                                                    : dl_ms_to_ns(100));
            pthread_mutex_unlock(&ec->mu);
            if (rc == DLOCK_ELOST)
                lose_gen(ec, gen, "the client's etcd lease expired or was revoked");
            continue;
        }
        if (verify)
            verify_held(ec);
        if (orphans && live)
            orphans_purge(ec);
        int64_t next_touch = INT64_MAX;
        for (;;) {
            ec_touch t = {0};
            pthread_mutex_lock(&ec->mu);
            for (size_t i = 0; i < ec->ntouches; i++)
                if (ec->touches[i].due_ns <= dl_now_ns()) {
                    t = ec->touches[i];
                    ec->touches[i] = ec->touches[--ec->ntouches];
                    break;
                } else if (ec->touches[i].due_ns < next_touch) {
                    next_touch = ec->touches[i].due_ns;
                }
            pthread_mutex_unlock(&ec->mu);
            if (!t.body)
                break;
            char err[200];
            (void)ec_post(ec, "/v3/kv/txn", t.body, -1, -1, NULL, NULL, err, sizeof err);
            free(t.body);
            free(t.key);
        }
        /* The watch of the current lease. */
        if (wk && (w.gen != gen || !live || rebuild)) {
            curl_multi_remove_handle(m, wk->easy);
            ec_conn_put(ec, wk);
            wk = NULL;
            if (rebuild)
                retry_watch_ns = 0;
        }
        if (!wk && live && have_ckey && m && now >= retry_watch_ns && now >= watch_from_ns) {
            wk = ec_conn_get(ec);
            ckey_of(ec, lease, ckey, sizeof ckey);
            curl_slist_free_all(hdrs);
            hdrs = curl_slist_append(NULL, "Content-Type: application/json");
            pthread_mutex_lock(&ec->mu);
            if (hdrs && ec->auth)
                hdrs = curl_slist_append(hdrs, ec->auth);
            int e = ec->cur;
            free(body);
            body = ck_watch_body(ec, lease, from);
            pthread_mutex_unlock(&ec->mu);
            w.gen = gen;
            w.e = e;
            w.ckey = ckey;
            w.rev = from;
            w.deleted = w.touched = w.failed = false;
            w.ngone = 0;
            if (wk && hdrs && body &&
                ec_conn_setup(ec, wk, ec->endpoints[e], "/v3/watch", body, hdrs, ec->connect_ms) == 0) {
                wk->body.on_line = ck_line;
                wk->body.arg = &w;
                if (curl_multi_add_handle(m, wk->easy) != CURLM_OK) {
                    ec_conn_put(ec, wk);
                    wk = NULL;
                }
            } else {
                ec_conn_put(ec, wk);
                wk = NULL;
            }
            retry_watch_ns = now + dl_ms_to_ns(200);
        }
        int running = 0;
        if (m)
            curl_multi_perform(m, &running);
        CURLMsg *msg;
        int left;
        while (m && (msg = curl_multi_info_read(m, &left)))
            if (msg->msg == CURLMSG_DONE && wk && msg->easy_handle == wk->easy)
                w.failed = true;
        if (wk && (w.deleted || w.touched || w.failed)) {
            pthread_mutex_lock(&ec->mu);
            if (w.gen == ec->gen && w.rev > ec->ckey_rev)
                ec->ckey_rev = w.rev;
            pthread_mutex_unlock(&ec->mu);
            if (w.deleted)
                lose_gen(ec, w.gen, "the client's etcd lease was revoked or expired (its key "
                                    "is gone)");
            else if (w.touched)
                verify_held(ec);
            w.touched = false;
            if (w.deleted || w.failed) {
                curl_multi_remove_handle(m, wk->easy);
                ec_conn_put(ec, wk);
                wk = NULL;
                if (w.failed && !w.deleted)
                    ckey_verify(ec, w.gen); /* events may have been missed */
            }
        }
        /* (after the lease's end: a revoked lease deletes our keys too, and
         * its holders are told why) */
        for (size_t i = 0; i < w.ngone; i++)
            lose_key(ec, w.gone[i].key, w.gone[i].rev, EC_KEY_LOST);
        w.ngone = 0;
        int64_t wait_ns = live ? next_ka - dl_now_ns() : dl_ms_to_ns(1000);
        if (next_touch != INT64_MAX && next_touch - dl_now_ns() < wait_ns)
            wait_ns = next_touch - dl_now_ns();
        if (next_join != INT64_MAX && next_join - dl_now_ns() < wait_ns)
            wait_ns = next_join - dl_now_ns();
        if (wait_ns > dl_ms_to_ns(100) && (!wk && live))
            wait_ns = dl_ms_to_ns(100);
        if (wait_ns < 0)
            wait_ns = 0;
        if (m)
            curl_multi_poll(m, NULL, 0, (int)(wait_ns / 1000000) + 1, NULL);
        else
            usleep(100000);
    }
    if (wk) {
        curl_multi_remove_handle(m, wk->easy);
        ec_conn_put(ec, wk);
    }
    free(w.gone);
    free(body);
    curl_slist_free_all(hdrs);
    pthread_mutex_lock(&ec->mu);
    ec->bgm = NULL;
    pthread_mutex_unlock(&ec->mu);
    if (m)
        curl_multi_cleanup(m);
    return NULL;
}

/* ---- the queue ------------------------------------------------------------------------ */

/*
 * Read the queue of el's name up to its own key: the last three keys for an
 * exclusive lock (it, its predecessor, and whether that one is first),
 * every earlier key otherwise.
 *
 * After a watch event of revision seen, the read is served by the member
 * from what it has applied (serializable: no wait behind writes in
 * flight), provided it has applied that event: keys before ours only ever
 * go, so an older state could only show more of them, and our own key's
 * deletion, had it come first, is applied too. Else, and without an event,
 * the read is linearizable.
 */
static int read_queue(ecclient *ec, eclock *el, int64_t seen, int64_t until_ns, ec_entry **q,
                      int *n, int64_t *rev, char *err, size_t errlen)
{
    char b64k[EC_KEY_MAX * 2], b64e[EC_KEY_MAX * 2], end[EC_KEY_MAX], body[EC_KEY_MAX * 4 + 200];
    range_end(el->dir, end, sizeof end);
    ec_b64_encode(el->dir, strlen(el->dir), b64k);
    ec_b64_encode(end, strlen(end), b64e);
    bool x = el->kind[0] == 'x';
    cJSON *j = NULL;
    for (int serializable = seen > 0; serializable >= 0; serializable--) {
        snprintf(body, sizeof body,
                 "{\"key\":\"%s\",\"range_end\":\"%s\",\"keys_only\":true,"
                 "\"sort_target\":\"CREATE\",\"sort_order\":\"%s\",\"max_create_revision\":\"%" PRId64
                 "\"%s%s}",
                 b64k, b64e, x ? "DESCEND" : "ASCEND", el->rev, x ? ",\"limit\":\"3\"" : "",
                 serializable ? ",\"serializable\":true" : "");
        int rc = ec_post(ec, "/v3/kv/range", body, until_ns, -1, &j, NULL, err, errlen);
        if (rc)
            return rc;
        if (!serializable || ec_header_rev(j) >= seen)
            break;
        cJSON_Delete(j); /* that member is behind the event: ask the leader */
        j = NULL;
    }
    *rev = ec_header_rev(j);
    *n = ec_queue_of(j, el->dir, x, q);
    /* Counted over every key returned, ours or not: two of at most three
     * means nothing at all is before the predecessor. */
    el->pred_first = x && *n == 2 && cJSON_GetArraySize(ec_jarr(j, "kvs")) == 2;
    cJSON_Delete(j);
    if (*n < 0) {
        snprintf(err, errlen, "out of memory");
        return DLOCK_ENOMEM;
    }
    return 0;
}

/*
 * Queue el: one transaction puts its key (only if absent: a retried
 * request finds it) and, on the first use of a lease, the client key, then
 * reads the queue as it is with our key in it.
 */
static int enqueue(ecclient *ec, dlock_lock *l, eclock *el, int64_t lease, bool make_ckey,
                   int64_t until_ns, ec_entry **q, int *n, int64_t *rev, bool *unknown,
                   char *err, size_t errlen)
{
    char value[sizeof ec->self + 32];
    el->since_ms = dl_realtime_ms();
    value_format(ec, el->since_ms, NULL, value, sizeof value);
    char b64k[EC_KEY_MAX * 2], b64v[sizeof value * 2], b64d[EC_KEY_MAX * 2], b64e[EC_KEY_MAX * 2];
    char end[EC_KEY_MAX], ckey[EC_KEY_MAX], b64ck[EC_KEY_MAX * 2], b64s[sizeof ec->self * 2];
    ec_b64_encode(el->key, strlen(el->key), b64k);
    ec_b64_encode(value, strlen(value), b64v);
    ec_b64_encode(el->dir, strlen(el->dir), b64d);
    range_end(el->dir, end, sizeof end);
    ec_b64_encode(end, strlen(end), b64e);
    ckey_of(ec, lease, ckey, sizeof ckey);
    ec_b64_encode(ckey, strlen(ckey), b64ck);
    ec_b64_encode(ec->self, strlen(ec->self), b64s);
    char cput[EC_KEY_MAX * 6];
    cput[0] = '\0';
    if (make_ckey)
        snprintf(cput, sizeof cput,
                 ",{\"request_put\":{\"key\":\"%s\",\"value\":\"%s\",\"lease\":\"%" PRId64 "\"}}",
                 b64ck, b64s, lease);
    bool x = el->kind[0] == 'x';
    char range[EC_KEY_MAX * 6];
    snprintf(range, sizeof range,
             "{\"request_range\":{\"key\":\"%s\",\"range_end\":\"%s\",\"keys_only\":true,"
             "\"sort_target\":\"CREATE\",\"sort_order\":\"%s\"%s}}",
             b64d, b64e, x ? "DESCEND" : "ASCEND", x ? ",\"limit\":\"3\"" : "");
    /* The name's marker (PREFIX/.names/NAME, for dlock list), put only
     * when absent: a nested transaction costs no write when it exists. */
    char marker[EC_KEY_MAX], b64m[EC_KEY_MAX * 2];
    snprintf(marker, sizeof marker, "%s/.names/%s", ec->prefix, l->name);
    ec_b64_encode(marker, strlen(marker), b64m);
    char body[EC_KEY_MAX * 24];
    snprintf(body, sizeof body,
             "{\"compare\":[{\"key\":\"%s\",\"target\":\"CREATE\",\"result\":\"EQUAL\","
             "\"create_revision\":\"0\"}],"
             "\"success\":[{\"request_put\":{\"key\":\"%s\",\"value\":\"%s\",\"lease\":\"%" PRId64
             "\"}},%s%s,{\"request_txn\":{\"compare\":[{\"key\":\"%s\",\"target\":\"CREATE\","
             "\"result\":\"EQUAL\",\"create_revision\":\"0\"}],\"success\":[{\"request_put\":"
             "{\"key\":\"%s\"}}]}}],"
             "\"failure\":[{\"request_range\":{\"key\":\"%s\"}}]}",
             b64k, b64k, b64v, lease, range, cput, b64m, b64m, b64k);
    cJSON *j = NULL;
    bool sent = false;
    int rc = ec_post(ec, "/v3/kv/txn", body, until_ns, -1, &j, &sent, err, errlen);
    *unknown = rc != 0 && sent;
    if (rc)
        return rc;
    bool ok = cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(j, "succeeded"));
    const cJSON *resp = ec_jarr(j, "responses");
    int64_t hrev = ec_header_rev(j);
    if (!ok) {
        /* Our key exists already (a retried request): read on from it. */
        const cJSON *r = ec_jobj(cJSON_GetArrayItem(resp, 0), "response_range");
        const cJSON *kv = cJSON_GetArrayItem(ec_jarr(r, "kvs"), 0);
        el->rev = ec_jint(kv, "create_revision", 0);
        cJSON_Delete(j);
        if (el->rev <= 0) {
            snprintf(err, errlen, "etcd's transaction reply makes no sense");
            return DLOCK_EPROTO;
        }
        return read_queue(ec, el, 0, until_ns, q, n, rev, err, errlen);
    }
    el->rev = hrev;
    const cJSON *r = ec_jobj(cJSON_GetArrayItem(resp, 1), "response_range");
    *rev = hrev;
    *n = r ? ec_queue_of(r, el->dir, x, q) : -2;
    el->pred_first = x && *n == 2 && cJSON_GetArraySize(ec_jarr(r, "kvs")) == 2;
    cJSON_Delete(j);
    if (*n == -1) {
        snprintf(err, errlen, "out of memory");
        return DLOCK_ENOMEM;
    }
    if (*n < 0 || hrev <= 0) {
        snprintf(err, errlen, "etcd's transaction reply has no queue");
        return DLOCK_EPROTO;
    }
    if (make_ckey) {
        pthread_mutex_lock(&ec->mu);
        if (ec->lease == lease) {
            ec->ckey_made = true;
            ec->ckey_ns = dl_now_ns();
            if (ec->ckey_rev < hrev)
                ec->ckey_rev = hrev;
        }
        if (ec->bgm)
            curl_multi_wakeup(ec->bgm);
        pthread_mutex_unlock(&ec->mu);
    }
    return 0;
}

/* Did the keys a waiter watches change between revision rev (its read) and
 * at_rev (its watches' start): pred gone (or, with puts, written), own key
 * gone? A range watch (any key of the name) is taken as changed. The read
 * may be served from what the member has applied, as long as that reaches
 * at_rev: whatever happens later, the watches see. */
static bool changed_since(ecclient *ec, const char *pred, bool range, bool puts, const char *own,
                          int64_t rev, int64_t at_rev, int64_t until_ns)
{
    if (range)
        return true;
    char b64p[EC_KEY_MAX * 2], b64o[EC_KEY_MAX * 2], body[EC_KEY_MAX * 4 + 200], err[200];
    ec_b64_encode(pred, strlen(pred), b64p);
    ec_b64_encode(own, strlen(own), b64o);
    snprintf(body, sizeof body,
             "{\"success\":[{\"request_range\":{\"key\":\"%s\",\"keys_only\":true,"
             "\"serializable\":true}},{\"request_range\":{\"key\":\"%s\",\"keys_only\":true,"
             "\"serializable\":true}}]}",
             b64p, b64o);
    cJSON *j = NULL;
    if (ec_post(ec, "/v3/kv/txn", body, until_ns, -1, &j, NULL, err, sizeof err) != 0 ||
        ec_header_rev(j) < at_rev) {
        cJSON_Delete(j);
        return true; /* the caller's read says what is wrong, or is up to date */
    }
    const cJSON *resp = ec_jarr(j, "responses");
    const cJSON *p = cJSON_GetArrayItem(ec_jarr(ec_jobj(cJSON_GetArrayItem(resp, 0), "response_range"), "kvs"), 0);
    const cJSON *o = cJSON_GetArrayItem(ec_jarr(ec_jobj(cJSON_GetArrayItem(resp, 1), "response_range"), "kvs"), 0);
    bool changed = !p || !o || (puts && ec_jint(p, "mod_revision", 0) > rev);
    cJSON_Delete(j);
    return changed;
}

static int wait_change(ecclient *ec, const char *pred, bool range, bool puts, bool chain,
                       const char *own, int64_t rev, int64_t deadline, int64_t op_deadline_ns,
                       int cancel_fd, wait_watch *out, char *err, size_t errlen)
{
    char b64p[EC_KEY_MAX * 2], b64e[EC_KEY_MAX * 2], b64o[EC_KEY_MAX * 2], end[EC_KEY_MAX];
    char rend[EC_KEY_MAX * 2 + 32] = "";
    ec_b64_encode(pred, strlen(pred), b64p);
    ec_b64_encode(own, strlen(own), b64o);
    if (range) {
        range_end(pred, end, sizeof end);
        ec_b64_encode(end, strlen(end), b64e);
        snprintf(rend, sizeof rend, ",\"range_end\":\"%s\"", b64e);
    }
    /* The watches start at the store's current revision, not at our
     * read's: etcd serves a watch that starts in the past from its history
     * only every 100 ms. Whether anything changed in between is asked
     * once they exist (changed_since). */
    char body[EC_KEY_MAX * 6 + 300];
    snprintf(body, sizeof body,
             "{\"create_request\":{\"key\":\"%s\"%s%s}}"
             "{\"create_request\":{\"key\":\"%s\",\"filters\":[\"NOPUT\"]}}",
             b64p, rend, puts || chain ? "" : ",\"filters\":[\"NOPUT\"]", b64o);
    ec_conn *k = ec_conn_get(ec);
    struct curl_slist *hdrs = curl_slist_append(NULL, "Content-Type: application/json");
    pthread_mutex_lock(&ec->mu);
    if (hdrs && ec->auth)
        hdrs = curl_slist_append(hdrs, ec->auth);
    int e = ec->cur;
    pthread_mutex_unlock(&ec->mu);
    if (!k || !hdrs || ec_conn_setup(ec, k, ec->endpoints[e], "/v3/watch", body, hdrs, ec->connect_ms)) {
        curl_slist_free_all(hdrs);
        ec_conn_put(ec, k);
        snprintf(err, errlen, "out of memory");
        return DLOCK_ENOMEM;
    }
    wait_watch w = {.pred = pred, .own = own, .chain = chain, .read_rev = rev};
    k->body.on_line = ec_wait_line;
    k->body.arg = &w;
    CURLcode res = CURLE_OK;
    enum xfer x = XFER_DONE;
    if (conn_start(k)) {
        for (;;) {
            /* In slices: a watch on a member that stalled must not hold us
             * once the client moved on from it (its keep-alive found out). */
            int64_t slice = dl_deadline_in(500);
            x = conn_pump(k, deadline >= 0 && deadline < slice ? deadline : slice, cancel_fd,
                          &w.stop, &res);
            if (x == XFER_TIMEOUT && (deadline < 0 || dl_now_ns() < deadline)) {
                pthread_mutex_lock(&ec->mu);
                bool moved = ec->cur != e;
                pthread_mutex_unlock(&ec->mu);
                if (!moved)
                    continue;
                x = XFER_DONE;
                w.fired = w.other = true; /* read again, then watch there */
                break;
            }
            if (x != XFER_STOP || w.fired)
                break;
            w.stop = false;
            int64_t until = dl_deadline_in(ec->op_ms);
            if (op_deadline_ns > 0 && until > op_deadline_ns)
                until = op_deadline_ns;
            if (w.at_rev > rev && changed_since(ec, pred, range, puts, own, rev, w.at_rev, until)) {
                w.fired = w.other = true;
                break;
            }
        }
        conn_stop(k);
    }
    curl_slist_free_all(hdrs);
    ec_conn_put(ec, k);
    *out = w;
    if (x == XFER_CANCELED) {
        snprintf(err, errlen, "canceled");
        return DLOCK_ECANCELED;
    }
    if (x == XFER_TIMEOUT) {
        snprintf(err, errlen, "timed out");
        return DLOCK_ETIMEDOUT;
    }
    if (w.fired)
        return 0;
    /* The stream ended or failed: the caller reads the queue again (a
     * server that is gone answers that read with the reason). A short
     * pause keeps a server that closes every watch at once from spinning
     * us. */
    if (w.failed && (strstr(w.why, "permission") || strstr(w.why, "auth"))) {
        snprintf(err, errlen, "etcd: %s", w.why);
        return DLOCK_EPERM;
    }
    struct timespec ts = {0, 20 * 1000000};
    nanosleep(&ts, NULL);
    return 0;
}

/* ---- locks ------------------------------------------------------------------------------ */

static int64_t req_until(dlock_lock *l)
{
    ecclient *ec = ec_of(l->c);
    return dl_deadline_in(dl_op_timeout_ms(l, ec->op_ms));
}

/* A waiter gives up: delete its key now, or later when that fails. */
static void give_up(ecclient *ec, eclock *el, bool unknown)
{
    (void)unknown;
    if (!el->key[0])
        return;
    char err[200];
    int64_t until = dl_deadline_in(ec->op_ms < 1000 ? ec->op_ms : 1000);
    /* Within the caller's bound: a server that does not answer by then
     * has the key deleted by the client's thread. */
    if (el->l->op_deadline_ns > 0 && until > el->l->op_deadline_ns)
        until = el->l->op_deadline_ns;
    if (delete_key(ec, el->key, 0, 0, until, NULL, err, sizeof err) != 0)
        orphan_add(ec, el->key);
    el->key[0] = '\0';
}

/* What a failed request of an acquisition returns: a lost lease is the
 * cluster's doing (unreachable); a server that did not answer by the
 * caller's deadline is that deadline passing (timed out). */
static int acquire_rc(int rc, int64_t deadline)
{
    if (rc == DLOCK_ELOST)
        rc = DLOCK_EUNREACHABLE;
    if (rc == DLOCK_EUNREACHABLE && deadline > 0 && dl_now_ns() >= deadline)
        rc = DLOCK_ETIMEDOUT;
    return rc;
}

/*
 * A waiter carries on through what passes (an election: "leader changed",
 * no leader for a while, a member that went): after a request failed with
 * *rc DLOCK_EUNREACHABLE, pause (the shared jittered backoff from 50 ms,
 * doubling to 800 ms: the waiters of many clients cut by one election do
 * not come back in step) and say to try again, while its deadline allows
 * (else wait it out: false). A try-once acquisition does not. *rc becomes
 * DLOCK_ECANCELED when dlock_cancel comes during the pause. *step_ns
 * starts at 0.
 */
#define EC_RETRY_FIRST_MS 50
#define EC_RETRY_MAX_MS 800
static bool retry_transient(int *rc, int64_t deadline, int cancel_fd, int64_t *step_ns)
{
    if (*rc != DLOCK_EUNREACHABLE || deadline == 0)
        return false;
    if (*step_ns == 0)
        *step_ns = dl_ms_to_ns(EC_RETRY_FIRST_MS);
    int64_t now = dl_now_ns(), pause = dl_backoff_ns(step_ns, dl_ms_to_ns(EC_RETRY_MAX_MS));
    bool last = deadline > 0 && now + pause >= deadline;
    if (last) /* the rest of the wait: then it timed out (acquire_rc) */
        pause = deadline - now > 0 ? deadline - now : 0;
    if (dl_nap_ns(pause, cancel_fd) == DLOCK_ECANCELED) {
        *rc = DLOCK_ECANCELED;
        return false;
    }
    return !last;
}

/* A waiter's state in its queue (dl_queue_acquire's ctx). */
typedef struct ec_waiting {
    dlock_lock *l;
    int64_t deadline;
    int cancel_fd;
    int64_t *retry_step_ns; /* retry_transient's, shared with the queueing */
    ec_entry *q;            /* the queue up to our key, ascending; ours last */
    int n;
    int64_t rev;    /* the revision q was read at */
    int64_t ev_rev; /* the revision of the last wait's event */
    bool fresh;     /* q is the read that queued us */
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
            rc = read_queue(ec, el, z->ev_rev, req_until(l), &z->q, &z->n, &z->rev, err,
                            sizeof err);
        while (rc && retry_transient(&rc, z->deadline, z->cancel_fd, z->retry_step_ns));
        if (rc)
            return dl_lock_err(l, acquire_rc(rc, z->deadline),
                               "lock \"%s\": reading its queue: %s (%s)", l->name, err,
                               ec->redacted);
    }
    z->fresh = false;
    int me = z->n - 1;
    if (me < 0 || strcmp(z->q[me].key, el->key) != 0)
        return dl_lock_err(l, DLOCK_EUNREACHABLE,
                           "lock \"%s\": its key vanished while it waited (the lease "
                           "expired or was revoked, or dlock break) (%s)",
                           l->name, ec->redacted);
    *queue = z->q;
    *stride = sizeof *z->q;
    *i = me;
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
    int rc = wait_change(ec, any ? el->dir : q[b].key, any, puts, chain, el->key, z->rev,
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
            snprintf(key, sizeof key, "%s%s-%016" PRIx64 "-%s", el->dir, el->kind,
                     (uint64_t)lease, l->owner);
            if (unknown && strcmp(key, el->key) != 0) {
                orphan_add(ec, el->key); /* an earlier try's, on a lease since gone */
                unknown = false;
            }
            snprintf(el->key, sizeof el->key, "%s", key);
            el->gen = gen;
            bool sent = false;
            rc = enqueue(ec, l, el, lease, make_ckey, req_until(l), &q, &n, &rev, &sent, err,
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
        if (rc == 0 || !retry_transient(&rc, deadline, cancel_fd, &retry_step_ns))
            break;
    }
    if (rc) {
        if (unknown)
            orphan_add(ec, el->key);
        el->key[0] = '\0';
        return dl_lock_err(l, acquire_rc(rc, deadline), "lock \"%s\": %s: %s (%s)", l->name,
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
    dl_queue_waiter qw = {.read = ec_wait_read, .wait = ec_wait_on, .ctx = &z};
    int result = dl_queue_acquire(l, deadline, &qw, &waited);
    free(z.q);
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
            if (ec->bgm) /* (to join the watch in EC_WATCH_HELD_AFTER_MS) */
                curl_multi_wakeup(ec->bgm);
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
                rc = keepalive(ec, req_until(l), err, sizeof err);
            while (rc && retry_transient(&rc, deadline, cancel_fd, &retry_step_ns));
            if (rc)
                result = dl_lock_err(l, acquire_rc(rc, deadline),
                                     "lock \"%s\": renewing the lease as it was granted: %s (%s)",
                                     l->name, err, ec->redacted);
        }
    }
    if (result) {
        held_drop(ec, el);
        give_up(ec, el, false);
        return result;
    }
    if (waited) {
        /* Off our path, the client's thread writes when we got the lock into
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
        value_format(ec, el->since_ms, NULL, value, sizeof value);
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
            if (ec->bgm)
                curl_multi_wakeup(ec->bgm);
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

static int etcd_release(dlock_lock *l)
{
    ecclient *ec = ec_of(l->c);
    eclock *el = l->bstate;
    held_drop(ec, el);
    pthread_mutex_lock(&ec->mu);
    for (size_t i = 0; i < ec->ntouches; i++)
        if (strcmp(ec->touches[i].key, el->key) == 0) {
            free(ec->touches[i].key);
            free(ec->touches[i].body);
            ec->touches[i--] = ec->touches[--ec->ntouches];
        }
    pthread_mutex_unlock(&ec->mu);
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
            deleted = kv_still_ours(ec, el->dir, el->key, el->rev,
                                    cJSON_GetArrayItem(ec_jarr(j, "kvs"), 0))
                          ? 1 /* (as good as deleted: the revocation takes it) */
                          : 0;
        cJSON_Delete(j);
    } else {
        rc = delete_key(ec, el->key, el->rev, ec_entry_lease(el->dir, el->key), req_until(l),
                        &deleted, err, sizeof err);
    }
    int result = 0;
    if (rc == 0 && deleted == 0)
        result = dl_lock_err(l, DLOCK_ELOST, "lock \"%s\" was lost: its key was already gone, "
                             "or not its own any more",
                             l->name);
    else if (rc) {
        orphan_add(ec, el->key);
        result = dl_lock_err(l, rc,
                             "lock \"%s\": release not confirmed: %s; its key is deleted when "
                             "etcd answers again, or with the lease (%s)",
                             l->name, err, ec->redacted);
    }
    el->key[0] = '\0';
    return result;
}

static void etcd_abandon(dlock_lock *l)
{
    eclock *el = l->bstate;
    if (el->key[0])
        (void)etcd_release(l);
    else
        held_drop(ec_of(l->c), el);
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
    int rc = keepalive(ec, req_until(l), err, sizeof err);
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
    snprintf(buf, len, "%s/%s/", ec->prefix, name);
}

/* The whole queue of name with values: *q ascending, values[] parallel. */
static int read_all(ecclient *ec, const char *dir, ec_entry **q, char (**values)[320], int *n,
                    char *err, size_t errlen)
{
    char b64k[EC_KEY_MAX * 2], b64e[EC_KEY_MAX * 2], end[EC_KEY_MAX], body[EC_KEY_MAX * 4 + 200];
    range_end(dir, end, sizeof end);
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
    *n = ec_queue_of(j, dir, false, q);
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
    return 0;
}

static int etcd_inspect(dlock_client *c, const char *name, dlock_info *info)
{
    ecclient *ec = ec_of(c);
    char dir[EC_KEY_MAX], err[300];
    dir_of(ec, name, dir, sizeof dir);
    ec_entry *q = NULL;
    char(*values)[320] = NULL;
    int n = 0;
    int rc = read_all(ec, dir, &q, &values, &n, err, sizeof err);
    if (rc)
        return dl_client_err(c, rc, "inspect \"%s\": %s (%s)", name, err, ec->redacted);
    int holders = 0, first = -1;
    for (int i = 0; i < n; i++)
        if (dl_queue_blocker(q, sizeof *q, i) == DL_Q_HOLDS) {
            holders++;
            if (first < 0)
                first = i;
        }
    info->held = holders > 0;
    info->holders = holders;
    info->waiters = n - holders;
    info->held_ms = -1;
    info->lease_ms = -1;
    if (first >= 0) {
        info->token = (uint64_t)q[first].rev;
        int64_t since;
        ec_split_value(values[first], info->holder, sizeof info->holder, &since);
        if (since >= 0) {
            int64_t ms = dl_realtime_ms() - since;
            info->held_ms = ms < 0 ? 0 : ms; /* (another host's clock may be ahead) */
        }
        char body[64];
        snprintf(body, sizeof body, "{\"ID\":\"%" PRId64 "\"}", ec_entry_lease(dir, q[first].key));
        cJSON *j = NULL;
        if (ec_post(ec, "/v3/lease/timetolive", body, -1, -1, &j, NULL, err, sizeof err) == 0) {
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
    char dir[EC_KEY_MAX], err[300];
    dir_of(ec, name, dir, sizeof dir);
    ec_entry *q = NULL;
    char(*values)[320] = NULL;
    int n = 0;
    int rc = read_all(ec, dir, &q, &values, &n, err, sizeof err);
    if (rc)
        return dl_client_err(c, rc, "break \"%s\": %s (%s)", name, err, ec->redacted);
    int broken = 0, result = 0;
    for (int i = 0; i < n && result == 0; i++) {
        if (dl_queue_blocker(q, sizeof *q, i) != DL_Q_HOLDS)
            continue;
        int64_t deleted = 0;
        rc = delete_key(ec, q[i].key, 0, 0, -1, &deleted, err, sizeof err);
        if (rc) {
            result = dl_client_err(c, rc, "break \"%s\": %s (%s)", name, err, ec->redacted);
            break;
        }
        if (!deleted)
            continue;
        if (broken++ == 0) {
            info->token = (uint64_t)q[i].rev;
            ec_split_value(values[i], info->holder, sizeof info->holder, NULL);
        }
        /* Tell the holder at once: it watches its client key. A put bound
         * to its lease goes with it (and fails if the lease is gone). */
        char ckey[EC_KEY_MAX], b64[EC_KEY_MAX * 2], b64v[64], body[EC_KEY_MAX * 2 + 200];
        int64_t lease = ec_entry_lease(dir, q[i].key);
        ckey_of(ec, lease, ckey, sizeof ckey);
        ec_b64_encode(ckey, strlen(ckey), b64);
        ec_b64_encode("broken", 6, b64v);
        snprintf(body, sizeof body, "{\"key\":\"%s\",\"value\":\"%s\",\"lease\":\"%" PRId64 "\"}",
                 b64, b64v, lease);
        (void)ec_post(ec, "/v3/kv/put", body, -1, -1, NULL, NULL, err, sizeof err);
    }
    free(q);
    free(values);
    if (result)
        return result;
    info->held = broken > 0;
    info->holders = broken;
    if (broken == 0)
        return dl_client_err(c, DLOCK_ENOTHELD, "lock \"%s\" is not held: nothing to break",
                             name);
    return 0;
}

static int etcd_set_value(dlock_lock *l, const char *value)
{
    ecclient *ec = ec_of(l->c);
    eclock *el = l->bstate;
    char data[sizeof ec->self + 300], b64k[EC_KEY_MAX * 2], b64v[sizeof data * 2];
    char body[sizeof b64k * 2 + sizeof b64v + 300], err[300];
    value_format(ec, el->since_ms, value, data, sizeof data);
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

static int etcd_get_value(dlock_client *c, const char *name, char *buf, size_t len)
{
    ecclient *ec = ec_of(c);
    char dir[EC_KEY_MAX], err[300];
    dir_of(ec, name, dir, sizeof dir);
    ec_entry *q = NULL;
    char(*values)[320] = NULL;
    int n = 0;
    int rc = read_all(ec, dir, &q, &values, &n, err, sizeof err);
    if (rc)
        return dl_client_err(c, rc, "leader of \"%s\": %s (%s)", name, err, ec->redacted);
    int first = -1;
    for (int i = 0; i < n && first < 0; i++)
        if (dl_queue_blocker(q, sizeof *q, i) == DL_Q_HOLDS)
            first = i;
    const char *value = first >= 0 ? ec_split_value(values[first], NULL, 0, NULL) : NULL;
    if (value)
        snprintf(buf, len, "%s", value);
    free(q);
    free(values);
    if (first < 0)
        return dl_client_err(c, DLOCK_ENOENT, "no leader for \"%s\"", name);
    return value ? 0 : dl_client_err(c, DLOCK_ENOENT, "no leader value for \"%s\" yet", name);
}

/* Every name ever locked has a marker PREFIX/.names/NAME (see enqueue):
 * the walk reads them in pages of 1000, in key order. */
static int etcd_list(dlock_client *c, const char *prefix, dlock_list_fn fn, void *arg)
{
    ecclient *ec = ec_of(c);
    char base[EC_KEY_MAX], from[EC_KEY_MAX], end[EC_KEY_MAX], err[300];
    int bl = snprintf(base, sizeof base, "%s/.names/", ec->prefix);
    int fl = snprintf(from, sizeof from, "%s%s", base, prefix);
    range_end(base, end, sizeof end);
    int stop = 0;
    for (;;) {
        char b64k[EC_KEY_MAX * 2], b64e[EC_KEY_MAX * 2], body[EC_KEY_MAX * 4 + 200];
        ec_b64_encode(from, (size_t)fl, b64k);
        ec_b64_encode(end, strlen(end), b64e);
        snprintf(body, sizeof body,
                 "{\"key\":\"%s\",\"range_end\":\"%s\",\"keys_only\":true,\"limit\":\"1000\"}",
                 b64k, b64e);
        cJSON *j = NULL;
        int rc = ec_post(ec, "/v3/kv/range", body, -1, -1, &j, NULL, err, sizeof err);
        if (rc)
            return dl_client_err(c, rc, "list: %s (%s)", err, ec->redacted);
        const cJSON *kv;
        bool past = false;
        int seen = 0;
        cJSON_ArrayForEach(kv, ec_jarr(j, "kvs"))
        {
            char key[EC_KEY_MAX];
            if (!ec_kv_key(kv, key, sizeof key) || strncmp(key, base, (size_t)bl) != 0)
                continue;
            seen++;
            const char *name = key + bl;
            if (strncmp(name, prefix, strlen(prefix)) != 0) {
                past = true; /* keys are in order: no later one has the prefix */
                break;
            }
            /* the next page starts just after this key */
            fl = snprintf(from, sizeof from, "%s", key) + 1;
            if (dlock_name_valid(name, NULL, 0) == 0 && (stop = fn(name, arg)) != 0)
                break;
        }
        bool more = cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(j, "more"));
        cJSON_Delete(j);
        if (stop || past || !more || seen == 0 || fl >= (int)sizeof from)
            break;
    }
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
        held_drop(ec_of(l->c), l->bstate);
    free(l->bstate);
    l->bstate = NULL;
}

static void ecclient_free(ecclient *ec)
{
    pthread_mutex_lock(&ec->mu);
    ec->stopping = true;
    if (ec->bgm)
        curl_multi_wakeup(ec->bgm);
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
    while (ec->idle) {
        ec_conn *k = ec->idle;
        ec->idle = k->next;
        conn_free(k);
    }
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
    pthread_once(&curl_once, lc_load);
    if (lc_error[0])
        return dl_client_err(c, DLOCK_ENOTSUP, "%s: %s", u->redacted, lc_error);
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
    ecclient *ec = calloc(1, sizeof *ec);
    if (!ec)
        return dl_client_err(c, DLOCK_ENOMEM, "out of memory");
    pthread_mutex_init(&ec->mu, NULL);
    pthread_condattr_t ca; /* (monotonic: lease_ensure's wait has a deadline) */
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    pthread_cond_init(&ec->cv, &ca);
    dl_teller_init(&ec->teller);
    pthread_condattr_destroy(&ca);
    ec->stop_fd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
    if (ec->stop_fd < 0) {
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
    int64_t until = dl_deadline_in(ec->connect_ms);
    if (ec->user)
        rc = authenticate(ec, until, err, sizeof err);
    if (rc == 0) {
        /* The lease now: a wrong URL fails here, not at the first lock, and
         * the request is one a lock needs anyway. */
        int64_t lease;
        uint64_t gen;
        bool make_ckey;
        rc = ec_lease_ensure(ec, until, &lease, &gen, &make_ckey, err, sizeof err);
    }
    if (rc) {
        c->bstate = NULL;
        ecclient_free(ec);
        return dl_client_err(c, rc, "%s (%s)", err, u->redacted);
    }
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
    if (ec->bgm)
        curl_multi_wakeup(ec->bgm);
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
    .release = etcd_release,
    .renew = etcd_renew,
    .abandon = etcd_abandon,
    .inspect = etcd_inspect,
    .list = etcd_list,
    .set_value = etcd_set_value,
    .get_value = etcd_get_value,
    .break_lock = etcd_break,
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
