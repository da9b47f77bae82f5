/* SPDX-License-Identifier: MIT */
/* test_url.c — backend URL parsing, redaction and lock-name validation. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "internal.h"

#define SECRET "S3cr3tPw"

/* Parse a URL that must be accepted. */
static dl_url *ok(const char *s)
{
    char err[DL_ERRMSG_MAX];
    dl_url *u = NULL;
    int rc = dl_url_parse(s, &u, err, sizeof err);
    if (rc != 0)
        fail_msg("\"%s\" rejected: %s", s, err);
    assert_non_null(u);
    assert_non_null(u->scheme);
    assert_non_null(u->path);
    assert_string_equal(u->original, s);
    assert_non_null(u->redacted);
    return u;
}

/* Parse a URL that must be rejected with `code` and a message containing
 * `needle`; the message is one line and never contains SECRET. */
static void bad_code(const char *s, int code, const char *needle)
{
    char err[DL_ERRMSG_MAX];
    dl_url *u = (dl_url *)&err; /* must be reset to NULL */
    int rc = dl_url_parse(s, &u, err, sizeof err);
    if (rc != code)
        fail_msg("\"%s\": rc %d, want %d (%s)", s ? s : "(null)", rc, code,
                 rc == 0 ? "accepted" : err);
    assert_null(u);
    assert_true(err[0] != '\0');
    if (needle && !strstr(err, needle))
        fail_msg("\"%s\": message \"%s\" lacks \"%s\"", s, err, needle);
    if (strstr(err, SECRET))
        fail_msg("\"%s\": message leaks the password: %s", s, err);
    assert_null(strchr(err, '\n'));
    size_t n = strlen(err);
    assert_true(err[n - 1] != '.');
}

static void bad(const char *s, const char *needle)
{
    bad_code(s, DLOCK_EURL, needle);
}

static void host_is(const dl_url *u, size_t i, const char *host, int port)
{
    assert_true(i < u->nhosts);
    assert_string_equal(u->hosts[i].host, host);
    assert_int_equal(u->hosts[i].port, port);
}

/* ---- file -------------------------------------------------------------- */

static void test_file_ok(void **state)
{
    (void)state;
    dl_url *u = ok("file:///var/lib/dlock");
    assert_string_equal(u->scheme, "file");
    assert_string_equal(u->path, "/var/lib/dlock");
    assert_int_equal(u->nhosts, 0);
    assert_null(u->hosts);
    assert_null(u->user);
    assert_null(u->password);
    assert_int_equal(u->nparams, 0);
    assert_string_equal(u->redacted, "file:///var/lib/dlock");
    dl_url_free(u);

    u = ok("file://localhost/tmp/x/");
    assert_string_equal(u->path, "/tmp/x");
    dl_url_free(u);
    u = ok("FILE://LocalHost/tmp//");
    assert_string_equal(u->scheme, "file");
    assert_string_equal(u->path, "/tmp");
    dl_url_free(u);
    u = ok("file:///");
    assert_string_equal(u->path, "/");
    dl_url_free(u);
    u = ok("file:////");
    assert_string_equal(u->path, "/");
    dl_url_free(u);
    u = ok("file:///tmp/my%20locks");
    assert_string_equal(u->path, "/tmp/my locks");
    dl_url_free(u);
    u = ok("file:///tmp/a%40b:c");
    assert_string_equal(u->path, "/tmp/a@b:c");
    assert_null(u->password);
    dl_url_free(u);
    u = ok("file:///tmp/d?fsync=1&x");
    assert_string_equal(u->path, "/tmp/d");
    assert_int_equal(u->nparams, 2);
    assert_string_equal(dl_url_param(u, "fsync"), "1");
    assert_string_equal(dl_url_param(u, "x"), "");
    dl_url_free(u);
}

static void test_file_errors(void **state)
{
    (void)state;
    bad("file://", "absolute directory");
    bad("file://localhost", "absolute directory");
    bad("file://localhost?x=1", "absolute directory");
    bad("file://tmp/locks", "file:///tmp");
    bad("file://example.com/tmp", "host must be empty or localhost");
    bad("file:relative/dir", "file:///");
    bad("file:/tmp/dir", "file:///");
    bad("file://u:" SECRET "@localhost/tmp", "no user, password or port");
    bad("file://localhost:80/tmp", "no user, password or port");
    bad("file:///tmp/%00x", "%00");
    bad("file:///tmp/%zz", "percent escape");
    bad("file:///tmp/%4", "percent escape");
    bad("file:///tmp/%", "percent escape");
    bad("file:///tmp/%0a", "control character");
    bad("file:///tmp/x:" SECRET "@y", "'@' after the host part");
}

