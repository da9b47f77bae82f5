/* SPDX-License-Identifier: MIT */
/*
 * internal.h — what the core shares with backends. Not installed.
 *
 * A backend is a dl_backend descriptor: its URL schemes, capability flags
 * and a table of operations (the shape of SQLite's VFS). Every descriptor is
 * compiled in this tree, so the table has no version: an operation a
 * backend does not fill is NULL.
 */
#ifndef DLOCK_INTERNAL_H
#define DLOCK_INTERNAL_H

#include "dlock.h"
#include "support/tell.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

#define DL_ERRMSG_MAX 512
#define DL_NAME_MAX DLOCK_NAME_MAX
#define DL_OWNER_HEX 32 /* 128-bit owner id as lowercase hex */
#define DL_DEFAULT_TTL_MS 30000
#define DL_DEFAULT_TIMEOUT_MS 2000
#define DL_LEADER_MAX DLOCK_VALUE_MAX /* bytes of a published leader value */
/* Default directory of the embedded backend: shared by every user of the host
 * (sticky and world-writable, like /tmp) and kept across reboots, so that
 * fencing tokens survive them. */
#define DL_FILE_DEFAULT_DIR "/var/tmp/dlock"

/* ---- URLs (url.c) ---------------------------------------------------- */

typedef struct dl_host {
    char *host; /* without brackets for IPv6 literals */
    int port;   /* scheme default when the URL has none */
} dl_host;

typedef struct dl_param {
    char *key;
    char *value; /* "" when given as a bare key */
} dl_param;

typedef struct dl_url {
    char *scheme;   /* lowercase: "file", "redis", "redis+sentinel", "postgres", ... */
    char *user;     /* NULL when absent; percent-decoded */
    char *password; /* NULL when absent; percent-decoded; never printed */
    dl_host *hosts; /* nhosts >= 1 for network schemes, 0 for file */
    size_t nhosts;
    /* file: absolute directory; redis: db number ("" = 0); sentinel: master
     * name; zk: chroot ("" = none); postgres/mysql: database name. */
    char *path;
    dl_param *params; /* ?k=v&k2=v2, percent-decoded */
    size_t nparams;
    char *original; /* as given (contains secrets: pass to client libraries only) */
    char *redacted; /* password replaced by "***": safe to print */
} dl_url;

/*
 * Parse `s` into a new dl_url. On error returns DLOCK_EURL (or DLOCK_ENOMEM)
 * and writes one line to err that never contains the password.
 */
int dl_url_parse(const char *s, dl_url **out, char *err, size_t errlen);
void dl_url_free(dl_url *url);
/* Overwrite the password and secret query values of s with '*' in place. */
void dl_url_scrub(char *s);
/* The default URL from the environment (see dh_env_url): $DLOCK_URL
 * or the whole URL read from $DLOCK_URL_FD into buf; NULL if none. */
const char *dl_env_url(char *buf, size_t len);
/* Longest URL read from $DLOCK_URL_FD. */
#define DL_URL_MAX 4096
/* Value of query parameter `key`, or NULL. */
const char *dl_url_param(const dl_url *url, const char *key);
/* Default port of a scheme, 0 for none/unknown. */
int dl_url_default_port(const char *scheme);

/* What a scheme's URL path means; url.c knows how to read each kind. */
enum dl_path_kind {
    DL_PATH_FILE,   /* absolute directory (file://) */
    DL_PATH_DB,     /* redis database number */
    DL_PATH_DB0,    /* redis cluster: database 0 only */
    DL_PATH_MASTER, /* sentinel master name, required */
    DL_PATH_CHROOT, /* zookeeper chroot */
    DL_PATH_NONE,   /* no path allowed */
    DL_PATH_DBNAME  /* SQL database name */
};

/* One URL scheme of a backend, as its descriptor states it. */
typedef struct dl_scheme {
    const char *name;  /* as written, lowercase; NULL ends a backend's list */
    const char *canon; /* what dl_url.scheme says for it (an alias names its main scheme) */
    int port;          /* default port, 0 for none */
    bool multi;        /* several hosts allowed */
    enum dl_path_kind path;
} dl_scheme;

/* The scheme called `name` among every registered backend (NULL if none),
 * and the space-separated list of all of them for messages (core.c). */
