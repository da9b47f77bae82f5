/* SPDX-License-Identifier: MIT */
/*
 * zk_int.h — the ZooKeeper backend's client, calls and sessions, for its
 * files (session.c, the transport: calls, the session, requests; zk.c, the
 * lock operations; nodes.c, node names and data; tools.c, the harness's
 * operations).
 */
#ifndef DLOCK_ZK_INT_H
#define DLOCK_ZK_INT_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <zookeeper/zookeeper.h>

#include "internal.h"
#include "support/support.h"
#include "zk_nodes.h"

#define ZK_PATH_MAX 1024
#define ZK_LEAF_MAX 80

enum call_kind {
    CALL_CREATE,   /* created path and stat */
    CALL_CHILDREN, /* children names */
    CALL_STAT,     /* stat (exists) */
    CALL_DATA,     /* data and stat (get) */
    CALL_VOID,     /* delete, add_auth */
    CALL_SET,      /* set data: stat */
    CALL_SYNC,     /* sync: answered through the leader */
    CALL_WATCH,    /* a waiter's watch: done when it fires */
    CALL_OWN       /* a holder's watch on its own node: fires a loss */
};

typedef struct zkclient zkclient;

/* One request (or watch) in flight. Guarded by the client's mu. */
typedef struct zk_call {
    struct zk_call *next;
    zkclient *zc;
    zhandle_t *zh; /* the handle it was sent on */
    enum call_kind kind;
    int evfd;         /* the waiter's eventfd, -1 once it gave up */
    int refs;         /* replies and armed watches outstanding */
    bool armed;       /* a watch of ours may still fire */
    bool done;        /* the reply came */
    bool fired;       /* WATCH: the node event (or the session's end) came */
    bool lost;        /* OWN: the node is gone (told to the holder if held) */
    bool held;        /* OWN: the acquisition succeeded: a deletion is a loss */
    bool abandoned;   /* the waiter gave up: the last reference frees it */
    int rc;           /* ZOK or a ZooKeeper error */
    int event;        /* WATCH: the event type */
    int64_t fired_ns; /* WATCH: when the event came (for the tools) */
    char *path;       /* CREATE: the node created; OWN: the node watched */
    struct Stat stat;
    char **kids; /* CHILDREN */
    int nkids;
    char *data; /* DATA */
    int datalen;
    dlock_lock *lock; /* OWN: the holder to tell */
} zk_call;

/* A node whose waiter gave up while its fate was unknown (the create's or
 * the delete's reply lost): deleted, found by its owner id, once the
 * connection is back. */
typedef struct zk_orphan {
    struct zk_orphan *next;
    zkclient *zc;
    zhandle_t *zh; /* the handle of the search in flight */
    char parent[ZK_PATH_MAX];
    char leaf[ZK_LEAF_MAX]; /* the start of the node's name (zk_leaf_format) */
    bool searching;
} zk_orphan;

struct zkclient {
    pthread_mutex_t mu;
    pthread_cond_t cv; /* session state changes */
    /* Held for reading by every operation, for writing to replace an
     * expired session's handle. Never taken by the C client's threads. */
    pthread_rwlock_t rw;
    zhandle_t *zh;
    zhandle_t *closing; /* being closed: no request from callbacks (under mu) */
    char *hosts;        /* "h1:p1,h2:p2" */
    char *live;         /* the hosts the session may use: hosts less the silent ones (under mu) */
    char *base;         /* where names are: CHROOT/dlock, or CHROOT in a peer's layout */
    int layout;         /* enum zk_layout (?layout=) */
    char *cred;         /* "user:password" for digest auth, or NULL */
    const char *redacted;
    int session_ms; /* asked for */
    int negotiated_ms;
    int connect_ms, op_ms;
    int state;         /* last session state seen */
    unsigned connects; /* CONNECTED events seen (session_move) */
    bool expired;
    int64_t disconnected_ns;
    int64_t confirmed_ns; /* when a request the server answered was sent */
    zk_call *calls;
    int in_flight; /* requests sent on zh whose completion has not run (session_drain) */
    zk_orphan *orphans;
    dl_teller teller;      /* of losses (node deleted, session expired) */
    struct ACL_vector acl; /* of names and lock nodes */
    struct ACL acl_entries[2];
    char self[200];
};

/* One operation's context: the session (rw held for reading) and an
 * eventfd for its replies. */
typedef struct zk_op {
    zkclient *zc;
    zhandle_t *zh;
    int evfd;
} zk_op;

zkclient *zc_of(dlock_client *c);
/* dir/name into buf: false if it does not fit. */
bool zk_pjoin(char *buf, size_t len, const char *dir, const char *name);
/* The waiter is done with k. */
void zk_call_drop(zk_call *k);
/* Wait until *flag (a field of k) or *flag2 or *flag3 (NULL: none) is set,
 * the deadline (monotonic ns; -1 none) passes or the cancel descriptor
 * fires: 0, DLOCK_ETIMEDOUT or DLOCK_ECANCELED (DLOCK_EIO if poll fails). */
