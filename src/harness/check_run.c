/* SPDX-License-Identifier: MIT */
/*
 * check_run.c — one run of a `dlock check` scenario.
 *
 * The processes, all in one process group that the harness kills on the way
 * out whatever happens:
 *
 *   resource  the guarded resource: a tiny server on an abstract Unix socket
 *             holding one integer. Reads and writes carry the caller's
 *             fencing token; with fencing on it refuses a write whose token is
 *             below the highest it has seen (on a read or a write), or equal
 *             to it from another holder. It is a process of its own so that
 *             it is independent of the lock under test and outlives killed
 *             workers; a client's request is whole or absent (SOCK_SEQPACKET).
 *   workers   take the lock, read, pause at random, write value + 1, release.
 *             Between read and write is the fault point where the harness can
 *             park a holder (to kill or stop it) or make it lose the lock.
 *
 * Every step is appended to an event log in shared memory, stamped with
 * CLOCK_MONOTONIC, and becomes the run's history.
 */
#include "check.h"
#include "cli/cli.h"
#include "dlock_debug.h"

#include <dirent.h>
#include <errno.h>
#include <poll.h>
#include <signal.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#define ACQUIRE_TIMEOUT_MS 250 /* so that workers notice the end of the run */
#define OPEN_RETRY_NS 10000000000LL /* a worker started while servers are down */
#define BACKEND_RETRY_NS 20000000LL /* after an error of a backend being faulted */
#define STOP_GRACE_NS 5000000000LL
#define CLAIM_POLL_NS 200000LL

enum { RES_READ = 1, RES_WRITE = 2, RES_FINAL = 3 };

typedef struct res_req {
    int32_t op;
    int32_t worker;
    uint64_t token;
    int64_t value;
} res_req;

typedef struct res_rep {
    int32_t ok; /* 1 done, 0 refused */
    int32_t pad;
    int64_t value;
} res_rep;

void chk_log(chk_shm *sh, int type, int worker, uint64_t token, int64_t value, int rc)
{
    int64_t t = ms_now_ns();
    uint64_t i = atomic_fetch_add(&sh->nev, 1);
    if (i >= CHK_EVENT_CAP) {
        atomic_fetch_add(&sh->lost_events, 1);
        return;
    }
    chk_ev *e = &sh->ev[i];
    e->type = type;
    e->worker = worker;
    e->rc = rc;
    e->t = t;
    e->token = token;
    e->value = value;
    atomic_store_explicit(&e->valid, 1, memory_order_release);
}

static void run_error(chk_run *r, const char *msg)
{
    if (!r->error[0])
        snprintf(r->error, sizeof r->error, "%s", msg);
}

/* ---- the resource -------------------------------------------------------- */

static socklen_t sock_addr(const chk_run *r, struct sockaddr_un *a)
{
    memset(a, 0, sizeof *a);
    a->sun_family = AF_UNIX;
    size_t n = strlen(r->sock);
    memcpy(a->sun_path + 1, r->sock, n); /* abstract: leading NUL, no file */
    return (socklen_t)(offsetof(struct sockaddr_un, sun_path) + 1 + n);
}

static int resource_listen(const chk_run *r)
{
    int fd = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
    if (fd < 0)
        return -1;
    struct sockaddr_un a;
    socklen_t len = sock_addr(r, &a);
    if (bind(fd, (struct sockaddr *)&a, len) != 0 || listen(fd, 128) != 0) {
        int e = errno;
        close(fd);
        errno = e;
        return -1;
    }
    return fd;
}

static int resource_connect(const chk_run *r)
{
    int fd = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
    if (fd < 0)
        return -1;
    struct sockaddr_un a;
    socklen_t len = sock_addr(r, &a);
    if (connect(fd, (struct sockaddr *)&a, len) != 0) {
        int e = errno;
        close(fd);
        errno = e;
        return -1;
    }
    return fd;
}

/* One request, one reply. -1 when the resource is gone. */
static int resource_call(int fd, const res_req *q, res_rep *p)
{
    ssize_t n;
    do
        n = send(fd, q, sizeof *q, MSG_NOSIGNAL);
    while (n < 0 && errno == EINTR);
    if (n != (ssize_t)sizeof *q)
        return -1;
    do
        n = recv(fd, p, sizeof *p, 0);
    while (n < 0 && errno == EINTR);
    return n == (ssize_t)sizeof *p ? 0 : -1;
}

typedef struct res_arg {
    chk_run *r;
    int lfd;
} res_arg;

#define RES_MAX_CLIENTS 1024

static int resource_main(void *arg)
{
    res_arg *ra = arg;
    chk_run *r = ra->r;
    chk_shm *sh = r->sh;
    struct pollfd *pfd = calloc(RES_MAX_CLIENTS + 1, sizeof *pfd);
    if (!pfd)
        return 1;
    size_t n = 1;
    pfd[0] = (struct pollfd){.fd = ra->lfd, .events = POLLIN};
    int64_t value = 0;
    uint64_t max_token = 0;
    int max_holder = 0;
    for (;;) {
        if (poll(pfd, (nfds_t)n, -1) < 0) {
            if (errno == EINTR)
                continue;
            return 1;
        }
        if (pfd[0].revents & POLLIN) {
            int c = accept4(ra->lfd, NULL, NULL, SOCK_CLOEXEC);
            if (c >= 0 && n <= RES_MAX_CLIENTS)
                pfd[n++] = (struct pollfd){.fd = c, .events = POLLIN};
            else if (c >= 0)
                close(c);
        }
        for (size_t i = 1; i < n; i++) {
            if (!pfd[i].revents)
                continue;
            res_req q;
            ssize_t got = recv(pfd[i].fd, &q, sizeof q, MSG_DONTWAIT);
            if (got < 0 && (errno == EAGAIN || errno == EINTR))
                continue;
            if (got != (ssize_t)sizeof q) { /* closed: the worker ended or died */
                close(pfd[i].fd);
                pfd[i--] = pfd[--n];
                continue;
            }
            res_rep p = {.ok = 1, .value = value};
            switch (q.op) {
            case RES_READ:
                /* A token presented on a read counts as seen: a later
                 * holder's read must already fence off an earlier holder's
                 * pending write. */
                if (q.token > max_token) {
                    max_token = q.token;
                    max_holder = q.worker;
                }
                chk_log(sh, H_READ, q.worker, q.token, value, 0);
                break;
            case RES_WRITE:
                if (r->fencing && (q.token < max_token ||
                                   (q.token == max_token && q.worker != max_holder))) {
                    p.ok = 0;
                    chk_log(sh, H_WRITE_REJECTED, q.worker, q.token, q.value, 0);
                } else {
                    if (q.token > max_token) {
                        max_token = q.token;
                        max_holder = q.worker;
                    }
                    value = q.value;
                    p.value = value;
                    chk_log(sh, H_WRITE_ACCEPTED, q.worker, q.token, q.value, 0);
                }
                break;
            case RES_FINAL:
                chk_log(sh, H_FINAL, 0, 0, value, 0);
                (void)send(pfd[i].fd, &p, sizeof p, MSG_NOSIGNAL);
                free(pfd);
                return 0;
            default:
                p.ok = 0;
                break;
            }
            if (send(pfd[i].fd, &p, sizeof p, MSG_NOSIGNAL) < 0) {
                /* the worker died waiting for the reply: nothing to do */
            }
        }
    }
}

