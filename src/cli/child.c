/* SPDX-License-Identifier: MIT */
/* child.c — the command under the lock (`dlock run`, `dlock elect`).
 *
 * The command runs in its own process group so that the whole group can be
 * signalled: forwarded signals, --kill-signal then SIGKILL when the lock is
 * lost. It must never outlive the lock, even if dlock is SIGKILLed: the
 * direct child has PR_SET_PDEATHSIG, and a small guardian process, outside
 * dlock's process group, waits on a pipe only dlock can write; end of file
 * means dlock died, and the guardian SIGKILLs the command's group.
 *
 * dlock is a child subreaper, so the group's orphans become its children and
 * their deaths wake the supervision loop: no busy polling (the one timer is
 * a look at the lease's deadline every ttl/4, for the guardian). Everything
 * between fork and exec is async-signal-safe (the library runs threads), so
 * the paths, argv and environment are prepared before forking.
 *
 * The guardian also covers a dlock that is alive but cannot act (stopped,
 * starved): dlock tells it when the lease stops being valid, and if that
 * moment passes without a newer one, the guardian does what dlock does on
 * loss. If the guardian itself dies, dlock starts a new one at once.
 */
#include "cli.h"
#include "dlock_debug.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
#include <poll.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#ifndef CLOSE_RANGE_CLOEXEC
#define CLOSE_RANGE_CLOEXEC (1U << 2)
#endif

extern char **environ;

/* ---- descriptors the command inherits ---------------------------------- */

/* Which descriptors the caller gave us, recorded by main() before anything
 * of ours is open, so that the command inherits exactly those. Kept here
 * with their only users (the exec plan, the guardian), not in main.c. */
static int inherited[64];
static size_t ninherited;

void cli_note_fds(void)
{
    DIR *d = opendir("/proc/self/fd");
    if (!d)
        return; /* no /proc: hand nothing extra to the command */
    int self = dirfd(d);
    struct dirent *e;
    while ((e = readdir(d)) != NULL && ninherited < sizeof inherited / sizeof inherited[0]) {
        long fd;
        if (cli_parse_long(e->d_name, 3, 1 << 30, &fd) == 0 && fd != self)
            inherited[ninherited++] = (int)fd;
    }
    closedir(d);
    /* ascending, for the child's close_range walk */
    for (size_t i = 1; i < ninherited; i++)
        for (size_t j = i; j > 0 && inherited[j - 1] > inherited[j]; j--) {
            int t = inherited[j];
            inherited[j] = inherited[j - 1];
            inherited[j - 1] = t;
        }
}

size_t cli_inherited_fds(const int **fds)
{
    *fds = inherited;
    return ninherited;
}

/* ---- what the child will exec ------------------------------------------- */

typedef struct exec_plan {
    char **argv;    /* the command */
    char **paths;   /* candidate files, PATH order (execvp's search) */
    size_t npaths;
    char **sh_argv; /* "/bin/sh" FILE ARGS...: for files without #! (ENOEXEC) */
    char **envp;
    char *vars[4];  /* DLOCK_NAME=, DLOCK_TOKEN=, DLOCK_URL=, DLOCK_URL_FD= */
    char **peer;    /* the layout's own tool's variables (dlock_peer_env) */
    size_t npeer;
    char *const *extra; /* the caller's (cli_supervise_cfg.extra_env), not owned */
    int url_fd;     /* the whole URL for the command, -1 when it has no secret */
    long fd_limit;  /* for the CLOEXEC fallback on kernels without close_range */
    const int *keep; /* descriptors our caller gave us: the command gets them */
    size_t nkeep;
} exec_plan;

static void plan_free(exec_plan *ep)
{
    for (size_t i = 0; i < ep->npaths; i++)
        free(ep->paths[i]);
    free(ep->paths);
    free(ep->sh_argv);
    free(ep->envp);
    for (size_t i = 0; i < 4; i++)
        free(ep->vars[i]);
    for (size_t i = 0; i < ep->npeer; i++)
        free(ep->peer[i]);
    free(ep->peer);
    if (ep->url_fd >= 0)
        close(ep->url_fd);
    memset(ep, 0, sizeof *ep);
    ep->url_fd = -1;
}

/* The whole URL in a sealed memfd for the command (see dl_env_url in the
 * library, which reads it back): a nested dlock reaches the same backend
 * with the same credentials, and the password stays out of the
 * environment, which commands print and log. -1 on failure. */
static int url_memfd(const char *url)
{
    int fd = memfd_create("dlock-url", MFD_CLOEXEC | MFD_ALLOW_SEALING);
    if (fd < 0)
        return -1;
    size_t len = strlen(url), off = 0;
    while (off < len) {
        ssize_t w = write(fd, url + off, len - off);
        if (w < 0 && errno == EINTR)
            continue;
        if (w <= 0) {
            close(fd);
            return -1;
        }
        off += (size_t)w;
    }
    /* Read-only for whoever inherits it. */
    (void)fcntl(fd, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_WRITE | F_SEAL_SEAL);
    return fd;
}

static char *join3(const char *a, const char *b, const char *c)
{
    size_t la = strlen(a), lb = strlen(b), lc = strlen(c);
    char *s = malloc(la + lb + lc + 1);
    if (s) {
        memcpy(s, a, la);
        memcpy(s + la, b, lb);
        memcpy(s + la + lb, c, lc + 1);
    }
    return s;
}

/* Whether the inherited variable e is one we set (the command gets ours, not
 * a dlock's or etcdctl's above us). */
static int env_is_ours(const exec_plan *ep, const char *e)
{
    if (strncmp(e, "DLOCK_NAME=", 11) == 0 || strncmp(e, "DLOCK_TOKEN=", 12) == 0 ||
        strncmp(e, "DLOCK_URL=", 10) == 0 || strncmp(e, "DLOCK_URL_FD=", 13) == 0)
        return 1;
    for (size_t i = 0; i < ep->npeer; i++) {
        size_t n = strcspn(ep->peer[i], "=") + 1;
        if (strncmp(e, ep->peer[i], n) == 0)
            return 1;
    }
    for (char *const *x = ep->extra; x && *x; x++) {
        size_t n = strcspn(*x, "=") + 1;
        if (strncmp(e, *x, n) == 0)
            return 1;
    }
    return 0;
}

