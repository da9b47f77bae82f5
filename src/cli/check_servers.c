/*
 * check_servers.c — the servers `dlock check` faults: those of a Redis family
 * URL, found in a directory that tests/servers.sh (or anyone else) fills with
 * one NAME.pid, NAME.port and NAME.cmd per server.
 *
 * The URL's hosts are matched to servers by port (on the loopback
 * interface): the master for redis://, every master for redlock://, every
 * node for redis+cluster://, and for redis+sentinel:// the sentinels plus the
 * master and replicas they know. A restart is what srv_restart in
 * tests/servers.sh does: SIGKILL, then NAME.cmd run again (without
 * persistence, so the server comes back empty), with the new pid written to
 * NAME.pid so that whoever started the servers still stops them all.
 */
#include "check.h"
#include "check_hiredis.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#define SRV_MAX 64
#define CTL_TIMEOUT_MS 1000
#define START_WAIT_NS 10000000000LL
#define GONE_WAIT_NS 5000000000LL
#define RESTORE_WAIT_NS 60000000000LL

enum { ROLE_DATA = 0, ROLE_SENTINEL = 1 };

typedef struct srv {
    char name[64];
    int port;
    pid_t pid;
    int role;
    bool dead;    /* killed or stopped by us, not started again */
    bool stopped; /* SIGSTOP */
} srv;

typedef struct srvset {
    char dir[4096];
    ms_rtarget t;
    unsigned deploy;
    int n;
    srv s[SRV_MAX];
    chk_servers pub;
} srvset;

/* ---- files and processes -------------------------------------------------- */

