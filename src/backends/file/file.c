/* SPDX-License-Identifier: MIT */
/*
 * file.c — the embedded backend, `file:///DIR`: open file description
 * (F_OFD_*) locks on one file per lock name.
 *
 * Why OFD locks: they belong to an open file description, not to a process,
 * so two handles in one process exclude each other, a child inherits nothing
 * by accident (descriptors are CLOEXEC), and the kernel drops them the moment
 * the holder dies. Everything lives in byte-range locks on the lock file at
 * offsets far past its data:
 *
 *   MAIN      the lock itself (write lock: exclusive, read lock: shared)
 *   META      taken briefly around updates of the header
 *   TURN      the turnstile of read-write locks: a writer holds it while it
 *             sleeps on MAIN, so later readers queue behind it
 *   GATE      the semaphore's waiting room (one waiter at a time waits on
 *             all permits; the rest queue on GATE)
 *   SLOT+i    permit i of a semaphore (whose holders also hold a read lock
 *             on MAIN, so that an exclusive taker waits for every permit)
 *   Q+t       ticket t of the fair queue of exclusive lockers: the holder of
 *             ticket t keeps Q+t until it releases, and ticket t+1 sleeps on
 *             Q+t (for a read lock: see take_in_order) — so each release
 *             wakes exactly the next in line (the kernel alone wakes blocked
 *             lockers in no guaranteed order)
 *   KIND+k    read-locked by every shared taker (k = 0) or taker of a
 *             semaphore of k permits, from before it waits until it releases:
 *             a shared lock and a semaphore, or semaphores of other sizes,
 *             cannot share MAIN's read side, so such a taker is refused
 *
 * The file's data holds the fencing token and the next ticket (a fixed-width
 * header) and one record per holder (who, since when, token, leader value)
 * for inspection.
 *
 * Waiting sleeps in the kernel (F_OFD_SETLKW) and must still honour timeouts
 * and dlock_cancel. A blocked fcntl cannot be interrupted without a signal,
 * and a library must not take over a process's signal handlers, so the
 * blocking call is made by a tiny helper task sharing our memory and
 * descriptors (clone with CLONE_VM). The waiting thread polls the helper's
 * pidfd, the cancel eventfd and the deadline; to stop waiting it SIGKILLs the
 * helper, which removes the blocked request from the kernel's queue. Linux
 * (since 5.0) wakes only the first blocked waiter of a released lock and
 * queues conflicting waiters behind each other, so release wakes one waiter,
 * in arrival order. A fair waiter behind another ticket first waits a short
 * while for its predecessor's call instead, without a helper: see "the next
 * in line's call".
 */
#include "file_int.h"
#include "support/support.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#if defined(__has_include)
#if __has_include(<valgrind/valgrind.h>)
#include <valgrind/valgrind.h>
#endif
#endif
#ifndef RUNNING_ON_VALGRIND
#define RUNNING_ON_VALGRIND 0
#endif

#define OFF_BASE ((off_t)1 << 40)
#define OFF_MAIN (OFF_BASE + 0)
#define OFF_META (OFF_BASE + 1)
#define OFF_TURN (OFF_BASE + 2)
#define OFF_GATE (OFF_BASE + 3)
#define OFF_SLOT(i) (OFF_BASE + 16 + (off_t)(i))
#define OFF_QUEUE(t) (((off_t)1 << 41) + (off_t)(t))
#define OFF_KIND(k) (((off_t)1 << 42) + (off_t)(k)) /* the last ranges of the file */

#define RECORD_OFF(i) (64 + (off_t)(i) * RECORD_LEN) /* 0: exclusive holder, 1+i: permit i */
#define HELPER_STACK (64 * 1024)

typedef struct file_lock {
    int fd;   /* open while held */
    int slot; /* semaphore permit held, -1 otherwise */
    /* A fair exclusive holder's ticket and the lock file's identity: the
     * address of the next in line's call (see "the next in line's call"). */
    bool ticketed;
    uint64_t ticket;
    dev_t dev;
    ino_t ino;
    bool id_known; /* dev and ino are the open file's (a waiter's fstat) */
} file_lock;

file_client *fc_of(dlock_client *c)
{
    return c->bstate;
}

/* ---- descriptors ------------------------------------------------------- */

/* Every held lock keeps its file open, so a process holding many locks runs
 * into RLIMIT_NOFILE; this counts them for the message that says so. */
static atomic_long held_files;

/* The process's RLIMIT_NOFILE is its own: the library never raises it
 * (children inherit it, and programs that loop over every descriptor or
 * use select() notice). Running out is told with the limit to raise. */

/* Open descriptors below limit, without needing one (no /proc/self/fd):
 * poll says POLLNVAL for a closed number. poll takes at most
 * RLIMIT_NOFILE entries at once, hence the chunks. */
static long count_fds(rlim_t limit)
{
    struct pollfd p[256];
    rlim_t chunk = limit < 256 ? limit : 256;
    if (limit > (rlim_t)1 << 20)
        limit = (rlim_t)1 << 20; /* an error path must stay cheap */
    long n = 0;
    for (rlim_t base = 0; base < limit; base += chunk) {
        int k = (int)(limit - base < chunk ? limit - base : chunk);
        for (int i = 0; i < k; i++)
            p[i] = (struct pollfd){.fd = (int)(base + (rlim_t)i)};
        if (poll(p, (nfds_t)k, 0) < 0)
            return -1;
        for (int i = 0; i < k; i++)
            n += !(p[i].revents & POLLNVAL);
    }
    return n;
}

static void rlim_str(rlim_t v, char *buf, size_t len)
{
    if (v == RLIM_INFINITY)
        snprintf(buf, len, "unlimited");
    else
        snprintf(buf, len, "%llu", (unsigned long long)v);
}

/* strerror(e), except that running out of descriptors says which limit was
 * hit and how to raise it ("Too many open files" alone does not). */
static const char *fd_strerror(int e, char *buf, size_t len)
{
    if (e != EMFILE && e != ENFILE)
        return strerror(e);
    struct rlimit rl;
    if (getrlimit(RLIMIT_NOFILE, &rl) != 0)
        rl.rlim_cur = rl.rlim_max = RLIM_INFINITY;
    long count = count_fds(rl.rlim_cur);
    long locks = atomic_load(&held_files);
    char n[24], cur[24], max[24];
    if (count < 0)
        snprintf(n, sizeof n, "?");
    else
        snprintf(n, sizeof n, "%ld", count);
    rlim_str(rl.rlim_cur, cur, sizeof cur);
    rlim_str(rl.rlim_max, max, sizeof max);
    if (e == ENFILE)
        snprintf(buf, len,
                 "the system-wide table of open files is full (ENFILE, not this process's "
                 "RLIMIT_NOFILE; this process holds %s descriptors, %ld of them for held "
                 "file:// locks): close files elsewhere or raise sysctl fs.file-max",
                 n, locks);
    else if (rl.rlim_cur < rl.rlim_max)
        snprintf(buf, len,
                 "too many open files (this process holds %s descriptors, %ld of them for "
                 "held file:// locks, one each; limit RLIMIT_NOFILE=%s, hard limit %s: raise "
                 "it, e.g. ulimit -n %s / LimitNOFILE=)",
                 n, locks, cur, max, max);
    else
        snprintf(buf, len,
                 "too many open files (this process holds %s descriptors, %ld of them for "
                 "held file:// locks, one each; limit RLIMIT_NOFILE=%s, also the hard limit: "
                 "raise both, e.g. ulimit -n as root / LimitNOFILE= / nofile in limits.conf)",
                 n, locks, cur);
    return buf;
}

static bool out_of_fds(int e)
{
    return e == EMFILE || e == ENFILE;
}

/* ---- the waiting helper ------------------------------------------------ */

typedef struct wait_job {
    int fd;
    pid_t parent;
    int nsteps;
    short type[3];
    off_t start[3];
} wait_job;

typedef struct helper {
    int fd;      /* pidfd (cloned helper) or read end of a pipe (forked) */
    pid_t pid;
    void *stack; /* cloned helper's stack */
    bool forked;
    bool done;
    bool won;
} helper;

/* Runs in the helper task: no sanitizer instrumentation (it shares our
 * memory but not our thread identity) and raw system calls only. */
__attribute__((no_sanitize_address, no_sanitize_thread, no_sanitize("undefined")))
static int helper_main(void *arg)
{
    const wait_job *job = arg;
    syscall(SYS_prctl, PR_SET_PDEATHSIG, SIGKILL, 0, 0, 0);
    if (syscall(SYS_getppid) != job->parent)
        return 90; /* our creator died before we armed the death signal */
    for (int i = 0; i < job->nsteps; i++) {
        struct flock fl = {.l_type = job->type[i], .l_whence = SEEK_SET,
                           .l_start = job->start[i], .l_len = 1};
        if (syscall(SYS_fcntl, job->fd, F_OFD_SETLKW, &fl) != 0)
            return 10 + i;
    }
    return 0;
}

/* Valgrind cannot run CLONE_VM tasks that are not threads, and TSan's
 * runtime breaks in them: under both, helpers are forked processes. */
static bool fork_helpers(void)
{
#if defined(__SANITIZE_THREAD__)
    return true;
#elif defined(__has_feature)
#if __has_feature(thread_sanitizer)
    return true;
#endif
#endif
    return RUNNING_ON_VALGRIND;
}

static void close_except(int a, int b)
{
    if (a > b) {
        int t = a;
        a = b;
        b = t;
    }
    if (a > 0)
        syscall(SYS_close_range, 0, a - 1, 0);
    if (b > a + 1)
        syscall(SYS_close_range, a + 1, b - 1, 0);
    syscall(SYS_close_range, b + 1, ~0U, 0);
}