/* ---- a worker -------------------------------------------------------------- */

typedef struct worker_arg {
    chk_run *r;
    int slot;
    int id;
} worker_arg;

static void worker_fail(chk_slot *me, int id, const char *what, const char *why)
{
    if (atomic_exchange(&me->failed, 1) == 0)
        snprintf(me->err, sizeof me->err, "worker w=%d: %s: %s", id, what, why);
}

/* What the holder itself can see of its lock: dlock_state(), and whether
 * the lost descriptor is readable. */
static void log_state(chk_shm *sh, int id, dlock_lock *l, uint64_t tk)
{
    int st = (int)dlock_state(l);
    int fd = dlock_lost_fd(l);
    struct pollfd p = {.fd = fd, .events = POLLIN};
    int readable = fd >= 0 && poll(&p, 1, 0) == 1 && (p.revents & POLLIN);
    chk_log(sh, H_STATE, id, tk, st, readable);
}

/* The fault point, between read and write; true if the worker parked. */
static bool fault_point(chk_run *r, chk_slot *me, int slot, int id, dlock_lock *l, uint64_t tk)
{
    chk_shm *sh = r->sh;
    int f = atomic_load(&sh->fault);
    if (f == CHK_FAULT_NONE || !atomic_compare_exchange_strong(&sh->fault, &f, CHK_FAULT_NONE))
        return false;
    if (f == CHK_FAULT_LOSE) {
        /* Stamped before the loss: from here on another worker may hold
         * the lock, and this window must be over by then. */
        chk_log(sh, H_LOST, id, tk, 0, 0);
        int rc = dlock_debug_force_loss(l);
        if (rc)
            worker_fail(me, id, "dlock_debug_force_loss", dlock_lock_errmsg(l));
    }
    atomic_store(&me->go, 0);
    atomic_store(&me->parked, 1);
    atomic_store(&sh->claimed, slot + 1);
    while (!atomic_load(&me->go) && !atomic_load(&sh->stop))
        ms_sleep_ns(100000);
    atomic_store(&me->parked, 0);
    return true;
}

/* The library's loss notification, from its renewal thread: one worker per
 * process, so the arguments can live in a static. */
static struct {
    chk_shm *sh;
    _Atomic int id;
    _Atomic uint64_t token;
} lost_arg;

static void on_lost(dlock_lock *l, void *arg)
{
    (void)arg;
    /* with the moment the library declared it: a busy machine may run this
     * thread later */
    chk_log(lost_arg.sh, H_LOST_NOTIFIED, atomic_load(&lost_arg.id), atomic_load(&lost_arg.token),
            dlock_debug_lost_at_ns(l), 0);
}

/* Errors a worker rides out while the harness faults the backend's servers,
 * or cuts the worker off from them (a request through a frozen relay times
 * out). */
static bool backend_fault_error(const chk_run *r, int rc)
{
    return ((r->server_faults || r->relayed) &&
            (rc == DLOCK_EUNREACHABLE || rc == DLOCK_EPROTO)) ||
           (r->relayed && rc == DLOCK_ETIMEDOUT);
}

/*
 * The URLs of a split deployment (chk_scenario.split): worker 0 reaches only
 * a follower that can be cut off from the other members, the other workers
 * every other member. A follower, because cutting off the leader is an
 * election, not the case the scenario is about. 0, or -1 with r->error.
 */
static int split_urls(chk_run *r, const chk_config *cfg)
{
    const chk_servers *sv = cfg->servers;
    chk_upstreams u;
    char why[400];
    const char *url = cfg->url ? cfg->url : getenv("DLOCK_URL");
    if (!sv || chk_upstreams_parse(url, &cfg->topo, &u, why, sizeof why) != 0) {
        snprintf(r->error, sizeof r->error, "cannot split the deployment: %s",
                 sv ? why : "no servers");
        return -1;
    }
    int leader = sv->leader(sv->state), m = -1;
    for (int i = 0; i < sv->count && m < 0; i++)
        if (i != leader && sv->holds_data(sv->state, i) && sv->partitionable &&
            sv->partitionable(sv->state, i))
            m = i;
    int mh = -1;
    for (int h = 0; m >= 0 && h < u.n; h++)
        if (u.host[h].port == sv->port(sv->state, m))
            mh = h;
    if (mh < 0 || u.n < 2) {
        snprintf(r->error, sizeof r->error,
                 "cannot split the deployment: no follower among the URL's hosts can be cut "
                 "off from the others (NAME.links or NAME.partition)");
        return -1;
    }
    char rest[CHK_RELAY_HOSTS * 270] = "";
    size_t rl = 0;
    for (int h = 0; h < u.n; h++)
        if (h != mh)
            rl += (size_t)snprintf(rest + rl, sizeof rest - rl, "%s%s:%d", rl ? "," : "",
                                   u.host[h].host, u.host[h].port);
    size_t n0 = (size_t)snprintf(r->split_url[0], sizeof r->split_url[0], "%s%s:%d%s", u.prefix,
                                 u.host[mh].host, u.host[mh].port, u.suffix);
    size_t n1 = (size_t)snprintf(r->split_url[1], sizeof r->split_url[1], "%s%s%s", u.prefix,
                                 rest, u.suffix);
    if (n0 >= sizeof r->split_url[0] || n1 >= sizeof r->split_url[1]) {
        snprintf(r->error, sizeof r->error, "cannot split the deployment: URL too long");
        return -1;
    }
    r->split_member = m;
    return 0;
}

