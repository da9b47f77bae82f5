/* SPDX-License-Identifier: MIT */
/*
 * records.c — claims (dlock once) on ZooKeeper: one persistent node
 * BASE/.claims/KEY per claim (BASE: CHROOT/dlock, or CHROOT in a peer's
 * layout; no lock name starts with '.', so no lock node is there). A plain
 * persistent node has no TTL (TTL nodes need the server's
 * zookeeper.extendedTypesEnabled, which a server is not started with), so
 * the node's data is "TTL_MS\nBYTES" and the record ends at the node's
 * mtime (the leader's clock at the write) plus TTL_MS, read on the
 * reader's clock. A read that finds it over deletes that version of it.
 * The folder .claims is a container node: the server removes it once it
 * is empty, and a write makes it again. A record's version is its node's
 * stat.version + 1 (0 is a real ZooKeeper version; ours means none): a
 * write is a setData with that version, or for none a create, which the
 * server refuses when the node changed or exists (ZBADVERSION,
 * ZNODEEXISTS).
 */
#include "zk_int.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define ZK_CLAIMS_DIR ".claims"
#define ZK_CLAIM_HEAD_MAX 24 /* "TTL_MS\n" */

/* The folder and the record's node: false if they do not fit. */
static bool claim_paths(const zkclient *zc, const char *key, char *dir, char *path)
{
    return zk_pjoin(dir, ZK_PATH_MAX, zc->base, ZK_CLAIMS_DIR) &&
           zk_pjoin(path, ZK_PATH_MAX, dir, key);
}

/* One request sent and waited for, its call given up. */
static int call_run(zk_op *op, enum call_kind kind, const char *path, const char *data, int len,
                    int version, int flags)
{
    zk_call *k = zk_send_data(op, kind, path, data, len, version, flags, &op->zc->acl);
    int rc = zk_result(op, k, zk_op_until(op->zc));
    zk_call_drop(k);
    return rc;
}

int zk_record_get(dlock_client *c, const char *key, char **val, size_t *len, uint64_t *ver)
{
    zkclient *zc = zc_of(c);
    *val = NULL;
    *len = 0;
    *ver = 0;
    char dir[ZK_PATH_MAX], path[ZK_PATH_MAX], err[300];
    if (!claim_paths(zc, key, dir, path))
        return dl_claim_err(c, DLOCK_ENAME, "reading", key, "its node's path is too long");
    zk_op op;
    int rc = zk_op_begin(zc, true, &op, err, sizeof err);
    if (rc)
        return dl_claim_err(c, rc, "reading", key, err);
    zk_call *k = NULL;
    int zrc = zk_do(&op, CALL_DATA, path, NULL, zk_op_until(zc), &k);
    if (zrc == ZNONODE) {
        zk_op_end(&op);
        return 0;
    }
    if (zrc != ZOK) {
        zk_op_end(&op);
        return dl_claim_err(c, zk_code(zrc), "reading", key, zk_why(zc, zrc, err, sizeof err));
    }
    const char *nl = k->data ? memchr(k->data, '\n', (size_t)k->datalen < ZK_CLAIM_HEAD_MAX
                                                         ? (size_t)k->datalen
                                                         : ZK_CLAIM_HEAD_MAX)
                             : NULL;
    char *end = NULL;
    long long ttl_ms = nl ? strtoll(k->data, &end, 10) : -1;
    if (!nl || end != nl || ttl_ms <= 0) {
        zk_call_drop(k);
        zk_op_end(&op);
        return dl_claim_err(c, DLOCK_EPROTO, "reading", key,
                            "its node's data is not a claim record (TTL_MS, newline, bytes)");
    }
    if (k->stat.mtime + ttl_ms <= dl_realtime_ms()) {
        /* over: this version deleted, unless a write replaced it since
         * (ZBADVERSION) or another reader was first (ZNONODE); a failure
         * changes nothing of the answer, and the next read tries again */
        (void)call_run(&op, CALL_VOID, path, NULL, -1, k->stat.version, 0);
    } else {
        size_t n = (size_t)k->datalen - (size_t)(nl + 1 - k->data);
        char *out = malloc(n + 1);
        if (!out) {
            zk_call_drop(k);
            zk_op_end(&op);
            return dl_claim_err(c, DLOCK_ENOMEM, "reading", key, "out of memory");
        }
        memcpy(out, nl + 1, n);
        out[n] = '\0';
        *val = out;
        *len = n;
        *ver = (uint64_t)(uint32_t)k->stat.version + 1;
    }
    zk_call_drop(k);
    zk_op_end(&op);
    return 0;
}

int zk_record_put(dlock_client *c, const char *key, const char *val, size_t len, int64_t ttl_ms,
                  uint64_t ver)
{
    zkclient *zc = zc_of(c);
    char dir[ZK_PATH_MAX], path[ZK_PATH_MAX], err[300];
    if (!claim_paths(zc, key, dir, path))
        return dl_claim_err(c, DLOCK_ENAME, "writing", key, "its node's path is too long");
    char *data = malloc(ZK_CLAIM_HEAD_MAX + len);
    if (!data)
        return dl_claim_err(c, DLOCK_ENOMEM, "writing", key, "out of memory");
    int head = snprintf(data, ZK_CLAIM_HEAD_MAX, "%" PRId64 "\n", ttl_ms);
    memcpy(data + head, val, len);
    int dlen = head + (int)len;
    zk_op op;
    int rc = zk_op_begin(zc, true, &op, err, sizeof err);
    if (rc) {
        free(data);
        return dl_claim_err(c, rc, "writing", key, err);
    }
    /* a version: set there (gone or changed: not ours); none: create, the
     * folder first when it is missing (or the server removed it empty
     * meanwhile), a few rounds at most */
    int zrc = ZNONODE;
    if (ver > (uint64_t)INT32_MAX + 1) {
        zrc = ZBADVERSION; /* never one of ours */
    } else if (ver) {
        zrc = call_run(&op, CALL_SET, path, data, dlen, (int)(ver - 1), 0);
    } else {
        for (int i = 0; i < 6; i++) {
            zrc = call_run(&op, CALL_CREATE, path, data, dlen, -1, ZOO_PERSISTENT);
            if (zrc != ZNONODE)
                break;
            if ((zrc = zk_ensure_parent(&op, dir, zk_op_until(zc))) != ZOK)
                break;
            zrc = ZNONODE; /* (rounds run out: say so) */
        }
    }
    zk_op_end(&op);
    free(data);
    if (zrc == ZBADVERSION || zrc == ZNODEEXISTS || (ver && zrc == ZNONODE))
        return DL_RECORD_CHANGED;
    if (zrc != ZOK)
        return dl_claim_err(c, zk_code(zrc), "writing", key, zk_why(zc, zrc, err, sizeof err));
    return 0;
}

int zk_record_del(dlock_client *c, const char *key)
{
    zkclient *zc = zc_of(c);
    char dir[ZK_PATH_MAX], path[ZK_PATH_MAX], err[300];
    if (!claim_paths(zc, key, dir, path))
        return dl_claim_err(c, DLOCK_ENAME, "deleting", key, "its node's path is too long");
    zk_op op;
    int rc = zk_op_begin(zc, true, &op, err, sizeof err);
    if (rc)
        return dl_claim_err(c, rc, "deleting", key, err);
    int zrc = call_run(&op, CALL_VOID, path, NULL, -1, -1, 0);
    zk_op_end(&op);
    if (zrc != ZOK && zrc != ZNONODE)
        return dl_claim_err(c, zk_code(zrc), "deleting", key, zk_why(zc, zrc, err, sizeof err));
    return 0;
}
