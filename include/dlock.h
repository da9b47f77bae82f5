/* SPDX-License-Identifier: MIT */
/*
 * dlock.h — distributed locks over the systems you already run.
 *
 * One API over every backend (file, redis, redlock, zk, etcd, postgres,
 * mysql, memcached), chosen by URL scheme. All functions return 0 on success
 * or a negative DLOCK_E* code; detail lives in a last-error message. Handles
 * are opaque and created and destroyed in pairs. A client may be shared
 * between threads; one lock handle belongs to one thread at a time, except
 * dlock_cancel, dlock_state, dlock_token and dlock_lost_fd, which may be
 * called from any thread.
 *
 * Where a failure's message is (a one-line English reason, never a
 * password):
 *   - dlock_client_open: dlock_client_errmsg(NULL), for the calling thread.
 *   - calls on a lock handle (dlock_acquire, dlock_release,
 *     dlock_release_and_close, dlock_campaign, dlock_resign): that handle's
 *     dlock_lock_errmsg; dlock_acquire_all puts the failing handle's reason
 *     on every handle of the set, dlock_release_all leaves each on its own.
 *   - dlock_lock_new and calls on a client (dlock_leader, dlock_inspect,
 *     dlock_break, dlock_list): dlock_client_errmsg(client), for the
 *     calling thread (with client NULL: dlock_client_errmsg(NULL)).
 * A NULL handle where one is needed is DLOCK_EINVAL.
 *
 * How long a returned string lives: dlock_strerror, dlock_err_name,
 * dlock_version, dlock_client_backend and every string of a
 * dlock_backend_info are static. dlock_client_url lives as long as the
 * client's memory (dlock_client_close, and dlock_lock_free of its last
 * handle). dlock_lock_name lives until dlock_lock_free. An error message
 * lives until the next call that can set it (see each); copy it to keep it.
 */
#ifndef DLOCK_H
#define DLOCK_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#if defined(DLOCK_BUILDING) && defined(__GNUC__)
#define DLOCK_EXTERN __attribute__((visibility("default")))
#else
#define DLOCK_EXTERN
#endif

/* The version is written here once; CMake reads it from these lines. */
#define DLOCK_VERSION_MAJOR 0
#define DLOCK_VERSION_MINOR 1
#define DLOCK_VERSION_PATCH 0
#define DLOCK_VERSION_STRING "0.1.0"
#define DLOCK_VERSION_HEX \
    ((DLOCK_VERSION_MAJOR << 16) | (DLOCK_VERSION_MINOR << 8) | DLOCK_VERSION_PATCH)

/* The library's version string at run time (may differ from the header's). */
DLOCK_EXTERN const char *dlock_version(void);

/*
 * The one error table: X(name, value, message). Codes are negative and are
 * never renumbered or removed; new codes are appended.
 */
#define DLOCK_ERRNO_MAP(X)                                                   \
    X(EINVAL, -1, "invalid argument")                                       \
    X(ENOTSUP, -2, "operation not supported by this backend")               \
    X(EBUSY, -3, "lock is held by another owner")                           \
    X(ETIMEDOUT, -4, "timed out waiting for the lock")                      \
    X(ELOST, -5, "lock was lost while held")                                \
    X(ENOTHELD, -6, "lock is not held by this handle")                      \
    X(EUNREACHABLE, -7, "backend is unreachable")                           \
    X(EPROTO, -8, "backend protocol error")                                 \
    X(ENOMEM, -9, "out of memory")                                          \
    X(ECANCELED, -10, "acquisition was canceled")                           \
    X(EIO, -11, "input/output error")                                       \
    X(EPERM, -12, "permission denied")                                      \
    X(ENOENT, -13, "no such lock")                                          \
    X(EURL, -14, "malformed backend url")                                   \
    X(ENAME, -15, "invalid lock name")                                      \
    X(ECONFLICT, -16, "the name is held as another kind of lock")

typedef enum dlock_err {
    DLOCK_OK = 0,
#define DLOCK_ERR_ENUM_(name, value, msg) DLOCK_##name = value,
    DLOCK_ERRNO_MAP(DLOCK_ERR_ENUM_)
#undef DLOCK_ERR_ENUM_
} dlock_err;

