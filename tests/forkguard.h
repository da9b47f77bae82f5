/* SPDX-License-Identifier: MIT */
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

#include "../src/proc_threads.h"

static inline pid_t forkguard_fork(const char *file, int line)
{
    long threads = dl_proc_threads_at_fork();
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
