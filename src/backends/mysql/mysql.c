/* SPDX-License-Identifier: MIT */
/*
 * mysql.c — MySQL / MariaDB: user locks (mode=getlock), the seeds'
 * unique-index lease table (mode=lease), a row locked by an open
 * transaction (mode=rowlock). Each mode is a file of its own (getlock.c,
 * lease.c, rowlock.c) ending in its operations table; a client takes its
 * mode's table and capabilities when it opens (my_modes, beside the facts
 * below), and no operation asks which mode it is in. This file is what the
 * modes share: Connector/C, connections and statements, the pool, the
 * session modes' (getlock, rowlock) watched connections, tokens,
 * acquisition and release, and clients.
 *
 * getlock and rowlock: liveness is the connection, watched by the core's
 * session watcher (dl_session_watch): a server that ends it (a restart,
 * KILL, dlock break) closes it and the holder is told at once; a silent
 * network is found by TCP keepalives (2 s idle, 3 probes 1 s apart). A waiter that gives up
 * (timeout, dlock_cancel) has its connection killed from another one:
 * closing our end alone would leave the server's thread queued in GET_LOCK
 * (the server does not look at an idle client's socket while it waits).
 *
 * One name is one lock across the modes: a rowlock holder holds GET_LOCK
 * of the name too, a lease taker keeps its take only while nobody holds
 * that GET_LOCK, and a getlock or rowlock grant gives itself back while a
 * live row of the name is in the default lease table (my_lease_holds; the
 * order of writes and reads makes a race safe, see there).
 *
 * MariaDB Connector/C is loaded at run time (dl_load_library) and used only
 * through its non-blocking calls (the _start and _cont pairs), each driven
 * here by poll() against our own deadlines and the lock's cancel
 * descriptor: its blocking calls cannot be bounded that way. Every
 * statement is a prepared statement with bound parameters, prepared once
 * per connection; table names come from the URL and are checked against a
 * strict pattern before they are quoted into the statement text.
 */
#include "internal.h"
#include "support/support.h"

static const dl_scheme mysql_schemes[] = {
    {"mysql", "mysql", 3306, false, DL_PATH_DBNAME},
    {"mariadb", "mysql", 3306, false, DL_PATH_DBNAME},
    {NULL, NULL, 0, false, DL_PATH_NONE},
};

/* The facts, the same whether Connector/C is there or not. */
#define MY_CAPS_GETLOCK                                                                      \
    (DLOCK_CAP_FENCING | DLOCK_CAP_FAIR | DLOCK_CAP_SESSION | DLOCK_CAP_NATIVE_BLOCKING)
#define MY_CAPS_LEASE (DLOCK_CAP_FENCING | DLOCK_CAP_SEMAPHORE | DLOCK_CAP_LEASE)
#define MY_CAPS_ROWLOCK                                                                      \
    (DLOCK_CAP_FENCING | DLOCK_CAP_FAIR | DLOCK_CAP_SESSION | DLOCK_CAP_NATIVE_BLOCKING)
#define MY_CAPS (MY_CAPS_GETLOCK | MY_CAPS_LEASE | MY_CAPS_ROWLOCK | DLOCK_CAP_CLAIMS) /* a client: its mode's */
#define MY_LIVENESS                                                                          \
    "mode=getlock: GET_LOCK, held while the holder's connection lives; the holder is told "  \
    "at once when the server ends the connection, and within ~5 s (TCP keepalives) when "   \
    "the network goes silent — while the server, which does not see the silence, keeps "    \
    "the lock for it; a paused holder keeps its lock. mode=rowlock: the same, a row locked " \
    "by an open transaction. mode=lease: a row whose expiry is the server's clock, renewed " \
    "every ttl/3; the holder is told on its own clock before the row can expire"
#define MY_FENCING                                                                           \
    "a counter per name in a table, raised and committed by the statement that takes the "  \
    "lock (getlock) or right after the take (lease, rowlock), never rolled back with the "  \
    "holder"
#define MY_PARAMS "mode table ssl-mode ssl-ca ssl-cert ssl-key"

#ifdef DLOCK_HAVE_MYSQL
#include "my_int.h"

#include <mysql.h>

#include <errno.h>
#include <inttypes.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

/* ---- Connector/C, loaded when the first client opens ------------------------------ */

#define MY_LIB "libmariadb.so.3"
my_api my_lib;
static char my_error[300];
static pthread_once_t my_once = PTHREAD_ONCE_INIT;

static void my_load(void)
{
    static const dl_sym syms[] = {
#define MY_API_SYM(f, m) {"mysql_" #f, offsetof(my_api, m)},
        MY_CLIENT_FUNCS(MY_API_SYM)
#undef MY_API_SYM
    };
    if (dl_load_library(MY_LIB, "libmariadb3", syms, sizeof syms / sizeof syms[0], &my_lib,
                        my_error, sizeof my_error) == 0 &&
        my_lib.server_init(0, NULL, NULL) != 0) /* not thread-safe: once, here */
        snprintf(my_error, sizeof my_error, "%s could not initialise", MY_LIB);
}

/* ---- connections and statements --------------------------------------------------- */

/* Tokens of getlock and rowlock (see "Tokens" below): the server run's
 * epoch above MY_EPOCH_SHIFT bits of UUID_SHORT()'s count since the run's
 * base. An offset at MY_OFFSET_RENEW starts a new epoch, long before it
 * could reach the epoch's bits. */
#define MY_EPOCH_SHIFT 44
#define MY_OFFSET_RENEW (1ULL << 43)
#define MY_EPOCH_MAX ((1ULL << (64 - MY_EPOCH_SHIFT)) - 1)
#define MY_CELL_MAX 1024    /* the longest value a result my_cell may hold */
/* Our sessions' own limits (see conn_open): no statement time limit
 * (MariaDB's max_statement_time, MySQL's max_execution_time), no idle
 * limit short of a year (wait_timeout's maximum), and no end for an idle
 * open transaction (MariaDB's idle_*_transaction_timeout: rowlock holds
 * one). */
#define MY_IDLE_MAX_S "31536000"
#define MY_SESSION_MARIADB                                                                   \
    "SET SESSION max_statement_time = 0, wait_timeout = " MY_IDLE_MAX_S ", "                \
    "idle_transaction_timeout = 0, idle_write_transaction_timeout = 0, "                     \
    "idle_readonly_transaction_timeout = 0"
#define MY_SESSION_MYSQL                                                                     \
    "SET SESSION max_execution_time = 0, wait_timeout = " MY_IDLE_MAX_S
#define MY_KILL_ROOM_MS 50  /* of the deadline's margin, kept for KILL of a wait cut short */
#define MY_RETRY_PAUSE_MS 20 /* between a waiter's retries after the server ended its wait */

myclient *mc_of(dlock_client *c)
{
    return c->bstate;
}

const char *my_cell(const my_res *r, int row, int col)
{
    if (!r->cell || row >= r->nrows || col >= r->ncols)
        return NULL;
    return r->cell[row * r->ncols + col];
}

void my_res_free(my_res *r)
{
    if (r->cell)
        for (int i = 0; i < r->nrows * r->ncols; i++)
            free(r->cell[i]);
    free(r->cell);
    memset(r, 0, sizeof *r);
}

/* A server error's code: permission, a lock wait that ran out, a lost
 * connection, or something a MySQL server would not say. */
static int code_of_errno(unsigned e)
{
    switch (e) {
    case 1044: /* access denied to the database */
    case 1045: /* access denied: user or password */
    case 1095: /* KILL: not the owner of that thread */
    case 1142: /* command denied on a table */
    case 1227: /* needs a privilege */
    case 1370: /* routine denied */
    case 1698: /* access denied (unix socket auth) */
        return DLOCK_EPERM;
    case 1049: /* unknown database */
        return DLOCK_ENOENT;
    case 1205: /* lock wait timeout (and NOWAIT) */
    case 3572: /* MySQL: NOWAIT */
        return DLOCK_ETIMEDOUT;
    case 1040: /* too many connections */
    case 1203: /* max_user_connections */
    case 1226: /* a user's resource limit (max_user_connections, per hour) */
    case 1053: /* server shutdown in progress */
    case 1927: /* connection killed */
    case 2002: /* can't connect (socket) */
    case 2003: /* can't connect (TCP) */
    case 2005: /* unknown host */
    case 2006: /* server has gone away */
    case 2013: /* lost connection during query */
    case 2055: /* lost connection (system error) */
        return DLOCK_EUNREACHABLE;
    case 2001: case 2004: case 2007: case 2008: case 2009: case 2012: case 2027:
        return DLOCK_EPROTO; /* the handshake or a packet made no sense */
    default:
        return e >= 2000 ? DLOCK_EUNREACHABLE : DLOCK_EPROTO;
    }
}

/* Wait for what a non-blocking call asked for (status: MYSQL_WAIT_* bits),
 * bounded by until_ns (-1: none) and cancel_fd: the ready bits to hand back
 * to its *_cont, or DLOCK_ETIMEDOUT / DLOCK_ECANCELED / DLOCK_EIO. */
int my_wait(MYSQL *m, int status, int64_t until_ns, int cancel_fd)
{
    short events = (short)((status & MYSQL_WAIT_READ ? POLLIN : 0) |
                           (status & MYSQL_WAIT_WRITE ? POLLOUT : 0) |
                           (status & MYSQL_WAIT_EXCEPT ? POLLPRI : 0));
    int64_t bound = until_ns;
    if (status & MYSQL_WAIT_TIMEOUT) {
        /* at least a millisecond: with no socket (a connect that failed)
         * Connector/C has been seen to ask for zero-length timeouts over
         * and over, which would spin */
        unsigned t = my_lib.timeout_ms(m);
        int64_t lib_until = dl_deadline_in(t ? t : 1);
        if (bound < 0 || lib_until < bound)
            bound = lib_until;
    }
    short rev = 0;
    int rc = dl_wait_fd((int)my_lib.get_socket(m), events, bound, cancel_fd, &rev);
    if (rc == DLOCK_ETIMEDOUT) /* ours first: the library's may recur */
        return until_ns >= 0 && dl_now_ns() >= until_ns ? DLOCK_ETIMEDOUT : MYSQL_WAIT_TIMEOUT;
    if (rc)
        return rc;
    int r = 0;
    if (rev & (POLLIN | POLLHUP | POLLERR))
        r |= MYSQL_WAIT_READ;
    if (rev & (POLLOUT | POLLHUP | POLLERR))
        r |= MYSQL_WAIT_WRITE;
    if (rev & POLLPRI)
        r |= MYSQL_WAIT_EXCEPT;
    r &= status;
    return r ? r : (status & (MYSQL_WAIT_READ | MYSQL_WAIT_WRITE | MYSQL_WAIT_EXCEPT));
}

void my_cut_why(int rc, char *why, size_t wlen)
{
    snprintf(why, wlen, "%s",
             rc == DLOCK_ECANCELED ? "canceled" : rc == DLOCK_EIO ? "poll failed"
                                                                  : "no answer in time");
}

/* Close k: politely (COM_QUIT, so that the server logs no aborted
 * connection) when it is healthy, else by shutting the socket first, so
 * that nothing can block. Its statements are freed after it (they are
 * only memory once the connection is gone). */
void my_conn_close(my_conn *k)
{
    if (!k)
        return;
    if (k->m) {
        int fd = (int)my_lib.get_socket(k->m);
        if (k->broken && fd >= 0)
            shutdown(fd, SHUT_RDWR);
        int st = my_lib.close_start(k->m);
        for (int i = 0; st && i < 100; i++) {
            if (i == 0 && fd >= 0)
                shutdown(fd, SHUT_RDWR); /* it would wait: stop waiting */
            st = my_lib.close_cont(k->m, st & (MYSQL_WAIT_READ | MYSQL_WAIT_WRITE));
        }
    }
    for (int i = 0; i < k->nprep; i++)
        my_lib.stmt_close(k->prep[i].st);
    free(k);
}

/* The prepared form of sql on k (prepared on first use). */
int my_stmt_of(my_conn *k, const char *sql, int64_t until_ns, int cancel_fd,
                   MYSQL_STMT **out, char *why, size_t wlen)
{
    for (int i = 0; i < k->nprep; i++)
        if (k->prep[i].sql == sql) {
            *out = k->prep[i].st;
            return 0;
        }
    MYSQL_STMT *st = my_lib.stmt_init(k->m);
    if (!st) {
        snprintf(why, wlen, "out of memory");
        return DLOCK_ENOMEM;
    }
    int ret = 0, rc = 0;
    MY_DRIVE(rc, k->m, until_ns, cancel_fd, my_lib.prepare_start(&ret, st, sql, strlen(sql)),
             my_lib.prepare_cont(&ret, st, ev_));
    if (rc || ret) {
        unsigned e = 0;
        if (rc) {
            my_cut_why(rc, why, wlen);
        } else {
            e = my_lib.stmt_errno(st);
            k->last_errno = e;
            rc = code_of_errno(e);
            snprintf(why, wlen, "%s", my_lib.stmt_error(st));
        }
        /* cut mid-prepare, or the connection failed (client errors are
         * 2000 and up); a statement the server refused leaves k fine */
        if (!ret || e >= 2000 || e == 0)
            k->failed = k->broken = true;
        /* freed after the connection (see conn_close): closing it now
         * could write to a connection in mid-protocol */
        if (k->nprep < MY_PREPARED_MAX) {
            k->prep[k->nprep].sql = NULL;
            k->prep[k->nprep++].st = st;
        } else {
            my_lib.stmt_close(st);
        }
        return rc;
    }
    if (k->nprep == MY_PREPARED_MAX) { /* not reached: fewer statements exist */
        k->failed = true;
        snprintf(why, wlen, "too many prepared statements");
        return DLOCK_EIO;
    }
    k->prep[k->nprep].sql = sql;
    k->prep[k->nprep++].st = st;
    *out = st;
    return 0;
}

