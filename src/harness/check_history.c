/* SPDX-License-Identifier: MIT */
/* check_history.c — histories of `dlock check` runs: text form and checker. */
#include "check_history.h"

#include <dlock.h>

#include <ctype.h>
#include <errno.h>
#include <inttypes.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

static const char *const type_names[H_NTYPES] = {
    [H_ACQUIRE] = "acquire",
    [H_ACQUIRED] = "acquired",
    [H_ACQUIRE_FAILED] = "acquire_failed",
    [H_LOST] = "lost",
    [H_RELEASE] = "release",
    [H_READ] = "read",
    [H_WRITE_ACCEPTED] = "write_accepted",
    [H_WRITE_REJECTED] = "write_rejected",
    [H_KILLED] = "killed",
    [H_PAUSED] = "paused",
    [H_RESUMED] = "resumed",
    [H_FINAL] = "final",
    [H_STATE] = "state",
    [H_LOST_NOTIFIED] = "lost_notified",
    [H_SERVER_KILLED] = "server_killed",
    [H_SERVER_STARTED] = "server_started",
    [H_SERVER_PAUSED] = "server_paused",
    [H_SERVER_RESUMED] = "server_resumed",
    [H_REPL_CUT] = "repl_cut",
    [H_FAILOVER] = "failover",
    [H_DATA_LOSS] = "data_loss",
    [H_PARTITIONED] = "partitioned",
    [H_HEALED] = "healed",
    [H_VALID] = "valid",
    [H_KEPT] = "kept",
    [H_CLAIM_RUN] = "claim_run",
    [H_CLAIM_FINISH] = "claim_finish",
    [H_CLAIM_FINISHED] = "claim_finished",
    [H_CLAIM_REPLAY] = "claim_replay",
};

const char *hist_type_name(int type)
{
    return type >= 0 && type < H_NTYPES ? type_names[type] : "unknown";
}

int hist_type_parse(const char *s)
{
    for (int i = 0; i < H_NTYPES; i++)
        if (strcmp(s, type_names[i]) == 0)
            return i;
    return -1;
}

void hist_meta_default(hist_meta *m)
{
    memset(m, 0, sizeof *m);
    snprintf(m->scenario, sizeof m->scenario, "history");
    snprintf(m->mode, sizeof m->mode, "fenced");
    snprintf(m->backend, sizeof m->backend, "unknown");
    m->caps = DLOCK_CAP_FENCING;
    m->ttl_ms = 0;
    m->fencing = 1;
}

int hist_append(hist_run *r, const hist_event *e)
{
    if (r->n == r->cap) {
        size_t cap = r->cap ? r->cap * 2 : 256;
        hist_event *ev = realloc(r->ev, cap * sizeof *ev);
        if (!ev)
            return -1;
        r->ev = ev;
        r->cap = cap;
    }
    r->ev[r->n] = *e;
    r->ev[r->n].seq = r->n;
    r->n++;
    return 0;
}

void hist_run_free(hist_run *r)
{
    free(r->ev);
    r->ev = NULL;
    r->n = r->cap = 0;
}

void hist_runs_free(hist_run *runs, size_t nruns)
{
    for (size_t i = 0; i < nruns; i++)
        hist_run_free(&runs[i]);
    free(runs);
}

/* ---- text form ---------------------------------------------------------- */

/* Metadata values are written as single words. */
static void word(char *dst, size_t len, const char *src)
{
    size_t o = 0;
    for (; *src && o + 1 < len; src++)
        dst[o++] = isgraph((unsigned char)*src) ? *src : '_';
    dst[o] = '\0';
}

int hist_write(FILE *f, const hist_run *r)
{
    char sc[sizeof r->meta.scenario], mo[sizeof r->meta.mode], be[sizeof r->meta.backend];
    word(sc, sizeof sc, r->meta.scenario);
    word(mo, sizeof mo, r->meta.mode);
    word(be, sizeof be, r->meta.backend);
    fprintf(f, "run scenario=%s mode=%s backend=%s caps=0x%x ttl_ms=%" PRId64 " fencing=%d\n", sc,
            mo, be, r->meta.caps, r->meta.ttl_ms, r->meta.fencing);
    for (size_t i = 0; i < r->n; i++) {
        const hist_event *e = &r->ev[i];
        fprintf(f, "%" PRId64 " %s", e->t, hist_type_name(e->type));
        if (e->worker)
            fprintf(f, " w=%d", e->worker);
        if (e->token)
            fprintf(f, " token=%" PRIu64, e->token);
        switch (e->type) {
        case H_READ:
        case H_WRITE_ACCEPTED:
        case H_WRITE_REJECTED:
        case H_FINAL:
        case H_STATE:
        case H_SERVER_KILLED:
        case H_SERVER_STARTED:
        case H_SERVER_PAUSED:
        case H_SERVER_RESUMED:
        case H_REPL_CUT:
        case H_FAILOVER:
        case H_DATA_LOSS:
        case H_PARTITIONED:
        case H_VALID:
        case H_CLAIM_RUN:
        case H_CLAIM_FINISH:
        case H_CLAIM_FINISHED:
        case H_CLAIM_REPLAY:
            fprintf(f, " value=%" PRId64, e->value);
            break;
        case H_ACQUIRED: /* the promised end, where the library gave one */
        case H_LOST_NOTIFIED: /* the moment the library declared the loss */
            if (e->value)
                fprintf(f, " value=%" PRId64, e->value);
            break;
        default:
            break;
        }
        if (e->rc)
            fprintf(f, " rc=%d", e->rc);
        fputc('\n', f);
    }
    return ferror(f) ? -1 : 0;
}