static int add_peer_var(const char *var, const char *value, void *arg)
{
    exec_plan *ep = arg;
    char **p = realloc(ep->peer, (ep->npeer + 1) * sizeof *p);
    if (!p)
        return DLOCK_ENOMEM;
    ep->peer = p;
    if (!(p[ep->npeer] = join3(var, "=", value)))
        return DLOCK_ENOMEM;
    ep->npeer++;
    return 0;
}

static int plan_build(const cli_supervise_cfg *cfg, exec_plan *ep)
{
    memset(ep, 0, sizeof *ep);
    ep->url_fd = -1;
    ep->argv = cfg->cmd;
    size_t nargs = 0;
    while (cfg->cmd[nargs])
        nargs++;
    if (nargs == 0) {
        errno = EINVAL; /* the option parser guarantees a command */
        return -1;
    }
    const char *file = cfg->cmd[0];

    if (strchr(file, '/')) {
        if (!(ep->paths = calloc(1, sizeof *ep->paths)) || !(ep->paths[0] = strdup(file)))
            goto oom;
        ep->npaths = 1;
    } else if (*file) {
        const char *path = getenv("PATH");
        char defpath[256];
        if (!path) {
            size_t n = confstr(_CS_PATH, defpath, sizeof defpath);
            path = n > 0 && n <= sizeof defpath ? defpath : "/bin:/usr/bin";
        }
        size_t max = 1;
        for (const char *p = path; *p; p++)
            max += *p == ':';
        if (!(ep->paths = calloc(max, sizeof *ep->paths)))
            goto oom;
        for (const char *p = path;;) {
            size_t n = strcspn(p, ":");
            char dir[PATH_MAX];
            snprintf(dir, sizeof dir, "%.*s", (int)(n < sizeof dir ? n : sizeof dir - 1), p);
            /* an empty PATH entry means the current directory */
            if (!(ep->paths[ep->npaths] = join3(n ? dir : ".", "/", file)))
                goto oom;
            ep->npaths++;
            if (!p[n])
                break;
            p += n + 1;
        }
    }
    if (!(ep->sh_argv = calloc(nargs + 2, sizeof *ep->sh_argv)))
        goto oom;
    ep->sh_argv[0] = (char *)"/bin/sh";
    for (size_t i = 1; i < nargs; i++)
        ep->sh_argv[i + 1] = cfg->cmd[i];

    char token[32];
    snprintf(token, sizeof token, "%" PRIu64, cfg->token);
    const char *url = dlock_client_url(cfg->client); /* password already "***" */
    if (!(ep->vars[0] = join3("DLOCK_NAME", "=", cfg->name)) ||
        !(ep->vars[1] = join3("DLOCK_TOKEN", "=", token)) ||
        !(ep->vars[2] = join3("DLOCK_URL", "=", url ? url : "")))
        goto oom;
    if (cfg->url && url && strcmp(cfg->url, url) != 0) {
        char fdnum[16];
        if ((ep->url_fd = url_memfd(cfg->url)) < 0)
            goto fail;
        snprintf(fdnum, sizeof fdnum, "%d", ep->url_fd);
        if (!(ep->vars[3] = join3("DLOCK_URL_FD", "=", fdnum)))
            goto oom;
    }
    int prc = dlock_peer_env(cfg->lock, add_peer_var, ep);
    if (prc == DLOCK_ENOMEM)
        goto oom;
    /* (DLOCK_ENOTHELD: lost already; the supervisor finds out and says so) */
    ep->extra = cfg->extra_env;
    size_t nenv = 0, nextra = 0;
    for (char **e = environ; e && *e; e++)
        nenv++;
    for (char *const *x = ep->extra; x && *x; x++)
        nextra++;
    if (!(ep->envp = calloc(nenv + 5 + ep->npeer + nextra, sizeof *ep->envp)))
        goto oom;
    size_t k = 0;
    for (char **e = environ; e && *e; e++)
        if (!env_is_ours(ep, *e))
            ep->envp[k++] = *e;
    for (size_t i = 0; i < 4; i++)
        if (ep->vars[i])
            ep->envp[k++] = ep->vars[i];
    for (size_t i = 0; i < ep->npeer; i++)
        ep->envp[k++] = ep->peer[i];
    for (size_t i = 0; i < nextra; i++)
        ep->envp[k++] = ep->extra[i];

    ep->fd_limit = sysconf(_SC_OPEN_MAX);
    if (ep->fd_limit <= 0 || ep->fd_limit > 65536)
        ep->fd_limit = 65536;
    ep->nkeep = cli_inherited_fds(&ep->keep);
    return 0;
oom:
    errno = ENOMEM;
fail:;
    int e = errno;
    plan_free(ep);
    errno = e;
    return -1;
}

/* ---- the child ---------------------------------------------------------- */

/* What the child sends back through its CLOEXEC pipe when it fails before
 * the command runs (nothing arrives when exec succeeds). */
typedef struct child_failure {
    int stage;
    int err;
} child_failure;

enum { STAGE_SETPGID = 1, STAGE_PDEATHSIG, STAGE_EXEC };

static struct sigaction old_ttou;
static int ttou_saved;

__attribute__((noreturn)) static void child_fail(int fd, int stage, int err, int code)
{
    child_failure f = {stage, err};
    if (write(fd, &f, sizeof f) < 0) {
        /* dlock is gone; our exit status is all that is left */
    }
    _exit(code);
}

static void cloexec_range(unsigned lo, unsigned hi, long limit)
{
#ifdef SYS_close_range
    if (syscall(SYS_close_range, lo, hi, CLOSE_RANGE_CLOEXEC) == 0)
        return;
#endif
    for (unsigned long fd = lo; fd <= hi && fd < (unsigned long)limit; fd++)
        (void)fcntl((int)fd, F_SETFD, FD_CLOEXEC);
}

