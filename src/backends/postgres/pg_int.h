/* SPDX-License-Identifier: MIT */
/*
 * pg_int.h — the PostgreSQL backend's libpq table, sessions, statements
 * and modes, for its files: postgres.c (what the modes share: libpq,
 * sessions, the pool, token draws, the names table, clients), one file per
 * mode (advisory.c, lease.c, rowlock.c: each a pg_mode, its operations
 * table) and tools.c (the harness's operations).
 */
#ifndef DLOCK_PG_INT_H
#define DLOCK_PG_INT_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <libpq-fe.h>

#include "internal.h"
#include "support/support.h"

/* libpq's functions we call, one list: the table's fields and the names
 * pq_load looks up (PQ + name). */
#define PG_LIBPQ_FUNCS(X)                                                                    \
    X(connectStartParams) X(connectPoll) X(status) X(socket) X(finish) X(errorMessage)       \
    X(setnonblocking) X(setNoticeProcessor) X(serverVersion) X(backendPID)                   \
    X(sendQueryParams) X(flush) X(consumeInput) X(isBusy) X(getResult) X(resultStatus)       \
    X(resultErrorField) X(resultErrorMessage) X(ntuples) X(getvalue) X(getisnull) X(clear)   \
    X(conninfoParse) X(conninfoFree) X(notifies) X(freemem) X(enterPipelineMode)             \
    X(pipelineSync) X(sendPrepare) X(sendQueryPrepared)

typedef struct pg_api {
#define PG_API_FIELD(f) __typeof__(PQ##f) *f;
    PG_LIBPQ_FUNCS(PG_API_FIELD)
#undef PG_API_FIELD
} pg_api;
/* libpq's functions, once loaded (pq_load) */
extern pg_api pg_lib;

#define PG_IDENT_MAX 63 /* PostgreSQL's identifier limit (NAMEDATALEN - 1) */

#define PG_PREPARED_MAX 16 /* fixed statements a session keeps prepared */

/* One server session; `sess` is its place on the client's watch list while
 * it holds a lock (advisory, rowlock). */
typedef struct pg_conn {
    PGconn *pg;
    dl_pooled pooled; /* its place among the idle ones */
    int pending;      /* statements sent whose replies are unread (pipeline mode) */
    bool reused;      /* taken from the pool: it may have died idle (one retry) */
    bool failed;      /* a statement failed on it: not pooled again (see pg_stmt_send_fixed) */
    bool unnamed;     /* behind a transaction pooler: no prepared statements (pg_stmt_send_fixed) */
    /* the session's lock_timeout in ms as last set ("0" by pg_conn_open), ""
     * unknown (behind a transaction pooler): an advisory wait sets it only
     * when it differs (see advisory_send) */
    char lock_timeout_ms[24];
    const char *prepared[PG_PREPARED_MAX]; /* fixed statements prepared on it, by address */
    int nprepared;
    dl_session sess;
} pg_conn;

