/* SPDX-License-Identifier: MIT */
/*
 * check_scenarios.c — the fault scenarios of `dlock check`.
 *
 * A scenario is a name and an inject function that runs for the length of
 * the run, driving faults through r->ctl. Faults of the backend's servers
 * (a restart without persistence, a failover after replication was cut, a
 * minority of a quorum or ensemble killed, an ensemble's leader killed, a
 * client stopped with its acquisition in flight) use r->ctl->kill(r,
 * CHK_SERVER, i) and friends and the deployment's own operations
 * (check_servers.c), and set needs_servers and the topology traits
 * (CHK_TOPO_*) they apply to, never a backend.
 */
#include "check.h"

#include <dlock.h>

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>

#define FAULT_INTERVAL_NS 100000000LL /* let the others run between faults */
#define TAKEOVER_WAIT_NS 1000000000LL

/* How long a killed or stopped holder's lock lives on the servers (0 where
 * its end frees it at once). */
static int64_t lock_span_ns(const chk_run *r)
{
    return chk_has_deadline(r->cfg) ? chk_server_span_ms(r->cfg, r->ttl_ms) * 1000000 : 0;
}

static int inject_none(chk_run *r)
{
    return chk_sleep(r, r->end_ns - ms_now_ns());
}

/* SIGKILL of a holder parked between its read and its write, then a fresh
 * worker in its place. The kernel (or the session, or the lease) must free
 * the lock: the others go on taking it — after the last kill too, however
 * late that came (the next holder is awaited). */
static int inject_kill(chk_run *r)
{
    while (chk_fault_more(r)) {
        chk_arm(r, CHK_FAULT_PARK);
        int s = chk_wait_claim(r, chk_fault_until(r));
        if (s < 0)
            break;
        r->faults_injected++;
        int e = r->ctl->kill(r, CHK_CLIENT, s);
        if (e == 0)
            e = r->ctl->start(r, CHK_CLIENT, s);
        if (e) {
            snprintf(r->error, sizeof r->error, "kill scenario: cannot kill or restart a worker: %s",
                     strerror(-e));
            return -1;
        }
        if (chk_sleep(r, FAULT_INTERVAL_NS))
            return -1;
    }
    if (r->faults_injected == 0 || r->error[0] || r->interrupted)
        return 0;
    int64_t span_ns = lock_span_ns(r);
    chk_arm(r, CHK_FAULT_PARK);
    int b = chk_wait_claim(r, ms_now_ns() + span_ns + CHK_FIRST_FAULT_NS);
    if (b >= 0)
        chk_let_go(r, b);
    return 0;
}

/*
 * A holder A is parked between read and write and then stopped (SIGSTOP).
 * `lose`: A first loses the lock through the test hook, as if its lease had
 * expired; otherwise it stays stopped for longer than a lease, and the lock
 * expires by itself on lease backends. Then another worker B takes the lock
 * and reads; while B is parked between its read and write, A is continued
 * and performs its write with its old token: a stale write. Fencing must
 * refuse it; without fencing (the canary) it overwrites and B's write then
 * loses A's increment — the proof that the fault took effect.
 */
static int stale_writer(chk_run *r, bool lose)
{
    /* Past the lease; past a vouched-for session's end on the server too
     * (it outlives the holder's span by half of it). */
    int64_t pause_ns = (chk_server_span_ms(r->cfg, r->ttl_ms) + 500) * 1000000;
    while (chk_fault_more(r)) {
        chk_arm(r, lose ? CHK_FAULT_LOSE : CHK_FAULT_PARK);
        int a = chk_wait_claim(r, chk_fault_until(r));
        if (a < 0)
            break;
        r->faults_injected++;
        uint64_t before = atomic_load(&r->sh->slot[a].writes);
        int e = r->ctl->pause(r, CHK_CLIENT, a);
        if (e) {
            snprintf(r->error, sizeof r->error, "cannot stop a worker: %s", strerror(-e));
            return -1;
        }
        if (!lose && chk_sleep(r, pause_ns))
            return -1;
        /* Someone else takes the lock (now free, or expired) and reads. */
        chk_arm(r, CHK_FAULT_PARK);
        int b = chk_wait_claim(r, ms_now_ns() + TAKEOVER_WAIT_NS);
        e = r->ctl->resume(r, CHK_CLIENT, a);
        if (e) {
            snprintf(r->error, sizeof r->error, "cannot continue a worker: %s", strerror(-e));
            return -1;
        }
        chk_let_go(r, a);
        if (b < 0) {
            if (r->interrupted || r->error[0])
                return -1;
            snprintf(r->note, sizeof r->note,
                     "no other worker took the lock while its holder was stopped");
            continue;
        }
        /* A's stale write lands between B's read and B's write. */
        int w = chk_wait_writes(r, a, before, ms_now_ns() + 5000000000LL);
        chk_let_go(r, b);
        if (w != 0) {
            if (r->interrupted || r->error[0])
                return -1;
            snprintf(r->note, sizeof r->note, "a continued holder did not write within 5 s");
            continue;
        }
        r->faults_effective++;
        if (chk_sleep(r, FAULT_INTERVAL_NS))
            return -1;
    }
    return 0;
}

static int inject_pause(chk_run *r)
{
    return stale_writer(r, false);
}

static int inject_pause_lost(chk_run *r)
{
    return stale_writer(r, true);
}

/* ---- server faults ---------------------------------------------------------- */

