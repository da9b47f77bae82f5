/* SPDX-License-Identifier: MIT */
/*
 * check.h — the `dlock check` harness (SPEC §8), shared by its files:
 *
 *   check.c            the command: runs each scenario fenced and as a canary,
 *                      checks the histories, prints the verdicts
 *   check_run.c        one run: the worker processes, the guarded resource,
 *                      the shared event log, the fault controls
 *   check_scenarios.c  the table of fault scenarios
 *   check_history.c    the history format and the checker (no processes)
 *   check_relay.c      per-worker TCP relays to the servers, which the
 *                      partition scenario freezes to cut a holder off
 *   check_servers.c    the servers of the deployment: their processes
 *                      controlled here, the rest asked of the backend's
 *                      check adapter
 *
 * A scenario injects faults through chk_ctl, one table of operations on
 * "targets": the harness's own worker processes (CHK_CLIENT), and servers of
 * the backend under test (CHK_SERVER), found in a servers directory and
 * described by the backend's check adapter (src/tools.h) in a chk_servers
 * table. Scenarios ask for topology traits (CHK_TOPO_*), never for a
 * backend. The embedded file backend has no server, so server operations
 * answer -ENOTSUP for it.
 */
#ifndef DLOCK_CLI_CHECK_H
#define DLOCK_CLI_CHECK_H

#include "check_history.h"
#include "measure.h"
#include "harness/tools.h"

#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

#define CHK_MAX_WORKERS 64
#define CHK_EVENT_CAP ((size_t)1 << 22) /* events per run (MAP_NORESERVE) */
#define CHK_RELAY_HOSTS 16              /* servers a worker's relay forwards to */

/* Fault points a worker can be told to stop at, between its read and its
 * write inside the critical section. */
enum {
    CHK_FAULT_NONE = 0,
    CHK_FAULT_PARK = 1, /* wait there until let go */
    CHK_FAULT_LOSE = 2  /* lose the lock (dlock_debug_force_loss), then wait */
};

typedef struct chk_slot {
    _Atomic int pid;        /* current incarnation, 0 when none */
    _Atomic int id;         /* its worker id in the history */
    _Atomic int parked;     /* 1 while waiting at the fault point */
    _Atomic int go;         /* set by the harness to let a parked worker on */
    _Atomic uint64_t writes; /* write replies received */
    _Atomic int failed;
    /* the gate before acquiring (see chk_gate) */
    _Atomic int at_gate;     /* 1 while waiting there */
    _Atomic int pass_gate;   /* set by the harness: go on through the closed gate */
    _Atomic int in_acquire;  /* 1 from just before dlock_acquire until it returns */
    _Atomic int watched;     /* report the outcome of the next acquisition */
    _Atomic int acq_outcome; /* of a watched one: 0 pending, 1 granted, 2 failed */
    _Atomic int acq_state;   /* dlock_state() when it returned */
    /* Its relay (check_relay.c), per server of the URL: when bytes from the
     * worker were last written to that server (CLOCK_MONOTONIC ns, 0 never). */
    _Atomic int64_t relay_sent_ns[CHK_RELAY_HOSTS];
    char err[256];
} chk_slot;

typedef struct chk_ev {
    _Atomic uint32_t valid; /* set last: a record cut short by SIGKILL stays 0 */
    int32_t type;
    int32_t worker;
    int32_t rc;
    int64_t t;
    uint64_t token;
    int64_t value;
} chk_ev;

typedef struct chk_shm {
    _Atomic int stop;
    _Atomic int gate;    /* 1: workers wait before acquiring (chk_gate) */
    _Atomic int fault;   /* armed fault, CHK_FAULT_* */
    _Atomic int claimed; /* 1 + slot of the worker that took the fault */
    _Atomic uint64_t nev;
    _Atomic uint64_t lost_events; /* log full */
    _Atomic int claim_keys;   /* claims scenario: keys begun (0..claim_keys-1) */
    _Atomic int claim_reruns; /* ... runs with attempt > 1 */
    chk_slot slot[CHK_MAX_WORKERS];
    chk_ev ev[CHK_EVENT_CAP];
} chk_shm;

