/* SPDX-License-Identifier: MIT */
/*
 * records.c — claim records (dlock once) on Redis, one master (found
 * directly, through Sentinel, or per slot in a cluster): a string with its
 * own expiry: a hash {v = the bytes, ver = a random version, new with each
 * write}, written by the lock script's recput only where ver is still the
 * one the writer read (one atomic step), then PEXPIRE. The key shares the lock's hash tag, so
 * that in a cluster it lives in the lock's slot, and a suffix no lock key
 * has: dlock:{NAME}:once beside dlock:{NAME}:lock; under key=TEMPLATE,
 * KEY/dlock-once beside the template's key (no name holds '/', so it is
 * never a lock). Durable only as far as the server's persistence goes: a
 * restart without it forgets every claim.
 */
#include "redis_master.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#ifdef DLOCK_HAVE_REDIS

/* Bigger than any record the core writes: a bound on what is read back. */
#define REC_MAX (DLOCK_CLAIM_RESULT_MAX + 4096)

static int record_key(dlock_client *cl, const char *name, char *buf, size_t len)
{
    rclient *rc = rc_of(cl);
    int bad;
    if (rc->key_template) {
        char lock[DL_NAME_MAX + RD_TEMPLATE_MAX + 32];
        bad = rd_template_key(rc->key_template, name, lock, sizeof lock) != 0 ||
              !rd_beside_key(lock, "once", buf, len);
    } else {
        bad = rd_name_key(name, "once", buf, len) != 0;
    }
    return bad ? dl_client_err(cl, DLOCK_ENAME, "claim \"%s\": name too long for a key", name)
               : 0;
}

/* The record's key into key, and c a plain command verb on it. */
static int record_cmd(dlock_client *cl, const char *name, char *key, size_t klen, rcmd *c,
                      const char *verb)
{
    int e = record_key(cl, name, key, klen);
    if (e)
        return e;
    rcmd_init(c);
    rcmd_add(c, verb);
    rcmd_add(c, key);
    return 0;
}

/* One command on the key's master; *r its reply (free it) or the error. */
static int record_call(dlock_client *cl, const char *name, const char *key, const rcmd *c,
                       redisReply **r)
{
    rclient *rc = rc_of(cl);
    char err[512];
    rcall how = {.l = NULL, .timeout_ms = rc->cf.op_timeout_ms, .cancel_fd = -1, .retry = true};
    int x = rd_run(rc, key, c, 1, r, &how, err, sizeof err);
    if (x != RD_OK)
        return dl_client_err(cl, x == RD_EPROTO ? DLOCK_EPROTO : DLOCK_EUNREACHABLE,
                             "claim \"%s\": %s (%s)", name, err, cl->url->redacted);
    if ((*r)->type == REDIS_REPLY_ERROR) {
        int rcode = rd_client_bad_reply(cl, "claim", name, "a reply, not an error", *r);
        freeReplyObject(*r);
        return rcode;
    }
    return 0;
}

int rd_record_get(dlock_client *cl, const char *name, char **val, size_t *len,
                  uint64_t *ver)
{
    *val = NULL;
    *len = 0;
    *ver = 0;
    char key[DL_NAME_MAX + RD_TEMPLATE_MAX + 64];
    rcmd c;
    int e = record_cmd(cl, name, key, sizeof key, &c, "HMGET");
    if (e)
        return e;
    rcmd_add(&c, "v");
    rcmd_add(&c, "ver");
    redisReply *all;
    if ((e = record_call(cl, name, key, &c, &all)) != 0)
        return e;
    redisReply *r = all->type == REDIS_REPLY_ARRAY && all->elements == 2 ? all->element[0] : NULL;
    redisReply *vr = r ? all->element[1] : NULL;
    if (r && r->type == REDIS_REPLY_NIL && vr->type == REDIS_REPLY_NIL) {
        freeReplyObject(all);
        return 0; /* none, or its PX ran out */
    }
    char *end = NULL;
    uint64_t v = 0;
    if (vr && vr->type == REDIS_REPLY_STRING && vr->len > 0 && vr->len < 24) {
        char digits[24];
        memcpy(digits, vr->str, vr->len);
        digits[vr->len] = '\0';
        v = strtoull(digits, &end, 10);
        if (*end)
            v = 0;
    }
    if (!r || r->type != REDIS_REPLY_STRING || r->len > REC_MAX || v == 0) {
        e = rd_client_bad_reply(cl, "claim", name,
                                "a string of at most 69632 bytes and a version", all);
        freeReplyObject(all);
        return e;
    }
    char *b = malloc(r->len + 1);
    if (!b) {
        freeReplyObject(all);
        return dl_client_err(cl, DLOCK_ENOMEM, "claim \"%s\": out of memory", name);
    }
    memcpy(b, r->str, r->len);
    b[r->len] = '\0';
    *val = b;
    *len = r->len;
    *ver = v;
    freeReplyObject(all);
    return 0;
}

int rd_record_put(dlock_client *cl, const char *name, const char *val, size_t len,
                  int64_t ttl_ms, uint64_t ver)
{
    char key[DL_NAME_MAX + RD_TEMPLATE_MAX + 64], nb[24], was[24], now[24];
    int e = record_key(cl, name, key, sizeof key);
    if (e)
        return e;
    /* random, not a counter: a record deleted and made again never comes
     * back to a version a stale writer still holds */
    uint64_t next = 0;
    while (next == 0)
        if (dl_random(&next, sizeof next) != 0)
            return dl_client_err(cl, DLOCK_EIO, "cannot read random bytes for a record");
    snprintf(was, sizeof was, "%" PRIu64, ver);
    snprintf(now, sizeof now, "%" PRIu64, next);
    rcmd c;
    rd_script_cmd(&c, &rc_of(cl)->cf, key, "recput");
    rcmd_add(&c, was);
    rcmd_add(&c, now);
    rcmd_addll(&c, ttl_ms > 0 ? ttl_ms : 1, nb);
    rcmd_addlen(&c, val, len);
    redisReply *r;
    if ((e = record_call(cl, name, key, &c, &r)) != 0)
        return e;
    if (r->type != REDIS_REPLY_INTEGER || (r->integer != 0 && r->integer != 1))
        e = rd_client_bad_reply(cl, "claim", name, "1 or 0", r);
    else if (r->integer == 0)
        e = DL_RECORD_CHANGED;
    freeReplyObject(r);
    return e;
}

int rd_record_del(dlock_client *cl, const char *name)
{
    char key[DL_NAME_MAX + RD_TEMPLATE_MAX + 64];
    rcmd c;
    int e = record_cmd(cl, name, key, sizeof key, &c, "DEL");
    if (e)
        return e;
    redisReply *r;
    if ((e = record_call(cl, name, key, &c, &r)) != 0)
        return e;
    if (r->type != REDIS_REPLY_INTEGER)
        e = rd_client_bad_reply(cl, "claim", name, "an integer", r);
    freeReplyObject(r);
    return e;
}

#endif /* DLOCK_HAVE_REDIS */
