/* SPDX-License-Identifier: MIT */
/*
 * client.c — the etcd backend's transport and what a client keeps up: the
 * gateway connections and requests, the lease and its keep-alive, losses,
 * the client's thread (keep-alives, watches on held keys, late deletes),
 * and a name's queue (queueing, reading it, watching it). The lock
 * operations that use them are in etcd.c (see ec_int.h).
 */
#include "ec_int.h"

#include <errno.h>
#include <inttypes.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <unistd.h>

/* ---- the client -------------------------------------------------------------------- */

ecclient *ec_of(dlock_client *c)
{
    return c->bstate;
}

/* The end of the key range of every key starting with prefix p (p ends in
 * '/', which becomes '0'). */
void ec_range_end(const char *p, char *out, size_t len)
{
    snprintf(out, len, "%s", p);
    size_t n = strlen(out);
    if (n)
        out[n - 1] = (char)(out[n - 1] + 1);
}

/* Wake the client's thread (its waits poll wake_fd). */
void ec_wake(ecclient *ec)
{
    uint64_t one = 1;
    if (ec->wake_fd >= 0 && write(ec->wake_fd, &one, sizeof one) < 0) {
        /* (a full counter wakes it already) */
    }
}

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
        int64_t try_ms = (try_until - now) / 1000000;
        int cms = ec->connect_ms < try_ms ? ec->connect_ms : (int)try_ms;
        const char *base = only ? only : ec->endpoints[e];
        if (ec_conn_setup(ec, k, base, path, body, cms)) {
            result = DLOCK_ENOMEM;
            snprintf(err, errlen, "out of memory");
            break;
        }
        k->body.len = 0;
        ec_xres res;
        enum xfer x = ec_conn_run(k, try_until, cancel_fd, NULL, &res);
        if (x == XFER_CANCELED) {
            if (sent)
                *sent = true;
            snprintf(err, errlen, "canceled");
            result = DLOCK_ECANCELED;
            break;
        }
        if (x == XFER_TIMEOUT || res.failed) {
            if (sent && !(x == XFER_DONE && res.unsent))
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
                snprintf(err, errlen, "%s: %s", base, res.why);
            result = x == XFER_TIMEOUT ? DLOCK_EUNREACHABLE : res.code;
            if (result != DLOCK_EUNREACHABLE)
                break;
            if (!only)
                e = endpoint_failed(ec, e);
            continue;
        }
        if (sent)
            *sent = true;
        long status = ec_conn_status(k);
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
                int arc = ec_authenticate(ec, until_ns, aerr, sizeof aerr);
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
int ec_authenticate(ecclient *ec, int64_t until_ns, char *err, size_t errlen)
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
void ec_value_format(const ecclient *ec, int64_t since_ms, const char *leader, char *buf,
                     size_t len)
{
    snprintf(buf, len, "%" PRId64 " %s\n%s", since_ms, ec->self, leader ? leader : "");
}

/* Where a layout's name markers live under PREFIX/. */
const char *ec_names_dir(const ecclient *ec)
{
    return ec->etcdctl ? ".etcdctl-names/" : ".names/";
}

/* dlock's own layout found key under dir, which it did not write: another
 * program uses the name's keys, and ignoring them would let both hold at
 * once. Say what it is and what would speak it. DLOCK_ECONFLICT. */
int ec_foreign(const ecclient *ec, const char *dir, const char *key, char *err, size_t errlen)
{
    int dl = (int)strlen(dir) - 1; /* the peer's name: dir without its '/' */
    if (ec_mutex_shaped(dir, key))
        snprintf(err, errlen,
                 "key %s is not dlock's (dlock writes %sKIND-LEASE-OWNER): it has the shape of "
                 "etcdctl lock's and Go's concurrency.Mutex keys (NAME/<lease in hex>); to lock "
                 "beside them use layout=etcdctl and the name \"%.*s\"",
                 key, dir, dl, dir);
    else
        snprintf(err, errlen,
                 "key %s is not dlock's (dlock writes %sKIND-LEASE-OWNER): another program "
                 "uses this name's keys; dlock will not ignore them (layout=etcdctl speaks "
                 "etcdctl lock's and concurrency.Mutex's keys: name \"%.*s\")",
                 key, dir, dl, dir);
    (void)ec;
    return DLOCK_ECONFLICT;
}

/* ---- the lease ------------------------------------------------------------------- */

static void *client_thread(void *arg);

void ec_ckey_of(const ecclient *ec, int64_t lease, char *buf, size_t len)
{
    snprintf(buf, len, "%s/.clients/%016" PRIx64, ec->prefix, (uint64_t)lease);
}

/* Keep-alive of the current lease: 0 (confirmed_ns moved), DLOCK_ELOST
 * when the server no longer knows the lease, or a transport error. */
