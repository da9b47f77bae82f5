/* SPDX-License-Identifier: MIT */
/*
 * redis_master.h — what redis.c (dlock's own layout on one master, found
 * directly, through Sentinel or per slot in a cluster) shares with keyed.c
 * (the key= layout on the same deployments): the client, and one call
 * that follows the master wherever it goes.
 */
#ifndef DLOCK_REDIS_MASTER_H
#define DLOCK_REDIS_MASTER_H

#include "redis_cluster.h"
#include "redis_int.h"

enum { MODE_SINGLE, MODE_SENTINEL, MODE_CLUSTER };

typedef struct rclient {
    rconf cf;
    int mode;
    rnode master; /* single and sentinel modes */
    rnode *sentinels;
    size_t nsentinels;
    char *master_name;
    pthread_mutex_t resolve_mu;
    rcluster *cluster;
    int wait_replicas; /* WAIT for this many replicas after acquiring */
    int wait_timeout_ms;
    char self[300];
    char *key_template; /* the key= layout's template, or NULL */
} rclient;

static inline rclient *rc_of(dlock_client *c)
{
    return c->bstate;
}

/* How a call of rd_run() waits and what it may do again. */
typedef struct rcall {
    const dlock_lock *l; /* every wait within rd_ms(l, ...); NULL: plain timeouts */
    int timeout_ms;      /* for the replies, before that bound (-1: forever) */
    int cancel_fd;       /* -1: none */
    int64_t *sent_ns;    /* monotonic time just before sending, if not NULL */
    bool retry;          /* the commands may run twice (idempotent) */
    /* Written after the commands on their connection when no reply came
     * in time (rconn_abandon): undoes whatever they did, whenever the
     * server gets to them. NULL: none. */
    const rcmd *undo;
} rcall;

/* The master owning key (NULL: no cluster node serves its slot). */
rnode *rd_node_for(rclient *rc, const char *key);
/* Run cmds (pipelined) on the master owning key (see redis.c). */
int rd_run(rclient *rc, const char *key, const rcmd *cmds, int n, redisReply **out,
           const rcall *how, char *err, size_t errlen);
/* A failed rd_run (its result x) as l's error. */
int rd_call_failed(dlock_lock *l, const char *what, int x, const char *err);
/* A reply of the wrong shape as l's (or cl's, about name) error. */
int rd_bad_reply(dlock_lock *l, const char *what, const char *expected, const redisReply *r);
/* A script call c on key's master that the lock's owner alone may make
 * (renew, set a value), which may run twice: 0 when the script answers 1,
 * DLOCK_ELOST ("lock NAME" then lost) when it answers another integer,
 * else the call's or the reply's error, about what. */
int rd_owned_call(dlock_lock *l, const char *key, const rcmd *c, const char *what,
                  const char *lost);
/* A release's outcome from the call's status x and its reply r (freed):
 * 0, DLOCK_ELOST when the lock was no longer ours, or the call's error. */
int rd_release_result(dlock_lock *l, int x, redisReply *r, const char *err);
int rd_client_bad_reply(dlock_client *cl, const char *what, const char *name,
                        const char *expected, const redisReply *r);
/* Call fn(key, len, arg) for every key matching pattern on every master
 * (SCAN) until fn returns non-zero (returned). */
int rd_scan(dlock_client *cl, const char *pattern,
            int (*fn)(const char *key, size_t len, void *arg), void *arg);
/* After acquiring, make sure the grant reached the URL's wait=N replicas,
 * renew being l's renew call (WAIT counts its own connection's writes). */
int rd_confirm_replicated(dlock_lock *l, const char *key, const rcmd *renew);

/* The error (ECONFLICT) of a reply saying the lock key holds what the
 * layout does not recognise (rd_alien_reply), on l or else on cl about
 * name, naming what was found and the layout that would speak it; 0 if
 * the reply says no such thing. key: the lock key (the key= layout's). */
#define ALIEN_OWN                                                                             \
    "lock \"%s\": key %s holds a %s that dlock did not write (another library's lock on "     \
    "dlock's key?); to lock beside redis-py, node-redlock or redsync, name their key with "   \
    "?key=TEMPLATE, e.g. ?key=lock:{name} (%s)"
#define ALIEN_KEYED                                                                           \
    "lock \"%s\": key %s holds a %s, not the string of a SET NX lock (is key= the template "  \
    "its peers use?) (%s)"
int rd_alien(dlock_client *cl, dlock_lock *l, const char *name, const char *key, bool keyed,
             const redisReply *r);
/* inspect and break of name by the script call c on key (either layout). */
int rd_info_call(dlock_client *cl, const char *name, const char *key, const rcmd *c, bool keyed,
                 redisReply **out, rd_info *f);
int rd_inspect_with(dlock_client *cl, const char *name, const char *key, const rcmd *c,
                    bool keyed, dlock_info *info);
int rd_break_with(dlock_client *cl, const char *name, const char *key, const rcmd *c, bool keyed,
                  dlock_info *info);

/* Claim records (records.c), for either layout's ops. */
int rd_record_get(dlock_client *cl, const char *name, char **val, size_t *len,
                  uint64_t *ver);
int rd_record_put(dlock_client *cl, const char *name, const char *val, size_t len,
                  int64_t ttl_ms, uint64_t ver);
int rd_record_del(dlock_client *cl, const char *name);

/* Open and close a client of either layout (the key= layout's when the
 * URL has key=: rd_keyed_open). */
int rd_master_open(dlock_client *cl, const dl_url *u);
void rd_master_close(dlock_client *cl);

/* The key= layout's operations and capabilities (keyed.c). */
extern const dl_backend_ops rd_keyed_ops;
#define RD_KEYED_CAPS \
    (DLOCK_CAP_FENCING | DLOCK_CAP_LEASE | DLOCK_CAP_FENCING_WEAK | DLOCK_CAP_CLAIMS)
/* 0, or the error (on cl) of a key= template that cannot be used. */
int rd_keyed_open(dlock_client *cl, rclient *rc, const char *tmpl);

#endif