/* ---- redis family ---------------------------------------------------------- */

static void test_redis_ok(void **state)
{
    (void)state;
    dl_url *u = ok("redis://localhost");
    assert_string_equal(u->scheme, "redis");
    assert_int_equal(u->nhosts, 1);
    host_is(u, 0, "localhost", 6379);
    assert_string_equal(u->path, "");
    dl_url_free(u);

    u = ok("REDIS://cache.example.com:7000/3");
    assert_string_equal(u->scheme, "redis");
    host_is(u, 0, "cache.example.com", 7000);
    assert_string_equal(u->path, "3");
    dl_url_free(u);

    u = ok("redis://h/007");
    assert_string_equal(u->path, "7");
    dl_url_free(u);
    u = ok("redis://h/0");
    assert_string_equal(u->path, "0");
    dl_url_free(u);
    u = ok("redis://h/1000000");
    assert_string_equal(u->path, "1000000");
    dl_url_free(u);
    u = ok("redis://h:6380/");
    assert_string_equal(u->path, "");
    host_is(u, 0, "h", 6380);
    dl_url_free(u);
    u = ok("redis://h?timeout=5");
    assert_string_equal(u->path, "");
    assert_string_equal(dl_url_param(u, "timeout"), "5");
    dl_url_free(u);
    u = ok("redis://my_host-1.local:1");
    host_is(u, 0, "my_host-1.local", 1);
    dl_url_free(u);
    u = ok("redis://10.0.0.1:65535");
    host_is(u, 0, "10.0.0.1", 65535);
    dl_url_free(u);
    u = ok("redis://h:00080");
    host_is(u, 0, "h", 80);
    dl_url_free(u);
}

static void test_redis_errors(void **state)
{
    (void)state;
    bad("redis://h/abc", "redis database must be a number 0-1000000");
    bad("redis://h/-1", "redis database");
    bad("redis://h/1000001", "redis database");
    bad("redis://h/99999999999999999999999", "redis database");
    bad("redis://h/1/2", "redis database");
    bad("redis://h/%86%C3%A9", "got \"???\"");
    bad("redis://h1,h2", "one host");
    bad("redis://h1:6379,h2:6380/0", "one host");
    bad("rediss://h:6379", "not supported");
}

static void test_sentinel(void **state)
{
    (void)state;
    dl_url *u = ok("redis+sentinel://s1,s2:26380,[::1]/mymaster");
    assert_string_equal(u->scheme, "redis+sentinel");
    assert_int_equal(u->nhosts, 3);
    host_is(u, 0, "s1", 26379);
    host_is(u, 1, "s2", 26380);
    host_is(u, 2, "::1", 26379);
    assert_string_equal(u->path, "mymaster");
    dl_url_free(u);
    u = ok("redis+sentinel://:" SECRET "@s1/my%20master");
    assert_string_equal(u->path, "my master");
    assert_string_equal(u->password, SECRET);
    assert_null(u->user);
    dl_url_free(u);

    bad("redis+sentinel://s1,s2", "master name");
    bad("redis+sentinel://s1/", "master name");
    bad("redis+sentinel://s1/a/b", "master name may not contain '/'");
    bad("redis+sentinel://s1/a%2Fb", "master name may not contain '/'");
}

static void test_cluster(void **state)
{
    (void)state;
    dl_url *u = ok("redis+cluster://n1:7000,n2:7001,n3");
    assert_string_equal(u->scheme, "redis+cluster");
    assert_int_equal(u->nhosts, 3);
    host_is(u, 2, "n3", 6379);
    dl_url_free(u);
    u = ok("redis+cluster://n1/0");
    assert_string_equal(u->path, "0");
    dl_url_free(u);
    bad("redis+cluster://n1/1", "only database 0");
}