int ec_keepalive(ecclient *ec, int64_t until_ns, char *err, size_t errlen)
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

/* A lease of its own for something that outlives the client's (a claim's
 * record, a lock's minimum): ttl_ms in whole seconds, rounded up; the
 * cluster may grant more (its minimum TTL, 2 s on default settings). */
int ec_lease_grant(ecclient *ec, int64_t ttl_ms, int64_t until_ns, int64_t *lease, char *err,
                   size_t errlen)
{
    char body[64];
    snprintf(body, sizeof body, "{\"TTL\":\"%" PRId64 "\"}", (ttl_ms + 999) / 1000);
    cJSON *j = NULL;
    int rc = ec_post(ec, "/v3/lease/grant", body, until_ns, -1, &j, NULL, err, errlen);
    *lease = rc ? 0 : ec_jint(j, "ID", 0);
    cJSON_Delete(j);
    if (rc == 0 && *lease <= 0) {
        snprintf(err, errlen, "etcd granted no lease");
        rc = DLOCK_EPROTO;
    }
    return rc;
}

/* A lease no key needs any more, revoked; best effort: it ends by its TTL
 * anyway. */
void ec_lease_drop(ecclient *ec, int64_t lease)
{
    if (lease <= 0)
        return;
    char body[64], err[200];
    snprintf(body, sizeof body, "{\"ID\":\"%" PRId64 "\"}", lease);
    (void)ec_post(ec, "/v3/lease/revoke", body, -1, -1, NULL, NULL, err, sizeof err);
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
        } else {
            ec_wake(ec);
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
 * operator's put has neither our lease nor our name; in the etcdctl layout
 * the value is empty or a leader's, and the lease says it)? NULL: it is
 * gone. */
bool ec_kv_still_ours(const ecclient *ec, int64_t lease, int64_t rev, const cJSON *kv)
{
    if (!kv || ec_jint(kv, "create_revision", 0) != rev || ec_jint(kv, "lease", 0) != lease)
        return false;
    if (ec->etcdctl)
        return true;
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
        char key[EC_KEY_MAX];
        int64_t rev, lease;
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
            refs[n].lease = el->lease;
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
        bool ours = ec_kv_still_ours(ec, refs[i].lease, refs[i].rev, kv);
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
void ec_held_drop(ecclient *ec, eclock *el)
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

void ec_orphan_add(ecclient *ec, const char *key)
{
    char *k = strdup(key);
    pthread_mutex_lock(&ec->mu);
    char **o = k ? realloc(ec->orphans, sizeof *o * (ec->norphans + 1)) : NULL;
    if (o) {
        ec->orphans = o;
        o[ec->norphans++] = k;
        k = NULL;
        if (ec_thread_of != ec) /* its thread deletes it now */
            ec_wake(ec);
    }
    pthread_mutex_unlock(&ec->mu);
    free(k); /* (out of memory: the lease's end deletes it) */
}

/* Delete key; only while it was made at rev and is bound to lease (rev
 * 0: whatever it is now): a key deleted and made anew, or overwritten from
 * outside, is not ours to delete. *deleted (may be NULL): how many went. */
int ec_delete_key(ecclient *ec, const char *key, int64_t rev, int64_t lease,
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
        if (ec_delete_key(ec, k, 0, 0, -1, NULL, err, sizeof err) != 0) {
            ec_orphan_add(ec, k);
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
    bool news; /* any of the above, or gone keys: the thread's pump stops */
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
    int64_t rev = 0, mod = ec_jint(kv, "mod_revision", 0);
    pthread_mutex_lock(&ec->mu);
    /* Only events after the key was made are about it: the etcdctl
     * layout's key NAME/<lease> is made anew by the client's next lock of
     * the name, and a stream may still bring the last one's deletion. */
    for (eclock *el = ec->held; el; el = el->next_held)
        if (!el->lost && strcmp(el->key, key) == 0 && mod > el->rev &&
            (del || !ec_kv_still_ours(ec, el->lease, el->rev, kv))) {
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
        w->failed = w->news = true; /* an error line, or not JSON */
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
    w->news = w->deleted || w->touched || w->failed || w->ngone > 0;
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
    ec_ckey_of(ec, lease, key, sizeof key);
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
    ec_ckey_of(ec, lease, key, sizeof key);
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
    ec_conn *wk = NULL; /* the watch's connection */
    ck_watch w = {.ec = ec};
    char ckey[EC_KEY_MAX] = "";
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
            int rc = ec_keepalive(ec, -1, err, sizeof err);
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
            ec_conn_stop(wk);
            ec_conn_put(ec, wk);
            wk = NULL;
            if (rebuild)
                retry_watch_ns = 0;
        }
        if (!wk && live && have_ckey && now >= retry_watch_ns && now >= watch_from_ns) {
            wk = ec_conn_get(ec);
            ec_ckey_of(ec, lease, ckey, sizeof ckey);
            pthread_mutex_lock(&ec->mu);
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
            ec_xres res;
            if (wk && body &&
                ec_conn_setup(ec, wk, ec->endpoints[e], "/v3/watch", body, ec->connect_ms) == 0) {
                wk->body.on_line = ck_line;
                wk->body.arg = &w;
                if (!ec_conn_start(wk, &res)) {
                    ec_conn_put(ec, wk);
                    wk = NULL;
                }
            } else {
                ec_conn_put(ec, wk);
                wk = NULL;
            }
            retry_watch_ns = now + dl_ms_to_ns(200);
        }
        /* Wait for the watch's news, the next due time or a wake-up. */
        int64_t wait_ns = live ? next_ka - dl_now_ns() : dl_ms_to_ns(1000);
        if (next_touch != INT64_MAX && next_touch - dl_now_ns() < wait_ns)
            wait_ns = next_touch - dl_now_ns();
        if (next_join != INT64_MAX && next_join - dl_now_ns() < wait_ns)
            wait_ns = next_join - dl_now_ns();
        if (wait_ns > dl_ms_to_ns(100) && (!wk && live))
            wait_ns = dl_ms_to_ns(100);
        if (wait_ns < 0)
            wait_ns = 0;
        enum xfer x = XFER_TIMEOUT;
        if (wk) {
            ec_xres res;
            w.news = false;
            x = ec_conn_pump(wk, dl_now_ns() + wait_ns, ec->wake_fd, &w.news, &res);
            if (x == XFER_DONE)
                w.failed = true;
        } else {
            struct pollfd p = {.fd = ec->wake_fd, .events = POLLIN};
            if (poll(&p, 1, (int)(wait_ns / 1000000) + 1) == 1)
                x = XFER_CANCELED;
        }
        if (x == XFER_CANCELED) {
            uint64_t woken;
            if (read(ec->wake_fd, &woken, sizeof woken) < 0) {
                /* (another read took it) */
            }
        }
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
                ec_conn_stop(wk);
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
    }
    if (wk) {
        ec_conn_stop(wk);
        ec_conn_put(ec, wk);
    }
    free(w.gone);
    free(body);
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
int ec_read_queue(ecclient *ec, eclock *el, int64_t seen, int64_t until_ns, ec_entry **q,
                  int *n, int64_t *rev, char *err, size_t errlen)
{
    char b64k[EC_KEY_MAX * 2], b64e[EC_KEY_MAX * 2], end[EC_KEY_MAX], body[EC_KEY_MAX * 4 + 200];
    ec_range_end(el->dir, end, sizeof end);
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
    char foreign[EC_KEY_MAX];
    *n = ec_queue_read(j, el->dir, x, ec->etcdctl, q, foreign, sizeof foreign);
    /* Counted over every key returned, ours or not: two of at most three
     * means nothing at all is before the predecessor. */
    el->pred_first = x && *n == 2 && cJSON_GetArraySize(ec_jarr(j, "kvs")) == 2;
    cJSON_Delete(j);
    if (*n < 0) {
        snprintf(err, errlen, "out of memory");
        return DLOCK_ENOMEM;
    }
    if (foreign[0]) {
        free(*q);
        *q = NULL;
        return ec_foreign(ec, el->dir, foreign, err, errlen);
    }
    return 0;
}

/*
 * Queue el: one transaction puts its key (only if absent: a retried
 * request finds it) and, on the first use of a lease, the client key, then
 * reads the queue as it is with our key in it.
 */
int ec_enqueue(ecclient *ec, dlock_lock *l, eclock *el, int64_t lease, bool make_ckey,
               int64_t until_ns, ec_entry **q, int *n, int64_t *rev, bool *unknown,
               char *err, size_t errlen)
{
    /* (etcdctl: empty, as Mutex's; a campaign's value, as Election.Campaign
     * writes it with the key, so the leader is never seen without it) */
    char value[sizeof ec->self + DL_LEADER_MAX + 32] = "";
    el->since_ms = dl_realtime_ms();
    if (!ec->etcdctl)
        ec_value_format(ec, el->since_ms, NULL, value, sizeof value);
    else if (l->campaign_value)
        snprintf(value, sizeof value, "%s", l->campaign_value);
    char b64k[EC_KEY_MAX * 2], b64v[sizeof value * 2], b64d[EC_KEY_MAX * 2], b64e[EC_KEY_MAX * 2];
    char end[EC_KEY_MAX], ckey[EC_KEY_MAX], b64ck[EC_KEY_MAX * 2], b64s[sizeof ec->self * 2];
    ec_b64_encode(el->key, strlen(el->key), b64k);
    ec_b64_encode(value, strlen(value), b64v);
    ec_b64_encode(el->dir, strlen(el->dir), b64d);
    ec_range_end(el->dir, end, sizeof end);
    ec_b64_encode(end, strlen(end), b64e);
    ec_ckey_of(ec, lease, ckey, sizeof ckey);
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
    /* The name's marker (PREFIX/.names/NAME, for dlock list; the etcdctl
     * layout's names, other locks than dlock's of the same spelling, in
     * PREFIX/.etcdctl-names/), put only when absent: a nested transaction
     * costs no write when it exists. */
    char marker[EC_KEY_MAX], b64m[EC_KEY_MAX * 2];
    snprintf(marker, sizeof marker, "%s/%s%s", ec->prefix, ec_names_dir(ec), l->name);
    ec_b64_encode(marker, strlen(marker), b64m);
    /* Room for every part (a leader's value may be long), and the JSON around them. */
    char body[sizeof b64k * 3 + sizeof b64v + sizeof range + sizeof cput + sizeof b64m * 2 + 512];
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
    /* (a key found there already came from this body, retried) */
    l->value_published = ec->etcdctl && l->campaign_value;
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
        return ec_read_queue(ec, el, 0, until_ns, q, n, rev, err, errlen);
    }
    el->rev = hrev;
    const cJSON *r = ec_jobj(cJSON_GetArrayItem(resp, 1), "response_range");
    *rev = hrev;
    char foreign[EC_KEY_MAX] = "";
    *n = r ? ec_queue_read(r, el->dir, x, ec->etcdctl, q, foreign, sizeof foreign) : -2;
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
        ec_wake(ec);
        pthread_mutex_unlock(&ec->mu);
    }
    if (foreign[0]) { /* (our key is in: the caller gives up) */
        free(*q);
        *q = NULL;
        return ec_foreign(ec, el->dir, foreign, err, errlen);
    }
    return 0;
}

/* Did the keys a waiter watches change between revision rev (its read) and
 * at_rev (its watches' start): pred gone (or, with puts, written; or made
 * anew: a key other than the one of create revision pred_rev that the read
 * found — the etcdctl layout's key NAME/<lease> comes back with its
 * client's next lock, behind us), own key gone? A range watch (any key of
 * the name) is taken as changed. The read may be served from what the
 * member has applied, as long as that reaches at_rev: whatever happens
 * later, the watches see. */
bool ec_changed_since(ecclient *ec, const char *pred, int64_t pred_rev, bool range, bool puts,
                      const char *own, int64_t rev, int64_t at_rev, int64_t until_ns)
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
    bool changed = !p || !o || ec_jint(p, "create_revision", 0) != pred_rev ||
                   (puts && ec_jint(p, "mod_revision", 0) > rev);
    cJSON_Delete(j);
    return changed;
}

