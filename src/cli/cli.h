/* SPDX-License-Identifier: MIT */
/* cli.h — pieces of the dlock command shared between its files. */
#ifndef DLOCK_CLI_H
#define DLOCK_CLI_H

#include <dlock.h>

#include <signal.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

/* Exit codes of the dlock command (documented in --help and dlock(1)). */
enum {
    CLI_EXIT_NOT_ACQUIRED = 1, /* default for "not acquired in time" (-E overrides) */
    CLI_EXIT_USAGE = 64,       /* EX_USAGE */
    CLI_EXIT_UNAVAILABLE = 69, /* EX_UNAVAILABLE: backend unreachable */
    CLI_EXIT_SOFTWARE = 70,    /* EX_SOFTWARE: other internal failure */
    CLI_EXIT_IN_PROGRESS = 73, /* once: another caller runs it (-n, -w ran out) */
    CLI_EXIT_LOST = 75,        /* the lock was lost while the command ran */
    CLI_EXIT_CANNOT_EXEC = 126,
    CLI_EXIT_NOT_FOUND = 127
};

/* Subcommands implemented in their own files. argv[0] is the subcommand
 * name; url is the resolved backend URL (NULL: default). Return exit code. */
int cli_bench(int argc, char **argv, const char *url);
int cli_check(int argc, char **argv, const char *url);
/* Their help texts, kept beside their options; main.c's command table
 * shows them (dlock help bench) and makes their completion from them. */
extern const char cli_bench_help[];
extern const char cli_check_help[];

/* ---- global options (main.c) ------------------------------------------ */

/* What main.c hands a subcommand. The files are layered main.c -> run.c ->
 * child.c -> signals.c (all -> util.c): nothing calls back up, so a
 * subcommand gets its help text here instead of asking main.c for it. */
typedef struct cli_global {
    const char *url;  /* --url, else $DLOCK_URL, else NULL (library default) */
    int verbose;      /* -v given before the subcommand */
    const char *help; /* its text for --help, from main.c's command table */
} cli_global;

/* ---- run, hold, elect (run.c) ----------------------------------------- */

/* argv[0] is "run", "hold", "elect" or "once". Returns the exit code. */
int cli_run(int argc, char **argv, const cli_global *g);

/* ---- signals (signals.c) ---------------------------------------------- */

/* Handled signals (INT TERM HUP QUIT USR1 USR2 WINCH CONT CHLD) are blocked
 * in every thread but the one waiting for them, and their handler writes the
 * signal number as one byte to a self-pipe. run.c sets it up and waits on it;
 * child.c uses it while the command runs.
 *
 * Install the handlers and block the signals in this thread (and so in every
 * thread started from it): before the client exists. -1 with errno. */
int cli_sig_setup(void);
/* Undo cli_sig_setup (also after one that failed half-way). */
void cli_sig_teardown(void);
/* The handled signals, for the thread that unblocks them to wait. */
const sigset_t *cli_sig_handled(void);
/* The self-pipe's read end, to poll. */
int cli_sig_fd(void);
/* Next signal from the self-pipe, 0 when none is pending. */
int cli_sig_next(void);
/* The mask for ppoll in the supervising thread: handled signals unblocked. */
const sigset_t *cli_sig_pollmask(void);
/* In a forked child: the caller's dispositions and signal mask back.
 * Async-signal-safe. */
void cli_sig_restore(void);
/* In a forked process that is not the command (the guardian): close the
 * self-pipe so that nothing holds it but dlock. Async-signal-safe. */
void cli_sig_forget(void);
/* INT, TERM, HUP, QUIT: the signals that end waiting or holding. */
int cli_sig_terminates(int sig);
/* Die of sig, once everything is cleaned up and cli_sig_teardown ran, so
 * that a shell sees dlock killed by it (bash stops a script on a child's
 * SIGINT only then): default disposition, no core file, unblocked, then
 * sent to ourselves, or to our whole process group when whole_group (a
 * terminal's INT or QUIT that only reached the command because it had the
 * terminal). Returns 128 + sig if we survive it. */
int cli_sig_die(int sig, int whole_group);

/* ---- command supervision (child.c) ------------------------------------ */

/* Descriptors open when dlock started (besides 0-2): handed on to the
 * command untouched, closed in the guardian. main() calls cli_note_fds()
 * before it opens anything. */
