/* SPDX-License-Identifier: MIT */
/*
 * claim.c — claims (dlock once): the rules, once for every backend. A
 * backend keeps only a record's bytes with an expiry (record_get/put/del);
 * its format is claim_rec.c's. One runner at a time is the exclusive lock
 * on the key's name; the record says what happened across runners. Every
 * write is conditional on the version read just before it: a lock lost
 * between the two cannot let a late runner write over the next one's.
 */
#include "claim_rec.h"
#include "internal.h"

#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define DAY_MS (24LL * 3600 * 1000)

struct dlock_claim {
    dlock_lock *l;  /* begin's lock (NULL: inspect's) */
    bool open;      /* RUN, neither finished nor abandoned */
    dlock_claim_state_t state;
    long long retain_ms;
    dl_claim_rec rec;
};

void dlock_claim_opts_init(dlock_claim_opts *opts)
{
    if (opts)
        memset(opts, 0, sizeof *opts);
}

/* Why a backend keeps no claims, on the lock or else the client. */
static int no_claims(dlock_client *c, dlock_lock *l)
{
    const char *why = c->be->no_claims ? c->be->no_claims : "it has no place for claim records";
    if (l)
        return dl_lock_err(l, DLOCK_ENOTSUP, "%s cannot keep a claim: %s", c->be->name, why);
    return dl_client_err(c, DLOCK_ENOTSUP, "%s cannot keep a claim: %s", c->be->name, why);
}

static bool has_records(const dlock_client *c)
{
    return c->ops && c->ops->record_get && c->ops->record_put && c->ops->record_del;
}

/* A backend's failure (message on the client, this thread) onto the lock. */
static int onto_lock(dlock_lock *l, int rc)
{
    return dl_lock_err(l, rc, "%s", dlock_client_errmsg(l->c));
}

/* Read name's record into *r and its version into *ver: 1 found, 0 none
 * (*ver 0), else the error (on the client). */
static int rec_read(dlock_client *c, const char *name, dl_claim_rec *r, uint64_t *ver)
{
    char *val = NULL;
    size_t len = 0;
    *ver = 0;
    int rc = c->ops->record_get(c, name, &val, &len, ver);
    if (rc)
        return rc;
    if (!val)
        return 0;
    char why[200];
    rc = dl_claim_rec_parse(val, len, r, why, sizeof why);
    free(val);
    if (rc == DLOCK_EPROTO)
        return dl_client_err(c, rc, "claim \"%s\": its record is not one dlock writes: %s (%s)",
                             name, why, c->url->redacted);
    if (rc)
        return dl_client_err(c, rc, "claim \"%s\": out of memory", name);
    return 1;
}

/* Write r where the record is still version ver: 0, DL_RECORD_CHANGED, or
 * the error (on the client). */
static int rec_write(dlock_client *c, const char *name, const dl_claim_rec *r, long long ttl_ms,
                     uint64_t ver)
{
    if (ttl_ms <= 0) /* (every backend's record_put may count on it) */
        return dl_client_err(c, DLOCK_EINVAL, "claim \"%s\": a record's time must be positive",
                             name);
    char *buf;
    size_t len;
    int rc = dl_claim_rec_format(r, &buf, &len);
    if (rc)
        return dl_client_err(c, rc, "claim \"%s\": cannot make its record", name);
    rc = c->ops->record_put(c, name, buf, len, ttl_ms, ver);
    free(buf);
    return rc;
}

static long long running_ttl_ms(const dlock_claim *cl)
{
    return cl->retain_ms > DAY_MS ? cl->retain_ms : DAY_MS;
}

