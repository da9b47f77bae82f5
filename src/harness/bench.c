/* SPDX-License-Identifier: MIT */
/*
 * bench.c — `dlock bench` (SPEC §7): the cost of locking on any backend.
 *
 * Waiters (worker processes, with several threads each past --max-procs)
 * take and release locks for warm-up + D seconds. Every critical section is
 * stamped four times with CLOCK_MONOTONIC — acquire start, acquired, release
 * start, release end — into a shared anonymous mapping made before fork, so
 * the timed path does no I/O and the harness sees the stamps even of a
 * worker that died. From them the harness computes cycle, wait and handover
 * percentiles, the fairness spread and the violations of mutual exclusion.
 */
#include "cli/cli.h"
#include "harness/tools.h"
#include "measure.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
#include <linux/futex.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#define MAX_WAITERS 512
#define MAX_NAMES 100000
#define MAX_HELD 10000000 /* -L */
#define DEFAULT_MAX_PROCS 64
/* Stamps kept in total; pages are touched only when used (MAP_NORESERVE). */
#define RECORD_BUDGET ((size_t)1 << 24)
#define BASELINE_ITERS 20000
/* Rounds of the relay baseline (each waits 1 ms for the BLPOP to be in place). */
#define RELAY_ITERS 300
#define BASELINE_MAX_NS 300000000LL
#define BENCH_ERR 600 /* room for a client's error message */

const char cli_bench_help[] =
    "usage: dlock [--url URL] bench [-P N] [-K N] [-H US] [-D SECS] [--warmup SECS]\n"
    "                              [--fair | --no-fair]\n"
    "                              [--shared [--writers N] | --permits N]\n"
    "                              [--ttl SECS] [--pick random|rr] [--baseline] [--rss]\n"
    "                              [--commandstats] [-L N]\n"
    "                              [--handles cached|per-op] [--max-procs N] [--json]\n"
    "\n"
    "Measure the cost of locking: P waiters take and release locks on K names for\n"
    "warm-up + D seconds, busy-waiting H microseconds inside each critical section.\n"
    "Waiters are processes; above --max-procs (64) each process runs several\n"
    "waiters as threads. Only sections started after the warm-up are counted;\n"
    "violations are counted over the whole run.\n"
    "\n"
    "  -P, --processes N  waiters (1..512, default 1)\n"
    "  -K, --names N      lock names (1..100000, default 1)\n"
    "  -H, --hold US      busy-wait inside each section, microseconds (default 0)\n"
    "  -D, --duration S   measured seconds after the warm-up (default 5)\n"
    "      --warmup S     seconds not counted at the start (default 1)\n"
    "      --fair, --no-fair  FIFO waiting or not (default: the backend's default)\n"
    "      --shared       read-write lock: --writers waiters (default P/4) write,\n"
    "                     the others read\n"
    "      --permits N    semaphore of N permits\n"
    "      --ttl S        lease length for lease backends\n"
    "      --pick MODE    how a waiter chooses among K names: random (default), rr\n"
    "      --handles M    cached: one handle per name and waiter, made before the\n"
    "                     run; per-op: a new handle for every section (default:\n"
    "                     cached if the descriptor limit allows it)\n"
    "      --baseline     also measure the backend's cheapest round trip and the\n"
    "                     ratios to it, in the same run: file: an uncontended\n"
    "                     F_OFD_SETLK lock+unlock; redis, sentinel: PING on one\n"
    "                     connection to the master; cluster: PING to the node of the\n"
    "                     lock's slot; redlock: PING to all masters in parallel (time\n"
    "                     to the last reply; rtt_single_p50_us: one master alone);\n"
    "                     with P > 1 also the server's bare hand-over where it has\n"
    "                     one (Redis: RPUSH waking a BLPOP; relay_p50_us)\n"
    "      --commandstats the command counters of the lock's servers (Redis family:\n"
    "                     INFO commandstats) before and after the run: the commands\n"
    "                     clients sent, per section and per hand-over (commands the\n"
    "                     lock's own server-side code runs are counted apart)\n"
    "      --rss          measure client memory per held lock (default when K >= 1000)\n"
    "  -L, --held N       each worker process also holds N locks of its own through\n"
    "                     the whole run (taken before it, one client per process):\n"
    "                     how many are still held at the end, how many were lost,\n"
    "                     the lease renewals per second that kept them and the\n"
    "                     renewal thread's CPU; memory per lock is measured on them\n"
    "      --no-prepare   do not use every name once before the run (by default\n"
    "                     first uses, e.g. creating lock files, are not timed)\n"
    "      --json         print one JSON object\n"
    "\n"
    "cycle = acquire start to release end; wait = acquire start to acquired;\n"
    "handover = acquired minus the latest release start before it, when the\n"
    "waiter was already waiting; overtaken = sections granted after a section\n"
    "whose acquire started later (about 0 for a FIFO lock); violations =\n"
    "overlapping sections beyond what the lock allows (counted over the whole\n"
    "run, warm-up included).\n"
    "\n"
    "Exit status: 0; 1 when violations were seen or -L locks were lost; 64 usage; 69 backend\n"
    "unreachable; 70 other failure; 128+N interrupted by signal N\n"
    "(what was measured until then is still printed, marked \"interrupted\").\n";

typedef struct brec {
    int64_t acq_start, acquired, rel_start, rel_end;
    uint32_t name;
    uint32_t flags; /* BREC_WRITER */
} brec;
#define BREC_WRITER 1u

typedef struct bwaiter {
    _Atomic uint64_t n;       /* records written */
    _Atomic uint64_t dropped; /* sections not recorded: buffer full */
    _Atomic int failed;
    char err[256];
} bwaiter;

typedef struct bshm {
    _Atomic int ready;
    _Atomic int64_t end_ns;   /* written before start_ns */
    _Atomic int64_t start_ns; /* 0 until the harness says go */
    _Atomic uint32_t go;      /* futex word: 1 once start_ns is set */
    /* the memory-per-lock probe */
    int64_t rss_before, rss_after;
    long rss_held, fds_before, fds_after;
    _Atomic int rss_done;
    char rss_err[256];
    /* -L: summed over the worker processes when they end (held_rss_*:
     * process 0's resident set before and after taking its locks) */
    _Atomic long held_end, lost_end, held_procs;
    _Atomic uint64_t renewed, renew_calls;
    _Atomic int64_t renew_cpu_ns, held_span_ns;
    int64_t held_rss_before, held_rss_after;
    long held_rss_n;
    char held_err[256];
    bwaiter w[MAX_WAITERS];
} bshm;

typedef enum { HANDLES_AUTO, HANDLES_CACHED, HANDLES_PER_OP } handles_mode;

typedef struct bcfg {
    const char *url;
    long P, K, H, max_procs, writers, L;
    int duration_ms, warmup_ms, ttl_ms;
    int fair; /* -1 backend default */
    bool shared, baseline, rss, json, pick_rr, no_prepare, cmdstats;
    long permits; /* 0: not a semaphore */
    handles_mode handles;
} bcfg;

typedef struct bctx {
    bcfg c;
    char backend[32];
    char url[512];
    const char *url_arg; /* the URL as given (NULL: $DLOCK_URL), to open clients */
    /* The backend's harness operations (src/harness/tools.h; NULL: none),
     * through a client that takes no lock, open only while no worker is
     * forked (measure.h). */
    const struct dh_tools *tools;
    dlock_client *client;
    pid_t harness;
    long procs, threads_max;
    bool per_op;
    bshm *sh;
    brec *recs;
    size_t cap; /* records per waiter */
    /* for the worker being forked */
    long proc_index;
} bctx;

static void lock_name(char *buf, size_t len, pid_t harness, uint32_t i)
{
    snprintf(buf, len, "bench-%ld-%" PRIu32, (long)harness, i);
}

static int64_t statm_rss_bytes(void)
{
    FILE *f = fopen("/proc/self/statm", "re");
    if (!f)
        return -1;
    long size, resident;
    int n = fscanf(f, "%ld %ld", &size, &resident);
    fclose(f);
    if (n != 2)
        return -1;
    return (int64_t)resident * sysconf(_SC_PAGESIZE);
}

