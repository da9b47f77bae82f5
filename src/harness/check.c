/* SPDX-License-Identifier: MIT */
/*
 * check.c — `dlock check` (SPEC §8): what the lock really guarantees, measured.
 *
 * Each scenario runs twice: fenced (the resource refuses stale tokens) and
 * as a canary (the resource accepts everything). The histories are checked
 * for overlapping holdings, token order and lost increments; the canary
 * proves that the fault took effect — a scenario whose canary shows nothing
 * reports itself invalid instead of passing. See check.h for the pieces.
 */
#include "check.h"
#include "cli/cli.h"
#include "dlock_debug.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

const char cli_check_help[] =
    "usage: dlock [--url URL] check [--scenario NAME]... [-P N] [-D SECS] [--ttl SECS]\n"
    "                              [--servers DIR] [--json] [--history FILE]\n"
    "       dlock check --check-history FILE [--json]\n"
    "       dlock check --list\n"
    "\n"
    "Measure what the lock guarantees on this backend. Worker processes take one\n"
    "lock over and over; inside the critical section each reads a guarded\n"
    "resource, pauses at random and writes the value + 1 with its fencing token.\n"
    "The resource (a process of the harness) refuses tokens below the highest it\n"
    "has seen. Faults are injected by the harness, and every event is checked:\n"
    "  - no two holders' windows overlap (a window ends at release, at loss, at the\n"
    "    holder's death, or at the lease's deadline on lease backends);\n"
    "  - no token is issued twice and tokens grow in the order of acquisition;\n"
    "  - no increment is lost: the final value equals the accepted writes.\n"
    "Fault scenarios with a stale writer also run as a canary, without fencing\n"
    "at the resource: if the fault did not take effect there, the scenario is\n"
    "invalid, not passed. Lease backends are also checked from the holder's\n"
    "side: an acquisition that returns after its lease could have run out is a\n"
    "late grant, and a holder stopped for longer than its ttl must see\n"
    "dlock_state() LOST when it looks after SIGCONT.\n"
    "The partition scenario gives each worker a TCP relay of its own to the\n"
    "servers (where clients connect straight to the URL's hosts, e.g. redis://\n"
    "and redlock://) and freezes the holder's relay for\n"
    "longer than the lease: the holder's section lasts until the library tells\n"
    "it of the loss, which must come before the lease runs out on the servers\n"
    "(reported: how long before, min and median); --ttl 30 runs it with the\n"
    "default lease.\n"
    "The claims scenario (backends that keep claims) has the workers run claims\n"
    "(dlock_claim_begin, as dlock once does) on one key after another instead:\n"
    "the first caller of a key runs it and records a result, the others replay\n"
    "it. Runners are killed or stopped inside a run; per key it counts runs,\n"
    "re-runs (attempt > 1) and replays, and fails on a run while an earlier\n"
    "runner still lived and held the key, a re-run whose attempt is not above\n"
    "the last, a replay of a result no runner recorded, or a second record: at\n"
    "most once while the holder lives, at least once across crashes.\n"
    "\n"
    "  --scenario NAME   run this scenario (repeatable; default all; see --list)\n"
    "  -P, --workers N   worker processes (2..64, default 4)\n"
    "  -D, --duration S  seconds per run of each scenario (default: 2, or as long\n"
    "                    as the fault needs on this backend: twice the span a\n"
    "                    killed or stopped holder's lock takes to come free on the\n"
    "                    servers plus 2 s; 6 s for server faults); a run lasts\n"
    "                    until its first fault however long the workers take to\n"
    "                    come (at most 10 s more)\n"
    "      --ttl S       lock ttl for lease backends (default 1); the pause\n"
    "                    scenario stops the holder for ttl + 0.5 s\n"
    "      --servers DIR the backend's servers, to fault them (default\n"
    "                    $DLOCK_TEST_SERVERS): DIR/NAME.pid, NAME.port and NAME.cmd\n"
    "                    per server, as tests/servers.sh writes; the URL's hosts are\n"
    "                    matched by port (on 127.0.0.1, or the address in NAME.host).\n"
    "                    A restart is SIGKILL, then NAME.cmd again. partition-member\n"
    "                    freezes the relays in NAME.links, or runs NAME.partition on|off.\n"
    "                    Without it, scenarios that fault servers are n/a\n"
    "      --json        one JSON object with a \"scenarios\" array\n"
    "      --history F   write the raw history of every run to F\n"
    "      --check-history F  only check the history in F (no lock is taken)\n"
    "      --list        list the scenarios\n"
    "\n"
    "Verdicts: pass; fail (a guarantee the backend claims was broken);\n"
    "expected-violation (the lock service lost data, e.g. a server restarted\n"
    "without persistence or a stale replica promoted, and the violations seen\n"
    "are those the backend says it cannot prevent then, as DLOCK_CAP_FENCING_WEAK\n"
    "does; the counts are reported); invalid (the fault did not take effect, or\n"
    "the harness failed); n/a (the fault cannot take effect on this backend or\n"
    "deployment; its checks, if they ran, passed).\n"
    "Exit status: 0 all pass, n/a or expected-violation; 1 some fail; 2 some\n"
    "invalid, none fail; 64 usage; 69 backend unreachable; 70 other failure;\n"
    "128+N interrupted by signal N (the scenarios finished so far are still\n"
    "reported).\n";

typedef struct sc_out {
    const char *name;
    const chk_scenario *sc; /* NULL for --check-history */
    bool have_fenced, have_canary, applicable;
    hist_result fenced, canary;
    const char *verdict;
    char note[1400];
    int faults;
    int fenced_faults; /* faults injected in the fenced run */
    int fenced_effective;
    int ttl_ms;        /* of its runs */
    int run_ms;        /* how long each of its runs lasted */
    int acq_granted, acq_failed, acq_held, acq_stopped, acq_kept;
} sc_out;

/* ---- the probe ----------------------------------------------------------- */

/* What the probe learnt of the backend under test. */
typedef struct probe_res {
    int rc; /* cli_open's exit code (0: it opened) */
    char backend[32], url_shown[512];
    dh_topo topo;
    unsigned caps;
    int connect_timeout_ms, op_timeout_ms, session_ttl_ms;
} probe_res;