int dlock_claim_begin(dlock_lock *l, const dlock_claim_opts *opts, int timeout_ms,
                      dlock_claim **out)
{
    if (!out)
        return l ? dl_lock_err(l, DLOCK_EINVAL, "dlock_claim_begin: out is NULL") : DLOCK_EINVAL;
    *out = NULL;
    if (!l)
        return DLOCK_EINVAL;
    dlock_claim_opts dflt;
    if (!opts) {
        dlock_claim_opts_init(&dflt);
        opts = &dflt;
    }
    if (l->opts.kind != DLOCK_EXCLUSIVE)
        return dl_lock_err(l, DLOCK_EINVAL, "claim \"%s\": needs an exclusive lock handle",
                           l->name);
    if (dlock_held_count(l) != 0)
        return dl_lock_err(l, DLOCK_EINVAL, "claim \"%s\": the lock handle is already held",
                           l->name);
    if (opts->retain_ms < 0)
        return dl_lock_err(l, DLOCK_EINVAL, "claim \"%s\": retain_ms is negative", l->name);
    if (opts->fingerprint && !dl_claim_fingerprint_ok(opts->fingerprint))
        return dl_lock_err(l, DLOCK_EINVAL,
                           "claim \"%s\": a fingerprint is 1..%d bytes of printable ASCII",
                           l->name, DLOCK_FINGERPRINT_MAX);
    if (l->detached || !l->c)
        return dlock_acquire(l, timeout_ms); /* says why, in its words */
    dlock_client *c = l->c;
    if (!has_records(c))
        return no_claims(c, l);
    dlock_claim *cl = calloc(1, sizeof *cl);
    if (!cl)
        return dl_lock_err(l, DLOCK_ENOMEM, "claim \"%s\": out of memory", l->name);
    cl->l = l;
    cl->retain_ms = opts->retain_ms ? opts->retain_ms : DAY_MS;
    int rc = dlock_acquire(l, timeout_ms);
    if (rc) {
        free(cl);
        return rc;
    }
    dl_claim_rec old;
    uint64_t ver;
    int found = rec_read(c, l->name, &old, &ver);
    if (found < 0) {
        rc = onto_lock(l, found);
        goto fail;
    }
    if (found && opts->fingerprint && old.fingerprint[0] &&
        strcmp(old.fingerprint, opts->fingerprint) != 0) {
        rc = dl_lock_err(l, DLOCK_ECONFLICT,
                         "claim \"%s\": fingerprint \"%s\" differs from the recorded \"%s\" (the "
                         "same key for another request?)",
                         l->name, opts->fingerprint, old.fingerprint);
        dl_claim_rec_free(&old);
        goto fail;
    }
    if (found && old.state == DL_REC_DONE && !(opts->retry_failed && old.status != 0)) {
        /* It ran: its outcome, and the lock back at once. */
        cl->rec = old;
        cl->state = DLOCK_CLAIM_DONE;
        rc = dlock_release(l);
        if (rc && rc != DLOCK_ELOST) {
            dlock_claim_free(cl);
            return rc;
        }
        *out = cl;
        return 0;
    }
    /* Ours to run: the first attempt, or the next after a failure, an
     * abandon or a runner that died (its record still says running while
     * we hold the lock). */
    cl->rec.state = DL_REC_RUNNING;
    cl->rec.attempt = found ? (old.attempt < UINT_MAX ? old.attempt + 1 : old.attempt) : 1;
    cl->rec.started_ms = dl_realtime_ms();
    dl_self_desc(cl->rec.by, sizeof cl->rec.by);
    snprintf(cl->rec.owner, sizeof cl->rec.owner, "%s", l->owner);
    cl->rec.token = dlock_token(l);
    /* A caller without a fingerprint keeps the recorded one: the next
     * caller with one is still compared to it. */
    snprintf(cl->rec.fingerprint, sizeof cl->rec.fingerprint, "%s",
             opts->fingerprint ? opts->fingerprint : found ? old.fingerprint : "");
    if (found)
        dl_claim_rec_free(&old);
    /* Conditional although the lock is held: it costs nothing, and a lock
     * lost just now cannot let us write over the next runner's record. */
    rc = rec_write(c, l->name, &cl->rec, running_ttl_ms(cl), ver);
    if (rc == DL_RECORD_CHANGED) {
        rc = dl_lock_err(l, DLOCK_ELOST,
                         "claim \"%s\": its record changed while attempt %u began (the lock "
                         "was lost, or it was forgotten); nothing run",
                         l->name, cl->rec.attempt);
        goto fail;
    }
    if (rc) {
        rc = onto_lock(l, rc);
        goto fail;
    }
    cl->state = DLOCK_CLAIM_RUN;
    cl->open = true;
    *out = cl;
    return 0;
fail:
    (void)dlock_release(l); /* the reason stays rc's: release only sets one on failure */
    dl_claim_rec_free(&cl->rec);
    free(cl);
    return rc;
}

