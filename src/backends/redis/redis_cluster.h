/* SPDX-License-Identifier: MIT */
/*
 * redis_cluster.h — slot routing for redis+cluster:// (hiredis 0.14 has no
 * cluster support, so the few pieces a lock needs are written here).
 */
#ifndef DLOCK_REDIS_CLUSTER_H
#define DLOCK_REDIS_CLUSTER_H

#include "redis_int.h"

typedef struct rcluster rcluster;

rcluster *rd_cluster_new(const dl_host *seeds, size_t n);
void rd_cluster_free(rcluster *cl);
/* Learn the slot map (CLUSTER SLOTS) from any node that answers, every
 * step bounded by rd_ms(l, ...) (l may be NULL); RD_OK, or RD_EIO and the
 * last reason in err. */
int rd_cluster_refresh(rcluster *cl, const rconf *cf, const dlock_lock *l, char *err,
                       size_t errlen);
/* Replace the slot map with a CLUSTER SLOTS reply got from asked_host (an
 * entry without a host means that one): how many slot ranges it gave, -1 if
 * it is not such a reply. Malformed entries are skipped. */
int rd_cluster_apply_slots(rcluster *cl, const redisReply *r, const char *asked_host);
/* The master serving key's slot, NULL if unknown. */
rnode *rd_cluster_node(rcluster *cl, const char *key);
/* Follow "MOVED slot host:port" / "ASK slot host:port"; MOVED also updates the
 * map. Returns the node to ask, NULL if the reply cannot be parsed. */
rnode *rd_cluster_redirect(rcluster *cl, const char *reply, bool update);
/* Call fn on every master; stops at the first non-zero result. */
int rd_cluster_each_master(rcluster *cl, int (*fn)(rnode *node, void *arg), void *arg);
/* Hash slot of a key (CRC16 of its hash tag, mod 16384). */
unsigned rd_key_slot(const char *key, size_t len);

#endif
