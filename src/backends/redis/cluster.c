/* SPDX-License-Identifier: MIT */
/*
 * cluster.c — routing lock keys to the masters of a Redis Cluster.
 *
 * All keys of one lock share the {NAME} hash tag, so one lock lives on one
 * master and its scripts run there atomically. The client keeps the slot map
 * from CLUSTER SLOTS, follows MOVED (and updates the map) and ASK (one
 * ASKING retry, map unchanged) redirections, and re-reads the map when a node
 * cannot be reached.
 */
#include "redis_cluster.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define NSLOTS 16384
#define MAX_NODES 128

struct rcluster {
    pthread_mutex_t mu;
    rnode *nodes[MAX_NODES]; /* never freed before the cluster: pointers stay valid */
    bool is_master[MAX_NODES];
    int nnodes;
    short slots[NSLOTS]; /* index into nodes, -1 unknown */
};

/* CRC16-CCITT (XMODEM), as the cluster specification defines it. */
static unsigned crc16(const char *buf, size_t len)
{
    unsigned crc = 0;
    for (size_t i = 0; i < len; i++) {
        crc ^= (unsigned)(unsigned char)buf[i] << 8;
        for (int b = 0; b < 8; b++)
            crc = crc & 0x8000 ? ((crc << 1) ^ 0x1021) & 0xffff : (crc << 1) & 0xffff;
    }
    return crc;
}

unsigned rd_key_slot(const char *key, size_t len)
{
    const char *open = memchr(key, '{', len);
    if (open) {
        size_t rest = len - (size_t)(open - key) - 1;
        const char *close = memchr(open + 1, '}', rest);
        if (close && close > open + 1)
            return crc16(open + 1, (size_t)(close - open - 1)) & (NSLOTS - 1);
    }
    return crc16(key, len) & (NSLOTS - 1);
}

/* Find or add a node; called with mu held. */
static int node_index(rcluster *cl, const char *host, int port)
{
    for (int i = 0; i < cl->nnodes; i++)
        if (cl->nodes[i]->port == port && strcmp(cl->nodes[i]->host, host) == 0)
            return i;
    if (cl->nnodes == MAX_NODES)
        return -1;
    rnode *n = malloc(sizeof *n);
    if (!n)
        return -1;
    rnode_init(n, host, port);
    cl->nodes[cl->nnodes] = n;
    return cl->nnodes++;
}

rcluster *rd_cluster_new(const dl_host *seeds, size_t n)
{
    rcluster *cl = calloc(1, sizeof *cl);
    if (!cl)
        return NULL;
    pthread_mutex_init(&cl->mu, NULL);
    for (int i = 0; i < NSLOTS; i++)
        cl->slots[i] = -1;
    for (size_t i = 0; i < n; i++) {
        if (node_index(cl, seeds[i].host, seeds[i].port) < 0) {
            rd_cluster_free(cl);
            return NULL;
        }
    }
    return cl;
}

void rd_cluster_free(rcluster *cl)
{
    for (int i = 0; i < cl->nnodes; i++) {
        rnode_destroy(cl->nodes[i]);
        free(cl->nodes[i]);
    }
    pthread_mutex_destroy(&cl->mu);
    free(cl);
}

int rd_cluster_refresh(rcluster *cl, const rconf *cf, const dlock_lock *l, char *err,
                       size_t errlen)
{
    pthread_mutex_lock(&cl->mu);
    int n = cl->nnodes;
    rnode *known[MAX_NODES];
    memcpy(known, cl->nodes, (size_t)n * sizeof *known);
    pthread_mutex_unlock(&cl->mu);
    snprintf(err, errlen, "no cluster node known");
    for (int i = 0; i < n; i++) {
        /* Each step within what is left of l's bound: a refresh made
         * during an acquisition or renewal must not outlast it. */
        int ms = rd_ms(l, cf->op_timeout_ms);
        if (ms == 0) {
            snprintf(err, errlen, "no time left to ask for the slot map");
            break;
        }
        rconn *c = rconn_get(known[i], cf, rd_ms(l, cf->connect_timeout_ms), NULL, err, errlen);
        if (!c)
            continue;
        rcmd cmd;
        rcmd_init(&cmd);
        rcmd_add(&cmd, "CLUSTER");
        rcmd_add(&cmd, "SLOTS");
        redisReply *r;
        char why[256];
        if (rconn_call(c, &cmd, 1, &r, rd_ms(l, cf->op_timeout_ms), -1, NULL, why, sizeof why) !=
            RD_OK) {
            snprintf(err, errlen, "redis %s:%d: CLUSTER SLOTS: %s", known[i]->host,
                     known[i]->port, why);
            rconn_drop(c);
            continue;
        }
        rconn_put(c);
        int ranges = rd_cluster_apply_slots(cl, r, known[i]->host);
        if (ranges <= 0) {
            rd_reply_desc(r, why, sizeof why);
            snprintf(err, errlen,
                     "redis %s:%d: CLUSTER SLOTS: expected an array of slot ranges, got %s",
                     known[i]->host, known[i]->port, why);
        }
        freeReplyObject(r);
        if (ranges > 0)
            return RD_OK;
    }
    return RD_EIO;
}