/* A static English message for a code ("unknown error" for unknown codes). */
DLOCK_EXTERN const char *dlock_strerror(int code);
/* The code's symbolic name without prefix, e.g. "ETIMEDOUT". */
DLOCK_EXTERN const char *dlock_err_name(int code);

typedef struct dlock_client dlock_client;
typedef struct dlock_lock dlock_lock;

/* Limits, in bytes (names) or counts. */
#define DLOCK_NAME_MAX 200     /* a lock name's length (dlock_name_valid) */
#define DLOCK_VALUE_MAX 255    /* a leader's published value (dlock_campaign) */
#define DLOCK_PERMITS_MAX 4096 /* a semaphore's permits */
#define DLOCK_HOLDER_MAX 256   /* dlock_info.holder, its terminating NUL included */

/*
 * One name is one lock, whatever kind each taker asks for, on every
 * backend. EXCLUSIVE and SHARED are the two sides of a read-write lock. An
 * EXCLUSIVE taker of a name held as a SEMAPHORE waits until every permit is
 * back, and SEMAPHORE takers wait while an EXCLUSIVE holder holds it. A
 * SEMAPHORE taker asking other permits than those in force (while the name
 * has a holder), or a taker of a kind that cannot wait for the one in force
 * on this backend (SHARED beside a SEMAPHORE on file://), gets
 * DLOCK_ECONFLICT, its message naming the kind and permits in force, e.g.
 * `lock "pool" is a semaphore of 2 permits here (asked: exclusive)`. Of
 * takers of different kinds racing on a free name, never both succeed.
 * Once every holder has gone, the name may be taken as any kind again.
 */
typedef enum dlock_kind {
    DLOCK_EXCLUSIVE = 0, /* mutex, reentrant per handle */
    DLOCK_SHARED = 1,    /* reader side of a read-write lock */
    DLOCK_SEMAPHORE = 2  /* at most `permits` holders of one name */
} dlock_kind;

typedef enum dlock_state_t {
    DLOCK_STATE_IDLE = 0,    /* not held, not waiting */
    DLOCK_STATE_WAITING = 1, /* inside dlock_acquire */
    DLOCK_STATE_HELD = 2,
    DLOCK_STATE_LOST = 3     /* was held; lease or session is gone */
} dlock_state_t;

/* Capability flags of a backend (dlock_backend_info.caps). */
enum {
    DLOCK_CAP_FENCING = 1 << 0,       /* strictly increasing tokens */
    DLOCK_CAP_FAIR = 1 << 1,          /* FIFO waiting available */
    DLOCK_CAP_SHARED = 1 << 2,        /* read-write locks */
    DLOCK_CAP_SEMAPHORE = 1 << 3,     /* counting semaphores */
    DLOCK_CAP_SESSION = 1 << 4,       /* liveness bound to a session/connection */
    DLOCK_CAP_LEASE = 1 << 5,         /* liveness by lease + background renewal */
    DLOCK_CAP_NATIVE_BLOCKING = 1 << 6, /* waiters sleep in the server/kernel */
    DLOCK_CAP_ELECTION = 1 << 7,      /* native leader election */
    DLOCK_CAP_FENCING_WEAK = 1 << 8,  /* tokens can go back after server failure */
    DLOCK_CAP_CLAIMS = 1 << 9         /* keeps claims (dlock_claim_begin) */
};

/* Timeouts: 0 takes the URL's connect_timeout_ms= / op_timeout_ms=
 * parameter, else 2000 ms; negative values are DLOCK_EINVAL. */
typedef struct dlock_client_opts {
    int connect_timeout_ms;
    int op_timeout_ms; /* per request */
    /* Room for options of later versions: zeroed by dlock_client_opts_init
     * (always start from it), so that a program built now keeps its
     * meaning when the library grows. */
    uint64_t reserved_[6];
} dlock_client_opts;

typedef void (*dlock_lost_cb)(dlock_lock *lock, void *arg);
/* A warning that a held lease may soon be lost (dlock_lock_opts.on_warn). */
typedef void (*dlock_warn_cb)(dlock_lock *lock, void *arg);

