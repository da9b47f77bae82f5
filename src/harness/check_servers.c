/* SPDX-License-Identifier: MIT */
/*
 * check_servers.c — the servers `dlock check` faults, found in a directory
 * that tests/servers.sh (or anyone else) fills with one NAME.pid, NAME.port
 * and NAME.cmd per server.
 *
 * What the deployment is comes from the backend's check adapter (src/tools.h,
 * through the client's backend table): its topology, its members (the URL's
 * hosts and the servers they name) and their roles, which of them hold a
 * lock, readiness, replication cut off, a failover awaited, and settling
 * back. Members are matched to the directory's servers by port on the
 * loopback interface. What is done to the processes is the same for every
 * backend and stays here: SIGKILL, SIGSTOP/SIGCONT, and a restart as
 * srv_restart in tests/servers.sh does it — NAME.cmd run again (without
 * persistence, so the server comes back empty), with the new pid written to
 * NAME.pid so that whoever started the servers still stops them all. A
 * server listens on 127.0.0.1 unless NAME.host gives its address. A server
 * may also have a way to be cut off from the other servers: NAME.links, the
 * pids of relays that carry its links to them, frozen (SIGSTOP); or else
 * NAME.partition, a program run with "on" or "off" (a server in a network
 * namespace of its own drops its packets to and from the others).
 */
#include "check.h"

#include <dlock.h>

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <poll.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#define SRV_MAX 64
#define CTL_TIMEOUT_MS 1000
#define START_WAIT_NS 10000000000LL
/* a SIGKILLed server may take seconds to exit on a loaded machine (seen: more
 * than 5 s for memcached beside stress-ng) */
#define GONE_WAIT_NS 15000000000LL
#define RESTORE_WAIT_NS 60000000000LL
/* NAME.partition on|off: a few commands (nft in a namespace) */
#define HOOK_WAIT_NS 10000000000LL

typedef struct srv {
    char name[64];
    char host[64]; /* NAME.host, else 127.0.0.1 */
    int port;
    pid_t pid;
    dh_member m; /* as the deployment names it, and its role there */
    bool dead;    /* killed or stopped by us, not started again */
    bool stopped; /* SIGSTOP */
} srv;

typedef struct srvset {
    char dir[4096];
    /* The backend's check adapter runs in a process of its own (see "the
     * adapter process" below), reached through this socket. */
    int ad_fd;
    int ad_cancel; /* one byte written here stops the adapter's waits */
    pid_t ad_pid;
    char ad_err[512]; /* the adapter's message for its last failure */
    int n;
    srv s[SRV_MAX];
    chk_servers pub;
} srvset;

/* ---- files and processes -------------------------------------------------- */

/* A small file's contents (at most len-1 bytes, NUL-terminated): their
 * length, or -1. */
static ssize_t read_path(const char *path, char *buf, size_t len)
{
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return -1;
    ssize_t n = read(fd, buf, len - 1);
    close(fd);
    if (n >= 0)
        buf[n] = '\0';
    return n;
}

static int read_file(const char *dir, const char *name, const char *ext, char *buf, size_t len)
{
    char path[4400];
    snprintf(path, sizeof path, "%s/%s.%s", dir, name, ext);
    ssize_t n = read_path(path, buf, len);
    if (n < 0)
        return -1;
    while (n > 0 && (buf[n - 1] == '\n' || buf[n - 1] == ' '))
        buf[--n] = '\0';
    return 0;
}

static int write_pid(const char *dir, const char *name, pid_t pid)
{
    char path[4400], tmp[4420], buf[32];
    snprintf(path, sizeof path, "%s/%s.pid", dir, name);
    snprintf(tmp, sizeof tmp, "%s.tmp%ld", path, (long)getpid());
    int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd < 0)
        return -1;
    int n = snprintf(buf, sizeof buf, "%ld\n", (long)pid);
    bool ok = write(fd, buf, (size_t)n) == n;
    ok &= close(fd) == 0;
    if (!ok || rename(tmp, path) != 0) {
        (void)unlink(tmp);
        return -1;
    }
    return 0;
}

/* A /proc stat file after the process's or thread's name ("S PPID ...";
 * the name may contain anything, so after the last ')'), in buf; NULL when
 * there is no such process. */
static const char *stat_fields(const char *path, char *buf, size_t len)
{
    if (read_path(path, buf, len) <= 0)
        return NULL;
    char *p = strrchr(buf, ')');
    return p && p[1] == ' ' && p[2] ? p + 2 : NULL;
}

static const char *proc_stat_fields(pid_t pid, char *buf, size_t len)
{
    char path[64];
    snprintf(path, sizeof path, "/proc/%ld/stat", (long)pid);
    return stat_fields(path, buf, len);
}

char chk_proc_state(pid_t pid)
{
    char buf[512];
    const char *f = proc_stat_fields(pid, buf, sizeof buf);
    return f ? f[0] : 0;
}

