/* SPDX-License-Identifier: MIT */
/* fuzz.h — what every libFuzzer target of dlock shares. */
#ifndef DLOCK_FUZZ_H
#define DLOCK_FUZZ_H

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

/* An invariant of the code under test: a violation is a finding. */
#define CHECK(c)                                                                 \
    do {                                                                         \
        if (!(c)) {                                                              \
            fprintf(stderr, "invariant failed: %s (line %d)\n", #c, __LINE__);   \
            abort();                                                             \
        }                                                                        \
    } while (0)

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#endif