static int parse_i64(const char *s, int64_t *out)
{
    if (!*s)
        return -1;
    errno = 0;
    char *end;
    long long v = strtoll(s, &end, 0);
    if (errno || *end)
        return -1;
    *out = v;
    return 0;
}

static int parse_u64(const char *s, uint64_t *out)
{
    if (!*s || *s == '-')
        return -1;
    errno = 0;
    char *end;
    unsigned long long v = strtoull(s, &end, 0);
    if (errno || *end)
        return -1;
    *out = v;
    return 0;
}

static int parse_meta(char *line, hist_meta *m)
{
    hist_meta_default(m);
    for (char *tok = strtok(line, " \t"); tok; tok = strtok(NULL, " \t")) {
        char *eq = strchr(tok, '=');
        if (!eq)
            return -1;
        *eq = '\0';
        const char *k = tok, *v = eq + 1;
        int64_t n;
        uint64_t u;
        if (strcmp(k, "scenario") == 0)
            word(m->scenario, sizeof m->scenario, v);
        else if (strcmp(k, "mode") == 0)
            word(m->mode, sizeof m->mode, v);
        else if (strcmp(k, "backend") == 0)
            word(m->backend, sizeof m->backend, v);
        else if (strcmp(k, "caps") == 0 && parse_u64(v, &u) == 0 && u <= 0xffffffffu)
            m->caps = (unsigned)u;
        else if (strcmp(k, "ttl_ms") == 0 && parse_i64(v, &n) == 0 && n >= 0)
            m->ttl_ms = n;
        else if (strcmp(k, "fencing") == 0 && parse_i64(v, &n) == 0 && (n == 0 || n == 1))
            m->fencing = (int)n;
        else if (strcmp(k, "scenario") && strcmp(k, "mode") && strcmp(k, "backend") &&
                 strcmp(k, "caps") && strcmp(k, "ttl_ms") && strcmp(k, "fencing"))
            continue; /* unknown keys: room for later versions */
        else
            return -1;
    }
    return 0;
}

static int parse_event(char *line, hist_event *e)
{
    memset(e, 0, sizeof *e);
    char *tok = strtok(line, " \t");
    if (!tok || parse_i64(tok, &e->t) != 0)
        return -1;
    tok = strtok(NULL, " \t");
    if (!tok || (e->type = hist_type_parse(tok)) < 0)
        return -1;
    while ((tok = strtok(NULL, " \t")) != NULL) {
        char *eq = strchr(tok, '=');
        if (!eq)
            return -1;
        *eq = '\0';
        const char *k = tok, *v = eq + 1;
        int64_t n;
        if (strcmp(k, "w") == 0) {
            if (parse_i64(v, &n) != 0 || n < 0 || n > 1000000000)
                return -1;
            e->worker = (int)n;
        } else if (strcmp(k, "token") == 0) {
            if (parse_u64(v, &e->token) != 0)
                return -1;
        } else if (strcmp(k, "value") == 0) {
            if (parse_i64(v, &e->value) != 0)
                return -1;
        } else if (strcmp(k, "rc") == 0) {
            if (parse_i64(v, &n) != 0 || n < -100000 || n > 100000)
                return -1;
            e->rc = (int)n;
        }
        /* other keys: ignored, for later versions */
    }
    return 0;
}

int hist_read(FILE *f, hist_run **runs_out, size_t *nruns_out, char *err, size_t errlen)
{
    hist_run *runs = NULL;
    size_t nruns = 0;
    char *line = NULL;
    size_t cap = 0;
    ssize_t len;
    long lineno = 0;
    int rc = 0;
    while ((len = getline(&line, &cap, f)) >= 0) {
        lineno++;
        while (len > 0 && (line[len - 1] == '\n' || line[len - 1] == '\r'))
            line[--len] = '\0';
        char *p = line;
        while (*p == ' ' || *p == '\t')
            p++;
        char *hash = strchr(p, '#');
        if (hash)
            *hash = '\0';
        if (!*p)
            continue;
        bool is_run = strncmp(p, "run", 3) == 0 && (p[3] == '\0' || p[3] == ' ' || p[3] == '\t');
        if (is_run || nruns == 0) {
            hist_run *nr = realloc(runs, (nruns + 1) * sizeof *nr);
            if (!nr) {
                snprintf(err, errlen, "out of memory");
                rc = -1;
                break;
            }
            runs = nr;
            memset(&runs[nruns], 0, sizeof runs[nruns]);
            hist_meta_default(&runs[nruns].meta);
            nruns++;
            if (is_run) {
                if (parse_meta(p + 3, &runs[nruns - 1].meta) != 0) {
                    snprintf(err, errlen, "line %ld: malformed run line", lineno);
                    rc = -1;
                    break;
                }
                continue;
            }
        }
        hist_event e;
        if (parse_event(p, &e) != 0) {
            snprintf(err, errlen,
                     "line %ld: malformed event (want \"T_NS EVENT [w=N] [token=N] "
                     "[value=N] [rc=N]\")",
                     lineno);
            rc = -1;
            break;
        }
        if (hist_append(&runs[nruns - 1], &e) != 0) {
            snprintf(err, errlen, "out of memory");
            rc = -1;
            break;
        }
    }
    free(line);
    if (rc == 0 && ferror(f)) {
        snprintf(err, errlen, "read error: %s", strerror(errno));
        rc = -1;
    }
    if (rc == 0 && nruns == 0) {
        snprintf(err, errlen, "no events");
        rc = -1;
    }
    if (rc) {
        hist_runs_free(runs, nruns);
        return -1;
    }
    *runs_out = runs;
    *nruns_out = nruns;
    return 0;
}

