/* SPDX-License-Identifier: MIT */
/*
 * my_int.h — the MySQL/MariaDB backend's client library table, connections,
 * statements and modes, for its files: mysql.c (what the modes share:
 * Connector/C, connections, statements, the pool, the session modes'
 * tokens, acquisition and release, clients), one file per mode
 * (getlock.c, lease.c, rowlock.c: each a my_mode, its operations table)
 * and tools.c (the harness's operations).
 */
#ifndef DLOCK_MY_INT_H
#define DLOCK_MY_INT_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <mysql.h>

#include "internal.h"
#include "support/support.h"

/* The client library's functions we call, one list: (the name after
 * mysql_, the table's field). */
#define MY_CLIENT_FUNCS(X)                                                                   \
    X(server_init, server_init) X(init, init) X(options, options) X(optionsv, optionsv)      \
    X(real_connect_start, connect_start) X(real_connect_cont, connect_cont)                  \
    X(close_start, close_start) X(close_cont, close_cont) X(get_socket, get_socket)          \
    X(get_timeout_value_ms, timeout_ms) X(errno, err_no) X(error, error)                     \
    X(thread_id, thread_id) X(get_server_info, server_info)                                  \
    X(autocommit_start, autocommit_start) X(autocommit_cont, autocommit_cont)                \
    X(commit_start, commit_start) X(commit_cont, commit_cont)                                \
    X(rollback_start, rollback_start) X(rollback_cont, rollback_cont)                        \
    X(stmt_init, stmt_init) X(stmt_prepare_start, prepare_start)                             \
    X(stmt_prepare_cont, prepare_cont) X(stmt_bind_param, bind_param)                        \
    X(stmt_execute_start, execute_start) X(stmt_execute_cont, execute_cont)                  \
    X(stmt_store_result_start, store_start) X(stmt_store_result_cont, store_cont)            \
    X(stmt_field_count, field_count) X(stmt_bind_result, bind_result) X(stmt_fetch, fetch)   \
    X(stmt_free_result, free_result) X(stmt_close, stmt_close)                               \
    X(stmt_affected_rows, affected_rows) X(stmt_insert_id, insert_id)                        \
    X(stmt_errno, stmt_errno) X(stmt_error, stmt_error)                                      \
    X(stmt_more_results, more_results) X(stmt_next_result_start, next_start)                 \
    X(stmt_next_result_cont, next_cont) X(stmt_fetch_column, fetch_column)

typedef struct my_api {
#define MY_API_FIELD(f, m) __typeof__(mysql_##f) *m;
    MY_CLIENT_FUNCS(MY_API_FIELD)
#undef MY_API_FIELD
} my_api;
/* The client library's functions, once loaded (my_load) */
extern my_api my_lib;

#define MY_KEY_MAX 64       /* GET_LOCK's name limit (MySQL 5.7+) */
#define MY_KEY_MAX_STR "64" /* (the same, in SQL text) */
#define MY_IDENT_MAX 48     /* our table names (the token table adds "_token") */

#define MY_POOL_IDLE_MAX 8 /* idle connections a client keeps */
#define MY_PREPARED_MAX 40 /* statements a connection keeps prepared */

/* One server connection; `sess` is its place on the client's watch list
 * while it holds a lock (getlock, rowlock). */
typedef struct my_conn {
    MYSQL *m;
    dl_pooled pooled;    /* its place among the idle ones */
    unsigned long id;    /* the server's connection id (KILL) */
    bool reused;         /* taken from the pool: it may have died idle (one retry) */
    bool failed;         /* not to be pooled again */
    bool broken;         /* cut mid-protocol (our bound, a lost connection): close it hard */
    unsigned last_errno; /* the server's error number of the last failed statement */
    bool txn;            /* autocommit off (rowlock) */
    int lock_wait_s;     /* innodb_lock_wait_timeout set on it (-1: the server's) */
    bool marks_seen;     /* the run's lease marks found (or made) on it: see marks_check */
    struct {
        const char *sql; /* by address: our statements are fixed per client */
        MYSQL_STMT *st;
    } prep[MY_PREPARED_MAX];
    int nprep;
    dl_session sess;
} my_conn;

