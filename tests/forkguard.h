/*
 * forkguard.h — included first into every test program (tests/CMakeLists.txt).
 * A child forked from a process that runs threads (a client's: ZooKeeper's
 * I/O thread, the lease renewal) may inherit a lock one of them held at
 * that moment, and waits on it for ever when it runs library code. The
 * tests fork workers often: fork() here fails the child at once, saying
 * where, when the parent runs more than one thread. A child that only
 * execs calls (fork)() to skip the check.
 */
#ifndef DLOCK_FORKGUARD_H
#define DLOCK_FORKGUARD_H

#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* TSan's runtime keeps a thread of its own: nothing to count there. */
#if defined(__SANITIZE_THREAD__)
#define FORKGUARD_TSAN 1
#elif defined(__has_feature)
#if __has_feature(thread_sanitizer)
#define FORKGUARD_TSAN 1
#endif
#endif

static inline long forkguard_threads(void)
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
    char *p = strrchr(buf, ')'); /* num_threads is field 20; the name may hold anything */
    for (int field = 2; p && field < 20; field++)
        p = strchr(p + 1, ' ');
    return p ? strtol(p + 1, NULL, 10) : -1;
}

static inline pid_t forkguard_fork(const char *file, int line)
{
    long threads = forkguard_threads();
#ifdef FORKGUARD_TSAN
    threads = 1;
#endif
    pid_t pid = fork();
    if (pid == 0 && threads > 1) {
        fprintf(stderr, "%s:%d: forked from a process running %ld threads: the child could "
                        "hang on a lock one of them held; fork before opening a client\n",
                file, line, threads);
        _exit(97);
    }
    return pid;
}
#define fork() forkguard_fork(__FILE__, __LINE__)

#endif