static void test_redlock(void **state)
{
    (void)state;
    dl_url *u = ok("redlock://r1:7001,r2:7002,r3");
    assert_string_equal(u->scheme, "redlock");
    assert_int_equal(u->nhosts, 3);
    host_is(u, 0, "r1", 7001);
    host_is(u, 1, "r2", 7002);
    host_is(u, 2, "r3", 6379);
    dl_url_free(u);
    u = ok("redlock://r1");
    assert_int_equal(u->nhosts, 1);
    dl_url_free(u);
    u = ok("redlock://r1:6379,r1:6380/2");
    assert_int_equal(u->nhosts, 2);
    assert_string_equal(u->path, "2");
    dl_url_free(u);

    /* One master listed twice would vote twice. */
    bad("redlock://r1:6379,r2,r1", "duplicate host \"r1\" port 6379");
    bad("redlock://R1,r1", "duplicate host");
    bad("redlock://[::1],[::1]:6379", "duplicate host");
    bad("redlock://", "missing host");
    bad("redlock://r1,,r3", "empty host in the host list");
    bad("redlock://r1,r2,", "empty host in the host list");
    bad("redlock://,r2", "empty host in the host list");
}

static void test_zk(void **state)
{
    (void)state;
    dl_url *u = ok("zk://z1:2181,z2,z3:2182/app/locks");
    assert_string_equal(u->scheme, "zk");
    assert_int_equal(u->nhosts, 3);
    host_is(u, 1, "z2", 2181);
    assert_string_equal(u->path, "/app/locks");
    dl_url_free(u);
    u = ok("zk://z1/app/locks/");
    assert_string_equal(u->path, "/app/locks");
    dl_url_free(u);
    u = ok("zk://z1");
    assert_string_equal(u->path, "");
    dl_url_free(u);
    u = ok("zk://z1/");
    assert_string_equal(u->path, "");
    dl_url_free(u);
    u = ok("zk://digest:" SECRET "@z1/c");
    assert_string_equal(u->user, "digest");
    assert_string_equal(u->password, SECRET);
    assert_string_equal(u->redacted, "zk://digest:***@z1/c");
    dl_url_free(u);

    bad("zk://z1//a", "zk chroot");
    bad("zk://z1//", "zk chroot");
    bad("zk://z1/a//", "zk chroot");
    bad("zk://z1/zookeeper", "ZooKeeper's own tree");
    bad("zk://z1/zookeeper/", "ZooKeeper's own tree");
    bad("zk://z1/zookeeper/quota", "ZooKeeper's own tree");
    u = ok("zk://z1/zookeepers");
    assert_string_equal(u->path, "/zookeepers");
    dl_url_free(u);
    bad("zk://z1/a//b", "zk chroot");
    bad("zk://z1/a/./b", "zk chroot");
    bad("zk://z1/a/..", "zk chroot");
    bad("zk://z1/.", "zk chroot");
}

static void test_etcd_memcached(void **state)
{
    (void)state;
    dl_url *u = ok("etcd://e1,e2:12379");
    assert_string_equal(u->scheme, "etcd");
    host_is(u, 0, "e1", 2379);
    host_is(u, 1, "e2", 12379);
    dl_url_free(u);
    u = ok("etcds://e1/");
    assert_string_equal(u->scheme, "etcds");
    host_is(u, 0, "e1", 2379);
    assert_string_equal(u->path, "");
    dl_url_free(u);
    u = ok("memcached://m1");
    assert_string_equal(u->scheme, "memcached");
    host_is(u, 0, "m1", 11211);
    dl_url_free(u);

    bad("etcd://e1/prefix", "etcd urls take no path");
    bad("etcds://e1/prefix", "etcds urls take no path");
    bad("memcached://m1/x", "memcached urls take no path");
    u = ok("memcached://m1,m2:11311");
    host_is(u, 0, "m1", 11211);
    host_is(u, 1, "m2", 11311);
    dl_url_free(u);
}