/* ---- the checker ------------------------------------------------------- */

static int cmp_event(const void *a, const void *b)
{
    const hist_event *x = a, *y = b;
    if (x->t != y->t)
        return x->t < y->t ? -1 : 1;
    return (x->seq > y->seq) - (x->seq < y->seq);
}

typedef struct window {
    int64_t start, end; /* end: INT64_MAX while open */
    int64_t deadline;   /* validity deadline (INT64_MAX without a lease) */
    int worker;
    uint64_t token;
} window;

typedef struct wstate {
    int worker;
    int64_t invoked;  /* last acquire invocation */
    long open;        /* index of the open window, -1 */
    long last;        /* index of its latest window, open or not, -1 */
    int64_t paused;   /* last SIGSTOP by the harness, INT64_MIN */
    int64_t resumed;  /* last SIGCONT, INT64_MIN */
    int stopped_past; /* the latest SIGSTOP..SIGCONT of its window lasted a ttl */
    int kept;         /* H_KEPT since its latest acquire call */
    int64_t cut_expiry; /* cut off while holding: when its lease ran out on the
                           servers (0: not cut off in this window) */
    int cut_pending;    /* ... and it has not been told of the loss yet */
} wstate;

typedef struct checker {
    hist_result *res;
    const hist_meta *meta;
    window *win;
    size_t nwin;
    wstate *ws;
    size_t nws, capws;
    int64_t *loss;    /* times of data-loss events beyond the backend's claim */
    size_t nloss, caploss;
    int64_t *told;    /* partitioned holders: expiry - notification, ns */
    size_t ntold, captold;
} checker;

static wstate *worker_state(checker *c, int worker)
{
    for (size_t i = 0; i < c->nws; i++)
        if (c->ws[i].worker == worker)
            return &c->ws[i];
    if (c->nws == c->capws) {
        size_t cap = c->capws ? c->capws * 2 : 64;
        wstate *n = realloc(c->ws, cap * sizeof *n);
        if (!n)
            return NULL;
        c->ws = n;
        c->capws = cap;
    }
    c->ws[c->nws] = (wstate){.worker = worker, .invoked = INT64_MIN, .open = -1, .last = -1,
                             .paused = INT64_MIN, .resumed = INT64_MIN};
    return &c->ws[c->nws++];
}

/* The latest a window can end: its validity deadline on lease backends. The
 * lease starts no earlier than the acquire call, so call + ttl bounds it
 * (renewals extend it; the harness keeps holdings shorter than a ttl except
 * where a fault is meant to outlast the lease). */
static int64_t deadline_of(const checker *c, const wstate *w, int64_t start)
{
    if (c->meta->ttl_ms <= 0)
        return INT64_MAX;
    int64_t from = w->invoked != INT64_MIN && w->invoked <= start ? w->invoked : start;
    return from + c->meta->ttl_ms * 1000000;
}

static void close_window(checker *c, wstate *w, int64_t t)
{
    if (w->open < 0)
        return;
    window *x = &c->win[w->open];
    if (t < x->end)
        x->end = t;
    w->open = -1;
}

/* Was there a data-loss event beyond the backend's claim in (a, b]? */
static bool loss_between(const checker *c, int64_t a, int64_t b)
{
    size_t lo = 0, hi = c->nloss;
    while (lo < hi) { /* first loss > a */
        size_t mid = (lo + hi) / 2;
        if (c->loss[mid] > a)
            hi = mid;
        else
            lo = mid + 1;
    }
    return lo < c->nloss && c->loss[lo] <= b;
}

/* Min-heap of window ends, for counting overlapping pairs in one sweep. */
static void push_end(int64_t *h, size_t *n, int64_t v)
{
    size_t i = (*n)++;
    while (i > 0 && h[(i - 1) / 2] > v) {
        h[i] = h[(i - 1) / 2];
        i = (i - 1) / 2;
    }
    h[i] = v;
}

static void pop_end(int64_t *h, size_t *n)
{
    int64_t last = h[--*n];
    size_t i = 0;
    for (;;) {
        size_t k = 2 * i + 1;
        if (k >= *n)
            break;
        if (k + 1 < *n && h[k + 1] < h[k])
            k++;
        if (last <= h[k])
            break;
        h[i] = h[k];
        i = k;
    }
    if (*n)
        h[i] = last;
}

