/* SPDX-License-Identifier: MIT */
/* util.c — messages, argument parsing and small conversions for dlock(1). */
#include "cli.h"
#include "harness/tools.h"

#include <ctype.h>
#include <errno.h>
#include <inttypes.h>
#include <limits.h>
#include <math.h>
#include <signal.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/eventfd.h>
#include <time.h>
#include <unistd.h>

/* The last message vline wrote, without "dlock: " and the newline: the
 * message of a --json "error" event. */
static _Thread_local char last_msg[1024]; /* per thread: the waiting thread reports too */

__attribute__((format(printf, 2, 0))) static void vline(const char *prefix, const char *fmt,
                                                       va_list ap, const char *suffix)
{
    char buf[1024];
    int n = snprintf(buf, sizeof buf, "dlock: %s", prefix);
    if (n < 0)
        return;
    size_t len = (size_t)n < sizeof buf ? (size_t)n : sizeof buf - 1;
    int m = vsnprintf(buf + len, sizeof buf - len, fmt, ap);
    if (m > 0)
        len += (size_t)m < sizeof buf - len ? (size_t)m : sizeof buf - len - 1;
    m = snprintf(buf + len, sizeof buf - len, "%s", suffix);
    if (m > 0)
        len += (size_t)m < sizeof buf - len ? (size_t)m : sizeof buf - len - 1;
    /* Library messages are one line, but make sure of it: one line per error. */
    for (size_t i = 0; i < len; i++)
        if (buf[i] == '\n' || buf[i] == '\r')
            buf[i] = ' ';
    snprintf(last_msg, sizeof last_msg, "%.*s", (int)(len - 7), buf + 7); /* after "dlock: " */
    if (len < sizeof buf - 1)
        buf[len++] = '\n';
    else
        buf[sizeof buf - 2] = '\n', len = sizeof buf - 1;
    fflush(stdout);
    /* One write: lines of parallel dlock processes sharing stderr stay whole. */
    size_t off = 0;
    while (off < len) {
        ssize_t w = write(STDERR_FILENO, buf + off, len - off);
        if (w < 0 && errno == EINTR)
            continue;
        if (w <= 0)
            break;
        off += (size_t)w;
    }
}

void cli_err(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vline("", fmt, ap, "");
    va_end(ap);
}

int cli_usage(const char *cmd, const char *fmt, ...)
{
    char prefix[64];
    snprintf(prefix, sizeof prefix, "%s%s", cmd ? cmd : "", cmd ? ": " : "");
    va_list ap;
    va_start(ap, fmt);
    vline(prefix, fmt, ap, "; try 'dlock --help'");
    va_end(ap);
    return CLI_EXIT_USAGE;
}

int cli_exit_for(int code)
{
    switch (code) {
    case DLOCK_OK:
        return 0;
    case DLOCK_EBUSY:
    case DLOCK_ETIMEDOUT:
        return CLI_EXIT_NOT_ACQUIRED;
    case DLOCK_EUNREACHABLE:
        return CLI_EXIT_UNAVAILABLE;
    case DLOCK_ELOST:
        return CLI_EXIT_LOST;
    case DLOCK_ENAME:
    case DLOCK_ECONFLICT: /* the name is held as another kind of lock */
    case DLOCK_EURL:
    case DLOCK_EINVAL:
        return CLI_EXIT_USAGE;
    default:
        return CLI_EXIT_SOFTWARE;
    }
}

static const char *show(const char *s, char *buf, size_t len, int quote)
{
    static const char hex[] = "0123456789abcdef";
    size_t o = 0, limit = len > 8 ? len - 8 : 0; /* room for "...\"" and NUL */
    if (len < 3) {
        if (len)
            buf[0] = '\0';
        return buf;
    }
    if (quote)
        buf[o++] = '"';
    for (const unsigned char *p = (const unsigned char *)s; *p; p++) {
        if (o + 4 > limit) {
            memcpy(buf + o, "...", 3);
            o += 3;
            break;
        }
        if (quote && (*p == '"' || *p == '\\')) {
            buf[o++] = '\\';
            buf[o++] = (char)*p;
        } else if (*p < 0x20 || *p >= 0x7f) {
            buf[o++] = '\\';
            buf[o++] = 'x';
            buf[o++] = hex[*p >> 4];
            buf[o++] = hex[*p & 15];
        } else {
            buf[o++] = (char)*p;
        }
    }
    if (quote)
        buf[o++] = '"';
    buf[o] = '\0';
    return buf;
}

