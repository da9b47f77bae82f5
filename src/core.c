/* SPDX-License-Identifier: MIT */
/*
 * core.c — the part of libdlock every backend shares: errors, the backend
 * registry, clients and lock handles, re-entry, lease renewal and loss
 * notification, multi-lock and election. Backends only take and give back a
 * lock once; everything about counts, tokens seen by the caller, deadlines
 * and notification lives here.
 */
#include "internal.h"
#include "dlock_debug.h"
#include "support/support.h"

#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <sched.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/mman.h>
#include <sys/random.h>
#include <time.h>
#include <unistd.h>

/* ---- version and errors ------------------------------------------------ */

DLOCK_EXTERN const char *dlock_version(void)
{
    return DLOCK_VERSION_STRING;
}

DLOCK_EXTERN const char *dlock_strerror(int code)
{
    switch (code) {
    case DLOCK_OK:
        return "success";
#define DL_STRERR_(name, value, msg) \
    case value:                      \
        return msg;
        DLOCK_ERRNO_MAP(DL_STRERR_)
#undef DL_STRERR_
    default:
        return "unknown error";
    }
}

DLOCK_EXTERN const char *dlock_err_name(int code)
{
    switch (code) {
    case DLOCK_OK:
        return "OK";
#define DL_ERRNAME_(name, value, msg) \
    case value:                       \
        return #name;
        DLOCK_ERRNO_MAP(DL_ERRNAME_)
#undef DL_ERRNAME_
    default:
        return "EUNKNOWN";
    }
}

static _Thread_local char open_errmsg[DL_ERRMSG_MAX];
static _Thread_local bool in_renewal_thread;

__attribute__((format(printf, 2, 0))) static void vset(char *dst, const char *fmt, va_list ap)
{
    vsnprintf(dst, DL_ERRMSG_MAX, fmt, ap);
}

int dl_lock_err(dlock_lock *l, int code, const char *fmt, ...)
{
    char buf[DL_ERRMSG_MAX];
    va_list ap;
    va_start(ap, fmt);
    vset(buf, fmt, ap);
    va_end(ap);
    if (in_renewal_thread) {
        /* Read once, right after the renewal, then freed: only as long as
         * the message. */
        free(l->renew_err);
        l->renew_err = strdup(buf);
    } else {
        if (!l->errmsg)
            l->errmsg = malloc(DL_ERRMSG_MAX);
        if (l->errmsg)
            memcpy(l->errmsg, buf, strlen(buf) + 1);
    }
    return code;
}

const char *dl_lock_msg(const dlock_lock *l)
{
    return l->errmsg ? l->errmsg : "";
}

int dl_wait_timed_out(dlock_lock *l, const char *why)
{
    if (!why || !*why)
        return dl_lock_err(l, DLOCK_ETIMEDOUT, "lock \"%s\": timed out waiting", l->name);
    return dl_lock_err(l, DLOCK_ETIMEDOUT, "lock \"%s\": timed out waiting (%.300s)", l->name,
                       why);
}

int dl_wait_timed_out_after(dlock_lock *l)
{
    char why[DL_ERRMSG_MAX];
    const char *msg = dl_lock_msg(l), *detail = strstr(msg, "\": ");
    snprintf(why, sizeof why, "%s", detail ? detail + 3 : msg);
    return dl_wait_timed_out(l, why);
}

/* A client's last message is kept per thread, as errno is: threads that
 * share a client each read the message of their own failed call, never one
 * another thread is writing. A few slots, so that a thread using several
 * clients keeps each one's message; the least recently written goes. */
#define DL_MSG_SLOTS 4
static _Thread_local struct client_msg {
    uint64_t client; /* dlock_client.id; 0: free */
    uint64_t written;
    char msg[DL_ERRMSG_MAX];
} client_msgs[DL_MSG_SLOTS];
static _Thread_local uint64_t client_msgs_clock;
static atomic_uint_fast64_t client_ids;

static struct client_msg *client_msg_find(uint64_t id)
{
    for (size_t i = 0; i < DL_MSG_SLOTS; i++)
        if (client_msgs[i].client == id)
            return &client_msgs[i];
    return NULL;
}

static void client_msg_set(const dlock_client *c, const char *msg)
{
    struct client_msg *m = client_msg_find(c->id);
    if (!m) { /* a free slot (written 0), else the oldest */
        m = &client_msgs[0];
        for (size_t i = 1; i < DL_MSG_SLOTS; i++)
            if (client_msgs[i].written < m->written)
                m = &client_msgs[i];
    }
    m->client = c->id;
    m->written = ++client_msgs_clock;
    snprintf(m->msg, sizeof m->msg, "%s", msg);
}

int dl_client_err(dlock_client *c, int code, const char *fmt, ...)
{
    char buf[DL_ERRMSG_MAX];
    va_list ap;
    va_start(ap, fmt);
    vset(buf, fmt, ap);
    va_end(ap);
    client_msg_set(c, buf);
    /* Open failures are read through dlock_client_errmsg(NULL). */
    memcpy(open_errmsg, buf, sizeof buf);
    return code;
}

int dl_claim_err(dlock_client *c, int code, const char *what, const char *key, const char *why)
{
    return dl_client_err(c, code, "claim \"%s\": %s: %s (%s)", key, what, why, c->url->redacted);
}

bool dl_nothing_to_break(int rc, dlock_info *broken)
{
    if (rc)
        return true;
    if (broken->held == 1)
        return false;
    broken->held = broken->holders = 0;
    return true;
}

/* ---- small utilities --------------------------------------------------- */

int64_t dl_now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

int64_t dl_realtime_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (int64_t)ts.tv_sec * 1000LL + ts.tv_nsec / 1000000;
}

int dl_ms_left(int64_t deadline_ns)
{
    if (deadline_ns < 0)
        return -1;
    if (deadline_ns == 0)
        return 0;
    int64_t left = deadline_ns - dl_now_ns();
    if (left <= 0)
        return 0;
    /* Round up so that a wait never ends before its deadline. */
    int64_t ms = (left + 999999) / 1000000;
    return ms > 0x7fffffff ? 0x7fffffff : (int)ms;
}

int64_t dl_drift_ns(int ttl_ms)
{
    return (int64_t)ttl_ms * 10000LL + 2000000LL;
}

/* The drift allowance is for clocks; a loaded machine also runs the
 * watchdog thread late (40 ms was seen on 2 busy cores), and a holder told
 * after its lease ran out on the servers overlaps the next one. So the loss
 * is declared earlier by a wake-up allowance too: ttl/10, at most 100 ms. */
static int64_t loss_margin_ns(int ttl_ms)
{
    int64_t wake_ns = (int64_t)ttl_ms * 100000LL;
    if (wake_ns > 100000000LL)
        wake_ns = 100000000LL;
    return dl_drift_ns(ttl_ms) + wake_ns;
}

int dl_op_timeout_ms(const dlock_lock *l, int op_timeout_ms)
{
    if (l->op_deadline_ns <= 0)
        return op_timeout_ms;
    int left = dl_ms_left(l->op_deadline_ns);
    return op_timeout_ms >= 0 && op_timeout_ms < left ? op_timeout_ms : left;
}

int dl_random(void *buf, size_t n)
{
    unsigned char *p = buf;
    while (n > 0) {
        ssize_t got = getrandom(p, n, 0);
        if (got < 0) {
            if (errno == EINTR)
                continue;
            return DLOCK_EIO;
        }
        p += got;
        n -= (size_t)got;
    }
    return 0;
}

void dl_self_desc(char *buf, size_t len)
{
    char host[256];
    if (gethostname(host, sizeof host) != 0)
        strcpy(host, "?");
    host[sizeof host - 1] = '\0';
    snprintf(buf, len, "pid %ld on %s", (long)getpid(), host);
}

/*
 * Owner ids are 128 random bits from getrandom, fresh per acquisition,
 * drawn OWNER_BATCH at a time: a system call per acquisition was 1 to 2 us
 * of a 70 to 120 us memcached or PostgreSQL cycle. The ids drawn ahead sit
 * in a page the kernel zeroes in a forked child (MADV_WIPEONFORK, Linux
 * 4.14), so that a child never hands out its parent's: its copy has none
 * left, and its spin lock is free. Where the kernel cannot, every id is
 * drawn on its own.
 */
#define OWNER_BATCH 255
struct owner_batch {
    atomic_flag busy; /* taking an id is a copy; a refill, one getrandom */
    unsigned left;    /* ids not yet handed out, the last ones of raw */
    unsigned char raw[OWNER_BATCH][DL_OWNER_HEX / 2];
};
static struct owner_batch *owner_batch;
static pthread_once_t owner_once = PTHREAD_ONCE_INIT;

static void owner_batch_map(void)
{
    size_t len = (size_t)sysconf(_SC_PAGESIZE);
    if (len < sizeof(struct owner_batch))
        return;
    void *p = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED)
        return;
    if (madvise(p, len, MADV_WIPEONFORK) != 0) {
        (void)munmap(p, len);
        return;
    }
    owner_batch = p;
}

static int owner_raw(unsigned char raw[DL_OWNER_HEX / 2])
{
    pthread_once(&owner_once, owner_batch_map);
    struct owner_batch *b = owner_batch;
    if (!b)
        return dl_random(raw, DL_OWNER_HEX / 2);
    while (atomic_flag_test_and_set_explicit(&b->busy, memory_order_acquire))
        sched_yield();
    int rc = 0;
    if (b->left == 0 && (rc = dl_random(b->raw, sizeof b->raw)) == 0)
        b->left = OWNER_BATCH;
    if (rc == 0) {
        b->left--;
        memcpy(raw, b->raw[b->left], DL_OWNER_HEX / 2);
    }
    atomic_flag_clear_explicit(&b->busy, memory_order_release);
    return rc;
}

static int new_owner_id(char out[DL_OWNER_HEX + 1])
{
    unsigned char raw[DL_OWNER_HEX / 2];
    int rc = owner_raw(raw);
    if (rc)
        return rc;
    static const char hex[] = "0123456789abcdef";
    for (size_t i = 0; i < sizeof raw; i++) {
        out[2 * i] = hex[raw[i] >> 4];
        out[2 * i + 1] = hex[raw[i] & 15];
    }
    out[DL_OWNER_HEX] = '\0';
    return 0;
}

int dl_lock_new_owner(dlock_lock *l)
{
    int rc = new_owner_id(l->owner);
    return rc ? dl_lock_err(l, rc, "cannot read random bytes for the owner id") : 0;
}

/* ---- the backend registry ---------------------------------------------- */

/* The registry itself is generated (registry.c): adding a backend is one
 * dlock_backend() call in CMakeLists.txt, never an edit here. */
static size_t registry_n(void)
{
    size_t n = 0;
    while (dl_registry[n])
        n++;
    return n;
}