/* Run sql with args on k, within until_ns (-1: no bound) and cancel_fd.
 * 0 with *res filled; or a server error's code (k still usable unless it
 * was a connection error); or our bound's (k->failed: abandon it). */
int my_q_exec(my_conn *k, const char *sql, const my_arg *args, int nargs, my_res *res,
                  int64_t until_ns, int cancel_fd, char *why, size_t wlen)
{
    memset(res, 0, sizeof *res);
    MYSQL_STMT *st;
    int rc = my_stmt_of(k, sql, until_ns, cancel_fd, &st, why, wlen);
    if (rc)
        return rc;
    MYSQL_BIND b[8];
    unsigned long len[8];
    if (nargs > 8) {
        snprintf(why, wlen, "too many parameters");
        return DLOCK_EIO;
    }
    memset(b, 0, sizeof b);
    for (int i = 0; i < nargs; i++) {
        switch (args[i].t) {
        case 's':
            len[i] = strlen(args[i].s);
            b[i].buffer_type = MYSQL_TYPE_STRING;
            b[i].buffer = (void *)args[i].s;
            b[i].buffer_length = len[i];
            b[i].length = &len[i];
            break;
        case 'i':
            b[i].buffer_type = MYSQL_TYPE_LONGLONG;
            b[i].buffer = (void *)&args[i].i;
            break;
        case 'd':
            b[i].buffer_type = MYSQL_TYPE_DOUBLE;
            b[i].buffer = (void *)&args[i].d;
            break;
        default:
            b[i].buffer_type = MYSQL_TYPE_NULL;
        }
    }
    int ret = 0;
    if (nargs && my_lib.bind_param(st, b)) {
        snprintf(why, wlen, "%s", my_lib.stmt_error(st));
        return DLOCK_EIO;
    }
    MY_DRIVE(rc, k->m, until_ns, cancel_fd, my_lib.execute_start(&ret, st),
             my_lib.execute_cont(&ret, st, ev_));
    if (!rc && !ret && my_lib.field_count(st) > 0)
        MY_DRIVE(rc, k->m, until_ns, cancel_fd, my_lib.store_start(&ret, st),
                 my_lib.store_cont(&ret, st, ev_));
    if (rc) {
        k->failed = k->broken = true;
        my_cut_why(rc, why, wlen);
        return rc;
    }
    if (ret) {
        unsigned e = my_lib.stmt_errno(st);
        k->last_errno = e;
        rc = code_of_errno(e);
        snprintf(why, wlen, "%s", my_lib.stmt_error(st));
        if (e >= 2000 || e == 0 || rc == DLOCK_EUNREACHABLE) /* killed, shutting down */
            k->failed = k->broken = true;
        return rc;
    }
    res->affected = my_lib.affected_rows(st);
    res->insert_id = my_lib.insert_id(st);
    unsigned nf = my_lib.field_count(st);
    if (nf == 0)
        return 0;
    if (nf > 8) {
        (void)my_lib.free_result(st);
        snprintf(why, wlen, "too many columns");
        return DLOCK_EIO;
    }
    char buf[8][MY_CELL_MAX];
    unsigned long blen[8];
    my_bool isnull[8];
    MYSQL_BIND rb[8];
    memset(rb, 0, sizeof rb);
    for (unsigned i = 0; i < nf; i++) {
        rb[i].buffer_type = MYSQL_TYPE_STRING;
        rb[i].buffer = buf[i];
        rb[i].buffer_length = MY_CELL_MAX - 1;
        rb[i].length = &blen[i];
        rb[i].is_null = &isnull[i];
    }
    if (my_lib.bind_result(st, rb)) {
        snprintf(why, wlen, "%s", my_lib.stmt_error(st));
        (void)my_lib.free_result(st);
        return DLOCK_EIO;
    }
    res->ncols = (int)nf;
    size_t cap = 0;
    int f;
    /* (a cell longer than the buffer, a claim's record: fetched whole below) */
    while ((f = my_lib.fetch(st)) == 0 || f == MYSQL_DATA_TRUNCATED) {
        if ((size_t)(res->nrows + 1) * nf > cap) {
            size_t nc = cap ? cap * 2 : nf * 4;
            char **ncell = realloc(res->cell, nc * sizeof *ncell);
            if (!ncell) {
                rc = DLOCK_ENOMEM;
                break;
            }
            res->cell = ncell;
            cap = nc;
        }
        for (unsigned i = 0; i < nf; i++) {
            char *v = NULL;
            if (!isnull[i] && blen[i] > MY_CELL_MAX - 1) {
                MYSQL_BIND whole;
                memset(&whole, 0, sizeof whole);
                unsigned long whole_len = 0;
                whole.buffer_type = MYSQL_TYPE_STRING;
                whole.buffer = v = malloc(blen[i] + 1);
                whole.buffer_length = blen[i];
                whole.length = &whole_len;
                if (!v)
                    rc = DLOCK_ENOMEM;
                else if (my_lib.fetch_column(st, &whole, i, 0) || whole_len != blen[i])
                    rc = DLOCK_EIO;
                else
                    v[blen[i]] = '\0';
            } else if (!isnull[i]) {
                v = malloc(blen[i] + 1);
                if (v) {
                    memcpy(v, buf[i], blen[i]);
                    v[blen[i]] = '\0';
                } else {
                    rc = DLOCK_ENOMEM;
                }
            }
            res->cell[res->nrows * nf + i] = v;
        }
        res->nrows++;
    }
    (void)my_lib.free_result(st);
    if (!rc && f != MYSQL_NO_DATA) {
        rc = DLOCK_EIO;
        snprintf(why, wlen, "%s", my_lib.stmt_error(st));
    } else if (rc) {
        snprintf(why, wlen, "%s",
                 rc == DLOCK_ENOMEM ? "out of memory" : "a long value could not be read whole");
    }
    /* a CALL's rows are followed by the CALL's own OK: read it (also after
     * an error of ours), or the connection's next statement would be out
     * of sync */
    while (my_lib.more_results(st)) {
        int more = 0, wrc = 0;
        MY_DRIVE(wrc, k->m, until_ns, cancel_fd, my_lib.next_start(&more, st),
                 my_lib.next_cont(&more, st, ev_));
        if (wrc) {
            k->failed = k->broken = true;
            my_cut_why(wrc, why, wlen);
            rc = wrc;
            break;
        }
        if (more == 0 && my_lib.field_count(st) == 0)
            continue;
        /* not a CALL of ours (they end with their rows): k is not reused */
        k->failed = true;
        if (!rc) {
            rc = DLOCK_EPROTO;
            snprintf(why, wlen, "after a CALL's rows: %s",
                     more > 0 ? my_lib.stmt_error(st) : "more rows");
        }
        break;
    }
    if (rc)
        my_res_free(res);
    return rc;
}

/* A simple call (autocommit, commit, rollback) on k: 0 or a code. */
int my_q_simple(my_conn *k, int what, int64_t until_ns, char *why, size_t wlen)
{
    my_bool ret = 0;
    int rc = 0;
    switch (what) {
    case 'a': /* autocommit on */
    case 't': /* autocommit off: a transaction from the next statement on */
        MY_DRIVE(rc, k->m, until_ns, -1, my_lib.autocommit_start(&ret, k->m, what == 'a'),
                 my_lib.autocommit_cont(&ret, k->m, ev_));
        if (!rc && !ret)
            k->txn = what == 't';
        break;
    case 'c':
        MY_DRIVE(rc, k->m, until_ns, -1, my_lib.commit_start(&ret, k->m),
                 my_lib.commit_cont(&ret, k->m, ev_));
        break;
    default:
        MY_DRIVE(rc, k->m, until_ns, -1, my_lib.rollback_start(&ret, k->m),
                 my_lib.rollback_cont(&ret, k->m, ev_));
    }
    if (rc) {
        k->failed = k->broken = true;
        my_cut_why(rc, why, wlen);
        return rc;
    }
    if (ret) {
        unsigned e = my_lib.err_no(k->m);
        snprintf(why, wlen, "%s", my_lib.error(k->m));
        if (e >= 2000)
            k->failed = k->broken = true;
        return code_of_errno(e);
    }
    return 0;
}

/* A new connection, made within until_ns: TLS as the URL asks, keepalives
 * on its socket, the holder's description in its connection attributes. */
int my_conn_open(myclient *mc, int64_t until_ns, int cancel_fd, my_conn **out, char *why,
                     size_t wlen)
{
    *out = NULL;
    my_conn *k = calloc(1, sizeof *k);
    if (!k || !(k->m = my_lib.init(NULL))) {
        free(k);
        snprintf(why, wlen, "out of memory");
        return DLOCK_ENOMEM;
    }
    k->lock_wait_s = -1;
    unsigned ct = (unsigned)((mc->connect_timeout_ms + 999) / 1000);
    my_bool yes = 1;
    int bad = my_lib.options(k->m, MYSQL_OPT_NONBLOCK, 0) ||
              my_lib.options(k->m, MYSQL_OPT_CONNECT_TIMEOUT, &ct) ||
              my_lib.options(k->m, MYSQL_SET_CHARSET_NAME, "utf8mb4") ||
              my_lib.optionsv(k->m, MYSQL_OPT_CONNECT_ATTR_ADD, "program_name", "dlock") ||
              my_lib.optionsv(k->m, MYSQL_OPT_CONNECT_ATTR_ADD, "dlock_holder", mc->holder);
    if (!bad && mc->ssl_ca)
        bad = my_lib.options(k->m, MYSQL_OPT_SSL_CA, mc->ssl_ca);
    if (!bad && mc->ssl_cert)
        bad = my_lib.options(k->m, MYSQL_OPT_SSL_CERT, mc->ssl_cert);
    if (!bad && mc->ssl_key)
        bad = my_lib.options(k->m, MYSQL_OPT_SSL_KEY, mc->ssl_key);
    if (!bad && mc->ssl_mode >= 1)
        bad = my_lib.options(k->m, MYSQL_OPT_SSL_ENFORCE, &yes);
    if (!bad && mc->ssl_mode >= 2)
        bad = my_lib.options(k->m, MYSQL_OPT_SSL_VERIFY_SERVER_CERT, &yes);
    if (bad) {
        snprintf(why, wlen, "Connector/C refused an option: %s", my_lib.error(k->m));
        k->failed = true;
        my_conn_close(k);
        return DLOCK_EIO;
    }
    MYSQL *ret = NULL;
    int rc = 0;
    MY_DRIVE(rc, k->m, until_ns, cancel_fd,
             my_lib.connect_start(&ret, k->m, mc->host, mc->user, mc->password, mc->db,
                              (unsigned)mc->port, NULL, 0),
             my_lib.connect_cont(&ret, k->m, ev_));
    if (rc || !ret) {
        if (rc) {
            snprintf(why, wlen, "%s",
                     rc == DLOCK_ECANCELED ? "canceled while connecting"
                                           : "no answer from the server in time while connecting");
            rc = rc == DLOCK_ECANCELED ? rc : DLOCK_EUNREACHABLE;
        } else {
            unsigned e = my_lib.err_no(k->m);
            rc = code_of_errno(e);
            /* an answer that is not MySQL's handshake, or TLS that failed;
             * a server's own error (below 2000) is MySQL's answer */
            if (e == 2026)
                rc = DLOCK_EPROTO;
            snprintf(why, wlen, "%s%s", my_lib.error(k->m),
                     rc == DLOCK_EPROTO && e >= 2000 && e != 2026 ? " (is it a MySQL server?)"
                                                                  : "");
        }
        k->failed = k->broken = true;
        my_conn_close(k);
        return rc;
    }
    /* The server's limits are for other programs' statements: a lock wait
     * may last as long as its caller asked, and a held session (getlock,
     * rowlock) may sit idle as long as its holder runs. A server that
     * refuses a setting (an older one, without the variable) keeps its
     * own, and the waits then say how the server ended them. */
    const char *info = my_lib.server_info(k->m);
    my_res r = {0};
    char swhy[200];
    rc = my_q_exec(k, info && strstr(info, "MariaDB") ? MY_SESSION_MARIADB : MY_SESSION_MYSQL, NULL,
                0, &r, until_ns, cancel_fd, swhy, sizeof swhy);
    my_res_free(&r);
    if (rc && k->broken) {
        snprintf(why, wlen, "setting the session's limits: %s", swhy);
        my_conn_close(k);
        return rc == DLOCK_ECANCELED ? rc : DLOCK_EUNREACHABLE;
    }
    dl_socket_keepalive((int)my_lib.get_socket(k->m));
    k->id = my_lib.thread_id(k->m);
    *out = k;
    return 0;
}

