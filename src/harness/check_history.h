/* SPDX-License-Identifier: MIT */
/*
 * check_history.h — the history of a `dlock check` run and its checker.
 *
 * A history is a list of events stamped with CLOCK_MONOTONIC nanoseconds:
 * what workers did with the lock, what the guarded resource accepted or
 * rejected, and which faults the harness injected. The checker knows nothing
 * about processes or backends; it only reads events, so that it can be run
 * on a hand-made history (`dlock check --check-history FILE`, and the unit
 * test tests/test_checker.c, which includes check_history.c directly).
 *
 * Text form, one event per line ('#' starts a comment):
 *
 *   run scenario=kill mode=fenced backend=file caps=0x5f ttl_ms=0 fencing=1
 *   1000 acquire w=1
 *   1200 acquired w=1 token=5
 *   1300 read w=1 token=5 value=0
 *   1400 write_accepted w=1 token=5 value=1
 *   1500 release w=1
 *   9000 final value=1
 *
 * A "run" line starts a new run; events before any run line belong to a run
 * with default metadata (exclusive lock, fencing claimed and checked).
 */
#ifndef DLOCK_CLI_CHECK_HISTORY_H
#define DLOCK_CLI_CHECK_HISTORY_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

typedef enum hist_type {
    H_ACQUIRE = 0,    /* worker invokes acquire */
    H_ACQUIRED,       /* acquire returned the lock; token, promised end (0 none) */
    H_ACQUIRE_FAILED, /* acquire returned an error; rc */
    H_LOST,           /* the holder lost the lock (stamped before the loss) */
    H_RELEASE,        /* worker invokes release */
    H_READ,           /* resource: read served; token presented, value read */
    H_WRITE_ACCEPTED, /* resource: write applied; token, value written */
    H_WRITE_REJECTED, /* resource: write refused by the token check */
    H_KILLED,         /* harness: SIGKILL sent to the worker */
    H_PAUSED,         /* harness: SIGSTOP */
    H_RESUMED,        /* harness: SIGCONT */
    H_FINAL,          /* resource: value at the end of the run */
    /* added with the server faults; the names are part of the text form */
    H_STATE,          /* worker looked: value = dlock_state(), rc = 1 if lost_fd was readable */
    H_LOST_NOTIFIED,  /* the library told the holder (on_lost callback) */
    H_SERVER_KILLED,  /* harness: SIGKILL of server number `value` */
    H_SERVER_STARTED, /* harness: server `value` (re)started, answering */
    H_SERVER_PAUSED,  /* harness: SIGSTOP of server `value` */
    H_SERVER_RESUMED, /* harness: SIGCONT of server `value` */
    H_REPL_CUT,       /* harness: replication from master `value` to its replicas cut */
    H_FAILOVER,       /* harness: server `value` now serves the lock as master */
    H_DATA_LOSS,      /* harness: the lock service lost acknowledged state here;
                         value 1: beyond what the backend claims to survive */
    /* added with the partition scenario */
    H_PARTITIONED,    /* harness: worker cut off from the servers (its relay frozen);
                         value: when its lease runs out on the servers (0 unknown).
                         It holds until it is told of the loss or releases. */
    H_HEALED,         /* harness: the worker's relay continued */
    /* added with session leases older than the acquisition (etcd) */
    H_VALID,          /* worker, about to write: value = the end of its holding as the
                         library promises it now (renewals move it on) */
    /* added with the servers that keep a stopped acquisition's session */
    H_KEPT,           /* harness: the worker, stopped in its acquisition past the span
                         its holding lives on the servers, was not succeeded by anyone:
                         the servers kept its session (an etcd leader elected after
                         the servers went on renews every lease). Its grant is not
                         judged late. */
    /* added with the claims scenario (dlock_claim_begin): token = the key's
     * number, worker = the caller */
    H_CLAIM_RUN,      /* begin said RUN: value = the attempt */
    H_CLAIM_FINISH,   /* the runner is about to record: value = its result's hash */
    H_CLAIM_FINISHED, /* ... and recorded it (rc 0) or not (rc: the error) */
    H_CLAIM_REPLAY,   /* begin said DONE: value = the replayed result's hash,
                         rc = the recorded attempt */
    H_NTYPES
} hist_type;

typedef struct hist_event {
    int64_t t;      /* CLOCK_MONOTONIC nanoseconds */
    uint64_t seq;   /* logging order: breaks ties between equal stamps */
    int type;       /* hist_type */
    int worker;     /* > 0: a worker incarnation; 0: harness or resource */
    uint64_t token;
    int64_t value;
    int rc;
} hist_event;

typedef struct hist_meta {
    char scenario[48];
    char mode[16];    /* "fenced" or "canary" */
    char backend[32];
    unsigned caps;    /* DLOCK_CAP_* of the backend under test */
    int64_t ttl_ms;   /* > 0: a holding ends at acquire start + ttl at the latest */
    int fencing;      /* 1 if the resource checked tokens */
} hist_meta;