typedef struct myclient {
    const struct my_mode *m; /* the URL's mode= */
    char *host, *user, *password, *db;
    int port;
    char *ssl_ca, *ssl_cert, *ssl_key;
    int ssl_mode; /* 0 none asked, 1 required, 2 verify the server */
    char holder[200];
    const char *redacted;
    int op_timeout_ms, connect_timeout_ms;
    bool mariadb;
    _Atomic int
        ps_ok; /* performance_schema.metadata_locks tells waiters: -1 unknown, 0 no, 1 yes */
    atomic_bool no_queue; /* lease: the server refuses GET_LOCK (Galera): every waiter polls */
    /* statements, with the table names in them */
    char *sql_release, *sql_inspect, *sql_waiters, *sql_list, *sql_setvalue, *sql_getvalue,
        *sql_name_of; /* getlock */
    char *sql_lease_take, *sql_lease_renew, *sql_lease_free, *sql_lease_free_all, *sql_lease_value,
        *sql_lease_getvalue, *sql_lease_info, *sql_lease_other, *sql_lease_make,
        *sql_lease_make_token; /* lease */
    char *sql_row_lock, *sql_row_probe, *sql_row_info, *sql_row_value,
        *sql_row_getvalue;   /* rowlock */
    char *sql_draw;          /* getlock, rowlock: a token, the holder's row in TABLE_live */
    char *sql_draw_unleased; /* getlock: the same, unless dlock_lease has a live row of the name */
    char *sql_draw_fast;     /* getlock, rowlock: one table opened less, the lease mark read */
    char *sql_try_draw;      /* getlock: GET_LOCK(key, 0) and sql_draw_fast in one statement */
    /* getlock: the procedure of GET_LOCK and the draw (see build_sql),
     * [1] with the row's own draw first (take2), [0] without (take1) */
    char *sql_take_proc[2];
    char *sql_take_call[2];  /* their CALLs */
    char *sql_proc_exists;   /* getlock: whether one is there */
    char *sql_draw_base_add; /* getlock: the column take2 reads, for a TABLE_live made before it */
    char take_proc_bare[2][MY_IDENT_MAX + 16]; /* their names */
    atomic_bool take_on;     /* getlock: a procedure there, ours to call: */
    atomic_int take_which;   /* ... this one */
    char *sql_mark_live, *sql_mark_evict, *sql_mark_ddl[2], *sql_mark_count; /* my_ensure_marks */
    char *sql_mark_run, *sql_mark_run_get, *sql_mark_col, *sql_mark_col_add;
    atomic_bool
        marks_on; /* getlock: dlock_live's lease marks are kept by triggers: draws read them */
    atomic_bool
        fast_off; /* TABLE_live has no lease_until (made by an older dlock): no sql_draw_fast */
    char *sql_run_get, *sql_epoch_bump, *sql_run_set, *sql_evict; /* their epoch; a full table */
    char *sql_queue;                                              /* lease: the waiters' GET_LOCK */
    char *sql_lease_live;       /* getlock, rowlock: lease holders of the name */
    char *sql_ddl[5];           /* the tables (kept: prepared statements are known by address) */
    atomic_bool lease_live_off; /* getlock, rowlock: no dlock_lease to read (lease_holds) */
    atomic_bool claims_ready;   /* the claims table is there (records.c) */
    char table[MY_IDENT_MAX + 3], tokens[MY_IDENT_MAX + 9]; /* quoted */
    char table_bare[MY_IDENT_MAX + 1], tokens_bare[MY_IDENT_MAX + 7];
    char live[MY_IDENT_MAX + 8], live_bare[MY_IDENT_MAX + 6]; /* TABLE_live (getlock, rowlock) */
    char *sql_table_exists;

    dl_pool pool;           /* idle connections, at most MY_POOL_IDLE_MAX */
    dl_session_watch watch; /* connections that hold locks */
} myclient;

/* A statement's parameter. */
typedef struct my_arg {
    char t; /* 's' string, 'i' integer, 'd' double, 'n' NULL */
    const char *s;
    long long i;
    double d;
} my_arg;
#define A_S(x) ((my_arg){'s', (x), 0, 0})
#define A_I(x) ((my_arg){'i', NULL, (long long)(x), 0})
#define A_D(x) ((my_arg){'d', NULL, 0, (x)})
#define A_NULL ((my_arg){'n', NULL, 0, 0})

