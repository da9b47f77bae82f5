/* SPDX-License-Identifier: MIT */
/* main.c — dlock(1): global options, the command table (usage list, help,
 * dispatch), and the inspection commands (status, list, break, backends).
 * run/hold/elect live in run.c, bench and check in their own files. */
#include "cli.h"
#include "harness/check.h"
#include "harness/tools.h"

#include <errno.h>
#include <poll.h>
#include <stdlib.h>
#include <string.h>
#include <syslog.h>
#include <time.h>
#include <unistd.h>

/* `dlock --help` is usage_head, the command list built from the command
 * table (at the end of this file), then usage_tail. */
static const char usage_head[] =
    "usage: dlock [--url URL] [-v] COMMAND [ARGS...]\n"
    "\n"
    "Distributed locks over the systems you already run.\n"
    "\n"
    "commands:\n";

static const char usage_tail[] =
    "\n"
    "global options:\n"
    "  --url URL      backend URL (default: $DLOCK_URL, else the embedded file\n"
    "                 backend): file:///DIR, redis://[user:pass@]host:port[/db],\n"
    "                 redlock://h1:p1,h2:p2,..., zk://h1:2181[/chroot],\n"
    "                 etcd://h1:2379, postgres://..., mysql://..., memcached://h:p;\n"
    "                 redis...?key=lock:{name}: the keys redis-py, node-redlock\n"
    "                 and redsync lock (SET NX), excluding them (dlock(1))\n"
    "  --url-file FILE  the URL from FILE's first line: with a password, this or\n"
    "                 $DLOCK_URL, never --url (the command line is public)\n"
    "  -v, --verbose  say what is happening (while waiting: who holds the lock)\n"
    "  -h, --help     show help;  --version  show versions\n"
    "\n"
    "run options (hold and elect take the ones that apply):\n"
    "  -w, --wait SECS       wait at most SECS (decimals allowed) for the lock\n"
    "  -n, --nonblock        try once, do not wait (default: wait forever)\n"
    "  -t, --ttl SECS        lease length for lease backends (default 30,\n"
    "                        at least 0.03)\n"
    "  -s, --shared          take the shared (reader) side of a read-write lock\n"
    "      --permits N       semaphore: at most N holders of NAME (1-4096)\n"
    "      --fair, --no-fair FIFO order among waiters, or not (default: backend's)\n"
    "  -E, --conflict-exit-code CODE\n"
    "                        exit code when the lock is not acquired (default 1)\n"
    "      --kill-signal SIG signal for the command's process group when the lock\n"
    "                        is lost (default TERM)\n"
    "      --kill-grace SECS then SIGKILL after SECS if anything lives (default 5)\n"
    "      --max-hold SECS   give the lock up SECS after taking it, even while it\n"
    "                        is renewed: the command is stopped as on loss\n"
    "      --at-least SECS   keep the lock taken until SECS after taking it, even\n"
    "                        if the command ends sooner (run, hold)\n"
    "      --warn-signal SIG signal for the command's group when renewals have\n"
    "                        failed so long that the lock may soon be lost\n"
    "      --warn-before SECS  warn that long before the loss (default a third of\n"
    "                        the lease, at most half)\n"
    "  -q, --quiet           no message when the lock is not acquired\n"
    "      --json            events as JSON lines on stderr (see 'dlock help run')\n"
    "\n"
    "exit status:\n"
    "  the command's exit status; if it died of signal N, dlock dies of N too\n"
    "  (the shell's status 128+N)\n"
    "  0    hold, status, leader, list, backends, break succeeded\n"
    "  1    lock not acquired (busy with -n, timed out with -w), or -E CODE;\n"
    "       break: nothing was held; leader: no leader\n"
    "  64   usage error: bad option, lock name or URL\n"
    "  69   backend unreachable\n"
    "  70   internal or backend failure\n"
    "  73   once: another caller is running it (-n, or -w ran out), or -E CODE\n"
    "  75   lock lost (or no longer protected) while the command ran; the command\n"
    "       was killed\n"
    "  126  command not executable\n"
    "  127  command not found\n"
    "  128+N  also: dlock was stopped by signal N while waiting for the lock\n"
    "\n"
    "environment: DLOCK_URL (default backend URL); the command gets DLOCK_NAME,\n"
    "DLOCK_TOKEN (fencing token) and DLOCK_URL (password removed; a dlock it\n"
    "runs reads the whole URL from the descriptor DLOCK_URL_FD).\n"
    "See dlock(1).\n";

static const char run_help[] =
    "usage: dlock [--url URL] [-v] run [-w SECS | -n] [-t TTL] [-s | --permits N]\n"
    "             [--fair | --no-fair] [-E CODE] [-q] [--kill-signal SIG]\n"
    "             [--kill-grace SECS] [--max-hold SECS] [--at-least SECS]\n"
    "             [--warn-signal SIG] [--warn-before SECS] [--json]\n"
    "             NAME -- CMD [ARGS...]\n"
    "\n"
    "Take lock NAME, run CMD in its own process group while holding it, release\n"
    "the lock when CMD exits and exit with CMD's status (if it died of signal N,\n"
    "dlock dies of N too: the shell's 128+N). CMD gets DLOCK_NAME, DLOCK_TOKEN and\n"
    "DLOCK_URL in its environment (and DLOCK_URL_FD, see dlock(1)); on etcd with\n"
    "layout=etcdctl also ETCD_LOCK_KEY and ETCD_LOCK_REV, as etcdctl lock gives.\n"
    "Signals INT TERM HUP QUIT USR1 USR2 WINCH CONT sent to dlock go to CMD's group;\n"
    "USR1 USR2 WINCH received while waiting for the lock are delivered once CMD\n"
    "has started (dropped if it never starts); INT TERM HUP QUIT end the wait.\n"
    "If the lock is lost, CMD's group gets --kill-signal, then SIGKILL after\n"
    "--kill-grace seconds, and dlock exits 75. A guardian process kills CMD's group\n"
    "if dlock dies, and ends it as on loss if the lease runs out while dlock cannot\n"
    "renew it (dlock stopped); dlock then exits 75 when it runs again.\n"
    "--max-hold SECS caps the holding: SECS after the acquisition the lock is\n"
    "released and CMD stopped as on loss (exit 75), the reason naming the cap.\n"
    "--at-least SECS keeps the lock taken until SECS after the acquisition when\n"
    "CMD ends sooner (a cron job run from many hosts whose clocks differ runs\n"
    "once): where the backend has a lease on the server (redis, redlock,\n"
    "memcached, postgres/mysql mode=lease) the lease is set to end then and\n"
    "dlock exits at once; elsewhere dlock keeps holding (renewing) until then.\n"
    "When renewals have failed so long that less than --warn-before is left\n"
    "before the loss, CMD's group gets --warn-signal (once per failing spell;\n"
    "never while renewals succeed), so it can checkpoint; session locks\n"
    "(postgres/mysql sessions, file) have no such warning.\n"
    "\n"
    "  -w, --wait SECS       wait at most SECS for the lock (default: forever)\n"
    "  -n, --nonblock        try once\n"
    "      --timeout SECS, --no-wait  the same as -w SECS, -n\n"
    "  -t, --ttl SECS        lease length for lease backends (default 30, min 0.03)\n"
    "  -s, --shared          shared (reader) lock\n"
    "      --permits N       semaphore with N permits (1-4096)\n"
    "      --fair, --no-fair FIFO order among waiters, or not\n"
    "  -E, --conflict-exit-code CODE  exit code when not acquired (default 1)\n"
    "  -q, --quiet           no message when not acquired\n"
    "      --kill-signal SIG signal on loss (name or number, default TERM)\n"
    "      --kill-grace SECS seconds before SIGKILL (default 5)\n"
    "      --max-hold SECS   release the lock SECS after taking it, renewed or not\n"
    "      --at-least SECS   keep it taken until SECS after taking it, even if CMD\n"
    "                        ends sooner\n"
    "      --warn-signal SIG signal when the lock may soon be lost (renewals failing)\n"
    "      --warn-before SECS  how long before the loss to warn (default ttl/3)\n"
    "  -v, --verbose         report waiting (holder and how long) and progress\n"
    "      --name NAME       the lock's name, for a NAME that starts with '-'\n"
    "      --json            write each event on stderr as one JSON object a line\n"
    "\n"
    "--json events (run, hold, elect), each with \"event\", \"ts_ms\" (ms since\n"
    "the epoch) and \"name\"; stdout stays CMD's (hold's: the token):\n"
    "  acquired  token, backend, url (no password), holder, waited_ms\n"
    "            (elect: \"elected\", and value)\n"
    "  warning   token, valid_ms (left before the loss), signal (--warn-signal, or\n"
    "            null): renewals have been failing; before its lost event\n"
    "  lost      token, message (the library's reason)\n"
    "  exit      token, status (or null), signal (or null): CMD ended (run, elect)\n"
    "  released  token (elect: \"resigned\", and value), held_until_ms (ms since\n"
    "            the epoch) when --at-least keeps the lock taken after dlock exits\n"
    "  error     code (EBUSY, ETIMEDOUT, another library error name, INTERRUPTED,\n"
    "            EXEC, INTERNAL), message, exit (the exit code that follows)\n"
    "Lines that do not start with '{' are dlock's messages or CMD's own stderr.\n"
    "\n"
    "exit status: CMD's status; 1 (or -E) not acquired; 64 usage; 69 backend\n"
    "unreachable; 70 internal failure; 75 lock lost; 126 not executable;\n"
    "127 not found; 128+N CMD (or dlock while waiting) killed by signal N.\n";

