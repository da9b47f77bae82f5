/* SPDX-License-Identifier: MIT */
/*
 * test_zk.c — the ZooKeeper backend's own behaviour against a real server
 * started by tests/servers.sh (DLOCK_TEST_ZK=zk://127.0.0.1:P?session=2000&op_timeout_ms=5000,
 * the server's pid in DLOCK_TEST_SERVERS/zk.pid). The lock contract itself
 * is tests/test_conformance.c's; what is here needs ZooKeeper: sessions
 * that expire, nodes left behind (or not) by waiters that gave up, a
 * create whose reply is lost, a member that stops answering (only with the
 * ensemble of DLOCK_TEST_ZK3, from check_zk_test.sh), one watch per waiter
 * (no herd),
 * digest ACLs, a server that is not ZooKeeper, election, chroot. (A
 * break while a waiter waits is the conformance suite's
 * break_hands_to_waiter.)
 * The test reads the server's own account through four-letter words on
 * the client port: `wchp` (watches by path) and `dump` (ephemeral nodes by
 * session).
 */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <cmocka.h>

#include <arpa/inet.h>
#include <dirent.h>
#include <errno.h>
#include <inttypes.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#if defined(__has_include)
#if __has_include(<valgrind/valgrind.h>)
#include <valgrind/valgrind.h>
#endif
#endif
#ifndef RUNNING_ON_VALGRIND
#define RUNNING_ON_VALGRIND 0
#endif

#include "dlock.h"
#include "dlock_debug.h"
#include "testutil.h"

static const char *zk_url; /* zk://127.0.0.1:P?session=2000&op_timeout_ms=5000 */
static int zk_port;

/* zk://[CRED@]127.0.0.1:P[PATH]?session=2000 */
static void url_with(char *buf, size_t len, const char *cred, const char *path)
{
    int n = snprintf(buf, len, "zk://%s%s127.0.0.1:%d%s?session=2000", cred ? cred : "",
                     cred ? "@" : "", zk_port, path ? path : "");
    assert_true(n > 0 && (size_t)n < len);
}

/* ---- the server's own account --------------------------------------------------- */

/* A four-letter word's answer from the server on port (malloc'd,
 * NUL-terminated). */
static char *zk_ask_port(int port, const char *word)
{
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    assert_true(fd >= 0);
    struct timeval tv = {.tv_sec = 5};
    assert_int_equal(setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv), 0);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port),
                            .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    assert_int_equal(connect(fd, (struct sockaddr *)&a, sizeof a), 0);
    assert_int_equal(send(fd, word, strlen(word), MSG_NOSIGNAL), (ssize_t)strlen(word));
    size_t cap = 1 << 16, len = 0;
    char *buf = malloc(cap);
    assert_non_null(buf);
    for (;;) {
        if (cap - len < 4096) {
            cap *= 2;
            char *nb = realloc(buf, cap);
            assert_non_null(nb);
            buf = nb;
        }
        ssize_t n = recv(fd, buf + len, cap - len - 1, 0);
        if (n < 0)
            fail_msg("four-letter word %s: %s", word, strerror(errno));
        if (n == 0)
            break;
        len += (size_t)n;
    }
    buf[len] = '\0';
    close(fd);
    return buf;
}

static char *zk_ask(const char *word)
{
    return zk_ask_port(zk_port, word);
}

/* The paths of the ephemeral nodes (`dump`) that start with prefix. */
static int ephemerals_under(const char *prefix)
{
    char *d = zk_ask("dump");
    char *sec = strstr(d, "Sessions with Ephemerals");
    assert_non_null(sec);
    char *end = strstr(sec, "Connections dump");
    int n = 0;
    size_t plen = strlen(prefix);
    for (char *line = sec; line && (!end || line < end); line = strchr(line, '\n')) {
        line++; /* past the newline (or the section title's first byte) */
        if (*line == '\t' && strncmp(line + 1, prefix, plen) == 0)
            n++;
    }
    free(d);
    return n;
}

static void parent_path(char *buf, size_t len, const char *root, const char *name)
{
    int n = snprintf(buf, len, "%s/dlock/%s/", root, name);
    assert_true(n > 0 && (size_t)n < len);
}

/* ---- the server process ------------------------------------------------------------ */

static pid_t server_pid(void)
{
    char path[512];
    snprintf(path, sizeof path, "%s/zk.pid", getenv("DLOCK_TEST_SERVERS"));
    FILE *f = fopen(path, "r");
    assert_non_null(f);
    long pid = 0;
    int got = fscanf(f, "%ld", &pid);
    fclose(f);
    assert_int_equal(got, 1);
    assert_true(pid > 1);
    return (pid_t)pid;
}

static pid_t stopped_server; /* SIGCONT'd by the teardown whatever happens */
static pid_t stopped_second; /* the same, a second member of an ensemble */

/* SIGSTOP pid and wait until every thread of it is stopped: kill returns
 * before that, and a loaded machine has been seen to let a stopped JVM
 * answer a request sent just after (the test then saw no stop at all). */
static void stop_process(pid_t pid)
{
    stopped_server = pid;
    assert_int_equal(kill(pid, SIGSTOP), 0);
    char dir[64];
    snprintf(dir, sizeof dir, "/proc/%d/task", (int)pid);
    for (int64_t end = now_ms() + 5000;; sleep_ms(2)) {
        DIR *d = opendir(dir);
        assert_non_null(d);
        bool all = true;
        for (struct dirent *e; all && (e = readdir(d));) {
            if (e->d_name[0] == '.')
                continue;
            char path[sizeof dir + 300], buf[512];
            snprintf(path, sizeof path, "%s/%s/stat", dir, e->d_name);
            FILE *f = fopen(path, "r");
            size_t n = f ? fread(buf, 1, sizeof buf - 1, f) : 0;
            if (f)
                fclose(f);
            buf[n] = '\0';
            const char *st = strrchr(buf, ')'); /* "pid (comm) S ..." */
            all = !st || st[1] != ' ' || st[2] == 'T' || st[2] == 't';
        }
        closedir(d);
        if (all)
            return;
        if (now_ms() > end)
            fail_msg("process %d not stopped 5 s after SIGSTOP", (int)pid);
    }
}

static void server_stop(void)
{
    stop_process(server_pid());
}

static void server_cont(void)
{
    if (stopped_server > 0)
        (void)kill(stopped_server, SIGCONT);
    if (stopped_second > 0)
        (void)kill(stopped_second, SIGCONT);
    stopped_server = stopped_second = 0;
}

static pid_t forked_kid; /* SIGKILL'd by the teardown if the test failed midway */

static int teardown_processes(void **state)
{
    (void)state;
    server_cont();
    if (forked_kid > 0) {
        (void)kill(forked_kid, SIGKILL);
        (void)waitpid(forked_kid, NULL, 0);
        forked_kid = 0;
    }
    return 0;
}

/* ---- 1. a holder whose session expires ----------------------------------------------- */