/* A statement's outcome: the OK packet's counts, and any rows as text. */
typedef struct my_res {
    unsigned long long affected, insert_id;
    int nrows, ncols;
    char **cell; /* row-major; NULL for SQL NULL */
} my_res;

/* Drive one non-blocking call: `start` gives the first status, `cont` (an
 * expression using ev_) the next; rc gets our own bound's error, if any.
 * A call cut short leaves the connection mid-protocol: the caller must
 * not use it again (k->broken). */
#define MY_DRIVE(rc, m, until, cfd, start, cont)                                                   \
    do {                                                                                           \
        int st_ = (start);                                                                         \
        while (st_) {                                                                              \
            int ev_ = my_wait((m), st_, (until), (cfd));                                           \
            if (ev_ < 0) {                                                                         \
                (rc) = ev_;                                                                        \
                break;                                                                             \
            }                                                                                      \
            st_ = (cont);                                                                          \
        }                                                                                          \
    } while (0)

typedef struct mylock {
    char key[MY_KEY_MAX + 1]; /* getlock: GET_LOCK's name; lease: the waiters' lock */
    my_conn *conn;            /* getlock, rowlock: while held */
    int slot;                 /* lease: the row held */
    unsigned tries;           /* lease: tries at the slots, this acquisition */
    unsigned asks_skipped;    /* getlock: acquisitions left that queue at once (see get_acquire) */
    unsigned asks_skip;       /* getlock: how many the last busy ask skipped */
} mylock;

/*
 * A mode: what mode= names, chosen by the client at open (as SQLite's unix
 * VFS picks posixIoMethods or dotlockIoMethods per file). Its operations
 * become the client's (c->ops), its capabilities the client's (c->caps);
 * no operation asks which mode it is in. The table is mysql.c's
 * (my_modes, beside the backend's facts); each mode's file gives its
 * operations, its statements and its tables.
 */
typedef struct my_mode {
    const char *name;       /* in mode= */
    const char *table;      /* the default table */
    unsigned caps;          /* DLOCK_CAP_* */
    const char *key_prefix; /* of its locks' GET_LOCK names (lease: its waiters') */
    const dl_backend_ops *ops;
    int (*build_sql)(myclient *mc); /* its statements (0, or -1: out of memory) */
    /* its tables: CREATE statements in ddl[0..5) (NULL: none), their bare
     * names in bare[]; 0 or DLOCK_ENOMEM */
    int (*tables)(myclient *mc, char **ddl, const char **bare);
    /* after the tables are there (NULL: nothing) */
    int (*tables_made)(myclient *mc, my_conn *k, int64_t until, char *why, size_t wlen);
} my_mode;

extern const dl_backend_ops my_getlock_ops, my_lease_ops, my_rowlock_ops;
int my_getlock_build_sql(myclient *mc);
int my_lease_build_sql(myclient *mc);
int my_rowlock_build_sql(myclient *mc);
int my_getlock_tables(myclient *mc, char **ddl, const char **bare);
int my_lease_tables(myclient *mc, char **ddl, const char **bare);
int my_rowlock_tables(myclient *mc, char **ddl, const char **bare);
int my_getlock_tables_made(myclient *mc, my_conn *k, int64_t until, char *why, size_t wlen);

/* The operations every mode shares (mysql.c). */
int my_client_open(dlock_client *c, const dl_url *u);
void my_client_close(dlock_client *c);
int my_lock_init(dlock_lock *l);
void my_lock_fini(dlock_lock *l);
int my_list(dlock_client *c, const char *prefix, dlock_list_fn fn, void *arg);

myclient *mc_of(dlock_client *c);
void my_res_free(my_res *r);
/* Wait for what a non-blocking call asked for (status: MYSQL_WAIT_* bits),
 * bounded by until_ns (-1: none) and cancel_fd: the ready bits to hand back
 * to its *_cont, or DLOCK_ETIMEDOUT / DLOCK_ECANCELED / DLOCK_EIO. */
int my_wait(MYSQL *m, int status, int64_t until_ns, int cancel_fd);
void my_cut_why(int rc, char *why, size_t wlen);
/* Close k: politely (COM_QUIT, so that the server logs no aborted
 * connection) when it is healthy, else by shutting the socket first, so
 * that nothing can block. Its statements are freed after it (they are
 * only memory once the connection is gone). */