static void probe_run(const char *url, int ttl_ms, probe_res *out)
{
    memset(out, 0, sizeof *out);
    dlock_client *c = NULL;
    out->rc = cli_open("check", url, &c);
    if (out->rc)
        return;
    snprintf(out->backend, sizeof out->backend, "%s", dlock_client_backend(c));
    snprintf(out->url_shown, sizeof out->url_shown, "%s", dlock_client_url(c));
    /* What the deployment is, from the backend's check adapter (the URL
     * alone; nothing asked of the servers). */
    if (dh_topology(c, &out->topo) != 0) {
        memset(&out->topo, 0, sizeof out->topo);
        snprintf(out->topo.indirect, sizeof out->topo.indirect, "%s", dlock_client_errmsg(c));
    }
    /* what this URL's client offers (a mode may offer less than its backend) */
    out->caps = dlock_client_caps(c);
    dh_timeouts(c, &out->connect_timeout_ms, &out->op_timeout_ms);
    /* A session backend may still give held locks a deadline (ZooKeeper),
     * and a lease backend may keep a span of its own whatever ttl a lock
     * asks for (etcd: the client's lease): a probe lock, once held, says
     * how long. */
    dlock_lock *pl = NULL;
    dlock_lock_opts po;
    dlock_lock_opts_init(&po);
    po.ttl_ms = ttl_ms;
    if (dlock_lock_new(&pl, c, "dlock-check-probe", &po) == 0) {
        if (dlock_acquire(pl, 2000) == 0) {
            int span = dlock_debug_span_ms(pl);
            if (!(out->caps & DLOCK_CAP_LEASE) || span > ttl_ms + ttl_ms / 10)
                out->session_ttl_ms = span;
            (void)dlock_release(pl);
        }
        dlock_lock_free(pl);
        (void)dh_forget(c, "dlock-check-probe"); /* its lock file, on file:// */
    }
    dlock_client_close(c);
}

/* probe_run in a child process: its exit code (0, or cli_open's). */
static int probe(const char *url, int ttl_ms, probe_res *out)
{
    int p[2];
    if (pipe2(p, O_CLOEXEC) != 0) {
        cli_err("check: pipe: %s", strerror(errno));
        return CLI_EXIT_SOFTWARE;
    }
    pid_t pid = ms_fork();
    if (pid == 0) {
        close(p[0]);
        probe_run(url, ttl_ms, out);
        ssize_t w = write(p[1], out, sizeof *out);
        _exit(w == (ssize_t)sizeof *out ? 0 : 1);
    }
    close(p[1]);
    ssize_t n = -1;
    if (pid > 0) {
        do
            n = read(p[0], out, sizeof *out);
        while (n < 0 && errno == EINTR);
        while (waitpid(pid, NULL, 0) < 0 && errno == EINTR) {
        }
    }
    close(p[0]);
    if (n != (ssize_t)sizeof *out) {
        cli_err("check: the backend probe %s", pid < 0 ? "could not start" : "died");
        return CLI_EXIT_SOFTWARE;
    }
    return out->rc;
}

/* ---- verdicts ---------------------------------------------------------- */

/* What the holders saw of their own locks, for lease scenarios. */
static void holder_view(char *buf, size_t len, const hist_result *h)
{
    buf[0] = '\0';
    if (h->state_looks == 0)
        return;
    int n = snprintf(buf, len,
                     "; stale holders' first look at their lock: dlock_state() LOST in %" PRIu64
                     " of %" PRIu64 ", lost fd readable in %" PRIu64,
                     h->state_lost_seen, h->state_looks, h->fd_lost_seen);
    if (h->notify_late > 0 && n > 0 && (size_t)n < len)
        snprintf(buf + n, len - (size_t)n,
                 "; %" PRIu64 " holders stopped past their lease were notified (callback) at "
                 "most %.2f ms after their SIGCONT",
                 h->notify_late, (double)h->notify_late_max_ns / 1e6);
}

static void stopacq_summary(char *buf, size_t len, const sc_out *o)
{
    snprintf(buf, len,
             "%d acquisitions stopped with the request sent and the reply unread past the "
             "lease: %d failed, %d returned success (%d of those with dlock_state() still "
             "HELD)",
             o->acq_stopped, o->acq_failed, o->acq_granted, o->acq_held);
    if (o->acq_kept > 0) {
        size_t used = strlen(buf);
        snprintf(buf + used, len - used,
                 "; %d more not judged: nobody took the lock while they were stopped (the "
                 "servers kept their session)",
                 o->acq_kept);
    }
}

/* Holders cut off from the servers, both runs: how long before their lease
 * ran out there they were told of the loss. */
static void partition_summary(char *buf, size_t len, const sc_out *o)
{
    const hist_result *f = &o->fenced, *c = &o->canary;
    uint64_t cuts = f->partitions + (o->have_canary ? c->partitions : 0);
    uint64_t told = f->loss_told + (o->have_canary ? c->loss_told : 0);
    uint64_t late = f->loss_late + (o->have_canary ? c->loss_late : 0);
    uint64_t untold = f->loss_untold + (o->have_canary ? c->loss_untold : 0);
    int n = snprintf(buf, len,
                     "%" PRIu64 " holders cut off from the servers for longer than the lease; "
                     "%" PRIu64 " told of the loss",
                     cuts, told);
    if (f->loss_told > 0 && n > 0 && (size_t)n < len)
        n += snprintf(buf + n, len - (size_t)n,
                      ", declared lost %.1f ms (min) / %.1f ms (median) before the lease ran out "
                      "on the servers, their callback run at most %.1f ms after that (fenced "
                      "run)",
                      (double)f->told_before_min_ns / 1e6, (double)f->told_before_median_ns / 1e6,
                      (double)f->told_callback_delay_max_ns / 1e6);
    if (late > 0 && n > 0 && (size_t)n < len)
        n += snprintf(buf + n, len - (size_t)n,
                      "; %" PRIu64 " declared lost only after it ran out there, or never "
                      "told (%" PRIu64 " never)",
                      late, untold);
    if (f->state_looks > 0 && n > 0 && (size_t)n < len)
        snprintf(buf + n, len - (size_t)n,
                 "; their first look at the lock once another worker held it (fenced run): "
                 "dlock_state() LOST in %" PRIu64 " of %" PRIu64 ", lost fd readable in %" PRIu64,
                 f->state_lost_seen, f->state_looks, f->fd_lost_seen);
}

