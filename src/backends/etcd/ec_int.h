/* SPDX-License-Identifier: MIT */
/*
 * ec_int.h — the etcd backend's libcurl table, client, connections and
 * requests, for its files (conn.c, the connections; client.c, the
 * requests, the lease and the queue; etcd.c, the lock operations; json.c
 * and reply.c, what the gateway sends; tools.c, the harness's operations).
 */
#ifndef DLOCK_EC_INT_H
#define DLOCK_EC_INT_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <cjson/cJSON.h>
/* libcurl's calls go through pointers (below): no type-checking macros. */
#define CURL_DISABLE_TYPECHECK
#include <curl/curl.h>

#include "internal.h"
#include "support/support.h"
#include "ec_json.h"

/* libcurl's functions we call, one list: the table's fields and the names
 * lc_load looks up (curl_ + name). */
#define EC_CURL_FUNCS(X)                                                                     \
    X(global_init) X(easy_init) X(easy_cleanup) X(easy_reset) X(easy_setopt)                 \
    X(easy_getinfo) X(easy_strerror) X(multi_init) X(multi_cleanup) X(multi_add_handle)      \
    X(multi_remove_handle) X(multi_perform) X(multi_info_read) X(multi_poll)                 \
    X(multi_wakeup) X(slist_append) X(slist_free_all)

typedef struct ec_curl_api {
#define EC_CURL_FIELD(f) __typeof__(curl_##f) *f;
    EC_CURL_FUNCS(EC_CURL_FIELD)
#undef EC_CURL_FIELD
} ec_curl_api;
/* libcurl's functions, once loaded (lc_load) */
extern ec_curl_api ec_curl;

#define curl_global_init ec_curl.global_init
#define curl_easy_init ec_curl.easy_init
#define curl_easy_cleanup ec_curl.easy_cleanup
#define curl_easy_reset ec_curl.easy_reset
#undef curl_easy_setopt /* curl.h's pass-through macros */
#undef curl_easy_getinfo
#define curl_easy_setopt ec_curl.easy_setopt
#define curl_easy_getinfo ec_curl.easy_getinfo
#define curl_easy_strerror ec_curl.easy_strerror
#define curl_multi_init ec_curl.multi_init
#define curl_multi_cleanup ec_curl.multi_cleanup
#define curl_multi_add_handle ec_curl.multi_add_handle
#define curl_multi_remove_handle ec_curl.multi_remove_handle
#define curl_multi_perform ec_curl.multi_perform
#define curl_multi_info_read ec_curl.multi_info_read
#define curl_multi_poll ec_curl.multi_poll
#define curl_multi_wakeup ec_curl.multi_wakeup
#define curl_slist_append ec_curl.slist_append
#define curl_slist_free_all ec_curl.slist_free_all

struct addrinfo;

/* How a transfer that ended (XFER_DONE) went. */
typedef struct ec_xres {
    bool failed;  /* no reply */
    bool unsent;  /* ... and the request reached no server for sure */
    int code;     /* DLOCK_EUNREACHABLE, DLOCK_ENOMEM, DLOCK_EURL */
    char why[160];
} ec_xres;

/* One HTTP connection, kept alive between requests: our own socket for
 * http:// (raw), else a libcurl easy handle in a multi handle of its own,
 * so that every transfer can be bounded by a deadline and a cancel
 * descriptor (conn.c). */
typedef struct ec_conn {
    struct ec_conn *next;
    bool raw;
    int connect_ms;
    /* https:// */
    CURL *easy;
    CURLM *multi;
    struct curl_slist *hdrs;
    /* http:// */
    int fd;            /* -1: not connected */
    char at[400];      /* the endpoint it is (or is to be) connected to ("http://h:p") */
    bool reusable;     /* the last reply ended cleanly and the server keeps it */
    bool reused, got_reply, retried;
    int phase;
    int64_t connect_until_ns;
    struct addrinfo *ai, *ai_next;
    char *req;
    size_t req_len, req_cap, req_off;
    ec_reply reply;
    ec_xres xres; /* how the transfer went, once it ended */
    ec_body body; /* reply body (unary) or unparsed rest of a stream */
} ec_conn;


typedef struct eclock eclock;

/* A write the client's thread sends at `due` unless the lock is released
 * first: the /v3/kv/txn body that stamps key's value with its grant time. */
