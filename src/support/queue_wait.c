/* SPDX-License-Identifier: MIT */
/*
 * queue_wait.c — the acquisition loop of a queue backend (ZooKeeper's
 * sequential nodes, etcd's keys): read the queue, apply the queue rule
 * (queue.c), wait on the one entry whose going can let us in, and again.
 * The backend brings how it reads and how it waits (dl_queue_waiter); the
 * rule, the try-once answer and the words for a canceled or timed-out wait
 * are the same for both.
 */
#include "support/support.h"

int dl_queue_acquire(dlock_lock *l, int64_t deadline_ns, const dl_queue_waiter *w,
                     bool *waited)
{
    for (;;) {
        const void *queue;
        size_t stride;
        int i;
        int rc = w->read(w->ctx, &queue, &stride, &i);
        if (rc)
            return rc;
        if (i < 0)
            return dl_lock_err(l, DLOCK_EUNREACHABLE, "lock \"%s\": %s (%s)", l->name,
                               w->vanished, w->where);
        int other = dl_queue_conflict(queue, stride, i);
        if (other >= 0) {
            const dl_qpos *o = (const dl_qpos *)((const char *)queue + stride * (size_t)other);
            return dl_conflict_err(l, o->kind, o->permits);
        }
        int b = dl_queue_blocker(queue, stride, i);
        if (b == DL_Q_HOLDS)
            return 0;
        if (deadline_ns == 0)
            return dl_lock_err(l, DLOCK_EBUSY, "lock \"%s\" is held by another owner", l->name);
        *waited = true;
        bool in = false;
        rc = w->wait(w->ctx, b, &in);
        if (rc == DLOCK_ECANCELED)
            return dl_lock_err(l, rc, "lock \"%s\": acquisition canceled", l->name);
        if (rc == DLOCK_ETIMEDOUT)
            return dl_wait_timed_out(l, NULL);
        if (rc || in)
            return rc;
    }
}
