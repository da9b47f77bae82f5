/* SPDX-License-Identifier: MIT */
/*
 * fuzz_zk.c — libFuzzer target for what the ZooKeeper backend reads out of
 * the server: the children of a name's node (any strings a server or another
 * user could put there) and a holder node's data.
 *
 * The input is split at newlines into children names; the queue built from
 * them and every node's verdict (holds, or which node it waits for) must
 * hold together: a waiter waits for an earlier node or the children, an
 * exclusive node holds only when first, nodes of different kinds never hold
 * together (readers aside), a semaphore never has more holders than permits.
 * The whole input is also read as a node's data.
 */
#include <string.h>

#include "fuzz.h"

#include "backends/zk/zk_nodes.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char *buf = malloc(size + 1);
    char *kids[256];
    if (!buf)
        return 0;
    memcpy(buf, data, size);
    buf[size] = '\0';
    int n = 0;
    for (char *s = buf; n < 256;) {
        kids[n++] = s;
        char *nl = strchr(s, '\n');
        if (!nl)
            break;
        *nl = '\0';
        s = nl + 1;
    }
    zk_node *q = NULL;
    int len = zk_queue_of(kids, n, &q);
    CHECK(len >= 0 && len <= n);
    int holders = 0;
    char held_kind = 0;
    for (int i = 0; i < len; i++) {
        CHECK(q[i].pos.kind == 'x' || q[i].pos.kind == 'r' || q[i].pos.kind == 's');
        CHECK(q[i].pos.permits >= 1 && q[i].pos.permits <= 4096);
        CHECK(strlen(q[i].owner) == DL_OWNER_HEX);
        if (i > 0)
            CHECK(q[i - 1].seq <= q[i].seq);
        int b = zk_blocker(q, i);
        CHECK(b == HOLDS || b == WATCH_CHILDREN || (b >= 0 && b < i));
        if (b == WATCH_CHILDREN)
            CHECK(q[i].pos.kind == 's');
        if (b != HOLDS)
            continue;
        if (q[i].pos.kind == 'x')
            CHECK(i == 0);
        if (held_kind)
            CHECK(held_kind == q[i].pos.kind && q[i].pos.kind != 'x');
        held_kind = q[i].pos.kind;
        holders++;
        if (q[i].pos.kind == 's')
            CHECK((unsigned)holders <= q[i].pos.permits);
    }
    free(q);

    memcpy(buf, data, size);
    buf[size] = '\0';
    char holder[256];
    const char *value = zk_split_data(buf, holder, sizeof holder);
    CHECK(strlen(holder) < sizeof holder);
    if (value)
        CHECK(value > buf && value <= buf + size && *value);
    CHECK(zk_split_data(NULL, holder, sizeof holder) == NULL && holder[0] == '\0');
    free(buf);
    return 0;
}
