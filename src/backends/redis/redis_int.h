/* SPDX-License-Identifier: MIT */
/*
 * redis_int.h — what the Redis family (redis://, redis+sentinel://,
 * redis+cluster://, redlock://) shares: connections with timeouts and
 * cancellation on top of hiredis, the one Lua script every lock operation
 * runs, and key naming.
 */
#ifndef DLOCK_REDIS_INT_H
#define DLOCK_REDIS_INT_H

#include "internal.h"
#include "support/support.h"

#include <stdatomic.h>

#include <hiredis/hiredis.h>

/* One connection to one server. */
typedef struct rconn {
    redisContext *ctx;
    struct rnode *node; /* the server it belongs to */
    unsigned epoch;     /* node->epoch when connected (stale after failover) */
    int owed;           /* replies still to come for calls that stopped waiting */
    dl_pooled pooled;   /* in the node's pool while idle */
} rconn;

/* One server and its pool of idle connections. */
typedef struct rnode {
    char host[256];
    int port;
    unsigned epoch; /* bumped when the address changes (sentinel failover) */
    pthread_mutex_t mu; /* the address and epoch; held around the pool's use,
                         * so that no connection of an old epoch goes in */
    dl_pool idle;       /* of rconn */
    /* A non-blocking connect in progress (rconn_get_many), its deadline and
     * the epoch it was started in. */
    redisContext *connecting;
    int64_t connecting_until;
    unsigned connecting_epoch;
} rnode;

/* hiredis allocates an array reply's element table from the count the server
 * sends, before any element arrives: "*2000000000" would cost 16 GB. This
 * makes reader r refuse arrays longer than RD_MAX_ELEMENTS (a protocol
 * error on that connection). Done for every connection. */
#define RD_MAX_ELEMENTS 65536
void rd_bound_reader(redisReader *r);

/* Per-client settings every server of the family shares. */
typedef struct rconf {
    char *user;     /* ACL user or NULL (owned) */
    char *password; /* or NULL (owned, wiped when freed) */
    int db;               /* SELECT on connect (not in cluster mode) */
    int connect_timeout_ms;
    int op_timeout_ms;
    /* Call the lock script with EVALSHA, not FCALL: a server did not take
     * it as a function library (older than Redis 7, or an ACL forbids
     * FUNCTION LOAD). Learned when loading; never set back. */
    atomic_bool scripts;
} rconf;

/* Credentials and timeouts from the URL and the client's options. */
int rd_conf_init(rconf *cf, const dl_url *u, const dlock_client_opts *opts);
void rd_conf_free(rconf *cf);

/* Per-lock state of every backend of the family: as small as the name
 * allows, since a client may hold a hundred thousand locks. */
typedef struct rlock {
    char kind[2]; /* "x" exclusive, "r" shared, "s" semaphore */
    char key[];   /* dlock:{NAME}:lock */
} rlock;

int rd_lock_init(dlock_lock *l);
void rd_lock_fini(dlock_lock *l);

/* A command as argv; at most RD_MAXARGS arguments. */
#define RD_MAXARGS 16
typedef struct rcmd {
    int argc;
    const char *argv[RD_MAXARGS];
    size_t len[RD_MAXARGS];
} rcmd;

void rcmd_init(rcmd *c);
void rcmd_add(rcmd *c, const char *s);
void rcmd_addlen(rcmd *c, const char *s, size_t n);
void rcmd_addll(rcmd *c, long long v, char *buf /* >= 24 bytes, kept alive */);

/* Initialise/destroy a node (host copied). */
void rnode_init(rnode *n, const char *host, int port);
void rnode_destroy(rnode *n);
/* Drop every idle connection and bump the epoch (address changed). */
void rnode_reset(rnode *n, const char *host, int port);

/* How long a step of a lock's backend call may wait: ms cut to what is left
 * of l's op_deadline_ns (dl_op_timeout_ms); ms itself when l is NULL (calls
 * on a name, not a lock: inspect, list, break). */
static inline int rd_ms(const dlock_lock *l, int ms)
{
    return l ? dl_op_timeout_ms(l, ms) : ms;
}

/*
 * Take a connection to node (idle one or a new one: connect, AUTH, SELECT,
 * all within timeout_ms; none is made when it is 0). On failure returns
 * NULL, writes a one-line reason to err and, if fail is not NULL, the kind
 * of failure as a DLOCK_E* code: EUNREACHABLE, EPERM (AUTH refused), EURL
 * (SELECT refused: no such database), EPROTO (not a Redis answer).
 */
rconn *rconn_get(rnode *n, const rconf *cf, int timeout_ms, int *fail, char *err,
                 size_t errlen);
/* The same for n servers at once, connecting in parallel for at most
 * wait_ms or until need of them are connected (see conn.c); out[i] NULL
 * where none could be had, and the last reason why in err. */
void rconn_get_many(rnode *nodes, int n, const rconf *cf, rconn **out, int need, int wait_ms,
                    char *err, size_t errlen);
