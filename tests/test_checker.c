/* SPDX-License-Identifier: MIT */
/*
 * test_checker.c — the history checker of `dlock check`, on hand-made
 * histories with known faults. The checker is pure logic with no process of
 * its own, so it is compiled into this test directly.
 */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <cmocka.h>

#include <stdio.h>
#include <string.h>

#include "../src/harness/check_history.c"

/* One overlap (w=3 acquires while w=2 holds) and one stale write (w=3 writes
 * after it lost the lock and w=1 took it), which also loses an increment. */
static const char broken[] =
    "# hand-made: one overlap, one stale write accepted\n"
    "run scenario=handmade mode=fenced backend=file caps=0x1 ttl_ms=0 fencing=1\n"
    "1000 acquire w=1\n"
    "1100 acquired w=1 token=1\n"
    "1200 read w=1 token=1 value=0\n"
    "1300 write_accepted w=1 token=1 value=1\n"
    "1400 release w=1\n"
    "2000 acquire w=2\n"
    "2100 acquired w=2 token=2\n"
    "2120 read w=2 token=2 value=1\n"
    "2150 write_accepted w=2 token=2 value=2\n"
    "2180 acquire w=3\n"
    "2200 acquired w=3 token=3\n"
    "2250 release w=2\n"
    "2600 read w=3 token=3 value=2\n"
    "2700 lost w=3 token=3\n"
    "2800 acquire w=1\n"
    "2900 acquired w=1 token=4\n"
    "3000 read w=1 token=4 value=2\n"
    "3100 write_accepted w=3 token=3 value=3\n"
    "3200 write_accepted w=1 token=4 value=3\n"
    "3300 release w=1\n"
    "3400 final value=3\n";

/* The same stale write, refused by fencing: a correct run. Events are out of
 * order on purpose: the checker sorts by time. */
static const char fenced_ok[] =
    "run scenario=fenced mode=fenced backend=file caps=0x1 ttl_ms=0 fencing=1\n"
    "1100 acquired w=1 token=1\n"
    "1000 acquire w=1\n"
    "1200 read w=1 token=1 value=0\n"
    "1300 lost w=1 token=1\n"
    "1400 acquire w=2\n"
    "1500 acquired w=2 token=2\n"
    "1600 read w=2 token=2 value=0\n"
    "1700 write_rejected w=1 token=1 value=1\n"
    "1800 write_accepted w=2 token=2 value=1\n"
    "1900 release w=2\n"
    "1950 release w=1\n"
    "2000 final value=1\n";

static hist_run *read_str(const char *text, size_t *n)
{
    FILE *f = fmemopen((void *)text, strlen(text), "r");
    assert_non_null(f);
    hist_run *runs = NULL;
    char err[256] = "";
    int rc = hist_read(f, &runs, n, err, sizeof err);
    fclose(f);
    if (rc)
        fail_msg("hist_read: %s", err);
    return runs;
}

static void test_finds_overlap_and_stale_write(void **state)
{
    (void)state;
    size_t n;
    hist_run *runs = read_str(broken, &n);
    assert_int_equal(n, 1);
    assert_string_equal(runs[0].meta.scenario, "handmade");
    hist_result r;
    assert_int_equal(hist_check(&runs[0], &r), 0);
    assert_int_equal(r.sections, 4);
    assert_int_equal(r.overlaps, 1);
    assert_int_equal(r.stale_accepted, 1);
    assert_int_equal(r.stale_rejected, 0);
    assert_int_equal(r.writes_accepted, 4);
    assert_int_equal(r.final_value, 3);
    assert_int_equal(r.lost_increments, 1);
    assert_int_equal(r.token_dups, 0);
    assert_int_equal(r.token_regressions, 0);
    assert_non_null(strstr(r.first_overlap, "w=3"));
    assert_non_null(strstr(r.first_stale, "w=3"));
    char why[600];
    assert_string_equal(hist_verdict(&r, &runs[0].meta, why, sizeof why), "fail");
    assert_non_null(strstr(why, "overlapping"));
    hist_runs_free(runs, n);
}

static void test_fenced_stale_write_passes(void **state)
{
    (void)state;
    size_t n;
    hist_run *runs = read_str(fenced_ok, &n);
    hist_result r;
    assert_int_equal(hist_check(&runs[0], &r), 0);
    assert_int_equal(r.overlaps, 0);
    assert_int_equal(r.stale_rejected, 1);
    assert_int_equal(r.stale_accepted, 0);
    assert_int_equal(r.fresh_rejected, 0);
    assert_int_equal(r.lost_increments, 0);
    assert_int_equal(r.losses, 1);
    assert_int_equal(r.takeovers, 1);
    char why[600];
    assert_string_equal(hist_verdict(&r, &runs[0].meta, why, sizeof why), "pass");
    hist_runs_free(runs, n);
}

