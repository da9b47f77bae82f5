/* SPDX-License-Identifier: MIT */
/*
 * redis_min.c — one worker of bench/peers/peer_bench.py ("redis-c"): the
 * least a C program needs to run dlock's own Redis protocol, as the floor
 * dlock's Redis backend is measured against (issue 24: its 8-waiter
 * hand-over within 1.1 x of this). The same lock script (src/backends/redis/lock.lua,
 * loaded as a function library of its own name), the same calls: "acq" (a
 * grant, or a place in the FIFO queue), BLPOP on the waiter's list (where
 * the release hands it the lock and its token), "rel". Nothing else of a
 * client: no renewal, loss telling, deadlines, cancel, retries, cluster
 * routing or pools — hiredis's blocking calls on one connection.
 *
 * Worker protocol (as CuratorPeer.java): see worker.h.
 *
 *   redis_min HOST PORT LOCK_NAME HOLD_US LOCK_LUA
 */
#include <hiredis/hiredis.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "worker.h"

#define FN "dlock_peer_min"   /* the library's one function */
#define TTL_MS "30000"        /* as redis-py's Lock(timeout=30) */
#define WAIT_LEASE_MS "3000"  /* a queued waiter's registration, as dlock's */

static void die(const char *what, redisContext *c, redisReply *r)
{
    fprintf(stderr, "error: %s: %s\n", what,
            r && r->type == REDIS_REPLY_ERROR ? r->str : c && c->err ? c->errstr : "unexpected reply");
    exit(1);
}

/* The file's text as a function library named FN. */
static char *library(const char *path)
{
    FILE *f = fopen(path, "r");
    if (!f) {
        perror(path);
        exit(1);
    }
    static const char head[] = "#!lua name=" FN "\n", tail[] = "\nredis.register_function('" FN "', main)\n";
    size_t cap = 1 << 16, n = strlen(head);
    char *s = malloc(cap);
    if (!s)
        exit(1);
    memcpy(s, head, n);
    size_t got;
    while ((got = fread(s + n, 1, cap - n - sizeof tail, f)) > 0) {
        n += got;
        if (cap - n - sizeof tail < 4096) {
            char *t = realloc(s, cap *= 2);
            if (!t)
                exit(1);
            s = t;
        }
    }
    fclose(f);
    memcpy(s + n, tail, sizeof tail);
    return s;
}

/* What a section needs: the connection and the keys. */
typedef struct {
    redisContext *c;
    const char *key, *wlist, *owner, *holder;
} lock_ctx;

static void acquire(void *arg)
{
    lock_ctx *x = arg;
    redisReply *r = redisCommand(x->c, "FCALL " FN " 1 %s acq %s x " TTL_MS " 1 1 %s " WAIT_LEASE_MS,
                                 x->key, x->owner, x->holder);
    if (!r || r->type != REDIS_REPLY_ARRAY || r->elements != 2)
        die("acq", x->c, r);
    int granted = r->element[0]->integer == 1;
    freeReplyObject(r);
    while (!granted) { /* queued: the release hands the lock over on wlist */
        r = redisCommand(x->c, "BLPOP %s 1", x->wlist);
        if (!r)
            die("BLPOP", x->c, r);
        granted = r->type == REDIS_REPLY_ARRAY;
        freeReplyObject(r);
        if (granted)
            break;
        r = redisCommand(x->c, "FCALL " FN " 1 %s wait %s x " TTL_MS " 1 1 %s " WAIT_LEASE_MS,
                         x->key, x->owner, x->holder);
        if (!r || r->type != REDIS_REPLY_ARRAY || r->elements != 2)
            die("wait", x->c, r);
        granted = r->element[0]->integer == 1;
        freeReplyObject(r);
    }
}

static void release(void *arg)
{
    lock_ctx *x = arg;
    redisReply *r = redisCommand(x->c, "FCALL " FN " 1 %s rel %s x", x->key, x->owner);
    if (!r || r->type != REDIS_REPLY_INTEGER || r->integer != 1)
        die("rel", x->c, r);
    freeReplyObject(r);
}

int main(int argc, char **argv)
{
    if (argc != 6) {
        fprintf(stderr, "usage: redis_min HOST PORT LOCK_NAME HOLD_US LOCK_LUA\n");
        return 64;
    }
    int64_t hold_ns = strtoll(argv[4], NULL, 10) * 1000;
    char key[600], wlist[700], owner[64], holder[128], host[64];
    snprintf(key, sizeof key, "dlock:{%s}:lock", argv[3]);
    /* hex, as dlock's owner ids: the script refuses a holder string it
     * could not have written (another library's) */
    snprintf(owner, sizeof owner, "%08lx", (unsigned long)getpid());
    snprintf(wlist, sizeof wlist, "dlock:{%s}:w:%s", argv[3], owner);
    if (gethostname(host, sizeof host) != 0)
        snprintf(host, sizeof host, "?");
    snprintf(holder, sizeof holder, "pid %ld on %s", (long)getpid(), host);
    redisContext *c = redisConnect(argv[1], atoi(argv[2]));
    if (!c || c->err)
        die("connect", c, NULL);
    char *lib = library(argv[5]);
    redisReply *r = redisCommand(c, "FUNCTION LOAD REPLACE %s", lib);
    if (!r || r->type == REDIS_REPLY_ERROR)
        die("FUNCTION LOAD", c, r);
    freeReplyObject(r);
    free(lib);
    lock_ctx x = {c, key, wlist, owner, holder};
    int rc = peer_run(hold_ns, acquire, release, &x);
    redisFree(c);
    return rc;
}