static bool valid_port(long long port)
{
    return port >= 1 && port <= 65535;
}

int rd_cluster_apply_slots(rcluster *cl, const redisReply *r, const char *asked_host)
{
    if (!r || r->type != REDIS_REPLY_ARRAY || r->elements == 0)
        return -1;
    /* Built aside, and taken only if the reply gave something usable. */
    short *map = malloc(sizeof cl->slots);
    if (!map)
        return -1;
    for (int s = 0; s < NSLOTS; s++)
        map[s] = -1;
    int ranges = 0;
    pthread_mutex_lock(&cl->mu);
    for (size_t k = 0; k < r->elements; k++) {
        const redisReply *e = r->element[k];
        /* [start, end, [host, port, id...], replicas...] */
        if (e->type != REDIS_REPLY_ARRAY || e->elements < 3 ||
            e->element[0]->type != REDIS_REPLY_INTEGER ||
            e->element[1]->type != REDIS_REPLY_INTEGER ||
            e->element[2]->type != REDIS_REPLY_ARRAY || e->element[2]->elements < 2)
            continue;
        long long lo = e->element[0]->integer, hi = e->element[1]->integer;
        const redisReply *m = e->element[2];
        if (m->element[0]->type != REDIS_REPLY_STRING ||
            memchr(m->element[0]->str, '\0', m->element[0]->len) ||
            m->element[1]->type != REDIS_REPLY_INTEGER || !valid_port(m->element[1]->integer) ||
            m->element[0]->len >= sizeof cl->nodes[0]->host || lo < 0 || hi >= NSLOTS || lo > hi)
            continue;
        /* An empty host (or "?") means the node we asked. */
        const char *host = m->element[0]->len && strcmp(m->element[0]->str, "?") != 0
                               ? m->element[0]->str
                               : asked_host;
        int idx = node_index(cl, host, (int)m->element[1]->integer);
        if (idx < 0)
            continue;
        cl->is_master[idx] = true;
        for (long long s = lo; s <= hi; s++)
            map[s] = (short)idx;
        ranges++;
    }
    if (ranges > 0)
        memcpy(cl->slots, map, sizeof cl->slots);
    pthread_mutex_unlock(&cl->mu);
    free(map);
    return ranges;
}

rnode *rd_cluster_node(rcluster *cl, const char *key)
{
    unsigned slot = rd_key_slot(key, strlen(key));
    pthread_mutex_lock(&cl->mu);
    int idx = cl->slots[slot];
    rnode *n = idx >= 0 ? cl->nodes[idx] : NULL;
    pthread_mutex_unlock(&cl->mu);
    return n;
}

rnode *rd_cluster_redirect(rcluster *cl, const char *reply, bool update)
{
    unsigned slot;
    char addr[300];
    const char *rest = strchr(reply, ' ');
    if (!rest || sscanf(rest, " %u %299s", &slot, addr) != 2 || slot >= NSLOTS)
        return NULL;
    char *colon = strrchr(addr, ':'), *end;
    if (!colon || colon == addr || colon - addr >= (long)sizeof cl->nodes[0]->host)
        return NULL;
    *colon = '\0';
    long port = strtol(colon + 1, &end, 10);
    if (end == colon + 1 || *end || !valid_port(port))
        return NULL;
    pthread_mutex_lock(&cl->mu);
    int idx = node_index(cl, addr, (int)port);
    if (idx >= 0 && update) {
        cl->is_master[idx] = true;
        cl->slots[slot] = (short)idx;
    }
    rnode *n = idx >= 0 ? cl->nodes[idx] : NULL;
    pthread_mutex_unlock(&cl->mu);
    return n;
}

int rd_cluster_each_master(rcluster *cl, int (*fn)(rnode *node, void *arg), void *arg)
{
    pthread_mutex_lock(&cl->mu);
    int n = cl->nnodes;
    rnode *masters[MAX_NODES];
    int m = 0;
    for (int i = 0; i < n; i++)
        if (cl->is_master[i])
            masters[m++] = cl->nodes[i];
    pthread_mutex_unlock(&cl->mu);
    for (int i = 0; i < m; i++) {
        int x = fn(masters[i], arg);
        if (x)
            return x;
    }
    return 0;
}