typedef struct ec_touch {
    char *key, *body;
    int64_t due_ns;
} ec_touch;

typedef struct ecclient {
    pthread_mutex_t mu;
    pthread_cond_t cv; /* a grant finishing */
    char **endpoints;  /* "http://h:p" */
    int nendpoints;
    int cur; /* the endpoint that answered last */
    bool tls;
    char *cacert, *cert, *key;
    char *user, *password;
    char *auth; /* "Authorization: TOKEN" header, or NULL */
    const char *redacted;
    int connect_ms, op_ms;
    int ttl_s;
    char prefix[128]; /* "dlock" */
    /* layout=etcdctl: a name is the key prefix of etcdctl lock and Go's
     * concurrency.Mutex/Election, its keys NAME/<lease in hex> (empty
     * value; a leader's value as Election's), any key under NAME/ in the
     * queue; else dlock's own (see etcd.c). */
    bool etcdctl;
    /* etcdctl: the dirs whose bare key NAME/<lease> one of this client's
     * locks has (its others on the name add -OWNER: one lease, one key). */
    char **bare;
    size_t nbare;
    ec_conn *idle;

    /* the lease */
    int64_t lease;   /* 0: none yet */
    uint64_t gen;    /* bumped with every new lease */
    bool lease_gone; /* revoked or expired: the next acquisition grants anew */
    bool granting;
    bool ckey_made;       /* PREFIX/.clients/LEASE exists */
    int64_t ckey_ns;      /* since when */
    int64_t confirmed_ns; /* when the last keep-alive the server answered was sent */
    int64_t next_ka_ns;
    int64_t ckey_rev; /* the client key's last revision seen */

    /* the client's thread: keep-alive, the watch on the client key, orphans */
    pthread_t thread;
    bool thread_started, stopping;
    int wake_fd; /* written to wake the thread (ec_wake) */
    eclock *held;
    bool verify;        /* a break touched the client key: look at the held keys */
    dl_teller teller;   /* of losses (lease gone, key deleted) */
    int stop_fd;        /* readable once the client closes: ends the thread's requests */
    int64_t timeout_ns; /* when a request last went unanswered (0: never) */
    char **orphans;     /* keys to delete (a waiter gave up while its fate was unknown) */
    size_t norphans;
    ec_touch *touches; /* a holder that waited says when it got the lock */
    size_t ntouches;
    char self[200];
} ecclient;

enum xfer { XFER_DONE, XFER_TIMEOUT, XFER_CANCELED, XFER_STOP };

ecclient *ec_of(dlock_client *c);
/* Wake the client's thread (a lease, a held key, an orphan, closing). */
void ec_wake(ecclient *ec);

/* ---- conn.c: connections ---- */
ec_conn *ec_conn_get(ecclient *ec);
void ec_conn_put(ecclient *ec, ec_conn *k);
void ec_conn_free(ec_conn *k);
/* Set k up to POST body (kept by the caller until the transfer ends) to
 * path on the endpoint at base ("http://h:p"), with the client's headers. */
int ec_conn_setup(ecclient *ec, ec_conn *k, const char *base, const char *path, const char *body,
                  int connect_ms);
/* A transfer is started, pumped (perhaps several times: a stream) until it
 * ends (XFER_DONE, *res says how), until_ns passes, cancel_fd becomes
 * readable or *stop turns true, and stopped; ec_conn_run does all three. */
bool ec_conn_start(ec_conn *k, ec_xres *res);
enum xfer ec_conn_pump(ec_conn *k, int64_t until_ns, int cancel_fd, const bool *stop,
                       ec_xres *res);
void ec_conn_stop(ec_conn *k);
enum xfer ec_conn_run(ec_conn *k, int64_t until_ns, int cancel_fd, const bool *stop, ec_xres *res);
/* The reply's HTTP status. */
long ec_conn_status(ec_conn *k);

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
int ec_post_to(ecclient *ec, const char *only, const char *path, const char *body, int64_t until_ns,
               int cancel_fd, cJSON **out, bool *sent, char *err, size_t errlen);
int ec_post(ecclient *ec, const char *path, const char *body, int64_t until_ns, int cancel_fd,
            cJSON **out, bool *sent, char *err, size_t errlen);
