/* SPDX-License-Identifier: MIT */
/* fuzz_name.c — libFuzzer target for dlock_name_valid: whatever it accepts
 * is safe to use as a file name and a key. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fuzz.h"
#include "internal.h"


int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char *s = malloc(size + 1);
    if (!s)
        return 0;
    memcpy(s, data, size);
    s[size] = '\0';

    char err[128];
    int rc = dlock_name_valid(s, err, sizeof err);
    size_t n = strlen(s);
    if (rc == 0) {
        CHECK(err[0] == '\0');
        CHECK(n >= 1 && n <= DL_NAME_MAX);
        CHECK(s[0] != '.' && s[0] != ' ' && s[n - 1] != ' ');
        for (size_t i = 0; i < n; i++) {
            unsigned char c = (unsigned char)s[i];
            CHECK(c >= 0x20 && c <= 0x7e && c != '/' && c != '\\');
        }
    } else {
        CHECK(rc == DLOCK_ENAME);
        CHECK(err[0] != '\0' && strchr(err, '\n') == NULL);
    }
    /* Same verdict without a buffer. */
    CHECK(dlock_name_valid(s, NULL, 0) == rc);
    free(s);
    return 0;
}