#define DL_MAX_BACKENDS 32
#define DL_SCHEMES_MAX 128

static dlock_backend_info registry_info[DL_MAX_BACKENDS];
static char registry_schemes[DL_MAX_BACKENDS][DL_SCHEMES_MAX];
static char known_schemes[DL_MAX_BACKENDS * DL_SCHEMES_MAX];
static pthread_once_t registry_once = PTHREAD_ONCE_INIT;

static void registry_init(void)
{
    size_t n = registry_n();
    for (size_t i = 0; i < n && i < DL_MAX_BACKENDS; i++) {
        const dl_backend *b = dl_registry[i];
        char *words = registry_schemes[i];
        for (const dl_scheme *s = b->schemes; s && s->name; s++) {
            size_t used = strlen(words), kused = strlen(known_schemes);
            snprintf(words + used, DL_SCHEMES_MAX - used, "%s%s", used ? " " : "", s->name);
            snprintf(known_schemes + kused, sizeof known_schemes - kused, "%s%s",
                     kused ? " " : "", s->name);
        }
        registry_info[i] = (dlock_backend_info){
            .name = b->name,
            .schemes = words,
            .caps = b->caps,
            .available = b->missing == NULL,
            .missing = b->missing,
            .liveness = b->liveness,
            .fencing = b->fencing,
        };
    }
}

DLOCK_EXTERN size_t dlock_backend_count(void)
{
    size_t n = registry_n();
    return n < DL_MAX_BACKENDS ? n : DL_MAX_BACKENDS;
}

DLOCK_EXTERN const dlock_backend_info *dlock_backend_at(size_t i)
{
    pthread_once(&registry_once, registry_init);
    return i < dlock_backend_count() ? &registry_info[i] : NULL;
}

const char *dl_known_schemes(void)
{
    pthread_once(&registry_once, registry_init);
    return known_schemes;
}

/* The scheme and the backend it belongs to. */
static const dl_scheme *scheme_lookup(const char *name, const dl_backend **be)
{
    for (size_t i = 0; dl_registry[i]; i++)
        for (const dl_scheme *s = dl_registry[i]->schemes; s && s->name; s++)
            if (strcmp(s->name, name) == 0) {
                if (be)
                    *be = dl_registry[i];
                return s;
            }
    return NULL;
}

const dl_scheme *dl_scheme_find(const char *name)
{
    return scheme_lookup(name, NULL);
}

const char *dl_backends_with(unsigned caps, char *buf, size_t len)
{
    size_t n = 0, total = 0;
    for (size_t i = 0; dl_registry[i]; i++)
        total += (dl_registry[i]->caps & caps) == caps;
    buf[0] = '\0';
    for (size_t i = 0; dl_registry[i]; i++) {
        if ((dl_registry[i]->caps & caps) != caps)
            continue;
        size_t used = strlen(buf);
        const char *sep = n == 0 ? "" : n + 1 == total ? " and " : ", ";
        snprintf(buf + used, len - used, "%s%s", sep, dl_registry[i]->name);
        n++;
    }
    return n ? buf : "none";
}

/* Whether word is one of the space-separated words of list (NULL: none). */
static bool word_in(const char *list, const char *word)
{
    size_t n = strlen(word);
    for (const char *s = list ? list : ""; *s;) {
        size_t w = strcspn(s, " ");
        if (w == n && strncmp(s, word, n) == 0)
            return true;
        s += w;
        while (*s == ' ')
            s++;
    }
    return false;
}

/* The backend of a URL's scheme (its canonical name, as dl_url stores it). */
const dl_backend *dl_backend_for_scheme(const char *scheme)
{
    const dl_backend *be = NULL;
    return scheme_lookup(scheme, &be) ? be : NULL;
}
/* ---- clients ----------------------------------------------------------- */

DLOCK_EXTERN void dlock_client_opts_init(dlock_client_opts *opts)
{
    if (!opts)
        return;
    memset(opts, 0, sizeof *opts);
}

/* Options of later versions take their room from reserved_: a program
 * built against an older header passes a struct of the same size. */
_Static_assert(sizeof(void *) != 8 || sizeof(dlock_lock_opts) == 80,
               "dlock_lock_opts changed size: take new fields from reserved_");

DLOCK_EXTERN void dlock_lock_opts_init(dlock_lock_opts *opts)
{
    if (!opts)
        return;
    memset(opts, 0, sizeof *opts);
    opts->kind = DLOCK_EXCLUSIVE;
    opts->permits = 1;
    opts->fair = -1;
}

