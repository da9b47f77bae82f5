/* SPDX-License-Identifier: MIT */
/* run.c — `dlock run`, `dlock hold` and `dlock elect`: options, taking the
 * lock (with a helper thread that reports and cancels), holding it, and
 * giving it back. The command itself is supervised in child.c; signals
 * arrive through the self-pipe of signals.c. */
#include "cli.h"
#include "dlock_debug.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
#include <poll.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <time.h>
#include <unistd.h>

/* ---- options ------------------------------------------------------------ */

typedef enum { MODE_RUN, MODE_HOLD, MODE_ELECT, MODE_ONCE } run_mode;

typedef struct run_cfg {
    run_mode mode;
    const char *cmdname;
    const char *name;
    char **cmd;          /* after "--" (run, elect) */
    int timeout_ms;      /* -1 forever, 0 try once */
    int acquire_ms;      /* what is left of timeout_ms once the client is open */
    int wait_given, nonblock;
    dlock_lock_opts lopts;
    int shared, permits_given;
    int conflict_code;
    int quiet, verbose, json;
    int kill_sig, kill_grace_ms;
    int warn_sig;        /* --warn-signal, 0 none */
    int warn_given;      /* --warn-before */
    const char *value;   /* elect --value */
    char published[256]; /* elect: the value published (--value, else self_desc) */
    const char *url;
    int64_t lose_after_ms; /* DLOCK_TEST_LOSE_AFTER_MS, -1 unset */
    dlock_claim_opts copts; /* once: --retain, --retry-failed, --fingerprint */
    int conflict_given;
} run_cfg;

enum {
    R_WAIT = 1, R_NONBLOCK, R_TTL, R_SHARED, R_PERMITS, R_FAIR, R_NOFAIR, R_CONFLICT,
    R_QUIET, R_VERBOSE, R_KILLSIG, R_GRACE, R_VALUE, R_URL, R_URL_FILE, R_NAME, R_JSON, R_HELP,
    R_MAXHOLD, R_WARNSIG, R_WARNBEFORE, R_ATLEAST, R_RETAIN, R_RETRYFAILED, R_FINGERPRINT
};

static const cli_opt run_opts[] = {
    {"wait", 'w', 1, R_WAIT},
    {"timeout", 0, 1, R_WAIT},
    {"nonblock", 'n', 0, R_NONBLOCK},
    {"no-wait", 0, 0, R_NONBLOCK},
    {"ttl", 't', 1, R_TTL},
    {"shared", 's', 0, R_SHARED},
    {"permits", 0, 1, R_PERMITS},
    {"fair", 0, 0, R_FAIR},
    {"no-fair", 0, 0, R_NOFAIR},
    {"conflict-exit-code", 'E', 1, R_CONFLICT},
    {"quiet", 'q', 0, R_QUIET},
    {"verbose", 'v', 0, R_VERBOSE},
    {"kill-signal", 0, 1, R_KILLSIG},
    {"kill-grace", 0, 1, R_GRACE},
    {"max-hold", 0, 1, R_MAXHOLD},
    {"at-least", 0, 1, R_ATLEAST},
    {"warn-signal", 0, 1, R_WARNSIG},
    {"warn-before", 0, 1, R_WARNBEFORE},
    {"value", 0, 1, R_VALUE},
    {"retain", 0, 1, R_RETAIN},
    {"retry-failed", 0, 0, R_RETRYFAILED},
    {"fingerprint", 0, 1, R_FINGERPRINT},
    {"url", 0, 1, R_URL},
    {"url-file", 0, 1, R_URL_FILE},
    {"name", 0, 1, R_NAME},
    {"json", 0, 0, R_JSON},
    {"help", 'h', 0, R_HELP},
    {NULL, 0, 0, 0},
};

/* The library's limits (dlock_lock_new refuses more permits, shorter leases). */
#define PERMITS_MAX 4096
#define TTL_MIN_SECS 0.03

static int too_large(const char *cmd, const char *opt, const char *val)
{
    char shown[CLI_SHOW_MAX];
    return cli_usage(cmd, "%s %s is too large: the maximum is %d seconds", opt,
                     cli_clean(val, shown, sizeof shown), CLI_SECS_MAX);
}

/* An option in seconds into *ms: -1, or the exit code of its usage error.
 * like: a bad value's examples (NULL: "a positive number of seconds");
 * positive: 0 is refused too. */
static int secs_opt(const char *cmd, const cli_parser *p, int *ms, const char *like,
                    bool positive)
{
    char shown[CLI_SHOW_MAX];
    int rc = cli_parse_secs(p->val, ms);
    if (rc == CLI_SECS_TOO_LARGE)
        return too_large(cmd, p->optname, p->val);
    if (rc < 0 || (positive && *ms == 0)) {
        if (like)
            return cli_usage(cmd, "%s wants seconds (like %s), not %s", p->optname, like,
                             cli_show(p->val, shown, sizeof shown));
        return cli_usage(cmd, "%s wants a positive number of seconds, not %s", p->optname,
                         cli_show(p->val, shown, sizeof shown));
    }
    return -1;
}

