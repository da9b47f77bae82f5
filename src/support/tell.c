/* SPDX-License-Identifier: MIT */
/*
 * tell.c — telling holders of a loss outside the mutex (see tell.h).
 */
#include "support/support.h"

/* One thread's telling: on its teller's list of tellings under way, and on
 * the thread's own chain (innermost first: a thread does not wait for its
 * own, as in a loss callback that releases its lock). */
struct dl_telling {
    const dl_teller *teller;
    const void *const *items;
    int n;
    struct dl_telling *up;   /* this thread's enclosing telling */
    struct dl_telling *next; /* the teller's next telling under way */
};

static _Thread_local struct dl_telling *telling_here;

static bool mine(const struct dl_telling *f)
{
    for (const struct dl_telling *h = telling_here; h; h = h->up)
        if (h == f)
            return true;
    return false;
}

void dl_teller_init(dl_teller *t)
{
    t->busy = 0;
    t->under_way = NULL;
    pthread_cond_init(&t->done, NULL);
}

void dl_teller_fini(dl_teller *t)
{
    pthread_cond_destroy(&t->done);
}

void dl_teller_tell(dl_teller *t, pthread_mutex_t *mu, const void *const *items, int n,
                    void (*tell)(void *arg, int i), void *arg)
{
    if (n <= 0)
        return;
    struct dl_telling here = {t, items, n, telling_here, t->under_way};
    t->busy++;
    t->under_way = &here;
    telling_here = &here;
    pthread_mutex_unlock(mu);
    for (int i = 0; i < n; i++)
        tell(arg, i);
    pthread_mutex_lock(mu);
    telling_here = here.up;
    struct dl_telling **pp = &t->under_way;
    while (*pp != &here)
        pp = &(*pp)->next;
    *pp = here.next;
    t->busy--;
    pthread_cond_broadcast(&t->done);
}

struct lost_locks {
    dlock_lock *const *lost;
    const char *why;
};

static void tell_lock(void *arg, int i)
{
    const struct lost_locks *ll = arg;
    dl_mark_lost(ll->lost[i], ll->why);
}

void dl_teller_tell_locks(dl_teller *t, pthread_mutex_t *mu, dlock_lock *const *lost, int n,
                          const char *why)
{
    struct lost_locks ll = {lost, why};
    dl_teller_tell(t, mu, (const void *const *)lost, n, tell_lock, &ll);
}

void dl_teller_wait(dl_teller *t, pthread_mutex_t *mu)
{
    for (;;) {
        int own = 0;
        for (const struct dl_telling *f = telling_here; f; f = f->up)
            own += f->teller == t;
        if (t->busy <= own)
            return;
        pthread_cond_wait(&t->done, mu);
    }
}

void dl_teller_wait_item(dl_teller *t, pthread_mutex_t *mu, const void *item)
{
    for (;;) {
        bool told = false;
        for (const struct dl_telling *f = t->under_way; f && !told; f = f->next)
            for (int i = 0; i < f->n && !told; i++)
                told = f->items[i] == item && !mine(f);
        if (!told)
            return;
        pthread_cond_wait(&t->done, mu);
    }
}
