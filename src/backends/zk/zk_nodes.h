/* SPDX-License-Identifier: MIT */
/*
 * zk_nodes.h — what the ZooKeeper backend reads out of a name's children and
 * a holder's node: node names "KIND-OWNER-SEQUENCE" into the queue in
 * sequence order, and a node's data "HOLDER\nVALUE". Pure functions (no
 * client library): the fuzz target links nodes.c as it is.
 */
#ifndef DLOCK_ZK_NODES_H
#define DLOCK_ZK_NODES_H

#include <stdbool.h>
#include <stddef.h>

#include "support/support.h"

typedef struct zk_node {
    dl_qpos pos; /* first: the queue rule reads it (dl_queue_blocker) */
    const char *name;
    char owner[DL_OWNER_HEX + 1];
    long long seq;
} zk_node;

/* "KIND-OWNER-SEQUENCE" → n; false for a name of another shape. */
bool zk_node_parse(const char *name, zk_node *n);
/* The queue of a name from its children, in sequence order (*out malloc'd;
 * names point into kids): its length, or -1 (out of memory). Children of
 * another shape are left out. */
int zk_queue_of(char **kids, int nkids, zk_node **out);

enum { HOLDS = DL_Q_HOLDS, WATCH_CHILDREN = DL_Q_ANY };

/* Whether q[i] holds (HOLDS), else the node whose going can let it in, or
 * WATCH_CHILDREN (the first semaphore waiter). */
int zk_blocker(const zk_node *q, int i);

/* Holder data "HOLDER\nVALUE" (data may be NULL): the holder part into
 * holder, the value (or NULL when none was published) returned. */
const char *zk_split_data(char *data, char *holder, size_t len);

#endif