/* Returns -1 to go on, else an exit code (0 after --help). */
static int parse_run(int argc, char **argv, const cli_global *g, run_cfg *cfg)
{
    const char *cmd = argv[0];
    char shown[CLI_SHOW_MAX];
    memset(cfg, 0, sizeof *cfg);
    cfg->cmdname = cmd;
    cfg->mode = strcmp(cmd, "hold") == 0    ? MODE_HOLD
                : strcmp(cmd, "elect") == 0 ? MODE_ELECT
                : strcmp(cmd, "once") == 0  ? MODE_ONCE
                                            : MODE_RUN;
    cfg->timeout_ms = -1;
    cfg->conflict_code = CLI_EXIT_NOT_ACQUIRED;
    cfg->kill_sig = SIGTERM;
    cfg->kill_grace_ms = 5000;
    cfg->verbose = g->verbose;
    cfg->url = g->url;
    cfg->lose_after_ms = -1;
    dlock_lock_opts_init(&cfg->lopts);
    dlock_claim_opts_init(&cfg->copts);
    int once_opt = 0, retain_ms = 0;

    cli_parser p;
    cli_parser_init(&p, argc, argv, cmd);
    int dashdash = 0, rc;
    long n;
    while (!dashdash) {
        int id = cli_next_opt(&p, run_opts);
        switch (id) {
        case CLI_OPT_END:
            goto done;
        case CLI_OPT_ERROR:
            return CLI_EXIT_USAGE;
        case CLI_OPT_DASHDASH:
            dashdash = 1;
            break;
        case CLI_OPT_POS:
            if (cfg->name)
                return cfg->mode == MODE_HOLD
                           ? cli_usage(cmd, "unexpected argument %s",
                                       cli_show(p.val, shown, sizeof shown))
                           : cli_usage(cmd, "missing \"--\" before the command %s",
                                       cli_show(p.val, shown, sizeof shown));
            cfg->name = p.val;
            break;
        case R_WAIT:
            if ((rc = secs_opt(cmd, &p, &cfg->timeout_ms, "10 or 0.5", false)) >= 0)
                return rc;
            cfg->wait_given = 1;
            break;
        case R_NONBLOCK:
            cfg->nonblock = 1;
            break;
        case R_TTL:
            if ((rc = secs_opt(cmd, &p, &cfg->lopts.ttl_ms, NULL, false)) >= 0)
                return rc;
            /* Checked here, on what the user wrote: the library would only
             * see the value rounded up to whole milliseconds ("1 ms"). */
            if (strtod(p.val, NULL) < TTL_MIN_SECS)
                return cli_usage(cmd, "%s %s is too short: the minimum lease is %g s", p.optname,
                                 cli_clean(p.val, shown, sizeof shown), TTL_MIN_SECS);
            break;
        case R_SHARED:
            cfg->shared = 1;
            break;
        case R_PERMITS:
            if (cli_parse_long(p.val, 1, PERMITS_MAX, &n) < 0)
                return cli_usage(cmd, "%s wants a number from 1 to %d, not %s", p.optname,
                                 PERMITS_MAX, cli_show(p.val, shown, sizeof shown));
            cfg->lopts.permits = (unsigned)n;
            cfg->permits_given = 1;
            break;
        case R_FAIR:
            cfg->lopts.fair = 1;
            break;
        case R_NOFAIR:
            cfg->lopts.fair = 0;
            break;
        case R_CONFLICT:
            if (cli_parse_long(p.val, 0, 255, &n) < 0)
                return cli_usage(cmd, "%s wants an exit code from 0 to 255, not %s", p.optname,
                                 cli_show(p.val, shown, sizeof shown));
            cfg->conflict_code = (int)n;
            cfg->conflict_given = 1;
            break;
        case R_QUIET:
            cfg->quiet = 1;
            break;
        case R_VERBOSE:
            cfg->verbose = 1;
            break;
        case R_KILLSIG:
            if ((cfg->kill_sig = cli_parse_signal(p.val)) < 0)
                return cli_usage(cmd, "%s wants a signal name or number (like TERM or 9), not %s",
                                 p.optname, cli_show(p.val, shown, sizeof shown));
            break;
        case R_GRACE:
            if ((rc = secs_opt(cmd, &p, &cfg->kill_grace_ms, "5 or 0.5", false)) >= 0)
                return rc;
            break;
        case R_MAXHOLD:
            if ((rc = secs_opt(cmd, &p, &cfg->lopts.max_hold_ms, NULL, true)) >= 0)
                return rc;
            break;
        case R_ATLEAST:
            if ((rc = secs_opt(cmd, &p, &cfg->lopts.min_hold_ms, NULL, true)) >= 0)
                return rc;
            break;
        case R_WARNSIG:
            if ((cfg->warn_sig = cli_parse_signal(p.val)) <= 0)
                return cli_usage(cmd, "%s wants a signal name or number (like USR1 or 10), not %s",
                                 p.optname, cli_show(p.val, shown, sizeof shown));
            break;
        case R_WARNBEFORE:
            if ((rc = secs_opt(cmd, &p, &cfg->lopts.warn_ms, NULL, true)) >= 0)
                return rc;
            cfg->warn_given = 1;
            break;
        case R_RETAIN:
            if ((rc = secs_opt(cmd, &p, &retain_ms, NULL, true)) >= 0)
                return rc;
            cfg->copts.retain_ms = retain_ms;
            once_opt = 1;
            break;
        case R_RETRYFAILED:
            cfg->copts.retry_failed = 1;
            once_opt = 1;
            break;
        case R_FINGERPRINT:
            if (!*p.val || strlen(p.val) > DLOCK_FINGERPRINT_MAX)
                return cli_usage(cmd, "%s wants 1 to %d bytes of printable ASCII", p.optname,
                                 DLOCK_FINGERPRINT_MAX);
            for (const char *f = p.val; *f; f++)
                if (*f < 0x20 || *f > 0x7e)
                    return cli_usage(cmd, "%s wants printable ASCII, not %s", p.optname,
                                     cli_show(p.val, shown, sizeof shown));
            cfg->copts.fingerprint = p.val;
            once_opt = 1;
            break;
        case R_VALUE:
            if (strlen(p.val) > 255)
                return cli_usage(cmd, "%s is limited to 255 bytes", p.optname);
            cfg->value = p.val;
            break;
        case R_URL:
            if (!(cfg->url = cli_url_arg(cmd, p.val)))
                return CLI_EXIT_USAGE;
            break;
        case R_URL_FILE:
            if (!(cfg->url = cli_url_file(cmd, p.val)))
                return CLI_EXIT_USAGE;
            break;
        case R_JSON:
            cfg->json = 1;
            break;
        case R_NAME:
            /* A name that starts with '-' would read as an option. */
            if (cfg->name)
                return cli_usage(cmd, "the lock NAME is given twice (%s)",
                                 cli_show(p.val, shown, sizeof shown));
            cfg->name = p.val;
            break;
        case R_HELP:
            /* The text comes from main.c's command table through g, so
             * that run.c never calls back into main.c. */
            fputs(g->help, stdout);
            return 0;
        }
    }
done:
    if (cfg->mode != MODE_ELECT && cfg->value)
        return cli_usage(cmd, "--value is an option of 'dlock elect'");
    if (cfg->mode != MODE_ONCE && once_opt)
        return cli_usage(cmd, "--retain, --retry-failed and --fingerprint are options of "
                              "'dlock once'");
    if (cfg->mode == MODE_ONCE && (cfg->shared || cfg->permits_given))
        return cli_usage(cmd, "a claim's lock is exclusive: -s and --permits do not apply");
    if (cfg->mode == MODE_ONCE && !cfg->conflict_given)
        cfg->conflict_code = CLI_EXIT_IN_PROGRESS;
    if (cfg->mode == MODE_ELECT && (cfg->shared || cfg->permits_given))
        return cli_usage(cmd, "leadership is exclusive: -s and --permits do not apply");
    /* hold -- NAME: a name that starts with '-' */
    if (cfg->mode == MODE_HOLD && dashdash && !cfg->name && p.idx == argc - 1)
        cfg->name = argv[p.idx++];
    if (cfg->mode == MODE_HOLD && p.idx < argc)
        return cli_usage(cmd, "hold takes no command (use 'dlock run NAME -- CMD')");
    if (cfg->mode == MODE_HOLD && cfg->warn_sig)
        return cli_usage(cmd, "--warn-signal is for a command: hold has none (--json shows "
                              "warnings)");
    if (cfg->mode == MODE_ELECT && cfg->lopts.min_hold_ms)
        return cli_usage(cmd, "--at-least is an option of 'dlock run' and 'dlock hold'");
    if (cfg->lopts.max_hold_ms && cfg->lopts.min_hold_ms > cfg->lopts.max_hold_ms)
        return cli_usage(cmd, "--at-least is longer than --max-hold: the cap would end it first");
    if (cfg->wait_given && cfg->nonblock)
        return cli_usage(cmd, "-w and -n exclude each other");
    if (cfg->shared && cfg->permits_given)
        return cli_usage(cmd, "-s and --permits exclude each other");
    if (!cfg->name)
        return cli_usage(cmd, "missing lock NAME");
    if (cfg->mode != MODE_HOLD) {
        if (!dashdash)
            return cli_usage(cmd, "missing \"--\" and the command to run");
        if (p.idx >= argc)
            return cli_usage(cmd, "missing the command after \"--\"");
        cfg->cmd = argv + p.idx;
    }
    if (cfg->nonblock)
        cfg->timeout_ms = 0;
    if (cfg->shared)
        cfg->lopts.kind = DLOCK_SHARED;
    else if (cfg->permits_given)
        cfg->lopts.kind = DLOCK_SEMAPHORE;
    const char *lose = getenv("DLOCK_TEST_LOSE_AFTER_MS");
    if (lose && *lose) {
        if (cli_parse_long(lose, 0, INT_MAX, &n) < 0)
            return cli_usage(cmd, "DLOCK_TEST_LOSE_AFTER_MS wants milliseconds, not %s",
                             cli_show(lose, shown, sizeof shown));
        cfg->lose_after_ms = n;
    }
    return -1;
}