#define MS(x) ((int64_t)(x) * 1000000LL)
/* Every worker has used every server (connections made, script loaded)
 * before the first server fault. */
#define WARMUP_NS MS(200)
/* the longest a deployment may take to serve again after a fault it is
 * built to survive (a ZooKeeper election backs off to seconds under load) */
#define RECOVERY_WAIT_NS MS(30000)

static int harness_error(chk_run *r, const char *what, int e)
{
    if (!r->error[0])
        snprintf(r->error, sizeof r->error, "%s: %s", what, strerror(e < 0 ? -e : e));
    return -1;
}

/* Does losing the data of nlost servers go beyond what the backend claims
 * to survive? A backend with DLOCK_CAP_FENCING_WEAK (a single master, and
 * Redlock, whose restarted master may have been one of a bare majority)
 * claims nothing then; otherwise a quorum of independent servers, or a
 * consensus ensemble, would claim its locks while a majority keeps its
 * data. */
static int beyond_claim(const chk_run *r, int nlost)
{
    const chk_servers *sv = r->cfg->servers;
    if (r->cfg->caps & DLOCK_CAP_FENCING_WEAK)
        return 1;
    if (sv->topo & (CHK_TOPO_QUORUM | CHK_TOPO_CONSENSUS))
        return nlost >= sv->quorum;
    return 1;
}

static int lock_servers(chk_run *r, int *idx, int max)
{
    const chk_servers *sv = r->cfg->servers;
    int n = sv->lock_servers(sv->state, r->lock, idx, max);
    if (n <= 0)
        harness_error(r, "cannot tell which servers hold the lock", n ? n : -ENOENT);
    return n;
}

/* Let the parked holder a make its write (old token), then b (the holder
 * after the fault, parked after its read) go on. */
static void stale_then_new(chk_run *r, int a, uint64_t a_writes, int b)
{
    chk_let_go(r, a);
    if (chk_wait_writes(r, a, a_writes, ms_now_ns() + MS(10000)) != 0 && !r->error[0] &&
        !r->interrupted)
        snprintf(r->note, sizeof r->note, "a continued holder did not write within 10 s");
    if (b >= 0)
        chk_let_go(r, b);
}

/*
 * A server of the lock is killed and started again at once, without
 * persistence, while a holder A is parked inside its section: the server
 * comes back with no lock and a token counter that starts again. Another
 * worker B takes the lock and reads; then A makes its write with its old
 * token. On one master (redis://, sentinel, cluster) B gets the lock while A
 * still holds it, with a token below A's; on Redlock one master of five
 * forgets, which breaks the lock only if it was one of A's bare majority.
 */
static int inject_restart(chk_run *r)
{
    int turn = 0;
    if (chk_sleep(r, WARMUP_NS))
        return -1;
    while (chk_fault_more(r)) {
        chk_arm(r, CHK_FAULT_PARK);
        int a = chk_wait_claim(r, chk_fault_until(r));
        if (a < 0)
            break;
        int idx[CHK_LOCK_SERVERS];
        int n = lock_servers(r, idx, CHK_LOCK_SERVERS);
        if (n <= 0)
            return -1;
        int victim = idx[turn++ % n];
        uint64_t before = atomic_load(&r->sh->slot[a].writes);
        r->faults_injected++;
        int e = r->ctl->kill(r, CHK_SERVER, victim);
        chk_log(r->sh, H_DATA_LOSS, 0, 0, beyond_claim(r, 1), 0);
        if (e == 0)
            e = r->ctl->start(r, CHK_SERVER, victim);
        if (e) {
            chk_let_go(r, a);
            return harness_error(r, "cannot restart a server", e);
        }
        chk_arm(r, CHK_FAULT_PARK);
        /* briefly: the holder must write inside its ttl (which its renewals
         * extend, but the checker cannot see them) */
        int b = chk_wait_claim(r, ms_now_ns() + MS(r->ttl_ms / 2 < 500 ? r->ttl_ms / 2 : 500));
        if (b >= 0)
            r->faults_effective++;
        else if (!r->error[0] && !r->interrupted)
            snprintf(r->note, sizeof r->note,
                     "no other worker took the lock while its holder was parked after the "
                     "restart");
        stale_then_new(r, a, before, b);
        if (r->error[0] || r->interrupted)
            return -1;
        if (chk_sleep(r, FAULT_INTERVAL_NS))
            return -1;
    }
    return 0;
}

/*
 * Failover after replication was cut (replicas with failover, as Sentinel
 * runs them): with nobody holding or waiting, the master's replicas are cut
 * off (they keep their data and fall behind); a holder A takes the lock from
 * the master alone and parks; the master is killed; a replica that never
 * heard of A's lock (nor of the tokens issued since the cut) is promoted.
 * Another worker B takes the lock from the new master and reads; then A
 * makes its write.
 */