const dl_scheme *dl_scheme_find(const char *name);
const char *dl_known_schemes(void);

/* ---- backends --------------------------------------------------------- */

/* What a backend does: its operations. Any may be NULL except
 * client_open, acquire and release. Each returns 0 or a DLOCK_E* code and
 * sets a message with dl_lock_err / dl_client_err. */
typedef struct dl_backend_ops {
    int (*client_open)(dlock_client *c, const dl_url *url);
    void (*client_close)(dlock_client *c);
    int (*lock_init)(dlock_lock *l);
    void (*lock_fini)(dlock_lock *l);
    /* Take the lock once (no re-entry logic: the core handles counts).
     * deadline_ns: 0 = try once, -1 = forever, else CLOCK_MONOTONIC ns.
     * Must watch dl_cancel_fd(l) while waiting. Sets l->token on success. */
    int (*acquire)(dlock_lock *l, int64_t deadline_ns);
    /* acquire itself carries a wait through an election or an outage, to
     * its deadline, keeping its place in the queue (etcd, ZooKeeper): its
     * DLOCK_EUNREACHABLE is final (a waiter's entry deleted, dlock break),
     * and the core does not try again as it does for the others. */
    bool rides_out_outages;
    int (*release)(dlock_lock *l);
    /* Lease backends: extend the lease; DLOCK_ELOST when no longer owner.
     * A session backend may fill it in too, to vouch for its session: the
     * lock is then valid ttl_ms past each success (counted from
     * l->lease_start_ns when set), and its lock_init sets l->opts.ttl_ms
     * to the span the session allows (ZooKeeper: 2/3 of its timeout). */
    int (*renew)(dlock_lock *l);
    /* Renew locks[0..n) (held leases of client c, every one
     * due) in as few round trips as the backend can: rcs[i] gets what
     * renew would have returned for locks[i] (messages with dl_lock_err,
     * lease_start_ns as renew sets it). Every request within each lock's
     * op_deadline_ns, which the core sets alike for the whole batch. NULL:
     * the core calls renew once per lock. */
    void (*renew_batch)(dlock_client *c, dlock_lock *const *locks, int *rcs, size_t n);
    /* Drop a lock that is lost without touching anyone else's state. */
    void (*abandon)(dlock_lock *l);
    int (*inspect)(dlock_client *c, const char *name, dlock_info *info);
    int (*list)(dlock_client *c, const char *prefix, dlock_list_fn fn, void *arg);
    /* Publish a leader value for a held lock / read the current one. */
    int (*set_value)(dlock_lock *l, const char *value);
    int (*get_value)(dlock_client *c, const char *name, char *buf, size_t len);
    /* Take NAME from whoever holds it (see dlock_break); fills broken. When
     * nobody held it: 0 with broken->holders 0 (the core answers
     * DLOCK_ENOTHELD, in the same words for every backend). */
    int (*break_lock)(dlock_client *c, const char *name, dlock_info *broken);
    /* The lock names this client takes, where its URL makes them something
     * else than dlock's own (a peer's layout: an etcd key prefix): 0, or
     * DLOCK_ENAME with why. NULL: dlock_name_valid. */
    int (*name_valid)(dlock_client *c, const char *name, char *why, size_t len);
    /* A held lock's environment for a command, as the layout's own tool
     * gives it (see dlock_peer_env): fn once per variable. NULL: none. */
    int (*peer_env)(dlock_lock *l, dlock_env_fn fn, void *arg);
    /*
     * Claims (dlock once): one small durable record per claim key, which
     * outlives every lock and process. The core keeps the rules (one runner
     * at a time, under an exclusive lock on the key; attempts, retention,
     * fingerprints) and the record's format; a backend keeps only the bytes,
     * and where it can keep data durably. All three NULL: no claims here
     * (memcached evicts). Keys are dlock_name_valid names; each backend puts
     * them apart from its lock names (a table, a prefix, a folder).
     * record_get: 0 with *val (malloc'd, NUL-terminated, *len without the
     *   NUL) or *val NULL when there is none or its time is over; *ver the
     *   record's version, an opaque number that changes with every write
     *   (0: none).
     * record_put: store val[0..len) (len <= DL_RECORD_MAX) for ttl_ms (> 0) from
     *   now, only if the stored record's version is still ver (0: only if
     *   there is none, or its time is over), in one atomic step on the
     *   server (file: two, under the key's kernel lock); DL_RECORD_CHANGED (no message) when it is not. So a runner
     *   that checked the record and then paused past its lease cannot
     *   write over the next attempt's (docs/claims.md). After ttl_ms it is
     *   gone (record_get says none).
     * record_del: forget it (0 too when there was none).
     */
    int (*record_get)(dlock_client *c, const char *key, char **val, size_t *len,
                      uint64_t *ver);
    int (*record_put)(dlock_client *c, const char *key, const char *val, size_t len,
                      int64_t ttl_ms, uint64_t ver);
    int (*record_del)(dlock_client *c, const char *key);
    /* Release, but leave the lock taken on the server for ms more (ms > 0;
     * opts.min_hold_ms): set the owner's lease to end ms from now, checking
     * it is still ours (DLOCK_ELOST if not), and forget it here. Only where
     * the lease outlives this client and process. NULL: the core waits,
     * holding, until the minimum has passed, then calls release. */
    int (*release_at)(dlock_lock *l, int64_t ms);
} dl_backend_ops;