__attribute__((noreturn)) static void child_main(exec_plan *ep, int go_fd, int err_fd,
                                                 pid_t parent)
{
    if (setpgid(0, 0) < 0)
        child_fail(err_fd, STAGE_SETPGID, errno, CLI_EXIT_SOFTWARE);
    if (prctl(PR_SET_PDEATHSIG, SIGKILL, 0, 0, 0) < 0)
        child_fail(err_fd, STAGE_PDEATHSIG, errno, CLI_EXIT_SOFTWARE);
    if (getppid() != parent)
        _exit(CLI_EXIT_SOFTWARE); /* dlock died before the death signal was armed */
    /* Wait until dlock has set up the terminal and the guardian; end of file
     * means it died meanwhile. */
    char go;
    ssize_t r;
    do
        r = read(go_fd, &go, 1);
    while (r < 0 && errno == EINTR);
    if (r != 1)
        _exit(CLI_EXIT_SOFTWARE);
    close(go_fd);

    /* The command gets the descriptors our caller gave us (fd 3 and up
     * included, as flock(1) and timeout(1) do) and nothing of ours. */
    unsigned lo = 3;
    for (size_t i = 0; i < ep->nkeep; i++) {
        unsigned k = (unsigned)ep->keep[i];
        if (k < lo)
            continue;
        if (k > lo)
            cloexec_range(lo, k - 1, ep->fd_limit);
        lo = k + 1;
    }
    cloexec_range(lo, ~0U, ep->fd_limit);
    if (ep->url_fd >= 0 && fcntl(ep->url_fd, F_SETFD, 0) < 0)
        child_fail(err_fd, STAGE_EXEC, errno, CLI_EXIT_SOFTWARE);

    if (ttou_saved)
        sigaction(SIGTTOU, &old_ttou, NULL);
    cli_sig_restore();

    int err = ENOENT, eacces = 0;
    for (size_t i = 0; i < ep->npaths; i++) {
        execve(ep->paths[i], ep->argv, ep->envp);
        err = errno;
        if (err == ENOEXEC) {
            /* as execvp: a file without "#!" is a shell script */
            ep->sh_argv[1] = ep->paths[i];
            execve("/bin/sh", ep->sh_argv, ep->envp);
            err = errno;
        }
        if (err == EACCES) {
            eacces = 1;
            continue;
        }
        if (err != ENOENT && err != ENOTDIR && err != ESTALE && err != ENODEV &&
            err != ETIMEDOUT)
            break;
    }
    if (eacces && (err == ENOENT || err == ENOTDIR || err == ESTALE || err == ENODEV ||
                   err == ETIMEDOUT))
        err = EACCES;
    child_fail(err_fd, STAGE_EXEC, err,
               err == ENOENT ? CLI_EXIT_NOT_FOUND : CLI_EXIT_CANNOT_EXEC);
}

/* ---- the guardian ------------------------------------------------------- */

/* Whether a process of group pgid is still running (zombies do not count:
 * they hold nothing and run nothing, and a container's init may never reap
 * them). Raw system calls only: we are a fork of a threaded process. */