/* What the claims scenario counted (its violations are in the verdict's
 * reason when there are any). */
static void claims_summary(char *buf, size_t len, const hist_result *h)
{
    snprintf(buf, len,
             "%" PRIu64 " keys, %" PRIu64 " runs (%" PRIu64 " re-runs, attempt > 1), %" PRIu64
             " replays; %" PRIu64 " runners killed and %" PRIu64 " stopped inside a run, %" PRIu64
             " records refused (lock lost); 0 duplicates, 0 attempts out of order, every replay "
             "the recorded result; %" PRIu64 " keys run but never recorded",
             h->claim_keys, h->claim_runs, h->claim_reruns, h->claim_replays, h->claim_kills,
             h->claim_pauses, h->claim_finish_lost, h->claim_unfinished);
}

static void judge(sc_out *o, const chk_run *r, const hist_meta *fm, const hist_meta *cm)
{
    char why[600], more[700];
    const char *v = hist_verdict(&o->fenced, fm, why, sizeof why);
    if (strcmp(v, "fail") == 0) {
        o->verdict = "fail";
        if (o->sc->validity == CHK_VALID_STOPACQ) {
            stopacq_summary(more, sizeof more, o);
            snprintf(o->note, sizeof o->note, "%s; %s", why, more);
        } else if (o->sc->validity == CHK_VALID_PARTITION) {
            partition_summary(more, sizeof more, o);
            snprintf(o->note, sizeof o->note, "%s; %s", why, more);
        } else {
            snprintf(o->note, sizeof o->note, "%s", why);
        }
        return;
    }
    if (o->have_canary) {
        v = hist_verdict(&o->canary, cm, why, sizeof why);
        if (strcmp(v, "fail") == 0) {
            o->verdict = "fail";
            if (o->sc->validity == CHK_VALID_PARTITION) {
                partition_summary(more, sizeof more, o);
                snprintf(o->note, sizeof o->note, "canary run: %s; %s", why, more);
            } else {
                snprintf(o->note, sizeof o->note, "canary run: %s", why);
            }
            return;
        }
    }
    if (!o->applicable) {
        o->verdict = "n/a";
        snprintf(o->note, sizeof o->note, "not applicable: %s", o->sc->na_reason);
        return;
    }
    switch (o->sc->validity) {
    case CHK_VALID_RUNS:
        if (o->fenced.sections > 0) {
            o->verdict = "pass";
            snprintf(o->note, sizeof o->note, "%" PRIu64 " sections", o->fenced.sections);
        } else {
            o->verdict = "invalid";
            snprintf(o->note, sizeof o->note, "no critical section ran");
        }
        return;
    case CHK_VALID_TAKEOVER:
        if (o->fenced.kills_holding > 0 && o->fenced.takeovers > 0) {
            o->verdict = "pass";
            snprintf(o->note, sizeof o->note,
                     "%" PRIu64 " holders killed inside their section, lock taken over %" PRIu64
                     " times (a dead holder writes nothing: no canary loss expected, %" PRId64
                     " seen)",
                     o->fenced.kills_holding, o->fenced.takeovers,
                     o->have_canary ? o->canary.lost_increments : 0);
        } else {
            o->verdict = "invalid";
            snprintf(o->note, sizeof o->note,
                     "the fault did not take effect: %" PRIu64 " holders killed, %" PRIu64
                     " takeovers%s%s",
                     o->fenced.kills_holding, o->fenced.takeovers, r->note[0] ? "; " : "",
                     r->note);
        }
        return;
    case CHK_VALID_CANARY: {
        uint64_t stale = o->fenced.stale_rejected + o->fenced.stale_accepted;
        if (o->have_canary && o->canary.lost_increments > 0 && stale > 0) {
            o->verdict = "pass";
            holder_view(more, sizeof more, &o->fenced);
            snprintf(o->note, sizeof o->note,
                     "%" PRIu64 " stale writes rejected by fencing; the canary lost %" PRId64
                     " increments%s",
                     o->fenced.stale_rejected, o->canary.lost_increments, more);
        } else {
            o->verdict = "invalid";
            snprintf(o->note, sizeof o->note,
                     "the fault did not take effect: %" PRIu64
                     " stale writes in the fenced run, canary lost %" PRId64 " increments%s%s",
                     stale, o->have_canary ? o->canary.lost_increments : 0,
                     r->note[0] ? "; " : "", r->note);
        }
        return;
    }
    case CHK_VALID_SERVER:
        if (o->fenced_faults == 0) {
            o->verdict = "invalid";
            snprintf(o->note, sizeof o->note, "no server was faulted%s%s",
                     r->note[0] ? ": " : "", r->note);
        } else if (o->fenced.sections_after_fault == 0) {
            o->verdict = "fail";
            snprintf(o->note, sizeof o->note,
                     "unavailable: no acquisition after %d servers were killed%s%s",
                     o->fenced_faults, r->note[0] ? ": " : "", r->note);
        } else {
            o->verdict = "pass";
            snprintf(o->note, sizeof o->note,
                     "%d servers killed while a holder was inside its section; nobody else "
                     "took the lock meanwhile; %" PRIu64 " acquisitions after the kill, with "
                     "the servers left%s%s",
                     o->fenced_faults, o->fenced.sections_after_fault, r->note[0] ? "; " : "",
                     r->note);
        }
        return;
    case CHK_VALID_PARTITION: {
        uint64_t stale = o->fenced.stale_rejected + o->fenced.stale_accepted;
        partition_summary(more, sizeof more, o);
        if (o->fenced_effective > 0 && o->fenced.partitions > 0 && stale > 0 && o->have_canary &&
            o->canary.lost_increments > 0) {
            o->verdict = "pass";
            snprintf(o->note, sizeof o->note,
                     "%s; %" PRIu64 " stale writes rejected by fencing; the canary lost %" PRId64
                     " increments",
                     more, o->fenced.stale_rejected, o->canary.lost_increments);
        } else {
            o->verdict = "invalid";
            snprintf(o->note, sizeof o->note,
                     "the fault did not take effect: %d of %d cuts were followed by another "
                     "holder and a stale write, canary lost %" PRId64 " increments; %s%s%s",
                     o->fenced_effective, o->fenced_faults,
                     o->have_canary ? o->canary.lost_increments : 0, more,
                     r->note[0] ? "; " : "", r->note);
        }
        return;
    }
    case CHK_VALID_CLAIMS:
        claims_summary(more, sizeof more, &o->fenced);
        if (o->fenced.claim_runs > 0 && o->fenced_faults > 0 && o->fenced.claim_reruns > 0) {
            o->verdict = "pass";
            snprintf(o->note, sizeof o->note, "%s; at most once while the holder lives, at "
                     "least once across crashes%s%s", more, r->note[0] ? "; " : "", r->note);
        } else {
            o->verdict = "invalid";
            snprintf(o->note, sizeof o->note, "the fault did not take effect (%d faults, no key "
                     "ran again): %s%s%s", o->fenced_faults, more, r->note[0] ? "; " : "",
                     r->note);
        }
        return;
    case CHK_VALID_STOPACQ:
        stopacq_summary(more, sizeof more, o);
        if (o->acq_stopped > 0) {
            o->verdict = "pass";
            snprintf(o->note, sizeof o->note, "%s%s%s", more, r->note[0] ? "; " : "", r->note);
        } else {
            o->verdict = "invalid";
            snprintf(o->note, sizeof o->note, "the fault did not take effect: %s%s%s", more,
                     r->note[0] ? "; " : "", r->note);
        }
        return;
    case CHK_VALID_DATALOSS: {
        const hist_result *f = &o->fenced;
        char canary[160] = "";
        if (o->have_canary)
            snprintf(canary, sizeof canary, "; the canary (no fencing) lost %" PRId64
                                            " increments",
                     o->canary.lost_increments);
        if (o->fenced_faults == 0) {
            o->verdict = "invalid";
            snprintf(o->note, sizeof o->note, "the fault was not injected%s%s",
                     r->note[0] ? ": " : "", r->note);
        } else if (strcmp(v, "expected-violation") == 0) {
            o->verdict = "expected-violation";
            snprintf(o->note, sizeof o->note,
                     "the server lost the lock's data (%d faults, %" PRIu64 " beyond what the "
                     "backend claims): %" PRIu64 " overlapping holdings, %" PRIu64
                     " token regressions, %" PRIu64 " repeated tokens. Fencing at the resource "
                     "rejected %" PRIu64 " stale writes and %" PRIu64 " writes of current "
                     "holders whose tokens were below what it had seen, and accepted %" PRIu64
                     " writes of earlier holders whose tokens were higher; %" PRId64
                     " increments lost%s%s%s",
                     o->fenced_faults, f->data_losses, f->overlaps_expected,
                     f->token_regressions_expected, f->token_dups_expected, f->stale_rejected,
                     f->fresh_rejected, f->stale_accepted_expected, f->lost_increments, canary,
                     r->note[0] ? "; " : "", r->note);
        } else {
            o->verdict = "pass";
            snprintf(o->note, sizeof o->note,
                     "%d faults, no violation (another holder took over after %d of them)%s%s%s",
                     o->fenced_faults, o->fenced_effective, canary, r->note[0] ? "; " : "",
                     r->note);
        }
        return;
    }
    }
}

