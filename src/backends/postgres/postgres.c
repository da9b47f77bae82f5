/*
 * postgres.c — PostgreSQL: session advisory locks (mode=advisory), the
 * seeds' lock table with leases (mode=lease), row locks held by an open
 * transaction (mode=rowlock). Each mode's own part is below its heading.
 *
 * mode=advisory (the default): a lock is a session advisory lock on a 64-bit
 * key, FNV-1a of the table's name and the lock's name. Each held lock has a
 * connection of its own, taken from the client's pool and given back once
 * the lock is unlocked, so that no lock can leak into a session someone else
 * uses. The server queues the waiters in its lock manager and wakes one per
 * release; lock_timeout bounds a timed wait on the server's side.
 *
 * One statement takes the lock and draws its token: the advisory lock in a
 * CTE, nextval of the table's sequence once the lock is ours (see
 * token_ctes: no WAL flush per grant), then an upsert of the name's row in
 * the table (default "dlock"),
 *
 *     name text PRIMARY KEY, key bigint UNIQUE, token bigint, holder, since, value
 *
 * that records the holder and its token. Two names whose keys collide meet at the unique key:
 * the second one's acquisition fails, naming the first (never a silent
 * shared lock).
 *
 * Liveness is the connection. A thread per client watches the sockets of
 * the connections that hold locks: a server that ends the session (a
 * restart, pg_terminate_backend, dlock break) closes it, and the holder is
 * told at once. A network that goes silent is found by TCP keepalives
 * (2 s idle, then 3 probes 1 s apart, unless the URL says otherwise). A
 * waiter that gives up (timeout, dlock_cancel) has its statement cancelled
 * from another connection and its own closed; on servers from 14 on,
 * client_connection_check_interval also makes a waiting backend whose
 * client died leave the queue within a second.
 *
 * libpq is loaded at run time (see dl_load_library) and used only through
 * its asynchronous calls, each bounded by our deadlines and the lock's
 * cancel descriptor: its synchronous ones cannot be.
 */
#include "internal.h"
#include "support/support.h"

static const dl_scheme postgres_schemes[] = {
    {"postgres", "postgres", 5432, true, DL_PATH_DBNAME},
    {"postgresql", "postgres", 5432, true, DL_PATH_DBNAME},
    {NULL, NULL, 0, false, DL_PATH_NONE},
};

/* The facts, the same whether libpq is there or not. */
#define PG_CAPS_ADVISORY                                                                     \
    (DLOCK_CAP_FENCING | DLOCK_CAP_FAIR | DLOCK_CAP_SHARED | DLOCK_CAP_SESSION |             \
     DLOCK_CAP_NATIVE_BLOCKING)
#define PG_CAPS_LEASE                                                                        \
    (DLOCK_CAP_FENCING | DLOCK_CAP_FAIR | DLOCK_CAP_SEMAPHORE | DLOCK_CAP_LEASE |            \
     DLOCK_CAP_NATIVE_BLOCKING)
#define PG_CAPS_ROWLOCK                                                                      \
    (DLOCK_CAP_FENCING | DLOCK_CAP_FAIR | DLOCK_CAP_SESSION | DLOCK_CAP_NATIVE_BLOCKING)
#define PG_CAPS (PG_CAPS_ADVISORY | PG_CAPS_LEASE | PG_CAPS_ROWLOCK) /* a client: its mode's */
#define PG_LIVENESS                                                                          \
    "mode=advisory: a session advisory lock, held while the holder's connection lives; the " \
    "holder is told at once when the server ends the session, and within ~5 s (TCP "         \
    "keepalives) when the network goes silent — while the server, which does not see the "   \
    "silence, keeps the lock for it; a paused holder keeps its lock. mode=rowlock: the "     \
    "same, a row locked by an open transaction. mode=lease: a row whose expiry is the "      \
    "server's clock, renewed every ttl/3; the holder is told on its own clock before the "   \
    "row can expire"
#define PG_FENCING                                                                           \
    "the table's sequence, drawn once the lock is taken (advisory, rowlock: durable across " \
    "a crash without a WAL flush per grant, see docs/postgres.md; lease: by the statement "  \
    "that takes the row)"
/* The URL's own parameters, and libpq's connection parameters that make
 * sense in a URL (passed through to libpq as they are). */
#define PG_PARAMS                                                                            \
    "mode table schema pooler password "                                                     \
    "sslmode sslrootcert sslcert sslkey sslpassword sslcrl sslcrldir sslsni "                \
    "sslcompression gssencmode krbsrvname gsslib channel_binding target_session_attrs "      \
    "application_name fallback_application_name connect_timeout keepalives "                 \
    "keepalives_idle keepalives_interval keepalives_count tcp_user_timeout options "         \
    "client_encoding passfile service hostaddr ssl_min_protocol_version "                    \
    "ssl_max_protocol_version"

#ifdef DLOCK_HAVE_POSTGRES
#include "pg_int.h"

#include <libpq-fe.h>

#include <errno.h>
#include <inttypes.h>
#include <poll.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

/* ---- libpq, loaded when the first client opens ------------------------------------ */

#define PG_LIBPQ "libpq.so.5"
pg_api pg_lib;
static char pq_error[300];
static pthread_once_t pq_once = PTHREAD_ONCE_INIT;

static void pq_load(void)
{
    static const dl_sym syms[] = {
#define PG_API_SYM(f) {"PQ" #f, offsetof(pg_api, f)},
        PG_LIBPQ_FUNCS(PG_API_SYM)
#undef PG_API_SYM
    };
    (void)dl_load_library(PG_LIBPQ, "libpq5", syms, sizeof syms / sizeof syms[0], &pg_lib,
                          pq_error, sizeof pq_error);
}

#define PG_EPOCH_SHIFT 44    /* tokens: (epoch << 44) + offset in the run (see token_ctes) */
#define PG_POOL_IDLE_MAX 8   /* idle connections a client keeps */
#define PG_CHECK_INTERVAL "1000" /* client_connection_check_interval, ms (server 14+) */

/*
 * An advisory holder's session takes, with the lock, a lock of the two-key
 * space (objsubid 2) whose keys are its token's halves: pg_locks shows it
 * to every session at once, and it writes nothing. The holder's row in the
 * table, a write (a third of a hand-over), is then needed only at a
 * handle's first grant (see pg_acquire). Its session is found by its pid:
 * application_name says who ("dlock pid N on HOST", unless the URL set
 * it), state_change since when (its last statement: the grant). The first
 * key is the token's high half minus 2^31, negative, where applications'
 * two-key locks ((table oid, row), ...) seldom are; and it is only tried:
 * one taken by someone else never holds a grant up (inspect then reads the
 * name's row).
 */
#define TOKEN_LOCK(fn, v)                                                                    \
    fn "(((" v " >> 32) - 2147483648)::int, substring(" v "::bit(64) from 33)::bit(32)::int)"
/* The holders of key with a token lock, the highest token first: tok, who,
 * held_ms (NULL when this role may not see it) (l is pg_locks). */
#define TOKEN_HOLDERS(key)                                                                   \
    "SELECT ((h.classid::bigint - 2147483648) << 32) | h.objid::bigint AS tok, "             \
    "a.application_name AS who, "                                                            \
    "floor(extract(epoch FROM clock_timestamp() - a.state_change) * 1000)::bigint "          \
    "AS held_ms "                                                                            \
    "FROM pg_locks l JOIN pg_locks h ON h.pid = l.pid AND h.locktype = 'advisory' AND "      \
    "h.objsubid = 2 AND h.granted AND h.database = l.database, "                             \
    "pg_stat_get_activity(l.pid) AS a "                                                      \
    "WHERE " PG_LOCKS_OF(key) " AND l.granted ORDER BY 1 DESC"

typedef struct pglock {
    int64_t key;
    pg_conn *conn; /* advisory: while held */
    int slot;      /* lease: the row held */
    bool named;    /* its row in the names table was there at its last grant */
    bool rowed;    /* advisory: a grant of this handle wrote its row in the table */
} pglock;

pgclient *pc_of(dlock_client *c)
{
    return c->bstate;
}

/* ---- statements ------------------------------------------------------------------ */

static void pq_quiet(void *arg, const char *msg)
{
    (void)arg; /* notices ("already exists, skipping", unlock warnings) are ours to judge */
    (void)msg;
}

void pg_conn_close(pg_conn *k)
{
    if (!k)
        return;
    if (k->pg)
        pg_lib.finish(k->pg);
    free(k);
}

/* First line of a libpq message, without its "ERROR:  " prefix. */
static const char *one_line(const char *msg, char *buf, size_t len)
{
    if (!msg || !*msg)
        msg = "no message";
    if (strncmp(msg, "ERROR:  ", 8) == 0 || strncmp(msg, "FATAL:  ", 8) == 0)
        msg += 8;
    size_t n = strcspn(msg, "\n");
    if (n >= len)
        n = len - 1;
    memcpy(buf, msg, n);
    buf[n] = '\0';
    return buf;
}

/*
 * Sessions run in libpq's pipeline mode, each statement followed by a sync
 * point: a statement can be sent before the reply to the previous one has
 * come (a release's unlock is sent and not waited for; the next statement
 * on that session goes out behind it at once), and an error ends at its
 * sync point. k->pending counts the statements whose replies are unread.
 */

/* Push what libpq has queued on k out to the server. */
static int stmt_flush(pg_conn *k, int64_t until_ns, int cancel_fd, char *why, size_t wlen)
{
    char line[200];
    int f;
    while ((f = pg_lib.flush(k->pg)) == 1) {
        int rc = dl_wait_fd(pg_lib.socket(k->pg), POLLOUT, until_ns, cancel_fd, NULL);
        if (rc) {
            snprintf(why, wlen, "%s", rc == DLOCK_ECANCELED ? "canceled" : "no answer in time");
            return rc;
        }
    }
    if (f < 0) {
        snprintf(why, wlen, "%s", one_line(pg_lib.errorMessage(k->pg), line, sizeof line));
        return DLOCK_EUNREACHABLE;
    }
    return 0;
}

/* Send one statement with text parameters on k (see run). */
int pg_stmt_send(pg_conn *k, const char *sql, int n, const char *const *vals,
                     int64_t until_ns, int cancel_fd, char *why, size_t wlen)
{
    char line[200];
    if (!pg_lib.sendQueryParams(k->pg, sql, n, NULL, vals, NULL, NULL, 0) ||
        !pg_lib.pipelineSync(k->pg)) {
        snprintf(why, wlen, "%s", one_line(pg_lib.errorMessage(k->pg), line, sizeof line));
        return DLOCK_EUNREACHABLE;
    }
    k->pending++;
    return stmt_flush(k, until_ns, cancel_fd, why, wlen);
}

/*
 * A statement whose text never changes (the client's, or a literal):
 * prepared once per session, then executed by name. Planning the lock
 * statements' CTEs cost more than a round trip each time. A session on
 * which any statement failed is not pooled again, so that no statement it
 * believes prepared can be missing.
 */
static int stmt_send_fixed(pg_conn *k, const char *sql, int n, const char *const *vals,
                           int64_t until_ns, int cancel_fd, char *why, size_t wlen)
{
    /* Behind a transaction pooler, a session's statements run on whichever
     * server session is free: one prepared on one is missing (or already
     * there, another client's) on the next. */
    if (k->unnamed)
        return pg_stmt_send(k, sql, n, vals, until_ns, cancel_fd, why, wlen);
    int i = 0;
    while (i < k->nprepared && k->prepared[i] != sql)
        i++;
    if (i == PG_PREPARED_MAX)
        return pg_stmt_send(k, sql, n, vals, until_ns, cancel_fd, why, wlen);
    char name[16], line[200];
    snprintf(name, sizeof name, "dlock%d", i);
    if (i == k->nprepared) {
        /* (one segment with the execution: one reply, read as one) */
        if (!pg_lib.sendPrepare(k->pg, name, sql, n, NULL)) {
            snprintf(why, wlen, "%s", one_line(pg_lib.errorMessage(k->pg), line, sizeof line));
            return DLOCK_EUNREACHABLE;
        }
        k->prepared[k->nprepared++] = sql;
    }
    if (!pg_lib.sendQueryPrepared(k->pg, name, n, vals, NULL, NULL, 0) || !pg_lib.pipelineSync(k->pg)) {
        snprintf(why, wlen, "%s", one_line(pg_lib.errorMessage(k->pg), line, sizeof line));
        return DLOCK_EUNREACHABLE;
    }
    k->pending++;
    return stmt_flush(k, until_ns, cancel_fd, why, wlen);
}

/* The reply to the oldest statement sent on k and not read yet: its first
 * result in *out (NULL when out is NULL: read and dropped), up to its sync
 * point (see run for the codes). */
static int stmt_read(pg_conn *k, int64_t until_ns, int cancel_fd, PGresult **out, char *why,
                     size_t wlen)
{
    char line[200];
    PGresult *first = NULL;
    if (out)
        *out = NULL;
    if (k->pending <= 0) {
        snprintf(why, wlen, "no statement to read a reply to");
        return DLOCK_EPROTO;
    }
    for (;;) {
        while (!pg_lib.isBusy(k->pg)) {
            PGresult *r = pg_lib.getResult(k->pg);
            if (!r) {
                if (pg_lib.status(k->pg) != CONNECTION_OK) {
                    snprintf(why, wlen, "%s", one_line(pg_lib.errorMessage(k->pg), line, sizeof line));
                    pg_lib.clear(first);
                    return DLOCK_EUNREACHABLE;
                }
                continue; /* the end of one statement's results */
            }
            if (pg_lib.resultStatus(r) == PGRES_PIPELINE_SYNC) {
                pg_lib.clear(r);
                k->pending--;
                if (!first) {
                    snprintf(why, wlen, "the server sent no result");
                    return DLOCK_EPROTO;
                }
                if (out)
                    *out = first;
                else
                    pg_lib.clear(first);
                return 0;
            }
            ExecStatusType st = pg_lib.resultStatus(r);
            if (st != PGRES_TUPLES_OK && st != PGRES_COMMAND_OK)
                k->failed = true;
            /* A segment's last result is its statement's (a Prepare's comes
             * first), unless an earlier one failed. */
            ExecStatusType fs = first ? pg_lib.resultStatus(first) : PGRES_COMMAND_OK;
            if (fs == PGRES_TUPLES_OK || fs == PGRES_COMMAND_OK) {
                pg_lib.clear(first);
                first = r;
            } else {
                pg_lib.clear(r);
            }
        }
        int rc = dl_wait_fd(pg_lib.socket(k->pg), POLLIN, until_ns, cancel_fd, NULL);
        if (rc == 0 && !pg_lib.consumeInput(k->pg))
            rc = DLOCK_EUNREACHABLE;
        if (rc) {
            if (rc == DLOCK_EUNREACHABLE)
                snprintf(why, wlen, "%s", one_line(pg_lib.errorMessage(k->pg), line, sizeof line));
            else
                snprintf(why, wlen, "%s", rc == DLOCK_ECANCELED ? "canceled" : "no answer in time");
            pg_lib.clear(first);
            return rc;
        }
    }
}

/* The reply to the statement sent last on k; the replies still unread
 * before it (a release's unlock) are read and dropped: the session's end
 * would have let go of anything they failed to. */
int pg_stmt_wait(pg_conn *k, int64_t until_ns, int cancel_fd, PGresult **out, char *why,
                     size_t wlen)
{
    *out = NULL;
    while (k->pending > 1) {
        int rc = stmt_read(k, until_ns, cancel_fd, NULL, why, wlen);
        if (rc)
            return rc;
    }
    return stmt_read(k, until_ns, cancel_fd, out, why, wlen);
}

/*
 * Run one statement with text parameters on k, waiting at most until
 * until_ns (-1: no bound) and while cancel_fd is quiet. Returns 0 with the
 * statement's result in *out (caller clears; a server error is a result
 * too: check its status), or DLOCK_EUNREACHABLE (the session is gone),
 * DLOCK_ETIMEDOUT or DLOCK_ECANCELED — after which the statement may still
 * run on the server: the caller must not reuse k. why gets one line.
 */
int pg_run(pg_conn *k, const char *sql, int n, const char *const *vals, int64_t until_ns,
               int cancel_fd, PGresult **out, char *why, size_t wlen)
{
    *out = NULL;
    int rc = pg_stmt_send(k, sql, n, vals, until_ns, cancel_fd, why, wlen);
    return rc ? rc : pg_stmt_wait(k, until_ns, cancel_fd, out, why, wlen);
}

/* run for a statement of fixed text (see stmt_send_fixed). */
int pg_run_fixed(pg_conn *k, const char *sql, int n, const char *const *vals,
                     int64_t until_ns, int cancel_fd, PGresult **out, char *why, size_t wlen)
{
    *out = NULL;
    int rc = stmt_send_fixed(k, sql, n, vals, until_ns, cancel_fd, why, wlen);
    return rc ? rc : pg_stmt_wait(k, until_ns, cancel_fd, out, why, wlen);
}

/* Fixed statements sent in one flight, each run once the one before it is
 * done; their replies in outs (an entry NULL: read and dropped), the
 * replies left from the session's last use read and dropped first. */