/* Wait at the closed gate (chk_gate) before acquiring; false on a stop. */
static bool gate(chk_shm *sh, chk_slot *me)
{
    if (!atomic_load(&sh->gate))
        return true;
    atomic_store(&me->at_gate, 1);
    while (atomic_load(&sh->gate) && !atomic_load(&me->pass_gate) && !atomic_load(&sh->stop))
        ms_sleep_ns(100000);
    atomic_store(&me->at_gate, 0);
    return !atomic_load(&sh->stop);
}

/* A server that did not answer (a connect, a request) within an
 * acquisition's short timeout (begun at start_ns) is slow, not gone, unless
 * a fault says otherwise: on a loaded machine a new PostgreSQL session has
 * taken longer than the 250 ms a worker waits. The worker tries again. */
static bool cut_by_deadline(int rc, int64_t start_ns, int timeout_ms)
{
    return rc == DLOCK_EUNREACHABLE && ms_now_ns() - start_ns >= (int64_t)timeout_ms * 1000000;
}

/* ---- claims (the claims scenario) --------------------------------------- */

#define CLAIM_KEYS_MAX 1000000
#define CLAIM_WORK_NS 1000000LL      /* a claim's work: 1 ms ... */
#define CLAIM_WORK_SPREAD_NS 4000000LL /* ... up to 5 ms */

/* What the history keeps of a result (FNV-1a, 63 bits: a value). */
static int64_t claim_hash(const char *s, size_t n)
{
    uint64_t h = 0xcbf29ce484222325ULL;
    for (size_t i = 0; i < n; i++)
        h = (h ^ (unsigned char)s[i]) * 0x100000001b3ULL;
    return (int64_t)(h >> 1);
}

static void claim_key_name(const chk_run *r, int k, char *buf, size_t len)
{
    snprintf(buf, len, "%s-k%d", r->lock, k);
}

/* Keys 0, 1, 2, ... in turn, every worker alike: on each, begin the claim;
 * the first caller runs it (logs the attempt, may be parked at the fault
 * point, works a little, records a result naming key, attempt and worker),
 * the others replay what it recorded. A busy key is begun again until it
 * is done or runnable. A worker started in place of a killed one begins
 * with the last key begun. Returns the worker's exit status. */
static int claim_loop(chk_run *r, chk_slot *me, int slot, int id, dlock_client *client,
                      const dlock_lock_opts *lo, int acq_timeout, uint64_t *seed)
{
    chk_shm *sh = r->sh;
    dlock_claim_opts co;
    dlock_claim_opts_init(&co);
    int k = atomic_load(&sh->claim_keys) - 1;
    if (k < 0)
        k = 0;
    while (!atomic_load(&sh->stop) && k < CLAIM_KEYS_MAX) {
        int seen = atomic_load(&sh->claim_keys);
        while (seen < k + 1 && !atomic_compare_exchange_weak(&sh->claim_keys, &seen, k + 1)) {
        }
        char name[160];
        claim_key_name(r, k, name, sizeof name);
        dlock_lock *l = NULL;
        int rc = dlock_lock_new(&l, client, name, lo);
        if (rc) {
            worker_fail(me, id, "cannot make the claim's lock handle", dlock_client_errmsg(client));
            return 1;
        }
        dlock_claim *cl = NULL;
        int64_t t0 = ms_now_ns();
        rc = dlock_claim_begin(l, &co, acq_timeout, &cl);
        if (rc) {
            if (rc == DLOCK_ETIMEDOUT || rc == DLOCK_EBUSY ||
                cut_by_deadline(rc, t0, acq_timeout) ||
                backend_fault_error(r, rc)) {
                dlock_lock_free(l);
                continue; /* someone runs it: again, until it is done or free */
            }
            worker_fail(me, id, "dlock_claim_begin", dlock_lock_errmsg(l));
            dlock_lock_free(l);
            return 1;
        }
        char res[96];
        size_t len;
        if (dlock_claim_state(cl) == DLOCK_CLAIM_RUN) {
            unsigned attempt = dlock_claim_attempt(cl);
            atomic_store(&lost_arg.token, (uint64_t)k);
            chk_log(sh, H_CLAIM_RUN, id, (uint64_t)k, attempt, 0);
            if (attempt > 1)
                atomic_fetch_add(&sh->claim_reruns, 1);
            (void)fault_point(r, me, slot, id, l, (uint64_t)k);
            ms_sleep_ns(CLAIM_WORK_NS + (int64_t)(ms_rand(seed) % (uint64_t)CLAIM_WORK_SPREAD_NS));
            int n = snprintf(res, sizeof res, "key %d attempt %u by w=%d", k, attempt, id);
            len = n > 0 ? (size_t)n : 0;
            chk_log(sh, H_CLAIM_FINISH, id, (uint64_t)k, claim_hash(res, len), 0);
            rc = dlock_claim_finish(cl, 0, res, len);
            chk_log(sh, H_CLAIM_FINISHED, id, (uint64_t)k, claim_hash(res, len), rc);
            if (rc && rc != DLOCK_ELOST && !backend_fault_error(r, rc)) {
                worker_fail(me, id, "dlock_claim_finish", dlock_lock_errmsg(l));
                dlock_claim_free(cl);
                dlock_lock_free(l);
                return 1;
            }
            atomic_fetch_add(&me->writes, 1);
        } else {
            const char *got = dlock_claim_result(cl, &len);
            chk_log(sh, H_CLAIM_REPLAY, id, (uint64_t)k, claim_hash(got, len),
                    (int)dlock_claim_attempt(cl));
        }
        dlock_claim_free(cl);
        dlock_lock_free(l);
        k++;
    }
    return 0;
}

