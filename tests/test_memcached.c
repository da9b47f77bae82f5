/* SPDX-License-Identifier: MIT */
/*
 * test_memcached.c — the memcached backend's own behaviour against real
 * servers started by tests/servers.sh (DLOCK_TEST_MEMCACHED, one server of
 * 64 MB; DLOCK_TEST_MEMCACHED2, names spread over that one and a second;
 * DLOCK_TEST_MEMCACHED_SMALL, a 2 MB server for eviction; and
 * DLOCK_TEST_SERVERS/memcached{,2,-small}.{pid,cmd,port} to stop and restart
 * them). The lock contract itself is tests/test_conformance.c's; what is
 * here needs memcached: an item deleted, expired, evicted or taken by
 * another while its holder still believes in it (owner-checked renewal and
 * release by compare-and-swap), the item's TTL on the server's clock, a
 * server restart (weak tokens), names that are not valid keys, the key
 * prefix, names spread over several servers and one of them stopped,
 * servers that are not memcached, semaphores' slot items, forced release,
 * listing (not offered), election values and what dlock_inspect reads,
 * cancelling and timing out a waiter that polls.
 *
 * The test reads the servers' own state over TCP with the meta protocol
 * (mg, md, lru_crawler metadump), never through the library. Run it as
 *
 *   tests/servers.sh run memcached -- tests/test_memcached [TEST-NAME-PATTERN]
 *
 * Without DLOCK_TEST_MEMCACHED it is skipped (exit 77).
 */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <cmocka.h>

#include <arpa/inet.h>
#include <ctype.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <spawn.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "dlock.h"
#include "testutil.h"

extern char **environ;

static const char *mc_url;    /* memcached://127.0.0.1:P */
static const char *mc2_url;   /* memcached://127.0.0.1:P,127.0.0.1:P2 */
static const char *small_url; /* memcached://127.0.0.1:P3 (2 MB) */
static int port1, port2, small_port;
static const char *self_path; /* this program, for the paused holder */

/* The ports of a memcached:// URL's hosts, in order: how many. */
static int url_ports(const char *url, int *ports, int max)
{
    const char *p = strstr(url, "://");
    if (!p)
        return 0;
    p += 3;
    int n = 0;
    while (*p && *p != '?' && *p != '/' && n < max) {
        const char *end = p + strcspn(p, ",?/");
        const char *colon = NULL;
        for (const char *q = p; q < end; q++)
            if (*q == ':')
                colon = q;
        ports[n++] = colon ? atoi(colon + 1) : 11211;
        p = *end == ',' ? end + 1 : end;
    }
    return n;
}

/* ---- the server's own account (raw meta protocol) --------------------------------- */

static int raw_connect(int port)
{
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    assert_true(fd >= 0);
    struct timeval tv = {.tv_sec = 5};
    (void)setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    (void)setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv);
    struct sockaddr_in a = {.sin_family = AF_INET,
                            .sin_port = htons((uint16_t)port),
                            .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    if (connect(fd, (struct sockaddr *)&a, sizeof a) != 0) {
        int e = errno;
        close(fd);
        errno = e;
        return -1;
    }
    return fd;
}

static void raw_send(int fd, const char *buf, size_t len)
{
    for (size_t off = 0; off < len;) {
        ssize_t n = send(fd, buf + off, len - off, MSG_NOSIGNAL);
        if (n <= 0)
            fail_msg("raw send to memcached: %s", n < 0 ? strerror(errno) : "closed");
        off += (size_t)n;
    }
}

/* Whether buf[0..len) holds one whole reply: a line, and a VA's value. */
static bool reply_complete(const char *buf, size_t len)
{
    const char *eol = memmem(buf, len, "\r\n", 2);
    if (!eol)
        return false;
    if (strncmp(buf, "VA ", 3) != 0)
        return true;
    size_t head = (size_t)(eol - buf) + 2;
    size_t vlen = strtoul(buf + 3, NULL, 10);
    return len >= head + vlen + 2;
}

/* One command on a new connection to 127.0.0.1:port; its one reply into out
 * (NUL-terminated, CRLFs kept). -1 if the server cannot be reached. */
static int __attribute__((format(printf, 4, 5)))
raw(int port, char *out, size_t cap, const char *fmt, ...)
{
    char req[8192];
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(req, sizeof req, fmt, ap);
    va_end(ap);
    assert_true(n > 0 && (size_t)n < sizeof req);
    int fd = raw_connect(port);
    if (fd < 0)
        return -1;
    raw_send(fd, req, (size_t)n);
    size_t have = 0;
    while (!reply_complete(out, have)) {
        if (have + 1 >= cap)
            fail_msg("raw reply to \"%.*s\" longer than %zu bytes", n - 2, req, cap);
        ssize_t r = recv(fd, out + have, cap - 1 - have, 0);
        if (r <= 0) {
            close(fd);
            fail_msg("raw reply to \"%.*s\" from port %d: %s", n - 2, req, port,
                     r < 0 ? strerror(errno) : "connection closed");
        }
        have += (size_t)r;
        out[have] = '\0';
    }
    close(fd);
    return 0;
}

/* mg KEY u (u: leave its place in the LRU alone): whether the item is there. */
static bool item_exists(int port, const char *key)
{
    char out[256];
    if (raw(port, out, sizeof out, "mg %s u\r\n", key) != 0)
        fail_msg("memcached on port %d cannot be reached", port);
    if (strncmp(out, "HD", 2) == 0)
        return true;
    if (strncmp(out, "EN", 2) == 0)
        return false;
    fail_msg("mg %s: unexpected reply %s", key, out);
    return false;
}

/* mg KEY <flag> (c: CAS, t: seconds left): the flag's value, -2 without the item. */
static long long item_flag(int port, const char *key, char flag)
{
    char out[256];
    if (raw(port, out, sizeof out, "mg %s %c u\r\n", key, flag) != 0)
        fail_msg("memcached on port %d cannot be reached", port);
    if (strncmp(out, "EN", 2) == 0)
        return -2;
    char pat[4] = {' ', flag, 0, 0};
    const char *f = strstr(out, pat);
    if (strncmp(out, "HD", 2) != 0 || !f)
        fail_msg("mg %s %c: unexpected reply %s", key, flag, out);
    return strtoll(f + 2, NULL, 10);
}

/* mg KEY v: the item's value into val; false without the item. */
static bool item_value(int port, const char *key, char *val, size_t cap)
{
    char out[4096];
    if (raw(port, out, sizeof out, "mg %s v u\r\n", key) != 0)
        fail_msg("memcached on port %d cannot be reached", port);
    if (strncmp(out, "EN", 2) == 0)
        return false;
    if (strncmp(out, "VA ", 3) != 0)
        fail_msg("mg %s v: unexpected reply %s", key, out);
    size_t vlen = strtoul(out + 3, NULL, 10);
    const char *v = strstr(out, "\r\n") + 2;
    assert_true(vlen < cap);
    memcpy(val, v, vlen);
    val[vlen] = '\0';
    return true;
}

/* md KEY: whether there was one. */
static bool item_delete(int port, const char *key)
{
    char out[256];
    if (raw(port, out, sizeof out, "md %s\r\n", key) != 0)
        fail_msg("memcached on port %d cannot be reached", port);
    if (strncmp(out, "HD", 2) == 0)
        return true;
    if (strncmp(out, "NF", 2) == 0)
        return false;
    fail_msg("md %s: unexpected reply %s", key, out);
    return false;
}

/* Every key on the server (lru_crawler metadump all), decoded, that starts
 * with prefix: up to max into keys, their count returned. */
static int keys_with_prefix(int port, const char *prefix, char (*keys)[256], int max)
{
    for (int attempt = 0;; attempt++) {
        int fd = raw_connect(port);
        if (fd < 0)
            fail_msg("memcached on port %d cannot be reached", port);
        raw_send(fd, "lru_crawler metadump all\r\n", 26);
        size_t cap = 1 << 16, have = 0;
        char *buf = malloc(cap);
        assert_non_null(buf);
        for (;;) {
            if (have + 1 >= cap) {
                cap *= 2;
                buf = realloc(buf, cap);
                assert_non_null(buf);
            }
            ssize_t r = recv(fd, buf + have, cap - 1 - have, 0);
            if (r <= 0) {
                free(buf);
                close(fd);
                fail_msg("metadump from port %d: %s", port, r < 0 ? strerror(errno) : "closed");
                return -1;
            }
            have += (size_t)r;
            buf[have] = '\0';
            if ((have >= 5 && strcmp(buf + have - 5, "END\r\n") == 0) ||
                strncmp(buf, "BUSY", 4) == 0 || strncmp(buf, "ERROR", 5) == 0 ||
                strncmp(buf, "CLIENT_ERROR", 12) == 0)
                break;
        }
        close(fd);
        if (strncmp(buf, "BUSY", 4) == 0 && attempt < 50) { /* another crawl still running */
            free(buf);
            sleep_ms(100);
            continue;
        }
        if (strncmp(buf, "key=", 4) != 0 && strcmp(buf, "END\r\n") != 0) {
            char head[128];
            snprintf(head, sizeof head, "%s", buf);
            free(buf);
            fail_msg("metadump from port %d: %s", port, head);
            return -1;
        }
        int n = 0;
        for (char *line = buf; line && strncmp(line, "key=", 4) == 0;) {
            char *nl = strchr(line, '\n');
            char key[256];
            size_t k = 0;
            for (const char *p = line + 4; *p && *p != ' ' && *p != '\n' && k + 1 < sizeof key;
                 p++) {
                if (*p == '%' && isxdigit((unsigned char)p[1]) && isxdigit((unsigned char)p[2])) {
                    char hex[3] = {p[1], p[2], 0};
                    key[k++] = (char)strtol(hex, NULL, 16);
                    p += 2;
                } else {
                    key[k++] = *p;
                }
            }
            key[k] = '\0';
            if (strncmp(key, prefix, strlen(prefix)) == 0) {
                if (n < max)
                    snprintf(keys[n], sizeof keys[0], "%s", key);
                n++;
            }
            line = nl ? nl + 1 : NULL;
        }
        free(buf);
        return n;
    }
}

/* The keys in after[] that are not in before[]: how many, the first in one. */
static int new_keys(char (*before)[256], int nb, char (*after)[256], int na, char *one,
                    size_t len)
{
    int n = 0;
    for (int i = 0; i < na; i++) {
        bool old = false;
        for (int j = 0; j < nb && !old; j++)
            old = strcmp(after[i], before[j]) == 0;
        if (!old && n++ == 0)
            snprintf(one, len, "%.255s", after[i]);
    }
    return n;
}

/* Whether s is PREFIX "#" and 32 lowercase hex digits. */
static bool hashed_key(const char *s, const char *prefix)
{
    size_t pl = strlen(prefix);
    if (strncmp(s, prefix, pl) != 0 || s[pl] != '#' || strlen(s + pl + 1) != 32)
        return false;
    for (const char *p = s + pl + 1; *p; p++)
        if (!isxdigit((unsigned char)*p) || isupper((unsigned char)*p))
            return false;
    return true;
}

/* ---- the servers' processes ------------------------------------------------------- */

static int server_pid(const char *name)
{
    const char *dir = getenv("DLOCK_TEST_SERVERS");
    assert_non_null(dir);
    char path[512];
    snprintf(path, sizeof path, "%s/%s.pid", dir, name);
    FILE *f = fopen(path, "r");
    if (!f)
        fail_msg("%s: %s", path, strerror(errno));
    int pid = 0;
    if (fscanf(f, "%d", &pid) != 1)
        pid = 0;
    fclose(f);
    assert_true(pid > 1);
    return pid;
}

/* Until every thread of pid is stopped (kill(SIGSTOP) returns before they
 * all are: one thread takes the signal and stops the others, and a worker
 * may serve a request meanwhile): whether they were within limit_ms. */
static bool wait_stopped(int pid, int limit_ms)
{
    char cmd[256];
    snprintf(cmd, sizeof cmd,
             "for t in /proc/%d/task/*/stat; do cut -d' ' -f3 \"$t\"; done | grep -qv '^T$'", pid);
    int64_t end = now_ms() + limit_ms;
    do {
        if (shell_out(NULL, 0, cmd) == 1) /* grep found no thread that is not stopped */
            return true;
        sleep_ms(10);
    } while (now_ms() < end);
    return false;
}


/* Until memcached on port answers mn (at most limit_ms): whether it did. */
static bool wait_answers(int port, int limit_ms)
{
    int64_t end = now_ms() + limit_ms;
    do {
        int fd = raw_connect(port);
        if (fd >= 0) {
            char buf[16] = "";
            bool ok = send(fd, "mn\r\n", 4, MSG_NOSIGNAL) == 4 && recv(fd, buf, 4, MSG_WAITALL) == 4 &&
                      memcmp(buf, "MN\r\n", 4) == 0;
            close(fd);
            if (ok)
                return true;
        }
        sleep_ms(50);
    } while (now_ms() < end);
    return false;
}

/* kill -KILL of server NAME, then its command again (as srv_restart in
 * tests/servers.sh does), then until it answers. */