static const char once_help[] =
    "usage: dlock [--url URL] [-v] once [-w SECS | -n] [--retain SECS]\n"
    "             [--retry-failed] [--fingerprint STR] [-t TTL] [-E CODE] [-q]\n"
    "             [--kill-signal SIG] [--kill-grace SECS] [--max-hold SECS]\n"
    "             [--warn-signal SIG] [--warn-before SECS] [--json] KEY -- CMD [ARGS...]\n"
    "\n"
    "Run CMD once for KEY: the first caller takes the exclusive lock KEY (the\n"
    "same lock as 'dlock run KEY'), runs CMD as 'dlock run' does and records its\n"
    "outcome on the backend: exit status, when, by whom, and what CMD wrote to\n"
    "the file named by $DLOCK_RESULT (at most 65536 bytes; more is cut, and said).\n"
    "Every later caller within --retain does not run CMD: it prints the recorded\n"
    "result on stdout, says on stderr that it replayed, and exits with the\n"
    "recorded status. A concurrent caller waits for the first (-w) or exits 73\n"
    "at once (-n). CMD gets DLOCK_ONCE_ATTEMPT=N: a runner that died (or lost\n"
    "its lock) leaves the claim unfinished and the next caller runs CMD again\n"
    "as attempt N+1 -- at most once while the runner lives, at least once across\n"
    "crashes. 'dlock status KEY' shows the claim, 'dlock break --force KEY'\n"
    "forgets it. Backends: file, redis (one master, Sentinel, cluster); not\n"
    "memcached (it may evict a claim) nor redlock.\n"
    "\n"
    "  -w, --wait SECS       wait at most SECS for a running caller (default: forever)\n"
    "  -n, --nonblock        exit 73 at once when another caller runs it\n"
    "      --retain SECS     keep (and replay) the outcome SECS (default 86400)\n"
    "      --retry-failed    a recorded non-zero status runs again (next attempt)\n"
    "      --fingerprint STR what this request is: a caller with another one is\n"
    "                        refused (exit 64), naming both\n"
    "  -E, --conflict-exit-code CODE  exit code instead of 73\n"
    "  (-t, -q, -v, --kill-signal, --kill-grace, --max-hold, --warn-signal,\n"
    "  --warn-before, --name, --json: as for 'dlock run'; --json adds the event\n"
    "  \"replayed\" with attempt, status, finished_ms, by)\n"
    "\n"
    "exit status: CMD's (or the recorded) status; 73 (or -E) running elsewhere;\n"
    "64 usage or another fingerprint; 69 backend unreachable; 70 internal failure\n"
    "(a backend without claims); 75 lock lost (nothing recorded).\n";

static const char hold_help[] =
    "usage: dlock [--url URL] [-v] hold [-w SECS | -n] [-t TTL] [-s | --permits N]\n"
    "             [--fair | --no-fair] [-E CODE] [-q] [--max-hold SECS]\n"
    "             [--at-least SECS] [--warn-before SECS] [--json] NAME\n"
    "\n"
    "Take lock NAME, print its fencing token on a line of standard output, hold\n"
    "the lock until SIGINT, SIGTERM or SIGHUP, release it and exit 0. Exits 75 if\n"
    "the lock is lost, 1 (or -E CODE) if it is not acquired. A NAME that starts\n"
    "with '-' goes after \"--\" (hold [OPTIONS] -- NAME) or in --name NAME.\n"
    "--json: the events acquired, warning, lost, released, error on stderr (see\n"
    "'dlock help run'). --max-hold SECS: the lock is given up after SECS (exit 75).\n"
    "--at-least SECS: the lock stays taken until SECS after taking it, even if\n"
    "hold is stopped sooner (see 'dlock help run').\n";

static const char elect_help[] =
    "usage: dlock [--url URL] [-v] elect [-w SECS | -n] [-t TTL] [--value TEXT]\n"
    "             [-E CODE] [-q] [--kill-signal SIG] [--kill-grace SECS]\n"
    "             [--max-hold SECS] [--warn-signal SIG] [--warn-before SECS]\n"
    "             [--json] NAME -- CMD [ARGS...]\n"
    "\n"
    "Campaign for leadership of NAME, publishing TEXT (default \"pid N on HOST\"),\n"
    "run CMD while leader exactly as 'dlock run' does, then resign. Losing\n"
    "leadership kills CMD's process group and exits 75. --json: the events\n"
    "elected (with value), lost, exit, resigned, error on stderr (see 'dlock\n"
    "help run').\n";

static const char status_help[] =
    "usage: dlock [--url URL] status NAME [--json]\n"
    "\n"
    "Show what is known about lock NAME without taking it: held or not, holders,\n"
    "waiters, last fencing token, how long it has been held, remaining lease and\n"
    "who holds it. --json prints one JSON object with the keys name, held,\n"
    "holders, waiters, token, held_ms, lease_ms, holder (null when unknown).\n";

static const char break_help[] =
    "usage: dlock [--url URL] break NAME --force [--json]\n"
    "\n"
    "An operator's forced release: every holder of NAME loses it now (each is\n"
    "told when its next lease renewal fails, and 'dlock run' then stops its\n"
    "command) and the next waiter gets it with a higher fencing token, which a\n"
    "resource that checks tokens uses to refuse the old holder's writes. Each\n"
    "break is logged to syslog (user.notice) and to standard error. Not for\n"
    "the file backend, whose kernel locks go only with their holder's process:\n"
    "there it names the holder to stop.\n"
    "\n"
    "exit status: 0 broken; 1 nothing was held; 64 usage (no --force); 69\n"
    "backend unreachable; 70 the backend cannot break locks.\n";