void my_conn_close(my_conn *k);
/* The prepared form of sql on k (prepared on first use). */
int my_stmt_of(my_conn *k, const char *sql, int64_t until_ns, int cancel_fd, MYSQL_STMT **out,
               char *why, size_t wlen);
/* Run sql with args on k, within until_ns (-1: no bound) and cancel_fd.
 * 0 with *res filled; or a server error's code (k still usable unless it
 * was a connection error); or our bound's (k->failed: abandon it). */
int my_q_exec(my_conn *k, const char *sql, const my_arg *args, int nargs, my_res *res,
              int64_t until_ns, int cancel_fd, char *why, size_t wlen);
/* A new connection, made within until_ns: TLS as the URL asks, keepalives
 * on its socket, the holder's description in its connection attributes. */
int my_conn_open(myclient *mc, int64_t until_ns, int cancel_fd, my_conn **out, char *why,
                 size_t wlen);
/* An idle connection from the pool (one in the autocommit state asked
 * for, if any), or a new one. */
int my_conn_get(myclient *mc, bool txn, int64_t until_ns, int cancel_fd, my_conn **out, char *why,
                size_t wlen);
/* Give a connection back to the pool (or close it). */
void my_conn_put(myclient *mc, my_conn *k);
int my_pool_exec(dlock_client *c, const char *sql, const my_arg *args, int nargs, my_res *res,
                 char *why, size_t wlen);
/* GET_LOCK's name for a lock name: the name itself up to 64 characters,
 * else "dlock:" and 128 bits of two FNV-1a hashes (the table catches a
 * collision). prefix distinguishes the lease waiters' names. */
void my_key_of(const char *prefix, const char *name, char *out, size_t len);

/* Claims' records, in every mode's table (records.c). */
int my_record_get(dlock_client *c, const char *key, char **val, size_t *len, uint64_t *ver);
int my_record_put(dlock_client *c, const char *key, const char *val, size_t len, int64_t ttl_ms,
                  uint64_t ver);
int my_record_del(dlock_client *c, const char *key);
#define MY_RECORD_OPS                                                                        \
    .record_get = my_record_get, .record_put = my_record_put, .record_del = my_record_del

/* ---- what the modes share (mysql.c) ---- */

#define HELD_MS "TIMESTAMPDIFF(MICROSECOND, %s, UTC_TIMESTAMP(6)) DIV 1000"
#define MY_LEASE_BACKOFF_MIN_MS 2
#define MY_LEASE_BACKOFF_MAX_MS 50
#define MY_SILENT_MS 500    /* a take unanswered this long: the server is not answering */
#define MY_FOREVER_S 31536000.0 /* GET_LOCK's "forever": a year */
/* The lease table (a literal, so that the format is checked at every -O):
 * its name and the holder's columns. */
#define MY_LEASE_DDL                                                                          \
    "CREATE TABLE IF NOT EXISTS %s (name VARBINARY(200) NOT NULL, slot INT NOT NULL, owner "   \
    "CHAR(32) CHARACTER SET ascii NOT NULL, expires DATETIME(6) NOT NULL, %s, PRIMARY KEY "    \
    "(name, slot)) ENGINE=InnoDB"
#define MY_HOLDER_COLS                                                                        \
    "holder VARCHAR(255) CHARACTER SET utf8mb4, since DATETIME(6), value VARBINARY(1000)"

/* A cell of a result as text, NULL for SQL NULL or none. */
const char *my_cell(const my_res *r, int row, int col);
/* A statement without parameters nor rows: 'c' COMMIT, 'r' ROLLBACK, ... */
int my_q_simple(my_conn *k, int what, int64_t until_ns, char *why, size_t wlen);
/* A spare connection opened for the pool, within until_ns. */
void my_conn_spare(myclient *mc, int64_t until_ns);
int my_pool_exec_until(dlock_client *c, int64_t until, const char *sql, const my_arg *args,
                       int nargs, my_res *res, char *why, size_t wlen);