static int group_running(pid_t pgid)
{
    if (kill(-pgid, 0) < 0 && errno == ESRCH)
        return 0;
    int dfd = open("/proc", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (dfd < 0)
        return 1;
    struct dent {
        uint64_t ino;
        int64_t off;
        unsigned short reclen;
        unsigned char type;
        char name[];
    };
    char buf[4096] __attribute__((aligned(8)));
    int running = 0;
    long n;
    while (!running && (n = syscall(SYS_getdents64, dfd, buf, sizeof buf)) > 0) {
        for (long off = 0; off < n && !running;) {
            const struct dent *d = (const struct dent *)(void *)(buf + off);
            off += d->reclen;
            char path[64] = "/proc/";
            size_t k = 6, i = 0;
            while (d->name[i] >= '0' && d->name[i] <= '9' && k < 50)
                path[k++] = d->name[i++];
            if (i == 0 || d->name[i])
                continue;
            memcpy(path + k, "/stat", 6);
            int fd = open(path, O_RDONLY | O_CLOEXEC);
            if (fd < 0)
                continue;
            char st[512];
            ssize_t r = read(fd, st, sizeof st - 1);
            close(fd);
            if (r <= 0)
                continue;
            st[r] = '\0';
            /* "pid (comm) S ppid pgrp ...": comm may hold anything but ')' ends it */
            const char *p = strrchr(st, ')');
            if (!p || !p[1] || !p[2])
                continue;
            char state = p[2];
            p += 3;
            while (*p == ' ')
                p++;
            while (*p && *p != ' ')
                p++; /* ppid */
            long pg = 0;
            while (*++p >= '0' && *p <= '9')
                pg = pg * 10 + (*p - '0');
            if (pg == (long)pgid && state != 'Z' && state != 'X')
                running = 1;
        }
    }
    close(dfd);
    return running;
}

/* dlock -> guardian messages: fixed size, below PIPE_BUF, so each write
 * arrives whole. 'd' + int64: the lease stops being valid at this
 * cli_now_ms() (-1: no limit); 'q': dlock is done, exit quietly. */
#define GUARD_MSG 9
/* The guardian's exit status after it ended the command because the lease
 * ran out unrenewed: dlock must not replace it, and reports the loss. */
#define GUARD_EXIT_LATE 3

typedef struct guard_args {
    pid_t pgid;
    int rfd, devnull;
    const int *closefds;
    size_t nclose;
    const char *died_msg, *late_msg; /* lines for stderr, prepared before fork */
    size_t died_len, late_len;
    int kill_sig, grace_ms;
    int slack_ms; /* past the deadline: a live dlock acts first */
} guard_args;

static void guard_say(const char *msg, size_t len)
{
    if (write(STDERR_FILENO, msg, len) < 0) {
        /* nowhere to report it */
    }
}

/* SIGKILL the group and wait (boundedly) until it is gone before letting go
 * of the lock's descriptors; SIGKILL again for members forked meanwhile. */
static void guard_kill_all(pid_t pgid)
{
    kill(-pgid, SIGKILL);
    for (int i = 0; i < 200; i++) {
        if (!group_running(pgid))
            break;
        struct timespec ts = {0, 5 * 1000 * 1000};
        nanosleep(&ts, NULL);
        kill(-pgid, SIGKILL);
    }
}

/* The lease ran out and dlock said nothing: it is stopped or starved, and
 * someone else may hold the lock now. Do what dlock does on loss. */
__attribute__((noreturn)) static void guard_late(const guard_args *a)
{
    guard_say(a->late_msg, a->late_len);
    kill(-a->pgid, a->kill_sig);
    if (a->kill_sig != SIGKILL) {
        /* Stopped members could not act on the signal. */
        if (a->kill_sig != SIGCONT)
            kill(-a->pgid, SIGCONT);
        int64_t until = cli_now_ms() + a->grace_ms;
        while (group_running(a->pgid)) {
            int64_t left = until - cli_now_ms();
            if (left <= 0)
                break;
            /* Short steps to notice the group's end; dlock dying (end of
             * file) cuts the grace short. */
            struct pollfd pfd = {.fd = a->rfd, .events = POLLIN};
            if (poll(&pfd, 1, left < 20 ? (int)left : 20) > 0) {
                char b[GUARD_MSG];
                if (read(a->rfd, b, sizeof b) == 0)
                    break;
            }
        }
    }
    guard_kill_all(a->pgid);
    _exit(GUARD_EXIT_LATE);
}

__attribute__((noreturn)) static void guardian_main(const guard_args *a)
{
    /* Its own process group: a kill aimed at dlock's job (kill -9 %1) must
     * not take the guardian along. */
    (void)setpgid(0, 0);
    /* The raw call: forked from a process with threads, the guardian may
     * only make calls that take no lock, and the sanitizers' prctl wrapper
     * records a new name under a lock another thread may have held at the
     * fork (an ASan run hung here). */
    (void)syscall(SYS_prctl, PR_SET_NAME, "dlock-guardian", 0, 0, 0);
    static const int ignored[] = {SIGINT, SIGTERM, SIGHUP, SIGQUIT, SIGUSR1,
                                  SIGUSR2, SIGPIPE, SIGTSTP, SIGTTIN, SIGTTOU};
    static const int dfl[] = {SIGWINCH, SIGCONT, SIGCHLD};
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = SIG_IGN;
    for (size_t i = 0; i < sizeof ignored / sizeof ignored[0]; i++)
        sigaction(ignored[i], &sa, NULL);
    sa.sa_handler = SIG_DFL;
    for (size_t i = 0; i < sizeof dfl / sizeof dfl[0]; i++)
        sigaction(dfl[i], &sa, NULL);
    sigset_t none;
    sigemptyset(&none);
    sigprocmask(SIG_SETMASK, &none, NULL);
    cli_sig_forget();
    /* Keep stderr for the one message; never hold the caller's stdin/stdout
     * (a reader of our output would wait for the guardian). */
    if (a->devnull >= 0) {
        dup2(a->devnull, STDIN_FILENO);
        dup2(a->devnull, STDOUT_FILENO);
        close(a->devnull);
    }
    for (size_t i = 0; i < a->nclose; i++)
        if (a->closefds[i] != a->rfd && a->closefds[i] > STDERR_FILENO)
            close(a->closefds[i]);
    /* Every other descriptor stays open on purpose: the lock's own (a file
     * lock's description, a session's connection) then outlives dlock until
     * the command's group is dead, so the lock is never free while the
     * command still runs. */
    int64_t deadline = -1; /* no limit until dlock names one */
    unsigned char msg[GUARD_MSG];
    size_t have = 0;
    for (;;) {
        int timeout = -1;
        if (deadline >= 0) {
            int64_t left = deadline + a->slack_ms - cli_now_ms();
            if (left <= 0)
                guard_late(a);
            timeout = left > INT_MAX ? INT_MAX : (int)left;
        }
        struct pollfd pfd = {.fd = a->rfd, .events = POLLIN};
        int n = poll(&pfd, 1, timeout);
        if (n < 0 && errno != EINTR) {
            /* Cannot wait with a timeout (ENOMEM): retry shortly rather
             * than give up either duty. */
            struct timespec ts = {0, 10 * 1000 * 1000};
            nanosleep(&ts, NULL);
            continue;
        }
        if (n <= 0)
            continue; /* the deadline is checked at the top */
        ssize_t r = read(a->rfd, msg + have, sizeof msg - have);
        if (r < 0 && errno == EINTR)
            continue;
        if (r <= 0)
            break; /* end of file (or a broken pipe): dlock died */
        have += (size_t)r;
        if (have < sizeof msg)
            continue; /* writes are atomic, but a partial read costs nothing */
        have = 0;
        if (msg[0] == 'q')
            _exit(0); /* dlock finished normally */
        if (msg[0] == 'd')
            memcpy(&deadline, msg + 1, sizeof deadline);
    }
    guard_say(a->died_msg, a->died_len);
    guard_kill_all(a->pgid);
    _exit(0);
}

/* ---- supervision -------------------------------------------------------- */

typedef struct sup {
    const cli_supervise_cfg *cfg;
    char shown[CLI_SHOW_MAX]; /* the lock name, quoted */
    pid_t child, pgid, guardian;
    int guard_fd;  /* write end: GUARD_MSG messages; end of file "dlock died" */
    int lease;     /* the lock is a lease: keep the guardian's deadline current */
    int64_t deadline_sent; /* last deadline told to the guardian, -1 none */
    int64_t refresh_at;    /* when to look at dlock_valid_ms again */
    int delivered;         /* the remembered signals went to the command */
    int tty;       /* our terminal (stdin), -1 if none */
    int handed;    /* the command's group is in the terminal's foreground */
    int child_done, status;
    int err_fd;
    int failed;
    child_failure fail;
    int lost, killed;
    int64_t grace_at, kill_at, lose_at;
} sup;

/* The length of what snprintf wrote into a buffer of len bytes. */
static size_t line(size_t len, int n)
{
    if (n < 0)
        return 0;
    return (size_t)n < len ? (size_t)n : len - 1;
}

/* Start the guardian (go_w: the child's start pipe, -1 once it is closed).
 * Also called from reap() to replace a dead guardian: fork from a threaded
 * process, so nothing but async-signal-safe calls in the child. */
static pid_t guardian_start(sup *s, int go_w)
{
    int gp[2];
    if (pipe2(gp, O_CLOEXEC) < 0)
        return -1;
    int devnull = open("/dev/null", O_RDWR | O_CLOEXEC);
    const int *keep;
    size_t nkeep = cli_inherited_fds(&keep);
    int closefds[80];
    size_t nclose = 0;
    closefds[nclose++] = gp[1];
    if (go_w >= 0)
        closefds[nclose++] = go_w;
    if (s->err_fd >= 0)
        closefds[nclose++] = s->err_fd;
    for (size_t i = 0; i < nkeep && nclose < sizeof closefds / sizeof closefds[0]; i++)
        closefds[nclose++] = keep[i];
    char died[256], late[320];
    /* The span of the lock as held (a session backend's is its own, not the
     * ttl asked for), else the ttl asked for. */
    long long valid = dlock_valid_ms(s->cfg->lock);
    int slack_ms = (int)((valid > 0 ? valid : s->cfg->ttl_ms) / 200 + 1);
    guard_args a = {
        .pgid = s->pgid,
        .rfd = gp[0],
        .devnull = devnull,
        .closefds = closefds,
        .nclose = nclose,
        .died_msg = died,
        .late_msg = late,
        .kill_sig = s->cfg->kill_sig,
        .grace_ms = s->cfg->kill_grace_ms,
        .slack_ms = slack_ms, /* half the library's drift allowance */
    };
    a.died_len = line(sizeof died,
                      snprintf(died, sizeof died,
                               "dlock: %s: dlock died while holding lock %s; killed the "
                               "command's process group %ld\n",
                               s->cfg->cmdname, s->shown, (long)s->pgid));
    a.late_len = line(sizeof late,
                      snprintf(late, sizeof late,
                               "dlock: %s: lock %s not renewed in time (is dlock stopped?); "
                               "killed the command's process group %ld\n",
                               s->cfg->cmdname, s->shown, (long)s->pgid));
    pid_t pid = fork();
    if (pid == 0)
        guardian_main(&a);
    int saved = errno;
    close(gp[0]);
    if (devnull >= 0)
        close(devnull);
    if (pid < 0) {
        close(gp[1]);
        errno = saved;
        return -1;
    }
    s->guard_fd = gp[1];
    s->deadline_sent = -1; /* a new guardian knows no deadline yet */
    return pid;
}

/* One message to the guardian. EPIPE (SIGPIPE is ignored) means it died:
 * reap() replaces it and tells the new one. */
static int guard_send(sup *s, char kind, int64_t value)
{
    if (s->guard_fd < 0)
        return -1;
    unsigned char m[GUARD_MSG];
    m[0] = (unsigned char)kind;
    memcpy(m + 1, &value, sizeof value);
    ssize_t w;
    do
        w = write(s->guard_fd, m, sizeof m);
    while (w < 0 && errno == EINTR);
    if (w == (ssize_t)sizeof m)
        return 0;
    if (w >= 0 || errno != EPIPE)
        cli_err("%s: cannot write to the guardian process: %s", s->cfg->cmdname,
                w < 0 ? strerror(errno) : "short write");
    return -1;
}

/* Tell the guardian when the lease stops being valid, if that moved. The
 * lease is renewed every ttl/3, so at least 2/3 of it is left after each
 * renewal: looking again after a quarter of what is left keeps the
 * guardian's deadline ahead of its expiry by a wide margin. What is left
 * says it, not the ttl asked for: a session backend's lock has a span of
 * its own (ZooKeeper: 2/3 of the session timeout). */
static void deadline_refresh(sup *s)
{
    if (!s->lease || s->lost || s->guardian <= 0)
        return;
    int64_t now = cli_now_ms();
    long long valid = dlock_valid_ms(s->cfg->lock);
    long long step = (valid > 0 ? valid : s->cfg->ttl_ms) / 4;
    s->refresh_at = now + (step > 0 ? step : 1);
    if (valid < 0)
        return; /* not a lease after all: no time limit */
    int64_t deadline = now + valid;
    /* Two readings of one deadline differ by rounding: not worth a write. */
    if (s->deadline_sent >= 0 && deadline >= s->deadline_sent - 2 &&
        deadline <= s->deadline_sent + 2)
        return;
    if (guard_send(s, 'd', deadline) == 0)
        s->deadline_sent = deadline;
}

static void guardian_stop(sup *s)
{
    if (s->guard_fd >= 0) {
        /* A failure means the guardian is gone already; nothing to tell. */
        (void)guard_send(s, 'q', 0);
        close(s->guard_fd);
        s->guard_fd = -1;
    }
    if (s->guardian > 0) {
        while (waitpid(s->guardian, NULL, 0) < 0 && errno == EINTR) {
        }
        s->guardian = -1;
    }
}

/* Terminal job control: the command's group gets the terminal while we are
 * in the foreground, and we take it back afterwards. SIGTTOU is ignored
 * meanwhile, so that taking it back from the background does not stop us. */
static void tty_handoff(sup *s)
{
    if (s->tty >= 0 && tcgetpgrp(s->tty) == getpgrp() && tcsetpgrp(s->tty, s->pgid) == 0)
        s->handed = 1;
}

static void tty_takeback(sup *s)
{
    if (s->handed && tcgetpgrp(s->tty) == s->pgid)
        (void)tcsetpgrp(s->tty, getpgrp());
    s->handed = 0;
}

static void on_child_stop(sup *s, int sig)
{
    /* Stopped by job control (^Z, or touching the terminal from the
     * background): stop along, so that the shell sees the job stop. A
     * SIGSTOP from a debugger is not job control. SIGCONT (forwarded)
     * resumes both. */
    if (sig != SIGTSTP && sig != SIGTTIN && sig != SIGTTOU)
        return;
    tty_takeback(s);
    kill(getpid(), SIGSTOP);
}

/* The command may no longer run: --kill-signal to its group now, SIGKILL
 * after --kill-grace (supervise_loop), then exit 75. */
static void kill_group(sup *s)
{
    const cli_supervise_cfg *cfg = s->cfg;
    s->lost = 1;
    /* dlock acts itself from here on: the guardian must not also act on the
     * lease deadline (and claim that dlock is stopped). */
    if (s->lease)
        (void)guard_send(s, 'd', -1);
    kill(-s->pgid, cfg->kill_sig);
    if (cfg->kill_sig == SIGKILL) {
        s->killed = 1;
        s->kill_at = cli_now_ms() + 1000;
        return;
    }
    /* Stopped members could not act on the signal. */
    if (cfg->kill_sig != SIGCONT)
        kill(-s->pgid, SIGCONT);
    s->grace_at = cli_now_ms() + cfg->kill_grace_ms;
}

static const char *status_text(int st, char *buf, size_t len)
{
    char sname[16];
    if (WIFSIGNALED(st))
        snprintf(buf, len, "killed by %s", cli_signal_name(WTERMSIG(st), sname, sizeof sname));
    else if (WIFEXITED(st))
        snprintf(buf, len, "exit status %d", WEXITSTATUS(st));
    else
        snprintf(buf, len, "status %#x", (unsigned)st);
    return buf;
}

/* The guardian is gone (st: its wait status). */
static void guardian_gone(sup *s, int st)
{
    const cli_supervise_cfg *cfg = s->cfg;
    s->guardian = -1;
    if (s->guard_fd >= 0) {
        close(s->guard_fd);
        s->guard_fd = -1;
    }
    if (WIFEXITED(st) && WEXITSTATUS(st) == GUARD_EXIT_LATE) {
        /* It found the lease run out while we could not act, ended the
         * command's group and said so; the lock is gone: report the loss
         * (exit 75) and never replace it. */
        if (!s->lost) {
            cli_err("%s: lock %s was lost while dlock could not act (lease not renewed in "
                    "time); its guardian killed the command's process group %ld",
                    cfg->cmdname, s->shown, (long)s->pgid);
            cli_ev_lost(cfg->name, cfg->token,
                        "the lease ran out while dlock could not act: not renewed in time");
            s->lost = 1;
            s->killed = 1;
            s->kill_at = cli_now_ms() + 1000;
        }
        return;
    }
    if (s->child_done && !s->lost)
        return; /* the command is over: nothing left to guard */
    char how[48];
    status_text(st, how, sizeof how);
    /* Without a guardian the command would outlive a dlock that dies: get
     * a new one at once, or stop the command. */
    pid_t pid = guardian_start(s, -1);
    if (pid < 0) {
        char sname[16];
        cli_err("%s: the guardian process died (%s) and a new one cannot be started: %s; "
                "sending %s to the command's process group",
                cfg->cmdname, how, strerror(errno),
                cli_signal_name(cfg->kill_sig, sname, sizeof sname));
        if (!s->lost)
            kill_group(s);
        return;
    }
    s->guardian = pid;
    cli_err("%s: the guardian process died (%s); started a new one (pid %ld)", cfg->cmdname, how,
            (long)pid);
    if (!s->lost)
        deadline_refresh(s);
}

static void reap(sup *s)
{
    for (;;) {
        int st;
        pid_t pid = waitpid(-1, &st, WNOHANG | WUNTRACED);
        if (pid < 0 && errno == EINTR)
            continue;
        if (pid <= 0)
            return;
        if (pid == s->guardian) {
            if (!WIFSTOPPED(st))
                guardian_gone(s, st);
            continue;
        }
        if (pid != s->child || s->child_done)
            continue; /* an orphan of the command, adopted as subreaper */
        if (WIFSTOPPED(st)) {
            on_child_stop(s, WSTOPSIG(st));
            continue;
        }
        s->child_done = 1;
        s->status = st;
    }
}

static void forward(sup *s, int sig)
{
    if (sig == SIGCONT)
        tty_handoff(s);
    if (kill(-s->pgid, sig) < 0 && errno != ESRCH && s->cfg->verbose)
        cli_err("%s: cannot forward signal %d: %s", s->cfg->cmdname, sig, strerror(errno));
}

static void on_loss(sup *s)
{
    const cli_supervise_cfg *cfg = s->cfg;
    char sname[16];
    cli_lost_ack(cfg->lock);
    const char *why = dlock_lock_errmsg(cfg->lock);
    char what[CLI_SHOW_MAX + 16];
    snprintf(what, sizeof what, "lock %s lost", s->shown);
    /* The library's message names the lock and says why. */
    cli_err("%s: %s; sending %s to the command's process group", cfg->cmdname,
            why && *why ? why : what, cli_signal_name(cfg->kill_sig, sname, sizeof sname));
    cli_ev_lost(cfg->name, cfg->token, why && *why ? why : what);
    kill_group(s);
}

/* The command has started (exec succeeded): the signals that reached dlock
 * while it waited for the lock are for it. */
static void deliver_remembered(sup *s)
{
    const cli_supervise_cfg *cfg = s->cfg;
    if (s->delivered)
        return;
    s->delivered = 1;
    for (size_t i = 0; i < cfg->ndeliver; i++) {
        if (cfg->verbose) {
            char sname[16];
            cli_err("%s: delivering %s, received while waiting, to the command", cfg->cmdname,
                    cli_signal_name(cfg->deliver[i], sname, sizeof sname));
        }
        if (kill(-s->pgid, cfg->deliver[i]) < 0 && errno != ESRCH)
            cli_err("%s: cannot deliver signal %d to the command: %s", cfg->cmdname,
                    cfg->deliver[i], strerror(errno));
    }
}

static int group_gone(const sup *s)
{
    return kill(-s->pgid, 0) < 0 && errno == ESRCH;
}

static void read_failure(sup *s)
{
    child_failure f;
    ssize_t r;
    do
        r = read(s->err_fd, &f, sizeof f);
    while (r < 0 && errno == EINTR);
    if (r == (ssize_t)sizeof f) {
        s->failed = 1;
        s->fail = f;
    }
    close(s->err_fd);
    s->err_fd = -1;
}

static int supervise_loop(sup *s)
{
    const cli_supervise_cfg *cfg = s->cfg;
    int lost_fd = dlock_lost_fd(cfg->lock);
    for (;;) {
        int64_t now = cli_now_ms();
        if (s->child_done) {
            if (!s->lost || group_gone(s))
                return 0;
            /* Stragglers the second SIGKILL did not remove within a second
             * are unkillable (uninterruptible sleep) or zombies of others. */
            if (s->killed && now >= s->kill_at)
                return 0;
        }
        int64_t wake = -1;
        if (s->lose_at >= 0 && !s->lost)
            wake = s->lose_at;
        if (s->lost && !s->killed)
            wake = s->grace_at;
        if (s->killed)
            /* after that, only the command's own end (SIGCHLD) matters */
            wake = s->kill_at > now ? s->kill_at : -1;
        if (s->lease && !s->lost && s->guardian > 0 && (wake < 0 || s->refresh_at < wake))
            wake = s->refresh_at;

        struct pollfd fds[4];
        nfds_t n = 0;
        fds[n++] = (struct pollfd){.fd = cli_sig_fd(), .events = POLLIN};
        int lost_i = -1, err_i = -1, warn_i = -1;
        if (!s->lost && cfg->warn_fd >= 0) {
            warn_i = (int)n;
            fds[n++] = (struct pollfd){.fd = cfg->warn_fd, .events = POLLIN};
        }
        if (!s->lost && lost_fd >= 0) {
            lost_i = (int)n;
            fds[n++] = (struct pollfd){.fd = lost_fd, .events = POLLIN};
        }
        if (s->err_fd >= 0) {
            err_i = (int)n;
            fds[n++] = (struct pollfd){.fd = s->err_fd, .events = POLLIN};
        }
        struct timespec ts, *tsp = NULL;
        if (wake >= 0) {
            int64_t left = wake > now ? wake - now : 0;
            ts.tv_sec = left / 1000;
            ts.tv_nsec = (left % 1000) * 1000000;
            tsp = &ts;
        }
        int r = ppoll(fds, n, tsp, cli_sig_pollmask());
        if (r < 0 && errno != EINTR) {
            cli_err("%s: poll: %s", cfg->cmdname, strerror(errno));
            return -1;
        }
        if (r > 0 && err_i >= 0 && fds[err_i].revents) {
            read_failure(s);
            /* End of file without a failure: the command was executed. */
            if (!s->failed)
                deliver_remembered(s);
        }
        /* A warning is told before its loss: read it first. */
        if (r > 0 && warn_i >= 0 && fds[warn_i].revents)
            cli_warned(cfg->cmdname, cfg->name, cfg->lock, cfg->token, cfg->warn_sig, s->pgid,
                       cfg->warn_fd, cfg->warn_sig || cfg->verbose);
        if (r > 0 && lost_i >= 0 && fds[lost_i].revents)
            on_loss(s);
        int sig;
        while ((sig = cli_sig_next()) != 0) {
            if (sig == SIGCHLD)
                reap(s);
            else
                forward(s, sig);
        }
        now = cli_now_ms();
        if (s->lease && !s->lost && now >= s->refresh_at)
            deadline_refresh(s);
        if (s->lose_at >= 0 && now >= s->lose_at && !s->lost) {
            s->lose_at = -1;
            int rc = dlock_debug_force_loss(cfg->lock);
            if (rc)
                cli_err("%s: DLOCK_TEST_LOSE_AFTER_MS: cannot force the loss: %s", cfg->cmdname,
                        dlock_strerror(rc));
        }
        if (s->lost && !s->killed && now >= s->grace_at) {
            if (!group_gone(s)) {
                if (cfg->verbose)
                    cli_err("%s: kill grace over; sending SIGKILL to the command's process group",
                            cfg->cmdname);
                kill(-s->pgid, SIGKILL);
            }
            s->killed = 1;
            s->kill_at = now + 1000;
        }
    }
}

static int exit_code(sup *s)
{
    const cli_supervise_cfg *cfg = s->cfg;
    char shown[CLI_SHOW_MAX];
    if (s->failed) {
        switch (s->fail.stage) {
        case STAGE_EXEC:
            cli_err("%s: cannot execute %s: %s", cfg->cmdname,
                    cli_show(cfg->cmd[0], shown, sizeof shown), strerror(s->fail.err));
            int rc = s->fail.err == ENOENT ? CLI_EXIT_NOT_FOUND : CLI_EXIT_CANNOT_EXEC;
            cli_ev_error(cfg->name, "EXEC", rc, NULL);
            return rc;
        case STAGE_SETPGID:
            cli_err("%s: cannot start the command: setpgid: %s", cfg->cmdname,
                    strerror(s->fail.err));
            break;
        default:
            cli_err("%s: cannot start the command: prctl(PR_SET_PDEATHSIG): %s", cfg->cmdname,
                    strerror(s->fail.err));
            break;
        }
        cli_ev_error(cfg->name, "INTERNAL", CLI_EXIT_SOFTWARE, NULL);
        return CLI_EXIT_SOFTWARE;
    }
    /* The command's end, lost lock or not: status or signal. */
    cli_event e;
    if (cli_ev_begin(&e, "exit", cfg->name)) {
        char sname[16];
        cli_ev_u64(&e, "token", cfg->token);
        if (WIFEXITED(s->status))
            cli_ev_int(&e, "status", WEXITSTATUS(s->status));
        else
            cli_ev_str(&e, "status", NULL);
        cli_ev_str(&e, "signal",
                   WIFSIGNALED(s->status)
                       ? cli_signal_name(WTERMSIG(s->status), sname, sizeof sname)
                       : NULL);
        cli_ev_end(&e);
    }
    if (s->lost)
        return CLI_EXIT_LOST;
    if (WIFEXITED(s->status)) {
        if (cfg->verbose)
            cli_err("%s: command exited with status %d", cfg->cmdname, WEXITSTATUS(s->status));
        return WEXITSTATUS(s->status);
    }
    if (WIFSIGNALED(s->status)) {
        if (cfg->died_sig)
            *cfg->died_sig = WTERMSIG(s->status);
        if (cfg->died_with_tty)
            *cfg->died_with_tty = s->handed;
        if (cfg->verbose) {
            char sname[16];
            cli_err("%s: command killed by %s", cfg->cmdname,
                    cli_signal_name(WTERMSIG(s->status), sname, sizeof sname));
        }
        return 128 + WTERMSIG(s->status);
    }
    return CLI_EXIT_SOFTWARE;
}

int cli_supervise(const cli_supervise_cfg *cfg)
{
    sup s;
    memset(&s, 0, sizeof s);
    s.cfg = cfg;
    s.guard_fd = s.err_fd = -1;
    s.guardian = -1;
    s.deadline_sent = -1;
    /* -1: liveness is not a lease (file, sessions): no time limit. */
    s.lease = dlock_valid_ms(cfg->lock) >= 0;
    s.lose_at = cfg->lose_at_ms;
    cli_show(cfg->name, s.shown, sizeof s.shown);

    exec_plan ep;
    if (plan_build(cfg, &ep) < 0) {
        cli_err("%s: cannot prepare the command: %s", cfg->cmdname, strerror(errno));
        return CLI_EXIT_SOFTWARE;
    }
    /* Orphans of the command's group become ours, so their deaths wake us. */
    int subreaper = prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) == 0;

    int go[2] = {-1, -1}, err[2] = {-1, -1};
    if (pipe2(go, O_CLOEXEC) < 0 || pipe2(err, O_CLOEXEC) < 0) {
        cli_err("%s: cannot create a pipe: %s", cfg->cmdname, strerror(errno));
        for (int i = 0; i < 2; i++) {
            if (go[i] >= 0)
                close(go[i]);
            if (err[i] >= 0)
                close(err[i]);
        }
        plan_free(&ep);
        return CLI_EXIT_SOFTWARE;
    }
    s.tty = isatty(STDIN_FILENO) ? STDIN_FILENO : -1;
    if (s.tty >= 0) {
        struct sigaction ign;
        memset(&ign, 0, sizeof ign);
        ign.sa_handler = SIG_IGN;
        ttou_saved = sigaction(SIGTTOU, &ign, &old_ttou) == 0;
    }

    int rc = CLI_EXIT_SOFTWARE;
    pid_t parent = getpid();
    pid_t pid = fork();
    if (pid == 0)
        child_main(&ep, go[0], err[1], parent);
    int fork_errno = errno;
    close(go[0]);
    close(err[1]);
    s.err_fd = err[0];
    if (pid < 0) {
        cli_err("%s: cannot fork: %s", cfg->cmdname, strerror(fork_errno));
        close(go[1]);
        goto out;
    }
    s.child = s.pgid = pid;
    /* Both sides set the group, whichever runs first: the terminal and the
     * guardian need it now. */
    if (setpgid(pid, pid) < 0 && errno != EACCES && errno != ESRCH)
        cli_err("%s: setpgid: %s", cfg->cmdname, strerror(errno));
    tty_handoff(&s);
    if ((s.guardian = guardian_start(&s, go[1])) < 0) {
        /* Never run the command unprotected. */
        cli_err("%s: cannot start the guardian process: %s", cfg->cmdname, strerror(errno));
        close(go[1]); /* the child reads end of file and exits */
        kill(pid, SIGKILL);
        while (waitpid(pid, NULL, 0) < 0 && errno == EINTR) {
        }
        tty_takeback(&s);
        goto out;
    }
    /* The guardian knows the deadline before the command runs. */
    deadline_refresh(&s);
    if (write(go[1], "g", 1) != 1) {
        cli_err("%s: cannot start the command: %s", cfg->cmdname, strerror(errno));
        close(go[1]);
        kill(pid, SIGKILL);
        while (waitpid(pid, NULL, 0) < 0 && errno == EINTR) {
        }
        tty_takeback(&s);
        guardian_stop(&s);
        goto out;
    }
    close(go[1]);
    if (cfg->verbose) {
        char shown[CLI_SHOW_MAX];
        cli_err("%s: running %s as process group %ld", cfg->cmdname,
                cli_show(cfg->cmd[0], shown, sizeof shown), (long)pid);
    }

    if (supervise_loop(&s) == 0) {
        if (s.err_fd >= 0)
            read_failure(&s); /* the child is dead: this does not block */
        rc = exit_code(&s);
    } else {
        kill(-s.pgid, SIGKILL);
        while (!s.child_done && waitpid(pid, NULL, 0) < 0 && errno == EINTR) {
        }
    }
    tty_takeback(&s);
    /* Before the caller releases: the guardian holds copies of the lock's
     * descriptors, and a file lock lives as long as any copy. */
    guardian_stop(&s);
out:
    if (s.err_fd >= 0)
        close(s.err_fd);
    if (ttou_saved) {
        sigaction(SIGTTOU, &old_ttou, NULL);
        ttou_saved = 0;
    }
    if (subreaper)
        (void)prctl(PR_SET_CHILD_SUBREAPER, 0, 0, 0, 0);
    plan_free(&ep);
    return rc;
}