static int count_overlaps(checker *c)
{
    hist_result *res = c->res;
    int64_t *heap = malloc((c->nwin ? c->nwin : 1) * sizeof *heap);
    if (!heap)
        return -1;
    size_t hn = 0;
    /* windows are opened in time order, so they are sorted by start */
    for (size_t i = 0; i < c->nwin; i++) {
        const window *w = &c->win[i];
        if (w->end <= w->start)
            continue; /* a late grant: empty, reported as such */
        while (hn > 0 && heap[0] <= w->start)
            pop_end(heap, &hn);
        if (hn > 0) {
            /* the earlier holders still open at this start (exactly the
             * windows left in the heap): name the first, and tell those
             * separated from this one by a data loss */
            size_t found = 0;
            for (size_t j = i; j-- > 0 && found < hn;) {
                if (c->win[j].end <= w->start)
                    continue;
                found++;
                if (loss_between(c, c->win[j].start, w->start))
                    res->overlaps_expected++;
                if (!res->first_overlap[0])
                    snprintf(res->first_overlap, sizeof res->first_overlap,
                             "w=%d token=%" PRIu64 " acquired at %" PRId64
                             " while w=%d (token=%" PRIu64 ", since %" PRId64 ") still held it",
                             w->worker, w->token, w->start, c->win[j].worker, c->win[j].token,
                             c->win[j].start);
            }
        }
        res->overlaps += hn;
        push_end(heap, &hn, w->end);
    }
    free(heap);
    return 0;
}

/* qsort has no context argument: the windows being sorted by token */
static const window *tok_win;

static int cmp_by_token(const void *a, const void *b)
{
    const window *x = &tok_win[*(const size_t *)a], *y = &tok_win[*(const size_t *)b];
    if (x->token != y->token)
        return x->token < y->token ? -1 : 1;
    return (x->start > y->start) - (x->start < y->start);
}

static int check_tokens(checker *c)
{
    hist_result *res = c->res;
    if (c->nwin == 0)
        return 0;
    size_t *ix = malloc(c->nwin * sizeof *ix);
    if (!ix)
        return -1;
    for (size_t i = 0; i < c->nwin; i++) {
        ix[i] = i;
        if (i > 0 && c->win[i].token <= c->win[i - 1].token) {
            res->token_regressions++;
            if (loss_between(c, c->win[i - 1].start, c->win[i].start))
                res->token_regressions_expected++;
            if (!res->first_token[0])
                snprintf(res->first_token, sizeof res->first_token,
                         "w=%d got token %" PRIu64 " at %" PRId64
                         ", not above the previous acquisition's %" PRIu64 " (w=%d)",
                         c->win[i].worker, c->win[i].token, c->win[i].start,
                         c->win[i - 1].token, c->win[i - 1].worker);
        }
    }
    tok_win = c->win;
    qsort(ix, c->nwin, sizeof *ix, cmp_by_token);
    for (size_t i = 1; i < c->nwin; i++) {
        const window *p = &c->win[ix[i - 1]], *q = &c->win[ix[i]];
        if (p->token != q->token)
            continue;
        res->token_dups++;
        if (loss_between(c, p->start, q->start))
            res->token_dups_expected++;
        if (!res->first_token[0])
            snprintf(res->first_token, sizeof res->first_token,
                     "token %" PRIu64 " was issued more than once", q->token);
    }
    free(ix);
    return 0;
}

/* t appended to the growing array *v (*n used of *cap): 0, or -1 out of memory. */
static int push_i64(int64_t **v, size_t *n, size_t *cap, int64_t t)
{
    if (*n == *cap) {
        size_t ncap = *cap ? *cap * 2 : 16;
        int64_t *nv = realloc(*v, ncap * sizeof *nv);
        if (!nv)
            return -1;
        *v = nv;
        *cap = ncap;
    }
    (*v)[(*n)++] = t;
    return 0;
}

static int cmp_i64(const void *a, const void *b)
{
    int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
    return (x > y) - (x < y);
}

/* A partitioned holder told of its loss: the library declared it at t
 * (dlock_state said LOST from then on), its callback ran at cb_t. Whether
 * that was before the lease ran out on the servers is the library's
 * reckoning; how long the callback waited for its thread to be scheduled
 * is the machine's, reported beside it (an overlap still counts from
 * cb_t: a holder stops when told). */
static int loss_told(checker *c, wstate *w, int64_t t, int64_t cb_t)
{
    hist_result *res = c->res;
    w->cut_pending = 0;
    res->loss_told++;
    if (cb_t - t > res->told_callback_delay_max_ns)
        res->told_callback_delay_max_ns = cb_t - t;
    int64_t before = w->cut_expiry - t;
    if (before < 0) {
        res->loss_late++;
        if (!res->first_loss_late[0])
            snprintf(res->first_loss_late, sizeof res->first_loss_late,
                     "w=%d was declared lost at %" PRId64 ", %.1f ms after its lease ran out "
                     "on the servers",
                     w->worker, t, (double)-before / 1e6);
    }
    return push_i64(&c->told, &c->ntold, &c->captold, before);
}

/* A partitioned holder's holding ended at t (release, death, a new
 * acquisition, the end of the history) before it was told. */