void cli_note_fds(void);
size_t cli_inherited_fds(const int **fds);

typedef struct cli_supervise_cfg {
    const char *cmdname; /* "run" or "elect", for messages */
    const char *name;    /* lock name */
    char **cmd;          /* NULL-terminated argv of the command */
    dlock_client *client;
    const char *url;     /* the client's whole URL (password included), NULL: default */
    dlock_lock *lock;    /* held */
    uint64_t token;      /* its fencing token (dlock_token says 0 once it is lost) */
    int kill_sig;        /* sent to the command's group on loss */
    int warn_sig;        /* sent to the command's group on a warning, 0 none */
    int warn_fd;         /* readable on a warning (cli_warn_fd), -1 none */
    int kill_grace_ms;   /* then SIGKILL after this long */
    int verbose;
    int64_t lose_at_ms;  /* test hook: force loss at this cli_now_ms(), -1 never */
    int ttl_ms;          /* lease length (for the guardian's deadline checks) */
    /* Signals that reached dlock while it waited for the lock (USR1, USR2,
     * WINCH): sent to the command's group once it has started. */
    const int *deliver;
    size_t ndeliver;
    /* More "VAR=value" strings for the command's environment, NULL-ended
     * (once: DLOCK_ONCE_ATTEMPT, DLOCK_RESULT); NULL: none. */
    char *const *extra_env;
    /* Out: the signal the command died of (0: it did not), and whether its
     * group had the terminal then (see cli_sig_die). */
    int *died_sig, *died_with_tty;
} cli_supervise_cfg;

/* Run the command while the lock is held, forward signals, kill the command's
 * process group if the lock is lost, and return dlock's exit code (the
 * command's status, 75, 126, 127 or 70). The caller releases the lock. */
int cli_supervise(const cli_supervise_cfg *cfg);

/* ---- helpers (util.c) ------------------------------------------------- */

/* One line on stderr, "dlock: " + message, written with a single write so
 * that lines from concurrent processes do not interleave. */