static int run_fixed_seq(pg_conn *k, int count, const char *const *sqls, const int *ns,
                         const char *const *const *vals, int64_t until_ns, int cancel_fd,
                         PGresult **const *outs, char *why, size_t wlen)
{
    int rc = 0;
    for (int i = 0; i < count; i++)
        if (outs[i])
            *outs[i] = NULL;
    for (int i = 0; i < count && !rc; i++)
        rc = stmt_send_fixed(k, sqls[i], ns[i], vals[i], until_ns, cancel_fd, why, wlen);
    while (!rc && k->pending > count)
        rc = stmt_read(k, until_ns, cancel_fd, NULL, why, wlen);
    for (int i = 0; i < count && !rc; i++)
        rc = stmt_read(k, until_ns, cancel_fd, outs[i], why, wlen);
    for (int i = 0; i < count && rc; i++) {
        if (outs[i]) {
            pg_lib.clear(*outs[i]);
            *outs[i] = NULL;
        }
    }
    return rc;
}

/* The SQLSTATE of a failed result ("" for success). */
static const char *sqlstate(const PGresult *r)
{
    ExecStatusType s = pg_lib.resultStatus(r);
    if (s == PGRES_TUPLES_OK || s == PGRES_COMMAND_OK)
        return "";
    const char *st = pg_lib.resultErrorField(r, PG_DIAG_SQLSTATE);
    return st ? st : "XX000";
}

/* A server error's code: permission, lock timeout, or a protocol surprise. */
static int code_of_state(const char *st)
{
    if (strncmp(st, "42501", 5) == 0 || strncmp(st, "28", 2) == 0)
        return DLOCK_EPERM;
    if (strcmp(st, "55P03") == 0)
        return DLOCK_ETIMEDOUT;
    if (strncmp(st, "57P", 3) == 0 || strncmp(st, "08", 2) == 0)
        return DLOCK_EUNREACHABLE;
    return DLOCK_EPROTO;
}

/* ---- connections ----------------------------------------------------------------- */

/* A new session, connected within until_ns and set up: non-blocking,
 * notices swallowed, and on servers from 14 on a check of the client's
 * socket while a statement waits. */
int pg_conn_open(pgclient *pc, int64_t until_ns, int cancel_fd, pg_conn **out, char *why,
                     size_t wlen)
{
    *out = NULL;
    char line[200];
    pg_conn *k = calloc(1, sizeof *k);
    if (!k) {
        snprintf(why, wlen, "out of memory");
        return DLOCK_ENOMEM;
    }
    k->pg = pg_lib.connectStartParams(pc->keys, pc->vals, 0);
    if (!k->pg) {
        free(k);
        snprintf(why, wlen, "out of memory");
        return DLOCK_ENOMEM;
    }
    int rc = 0;
    if (pg_lib.status(k->pg) == CONNECTION_BAD) {
        rc = DLOCK_EUNREACHABLE;
    } else {
        PostgresPollingStatusType st = PGRES_POLLING_WRITING;
        while (st != PGRES_POLLING_OK && st != PGRES_POLLING_FAILED) {
            rc = dl_wait_fd(pg_lib.socket(k->pg), st == PGRES_POLLING_READING ? POLLIN : POLLOUT,
                            until_ns, cancel_fd, NULL);
            if (rc)
                break;
            st = pg_lib.connectPoll(k->pg);
        }
        if (!rc && st == PGRES_POLLING_FAILED)
            rc = DLOCK_EUNREACHABLE;
    }
    if (rc) {
        if (rc == DLOCK_EUNREACHABLE) {
            const char *m = pg_lib.errorMessage(k->pg);
            one_line(m, line, sizeof line);
            /* libpq says why in words only: a refused password or role is
             * not a network problem. */
            if (strstr(m, "password authentication failed") || strstr(m, "no password") ||
                strstr(m, "role \"") || strstr(m, "permission denied") ||
                strstr(m, "pg_hba.conf"))
                rc = DLOCK_EPERM;
            else if (strstr(m, "database \"") && strstr(m, "does not exist"))
                rc = DLOCK_ENOENT;
            else if (strstr(m, "received invalid response") || strstr(m, "expected authentication") ||
                     strstr(m, "invalid") || strstr(m, "unexpected message") ||
                     strstr(m, "server closed the connection unexpectedly"))
                rc = strstr(m, "Connection refused") ? DLOCK_EUNREACHABLE : DLOCK_EPROTO;
            snprintf(why, wlen, "%s%s", line,
                     rc == DLOCK_EPROTO ? " (is it a PostgreSQL server?)" : "");
        } else {
            snprintf(why, wlen, "%s",
                     rc == DLOCK_ECANCELED ? "canceled while connecting"
                                           : "no answer from the server in time while connecting");
            if (rc == DLOCK_ETIMEDOUT)
                rc = DLOCK_EUNREACHABLE;
        }
        pg_conn_close(k);
        return rc;
    }
    pg_lib.setNoticeProcessor(k->pg, pq_quiet, NULL);
    if (pg_lib.setnonblocking(k->pg, 1) != 0 || !pg_lib.enterPipelineMode(k->pg)) {
        snprintf(why, wlen, "cannot make the connection non-blocking and pipelined");
        pg_conn_close(k);
        return DLOCK_EIO;
    }
    int v = pg_lib.serverVersion(k->pg);
    if (v > 0 && v < 90500) {
        snprintf(why, wlen, "PostgreSQL %d.%d is too old (9.5 or later: INSERT ... ON CONFLICT)",
                 v / 10000, v / 100 % 100);
        pg_conn_close(k);
        return DLOCK_ENOTSUP;
    }
    k->unnamed = pc->txpool;
    if (pc->txpool) { /* settings would stay on a server session others get next */
        *out = k;
        return 0;
    }
    /* The session's own limits, whatever the role's or database's
     * settings say: dlock bounds every statement on its own clock, and a
     * lock wait must last until dlock's deadline, not the server's
     * statement_timeout or lock_timeout (a timed wait sets lock_timeout
     * itself); a session holding a lock idles between statements (advisory)
     * or in its open transaction (rowlock), and must not be ended for it.
     * Our statements are prepared once and look rows up by key: a generic
     * plan serves every execution (a custom plan made the lease take
     * statement's every execution plan it again, 0.28 ms). From 14 on, a
     * waiting backend also checks now and then that we are still there.
     * Read committed: the upserts of the holders' rows see rows committed
     * after the statement's snapshot (a waiter's is from before its
     * wait), which repeatable read refuses as a serialization failure. */
    char setup[700];
    snprintf(setup, sizeof setup,
             "SELECT set_config('statement_timeout', '0', false), "
             "set_config('lock_timeout', '0', false), "
             "set_config('default_transaction_isolation', 'read committed', false)%s%s%s",
             v >= 90600 ? ", set_config('idle_in_transaction_session_timeout', '0', false)" : "",
             v >= 120000 ? ", set_config('plan_cache_mode', 'force_generic_plan', false)" : "",
             v >= 140000 ? ", set_config('idle_session_timeout', '0', false), "
                           "set_config('client_connection_check_interval', '" PG_CHECK_INTERVAL
                           "', false)"
                         : "");
    PGresult *r;
    rc = pg_run(k, setup, 0, NULL, until_ns, cancel_fd, &r, why, wlen);
    if (!rc && *sqlstate(r)) {
        rc = code_of_state(sqlstate(r));
        snprintf(why, wlen, "%s", one_line(pg_lib.resultErrorMessage(r), line, sizeof line));
    }
    pg_lib.clear(r);
    if (rc) {
        pg_conn_close(k);
        return rc;
    }
    *out = k;
    return 0;
}

/* An idle session from the pool, or a new one. */
int pg_conn_get(pgclient *pc, int64_t until_ns, int cancel_fd, pg_conn **out, char *why,
                    size_t wlen)
{
    for (;;) {
        dl_pooled *it = dl_pool_take(&pc->pool, NULL, NULL);
        if (!it)
            break;
        pg_conn *k = dl_container_of(it, pg_conn, pooled);
        /* A pooled session the server ended while it idled shows as a
         * readable socket with nothing due on it: a server about to end a
         * session says why first. Such a session is dropped. (Replies may
         * be due: a rowlock release's value update, sent unwaited.) */
        if (dl_idle_socket_ended(pg_lib.socket(k->pg)) &&
            (!pg_lib.consumeInput(k->pg) || pg_lib.status(k->pg) != CONNECTION_OK || k->pending == 0)) {
            pg_conn_close(k);
            continue;
        }
        k->reused = true;
        *out = k;
        return 0;
    }
    int64_t bound = dl_deadline_in(pc->connect_timeout_ms);
    if (until_ns >= 0 && until_ns < bound)
        bound = until_ns;
    return pg_conn_open(pc, bound, cancel_fd, out, why, wlen);
}

/*
 * A waiter whose session ended (a restart, pg_terminate_backend, an idle
 * limit) is not told anything: it waits on, on a new session. Connecting
 * is tried again every PG_RETRY_PAUSE_MS until retry_until (its deadline,
 * or connect_timeout_ms from now for a wait without one) or a cancel.
 */
#define PG_RETRY_PAUSE_MS 100

static int64_t retry_until_of(const pgclient *pc, const dlock_lock *l, int64_t deadline_ns)
{
    return deadline_ns < 0 ? dl_deadline_in(pc->connect_timeout_ms)
                           : l->op_deadline_ns;
}

static int conn_get_retry(pgclient *pc, int64_t retry_until, int cancel_fd, pg_conn **out,
                          char *why, size_t wlen)
{
    for (;;) {
        int rc = pg_conn_get(pc, retry_until, cancel_fd, out, why, wlen);
        if (rc != DLOCK_EUNREACHABLE || dl_ms_left(retry_until) == 0)
            return rc;
        int64_t pause_ns = dl_ms_to_ns(PG_RETRY_PAUSE_MS), left_ns = retry_until - dl_now_ns();
        if (dl_nap_ns(pause_ns < left_ns ? pause_ns : left_ns, cancel_fd) == DLOCK_ECANCELED) {
            snprintf(why, wlen, "canceled");
            return DLOCK_ECANCELED;
        }
    }
}

/* Whether a wait ended with deadline_ns may go on: time is left. */
static bool time_left(int64_t deadline_ns)
{
    return deadline_ns < 0 || (deadline_ns > 0 && dl_ms_left(deadline_ns) > 0);
}

/* Give a session back to the pool (or close it when the pool is full). */
void pg_conn_put(pgclient *pc, pg_conn *k)
{
    if (k && (k->failed || pg_lib.status(k->pg) != CONNECTION_OK ||
              !dl_pool_put(&pc->pool, &k->pooled)))
        pg_conn_close(k);
}

/* A statement that may still wait on the server (a lock wait we gave up
 * on): cancel it from another session, read what k still has to say (the
 * cancelled statement's error: its backend has left the lock queue by
 * then, so an inspect right after sees no waiter), then close k — all by
 * until_ns (the caller's deadline: a stopped server must not hold the
 * caller past it). Without time left, or when the cancel cannot be
 * delivered, closing k alone ends the server's wait when its backend next
 * looks at the socket (client_connection_check_interval, 14+). */
static void conn_abandon(pgclient *pc, pg_conn *k, int64_t until_ns)
{
    if (!k)
        return;
    char pid[24], why[128];
    snprintf(pid, sizeof pid, "%d", pg_lib.backendPID(k->pg));
    pg_conn *o;
    if (dl_ms_left(until_ns) > 0 && pg_conn_get(pc, until_ns, -1, &o, why, sizeof why) == 0) {
        const char *p[] = {pid};
        PGresult *r;
        int rc = pg_run(o, "SELECT pg_cancel_backend($1::int)", 1, p, until_ns, -1, &r, why,
                     sizeof why);
        pg_lib.clear(r);
        if (rc)
            pg_conn_close(o);
        else
            pg_conn_put(pc, o);
        while (!rc && k->pending > 0 &&
               stmt_read(k, until_ns, -1, NULL, why, sizeof why) == 0) {
        }
    }
    pg_conn_close(k);
}

/* The bound of a call made while acquiring l: its op_deadline_ns when it
 * has one (the caller's deadline plus the margin), else op_timeout_ms. */
static int64_t op_until(const pgclient *pc, const dlock_lock *l)
{
    return l && l->op_deadline_ns > 0 ? l->op_deadline_ns
                                      : dl_deadline_in(pc->op_timeout_ms);
}

/* One statement on a pooled session, for the calls that hold no lock. */
static int pool_run_until(dlock_client *c, int64_t until, const char *sql, int n,
                          const char *const *vals, PGresult **out, char *why, size_t wlen)
{
    pgclient *pc = pc_of(c);
    pg_conn *k;
    *out = NULL;
    int rc;
    do {
        rc = pg_conn_get(pc, until, -1, &k, why, wlen);
        if (rc)
            return rc;
        bool reused = k->reused;
        rc = pg_run(k, sql, n, vals, until, -1, out, why, wlen);
        if (rc)
            pg_conn_close(k);
        if (rc != DLOCK_EUNREACHABLE || !reused)
            break;
    } while (1); /* a pooled session that died idle: again on another */
    if (rc)
        return rc;
    if (*sqlstate(*out)) {
        char line[200];
        rc = code_of_state(sqlstate(*out));
        snprintf(why, wlen, "%s", one_line(pg_lib.resultErrorMessage(*out), line, sizeof line));
        pg_lib.clear(*out);
        *out = NULL;
    }
    pg_conn_put(pc, k);
    return rc;
}

int pg_pool_run(dlock_client *c, const char *sql, int n, const char *const *vals,
                    PGresult **out, char *why, size_t wlen)
{
    return pool_run_until(c, op_until(pc_of(c), NULL), sql, n, vals, out, why, wlen);
}

/* ---- sessions that hold locks (advisory, rowlock) ---------------------------------- */

/* Whether an idle held session has ended (the core's watcher asks when its
 * socket is readable): consumes what the server sent it — a notice, or the
 * error that ends it. */
static bool session_gone(dl_session *s, char *why, size_t wlen)
{
    pg_conn *k = dl_container_of(s, pg_conn, sess);
    char line[200];
    if (!pg_lib.consumeInput(k->pg) || pg_lib.status(k->pg) != CONNECTION_OK) {
        snprintf(why, wlen, "%s", one_line(pg_lib.errorMessage(k->pg), line, sizeof line));
        return true;
    }
    PGnotify *nf;
    while ((nf = pg_lib.notifies(k->pg)) != NULL)
        pg_lib.freemem(nf);
    return false;
}

/* A session still held when the client closes: closed with it. */
static void session_drop(dl_session *s)
{
    pg_conn *k = dl_container_of(s, pg_conn, sess);
    ((pglock *)s->lock->bstate)->conn = NULL;
    pg_conn_close(k);
}

/* k now holds l: watched from here on. */
static int watch_conn(dlock_lock *l, pg_conn *k, char *why, size_t wlen)
{
    return dl_swatch_add(&pc_of(l->c)->watch, &k->sess, l, pg_lib.socket(k->pg), why, wlen);
}

/* Take l's session off the watched list for a call on it (or for good);
 * NULL when it holds nothing; k->sess.lost when the watcher found it gone. */
static pg_conn *unwatch_conn(dlock_lock *l)
{
    pg_conn *k = ((pglock *)l->bstate)->conn;
    if (k)
        (void)dl_swatch_remove(&pc_of(l->c)->watch, &k->sess);
    return k;
}

/* Back on the watched list after a call on it. */
static void rewatch_conn(dlock_lock *l, pg_conn *k)
{
    char why[100]; /* cannot fail: the thread runs since the lock was taken */
    (void)dl_swatch_add(&pc_of(l->c)->watch, &k->sess, l, pg_lib.socket(k->pg), why, sizeof why);
}

/* ---- locks ----------------------------------------------------------------------- */

/* FNV-1a of the table and the name: the advisory key. Names of another
 * table get other keys; a collision inside one table is caught by the
 * table's unique key (see acquire). */
static int64_t key_of_table(const char *table, const char *name)
{
    uint64_t h = 0xcbf29ce484222325ULL;
    for (const char *s = table; *s; s++)
        h = (h ^ (unsigned char)*s) * 0x100000001b3ULL;
    h = (h ^ 0) * 0x100000001b3ULL;
    for (const char *s = name; *s; s++)
        h = (h ^ (unsigned char)*s) * 0x100000001b3ULL;
    int64_t k;
    memcpy(&k, &h, sizeof k);
    return k;
}

int64_t pg_key_of(const pgclient *pc, const char *name)
{
    return key_of_table(pc->table, name);
}

static int pg_lock_init(dlock_lock *l)
{
    pglock *pl = calloc(1, sizeof *pl);
    if (!pl)
        return dl_lock_err(l, DLOCK_ENOMEM, "out of memory");
    pl->key = pg_key_of(pc_of(l->c), l->name);
    l->bstate = pl;
    return 0;
}

static void pg_lock_fini(dlock_lock *l)
{
    free(l->bstate);
    l->bstate = NULL;
}

/* The name that took l's key first (a collision), into buf. */
static void colliding_name(dlock_lock *l, char *buf, size_t len)
{
    pgclient *pc = pc_of(l->c);
    pglock *pl = l->bstate;
    char key[24], why[128], sql[256];
    snprintf(key, sizeof key, "%" PRId64, pl->key);
    snprintf(sql, sizeof sql, "SELECT name FROM %s WHERE key = $1::bigint", pc->table);
    const char *p[] = {key};
    PGresult *r = NULL;
    snprintf(buf, len, "another name");
    if (pool_run_until(l->c, op_until(pc, l), sql, 1, p, &r, why, sizeof why) == 0 &&
        pg_lib.ntuples(r) == 1)
        snprintf(buf, len, "\"%s\"", pg_lib.getvalue(r, 0, 0));
    pg_lib.clear(r);
}