const char *cli_show(const char *s, char *buf, size_t len)
{
    return show(s, buf, len, 1);
}

const char *cli_clean(const char *s, char *buf, size_t len)
{
    return show(s, buf, len, 0);
}

int cli_parse_secs(const char *s, int *ms)
{
    if (!s || !*s || isspace((unsigned char)*s) || *s == '-' || *s == '+')
        return -1;
    for (const char *p = s; *p; p++)
        if (!isdigit((unsigned char)*p) && *p != '.')
            return -1; /* no exponents, hex, "inf" or "nan" */
    errno = 0;
    char *end;
    double v = strtod(s, &end);
    if (errno || *end || !isfinite(v) || v < 0)
        return -1;
    if (v > (double)CLI_SECS_MAX)
        return CLI_SECS_TOO_LARGE; /* well-formed: the caller can say "too large" */
    double m = ceil(v * 1000.0 - 1e-6); /* 0.3 -> 300, not 301 */
    if (m < 0)
        m = 0;
    *ms = (int)m;
    if (*ms == 0 && v > 0)
        *ms = 1;
    return 0;
}

int cli_parse_long(const char *s, long min, long max, long *out)
{
    if (!s || !*s || isspace((unsigned char)*s))
        return -1;
    errno = 0;
    char *end;
    long v = strtol(s, &end, 10);
    if (errno || *end || v < min || v > max)
        return -1;
    *out = v;
    return 0;
}

static const struct {
    const char *name;
    int sig;
} signames[] = {
    {"HUP", SIGHUP},     {"INT", SIGINT},       {"QUIT", SIGQUIT},   {"ILL", SIGILL},
    {"TRAP", SIGTRAP},   {"ABRT", SIGABRT},     {"IOT", SIGABRT},    {"BUS", SIGBUS},
    {"FPE", SIGFPE},     {"KILL", SIGKILL},     {"USR1", SIGUSR1},   {"SEGV", SIGSEGV},
    {"USR2", SIGUSR2},   {"PIPE", SIGPIPE},     {"ALRM", SIGALRM},   {"TERM", SIGTERM},
#ifdef SIGSTKFLT
    {"STKFLT", SIGSTKFLT},
#endif
    {"CHLD", SIGCHLD},   {"CONT", SIGCONT},     {"STOP", SIGSTOP},   {"TSTP", SIGTSTP},
    {"TTIN", SIGTTIN},   {"TTOU", SIGTTOU},     {"URG", SIGURG},     {"XCPU", SIGXCPU},
    {"XFSZ", SIGXFSZ},   {"VTALRM", SIGVTALRM}, {"PROF", SIGPROF},   {"WINCH", SIGWINCH},
    {"IO", SIGIO},
#ifdef SIGPWR
    {"PWR", SIGPWR},
#endif
    {"SYS", SIGSYS},
};

int cli_parse_signal(const char *s)
{
    long n;
    if (!s || !*s)
        return -1;
    if (isdigit((unsigned char)*s))
        return cli_parse_long(s, 1, SIGRTMAX, &n) == 0 ? (int)n : -1;
    if (strncasecmp(s, "SIG", 3) == 0)
        s += 3;
    for (size_t i = 0; i < sizeof signames / sizeof signames[0]; i++)
        if (strcasecmp(s, signames[i].name) == 0)
            return signames[i].sig;
    return -1;
}

const char *cli_signal_name(int sig, char *buf, size_t len)
{
    for (size_t i = 0; i < sizeof signames / sizeof signames[0]; i++)
        if (signames[i].sig == sig) {
            snprintf(buf, len, "SIG%s", signames[i].name);
            return buf;
        }
    snprintf(buf, len, "SIG%d", sig);
    return buf;
}