static void loss_untold(checker *c, wstate *w, int64_t t)
{
    hist_result *res = c->res;
    if (!w->cut_pending)
        return;
    w->cut_pending = 0;
    if (t < w->cut_expiry)
        return; /* ended while its lease was still good on the servers */
    res->loss_untold++;
    res->loss_late++;
    if (!res->first_loss_late[0])
        snprintf(res->first_loss_late, sizeof res->first_loss_late,
                 "w=%d was never told of the loss: its holding ended at %" PRId64
                 ", %.1f ms after its lease ran out on the servers",
                 w->worker, t, (double)(t - w->cut_expiry) / 1e6);
}

/* ---- claims ------------------------------------------------------------- */

#define CLAIM_HASHES 16 /* results recorded per key that a replay may match */

typedef struct claim_key {
    uint64_t runs, finished_ok;
    uint64_t last_attempt;
    int runner;      /* worker of the run in progress, 0 none */
    bool let_go;     /* ... which may have lost its lock (stopped, told) */
    int nhash;
    int64_t hash[CLAIM_HASHES];
    bool replayed;
} claim_key;

typedef struct claim_worker {
    int64_t key; /* the key it runs, -1 none */
} claim_worker;

/* Grow a zeroed array to hold index i. */
static int grow(void **p, size_t *cap, size_t i, size_t size)
{
    if (i < *cap)
        return 0;
    size_t n = *cap ? *cap : 16;
    while (n <= i)
        n *= 2;
    void *q = realloc(*p, n * size);
    if (!q)
        return -1;
    memset((char *)q + *cap * size, 0, (n - *cap) * size);
    *p = q;
    *cap = n;
    return 0;
}

/* Count what the claim events of a sorted run say (hist_result.claim_*).
 * A run in progress ends when its runner records or is refused, is killed,
 * or is told of a loss; a runner stopped (SIGSTOP) on a backend whose
 * holdings expire (ttl_ms > 0) may lose its lock meanwhile, so a run by
 * another after that is a takeover, not a duplicate: its own late finish
 * must then be refused (a second recorded finish is a violation). */
static int check_claims(const hist_run *r, hist_result *res)
{
    claim_key *key = NULL;
    claim_worker *wk = NULL;
    size_t nkey = 0, nwk = 0;
    int rc = 0;
    for (size_t i = 0; i < r->n && rc == 0; i++) {
        const hist_event *e = &r->ev[i];
        bool claim_ev = e->type >= H_CLAIM_RUN && e->type <= H_CLAIM_REPLAY;
        if (e->worker <= 0 || (!claim_ev && e->type != H_KILLED && e->type != H_PAUSED &&
                               e->type != H_LOST_NOTIFIED))
            continue;
        size_t oldw = nwk;
        if (grow((void **)&wk, &nwk, (size_t)e->worker, sizeof *wk) != 0 ||
            (claim_ev && grow((void **)&key, &nkey, (size_t)e->token, sizeof *key) != 0)) {
            rc = -1;
            break;
        }
        for (size_t j = oldw; j < nwk; j++)
            wk[j].key = -1;
        claim_worker *w = &wk[e->worker];
        claim_key *k = claim_ev ? &key[e->token] : w->key >= 0 ? &key[w->key] : NULL;
        switch (e->type) {
        case H_KILLED:
        case H_PAUSED:
        case H_LOST_NOTIFIED:
            if (!k || k->runner != e->worker)
                break;
            if (e->type == H_KILLED) {
                res->claim_kills++;
                k->runner = 0;
                w->key = -1;
            } else if (e->type == H_PAUSED) {
                res->claim_pauses++;
                k->let_go |= r->meta.ttl_ms > 0;
            } else {
                k->let_go = true;
            }
            break;
        case H_CLAIM_RUN:
            res->claim_runs++;
            if (e->value > 1)
                res->claim_reruns++;
            if (k->runner && !k->let_go) {
                res->claim_dups++;
                if (!res->first_claim[0])
                    snprintf(res->first_claim, sizeof res->first_claim,
                             "w=%d ran key %" PRIu64 " at %" PRId64
                             " while w=%d still ran it and held its lock",
                             e->worker, e->token, e->t, k->runner);
            } else if (k->finished_ok) {
                res->claim_dups++;
                if (!res->first_claim[0])
                    snprintf(res->first_claim, sizeof res->first_claim,
                             "w=%d ran key %" PRIu64 " at %" PRId64 " after it was recorded done",
                             e->worker, e->token, e->t);
            }
            if (k->runs > 0 && (uint64_t)e->value <= k->last_attempt) {
                res->claim_attempt_bad++;
                if (!res->first_claim[0])
                    snprintf(res->first_claim, sizeof res->first_claim,
                             "w=%d re-ran key %" PRIu64 " at %" PRId64 " as attempt %" PRId64
                             ", not above the previous attempt %" PRIu64,
                             e->worker, e->token, e->t, e->value, k->last_attempt);
            }
            k->runs++;
            if ((uint64_t)e->value > k->last_attempt)
                k->last_attempt = (uint64_t)e->value;
            k->runner = e->worker;
            k->let_go = false;
            w->key = (int64_t)e->token;
            break;
        case H_CLAIM_FINISH:
            if (k->nhash < CLAIM_HASHES)
                k->hash[k->nhash++] = e->value;
            break;
        case H_CLAIM_FINISHED:
            if (e->rc == 0) {
                if (k->finished_ok) {
                    res->claim_finished_twice++;
                    if (!res->first_claim[0])
                        snprintf(res->first_claim, sizeof res->first_claim,
                                 "w=%d recorded key %" PRIu64 " at %" PRId64
                                 " although another run had recorded it",
                                 e->worker, e->token, e->t);
                }
                k->finished_ok++;
            } else {
                res->claim_finish_lost++;
            }
            if (k->runner == e->worker)
                k->runner = 0;
            w->key = -1;
            break;
        case H_CLAIM_REPLAY: {
            res->claim_replays++;
            k->replayed = true;
            bool known = k->nhash == CLAIM_HASHES; /* more than kept: not judged */
            for (int j = 0; j < k->nhash && !known; j++)
                known = k->hash[j] == e->value;
            if (!known) {
                res->claim_replay_bad++;
                if (!res->first_claim[0])
                    snprintf(res->first_claim, sizeof res->first_claim,
                             "w=%d replayed key %" PRIu64 " at %" PRId64
                             " with a result no runner recorded",
                             e->worker, e->token, e->t);
            }
            break;
        }
        default:
            break;
        }
    }
    for (size_t i = 0; i < nkey && rc == 0; i++) {
        if (key[i].runs > 0 || key[i].replayed)
            res->claim_keys++;
        if (key[i].runs > 0 && key[i].finished_ok == 0)
            res->claim_unfinished++;
    }
    free(key);
    free(wk);
    return rc;
}