static void test_sql(void **state)
{
    (void)state;
    dl_url *u = ok("postgresql://app:" SECRET "@db.local/locks?sslmode=require&mode=lease");
    assert_string_equal(u->scheme, "postgres");
    host_is(u, 0, "db.local", 5432);
    assert_string_equal(u->user, "app");
    assert_string_equal(u->password, SECRET);
    assert_string_equal(u->path, "locks");
    assert_int_equal(u->nparams, 2);
    assert_string_equal(u->params[0].key, "sslmode");
    assert_string_equal(u->params[0].value, "require");
    assert_string_equal(u->params[1].key, "mode");
    assert_string_equal(u->params[1].value, "lease");
    assert_string_equal(u->redacted,
                        "postgresql://app:***@db.local/locks?sslmode=require&mode=lease");
    dl_url_free(u);
    u = ok("postgres://h");
    assert_string_equal(u->scheme, "postgres");
    assert_string_equal(u->path, "");
    dl_url_free(u);
    u = ok("postgres://h:5433/my%2Fdb");
    host_is(u, 0, "h", 5433);
    assert_string_equal(u->path, "my/db");
    dl_url_free(u);

    u = ok("mysql://root@127.0.0.1:3307/test");
    assert_string_equal(u->scheme, "mysql");
    assert_string_equal(u->user, "root");
    assert_null(u->password);
    host_is(u, 0, "127.0.0.1", 3307);
    assert_string_equal(u->path, "test");
    dl_url_free(u);
    u = ok("MariaDB://h/x");
    assert_string_equal(u->scheme, "mysql");
    host_is(u, 0, "h", 3306);
    dl_url_free(u);

    /* libpq takes a list of hosts (tried in order) */
    u = ok("postgres://h1,h2:5433/db");
    host_is(u, 0, "h1", 5432);
    host_is(u, 1, "h2", 5433);
    dl_url_free(u);
    bad("mysql://h1,h2/db", "mysql urls take one host");
    bad("mariadb://h1,h2/db", "mysql urls take one host");
}

static void test_default_ports(void **state)
{
    (void)state;
    static const struct {
        const char *scheme;
        int port;
    } t[] = {
        {"redis", 6379},     {"redis+sentinel", 26379}, {"redis+cluster", 6379},
        {"redlock", 6379},   {"zk", 2181},              {"etcd", 2379},
        {"etcds", 2379},     {"postgres", 5432},        {"postgresql", 5432},
        {"mysql", 3306},     {"mariadb", 3306},         {"memcached", 11211},
        {"file", 0},         {"rediss", 0},             {"nope", 0},
        {"", 0},
    };
    for (size_t i = 0; i < sizeof t / sizeof t[0]; i++) {
        assert_int_equal(dl_url_default_port(t[i].scheme), t[i].port);
        if (t[i].port == 0)
            continue;
        char url[64];
        snprintf(url, sizeof url, "%s://h%s", t[i].scheme,
                 strcmp(t[i].scheme, "redis+sentinel") == 0 ? "/m" : "");
        dl_url *u = ok(url);
        host_is(u, 0, "h", t[i].port);
        dl_url_free(u);
    }
    assert_int_equal(dl_url_default_port(NULL), 0);
}

/* ---- hosts and ports ------------------------------------------------------- */

static void test_ports(void **state)
{
    (void)state;
    bad("redis://h:0", "port 0 out of range 1-65535");
    bad("redis://h:65536", "port 65536 out of range 1-65535");
    bad("redis://h:99999", "port 99999 out of range 1-65535");
    bad("redis://h:99999999999999999999", "out of range 1-65535");
    bad("redis://h:", "empty port after host \"h\"");
    bad("redis://[::1]:", "empty port");
    bad("redis://h:abc", "invalid port \"abc\"");
    bad("redis://h:+80", "invalid port");
    bad("redis://h:-1", "invalid port");
    bad("redis://h: 80", "invalid port");
    bad("redis://h:80x", "invalid port");
    bad("redlock://a:1,b:70000", "port 70000 out of range");
    /* The brief's example, verbatim. */
    char err[DL_ERRMSG_MAX];
    dl_url *u;
    assert_int_equal(dl_url_parse("redis://h:99999", &u, err, sizeof err), DLOCK_EURL);
    assert_string_equal(err, "malformed url \"redis://h:99999\": port 99999 out of range 1-65535");
}