static int worker_main(void *arg)
{
    worker_arg *wa = arg;
    chk_run *r = wa->r;
    chk_shm *sh = r->sh;
    chk_slot *me = &sh->slot[wa->slot];
    int id = wa->id;
    dlock_client *client = NULL;
    dlock_lock *l = NULL;
    int fd = -1;
    lost_arg.sh = sh;
    atomic_store(&lost_arg.id, id);
    int rc;
    /* A worker started while a server is down waits for it. */
    int64_t open_until = ms_now_ns() + (r->server_faults ? OPEN_RETRY_NS : 0);
    /* through its relay, if the scenario cuts workers off; to one side of
     * a split deployment, if the scenario splits it */
    const char *url = r->relayed              ? r->relay[wa->slot].url
                      : r->split_member >= 0 ? r->split_url[wa->slot == 0 ? 0 : 1]
                                             : r->cfg->url;
    while ((rc = dlock_client_open(&client, url, NULL)) != 0 &&
           rc == DLOCK_EUNREACHABLE && ms_now_ns() < open_until && !atomic_load(&sh->stop))
        ms_sleep_ns(BACKEND_RETRY_NS * 5);
    if (rc) {
        worker_fail(me, id, "cannot open backend", dlock_client_errmsg(NULL));
        return 1;
    }
    dlock_lock_opts o;
    dlock_lock_opts_init(&o);
    o.ttl_ms = r->ttl_ms;
    o.on_lost = on_lost;
    rc = dlock_lock_new(&l, client, r->lock, &o);
    if (rc) {
        worker_fail(me, id, "cannot make the lock handle", dlock_client_errmsg(client));
        dlock_client_close(client);
        return 1;
    }
    fd = resource_connect(r);
    if (fd < 0) {
        worker_fail(me, id, "cannot reach the resource", strerror(errno));
        dlock_lock_free(l);
        dlock_client_close(client);
        return 1;
    }
    /* Short enough that an acquisition granted legitimately is reported
     * well inside its ttl (the checker calls one reported later than a ttl
     * after the call began a late grant). */
    int acq_timeout = r->ttl_ms / 4 < ACQUIRE_TIMEOUT_MS ? r->ttl_ms / 4 : ACQUIRE_TIMEOUT_MS;
    if (acq_timeout < 5)
        acq_timeout = 5;
    uint64_t seed = 0x9E3779B97F4A7C15ULL ^ ((uint64_t)getpid() << 17) ^ (uint64_t)ms_now_ns();
    int status = r->claims ? claim_loop(r, me, wa->slot, id, client, &o, acq_timeout, &seed) : 0;
    while (!r->claims && !atomic_load(&sh->stop)) {
        if (!gate(sh, me))
            break;
        atomic_store(&me->pass_gate, 0);
        bool watched = atomic_exchange(&me->watched, 0) != 0;
        chk_log(sh, H_ACQUIRE, id, 0, 0, 0);
        atomic_store(&me->in_acquire, 1);
        int64_t acq_start = ms_now_ns();
        rc = dlock_acquire(l, acq_timeout);
        atomic_store(&me->in_acquire, 0);
        bool slow = cut_by_deadline(rc, acq_start, acq_timeout);
        if (watched) {
            atomic_store(&me->acq_state, (int)dlock_state(l));
            atomic_store(&me->acq_outcome, rc == 0 ? 1 : 2);
        }
        if (rc) {
            chk_log(sh, H_ACQUIRE_FAILED, id, 0, 0, rc);
            if (rc == DLOCK_ETIMEDOUT || slow)
                continue;
            if (backend_fault_error(r, rc) || (watched && rc == DLOCK_EUNREACHABLE)) {
                ms_sleep_ns(BACKEND_RETRY_NS);
                continue;
            }
            worker_fail(me, id, "acquire", dlock_lock_errmsg(l));
            status = 1;
            break;
        }
        uint64_t tk = dlock_token(l);
        if (tk == 0) {
            /* Lost before its token could be read (the worker was stopped
             * past the lease right after the grant): an empty holding,
             * with no token to write under. Given back, tried again. */
            atomic_store(&lost_arg.token, 0);
            chk_log(sh, H_ACQUIRE_FAILED, id, 0, 0, DLOCK_ELOST);
            (void)dlock_release(l);
            continue;
        }
        atomic_store(&lost_arg.token, tk);
        /* The holding's end as the library promises it, on the history's
         * clock (0: no deadline): a session lease granted before this
         * acquisition may end sooner than the call plus a ttl. */
        int64_t before = ms_now_ns();
        long long valid = dlock_valid_ms(l);
        chk_log(sh, H_ACQUIRED, id, tk, valid > 0 ? before + valid * 1000000 : 0, 0);
        if (watched)
            log_state(sh, id, l, tk);
        res_req q = {.op = RES_READ, .worker = id, .token = tk};
        res_rep p;
        if (resource_call(fd, &q, &p) != 0) {
            worker_fail(me, id, "read", "the resource is gone");
            status = 1;
            break;
        }
        if (fault_point(r, me, wa->slot, id, l, tk))
            log_state(sh, id, l, tk); /* what it could know, had it looked */
        if (r->cfg->max_pause_us > 0)
            ms_sleep_ns((int64_t)(ms_rand(&seed) % (uint64_t)r->cfg->max_pause_us) * 1000);
        /* No check of dlock_state here, on purpose: this is the window in
         * which a holder that was paused does not know it lost the lock.
         * What the library promises now is logged, not acted on: renewals
         * since the acquisition extend the holding. */
        before = ms_now_ns();
        valid = dlock_valid_ms(l);
        if (valid > 0)
            chk_log(sh, H_VALID, id, tk, before + valid * 1000000, 0);
        q = (res_req){.op = RES_WRITE, .worker = id, .token = tk, .value = p.value + 1};
        if (resource_call(fd, &q, &p) != 0) {
            worker_fail(me, id, "write", "the resource is gone");
            status = 1;
            break;
        }
        atomic_fetch_add(&me->writes, 1);
        chk_log(sh, H_RELEASE, id, tk, 0, 0);
        rc = dlock_release(l);
        if (rc && rc != DLOCK_ELOST && !backend_fault_error(r, rc)) {
            worker_fail(me, id, "release", dlock_lock_errmsg(l));
            status = 1;
            break;
        }
    }
    close(fd);
    dlock_lock_free(l);
    dlock_client_close(client);
    return status;
}

/* ---- control of the targets ----------------------------------------------- */

static int slot_of_pid(const chk_run *r, pid_t pid)
{
    for (int i = 0; i < r->cfg->workers; i++)
        if (atomic_load(&r->sh->slot[i].pid) == pid)
            return i;
    return -1;
}

static int client_start(chk_run *r, int idx)
{
    chk_slot *s = &r->sh->slot[idx];
    if (atomic_load(&s->pid) != 0)
        return -EBUSY;
    if (r->relayed) { /* a relay of its own, not frozen */
        int e = chk_relay_start(r, idx);
        if (e)
            return e;
    }
    worker_arg wa = {.r = r, .slot = idx, .id = ++r->next_id};
    atomic_store(&s->id, wa.id);
    atomic_store(&s->parked, 0);
    atomic_store(&s->go, 0);
    pid_t pid = ms_spawn(&r->group, worker_main, &wa);
    if (pid < 0)
        return -errno;
    atomic_store(&s->pid, pid);
    return 0;
}