/* Whether a pooled connection is in the transaction state *arg says. */
static bool txn_is(const dl_pooled *it, const void *arg)
{
    return dl_container_of(it, const my_conn, pooled)->txn == *(const bool *)arg;
}

/* An idle connection from the pool (one in the autocommit state asked
 * for, if any), or a new one. */
int my_conn_get(myclient *mc, bool txn, int64_t until_ns, int cancel_fd, my_conn **out,
                    char *why, size_t wlen)
{
    for (;;) {
        dl_pooled *it = dl_pool_take(&mc->pool, txn_is, &txn);
        if (!it)
            break;
        my_conn *k = dl_container_of(it, my_conn, pooled);
        /* Nothing is due on an idle connection: a readable socket is the
         * server ending it (an error packet, or the close itself). */
        if (dl_pool_idle_ended(it, (int)my_lib.get_socket(k->m))) {
            k->failed = true;
            my_conn_close(k);
            continue;
        }
        k->reused = true;
        int rc = 0;
        if (k->txn != txn)
            rc = my_q_simple(k, txn ? 't' : 'a', until_ns, why, wlen);
        if (rc) {
            k->failed = true;
            my_conn_close(k);
            continue;
        }
        *out = k;
        return 0;
    }
    int64_t bound = dl_deadline_in(mc->connect_timeout_ms);
    if (until_ns >= 0 && until_ns < bound)
        bound = until_ns;
    int rc = my_conn_open(mc, bound, cancel_fd, out, why, wlen);
    if (!rc && txn) {
        rc = my_q_simple(*out, 't', until_ns, why, wlen);
        if (rc) {
            my_conn_close(*out);
            *out = NULL;
        }
    }
    return rc;
}

/* Give a connection back to the pool (or close it). */
void my_conn_put(myclient *mc, my_conn *k)
{
    if (k && (k->failed || !dl_pool_put(&mc->pool, &k->pooled)))
        my_conn_close(k);
}

/* Make sure an idle autocommit connection is in the pool (made within
 * until_ns if none is): a rowlock wait that runs out is cut by us and must
 * be killed within the deadline's margin, which leaves little time to
 * connect for the KILL (under valgrind, none). Best effort: without one the
 * KILL connects (see conn_abandon). */
void my_conn_spare(myclient *mc, int64_t until_ns)
{
    bool txn = false;
    if (dl_pool_has(&mc->pool, txn_is, &txn))
        return;
    char why[200];
    my_conn *k;
    int64_t bound = dl_deadline_in(mc->connect_timeout_ms);
    if (until_ns >= 0 && until_ns < bound)
        bound = until_ns;
    if (my_conn_open(mc, bound, -1, &k, why, sizeof why) == 0)
        my_conn_put(mc, k);
}

/* Whether k's server sent anything (a reply, or the end of the session)
 * since k's statement was cut: it is there, and closing k lets go of
 * whatever that statement was granted. */
static bool conn_answered(my_conn *k)
{
    char b;
    ssize_t n = recv((int)my_lib.get_socket(k->m), &b, 1, MSG_PEEK | MSG_DONTWAIT);
    return n >= 0 || (errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR);
}

/* KILL returns before the killed connection has rolled back and gone (its
 * row lock, its GET_LOCK, or a wait granted meanwhile): wait on o until
 * the server no longer lists connection id (it lets go of its locks
 * before it unlists it), by until_ns: 0, DLOCK_ETIMEDOUT, or the error of
 * asking (why). Without the PROCESS privilege the list shows only our
 * own user's connections, which are the ones we kill. */
static int my_await_ended(my_conn *o, unsigned long id, int64_t until_ns, char *why, size_t wlen)
{
    int64_t step_ns = dl_ms_to_ns(1);
    my_arg a[] = {A_I(id)};
    for (;;) {
        my_res r = {0};
        int rc = my_q_exec(o, "SELECT COUNT(*) FROM information_schema.PROCESSLIST WHERE ID = ?",
                           a, 1, &r, until_ns, -1, why, wlen);
        bool gone = rc == 0 && r.nrows == 1 && r.cell[0] && strcmp(r.cell[0], "0") == 0;
        my_res_free(&r);
        if (rc || gone)
            return rc;
        if (dl_ms_left(until_ns) == 0)
            return DLOCK_ETIMEDOUT;
        (void)dl_nap_ns(dl_backoff_ns(&step_ns, dl_ms_to_ns(20)), -1);
    }
}

/* A statement that may still run on the server (a lock wait we gave up
 * on): kill k's server thread from another connection, then close k.
 * Killing the connection, not only the query, also lets go of a lock
 * granted in the very moment we gave up. Every step ends by until_ns (-1:
 * the op timeout), the caller's promise: a server that cannot be told in
 * time (stopped, silent) finds k closed when it next looks, and a wait
 * left queued there ends at its own timeout (the deadline, for a timed
 * wait) or when its reply meets the closed socket. Whether the server was
 * told: the KILL delivered, or, on a server too loaded to answer it in
 * time, the wait's own answer come meanwhile (a CI-like run at load 14
 * saw 100 ms waits answered more than 50 ms late: the server was there). */
static bool conn_abandon(myclient *mc, my_conn *k, int64_t until_ns)
{
    if (!k)
        return false;
    unsigned long id = k->id;
    k->failed = k->broken = true;
    int64_t until = dl_deadline_in(mc->op_timeout_ms);
    if (until_ns >= 0 && until_ns < until)
        until = until_ns;
    char why[200];
    my_conn *o;
    bool told = false;
    if (my_conn_get(mc, false, until, -1, &o, why, sizeof why) == 0) {
        my_arg a[] = {A_I(id)};
        my_res r = {0};
        int rc = my_q_exec(o, "KILL ?", a, 1, &r, until, -1, why, sizeof why);
        my_res_free(&r);
        /* 1094 unknown thread: it had ended already */
        told = rc == 0 || (!o->broken && o->last_errno == 1094);
        /* A release right after we return must find the wait gone: a
         * cancelled waiter killed but not yet ended was granted the name
         * and held it until its end (1 run in 40 of the conformance
         * suite's cancel_at_any_moment). */
        if (rc == 0)
            (void)my_await_ended(o, id, until, why, sizeof why);
        my_conn_put(mc, o);
    }
    told = told || conn_answered(k);
    my_conn_close(k);
    return told;
}

/* One statement on a pooled connection (autocommit), for the calls that
 * hold no connection of their own; again on the next when a pooled one
 * turns out dead (dl_pool_again). */
int my_pool_exec_until(dlock_client *c, int64_t until, const char *sql, const my_arg *args,
                           int nargs, my_res *res, char *why, size_t wlen)
{
    myclient *mc = mc_of(c);
    memset(res, 0, sizeof *res);
    for (;;) {
        my_conn *k;
        int rc = my_conn_get(mc, false, until, -1, &k, why, wlen);
        if (rc)
            return rc;
        bool reused = k->reused;
        rc = my_q_exec(k, sql, args, nargs, res, until, -1, why, wlen);
        my_conn_put(mc, k);
        if (!dl_pool_again(rc, reused))
            return rc;
    }
}

int my_pool_exec(dlock_client *c, const char *sql, const my_arg *args, int nargs,
                     my_res *res, char *why, size_t wlen)
{
    int64_t until = dl_deadline_in(mc_of(c)->op_timeout_ms);
    return my_pool_exec_until(c, until, sql, args, nargs, res, why, wlen);
}

/* ---- sessions that hold locks (getlock, rowlock) ---------------------------------- */

/* Whether an idle held connection has ended (the core's watcher asks when
 * its socket is readable): nothing is due on it, so anything readable is
 * the server ending it — the error packet of a KILL, or the close. */
static bool session_gone(dl_session *s, char *why, size_t wlen)
{
    char b[64];
    ssize_t n = recv(s->fd, b, sizeof b, MSG_PEEK | MSG_DONTWAIT);
    if (n < 0 && (errno == EAGAIN || errno == EINTR))
        return false;
    snprintf(why, wlen, "%s",
             n == 0   ? "the server closed the connection"
             : n < 0  ? strerror(errno)
                      : "the server ended the connection (killed, or shutting down)");
    return true;
}

/* A connection still held when the client closes: closed with it. */
static void session_drop(dl_session *s)
{
    my_conn *k = dl_container_of(s, my_conn, sess);
    ((mylock *)s->lock->bstate)->conn = NULL;
    k->failed = true;
    my_conn_close(k);
}

int my_watch_conn(dlock_lock *l, my_conn *k, char *why, size_t wlen)
{
    return dl_swatch_add(&mc_of(l->c)->watch, &k->sess, l, (int)my_lib.get_socket(k->m), why, wlen);
}

/* Take l's connection off the watch list for a call on it (or for good):
 * NULL when it holds none; k->sess.lost when the watcher found it gone. */
my_conn *my_unwatch_conn(dlock_lock *l)
{
    my_conn *k = ((mylock *)l->bstate)->conn;
    if (k)
        (void)dl_swatch_remove(&mc_of(l->c)->watch, &k->sess);
    return k;
}

void my_rewatch_conn(dlock_lock *l, my_conn *k)
{
    char why[100]; /* cannot fail: the thread runs since the lock was taken */
    (void)my_watch_conn(l, k, why, sizeof why);
}

/* ---- locks ----------------------------------------------------------------------- */

/* GET_LOCK's name for a lock name: the name itself up to 64 characters,
 * else "dlock:" and 128 bits of two FNV-1a hashes (the table catches a
 * collision). prefix distinguishes the lease waiters' names. */
void my_key_of(const char *prefix, const char *name, char *out, size_t len)
{
    if (!*prefix && strlen(name) <= MY_KEY_MAX) {
        snprintf(out, len, "%s", name);
        return;
    }
    uint64_t h1 = 0xcbf29ce484222325ULL, h2 = 0x84222325cbf29ce4ULL;
    for (const unsigned char *s = (const unsigned char *)name; *s; s++) {
        h1 = (h1 ^ *s) * 0x100000001b3ULL;
        h2 = (h2 ^ *s) * 0x100000001b3ULL;
        h2 ^= h2 >> 29;
    }
    snprintf(out, len, "dlock%s:%016" PRIx64 "%016" PRIx64, prefix, h1, h2);
}

int my_lock_init(dlock_lock *l)
{
    mylock *ml = calloc(1, sizeof *ml);
    if (!ml)
        return dl_lock_err(l, DLOCK_ENOMEM, "out of memory");
    my_key_of(mc_of(l->c)->m->key_prefix, l->name, ml->key, sizeof ml->key);
    l->bstate = ml;
    return 0;
}

void my_lock_fini(dlock_lock *l)
{
    free(l->bstate);
    l->bstate = NULL;
}

/* Seconds for a server-side wait until deadline_ns (0 try, -1 forever). */
double my_wait_seconds(int64_t deadline_ns)
{
    if (deadline_ns == 0)
        return 0;
    if (deadline_ns < 0)
        return MY_FOREVER_S;
    return dl_ms_left(deadline_ns) / 1000.0;
}

/* The acquisition's hard bound (the deadline plus the margin), -1 for a
 * try or a wait without bound (then each step has the op timeout). */
int64_t my_hard_bound(const dlock_lock *l)
{
    return l->op_deadline_ns > 0 ? l->op_deadline_ns : -1;
}

/* The bound of a request that waits on the server until deadline_ns: the
 * hard bound less the room a KILL of the wait needs, should its answer not
 * come; none for forever. A try (which the server answers at once) has
 * half the op timeout: a loaded machine's slow answer is no reason to
 * call the lock busy. */
int64_t my_wait_bound(const dlock_lock *l, int64_t deadline_ns)
{
    if (deadline_ns < 0)
        return -1;
    if (deadline_ns == 0)
        return dl_now_ns() + (int64_t)mc_of(l->c)->op_timeout_ms * 500000;
    return l->op_deadline_ns - (int64_t)MY_KILL_ROOM_MS * 1000000;
}

/* Whether a wait until deadline_ns has time left (a try has none). */
bool my_time_left(int64_t deadline_ns)
{
    return deadline_ns < 0 || (deadline_ns > 0 && dl_ms_left(deadline_ns) > 0);
}

/* A statement the server my_interrupted without ending the session: KILL
 * QUERY, or a statement time limit (MariaDB's max_statement_time, MySQL's
 * max_execution_time) that our session's own setting did not lift. */
bool my_interrupted(const my_conn *k)
{
    return !k->broken && (k->last_errno == 1317 || k->last_errno == 1969 ||
                          k->last_errno == 3024);
}