static void restart_server(const char *name, int port)
{
    const char *dir = getenv("DLOCK_TEST_SERVERS");
    assert_non_null(dir);
    static const char script[] =
        "d=$1; n=$2; kill -KILL \"$(cat \"$d/$n.pid\")\" || exit 3; sleep 0.05; "
        "eval \"$(cat \"$d/$n.cmd\") </dev/null >>$d/$n/out 2>&1 &\"; echo $! >\"$d/$n.pid\"";
    char qscript[1024], qdir[600], qname[128], cmd[2048], out[1024];
    shell_quote(qscript, sizeof qscript, script);
    shell_quote(qdir, sizeof qdir, dir);
    shell_quote(qname, sizeof qname, name);
    int n = snprintf(cmd, sizeof cmd, "bash -c %s restart %s %s 2>&1", qscript, qdir, qname);
    assert_true(n > 0 && (size_t)n < sizeof cmd);
    int rc = shell_out(out, sizeof out, cmd);
    if (rc != 0)
        fail_msg("restarting %s: exit %d: %s", name, rc, out);
    if (!wait_answers(port, 10000))
        fail_msg("%s did not answer within 10 s of its restart", name);
}

/* ---- helpers ---------------------------------------------------------------------- */

static dlock_lock *mk_opts(dlock_client *c, const char *name, dlock_kind kind, unsigned permits,
                           int ttl_ms, dlock_lost_cb cb)
{
    dlock_lock_opts o;
    dlock_lock_opts_init(&o);
    o.kind = kind;
    o.permits = permits;
    o.ttl_ms = ttl_ms;
    o.on_lost = cb;
    return lock_with(c, name, &o);
}

static dlock_lock *mk_ttl(dlock_client *c, const char *name, int ttl_ms, dlock_lost_cb cb)
{
    return mk_opts(c, name, DLOCK_EXCLUSIVE, 0, ttl_ms, cb);
}

/* base?query */
static void url_with(char *buf, size_t len, const char *base, const char *query)
{
    int n = snprintf(buf, len, "%s%c%s", base, strchr(base, '?') ? '&' : '?', query);
    assert_true(n > 0 && (size_t)n < len);
}

static void key_of(char *buf, size_t len, const char *prefix, const char *name)
{
    int n = snprintf(buf, len, "%s%s", prefix, name);
    assert_true(n > 0 && (size_t)n < len);
}

/* Until f(port, key) == want (at most limit_ms): ms waited, -1 if never. */
static int64_t wait_exists(int port, const char *key, bool want, int limit_ms)
{
    int64_t t0 = now_ms();
    do {
        if (item_exists(port, key) == want)
            return now_ms() - t0;
        sleep_ms(20);
    } while (now_ms() - t0 < limit_ms);
    return -1;
}

/* ---- 1. owner-checked renewal and release --------------------------------------- */

/* The holder's item deleted from under it and the lock taken by another
 * client: the old holder's next renewal (a compare-and-swap on its CAS)
 * answers ELOST — the state goes LOST, the loss descriptor becomes
 * readable, the callback runs once — and neither that renewal nor its
 * release touches the new holder's item. An item deleted and not taken
 * again is not re-created by the renewal either. */
static void test_renewal_after_delete(void **state)
{
    (void)state;
    char name[64], key[128];
    unique(name, sizeof name, "owner");
    key_of(key, sizeof key, "dlock:", name);
    dlock_client *c1 = open_url(mc_url), *c2 = open_url(mc_url);
    atomic_store(&lost_calls, 0);
    dlock_lock *h = mk_ttl(c1, name, 1000, count_lost);
    acquire_ok(h, 0);
    uint64_t htok = dlock_token(h);
    assert_true(item_exists(port1, key));

    /* another client deletes the item and takes the lock (a long lease: its
     * item keeps its CAS while we look) */
    assert_true(item_delete(port1, key));
    dlock_lock *o = mk_ttl(c2, name, 30000, NULL);
    acquire_ok(o, 0);
    uint64_t otok = dlock_token(o);
    assert_true(otok > htok);
    assert_int_equal(item_flag(port1, key, 'c'), (long long)otok);

    int64_t told = wait_lost(h, 3000);
    fprintf(stderr, "# item deleted and taken by another: holder told after %" PRId64 " ms: %s\n",
            told, dlock_lock_errmsg(h));
    assert_true(told >= 0);
    assert_int_equal(dlock_state(h), DLOCK_STATE_LOST);
    wait_lost_calls(1, 2000);
    assert_int_equal(atomic_load(&lost_calls), 1);
    /* the new holder's item is as it was */
    assert_int_equal(dlock_state(o), DLOCK_STATE_HELD);
    assert_int_equal(item_flag(port1, key, 'c'), (long long)otok);
    int rc = dlock_release(h);
    fprintf(stderr, "# the old holder's release: %s: %s\n", dlock_err_name(rc),
            dlock_lock_errmsg(h));
    assert_int_equal(rc, DLOCK_ELOST);
    assert_int_equal(dlock_state(h), DLOCK_STATE_IDLE);
    assert_int_equal(item_flag(port1, key, 'c'), (long long)otok);
    assert_int_equal(dlock_state(o), DLOCK_STATE_HELD);

    /* A release (no renewal due: a 30 s lease) of a lock whose item was
     * deleted and taken by another: ELOST, and the other's item stays. */
    assert_int_equal(dlock_release(o), 0);
    assert_false(item_exists(port1, key));
    dlock_lock *h2 = mk_ttl(c1, name, 30000, NULL);
    acquire_ok(h2, 0);
    assert_true(item_delete(port1, key));
    acquire_ok(o, 0);
    otok = dlock_token(o);
    rc = dlock_release(h2);
    fprintf(stderr, "# release of an item another took since: %s: %s\n", dlock_err_name(rc),
            dlock_lock_errmsg(h2));
    assert_int_equal(rc, DLOCK_ELOST);
    assert_int_equal(dlock_state(h2), DLOCK_STATE_IDLE);
    assert_int_equal(item_flag(port1, key, 'c'), (long long)otok);
    assert_int_equal(dlock_state(o), DLOCK_STATE_HELD);
    assert_int_equal(dlock_release(o), 0);
    assert_false(item_exists(port1, key));

    /* Deleted and not taken again: the renewal finds nothing and does not
     * make the item again. */
    acquire_ok(h, 0);
    assert_true(item_delete(port1, key));
    told = wait_lost(h, 3000);
    fprintf(stderr, "# item deleted, nobody took it: holder told after %" PRId64 " ms\n", told);
    assert_true(told >= 0);
    assert_int_equal(dlock_state(h), DLOCK_STATE_LOST);
    sleep_ms(400); /* past another renewal period (ttl/3) */
    assert_false(item_exists(port1, key));
    assert_int_equal(dlock_release(h), DLOCK_ELOST);
    assert_false(item_exists(port1, key));

    dlock_lock_free(h2);
    dlock_lock_free(o);
    dlock_lock_free(h);
    dlock_client_close(c2);
    dlock_client_close(c1);
}

/* The paused holder, in a process of its own (this program run as
 * `--hold URL NAME TTL_MS`): takes NAME, says its token on standard output,
 * stops itself (SIGSTOP); once continued, says how long it waited to be
 * told of the loss, its state then and what its release answered. */
static int holder_main(const char *url, const char *name, int ttl_ms)
{
    dlock_client *c = NULL;
    if (dlock_client_open(&c, url, NULL)) {
        printf("error open: %s\n", dlock_client_errmsg(NULL));
        return 1;
    }
    dlock_lock_opts o;
    dlock_lock_opts_init(&o);
    o.ttl_ms = ttl_ms;
    dlock_lock *l = NULL;
    int rc = dlock_lock_new(&l, c, name, &o);
    if (!rc)
        rc = dlock_acquire(l, 0);
    if (rc) {
        printf("error acquire: %s\n", l ? dlock_lock_errmsg(l) : dlock_client_errmsg(c));
        return 1;
    }
    printf("token %" PRIu64 "\n", dlock_token(l));
    fflush(stdout);
    raise(SIGSTOP);
    int64_t t0 = now_ms();
    struct pollfd p = {.fd = dlock_lost_fd(l), .events = POLLIN};
    int n;
    while ((n = poll(&p, 1, 5000)) < 0 && errno == EINTR) {
    }
    long long told = n == 1 ? (long long)(now_ms() - t0) : -1;
    int st = (int)dlock_state(l);
    rc = dlock_release(l);
    printf("lost %lld state %d release %s\n", told, st, dlock_err_name(rc));
    fflush(stdout);
    dlock_lock_free(l);
    dlock_client_close(c);
    return 0;
}

/* A line from fd within limit_ms (without its newline): whether one came. */
static bool read_line(int fd, char *buf, size_t cap, int limit_ms)
{
    size_t n = 0;
    int64_t end = now_ms() + limit_ms;
    while (n + 1 < cap) {
        int left = (int)(end - now_ms());
        struct pollfd p = {.fd = fd, .events = POLLIN};
        if (left <= 0 || poll(&p, 1, left) != 1)
            break;
        char ch;
        if (read(fd, &ch, 1) != 1)
            break;
        if (ch == '\n') {
            buf[n] = '\0';
            return true;
        }
        buf[n++] = ch;
    }
    buf[n] = '\0';
    return false;
}

