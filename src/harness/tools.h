/* SPDX-License-Identifier: MIT */
/*
 * tools.h — what dlock's own tools (`dlock bench`, `dlock check`) ask of a
 * backend beside the lock: its cheapest round trip, the bare hand-over chain
 * its servers offer, their command counters, which servers hold a lock, and
 * for `dlock check` the deployment's topology, its members and its faults
 * (readiness, cutting replication, failover, settling back).
 *
 * Not part of the public API, nor of libdlock.so: the static library
 * dlock_harness (this folder's tools.c and each backend's TOOLS sources),
 * which only the dlock command and the tests link. Each function
 * dispatches through the backend's table of harness operations (struct
 * dh_tools, found by backend name in dh_registry, which CMake writes from
 * the dlock_backend() calls) and answers DLOCK_ENOTSUP when the backend has
 * no such operation. Every
 * failure returns a DLOCK_E* code with the reason in dlock_client_errmsg(c)
 * (never a password). Servers are reached with the library's own connection
 * code and the client's URL, credentials and timeouts; none of these takes
 * a lock or changes a lock's state.
 *
 * Process control of test servers (kill, stop, restart) is not here: it is
 * the same for every backend and stays in the tools.
 */
#ifndef DLOCK_TOOLS_H
#define DLOCK_TOOLS_H

#include "dlock.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* Percentiles of a timed loop, in nanoseconds. */
typedef struct dh_rtt {
    int64_t p50, p99;
    size_t samples;
} dh_rtt;

typedef struct dh_timing {
    dh_rtt all; /* every server involved at once: time to the last reply */
    dh_rtt one; /* the first of them alone (the same as all with one) */
    int servers;        /* how many were involved */
    char what[300];     /* what was measured, in words, for reports */
} dh_timing;

/*
 * The backend's cheapest round trip to the servers that hold lock `name`
 * now (Redis family: PING on one connection to the master, the node of the
 * name's slot, or every Redlock master in parallel), measured through the
 * library's own connection code after a warm-up: iters samples, or as many
 * as fit in max_ns.
 */
int dh_baseline(dlock_client *c, const char *name, int iters, int64_t max_ns,
                dh_timing *out);

/*
 * What the client's lease renewal has done since it opened: renewals that
 * succeeded, the renewal calls made to the backend (a batch is one), and
 * the CPU time the renewal thread has used (0 before it started). For
 * `dlock bench -L`. Always 0 (nothing to count) on a backend without
 * leases.
 */
typedef struct dh_renewals {
    uint64_t renewed, calls;
    int64_t cpu_ns;
} dh_renewals;
void dh_renewal_stats(dlock_client *c, dh_renewals *out);

/* The client's connect and per-request timeouts in force (its options, the
 * URL's parameters, else the defaults), for a tool that must wait as long
 * as a client may legitimately take. */
void dh_timeouts(dlock_client *c, int *connect_ms, int *op_ms);

/*
 * The bare hand-over chain of the server that holds `name` (Redis: one
 * connection's RPUSH waking another blocked in BLPOP, on a scratch key in
 * the name's slot, removed afterwards), timed from just before the push to
 * the wake-up: iters rounds, each about 1 ms apart. DLOCK_ENOTSUP where a
 * hand-over is not one server's chain (Redlock).
 */
int dh_relay(dlock_client *c, const char *name, int iters, dh_timing *out);

/* The servers' command counters, summed over those holding `name` (every
 * master of a Redis Cluster, since names spread over every slot). */
#define DH_COUNTERS_MAX 24
typedef struct dh_counters {
    uint64_t client;   /* requests clients sent (Redis: FCALL, BLPOP, ...) */
    uint64_t internal; /* commands run inside the server on their behalf (the lock script's) */
    int n;             /* the client requests one by one */
    char name[DH_COUNTERS_MAX][32];
    uint64_t calls[DH_COUNTERS_MAX];
    int servers; /* servers counted */
} dh_counters;

int dh_read_counters(dlock_client *c, const char *name, dh_counters *out);

/* Which servers hold lock `name`'s state now: the master (found through
 * Sentinel), the node of the name's cluster slot, or every Redlock master.
 * Returns how many were written to out (at most max), or a DLOCK_E* code. */
typedef struct dh_server {
    char host[256];
    int port;
} dh_server;

int dh_lock_servers(dlock_client *c, const char *name, dh_server *out, int max);

/*
 * A URL taken apart, for a tool that controls the servers themselves
 * (`dlock check` stops and restarts them): scheme (as the library names it),
 * hosts as written (masters, sentinels or seed nodes), credentials and path
 * (database, master name, ...). The password is copied: wipe it
 * (explicit_bzero) when done. 0, or DLOCK_EURL / DLOCK_ENOMEM with a
 * message in err that never contains the password; more than
 * DH_URL_HOSTS hosts is DLOCK_EURL.
 */