typedef struct pgclient {
    const char **keys, **vals; /* libpq's connection parameters, NULL-ended */
    size_t nkv;
    char *strings;                     /* storage for what keys/vals point at */
    char table[2 * PG_IDENT_MAX + 8];  /* quoted, schema-qualified */
    char seq[2 * PG_IDENT_MAX + 8];    /* the tokens' sequence, TABLE_token */
    char runs[2 * PG_IDENT_MAX + 8];   /* dlock_token_run (UNLOGGED): see pg_token_ctes */
    char epochs[2 * PG_IDENT_MAX + 8]; /* dlock_token_epoch: see pg_token_ctes */
    char *sql_run_get, *sql_epoch_bump, *sql_run_put; /* advisory, rowlock: see run_ensure */
    const struct pg_mode *m;                          /* the URL's mode= */
    bool txpool; /* pooler=transaction: no session state at all */
    char *sql_row_ensure, *sql_row_value, *sql_row_info; /* rowlock */
    char *sql_row_try, *sql_row_wait, *sql_row_unvalue;  /* rowlock */
    char values[2 * PG_IDENT_MAX + 8]; /* rowlock: TABLE_holder, who took each row last */
    char appname[128];                 /* "dlock pid N on HOST": holders in pg_stat_activity */
    char *sql_try_x, *sql_try_r, *sql_wait_x, *sql_wait_r, *sql_redraw; /* advisory */
    /* advisory, [how][shared]: the grant without the holder's row; how: 0 a
     * try, 1 a wait that sets lock_timeout, 2 one whose session has it set */
    char *sql_bare[3][2];
    char *sql_take, *sql_expiry, *sql_free, *sql_renew; /* lease */
    char *sql_renew_many;                               /* lease: a batch */
    char *sql_enqueue, *sql_refresh, *sql_dequeue;      /* lease: its waiters */
    char *sql_give_up; /* lease: what an acquisition that gave up may have left */
    char *sql_setvalue;                                 /* lease: a leader's value */
    char waiters[2 * PG_IDENT_MAX + 8];                 /* lease: TABLE_wait */
    char names[2 * PG_IDENT_MAX + 8]; /* dlock_names: the mode and table each name is used in */
    char claims[2 * PG_IDENT_MAX + 8]; /* dlock_claims: claims' records (records.c) */
    atomic_bool claims_ready;          /* the claims table is there */
    atomic_bool spoke;                 /* a connection was made: it is PostgreSQL */
    const char *mode;                 /* "advisory", "lease" or "rowlock" */
    char *sql_names_get, *sql_names_add, *sql_names_drop;
    /* advisory: the names table's change counter (see names_announce,
     * postgres.c): its sequence's name, a parameter of the grant; NULL when
     * this role has none to read (then every grant reads the names) */
    char names_changes[2 * PG_IDENT_MAX + 8];
    const char *names_changes_param;
    char *sql_names_quiet;
    const char *redacted;
    int op_timeout_ms, connect_timeout_ms;

    dl_pool pool;           /* idle sessions, at most PG_POOL_IDLE_MAX */
    dl_session_watch watch; /* the sessions that hold locks */
} pgclient;

typedef struct pglock {
    int64_t key;
    pg_conn *conn; /* advisory, rowlock: while held */
    int slot;      /* lease: the row held */
    bool named;    /* its row in the names table was there at its last grant */
    bool rowed;    /* advisory: a grant of this handle wrote its row in the table */
    /* advisory: the names read that found only its own row, and the names
     * table's change counter and the token epoch before it (see
     * names_announce, postgres.c) */
    bool names_seen;
    int64_t names_changes;
    uint64_t names_epoch;
} pglock;

#define PG_EPOCH_SHIFT 44 /* tokens: (epoch << 44) + offset in the run (see pg_token_ctes) */
/* The names table's (oid rel) two-key transaction lock, shared by its
 * writers until they commit (see names_announce, postgres.c); the first
 * key positive ("dlkn"), apart from TOKEN_LOCK's. */
#define NAMES_QUIET_KEY(rel) "1684826990, ((" rel ")::oid::bigint - 2147483648)::int"
/* lease: a row held now */
#define LEASE_HELD "owner IS NOT NULL AND expires >= clock_timestamp()"
/* pg_locks names an int8 advisory key by its halves and objsubid 1. */
#define PG_LOCKS_OF(key)                                                                     \
    "l.locktype = 'advisory' AND l.objsubid = 1 AND l.database = "                           \
    "(SELECT oid FROM pg_database WHERE datname = current_database()) AND "                  \
    "l.classid = ((" key " >> 32) & 4294967295)::oid AND l.objid = (" key " & 4294967295)::oid"

/*
 * A mode: what mode= names, chosen by the client at open (as SQLite's unix
 * VFS picks posixIoMethods or dotlockIoMethods per file). Its operations
 * become the client's (c->ops), its capabilities the client's (c->caps);
 * no operation asks which mode it is in. The table is postgres.c's
 * (pg_modes, beside the backend's facts); each mode's file gives its
 * operations, its statements and its tables.
 */
