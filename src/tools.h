/*
 * tools.h — what dlock's own tools (`dlock bench`, `dlock check`) ask of a
 * backend beside the lock: its cheapest round trip, the bare hand-over chain
 * its servers offer, their command counters, and which servers hold a lock.
 *
 * Not part of the public API: not installed, not exported from libdlock.so
 * (the CLI links the static library). The tools include this header, never
 * internal.h. Each function dispatches through the client's backend table
 * (dl_backend.tools, filled by the backends that have the operation) and
 * answers DLOCK_ENOTSUP when the backend has no such operation. Every
 * failure returns a DLOCK_E* code with the reason in dlock_client_errmsg(c)
 * (never a password). Servers are reached with the library's own connection
 * code and the client's URL, credentials and timeouts; none of these takes
 * a lock or changes a lock's state.
 */
#ifndef DLOCK_TOOLS_H
#define DLOCK_TOOLS_H

#include "dlock.h"

#include <stddef.h>
#include <stdint.h>

/* Percentiles of a timed loop, in nanoseconds. */
typedef struct dlock_tool_rtt {
    int64_t p50, p99;
    size_t samples;
} dlock_tool_rtt;

typedef struct dlock_tool_timing {
    dlock_tool_rtt all; /* every server involved at once: time to the last reply */
    dlock_tool_rtt one; /* the first of them alone (the same as all with one) */
    int servers;        /* how many were involved */
    char what[300];     /* what was measured, in words, for reports */
} dlock_tool_timing;

/*
 * The backend's cheapest round trip to the servers that hold lock `name`
 * now (Redis family: PING on one connection to the master, the node of the
 * name's slot, or every Redlock master in parallel), measured through the
 * library's own connection code after a warm-up: iters samples, or as many
 * as fit in max_ns.
 */
int dlock_tool_baseline(dlock_client *c, const char *name, int iters, int64_t max_ns,
                        dlock_tool_timing *out);

/*
 * The bare hand-over chain of the server that holds `name` (Redis: one
 * connection's RPUSH waking another blocked in BLPOP, on a scratch key in
 * the name's slot, removed afterwards), timed from just before the push to
 * the wake-up: iters rounds, each about 1 ms apart. DLOCK_ENOTSUP where a
 * hand-over is not one server's chain (Redlock).
 */
int dlock_tool_relay(dlock_client *c, const char *name, int iters, dlock_tool_timing *out);

/* The servers' command counters, summed over those holding `name` (every
 * master of a Redis Cluster, since names spread over every slot). */
#define DLOCK_TOOL_COUNTERS_MAX 24
typedef struct dlock_tool_counters {
    uint64_t client;   /* requests clients sent (Redis: FCALL, BLPOP, ...) */
    uint64_t internal; /* commands run inside the server on their behalf (the lock script's) */
    int n;             /* the client requests one by one */
    char name[DLOCK_TOOL_COUNTERS_MAX][32];
    uint64_t calls[DLOCK_TOOL_COUNTERS_MAX];
    int servers; /* servers counted */
} dlock_tool_counters;

int dlock_tool_read_counters(dlock_client *c, const char *name, dlock_tool_counters *out);

/* Which servers hold lock `name`'s state now: the master (found through
 * Sentinel), the node of the name's cluster slot, or every Redlock master.
 * Returns how many were written to out (at most max), or a DLOCK_E* code. */
typedef struct dlock_tool_server {
    char host[256];
    int port;
} dlock_tool_server;

int dlock_tool_lock_servers(dlock_client *c, const char *name, dlock_tool_server *out, int max);

/*
 * A URL taken apart, for a tool that controls the servers themselves
 * (`dlock check` stops and restarts them): scheme (as the library names it),
 * hosts as written (masters, sentinels or seed nodes), credentials and path
 * (database, master name, ...). The password is copied: wipe it
 * (explicit_bzero) when done. 0, or DLOCK_EURL / DLOCK_ENOMEM with a
 * message in err that never contains the password; more than
 * DLOCK_TOOL_URL_HOSTS hosts is DLOCK_EURL.
 */
#define DLOCK_TOOL_URL_HOSTS 16
typedef struct dlock_tool_url {
    char scheme[32];
    dlock_tool_server host[DLOCK_TOOL_URL_HOSTS];
    int nhosts;
    char user[128], password[256];
    char path[256];
} dlock_tool_url;

int dlock_tool_parse_url(const char *url, dlock_tool_url *out, char *err, size_t errlen);

/* ---- for backends: the operations behind the functions above ---------- */

/*
 * A backend's table of tool operations (dl_backend.tools; internal.h names
 * it only by pointer). Any may be NULL. Called with a valid name and a
 * zeroed result; they return 0 or a DLOCK_E* code set with dl_client_err.
 */
struct dl_tools {
    int (*baseline)(dlock_client *c, const char *name, int iters, int64_t max_ns,
                    dlock_tool_timing *out);
    int (*relay)(dlock_client *c, const char *name, int iters, dlock_tool_timing *out);
    int (*counters)(dlock_client *c, const char *name, dlock_tool_counters *out);
    int (*lock_servers)(dlock_client *c, const char *name, dlock_tool_server *out, int max);
};

#endif