static int not_ours(dlock_claim *cl)
{
    return dl_lock_err(cl->l, DLOCK_ELOST,
                       "claim \"%s\": its record is no longer attempt %u's (forgotten, or "
                       "another runner started); nothing recorded",
                       cl->l->name, cl->rec.attempt);
}

/* Whether the claim is still this attempt's: the lock held and the record
 * the one begin wrote, whose version goes in *ver for the write that
 * follows. 0, or DLOCK_ELOST (or a read's error) on the lock. */
static int still_ours(dlock_claim *cl, uint64_t *ver)
{
    dlock_lock *l = cl->l;
    if (dlock_state(l) != DLOCK_STATE_HELD)
        return dl_lock_err(l, DLOCK_ELOST,
                           "claim \"%s\": the lock was lost while attempt %u ran; nothing "
                           "recorded (another runner may have started)",
                           l->name, cl->rec.attempt);
    dl_claim_rec now;
    int found = rec_read(l->c, l->name, &now, ver);
    if (found < 0)
        return onto_lock(l, found);
    bool same = found && now.state == DL_REC_RUNNING && now.attempt == cl->rec.attempt &&
                strcmp(now.owner, cl->rec.owner) == 0;
    if (found)
        dl_claim_rec_free(&now);
    return same ? 0 : not_ours(cl);
}

/* Write the record's end (done or abandoned) and release the lock. */
static int end_claim(dlock_claim *cl, long long ttl_ms)
{
    dlock_lock *l = cl->l;
    uint64_t ver;
    int rc = still_ours(cl, &ver);
    /* Only over the version just checked: a runner paused between the
     * check and the write past its lease finds the next attempt's record
     * there instead, and writes nothing. */
    if (rc == 0 && (rc = rec_write(l->c, l->name, &cl->rec, ttl_ms, ver)) != 0)
        rc = rc == DL_RECORD_CHANGED ? not_ours(cl) : onto_lock(l, rc);
    cl->open = false;
    if (rc) {
        (void)dlock_release(l);
        return rc;
    }
    /* Recorded while the record was still ours: a loss found only by the
     * release came after it. */
    int rel = dlock_release(l);
    return rel == DLOCK_ELOST ? 0 : rel;
}

int dlock_claim_finish(dlock_claim *cl, int status, const void *result, size_t len)
{
    if (!cl || !cl->l)
        return DLOCK_EINVAL;
    dlock_lock *l = cl->l;
    if (!cl->open)
        return dl_lock_err(l, DLOCK_EINVAL, "claim \"%s\": not running here", l->name);
    if (len > DLOCK_CLAIM_RESULT_MAX || (len && !result))
        return dl_lock_err(l, DLOCK_EINVAL, "claim \"%s\": a result of %zu bytes (at most %d)",
                           l->name, len, DLOCK_CLAIM_RESULT_MAX);
    char *copy = malloc(len + 1);
    if (!copy)
        return dl_lock_err(l, DLOCK_ENOMEM, "claim \"%s\": out of memory", l->name);
    if (len)
        memcpy(copy, result, len);
    copy[len] = '\0';
    dl_claim_rec_free(&cl->rec); /* a running record has no result */
    cl->rec.state = DL_REC_DONE;
    cl->rec.status = status;
    cl->rec.finished_ms = dl_realtime_ms();
    cl->rec.result = copy;
    cl->rec.result_len = len;
    int rc = end_claim(cl, cl->retain_ms);
    if (rc == 0)
        cl->state = DLOCK_CLAIM_DONE;
    return rc;
}