typedef struct pg_mode {
    const char *name;  /* in mode= and in the names table */
    const char *table; /* the default lock table */
    unsigned caps;     /* DLOCK_CAP_* */
    bool txpool_ok;    /* holds nothing in a session: works behind a transaction pooler */
    bool keyed;        /* its holders show in pg_locks by the name's key (else: LEASE_HELD rows) */
    const dl_backend_ops *ops;
    int (*build_sql)(pgclient *pc);                          /* its statements, at open */
    int (*tables)(dlock_client *c, char *why, size_t wlen); /* its tables, made if missing */
} pg_mode;

/* The operations every mode shares (postgres.c). */
int pg_client_open(dlock_client *c, const dl_url *u);
void pg_client_close(dlock_client *c);
int pg_lock_init(dlock_lock *l);
void pg_lock_fini(dlock_lock *l);
int pg_list(dlock_client *c, const char *prefix, dlock_list_fn fn, void *arg);

extern const dl_backend_ops pg_advisory_ops, pg_lease_ops, pg_rowlock_ops;
int pg_advisory_build_sql(pgclient *pc);
int pg_lease_build_sql(pgclient *pc);
int pg_rowlock_build_sql(pgclient *pc);
int pg_advisory_tables(dlock_client *c, char *why, size_t wlen);
int pg_lease_tables(dlock_client *c, char *why, size_t wlen);
int pg_rowlock_tables(dlock_client *c, char *why, size_t wlen);

pgclient *pc_of(dlock_client *c);
void pg_conn_close(pg_conn *k);
/* Send one statement with text parameters on k (see run). */
int pg_stmt_send(pg_conn *k, const char *sql, int n, const char *const *vals, int64_t until_ns,
                 int cancel_fd, char *why, size_t wlen);
/* The reply to the statement sent last on k; the replies still unread
 * before it (a release's unlock) are read and dropped: the session's end
 * would have let go of anything they failed to. */
int pg_stmt_wait(pg_conn *k, int64_t until_ns, int cancel_fd, PGresult **out, char *why,
                 size_t wlen);
/*
 * Run one statement with text parameters on k, waiting at most until
 * until_ns (-1: no bound) and while cancel_fd is quiet. Returns 0 with the
 * statement's result in *out (caller clears; a server error is a result
 * too: check its status), or DLOCK_EUNREACHABLE (the session is gone),
 * DLOCK_ETIMEDOUT or DLOCK_ECANCELED — after which the statement may still
 * run on the server: the caller must not reuse k. why gets one line.
 */
int pg_run(pg_conn *k, const char *sql, int n, const char *const *vals, int64_t until_ns,
           int cancel_fd, PGresult **out, char *why, size_t wlen);
/* run for a statement of fixed text (see pg_stmt_send_fixed). */
int pg_run_fixed(pg_conn *k, const char *sql, int n, const char *const *vals, int64_t until_ns,
                 int cancel_fd, PGresult **out, char *why, size_t wlen);
/* A new session, connected within until_ns and set up: non-blocking,
 * notices swallowed, and on servers from 14 on a check of the client's
 * socket while a statement waits. */
int pg_conn_open(pgclient *pc, int64_t until_ns, int cancel_fd, pg_conn **out, char *why,
                 size_t wlen);
/* An idle session from the pool, or a new one. */
int pg_conn_get(pgclient *pc, int64_t until_ns, int cancel_fd, pg_conn **out, char *why,
                size_t wlen);
/* Give a session back to the pool (or close it when the pool is full). */
void pg_conn_put(pgclient *pc, pg_conn *k);
int pg_pool_run(dlock_client *c, const char *sql, int n, const char *const *vals, PGresult **out,
                char *why, size_t wlen);
int64_t pg_key_of(const pgclient *pc, const char *name);

/* Claims' records, in every mode's table (records.c). */
int pg_record_get(dlock_client *c, const char *key, char **val, size_t *len, uint64_t *ver);
int pg_record_put(dlock_client *c, const char *key, const char *val, size_t len, int64_t ttl_ms,
                  uint64_t ver);
int pg_record_del(dlock_client *c, const char *key);
#define PG_RECORD_OPS                                                                        \
    .record_get = pg_record_get, .record_put = pg_record_put, .record_del = pg_record_del

/* ---- what the modes share (postgres.c) ---- */

