/*
 * support.h — what backends share beneath their own logic: waiting on a
 * descriptor with a deadline and a cancel descriptor, napping, backoff,
 * deadlines. One way to do each, so that deadline and cancel semantics are
 * written once (issue 25). Times are CLOCK_MONOTONIC nanoseconds
 * (dl_now_ns, dl_deadline_in); a deadline of -1 means none.
 */
#ifndef DLOCK_SUPPORT_H
#define DLOCK_SUPPORT_H

#include <stdint.h>

#include "internal.h"

/* Wait until fd has one of events (0; *revents, when not NULL, gets what
 * poll said of it), until_ns passes (DLOCK_ETIMEDOUT; -1: no bound, 0:
 * already passed) or cancel_fd (-1: none) is readable (DLOCK_ECANCELED,
 * which wins over fd). DLOCK_EIO when poll itself fails; EINTR is retried. */
int dl_wait_fd(int fd, short events, int64_t until_ns, int cancel_fd, short *revents);

/* Sleep ns (rounded up to whole milliseconds), or until cancel_fd (-1:
 * none) is readable: 0, or DLOCK_ECANCELED. */
int dl_nap_ns(int64_t ns, int cancel_fd);

/* Jittered exponential backoff (a retry loop's pauses): the next pause is
 * half of *step_ns plus a random part of up to its other half, and *step_ns
 * doubles up to max_ns. Start *step_ns at the first pause wanted. */
int64_t dl_backoff_ns(int64_t *step_ns, int64_t max_ns);

#endif