/* The pause before a waiter asks again after the server ended its wait or
 * its session early (so that a server that keeps doing it is not asked in
 * a tight loop), cut to the deadline: 0 or DLOCK_ECANCELED. */
int my_retry_pause(int64_t deadline_ns, int cancel_fd)
{
    int ms = MY_RETRY_PAUSE_MS;
    if (deadline_ns > 0 && dl_ms_left(deadline_ns) < ms)
        ms = dl_ms_left(deadline_ns);
    return dl_nap_ns(dl_ms_to_ns(ms), cancel_fd);
}

/* A lock someone else holds: busy for a try, else the wait ran out; early:
 * how many times the server ended the wait before its time (said, since
 * the server's settings, not the holders, may be why it was not taken). */
int my_not_taken(dlock_lock *l, int64_t deadline_ns, int early)
{
    if (deadline_ns == 0)
        return dl_lock_err(l, DLOCK_EBUSY, "lock \"%s\" is held by another owner", l->name);
    if (early)
        return dl_lock_err(l, DLOCK_ETIMEDOUT,
                           "lock \"%s\" not acquired within the timeout (the server ended the "
                           "wait early %d times, and it was asked again: KILL QUERY, or a "
                           "statement time limit?)",
                           l->name, early);
    return dl_lock_err(l, DLOCK_ETIMEDOUT, "lock \"%s\" not acquired within the timeout",
                       l->name);
}

/* A wait we cut (our bound, cancel) may still run on the server: k is
 * killed there (abandoned), within the hard bound. The error, set on l: a
 * server that answered neither the wait nor the KILL is unreachable. */
int my_wait_cut(dlock_lock *l, int64_t deadline_ns, my_conn *k, int rc, int early)
{
    myclient *mc = mc_of(l->c);
    bool told = conn_abandon(mc, k, my_hard_bound(l));
    if (rc == DLOCK_ECANCELED)
        return dl_lock_err(l, rc, "lock \"%s\": canceled", l->name);
    if (!told)
        return dl_lock_err(l, DLOCK_EUNREACHABLE,
                           "lock \"%s\": the server answered neither the wait by its deadline "
                           "nor the KILL of it (stopped? overloaded?) (%s)",
                           l->name, mc->redacted);
    return my_not_taken(l, deadline_ns, early);
}

/* The statement that takes a lock on k failed with rc: a wait we cut is
 * killed on the server; anything else closes k. The error, set on l. */
int my_take_failed(dlock_lock *l, int64_t deadline_ns, my_conn *k, int rc, const char *why,
                       int early)
{
    myclient *mc = mc_of(l->c);
    if (k->broken && rc != DLOCK_EUNREACHABLE)
        return my_wait_cut(l, deadline_ns, k, rc, early);
    k->failed = true;
    my_conn_close(k);
    return dl_lock_err(l, rc, "lock \"%s\": %s (%s)", l->name, why, mc->redacted);
}

/* After a take on k failed with rc: whether to ask again on a new
 * connection — the server ended the session (KILL, a lost connection)
 * while time is left, or a pooled connection had died idle. k is then
 * closed (and *kp cleared). */
bool my_session_ended(my_conn **kp, int rc, int64_t deadline_ns)
{
    my_conn *k = *kp;
    if (rc != DLOCK_EUNREACHABLE || !(my_time_left(deadline_ns) || k->reused))
        return false;
    k->failed = true;
    my_conn_close(k);
    *kp = NULL;
    return true;
}

/* ---- getlock and rowlock: tokens --------------------------------------------------- */

/*
 * A token must rise with every grant of a name, also across a crash of the
 * server, and a committed InnoDB counter does that at the price of a flush
 * of the log per grant (innodb_flush_log_at_trx_commit=1). The tokens of
 * getlock and rowlock come instead from what a server run keeps in memory:
 *
 *     token = epoch << MY_EPOCH_SHIFT  +  (UUID_SHORT() - base)
 *
 * UUID_SHORT() is a counter of the server process (one more per call,
 * under a mutex, whatever the clock does); `dlock_run` (MEMORY: empty
 * after every start of the server) holds the run's epoch and the
 * UUID_SHORT() it started from. The epochs are counted in `dlock_epoch`
 * (InnoDB): a client that finds no run row counts one more, and its
 * commit is flushed before it puts that epoch into `dlock_run` (only if it
 * is still the latest, see sql_run_set): every epoch ever in force was on
 * disk before its first token, so the first epoch after a crash is above
 * all of them. An epoch's offsets stay below 2^MY_EPOCH_SHIFT (a new epoch
 * at MY_OFFSET_RENEW), so its tokens are above every earlier epoch's.
 *
 * The draw is one statement on the connection that holds the name's
 * GET_LOCK, right after the take: a holder whose session ended (KILL, a
 * restart) can no longer draw, and a live session still holds the lock, so
 * no pause of the holder can give it a token above its successor's. It
 * writes only the MEMORY table: no InnoDB log, no flush. It also records
 * the holder (TABLE_live: token, connection, holder, since, value) for
 * dlock status and dlock break; that table is MEMORY too (its rows are
 * lost at a restart, as every holding is), and when it is full
 * (max_heap_table_size) the rows of names nobody holds are let go.
 */

/* The live lease rows marked again (see my_ensure_marks), on e, then the
 * run's mark (key ''): a restart emptied dlock_live, and no connection
 * draws against the marks before it has seen the run's mark (marks_check). A
 * full table lets go of the rows of names nobody holds first. 0, or a
 * code (a refused statement turns the marks off). */
static int marks_renew(myclient *mc, my_conn *e, int64_t until, char *why, size_t wlen)
{
    my_res r = {0};
    int rc = 0;
    for (int attempt = 0; attempt < 2; attempt++) {
        rc = my_q_exec(e, mc->sql_mark_live, NULL, 0, &r, until, -1, why, wlen);
        my_res_free(&r);
        if (!rc) {
            rc = my_q_exec(e, mc->sql_mark_run, NULL, 0, &r, until, -1, why, wlen);
            my_res_free(&r);
        }
        if (!rc || e->broken)
            break;
        if (e->last_errno == 1114 && attempt == 0) {
            rc = my_q_exec(e, mc->sql_mark_evict, NULL, 0, &r, until, -1, why, wlen);
            my_res_free(&r);
            if (!rc)
                continue;
        }
        atomic_store(&mc->marks_on, false); /* not ours to write: dlock_lease is read */
        rc = 0;
        break;
    }
    return rc;
}

/* Once per connection, with marks on: the run's mark (key ''), or, missing
 * (a restart emptied dlock_live, or the marks were made since), the live
 * lease rows marked again first. 0, or a code. */
static int marks_check(myclient *mc, my_conn *k, int64_t until, char *why, size_t wlen)
{
    if (k->marks_seen || !atomic_load(&mc->marks_on))
        return 0;
    my_res r = {0};
    int rc = my_q_exec(k, mc->sql_mark_run_get, NULL, 0, &r, until, -1, why, wlen);
    bool run_marked = rc == 0 && my_cell(&r, 0, 0) && atoi(my_cell(&r, 0, 0)) > 0;
    my_res_free(&r);
    if (rc == 0 && !run_marked)
        rc = marks_renew(mc, k, until, why, wlen);
    k->marks_seen = rc == 0;
    return rc;
}

/* Put an epoch in force in dlock_run: when there is none (renew false), or
 * a new one after the current (renew true). An epoch is put in force only
 * by the client that counted it (its commit flushed first), only once
 * (with one base) and only while it is the latest counted: a client
 * that counted one while another client counted a later one waits a moment
 * for that client's to be in force, and counts again if it is not. Of
 * clients that found none at once, the first to put its epoch wins; the
 * others' are counted and never used. On a
 * connection of its own with autocommit (a rowlock holder's transaction
 * must not hold the epoch's row). */
static int epoch_ensure(dlock_lock *l, bool renew, char *why, size_t wlen)
{
    myclient *mc = mc_of(l->c);
    int64_t until = dl_deadline_in(dl_op_timeout_ms(l, mc->op_timeout_ms));
    my_conn *e;
    int rc = my_conn_get(mc, false, until, -1, &e, why, wlen);
    if (rc)
        return rc;
    my_res r = {0};
    unsigned long long want = 0;
    for (int round = 0; round <= 8 && !rc; round++) {
        /* the first round of a renewal counts at once; later rounds give
         * a client that counted after us up to 200 ms to put its epoch */
        for (int polls = 0; (!renew || round > 0) && !rc; polls++) {
            rc = my_q_exec(e, mc->sql_run_get, NULL, 0, &r, until, -1, why, wlen);
            bool in_force = rc == 0 && my_cell(&r, 0, 0) &&
                            (!renew || strtoull(my_cell(&r, 0, 0), NULL, 10) >= want);
            my_res_free(&r);
            if (!rc && in_force) {
                my_conn_put(mc, e);
                return 0;
            }
            if (rc || round == 0 || polls >= 20)
                break;
            rc = dl_nap_ns(dl_ms_to_ns(10), -1);
        }
        if (!rc && round == 8)
            break;
        if (!rc) {
            rc = my_q_exec(e, mc->sql_epoch_bump, NULL, 0, &r, until, -1, why, wlen);
            want = r.insert_id;
            my_res_free(&r);
        }
        if (!rc && (want == 0 || want > MY_EPOCH_MAX)) {
            snprintf(why, wlen, "the token epoch in `dlock_epoch` is %llu (1 to %llu expected)",
                     want, (unsigned long long)MY_EPOCH_MAX);
            rc = DLOCK_EPROTO;
        }
        if (!rc) {
            my_arg a[] = {A_I(want), A_I(renew), A_I(renew)};
            rc = my_q_exec(e, mc->sql_run_set, a, 3, &r, until, -1, why, wlen);
            my_res_free(&r);
        }
    }
    if (!rc) {
        snprintf(why, wlen, "no token epoch could be put in force in `dlock_run` (8 rounds)");
        rc = DLOCK_EIO;
    }
    my_conn_put(mc, e);
    return rc;
}

/* The token of a grant, on k, the connection holding the name's GET_LOCK
 * (see above), with the holder's row: 0 (*token set), 1 the key's row
 * belongs to another name (a hash collision), 2 (only with unleased) a
 * lease-mode holder has the name (my_lease_holds), or a code. Once k knows
 * its run, one statement on one MEMORY table (sql_draw_fast), which also
 * reads the name's lease mark; before, and for what the marks do not
 * cover, the draw reads dlock_run and, unleased, dlock_lease (sql_draw,
 * sql_draw_unleased). With ask (getlock), k does not hold the GET_LOCK
 * yet, and the first draw, if it is the one statement, asks for it
 * (sql_try_draw): DRAW_BUSY or DRAW_UNASKED say it was not taken. */