static int inject_failover_cut(chk_run *r)
{
    const chk_servers *sv = r->cfg->servers;
    if (chk_sleep(r, WARMUP_NS))
        return -1;
    chk_gate(r, 1);
    if (chk_gate_wait(r, ms_now_ns() + MS(5000)) < 0) {
        chk_gate(r, 0);
        if (r->interrupted || r->error[0])
            return -1;
        return harness_error(r, "workers did not stop before acquiring", ETIMEDOUT);
    }
    int idx[1];
    if (lock_servers(r, idx, 1) <= 0) {
        chk_gate(r, 0);
        return -1;
    }
    int m = idx[0];
    r->servers_touched = true;
    int cut = sv->cut_replication(sv->state, m);
    if (cut <= 0) {
        chk_gate(r, 0);
        return harness_error(r, "cannot cut replication", cut ? cut : -ENOENT);
    }
    chk_server_event(r, H_REPL_CUT, m);
    r->faults_injected++;
    chk_arm(r, CHK_FAULT_PARK);
    chk_gate(r, 0);
    int a = chk_wait_claim(r, ms_now_ns() + MS(5000));
    if (a < 0) {
        if (r->interrupted || r->error[0])
            return -1;
        return harness_error(r, "no worker took the lock after replication was cut", ETIMEDOUT);
    }
    uint64_t before = atomic_load(&r->sh->slot[a].writes);
    int e = r->ctl->kill(r, CHK_SERVER, m);
    chk_log(r->sh, H_DATA_LOSS, 0, 0, beyond_claim(r, 1), 0);
    if (e) {
        chk_let_go(r, a);
        return harness_error(r, "cannot kill the master", e);
    }
    int64_t t_kill = ms_now_ns();
    int nm = sv->wait_failover(sv->state, r->lock, m, t_kill + MS(60000));
    if (nm < 0) {
        chk_let_go(r, a);
        return harness_error(r, "no failover within 60 s of the master's death", nm);
    }
    chk_server_event(r, H_FAILOVER, nm);
    snprintf(r->note, sizeof r->note, "%s promoted %.1f s after %s was killed",
             sv->name(sv->state, nm), (double)(ms_now_ns() - t_kill) / 1e9,
             sv->name(sv->state, m));
    chk_arm(r, CHK_FAULT_PARK);
    int b = chk_wait_claim(r, ms_now_ns() + MS(10000));
    if (b >= 0)
        r->faults_effective++;
    stale_then_new(r, a, before, b);
    if (r->error[0] || r->interrupted)
        return -1;
    /* some sections on the new master */
    int64_t left = r->end_ns - ms_now_ns();
    return chk_sleep(r, left > MS(300) ? left : MS(300));
}

/*
 * Servers killed while a holder A is parked inside its section, as many as
 * the deployment survives (pick chooses them: their indexes into victims,
 * how many, or a negative errno): nobody else may take the lock while A
 * holds it on those left, and once A is done the lock must go on working
 * with them alone. The killed servers are started again (empty) after the
 * run.
 */
#define VICTIMS_MAX 64
static int kill_while_held(chk_run *r, int (*pick)(chk_run *r, int *victims), const char *what)
{
    if (chk_sleep(r, WARMUP_NS))
        return -1;
    chk_arm(r, CHK_FAULT_PARK);
    int a = chk_wait_claim(r, chk_fault_until(r));
    if (a < 0)
        return 0;
    int victims[VICTIMS_MAX];
    int k = pick(r, victims);
    if (k <= 0) {
        chk_let_go(r, a);
        return harness_error(r, what, k < 0 ? k : -EINVAL);
    }
    for (int i = 0; i < k; i++) {
        int e = r->ctl->kill(r, CHK_SERVER, victims[i]);
        if (e) {
            chk_let_go(r, a);
            return harness_error(r, "cannot kill a server", e);
        }
        r->faults_injected++;
    }
    /* A holds the lock on the majority left: nobody may take it now. */
    chk_arm(r, CHK_FAULT_PARK);
    int64_t hold = MS(r->ttl_ms / 2 < 500 ? r->ttl_ms / 2 : 500);
    int b = chk_wait_claim(r, ms_now_ns() + hold);
    chk_let_go(r, a);
    if (b >= 0)
        chk_let_go(r, b); /* an overlap: the checker reports it */
    r->faults_effective++;
    /* The lock must go on working with the servers left, once they have
     * recovered: how long that takes is the deployment's (an election under
     * load has taken seconds, past the end of a short run), so the first
     * holder after the fault is waited for, up to RECOVERY_WAIT_NS, and the
     * time it took is reported. None: the checker says unavailable. */
    if (b < 0) {
        int64_t let_go = ms_now_ns();
        chk_arm(r, CHK_FAULT_PARK);
        int c = chk_wait_claim(r, let_go + RECOVERY_WAIT_NS);
        if (c >= 0) {
            chk_let_go(r, c);
            snprintf(r->note, sizeof r->note, "the first holder after the fault %.0f ms after the "
                     "parked one let go", (double)(ms_now_ns() - let_go) / 1e6);
        } else if (!r->error[0] && !r->interrupted) {
            /* Whether the servers left elected a leader says whose the
             * stall is: the deployment's (none) or the clients' (one). */
            const chk_servers *sv = r->cfg->servers;
            int ld = sv->leader ? sv->leader(sv->state) : -ENOTSUP;
            snprintf(r->note, sizeof r->note, "nobody took the lock within %.0f s after the "
                     "parked holder let go (the leader then: %s)", (double)RECOVERY_WAIT_NS / 1e9,
                     ld >= 0 ? sv->name(sv->state, ld) : strerror(-ld));
        }
    }
    int64_t left = r->end_ns - ms_now_ns();
    return chk_sleep(r, left > MS(500) ? left : MS(500));
}

/* A minority of the data servers (two of five Redlock masters, one of a
 * three-member ensemble), others each run. */
