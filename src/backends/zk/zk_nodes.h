/* SPDX-License-Identifier: MIT */
/*
 * zk_nodes.h — what the ZooKeeper backend reads out of a name's children and
 * a holder's node: node names into the queue in the order of the URL's
 * layout (dlock's own "KIND-OWNER-SEQUENCE", or a peer library's names:
 * ?layout=curator, curator-rw, kazoo), the name our own node is made with,
 * and a node's data "HOLDER\nVALUE". Pure functions (no client library):
 * the fuzz target links nodes.c as it is.
 */
#ifndef DLOCK_ZK_NODES_H
#define DLOCK_ZK_NODES_H

#include <stdbool.h>
#include <stddef.h>

#include "support/support.h"

/* Whose nodes a client makes and reads (?layout=). */
enum zk_layout {
    ZK_LAYOUT_DLOCK,      /* CHROOT/dlock/NAME/KIND-OWNER-SEQ */
    ZK_LAYOUT_CURATOR,    /* Curator InterProcessMutex: CHROOT/NAME/_c_UUID-lock-SEQ */
    ZK_LAYOUT_CURATOR_RW, /* Curator InterProcessReadWriteLock: _c_UUID-__WRIT__SEQ, __READ__ */
    ZK_LAYOUT_KAZOO,      /* kazoo Lock/WriteLock, ReadLock: HEX__lock__SEQ, HEX__rlock__SEQ */
    ZK_LAYOUTS
};

/* "dlock", "curator", "curator-rw", "kazoo"; zk_layout_named: -1 if none. */
const char *zk_layout_name(int layout);
int zk_layout_named(const char *s);

typedef struct zk_node {
    dl_qpos pos; /* first: the queue rule reads it (dl_queue_blocker) */
    const char *name;
    const char *key; /* what the layout orders by (into name), NULL: seq */
    char owner[DL_OWNER_HEX + 1]; /* dlock's layout only, else "" */
    long long seq;
} zk_node;

/* "KIND-OWNER-SEQUENCE" → n; false for a name of another shape. */
bool zk_node_parse(const char *name, zk_node *n);
/* name as a node of layout → n; false when that layout's own client would
 * not count it a contender (it is then left out of the queue). */
bool zk_node_parse_in(int layout, const char *name, zk_node *n);
/* The queue of a name from its children, in the layout's order (*out
 * malloc'd; names point into kids): its length, or -1 (out of memory).
 * Children the layout does not count are left out; *foreign (may be NULL)
 * gets the index in kids of the first one, or -1. */
int zk_queue_of(int layout, char **kids, int nkids, zk_node **out, int *foreign);
/* Which layout would count a child dlock's layout does not recognise, by
 * the shape of its name: ZK_LAYOUT_CURATOR, ..._CURATOR_RW, ..._KAZOO, or
 * -1 (another client's). */
int zk_foreign_layout(const char *name);
/* The name our node is created with, before the server's sequence number,
 * for kind ('x', 'r' or 's' with permits) and owner (DL_OWNER_HEX hex
 * digits), into buf: its length, or -1 if it does not fit or the layout
 * has no such kind. It finds our node again after a lost reply: every
 * layout puts a random id in its nodes' names for that (Curator's
 * "protected" mode, kazoo's uuid prefix). */
int zk_leaf_format(int layout, char kind, unsigned permits, const char *owner, char *buf,
                   size_t len);

enum { HOLDS = DL_Q_HOLDS, WATCH_CHILDREN = DL_Q_ANY };

/* Whether q[i] holds (HOLDS), else the node whose going can let it in, or
 * WATCH_CHILDREN (the first semaphore waiter). */
int zk_blocker(const zk_node *q, int i);

/* Holder data "HOLDER\nVALUE" (data may be NULL): the holder part into
 * holder, the value (or NULL when none was published) returned. */
const char *zk_split_data(char *data, char *holder, size_t len);

#endif