static int names_check(dlock_lock *l, PGresult *got, int col, char *why, size_t wlen);
static int run_ensure(dlock_lock *l, char *why, size_t wlen);

static int lease_acquire(dlock_lock *l, int64_t deadline_ns);
static int lease_release(dlock_lock *l);
static int lease_inspect(dlock_client *c, const char *name, dlock_info *info);
static int lease_set_value(dlock_lock *l, const char *value);
static int lease_row(dlock_lock *l, const char *sql, const char *extra, int *touched);
static int row_inspect(dlock_client *c, const char *name, dlock_info *info);
static int row_set_value(dlock_lock *l, const char *value);

/* A grant whose advisory key is another name's (the table's unique key
 * said so): DLOCK_ENAME, naming it. */
static int key_collision(dlock_lock *l)
{
    pgclient *pc = pc_of(l->c);
    char other[DL_NAME_MAX + 8];
    colliding_name(l, other, sizeof other);
    return dl_lock_err(l, DLOCK_ENAME,
                       "lock \"%s\": its advisory key collides with the one of %s in table %s "
                       "(64-bit hash): use another name",
                       l->name, other, pc->table);
}

/* The second try at a token (see token_ctes): 0 drawn (l->token set), 1
 * nothing drawn, or a code (why). */
typedef int (*draw_fn)(dlock_lock *l, void *arg, char *why, size_t wlen);

/* A grant that drew no token (no epoch in force): an epoch put in force and
 * the token drawn again with draw, up to 3 times. 0, or a code (why). */
static int draw_under_epoch(dlock_lock *l, draw_fn draw, void *arg, char *why, size_t wlen)
{
    for (int attempt = 0; attempt < 3; attempt++) {
        int rc = run_ensure(l, why, wlen);
        if (!rc)
            rc = draw(l, arg, why, wlen);
        if (rc != 1)
            return rc;
    }
    snprintf(why, wlen, "no token after 3 tries (the sequence %s more than 2^%d past its run's "
             "base?)", pc_of(l->c)->seq, PG_EPOCH_SHIFT);
    return DLOCK_EIO;
}

/* advisory: the draw alone, on the session k holding the lock */
struct advisory_draw {
    pg_conn *k;
    const char *const *params; /* key, name, holder */
};

static int advisory_draw(dlock_lock *l, void *arg, char *why, size_t wlen)
{
    pgclient *pc = pc_of(l->c);
    struct advisory_draw *a = arg;
    PGresult *r;
    char line[200];
    int rc = pg_run_fixed(a->k, pc->sql_redraw, 3, a->params, op_until(pc, l), -1, &r, why, wlen);
    if (rc)
        return rc;
    if (strcmp(sqlstate(r), "23505") == 0) {
        rc = DLOCK_ENAME; /* (the caller names the other: key_collision) */
        snprintf(why, wlen, "its advisory key collides with another name's");
    } else if (*sqlstate(r)) {
        rc = code_of_state(sqlstate(r));
        snprintf(why, wlen, "%s", one_line(pg_lib.resultErrorMessage(r), line, sizeof line));
    } else if (pg_lib.ntuples(r) == 1 && !pg_lib.getisnull(r, 0, 1)) {
        atomic_store(&l->token, strtoull(pg_lib.getvalue(r, 0, 1), NULL, 10));
    } else {
        rc = 1;
    }
    pg_lib.clear(r);
    return rc;
}

/* rowlock: who took the row, with its token, on another pooled session
 * (the row's own is in its transaction) */
static int rowlock_draw(dlock_lock *l, void *arg, char *why, size_t wlen)
{
    pgclient *pc = pc_of(l->c);
    PGresult *r;
    int rc = pool_run_until(l->c, op_until(pc, l), pc->sql_row_info, 3, arg, &r, why, wlen);
    if (rc)
        return rc;
    rc = pg_lib.ntuples(r) == 1 ? 0 : 1;
    if (!rc)
        atomic_store(&l->token, strtoull(pg_lib.getvalue(r, 0, 0), NULL, 10));
    pg_lib.clear(r);
    return rc;
}

static int pg_acquire(dlock_lock *l, int64_t deadline_ns)
{
    pgclient *pc = pc_of(l->c);
    if (pc->lease)
        return lease_acquire(l, deadline_ns);
    pglock *pl = l->bstate;
    char why[300], line[200];
    bool shared = l->opts.kind == DLOCK_SHARED;
    int cancel_fd = deadline_ns != 0 ? dl_cancel_fd(l) : -1;
    /* A timed wait is bounded by the server (lock_timeout at the deadline)
     * and, should the server not answer, by op_deadline_ns here. */
    int64_t until = deadline_ns == 0 ? dl_deadline_in(dl_op_timeout_ms(l, pc->op_timeout_ms))
                    : deadline_ns < 0 ? -1
                                      : l->op_deadline_ns;
    pg_conn *k;
    int64_t retry_until = 0; /* set when a waiter's session ended: see conn_get_retry */
    int rc;
    PGresult *r;
again:
    r = NULL;
    if (retry_until)
        rc = conn_get_retry(pc, retry_until, cancel_fd, &k, why, sizeof why);
    else
        rc = pg_conn_get(pc,
                      deadline_ns < 0 ? dl_deadline_in(pc->connect_timeout_ms)
                                      : until,
                      cancel_fd, &k, why, sizeof why);
    if (rc)
        return dl_connect_err(l, deadline_ns, rc, why, pc->redacted);
    bool reused = k->reused;
    char key[24], holder[300], timeout[24];
    snprintf(key, sizeof key, "%" PRId64, pl->key);
    char self[200];
    dl_self_desc(self, sizeof self);
    snprintf(holder, sizeof holder, "%s %s", l->owner, self);
    const char *sql;
    const char *p[4] = {key, l->name, holder, timeout};
    const char *mine[] = {l->name, pc->mode, pc->table}; /* the names table's row */
    int np = 3;
    /* The holder's row is written by a handle's first grant: that write
     * catches a name whose key another's has (see key_collision) and lists
     * the name. Later grants leave it out (see TOKEN_LOCK). */
    bool bare = pl->rowed && !pc->rowlock;
    if (deadline_ns == 0) {
        sql = bare ? pc->sql_bare[0][shared] : shared ? pc->sql_try_r : pc->sql_try_x;
        np = bare ? 1 : 3;
    } else {
        int ms = deadline_ns < 0 ? 0 : dl_ms_left(deadline_ns);
        if (deadline_ns > 0 && ms == 0)
            ms = 1;
        snprintf(timeout, sizeof timeout, "%d", ms);
        sql = bare ? pc->sql_bare[1][shared] : shared ? pc->sql_wait_r : pc->sql_wait_x;
        np = bare ? 2 : 4;
    }
    const char *pb[] = {key, timeout}; /* (bare) */
    if (pc->rowlock) {
        /* the name's row (committed at once), then the transaction that
         * locks it: its statements take the name, the queue's key and the
         * timeout */
        p[0] = l->name;
        p[1] = key;
        p[2] = timeout;
        np = deadline_ns == 0 ? 2 : 3;
        const char *ensure[] = {l->name};
        while (k->pending > 0 && !rc) /* replies left from the session's last use */
            rc = stmt_read(k, until, cancel_fd, NULL, why, sizeof why);
        if (!rc)
            rc = stmt_send_fixed(k, pc->sql_row_ensure, 1, ensure, until, cancel_fd, why,
                                 sizeof why);
        if (!rc && !pl->named) /* (committed before the transaction: see names_check) */
            rc = stmt_send_fixed(k, pc->sql_names_add, 3, mine, until, cancel_fd, why,
                                 sizeof why);
        if (!rc)
            rc = stmt_send_fixed(k, "BEGIN", 0, NULL, until, cancel_fd, why, sizeof why);
        for (int i = 0; i < (pl->named ? 2 : 3) && !rc; i++) {
            rc = stmt_read(k, until, cancel_fd, &r, why, sizeof why);
            if (!rc && *sqlstate(r)) {
                rc = code_of_state(sqlstate(r));
                snprintf(why, sizeof why, "%s", one_line(pg_lib.resultErrorMessage(r), line, sizeof line));
            }
            pg_lib.clear(r);
            r = NULL;
        }
        if (rc && rc != DLOCK_ETIMEDOUT && rc != DLOCK_ECANCELED &&
            !(rc == DLOCK_EUNREACHABLE && reused)) {
            pg_conn_close(k);
            return dl_lock_err(l, rc, "lock \"%s\": %s (%s)", l->name, why, pc->redacted);
        }
    }
    /* The name's rows in the names table, read once it is ours (our own
     * row added first: advisory; rowlock added it before its transaction):
     * see names_check. */
    PGresult *names = NULL;
    if (pc->rowlock && !rc) {
        const char *seq[] = {sql, pc->sql_names_get};
        const int ns[] = {np, 1};
        const char *const *vals[] = {p, mine};
        PGresult **outs[] = {&r, &names};
        rc = run_fixed_seq(k, 2, seq, ns, vals, until, cancel_fd, outs, why, sizeof why);
    } else if (!pc->rowlock) { /* (our row is added first unless it was there last time) */
        const char *seq[] = {sql, pc->sql_names_add, pc->sql_names_get};
        int ns[] = {np, 3, 1};
        const char *const *vals[] = {bare ? pb : p, mine, mine};
        PGresult **outs[] = {&r, NULL, &names};
        if (pl->named) {
            seq[1] = seq[2];
            ns[1] = ns[2];
            vals[1] = vals[2];
            outs[1] = outs[2];
        }
        rc = run_fixed_seq(k, pl->named ? 2 : 3, seq, ns, vals, until, cancel_fd, outs, why,
                           sizeof why);
    }
    /* (only a grant needs it: advisory's column ok says whether it was one) */
    if (rc || *sqlstate(r) || pg_lib.ntuples(r) != 1 ||
        (!pc->rowlock && strcmp(pg_lib.getvalue(r, 0, 0), "t") != 0)) {
        pg_lib.clear(names);
        names = NULL;
    }
    if (rc == DLOCK_EUNREACHABLE && reused) {
        pg_conn_close(k); /* a pooled session that died idle: again on another */
        goto again;
    }
    /* The session ended under a waiter: it waits on, on a new one. */
    bool ended = rc == DLOCK_EUNREACHABLE ||
                 (!rc && (strncmp(sqlstate(r), "57P", 3) == 0 || strncmp(sqlstate(r), "08", 2) == 0));
    if (ended && deadline_ns != 0 && time_left(deadline_ns)) {
        pg_lib.clear(r);
        pg_conn_close(k);
        retry_until = retry_until_of(pc, l, deadline_ns);
        goto again;
    }
    if (rc == DLOCK_ETIMEDOUT || rc == DLOCK_ECANCELED) {
        conn_abandon(pc, k, op_until(pc, l));
        if (rc == DLOCK_ECANCELED)
            return dl_lock_err(l, rc, "lock \"%s\": canceled", l->name);
        return dl_lock_err(l, deadline_ns == 0 ? DLOCK_EUNREACHABLE : DLOCK_ETIMEDOUT,
                           "lock \"%s\": the server did not answer in time (%s)", l->name,
                           pc->redacted);
    }
    if (rc) {
        pg_conn_close(k);
        return dl_lock_err(l, rc, "lock \"%s\": %s (%s)", l->name, why, pc->redacted);
    }
    char st[8]; /* the result is cleared before the code is looked at */
    snprintf(st, sizeof st, "%s", sqlstate(r));
    if (*st) {
        one_line(pg_lib.resultErrorMessage(r), line, sizeof line);
        pg_lib.clear(r);
        /* The session may hold the advisory lock whatever failed after it:
         * only closing it lets go for sure. */
        pg_conn_close(k);
        if (strcmp(st, "55P03") == 0 && deadline_ns == 0) /* rowlock's NOWAIT */
            return dl_lock_err(l, DLOCK_EBUSY, "lock \"%s\" is held by another owner", l->name);
        if (strcmp(st, "55P03") == 0)
            return dl_lock_err(l, DLOCK_ETIMEDOUT, "lock \"%s\": timed out", l->name);
        if (strcmp(st, "57014") == 0) /* canceled on the server's side */
            return dl_lock_err(l, DLOCK_ECANCELED,
                               "lock \"%s\": the server canceled the wait (%s): a "
                               "pg_cancel_backend, or a limit set where dlock's own do not "
                               "apply (a pooler's query_timeout)",
                               l->name, line);
        if (strcmp(st, "23505") == 0)
            return key_collision(l);
        return dl_lock_err(l, code_of_state(st), "lock \"%s\": %s (%s)", l->name, line,
                           pc->redacted);
    }
    if (pg_lib.ntuples(r) != 1 && pc->rowlock && deadline_ns == 0) { /* the queue's lock is taken */
        pg_lib.clear(r);
        pg_conn_close(k); /* (its transaction is open) */
        return dl_lock_err(l, DLOCK_EBUSY, "lock \"%s\" is held by another owner", l->name);
    }
    if (pg_lib.ntuples(r) != 1 && pc->rowlock) { /* its row is gone: dropped by hand? */
        pg_lib.clear(r);
        pg_conn_close(k);
        return dl_lock_err(l, DLOCK_EPROTO, "lock \"%s\": its row in %s vanished", l->name,
                           pc->table);
    }
    if (pg_lib.ntuples(r) != 1 || (!pc->rowlock && strcmp(pg_lib.getvalue(r, 0, 0), "t") != 0)) {
        pg_lib.clear(r); /* try: someone holds it */
        pg_conn_put(pc, k);
        return dl_lock_err(l, DLOCK_EBUSY, "lock \"%s\" is held by another owner", l->name);
    }
    /* advisory: the token, or none yet (no epoch in force: drawn below) */
    bool drawn = pc->rowlock || !pg_lib.getisnull(r, 0, 1);
    if (!pc->rowlock && drawn)
        atomic_store(&l->token, strtoull(pg_lib.getvalue(r, 0, 1), NULL, 10));
    pg_lib.clear(r);
    rc = names_check(l, names, 0, why, sizeof why);
    pg_lib.clear(names);
    if (!rc && !drawn) { /* the lock is ours, and no epoch was in force */
        struct advisory_draw a = {k, p};
        rc = draw_under_epoch(l, advisory_draw, &a, why, sizeof why);
        if (rc == DLOCK_ENAME) {
            pg_conn_close(k);
            return key_collision(l);
        }
    }
    if (rc) {
        pg_conn_close(k); /* the session's end lets go */
        return dl_lock_err(l, rc, "lock \"%s\": %s", l->name, why);
    }
    pl->rowed = !pc->rowlock;
    if (pc->rowlock) {
        /* the token, and who took the row for dlock_inspect and the
         * leader's value: the row itself stays locked until the release */
        const char *ip[] = {l->name, l->owner, holder};
        rc = rowlock_draw(l, (void *)ip, why, sizeof why);
        if (rc == 1) /* no epoch in force */
            rc = draw_under_epoch(l, rowlock_draw, (void *)ip, why, sizeof why);
        if (rc) {
            pg_conn_close(k); /* its transaction ends, and the row is free */
            /* (on a second pooled session, which may have to connect: time
             * running out there is a timeout, as for the lock's own) */
            char what[sizeof why + 32];
            snprintf(what, sizeof what, "recording the holder: %s", why);
            return dl_connect_err(l, deadline_ns, rc, what, pc->redacted);
        }
    }
    pl->conn = k;
    rc = watch_conn(l, k, why, sizeof why);
    if (rc) {
        pl->conn = NULL;
        pg_conn_close(k);
        return dl_lock_err(l, rc, "lock \"%s\": %s", l->name, why);
    }
    return 0;
}

static int pg_release(dlock_lock *l)
{
    pgclient *pc = pc_of(l->c);
    if (pc->lease)
        return lease_release(l);
    pglock *pl = l->bstate;
    pg_conn *k = unwatch_conn(l);
    pl->conn = NULL;
    if (!k)
        return dl_lock_err(l, DLOCK_ENOTHELD, "lock \"%s\" is not held", l->name);
    if (k->sess.lost) {
        int rc = dl_lock_err(l, DLOCK_ELOST, "lock \"%s\": the session holding it ended: %s",
                             l->name, k->sess.why);
        pg_conn_close(k);
        return rc;
    }
    char key[24], tok[24], why[300];
    snprintf(key, sizeof key, "%" PRId64, pl->key);
    snprintf(tok, sizeof tok, "%" PRIu64, (uint64_t)atomic_load(&l->token));
    const char *p[] = {key, tok};
    int64_t until = dl_deadline_in(dl_op_timeout_ms(l, pc->op_timeout_ms));
    /* Waited for: once release returns, a rival's try finds the lock free,
     * and an unlock that held nothing says the lock was lost. (Sent and not
     * waited for, the cycle was 2.4 x SELECT 1 instead of 3.6, but a try
     * right after the release could still find it held.) The token lock
     * goes with it. */
#define UNLOCK_TOKEN TOKEN_LOCK("pg_advisory_unlock", "$2::bigint")
    PGresult *r;
    const char *sql = pc->rowlock ? "COMMIT"
                      : l->opts.kind == DLOCK_SHARED
                          ? "SELECT pg_advisory_unlock_shared($1::bigint), " UNLOCK_TOKEN
                          : "SELECT pg_advisory_unlock($1::bigint), " UNLOCK_TOKEN;
#undef UNLOCK_TOKEN
    int rc = pg_run_fixed(k, sql, pc->rowlock ? 0 : 2, p, until, -1, &r, why, sizeof why);
    if (rc) {
        /* Closing the session lets go of the lock as soon as the server
         * sees it closed. */
        pg_conn_close(k);
        return dl_lock_err(l, rc == DLOCK_EUNREACHABLE ? DLOCK_ELOST : DLOCK_EUNREACHABLE,
                           "lock \"%s\": releasing: %s; its session was closed, which lets "
                           "go of it (%s)",
                           l->name, why, pc->redacted);
    }
    bool was_held = !*sqlstate(r) && (pc->rowlock || (pg_lib.ntuples(r) == 1 &&
                                                       strcmp(pg_lib.getvalue(r, 0, 0), "t") == 0));
    pg_lib.clear(r);
    if (was_held && pc->rowlock) { /* its leader value goes with it (sent, not waited for) */
        char del[300];
        /* (only when there is one: a write per release made its commit a flush) */
        snprintf(del, sizeof del,
                 "UPDATE %s SET value = NULL WHERE name = $1 AND owner = $2 AND value IS NOT NULL",
                 pc->values);
        const char *dp[] = {l->name, l->owner};
        (void)pg_stmt_send(k, del, 2, dp, until, -1, why, sizeof why);
    }
    if (!was_held) {
        pg_conn_close(k);
        return dl_lock_err(l, DLOCK_ELOST, "lock \"%s\": its session no longer held it",
                           l->name);
    }
    pg_conn_put(pc, k);
    return 0;
}

