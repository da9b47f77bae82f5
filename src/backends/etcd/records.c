/* SPDX-License-Identifier: MIT */
/*
 * records.c — claims (dlock once) on etcd: one key PREFIX/.claims/KEY per
 * claim, in dlock's own key space in every layout (lock names never start
 * with '.', and layout=etcdctl refuses names under PREFIX/.), on a lease
 * of its own granted by each write: etcd deletes it when its time is over,
 * on the cluster's clock. A write's lease is the record's whole time, so
 * it is never kept alive; the lease of the record it replaced (put's
 * prev_kv) is revoked, so that a day-long lease does not outlive its key.
 * A record's version is its key's mod_revision (0: none); a write is a txn
 * comparing it (create_revision 0 for none), so that it lands only on the
 * version its writer read.
 */
#include "ec_int.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The record's key, base64 into b64 (EC_KEY_MAX * 2 bytes). */
static void claim_key_b64(const ecclient *ec, const char *key, char *b64)
{
    char k[EC_KEY_MAX];
    int n = snprintf(k, sizeof k, "%s/.claims/%s", ec->prefix, key);
    ec_b64_encode(k, (size_t)n, b64);
}

/* The lease of a reply's prev_kv, 0 when none. */
static int64_t prev_lease(const cJSON *j)
{
    const cJSON *resps = ec_jarr(j, "responses"); /* txn: its put's */
    if (resps)
        j = ec_jobj(cJSON_GetArrayItem(resps, 0), "response_put");
    const cJSON *prev = j ? ec_jobj(j, "prev_kv") : NULL;
    if (!prev) { /* deleterange: prev_kvs[] */
        const cJSON *arr = ec_jarr(j, "prev_kvs");
        prev = arr ? cJSON_GetArrayItem(arr, 0) : NULL;
    }
    return prev ? ec_jint(prev, "lease", 0) : 0;
}

int etcd_record_get(dlock_client *c, const char *key, char **val, size_t *len, uint64_t *ver)
{
    ecclient *ec = ec_of(c);
    *val = NULL;
    *len = 0;
    *ver = 0;
    char b64k[EC_KEY_MAX * 2], body[EC_KEY_MAX * 2 + 32], err[300];
    claim_key_b64(ec, key, b64k);
    snprintf(body, sizeof body, "{\"key\":\"%s\"}", b64k);
    cJSON *j = NULL;
    int rc = ec_post(ec, "/v3/kv/range", body, -1, -1, &j, NULL, err, sizeof err);
    if (rc)
        return dl_claim_err(c, rc, "reading", key, err);
    const cJSON *kvs = ec_jarr(j, "kvs");
    const cJSON *kv = kvs ? cJSON_GetArrayItem(kvs, 0) : NULL;
    if (kv) {
        /* the gateway leaves an empty value out */
        const cJSON *v = cJSON_GetObjectItemCaseSensitive(kv, "value");
        const char *s = cJSON_IsString(v) ? v->valuestring : "";
        size_t cap = strlen(s) / 4 * 3 + 1;
        char *out = malloc(cap);
        long n = out ? ec_b64_decode(s, out, cap) : 0;
        int64_t mod = ec_jint(kv, "mod_revision", 0);
        if (!out || n < 0 || mod <= 0) {
            free(out);
            rc = out ? DLOCK_EPROTO : DLOCK_ENOMEM;
        } else {
            *val = out;
            *len = (size_t)n;
            *ver = (uint64_t)mod;
        }
    }
    cJSON_Delete(j);
    if (rc)
        return dl_claim_err(c, rc, "reading", key,
                            rc == DLOCK_ENOMEM ? "out of memory"
                                               : "etcd sent a value not base64, or no revision");
    return 0;
}

int etcd_record_put(dlock_client *c, const char *key, const char *val, size_t len,
                    int64_t ttl_ms, uint64_t ver)
{
    ecclient *ec = ec_of(c);
    char b64k[EC_KEY_MAX * 2], err[300];
    int64_t lease;
    int rc = ec_lease_grant(ec, ttl_ms, -1, &lease, err, sizeof err);
    if (rc)
        return dl_claim_err(c, rc, "granting its lease", key, err);
    claim_key_b64(ec, key, b64k);
    size_t cap = 2 * strlen(b64k) + (len + 2) / 3 * 4 + 320;
    char *body = malloc(cap);
    if (!body) {
        ec_lease_drop(ec, lease);
        return dl_claim_err(c, DLOCK_ENOMEM, "writing", key, "out of memory");
    }
    /* none: never created (create_revision 0); else still the revision read */
    int at = ver ? snprintf(body, cap,
                            "{\"compare\":[{\"key\":\"%s\",\"target\":\"MOD\",\"result\":"
                            "\"EQUAL\",\"mod_revision\":\"%" PRIu64 "\"}]",
                            b64k, ver)
                 : snprintf(body, cap,
                            "{\"compare\":[{\"key\":\"%s\",\"target\":\"CREATE\",\"result\":"
                            "\"EQUAL\",\"create_revision\":\"0\"}]",
                            b64k);
    at += snprintf(body + at, cap - (size_t)at,
                   ",\"success\":[{\"request_put\":{\"key\":\"%s\",\"value\":\"", b64k);
    ec_b64_encode(val, len, body + at);
    at += (int)strlen(body + at);
    snprintf(body + at, cap - (size_t)at,
             "\",\"lease\":\"%" PRId64 "\",\"prev_kv\":true}}]}", lease);
    cJSON *j = NULL;
    rc = ec_post(ec, "/v3/kv/txn", body, -1, -1, &j, NULL, err, sizeof err);
    free(body);
    bool done = rc == 0 && cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(j, "succeeded"));
    int64_t old = done ? prev_lease(j) : 0;
    cJSON_Delete(j);
    if (rc || !done) {
        ec_lease_drop(ec, lease);
        return rc ? dl_claim_err(c, rc, "writing", key, err) : DL_RECORD_CHANGED;
    }
    if (old != lease)
        ec_lease_drop(ec, old);
    return 0;
}

int etcd_record_del(dlock_client *c, const char *key)
{
    ecclient *ec = ec_of(c);
    char b64k[EC_KEY_MAX * 2], body[EC_KEY_MAX * 2 + 64], err[300];
    claim_key_b64(ec, key, b64k);
    snprintf(body, sizeof body, "{\"key\":\"%s\",\"prev_kv\":true}", b64k);
    cJSON *j = NULL;
    int rc = ec_post(ec, "/v3/kv/deleterange", body, -1, -1, &j, NULL, err, sizeof err);
    int64_t old = rc ? 0 : prev_lease(j);
    cJSON_Delete(j);
    if (rc)
        return dl_claim_err(c, rc, "deleting", key, err);
    ec_lease_drop(ec, old);
    return 0;
}