static int pick_minority(chk_run *r, int *victims)
{
    static int turn;
    const chk_servers *sv = r->cfg->servers;
    int data[VICTIMS_MAX], nd = 0;
    for (int i = 0; i < sv->count && nd < VICTIMS_MAX; i++)
        if (sv->holds_data(sv->state, i))
            data[nd++] = i;
    int k = nd - sv->quorum;
    for (int i = 0; i < k; i++)
        victims[i] = data[(turn + i) % nd];
    turn += k > 0 ? k : 0;
    return k;
}

static int inject_kill_minority(chk_run *r)
{
    return kill_while_held(r, pick_minority, "no minority of servers to kill");
}

/* The leader of a consensus ensemble, found while the holder is parked: a
 * new one is elected, and the holder's session must outlive the election. */
static int pick_leader(chk_run *r, int *victims)
{
    const chk_servers *sv = r->cfg->servers;
    int leader = sv->leader(sv->state);
    if (leader >= 0)
        victims[0] = leader;
    return leader < 0 ? leader : 1;
}

static int inject_kill_leader(chk_run *r)
{
    return kill_while_held(r, pick_leader, "cannot tell the ensemble's leader");
}

static bool in_poll(long nr)
{
#ifdef SYS_poll
    if (nr == SYS_poll)
        return true;
#endif
#ifdef SYS_ppoll
    if (nr == SYS_ppoll)
        return true;
#endif
    return false;
}

static int resume_all(chk_run *r, const int *idx, int n)
{
    int rc = 0;
    for (int i = 0; i < n; i++) {
        int e = r->ctl->resume(r, CHK_SERVER, idx[i]);
        if (e && !rc)
            rc = e;
    }
    return rc;
}

/*
 * A client stopped between sending its acquisition and reading the replies,
 * for longer than the ttl. With nobody else holding or waiting, the lock's
 * servers are stopped (SIGSTOP) and one worker A is let through the gate: it
 * sends its request and waits for the reply in poll(2), where the harness
 * sees it (/proc/PID/syscall) and stops it. Then the servers go on, grant
 * the free lock to A (the reply lies unread in A's socket) and the lease
 * runs out while A is stopped; another worker B takes the lock and reads.
 * A is continued min(ttl/2, 0.5 s) after the lease ran out on the servers
 * (a session the client vouches for: 1.5 ttl), or once B has the lock if
 * that comes later (up to a ttl more): its acquisition must fail. If it
 * reports success instead, A makes its write with that token. If nobody
 * took the lock by then, the servers kept A's session (H_KEPT): that
 * acquisition proves nothing either way and is counted apart.
 *
 * The request must lie unread at every server it goes to: each of a
 * quorum's independent servers (Redlock), but only one member of a
 * consensus ensemble, the one the client is connected to (it forwards to
 * the leader). Every member is stopped, so none can act on it.
 */