typedef struct hist_run {
    hist_meta meta;
    hist_event *ev;
    size_t n, cap;
} hist_run;

typedef struct hist_result {
    uint64_t sections;          /* acquisitions (windows) */
    uint64_t late_grants;       /* acquisitions reported after their validity deadline */
    uint64_t acquire_failed;
    uint64_t overlaps;          /* pairs of holders' windows that overlap */
    uint64_t token_dups;        /* acquisitions whose token was issued before */
    uint64_t token_regressions; /* acquisitions whose token is not above the previous one */
    uint64_t reads, writes, writes_accepted, writes_rejected;
    uint64_t stale_rejected;    /* writes by a holder no longer valid, refused */
    uint64_t stale_accepted;    /* ... and applied */
    uint64_t fresh_rejected;    /* writes by the valid holder that were refused */
    int has_final;
    int64_t final_value;
    int64_t lost_increments;    /* accepted writes - final value */
    uint64_t losses, kills, kills_holding, pauses, takeovers;
    /* The holder's view: its looks at dlock_state() (and the lost fd) once
     * its holding was over, how many said LOST, and how many said HELD
     * although it had been stopped for longer than a ttl; loss
     * notifications, those to holders stopped past a ttl, and the longest
     * delay of those after the SIGCONT. */
    uint64_t state_looks, state_held_late, state_lost_seen, fd_lost_seen;
    uint64_t notified, notify_late;
    int64_t notify_late_max_ns;
    /* Server faults, and what followed them. A violation is "expected" when
     * a data-loss event beyond the backend's claim lies between the two
     * acquisitions involved (or within the stale writer's holding). */
    uint64_t server_faults, data_losses;
    uint64_t sections_after_fault; /* acquisitions after the first server fault */
    uint64_t overlaps_expected, token_dups_expected, token_regressions_expected;
    uint64_t stale_accepted_expected;
    /* Stale writes accepted while no later acquisition had happened (the
     * fault's takeover never came, e.g. the next worker could not reach
     * the servers): nobody held the lock after the writer, so no token
     * could have refused it. Counted, never a violation. */
    uint64_t stale_accepted_unopposed;
    /* Holders cut off from the servers while holding (partitioned): how
     * many were told of the loss (on_lost) and how long before the lease
     * ran out on the servers the library declared it (dlock_state said
     * LOST; min and median over those told, ns; negative: after), and how
     * many were declared lost only after it ran out, or not told at all
     * before their holding ended (loss_late counts both); the longest
     * delay of a callback after its loss was declared (the scheduler's). */
    uint64_t partitions, loss_told, loss_late, loss_untold;
    int64_t told_before_min_ns, told_before_median_ns, told_callback_delay_max_ns;
    char first_overlap[256], first_stale[256], first_token[256], first_late[256];
    char first_loss_late[256];
    /* Claims (H_CLAIM_*), per key: runs, re-runs (attempt > 1), replays;
     * runners killed or stopped while running one; finishes refused
     * (DLOCK_ELOST). Violations: a run while an earlier runner of the key
     * still lived and held it (not killed, not told of a loss, not stopped
     * on a backend whose holdings expire), or after the key was done; a
     * re-run whose attempt is not above the previous one; a replay whose
     * result is none a runner recorded; a second successful finish of a
     * key. Unfinished: keys run but never recorded (reported). */
    uint64_t claim_keys, claim_runs, claim_reruns, claim_replays;
    uint64_t claim_kills, claim_pauses, claim_finish_lost, claim_unfinished;
    uint64_t claim_dups, claim_attempt_bad, claim_replay_bad, claim_finished_twice;
    char first_claim[256];
} hist_result;

const char *hist_type_name(int type);
/* The type for a name, -1 if unknown. */
int hist_type_parse(const char *s);

void hist_meta_default(hist_meta *m);
/* Append a copy of e (seq is set to the run's length); -1 on ENOMEM. */
int hist_append(hist_run *r, const hist_event *e);
void hist_run_free(hist_run *r);

/* Write the run in text form; -1 on a write error. */
int hist_write(FILE *f, const hist_run *r);
/*
 * Read every run of a text history. On success *runs is an array of *nruns
 * runs, freed with hist_runs_free. On error returns -1 with a message naming
 * the line in err.
 */
int hist_read(FILE *f, hist_run **runs, size_t *nruns, char *err, size_t errlen);
void hist_runs_free(hist_run *runs, size_t nruns);

/* Sort the run's events by time (then seq) and check them. Returns -1 on
 * ENOMEM. */
int hist_check(hist_run *r, hist_result *res);

/*
 * The verdict of the checks alone, given what the backend claims (caps) and
 * whether the resource checked tokens: "pass", "fail", or
 * "expected-violation" when every violation follows a loss of the lock
 * service's data beyond what the backend claims to survive (data_loss events
 * with value 1), with the reason in why.
 */
const char *hist_verdict(const hist_result *res, const hist_meta *m, char *why, size_t len);

#endif