int dlock_claim_abandon(dlock_claim *cl)
{
    if (!cl || !cl->l)
        return DLOCK_EINVAL;
    if (!cl->open)
        return dl_lock_err(cl->l, DLOCK_EINVAL, "claim \"%s\": not running here", cl->l->name);
    cl->rec.state = DL_REC_ABANDONED;
    int rc = end_claim(cl, running_ttl_ms(cl));
    if (rc == 0)
        cl->state = DLOCK_CLAIM_ABANDONED;
    return rc;
}

void dlock_claim_free(dlock_claim *cl)
{
    if (!cl)
        return;
    if (cl->open && cl->l && dlock_held_count(cl->l) > 0)
        (void)dlock_release(cl->l); /* as a crash leaves it: still running */
    dl_claim_rec_free(&cl->rec);
    free(cl);
}

dlock_claim_state_t dlock_claim_state(const dlock_claim *cl)
{
    return cl ? cl->state : DLOCK_CLAIM_DONE;
}

unsigned dlock_claim_attempt(const dlock_claim *cl)
{
    return cl ? cl->rec.attempt : 0;
}

int dlock_claim_status(const dlock_claim *cl)
{
    return cl && cl->state == DLOCK_CLAIM_DONE ? cl->rec.status : 0;
}

const char *dlock_claim_result(const dlock_claim *cl, size_t *len)
{
    bool has = cl && cl->state == DLOCK_CLAIM_DONE && cl->rec.result;
    if (len)
        *len = has ? cl->rec.result_len : 0;
    return has ? cl->rec.result : "";
}

const char *dlock_claim_by(const dlock_claim *cl)
{
    return cl ? cl->rec.by : "";
}

long long dlock_claim_started_ms(const dlock_claim *cl)
{
    return cl ? cl->rec.started_ms : 0;
}

long long dlock_claim_finished_ms(const dlock_claim *cl)
{
    return cl && cl->rec.state == DL_REC_DONE ? cl->rec.finished_ms : 0;
}

const char *dlock_claim_fingerprint(const dlock_claim *cl)
{
    return cl ? cl->rec.fingerprint : "";
}

/* A client call's checks: a usable client, a valid key, records here. */
static int client_check(dlock_client *c, const char *key)
{
    if (!c || !key)
        return DLOCK_EINVAL;
    char why[160];
    if (dlock_name_valid(key, why, sizeof why) != 0)
        return dl_client_err(c, DLOCK_ENAME, "claim \"%.200s\": %s", key, why);
    if (!has_records(c))
        return no_claims(c, NULL);
    return 0;
}

int dlock_claim_inspect(dlock_client *c, const char *key, dlock_claim **out)
{
    if (!out)
        return DLOCK_EINVAL;
    *out = NULL;
    int rc = client_check(c, key);
    if (rc)
        return rc;
    dlock_claim *cl = calloc(1, sizeof *cl);
    if (!cl)
        return dl_client_err(c, DLOCK_ENOMEM, "claim \"%s\": out of memory", key);
    uint64_t ver;
    int found = rec_read(c, key, &cl->rec, &ver);
    if (found <= 0) {
        free(cl);
        return found < 0 ? found : dl_client_err(c, DLOCK_ENOENT, "no claim \"%s\"", key);
    }
    cl->state = cl->rec.state == DL_REC_DONE      ? DLOCK_CLAIM_DONE
                : cl->rec.state == DL_REC_RUNNING ? DLOCK_CLAIM_RUNNING
                                                  : DLOCK_CLAIM_ABANDONED;
    *out = cl;
    return 0;
}

int dlock_claim_forget(dlock_client *c, const char *key)
{
    int rc = client_check(c, key);
    if (rc)
        return rc;
    char *val = NULL;
    size_t len = 0;
    uint64_t ver;
    if ((rc = c->ops->record_get(c, key, &val, &len, &ver)) != 0)
        return rc;
    if (!val)
        return dl_client_err(c, DLOCK_ENOENT, "no claim \"%s\"", key);
    free(val);
    return c->ops->record_del(c, key);
}