static void test_stale_write_alone_fails_with_fencing(void **state)
{
    (void)state;
    /* No overlap: only the stale write and its lost increment. */
    static const char text[] =
        "run scenario=s mode=fenced caps=0x1 fencing=1\n"
        "10 acquired w=1 token=1\n"
        "20 read w=1 token=1 value=0\n"
        "30 lost w=1\n"
        "40 acquired w=2 token=2\n"
        "50 read w=2 token=2 value=0\n"
        "60 write_accepted w=1 token=1 value=1\n"
        "70 write_accepted w=2 token=2 value=1\n"
        "80 release w=2\n";
    size_t n;
    hist_run *runs = read_str(text, &n);
    hist_result r;
    assert_int_equal(hist_check(&runs[0], &r), 0);
    assert_int_equal(r.overlaps, 0);
    assert_int_equal(r.stale_accepted, 1);
    assert_int_equal(r.has_final, 0);
    assert_int_equal(r.final_value, 1); /* the last accepted value */
    assert_int_equal(r.lost_increments, 1);
    char why[600];
    assert_string_equal(hist_verdict(&r, &runs[0].meta, why, sizeof why), "fail");
    assert_non_null(strstr(why, "stale"));
    /* The same history from a canary run (no fencing at the resource) is
     * the expected outcome, not a failure. */
    runs[0].meta.fencing = 0;
    assert_string_equal(hist_verdict(&r, &runs[0].meta, why, sizeof why), "pass");
    hist_runs_free(runs, n);
}

/* A stale write accepted while nobody had taken the lock after its writer
 * (the fault's takeover never came: the next worker could not reach the
 * servers) is no fencing failure: no later token existed to refuse it. */
static void test_unopposed_stale_write_is_no_violation(void **state)
{
    (void)state;
    static const char text[] =
        "run scenario=s mode=fenced caps=0x1 fencing=1\n"
        "10 acquired w=1 token=7\n"
        "20 read w=1 token=7 value=0\n"
        "30 lost w=1\n"
        "60 write_accepted w=1 token=7 value=1\n"
        "70 acquired w=2 token=8\n"
        "80 read w=2 token=8 value=1\n"
        "90 write_accepted w=2 token=8 value=2\n"
        "95 release w=2\n";
    size_t n;
    hist_run *runs = read_str(text, &n);
    hist_result r;
    assert_int_equal(hist_check(&runs[0], &r), 0);
    assert_int_equal(r.stale_accepted, 1);
    assert_int_equal(r.stale_accepted_unopposed, 1);
    assert_int_equal(r.lost_increments, 0);
    char why[600];
    assert_string_not_equal(hist_verdict(&r, &runs[0].meta, why, sizeof why), "fail");
    hist_runs_free(runs, n);
}

static void test_tokens(void **state)
{
    (void)state;
    static const char text[] =
        "10 acquired w=1 token=5\n"
        "20 release w=1\n"
        "30 acquired w=2 token=5\n" /* issued twice */
        "40 release w=2\n"
        "50 acquired w=1 token=4\n" /* goes back */
        "60 release w=1\n";
    size_t n;
    hist_run *runs = read_str(text, &n);
    assert_int_equal(n, 1);
    assert_string_equal(runs[0].meta.scenario, "history"); /* defaults */
    hist_result r;
    assert_int_equal(hist_check(&runs[0], &r), 0);
    assert_int_equal(r.overlaps, 0);
    assert_int_equal(r.token_dups, 1);
    assert_int_equal(r.token_regressions, 2);
    char why[600];
    assert_string_equal(hist_verdict(&r, &runs[0].meta, why, sizeof why), "fail");
    /* A backend that claims no fencing is not judged on its tokens. */
    runs[0].meta.caps = 0;
    assert_string_equal(hist_verdict(&r, &runs[0].meta, why, sizeof why), "pass");
    hist_runs_free(runs, n);
}

