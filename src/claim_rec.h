/* SPDX-License-Identifier: MIT */
/*
 * claim_rec.h — the one format of a claim's record (dlock once), written
 * and read here only. A record comes from a server: the parser treats it
 * as untrusted input (fuzz/fuzz_claim.c feeds it anything).
 */
#ifndef DLOCK_CLAIM_REC_H
#define DLOCK_CLAIM_REC_H

#include "dlock.h"

#include <stddef.h>
#include <stdint.h>

#define DL_CLAIM_OWNER_MAX 64 /* bytes of the runner's lock owner id */

typedef enum { DL_REC_RUNNING = 'R', DL_REC_DONE = 'D', DL_REC_ABANDONED = 'A' } dl_rec_state;

typedef struct dl_claim_rec {
    dl_rec_state state;
    unsigned attempt; /* >= 1 */
    int status;       /* DONE: the exit status */
    long long started_ms, finished_ms;
    uint64_t token; /* the runner's fencing token (0 unknown) */
    char by[DLOCK_HOLDER_MAX];
    char owner[DL_CLAIM_OWNER_MAX + 1]; /* the runner's lock owner id */
    char fingerprint[DLOCK_FINGERPRINT_MAX + 1];
    char *result; /* malloc'd, NUL-terminated past result_len; NULL: none */
    size_t result_len;
} dl_claim_rec;

/* Whether s may be a fingerprint (printable ASCII, 1..DLOCK_FINGERPRINT_MAX). */
int dl_claim_fingerprint_ok(const char *s);
/* The record's bytes into *out (malloc'd) and *len; 0 or DLOCK_ENOMEM /
 * DLOCK_EINVAL (a field that cannot be written: a result too long). */
int dl_claim_rec_format(const dl_claim_rec *r, char **out, size_t *len);
/* Parse len bytes into *r (result malloc'd); 0, DLOCK_ENOMEM, or
 * DLOCK_EPROTO with a one-line reason in why. */
int dl_claim_rec_parse(const char *buf, size_t len, dl_claim_rec *r, char *why, size_t whylen);
void dl_claim_rec_free(dl_claim_rec *r);

#endif