/* Append an event stamped now (async-signal-safe, lock-free). */
void chk_log(chk_shm *sh, int type, int worker, uint64_t token, int64_t value, int rc);

/* ---- one run -------------------------------------------------------------- */

typedef enum chk_role { CHK_CLIENT = 0, CHK_SERVER = 1 } chk_role;

typedef struct chk_run chk_run;

/* What a scenario can do to the system under test. Each returns 0 or a
 * negative errno (-ENOTSUP when the target cannot be controlled). */
typedef struct chk_ctl {
    int (*start)(chk_run *r, chk_role role, int idx);  /* (re)start */
    int (*stop)(chk_run *r, chk_role role, int idx);   /* graceful: SIGTERM */
    int (*kill)(chk_run *r, chk_role role, int idx);   /* SIGKILL */
    int (*pause)(chk_run *r, chk_role role, int idx);  /* SIGSTOP */
    int (*resume)(chk_run *r, chk_role role, int idx); /* SIGCONT */
    /* cut the target off the network (1) or reconnect it (0); for a
     * client: freeze (SIGSTOP) or continue its relay to the servers, in
     * scenarios that run one (chk_scenario.relayed) */
    int (*partition)(chk_run *r, chk_role role, int idx, int isolated);
} chk_ctl;

/* What a scenario's server faults need of the deployment: its topology
 * traits, as the backend's check adapter states them (tools.h). A scenario
 * names the traits it applies to (any of them; 0: any deployment with
 * servers), never a backend. */
enum {
    CHK_TOPO_ANY = 0,
    CHK_TOPO_ONE_SERVER = DH_TOPO_ONE_SERVER,               /* redis:// */
    CHK_TOPO_REPLICAS_FAILOVER = DH_TOPO_REPLICAS_FAILOVER, /* Sentinel */
    CHK_TOPO_QUORUM = DH_TOPO_QUORUM,                       /* Redlock */
    CHK_TOPO_CONSENSUS = DH_TOPO_CONSENSUS,                 /* ZooKeeper, etcd */
    CHK_TOPO_SHARDS = DH_TOPO_SHARDS                        /* Redis Cluster */
};

/* Servers of one lock a scenario may fault at once. */
#define CHK_LOCK_SERVERS 16

/*
 * Servers of a backend's test deployment (none for the file backend), found
 * by check_servers.c in a directory of NAME.pid, NAME.port and NAME.cmd files
 * (what tests/servers.sh writes) and described by the backend's check
 * adapter (tools.h). Indexes are stable for the whole check.
 */
typedef struct chk_servers {
    const char *backend;
    unsigned topo;   /* the deployment's trait, one CHK_TOPO_* */
    int count;
    int quorum;      /* data servers a lock needs (a majority of a quorum or ensemble), else 1 */
    void *state;
    const char *(*name)(void *state, int idx);
    int (*port)(void *state, int idx);  /* its TCP port (on 127.0.0.1 or NAME.host) */
    /* Does it hold lock state (not a coordinator such as a sentinel)? */
    bool (*holds_data)(void *state, int idx);
    int (*start)(void *state, int idx); /* run NAME.cmd again; wait until it answers */
    int (*stop)(void *state, int idx);
    int (*kill)(void *state, int idx);  /* SIGKILL, and wait until it is gone */
    int (*pause)(void *state, int idx);
    int (*resume)(void *state, int idx);
    /* Cut server idx off from the other servers (1; its clients still
     * reach it) or reconnect it (0): -ENOTSUP where the deployment has no
     * way (partitionable says which can). */
    int (*partition)(void *state, int idx, int isolated);
    bool (*partitionable)(void *state, int idx);
    /* The servers that hold the state of lock `name` now (the master of its
     * key; every master for a quorum): their indexes in idx[0..max).
     * Returns how many, or a negative errno. */
    int (*lock_servers)(void *state, const char *name, int *idx, int max);
    /* Cut replication from master idx to its replicas, which keep what they
     * have and fall behind. Returns how many were cut, or a negative errno. */
    int (*cut_replication)(void *state, int idx);
    /* Wait until a server other than `old` serves lock `name` as master (a
     * failover); returns its index, or a negative errno (-ETIMEDOUT). */
    int (*wait_failover)(void *state, const char *name, int old, int64_t until_ns);
    /* The leader of a consensus ensemble now: its index, or a negative errno. */
    int (*leader)(void *state);
    /* Bring the deployment back as it was: start killed servers, continue
     * stopped ones, wait until the backend says it is settled. 0, or -1
     * with why. */
    int (*restore)(void *state, char *err, size_t errlen);
    void (*close)(void *state);
} chk_servers;