/* Signal a worker and wait for it to end (kill, stop). */
static int client_end(chk_run *r, int idx, int sig, int type)
{
    chk_slot *s = &r->sh->slot[idx];
    pid_t pid = atomic_load(&s->pid);
    if (pid <= 0)
        return -ESRCH;
    if (type >= 0) /* stamped first: the holding ends no later than this */
        chk_log(r->sh, type, atomic_load(&s->id), 0, 0, 0);
    if (kill(pid, sig) != 0)
        return -errno;
    if (sig != SIGKILL)
        (void)kill(pid, SIGCONT); /* a stopped worker must see SIGTERM */
    int st;
    while (waitpid(pid, &st, 0) < 0 && errno == EINTR) {
    }
    ms_forget(&r->group, pid);
    atomic_store(&s->pid, 0);
    r->paused[idx] = false;
    return 0;
}

void chk_server_event(chk_run *r, int type, int idx)
{
    chk_log(r->sh, type, 0, 0, idx, 0);
}

/* A server operation, stamped in the history: a fault when it begins, a
 * (re)start or a continue once it is done. */
static int server_op(chk_run *r, int idx, int (*op)(void *, int), int type_before,
                     int type_after)
{
    const chk_servers *sv = r->cfg->servers;
    if (!sv || !op)
        return -ENOTSUP;
    if (idx < 0 || idx >= sv->count)
        return -EINVAL;
    r->servers_touched = true;
    if (type_before >= 0)
        chk_server_event(r, type_before, idx);
    int e = op(sv->state, idx);
    if (e == 0 && type_after >= 0)
        chk_server_event(r, type_after, idx);
    return e;
}

static int ctl_start(chk_run *r, chk_role role, int idx)
{
    if (role == CHK_SERVER)
        return server_op(r, idx, r->cfg->servers ? r->cfg->servers->start : NULL, -1,
                         H_SERVER_STARTED);
    return client_start(r, idx);
}

static int ctl_stop(chk_run *r, chk_role role, int idx)
{
    if (role == CHK_SERVER)
        return server_op(r, idx, r->cfg->servers ? r->cfg->servers->stop : NULL,
                         H_SERVER_KILLED, -1);
    return client_end(r, idx, SIGTERM, -1);
}

static int ctl_kill(chk_run *r, chk_role role, int idx)
{
    if (role == CHK_SERVER)
        return server_op(r, idx, r->cfg->servers ? r->cfg->servers->kill : NULL,
                         H_SERVER_KILLED, -1);
    return client_end(r, idx, SIGKILL, H_KILLED);
}

static int ctl_pause(chk_run *r, chk_role role, int idx)
{
    if (role == CHK_SERVER)
        return server_op(r, idx, r->cfg->servers ? r->cfg->servers->pause : NULL,
                         H_SERVER_PAUSED, -1);
    chk_slot *s = &r->sh->slot[idx];
    pid_t pid = atomic_load(&s->pid);
    if (pid <= 0)
        return -ESRCH;
    chk_log(r->sh, H_PAUSED, atomic_load(&s->id), 0, 0, 0);
    if (kill(pid, SIGSTOP) != 0)
        return -errno;
    /* Stopped for sure before the scenario goes on. */
    int st;
    for (;;) {
        pid_t w = waitpid(pid, &st, WUNTRACED);
        if (w < 0 && errno == EINTR)
            continue;
        if (w == pid && WIFSTOPPED(st))
            break;
        ms_forget(&r->group, pid);
        atomic_store(&s->pid, 0);
        return -ESRCH; /* it died instead */
    }
    r->paused[idx] = true;
    return 0;
}

static int ctl_resume(chk_run *r, chk_role role, int idx)
{
    if (role == CHK_SERVER)
        return server_op(r, idx, r->cfg->servers ? r->cfg->servers->resume : NULL, -1,
                         H_SERVER_RESUMED);
    chk_slot *s = &r->sh->slot[idx];
    pid_t pid = atomic_load(&s->pid);
    if (pid <= 0)
        return -ESRCH;
    chk_log(r->sh, H_RESUMED, atomic_load(&s->id), 0, 0, 0);
    if (kill(pid, SIGCONT) != 0)
        return -errno;
    r->paused[idx] = false;
    return 0;
}

/* A client is cut off by freezing its relay. The event is stamped once the
 * relay stands still, with the moment the worker's lease runs out on the
 * servers, from what reached them last (0 if unknown). */
static int ctl_partition(chk_run *r, chk_role role, int idx, int isolated)
{
    if (role == CHK_SERVER && r->cfg->servers && r->cfg->servers->partition) {
        r->servers_touched = true;
        return r->cfg->servers->partition(r->cfg->servers->state, idx, isolated);
    }
    if (role != CHK_CLIENT || !r->relayed)
        return -ENOTSUP; /* a client without a relay cannot be cut off */
    chk_slot *s = &r->sh->slot[idx];
    if (!isolated) {
        chk_log(r->sh, H_HEALED, atomic_load(&s->id), 0, 0, 0);
        return chk_relay_thaw(r, idx);
    }
    int e = chk_relay_freeze(r, idx);
    if (e == 0)
        chk_log(r->sh, H_PARTITIONED, atomic_load(&s->id), 0,
                chk_relay_expiry(r, idx, r->ttl_ms), 0);
    return e;
}

static const chk_ctl local_ctl = {
    .start = ctl_start,
    .stop = ctl_stop,
    .kill = ctl_kill,
    .pause = ctl_pause,
    .resume = ctl_resume,
    .partition = ctl_partition,
};

/* ---- helpers for scenarios ------------------------------------------------- */

static bool stopping(chk_run *r)
{
    if (!r->interrupted)
        r->interrupted = ms_signal_pending();
    return r->interrupted || r->error[0];
}

/* Reap children that ended on their own: during a run that is an error. */
static void reap(chk_run *r)
{
    int st;
    pid_t pid;
    while ((pid = ms_reap_one(&r->group, &st)) > 0) {
        char msg[512];
        if (pid == r->resource_pid) {
            r->resource_pid = 0;
            run_error(r, "the resource server ended unexpectedly");
            continue;
        }
        int slot = slot_of_pid(r, pid);
        if (slot < 0) {
            for (int i = 0; i < r->cfg->workers; i++)
                if (r->relay[i].pid == pid) {
                    r->relay[i].pid = 0;
                    if (!atomic_load(&r->sh->stop)) {
                        snprintf(msg, sizeof msg, "the relay of worker w=%d ended unexpectedly",
                                 atomic_load(&r->sh->slot[i].id));
                        run_error(r, msg);
                    }
                }
            continue;
        }
        chk_slot *s = &r->sh->slot[slot];
        atomic_store(&s->pid, 0);
        if (atomic_load(&r->sh->stop))
            continue;
        if (atomic_load(&s->failed))
            snprintf(msg, sizeof msg, "%s", s->err);
        else if (WIFSIGNALED(st))
            snprintf(msg, sizeof msg, "worker w=%d died of signal %d", atomic_load(&s->id),
                     WTERMSIG(st));
        else
            snprintf(msg, sizeof msg, "worker w=%d exited with status %d", atomic_load(&s->id),
                     WIFEXITED(st) ? WEXITSTATUS(st) : -1);
        run_error(r, msg);
    }
}

