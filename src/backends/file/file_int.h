/* SPDX-License-Identifier: MIT */
/*
 * file_int.h — the embedded backend's client, for its files (file.c, the
 * lock; tools.c, the harness's operations).
 */
#ifndef DLOCK_FILE_INT_H
#define DLOCK_FILE_INT_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <sys/types.h>

#include "internal.h"

typedef struct file_client {
    /* The directory is created with the first lock taken, not at open: a
     * read-only command (status, list) leaves no trace. mu guards dirfd
     * (-1 until the directory is open) and filemode, set together once. */
    pthread_mutex_t mu;
    int dirfd;
    char *dir;
    bool sync;       /* fdatasync the token on every acquisition */
    mode_t filemode; /* lock files get the directory's rw bits */
    bool shared;     /* the directory is writable by all (sticky) */
    char self[300];  /* "pid N on host" */
    atomic_int call_sock; /* unbound datagram socket releases call from; -1 until needed */
} file_client;

file_client *fc_of(dlock_client *c);

#endif