/* First line of a libpq message, without its "ERROR:  " prefix. */
const char *pg_one_line(const char *msg, char *buf, size_t len);
/* The SQLSTATE of a failed result ("" for success), and what it means. */
const char *pg_sqlstate(const PGresult *r);
int pg_code_of_state(const char *st);
/* Send a statement of fixed text, prepared once per session. */
int pg_stmt_send_fixed(pg_conn *k, const char *sql, int n, const char *const *vals,
                       int64_t until_ns, int cancel_fd, char *why, size_t wlen);
/* The reply to the oldest statement sent on k and not read yet (out NULL:
 * read and dropped). */
int pg_stmt_read(pg_conn *k, int64_t until_ns, int cancel_fd, PGresult **out, char *why,
                 size_t wlen);
/* Fixed statements sent in one flight, each with a sync point of its own;
 * their replies in outs. */
int pg_run_fixed_seq(pg_conn *k, int count, const char *const *sqls, const int *ns,
                     const char *const *const *vals, int64_t until_ns, int cancel_fd,
                     PGresult **const *outs, char *why, size_t wlen);
/* The same in one segment (one sync point: one transaction of the
 * server's, one reply), at most 4: an error skips the statements after it
 * (PGRES_PIPELINE_ABORTED). */
int pg_run_fixed_joint(pg_conn *k, int count, const char *const *sqls, const int *ns,
                       const char *const *const *vals, int64_t until_ns, int cancel_fd,
                       PGresult **const *outs, char *why, size_t wlen);
/* A waiter whose session ended waits on, on a new one: connecting is
 * tried again until retry_until (see pg_retry_until_of). */
int64_t pg_retry_until_of(const pgclient *pc, const dlock_lock *l, int64_t deadline_ns);
int pg_conn_get_retry(pgclient *pc, int64_t retry_until, int cancel_fd, pg_conn **out,
                      char *why, size_t wlen);
/* Whether a SQLSTATE says the server ended the session (57P, 08). */
bool pg_state_session_ended(const char *sqlstate);
/* Whether a wait ended with deadline_ns may go on: time is left. */
bool pg_time_left(int64_t deadline_ns);
/* A statement that may still wait on the server: cancelled, then k closed. */
void pg_conn_abandon(pgclient *pc, pg_conn *k, int64_t until_ns);
/* The bound of a call made while acquiring l (l NULL: op_timeout_ms). */
int64_t pg_op_until(const pgclient *pc, const dlock_lock *l);
/* The deadline of the call in progress on l, -1 if it has none of its own
 * (pg_pool_run_until then bounds a connect by connect_timeout_ms and the
 * statement by op_timeout_ms). */
static inline int64_t pg_call_until(const dlock_lock *l)
{
    return l->op_deadline_ns > 0 ? l->op_deadline_ns : -1;
}
/* One statement on a pooled session, for the calls that hold no lock
 * (until < 0: see pg_call_until). */
int pg_pool_run_until(dlock_client *c, int64_t until, const char *sql, int n,
                      const char *const *vals, PGresult **out, char *why, size_t wlen);

/* The session modes (advisory, rowlock): a held lock's session watched. */
int pg_watch_conn(dlock_lock *l, pg_conn *k, char *why, size_t wlen);
pg_conn *pg_unwatch_conn(dlock_lock *l);
void pg_rewatch_conn(dlock_lock *l, pg_conn *k);

/* One try at a session mode's grant, as the shared acquisition
 * (pg_session_acquire) hands it to the mode. */
typedef struct pg_try {
    pg_conn *k;              /* the session; NULL once the mode closed it */
    bool reused;             /* k came from the pool */
    int64_t deadline_ns;     /* the acquisition's */
    int64_t until;           /* bound of each statement */
    int cancel_fd;
    PGresult *r;             /* the grant statement's result */
    PGresult *names;         /* the name's rows in the names table (see pg_names_check) */
    PGresult *quiet;         /* advisory: no names write in flight (see names_announce) */
    char key[24];            /* the name's advisory key */
    char holder[300];        /* "OWNER pid N on HOST" (pg_try_holder), "" until used */
    char timeout[24];        /* ms, for lock_timeout (a wait) */
    char why[300];
} pg_try;

