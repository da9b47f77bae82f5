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

static int cmp_u64(const void *a, const void *b)
{
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return (x > y) - (x < y);
}

typedef struct window {
    int64_t start, end; /* end: INT64_MAX while open */
    int worker;
    uint64_t token;
} window;

typedef struct wstate {
    int worker;
    int64_t invoked;  /* last acquire invocation */
    long open;        /* index of the open window, -1 */
} wstate;

typedef struct checker {
    hist_result *res;
    const hist_meta *meta;
    window *win;
    size_t nwin;
    wstate *ws;
    size_t nws, capws;
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
    c->ws[c->nws] = (wstate){.worker = worker, .invoked = INT64_MIN, .open = -1};
    return &c->ws[c->nws++];
}

/* The latest a window can end: its validity deadline on lease backends. */
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
        while (hn > 0 && heap[0] <= w->start)
            pop_end(heap, &hn);
        if (hn > 0 && !res->first_overlap[0]) {
            /* name the earlier holder still open at this start */
            for (size_t j = i; j-- > 0;)
                if (c->win[j].end > w->start) {
                    snprintf(res->first_overlap, sizeof res->first_overlap,
                             "w=%d token=%" PRIu64 " acquired at %" PRId64
                             " while w=%d (token=%" PRIu64 ", since %" PRId64 ") still held it",
                             w->worker, w->token, w->start, c->win[j].worker, c->win[j].token,
                             c->win[j].start);
                    break;
                }
        }
        res->overlaps += hn;
        push_end(heap, &hn, w->end);
    }
    free(heap);
    return 0;
}

static int check_tokens(checker *c)
{
    hist_result *res = c->res;
    if (c->nwin == 0)
        return 0;
    uint64_t *t = malloc(c->nwin * sizeof *t);
    if (!t)
        return -1;
    for (size_t i = 0; i < c->nwin; i++) {
        t[i] = c->win[i].token;
        if (i > 0 && t[i] <= t[i - 1]) {
            res->token_regressions++;
            if (!res->first_token[0])
                snprintf(res->first_token, sizeof res->first_token,
                         "w=%d got token %" PRIu64 " at %" PRId64
                         ", not above the previous acquisition's %" PRIu64 " (w=%d)",
                         c->win[i].worker, t[i], c->win[i].start, t[i - 1], c->win[i - 1].worker);
        }
    }
    qsort(t, c->nwin, sizeof *t, cmp_u64);
    for (size_t i = 1; i < c->nwin; i++)
        if (t[i] == t[i - 1]) {
            res->token_dups++;
            if (!res->first_token[0])
                snprintf(res->first_token, sizeof res->first_token,
                         "token %" PRIu64 " was issued more than once", t[i]);
        }
    free(t);
    return 0;
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
    int64_t last_accepted_value = 0;
    uint64_t pending_takeover = 0;
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
            break;
        case H_ACQUIRED:
            res->sections++;
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
            c.win[c.nwin] = (window){.start = e->t, .end = deadline_of(&c, w, e->t),
                                     .worker = e->worker, .token = e->token};
            w->open = (long)c.nwin++;
            res->takeovers += pending_takeover;
            pending_takeover = 0;
            last_acq_t = e->t;
            last_acq_worker = e->worker;
            break;
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
            if (w)
                close_window(&c, w, e->t);
            break;
        case H_RELEASE:
            if (w)
                close_window(&c, w, e->t);
            break;
        case H_PAUSED:
            res->pauses++;
            break;
        case H_RESUMED:
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
                if (accepted)
                    res->stale_accepted++;
                else
                    res->stale_rejected++;
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
    if (rc == 0)
        rc = count_overlaps(&c);
    if (rc == 0)
        rc = check_tokens(&c);
    if (!res->has_final)
        res->final_value = last_accepted_value;
    /* Each accepted write is value read + 1: every write that did not add
     * to the final value overwrote another one. */
    res->lost_increments = (int64_t)res->writes_accepted - res->final_value;
    free(c.win);
    free(c.ws);
    return rc;
}

const char *hist_verdict(const hist_result *res, const hist_meta *m, char *why, size_t len)
{
    bool fencing = (m->caps & DLOCK_CAP_FENCING) != 0;
    why[0] = '\0';
    if (res->overlaps > 0) {
        snprintf(why, len, "%" PRIu64 " overlapping holdings (first: %s)", res->overlaps,
                 res->first_overlap);
        return "fail";
    }
    if (fencing && (res->token_dups || res->token_regressions)) {
        snprintf(why, len, "tokens not strictly increasing (%s)", res->first_token);
        return "fail";
    }
    if (fencing && m->fencing && res->stale_accepted > 0) {
        snprintf(why, len, "%" PRIu64 " stale writes accepted despite fencing (first: %s)",
                 res->stale_accepted, res->first_stale);
        return "fail";
    }
    if (fencing && m->fencing && res->lost_increments != 0) {
        snprintf(why, len, "%" PRId64 " lost increments (final value %" PRId64 ", %" PRIu64
                           " accepted writes)",
                 res->lost_increments, res->final_value, res->writes_accepted);
        return "fail";
    }
    return "pass";
}
