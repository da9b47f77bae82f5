/* SPDX-License-Identifier: MIT */
/*
 * fuzz_zk.c — libFuzzer target for what the ZooKeeper backend reads out of
 * the server: the children of a name's node (any strings a server or another
 * user could put there) and a holder node's data.
 *
 * The input is split at newlines into children names; the queue each layout
 * (dlock's, Curator's, kazoo's) builds from them and every node's verdict (holds, or which node it waits for) must
 * hold together: a waiter waits for an earlier node or the children, an
 * exclusive node holds only when first, nodes of different kinds never hold
 * together (readers aside), a semaphore never has more holders than permits.
 * The whole input is also read as a node's data.
 */
#include <stdio.h>
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
    /* Every layout reads the same children its own way. */
    for (int layout = 0; layout < ZK_LAYOUTS; layout++) {
        zk_node *q = NULL;
        int foreign;
        int len = zk_queue_of(layout, kids, n, &q, &foreign);
        CHECK(len >= 0 && len <= n);
        CHECK(foreign >= -1 && foreign < n);
        if (layout == ZK_LAYOUT_CURATOR || layout == ZK_LAYOUT_CURATOR_RW)
            CHECK(len == n); /* Curator counts every child */
        int holders = 0;
        char held_kind = 0;
        for (int i = 0; i < len; i++) {
            CHECK(q[i].pos.kind == 'x' || q[i].pos.kind == 'r' || q[i].pos.kind == 's');
            CHECK(q[i].pos.permits >= 1 && q[i].pos.permits <= 4096);
            if (layout == ZK_LAYOUT_DLOCK) {
                CHECK(strlen(q[i].owner) == DL_OWNER_HEX);
                if (i > 0)
                    CHECK(q[i - 1].seq <= q[i].seq);
            } else {
                CHECK(q[i].pos.kind != 's' && q[i].key && q[i].owner[0] == '\0');
                if (i > 0)
                    CHECK(strcmp(q[i - 1].key, q[i].key) <= 0);
            }
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
        /* Our own node's name is one the layout counts, of our kind. */
        char leaf[96], name[128];
        const char *owner = "0123456789abcdef0123456789abcdef";
        for (int k = 0; k < 3; k++) {
            char kind = "xrs"[k];
            zk_node me;
            if (zk_leaf_format(layout, kind, 3, owner, leaf, sizeof leaf) < 0)
                continue;
            snprintf(name, sizeof name, "%s0000000042", leaf);
            CHECK(zk_node_parse_in(layout, name, &me) && me.pos.kind == kind);
        }
    }
    for (int i = 0; i < n; i++) {
        int peer = zk_foreign_layout(kids[i]);
        CHECK(peer == -1 || (peer > ZK_LAYOUT_DLOCK && peer < ZK_LAYOUTS));
    }

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
