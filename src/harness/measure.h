/* SPDX-License-Identifier: MIT */
/*
 * measure.h — what `dlock bench` and `dlock check` share: clocks, worker
 * process groups, interruption, percentiles and the file backend's directory
 * (bench_common.c).
 *
 * Both commands fork worker processes into one process group of their own,
 * so that a terminal's ^C reaches only the harness, which then kills the
 * whole group, reaps every child and reports.
 */
#ifndef DLOCK_CLI_MEASURE_H
#define DLOCK_CLI_MEASURE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

/* ---- clocks (CLOCK_MONOTONIC: comparable between processes of a host) -- */

int64_t ms_now_ns(void);
/* Busy-wait until the monotonic clock reaches t (no syscall but the clock's). */
void ms_spin_until(int64_t t);
/* Sleep ns nanoseconds; returns early (non-zero) when a signal arrived. */
int ms_sleep_ns(int64_t ns);

/* ---- interruption ------------------------------------------------------ */

/* Catch SIGINT, SIGTERM and SIGHUP in the harness: they set a flag that the
 * harness polls (no SA_RESTART, so sleeps end early). */
int ms_signals_install(void);
/* Put the dispositions back (on the way out, and in children). */
void ms_signals_restore(void);
/* The first terminating signal received, 0 if none. */
int ms_signal_pending(void);

/* ---- worker process groups -------------------------------------------- */

typedef struct ms_group {
    pid_t pgid;   /* 0 until the first child, then the first child's pid */
    int leader_reaped; /* then pgid may name someone else's group: never signal it */
    pid_t *pids;  /* children not yet reaped (0: free slot) */
    size_t n, cap;
} ms_group;

/*
 * Children run on after fork without exec (they share the run's memory), so
 * the harness must be single-threaded whenever it forks: a library client's
 * thread could hold a lock (glibc's, in getaddrinfo) that the child then
 * waits on for ever. Clients that run threads live in child processes of
 * their own (check_servers.c's adapter process; the workers).
 */
/* fork() after flushing stdio, refused (-1, EDEADLK, a message on stderr)
 * when the process runs more than one thread. */
pid_t ms_fork(void);

/*
 * Fork a child into the group (ms_fork). The child gets default signal handling, dies
 * with its parent (PR_SET_PDEATHSIG), runs fn(arg) and _exits with its
 * return value. Returns the pid, or -1 with errno set.
 */
pid_t ms_spawn(ms_group *g, int (*fn)(void *), void *arg);
/* Forget a pid the caller reaped itself. */
void ms_forget(ms_group *g, pid_t pid);
/* A child that has ended since the last call (WNOHANG): its pid and wait
 * status; 0 when none. Stopped children are not reported. */
pid_t ms_reap_one(ms_group *g, int *status);
/* Wait up to timeout_ns for every child to end by itself; 0 if all did. */
int ms_wait_all(ms_group *g, int64_t timeout_ns);
/* SIGKILL the group and every known child, reap them all, free the list. */
void ms_group_destroy(ms_group *g);
/* Number of children not yet reaped. */
size_t ms_alive(const ms_group *g);

/* ---- statistics -------------------------------------------------------- */

/* Sort v ascending (in place). */
void ms_sort_i64(int64_t *v, size_t n);
/* Nearest-rank percentile of sorted v, permille (500 = p50), in ns. */
int64_t ms_pct(const int64_t *sorted, size_t n, unsigned permille);
/* The next of a cheap pseudo-random sequence (xorshift64*) from *s (never
 * 0): enough to spread names and pauses, not for anything secret. */
uint64_t ms_rand(uint64_t *s);

/* ---- the embedded backend ---------------------------------------------- */


/* Raise RLIMIT_NOFILE's soft limit to the hard one; returns the new soft
 * limit (or the old one if it cannot be raised). */
long ms_raise_nofile(void);

#endif