/*
 * Find the servers of `url` in `dir`. Returns 0 with *out set, 1 when the
 * backend has no servers to control here (*out NULL, why says why), or -1
 * on an error (why). check_servers.c.
 */
int chk_servers_open(const char *dir, const char *url, const char *backend, chk_servers **out,
                     char *why, size_t whylen);

typedef struct chk_config {
    const char *url;
    char backend[32];
    char url_shown[512];
    unsigned caps;
    int workers;
    int duration_ms;
    bool duration_given; /* -D: every run lasts duration_ms, long enough or not */
    int ttl_ms;       /* lock ttl for lease backends; the pause scenario's yardstick */
    /* A session backend whose held locks still have a deadline on the
     * holder's clock (dlock_valid_ms >= 0: ZooKeeper vouches for its
     * session): that span, learnt from a probe lock; 0 none. Its windows
     * end there, as a lease's do, and its server lets go only later (a
     * session outlives the span by half of it). */
    int session_ttl_ms;
    /* The client's timeouts: a worker told to stop may take a connect and
     * a request or two that long before it is gone. */
    int connect_timeout_ms, op_timeout_ms;
    int max_pause_us; /* random pause between read and write */
    const chk_servers *servers; /* NULL: none */
    char servers_note[512];     /* why there are none */
    /* The deployment's topology (trait 0 when the backend states none, and
     * why in topo.indirect). */
    dh_topo topo;
} chk_config;

struct chk_scenario;

/*
 * The servers of the URL, for the workers' relays (check_relay.c): where the
 * relays connect, and how to write a worker's URL with its relay's ports.
 */
typedef struct chk_upstreams {
    int n;      /* hosts of the URL */
    int quorum; /* of them a lock needs (the topology's quorum) */
    struct {
        char host[256];
        int port;
    } host[CHK_RELAY_HOSTS];
    char prefix[1024]; /* the URL up to its hosts: scheme://[userinfo@] */
    char suffix[1024]; /* after them: [/path][?query] */
} chk_upstreams;

/* A worker's relay: a process forwarding the worker's TCP connections to
 * the servers of the URL, one listener on the loopback interface per host. */
typedef struct chk_relay {
    pid_t pid;      /* 0 when none */
    int ctl;        /* write end of its control pipe: a byte freezes it */
    bool frozen;
    int64_t frozen_ns;
    char url[2300]; /* the URL the worker uses: the relay's ports */
} chk_relay;

/* Can `url`, of a deployment of topology `topo`, be relayed? 0 with *u
 * filled, or -1 with the reason in why (a deployment whose servers name
 * other servers to their clients). */
int chk_upstreams_parse(const char *url, const dh_topo *topo, chk_upstreams *u,
                        char *why, size_t whylen);
/* Start worker slot's relay (r->relay[slot]), replacing any. 0 or -errno. */
int chk_relay_start(chk_run *r, int slot);
/* Freeze (SIGSTOP at a point between two forwarded writes, connections left
 * open) or continue the relay; 0 or -errno. */