#define DH_URL_HOSTS 16
typedef struct dh_url {
    char scheme[32];
    dh_server host[DH_URL_HOSTS];
    int nhosts;
    char user[128], password[256];
    char path[256];
} dh_url;

int dh_parse_url(const char *url, dh_url *out, char *err, size_t errlen);

/* The default backend URL from the environment, as dlock_client_open(NULL)
 * reads it: $DLOCK_URL, or the whole URL that a `dlock run` above passed
 * down through the descriptor $DLOCK_URL_FD (when $DLOCK_URL is its
 * password-free form). In buf when read from the descriptor; NULL when
 * $DLOCK_URL is unset or empty. */
const char *dh_env_url(char *buf, size_t len);
/* Overwrite, in place and at the same length, the password and secret query
 * values of url with '*' (for a URL in argv, which ps shows). */
void dh_url_scrub(char *url);

/* ---- for `dlock check`: the deployment and its faults ------------------ */

/*
 * What kind of deployment a URL names, as far as faults go: `dlock check`'s
 * scenarios ask for these traits, never for a backend, so that a new
 * backend's deployment gets every scenario its trait allows. One bit each.
 */
enum {
    DH_TOPO_ONE_SERVER = 1, /* one server holds every lock (redis://) */
    /* a primary with replicas, replication asynchronous, a promotion when
     * the primary dies (Redis Sentinel) */
    DH_TOPO_REPLICAS_FAILOVER = 2,
    DH_TOPO_QUORUM = 4, /* independent servers, a lock needs a majority of them (Redlock) */
    /* a consensus ensemble: it works while a majority lives, and its leader
     * may be killed (ZooKeeper, etcd) */
    DH_TOPO_CONSENSUS = 8,
    DH_TOPO_SHARDS = 16 /* names spread over shards, each its own server (Redis Cluster) */
};

typedef struct dh_topo {
    unsigned trait; /* one DH_TOPO_* */
    int quorum;     /* data servers a lock needs: a majority for QUORUM and CONSENSUS, else 1 */
    /* 1: clients connect straight to the servers listed in the URL and to no
     * other (so a TCP relay in front of each host can cut a client off);
     * 0: the servers name other servers to their clients, and `indirect`
     * says how, for reports. */
    int direct;
    char indirect[256];
    /* How much longer than its ttl a lease may live on the servers after
     * the holder's last renewal (memcached counts expiry in whole seconds
     * on a clock that ticks once a second: up to 4 s more); 0 when the
     * servers keep it no longer than the ttl. */
    int lease_slack_ms;
} dh_topo;

/* The topology of the client's URL, from the URL alone (no request). */
int dh_topology(dlock_client *c, dh_topo *out);

/* A server of the deployment and what it does there. */
enum {
    DH_DATA = 0,       /* holds lock state: master, replica, node, ensemble member */
    DH_COORDINATOR = 1 /* holds none, watches or names the others (a sentinel) */
};
typedef struct dh_member {
    dh_server addr; /* as the deployment names it */
    int role;               /* DH_DATA or DH_COORDINATOR */
} dh_member;

/* Every server of the deployment now: the URL's hosts and those they name
 * (Sentinel: the sentinels, the master and its replicas; Cluster: every
 * node). Returns how many were written to out (at most max), or a DLOCK_E*
 * code. */
int dh_members(dlock_client *c, dh_member *out, int max);

/* Does member m answer as ready to serve (Redis: any reply to PING but
 * LOADING)? 0 when it does; DLOCK_EUNREACHABLE, or DLOCK_EBUSY when it
 * answers but is not ready yet. One try, bounded by the client's timeouts. */
int dh_server_ready(dlock_client *c, const dh_member *m);

/* Cut replication from `primary` to its replicas, which keep what they have
 * and fall behind (Redis: each made to replicate from a port where nothing
 * listens). Returns how many replicas were cut, or a DLOCK_E* code. */
int dh_cut_replication(dlock_client *c, const dh_server *primary);

/* How long a waiting tool operation may wait, and who may stop it. */
typedef struct dh_wait {
    int64_t until_ns;         /* CLOCK_MONOTONIC: then DLOCK_ETIMEDOUT */
    bool (*stop)(void *arg);  /* asked between tries: true gives up (DLOCK_ECANCELED); or NULL */
    void *arg;
} dh_wait;