static int read_file(const char *dir, const char *name, const char *ext, char *buf, size_t len)
{
    char path[4400];
    snprintf(path, sizeof path, "%s/%s.%s", dir, name, ext);
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return -1;
    ssize_t n = read(fd, buf, len - 1);
    close(fd);
    if (n < 0)
        return -1;
    buf[n] = '\0';
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

/* The process state letter from /proc, 0 when there is no such process. */
static char proc_state(pid_t pid)
{
    char path[64], buf[512];
    snprintf(path, sizeof path, "/proc/%ld/stat", (long)pid);
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return 0;
    ssize_t n = read(fd, buf, sizeof buf - 1);
    close(fd);
    if (n <= 0)
        return 0;
    buf[n] = '\0';
    char *p = strrchr(buf, ')'); /* the name may contain anything */
    return p && p[1] == ' ' ? p[2] : 0;
}

static bool proc_gone(pid_t pid)
{
    char st = proc_state(pid);
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
    char st = proc_state(pid);
    return st == 'T' || st == 't' || st == 0;
}

/* ---- talking to the servers --------------------------------------------- */

#ifdef MS_HIREDIS
#ifdef REDIS_REPLY_VERB
#define IS_TEXT(r) ((r)->type == REDIS_REPLY_STRING || (r)->type == REDIS_REPLY_VERB)
#else
#define IS_TEXT(r) ((r)->type == REDIS_REPLY_STRING)
#endif

static redisContext *ctl_connect(srvset *ss, const srv *s, char *err, size_t errlen)
{
    return ms_redis_connect(&ss->t, "127.0.0.1", s->port, s->role == ROLE_DATA, CTL_TIMEOUT_MS,
                            err, errlen);
}

/* One command on server s; the reply (caller frees) or NULL. */
static redisReply *ctl_cmd(srvset *ss, const srv *s, int argc, const char **argv, char *err,
                           size_t errlen)
{
    redisContext *c = ctl_connect(ss, s, err, errlen);
    if (!c)
        return NULL;
    redisReply *r = redisCommandArgv(c, argc, argv, NULL);
    if (!r)
        snprintf(err, errlen, "%s (port %d): %s", s->name, s->port,
                 c->errstr[0] ? c->errstr : "no reply");
    redisFree(c);
    return r;
}

static bool answers(srvset *ss, const srv *s)
{
    char err[256];
    const char *argv[1] = {"PING"};
    redisReply *r = ctl_cmd(ss, s, 1, argv, err, sizeof err);
    bool ok = r != NULL; /* any reply: an error like NOAUTH or LOADING still answers */
    if (r) {
        ok = !(r->type == REDIS_REPLY_ERROR && strncmp(r->str, "LOADING", 7) == 0);
        freeReplyObject(r);
    }
    return ok;
}

/* INFO SECTION of s as text (caller frees). */
static char *info(srvset *ss, const srv *s, const char *section)
{
    char err[256];
    const char *argv[2] = {"INFO", section};
    redisReply *r = ctl_cmd(ss, s, 2, argv, err, sizeof err);
    char *out = NULL;
    if (r && IS_TEXT(r))
        out = strdup(r->str);
    if (r)
        freeReplyObject(r);
    return out;
}

#endif

static int by_port(const srvset *ss, int port)
{
    for (int i = 0; i < ss->n; i++)
        if (ss->s[i].port == port)
            return i;
    return -1;
}

static bool loopback(const char *host)
{
    return strcmp(host, "127.0.0.1") == 0 || strcasecmp(host, "localhost") == 0 ||
           strcmp(host, "::1") == 0;
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

static int op_kill(void *state, int idx)
{
    srvset *ss = ss_of(state);
    srv *s = &ss->s[idx];
    if (s->dead)
        return 0;
    if (kill(s->pid, SIGKILL) != 0 && errno != ESRCH)
        return -errno;
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

static int op_pause(void *state, int idx)
{
    srvset *ss = ss_of(state);
    srv *s = &ss->s[idx];
    if (s->dead)
        return -ESRCH;
    if (kill(s->pid, SIGSTOP) != 0)
        return -errno;
    s->stopped = true;
    return wait_state(s->pid, proc_stopped, GONE_WAIT_NS);
}

static int op_resume(void *state, int idx)
{
    srvset *ss = ss_of(state);
    srv *s = &ss->s[idx];
    if (s->dead)
        return -ESRCH;
    s->stopped = false;
    return kill(s->pid, SIGCONT) == 0 ? 0 : -errno;
}

/* Run NAME.cmd as a daemon of its own (its own session, no descriptor of
 * ours, not our child once started) and return its pid. */
static pid_t spawn_cmd(const char *cmd)
{
    int pfd[2];
    if (pipe2(pfd, O_CLOEXEC) != 0)
        return -1;
    fflush(NULL);
    pid_t mid = fork();
    if (mid < 0) {
        close(pfd[0]);
        close(pfd[1]);
        return -1;
    }
    if (mid == 0) {
        (void)setsid();
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
#ifdef MS_HIREDIS
        int64_t until = ms_now_ns() + START_WAIT_NS;
        while (ms_now_ns() < until && !proc_gone(pid)) {
            if (answers(ss, s))
                return 0;
            ms_sleep_ns(20000000);
        }
#endif
        /* it died at once (port still taken?) or never answered */
        if (!proc_gone(pid))
            (void)kill(pid, SIGKILL);
        (void)wait_state(pid, proc_gone, GONE_WAIT_NS);
        s->dead = true;
        ms_sleep_ns(200000000);
    }
    return -EIO;
}

static int op_partition(void *state, int idx, int isolated)
{
    (void)state, (void)idx, (void)isolated;
    return -ENOTSUP;
}

static int op_lock_servers(void *state, const char *name, int *idx, int max)
{
    srvset *ss = ss_of(state);
    ms_endpoint ep[MS_RMAX];
    char err[256];
    int n = ms_redis_lock_nodes(&ss->t, name, ep, max < MS_RMAX ? max : MS_RMAX, err,
                                sizeof err);
    if (n < 0)
        return -EHOSTUNREACH;
    int k = 0;
    for (int i = 0; i < n; i++) {
        int j = by_port(ss, ep[i].port);
        if (j >= 0)
            idx[k++] = j;
    }
    return k > 0 ? k : -ENOENT;
}

#ifdef MS_HIREDIS
/* A TCP port of the loopback interface that nobody listens on now, below
 * the kernel's ephemeral range: a replica reconnecting over and over to a
 * port in that range can be given it as its own local port and connect to
 * itself (TCP simultaneous open). */
static int dead_port(void)
{
    int low = 32768;
    FILE *f = fopen("/proc/sys/net/ipv4/ip_local_port_range", "r");
    if (f) {
        if (fscanf(f, "%d", &low) != 1 || low <= 2048)
            low = 32768;
        fclose(f);
    }
    unsigned seed = (unsigned)ms_now_ns() ^ (unsigned)getpid();
    for (int tries = 0; tries < 100; tries++) {
        int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
        if (fd < 0)
            return -1;
        int port = 1024 + (int)(rand_r(&seed) % (unsigned)(low - 1024));
        struct sockaddr_in a = {.sin_family = AF_INET,
                                .sin_addr.s_addr = htonl(INADDR_LOOPBACK),
                                .sin_port = htons((uint16_t)port)};
        int ok = bind(fd, (struct sockaddr *)&a, sizeof a) == 0;
        close(fd);
        if (ok)
            return port;
    }
    errno = EADDRINUSE;
    return -1;
}

/* The replicas a master reports (INFO replication: slaveN:ip=..,port=..). */
static int replicas_of(srvset *ss, int m, int *idx, int max)
{
    char *text = info(ss, &ss->s[m], "replication");
    if (!text)
        return -EHOSTUNREACH;
    int k = 0;
    for (char *p = text; (p = strstr(p, "slave")) != NULL && k < max; p++) {
        if (p[5] < '0' || p[5] > '9')
            continue;
        char *port = strstr(p, "port=");
        char *eol = strchr(p, '\n');
        if (!port || (eol && port > eol))
            continue;
        int j = by_port(ss, atoi(port + 5));
        if (j >= 0)
            idx[k++] = j;
    }
    free(text);
    return k;
}
#endif

/*
 * Cut replication: every replica of master m is made to replicate from a
 * port where nothing listens. It keeps its data and falls behind; the
 * sentinels still see it alive and eligible for promotion, and do not fix
 * its configuration while the master looks sane for failover-timeout. A
 * CONFIG SET of the master's replica output buffers, or killing the
 * replication connections, does not do this: the data is sent before the
 * link is closed, or resent by partial resynchronisation a second later.
 */
static int op_cut_replication(void *state, int m)
{
#ifdef MS_HIREDIS
    srvset *ss = ss_of(state);
    int rep[SRV_MAX];
    int n = replicas_of(ss, m, rep, SRV_MAX);
    if (n <= 0)
        return n < 0 ? n : -ENOENT;
    int port = dead_port();
    if (port < 0)
        return -errno;
    char pb[16];
    snprintf(pb, sizeof pb, "%d", port);
    int cut = 0;
    for (int i = 0; i < n; i++) {
        char err[256];
        const char *argv[3] = {"REPLICAOF", "127.0.0.1", pb};
        redisReply *r = ctl_cmd(ss, &ss->s[rep[i]], 3, argv, err, sizeof err);
        if (r && r->type != REDIS_REPLY_ERROR)
            cut++;
        if (r)
            freeReplyObject(r);
    }
    return cut;
#else
    (void)state, (void)m;
    return -ENOTSUP;
#endif
}

#ifdef MS_HIREDIS
/* "master", "slave" or "" from ROLE; for a slave its master's port. */
static void role_of(srvset *ss, int i, char *role, size_t len, int *master_port)
{
    char err[256];
    const char *argv[1] = {"ROLE"};
    redisReply *r = ctl_cmd(ss, &ss->s[i], 1, argv, err, sizeof err);
    role[0] = '\0';
    *master_port = 0;
    if (r && r->type == REDIS_REPLY_ARRAY && r->elements >= 1 &&
        r->element[0]->type == REDIS_REPLY_STRING) {
        snprintf(role, len, "%s", r->element[0]->str);
        if (strcmp(role, "slave") == 0 && r->elements >= 3 &&
            r->element[2]->type == REDIS_REPLY_INTEGER)
            *master_port = (int)r->element[2]->integer;
    }
    if (r)
        freeReplyObject(r);
}
#endif

#ifdef MS_HIREDIS
/* The data server sentinel i names as master, or -1. */
static int named_master(srvset *ss, int i)
{
    const char *argv[3] = {"SENTINEL", "get-master-addr-by-name", ss->t.master_name};
    char e[256];
    redisReply *r = ctl_cmd(ss, &ss->s[i], 3, argv, e, sizeof e);
    int named = -1;
    if (r && r->type == REDIS_REPLY_ARRAY && r->elements == 2 &&
        r->element[1]->type == REDIS_REPLY_STRING)
        named = by_port(ss, atoi(r->element[1]->str));
    if (r)
        freeReplyObject(r);
    return named;
}
#endif

/* The failover is seen when any sentinel names a master other than old that
 * answers ROLE as one (the sentinels learn of it one after another). */
static int op_wait_failover(void *state, const char *name, int old, int64_t until_ns)
{
#ifdef MS_HIREDIS
    srvset *ss = ss_of(state);
    (void)name;
    for (;;) {
        for (int i = 0; i < ss->n; i++) {
            if (ss->s[i].role != ROLE_SENTINEL)
                continue;
            int m = named_master(ss, i);
            if (m < 0 || m == old)
                continue;
            char role[16];
            int mp;
            role_of(ss, m, role, sizeof role, &mp);
            if (strcmp(role, "master") == 0)
                return m;
        }
        if (ms_now_ns() >= until_ns)
            return -ETIMEDOUT;
        if (ms_sleep_ns(20000000) && ms_signal_pending())
            return -EINTR;
    }
#else
    (void)state, (void)name, (void)old, (void)until_ns;
    return -ENOTSUP;
#endif
}

#ifdef MS_HIREDIS
/* The value of field in a SENTINEL reply given as a flat name/value array. */
static const char *field(const redisReply *kv, const char *name)
{
    for (size_t f = 0; kv->type == REDIS_REPLY_ARRAY && f + 1 < kv->elements; f += 2)
        if (IS_TEXT(kv->element[f]) && strcmp(kv->element[f]->str, name) == 0 &&
            IS_TEXT(kv->element[f + 1]))
            return kv->element[f + 1]->str;
    return "";
}

/*
 * Whether sentinel i has settled on master m: no failover in progress, the
 * master not thought down, and every other data server known to it as an
 * up replica. A fault injected before every sentinel has settled starts a
 * failover some of them are not ready for; one that waits never does.
 */
static bool sentinel_settled(srvset *ss, int i, int m, char *why, size_t whylen)
{
    char e[256];
    const char *argv[3] = {"SENTINEL", "master", ss->t.master_name};
    redisReply *r = ctl_cmd(ss, &ss->s[i], 3, argv, e, sizeof e);
    bool ok = r && r->type == REDIS_REPLY_ARRAY && strcmp(field(r, "flags"), "master") == 0;
    if (!ok)
        snprintf(why, whylen, "%s sees master %s as \"%s\"", ss->s[i].name, ss->s[m].name,
                 r ? field(r, "flags") : "?");
    if (r)
        freeReplyObject(r);
    if (!ok)
        return false;
    const char *argv2[3] = {"SENTINEL", "replicas", ss->t.master_name};
    r = ctl_cmd(ss, &ss->s[i], 3, argv2, e, sizeof e);
    for (int j = 0; ok && j < ss->n; j++) {
        if (j == m || ss->s[j].role != ROLE_DATA)
            continue;
        const char *flags = NULL;
        for (size_t k = 0; r && r->type == REDIS_REPLY_ARRAY && k < r->elements; k++)
            if (atoi(field(r->element[k], "port")) == ss->s[j].port)
                flags = field(r->element[k], "flags");
        ok = flags && strcmp(flags, "slave") == 0;
        if (!ok)
            snprintf(why, whylen, "%s sees replica %s as \"%s\"", ss->s[i].name, ss->s[j].name,
                     flags ? flags : "unknown");
    }
    if (r)
        freeReplyObject(r);
    return ok;
}

/* The master every answering sentinel names, when they agree, it answers
 * ROLE as a master and every sentinel has settled on it; -1 otherwise, with
 * what is missing in why. */
static int agreed_master(srvset *ss, char *why, size_t whylen)
{
    int m = -1, asked = 0;
    snprintf(why, whylen, "no sentinel names a master");
    for (int i = 0; i < ss->n; i++) {
        if (ss->s[i].role != ROLE_SENTINEL)
            continue;
        int named = named_master(ss, i);
        if (named < 0)
            continue; /* a sentinel that does not answer has no say */
        if (asked++ && named != m) {
            snprintf(why, whylen, "the sentinels disagree: %s or %s", ss->s[m].name,
                     ss->s[named].name);
            return -1;
        }
        m = named;
    }
    if (m < 0)
        return -1;
    char role[16];
    int mp;
    role_of(ss, m, role, sizeof role, &mp);
    if (strcmp(role, "master") != 0) {
        snprintf(why, whylen, "the sentinels name %s, which answers as \"%s\"", ss->s[m].name,
                 role);
        return -1;
    }
    return m;
}

/* How many of the data servers other than m replicate from m in sync (the
 * master's INFO says state=online); their names, and the others', in what. */
static int replicas_in_sync(srvset *ss, int m, char *what, size_t whatlen)
{
    char *text = info(ss, &ss->s[m], "replication");
    int online = 0;
    size_t used = 0;
    what[0] = '\0';
    for (int i = 0; i < ss->n; i++) {
        if (i == m || ss->s[i].role != ROLE_DATA)
            continue;
        char needle[32];
        snprintf(needle, sizeof needle, ",port=%d,state=", ss->s[i].port);
        char *p = text ? strstr(text, needle) : NULL;
        bool in_sync = p && strncmp(p + strlen(needle), "online", 6) == 0;
        online += in_sync;
        int w = snprintf(what + used, whatlen - used, "%s%s %s", used ? ", " : "", ss->s[i].name,
                         in_sync ? "in sync" : p ? "syncing" : "not connected");
        if (w > 0 && (size_t)w < whatlen - used)
            used += (size_t)w;
    }
    free(text);
    return online;
}

/*
 * Back to one master, named by every sentinel, with every other data server
 * replicating from it in sync, and every sentinel settled on that. The sentinels reconfigure servers themselves
 * (a restarted old master, replicas after a failover), so this converges
 * with them instead of racing them: it only points a server at the master
 * the sentinels agree on (again, if it is still not in sync 10 s later).
 */
static int restore_sentinel(srvset *ss, char *err, size_t errlen)
{
    const int64_t repoint_ns = 10000000000LL;
    int64_t now = ms_now_ns(), until = now + RESTORE_WAIT_NS;
    int64_t pointed[SRV_MAX] = {0};
    int last_m = -1;
    char why[700] = "", what[512] = "";
    for (;;) {
        int m = agreed_master(ss, why, sizeof why);
        if (m >= 0) {
            if (m != last_m)
                memset(pointed, 0, sizeof pointed);
            last_m = m;
            int want = 0;
            char pb[16];
            snprintf(pb, sizeof pb, "%d", ss->s[m].port);
            for (int i = 0; i < ss->n; i++) {
                if (i == m || ss->s[i].role != ROLE_DATA)
                    continue;
                want++;
                char role[16];
                int mp;
                role_of(ss, i, role, sizeof role, &mp);
                bool follows = strcmp(role, "slave") == 0 && mp == ss->s[m].port;
                if (pointed[i] && now - pointed[i] < repoint_ns)
                    continue; /* told already; give it time */
                if (follows && !pointed[i]) {
                    pointed[i] = now; /* the sentinels did it; its clock starts */
                    continue;
                }
                const char *argv[3] = {"REPLICAOF", "127.0.0.1", pb};
                char e[256];
                redisReply *r = ctl_cmd(ss, &ss->s[i], 3, argv, e, sizeof e);
                if (r)
                    freeReplyObject(r);
                pointed[i] = now;
            }
            int online = replicas_in_sync(ss, m, what, sizeof what);
            if (online < want) {
                snprintf(why, sizeof why, "master %s: %s", ss->s[m].name, what);
            } else {
                bool settled = true;
                for (int i = 0; i < ss->n && settled; i++)
                    if (ss->s[i].role == ROLE_SENTINEL && answers(ss, &ss->s[i]))
                        settled = sentinel_settled(ss, i, m, why, sizeof why);
                if (settled)
                    return 0;
            }
        }
        if (now >= until) {
            snprintf(err, errlen, "%.0f s after the run: %s", (double)RESTORE_WAIT_NS / 1e9, why);
            return -1;
        }
        if (ms_sleep_ns(100000000) && ms_signal_pending()) {
            snprintf(err, errlen, "interrupted: %s", why);
            return -1;
        }
        now = ms_now_ns();
    }
}

static int restore_cluster(srvset *ss, char *err, size_t errlen)
{
    int64_t until = ms_now_ns() + RESTORE_WAIT_NS;
    for (int i = 0; i < ss->n; i++) {
        for (;;) {
            char e[256];
            const char *argv[2] = {"CLUSTER", "INFO"};
            redisReply *r = ctl_cmd(ss, &ss->s[i], 2, argv, e, sizeof e);
            bool ok = r && IS_TEXT(r) &&
                      strstr(r->str, "cluster_state:ok");
            if (r)
                freeReplyObject(r);
            if (ok)
                break;
            if (ms_now_ns() >= until) {
                snprintf(err, errlen, "cluster node %s does not say cluster_state:ok",
                         ss->s[i].name);
                return -1;
            }
            ms_sleep_ns(50000000);
        }
    }
    return 0;
}
#endif

static int op_restore(void *state, char *err, size_t errlen)
{
    srvset *ss = ss_of(state);
    for (int i = 0; i < ss->n; i++) {
        srv *s = &ss->s[i];
        if (s->stopped)
            (void)op_resume(ss, i);
        if (s->dead || proc_gone(s->pid)) {
            s->dead = true;
            int e = op_start(ss, i);
            if (e) {
                snprintf(err, errlen, "cannot start %s again: %s", s->name, strerror(-e));
                return -1;
            }
        }
    }
#ifdef MS_HIREDIS
    if (ss->deploy == CHK_DEPLOY_SENTINEL)
        return restore_sentinel(ss, err, errlen);
    if (ss->deploy == CHK_DEPLOY_CLUSTER)
        return restore_cluster(ss, err, errlen);
    for (int i = 0; i < ss->n; i++)
        if (!answers(ss, &ss->s[i])) {
            snprintf(err, errlen, "%s does not answer", ss->s[i].name);
            return -1;
        }
#endif
    return 0;
}

static void op_close(void *state)
{
    srvset *ss = ss_of(state);
    ms_redis_target_clear(&ss->t);
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

#ifdef MS_HIREDIS
static int find_sentinel_data(srvset *ss, bool *keep, char *why, size_t whylen)
{
    int master = -1;
    for (int i = 0; i < ss->n && master < 0; i++) {
        if (!keep[i])
            continue;
        const char *argv[3] = {"SENTINEL", "get-master-addr-by-name", ss->t.master_name};
        char e[256];
        redisReply *r = ctl_cmd(ss, &ss->s[i], 3, argv, e, sizeof e);
        if (r && r->type == REDIS_REPLY_ARRAY && r->elements == 2 &&
            r->element[1]->type == REDIS_REPLY_STRING)
            master = by_port(ss, atoi(r->element[1]->str));
        if (r)
            freeReplyObject(r);
        if (master < 0)
            continue;
        keep[master] = true;
        ss->s[master].role = ROLE_DATA;
        const char *argv2[3] = {"SENTINEL", "replicas", ss->t.master_name};
        r = ctl_cmd(ss, &ss->s[i], 3, argv2, e, sizeof e);
        for (size_t k = 0; r && r->type == REDIS_REPLY_ARRAY && k < r->elements; k++) {
            redisReply *kv = r->element[k];
            for (size_t f = 0; kv->type == REDIS_REPLY_ARRAY && f + 1 < kv->elements; f += 2)
                if (kv->element[f]->type == REDIS_REPLY_STRING &&
                    strcmp(kv->element[f]->str, "port") == 0 &&
                    kv->element[f + 1]->type == REDIS_REPLY_STRING) {
                    int j = by_port(ss, atoi(kv->element[f + 1]->str));
                    if (j >= 0) {
                        keep[j] = true;
                        ss->s[j].role = ROLE_DATA;
                    }
                }
        }
        if (r)
            freeReplyObject(r);
    }
    if (master < 0) {
        snprintf(why, whylen, "no sentinel of the URL names a master \"%s\" among the servers",
                 ss->t.master_name);
        return -1;
    }
    return 0;
}

static void find_cluster_nodes(srvset *ss, bool *keep)
{
    for (int i = 0; i < ss->n; i++) {
        if (!keep[i])
            continue;
        const char *argv[2] = {"CLUSTER", "NODES"};
        char e[256];
        redisReply *r = ctl_cmd(ss, &ss->s[i], 2, argv, e, sizeof e);
        if (r && IS_TEXT(r)) {
            /* "<id> 127.0.0.1:PORT@BUS flags ..." per line */
            for (char *p = r->str; p && *p;) {
                char *sp = strchr(p, ' ');
                char *colon = sp ? strchr(sp, ':') : NULL;
                if (colon) {
                    int j = by_port(ss, atoi(colon + 1));
                    if (j >= 0)
                        keep[j] = true;
                }
                p = strchr(p, '\n');
                if (p)
                    p++;
            }
        }
        if (r)
            freeReplyObject(r);
        break;
    }
}
#endif

int chk_servers_open(const char *dir, const char *url, const char *backend, chk_servers **out,
                     char *why, size_t whylen)
{
    *out = NULL;
    int kind = ms_redis_kind(url);
    if (kind == MS_RK_NONE) {
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
    if (!ms_redis_usable()) {
        snprintf(why, whylen, "this build cannot talk to Redis servers (no hiredis)");
        return 1;
    }
    srvset *ss = calloc(1, sizeof *ss);
    if (!ss) {
        snprintf(why, whylen, "out of memory");
        return -1;
    }
    snprintf(ss->dir, sizeof ss->dir, "%s", dir);
    if (ms_redis_target(url, &ss->t, why, whylen) != 0 || load_dir(ss, why, whylen) != 0) {
        op_close(ss);
        return -1;
    }
    bool keep[SRV_MAX] = {false};
    int matched = 0;
    for (int h = 0; h < ss->t.nhosts; h++) {
        int j = loopback(ss->t.host[h].host) ? by_port(ss, ss->t.host[h].port) : -1;
        if (j < 0)
            continue;
        keep[j] = true;
        ss->s[j].role = kind == MS_RK_SENTINEL ? ROLE_SENTINEL : ROLE_DATA;
        matched++;
    }
    if (matched < ss->t.nhosts) {
        snprintf(why, whylen,
                 "%d of the URL's %d hosts are servers of %s (matched by port on the "
                 "loopback interface)",
                 matched, ss->t.nhosts, dir);
        op_close(ss);
        return -1;
    }
    int rc = 0;
#ifdef MS_HIREDIS
    if (kind == MS_RK_SENTINEL)
        rc = find_sentinel_data(ss, keep, why, whylen);
    else if (kind == MS_RK_CLUSTER)
        find_cluster_nodes(ss, keep);
#endif
    if (rc) {
        op_close(ss);
        return -1;
    }
    keep_only(ss, keep);
    ss->deploy = kind == MS_RK_SINGLE     ? CHK_DEPLOY_SINGLE
                 : kind == MS_RK_SENTINEL ? CHK_DEPLOY_SENTINEL
                 : kind == MS_RK_CLUSTER  ? CHK_DEPLOY_CLUSTER
                                          : CHK_DEPLOY_REDLOCK;
    chk_servers *p = &ss->pub;
    p->backend = backend;
    p->deploy = ss->deploy;
    p->count = ss->n;
    p->quorum = kind == MS_RK_REDLOCK ? ss->t.nhosts / 2 + 1 : 1;
    p->state = ss;
    p->name = op_name;
    p->port = op_port;
    p->start = op_start;
    p->stop = op_stop;
    p->kill = op_kill;
    p->pause = op_pause;
    p->resume = op_resume;
    p->partition = op_partition;
    p->lock_servers = op_lock_servers;
    p->cut_replication = op_cut_replication;
    p->wait_failover = op_wait_failover;
    p->restore = op_restore;
    p->close = op_close;
    *out = p;
    return 0;
}