static int inject_pause_acquire(chk_run *r)
{
    chk_shm *sh = r->sh;
    const chk_servers *sv = r->cfg->servers;
    /* stopped longer than the lease on the servers by this much: time for
     * another worker to take the lock once the lease ran out there
     * (waiters look again every ttl/4 at least), short enough that it then
     * waits parked well inside its own lease */
    int64_t extra = MS(r->ttl_ms / 2 < 500 ? r->ttl_ms / 2 : 500);
    if (extra < MS(20))
        extra = MS(20);
    if (chk_sleep(r, WARMUP_NS))
        return -1;
    while (!chk_time_up(r)) {
        chk_gate(r, 1);
        int a = chk_gate_wait(r, ms_now_ns() + MS(5000));
        if (a < 0) {
            chk_gate(r, 0);
            if (r->interrupted || r->error[0])
                return -1;
            return harness_error(r, "workers did not stop before acquiring", ETIMEDOUT);
        }
        int idx[CHK_LOCK_SERVERS];
        int n = lock_servers(r, idx, CHK_LOCK_SERVERS);
        if (n <= 0) {
            chk_gate(r, 0);
            return -1;
        }
        for (int i = 0; i < n; i++) {
            int e = r->ctl->pause(r, CHK_SERVER, idx[i]);
            if (e) {
                (void)resume_all(r, idx, i);
                chk_gate(r, 0);
                return harness_error(r, "cannot stop a server", e);
            }
        }
        chk_gate_pass(r, a, true);
        /* Its request must lie unread at every server it went to, and the
         * worker wait in poll(2) for the replies, with every thread asleep:
         * a client's I/O thread may not have sent it yet (ZooKeeper's), and
         * what lies unread then is a ping. */
        int ports[CHK_LOCK_SERVERS];
        for (int i = 0; i < n; i++)
            ports[i] = sv->port(sv->state, idx[i]);
        int need = sv->topo & CHK_TOPO_CONSENSUS ? 1 : n;
        bool waiting = false;
        int e = 0;
        int64_t until = ms_now_ns() + MS(2000);
        while (!waiting && !e && ms_now_ns() < until) {
            waiting = atomic_load(&sh->slot[a].in_acquire) && in_poll(chk_worker_syscall(r, a)) &&
                      chk_worker_asleep(r, a) && chk_requests_pending(r, a, ports, n) >= need;
            if (waiting) {
                e = r->ctl->pause(r, CHK_CLIENT, a);
                /* It may have given up (its acquisition's own timeout)
                 * between the look and the stop: then it was not stopped
                 * in the window this is about. Continue it, look again. */
                if (!e && (!atomic_load(&sh->slot[a].in_acquire) ||
                           atomic_load(&sh->slot[a].acq_outcome) != 0)) {
                    waiting = false;
                    e = r->ctl->resume(r, CHK_CLIENT, a);
                }
            }
            if (!waiting)
                ms_sleep_ns(20000);
        }
        int64_t t_stop = ms_now_ns();
        int e2 = resume_all(r, idx, n);
        /* The others stay at the gate until the servers have read A's
         * request, so that it comes first and is granted (a member of an
         * ensemble forwards it to the leader, which the others could
         * reach sooner) */
        int64_t read_until = ms_now_ns() + MS(r->ttl_ms / 4);
        while (waiting && !e2 && chk_requests_pending(r, a, ports, n) > 0 &&
               ms_now_ns() < read_until)
            ms_sleep_ns(MS(1));
        chk_gate(r, 0);
        if (e || e2)
            return harness_error(r, "cannot stop a worker or continue a server", e ? e : e2);
        if (!waiting) {
            snprintf(r->note, sizeof r->note,
                     "a worker let through the gate was not seen waiting for its reply");
            if (chk_sleep(r, FAULT_INTERVAL_NS))
                return -1;
            continue;
        }
        r->faults_injected++;
        /* The lease runs out on the servers; someone else takes the lock. */
        chk_arm(r, CHK_FAULT_PARK);
        int64_t wake = t_stop + MS(chk_server_span_ms(r->cfg, r->ttl_ms)) + extra;
        /* The servers may end it later still (ZooKeeper expires sessions
         * on its tick, etcd's leader revokes leases on its own round):
         * A stays stopped until another worker took the lock, up to a ttl
         * more. */
        int b = chk_wait_claim(r, wake + MS(r->ttl_ms));
        /* Nobody took the lock while A was stopped, for the span and a ttl
         * more: the servers kept A's session (an etcd leader elected after
         * the servers went on renews every lease), so the fault did not
         * take effect, and A's grant, if it comes, is not a late one. */
        bool kept = b < 0 && !r->error[0] && !r->interrupted;
        if (b >= 0 && ms_now_ns() < t_stop + MS(r->ttl_ms / 2)) {
            /* taken while A's request was out: it did not get the lock (on
             * a quorum); do not keep B past its own lease */
            chk_let_go(r, b);
            b = -1;
            snprintf(r->note, sizeof r->note,
                     "another worker took the lock while a stopped acquisition was in flight");
        }
        if (kept) {
            chk_log(sh, H_KEPT, atomic_load(&sh->slot[a].id), 0, 0, 0);
            r->acq_kept++;
        }
        if (chk_sleep(r, wake - ms_now_ns()))
            return -1;
        uint64_t before = atomic_load(&sh->slot[a].writes);
        e = r->ctl->resume(r, CHK_CLIENT, a);
        if (e)
            return harness_error(r, "cannot continue a worker", e);
        int64_t wait_until = ms_now_ns() + MS(10000);
        while (atomic_load(&sh->slot[a].acq_outcome) == 0 && ms_now_ns() < wait_until)
            if (chk_sleep(r, MS(1)))
                return -1;
        int outcome = atomic_load(&sh->slot[a].acq_outcome);
        if (kept) {
            /* counted above, judged by nothing but overlaps and fencing */
        } else if (outcome == 1) {
            r->acq_granted++;
            if (atomic_load(&sh->slot[a].acq_state) == DLOCK_STATE_HELD)
                r->acq_held++;
            /* its write, with the token of the late grant */
            if (chk_wait_writes(r, a, before, ms_now_ns() + MS(5000)) != 0 &&
                !r->error[0] && !r->interrupted)
                snprintf(r->note, sizeof r->note, "a late-granted worker did not write within 5 s");
        } else if (outcome == 2) {
            r->acq_failed++;
        } else if (!r->error[0] && !r->interrupted) {
            snprintf(r->note, sizeof r->note, "a continued worker's acquisition did not return "
                                              "within 10 s");
        }
        if (b >= 0)
            chk_let_go(r, b);
        if (outcome != 0 && !kept)
            r->faults_effective++;
        if (r->error[0] || r->interrupted)
            return -1;
        if (chk_sleep(r, FAULT_INTERVAL_NS))
            return -1;
    }
    return 0;
}

/* ---- a holder cut off from the servers ----------------------------------- */

/*
 * Every worker reaches the servers through a relay of its own
 * (check_relay.c). A holder A is parked inside its section (after its read)
 * and, some time into its holding (a varying fraction of the ttl, so that
 * the cut falls at different points of the renewal cycle), its relay is
 * frozen: its connections stay open and nothing flows, so its renewals hang.
 * The lease runs out on the servers and another worker B takes the lock and
 * reads. A must have been told of the loss (on_lost, dlock_state, the lost
 * descriptor) before that — its holding counts until it is told. Then A
 * makes its write with its old token (fencing must refuse it; the canary
 * loses B's increment), B goes on, and A's relay is continued ttl + margin
 * after it was frozen.
 */
static const int cut_permille[] = {500, 100, 300, 450, 200, 400, 50, 350, 150, 250};

/* A partition scenario's next holder, parked before its write: its slot,
 * or < 0 when none came by the run's end (and at least 5 s from now, so
 * that a run's last fault still has its holder). */
static int park_next_holder(chk_run *r)
{
    chk_arm(r, CHK_FAULT_PARK);
    int64_t until = r->end_ns > ms_now_ns() + MS(5000) ? r->end_ns : ms_now_ns() + MS(5000);
    return chk_wait_claim(r, until);
}