static void __attribute__((format(printf, 2, 3))) child_fail(pid_t pid, const char *fmt, ...)
{
    char msg[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    kill(pid, SIGKILL);
    kill(pid, SIGCONT);
    waitpid(pid, NULL, 0);
    fail_msg("%s", msg);
}

/* The holder of NAME with a lease of ttl_ms, in a process of its own
 * (holder_main), once it has taken the lock and stopped itself: its pid,
 * its token in *token, its standard output in *rfd (for what it says once
 * continued). */
static pid_t start_stopped_holder(const char *name, const char *ttl_ms, int *rfd,
                                  uint64_t *token)
{
    char line[256];
    int pfd[2];
    assert_int_equal(pipe2(pfd, O_CLOEXEC), 0);
    posix_spawn_file_actions_t fa;
    posix_spawn_file_actions_init(&fa);
    posix_spawn_file_actions_adddup2(&fa, pfd[1], 1);
    char *argv[] = {(char *)self_path, "--hold", (char *)mc_url, (char *)name, (char *)ttl_ms,
                    NULL};
    pid_t pid;
    int rc = posix_spawn(&pid, self_path, &fa, NULL, argv, environ);
    posix_spawn_file_actions_destroy(&fa);
    close(pfd[1]);
    if (rc != 0) {
        close(pfd[0]);
        fail_msg("spawning %s: %s", self_path, strerror(rc));
    }
    if (!read_line(pfd[0], line, sizeof line, 10000) || strncmp(line, "token ", 6) != 0) {
        close(pfd[0]);
        child_fail(pid, "the holder process said \"%s\"", line);
    }
    *token = strtoull(line + 6, NULL, 10);
    int st = 0;
    int64_t end = now_ms() + 10000;
    while (waitpid(pid, &st, WUNTRACED | WNOHANG) == 0 && now_ms() < end)
        sleep_ms(10);
    if (!WIFSTOPPED(st)) {
        close(pfd[0]);
        child_fail(pid, "the holder process did not stop");
    }
    *rfd = pfd[0];
    return pid;
}

/* A holder stopped (SIGSTOP: a paused VM, a long GC) with a 1 s lease: its
 * item expires on the server (3 s: ceil(1 s) + 2), another client takes the
 * lock; the holder, continued, is told it lost the lock (its clock says the
 * lease is over), and its release answers ELOST without touching the new
 * holder's item. */
static void test_paused_holder_expires(void **state)
{
    (void)state;
    char name[64], key[128], line[256];
    unique(name, sizeof name, "paused");
    key_of(key, sizeof key, "dlock:", name);
    int hfd;
    uint64_t htok;
    pid_t pid = start_stopped_holder(name, "1000", &hfd, &htok);
    int st = 0, rc;
    int64_t t0 = now_ms();
    long long cas = item_flag(port1, key, 'c');
    long long ttl = item_flag(port1, key, 't');
    int64_t expired = wait_exists(port1, key, false, 8000);
    fprintf(stderr,
            "# holder stopped (token %" PRIu64 ", item CAS %lld, TTL %lld s): item gone after "
            "%" PRId64 " ms\n",
            htok, cas, ttl, expired < 0 ? -1 : now_ms() - t0);
    if (expired < 0 || cas != (long long)htok) {
        close(hfd);
        child_fail(pid, "the stopped holder's item (CAS %lld, token %" PRIu64 ") %s", cas, htok,
                   expired < 0 ? "did not expire within 8 s" : "is not its token");
    }
    dlock_client *c2 = open_url(mc_url);
    dlock_lock *o = mk_ttl(c2, name, 30000, NULL);
    rc = dlock_acquire(o, 0);
    uint64_t otok = dlock_token(o);
    kill(pid, SIGCONT);
    if (rc != 0) {
        close(hfd);
        child_fail(pid, "the lock of a stopped holder whose item expired: %s: %s",
                   dlock_err_name(rc), dlock_lock_errmsg(o));
    }
    bool said = read_line(hfd, line, sizeof line, 10000);
    close(hfd);
    if (!said)
        child_fail(pid, "the continued holder said nothing (\"%s\")", line);
    assert_int_equal(waitpid(pid, &st, 0), pid);
    fprintf(stderr, "# continued holder: %s\n", line);
    assert_true(WIFEXITED(st) && WEXITSTATUS(st) == 0);
    long long told = -2;
    int hstate = -1;
    char rel[32] = "";
    if (sscanf(line, "lost %lld state %d release %31s", &told, &hstate, rel) != 3)
        fail_msg("the holder said \"%s\"", line);
    assert_true(told >= 0 && told < 5000);
    assert_int_equal(hstate, DLOCK_STATE_LOST);
    assert_string_equal(rel, "ELOST");
    /* the new holder's item was not touched */
    assert_int_equal(item_flag(port1, key, 'c'), (long long)otok);
    assert_int_equal(dlock_state(o), DLOCK_STATE_HELD);
    assert_true(otok > htok);
    assert_int_equal(dlock_release(o), 0);
    assert_false(item_exists(port1, key));
    dlock_lock_free(o);
    dlock_client_close(c2);
}

/* ---- 2. the item's TTL on the server's clock -------------------------------------- */

/* The item lives ceil(ttl) + 2 s (the server counts whole seconds on a clock
 * a timer ticks: it can only outlive the lease); renewals keep it alive past
 * the lease: a 1.5 s lease held 4.5 s is still held, its item there with a
 * new CAS and the token written into its value. */
static void test_item_ttl(void **state)
{
    (void)state;
    static const struct {
        int ttl_ms;
        long long want_s;
    } cases[] = {{1000, 3}, {1500, 4}, {2000, 4}, {2001, 5}, {30000, 32}, {90500, 93}};
    dlock_client *c = open_url(mc_url);
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        char name[64], key[128];
        unique(name, sizeof name, "ttl");
        key_of(key, sizeof key, "dlock:", name);
        dlock_lock *l = mk_ttl(c, name, cases[i].ttl_ms, NULL);
        acquire_ok(l, 0);
        long long t = item_flag(port1, key, 't');
        fprintf(stderr, "# lease %d ms: item TTL %lld s (expected %lld)\n", cases[i].ttl_ms, t,
                cases[i].want_s);
        /* the server's second may tick between the set and our look */
        if (t != cases[i].want_s && t != cases[i].want_s - 1)
            fail_msg("lease %d ms: the item lives %lld s, not %lld", cases[i].ttl_ms, t,
                     cases[i].want_s);
        assert_int_equal(dlock_release(l), 0);
        assert_false(item_exists(port1, key));
        dlock_lock_free(l);
    }

    char name[64], key[128], val[1024];
    unique(name, sizeof name, "ttl-held");
    key_of(key, sizeof key, "dlock:", name);
    dlock_lock *l = mk_ttl(c, name, 1500, NULL);
    acquire_ok(l, 0);
    uint64_t token = dlock_token(l);
    assert_int_equal(item_flag(port1, key, 'c'), (long long)token);
    assert_true(item_value(port1, key, val, sizeof val));
    /* before the first renewal the value's token is 0: its CAS is the token */
    char owner[64];
    long long since = 0;
    unsigned long long vtok = 99;
    assert_int_equal(sscanf(val, "%63s %lld %llu", owner, &since, &vtok), 3);
    assert_int_equal(strlen(owner), 32);
    assert_int_equal(vtok, 0);
    char me[64];
    snprintf(me, sizeof me, " pid %ld on ", (long)getpid());
    if (!strstr(val, me))
        fail_msg("the item's value does not name its holder (\"%s\"): %s", me, val);

    sleep_ms(4500);
    assert_int_equal(dlock_state(l), DLOCK_STATE_HELD);
    assert_true(dlock_valid_ms(l) > 0);
    long long cas = item_flag(port1, key, 'c'), t = item_flag(port1, key, 't');
    assert_true(item_value(port1, key, val, sizeof val));
    fprintf(stderr, "# 1.5 s lease held 4.5 s: item CAS %lld (token %" PRIu64 "), TTL %lld s: %s\n",
            cas, token, t, val);
    assert_true(cas > (long long)token); /* renewed: compare-and-swap gave a new CAS */
    assert_true(t >= 2 && t <= 4);
    char owner2[64];
    long long since2 = 0;
    assert_int_equal(sscanf(val, "%63s %lld %llu", owner2, &since2, &vtok), 3);
    assert_string_equal(owner2, owner);
    assert_int_equal(since2, since);
    assert_int_equal(vtok, token); /* written from the first renewal on */
    assert_int_equal(dlock_token(l), token);
    assert_int_equal(dlock_release(l), 0);
    assert_false(item_exists(port1, key));
    dlock_lock_free(l);
    dlock_client_close(c);
}

/* memcached's clock (STAT uptime): the whole seconds it stamps expiry with. */
static long long server_uptime(int port)
{
    int fd = raw_connect(port);
    if (fd < 0)
        return -1;
    raw_send(fd, "stats\r\n", 7);
    char buf[8192];
    size_t have = 0;
    buf[0] = '\0';
    while (!strstr(buf, "END\r\n") && have + 1 < sizeof buf) {
        ssize_t r = recv(fd, buf + have, sizeof buf - 1 - have, 0);
        if (r <= 0)
            break;
        have += (size_t)r;
        buf[have] = '\0';
    }
    close(fd);
    const char *u = strstr(buf, "STAT uptime ");
    return u ? strtoll(u + 12, NULL, 10) : -1;
}

static void sleep_until_ms(int64_t t)
{
    int64_t left = t - now_ms();
    if (left > 0)
        sleep_ms(left);
}

/* One staging of a late tick (test_late_tick_keeps_the_lease): whether it
 * was staged (false: the machine was too slow for its timings); a lease
 * that ended early fails the test. */
static bool late_tick_round(int pid, dlock_client *c)
{
    /* The tick's phase: the server stopped until 0.9 s past a second, at
     * least 1.1 s, so that its overdue tick runs then, stamping second X. */
    assert_int_equal(kill(pid, SIGSTOP), 0);
    assert_true(wait_stopped(pid, 5000));
    int64_t x = (now_ms() + 1100) / 1000 * 1000 + 900; /* X.9 s */
    sleep_until_ms(x);
    assert_int_equal(kill(pid, SIGCONT), 0);
    x -= 900;
    /* A holder takes the lock in second X + 1 (its item stamped X + its
     * TTL) and stops: no renewal. */
    sleep_until_ms(x + 1300);
    long long up0 = server_uptime(port1);
    char name[64];
    unique(name, sizeof name, "late-tick");
    int hfd;
    uint64_t htok;
    int64_t spawned = now_ms();
    pid_t holder = start_stopped_holder(name, "1000", &hfd, &htok);
    close(hfd);
    dlock_lock *other = mk_ttl(c, name, 30000, NULL);
    /* The server stopped across its next tick (due at X + 1.9), until
     * X + 2.05: the tick runs 150 ms late and moves the clock to X + 2. */
    assert_int_equal(kill(pid, SIGSTOP), 0);
    bool stopped = wait_stopped(pid, 5000);
    bool staged = stopped && now_ms() < x + 1850;
    if (staged)
        sleep_until_ms(x + 2050);
    assert_int_equal(kill(pid, SIGCONT), 0);
    assert_true(stopped);
    int64_t end = now_ms() + 8000;
    int rc;
    while ((rc = dlock_acquire(other, 0)) == DLOCK_EBUSY && now_ms() < end)
        sleep_ms(5);
    int64_t got = now_ms();
    long long up1 = server_uptime(port1);
    kill(holder, SIGKILL);
    kill(holder, SIGCONT);
    waitpid(holder, NULL, 0);
    fprintf(stderr,
            "# %s: holder started %" PRId64 " ms past second X; server's clock %lld, then "
            "%lld; another client took the lock %" PRId64 " ms after the holder started "
            "(%s)\n",
            staged ? "late tick staged" : "not staged (too slow)", spawned - x, up0, up1,
            got - spawned, dlock_err_name(rc));
    if (rc != 0)
        fail_msg("the lock of a stopped holder whose lease ended: %s: %s", dlock_err_name(rc),
                 dlock_lock_errmsg(other));
    assert_int_equal(dlock_release(other), 0);
    dlock_lock_free(other);
    /* The holder's lease counts from before its take, which came after it
     * was started: nobody else may hold the lock within 1 s of that. */
    if (got - spawned < 1000)
        fail_msg("a late tick of the server's clock ended a 1 s lease early: another client "
                 "took the lock %" PRId64 " ms after its holder was started",
                 got - spawned);
    return staged;
}

/* A late tick of memcached's clock does not end a lease early. The server
 * stamps expiry from a clock of whole seconds that a timer sets once a
 * second, re-arming itself a second after each run; a tick that runs late
 * across a second boundary moves the clock by two, and an item written
 * before it loses that second. Staged (late_tick_round): a 1 s lease taken
 * just after a tick, a stopped holder (no renewal), the server's next tick
 * 150 ms late. With an item of ceil(ttl) + 1 s, the lock was taken again
 * about 0.75 s into the lease; with ceil(ttl) + 2 s, about 1.75 s. */
static void test_late_tick_keeps_the_lease(void **state)
{
    (void)state;
    int pid = server_pid("memcached");
    dlock_client *c = open_url(mc_url);
    int staged = 0;
    for (int round = 0; round < 3 && staged < 2; round++)
        staged += late_tick_round(pid, c) ? 1 : 0;
    dlock_client_close(c);
    if (!staged)
        skip();
}

/* The longest leases: ttl_ms up to INT_MAX (24.8 days) must make an item
 * that lives at least as long — never one that has expired already (a
 * negative TTL: memcached drops the item at once, and a second client
 * would take the lock while the first holds it). */
static void test_longest_lease(void **state)
{
    (void)state;
    static const int ttls[] = {2147482648, 2147482649, 2147483647};
    dlock_client *c1 = open_url(mc_url), *c2 = open_url(mc_url);
    char bad[512] = "";
    for (size_t i = 0; i < sizeof ttls / sizeof ttls[0]; i++) {
        char name[64], key[128];
        unique(name, sizeof name, "longest");
        key_of(key, sizeof key, "dlock:", name);
        dlock_lock *l = mk_ttl(c1, name, ttls[i], NULL), *o = mk(c2, name, NULL, NULL);
        acquire_ok(l, 0);
        long long t = item_flag(port1, key, 't');
        long long want = ((long long)ttls[i] + 999) / 1000 + 2;
        int rc = dlock_acquire(o, 0);
        fprintf(stderr, "# lease %d ms: item TTL %lld s (expected %lld); another client's try: %s\n",
                ttls[i], t, want, dlock_err_name(rc));
        if ((rc != DLOCK_EBUSY || t < want - 1) && !bad[0])
            snprintf(bad, sizeof bad,
                     "a lease of %d ms: the item's TTL is %lld s (item %s), and another client's "
                     "acquire(0) answered %s while it was held",
                     ttls[i], t, t == -2 ? "gone" : "there", dlock_err_name(rc));
        if (rc == 0)
            (void)dlock_release(o);
        (void)dlock_release(l);
        dlock_lock_free(o);
        dlock_lock_free(l);
    }
    dlock_client_close(c2);
    dlock_client_close(c1);
    if (bad[0])
        fail_msg("%s (ttl_seconds: (ttl_ms + 999) overflows int)", bad);
}

/* ---- 3. a server restart ---------------------------------------------------------- */

static const dlock_backend_info *backend_info(const char *name)
{
    for (size_t i = 0; i < dlock_backend_count(); i++) {
        const dlock_backend_info *b = dlock_backend_at(i);
        if (strcmp(b->name, name) == 0)
            return b;
    }
    fail_msg("no backend %s in the registry", name);
    return NULL;
}

/* kill -9 and start again: every item is gone. The holder learns at its
 * next renewal (its compare-and-swap finds nothing), within about its
 * lease; the lock can be taken again at once, by a new client and by one
 * opened before the restart (whose pooled connections died); tokens are
 * the items' CAS values, whose counter the restart reset: weak fencing. */