int chk_relay_freeze(chk_run *r, int slot);
int chk_relay_thaw(chk_run *r, int slot);
/* When the lease of what worker slot holds runs out on the servers, from
 * what its relay forwarded last (while frozen nothing more reaches them):
 * per host, the last forward + ttl; the lock, when a quorum has run out.
 * 0 if unknown (a host never written to). */
int64_t chk_relay_expiry(const chk_run *r, int slot, int ttl_ms);

struct chk_run {
    const chk_config *cfg;
    const chk_ctl *ctl;
    chk_shm *sh;
    ms_group group;
    pid_t resource_pid;
    char sock[108];   /* abstract address of the resource, without the NUL */
    char lock[96];    /* lock name of this run */
    bool fencing;     /* the resource checks tokens */
    int ttl_ms;       /* the lock ttl of this run (the scenario may want longer) */
    bool server_faults; /* workers ride out backend errors (servers come and go) */
    bool relayed;     /* each worker reaches the servers through its relay */
    bool claims;      /* workers run claims on keys LOCK-kN (chk_scenario.claims) */
    chk_upstreams up; /* ... these */
    chk_relay relay[CHK_MAX_WORKERS];
    int split_member;        /* the server worker 0 alone reaches (-1: none) */
    char split_url[2][2300]; /* worker 0's URL, the others' (chk_scenario.split) */
    bool servers_touched; /* restore the deployment after the run */
    int next_id;
    bool paused[CHK_MAX_WORKERS]; /* stopped by ctl->pause */
    int64_t start_ns, end_ns;
    int interrupted;  /* signal number */
    char error[512];  /* harness error, "" if none */
    char note[256];   /* what the scenario observed, for the report */
    /* fault bookkeeping, for the scenario's validity */
    int faults_injected;
    int faults_effective;
    int acq_granted, acq_failed, acq_held; /* stopped acquisitions: outcomes */
    int acq_kept; /* ... whose session the servers kept (H_KEPT): not judged */
};

/* Run scenario `inject` once; fills the history. Returns 0, or -1 when the
 * harness itself failed (r->error) or was interrupted (r->interrupted). */
/* How long a run of scenario sc lasts: -D as given; else at least
 * duration_ms, and as long as the fault needs to take effect on this
 * backend (a span to run out on the servers, an election). */
int chk_run_ms(const chk_config *cfg, const struct chk_scenario *sc);
int chk_run_once(chk_run *r, const chk_config *cfg, const struct chk_scenario *sc, bool fencing,
                 hist_run *out);

/* ---- helpers for scenarios (check_run.c) -------------------------------- */

/* Sleep, reaping dead children. Non-zero when the run must stop now
 * (interrupted, harness error). */
int chk_sleep(chk_run *r, int64_t ns);
bool chk_time_up(const chk_run *r);
/* A fault scenario's next fault: until the run's end, and the first one
 * however late its holder comes (chk_fault_until: the bound of the wait
 * for it, at least CHK_FIRST_FAULT_NS from now). A slow start, under load
 * or a sanitizer, must not leave a short run without its fault. */
#define CHK_FIRST_FAULT_NS 10000000000LL
bool chk_fault_more(const chk_run *r);
int64_t chk_fault_until(const chk_run *r);
/* Arm a fault point; the next worker that reaches it takes it. */
void chk_arm(chk_run *r, int fault);
void chk_disarm(chk_run *r);
/* The slot of the worker that took the armed fault, once it is parked;
 * -1 at the end of the run or on a stop. */
int chk_wait_claim(chk_run *r, int64_t until_ns);
/* Let a parked worker go on. */
void chk_let_go(chk_run *r, int slot);
/* Wait until slot's write count exceeds `after`; 0, or -1 on timeout/stop. */
int chk_wait_writes(chk_run *r, int slot, uint64_t after, int64_t until_ns);
/* Close (1) or open (0) the gate before acquiring. chk_gate_wait: until
 * every worker waits at the closed gate (then nobody holds or waits for the
 * lock); the slot of one of them, or -1. chk_gate_pass: let that one through. */