static bool proc_gone(pid_t pid)
{
    char st = chk_proc_state(pid);
    return st == 0 || st == 'Z' || st == 'X';
}

static int wait_state(pid_t pid, bool (*cond)(pid_t), int64_t ns)
{
    int64_t until = ms_now_ns() + ns;
    while (!cond(pid)) {
        if (ms_now_ns() >= until)
            return -ETIMEDOUT;
        ms_sleep_ns(1000000);
    }
    return 0;
}

static bool proc_stopped(pid_t pid)
{
    char st = chk_proc_state(pid);
    return st == 'T' || st == 't' || st == 0;
}

static bool loopback(const char *host)
{
    return strcmp(host, "127.0.0.1") == 0 || strcasecmp(host, "localhost") == 0 ||
           strcmp(host, "::1") == 0;
}

/* The directory's server at a member's address, or -1. */
static int by_addr(const srvset *ss, const dh_server *a)
{
    for (int i = 0; i < ss->n; i++)
        if (ss->s[i].port == a->port &&
            (strcmp(ss->s[i].host, a->host) == 0 || (loopback(a->host) && loopback(ss->s[i].host))))
            return i;
    return -1;
}

/* A negative errno for a DLOCK_E* code of the adapter, for the scenarios'
 * messages. */
static int neg_errno(int rc)
{
    switch (rc) {
    case DLOCK_ETIMEDOUT:
        return -ETIMEDOUT;
    case DLOCK_ECANCELED:
        return -EINTR;
    case DLOCK_ENOTSUP:
        return -ENOTSUP;
    case DLOCK_ENOMEM:
        return -ENOMEM;
    case DLOCK_EINVAL:
        return -EINVAL;
    default:
        return -EHOSTUNREACH;
    }
}

/* ---- the adapter process ------------------------------------------------------ */

/*
 * The backend's check adapter (src/tools.h) is reached through a client, and
 * a client may run threads (ZooKeeper's I/O thread, the lease renewal). The
 * harness forks its workers without exec, which is only safe from a
 * single-threaded process (measure.h): so the client lives in a process of
 * its own, forked before any client exists, and every operation is a request
 * over a socket. Both ends are this program, so requests and replies are the
 * structures themselves.
 */
enum { AD_TOPOLOGY, AD_MEMBERS, AD_READY, AD_LOCK_SERVERS, AD_CUT, AD_FAILOVER, AD_LEADER,
       AD_SETTLE };

typedef struct ad_req {
    int op;
    int n; /* members in m (settle), or room for results */
    int64_t until_ns;
    char name[512];
    dh_server addr;
    dh_member m[SRV_MAX];
} ad_req;

typedef struct ad_rep {
    int rc; /* 0, a count, or a DLOCK_E* code */
    dh_topo topo;
    dh_server sv[CHK_LOCK_SERVERS];
    dh_member m[SRV_MAX];
    char err[512];
} ad_rep;

static int io_full(int fd, void *buf, size_t len, bool out)
{
    char *p = buf;
    while (len > 0) {
        ssize_t n = out ? send(fd, p, len, MSG_NOSIGNAL) : read(fd, p, len);
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0)
            return -1;
        p += n;
        len -= (size_t)n;
    }
    return 0;
}

/* The adapter's waits give up once the harness was told to stop. */
static bool ad_stop(void *arg)
{
    struct pollfd p = {.fd = *(int *)arg, .events = POLLIN};
    return poll(&p, 1, 0) != 0;
}

static void ad_serve(dlock_client *c, const ad_req *q, ad_rep *r, int cancel_fd)
{
    dh_wait w = {.until_ns = q->until_ns, .stop = ad_stop, .arg = &cancel_fd};
    switch (q->op) {
    case AD_TOPOLOGY:
        r->rc = dh_topology(c, &r->topo);
        break;
    case AD_MEMBERS:
        r->rc = dh_members(c, r->m, q->n);
        break;
    case AD_READY:
        r->rc = dh_server_ready(c, &q->m[0]);
        break;
    case AD_LOCK_SERVERS:
        r->rc = dh_lock_servers(c, q->name, r->sv, q->n);
        break;
    case AD_CUT:
        r->rc = dh_cut_replication(c, &q->addr);
        break;
    case AD_FAILOVER:
        r->rc = dh_wait_failover(c, q->name, &q->addr, &w, &r->sv[0]);
        break;
    case AD_LEADER:
        r->rc = dh_leader(c, &r->sv[0]);
        break;
    case AD_SETTLE:
        r->rc = dh_settle(c, q->m, q->n, &w);
        break;
    default:
        r->rc = DLOCK_EINVAL;
    }
    if (r->rc < 0)
        snprintf(r->err, sizeof r->err, "%s", dlock_client_errmsg(c));
}