static void test_server_restart(void **state)
{
    (void)state;
    if (!getenv("DLOCK_TEST_SERVERS"))
        skip();
    const dlock_backend_info *bi = backend_info("memcached");
    assert_true(bi->available);
    assert_true(bi->caps & DLOCK_CAP_FENCING_WEAK);
    assert_true(bi->caps & DLOCK_CAP_LEASE);
    assert_false(bi->caps & DLOCK_CAP_SHARED);
    assert_non_null(strstr(bi->fencing, "restart"));

    char name[64], key[128], other[64];
    unique(name, sizeof name, "restart");
    unique(other, sizeof other, "restart-other");
    key_of(key, sizeof key, "dlock:", name);
    dlock_client *c1 = open_url(mc_url);
    assert_true(dlock_client_caps(c1) & DLOCK_CAP_FENCING_WEAK);
    atomic_store(&lost_calls, 0);
    const int ttl = 2000;
    dlock_lock *h = mk_ttl(c1, name, ttl, count_lost);
    acquire_ok(h, 0);
    uint64_t token = dlock_token(h);
    /* the token is the item's CAS (read before the first renewal, at ttl/3) */
    assert_int_equal(item_flag(port1, key, 'c'), (long long)token);
    /* a pooled idle connection of c1's to the server */
    dlock_lock *h2 = mk(c1, other, NULL, NULL);
    acquire_ok(h2, 0);
    assert_int_equal(dlock_release(h2), 0);

    int64_t t0 = now_ms();
    restart_server("memcached", port1);
    int64_t up = now_ms() - t0;
    int64_t told = wait_lost(h, ttl + 5000);
    int64_t since_kill = now_ms() - t0;
    fprintf(stderr,
            "# restart took %" PRId64 " ms; the holder (lease %d ms) was told %" PRId64
            " ms after the kill: %s\n",
            up, ttl, since_kill, dlock_lock_errmsg(h));
    assert_true(told >= 0);
    assert_true(since_kill <= ttl + 2500);
    assert_int_equal(dlock_state(h), DLOCK_STATE_LOST);
    wait_lost_calls(1, 2000);
    assert_int_equal(atomic_load(&lost_calls), 1);
    assert_false(item_exists(port1, key));
    int rc = dlock_release(h);
    fprintf(stderr, "# release after the restart: %s: %s\n", dlock_err_name(rc),
            dlock_lock_errmsg(h));
    assert_int_equal(rc, DLOCK_ELOST);
    assert_int_equal(dlock_state(h), DLOCK_STATE_IDLE);

    /* a new client takes it; the token is the new item's CAS */
    dlock_client *c2 = open_url(mc_url);
    dlock_lock *n2 = mk(c2, name, NULL, NULL);
    acquire_ok(n2, 0);
    uint64_t t2 = dlock_token(n2);
    fprintf(stderr, "# token before the restart %" PRIu64 ", after %" PRIu64 "%s\n", token, t2,
            t2 < token ? " (lower: weak fencing)" : "");
    assert_true(t2 > 0);
    assert_int_equal(item_flag(port1, key, 'c'), (long long)t2);
    dlock_info info = inspect(c1, name);
    assert_int_equal(info.held, 1);
    assert_int_equal(info.token, t2);
    assert_int_equal(dlock_release(n2), 0);

    /* the client opened before the restart works at once */
    rc = dlock_acquire(h2, 0);
    if (rc != 0)
        fail_msg("a client opened before the restart: %s: %s", dlock_err_name(rc),
                 dlock_lock_errmsg(h2));
    assert_int_equal(dlock_release(h2), 0);
    acquire_ok(h, 0);
    assert_int_equal(dlock_release(h), 0);
    assert_int_equal(atomic_load(&lost_calls), 1);
    dlock_lock_free(n2);
    dlock_lock_free(h2);
    dlock_lock_free(h);
    dlock_client_close(c2);
    dlock_client_close(c1);
}

/* ---- 4. eviction under memory pressure -------------------------------------------- */

/* Pipelined quiet sets (ms KEY S T0 q) of n items with keys of klen bytes
 * ("PFX" and a number) and values of vlen bytes, on one connection; then a
 * no-op to know they were all read. The errors the server answered are
 * counted into *errors. */
static void fill(int fd, const char *pfx, long first, long n, size_t klen, size_t vlen,
                 long *errors)
{
    size_t per = klen + vlen + 64;
    char *batch = malloc((size_t)n * per + 8);
    char *value = malloc(vlen + 1);
    assert_non_null(batch);
    assert_non_null(value);
    memset(value, 'v', vlen);
    value[vlen] = '\0';
    size_t off = 0;
    for (long i = 0; i < n; i++) {
        char k[300];
        int kl = snprintf(k, sizeof k, "%s%0*ld", pfx, (int)(klen - strlen(pfx)), first + i);
        assert_true(kl > 0 && (size_t)kl < sizeof k);
        off += (size_t)sprintf(batch + off, "ms %s %zu T0 q\r\n", k, vlen);
        memcpy(batch + off, value, vlen);
        off += vlen;
        memcpy(batch + off, "\r\n", 2);
        off += 2;
    }
    memcpy(batch + off, "mn\r\n", 4);
    off += 4;
    raw_send(fd, batch, off);
    free(batch);
    free(value);
    /* one line per error (SERVER_ERROR out of memory ...), then MN */
    char buf[4096], last4[5] = "";
    long lines = 0;
    while (strcmp(last4, "MN\r\n") != 0) {
        ssize_t r = recv(fd, buf, sizeof buf, 0);
        if (r <= 0)
            fail_msg("filling memcached: %s", r < 0 ? strerror(errno) : "closed");
        for (ssize_t i = 0; i < r; i++) {
            lines += buf[i] == '\n';
            memmove(last4, last4 + (strlen(last4) == 4), 4);
            size_t l = strlen(last4);
            last4[l] = buf[i];
            last4[l + 1] = '\0';
        }
    }
    *errors += lines - 1;
}

/* A lock on the 2 MB server, then the server filled from a raw client until
 * the lock's item is evicted: first with large items (another slab class:
 * memcached evicts per class, so these may leave it alone), then with items
 * of the lock item's own size. The holder is told at its next renewal. */
static void test_eviction(void **state)
{
    (void)state;
    if (!small_url)
        skip();
    char name[64], key[128], val[1024];
    unique(name, sizeof name, "evict");
    key_of(key, sizeof key, "dlock:", name);
    dlock_client *c = open_url(small_url);
    atomic_store(&lost_calls, 0);
    const int ttl = 3000;
    dlock_lock *h = mk_ttl(c, name, ttl, count_lost);
    acquire_ok(h, 0);
    uint64_t token = dlock_token(h);
    /* after the first renewal the value has its final length (the token in it) */
    int64_t end = now_ms() + ttl;
    while (item_flag(small_port, key, 'c') == (long long)token && now_ms() < end)
        sleep_ms(50);
    assert_true(item_value(small_port, key, val, sizeof val));
    size_t klen = strlen(key), vlen = strlen(val);

    int fd = raw_connect(small_port);
    assert_true(fd >= 0);
    long errors = 0;
    /* 1. large items: 40 MB in 256 KB values through a 2 MB cache */
    int64_t t0 = now_ms();
    for (long i = 0; i < 160 && item_exists(small_port, key); i += 8)
        fill(fd, "big:", i, 8, 16, 256 * 1024, &errors);
    bool big_evicted = !item_exists(small_port, key);
    fprintf(stderr, "# 40 MB of 256 KB items in %" PRId64 " ms: the lock's item %s (%ld errors)\n",
            now_ms() - t0, big_evicted ? "evicted" : "still there (another slab class)", errors);
    /* 2. items of its own size (key %zu bytes, value %zu bytes), in batches */
    int64_t t1 = now_ms();
    long items = 0;
    while (!big_evicted && item_exists(small_port, key) && now_ms() - t1 < 20000) {
        fill(fd, "f", items, 500, klen, vlen, &errors);
        items += 500;
    }
    close(fd);
    bool evicted = !item_exists(small_port, key);
    int64_t t_evict = now_ms();
    fprintf(stderr,
            "# %ld items of the lock item's size (key %zu, value %zu bytes) in %" PRId64
            " ms: the lock's item %s (%ld errors)\n",
            items, klen, vlen, t_evict - t1, evicted ? "evicted" : "STILL THERE", errors);
    if (!evicted)
        fail_msg("the 2 MB server did not evict the lock's item within 20 s of filling");
    int64_t told = wait_lost(h, ttl + 2000);
    fprintf(stderr, "# evicted: the holder (lease %d ms, renewals every %d ms) was told after %" PRId64
            " ms: %s\n",
            ttl, ttl / 3, told, dlock_lock_errmsg(h));
    assert_true(told >= 0);
    assert_true(told <= ttl + 500);
    assert_int_equal(dlock_state(h), DLOCK_STATE_LOST);
    wait_lost_calls(1, 2000);
    assert_int_equal(atomic_load(&lost_calls), 1);
    assert_int_equal(dlock_release(h), DLOCK_ELOST);
    /* the name works again */
    dlock_lock *o = mk(c, name, NULL, NULL);
    acquire_ok(o, 0);
    assert_true(item_exists(small_port, key));
    assert_int_equal(dlock_release(o), 0);
    dlock_lock_free(o);
    dlock_lock_free(h);
    dlock_client_close(c);
}

/* ---- 5. names, keys and the prefix ------------------------------------------------ */

#define MAX_KEYS 4096

/* A name locked through c (and busy for c2): the key it was stored under,
 * the one new key under PREFIX that metadump shows, other than the known[]
 * ones. (The LRU crawler can miss an item moving between its queues while it
 * walks them: snapshots are taken twice and looked at again if need be.) */
static void lock_and_find_key(dlock_client *c, dlock_client *c2, const char *prefix,
                              const char *name, char (*known)[256], int nknown, dlock_lock **out,
                              char *key, size_t klen)
{
    static char before[2 * MAX_KEYS][256], after[MAX_KEYS][256];
    int nb = keys_with_prefix(port1, prefix, before, MAX_KEYS);
    assert_true(nb < MAX_KEYS);
    nb += keys_with_prefix(port1, prefix, before + nb, MAX_KEYS);
    assert_true(nb < 2 * MAX_KEYS);
    for (int i = 0; i < nknown; i++)
        snprintf(before[nb++], sizeof before[0], "%.255s", known[i]);
    dlock_lock *l = mk(c, name, NULL, NULL);
    acquire_ok(l, 0);
    dlock_lock *o = mk(c2, name, NULL, NULL);
    int rc = dlock_acquire(o, 0);
    if (rc != DLOCK_EBUSY)
        fail_msg("\"%s\" held, another client's try: %s: %s", name, dlock_err_name(rc),
                 dlock_lock_errmsg(o));
    dlock_lock_free(o);
    int n = 0;
    for (int attempt = 0; attempt < 5; attempt++) {
        int na = keys_with_prefix(port1, prefix, after, MAX_KEYS);
        assert_true(na < MAX_KEYS);
        n = new_keys(before, nb, after, na, key, klen);
        if (n == 1)
            break;
        for (int i = 0; i < na; i++) {
            bool old = false;
            for (int j = 0; j < nb && !old; j++)
                old = strcmp(after[i], before[j]) == 0;
            if (!old)
                fprintf(stderr, "# \"%.40s\": new key %s\n", name, after[i]);
        }
        sleep_ms(100);
    }
    if (n != 1)
        fail_msg("\"%s\" locked: %d new keys under \"%s\" on the server, not 1", name, n, prefix);
    *out = l;
}

/* Names that are not valid memcached keys (spaces), or that carry what
 * could confuse a key ('%', ':', '#', quotes, brackets), 200-byte names,
 * 200-byte names that differ only in their last byte, under the default
 * prefix and under prefixes that make keys of 244 bytes (the longest kept
 * as they are) and 245 (hashed): each maps to one valid key of its own —
 * PREFIX NAME, or PREFIX "#" and 32 hex digits for a name with a space or
 * too long — and every one of them is a lock of its own, held all at once. */