/* ---- waiting ------------------------------------------------------------ */

/* While the main thread sleeps inside dlock_acquire, this thread receives
 * the signals (cancelling the acquisition on INT/TERM/HUP/QUIT, remembering
 * USR1/USR2/WINCH for the command) and, with -v, says every second who
 * holds the lock. */
#define MAX_REMEMBERED 16
typedef struct waiter {
    const run_cfg *cfg;
    dlock_client *client;
    dlock_lock *lock;
    int stop_fd;
    atomic_int sig; /* terminating signal received, 0 none */
    int64_t started_ms;
    /* Written by the waiting thread only, read after it was joined. */
    int remembered[MAX_REMEMBERED];
    size_t nremembered;
} waiter;

/* Signals meant for the command that may arrive before it exists. */
static int for_command(int sig)
{
    return sig == SIGUSR1 || sig == SIGUSR2 || sig == SIGWINCH;
}

static void fmt_dur(char *buf, size_t len, long long ms)
{
    if (ms < 0)
        snprintf(buf, len, "an unknown time");
    else if (ms < 10000)
        snprintf(buf, len, "%.1f s", (double)ms / 1000.0);
    else
        snprintf(buf, len, "%lld s", ms / 1000);
}

static void report_holder(waiter *w)
{
    const run_cfg *cfg = w->cfg;
    char shown[CLI_SHOW_MAX], waited[32], held[32];
    cli_show(cfg->name, shown, sizeof shown);
    fmt_dur(waited, sizeof waited, cli_now_ms() - w->started_ms);
    if (cfg->mode == MODE_ELECT) {
        char leader[256];
        if (dlock_leader(w->client, cfg->name, leader, sizeof leader) == 0) {
            char who[CLI_SHOW_MAX];
            cli_err("%s: waiting %s to lead %s: leader is %s", cfg->cmdname, waited, shown,
                    cli_clean(leader, who, sizeof who));
            return;
        }
    }
    dlock_info info;
    memset(&info, 0, sizeof info);
    int rc = dlock_inspect(w->client, cfg->name, &info);
    if (rc) {
        const char *why = dlock_client_errmsg(w->client);
        cli_err("%s: waiting %s for lock %s: cannot inspect it: %s", cfg->cmdname, waited, shown,
                why && *why ? why : dlock_strerror(rc));
        return;
    }
    info.holder[sizeof info.holder - 1] = '\0';
    char others[48] = "";
    if (info.waiters > 0)
        snprintf(others, sizeof others, ", %d waiting", info.waiters);
    if (info.held > 0) {
        char who[CLI_SHOW_MAX];
        fmt_dur(held, sizeof held, info.held_ms);
        cli_err("%s: waiting %s for lock %s: held by %s for %s%s", cfg->cmdname, waited, shown,
                info.holder[0] ? cli_clean(info.holder, who, sizeof who) : "an unknown holder",
                held, others);
    } else {
        cli_err("%s: waiting %s for lock %s: %s%s", cfg->cmdname, waited, shown,
                info.held == 0 ? "free right now" : "holder unknown", others);
    }
}