/* Stacks of finished helpers, kept for the next ones: a wait then neither
 * maps a stack and faults its pages in, nor unmaps one (a TLB flush of
 * every CPU the helper ran on) between the helper's wake-up and the
 * waiter's return, which is the hand-over's path. A few cover the threads
 * that wait at once; more are unmapped. */
#define STACK_POOL_MAX 8
/* Lock-free slots (a mutex held by another thread at a fork would stay
 * held in the child). */
static _Atomic(void *) stack_pool[STACK_POOL_MAX];

static void *stack_get(void)
{
    for (int i = 0; i < STACK_POOL_MAX; i++) {
        void *st = atomic_exchange(&stack_pool[i], NULL);
        if (st)
            return st;
    }
    void *st = mmap(NULL, HELPER_STACK, PROT_READ | PROT_WRITE,
                    MAP_PRIVATE | MAP_ANONYMOUS | MAP_STACK, -1, 0);
    return st == MAP_FAILED ? NULL : st;
}

/* Only once its helper is reaped: nothing runs on it any more. */
static void stack_put(void *st)
{
    for (int i = 0; i < STACK_POOL_MAX; i++) {
        void *none = NULL;
        if (atomic_compare_exchange_strong(&stack_pool[i], &none, st))
            return;
    }
    munmap(st, HELPER_STACK);
}

__attribute__((destructor)) static void stack_pool_free(void)
{
    for (int i = 0; i < STACK_POOL_MAX; i++) {
        void *st = atomic_exchange(&stack_pool[i], NULL);
        if (st)
            munmap(st, HELPER_STACK);
    }
}

static int helper_start(helper *h, wait_job *job)
{
    *h = (helper){.fd = -1};
    if (!fork_helpers()) {
        h->stack = stack_get();
        if (!h->stack)
            return -1;
        /* CLONE_FILES: the helper must not hold copies of our other lock
         * descriptors, or closing them would not release their locks.
         * Exit signal 0: no SIGCHLD reaches the application, and its own
         * waitpid(-1) cannot reap our helper. */
        h->pid = clone(helper_main, (char *)h->stack + HELPER_STACK,
                       CLONE_VM | CLONE_FILES | CLONE_PIDFD, job, &h->fd);
        if (h->pid > 0)
            return 0;
        stack_put(h->stack);
        h->stack = NULL;
        if (errno != EINVAL && errno != EPERM && errno != ENOSYS)
            return -1;
    }
    /* Fallback: a forked process reporting through a pipe. OFD locks taken
     * on the inherited descriptor still belong to our description. */
    int p[2];
    if (pipe2(p, O_CLOEXEC) != 0)
        return -1;
    h->pid = fork();
    if (h->pid < 0) {
        close(p[0]);
        close(p[1]);
        return -1;
    }
    if (h->pid == 0) {
        /* Drop the copies of every other descriptor at once (see above). */
        close_except(job->fd, p[1]);
        unsigned char code = (unsigned char)helper_main(job);
        if (write(p[1], &code, 1) != 1)
            _exit(91);
        _exit(code);
    }
    close(p[1]);
    h->fd = p[0];
    h->forked = true;
    return 0;
}

static void helper_kill(helper *h)
{
    if (h->forked)
        kill(h->pid, SIGKILL);
    else
        (void)syscall(SYS_pidfd_send_signal, h->fd, SIGKILL, NULL, 0);
}

/* Reap a finished helper; returns its exit code, or -signal if killed. */
static int helper_reap(helper *h)
{
    int result;
    if (h->forked) {
        unsigned char code;
        ssize_t n;
        do
            n = read(h->fd, &code, 1);
        while (n < 0 && errno == EINTR);
        result = n == 1 ? code : -SIGKILL;
        while (waitpid(h->pid, NULL, 0) < 0 && errno == EINTR) {
        }
    } else {
        siginfo_t si;
        memset(&si, 0, sizeof si);
        bool reaped = true;
        while (waitid(P_PIDFD, (id_t)h->fd, &si, WEXITED | __WALL) != 0) {
            if (errno != EINTR) {
                si.si_code = CLD_KILLED;
                si.si_status = SIGKILL;
                reaped = false;
                break;
            }
        }
        result = si.si_code == CLD_EXITED ? si.si_status : -si.si_status;
        if (reaped) /* else it may still run on its stack: leave it be */
            stack_put(h->stack);
        h->stack = NULL;
    }
    close(h->fd);
    h->fd = -1;
    h->done = true;
    return result;
}

/* Give back every range of the description, even if a forked child still
 * shares it (closing alone would then not release anything). */
static void unlock_all(int fd)
{
    struct flock fl = {.l_type = F_UNLCK, .l_whence = SEEK_SET, .l_start = 0, .l_len = 0};
    (void)fcntl(fd, F_OFD_SETLK, &fl);
}

static void drop_fd(int fd)
{
    unlock_all(fd);
    close(fd);
}

static void unlock_range(int fd, off_t start)
{
    struct flock fl = {.l_type = F_UNLCK, .l_whence = SEEK_SET, .l_start = start, .l_len = 1};
    (void)fcntl(fd, F_OFD_SETLK, &fl);
}

static void job_undo(const wait_job *job)
{
    for (int i = 0; i < job->nsteps; i++)
        unlock_range(job->fd, job->start[i]);
}

/*
 * Sleep until one of the jobs has taken all its steps, the deadline passes,
 * or the lock is canceled. On success *winner is that job and its ranges are
 * held; every other job's ranges are given back.
 */
static int wait_jobs(dlock_lock *l, wait_job *jobs, int njobs, int64_t deadline, int *winner)
{
    helper hs[njobs];
    struct pollfd pfd[njobs + 1];
    char ebuf[400];
    int cancel_fd = dl_cancel_fd(l);
    int rc = 1; /* 1: still waiting */
    int started = 0;
    if (cancel_fd < 0) /* waiting without it would ignore dlock_cancel */
        rc = dl_lock_err(l, DLOCK_EIO, "lock \"%s\": cannot wait: no eventfd for dlock_cancel: %s",
                         l->name, fd_strerror(errno, ebuf, sizeof ebuf));
    for (; rc == 1 && started < njobs; started++) {
        jobs[started].parent = getpid();
        if (helper_start(&hs[started], &jobs[started]) != 0) {
            rc = dl_lock_err(l, DLOCK_EIO, "lock \"%s\": cannot start a waiting task: %s",
                             l->name, fd_strerror(errno, ebuf, sizeof ebuf));
            break;
        }
    }
    *winner = -1;
    int of[njobs + 1]; /* the helper of each pfd entry */
    while (rc == 1) {
        int n = 0;
        for (int i = 0; i < njobs; i++)
            if (!hs[i].done) {
                of[n] = i;
                pfd[n++] = (struct pollfd){.fd = hs[i].fd, .events = POLLIN};
            }
        pfd[n++] = (struct pollfd){.fd = cancel_fd, .events = POLLIN};
        int ms = dl_ms_left(deadline);
        if (deadline > 0 && ms == 0) {
            rc = dl_wait_timed_out(l, NULL);
            break;
        }
        int pr = poll(pfd, (nfds_t)n, ms);
        if (pr < 0) {
            if (errno == EINTR)
                continue;
            rc = dl_lock_err(l, DLOCK_EIO, "poll: %s", strerror(errno));
            break;
        }
        if (pfd[n - 1].revents) {
            rc = dl_lock_err(l, DLOCK_ECANCELED, "lock \"%s\": acquisition canceled", l->name);
            break;
        }
        /* the helpers this poll found done (no second poll each: a
         * system call less between a wake-up and the waiter's return) */
        for (int k = 0; k < n - 1 && rc == 1; k++) {
            int i = of[k];
            if (!pfd[k].revents)
                continue;
            int status = helper_reap(&hs[i]);
            if (status == 0) {
                hs[i].won = true;
                *winner = i;
                rc = 0;
            } else if (status < 0) {
                /* Killed by someone else's signal (a terminal's ^C reaches
                 * our whole process group): give back what it took, wait on. */
                job_undo(&jobs[i]);
                if (helper_start(&hs[i], &jobs[i]) != 0)
                    rc = dl_lock_err(l, DLOCK_EIO,
                                     "lock \"%s\": cannot restart a waiting task: %s", l->name,
                                     fd_strerror(errno, ebuf, sizeof ebuf));
            } else {
                job_undo(&jobs[i]);
                rc = dl_lock_err(l, DLOCK_EIO, "lock \"%s\": waiting task failed (code %d)",
                                 l->name, status);
            }
        }
    }
    /* Stop the rest; one may have won a range meanwhile: give it back. */
    for (int i = 0; i < started; i++) {
        if (hs[i].done)
            continue;
        helper_kill(&hs[i]);
        (void)helper_reap(&hs[i]);
        job_undo(&jobs[i]);
    }
    return rc;
}

/* ---- the next in line's call ------------------------------------------ */

/*
 * A fair waiter whose predecessor is another ticket does not start a helper
 * (a task made and reaped per wait, whose wake-up then wakes the waiter: two
 * wake-ups in a row and the CPU of a clone and an exit on every hand-over,
 * which on a busy machine is most of the hand-over). It listens on an
 * abstract datagram socket named after the lock file and its ticket, and
 * the predecessor calls there once it has let go (released, or given up
 * waiting): the waiter wakes and takes its ranges itself with non-blocking
 * tries. The call is a hint, never the lock: the ranges are. A call that
 * finds a range busy (a reader came in between), a name someone else took,
 * or a predecessor that cannot call (it died; another network namespace; an
 * older dlock) leave the waiter to its helper as before: it starts one at
 * once when the call finds a range busy or the name is taken, and after
 * CALL_WAIT_MS without a call. So a dead predecessor costs its successor
 * at most that much more, and a long wait (a long queue) is a helper's, as
 * before: the call is for hand-overs in quick succession, where the helper
 * was most of the cost. A listener that was called is closed by the
 * client's next release, after that release's own call (file_client's
 * answered): not on the hand-over's path.
 */