static void test_odd_names(void **state)
{
    (void)state;
    char tag[64];
    unique(tag, sizeof tag, "");
    char long1[201], long2[201];
    memset(long1, 'L', 200);
    memcpy(long1, tag + 1, strlen(tag + 1));
    long1[200] = '\0';
    memcpy(long2, long1, sizeof long2);
    long2[199] = 'M';
    char p44[45], p45[46], p48[49];
    memset(p44, 'p', 44);
    p44[43] = ':';
    p44[44] = '\0';
    memset(p45, 'q', 45);
    p45[44] = ':';
    p45[45] = '\0';
    memset(p48, 'r', 48);
    p48[47] = ':';
    p48[48] = '\0';
    struct {
        const char *prefix;
        char name[256];
        bool hashed;
    } cases[] = {
        {"dlock:", "a name with spaces", true},
        {"dlock:", "a name with spaces ", true}, /* + tag: differs from the one above */
        {"dlock:", "100%-done-%41%20", false},
        {"dlock:", "x:#{}[]()*&^$@!~`'\"<>,;=+|?", false},
        {"dlock:", "", false}, /* long1 */
        {"dlock:", "", false}, /* long2: differs from long1 in its last byte only */
        {p44, "", false},      /* 44 + 200 = 244-byte keys, differing at byte 244 */
        {p44, "", false},
        {p45, "", true}, /* 245 + "/NNNN" would pass 250: hashed */
        {p45, "", true},
        {p48, "a b", true},
        {p48, "short", false},
    };
    enum { N = sizeof cases / sizeof cases[0] };
    for (int i = 0; i < N; i++) {
        if (i == 4 || i == 6 || i == 8)
            snprintf(cases[i].name, sizeof cases[i].name, "%s", long1);
        else if (i == 5 || i == 7 || i == 9)
            snprintf(cases[i].name, sizeof cases[i].name, "%s", long2);
        else
            snprintf(cases[i].name + strlen(cases[i].name),
                     sizeof cases[i].name - strlen(cases[i].name), "%s", tag);
        char why[128];
        if (dlock_name_valid(cases[i].name, why, sizeof why) != 0)
            fail_msg("%s: %s", cases[i].name, why);
    }
    dlock_client *cl[3][2];
    const char *prefixes[3] = {"dlock:", p44, p45};
    for (int p = 0; p < 3; p++)
        for (int j = 0; j < 2; j++) {
            char url[512], q[80];
            snprintf(q, sizeof q, "prefix=%s", prefixes[p]);
            url_with(url, sizeof url, mc_url, q);
            cl[p][j] = open_url(p == 0 ? mc_url : url);
        }
    char url48[512], q48[80];
    snprintf(q48, sizeof q48, "prefix=%s", p48);
    url_with(url48, sizeof url48, mc_url, q48);
    dlock_client *c48 = open_url(url48), *c48b = open_url(url48);

    dlock_lock *ls[N];
    char keys[N][256];
    for (int i = 0; i < N; i++) { /* all held at once: no two share a key */
        dlock_client *c = c48, *c2 = c48b;
        for (int p = 0; p < 3; p++)
            if (strcmp(cases[i].prefix, prefixes[p]) == 0) {
                c = cl[p][0];
                c2 = cl[p][1];
            }
        lock_and_find_key(c, c2, cases[i].prefix, cases[i].name, keys, i, &ls[i], keys[i],
                          sizeof keys[i]);
        char direct[512];
        snprintf(direct, sizeof direct, "%s%s", cases[i].prefix, cases[i].name);
        fprintf(stderr, "# \"%.40s%s\" (%zu bytes, prefix %zu bytes) -> key \"%.60s%s\" (%zu bytes)\n",
                cases[i].name, strlen(cases[i].name) > 40 ? "..." : "", strlen(cases[i].name),
                strlen(cases[i].prefix), keys[i], strlen(keys[i]) > 60 ? "..." : "",
                strlen(keys[i]));
        assert_true(strlen(keys[i]) <= 250);
        for (const char *k = keys[i]; *k; k++)
            assert_true(*k > 0x20 && *k < 0x7f);
        if (cases[i].hashed) {
            if (!hashed_key(keys[i], cases[i].prefix))
                fail_msg("\"%s\": key \"%s\" is not PREFIX \"#\" and 32 hex digits",
                         cases[i].name, keys[i]);
        } else {
            assert_string_equal(keys[i], direct);
        }
        assert_true(item_exists(port1, keys[i]));
        for (int j = 0; j < i; j++)
            if (strcmp(keys[i], keys[j]) == 0)
                fail_msg("\"%s\" and \"%s\" share the key %s", cases[i].name, cases[j].name,
                         keys[i]);
    }
    for (int i = 0; i < N; i++) {
        assert_int_equal(dlock_release(ls[i]), 0);
        assert_false(item_exists(port1, keys[i]));
        dlock_lock_free(ls[i]);
    }
    for (int p = 0; p < 3; p++)
        for (int j = 0; j < 2; j++)
            dlock_client_close(cl[p][j]);
    dlock_client_close(c48b);
    dlock_client_close(c48);
}

/* The prefix= parameter: keys under it, not under "dlock:", so that two
 * prefixes are two separate sets of locks; a prefix with a space, a
 * control character or more than 48 characters is DLOCK_EURL. */
static void test_prefix(void **state)
{
    (void)state;
    char name[64], url[512], key[128], dkey[128];
    unique(name, sizeof name, "prefixed");
    url_with(url, sizeof url, mc_url, "prefix=app1:");
    key_of(key, sizeof key, "app1:", name);
    key_of(dkey, sizeof dkey, "dlock:", name);
    dlock_client *ca = open_url(url), *cd = open_url(mc_url);
    dlock_lock *a = mk(ca, name, NULL, NULL), *d = mk(cd, name, NULL, NULL);
    acquire_ok(a, 0);
    assert_true(item_exists(port1, key));
    assert_false(item_exists(port1, dkey));
    acquire_ok(d, 0); /* another prefix, another lock */
    assert_true(item_exists(port1, dkey));
    dlock_info info = inspect(ca, name);
    assert_int_equal(info.token, dlock_token(a));
    assert_int_equal(dlock_release(a), 0);
    assert_false(item_exists(port1, key));
    assert_true(item_exists(port1, dkey));
    assert_int_equal(dlock_release(d), 0);
    dlock_lock_free(d);
    dlock_lock_free(a);
    dlock_client_close(cd);
    dlock_client_close(ca);

    static const char *const bad[] = {
        "prefix=a%20b",
        "prefix=tab%09",
        "prefix=del%7F",
        "prefix=0123456789012345678901234567890123456789012345678", /* 49 */
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        url_with(url, sizeof url, mc_url, bad[i]);
        dlock_client *c = (dlock_client *)1;
        int rc = dlock_client_open(&c, url, NULL);
        fprintf(stderr, "# %s: %s: %s\n", bad[i], dlock_err_name(rc), dlock_client_errmsg(NULL));
        if (rc == 0)
            dlock_client_close(c);
        assert_int_equal(rc, DLOCK_EURL);
        assert_null(c);
        assert_non_null(strstr(dlock_client_errmsg(NULL), "prefix"));
    }
    /* 48 is the longest */
    url_with(url, sizeof url, mc_url, "prefix=012345678901234567890123456789012345678901234567");
    dlock_client *c = open_url(url);
    dlock_client_close(c);
    /* a parameter memcached does not read */
    url_with(url, sizeof url, mc_url, "ttl=5");
    c = (dlock_client *)1;
    assert_int_equal(dlock_client_open(&c, url, NULL), DLOCK_EURL);
    assert_null(c);
}

/* memcached's text protocol has no log-in: a URL with credentials is
 * refused (DLOCK_EURL, no password in the message), not opened with the
 * credentials silently ignored (issue 23, item 14). */
static void test_credentials_refused(void **state)
{
    (void)state;
    assert_true(strncmp(mc_url, "memcached://", 12) == 0);
    static const char *const userinfo[] = {"user:pw-not-shown@", "user@", ":pw-not-shown@"};
    for (size_t i = 0; i < sizeof userinfo / sizeof userinfo[0]; i++) {
        char url[512];
        int n = snprintf(url, sizeof url, "memcached://%s%s", userinfo[i], mc_url + 12);
        assert_true(n > 0 && (size_t)n < sizeof url);
        dlock_client *c = (dlock_client *)1;
        int rc = dlock_client_open(&c, url, NULL);
        const char *msg = dlock_client_errmsg(NULL);
        fprintf(stderr, "# %s: %s: %s\n", userinfo[i], dlock_err_name(rc), msg);
        if (rc == 0)
            dlock_client_close(c);
        assert_int_equal(rc, DLOCK_EURL);
        assert_null(c);
        assert_non_null(strstr(msg, "password"));
        assert_null(strstr(msg, "pw-not-shown"));
        assert_null(strchr(msg, '\n'));
    }
}

/* Keys kept as they are and hashed keys share one space: a name that is
 * "#" and 32 hex digits is kept as it is, "dlock:#<hex>" — the very key
 * that a name with a space hashes to. Two different names must never be
 * one lock. */
static void test_hashed_key_collision(void **state)
{
    (void)state;
    char spaced[64], key[256];
    unique(spaced, sizeof spaced, "a name with a space");
    dlock_client *c1 = open_url(mc_url), *c2 = open_url(mc_url);
    dlock_lock *l;
    lock_and_find_key(c1, c2, "dlock:", spaced, NULL, 0, &l, key, sizeof key);
    assert_true(hashed_key(key, "dlock:"));
    const char *forged = key + strlen("dlock:"); /* "#" and 32 hex digits: a valid name */
    char why[128];
    assert_int_equal(dlock_name_valid(forged, why, sizeof why), 0);
    dlock_lock *f = mk(c2, forged, NULL, NULL);
    int rc = dlock_acquire(f, 0);
    fprintf(stderr, "# \"%s\" held (key %s); the name \"%s\": %s\n", spaced, key, forged,
            dlock_err_name(rc));
    if (rc == 0)
        assert_int_equal(dlock_release(f), 0);
    assert_int_equal(dlock_release(l), 0);
    dlock_lock_free(f);
    dlock_lock_free(l);
    dlock_client_close(c2);
    dlock_client_close(c1);
    if (rc != 0)
        fail_msg("the names \"%s\" and \"%s\" are one lock (both key %s): a name of \"#\" and 32 "
                 "hex digits is kept as a key that hashed names use (src/backends/memcached/memcached.c "
                 "key_of)",
                 spaced, forged, key);
}

/* ---- 6. names spread over several servers ----------------------------------------- */

/* Which of the two servers holds NAME's item: 1 or 2 (failing unless
 * exactly one does). */
static int server_holding(const char *name)
{
    char key[300];
    key_of(key, sizeof key, "dlock:", name);
    bool on1 = item_exists(port1, key), on2 = item_exists(port2, key);
    if (on1 == on2)
        fail_msg("\"%s\": item on server 1: %d, on server 2: %d", name, on1, on2);
    return on1 ? 1 : 2;
}

/* How long an acquire(0) of l took, and its code. */
static int timed_try(dlock_lock *l, int64_t *took)
{
    int64_t t0 = now_ms();
    int rc = dlock_acquire(l, 0);
    *took = now_ms() - t0;
    return rc;
}

/* Names spread over both servers by rendezvous hashing: each on exactly
 * one, both used; a second client — and one given the servers in the
 * other order — agrees on where each name lives (they see the same
 * holders). One server stopped (SIGSTOP): only its names fail,
 * EUNREACHABLE within the op timeout; the other's names keep working; once
 * it runs again its names work again (they never moved). */