/* The cut-off holder a (parked before its write; before: its writes then)
 * while another worker takes the lock by until_ns: that worker (b, or < 0
 * when none did); a let go to its write, and *w 0 when it wrote within 5 s
 * while b still held (-1 when it did not, or there was no b). */
static int takeover_then_write(chk_run *r, int a, uint64_t before, int64_t until_ns, int *w)
{
    chk_arm(r, CHK_FAULT_PARK);
    int b = chk_wait_claim(r, until_ns);
    chk_let_go(r, a);
    *w = -1;
    if (b >= 0) {
        *w = chk_wait_writes(r, a, before, ms_now_ns() + MS(5000));
        chk_let_go(r, b);
    }
    return b;
}

static int inject_partition(chk_run *r)
{
    int64_t ttl = MS(r->ttl_ms);
    int64_t margin = ttl / 4 < MS(250) ? MS(250) : ttl / 4 > MS(2000) ? MS(2000) : ttl / 4;
    /* the servers' own rounding of a lease (memcached's whole seconds) */
    margin += MS(r->cfg->topo.lease_slack_ms);
    static int turn; /* the next run goes on with the next cut points */
    int tries = 0;
    if (chk_sleep(r, WARMUP_NS))
        return -1;
    /* at least one cut, however short the run */
    while (!chk_time_up(r) || (r->faults_effective == 0 && tries < 3)) {
        tries++;
        int a = park_next_holder(r);
        if (a < 0)
            break;
        int64_t hold = ttl * cut_permille[turn++ % 10] / 1000;
        if (chk_sleep(r, hold)) {
            chk_let_go(r, a);
            return -1;
        }
        uint64_t before = atomic_load(&r->sh->slot[a].writes);
        int e = r->ctl->partition(r, CHK_CLIENT, a, 1);
        if (e) {
            chk_let_go(r, a);
            return harness_error(r, "cannot freeze a worker's relay", e);
        }
        int64_t t_cut = ms_now_ns();
        r->faults_injected++;
        /* The lease runs out on the servers; someone else takes the lock. */
        /* A goes on to its write, still cut off from the servers */
        int w, b = takeover_then_write(r, a, before, t_cut + ttl + margin, &w);
        int64_t left = t_cut + ttl + margin - ms_now_ns();
        if (left > 0 && chk_sleep(r, left))
            return -1;
        e = r->ctl->partition(r, CHK_CLIENT, a, 0);
        if (e)
            return harness_error(r, "cannot continue a worker's relay", e);
        if (r->error[0] || r->interrupted)
            return -1;
        if (b < 0)
            snprintf(r->note, sizeof r->note,
                     "no other worker took the lock while its holder was cut off");
        else if (w != 0)
            snprintf(r->note, sizeof r->note, "a holder cut off did not write within 5 s");
        else
            r->faults_effective++;
        if (chk_sleep(r, FAULT_INTERVAL_NS))
            return -1;
    }
    return 0;
}

static const char *partition_cannot_run(const chk_config *cfg, char *why, size_t len)
{
    if (!(cfg->caps & DLOCK_CAP_LEASE)) {
        snprintf(why, len, "this backend's locks do not expire while the holder lives, so a "
                           "holder cut off from the servers keeps the lock");
        return why;
    }
    chk_upstreams u;
    const char *url = cfg->url ? cfg->url : getenv("DLOCK_URL");
    return chk_upstreams_parse(url, &cfg->topo, &u, why, len) == 0 ? NULL : why;
}

/* ---- a member cut off from the others ------------------------------------- */

/*
 * A partition between servers (chk_scenario.split): worker 0 reaches only a
 * follower M, the other workers only the other members. Worker 0 takes the
 * lock and parks inside its section; some time into its holding M's links
 * to the other members are frozen (its clients still reach it, and it
 * still answers what it can answer alone: reads). The leader no longer
 * hears of worker 0's session, expires it and grants the lock to a worker
 * on the other side. Worker 0 must have been told before its span (from
 * the cut: nothing it sent since can have reached the leader) ran out, and
 * so before the other was granted; then it makes its stale write. M's links
 * flow again once the other worker has had the lock, and M rejoins.
 */