int ec_wait_change(ecclient *ec, const char *pred, int64_t pred_rev, bool range, bool puts,
                   bool chain, const char *own, int64_t rev, int64_t deadline,
                   int64_t op_deadline_ns, int cancel_fd, wait_watch *out, char *err,
                   size_t errlen)
{
    char b64p[EC_KEY_MAX * 2], b64e[EC_KEY_MAX * 2], b64o[EC_KEY_MAX * 2], end[EC_KEY_MAX];
    char rend[EC_KEY_MAX * 2 + 32] = "";
    ec_b64_encode(pred, strlen(pred), b64p);
    ec_b64_encode(own, strlen(own), b64o);
    if (range) {
        ec_range_end(pred, end, sizeof end);
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
    pthread_mutex_lock(&ec->mu);
    int e = ec->cur;
    pthread_mutex_unlock(&ec->mu);
    if (!k || ec_conn_setup(ec, k, ec->endpoints[e], "/v3/watch", body, ec->connect_ms)) {
        ec_conn_put(ec, k);
        snprintf(err, errlen, "out of memory");
        return DLOCK_ENOMEM;
    }
    wait_watch w = {.pred = pred, .own = own, .chain = chain, .read_rev = rev};
    k->body.on_line = ec_wait_line;
    k->body.arg = &w;
    ec_xres res;
    enum xfer x = XFER_DONE;
    if (ec_conn_start(k, &res)) {
        for (;;) {
            /* In slices: a watch on a member that stalled must not hold us
             * once the client moved on from it (its keep-alive found out). */
            int64_t slice = dl_deadline_in(500);
            x = ec_conn_pump(k, deadline >= 0 && deadline < slice ? deadline : slice, cancel_fd,
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
            if (w.at_rev > rev && ec_changed_since(ec, pred, pred_rev, range, puts, own, rev, w.at_rev, until)) {
                w.fired = w.other = true;
                break;
            }
        }
        ec_conn_stop(k);
    }
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