static void test_two_servers(void **state)
{
    (void)state;
    if (!mc2_url || !getenv("DLOCK_TEST_SERVERS"))
        skip();
    enum { N = 32 };
    char names[N][64];
    int where[N], on[3] = {0, 0, 0};
    char rev[256];
    snprintf(rev, sizeof rev, "memcached://127.0.0.1:%d,127.0.0.1:%d", port2, port1);
    dlock_client *c1 = open_url(mc2_url), *c2 = open_url(mc2_url), *cr = open_url(rev);
    dlock_lock *ls[N];
    for (int i = 0; i < N; i++) {
        unique(names[i], sizeof names[i], "spread");
        ls[i] = mk(c1, names[i], NULL, NULL);
        acquire_ok(ls[i], 0);
        where[i] = server_holding(names[i]);
        on[where[i]]++;
    }
    fprintf(stderr, "# %d names: %d on server 1, %d on server 2\n", N, on[1], on[2]);
    assert_true(on[1] > 0 && on[2] > 0);
    for (int i = 0; i < N; i++) { /* the others agree: every name is busy for them */
        dlock_client *others[2] = {c2, cr};
        for (int j = 0; j < 2; j++) {
            dlock_lock *o = mk(others[j], names[i], NULL, NULL);
            int rc = dlock_acquire(o, 0);
            if (rc != DLOCK_EBUSY)
                fail_msg("\"%s\" held through server %d; client %d's try: %s: %s", names[i],
                         where[i], j, dlock_err_name(rc), dlock_lock_errmsg(o));
            dlock_lock_free(o);
        }
    }
    for (int i = 0; i < N; i++) {
        assert_int_equal(dlock_release(ls[i]), 0);
        dlock_lock_free(ls[i]);
    }

    /* three free names on each server */
    char fresh[3][3][64];
    int nf[3] = {0, 0, 0};
    dlock_lock *probe;
    for (int i = 0; i < 200 && (nf[1] < 3 || nf[2] < 3); i++) {
        char nm[64];
        unique(nm, sizeof nm, "fresh");
        probe = mk(c1, nm, NULL, NULL);
        acquire_ok(probe, 0);
        int s = server_holding(nm);
        assert_int_equal(dlock_release(probe), 0);
        dlock_lock_free(probe);
        if (nf[s] < 3)
            snprintf(fresh[s][nf[s]++], sizeof fresh[0][0], "%s", nm);
    }
    assert_true(nf[1] == 3 && nf[2] == 3);

    /* a client with 1 s bounds, opened while both run */
    char url[512];
    url_with(url, sizeof url, mc2_url, "op_timeout_ms=1000&connect_timeout_ms=1000");
    dlock_client *cf = open_url(url);
    dlock_lock *held1 = mk(cf, fresh[1][0], NULL, NULL);
    acquire_ok(held1, 0);

    int pid2 = server_pid("memcached2");
    assert_int_equal(kill(pid2, SIGSTOP), 0);
    if (!wait_stopped(pid2, 5000)) {
        kill(pid2, SIGCONT);
        fail_msg("memcached2 (pid %d) did not stop within 5 s", pid2);
    }
    /* everything measured first, asserted after the server runs again */
    int rc2[3], rc1[3], rc1r[3], rc_open;
    int64_t took2[3], took1[3], took_open;
    for (int i = 0; i < 3; i++) { /* 2 s leases: see "ghost" below */
        dlock_lock *l = mk_ttl(cf, fresh[2][i], 2000, NULL);
        rc2[i] = timed_try(l, &took2[i]);
        dlock_lock_free(l);
    }
    for (int i = 0; i < 3; i++) {
        dlock_lock *l = mk(cf, fresh[1][i], NULL, NULL);
        rc1[i] = timed_try(l, &took1[i]); /* [0] is busy: held1 holds it */
        rc1r[i] = rc1[i] == 0 ? dlock_release(l) : 0;
        dlock_lock_free(l);
    }
    int held1_state = (int)dlock_state(held1);
    int64_t t0 = now_ms();
    dlock_client *cn = NULL;
    rc_open = dlock_client_open(&cn, url, NULL);
    took_open = now_ms() - t0;
    char open_msg[512];
    snprintf(open_msg, sizeof open_msg, "%s", rc_open ? dlock_client_errmsg(NULL) : "");
    int rc_cn = -1000; /* the new client, on a name of the running server */
    if (cn) {
        dlock_lock *l = mk(cn, fresh[1][2], NULL, NULL);
        rc_cn = dlock_acquire(l, 0);
        if (rc_cn == 0)
            rc_cn = dlock_release(l);
        dlock_lock_free(l);
        dlock_client_close(cn);
    }
    kill(pid2, SIGCONT);

    for (int i = 0; i < 3; i++) {
        fprintf(stderr, "# server 2 stopped: its name %d: %s after %" PRId64 " ms; server 1's: %s "
                        "after %" PRId64 " ms\n",
                i, dlock_err_name(rc2[i]), took2[i], dlock_err_name(rc1[i]), took1[i]);
        assert_int_equal(rc2[i], DLOCK_EUNREACHABLE);
        assert_true(took2[i] >= 500 && took2[i] < 4000);
        assert_int_equal(rc1[i], i == 0 ? DLOCK_EBUSY : 0);
        assert_int_equal(rc1r[i], 0);
        assert_true(took1[i] < 1000);
    }
    assert_int_equal(held1_state, DLOCK_STATE_HELD);
    /* A client opens while one of its servers is down: that server's names
     * fail on their own, the others work. */
    fprintf(stderr, "# a client opened while server 2 was stopped: %s after %" PRId64 " ms%s%s\n",
            dlock_err_name(rc_open), took_open, rc_open ? ": " : "", open_msg);
    assert_int_equal(rc_open, 0);
    assert_true(took_open < 4000);
    assert_int_equal(rc_cn, 0);

    /* Server 2 runs again and reads what the timed-out tries sent: their
     * adds may take effect now, items of owners that gave up ("ghosts"),
     * which hold the name until they expire (ceil(2 s) + 1). Reported. */
    assert_true(wait_answers(port2, 5000));
    int ghosts = 0;
    for (int i = 0; i < 3; i++) {
        char key[300];
        key_of(key, sizeof key, "dlock:", fresh[2][i]);
        ghosts += item_exists(port2, key);
    }
    fprintf(stderr, "# server 2 running again: %d of the 3 names tried while it was stopped are "
                    "held by the tries' late adds (until their items expire)\n",
            ghosts);
    /* its names work (they did not move), once any ghost has expired */
    for (int i = 0; i < 3; i++) {
        dlock_lock *l = mk(cf, fresh[2][i], NULL, NULL);
        int rc = dlock_acquire(l, 6000);
        if (rc != 0)
            fail_msg("server 2 back: \"%s\": %s: %s", fresh[2][i], dlock_err_name(rc),
                     dlock_lock_errmsg(l));
        assert_int_equal(server_holding(fresh[2][i]), 2);
        assert_int_equal(dlock_release(l), 0);
        dlock_lock_free(l);
    }
    assert_int_equal(dlock_release(held1), 0);
    dlock_lock_free(held1);
    dlock_client_close(cf);
    dlock_client_close(cr);
    dlock_client_close(c2);
    dlock_client_close(c1);
}

/* ---- 7. servers that are not memcached -------------------------------------------- */

enum fake_mode {
    FAKE_HELLO,      /* "HELLO" to anything */
    FAKE_HTTP,       /* an HTTP response, then closes */
    FAKE_OLD,        /* "ERROR" to every line: a memcached without the meta protocol */
    FAKE_VA_BADLEN,  /* a VA whose value is longer than it says */
    FAKE_ENDLESS,    /* a line that never ends */
    FAKE_SILENT,     /* accepts, never answers */
    FAKE_CLOSE,      /* accepts and closes */
    FAKE_META_JUNK,  /* speaks mn; answers a set with junk */
    FAKE_META_BADVA, /* speaks mn; answers a set with a VA of the wrong length */
    FAKE_META_MUTE,  /* speaks mn; never answers a set */
    FAKE_META_NOCAS, /* speaks mn; stores without CAS values (HD without c) */
};

struct fake_conn {
    int fd;
    char buf[8192];
    size_t have;
    bool endless;
};

struct fake {
    int lfd, port;
    enum fake_mode mode;
    atomic_int stop;
    atomic_int accepted;
    atomic_int deletes; /* md requests seen */
    struct fake_conn conns[16];
    int nconns;
    pthread_t t;
};

static void fake_reply(int fd, const char *s)
{
    (void)!send(fd, s, strlen(s), MSG_NOSIGNAL);
}

/* The complete requests in k's buffer, each answered as the mode says:
 * false once the connection is to be closed. */
static bool fake_serve(struct fake *f, struct fake_conn *k)
{
    for (;;) {
        char *eol = memmem(k->buf, k->have, "\r\n", 2);
        if (!eol)
            return k->have < sizeof k->buf;
        size_t used = (size_t)(eol - k->buf) + 2;
        bool set = strncmp(k->buf, "ms ", 3) == 0;
        if (set) { /* its data block follows: ms KEY SIZE ... */
            size_t dlen = strtoul(k->buf + 3 + strcspn(k->buf + 3, " "), NULL, 10);
            if (k->have < used + dlen + 2)
                return k->have < sizeof k->buf;
            used += dlen + 2;
        }
        bool mn = strncmp(k->buf, "mn", 2) == 0, md = strncmp(k->buf, "md ", 3) == 0;
        if (md)
            atomic_fetch_add(&f->deletes, 1);
        switch (f->mode) {
        case FAKE_HELLO:
            fake_reply(k->fd, "HELLO\r\n");
            break;
        case FAKE_HTTP:
            fake_reply(k->fd, "HTTP/1.1 400 Bad Request\r\nContent-Length: 0\r\n"
                              "Connection: close\r\n\r\n");
            return false;
        case FAKE_OLD:
            fake_reply(k->fd, "ERROR\r\n");
            break;
        case FAKE_VA_BADLEN:
            fake_reply(k->fd, "VA 2 c1\r\nMNMN\r\n");
            break;
        case FAKE_ENDLESS:
            k->endless = true;
            break;
        case FAKE_SILENT:
        case FAKE_CLOSE:
            break;
        case FAKE_META_JUNK:
        case FAKE_META_BADVA:
        case FAKE_META_MUTE:
        case FAKE_META_NOCAS:
            if (mn)
                fake_reply(k->fd, "MN\r\n");
            else if (md)
                fake_reply(k->fd, "HD\r\n");
            else if (!set)
                fake_reply(k->fd, "EN\r\n");
            else if (f->mode == FAKE_META_JUNK)
                fake_reply(k->fd, "+OK\r\n");
            else if (f->mode == FAKE_META_BADVA)
                fake_reply(k->fd, "VA 3 c5\r\nabcdef\r\n");
            else if (f->mode == FAKE_META_NOCAS)
                fake_reply(k->fd, "HD\r\n");
            break;
        }
        memmove(k->buf, k->buf + used, k->have - used);
        k->have -= used;
    }
}

static void *fake_main(void *p)
{
    struct fake *f = p;
    static char endless[4096];
    memset(endless, 'x', sizeof endless);
    while (!atomic_load(&f->stop)) {
        struct pollfd pl[17];
        pl[0] = (struct pollfd){.fd = f->lfd, .events = POLLIN};
        for (int i = 0; i < f->nconns; i++)
            pl[i + 1] = (struct pollfd){.fd = f->conns[i].fd,
                                        .events = POLLIN | (f->conns[i].endless ? POLLOUT : 0)};
        if (poll(pl, (nfds_t)f->nconns + 1, 50) <= 0)
            continue;
        for (int i = f->nconns - 1; i >= 0; i--) {
            struct fake_conn *k = &f->conns[i];
            bool keep = true;
            if (pl[i + 1].revents & (POLLIN | POLLHUP | POLLERR)) {
                ssize_t n = recv(k->fd, k->buf + k->have, sizeof k->buf - k->have, MSG_DONTWAIT);
                if (n <= 0 && !(n < 0 && errno == EAGAIN))
                    keep = false;
                else if (n > 0) {
                    k->have += (size_t)n;
                    if (f->mode != FAKE_SILENT)
                        keep = fake_serve(f, k);
                    else if (k->have == sizeof k->buf)
                        k->have = 0;
                }
            }
            if (keep && k->endless && (pl[i + 1].revents & POLLOUT) &&
                send(k->fd, endless, sizeof endless, MSG_NOSIGNAL | MSG_DONTWAIT) < 0 &&
                errno != EAGAIN)
                keep = false;
            if (!keep) {
                close(k->fd);
                f->conns[i] = f->conns[--f->nconns];
            }
        }
        if (pl[0].revents & POLLIN) {
            int fd = accept4(f->lfd, NULL, NULL, SOCK_CLOEXEC);
            if (fd < 0)
                continue;
            atomic_fetch_add(&f->accepted, 1);
            if (f->mode == FAKE_CLOSE || f->nconns == 16) {
                close(fd);
                continue;
            }
            f->conns[f->nconns++] = (struct fake_conn){.fd = fd};
        }
    }
    for (int i = 0; i < f->nconns; i++)
        close(f->conns[i].fd);
    return NULL;
}

static void fake_start(struct fake *f, enum fake_mode mode)
{
    memset(f, 0, sizeof *f);
    f->mode = mode;
    f->lfd = listen_loopback(&f->port);
    assert_int_equal(pthread_create(&f->t, NULL, fake_main, f), 0);
}

static void fake_stop(struct fake *f)
{
    atomic_store(&f->stop, 1);
    assert_int_equal(pthread_join(f->t, NULL), 0);
    close(f->lfd);
}

/* Servers that answer junk: opening a client fails (EPROTO or
 * EUNREACHABLE) within a few seconds, in one line naming the server; ones
 * that speak mn but answer a set with junk, a VA of the wrong length or
 * nothing at all make acquire fail the same way — never hang, never
 * crash; one that keeps no CAS values is refused (ENOTSUP) and what it
 * stored is deleted. */
static void test_not_memcached(void **state)
{
    (void)state;
    static const struct {
        enum fake_mode mode;
        const char *what;
        int want; /* 0: EPROTO or EUNREACHABLE */
    } opens[] = {
        {FAKE_HELLO, "a server answering HELLO", DLOCK_EPROTO},
        {FAKE_HTTP, "an HTTP server", DLOCK_EPROTO},
        {FAKE_OLD, "a memcached without the meta protocol (ERROR)", DLOCK_EPROTO},
        {FAKE_VA_BADLEN, "a VA longer than it says", DLOCK_EPROTO},
        {FAKE_ENDLESS, "a line that never ends", DLOCK_EPROTO},
        {FAKE_SILENT, "a server that never answers", DLOCK_EUNREACHABLE},
        {FAKE_CLOSE, "a server that accepts and closes", DLOCK_EUNREACHABLE},
    };
    for (size_t i = 0; i < sizeof opens / sizeof opens[0]; i++) {
        struct fake f;
        fake_start(&f, opens[i].mode);
        char url[256];
        snprintf(url, sizeof url,
                 "memcached://127.0.0.1:%d?connect_timeout_ms=1000&op_timeout_ms=1000", f.port);
        dlock_client *c = (dlock_client *)1;
        int64_t t0 = now_ms();
        int rc = dlock_client_open(&c, url, NULL);
        int64_t took = now_ms() - t0;
        const char *msg = dlock_client_errmsg(NULL);
        fprintf(stderr, "# open, %s: %s after %" PRId64 " ms: %s\n", opens[i].what,
                dlock_err_name(rc), took, msg);
        int accepted = atomic_load(&f.accepted);
        fake_stop(&f);
        if (rc == 0) {
            dlock_client_close(c);
            fail_msg("%s: the open succeeded", opens[i].what);
        }
        assert_null(c);
        assert_true(accepted >= 1);
        assert_int_equal(rc, opens[i].want);
        assert_true(took < 4000);
        assert_true(msg[0] != '\0');
        assert_null(strchr(msg, '\n'));
        char port[16];
        snprintf(port, sizeof port, "%d", f.port);
        assert_non_null(strstr(msg, port));
        if (opens[i].mode == FAKE_OLD)
            assert_non_null(strstr(msg, "meta protocol"));
    }

    static const struct {
        enum fake_mode mode;
        const char *what;
        int want;
    } takes[] = {
        {FAKE_META_JUNK, "a set answered with junk", DLOCK_EPROTO},
        {FAKE_META_BADVA, "a set answered with a VA of the wrong length", DLOCK_EPROTO},
        {FAKE_META_MUTE, "a set never answered", DLOCK_EUNREACHABLE},
        {FAKE_META_NOCAS, "a server without CAS values", DLOCK_ENOTSUP},
    };
    for (size_t i = 0; i < sizeof takes / sizeof takes[0]; i++) {
        struct fake f;
        fake_start(&f, takes[i].mode);
        char url[256], name[64];
        snprintf(url, sizeof url,
                 "memcached://127.0.0.1:%d?connect_timeout_ms=1000&op_timeout_ms=1000", f.port);
        unique(name, sizeof name, "fake");
        dlock_client *c = open_url(url);
        dlock_lock *l = mk(c, name, NULL, NULL);
        static const int timeouts[] = {0, 3000};
        for (int j = 0; j < 2; j++) {
            int64_t t0 = now_ms();
            int rc = dlock_acquire(l, timeouts[j]);
            int64_t took = now_ms() - t0;
            fprintf(stderr, "# acquire(%d), %s: %s after %" PRId64 " ms: %s\n", timeouts[j],
                    takes[i].what, dlock_err_name(rc), took, dlock_lock_errmsg(l));
            if (rc == 0)
                (void)dlock_release(l);
            assert_int_equal(rc, takes[i].want);
            assert_true(took < 4000);
            assert_int_equal(dlock_state(l), DLOCK_STATE_IDLE);
            assert_null(strchr(dlock_lock_errmsg(l), '\n'));
        }
        if (takes[i].mode == FAKE_META_NOCAS) {
            assert_true(atomic_load(&f.deletes) >= 2); /* what it stored, given back */
            assert_non_null(strstr(dlock_lock_errmsg(l), "CAS"));
        }
        dlock_lock_free(l);
        dlock_client_close(c);
        fake_stop(&f);
    }
}