struct expiry_report {
    int64_t told_ms; /* from SIGCONT to the loss descriptor, -1 never */
    int state;
    int callbacks;
    int release_rc;
};

static void expiry_child(int wfd, const char *name)
{
    dlock_client *c = NULL;
    if (dlock_client_open(&c, zk_url, NULL) != 0) {
        fprintf(stderr, "child: open: %s\n", dlock_client_errmsg(NULL));
        _exit(10);
    }
    dlock_lock_opts o;
    dlock_lock_opts_init(&o);
    o.on_lost = count_lost;
    dlock_lock *l = NULL;
    if (dlock_lock_new(&l, c, name, &o) != 0 || dlock_acquire(l, 0) != 0) {
        fprintf(stderr, "child: %s\n", l ? dlock_lock_errmsg(l) : dlock_client_errmsg(c));
        _exit(11);
    }
    uint64_t token = dlock_token(l);
    if (write(wfd, &token, sizeof token) != (ssize_t)sizeof token)
        _exit(12);
    raise(SIGSTOP); /* the whole process, its client's threads with it */
    struct expiry_report r = {.told_ms = wait_lost(l, 5000)};
    wait_lost_calls(1, 1000);
    r.state = (int)dlock_state(l);
    r.callbacks = atomic_load(&lost_calls);
    r.release_rc = dlock_release(l);
    if (write(wfd, &r, sizeof r) != (ssize_t)sizeof r)
        _exit(13);
    dlock_lock_free(l);
    dlock_client_close(c);
    _exit(0);
}

static void read_full(int fd, void *buf, size_t len, int limit_ms)
{
    size_t got = 0;
    int64_t end = now_ms() + limit_ms;
    while (got < len) {
        struct pollfd p = {.fd = fd, .events = POLLIN};
        int left = (int)(end - now_ms());
        if (left <= 0 || poll(&p, 1, left) != 1)
            fail_msg("no report from the child within %d ms", limit_ms);
        ssize_t n = read(fd, (char *)buf + got, len - got);
        if (n <= 0)
            fail_msg("the child's pipe closed early (read %zd of %zu bytes)", got, len);
        got += (size_t)n;
    }
}

/* A holder stopped past its session: the server expires the session and
 * lets the next client in (higher token); the holder, running again, is
 * told at once — state, descriptor, callback — and its release says ELOST. */
static void test_session_expiry_of_holder(void **state)
{
    (void)state;
    char name[64], prefix[128];
    unique(name, sizeof name, "expiry");
    parent_path(prefix, sizeof prefix, "", name);
    int p[2];
    assert_int_equal(pipe(p), 0);
    pid_t kid = fork();
    assert_true(kid >= 0);
    if (kid == 0) {
        close(p[0]);
        expiry_child(p[1], name);
    }
    forked_kid = kid;
    close(p[1]);
    uint64_t kid_token = 0;
    read_full(p[0], &kid_token, sizeof kid_token, 15000);
    assert_true(kid_token > 0);
    int st = 0;
    assert_int_equal(waitpid(kid, &st, WUNTRACED), kid);
    assert_true(WIFSTOPPED(st));
    int64_t stopped_at = now_ms();

    dlock_client *c = open_url(zk_url);
    dlock_lock *l = mk(c, name, NULL, NULL);
    assert_int_equal(dlock_acquire(l, 0), DLOCK_EBUSY);
    acquire_ok(l, 15000);
    int64_t waited = now_ms() - stopped_at;
    fprintf(stderr, "# the next holder got it %" PRId64 " ms after the holder stopped\n",
            waited);
    assert_true(waited >= 1000); /* not before the 2 s session could expire */
    assert_true(dlock_token(l) > kid_token);
    dlock_info info = inspect(c, name);
    assert_int_equal(info.held, 1);
    assert_int_equal(info.holders, 1);
    assert_int_equal(info.waiters, 0);
    assert_int_equal(info.token, dlock_token(l));
    assert_int_equal(ephemerals_under(prefix), 1); /* the stopped holder's node is gone */

    sleep_ms(4000 - (now_ms() - stopped_at));
    assert_int_equal(kill(kid, SIGCONT), 0);
    struct expiry_report r;
    read_full(p[0], &r, sizeof r, 15000);
    fprintf(stderr, "# the resumed holder was told %" PRId64 " ms after SIGCONT\n", r.told_ms);
    assert_true(r.told_ms >= 0 && r.told_ms <= 2000);
    assert_int_equal(r.state, DLOCK_STATE_LOST);
    assert_int_equal(r.callbacks, 1);
    assert_int_equal(r.release_rc, DLOCK_ELOST);
    assert_int_equal(waitpid(kid, &st, 0), kid);
    forked_kid = 0;
    assert_true(WIFEXITED(st));
    assert_int_equal(WEXITSTATUS(st), 0);
    close(p[0]);

    /* The new holder was never disturbed. */
    assert_int_equal(dlock_state(l), DLOCK_STATE_HELD);
    assert_int_equal(dlock_release(l), 0);
    dlock_lock_free(l);
    dlock_client_close(c);
}

/* A request cut short by the caller's deadline (the server stopped, its
 * reply never comes) is a timeout: DLOCK_ETIMEDOUT about the deadline, not
 * "unreachable" about op_timeout_ms (issue 23). */
static void test_acquire_timeout_is_a_timeout(void **state)
{
    (void)state;
    char name[64];
    unique(name, sizeof name, "tmo");
    dlock_client *c = open_url(zk_url);
    dlock_lock *l = mk(c, name, NULL, NULL);
    server_stop();
    int64_t t0 = now_ms();
    int rc = dlock_acquire(l, 200);
    int64_t took = now_ms() - t0;
    server_cont();
    fprintf(stderr, "# acquire(200) with the server stopped: rc %d after %" PRId64 " ms: %s\n",
            rc, took, dlock_lock_errmsg(l));
    assert_int_equal(rc, DLOCK_ETIMEDOUT);
    assert_null(strstr(dlock_lock_errmsg(l), "op_timeout_ms"));
    assert_true(took < 2000); /* the bound is 200 ms + 100 ms; a loaded machine adds */
    dlock_lock_free(l);
    dlock_client_close(c);
}

/* A lock on name taken and given back (its nodes exist: its next create is
 * the only request of an acquisition), then a fresh reply (the session's
 * clock starts there), then the server stopped. */
static dlock_lock *taken_once_then_server_stopped(dlock_client *c, const char *name)
{
    dlock_lock *l = mk(c, name, NULL, NULL);
    acquire_ok(l, 0);
    assert_int_equal(dlock_release(l), 0);
    (void)inspect(c, name);
    server_stop();
    return l;
}

/* A try whose connection drops while its session lives (the C client drops
 * one silent for 2/3 of the session: a server that stood still, a client
 * that was not run) reconnects within op_timeout_ms and answers, as
 * Curator's and kazoo's tries do; it used to fail with the connection (CI:
 * conformance_zk under TSan, "no reply from ZooKeeper in time"). A session
 * of 10 s: the drop comes after 6.7 s, the server runs again at 7.5 s,
 * 2.5 s before the session could expire. */