static void test_kill_ends_window_and_counts_takeover(void **state)
{
    (void)state;
    static const char text[] =
        "10 acquire w=1\n"
        "20 acquired w=1 token=1\n"
        "30 read w=1 token=1 value=0\n"
        "40 killed w=1\n"
        "50 acquired w=2 token=2\n"
        "60 read w=2 token=2 value=0\n"
        "70 write_accepted w=2 token=2 value=1\n"
        "80 release w=2\n"
        "90 final value=1\n";
    size_t n;
    hist_run *runs = read_str(text, &n);
    hist_result r;
    assert_int_equal(hist_check(&runs[0], &r), 0);
    assert_int_equal(r.overlaps, 0);
    assert_int_equal(r.kills, 1);
    assert_int_equal(r.kills_holding, 1);
    assert_int_equal(r.takeovers, 1);
    assert_int_equal(r.lost_increments, 0);
    hist_runs_free(runs, n);
}

static void test_lease_deadline_ends_window(void **state)
{
    (void)state;
    /* ttl 1 ms: w=1's window ends 1 ms after it invoked acquire, so w=2
     * taking the lock later does not overlap, and w=1's late write is
     * stale even though w=1 never heard of its loss. */
    static const char text[] =
        "run scenario=lease ttl_ms=1 caps=0x21 fencing=1\n"
        "0 acquire w=1\n"
        "100 acquired w=1 token=1\n"
        "200 read w=1 token=1 value=0\n"
        "2000000 acquired w=2 token=2\n"
        "2000100 read w=2 token=2 value=0\n"
        "2000200 write_rejected w=1 token=1 value=1\n"
        "2000300 write_accepted w=2 token=2 value=1\n"
        "2000400 release w=2\n"
        "2000500 release w=1\n";
    size_t n;
    hist_run *runs = read_str(text, &n);
    assert_int_equal(runs[0].meta.ttl_ms, 1);
    hist_result r;
    assert_int_equal(hist_check(&runs[0], &r), 0);
    assert_int_equal(r.overlaps, 0);
    assert_int_equal(r.stale_rejected, 1);
    /* Without a deadline the same history overlaps. */
    runs[0].meta.ttl_ms = 0;
    assert_int_equal(hist_check(&runs[0], &r), 0);
    assert_int_equal(r.overlaps, 1);
    hist_runs_free(runs, n);
}

static void test_promised_end_ends_window(void **state)
{
    (void)state;
    /* A lease older than the call (one per client, as etcd's): w=1 was
     * promised the lock until 1.5 s, sooner than call + ttl (2 s): w=2
     * taking it at 1.6 s overlaps nothing. */
    static const char text[] =
        "run scenario=lease ttl_ms=2000 caps=0x21 fencing=1\n"
        "0 acquire w=1\n"
        "100 acquired w=1 token=1 value=1500000000\n"
        "200 read w=1 token=1 value=0\n"
        "1600000000 acquired w=2 token=2\n"
        "1600000100 read w=2 token=2 value=0\n"
        "1600000200 write_rejected w=1 token=1 value=1\n"
        "1600000300 write_accepted w=2 token=2 value=1\n"
        "1600000400 release w=2\n"
        "1600000500 release w=1\n";
    size_t n;
    hist_run *runs = read_str(text, &n);
    hist_result r;
    assert_int_equal(hist_check(&runs[0], &r), 0);
    assert_int_equal(r.overlaps, 0);
    assert_int_equal(r.stale_rejected, 1);
    /* A promise later than the library may give stays bounded by call + ttl,
     * and one the next grant comes before is an overlap. */
    runs[0].ev[1].value = 1700000000;
    assert_int_equal(hist_check(&runs[0], &r), 0);
    assert_int_equal(r.overlaps, 1);
    hist_runs_free(runs, n);
}

static void test_renewed_promise_extends_window(void **state)
{
    (void)state;
    /* Promised 1.5 s at the grant, renewed since: about to write at 2.5 s
     * it was promised 3.5 s, so the write is its own, and w=2's grant at
     * 3 s overlaps it. */
    static const char text[] =
        "run scenario=lease ttl_ms=2000 caps=0x21 fencing=1\n"
        "0 acquire w=1\n"
        "100 acquired w=1 token=1 value=1500000000\n"
        "200 read w=1 token=1 value=0\n"
        "2500000000 valid w=1 token=1 value=3500000000\n"
        "2500000100 write_accepted w=1 token=1 value=1\n"
        "3000000000 acquired w=2 token=2\n"
        "3000000100 release w=1\n"
        "3000000200 release w=2\n";
    size_t n;
    hist_run *runs = read_str(text, &n);
    hist_result r;
    assert_int_equal(hist_check(&runs[0], &r), 0);
    assert_int_equal(r.stale_accepted, 0);
    assert_int_equal(r.overlaps, 1);
    hist_runs_free(runs, n);
}