int my_draw_token(dlock_lock *l, my_conn *k, bool unleased, bool ask, const my_drawn *pre,
                  uint64_t *token, char *why, size_t wlen)
{
    myclient *mc = mc_of(l->c);
    mylock *ml = l->bstate;
    int64_t until = dl_deadline_in(dl_op_timeout_ms(l, mc->op_timeout_ms));
    /* an ask ends no later than a wait would be cut (my_wait_bound): a
     * bounded acquisition keeps its KILL room */
    int64_t ask_until = until, kill_room_ns = (int64_t)MY_KILL_ROOM_MS * 1000000;
    if (ask && l->op_deadline_ns > 0 && l->op_deadline_ns - kill_room_ns < ask_until)
        ask_until = l->op_deadline_ns - kill_room_ns;
    my_arg a[] = {A_S(ml->key), A_S(l->name), A_S(mc->holder), A_S(l->name)};
    my_arg ta[] = {A_S(ml->key), A_S(l->name), A_S(ml->key), A_S(mc->holder)};
    my_res r = {0};
    int rc = 0;
    *token = 0;
    bool evicted = false, ensured = false, slow = false;
    for (int attempt = 0; attempt < 6; attempt++) {
        unleased = unleased && !atomic_load(&mc->lease_live_off);
        /* the marks stand for dlock_lease where triggers keep them */
        bool marked = atomic_load(&mc->marks_on) && strlen(l->name) <= MY_KEY_MAX;
        bool fast = !slow && !atomic_load(&mc->fast_off) && (!unleased || marked);
        if (fast && unleased && (rc = marks_check(mc, k, ask ? ask_until : until, why, wlen))) {
            if (!ask)
                return rc;
            k->failed = k->failed || k->broken;
            return DRAW_UNASKED;
        }
        fast = fast && (!unleased || atomic_load(&mc->marks_on));
        if (ask && !fast)
            return DRAW_UNASKED;
        if (ask) {
            ask = false;
            rc = my_q_exec(k, mc->sql_try_draw, ta, 4, &r, ask_until, -1, why, wlen);
            if (rc && !k->broken && k->last_errno == 1048)
                return DRAW_BUSY; /* the token NULL: GET_LOCK said 0 */
            if (rc) {
                /* an error after GET_LOCK said 1 (a full table, a column
                 * missing…) leaves it held: let go, and ask as before */
                my_arg ka[] = {A_S(ml->key)};
                if (k->broken || my_q_exec(k, mc->sql_release, ka, 1, &r, until, -1, why, wlen))
                    k->failed = true;
                my_res_free(&r);
                return DRAW_UNASKED;
            }
        } else if (fast && pre && pre->made) {
            r.affected = pre->affected; /* the take's draw (my_take_draws): this very statement */
            r.insert_id = pre->insert_id;
            rc = 0;
        } else if (fast) {
            rc = my_q_exec(k, mc->sql_draw_fast, a, 3, &r, until, -1, why, wlen);
        } else {
            rc = my_q_exec(k, unleased ? mc->sql_draw_unleased : mc->sql_draw, a, unleased ? 4 : 3,
                        &r, until, -1, why, wlen);
        }
        unsigned long long affected = r.affected, t = r.insert_id;
        my_res_free(&r);
        pre = NULL;
        bool offset_ok = (t & (MY_OFFSET_RENEW * 2 - 1)) < MY_OFFSET_RENEW;
        if (rc == 0 && fast && t == UINT64_MAX - 1) {
            /* a live lease mark: dlock_lease decides, then a draw without
             * the mark (a mark outlives its lease's release) */
            if (unleased && (rc = my_lease_holds(l, k, why, wlen)) != 0)
                return rc < 0 ? rc : 2;
            unleased = false;
            slow = true;
            continue;
        }
        if (rc == 0 && affected > 0 && t != 0 && offset_ok) {
            *token = t;
            return 0;
        }
        if (rc == 0 && affected == 0 && t == UINT64_MAX)
            return 1;
        if (rc == 0 && (t != 0 || (!fast && affected > 0))) {
            /* an offset near the epoch's bits: a new epoch (the fast draw
             * writes its row also when no run is in force: insert id 0) */
            rc = epoch_ensure(l, true, why, wlen);
        } else if (rc == 0 && unleased && !fast && (rc = my_lease_holds(l, k, why, wlen)) != 0) {
            return rc < 0 ? rc : 2; /* nothing drawn: a lease holder's */
        } else if (rc == 0) {
            /* no epoch in force (a new server run), or, found again once
             * one is, a base above UUID_SHORT() (a dlock_run row that is
             * not this run's): a new epoch */
            rc = epoch_ensure(l, ensured, why, wlen);
            ensured = true;
        } else if (fast && !k->broken && k->last_errno == 1054) {
            /* TABLE_live made by an older dlock, without lease_until */
            atomic_store(&mc->fast_off, true);
            rc = 0;
        } else if (unleased && !k->broken && (k->last_errno == 1146 || k->last_errno == 1142)) {
            /* dlock_lease dropped, or not ours to read: as my_lease_holds */
            atomic_store(&mc->lease_live_off, true);
            rc = 0;
        } else if (!k->broken && k->last_errno == 1114 && !evicted) {
            /* TABLE_live is full: the rows of names nobody holds go */
            evicted = true;
            rc = my_q_exec(k, mc->sql_evict, NULL, 0, &r, until, -1, why, wlen);
            my_res_free(&r);
        } else {
            if (!k->broken && k->last_errno == 1114)
                snprintf(why, wlen, "the table %s is full of held names (the server's "
                                    "max_heap_table_size bounds it)", mc->live);
            return rc;
        }
        if (rc)
            return rc;
    }
    snprintf(why, wlen, "no token after 6 tries (the token epoch changing all the time?)");
    return DLOCK_EIO;
}

bool my_take_draws(dlock_lock *l, const my_conn *k)
{
    myclient *mc = mc_of(l->c);
    /* as my_draw_token decides its first draw, marks_check already done
     * on k; the procedure's parameters hold names of up to MY_KEY_MAX */
    return atomic_load(&mc->take_on) && !atomic_load(&mc->fast_off) &&
           strlen(l->name) <= MY_KEY_MAX &&
           (atomic_load(&mc->lease_live_off) || (atomic_load(&mc->marks_on) && k->marks_seen));
}

/* After a session-mode grant (GET_LOCK of the name ours, on k): whether a
 * lease-mode holder has the name in the default lease table (getlock reads
 * its marks, or the table, in its draw, and here only when nothing was
 * drawn: see my_ensure_marks). Read after
 * our GET_LOCK, while a lease taker commits its row before it looks for a
 * GET_LOCK (see build_sql): of two that race, at least one sees the
 * other. 1 yes, 0 no (or no lease table this client may read: none), or
 * a code. */
int my_lease_holds(dlock_lock *l, my_conn *k, char *why, size_t wlen)
{
    myclient *mc = mc_of(l->c);
    if (atomic_load(&mc->lease_live_off))
        return 0;
    int64_t until = dl_deadline_in(dl_op_timeout_ms(l, mc->op_timeout_ms));
    my_arg a[] = {A_S(l->name)};
    my_res r = {0};
    int rc = my_q_exec(k, mc->sql_lease_live, a, 1, &r, until, -1, why, wlen);
    int n = rc == 0 && my_cell(&r, 0, 0) ? atoi(my_cell(&r, 0, 0)) : 0;
    my_res_free(&r);
    if (rc && !k->broken && (k->last_errno == 1146 || k->last_errno == 1142)) {
        /* dropped since, or not ours to read: no lease holder to see; not
         * asked again (a refused statement stays on its connection) */
        atomic_store(&mc->lease_live_off, true);
        return 0;
    }
    return rc ? rc : n > 0;
}

/* Let go of GET_LOCK of the name on k (a grant given back): k back to the
 * pool, or closed (which lets go) if the release failed. */
void my_key_give_back(dlock_lock *l, my_conn *k)
{
    myclient *mc = mc_of(l->c);
    char why[200];
    int64_t until = dl_deadline_in(dl_op_timeout_ms(l, mc->op_timeout_ms));
    my_arg a[] = {A_S(((mylock *)l->bstate)->key)};
    my_res r = {0};
    if (my_q_exec(k, mc->sql_release, a, 1, &r, until, -1, why, sizeof why) != 0)
        k->failed = true;
    my_res_free(&r);
    my_conn_put(mc, k);
}

/* ---- the session modes' acquisition and release (getlock, rowlock) ---------------- */

/* A grant that found a lease-mode holder of the name (one name is one lock
 * across modes) gave everything back, and the mode's take asks
 * again with backoff (the lease holder is not in the server's queue) until
 * the deadline. */
int my_session_acquire(dlock_lock *l, int64_t deadline_ns, my_take_fn take)
{
    int64_t backoff_ns = dl_ms_to_ns(MY_LEASE_BACKOFF_MIN_MS);
    for (;;) {
        bool lease_held = false;
        int rc = take(l, deadline_ns, &lease_held);
        if (!lease_held)
            return rc;
        atomic_store(&l->token, 0);
        if (!my_time_left(deadline_ns))
            return dl_lock_err(l, deadline_ns == 0 ? DLOCK_EBUSY : DLOCK_ETIMEDOUT,
                               "lock \"%s\" is held in mode=lease (table dlock_lease): one name "
                               "is one lock across modes",
                               l->name);
        int64_t pause = dl_backoff_ns(&backoff_ns, dl_ms_to_ns(MY_LEASE_BACKOFF_MAX_MS));
        if (deadline_ns > 0 && deadline_ns - dl_now_ns() < pause)
            pause = deadline_ns - dl_now_ns();
        if (dl_nap_ns(pause, dl_cancel_fd(l)))
            return dl_lock_err(l, DLOCK_ECANCELED, "lock \"%s\": canceled", l->name);
    }
}

/* A grant whose key's row in TABLE_live belongs to another name (a hash
 * collision of long names): let go, and say which. */
int my_key_collision(dlock_lock *l, my_conn *k)
{
    myclient *mc = mc_of(l->c);
    mylock *ml = l->bstate;
    char why[300];
    my_res r = {0};
    (void)conn_abandon(mc, k, my_hard_bound(l));
    char other[DL_NAME_MAX + 8] = "another name";
    my_arg na[] = {A_S(ml->key)};
    if (my_pool_exec(l->c, mc->sql_name_of, na, 1, &r, why, sizeof why) == 0 && my_cell(&r, 0, 0))
        snprintf(other, sizeof other, "\"%s\"", my_cell(&r, 0, 0));
    my_res_free(&r);
    return dl_lock_err(l, DLOCK_ENAME,
                       "lock \"%s\": its GET_LOCK name \"%s\" is taken by %s in the same "
                       "table (a hash collision): rename one",
                       l->name, ml->key, other);
}

int my_session_hold(dlock_lock *l, my_conn *k, int drew, uint64_t token, char *why, size_t wlen)
{
    mylock *ml = l->bstate;
    if (drew < 0) {
        k->failed = true;
        my_conn_close(k); /* lets go of the GET_LOCK (rowlock: ends the row's transaction) */
        return dl_lock_err(l, drew, "lock \"%s\": drawing its token: %s (%s)", l->name, why,
                           mc_of(l->c)->redacted);
    }
    if (drew == 1)
        return my_key_collision(l, k);
    atomic_store(&l->token, token);
    ml->conn = k;
    int rc = my_watch_conn(l, k, why, wlen);
    if (rc) {
        ml->conn = NULL;
        k->failed = true;
        my_conn_close(k);
        return dl_lock_err(l, rc, "lock \"%s\": %s", l->name, why);
    }
    return 0;
}

int my_session_release(dlock_lock *l, my_unlock_fn unlock)
{
    myclient *mc = mc_of(l->c);
    mylock *ml = l->bstate;
    my_conn *k = my_unwatch_conn(l);
    ml->conn = NULL;
    int rc = dl_session_usable(l, k ? &k->sess : NULL);
    if (rc) {
        if (k) {
            k->failed = true;
            my_conn_close(k);
        }
        return rc;
    }
    char why[300];
    int64_t until = dl_deadline_in(dl_op_timeout_ms(l, mc->op_timeout_ms));
    bool was_held = false;
    rc = unlock(l, k, until, &was_held, why, sizeof why);
    if (rc) {
        /* Closing the connection lets go of the lock as soon as the server
         * sees it closed. */
        k->failed = true;
        my_conn_close(k);
        return dl_lock_err(l, rc == DLOCK_EUNREACHABLE ? DLOCK_ELOST : DLOCK_EUNREACHABLE,
                           "lock \"%s\": releasing: %s; its connection was closed, which lets "
                           "go of it (%s)",
                           l->name, why, mc->redacted);
    }
    if (!was_held) {
        k->failed = true;
        my_conn_close(k);
        return dl_lock_err(l, DLOCK_ELOST, "lock \"%s\": its connection no longer held it",
                           l->name);
    }
    my_conn_put(mc, k);
    return 0;
}

/* A session mode's lock that is lost: its connection closed. */
void my_session_abandon(dlock_lock *l)
{
    mylock *ml = l->bstate;
    my_conn *k = my_unwatch_conn(l);
    ml->conn = NULL;
    if (k)
        k->failed = true;
    my_conn_close(k); /* the connection's end lets go of its locks */
}

/* The name's GET_LOCK on the connection holding it let go (getlock: its
 * answer says whether it held it; rowlock: so is its row, by the commit
 * that follows). */
int my_release_key(dlock_lock *l, my_conn *k, int64_t until, my_res *r, char *why, size_t wlen)
{
    my_arg a[] = {A_S(((mylock *)l->bstate)->key)};
    return my_q_exec(k, mc_of(l->c)->sql_release, a, 1, r, until, -1, why, wlen);
}

/* Waiters queued in GET_LOCK on key, where performance_schema tells: on,
 * its metadata lock instrument enabled, readable by this user (-1 where it
 * does not: an empty table would say 0 while waiters wait). */
int my_key_waiters(dlock_client *c, const char *key)
{
    myclient *mc = mc_of(c);
    my_res r = {0};
    char why[300];
    if (mc->ps_ok < 0) {
        int rc = my_pool_exec(c,
                           "SELECT @@performance_schema, (SELECT COUNT(*) FROM "
                           "performance_schema.setup_instruments WHERE NAME = "
                           "'wait/lock/metadata/sql/mdl' AND ENABLED = 'YES')",
                           NULL, 0, &r, why, sizeof why);
        mc->ps_ok = rc == 0 && my_cell(&r, 0, 0) && my_cell(&r, 0, 1) &&
                    strcmp(my_cell(&r, 0, 0), "1") == 0 && strcmp(my_cell(&r, 0, 1), "1") == 0;
        my_res_free(&r);
    }
    if (mc->ps_ok == 0)
        return -1;
    my_arg a[] = {A_S(key)};
    int rc = my_pool_exec(c, mc->sql_waiters, a, 1, &r, why, sizeof why);
    int n = rc == 0 && my_cell(&r, 0, 0) ? atoi(my_cell(&r, 0, 0)) : -1;
    my_res_free(&r);
    return n;
}

