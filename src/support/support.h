/* SPDX-License-Identifier: MIT */
/*
 * support.h — what backends share beneath their own logic: waiting on a
 * descriptor with a deadline and a cancel descriptor, napping, backoff,
 * deadlines. One way to do each, so that deadline and cancel semantics are
 * written once (issue 25). Times are CLOCK_MONOTONIC nanoseconds
 * (dl_now_ns, dl_deadline_in); a deadline of -1 means none.
 */
#ifndef DLOCK_SUPPORT_H
#define DLOCK_SUPPORT_H

#include <pthread.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "internal.h"
#include "support/tell.h"

/* Wait until fd has one of events (0; *revents, when not NULL, gets what
 * poll said of it), until_ns passes (DLOCK_ETIMEDOUT; -1: no bound, 0:
 * already passed) or cancel_fd (-1: none) is readable (DLOCK_ECANCELED,
 * which wins over fd). DLOCK_EIO when poll itself fails; EINTR is retried. */
int dl_wait_fd(int fd, short events, int64_t until_ns, int cancel_fd, short *revents);

/* Sleep ns (rounded up to whole milliseconds), or until cancel_fd (-1:
 * none) is readable: 0, or DLOCK_ECANCELED. */
int dl_nap_ns(int64_t ns, int cancel_fd);

/* Jittered exponential backoff (a retry loop's pauses): the next pause is
 * half of *step_ns plus a random part of up to its other half, and *step_ns
 * doubles up to max_ns. Start *step_ns at the first pause wanted. */
int64_t dl_backoff_ns(int64_t *step_ns, int64_t max_ns);

/* A waiter carries on through what passes (an election, a failover, a
 * member that went): after a try failed with *rc DLOCK_EUNREACHABLE, pause
 * (the jittered backoff from 50 ms, doubling to 800 ms: the waiters of
 * many clients cut by one failover do not come back in step) and say to
 * try again (true), while deadline_ns allows; else sleep out the rest of
 * the wait and say no (false, *rc unchanged: the caller tells why). A
 * try-once acquisition (deadline_ns 0) never tries again. *rc becomes
 * DLOCK_ECANCELED when cancel_fd is readable during the pause. *step_ns
 * starts at 0. */
bool dl_retry_transient(int *rc, int64_t deadline_ns, int cancel_fd, int64_t *step_ns);

/* n bytes of s as lowercase hex digits into out (2n+1 bytes). */
void dl_hex_encode(const void *s, size_t n, char *out);
/* Hex digits back into bytes: 0 with *out (malloc'd, NUL-terminated) and
 * *len, DLOCK_EPROTO for a string that is not hex, or DLOCK_ENOMEM. */
int dl_hex_decode(const char *s, char **out, size_t *len);