static const char leader_help[] =
    "usage: dlock [--url URL] leader NAME [--watch] [--json]\n"
    "\n"
    "Print the value that the leader of election NAME published (by 'dlock\n"
    "elect --value TEXT', else \"pid N on HOST\"); exit 1, saying so on standard\n"
    "error, when NAME has no leader. Bytes outside printable ASCII are written\n"
    "as \\xNN; --json prints the value exactly: {\"name\": NAME, \"leader\":\n"
    "VALUE or null, \"token\": the leader's fencing token or null}. --watch prints\n"
    "a line now and one on every change of leader (an empty line, or null, when\n"
    "there is none; a new leader is a line even if it publishes the same value:\n"
    "its token or holder tells, where the backend says them; polled every 0.2 s)\n"
    "until SIGINT, SIGTERM, SIGHUP or SIGQUIT, then exits 0.\n"
    "\n"
    "exit status: 0 a leader (or --watch ended by a signal); 1 no leader; 64\n"
    "usage; 69 backend unreachable; 70 other failure.\n";

static const char completion_help[] =
    "usage: dlock completion bash\n"
    "\n"
    "Print a bash completion script for dlock, made from the command's own\n"
    "tables (commands, and the options each one's help shows). Installed as\n"
    "share/bash-completion/completions/dlock; to try it: source <(dlock completion bash)\n";

static const char list_help[] =
    "usage: dlock [--url URL] list [PREFIX] [--json]\n"
    "\n"
    "Print the names of the backend's locks (starting with PREFIX), one a line,\n"
    "sorted, or as a JSON array.\n";

static const char backends_help[] =
    "usage: dlock backends [--json]\n"
    "\n"
    "Print every backend known to this build, available or not: URL schemes,\n"
    "capabilities (fencing, weak fencing, fair, shared, semaphore, session,\n"
    "lease, native blocking, election), how a dead holder loses the lock, and\n"
    "what the fencing tokens promise.\n";

/* --json / --help handling shared by the inspection commands. */
enum { OPT_JSON = 1, OPT_HELP, OPT_URL, OPT_URL_FILE, OPT_VERBOSE, OPT_FORCE, OPT_WATCH };

static const cli_opt inspect_opts[] = {
    {"json", 0, 0, OPT_JSON},
    {"force", 0, 0, OPT_FORCE},
    {"watch", 0, 0, OPT_WATCH},
    {"help", 'h', 0, OPT_HELP},
    {"url", 0, 1, OPT_URL},
    {"url-file", 0, 1, OPT_URL_FILE},
    {"verbose", 'v', 0, OPT_VERBOSE},
    {NULL, 0, 0, 0},
};

/* Parse "[POSITIONAL] [--json]" (and --force, --watch where force, watch
 * are not NULL); *pos gets the positional (at most one). Returns -1 to go
 * on, else an exit code. */
static int parse_inspect_w(int argc, char **argv, cli_global *g, const char **pos, int *json,
                           int *force, int *watch)
{
    cli_parser p;
    cli_parser_init(&p, argc, argv, argv[0]);
    *json = 0;
    if (force)
        *force = 0;
    if (watch)
        *watch = 0;
    *pos = NULL;
    for (;;) {
        int id = cli_next_opt(&p, inspect_opts);
        switch (id) {
        case CLI_OPT_END:
            return -1;
        case CLI_OPT_ERROR:
            return CLI_EXIT_USAGE;
        case CLI_OPT_DASHDASH:
            /* everything after "--" is positional (names may start with '-') */
            while (p.idx < argc) {
                if (*pos)
                    return cli_usage(argv[0], "unexpected argument \"%s\"", argv[p.idx]);
                *pos = argv[p.idx++];
            }
            return -1;
        case CLI_OPT_POS:
            if (*pos) {
                char shown[CLI_SHOW_MAX];
                return cli_usage(argv[0], "unexpected argument %s",
                                 cli_show(p.val, shown, sizeof shown));
            }
            *pos = p.val;
            break;
        case OPT_JSON:
            *json = 1;
            break;
        case OPT_FORCE:
            if (!force)
                return cli_usage(argv[0], "unknown option --force");
            *force = 1;
            break;
        case OPT_WATCH:
            if (!watch)
                return cli_usage(argv[0], "unknown option --watch");
            *watch = 1;
            break;
        case OPT_HELP:
            fputs(g->help, stdout); /* this command's row in the table */
            return 0;
        case OPT_URL:
            if (!(g->url = cli_url_arg(argv[0], p.val)))
                return CLI_EXIT_USAGE;
            break;
        case OPT_URL_FILE:
            if (!(g->url = cli_url_file(argv[0], p.val)))
                return CLI_EXIT_USAGE;
            break;
        case OPT_VERBOSE:
            g->verbose = 1;
            break;
        }
    }
}

static int parse_inspect(int argc, char **argv, cli_global *g, const char **pos, int *json,
                         int *force)
{
    return parse_inspect_w(argc, argv, g, pos, json, force, NULL);
}

static void print_ms(FILE *f, long long ms)
{
    if (ms < 0)
        fputs("unknown", f);
    else if (ms < 1000)
        fprintf(f, "%lld ms", ms);
    else
        fprintf(f, "%.1f s", (double)ms / 1000.0);
}

static void json_int(FILE *f, const char *key, long long v, int known, int comma)
{
    fprintf(f, "\"%s\":", key);
    if (known)
        fprintf(f, "%lld", v);
    else
        fputs("null", f);
    if (comma)
        fputc(',', f);
}

static int finish_stdout(const char *cmd)
{
    if (fflush(stdout) != 0 || ferror(stdout)) {
        cli_err("%s: cannot write output: %s", cmd, strerror(errno));
        return CLI_EXIT_SOFTWARE;
    }
    return 0;
}

/* A claim of `dlock once` under the same name (where the backend keeps
 * claims): *out, NULL when there is none; 0, or the library's code (said). */
static int read_claim(const char *cmd, dlock_client *c, const char *name, dlock_claim **out)
{
    *out = NULL;
    if (!(dlock_client_caps(c) & DLOCK_CAP_CLAIMS))
        return 0;
    int rc = dlock_claim_inspect(c, name, out);
    if (rc == DLOCK_ENOENT)
        return 0;
    if (rc) {
        char shown[CLI_SHOW_MAX];
        const char *why = dlock_client_errmsg(c);
        cli_err("%s: cannot read the claim %s: %s", cmd, cli_show(name, shown, sizeof shown),
                why && *why ? why : dlock_strerror(rc));
    }
    return rc;
}

static const char *claim_state_word(const dlock_claim *cl)
{
    switch (dlock_claim_state(cl)) {
    case DLOCK_CLAIM_DONE:
        return "done";
    case DLOCK_CLAIM_ABANDONED:
        return "abandoned";
    default:
        return "running";
    }
}