struct cont_after {
    pid_t pid;
    int ms;
};

static void *cont_after_main(void *arg)
{
    struct cont_after *ca = arg;
    sleep_ms(ca->ms);
    (void)kill(ca->pid, SIGCONT);
    return NULL;
}

static void test_try_outlives_a_dropped_connection(void **state)
{
    (void)state;
    char name[64], url[256];
    unique(name, sizeof name, "trydrop");
    snprintf(url, sizeof url, "zk://127.0.0.1:%d?session=10000&op_timeout_ms=15000", zk_port);
    dlock_client *c = open_url(url);
    dlock_lock *l = taken_once_then_server_stopped(c, name);
    struct cont_after ca = {stopped_server, 7500};
    pthread_t t;
    int64_t t0 = now_ms();
    assert_int_equal(pthread_create(&t, NULL, cont_after_main, &ca), 0);
    int rc = dlock_acquire(l, 0);
    int64_t took = now_ms() - t0;
    assert_int_equal(pthread_join(t, NULL), 0);
    stopped_server = 0;
    fprintf(stderr, "# a try with the server stopped 7.5 s: %s after %" PRId64 " ms (%s)\n",
            dlock_err_name(rc), took, dlock_lock_errmsg(l));
    assert_int_equal(rc, 0);
    assert_true(took >= 7000); /* (it was answered after the server ran again) */
    dlock_info info = inspect(c, name);
    assert_int_equal(info.held, 1);
    assert_int_equal(info.token, dlock_token(l));
    assert_int_equal(dlock_release(l), 0);
    dlock_lock_free(l);
    dlock_client_close(c);
}

/* ---- 2. waiters that give up leave no node ------------------------------------------- */

static void test_gave_up_waiters_leave_no_node(void **state)
{
    (void)state;
    char name[64], prefix[128];
    unique(name, sizeof name, "giveup");
    parent_path(prefix, sizeof prefix, "", name);
    dlock_client *c1 = open_url(zk_url), *c2 = open_url(zk_url), *c3 = open_url(zk_url);
    dlock_lock *h = mk(c1, name, NULL, NULL);
    acquire_ok(h, 0);

    /* Timed out. */
    dlock_lock *w = mk(c2, name, NULL, NULL);
    int64_t t0 = now_ms();
    assert_int_equal(dlock_acquire(w, 300), DLOCK_ETIMEDOUT);
    assert_true(now_ms() - t0 >= 250);
    dlock_info info = inspect(c3, name);
    assert_int_equal(info.held, 1);
    assert_int_equal(info.holders, 1);
    assert_int_equal(info.waiters, 0);
    assert_int_equal(ephemerals_under(prefix), 1);

    /* Cancelled once it is queued. */
    struct waiter ws;
    waiter_start(&ws, w, 30000, false);
    wait_waiters(c3, name, 1, 5000);
    assert_int_equal(ephemerals_under(prefix), 2);
    dlock_cancel(w);
    assert_int_equal(waiter_join(&ws), DLOCK_ECANCELED);
    info = inspect(c3, name);
    assert_int_equal(info.waiters, 0);
    assert_int_equal(info.holders, 1);
    assert_int_equal(ephemerals_under(prefix), 1);

    /* A try that fails. */
    assert_int_equal(dlock_acquire(w, 0), DLOCK_EBUSY);
    info = inspect(c3, name);
    assert_int_equal(info.waiters, 0);
    assert_int_equal(ephemerals_under(prefix), 1);

    /* A give-up racing with the grant: whichever wins, nothing is left. */
    for (int i = 0; i < 12; i++) {
        waiter_start(&ws, w, 60 + 5 * (i % 4), true);
        sleep_ms(50 + 5 * (i % 6));
        assert_int_equal(dlock_release(h), 0);
        int rc = waiter_join(&ws);
        assert_true(rc == 0 || rc == DLOCK_ETIMEDOUT);
        assert_int_equal(dlock_state(w), DLOCK_STATE_IDLE);
        info = inspect(c3, name);
        assert_int_equal(info.held, 0);
        assert_int_equal(info.waiters, 0);
        assert_int_equal(ephemerals_under(prefix), 0);
        acquire_ok(h, 0);
    }
    assert_int_equal(dlock_release(h), 0);
    assert_int_equal(ephemerals_under(prefix), 0);
    dlock_lock_free(h);
    dlock_lock_free(w);
    dlock_client_close(c1);
    dlock_client_close(c2);
    dlock_client_close(c3);
}

/* ---- 3. a create whose reply is lost -------------------------------------------------- */

/* Until NAME has neither holder nor waiter nor ephemeral node (limit_ms). */
static bool wait_clean(dlock_client *c, const char *name, const char *prefix, int limit_ms)
{
    int64_t end = now_ms() + limit_ms;
    do {
        dlock_info info = inspect(c, name);
        if (info.held == 0 && info.waiters == 0 && info.holders == 0 &&
            ephemerals_under(prefix) == 0)
            return true;
        sleep_ms(50);
    } while (now_ms() < end);
    return false;
}

static void lost_create_round(int stop_ms)
{
    char name[64], prefix[128];
    unique(name, sizeof name, "lostcreate");
    parent_path(prefix, sizeof prefix, "", name);
    dlock_client *c1 = open_url(zk_url);
    dlock_lock *l = taken_once_then_server_stopped(c1, name);
    int64_t t0 = now_ms();
    int rc = dlock_acquire(l, 500);
    int64_t took = now_ms() - t0;
    fprintf(stderr, "# acquire against a stopped server: %s after %" PRId64 " ms (%s)\n",
            dlock_err_name(rc), took, dlock_lock_errmsg(l));
    assert_true(rc == DLOCK_ETIMEDOUT || rc == DLOCK_EUNREACHABLE);
    assert_true(took <= 500 + 400);
    assert_int_equal(dlock_state(l), DLOCK_STATE_IDLE);
    sleep_ms(stop_ms - (now_ms() - t0));
    server_cont();

    /* The server runs the create it had queued; the client finds the node
     * by its owner id and deletes it (or deletes it on the late reply). */
    dlock_client *c2 = open_url(zk_url);
    if (!wait_clean(c2, name, prefix, 8000))
        fail_msg("server stopped %d ms: a node of the lost create is left (%d ephemeral)",
                 stop_ms, ephemerals_under(prefix));
    /* The first client is back on line (its session, or a new one)... */
    int64_t end = now_ms() + 8000;
    dlock_info info;
    while (dlock_inspect(c1, name, &info) != 0 && now_ms() < end)
        sleep_ms(50);
    /* ...and nothing of its reappears. */
    sleep_ms(300);
    if (!wait_clean(c2, name, prefix, 0))
        fail_msg("server stopped %d ms: a node reappeared", stop_ms);
    dlock_lock *l2 = mk(c2, name, NULL, NULL);
    acquire_ok(l2, 0);
    assert_int_equal(dlock_release(l2), 0);
    acquire_ok(l, 0); /* the first client works again */
    assert_int_equal(dlock_release(l), 0);
    dlock_lock_free(l2);
    dlock_lock_free(l);
    dlock_client_close(c2);
    dlock_client_close(c1);
}

