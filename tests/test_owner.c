/* SPDX-License-Identifier: MIT */
/*
 * test_owner.c — owner ids (core.c, new_owner_id): the id a server keeps for
 * each acquisition, so that only its holder can renew or release it (SPEC
 * §2.3: 128 random bits from getrandom, fresh per acquisition). Checked
 * here: every id is 32 lowercase hex digits; no two are the same, from one
 * thread or from many at once; and a forked child never repeats its
 * parent's (the ids are read from the kernel in batches, into a page a
 * child finds zeroed: without MADV_WIPEONFORK the fork case fails).
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmocka.h>

#include "dlock.h"
#include "internal.h"

#define PER_THREAD 5000
#define THREADS 4
#define FORKED 200

static char dir[] = "/tmp/dlock-owner-XXXXXX";
static dlock_client *client;

static dlock_lock *new_lock(void)
{
    dlock_lock *l = NULL;
    assert_int_equal(dlock_lock_new(&l, client, "owner", NULL), 0);
    return l;
}

/* n ids of l, each checked for its form, into ids (n * 33 bytes). */
static void draw(dlock_lock *l, char (*ids)[DL_OWNER_HEX + 1], size_t n)
{
    for (size_t i = 0; i < n; i++) {
        assert_int_equal(dl_lock_new_owner(l), 0);
        assert_int_equal(strlen(l->owner), DL_OWNER_HEX);
        assert_int_equal(strspn(l->owner, "0123456789abcdef"), DL_OWNER_HEX);
        memcpy(ids[i], l->owner, DL_OWNER_HEX + 1);
    }
}

static int cmp_id(const void *a, const void *b)
{
    return memcmp(a, b, DL_OWNER_HEX);
}

/* The first id that appears twice among n (sorted in place), or NULL. */
static const char *repeated(char (*ids)[DL_OWNER_HEX + 1], size_t n)
{
    qsort(ids, n, sizeof ids[0], cmp_id);
    for (size_t i = 1; i < n; i++)
        if (memcmp(ids[i - 1], ids[i], DL_OWNER_HEX) == 0)
            return ids[i];
    return NULL;
}

static void *drawer(void *arg)
{
    dlock_lock *l = new_lock();
    draw(l, arg, PER_THREAD);
    dlock_lock_free(l);
    return NULL;
}

static void distinct_across_threads(void **state)
{
    (void)state;
    char(*ids)[DL_OWNER_HEX + 1] = calloc(THREADS * PER_THREAD, sizeof *ids);
    assert_non_null(ids);
    pthread_t th[THREADS];
    for (int i = 0; i < THREADS; i++)
        assert_int_equal(pthread_create(&th[i], NULL, drawer, ids + i * PER_THREAD), 0);
    for (int i = 0; i < THREADS; i++)
        pthread_join(th[i], NULL);
    const char *twice = repeated(ids, THREADS * PER_THREAD);
    if (twice)
        fail_msg("owner id %s was drawn twice", twice);
    free(ids);
}

static void forked_child_draws_its_own(void **state)
{
    (void)state;
    dlock_lock *l = new_lock();
    static char ids[2 * FORKED][DL_OWNER_HEX + 1];
    draw(l, ids, 1); /* the parent draws before the fork */
    int fds[2];
    assert_int_equal(pipe(fds), 0);
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        close(fds[0]);
        static char mine[FORKED][DL_OWNER_HEX + 1];
        draw(l, mine, FORKED);
        _exit(write(fds[1], mine, sizeof mine) == (ssize_t)sizeof mine ? 0 : 1);
    }
    close(fds[1]);
    draw(l, ids, FORKED);
    size_t got = 0;
    while (got < sizeof ids / 2) {
        ssize_t n = read(fds[0], (char *)ids[FORKED] + got, sizeof ids / 2 - got);
        assert_true(n > 0);
        got += (size_t)n;
    }
    close(fds[0]);
    int st;
    assert_int_equal(waitpid(pid, &st, 0), pid);
    assert_true(WIFEXITED(st) && WEXITSTATUS(st) == 0);
    /* (ids from a generator the child inherited would share half or more) */
    if (memcmp(ids[0], ids[FORKED], DL_OWNER_HEX / 2) == 0)
        fail_msg("the child's ids share half the parent's: %s and %s", ids[0], ids[FORKED]);
    const char *twice = repeated(ids, 2 * FORKED);
    if (twice)
        fail_msg("owner id %s was drawn by parent and child", twice);
    dlock_lock_free(l);
}

static int setup(void **state)
{
    (void)state;
    if (!mkdtemp(dir))
        return -1;
    char url[64];
    snprintf(url, sizeof url, "file://%s", dir);
    return dlock_client_open(&client, url, NULL) == 0 ? 0 : -1;
}

static int teardown(void **state)
{
    (void)state;
    dlock_client_close(client);
    (void)rmdir(dir); /* (empty: no lock was taken) */
    return 0;
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(distinct_across_threads),
        cmocka_unit_test(forked_child_draws_its_own),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