static void test_ipv6(void **state)
{
    (void)state;
    dl_url *u = ok("redis://[::1]:6380/2");
    host_is(u, 0, "::1", 6380);
    assert_string_equal(u->path, "2");
    dl_url_free(u);
    u = ok("redis://[2001:db8::42]");
    host_is(u, 0, "2001:db8::42", 6379);
    dl_url_free(u);
    u = ok("zk://[::1]:2181,[::ffff:127.0.0.1],z3/c");
    host_is(u, 0, "::1", 2181);
    host_is(u, 1, "::ffff:127.0.0.1", 2181);
    host_is(u, 2, "z3", 2181);
    dl_url_free(u);
    u = ok("redis://[fe80::1%25eth0]:1");
    host_is(u, 0, "fe80::1%eth0", 1);
    dl_url_free(u);
    u = ok("redis://u:" SECRET "@[::1]");
    host_is(u, 0, "::1", 6379);
    assert_string_equal(u->redacted, "redis://u:***@[::1]");
    dl_url_free(u);

    bad("redis://::1", "must be in brackets");
    bad("redis://::1:6379", "must be in brackets");
    bad("redis://[::1", "unterminated '['");
    bad("redis://[::1]x", "after ']'");
    bad("redis://[]", "invalid ipv6");
    bad("redis://[zz::1]", "invalid ipv6 address");
    bad("redis://[127.0.0.1]", "invalid ipv6 address");
    bad("redis://[fe80::1%25]", "zone id");
    bad("redis://[fe80::1%eth0]", "invalid ipv6");
    bad("redis://[fe80::1%25e/0]", NULL);
}

static void test_hosts(void **state)
{
    (void)state;
    bad("redis://", "missing host");
    bad("redis:///0", "missing host");
    bad("redis://:6379", "missing host");
    bad("redis://u:" SECRET "@", "missing host");
    bad("redis://u:" SECRET "@:1", "missing host");
    bad("redis://h%41", "invalid character '%'");
    bad("redis://h h", "invalid character ' '");
    bad("redis://-h", "invalid host");
    bad("redis://.h", "invalid host");
    bad("redis://h#x", "invalid character '#'");
    char big[400];
    memset(big, 'a', 254);
    big[254] = '\0';
    char url[420];
    snprintf(url, sizeof url, "redis://%s", big);
    bad(url, "longer than 253");
    big[253] = '\0';
    snprintf(url, sizeof url, "redis://%s", big);
    dl_url *u = ok(url);
    assert_int_equal(strlen(u->hosts[0].host), 253);
    dl_url_free(u);

    /* 64 hosts fit; 65 do not. */
    char many[1024] = "redlock://";
    for (int i = 0; i < 65; i++)
        snprintf(many + strlen(many), sizeof many - strlen(many), "%sh%d", i ? "," : "", i);
    bad(many, "too many hosts (65, max 64)");
    *strrchr(many, ',') = '\0';
    u = ok(many);
    assert_int_equal(u->nhosts, 64);
    host_is(u, 63, "h63", 6379);
    dl_url_free(u);
}

/* ---- userinfo, decoding, params ------------------------------------------ */

static void test_userinfo(void **state)
{
    (void)state;
    dl_url *u = ok("redis://alice:" SECRET "@h");
    assert_string_equal(u->user, "alice");
    assert_string_equal(u->password, SECRET);
    assert_string_equal(u->redacted, "redis://alice:***@h");
    dl_url_free(u);

    u = ok("redis://:" SECRET "@h:1/2");
    assert_null(u->user);
    assert_string_equal(u->password, SECRET);
    assert_string_equal(u->redacted, "redis://:***@h:1/2");
    dl_url_free(u);

    u = ok("redis://alice@h");
    assert_string_equal(u->user, "alice");
    assert_null(u->password);
    assert_string_equal(u->redacted, "redis://alice@h");
    dl_url_free(u);

    u = ok("redis://alice:@h");
    assert_string_equal(u->user, "alice");
    assert_null(u->password);
    assert_string_equal(u->redacted, "redis://alice:@h");
    dl_url_free(u);

    u = ok("redis://@h");
    assert_null(u->user);
    assert_null(u->password);
    dl_url_free(u);

    /* Encoded specials decode; raw ':' and '@' inside the password are kept
     * (the user ends at the first ':', the userinfo at the last '@'). */
    u = ok("redis://a%40b.c:p%2F%3A%40%25%20w@h");
    assert_string_equal(u->user, "a@b.c");
    assert_string_equal(u->password, "p/:@% w");
    assert_string_equal(u->redacted, "redis://a%40b.c:***@h");
    dl_url_free(u);
    u = ok("redis://u:p:w@x#y@h");
    assert_string_equal(u->user, "u");
    assert_string_equal(u->password, "p:w@x#y");
    assert_string_equal(u->redacted, "redis://u:***@h");
    host_is(u, 0, "h", 6379);
    dl_url_free(u);

    /* Passwords are opaque bytes; other parts refuse control characters. */
    u = ok("redis://u:a%0Ab%7F@h");
    assert_string_equal(u->password, "a\nb\x7f");
    dl_url_free(u);
    u = ok("redis://u:%C3%A9@h");
    assert_string_equal(u->password, "\xc3\xa9");
    dl_url_free(u);
    bad("redis://u%0A:p@h", "control character in the user name");
    bad("redis://u%00:p@h", "%00 is not allowed in the user name");
    bad("redis://u:" SECRET "%00@h", "%00 is not allowed in the password");
    bad("redis://u:" SECRET "%@h", "bad percent escape in the password");
    bad("redis://u:" SECRET "%g1@h", "bad percent escape in the password");
    bad("redis://u%zz:" SECRET "@h", "bad percent escape in the user name");
}