/*
 * A backend: the facts, which every build has (dlock_backends() lists them
 * whether or not the client library was there), and a pointer to its
 * operations, NULL when the build has no client library for it (`missing`
 * says which, and how to get it). One pattern in every backend file:
 *
 *     #ifdef DLOCK_HAVE_X
 *     static const dl_backend_ops x_ops = {...};
 *     #define X_OPS .ops = &x_ops
 *     #else
 *     #define X_OPS .missing = "this build has no libx (Debian: libx-dev)"
 *     #endif
 *     const dl_backend dl_backend_x = {.name = "x", ..., X_OPS};
 *
 * Every descriptor is compiled in this tree, so there is no layout version.
 * What dlock bench and dlock check ask of the backend's servers is not here:
 * it is the harness's (src/harness/tools.h), outside libdlock.so.
 */
typedef struct dl_backend {
    const char *name;
    const dl_scheme *schemes; /* its URL schemes, ended by {NULL} */
    unsigned caps;            /* DLOCK_CAP_* */
    const char *liveness;
    const char *fencing;
    /* URL query parameters the backend reads, space separated (besides the
     * core's own, DL_CORE_PARAMS). Any other is a malformed URL: a typo
     * must not be silently ignored. */
    const char *params;
    /* Why it keeps no claims (no record ops), for the message: "it may
     * evict it at any moment". NULL: a plain default. */
    const char *no_claims;
    const dl_backend_ops *ops; /* NULL: not built (missing says why) */
    const char *missing;       /* NULL when built */
} dl_backend;

/* The largest claim record the core writes (its header, then a result of
 * at most DLOCK_CLAIM_RESULT_MAX bytes): every backend stores that much. */
#define DL_RECORD_MAX (DLOCK_CLAIM_RESULT_MAX + 4096)

/* record_put's answer when the record is no longer the version it was
 * given: positive, so that no error code is confused with it. */
#define DL_RECORD_CHANGED 1

/* Query parameters every backend takes: they fill dlock_client_opts fields
 * the caller left at 0, so that a CLI user can set them too. */
#define DL_CORE_PARAMS "connect_timeout_ms op_timeout_ms"

/* The registry (registry.c, generated by CMake from one dlock_backend()
 * call per backend): every descriptor, built or not, NULL-terminated. */
extern const dl_backend *const dl_registry[];

/* "file, redis and zk" — the backends whose caps include all of `caps`,
 * for messages that say which backends offer what this one does not. */
const char *dl_backends_with(unsigned caps, char *buf, size_t len);

/* ---- handles ---------------------------------------------------------- */

#define DL_CANCEL_STOCK 16 /* spare cancel eventfds a client keeps */