/* "done, attempt 1, exit 0, by pid 1 on h, finished 2026-...Z, result 5 bytes" */
static void claim_line(const dlock_claim *cl, char *buf, size_t len)
{
    char who[CLI_SHOW_MAX], when[40] = "";
    long long ms = dlock_claim_finished_ms(cl);
    if (!ms)
        ms = dlock_claim_started_ms(cl);
    time_t t = (time_t)(ms / 1000);
    struct tm tm;
    if (ms <= 0 || !gmtime_r(&t, &tm) || !strftime(when, sizeof when, "%Y-%m-%dT%H:%M:%SZ", &tm))
        snprintf(when, sizeof when, "unknown");
    size_t rlen;
    (void)dlock_claim_result(cl, &rlen);
    int n = snprintf(buf, len, "%s, attempt %u", claim_state_word(cl), dlock_claim_attempt(cl));
    if (n < 0 || (size_t)n >= len)
        return;
    if (dlock_claim_state(cl) == DLOCK_CLAIM_DONE)
        n += snprintf(buf + n, len - (size_t)n, ", exit %d", dlock_claim_status(cl));
    if (n < 0 || (size_t)n >= len)
        return;
    snprintf(buf + n, len - (size_t)n, ", by %s, %s %s, result %zu bytes",
             cli_clean(dlock_claim_by(cl), who, sizeof who),
             dlock_claim_finished_ms(cl) ? "finished" : "started", when, rlen);
}

static void claim_json(FILE *f, const dlock_claim *cl)
{
    if (!cl) {
        fputs("null", f);
        return;
    }
    size_t rlen;
    const char *res = dlock_claim_result(cl, &rlen);
    fputs("{\"state\":", f);
    cli_json_str(f, claim_state_word(cl));
    fprintf(f, ",\"attempt\":%u,", dlock_claim_attempt(cl));
    json_int(f, "status", dlock_claim_status(cl), dlock_claim_state(cl) == DLOCK_CLAIM_DONE, 1);
    json_int(f, "started_ms", dlock_claim_started_ms(cl), dlock_claim_started_ms(cl) > 0, 1);
    json_int(f, "finished_ms", dlock_claim_finished_ms(cl), dlock_claim_finished_ms(cl) > 0, 1);
    fputs("\"by\":", f);
    cli_json_str(f, dlock_claim_by(cl));
    fputs(",\"fingerprint\":", f);
    if (*dlock_claim_fingerprint(cl))
        cli_json_str(f, dlock_claim_fingerprint(cl));
    else
        fputs("null", f);
    /* The result as text when it is one, else only its length. */
    fprintf(f, ",\"result_bytes\":%zu,\"result\":", rlen);
    if (strlen(res) == rlen)
        cli_json_str(f, res);
    else
        fputs("null", f);
    fputc('}', f);
}

static int cmd_status(int argc, char **argv, cli_global *g)
{
    const char *name;
    int json;
    int rc = parse_inspect(argc, argv, g, &name, &json, NULL);
    if (rc >= 0)
        return rc;
    if (!name)
        return cli_usage("status", "missing lock NAME");
    if ((rc = cli_check_name("status", g->url, name)) != 0)
        return rc;
    dlock_client *c;
    if ((rc = cli_open("status", g->url, &c)) != 0)
        return rc;
    dlock_info info;
    memset(&info, 0, sizeof info);
    rc = dlock_inspect(c, name, &info);
    if (rc == DLOCK_ENOENT) {
        /* A name nobody has used yet is simply free. */
        memset(&info, 0, sizeof info);
        info.held_ms = info.lease_ms = -1;
        rc = 0;
    }
    if (rc) {
        char shown[CLI_SHOW_MAX];
        const char *why = dlock_client_errmsg(c);
        cli_err("status: cannot inspect lock %s: %s", cli_show(name, shown, sizeof shown),
                why && *why ? why : dlock_strerror(rc));
        dlock_client_close(c);
        return cli_exit_for(rc);
    }
    info.holder[sizeof info.holder - 1] = '\0';
    dlock_claim *claim;
    if ((rc = read_claim("status", c, name, &claim)) != 0) {
        dlock_client_close(c);
        return cli_exit_for(rc);
    }
    if (json) {
        fputs("{\"name\":", stdout);
        cli_json_str(stdout, name);
        fprintf(stdout, ",\"held\":%s,",
                info.held < 0 ? "null" : info.held ? "true" : "false");
        json_int(stdout, "holders", info.holders, info.holders >= 0, 1);
        json_int(stdout, "waiters", info.waiters, info.waiters >= 0, 1);
        json_int(stdout, "token", (long long)info.token, info.token != 0, 1);
        json_int(stdout, "held_ms", info.held_ms, info.held_ms >= 0, 1);
        json_int(stdout, "lease_ms", info.lease_ms, info.lease_ms >= 0, 1);
        fputs("\"holder\":", stdout);
        if (info.holder[0])
            cli_json_str(stdout, info.holder);
        else
            fputs("null", stdout);
        if (dlock_client_caps(c) & DLOCK_CAP_CLAIMS) { /* dlock once's record */
            fputs(",\"claim\":", stdout);
            claim_json(stdout, claim);
        }
        fputs("}\n", stdout);
    } else {
        printf("name:     %s\n", name);
        printf("backend:  %s (%s)\n", dlock_client_backend(c), dlock_client_url(c));
        printf("held:     %s", info.held < 0 ? "unknown" : info.held ? "yes" : "no");
        if (info.held > 0 && info.holders > 1)
            printf(" (%d holders)", info.holders);
        putchar('\n');
        if (info.held > 0) {
            printf("holder:   %s\n", info.holder[0] ? info.holder : "unknown");
            fputs("held for: ", stdout);
            print_ms(stdout, info.held_ms);
            putchar('\n');
            fputs("lease:    ", stdout);
            if (info.lease_ms < 0)
                fputs("none or unknown", stdout);
            else
                print_ms(stdout, info.lease_ms);
            puts(info.lease_ms >= 0 ? " left" : "");
        }
        if (info.waiters >= 0)
            printf("waiters:  %d\n", info.waiters);
        else
            puts("waiters:  unknown");
        if (info.token)
            printf("token:    %llu (last issued)\n", (unsigned long long)info.token);
        else
            puts("token:    unknown");
        if (dlock_client_caps(c) & DLOCK_CAP_CLAIMS) {
            char line[600];
            if (claim)
                claim_line(claim, line, sizeof line);
            printf("claim:    %s\n", claim ? line : "none");
        }
    }
    dlock_claim_free(claim);
    dlock_client_close(c);
    return finish_stdout("status");
}