static int inject_partition_member(chk_run *r)
{
    int64_t ttl = MS(r->ttl_ms);
    /* the leader lets go a session timeout (1.5 spans) after it last heard
     * of it, on its tick; elections and a loaded machine take more */
    int64_t takeover = 2 * ttl + MS(2000);
    static int turn;
    int tries = 0, m = r->split_member;
    if (chk_sleep(r, WARMUP_NS))
        return -1;
    while (!chk_time_up(r) || (r->faults_effective == 0 && tries < 6)) {
        tries++;
        int a = park_next_holder(r);
        if (a < 0)
            break;
        if (a != 0) { /* a holder on the majority's side: not the case */
            chk_let_go(r, a);
            if (chk_sleep(r, FAULT_INTERVAL_NS))
                return -1;
            continue;
        }
        if (chk_sleep(r, ttl * cut_permille[turn++ % 10] / 1000)) {
            chk_let_go(r, a);
            return -1;
        }
        /* An election since the run began (a member rejoining after the
         * last cut may win one) can have made M the leader: cut off, it
         * keeps renewing on its own until it steps down, which is another
         * case (its successor's leases start later). Not this time. */
        const chk_servers *sv = r->cfg->servers;
        if (sv->leader(sv->state) == m) {
            chk_let_go(r, a);
            snprintf(r->note, sizeof r->note,
                     "the member worker 0 reaches had become the leader: not cut off");
            if (chk_sleep(r, FAULT_INTERVAL_NS))
                return -1;
            continue;
        }
        uint64_t before = atomic_load(&r->sh->slot[a].writes);
        int e = r->ctl->partition(r, CHK_SERVER, m, 1);
        if (e) {
            chk_let_go(r, a);
            return harness_error(r, "cannot cut a member off from the others", e);
        }
        int64_t t_cut = ms_now_ns();
        /* worker 0 holds until told; by its span from the cut at the latest */
        chk_log(r->sh, H_PARTITIONED, atomic_load(&r->sh->slot[a].id), 0, t_cut + ttl, 0);
        chk_server_event(r, H_SERVER_PAUSED, m);
        r->faults_injected++;
        int w, b = takeover_then_write(r, a, before, t_cut + takeover, &w);
        e = r->ctl->partition(r, CHK_SERVER, m, 0);
        chk_server_event(r, H_SERVER_RESUMED, m);
        if (e)
            return harness_error(r, "cannot reconnect a member to the others", e);
        if (r->error[0] || r->interrupted)
            return -1;
        if (b < 0)
            snprintf(r->note, sizeof r->note,
                     "no worker on the other members took the lock while the holder's member "
                     "was cut off");
        else if (w != 0)
            snprintf(r->note, sizeof r->note, "a holder cut off did not write within 5 s");
        else
            r->faults_effective++;
        /* M rejoins the ensemble (it gave up on the leader, or will) */
        if (chk_sleep(r, ttl + MS(1000)))
            return -1;
    }
    return 0;
}

static const char *partition_member_cannot_run(const chk_config *cfg, char *why, size_t len)
{
    const chk_servers *sv = cfg->servers;
    if (!chk_has_deadline(cfg)) {
        snprintf(why, len, "this backend's locks have no deadline on the holder's clock");
        return why;
    }
    int n = 0;
    for (int i = 0; sv && sv->partitionable && i < sv->count; i++)
        n += sv->holds_data(sv->state, i) && sv->partitionable(sv->state, i);
    if (n < 2) { /* one of them may lead */
        snprintf(why, len, "the deployment has no way to cut one member off from the others "
                           "(beside NAME.pid, NAME.links: the relays of its links, as "
                           "tests/servers.sh starts zk3p; or NAME.partition, run with on or "
                           "off, as for etcd3n)");
        return why;
    }
    return NULL;
}

/* ---- claims ----------------------------------------------------------------- */

/*
 * Claim runners faulted (chk_scenario.claims: the workers run claims on one
 * key after another, the fault point inside a claim's run), in turn: a
 * runner killed (SIGKILL) and replaced, its key then run again by another
 * worker once its lock is free, as attempt N+1; and a runner stopped
 * (SIGSTOP), past the span its holding lives on the servers where holdings
 * expire (another worker runs the key again, and the stopped one's record
 * must be refused), else for a moment (nobody may run it meanwhile).
 */
static int inject_claims(chk_run *r)
{
    int64_t span_ns = lock_span_ns(r);
    int64_t pause_ns = span_ns ? span_ns + MS(500) : MS(300);
    int turn = 0;
    while (chk_fault_more(r)) {
        chk_arm(r, CHK_FAULT_PARK);
        int a = chk_wait_claim(r, chk_fault_until(r));
        if (a < 0)
            break;
        r->faults_injected++;
        int e;
        if (turn++ % 2 == 0) {
            e = r->ctl->kill(r, CHK_CLIENT, a);
            if (e == 0)
                e = r->ctl->start(r, CHK_CLIENT, a);
            if (e)
                return harness_error(r, "claims scenario: cannot kill or restart a worker", e);
        } else {
            e = r->ctl->pause(r, CHK_CLIENT, a);
            if (e)
                return harness_error(r, "claims scenario: cannot stop a worker", e);
            if (chk_sleep(r, pause_ns))
                return -1;
            e = r->ctl->resume(r, CHK_CLIENT, a);
            chk_let_go(r, a);
            if (e)
                return harness_error(r, "claims scenario: cannot continue a worker", e);
        }
        r->faults_effective++;
        if (chk_sleep(r, FAULT_INTERVAL_NS))
            return -1;
    }
    /* The killed runner's key runs again once its lock is free (a span
     * later where holdings expire): the run lasts until one did. */
    int64_t rerun_until = ms_now_ns() + 2 * span_ns + MS(10000);
    while (atomic_load(&r->sh->claim_reruns) == 0 && r->faults_injected > 0 &&
           ms_now_ns() < rerun_until)
        if (chk_sleep(r, MS(5)))
            return -1;
    if (atomic_load(&r->sh->claim_reruns) == 0)
        snprintf(r->note, sizeof r->note, "no key ran again after its runner was killed");
    return 0;
}

static const char *claims_cannot_run(const chk_config *cfg, char *why, size_t len)
{
    if (cfg->caps & DLOCK_CAP_CLAIMS)
        return NULL;
    snprintf(why, len, "this backend keeps no claims (DLOCK_CAP_CLAIMS)");
    return why;
}