#define CALL_WAIT_MS 20

static socklen_t call_addr(struct sockaddr_un *sa, dev_t dev, ino_t ino, uint64_t ticket)
{
    memset(sa, 0, sizeof *sa);
    sa->sun_family = AF_UNIX;
    /* sun_path[0] = 0: the abstract namespace, nothing on disk to clean up */
    int n = snprintf(sa->sun_path + 1, sizeof sa->sun_path - 1, "dlock-call/%jx/%jx/%" PRIu64,
                     (uintmax_t)dev, (uintmax_t)ino, ticket);
    return (socklen_t)(offsetof(struct sockaddr_un, sun_path) + 1 + (size_t)n);
}

/* The waiter's end, bound for `ticket`; -1 if it cannot be had. */
static int call_listen(dev_t dev, ino_t ino, uint64_t ticket)
{
    int s = socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
    if (s < 0)
        return -1;
    struct sockaddr_un sa;
    socklen_t len = call_addr(&sa, dev, ino, ticket);
    if (bind(s, (struct sockaddr *)&sa, len) != 0) {
        close(s);
        return -1;
    }
    return s;
}

/* Call the holder of `ticket`, if it listens (nobody may: fine). */
static void call_next(file_client *fc, dev_t dev, ino_t ino, uint64_t ticket)
{
    int s = atomic_load(&fc->call_sock);
    if (s < 0) {
        s = socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
        if (s < 0)
            return;
        int none = -1;
        if (!atomic_compare_exchange_strong(&fc->call_sock, &none, s)) {
            close(s);
            s = none;
        }
    }
    struct sockaddr_un sa;
    socklen_t len = call_addr(&sa, dev, ino, ticket);
    /* ECONNREFUSED (nobody listens) and EAGAIN (called already) are fine.
     * A socket wakes its reader as a "sync" wake-up, which tells the
     * scheduler that the caller is about to sleep, so the waiter is queued
     * on the caller's CPU; but the caller runs on (its next acquisition, its
     * program) and the waiter, now the holder, waits for it. Yielding once
     * lets the new holder run at once: a contended hand-over took 69 us
     * with the waiter queued behind its caller, 37 us so, against tooz's
     * 52 us (bench/peers/ab.sh, 8 waiters on 2 CPUs). A waiter woken on
     * another CPU leaves nothing here to yield to: the call returns. */
    if (sendto(s, "c", 1, MSG_DONTWAIT | MSG_NOSIGNAL, (struct sockaddr *)&sa, len) == 1)
        (void)sched_yield();
}

/* ---- byte-range helpers ------------------------------------------------ */

/* Try once: 0 taken, 1 busy, <0 error. */
static int try_range(dlock_lock *l, int fd, short type, off_t start)
{
    struct flock fl = {.l_type = type, .l_whence = SEEK_SET, .l_start = start, .l_len = 1};
    if (fcntl(fd, F_OFD_SETLK, &fl) == 0)
        return 0;
    if (errno == EAGAIN || errno == EACCES)
        return 1;
    return dl_lock_err(l, DLOCK_EIO, "lock \"%s\": fcntl: %s", l->name, strerror(errno));
}

/* Whether ticket t's byte is held (by its taker, waiting or holding):
 * asked of the kernel, nothing taken. 1 held, 0 free, -1 an error (errno). */
static int ticket_held(int fd, uint64_t t)
{
    struct flock q = {.l_type = F_RDLCK, .l_whence = SEEK_SET, .l_start = OFF_QUEUE(t),
                      .l_len = 1};
    if (fcntl(fd, F_OFD_GETLK, &q) != 0)
        return -1;
    return q.l_type != F_UNLCK;
}

/* Take one range, waiting until deadline (0 = try once). */
static int take_range(dlock_lock *l, int fd, short type, off_t start, int64_t deadline)
{
    int rc = try_range(l, fd, type, start);
    if (rc <= 0)
        return rc;
    if (deadline == 0)
        return dl_lock_err(l, DLOCK_EBUSY, "lock \"%s\" is held by another owner", l->name);
    wait_job job = {.fd = fd, .nsteps = 1, .type = {type}, .start = {start}};
    int w;
    return wait_jobs(l, &job, 1, deadline, &w);
}

/* META is held only for a few system calls (a header read and write, a
 * ticket byte): one found busy comes free within microseconds unless its
 * holder was preempted. So it is tried again, yielding the processor
 * between tries, for up to META_SPIN_NS before a helper waits in the
 * kernel (a clone and two wake-ups: tens of microseconds, most of a
 * contended hand-over when the new holder's token met a ticket taker).
 * A try (deadline 0) waits for META too, up to a second, then is busy. */
#define META_SPIN_NS 100000LL
static int take_meta(dlock_lock *l, int fd, short type, int64_t deadline)
{
    int64_t meta_deadline = deadline == 0 ? dl_now_ns() + 1000000000LL : deadline;
    int rc = try_range(l, fd, type, OFF_META);
    if (rc != 1)
        return rc;
    int64_t spin_until = dl_now_ns() + META_SPIN_NS;
    if (meta_deadline > 0 && meta_deadline < spin_until)
        spin_until = meta_deadline;
    while (rc == 1 && dl_now_ns() < spin_until) {
        (void)sched_yield();
        rc = try_range(l, fd, type, OFF_META);
    }
    if (rc != 1)
        return rc;
    rc = take_range(l, fd, type, OFF_META, meta_deadline);
    /* A try promises DLOCK_EBUSY, never a time-out: META held so long
     * means another taker is at work on the lock (or stopped mid-way). */
    if (rc == DLOCK_ETIMEDOUT && deadline == 0)
        rc = dl_lock_err(l, DLOCK_EBUSY,
                         "lock \"%s\" is busy: another taker kept its header for a second",
                         l->name);
    return rc;
}

/* ---- the lock directory ------------------------------------------------ */

static int errno_code(int e)
{
    return e == EACCES || e == EPERM || e == EROFS ? DLOCK_EPERM : DLOCK_EIO;
}

/* Whether an open with O_NOFOLLOW | O_DIRECTORY failed (errno e) because
 * path is a symbolic link: the kernel says ENOTDIR ("Not a directory") for
 * a link to a directory, ELOOP for others. */
static bool is_symlink(const char *path, int e)
{
    struct stat st;
    return (e == ENOTDIR || e == ELOOP) && lstat(path, &st) == 0 && S_ISLNK(st.st_mode);
}

/* Open the lock directory (making it first when create is set) and check
 * who may tamper with it. Returns 0, DLOCK_ENOENT when it does not exist
 * and create is not set, or an error code with the message in err. The
 * caller holds fc->mu or is the only user of fc. */