static long count_fds(void)
{
    DIR *d = opendir("/proc/self/fd");
    if (!d)
        return -1;
    long n = 0;
    struct dirent *e;
    while ((e = readdir(d)) != NULL)
        n += e->d_name[0] != '.';
    closedir(d);
    return n - 1; /* the directory's own descriptor */
}

/* ---- one waiter --------------------------------------------------------- */

typedef struct waiter {
    bctx *x;
    dlock_client *client;
    long index; /* global waiter number */
    bool writer;
    dlock_lock **handles; /* K of them in cached mode */
    uint64_t rng;
} waiter;

static void waiter_fail(waiter *w, const char *what, int rc, const char *msg)
{
    bwaiter *bw = &w->x->sh->w[w->index];
    if (atomic_exchange(&bw->failed, 1) == 0)
        snprintf(bw->err, sizeof bw->err, "waiter %ld: %s: %s", w->index, what,
                 msg && *msg ? msg : dlock_strerror(rc));
}

static int make_handle(waiter *w, uint32_t i, dlock_lock **out)
{
    const bcfg *c = &w->x->c;
    char name[64];
    lock_name(name, sizeof name, w->x->harness, i);
    dlock_lock_opts o;
    dlock_lock_opts_init(&o);
    if (c->permits > 0) {
        o.kind = DLOCK_SEMAPHORE;
        o.permits = (unsigned)c->permits;
    } else if (c->shared && !w->writer) {
        o.kind = DLOCK_SHARED;
    } else {
        o.kind = DLOCK_EXCLUSIVE;
    }
    o.fair = c->fair;
    o.ttl_ms = c->ttl_ms;
    int rc = dlock_lock_new(out, w->client, name, &o);
    if (rc)
        waiter_fail(w, "cannot make a lock handle", rc, dlock_client_errmsg(w->client));
    return rc;
}

static void *waiter_main(void *arg)
{
    waiter *w = arg;
    bctx *x = w->x;
    bshm *sh = x->sh;
    bwaiter *bw = &sh->w[w->index];
    brec *out = x->recs + (size_t)w->index * x->cap;
    uint64_t n = 0;
    uint32_t K = (uint32_t)x->c.K;
    uint32_t rr = (uint32_t)((uint64_t)w->index * K / (uint64_t)x->c.P);
    int64_t hold = x->c.H * 1000;

    /* Asleep until the harness says go: up to 512 waiters polling a flag
     * would starve the worker processes still connecting. */
    while (atomic_load(&sh->go) == 0)
        (void)syscall(SYS_futex, (uint32_t *)&sh->go, FUTEX_WAIT, 0, NULL, NULL, 0);
    int64_t start = atomic_load(&sh->start_ns);
    int64_t end = atomic_load(&sh->end_ns);
    ms_sleep_ns(start - ms_now_ns() - 200000);
    ms_spin_until(start);

    for (;;) {
        uint32_t name;
        if (K == 1)
            name = 0;
        else if (x->c.pick_rr)
            name = rr++ % K;
        else
            name = (uint32_t)(ms_rand(&w->rng) % K);

        int64_t a = ms_now_ns();
        if (a >= end)
            break;
        dlock_lock *l = NULL;
        if (x->per_op) {
            if (make_handle(w, name, &l) != 0)
                break;
        } else {
            l = w->handles[name];
        }
        int rc = dlock_acquire(l, -1);
        int64_t b = ms_now_ns();
        if (rc) {
            waiter_fail(w, "acquire", rc, dlock_lock_errmsg(l));
            if (x->per_op)
                dlock_lock_free(l);
            break;
        }
        if (hold > 0)
            ms_spin_until(b + hold);
        int64_t c = ms_now_ns();
        rc = dlock_release(l);
        if (rc)
            waiter_fail(w, "release", rc, dlock_lock_errmsg(l));
        if (x->per_op)
            dlock_lock_free(l);
        int64_t d = ms_now_ns();
        if (rc)
            break;
        if (n < x->cap) {
            out[n] = (brec){.acq_start = a, .acquired = b, .rel_start = c, .rel_end = d,
                            .name = name, .flags = w->writer ? BREC_WRITER : 0};
            n++;
            atomic_store_explicit(&bw->n, n, memory_order_release);
        } else {
            atomic_fetch_add_explicit(&bw->dropped, 1, memory_order_relaxed);
        }
    }
    return NULL;
}

/* -L: the locks a worker process holds through the run. */
typedef struct held_locks {
    dlock_lock **ls;
    long n;
    int64_t since;
} held_locks;

static void held_name(char *buf, size_t len, const bctx *x, long i)
{
    snprintf(buf, len, "held-%ld-%ld-%ld", (long)x->harness, x->proc_index, i);
}

/* Take the L locks of this process (before the run: untimed). Process 0
 * measures its resident set around them. 0, or -1 with sh->held_err. */
static int hold_locks(bctx *x, dlock_client *client, held_locks *hl)
{
    bshm *sh = x->sh;
    hl->ls = calloc((size_t)x->c.L, sizeof *hl->ls);
    if (!hl->ls) {
        snprintf(sh->held_err, sizeof sh->held_err, "out of memory for %ld handles", x->c.L);
        return -1;
    }
    memset(hl->ls, 0, (size_t)x->c.L * sizeof *hl->ls); /* touched before measuring */
    dlock_lock_opts o;
    dlock_lock_opts_init(&o);
    o.ttl_ms = x->c.ttl_ms;
    int64_t rss0 = x->proc_index == 0 ? statm_rss_bytes() : -1;
    for (; hl->n < x->c.L; hl->n++) {
        char name[96];
        held_name(name, sizeof name, x, hl->n);
        dlock_lock *l;
        int rc = dlock_lock_new(&l, client, name, &o);
        if (rc == 0 && (rc = dlock_acquire(l, 2000)) != 0) {
            snprintf(sh->held_err, sizeof sh->held_err, "holding lock %ld of %ld: %s", hl->n + 1,
                     x->c.L, dlock_lock_errmsg(l));
            dlock_lock_free(l);
            return -1;
        }
        if (rc) {
            snprintf(sh->held_err, sizeof sh->held_err, "lock %ld of %ld: %s", hl->n + 1, x->c.L,
                     dlock_client_errmsg(client));
            return -1;
        }
        hl->ls[hl->n] = l;
    }
    if (x->proc_index == 0) {
        sh->held_rss_before = rss0;
        sh->held_rss_after = statm_rss_bytes();
        sh->held_rss_n = hl->n;
    }
    hl->since = ms_now_ns();
    return 0;
}

/* After the run: how many are still held, what renewing them took; then
 * give them back. */
static void held_report(bctx *x, dlock_client *client, held_locks *hl)
{
    bshm *sh = x->sh;
    long held = 0, lost = 0;
    for (long i = 0; i < hl->n; i++) {
        if (dlock_state(hl->ls[i]) == DLOCK_STATE_HELD)
            held++;
        else
            lost++;
    }
    dh_renewals rs;
    dh_renewal_stats(client, &rs);
    if (hl->n == x->c.L) {
        atomic_fetch_add(&sh->held_end, held);
        atomic_fetch_add(&sh->lost_end, lost);
        atomic_fetch_add(&sh->renewed, rs.renewed);
        atomic_fetch_add(&sh->renew_calls, rs.calls);
        atomic_fetch_add(&sh->renew_cpu_ns, rs.cpu_ns);
        atomic_fetch_add(&sh->held_span_ns, ms_now_ns() - hl->since);
        atomic_fetch_add(&sh->held_procs, 1);
    }
    for (long i = 0; i < hl->n; i++) {
        char name[96];
        held_name(name, sizeof name, x, i);
        dlock_lock_free(hl->ls[i]);
        if (x->tools && x->tools->forget)
            (void)dh_forget(client, name);
    }
    free(hl->ls);
    hl->ls = NULL;
}