int my_list(dlock_client *c, const char *prefix, dlock_list_fn fn, void *arg)
{
    myclient *mc = mc_of(c);
    char pat[2 * DL_NAME_MAX + 2], why[300];
    dl_like_prefix(prefix, pat, sizeof pat);
    my_arg a[] = {A_S(pat)};
    my_res r = {0};
    int rc = my_pool_exec(c, mc->sql_list, a, 1, &r, why, sizeof why);
    if (rc)
        return dl_client_err(c, rc, "list: %s (%s)", why, mc->redacted);
    int stop = 0;
    for (int i = 0; i < r.nrows && !stop; i++)
        if (my_cell(&r, i, 0) && dlock_name_valid(my_cell(&r, i, 0), NULL, 0) == 0)
            stop = fn(my_cell(&r, i, 0), arg);
    my_res_free(&r);
    return stop;
}

/* The reply to a leader's value query (rc, r: its outcome). */
int my_value_reply(dlock_client *c, const char *name, int rc, my_res *r, const char *why,
                   char *buf, size_t len)
{
    myclient *mc = mc_of(c);
    if (rc)
        return dl_client_err(c, rc, "leader of \"%s\": %s (%s)", name, why, mc->redacted);
    if (r->nrows != 1 || !my_cell(r, 0, 0)) {
        my_res_free(r);
        return dl_client_err(c, DLOCK_ENOENT, "\"%s\" has no leader", name);
    }
    snprintf(buf, len, "%s", my_cell(r, 0, 0));
    my_res_free(r);
    return 0;
}

/* getlock and rowlock's break: KILL the connection id holding the name
 * (its holder is told at once). Between the look-up and the KILL the
 * holder may have released and its connection gone back to its pool: KILL
 * then ends an idle pooled connection, which its client drops. */
/* break: wait until the connection killed has ended, so that a break has
 * freed the lock when it returns (see my_await_ended). */
static int wait_killed(dlock_client *c, const char *name, const char *id)
{
    char why[300];
    myclient *mc = mc_of(c);
    int64_t until = dl_deadline_in(mc->op_timeout_ms);
    my_conn *o;
    int rc = my_conn_get(mc, false, until, -1, &o, why, sizeof why);
    if (rc == 0) {
        rc = my_await_ended(o, strtoull(id, NULL, 10), until, why, sizeof why);
        my_conn_put(mc, o);
    }
    if (rc == DLOCK_ETIMEDOUT)
        return dl_client_err(c, rc,
                             "break \"%s\": connection %s was killed but had not ended "
                             "within %d ms: the lock is freed when it has",
                             name, id, mc->op_timeout_ms);
    if (rc)
        return dl_client_err(c, rc, "break \"%s\": connection %s killed, but: %s (%s)", name,
                             id, why, mc->redacted);
    return 0;
}

int my_kill_holder(dlock_client *c, const char *name, const char *id)
{
    char why[300];
    if (!*id)
        return dl_client_err(c, DLOCK_ENOTHELD, "\"%s\" is not held", name);
    my_res r = {0};
    my_arg a[] = {A_I(strtoll(id, NULL, 10))};
    int rc = my_pool_exec(c, "KILL ?", a, 1, &r, why, sizeof why);
    my_res_free(&r);
    if (rc == DLOCK_EPERM)
        return dl_client_err(c, rc,
                             "break \"%s\": the server refused to end connection %s holding it "
                             "(another user's: KILL needs CONNECTION ADMIN or SUPER): %s",
                             name, id, why);
    if (rc && !strstr(why, "Unknown thread"))
        return dl_client_err(c, rc, "break \"%s\": %s (%s)", name, why, mc_of(c)->redacted);
    return rc ? 0 : wait_killed(c, name, id);
}

/* ---- clients ---------------------------------------------------------------------- */

/* Table names: a strict pattern, so that quoting them is enough. */
static bool ident_ok(const char *s)
{
    size_t n = strlen(s);
    if (n == 0 || n > MY_IDENT_MAX || !((s[0] >= 'a' && s[0] <= 'z') || s[0] == '_'))
        return false;
    for (; *s; s++)
        if (!((*s >= 'a' && *s <= 'z') || (*s >= '0' && *s <= '9') || *s == '_'))
            return false;
    return true;
}

static int build_sql(myclient *mc)
{
    const char *lv = mc->live;
    /* getlock, rowlock: the token, drawn on the connection that holds the
     * name's GET_LOCK, and the holder's row (see "Tokens"): written only
     * to a MEMORY table, no InnoDB log. A key whose row belongs to another
     * name (a hash collision) is left alone and says so with an insert id
     * of 2^64 - 1. No row in dlock_run (a new server run), or one whose
     * base is above UUID_SHORT() (not this run's: compared, not
     * subtracted, whatever sql_mode says of unsigned subtraction), inserts
     * nothing. (No side effect in the WHERE: with dlock_run empty, the
     * optimizer evaluates it on a row of NULLs.) */
    /* (the holder's columns, both draws: left alone on a collision) */
#define DRAW_HOLDER                                                                          \
    "ON DUPLICATE KEY UPDATE "                                                               \
    "conn = IF(name = VALUES(name), VALUES(conn), conn), "                                   \
    "holder = IF(name = VALUES(name), VALUES(holder), holder), "                             \
    "since = IF(name = VALUES(name), VALUES(since), since), "                                \
    "value = IF(name = VALUES(name), NULL, value), "
#define DRAW                                                                                 \
    "INSERT INTO %s (k, name, token, conn, holder, since, value) "                           \
    "SELECT ?, ?, LAST_INSERT_ID((m.epoch << %d) + (UUID_SHORT() - m.base)), "               \
    "CONNECTION_ID(), ?, UTC_TIMESTAMP(6), NULL FROM `dlock_run` AS m WHERE m.id = 1 "       \
    "AND UUID_SHORT() >= m.base%s " DRAW_HOLDER                                              \
    "token = IF(name = VALUES(name), LAST_INSERT_ID(VALUES(token)), "                        \
    "token + 0 * LAST_INSERT_ID(18446744073709551615))"
    mc->sql_draw = dl_fmt_alloc(DRAW, lv, MY_EPOCH_SHIFT, "");
    /* getlock's grant: the lease table read (my_lease_holds) in the draw, one
     * round trip fewer (an autocommit statement: its shared locks on
     * dlock_lease end with it). Nothing drawn: a lease holder, or no epoch
     * in force; my_draw_token tells which. */
    mc->sql_draw_unleased =
        dl_fmt_alloc(DRAW, lv, MY_EPOCH_SHIFT,
                     " AND NOT EXISTS (SELECT 1 FROM `dlock_lease` AS x WHERE x.name = ? AND "
                     "x.expires >= UTC_TIMESTAMP(6))");
#undef DRAW
    /* The same as an INSERT ... VALUES, the run read in a scalar
     * subquery (each table a statement opens cost 10-25 us of every
     * hand-over: INSERT ... SELECT opens both tables for the whole
     * statement), and the name's lease mark read in its row: a live one
     * (lease_until, see my_ensure_marks) leaves the row as it is and says so
     * with an insert id of 2^64 - 2, and the grant then reads dlock_lease
     * (my_lease_holds). No run in force draws 0; a collision says 2^64 - 1. */
#define DRAW_ROW(K, NAME, HOLDER, TOKEN, XCOL, XVAL, XSET)                                  \
    "INSERT INTO %s (k, name, token, conn, holder, since, value" XCOL ") VALUES (" K ", "      \
    NAME ", " TOKEN ", CONNECTION_ID(), " HOLDER ", UTC_TIMESTAMP(6), NULL" XVAL ") "           \
    DRAW_HOLDER XSET                                                                           \
    "token = IF(name <> VALUES(name), token + 0 * LAST_INSERT_ID(18446744073709551615), "      \
    "IF(VALUES(token) = 0, token, IF(lease_until >= UTC_TIMESTAMP(6), "                        \
    "token + 0 * LAST_INSERT_ID(18446744073709551614), LAST_INSERT_ID(VALUES(token)))))"
#define DRAW_FAST_OF(K, NAME, HOLDER, TOKEN) DRAW_ROW(K, NAME, HOLDER, TOKEN, "", "", "")
/* (take2's full draw: the same, and the row's draw_base from the run) */
#define DRAW_FAST_BASED(K, NAME, HOLDER, TOKEN)                                              \
    DRAW_ROW(K, NAME, HOLDER, TOKEN, ", draw_base",                                          \
             ", (SELECT CAST(m.base AS DECIMAL(21, 0)) - (m.epoch << %d) FROM `dlock_run` "    \
             "AS m WHERE m.id = 1 AND UUID_SHORT() >= m.base)",                                \
             "draw_base = IFNULL(VALUES(draw_base), draw_base), ")
#define RUN_TOKEN                                                                            \
    "LAST_INSERT_ID(IFNULL((SELECT (m.epoch << %d) + (UUID_SHORT() - m.base) FROM "          \
    "`dlock_run` AS m WHERE m.id = 1 AND UUID_SHORT() >= m.base), 0))"
#define DRAW_FAST(TOKEN) DRAW_FAST_OF("?", "?", "?", TOKEN)
    mc->sql_draw_fast = dl_fmt_alloc(DRAW_FAST(RUN_TOKEN), lv, MY_EPOCH_SHIFT);
    /* getlock's first ask for a name: its GET_LOCK with no wait and the
     * draw above in one statement, a round trip fewer for a lock nobody
     * holds (bare GET_LOCK's two per cycle). A lock that is another's
     * makes the token NULL, which the NOT NULL column refuses (error 1048
     * for a one-row INSERT, whatever sql_mode says): nothing written. Never
     * a GET_LOCK that waits: it would hold the MEMORY table's lock, and
     * every other draw, for its length. */
    mc->sql_try_draw =
        dl_fmt_alloc(DRAW_FAST("IF(GET_LOCK(?, 0) = 1, " RUN_TOKEN ", NULL)"), lv, MY_EPOCH_SHIFT);
    /* getlock's queued take: GET_LOCK that waits, then, granted, the draw
     * above, in one round trip: a procedure runs its statements one by
     * one, each opening its tables only when it runs, so no table is held
     * while GET_LOCK waits (which rules out one statement, see
     * sql_try_draw). It answers GET_LOCK's answer, and, granted, the
     * draw's affected rows and insert id (NULL where the draw failed:
     * my_draw_token then draws again on its own and tells why). Its
     * caller's rights (INVOKER): no definer that may vanish. Versioned by
     * name: a later dlock with another body makes another. */
    snprintf(mc->take_proc_bare[0], sizeof mc->take_proc_bare[0], "%s_take1", mc->live_bare);
    snprintf(mc->take_proc_bare[1], sizeof mc->take_proc_bare[1], "%s_take2", mc->live_bare);
#define TAKE_PROC(DRAW)                                                                      \
    "CREATE PROCEDURE `%s` (IN pk VARBINARY(" MY_KEY_MAX_STR "), IN pname VARBINARY("          \
    MY_KEY_MAX_STR "), IN pwait DOUBLE, IN pholder VARBINARY(255)) SQL SECURITY INVOKER "        \
    "BEGIN DECLARE g INT DEFAULT NULL; DECLARE n BIGINT DEFAULT NULL; "                         \
    "SET g = GET_LOCK(pk, pwait); IF g = 1 THEN " DRAW " END IF; "                              \
    "SELECT g, n, IF(n IS NULL, NULL, LAST_INSERT_ID()); END"
    /* (an error of the draw, a full table say, leaves n NULL: the caller
     * draws on its own and tells why) */
#define SAFELY(DRAW)                                                                         \
    "BEGIN DECLARE EXIT HANDLER FOR SQLEXCEPTION SET n = NULL; " DRAW                           \
    "; SET n = ROW_COUNT(); END;"
    mc->sql_take_proc[0] = dl_fmt_alloc(
        TAKE_PROC(SAFELY(DRAW_FAST_OF("pk", "pname", "pholder", RUN_TOKEN))),
        mc->take_proc_bare[0], lv, MY_EPOCH_SHIFT);
    /* take2: a name's row keeps the run's epoch and base it last drew
     * under as one number, draw_base = base - (epoch << MY_EPOCH_SHIFT), so
     * that a token drawn at UUID_SHORT() u is u - draw_base: the same
     * formula as the run's, without reading dlock_run (the table that
     * cost a hand-over most, see docs/mysql.md). Only a token above the
     * row's last one is drawn that way (DECIMAL arithmetic: no unsigned
     * underflow, whatever sql_mode says), and tokens only ever come from
     * the run's epoch and base at some time of this server run (a row's
     * draw_base is written only from dlock_run), so a name's tokens still
     * rise: across a new epoch (the row path's next draw is below it and
     * goes to the full draw), an eviction of the row (the run's formula at
     * a later UUID_SHORT(), or a later epoch), a restart (no rows), and
     * older clients' draws (they write the token, not draw_base: the
     * check against the token holds). Not drawn there (no row, another
     * name's, a lease mark, no draw_base, not above), the full draw, which
     * writes draw_base. */
    mc->sql_take_proc[1] = dl_fmt_alloc(
        TAKE_PROC("UPDATE %s SET conn = CONNECTION_ID(), holder = pholder, since = "
                  "UTC_TIMESTAMP(6), value = NULL, token = LAST_INSERT_ID(UUID_SHORT() - "
                  "draw_base) WHERE k = pk AND name = pname AND UUID_SHORT() - draw_base > token "
                  "AND (lease_until IS NULL OR lease_until < UTC_TIMESTAMP(6)); "
                  "SET n = ROW_COUNT(); IF n = 0 THEN "
                  SAFELY(DRAW_FAST_BASED("pk", "pname", "pholder", RUN_TOKEN)) " END IF;"),
        mc->take_proc_bare[1], lv, lv, MY_EPOCH_SHIFT, MY_EPOCH_SHIFT);
#undef TAKE_PROC
#undef SAFELY
    for (int i = 0; i < 2; i++)
        mc->sql_take_call[i] = dl_fmt_alloc("CALL `%s`(?, ?, ?, ?)", mc->take_proc_bare[i]);
    mc->sql_draw_base_add = dl_fmt_alloc("ALTER TABLE %s ADD COLUMN draw_base DECIMAL(21, 0)", lv);
    mc->sql_proc_exists = dl_fmt_alloc("SELECT 1 FROM information_schema.ROUTINES WHERE "
                                       "ROUTINE_SCHEMA = DATABASE() AND ROUTINE_NAME = ? AND "
                                       "ROUTINE_TYPE = 'PROCEDURE'");
#undef RUN_TOKEN
#undef DRAW_FAST
#undef DRAW_FAST_OF
#undef DRAW_FAST_BASED
#undef DRAW_ROW
#undef DRAW_HOLDER
    /* Lease marks (see my_ensure_marks): a name's row in dlock_live, its
     * lease_until raised to every expiry a take or renewal of the name's
     * rows in dlock_lease writes (names of up to MY_KEY_MAX bytes: their
     * key is the name). */
#define MARK_UPSERT(NAME, EXPIRES)                                                            \
    "INSERT INTO `dlock_live` (k, name, token, lease_until) VALUES (" NAME ", " NAME ", 0, "    \
    EXPIRES ") ON DUPLICATE KEY UPDATE lease_until = IF(name = VALUES(name), "                 \
    "GREATEST(IFNULL(lease_until, VALUES(lease_until)), VALUES(lease_until)), lease_until)"
#define MARK_TRIGGER(WHAT, EVENT)                                                             \
    "CREATE TRIGGER `dlock_lease_live_" WHAT "` AFTER " EVENT " ON `dlock_lease` FOR EACH "     \
    "ROW IF LENGTH(NEW.name) <= " MY_KEY_MAX_STR " THEN " MARK_UPSERT("NEW.name",             \
                                                                      "NEW.expires") "; END IF"
    mc->sql_mark_ddl[0] = dl_fmt_alloc(MARK_TRIGGER("ins", "INSERT"));
    mc->sql_mark_ddl[1] = dl_fmt_alloc(MARK_TRIGGER("upd", "UPDATE"));
#undef MARK_TRIGGER
#undef MARK_UPSERT
    mc->sql_mark_count = dl_fmt_alloc("SELECT COUNT(*) FROM information_schema.TRIGGERS WHERE "
                                      "TRIGGER_SCHEMA = DATABASE() AND TRIGGER_NAME IN "
                                      "('dlock_lease_live_ins', 'dlock_lease_live_upd')");
    mc->sql_mark_col = dl_fmt_alloc("SELECT 1 FROM information_schema.COLUMNS WHERE TABLE_SCHEMA = "
                                    "DATABASE() AND TABLE_NAME = 'dlock_live' AND COLUMN_NAME = "
                                    "'lease_until'");
    mc->sql_mark_col_add = dl_fmt_alloc("ALTER TABLE `dlock_live` ADD COLUMN lease_until "
                                        "DATETIME(6)");
    mc->sql_mark_live = dl_fmt_alloc(
        "INSERT INTO `dlock_live` (k, name, token, lease_until) SELECT name, name, 0, "
        "MAX(expires) FROM `dlock_lease` WHERE expires >= UTC_TIMESTAMP(6) AND LENGTH(name) <= "
        MY_KEY_MAX_STR " GROUP BY name ON DUPLICATE KEY UPDATE lease_until = IF(name = "
        "VALUES(name), GREATEST(IFNULL(lease_until, VALUES(lease_until)), "
        "VALUES(lease_until)), lease_until)");
    /* the key '' (no lock's: names are not empty): the live rows were
     * marked in this server run */
    mc->sql_mark_run = dl_fmt_alloc("INSERT INTO `dlock_live` (k, name, token) VALUES ('', '', 0) "
                                    "ON DUPLICATE KEY UPDATE token = 0");
    mc->sql_mark_run_get = dl_fmt_alloc("SELECT COUNT(*) FROM `dlock_live` WHERE k = ''");
    /* a full TABLE_live (max_heap_table_size): the rows of names nobody
     * holds and no lease marks (the IF: GET_LOCK's functions refuse '') */
#define EVICT                                                                                 \
    "DELETE FROM %s WHERE k <> '' AND (lease_until IS NULL OR lease_until < "                 \
    "UTC_TIMESTAMP(6)) AND IS_USED_LOCK(IF(k = '', 'dlock:-', k)) IS NULL"
    mc->sql_mark_evict = dl_fmt_alloc(EVICT, "`dlock_live`");
    mc->sql_run_get = dl_fmt_alloc("SELECT epoch FROM `dlock_run` WHERE id = 1");
    /* committed (flushed, on a durable server) before any token of it */
    mc->sql_epoch_bump = dl_fmt_alloc("INSERT INTO `dlock_epoch` (id, epoch) VALUES (1, "
                                      "LAST_INSERT_ID(1)) ON DUPLICATE KEY UPDATE epoch = "
                                      "LAST_INSERT_ID(epoch + 1)");
    /* the run's epoch in force: only the latest epoch counted (a locking
     * read: the newest committed), by the client that counted it; an
     * epoch in force is replaced only by a renewal (the second and third
     * parameters 1), and never by a lower one */
    mc->sql_run_set = dl_fmt_alloc(
        "INSERT INTO `dlock_run` (id, epoch, base) SELECT 1, e.epoch, UUID_SHORT() FROM "
        "`dlock_epoch` AS e WHERE e.id = 1 AND e.epoch = ? ON DUPLICATE KEY UPDATE "
        "base = IF(? = 1 AND VALUES(epoch) > `dlock_run`.epoch, VALUES(base), `dlock_run`.base), "
        "epoch = IF(? = 1, GREATEST(`dlock_run`.epoch, VALUES(epoch)), `dlock_run`.epoch)");
    mc->sql_evict = dl_fmt_alloc(EVICT, lv);
#undef EVICT
    mc->sql_release = dl_fmt_alloc("SELECT RELEASE_LOCK(?)");
    mc->sql_waiters = dl_fmt_alloc("SELECT COUNT(*) FROM performance_schema.metadata_locks WHERE "
                                   "OBJECT_TYPE = 'USER LEVEL LOCK' AND OBJECT_NAME = ? AND "
                                   "LOCK_STATUS = 'PENDING'");
    mc->sql_name_of = dl_fmt_alloc("SELECT name FROM %s WHERE k = ?", lv);
    mc->sql_queue = dl_fmt_alloc("SELECT GET_LOCK(?, ?)");
    /* getlock, rowlock: live lease-mode holders of a name (see my_lease_holds) */
    mc->sql_lease_live = dl_fmt_alloc("SELECT COUNT(*) FROM `dlock_lease` WHERE name = ? AND "
                                      "expires >= UTC_TIMESTAMP(6)");
    mc->sql_table_exists = dl_fmt_alloc("SELECT 1 FROM information_schema.TABLES WHERE "
                                        "TABLE_SCHEMA = DATABASE() AND TABLE_NAME = ?");
    return mc->sql_draw && mc->sql_draw_unleased && mc->sql_run_get && mc->sql_epoch_bump &&
                   mc->sql_run_set && mc->sql_evict && mc->sql_release && mc->sql_waiters &&
                   mc->sql_name_of && mc->sql_queue && mc->sql_lease_live &&
                   mc->sql_table_exists && mc->sql_draw_fast && mc->sql_try_draw && mc->sql_take_proc[0] && mc->sql_take_proc[1] && mc->sql_take_call[0] && mc->sql_take_call[1] && mc->sql_draw_base_add && mc->sql_proc_exists && mc->sql_mark_ddl[0] && mc->sql_mark_ddl[1] &&
                   mc->sql_mark_count && mc->sql_mark_live && mc->sql_mark_evict &&
                   mc->sql_mark_run && mc->sql_mark_run_get && mc->sql_mark_col &&
                   mc->sql_mark_col_add
               ? mc->m->build_sql(mc)
               : -1;
}