const chk_scenario chk_scenarios[] = {
    {"none", "no fault: workers contend for the lock", 0, NULL, 0, 0, CHK_VALID_RUNS, false, 0,
     inject_none, false, NULL, false, false},
    {"kill",
     "SIGKILL of the holder between its read and its write; a new worker replaces it", 0, NULL,
     0, 0, CHK_VALID_TAKEOVER, true, 0, inject_kill, false, NULL, false, false},
    {"pause",
     "SIGSTOP of the holder between read and write for longer than a lease (ttl + 0.5 s), "
     "then SIGCONT while another holder is inside its section; the holder's first look at "
     "dlock_state() after SIGCONT must say LOST",
     DLOCK_CAP_LEASE,
     "this backend's locks do not expire while the holder lives (released only by the holder, "
     "its death or its session's end), so a stopped holder keeps the lock",
     0, 0, CHK_VALID_CANARY, true, 0, inject_pause, false, NULL, false, false},
    {"pause-lost",
     "the holder loses the lock between read and write (dlock_debug_force_loss, as an expired "
     "lease would), is stopped while another worker takes the lock and reads, then continued "
     "to make its stale write",
     0, NULL, 0, 0, CHK_VALID_CANARY, true, 0, inject_pause_lost, false, NULL, false, false},
    {"pause-acquire",
     "a client stopped between sending its acquisition and reading the replies, for "
     "min(ttl/2, 0.5 s) past the lease's end on the servers (a session: 1.5 ttl), or until "
     "another worker took the lock (up to a ttl more) (its servers held back until the "
     "request lies unread at each of them, or at the member it went to on a consensus "
     "ensemble, and the client waits in poll): the acquisition must fail",
     DLOCK_CAP_LEASE,
     "this backend's locks do not expire, so a late reply still grants a valid lock", 1,
     CHK_TOPO_ANY, CHK_VALID_STOPACQ, true, 0, inject_pause_acquire, false, NULL, false, false},
    {"restart",
     "a server of the lock killed and started again at once, without persistence, while the "
     "holder is inside its section; another worker takes the lock, then the holder writes",
     0, NULL, 1, CHK_TOPO_ANY, CHK_VALID_DATALOSS, true, 1000, inject_restart, false, NULL, false,
     false},
    {"failover-cut",
     "failover after replication to the replicas was cut (e.g. Sentinel): a holder takes the "
     "lock from the master alone, the master is killed, a stale replica is promoted and another "
     "worker takes the lock there (ttl at least 8 s, so that the first holding outlives the "
     "failover)",
     0, NULL, 1, CHK_TOPO_REPLICAS_FAILOVER, CHK_VALID_DATALOSS, true, 8000, inject_failover_cut,
     false, NULL, false, false},
    {"kill-minority",
     "a minority of the data servers (two of five Redlock masters, one of a three-member "
     "ensemble) killed while the holder is inside its section: nobody else may take the lock, "
     "and it must go on working",
     0, NULL, 1, CHK_TOPO_QUORUM | CHK_TOPO_CONSENSUS, CHK_VALID_SERVER, false, 0,
     inject_kill_minority, false, NULL, false, false},
    {"partition",
     "the holder cut off from the servers inside its section (its TCP relay frozen) for ttl "
     "+ max(ttl/4, 0.25 s) up to 2 s more: its lock must be declared lost before its lease "
     "runs out on the servers, and its callback run before another worker takes the lock; "
     "then it makes its stale write (where clients connect straight to the URL's servers, "
     "e.g. redis:// and redlock://)",
     DLOCK_CAP_LEASE,
     "this backend's locks do not expire while the holder lives, so a holder cut off from "
     "the servers keeps the lock",
     0, 0, CHK_VALID_PARTITION, true, 0, inject_partition, true, partition_cannot_run, false,
     false},
    {"kill-leader",
     "the leader of a consensus ensemble killed while the holder is inside its section: a "
     "new leader is elected, nobody else may take the lock, and it must go on working",
     0, NULL, 1, CHK_TOPO_CONSENSUS, CHK_VALID_SERVER, false, 0, inject_kill_leader, false,
     NULL, false, false},
    {"partition-member",
     "a member of a consensus ensemble cut off from the other members (its links to them "
     "frozen), with worker 0 on it alone and the others on the rest: worker 0 takes the "
     "lock, the cut falls inside its section; its lock must be declared lost within its "
     "span from the cut, and its callback run before the majority's side grants the lock to "
     "another worker; then it makes its stale write",
     0, NULL, 1, CHK_TOPO_CONSENSUS, CHK_VALID_PARTITION, true, 0, inject_partition_member,
     false, partition_member_cannot_run, true, false},
    {"claims",
     "workers run claims (dlock_claim_begin) on one key after another; runners killed "
     "(SIGKILL) inside a claim's run, or stopped (SIGSTOP) past their lease where holdings "
     "expire: per key, no run while an earlier runner lives and holds it, every re-run after a "
     "crash a higher attempt, every replay the recorded result",
     DLOCK_CAP_CLAIMS, "this backend keeps no claims", 0, 0, CHK_VALID_CLAIMS, false, 0,
     inject_claims, false, claims_cannot_run, false, true},
};

const size_t chk_nscenarios = sizeof chk_scenarios / sizeof chk_scenarios[0];

const chk_scenario *chk_scenario_find(const char *name)
{
    for (size_t i = 0; i < chk_nscenarios; i++)
        if (strcmp(chk_scenarios[i].name, name) == 0)
            return &chk_scenarios[i];
    return NULL;
}