static void *waiter_main(void *arg)
{
    waiter *w = arg;
    /* The only thread with the signals unblocked: handlers run here, never
     * inside the library's calls. */
    pthread_sigmask(SIG_UNBLOCK, cli_sig_handled(), NULL);
    int64_t next_report = w->started_ms + 1000;
    for (;;) {
        int timeout = -1;
        int64_t now = cli_now_ms();
        if (atomic_load(&w->sig))
            timeout = 50; /* see below */
        else if (w->cfg->verbose)
            timeout = next_report > now ? (int)(next_report - now) : 0;
        struct pollfd fds[2] = {{.fd = cli_sig_fd(), .events = POLLIN},
                                {.fd = w->stop_fd, .events = POLLIN}};
        int n = poll(fds, 2, timeout);
        if (n < 0 && errno != EINTR)
            break;
        if (n > 0 && fds[1].revents)
            break;
        int sig;
        while (n > 0 && (sig = cli_sig_next()) != 0) {
            if (cli_sig_terminates(sig) && !atomic_load(&w->sig))
                atomic_store(&w->sig, sig);
            /* For the command, once it runs (hold has none: they go). More
             * than MAX_REMEMBERED would have merged in the kernel anyway. */
            else if (for_command(sig) && w->cfg->mode != MODE_HOLD &&
                     w->nremembered < MAX_REMEMBERED)
                w->remembered[w->nremembered++] = sig;
        }
        if (atomic_load(&w->sig)) {
            /* Repeated, because dlock_acquire drops a cancel that arrives
             * before it starts waiting; the main thread stops us soon. */
            dlock_cancel(w->lock);
            continue;
        }
        if (w->cfg->verbose && cli_now_ms() >= next_report) {
            report_holder(w);
            next_report = cli_now_ms() + 1000;
        }
    }
    pthread_sigmask(SIG_BLOCK, cli_sig_handled(), NULL);
    return NULL;
}

/* Says why the lock was not acquired (not with -q); msg gets the line
 * without "dlock: ", for the --json error event, -q or not. */
static void not_acquired_msg(const run_cfg *cfg, dlock_client *c, dlock_lock *lock, int rc,
                             char *msg, size_t len)
{
    char shown[CLI_SHOW_MAX], why[320];
    cli_show(cfg->name, shown, sizeof shown);
    dlock_info info;
    memset(&info, 0, sizeof info);
    /* Not after a timed wait: -w is a bound (plus 100 ms), and a server
     * that stopped answering would hold the inspect for op_timeout_ms. */
    if (rc != DLOCK_ETIMEDOUT && (!cfg->quiet || cfg->json) &&
        dlock_inspect(c, cfg->name, &info) == 0 && info.held > 0 &&
        info.holder[0]) {
        char who[CLI_SHOW_MAX];
        info.holder[sizeof info.holder - 1] = '\0';
        snprintf(why, sizeof why, "held by %s", cli_clean(info.holder, who, sizeof who));
    } else {
        snprintf(why, sizeof why, "%s", rc == DLOCK_EBUSY ? "held by another owner" : "busy");
    }
    /* A wait that ended for another reason than the lock staying held (no
     * reply from the server before the deadline, a grant too late) says
     * which: "busy" alone would send the user looking for a holder. The
     * library says a plain timeout in one form (dl_wait_timed_out). */
    const char *lib = rc == DLOCK_ETIMEDOUT ? dlock_lock_errmsg(lock) : NULL;
    char plain[DLOCK_NAME_MAX + 32];
    snprintf(plain, sizeof plain, "lock \"%s\": timed out waiting", cfg->name);
    if (lib && *lib && strcmp(lib, plain) != 0) {
        const char *tail = strstr(lib, "\": ");
        snprintf(why, sizeof why, "%s", strncmp(lib, "lock \"", 6) == 0 && tail ? tail + 3 : lib);
    }
    if (rc == DLOCK_ETIMEDOUT)
        snprintf(msg, len, "%s: lock %s not acquired within %.3g s: %s", cfg->cmdname, shown,
                 (double)cfg->timeout_ms / 1000.0, why);
    else
        snprintf(msg, len, "%s: lock %s not acquired: %s", cfg->cmdname, shown, why);
    if (!cfg->quiet)
        cli_err("%s", msg);
}

static void self_desc(char *buf, size_t len)
{
    char host[256];
    if (gethostname(host, sizeof host) != 0)
        snprintf(host, sizeof host, "unknown host");
    host[sizeof host - 1] = '\0';
    snprintf(buf, len, "pid %ld on %.200s", (long)getpid(), host);
}

/* take() when the lock is held: distinct from every exit code, 0 included
 * (-E 0 makes a conflict exit 0). */
#define TAKEN (-1)

/* Signals remembered while waiting have nowhere to go: say so. */
static void dropped_msg(const run_cfg *cfg, const waiter *w)
{
    if (cfg->quiet || w->nremembered == 0)
        return;
    char list[MAX_REMEMBERED * 12] = "", sname[16];
    size_t len = 0;
    for (size_t i = 0; i < w->nremembered; i++) {
        int m = snprintf(list + len, sizeof list - len, "%s%s", i ? ", " : "",
                         cli_signal_name(w->remembered[i], sname, sizeof sname));
        if (m < 0 || (size_t)m >= sizeof list - len)
            break;
        len += (size_t)m;
    }
    cli_err("%s: the command never ran; dropped %s received while waiting", cfg->cmdname, list);
}

/* The acquired event carries the variables the command gets from the
 * layout's own tool (dlock_peer_env): hold has no command, a script reads
 * them there. */
static int ev_peer_var(const char *var, const char *value, void *arg)
{
    cli_ev_str(arg, var, value);
    return 0;
}

/* Take the lock (or leadership). Returns TAKEN when held, else the exit
 * code (*stop_sig: the signal that ended the wait); *remembered gets the
 * signals to deliver to the command. */
/* The client of a run whose wait is bounded (-w SECS > 0): a backend that
 * no server answers yet (one restarting as the wait starts) is tried again
 * within the bound (50 ms doubling to 0.8 s), as the library rides out a
 * server that goes during the wait. Without a bound, and with -n, it fails
 * at once: a wrong URL must not wait for ever. The failure's line and event
 * are said here; a terminating signal meanwhile ends it (128 + it, *sig). */