void cli_err(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
/* A usage error of subcommand cmd (NULL: global): prints the message with a
 * pointer to --help and returns CLI_EXIT_USAGE. */
int cli_usage(const char *cmd, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* Exit code for a library error code (see dlock(1), EXIT STATUS). */
int cli_exit_for(int dlock_code);

/* s quoted for a one-line message: non-printable bytes escaped, long
 * strings shortened. Returns buf. */
const char *cli_show(const char *s, char *buf, size_t len);
#define CLI_SHOW_MAX 96
/* The same without quotes, for text from elsewhere (holder descriptions). */
const char *cli_clean(const char *s, char *buf, size_t len);

/* Seconds with optional decimals ("1", "0.25") to milliseconds, rounded
 * up so that a positive value never becomes 0. Returns -1 if malformed or
 * negative, CLI_SECS_TOO_LARGE if above CLI_SECS_MAX seconds. */
#define CLI_SECS_MAX 2147483 /* whole seconds that fit an int of milliseconds */
#define CLI_SECS_TOO_LARGE (-2)
int cli_parse_secs(const char *s, int *ms);
/* Decimal integer in [min, max]; -1 if malformed or out of range. */
int cli_parse_long(const char *s, long min, long max, long *out);
/* "TERM", "SIGTERM", "term" or "15"; -1 if unknown. */
int cli_parse_signal(const char *s);
/* "SIGTERM" for 15; "SIG<n>" for signals without a name. */
const char *cli_signal_name(int sig, char *buf, size_t len);

/* s as a JSON string literal, quotes included. */
void cli_json_str(FILE *f, const char *s);

/* ---- --json events of run, hold and elect (util.c) ------------------- */

/* Once --json is given: each event is one JSON object on one line of
 * stderr, written with one write, {"event": EVENT, "ts_ms": ms since the
 * epoch, "name": lock name, ...}. Off: the calls below do nothing. */
void cli_events_on(void);
typedef struct cli_event {
    FILE *f; /* the line being built (open_memstream), NULL: events off */
    char *buf;
    size_t len;
} cli_event;
/* Start an event line (name NULL: no "name"); 0 when events are off. */
int cli_ev_begin(cli_event *e, const char *event, const char *name);
void cli_ev_str(cli_event *e, const char *key, const char *val); /* NULL: null */
void cli_ev_int(cli_event *e, const char *key, long long v);
void cli_ev_u64(cli_event *e, const char *key, uint64_t v);
/* Close the object and write the line. */
void cli_ev_end(cli_event *e);
/* An "error" event: code (the library's error name, like "EBUSY", or
 * dlock's own: "INTERRUPTED", "EXEC", "INTERNAL"), message (NULL: the
 * last line cli_err wrote, without "dlock: ") and the exit code. */
void cli_ev_error(const char *name, const char *code, int exit_code, const char *msg);

/* A "lost" event: the token that was held and why (the library's message). */
void cli_ev_lost(const char *name, uint64_t token, const char *msg);

/* Warnings before loss (dlock_lock_opts.on_warn): cli_warn_fd() makes a
 * descriptor (-1 with errno) that cli_on_warn, the callback, with the
 * descriptor as its argument (cast to intptr_t), makes readable from the
 * library's thread. cli_warned(cmd, name, lock, token, sig, fd, say) reads
 * it and tells the warning: a "warning" event, a line on stderr when say,
 * and sig (0 none) to the process group pgid (0 none). */
int cli_warn_fd(void);
void cli_on_warn(dlock_lock *lock, void *arg);
void cli_warned(const char *cmd, const char *name, dlock_lock *lock, uint64_t token, int sig,
                int pgid, int fd, int say);

/* Check a lock name; prints the error and returns 64 if invalid, else 0.
 * Under a URL that chooses a layout the library judges it (peers' names). */
int cli_check_name(const char *cmd, const char *url, const char *name);
/* The URL of --url VAL: a copy, after which VAL's password is overwritten
 * in argv (ps shows argv). An empty one (an unset variable) is a usage
 * error, never the default backend: NULL, the error printed (exit 64). */
const char *cli_url_arg(const char *cmd, const char *val);
/* The URL of --url-file PATH (its first line): NULL, the error printed
 * (exit 64), when it cannot be read or is empty. */
const char *cli_url_file(const char *cmd, const char *path);
/* Longest URL read from a file or descriptor. */
#define CLI_URL_MAX 4096
/* Open a client for url; on failure prints one line and returns the exit
 * code (64 malformed url, 69 unreachable, 70 other), else 0. */
int cli_open(const char *cmd, const char *url, dlock_client **out);
/* cli_open's try alone, done within within_ms (-1: the default connect
 * timeout; run -w bounds its whole wait), saying nothing: the library's
 * code (its message in dlock_client_errmsg(NULL)). */
int cli_open_try(const char *url, int within_ms, dlock_client **out);
/* cli_open's one line for a failed open of code rc; its exit code. */
int cli_open_failed(const char *cmd, int rc);

/* Call once dlock_lost_fd(lock) polled readable, before dlock_lock_errmsg:
 * reads the event, which orders the library thread's loss message before our
 * read of it for thread sanitizers too (poll alone does not). The descriptor
 * must not be polled again afterwards. */
void cli_lost_ack(dlock_lock *lock);

/* Monotonic clock in milliseconds. */
int64_t cli_now_ms(void);

/* ---- a small option parser (util.c) ----------------------------------- */

typedef struct cli_opt {
    const char *lng; /* long name without "--", or NULL */
    int shrt;        /* short letter, or 0 */
    int has_arg;
    int id;          /* returned by cli_next_opt */
} cli_opt;

enum {
    CLI_OPT_END = -1,      /* no more arguments */
    CLI_OPT_POS = -2,      /* a positional argument, in p->val */
    CLI_OPT_DASHDASH = -3, /* "--": p->idx is the first argument after it */
    CLI_OPT_ERROR = -4     /* message printed; exit 64 */
};

typedef struct cli_parser {
    int argc;
    char **argv;
    int idx;            /* next argv index; start at 1 (argv[0] is the command) */
    const char *cmd;    /* subcommand for messages */
    const char *bundle; /* rest of a bundle of short options ("-nv") */
    const char *val;    /* option argument or positional */
    char optname[64];   /* the option as written, for messages */
} cli_parser;

void cli_parser_init(cli_parser *p, int argc, char **argv, const char *cmd);
/* The id of the next option (terminated by an entry with id 0), or one of
 * CLI_OPT_*. Options and positionals may be mixed. */
int cli_next_opt(cli_parser *p, const cli_opt *opts);

#endif
