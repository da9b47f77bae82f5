/* SPDX-License-Identifier: MIT */
/*
 * mysql_min.c — one worker of bench/peers/peer_bench.py ("mysql-c" and
 * "mysql-c-prep"): a bare GET_LOCK(name, 3600) / RELEASE_LOCK(name) loop
 * from the MariaDB connector's blocking calls on one connection, as
 * pymysql's peer runs it, with nothing of a lock client around it: the
 * floor a GET_LOCK hand-over costs from C. "text" sends the statements as
 * text (COM_QUERY, as pymysql); "prep" prepares them once and executes
 * them (COM_STMT_EXECUTE, as dlock's mysql backend), so that a gap between
 * dlock and pymysql can be told from the protocol's.
 *
 * Worker protocol: see worker.h.
 *
 *   mysql_min HOST PORT USER PASSWORD DB LOCK_NAME HOLD_US text|prep
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

/* One statement of one parameter (the name) answering one integer. */
typedef struct {
    MYSQL *db;
    MYSQL_STMT *st; /* prep */
    char text[800]; /* text: the statement with the name quoted in */
} call;

static void call_init(call *c, MYSQL *db, bool prep, const char *fmt, const char *name,
                      const char *quoted)
{
    c->db = db;
    c->st = NULL;
    snprintf(c->text, sizeof c->text, fmt, quoted);
    if (!prep)
        return;
    char sql[100];
    snprintf(sql, sizeof sql, fmt, "?");
    c->st = mysql_stmt_init(db);
    if (!c->st || mysql_stmt_prepare(c->st, sql, strlen(sql)))
        die("prepare", mysql_error(db));
    static unsigned long len;
    len = strlen(name);
    MYSQL_BIND b = {.buffer_type = MYSQL_TYPE_STRING, .buffer = (void *)name,
                    .buffer_length = len, .length = &len};
    if (mysql_stmt_bind_param(c->st, &b))
        die("bind", mysql_stmt_error(c->st));
}

static long long call_run(call *c)
{
    long long v = -1;
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
    if (argc != 9 || (strcmp(argv[8], "text") != 0 && strcmp(argv[8], "prep") != 0)) {
        fprintf(stderr, "usage: mysql_min HOST PORT USER PASSWORD DB LOCK_NAME HOLD_US text|prep\n");
        return 64;
    }
    bool prep = strcmp(argv[8], "prep") == 0;
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
    call_init(&x.acq, db, prep, "SELECT GET_LOCK(%s, 3600)", name, quoted);
    call_init(&x.rel, db, prep, "SELECT RELEASE_LOCK(%s)", name, quoted);
    int rc = peer_run(hold_ns, acquire, release, &x);
    if (x.acq.st)
        mysql_stmt_close(x.acq.st);
    if (x.rel.st)
        mysql_stmt_close(x.rel.st);
    mysql_close(db);
    return rc;
}