static int dir_open(file_client *fc, bool create, char *err, size_t errlen)
{
    bool shared_default = strcmp(fc->dir, DL_FILE_DEFAULT_DIR) == 0;
    int fd = open(fc->dir, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    if (fd < 0 && errno == ENOENT && !create) {
        snprintf(err, errlen, "lock directory %s does not exist", fc->dir);
        return DLOCK_ENOENT;
    }
    if (fd < 0 && errno == ENOENT) {
        /* Create the last component only: a missing parent is a mistake in
         * the URL, not something to paper over. */
        if (mkdir(fc->dir, shared_default ? 01777 : 0700) == 0) {
            /* umask must not take the sticky, world-writable mode away. */
            if (shared_default && chmod(fc->dir, 01777) != 0) {
                snprintf(err, errlen, "cannot set permissions of %s: %s", fc->dir,
                         strerror(errno));
                return DLOCK_EIO;
            }
        } else if (errno != EEXIST) {
            int e = errno;
            snprintf(err, errlen, "cannot create lock directory %s: %s", fc->dir, strerror(e));
            return e == EACCES || e == EROFS ? DLOCK_EPERM : DLOCK_EIO;
        }
        fd = open(fc->dir, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    }
    struct stat st;
    if (fd < 0) {
        int e = errno;
        char ebuf[400];
        if (out_of_fds(e)) /* the reason first: a long path must not cut it off */
            snprintf(err, errlen, "cannot open lock directory: %s (%s)",
                     fd_strerror(e, ebuf, sizeof ebuf), fc->dir);
        else if (is_symlink(fc->dir, e))
            snprintf(err, errlen,
                     "refusing lock directory %s: it is a symbolic link (it could be pointed "
                     "elsewhere); give the real directory's path",
                     fc->dir);
        else
            snprintf(err, errlen, "cannot open lock directory %s: %s", fc->dir, strerror(e));
        return e == EACCES ? DLOCK_EPERM : DLOCK_EIO;
    }
    int rc = 0;
    if (fstat(fd, &st) != 0) {
        snprintf(err, errlen, "cannot stat %s: %s", fc->dir, strerror(errno));
        rc = DLOCK_EIO;
    } else if (shared_default && st.st_uid != 0 && st.st_uid != geteuid() &&
               (st.st_mode & 07777) != 01777) {
        /* Another user's directory that is not the shared one dlock makes:
         * planted, or changed since, to tamper with everyone's locks. */
        snprintf(err, errlen,
                 "refusing lock directory %s: owned by uid %ld with mode %04o, not 1777 "
                 "(sticky, writable by all) as dlock makes it; its owner or root can chmod "
                 "1777 it, or remove it",
                 fc->dir, (long)st.st_uid, (unsigned)(st.st_mode & 07777));
        rc = DLOCK_EPERM;
    } else if ((st.st_mode & S_IWOTH) && !(st.st_mode & S_ISVTX)) {
        snprintf(err, errlen,
                 "refusing lock directory %s: world-writable without the sticky bit, anyone "
                 "could replace lock files",
                 fc->dir);
        rc = DLOCK_EPERM;
    }
    if (rc) {
        close(fd);
        return rc;
    }
    /* Whoever ran dlock first made the shared directory and owns it; the
     * sticky bit does not bind a directory's owner, who could remove
     * everyone's lock files. Root takes it over, once, as it owns /tmp. */
    if (shared_default && st.st_uid != 0 && geteuid() == 0 && fchown(fd, 0, 0) != 0) {
        /* not fatal: the directory is still the shared one */
    }
    fc->shared = (st.st_mode & S_IWOTH) != 0;
    fc->filemode = (st.st_mode & 0666) | S_IRUSR | S_IWUSR;
    fc->dirfd = fd;
    return 0;
}

/* The directory's descriptor in *fd, opened (or created) on first use. */
static int dir_get(file_client *fc, bool create, char *err, size_t errlen, int *fd)
{
    pthread_mutex_lock(&fc->mu);
    int rc = fc->dirfd >= 0 ? 0 : dir_open(fc, create, err, errlen);
    *fd = fc->dirfd;
    pthread_mutex_unlock(&fc->mu);
    return rc;
}

/* At open, for a directory that does not exist yet: make sure that it
 * could be created, so that a URL naming an impossible place still fails
 * at once. A uniquely named probe in the parent, removed at once, tests
 * exactly that without making the directory itself. */
static int dir_creatable(file_client *fc, char *err, size_t errlen)
{
    size_t len = strlen(fc->dir);
    while (len > 1 && fc->dir[len - 1] == '/')
        len--;
    size_t cut = len;
    while (cut > 0 && fc->dir[cut - 1] != '/')
        cut--;
    char probe[PATH_MAX];
    int n = snprintf(probe, sizeof probe, "%.*s.dlock-probe.%ld.%lld", (int)cut, fc->dir,
                     (long)getpid(), (long long)dl_now_ns());
    if (n < 0 || (size_t)n >= sizeof probe) {
        snprintf(err, errlen, "cannot create lock directory %s: %s", fc->dir,
                 strerror(ENAMETOOLONG));
        return DLOCK_EIO;
    }
    if (mkdir(probe, 0700) != 0) {
        int e = errno;
        snprintf(err, errlen, "cannot create lock directory %s: %s", fc->dir, strerror(e));
        return e == EACCES || e == EROFS ? DLOCK_EPERM : DLOCK_EIO;
    }
    if (rmdir(probe) != 0) {
        /* our own empty directory: nothing else can have gone wrong here */
    }
    return 0;
}

/* ---- the lock file ----------------------------------------------------- */

/* In a directory anyone can write, a lock file may have been planted: a
 * hard link to another file (writing our header would damage it), a FIFO
 * or a device. Only a plain file of one link is used. */
static int lock_file_check(dlock_lock *l, int fd, const char *path)
{
    file_client *fc = fc_of(l->c);
    struct stat st;
    if (!fc->shared)
        return 0;
    if (fstat(fd, &st) != 0)
        return dl_lock_err(l, DLOCK_EIO, "cannot stat lock file %s/%s: %s", fc->dir, path,
                           strerror(errno));
    if (!S_ISREG(st.st_mode) || st.st_nlink != 1)
        return dl_lock_err(l, DLOCK_EPERM,
                           "refusing lock file %s/%s: %s (planted in the shared directory?)",
                           fc->dir, path,
                           S_ISREG(st.st_mode) ? "it has other hard links" : "not a plain file");
    return 0;
}

static int open_lock_file(dlock_lock *l, int *out)
{
    file_client *fc = fc_of(l->c);
    char path[DL_NAME_MAX + 8];
    snprintf(path, sizeof path, "%s.lock", l->name);
    char err[PATH_MAX + 200];
    int dirfd;
    int rc = dir_get(fc, true, err, sizeof err, &dirfd);
    if (rc)
        return dl_lock_err(l, rc, "%s", err);
    for (;;) {
        int fd = openat(dirfd, path, O_RDWR | O_NOFOLLOW | O_CLOEXEC);
        if (fd >= 0) {
            if ((rc = lock_file_check(l, fd, path)) != 0) {
                close(fd);
                return rc;
            }
            *out = fd;
            return 0;
        }
        if (errno != ENOENT)
            break;
        fd = openat(dirfd, path, O_RDWR | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC,
                    fc->filemode);
        if (fd >= 0) {
            /* umask must not stop other users of a shared directory. */
            if (fchmod(fd, fc->filemode) != 0) {
                /* not fatal: the file is still usable by us */
            }
            *out = fd;
            return 0;
        }
        if (errno != EEXIST)
            break;
    }
    int e = errno;
    /* Out of descriptors: DLOCK_EIO like every other failed system call
     * here, not DLOCK_ENOMEM, whose text ("out of memory") would mislead;
     * the message says which limit to raise. */
    if (out_of_fds(e)) {
        char ebuf[400];
        return dl_lock_err(l, DLOCK_EIO, "lock \"%s\": cannot open its lock file: %s",
                           l->name, fd_strerror(e, ebuf, sizeof ebuf));
    }
    return dl_lock_err(l, errno_code(e), "cannot open lock file %s/%s: %s", fc->dir, path,
                       strerror(e));
}

/* fd's identity (the lock file's) in the lock's dev and ino, asked of fd
 * once per acquisition: whether it is known. */
static bool file_id(file_lock *fl, int fd)
{
    struct stat st;
    if (!fl->id_known && fstat(fd, &st) == 0) {
        fl->dev = st.st_dev;
        fl->ino = st.st_ino;
        fl->id_known = true;
    }
    return fl->id_known;
}

/* The file we locked must still be the one the name points to (nobody may
 * have removed or replaced it while we waited): whether fd still is. */
static bool still_linked(dlock_lock *l, int fd)
{
    file_client *fc = fc_of(l->c);
    file_lock *fl = l->bstate;
    char path[DL_NAME_MAX + 8];
    snprintf(path, sizeof path, "%s.lock", l->name);
    struct stat b;
    char err[PATH_MAX + 200];
    int dirfd;
    if (!file_id(fl, fd))
        return false;
    if (dir_get(fc, false, err, sizeof err, &dirfd) != 0)
        return false; /* cannot happen: the lock file was opened in it */
    if (fstatat(dirfd, path, &b, AT_SYMLINK_NOFOLLOW) != 0)
        return false;
    return fl->dev == b.st_dev && fl->ino == b.st_ino;
}

/*
 * The header: the last fencing token issued and the next queue ticket,
 * "dlock2 TOKEN\nnext TICKET\n", each number 20 digits. The two fields are
 * written apart, each by whoever may change it:
 *
 *   token  by a holder of MAIN alone: an exclusive holder (nobody else
 *          holds MAIN), or a shared or semaphore holder under META's write
 *          side (holders of MAIN's read side share it, so META orders them)
 *   next   by a taker of a ticket, under META's write side
 *
 * So an exclusive holder issues its token without META: before, it took
 * META's read side and met the ticket taker that had just let go (the last
 * holder, queueing again) at most hand-overs, yielding until it let META
 * go, with a helper when that took long. A header that says "dlock1" was
 * written by dlock up to the 0.1.0 packages, whose ticket takers rewrite
 * the whole header under META, the token they read included: it is
 * written the old way, under META, until a writer under META rewrites it
 * as "dlock2". From then on those versions refuse the file as corrupt
 * instead of writing a token back. (Its bytes: format.c.)
 */
static int read_header(dlock_lock *l, int fd, uint64_t *token, uint64_t *next, bool *split)
{
    char buf[HEADER_LEN];
    ssize_t n = pread(fd, buf, HEADER_LEN, 0);
    if (n < 0)
        return dl_lock_err(l, DLOCK_EIO, "lock \"%s\": read: %s", l->name, strerror(errno));
    if (!fh_parse_header(buf, (size_t)n, token, next, split))
        return dl_lock_err(l, DLOCK_EPROTO,
                           "lock file of \"%s\" has a corrupt header (refusing to reset the "
                           "fencing token; inspect or remove the file)",
                           l->name);
    return 0;
}

/* Write the header's fields from `from` (0: both; TOKEN_LEN: next alone)
 * to `to` (TOKEN_LEN: the token alone; HEADER_LEN: through next). */
static int write_header_part(dlock_lock *l, int fd, uint64_t token, uint64_t next, off_t from,
                             off_t to)
{
    char buf[HEADER_LEN + 1];
    fh_format_header(buf, token, next);
    size_t len = (size_t)(to - from);
    if (pwrite(fd, buf + from, len, from) != (ssize_t)len)
        return dl_lock_err(l, DLOCK_EIO, "lock \"%s\": cannot write header: %s", l->name,
                           strerror(errno));
    return 0;
}

static int write_header(dlock_lock *l, int fd, uint64_t token, uint64_t next)
{
    return write_header_part(l, fd, token, next, 0, HEADER_LEN);
}

/* With sync=1 in the URL, the header reaches the disk before the token is
 * used. */
static int sync_header(dlock_lock *l, int fd)
{
    if (fc_of(l->c)->sync && fdatasync(fd) != 0)
        return dl_lock_err(l, DLOCK_EIO, "lock \"%s\": fdatasync: %s", l->name,
                           strerror(errno));
    return 0;
}

/* Issue the next fencing token, as a holder of MAIN (see the header). A
 * "dlock1" header is rewritten under META, the exclusive holder's with
 * META's read side: a write lock on META beside its write lock on MAIN
 * would merge with it into one lock, and giving META back would then wake
 * every waiter blocked on MAIN (the kernel wakes a lock's waiters when the
 * lock shrinks), for nothing. */
static int bump_token(dlock_lock *l, int fd, int64_t deadline)
{
    bool exclusive = l->opts.kind == DLOCK_EXCLUSIVE;
    uint64_t token = 0, next = 0;
    bool split = false;
    int rc = exclusive ? read_header(l, fd, &token, &next, &split) : 0;
    if (rc)
        return rc;
    if (split) {
        rc = write_header_part(l, fd, token + 1, 0, 0, TOKEN_LEN);
    } else {
        rc = take_meta(l, fd, exclusive ? F_RDLCK : F_WRLCK, deadline);
        if (rc)
            return rc;
        rc = read_header(l, fd, &token, &next, &split);
        if (rc == 0)
            rc = write_header(l, fd, token + 1, next);
        unlock_range(fd, OFF_META);
    }
    if (rc == 0)
        rc = sync_header(l, fd);
    if (rc == 0)
        atomic_store(&l->token, token + 1);
    return rc;
}

static int write_record(dlock_lock *l, int fd, int idx, const char *value)
{
    char rec[RECORD_LEN];
    fh_format_record(rec, l->owner, fc_of(l->c)->self, dl_realtime_ms(), atomic_load(&l->token),
                     value);
    if (pwrite(fd, rec, sizeof rec, RECORD_OFF(idx)) != (ssize_t)sizeof rec)
        return dl_lock_err(l, DLOCK_EIO, "lock \"%s\": cannot write holder record: %s",
                           l->name, strerror(errno));
    return 0;
}

static void read_record(int fd, int idx, fh_record *r)
{
    char rec[RECORD_LEN];
    ssize_t n = pread(fd, rec, RECORD_LEN, RECORD_OFF(idx));
    fh_parse_record(rec, n > 0 ? (size_t)n : 0, r);
}

/* ---- operations -------------------------------------------------------- */

static int file_client_open(dlock_client *c, const dl_url *url)
{
    file_client *fc = calloc(1, sizeof *fc);
    if (!fc)
        return dl_client_err(c, DLOCK_ENOMEM, "out of memory");
    fc->dirfd = -1;
    fc->dir = strdup(url->path);
    if (!fc->dir) {
        free(fc);
        return dl_client_err(c, DLOCK_ENOMEM, "out of memory");
    }
    const char *sync = dl_url_param(url, "sync");
    bool sync_on = sync && (!*sync || strcmp(sync, "1") == 0 || strcmp(sync, "true") == 0);
    if (sync && !sync_on && strcmp(sync, "0") != 0 && strcmp(sync, "false") != 0) {
        free(fc->dir);
        free(fc);
        return dl_client_err(c, DLOCK_EURL,
                             "%s: parameter sync wants 1, true, 0 or false, not \"%s\"",
                             url->redacted, sync);
    }
    fc->sync = sync_on;
    /* The directory is made with the first lock; an existing one is
     * checked now, and a missing one must at least be creatable. */
    char err[PATH_MAX + 200];
    int rc = dir_open(fc, false, err, sizeof err);
    if (rc == DLOCK_ENOENT)
        rc = dir_creatable(fc, err, sizeof err);
    if (rc == 0 && (rc = pthread_mutex_init(&fc->mu, NULL)) != 0) {
        snprintf(err, sizeof err, "cannot create a mutex: %s", strerror(rc));
        rc = DLOCK_ENOMEM;
    }
    if (rc) {
        if (fc->dirfd >= 0)
            close(fc->dirfd);
        free(fc->dir);
        free(fc);
        return dl_client_err(c, rc, "%s", err);
    }
    dl_self_desc(fc->self, sizeof fc->self);
    atomic_init(&fc->call_sock, -1);
    atomic_init(&fc->answered, -1);
    c->bstate = fc;
    return 0;
}

static void file_client_close(dlock_client *c)
{
    file_client *fc = fc_of(c);
    if (fc->dirfd >= 0)
        close(fc->dirfd);
    int cs = atomic_load(&fc->call_sock);
    if (cs >= 0)
        close(cs);
    int ans = atomic_load(&fc->answered);
    if (ans >= 0)
        close(ans);
    pthread_mutex_destroy(&fc->mu);
    free(fc->dir);
    free(fc);
}

/* listener (a wait's, whose call came; -1: none) kept in place of the one
 * kept before, which is closed (see file_client.answered). */
static void keep_answered(file_client *fc, int listener)
{
    int before = atomic_exchange(&fc->answered, listener);
    if (before >= 0)
        close(before);
}

/* Once a fair holder's ranges are given back: its successor called, and
 * the listener kept from an earlier wait closed. */
static void call_after_letting_go(dlock_lock *l)
{
    file_lock *fl = l->bstate;
    if (fl->ticketed)
        call_next(fc_of(l->c), fl->dev, fl->ino, fl->ticket + 1);
    fl->ticketed = false;
    keep_answered(fc_of(l->c), -1);
}

static int file_lock_init(dlock_lock *l)
{
    file_lock *fl = calloc(1, sizeof *fl);
    if (!fl)
        return dl_lock_err(l, DLOCK_ENOMEM, "out of memory");
    fl->fd = -1;
    fl->slot = -1;
    l->bstate = fl;
    return 0;
}

static void file_lock_fini(dlock_lock *l)
{
    file_lock *fl = l->bstate;
    if (fl->fd >= 0) {
        close(fl->fd);
        call_after_letting_go(l);
        atomic_fetch_sub(&held_files, 1);
    }
    free(fl);
}

static int busy(dlock_lock *l)
{
    return dl_lock_err(l, DLOCK_EBUSY, "lock \"%s\" is held by another owner", l->name);
}

/* Wait for the job's ranges (all of them, in order). */
static int wait_steps(dlock_lock *l, int fd, int n, const short *type, const off_t *start,
                      int64_t deadline)
{
    wait_job job = {.fd = fd, .nsteps = n};
    for (int i = 0; i < n; i++) {
        job.type[i] = type[i];
        job.start[i] = start[i];
    }
    int w;
    return wait_jobs(l, &job, 1, deadline, &w);
}

/*
 * Wait up to CALL_WAIT_MS for the call of ticket t's predecessor on
 * listener (see "the next in line's call"), then take MAIN at once if the
 * predecessor's ticket is free: 0 when MAIN is held, 1 when the wait must
 * go on with a helper (no call, or MAIN or the ticket still held), <0
 * timed out or canceled. (TURN, which a waiting writer holds to keep
 * later readers out, is not needed: MAIN is taken or it is not.)
 */
static int wait_call(dlock_lock *l, int fd, int listener, uint64_t t, int64_t deadline)
{
    int cancel_fd = dl_cancel_fd(l);
    if (listener < 0 || cancel_fd < 0) /* (wait_jobs says why without cancel_fd) */
        return 1;
    int64_t until = dl_deadline_in(CALL_WAIT_MS);
    if (deadline > 0 && deadline < until)
        until = deadline;
    int rc = dl_wait_fd(listener, POLLIN, until, cancel_fd, NULL);
    if (rc == DLOCK_ECANCELED)
        return dl_lock_err(l, rc, "lock \"%s\": acquisition canceled", l->name);
    if (rc == DLOCK_ETIMEDOUT && until == deadline)
        return dl_wait_timed_out(l, NULL);
    if (rc != 0)
        return 1;
    /* Anyone may call: the ticket's being free is what counts (a call
     * while the predecessor still waits would otherwise let us pass it). */
    if (ticket_held(fd, t - 1) != 0)
        return 1;
    return try_range(l, fd, F_WRLCK, OFF_MAIN) == 0 ? 0 : 1;
}

/* Non-fair exclusive: take MAIN however the kernel hands it out. */
static int take_any_order(dlock_lock *l, int fd, int64_t deadline)
{
    int rc = try_range(l, fd, F_WRLCK, OFF_MAIN);
    if (rc <= 0)
        return rc;
    if (deadline == 0)
        return busy(l);
    return wait_steps(l, fd, 1, (short[]){F_WRLCK}, (off_t[]){OFF_MAIN}, deadline);
}

/* Shared: behind TURN, so that a writer waiting there blocks later readers. */
static int take_shared(dlock_lock *l, int fd, int64_t deadline)
{
    int rc = try_range(l, fd, F_WRLCK, OFF_TURN);
    if (rc < 0)
        return rc;
    if (rc == 1) {
        rc = deadline == 0 ? busy(l)
                           : wait_steps(l, fd, 2, (short[]){F_WRLCK, F_RDLCK},
                                        (off_t[]){OFF_TURN, OFF_MAIN}, deadline);
    } else {
        rc = try_range(l, fd, F_RDLCK, OFF_MAIN);
        if (rc == 1)
            rc = deadline == 0 ? busy(l)
                               : wait_steps(l, fd, 1, (short[]){F_RDLCK}, (off_t[]){OFF_MAIN},
                                            deadline);
    }
    unlock_range(fd, OFF_TURN);
    return rc;
}

/*
 * Fair exclusive: take a ticket t under META and sleep on the predecessor's
 * queue byte Q+(t-1), then on TURN (readers) and MAIN. Each release frees
 * the holder's queue byte and MAIN together, so the kernel wakes exactly the
 * next ticket. A try takes a ticket only when it can have the lock at once.
 */
static int take_in_order(dlock_lock *l, int fd, int64_t deadline, bool *token_issued)
{
    int rc = take_meta(l, fd, F_WRLCK, deadline);
    if (rc)
        return rc;
    uint64_t token, t;
    bool split;
    rc = read_header(l, fd, &token, &t, &split);
    if (rc) {
        unlock_range(fd, OFF_META);
        return rc;
    }
    rc = try_range(l, fd, F_WRLCK, OFF_QUEUE(t));
    if (rc != 0) {
        unlock_range(fd, OFF_META);
        return rc < 0 ? rc : dl_lock_err(l, DLOCK_EPROTO, "lock \"%s\": ticket %" PRIu64
                                         " is taken; the lock file's header is stale", l->name, t);
    }
    /* Who is ahead of us: the previous ticket, if still held (waiting or
     * holding), else whoever holds TURN or MAIN. (Its byte is only asked
     * about: one system call, where a try and a give-back were two. A
     * waiter takes it with a read lock, see wait_steps below: a write lock
     * would merge with ours on Q+t, the next byte, into one lock.) */
    int pred = t == 0 ? 0 : ticket_held(fd, t - 1);
    if (pred < 0)
        pred = dl_lock_err(l, DLOCK_EIO, "lock \"%s\": fcntl: %s", l->name, strerror(errno));
    int turn = pred == 0 ? try_range(l, fd, F_WRLCK, OFF_TURN) : 1;
    int main_ = turn == 0 ? try_range(l, fd, F_WRLCK, OFF_MAIN) : 1;
    file_lock *fl = l->bstate;
    if (pred < 0 || turn < 0 || main_ < 0) {
        rc = pred < 0 ? pred : turn < 0 ? turn : main_;
    } else if (main_ == 0) {
        /* Uncontended: issue the fencing token in the same META session,
         * after reading it again: the last exclusive holder may have
         * written it (without META) after our read, and let MAIN go since. */
        uint64_t t_again;
        rc = read_header(l, fd, &token, &t_again, &split);
        if (rc == 0)
            rc = write_header(l, fd, token + 1, t + 1);
        if (rc == 0)
            rc = sync_header(l, fd);
        if (rc == 0) {
            atomic_store(&l->token, token + 1);
            *token_issued = true;
            fl->ticketed = true;
            fl->ticket = t;
        }
    } else if (deadline == 0) {
        rc = busy(l);
    } else {
        /* the ticket alone, unless the header is an old one (see the
         * header: nobody writes its token without META) */
        rc = write_header_part(l, fd, token, t + 1, split ? TOKEN_LEN : 0, HEADER_LEN);
        if (rc == 0) {
            /* Listening before META is let go: only ticket t-1 calls t,
             * and it cannot let go before it sees ticket t taken. */
            bool named = file_id(fl, fd); /* (still_linked's too, after the wait) */
            int listener = pred == 1 && named ? call_listen(fl->dev, fl->ino, t) : -1;
            unlock_range(fd, OFF_META);
            bool called = false;
            if (pred == 1) {
                rc = wait_call(l, fd, listener, t, deadline);
                called = rc == 0;
                if (rc == 1)
                    rc = wait_steps(l, fd, 3, (short[]){F_RDLCK, F_WRLCK, F_WRLCK},
                                    (off_t[]){OFF_QUEUE(t - 1), OFF_TURN, OFF_MAIN}, deadline);
            } else if (turn == 1) {
                rc = wait_steps(l, fd, 2, (short[]){F_WRLCK, F_WRLCK},
                                (off_t[]){OFF_TURN, OFF_MAIN}, deadline);
            } else {
                rc = wait_steps(l, fd, 1, (short[]){F_WRLCK}, (off_t[]){OFF_MAIN}, deadline);
            }
            if (called)
                keep_answered(fc_of(l->c), listener);
            else if (listener >= 0)
                close(listener);
            if (!called) { /* (a call took neither) */
                if (t > 0)
                    unlock_range(fd, OFF_QUEUE(t - 1));
                unlock_range(fd, OFF_TURN);
            }
            if (rc) {
                /* let the next in line move up, now */
                unlock_range(fd, OFF_QUEUE(t));
                if (named)
                    call_next(fc_of(l->c), fl->dev, fl->ino, t + 1);
            } else {
                fl->ticketed = true;
                fl->ticket = t;
            }
            return rc;
        }
    }
    /* A ticket not kept goes back before META: the next taker reads the
     * same ticket from the header and must find its byte free (a try that
     * found the lock held let META go first, and a taker behind it failed
     * with "ticket N is taken; the lock file's header is stale"). */
    if (rc) {
        unlock_range(fd, OFF_MAIN);
        unlock_range(fd, OFF_QUEUE(t));
    }
    unlock_range(fd, OFF_META);
    unlock_range(fd, OFF_TURN);
    return rc;
}

static int take_main(dlock_lock *l, int fd, int64_t deadline, bool *token_issued)
{
    if (l->opts.kind == DLOCK_SHARED)
        return take_shared(l, fd, deadline);
    if (l->opts.fair == 0)
        return take_any_order(l, fd, deadline);
    return take_in_order(l, fd, deadline, token_issued);
}

/* The first KIND byte held in [from, from + len) (len 0: to the end), or -1. */
static off_t kind_held(int fd, off_t from, off_t len)
{
    struct flock fl = {.l_type = F_WRLCK, .l_whence = SEEK_SET, .l_start = from, .l_len = len};
    if (fcntl(fd, F_OFD_GETLK, &fl) != 0 || fl.l_type == F_UNLCK)
        return -1;
    return fl.l_start;
}

/* A shared or semaphore taker's claim of its KIND byte, refused with
 * DLOCK_ECONFLICT while another's is held. Under META, so that of two
 * takers of different kinds the second sees the first's byte. */
static int claim_kind(dlock_lock *l, int fd, int64_t deadline)
{
    off_t k = l->opts.kind == DLOCK_SEMAPHORE ? (off_t)l->opts.permits : 0;
    int rc = take_meta(l, fd, F_WRLCK, deadline);
    if (rc)
        return rc;
    off_t other = k > 0 ? kind_held(fd, OFF_KIND(0), k) : -1;
    if (other < 0)
        other = kind_held(fd, OFF_KIND(k + 1), 0);
    if (other >= 0) {
        off_t p = other - OFF_KIND(0);
        rc = dl_conflict_err(l, p == 0 ? 'r' : 's', (unsigned)p);
    } else {
        rc = try_range(l, fd, F_RDLCK, OFF_KIND(k));
        if (rc > 0) /* (only read locks are ever taken there) */
            rc = dl_lock_err(l, DLOCK_EPROTO, "lock \"%s\": its kind range is write-locked",
                             l->name);
    }
    unlock_range(fd, OFF_META);
    return rc;
}

/* Semaphore: any free permit; waiters queue on GATE, the first of them
 * sleeps on every permit at once. */
static int take_permit(dlock_lock *l, int fd, int64_t deadline, int *slot)
{
    unsigned n = l->opts.permits;
    bool fair = l->opts.fair != 0;
    bool gated = false;
    int rc;
    if (fair) {
        rc = take_range(l, fd, F_WRLCK, OFF_GATE, deadline);
        if (rc)
            return rc;
        gated = true;
    }
    for (;;) {
        for (unsigned i = 0; i < n; i++) {
            rc = try_range(l, fd, F_WRLCK, OFF_SLOT(i));
            if (rc <= 0) {
                if (rc == 0)
                    *slot = (int)i;
                goto out;
            }
        }
        if (deadline == 0) {
            rc = dl_lock_err(l, DLOCK_EBUSY, "semaphore \"%s\": all %u permits are taken",
                             l->name, n);
            goto out;
        }
        if (!gated) {
            rc = take_range(l, fd, F_WRLCK, OFF_GATE, deadline);
            if (rc)
                goto out;
            gated = true;
            continue; /* a permit may have freed while we queued */
        }
        wait_job *jobs = calloc(n, sizeof *jobs);
        if (!jobs) {
            rc = dl_lock_err(l, DLOCK_ENOMEM, "out of memory");
            goto out;
        }
        for (unsigned i = 0; i < n; i++)
            jobs[i] = (wait_job){.fd = fd, .nsteps = 1, .type = {F_WRLCK},
                                 .start = {OFF_SLOT(i)}};
        int w;
        rc = wait_jobs(l, jobs, (int)n, deadline, &w);
        free(jobs);
        if (rc == 0)
            *slot = w;
        goto out;
    }
out:
    if (gated)
        unlock_range(fd, OFF_GATE);
    return rc;
}

static int file_acquire(dlock_lock *l, int64_t deadline)
{
    file_lock *fl = l->bstate;
    for (;;) {
        fl->ticketed = false;
        fl->id_known = false;
        int fd = -1;
        int rc = open_lock_file(l, &fd);
        if (rc)
            return rc;
        int slot = -1;
        bool token_issued = false;
        if (l->opts.kind != DLOCK_EXCLUSIVE)
            rc = claim_kind(l, fd, deadline);
        if (rc == 0 && l->opts.kind == DLOCK_SEMAPHORE) {
            rc = take_permit(l, fd, deadline, &slot);
            if (rc == 0) /* MAIN's read side: shuts exclusive takers out */
                rc = take_shared(l, fd, deadline);
        } else if (rc == 0) {
            rc = take_main(l, fd, deadline, &token_issued);
        }
        if (rc) {
            drop_fd(fd);
            return rc;
        }
        /* (dev and ino: also where a fair holder's successor listens) */
        if (!still_linked(l, fd)) {
            drop_fd(fd);
            call_after_letting_go(l);
            continue;
        }
        if (!token_issued)
            rc = bump_token(l, fd, deadline);
        if (rc == 0 && l->opts.kind != DLOCK_SHARED)
            rc = write_record(l, fd, slot < 0 ? 0 : 1 + slot, NULL);
        if (rc) {
            drop_fd(fd);
            call_after_letting_go(l);
            return rc;
        }
        fl->fd = fd;
        fl->slot = slot;
        atomic_fetch_add(&held_files, 1);
        return 0;
    }
}

static int file_release(dlock_lock *l)
{
    file_lock *fl = l->bstate;
    if (fl->fd < 0)
        return dl_lock_err(l, DLOCK_ENOTHELD, "lock \"%s\" is not held", l->name);
    if (l->opts.kind != DLOCK_SHARED) {
        /* Clear our record while we still hold the lock; a stale record
         * would only mislead `dlock status`, never the lock itself. */
        char zero[RECORD_LEN] = {0};
        int idx = fl->slot < 0 ? 0 : 1 + fl->slot;
        if (pwrite(fl->fd, zero, sizeof zero, RECORD_OFF(idx)) < 0) {
            /* harmless: inspection checks the lock before trusting records */
        }
    }
    unlock_all(fl->fd);
    call_after_letting_go(l);
    atomic_fetch_sub(&held_files, 1);
    int rc = close(fl->fd) == 0 || errno == EINTR
                 ? 0
                 : dl_lock_err(l, DLOCK_EIO, "close: %s", strerror(errno));
    fl->fd = -1;
    fl->slot = -1;
    return rc;
}

static void file_abandon(dlock_lock *l)
{
    file_lock *fl = l->bstate;
    if (fl->fd >= 0) {
        drop_fd(fl->fd);
        call_after_letting_go(l);
        atomic_fetch_sub(&held_files, 1);
    }
    fl->fd = -1;
    fl->slot = -1;
}

/* Who holds range `start` right now: F_UNLCK, F_RDLCK or F_WRLCK. */
static short probe(int fd, off_t start)
{
    struct flock fl = {.l_type = F_WRLCK, .l_whence = SEEK_SET, .l_start = start, .l_len = 1};
    if (fcntl(fd, F_OFD_GETLK, &fl) != 0)
        return -1;
    return fl.l_type;
}

static int file_inspect(dlock_client *c, const char *name, dlock_info *info)
{
    file_client *fc = fc_of(c);
    char path[DL_NAME_MAX + 8];
    snprintf(path, sizeof path, "%s.lock", name);
    char err[PATH_MAX + 200];
    int dirfd;
    int rc = dir_get(fc, false, err, sizeof err, &dirfd);
    if (rc == DLOCK_ENOENT) {
        /* No directory yet: no lock was ever taken here. */
        info->held = 0;
        info->holders = 0;
        return 0;
    }
    if (rc)
        return dl_client_err(c, rc, "%s", err);
    int fd = openat(dirfd, path, O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
    if (fd < 0) {
        if (errno == ENOENT) {
            info->held = 0;
            info->holders = 0;
            return 0;
        }
        char ebuf[400];
        return dl_client_err(c, DLOCK_EIO, "cannot open %s/%s: %s", fc->dir, path,
                             fd_strerror(errno, ebuf, sizeof ebuf));
    }
    char hdr[TOKEN_LEN];
    uint64_t token, next;
    bool split;
    if (pread(fd, hdr, TOKEN_LEN, 0) == TOKEN_LEN &&
        fh_parse_header(hdr, TOKEN_LEN, &token, &next, &split))
        info->token = token;
    short t = probe(fd, OFF_MAIN);
    fh_record r = {0};
    if (t == F_WRLCK) {
        info->held = 1;
        info->holders = 1;
        read_record(fd, 0, &r);
    } else {
        /* Semaphore permits: records tell which slots were used; the
         * kernel tells which are held now. */
        struct stat st;
        int holders = 0;
        if (fstat(fd, &st) == 0 && st.st_size > RECORD_OFF(1)) {
            long slots = (long)((st.st_size - RECORD_OFF(1)) / RECORD_LEN);
            for (long i = 0; i < slots && i < 4096; i++) {
                if (probe(fd, OFF_SLOT(i)) == F_WRLCK) {
                    if (holders++ == 0)
                        read_record(fd, 1 + (int)i, &r);
                }
            }
        }
        if (holders > 0 || t != F_RDLCK) {
            info->held = holders > 0;
            info->holders = holders;
        } else {
            info->held = 1; /* readers: how many is not knowable from one probe */
        }
    }
    if (r.present) {
        snprintf(info->holder, sizeof info->holder, "%s", r.holder);
        if (r.since > 0)
            info->held_ms = dl_realtime_ms() - r.since;
    }
    close(fd);
    return 0;
}

/* A kernel lock goes only with its holder's open file description: there is
 * nothing to take away from outside. Say who holds it instead. */
static int file_break(dlock_client *c, const char *name, dlock_info *info)
{
    int rc = file_inspect(c, name, info);
    if (dl_nothing_to_break(rc, info))
        return rc;
    return dl_client_err(c, DLOCK_ENOTSUP,
                         "lock \"%s\" is a kernel lock held by %s: only its holder can release "
                         "it (stop that process and the kernel frees the lock at once)",
                         name, info->holder[0] ? info->holder : "an unknown process");
}

static int file_list(dlock_client *c, const char *prefix, dlock_list_fn fn, void *arg)
{
    file_client *fc = fc_of(c);
    char err[PATH_MAX + 200];
    int dirfd;
    int rc = dir_get(fc, false, err, sizeof err, &dirfd);
    if (rc == DLOCK_ENOENT)
        return 0; /* no directory yet: no locks */
    if (rc)
        return dl_client_err(c, rc, "%s", err);
    int dfd = openat(dirfd, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    DIR *d = dfd >= 0 ? fdopendir(dfd) : NULL;
    if (!d) {
        int e = errno;
        if (dfd >= 0)
            close(dfd);
        char ebuf[400];
        return dl_client_err(c, DLOCK_EIO, "cannot read %s: %s", fc->dir,
                             fd_strerror(e, ebuf, sizeof ebuf));
    }
    size_t plen = strlen(prefix);
    struct dirent *e;
    while (rc == 0 && (e = readdir(d)) != NULL) {
        size_t len = strlen(e->d_name);
        if (len <= 5 || strcmp(e->d_name + len - 5, ".lock") != 0)
            continue;
        char name[DL_NAME_MAX + 8];
        if (len - 5 >= sizeof name)
            continue;
        memcpy(name, e->d_name, len - 5);
        name[len - 5] = '\0';
        if (strncmp(name, prefix, plen) != 0 || dlock_name_valid(name, NULL, 0) != 0)
            continue;
        rc = fn(name, arg);
    }
    closedir(d);
    return rc;
}

static int file_set_value(dlock_lock *l, const char *value)
{
    file_lock *fl = l->bstate;
    if (fl->fd < 0)
        return dl_lock_err(l, DLOCK_ENOTHELD, "lock \"%s\" is not held", l->name);
    return write_record(l, fl->fd, 0, value);
}

static int file_get_value(dlock_client *c, const char *name, char *buf, size_t len)
{
    file_client *fc = fc_of(c);
    char path[DL_NAME_MAX + 8];
    snprintf(path, sizeof path, "%s.lock", name);
    char err[PATH_MAX + 200];
    int dirfd;
    int rc = dir_get(fc, false, err, sizeof err, &dirfd);
    if (rc && rc != DLOCK_ENOENT)
        return dl_client_err(c, rc, "%s", err);
    /* No directory yet: nobody ever led. */
    int fd = rc ? -1 : openat(dirfd, path, O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
    if (fd < 0 && !rc && out_of_fds(errno)) {
        char ebuf[400];
        return dl_client_err(c, DLOCK_EIO, "cannot open %s/%s: %s", fc->dir, path,
                             fd_strerror(errno, ebuf, sizeof ebuf));
    }
    if (fd < 0)
        return dl_client_err(c, DLOCK_ENOENT, "no leader for \"%s\"", name);
    fh_record r;
    rc = DLOCK_ENOENT;
    if (probe(fd, OFF_MAIN) == F_WRLCK) {
        read_record(fd, 0, &r);
        if (r.present) {
            snprintf(buf, len, "%s", r.value);
            rc = 0;
        }
    }
    close(fd);
    return rc ? dl_client_err(c, rc, "no leader for \"%s\"", name) : 0;
}

/* ---- claim records ------------------------------------------------------ */

/* A claim's record is the file NAME.once beside NAME.lock (no lock file
 * ends in ".once"), replaced whole by a rename, so that a reader sees the
 * old bytes or the new, never half: "expires_ms T ver V\n" (wall clock, so
 * that it holds across processes and reboots; V a random version, new with
 * each write, hex) then the core's bytes.
 *
 * A put looks at the version, then renames: two steps, not one. The core
 * writes only under the key's lock, a kernel lock that never expires
 * while its process lives, so no other runner writes between them; the
 * check still refuses a writer whose version is stale. A first record
 * (version 0, no file) is linked into place, which fails if another
 * writer's came first; one over an expired file is renamed over it. */
#define REC_SUFFIX ".once"
#define REC_HEAD_MAX 64
#define REC_FILE_MAX (DL_RECORD_MAX + REC_HEAD_MAX)

/* As record_get, and *expired: a file is there whose time is over. */
static int record_read(dlock_client *c, const char *key, char **val, size_t *len, uint64_t *ver,
                       bool *expired)
{
    file_client *fc = fc_of(c);
    *val = NULL;
    *len = 0;
    *ver = 0;
    *expired = false;
    char err[PATH_MAX + 200], path[DL_NAME_MAX + 8];
    snprintf(path, sizeof path, "%s" REC_SUFFIX, key);
    int dirfd;
    int rc = dir_get(fc, false, err, sizeof err, &dirfd);
    if (rc == DLOCK_ENOENT)
        return 0; /* no directory yet: no claims */
    if (rc)
        return dl_client_err(c, rc, "%s", err);
    int fd = openat(dirfd, path, O_RDONLY | O_NOFOLLOW | O_CLOEXEC | O_NONBLOCK);
    if (fd < 0 && errno == ENOENT)
        return 0;
    if (fd < 0)
        return dl_client_err(c, errno_code(errno), "cannot open claim record %s/%s: %s",
                             fc->dir, path, strerror(errno));
    struct stat st;
    char *buf = NULL;
    if (fstat(fd, &st) != 0) {
        rc = dl_client_err(c, DLOCK_EIO, "cannot stat %s/%s: %s", fc->dir, path,
                           strerror(errno));
    } else if (!S_ISREG(st.st_mode) || st.st_size > REC_FILE_MAX) {
        rc = dl_client_err(c, DLOCK_EPROTO, "claim record %s/%s: %s", fc->dir, path,
                           S_ISREG(st.st_mode) ? "too large to be one" : "not a plain file");
    } else if (!(buf = malloc((size_t)st.st_size + 1))) {
        rc = dl_client_err(c, DLOCK_ENOMEM, "claim record %s/%s: out of memory", fc->dir, path);
    } else {
        ssize_t got = pread(fd, buf, (size_t)st.st_size + 1, 0);
        if (got < 0)
            rc = dl_client_err(c, DLOCK_EIO, "cannot read %s/%s: %s", fc->dir, path,
                               strerror(errno));
        else if (got != st.st_size) /* never, for a file only renamed into place */
            rc = dl_client_err(c, DLOCK_EIO, "claim record %s/%s changed while read", fc->dir,
                               path);
        else
            buf[got] = '\0';
    }
    close(fd);
    if (rc) {
        free(buf);
        return rc;
    }
    size_t n = (size_t)st.st_size;
    const char *nl = memchr(buf, '\n', n < REC_HEAD_MAX ? n : REC_HEAD_MAX);
    char *end;
    long long expires_ms = 0;
    uint64_t v = 0;
    if (nl && strncmp(buf, "expires_ms ", 11) == 0) {
        errno = 0;
        expires_ms = strtoll(buf + 11, &end, 10);
        if (!errno && strncmp(end, " ver ", 5) == 0)
            v = strtoull(end + 5, &end, 16);
        if (errno || end != nl || v == 0)
            nl = NULL;
    }
    if (!nl) {
        free(buf);
        return dl_client_err(c, DLOCK_EPROTO, "claim record %s/%s: no expiry and version line",
                             fc->dir, path);
    }
    if (expires_ms <= dl_realtime_ms()) {
        free(buf); /* its time is over; the next put replaces it */
        *expired = true;
        return 0;
    }
    *ver = v;
    size_t skip = (size_t)(nl - buf) + 1;
    memmove(buf, buf + skip, n - skip + 1);
    *val = buf;
    *len = n - skip;
    return 0;
}

static int file_record_get(dlock_client *c, const char *key, char **val, size_t *len,
                           uint64_t *ver)
{
    bool expired;
    return record_read(c, key, val, len, ver, &expired);
}

static int file_record_put(dlock_client *c, const char *key, const char *val, size_t len,
                           int64_t ttl_ms, uint64_t ver)
{
    file_client *fc = fc_of(c);
    char err[PATH_MAX + 200], path[DL_NAME_MAX + 8], tmp[DL_NAME_MAX + 64];
    snprintf(path, sizeof path, "%s" REC_SUFFIX, key);
    /* the version now, and whether a file is there (expired: version 0) */
    char *cur;
    size_t curlen;
    uint64_t curver;
    bool expired;
    int rc = record_read(c, key, &cur, &curlen, &curver, &expired);
    if (rc)
        return rc;
    free(cur);
    if (curver != ver)
        return DL_RECORD_CHANGED;
    uint64_t rnd, newver = 0;
    while (newver == 0)
        if (dl_random(&rnd, sizeof rnd) != 0 || dl_random(&newver, sizeof newver) != 0)
            return dl_client_err(c, DLOCK_EIO, "cannot read random bytes for a record");
    /* A leading dot: no lock name makes it, and listings skip it. */
    snprintf(tmp, sizeof tmp, ".%s.%016" PRIx64 ".tmp", path, rnd);
    int dirfd;
    rc = dir_get(fc, true, err, sizeof err, &dirfd);
    if (rc)
        return dl_client_err(c, rc, "%s", err);
    char head[REC_HEAD_MAX];
    int hn = snprintf(head, sizeof head, "expires_ms %lld ver %" PRIx64 "\n",
                      (long long)(dl_realtime_ms() + ttl_ms), newver);
    int fd = openat(dirfd, tmp, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC,
                    fc->filemode);
    if (fd < 0)
        return dl_client_err(c, errno_code(errno), "cannot create %s/%s: %s", fc->dir, tmp,
                             strerror(errno));
    if (fchmod(fd, fc->filemode) != 0) {
        /* not fatal: readable by us */
    }
    const char *parts[2] = {head, val};
    size_t lens[2] = {(size_t)hn, len};
    for (int i = 0; i < 2 && rc == 0; i++)
        for (size_t done = 0; done < lens[i];) {
            ssize_t w = write(fd, parts[i] + done, lens[i] - done);
            if (w < 0 && errno == EINTR)
                continue;
            if (w <= 0) {
                rc = dl_client_err(c, DLOCK_EIO, "cannot write %s/%s: %s", fc->dir, tmp,
                                   strerror(w < 0 ? errno : ENOSPC));
                break;
            }
            done += (size_t)w;
        }
    if (rc == 0 && fc->sync && fdatasync(fd) != 0)
        rc = dl_client_err(c, DLOCK_EIO, "cannot sync %s/%s: %s", fc->dir, tmp, strerror(errno));
    if (close(fd) != 0 && rc == 0)
        rc = dl_client_err(c, DLOCK_EIO, "cannot write %s/%s: %s", fc->dir, tmp, strerror(errno));
    /* none there: linked, so that of two first writers one fails; else
     * (a version, or an expired file) renamed over */
    bool first = ver == 0 && !expired;
    int perr = 0;
    if (rc == 0 && first && linkat(dirfd, tmp, dirfd, path, 0) != 0)
        perr = errno;
    /* a file system without hard links: renamed, as a later write is */
    if (rc == 0 && (!first || (perr && perr != EEXIST)))
        perr = renameat(dirfd, tmp, dirfd, path) != 0 ? errno : 0;
    if (rc == 0 && perr == EEXIST && first)
        rc = DL_RECORD_CHANGED;
    else if (rc == 0 && perr)
        rc = dl_client_err(c, errno_code(perr), "cannot put claim record %s/%s in place: %s%s",
                           fc->dir, path, strerror(perr),
                           perr == EPERM ? " (another user's record in a shared directory)" : "");
    if (rc || first)
        (void)unlinkat(dirfd, tmp, 0);
    if (rc)
        return rc;
    if (fc->sync && fsync(dirfd) != 0)
        return dl_client_err(c, DLOCK_EIO, "cannot sync %s: %s", fc->dir, strerror(errno));
    return 0;
}

static int file_record_del(dlock_client *c, const char *key)
{
    file_client *fc = fc_of(c);
    char err[PATH_MAX + 200], path[DL_NAME_MAX + 8];
    snprintf(path, sizeof path, "%s" REC_SUFFIX, key);
    int dirfd;
    int rc = dir_get(fc, false, err, sizeof err, &dirfd);
    if (rc == DLOCK_ENOENT)
        return 0;
    if (rc)
        return dl_client_err(c, rc, "%s", err);
    if (unlinkat(dirfd, path, 0) != 0 && errno != ENOENT)
        return dl_client_err(c, errno_code(errno), "cannot remove %s/%s: %s", fc->dir, path,
                             strerror(errno));
    return 0;
}

static const dl_scheme file_schemes[] = {
    {"file", "file", 0, false, DL_PATH_FILE},
    {NULL, NULL, 0, false, DL_PATH_NONE},
};

static const dl_backend_ops file_ops = {
    .client_open = file_client_open,
    .client_close = file_client_close,
    .lock_init = file_lock_init,
    .lock_fini = file_lock_fini,
    .acquire = file_acquire,
    .release = file_release,
    .abandon = file_abandon,
    .inspect = file_inspect,
    .break_lock = file_break,
    .list = file_list,
    .set_value = file_set_value,
    .get_value = file_get_value,
    .record_get = file_record_get,
    .record_put = file_record_put,
    .record_del = file_record_del,
};

const dl_backend dl_backend_file = {
    .name = "file",
    .schemes = file_schemes,
    .params = "sync",
    .caps = DLOCK_CAP_FENCING | DLOCK_CAP_FAIR | DLOCK_CAP_SHARED | DLOCK_CAP_SEMAPHORE |
            DLOCK_CAP_SESSION | DLOCK_CAP_NATIVE_BLOCKING | DLOCK_CAP_CLAIMS,
    .liveness = "kernel releases the lock when the holder's process dies",
    .fencing = "counter in the lock file; survives crashes of processes, and of the host "
               "only with ?sync=1",
    .ops = &file_ops,
};