/* What a session mode does in pg_session_acquire: send its statements on
 * t->k (t->r, t->names: its results; a failure it has said and closed k
 * for sets t->k NULL), then, once they ran without error, take the grant
 * from t->r (token, names check) or say why not (k put back or closed). */
typedef struct pg_grant {
    int (*send)(dlock_lock *l, pg_try *t);
    int (*took)(dlock_lock *l, pg_try *t);
    /* The grant statement broke a unique key (NULL: none can): what to say. */
    int (*unique_violation)(dlock_lock *l);
} pg_grant;

int pg_session_acquire(dlock_lock *l, int64_t deadline_ns, const pg_grant *g);
/* t->holder, made at its first use. */
const char *pg_try_holder(dlock_lock *l, pg_try *t);
/* The release of a session mode: sql (n parameters: key, token) on the
 * holding session; says_held: its first column says whether it held the
 * lock; then (name, owner; NULL: none) sent after it, not waited for. */
int pg_session_release(dlock_lock *l, const char *sql, int n, bool says_held, const char *then);
void pg_session_abandon(dlock_lock *l);

/* Tokens without a WAL flush per grant (advisory, rowlock): see
 * pg_token_ctes in postgres.c. A draw: 0 drawn (l->token set), 1 nothing
 * drawn (no epoch in force), or a code (why). */
typedef int (*pg_draw_fn)(dlock_lock *l, void *arg, char *why, size_t wlen);
int pg_draw_under_epoch(dlock_lock *l, pg_draw_fn draw, void *arg, char *why, size_t wlen);
char *pg_token_ctes(pgclient *pc, const char *rel, const char *cond);
int pg_run_build_sql(pgclient *pc);
/* A mode's tables with tokens (advisory, rowlock): pg_tables_ensure with
 * check (parameters $1 the table, $2 its sequence) and ddl, the sequence
 * also made UNLOGGED where it may be (see postgres.c). */
int pg_token_tables_ensure(dlock_client *c, const char *check, int n, const char *const *p,
                           const char *const *ddl, size_t nddl, char *why, size_t wlen);

/* After l was granted: whether it may keep it (0) or the name is held in
 * another mode (DLOCK_ECONFLICT), see postgres.c's "one name, one mode". */
int pg_names_check(dlock_lock *l, PGresult *got, int col, bool *alone, char *why,
                   size_t wlen);

/* The leader's value of name: sql's first column with (name, key) as its
 * first n parameters. */
int pg_value_by(dlock_client *c, const char *name, const char *sql, int n, char *buf,
                size_t len);
/* inspect: the holder in r's row 0, column col, written "OWNER pid N on
 * HOST" by the holder (the owner id is left out), into info->holder. */
void pg_holder_into(const PGresult *r, int col, dlock_info *info);
/* The start of a break's statement that ends the sessions holding a lock
 * (pg_locks l): "PG_BREAK_ENDED <from l ...>) AS t". */
#define PG_BREAK_ENDED                                                                       \
    "SELECT count(*) FILTER (WHERE ended), count(*) FROM (SELECT "                           \
    "pg_terminate_backend(l.pid) AS ended FROM "
/* dlock_break: the holder inspected (c->ops->inspect), then sql run with
 * param; its two columns: sessions ended, sessions to end. */
int pg_break_by(dlock_client *c, const char *name, dlock_info *broken, const char *sql,
                const char *param);
/* Tables a client needs (the kind: "lock" for a mode's, "claims"; table:
 * the one named when this role may not create it): check (n parameters p)
 * says "t" when they are all there; else the ddl statements run in order. */
int pg_tables_ensure(dlock_client *c, const char *kind, const char *table, const char *check,
                     int n, const char *const *p, const char *const *ddl, size_t nddl, char *why,
                     size_t wlen);
/* once, retried while it fails on what another try may change: two clients
 * creating the same tables at once, CREATE ... IF NOT EXISTS can still fail
 * on the catalog's unique index for the slower one, which looks again. */
int pg_ensure_retry(dlock_client *c, int (*once)(dlock_client *c, char *why, size_t wlen),
                    char *why, size_t wlen);

#endif