static int open_for_wait(const run_cfg *cfg, int64_t opening_ms, dlock_client **c, int *sig)
{
    int64_t step_ms = 50;
    bool said = false;
    for (;;) {
        int64_t left_ms = cfg->timeout_ms - (cli_now_ms() - opening_ms);
        int within = cfg->timeout_ms > 0 ? (int)(left_ms > 0 ? left_ms : 0) + 100 : -1;
        int rc = cli_open_try(cfg->url, within, c);
        if (rc == 0)
            return 0;
        left_ms = cfg->timeout_ms - (cli_now_ms() - opening_ms);
        if (rc != DLOCK_EUNREACHABLE || cfg->timeout_ms <= 0 || left_ms <= step_ms) {
            int exit_code = cli_open_failed(cfg->cmdname, rc);
            cli_ev_error(cfg->name, dlock_err_name(rc), exit_code, NULL);
            return exit_code;
        }
        if (cfg->verbose && !said) {
            const char *why = dlock_client_errmsg(NULL);
            cli_err("%s: cannot open backend yet: %s; trying again for up to %.1f s", cfg->cmdname,
                    why && *why ? why : dlock_strerror(rc), (double)left_ms / 1000);
            said = true;
        }
        struct pollfd p = {.fd = cli_sig_fd(), .events = POLLIN};
        struct timespec ts = {.tv_sec = step_ms / 1000, .tv_nsec = step_ms % 1000 * 1000000};
        step_ms = step_ms < 400 ? step_ms * 2 : 800;
        if (ppoll(&p, 1, &ts, cli_sig_pollmask()) <= 0)
            continue;
        int s;
        while ((s = cli_sig_next()) != 0) {
            if (!cli_sig_terminates(s))
                continue; /* (no command yet to pass it on to) */
            char sname[16], msg[96];
            snprintf(msg, sizeof msg, "%s: %s received while waiting", cfg->cmdname,
                     cli_signal_name(s, sname, sizeof sname));
            cli_ev_error(cfg->name, "INTERRUPTED", 128 + s, msg);
            *sig = s;
            return 128 + s;
        }
    }
}

static int take(const run_cfg *cfg, dlock_client *c, dlock_lock *lock, int *remembered,
                size_t *nremembered, int *stop_sig, dlock_claim **claim)
{
    waiter w = {.cfg = cfg, .client = c, .lock = lock, .started_ms = cli_now_ms()};
    atomic_init(&w.sig, 0);
    w.stop_fd = eventfd(0, EFD_CLOEXEC);
    if (w.stop_fd < 0) {
        cli_err("%s: cannot create eventfd: %s", cfg->cmdname, strerror(errno));
        return CLI_EXIT_SOFTWARE;
    }
    pthread_t th;
    int err = pthread_create(&th, NULL, waiter_main, &w);
    if (err) {
        close(w.stop_fd);
        cli_err("%s: cannot start a thread: %s", cfg->cmdname, strerror(err));
        return CLI_EXIT_SOFTWARE;
    }
    int rc;
    if (cfg->mode == MODE_ELECT) {
        rc = dlock_campaign(lock, cfg->published, cfg->acquire_ms);
    } else if (cfg->mode == MODE_ONCE) {
        rc = dlock_claim_begin(lock, &cfg->copts, cfg->acquire_ms, claim);
    } else {
        rc = dlock_acquire(lock, cfg->acquire_ms);
    }
    uint64_t one = 1;
    if (write(w.stop_fd, &one, sizeof one) < 0) {
        /* cannot fail for a fresh eventfd; the join below would hang, so say it */
        cli_err("%s: cannot stop the waiting thread: %s", cfg->cmdname, strerror(errno));
    }
    pthread_join(th, NULL);
    close(w.stop_fd);

    int sig = atomic_load(&w.sig);
    if (sig) {
        /* Interrupted while waiting: leave nothing behind. */
        if (rc == 0 && cfg->mode == MODE_ONCE) {
            /* nothing ran: the next caller may, as this attempt's */
            if (dlock_claim_state(*claim) == DLOCK_CLAIM_RUN)
                (void)dlock_claim_abandon(*claim);
        } else if (rc == 0) {
            (void)(cfg->mode == MODE_ELECT ? dlock_resign(lock) : dlock_release(lock));
        }
        dropped_msg(cfg, &w);
        char sname[16], msg[96];
        snprintf(msg, sizeof msg, "%s: %s received while waiting", cfg->cmdname,
                 cli_signal_name(sig, sname, sizeof sname));
        cli_ev_error(cfg->name, "INTERRUPTED", 128 + sig, msg);
        *stop_sig = sig;
        return 128 + sig;
    }
    char shown[CLI_SHOW_MAX];
    cli_show(cfg->name, shown, sizeof shown);
    if (rc == DLOCK_EBUSY || rc == DLOCK_ETIMEDOUT) {
        char msg[512];
        not_acquired_msg(cfg, c, lock, rc, msg, sizeof msg);
        dropped_msg(cfg, &w);
        cli_ev_error(cfg->name, dlock_err_name(rc), cfg->conflict_code, msg);
        return cfg->conflict_code; /* may be 0: still not TAKEN */
    }
    if (rc) {
        const char *why = dlock_lock_errmsg(lock);
        if (cfg->mode == MODE_ONCE) /* the claim's reason names it */
            cli_err("%s: %s", cfg->cmdname, why && *why ? why : dlock_strerror(rc));
        else
            cli_err("%s: cannot acquire lock %s: %s", cfg->cmdname, shown,
                    why && *why ? why : dlock_strerror(rc));
        cli_ev_error(cfg->name, dlock_err_name(rc), cli_exit_for(rc), NULL);
        dropped_msg(cfg, &w);
        return cli_exit_for(rc);
    }
    if (cfg->mode == MODE_ONCE && dlock_claim_state(*claim) == DLOCK_CLAIM_DONE) {
        dropped_msg(cfg, &w); /* nothing runs: a replay */
        return TAKEN;
    }
    memcpy(remembered, w.remembered, w.nremembered * sizeof *remembered);
    *nremembered = w.nremembered;
    int64_t waited_ms = cli_now_ms() - w.started_ms;
    cli_event e;
    if (cli_ev_begin(&e, cfg->mode == MODE_ELECT ? "elected" : "acquired", cfg->name)) {
        char self[300];
        self_desc(self, sizeof self); /* what the library records as the holder */
        cli_ev_u64(&e, "token", dlock_token(lock));
        cli_ev_str(&e, "backend", dlock_client_backend(c));
        cli_ev_str(&e, "url", dlock_client_url(c)); /* its password is "***" */
        cli_ev_str(&e, "holder", self);
        if (cfg->mode == MODE_ELECT)
            cli_ev_str(&e, "value", cfg->published);
        cli_ev_int(&e, "waited_ms", waited_ms);
        (void)dlock_peer_env(lock, ev_peer_var, &e); /* (etcdctl's ETCD_LOCK_KEY...) */
        cli_ev_end(&e);
    }
    if (cfg->verbose) {
        char waited[32];
        fmt_dur(waited, sizeof waited, waited_ms);
        cli_err("%s: acquired lock %s (token %" PRIu64 ") after %s", cfg->cmdname, shown,
                dlock_token(lock), waited);
    }
    return TAKEN;
}