static void test_lost_create_reply_leaves_no_orphan(void **state)
{
    (void)state;
    /* The reply never comes: the client drops the connection after 2/3 of
     * the session without a reply, and reconnects to its session; the
     * server has run the create meanwhile... */
    lost_create_round(1600);
    /* ...or it comes late (the connection survives the stop). */
    lost_create_round(700);
}

/* ---- 3a. a client closed while the server owes it replies -------------------------------- */

/* The close returns, and the nodes its lost creates made go with the
 * session. The C client loses the memory of requests still in flight when
 * its handle closes (LeakSanitizer saw it in CI): dlock lets them end first,
 * which the ASan and valgrind runs of this test check. */
static void test_close_with_requests_in_flight(void **state)
{
    (void)state;
    char name[64], prefix[128];
    unique(name, sizeof name, "inflight");
    parent_path(prefix, sizeof prefix, "", name);
    /* (a session long enough that the C client does not drop the
     * connection on its own first) */
    char url[128];
    snprintf(url, sizeof url, "zk://127.0.0.1:%d?session=6000&op_timeout_ms=1000", zk_port);
    dlock_client *c = open_url(url);
    enum { N = 8 };
    dlock_lock *l[N];
    for (int i = 0; i < N; i++)
        l[i] = mk(c, name, NULL, NULL);
    server_stop();
    for (int i = 0; i < N; i++)
        assert_int_equal(dlock_acquire(l[i], 50), DLOCK_ETIMEDOUT);
    for (int i = 0; i < N; i++)
        dlock_lock_free(l[i]);
    int64_t t0 = now_ms();
    dlock_client_close(c);
    fprintf(stderr, "# closed with %d creates unanswered in %" PRId64 " ms\n", N, now_ms() - t0);
    server_cont();
    dlock_client *look = open_url(zk_url);
    bool clean = wait_clean(look, name, prefix, 20000);
    dlock_client_close(look);
    assert_true(clean);
}

/* ---- 3b. a member that stops answering (three-member ensemble) ------------------------ */

/* The ensemble of DLOCK_TEST_ZK3 (or ZK3P), as tests/servers.sh started it:
 * members NAME-1..3, their client ports and pids, and which is the leader. */
struct member {
    int port;
    pid_t pid;
    bool leader;
};

static const char *ensemble_name(void)
{
    return getenv("DLOCK_TEST_ZK3") ? "zk3" : getenv("DLOCK_TEST_ZK3P") ? "zk3p" : NULL;
}

static long server_file(const char *name, int i, const char *ext)
{
    char path[512];
    snprintf(path, sizeof path, "%s/%s-%d.%s", getenv("DLOCK_TEST_SERVERS"), name, i, ext);
    FILE *f = fopen(path, "r");
    assert_non_null(f);
    long v = 0;
    int got = fscanf(f, "%ld", &v);
    fclose(f);
    assert_int_equal(got, 1);
    return v;
}

static void ensemble(struct member m[3])
{
    const char *name = ensemble_name();
    for (int i = 0; i < 3; i++) {
        m[i].port = (int)server_file(name, i + 1, "port");
        m[i].pid = (pid_t)server_file(name, i + 1, "pid");
        char *st = zk_ask_port(m[i].port, "srvr");
        m[i].leader = strstr(st, "Mode: leader") != NULL;
        free(st);
    }
}

/* The member this process's ZooKeeper connection goes to (its one TCP
 * socket to a member's client port), -1 if none. */
static int connected_member(const struct member m[3])
{
    int found = -1;
    DIR *d = opendir("/proc/self/fd");
    assert_non_null(d);
    for (struct dirent *e; (e = readdir(d));) {
        struct sockaddr_in a;
        socklen_t al = sizeof a;
        int fd = atoi(e->d_name);
        if (e->d_name[0] == '.' || getpeername(fd, (struct sockaddr *)&a, &al) != 0 ||
            a.sin_family != AF_INET)
            continue;
        for (int i = 0; i < 3; i++)
            if (ntohs(a.sin_port) == m[i].port) {
                assert_true(found < 0 || found == i); /* one client, one connection */
                found = i;
            }
    }
    closedir(d);
    return found;
}

/* zk://the members but skip (-1: all); an op_timeout_ms of 1 s, a session of
 * 6 s (the C client leaves a silent member after 4 s on its own). */
static void ensemble_url(char *buf, size_t len, const struct member m[3], int skip,
                         bool no_leader)
{
    int n = snprintf(buf, len, "zk://");
    for (int i = 0; i < 3; i++)
        if (i != skip && !(no_leader && m[i].leader))
            n += snprintf(buf + n, len - (size_t)n, "%s127.0.0.1:%d", buf[n - 1] == '/' ? "" : ",",
                          m[i].port);
    n += snprintf(buf + n, len - (size_t)n, "?session=6000&op_timeout_ms=1000");
    assert_true(n > 0 && (size_t)n < len);
}

/* A client on the followers whose session is up: the member it is on. */
static int follower_session(const struct member m[3], dlock_client **c, dlock_lock **l,
                            const char *name)
{
    char url[512];
    ensemble_url(url, sizeof url, m, -1, true);
    *c = open_url(url);
    *l = mk(*c, name, NULL, NULL);
    acquire_ok(*l, 5000); /* the name's node exists; the session is up */
    assert_int_equal(dlock_release(*l), 0);
    int on = connected_member(m);
    assert_true(on >= 0 && !m[on].leader);
    return on;
}

/* Until name's queue is empty as seen by c (limit_ms): true if it is. */
static bool queue_empty(dlock_client *c, const char *name, int limit_ms)
{
    int64_t end = now_ms() + limit_ms;
    do {
        dlock_info info;
        if (dlock_inspect(c, name, &info) == 0 && info.holders == 0 && info.waiters == 0)
            return true;
        sleep_ms(50);
    } while (now_ms() < end);
    return false;
}

/*
 * The member a client's session is on stops (SIGSTOP: it takes requests
 * and never answers) while the rest of the ensemble serves. A waiter with
 * time left must not give up when its create goes unanswered for
 * op_timeout_ms: it moves to another member and queues there (it used to
 * fail with "no reply from ZooKeeper in time", exit 69 for `dlock run -w`).
 * A try fails at once and leaves no node, neither then nor once the member
 * runs again with the create still in its queue — though the client's
 * session lives on.
 */