void cli_json_str(FILE *f, const char *s)
{
    fputc('"', f);
    for (const unsigned char *p = (const unsigned char *)(s ? s : ""); *p; p++) {
        switch (*p) {
        case '"': fputs("\\\"", f); break;
        case '\\': fputs("\\\\", f); break;
        case '\n': fputs("\\n", f); break;
        case '\r': fputs("\\r", f); break;
        case '\t': fputs("\\t", f); break;
        case '\b': fputs("\\b", f); break;
        case '\f': fputs("\\f", f); break;
        default:
            /* Control bytes escaped; bytes >= 0x80 pass through (UTF-8 stays
             * UTF-8), except that a lone 0x7f is escaped for readability. */
            if (*p < 0x20 || *p == 0x7f)
                fprintf(f, "\\u%04x", *p);
            else
                fputc(*p, f);
        }
    }
    fputc('"', f);
}

/* ---- --json events ---------------------------------------------------- */

static int events_on;

void cli_events_on(void)
{
    events_on = 1;
}

int cli_ev_begin(cli_event *e, const char *event, const char *name)
{
    memset(e, 0, sizeof *e);
    if (!events_on || !(e->f = open_memstream(&e->buf, &e->len)))
        return 0; /* no memory for one line: the event is dropped, dlock goes on */
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    fputs("{\"event\":", e->f);
    cli_json_str(e->f, event);
    fprintf(e->f, ",\"ts_ms\":%lld", (long long)ts.tv_sec * 1000 + ts.tv_nsec / 1000000);
    if (name)
        cli_ev_str(e, "name", name);
    return 1;
}

void cli_ev_str(cli_event *e, const char *key, const char *val)
{
    if (!e->f)
        return;
    fputc(',', e->f);
    cli_json_str(e->f, key);
    fputc(':', e->f);
    if (val)
        cli_json_str(e->f, val);
    else
        fputs("null", e->f);
}

void cli_ev_int(cli_event *e, const char *key, long long v)
{
    if (!e->f)
        return;
    fputc(',', e->f);
    cli_json_str(e->f, key);
    fprintf(e->f, ":%lld", v);
}

void cli_ev_u64(cli_event *e, const char *key, uint64_t v)
{
    if (!e->f)
        return;
    fputc(',', e->f);
    cli_json_str(e->f, key);
    fprintf(e->f, ":%" PRIu64, v);
}

void cli_ev_end(cli_event *e)
{
    if (!e->f)
        return;
    fputs("}\n", e->f);
    int bad = ferror(e->f);
    if (fclose(e->f) == 0 && !bad) {
        /* One write, as vline: lines of processes sharing stderr stay whole. */
        size_t off = 0;
        while (off < e->len) {
            ssize_t w = write(STDERR_FILENO, e->buf + off, e->len - off);
            if (w < 0 && errno == EINTR)
                continue;
            if (w <= 0)
                break;
            off += (size_t)w;
        }
    }
    free(e->buf);
    memset(e, 0, sizeof *e);
}

void cli_ev_error(const char *name, const char *code, int exit_code, const char *msg)
{
    cli_event e;
    if (!cli_ev_begin(&e, "error", name))
        return;
    cli_ev_str(&e, "code", code);
    cli_ev_str(&e, "message", msg ? msg : last_msg);
    cli_ev_int(&e, "exit", exit_code);
    cli_ev_end(&e);
}

void cli_ev_lost(const char *name, uint64_t token, const char *msg)
{
    cli_event e;
    if (!cli_ev_begin(&e, "lost", name))
        return;
    cli_ev_u64(&e, "token", token);
    cli_ev_str(&e, "message", msg);
    cli_ev_end(&e);
}

/* Does url choose a layout (?layout=... or &layout=...)? */
static bool url_has_layout(const char *url)
{
    const char *q = url ? strchr(url, '?') : NULL;
    while (q) {
        if (strncmp(q + 1, "layout=", 7) == 0)
            return true;
        q = strchr(q + 1, '&');
    }
    return false;
}