/* ---- 8. semaphores ---------------------------------------------------------------- */

/* Permits 3: three holders on three slot items (KEY/0..2; no KEY, no
 * KEY/3), KEY/p says 3; a fourth try is EBUSY, a fourth waiter gets the
 * slot a holder gives back; dlock_inspect counts 3 holders; dlock_break
 * deletes every slot and every holder learns at its next renewal. */
static void test_semaphore(void **state)
{
    (void)state;
    char name[64], key[128], k[160], val[64];
    unique(name, sizeof name, "sem");
    key_of(key, sizeof key, "dlock:", name);
    dlock_client *c1 = open_url(mc_url), *c2 = open_url(mc_url);
    atomic_store(&lost_calls, 0);
    const int ttl = 1500;
    dlock_lock *h[4];
    uint64_t tok[3];
    for (int i = 0; i < 4; i++)
        h[i] = mk_opts(i < 2 ? c1 : c2, name, DLOCK_SEMAPHORE, 3, ttl, count_lost);
    for (int i = 0; i < 3; i++) {
        acquire_ok(h[i], 0);
        tok[i] = dlock_token(h[i]);
        for (int j = 0; j < i; j++)
            assert_true(tok[i] != tok[j]);
    }
    for (int s = 0; s < 4; s++) {
        snprintf(k, sizeof k, "%s/%d", key, s);
        if (item_exists(port1, k) != (s < 3))
            fail_msg("slot item %s %s", k, s < 3 ? "missing" : "present with 3 permits");
    }
    assert_false(item_exists(port1, key));
    snprintf(k, sizeof k, "%s/p", key);
    assert_true(item_value(port1, k, val, sizeof val));
    assert_string_equal(val, "3");
    assert_int_equal(dlock_acquire(h[3], 0), DLOCK_EBUSY);
    dlock_info info = inspect(c2, name);
    fprintf(stderr, "# 3 of 3 held: held %d holders %d token %" PRIu64 " holder \"%s\"\n",
            info.held, info.holders, info.token, info.holder);
    assert_int_equal(info.held, 1);
    assert_int_equal(info.holders, 3);
    assert_true(info.token == tok[0] || info.token == tok[1] || info.token == tok[2]);

    /* a waiter (polling) gets the slot given back */
    struct waiter w;
    waiter_start(&w, h[3], 5000, false);
    sleep_ms(200);
    assert_int_equal(atomic_load(&w.done), 0);
    int64_t t0 = now_ms();
    assert_int_equal(dlock_release(h[1]), 0);
    assert_int_equal(waiter_join(&w), 0);
    fprintf(stderr, "# the 4th waiter got the slot given back after %" PRId64 " ms\n",
            now_ms() - t0);
    assert_true(now_ms() - t0 < 2000);
    assert_int_equal(inspect(c1, name).holders, 3);

    /* break: every slot deleted, every holder told */
    dlock_info broken;
    memset(&broken, 0, sizeof broken);
    int rc = dlock_break(c2, name, &broken);
    if (rc != 0)
        fail_msg("break: %s: %s", dlock_err_name(rc), dlock_client_errmsg(c2));
    assert_int_equal(broken.holders, 3);
    for (int s = 0; s < 3; s++) {
        snprintf(k, sizeof k, "%s/%d", key, s);
        assert_false(item_exists(port1, k));
    }
    int idx[3] = {0, 2, 3};
    for (int i = 0; i < 3; i++) {
        int64_t told = wait_lost(h[idx[i]], ttl + 2000);
        fprintf(stderr, "# broken: holder %d told after %" PRId64 " ms\n", idx[i], told);
        assert_true(told >= 0);
        assert_int_equal(dlock_state(h[idx[i]]), DLOCK_STATE_LOST);
    }
    wait_lost_calls(3, 2000);
    assert_int_equal(atomic_load(&lost_calls), 3);
    for (int i = 0; i < 3; i++)
        assert_int_equal(dlock_release(h[idx[i]]), DLOCK_ELOST);
    /* free again */
    acquire_ok(h[1], 0);
    assert_int_equal(dlock_release(h[1]), 0);
    for (int i = 0; i < 4; i++)
        dlock_lock_free(h[i]);
    dlock_client_close(c2);
    dlock_client_close(c1);
}

/* A semaphore held past its lease (renewals keep its slots): dlock_inspect
 * must still count its holders, and dlock_break still find them. KEY/p,
 * where the permits are written for dlock_inspect, is written by each
 * take with the lease's TTL and never renewed. */
static void test_semaphore_inspect_past_lease(void **state)
{
    (void)state;
    char name[64], key[128], k[160];
    unique(name, sizeof name, "sem-long");
    key_of(key, sizeof key, "dlock:", name);
    dlock_client *c = open_url(mc_url);
    const int ttl = 1500;
    dlock_lock *h[2];
    for (int i = 0; i < 2; i++) {
        h[i] = mk_opts(c, name, DLOCK_SEMAPHORE, 2, ttl, NULL);
        acquire_ok(h[i], 0);
    }
    assert_int_equal(inspect(c, name).holders, 2);
    sleep_ms(4500);
    int slots = 0;
    for (int s = 0; s < 2; s++) {
        snprintf(k, sizeof k, "%s/%d", key, s);
        slots += item_exists(port1, k);
    }
    snprintf(k, sizeof k, "%s/p", key);
    bool permits_item = item_exists(port1, k);
    dlock_info info = inspect(c, name);
    fprintf(stderr, "# 2 of 2 held 4.5 s (lease 1.5 s): states %d %d, %d slot items, %s/p %s; "
                    "inspect: held %d holders %d\n",
            dlock_state(h[0]), dlock_state(h[1]), slots, key,
            permits_item ? "present" : "GONE", info.held, info.holders);
    assert_int_equal(dlock_state(h[0]), DLOCK_STATE_HELD);
    assert_int_equal(dlock_state(h[1]), DLOCK_STATE_HELD);
    assert_int_equal(slots, 2);
    dlock_info broken;
    int rc = dlock_break(c, name, &broken);
    fprintf(stderr, "# break: %s: %s\n", dlock_err_name(rc), rc ? dlock_client_errmsg(c) : "");
    for (int i = 0; i < 2; i++) {
        (void)dlock_release(h[i]);
        dlock_lock_free(h[i]);
    }
    dlock_client_close(c);
    if (info.holders != 2 || rc != 0)
        fail_msg("a semaphore held past its lease: inspect says %d holders (2 hold it), break "
                 "%s: the permits item %s/p expired (written by the take with the lease's TTL, "
                 "never renewed)",
                 info.holders, dlock_err_name(rc), key);
}

/* ---- 9. listing ------------------------------------------------------------------- */

static int count_names(const char *name, void *arg)
{
    (void)name;
    (*(int *)arg)++;
    return 0;
}

static void test_list_not_supported(void **state)
{
    (void)state;
    char name[64];
    unique(name, sizeof name, "list");
    dlock_client *c = open_url(mc_url);
    dlock_lock *l = mk(c, name, NULL, NULL);
    acquire_ok(l, 0);
    int n = 0;
    int rc = dlock_list(c, NULL, count_names, &n);
    const char *msg = dlock_client_errmsg(c);
    fprintf(stderr, "# list: %s: %s\n", dlock_err_name(rc), msg);
    assert_int_equal(rc, DLOCK_ENOTSUP);
    assert_int_equal(n, 0);
    /* it says why, and what to do instead */
    assert_non_null(strstr(msg, "memcached"));
    assert_non_null(strstr(msg, "enumerate"));
    assert_true(strlen(msg) > 40);
    assert_int_equal(dlock_list(c, "list", count_names, &n), DLOCK_ENOTSUP);
    assert_int_equal(n, 0);
    assert_int_equal(dlock_release(l), 0);
    dlock_lock_free(l);
    dlock_client_close(c);
}

/* ---- 10. election values and inspection -------------------------------------------- */

/* The leader's value is in the lock's item (after its holder line) and
 * survives renewals; a second campaigner is busy, then times out; after a
 * resign there is no leader; dlock_inspect reads the holder, how long it
 * has held and the lease left (never more than the lease), and the token
 * — the item's CAS before the first renewal, the value's afterwards. */
static void test_election_and_inspect(void **state)
{
    (void)state;
    char name[64], key[128], val[1024], buf[300];
    unique(name, sizeof name, "elect");
    key_of(key, sizeof key, "dlock:", name);
    dlock_client *c1 = open_url(mc_url), *c2 = open_url(mc_url);
    const int ttl = 3000;
    dlock_lock *l = mk_ttl(c1, name, ttl, NULL), *w = mk_ttl(c2, name, ttl, NULL);
    assert_int_equal(dlock_leader(c2, name, buf, sizeof buf), DLOCK_ENOENT);
    int64_t t0 = now_ms();
    assert_int_equal(dlock_campaign(l, "node-a:8080", 0), 0);
    uint64_t token = dlock_token(l);
    assert_int_equal(dlock_leader(c2, name, buf, sizeof buf), 0);
    assert_string_equal(buf, "node-a:8080");
    assert_true(item_value(port1, key, val, sizeof val));
    const char *nl = strchr(val, '\n');
    assert_non_null(nl);
    assert_string_equal(nl + 1, "node-a:8080");

    dlock_info info = inspect(c2, name);
    char me[64];
    snprintf(me, sizeof me, "pid %ld on ", (long)getpid());
    fprintf(stderr, "# inspect: held %d holders %d waiters %d token %" PRIu64 " held_ms %lld "
                    "lease_ms %lld holder \"%s\"\n",
            info.held, info.holders, info.waiters, info.token, info.held_ms, info.lease_ms,
            info.holder);
    assert_int_equal(info.held, 1);
    assert_int_equal(info.holders, 1);
    assert_non_null(strstr(info.holder, me));
    assert_true(info.held_ms >= 0 && info.held_ms <= now_ms() - t0 + 1000);
    assert_true(info.lease_ms >= 0 && info.lease_ms <= ttl);
    /* set_value renewed: the value has the token now; either way it is the token */
    assert_int_equal(info.token, token);

    assert_int_equal(dlock_campaign(w, "node-b:8080", 0), DLOCK_EBUSY);
    int64_t t1 = now_ms();
    assert_int_equal(dlock_campaign(w, "node-b:8080", 300), DLOCK_ETIMEDOUT);
    assert_true(now_ms() - t1 >= 250 && now_ms() - t1 < 2000);

    sleep_ms(2200); /* past two renewals (ttl/3) */
    assert_int_equal(dlock_state(l), DLOCK_STATE_HELD);
    assert_int_equal(dlock_leader(c2, name, buf, sizeof buf), 0);
    assert_string_equal(buf, "node-a:8080");
    info = inspect(c2, name);
    fprintf(stderr, "# after 2.2 s: token %" PRIu64 " held_ms %lld lease_ms %lld, item CAS %lld\n",
            info.token, info.held_ms, info.lease_ms, item_flag(port1, key, 'c'));
    assert_int_equal(info.token, token);
    assert_true(item_flag(port1, key, 'c') > (long long)token);
    assert_true(info.held_ms >= 2000 && info.held_ms <= now_ms() - t0 + 1000);
    assert_true(info.lease_ms >= 0 && info.lease_ms <= ttl);

    assert_int_equal(dlock_resign(l), 0);
    assert_false(item_exists(port1, key));
    assert_int_equal(dlock_leader(c2, name, buf, sizeof buf), DLOCK_ENOENT);
    info = inspect(c2, name);
    assert_int_equal(info.held, 0);
    assert_int_equal(info.holders, 0);

    /* the other wins; the longest value */
    assert_int_equal(dlock_campaign(w, "node-b:8080", 1000), 0);
    assert_true(dlock_token(w) > token);
    assert_int_equal(dlock_leader(c1, name, buf, sizeof buf), 0);
    assert_string_equal(buf, "node-b:8080");
    assert_int_equal(dlock_resign(w), 0);
    char longest[256];
    memset(longest, 'v', 255);
    longest[0] = ' ';
    longest[100] = '\n';
    longest[255] = '\0';
    assert_int_equal(dlock_campaign(l, longest, 0), 0);
    assert_int_equal(dlock_leader(c2, name, buf, sizeof buf), 0);
    assert_string_equal(buf, longest);
    assert_int_equal(dlock_resign(l), 0);
    dlock_lock_free(w);
    dlock_lock_free(l);
    dlock_client_close(c2);
    dlock_client_close(c1);
}

