/* SPDX-License-Identifier: MIT */
/*
 * session.c — the watcher of sessions that hold locks (see support.h).
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include "support/support.h"

int dl_swatch_init(dl_session_watch *w, bool (*gone)(dl_session *, char *, size_t))
{
    memset(w, 0, sizeof *w);
    w->gone = gone;
    w->wake_fd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
    w->epoll_fd = epoll_create1(EPOLL_CLOEXEC);
    struct epoll_event ev = {.events = EPOLLIN, .data.ptr = NULL}; /* NULL: the wake */
    if (w->wake_fd < 0 || w->epoll_fd < 0 ||
        epoll_ctl(w->epoll_fd, EPOLL_CTL_ADD, w->wake_fd, &ev) != 0) {
        if (w->wake_fd >= 0)
            close(w->wake_fd);
        if (w->epoll_fd >= 0)
            close(w->epoll_fd);
        w->wake_fd = w->epoll_fd = -1;
        return DLOCK_EIO;
    }
    pthread_mutex_init(&w->mu, NULL);
    dl_teller_init(&w->teller);
    return 0;
}

/* s's socket in the epoll set, for one report (EPOLLONESHOT: a report for
 * a session let go meanwhile, whose socket may since have been closed and
 * its number reused, comes once and is dropped, never again and again). */
static int swatch_arm(dl_session_watch *w, dl_session *s, int op)
{
    struct epoll_event ev = {.events = EPOLLIN | EPOLLONESHOT, .data.ptr = s};
    int rc = epoll_ctl(w->epoll_fd, op, s->fd, &ev);
    if (rc != 0 && op == EPOLL_CTL_ADD && errno == EEXIST)
        rc = epoll_ctl(w->epoll_fd, EPOLL_CTL_MOD, s->fd, &ev);
    return rc;
}

/* s on the watched list, or NULL (its pointer only compared: it may be a
 * session let go and freed since the report). Mutex held. */
static dl_session **swatch_find(dl_session_watch *w, const dl_session *s)
{
    dl_session **pp = &w->list;
    while (*pp && *pp != s)
        pp = &(*pp)->next;
    return *pp ? pp : NULL;
}

/* The holder of lost[i]'s lock (see dl_teller_tell). */
static void tell_session(void *arg, int i)
{
    dl_session *s = ((dl_session **)arg)[i];
    char why[400];
    snprintf(why, sizeof why, "the session holding it ended: %s", s->why);
    dl_mark_lost(s->lock, why);
}

static void *swatch_main(void *arg)
{
    dl_session_watch *w = arg;
    struct epoll_event ev[64];
    pthread_mutex_lock(&w->mu);
    while (!w->stopping) {
        pthread_mutex_unlock(&w->mu);
        int got = epoll_wait(w->epoll_fd, ev, (int)(sizeof ev / sizeof ev[0]), -1);
        pthread_mutex_lock(&w->mu);
        dl_session **lost = NULL;
        int nlost = 0;
        for (int i = 0; i < got && !w->stopping; i++) {
            if (!ev[i].data.ptr) {
                uint64_t v;
                (void)!read(w->wake_fd, &v, sizeof v);
                continue;
            }
            /* still watched? (a call may have taken it off meanwhile) */
            dl_session **pp = swatch_find(w, ev[i].data.ptr);
            if (!pp)
                continue;
            dl_session *s = *pp;
            if (!w->gone(s, s->why, sizeof s->why)) {
                (void)swatch_arm(w, s, EPOLL_CTL_MOD); /* read; watched on */
                continue;
            }
            /* No EPOLL_CTL_DEL: EPOLLONESHOT already disarmed it, and gone()
             * may have closed the socket (libpq does on EOF), so its number
             * may now be another thread's new descriptor. */
            *pp = s->next;
            s->next = NULL;
            s->lost = true;
            dl_session **nl = realloc(lost, (size_t)(nlost + 1) * sizeof *nl);
            if (!nl)
                continue; /* the lock's next call finds it lost */
            lost = nl;
            lost[nlost++] = s;
        }
        dl_teller_tell(&w->teller, &w->mu, (const void *const *)lost, nlost, tell_session, lost);
        free(lost);
    }
    pthread_mutex_unlock(&w->mu);
    return NULL;
}

int dl_swatch_add(dl_session_watch *w, dl_session *s, dlock_lock *l, int fd, char *why,
                  size_t wlen)
{
    int rc = 0;
    pthread_mutex_lock(&w->mu);
    if (!w->started) {
        if (pthread_create(&w->thread, NULL, swatch_main, w) != 0) {
            rc = DLOCK_EIO;
            snprintf(why, wlen, "cannot start the thread that watches held sessions");
        } else {
            w->started = true;
            (void)pthread_setname_np(w->thread, DL_SWATCH_THREAD);
        }
    }
    if (!rc) {
        s->fd = fd;
        s->lock = l;
        s->lost = false;
        if (swatch_arm(w, s, EPOLL_CTL_ADD) != 0) {
            rc = DLOCK_EIO;
            snprintf(why, wlen, "cannot watch the session's socket: %s", strerror(errno));
        } else {
            s->next = w->list;
            w->list = s;
        }
    }
    pthread_mutex_unlock(&w->mu);
    return rc;
}

bool dl_swatch_remove(dl_session_watch *w, dl_session *s)
{
    pthread_mutex_lock(&w->mu);
    /* Not while the thread is telling holders (unless this is that thread:
     * a loss callback may release), so that a loss is told before the
     * session is reused. */
    dl_teller_wait(&w->teller, &w->mu);
    bool lost = s->lost;
    dl_session **pp = lost ? NULL : swatch_find(w, s);
    if (pp) {
        *pp = s->next;
        (void)epoll_ctl(w->epoll_fd, EPOLL_CTL_DEL, s->fd, NULL);
    }
    s->next = NULL;
    pthread_mutex_unlock(&w->mu);
    return !lost;
}

void dl_swatch_fini(dl_session_watch *w, void (*drop)(dl_session *s))
{
    if (!w->gone || w->wake_fd < 0)
        return; /* never initialised (or failed to) */
    pthread_mutex_lock(&w->mu);
    w->stopping = true;
    pthread_mutex_unlock(&w->mu);
    if (w->started) {
        uint64_t one = 1;
        (void)!write(w->wake_fd, &one, sizeof one);
        pthread_join(w->thread, NULL);
    }
    while (w->list) {
        dl_session *s = w->list;
        w->list = s->next;
        drop(s);
    }
    close(w->wake_fd);
    close(w->epoll_fd);
    w->wake_fd = w->epoll_fd = -1;
    pthread_mutex_destroy(&w->mu);
    dl_teller_fini(&w->teller);
}

int dl_session_usable(dlock_lock *l, const dl_session *s)
{
    if (!s)
        return dl_lock_err(l, DLOCK_ENOTHELD, "lock \"%s\" is not held", l->name);
    if (s->lost)
        return dl_lock_err(l, DLOCK_ELOST, "lock \"%s\": the session holding it ended: %s",
                           l->name, s->why);
    return 0;
}
