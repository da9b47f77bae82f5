/* SPDX-License-Identifier: MIT */
/*
 * queue.c — the rule of a queue of waiters ordered by arrival (ZooKeeper's
 * sequential nodes, etcd's keys): who holds, whom a waiter watches, which
 * kinds may not share a name; and the kind written into an entry's name.
 * Pure functions of the queue as read: the fuzz targets of both backends
 * link this file as it is.
 */
#include <stdio.h>

#include "support/support.h"

static const dl_qpos *qpos_at(const void *queue, size_t stride, int i)
{
    return (const dl_qpos *)((const char *)queue + stride * (size_t)i);
}

int dl_queue_conflict(const void *queue, size_t stride, int i)
{
    const dl_qpos *me = qpos_at(queue, stride, i);
    if (me->kind != 's')
        return -1;
    for (int j = 0; j < i; j++) {
        const dl_qpos *o = qpos_at(queue, stride, j);
        if (o->kind == 's')
            return o->permits == me->permits ? -1 : j;
    }
    return -1;
}

int dl_queue_blocker(const void *queue, size_t stride, int i)
{
    const dl_qpos *me = qpos_at(queue, stride, i);
    char k = me->kind;
    int other = dl_queue_conflict(queue, stride, i);
    if (other >= 0)
        return other; /* refused, and never counted a holder */
    if (k == 'x')
        return i == 0 ? DL_Q_HOLDS : i - 1;
    for (int j = i - 1; j >= 0; j--)
        if (qpos_at(queue, stride, j)->kind != k)
            return j; /* the nearest entry of another kind excludes us */
    if (k == 'r' || (unsigned)i < me->permits)
        return DL_Q_HOLDS;
    return (unsigned)i == me->permits ? DL_Q_ANY : i - 1;
}

int dl_queue_holders(const void *queue, size_t stride, int n, int *first)
{
    int holders = 0;
    *first = -1;
    for (int i = 0; i < n; i++)
        if (dl_queue_blocker(queue, stride, i) == DL_Q_HOLDS) {
            if (holders++ == 0)
                *first = i;
        }
    return holders;
}

void dl_qkind_format(const dlock_lock *l, char *buf, size_t len)
{
    if (l->opts.kind == DLOCK_SEMAPHORE)
        snprintf(buf, len, "s%u", l->opts.permits);
    else
        snprintf(buf, len, "%s", l->opts.kind == DLOCK_SHARED ? "r" : "x");
}

const char *dl_qkind_parse(const char *s, dl_qpos *out)
{
    if (*s == 'x' || *s == 'r') {
        out->kind = *s;
        out->permits = 1;
        return s + 1;
    }
    if (*s != 's' || s[1] < '1' || s[1] > '9')
        return NULL;
    unsigned long v = 0;
    const char *p = s + 1;
    while (*p >= '0' && *p <= '9' && v <= DLOCK_PERMITS_MAX)
        v = v * 10 + (unsigned long)(*p++ - '0');
    if (v < 1 || v > DLOCK_PERMITS_MAX)
        return NULL;
    out->kind = 's';
    out->permits = (unsigned)v;
    return p;
}