/* A worker process: its waiters as threads sharing one client. */
static int worker_main(void *arg)
{
    bctx *x = arg;
    long p = x->proc_index;
    /* Waiters p, p+procs, p+2*procs, ...: threads spread evenly. */
    long nw = 0;
    for (long i = p; i < x->c.P; i += x->procs)
        nw++;
    (void)ms_raise_nofile();
    dlock_client *client = NULL;
    waiter *ws = calloc((size_t)nw, sizeof *ws);
    pthread_t *th = calloc((size_t)nw, sizeof *th);
    int rc = ws && th ? dlock_client_open(&client, x->c.url, NULL) : DLOCK_ENOMEM;
    if (rc) {
        bwaiter *bw = &x->sh->w[p];
        atomic_store(&bw->failed, 1);
        snprintf(bw->err, sizeof bw->err, "worker %ld: cannot open backend: %s", p,
                 rc == DLOCK_ENOMEM ? "out of memory" : dlock_client_errmsg(NULL));
        free(ws);
        free(th);
        return 1;
    }
    int status = 0;
    long started = 0;
    held_locks hl = {0};
    if (x->c.L > 0 && hold_locks(x, client, &hl) != 0) {
        bwaiter *bw = &x->sh->w[p];
        atomic_store(&bw->failed, 1);
        snprintf(bw->err, sizeof bw->err, "worker %ld: -L: %.200s", p, x->sh->held_err);
        status = 1;
    }
    for (long t = 0; t < nw && status == 0; t++) {
        waiter *w = &ws[t];
        w->x = x;
        w->client = client;
        w->index = p + t * x->procs;
        /* --shared: the first `writers` waiters write */
        w->writer = x->c.shared && w->index < x->c.writers;
        w->rng = 0x9E3779B97F4A7C15ULL ^ ((uint64_t)getpid() << 20) ^ (uint64_t)w->index ^
                 (uint64_t)ms_now_ns();
        if (!x->per_op) {
            w->handles = calloc((size_t)x->c.K, sizeof *w->handles);
            if (!w->handles) {
                waiter_fail(w, "setup", DLOCK_ENOMEM, "out of memory");
                status = 1;
                break;
            }
            for (uint32_t i = 0; i < (uint32_t)x->c.K; i++)
                if (make_handle(w, i, &w->handles[i]) != 0) {
                    status = 1;
                    break;
                }
            if (status)
                break;
        }
    }
    if (status == 0) {
        for (; started < nw; started++) {
            int e = pthread_create(&th[started], NULL, waiter_main, &ws[started]);
            if (e) {
                waiter_fail(&ws[started], "cannot start a thread", DLOCK_EIO, strerror(e));
                status = 1;
                break;
            }
        }
    }
    /* Counted ready even on failure, so the harness does not wait for us:
     * it checks the failure flags before starting the run. */
    atomic_fetch_add(&x->sh->ready, (int)nw);
    for (long t = 0; t < started; t++)
        pthread_join(th[t], NULL);
    if (hl.ls)
        held_report(x, client, &hl); /* (after a failed hold: only gives back) */
    for (long t = 0; t < nw; t++) {
        if (ws[t].handles) {
            for (long i = 0; i < x->c.K; i++)
                dlock_lock_free(ws[t].handles[i]);
            free(ws[t].handles);
        }
        if (atomic_load(&x->sh->w[ws[t].index].failed))
            status = 1;
    }
    free(ws);
    free(th);
    dlock_client_close(client);
    return status;
}

/* The memory probe: hold as many of the K locks at once as the descriptor
 * limit allows, and see what the client's resident set grew by. */
static int rss_main(void *arg)
{
    bctx *x = arg;
    bshm *sh = x->sh;
    (void)ms_raise_nofile();
    dlock_client *client = NULL;
    dlock_lock **ls = calloc((size_t)x->c.K, sizeof *ls);
    if (!ls || dlock_client_open(&client, x->c.url, NULL) != 0) {
        snprintf(sh->rss_err, sizeof sh->rss_err, "cannot open backend: %s",
                 ls ? dlock_client_errmsg(NULL) : "out of memory");
        free(ls);
        return 1;
    }
    memset(ls, 0, (size_t)x->c.K * sizeof *ls); /* touch it before measuring */
    dlock_lock_opts o;
    dlock_lock_opts_init(&o);
    o.ttl_ms = x->c.ttl_ms;
    sh->fds_before = count_fds();
    sh->rss_before = statm_rss_bytes();
    long held = 0;
    for (long i = 0; i < x->c.K; i++) {
        char name[64];
        lock_name(name, sizeof name, x->harness, (uint32_t)i);
        if (dlock_lock_new(&ls[i], client, name, &o) != 0)
            break; /* out of descriptors, typically: as many as possible */
        if (dlock_acquire(ls[i], 0) != 0) {
            dlock_lock_free(ls[i]);
            ls[i] = NULL;
            break;
        }
        held++;
    }
    sh->rss_after = statm_rss_bytes();
    sh->fds_after = count_fds();
    sh->rss_held = held;
    atomic_store(&sh->rss_done, 1);
    for (long i = 0; i < held; i++)
        dlock_lock_free(ls[i]);
    free(ls);
    dlock_client_close(client);
    return 0;
}

/* ---- statistics --------------------------------------------------------- */

typedef struct bstats {
    size_t total;  /* sections recorded, warm-up included */
    size_t n;      /* counted (started in the measured window) */
    uint64_t dropped;
    double measured_s;
    int64_t cycle50, cycle99, wait50, wait99, ho50, ho99;
    size_t handovers;
    size_t handovers_all; /* over the whole run, warm-up included */
    size_t overtaken; /* sections that got the lock after a later arrival */
    uint64_t violations;
    uint64_t fmin, fmax;
} bstats;

typedef struct heap_ent {
    int64_t end;
    bool writer;
} heap_ent;

static void heap_push(heap_ent *h, size_t *n, heap_ent e)
{
    size_t i = (*n)++;
    while (i > 0) {
        size_t p = (i - 1) / 2;
        if (h[p].end <= e.end)
            break;
        h[i] = h[p];
        i = p;
    }
    h[i] = e;
}

static heap_ent heap_pop(heap_ent *h, size_t *n)
{
    heap_ent top = h[0], last = h[--*n];
    size_t i = 0;
    for (;;) {
        size_t c = 2 * i + 1;
        if (c >= *n)
            break;
        if (c + 1 < *n && h[c + 1].end < h[c].end)
            c++;
        if (last.end <= h[c].end)
            break;
        h[i] = h[c];
        i = c;
    }
    if (*n)
        h[i] = last;
    return top;
}

/* qsort has no context argument: the records being sorted */
static const brec *sort_recs;
static size_t sort_cap;

static const brec *ref_rec(uint64_t r)
{
    return &sort_recs[(size_t)(r >> 32) * sort_cap + (uint32_t)r];
}

static int cmp_ref(const void *a, const void *b)
{
    const brec *x = ref_rec(*(const uint64_t *)a), *y = ref_rec(*(const uint64_t *)b);
    if (x->name != y->name)
        return x->name < y->name ? -1 : 1;
    return (x->acquired > y->acquired) - (x->acquired < y->acquired);
}