__attribute__((noreturn)) static void ad_main(int fd, int cancel_fd, pid_t parent,
                                              const char *url)
{
    /* Out of the terminal's group (^C is the harness's to handle), and
     * gone with the harness. */
    (void)setpgid(0, 0);
    (void)prctl(PR_SET_PDEATHSIG, SIGKILL, 0, 0, 0);
    if (getppid() != parent)
        _exit(99);
    ms_signals_restore();
    ad_req *q = malloc(sizeof *q);
    ad_rep *r = malloc(sizeof *r);
    if (!q || !r)
        _exit(98);
    memset(r, 0, sizeof *r);
    /* The first reply says whether the client opened. */
    dlock_client_opts o;
    dlock_client_opts_init(&o);
    o.connect_timeout_ms = o.op_timeout_ms = CTL_TIMEOUT_MS;
    dlock_client *c = NULL;
    r->rc = dlock_client_open(&c, url, &o);
    if (r->rc)
        snprintf(r->err, sizeof r->err, "%s", dlock_client_errmsg(NULL));
    bool ok = io_full(fd, r, sizeof *r, true) == 0;
    while (ok && c && io_full(fd, q, sizeof *q, false) == 0) {
        memset(r, 0, sizeof *r);
        ad_serve(c, q, r, cancel_fd);
        ok = io_full(fd, r, sizeof *r, true) == 0;
    }
    dlock_client_close(c);
    free(q);
    free(r);
    _exit(0);
}

/* Start the adapter process for url: 0, or -1 with why. */
static int ad_start(srvset *ss, const char *url, char *why, size_t whylen)
{
    int sp[2], cp[2];
    if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sp) != 0) {
        snprintf(why, whylen, "socketpair: %s", strerror(errno));
        return -1;
    }
    if (pipe2(cp, O_CLOEXEC) != 0) {
        snprintf(why, whylen, "pipe: %s", strerror(errno));
        close(sp[0]);
        close(sp[1]);
        return -1;
    }
    pid_t parent = getpid();
    pid_t pid = ms_fork();
    if (pid == 0) {
        close(sp[0]);
        close(cp[1]);
        ad_main(sp[1], cp[0], parent, url);
    }
    int e = errno;
    close(sp[1]);
    close(cp[0]);
    if (pid < 0) {
        close(sp[0]);
        close(cp[1]);
        snprintf(why, whylen, "cannot start the adapter process: %s", strerror(e));
        return -1;
    }
    ss->ad_fd = sp[0];
    ss->ad_cancel = cp[1];
    ss->ad_pid = pid;
    ad_rep *r = malloc(sizeof *r);
    if (!r || io_full(ss->ad_fd, r, sizeof *r, false) != 0) {
        snprintf(why, whylen, "%s", r ? "the adapter process died at start" : "out of memory");
        free(r);
        return -1;
    }
    int rc = r->rc;
    if (rc)
        snprintf(why, whylen, "%s", r->err);
    free(r);
    return rc ? -1 : 0;
}

/* One request to the adapter: its result (0, a count or a DLOCK_E* code),
 * with its message in ss->ad_err on failure. A signal to the harness stops
 * the adapter's waits. */
static int ad_call(srvset *ss, ad_req *q, ad_rep *r)
{
    memset(r, 0, sizeof *r);
    if (ss->ad_fd < 0 || io_full(ss->ad_fd, q, sizeof *q, true) != 0) {
        snprintf(ss->ad_err, sizeof ss->ad_err, "the adapter process is gone");
        return DLOCK_EIO;
    }
    for (;;) {
        if (ms_signal_pending() && ss->ad_cancel >= 0) {
            if (write(ss->ad_cancel, "x", 1) != 1) {
                /* the adapter is gone: the read below says so */
            }
            close(ss->ad_cancel);
            ss->ad_cancel = -1;
        }
        struct pollfd p = {.fd = ss->ad_fd, .events = POLLIN};
        if (poll(&p, 1, 100) > 0)
            break;
    }
    if (io_full(ss->ad_fd, r, sizeof *r, false) != 0) {
        snprintf(ss->ad_err, sizeof ss->ad_err, "the adapter process died");
        close(ss->ad_fd);
        ss->ad_fd = -1;
        return DLOCK_EIO;
    }
    if (r->rc < 0)
        snprintf(ss->ad_err, sizeof ss->ad_err, "%s", r->err);
    return r->rc;
}

static void ad_close(srvset *ss)
{
    if (ss->ad_cancel >= 0)
        close(ss->ad_cancel);
    if (ss->ad_fd >= 0)
        close(ss->ad_fd); /* end of file: the adapter closes its client and exits */
    if (ss->ad_pid > 0)
        while (waitpid(ss->ad_pid, NULL, 0) < 0 && errno == EINTR) {
        }
    ss->ad_fd = ss->ad_cancel = -1;
    ss->ad_pid = 0;
}

/* ---- operations ------------------------------------------------------------ */

static srvset *ss_of(void *state)
{
    return state;
}

static const char *op_name(void *state, int idx)
{
    srvset *ss = ss_of(state);
    return idx >= 0 && idx < ss->n ? ss->s[idx].name : "?";
}

