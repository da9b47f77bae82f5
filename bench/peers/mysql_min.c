/* SPDX-License-Identifier: MIT */
/*
 * mysql_min.c — one worker of bench/peers/peer_bench.py ("mysql-c" and
 * "mysql-c-prep"): a bare GET_LOCK(name, 3600) / RELEASE_LOCK(name) loop
 * from the MariaDB connector's blocking calls on one connection, as
 * pymysql's peer runs it, with nothing of a lock client around it: the
 * floor a GET_LOCK hand-over costs from C. "text" sends the statements as
 * text (COM_QUERY, as pymysql); "prep" prepares them once and executes
 * them (COM_STMT_EXECUTE, as dlock's mysql backend), so that a gap between
 * dlock and pymysql can be told from the protocol's. "take:PROC" takes the
 * lock as a dlock waiter does, by a prepared CALL of dlock's take procedure
 * PROC (GET_LOCK, then the token's draw, in one round trip; a dlock client
 * makes it on first use), so that the server's part of a dlock hand-over can
 * be told from its client's.
 *
 * Worker protocol: see worker.h.
 *
 *   mysql_min HOST PORT USER PASSWORD DB LOCK_NAME HOLD_US text|prep|take:PROC
 */
#include <inttypes.h>
#include <mysql.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "worker.h"

static void die(const char *what, const char *err)
{
    fprintf(stderr, "error: %s: %s\n", what, err);
    exit(1);
}

/* One statement of one parameter (the name) answering one integer; or
 * (call) a CALL of a take procedure of two (the name as key and name). */
typedef struct {
    MYSQL *db;
    MYSQL_STMT *st; /* prep */
    bool call;
    char text[800]; /* text: the statement with the name quoted in */
} call;

static void call_init(call *c, MYSQL *db, bool prep, const char *fmt, const char *name,
                      const char *quoted)
{
    c->db = db;
    c->st = NULL;
    c->call = strncmp(fmt, "CALL", 4) == 0;
    /* (a take's CALL has the name twice; the others once: the second unused) */
    snprintf(c->text, sizeof c->text, fmt, quoted, quoted);
    if (!prep)
        return;
    char sql[200];
    snprintf(sql, sizeof sql, fmt, "?", "?");
    c->st = mysql_stmt_init(db);
    if (!c->st || mysql_stmt_prepare(c->st, sql, strlen(sql)))
        die("prepare", c->st ? mysql_stmt_error(c->st) : mysql_error(db));
    static unsigned long len;
    len = strlen(name);
    MYSQL_BIND b[2] = {{.buffer_type = MYSQL_TYPE_STRING, .buffer = (void *)name,
                        .buffer_length = len, .length = &len}};
    b[1] = b[0];
    if (mysql_stmt_bind_param(c->st, b))
        die("bind", mysql_stmt_error(c->st));
}

/* A take procedure's CALL: its answer (GET_LOCK's, then the draw's rows
 * and token), and the CALL's own status after it. GET_LOCK's answer, -1
 * when the draw did not come with the grant. */
static long long call_take(call *c)
{
    long long v[3];
    my_bool null[3] = {0};
    MYSQL_BIND r[3];
    memset(r, 0, sizeof r);
    for (int i = 0; i < 3; i++)
        r[i] = (MYSQL_BIND){.buffer_type = MYSQL_TYPE_LONGLONG, .buffer = &v[i],
                            .is_null = &null[i]};
    if (mysql_stmt_execute(c->st) || mysql_stmt_bind_result(c->st, r) ||
        mysql_stmt_fetch(c->st) || mysql_stmt_free_result(c->st))
        die("CALL", mysql_stmt_error(c->st));
    int more;
    while ((more = mysql_stmt_next_result(c->st)) == 0)
        (void)mysql_stmt_free_result(c->st);
    if (more > 0)
        die("CALL", mysql_stmt_error(c->st));
    return null[0] || null[1] || null[2] ? -1 : v[0];
}

static long long call_run(call *c)
{
    long long v = -1;
    if (c->call)
        return call_take(c);
    if (c->st) {
        my_bool null = 0;
        MYSQL_BIND r = {.buffer_type = MYSQL_TYPE_LONGLONG, .buffer = &v, .is_null = &null};
        if (mysql_stmt_execute(c->st) || mysql_stmt_bind_result(c->st, &r) ||
            mysql_stmt_fetch(c->st) || mysql_stmt_free_result(c->st))
            die("execute", mysql_stmt_error(c->st));
        return null ? -1 : v;
    }
    if (mysql_query(c->db, c->text))
        die("query", mysql_error(c->db));
    MYSQL_RES *res = mysql_store_result(c->db);
    MYSQL_ROW row = res ? mysql_fetch_row(res) : NULL;
    if (row && row[0])
        v = strtoll(row[0], NULL, 10);
    mysql_free_result(res);
    return v;
}

/* The two statements of a section. */
typedef struct {
    call acq, rel;
} lock_ctx;

static void acquire(void *arg)
{
    if (call_run(&((lock_ctx *)arg)->acq) != 1)
        die("GET_LOCK", "did not grant the lock");
}

static void release(void *arg)
{
    if (call_run(&((lock_ctx *)arg)->rel) != 1)
        die("RELEASE_LOCK", "the lock was not held");
}

int main(int argc, char **argv)
{
    const char *proc = argc == 9 && strncmp(argv[8], "take:", 5) == 0 ? argv[8] + 5 : NULL;
    if (argc != 9 || (strcmp(argv[8], "text") != 0 && strcmp(argv[8], "prep") != 0 &&
                      !(proc && *proc && strspn(proc, "abcdefghijklmnopqrstuvwxyz0123456789_") ==
                                             strlen(proc) && strlen(proc) < 64))) {
        fprintf(stderr, "usage: mysql_min HOST PORT USER PASSWORD DB LOCK_NAME HOLD_US "
                        "text|prep|take:PROC\n");
        return 64;
    }
    bool prep = strcmp(argv[8], "prep") == 0 || proc;
    int64_t hold_ns = strtoll(argv[7], NULL, 10) * 1000;
    MYSQL *db = mysql_init(NULL);
    if (!db || !mysql_real_connect(db, argv[1], argv[3], argv[4], argv[5], (unsigned)atoi(argv[2]),
                                   NULL, 0))
        die("connect", db ? mysql_error(db) : "out of memory");
    const char *name = argv[6];
    char esc[400], quoted[420];
    mysql_real_escape_string(db, esc, name, (unsigned long)strnlen(name, 190));
    snprintf(quoted, sizeof quoted, "'%s'", esc);
    lock_ctx x;
    char take[120];
    if (proc) /* (%%s: the name, as the procedure's key and name) */
        snprintf(take, sizeof take, "CALL `%s`(%%s, %%s, 3600, 'mysql_min')", proc);
    call_init(&x.acq, db, prep, proc ? take : "SELECT GET_LOCK(%s, 3600)", name, quoted);
    call_init(&x.rel, db, prep, "SELECT RELEASE_LOCK(%s)", name, quoted);
    int rc = peer_run(hold_ns, acquire, release, &x);
    if (x.acq.st)
        mysql_stmt_close(x.acq.st);
    if (x.rel.st)
        mysql_stmt_close(x.rel.st);
    mysql_close(db);
    return rc;
}