int zk_call_wait_for(zk_call *k, const bool *flag, const bool *flag2, const bool *flag3, int evfd,
                     int64_t until_ns, int cancel_fd);
/*
 * A four-letter word's answer from one server (at most len-1 bytes), over a
 * plain TCP connection bounded by the client's timeouts. Written by hand
 * because the C client has no call for a server's mode: four-letter words
 * are ZooKeeper's own admin interface, on the client port. 0, or -1 with
 * errno's reason in why.
 */
int zk_ask(int timeout_ms, const char *host, int port, const char *word, char *buf, size_t len,
           char *why, size_t whylen);
/* Connect a new session (zc->zh NULL, rw held for writing or not yet
 * shared) and wait until it is up, for connect_timeout_ms cut to until_ns
 * (-1: not cut): 0 or a DLOCK_E* code in err. *no_leader (may be NULL):
 * the members answer but serve nothing (an election, or no quorum). */
int zk_session_open(zkclient *zc, int64_t until_ns, bool *no_leader, char *err, size_t errlen);
int zk_code(int rc);
int zk_op_begin(zkclient *zc, bool reopen, zk_op *op, char *err, size_t errlen);
/* The same, a new session's opening cut to until_ns (-1: not cut). */
int zk_op_begin_by(zkclient *zc, bool reopen, int64_t until_ns, zk_op *op, char *err,
                   size_t errlen);
void zk_op_end(zk_op *op);
/* Send one request (data for CREATE and SET; flags and acl for CREATE):
 * the call, done at once if it could not be sent; NULL when out of memory. */
zk_call *zk_send(zk_op *op, enum call_kind kind, const char *path, const char *data, int flags,
                 const struct ACL_vector *acl);
/* The same with data of len bytes (-1: none; any bytes) and, for SET and
 * VOID (delete), the node's version expected (-1: any). */
zk_call *zk_send_data(zk_op *op, enum call_kind kind, const char *path, const char *data, int len,
                      int version, int flags, const struct ACL_vector *acl);
/* Wait for k's reply until until_ns: its result (ZOPERATIONTIMEOUT when the
 * bound came first). The call stays the caller's. */
int zk_result(zk_op *op, zk_call *k, int64_t until_ns);
/* Send, wait, and give the call up unless *out takes it (only on ZOK). */
int zk_do(zk_op *op, enum call_kind kind, const char *path, const char *data, int64_t until_ns,
          zk_call **out);
/* A watch on path: its existence (kind CALL_STAT) or its children
 * (CALL_CHILDREN); the reply as for zk_send, the event in k->fired. */
zk_call *zk_watch(zk_op *op, enum call_kind kind, const char *path);
int64_t zk_op_until(zkclient *zc);
const char *zk_why(zkclient *zc, int rc, char *buf, size_t len);
/* Create the persistent path components of base and the name's container
 * node, each if absent. The name's node alone first: the directories
 * above it are there but on a new server, and a create that fails is a
 * write too (an error transaction, flushed like any other). */
int zk_ensure_parent(zk_op *op, const char *parent, int64_t until_ns);
int zk_parent_of(zkclient *zc, const char *name, char *buf, size_t len);
void zkclient_free(zkclient *zc);

/* Claims' records (records.c). */
int zk_record_get(dlock_client *c, const char *key, char **val, size_t *len, uint64_t *ver);
int zk_record_put(dlock_client *c, const char *key, const char *val, size_t len, int64_t ttl_ms,
                  uint64_t ver);
int zk_record_del(dlock_client *c, const char *key);

/* A lock's backend state. */
typedef struct zklock {
    char parent[ZK_PATH_MAX];
    char path[ZK_PATH_MAX]; /* our node while waiting or holding, "" none */
    char kind[16];          /* "x", "r", "sN" */
    char leaf[ZK_LEAF_MAX]; /* our node's name before its sequence (zk_leaf_format) */
    zk_call *own;           /* the watch on our node while held */
} zklock;

/* ---- session.c, for the lock operations of zk.c (each described where it
 * is defined) ---- */

/* Whether rc says the reply was lost with its connection (the request may
 * or may not have been carried out). */
bool zk_reply_lost(int rc);
void zk_call_free(zk_call *k);
bool zk_wait_connected(zkclient *zc, int64_t until_ns);
void zk_session_close(zkclient *zc);
void zk_session_move(zkclient *zc, zhandle_t *zh);
/* A node of parent whose name starts with leaf, to delete once connected. */
void zk_orphan_add(zkclient *zc, const char *parent, const char *leaf);
/* The path a sync is sent on: base, or "/" when base is the root. */
const char *zk_sync_path(const zkclient *zc);
int zk_confirm(zk_op *op, int64_t until_ns, int64_t *sent);
/* A lock's deadline for one request. */
int64_t zk_req_until(dlock_lock *l);
/* A holder's watch on its own node (its deletion is a loss), and its end. */
zk_call *zk_own_arm(dlock_lock *l, zk_op *op, const char *path);
void zk_own_drop(dlock_lock *l);

#endif