static int op_port(void *state, int idx)
{
    srvset *ss = ss_of(state);
    return idx >= 0 && idx < ss->n ? ss->s[idx].port : -1;
}

static bool op_holds_data(void *state, int idx)
{
    srvset *ss = ss_of(state);
    return idx >= 0 && idx < ss->n && ss->s[idx].m.role == DH_DATA;
}

static int signal_tree(pid_t root, int sig);

static int op_kill(void *state, int idx)
{
    srvset *ss = ss_of(state);
    srv *s = &ss->s[idx];
    if (s->dead)
        return 0;
    /* A crash ends every process of the server at once: frozen first, then
     * killed, so that none of them (PostgreSQL's backends, children of the
     * postmaster, go on until they notice it gone) writes anything after
     * the moment of the crash, as a WAL flush still in its buffers. */
    int e = signal_tree(s->pid, SIGSTOP);
    if (e == 0)
        e = signal_tree(s->pid, SIGKILL);
    if (e != 0 && e != -ESRCH)
        return e;
    s->dead = true;
    s->stopped = false;
    /* its port must be free before anyone starts it again */
    return wait_state(s->pid, proc_gone, GONE_WAIT_NS);
}

static int op_stop(void *state, int idx)
{
    srvset *ss = ss_of(state);
    srv *s = &ss->s[idx];
    if (s->dead)
        return 0;
    if (kill(s->pid, SIGTERM) != 0 && errno != ESRCH)
        return -errno;
    (void)kill(s->pid, SIGCONT);
    s->dead = true;
    s->stopped = false;
    if (wait_state(s->pid, proc_gone, GONE_WAIT_NS) != 0) {
        (void)kill(s->pid, SIGKILL);
        return wait_state(s->pid, proc_gone, GONE_WAIT_NS);
    }
    return 0;
}

/* The parent pid from /proc, 0 when there is no such process. */
static pid_t proc_ppid(pid_t pid)
{
    char buf[512];
    const char *f = proc_stat_fields(pid, buf, sizeof buf);
    return f && f[1] == ' ' ? (pid_t)atol(f + 2) : 0;
}

/* Send sig to pid and to every process descended from it: a server may
 * serve each connection in a child (PostgreSQL's backends, children of the
 * postmaster), and stopping the parent alone leaves every session
 * answering. The root gets it first, except SIGKILL, which it gets last:
 * its children, once it is dead, are no longer found as its own. */
static int signal_tree(pid_t root, int sig)
{
    if (sig != SIGKILL && kill(root, sig) != 0)
        return -errno;
    if (sig == SIGKILL && kill(root, 0) != 0)
        return -errno;
    enum { TREE_MAX = 4096 };
    pid_t *tree = malloc(TREE_MAX * sizeof *tree);
    if (!tree)
        return sig == SIGKILL && kill(root, sig) != 0 ? -errno : 0; /* the server itself has it */
    int n = 0;
    tree[n++] = root;
    /* Until a pass over /proc finds no new descendant. */
    for (bool grew = true; grew && n < TREE_MAX;) {
        grew = false;
        DIR *d = opendir("/proc");
        if (!d)
            break;
        struct dirent *e;
        while ((e = readdir(d)) != NULL && n < TREE_MAX) {
            pid_t pid = (pid_t)atol(e->d_name);
            if (pid <= 0)
                continue;
            bool known = false;
            for (int i = 0; i < n && !known; i++)
                known = tree[i] == pid;
            if (known)
                continue;
            pid_t pp = proc_ppid(pid);
            for (int i = 0; i < n; i++)
                if (tree[i] == pp) {
                    tree[n++] = pid;
                    (void)kill(pid, sig); /* it may have ended meanwhile */
                    grew = true;
                    break;
                }
        }
        closedir(d);
    }
    free(tree);
    if (sig == SIGKILL && kill(root, sig) != 0 && errno != ESRCH)
        return -errno;
    return 0;
}

/* For the message of a process that does not stop: how many of its threads
 * are not stopped, and the first one's name, state and kernel wait channel. */
static void threads_not_stopped(pid_t pid, char *why, size_t len)
{
    char path[96];
    why[0] = '\0';
    snprintf(path, sizeof path, "/proc/%ld/task", (long)pid);
    DIR *d = opendir(path);
    if (!d)
        return;
    int total = 0, moving = 0;
    struct dirent *e;
    while ((e = readdir(d)) != NULL) {
        long tid = atol(e->d_name);
        if (tid <= 0)
            continue;
        total++;
        char buf[512], comm[64] = "", wchan[64] = "";
        snprintf(path, sizeof path, "/proc/%ld/task/%ld/stat", (long)pid, tid);
        const char *f = stat_fields(path, buf, sizeof buf);
        if (!f || f[0] == 'T' || f[0] == 't' || moving++ > 0)
            continue;
        snprintf(path, sizeof path, "/proc/%ld/task/%ld/comm", (long)pid, tid);
        (void)read_path(path, comm, sizeof comm);
        comm[strcspn(comm, "\n")] = '\0';
        snprintf(path, sizeof path, "/proc/%ld/task/%ld/wchan", (long)pid, tid);
        (void)read_path(path, wchan, sizeof wchan);
        snprintf(why, len, " (thread %ld \"%s\" in state '%c', waiting in %s", tid, comm, f[0],
                 wchan[0] ? wchan : "-");
    }
    closedir(d);
    if (moving) {
        size_t used = strlen(why);
        snprintf(why + used, len - used, "; %d of %d threads not stopped)", moving, total);
    }
}

