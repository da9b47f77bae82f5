/* SPDX-License-Identifier: MIT */
/*
 * nodes.c — the ZooKeeper backend's reading of node names and node data
 * (zk_nodes.h), in dlock's layout and in the peers' (Curator 5.4's
 * LockInternals / StandardLockInternalsDriver / InterProcessReadWriteLock,
 * kazoo's recipe/lock.py), each read the way that peer reads it.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "zk_nodes.h"

static const char *const layout_names[ZK_LAYOUTS] = {"dlock", "curator", "curator-rw", "kazoo"};

const char *zk_layout_name(int layout)
{
    return layout >= 0 && layout < ZK_LAYOUTS ? layout_names[layout] : "?";
}

int zk_layout_named(const char *s)
{
    for (int i = 0; i < ZK_LAYOUTS; i++)
        if (strcmp(s, layout_names[i]) == 0)
            return i;
    return -1;
}

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

/* Curator's StandardLockInternalsDriver.standardFixForSorting: what follows
 * the last occurrence of mark, or the whole name when there is none. */
static const char *after_last(const char *s, const char *mark)
{
    const char *found = NULL;
    size_t ml = strlen(mark);
    for (const char *p = strstr(s, mark); p; p = strstr(p + 1, mark))
        found = p;
    return found ? found + ml : s;
}

/* kazoo's contender pattern, searched: (?:__lock__|__rlock__)(-?\d{10})$.
 * The digits (with their sign) are the key; 'x' or 'r', or 0 (no match). */
static char kazoo_kind(const char *name, const char **key)
{
    size_t n = strlen(name);
    if (n < 10)
        return 0;
    const char *d = name + n - 10;
    for (int i = 0; i < 10; i++)
        if (d[i] < '0' || d[i] > '9')
            return 0;
    /* -? is greedy: a '-' before the digits belongs to the key when what
     * precedes it is a mark; else the digits alone must follow one. */
    for (int sign = 1; sign >= 0; sign--) {
        const char *k = d - sign;
        if (sign && (k < name || *k != '-'))
            continue;
        size_t before = (size_t)(k - name);
        if (before >= 9 && strncmp(k - 9, "__rlock__", 9) == 0) {
            *key = k;
            return 'r';
        }
        if (before >= 8 && strncmp(k - 8, "__lock__", 8) == 0) {
            *key = k;
            return 'x';
        }
    }
    return 0;
}

bool zk_node_parse_in(int layout, const char *name, zk_node *n)
{
    if (layout == ZK_LAYOUT_DLOCK)
        return zk_node_parse(name, n);
    memset(n, 0, sizeof *n);
    n->name = name;
    n->pos.permits = 1;
    switch (layout) {
    case ZK_LAYOUT_CURATOR:
        /* InterProcessMutex (maxLeases 1) sorts every child, whatever made
         * it, and a contender holds when it is first: all exclusive. */
        n->pos.kind = 'x';
        n->key = after_last(name, "lock-");
        return true;
    case ZK_LAYOUT_CURATOR_RW:
        /* Writers wait for every earlier child; readers for the earlier
         * __WRIT__ ones only. A child of neither kind is counted as a
         * writer: what a Curator writer does, and no reader of ours
         * enters where a Curator reader might not. */
        n->pos.kind = strstr(name, "__WRIT__") || !strstr(name, "__READ__") ? 'x' : 'r';
        n->key = after_last(after_last(name, "__READ__"), "__WRIT__");
        return true;
    case ZK_LAYOUT_KAZOO:
        /* WriteLock: every earlier contender; ReadLock: the earlier
         * __lock__ ones: dlock's queue rule, over the contenders only. */
        n->pos.kind = kazoo_kind(name, &n->key);
        return n->pos.kind != 0;
    default:
        return false;
    }
}

int zk_foreign_layout(const char *name)
{
    const char *key;
    if (kazoo_kind(name, &key))
        return ZK_LAYOUT_KAZOO;
    if (strstr(name, "__WRIT__") || strstr(name, "__READ__"))
        return ZK_LAYOUT_CURATOR_RW;
    if (strstr(name, "lock-"))
        return ZK_LAYOUT_CURATOR;
    return -1;
}

int zk_leaf_format(int layout, char kind, unsigned permits, const char *owner, char *buf,
                   size_t len)
{
    int n = -1;
    if (strlen(owner) != DL_OWNER_HEX)
        return -1;
    switch (layout) {
    case ZK_LAYOUT_DLOCK:
        if (kind == 's')
            n = snprintf(buf, len, "s%u-%s-", permits, owner);
        else
            n = snprintf(buf, len, "%c-%s-", kind, owner);
        break;
    case ZK_LAYOUT_CURATOR:
    case ZK_LAYOUT_CURATOR_RW: {
        /* Curator's protected mode: "_c_" UUID "-" then the lock name. */
        const char *lock = layout == ZK_LAYOUT_CURATOR ? "lock-"
                           : kind == 'r'               ? "__READ__"
                                                       : "__WRIT__";
        if (kind == 's' || (layout == ZK_LAYOUT_CURATOR && kind != 'x'))
            return -1;
        n = snprintf(buf, len, "_c_%.8s-%.4s-%.4s-%.4s-%.12s-%s", owner, owner + 8, owner + 12,
                     owner + 16, owner + 20, lock);
        break;
    }
    case ZK_LAYOUT_KAZOO:
        if (kind == 's')
            return -1;
        n = snprintf(buf, len, "%s%s", owner, kind == 'r' ? "__rlock__" : "__lock__");
        break;
    default:
        return -1;
    }
    return n >= 0 && (size_t)n < len ? n : -1;
}

static int by_order(const void *a, const void *b)
{
    const zk_node *x = a, *y = b;
    if (x->key && y->key) {
        int c = strcmp(x->key, y->key);
        return c ? c : strcmp(x->name, y->name);
    }
    return (x->seq > y->seq) - (x->seq < y->seq);
}

int zk_queue_of(int layout, char **kids, int nkids, zk_node **out, int *foreign)
{
    zk_node *q = malloc(sizeof *q * (size_t)(nkids ? nkids : 1));
    if (!q)
        return -1;
    int n = 0;
    if (foreign)
        *foreign = -1;
    for (int i = 0; i < nkids; i++) {
        if (zk_node_parse_in(layout, kids[i], &q[n]))
            n++;
        else if (foreign && *foreign < 0 &&
                 !(layout == ZK_LAYOUT_DLOCK && strncmp(kids[i], "tool-", 5) == 0))
            *foreign = i; /* (dlock bench's scratch nodes are dlock's own) */
    }
    qsort(q, (size_t)n, sizeof *q, by_order);
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