/* ---- output ------------------------------------------------------------ */

/* How long before the lease ran out on the servers the partitioned holders
 * were told (ms; null when none was). */
static void json_told(FILE *f, const hist_result *h)
{
    if (h->loss_told > 0)
        fprintf(f,
                ",\"told_before_expiry_min_ms\":%.3f,\"told_before_expiry_median_ms\":%.3f"
                ",\"told_callback_delay_max_ms\":%.3f",
                (double)h->told_before_min_ns / 1e6, (double)h->told_before_median_ns / 1e6,
                (double)h->told_callback_delay_max_ns / 1e6);
    else
        fprintf(f, ",\"told_before_expiry_min_ms\":null,\"told_before_expiry_median_ms\":null"
                   ",\"told_callback_delay_max_ms\":null");
}

static void json_counts(FILE *f, const hist_result *h)
{
    fprintf(f,
            "{\"sections\":%" PRIu64 ",\"overlaps\":%" PRIu64 ",\"lost_increments\":%" PRId64
            ",\"stale_writes_rejected\":%" PRIu64 ",\"stale_writes_accepted\":%" PRIu64
            ",\"token_duplicates\":%" PRIu64 ",\"token_regressions\":%" PRIu64
            ",\"writes\":%" PRIu64 ",\"writes_accepted\":%" PRIu64 ",\"final_value\":%" PRId64
            ",\"acquire_failed\":%" PRIu64 ",\"kills\":%" PRIu64 ",\"kills_holding\":%" PRIu64
            ",\"losses\":%" PRIu64 ",\"pauses\":%" PRIu64 ",\"takeovers\":%" PRIu64,
            h->sections, h->overlaps, h->lost_increments, h->stale_rejected, h->stale_accepted,
            h->token_dups, h->token_regressions, h->writes, h->writes_accepted, h->final_value,
            h->acquire_failed, h->kills, h->kills_holding, h->losses, h->pauses, h->takeovers);
    fprintf(f,
            ",\"fresh_writes_rejected\":%" PRIu64 ",\"late_grants\":%" PRIu64
            ",\"state_looks\":%" PRIu64 ",\"state_lost_seen\":%" PRIu64
            ",\"lost_fd_seen\":%" PRIu64 ",\"state_held_late\":%" PRIu64
            ",\"loss_notified\":%" PRIu64 ",\"loss_notified_after_stop\":%" PRIu64
            ",\"loss_notify_after_resume_max_ms\":%.3f",
            h->fresh_rejected, h->late_grants, h->state_looks, h->state_lost_seen,
            h->fd_lost_seen, h->state_held_late, h->notified, h->notify_late,
            (double)h->notify_late_max_ns / 1e6);
    fprintf(f,
            ",\"partitions\":%" PRIu64 ",\"loss_told\":%" PRIu64 ",\"loss_told_late\":%" PRIu64
            ",\"loss_untold\":%" PRIu64,
            h->partitions, h->loss_told, h->loss_late, h->loss_untold);
    json_told(f, h);
    fprintf(f,
            ",\"server_faults\":%" PRIu64 ",\"data_losses\":%" PRIu64
            ",\"sections_after_fault\":%" PRIu64 ",\"overlaps_expected\":%" PRIu64
            ",\"token_regressions_expected\":%" PRIu64 ",\"token_duplicates_expected\":%" PRIu64
            ",\"stale_writes_accepted_expected\":%" PRIu64
            ",\"stale_writes_accepted_unopposed\":%" PRIu64 "}",
            h->server_faults, h->data_losses, h->sections_after_fault, h->overlaps_expected,
            h->token_regressions_expected, h->token_dups_expected, h->stale_accepted_expected,
            h->stale_accepted_unopposed);
}

