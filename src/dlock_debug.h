/* SPDX-License-Identifier: MIT */
/*
 * dlock_debug.h — what the library exports for dlock's own tests and
 * harness, beside the public API: not installed, no promise kept across
 * versions.
 */
#ifndef DLOCK_DEBUG_H
#define DLOCK_DEBUG_H

#include <stdint.h>

#include "dlock.h"

#ifdef __cplusplus
extern "C" {
#endif

/*
 * Test hook: make a held lock behave as if its lease or session were lost
 * (the file backend cannot lose a lock by itself). Returns DLOCK_ENOTHELD if
 * not held. The loss is told as a real one is (on_lost from a library
 * thread, not the caller's; the lost descriptor), before the hook returns.
 * Intended for tests of loss handling; never needed in production.
 */
DLOCK_EXTERN int dlock_debug_force_loss(dlock_lock *lock);

/*
 * When the held lock's state turned LOST, on CLOCK_MONOTONIC (ns); 0 when it
 * is not lost. A lease declared lost by the clock was lost from its loss
 * moment on (dlock_state said so), however late the thread that runs
 * on_lost and fills the lost descriptor was scheduled; any other loss from
 * when the library learnt of it. dlock check tells the library's decision
 * from the operating system's delay in acting on it with this.
 */
DLOCK_EXTERN int64_t dlock_debug_lost_at_ns(const dlock_lock *lock);

/*
 * The span a held lock's deadline is counted with on this client's clock
 * (ms): its lease; on ZooKeeper 2/3 of the session timeout, on etcd the
 * client's lease, whatever ttl_ms asked for. 0 where liveness has no
 * deadline on our clock. dlock check counts its windows with it: reading
 * it back from dlock_valid_ms also counted the loss allowances and the
 * time since the lease began (a slow acquisition made it 30 % short).
 */
DLOCK_EXTERN int dlock_debug_span_ms(const dlock_lock *lock);

#ifdef __cplusplus
}
#endif
#endif /* DLOCK_DEBUG_H */