/* A holder cut off from the servers (partitioned) holds until it is told of
 * the loss: told 32 ms before its lease ran out on the servers (at 3.1 s),
 * it does not overlap w=2, which took the lock at 3.15 s. */
static const char cut_told[] =
    "run scenario=partition ttl_ms=3000 caps=0x21 fencing=1\n"
    "0 acquire w=1\n"
    "100000 acquired w=1 token=1\n"
    "200000 read w=1 token=1 value=0\n"
    "1600000000 partitioned w=1 value=3100000000\n"
    "3068000000 lost_notified w=1 token=1\n"
    "3100000000 acquire w=2\n"
    "3150000000 acquired w=2 token=2\n"
    "3150100000 read w=2 token=2 value=0\n"
    "3150200000 state w=1 token=1 value=3 rc=1\n"
    "3150300000 write_rejected w=1 token=1 value=1\n"
    "3150400000 release w=1\n"
    "3150500000 write_accepted w=2 token=2 value=1\n"
    "3150600000 release w=2\n"
    "5000000000 healed w=1\n";

static void test_partition_told_in_time(void **state)
{
    (void)state;
    size_t n;
    hist_run *runs = read_str(cut_told, &n);
    hist_result r;
    assert_int_equal(hist_check(&runs[0], &r), 0);
    assert_int_equal(r.partitions, 1);
    assert_int_equal(r.overlaps, 0);
    assert_int_equal(r.loss_told, 1);
    assert_int_equal(r.loss_late, 0);
    assert_int_equal(r.told_before_min_ns, 32000000);
    assert_int_equal(r.told_before_median_ns, 32000000);
    assert_int_equal(r.stale_rejected, 1);
    assert_int_equal(r.state_held_late, 0);
    char why[600];
    assert_string_equal(hist_verdict(&r, &runs[0].meta, why, sizeof why), "pass");
    hist_runs_free(runs, n);
}

/* The library declared the loss in time (value: 3.0 s, 100 ms before the
 * lease ran out on the servers) but its callback ran 120 ms later, as on
 * a loaded machine: not late, the delay reported. Run later still, after
 * w=2 took the lock, the holder overlaps it: that counts from the
 * callback, since a holder stops when told. */
static void test_partition_declared_in_time_callback_late(void **state)
{
    (void)state;
    size_t n;
    char *hist = strdup(cut_told);
    char *p = strstr(hist, "3068000000 lost_notified w=1 token=1\n");
    assert_non_null(p);
    char *text = malloc(strlen(hist) + 32);
    assert_non_null(text);
    snprintf(text, strlen(hist) + 32, "%.*s3120000000 lost_notified w=1 token=1 value=3000000000\n%s",
             (int)(p - hist), hist, p + strlen("3068000000 lost_notified w=1 token=1\n"));
    hist_run *runs = read_str(text, &n);
    hist_result r;
    assert_int_equal(hist_check(&runs[0], &r), 0);
    assert_int_equal(r.loss_told, 1);
    assert_int_equal(r.loss_late, 0);
    assert_int_equal(r.overlaps, 0);
    assert_int_equal(r.told_before_min_ns, 100000000);
    assert_int_equal(r.told_callback_delay_max_ns, 120000000);
    char why[600];
    assert_string_equal(hist_verdict(&r, &runs[0].meta, why, sizeof why), "pass");
    hist_runs_free(runs, n);
    /* the callback after w=2's grant (3.15 s) */
    char *q = strstr(text, "3120000000 lost_notified");
    assert_non_null(q);
    memcpy(q, "3150150000", 10);
    runs = read_str(text, &n);
    assert_int_equal(hist_check(&runs[0], &r), 0);
    assert_int_equal(r.loss_late, 0);
    assert_int_equal(r.overlaps, 1);
    assert_string_equal(hist_verdict(&r, &runs[0].meta, why, sizeof why), "fail");
    hist_runs_free(runs, n);
    /* declared after the lease ran out there: late, however soon told */
    q = strstr(text, "value=3000000000");
    assert_non_null(q);
    memcpy(q, "value=3100000001", 16);
    memcpy(strstr(text, "3150150000 lost_notified"), "3100000002", 10);
    runs = read_str(text, &n);
    assert_int_equal(hist_check(&runs[0], &r), 0);
    assert_int_equal(r.loss_late, 1);
    assert_int_equal(r.told_before_min_ns, -1);
    assert_string_equal(hist_verdict(&r, &runs[0].meta, why, sizeof why), "fail");
    hist_runs_free(runs, n);
    free(text);
    free(hist);
}