/* An idle one's close (see dl_pool_stop). */
static void pooled_close(dl_pooled *it)
{
    my_conn_close(dl_container_of(it, my_conn, pooled));
}

static void mc_free(myclient *mc)
{
    if (!mc)
        return;
    dl_pool_stop(&mc->pool, pooled_close);
    char **s[] = {&mc->host, &mc->user, &mc->password, &mc->db, &mc->ssl_ca, &mc->ssl_cert,
                  &mc->ssl_key, &mc->sql_draw, &mc->sql_draw_unleased, &mc->sql_run_get, &mc->sql_epoch_bump,
                  &mc->sql_run_set, &mc->sql_evict, &mc->sql_release, &mc->sql_inspect,
                  &mc->sql_waiters, &mc->sql_list, &mc->sql_setvalue, &mc->sql_getvalue,
                  &mc->sql_name_of, &mc->sql_lease_take, &mc->sql_lease_renew,
                  &mc->sql_lease_free, &mc->sql_lease_free_all, &mc->sql_lease_value,
                  &mc->sql_lease_getvalue, &mc->sql_lease_info, &mc->sql_lease_other,
                  &mc->sql_lease_make, &mc->sql_lease_make_token, &mc->sql_row_lock,
                  &mc->sql_row_probe, &mc->sql_row_info, &mc->sql_row_value,
                  &mc->sql_row_getvalue, &mc->sql_queue, &mc->sql_lease_live,
                  &mc->sql_ddl[0], &mc->sql_ddl[1], &mc->sql_ddl[2], &mc->sql_ddl[3],
                  &mc->sql_ddl[4],
                  &mc->sql_table_exists, &mc->sql_draw_fast, &mc->sql_try_draw,
                  &mc->sql_take_proc[0], &mc->sql_take_proc[1], &mc->sql_take_call[0],
                  &mc->sql_take_call[1], &mc->sql_draw_base_add, &mc->sql_proc_exists,
                  &mc->sql_mark_ddl[0], &mc->sql_mark_ddl[1], &mc->sql_mark_count,
                  &mc->sql_mark_live, &mc->sql_mark_evict, &mc->sql_mark_run,
                  &mc->sql_mark_run_get, &mc->sql_mark_col, &mc->sql_mark_col_add};
    for (size_t i = 0; i < sizeof s / sizeof s[0]; i++) {
        if (*s[i] == mc->password && mc->password)
            explicit_bzero(mc->password, strlen(mc->password));
        free(*s[i]);
    }
    dl_pool_fini(&mc->pool);
    free(mc);
}

/*
 * One name, one lock, at GET_LOCK's speed. A getlock grant must see a live
 * lease-mode holder of the name in dlock_lease; reading that InnoDB table
 * in the draw cost about 65 us of every hand-over (InnoDB joining the
 * statement, not its rows). So lease holders are marked in the row the
 * draw writes anyway: dlock_live.lease_until, kept by two triggers on
 * dlock_lease (dlock_lease_live_ins, _upd): every take and renewal of a
 * row raises it to the row's expiry, in the same statement, whoever writes
 * it (older dlock versions too). A live mark sends the grant to the InnoDB
 * read (my_lease_holds), which decides as before. A mark is never lowered:
 * one left by a holder that let go costs that name's grants the InnoDB read
 * until its lease would have ended; eviction keeps live marks. Names over
 * MY_KEY_MAX bytes (their key a hash the triggers do not compute) are not
 * marked: their grants read dlock_lease. A server restart empties
 * dlock_live but not dlock_lease: the key '' marks the run, and a
 * connection that does not find it marks the live rows again before it
 * draws against the marks (marks_check). The triggers are made by a getlock
 * client of the default table that may (TRIGGER; with a binary log, SUPER
 * or log_bin_trust_function_creators); CREATE TRIGGER waits for takes in
 * progress, and its maker marks the live rows after it. Without them, or
 * without the column (a dlock_live an older dlock made, that this user may
 * not alter), draws read dlock_lease itself, as before.
 */