/* Give a healthy connection back to its node's pool. */
void rconn_put(rconn *c);
/* Close a connection whose state is unknown (error, timeout, canceled). */
void rconn_drop(rconn *c);
/* Close a connection whose last request got no reply in time, after
 * writing undo (if not NULL) on it without waiting: the server runs it
 * right after that request whenever it gets to it (requests on one
 * connection run in order), so that whatever the request did is undone. */
void rconn_abandon(rconn *c, const rcmd *undo);

/* Outcome of a round trip. */
enum {
    RD_OK = 0,
    RD_EIO = -1,       /* connection failed or timed out: conn must be dropped */
    RD_CANCELED = -2,  /* cancel_fd became readable: conn must be dropped */
    RD_EPROTO = -3,    /* the server answered, but not as Redis would: drop it */
};

/*
 * Send cmds[0..n) on c (pipelined) and read n replies, waiting at most
 * timeout_ms (-1: forever) and watching cancel_fd (-1: none). On RD_OK the
 * replies are in out[] (caller frees with freeReplyObject). sent_ns gets the
 * monotonic time just before sending, if not NULL.
 */
int rconn_call(rconn *c, const rcmd *cmds, int n, redisReply **out, int timeout_ms,
               int cancel_fd, int64_t *sent_ns, char *err, size_t errlen);

/* Read one reply that comes without a request (a message on a subscribed
 * connection), waiting at most timeout_ms and watching cancel_fd: RD_OK
 * with *out, or *out NULL when none came in time; RD_EIO (drop c) or
 * RD_CANCELED. */
int rconn_read(rconn *c, redisReply **out, int timeout_ms, int cancel_fd, char *err,
               size_t errlen);

/*
 * The same on several connections at once: cmds[0..ncmd) are written to
 * every connection first (pipelined), then replies are read as they arrive
 * (one poll over all sockets), so the whole takes about the slowest round
 * trip, not the sum. Connection i's replies land in out[i*ncmd + j] (NULL
 * where none came; the caller frees every one that is not, whatever st
 * says). When enough (may be NULL) says the replies so far decide the
 * outcome, the call returns without waiting for the rest: a quorum is as
 * fast as its quorum-th server, not its slowest. st[i]: RD_OK (all of
 * connection i's replies came), RD_OWED (some still to come; the connection
 * discards them on its next call and goes back to the pool), RD_EIO (drop
 * it).
 */
enum { RD_OWED = 1 };
typedef bool rd_enough_fn(redisReply *const *out, int nc, int ncmd, void *arg);
void rconn_call_many(rconn **cs, int nc, const rcmd *cmds, int ncmd, redisReply **out, int *st,
                     int timeout_ms, rd_enough_fn *enough, void *arg);
/* The same, the rest given up to settle_ms more once enough said so (0:
 * none), each of their replies that comes in that time read. */
void rconn_call_many_settle(rconn **cs, int nc, const rcmd *cmds, int ncmd, redisReply **out,
                            int *st, int timeout_ms, rd_enough_fn *enough, void *arg,
                            int settle_ms);

/* The lock script, lock.lua (one script, an operation per first
 * argument), generated by cmake/embed.cmake in two forms: a Redis 7
 * function library registering rd_lock_script_function (dlock_ and the
 * file's hash), and a script for EVAL whose SHA-1
 * is rd_lock_script_sha. As a library its helpers are built once at load,
 * not on every call (about 2 us less per call on a warm server). */
extern const char rd_lock_script[], rd_lock_script_sha[];
extern const char rd_lock_script_library[], rd_lock_script_function[];

/* FCALL dlock_ID 1 KEY op (or EVALSHA SHA 1 KEY op): the start of every
 * call of the lock script. */
void rd_script_cmd(rcmd *c, const rconf *cf, const char *key, const char *op);

/* The same with nkeys (1..4) keys: the key= layout's calls. */
void rd_script_keys_cmd(rcmd *c, const rconf *cf, int nkeys, const char *const *keys,
                        const char *op);

/* Point a script call built by rd_script_cmd at the form cf now uses
 * (after rd_load_script found that a server only takes scripts); any
 * other command is left as it is. */
void rd_script_retarget(rcmd *c, const rconf *cf);

/* A reply saying the server lacks the lock script (NOSCRIPT, no such
 * function, or no FCALL at all): load it with rd_load_script and call again. */
bool rd_script_missing(const redisReply *r);

/* "renew OWNER KIND TTL" of the lock script for held lock l (its key and
 * kind from its rlock), the TTL's digits in nb (kept alive by the caller):
 * its lease then ends ttl_ms from now (l->opts.ttl_ms, or what is left of
 * its min_hold_ms, see release_at). */
void rd_renew_cmd(rcmd *c, const rconf *cf, const dlock_lock *l, int64_t ttl_ms, char nb[24]);

/* The same for an operation on a name rather than a held lock (inspect,
 * break): key (kept alive by the caller) is the name's lock key. */
typedef char rd_key[DL_NAME_MAX + 32];
void rd_name_cmd(rcmd *c, const rconf *cf, const char *name, rd_key key, const char *op);

/* Install the lock script on c: as a function library, or as a script
 * where the server does not take the library (then cf->scripts is set),
 * waiting at most timeout_ms in all. RD_OK, RD_EIO or RD_EPROTO. */