static void pg_abandon(dlock_lock *l)
{
    pglock *pl = l->bstate;
    if (pc_of(l->c)->lease) {
        /* Give the row back if it is still ours (a grant that came too
         * late); the owner check leaves anyone else's alone. */
        int touched;
        (void)lease_row(l, pc_of(l->c)->sql_free, NULL, &touched);
        return;
    }
    pg_conn *k = unwatch_conn(l);
    pl->conn = NULL;
    pg_conn_close(k); /* the session's end lets go of its locks */
}

/* lease: a row held now */
#define LEASE_HELD "owner IS NOT NULL AND expires >= clock_timestamp()"
/* lease: a queued waiter (row w of TABLE_wait) that lives: its stamp is
 * fresh and the session it queued from is still there (a waiter killed
 * with -9 ends its session at once; its stamp would hold the ones behind it
 * back for up to 3 s). pid is NULL in rows queued by older versions. */
#define LEASE_WAITER_LIVE(w)                                                                 \
    w ".alive >= clock_timestamp() AND (" w ".pid IS NULL OR EXISTS (SELECT 1 FROM "         \
    "pg_stat_get_activity(" w ".pid)))"
/* rowlock: the session holding NAME's row: pg_locks of the transaction that locked it. */
#define ROW_HOLDER_JOIN                                                                      \
    "LEFT JOIN pg_locks AS l ON l.locktype = 'transactionid' AND l.transactionid = t.xmax "  \
    "AND l.granted AND l.mode = 'ExclusiveLock' "

/* ---- what the lock table knows ---------------------------------------------------- */

/* pg_locks names an int8 advisory key by its halves and objsubid 1. */
#define PG_LOCKS_OF(key)                                                                     \
    "l.locktype = 'advisory' AND l.objsubid = 1 AND l.database = "                           \
    "(SELECT oid FROM pg_database WHERE datname = current_database()) AND "                  \
    "l.classid = ((" key " >> 32) & 4294967295)::oid AND l.objid = (" key " & 4294967295)::oid"