static void test_member_stops_answering(void **state)
{
    (void)state;
    if (!ensemble_name())
        skip(); /* run by check_zk_test.sh, with the ensemble */
    struct member m[3];
    ensemble(m);
    char name[64], url[512];

    /* A try. */
    unique(name, sizeof name, "frozentry");
    dlock_client *c = NULL;
    dlock_lock *l = NULL;
    int on = follower_session(m, &c, &l, name);
    stop_process(m[on].pid);
    int64_t t0 = now_ms();
    int rc = dlock_acquire(l, 0);
    int64_t took = now_ms() - t0;
    fprintf(stderr, "# a try on a stopped member: %s after %" PRId64 " ms (%s)\n",
            dlock_err_name(rc), took, dlock_lock_errmsg(l));
    assert_int_equal(rc, DLOCK_EUNREACHABLE);
    assert_int_equal(dlock_state(l), DLOCK_STATE_IDLE);
    ensemble_url(url, sizeof url, m, on, false);
    dlock_client *other = open_url(url);
    if (!queue_empty(other, name, 5000))
        fail_msg("a node of the failed try is in the queue");
    server_cont(); /* it reads the create it had queued */
    sleep_ms(1500);
    if (!queue_empty(other, name, 5000))
        fail_msg("a node of the failed try appeared once the member ran again");
    acquire_ok(l, 5000); /* the client works, its session alive */
    assert_int_equal(dlock_release(l), 0);
    dlock_lock_free(l);
    dlock_client_close(c);
    dlock_client_close(other); /* (connected_member wants one client) */

    /* A waiter with time left. */
    unique(name, sizeof name, "frozenwait");
    on = follower_session(m, &c, &l, name);
    stop_process(m[on].pid);
    t0 = now_ms();
    rc = dlock_acquire(l, 15000);
    took = now_ms() - t0;
    fprintf(stderr, "# a wait on a stopped member: %s after %" PRId64 " ms (%s)\n",
            dlock_err_name(rc), took, rc ? dlock_lock_errmsg(l) : "");
    if (rc)
        fail_msg("the waiter gave up after %" PRId64 " ms of 15000: %s", took,
                 dlock_lock_errmsg(l));
    assert_true(connected_member(m) != on); /* it moved */
    ensemble_url(url, sizeof url, m, on, false);
    other = open_url(url);
    dlock_info info = inspect(other, name);
    assert_int_equal(info.holders, 1);
    assert_int_equal(info.waiters, 0); /* one node: no orphan of the lost create */
    assert_int_equal(dlock_release(l), 0);
    server_cont();
    sleep_ms(1500);
    if (!queue_empty(other, name, 5000))
        fail_msg("a node of the lost create appeared once the member ran again");
    dlock_lock_free(l);
    dlock_client_close(c);
    dlock_client_close(other);
}

/*
 * A client opened while its members serve nothing (two of three stopped:
 * no quorum, as in an election) has no session yet, so a lock made then can
 * only take its span from the session timeout asked for (90 s). The
 * servers grant at most their maxSessionTimeout (60 s, tests/servers.sh):
 * once held, the lock must count 2/3 of what was granted, 40 s. With 60 s
 * it would be declared lost up to 20 s after the leader could expire its
 * session and let another client in.
 */
static void test_span_of_a_lock_made_before_its_session(void **state)
{
    (void)state;
    if (!ensemble_name())
        skip(); /* run by check_zk_test.sh, with the ensemble */
    struct member m[3];
    ensemble(m);
    int keep = m[0].leader ? 1 : 0;
    int a = keep == 0 ? 1 : 0, b = 3 - keep - a;
    stop_process(m[a].pid);
    stopped_second = stopped_server;
    stop_process(m[b].pid);
    /* the member left notices the quorum is gone (syncLimit: 5 s) */
    for (int64_t end = now_ms() + 30000;; sleep_ms(200)) {
        char *st = zk_ask_port(m[keep].port, "srvr");
        bool serving = strstr(st, "Mode: ") != NULL;
        free(st);
        if (!serving)
            break;
        if (now_ms() > end)
            fail_msg("the member left still serves 30 s after the two others stopped");
    }
    char url[256], name[64];
    snprintf(url, sizeof url, "zk://127.0.0.1:%d?session=90000&op_timeout_ms=5000",
             m[keep].port);
    dlock_client *c = open_url(url); /* opens: the servers answer, no session */
    unique(name, sizeof name, "span");
    dlock_lock *l = mk(c, name, NULL, NULL);
    assert_int_equal(dlock_debug_span_ms(l), 60000); /* all it can know yet */
    server_cont();
    acquire_ok(l, 30000);
    assert_int_equal(dlock_debug_span_ms(l), 40000);
    long long valid = dlock_valid_ms(l);
    fprintf(stderr, "# held with a session of 60 s granted for 90 s asked: valid for %lld ms\n",
            valid);
    assert_true(valid > 0 && valid <= 40000);
    assert_int_equal(dlock_release(l), 0);
    dlock_lock_free(l);
    dlock_client_close(c);
}

/* ---- 4. no herd --------------------------------------------------------------------- */

#define HERD 50
#define HERD_CLIENTS 5

/* Watches on the paths that start with prefix (`wchp`): the largest number
 * of sessions watching one path, and the number of (path, session) pairs. */
static void watches_under(const char *prefix, int *max_per_path, int *total, int *paths)
{
    char *d = zk_ask("wchp");
    *max_per_path = *total = *paths = 0;
    size_t plen = strlen(prefix);
    bool ours = false;
    int here = 0;
    for (char *line = d; line && *line; line = strchr(line, '\n') ? strchr(line, '\n') + 1 : NULL) {
        if (*line == '/') {
            ours = strncmp(line, prefix, plen) == 0;
            here = 0;
            if (ours)
                (*paths)++;
        } else if (*line == '\t' && ours) {
            here++;
            (*total)++;
            if (here > *max_per_path)
                *max_per_path = here;
        }
    }
    free(d);
}

static void test_no_herd_and_fifo(void **state)
{
    (void)state;
    char name[64], prefix[128];
    unique(name, sizeof name, "herd");
    parent_path(prefix, sizeof prefix, "", name);
    dlock_client *cs[HERD_CLIENTS];
    for (int i = 0; i < HERD_CLIENTS; i++)
        cs[i] = open_url(zk_url);
    dlock_client *obs = open_url(zk_url);
    dlock_lock *h = mk(obs, name, NULL, NULL);
    acquire_ok(h, 0);
    uint64_t htoken = dlock_token(h);
    static struct waiter ws[HERD];
    dlock_lock *ls[HERD];
    atomic_store(&order_counter, 0);
    for (int i = 0; i < HERD; i++) {
        ls[i] = mk(cs[i % HERD_CLIENTS], name, NULL, NULL);
        waiter_start(&ws[i], ls[i], 30000, true);
        wait_waiters(obs, name, i + 1, 5000); /* queued in this order */
    }
    int max = 0, total = 0, paths = 0;
    watches_under(prefix, &max, &total, &paths);
    fprintf(stderr, "# %d waiters: %d watched nodes, %d watches, at most %d on one node\n",
            HERD, paths, total, max);
    assert_true(total >= HERD); /* each waiter watches something: we read them */
    assert_true(max <= 3);      /* its owner, its successor and the one after */
    assert_int_equal(ephemerals_under(prefix), HERD + 1);

    assert_int_equal(dlock_release(h), 0);
    uint64_t last = htoken;
    for (int i = 0; i < HERD; i++) {
        int rc = waiter_join(&ws[i]);
        if (rc != 0)
            fail_msg("waiter %d: %s: %s", i, dlock_err_name(rc), dlock_lock_errmsg(ls[i]));
        assert_int_equal(ws[i].order, i); /* FIFO */
        assert_true(ws[i].token > last);
        last = ws[i].token;
    }
    dlock_info info = inspect(obs, name);
    assert_int_equal(info.held, 0);
    assert_int_equal(info.waiters, 0);
    for (int i = 0; i < HERD; i++)
        dlock_lock_free(ls[i]);
    dlock_lock_free(h);
    for (int i = 0; i < HERD_CLIENTS; i++)
        dlock_client_close(cs[i]);
    dlock_client_close(obs);
}

