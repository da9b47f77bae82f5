/* SPDX-License-Identifier: MIT */
/*
 * fuzz_file.c — libFuzzer target for what the file backend reads out of a
 * lock file (anyone who may write the directory may write it): the header
 * must be refused or read back to the same bytes, and a record's fields
 * must stay within their bounds.
 */
#include <inttypes.h>
#include <stdio.h>
#include <string.h>

#include "fuzz.h"

#include "backends/file/file_int.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    const char *s = (const char *)data;
    uint64_t token, next;
    bool split;
    size_t hn = size < HEADER_LEN ? size : HEADER_LEN;
    if (fh_parse_header(s, hn, &token, &next, &split) && hn > 0) {
        /* what it read is what a writer of those numbers writes */
        char buf[HEADER_LEN + 1];
        snprintf(buf, sizeof buf, "%s%020" PRIu64 "\nnext %020" PRIu64 "\n",
                 split ? MAGIC : MAGIC_OLD, token, next);
        CHECK(hn >= TOKEN_LEN && memcmp(buf, s, TOKEN_LEN) == 0);
        CHECK(hn < HEADER_LEN || memcmp(buf, s, HEADER_LEN) == 0);
        CHECK(hn == HEADER_LEN || next == 0);
    } else if (hn == 0) {
        CHECK(token == 0 && next == 0 && !split);
    }
    fh_record r;
    fh_parse_record(s, size, &r);
    CHECK(strlen(r.holder) < sizeof r.holder && strlen(r.value) < sizeof r.value);
    CHECK(r.present == (size > 0 && s[0] == 'o'));
    return 0;
}
