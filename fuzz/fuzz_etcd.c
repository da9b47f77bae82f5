/* SPDX-License-Identifier: MIT */
/*
 * fuzz_etcd.c — libFuzzer target for what the etcd backend reads out of the
 * server: the JSON gateway's replies and watch streams (any bytes a server,
 * or something that is not etcd, could send), the keys and values in them.
 *
 * The input is fed in pieces to the stream reader (lines of JSON, the way a
 * watch arrives), read as a range reply whose queue must hold together as
 * the ZooKeeper target's does, as an error reply, and its bytes go through
 * base64 and back unchanged.
 */
#include <string.h>

#include "fuzz.h"

#include "backends/etcd/ec_json.h"

static void check_queue(const char *dir, const cJSON *reply)
{
    ec_entry *q = NULL;
    int n = ec_queue_of(reply, dir, false, &q);
    CHECK(n >= 0);
    int holders = 0;
    char held_kind = 0;
    for (int i = 0; i < n; i++) {
        CHECK(q[i].pos.kind == 'x' || q[i].pos.kind == 'r' || q[i].pos.kind == 's');
        CHECK(q[i].pos.permits >= 1 && q[i].pos.permits <= 4096);
        CHECK(strncmp(q[i].key, dir, strlen(dir)) == 0);
        int b = dl_queue_blocker(q, sizeof *q, i);
        CHECK(b == DL_Q_HOLDS || b == DL_Q_ANY || (b >= 0 && b < i));
        if (b != DL_Q_HOLDS)
            continue;
        if (q[i].pos.kind == 'x')
            CHECK(i == 0);
        if (held_kind)
            CHECK(held_kind == q[i].pos.kind && q[i].pos.kind != 'x');
        held_kind = q[i].pos.kind;
        holders++;
        if (q[i].pos.kind == 's')
            CHECK((unsigned)holders <= q[i].pos.permits);
        (void)ec_entry_lease(dir, q[i].key);
    }
    free(q);
    /* The etcdctl layout's rule (every key under dir, exclusive: only the
     * first holds), and dlock's own refusing what it did not write. */
    char foreign[EC_KEY_MAX];
    n = ec_queue_read(reply, dir, false, true, &q, NULL, 0);
    CHECK(n >= 0);
    for (int i = 0; i < n; i++) {
        CHECK(q[i].pos.kind == 'x' && strncmp(q[i].key, dir, strlen(dir)) == 0);
        CHECK((dl_queue_blocker(q, sizeof *q, i) == DL_Q_HOLDS) == (i == 0));
        (void)ec_mutex_shaped(dir, q[i].key);
    }
    free(q);
    n = ec_queue_read(reply, dir, false, false, &q, foreign, sizeof foreign);
    CHECK(n >= 0);
    CHECK(!foreign[0] || strncmp(foreign, dir, strlen(dir)) == 0);
    free(q);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    /* A watch stream, in pieces of up to 7 bytes. */
    ec_body k = {0};
    wait_watch w = {.pred = "a/k2", .own = "a/k1", .chain = size % 2};
    k.on_line = ec_wait_line;
    k.arg = &w;
    for (size_t at = 0; at < size;) {
        size_t piece = size - at < 7 ? size - at : 7;
        CHECK(ec_body_feed(&k, (const char *)data + at, piece) == piece);
        at += piece;
    }
    CHECK(k.len <= size);
    free(k.buf);

    /* A whole reply. */
    cJSON *j = cJSON_ParseWithLength((const char *)data, size);
    if (j) {
        check_queue("dlock/a/", j);
        char err[300];
        (void)ec_gateway_error("http://127.0.0.1:2379", 500, j, err, sizeof err);
        CHECK(strlen(err) < sizeof err);
        (void)ec_header_rev(j);
        const cJSON *kv;
        cJSON_ArrayForEach(kv, ec_jarr(j, "kvs"))
        {
            char key[EC_KEY_MAX], value[320], holder[256];
            (void)ec_kv_key(kv, key, sizeof key);
            ec_kv_value(kv, value, sizeof value);
            CHECK(strlen(value) < sizeof value);
            int64_t since;
            const char *leader = ec_split_value(value, holder, sizeof holder, &since);
            CHECK(strlen(holder) < sizeof holder);
            if (leader)
                CHECK(leader > value && leader < value + sizeof value && *leader);
        }
        cJSON_Delete(j);
    }

    /* base64 there and back, and decoding the raw bytes. */
    if (size <= 3000) {
        char enc[4004], dec[3001], raw[3001];
        ec_b64_encode(data, size, enc);
        CHECK(strlen(enc) == (size + 2) / 3 * 4);
        long n = ec_b64_decode(enc, dec, sizeof dec);
        CHECK(n == (long)size && memcmp(dec, data, size) == 0);
        memcpy(raw, data, size);
        raw[size] = '\0';
        n = ec_b64_decode(raw, dec, sizeof dec);
        CHECK(n >= -1 && n <= (long)(strlen(raw) / 4 * 3));
    }
    return 0;
}