/* dlock_inspect's lease_ms is what is left of the lease: never more than
 * the lease itself, whatever its length — a lease of 1.5 s lives 3 s on the
 * server (ceil + 1), which must not be reported as 2 s left. */
static void test_inspect_lease_within_ttl(void **state)
{
    (void)state;
    static const int ttls[] = {1500, 2500, 1001};
    dlock_client *c = open_url(mc_url);
    char bad[256] = "";
    for (size_t i = 0; i < sizeof ttls / sizeof ttls[0]; i++) {
        char name[64];
        unique(name, sizeof name, "lease-left");
        dlock_lock *l = mk_ttl(c, name, ttls[i], NULL);
        acquire_ok(l, 0);
        dlock_info info = inspect(c, name);
        long long valid = dlock_valid_ms(l);
        fprintf(stderr, "# lease %d ms: inspect says %lld ms left (the holder: %lld)\n", ttls[i],
                info.lease_ms, valid);
        if ((info.lease_ms > ttls[i] || info.lease_ms < 0) && !bad[0])
            snprintf(bad, sizeof bad, "a %d ms lease: dlock_inspect says %lld ms left", ttls[i],
                     info.lease_ms);
        assert_int_equal(dlock_release(l), 0);
        dlock_lock_free(l);
    }
    dlock_client_close(c);
    if (bad[0])
        fail_msg("%s (more than the lease: mc_inspect reads (item TTL - 2) s, and the item "
                 "lives ceil(ttl) + 2 s)",
                 bad);
}

/* ---- 11. waiting: cancel and timeout ---------------------------------------------- */

struct canceller {
    dlock_lock *l;
    int delay_ms;
    int64_t at;
    pthread_t t;
};

static void *canceller_main(void *p)
{
    struct canceller *k = p;
    sleep_ms(k->delay_ms);
    k->at = now_ms();
    dlock_cancel(k->l);
    return NULL;
}

/* A waiter polls with backoff (up to 32 ms): dlock_cancel ends it at once
 * (ECANCELED), whether it waits forever or with a timeout; a 300 ms wait
 * times out between 250 ms and 2 s; a release is seen within the backoff. */
static void test_cancel_and_timeout(void **state)
{
    (void)state;
    char name[64];
    unique(name, sizeof name, "wait");
    dlock_client *c1 = open_url(mc_url), *c2 = open_url(mc_url);
    dlock_lock *h = mk(c1, name, NULL, NULL), *w = mk(c2, name, NULL, NULL);
    acquire_ok(h, 0);
    static const int timeouts[] = {-1, 30000};
    for (int i = 0; i < 2; i++) {
        struct waiter ws;
        waiter_start(&ws, w, timeouts[i], false);
        struct canceller k = {.l = w, .delay_ms = 300};
        assert_int_equal(pthread_create(&k.t, NULL, canceller_main, &k), 0);
        int rc = waiter_join(&ws);
        int64_t took = now_ms() - k.at;
        assert_int_equal(pthread_join(k.t, NULL), 0);
        fprintf(stderr, "# cancelled waiter (timeout %d): %s %" PRId64 " ms after the cancel\n",
                timeouts[i], dlock_err_name(rc), took);
        assert_int_equal(rc, DLOCK_ECANCELED);
        assert_true(took < 1000);
        assert_int_equal(dlock_state(w), DLOCK_STATE_IDLE);
        assert_int_equal(dlock_state(h), DLOCK_STATE_HELD);
    }
    int64_t t0 = now_ms();
    int rc = dlock_acquire(w, 300);
    int64_t took = now_ms() - t0;
    fprintf(stderr, "# acquire(300) of a held lock: %s after %" PRId64 " ms\n", dlock_err_name(rc),
            took);
    assert_int_equal(rc, DLOCK_ETIMEDOUT);
    assert_true(took >= 250 && took < 2000);
    assert_int_equal(dlock_state(w), DLOCK_STATE_IDLE);

    /* a waiter sees the release within its backoff */
    struct waiter ws;
    waiter_start(&ws, w, 10000, false);
    sleep_ms(500); /* its backoff at its longest */
    t0 = now_ms();
    assert_int_equal(dlock_release(h), 0);
    assert_int_equal(waiter_join(&ws), 0);
    fprintf(stderr, "# a waiter got the lock %" PRId64 " ms after the release\n", now_ms() - t0);
    assert_true(now_ms() - t0 < 1000);
    assert_true(dlock_token(w) > 0);
    assert_int_equal(dlock_release(w), 0);
    dlock_lock_free(w);
    dlock_lock_free(h);
    dlock_client_close(c2);
    dlock_client_close(c1);
}

/* ---- round trips ------------------------------------------------------------------- */

/* A relay in front of the first server that counts round trips: the times
 * a client spoke after the server had answered (a pipelined batch, sent
 * before any reply is read, counts once). */
struct trip_relay {
    int lfd, port;
    atomic_int stop;
    atomic_long trips;
    pthread_t t;
};

static void *trip_relay_main(void *p)
{
    struct trip_relay *r = p;
    enum { MAXC = 4 };
    int cfd[MAXC], sfd[MAXC], nc = 0;
    bool client_spoke[MAXC];
    while (!atomic_load(&r->stop)) {
        struct pollfd pf[1 + 2 * MAXC];
        pf[0] = (struct pollfd){.fd = r->lfd, .events = POLLIN};
        for (int i = 0; i < nc; i++) {
            pf[1 + 2 * i] = (struct pollfd){.fd = cfd[i], .events = POLLIN};
            pf[2 + 2 * i] = (struct pollfd){.fd = sfd[i], .events = POLLIN};
        }
        if (poll(pf, (nfds_t)(1 + 2 * nc), 50) <= 0)
            continue;
        int polled = nc; /* (a pair accepted now was not in this poll) */
        if ((pf[0].revents & POLLIN) && nc < MAXC) {
            int c = accept4(r->lfd, NULL, NULL, SOCK_CLOEXEC);
            int s = c >= 0 ? raw_connect(port1) : -1;
            if (s >= 0) {
                cfd[nc] = c;
                sfd[nc] = s;
                client_spoke[nc++] = false;
            } else if (c >= 0) {
                close(c);
            }
        }
        for (int i = 0; i < polled; i++) {
            for (int side = 0; side < 2; side++) {
                if (!pf[1 + 2 * i + side].revents)
                    continue;
                char buf[16384];
                int *from = side ? &sfd[i] : &cfd[i], to = side ? cfd[i] : sfd[i];
                if (*from < 0)
                    continue;
                ssize_t got = read(*from, buf, sizeof buf);
                if (got <= 0) { /* closed: shut the pair (the client may reconnect), and
                                 * poll the closed side no more (poll skips fd -1) */
                    if (to >= 0)
                        shutdown(to, SHUT_RDWR);
                    close(*from);
                    *from = -1;
                    continue;
                }
                if (!side && !client_spoke[i])
                    atomic_fetch_add(&r->trips, 1);
                client_spoke[i] = !side;
                if (to >= 0)
                    raw_send(to, buf, (size_t)got);
            }
        }
    }
    for (int i = 0; i < nc; i++) {
        if (cfd[i] >= 0)
            close(cfd[i]);
        if (sfd[i] >= 0)
            close(sfd[i]);
    }
    return NULL;
}

/* What an uncontended cycle costs: the take (add, and the read of the
 * semaphore's permits in the same write) and the owner-checked release,
 * one round trip each, as few as a client with no owner check (add,
 * delete) needs (issue 24: it took three, the permits read apart). */
static void test_round_trips(void **state)
{
    (void)state;
    struct trip_relay r = {.lfd = listen_loopback(&r.port)};
    assert_int_equal(pthread_create(&r.t, NULL, trip_relay_main, &r), 0);
    char url[128], name[64];
    snprintf(url, sizeof url, "memcached://127.0.0.1:%d", r.port);
    unique(name, sizeof name, "trips");
    dlock_client *c = open_url(url);
    dlock_lock *l = mk_ttl(c, name, 60000, NULL); /* no renewal during the cycles */
    acquire_ok(l, 0); /* the connection is made and pooled */
    assert_int_equal(dlock_release(l), 0);
    enum { CYCLES = 50 };
    long before = atomic_load(&r.trips);
    uint64_t last = 0;
    for (int i = 0; i < CYCLES; i++) {
        acquire_ok(l, 0);
        assert_true(dlock_token(l) > last); /* tokens still rise */
        last = dlock_token(l);
        assert_int_equal(dlock_release(l), 0);
    }
    long trips = atomic_load(&r.trips) - before;
    fprintf(stderr, "# %d cycles: %ld round trips\n", CYCLES, trips);
    assert_true(trips >= 2 * CYCLES);
    assert_true(trips <= 2 * CYCLES + 2); /* a renewal could slip in, on a loaded machine */
    dlock_lock_free(l);
    dlock_client_close(c);
    atomic_store(&r.stop, 1);
    assert_int_equal(pthread_join(r.t, NULL), 0);
    close(r.lfd);
}

int main(int argc, char **argv)
{
    self_path = argv[0];
    if (argc == 5 && strcmp(argv[1], "--hold") == 0) /* test_paused_holder_expires */
        return holder_main(argv[2], argv[3], atoi(argv[4]));
    mc_url = getenv("DLOCK_TEST_MEMCACHED");
    mc2_url = getenv("DLOCK_TEST_MEMCACHED2");
    small_url = getenv("DLOCK_TEST_MEMCACHED_SMALL");
    if (!mc_url) {
        fprintf(stderr, "test_memcached: run inside tests/servers.sh run memcached -- ...: "
                        "skipped\n");
        return 77;
    }
    int ports[2];
    if (strncmp(mc_url, "memcached://", 12) != 0 || strchr(mc_url, '?') ||
        url_ports(mc_url, ports, 2) != 1) {
        fprintf(stderr, "test_memcached: expected memcached://HOST:PORT, not %s\n", mc_url);
        return 1;
    }
    port1 = ports[0];
    if (mc2_url && (url_ports(mc2_url, ports, 2) != 2 || ports[0] != port1)) {
        fprintf(stderr, "test_memcached: expected memcached://HOST:%d,HOST:PORT2, not %s\n",
                port1, mc2_url);
        return 1;
    }
    port2 = mc2_url ? ports[1] : 0;
    if (small_url && url_ports(small_url, ports, 1) == 1)
        small_port = ports[0];
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_renewal_after_delete),
        cmocka_unit_test(test_paused_holder_expires),
        cmocka_unit_test(test_item_ttl),
        cmocka_unit_test(test_late_tick_keeps_the_lease),
        cmocka_unit_test(test_longest_lease),
        cmocka_unit_test(test_odd_names),
        cmocka_unit_test(test_prefix),
        cmocka_unit_test(test_credentials_refused),
        cmocka_unit_test(test_hashed_key_collision),
        cmocka_unit_test(test_not_memcached),
        cmocka_unit_test(test_semaphore),
        cmocka_unit_test(test_semaphore_inspect_past_lease),
        cmocka_unit_test(test_list_not_supported),
        cmocka_unit_test(test_election_and_inspect),
        cmocka_unit_test(test_inspect_lease_within_ttl),
        cmocka_unit_test(test_cancel_and_timeout),
        cmocka_unit_test(test_round_trips),
        cmocka_unit_test(test_eviction),
        cmocka_unit_test(test_two_servers),
        cmocka_unit_test(test_server_restart), /* last: every item on the first server goes */
    };
    if (argc > 1) /* a test's name, or a pattern with '*' and '?' */
        cmocka_set_test_filter(argv[1]);
    return cmocka_run_group_tests(tests, NULL, NULL) ? 1 : 0;
}