static void test_params(void **state)
{
    (void)state;
    dl_url *u = ok("redis://h/1?b=2&a=1&flag&e=&&x%20y=%3D%26v");
    assert_int_equal(u->nparams, 5);
    assert_string_equal(u->params[0].key, "b");
    assert_string_equal(u->params[0].value, "2");
    assert_string_equal(u->params[1].key, "a");
    assert_string_equal(u->params[2].key, "flag");
    assert_string_equal(u->params[2].value, "");
    assert_string_equal(u->params[3].key, "e");
    assert_string_equal(u->params[3].value, "");
    assert_string_equal(u->params[4].key, "x y");
    assert_string_equal(u->params[4].value, "=&v");
    assert_string_equal(dl_url_param(u, "a"), "1");
    assert_string_equal(dl_url_param(u, "x y"), "=&v");
    assert_null(dl_url_param(u, "A"));
    assert_null(dl_url_param(u, "missing"));
    assert_null(dl_url_param(u, NULL));
    assert_string_equal(u->path, "1");
    dl_url_free(u);
    assert_null(dl_url_param(NULL, "a"));

    u = ok("redis://h?");
    assert_int_equal(u->nparams, 0);
    dl_url_free(u);
    u = ok("redis://h?a=b=c+d");
    assert_string_equal(dl_url_param(u, "a"), "b=c+d");
    dl_url_free(u);

    bad("redis://h?a=1&a=2", "duplicate query parameter \"a\"");
    bad("redis://h?a&a", "duplicate query parameter");
    bad("redis://h?%FF=1&%FF=2", "duplicate query parameter \"?\"");
    bad("redis://h?=1", "query parameter without a name");
    bad("redis://h?a=%", "bad percent escape in the query parameter value");
    bad("redis://h?a=%00", "%00 is not allowed in the query parameter value");
    bad("redis://h?a%0a=1", "control character in the query parameter name");
}

static void test_redaction(void **state)
{
    (void)state;
    dl_url *u = ok("postgres://u@h/db?password=" SECRET "&sslpassword=" SECRET "x&mode=lease");
    assert_string_equal(dl_url_param(u, "password"), SECRET);
    assert_string_equal(u->redacted,
                        "postgres://u@h/db?password=***&sslpassword=***&mode=lease");
    dl_url_free(u);
    u = ok("postgres://h/db?PassWord=" SECRET);
    assert_string_equal(u->redacted, "postgres://h/db?PassWord=***");
    dl_url_free(u);
    /* An encoded key could spell "password": hidden too. */
    u = ok("postgres://h/db?pass%77ord=" SECRET);
    assert_string_equal(dl_url_param(u, "password"), SECRET);
    assert_string_equal(u->redacted, "postgres://h/db?pass%77ord=***");
    dl_url_free(u);
    u = ok("postgres://h/db?password=&password2");
    assert_string_equal(u->redacted, "postgres://h/db?password=&password2");
    dl_url_free(u);
    /* The password text elsewhere in the URL is not the password. */
    u = ok("redis+sentinel://pw:pw@pw/pw?pw=pw");
    assert_string_equal(u->redacted, "redis+sentinel://pw:***@pw/pw?pw=pw");
    dl_url_free(u);
    /* A short password still gets "***", never left visible. */
    u = ok("redis://:x@h");
    assert_string_equal(u->redacted, "redis://:***@h");
    dl_url_free(u);
}