/* ---- 4b. writes: each one a flush on a durable server ----------------------------- */

/* The server's write count: the low half of its last zxid (`srvr`). */
static long long server_writes(void)
{
    char *st = zk_ask("srvr");
    char *z = strstr(st, "Zxid: ");
    assert_non_null(z);
    long long zxid = strtoll(z + 6, NULL, 16);
    free(st);
    return zxid & 0xffffffffLL;
}

/*
 * What an acquisition writes (issue 24): a create and a delete, also when
 * it waited — an exclusive holder used to touch its node for its successor
 * (a setData per hand-over) — and on a name's first use the name's node
 * without a failed create of the directory above it.
 */
static void test_writes_per_section(void **state)
{
    (void)state;
    char name[64];
    unique(name, sizeof name, "writes");
    dlock_client *c1 = open_url(zk_url), *c2 = open_url(zk_url);
    dlock_lock *h = mk(c1, name, NULL, NULL), *w = mk(c2, name, NULL, NULL);
    /* Both sessions up (their creation is not counted), and the directory
     * above the names there. */
    dlock_lock *warm = mk(c1, "writes-warm", NULL, NULL);
    acquire_ok(warm, 0);
    assert_int_equal(dlock_release(warm), 0);
    dlock_lock_free(warm);
    (void)inspect(c2, "writes-warm");

    /* A name's first use: the create that finds no name's node, the
     * name's node, the create again; then the delete. */
    long long w0 = server_writes();
    acquire_ok(h, 0);
    assert_int_equal(dlock_release(h), 0);
    long long first = server_writes() - w0;

    /* Uncontended. */
    w0 = server_writes();
    acquire_ok(h, 0);
    assert_int_equal(dlock_release(h), 0);
    long long cycle = server_writes() - w0;

    /* A hand-over: the waiter's section, from the holder's release on. */
    acquire_ok(h, 0);
    struct waiter ws;
    waiter_start(&ws, w, 10000, true);
    wait_waiters(c1, name, 1, 5000);
    w0 = server_writes();
    assert_int_equal(dlock_release(h), 0);
    assert_int_equal(waiter_join(&ws), 0);
    long long handover = server_writes() - w0 - 1; /* less the holder's delete */
    fprintf(stderr, "# server writes: first use %lld, a cycle %lld, a waiter's section %lld\n",
            first, cycle, handover);
    assert_int_equal(first, 4);
    assert_int_equal(cycle, 2);
    assert_int_equal(handover, 1); /* its delete (its create came before) */
    dlock_lock_free(h);
    dlock_lock_free(w);
    dlock_client_close(c1);
    dlock_client_close(c2);
}

/* A waiter that waited longer than the session's 2/3 (the lock's validity
 * on the client) keeps its place: its grant is not thrown away as "too
 * late" (its session was alive all along) to queue again behind later
 * waiters. */
static void test_long_wait_keeps_its_place(void **state)
{
    (void)state;
    char name[64];
    unique(name, sizeof name, "longwait");
    dlock_client *ch = open_url(zk_url), *ca = open_url(zk_url), *cb = open_url(zk_url);
    dlock_lock *h = mk(ch, name, NULL, NULL), *a = mk(ca, name, NULL, NULL),
               *b = mk(cb, name, NULL, NULL);
    acquire_ok(h, 0);
    atomic_store(&order_counter, 0);
    struct waiter wa, wb;
    waiter_start(&wa, a, 8000, false);
    wait_waiters(ch, name, 1, 5000);
    sleep_ms(2000); /* a has waited past 2/3 of the 2 s session */
    waiter_start(&wb, b, 8000, false);
    wait_waiters(ch, name, 2, 5000);
    sleep_ms(300);
    assert_int_equal(dlock_release(h), 0);
    int rc = waiter_join(&wa);
    if (rc != 0) /* given back as "too late", it queued again behind b */
        fail_msg("the first waiter: %s: %s", dlock_err_name(rc), dlock_lock_errmsg(a));
    assert_int_equal(wa.order, 0);
    assert_int_equal(atomic_load(&wb.done), 0);
    assert_int_equal(dlock_state(a), DLOCK_STATE_HELD);
    assert_true(dlock_valid_ms(a) > 0);
    assert_int_equal(dlock_release(a), 0);
    assert_int_equal(waiter_join(&wb), 0);
    assert_int_equal(wb.order, 1);
    assert_true(wb.token > wa.token);
    assert_int_equal(dlock_release(b), 0);
    dlock_lock_free(b);
    dlock_lock_free(a);
    dlock_lock_free(h);
    dlock_client_close(cb);
    dlock_client_close(ca);
    dlock_client_close(ch);
}

/* ---- 5. names listed ---------------------------------------------------------------- */

/* (Odd names, all held at once and listed, are the conformance suite's
 * odd_names.) */

struct seen {
    const char *prefix;
    char names[16][256];
    int n;
};

static int collect(const char *name, void *arg)
{
    struct seen *s = arg;
    if (s->n < 16)
        snprintf(s->names[s->n], sizeof s->names[0], "%s", name);
    s->n++;
    return 0;
}

/* ---- 6. digest authentication ------------------------------------------------------- */

static void assert_no_password(const char *msg)
{
    assert_non_null(msg);
    if (strstr(msg, "s3cret-pw") || strstr(msg, "n0t-it-pw"))
        fail_msg("a password leaked: %s", msg);
}

