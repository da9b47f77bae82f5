/* SPDX-License-Identifier: MIT */
/*
 * nodes.c — the ZooKeeper backend's reading of node names and node data
 * (zk_nodes.h).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "zk_nodes.h"

bool zk_node_parse(const char *name, zk_node *n)
{
    memset(n, 0, sizeof *n);
    n->name = name;
    const char *p = dl_qkind_parse(name, &n->pos);
    if (!p)
        return false;
    if (*p++ != '-' || strlen(p) != DL_OWNER_HEX + 1 + 10 || p[DL_OWNER_HEX] != '-')
        return false;
    memcpy(n->owner, p, DL_OWNER_HEX);
    n->owner[DL_OWNER_HEX] = '\0';
    p += DL_OWNER_HEX + 1;
    n->seq = 0;
    for (int i = 0; i < 10; i++) {
        if (p[i] < '0' || p[i] > '9')
            return false;
        n->seq = n->seq * 10 + (p[i] - '0');
    }
    return true;
}

static int by_seq(const void *a, const void *b)
{
    const zk_node *x = a, *y = b;
    return (x->seq > y->seq) - (x->seq < y->seq);
}

int zk_queue_of(char **kids, int nkids, zk_node **out)
{
    zk_node *q = malloc(sizeof *q * (size_t)(nkids ? nkids : 1));
    if (!q)
        return -1;
    int n = 0;
    for (int i = 0; i < nkids; i++)
        if (zk_node_parse(kids[i], &q[n]))
            n++;
    qsort(q, (size_t)n, sizeof *q, by_seq);
    *out = q;
    return n;
}

int zk_blocker(const zk_node *q, int i)
{
    return dl_queue_blocker(q, sizeof *q, i);
}

const char *zk_split_data(char *data, char *holder, size_t len)
{
    char *nl = data ? strchr(data, '\n') : NULL;
    if (nl)
        *nl = '\0';
    if (holder)
        snprintf(holder, len, "%s", data ? data : "");
    return nl && nl[1] ? nl + 1 : NULL;
}