/* ---- holding ------------------------------------------------------------ */

/* `dlock hold`: print the token, then sleep until a terminating signal or
 * the loss of the lock. Returns the exit code. */
static int hold(const run_cfg *cfg, dlock_lock *lock, uint64_t token, int64_t lose_at,
                int warn_fd)
{
    char shown[CLI_SHOW_MAX];
    cli_show(cfg->name, shown, sizeof shown);
    if (printf("%" PRIu64 "\n", token) < 0 || fflush(stdout) != 0) {
        cli_err("hold: cannot print the token: %s", strerror(errno));
        cli_ev_error(cfg->name, "INTERNAL", CLI_EXIT_SOFTWARE, NULL);
        return CLI_EXIT_SOFTWARE;
    }
    int lost_fd = dlock_lost_fd(lock);
    for (;;) {
        struct pollfd fds[3] = {{.fd = cli_sig_fd(), .events = POLLIN},
                                {.fd = lost_fd, .events = POLLIN},
                                {.fd = warn_fd, .events = POLLIN}}; /* -1: none */
        struct timespec ts, *tsp = NULL;
        if (lose_at >= 0) {
            int64_t left = lose_at - cli_now_ms();
            if (left <= 0) {
                (void)dlock_debug_force_loss(lock);
                lose_at = -1;
                continue;
            }
            ts.tv_sec = left / 1000;
            ts.tv_nsec = (left % 1000) * 1000000;
            tsp = &ts;
        }
        int n = ppoll(fds, 3, tsp, cli_sig_pollmask());
        if (n < 0 && errno != EINTR) {
            cli_err("hold: poll: %s", strerror(errno));
            cli_ev_error(cfg->name, "INTERNAL", CLI_EXIT_SOFTWARE, NULL);
            return CLI_EXIT_SOFTWARE;
        }
        /* Before the loss: a warning told before it is read before it. */
        if (n > 0 && fds[2].revents)
            cli_warned("hold", cfg->name, lock, token, 0, 0, warn_fd, cfg->verbose);
        if (n > 0 && fds[1].revents) {
            cli_lost_ack(lock);
            const char *why = dlock_lock_errmsg(lock);
            if (why && *why)
                cli_err("hold: %s", why); /* names the lock and says why */
            else
                cli_err("hold: lock %s lost", shown);
            cli_ev_lost(cfg->name, token, why && *why ? why : "lost while held");
            return CLI_EXIT_LOST;
        }
        int sig;
        while ((sig = cli_sig_next()) != 0)
            if (cli_sig_terminates(sig)) {
                if (cfg->verbose) {
                    char sname[16];
                    cli_err("hold: %s received; releasing lock %s",
                            cli_signal_name(sig, sname, sizeof sname), shown);
                }
                return 0;
            }
    }
}

/* ---- once ------------------------------------------------------------------ */

/* What `once` adds to a run: the result file and the command's variables. */
typedef struct once_run {
    char path[PATH_MAX];
    int result_fd; /* open on path while the command runs; -1 none */
    char attempt_var[48], *result_var;
    char *env[3];
} once_run;

static void once_cleanup(once_run *o)
{
    if (o->result_fd >= 0) {
        close(o->result_fd);
        (void)unlink(o->path);
        o->result_fd = -1;
    }
    free(o->result_var);
    o->result_var = NULL;
}

/* The result file (empty, the command's to write) and the variables. */
static int once_prepare(const run_cfg *cfg, dlock_claim *claim, once_run *o)
{
    const char *tmp = getenv("TMPDIR");
    if (!tmp || !*tmp)
        tmp = "/tmp";
    int n = snprintf(o->path, sizeof o->path, "%s/dlock-once-XXXXXX", tmp);
    if (n < 0 || (size_t)n >= sizeof o->path || (o->result_fd = mkstemp(o->path)) < 0) {
        cli_err("%s: cannot create the result file in %s: %s", cfg->cmdname, tmp,
                n < 0 || (size_t)n >= sizeof o->path ? strerror(ENAMETOOLONG) : strerror(errno));
        o->result_fd = -1;
        return -1;
    }
    (void)fcntl(o->result_fd, F_SETFD, FD_CLOEXEC);
    snprintf(o->attempt_var, sizeof o->attempt_var, "DLOCK_ONCE_ATTEMPT=%u",
             dlock_claim_attempt(claim));
    size_t len = strlen("DLOCK_RESULT=") + strlen(o->path) + 1;
    if (!(o->result_var = malloc(len))) {
        cli_err("%s: out of memory", cfg->cmdname);
        return -1;
    }
    snprintf(o->result_var, len, "DLOCK_RESULT=%s", o->path);
    o->env[0] = o->attempt_var;
    o->env[1] = o->result_var;
    o->env[2] = NULL;
    if (cfg->verbose)
        cli_err("%s: running %s as attempt %u", cfg->cmdname, cfg->name,
                dlock_claim_attempt(claim));
    return 0;
}

/* "2026-12-04T19:07:34Z" */
static void fmt_utc(char *buf, size_t len, long long ms)
{
    time_t t = (time_t)(ms / 1000);
    struct tm tm;
    if (ms <= 0 || !gmtime_r(&t, &tm) || strftime(buf, len, "%Y-%m-%dT%H:%M:%SZ", &tm) == 0)
        snprintf(buf, len, "an unknown time");
}

/* A duplicate: the recorded result on stdout, the recorded status. */
static int once_replay(const run_cfg *cfg, const dlock_claim *claim)
{
    size_t len;
    const char *res = dlock_claim_result(claim, &len);
    char when[40], who[CLI_SHOW_MAX], shown[CLI_SHOW_MAX];
    fmt_utc(when, sizeof when, dlock_claim_finished_ms(claim));
    int status = dlock_claim_status(claim);
    if (!cfg->quiet)
        cli_err("%s: %s already ran (attempt %u, exit %d, at %s by %s): replayed", cfg->cmdname,
                cli_show(cfg->name, shown, sizeof shown), dlock_claim_attempt(claim), status,
                when, cli_clean(dlock_claim_by(claim), who, sizeof who));
    cli_event e;
    if (cli_ev_begin(&e, "replayed", cfg->name)) {
        cli_ev_int(&e, "attempt", dlock_claim_attempt(claim));
        cli_ev_int(&e, "status", status);
        cli_ev_int(&e, "finished_ms", dlock_claim_finished_ms(claim));
        cli_ev_str(&e, "by", dlock_claim_by(claim));
        cli_ev_end(&e);
    }
    if ((len && fwrite(res, 1, len, stdout) != len) || fflush(stdout) != 0) {
        cli_err("%s: cannot write the recorded result: %s", cfg->cmdname, strerror(errno));
        return CLI_EXIT_SOFTWARE;
    }
    return status >= 0 && status <= 255 ? status : CLI_EXIT_SOFTWARE;
}