static int compute(const bctx *x, int64_t win_start, int64_t win_end, bstats *s)
{
    memset(s, 0, sizeof *s);
    size_t total = 0;
    uint64_t *per = calloc((size_t)x->c.P, sizeof *per);
    if (!per)
        return -1;
    for (long w = 0; w < x->c.P; w++) {
        total += (size_t)atomic_load(&x->sh->w[w].n);
        s->dropped += atomic_load(&x->sh->w[w].dropped);
    }
    s->total = total;
    uint64_t *refs = malloc((total ? total : 1) * sizeof *refs);
    int64_t *cyc = malloc((total ? total : 1) * sizeof *cyc);
    int64_t *wai = malloc((total ? total : 1) * sizeof *wai);
    int64_t *ho = malloc((total ? total : 1) * sizeof *ho);
    int64_t *rel = malloc((total ? total : 1) * sizeof *rel);
    heap_ent *heap = malloc((total ? total : 1) * sizeof *heap);
    if (!refs || !cyc || !wai || !ho || !rel || !heap) {
        free(per), free(refs), free(cyc), free(wai), free(ho), free(rel), free(heap);
        return -1;
    }
    size_t k = 0, n = 0;
    for (long w = 0; w < x->c.P; w++) {
        size_t cnt = (size_t)atomic_load(&x->sh->w[w].n);
        const brec *r = x->recs + (size_t)w * x->cap;
        for (size_t i = 0; i < cnt; i++) {
            refs[k++] = ((uint64_t)w << 32) | i;
            if (r[i].acq_start >= win_start && r[i].acq_start < win_end) {
                cyc[n] = r[i].rel_end - r[i].acq_start;
                wai[n] = r[i].acquired - r[i].acq_start;
                n++;
                per[w]++;
            }
        }
    }
    s->n = n;
    sort_recs = x->recs;
    sort_cap = x->cap;
    if (total > 1)
        qsort(refs, total, sizeof *refs, cmp_ref);

    /* One name at a time, in order of acquisition. */
    size_t nho = 0;
    for (size_t g = 0; g < total;) {
        uint32_t name = ref_rec(refs[g])->name;
        size_t e = g;
        while (e < total && ref_rec(refs[e])->name == name)
            e++;
        size_t m = e - g;
        for (size_t i = 0; i < m; i++)
            rel[i] = ref_rec(refs[g + i])->rel_start;
        ms_sort_i64(rel, m);
        size_t hn = 0, active_w = 0, j = 0;
        int64_t latest_arrival = INT64_MIN; /* among sections acquired so far */
        for (size_t i = g; i < e; i++) {
            const brec *r = ref_rec(refs[i]);
            bool wr = (r->flags & BREC_WRITER) != 0;
            /* sections that ended before this one began */
            while (hn > 0 && heap[0].end <= r->acquired) {
                heap_ent done = heap_pop(heap, &hn);
                active_w -= done.writer;
            }
            if (x->c.permits > 0) {
                if (hn >= (size_t)x->c.permits)
                    s->violations += hn - (size_t)x->c.permits + 1;
            } else if (x->c.shared) {
                s->violations += wr ? hn : active_w;
            } else {
                s->violations += hn;
            }
            heap_push(heap, &hn, (heap_ent){.end = r->rel_start, .writer = wr});
            active_w += wr;
            /* handover: from the latest release start before we got it,
             * if we were already waiting then */
            while (j < m && rel[j] < r->acquired)
                j++;
            bool counted = r->acq_start >= win_start && r->acq_start < win_end;
            if (j > 0 && r->acq_start < rel[j - 1]) {
                s->handovers_all++;
                if (counted)
                    ho[nho++] = r->acquired - rel[j - 1];
            }
            /* FIFO check: someone who started asking later got it first */
            if (latest_arrival > r->acq_start && counted)
                s->overtaken++;
            if (r->acq_start > latest_arrival)
                latest_arrival = r->acq_start;
        }
        g = e;
    }
    s->handovers = nho;
    ms_sort_i64(cyc, n);
    ms_sort_i64(wai, n);
    ms_sort_i64(ho, nho);
    s->cycle50 = ms_pct(cyc, n, 500);
    s->cycle99 = ms_pct(cyc, n, 990);
    s->wait50 = ms_pct(wai, n, 500);
    s->wait99 = ms_pct(wai, n, 990);
    s->ho50 = ms_pct(ho, nho, 500);
    s->ho99 = ms_pct(ho, nho, 990);
    s->fmin = UINT64_MAX;
    for (long w = 0; w < x->c.P; w++) {
        if (per[w] < s->fmin)
            s->fmin = per[w];
        if (per[w] > s->fmax)
            s->fmax = per[w];
    }
    s->measured_s = (double)(win_end - win_start) / 1e9;
    free(per), free(refs), free(cyc), free(wai), free(ho), free(rel), free(heap);
    return 0;
}

/* ---- output ------------------------------------------------------------- */

typedef struct extras {
    bool have_rtt;
    int64_t rtt50, rtt99;
    size_t rtt_iters;
    bool have_rtt_single; /* redlock: one master alone */
    int64_t rtt1_50, rtt1_99;
    bool have_relay; /* the server's bare hand-over (Redis: RPUSH waking a BLPOP) */
    int64_t relay50, relay99;
    char rtt_what[300], relay_what[300];
    bool have_cmds;
    dh_counters cmds; /* after minus before */
    bool have_rss;
    double rss_per_lock;
    long rss_held;
    double fds_per_lock; /* < 0: not measured (-L) */
    bool have_held; /* -L */
    long held, lost;
    double renewals_per_s, renew_calls_per_s, renew_cpu_pct;
    int64_t prep_ns; /* -1: not prepared */
    int interrupted;
} extras;

static void json_us(FILE *f, const char *key, int64_t ns, bool present)
{
    fprintf(f, ",");
    cli_json_str(f, key);
    if (present)
        fprintf(f, ":%.2f", (double)ns / 1000.0);
    else
        fprintf(f, ":null");
}

static const char *kind_name(const bcfg *c)
{
    return c->permits > 0 ? "semaphore" : c->shared ? "shared" : "exclusive";
}