int hist_check(hist_run *r, hist_result *res)
{
    memset(res, 0, sizeof *res);
    if (r->n > 1)
        qsort(r->ev, r->n, sizeof *r->ev, cmp_event);
    checker c = {.res = res, .meta = &r->meta};
    size_t capwin = 0;
    int rc = 0;
    int64_t last_acq_t = INT64_MIN;
    int last_acq_worker = 0;
    uint64_t max_token_issued = 0;
    int64_t last_accepted_value = 0;
    uint64_t pending_takeover = 0;
    int64_t ttl_ns = r->meta.ttl_ms > 0 ? r->meta.ttl_ms * 1000000 : 0;
    /* Data-loss events first: a violation is judged against every one of
     * them, including those logged after it (the sweep below is in order,
     * but stale writes look back to their window's start). */
    for (size_t i = 0; i < r->n && rc == 0; i++)
        if (r->ev[i].type == H_DATA_LOSS && r->ev[i].value != 0)
            rc = push_i64(&c.loss, &c.nloss, &c.caploss, r->ev[i].t);
    bool faulted = false;
    for (size_t i = 0; i < r->n && rc == 0; i++) {
        const hist_event *e = &r->ev[i];
        wstate *w = NULL;
        if (e->worker > 0 || e->type == H_ACQUIRED) {
            w = worker_state(&c, e->worker);
            if (!w) {
                rc = -1;
                break;
            }
        }
        switch (e->type) {
        case H_ACQUIRE:
            w->invoked = e->t;
            w->kept = 0;
            break;
        case H_KEPT:
            if (w)
                w->kept = 1;
            break;
        case H_ACQUIRED: {
            res->sections++;
            if (faulted)
                res->sections_after_fault++;
            loss_untold(&c, w, e->t);
            w->cut_expiry = 0;
            close_window(&c, w, e->t); /* a second acquisition ends the first */
            if (c.nwin == capwin) {
                size_t cap = capwin ? capwin * 2 : 256;
                window *nw = realloc(c.win, cap * sizeof *nw);
                if (!nw) {
                    rc = -1;
                    break;
                }
                c.win = nw;
                capwin = cap;
            }
            int64_t dl = deadline_of(&c, w, e->t);
            bool late = ttl_ns > 0 && e->t >= dl && !w->kept;
            /* The library's own promise, where sooner: a lease that predates
             * the call (one per client) ends before call + ttl. */
            if (e->value > 0 && e->value < dl)
                dl = e->value;
            if (late) {
                /* reported after its lease, which began no earlier than
                 * the call, could have run out: an empty holding */
                res->late_grants++;
                if (!res->first_late[0])
                    snprintf(res->first_late, sizeof res->first_late,
                             "w=%d was granted token %" PRIu64 " at %" PRId64 ", %.1f ms after "
                             "it called acquire, with a ttl of %" PRId64 " ms",
                             e->worker, e->token, e->t,
                             (double)(e->t - (dl - ttl_ns)) / 1e6, r->meta.ttl_ms);
            }
            c.win[c.nwin] = (window){.start = e->t, .end = dl, .deadline = dl,
                                     .worker = e->worker, .token = e->token};
            w->open = (long)c.nwin;
            w->last = (long)c.nwin++;
            w->stopped_past = 0;
            if (late)
                break; /* an empty holding: it takes the lock from nobody */
            res->takeovers += pending_takeover;
            pending_takeover = 0;
            last_acq_t = e->t;
            last_acq_worker = e->worker;
            if (e->token > max_token_issued)
                max_token_issued = e->token;
            break;
        }
        case H_ACQUIRE_FAILED:
            res->acquire_failed++;
            break;
        case H_LOST:
        case H_KILLED:
            if (e->type == H_LOST)
                res->losses++;
            else
                res->kills++;
            if (w && w->open >= 0) {
                if (e->type == H_KILLED)
                    res->kills_holding++;
                pending_takeover++;
            }
            if (w) {
                loss_untold(&c, w, e->t);
                close_window(&c, w, e->t);
            }
            break;
        case H_LOST_NOTIFIED:
            res->notified++;
            /* value: the library's moment of the loss (0: not known, the
             * callback's own time; a history from before it was logged) */
            if (w && w->cut_pending &&
                loss_told(&c, w, e->value > 0 && e->value <= e->t ? e->value : e->t, e->t) != 0) {
                rc = -1;
                break;
            }
            if (w && w->open >= 0) {
                /* A holder stopped for longer than its lease can be told no
                 * earlier than its SIGCONT; then at once. */
                if (w->stopped_past && w->resumed != INT64_MIN) {
                    int64_t late = e->t - w->resumed;
                    res->notify_late++;
                    if (late > res->notify_late_max_ns)
                        res->notify_late_max_ns = late;
                }
                close_window(&c, w, e->t);
            }
            break;
        case H_STATE: {
            /* Only the looks of holders whose holding is over count: their
             * lock was lost (or released by its lease) before they looked. */
            bool over = w && w->last >= 0 &&
                        (w->open < 0 || w->stopped_past || e->t >= c.win[w->last].end ||
                         (w->cut_expiry && e->t >= w->cut_expiry) ||
                         (last_acq_worker != e->worker && last_acq_t > c.win[w->last].start));
            if (!over)
                break;
            res->state_looks++;
            if (e->value == DLOCK_STATE_LOST)
                res->state_lost_seen++;
            if (e->rc == 1)
                res->fd_lost_seen++;
            /* Stopped for longer than a ttl since it took the lock: every
             * lease it had (renewals included) is over by the SIGCONT. */
            if (e->value == DLOCK_STATE_HELD && w->stopped_past && e->t >= w->resumed) {
                res->state_held_late++;
                if (!res->first_late[0])
                    snprintf(res->first_late, sizeof res->first_late,
                             "w=%d was told it still held the lock (token %" PRIu64
                             ") at %" PRId64 " after being stopped for longer than its ttl",
                             e->worker, c.win[w->last].token, e->t);
            }
            /* Cut off from the servers past the moment its lease ran out
             * there: the library must have declared it lost by then. */
            if (e->value == DLOCK_STATE_HELD && w->cut_expiry && e->t >= w->cut_expiry &&
                !(w->stopped_past && e->t >= w->resumed)) {
                res->state_held_late++;
                if (!res->first_late[0])
                    snprintf(res->first_late, sizeof res->first_late,
                             "w=%d was told it still held the lock (token %" PRIu64
                             ") at %" PRId64 ", %.1f ms after its lease ran out on the servers "
                             "it was cut off from",
                             e->worker, c.win[w->last].token, e->t,
                             (double)(e->t - w->cut_expiry) / 1e6);
            }
            break;
        }
        case H_RELEASE:
            if (w) {
                loss_untold(&c, w, e->t);
                close_window(&c, w, e->t);
            }
            break;
        case H_PARTITIONED:
            res->partitions++;
            /* Holding when cut off: its lease now ends on the servers at
             * e->value (or within a ttl), and the holder goes on until it is
             * told — a real user stops then, not before. */
            if (w && w->open >= 0 && e->t < c.win[w->open].end) {
                window *x = &c.win[w->open];
                int64_t exp = e->value > 0 ? e->value
                              : ttl_ns > 0 ? e->t + ttl_ns
                                           : INT64_MAX;
                x->end = INT64_MAX;
                w->cut_expiry = exp;
                w->cut_pending = 1;
            }
            break;
        case H_VALID:
            /* The library's promise as the holder was about to write: a
             * renewal since the acquisition moved it on. (A holder cut
             * off from the servers holds until told: left as it is.) */
            if (w && w->open >= 0 && !w->cut_expiry && e->value > c.win[w->open].end)
                c.win[w->open].end = e->value;
            break;
        case H_PAUSED:
            res->pauses++;
            if (w)
                w->paused = e->t;
            break;
        case H_RESUMED:
            if (w) {
                w->resumed = e->t;
                if (ttl_ns > 0 && w->paused != INT64_MIN && w->open >= 0 &&
                    w->paused >= c.win[w->open].start && e->t - w->paused > ttl_ns)
                    w->stopped_past = 1;
            }
            break;
        case H_SERVER_KILLED:
        case H_SERVER_PAUSED:
        case H_REPL_CUT:
            res->server_faults++;
            faulted = true;
            break;
        case H_DATA_LOSS:
            res->data_losses++;
            break;
        case H_READ:
            res->reads++;
            break;
        case H_WRITE_ACCEPTED:
        case H_WRITE_REJECTED: {
            bool accepted = e->type == H_WRITE_ACCEPTED;
            res->writes++;
            if (accepted) {
                res->writes_accepted++;
                last_accepted_value = e->value;
            } else {
                res->writes_rejected++;
            }
            /* Valid: the writer's own window with this token is still open
             * and no one else acquired the lock since it began. */
            bool valid = false;
            if (w && w->open >= 0) {
                const window *x = &c.win[w->open];
                valid = x->token == e->token && e->t < x->end &&
                        !(last_acq_worker != e->worker && last_acq_t > x->start);
            }
            if (valid) {
                if (!accepted)
                    res->fresh_rejected++;
            } else {
                if (accepted) {
                    res->stale_accepted++;
                    if (w && w->last >= 0 && loss_between(&c, c.win[w->last].start, e->t))
                        res->stale_accepted_expected++;
                    else if (e->token >= max_token_issued)
                        res->stale_accepted_unopposed++;
                } else {
                    res->stale_rejected++;
                }
                if (accepted && !res->first_stale[0])
                    snprintf(res->first_stale, sizeof res->first_stale,
                             "w=%d wrote value %" PRId64 " with token %" PRIu64 " at %" PRId64
                             " after its holding had ended",
                             e->worker, e->value, e->token, e->t);
            }
            break;
        }
        case H_FINAL:
            res->has_final = 1;
            res->final_value = e->value;
            break;
        default:
            break;
        }
    }
    /* Holders still cut off and untold when the history ends. */
    if (rc == 0 && r->n > 0)
        for (size_t i = 0; i < c.nws; i++)
            loss_untold(&c, &c.ws[i], r->ev[r->n - 1].t);
    if (c.ntold > 0) {
        qsort(c.told, c.ntold, sizeof *c.told, cmp_i64);
        res->told_before_min_ns = c.told[0];
        res->told_before_median_ns = c.told[(c.ntold - 1) / 2];
    }
    if (rc == 0)
        rc = count_overlaps(&c);
    if (rc == 0)
        rc = check_tokens(&c);
    if (rc == 0)
        rc = check_claims(r, res);
    if (!res->has_final)
        res->final_value = last_accepted_value;
    /* Each accepted write is value read + 1: every write that did not add
     * to the final value overwrote another one. */
    res->lost_increments = (int64_t)res->writes_accepted - res->final_value;
    free(c.win);
    free(c.ws);
    free(c.loss);
    free(c.told);
    return rc;
}