static int open_fail(int code, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static int open_fail(int code, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vset(open_errmsg, fmt, ap);
    va_end(ap);
    return code;
}

/* A NULL argument: said where the caller looks next (the client's
 * message, or the thread's open message without a client), so that no
 * older, unrelated message is left there to mislead. */
static int null_arg(dlock_client *c, const char *fn, const char *what)
{
    if (c)
        return dl_client_err(c, DLOCK_EINVAL, "%s: %s is NULL", fn, what);
    return open_fail(DLOCK_EINVAL, "%s: %s is NULL", fn, what);
}

#define DL_MAX_TIMEOUT_MS 3600000

/* A timeout parameter of the URL, for an option the caller left at 0. */
static int timeout_param(const dl_url *u, const char *key, int *field)
{
    const char *v = dl_url_param(u, key);
    if (!v || *field != 0)
        return 0;
    char *end;
    errno = 0;
    long x = strtol(v, &end, 10);
    if (!*v || *end || errno || x < 1 || x > DL_MAX_TIMEOUT_MS)
        return open_fail(DLOCK_EURL, "%s: parameter %s wants milliseconds from 1 to %d, not \"%s\"",
                         u->redacted, key, DL_MAX_TIMEOUT_MS, v);
    *field = (int)x;
    return 0;
}

/* Check the caller's options and the URL's parameters: every parameter
 * must be one the backend or the core reads — a typo is an error, never
 * silently ignored — and the core's own fill the options left at 0. */
static int opts_from_url(const dl_backend *be, const dl_url *u, dlock_client_opts *o)
{
    if (o->connect_timeout_ms < 0 || o->connect_timeout_ms > DL_MAX_TIMEOUT_MS ||
        o->op_timeout_ms < 0 || o->op_timeout_ms > DL_MAX_TIMEOUT_MS)
        return open_fail(DLOCK_EINVAL,
                         "connect_timeout_ms and op_timeout_ms must be 0 (default) to %d ms, "
                         "not %d and %d",
                         DL_MAX_TIMEOUT_MS, o->connect_timeout_ms, o->op_timeout_ms);
    for (size_t i = 0; i < u->nparams; i++) {
        const char *k = u->params[i].key;
        if (!word_in(DL_CORE_PARAMS, k) && !word_in(be->params, k))
            return open_fail(DLOCK_EURL, "%s: unknown parameter \"%s\" (%s:// takes: %s%s%s)",
                             u->redacted, k, u->scheme, be->params ? be->params : "",
                             be->params && *be->params ? " " : "", DL_CORE_PARAMS);
    }
    int rc = timeout_param(u, "connect_timeout_ms", &o->connect_timeout_ms);
    return rc ? rc : timeout_param(u, "op_timeout_ms", &o->op_timeout_ms);
}

static void client_free(dlock_client *c)
{
    for (int i = 0; i < c->ncancel_stock; i++)
        close(c->cancel_stock[i]);
    pthread_mutex_destroy(&c->cancel_stock_mu);
    free(c->renew_heap.v);
    free(c->watch_heap.v);
    dl_teller_fini(&c->teller);
    pthread_cond_destroy(&c->renewed_cv);
    pthread_cond_destroy(&c->watch_cv);
    pthread_cond_destroy(&c->renew_cv);
    pthread_mutex_destroy(&c->mu);
    dl_url_free(c->url);
    free(c);
}

DLOCK_EXTERN int dlock_client_open(dlock_client **out, const char *url,
                                   const dlock_client_opts *opts)
{
    if (!out)
        return open_fail(DLOCK_EINVAL, "dlock_client_open: out is NULL");
    *out = NULL;
    /* "" is a mistake (an unset variable in a script), never the default:
     * falling back would turn a distributed lock into a host-local one. */
    if (url && !*url)
        return open_fail(DLOCK_EURL, "empty backend url (NULL asks for the default)");
    char envbuf[DL_URL_MAX];
    envbuf[0] = '\0';
    if (!url)
        url = dl_env_url(envbuf, sizeof envbuf);
    char defbuf[64];
    if (!url || !*url) {
        snprintf(defbuf, sizeof defbuf, "file://%s", DL_FILE_DEFAULT_DIR);
        url = defbuf;
    }
    char err[DL_ERRMSG_MAX];
    dl_url *u = NULL;
    int rc = dl_url_parse(url, &u, err, sizeof err);
    explicit_bzero(envbuf, sizeof envbuf); /* may hold a password */
    if (rc)
        return open_fail(rc, "%s", err);
    const dl_backend *be = dl_backend_for_scheme(u->scheme);
    if (!be) {
        open_fail(DLOCK_EURL, "unknown url scheme \"%s\"", u->scheme);
        dl_url_free(u);
        return DLOCK_EURL;
    }
    if (be->missing) {
        open_fail(DLOCK_ENOTSUP, "%s: %s", u->redacted, be->missing);
        dl_url_free(u);
        return DLOCK_ENOTSUP;
    }
    dlock_client_opts o = {0};
    if (opts)
        o = *opts;
    rc = opts_from_url(be, u, &o);
    if (rc) {
        dl_url_free(u);
        return rc;
    }
    dlock_client *c = calloc(1, sizeof *c);
    if (!c) {
        dl_url_free(u);
        return open_fail(DLOCK_ENOMEM, "out of memory");
    }
    c->be = be;
    c->url = u;
    c->id = atomic_fetch_add(&client_ids, 1) + 1;
    c->opts = o;
    if (c->opts.connect_timeout_ms == 0)
        c->opts.connect_timeout_ms = DL_DEFAULT_TIMEOUT_MS;
    if (c->opts.op_timeout_ms == 0)
        c->opts.op_timeout_ms = DL_DEFAULT_TIMEOUT_MS;
    pthread_mutex_init(&c->mu, NULL);
    pthread_mutex_init(&c->cancel_stock_mu, NULL);
    dl_teller_init(&c->teller);
    pthread_condattr_t ca;
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    pthread_cond_init(&c->renew_cv, &ca);
    pthread_cond_init(&c->watch_cv, &ca);
    pthread_cond_init(&c->renewed_cv, &ca);
    pthread_condattr_destroy(&ca);
    c->ops = be->ops;
    c->caps = be->caps;
    rc = c->ops->client_open(c, u);
    if (rc) {
        /* client_open reported through dl_client_err, which also fills
         * open_errmsg for this thread. */
        c->url = NULL;
        client_free(c);
        dl_url_free(u);
        return rc;
    }
    c->renews = c->ops->renew != NULL; /* (the ops of the URL's mode) */
    /* Claims exactly where the URL's mode keeps records: the ops decide,
     * the descriptor's bit is what dlock backends shows. */
    if (c->ops->record_get && c->ops->record_put && c->ops->record_del)
        c->caps |= DLOCK_CAP_CLAIMS;
    else
        c->caps &= ~(unsigned)DLOCK_CAP_CLAIMS;
    *out = c;
    return 0;
}

/* A `dlock run` gives its command $DLOCK_URL without the password (it may
 * be printed or logged) and the whole URL in a sealed memfd named by
 * $DLOCK_URL_FD, so that a dlock or libdlock program under it reaches the
 * same backend with the same credentials. The descriptor is believed only
 * when $DLOCK_URL is its URL's password-free form: a script that sets
 * another DLOCK_URL gets that one. */
const char *dl_env_url(char *buf, size_t len)
{
    const char *env = getenv("DLOCK_URL");
    if (!env || !*env)
        return NULL;
    const char *fdv = getenv("DLOCK_URL_FD");
    char *end;
    errno = 0;
    long fd = fdv && *fdv ? strtol(fdv, &end, 10) : -1;
    if (fd < 0 || fd > 0x7fffffff || errno || *end || len < 2)
        return env;
    ssize_t n = pread((int)fd, buf, len - 1, 0);
    if (n <= 0)
        return env;
    buf[n] = '\0';
    dl_url *u = NULL;
    char err[DL_ERRMSG_MAX];
    bool same = dl_url_parse(buf, &u, err, sizeof err) == 0 && strcmp(u->redacted, env) == 0;
    dl_url_free(u);
    if (same)
        return buf;
    explicit_bzero(buf, len);
    return env;
}

DLOCK_EXTERN const char *dlock_client_errmsg(const dlock_client *client)
{
    if (!client)
        return open_errmsg;
    const struct client_msg *m = client_msg_find(client->id);
    return m ? m->msg : "";
}

DLOCK_EXTERN const char *dlock_client_url(const dlock_client *client)
{
    return client ? client->url->redacted : "";
}

DLOCK_EXTERN const char *dlock_client_backend(const dlock_client *client)
{
    return client ? client->be->name : "";
}

DLOCK_EXTERN unsigned dlock_client_caps(const dlock_client *client)
{
    return client ? client->caps : 0;
}

static void renew_stop(dlock_client *c);
static int release_now(dlock_lock *l);

/*
 * Release what every handle holds, then stop the client. The handles stay
 * allocated (their owners free them) but are detached: their backend state
 * is gone, an acquisition answers DLOCK_EINVAL, and the client's memory
 * lives until the last of them is freed.
 */
DLOCK_EXTERN void dlock_client_close(dlock_client *client)
{
    if (!client)
        return;
    pthread_mutex_lock(&client->mu);
    client->closed = true;
    dlock_lock *first = client->handles;
    pthread_mutex_unlock(&client->mu);
    for (dlock_lock *l = first; l; l = l->next_handle) {
        int st = atomic_load(&l->state);
        if (st == DLOCK_STATE_HELD || st == DLOCK_STATE_LOST) {
            l->count = 1;
            (void)release_now(l);
        }
        if (client->ops->lock_fini)
            client->ops->lock_fini(l);
        l->detached = true;
    }
    renew_stop(client);
    if (client->ops->client_close)
        client->ops->client_close(client);
    pthread_mutex_lock(&client->mu);
    bool last = client->handles == NULL;
    pthread_mutex_unlock(&client->mu);
    if (last)
        client_free(client);
}

/* ---- lease renewal ----------------------------------------------------- */

static bool lost_publish(dlock_lock *l, const char *why, int64_t at_ns);
static void lost_notify(dlock_lock *l);
static bool uses_lease(const dlock_lock *l);

/* Locks handed to the backend in one renewal call at most: 100 000 held
 * locks then cost about a hundred round trips per renewal period, and one
 * batch neither holds c->mu long nor keeps a server busy long in one go. */
#define RENEW_BATCH_MAX 1024

/* The moment a lease is declared lost: its deadline on our clock minus the
 * loss margin, so that the holder is told before the server can let anyone
 * else in even if our clock runs a little slow or this thread wakes late. */
static int64_t loss_at(const dlock_lock *l)
{
    return l->lease_deadline_ns - loss_margin_ns(l->opts.ttl_ms);
}

/* The deadlines of a lock tracked only for its max-hold cap (no lease):
 * far enough never to come, far enough from overflow to subtract from. */
#define NEVER_NS (INT64_MAX / 4)

/* A warning is still to be told in this failing episode (c->mu held). */
static bool warn_pending(const dlock_lock *l)
{
    return l->opts.on_warn && !l->warned;
}

/* When the watchdog must look at l next: its warning, else its loss. */
static int64_t watch_at(const dlock_lock *l)
{
    return warn_pending(l) ? loss_at(l) - l->warn_ns : loss_at(l);
}

/* When the renewal thread must look at l next: its renewal or its cap. */
static int64_t renew_at(const dlock_lock *l)
{
    return l->cap_at_ns && l->cap_at_ns < l->next_renew_ns ? l->cap_at_ns : l->next_renew_ns;
}

static bool cap_due(const dlock_lock *l, int64_t now)
{
    return l->cap_at_ns && l->cap_at_ns <= now;
}

static void wait_until(pthread_cond_t *cv, pthread_mutex_t *mu, int64_t at_ns)
{
    struct timespec ts = {.tv_sec = at_ns / 1000000000LL, .tv_nsec = at_ns % 1000000000LL};
    pthread_cond_timedwait(cv, mu, &ts);
}

/* The client's two min-heaps of held leases (c->mu held): by next renewal
 * and by loss. Each lock knows its place in each, so that it can leave
 * from anywhere in O(log n). */
enum { BY_RENEWAL, BY_LOSS };

static struct dl_heap *heap_of(dlock_client *c, int by)
{
    return by == BY_RENEWAL ? &c->renew_heap : &c->watch_heap;
}

static int32_t *pos_of(dlock_lock *l, int by)
{
    return by == BY_RENEWAL ? &l->renew_pos : &l->watch_pos;
}

static int64_t key_of(const dlock_lock *l, int by)
{
    return by == BY_RENEWAL ? renew_at(l) : watch_at(l);
}

static void heap_put(struct dl_heap *h, int by, size_t i, dlock_lock *l)
{
    h->v[i] = l;
    *pos_of(l, by) = (int32_t)i;
}

/* Move the lock at i to where its key belongs. */
static void heap_sift(struct dl_heap *h, int by, size_t i)
{
    dlock_lock *l = h->v[i];
    int64_t k = key_of(l, by);
    while (i > 0 && key_of(h->v[(i - 1) / 2], by) > k) {
        heap_put(h, by, i, h->v[(i - 1) / 2]);
        i = (i - 1) / 2;
    }
    for (;;) {
        size_t child = 2 * i + 1;
        if (child >= h->n)
            break;
        if (child + 1 < h->n && key_of(h->v[child + 1], by) < key_of(h->v[child], by))
            child++;
        if (key_of(h->v[child], by) >= k)
            break;
        heap_put(h, by, i, h->v[child]);
        i = child;
    }
    heap_put(h, by, i, l);
}

/* Room in both heaps for every tracked lock plus one, so that putting a
 * lock back after its renewal never needs memory. */
static int heaps_reserve(dlock_client *c)
{
    size_t need = c->watch_heap.n + 1;
    for (int by = BY_RENEWAL; by <= BY_LOSS; by++) {
        struct dl_heap *h = heap_of(c, by);
        if (need <= h->cap)
            continue;
        size_t cap = h->cap ? h->cap * 2 : 64;
        dlock_lock **v = cap <= INT32_MAX ? realloc(h->v, cap * sizeof *v) : NULL;
        if (!v)
            return -1;
        h->v = v;
        h->cap = cap;
    }
    return 0;
}

static void heap_push(dlock_client *c, int by, dlock_lock *l)
{
    struct dl_heap *h = heap_of(c, by);
    heap_put(h, by, h->n++, l);
    heap_sift(h, by, h->n - 1);
}

static void heap_remove(dlock_client *c, int by, dlock_lock *l)
{
    struct dl_heap *h = heap_of(c, by);
    int32_t *pos = pos_of(l, by);
    if (*pos < 0)
        return;
    size_t i = (size_t)*pos;
    *pos = -1;
    dlock_lock *last = h->v[--h->n];
    if (i < h->n) {
        heap_put(h, by, i, last);
        heap_sift(h, by, i);
    }
}

/* A held lease (c->mu held) is tracked while it is in the loss heap. */
static bool tracked(const dlock_lock *l)
{
    return l->watch_pos >= 0;
}

/* Take l out of both heaps and publish its loss, both under c->mu, so that
 * dlock_state never sees a lock that is untracked but still HELD; returns
 * whether to notify (outside the mutex: callbacks may take time). */
static bool unlist_lost(dlock_client *c, dlock_lock *l, const char *why)
{
    /* dlock_state has said LOST since its loss moment, if that has passed */
    int64_t now = dl_now_ns(), at = loss_at(l);
    heap_remove(c, BY_RENEWAL, l);
    heap_remove(c, BY_LOSS, l);
    return lost_publish(l, why, at < now ? at : now);
}

/* The renewal thread's random numbers (xorshift64*: spreading renewals
 * needs no cryptography, and a system call per renewal would cost more
 * than the renewal's share of a batch). */
static uint64_t jitter_next(dlock_client *c)
{
    uint64_t x = c->jitter_state;
    x ^= x >> 12;
    x ^= x << 25;
    x ^= x >> 27;
    c->jitter_state = x;
    return x * 0x2545F4914F6CDD1DULL;
}

/* How long after a renewal (or the acquisition) l is renewed next: a third
 * of its lease, less up to a twelfth at random, so that locks taken in one
 * burst do not stay renewed in one burst forever after. */
static int64_t renew_after(dlock_client *c, const dlock_lock *l)
{
    int64_t third = (int64_t)l->opts.ttl_ms * 1000000LL / 3;
    return third - (int64_t)(jitter_next(c) % (uint64_t)(third / 4 + 1));
}

/* A lock due a little later joins a batch that goes now: early renewals
 * cost nothing, round trips do. */
static int64_t coalesce_ns(const dlock_lock *l)
{
    return (int64_t)l->opts.ttl_ms * 1000000LL / 30;
}

/*
 * Renew batch[0..n) (renewing set on each; outside c->mu): rcs[i] as renew
 * answers, started[i] the moment the lease is then counted from — the time
 * before the request went out, or what the backend says (lease_start_ns) —
 * so that a slow reply never stretches a lease. A lock whose loss is due
 * before its request could leave is not tried (the watchdog decides).
 * Returns how many calls it made to the backend.
 */
static size_t renew_locks(dlock_client *c, dlock_lock **batch, int *rcs, int64_t *started,
                          size_t n)
{
    size_t calls = 0;
    int64_t t0 = dl_now_ns();
    size_t m = 0; /* batch[0..m) are tried: those with time left */
    for (size_t i = 0; i < n; i++) {
        dlock_lock *l = batch[i];
        if (t0 < loss_at(l) && atomic_load(&l->state) == DLOCK_STATE_HELD) {
            batch[i] = batch[m];
            batch[m++] = l;
        }
    }
    for (size_t i = m; i < n; i++)
        rcs[i] = atomic_load(&batch[i]->state) == DLOCK_STATE_HELD ? DLOCK_ETIMEDOUT
                                                                   : DLOCK_ENOTHELD;
    if (c->ops->renew_batch && m > 1) {
        /* Every request of the batch within the earliest loss among them. */
        int64_t bound = INT64_MAX;
        for (size_t i = 0; i < m; i++)
            if (loss_at(batch[i]) < bound)
                bound = loss_at(batch[i]);
        for (size_t i = 0; i < m; i++) {
            batch[i]->op_deadline_ns = bound;
            batch[i]->lease_start_ns = 0;
            started[i] = t0;
        }
        c->ops->renew_batch(c, batch, rcs, m);
        calls = 1;
    } else {
        for (size_t i = 0; i < m; i++) {
            dlock_lock *l = batch[i];
            started[i] = dl_now_ns();
            l->lease_start_ns = 0;
            l->op_deadline_ns = loss_at(l);
            rcs[i] = started[i] < l->op_deadline_ns ? c->ops->renew(l) : DLOCK_ETIMEDOUT;
            calls++;
        }
    }
    for (size_t i = 0; i < m; i++) {
        batch[i]->op_deadline_ns = 0;
        if (rcs[i] == 0 && batch[i]->lease_start_ns)
            started[i] = batch[i]->lease_start_ns;
    }
    return calls;
}

static void tell_lost(void *arg, int i)
{
    lost_notify(((dlock_lock *const *)arg)[i]);
}

/* Tell the loss of lost[0..n) from the renewal thread or the watchdog:
 * outside c->mu, which is held on entry and on return (a loss callback may
 * release), while dlock_lock_free of one of them waits (c->teller). */
static void tell_loss(dlock_client *c, dlock_lock *const *lost, size_t n)
{
    dl_teller_tell(&c->teller, &c->mu, (const void *const *)lost, (int)n, tell_lost,
                   (void *)lost);
}

static void tell_warned(void *arg, int i)
{
    dlock_lock *l = ((dlock_lock *const *)arg)[i];
    l->opts.on_warn(l, l->opts.on_warn_arg);
}

/* Retry of a cap whose lock's owner is in a call on it. */
#define CAP_RETRY_NS 10000000LL

/* Give l up at its cap (renewing set; outside c->mu): release it on the
 * server as its owner would. */
static int cap_release(dlock_client *c, dlock_lock *l)
{
    if (atomic_load(&l->state) != DLOCK_STATE_HELD)
        return DLOCK_ENOTHELD; /* lost meanwhile: told already */
    l->cap_released = true;
    /* A lease's release is worth nothing once its loss is declared. */
    l->op_deadline_ns = c->renews ? loss_at(l) : 0;
    int rc = c->ops->release(l);
    l->op_deadline_ns = 0;
    return rc;
}

/* Why a capped lock was given up (rc: its release's outcome). */
static void cap_reason(const dlock_lock *l, int rc, char *why, size_t len)
{
    if (rc == 0)
        snprintf(why, len,
                 "the max-hold cap of %d ms was reached: given up and released",
                 l->opts.max_hold_ms);
    else
        snprintf(why, len,
                 "the max-hold cap of %d ms was reached: given up, but its release failed "
                 "(%s)%s",
                 l->opts.max_hold_ms, l->renew_err ? l->renew_err : dlock_strerror(rc),
                 l->c->renews ? "; the server lets it go when its lease runs out" : "");
}

/*
 * The renewal thread renews held leases at about ttl/3, every lock that is
 * due (or nearly) in one call to the backend. It decides a loss only when
 * the server says a lock is not ours; the clock is the watchdog's business.
 * The owner's calls on a lock being renewed wait for the batch to end
 * (renewing); a lock whose owner is in a call is left for a later batch.
 */
static void *renew_main(void *arg)
{
    dlock_client *c = arg;
    in_renewal_thread = true;
    dlock_lock *batch[RENEW_BATCH_MAX], *busy[RENEW_BATCH_MAX], *capped[RENEW_BATCH_MAX];
    int rcs[RENEW_BATCH_MAX], caprcs[RENEW_BATCH_MAX];
    int64_t started[RENEW_BATCH_MAX];
    pthread_mutex_lock(&c->mu);
    while (!c->stopping) {
        int64_t now = dl_now_ns();
        struct dl_heap *h = &c->renew_heap;
        if (h->n == 0 || renew_at(h->v[0]) > now) {
            int64_t wake = h->n ? renew_at(h->v[0]) : now + 3600LL * 1000000000LL;
            c->renew_wake_ns = wake;
            wait_until(&c->renew_cv, &c->mu, wake);
            c->renew_wake_ns = 0; /* awake: new locks are seen without a signal */
            continue;
        }
        size_t n = 0, nbusy = 0, ncap = 0;
        while (n + ncap < RENEW_BATCH_MAX && nbusy < RENEW_BATCH_MAX && h->n &&
               (cap_due(h->v[0], now) || h->v[0]->next_renew_ns <= now + coalesce_ns(h->v[0]))) {
            dlock_lock *l = h->v[0];
            heap_remove(c, BY_RENEWAL, l);
            /* A try, not a wait: the owner's thread takes l->mu before
             * c->mu, and a call in progress (release, set_value) is better
             * not waited for with every other lock of the batch. */
            if (pthread_mutex_trylock(&l->mu) != 0) {
                busy[nbusy++] = l;
                continue;
            }
            l->renewing = true;
            pthread_mutex_unlock(&l->mu);
            /* At its cap a lock is given up, not renewed. */
            if (cap_due(l, now))
                capped[ncap++] = l;
            else
                batch[n++] = l;
        }
        for (size_t i = 0; i < nbusy; i++) {
            if (cap_due(busy[i], now))
                busy[i]->cap_at_ns = now + CAP_RETRY_NS;
            if (c->renews)
                busy[i]->next_renew_ns = now + (int64_t)busy[i]->opts.ttl_ms * 1000000LL / 10;
            heap_push(c, BY_RENEWAL, busy[i]);
        }
        if (n == 0 && ncap == 0)
            continue;
        pthread_mutex_unlock(&c->mu);
        size_t calls = n ? renew_locks(c, batch, rcs, started, n) : 0;
        for (size_t i = 0; i < ncap; i++)
            caprcs[i] = cap_release(c, capped[i]);
        pthread_mutex_lock(&c->mu);
        c->renew_calls += calls;
        size_t nlost = 0;
        for (size_t i = 0; i < n; i++) {
            dlock_lock *l = batch[i];
            int64_t ttl_ns = (int64_t)l->opts.ttl_ms * 1000000LL;
            l->renewing = false;
            if (!tracked(l)) {
                /* released, or declared lost by the watchdog meanwhile */
            } else if (rcs[i] == 0 && dl_now_ns() >= loss_at(l)) {
                /* Its loss moment passed before this proof could count (the
                 * process stopped mid-renewal, the watchdog not yet run):
                 * dlock_state has said LOST since then, and a lost lock
                 * stays lost. */
                if (unlist_lost(c, l, "its lease ran out on this client's clock before its "
                                      "renewal was answered (was the process stopped?)"))
                    batch[nlost++] = l;
            } else if (rcs[i] == 0) {
                c->renewed++;
                /* A later deadline: the watchdog finds it when it next looks. */
                l->lease_deadline_ns = started[i] + ttl_ns;
                l->warned = false; /* a failing episode, if any, is over */
                heap_sift(&c->watch_heap, BY_LOSS, (size_t)l->watch_pos);
                /* Its next warning can be due before the watchdog wakes. */
                if (c->watch_wake_ns && watch_at(l) < c->watch_wake_ns)
                    pthread_cond_signal(&c->watch_cv);
                l->next_renew_ns = started[i] + renew_after(c, l);
                heap_push(c, BY_RENEWAL, l);
            } else if (rcs[i] == DLOCK_ELOST || rcs[i] == DLOCK_ENOTHELD) {
                if (unlist_lost(c, l, l->renew_err))
                    batch[nlost++] = l; /* i >= nlost: nothing unread is overwritten */
            } else {
                /* Transient failure: try again soon, the deadline still rules. */
                l->next_renew_ns = dl_now_ns() + ttl_ns / 10;
                heap_push(c, BY_RENEWAL, l);
            }
            free(l->renew_err);
            l->renew_err = NULL;
        }
        for (size_t i = 0; i < ncap; i++) {
            dlock_lock *l = capped[i];
            char why[DL_ERRMSG_MAX];
            cap_reason(l, caprcs[i], why, sizeof why);
            l->renewing = false;
            free(l->renew_err);
            l->renew_err = NULL;
            /* Published whether or not its owner untracked it meanwhile
             * (a release waiting for this one): it must not release again. */
            if (unlist_lost(c, l, why))
                batch[nlost++] = l; /* nlost <= n: batch has room for ncap more */
        }
        pthread_cond_broadcast(&c->renewed_cv);
        tell_loss(c, batch, nlost);
    }
    pthread_mutex_unlock(&c->mu);
    return NULL;
}

/*
 * The watchdog declares a lease lost at loss_at() — callback, descriptor,
 * state — whatever the renewal thread is doing: a renewal stuck on a frozen
 * network must not keep a holder believing in a lease the server has
 * already ended, nor delay the loss of another lock.
 */
static void *watch_main(void *arg)
{
    dlock_client *c = arg;
    in_renewal_thread = true;
    pthread_mutex_lock(&c->mu);
    while (!c->stopping) {
        int64_t now = dl_now_ns();
        struct dl_heap *h = &c->watch_heap;
        if (h->n == 0 || watch_at(h->v[0]) > now) {
            int64_t wake = h->n ? watch_at(h->v[0]) : now + 3600LL * 1000000000LL;
            c->watch_wake_ns = wake;
            wait_until(&c->watch_cv, &c->mu, wake);
            c->watch_wake_ns = 0;
            continue;
        }
        dlock_lock *due = h->v[0];
        if (now < loss_at(due)) {
            /* Its warning: no renewal has succeeded for so long that less
             * than warn_ns is left. Once per failing episode. */
            due->warned = true;
            heap_sift(h, BY_LOSS, (size_t)due->watch_pos);
            if (atomic_load(&due->state) == DLOCK_STATE_HELD)
                dl_teller_tell(&c->teller, &c->mu, (const void *const *)&due, 1, tell_warned,
                               &due);
            continue;
        }
        /* A session backend (ZooKeeper) has no lease: its window is the
         * part of the session timeout the server cannot have used up. */
        if (unlist_lost(c, due,
                        c->caps & DLOCK_CAP_LEASE
                            ? "no renewal succeeded before the lease ran out (less the "
                              "clock-drift and wake-up allowances)"
                            : "the session was not confirmed alive in time: the server may "
                              "expire it now (no reply through the quorum for 2/3 of the "
                              "session timeout, less the clock-drift and wake-up allowances)"))
            tell_loss(c, &due, 1);
    }
    pthread_mutex_unlock(&c->mu);
    return NULL;
}

/* Start the client's renewal thread and watchdog on first use (c->mu held). */
static int lease_threads_start(dlock_lock *l)
{
    dlock_client *c = l->c;
    int rc = 0;
    if (!c->renew_started) {
        uint64_t seed = 0;
        (void)dl_random(&seed, sizeof seed);
        c->jitter_state = seed | 1; /* xorshift must not start at 0 */
    }
    if (!c->renew_started && (rc = pthread_create(&c->renew_thread, NULL, renew_main, c)) == 0)
        c->renew_started = true;
    if (rc == 0 && !c->watch_started &&
        (rc = pthread_create(&c->watch_thread, NULL, watch_main, c)) == 0)
        c->watch_started = true;
    return rc ? dl_lock_err(l, DLOCK_ENOMEM, "cannot start the lease renewal threads: %s",
                            strerror(rc))
              : 0;
}

static int lease_track(dlock_lock *l, int64_t started_ns)
{
    dlock_client *c = l->c;
    int64_t ttl_ns = (int64_t)l->opts.ttl_ms * 1000000LL;
    pthread_mutex_lock(&c->mu);
    int rc = lease_threads_start(l);
    if (rc == 0 && heaps_reserve(c) != 0)
        rc = dl_lock_err(l, DLOCK_ENOMEM, "lock \"%s\": out of memory to track its lease",
                         l->name);
    if (rc) {
        pthread_mutex_unlock(&c->mu);
        return rc;
    }
    /* A lock without a lease is here only for its cap. */
    bool lease = uses_lease(l);
    l->lease_deadline_ns = lease ? started_ns + ttl_ns : NEVER_NS;
    l->next_renew_ns = lease ? started_ns + renew_after(c, l) : NEVER_NS;
    l->cap_at_ns = l->opts.max_hold_ms ? started_ns + dl_ms_to_ns(l->opts.max_hold_ms) : 0;
    l->warned = !lease;
    /* ZooKeeper's span is its backend's (lock_init): cut to half of it. */
    int warn_ms = l->opts.warn_ms ? l->opts.warn_ms : l->opts.ttl_ms / 3;
    l->warn_ns = dl_ms_to_ns(warn_ms < l->opts.ttl_ms / 2 ? warn_ms : l->opts.ttl_ms / 2);
    heap_push(c, BY_RENEWAL, l);
    heap_push(c, BY_LOSS, l);
    /* Wake a thread only if it sleeps past this lease's first renewal or
     * loss: with locks taken and given back all the time, it rarely does,
     * and a wake-up per acquisition would cost more than the acquisition. */
    if (c->renew_wake_ns && renew_at(l) < c->renew_wake_ns)
        pthread_cond_signal(&c->renew_cv);
    if (c->watch_wake_ns && watch_at(l) < c->watch_wake_ns)
        pthread_cond_signal(&c->watch_cv);
    pthread_mutex_unlock(&c->mu);
    return 0;
}

static void lease_untrack(dlock_lock *l)
{
    dlock_client *c = l->c;
    pthread_mutex_lock(&c->mu);
    heap_remove(c, BY_RENEWAL, l);
    heap_remove(c, BY_LOSS, l);
    pthread_mutex_unlock(&c->mu);
}

static void renew_stop(dlock_client *c)
{
    pthread_mutex_lock(&c->mu);
    c->stopping = true;
    pthread_cond_signal(&c->renew_cv);
    pthread_cond_signal(&c->watch_cv);
    pthread_mutex_unlock(&c->mu);
    if (c->renew_started)
        pthread_join(c->renew_thread, NULL);
    if (c->watch_started)
        pthread_join(c->watch_thread, NULL);
    c->renew_started = c->watch_started = false;
}

/* A lease backend, or a session backend that vouches for its session
 * through renew (ZooKeeper): either way the lock has a deadline on our
 * clock that the watchdog enforces. */
static bool uses_lease(const dlock_lock *l)
{
    return l->c->renews;
}

/* Take l's mutex for a backend call of its owner, once any renewal of l in
 * progress has ended (the renewal thread does not hold the mutex through a
 * batch: see renew_main). */
static void handle_lock(dlock_lock *l)
{
    pthread_mutex_lock(&l->mu);
    if (!uses_lease(l) && !l->opts.max_hold_ms)
        return;
    dlock_client *c = l->c;
    pthread_mutex_lock(&c->mu);
    while (l->renewing)
        pthread_cond_wait(&c->renewed_cv, &c->mu);
    pthread_mutex_unlock(&c->mu);
}

static void signal_fd(int fd)
{
    uint64_t one = 1;
    if (fd >= 0 && write(fd, &one, sizeof one) < 0) {
        /* eventfd only fails on counter overflow: a signal is pending anyway */
    }
}

/* Claim the loss and publish it (message first, then the state): true if
 * this call turned the lock from HELD to LOST. */
static bool lost_publish(dlock_lock *l, const char *why, int64_t at_ns)
{
    if (atomic_exchange(&l->lost_claimed, true))
        return false;
    atomic_store(&l->lost_at_ns, at_ns);
    /* Backends' messages often start with the lock's name: say it once. */
    char prefix[DL_NAME_MAX + 16];
    snprintf(prefix, sizeof prefix, "lock \"%s\": ", l->name);
    if (why && strncmp(why, prefix, strlen(prefix)) == 0)
        why += strlen(prefix);
    /* Made once per handle (the first loss): most handles never need it. */
    if (!l->lost_msg)
        l->lost_msg = malloc(DL_ERRMSG_MAX);
    /* A long reason is cut short: the message must fit, not be complete. */
    if (l->lost_msg && snprintf(l->lost_msg, DL_ERRMSG_MAX, "lock \"%s\" lost: %s", l->name,
                                why && *why ? why : "unknown reason") < 0)
        l->lost_msg[0] = '\0';
    int expected = DLOCK_STATE_HELD;
    return atomic_compare_exchange_strong(&l->state, &expected, DLOCK_STATE_LOST);
}

static void lost_notify(dlock_lock *l)
{
    signal_fd(atomic_load(&l->lost_fd));
    if (l->opts.on_lost)
        l->opts.on_lost(l, l->opts.on_lost_arg);
}

void dl_mark_lost(dlock_lock *l, const char *why)
{
    if (lost_publish(l, why, dl_now_ns()))
        lost_notify(l);
}

/* ---- lock handles ------------------------------------------------------ */

/* A name as the client's URL takes it (a peer's layout may take others). */
static int name_valid(dlock_client *c, const char *name, char *why, size_t len)
{
    if (c->ops->name_valid && name)
        return c->ops->name_valid(c, name, why, len);
    return dlock_name_valid(name, why, len);
}

DLOCK_EXTERN int dlock_lock_new(dlock_lock **out, dlock_client *client, const char *name,
                                const dlock_lock_opts *opts)
{
    if (!out || !client)
        return null_arg(client, "dlock_lock_new", out ? "the client" : "out");
    *out = NULL;
    if (client->closed)
        return dl_client_err(client, DLOCK_EINVAL, "the client was closed");
    char why[128];
    int rc = name_valid(client, name, why, sizeof why);
    if (rc)
        return dl_client_err(client, rc, "%s", why);
    dlock_lock_opts o;
    if (opts)
        o = *opts;
    else
        dlock_lock_opts_init(&o);
    if (o.kind == DLOCK_SEMAPHORE && (o.permits < 1 || o.permits > DLOCK_PERMITS_MAX))
        return dl_client_err(client, DLOCK_EINVAL, "semaphore permits must be between 1 and %d, not %u",
                             DLOCK_PERMITS_MAX, o.permits);
    if (o.kind != DLOCK_EXCLUSIVE && o.kind != DLOCK_SHARED && o.kind != DLOCK_SEMAPHORE)
        return dl_client_err(client, DLOCK_EINVAL, "unknown lock kind %d", (int)o.kind);
    if (o.kind != DLOCK_SEMAPHORE)
        o.permits = 1;
    if (o.ttl_ms < 0)
        return dl_client_err(client, DLOCK_EINVAL, "ttl must be positive, not %d ms", o.ttl_ms);
    if (o.fair < -1 || o.fair > 1)
        return dl_client_err(client, DLOCK_EINVAL,
                             "fair must be 1 (FIFO), 0 (any order) or -1 (backend default), "
                             "not %d",
                             o.fair);
    if (o.ttl_ms == 0)
        o.ttl_ms = DL_DEFAULT_TTL_MS;
    if (o.max_hold_ms < 0)
        return dl_client_err(client, DLOCK_EINVAL,
                             "max_hold_ms must be positive (0: no cap), not %d ms", o.max_hold_ms);
    if (o.min_hold_ms < 0)
        return dl_client_err(client, DLOCK_EINVAL,
                             "min_hold_ms must be positive (0: none), not %d ms", o.min_hold_ms);
    /* The cap would end the holding before its minimum. */
    if (o.max_hold_ms && o.min_hold_ms > o.max_hold_ms)
        return dl_client_err(client, DLOCK_EINVAL,
                             "min_hold_ms (%d ms) is longer than the max_hold_ms cap (%d ms)",
                             o.min_hold_ms, o.max_hold_ms);
    /* Renewals come every third of the lease: a warning earlier than half
     * of it before the loss could come between two that succeed. */
    if (o.warn_ms < 0 || o.warn_ms > o.ttl_ms / 2)
        return dl_client_err(client, DLOCK_EINVAL,
                             "warn_ms must be between 0 (a third of the lease) and half the "
                             "%d ms lease, not %d ms",
                             o.ttl_ms, o.warn_ms);
    /* Renewal at ttl/3 needs a few milliseconds of room to be meaningful. */
    if (o.ttl_ms < 30)
        return dl_client_err(client, DLOCK_EINVAL, "ttl of %d ms is too short (minimum 30 ms)",
                             o.ttl_ms);
    unsigned caps = client->caps;
    char have[256];
    const char *what = o.kind == DLOCK_SHARED ? "shared locks" : "semaphores";
    unsigned need = o.kind == DLOCK_SHARED                           ? DLOCK_CAP_SHARED
                    : o.kind == DLOCK_SEMAPHORE && o.permits > 1 ? DLOCK_CAP_SEMAPHORE
                                                                   : 0;
    if (need && !(caps & need) && (client->be->caps & need))
        return dl_client_err(client, DLOCK_ENOTSUP,
                             "the %s backend has %s only in another mode than this URL's "
                             "(see dlock backends)",
                             client->be->name, what);
    if (need && !(caps & need))
        return dl_client_err(client, DLOCK_ENOTSUP, "the %s backend has no %s (%s have)",
                             client->be->name, what, dl_backends_with(need, have, sizeof have));

    dlock_lock *l = calloc(1, sizeof *l);
    if (!l)
        return dl_client_err(client, DLOCK_ENOMEM, "out of memory");
    l->c = client;
    l->opts = o;
    l->cancel_fd = -1;
    l->renew_pos = l->watch_pos = -1;
    l->name = strdup(name);
    if (!l->name) {
        free(l);
        return dl_client_err(client, DLOCK_ENOMEM, "out of memory");
    }
    pthread_mutex_init(&l->mu, NULL);
    pthread_mutex_init(&l->cancel_mu, NULL);
    atomic_init(&l->state, DLOCK_STATE_IDLE);
    atomic_init(&l->token, 0);
    atomic_init(&l->lost_claimed, false);
    atomic_init(&l->lost_at_ns, 0);
    atomic_init(&l->lost_fd, -1);
    if (client->ops->lock_init) {
        rc = client->ops->lock_init(l);
        if (rc) {
            dl_client_err(client, rc, "%s", dl_lock_msg(l));
            goto fail;
        }
    }
    pthread_mutex_lock(&client->mu);
    l->next_handle = client->handles;
    if (client->handles)
        client->handles->prev_handle = l;
    client->handles = l;
    pthread_mutex_unlock(&client->mu);
    *out = l;
    return 0;
fail:
    pthread_mutex_destroy(&l->cancel_mu);
    pthread_mutex_destroy(&l->mu);
    free(l->errmsg);
    free(l->name);
    free(l);
    return rc;
}

DLOCK_EXTERN void dlock_lock_free(dlock_lock *lock)
{
    if (!lock)
        return;
    dlock_client *c = lock->c;
    /* Not while a lease thread tells its loss (it reads the handle and
     * signals its descriptor), unless this is that thread's callback. */
    pthread_mutex_lock(&c->mu);
    dl_teller_wait_item(&c->teller, &c->mu, lock);
    pthread_mutex_unlock(&c->mu);
    if (!lock->detached) { /* else dlock_client_close released it already */
        int st = atomic_load(&lock->state);
        if (st == DLOCK_STATE_HELD || st == DLOCK_STATE_LOST) {
            lock->count = 1;
            (void)release_now(lock);
        }
        if (c->ops->lock_fini)
            c->ops->lock_fini(lock);
    }
    int lfd = atomic_load(&lock->lost_fd);
    if (lfd >= 0)
        close(lfd);
    pthread_mutex_lock(&c->mu);
    if (lock->prev_handle)
        lock->prev_handle->next_handle = lock->next_handle;
    else
        c->handles = lock->next_handle;
    if (lock->next_handle)
        lock->next_handle->prev_handle = lock->prev_handle;
    bool client_gone = c->closed && !c->handles;
    pthread_mutex_unlock(&c->mu);
    pthread_mutex_destroy(&lock->cancel_mu);
    pthread_mutex_destroy(&lock->mu);
    free(lock->errmsg);
    free(lock->renew_err);
    free(lock->lost_msg);
    free(lock->name);
    free(lock);
    if (client_gone)
        client_free(c); /* the last handle of a closed client */
}

DLOCK_EXTERN const char *dlock_lock_errmsg(const dlock_lock *lock)
{
    if (!lock)
        return "";
    if (atomic_load(&((dlock_lock *)lock)->state) == DLOCK_STATE_LOST)
        return lock->lost_msg ? lock->lost_msg : "lock lost (no memory for the reason)";
    return dl_lock_msg(lock);
}

DLOCK_EXTERN const char *dlock_lock_name(const dlock_lock *lock)
{
    return lock ? lock->name : "";
}

/* Empty the loss descriptor of a notice left from an earlier hold. Only a
 * published loss (lost_claimed) signals it, so without one there is nothing
 * to read: that saves two read() calls per acquire-release cycle. */
static void drain_lost(dlock_lock *l)
{
    int fd = atomic_load(&l->lost_fd);
    if (fd < 0 || !atomic_load(&l->lost_claimed))
        return;
    uint64_t v;
    while (read(fd, &v, sizeof v) > 0) {
    }
}

/* A backend about to wait gets an eventfd for dlock_cancel; a cancel that
 * came before it existed is carried over (the caller cannot know when
 * waiting starts). Only when needed — an uncontended acquisition takes no
 * descriptor — from the client's stock (made when it has none), and given
 * back when the acquisition returns (see cancel_fd_put). */
int dl_cancel_fd(dlock_lock *l)
{
    dlock_client *c = l->c;
    pthread_mutex_lock(&l->cancel_mu);
    if (l->cancel_fd < 0) {
        pthread_mutex_lock(&c->cancel_stock_mu);
        l->cancel_fd = c->ncancel_stock > 0 ? c->cancel_stock[--c->ncancel_stock] : -1;
        pthread_mutex_unlock(&c->cancel_stock_mu);
        if (l->cancel_fd < 0)
            l->cancel_fd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
        l->cancel_written = false;
        if (l->cancel_fd >= 0 && l->cancel_pending) {
            signal_fd(l->cancel_fd);
            l->cancel_written = true;
        }
        if (l->cancel_fd >= 0)
            l->cancel_pending = false;
    }
    int fd = l->cancel_fd;
    pthread_mutex_unlock(&l->cancel_mu);
    return fd;
}

/* The acquisition's cancel eventfd back to the client's stock, or closed
 * when it was written to (it would stay readable) or the stock is full. */
static void cancel_fd_put(dlock_lock *l)
{
    dlock_client *c = l->c;
    bool kept = false;
    if (!l->cancel_written) {
        pthread_mutex_lock(&c->cancel_stock_mu);
        if (c->ncancel_stock < DL_CANCEL_STOCK) {
            c->cancel_stock[c->ncancel_stock++] = l->cancel_fd;
            kept = true;
        }
        pthread_mutex_unlock(&c->cancel_stock_mu);
    }
    if (!kept)
        close(l->cancel_fd);
}

static void cancel_disarm(dlock_lock *l)
{
    pthread_mutex_lock(&l->cancel_mu);
    if (l->cancel_fd >= 0)
        cancel_fd_put(l);
    l->cancel_fd = -1;
    l->cancel_pending = false;
    l->acquiring = false;
    pthread_mutex_unlock(&l->cancel_mu);
}

/* From here until cancel_disarm, dlock_cancel cancels this acquisition,
 * whether it waits yet or not; outside of it a cancel is forgotten. */
static void cancel_arm(dlock_lock *l)
{
    pthread_mutex_lock(&l->cancel_mu);
    l->acquiring = true;
    pthread_mutex_unlock(&l->cancel_mu);
}

static int64_t deadline_from(int timeout_ms)
{
    if (timeout_ms < 0)
        return -1;
    if (timeout_ms == 0)
        return 0;
    return dl_deadline_in(timeout_ms);
}

/* A lease counted from `started` is useless if no more than the loss
 * margin is left of it: it would be declared lost at once. */
static bool granted_too_late(const dlock_lock *l, int64_t started)
{
    int64_t ttl = (int64_t)l->opts.ttl_ms * 1000000LL;
    return dl_now_ns() >= started + ttl - loss_margin_ns(l->opts.ttl_ms);
}

static int acquire_until(dlock_lock *l, int64_t deadline_ns)
{
    if (l->detached)
        return dl_lock_err(l, DLOCK_EINVAL, "lock \"%s\": its client was closed", l->name);
    int st = atomic_load(&l->state);
    if (st == DLOCK_STATE_HELD) {
        if (l->count == 0xffffffffu)
            return dl_lock_err(l, DLOCK_EINVAL, "lock \"%s\": re-entry count overflow", l->name);
        l->count++;
        return 0;
    }
    if (st == DLOCK_STATE_LOST)
        return dl_lock_err(l, DLOCK_ELOST,
                           "lock \"%s\" was lost; release it before acquiring again", l->name);
    int rc = dl_lock_new_owner(l);
    if (rc)
        return rc;
    /* A cancel that arrives before we start waiting still counts (the
     * caller cannot tell when waiting begins); one that came while no
     * acquisition was in progress is forgotten. */
    cancel_arm(l);
    drain_lost(l);
    atomic_store(&l->lost_claimed, false);
    atomic_store(&l->lost_at_ns, 0);
    l->cap_released = false;
    atomic_store(&l->state, DLOCK_STATE_WAITING);
    int64_t started;
    pthread_mutex_lock(&l->mu);
    /* No request may keep the caller past its deadline (plus the margin to
     * read a reply already on its way), whatever the servers do. */
    l->op_deadline_ns =
        deadline_ns > 0 ? deadline_ns + (int64_t)DL_DEADLINE_MARGIN_MS * 1000000LL : 0;
    int64_t retry_step_ns = 0;
    l->outage = false;
    for (;;) {
        started = dl_now_ns();
        l->lease_start_ns = 0;
        rc = l->c->ops->acquire(l, deadline_ns);
        /* A wait with time left rides out a restart or failover of its
         * servers, on every backend: a try that found none pauses and tries
         * again (etcd and ZooKeeper do within their own tries, keeping
         * their place in the queue).
         * With a new owner id: whatever the failed try may have left on a
         * server (a grant whose reply was lost) is never taken for this
         * one's; it lapses by its lease or session. A try-once acquisition
         * fails at once. */
        if (rc == DLOCK_EUNREACHABLE && !l->c->ops->rides_out_outages) {
            if (dl_lock_retry_transient(l, &rc, deadline_ns, &retry_step_ns)) {
                rc = dl_lock_new_owner(l);
                if (rc)
                    break;
                continue;
            }
            /* (Run out with no server answering: DLOCK_EUNREACHABLE, not a
             * timeout, which would say the lock was taken.) */
            if (rc == DLOCK_ECANCELED)
                rc = dl_lock_err(l, rc, "lock \"%s\": acquisition canceled", l->name);
            break;
        }
        if (rc == 0 && l->lease_start_ns)
            started = l->lease_start_ns;
        if (rc != 0 || !uses_lease(l) || !granted_too_late(l, started))
            break;
        /* Granted, but so late (the process was stopped or starved while
         * the reply waited) that the lease may already have run out: the
         * lock is worth nothing. Give it back; wait again if time is left. */
        l->c->ops->abandon(l);
        if (deadline_ns >= 0 && dl_ms_left(deadline_ns) == 0) {
            rc = dl_lock_err(l, deadline_ns == 0 ? DLOCK_EBUSY : DLOCK_ETIMEDOUT,
                             "lock \"%s\": granted only after its %d ms lease could have run "
                             "out (was the process stopped?)",
                             l->name, l->opts.ttl_ms);
            break;
        }
        /* The give-back may reach a slow server after the next grant: it
         * must not be able to take that grant away. */
        rc = dl_lock_new_owner(l);
        if (rc)
            break;
    }
    l->op_deadline_ns = 0;
    cancel_disarm(l);
    if (rc == 0) {
        /* Not started: the grant may have come as late as its reply, and a
         * minimum must not end early (a cap counts from the earliest). */
        l->acquired_ns = dl_now_ns();
        l->count = 1;
        atomic_store(&l->state, DLOCK_STATE_HELD);
    } else {
        atomic_store(&l->state, DLOCK_STATE_IDLE);
        atomic_store(&l->token, 0);
    }
    pthread_mutex_unlock(&l->mu);
    if (rc == 0 && (uses_lease(l) || l->opts.max_hold_ms)) {
        rc = lease_track(l, started);
        if (rc) {
            l->count = 1;
            (void)release_now(l);
            return rc;
        }
    }
    return rc;
}

/* Only -1 means forever: another negative number is a caller's bug (an
 * unchecked subtraction), not a wish to wait for ever. */
static int bad_timeout(dlock_lock *l, int timeout_ms)
{
    return dl_lock_err(l, DLOCK_EINVAL,
                       "lock \"%s\": timeout of %d ms (0 tries once, -1 waits forever)", l->name,
                       timeout_ms);
}

DLOCK_EXTERN int dlock_acquire(dlock_lock *lock, int timeout_ms)
{
    if (!lock)
        return DLOCK_EINVAL;
    if (timeout_ms < -1)
        return bad_timeout(lock, timeout_ms);
    return acquire_until(lock, deadline_from(timeout_ms));
}

/* Milliseconds (rounded up) until opts.min_hold_ms has passed for the held
 * lock l; 0 when it has, or when there is none. */
static int64_t min_hold_left_ms(const dlock_lock *l)
{
    if (!l->opts.min_hold_ms || atomic_load(&l->state) != DLOCK_STATE_HELD)
        return 0;
    int64_t left = l->acquired_ns + dl_ms_to_ns(l->opts.min_hold_ms) - dl_now_ns();
    return left > 0 ? (left + 999999) / 1000000 : 0;
}

/* Where the lease cannot be left to the server: keep the lock, renewed as
 * usual, until its minimum has passed or it is lost (its lost descriptor
 * wakes us; without one we only sleep). */
static void min_hold_wait(dlock_lock *l)
{
    int fd = dlock_lost_fd(l);
    int64_t ms;
    while ((ms = min_hold_left_ms(l)) > 0) {
        struct pollfd p = {.fd = fd, .events = POLLIN};
        if (poll(&p, 1, ms > 1000 ? 1000 : (int)ms) > 0)
            break; /* lost: released below as a loss */
    }
}

static int release_now(dlock_lock *l)
{
    if (!l->c->ops->release_at && min_hold_left_ms(l) > 0)
        min_hold_wait(l);
    lease_untrack(l);
    handle_lock(l);
    int st = atomic_load(&l->state);
    int64_t keep_ms;
    int rc;
    if (st == DLOCK_STATE_LOST) {
        /* Not when its cap gave it back already: nothing is left of it. */
        if (l->c->ops->abandon && !l->cap_released)
            l->c->ops->abandon(l);
        rc = dl_lock_err(l, DLOCK_ELOST, "%s", l->lost_msg ? l->lost_msg : "lock lost");
    } else if (l->c->ops->release_at && (keep_ms = min_hold_left_ms(l)) > 0) {
        rc = l->c->ops->release_at(l, keep_ms);
    } else {
        rc = l->c->ops->release(l);
    }
    l->count = 0;
    atomic_store(&l->token, 0);
    atomic_store(&l->state, DLOCK_STATE_IDLE);
    drain_lost(l);
    pthread_mutex_unlock(&l->mu);
    return rc;
}

DLOCK_EXTERN int dlock_release(dlock_lock *lock)
{
    if (!lock)
        return DLOCK_EINVAL;
    int st = atomic_load(&lock->state);
    if (st != DLOCK_STATE_HELD && st != DLOCK_STATE_LOST)
        return dl_lock_err(lock, DLOCK_ENOTHELD, "lock \"%s\" is not held by this handle",
                           lock->name);
    if (st == DLOCK_STATE_HELD && lock->count > 1) {
        lock->count--;
        return 0;
    }
    return release_now(lock);
}

DLOCK_EXTERN int dlock_release_and_close(dlock_lock *lock)
{
    if (!lock)
        return DLOCK_EINVAL;
    dlock_client *c = lock->c;
    int rc;
    int st = atomic_load(&lock->state);
    if (lock->detached)
        return dl_lock_err(lock, DLOCK_EINVAL, "lock \"%s\": its client is closed", lock->name);
    if (st != DLOCK_STATE_HELD && st != DLOCK_STATE_LOST) {
        rc = dl_lock_err(lock, DLOCK_ENOTHELD, "lock \"%s\" is not held by this handle",
                         lock->name);
    } else {
        lock->count = 1; /* closing ends every re-entry */
        lock->release_closing = true;
        rc = release_now(lock);
        lock->release_closing = false;
    }
    dlock_client_close(c);
    return rc;
}

DLOCK_EXTERN void dlock_cancel(dlock_lock *lock)
{
    if (!lock)
        return;
    pthread_mutex_lock(&lock->cancel_mu);
    if (lock->cancel_fd >= 0) {
        signal_fd(lock->cancel_fd);
        lock->cancel_written = true;
    } else if (lock->acquiring) {
        lock->cancel_pending = true;
    }
    /* else no acquisition is in progress: forgotten, as dlock.h says */
    pthread_mutex_unlock(&lock->cancel_mu);
}

DLOCK_EXTERN uint64_t dlock_token(const dlock_lock *lock)
{
    /* A lost holding protects nothing: its token must not be used. */
    if (!lock || dlock_state(lock) != DLOCK_STATE_HELD)
        return 0;
    return atomic_load(&((dlock_lock *)lock)->token);
}

DLOCK_EXTERN dlock_state_t dlock_state(const dlock_lock *lock)
{
    if (!lock)
        return DLOCK_STATE_IDLE;
    dlock_lock *l = (dlock_lock *)lock;
    if (!uses_lease(l))
        return (dlock_state_t)atomic_load(&l->state);
    /* The renewal thread turns HELD into LOST under c->mu, so read the state
     * under it too; and do not trust a lease whose deadline has passed even
     * if that thread has not run yet. */
    pthread_mutex_lock(&l->c->mu);
    int st = atomic_load(&l->state);
    if (st == DLOCK_STATE_HELD && tracked(l) && dl_now_ns() >= loss_at(l))
        st = DLOCK_STATE_LOST;
    pthread_mutex_unlock(&l->c->mu);
    return (dlock_state_t)st;
}

DLOCK_EXTERN int dlock_lost_fd(dlock_lock *lock)
{
    if (!lock)
        return -1;
    int fd = atomic_load(&lock->lost_fd);
    if (fd >= 0)
        return fd;
    fd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
    if (fd < 0) {
        dl_lock_err(lock, DLOCK_EIO, "cannot create eventfd: %s", strerror(errno));
        return -1;
    }
    int none = -1;
    if (!atomic_compare_exchange_strong(&lock->lost_fd, &none, fd)) {
        close(fd); /* another thread was first */
        return none;
    }
    /* A loss before the descriptor existed must still show. */
    if (atomic_load(&lock->state) == DLOCK_STATE_LOST)
        signal_fd(fd);
    return fd;
}

DLOCK_EXTERN long long dlock_valid_ms(const dlock_lock *lock)
{
    if (!lock || dlock_state(lock) != DLOCK_STATE_HELD)
        return 0;
    dlock_lock *l = (dlock_lock *)lock;
    if (!uses_lease(l))
        return -1;
    pthread_mutex_lock(&l->c->mu);
    int64_t until = tracked(l) ? loss_at(l) : 0;
    pthread_mutex_unlock(&l->c->mu);
    int64_t left = until - dl_now_ns();
    return left > 0 ? left / 1000000LL : 0;
}

DLOCK_EXTERN unsigned dlock_held_count(const dlock_lock *lock)
{
    return lock && atomic_load(&((dlock_lock *)lock)->state) == DLOCK_STATE_HELD ? lock->count
                                                                                : 0;
}

DLOCK_EXTERN int dlock_peer_env(dlock_lock *lock, dlock_env_fn fn, void *arg)
{
    if (!lock || !fn)
        return DLOCK_EINVAL;
    if (lock->detached || dlock_state(lock) != DLOCK_STATE_HELD)
        return DLOCK_ENOTHELD;
    const dl_backend_ops *ops = lock->c->ops;
    return ops->peer_env ? ops->peer_env(lock, fn, arg) : 0;
}

static void *notify_main(void *arg)
{
    lost_notify(arg);
    return NULL;
}

DLOCK_EXTERN int dlock_debug_force_loss(dlock_lock *lock)
{
    if (!lock)
        return DLOCK_EINVAL;
    if (atomic_load(&lock->state) != DLOCK_STATE_HELD)
        return dl_lock_err(lock, DLOCK_ENOTHELD, "lock \"%s\" is not held", lock->name);
    lease_untrack(lock);
    /* Let the lock go for real, as an expired lease would, so that another
     * holder can take it and fencing matters. */
    handle_lock(lock);
    if (lock->c->ops->abandon)
        lock->c->ops->abandon(lock);
    pthread_mutex_unlock(&lock->mu);
    /* Told from another thread, as a real loss is (the renewal thread, the
     * session watcher): a test of loss handling must see what production
     * does. Joined, so that the hook returns once the loss is told. */
    if (lost_publish(lock, "forced loss (test hook)", dl_now_ns())) {
        pthread_t th;
        if (pthread_create(&th, NULL, notify_main, lock) == 0)
            pthread_join(th, NULL);
        else
            lost_notify(lock); /* no thread to be had: tell it here */
    }
    return 0;
}

DLOCK_EXTERN int dlock_debug_span_ms(const dlock_lock *lock)
{
    return lock && uses_lease(lock) ? lock->opts.ttl_ms : 0;
}

DLOCK_EXTERN int64_t dlock_debug_lost_at_ns(const dlock_lock *lock)
{
    if (!lock || atomic_load(&lock->state) != DLOCK_STATE_LOST)
        return 0;
    return atomic_load(&lock->lost_at_ns);
}

/* ---- multi-lock -------------------------------------------------------- */

static int by_name(const void *a, const void *b)
{
    const dlock_lock *x = *(dlock_lock *const *)a, *y = *(dlock_lock *const *)b;
    return strcmp(x->name, y->name);
}

DLOCK_EXTERN int dlock_acquire_all(dlock_lock **locks, size_t n, int timeout_ms)
{
    if (!locks || n == 0)
        return DLOCK_EINVAL;
    for (size_t i = 0; i < n; i++)
        if (!locks[i])
            return DLOCK_EINVAL;
    if (timeout_ms < -1) {
        for (size_t i = 0; i < n; i++)
            (void)bad_timeout(locks[i], timeout_ms);
        return DLOCK_EINVAL;
    }
    dlock_lock **sorted = malloc(n * sizeof *sorted);
    if (!sorted)
        return DLOCK_ENOMEM;
    memcpy(sorted, locks, n * sizeof *sorted);
    qsort(sorted, n, sizeof *sorted, by_name);
    for (size_t i = 1; i < n; i++) {
        /* Two handles of one name on one client would wait for each other
         * until the timeout: refuse, and say so on every handle. */
        if (strcmp(sorted[i]->name, sorted[i - 1]->name) == 0 &&
            sorted[i]->c == sorted[i - 1]->c) {
            for (size_t k = 0; k < n; k++)
                dl_lock_err(sorted[k], DLOCK_EINVAL,
                            "lock \"%s\" appears twice in one multi-lock (one handle per name)",
                            sorted[i]->name);
            free(sorted);
            return DLOCK_EINVAL;
        }
    }
    int rc = 0;
    int64_t deadline = deadline_from(timeout_ms);
    size_t got = 0;
    for (; got < n; got++) {
        rc = acquire_until(sorted[got], deadline);
        if (rc)
            break;
    }
    if (rc) {
        /* All or nothing: give back what we took, newest first. The failing
         * handle's message explains why; copy it to every handle so callers
         * can read it from any of them. */
        dlock_lock *failed = sorted[got];
        while (got-- > 0)
            (void)dlock_release(sorted[got]);
        for (size_t i = 0; i < n; i++)
            if (sorted[i] != failed)
                dl_lock_err(sorted[i], rc, "%s", dl_lock_msg(failed));
    }
    free(sorted);
    return rc;
}

DLOCK_EXTERN int dlock_release_all(dlock_lock **locks, size_t n)
{
    if (!locks)
        return DLOCK_EINVAL;
    int first = 0;
    for (size_t i = n; i-- > 0;) {
        int rc = dlock_release(locks[i]);
        if (rc && !first)
            first = rc;
    }
    return first;
}

/* ---- election ---------------------------------------------------------- */

DLOCK_EXTERN int dlock_campaign(dlock_lock *lock, const char *value, int timeout_ms)
{
    if (lock && timeout_ms < -1)
        return bad_timeout(lock, timeout_ms);
    if (!lock || !value || strlen(value) > DL_LEADER_MAX)
        return lock ? dl_lock_err(lock, DLOCK_EINVAL, "leader value must be 0..255 bytes")
                    : DLOCK_EINVAL;
    if (!lock->c->ops->set_value)
        return dl_lock_err(lock, DLOCK_ENOTSUP, "the %s backend cannot publish a leader value",
                           lock->c->be->name);
    if (lock->opts.kind != DLOCK_EXCLUSIVE)
        return dl_lock_err(lock, DLOCK_EINVAL, "elections need an exclusive lock");
    lock->campaign_value = value;
    lock->value_published = false;
    int rc = dlock_acquire(lock, timeout_ms);
    lock->campaign_value = NULL;
    if (rc)
        return rc;
    handle_lock(lock);
    /* (A re-entry publishes anew: its acquisition wrote nothing.) */
    if (!lock->value_published || lock->count > 1)
        rc = lock->c->ops->set_value(lock, value);
    lock->value_published = false;
    pthread_mutex_unlock(&lock->mu);
    if (rc)
        (void)dlock_release(lock);
    return rc;
}

DLOCK_EXTERN int dlock_resign(dlock_lock *lock)
{
    if (!lock)
        return DLOCK_EINVAL;
    /* Resigning ends leadership whatever the re-entry count. */
    if (atomic_load(&lock->state) == DLOCK_STATE_HELD)
        lock->count = 1;
    return dlock_release(lock);
}

DLOCK_EXTERN int dlock_leader(dlock_client *client, const char *name, char *buf, size_t len)
{
    if (!client || !buf || len == 0)
        return null_arg(client, "dlock_leader", !client ? "the client" : "the buffer (or empty)");
    char why[128];
    int rc = name_valid(client, name, why, sizeof why);
    if (rc)
        return dl_client_err(client, rc, "%s", why);
    if (!client->ops->get_value)
        return dl_client_err(client, DLOCK_ENOTSUP, "the %s backend has no leader values",
                             client->be->name);
    /* Read whole (values are at most 255 bytes), so that a short buffer is
     * reported, never silently given a cut value. */
    char whole[DL_LEADER_MAX + 1] = "";
    rc = client->ops->get_value(client, name, whole, sizeof whole);
    size_t need = strlen(whole) + 1;
    snprintf(buf, len, "%s", whole);
    if (rc == 0 && need > len)
        return dl_client_err(client, DLOCK_EINVAL,
                             "dlock_leader: the value of \"%s\" needs %zu bytes, the buffer has "
                             "%zu (it holds the value cut short)",
                             name, need, len);
    return rc;
}

/* ---- inspection -------------------------------------------------------- */

DLOCK_EXTERN int dlock_inspect(dlock_client *client, const char *name, dlock_info *info)
{
    if (!client || !info)
        return null_arg(client, "dlock_inspect", client ? "info" : "the client");
    char why[128];
    int rc = name_valid(client, name, why, sizeof why);
    if (rc)
        return dl_client_err(client, rc, "%s", why);
    memset(info, 0, sizeof *info);
    info->held = info->holders = info->waiters = -1;
    info->held_ms = info->lease_ms = -1;
    if (!client->ops->inspect)
        return dl_client_err(client, DLOCK_ENOTSUP, "the %s backend cannot inspect locks",
                             client->be->name);
    return client->ops->inspect(client, name, info);
}

DLOCK_EXTERN int dlock_break(dlock_client *client, const char *name, dlock_info *broken)
{
    if (!client)
        return null_arg(client, "dlock_break", "the client");
    char why[128];
    int rc = name_valid(client, name, why, sizeof why);
    if (rc)
        return dl_client_err(client, rc, "%s", why);
    dlock_info scratch;
    dlock_info *info = broken ? broken : &scratch;
    memset(info, 0, sizeof *info);
    info->held = info->holders = info->waiters = -1;
    info->held_ms = info->lease_ms = -1;
    if (!client->ops->break_lock)
        return dl_client_err(client, DLOCK_ENOTSUP, "the %s backend cannot break locks",
                             client->be->name);
    rc = client->ops->break_lock(client, name, info);
    if (rc == 0 && info->holders == 0) /* (one answer, whatever the backend) */
        return dl_client_err(client, DLOCK_ENOTHELD, "lock \"%s\" is not held: nothing to break",
                             name);
    return rc;
}

DLOCK_EXTERN int dlock_list(dlock_client *client, const char *prefix, dlock_list_fn fn,
                            void *arg)
{
    if (!client || !fn)
        return null_arg(client, "dlock_list", client ? "fn" : "the client");
    if (!client->ops->list)
        return dl_client_err(client, DLOCK_ENOTSUP, "the %s backend cannot list locks",
                             client->be->name);
    return client->ops->list(client, prefix ? prefix : "", fn, arg);
}

bool dl_lock_retry_transient(dlock_lock *l, int *rc, int64_t deadline_ns, int64_t *step_ns)
{
    if (!dl_retry_transient(rc, deadline_ns, dl_cancel_fd(l), step_ns))
        return false;
    l->outage = true;
    return true;
}

bool dl_deadline_cut(const dlock_lock *l, int rc, int64_t deadline_ns)
{
    return rc == DLOCK_EUNREACHABLE && deadline_ns > 0 && dl_ms_left(deadline_ns) == 0 &&
           !l->outage;
}

int dl_connect_err(dlock_lock *l, int64_t deadline_ns, int rc, const char *why,
                   const char *where)
{
    if (rc == DLOCK_ECANCELED)
        return dl_lock_err(l, rc, "lock \"%s\": canceled", l->name);
    if (dl_deadline_cut(l, rc, deadline_ns))
        return dl_lock_err(l, DLOCK_ETIMEDOUT, "lock \"%s\": timed out: %s (%s)", l->name, why,
                           where);
    return dl_lock_err(l, rc, "lock \"%s\": %s (%s)", l->name, why, where);
}

int dl_conflict_err(dlock_lock *l, char kind, unsigned permits)
{
    char asked[48];
    if (l->opts.kind == DLOCK_SEMAPHORE)
        snprintf(asked, sizeof asked, "a semaphore of %u", l->opts.permits);
    else
        snprintf(asked, sizeof asked, "%s", l->opts.kind == DLOCK_SHARED ? "shared" : "exclusive");
    if (kind == 's')
        return dl_lock_err(l, DLOCK_ECONFLICT,
                           "lock \"%s\" is a semaphore of %u permit%s here (asked: %s)",
                           l->name, permits, permits == 1 ? "" : "s", asked);
    return dl_lock_err(l, DLOCK_ECONFLICT, "lock \"%s\" is %s lock here (asked: %s)", l->name,
                       kind == 'r' ? "a shared" : "an exclusive", asked);
}

int dl_load_library(const char *lib, const char *deb, const dl_sym *syms, size_t n,
                    void *table, char *err, size_t errlen)
{
    void *h = dlopen(lib, RTLD_NOW | RTLD_LOCAL);
    if (!h) {
        snprintf(err, errlen, "cannot load %s (Debian: %s): %s", lib, deb, dlerror());
        return -1;
    }
    for (size_t i = 0; i < n; i++) {
        void *f = dlsym(h, syms[i].name);
        if (!f) {
            snprintf(err, errlen, "%s has no %s (too old a version?)", lib, syms[i].name);
            return -1; /* (the library stays loaded: harmless) */
        }
        memcpy((char *)table + syms[i].off, &f, sizeof f);
    }
    return 0;
}