int chk_sleep(chk_run *r, int64_t ns)
{
    int64_t until = ms_now_ns() + ns;
    for (;;) {
        reap(r);
        if (stopping(r))
            return -1;
        int64_t left = until - ms_now_ns();
        if (left <= 0)
            return 0;
        ms_sleep_ns(left < 2000000 ? left : 2000000);
    }
}

bool chk_time_up(const chk_run *r)
{
    return ms_now_ns() >= r->end_ns;
}

bool chk_fault_more(const chk_run *r)
{
    return !chk_time_up(r) || r->faults_injected == 0;
}

int64_t chk_fault_until(const chk_run *r)
{
    int64_t least = ms_now_ns() + CHK_FIRST_FAULT_NS;
    return r->faults_injected == 0 && least > r->end_ns ? least : r->end_ns;
}

void chk_arm(chk_run *r, int fault)
{
    atomic_store(&r->sh->claimed, 0);
    atomic_store(&r->sh->fault, fault);
}

void chk_disarm(chk_run *r)
{
    int f = atomic_load(&r->sh->fault);
    if (f == CHK_FAULT_NONE || !atomic_compare_exchange_strong(&r->sh->fault, &f, CHK_FAULT_NONE)) {
        /* Someone took it just now: it is about to park; let it go on. */
        int64_t until = ms_now_ns() + 1000000000LL;
        int c;
        while ((c = atomic_load(&r->sh->claimed)) == 0 && ms_now_ns() < until)
            ms_sleep_ns(CLAIM_POLL_NS);
        if (c > 0)
            chk_let_go(r, c - 1);
    }
    atomic_store(&r->sh->claimed, 0);
}

int chk_wait_claim(chk_run *r, int64_t until_ns)
{
    for (;;) {
        int c = atomic_load(&r->sh->claimed);
        if (c > 0) {
            atomic_store(&r->sh->claimed, 0);
            return c - 1;
        }
        if (ms_now_ns() >= until_ns || chk_sleep(r, CLAIM_POLL_NS) != 0) {
            chk_disarm(r);
            return -1;
        }
    }
}

void chk_let_go(chk_run *r, int slot)
{
    atomic_store(&r->sh->slot[slot].go, 1);
}

int chk_wait_writes(chk_run *r, int slot, uint64_t after, int64_t until_ns)
{
    while (atomic_load(&r->sh->slot[slot].writes) <= after) {
        if (ms_now_ns() >= until_ns || chk_sleep(r, CLAIM_POLL_NS) != 0)
            return -1;
    }
    return 0;
}

void chk_gate(chk_run *r, int closed)
{
    atomic_store(&r->sh->gate, closed);
}

int chk_gate_wait(chk_run *r, int64_t until_ns)
{
    for (;;) {
        int first = -1, waiting = 0, alive = 0;
        for (int i = 0; i < r->cfg->workers; i++) {
            if (atomic_load(&r->sh->slot[i].pid) == 0 || r->paused[i])
                continue;
            alive++;
            if (atomic_load(&r->sh->slot[i].at_gate)) {
                waiting++;
                if (first < 0)
                    first = i;
            }
        }
        if (alive > 0 && waiting == alive)
            return first;
        if (ms_now_ns() >= until_ns || chk_sleep(r, CLAIM_POLL_NS) != 0)
            return -1;
    }
}

void chk_gate_pass(chk_run *r, int slot, bool watched)
{
    chk_slot *s = &r->sh->slot[slot];
    atomic_store(&s->acq_outcome, 0);
    atomic_store(&s->watched, watched ? 1 : 0);
    atomic_store(&s->pass_gate, 1);
}

long chk_worker_syscall(chk_run *r, int slot)
{
    pid_t pid = atomic_load(&r->sh->slot[slot].pid);
    if (pid <= 0)
        return -1;
    char path[64], buf[64];
    snprintf(path, sizeof path, "/proc/%ld/syscall", (long)pid);
    FILE *f = fopen(path, "re");
    if (!f)
        return -1;
    long nr = -1;
    if (fgets(buf, sizeof buf, f) && buf[0] >= '0' && buf[0] <= '9')
        nr = strtol(buf, NULL, 10);
    fclose(f);
    return nr;
}

bool chk_worker_asleep(chk_run *r, int slot)
{
    pid_t pid = atomic_load(&r->sh->slot[slot].pid);
    if (pid <= 0)
        return false;
    char path[64];
    snprintf(path, sizeof path, "/proc/%ld/task", (long)pid);
    DIR *d = opendir(path);
    if (!d)
        return false;
    int n = 0;
    bool asleep = true;
    struct dirent *e;
    while (asleep && (e = readdir(d)) != NULL) {
        if (e->d_name[0] < '0' || e->d_name[0] > '9')
            continue;
        asleep = chk_proc_state((pid_t)strtol(e->d_name, NULL, 10)) == 'S';
        n++;
    }
    closedir(d);
    return asleep && n > 0;
}

/* The socket inodes of a process. */
static size_t socket_inodes(pid_t pid, unsigned long *out, size_t max)
{
    char path[64];
    snprintf(path, sizeof path, "/proc/%ld/fd", (long)pid);
    DIR *d = opendir(path);
    if (!d)
        return 0;
    size_t n = 0;
    struct dirent *e;
    while ((e = readdir(d)) != NULL && n < max) {
        char link[400], target[64];
        snprintf(link, sizeof link, "%s/%s", path, e->d_name);
        ssize_t len = readlink(link, target, sizeof target - 1);
        if (len <= 0)
            continue;
        target[len] = '\0';
        unsigned long ino;
        if (sscanf(target, "socket:[%lu]", &ino) == 1)
            out[n++] = ino;
    }
    closedir(d);
    return n;
}

typedef struct tcp_ent {
    unsigned lport, rport;
    unsigned long rxq, inode;
} tcp_ent;