static void print_json(const bctx *x, const bstats *s, const extras *e)
{
    const bcfg *c = &x->c;
    FILE *f = stdout;
    fprintf(f, "{\"backend\":");
    cli_json_str(f, x->backend);
    fprintf(f, ",\"url\":");
    cli_json_str(f, x->url);
    fprintf(f, ",\"P\":%ld,\"K\":%ld,\"H\":%ld,\"D\":%.3f,\"warmup\":%.3f", c->P, c->K, c->H,
            c->duration_ms / 1000.0, c->warmup_ms / 1000.0);
    fprintf(f, ",\"n\":%zu,\"ops_per_s\":%.1f,\"measured_s\":%.3f", s->n,
            s->measured_s > 0 ? (double)s->n / s->measured_s : 0.0, s->measured_s);
    json_us(f, "cycle_p50_us", s->cycle50, s->n > 0);
    json_us(f, "cycle_p99_us", s->cycle99, s->n > 0);
    json_us(f, "wait_p50_us", s->wait50, s->n > 0);
    json_us(f, "wait_p99_us", s->wait99, s->n > 0);
    json_us(f, "handover_p50_us", s->ho50, s->handovers > 0);
    json_us(f, "handover_p99_us", s->ho99, s->handovers > 0);
    fprintf(f, ",\"handovers\":%zu,\"violations\":%" PRIu64 ",\"fairness_min_max\":[%" PRIu64
               ",%" PRIu64 "]",
            s->handovers, s->violations, s->fmin, s->fmax);
    fprintf(f, ",\"overtaken\":%zu,\"kind\":\"%s\"", s->overtaken, kind_name(c));
    if (c->permits > 0)
        fprintf(f, ",\"permits\":%ld", c->permits);
    if (c->shared)
        fprintf(f, ",\"writers\":%ld", c->writers);
    fprintf(f, ",\"fair\":%s,\"pick\":\"%s\"", c->fair < 0 ? "null" : c->fair ? "true" : "false",
            c->pick_rr ? "rr" : "random");
    if (c->ttl_ms > 0)
        fprintf(f, ",\"ttl_ms\":%d", c->ttl_ms);
    else
        fprintf(f, ",\"ttl_ms\":null");
    fprintf(f, ",\"procs\":%ld,\"threads_per_proc\":%ld,\"handles\":\"%s\"", x->procs,
            x->threads_max, x->per_op ? "per_op" : "cached");
    fprintf(f, ",\"sections_checked\":%zu,\"dropped\":%" PRIu64, s->total, s->dropped);
    json_us(f, "prepare_per_name_us", c->K > 0 ? e->prep_ns / c->K : 0, e->prep_ns >= 0);
    json_us(f, "rtt_p50_us", e->rtt50, e->have_rtt);
    json_us(f, "rtt_p99_us", e->rtt99, e->have_rtt);
    if (e->have_rtt && e->rtt50 > 0 && s->n > 0)
        fprintf(f, ",\"cycle_rtt_ratio\":%.2f", (double)s->cycle50 / (double)e->rtt50);
    else
        fprintf(f, ",\"cycle_rtt_ratio\":null");
    if (e->have_rtt && e->rtt50 > 0 && s->handovers > 0)
        fprintf(f, ",\"handover_rtt_ratio\":%.2f", (double)s->ho50 / (double)e->rtt50);
    else
        fprintf(f, ",\"handover_rtt_ratio\":null");
    if (c->baseline) {
        fprintf(f, ",\"baseline\":");
        cli_json_str(f, e->have_rtt ? e->rtt_what : "no baseline for this backend yet");
    }
    if (e->have_rtt_single) {
        json_us(f, "rtt_single_p50_us", e->rtt1_50, true);
        json_us(f, "rtt_single_p99_us", e->rtt1_99, true);
    }
    if (e->have_relay) {
        json_us(f, "relay_p50_us", e->relay50, true);
        json_us(f, "relay_p99_us", e->relay99, true);
        if (e->relay50 > 0 && s->handovers > 0)
            fprintf(f, ",\"handover_relay_ratio\":%.2f", (double)s->ho50 / (double)e->relay50);
        else
            fprintf(f, ",\"handover_relay_ratio\":null");
    }
    fprintf(f, ",\"handovers_all\":%zu", s->handovers_all);
    if (c->cmdstats) {
        fprintf(f, ",\"server_commands\":");
        if (e->have_cmds) {
            size_t all = s->total + (size_t)s->dropped;
            fprintf(f, "{");
            for (int i = 0; i < e->cmds.n; i++) {
                if (i)
                    fputc(',', f);
                cli_json_str(f, e->cmds.name[i]);
                fprintf(f, ":%" PRIu64, e->cmds.calls[i]);
            }
            fprintf(f, "},\"server_commands_total\":%" PRIu64
                       ",\"server_commands_internal\":%" PRIu64
                       ",\"server_commands_servers\":%d,\"sections_all\":%zu",
                    e->cmds.client, e->cmds.internal, e->cmds.servers, all);
            if (all > 0)
                fprintf(f, ",\"server_commands_per_section\":%.3f",
                        (double)e->cmds.client / (double)all);
            else
                fprintf(f, ",\"server_commands_per_section\":null");
            if (s->handovers_all > 0)
                fprintf(f, ",\"server_commands_per_handover\":%.3f",
                        (double)e->cmds.client / (double)s->handovers_all);
            else
                fprintf(f, ",\"server_commands_per_handover\":null");
        } else {
            fprintf(f, "null,\"server_commands_per_section\":null,"
                       "\"server_commands_per_handover\":null");
        }
    }
    if (e->have_rss && e->fds_per_lock >= 0)
        fprintf(f, ",\"rss_per_lock_bytes\":%.0f,\"rss_locks_held\":%ld,\"fds_per_lock\":%.2f",
                e->rss_per_lock, e->rss_held, e->fds_per_lock);
    else if (e->have_rss)
        fprintf(f, ",\"rss_per_lock_bytes\":%.0f,\"rss_locks_held\":%ld,\"fds_per_lock\":null",
                e->rss_per_lock, e->rss_held);
    else
        fprintf(f, ",\"rss_per_lock_bytes\":null,\"rss_locks_held\":null,\"fds_per_lock\":null");
    if (c->L > 0)
        fprintf(f, ",\"held_per_worker\":%ld", c->L);
    else
        fprintf(f, ",\"held_per_worker\":null");
    if (e->have_held)
        fprintf(f,
                ",\"held\":%ld,\"lost\":%ld,\"renewals_per_s\":%.1f,\"renewal_calls_per_s\":%.1f,"
                "\"renewal_cpu_pct\":%.2f",
                e->held, e->lost, e->renewals_per_s, e->renew_calls_per_s, e->renew_cpu_pct);
    else
        fprintf(f, ",\"held\":null,\"lost\":null,\"renewals_per_s\":null,"
                   "\"renewal_calls_per_s\":null,\"renewal_cpu_pct\":null");
    fprintf(f, ",\"version\":");
    cli_json_str(f, dlock_version());
    if (e->interrupted)
        fprintf(f, ",\"interrupted\":true");
    fprintf(f, "}\n");
}

static void human_us(const char *what, int64_t p50, int64_t p99, bool present)
{
    if (present)
        printf("  %-9s p50 %10.2f us   p99 %10.2f us\n", what, (double)p50 / 1000.0,
               (double)p99 / 1000.0);
    else
        printf("  %-9s (none)\n", what);
}

static void print_human(const bctx *x, const bstats *s, const extras *e)
{
    const bcfg *c = &x->c;
    printf("dlock bench: %s backend (%s), %s lock", x->backend, x->url, kind_name(c));
    if (c->permits > 0)
        printf(" of %ld permits", c->permits);
    if (c->shared)
        printf(" (%ld writers)", c->writers);
    printf("\n  %ld waiter%s (%ld process%s x %ld thread%s), %ld name%s (%s handles), hold %ld us, "
           "%.1f s + %.1f s warm-up%s\n",
           c->P, c->P == 1 ? "" : "s", x->procs, x->procs == 1 ? "" : "es", x->threads_max,
           x->threads_max == 1 ? "" : "s", c->K, c->K == 1 ? "" : "s",
           x->per_op ? "per-op" : "cached", c->H, c->duration_ms / 1000.0,
           c->warmup_ms / 1000.0, e->interrupted ? " (interrupted)" : "");
    printf("  %zu sections, %.1f ops/s, violations %" PRIu64 " (of %zu sections checked)\n",
           s->n, s->measured_s > 0 ? (double)s->n / s->measured_s : 0.0, s->violations,
           s->total);
    human_us("cycle", s->cycle50, s->cycle99, s->n > 0);
    human_us("wait", s->wait50, s->wait99, s->n > 0);
    human_us("handover", s->ho50, s->ho99, s->handovers > 0);
    printf("  %zu handovers; acquisitions per waiter: min %" PRIu64 ", max %" PRIu64
           "; %zu sections overtaken by a later arrival\n",
           s->handovers, s->fmin, s->fmax, s->overtaken);
    if (s->dropped)
        printf("  warning: %" PRIu64 " sections not recorded (stamp buffer full)\n", s->dropped);
    if (c->baseline) {
        if (e->have_rtt) {
            printf("  baseline: %s\n            p50 %.2f us, p99 %.2f us (%zu samples)\n",
                   e->rtt_what, (double)e->rtt50 / 1000.0, (double)e->rtt99 / 1000.0,
                   e->rtt_iters);
            if (e->have_rtt_single)
                printf("  one master alone: p50 %.2f us, p99 %.2f us\n",
                       (double)e->rtt1_50 / 1000.0, (double)e->rtt1_99 / 1000.0);
            if (s->n > 0 && e->rtt50 > 0)
                printf("  cycle/rtt %.2f", (double)s->cycle50 / (double)e->rtt50);
            if (s->handovers > 0 && e->rtt50 > 0)
                printf(", handover/rtt %.2f", (double)s->ho50 / (double)e->rtt50);
            printf("\n");
            if (e->have_relay) {
                printf("  bare hand-over (%s): p50 %.2f us, p99 %.2f us", e->relay_what,
                       (double)e->relay50 / 1000.0, (double)e->relay99 / 1000.0);
                if (s->handovers > 0 && e->relay50 > 0)
                    printf("; handover/relay %.2f", (double)s->ho50 / (double)e->relay50);
                printf("\n");
            }
        } else {
            printf("  baseline: no baseline for this backend yet\n");
        }
    }
    if (e->prep_ns >= 0 && c->K > 1)
        printf("  first use of each name (untimed preparation): %.2f us per name\n",
               (double)e->prep_ns / 1000.0 / (double)c->K);
    if (e->have_rss && e->fds_per_lock >= 0)
        printf("  client memory: %.0f bytes per held lock (%ld locks held at once, %.2f fds "
               "each)\n",
               e->rss_per_lock, e->rss_held, e->fds_per_lock);
    else if (e->have_rss)
        printf("  client memory: %.0f bytes per held lock (%ld held by process 0)\n",
               e->rss_per_lock, e->rss_held);
    if (e->have_held)
        printf("  held through the run: %ld of %ld still held, %ld lost; %.0f renewals/s in "
               "%.1f calls/s; renewal thread CPU %.2f%%\n",
               e->held, c->L * x->procs, e->lost, e->renewals_per_s, e->renew_calls_per_s,
               e->renew_cpu_pct);
    if (c->cmdstats && e->have_cmds) {
        size_t all = s->total + (size_t)s->dropped;
        printf("  server commands sent: %" PRIu64 " (", e->cmds.client);
        for (int i = 0; i < e->cmds.n; i++)
            printf("%s%s %" PRIu64, i ? ", " : "", e->cmds.name[i], e->cmds.calls[i]);
        printf(") on %d server%s; %" PRIu64 " more run inside them by the lock's code\n",
               e->cmds.servers,
               e->cmds.servers == 1 ? "" : "s", e->cmds.internal);
        if (all > 0)
            printf("  per section: %.2f", (double)e->cmds.client / (double)all);
        if (s->handovers_all > 0)
            printf(", per hand-over: %.2f (%zu sections, %zu hand-overs in the whole run)",
                   (double)e->cmds.client / (double)s->handovers_all, all, s->handovers_all);
        printf("\n");
    }
}

