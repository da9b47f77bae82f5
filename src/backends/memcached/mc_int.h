/* SPDX-License-Identifier: MIT */
/*
 * mc_int.h — the memcached backend's servers, connections and calls, for its
 * files (memcached.c, the lock; tools.c, the harness's operations).
 */
#ifndef DLOCK_MC_INT_H
#define DLOCK_MC_INT_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "internal.h"
#include "support/support.h"
#include "mc_proto.h"

typedef struct mc_server {
    char *host;
    int port;
    dl_pool idle; /* of mc_conn */
} mc_server;

/* A connection: its socket, and its link in its server's pool. */
typedef struct mc_conn {
    dl_pooled pooled;
    int fd;
} mc_conn;

typedef struct mcclient {
    mc_server *servers;
    size_t nservers;
    char prefix[64];
    char holder[200];
    const char *redacted;
    int op_timeout_ms, connect_timeout_ms;
} mcclient;

mcclient *mcc_of(dlock_client *c);
void mc_conn_close(mc_conn *k);
/* An idle connection to s the server has not ended, else a new one. */
int mc_get_conn(mcclient *mc, mc_server *s, int64_t until_ns, int cancel_fd, mc_conn **out,
                bool *reused, char *why, size_t wlen);
void mc_put_conn(mc_server *s, mc_conn *k);
/* Send req (nrep requests pipelined) to server s and read their nrep
 * replies into rep, within until_ns (and cancel_fd): 0, or a code with the
 * reason in why. A reply that is not memcached's is DLOCK_EPROTO; an
 * error reply is left in rep for the caller (code "ER"). */
int mc_call(mcclient *mc, mc_server *s, const char *req, size_t len, mc_reply *rep, int nrep,
            int64_t until_ns, int cancel_fd, char *why, size_t wlen);
/* Rendezvous hashing: the server with the highest hash of (name, server)
 * holds the name; a server that leaves moves only its own names. */
mc_server *mc_server_of(const mcclient *mc, const char *name);

#endif