struct dlock_client {
    const dl_backend *be;
    /* The client's operations: be->ops, or the table of the mode its URL
     * chose, which client_open puts here (as SQLite's unix VFS picks
     * posixIoMethods or dotlockIoMethods per file). The core calls
     * through this, never be->ops. */
    const dl_backend_ops *ops;
    dl_url *url;
    void *bstate; /* backend's per-client state */
    /* What this client offers: the backend's caps, narrowed by client_open
     * where the URL chose a mode without some of them (postgres
     * mode=advisory), together with ops; and whether the core renews its
     * locks (the core's: ops->renew != NULL once client_open returned). */
    unsigned caps;
    bool renews;
    dlock_client_opts opts;
    pthread_mutex_t mu; /* guards the lease heaps and threads */
    /* Names the client's messages, which live in each calling thread
     * (core.c: a thread reads the message of its own failed call). Never
     * reused, unlike the client's address. */
    uint64_t id;

    /* Lease renewal: one background thread per client, started on first use,
     * and beside it a watchdog that declares a lease lost at its deadline
     * whatever the renewal thread is waiting for. Held leases sit in two
     * binary heaps, by next renewal and by loss: either thread finds what
     * is due in O(log n), however many locks the client holds. */
    pthread_t renew_thread, watch_thread;
    bool renew_started, watch_started;
    bool stopping;
    pthread_cond_t renew_cv, watch_cv;
    pthread_cond_t renewed_cv; /* a batch ended: its locks' renewing is false */
    /* The losses the renewal thread and the watchdog are telling (outside
     * mu: the callback may release): dlock_lock_free of such a lock waits
     * for the end of that, which may still read the handle. */
    dl_teller teller;
    int64_t renew_wake_ns; /* when the renewal thread means to look next */
    int64_t watch_wake_ns; /* when the watchdog means to look next */
    struct dl_heap {
        dlock_lock **v;
        size_t n, cap;
    } renew_heap, watch_heap;
    uint64_t jitter_state; /* the renewal thread's cheap random numbers */
    uint64_t renewed, renew_calls; /* counts for dlock bench -L */

    /* Every lock handle of the client (guarded by mu), so that closing the
     * client can release what they hold. A closed client with handles left
     * lives on, emptied, until the last of them is freed. */
    dlock_lock *handles;
    bool closed;

    /* Spare eventfds for dl_cancel_fd: an acquisition that waits takes one
     * and gives it back unless dlock_cancel wrote to it, so a waiter makes
     * and closes no descriptor (eventfd2 and close were two system calls
     * on every hand-over's path). */
    pthread_mutex_t cancel_stock_mu;
    int cancel_stock[DL_CANCEL_STOCK];
    int ncancel_stock;
};

struct dlock_lock {
    dlock_client *c;
    char *name;
    dlock_lock_opts opts;
    char owner[DL_OWNER_HEX + 1]; /* 128-bit random id, fresh per acquisition */
    pthread_mutex_t mu;           /* serialises backend calls on this handle */
    _Atomic int state;            /* dlock_state_t */
    _Atomic uint64_t token;
    unsigned count; /* re-entry count */
    /* Descriptors exist only while needed, so that a process can keep many
     * handles: cancel_fd during an acquisition that may wait (guarded by
     * cancel_mu; -1 otherwise), lost_fd from the first dlock_lost_fd call. */
    int cancel_fd;
    pthread_mutex_t cancel_mu;
    bool cancel_pending; /* dlock_cancel came while no cancel_fd existed */
    bool cancel_written; /* cancel_fd was written to: closed, never stocked */
    bool acquiring;      /* an acquisition is in progress: a cancel counts */
    _Atomic int lost_fd;
    atomic_bool lost_claimed; /* the first dl_mark_lost wins; reset on acquire */
    /* When the state turned LOST (monotonic ns; 0 before): a lease declared
     * lost by the clock was lost from its loss moment on, however late the
     * thread that tells it ran (dlock_debug_lost_at_ns). */
    _Atomic int64_t lost_at_ns;
    /* Messages, allocated with the first one (a handle that never fails
     * carries none): errmsg (DL_ERRMSG_MAX bytes, kept once made, so that a
     * pointer dlock_lock_errmsg returned stays valid) written by the owner's
     * thread only; renew_err by the renewal thread only, freed when read;
     * lost_msg (DL_ERRMSG_MAX) written once, before the state says LOST. */
    char *errmsg, *renew_err, *lost_msg;
    void *bstate; /* backend's per-lock state */
    /* During dlock_campaign's acquisition, the value it publishes: a backend
     * whose peers write the value with the queue entry (etcd's
     * Election.Campaign) writes it there too and sets value_published, so
     * that no observer sees its leader without a value; the core then
     * skips set_value. NULL otherwise. */
    const char *campaign_value;
    bool value_published;