/* Every malformed URL carrying the password: the message must not show it. */
static void test_no_leak_in_errors(void **state)
{
    (void)state;
    static const char *const urls[] = {
        "redis://u:" SECRET "@h:99999",
        "redis://u:" SECRET "@h:abc",
        "redis://u:" SECRET "@h/abc",
        "redis://u:" SECRET "@h1,h2",
        "redis://u:" SECRET "@[::1",
        "redis://u:" SECRET "@h?a=1&a=2",
        "redis://u:" SECRET "@h?a=%zz",
        "redis://u:" SECRET "@h h",
        "redis://u:" SECRET "@",
        "redis://:" SECRET "@:1",
        /* unencoded '/', '?' and '@' in the password */
        "redis://u:" SECRET "/x@h",
        "redis://u:a/" SECRET "@h",
        "redis://u:" SECRET "?x@h",
        "redis://u:" SECRET "/@h:6379/0",
        "redis+sentinel://u:12/" SECRET "@host",
        "zk://u:" SECRET "/a@h/c",
        "redis://u:" SECRET "@h/0/@x",
        "redis://u:" SECRET "@h?x=@",
        "foo://u:" SECRET "@h",
        "u:" SECRET "@h",
        "redis:u:" SECRET "@h",
        "redis:/u:" SECRET "@h",
        "1x://u:" SECRET "@h",
        "x:" SECRET "@h://y",
        "rediss://u:" SECRET "@h",
        "file://u:" SECRET "@localhost/tmp",
        "file://:" SECRET "@/tmp",
        "etcd://u:" SECRET "@e1/path",
        "redlock://u:" SECRET "@a,a",
        "postgres://h/db?password=" SECRET "&password=x",
        "postgres://h:0/db?password=" SECRET,
        "postgres://h:0/db?pass%77ord=" SECRET,
        "postgres://h/db?sslpassword=" SECRET "&%zz",
        "redis://u:" SECRET "@h:1\n",
        "redis://u:" SECRET "@h:1\x7f",
        "redis://u:" SECRET "@h:1\xc3\xa9",
    };
    for (size_t i = 0; i < sizeof urls / sizeof urls[0]; i++)
        bad(urls[i], NULL);

    /* Truncated quoting must not cut "***" into something else either. */
    char url[600];
    int n = snprintf(url, sizeof url, "redis://u:" SECRET "@");
    memset(url + n, 'h', 240);
    strcpy(url + n + 240, ":0");
    bad(url, "out of range");
}

static void test_errors_general(void **state)
{
    (void)state;
    char err[DL_ERRMSG_MAX];
    dl_url *u = NULL;

    bad(NULL, "url is missing");
    bad("", "url is empty");
    bad("redis", "expected scheme://");
    bad("redis:", "expected scheme://");
    bad("://h", "expected scheme://");
    bad("9p://h", "expected scheme://");
    bad("foo://h", "unknown url scheme \"foo\" (known: file redis redis+sentinel");
    bad("HTTP://h", "unknown url scheme \"http\"");
    bad("rediss://h", "url scheme \"rediss\" (redis over tls) is not supported");
    bad("redis://h\t", "control character 0x09 at offset 9");
    bad("redis://h\x01", "control character 0x01");
    bad("redis://h\x7f", "control character 0x7f");
    bad("redis://h\xff", "non-ascii byte 0xff");
    bad("redis://u:p@h/0/@x", "'@' after the host part");

    assert_int_equal(dl_url_parse("redis://h", NULL, err, sizeof err), DLOCK_EINVAL);
    /* No error buffer, or a tiny one, is fine. */
    assert_int_equal(dl_url_parse("redis://h:0", &u, NULL, 0), DLOCK_EURL);
    assert_null(u);
    char tiny[8];
    assert_int_equal(dl_url_parse("redis://h:0", &u, tiny, sizeof tiny), DLOCK_EURL);
    assert_int_equal(strlen(tiny), sizeof tiny - 1);
    u = NULL;
    assert_int_equal(dl_url_parse("redis://h", &u, NULL, 0), 0);
    dl_url_free(u);
    dl_url_free(NULL);
}