/* Established TCP connections of the host (IPv4 and IPv6). */
static size_t tcp_table(tcp_ent *out, size_t max)
{
    static const char *const files[] = {"/proc/net/tcp", "/proc/net/tcp6"};
    size_t n = 0;
    for (size_t f = 0; f < 2; f++) {
        FILE *fp = fopen(files[f], "re");
        if (!fp)
            continue;
        char line[512];
        while (fgets(line, sizeof line, fp) && n < max) {
            unsigned lport, rport, st;
            unsigned long txq, rxq, inode;
            if (sscanf(line, " %*d: %*[0-9A-Fa-f]:%x %*[0-9A-Fa-f]:%x %x %lx:%lx %*s %*s %*s %*s %lu",
                       &lport, &rport, &st, &txq, &rxq, &inode) != 6 ||
                st != 1 /* ESTABLISHED */)
                continue;
            out[n++] = (tcp_ent){.lport = lport, .rport = rport, .rxq = rxq, .inode = inode};
        }
        fclose(fp);
    }
    return n;
}

int chk_requests_pending(chk_run *r, int slot, const int *ports, int n)
{
    pid_t pid = atomic_load(&r->sh->slot[slot].pid);
    if (pid <= 0)
        return 0;
    unsigned long ino[256];
    size_t nino = socket_inodes(pid, ino, 256);
    size_t cap = 65536;
    tcp_ent *t = malloc(cap * sizeof *t);
    if (!t)
        return 0;
    size_t nt = tcp_table(t, cap);
    int pending = 0;
    for (int k = 0; k < n; k++) {
        bool found = false;
        /* the worker's connection to the port, then its server side */
        for (size_t i = 0; i < nt && !found; i++) {
            if ((int)t[i].rport != ports[k])
                continue;
            bool mine = false;
            for (size_t j = 0; j < nino && !mine; j++)
                mine = ino[j] == t[i].inode;
            if (!mine)
                continue;
            for (size_t j = 0; j < nt && !found; j++)
                found = (int)t[j].lport == ports[k] && t[j].rport == t[i].lport &&
                        t[j].rxq > 0;
        }
        pending += found;
    }
    free(t);
    return pending;
}

/* ---- the run ----------------------------------------------------------------- */

/* Room for a server fault to be over within a run: an election or a
 * failover, then acquisitions on the deployment that is left. */
#define SERVER_FAULT_RUN_MS 6000

int chk_run_ms(const chk_config *cfg, const chk_scenario *sc)
{
    if (cfg->duration_given || sc->validity == CHK_VALID_RUNS)
        return cfg->duration_ms;
    int64_t need = 0;
    if (chk_has_deadline(cfg)) {
        /* A killed or stopped holder's lock comes free when its span has
         * run out on the servers (a session outlives the holder's span by
         * half of it): two such faults, and the takeovers, fit in a run. */
        int ttl = cfg->session_ttl_ms  ? cfg->session_ttl_ms
                  : cfg->ttl_ms > sc->min_ttl_ms ? cfg->ttl_ms
                                                 : sc->min_ttl_ms;
        need = 2 * chk_server_span_ms(cfg, ttl) + 2000;
    }
    if (sc->needs_servers && need < SERVER_FAULT_RUN_MS)
        need = SERVER_FAULT_RUN_MS;
    return need > cfg->duration_ms ? (int)(need < 3600 * 1000 ? need : 3600 * 1000)
                                   : cfg->duration_ms;
}

static void stop_all(chk_run *r)
{
    chk_shm *sh = r->sh;
    atomic_store(&sh->stop, 1);
    atomic_store(&sh->gate, 0);
    atomic_store(&sh->fault, CHK_FAULT_NONE);
    for (int i = 0; r->relayed && i < r->cfg->workers; i++)
        if (r->relay[i].frozen)
            (void)chk_relay_thaw(r, i); /* so that workers can say goodbye */
    for (int i = 0; i < r->cfg->workers; i++) {
        chk_let_go(r, i);
        if (r->paused[i])
            (void)ctl_resume(r, CHK_CLIENT, i);
    }
    /* Workers see the flag within one acquire timeout; then a release and
     * the client's close (a request each), or a connect under way, may
     * take as long as the client's timeouts allow. */
    int64_t grace_ns = STOP_GRACE_NS + ((int64_t)r->cfg->connect_timeout_ms +
                                        2 * (int64_t)r->cfg->op_timeout_ms) * 1000000;
    int64_t until = ms_now_ns() + grace_ns;
    for (;;) {
        reap(r);
        int alive = 0;
        for (int i = 0; i < r->cfg->workers; i++)
            alive += atomic_load(&sh->slot[i].pid) != 0;
        if (!alive)
            break;
        if (ms_now_ns() >= until || ms_signal_pending()) {
            if (!ms_signal_pending())
                if (!r->error[0])
                    snprintf(r->error, sizeof r->error,
                             "workers did not stop within %.1f s of the end of the run",
                             (double)grace_ns / 1e9);
            for (int i = 0; i < r->cfg->workers; i++)
                if (atomic_load(&sh->slot[i].pid) != 0)
                    (void)client_end(r, i, SIGKILL, -1);
            break;
        }
        ms_sleep_ns(2000000);
    }
    /* The resource's last word: its final value, logged by itself. */
    if (r->resource_pid > 0) {
        int fd = resource_connect(r);
        res_req q = {.op = RES_FINAL};
        res_rep p;
        if (fd < 0 || resource_call(fd, &q, &p) != 0)
            run_error(r, "the resource server did not answer at the end of the run");
        if (fd >= 0)
            close(fd);
    }
}

/* Remove what the run's lock name left behind (the file backend's lock
 * file), where the backend's harness operations know what it is, and the
 * claims scenario's records and lock files: through a client of its own,
 * opened only then (the file backend's starts no thread, and no worker is
 * forked now). */
static void forget_lock(const chk_run *r)
{
    const struct dh_tools *t = dh_tools_for(r->cfg->backend);
    bool files = t && t->forget;
    int keys = r->claims ? atomic_load(&r->sh->claim_keys) : 0;
    dlock_client *c = NULL;
    if ((!files && keys == 0) || dlock_client_open(&c, r->cfg->url, NULL) != 0)
        return;
    if (files)
        (void)dh_forget(c, r->lock);
    for (int k = 0; k < keys; k++) {
        char name[160];
        claim_key_name(r, k, name, sizeof name);
        (void)dlock_claim_forget(c, name); /* DLOCK_ENOENT: nothing recorded */
        if (files)
            (void)dh_forget(c, name);
    }
    dlock_client_close(c);
}