int my_ensure_marks(myclient *mc, my_conn *k, int64_t until, char *why, size_t wlen)
{
    my_res r = {0};
    int rc = my_q_exec(k, mc->sql_mark_col, NULL, 0, &r, until, -1, why, wlen);
    bool col = rc == 0 && r.nrows == 1;
    my_res_free(&r);
    if (!rc && !col) {
        rc = my_q_exec(k, mc->sql_mark_col_add, NULL, 0, &r, until, -1, why, wlen);
        my_res_free(&r);
        if (rc && !k->broken && k->last_errno == 1060) /* (a racing maker's) */
            rc = 0;
    }
    int have = 0;
    if (!rc) {
        rc = my_q_exec(k, mc->sql_mark_count, NULL, 0, &r, until, -1, why, wlen);
        have = rc == 0 && my_cell(&r, 0, 0) ? atoi(my_cell(&r, 0, 0)) : 0;
        my_res_free(&r);
    }
    bool made = false;
    for (int i = 0; i < 2 && !rc && have < 2; i++) {
        rc = my_q_exec(k, mc->sql_mark_ddl[i], NULL, 0, &r, until, -1, why, wlen);
        my_res_free(&r);
        if (rc && !k->broken && k->last_errno == 1359) /* (a racing maker's) */
            rc = 0;
        made = true;
    }
    atomic_store(&mc->marks_on, rc == 0);
    if (!rc && made)
        rc = marks_renew(mc, k, until, why, wlen);
    if (rc)
        atomic_store(&mc->marks_on, false);
    /* not ours to make (no ALTER, TRIGGER, or binary-log rights): the draw
     * reads dlock_lease itself */
    return k->broken ? rc : 0;
}

/* getlock, rowlock: TABLE_live, the holders' rows, no InnoDB log (see
 * "Tokens"; MEMORY rows have a fixed length: the holder in bytes, not
 * utf8mb4's four per character). */
char *my_live_ddl(myclient *mc)
{
    return dl_fmt_alloc("CREATE TABLE IF NOT EXISTS %s (k VARBINARY(64) NOT NULL PRIMARY KEY, "
                        "name VARBINARY(200) NOT NULL, token BIGINT UNSIGNED NOT NULL, "
                        "conn BIGINT UNSIGNED, holder VARBINARY(255), since DATETIME(6), "
                        "value VARBINARY(1000), lease_until DATETIME(6), draw_base DECIMAL(21, "
                        "0)) ENGINE=MEMORY",
                        mc->live);
}

/* getlock and rowlock: the default lease table too, which their grants
 * read (one name, one lock across modes: my_lease_holds), and the epochs of
 * their tokens: counted in InnoDB, the one in force in MEMORY. */
int my_session_tables(char **ddl, const char **bare)
{
    ddl[2] = dl_fmt_alloc(MY_LEASE_DDL, "`dlock_lease`", MY_HOLDER_COLS);
    ddl[3] = dl_fmt_alloc("CREATE TABLE IF NOT EXISTS `dlock_epoch` (id TINYINT UNSIGNED NOT "
                          "NULL PRIMARY KEY, epoch BIGINT UNSIGNED NOT NULL) ENGINE=InnoDB");
    ddl[4] = dl_fmt_alloc("CREATE TABLE IF NOT EXISTS `dlock_run` (id TINYINT UNSIGNED NOT "
                          "NULL PRIMARY KEY, epoch BIGINT UNSIGNED NOT NULL, base BIGINT "
                          "UNSIGNED NOT NULL) ENGINE=MEMORY");
    bare[2] = "dlock_lease";
    bare[3] = "dlock_epoch";
    bare[4] = "dlock_run";
    return ddl[2] && ddl[3] && ddl[4] ? 0 : DLOCK_ENOMEM;
}

/* The tables of the client's mode (its tables: up to five, by place in
 * mc->sql_ddl; [2] the default lease table), made if missing (a concurrent
 * maker's CREATE may race ours: IF NOT EXISTS, and one retry). */
static int ensure_tables(myclient *mc, my_conn *k, char *why, size_t wlen)
{
    char **ddl = mc->sql_ddl;
    const char *bares[5] = {NULL, NULL, NULL, NULL, NULL};
    int rc = mc->m->tables(mc, ddl, bares);
    int64_t until = dl_deadline_in(mc->op_timeout_ms);
    for (int i = 0; i < 5 && !rc; i++) {
        if (!ddl[i])
            continue;
        const char *bare = bares[i];
        my_res r = {0};
        /* There already? A user without CREATE may use existing tables, and
         * MySQL refuses it CREATE TABLE IF NOT EXISTS even then. */
        my_arg t[] = {A_S(bare)};
        rc = my_q_exec(k, mc->sql_table_exists, t, 1, &r, until, -1, why, wlen);
        bool exists = rc == 0 && r.nrows == 1;
        my_res_free(&r);
        if (rc || exists)
            continue;
        for (int attempt = 0; attempt < 2; attempt++) {
            rc = my_q_exec(k, ddl[i], NULL, 0, &r, until, -1, why, wlen);
            my_res_free(&r);
            if (rc != DLOCK_EPROTO || k->broken)
                break;
        }
        if (i == 2 && rc && !k->broken) {
            /* not ours to make: then there is no lease holder to see (a
             * lease client of another user that makes it later is not
             * seen by this client: see docs/mysql.md) */
            atomic_store(&mc->lease_live_off, true);
            rc = 0;
        } else if (rc == DLOCK_EPERM) {
            char line[200];
            snprintf(line, sizeof line, "%.190s", why);
            snprintf(why, wlen,
                     "cannot create the lock table `%s` (%s): create it once as a user who may "
                     "(see dlock(1)), or grant CREATE on the database",
                     bare, line);
        }
    }
    if (rc == DLOCK_ENOMEM)
        snprintf(why, wlen, "out of memory");
    if (!rc && mc->m->tables_made)
        rc = mc->m->tables_made(mc, k, until, why, wlen);
    return rc;
}

/* The modes, the first the default: each one's operations and what its
 * clients offer (see my_mode). */
static const my_mode my_modes[] = {
    {"getlock", "dlock", MY_CAPS_GETLOCK, "", &my_getlock_ops, my_getlock_build_sql,
     my_getlock_tables, my_getlock_tables_made},
    {"lease", "dlock_lease", MY_CAPS_LEASE, "-w", &my_lease_ops, my_lease_build_sql,
     my_lease_tables, NULL},
    {"rowlock", "dlock_row", MY_CAPS_ROWLOCK, "", &my_rowlock_ops, my_rowlock_build_sql,
     my_rowlock_tables, NULL},
};

int my_client_open(dlock_client *c, const dl_url *u)
{
    (void)pthread_once(&my_once, my_load);
    if (my_error[0])
        return dl_client_err(c, DLOCK_ENOTSUP, "%s: %s", u->redacted, my_error);
    const char *mode = dl_url_param(u, "mode");
    const my_mode *m = mode ? NULL : &my_modes[0];
    for (size_t i = 0; !m && i < sizeof my_modes / sizeof my_modes[0]; i++)
        if (strcmp(mode, my_modes[i].name) == 0)
            m = &my_modes[i];
    if (!m)
        return dl_client_err(c, DLOCK_EURL,
                             "%s: mode must be getlock, lease or rowlock, not \"%s\"",
                             u->redacted, mode);
    if (!u->path || !*u->path)
        return dl_client_err(c, DLOCK_EURL,
                             "%s: name the database: mysql://user:password@host/DATABASE",
                             u->redacted);
    const char *table = dl_url_param(u, "table");
    if (!table)
        table = m->table;
    if (!ident_ok(table))
        return dl_client_err(c, DLOCK_EURL,
                             "%s: table= takes a lowercase identifier ([a-z_][a-z0-9_]*, at most "
                             "%d bytes)",
                             u->redacted, MY_IDENT_MAX);
    const char *sslmode = dl_url_param(u, "ssl-mode");
    int ssl_mode = dl_url_param(u, "ssl-ca") ? 2 : 0;
    if (sslmode) {
        if (strcasecmp(sslmode, "disabled") == 0 || strcasecmp(sslmode, "preferred") == 0)
            ssl_mode = 0;
        else if (strcasecmp(sslmode, "required") == 0)
            ssl_mode = 1;
        else if (strcasecmp(sslmode, "verify_ca") == 0 ||
                 strcasecmp(sslmode, "verify_identity") == 0)
            ssl_mode = 2;
        else
            return dl_client_err(c, DLOCK_EURL,
                                 "%s: ssl-mode must be DISABLED, PREFERRED, REQUIRED, VERIFY_CA "
                                 "or VERIFY_IDENTITY, not \"%s\"",
                                 u->redacted, sslmode);
        if (ssl_mode == 0 && strcasecmp(sslmode, "disabled") == 0 &&
            (dl_url_param(u, "ssl-ca") || dl_url_param(u, "ssl-cert")))
            return dl_client_err(c, DLOCK_EURL, "%s: ssl-mode=DISABLED with TLS files given",
                                 u->redacted);
    }
    myclient *mc = calloc(1, sizeof *mc);
    if (!mc)
        return dl_client_err(c, DLOCK_ENOMEM, "out of memory");
    dl_pool_init(&mc->pool, MY_POOL_IDLE_MAX);
    c->bstate = mc;
    mc->m = m;
    mc->ps_ok = -1;
    mc->redacted = u->redacted;
    mc->op_timeout_ms = c->opts.op_timeout_ms;
    mc->connect_timeout_ms = c->opts.connect_timeout_ms;
    mc->port = u->hosts[0].port;
    mc->ssl_mode = ssl_mode;
    snprintf(mc->table, sizeof mc->table, "`%s`", table);
    snprintf(mc->tokens, sizeof mc->tokens, "`%s_token`", table);
    snprintf(mc->table_bare, sizeof mc->table_bare, "%s", table);
    snprintf(mc->tokens_bare, sizeof mc->tokens_bare, "%s_token", table);
    snprintf(mc->live, sizeof mc->live, "`%s_live`", table);
    snprintf(mc->live_bare, sizeof mc->live_bare, "%s_live", table);
    dl_self_desc(mc->holder, sizeof mc->holder);
    mc->host = strdup(u->hosts[0].host);
    mc->user = strdup(u->user ? u->user : "");
    mc->password = u->password ? strdup(u->password) : NULL;
    mc->db = strdup(u->path);
    const char *ca = dl_url_param(u, "ssl-ca"), *cert = dl_url_param(u, "ssl-cert"),
               *key = dl_url_param(u, "ssl-key");
    mc->ssl_ca = ca ? strdup(ca) : NULL;
    mc->ssl_cert = cert ? strdup(cert) : NULL;
    mc->ssl_key = key ? strdup(key) : NULL;
    char why[600];
    int rc = 0;
    if (!mc->host || !mc->user || !mc->db || (u->password && !mc->password) ||
        (ca && !mc->ssl_ca) || (cert && !mc->ssl_cert) || (key && !mc->ssl_key))
        rc = DLOCK_ENOMEM;
    if (!rc)
        rc = dl_swatch_init(&mc->watch, session_gone);
    if (rc) {
        my_client_close(c);
        return dl_client_err(c, rc, "%s: %s", u->redacted,
                             rc == DLOCK_ENOMEM ? "out of memory" : "cannot make an eventfd");
    }
    /* The first connection: the server is there, the user may log in, and
     * the tables exist. */
    my_conn *k;
    rc = my_conn_open(mc, dl_deadline_in(mc->connect_timeout_ms), -1, &k, why,
                   sizeof why);
    if (!rc) {
        const char *info = my_lib.server_info(k->m);
        mc->mariadb = info && strstr(info, "MariaDB");
        rc = build_sql(mc) ? DLOCK_ENOMEM : 0;
        if (rc)
            snprintf(why, sizeof why, "out of memory");
        if (!rc)
            rc = ensure_tables(mc, k, why, sizeof why);
        k->failed = k->failed || rc != 0;
        my_conn_put(mc, k);
    }
    if (rc) {
        my_client_close(c);
        return dl_client_err(c, rc, "%s: %s", u->redacted, why);
    }
    /* The mode's operations and capabilities are the client's from now on
     * (getlock, rowlock: liveness is the connection, nothing to renew;
     * lease: rows renewed by the core through its renew). */
    c->ops = m->ops;
    c->caps = m->caps;
    return 0;
}

void my_client_close(dlock_client *c)
{
    myclient *mc = mc_of(c);
    if (!mc)
        return;
    dl_pool_stop(&mc->pool, pooled_close);
    /* Connections still holding locks (the core released what it could)
     * end with the client: the server lets go of their locks. */
    dl_swatch_fini(&mc->watch, session_drop);
    mc_free(mc);
    c->bstate = NULL;
}

/* What a client has until its mode is known: client_open puts its mode's
 * operations in their place (my_modes). */
static const dl_backend_ops my_open_ops = {
    .client_open = my_client_open,
    .client_close = my_client_close,
};
#define MY_OPS .ops = &my_open_ops
#else
#define MY_OPS .missing = "built without MariaDB Connector/C (Debian: libmariadb-dev)"
#endif

const dl_backend dl_backend_mysql = {
    .name = "mysql",
    .schemes = mysql_schemes,
    .caps = MY_CAPS,
    .liveness = MY_LIVENESS,
    .fencing = MY_FENCING,
    .params = MY_PARAMS,
    MY_OPS,
};