void chk_gate(chk_run *r, int closed);
int chk_gate_wait(chk_run *r, int64_t until_ns);
void chk_gate_pass(chk_run *r, int slot, bool watched);
/* The system call a worker's main thread is in (/proc/PID/syscall), -1 when
 * running or unknown. */
long chk_worker_syscall(chk_run *r, int slot);
/* Every thread of the worker asleep in the kernel, none runnable: none of
 * its client's threads has a request still to send. */
bool chk_worker_asleep(chk_run *r, int slot);
/* The state letter of a process or thread (/proc/ID/stat), 0 when there
 * is no such one. */
char chk_proc_state(pid_t pid);
/* On how many of the given TCP ports (servers on the loopback interface) a
 * request of the worker lies unread: a connection of the worker to the port
 * whose server side has bytes in its receive queue (/proc/net/tcp, tcp6). */
int chk_requests_pending(chk_run *r, int slot, const int *ports, int n);
/* Log a harness event about server idx (H_SERVER_*, H_REPL_CUT, ...). */
void chk_server_event(chk_run *r, int type, int idx);

/* ---- scenarios (check_scenarios.c) -------------------------------------- */

typedef enum chk_validity {
    CHK_VALID_RUNS,     /* valid when sections ran (no fault to prove) */
    CHK_VALID_TAKEOVER, /* the fault hit holders and the lock was taken over */
    CHK_VALID_CANARY,   /* the canary (no fencing) must lose updates */
    CHK_VALID_SERVER,   /* servers were faulted; the lock must stay available */
    CHK_VALID_DATALOSS, /* the lock service lost data; the backend's claim decides */
    CHK_VALID_STOPACQ,  /* a client stopped with its acquisition in flight */
    CHK_VALID_PARTITION, /* holders cut off from the servers; the canary must lose updates */
    CHK_VALID_CLAIMS    /* claim runners faulted; some key must have run again */
} chk_validity;

typedef struct chk_scenario {
    const char *name;
    const char *about;
    unsigned needs_caps;   /* the fault only takes effect with these caps */
    const char *na_reason; /* why it cannot take effect without them */
    int needs_servers;     /* 1: it faults servers of the backend */
    unsigned topos;        /* ... of deployments with these traits (CHK_TOPO_*), 0 any */
    chk_validity validity;
    bool canary;           /* also run without fencing at the resource */
    int min_ttl_ms;        /* run with at least this ttl (0: --ttl as given) */
    int (*inject)(chk_run *r);
    bool relayed;          /* workers reach the servers through relays (check_relay.c) */
    /* Why it cannot run at all with this configuration (not run, n/a), or
     * NULL. */
    const char *(*cannot_run)(const chk_config *cfg, char *why, size_t len);
    /* Worker 0 reaches only one member (a follower that the deployment can
     * cut off from the others, chk_run.split_member), the others every
     * other member. */
    bool split;
    /* Workers run claims (dlock_claim_begin) on keys LOCK-k0, LOCK-k1, ...
     * instead of the locked read and write; the fault point is inside a
     * claim's run. */
    bool claims;
} chk_scenario;

extern const chk_scenario chk_scenarios[];
extern const size_t chk_nscenarios;
const chk_scenario *chk_scenario_find(const char *name);

/* Do held locks have a deadline on the holder's clock (a lease, or a
 * session the client vouches for)? */
static inline bool chk_has_deadline(const chk_config *cfg)
{
    return (cfg->caps & DLOCK_CAP_LEASE) || cfg->session_ttl_ms > 0;
}

/* How long a holding of span ttl_ms lives on the servers past the holder's
 * last sign of life: a session the client vouches for outlives its span by
 * half of it, and the servers may round a lease up. */
static inline int64_t chk_server_span_ms(const chk_config *cfg, int ttl_ms)
{
    return (int64_t)ttl_ms * (cfg->session_ttl_ms ? 3 : 2) / 2 + cfg->topo.lease_slack_ms;
}

#endif