static void test_digest_auth(void **state)
{
    (void)state;
    char name[64], alice[256], intruder[256];
    unique(name, sizeof name, "acl");
    url_with(alice, sizeof alice, "alice:s3cret-pw", NULL);
    url_with(intruder, sizeof intruder, "alice:n0t-it-pw", NULL);
    dlock_client *ca = open_url(alice);
    dlock_client *ca2 = open_url(alice);
    dlock_client *cw = open_url(intruder);
    dlock_client *anon = open_url(zk_url);
    assert_null(strstr(dlock_client_url(ca), "s3cret-pw"));
    assert_non_null(strstr(dlock_client_url(ca), "***"));
    assert_null(strstr(dlock_client_url(cw), "n0t-it-pw"));

    dlock_lock *h = mk(ca, name, count_lost, NULL);
    acquire_ok(h, 0);
    uint64_t token = dlock_token(h);

    /* The wrong password: neither a place in the queue nor a break. */
    dlock_lock *w = mk(cw, name, NULL, NULL);
    assert_int_equal(dlock_acquire(w, 0), DLOCK_EPERM);
    fprintf(stderr, "# wrong password: %s\n", dlock_lock_errmsg(w));
    assert_no_password(dlock_lock_errmsg(w));
    assert_null(strchr(dlock_lock_errmsg(w), '\n'));
    assert_int_equal(dlock_acquire(w, 300), DLOCK_EPERM);
    dlock_info broken;
    memset(&broken, 0, sizeof broken);
    assert_int_equal(dlock_break(cw, name, &broken), DLOCK_EPERM);
    fprintf(stderr, "# break with the wrong password: %s\n", dlock_client_errmsg(cw));
    assert_no_password(dlock_client_errmsg(cw));
    assert_null(strchr(dlock_client_errmsg(cw), '\n'));
    /* Nor anonymously; but anyone may look. */
    dlock_lock *a = mk(anon, name, NULL, NULL);
    assert_int_equal(dlock_acquire(a, 0), DLOCK_EPERM);
    assert_int_equal(dlock_break(anon, name, &broken), DLOCK_EPERM);
    dlock_info info = inspect(anon, name);
    assert_int_equal(info.held, 1);
    assert_int_equal(info.waiters, 0);
    assert_int_equal(info.token, token);
    assert_true(info.holder[0] != '\0');
    assert_int_equal(dlock_state(h), DLOCK_STATE_HELD);

    /* The same user, from another session, is the lock's user. */
    dlock_lock *a2 = mk(ca2, name, NULL, NULL);
    assert_int_equal(dlock_acquire(a2, 0), DLOCK_EBUSY);
    atomic_store(&lost_calls, 0);
    assert_int_equal(dlock_break(ca2, name, &broken), 0);
    assert_int_equal(broken.token, token);
    assert_true(wait_lost(h, 2000) >= 0);
    assert_int_equal(dlock_release(h), DLOCK_ELOST);
    acquire_ok(a2, 0);
    assert_true(dlock_token(a2) > token);
    assert_int_equal(dlock_release(a2), 0);

    dlock_lock_free(a2);
    dlock_lock_free(a);
    dlock_lock_free(w);
    dlock_lock_free(h);
    dlock_client_close(anon);
    dlock_client_close(cw);
    dlock_client_close(ca2);
    dlock_client_close(ca);
}

/* ---- 7. a server that is not ZooKeeper ------------------------------------------------ */

struct impostor {
    int lfd, port;
    atomic_int stop;
    atomic_int accepted;
    pthread_t t;
};

static void *impostor_main(void *p)
{
    struct impostor *g = p;
    static const char junk[] = "HTTP/1.1 400 Bad Request\r\nContent-Length: 0\r\n\r\n";
    while (!atomic_load(&g->stop)) {
        struct pollfd pf = {.fd = g->lfd, .events = POLLIN};
        if (poll(&pf, 1, 50) != 1)
            continue;
        int c = accept(g->lfd, NULL, NULL);
        if (c < 0)
            continue;
        atomic_fetch_add(&g->accepted, 1);
        (void)send(c, junk, sizeof junk - 1, MSG_NOSIGNAL);
        close(c);
    }
    return NULL;
}

static int listener(int *port)
{
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    assert_true(fd >= 0);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    socklen_t len = sizeof a;
    assert_int_equal(bind(fd, (struct sockaddr *)&a, sizeof a), 0);
    assert_int_equal(getsockname(fd, (struct sockaddr *)&a, &len), 0);
    *port = ntohs(a.sin_port);
    return fd;
}

/* An open that must fail: what it gave, checked once any server thread of
 * the test is stopped (a failed check leaves this function by longjmp). */
struct unreachable {
    int rc;
    int64_t took_ms;
    dlock_client *c;
    char msg[512];
};

static void try_unreachable(const char *url, const char *what, struct unreachable *r)
{
    dlock_client_opts o;
    dlock_client_opts_init(&o);
    o.connect_timeout_ms = 1000;
    r->c = (dlock_client *)1;
    int64_t t0 = now_ms();
    r->rc = dlock_client_open(&r->c, url, &o);
    r->took_ms = now_ms() - t0;
    const char *msg = dlock_client_errmsg(NULL);
    snprintf(r->msg, sizeof r->msg, "%s", msg ? msg : "");
    fprintf(stderr, "# %s: %s after %" PRId64 " ms: %s\n", what, dlock_err_name(r->rc),
            r->took_ms, r->msg);
}

static void check_unreachable(const struct unreachable *r)
{
    assert_int_equal(r->rc, DLOCK_EUNREACHABLE);
    assert_null(r->c);
    /* A bound for a hang, not a speed: the connect timeout is 1 s, and
     * closing the ZooKeeper client's threads under TSan on a loaded
     * machine took 3.6 s. */
    assert_true(r->took_ms <= 15000);
    assert_true(r->msg[0] != '\0');
    assert_null(strchr(r->msg, '\n'));
    assert_non_null(strstr(r->msg, "127.0.0.1"));
}

static void expect_unreachable(const char *url, const char *what)
{
    struct unreachable r;
    try_unreachable(url, what, &r);
    check_unreachable(&r);
}

/* A listener that answers every connection with an HTTP error. */
static void http_impostor(void)
{
    struct impostor g = {0};
    g.lfd = listener(&g.port);
    assert_int_equal(listen(g.lfd, 16), 0);
    assert_int_equal(pthread_create(&g.t, NULL, impostor_main, &g), 0);
    char url[256];
    snprintf(url, sizeof url, "zk://127.0.0.1:%d?session=2000", g.port);
    struct unreachable r;
    try_unreachable(url, "an HTTP server", &r);
    atomic_store(&g.stop, 1);
    assert_int_equal(pthread_join(g.t, NULL), 0);
    close(g.lfd);
    check_unreachable(&r);
    assert_true(atomic_load(&g.accepted) >= 1); /* the client did talk to it */
}

static void test_not_zookeeper(void **state)
{
    (void)state;
    /* Under valgrind the ZooKeeper C client itself, fed an HTTP reply,
     * passes an uninitialised setsockopt argument (zookeeper_interest,
     * libzookeeper-mt 3.8.0) and takes seconds over the reply's "length":
     * only the closed port is tried there. */
    if (!RUNNING_ON_VALGRIND)
        http_impostor();

    /* A port nobody listens on (bound, never listening: nobody else gets it). */
    int port;
    int fd = listener(&port);
    char url[256];
    snprintf(url, sizeof url, "zk://127.0.0.1:%d?session=2000", port);
    expect_unreachable(url, "a closed port");
    close(fd);
}