const char *hist_verdict(const hist_result *res, const hist_meta *m, char *why, size_t len)
{
    bool fencing = (m->caps & DLOCK_CAP_FENCING) != 0;
    why[0] = '\0';
    /* What data loss beyond the backend's claim explains is reported, not
     * failed; everything else is judged as before. */
    uint64_t overlaps = res->overlaps - res->overlaps_expected;
    uint64_t dups = res->token_dups - res->token_dups_expected;
    uint64_t regressions = res->token_regressions - res->token_regressions_expected;
    uint64_t stale =
        res->stale_accepted - res->stale_accepted_expected - res->stale_accepted_unopposed;
    uint64_t claim_bad = res->claim_dups + res->claim_attempt_bad + res->claim_replay_bad +
                         res->claim_finished_twice;
    if (claim_bad > 0) {
        snprintf(why, len,
                 "claims: %" PRIu64 " duplicate runs, %" PRIu64 " re-runs whose attempt was not "
                 "above the previous one, %" PRIu64 " replays of a result never recorded, %" PRIu64
                 " second records (first: %s)",
                 res->claim_dups, res->claim_attempt_bad, res->claim_replay_bad,
                 res->claim_finished_twice, res->first_claim);
        return "fail";
    }
    if (res->late_grants > 0) {
        snprintf(why, len,
                 "%" PRIu64 " acquisitions returned success after their validity deadline "
                 "(first: %s)",
                 res->late_grants, res->first_late);
        return "fail";
    }
    if (res->state_held_late > 0) {
        snprintf(why, len, "a holder was told it held a lock it could no longer hold (%s)",
                 res->first_late);
        return "fail";
    }
    if (overlaps > 0) {
        snprintf(why, len, "%" PRIu64 " overlapping holdings (first: %s)", overlaps,
                 res->first_overlap);
        return "fail";
    }
    if (res->loss_late > 0) {
        snprintf(why, len,
                 "%" PRIu64 " holders cut off from the servers were declared lost only "
                 "after their lease had run out there, or never told (first: %s)",
                 res->loss_late, res->first_loss_late);
        return "fail";
    }
    if (fencing && (dups || regressions)) {
        snprintf(why, len, "tokens not strictly increasing (%s)", res->first_token);
        return "fail";
    }
    if (fencing && m->fencing && stale > 0) {
        snprintf(why, len, "%" PRIu64 " stale writes accepted despite fencing (first: %s)",
                 stale, res->first_stale);
        return "fail";
    }
    bool explained = res->stale_accepted > 0 && stale == 0;
    if (fencing && m->fencing && res->lost_increments != 0 && !explained) {
        snprintf(why, len, "%" PRId64 " lost increments (final value %" PRId64 ", %" PRIu64
                           " accepted writes)",
                 res->lost_increments, res->final_value, res->writes_accepted);
        return "fail";
    }
    if (res->overlaps_expected || (fencing && (res->token_dups_expected ||
                                               res->token_regressions_expected)) ||
        (fencing && m->fencing && res->stale_accepted_expected)) {
        snprintf(why, len,
                 "after a loss of the lock service's data beyond what the backend claims: %" PRIu64
                 " overlapping holdings, %" PRIu64 " token regressions, %" PRIu64
                 " repeated tokens, %" PRIu64 " stale writes accepted",
                 res->overlaps_expected, res->token_regressions_expected,
                 res->token_dups_expected, res->stale_accepted_expected);
        return "expected-violation";
    }
    return "pass";
}