/* printf into a malloc'd string (NULL: out of memory). */
char *dl_fmt_alloc(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
/* A LIKE pattern into pat (len >= 2: 2 * the name limit + 2 holds any
 * name) matching the names that start with prefix (NULL: all): its own %,
 * _ and \ escaped with \ (both servers' default LIKE escape), then %. */
void dl_like_prefix(const char *prefix, char *pat, size_t len);
/* A claim record's row as a SQL backend reads it (hex: its value as hex
 * digits, NULL when there is no row; ver: its version in decimal) into
 * *val (malloc'd), *len and *ver: 0, or the error set on c about key. */
int dl_sql_claim_read(dlock_client *c, const char *key, const char *hex, const char *ver_s,
                      char **val, size_t *len, uint64_t *ver);

/* The struct of type whose field member ptr points at. */
#define dl_container_of(ptr, type, member) ((type *)((char *)(ptr) - offsetof(type, member)))

/* ---- idle connections ---------------------------------------------------- */

/* A client's idle connections: a LIFO list (the most recently used first,
 * the one most likely alive) threaded through a dl_pooled each connection
 * embeds. The pool never opens, probes or closes a connection: the backend
 * does, before take returns it to a caller and when put refuses it. */
typedef struct dl_pooled {
    struct dl_pooled *next;
    int64_t idle_since_ns; /* when put */
} dl_pooled;

typedef struct dl_pool {
    pthread_mutex_t mu;
    dl_pooled *idle;
    int nidle, max_idle;
    bool stopping;
} dl_pool;

void dl_pool_init(dl_pool *p, int max_idle);
/* The most recent idle connection for which want(it, arg) is true, else
 * the most recent of all (want NULL: the most recent); NULL when none. */
dl_pooled *dl_pool_take(dl_pool *p, bool (*want)(const dl_pooled *, const void *),
                        const void *arg);
/* Whether an idle connection for which want(it, arg) is true is pooled. */
bool dl_pool_has(dl_pool *p, bool (*want)(const dl_pooled *, const void *), const void *arg);
/* Pool it; false when the pool is full or stopping: the caller closes it. */
bool dl_pool_put(dl_pool *p, dl_pooled *it);
/* Every idle connection taken out and handed to close (outside the pool's
 * mutex); the pool stays open. */
void dl_pool_drain(dl_pool *p, void (*close)(dl_pooled *));
/* From now on put refuses; every idle connection is handed to close. */
void dl_pool_stop(dl_pool *p, void (*close)(dl_pooled *));
/* Whether a call that failed with rc on a connection the pool gave
 * (reused) goes again, on the next one: a connection that died while it
 * idled (a server restart, its idle limit, a KILL) fails as unreachable,
 * which says nothing of the server. A new connection is never reused, so
 * the pool's size bounds the tries. The callers' calls may run twice (a
 * read, a token draw, a take whose dead session the server let go). */
static inline bool dl_pool_again(int rc, bool reused)
{
    return rc == DLOCK_EUNREACHABLE && reused;
}
/* After dl_pool_stop, with no caller left. */
void dl_pool_fini(dl_pool *p);

/* Whether an idle connection just taken (it, its socket fd) was ended by
 * its server while it idled: its socket is readable, or fd < 0 (with
 * nothing due on it, that is the server's goodbye or the close). Asked
 * only of one idle DL_POOL_TRUSTED_MS or more: the question is a system
 * call on every cycle of a lock (1 to 2.6 us here, a few percent of a
 * PostgreSQL or memcached cycle), and a connection ended since its last
 * use is caught as one ended just after the question is: its call fails
 * unreachable and goes again on the next (dl_pool_again). Servers end
 * idle sessions after seconds (idle limits) or all at once (a restart). */
#define DL_POOL_TRUSTED_MS 50
bool dl_pool_idle_ended(const dl_pooled *it, int fd);

/* TCP keepalive on a connection's socket: a peer gone without a word (a
 * host down, a cut) is found within about 5 s of silence (2 s idle, then
 * 3 probes 1 s apart), where the system's default waits two hours. */
void dl_socket_keepalive(int fd);

/* ---- telling holders of a loss: support/tell.h (the core uses it too) - */

/* ---- sessions that hold locks (PostgreSQL, MySQL) ----------------------- */

/* A backend whose lock lives exactly as long as one server session (a
 * connection it keeps for that lock) embeds a dl_session in the connection
 * and hands it to the client's dl_session_watch: a thread that waits on the
 * sockets of watched sessions (one epoll set, which the callers change
 * themselves: taking a lock or letting it go wakes no thread) and reports
 * one the server ended (a restart, a kill, dlock break) as its lock's loss
 * at once. A session is watched only while no call runs on it: take it
 * off for a call, put it back. */
typedef struct dl_session {
    int fd;
    dlock_lock *lock;
    struct dl_session *next; /* on the watch list */
    bool lost;               /* the watcher found it ended (why says how) */
    char why[256];
} dl_session;

#define DL_SWATCH_THREAD "dlock-sessions" /* the watcher thread's name (ps -L, gdb) */

typedef struct dl_session_watch {
    /* Called (watch mutex held) when s's socket is readable while idle:
     * whether the session has ended, with a one-line reason in why; it may
     * read what the server sent. */
    bool (*gone)(dl_session *s, char *why, size_t len);
    pthread_mutex_t mu;
    dl_teller teller; /* of losses found */
    dl_session *list;
    pthread_t thread;
    bool started, stopping;
    int wake_fd, epoll_fd;
} dl_session_watch;

/* Whether a call may use l's session s (NULL: l holds none), taken off the
 * watch list for it: 0, or the error set on l (DLOCK_ENOTHELD; DLOCK_ELOST
 * when the watcher found the server ended it). */
int dl_session_usable(dlock_lock *l, const dl_session *s);

/* 0, or DLOCK_EIO when no eventfd or epoll set can be made. */
int dl_swatch_init(dl_session_watch *w, bool (*gone)(dl_session *, char *, size_t));
/* Stops the thread; hands each session still watched (its lock's loss
 * not reported) to drop, which closes it. */
void dl_swatch_fini(dl_session_watch *w, void (*drop)(dl_session *s));
/* Watch s (socket fd) for lock l from now on; DLOCK_EIO (why) when the
 * thread cannot start. */
int dl_swatch_add(dl_session_watch *w, dl_session *s, dlock_lock *l, int fd, char *why,
                  size_t wlen);
/* Stop watching s (for a call on it, or for good): false when the watcher
 * found it ended (s->why says how; its loss is reported). */
bool dl_swatch_remove(dl_session_watch *w, dl_session *s);

/* ---- queues of waiters (ZooKeeper's sequential nodes, etcd's keys) ----- */

/* The kind of one entry of a queue ordered by arrival: 'x' exclusive, 'r'
 * shared, 's' semaphore of `permits`. Entries of a backend's queue array
 * start with a dl_qpos, so that one rule serves every queue backend. */
typedef struct dl_qpos {
    char kind;
    unsigned permits;
} dl_qpos;

enum { DL_Q_HOLDS = -1, DL_Q_ANY = -2 };

/* Whether entry i of queue (entries `stride` bytes apart) holds
 * (DL_Q_HOLDS), else the index of the entry whose going can let it in, or
 * DL_Q_ANY for the first semaphore waiter (any holder's going lets it in).
 * Semaphore waiters past the first watch their predecessor, which must
 * touch its entry when it takes a permit. */
int dl_queue_blocker(const void *queue, size_t stride, int i);
/* The entry before i whose kind entry i cannot join, or -1: one name is
 * one lock, and the first semaphore entry of a queue sets the permits in
 * force (a semaphore entry asking others is refused, DLOCK_ECONFLICT). */
int dl_queue_conflict(const void *queue, size_t stride, int i);
/* How many of the n entries of queue hold; *first: the first of them, or
 * -1 when none does. */
int dl_queue_holders(const void *queue, size_t stride, int n, int *first);
/* "x", "r" or "sN" for l's kind into buf. */
void dl_qkind_format(const dlock_lock *l, char *buf, size_t len);
/* Parse a kind written by dl_qkind_format at s: the byte after it, or NULL. */
const char *dl_qkind_parse(const char *s, dl_qpos *out);

/* A queue backend's half of dl_queue_acquire: how it reads its queue and
 * how it waits on one entry. */
typedef struct dl_queue_waiter {
    /* The queue as it stands (the first call may give the read that queued
     * us): entries start with a dl_qpos, stride bytes apart, ours at *i
     * (-1: ours is gone). The array lives until the next call. 0, or a
     * DLOCK_E* with the lock's message set. */
    int (*read)(void *ctx, const void **queue, size_t *stride, int *i);
    /* Wait until entry b of the last read (DL_Q_ANY: any entry) may have
     * gone; *in when the backend knows that this lets us in (no read
     * needed). 0; DLOCK_ECANCELED or DLOCK_ETIMEDOUT (the loop says so); or
     * another DLOCK_E* with the lock's message set. */
    int (*wait)(void *ctx, int b, bool *in);
    void *ctx;
    /* What the error says when our entry is gone (DLOCK_EUNREACHABLE): how
     * that comes about, and where (the redacted URL). */
    const char *vanished, *where;
} dl_queue_waiter;

/* Wait in l's queue until its entry holds, by the queue rule: 0 (held), or
 * a DLOCK_E* with l's message set — DLOCK_EBUSY when deadline_ns is 0 (try
 * once) and it does not hold, DLOCK_ECONFLICT for a kind the name refuses.
 * *waited is set once it waits. */
int dl_queue_acquire(dlock_lock *l, int64_t deadline_ns, const dl_queue_waiter *w,
                     bool *waited);

#endif