    /* Set by a lease backend's acquire or renew when the lease must be
     * counted from another moment than the call's start: a queued waiter
     * (the time before sending the last request that found the lock not yet
     * ours) or Redlock (its start minus the clock drift allowance). The
     * lease then ends at lease_start_ns + ttl. 0: the call's start. */
    int64_t lease_start_ns;
    /* This acquisition has already found no server (it tried again after
     * DLOCK_EUNREACHABLE: dl_lock_retry_transient; ZooKeeper: waited for a
     * connection until its deadline): see dl_deadline_cut. */
    bool outage;

    /* A hard bound (CLOCK_MONOTONIC ns, 0: none beyond the op timeout) that
     * no request of the backend call in progress may wait past, set by the
     * core before acquire (the acquisition's deadline plus
     * DL_DEADLINE_MARGIN_MS) and renew (the moment the lease will be
     * declared lost). Backends bound every connect and request with
     * dl_op_timeout_ms(). */
    int64_t op_deadline_ns;

    /* Lease bookkeeping (guarded by c->mu). A held lease is in the watch
     * heap (watch_pos >= 0) until released or lost, and in the renewal heap
     * except while a renewal of it runs (renewing: the owner's calls wait
     * for it to end instead of holding mu through a whole batch). */
    int64_t lease_deadline_ns;
    int64_t next_renew_ns;
    int32_t renew_pos, watch_pos;
    bool renewing;
    /* opts.max_hold_ms: when the renewal thread gives the lock up (0:
     * never); a lock with a cap is tracked in both heaps whatever its
     * backend (a lock without a lease has neither deadline nor renewals
     * there, only the cap). cap_released: the core released it on the
     * server, so the owner's release has nothing left to abandon. */
    int64_t cap_at_ns;
    bool cap_released;
    /* When the acquisition of the held lock returned (CLOCK_MONOTONIC ns):
     * opts.min_hold_ms runs from here, the latest the grant can have come. */
    int64_t acquired_ns;
    /* opts.on_warn: warn_ns before loss_at; warned: this failing episode
     * was told (reset by a renewal that succeeds). */
    int64_t warn_ns;
    bool warned;

    dlock_lock *prev_handle, *next_handle; /* in c->handles (guarded by c->mu) */
    bool detached; /* the client was closed: only dlock_lock_free is useful */
    /* This release is dlock_release_and_close's: the client closes next, so
     * a backend whose client_close ends every key anyway (etcd: revoking the
     * lease) may leave the key to it and only check it is still ours. */
    bool release_closing;
};

/* Set an error message on the handle and return code (printf-like). From
 * the renewal thread the message goes to renew_err, so that the owner's
 * thread never reads a buffer another thread is writing. dl_lock_msg: the
 * handle's last message ("" when none). */
