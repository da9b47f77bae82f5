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

/* The struct of type whose field member ptr points at. */
#define dl_container_of(ptr, type, member) ((type *)((char *)(ptr) - offsetof(type, member)))

/* ---- idle connections ---------------------------------------------------- */

/* A client's idle connections: a LIFO list (the most recently used first,
 * the one most likely alive) threaded through a dl_pooled each connection
 * embeds. The pool never opens, probes or closes a connection: the backend
 * does, before take returns it to a caller and when put refuses it. */
typedef struct dl_pooled {
    struct dl_pooled *next;
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
/* From now on put refuses; every idle connection is handed to close. */
void dl_pool_stop(dl_pool *p, void (*close)(dl_pooled *));
/* After dl_pool_stop, with no caller left. */
void dl_pool_fini(dl_pool *p);

/* Whether an idle connection's socket is readable, or fd < 0: with nothing
 * due on it, that is the server ending it (its goodbye, or the close). */
bool dl_idle_socket_ended(int fd);

/* TCP keepalive on a connection's socket: a peer gone without a word (a
 * host down, a cut) is found within about 5 s of silence (2 s idle, then
 * 3 probes 1 s apart), where the system's default waits two hours. */
void dl_socket_keepalive(int fd);

#endif