/* Waits and their outcomes (see mysql.c). */
double my_wait_seconds(int64_t deadline_ns);
int64_t my_hard_bound(const dlock_lock *l);
int64_t my_wait_bound(const dlock_lock *l, int64_t deadline_ns);
bool my_time_left(int64_t deadline_ns);
bool my_interrupted(const my_conn *k);
int my_retry_pause(int64_t deadline_ns, int cancel_fd);
int my_not_taken(dlock_lock *l, int64_t deadline_ns, int early);
int my_wait_cut(dlock_lock *l, int64_t deadline_ns, my_conn *k, int rc, int early);
int my_take_failed(dlock_lock *l, int64_t deadline_ns, my_conn *k, int rc, const char *why,
                   int early);
bool my_session_ended(my_conn **kp, int rc, int64_t deadline_ns);
/* Waiters queued in GET_LOCK on key (-1: unknown). */
int my_key_waiters(dlock_client *c, const char *key);

/* The session modes (getlock, rowlock): a held lock's connection watched. */
int my_watch_conn(dlock_lock *l, my_conn *k, char *why, size_t wlen);
my_conn *my_unwatch_conn(dlock_lock *l);
void my_rewatch_conn(dlock_lock *l, my_conn *k);

/* Their tokens (see "Tokens" in mysql.c). my_draw_token's answers to an
 * ask (nothing held on k): */
#define DRAW_BUSY 3    /* the name's GET_LOCK is another's */
#define DRAW_UNASKED 4 /* not asked, or the ask failed and was undone (k->failed: close k) */
/* A draw already made on k by the take procedure (getlock's key_take):
 * the statement's affected rows and insert id. */
typedef struct my_drawn {
    bool made;
    unsigned long long affected, insert_id;
} my_drawn;
/* pre (NULL: none): the first draw, made with the take (my_take_draws). */
int my_draw_token(dlock_lock *l, my_conn *k, bool unleased, bool ask, const my_drawn *pre,
                  uint64_t *token, char *why, size_t wlen);
/* Whether the first draw on k would be the one statement sql_draw_fast,
 * with nothing to read before it, so that the take procedure may make it. */
bool my_take_draws(dlock_lock *l, const my_conn *k);
/* Whether a lease-mode holder has l's name (1), not (0), or a code. */
int my_lease_holds(dlock_lock *l, my_conn *k, char *why, size_t wlen);
/* Let go of the name's GET_LOCK on k, k back to the pool (or closed). */
void my_key_give_back(dlock_lock *l, my_conn *k);
/* A grant whose key's row is another name's: let go, and say which. */
int my_key_collision(dlock_lock *l, my_conn *k);
/* A session mode's grant on k, its token drawn (drew: my_draw_token's
 * answer, not 2): held and watched (0), or k closed or given back and the
 * error set on l (why: the draw's message). */
int my_session_hold(dlock_lock *l, my_conn *k, int drew, uint64_t token, char *why, size_t wlen);
/* The lease marks of the default table's holders (see mysql.c). */
int my_ensure_marks(myclient *mc, my_conn *k, int64_t until, char *why, size_t wlen);

/* A session mode's take: 0 held, or the error; *lease_held when a lease
 * holder of the name made it give everything back (then asked again). */
typedef int (*my_take_fn)(dlock_lock *l, int64_t deadline_ns, bool *lease_held);
int my_session_acquire(dlock_lock *l, int64_t deadline_ns, my_take_fn take);
/* A session mode's unlock on k, the connection holding the lock: 0 with
 * *was_held, or a code (why). */
typedef int (*my_unlock_fn)(dlock_lock *l, my_conn *k, int64_t until, bool *was_held, char *why,
                            size_t wlen);
int my_session_release(dlock_lock *l, my_unlock_fn unlock);
void my_session_abandon(dlock_lock *l);
/* RELEASE_LOCK of the name on k, the connection holding it. */
int my_release_key(dlock_lock *l, my_conn *k, int64_t until, my_res *r, char *why, size_t wlen);
/* The session modes' tables: TABLE_live, and ddl[2..5) (see mysql.c). */
char *my_live_ddl(myclient *mc);
int my_session_tables(char **ddl, const char **bare);

/* The reply to a leader's value query; a break's KILL of connection id. */
int my_value_reply(dlock_client *c, const char *name, int rc, my_res *r, const char *why,
                   char *buf, size_t len);
int my_kill_holder(dlock_client *c, const char *name, const char *id);

#endif