int cli_check_name(const char *cmd, const char *url, const char *name)
{
    char why[256] = "";
    char shown[CLI_SHOW_MAX];
    if (dlock_name_valid(name, why, sizeof why) == 0)
        return 0;
    /* A peer's layout takes the peer's names (etcdctl's: a key prefix,
     * '/' and all): the library judges them once the client is open. */
    if (url_has_layout(url) && name && *name)
        return 0;
    cli_err("%s: invalid lock name %s: %s", cmd, cli_show(name, shown, sizeof shown),
            why[0] ? why : dlock_strerror(DLOCK_ENAME));
    return CLI_EXIT_USAGE;
}

/* The URL taken from --url or --url-file, kept for the process's life (a
 * later one replaces it: the last option wins). */
static char *taken_url;

static const char *take_url(char *url)
{
    free(taken_url);
    taken_url = url;
    return url;
}

const char *cli_url_arg(const char *cmd, const char *val)
{
    if (!val || !*val) {
        cli_usage(cmd, "--url is empty (an unset variable?); leave it out for the default "
                       "backend");
        return NULL;
    }
    char *copy = strdup(val);
    if (!copy) {
        cli_err("%s: out of memory", cmd ? cmd : "dlock");
        return NULL;
    }
    /* Our own argv (kept for the process's life): the secret leaves the
     * command line that ps and /proc/PID/cmdline show, for dlock and for
     * its guardian, forked later. */
    dh_url_scrub((char *)val);
    return take_url(copy);
}

const char *cli_url_file(const char *cmd, const char *path)
{
    char shown[CLI_SHOW_MAX];
    FILE *f = fopen(path, "re");
    if (!f) {
        cli_usage(cmd, "--url-file %s: %s", cli_show(path, shown, sizeof shown),
                  strerror(errno));
        return NULL;
    }
    char *buf = malloc(CLI_URL_MAX);
    size_t n = buf ? fread(buf, 1, CLI_URL_MAX - 1, f) : 0;
    int bad = ferror(f);
    fclose(f);
    if (!buf) {
        cli_err("%s: out of memory", cmd ? cmd : "dlock");
        return NULL;
    }
    buf[n] = '\0';
    buf[strcspn(buf, "\r\n")] = '\0'; /* the first line */
    if (bad || !*buf) {
        cli_usage(cmd, "--url-file %s: %s", cli_show(path, shown, sizeof shown),
                  bad ? "cannot read it" : "no URL on its first line");
        free(buf);
        return NULL;
    }
    return take_url(buf);
}

int cli_open(const char *cmd, const char *url, dlock_client **out)
{
    int rc = cli_open_try(url, -1, out);
    return rc ? cli_open_failed(cmd, rc) : 0;
}

int cli_open_try(const char *url, int within_ms, dlock_client **out)
{
    dlock_client_opts o;
    dlock_client_opts_init(&o);
    if (within_ms > 0 && within_ms < 2000)
        o.connect_timeout_ms = within_ms; /* else the URL's or the default */
    int rc = dlock_client_open(out, url, &o);
    if (rc)
        *out = NULL;
    return rc;
}

int cli_open_failed(const char *cmd, int rc)
{
    const char *why = dlock_client_errmsg(NULL);
    /* The library's message never contains a password; the URL itself
     * might, so it is not printed here. */
    cli_err("%s: cannot open backend: %s", cmd, why && *why ? why : dlock_strerror(rc));
    return cli_exit_for(rc);
}

void cli_lost_ack(dlock_lock *lock)
{
    uint64_t n;
    ssize_t r;
    do
        r = read(dlock_lost_fd(lock), &n, sizeof n);
    while (r < 0 && errno == EINTR);
    /* EAGAIN (already read) and the like change nothing: the loss is known. */
}

int cli_warn_fd(void)
{
    return eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
}

void cli_on_warn(dlock_lock *lock, void *arg)
{
    (void)lock;
    uint64_t one = 1;
    if (write((int)(intptr_t)arg, &one, sizeof one) < 0) {
        /* only on counter overflow: a warning is pending anyway */
    }
}

