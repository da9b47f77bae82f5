/* SPDX-License-Identifier: MIT */
/*
 * fuzz_claim.c — libFuzzer target for a claim's record (dlock once), as a
 * server hands it back: the parser must refuse or accept, never crash, and
 * what it accepts must be within every bound and write back to a record
 * that reads the same.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fuzz.h"

#include "claim_rec.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    dl_claim_rec r, again;
    char why[200];
    if (dl_claim_rec_parse((const char *)data, size, &r, why, sizeof why) != 0)
        return 0;
    CHECK(r.result_len <= DLOCK_CLAIM_RESULT_MAX && r.attempt >= 1);
    CHECK(strlen(r.by) < sizeof r.by && r.result[r.result_len] == '\0');
    char *buf;
    size_t len;
    if (dl_claim_rec_format(&r, &buf, &len) == 0) {
        CHECK(dl_claim_rec_parse(buf, len, &again, why, sizeof why) == 0);
        CHECK(again.attempt == r.attempt && again.status == r.status &&
              again.result_len == r.result_len &&
              memcmp(again.result, r.result, r.result_len) == 0);
        dl_claim_rec_free(&again);
        free(buf);
    }
    dl_claim_rec_free(&r);
    return 0;
}
