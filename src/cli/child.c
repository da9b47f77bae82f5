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
 * their deaths wake the supervision loop: no polling anywhere. Everything
 * between fork and exec is async-signal-safe (the library runs threads), so
 * the paths, argv and environment are prepared before forking.
 */
#include "cli.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
#include <poll.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#ifndef CLOSE_RANGE_CLOEXEC
#define CLOSE_RANGE_CLOEXEC (1U << 2)
#endif

extern char **environ;

/* ---- what the child will exec ------------------------------------------- */

typedef struct exec_plan {
    char **argv;    /* the command */
    char **paths;   /* candidate files, PATH order (execvp's search) */
    size_t npaths;
    char **sh_argv; /* "/bin/sh" FILE ARGS...: for files without #! (ENOEXEC) */
    char **envp;
    char *vars[3];  /* DLOCK_NAME=, DLOCK_TOKEN=, DLOCK_URL= */
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
    for (size_t i = 0; i < 3; i++)
        free(ep->vars[i]);
    memset(ep, 0, sizeof *ep);
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

static int env_is_ours(const char *e)
{
    return strncmp(e, "DLOCK_NAME=", 11) == 0 || strncmp(e, "DLOCK_TOKEN=", 12) == 0 ||
           strncmp(e, "DLOCK_URL=", 10) == 0;
}

static int plan_build(const cli_supervise_cfg *cfg, exec_plan *ep)
{
    memset(ep, 0, sizeof *ep);
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
    snprintf(token, sizeof token, "%" PRIu64, dlock_token(cfg->lock));
    const char *url = dlock_client_url(cfg->client); /* password already "***" */
    if (!(ep->vars[0] = join3("DLOCK_NAME", "=", cfg->name)) ||
        !(ep->vars[1] = join3("DLOCK_TOKEN", "=", token)) ||
        !(ep->vars[2] = join3("DLOCK_URL", "=", url ? url : "")))
        goto oom;
    size_t nenv = 0;
    for (char **e = environ; e && *e; e++)
        nenv++;
    if (!(ep->envp = calloc(nenv + 4, sizeof *ep->envp)))
        goto oom;
    size_t k = 0;
    for (char **e = environ; e && *e; e++)
        if (!env_is_ours(*e))
            ep->envp[k++] = *e;
    for (size_t i = 0; i < 3; i++)
        ep->envp[k++] = ep->vars[i];

    ep->fd_limit = sysconf(_SC_OPEN_MAX);
    if (ep->fd_limit <= 0 || ep->fd_limit > 65536)
        ep->fd_limit = 65536;
    ep->nkeep = cli_inherited_fds(&ep->keep);
    return 0;
oom:
    plan_free(ep);
    errno = ENOMEM;
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

__attribute__((noreturn)) static void guardian_main(pid_t pgid, int rfd, int devnull,
                                                    const int *closefds, size_t nclose,
                                                    const char *msg, size_t msglen)
{
    /* Its own process group: a kill aimed at dlock's job (kill -9 %1) must
     * not take the guardian along. */
    (void)setpgid(0, 0);
    (void)prctl(PR_SET_NAME, "dlock-guardian", 0, 0, 0);
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
    if (devnull >= 0) {
        dup2(devnull, STDIN_FILENO);
        dup2(devnull, STDOUT_FILENO);
        close(devnull);
    }
    for (size_t i = 0; i < nclose; i++)
        if (closefds[i] != rfd && closefds[i] > STDERR_FILENO)
            close(closefds[i]);
    /* Every other descriptor stays open on purpose: the lock's own (a file
     * lock's description, a session's connection) then outlives dlock until
     * the command's group is dead, so the lock is never free while the
     * command still runs. */
    char b;
    ssize_t r;
    do
        r = read(rfd, &b, 1);
    while (r < 0 && errno == EINTR);
    if (r == 1)
        _exit(0); /* dlock finished normally */
    kill(-pgid, SIGKILL);
    if (write(STDERR_FILENO, msg, msglen) < 0) {
        /* nowhere to report it */
    }
    /* Wait (boundedly) until the group is gone before letting go of the
     * lock's descriptors; SIGKILL again for members forked meanwhile. */
    for (int i = 0; i < 200; i++) {
        if (!group_running(pgid))
            break;
        struct timespec ts = {0, 5 * 1000 * 1000};
        nanosleep(&ts, NULL);
        kill(-pgid, SIGKILL);
    }
    _exit(0);
}

/* ---- supervision -------------------------------------------------------- */

typedef struct sup {
    const cli_supervise_cfg *cfg;
    char shown[CLI_SHOW_MAX]; /* the lock name, quoted */
    pid_t child, pgid, guardian;
    int guard_fd;  /* write end: a byte says "quit", end of file "dlock died" */
    int tty;       /* our terminal (stdin), -1 if none */
    int handed;    /* the command's group is in the terminal's foreground */
    int child_done, status;
    int err_fd;
    int failed;
    child_failure fail;
    int lost, killed;
    int64_t grace_at, kill_at, lose_at;
} sup;

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
    closefds[nclose++] = go_w;
    closefds[nclose++] = s->err_fd;
    for (size_t i = 0; i < nkeep && nclose < sizeof closefds / sizeof closefds[0]; i++)
        closefds[nclose++] = keep[i];
    char msg[256];
    int msglen = snprintf(msg, sizeof msg,
                          "dlock: %s: dlock died while holding lock %s; killed the command's "
                          "process group %ld\n",
                          s->cfg->cmdname, s->shown, (long)s->pgid);
    if (msglen < 0)
        msglen = 0;
    if ((size_t)msglen >= sizeof msg)
        msglen = (int)sizeof msg - 1;
    pid_t pid = fork();
    if (pid == 0)
        guardian_main(s->pgid, gp[0], devnull, closefds, nclose, msg, (size_t)msglen);
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
    return pid;
}

static void guardian_stop(sup *s)
{
    if (s->guard_fd >= 0) {
        if (write(s->guard_fd, "q", 1) < 0) {
            /* the guardian is gone already; nothing to tell */
        }
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
            s->guardian = -1;
            cli_err("%s: the guardian process died; the command is no longer killed if dlock "
                    "dies",
                    s->cfg->cmdname);
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
    s->lost = 1;
    char what[CLI_SHOW_MAX + 16];
    snprintf(what, sizeof what, "lock %s lost", s->shown);
    /* The library's message names the lock and says why. */
    cli_err("%s: %s; sending %s to the command's process group", cfg->cmdname,
            why && *why ? why : what, cli_signal_name(cfg->kill_sig, sname, sizeof sname));
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

        struct pollfd fds[3];
        nfds_t n = 0;
        fds[n++] = (struct pollfd){.fd = cli_sig_fd(), .events = POLLIN};
        int lost_i = -1, err_i = -1;
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
        if (r > 0 && err_i >= 0 && fds[err_i].revents)
            read_failure(s);
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
            return s->fail.err == ENOENT ? CLI_EXIT_NOT_FOUND : CLI_EXIT_CANNOT_EXEC;
        case STAGE_SETPGID:
            cli_err("%s: cannot start the command: setpgid: %s", cfg->cmdname,
                    strerror(s->fail.err));
            return CLI_EXIT_SOFTWARE;
        default:
            cli_err("%s: cannot start the command: prctl(PR_SET_PDEATHSIG): %s", cfg->cmdname,
                    strerror(s->fail.err));
            return CLI_EXIT_SOFTWARE;
        }
    }
    if (s->lost)
        return CLI_EXIT_LOST;
    if (WIFEXITED(s->status)) {
        if (cfg->verbose)
            cli_err("%s: command exited with status %d", cfg->cmdname, WEXITSTATUS(s->status));
        return WEXITSTATUS(s->status);
    }
    if (WIFSIGNALED(s->status)) {
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
