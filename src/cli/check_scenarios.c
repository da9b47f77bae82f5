/*
 * check_scenarios.c — the fault scenarios of `dlock check`.
 *
 * A scenario is a name and an inject function that runs for the length of
 * the run, driving faults through r->ctl. Backend issues add their server
 * faults here (restart of a server, kill of a minority of Redlock masters, a
 * leader kill, a failover) by appending to the table: they use
 * r->ctl->kill(r, CHK_SERVER, i) and friends, which the backend's test
 * deployment implements, and set needs_servers.
 */
#include "check.h"

#include <dlock.h>

#include <errno.h>
#include <stdio.h>
#include <string.h>

#define FAULT_INTERVAL_NS 100000000LL /* let the others run between faults */
#define TAKEOVER_WAIT_NS 1000000000LL

static int inject_none(chk_run *r)
{
    return chk_sleep(r, r->end_ns - ms_now_ns());
}

/* SIGKILL of a holder parked between its read and its write, then a fresh
 * worker in its place. The kernel (or the session, or the lease) must free
 * the lock: the others go on taking it. */
static int inject_kill(chk_run *r)
{
    while (!chk_time_up(r)) {
        chk_arm(r, CHK_FAULT_PARK);
        int s = chk_wait_claim(r, r->end_ns);
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
    int64_t pause_ns = ((int64_t)r->cfg->ttl_ms + 500) * 1000000;
    while (!chk_time_up(r)) {
        chk_arm(r, lose ? CHK_FAULT_LOSE : CHK_FAULT_PARK);
        int a = chk_wait_claim(r, r->end_ns);
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

const chk_scenario chk_scenarios[] = {
    {"none", "no fault: workers contend for the lock", 0, NULL, 0, CHK_VALID_RUNS, inject_none},
    {"kill",
     "SIGKILL of the holder between its read and its write; a new worker replaces it", 0, NULL,
     0, CHK_VALID_TAKEOVER, inject_kill},
    {"pause",
     "SIGSTOP of the holder between read and write for longer than a lease (ttl + 0.5 s), "
     "then SIGCONT while another holder is inside its section",
     DLOCK_CAP_LEASE,
     "this backend's locks do not expire while the holder lives (released only by the holder, "
     "its death or its session's end), so a stopped holder keeps the lock",
     0, CHK_VALID_CANARY, inject_pause},
    {"pause-lost",
     "the holder loses the lock between read and write (dlock_debug_force_loss, as an expired "
     "lease would), is stopped while another worker takes the lock and reads, then continued "
     "to make its stale write",
     0, NULL, 0, CHK_VALID_CANARY, inject_pause_lost},
};

const size_t chk_nscenarios = sizeof chk_scenarios / sizeof chk_scenarios[0];

const chk_scenario *chk_scenario_find(const char *name)
{
    for (size_t i = 0; i < chk_nscenarios; i++)
        if (strcmp(chk_scenarios[i].name, name) == 0)
            return &chk_scenarios[i];
    return NULL;
}
