/*
 * tell.c — telling holders of a loss outside the mutex (see support.h).
 */
#include "support/support.h"

/* The tellings this thread is inside, innermost first: a thread does not
 * wait for its own (a loss callback that releases its lock). */
static _Thread_local struct telling {
    const dl_teller *teller;
    struct telling *up;
} *telling_here;

void dl_teller_init(dl_teller *t)
{
    t->busy = 0;
    pthread_cond_init(&t->done, NULL);
}

void dl_teller_fini(dl_teller *t)
{
    pthread_cond_destroy(&t->done);
}

void dl_teller_tell(dl_teller *t, pthread_mutex_t *mu, int n, void (*tell)(void *arg, int i),
                    void *arg)
{
    if (n <= 0)
        return;
    struct telling here = {t, telling_here};
    t->busy++;
    telling_here = &here;
    pthread_mutex_unlock(mu);
    for (int i = 0; i < n; i++)
        tell(arg, i);
    pthread_mutex_lock(mu);
    telling_here = here.up;
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
    dl_teller_tell(t, mu, n, tell_lock, &ll);
}

void dl_teller_wait(dl_teller *t, pthread_mutex_t *mu)
{
    for (;;) {
        int mine = 0;
        for (const struct telling *f = telling_here; f; f = f->up)
            mine += f->teller == t;
        if (t->busy <= mine)
            return;
        pthread_cond_wait(&t->done, mu);
    }
}