int rd_load_script(rconn *c, rconf *cf, int timeout_ms, char *err, size_t errlen);
/* The same on every connection of cs[0..n) at once, within timeout_ms in
 * all, and no longer than settle_ms once enough (NULL: all answered, as
 * rconn_call_many) says the replies suffice: a server that does not answer
 * holds up none of the others. One that fails is dropped, and one still to
 * answer goes back to its pool (cs[i] NULL; the last reason in err).
 * Returns how many of cs are left: those that have the code. */
int rd_load_script_many(rconn **cs, int n, rconf *cf, int timeout_ms, rd_enough_fn *enough,
                        void *arg, int settle_ms, char *err, size_t errlen);

/* What a reply is, for error messages ("expected ..., got status \"OK\""):
 * status "OK", error "ERR ...", integer 5, nil, an array of 3, string "x"
 * (server strings quoted, escaped and cut short). */
void rd_reply_desc(const redisReply *r, char *buf, size_t len);

/*
 * Replies, checked element by element before anything is read from them: a
 * misbehaving server (or a proxy, or another program's keys) gets an error,
 * never a crash. fuzz/fuzz_reply.c feeds them arbitrary replies.
 */
/* {flag, value} of acq, wait and racq; false if the reply is not one. */
bool rd_pair_reply(const redisReply *r, long long *flag, long long *value);
/* A token handed over through BLPOP: {list, "token"}; false if not one. */
bool rd_handoff_reply(const redisReply *r, long long *token);
/* The script's info reply; strings point into r (owner "" when free). */
typedef struct rd_info {
    const char *owner, *holder, *value;
    long long since, token, pttl, last_token, queued, readers, permits, nonfair, now;
} rd_info;
int rd_info_reply(const redisReply *r, rd_info *out);
/* SENTINEL get-master-addr-by-name: {host, port}; -1 if not one. */
int rd_addr_reply(const redisReply *r, char *host, size_t hostlen, int *port);
/* The reply of the script's brk operation: adds what it broke to info
 * (holders, holder, highest token); -1 if the reply is not one. */
int rd_break_reply(const redisReply *r, dlock_info *info);

/*
 * Keys: "dlock:{TAG}:SUFFIX" — every key of a lock shares the hash tag
 * {TAG}, the name with each '}' replaced by RD_BRACE, a byte no name can
 * hold: a '}' would end the tag early (a leading one leaves it empty and
 * Redis then hashes whole keys), splitting a lock's keys over cluster
 * slots. -1 if buf is too small.
 */
#define RD_BRACE '\x7f'
int rd_name_key(const char *name, const char *suffix, char *buf, size_t len);
/* "dlock:{TAG}:lock" */
int rd_lock_key(const char *name, char *buf, size_t len);
/* The name a key's tag (n bytes) stands for, into name[len]; -1 if it is
 * not one (a raw '}': a key of dlock 0.1.0, which did not encode them). */
int rd_tag_name(const char *tag, size_t n, char *name, size_t len);

/*
 * key= templates: the layout of the SET NX family (redis-py's Lock,
 * node-redlock, redsync, tooz). The lock of NAME is the string key the
 * template gives with its one {name} replaced by NAME; beside it (same
 * cluster slot wherever possible) dlock keeps KEY/dlock-token (its
 * fencing counter), KEY/dlock-wait (its waiters) and KEY/dlock-wake (the
 * channel their wake-ups are published on). No name holds '/' and no template RD_BESIDE, so no key
 * beside a lock is ever a lock.
 */
#define RD_TEMPLATE_MAX 256
#define RD_BESIDE "/dlock-"
/* 0 if t is a template, else -1 and a one-line reason in err. */
int rd_template_check(const char *t, char *err, size_t errlen);
/* The key of name under (checked) template t; -1 if buf is too small. */
int rd_template_key(const char *t, const char *name, char *buf, size_t len);
/* The key `what` beside lock key, in its cluster slot: KEY/dlock-WHAT
 * when KEY has a hash tag, else {KEY}/dlock-WHAT when KEY has no '}', else
 * {S}KEY/dlock-WHAT, S the smallest number whose slot is KEY's. false if
 * buf is too small. */
bool rd_beside_key(const char *key, const char *what, char *buf, size_t len);
/* What stands for {name} in key (klen bytes) under t, into name[len]; -1
 * if key is not one t makes. Not checked as a name (dlock_name_valid):
 * keys beside a lock give one with a '/', which no name holds. */
int rd_template_name(const char *t, const char *key, size_t klen, char *name, size_t len);
/* SCAN's MATCH pattern for the locks under t whose names start with
 * prefix (NULL: all); buf of at least 2 * (strlen(t) + strlen(prefix)) + 4. */
void rd_template_pattern(const char *t, const char *prefix, char *buf, size_t len);
/* What a reply says is in the way when it is the lock script's "DLOCKTYPE
 * T" (T: a type, or string for one dlock did not write) or a WRONGTYPE
 * error: true, T (or "value of another type") into what. */
bool rd_alien_reply(const redisReply *r, char *what, size_t len);

#endif