int chk_run_once(chk_run *r, const chk_config *cfg, const chk_scenario *sc, bool fencing,
                 hist_run *out)
{
    const char *scenario = sc->name;
    static int runs;
    chk_shm *sh = r->sh;
    /* an empty history if the run cannot even start */
    memset(out, 0, sizeof *out);
    hist_meta_default(&out->meta);
    uint64_t used = atomic_load(&sh->nev);
    if (used > CHK_EVENT_CAP)
        used = CHK_EVENT_CAP;
    memset(sh->ev, 0, used * sizeof sh->ev[0]); /* stale valid flags */
    memset(sh->slot, 0, sizeof sh->slot);
    atomic_store(&sh->nev, 0);
    atomic_store(&sh->lost_events, 0);
    atomic_store(&sh->stop, 0);
    atomic_store(&sh->gate, 0);
    atomic_store(&sh->fault, CHK_FAULT_NONE);
    atomic_store(&sh->claimed, 0);
    atomic_store(&sh->claim_keys, 0);
    atomic_store(&sh->claim_reruns, 0);

    r->cfg = cfg;
    r->ctl = &local_ctl;
    r->fencing = fencing;
    r->ttl_ms = cfg->session_ttl_ms ? cfg->session_ttl_ms
                : cfg->ttl_ms > sc->min_ttl_ms ? cfg->ttl_ms
                                              : sc->min_ttl_ms;
    r->server_faults = sc->needs_servers != 0;
    r->relayed = sc->relayed;
    r->claims = sc->claims;
    for (int i = 0; i < CHK_MAX_WORKERS; i++)
        r->relay[i] = (chk_relay){.pid = 0, .ctl = -1};
    if (r->relayed) {
        char why[400];
        const char *url = cfg->url ? cfg->url : getenv("DLOCK_URL");
        if (chk_upstreams_parse(url, &cfg->topo, &r->up, why, sizeof why) != 0) {
            snprintf(r->error, sizeof r->error, "cannot relay the workers: %s", why);
            return -1;
        }
    }
    r->split_member = -1;
    if (sc->split && split_urls(r, cfg) != 0)
        return -1;
    r->servers_touched = false;
    r->acq_granted = r->acq_failed = r->acq_held = r->acq_kept = 0;
    r->resource_pid = 0;
    r->next_id = 0;
    r->error[0] = r->note[0] = '\0';
    r->faults_injected = r->faults_effective = 0;
    memset(r->paused, 0, sizeof r->paused);
    memset(&r->group, 0, sizeof r->group);
    runs++;
    snprintf(r->sock, sizeof r->sock, "dlock-check-%ld-%d", (long)getpid(), runs);
    snprintf(r->lock, sizeof r->lock, "check-%ld-%d-%s-%s", (long)getpid(), runs, scenario,
             fencing ? "fenced" : "canary");

    /* A server fault starts from a settled deployment (after a test's own
     * setup, or another tool's, the servers may still be converging). */
    if (sc->needs_servers && cfg->servers && cfg->servers->restore) {
        char why[300];
        if (cfg->servers->restore(cfg->servers->state, why, sizeof why) != 0) {
            snprintf(r->error, sizeof r->error, "the servers are not ready: %s", why);
            return -1;
        }
    }

    int rc = 0;
    /* The resource first: it leads the process group, and it listens before
     * any worker tries to connect. */
    int lfd = resource_listen(r);
    if (lfd < 0) {
        snprintf(r->error, sizeof r->error, "cannot listen for the resource: %s", strerror(errno));
        return -1;
    }
    res_arg ra = {.r = r, .lfd = lfd};
    r->resource_pid = ms_spawn(&r->group, resource_main, &ra);
    close(lfd);
    if (r->resource_pid < 0) {
        snprintf(r->error, sizeof r->error, "cannot start the resource: %s", strerror(errno));
        r->resource_pid = 0;
        rc = -1;
    }
    for (int i = 0; rc == 0 && i < cfg->workers; i++) {
        int e = client_start(r, i);
        if (e) {
            snprintf(r->error, sizeof r->error, "cannot start a worker: %s", strerror(-e));
            rc = -1;
        }
    }
    if (rc == 0) {
        r->start_ns = ms_now_ns();
        r->end_ns = r->start_ns + (int64_t)chk_run_ms(cfg, sc) * 1000000;
        (void)sc->inject(r);
        if (!stopping(r))
            reap(r);
    }
    stop_all(r);
    ms_group_destroy(&r->group);
    r->resource_pid = 0;
    for (int i = 0; i < CHK_MAX_WORKERS; i++) {
        if (r->relay[i].ctl >= 0)
            close(r->relay[i].ctl);
        r->relay[i] = (chk_relay){.pid = 0, .ctl = -1};
    }
    forget_lock(r);
    /* The next run starts from the deployment as it was. */
    if (r->servers_touched && cfg->servers && cfg->servers->restore) {
        char why[300];
        if (cfg->servers->restore(cfg->servers->state, why, sizeof why) != 0) {
            char msg[400];
            snprintf(msg, sizeof msg, "cannot restore the servers after the run: %s", why);
            run_error(r, msg);
        }
    }

    /* The history, from the log. */
    memset(out, 0, sizeof *out);
    hist_meta_default(&out->meta);
    snprintf(out->meta.scenario, sizeof out->meta.scenario, "%s", scenario);
    snprintf(out->meta.mode, sizeof out->meta.mode, "%s", fencing ? "fenced" : "canary");
    snprintf(out->meta.backend, sizeof out->meta.backend, "%s", cfg->backend);
    out->meta.caps = cfg->caps;
    out->meta.ttl_ms = chk_has_deadline(cfg) ? r->ttl_ms : 0;
    out->meta.fencing = fencing;
    uint64_t n = atomic_load(&sh->nev);
    if (n > CHK_EVENT_CAP)
        n = CHK_EVENT_CAP;
    for (uint64_t i = 0; i < n; i++) {
        const chk_ev *e = &sh->ev[i];
        if (!atomic_load_explicit(&e->valid, memory_order_acquire))
            continue;
        hist_event he = {.t = e->t, .type = e->type, .worker = e->worker, .token = e->token,
                         .value = e->value, .rc = e->rc};
        if (hist_append(out, &he) != 0) {
            run_error(r, "out of memory");
            break;
        }
    }
    if (atomic_load(&sh->lost_events) > 0)
        run_error(r, "the event log overflowed: run shorter (-D) or with fewer workers (-P)");
    return r->error[0] || r->interrupted ? -1 : 0;
}