/* ---- the command -------------------------------------------------------- */

enum {
    BO_P = 1, BO_K, BO_H, BO_D, BO_WARMUP, BO_FAIR, BO_SHARED, BO_WRITERS, BO_PERMITS, BO_TTL, BO_PICK,
    BO_HANDLES, BO_BASELINE, BO_RSS, BO_JSON, BO_MAXPROCS, BO_NOPREP, BO_NOFAIR, BO_CMDSTATS,
    BO_HELD, BO_HELP
};

static const cli_opt bench_opts[] = {
    {"processes", 'P', 1, BO_P},   {"names", 'K', 1, BO_K},
    {"hold", 'H', 1, BO_H},        {"duration", 'D', 1, BO_D},
    {"warmup", 0, 1, BO_WARMUP},   {"fair", 0, 0, BO_FAIR},
    {"shared", 0, 0, BO_SHARED},   {"writers", 0, 1, BO_WRITERS},
    {"permits", 0, 1, BO_PERMITS}, {"ttl", 0, 1, BO_TTL},
    {"pick", 0, 1, BO_PICK},       {"handles", 0, 1, BO_HANDLES},
    {"baseline", 0, 0, BO_BASELINE}, {"rss", 0, 0, BO_RSS},
    {"json", 0, 0, BO_JSON},       {"max-procs", 0, 1, BO_MAXPROCS},
    {"no-prepare", 0, 0, BO_NOPREP}, {"no-fair", 0, 0, BO_NOFAIR},
    {"commandstats", 0, 0, BO_CMDSTATS}, {"held", 'L', 1, BO_HELD},
    {"help", 'h', 0, BO_HELP},
    {NULL, 0, 0, 0},
};

static int parse(int argc, char **argv, bcfg *c)
{
    cli_parser p;
    cli_parser_init(&p, argc, argv, "bench");
    char shown[CLI_SHOW_MAX];
    for (;;) {
        int id = cli_next_opt(&p, bench_opts);
        long v;
        int ms;
        switch (id) {
        case CLI_OPT_END:
            return 0;
        case CLI_OPT_ERROR:
            return CLI_EXIT_USAGE;
        case CLI_OPT_POS:
            return cli_usage("bench", "unexpected argument %s", cli_show(p.val, shown, sizeof shown));
        case CLI_OPT_DASHDASH:
            return cli_usage("bench", "unexpected \"--\"");
        case BO_HELP:
            fputs(cli_bench_help, stdout);
            return -1;
        case BO_HELD:
            if (cli_parse_long(p.val, 1, MAX_HELD, &v) != 0)
                return cli_usage("bench", "%s wants an integer from 1 to %d, not %s", p.optname,
                                 MAX_HELD, cli_show(p.val, shown, sizeof shown));
            c->L = v;
            break;
        case BO_P:
        case BO_K:
        case BO_H:
        case BO_WRITERS:
        case BO_PERMITS:
        case BO_MAXPROCS: {
            long lo = id == BO_H || id == BO_WRITERS ? 0 : 1;
            long hi = id == BO_P ? MAX_WAITERS
                      : id == BO_K ? MAX_NAMES
                      : id == BO_H ? 10000000
                      : id == BO_PERMITS ? 4096
                      : id == BO_MAXPROCS ? MAX_WAITERS
                                         : MAX_WAITERS;
            if (cli_parse_long(p.val, lo, hi, &v) != 0)
                return cli_usage("bench", "%s wants an integer from %ld to %ld, not %s",
                                 p.optname, lo, hi, cli_show(p.val, shown, sizeof shown));
            if (id == BO_P)
                c->P = v;
            else if (id == BO_K)
                c->K = v;
            else if (id == BO_H)
                c->H = v;
            else if (id == BO_WRITERS)
                c->writers = v;
            else if (id == BO_PERMITS)
                c->permits = v;
            else
                c->max_procs = v;
            break;
        }
        case BO_D:
        case BO_WARMUP:
        case BO_TTL:
            if (cli_parse_secs(p.val, &ms) != 0 || ms > 3600 * 1000 ||
                (id != BO_WARMUP && ms == 0))
                return cli_usage("bench", "%s wants seconds (up to 3600%s), not %s", p.optname,
                                 id == BO_WARMUP ? "" : ", more than 0",
                                 cli_show(p.val, shown, sizeof shown));
            if (id == BO_D)
                c->duration_ms = ms;
            else if (id == BO_WARMUP)
                c->warmup_ms = ms;
            else
                c->ttl_ms = ms;
            break;
        case BO_FAIR:
        case BO_NOFAIR:
            c->fair = id == BO_FAIR;
            break;
        case BO_SHARED:
            c->shared = true;
            break;
        case BO_BASELINE:
            c->baseline = true;
            break;
        case BO_RSS:
            c->rss = true;
            break;
        case BO_CMDSTATS:
            c->cmdstats = true;
            break;
        case BO_NOPREP:
            c->no_prepare = true;
            break;
        case BO_JSON:
            c->json = true;
            break;
        case BO_PICK:
            if (strcmp(p.val, "random") == 0)
                c->pick_rr = false;
            else if (strcmp(p.val, "rr") == 0)
                c->pick_rr = true;
            else
                return cli_usage("bench", "--pick wants random or rr, not %s",
                                 cli_show(p.val, shown, sizeof shown));
            break;
        case BO_HANDLES:
            if (strcmp(p.val, "cached") == 0)
                c->handles = HANDLES_CACHED;
            else if (strcmp(p.val, "per-op") == 0)
                c->handles = HANDLES_PER_OP;
            else
                return cli_usage("bench", "--handles wants cached or per-op, not %s",
                                 cli_show(p.val, shown, sizeof shown));
            break;
        }
    }
}

/* A harness operation's answer: rc, with the reason in err (none for
 * DLOCK_ENOTSUP: the backend has no such figure, and none is reported). */
static int tool_result(const bctx *x, int rc, char *err, size_t errlen)
{
    if (!x->client)
        return DLOCK_ENOTSUP;
    if (rc && rc != DLOCK_ENOTSUP)
        snprintf(err, errlen, "%s", dlock_client_errmsg(x->client));
    return rc;
}

/* Remove the state the run's names left behind, where the backend's
 * harness operations know what it is (the file backend's lock files). */
static void forget_names(bctx *x)
{
    dlock_client *c = NULL;
    if (!x->tools || !x->tools->forget || dlock_client_open(&c, x->url_arg, NULL) != 0)
        return;
    for (long i = 0; i < x->c.K; i++) {
        char name[64];
        lock_name(name, sizeof name, x->harness, (uint32_t)i);
        (void)dh_forget(c, name);
    }
    dlock_client_close(c);
}

/* Wait for `cond` over the shared memory, servicing signals and dead
 * children. Returns 0, the signal number, or -1 when a child failed. */
typedef bool (*wait_cond)(const bctx *x);

static bool all_ready(const bctx *x)
{
    return atomic_load(&x->sh->ready) >= x->c.P;
}