static int cmd_break(int argc, char **argv, cli_global *g)
{
    const char *name;
    int json, force;
    int rc = parse_inspect(argc, argv, g, &name, &json, &force);
    if (rc >= 0)
        return rc;
    if (!name)
        return cli_usage("break", "missing lock NAME");
    if (!force)
        return cli_usage("break", "break takes the lock from its holders: add --force");
    if ((rc = cli_check_name("break", g->url, name)) != 0)
        return rc;
    dlock_client *c;
    if ((rc = cli_open("break", g->url, &c)) != 0)
        return rc;
    char shown[CLI_SHOW_MAX];
    cli_show(name, shown, sizeof shown);
    dlock_info info;
    rc = dlock_break(c, name, &info);
    /* dlock once's claim of the name goes too, once nobody holds the lock
     * (a runner still holding it would record its outcome over nothing). */
    dlock_claim *claim = NULL;
    if (rc == 0 || rc == DLOCK_ENOTHELD) {
        int crc = read_claim("break", c, name, &claim);
        if (crc == 0 && claim && (crc = dlock_claim_forget(c, name)) == DLOCK_ENOENT)
            crc = 0; /* gone meanwhile (expired) */
        if (crc) {
            const char *why = dlock_client_errmsg(c);
            cli_err("break: cannot forget the claim %s: %s", shown,
                    why && *why ? why : dlock_strerror(crc));
            dlock_claim_free(claim);
            dlock_client_close(c);
            return cli_exit_for(crc);
        }
        if (claim) {
            char line[600];
            claim_line(claim, line, sizeof line);
            openlog("dlock", LOG_PID, LOG_USER);
            syslog(LOG_NOTICE, "uid %ld forgot claim %s on %s: %s", (long)getuid(), shown,
                   dlock_client_url(c), line);
            closelog();
            cli_err("break: forgot claim %s (%s): the next 'dlock once' runs it", shown, line);
        }
    }
    if (rc == DLOCK_ENOTHELD) {
        if (!claim)
            cli_err("break: lock %s is not held: nothing to break", shown);
        if (json) {
            fputs("{\"name\":", stdout);
            cli_json_str(stdout, name);
            fprintf(stdout, ",\"broken\":false,\"holders\":0,\"token\":null,\"holder\":null%s}\n",
                    claim ? ",\"claim_forgotten\":true" : "");
        }
        dlock_client_close(c);
        rc = finish_stdout("break");
        int forgot = claim != NULL;
        dlock_claim_free(claim);
        return rc ? rc : forgot ? 0 : CLI_EXIT_NOT_ACQUIRED;
    }
    int forgot = claim != NULL;
    dlock_claim_free(claim);
    if (rc) {
        const char *why = dlock_client_errmsg(c);
        cli_err("break: %s", why && *why ? why : dlock_strerror(rc));
        dlock_client_close(c);
        return cli_exit_for(rc);
    }
    info.holder[sizeof info.holder - 1] = '\0';
    char holder[CLI_SHOW_MAX];
    cli_show(info.holder[0] ? info.holder : "an unknown holder", holder, sizeof holder);
    /* Who broke what, where an administrator looks for it. */
    openlog("dlock", LOG_PID, LOG_USER);
    syslog(LOG_NOTICE, "uid %ld broke lock %s on %s: held by %s, %d holder(s), last token %llu",
           (long)getuid(), shown, dlock_client_url(c), holder, info.holders,
           (unsigned long long)info.token);
    closelog();
    cli_err("break: broke lock %s: held by %s (%d holder%s, last token %llu); the next holder "
            "gets a higher token",
            shown, holder, info.holders, info.holders == 1 ? "" : "s",
            (unsigned long long)info.token);
    if (json) {
        fputs("{\"name\":", stdout);
        cli_json_str(stdout, name);
        fprintf(stdout, ",\"broken\":true,\"holders\":%d,\"token\":%llu,\"holder\":",
                info.holders, (unsigned long long)info.token);
        if (info.holder[0])
            cli_json_str(stdout, info.holder);
        else
            fputs("null", stdout);
        fputs(forgot ? ",\"claim_forgotten\":true}\n" : "}\n", stdout);
    }
    dlock_client_close(c);
    return finish_stdout("break");
}

/* Who leads, besides the value: the election lock's fencing token and
 * holder (dlock_inspect), so that a new leader that publishes the same
 * value is still a change. token 0 and holder "" where the backend cannot
 * say (then only the value tells leaders apart). */
typedef struct leader_id {
    unsigned long long token;
    char holder[DLOCK_HOLDER_MAX];
} leader_id;

static void read_leader_id(dlock_client *c, const char *name, leader_id *id)
{
    dlock_info info;
    memset(id, 0, sizeof *id);
    if (dlock_inspect(c, name, &info) != 0 || info.held <= 0)
        return; /* unknown: the value alone is compared */
    id->token = info.token;
    info.holder[sizeof info.holder - 1] = '\0';
    snprintf(id->holder, sizeof id->holder, "%s", info.holder);
}

/* One leader line: the value (an empty line when there is none), or the
 * JSON object {"name":..., "leader": value or null, "token": the leader's
 * fencing token or null}. */
static void print_leader(const char *name, const char *value, const leader_id *id, int json)
{
    if (json) {
        fputs("{\"name\":", stdout);
        cli_json_str(stdout, name);
        fputs(",\"leader\":", stdout);
        if (value)
            cli_json_str(stdout, value);
        else
            fputs("null", stdout);
        fputc(',', stdout);
        json_int(stdout, "token", (long long)id->token, value && id->token != 0, 0);
        fputs("}\n", stdout);
    } else {
        char clean[4 * DLOCK_VALUE_MAX + 16]; /* every byte may become \xNN */
        puts(value ? cli_clean(value, clean, sizeof clean) : "");
    }
}

/* The leader's value of name into buf: 0, DLOCK_ENOENT (none), or a
 * failure already reported (its exit code's library code). */
static int read_leader(dlock_client *c, const char *name, char *buf, size_t len)
{
    int rc = dlock_leader(c, name, buf, len);
    if (rc && rc != DLOCK_ENOENT) {
        char shown[CLI_SHOW_MAX];
        const char *why = dlock_client_errmsg(c);
        cli_err("leader: cannot read the leader of %s: %s", cli_show(name, shown, sizeof shown),
                why && *why ? why : dlock_strerror(rc));
    }
    return rc;
}

/* The leader's value (read_leader's answer) and who it is, from one
 * leader: the identity is read before and after the value, again while
 * they differ (a leader changed in between), so that a line never pairs
 * one leader's value with another's token. */
static int read_leader_state(dlock_client *c, const char *name, char *buf, size_t len,
                             leader_id *id)
{
    leader_id before;
    int rc = 0;
    for (int tries = 0; tries < 3; tries++) {
        read_leader_id(c, name, &before);
        rc = read_leader(c, name, buf, len);
        read_leader_id(c, name, id);
        if (rc || (before.token == id->token && strcmp(before.holder, id->holder) == 0))
            break;
    }
    return rc;
}

/* Poll period of leader --watch: a change shows within this long. */
#define LEADER_WATCH_MS 200

static int cmd_leader(int argc, char **argv, cli_global *g)
{
    const char *name;
    int json, watch;
    int rc = parse_inspect_w(argc, argv, g, &name, &json, NULL, &watch);
    if (rc >= 0)
        return rc;
    if (!name)
        return cli_usage("leader", "missing election NAME");
    if ((rc = cli_check_name("leader", g->url, name)) != 0)
        return rc;
    /* --watch ends on INT, TERM, HUP or QUIT: the handlers go in before the
     * client's threads exist, so that the signals come to us (signals.c). */
    if (watch && cli_sig_setup() < 0) {
        cli_err("leader: cannot set up signal handling: %s", strerror(errno));
        cli_sig_teardown();
        return CLI_EXIT_SOFTWARE;
    }
    dlock_client *c;
    if ((rc = cli_open("leader", g->url, &c)) != 0) {
        if (watch)
            cli_sig_teardown();
        return rc;
    }
    char value[DLOCK_VALUE_MAX + 1], last[DLOCK_VALUE_MAX + 1];
    leader_id id, last_id;
    memset(&last_id, 0, sizeof last_id);
    rc = read_leader_state(c, name, value, sizeof value, &id);
    if (!watch) {
        if (rc == 0 || rc == DLOCK_ENOENT) {
            if (rc == DLOCK_ENOENT && !json) {
                char shown[CLI_SHOW_MAX];
                cli_err("leader: %s has no leader", cli_show(name, shown, sizeof shown));
            } else {
                print_leader(name, rc ? NULL : value, &id, json);
            }
            int out = finish_stdout("leader");
            rc = out ? out : rc ? CLI_EXIT_NOT_ACQUIRED : 0;
        } else {
            rc = cli_exit_for(rc);
        }
        dlock_client_close(c);
        return rc;
    }
    /* Watch: a line now, then one on every change, until a signal ends it. */
    int had = -1; /* -1 nothing printed yet, 0 no leader, 1 a leader (last) */
    int exit_code = 0;
    for (;;) {
        if (rc && rc != DLOCK_ENOENT) {
            exit_code = cli_exit_for(rc);
            break;
        }
        int has = rc == 0;
        /* Another leader is a line even with the same value: its token or
         * holder differs (where the backend tells them). */
        if (has != had ||
            (has && (strcmp(value, last) != 0 || id.token != last_id.token ||
                     strcmp(id.holder, last_id.holder) != 0))) {
            print_leader(name, has ? value : NULL, &id, json);
            if ((exit_code = finish_stdout("leader")) != 0)
                break;
            had = has;
            if (has) {
                memcpy(last, value, sizeof last);
                last_id = id;
            }
        }
        struct pollfd pfd = {.fd = cli_sig_fd(), .events = POLLIN};
        struct timespec ts = {0, LEADER_WATCH_MS * 1000000L};
        int stop = 0;
        if (ppoll(&pfd, 1, &ts, cli_sig_pollmask()) > 0) {
            int sig;
            while ((sig = cli_sig_next()) != 0)
                if (cli_sig_terminates(sig))
                    stop = 1;
        }
        if (stop)
            break;
        rc = read_leader_state(c, name, value, sizeof value, &id);
    }
    dlock_client_close(c);
    cli_sig_teardown();
    return exit_code;
}