static void test_partition_told_late_or_never(void **state)
{
    (void)state;
    size_t n;
    /* told after w=2 took the lock: an overlap, and a late loss */
    char *late = strdup(cut_told);
    char *p = strstr(late, "3068000000 lost_notified");
    assert_non_null(p);
    memcpy(p, "3150150000", 10);
    hist_run *runs = read_str(late, &n);
    hist_result r;
    assert_int_equal(hist_check(&runs[0], &r), 0);
    assert_int_equal(r.overlaps, 1);
    assert_int_equal(r.loss_told, 1);
    assert_int_equal(r.loss_late, 1);
    assert_int_equal(r.told_before_min_ns, -50150000);
    char why[600];
    assert_string_equal(hist_verdict(&r, &runs[0].meta, why, sizeof why), "fail");
    hist_runs_free(runs, n);
    /* never told, and still HELD when it looked: its holding lasts until it
     * releases */
    memcpy(p, "# 3150150", 9);
    char *st = strstr(late, "value=3 rc=1");
    assert_non_null(st);
    memcpy(st, "value=2 rc=0", 12);
    runs = read_str(late, &n);
    assert_int_equal(hist_check(&runs[0], &r), 0);
    assert_int_equal(r.overlaps, 1);
    assert_int_equal(r.loss_told, 0);
    assert_int_equal(r.loss_untold, 1);
    assert_int_equal(r.loss_late, 1);
    assert_int_equal(r.state_held_late, 1);
    assert_string_equal(hist_verdict(&r, &runs[0].meta, why, sizeof why), "fail");
    hist_runs_free(runs, n);
    free(late);
}

static void test_write_read_round_trip(void **state)
{
    (void)state;
    size_t n;
    hist_run *runs = read_str(broken, &n);
    char *buf = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&buf, &len);
    assert_non_null(f);
    assert_int_equal(hist_write(f, &runs[0]), 0);
    fclose(f);
    size_t n2;
    hist_run *again = read_str(buf, &n2);
    assert_int_equal(n2, 1);
    assert_int_equal(again[0].n, runs[0].n);
    assert_string_equal(again[0].meta.scenario, "handmade");
    assert_int_equal(again[0].meta.caps, 1);
    hist_result a, b;
    assert_int_equal(hist_check(&runs[0], &a), 0);
    assert_int_equal(hist_check(&again[0], &b), 0);
    assert_int_equal(a.overlaps, b.overlaps);
    assert_int_equal(a.stale_accepted, b.stale_accepted);
    assert_int_equal(a.lost_increments, b.lost_increments);
    free(buf);
    hist_runs_free(runs, n);
    hist_runs_free(again, n2);
}

static void test_malformed(void **state)
{
    (void)state;
    static const char *const bad[] = {
        "10 acquired w=1 token=x\n",
        "abc acquired w=1\n",
        "10 frobnicate w=1\n",
        "10 acquired w=-1\n",
        "run scenario\n",
        "# only a comment\n",
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        FILE *f = fmemopen((void *)bad[i], strlen(bad[i]), "r");
        assert_non_null(f);
        hist_run *runs = NULL;
        size_t n = 0;
        char err[256] = "";
        assert_int_equal(hist_read(f, &runs, &n, err, sizeof err), -1);
        assert_true(err[0] != '\0');
        fclose(f);
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_finds_overlap_and_stale_write),
        cmocka_unit_test(test_unopposed_stale_write_is_no_violation),
        cmocka_unit_test(test_fenced_stale_write_passes),
        cmocka_unit_test(test_stale_write_alone_fails_with_fencing),
        cmocka_unit_test(test_tokens),
        cmocka_unit_test(test_kill_ends_window_and_counts_takeover),
        cmocka_unit_test(test_lease_deadline_ends_window),
        cmocka_unit_test(test_promised_end_ends_window),
        cmocka_unit_test(test_renewed_promise_extends_window),
        cmocka_unit_test(test_partition_told_in_time),
        cmocka_unit_test(test_partition_told_late_or_never),
        cmocka_unit_test(test_partition_declared_in_time_callback_late),
        cmocka_unit_test(test_write_read_round_trip),
        cmocka_unit_test(test_malformed),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