static int op_pause(void *state, int idx)
{
    srvset *ss = ss_of(state);
    srv *s = &ss->s[idx];
    if (s->dead)
        return -ESRCH;
    int e = signal_tree(s->pid, SIGSTOP);
    if (e)
        return e;
    s->stopped = true;
    /* The stop is asked for again every second (it costs nothing). A
     * server that still does not stop is named with the state it and its
     * threads are in (a server restarted in a session of its own was once
     * starved so: see spawn_cmd). */
    for (int i = 0; i < (int)(GONE_WAIT_NS / 1000000000); i++) {
        if (wait_state(s->pid, proc_stopped, 1000000000) == 0)
            return 0;
        (void)signal_tree(s->pid, SIGSTOP);
    }
    char st = chk_proc_state(s->pid), why[256];
    threads_not_stopped(s->pid, why, sizeof why);
    fprintf(stderr, "dlock check: server %s (pid %d) still in state '%c' %lld s after SIGSTOP%s\n",
            s->name, (int)s->pid, st ? st : '?', (long long)(GONE_WAIT_NS / 1000000000), why);
    return -ETIMEDOUT;
}

static int op_resume(void *state, int idx)
{
    srvset *ss = ss_of(state);
    srv *s = &ss->s[idx];
    if (s->dead)
        return -ESRCH;
    s->stopped = false;
    return signal_tree(s->pid, SIGCONT);
}

/* Run NAME.cmd as a daemon of its own (its own process group, no
 * descriptor of ours, not our child once started) and return its pid. */
static pid_t spawn_cmd(const char *cmd)
{
    int pfd[2];
    if (pipe2(pfd, O_CLOEXEC) != 0)
        return -1;
    pid_t mid = ms_fork();
    if (mid < 0) {
        close(pfd[0]);
        close(pfd[1]);
        return -1;
    }
    if (mid == 0) {
        /* A process group of its own (^C at our terminal is not for it),
         * but not a session: a new session is a new scheduling autogroup
         * (CONFIG_SCHED_AUTOGROUP), and a JVM started in one was seen
         * runnable and never run for 15 s beside a CPU hog, its SIGSTOP
         * pending (6 of 22 loaded runs; 0 of 16 in the caller's session). */
        (void)setpgid(0, 0);
        signal(SIGPIPE, SIG_DFL);
        sigset_t none;
        sigemptyset(&none);
        (void)sigprocmask(SIG_SETMASK, &none, NULL);
        pid_t pid = fork();
        if (pid == 0) {
            int nul = open("/dev/null", O_RDWR);
            if (nul >= 0) {
                (void)dup2(nul, 0);
                (void)dup2(nul, 1);
                (void)dup2(nul, 2);
            }
            long max = sysconf(_SC_OPEN_MAX);
            if (max < 0 || max > 65536)
                max = 65536;
            for (int fd = 3; fd < max; fd++)
                (void)close(fd);
            if (setenv("DLOCK_SRV_CMD", cmd, 1) == 0)
                execl("/bin/bash", "bash", "-c", "eval \"exec $DLOCK_SRV_CMD\"", (char *)NULL);
            _exit(127);
        }
        ssize_t w = write(pfd[1], &pid, sizeof pid);
        _exit(w == (ssize_t)sizeof pid ? 0 : 1);
    }
    close(pfd[1]);
    pid_t pid = -1;
    ssize_t n;
    do
        n = read(pfd[0], &pid, sizeof pid);
    while (n < 0 && errno == EINTR);
    close(pfd[0]);
    while (waitpid(mid, NULL, 0) < 0 && errno == EINTR) {
    }
    return n == (ssize_t)sizeof pid ? pid : -1;
}

/* Does s answer as ready? A backend without a readiness probe: once its
 * process runs. */
static bool ready(srvset *ss, const srv *s)
{
    ad_req q = {.op = AD_READY, .m[0] = s->m};
    ad_rep r;
    int rc = ad_call(ss, &q, &r);
    return rc == 0 || rc == DLOCK_ENOTSUP;
}