static void print_json(const chk_config *cfg, const sc_out *outs, size_t n, int exit_code,
                       int interrupted, bool from_file)
{
    FILE *f = stdout;
    fprintf(f, "{");
    if (!from_file) {
        fprintf(f, "\"backend\":");
        cli_json_str(f, cfg->backend);
        fprintf(f, ",\"url\":");
        cli_json_str(f, cfg->url_shown);
        fprintf(f, ",\"P\":%d,\"D\":%.3f,\"ttl_ms\":%d,\"fencing_claimed\":%s,", cfg->workers,
                cfg->duration_ms / 1000.0, cfg->ttl_ms,
                cfg->caps & DLOCK_CAP_FENCING ? "true" : "false");
        fprintf(f, "\"fencing_weak\":%s,\"servers\":%d,",
                cfg->caps & DLOCK_CAP_FENCING_WEAK ? "true" : "false",
                cfg->servers ? cfg->servers->count : 0);
    }
    fprintf(f, "\"scenarios\":[");
    for (size_t i = 0; i < n; i++) {
        const sc_out *o = &outs[i];
        if (i)
            fputc(',', f);
        fprintf(f, "{\"name\":");
        cli_json_str(f, o->name);
        fprintf(f, ",\"verdict\":");
        cli_json_str(f, o->verdict);
        fprintf(f, ",\"note\":");
        cli_json_str(f, o->note);
        const hist_result *h = &o->fenced;
        fprintf(f,
                ",\"sections\":%" PRIu64 ",\"overlaps\":%" PRIu64 ",\"lost_increments\":%" PRId64
                ",\"stale_writes_rejected\":%" PRIu64 ",\"stale_writes_accepted\":%" PRIu64
                ",\"faults\":%d",
                h->sections, h->overlaps, h->lost_increments, h->stale_rejected,
                h->stale_accepted, o->faults);
        fprintf(f, ",\"late_grants\":%" PRIu64 ",\"token_regressions\":%" PRIu64
                   ",\"token_duplicates\":%" PRIu64,
                h->late_grants, h->token_regressions, h->token_dups);
        if (o->ttl_ms > 0)
            fprintf(f, ",\"ttl_ms\":%d", o->ttl_ms);
        if (o->run_ms > 0)
            fprintf(f, ",\"run_ms\":%d", o->run_ms);
        if (h->partitions > 0 || (o->sc && o->sc->validity == CHK_VALID_PARTITION)) {
            fprintf(f, ",\"partitions\":%" PRIu64 ",\"loss_told_late\":%" PRIu64
                       ",\"loss_untold\":%" PRIu64 ",\"state_held_late\":%" PRIu64,
                    h->partitions, h->loss_late, h->loss_untold, h->state_held_late);
            json_told(f, h);
        }
        if (h->claim_keys > 0 || (o->sc && o->sc->validity == CHK_VALID_CLAIMS))
            fprintf(f,
                    ",\"claim_keys\":%" PRIu64 ",\"claim_runs\":%" PRIu64
                    ",\"claim_reruns\":%" PRIu64 ",\"claim_replays\":%" PRIu64
                    ",\"claim_kills\":%" PRIu64 ",\"claim_pauses\":%" PRIu64
                    ",\"claim_records_refused\":%" PRIu64 ",\"claim_unfinished\":%" PRIu64
                    ",\"claim_duplicates\":%" PRIu64 ",\"claim_attempts_out_of_order\":%" PRIu64
                    ",\"claim_replay_mismatches\":%" PRIu64 ",\"claim_recorded_twice\":%" PRIu64,
                    h->claim_keys, h->claim_runs, h->claim_reruns, h->claim_replays,
                    h->claim_kills, h->claim_pauses, h->claim_finish_lost, h->claim_unfinished,
                    h->claim_dups, h->claim_attempt_bad, h->claim_replay_bad,
                    h->claim_finished_twice);
        if (o->sc && o->sc->validity == CHK_VALID_STOPACQ)
            fprintf(f,
                    ",\"acquisitions_stopped\":%d,\"acquisitions_failed\":%d,"
                    "\"acquisitions_granted_late\":%d,\"granted_late_still_held\":%d,"
                    "\"acquisitions_kept\":%d",
                    o->acq_stopped, o->acq_failed, o->acq_granted, o->acq_held, o->acq_kept);
        fprintf(f, ",\"fenced\":");
        if (o->have_fenced)
            json_counts(f, &o->fenced);
        else
            fprintf(f, "null");
        fprintf(f, ",\"canary\":");
        if (o->have_canary)
            json_counts(f, &o->canary);
        else
            fprintf(f, "null");
        fprintf(f, "}");
    }
    fprintf(f, "],\"exit_status\":%d", exit_code);
    if (interrupted)
        fprintf(f, ",\"interrupted\":true");
    fprintf(f, "}\n");
}

