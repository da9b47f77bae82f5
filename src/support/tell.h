/* SPDX-License-Identifier: MIT */
/*
 * tell.h — telling holders of a loss outside the mutex: used by the core's
 * lease threads and by the backends that find losses under their own mutex
 * (tell.c).
 */
#ifndef DLOCK_SUPPORT_TELL_H
#define DLOCK_SUPPORT_TELL_H

#include <pthread.h>

#include "dlock.h"

/*
 * A thread that finds locks lost under its owner's mutex tells their holders
 * with the mutex released (a loss callback may release its lock, and that
 * release takes the mutex), and a thread that stops watching a lock, or
 * frees it, waits, mutex held, until no other thread is telling it, so that
 * a loss is told before its lock is let go or freed; the telling thread
 * itself (a callback's release) does not wait for itself.
 */
struct dl_telling;
typedef struct dl_teller {
    int busy;                     /* threads telling now (under the owner's mutex) */
    struct dl_telling *under_way; /* their tellings (under the owner's mutex) */
    pthread_cond_t done;
} dl_teller;

void dl_teller_init(dl_teller *t);
void dl_teller_fini(dl_teller *t);
/* mu held on entry and on return, released meanwhile: tell(arg, i) for i
 * in 0..n-1, each telling the loss of items[i] (a lock, or what holds one:
 * dl_teller_wait_item looks for it there). */
void dl_teller_tell(dl_teller *t, pthread_mutex_t *mu, const void *const *items, int n,
                    void (*tell)(void *arg, int i), void *arg);
/* The same for locks lost[0..n-1], all for one reason (dl_mark_lost). */
void dl_teller_tell_locks(dl_teller *t, pthread_mutex_t *mu, dlock_lock *const *lost, int n,
                          const char *why);
/* mu held: until no thread but this one is telling. */
void dl_teller_wait(dl_teller *t, pthread_mutex_t *mu);
/* mu held: until no thread but this one is telling item's loss. */
void dl_teller_wait_item(dl_teller *t, pthread_mutex_t *mu, const void *item);

#endif