static int sleep_until(const bctx *x, ms_group *g, int64_t until, wait_cond cond, size_t *exited)
{
    for (;;) {
        int sig = ms_signal_pending();
        if (sig)
            return sig;
        int st;
        pid_t pid;
        while ((pid = ms_reap_one(g, &st)) > 0) {
            (*exited)++;
            if (!WIFEXITED(st) || WEXITSTATUS(st) != 0)
                return -1;
        }
        if (cond && cond(x))
            return 0;
        if (!cond && ms_alive(g) == 0)
            return 0;
        int64_t now = ms_now_ns();
        if (now >= until)
            return cond ? -2 : 0;
        int64_t step = until - now;
        ms_sleep_ns(step < 5000000 ? step : 5000000);
    }
}

static void report_failures(const bctx *x)
{
    int shown = 0;
    for (long w = 0; w < x->c.P && shown < 5; w++)
        if (atomic_load(&x->sh->w[w].failed) && x->sh->w[w].err[0]) {
            cli_err("bench: %s", x->sh->w[w].err);
            shown++;
        }
    if (!shown)
        cli_err("bench: a worker process failed");
}

int cli_bench(int argc, char **argv, const char *url)
{
    bctx x;
    memset(&x, 0, sizeof x);
    bcfg *c = &x.c;
    *c = (bcfg){.url = url, .P = 1, .K = 1, .H = 0, .max_procs = DEFAULT_MAX_PROCS,
                .writers = -1, .duration_ms = 5000, .warmup_ms = 1000, .fair = -1};
    int rc = parse(argc, argv, c);
    if (rc)
        return rc < 0 ? 0 : rc;
    if (c->shared && c->permits > 0)
        return cli_usage("bench", "--shared and --permits exclude each other");
    if (c->writers >= 0 && !c->shared)
        return cli_usage("bench", "--writers goes with --shared");
    if (c->shared && c->writers < 0)
        c->writers = c->P / 4;
    if (c->writers > c->P)
        return cli_usage("bench", "--writers %ld is more than the %ld waiters", c->writers, c->P);
    x.harness = getpid();

    /* Validate the URL and learn the backend before forking anything. */
    dlock_client *probe = NULL;
    rc = cli_open("bench", url, &probe);
    if (rc)
        return rc;
    snprintf(x.backend, sizeof x.backend, "%s", dlock_client_backend(probe));
    snprintf(x.url, sizeof x.url, "%s", dlock_client_url(probe));
    x.url_arg = url;
    x.tools = dh_tools_for(x.backend);
    /* Unsupported lock kinds fail here, once, rather than in every worker. */
    dlock_lock_opts lo;
    dlock_lock_opts_init(&lo);
    lo.kind = c->permits > 0 ? DLOCK_SEMAPHORE : c->shared ? DLOCK_SHARED : DLOCK_EXCLUSIVE;
    lo.permits = c->permits > 0 ? (unsigned)c->permits : 1;
    lo.fair = c->fair;
    lo.ttl_ms = c->ttl_ms;
    {
        dlock_lock *l = NULL;
        char name[64];
        lock_name(name, sizeof name, x.harness, 0);
        rc = dlock_lock_new(&l, probe, name, &lo);
        if (rc) {
            cli_err("bench: %s", dlock_client_errmsg(probe));
            dlock_client_close(probe);
            return cli_exit_for(rc);
        }
        dlock_lock_free(l);
    }
    if (ms_signals_install() != 0) {
        cli_err("bench: cannot install signal handlers: %s", strerror(errno));
        dlock_client_close(probe);
        return CLI_EXIT_SOFTWARE;
    }
    /* Use every name once, untimed: first uses (the file backend creates a
     * lock file, hundreds of microseconds on a journaling file system) would
     * otherwise be mixed into the figures by chance, depending on which names
     * the warm-up happened to pick. */
    int64_t prep_ns = -1;
    if (!c->no_prepare) {
        int64_t p0 = ms_now_ns();
        for (long i = 0; i < c->K && rc == 0; i++) {
            char name[64];
            lock_name(name, sizeof name, x.harness, (uint32_t)i);
            dlock_lock *l = NULL;
            rc = dlock_lock_new(&l, probe, name, &lo);
            if (rc == 0) {
                rc = dlock_acquire(l, 10000);
                if (rc == 0)
                    rc = dlock_release(l);
                if (rc)
                    cli_err("bench: preparing lock \"%s\": %s", name, dlock_lock_errmsg(l));
                dlock_lock_free(l);
            } else {
                cli_err("bench: preparing lock \"%s\": %s", name, dlock_client_errmsg(probe));
            }
            if (rc == 0 && ms_signal_pending())
                rc = DLOCK_ECANCELED;
        }
        prep_ns = ms_now_ns() - p0;
    }
    dlock_client_close(probe);
    if (rc) {
        int sig = ms_signal_pending();
        forget_names(&x);
        ms_signals_restore();
        return sig ? 128 + sig : cli_exit_for(rc);
    }

    x.procs = c->P < c->max_procs ? c->P : c->max_procs;
    x.threads_max = (c->P + x.procs - 1) / x.procs;
    /* Cached handles cost descriptors (each handle keeps two eventfds, and a
     * held file lock one more); fall back to a handle per section when they
     * would not fit under the limit. */
    long nofile = ms_raise_nofile();
    long need = x.threads_max * (c->K * 2 + 1) + 64;
    x.per_op = c->handles == HANDLES_PER_OP || (c->handles == HANDLES_AUTO && need > nofile);
    if (c->handles == HANDLES_CACHED && need > nofile) {
        cli_err("bench: --handles cached needs about %ld descriptors per process, the limit is "
                "%ld",
                need, nofile);
        forget_names(&x);
        ms_signals_restore();
        return CLI_EXIT_USAGE;
    }

    int exit_code = 0;
    extras e;
    memset(&e, 0, sizeof e);
    e.prep_ns = prep_ns;
    /* The backend's own figures beside the lock: its cheapest round trip,
     * its bare hand-over, its servers' command counters (its harness
     * operations), through a client that takes no lock. */
    char name0[64];
    lock_name(name0, sizeof name0, x.harness, 0);
    if ((c->baseline || c->cmdstats) && dlock_client_open(&x.client, url, NULL) != 0) {
        cli_err("bench: %s: %s", c->baseline ? "baseline" : "commandstats",
                dlock_client_errmsg(NULL));
        x.client = NULL;
    }
    if (c->baseline) {
        char err[BENCH_ERR];
        dh_timing t;
        memset(&t, 0, sizeof t);
        int r = tool_result(&x, dh_baseline(x.client, name0, BASELINE_ITERS, BASELINE_MAX_NS,
                                            &t), err, sizeof err);
        if (r == 0) {
            e.have_rtt = true;
            e.rtt50 = t.all.p50;
            e.rtt99 = t.all.p99;
            e.rtt_iters = t.all.samples;
            snprintf(e.rtt_what, sizeof e.rtt_what, "%s", t.what);
            if (t.servers > 1) {
                e.have_rtt_single = true;
                e.rtt1_50 = t.one.p50;
                e.rtt1_99 = t.one.p99;
            }
        } else if (r != DLOCK_ENOTSUP) {
            cli_err("bench: baseline: %s", err);
        }
        /* a hand-over needs someone waiting */
        memset(&t, 0, sizeof t);
        r = c->P > 1 ? tool_result(&x, dh_relay(x.client, name0, RELAY_ITERS, &t), err,
                                   sizeof err)
                     : DLOCK_ENOTSUP;
        if (r == 0) {
            e.have_relay = true;
            e.relay50 = t.all.p50;
            e.relay99 = t.all.p99;
            snprintf(e.relay_what, sizeof e.relay_what, "%s", t.what);
        } else if (r != DLOCK_ENOTSUP) {
            cli_err("bench: relay baseline: %s", err);
        }
    }
    dh_counters cmds_before;
    bool have_before = false;
    if (c->cmdstats) {
        char err[BENCH_ERR];
        int r = tool_result(&x, dh_read_counters(x.client, name0, &cmds_before), err,
                            sizeof err);
        if (r == 0)
            have_before = true;
        else if (r != DLOCK_ENOTSUP)
            cli_err("bench: commandstats: %s", err);
    }

    /* Workers are forked without exec: no client (and none of its
     * threads) may live in this process then (measure.h). */
    dlock_client_close(x.client);
    x.client = NULL;

    x.cap = RECORD_BUDGET / (size_t)c->P;
    size_t rec_bytes = x.cap * (size_t)c->P * sizeof(brec);
    x.sh = mmap(NULL, sizeof(bshm), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    x.recs = mmap(NULL, rec_bytes, PROT_READ | PROT_WRITE,
                  MAP_SHARED | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (x.sh == MAP_FAILED || x.recs == MAP_FAILED) {
        cli_err("bench: cannot map shared memory: %s", strerror(errno));
        if (x.sh != MAP_FAILED)
            munmap(x.sh, sizeof(bshm));
        if (x.recs != MAP_FAILED)
            munmap(x.recs, rec_bytes);
        forget_names(&x);
        ms_signals_restore();
        dlock_client_close(x.client);
        return CLI_EXIT_SOFTWARE;
    }

    ms_group g = {0};
    size_t exited = 0;
    int sig = 0;
    bool started = false;
    int64_t win_start = 0, win_end = 0;
    for (long p = 0; p < x.procs; p++) {
        x.proc_index = p;
        if (ms_spawn(&g, worker_main, &x) < 0) {
            cli_err("bench: cannot start a worker process: %s", strerror(errno));
            exit_code = CLI_EXIT_SOFTWARE;
            goto out;
        }
    }
    /* Everyone set up (clients open, handles made) before the clock starts. */
    /* -L: taking the held locks is part of getting ready (200 us each at
     * most, on top). */
    int64_t ready_ns = 120 * 1000000000LL + c->L * 200000LL;
    rc = sleep_until(&x, &g, ms_now_ns() + ready_ns, all_ready, &exited);
    for (long w = 0; w < c->P && rc == 0; w++)
        if (atomic_load(&x.sh->w[w].failed))
            rc = -1;
    if (rc) {
        if (rc > 0)
            sig = rc;
        else if (rc == -2)
            cli_err("bench: workers not ready after %.0f s", (double)ready_ns / 1e9);
        else
            report_failures(&x);
        exit_code = rc > 0 ? 128 + rc : CLI_EXIT_SOFTWARE;
        goto out;
    }
    int64_t t0 = ms_now_ns() + 20000000; /* every waiter is asleep on the flag by then */
    win_start = t0 + (int64_t)c->warmup_ms * 1000000;
    win_end = win_start + (int64_t)c->duration_ms * 1000000;
    atomic_store(&x.sh->end_ns, win_end);
    atomic_store(&x.sh->start_ns, t0);
    atomic_store(&x.sh->go, 1);
    (void)syscall(SYS_futex, (uint32_t *)&x.sh->go, FUTEX_WAKE, INT_MAX, NULL, NULL, 0);
    started = true;
    /* The run is bounded: the last sections started before the end must
     * finish within a grace period, or the lock is stuck. */
    /* -L: giving the held locks back after the run is one round trip
     * each (1 ms each allowed: a million took over 200 s on a busy run). */
    int64_t grace = 10000000000LL + (int64_t)c->P * c->H * 1000 * 4 + c->L * 1000000LL;
    rc = sleep_until(&x, &g, win_end + grace, NULL, &exited);
    if (rc == 0 && ms_alive(&g) > 0) {
        cli_err("bench: workers still running %.0f s after the end of the run (a lock that is "
                "never granted?); killing them",
                (double)grace / 1e9);
        exit_code = CLI_EXIT_SOFTWARE;
    } else if (rc > 0) {
        sig = rc;
        exit_code = 128 + rc;
    } else if (rc < 0) {
        report_failures(&x);
        exit_code = CLI_EXIT_SOFTWARE;
    }
    ms_group_destroy(&g);
    if (c->L > 0 && exit_code == 0) {
        bshm *sh = x.sh;
        long procs = atomic_load(&sh->held_procs);
        int64_t span = procs ? atomic_load(&sh->held_span_ns) / procs : 0;
        if (procs == x.procs && span > 0) {
            e.have_held = true;
            e.held = atomic_load(&sh->held_end);
            e.lost = atomic_load(&sh->lost_end);
            e.renewals_per_s = (double)atomic_load(&sh->renewed) * 1e9 / (double)span;
            e.renew_calls_per_s = (double)atomic_load(&sh->renew_calls) * 1e9 / (double)span;
            e.renew_cpu_pct = 100.0 * (double)atomic_load(&sh->renew_cpu_ns) / (double)span;
        }
        if (sh->held_rss_n > 0 && sh->held_rss_before >= 0 && sh->held_rss_after >= 0) {
            e.have_rss = true;
            e.rss_held = sh->held_rss_n;
            e.rss_per_lock =
                (double)(sh->held_rss_after - sh->held_rss_before) / (double)sh->held_rss_n;
            e.fds_per_lock = -1;
        }
    }
    if (have_before && exit_code == 0) {
        char err[BENCH_ERR];
        dh_counters after;
        if (dlock_client_open(&x.client, url, NULL) != 0) {
            cli_err("bench: commandstats: %s", dlock_client_errmsg(NULL));
            x.client = NULL;
        } else if (tool_result(&x, dh_read_counters(x.client, name0, &after), err, sizeof err) ==
                   0) {
            e.have_cmds = true;
            e.cmds = after;
            e.cmds.client = after.client - cmds_before.client;
            e.cmds.internal = after.internal - cmds_before.internal;
            for (int i = 0; i < after.n; i++)
                for (int k = 0; k < cmds_before.n; k++)
                    if (strcmp(after.name[i], cmds_before.name[k]) == 0)
                        e.cmds.calls[i] -= cmds_before.calls[k];
        } else {
            cli_err("bench: commandstats: %s", err);
        }
        dlock_client_close(x.client); /* before the memory probe's fork */
        x.client = NULL;
    }
    if (exit_code == 0 && (c->rss || c->K >= 1000) && c->L == 0) {
        if (ms_spawn(&g, rss_main, &x) < 0) {
            cli_err("bench: cannot start the memory probe: %s", strerror(errno));
            exit_code = CLI_EXIT_SOFTWARE;
        } else {
            rc = sleep_until(&x, &g, ms_now_ns() + 300 * 1000000000LL, NULL, &exited);
            if (rc > 0) {
                sig = rc;
                exit_code = 128 + rc;
            } else if (atomic_load(&x.sh->rss_done) && x.sh->rss_held > 0 &&
                       x.sh->rss_before >= 0 && x.sh->rss_after >= 0) {
                e.have_rss = true;
                e.rss_held = x.sh->rss_held;
                e.rss_per_lock = (double)(x.sh->rss_after - x.sh->rss_before) /
                                 (double)x.sh->rss_held;
                e.fds_per_lock = (double)(x.sh->fds_after - x.sh->fds_before) /
                                 (double)x.sh->rss_held;
            } else {
                cli_err("bench: memory probe failed: %s",
                        x.sh->rss_err[0] ? x.sh->rss_err : "no lock could be held");
            }
        }
    }

out:
    ms_group_destroy(&g);
    if (started && (exit_code == 0 || sig)) {
        /* Interrupted: report what was measured so far, marked as such. */
        e.interrupted = sig;
        int64_t now = ms_now_ns();
        if (now < win_end)
            win_end = now > win_start ? now : win_start;
        bstats s;
        if (compute(&x, win_start, win_end, &s) != 0) {
            cli_err("bench: out of memory computing the results");
            exit_code = CLI_EXIT_SOFTWARE;
        } else if (c->json) {
            print_json(&x, &s, &e);
        } else {
            print_human(&x, &s, &e);
        }
        if (fflush(stdout) != 0 && exit_code == 0) {
            cli_err("bench: cannot write the results: %s", strerror(errno));
            exit_code = CLI_EXIT_SOFTWARE;
        }
        if (s.violations > 0 && exit_code == 0)
            exit_code = 1; /* a lock that let two holders in is a failure */
        if (e.have_held && e.lost > 0 && exit_code == 0)
            exit_code = 1; /* so is one that let go of a holder while nothing failed */
    } else if (sig) {
        exit_code = 128 + sig;
    }
    forget_names(&x);
    munmap(x.recs, rec_bytes);
    munmap(x.sh, sizeof(bshm));
    ms_signals_restore();
    dlock_client_close(x.client);
    return exit_code;
}