static void table_row(const char *name, const char *mode, const hist_result *h, const char *verdict)
{
    printf("%-16s %-7s %9" PRIu64 " %8" PRIu64 " %9" PRId64 " %9" PRIu64 " %9" PRIu64 "  %s\n",
           name, mode, h->sections, h->overlaps, h->lost_increments, h->stale_rejected,
           h->stale_accepted, verdict);
}

static void print_table(const chk_config *cfg, const sc_out *outs, size_t n, bool from_file)
{
    if (!from_file)
        printf("dlock check: %s backend (%s), %d workers, %s%.1f s per run%s\n", cfg->backend,
               cfg->url_shown, cfg->workers,
               cfg->duration_given ? "" : "at least ", cfg->duration_ms / 1000.0,
               cfg->caps & DLOCK_CAP_FENCING_WEAK ? ", fencing claimed (weak: tokens can go "
                                                    "back after server failure)"
               : cfg->caps & DLOCK_CAP_FENCING ? ", fencing claimed"
                                               : "");
    if (!from_file && cfg->servers)
        printf("servers: %d found in the servers directory\n", cfg->servers->count);
    else if (!from_file && cfg->servers_note[0])
        printf("servers: none (%s)\n", cfg->servers_note);
    printf("%-16s %-7s %9s %8s %9s %9s %9s  %s\n", "scenario", "run", "sections", "overlaps",
           "lost_incr", "stale_rej", "stale_acc", "verdict");
    for (size_t i = 0; i < n; i++) {
        const sc_out *o = &outs[i];
        if (o->have_fenced)
            table_row(o->name, "fenced", &o->fenced, o->verdict);
        if (o->have_canary)
            table_row(o->have_fenced ? "" : o->name, "canary", &o->canary,
                      o->have_fenced ? "" : o->verdict);
        if (!o->have_fenced && !o->have_canary)
            printf("%-16s %-7s %9s %8s %9s %9s %9s  %s\n", o->name, "-", "-", "-", "-", "-", "-",
                   o->verdict);
        if (o->note[0])
            printf("%-16s   %s\n", "", o->note);
    }
}

static int exit_for(const sc_out *outs, size_t n)
{
    int code = 0;
    for (size_t i = 0; i < n; i++) {
        if (strcmp(outs[i].verdict, "fail") == 0)
            return 1;
        if (strcmp(outs[i].verdict, "invalid") == 0)
            code = 2;
    }
    return code;
}

/* ---- --check-history ---------------------------------------------------- */

static int check_file(const char *path, bool json)
{
    FILE *f = strcmp(path, "-") == 0 ? stdin : fopen(path, "re");
    if (!f) {
        cli_err("check: cannot open %s: %s", path, strerror(errno));
        return CLI_EXIT_USAGE;
    }
    hist_run *runs = NULL;
    size_t nruns = 0;
    char err[256];
    int rc = hist_read(f, &runs, &nruns, err, sizeof err);
    if (f != stdin)
        fclose(f);
    if (rc) {
        cli_err("check: %s: %s", path, err);
        return CLI_EXIT_USAGE;
    }
    sc_out *outs = calloc(nruns, sizeof *outs);
    char (*names)[80] = calloc(nruns, sizeof *names);
    if (!outs || !names) {
        free(outs);
        free(names);
        hist_runs_free(runs, nruns);
        cli_err("check: out of memory");
        return CLI_EXIT_SOFTWARE;
    }
    int code = 0;
    for (size_t i = 0; i < nruns && code == 0; i++) {
        sc_out *o = &outs[i];
        snprintf(names[i], sizeof names[i], "%s", runs[i].meta.scenario);
        o->name = names[i];
        bool canary = strcmp(runs[i].meta.mode, "canary") == 0;
        hist_result *h = canary ? &o->canary : &o->fenced;
        if (hist_check(&runs[i], h) != 0) {
            cli_err("check: out of memory");
            code = CLI_EXIT_SOFTWARE;
            break;
        }
        o->have_fenced = !canary;
        o->have_canary = canary;
        char why[600];
        o->verdict = hist_verdict(h, &runs[i].meta, why, sizeof why);
        if (why[0])
            snprintf(o->note, sizeof o->note, "%s%.600s", canary ? "canary run: " : "", why);
        else if (canary)
            snprintf(o->note, sizeof o->note,
                     "canary run (resource without fencing): %" PRIu64
                     " stale writes accepted, %" PRId64 " increments lost",
                     h->stale_accepted, h->lost_increments);
        else if (h->stale_rejected)
            snprintf(o->note, sizeof o->note, "%" PRIu64 " stale writes rejected by fencing",
                     h->stale_rejected);
        else
            snprintf(o->note, sizeof o->note, "no violation found");
        o->faults = (int)(h->kills + h->losses + h->pauses);
    }
    if (code == 0) {
        code = exit_for(outs, nruns);
        if (json)
            print_json(NULL, outs, nruns, code, 0, true);
        else
            print_table(NULL, outs, nruns, true);
        if (fflush(stdout) != 0) {
            cli_err("check: cannot write the results: %s", strerror(errno));
            code = CLI_EXIT_SOFTWARE;
        }
    }
    free(outs);
    free(names);
    hist_runs_free(runs, nruns);
    return code;
}

/* ---- the command ---------------------------------------------------------- */

enum {
    CO_SCENARIO = 1, CO_P, CO_D, CO_TTL, CO_JSON, CO_HISTORY, CO_CHECK_HISTORY, CO_LIST,
    CO_SERVERS, CO_HELP
};

static const cli_opt check_opts[] = {
    {"scenario", 0, 1, CO_SCENARIO}, {"workers", 'P', 1, CO_P},
    {"duration", 'D', 1, CO_D},      {"ttl", 0, 1, CO_TTL},
    {"json", 0, 0, CO_JSON},         {"history", 0, 1, CO_HISTORY},
    {"check-history", 0, 1, CO_CHECK_HISTORY}, {"list", 0, 0, CO_LIST},
    {"servers", 0, 1, CO_SERVERS},
    {"help", 'h', 0, CO_HELP},       {NULL, 0, 0, 0},
};