typedef struct name_list {
    char **v;
    size_t n, cap;
    int oom;
} name_list;

static int collect_name(const char *name, void *arg)
{
    name_list *l = arg;
    if (l->n == l->cap) {
        size_t cap = l->cap ? l->cap * 2 : 64;
        char **v = realloc(l->v, cap * sizeof *v);
        if (!v) {
            l->oom = 1;
            return 1;
        }
        l->v = v;
        l->cap = cap;
    }
    if (!(l->v[l->n] = strdup(name))) {
        l->oom = 1;
        return 1;
    }
    l->n++;
    return 0;
}

static int by_str(const void *a, const void *b)
{
    return strcmp(*(char *const *)a, *(char *const *)b);
}

static int cmd_list(int argc, char **argv, cli_global *g)
{
    const char *prefix;
    int json;
    int rc = parse_inspect(argc, argv, g, &prefix, &json, NULL);
    if (rc >= 0)
        return rc;
    dlock_client *c;
    if ((rc = cli_open("list", g->url, &c)) != 0)
        return rc;
    name_list l = {0};
    rc = dlock_list(c, prefix && *prefix ? prefix : NULL, collect_name, &l);
    if (rc || l.oom) {
        const char *why = l.oom ? "out of memory" : dlock_client_errmsg(c);
        cli_err("list: cannot list locks: %s", why && *why ? why : dlock_strerror(rc));
        rc = l.oom ? CLI_EXIT_SOFTWARE : cli_exit_for(rc);
    } else {
        /* Backends walk in their own order; sorted output diffs well. */
        if (l.n)
            qsort(l.v, l.n, sizeof *l.v, by_str);
        if (json)
            putchar('[');
        for (size_t i = 0; i < l.n; i++) {
            if (json) {
                if (i)
                    putchar(',');
                cli_json_str(stdout, l.v[i]);
            } else {
                puts(l.v[i]);
            }
        }
        if (json)
            puts("]");
        rc = finish_stdout("list");
    }
    for (size_t i = 0; i < l.n; i++)
        free(l.v[i]);
    free(l.v);
    dlock_client_close(c);
    return rc;
}

static const struct {
    unsigned cap;
    const char *name;
} cap_names[] = {
    {DLOCK_CAP_FENCING, "fencing"},
    {DLOCK_CAP_FENCING_WEAK, "weak fencing"},
    {DLOCK_CAP_FAIR, "fair"},
    {DLOCK_CAP_SHARED, "shared"},
    {DLOCK_CAP_SEMAPHORE, "semaphore"},
    {DLOCK_CAP_SESSION, "session"},
    {DLOCK_CAP_LEASE, "lease"},
    {DLOCK_CAP_NATIVE_BLOCKING, "native blocking"},
    {DLOCK_CAP_ELECTION, "election"},
    {DLOCK_CAP_CLAIMS, "claims"},
};

static void json_words(FILE *f, const char *s)
{
    /* "redis redis+sentinel" -> ["redis","redis+sentinel"] */
    fputc('[', f);
    int first = 1;
    while (s && *s) {
        while (*s == ' ')
            s++;
        size_t n = strcspn(s, " ");
        if (!n)
            break;
        char word[128];
        snprintf(word, sizeof word, "%.*s", (int)(n < sizeof word - 1 ? n : sizeof word - 1), s);
        if (!first)
            fputc(',', f);
        cli_json_str(f, word);
        first = 0;
        s += n;
    }
    fputc(']', f);
}

static int cmd_backends(int argc, char **argv, cli_global *g)
{
    const char *extra;
    int json;
    int rc = parse_inspect(argc, argv, g, &extra, &json, NULL);
    if (rc >= 0)
        return rc;
    if (extra) {
        char shown[CLI_SHOW_MAX];
        return cli_usage("backends", "unexpected argument %s",
                         cli_show(extra, shown, sizeof shown));
    }
    size_t n = dlock_backend_count();
    int wname = 7, wschemes = 7; /* widths of "BACKEND" and "SCHEMES" */
    for (size_t i = 0; i < n; i++) {
        const dlock_backend_info *b = dlock_backend_at(i);
        if (b && b->name && (int)strlen(b->name) > wname)
            wname = (int)strlen(b->name);
        if (b && b->schemes && (int)strlen(b->schemes) > wschemes)
            wschemes = (int)strlen(b->schemes);
    }
    if (json)
        putchar('[');
    else
        printf("%-*s  %-*s  %s\n", wname, "BACKEND", wschemes, "SCHEMES", "AVAILABLE");
    for (size_t i = 0; i < n; i++) {
        const dlock_backend_info *b = dlock_backend_at(i);
        if (!b)
            break;
        if (json) {
            fputs(i ? ",{" : "{", stdout);
            fputs("\"name\":", stdout);
            cli_json_str(stdout, b->name);
            fputs(",\"schemes\":", stdout);
            json_words(stdout, b->schemes);
            fprintf(stdout, ",\"available\":%s,\"missing\":", b->available ? "true" : "false");
            if (!b->available && b->missing)
                cli_json_str(stdout, b->missing);
            else
                fputs("null", stdout);
            fputs(",\"capabilities\":[", stdout);
            int first = 1;
            for (size_t k = 0; k < sizeof cap_names / sizeof cap_names[0]; k++)
                if (b->caps & cap_names[k].cap) {
                    fputs(first ? "" : ",", stdout);
                    cli_json_str(stdout, cap_names[k].name);
                    first = 0;
                }
            fputs("],\"liveness\":", stdout);
            cli_json_str(stdout, b->liveness);
            fputs(",\"fencing\":", stdout);
            cli_json_str(stdout, b->fencing);
            fputc('}', stdout);
            continue;
        }
        printf("%-*s  %-*s  ", wname, b->name ? b->name : "?", wschemes,
               b->schemes ? b->schemes : "");
        if (b->available)
            puts("yes");
        else
            printf("no: %s\n", b->missing ? b->missing : "not built");
        printf("%*s  capabilities: ", wname, "");
        int first = 1;
        for (size_t k = 0; k < sizeof cap_names / sizeof cap_names[0]; k++)
            if (b->caps & cap_names[k].cap) {
                printf("%s%s", first ? "" : ", ", cap_names[k].name);
                first = 0;
            }
        puts(first ? "none" : "");
        printf("%*s  liveness:     %s\n", wname, "", b->liveness ? b->liveness : "unknown");
        printf("%*s  fencing:      %s\n", wname, "", b->fencing ? b->fencing : "unknown");
    }
    if (json)
        puts("]");
    return finish_stdout("backends");
}

