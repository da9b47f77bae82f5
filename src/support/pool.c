/* SPDX-License-Identifier: MIT */
/*
 * pool.c — a client's idle connections (see support.h).
 */
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>

#include "support/support.h"

void dl_pool_init(dl_pool *p, int max_idle)
{
    *p = (dl_pool){.max_idle = max_idle};
    pthread_mutex_init(&p->mu, NULL);
}

dl_pooled *dl_pool_take(dl_pool *p, bool (*want)(const dl_pooled *, const void *),
                        const void *arg)
{
    pthread_mutex_lock(&p->mu);
    dl_pooled **pp = &p->idle;
    while (want && *pp && !want(*pp, arg))
        pp = &(*pp)->next;
    if (!*pp)
        pp = &p->idle;
    dl_pooled *it = *pp;
    if (it) {
        *pp = it->next;
        it->next = NULL;
        p->nidle--;
    }
    pthread_mutex_unlock(&p->mu);
    return it;
}

bool dl_pool_has(dl_pool *p, bool (*want)(const dl_pooled *, const void *), const void *arg)
{
    pthread_mutex_lock(&p->mu);
    dl_pooled *it = p->idle;
    while (it && !want(it, arg))
        it = it->next;
    pthread_mutex_unlock(&p->mu);
    return it != NULL;
}

bool dl_pool_put(dl_pool *p, dl_pooled *it)
{
    pthread_mutex_lock(&p->mu);
    bool pooled = p->nidle < p->max_idle && !p->stopping;
    if (pooled) {
        it->idle_since_ns = dl_now_ns();
        it->next = p->idle;
        p->idle = it;
        p->nidle++;
    }
    pthread_mutex_unlock(&p->mu);
    return pooled;
}

static void drain(dl_pool *p, bool stop, void (*close)(dl_pooled *))
{
    pthread_mutex_lock(&p->mu);
    p->stopping = p->stopping || stop;
    dl_pooled *it = p->idle;
    p->idle = NULL;
    p->nidle = 0;
    pthread_mutex_unlock(&p->mu);
    while (it) {
        dl_pooled *next = it->next;
        close(it);
        it = next;
    }
}

void dl_pool_drain(dl_pool *p, void (*close)(dl_pooled *))
{
    drain(p, false, close);
}

void dl_pool_stop(dl_pool *p, void (*close)(dl_pooled *))
{
    drain(p, true, close);
}

void dl_pool_fini(dl_pool *p)
{
    pthread_mutex_destroy(&p->mu);
}

bool dl_pool_idle_ended(const dl_pooled *it, int fd)
{
    if (fd >= 0 && dl_now_ns() - it->idle_since_ns < (int64_t)DL_POOL_TRUSTED_MS * 1000000)
        return false;
    struct pollfd p = {.fd = fd, .events = POLLIN};
    return fd < 0 || poll(&p, 1, 0) > 0;
}

void dl_socket_keepalive(int fd)
{
    int on = 1, idle_s = 2, interval_s = 1, probes = 3;
    (void)setsockopt(fd, SOL_SOCKET, SO_KEEPALIVE, &on, sizeof on);
    (void)setsockopt(fd, IPPROTO_TCP, TCP_KEEPIDLE, &idle_s, sizeof idle_s);
    (void)setsockopt(fd, IPPROTO_TCP, TCP_KEEPINTVL, &interval_s, sizeof interval_s);
    (void)setsockopt(fd, IPPROTO_TCP, TCP_KEEPCNT, &probes, sizeof probes);
}
