/* SPDX-License-Identifier: MIT */
/*
 * fuzz_reply.c — libFuzzer target for what dlock reads out of Redis replies.
 *
 * The input is a byte stream as a server would send it (RESP); hiredis's
 * reader (a well-fuzzed library), bounded as dlock bounds it, turns it into
 * reply objects, and every one
 * of them goes through each of our interpreters: the lock script's replies
 * (pair, hand-over, info, break), Sentinel's master address, CLUSTER SLOTS
 * and MOVED/ASK redirections. None may crash, and what they accept must hold
 * together: ports in range, slots mapped to known nodes, strings terminated.
 * The same bytes are also read as a key= template (check_template).
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "fuzz.h"
#include "backends/redis/redis_cluster.h"


/* What conn.c, cluster.c and support/wait.c use of the core, and the
 * embedded script. */
const char rd_lock_script[] = "return 0";
const char rd_lock_script_sha[] = "0000000000000000000000000000000000000000";
const char rd_lock_script_library[] = "#!lua name=dlock_fuzz\n";
const char rd_lock_script_function[] = "dlock_fuzz";
int64_t dl_now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000000LL + ts.tv_nsec;
}
int dl_ms_left(int64_t deadline_ns)
{
    int64_t left = deadline_ns - dl_now_ns();
    return left <= 0 ? 0 : (int)(left / 1000000 + 1);
}
int dl_random(void *buf, size_t n)
{
    memset(buf, 0, n);
    return 0;
}
int dl_op_timeout_ms(const dlock_lock *l, int op_timeout_ms)
{
    (void)l;
    return op_timeout_ms;
}
int dl_lock_err(dlock_lock *l, int code, const char *fmt, ...)
{
    (void)l, (void)fmt;
    return code;
}

static void check_reply(rcluster *cl, const redisReply *r)
{
    char desc[160];
    rd_reply_desc(r, desc, sizeof desc);
    CHECK(strlen(desc) < sizeof desc);
    for (const char *d = desc; *d; d++)
        CHECK(*d >= 0x20 && *d < 0x7f); /* printable, one line */
    long long flag, value;
    if (rd_pair_reply(r, &flag, &value))
        CHECK(r->elements == 2);
    long long token;
    if (rd_handoff_reply(r, &token))
        CHECK(token > 0);
    rd_info f;
    if (rd_info_reply(r, &f) == 0)
        CHECK(strlen(f.owner) + strlen(f.holder) + strlen(f.value) < 3 * (1u << 30));
    char host[256];
    int port;
    if (rd_addr_reply(r, host, sizeof host, &port) == 0)
        CHECK(port >= 1 && port <= 65535 && strlen(host) > 0 && strlen(host) < sizeof host);
    dlock_info info;
    memset(&info, 0, sizeof info);
    info.held = info.holders = -1;
    if (rd_break_reply(r, &info) >= 0)
        CHECK(memchr(info.holder, '\0', sizeof info.holder) != NULL);
    if (rd_script_missing(r))
        CHECK(r->type == REDIS_REPLY_ERROR);
    char what[64];
    if (rd_alien_reply(r, what, sizeof what))
        CHECK(r->type == REDIS_REPLY_ERROR && strlen(what) < sizeof what);
    int ranges = rd_cluster_apply_slots(cl, r, "127.0.0.1");
    CHECK(ranges < 0 || (size_t)ranges <= r->elements);
    if (ranges > 0) {
        /* every slot with a node routes to one with a valid port */
        char key[32];
        for (int s = 0; s < 64; s++) {
            snprintf(key, sizeof key, "{k%d}", s);
            rnode *n = rd_cluster_node(cl, key);
            CHECK(!n || (n->port >= 1 && n->port <= 65535));
        }
    }
    if ((r->type == REDIS_REPLY_ERROR || r->type == REDIS_REPLY_STATUS) && r->str) {
        rnode *n = rd_cluster_redirect(cl, r->str, r->str[0] == 'M');
        CHECK(!n || (n->port >= 1 && n->port <= 65535 && n->host[0]));
    }
    for (size_t i = 0; r->type == REDIS_REPLY_ARRAY && i < r->elements && i < 8; i++)
        check_reply(cl, r->element[i]);
}

/* The input as a key= template (it comes from a URL): whatever
 * rd_template_check accepts makes keys that read back to their names,
 * keys beside them in their slot that are never a lock of the template,
 * and a bounded SCAN pattern. */
static void check_template(const uint8_t *data, size_t size)
{
    char t[RD_TEMPLATE_MAX + 2], err[512];
    size_t n = size < sizeof t - 1 ? size : sizeof t - 1;
    memcpy(t, data, n);
    t[n] = '\0';
    if (rd_template_check(t, err, sizeof err) != 0) {
        CHECK(err[0] && !strchr(err, '\n'));
        return;
    }
    CHECK(strlen(t) <= RD_TEMPLATE_MAX && strstr(t, "{name}"));
    static const char *const names[] = {"x", "}x", "a{b}c", "lock", "}", "{", "*?[]\\"};
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++) {
        char key[RD_TEMPLATE_MAX + 64], name[64], beside[RD_TEMPLATE_MAX + 128];
        CHECK(rd_template_key(t, names[i], key, sizeof key) == 0);
        CHECK(rd_template_name(t, key, strlen(key), name, sizeof name) == 0);
        CHECK(strcmp(name, names[i]) == 0);
        CHECK(rd_beside_key(key, "token", beside, sizeof beside));
        CHECK(rd_key_slot(beside, strlen(beside)) == rd_key_slot(key, strlen(key)));
        CHECK(rd_template_name(t, beside, strlen(beside), name, sizeof name) != 0 ||
              strchr(name, '/'));
        char pattern[2 * (RD_TEMPLATE_MAX + 64) + 8];
        rd_template_pattern(t, names[i], pattern, sizeof pattern);
        CHECK(strlen(pattern) < sizeof pattern);
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    check_template(data, size);
    redisReader *rd = redisReaderCreate();
    rd_bound_reader(rd); /* as every dlock connection's */
    dl_host seed = {.host = (char *)"127.0.0.1", .port = 7000};
    rcluster *cl = rd_cluster_new(&seed, 1);
    if (!rd || !cl)
        abort();
    redisReaderFeed(rd, (const char *)data, size);
    for (int i = 0; i < 16; i++) {
        void *reply = NULL;
        if (redisReaderGetReply(rd, &reply) != REDIS_OK || !reply)
            break;
        check_reply(cl, reply);
        freeReplyObject(reply);
    }
    rd_cluster_free(cl);
    redisReaderFree(rd);
    return 0;
}