static int op_start(void *state, int idx)
{
    srvset *ss = ss_of(state);
    srv *s = &ss->s[idx];
    if (!s->dead && !proc_gone(s->pid))
        return -EBUSY;
    char cmd[8192];
    if (read_file(ss->dir, s->name, "cmd", cmd, sizeof cmd) != 0)
        return -errno;
    for (int attempt = 0; attempt < 3; attempt++) {
        pid_t pid = spawn_cmd(cmd);
        if (pid < 0)
            return -errno;
        s->pid = pid;
        s->dead = false;
        s->stopped = false;
        if (write_pid(ss->dir, s->name, pid) != 0) {
            int e = errno;
            (void)kill(pid, SIGKILL);
            s->dead = true;
            return -e;
        }
        int64_t until = ms_now_ns() + START_WAIT_NS;
        while (ms_now_ns() < until && !proc_gone(pid)) {
            if (ready(ss, s))
                return 0;
            ms_sleep_ns(20000000);
        }
        /* it died at once (port still taken?) or never answered */
        if (!proc_gone(pid))
            (void)kill(pid, SIGKILL);
        (void)wait_state(pid, proc_gone, GONE_WAIT_NS);
        s->dead = true;
        ms_sleep_ns(200000000);
    }
    return -EIO;
}

/*
 * A server cut off from the other servers (not from its clients): NAME.links
 * lists the pids of the relays that carry its links to the others (as
 * tests/servers.sh starts the zk3p ensemble), and SIGSTOP of them freezes
 * those links, connections left open. The relays of its links are read
 * afresh each time: the deployment may restart them.
 */
static int read_links(srvset *ss, int idx, pid_t *pids, int max)
{
    char buf[512];
    if (idx < 0 || idx >= ss->n || read_file(ss->dir, ss->s[idx].name, "links", buf, sizeof buf))
        return -ENOTSUP;
    int n = 0;
    for (char *p = buf, *end; n < max && *p; p = end) {
        long v = strtol(p, &end, 10);
        if (end == p || v <= 0)
            break;
        pids[n++] = (pid_t)v;
    }
    return n > 0 ? n : -ENOTSUP;
}

/* DIR/NAME.partition, if it is a program we may run: 0, else -ENOTSUP. */
static int hook_path(const srvset *ss, int idx, char *path, size_t len)
{
    if (idx < 0 || idx >= ss->n)
        return -ENOTSUP;
    snprintf(path, len, "%s/%s.partition", ss->dir, ss->s[idx].name);
    return access(path, X_OK) == 0 ? 0 : -ENOTSUP;
}

/*
 * Run NAME.partition with "on" or "off" and wait for it (HOOK_WAIT_NS at
 * most, then SIGKILL): 0 when it exited 0, else a negative errno, its own
 * message on our stderr. The harness is single-threaded (ms_fork checks).
 */
static int run_hook(const char *path, const char *arg)
{
    pid_t pid = ms_fork();
    if (pid < 0)
        return -errno;
    if (pid == 0) {
        (void)prctl(PR_SET_PDEATHSIG, SIGKILL, 0, 0, 0);
        ms_signals_restore();
        int nul = open("/dev/null", O_RDWR);
        if (nul >= 0) {
            (void)dup2(nul, 0);
            (void)dup2(nul, 1);
        }
        execl(path, path, arg, (char *)NULL);
        _exit(127);
    }
    int64_t until = ms_now_ns() + HOOK_WAIT_NS;
    int status = 0;
    pid_t w;
    while ((w = waitpid(pid, &status, WNOHANG)) == 0 || (w < 0 && errno == EINTR)) {
        if (ms_now_ns() >= until) {
            (void)kill(pid, SIGKILL);
            while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {
            }
            fprintf(stderr, "dlock: %s %s: no end within %lld s\n", path, arg,
                    (long long)(HOOK_WAIT_NS / 1000000000LL));
            return -ETIMEDOUT;
        }
        ms_sleep_ns(5000000);
    }
    if (w < 0)
        return -errno;
    if (WIFEXITED(status) && WEXITSTATUS(status) == 0)
        return 0;
    fprintf(stderr, "dlock: %s %s: %s %d\n", path, arg,
            WIFEXITED(status) ? "exit status" : "killed by signal",
            WIFEXITED(status) ? WEXITSTATUS(status) : WTERMSIG(status));
    return -EIO;
}

static bool op_partitionable(void *state, int idx)
{
    srvset *ss = ss_of(state);
    pid_t pids[16];
    char path[4400];
    return read_links(ss, idx, pids, 16) > 0 || hook_path(ss, idx, path, sizeof path) == 0;
}

static int op_partition(void *state, int idx, int isolated)
{
    srvset *ss = ss_of(state);
    pid_t pids[16];
    int n = read_links(ss, idx, pids, 16);
    if (n < 0) {
        char path[4400];
        int e = hook_path(ss, idx, path, sizeof path);
        return e ? e : run_hook(path, isolated ? "on" : "off");
    }
    for (int i = 0; i < n; i++)
        if (kill(pids[i], isolated ? SIGSTOP : SIGCONT) != 0)
            return -errno;
    return 0;
}