static int cmd_version(int argc, char **argv, cli_global *g)
{
    (void)argc, (void)argv, (void)g; /* any arguments are ignored, as always */
    printf("dlock %s (libdlock %s)\n", DLOCK_VERSION_STRING, dlock_version());
    /* What this build can reach, and why not the rest (dlock backends
     * says more of each). */
    fputs("backends:", stdout);
    size_t n = dlock_backend_count();
    for (size_t i = 0; i < n; i++) {
        const dlock_backend_info *b = dlock_backend_at(i);
        if (b && b->available)
            printf(" %s", b->name);
    }
    putchar('\n');
    for (size_t i = 0; i < n; i++) {
        const dlock_backend_info *b = dlock_backend_at(i);
        if (b && !b->available)
            printf("not built: %s: %s\n", b->name, b->missing ? b->missing : "not built");
    }
    return finish_stdout("version");
}

/* Subcommands in other files, adapted to the table's handler type. */
static int cmd_run(int argc, char **argv, cli_global *g)
{
    return cli_run(argc, argv, g);
}

static int cmd_bench(int argc, char **argv, cli_global *g)
{
    return cli_bench(argc, argv, g->url);
}

static int cmd_check(int argc, char **argv, cli_global *g)
{
    return cli_check(argc, argv, g->url);
}

static int help_usage(void);
static int cmd_help(int argc, char **argv, cli_global *g);
static int cmd_completion(int argc, char **argv, cli_global *g);

/* ---- the command table -------------------------------------------------- */

/* Every subcommand, once: the list in `dlock --help`, `dlock help NAME`,
 * `dlock NAME --help` (the text reaches the handler as g->help) and the
 * dispatch in main() are all read from here. */
typedef struct command {
    const char *name;
    const char *synopsis; /* left column of the usage list; NULL: not listed */
    const char *summary;  /* right column */
    int block;            /* listed rows of one block share the summary column */
    const char *help;     /* help text; NULL: print_help prints it */
    /* Commands with neither (version) have no help: `dlock help version` is
     * refused as before. */
    int (*print_help)(void);
    int (*handler)(int argc, char **argv, cli_global *g); /* argv[0] is name */
} command;

static const command commands[] = {
    {"run", "run [OPTIONS] NAME -- CMD [ARGS...]",
     "take lock NAME, run CMD while holding it, release it", 1, run_help, NULL, cmd_run},
    {"once", "once [OPTIONS] KEY -- CMD [ARGS...]",
     "run CMD once for KEY; duplicates replay its outcome", 1, once_help, NULL, cmd_run},
    {"hold", "hold [OPTIONS] NAME",
     "print the fencing token, hold NAME until SIGINT/SIGTERM", 1, hold_help, NULL, cmd_run},
    {"elect", "elect [OPTIONS] NAME -- CMD [ARGS...]",
     "become leader of NAME, run CMD while leader", 1, elect_help, NULL, cmd_run},
    {"status", "status NAME [--json]", "who holds NAME, token, lease, waiters", 2, status_help,
     NULL, cmd_status},
    {"leader", "leader NAME [--watch]", "the value the leader of NAME published", 2,
     leader_help, NULL, cmd_leader},
    {"list", "list [PREFIX] [--json]", "names of known locks", 2, list_help, NULL, cmd_list},
    {"break", "break NAME --force", "take NAME from its holders (logged to syslog)", 2,
     break_help, NULL, cmd_break},
    {"backends", "backends [--json]", "capabilities and guarantees of every backend", 2,
     backends_help, NULL, cmd_backends},
    {"bench", "bench [OPTIONS]", "measure the cost of locking (see 'dlock help bench')", 2,
     cli_bench_help, NULL, cmd_bench},
    {"check", "check [OPTIONS]", "measure what the lock guarantees (see 'dlock help check')", 2,
     cli_check_help, NULL, cmd_check},
    {"help", "help [COMMAND]", "this text, or the options of COMMAND", 2, NULL, help_usage,
     cmd_help},
    {"completion", "completion bash", "print the bash completion script", 2, completion_help,
     NULL, cmd_completion},
    {"version", NULL, NULL, 0, NULL, NULL, cmd_version},
};
#define NCOMMANDS (sizeof commands / sizeof commands[0])

static const command *find_command(const char *name)
{
    for (size_t i = 0; i < NCOMMANDS; i++)
        if (strcmp(name, commands[i].name) == 0)
            return &commands[i];
    return NULL;
}

/* A synopsis longer than this puts its summary on the next line, so that
 * one long entry does not push its whole block's column to the right. */
#define SYNOPSIS_WRAP 24

/* Where the summaries of block start: one space after the longest synopsis
 * that shares their line. */
static int summary_column(int block)
{
    int col = 0;
    for (size_t i = 0; i < NCOMMANDS; i++) {
        const command *c = &commands[i];
        int len = c->synopsis ? (int)strlen(c->synopsis) : 0;
        if (c->synopsis && c->block == block && len <= SYNOPSIS_WRAP && 2 + len + 1 > col)
            col = 2 + len + 1;
    }
    return col;
}

static void print_usage(FILE *out)
{
    fputs(usage_head, out);
    for (size_t i = 0; i < NCOMMANDS; i++) {
        const command *c = &commands[i];
        if (!c->synopsis)
            continue;
        int col = summary_column(c->block);
        if ((int)strlen(c->synopsis) <= SYNOPSIS_WRAP)
            fprintf(out, "  %-*s%s\n", col - 2, c->synopsis, c->summary);
        else
            fprintf(out, "  %s\n%*s%s\n", c->synopsis, col, "", c->summary);
    }
    fputs(usage_tail, out);
}

static int help_usage(void)
{
    print_usage(stdout);
    return 0;
}

/* The help of command name (NULL: the usage); 0, or 64 if there is none. */
static int show_help(const char *name)
{
    if (!name)
        return help_usage();
    const command *c = find_command(name);
    if (c && c->help) {
        fputs(c->help, stdout);
        return 0;
    }
    if (c && c->print_help)
        return c->print_help();
    char shown[CLI_SHOW_MAX];
    return cli_usage("help", "unknown command %s", cli_show(name, shown, sizeof shown));
}

static int cmd_help(int argc, char **argv, cli_global *g)
{
    (void)g;
    if (argc > 2)
        return cli_usage("help", "too many arguments");
    int rc = show_help(argc > 1 ? argv[1] : NULL);
    return rc ? rc : finish_stdout("help");
}

/* ---- main --------------------------------------------------------------- */

enum { G_URL = 1, G_URL_FILE, G_VERBOSE, G_HELP, G_VERSION };

static const cli_opt global_opts[] = {
    {"url", 0, 1, G_URL},
    {"url-file", 0, 1, G_URL_FILE},
    {"verbose", 'v', 0, G_VERBOSE},
    {"help", 'h', 0, G_HELP},
    {"version", 'V', 0, G_VERSION},
    {NULL, 0, 0, 0},
};

/* ---- bash completion, from the tables above ------------------------------ */

/* The options a help text shows ("-w", "--wait", ...) in its usage lines
 * (up to the first empty line) and its option lines (those that start
 * with '-'), each once, as words separated by spaces, appended to out. */
