/* SPDX-License-Identifier: MIT */
/*
 * fuzz_file.c — libFuzzer target for what the file backend reads out of a
 * lock file (anyone who may write the directory may write it): the header
 * must be refused or read back to the same bytes, and a record's fields
 * must stay within their bounds.
 */
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
        /* what it read is what the writer of those numbers writes (an old
         * header's magic aside) */
        char buf[HEADER_LEN + 1];
        fh_format_header(buf, token, next);
        CHECK(hn >= TOKEN_LEN && memcmp(split ? MAGIC : MAGIC_OLD, s, 7) == 0);
        CHECK(memcmp(buf + 7, s + 7, TOKEN_LEN - 7) == 0);
        CHECK(hn < HEADER_LEN || memcmp(buf + 7, s + 7, HEADER_LEN - 7) == 0);
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