typedef struct dlock_lock_opts {
    dlock_kind kind;
    unsigned permits; /* semaphore size, 1..DLOCK_PERMITS_MAX */
    int ttl_ms;       /* lease length for lease backends; 0: default (30000) */
    int fair;         /* 1 FIFO, 0 any order, -1 backend default; else EINVAL */
    /* Called once, from the client's background thread, when a held lock is
     * lost. Must not block; dlock_lost_fd is the poll-friendly alternative. */
    dlock_lost_cb on_lost;
    void *on_lost_arg;
    /* Called when no renewal has succeeded for so long that less than
     * warn_ms is left before the lock would be declared lost (what
     * dlock_valid_ms says), so that the holder can checkpoint first. Never
     * while renewals succeed; at most once per failing episode: a renewal
     * that succeeds ends the episode, and renewals that fail again later may
     * warn again. From the client's background thread, outside the
     * library's mutexes, as on_lost (it may call dlock_release; it must not
     * block); dlock_lock_free waits for a warning being told. Only locks the
     * core renews have it: lease backends, and ZooKeeper, whose session is
     * confirmed in the same way (the warning then says the session was not
     * confirmed for a while); a lock held by a database session or a kernel
     * lock is never warned (nothing on our clock runs out). NULL: none. */
    dlock_warn_cb on_warn;
    void *on_warn_arg;
    /* How long before the loss to warn: 0 is a third of the lease; at most
     * half of it (ttl_ms / 2), else DLOCK_EINVAL. A warning that long before
     * the loss would come between two healthy renewals. */
    int warn_ms;
    /* Give the lock up max_hold_ms after its acquisition (counted from
     * before its request was sent), even while renewals succeed: the core
     * releases it on the server and tells the loss as any other (state
     * DLOCK_STATE_LOST, dlock_lost_fd, on_lost; dlock_lock_errmsg says the
     * max-hold cap was reached), so a holder stuck in a loop does not keep
     * it forever. On every backend. 0: no cap; negative: DLOCK_EINVAL.
     * Re-entry does not restart it. */
    int max_hold_ms;
    /* Keep the lock taken until min_hold_ms after its acquisition (counted
     * from when dlock_acquire returned, the latest the grant can have
     * come), even when released sooner (ShedLock's
     * lockAtLeastFor: a job run from several hosts' cron, whose clocks
     * differ, must not run twice). A release before then, where the
     * backend has a lease on the server (Redis, Redlock, memcached, the SQL
     * lease modes; etcd, on a lease of the key's own, in whole seconds),
     * sets that lease to end at the minimum and returns at once: the lock
     * outlives the process. Elsewhere (a session: ZooKeeper, an SQL
     * connection, a kernel lock; and etcd's layout=etcdctl) dlock_release,
     * and what releases for you (dlock_lock_free, dlock_client_close),
     * waits until the minimum has passed, the lock held and renewed as
     * usual, then releases. A lock lost before it is lost all the same.
     * 0: none; negative or above a max_hold_ms cap: DLOCK_EINVAL. */
    int min_hold_ms;
    /* Room for options of later versions (see dlock_client_opts). */
    uint64_t reserved_[2];
} dlock_lock_opts;

DLOCK_EXTERN void dlock_client_opts_init(dlock_client_opts *opts);
DLOCK_EXTERN void dlock_lock_opts_init(dlock_lock_opts *opts);

/*
 * Open a client for `url` (NULL: $DLOCK_URL if set and not empty — under
 * `dlock run`, the whole URL that $DLOCK_URL_FD holds, see dlock(1) — else
 * the embedded file backend in its default directory; "" is DLOCK_EURL, so
 * that an unset variable never quietly makes a lock host-local). On
 * failure *out is NULL and the
 * reason is in dlock_client_errmsg(NULL) for the calling thread. A query
 * parameter the backend does not read is DLOCK_EURL naming it.
 */
DLOCK_EXTERN int dlock_client_open(dlock_client **out, const char *url,
                                   const dlock_client_opts *opts);
/* Releases every lock still held through this client's handles, then
 * closes it. The handles stay allocated, detached (an acquisition answers
 * DLOCK_EINVAL): free them with dlock_lock_free, before or after, which is
 * when the client's memory goes. Not while another thread uses the client
 * or its handles. */