static int op_lock_servers(void *state, const char *name, int *idx, int max)
{
    srvset *ss = ss_of(state);
    ad_req q = {.op = AD_LOCK_SERVERS, .n = max < CHK_LOCK_SERVERS ? max : CHK_LOCK_SERVERS};
    snprintf(q.name, sizeof q.name, "%s", name);
    ad_rep r;
    int n = ad_call(ss, &q, &r);
    if (n < 0)
        return neg_errno(n);
    int k = 0;
    for (int i = 0; i < n && i < q.n; i++) {
        int j = by_addr(ss, &r.sv[i]);
        if (j >= 0)
            idx[k++] = j;
    }
    return k > 0 ? k : -ENOENT;
}

static int op_cut_replication(void *state, int m)
{
    srvset *ss = ss_of(state);
    ad_req q = {.op = AD_CUT, .addr = ss->s[m].m.addr};
    ad_rep r;
    int n = ad_call(ss, &q, &r);
    return n < 0 ? neg_errno(n) : n;
}

/* The adapter's answer to q naming one server: its index, or -errno
 * (-ENOENT: a server not in the set). */
static int ad_call_server(srvset *ss, ad_req *q)
{
    ad_rep r;
    int rc = ad_call(ss, q, &r);
    if (rc)
        return neg_errno(rc);
    int j = by_addr(ss, &r.sv[0]);
    return j >= 0 ? j : -ENOENT;
}

static int op_wait_failover(void *state, const char *name, int old, int64_t until_ns)
{
    srvset *ss = ss_of(state);
    ad_req q = {.op = AD_FAILOVER, .until_ns = until_ns, .addr = ss->s[old].m.addr};
    snprintf(q.name, sizeof q.name, "%s", name);
    return ad_call_server(ss, &q);
}

static int op_leader(void *state)
{
    srvset *ss = ss_of(state);
    ad_req q = {.op = AD_LEADER};
    return ad_call_server(ss, &q);
}

/* Start what was killed, continue what was stopped, then let the backend
 * say when its deployment is as it was (one without that check: once every
 * server was ready). */
static int op_restore(void *state, char *err, size_t errlen)
{
    srvset *ss = ss_of(state);
    ad_req q = {.op = AD_SETTLE, .n = ss->n, .until_ns = ms_now_ns() + RESTORE_WAIT_NS};
    /* Every server first continued and its links restored, whatever else
     * fails: a server that cannot be started must not leave the others
     * stopped or cut off for the tests that come next. */
    for (int i = 0; i < ss->n; i++) {
        srv *s = &ss->s[i];
        q.m[i] = s->m;
        if (s->stopped)
            (void)op_resume(ss, i);
        (void)op_partition(ss, i, 0); /* its links to the others flow again */
    }
    int failed = 0;
    for (int i = 0; i < ss->n; i++) {
        srv *s = &ss->s[i];
        if (s->dead || proc_gone(s->pid)) {
            char st = chk_proc_state(s->pid);
            s->dead = true;
            int e = op_start(ss, i);
            if (e && !failed++)
                snprintf(err, errlen, "cannot start %s again (it was %s): %s", s->name,
                         st ? "a zombie" : "gone", strerror(-e));
        }
    }
    if (failed)
        return -1;
    ad_rep r;
    int rc = ss->n > 0 ? ad_call(ss, &q, &r) : 0;
    if (rc == 0 || rc == DLOCK_ENOTSUP)
        return 0;
    if (rc == DLOCK_ETIMEDOUT)
        snprintf(err, errlen, "%.0f s after the run: %s", (double)RESTORE_WAIT_NS / 1e9,
                 ss->ad_err);
    else
        snprintf(err, errlen, "%s", ss->ad_err);
    return -1;
}

static void op_close(void *state)
{
    srvset *ss = ss_of(state);
    ad_close(ss);
    free(ss);
}

/* ---- finding them ------------------------------------------------------------ */

static int load_dir(srvset *ss, char *why, size_t whylen)
{
    DIR *d = opendir(ss->dir);
    if (!d) {
        snprintf(why, whylen, "cannot read the servers directory %s: %s", ss->dir,
                 strerror(errno));
        return -1;
    }
    struct dirent *e;
    while ((e = readdir(d)) != NULL && ss->n < SRV_MAX) {
        size_t len = strlen(e->d_name);
        if (len <= 5 || strcmp(e->d_name + len - 5, ".port") != 0 || len - 5 >= 64)
            continue;
        srv *s = &ss->s[ss->n];
        memset(s, 0, sizeof *s);
        memcpy(s->name, e->d_name, len - 5);
        s->name[len - 5] = '\0';
        char buf[64];
        if (read_file(ss->dir, s->name, "host", s->host, sizeof s->host) != 0 || !s->host[0])
            snprintf(s->host, sizeof s->host, "127.0.0.1");
        if (read_file(ss->dir, s->name, "port", buf, sizeof buf) != 0 ||
            (s->port = atoi(buf)) <= 0 || read_file(ss->dir, s->name, "pid", buf, sizeof buf) != 0 ||
            (s->pid = (pid_t)atol(buf)) <= 0)
            continue;
        s->dead = proc_gone(s->pid);
        ss->n++;
    }
    closedir(d);
    return 0;
}

