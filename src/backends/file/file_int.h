/* SPDX-License-Identifier: MIT */
/*
 * file_int.h — the embedded backend's client and its lock files' data, for
 * its files (file.c, the lock; format.c, the data's parsers; tools.c, the
 * harness's operations).
 */
#ifndef DLOCK_FILE_INT_H
#define DLOCK_FILE_INT_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
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
    /* The listener of the last wait a call ended, closed by the next release
     * once it has called its own successor (see file.c, "the next in line's
     * call"): closing it was a system call on the hand-over's path. One per
     * client at most; -1 when none. */
    atomic_int answered;
} file_client;

file_client *fc_of(dlock_client *c);

/* ---- the lock file's data (format.c) ---- */

/* The header at offset 0 (see file.c, "The header"): the last token and
 * the next ticket, each 20 digits. */
#define MAGIC_OLD "dlock1 " /* dlock up to the 0.1.0 packages */
#define MAGIC "dlock2 "
#define TOKEN_LEN 28                /* MAGIC + 20 digits + "\n" */
#define HEADER_LEN (TOKEN_LEN + 26) /* + "next " + 20 digits + "\n" */
/* One holder's record (who, since when, token, leader value). */
#define RECORD_LEN 1024

/* The first n bytes of a lock file (n <= HEADER_LEN; 0: an empty file):
 * false when they are not a header. *split: a "dlock2" one. */
bool fh_parse_header(const char *buf, size_t n, uint64_t *token, uint64_t *next, bool *split);
/* The header of token and next, as a "dlock2" one, NUL-terminated. */
void fh_format_header(char buf[HEADER_LEN + 1], uint64_t token, uint64_t next);

typedef struct fh_record {
    char holder[256];
    int64_t since;
    uint64_t token;
    char value[256];
    bool present;
} fh_record;

/* A record's n bytes (n <= RECORD_LEN) into *r; present is false for an
 * empty (zeroed) or foreign one. */
void fh_parse_record(const char *rec, size_t n, fh_record *r);
/* A record of these fields (value may be NULL), zero-padded. */
void fh_format_record(char rec[RECORD_LEN], const char *owner, const char *holder,
                      int64_t since_ms, uint64_t token, const char *value);

#endif