/* Read what the command left in $DLOCK_RESULT: at most
 * DLOCK_CLAIM_RESULT_MAX bytes (more is cut, and said). */
static char *once_result(const run_cfg *cfg, once_run *o, size_t *len)
{
    *len = 0;
    char *buf = malloc(DLOCK_CLAIM_RESULT_MAX + 1);
    if (!buf)
        return NULL;
    /* The command may have replaced the file: read it by name. */
    int fd = open(o->path, O_RDONLY | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK);
    if (fd < 0) {
        if (errno != ENOENT)
            cli_err("%s: cannot read the result file %s: %s (recording none)", cfg->cmdname,
                    o->path, strerror(errno));
        return buf;
    }
    size_t got = 0;
    while (got < DLOCK_CLAIM_RESULT_MAX + 1) {
        ssize_t r = read(fd, buf + got, DLOCK_CLAIM_RESULT_MAX + 1 - got);
        if (r < 0 && errno == EINTR)
            continue;
        if (r <= 0)
            break;
        got += (size_t)r;
    }
    close(fd);
    if (got > DLOCK_CLAIM_RESULT_MAX) {
        cli_err("%s: the result is longer than %d bytes: recording its first %d", cfg->cmdname,
                DLOCK_CLAIM_RESULT_MAX, DLOCK_CLAIM_RESULT_MAX);
        got = DLOCK_CLAIM_RESULT_MAX;
    }
    *len = got;
    return buf;
}

/* The command ended (dlock's exit code rc): record its outcome, unless the
 * lock was lost (then nothing is written: the next caller runs it again as
 * the next attempt). Returns the exit code. */
static int once_finish(const run_cfg *cfg, dlock_claim *claim, dlock_lock *lock, once_run *o,
                       int rc)
{
    if (rc == CLI_EXIT_LOST)
        return rc; /* said by the supervisor; dlock_claim_free leaves it running */
    char shown[CLI_SHOW_MAX];
    cli_show(cfg->name, shown, sizeof shown);
    size_t len;
    char *res = once_result(cfg, o, &len);
    if (!res) {
        cli_err("%s: out of memory", cfg->cmdname);
        return CLI_EXIT_SOFTWARE;
    }
    int fin = dlock_claim_finish(claim, rc, res, len);
    free(res);
    if (fin == 0) {
        if (cfg->verbose)
            cli_err("%s: recorded %s: attempt %u, exit %d", cfg->cmdname, shown,
                    dlock_claim_attempt(claim), rc);
        return rc;
    }
    const char *why = dlock_lock_errmsg(lock);
    cli_err("%s: cannot record the outcome of %s: %s", cfg->cmdname, shown,
            why && *why ? why : dlock_strerror(fin));
    cli_ev_error(cfg->name, dlock_err_name(fin), fin == DLOCK_ELOST ? CLI_EXIT_LOST
                                                                     : cli_exit_for(fin), NULL);
    return fin == DLOCK_ELOST ? CLI_EXIT_LOST : cli_exit_for(fin);
}

/* ---- the command -------------------------------------------------------- */

/* Milliseconds since the epoch, as the events' ts_ms. */
static int64_t wall_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

