/* SPDX-License-Identifier: MIT */
/*
 * fuzz_http.c — libFuzzer target for the etcd backend's reader of HTTP/1.1
 * replies (reply.c): any bytes a server, or something that is not one,
 * could send on an http:// endpoint.
 *
 * The input (after its first byte) is read twice: whole, and cut into
 * pieces whose sizes the first byte picks. Both readings must agree on
 * everything (the outcome, the status, the body's bytes, whether the
 * connection ends), since a reply arrives in whatever pieces the network
 * makes; a body read by Content-Length must be exactly that long (but
 * for 204 and 304, which have none).
 */
#include <string.h>

#include "fuzz.h"

#include "backends/etcd/ec_json.h"

typedef struct sink_buf {
    char data[8192];
    size_t len;
    uint64_t total;
} sink_buf;

static bool sink(void *arg, const char *data, size_t n)
{
    sink_buf *b = arg;
    size_t keep = n < sizeof b->data - b->len ? n : sizeof b->data - b->len;
    memcpy(b->data + b->len, data, keep);
    b->len += keep;
    b->total += n;
    return b->total <= 1u << 20; /* (the backend's body stops at EC_REPLY_MAX) */
}

typedef struct outcome {
    int rc;
    size_t used;
    ec_reply r;
    sink_buf body;
} outcome;

static void read_reply(const uint8_t *data, size_t size, unsigned piece, outcome *o)
{
    memset(o, 0, sizeof *o);
    ec_reply_init(&o->r);
    o->rc = EC_REPLY_MORE;
    size_t off = 0;
    unsigned step = 0;
    while (off < size && o->rc == EC_REPLY_MORE) {
        /* pieces of 1..piece bytes, varying */
        size_t n = piece ? 1 + (step++ * 7 + off) % piece : size - off;
        if (n > size - off)
            n = size - off;
        size_t used = 0;
        o->rc = ec_reply_feed(&o->r, (const char *)data + off, n, &used, sink, &o->body);
        CHECK(used <= n);
        CHECK(o->rc == EC_REPLY_MORE ? used == n : 1);
        off += used;
        o->used = off;
        if (used < n)
            break;
    }
    if (o->rc == EC_REPLY_MORE)
        o->rc = ec_reply_eof(&o->r);
    CHECK(o->rc != EC_REPLY_MORE);
    CHECK(o->rc == o->r.result);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 1)
        return 0;
    unsigned piece = data[0] % 64;
    static outcome whole, cut;
    read_reply(data + 1, size - 1, 0, &whole);
    read_reply(data + 1, size - 1, piece ? piece : 1, &cut);
    CHECK(whole.rc == cut.rc);
    CHECK(whole.used == cut.used);
    CHECK(whole.body.total == cut.body.total);
    CHECK(whole.body.len == cut.body.len && memcmp(whole.body.data, cut.body.data, whole.body.len) == 0);
    if (whole.rc == EC_REPLY_DONE || whole.rc == EC_REPLY_SINK) {
        CHECK(whole.r.status == cut.r.status && whole.r.close == cut.r.close);
        CHECK(whole.r.status >= 200 && whole.r.status <= 999);
    }
    if (whole.rc == EC_REPLY_DONE && whole.r.has_len && !whole.r.chunked &&
        whole.r.status != 204 && whole.r.status != 304) /* (those have no body) */
        CHECK(whole.body.total == whole.r.length);
    if (whole.rc == EC_REPLY_BAD)
        CHECK(whole.r.why[0] != '\0');
    return 0;
}