/* Keep only servers marked in keep[], in their order. */
static void keep_only(srvset *ss, const bool *keep)
{
    int k = 0;
    for (int i = 0; i < ss->n; i++)
        if (keep[i])
            ss->s[k++] = ss->s[i];
    ss->n = k;
}

/* The URL's hosts must all be servers of the directory; 0, or -1 with why. */
static int match_url(srvset *ss, const char *url, bool *keep, char *why, size_t whylen)
{
    dh_url u;
    if (dh_parse_url(url, &u, why, whylen) != 0)
        return -1;
    int matched = 0;
    for (int h = 0; h < u.nhosts; h++) {
        int j = by_addr(ss, &u.host[h]);
        if (j >= 0) {
            keep[j] = true;
            matched++;
        }
    }
    int nhosts = u.nhosts;
    explicit_bzero(&u, sizeof u);
    if (matched < nhosts) {
        snprintf(why, whylen,
                 "%d of the URL's %d hosts are servers of %s (matched by port, on "
                 "127.0.0.1 or the address in NAME.host)",
                 matched, nhosts, ss->dir);
        return -1;
    }
    return 0;
}

int chk_servers_open(const char *dir, const char *url, const char *backend, chk_servers **out,
                     char *why, size_t whylen)
{
    *out = NULL;
    dh_url u;
    if (dh_parse_url(url, &u, why, whylen) != 0)
        return -1;
    int nhosts = u.nhosts;
    explicit_bzero(&u, sizeof u);
    if (nhosts == 0) {
        snprintf(why, whylen, "the %s backend has no servers to fault", backend);
        return 1;
    }
    if (!dir || !*dir) {
        snprintf(why, whylen,
                 "no servers to fault: give --servers DIR (or set DLOCK_TEST_SERVERS), a "
                 "directory of NAME.pid, NAME.port and NAME.cmd files as tests/servers.sh "
                 "writes");
        return 1;
    }
    srvset *ss = calloc(1, sizeof *ss);
    if (!ss) {
        snprintf(why, whylen, "out of memory");
        return -1;
    }
    snprintf(ss->dir, sizeof ss->dir, "%s", dir);
    ss->ad_fd = ss->ad_cancel = -1;
    /* One client for the whole check, in the adapter process: the
     * adapter's operations open connections of their own, so it serves
     * while servers come and go. */
    if (ad_start(ss, url, why, whylen) != 0) {
        op_close(ss);
        return -1;
    }
    ad_req q = {.op = AD_TOPOLOGY};
    ad_rep r;
    int rc = ad_call(ss, &q, &r);
    if (rc) {
        snprintf(why, whylen, "%s", ss->ad_err);
        op_close(ss);
        return rc == DLOCK_ENOTSUP ? 1 : -1;
    }
    dh_topo topo = r.topo;
    bool keep[SRV_MAX] = {false};
    if (load_dir(ss, why, whylen) != 0 || match_url(ss, url, keep, why, whylen) != 0) {
        op_close(ss);
        return -1;
    }
    q = (ad_req){.op = AD_MEMBERS, .n = SRV_MAX};
    int nm = ad_call(ss, &q, &r);
    if (nm < 0) {
        snprintf(why, whylen, "%s", ss->ad_err);
        op_close(ss);
        return -1;
    }
    const dh_member *m = r.m;
    /* the members the directory has (a server named but not started there
     * is not faulted) */
    for (int i = 0; i < nm; i++) {
        int j = by_addr(ss, &m[i].addr);
        if (j >= 0) {
            keep[j] = true;
            ss->s[j].m = m[i];
        }
    }
    for (int j = 0; j < ss->n; j++)
        if (keep[j] && !ss->s[j].m.addr.port) { /* a URL host the members left out */
            srv *s = &ss->s[j];
            /* host[64] always fits addr.host[256]; memcpy, not snprintf:
             * gcc -O0 takes two members of one object for an overlap */
            size_t hl = strnlen(s->host, sizeof s->host - 1);
            memcpy(s->m.addr.host, s->host, hl);
            s->m.addr.host[hl] = '\0';
            s->m.addr.port = s->port;
        }
    keep_only(ss, keep);
    chk_servers *p = &ss->pub;
    p->backend = backend;
    p->topo = topo.trait;
    p->count = ss->n;
    p->quorum = topo.quorum;
    p->state = ss;
    p->name = op_name;
    p->port = op_port;
    p->holds_data = op_holds_data;
    p->start = op_start;
    p->stop = op_stop;
    p->kill = op_kill;
    p->pause = op_pause;
    p->resume = op_resume;
    p->partition = op_partition;
    p->partitionable = op_partitionable;
    p->lock_servers = op_lock_servers;
    p->cut_replication = op_cut_replication;
    p->wait_failover = op_wait_failover;
    p->leader = op_leader;
    p->restore = op_restore;
    p->close = op_close;
    *out = p;
    return 0;
}