static bool ident_ok(const char *s);
static char *fmt_alloc(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static char *token_ctes(pgclient *pc, const char *rel, const char *cond);
static int run_build_sql(pgclient *pc);
/* ---- one name, one mode ------------------------------------------------------------- */
/*
 * The same name in two modes would be two locks: advisory keys, lease rows
 * and locked rows do not see each other. The names table (dlock_names, in
 * the lock table's schema) has a row (name, mode, table) for each mode and
 * table a name was taken in and may be held in. A client that has just
 * taken a name reads the name's rows (a statement after the grant, so a
 * fresh snapshot): all of its own mode (tables of one mode are separate
 * locks, as documented), and it keeps the lock, adding its row the first
 * time. A row of another mode: it adds its own row first (committed), then
 * looks whether the name is held in that mode and table; if it is, it
 * gives its lock up with DLOCK_ECONFLICT, else it deletes those rows. Both
 * sides write or hold first and look after, so of two clients taking the
 * name at once in two modes at least one sees the other (both may give
 * up; never both hold).
 */

static int names_build_sql(pgclient *pc)
{
    pc->sql_names_get = fmt_alloc("SELECT mode, tbl FROM %s WHERE name = $1", pc->names);
    pc->sql_names_add = fmt_alloc(
        "INSERT INTO %s (name, mode, tbl) VALUES ($1, $2, $3) ON CONFLICT DO NOTHING",
        pc->names);
    pc->sql_names_drop =
        fmt_alloc("DELETE FROM %s WHERE name = $1 AND mode = $2 AND tbl = $3", pc->names);
    return pc->sql_names_get && pc->sql_names_add && pc->sql_names_drop ? 0 : DLOCK_ENOMEM;
}

/* A table as dlock writes it: "t" or "s"."t", lowercase identifiers (the
 * names table is anyone's to write: nothing else goes into a statement). */
static bool quoted_table_ok(const char *t)
{
    char part[PG_IDENT_MAX + 2];
    for (int i = 0; i < 2; i++) {
        if (*t++ != '"')
            return false;
        size_t n = strcspn(t, "\"");
        if (n > PG_IDENT_MAX || t[n] != '"')
            return false;
        memcpy(part, t, n);
        part[n] = '\0';
        if (!ident_ok(part))
            return false;
        t += n + 1;
        if (!*t)
            return true;
        if (*t++ != '.')
            return false;
    }
    return false;
}

/* Whether name is held in mode (in table tbl) now: 1, 0, or an error. */
static int held_in(dlock_lock *l, const char *mode, const char *tbl, char *why, size_t wlen)
{
    pgclient *pc = pc_of(l->c);
    char sql[900], key[24];
    const char *p[] = {l->name};
    if (strcmp(mode, "lease") == 0) {
        if (!quoted_table_ok(tbl)) {
            snprintf(why, wlen, "the names table %s names no lock table: %.80s", pc->names, tbl);
            return DLOCK_EPROTO;
        }
        snprintf(sql, sizeof sql,
                 "SELECT count(*) FROM %s WHERE name = $1 AND " LEASE_HELD, tbl);
    } else if (strcmp(mode, "advisory") == 0 || strcmp(mode, "rowlock") == 0) {
        /* an advisory holder's key, a rowlock holder's queue key: both in pg_locks */
        snprintf(key, sizeof key, "%" PRId64, key_of_table(tbl, l->name));
        p[0] = key;
        snprintf(sql, sizeof sql,
                 "SELECT count(*) FROM pg_locks l WHERE " PG_LOCKS_OF("$1::bigint")
                 " AND l.granted");
    } else {
        snprintf(why, wlen, "the names table %s names no mode: %.40s", pc->names, mode);
        return DLOCK_EPROTO;
    }
    PGresult *r;
    int rc = pool_run_until(l->c, op_until(pc, l), sql, 1, p, &r, why, wlen);
    if (rc)
        return rc;
    int held = atol(pg_lib.getvalue(r, 0, 0)) > 0;
    pg_lib.clear(r);
    return held;
}

/* After l was granted: whether it may keep it (0), or DLOCK_ECONFLICT when the
 * name is held in another mode (why says which), or an error. got: the
 * name's rows in the names table, read after the grant, its mode and table
 * in columns col and col + 1 (rows with no mode skipped); NULL: read here. */
static int names_check(dlock_lock *l, PGresult *got, int col, char *why, size_t wlen)
{
    pgclient *pc = pc_of(l->c);
    pglock *pl = l->bstate;
    int64_t until = op_until(pc, l);
    const char *mine[] = {l->name, pc->mode, pc->table};
    PGresult *r = got, *w;
    int rc;
    pl->named = false;
    if (!r) {
        if ((rc = pool_run_until(l->c, until, pc->sql_names_get, 1, mine, &r, why, wlen)))
            return rc;
        col = 0;
    }
    bool have = false, others = false;
    for (int i = 0; i < pg_lib.ntuples(r); i++) {
        if (pg_lib.getisnull(r, i, col))
            continue;
        bool same_mode = strcmp(pg_lib.getvalue(r, i, col), pc->mode) == 0;
        have |= same_mode && strcmp(pg_lib.getvalue(r, i, col + 1), pc->table) == 0;
        others |= !same_mode;
    }
    if (r != got)
        pg_lib.clear(r);
    if (!have) {
        /* Our row was not there when we read (the first time in this mode
         * and table, or another mode's client removed it): added, and the
         * rows read again after it, as a client of another mode may have
         * added its own meanwhile. */
        rc = pool_run_until(l->c, until, pc->sql_names_add, 3, mine, &w, why, wlen);
        pg_lib.clear(w);
        if (rc)
            return rc;
        others = true;
    }
    if (!others) {
        pl->named = true;
        return 0;
    }
    /* Our row is in: now the other modes' rows, as they are now. */
    if ((rc = pool_run_until(l->c, until, pc->sql_names_get, 1, mine, &r, why, wlen)))
        return rc;
    rc = 0;
    for (int i = 0; i < pg_lib.ntuples(r) && rc == 0; i++) {
        const char *mode = pg_lib.getvalue(r, i, 0), *tbl = pg_lib.getvalue(r, i, 1);
        if (strcmp(mode, pc->mode) == 0)
            continue;
        int held = held_in(l, mode, tbl, why, wlen);
        if (held > 0) {
            snprintf(why, wlen,
                     "held in mode=%.10s (table %.60s): a name is one lock across modes, and "
                     "this client's is mode=%s",
                     mode, tbl, pc->mode);
            rc = DLOCK_ECONFLICT;
        } else if (held == 0) { /* a mode it is no longer used in */
            const char *drop[] = {l->name, mode, tbl};
            rc = pool_run_until(l->c, until, pc->sql_names_drop, 3, drop, &w, why, wlen);
            pg_lib.clear(w);
        } else {
            rc = held;
        }
    }
    pg_lib.clear(r);
    pl->named = rc == 0;
    return rc;
}

static int pg_inspect(dlock_client *c, const char *name, dlock_info *info)
{
    pgclient *pc = pc_of(c);
    if (pc->rowlock)
        return row_inspect(c, name, info);
    if (pc->lease)
        return lease_inspect(c, name, info);
    char key[24], why[300], sql[2400];
    snprintf(key, sizeof key, "%" PRId64, pg_key_of(pc, name));
    /* the holder by its token lock (g), else (a client of an older version)
     * by the name's row, which the last grant that wrote it left */
    snprintf(sql, sizeof sql,
             "WITH g AS (" TOKEN_HOLDERS("$1::bigint") " LIMIT 1) "
             "SELECT (SELECT count(*) FROM pg_locks l WHERE " PG_LOCKS_OF("$1::bigint")
             " AND l.granted), (SELECT count(*) FROM pg_locks l WHERE " PG_LOCKS_OF("$1::bigint")
             " AND NOT l.granted), t.token, t.holder, "
             "floor(extract(epoch FROM clock_timestamp() - t.since) * 1000)::bigint, "
             "g.tok, g.who, g.held_ms "
             "FROM (SELECT 1) AS one LEFT JOIN %s AS t ON t.name = $2 LEFT JOIN g ON true",
             pc->table);
    const char *p[] = {key, name};
    PGresult *r;
    int rc = pg_pool_run(c, sql, 2, p, &r, why, sizeof why);
    if (rc)
        return dl_client_err(c, rc, "inspect \"%s\": %s (%s)", name, why, pc->redacted);
    int holders = atoi(pg_lib.getvalue(r, 0, 0));
    bool by_lock = !pg_lib.getisnull(r, 0, 5); /* (its token lock: see TOKEN_LOCK) */
    info->held = holders > 0;
    info->holders = holders;
    info->waiters = atoi(pg_lib.getvalue(r, 0, 1));
    info->lease_ms = -1;
    info->held_ms = -1;
    if (by_lock) {
        info->token = strtoull(pg_lib.getvalue(r, 0, 5), NULL, 10);
        /* (its session's application_name: "dlock pid N on HOST") */
        const char *who = pg_lib.getvalue(r, 0, 6);
        if (strncmp(who, "dlock ", 6) == 0)
            who += 6;
        snprintf(info->holder, sizeof info->holder, "%s", who);
        if (!pg_lib.getisnull(r, 0, 7)) /* (NULL: this role may not see it) */
            info->held_ms = strtoll(pg_lib.getvalue(r, 0, 7), NULL, 10);
    } else if (holders > 0 && !pg_lib.getisnull(r, 0, 2)) { /* a holder of an older version */
        info->token = strtoull(pg_lib.getvalue(r, 0, 2), NULL, 10);
        if (!pg_lib.getisnull(r, 0, 3)) {
            /* "OWNER pid N on HOST": the last to write it */
            const char *h = pg_lib.getvalue(r, 0, 3);
            const char *sp = strchr(h, ' ');
            snprintf(info->holder, sizeof info->holder, "%s", sp ? sp + 1 : h);
        }
        if (!pg_lib.getisnull(r, 0, 4))
            info->held_ms = strtoll(pg_lib.getvalue(r, 0, 4), NULL, 10);
    }
    /* (free: no token; the row keeps what a handle's first grant wrote, so
     * its token may be below the last one issued) */
    pg_lib.clear(r);
    return 0;
}

static int pg_list(dlock_client *c, const char *prefix, dlock_list_fn fn, void *arg)
{
    pgclient *pc = pc_of(c);
    /* prefix as a LIKE pattern: its own %, _ and \ escaped */
    char pat[2 * DL_NAME_MAX + 2], sql[300], why[300];
    size_t j = 0;
    for (const char *s = prefix ? prefix : ""; *s && j + 3 < sizeof pat; s++) {
        if (*s == '%' || *s == '_' || *s == '\\')
            pat[j++] = '\\';
        pat[j++] = *s;
    }
    pat[j++] = '%';
    pat[j] = '\0';
    snprintf(sql, sizeof sql, "SELECT DISTINCT name FROM %s WHERE name LIKE $1 ORDER BY name",
             pc->table);
    const char *p[] = {pat};
    PGresult *r;
    int rc = pg_pool_run(c, sql, 1, p, &r, why, sizeof why);
    if (rc)
        return dl_client_err(c, rc, "list: %s (%s)", why, pc->redacted);
    int stop = 0;
    for (int i = 0; i < pg_lib.ntuples(r) && !stop; i++)
        if (dlock_name_valid(pg_lib.getvalue(r, i, 0), NULL, 0) == 0)
            stop = fn(pg_lib.getvalue(r, i, 0), arg);
    pg_lib.clear(r);
    return stop;
}

static int pg_set_value(dlock_lock *l, const char *value)
{
    pgclient *pc = pc_of(l->c);
    if (pc->rowlock)
        return row_set_value(l, value);
    if (pc->lease)
        return lease_set_value(l, value);
    pg_conn *k = unwatch_conn(l);
    if (!k)
        return dl_lock_err(l, DLOCK_ENOTHELD, "lock \"%s\" is not held", l->name);
    if (k->sess.lost)
        return dl_lock_err(l, DLOCK_ELOST, "lock \"%s\": the session holding it ended: %s",
                           l->name, k->sess.why);
    char sql[200], why[300];
    char tok[24]; /* (whose value it is: see pg_get_value) */
    snprintf(tok, sizeof tok, "%" PRIu64, (uint64_t)atomic_load(&l->token));
    snprintf(sql, sizeof sql, "UPDATE %s SET value = $2, token = $3 WHERE name = $1",
             pc->table);
    const char *p[] = {l->name, value, tok};
    PGresult *r;
    int64_t until = dl_deadline_in(dl_op_timeout_ms(l, pc->op_timeout_ms));
    int rc = pg_run(k, sql, 3, p, until, -1, &r, why, sizeof why);
    if (!rc && *sqlstate(r)) {
        char line[200];
        rc = code_of_state(sqlstate(r));
        snprintf(why, sizeof why, "%s", one_line(pg_lib.resultErrorMessage(r), line, sizeof line));
    }
    pg_lib.clear(r);
    rewatch_conn(l, k);
    if (rc)
        return dl_lock_err(l, rc, "lock \"%s\": publishing the value: %s", l->name, why);
    return 0;
}

static int pg_get_value(dlock_client *c, const char *name, char *buf, size_t len)
{
    pgclient *pc = pc_of(c);
    char key[24], why[300], sql[2400];
    snprintf(key, sizeof key, "%" PRId64, pg_key_of(pc, name));
    const char *p[] = {name, key};
    if (pc->rowlock) /* beside the locked row, while its holder's transaction lives */
        snprintf(sql, sizeof sql,
                 "SELECT v.value FROM %s AS v JOIN %s AS t ON t.name = v.name " ROW_HOLDER_JOIN
                 "WHERE v.name = $1 AND l.pid IS NOT NULL AND v.value IS NOT NULL",
                 pc->values, pc->table);
    else if (pc->lease)
        snprintf(sql, sizeof sql,
                 "SELECT value FROM %s WHERE name = $1 AND " LEASE_HELD
                 " AND value IS NOT NULL ORDER BY since DESC LIMIT 1",
                 pc->table);
    else
        /* (a value its holder published: the token its set_value wrote is
         * the holder's, or the holder took no token lock, an older client) */
        snprintf(sql, sizeof sql,
                 "WITH g AS (" TOKEN_HOLDERS("$2::bigint") ") "
                 "SELECT t.value FROM %s AS t WHERE t.name = $1 AND t.value IS NOT NULL AND "
                 "EXISTS (SELECT 1 FROM pg_locks l WHERE " PG_LOCKS_OF("$2::bigint")
                 " AND l.granted AND l.mode = 'ExclusiveLock') AND (t.token IN (SELECT tok "
                 "FROM g) OR NOT EXISTS (SELECT 1 FROM g))",
                 pc->table);
    PGresult *r;
    int rc = pg_pool_run(c, sql, pc->rowlock || pc->lease ? 1 : 2, p, &r, why, sizeof why);
    if (rc)
        return dl_client_err(c, rc, "leader of \"%s\": %s (%s)", name, why, pc->redacted);
    if (pg_lib.ntuples(r) != 1) {
        pg_lib.clear(r);
        return dl_client_err(c, DLOCK_ENOENT, "\"%s\" has no leader", name);
    }
    snprintf(buf, len, "%s", pg_lib.getvalue(r, 0, 0));
    pg_lib.clear(r);
    return 0;
}

/* Advisory and rowlock: end the sessions holding the name (the holders are
 * told at once); lease: take the rows over (each holder learns at its next
 * renewal, ttl/3) and wake the first waiter. */
static int pg_break(dlock_client *c, const char *name, dlock_info *broken)
{
    pgclient *pc = pc_of(c);
    int rc = pg_inspect(c, name, broken);
    if (rc)
        return rc;
    if (broken->held != 1)
        return dl_client_err(c, DLOCK_ENOTHELD, "\"%s\" is not held", name);
    char key[24], why[300], sql[900];
    snprintf(key, sizeof key, "%" PRId64, pg_key_of(pc, name));
    const char *p[] = {name};
    static const char ended[] = "SELECT count(*) FILTER (WHERE ended), count(*) FROM (SELECT "
                                "pg_terminate_backend(l.pid) AS ended FROM ";
    if (pc->lease)
        snprintf(sql, sizeof sql,
                 "WITH r AS (UPDATE %s SET owner = NULL, expires = NULL WHERE name = $1 AND "
                 "owner IS NOT NULL RETURNING name), w AS (SELECT q.owner FROM %s AS q WHERE "
                 "q.name = $1 AND " LEASE_WAITER_LIVE("q") " AND EXISTS (SELECT 1 FROM r) "
                 "ORDER BY q.since LIMIT 1) SELECT 0, 0 FROM (SELECT count(pg_notify('dlock_w_' || owner, $1)) "
                 "FROM w) AS n",
                 pc->table, pc->waiters);
    else if (pc->rowlock)
        snprintf(sql, sizeof sql,
                 "%s%s AS t " ROW_HOLDER_JOIN "WHERE t.name = $1 AND l.pid IS NOT NULL) AS x",
                 ended, pc->table);
    else
        snprintf(sql, sizeof sql,
                 "%spg_locks l WHERE " PG_LOCKS_OF("$1::bigint") " AND l.granted) AS t", ended);
    if (!pc->lease && !pc->rowlock)
        p[0] = key; /* advisory: the sessions are found by the key */
    PGresult *r;
    rc = pg_pool_run(c, sql, 1, p, &r, why, sizeof why);
    if (rc)
        return dl_client_err(c, rc, "break \"%s\": %s (%s)", name, why, pc->redacted);
    long done = atol(pg_lib.getvalue(r, 0, 0)), all = atol(pg_lib.getvalue(r, 0, 1));
    pg_lib.clear(r);
    if (all > 0 && done < all)
        return dl_client_err(c, DLOCK_EPERM,
                             "break \"%s\": the server refused to end %ld of the %ld sessions "
                             "holding it (a superuser's, or this role lacks pg_signal_backend)",
                             name, all - done, all);
    return 0;
}

static char *fmt_alloc(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static char *fmt_alloc(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    char *s = NULL;
    if (vasprintf(&s, fmt, ap) < 0)
        s = NULL;
    va_end(ap);
    return s;
}

/* ---- mode=lease: the lock table of the seeds ------------------------------------- */
/*
 * A lock is a row (name, slot) of the lease table: owned while `owner` is
 * set and `expires` — the server's clock, never ours — is ahead. Taking it
 * is one statement that inserts the row or takes over a free or expired one
 * (the row lock ON CONFLICT takes re-checks the condition, so two takers
 * cannot both win); a semaphore of N permits has N slots and a taker gets
 * the first free one. One name is one lock: an exclusive lock (and a
 * semaphore of 1) is slot 0, a semaphore of N permits slots N * 8192 + i
 * (PG_LEASE_SLOT_BASE), and a take waits while a row of the name outside
 * its own slots is held — an exclusive taker for every permit — except a
 * semaphore taker that finds a semaphore of other permits: that is
 * DLOCK_ECONFLICT. Two takers of different kinds insert different rows, so
 * each looks again after its take (the statement after it, a fresh
 * snapshot) and gives its row back if it finds the other held: of two at
 * once, at least one sees the other. Renewal and release check the owner. Tokens come from
 * the table's sequence (nextval is never rolled back and never repeats).
 * Nothing lives in a session between statements: the lock survives a
 * connection's end, and renewal may use any connection (transaction-mode
 * poolers work for holders).
 *
 * Waiting: a waiter queues in the waiters' table (TABLE_wait: its arrival
 * and a liveness stamp it refreshes every second) and LISTENs on a channel
 * of its own; a release NOTIFYs the first live waiter only, in the same
 * statement. Nobody takes a free row while a live waiter queued before it
 * (a newcomer: any live waiter) wants it, so the row goes in arrival order.
 * A waiter also wakes when the holder's row would expire (the take-over)
 * and at least every second (a NOTIFY may be lost: a transaction-mode
 * pooler does not carry LISTEN; a waiter that died leaves the queue when
 * its stamp runs out, 3 s).
 */

#define PG_LEASE_RECHECK_MS 1000
/* The first slot of a lock's kind (see above): the permits are slot >> 13. */
#define PG_LEASE_SLOT_BASE(permits) ((permits) > 1 ? (int)(permits) << 13 : 0)
#define PG_LEASE_SLOTS_OF(k) /* k's slot is not one of this taker's ($6, $5 of them) */      \
    "(" k ".slot < $6::int OR " k ".slot >= $6::int + $5::int)"

static int lease_build_sql(pgclient *pc)
{
    const char *t = pc->table;
    pc->sql_take = fmt_alloc(
        "WITH free AS (SELECT s FROM generate_series($6::int, $6::int + $5::int - 1) AS s "
        "WHERE NOT EXISTS (SELECT 1 FROM %s AS o WHERE o.name = $1 AND (o.slot = s OR "
        PG_LEASE_SLOTS_OF("o") ") AND o.owner IS NOT NULL AND "
        "o.expires >= clock_timestamp()) AND NOT EXISTS (SELECT 1 FROM %s AS w WHERE "
        "w.name = $1 AND w.owner <> $2 AND " LEASE_WAITER_LIVE("w") " AND w.since < "
        "coalesce((SELECT m.since FROM %s AS m WHERE m.name = $1 AND m.owner = $2), "
        "'infinity')) ORDER BY s LIMIT 1) "
        "INSERT INTO %s AS t (name, slot, owner, expires, token, holder, since) "
        "SELECT $1, free.s, $2, clock_timestamp() + $3::int * interval '1 millisecond', "
        "nextval('%s'), $4, clock_timestamp() FROM free "
        /* The take-over draws its own token: excluded.token was drawn
         * before this statement waited for the row's lock, maybe behind a
         * holder that drew a larger one, took the row and let it go
         * meanwhile — a later holder would get a smaller token. */
        "ON CONFLICT (name, slot) DO UPDATE SET owner = excluded.owner, "
        "expires = excluded.expires, token = nextval('%s'), holder = excluded.holder, "
        "since = excluded.since, value = NULL "
        "WHERE t.owner IS NULL OR t.expires < clock_timestamp() RETURNING t.slot, t.token",
        t, pc->waiters, pc->waiters, t, pc->seq, pc->seq);
    /* When not taken: how long until the first holder's row expires; when
     * taken, the name's rows in the names table (see names_check), one a
     * row, beside it; and a held slot of another kind than the taker's
     * ($2 its first slot, $3 its permits), if any. */
    pc->sql_expiry = fmt_alloc(
        "SELECT e.ms, n.mode, n.tbl, (SELECT min(k.slot) FROM %s AS k WHERE k.name = $1 AND "
        "(k.slot < $2::int OR k.slot >= $2::int + $3::int) AND k.owner IS NOT NULL AND "
        "k.expires >= clock_timestamp()) FROM (SELECT floor(greatest(0, extract(epoch FROM "
        "min(expires) - clock_timestamp()) * 1000)) AS ms FROM %s WHERE name = $1 AND owner IS "
        "NOT NULL) AS e LEFT JOIN %s AS n ON n.name = $1",
        t, t, pc->names);
    /* The release, and a NOTIFY to the first live waiter (at commit). */
    /* A release commits without waiting for a WAL flush (the take, a
     * flushed commit after it, covers it): a release a crash forgets leaves
     * the row to expire, which delays the next holder by at most the lease
     * after a crash, and never makes two. */
    pc->sql_free = fmt_alloc(
        "WITH a AS (SELECT set_config('synchronous_commit', 'off', true)), "
        "r AS (UPDATE %s SET owner = NULL, expires = NULL WHERE name = $1 AND slot = $2 "
        "AND owner = $3 AND (SELECT count(*) FROM a) = 1 RETURNING name), "
        "w AS (SELECT q.owner FROM %s AS q WHERE q.name = $1 AND " LEASE_WAITER_LIVE("q")
        " AND EXISTS (SELECT 1 FROM r) ORDER BY q.since LIMIT 1), "
        "n AS (SELECT pg_notify('dlock_w_' || owner, $1) FROM w), "
        /* the dead waiters' rows found on the way go (a -9 leaves its row) */
        "d AS (DELETE FROM %s AS q WHERE q.name = $1 AND NOT (" LEASE_WAITER_LIVE("q") ")) "
        "SELECT (SELECT count(*) FROM r) WHERE (SELECT count(*) FROM n) >= 0 AND "
        "EXISTS (SELECT 1 FROM r)",
        t, pc->waiters, pc->waiters);
    /* A waiter queues with its session's pid (its liveness beside the
     * stamp; none behind a transaction pooler, whose server sessions are
     * not the waiter's), and removes the dead rows of the name it finds. */
    pc->sql_enqueue = fmt_alloc(
        "WITH d AS (DELETE FROM %s AS q WHERE q.name = $1 AND q.owner <> $2 AND NOT ("
        LEASE_WAITER_LIVE("q") ")) "
        "INSERT INTO %s (name, owner, since, alive, pid) VALUES ($1, $2, clock_timestamp(), "
        "clock_timestamp() + interval '3 seconds', %s) ON CONFLICT (name, owner) "
        "DO UPDATE SET alive = excluded.alive, pid = excluded.pid",
        pc->waiters, pc->waiters, pc->txpool ? "NULL::int" : "pg_backend_pid()");
    pc->sql_refresh = fmt_alloc(
        "UPDATE %s SET alive = clock_timestamp() + interval '3 seconds' WHERE name = $1 AND "
        "owner = $2",
        pc->waiters);
    pc->sql_dequeue = fmt_alloc("DELETE FROM %s WHERE name = $1 AND owner = $2", pc->waiters);
    pc->sql_setvalue = fmt_alloc(
        "UPDATE %s SET value = $4 WHERE name = $1 AND slot = $2::int AND owner = $3 AND "
        "expires >= clock_timestamp() RETURNING 1",
        t);
    pc->sql_renew = fmt_alloc(
        "UPDATE %s SET expires = clock_timestamp() + $4::int * interval '1 millisecond' "
        "WHERE name = $1 AND slot = $2 AND owner = $3 AND expires >= clock_timestamp() "
        "RETURNING 1",
        t);
    /* Many renewals in one statement: arrays of names, slots, owners and
     * leases; the rows still ours come back by their place in the arrays. */
    pc->sql_renew_many = fmt_alloc(
        "UPDATE %s AS t SET expires = clock_timestamp() + b.ttl * interval '1 millisecond' "
        "FROM unnest($1::text[], $2::int[], $3::text[], $4::int[]) WITH ORDINALITY "
        "AS b(name, slot, owner, ttl, i) WHERE t.name = b.name AND t.slot = b.slot AND "
        "t.owner = b.owner AND t.expires >= clock_timestamp() RETURNING b.i",
        t);
    return pc->sql_take && pc->sql_expiry && pc->sql_free && pc->sql_renew &&
                   pc->sql_renew_many && pc->sql_enqueue &&
                   pc->sql_refresh && pc->sql_dequeue && pc->sql_setvalue
               ? 0
               : DLOCK_ENOMEM;
}

/* Notifications that came to a session are not needed once read. */
static void drop_notices(pg_conn *k)
{
    PGnotify *nf;
    (void)pg_lib.consumeInput(k->pg);
    while ((nf = pg_lib.notifies(k->pg)) != NULL)
        pg_lib.freemem(nf);
}

/* One round of a lease acquisition on k: the statements in `pre` (LISTEN,
 * the waiter's row), then a take and the time until the first holder's row
 * expires, all pipelined. 1 taken, 0 not (expires_in set), or an error. */
static int lease_try(dlock_lock *l, pg_conn *k, const char *const *pre, const int *npar,
                     int npre, int64_t until, int cancel_fd, long *expires_in, PGresult **names,
                     int *other, char *why, size_t wlen)
{
    *names = NULL;
    *other = -1;
    pgclient *pc = pc_of(l->c);
    pglock *pl = l->bstate;
    char ttl[16], permits[16], self[200], holder[300], base[16];
    snprintf(ttl, sizeof ttl, "%d", l->opts.ttl_ms);
    snprintf(permits, sizeof permits, "%u", l->opts.permits);
    snprintf(base, sizeof base, "%d", PG_LEASE_SLOT_BASE(l->opts.permits));
    dl_self_desc(self, sizeof self);
    snprintf(holder, sizeof holder, "%s %s", l->owner, self);
    const char *p[] = {l->name, l->owner, ttl, holder, permits, base};
    const char *pe[] = {l->name, base, permits};
    int rc = 0;
    for (int i = 0; i < npre && !rc; i++)
        rc = strncmp(pre[i], "LISTEN", 6) == 0 /* (its channel is the waiter's own) */
                 ? pg_stmt_send(k, pre[i], npar[i], p, until, cancel_fd, why, wlen)
                 : stmt_send_fixed(k, pre[i], npar[i], p, until, cancel_fd, why, wlen);
    int64_t sent = dl_now_ns();
    if (!rc)
        rc = stmt_send_fixed(k, pc->sql_take, 6, p, until, cancel_fd, why, wlen);
    /* our row in the names table (unless it was there last time), and
     * after the take, with the expiry, the name's rows (see names_check) */
    const char *mine[] = {l->name, pc->mode, pc->table};
    if (!rc && !pl->named)
        rc = stmt_send_fixed(k, pc->sql_names_add, 3, mine, until, cancel_fd, why, wlen);
    if (!rc)
        rc = stmt_send_fixed(k, pc->sql_expiry, 3, pe, until, cancel_fd, why, wlen);
    PGresult *took = NULL, *r = NULL;
    int after = pl->named ? 2 : 3; /* statements sent after the pre ones */
    while (!rc && k->pending > after) { /* what came before: must have worked */
        rc = stmt_read(k, until, cancel_fd, &r, why, wlen);
        if (!rc && *sqlstate(r)) {
            char line[200];
            rc = code_of_state(sqlstate(r));
            snprintf(why, wlen, "%s", one_line(pg_lib.resultErrorMessage(r), line, sizeof line));
        }
        pg_lib.clear(r);
        r = NULL;
    }
    if (!rc)
        rc = stmt_read(k, until, cancel_fd, &took, why, wlen);
    if (!rc && !pl->named) { /* our row is there from now on */
        rc = stmt_read(k, until, cancel_fd, &r, why, wlen);
        pl->named = !rc && !*sqlstate(r);
        pg_lib.clear(r);
        r = NULL;
    }
    if (!rc)
        rc = stmt_read(k, until, cancel_fd, &r, why, wlen);
    if (!rc && *sqlstate(took)) {
        char line[200];
        rc = code_of_state(sqlstate(took));
        snprintf(why, wlen, "%s", one_line(pg_lib.resultErrorMessage(took), line, sizeof line));
    }
    if (!rc && !*sqlstate(r) && pg_lib.ntuples(r) >= 1 && !pg_lib.getisnull(r, 0, 3))
        *other = atoi(pg_lib.getvalue(r, 0, 3));
    int taken = 0;
    if (!rc && pg_lib.ntuples(took) == 1) {
        pl->slot = atoi(pg_lib.getvalue(took, 0, 0));
        atomic_store(&l->token, strtoull(pg_lib.getvalue(took, 0, 1), NULL, 10));
        l->lease_start_ns = sent; /* counted from before the statement that took it */
        taken = 1;
    } else if (!rc) {
        /* -1: no row is held (a live waiter ahead of us is due to take it) */
        *expires_in = !*sqlstate(r) && pg_lib.ntuples(r) >= 1 && !pg_lib.getisnull(r, 0, 0)
                          ? atol(pg_lib.getvalue(r, 0, 0))
                          : -1;
    }
    pg_lib.clear(took);
    if (taken && !*sqlstate(r)) /* the name's rows: columns 1 and 2 */
        *names = r;
    else
        pg_lib.clear(r);
    return rc ? rc : taken;
}

/* A waiter that gives up leaves the queue (else it would hold the ones
 * behind it back until its liveness stamp runs out). */
static void lease_dequeue(dlock_lock *l, bool queued)
{
    if (!queued)
        return;
    pgclient *pc = pc_of(l->c);
    int64_t until = op_until(pc, l);
    if (dl_ms_left(until) == 0)
        return; /* its stamp runs out, and the next taker removes it */
    const char *p[] = {l->name, l->owner};
    PGresult *r;
    char why[300];
    (void)pool_run_until(l->c, until, pc->sql_dequeue, 2, p, &r, why, sizeof why);
    pg_lib.clear(r);
}

static int lease_acquire(dlock_lock *l, int64_t deadline_ns)
{
    pgclient *pc = pc_of(l->c);
    char why[300], listen[64];
    int cancel_fd = deadline_ns != 0 ? dl_cancel_fd(l) : -1;
    pg_conn *k;
    int64_t bound = dl_deadline_in(pc->connect_timeout_ms);
    if (deadline_ns > 0 && l->op_deadline_ns < bound)
        bound = l->op_deadline_ns;
    int rc = pg_conn_get(pc, bound, cancel_fd, &k, why, sizeof why);
    if (rc)
        return dl_connect_err(l, deadline_ns, rc, why, pc->redacted);
    /* A waiter listens on a channel of its own and queues in the waiters'
     * table; a release notifies the first live waiter only. */
    snprintf(listen, sizeof listen, "LISTEN \"dlock_w_%s\"", l->owner);
    /* (behind a transaction pooler, no LISTEN: it would stay on a server
     * session that others get next; the waiter re-checks every second) */
    const char *enqueue[] = {listen, pc->sql_enqueue};
    const char *refresh[] = {pc->sql_refresh};
    static const int enqueue_npar[] = {0, 2}, refresh_npar[] = {2};
    bool queued = false, tried = false, requeue = false, enqueuing = false;
    long expires_in = 0;
    int64_t refreshed = 0; /* when our queue row's liveness stamp was last renewed */
    for (;;) {
        int64_t until = dl_deadline_in(dl_op_timeout_ms(l, pc->op_timeout_ms));
        bool last = deadline_ns == 0 || (deadline_ns > 0 && dl_ms_left(deadline_ns) == 0);
        const char *const *pre = NULL;
        const int *npar = NULL;
        int npre = 0;
        if (!last && !queued && tried) { /* (not before the first try: cheap if free) */
            pre = pc->txpool ? enqueue + 1 : enqueue;
            npar = pc->txpool ? enqueue_npar + 1 : enqueue_npar;
            npre = pc->txpool ? 1 : 2;
            enqueuing = true;
        } else if (queued && dl_now_ns() - refreshed >= (int64_t)PG_LEASE_RECHECK_MS * 1000000) {
            /* (not on every wake-up: a NOTIFY's hand-over goes without) */
            pre = refresh;
            npar = refresh_npar;
            npre = 1;
        }
        PGresult *names = NULL;
        int other = -1;
        rc = lease_try(l, k, pre, npar, npre, until, cancel_fd, &expires_in, &names, &other,
                       why, sizeof why);
        tried = true;
        if (npre > 0)
            refreshed = dl_now_ns();
        if (rc == DLOCK_EUNREACHABLE && deadline_ns != 0 && time_left(deadline_ns)) {
            /* the session ended under a waiter: on a new one, it listens
             * and queues again (its queue row keeps its place) */
            pg_conn_close(k);
            rc = conn_get_retry(pc, retry_until_of(pc, l, deadline_ns), cancel_fd, &k, why,
                                sizeof why);
            if (!rc) {
                requeue |= queued; /* its row may be there: dequeued on failure */
                queued = false;
                continue;
            }
            k = NULL;
        }
        if (rc < 0) {
            pg_conn_close(k); /* a statement may be left on it */
            lease_dequeue(l, queued || requeue);
            if (rc == DLOCK_ECANCELED)
                return dl_lock_err(l, rc, "lock \"%s\": canceled", l->name);
            if (rc == DLOCK_ETIMEDOUT && deadline_ns > 0 && dl_ms_left(deadline_ns) == 0)
                return dl_lock_err(l, rc, "lock \"%s\": timed out (%s)", l->name, why);
            return dl_lock_err(l, rc == DLOCK_ETIMEDOUT ? DLOCK_EUNREACHABLE : rc,
                               "lock \"%s\": %s (%s)", l->name, why, pc->redacted);
        }
        queued |= enqueuing;
        enqueuing = false;
        /* Another kind holds the name: a taken row goes back, and a
         * semaphore of other permits is refused rather than waited for. */
        unsigned in_force = other >= 0 ? (unsigned)other >> 13 : 0;
        bool conflict = in_force > 1 && l->opts.kind == DLOCK_SEMAPHORE && l->opts.permits > 1;
        if (rc == 1 && other >= 0) {
            int touched;
            (void)lease_row(l, pc->sql_free, NULL, &touched);
            pg_lib.clear(names);
            names = NULL;
            rc = 0;
            expires_in = -1;
        }
        if (rc == 1 || last || conflict) {
            if (queued) { /* sent, not waited for: read by the session's next statement */
                const char *p[] = {l->name, l->owner};
                (void)stmt_send_fixed(k, pc->sql_dequeue, 2, p, until, -1, why, sizeof why);
                if (!pc->txpool)
                    (void)pg_stmt_send(k, "UNLISTEN *", 0, NULL, until, -1, why, sizeof why);
            }
            drop_notices(k);
            pg_conn_put(pc, k);
            if (rc == 1) {
                rc = names_check(l, names, 1, why, sizeof why);
                pg_lib.clear(names);
                if (rc) {
                    int touched; /* given back: the other mode's holder keeps the name */
                    (void)lease_row(l, pc->sql_free, NULL, &touched);
                    return dl_lock_err(l, rc, "lock \"%s\": %s", l->name, why);
                }
                return 0;
            }
            if (conflict)
                return dl_conflict_err(l, 's', in_force);
            return dl_lock_err(l, deadline_ns == 0 ? DLOCK_EBUSY : DLOCK_ETIMEDOUT,
                               deadline_ns == 0 ? "lock \"%s\" is held by another owner"
                                                : "lock \"%s\": timed out",
                               l->name);
        }
        if (!queued)
            continue; /* queue, and try again at once */
        /* Wait for our NOTIFY, the holder's expiry, a second (our queue row
         * is refreshed, and a NOTIFY to a waiter that died is made up
         * for), the deadline or a cancel, whichever first. */
        int64_t wake = dl_deadline_in(expires_in >= 0 && expires_in < PG_LEASE_RECHECK_MS
                                                   ? expires_in + 1
                                                   : PG_LEASE_RECHECK_MS);
        if (deadline_ns > 0 && deadline_ns < wake)
            wake = deadline_ns;
        for (;;) {
            PGnotify *nf = pg_lib.notifies(k->pg);
            if (nf) {
                pg_lib.freemem(nf);
                drop_notices(k);
                break;
            }
            rc = dl_wait_fd(pg_lib.socket(k->pg), POLLIN, wake, cancel_fd, NULL);
            if (rc == DLOCK_ETIMEDOUT)
                break;
            if (rc == 0 && (!pg_lib.consumeInput(k->pg) || pg_lib.status(k->pg) != CONNECTION_OK))
                rc = DLOCK_EUNREACHABLE;
            if (rc == DLOCK_EUNREACHABLE && time_left(deadline_ns)) {
                pg_conn_close(k); /* as above: listen and queue again on a new session */
                rc = conn_get_retry(pc, retry_until_of(pc, l, deadline_ns), cancel_fd, &k, why,
                                    sizeof why);
                if (!rc) {
                    requeue |= queued;
                    queued = false;
                    break;
                }
                k = NULL;
            }
            if (rc) {
                pg_conn_close(k);
                lease_dequeue(l, queued || requeue);
                if (rc == DLOCK_ECANCELED)
                    return dl_lock_err(l, rc, "lock \"%s\": canceled", l->name);
                return dl_lock_err(l, rc, "lock \"%s\": the session broke while waiting (%s)",
                                   l->name, pc->redacted);
            }
        }
    }
}

/* A statement about the held row (release, renewal, value) on a pooled
 * session: 1 when it touched the row, 0 when the row is no longer ours.
 * sql is one of the client's fixed statements (it is prepared). */
static int lease_row(dlock_lock *l, const char *sql, const char *extra, int *touched)
{
    pgclient *pc = pc_of(l->c);
    pglock *pl = l->bstate;
    char slot[16], why[300], line[200];
    snprintf(slot, sizeof slot, "%d", pl->slot);
    const char *p[] = {l->name, slot, l->owner, extra};
    int64_t until = dl_deadline_in(dl_op_timeout_ms(l, pc->op_timeout_ms));
    pg_conn *k;
    int rc = pg_conn_get(pc, until, -1, &k, why, sizeof why);
    if (rc)
        return dl_lock_err(l, rc, "lock \"%s\": %s (%s)", l->name, why, pc->redacted);
    PGresult *r;
    rc = pg_run_fixed(k, sql, extra ? 4 : 3, p, until, -1, &r, why, sizeof why);
    if (rc) {
        pg_conn_close(k);
        return dl_lock_err(l, rc == DLOCK_ETIMEDOUT ? DLOCK_EUNREACHABLE : rc,
                           "lock \"%s\": %s (%s)", l->name, why, pc->redacted);
    }
    char st[8]; /* the result is cleared before the code is looked at */
    snprintf(st, sizeof st, "%s", sqlstate(r));
    if (*st) {
        one_line(pg_lib.resultErrorMessage(r), line, sizeof line);
        pg_lib.clear(r);
        pg_conn_put(pc, k);
        return dl_lock_err(l, code_of_state(st), "lock \"%s\": %s (%s)", l->name, line,
                           pc->redacted);
    }
    *touched = pg_lib.ntuples(r) > 0;
    pg_lib.clear(r);
    drop_notices(k);
    pg_conn_put(pc, k);
    return 0;
}

static int lease_release(dlock_lock *l)
{
    int touched = 0;
    int rc = lease_row(l, pc_of(l->c)->sql_free, NULL, &touched);
    if (rc)
        return rc;
    return touched ? 0
                   : dl_lock_err(l, DLOCK_ELOST,
                                 "lock \"%s\": its row had expired or been taken over", l->name);
}

static int pg_renew(dlock_lock *l)
{
    char ttl[16];
    snprintf(ttl, sizeof ttl, "%d", l->opts.ttl_ms);
    int touched = 0;
    int rc = lease_row(l, pc_of(l->c)->sql_renew, ttl, &touched);
    if (rc)
        return rc;
    return touched ? 0
                   : dl_lock_err(l, DLOCK_ELOST,
                                 "lock \"%s\": its row had expired or been taken over", l->name);
}

/* Append s to the array literal at *b as one quoted element ("..." with
 * backslash before each quote and backslash: names may hold either). */
static void array_add(char **b, const char *s, bool first)
{
    char *o = *b;
    if (!first)
        *o++ = ',';
    *o++ = '"';
    for (; *s; s++) {
        if (*s == '"' || *s == '\\')
            *o++ = '\\';
        *o++ = *s;
    }
    *o++ = '"';
    *o = '\0';
    *b = o;
}

/* Renew many leases in one statement on one connection: the rows still
 * ours are extended and come back; a lock whose row did not is lost at
 * once. A statement that fails fails every lock of the batch (transient:
 * the core's watchdog decides at each one's deadline). */
static void pg_renew_batch(dlock_client *c, dlock_lock *const *ls, int *rcs, size_t n)
{
    pgclient *pc = pc_of(c);
    size_t names = 3, owners = 3, ints = 3;
    for (size_t i = 0; i < n; i++) {
        names += 2 * strlen(ls[i]->name) + 3;
        owners += DL_OWNER_HEX + 3;
        ints += 16;
    }
    char *buf = malloc(names + owners + 2 * ints);
    bool *kept = calloc(n, sizeof *kept);
    char why[300], line[200];
    int rc = buf && kept ? 0 : DLOCK_ENOMEM;
    snprintf(why, sizeof why, "out of memory");
    const char *p[4] = {0};
    if (!rc) {
        /* names, slots, owners, leases */
        char *a[4] = {buf, buf + names, buf + names + ints, buf + names + ints + owners};
        for (int k = 0; k < 4; k++) {
            p[k] = a[k];
            *a[k]++ = '{';
        }
        for (size_t i = 0; i < n; i++) {
            char num[16];
            array_add(&a[0], ls[i]->name, i == 0);
            snprintf(num, sizeof num, "%d", ((pglock *)ls[i]->bstate)->slot);
            array_add(&a[1], num, i == 0);
            array_add(&a[2], ls[i]->owner, i == 0);
            snprintf(num, sizeof num, "%d", ls[i]->opts.ttl_ms);
            array_add(&a[3], num, i == 0);
        }
        for (int k = 0; k < 4; k++)
            memcpy(a[k], "}", 2);
    }
    int64_t until = dl_deadline_in(dl_op_timeout_ms(ls[0], pc->op_timeout_ms));
    pg_conn *k = NULL;
    if (!rc)
        rc = pg_conn_get(pc, until, -1, &k, why, sizeof why);
    PGresult *r = NULL;
    if (!rc) {
        rc = pg_run_fixed(k, pc->sql_renew_many, 4, p, until, -1, &r, why, sizeof why);
        if (rc) {
            pg_conn_close(k);
            rc = rc == DLOCK_ETIMEDOUT ? DLOCK_EUNREACHABLE : rc;
        } else if (*sqlstate(r)) {
            rc = code_of_state(sqlstate(r));
            snprintf(why, sizeof why, "%s", one_line(pg_lib.resultErrorMessage(r), line, sizeof line));
            pg_conn_put(pc, k);
        } else {
            for (int t = 0; t < pg_lib.ntuples(r); t++) {
                long long i = strtoll(pg_lib.getvalue(r, t, 0), NULL, 10);
                if (i >= 1 && (size_t)i <= n)
                    kept[i - 1] = true;
            }
            drop_notices(k);
            pg_conn_put(pc, k);
        }
        if (r)
            pg_lib.clear(r);
    }
    for (size_t i = 0; i < n; i++)
        rcs[i] = rc ? dl_lock_err(ls[i], rc, "lock \"%s\": %s (%s)", ls[i]->name, why,
                                  pc->redacted)
             : kept[i] ? 0
                       : dl_lock_err(ls[i], DLOCK_ELOST,
                                     "lock \"%s\": its row had expired or been taken over",
                                     ls[i]->name);
    free(kept);
    free(buf);
}

static int lease_set_value(dlock_lock *l, const char *value)
{
    int touched = 0;
    int rc = lease_row(l, pc_of(l->c)->sql_setvalue, value, &touched);
    if (rc)
        return rc;
    return touched ? 0 : dl_lock_err(l, DLOCK_ELOST, "lock \"%s\": no longer ours", l->name);
}

static int lease_inspect(dlock_client *c, const char *name, dlock_info *info)
{
    pgclient *pc = pc_of(c);
    char sql[900], why[300];
    snprintf(sql, sizeof sql,
             "SELECT count(*) FILTER (WHERE " LEASE_HELD "), max(token), "
             "(array_agg(holder ORDER BY since) FILTER (WHERE " LEASE_HELD "))[1], "
             "floor(extract(epoch FROM clock_timestamp() - min(since) FILTER (WHERE " LEASE_HELD
             ")) * 1000)::bigint, "
             "floor(extract(epoch FROM min(expires) FILTER (WHERE " LEASE_HELD
             ") - clock_timestamp()) * 1000)::bigint FROM %s WHERE name = $1",
             pc->table);
    const char *p[] = {name};
    PGresult *r;
    int rc = pg_pool_run(c, sql, 1, p, &r, why, sizeof why);
    if (rc)
        return dl_client_err(c, rc, "inspect \"%s\": %s (%s)", name, why, pc->redacted);
    int holders = atoi(pg_lib.getvalue(r, 0, 0));
    info->held = holders > 0;
    info->holders = holders;
    info->waiters = -1; /* listeners are not visible to other sessions */
    info->token = pg_lib.getisnull(r, 0, 1) ? 0 : strtoull(pg_lib.getvalue(r, 0, 1), NULL, 10);
    info->held_ms = -1;
    info->lease_ms = -1;
    if (holders > 0) {
        const char *h = pg_lib.getvalue(r, 0, 2);
        const char *sp = strchr(h, ' ');
        snprintf(info->holder, sizeof info->holder, "%s", sp ? sp + 1 : h);
        info->held_ms = pg_lib.getisnull(r, 0, 3) ? -1 : strtoll(pg_lib.getvalue(r, 0, 3), NULL, 10);
        info->lease_ms = pg_lib.getisnull(r, 0, 4) ? -1 : strtoll(pg_lib.getvalue(r, 0, 4), NULL, 10);
    }
    pg_lib.clear(r);
    return 0;
}

/* ---- mode=rowlock: the seeds' pessimistic lock ----------------------------------- */
/*
 * A lock is the name's row of the rowlock table, locked by SELECT … FOR
 * UPDATE in a transaction left open on a session of its own (watched like
 * an advisory lock's), released by COMMIT. The server queues the waiters
 * on the row; NOWAIT and a transaction-local lock_timeout bound tries and
 * timed waits. The row itself cannot carry the token (a rolled-back
 * transaction would take it back): the token is nextval of the table's
 * sequence, drawn by the statement once it has the row. Who holds a row is
 * read from pg_locks: the holder's transaction holds its own transaction
 * id, which is the locked row's xmax.
 */

static int row_build_sql(pgclient *pc)
{
    const char *t = pc->table;
    pc->sql_row_ensure = fmt_alloc("INSERT INTO %s (name) VALUES ($1) ON CONFLICT DO NOTHING", t);
    /* The waiters queue first on a transaction advisory lock on the name's
     * key (FIFO in the server's lock manager), then lock the row, which is
     * free by then: on the row alone, a newcomer could take it between a
     * commit and the next waiter's lock (16-36 %% of sections overtaken with
     * 8 waiters). The commit lets go of both. */
    /* The transaction only locks: its commit (the release) loses nothing a
     * crash would not end anyway, so it is not flushed (synchronous_commit
     * off, for this transaction). The token is drawn by sql_row_info. */
    pc->sql_try_x = fmt_alloc(
        "WITH a AS (SELECT pg_try_advisory_xact_lock($2::bigint) AS ok), l AS (SELECT t.name "
        "FROM %s AS t, a WHERE a.ok AND t.name = $1 FOR UPDATE OF t NOWAIT) "
        "SELECT set_config('synchronous_commit', 'off', true) FROM l",
        t);
    /* set_config first (the join reads s before the row is locked) */
    pc->sql_wait_x = fmt_alloc(
        "WITH s AS (SELECT set_config('lock_timeout', $3, true) AS v), a AS (SELECT "
        "pg_advisory_xact_lock($2::bigint) AS q FROM s), l AS (SELECT t.name FROM "
        "%s AS t, a WHERE t.name = $1 FOR UPDATE OF t) "
        "SELECT set_config('synchronous_commit', 'off', true) FROM l",
        t);
    pc->sql_try_r = pc->sql_try_x ? strdup(pc->sql_try_x) : NULL; /* (no shared locks) */
    pc->sql_wait_r = pc->sql_wait_x ? strdup(pc->sql_wait_x) : NULL;
    pc->sql_row_value = fmt_alloc(
        "UPDATE %s SET value = $3 WHERE name = $1 AND owner = $2 RETURNING 1", pc->values);
    /* who took the row, with its token (drawn here, once the row is ours:
     * see token_ctes) */
    char *tok = token_ctes(pc, "(SELECT 1) AS one", "true");
    pc->sql_row_info = tok ? fmt_alloc(
        "WITH %s INSERT INTO %s AS h (name, owner, token, holder, since) SELECT $1, $2, d.v, $3, "
        "clock_timestamp() FROM d, c ON CONFLICT (name) DO UPDATE SET owner = excluded.owner, "
        "token = excluded.token, holder = excluded.holder, since = excluded.since, value = NULL "
        "RETURNING h.token",
        tok, pc->values) : NULL;
    free(tok);
    return pc->sql_row_ensure && pc->sql_try_x && pc->sql_wait_x && pc->sql_try_r &&
                   pc->sql_wait_r && pc->sql_row_value && pc->sql_row_info &&
                   run_build_sql(pc) == 0
               ? 0
               : DLOCK_ENOMEM;
}

static int row_inspect(dlock_client *c, const char *name, dlock_info *info)
{
    pgclient *pc = pc_of(c);
    char sql[2400], why[300];
    snprintf(sql, sizeof sql,
             "SELECT l.pid, h.holder, "
             "floor(extract(epoch FROM clock_timestamp() - h.since) * 1000)::bigint, "
             /* waiters: in the queue's advisory lock, and on the row itself
              * (clients of older versions queue there) */
             "(SELECT count(*) FROM pg_locks AS w WHERE NOT w.granted AND "
             "((w.locktype = 'transactionid' AND w.transactionid = t.xmax) OR "
             "(w.locktype = 'tuple' AND w.relation = to_regclass($2) AND "
             "w.page = (t.ctid::text::point)[0]::int AND w.tuple = (t.ctid::text::point)[1]::int)))"
             " + (SELECT count(*) FROM pg_locks AS l WHERE " PG_LOCKS_OF("$3::bigint")
             " AND NOT l.granted), "
             "h.token FROM (SELECT 1) AS one LEFT JOIN %s AS t ON t.name = $1 " ROW_HOLDER_JOIN
             "LEFT JOIN %s AS h ON h.name = $1",
             pc->table, pc->values);
    char key[24];
    snprintf(key, sizeof key, "%" PRId64, pg_key_of(pc, name));
    const char *p[] = {name, pc->table, key};
    PGresult *r;
    int rc = pg_pool_run(c, sql, 3, p, &r, why, sizeof why);
    if (rc)
        return dl_client_err(c, rc, "inspect \"%s\": %s (%s)", name, why, pc->redacted);
    bool held = !pg_lib.getisnull(r, 0, 0);
    info->held = held;
    info->holders = held ? 1 : 0;
    info->waiters = pg_lib.getisnull(r, 0, 3) ? 0 : atoi(pg_lib.getvalue(r, 0, 3));
    info->token = pg_lib.getisnull(r, 0, 4) ? 0 : strtoull(pg_lib.getvalue(r, 0, 4), NULL, 10);
    info->lease_ms = -1;
    info->held_ms = -1;
    if (held && !pg_lib.getisnull(r, 0, 1)) {
        /* "OWNER pid N on HOST", written by the holder once it had the row */
        const char *h = pg_lib.getvalue(r, 0, 1);
        const char *sp = strchr(h, ' ');
        snprintf(info->holder, sizeof info->holder, "%s", sp ? sp + 1 : h);
        if (!pg_lib.getisnull(r, 0, 2))
            info->held_ms = strtoll(pg_lib.getvalue(r, 0, 2), NULL, 10);
    }
    pg_lib.clear(r);
    return 0;
}

/* The leader's value: beside the row (the row is locked), in TABLE_holder. */
static int row_set_value(dlock_lock *l, const char *value)
{
    pgclient *pc = pc_of(l->c);
    const char *p[] = {l->name, l->owner, value};
    PGresult *r;
    char why[300];
    int rc = pg_pool_run(l->c, pc->sql_row_value, 3, p, &r, why, sizeof why);
    bool ours = !rc && pg_lib.ntuples(r) == 1;
    pg_lib.clear(r);
    if (rc)
        return dl_lock_err(l, rc, "lock \"%s\": publishing the value: %s", l->name, why);
    if (!ours)
        return dl_lock_err(l, DLOCK_ELOST, "lock \"%s\": another holder took it", l->name);
    return 0;
}

/* ---- clients --------------------------------------------------------------------- */

static bool ident_ok(const char *s)
{
    size_t n = strlen(s);
    if (n == 0 || n > PG_IDENT_MAX || !(s[0] == '_' || (s[0] >= 'a' && s[0] <= 'z')))
        return false;
    for (size_t i = 0; i < n; i++)
        if (!(s[i] == '_' || (s[i] >= 'a' && s[i] <= 'z') || (s[i] >= '0' && s[i] <= '9')))
            return false;
    return true;
}

/* An idle one's close (see dl_pool_stop). */
static void pooled_close(dl_pooled *it)
{
    pg_conn_close(dl_container_of(it, pg_conn, pooled));
}

static void pc_free(pgclient *pc)
{
    if (!pc)
        return;
    dl_pool_stop(&pc->pool, pooled_close);
    free(pc->keys);
    free(pc->vals);
    free(pc->strings);
    free(pc->sql_try_x);
    free(pc->sql_try_r);
    free(pc->sql_wait_x);
    free(pc->sql_wait_r);
    free(pc->sql_redraw);
    for (int i = 0; i < 4; i++)
        free(pc->sql_bare[i / 2][i % 2]);
    free(pc->sql_run_get);
    free(pc->sql_epoch_bump);
    free(pc->sql_run_put);
    free(pc->sql_take);
    free(pc->sql_expiry);
    free(pc->sql_free);
    free(pc->sql_renew);
    free(pc->sql_renew_many);
    free(pc->sql_enqueue);
    free(pc->sql_setvalue);
    free(pc->sql_row_ensure);
    free(pc->sql_row_value);
    free(pc->sql_row_info);
    free(pc->sql_refresh);
    free(pc->sql_dequeue);
    free(pc->sql_names_get);
    free(pc->sql_names_add);
    free(pc->sql_names_drop);
    dl_pool_fini(&pc->pool);
    free(pc);
}

/*
 * Tokens without a WAL flush per grant (advisory and rowlock; lease takes
 * a row, a committed write anyway): (epoch << PG_EPOCH_SHIFT) + (nextval of
 * the table's sequence - base), drawn once the lock is ours.
 *
 * nextval rises for as long as the server runs, but not across a crash:
 * PostgreSQL logs a sequence 32 values ahead and does not wait for that
 * record's flush before other sessions use the batch, so after a crash
 * values already handed out can come again. So each server run draws
 * under an epoch of its own:
 * - dlock_token_epoch (seq, epoch), an ordinary table: the epochs counted,
 *   each committed with a flush (synchronous_commit at least local) before
 *   any token of it exists;
 * - dlock_token_run (seq, epoch, base), an UNLOGGED table: the epoch in
 *   force in this run, and the sequence's value when it was put in force.
 *   PostgreSQL empties unlogged tables when it recovers from a crash (and
 *   a promoted standby has them empty): exactly when the sequence may go
 *   back. A clean shutdown keeps both the row and the sequence.
 * A grant that finds no row in force (the first after a crash, or ever)
 * draws nothing; run_ensure counts an epoch, puts it in force (the first
 * client's row wins), and the grant draws again. Every token of a run is
 * above every token of the runs before it, and within a run nextval
 * rises. The draw commits with synchronous_commit off: it writes only the
 * holder's row, which a crash ends anyway.
 *
 * A run's row is written once and never changed: a waiter's statement,
 * whose snapshot is from before its wait, may miss it (then it draws
 * again) but cannot see a stale one (a crash ends the waiter's session
 * too). For the same reason an offset of 2^PG_EPOCH_SHIFT in one run (17
 * trillion grants without a crash) is an error, not a new epoch. The
 * first epoch is above the sequence's value >> PG_EPOCH_SHIFT, so that the
 * tokens of older dlock versions (the sequence's own values) are below
 * every new one.
 *
 * The CTEs: n draws (from the rows of rel where cond: only when the lock is
 * ours, and only with a run in force), d makes the token, c the commit's
 * durability. The statement using them reads d and c.
 */
static char *token_ctes(pgclient *pc, const char *rel, const char *cond)
{
    return fmt_alloc(
        "n AS (SELECT r.epoch AS e, nextval('%s') - r.base AS off FROM %s AS r, %s WHERE %s "
        "AND r.seq = '%s'), "
        "d AS (SELECT (n.e << %d) + n.off AS v FROM n WHERE n.off > 0 AND n.off < %lld), "
        "c AS (SELECT set_config('synchronous_commit', 'off', true) AS sc)",
        pc->seq, pc->runs, rel, cond, pc->seq, PG_EPOCH_SHIFT, 1LL << PG_EPOCH_SHIFT);
}

/* The statements of run_ensure (see token_ctes). */
static int run_build_sql(pgclient *pc)
{
    pc->sql_run_get = fmt_alloc("SELECT epoch FROM %s WHERE seq = $1", pc->runs);
    /* committed with a flush before any token of it */
    pc->sql_epoch_bump = fmt_alloc(
        "WITH c AS (SELECT set_config('synchronous_commit', CASE WHEN "
        "current_setting('synchronous_commit') = 'off' THEN 'local' ELSE "
        "current_setting('synchronous_commit') END, true) AS sc) "
        "INSERT INTO %s AS e (seq, epoch) SELECT $1, (SELECT (q.last_value >> %d) + 1 FROM %s "
        "AS q) FROM c ON CONFLICT (seq) DO UPDATE SET epoch = GREATEST(e.epoch + 1, "
        "excluded.epoch) RETURNING e.epoch",
        pc->epochs, PG_EPOCH_SHIFT, pc->seq);
    pc->sql_run_put = fmt_alloc("INSERT INTO %s (seq, epoch, base) SELECT $1, $2::bigint, "
                                "nextval('%s') ON CONFLICT (seq) DO NOTHING",
                                pc->runs, pc->seq);
    return pc->sql_run_get && pc->sql_epoch_bump && pc->sql_run_put ? 0 : DLOCK_ENOMEM;
}

/* An epoch in force for the table's sequence in this server run (see
 * token_ctes): 0, or a code (why says it). */
static int run_ensure(dlock_lock *l, char *why, size_t wlen)
{
    pgclient *pc = pc_of(l->c);
    int64_t until = op_until(pc, l);
    const char *p[] = {pc->seq, NULL};
    PGresult *r;
    int rc = pool_run_until(l->c, until, pc->sql_run_get, 1, p, &r, why, wlen);
    bool in_force = !rc && pg_lib.ntuples(r) == 1;
    pg_lib.clear(r);
    if (rc || in_force)
        return rc;
    rc = pool_run_until(l->c, until, pc->sql_epoch_bump, 1, p, &r, why, wlen);
    char epoch[24] = "";
    if (!rc && pg_lib.ntuples(r) == 1)
        snprintf(epoch, sizeof epoch, "%s", pg_lib.getvalue(r, 0, 0));
    pg_lib.clear(r);
    if (rc)
        return rc;
    long long e = atoll(epoch);
    if (e < 1 || e >= 1LL << (63 - PG_EPOCH_SHIFT)) {
        snprintf(why, wlen, "the token epoch in %s is \"%s\" (1 to 2^%d - 1 expected)",
                 pc->epochs, epoch, 63 - PG_EPOCH_SHIFT);
        return DLOCK_EPROTO;
    }
    p[1] = epoch;
    rc = pool_run_until(l->c, until, pc->sql_run_put, 2, p, &r, why, wlen);
    pg_lib.clear(r);
    return rc;
}

/* The statements that take a lock, with the table's name in them. */
static int build_sql(pgclient *pc)
{
    /* (l: the lock's row, ok; the holder's row written only with a token;
     * (ok, NULL): the lock is ours and no epoch is in force, see token_ctes;
     * f: the token lock, see TOKEN_LOCK) */
#define GRANT_TAIL                                                                           \
    "%s, u AS (INSERT INTO %s AS t (name, key, token, holder, since) "                       \
    "SELECT $2, $1::bigint, d.v, $3, clock_timestamp() FROM d, c "                           \
    "ON CONFLICT (name) DO UPDATE SET token = excluded.token, holder = excluded.holder, "    \
    "since = excluded.since, value = NULL RETURNING t.token), "                              \
    "f AS (SELECT " TOKEN_LOCK("pg_try_advisory_lock", "d.v") " FROM d) "                    \
    "SELECT l.ok, (SELECT u.token FROM u), (SELECT count(*) FROM f) FROM l"
    /* the same without the holder's row (see pg_acquire) */
#define BARE_TAIL                                                                            \
    "%s, f AS (SELECT d.v, " TOKEN_LOCK("pg_try_advisory_lock", "d.v") " FROM d, c) "        \
    "SELECT l.ok, (SELECT f.v FROM f) FROM l"
    char *tok = token_ctes(pc, "l", "l.ok");
    char *tail = tok ? fmt_alloc(GRANT_TAIL, tok, pc->table) : NULL;
    char *bare = tok ? fmt_alloc(BARE_TAIL, tok) : NULL;
#undef GRANT_TAIL
#undef BARE_TAIL
    free(tok);
    /* set_config first (l reads s): lock_timeout bounds the wait that follows */
    static const char try_x[] = "WITH l AS (SELECT pg_try_advisory_lock($1::bigint) AS ok), %s";
    static const char try_r[] =
        "WITH l AS (SELECT pg_try_advisory_lock_shared($1::bigint) AS ok), %s";
    static const char wait_x[] =
        "WITH s AS (SELECT set_config('lock_timeout', $%d, false) AS v), "
        "l AS (SELECT pg_advisory_lock($1::bigint), true AS ok FROM s), %s";
    static const char wait_r[] =
        "WITH s AS (SELECT set_config('lock_timeout', $%d, false) AS v), "
        "l AS (SELECT pg_advisory_lock_shared($1::bigint), true AS ok FROM s), %s";
    if (tail && bare) {
        pc->sql_try_x = fmt_alloc(try_x, tail);
        pc->sql_try_r = fmt_alloc(try_r, tail);
        pc->sql_wait_x = fmt_alloc(wait_x, 4, tail);
        pc->sql_wait_r = fmt_alloc(wait_r, 4, tail);
        pc->sql_bare[0][0] = fmt_alloc(try_x, bare);
        pc->sql_bare[0][1] = fmt_alloc(try_r, bare);
        pc->sql_bare[1][0] = fmt_alloc(wait_x, 2, bare);
        pc->sql_bare[1][1] = fmt_alloc(wait_r, 2, bare);
        /* the draw alone, on the session holding the lock (after run_ensure) */
        pc->sql_redraw = fmt_alloc("WITH l AS (SELECT true AS ok), %s", tail);
    }
    free(tail);
    free(bare);
    bool bare_ok = true;
    for (int i = 0; i < 4; i++)
        bare_ok = bare_ok && pc->sql_bare[i / 2][i % 2];
    return pc->sql_try_x && pc->sql_try_r && pc->sql_wait_x && pc->sql_wait_r && bare_ok &&
                   pc->sql_redraw && run_build_sql(pc) == 0
               ? 0
               : DLOCK_ENOMEM;
}

/* libpq's connection parameters from the URL: hosts, ports, database,
 * user, password, and every parameter that is not ours, plus our defaults
 * (keepalives, application_name) where the URL gives none. */
static int build_params(pgclient *pc, const dl_url *u, char *why, size_t wlen)
{
    size_t cap = u->nparams + 12;
    pc->keys = calloc(cap, sizeof *pc->keys);
    pc->vals = calloc(cap, sizeof *pc->vals);
    size_t slen = 64;
    for (size_t i = 0; i < u->nhosts; i++)
        slen += strlen(u->hosts[i].host) + 16;
    pc->strings = calloc(1, slen);
    if (!pc->keys || !pc->vals || !pc->strings) {
        snprintf(why, wlen, "out of memory");
        return DLOCK_ENOMEM;
    }
    char *hosts = pc->strings, *ports = hosts + slen / 2;
    size_t hl = 0, pl = 0;
    for (size_t i = 0; i < u->nhosts; i++) {
        hl += (size_t)snprintf(hosts + hl, slen / 2 - hl, "%s%s", i ? "," : "", u->hosts[i].host);
        pl += (size_t)snprintf(ports + pl, slen / 2 - pl, "%s%d", i ? "," : "", u->hosts[i].port);
    }
    size_t n = 0;
#define KV(k, v) (pc->keys[n] = (k), pc->vals[n] = (v), n++)
    KV("host", hosts);
    KV("port", ports);
    if (u->path && *u->path)
        KV("dbname", u->path);
    if (u->user)
        KV("user", u->user);
    if (u->password)
        KV("password", u->password);
    bool has_app = false, has_ka[4] = {false, false, false, false};
    static const char *const ka_keys[] = {"keepalives", "keepalives_idle", "keepalives_interval",
                                          "keepalives_count"};
    static const char *const ka_vals[] = {"1", "2", "1", "3"};
    for (size_t i = 0; i < u->nparams; i++) {
        const char *k = u->params[i].key;
        if (!strcmp(k, "mode") || !strcmp(k, "table") || !strcmp(k, "schema") ||
            !strcmp(k, "pooler") ||
            !strcmp(k, "connect_timeout_ms") || !strcmp(k, "op_timeout_ms"))
            continue;
        has_app |= strcmp(k, "application_name") == 0;
        for (int j = 0; j < 4; j++)
            has_ka[j] |= strcmp(k, ka_keys[j]) == 0;
        KV(k, u->params[i].value);
    }
    if (!has_app) {
        char self[100];
        dl_self_desc(self, sizeof self);
        snprintf(pc->appname, sizeof pc->appname, "dlock %s", self);
        KV("application_name", pc->appname);
    }
    for (int j = 0; j < 4; j++)
        if (!has_ka[j])
            KV(ka_keys[j], ka_vals[j]);
#undef KV
    pc->nkv = n;
    return 0;
}

/* The lock table, created when it is missing. */
static int ensure_table_once(dlock_client *c, char *why, size_t wlen)
{
    pgclient *pc = pc_of(c);
    const char *p[] = {pc->table, pc->seq, pc->waiters};
    PGresult *r;
    const char *np[] = {pc->names, pc->runs, pc->epochs};
    int nrc = pg_pool_run(c,
                       "SELECT to_regclass($1) IS NOT NULL AND to_regclass($2) IS NOT NULL AND "
                       "to_regclass($3) IS NOT NULL",
                       3, np, &r, why, wlen);
    if (nrc)
        return nrc;
    bool names = strcmp(pg_lib.getvalue(r, 0, 0), "t") == 0;
    pg_lib.clear(r);
    if (!names) {
        char ddl[300];
        snprintf(ddl, sizeof ddl,
                 "CREATE TABLE IF NOT EXISTS %s (name text NOT NULL, mode text NOT NULL, "
                 "tbl text NOT NULL, PRIMARY KEY (name, mode, tbl))",
                 pc->names);
        nrc = pg_pool_run(c, ddl, 0, NULL, &r, why, wlen);
        pg_lib.clear(r);
        if (nrc == 0) { /* the token epochs: see token_ctes */
            snprintf(ddl, sizeof ddl,
                     "CREATE TABLE IF NOT EXISTS %s (seq text PRIMARY KEY, epoch bigint NOT NULL)",
                     pc->epochs);
            nrc = pg_pool_run(c, ddl, 0, NULL, &r, why, wlen);
            pg_lib.clear(r);
        }
        if (nrc == 0) { /* (emptied when the server recovers from a crash) */
            snprintf(ddl, sizeof ddl,
                     "CREATE UNLOGGED TABLE IF NOT EXISTS %s (seq text PRIMARY KEY, epoch bigint "
                     "NOT NULL, base bigint NOT NULL)",
                     pc->runs);
            nrc = pg_pool_run(c, ddl, 0, NULL, &r, why, wlen);
            pg_lib.clear(r);
        }
        if (nrc == DLOCK_EPERM) {
            char detail[121];
            snprintf(detail, sizeof detail, "%.120s", why);
            snprintf(why, wlen,
                     "the tables dlock_names (which mode each lock name is used in), "
                     "dlock_token_epoch and dlock_token_run (the tokens' epochs, new in this "
                     "version), in the lock table's schema, are not all there and this role "
                     "may not create them (%s): create them as their owner (see "
                     "docs/postgres.md) or grant CREATE",
                     detail);
        }
        if (nrc)
            return nrc;
    }
    if (pc->rowlock)
        p[2] = pc->values;
    bool three = pc->lease || pc->rowlock;
    int rc = pg_pool_run(c,
                      pc->lease ? "SELECT to_regclass($1) IS NOT NULL AND to_regclass($2) IS "
                                  "NOT NULL AND EXISTS (SELECT 1 FROM pg_attribute WHERE "
                                  "attrelid = to_regclass($3) AND attname = 'pid' AND NOT "
                                  "attisdropped)"
                      : three ? "SELECT to_regclass($1) IS NOT NULL AND to_regclass($2) IS NOT "
                              "NULL AND to_regclass($3) IS NOT NULL"
                            : "SELECT to_regclass($1) IS NOT NULL AND to_regclass($2) IS NOT NULL",
                      three ? 3 : 2, p, &r, why, wlen);
    if (rc)
        return rc;
    bool exists = strcmp(pg_lib.getvalue(r, 0, 0), "t") == 0;
    pg_lib.clear(r);
    if (exists)
        return 0;
    char sql[1000];
    if (pc->rowlock)
        snprintf(sql, sizeof sql, "CREATE TABLE IF NOT EXISTS %s (name text PRIMARY KEY)",
                 pc->table);
    else if (pc->lease)
        snprintf(sql, sizeof sql,
                 "CREATE TABLE IF NOT EXISTS %s (name text NOT NULL, slot int NOT NULL, owner text, "
                 "expires timestamptz, token bigint NOT NULL, holder text NOT NULL DEFAULT '', "
                 "since timestamptz, value text, PRIMARY KEY (name, slot))",
                 pc->table);
    else
        snprintf(sql, sizeof sql,
                 "CREATE TABLE IF NOT EXISTS %s (name text PRIMARY KEY, key bigint NOT NULL "
                 "UNIQUE, token bigint NOT NULL, holder text NOT NULL DEFAULT '', "
                 "since timestamptz, value text)",
                 pc->table);
    rc = pg_pool_run(c, sql, 0, NULL, &r, why, wlen);
    pg_lib.clear(r);
    if (rc == 0 && !pc->lease && !pc->rowlock) {
        /* The tokens' sequence, new in this version for an advisory table:
         * it starts above the counters the table's rows kept, in the
         * transaction that creates it, so no name's token goes back. */
        snprintf(sql, sizeof sql,
                 "DO $$BEGIN IF to_regclass('%s') IS NULL THEN CREATE SEQUENCE %s; "
                 "PERFORM setval('%s', (SELECT coalesce(max(token), 0) + 1 FROM %s), false); "
                 "END IF; END$$",
                 pc->seq, pc->seq, pc->seq, pc->table);
        rc = pg_pool_run(c, sql, 0, NULL, &r, why, wlen);
        pg_lib.clear(r);
    }
    if (rc == 0 && (pc->lease || pc->rowlock)) {
        snprintf(sql, sizeof sql, "CREATE SEQUENCE IF NOT EXISTS %s", pc->seq);
        rc = pg_pool_run(c, sql, 0, NULL, &r, why, wlen);
        pg_lib.clear(r);
    }
    if (rc == 0 && pc->lease) {
        snprintf(sql, sizeof sql,
                 "CREATE TABLE IF NOT EXISTS %s (name text NOT NULL, owner text NOT NULL, "
                 "since timestamptz NOT NULL, alive timestamptz NOT NULL, pid int, "
                 "PRIMARY KEY (name, owner))",
                 pc->waiters);
        rc = pg_pool_run(c, sql, 0, NULL, &r, why, wlen);
        pg_lib.clear(r);
        if (rc == 0) { /* a table of an older version: the waiter's session pid */
            snprintf(sql, sizeof sql, "ALTER TABLE %s ADD COLUMN IF NOT EXISTS pid int",
                     pc->waiters);
            rc = pg_pool_run(c, sql, 0, NULL, &r, why, wlen);
            pg_lib.clear(r);
        }
    }
    if (rc == 0 && pc->rowlock) {
        snprintf(sql, sizeof sql,
                 "CREATE TABLE IF NOT EXISTS %s (name text PRIMARY KEY, owner text NOT NULL, "
                 "token bigint NOT NULL, holder text NOT NULL, since timestamptz, value text)",
                 pc->values);
        rc = pg_pool_run(c, sql, 0, NULL, &r, why, wlen);
        pg_lib.clear(r);
    }
    if (rc == 0)
        return 0;
    if (rc == DLOCK_EPERM) {
        char detail[200];
        snprintf(detail, sizeof detail, "%.199s", why);
        snprintf(why, wlen,
                 "the lock table %s does not exist and this role may not create it (%s): "
                 "create it as its owner (see docs/postgres.md) or grant CREATE",
                 pc->table, detail);
    }
    return rc;
}

/* The lock tables, created when missing. Two clients creating them at the
 * same moment: CREATE ... IF NOT EXISTS can still fail on the catalog's
 * unique index for the slower one, which looks again. */
static int ensure_table(dlock_client *c, char *why, size_t wlen)
{
    int rc = 0;
    for (int i = 0; i < 5; i++) {
        rc = ensure_table_once(c, why, wlen);
        if (rc == 0 || rc == DLOCK_EPERM || rc == DLOCK_EUNREACHABLE || rc == DLOCK_ENOMEM)
            break;
        struct timespec pause = {0, 20 * 1000000};
        nanosleep(&pause, NULL);
    }
    return rc;
}

static void pg_client_close(dlock_client *c);

static int pg_client_open(dlock_client *c, const dl_url *u)
{
    pthread_once(&pq_once, pq_load);
    if (pq_error[0])
        return dl_client_err(c, DLOCK_ENOTSUP, "%s", pq_error);
    const char *mode = dl_url_param(u, "mode");
    bool lease = mode && strcmp(mode, "lease") == 0;
    bool rowlock = mode && strcmp(mode, "rowlock") == 0;
    if (mode && !lease && !rowlock && strcmp(mode, "advisory") != 0)
        return dl_client_err(c, DLOCK_EURL,
                             "%s: mode must be advisory, lease or rowlock, not \"%s\"",
                             u->redacted, mode);
    const char *pooler = dl_url_param(u, "pooler");
    bool txpool = pooler && strcmp(pooler, "transaction") == 0;
    if (pooler && !txpool && strcmp(pooler, "session") != 0 && strcmp(pooler, "none") != 0)
        return dl_client_err(c, DLOCK_EURL,
                             "%s: pooler must be transaction, session or none, not \"%s\"",
                             u->redacted, pooler);
    if (txpool && !lease)
        return dl_client_err(c, DLOCK_EURL,
                             "%s: mode=%s holds its lock in a server session, which a "
                             "transaction-mode pooler hands to other clients between "
                             "statements: use mode=lease behind it, or connect to PostgreSQL "
                             "or a session-mode pooler",
                             u->redacted, rowlock ? "rowlock" : "advisory");
    const char *table = dl_url_param(u, "table"), *schema = dl_url_param(u, "schema");
    if (!table)
        table = lease ? "dlock_lease" : rowlock ? "dlock_row" : "dlock";
    /* every mode names its sequence TABLE_token: room for it */
    if (!ident_ok(table) || (schema && !ident_ok(schema)) || strlen(table) > PG_IDENT_MAX - 6)
        return dl_client_err(c, DLOCK_EURL,
                             "%s: table= and schema= take lowercase identifiers ([a-z_][a-z0-9_]*, "
                             "at most %d bytes; %d for a table)",
                             u->redacted, PG_IDENT_MAX, PG_IDENT_MAX - 6);
    pgclient *pc = calloc(1, sizeof *pc);
    if (!pc)
        return dl_client_err(c, DLOCK_ENOMEM, "out of memory");
    dl_pool_init(&pc->pool, PG_POOL_IDLE_MAX);
    c->bstate = pc;
    pc->redacted = u->redacted;
    pc->op_timeout_ms = c->opts.op_timeout_ms;
    pc->connect_timeout_ms = c->opts.connect_timeout_ms;
    pc->lease = lease;
    pc->rowlock = rowlock;
    pc->txpool = txpool;
    pc->mode = lease ? "lease" : rowlock ? "rowlock" : "advisory";
    if (schema) {
        snprintf(pc->table, sizeof pc->table, "\"%s\".\"%s\"", schema, table);
        snprintf(pc->seq, sizeof pc->seq, "\"%s\".\"%s_token\"", schema, table);
        snprintf(pc->waiters, sizeof pc->waiters, "\"%s\".\"%s_wait\"", schema, table);
        snprintf(pc->values, sizeof pc->values, "\"%s\".\"%s_holder\"", schema, table);
        snprintf(pc->names, sizeof pc->names, "\"%s\".\"dlock_names\"", schema);
        snprintf(pc->runs, sizeof pc->runs, "\"%s\".\"dlock_token_run\"", schema);
        snprintf(pc->epochs, sizeof pc->epochs, "\"%s\".\"dlock_token_epoch\"", schema);
    } else {
        snprintf(pc->table, sizeof pc->table, "\"%s\"", table);
        snprintf(pc->seq, sizeof pc->seq, "\"%s_token\"", table);
        snprintf(pc->waiters, sizeof pc->waiters, "\"%s_wait\"", table);
        snprintf(pc->values, sizeof pc->values, "\"%s_holder\"", table);
        snprintf(pc->names, sizeof pc->names, "\"dlock_names\"");
        snprintf(pc->runs, sizeof pc->runs, "\"dlock_token_run\"");
        snprintf(pc->epochs, sizeof pc->epochs, "\"dlock_token_epoch\"");
    }
    char why[600];
    int rc = build_params(pc, u, why, sizeof why);
    if (!rc)
        rc = (lease ? lease_build_sql(pc) : rowlock ? row_build_sql(pc) : build_sql(pc)) ||
                     names_build_sql(pc)
                 ? DLOCK_ENOMEM
                 : 0;
    if (!rc)
        rc = dl_swatch_init(&pc->watch, session_gone);
    if (rc) {
        pg_client_close(c);
        return dl_client_err(c, rc, "%s: %s", u->redacted,
                             rc == DLOCK_ENOMEM ? "out of memory" : "cannot make an eventfd");
    }
    /* The first session: the server is there, the role may log in, and the
     * table exists. */
    rc = ensure_table(c, why, sizeof why);
    if (rc) {
        pg_client_close(c);
        return dl_client_err(c, rc, "%s: %s", u->redacted, why);
    }
    /* advisory: liveness is the session, nothing to renew; lease: rows
     * renewed by the core through pg_renew. */
    c->caps = lease ? PG_CAPS_LEASE : rowlock ? PG_CAPS_ROWLOCK : PG_CAPS_ADVISORY;
    c->renews = lease;
    return 0;
}

static void pg_client_close(dlock_client *c)
{
    pgclient *pc = pc_of(c);
    if (!pc)
        return;
    dl_pool_stop(&pc->pool, pooled_close);
    /* Sessions still holding locks (the core released what it could) end
     * with the client: the server lets go of their locks. */
    dl_swatch_fini(&pc->watch, session_drop);
    pc_free(pc);
    c->bstate = NULL;
}

static const dl_backend_ops pg_ops = {
    .client_open = pg_client_open,
    .client_close = pg_client_close,
    .lock_init = pg_lock_init,
    .lock_fini = pg_lock_fini,
    .acquire = pg_acquire,
    .release = pg_release,
    .renew = pg_renew,
    .renew_batch = pg_renew_batch,
    .abandon = pg_abandon,
    .inspect = pg_inspect,
    .list = pg_list,
    .set_value = pg_set_value,
    .get_value = pg_get_value,
    .break_lock = pg_break,
};
#define PG_OPS .ops = &pg_ops
#else
#define PG_OPS .missing = "built without libpq (Debian: libpq-dev)"
#endif

const dl_backend dl_backend_postgres = {
    .name = "postgres",
    .schemes = postgres_schemes,
    .caps = PG_CAPS,
    .liveness = PG_LIVENESS,
    .fencing = PG_FENCING,
    .params = PG_PARAMS,
    PG_OPS,
};