void cli_warned(const char *cmd, const char *name, dlock_lock *lock, uint64_t token, int sig,
                int pgid, int fd, int say)
{
    uint64_t n;
    ssize_t r;
    do
        r = read(fd, &n, sizeof n);
    while (r < 0 && errno == EINTR);
    /* Told by the library before the loss it announces, so its event comes
     * first even when dlock reads both late; but a lock lost meanwhile
     * needs no signal to checkpoint, its kill signal follows. */
    if (dlock_state(lock) != DLOCK_STATE_HELD)
        sig = 0;
    long long valid_ms = dlock_valid_ms(lock);
    char sname[16], shown[CLI_SHOW_MAX];
    if (say)
        cli_err("%s: lock %s: no renewal has succeeded for a while; it will be declared lost "
                "in %lld ms unless one does%s%s",
                cmd, cli_show(name, shown, sizeof shown), valid_ms,
                sig && pgid > 0 ? "; sending it " : "",
                sig && pgid > 0 ? cli_signal_name(sig, sname, sizeof sname) : "");
    cli_event e;
    if (cli_ev_begin(&e, "warning", name)) {
        cli_ev_u64(&e, "token", token);
        cli_ev_int(&e, "valid_ms", valid_ms);
        cli_ev_str(&e, "signal", sig && pgid > 0 ? cli_signal_name(sig, sname, sizeof sname)
                                                 : NULL);
        cli_ev_end(&e);
    }
    if (sig && pgid > 0 && kill(-pgid, sig) < 0 && errno != ESRCH)
        cli_err("%s: cannot send the warning signal: %s", cmd, strerror(errno));
}

int64_t cli_now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* ---- option parser ---------------------------------------------------- */

void cli_parser_init(cli_parser *p, int argc, char **argv, const char *cmd)
{
    memset(p, 0, sizeof *p);
    p->argc = argc;
    p->argv = argv;
    p->idx = 1;
    p->cmd = cmd;
}

static int take_arg(cli_parser *p, const cli_opt *o, const char *inline_val)
{
    if (!o->has_arg) {
        if (inline_val) {
            cli_usage(p->cmd, "option %s takes no value", p->optname);
            return CLI_OPT_ERROR;
        }
        p->val = NULL;
        return o->id;
    }
    if (inline_val) {
        p->val = inline_val;
        return o->id;
    }
    if (p->idx >= p->argc) {
        cli_usage(p->cmd, "option %s needs a value", p->optname);
        return CLI_OPT_ERROR;
    }
    p->val = p->argv[p->idx++];
    return o->id;
}

int cli_next_opt(cli_parser *p, const cli_opt *opts)
{
    char shown[CLI_SHOW_MAX];
    if (p->bundle && *p->bundle) {
        char c = *p->bundle++;
        snprintf(p->optname, sizeof p->optname, "-%c", c);
        for (const cli_opt *o = opts; o->id; o++) {
            if (o->shrt != c)
                continue;
            if (o->has_arg) {
                /* "-w5": the rest of the bundle is the value */
                const char *rest = *p->bundle ? p->bundle : NULL;
                p->bundle = NULL;
                return take_arg(p, o, rest);
            }
            return take_arg(p, o, NULL);
        }
        cli_usage(p->cmd, "unknown option %s", cli_show(p->optname, shown, sizeof shown));
        return CLI_OPT_ERROR;
    }
    p->bundle = NULL;
    if (p->idx >= p->argc)
        return CLI_OPT_END;
    const char *a = p->argv[p->idx++];
    if (strcmp(a, "--") == 0)
        return CLI_OPT_DASHDASH;
    if (a[0] != '-' || a[1] == '\0') {
        p->val = a;
        return CLI_OPT_POS;
    }
    if (a[1] == '-') {
        const char *name = a + 2, *eq = strchr(name, '=');
        size_t n = eq ? (size_t)(eq - name) : strlen(name);
        snprintf(p->optname, sizeof p->optname, "--%.*s", (int)(n < 60 ? n : 60), name);
        for (const cli_opt *o = opts; o->id; o++)
            if (o->lng && strlen(o->lng) == n && strncmp(o->lng, name, n) == 0)
                return take_arg(p, o, eq ? eq + 1 : NULL);
        cli_usage(p->cmd, "unknown option %s", cli_show(p->optname, shown, sizeof shown));
        return CLI_OPT_ERROR;
    }
    p->bundle = a + 1;
    return cli_next_opt(p, opts);
}