static void test_length_limit(void **state)
{
    (void)state;
    /* "postgres://h/" + database name: exactly 4096 bytes is accepted. */
    char *s = malloc(4098);
    assert_non_null(s);
    strcpy(s, "postgres://h/");
    size_t n = strlen(s);
    memset(s + n, 'd', 4096 - n);
    s[4096] = '\0';
    dl_url *u = ok(s);
    assert_int_equal(strlen(u->path), 4096 - n);
    dl_url_free(u);
    s[4096] = 'd';
    s[4097] = '\0';
    bad(s, "url is longer than 4096 bytes");
    free(s);
}

/* ---- lock names -------------------------------------------------------------- */

static void name_ok(const char *name)
{
    char err[128] = "junk";
    int rc = dlock_name_valid(name, err, sizeof err);
    if (rc != 0)
        fail_msg("name \"%s\" rejected: %s", name, err);
    assert_string_equal(err, "");
}

static void name_bad(const char *name, const char *needle)
{
    char err[128] = "";
    assert_int_equal(dlock_name_valid(name, err, sizeof err), DLOCK_ENAME);
    if (!strstr(err, needle))
        fail_msg("name message \"%s\" lacks \"%s\"", err, needle);
    assert_null(strchr(err, '\n'));
    assert_int_equal(dlock_name_valid(name, NULL, 0), DLOCK_ENAME);
}

static void test_names(void **state)
{
    (void)state;
    char buf[300];

    name_ok("a");
    name_ok("nightly-backup");
    name_ok("job:42 shard=7 {x}~!@#$%^&*()");
    name_ok("a.b..c.");
    name_ok("a b");
    memset(buf, 'x', 200);
    buf[200] = '\0';
    name_ok(buf);

    buf[200] = 'x';
    buf[201] = '\0';
    name_bad(buf, "longer than 200 bytes");
    memset(buf, 'x', sizeof buf - 1);
    buf[sizeof buf - 1] = '\0';
    name_bad(buf, "longer than 200 bytes");

    name_bad(NULL, "lock name is missing");
    name_bad("", "lock name is empty");
    name_bad("a/b", "may not contain '/'");
    name_bad("/", "may not contain '/'");
    name_bad("../etc", "may not contain '/'");
    name_bad("a\\b", "may not contain '\\'");
    name_bad(".", "may not be \".\"");
    name_bad("..", "may not be \"..\"");
    name_bad(".hidden", "may not start with '.'");
    name_bad("...", "may not start with '.'");
    name_bad(" a", "may not start or end with a space");
    name_bad("a ", "may not start or end with a space");
    name_bad(" ", "may not start or end with a space");
    name_bad("a\tb", "control character 0x09 at offset 1");
    name_bad("a\nb", "control character 0x0a");
    name_bad("\x7f", "control character 0x7f");
    name_bad("caf\xc3\xa9", "non-ascii byte 0xc3 at offset 3");

    /* A small or absent buffer is fine. */
    char tiny[4];
    assert_int_equal(dlock_name_valid("", tiny, sizeof tiny), DLOCK_ENAME);
    assert_int_equal(strlen(tiny), 3);
    assert_int_equal(dlock_name_valid("ok", NULL, 0), 0);
    assert_int_equal(dlock_name_valid("ok", tiny, 0), 0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_file_ok),
        cmocka_unit_test(test_file_errors),
        cmocka_unit_test(test_redis_ok),
        cmocka_unit_test(test_redis_errors),
        cmocka_unit_test(test_sentinel),
        cmocka_unit_test(test_cluster),
        cmocka_unit_test(test_redlock),
        cmocka_unit_test(test_zk),
        cmocka_unit_test(test_etcd_memcached),
        cmocka_unit_test(test_sql),
        cmocka_unit_test(test_default_ports),
        cmocka_unit_test(test_ports),
        cmocka_unit_test(test_ipv6),
        cmocka_unit_test(test_hosts),
        cmocka_unit_test(test_userinfo),
        cmocka_unit_test(test_params),
        cmocka_unit_test(test_redaction),
        cmocka_unit_test(test_no_leak_in_errors),
        cmocka_unit_test(test_errors_general),
        cmocka_unit_test(test_length_limit),
        cmocka_unit_test(test_names),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
