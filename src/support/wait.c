/* SPDX-License-Identifier: MIT */
/*
 * wait.c — waiting with a deadline and a cancel descriptor, naps and
 * backoff, for every backend (see support.h).
 */
#include <errno.h>
#include <poll.h>

#include "support/support.h"

int dl_wait_fd(int fd, short events, int64_t until_ns, int cancel_fd, short *revents)
{
    for (;;) {
        int ms = dl_ms_left(until_ns);
        if (ms == 0)
            return DLOCK_ETIMEDOUT;
        struct pollfd p[2] = {{.fd = fd, .events = events}, {.fd = cancel_fd, .events = POLLIN}};
        int n = poll(p, cancel_fd >= 0 ? 2 : 1, ms);
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0)
            return DLOCK_EIO;
        if (n > 0 && cancel_fd >= 0 && (p[1].revents & POLLIN))
            return DLOCK_ECANCELED;
        if (n > 0 && p[0].revents) {
            if (revents)
                *revents = p[0].revents;
            return 0;
        }
    }
}

int dl_nap_ns(int64_t ns, int cancel_fd)
{
    int64_t until = dl_now_ns() + (ns > 0 ? ns : 0);
    for (;;) {
        int ms = dl_ms_left(until);
        if (ms == 0)
            return 0;
        struct pollfd p = {.fd = cancel_fd, .events = POLLIN};
        int n = poll(&p, cancel_fd >= 0 ? 1 : 0, ms);
        if (n > 0)
            return DLOCK_ECANCELED;
        if (n < 0 && errno != EINTR)
            return 0; /* (poll cannot fail on one valid descriptor but for EINTR) */
    }
}

#define DL_RETRY_FIRST_MS 50
#define DL_RETRY_MAX_MS 800
bool dl_retry_transient(int *rc, int64_t deadline_ns, int cancel_fd, int64_t *step_ns)
{
    if (*rc != DLOCK_EUNREACHABLE || deadline_ns == 0)
        return false;
    if (*step_ns == 0)
        *step_ns = dl_ms_to_ns(DL_RETRY_FIRST_MS);
    int64_t now = dl_now_ns(), pause = dl_backoff_ns(step_ns, dl_ms_to_ns(DL_RETRY_MAX_MS));
    bool last = deadline_ns > 0 && now + pause >= deadline_ns;
    if (last)
        pause = deadline_ns - now > 0 ? deadline_ns - now : 0;
    if (dl_nap_ns(pause, cancel_fd) == DLOCK_ECANCELED) {
        *rc = DLOCK_ECANCELED;
        return false;
    }
    return !last;
}

int64_t dl_backoff_ns(int64_t *step_ns, int64_t max_ns)
{
    int64_t step = *step_ns > 0 ? *step_ns : 1;
    uint64_t r = 0;
    (void)dl_random(&r, sizeof r);
    int64_t pause = step / 2 + (int64_t)(r % (uint64_t)(step / 2 + 1));
    *step_ns = step < max_ns / 2 ? step * 2 : max_ns;
    return pause;
}