/* Wait until a data server other than `old` serves lock `name` as its
 * primary (a failover): 0 with its address in out, or a DLOCK_E* code. */
int dh_wait_failover(dlock_client *c, const char *name, const dh_server *old,
                     const dh_wait *w, dh_server *out);

/* Wait until the deployment of members m[0..n) (every one running again)
 * is as it was: one primary every coordinator agrees on, replicas in sync,
 * a cluster whole, every server ready. Never changes lock state; may point
 * replicas back at their primary. 0, or a DLOCK_E* code with what is still
 * missing in the message. */
int dh_settle(dlock_client *c, const dh_member *m, int n,
              const dh_wait *w);

/* The member that leads the consensus ensemble now (DH_TOPO_CONSENSUS):
 * 0 with its address in out, or a DLOCK_E* code. */
int dh_leader(dlock_client *c, dh_server *out);

/* Remove what lock `name`, free now, left behind (the file backend's lock
 * file); DLOCK_ENOTSUP where nothing is left or the backend cannot tell. */
int dh_forget(dlock_client *c, const char *name);

/* ---- for backends: the operations behind the functions above ---------- */

/*
 * A backend's table of harness operations, `const struct dh_tools
 * dh_tools_<descriptor>` (one per descriptor built). Any may be NULL.
 * Called with a valid name and a zeroed result; they return 0 or a DLOCK_E*
 * code set with dl_client_err.
 */
struct dh_tools {
    int (*baseline)(dlock_client *c, const char *name, int iters, int64_t max_ns,
                    dh_timing *out);
    int (*relay)(dlock_client *c, const char *name, int iters, dh_timing *out);
    int (*counters)(dlock_client *c, const char *name, dh_counters *out);
    int (*lock_servers)(dlock_client *c, const char *name, dh_server *out, int max);
    /* for dlock check (appended) */
    int (*topology)(dlock_client *c, dh_topo *out);
    int (*members)(dlock_client *c, dh_member *out, int max);
    int (*server_ready)(dlock_client *c, const dh_member *m);
    int (*cut_replication)(dlock_client *c, const dh_server *primary);
    int (*wait_failover)(dlock_client *c, const char *name, const dh_server *old,
                         const dh_wait *w, dh_server *out);
    int (*settle)(dlock_client *c, const dh_member *m, int n, const dh_wait *w);
    int (*leader)(dlock_client *c, dh_server *out);
    /* Remove what lock `name`, free now, left behind on the backend (the
     * file backend's NAME.lock); for names of a benchmark or a check. */
    int (*forget)(dlock_client *c, const char *name);
};

/* The registry (generated): one entry per descriptor built, ended by
 * {NULL, NULL}. */
typedef struct dh_entry {
    const char *backend; /* as dlock_client_backend() names it */
    const struct dh_tools *tools;
} dh_entry;
extern const dh_entry dh_registry[];

/* The harness table of a backend, by name; NULL when it has none. */
const struct dh_tools *dh_tools_for(const char *backend);

/* Shared by the adapters: p50/p99 of v[0..n) by nearest rank (sorts v). */
void dh_summarize(int64_t *v, size_t n, dh_rtt *out);
/* A one-server timing tool's end: rc 0 summarises v[0..n) into out with
 * `what`; else the error "TOOL: WHY (URL)" is set on c and returned. v is
 * freed either way. */
int dh_done(dlock_client *c, int rc, const char *tool, const char *why, int64_t *v,
            size_t n, dh_timing *out, const char *what);
/* Time `step` (0, or a code with a reason in why) `iters` times after
 * `warmup` untimed calls, stopping early after max_ns: *v (malloc'd) and
 * *n for dh_done; the first failure's code. */
int dh_repeat(int (*step)(void *arg, char *why, size_t wlen), void *arg, int iters,
              int warmup, int64_t max_ns, int64_t **v, size_t *n, char *why, size_t wlen);
/* For deployments whose servers are exactly the URL's hosts, each holding
 * every lock (a consensus ensemble, or one server): the hosts as lock
 * servers and data members, and the topology (consensus when several). */
int dh_url_servers(dlock_client *c, const char *name, dh_server *out, int max);
int dh_url_members(dlock_client *c, dh_member *out, int max);
int dh_url_topology(dlock_client *c, dh_topo *out);
/* One server, whatever the URL lists (a database server: the lock lives in
 * the one the client reaches). */
int dh_one_server_topology(dlock_client *c, dh_topo *out);
/* A consensus ensemble's settle: every member ready (server_ready) and one
 * of them leading (leader), asked every 100 ms until w says stop. */
int dh_settle_ensemble(dlock_client *c, const dh_member *m, int n,
                       const dh_wait *w);

#endif