int cli_check(int argc, char **argv, const char *url)
{
    chk_config cfg;
    memset(&cfg, 0, sizeof cfg);
    cfg.url = url;
    cfg.workers = 4;
    cfg.duration_ms = 2000;
    cfg.ttl_ms = 1000;
    cfg.max_pause_us = 500;
    bool json = false;
    const char *history = NULL, *check_history = NULL;
    const char *servers_dir = getenv("DLOCK_TEST_SERVERS");
    const chk_scenario *chosen[64];
    size_t nchosen = 0;
    char shown[CLI_SHOW_MAX];

    cli_parser p;
    cli_parser_init(&p, argc, argv, "check");
    for (;;) {
        int id = cli_next_opt(&p, check_opts);
        if (id == CLI_OPT_END)
            break;
        long v;
        int ms;
        switch (id) {
        case CLI_OPT_ERROR:
            return CLI_EXIT_USAGE;
        case CLI_OPT_POS:
            return cli_usage("check", "unexpected argument %s", cli_show(p.val, shown, sizeof shown));
        case CLI_OPT_DASHDASH:
            return cli_usage("check", "unexpected \"--\"");
        case CO_HELP:
            fputs(cli_check_help, stdout);
            return 0;
        case CO_LIST:
            for (size_t i = 0; i < chk_nscenarios; i++)
                printf("%-16s %s\n", chk_scenarios[i].name, chk_scenarios[i].about);
            return 0;
        case CO_SERVERS:
            servers_dir = p.val;
            break;
        case CO_SCENARIO: {
            const chk_scenario *sc = chk_scenario_find(p.val);
            if (!sc)
                return cli_usage("check", "unknown scenario %s (see dlock check --list)",
                                 cli_show(p.val, shown, sizeof shown));
            bool dup = false;
            for (size_t i = 0; i < nchosen; i++)
                dup |= chosen[i] == sc;
            if (!dup && nchosen < sizeof chosen / sizeof chosen[0])
                chosen[nchosen++] = sc;
            break;
        }
        case CO_P:
            if (cli_parse_long(p.val, 2, CHK_MAX_WORKERS, &v) != 0)
                return cli_usage("check", "-P wants 2 to %d workers, not %s", CHK_MAX_WORKERS,
                                 cli_show(p.val, shown, sizeof shown));
            cfg.workers = (int)v;
            break;
        case CO_D:
        case CO_TTL:
            if (cli_parse_secs(p.val, &ms) != 0 || ms == 0 || ms > 3600 * 1000)
                return cli_usage("check", "%s wants seconds (more than 0, up to 3600), not %s",
                                 p.optname, cli_show(p.val, shown, sizeof shown));
            if (id == CO_D) {
                cfg.duration_ms = ms;
                cfg.duration_given = true;
            }
            else
                cfg.ttl_ms = ms < 30 ? 30 : ms;
            break;
        case CO_JSON:
            json = true;
            break;
        case CO_HISTORY:
            history = p.val;
            break;
        case CO_CHECK_HISTORY:
            check_history = p.val;
            break;
        }
    }
    if (check_history)
        return check_file(check_history, json);
    if (nchosen == 0)
        for (size_t i = 0; i < chk_nscenarios; i++)
            chosen[nchosen++] = &chk_scenarios[i];

    /* The backend under test and what it claims. */
    /* The backend under test and what it claims, from a probe in a process
     * of its own: a client may start threads (ZooKeeper's, and then TSan's
     * own), and this process forks its workers without exec. */
    probe_res pr;
    int rc = probe(url, cfg.ttl_ms, &pr);
    if (rc)
        return rc;
    snprintf(cfg.backend, sizeof cfg.backend, "%s", pr.backend);
    snprintf(cfg.url_shown, sizeof cfg.url_shown, "%s", pr.url_shown);
    cfg.topo = pr.topo;
    cfg.caps = pr.caps;
    cfg.connect_timeout_ms = pr.connect_timeout_ms;
    cfg.op_timeout_ms = pr.op_timeout_ms;
    cfg.session_ttl_ms = pr.session_ttl_ms;
    /* The servers to fault, if the URL's are in the servers directory. */
    chk_servers *servers = NULL;
    {
        const char *u = url ? url : getenv("DLOCK_URL");
        char why[512];
        int e = chk_servers_open(servers_dir, u, cfg.backend, &servers, why, sizeof why);
        if (e < 0) {
            cli_err("check: servers: %s", why);
            return CLI_EXIT_USAGE;
        }
        if (e > 0)
            snprintf(cfg.servers_note, sizeof cfg.servers_note, "%s", why);
    }
    cfg.servers = servers;

    FILE *hf = NULL;
    if (history) {
        hf = strcmp(history, "-") == 0 ? stdout : fopen(history, "we");
        if (!hf) {
            cli_err("check: cannot create %s: %s", history, strerror(errno));
            return CLI_EXIT_USAGE;
        }
        fprintf(hf, "# dlock check history, format 1 (see dlock check --help)\n");
    }
    chk_shm *sh = mmap(NULL, sizeof(chk_shm), PROT_READ | PROT_WRITE,
                       MAP_SHARED | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    sc_out *outs = calloc(nchosen, sizeof *outs);
    const char *setup_failed = NULL;
    if (sh == MAP_FAILED || !outs)
        setup_failed = "cannot map shared memory";
    else if (ms_signals_install() != 0)
        setup_failed = "cannot install signal handlers";
    if (setup_failed) {
        cli_err("check: %s: %s", setup_failed, strerror(errno));
        if (sh != MAP_FAILED)
            munmap(sh, sizeof(chk_shm));
        free(outs);
        if (hf && hf != stdout)
            fclose(hf);
        if (servers)
            servers->close(servers->state);
        return CLI_EXIT_SOFTWARE;
    }

    chk_run r;
    memset(&r, 0, sizeof r);
    r.sh = sh;
    size_t done = 0;
    int interrupted = 0, software = 0;
    for (size_t i = 0; i < nchosen && !interrupted && !software; i++) {
        const chk_scenario *sc = chosen[i];
        sc_out *o = &outs[i];
        o->name = sc->name;
        o->sc = sc;
        /* the scenario's faults need servers, of a deployment with one of
         * its traits */
        bool have_servers =
            sc->needs_servers == 0 ||
            (cfg.servers && (sc->topos == CHK_TOPO_ANY || (cfg.servers->topo & sc->topos)));
        char cannot[400];
        if (have_servers && sc->cannot_run && sc->cannot_run(&cfg, cannot, sizeof cannot)) {
            /* it cannot be set up here: not run */
            o->verdict = "n/a";
            o->applicable = false;
            snprintf(o->note, sizeof o->note, "not applicable: %s", cannot);
            done = i + 1;
            continue;
        }
        unsigned caps = cfg.caps | (chk_has_deadline(&cfg) ? DLOCK_CAP_LEASE : 0);
        o->applicable = (caps & sc->needs_caps) == sc->needs_caps && have_servers;
        o->verdict = "invalid";
        o->ttl_ms = cfg.session_ttl_ms ? cfg.session_ttl_ms
                    : (cfg.caps & DLOCK_CAP_LEASE)
                        ? (cfg.ttl_ms > sc->min_ttl_ms ? cfg.ttl_ms : sc->min_ttl_ms)
                        : 0;
        o->run_ms = chk_run_ms(&cfg, sc);
        if (!have_servers) {
            /* the fault needs servers this run cannot control: not run */
            o->verdict = "n/a";
            if (!cfg.servers)
                snprintf(o->note, sizeof o->note, "not applicable: %s", cfg.servers_note);
            else {
                static const struct {
                    unsigned bit;
                    const char *name;
                } kinds[] = {{CHK_TOPO_ONE_SERVER, "one server"},
                             {CHK_TOPO_REPLICAS_FAILOVER, "replicas with failover"},
                             {CHK_TOPO_QUORUM, "a quorum of independent servers"},
                             {CHK_TOPO_CONSENSUS, "a consensus ensemble"},
                             {CHK_TOPO_SHARDS, "shards"}};
                char wanted[160] = "";
                size_t used = 0;
                for (size_t k = 0; k < sizeof kinds / sizeof kinds[0]; k++) {
                    if (!(sc->topos & kinds[k].bit))
                        continue;
                    int w = snprintf(wanted + used, sizeof wanted - used, "%s%s",
                                     used ? " or " : "", kinds[k].name);
                    if (w < 0 || (size_t)w >= sizeof wanted - used)
                        break; /* cut short: what fits is said */
                    used += (size_t)w;
                }
                snprintf(o->note, sizeof o->note,
                         "not applicable: this fault needs a deployment of another kind (%s)",
                         wanted);
            }
            done = i + 1;
            continue;
        }
        hist_meta fm, cm;
        hist_meta_default(&fm);
        hist_meta_default(&cm);
        /* A fault that cannot take effect runs once (its checks still
         * hold); otherwise fenced, then the canary. */
        int nruns = sc->validity == CHK_VALID_RUNS || !o->applicable || !sc->canary ? 1 : 2;
        bool harness_failed = false;
        for (int k = 0; k < nruns; k++) {
            bool fenced = k == 0;
            hist_run h;
            rc = chk_run_once(&r, &cfg, sc, fenced, &h);
            if (r.interrupted)
                interrupted = r.interrupted;
            if (hf && h.n > 0 && hist_write(hf, &h) != 0) {
                cli_err("check: cannot write the history: %s", strerror(errno));
                software = 1;
            }
            hist_result *res = fenced ? &o->fenced : &o->canary;
            if (hist_check(&h, res) != 0) {
                cli_err("check: out of memory");
                software = 1;
            }
            if (fenced) {
                o->have_fenced = true;
                fm = h.meta;
                o->faults = r.faults_injected;
                o->fenced_faults = r.faults_injected;
                o->fenced_effective = r.faults_effective;
                o->acq_stopped = r.faults_effective;
                o->acq_granted = r.acq_granted;
                o->acq_failed = r.acq_failed;
                o->acq_held = r.acq_held;
                o->acq_kept = r.acq_kept;
            } else {
                o->have_canary = true;
                cm = h.meta;
            }
            hist_run_free(&h);
            if (rc != 0) {
                harness_failed = true;
                break;
            }
        }
        if (harness_failed && !interrupted) {
            o->verdict = "invalid";
            snprintf(o->note, sizeof o->note, "harness: %s", r.error);
            /* a broken guarantee seen before the harness failed still counts */
            char why[600];
            if (strcmp(hist_verdict(&o->fenced, &fm, why, sizeof why), "fail") == 0) {
                o->verdict = "fail";
                snprintf(o->note, sizeof o->note, "%.500s (then harness: %.400s)", why, r.error);
            }
        } else if (interrupted) {
            o->verdict = "interrupted";
            snprintf(o->note, sizeof o->note, "interrupted by signal %d", interrupted);
        } else {
            judge(o, &r, &fm, &cm);
        }
        done = i + 1;
    }
    int code = software ? CLI_EXIT_SOFTWARE : exit_for(outs, done);
    if (interrupted)
        code = 128 + interrupted;
    if (json)
        print_json(&cfg, outs, done, code, interrupted, false);
    else
        print_table(&cfg, outs, done, false);
    if (fflush(stdout) != 0 && code == 0) {
        cli_err("check: cannot write the results: %s", strerror(errno));
        code = CLI_EXIT_SOFTWARE;
    }
    if (hf && hf != stdout && fclose(hf) != 0 && code == 0) {
        cli_err("check: cannot write %s: %s", history, strerror(errno));
        code = CLI_EXIT_SOFTWARE;
    }
    ms_signals_restore();
    munmap(sh, sizeof(chk_shm));
    free(outs);
    if (servers)
        servers->close(servers->state);
    return code;
}
