/* SPDX-License-Identifier: MIT */
/*
 * postgres.c — PostgreSQL: session advisory locks (mode=advisory), the
 * seeds' lock table with leases (mode=lease), row locks held by an open
 * transaction (mode=rowlock). Each mode is a file of its own (advisory.c,
 * lease.c, rowlock.c) ending in its operations table; a client takes its
 * mode's table and capabilities when it opens (pg_modes, beside the facts
 * below), and no operation asks which mode it is in. This file is what the
 * modes share: libpq, sessions and their statements, the pool, the
 * acquisition and release of the two session modes (advisory, rowlock)
 * with their watched sessions and token draws, the names table that makes
 * a name one lock across modes, and clients.
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
#define PG_CAPS (PG_CAPS_ADVISORY | PG_CAPS_LEASE | PG_CAPS_ROWLOCK | DLOCK_CAP_CLAIMS) /* a client: its mode's */
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
#include <limits.h>
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

#define PG_POOL_IDLE_MAX 8   /* idle connections a client keeps */
#define PG_CHECK_INTERVAL "1000" /* client_connection_check_interval, ms (server 14+) */

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
const char *pg_one_line(const char *msg, char *buf, size_t len)
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
        snprintf(why, wlen, "%s", pg_one_line(pg_lib.errorMessage(k->pg), line, sizeof line));
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
        snprintf(why, wlen, "%s", pg_one_line(pg_lib.errorMessage(k->pg), line, sizeof line));
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
 * believes prepared can be missing. Queued, not synced nor flushed:
 * *units says how many replies it makes (its Prepare's, its own).
 */
static int stmt_queue_fixed(pg_conn *k, const char *sql, int n, const char *const *vals,
                            int *units, char *why, size_t wlen)
{
    char name[16], line[200];
    int i = 0;
    while (!k->unnamed && i < k->nprepared && k->prepared[i] != sql)
        i++;
    *units = 1;
    /* Behind a transaction pooler, a session's statements run on whichever
     * server session is free: one prepared on one is missing (or already
     * there, another client's) on the next. */
    if (k->unnamed || i == PG_PREPARED_MAX) {
        if (!pg_lib.sendQueryParams(k->pg, sql, n, NULL, vals, NULL, NULL, 0))
            goto failed;
        return 0;
    }
    snprintf(name, sizeof name, "dlock%d", i);
    if (i == k->nprepared) {
        if (!pg_lib.sendPrepare(k->pg, name, sql, n, NULL))
            goto failed;
        k->prepared[k->nprepared++] = sql;
        *units = 2;
    }
    if (!pg_lib.sendQueryPrepared(k->pg, name, n, vals, NULL, NULL, 0))
        goto failed;
    return 0;
failed:
    snprintf(why, wlen, "%s", pg_one_line(pg_lib.errorMessage(k->pg), line, sizeof line));
    return DLOCK_EUNREACHABLE;
}

/* The sync point that ends what was queued on k (one segment: one reply
 * to read), sent with it. */
static int stmt_sync(pg_conn *k, int64_t until_ns, int cancel_fd, char *why, size_t wlen)
{
    char line[200];
    if (!pg_lib.pipelineSync(k->pg)) {
        snprintf(why, wlen, "%s", pg_one_line(pg_lib.errorMessage(k->pg), line, sizeof line));
        return DLOCK_EUNREACHABLE;
    }
    k->pending++;
    return stmt_flush(k, until_ns, cancel_fd, why, wlen);
}

int pg_stmt_send_fixed(pg_conn *k, const char *sql, int n, const char *const *vals,
                           int64_t until_ns, int cancel_fd, char *why, size_t wlen)
{
    int units; /* (one segment with the execution: one reply, read as one) */
    int rc = stmt_queue_fixed(k, sql, n, vals, &units, why, wlen);
    return rc ? rc : stmt_sync(k, until_ns, cancel_fd, why, wlen);
}

/*
 * The reply to the oldest segment sent on k and not read yet, up to its
 * sync point (see run for the codes): count statements, the i-th making
 * units[i] replies (a Prepare's, its own; the last takes whatever else
 * comes), each statement's result in *outs[i] (outs[i] NULL: read and
 * dropped) — its last, unless one before it failed: that one. After a
 * failure the server skips the segment's other statements: theirs say
 * PGRES_PIPELINE_ABORTED.
 */
#define PG_SEGMENT_MAX 4 /* statements in one segment */
static int stmt_read_segment(pg_conn *k, int64_t until_ns, int cancel_fd, int count,
                             const int *units, PGresult **const *outs, char *why, size_t wlen)
{
    char line[200];
    PGresult *got[PG_SEGMENT_MAX] = {NULL};
    int s = 0, u = 0; /* the statement whose replies come, and its replies read */
    int rc = 0;
    for (int i = 0; i < count; i++)
        if (outs[i])
            *outs[i] = NULL;
    if (k->pending <= 0 || count < 1 || count > PG_SEGMENT_MAX) {
        snprintf(why, wlen, "no statement to read a reply to");
        return DLOCK_EPROTO;
    }
    for (;;) {
        while (!pg_lib.isBusy(k->pg)) {
            PGresult *r = pg_lib.getResult(k->pg);
            if (!r) {
                if (pg_lib.status(k->pg) != CONNECTION_OK) {
                    snprintf(why, wlen, "%s", pg_one_line(pg_lib.errorMessage(k->pg), line, sizeof line));
                    rc = DLOCK_EUNREACHABLE;
                    goto out;
                }
                if (++u >= units[s] && s < count - 1) { /* the end of one reply */
                    s++;
                    u = 0;
                }
                continue;
            }
            if (pg_lib.resultStatus(r) == PGRES_PIPELINE_SYNC) {
                pg_lib.clear(r);
                k->pending--;
                for (int i = 0; i < count; i++) {
                    if (!got[i]) {
                        snprintf(why, wlen, "the server sent no result");
                        rc = DLOCK_EPROTO;
                        goto out;
                    }
                }
                for (int i = 0; i < count; i++) {
                    if (outs[i]) {
                        *outs[i] = got[i];
                        got[i] = NULL;
                    }
                }
                goto out;
            }
            ExecStatusType st = pg_lib.resultStatus(r);
            if (st != PGRES_TUPLES_OK && st != PGRES_COMMAND_OK)
                k->failed = true;
            ExecStatusType fs = got[s] ? pg_lib.resultStatus(got[s]) : PGRES_COMMAND_OK;
            if (fs == PGRES_TUPLES_OK || fs == PGRES_COMMAND_OK) {
                pg_lib.clear(got[s]);
                got[s] = r;
            } else {
                pg_lib.clear(r);
            }
        }
        rc = dl_wait_fd(pg_lib.socket(k->pg), POLLIN, until_ns, cancel_fd, NULL);
        if (rc == 0 && !pg_lib.consumeInput(k->pg))
            rc = DLOCK_EUNREACHABLE;
        if (rc) {
            if (rc == DLOCK_EUNREACHABLE)
                snprintf(why, wlen, "%s", pg_one_line(pg_lib.errorMessage(k->pg), line, sizeof line));
            else
                snprintf(why, wlen, "%s", rc == DLOCK_ECANCELED ? "canceled" : "no answer in time");
            goto out;
        }
    }
out:
    for (int i = 0; i < count; i++)
        pg_lib.clear(got[i]);
    return rc;
}

/* The reply to the oldest statement sent on k and not read yet: its
 * result in *out (NULL when out is NULL: read and dropped), up to its sync
 * point (see run for the codes). */
int pg_stmt_read(pg_conn *k, int64_t until_ns, int cancel_fd, PGresult **out, char *why,
                     size_t wlen)
{
    static const int all[] = {INT_MAX}; /* (a Prepare's reply first, then its own) */
    PGresult **const outs[] = {out};
    return stmt_read_segment(k, until_ns, cancel_fd, 1, all, outs, why, wlen);
}

/* The reply to the statement sent last on k; the replies still unread
 * before it (a release's unlock) are read and dropped: the session's end
 * would have let go of anything they failed to. */
int pg_stmt_wait(pg_conn *k, int64_t until_ns, int cancel_fd, PGresult **out, char *why,
                     size_t wlen)
{
    *out = NULL;
    while (k->pending > 1) {
        int rc = pg_stmt_read(k, until_ns, cancel_fd, NULL, why, wlen);
        if (rc)
            return rc;
    }
    return pg_stmt_read(k, until_ns, cancel_fd, out, why, wlen);
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

/* run for a statement of fixed text (see pg_stmt_send_fixed). */
int pg_run_fixed(pg_conn *k, const char *sql, int n, const char *const *vals,
                     int64_t until_ns, int cancel_fd, PGresult **out, char *why, size_t wlen)
{
    *out = NULL;
    int rc = pg_stmt_send_fixed(k, sql, n, vals, until_ns, cancel_fd, why, wlen);
    return rc ? rc : pg_stmt_wait(k, until_ns, cancel_fd, out, why, wlen);
}

/* Fixed statements sent in one flight, each run once the one before it is
 * done; their replies in outs (an entry NULL: read and dropped), the
 * replies left from the session's last use read and dropped first. joint:
 * in one segment (one sync point: one transaction of the server's, one
 * reply flushed), else each in its own. */
static int run_fixed_flight(pg_conn *k, bool joint, int count, const char *const *sqls,
                            const int *ns, const char *const *const *vals, int64_t until_ns,
                            int cancel_fd, PGresult **const *outs, char *why, size_t wlen)
{
    int rc = 0, units[PG_SEGMENT_MAX];
    if (joint && count > PG_SEGMENT_MAX) {
        snprintf(why, wlen, "%d statements in one segment (at most %d)", count, PG_SEGMENT_MAX);
        return DLOCK_EINVAL;
    }
    for (int i = 0; i < count; i++)
        if (outs[i])
            *outs[i] = NULL;
    for (int i = 0; i < count && !rc; i++)
        rc = joint ? stmt_queue_fixed(k, sqls[i], ns[i], vals[i], &units[i], why, wlen)
                   : pg_stmt_send_fixed(k, sqls[i], ns[i], vals[i], until_ns, cancel_fd, why,
                                        wlen);
    if (!rc && joint)
        rc = stmt_sync(k, until_ns, cancel_fd, why, wlen);
    int mine = joint ? 1 : count; /* segments */
    while (!rc && k->pending > mine)
        rc = pg_stmt_read(k, until_ns, cancel_fd, NULL, why, wlen);
    if (joint && !rc)
        rc = stmt_read_segment(k, until_ns, cancel_fd, count, units, outs, why, wlen);
    for (int i = 0; i < count && !rc && !joint; i++)
        rc = pg_stmt_read(k, until_ns, cancel_fd, outs[i], why, wlen);
    for (int i = 0; i < count && rc; i++) {
        if (outs[i]) {
            pg_lib.clear(*outs[i]);
            *outs[i] = NULL;
        }
    }
    return rc;
}

int pg_run_fixed_seq(pg_conn *k, int count, const char *const *sqls, const int *ns,
                         const char *const *const *vals, int64_t until_ns, int cancel_fd,
                         PGresult **const *outs, char *why, size_t wlen)
{
    return run_fixed_flight(k, false, count, sqls, ns, vals, until_ns, cancel_fd, outs, why,
                            wlen);
}

int pg_run_fixed_joint(pg_conn *k, int count, const char *const *sqls, const int *ns,
                       const char *const *const *vals, int64_t until_ns, int cancel_fd,
                       PGresult **const *outs, char *why, size_t wlen)
{
    return run_fixed_flight(k, true, count, sqls, ns, vals, until_ns, cancel_fd, outs, why,
                            wlen);
}

/* The SQLSTATE of a failed result ("" for success). */
const char *pg_sqlstate(const PGresult *r)
{
    ExecStatusType s = pg_lib.resultStatus(r);
    if (s == PGRES_TUPLES_OK || s == PGRES_COMMAND_OK)
        return "";
    const char *st = pg_lib.resultErrorField(r, PG_DIAG_SQLSTATE);
    return st ? st : "XX000";
}

/* A server error's code: permission, lock timeout, or a protocol surprise. */
int pg_code_of_state(const char *st)
{
    if (strncmp(st, "42501", 5) == 0 || strncmp(st, "28", 2) == 0)
        return DLOCK_EPERM;
    if (strcmp(st, "55P03") == 0)
        return DLOCK_ETIMEDOUT;
    if (pg_state_session_ended(st))
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
            pg_one_line(m, line, sizeof line);
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
                /* A server this client already spoke with that closes a
                 * new connection is going down or restarting (connections
                 * queued as it was killed), not another kind of server. */
                rc = strstr(m, "Connection refused") ||
                             (atomic_load(&pc->spoke) &&
                              strstr(m, "server closed the connection unexpectedly"))
                         ? DLOCK_EUNREACHABLE
                         : DLOCK_EPROTO;
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
    atomic_store(&pc->spoke, true);
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
    if (!rc && *pg_sqlstate(r)) {
        rc = pg_code_of_state(pg_sqlstate(r));
        snprintf(why, wlen, "%s", pg_one_line(pg_lib.resultErrorMessage(r), line, sizeof line));
    }
    pg_lib.clear(r);
    if (rc) {
        pg_conn_close(k);
        return rc;
    }
    snprintf(k->lock_timeout_ms, sizeof k->lock_timeout_ms, "0");
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
        if (dl_pool_idle_ended(it, pg_lib.socket(k->pg)) &&
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

int64_t pg_retry_until_of(const pgclient *pc, const dlock_lock *l, int64_t deadline_ns)
{
    return deadline_ns < 0 ? dl_deadline_in(pc->connect_timeout_ms)
                           : l->op_deadline_ns;
}

int pg_conn_get_retry(pgclient *pc, int64_t retry_until, int cancel_fd, pg_conn **out,
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

/* Whether a statement's SQLSTATE says the server ended its session
 * (57P: shut down, terminated, an idle limit; 08: the connection). */
bool pg_state_session_ended(const char *sqlstate)
{
    return strncmp(sqlstate, "57P", 3) == 0 || strncmp(sqlstate, "08", 2) == 0;
}

/* Whether a wait ended with deadline_ns may go on: time is left. */
bool pg_time_left(int64_t deadline_ns)
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

/* Until the backend pid has left pg_stat_activity (its session's end has
 * let its locks go by then: the exit releases them before it unlists the
 * backend), asked on o, by until_ns. o closed (NULL) if it fails. */
static void await_backend_ended(pg_conn **o, const char *pid, int64_t until_ns)
{
    const char *p[] = {pid};
    char why[128];
    while (*o && dl_ms_left(until_ns) > 0) {
        PGresult *r;
        if (pg_run(*o, "SELECT 1 FROM pg_stat_activity WHERE pid = $1::int", 1, p, until_ns, -1,
                   &r, why, sizeof why) != 0) {
            pg_conn_close(*o);
            *o = NULL;
            return;
        }
        bool listed = pg_lib.ntuples(r) > 0;
        pg_lib.clear(r);
        if (!listed)
            return;
        (void)dl_nap_ns(dl_ms_to_ns(1), -1);
    }
}

/* A statement that may still wait on the server (a lock wait we gave up
 * on): cancel it from another session, read what k still has to say (the
 * cancelled statement's error: its backend has left the lock queue by
 * then, so an inspect right after sees no waiter), then close k — all by
 * until_ns (the caller's deadline: a stopped server must not hold the
 * caller past it). A reply that is not the wait's end (the grant crossed
 * the cancel) means k's session holds the lock: the server lets it go only
 * once it sees the session end, so that is waited for too, or a try right
 * after our caller returns could find the name taken by nobody. Without
 * time left, or when the cancel cannot be delivered, closing k alone ends
 * the server's wait when its backend next looks at the socket
 * (client_connection_check_interval, 14+). */
void pg_conn_abandon(pgclient *pc, pg_conn *k, int64_t until_ns)
{
    if (!k)
        return;
    char pid[24], why[128];
    snprintf(pid, sizeof pid, "%d", pg_lib.backendPID(k->pg));
    pg_conn *o = NULL;
    bool maybe_held = false;
    if (dl_ms_left(until_ns) > 0 && pg_conn_get(pc, until_ns, -1, &o, why, sizeof why) == 0) {
        const char *p[] = {pid};
        PGresult *r;
        int rc = pg_run(o, "SELECT pg_cancel_backend($1::int)", 1, p, until_ns, -1, &r, why,
                        sizeof why);
        pg_lib.clear(r);
        if (rc) {
            pg_conn_close(o);
            o = NULL;
        }
        while (!rc && k->pending > 0) {
            PGresult *got;
            if (pg_stmt_read(k, until_ns, -1, &got, why, sizeof why) != 0)
                break;
            const char *st = pg_sqlstate(got);
            /* (57014: cancelled; 55P03: lock_timeout) */
            maybe_held = maybe_held || (strcmp(st, "57014") != 0 && strcmp(st, "55P03") != 0);
            pg_lib.clear(got);
        }
    }
    pg_conn_close(k);
    if (maybe_held)
        await_backend_ended(&o, pid, until_ns);
    if (o)
        pg_conn_put(pc, o);
}

/* The bound of a call made while acquiring l: its op_deadline_ns when it
 * has one (the caller's deadline plus the margin), else op_timeout_ms. */
int64_t pg_op_until(const pgclient *pc, const dlock_lock *l)
{
    return l && l->op_deadline_ns > 0 ? l->op_deadline_ns
                                      : dl_deadline_in(pc->op_timeout_ms);
}

/* One statement on a pooled session, for the calls that hold no lock.
 * until < 0: no deadline of the caller's; a new session then has
 * connect_timeout_ms to connect and the statement op_timeout_ms after it
 * (a URL's longer connect_timeout_ms is not cut to op_timeout_ms). */
int pg_pool_run_until(dlock_client *c, int64_t until, const char *sql, int n,
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
        rc = pg_run(k, sql, n, vals, until >= 0 ? until : pg_op_until(pc, NULL), -1, out, why,
                    wlen);
        if (rc)
            pg_conn_close(k);
        if (!dl_pool_again(rc, reused))
            break;
    } while (1);
    if (rc)
        return rc;
    if (*pg_sqlstate(*out)) {
        char line[200];
        rc = pg_code_of_state(pg_sqlstate(*out));
        snprintf(why, wlen, "%s", pg_one_line(pg_lib.resultErrorMessage(*out), line, sizeof line));
        pg_lib.clear(*out);
        *out = NULL;
    }
    pg_conn_put(pc, k);
    return rc;
}

int pg_pool_run(dlock_client *c, const char *sql, int n, const char *const *vals,
                    PGresult **out, char *why, size_t wlen)
{
    return pg_pool_run_until(c, -1, sql, n, vals, out, why, wlen);
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
        snprintf(why, wlen, "%s", pg_one_line(pg_lib.errorMessage(k->pg), line, sizeof line));
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
int pg_watch_conn(dlock_lock *l, pg_conn *k, char *why, size_t wlen)
{
    return dl_swatch_add(&pc_of(l->c)->watch, &k->sess, l, pg_lib.socket(k->pg), why, wlen);
}

/* Take l's session off the watched list for a call on it (or for good);
 * NULL when it holds nothing; k->sess.lost when the watcher found it gone. */
pg_conn *pg_unwatch_conn(dlock_lock *l)
{
    pg_conn *k = ((pglock *)l->bstate)->conn;
    if (k)
        (void)dl_swatch_remove(&pc_of(l->c)->watch, &k->sess);
    return k;
}

/* Back on the watched list after a call on it. */
void pg_rewatch_conn(dlock_lock *l, pg_conn *k)
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

int pg_lock_init(dlock_lock *l)
{
    pglock *pl = calloc(1, sizeof *pl);
    if (!pl)
        return dl_lock_err(l, DLOCK_ENOMEM, "out of memory");
    pl->key = pg_key_of(pc_of(l->c), l->name);
    l->bstate = pl;
    return 0;
}

void pg_lock_fini(dlock_lock *l)
{
    free(l->bstate);
    l->bstate = NULL;
}

/* ---- token draws (advisory, rowlock) --------------------------------------------- */

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
char *pg_token_ctes(pgclient *pc, const char *rel, const char *cond)
{
    return dl_fmt_alloc(
        "n AS (SELECT r.epoch AS e, nextval('%s') - r.base AS off FROM %s AS r, %s WHERE %s "
        "AND r.seq = '%s'), "
        "d AS (SELECT (n.e << %d) + n.off AS v FROM n WHERE n.off > 0 AND n.off < %lld), "
        "c AS (SELECT set_config('synchronous_commit', 'off', true) AS sc)",
        pc->seq, pc->runs, rel, cond, pc->seq, PG_EPOCH_SHIFT, 1LL << PG_EPOCH_SHIFT);
}

/* The statements of run_ensure (see pg_token_ctes). */
int pg_run_build_sql(pgclient *pc)
{
    pc->sql_run_get = dl_fmt_alloc("SELECT epoch FROM %s WHERE seq = $1", pc->runs);
    /* committed with a flush before any token of it */
    pc->sql_epoch_bump = dl_fmt_alloc(
        "WITH c AS (SELECT set_config('synchronous_commit', CASE WHEN "
        "current_setting('synchronous_commit') = 'off' THEN 'local' ELSE "
        "current_setting('synchronous_commit') END, true) AS sc) "
        "INSERT INTO %s AS e (seq, epoch) SELECT $1, (SELECT (q.last_value >> %d) + 1 FROM %s "
        "AS q) FROM c ON CONFLICT (seq) DO UPDATE SET epoch = GREATEST(e.epoch + 1, "
        "excluded.epoch) RETURNING e.epoch",
        pc->epochs, PG_EPOCH_SHIFT, pc->seq);
    pc->sql_run_put = dl_fmt_alloc("INSERT INTO %s (seq, epoch, base) SELECT $1, $2::bigint, "
                                   "nextval('%s') ON CONFLICT (seq) DO NOTHING",
                                   pc->runs, pc->seq);
    return pc->sql_run_get && pc->sql_epoch_bump && pc->sql_run_put ? 0 : DLOCK_ENOMEM;
}

/*
 * The tokens' sequence UNLOGGED (servers from 15 on): its nextval then
 * writes no WAL at all, where a logged one writes a record every 32 values
 * and makes that grant's transaction take an xid and write a commit. That
 * was 4-5 % of the throughput of 8 waiters on a durable server (pgbench,
 * the grant's statement on a logged and an unlogged sequence). It costs
 * no safety: PostgreSQL resets an unlogged sequence when it recovers from
 * a crash, when it empties dlock_token_run too, so the next grant starts a
 * new epoch; a clean shutdown keeps both. A lease table's sequence is
 * never made so: lease tokens are the sequence's own values.
 *
 * SEQ_LOGGED(seq, table): whether seq should be made so and this role may
 * (it owns it). The DO block that does it waits at most 1 s for the
 * sequence's lock; a failure leaves it logged (it works as before) and is
 * not the open's.
 */
#define SEQ_LOGGED(seq, table)                                                               \
    "coalesce(current_setting('server_version_num')::int >= 150000 AND (SELECT "             \
    "s.relpersistence = 'p' AND pg_has_role(s.relowner, 'USAGE') FROM pg_class s WHERE "     \
    "s.oid = to_regclass(" seq ")) AND NOT EXISTS (SELECT 1 FROM pg_attribute a WHERE "      \
    "a.attrelid = to_regclass(" table ") AND a.attname = 'expires' AND NOT "                 \
    "a.attisdropped), false)"
int pg_token_tables_ensure(dlock_client *c, const char *check, int n, const char *const *p,
                           const char *const *ddl, size_t nddl, char *why, size_t wlen)
{
    pgclient *pc = pc_of(c);
    char *full = dl_fmt_alloc("%s AND NOT " SEQ_LOGGED("$2", "$1"), check);
    char *unlog = dl_fmt_alloc("DO $dlock$ BEGIN PERFORM set_config('lock_timeout', '1000', true); "
                               "IF " SEQ_LOGGED("'%s'", "'%s'") " THEN "
                               "EXECUTE 'ALTER SEQUENCE %s SET UNLOGGED'; END IF; "
                               "EXCEPTION WHEN OTHERS THEN NULL; END $dlock$",
                               pc->seq, pc->table, pc->seq);
    const char *all[nddl + 1];
    for (size_t i = 0; i < nddl; i++)
        all[i] = ddl[i];
    all[nddl] = unlog;
    int rc = full && unlog ? pg_tables_ensure(c, "lock", pc->table, full, n, p, all, nddl + 1,
                                              why, wlen)
                           : DLOCK_ENOMEM;
    free(full);
    free(unlog);
    return rc;
}
#undef SEQ_LOGGED

/* An epoch in force for the table's sequence in this server run (see
 * pg_token_ctes): 0, or a code (why says it). */
static int run_ensure(dlock_lock *l, char *why, size_t wlen)
{
    pgclient *pc = pc_of(l->c);
    int64_t until = pg_op_until(pc, l);
    const char *p[] = {pc->seq, NULL};
    PGresult *r;
    int rc = pg_pool_run_until(l->c, until, pc->sql_run_get, 1, p, &r, why, wlen);
    bool in_force = !rc && pg_lib.ntuples(r) == 1;
    pg_lib.clear(r);
    if (rc || in_force)
        return rc;
    rc = pg_pool_run_until(l->c, until, pc->sql_epoch_bump, 1, p, &r, why, wlen);
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
    rc = pg_pool_run_until(l->c, until, pc->sql_run_put, 2, p, &r, why, wlen);
    pg_lib.clear(r);
    return rc;
}

/* A grant that drew no token (no epoch in force): an epoch put in force and
 * the token drawn again with draw, up to 3 times. 0, or a code (why). */
int pg_draw_under_epoch(dlock_lock *l, pg_draw_fn draw, void *arg, char *why, size_t wlen)
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

/* ---- the session modes' acquisition and release (advisory, rowlock) --------------- */

/* t's holder, made at its first use: an advisory grant after a handle's
 * first writes none, and the host's name and the pid cost two calls. */
const char *pg_try_holder(dlock_lock *l, pg_try *t)
{
    if (!t->holder[0]) {
        char self[200];
        dl_self_desc(self, sizeof self);
        snprintf(t->holder, sizeof t->holder, "%s %s", l->owner, self);
    }
    return t->holder;
}

/*
 * A lock held by a session (advisory, rowlock): a session from the pool,
 * the mode's statements on it (g->send), what went wrong on the way, said
 * alike for both modes (a pooled session that had died idle: again on
 * another; a waiter's session the server ended: it waits on, on a new
 * one), then the grant (g->took: the token, the names table), after which
 * the session is watched until the release.
 */
int pg_session_acquire(dlock_lock *l, int64_t deadline_ns, const pg_grant *g)
{
    pgclient *pc = pc_of(l->c);
    pglock *pl = l->bstate;
    char line[200];
    pg_try t = {.deadline_ns = deadline_ns, .cancel_fd = deadline_ns != 0 ? dl_cancel_fd(l) : -1};
    /* A timed wait is bounded by the server (lock_timeout at the deadline)
     * and, should the server not answer, by op_deadline_ns here. */
    t.until = deadline_ns == 0 ? dl_deadline_in(dl_op_timeout_ms(l, pc->op_timeout_ms))
              : deadline_ns < 0 ? -1
                                : l->op_deadline_ns;
    int64_t retry_until = 0; /* set when a waiter's session ended: see pg_conn_get_retry */
    int rc;
again:
    t.r = t.names = t.quiet = NULL;
    if (retry_until)
        rc = pg_conn_get_retry(pc, retry_until, t.cancel_fd, &t.k, t.why, sizeof t.why);
    else
        rc = pg_conn_get(pc,
                      deadline_ns < 0 ? dl_deadline_in(pc->connect_timeout_ms)
                                      : t.until,
                      t.cancel_fd, &t.k, t.why, sizeof t.why);
    if (rc)
        return dl_connect_err(l, deadline_ns, rc, t.why, pc->redacted);
    t.reused = t.k->reused;
    snprintf(t.key, sizeof t.key, "%" PRId64, pl->key);
    if (deadline_ns != 0) {
        int ms = deadline_ns < 0 ? 0 : dl_ms_left(deadline_ns);
        if (deadline_ns > 0 && ms == 0)
            ms = 1;
        snprintf(t.timeout, sizeof t.timeout, "%d", ms);
    }
    rc = g->send(l, &t);
    if (!t.k)
        return rc; /* (said, and its session closed) */
    pg_conn *k = t.k;
    PGresult *r = t.r;
    /* (only a grant needs the names: the mode's took reads them) */
    if (rc || *pg_sqlstate(r)) {
        pg_lib.clear(t.names);
        pg_lib.clear(t.quiet);
        t.names = t.quiet = NULL;
    }
    bool ended = rc == DLOCK_EUNREACHABLE || (!rc && pg_state_session_ended(pg_sqlstate(r)));
    /* A pooled session that died idle (the server's goodbye read as the
     * answer, or none): again on another. */
    if (t.reused && (rc == DLOCK_EUNREACHABLE || (ended && deadline_ns == 0))) {
        pg_lib.clear(r);
        pg_conn_close(k);
        goto again;
    }
    /* The session ended under a waiter: it waits on, on a new one. */
    if (ended && deadline_ns != 0 && pg_time_left(deadline_ns)) {
        pg_lib.clear(r);
        pg_conn_close(k);
        retry_until = pg_retry_until_of(pc, l, deadline_ns);
        goto again;
    }
    if (rc == DLOCK_ETIMEDOUT || rc == DLOCK_ECANCELED) {
        pg_conn_abandon(pc, k, pg_op_until(pc, l));
        if (rc == DLOCK_ECANCELED)
            return dl_lock_err(l, rc, "lock \"%s\": canceled", l->name);
        return dl_lock_err(l, deadline_ns == 0 ? DLOCK_EUNREACHABLE : DLOCK_ETIMEDOUT,
                           "lock \"%s\": the server did not answer in time (%s)", l->name,
                           pc->redacted);
    }
    if (rc) {
        pg_conn_close(k);
        return dl_lock_err(l, rc, "lock \"%s\": %s (%s)", l->name, t.why, pc->redacted);
    }
    char st[8]; /* the result is cleared before the code is looked at */
    snprintf(st, sizeof st, "%s", pg_sqlstate(r));
    if (*st) {
        pg_one_line(pg_lib.resultErrorMessage(r), line, sizeof line);
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
        if (strcmp(st, "23505") == 0 && g->unique_violation)
            return g->unique_violation(l);
        return dl_lock_err(l, pg_code_of_state(st), "lock \"%s\": %s (%s)", l->name, line,
                           pc->redacted);
    }
    rc = g->took(l, &t);
    if (rc)
        return rc;
    pl->conn = k;
    rc = pg_watch_conn(l, k, t.why, sizeof t.why);
    if (rc) {
        pl->conn = NULL;
        pg_conn_close(k);
        return dl_lock_err(l, rc, "lock \"%s\": %s", l->name, t.why);
    }
    return 0;
}

int pg_session_release(dlock_lock *l, const char *sql, int n, bool says_held, const char *then)
{
    pgclient *pc = pc_of(l->c);
    pglock *pl = l->bstate;
    pg_conn *k = pg_unwatch_conn(l);
    pl->conn = NULL;
    int rc = dl_session_usable(l, k ? &k->sess : NULL);
    if (rc) {
        if (k)
            pg_conn_close(k);
        return rc;
    }
    char key[24], tok[24], why[300];
    snprintf(key, sizeof key, "%" PRId64, pl->key);
    snprintf(tok, sizeof tok, "%" PRIu64, (uint64_t)atomic_load(&l->token));
    const char *p[] = {key, tok};
    int64_t until = dl_deadline_in(dl_op_timeout_ms(l, pc->op_timeout_ms));
    PGresult *r;
    rc = pg_run_fixed(k, sql, n, p, until, -1, &r, why, sizeof why);
    if (rc) {
        /* Closing the session lets go of the lock as soon as the server
         * sees it closed. */
        pg_conn_close(k);
        return dl_lock_err(l, rc == DLOCK_EUNREACHABLE ? DLOCK_ELOST : DLOCK_EUNREACHABLE,
                           "lock \"%s\": releasing: %s; its session was closed, which lets "
                           "go of it (%s)",
                           l->name, why, pc->redacted);
    }
    bool was_held = !*pg_sqlstate(r) && (!says_held || (pg_lib.ntuples(r) == 1 &&
                                                        strcmp(pg_lib.getvalue(r, 0, 0), "t") == 0));
    pg_lib.clear(r);
    if (was_held && then) { /* (sent, not waited for) */
        const char *dp[] = {l->name, l->owner};
        (void)pg_stmt_send(k, then, 2, dp, until, -1, why, sizeof why);
    }
    if (!was_held) {
        pg_conn_close(k);
        return dl_lock_err(l, DLOCK_ELOST, "lock \"%s\": its session no longer held it",
                           l->name);
    }
    pg_conn_put(pc, k);
    return 0;
}

/* A session mode's lock that is lost: its session closed. */
void pg_session_abandon(dlock_lock *l)
{
    pglock *pl = l->bstate;
    pg_conn *k = pg_unwatch_conn(l);
    pl->conn = NULL;
    pg_conn_close(k); /* the session's end lets go of its locks */
}

/* A lowercase SQL identifier, [a-z_][a-z0-9_]*, at most PG_IDENT_MAX bytes. */
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

/* ---- modes ------------------------------------------------------------------------ */

/* The modes, the first the default: each one's operations and what its
 * clients offer (see pg_mode). */
static const pg_mode pg_modes[] = {
    {"advisory", "dlock", PG_CAPS_ADVISORY, false, true, &pg_advisory_ops,
     pg_advisory_build_sql, pg_advisory_tables},
    {"lease", "dlock_lease", PG_CAPS_LEASE, true, false, &pg_lease_ops, pg_lease_build_sql,
     pg_lease_tables},
    {"rowlock", "dlock_row", PG_CAPS_ROWLOCK, false, true, &pg_rowlock_ops,
     pg_rowlock_build_sql, pg_rowlock_tables},
};

/* The mode called name, NULL if none. */
static const pg_mode *mode_named(const char *name)
{
    for (size_t i = 0; i < sizeof pg_modes / sizeof pg_modes[0]; i++)
        if (strcmp(name, pg_modes[i].name) == 0)
            return &pg_modes[i];
    return NULL;
}

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

/*
 * The names table's change counter. The read of a name's rows after each
 * grant is a statement on the hand-over path (a tenth of an advisory
 * hand-over, measured against a bare pg_advisory_lock): an advisory handle
 * leaves it out when no row can have changed since its last read.
 * - dlock_names_changes, a sequence, counts every write of the names table:
 *   a statement trigger (dlock_names_announce, on INSERT, DELETE and
 *   TRUNCATE, whoever writes, clients of older versions too) advances it,
 *   having taken NAMES_QUIET_KEY shared, a lock its transaction holds until
 *   the write commits.
 * - Each advisory grant reads the counter once the lock is its
 *   (pg_sequence_last_value: the live value, not a snapshot's).
 * - A handle's full read is made after the grant's counter and after a try
 *   of NAMES_QUIET_KEY exclusive: when the try succeeds, every write counted
 *   before has committed, and the read sees it. If that read found only
 *   the handle's own row, the handle keeps the counter it had (with the
 *   token's epoch: a crash may take the sequence back, and starts a new
 *   epoch). A later grant that finds the same counter in the same epoch
 *   reads nothing.
 * Safe: a client of another mode that holds the name while such a grant
 * does looked for holders before that grant (it would have seen it: both
 * sides hold or write first and look after), so its row was written before
 * too. It was not in the full read (that found only ours), so its write was
 * counted after that read's counter, before the grant: the counter moved.
 * The objects are made with the names table, or later by a role that owns
 * it; where they are missing, every grant reads the names, as before.
 */
static void names_announce(dlock_client *c)
{
    pgclient *pc = pc_of(c);
    char schema[PG_IDENT_MAX + 4] = ""; /* "s". or nothing, as pc->names has it */
    snprintf(schema, sizeof schema, "%.*s", (int)(strlen(pc->names) - strlen("\"dlock_names\"")),
             pc->names);
    char why[300];
    /* (the trigger's function names the sequence by oid: it runs with
     * search_path pg_catalog only, being SECURITY DEFINER so that roles
     * granted only the tables can still write them) */
    char *ddl = dl_fmt_alloc(
        "DO $dlock$ BEGIN "
        "PERFORM pg_advisory_xact_lock(" NAMES_QUIET_KEY("'%s'::regclass") "); "
        "IF to_regclass('%s') IS NULL THEN "
        "CREATE SEQUENCE %s; GRANT SELECT ON SEQUENCE %s TO PUBLIC; PERFORM nextval('%s'); "
        "END IF; "
        "IF to_regprocedure('%sdlock_names_announce()') IS NULL THEN "
        "EXECUTE format('CREATE FUNCTION %sdlock_names_announce() RETURNS trigger "
        "LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS "
        "$fn$ BEGIN PERFORM pg_advisory_xact_lock_shared(" NAMES_QUIET_KEY("TG_RELID") "); "
        "PERFORM nextval(%%s::regclass); RETURN NULL; END $fn$', "
        "to_regclass('%s')::oid); "
        "END IF; "
        "IF NOT EXISTS (SELECT 1 FROM pg_trigger WHERE tgrelid = '%s'::regclass AND "
        "tgname = 'dlock_names_announce') THEN "
        "CREATE TRIGGER dlock_names_announce AFTER INSERT OR DELETE OR TRUNCATE ON %s "
        "FOR EACH STATEMENT EXECUTE PROCEDURE %sdlock_names_announce(); "
        "END IF; "
        /* (made by someone else: usable only if readable and enabled) */
        "IF NOT has_sequence_privilege('%s', 'SELECT') OR NOT EXISTS (SELECT 1 FROM "
        "pg_trigger WHERE tgrelid = '%s'::regclass AND tgname = 'dlock_names_announce' AND "
        "tgenabled <> 'D') THEN RAISE EXCEPTION 'the names change counter is not usable'; "
        "END IF; END $dlock$",
        pc->names, pc->names_changes, pc->names_changes, pc->names_changes,
        pc->names_changes, schema, schema, pc->names_changes, pc->names, pc->names, schema,
        pc->names_changes, pc->names);
    PGresult *r = NULL;
    /* (not made: a role that may not; the names are read at every grant) */
    if (ddl && pg_pool_run(c, ddl, 0, NULL, &r, why, sizeof why) == 0)
        pc->names_changes_param = pc->names_changes;
    pg_lib.clear(r);
    free(ddl);
}

static int names_build_sql(pgclient *pc)
{
    pc->sql_names_get = dl_fmt_alloc("SELECT mode, tbl FROM %s WHERE name = $1", pc->names);
    pc->sql_names_add = dl_fmt_alloc(
        "INSERT INTO %s (name, mode, tbl) VALUES ($1, $2, $3) ON CONFLICT DO NOTHING",
        pc->names);
    pc->sql_names_drop =
        dl_fmt_alloc("DELETE FROM %s WHERE name = $1 AND mode = $2 AND tbl = $3", pc->names);
    pc->sql_names_quiet =
        strdup("SELECT pg_try_advisory_xact_lock(" NAMES_QUIET_KEY("to_regclass($1)") ")");
    return pc->sql_names_get && pc->sql_names_add && pc->sql_names_drop && pc->sql_names_quiet
               ? 0
               : DLOCK_ENOMEM;
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
    const pg_mode *m = mode_named(mode);
    if (!m) {
        snprintf(why, wlen, "the names table %s names no mode: %.40s", pc->names, mode);
        return DLOCK_EPROTO;
    }
    if (m->keyed) {
        /* an advisory holder's key, a rowlock holder's queue key: both in pg_locks */
        snprintf(key, sizeof key, "%" PRId64, key_of_table(tbl, l->name));
        p[0] = key;
        snprintf(sql, sizeof sql,
                 "SELECT count(*) FROM pg_locks l WHERE " PG_LOCKS_OF("$1::bigint")
                 " AND l.granted");
    } else {
        if (!quoted_table_ok(tbl)) {
            snprintf(why, wlen, "the names table %s names no lock table: %.80s", pc->names, tbl);
            return DLOCK_EPROTO;
        }
        snprintf(sql, sizeof sql,
                 "SELECT count(*) FROM %s WHERE name = $1 AND " LEASE_HELD, tbl);
    }
    PGresult *r;
    int rc = pg_pool_run_until(l->c, pg_call_until(l), sql, 1, p, &r, why, wlen);
    if (rc)
        return rc;
    int held = atol(pg_lib.getvalue(r, 0, 0)) > 0;
    pg_lib.clear(r);
    return held;
}

/* After l was granted: whether it may keep it (0), or DLOCK_ECONFLICT when the
 * name is held in another mode (why says which), or an error. got: the
 * name's rows in the names table, read after the grant, its mode and table
 * in columns col and col + 1 (rows with no mode skipped); NULL: read here.
 * *alone (if not NULL): got had our row and no other mode's. */
int pg_names_check(dlock_lock *l, PGresult *got, int col, bool *alone, char *why, size_t wlen)
{
    pgclient *pc = pc_of(l->c);
    pglock *pl = l->bstate;
    int64_t until = pg_op_until(pc, l);
    const char *mine[] = {l->name, pc->mode, pc->table};
    PGresult *r = got, *w;
    int rc;
    pl->named = false;
    if (alone)
        *alone = false;
    if (!r) {
        if ((rc = pg_pool_run_until(l->c, until, pc->sql_names_get, 1, mine, &r, why, wlen)))
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
        rc = pg_pool_run_until(l->c, until, pc->sql_names_add, 3, mine, &w, why, wlen);
        pg_lib.clear(w);
        if (rc)
            return rc;
        others = true;
    }
    if (!others) {
        pl->named = true;
        if (alone)
            *alone = got != NULL;
        return 0;
    }
    /* Our row is in: now the other modes' rows, as they are now. */
    if ((rc = pg_pool_run_until(l->c, until, pc->sql_names_get, 1, mine, &r, why, wlen)))
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
            rc = pg_pool_run_until(l->c, until, pc->sql_names_drop, 3, drop, &w, why, wlen);
            pg_lib.clear(w);
        } else {
            rc = held;
        }
    }
    pg_lib.clear(r);
    pl->named = rc == 0;
    return rc;
}

int pg_list(dlock_client *c, const char *prefix, dlock_list_fn fn, void *arg)
{
    pgclient *pc = pc_of(c);
    char pat[2 * DL_NAME_MAX + 2], sql[300], why[300];
    dl_like_prefix(prefix, pat, sizeof pat);
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

void pg_holder_into(const PGresult *r, int col, dlock_info *info)
{
    const char *h = pg_lib.getvalue(r, 0, col);
    const char *sp = strchr(h, ' ');
    snprintf(info->holder, sizeof info->holder, "%s", sp ? sp + 1 : h);
}

int pg_value_by(dlock_client *c, const char *name, const char *sql, int n, char *buf,
                size_t len)
{
    pgclient *pc = pc_of(c);
    char key[24], why[300];
    snprintf(key, sizeof key, "%" PRId64, pg_key_of(pc, name));
    const char *p[] = {name, key};
    PGresult *r;
    int rc = pg_pool_run(c, sql, n, p, &r, why, sizeof why);
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

int pg_break_by(dlock_client *c, const char *name, dlock_info *broken, const char *sql,
                const char *param)
{
    pgclient *pc = pc_of(c);
    int rc = c->ops->inspect(c, name, broken);
    if (dl_nothing_to_break(rc, broken))
        return rc;
    char why[300];
    const char *p[] = {param};
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

/* ---- clients --------------------------------------------------------------------- */

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
    for (size_t i = 0; i < sizeof pc->sql_bare / sizeof pc->sql_bare[0][0]; i++)
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
    free(pc->sql_row_try);
    free(pc->sql_row_wait);
    free(pc->sql_row_unvalue);
    free(pc->sql_refresh);
    free(pc->sql_dequeue);
    free(pc->sql_give_up);
    free(pc->sql_names_get);
    free(pc->sql_names_add);
    free(pc->sql_names_drop);
    free(pc->sql_names_quiet);
    dl_pool_fini(&pc->pool);
    free(pc);
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
    PGresult *r;
    const char *np[] = {pc->names, pc->runs, pc->epochs, pc->names_changes};
    /* the tables; the names' change counter, readable, and its trigger;
     * whether this role owns the names table (see names_announce) */
    int nrc = pg_pool_run(c,
                       "SELECT to_regclass($1) IS NOT NULL AND to_regclass($2) IS NOT NULL AND "
                       "to_regclass($3) IS NOT NULL, coalesce(has_sequence_privilege("
                       "to_regclass($4)::oid, 'SELECT') AND EXISTS (SELECT 1 FROM pg_trigger "
                       "WHERE tgrelid = to_regclass($1) AND tgname = 'dlock_names_announce' AND "
                       "tgenabled <> 'D'), false), coalesce((SELECT pg_has_role(relowner, "
                       "'USAGE') FROM pg_class WHERE oid = to_regclass($1)), false)",
                       4, np, &r, why, wlen);
    if (nrc)
        return nrc;
    bool names = strcmp(pg_lib.getvalue(r, 0, 0), "t") == 0;
    bool counted = strcmp(pg_lib.getvalue(r, 0, 1), "t") == 0;
    bool owner = strcmp(pg_lib.getvalue(r, 0, 2), "t") == 0;
    pg_lib.clear(r);
    pc->names_changes_param = counted ? pc->names_changes : NULL;
    if (!names) {
        char ddl[300];
        snprintf(ddl, sizeof ddl,
                 "CREATE TABLE IF NOT EXISTS %s (name text NOT NULL, mode text NOT NULL, "
                 "tbl text NOT NULL, PRIMARY KEY (name, mode, tbl))",
                 pc->names);
        nrc = pg_pool_run(c, ddl, 0, NULL, &r, why, wlen);
        pg_lib.clear(r);
        if (nrc == 0) { /* the token epochs: see pg_token_ctes */
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
        owner = true;
    }
    if (!counted && owner)
        names_announce(c);
    return pc->m->tables(c, why, wlen);
}

int pg_tables_ensure(dlock_client *c, const char *kind, const char *table, const char *check,
                     int n, const char *const *p, const char *const *ddl, size_t nddl, char *why,
                     size_t wlen)
{
    PGresult *r;
    int rc = pg_pool_run(c, check, n, p, &r, why, wlen);
    if (rc)
        return rc;
    bool exists = strcmp(pg_lib.getvalue(r, 0, 0), "t") == 0;
    pg_lib.clear(r);
    if (exists)
        return 0;
    for (size_t i = 0; i < nddl && rc == 0; i++) {
        rc = pg_pool_run(c, ddl[i], 0, NULL, &r, why, wlen);
        pg_lib.clear(r);
    }
    if (rc == 0)
        return 0;
    if (rc == DLOCK_EPERM) {
        char detail[200];
        snprintf(detail, sizeof detail, "%.199s", why);
        snprintf(why, wlen,
                 "the %s table %s does not exist and this role may not create it (%s): "
                 "create it as its owner (see docs/postgres.md) or grant CREATE",
                 kind, table, detail);
    }
    return rc;
}

int pg_ensure_retry(dlock_client *c, int (*once)(dlock_client *c, char *why, size_t wlen),
                    char *why, size_t wlen)
{
    int rc = 0;
    for (int i = 0; i < 5; i++) {
        rc = once(c, why, wlen);
        /* a server that did not answer in time would not the next time either */
        if (rc == 0 || rc == DLOCK_EPERM || rc == DLOCK_EUNREACHABLE || rc == DLOCK_ENOMEM ||
            rc == DLOCK_ETIMEDOUT)
            break;
        struct timespec pause = {0, 20 * 1000000};
        nanosleep(&pause, NULL);
    }
    return rc;
}

int pg_client_open(dlock_client *c, const dl_url *u)
{
    pthread_once(&pq_once, pq_load);
    if (pq_error[0])
        return dl_client_err(c, DLOCK_ENOTSUP, "%s", pq_error);
    const char *mode = dl_url_param(u, "mode");
    const pg_mode *m = mode ? mode_named(mode) : &pg_modes[0];
    if (!m)
        return dl_client_err(c, DLOCK_EURL,
                             "%s: mode must be advisory, lease or rowlock, not \"%s\"",
                             u->redacted, mode);
    const char *pooler = dl_url_param(u, "pooler");
    bool txpool = pooler && strcmp(pooler, "transaction") == 0;
    if (pooler && !txpool && strcmp(pooler, "session") != 0 && strcmp(pooler, "none") != 0)
        return dl_client_err(c, DLOCK_EURL,
                             "%s: pooler must be transaction, session or none, not \"%s\"",
                             u->redacted, pooler);
    if (txpool && !m->txpool_ok)
        return dl_client_err(c, DLOCK_EURL,
                             "%s: mode=%s holds its lock in a server session, which a "
                             "transaction-mode pooler hands to other clients between "
                             "statements: use mode=lease behind it, or connect to PostgreSQL "
                             "or a session-mode pooler",
                             u->redacted, m->name);
    const char *table = dl_url_param(u, "table"), *schema = dl_url_param(u, "schema");
    if (!table)
        table = m->table;
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
    pc->m = m;
    pc->txpool = txpool;
    pc->mode = m->name;
    if (schema) {
        snprintf(pc->table, sizeof pc->table, "\"%s\".\"%s\"", schema, table);
        snprintf(pc->seq, sizeof pc->seq, "\"%s\".\"%s_token\"", schema, table);
        snprintf(pc->waiters, sizeof pc->waiters, "\"%s\".\"%s_wait\"", schema, table);
        snprintf(pc->values, sizeof pc->values, "\"%s\".\"%s_holder\"", schema, table);
        snprintf(pc->names, sizeof pc->names, "\"%s\".\"dlock_names\"", schema);
        snprintf(pc->names_changes, sizeof pc->names_changes, "\"%s\".\"dlock_names_changes\"",
                 schema);
        snprintf(pc->claims, sizeof pc->claims, "\"%s\".\"dlock_claims\"", schema);
        snprintf(pc->runs, sizeof pc->runs, "\"%s\".\"dlock_token_run\"", schema);
        snprintf(pc->epochs, sizeof pc->epochs, "\"%s\".\"dlock_token_epoch\"", schema);
    } else {
        snprintf(pc->table, sizeof pc->table, "\"%s\"", table);
        snprintf(pc->seq, sizeof pc->seq, "\"%s_token\"", table);
        snprintf(pc->waiters, sizeof pc->waiters, "\"%s_wait\"", table);
        snprintf(pc->values, sizeof pc->values, "\"%s_holder\"", table);
        snprintf(pc->names, sizeof pc->names, "\"dlock_names\"");
        snprintf(pc->names_changes, sizeof pc->names_changes, "\"dlock_names_changes\"");
        snprintf(pc->claims, sizeof pc->claims, "\"dlock_claims\"");
        snprintf(pc->runs, sizeof pc->runs, "\"dlock_token_run\"");
        snprintf(pc->epochs, sizeof pc->epochs, "\"dlock_token_epoch\"");
    }
    char why[600];
    int rc = build_params(pc, u, why, sizeof why);
    if (!rc)
        rc = m->build_sql(pc) || names_build_sql(pc)
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
    rc = pg_ensure_retry(c, ensure_table_once, why, sizeof why);
    if (rc) {
        pg_client_close(c);
        return dl_client_err(c, rc, "%s: %s", u->redacted, why);
    }
    /* The mode's operations and capabilities are the client's from now
     * on (advisory, rowlock: liveness is the session, nothing to renew;
     * lease: rows renewed by the core through its renew). */
    c->ops = m->ops;
    c->caps = m->caps;
    return 0;
}

void pg_client_close(dlock_client *c)
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

/* What a client has until its mode is known: client_open puts its mode's
 * operations in their place (pg_modes). */
static const dl_backend_ops pg_open_ops = {
    .client_open = pg_client_open,
    .client_close = pg_client_close,
};
#define PG_OPS .ops = &pg_open_ops
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