/*
 * The client's lease, granted when there is none (first use, or after it
 * was lost): *lease, *gen and whether the client key still has to be made
 * (the caller puts it in its first transaction).
 */
int ec_lease_ensure(ecclient *ec, int64_t until_ns, int64_t *lease, uint64_t *gen, bool *make_ckey,
                    char *err, size_t errlen);

/* A lease of its own (whole seconds of ttl_ms, rounded up), and its
 * revocation (best effort). */
int ec_lease_grant(ecclient *ec, int64_t ttl_ms, int64_t until_ns, int64_t *lease, char *err,
                   size_t errlen);
void ec_lease_drop(ecclient *ec, int64_t lease);

/* Claims' records, in both layouts' operations (records.c). */
int etcd_record_get(dlock_client *c, const char *key, char **val, size_t *len, uint64_t *ver);
int etcd_record_put(dlock_client *c, const char *key, const char *val, size_t len,
                    int64_t ttl_ms, uint64_t ver);
int etcd_record_del(dlock_client *c, const char *key);
#define EC_RECORD_OPS                                                                        \
    .record_get = etcd_record_get, .record_put = etcd_record_put,                            \
    .record_del = etcd_record_del

/* A lock's backend state. */
struct eclock {
    eclock *next_held;
    dlock_lock *l;
    bool listed;
    char dir[300];         /* PREFIX/NAME/ (prefix < 64, name <= 200) */
    char key[EC_KEY_MAX];  /* our key while queued or holding, "" none */
    char kind[16];
    int64_t rev;  /* its create revision */
    int64_t grant_rev; /* the store's revision when we learnt it was ours */
    uint64_t gen; /* the lease it is bound to */
    int64_t lease;    /* ... by its id */
    bool bare;        /* etcdctl: it has the dir's bare key (ecclient.bare) */
    int64_t since_ms; /* wall clock when it was granted (queued, until then) */
    bool pred_first;  /* exclusive: the last read found only its predecessor before it */
    bool lost;
    /* The client thread's watch on the held key (guarded by ec->mu): */
    int64_t held_ns;    /* when it joined ec->held */
    int64_t watch_from; /* the revision the watch starts at (known intact before it) */
    bool watched;       /* in the current watch stream */
};

/* ---- client.c, for the lock operations of etcd.c (each described where it
 * is defined) ---- */

void ec_range_end(const char *p, char *out, size_t len);
int ec_authenticate(ecclient *ec, int64_t until_ns, char *err, size_t errlen);
void ec_value_format(const ecclient *ec, int64_t since_ms, const char *leader, char *buf,
                     size_t len);
void ec_ckey_of(const ecclient *ec, int64_t lease, char *buf, size_t len);
int ec_keepalive(ecclient *ec, int64_t until_ns, char *err, size_t errlen);
bool ec_kv_still_ours(const ecclient *ec, int64_t lease, int64_t rev, const cJSON *kv);
const char *ec_names_dir(const ecclient *ec);
int ec_foreign(const ecclient *ec, const char *dir, const char *key, char *err, size_t errlen);
void ec_held_drop(ecclient *ec, eclock *el);
void ec_orphan_add(ecclient *ec, const char *key);
int ec_delete_key(ecclient *ec, const char *key, int64_t rev, int64_t lease,
                  int64_t until_ns, int64_t *deleted, char *err, size_t errlen);
int ec_read_queue(ecclient *ec, eclock *el, int64_t seen, int64_t until_ns, ec_entry **q,
                  int *n, int64_t *rev, char *err, size_t errlen);
int ec_enqueue(ecclient *ec, dlock_lock *l, eclock *el, int64_t lease, bool make_ckey,
               int64_t until_ns, ec_entry **q, int *n, int64_t *rev, bool *unknown,
               char *err, size_t errlen);
bool ec_changed_since(ecclient *ec, const char *pred, int64_t pred_rev, bool range, bool puts,
                      const char *own, int64_t rev, int64_t at_rev, int64_t until_ns);
int ec_wait_change(ecclient *ec, const char *pred, int64_t pred_rev, bool range, bool puts,
                   bool chain, const char *own, int64_t rev, int64_t deadline,
                   int64_t op_deadline_ns, int cancel_fd, wait_watch *out, char *err,
                   size_t errlen);

#endif