static void help_options(const char *help, char *out, size_t len)
{
    const char *usage_end = help ? strstr(help, "\n\n") : NULL;
    int option_line = 0; /* the current line starts with '-' */
    for (const char *p = help; p && *p; p++) {
        if (p == help || p[-1] == '\n')
            option_line = p[strspn(p, " ")] == '-';
        if (*p != '-' || (p > help && !strchr(" \n[(|,", p[-1])) ||
            (usage_end && p > usage_end && !option_line))
            continue;
        const char *q = p + 1;
        if (*q == '-')
            q++;
        if (!((*q >= 'a' && *q <= 'z') || (*q >= 'A' && *q <= 'Z')))
            continue;
        while ((*q >= 'a' && *q <= 'z') || (*q >= 'A' && *q <= 'Z') || *q == '-')
            q++;
        char word[64];
        snprintf(word, sizeof word, " %.*s ", (int)(q - p), p);
        /* already there? (out is " a b c ", each word between spaces) */
        size_t used = strlen(out);
        if (!strstr(out, word) && used + strlen(word) < len)
            snprintf(out + (used ? used - 1 : 0), len - (used ? used - 1 : 0), "%s", word);
        p = q - 1;
    }
}

static int cmd_completion(int argc, char **argv, cli_global *g)
{
    (void)g;
    if (argc == 2 && (!strcmp(argv[1], "--help") || !strcmp(argv[1], "-h"))) {
        fputs(g->help, stdout);
        return finish_stdout("completion");
    }
    if (argc != 2 || strcmp(argv[1], "bash") != 0)
        return cli_usage("completion", "the one shell is bash: dlock completion bash");
    char words[1024] = "";
    for (size_t i = 0; i < NCOMMANDS; i++)
        if (commands[i].synopsis) {
            size_t n = strlen(words);
            snprintf(words + n, sizeof words - n, "%s%s", n ? " " : "", commands[i].name);
        }
    char scenarios[1024] = ""; /* dlock check --scenario NAME */
    for (size_t i = 0; i < chk_nscenarios; i++) {
        size_t n = strlen(scenarios);
        snprintf(scenarios + n, sizeof scenarios - n, "%s%s", n ? " " : "", chk_scenarios[i].name);
    }
    char globals[512] = "";
    for (const cli_opt *o = global_opts; o->id; o++) {
        size_t n = strlen(globals);
        if (o->shrt)
            snprintf(globals + n, sizeof globals - n, "-%c ", o->shrt), n = strlen(globals);
        snprintf(globals + n, sizeof globals - n, "--%s ", o->lng);
    }
    printf("# bash completion for dlock(1), written by `dlock completion bash` from the\n"
           "# command's own tables: regenerate it rather than edit it.\n"
           "_dlock() {\n"
           "    local cur=${COMP_WORDS[COMP_CWORD]} prev=${COMP_WORDS[COMP_CWORD-1]}\n"
           "    local i cmd= dashdash=0 opts=\n"
           "    COMPREPLY=()\n"
           "    for ((i = 1; i < COMP_CWORD; i++)); do\n"
           "        if [[ -n $cmd ]]; then\n"
           "            [[ ${COMP_WORDS[i]} == -- ]] && dashdash=$i && break\n"
           "            continue\n"
           "        fi\n"
           "        case ${COMP_WORDS[i]} in\n"
           "        --url | --url-file) ((i++)) ;;\n"
           "        -*) ;;\n"
           "        *) cmd=${COMP_WORDS[i]} ;;\n"
           "        esac\n"
           "    done\n"
           "    case $prev in\n"
           "    --url-file | --history | --check-history) COMPREPLY=($(compgen -f -- \"$cur\")); "
           "return ;;\n"
           "    --servers) COMPREPLY=($(compgen -d -- \"$cur\")); return ;;\n"
           "    --scenario) COMPREPLY=($(compgen -W '%s' -- \"$cur\")); return ;;\n"
           "    --url) COMPREPLY=($(compgen -W 'file:/// redis:// redis+sentinel:// "
           "redis+cluster:// redlock:// zk:// etcd:// etcds:// postgres:// mysql:// "
           "memcached://' -- \"$cur\")); return ;;\n"
           "    esac\n"
           "    if ((dashdash)); then\n"
           "        # the command to run, then its arguments (files)\n"
           "        if ((COMP_CWORD == dashdash + 1)); then\n"
           "            COMPREPLY=($(compgen -c -- \"$cur\" | sort -u))\n"
           "        else\n"
           "            COMPREPLY=($(compgen -f -- \"$cur\"))\n"
           "        fi\n"
           "        return\n"
           "    fi\n"
           "    case $cmd in\n"
           "    '') COMPREPLY=($(compgen -W '%s %s' -- \"$cur\")); return ;;\n"
           "    help) COMPREPLY=($(compgen -W '%s' -- \"$cur\")); return ;;\n"
           "    completion) COMPREPLY=($(compgen -W 'bash' -- \"$cur\")); return ;;\n",
           scenarios, words, globals, words);
    for (size_t i = 0; i < NCOMMANDS; i++) {
        const command *c = &commands[i];
        if (!c->synopsis || !c->help || !strcmp(c->name, "completion"))
            continue;
        char opts[1024] = "";
        help_options(c->help, opts, sizeof opts);
        size_t n = strlen(opts);
        while (n && opts[n - 1] == ' ')
            opts[--n] = '\0';
        printf("    %s) opts='%s' ;;\n", c->name, opts[0] == ' ' ? opts + 1 : opts);
    }
    printf("    esac\n"
           "    if [[ $cur == -* ]]; then\n"
           "        COMPREPLY=($(compgen -W \"$opts\" -- \"$cur\"))\n"
           "    fi\n"
           "}\n"
           "complete -o default -F _dlock dlock\n");
    return finish_stdout("completion");
}

int main(int argc, char **argv)
{
    cli_note_fds();
    cli_global g = {.url = NULL, .verbose = 0, .help = NULL};
    /* $DLOCK_URL, or under a `dlock run` the whole URL it passed down */
    static char env_url[CLI_URL_MAX];
    g.url = dh_env_url(env_url, sizeof env_url);

    cli_parser p;
    cli_parser_init(&p, argc, argv, NULL);
    const char *cmd = NULL;
    while (!cmd) {
        int id = cli_next_opt(&p, global_opts);
        switch (id) {
        case CLI_OPT_END:
            return cli_usage(NULL, "missing command");
        case CLI_OPT_ERROR:
            return CLI_EXIT_USAGE;
        case CLI_OPT_DASHDASH:
            return cli_usage(NULL, "missing command before \"--\"");
        case CLI_OPT_POS:
            cmd = p.val;
            break;
        case G_URL:
            if (!(g.url = cli_url_arg(NULL, p.val)))
                return CLI_EXIT_USAGE;
            break;
        case G_URL_FILE:
            if (!(g.url = cli_url_file(NULL, p.val)))
                return CLI_EXIT_USAGE;
            break;
        case G_VERBOSE:
            g.verbose = 1;
            break;
        case G_HELP:
            print_usage(stdout);
            return finish_stdout("help");
        case G_VERSION:
            return cmd_version(0, NULL, &g);
        }
    }
    /* The subcommand sees itself as argv[0]. */
    int sargc = argc - (p.idx - 1);
    char **sargv = argv + (p.idx - 1);

    const command *c = find_command(cmd);
    if (!c) {
        char shown[CLI_SHOW_MAX];
        return cli_usage(NULL, "unknown command %s", cli_show(cmd, shown, sizeof shown));
    }
    g.help = c->help;
    return c->handler(sargc, sargv, &g);
}
