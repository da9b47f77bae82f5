/* SPDX-License-Identifier: MIT */
/*
 * proc_threads.h — how many threads this process runs, for the places that
 * fork without exec and must not do so from a threaded process (the bench
 * and check harness, src/cli/bench_common.c; the tests, tests/forkguard.h).
 */
#ifndef DLOCK_PROC_THREADS_H
#define DLOCK_PROC_THREADS_H

#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* The threads of this process now (num_threads of /proc/self/stat), or -1
 * if unknown. */
static inline long dl_proc_threads(void)
{
    char buf[1024];
    int fd = open("/proc/self/stat", O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return -1;
    ssize_t n = read(fd, buf, sizeof buf - 1);
    close(fd);
    if (n <= 0)
        return -1;
    buf[n] = '\0';
    /* num_threads is the 20th field; the name (2nd) may hold anything, so
     * count from the last ')': state is field 3. */
    char *p = strrchr(buf, ')');
    for (int field = 2; p && field < 20; field++)
        p = strchr(p + 1, ' ');
    return p ? strtol(p + 1, NULL, 10) : -1;
}

#if defined(__SANITIZE_THREAD__)
#define DL_PROC_TSAN 1
#elif defined(__has_feature)
#if __has_feature(thread_sanitizer)
#define DL_PROC_TSAN 1
#endif
#endif

/* The threads that make a fork without exec unsafe now: this process's
 * (more than one: a child may inherit a lock one of them held). Under TSan
 * its runtime keeps a thread of its own that cannot be told apart: 1. */
static inline long dl_proc_threads_at_fork(void)
{
#ifdef DL_PROC_TSAN
    return 1;
#else
    return dl_proc_threads();
#endif
}

#endif