DLOCK_EXTERN void dlock_client_close(dlock_client *client);
/* The message of the calling thread's last failed call on this client (""
 * if none): each thread has its own, as with errno, so threads sharing a
 * client never read each other's, and it may be read while other threads
 * use the client. The string stays valid, in this thread, until its next
 * call into the library with this client; copy it to keep it. NULL: the
 * calling thread's last dlock_client_open failure (or last client error). */
DLOCK_EXTERN const char *dlock_client_errmsg(const dlock_client *client);
/* The client's URL with any password replaced by "***"; lives as long as
 * the client's memory (see dlock_client_close). */
DLOCK_EXTERN const char *dlock_client_url(const dlock_client *client);
/* Name of the client's backend ("file", "redis", ...); static. */
DLOCK_EXTERN const char *dlock_client_backend(const dlock_client *client);
/* What this client offers (DLOCK_CAP_*): its backend's capabilities, or
 * fewer where the URL chose a mode that lacks some (postgres mode=advisory
 * has no lease and no semaphores). */
DLOCK_EXTERN unsigned dlock_client_caps(const dlock_client *client);

/*
 * Lock names: 1..DLOCK_NAME_MAX (200) bytes of printable ASCII other than '/' and '\\'; they
 * may not be "." or "..", nor start with '.', nor start or end with a space. Backends map names to keys,
 * paths and identifiers safely.
 */
DLOCK_EXTERN int dlock_name_valid(const char *name, char *errbuf, size_t errlen);

/* A handle holding a lock may keep a descriptor open (file://: one per held
 * lock). The library never changes the process's RLIMIT_NOFILE: a program
 * holding more locks than its soft limit allows raises it itself; past it
 * an acquisition fails with DLOCK_EIO and a message naming the limit. */
DLOCK_EXTERN int dlock_lock_new(dlock_lock **out, dlock_client *client, const char *name,
                                const dlock_lock_opts *opts);
/* Releases the lock if held, then frees the handle. */
DLOCK_EXTERN void dlock_lock_free(dlock_lock *lock);
/* The message of the last failed call on this handle ("" if none), or,
 * once the lock is lost, why it was lost. Valid until the next call on the
 * handle that can fail, or dlock_lock_free. */
DLOCK_EXTERN const char *dlock_lock_errmsg(const dlock_lock *lock);
/* The handle's lock name; valid until dlock_lock_free. */
DLOCK_EXTERN const char *dlock_lock_name(const dlock_lock *lock);

/*
 * Acquire: timeout_ms 0 tries once (DLOCK_EBUSY if held elsewhere), -1 waits
 * forever (any other negative value is DLOCK_EINVAL), > 0 waits at most
 * that long (DLOCK_ETIMEDOUT) — returning by
 * then plus at most 100 ms, whatever the servers do. Re-acquiring a held
 * handle increments its count and keeps its token. DLOCK_ECANCELED if
 * dlock_cancel was called while waiting.
 */
DLOCK_EXTERN int dlock_acquire(dlock_lock *lock, int timeout_ms);
/* Counts down one re-entry; releases at zero. DLOCK_ENOTHELD if not held,
 * DLOCK_ELOST if the lock had been lost (the handle returns to idle). */
DLOCK_EXTERN int dlock_release(dlock_lock *lock);
/* For a process done with both the lock and its client (dlock run): releases
 * the lock whatever its re-entry count, then closes the client as
 * dlock_client_close does, and returns what the release said (as
 * dlock_release: DLOCK_ELOST if the lock had been lost). Where the client's
 * lease ends with the client (etcd), the lease's end is the release: the
 * lock is checked to be still ours (a read) and its key goes with the
 * lease's revocation, one write instead of two. The handle stays allocated,
 * detached: free it with dlock_lock_free. DLOCK_ENOTHELD (the client still
 * closed) if not held. */
DLOCK_EXTERN int dlock_release_and_close(dlock_lock *lock);
/* Make a waiting dlock_acquire on this handle return DLOCK_ECANCELED; may be
 * called from any thread. A cancel that arrives while an acquisition is in
 * progress cancels it, even before it starts waiting (callers cannot tell
 * when waiting begins); one that arrives while none is in progress (before
 * dlock_acquire is called, or after it returned) is forgotten. */