/* ---- 9. leader election ---------------------------------------------------------------- */

struct campaigner {
    dlock_lock *l;
    const char *value;
    atomic_int rc;
    pthread_t t;
};

static void *campaign_main(void *p)
{
    struct campaigner *k = p;
    atomic_store(&k->rc, dlock_campaign(k->l, k->value, 10000));
    return NULL;
}

static void expect_leader(dlock_client *c, const char *name, const char *value)
{
    char buf[256] = "";
    int rc = dlock_leader(c, name, buf, sizeof buf);
    if (rc != 0)
        fail_msg("leader of %s: %s: %s", name, dlock_err_name(rc), dlock_client_errmsg(c));
    assert_string_equal(buf, value);
}

static void test_election(void **state)
{
    (void)state;
    char name[64];
    unique(name, sizeof name, "elect");
    dlock_client *c1 = open_url(zk_url), *c2 = open_url(zk_url), *obs = open_url(zk_url);
    char buf[256];
    assert_int_equal(dlock_leader(obs, name, buf, sizeof buf), DLOCK_ENOENT);
    dlock_lock *l1 = mk(c1, name, NULL, NULL);
    assert_int_equal(dlock_campaign(l1, "alpha at 10.0.0.1:80", 0), 0);
    expect_leader(obs, name, "alpha at 10.0.0.1:80");

    dlock_lock *l2 = mk(c2, name, NULL, NULL);
    struct campaigner k = {.l = l2, .value = "beta"};
    atomic_store(&k.rc, -1000);
    assert_int_equal(pthread_create(&k.t, NULL, campaign_main, &k), 0);
    wait_waiters(obs, name, 1, 5000);
    expect_leader(obs, name, "alpha at 10.0.0.1:80"); /* a candidate is not the leader */
    assert_int_equal(dlock_resign(l1), 0);
    assert_int_equal(pthread_join(k.t, NULL), 0);
    assert_int_equal(atomic_load(&k.rc), 0);
    expect_leader(obs, name, "beta");
    expect_leader(c1, name, "beta");
    assert_int_equal(dlock_resign(l2), 0);
    assert_int_equal(dlock_leader(obs, name, buf, sizeof buf), DLOCK_ENOENT);
    dlock_lock_free(l2);
    dlock_lock_free(l1);
    dlock_client_close(obs);
    dlock_client_close(c2);
    dlock_client_close(c1);
}

/* ---- 10. chroot ------------------------------------------------------------------------- */

static void test_chroot(void **state)
{
    (void)state;
    char name[64], only[64], root[64], url[256], prefix[256];
    unique(name, sizeof name, "chroot");
    unique(only, sizeof only, "chroot-only");
    snprintf(root, sizeof root, "/dlock-test-%d/some/chroot", (int)getpid());
    url_with(url, sizeof url, NULL, root);
    dlock_client *cr = open_url(zk_url), *cc = open_url(url), *cc2 = open_url(url);

    dlock_lock *lr = mk(cr, name, NULL, NULL), *lc = mk(cc, name, NULL, NULL);
    acquire_ok(lr, 0);
    acquire_ok(lc, 0); /* another lock: both hold */
    dlock_lock *lc2 = mk(cc2, name, NULL, NULL);
    assert_int_equal(dlock_acquire(lc2, 0), DLOCK_EBUSY); /* the chroot's own lock works */
    dlock_lock *lo = mk(cc, only, NULL, NULL);
    acquire_ok(lo, 0);

    /* The chroot's nodes are where the URL says. */
    parent_path(prefix, sizeof prefix, root, name);
    assert_int_equal(ephemerals_under(prefix), 1);
    parent_path(prefix, sizeof prefix, root, only);
    assert_int_equal(ephemerals_under(prefix), 1);
    parent_path(prefix, sizeof prefix, "", only);
    assert_int_equal(ephemerals_under(prefix), 0);

    struct seen s = {0};
    assert_int_equal(dlock_list(cc, "chroot-", collect, &s), 0);
    /* (names of this run only: earlier runs of the test used other chroots) */
    assert_int_equal(s.n, 2);
    struct seen r = {0};
    char pfx[64];
    snprintf(pfx, sizeof pfx, "chroot-only-%d-", (int)getpid());
    assert_int_equal(dlock_list(cr, pfx, collect, &r), 0);
    assert_int_equal(r.n, 0); /* the root does not see the chroot's names */
    dlock_info info = inspect(cr, only);
    assert_int_equal(info.held, 0);
    info = inspect(cc2, only);
    assert_int_equal(info.held, 1);
    assert_int_equal(info.token, dlock_token(lo));

    assert_int_equal(dlock_release(lo), 0);
    assert_int_equal(dlock_release(lc), 0);
    acquire_ok(lc2, 0);
    assert_int_equal(dlock_release(lc2), 0);
    assert_int_equal(dlock_release(lr), 0);
    dlock_lock_free(lo);
    dlock_lock_free(lc2);
    dlock_lock_free(lc);
    dlock_lock_free(lr);
    dlock_client_close(cc2);
    dlock_client_close(cc);
    dlock_client_close(cr);
}

int main(int argc, char **argv)
{
    zk_url = getenv("DLOCK_TEST_ZK");
    if (!zk_url || !getenv("DLOCK_TEST_SERVERS")) {
        fprintf(stderr, "test_zk: run inside tests/servers.sh run zk -- ...\n");
        return 77;
    }
    const char *colon = strrchr(zk_url, ':');
    zk_port = colon ? atoi(colon + 1) : 0;
    if (zk_port <= 0) {
        fprintf(stderr, "test_zk: no port in %s\n", zk_url);
        return 1;
    }
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_teardown(test_session_expiry_of_holder, teardown_processes),
        cmocka_unit_test_teardown(test_acquire_timeout_is_a_timeout, teardown_processes),
        cmocka_unit_test_teardown(test_try_outlives_a_dropped_connection, teardown_processes),
        cmocka_unit_test(test_gave_up_waiters_leave_no_node),
        cmocka_unit_test_teardown(test_lost_create_reply_leaves_no_orphan, teardown_processes),
        cmocka_unit_test_teardown(test_close_with_requests_in_flight, teardown_processes),
        cmocka_unit_test_teardown(test_member_stops_answering, teardown_processes),
        cmocka_unit_test_teardown(test_span_of_a_lock_made_before_its_session,
                                  teardown_processes),
        cmocka_unit_test(test_no_herd_and_fifo),
        cmocka_unit_test(test_writes_per_section),
        cmocka_unit_test(test_long_wait_keeps_its_place),
        cmocka_unit_test(test_digest_auth),
        cmocka_unit_test(test_not_zookeeper),
        cmocka_unit_test(test_election),
        cmocka_unit_test(test_chroot),
    };
    if (argc > 1) /* a test's name, or a pattern with '*' and '?' */
        cmocka_set_test_filter(argv[1]);
    return cmocka_run_group_tests(tests, NULL, NULL) ? 1 : 0;
}
