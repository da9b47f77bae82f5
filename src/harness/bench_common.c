/* SPDX-License-Identifier: MIT */
/* bench_common.c — clocks, worker groups and statistics for bench and check. */
#include "measure.h"
#include "proc_threads.h"

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

/* ---- clocks ------------------------------------------------------------ */

int64_t ms_now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

void ms_spin_until(int64_t t)
{
    while (ms_now_ns() < t) {
    }
}

int ms_sleep_ns(int64_t ns)
{
    if (ns <= 0)
        return 0;
    struct timespec ts = {.tv_sec = ns / 1000000000LL, .tv_nsec = ns % 1000000000LL};
    return nanosleep(&ts, NULL) != 0;
}

/* ---- interruption ------------------------------------------------------ */

static volatile sig_atomic_t pending_sig;
static const int caught[] = {SIGINT, SIGTERM, SIGHUP};
static struct sigaction saved[3];
static int installed;

static void on_signal(int sig)
{
    if (!pending_sig)
        pending_sig = sig;
}

int ms_signals_install(void)
{
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_signal;
    sigemptyset(&sa.sa_mask);
    sa.sa_flags = 0; /* no SA_RESTART: a sleeping harness must wake up */
    for (size_t i = 0; i < sizeof caught / sizeof caught[0]; i++)
        if (sigaction(caught[i], &sa, &saved[i]) != 0)
            return -1;
    installed = 1;
    /* A harness started from a script that blocked these would never
     * notice them. */
    sigset_t set;
    sigemptyset(&set);
    for (size_t i = 0; i < sizeof caught / sizeof caught[0]; i++)
        sigaddset(&set, caught[i]);
    return sigprocmask(SIG_UNBLOCK, &set, NULL);
}

void ms_signals_restore(void)
{
    if (!installed)
        return;
    for (size_t i = 0; i < sizeof caught / sizeof caught[0]; i++)
        (void)sigaction(caught[i], &saved[i], NULL);
    installed = 0;
}

int ms_signal_pending(void)
{
    return pending_sig;
}

/* ---- worker process groups -------------------------------------------- */

static int track(ms_group *g, pid_t pid)
{
    for (size_t i = 0; i < g->n; i++)
        if (g->pids[i] == 0) {
            g->pids[i] = pid;
            return 0;
        }
    if (g->n == g->cap) {
        size_t cap = g->cap ? g->cap * 2 : 16;
        pid_t *p = realloc(g->pids, cap * sizeof *p);
        if (!p)
            return -1;
        g->pids = p;
        g->cap = cap;
    }
    g->pids[g->n++] = pid;
    return 0;
}

pid_t ms_fork(void)
{
    long threads = dl_proc_threads_at_fork();
    if (threads > 1) {
        /* A thread of a client library (ZooKeeper's I/O thread in
         * getaddrinfo, say) may hold a lock at the moment of the fork,
         * and the child would wait on it for ever: refuse, loudly. */
        fprintf(stderr,
                "dlock: internal error: refusing to fork from a process running %ld threads "
                "(a client is open in the harness)\n",
                threads);
        errno = EDEADLK;
        return -1;
    }
    fflush(NULL); /* buffered output must not be written twice */
    return fork();
}

pid_t ms_spawn(ms_group *g, int (*fn)(void *), void *arg)
{
    pid_t parent = getpid();
    /* Room in the list first: a child we could not track would escape
     * the clean-up. */
    if (track(g, -1) != 0) {
        errno = ENOMEM;
        return -1;
    }
    ms_forget(g, -1);
    /* After the leader is gone its pid may be someone else's group: a new
     * child then starts a group of its own (it is still killed by pid). */
    pid_t pgid = g->leader_reaped ? 0 : g->pgid;
    pid_t pid = ms_fork();
    if (pid < 0)
        return -1;
    if (pid == 0) {
        /* Join the group before anything else, so that a kill of the group
         * from now on reaches us. */
        (void)setpgid(0, pgid);
        (void)prctl(PR_SET_PDEATHSIG, SIGKILL, 0, 0, 0);
        if (getppid() != parent)
            _exit(99); /* the harness died before the death signal was armed */
        ms_signals_restore();
        signal(SIGPIPE, SIG_DFL);
        sigset_t none;
        sigemptyset(&none);
        (void)sigprocmask(SIG_SETMASK, &none, NULL);
        _exit(fn(arg));
    }
    /* Both sides set the group: whichever runs first wins the race. */
    if (setpgid(pid, pgid) != 0) {
        /* the child did it first, or has already exited: either is fine */
    }
    if (g->pgid == 0)
        g->pgid = pid;
    (void)track(g, pid); /* cannot fail: room was made above */
    return pid;
}