DLOCK_EXTERN void dlock_cancel(dlock_lock *lock);
/* The fencing token of the current holding (0 when not held, lost
 * included: a lost holding's token must not be used). */
DLOCK_EXTERN uint64_t dlock_token(const dlock_lock *lock);
DLOCK_EXTERN dlock_state_t dlock_state(const dlock_lock *lock);
/* A descriptor that becomes readable when the held lock is lost. Owned by the
 * handle; valid until dlock_lock_free. */
DLOCK_EXTERN int dlock_lost_fd(dlock_lock *lock);
/*
 * How many more milliseconds the held lock is certain to be valid: for a
 * lease, the time until its deadline minus the loss margin (ttl/100 + 2 ms
 * for clock drift, plus ttl/10 but at most 100 ms for a late wake-up) — the
 * moment it is declared lost unless a renewal succeeds first; for a
 * ZooKeeper session, until 2/3 of the session timeout past the server's
 * last reply (when the lock is declared lost). -1 when the lock is held
 * but its liveness has no deadline on our clock (kernel lock, database
 * connection); 0
 * when it is not held (or that moment has passed). A supervisor that may be
 * stopped along with its process can use it to stop work in time. A
 * max_hold_ms cap is not counted: it is known from the start.
 */
DLOCK_EXTERN long long dlock_valid_ms(const dlock_lock *lock);
/* Re-entry count (0 when not held). */
DLOCK_EXTERN unsigned dlock_held_count(const dlock_lock *lock);

/*
 * The environment the own tool of the lock's layout gives a command it runs
 * under the lock, so that a script written for that tool runs unchanged
 * under dlock run: fn(var, value, arg) once per variable, while the lock is
 * held (etcd layout=etcdctl: ETCD_LOCK_KEY and ETCD_LOCK_REV, as
 * `etcdctl lock NAME CMD` sets them). No call where the layout has none.
 * Returns 0, fn's first non-zero return (which stops the walk), or
 * DLOCK_ENOTHELD.
 */
typedef int (*dlock_env_fn)(const char *var, const char *value, void *arg);
DLOCK_EXTERN int dlock_peer_env(dlock_lock *lock, dlock_env_fn fn, void *arg);

/*
 * Acquire all n locks or none, in canonical (byte-wise name) order so that
 * two callers never deadlock. The timeout covers the whole set.
 */
DLOCK_EXTERN int dlock_acquire_all(dlock_lock **locks, size_t n, int timeout_ms);
/* Releases every held lock in the set; returns the first error seen. */
DLOCK_EXTERN int dlock_release_all(dlock_lock **locks, size_t n);

/*
 * Leader election on the lock's name. campaign waits (as dlock_acquire) to
 * become leader and publishes `value` (<= DLOCK_VALUE_MAX bytes) for observers; resign
 * gives leadership up. dlock_leader copies the current leader's value into
 * buf (DLOCK_ENOENT when there is none); a buf too short for it (256
 * bytes always suffice) is DLOCK_EINVAL, with the size needed in the
 * client's message and the value cut short in buf.
 */
DLOCK_EXTERN int dlock_campaign(dlock_lock *lock, const char *value, int timeout_ms);
DLOCK_EXTERN int dlock_resign(dlock_lock *lock);
DLOCK_EXTERN int dlock_leader(dlock_client *client, const char *name, char *buf, size_t len);

/* What is known about a lock name without taking it. */
typedef struct dlock_info {
    int held;             /* 1 held, 0 free, -1 unknown */
    int holders;          /* number of holders (shared/semaphore), -1 unknown */
    int waiters;          /* -1 unknown */
    uint64_t token;       /* last token issued, 0 unknown */
    long long held_ms;    /* how long the current holder has held it, -1 unknown */
    long long lease_ms;   /* remaining lease, -1 none/unknown */
    char holder[DLOCK_HOLDER_MAX]; /* holder description ("pid 123 on host"), "" unknown */
    /* Room for facts of later versions: the library zeroes what it does
     * not fill. */
    uint64_t reserved_[8];
} dlock_info;

DLOCK_EXTERN int dlock_inspect(dlock_client *client, const char *name, dlock_info *info);

