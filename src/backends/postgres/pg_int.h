/*
 * pg_int.h — the PostgreSQL backend's libpq table, sessions and statements,
 * for its files (postgres.c, the lock; tools.c, the harness's operations).
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
    bool failed;      /* a statement failed on it: not pooled again (see stmt_send_fixed) */
    bool unnamed;     /* behind a transaction pooler: no prepared statements (stmt_send_fixed) */
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
    char runs[2 * PG_IDENT_MAX + 8];   /* dlock_token_run (UNLOGGED): see token_ctes */
    char epochs[2 * PG_IDENT_MAX + 8]; /* dlock_token_epoch: see token_ctes */
    char *sql_run_get, *sql_epoch_bump, *sql_run_put; /* advisory, rowlock: see run_ensure */
    bool lease;                                       /* mode=lease */
    bool rowlock;                                     /* mode=rowlock (else advisory) */
    bool txpool; /* pooler=transaction: no session state at all */
    char *sql_row_ensure, *sql_row_value, *sql_row_info; /* rowlock */
    char values[2 * PG_IDENT_MAX + 8]; /* rowlock: TABLE_holder, who took each row last */
    char appname[128];                 /* "dlock pid N on HOST": holders in pg_stat_activity */
    char *sql_try_x, *sql_try_r, *sql_wait_x, *sql_wait_r, *sql_redraw; /* advisory */
    char *sql_bare[2][2]; /* advisory, [wait][shared]: the grant without the holder's row */
    char *sql_take, *sql_expiry, *sql_free, *sql_renew; /* lease */
    char *sql_renew_many;                               /* lease: a batch */
    char *sql_enqueue, *sql_refresh, *sql_dequeue;      /* lease: its waiters */
    char *sql_setvalue;                                 /* lease: a leader's value */
    char waiters[2 * PG_IDENT_MAX + 8];                 /* lease: TABLE_wait */
    char names[2 * PG_IDENT_MAX + 8]; /* dlock_names: the mode and table each name is used in */
    const char *mode;                 /* "advisory", "lease" or "rowlock" */
    char *sql_names_get, *sql_names_add, *sql_names_drop;
    const char *redacted;
    int op_timeout_ms, connect_timeout_ms;

    dl_pool pool;           /* idle sessions, at most PG_POOL_IDLE_MAX */
    dl_session_watch watch; /* the sessions that hold locks */
} pgclient;

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
/* run for a statement of fixed text (see stmt_send_fixed). */
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

#endif