int cli_run(int argc, char **argv, const cli_global *g)
{
    run_cfg cfg;
    int rc = parse_run(argc, argv, g, &cfg);
    if (rc >= 0)
        return rc;
    if ((rc = cli_check_name(cfg.cmdname, cfg.url, cfg.name)) != 0)
        return rc;
    if (cfg.json)
        cli_events_on();
    if (cfg.mode == MODE_ELECT) {
        if (cfg.value)
            snprintf(cfg.published, sizeof cfg.published, "%s", cfg.value);
        else
            self_desc(cfg.published, sizeof cfg.published);
    }
    /* Before the client exists, so that its threads inherit the mask. */
    if (cli_sig_setup() < 0) {
        cli_err("%s: cannot set up signal handling: %s", cfg.cmdname, strerror(errno));
        cli_ev_error(cfg.name, "INTERNAL", CLI_EXIT_SOFTWARE, NULL);
        cli_sig_teardown();
        return CLI_EXIT_SOFTWARE;
    }
    dlock_client *c = NULL;
    dlock_lock *lock = NULL;
    dlock_claim *claim = NULL;
    once_run once = {.result_fd = -1};
    int warn_fd = -1;
    /* A signal that ended the wait or killed the command: dlock dies of it
     * too, once the lock is given back (a shell then acts on it). */
    int die_sig = 0, die_group = 0;
    char shown[CLI_SHOW_MAX];
    cli_show(cfg.name, shown, sizeof shown);
    /* -w bounds the whole wait, connecting to the backend included: an
     * unreachable or stalled server must not make it longer. */
    int64_t opening = cli_now_ms();
    if ((rc = open_for_wait(&cfg, opening, &c, &die_sig)) != 0)
        goto out;
    cfg.acquire_ms = cfg.timeout_ms;
    if (cfg.timeout_ms > 0) {
        int64_t left = cfg.timeout_ms - (cli_now_ms() - opening);
        cfg.acquire_ms = left > 1 ? (int)left : 1;
    }
    /* Warnings before loss only where someone hears them: --warn-signal,
     * --json or -v. The descriptor outlives the lock (freed first). */
    if (cfg.warn_sig || cfg.json || cfg.verbose) {
        if ((warn_fd = cli_warn_fd()) < 0) {
            cli_err("%s: cannot create an eventfd for warnings: %s", cfg.cmdname,
                    strerror(errno));
            cli_ev_error(cfg.name, "INTERNAL", CLI_EXIT_SOFTWARE, NULL);
            rc = CLI_EXIT_SOFTWARE;
            goto out;
        }
        cfg.lopts.on_warn = cli_on_warn;
        cfg.lopts.on_warn_arg = (void *)(intptr_t)warn_fd;
    }
    if ((rc = dlock_lock_new(&lock, c, cfg.name, &cfg.lopts)) != 0) {
        const char *why = dlock_client_errmsg(c);
        cli_err("%s: cannot create lock %s: %s", cfg.cmdname, shown,
                why && *why ? why : dlock_strerror(rc));
        cli_ev_error(cfg.name, dlock_err_name(rc), cli_exit_for(rc), NULL);
        rc = cli_exit_for(rc);
        lock = NULL;
        goto out;
    }
    int remembered[MAX_REMEMBERED];
    size_t nremembered = 0;
    if ((rc = take(&cfg, c, lock, remembered, &nremembered, &die_sig, &claim)) != TAKEN)
        goto out;
    if (claim && dlock_claim_state(claim) == DLOCK_CLAIM_DONE) {
        rc = once_replay(&cfg, claim);
        goto out;
    }
    if (claim && once_prepare(&cfg, claim, &once) != 0) {
        rc = CLI_EXIT_SOFTWARE;
        goto out;
    }
    int64_t lose_at = cfg.lose_after_ms >= 0 ? cli_now_ms() + cfg.lose_after_ms : -1;
    /* --at-least: the lock stays taken until about then (the library counts
     * from before its request, a little earlier), for the released event. */
    int64_t held_until_ms = cfg.lopts.min_hold_ms ? wall_ms() + cfg.lopts.min_hold_ms : 0;
    /* For the events: once the lock is lost, dlock_token says 0. */
    uint64_t token = dlock_token(lock);

    if (cfg.mode == MODE_HOLD) {
        rc = hold(&cfg, lock, token, lose_at, warn_fd);
    } else {
        /* Do not start the command if we were told to stop while the lock
         * was being taken. */
        sigset_t pending;
        int stop = 0;
        if (sigpending(&pending) == 0)
            for (int s = 1; s < 32; s++)
                if (cli_sig_terminates(s) && sigismember(&pending, s))
                    stop = s;
        if (stop) {
            rc = 128 + stop;
            die_sig = stop;
            if (claim) { /* it never ran: the next caller runs it, as the next attempt */
                (void)dlock_claim_abandon(claim);
                goto out;
            }
        } else {
            cli_supervise_cfg sc = {
                .cmdname = cfg.cmdname,
                .name = cfg.name,
                .cmd = cfg.cmd,
                .client = c,
                .url = cfg.url,
                .lock = lock,
                .token = token,
                .kill_sig = cfg.kill_sig,
                .warn_sig = cfg.warn_sig,
                .warn_fd = warn_fd,
                .kill_grace_ms = cfg.kill_grace_ms,
                .verbose = cfg.verbose,
                .lose_at_ms = lose_at,
                /* 0 is the library's default lease (dlock.h) */
                .ttl_ms = cfg.lopts.ttl_ms > 0 ? cfg.lopts.ttl_ms : 30000,
                .deliver = remembered,
                .ndeliver = nremembered,
                .extra_env = claim ? once.env : NULL,
                .died_sig = &die_sig,
                .died_with_tty = &die_group,
            };
            rc = cli_supervise(&sc);
        }
    }

    if (claim) {
        rc = once_finish(&cfg, claim, lock, &once, rc);
        goto out;
    }
    /* Give the lock back. A loss discovered only now still means the
     * command may have run unprotected: say so, exit 75. */
    int lost = dlock_state(lock) == DLOCK_STATE_LOST;
    if (lost)
        cli_lost_ack(lock);
    /* Released and closed in one step (resigning too: every re-entry
     * ends): where the client's lease ends with it (etcd), its revocation
     * is the release. */
    int rel = dlock_release_and_close(lock);
    c = NULL;
    if ((lost || rel == DLOCK_ELOST) && rc != CLI_EXIT_LOST) {
        const char *why = dlock_lock_errmsg(lock);
        cli_err("%s: lock %s was lost while held: %s", cfg.cmdname, shown,
                why && *why ? why : "lost while held");
        cli_ev_lost(cfg.name, token, why && *why ? why : "lost while held");
        rc = CLI_EXIT_LOST;
    } else if (rel && rel != DLOCK_ELOST) {
        const char *why = dlock_lock_errmsg(lock);
        cli_err("%s: cannot release lock %s: %s", cfg.cmdname, shown,
                why && *why ? why : dlock_strerror(rel));
        /* run and elect exit with the command's status once it ran (SPEC
         * 6, dlock.1): it ran protected (a loss would have stopped it), and
         * a failure here would make a caller that retries run it twice.
         * The lock ends with the client's session or lease. hold has no
         * command: its status is the release's. */
        if (rc == 0 && cfg.mode == MODE_HOLD)
            rc = cli_exit_for(rel);
        cli_ev_error(cfg.name, dlock_err_name(rel), rc, NULL);
    } else if (rc != CLI_EXIT_LOST) {
        cli_event e;
        if (cli_ev_begin(&e, cfg.mode == MODE_ELECT ? "resigned" : "released", cfg.name)) {
            cli_ev_u64(&e, "token", token);
            if (cfg.mode == MODE_ELECT)
                cli_ev_str(&e, "value", cfg.published);
            if (held_until_ms > wall_ms())
                cli_ev_int(&e, "held_until_ms", held_until_ms);
            cli_ev_end(&e);
        }
        if (cfg.verbose && held_until_ms > wall_ms())
            cli_err("%s: released lock %s; it stays taken %.1f s more (--at-least)", cfg.cmdname,
                    shown, (double)(held_until_ms - wall_ms()) / 1000);
        else if (cfg.verbose)
            cli_err("%s: released lock %s", cfg.cmdname, shown);
    }
out:
    dlock_claim_free(claim); /* (before its lock) */
    once_cleanup(&once);
    if (lock)
        dlock_lock_free(lock);
    if (c)
        dlock_client_close(c);
    if (warn_fd >= 0)
        close(warn_fd);
    cli_sig_teardown();
    /* Not when the exit status says something else (the lock was lost, or
     * giving it back failed). */
    if (die_sig && rc == 128 + die_sig)
        return cli_sig_die(die_sig, die_group && (die_sig == SIGINT || die_sig == SIGQUIT));
    return rc;
}