int dl_lock_err(dlock_lock *l, int code, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
int dl_client_err(dlock_client *c, int code, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
/* A claim record operation's failure, in the one form every backend gives:
 * claim "key": what (reading, writing...): why (the client's URL). */
int dl_claim_err(dlock_client *c, int code, const char *what, const char *key, const char *why);
/* A break_lock's inspect of the name came back rc: whether the break ends
 * there (return rc): on an error, or when nobody holds it (broken then says
 * no holders, and the core answers DLOCK_ENOTHELD in one way for all). */
bool dl_nothing_to_break(int rc, dlock_info *broken);
const char *dl_lock_msg(const dlock_lock *l);
/* A wait that reached its deadline: DLOCK_ETIMEDOUT with the one message
 * every backend gives, `lock "NAME": timed out waiting`, and why in
 * parentheses when it ended for another reason than the lock staying held
 * (NULL or "": it stayed held). dlock run says "busy" for the plain form
 * only. dl_wait_timed_out_after: why is the request failure already on l
 * (a request cut short by the deadline's bound), less its lock "NAME": . */
int dl_wait_timed_out(dlock_lock *l, const char *why);
int dl_wait_timed_out_after(dlock_lock *l);
/* A fresh random owner id for l (every acquisition; Redlock every try, so
 * that a late give-back of one try cannot remove the next try's grant);
 * 0, or the error, set on l. */
int dl_lock_new_owner(dlock_lock *l);

/* The descriptor a backend must watch while it waits (readable when
 * dlock_cancel was called), created on first use; -1 if none can be made. */
int dl_cancel_fd(dlock_lock *l);

/* Mark a held lock lost (idempotent): state, lost fd, callback. */
void dl_mark_lost(dlock_lock *l, const char *why);

/* A request of an acquisition that failed DLOCK_EUNREACHABLE (rc) when
 * the acquisition's deadline had passed was cut short by it, and proves
 * nothing of the server (it had less than its op timeout): the wait timed
 * out (true) — unless the acquisition has already found no server on an
 * earlier try (l->outage): then the outage goes on (false, unreachable). */
bool dl_deadline_cut(const dlock_lock *l, int rc, int64_t deadline_ns);
/* dl_retry_transient for an acquisition of l (its cancel descriptor): a
 * try again marks the acquisition's outage (l->outage), so that a request
 * its deadline cuts short then stays DLOCK_EUNREACHABLE. */
bool dl_lock_retry_transient(dlock_lock *l, int *rc, int64_t deadline_ns, int64_t *step_ns);

/* An acquisition that could not get a connection (code rc, reason why, the
 * server as `where` with no password): a timed one whose time ran out while
 * it connected timed out, DLOCK_ETIMEDOUT (a slow handshake, say SCRAM on a
 * loaded machine, is no unreachable server); else rc, saying why. */
int dl_connect_err(dlock_lock *l, int64_t deadline_ns, int rc, const char *why,
                   const char *where);

/* How far past its deadline an acquisition may run to learn the outcome
 * of a request already sent (documented in dlock.h and dlock(1)). */
#define DL_DEADLINE_MARGIN_MS 100

/* The clock-drift allowance of a lease of ttl_ms: ttl/100 + 2 ms (Redlock's
 * validity; the core declares a lease lost earlier still, see loss_at). */
int64_t dl_drift_ns(int ttl_ms);

/* Milliseconds a request of l's current backend call may wait: op_timeout_ms
 * cut to what is left until l->op_deadline_ns (0 when that has passed). */
int dl_op_timeout_ms(const dlock_lock *l, int op_timeout_ms);

/* Monotonic and wall clocks in nanoseconds. */
int64_t dl_now_ns(void);
int64_t dl_realtime_ms(void);
/* Milliseconds left until deadline (-1 forever, 0 expired/try). */
int dl_ms_left(int64_t deadline_ns);
static inline int64_t dl_ms_to_ns(int64_t ms)
{
    return ms * 1000000;
}
/* The deadline ms milliseconds from now (monotonic ns). */
static inline int64_t dl_deadline_in(int64_t ms)
{
    return dl_now_ns() + ms * 1000000;
}
/* Fill buf with n random bytes from getrandom(2). */
int dl_random(void *buf, size_t n);
/* "pid 123 on host" style description of this process. */
void dl_self_desc(char *buf, size_t len);

/* DLOCK_ECONFLICT on l, its message naming the kind (and permits) in force
 * ('x', 'r' or 's' with permits) and the kind l asked for. */
int dl_conflict_err(dlock_lock *l, char kind, unsigned permits);

/* ---- client libraries loaded at run time ------------------------------ */

/* A backend may load its client library with dlopen instead of linking it
 * (etcd's libcurl, postgres's libpq: linked, their dozens of dependencies
 * slowed the start of every dlock process, whatever its backend). Each
 * symbol's pointer lands in `table` at `off`. 0, or a one-line reason in
 * err (naming the Debian package `deb`). Call it once (pthread_once). */
typedef struct dl_sym {
    const char *name;
    size_t off;
} dl_sym;
int dl_load_library(const char *lib, const char *deb, const dl_sym *syms, size_t n,
                    void *table, char *err, size_t errlen);

/* Find a backend by URL scheme (NULL if unknown). */
const dl_backend *dl_backend_for_scheme(const char *scheme);

#endif