/*
 * An operator's forced release: every current holder of NAME loses it at
 * once (its next renewal fails, so it is told) and the next waiter gets it
 * with a higher fencing token, so a resource that checks tokens refuses the
 * old holder's writes. broken (may be NULL) receives what was held.
 * DLOCK_ENOTHELD when nothing was held; DLOCK_ENOTSUP where the backend
 * cannot take a lock from its holder (file: only the holder's process can).
 */
DLOCK_EXTERN int dlock_break(dlock_client *client, const char *name, dlock_info *broken);

/* Calls fn for every lock name starting with prefix (NULL: all). A non-zero
 * return from fn stops the walk and is returned. */
typedef int (*dlock_list_fn)(const char *name, void *arg);
DLOCK_EXTERN int dlock_list(dlock_client *client, const char *prefix, dlock_list_fn fn,
                            void *arg);

/*
 * Claims: work that must happen once (dlock once). A claim is a small
 * record on the backend, under the lock name KEY, that outlives the lock
 * and the process: the first caller runs the work under an exclusive lock
 * on KEY and records its outcome (a status and up to DLOCK_CLAIM_RESULT_MAX
 * bytes of result); every later caller within the retention time gets that
 * outcome instead of running it. The claim and the lock share KEY's name:
 * `dlock run KEY` and a claim on KEY exclude each other while one runs.
 *
 * At most once while the runner lives, at least once across crashes: a
 * runner that dies (or loses its lock) leaves a "running" record, and the
 * next caller runs the work again as attempt N+1 (dlock_claim_attempt), so
 * that it can check its own side effects first.
 *
 * Backends without DLOCK_CAP_CLAIMS (memcached: it may evict a record at
 * any moment; redlock) answer DLOCK_ENOTSUP with the reason.
 */
#define DLOCK_CLAIM_RESULT_MAX 65536  /* bytes of a recorded result */
#define DLOCK_FINGERPRINT_MAX 255     /* bytes of a fingerprint */

typedef struct dlock_claim dlock_claim;

typedef enum dlock_claim_state_t {
    DLOCK_CLAIM_RUN = 0,       /* begin: you run it (the lock is held) */
    DLOCK_CLAIM_DONE = 1,      /* it ran: here is its outcome */
    DLOCK_CLAIM_RUNNING = 2,   /* inspect: a runner started it (alive or dead) */
    DLOCK_CLAIM_ABANDONED = 3  /* inspect: its last runner gave it up */
} dlock_claim_state_t;

typedef struct dlock_claim_opts {
    /* How long a finished claim is kept (and replayed): 0 is one day. A
     * running record is kept at least a day, so that a crash is noticed. */
    long long retain_ms;
    /* 1: a claim whose recorded status is not 0 runs again (attempt N+1). */
    int retry_failed;
    /* What the work is (a hash of the request, say): a caller whose
     * fingerprint differs from the recorded one gets DLOCK_ECONFLICT with a
     * message naming both. Printable ASCII, at most DLOCK_FINGERPRINT_MAX
     * bytes; copied. NULL: none (never compared). */
    const char *fingerprint;
    /* Room for options of later versions (see dlock_client_opts). */
    uint64_t reserved_[6];
} dlock_claim_opts;

DLOCK_EXTERN void dlock_claim_opts_init(dlock_claim_opts *opts);

/*
 * Begin the claim on lock's name. lock: an idle EXCLUSIVE handle (any
 * other kind, or a held one, is DLOCK_EINVAL). Takes it as dlock_acquire
 * does (timeout_ms 0: DLOCK_EBUSY at once while another runs it; -1
 * forever; DLOCK_ETIMEDOUT; dlock_cancel works), then reads the record:
 *   - none, expired, abandoned, failed with retry_failed, or "running"
 *     (its runner died): *out is a claim in state DLOCK_CLAIM_RUN, the lock
 *     stays held (renewed as any lock) until dlock_claim_finish or
 *     dlock_claim_abandon, and a "running" record names this attempt.
 *   - finished: state DLOCK_CLAIM_DONE, the lock released at once.
 * Errors (the lock then not held, the reason in dlock_lock_errmsg):
 * DLOCK_ECONFLICT for a fingerprint other than the recorded one; DLOCK_EPROTO
 * for a record that is not one; DLOCK_ENOTSUP where the backend keeps no
 * claims; any of dlock_acquire's.
 */