void ms_forget(ms_group *g, pid_t pid)
{
    if (pid > 0 && pid == g->pgid)
        g->leader_reaped = 1;
    for (size_t i = 0; i < g->n; i++)
        if (g->pids[i] == pid) {
            g->pids[i] = 0;
            return;
        }
}

pid_t ms_reap_one(ms_group *g, int *status)
{
    for (size_t i = 0; i < g->n; i++) {
        if (g->pids[i] <= 0)
            continue;
        int st;
        pid_t r = waitpid(g->pids[i], &st, WNOHANG);
        if (r == g->pids[i] || (r < 0 && errno == ECHILD)) {
            pid_t pid = g->pids[i];
            g->pids[i] = 0;
            if (pid == g->pgid)
                g->leader_reaped = 1;
            if (status)
                *status = r < 0 ? 0 : st;
            return pid;
        }
    }
    return 0;
}

size_t ms_alive(const ms_group *g)
{
    size_t n = 0;
    for (size_t i = 0; i < g->n; i++)
        n += g->pids[i] > 0;
    return n;
}

int ms_wait_all(ms_group *g, int64_t timeout_ns)
{
    int64_t end = ms_now_ns() + timeout_ns;
    for (;;) {
        while (ms_reap_one(g, NULL) > 0) {
        }
        if (ms_alive(g) == 0)
            return 0;
        if (ms_now_ns() >= end)
            return -1;
        ms_sleep_ns(2000000);
    }
}

void ms_group_destroy(ms_group *g)
{
    /* While the leader is unreaped its pid (the group id) cannot be reused,
     * so the group is certainly ours. */
    if (g->pgid > 0 && !g->leader_reaped)
        (void)kill(-g->pgid, SIGKILL);
    for (size_t i = 0; i < g->n; i++) {
        if (g->pids[i] <= 0)
            continue;
        /* Also by pid: a child that had not joined the group yet. */
        (void)kill(g->pids[i], SIGKILL);
        while (waitpid(g->pids[i], NULL, 0) < 0 && errno == EINTR) {
        }
        g->pids[i] = 0;
    }
    free(g->pids);
    g->pids = NULL;
    g->n = g->cap = 0;
    g->pgid = 0;
    g->leader_reaped = 0;
}

/* ---- statistics -------------------------------------------------------- */

static int cmp_i64(const void *a, const void *b)
{
    int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
    return (x > y) - (x < y);
}

void ms_sort_i64(int64_t *v, size_t n)
{
    if (n > 1)
        qsort(v, n, sizeof *v, cmp_i64);
}

int64_t ms_pct(const int64_t *sorted, size_t n, unsigned permille)
{
    if (n == 0)
        return 0;
    /* nearest rank: the smallest value with at least p of the values at or
     * below it */
    size_t rank = (size_t)(((unsigned long long)n * permille + 999) / 1000);
    if (rank < 1)
        rank = 1;
    if (rank > n)
        rank = n;
    return sorted[rank - 1];
}

uint64_t ms_rand(uint64_t *s)
{
    uint64_t x = *s;
    x ^= x >> 12;
    x ^= x << 25;
    x ^= x >> 27;
    *s = x;
    return x * 0x2545F4914F6CDD1DULL;
}

long ms_raise_nofile(void)
{
    struct rlimit rl;
    if (getrlimit(RLIMIT_NOFILE, &rl) != 0)
        return 1024;
    if (rl.rlim_cur < rl.rlim_max) {
        rlim_t old = rl.rlim_cur;
        rl.rlim_cur = rl.rlim_max;
        if (setrlimit(RLIMIT_NOFILE, &rl) != 0)
            rl.rlim_cur = old;
    }
    return rl.rlim_cur == RLIM_INFINITY || rl.rlim_cur > 1L << 30 ? 1L << 30 : (long)rl.rlim_cur;
}