DLOCK_EXTERN int dlock_claim_begin(dlock_lock *lock, const dlock_claim_opts *opts,
                                   int timeout_ms, dlock_claim **out);
/* Record the outcome of a claim in state RUN (status: your exit status;
 * result: len <= DLOCK_CLAIM_RESULT_MAX bytes, copied; NULL when len is 0),
 * kept for retain_ms, then release the lock. DLOCK_ELOST (nothing written)
 * if the lock was lost meanwhile or the record is no longer this attempt's:
 * another runner may have started. The claim is then DONE (on success) and
 * its accessors give what was written. Messages on the lock's handle. */
DLOCK_EXTERN int dlock_claim_finish(dlock_claim *claim, int status, const void *result,
                                    size_t len);
/* Give a claim in state RUN up without an outcome: the record says
 * "abandoned" (its attempt number kept, so that the next caller runs
 * attempt N+1 and knows an earlier one started), then the lock is
 * released. DLOCK_ELOST as dlock_claim_finish. */
DLOCK_EXTERN int dlock_claim_abandon(dlock_claim *claim);
/* Free a claim. One still in state RUN (neither finished nor abandoned)
 * is left as a crashed runner leaves it: its lock is released and the
 * record still says running, so the next caller runs attempt N+1. */
DLOCK_EXTERN void dlock_claim_free(dlock_claim *claim);

/* What a claim says. Strings live until dlock_claim_free. */
DLOCK_EXTERN dlock_claim_state_t dlock_claim_state(const dlock_claim *claim);
/* Attempt number: for RUN, this caller's (1 the first); else the recorded one. */
DLOCK_EXTERN unsigned dlock_claim_attempt(const dlock_claim *claim);
/* The recorded exit status (DONE), else 0. */
DLOCK_EXTERN int dlock_claim_status(const dlock_claim *claim);
/* The recorded result (DONE; *len its length, may be 0), NUL-terminated
 * past *len; "" otherwise. len may be NULL. */
DLOCK_EXTERN const char *dlock_claim_result(const dlock_claim *claim, size_t *len);
/* Who ran it ("pid 123 on host"), when it started and finished (ms since
 * the epoch; 0 unknown or not finished), its fingerprint ("" none). */
DLOCK_EXTERN const char *dlock_claim_by(const dlock_claim *claim);
DLOCK_EXTERN long long dlock_claim_started_ms(const dlock_claim *claim);
DLOCK_EXTERN long long dlock_claim_finished_ms(const dlock_claim *claim);
DLOCK_EXTERN const char *dlock_claim_fingerprint(const dlock_claim *claim);

/* Read KEY's record without taking its lock: *out a claim in state DONE,
 * RUNNING or ABANDONED (free it with dlock_claim_free); DLOCK_ENOENT when
 * there is none. Messages: dlock_client_errmsg(client). */
DLOCK_EXTERN int dlock_claim_inspect(dlock_client *client, const char *key, dlock_claim **out);
/* An operator's reset: forget KEY's record, so that the next caller runs
 * it as attempt 1 (a runner still running is not stopped: break its lock
 * too). DLOCK_ENOENT when there was none. */
DLOCK_EXTERN int dlock_claim_forget(dlock_client *client, const char *key);

/* The registry of backends, built or not. */
typedef struct dlock_backend_info {
    const char *name;     /* "file", "redis", ... */
    const char *schemes;  /* "redis redis+sentinel redis+cluster" */
    unsigned caps;        /* DLOCK_CAP_* */
    int available;        /* 1 if usable in this build */
    const char *missing;  /* what is missing when not available */
    const char *liveness; /* how a dead holder loses the lock */
    const char *fencing;  /* what the tokens promise */
} dlock_backend_info;

/* Number of registered backends; dlock_backend_at returns NULL past the end. */
DLOCK_EXTERN size_t dlock_backend_count(void);
DLOCK_EXTERN const dlock_backend_info *dlock_backend_at(size_t i);

#ifdef __cplusplus
}
#endif
#endif /* DLOCK_H */
