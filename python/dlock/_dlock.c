/* SPDX-License-Identifier: MIT */
/*
 * _dlock.c — the CPython extension over libdlock's public API (dlock.h).
 *
 * The package dlock (__init__.py) builds the Pythonic API on the three types
 * here: Client (a dlock_client), Lock (a dlock_lock) and _Wait (an
 * acquisition running in the background, for asyncio). Rules kept here:
 *
 * - Every call that may block (network, kernel lock, a join) releases the
 *   GIL. The library's loss callback takes the GIL, so no thread may hold
 *   the GIL while it waits for the library.
 * - A waiting acquisition from the main thread runs on a worker thread of a
 *   small pool while the main thread waits for it in poll() and checks for
 *   signals (EINTR, and every 100 ms): Ctrl-C cancels the acquisition with
 *   dlock_cancel, waits until it has returned, and gives back what it took,
 *   so nothing is left held. Other threads call the library directly.
 * - After fork() a child never runs library code on its parent's handles
 *   (their threads are not in the child): every call raises dlock.Error, and
 *   freeing them there frees nothing (releasing would drop the parent's
 *   locks).
 * - One thread at a time per lock handle (dlock.h): a second thread gets an
 *   error instead of undefined behaviour; cancel, state and token are for
 *   any thread.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <structmember.h>

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <math.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <time.h>
#include <unistd.h>

#include "dlock.h"
/* libdlock's test hook, exported but declared outside the installed
 * header (src/dlock_debug.h): Lock._force_loss for the tests. */
int dlock_debug_force_loss(dlock_lock *lock);

/* ---- process state --------------------------------------------------- */

/* Bumped in the child of every fork: a handle made under another value
 * belongs to an ancestor process. */
static atomic_ulong fork_gen;
/* Set at interpreter exit: loss callbacks no longer enter Python. */
static atomic_int shutting_down;

static int is_finalizing(void)
{
#if PY_VERSION_HEX >= 0x030D0000
    return Py_IsFinalizing();
#else
    return _Py_IsFinalizing();
#endif
}

/* ---- errors ------------------------------------------------------------ */

#define NCODES 17 /* -code indexes; 0 unused */
static PyObject *Error;
static PyObject *err_class[NCODES];

static const struct {
    int code;
    const char *name, *doc;
} ERRS[] = {
    {DLOCK_EINVAL, "InvalidArgument", "An argument was invalid (DLOCK_EINVAL)."},
    {DLOCK_ENOTSUP, "NotSupported", "The backend does not offer this operation (DLOCK_ENOTSUP)."},
    {DLOCK_EBUSY, "Busy", "The lock is held by another owner; raised by acquire(timeout=0) "
                          "(DLOCK_EBUSY)."},
    {DLOCK_ETIMEDOUT, "Timeout", "The lock was not acquired within the timeout (DLOCK_ETIMEDOUT)."},
    {DLOCK_ELOST, "Lost", "The lock was lost while held: its lease or session is gone, or an "
                          "operator broke it (DLOCK_ELOST). Raised by release() and on leaving "
                          "the with block."},
    {DLOCK_ENOTHELD, "NotHeld", "The lock is not held by this handle (DLOCK_ENOTHELD)."},
    {DLOCK_EUNREACHABLE, "Unreachable", "The backend cannot be reached (DLOCK_EUNREACHABLE)."},
    {DLOCK_EPROTO, "ProtocolError", "The backend answered something unexpected (DLOCK_EPROTO)."},
    {DLOCK_ENOMEM, "OutOfMemory", "The library ran out of memory (DLOCK_ENOMEM)."},
    {DLOCK_ECANCELED, "Cancelled", "The acquisition was cancelled with cancel() (DLOCK_ECANCELED)."},
    {DLOCK_EIO, "IOFailure", "An input/output error (DLOCK_EIO)."},
    {DLOCK_EPERM, "PermissionDenied", "The backend refused the operation (DLOCK_EPERM)."},
    {DLOCK_ENOENT, "NotFound", "No such lock (DLOCK_ENOENT); leader() returns None instead."},
    {DLOCK_EURL, "InvalidURL", "The backend URL is malformed (DLOCK_EURL)."},
    {DLOCK_ENAME, "InvalidName", "The lock name is invalid (DLOCK_ENAME)."},
    {DLOCK_ECONFLICT, "Conflict", "The name is held as another kind of lock (DLOCK_ECONFLICT)."},
};

/* Raise the class of `code` with `msg` (the library's message; its code's
 * own text when empty). Returns NULL. */
static PyObject *raise_code(int code, const char *msg)
{
    PyObject *cls = (code < 0 && -code < NCODES && err_class[-code]) ? err_class[-code] : Error;
    if (!msg || !*msg)
        msg = dlock_strerror(code);
    PyObject *m = PyUnicode_DecodeUTF8(msg, (Py_ssize_t)strlen(msg), "replace");
    if (!m)
        return NULL;
    PyObject *exc = PyObject_CallOneArg(cls, m);
    Py_DECREF(m);
    if (!exc)
        return NULL;
    PyObject *c = PyLong_FromLong(code);
    PyObject *n = PyUnicode_FromString(dlock_err_name(code));
    if (c && n) {
        PyObject_SetAttrString(exc, "code", c);
        PyObject_SetAttrString(exc, "errname", n);
    }
    Py_XDECREF(c);
    Py_XDECREF(n);
    PyErr_SetObject(cls, exc);
    Py_DECREF(exc);
    return NULL;
}

/* ---- timeouts ------------------------------------------------------------ */

/* None: -1 (forever); seconds >= 0: milliseconds, rounded up. */
static int timeout_ms_of(PyObject *o, int *out)
{
    if (o == NULL || o == Py_None) {
        *out = -1;
        return 0;
    }
    double s = PyFloat_AsDouble(o);
    if (s == -1.0 && PyErr_Occurred())
        return -1;
    if (isnan(s) || s < 0) {
        PyErr_SetString(PyExc_ValueError, "timeout must be None or a number of seconds >= 0");
        return -1;
    }
    double ms = ceil(s * 1000.0);
    *out = ms >= (double)INT_MAX ? -1 : (int)ms;
    return 0;
}

/* ---- the wait pool ---------------------------------------------------------- */

enum { JOB_ACQUIRE, JOB_CAMPAIGN, JOB_ACQUIRE_ALL, JOB_CLAIM };

typedef struct job {
    struct job *next;
    int op;
    dlock_lock **locks; /* n handles (locks == &one for a single lock) */
    size_t n;
    dlock_lock *one;
    int timeout_ms;
    char value[256];
    dlock_claim_opts claim_opts; /* JOB_CLAIM: in */
    dlock_claim *claim;          /* JOB_CLAIM: out */
    int rc;
    int done_fd; /* eventfd, written once the call has returned */
    atomic_int done;
} job;

static pthread_mutex_t pool_mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t pool_cv = PTHREAD_COND_INITIALIZER;
static job *pool_head, *pool_tail;
static int pool_idle, pool_pending;

static void job_run(job *j)
{
    int rc;
    switch (j->op) {
    case JOB_CAMPAIGN:
        rc = dlock_campaign(j->one, j->value, j->timeout_ms);
        break;
    case JOB_ACQUIRE_ALL:
        rc = dlock_acquire_all(j->locks, j->n, j->timeout_ms);
        break;
    case JOB_CLAIM:
        rc = dlock_claim_begin(j->one, &j->claim_opts, j->timeout_ms, &j->claim);
        break;
    default:
        rc = dlock_acquire(j->one, j->timeout_ms);
    }
    j->rc = rc;
    atomic_store(&j->done, 1);
    uint64_t one = 1;
    ssize_t w;
    do
        w = write(j->done_fd, &one, sizeof one);
    while (w < 0 && errno == EINTR);
}

static void *pool_main(void *arg)
{
    (void)arg;
    pthread_mutex_lock(&pool_mu);
    for (;;) {
        while (!pool_head) {
            struct timespec ts;
            clock_gettime(CLOCK_REALTIME, &ts);
            ts.tv_sec += 30; /* an idle worker goes after 30 s */
            pool_idle++;
            int r = pthread_cond_timedwait(&pool_cv, &pool_mu, &ts);
            pool_idle--;
            if (r == ETIMEDOUT && !pool_head) {
                pthread_mutex_unlock(&pool_mu);
                return NULL;
            }
        }
        job *j = pool_head;
        pool_head = j->next;
        if (!pool_head)
            pool_tail = NULL;
        pool_pending--;
        pthread_mutex_unlock(&pool_mu);
        job_run(j);
        pthread_mutex_lock(&pool_mu);
    }
}

/* Queue j for a worker (a new one unless one is idle). 0 or an errno. */
static int pool_submit(job *j)
{
    int err = 0;
    pthread_mutex_lock(&pool_mu);
    j->next = NULL;
    if (pool_tail)
        pool_tail->next = j;
    else
        pool_head = j;
    pool_tail = j;
    pool_pending++;
    if (pool_idle >= pool_pending) {
        pthread_cond_signal(&pool_cv);
    } else {
        /* Workers block every signal: Python's handlers run in the main
         * thread, whose poll() a signal interrupts. */
        sigset_t all, old;
        sigfillset(&all);
        pthread_sigmask(SIG_SETMASK, &all, &old);
        pthread_attr_t at;
        pthread_attr_init(&at);
        pthread_attr_setdetachstate(&at, PTHREAD_CREATE_DETACHED);
        pthread_attr_setstacksize(&at, 256 * 1024);
        pthread_t th;
        err = pthread_create(&th, &at, pool_main, NULL);
        pthread_attr_destroy(&at);
        pthread_sigmask(SIG_SETMASK, &old, NULL);
        if (err) {
            /* unqueue it: it is the tail */
            job **pp = &pool_head;
            while (*pp != j)
                pp = &(*pp)->next;
            *pp = NULL;
            pool_tail = NULL;
            for (job *k = pool_head; k; k = k->next)
                pool_tail = k;
            pool_pending--;
        }
    }
    pthread_mutex_unlock(&pool_mu);
    return err;
}

/* The Ctrl-C relay (see acquire_main). */
static pthread_mutex_t relay_mu = PTHREAD_MUTEX_INITIALIZER;
static int relay_rd = -1, relay_wr = -1;
static int relay_started;
static dlock_lock *relay_current; /* the main thread's acquisition */
static unsigned long relay_seq;   /* one per acquisition */
static int relay_fired;           /* the current one was cancelled */
static atomic_int relay_forward = -1;
static PyObject *signal_set_wakeup_fd;
static PyObject *wakeup_kwargs; /* {"warn_on_full_buffer": False} */

/* The thread Python runs signal handlers in (threading.main_thread(), read
 * at import; in a forked child, the thread that forked). Kept here because
 * CPython's own test for it (_PyOS_IsMainThread) is private API. */
static atomic_ulong main_thread_ident;

static int on_main_thread(void)
{
    return PyThread_get_thread_ident() == atomic_load(&main_thread_ident);
}

static void atfork_child(void)
{
    atomic_fetch_add(&fork_gen, 1);
    atomic_store(&main_thread_ident, PyThread_get_thread_ident());
    /* The workers are not in the child; nor are their jobs. */
    pthread_mutex_init(&pool_mu, NULL);
    pthread_cond_init(&pool_cv, NULL);
    pool_head = pool_tail = NULL;
    pool_idle = pool_pending = 0;
    /* nor is the relay: the child makes its own pipe when it needs one.
     * The inherited ends stay open (the child's Python may still have the
     * write end as its wakeup descriptor if another thread forked during
     * a wait: a closed, then reused, number would take its bytes). */
    pthread_mutex_init(&relay_mu, NULL);
    relay_rd = relay_wr = -1;
    relay_started = 0;
    relay_current = NULL;
    atomic_store(&relay_forward, -1);
}

static int job_init(job *j, int op, int timeout_ms)
{
    memset(j, 0, sizeof *j);
    j->op = op;
    j->timeout_ms = timeout_ms;
    j->locks = &j->one;
    j->n = 1;
    j->done_fd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
    if (j->done_fd < 0) {
        PyErr_SetFromErrno(PyExc_OSError);
        return -1;
    }
    return 0;
}

static void job_cancel(job *j)
{
    for (size_t i = 0; i < j->n; i++)
        dlock_cancel(j->locks[i]);
}

/* Without the GIL: cancel until the call has returned (a cancel that
 * arrives before the call starts waiting, or between two locks of a set,
 * is forgotten: so it is sent again). */
static void job_cancel_wait(job *j)
{
    struct pollfd p = {.fd = j->done_fd, .events = POLLIN};
    while (!atomic_load(&j->done)) {
        job_cancel(j);
        (void)poll(&p, 1, 20);
    }
}

/* Give back what a job took that nobody will use (cancelled too late). */
static void job_undo(job *j)
{
    if (j->rc != 0)
        return;
    if (j->op == JOB_CAMPAIGN) {
        (void)dlock_resign(j->one);
    } else if (j->op == JOB_CLAIM) {
        /* an attempt began: say so (the next caller runs attempt N+1) */
        if (dlock_claim_state(j->claim) == DLOCK_CLAIM_RUN)
            (void)dlock_claim_abandon(j->claim);
        dlock_claim_free(j->claim);
        j->claim = NULL;
    } else if (j->op == JOB_ACQUIRE_ALL) {
        (void)dlock_release_all(j->locks, j->n);
    } else {
        (void)dlock_release(j->one);
    }
}

/* With the GIL: run j on a worker and wait for it, signals checked. 0 when
 * it returned (its rc in j->rc); -1 with an exception set (a signal
 * handler raised: the job was cancelled, and undone if it had succeeded). */
static int job_wait(job *j)
{
    int err = pool_submit(j);
    if (err) {
        errno = err;
        PyErr_SetFromErrno(PyExc_OSError);
        return -1;
    }
    struct pollfd p = {.fd = j->done_fd, .events = POLLIN};
    for (;;) {
        Py_BEGIN_ALLOW_THREADS
        (void)poll(&p, 1, 100);
        Py_END_ALLOW_THREADS
        if (atomic_load(&j->done))
            return 0;
        if (PyErr_CheckSignals() < 0) {
            Py_BEGIN_ALLOW_THREADS
            job_cancel_wait(j);
            job_undo(j);
            Py_END_ALLOW_THREADS
            return -1;
        }
    }
}


/* ---- Ctrl-C for a wait in the main thread ------------------------------------ */

/*
 * The main thread waits in dlock_acquire itself (no thread hop on the hot
 * path). For the duration, Python's signal wakeup descriptor is a pipe read
 * by one relay thread (made once, every signal blocked): a signal for which
 * Python has a handler writes its number there, and the relay cancels the
 * main thread's acquisition (again every 20 ms until it has returned: a
 * cancel that comes before the wait has begun is forgotten) and passes the
 * byte on to the descriptor that was set before (asyncio's). The main
 * thread then runs the handlers: one that raises (KeyboardInterrupt) ends
 * the call with nothing held; otherwise the acquisition starts again with
 * the time left.
 */

static void *relay_main(void *arg)
{
    (void)arg;
    unsigned char buf[64];
    for (;;) {
        ssize_t n = read(relay_rd, buf, sizeof buf);
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0)
            return NULL;
        int fwd = atomic_load(&relay_forward);
        if (fwd >= 0)
            (void)!write(fwd, buf, (size_t)n);
        pthread_mutex_lock(&relay_mu);
        unsigned long seq = relay_seq;
        while (relay_current && relay_seq == seq) {
            relay_fired = 1;
            dlock_cancel(relay_current);
            pthread_mutex_unlock(&relay_mu);
            struct timespec ts = {0, 20 * 1000 * 1000};
            nanosleep(&ts, NULL);
            pthread_mutex_lock(&relay_mu);
        }
        pthread_mutex_unlock(&relay_mu);
    }
}

static int relay_start(void)
{
    if (relay_started)
        return 0;
    int fds[2];
    if (pipe2(fds, O_CLOEXEC) < 0) {
        PyErr_SetFromErrno(PyExc_OSError);
        return -1;
    }
    int fl = fcntl(fds[1], F_GETFL);
    fcntl(fds[1], F_SETFL, fl | O_NONBLOCK);
    relay_rd = fds[0];
    relay_wr = fds[1];
    sigset_t all, old;
    sigfillset(&all);
    pthread_sigmask(SIG_SETMASK, &all, &old);
    pthread_attr_t at;
    pthread_attr_init(&at);
    pthread_attr_setdetachstate(&at, PTHREAD_CREATE_DETACHED);
    pthread_attr_setstacksize(&at, 128 * 1024);
    pthread_t th;
    int err = pthread_create(&th, &at, relay_main, NULL);
    pthread_attr_destroy(&at);
    pthread_sigmask(SIG_SETMASK, &old, NULL);
    if (err) {
        close(fds[0]);
        close(fds[1]);
        relay_rd = relay_wr = -1;
        errno = err;
        PyErr_SetFromErrno(PyExc_OSError);
        return -1;
    }
    relay_started = 1;
    return 0;
}

/* signal.set_wakeup_fd(fd, warn_on_full_buffer=False): the old fd, or -2
 * with an exception set. */
static int set_wakeup(int fd)
{
    PyObject *a = Py_BuildValue("(i)", fd);
    if (!a)
        return -2;
    PyObject *r = PyObject_Call(signal_set_wakeup_fd, a, wakeup_kwargs);
    Py_DECREF(a);
    if (!r)
        return -2;
    long old = PyLong_AsLong(r);
    Py_DECREF(r);
    if (old == -1 && PyErr_Occurred())
        return -2;
    return (int)old;
}

static int64_t mono_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* The relay's acquisition is now cur (its signals cancel cur's wait);
 * returns whether a signal fired for the one before. */
static int relay_set(dlock_lock *cur)
{
    pthread_mutex_lock(&relay_mu);
    int fired = relay_fired;
    relay_current = cur;
    relay_seq++; /* (ends the relay's cancelling of the one before) */
    relay_fired = 0;
    pthread_mutex_unlock(&relay_mu);
    return fired;
}

/* dlock_acquire from the main thread, with the GIL; signals handled as
 * above. Returns the library's code, or 1 with a Python exception set
 * (nothing held). */
static int acquire_main(dlock_lock *l, int tmo)
{
    if (relay_start() < 0)
        return 1;
    /* A handler run below, before the wait, may itself wait on a lock: when
     * that inner call returns, the relay is the outer's again (its signals
     * cancel the outer wait, its bytes go on where the outer's went). */
    pthread_mutex_lock(&relay_mu);
    dlock_lock *outer = relay_current;
    pthread_mutex_unlock(&relay_mu);
    int outer_forward = atomic_load(&relay_forward);
    int64_t until = tmo > 0 ? mono_ms() + tmo : 0;
    for (;;) {
        (void)relay_set(l);
        int old = set_wakeup(relay_wr);
        if (old != -2) /* (an inner call finds the relay's own descriptor) */
            atomic_store(&relay_forward, old == relay_wr ? outer_forward : old);
        int rc = 1;
        /* A signal before the descriptor was ours has not reached the
         * relay: its handlers run now, before the wait. */
        if (old != -2 && PyErr_CheckSignals() == 0) {
            Py_BEGIN_ALLOW_THREADS
            rc = dlock_acquire(l, tmo);
            Py_END_ALLOW_THREADS
        }
        int fired = relay_set(outer);
        atomic_store(&relay_forward, outer_forward);
        if (old == -2)
            return 1;
        if (rc == 1) { /* a handler raised before the wait */
            PyObject *et, *ev, *tb;
            PyErr_Fetch(&et, &ev, &tb);
            if (set_wakeup(old) == -2)
                PyErr_WriteUnraisable(signal_set_wakeup_fd);
            PyErr_Restore(et, ev, tb);
            return 1;
        }
        if (set_wakeup(old) == -2) /* keep going: the acquisition's outcome matters more */
            PyErr_WriteUnraisable(signal_set_wakeup_fd);
        if (!fired)
            return rc;
        /* a signal came: its handlers run now */
        if (PyErr_CheckSignals() < 0) {
            if (rc == 0) {
                Py_BEGIN_ALLOW_THREADS
                (void)dlock_release(l);
                Py_END_ALLOW_THREADS
            }
            return 1;
        }
        if (rc != DLOCK_ECANCELED)
            return rc;
        if (tmo > 0) { /* the handlers did not raise: wait on, for the time left */
            int64_t left = until - mono_ms();
            if (left <= 0)
                return DLOCK_ETIMEDOUT;
            tmo = (int)left;
        }
    }
}

/* ---- Client ---------------------------------------------------------------- */

typedef struct {
    PyObject_HEAD
    dlock_client *c;
    unsigned long gen;
    long pid;
    int users;  /* calls in progress without the GIL */
    int closed;
    PyObject *weakrefs;
} ClientObject;

static PyTypeObject ClientType;

static int client_usable(ClientObject *self)
{
    if (self->gen != atomic_load(&fork_gen)) {
        PyErr_Format(Error,
                     "this dlock.Client was opened in process %ld, before a fork: a child "
                     "process cannot use its parent's client (or its locks); open a new "
                     "dlock.Client in the child",
                     self->pid);
        return -1;
    }
    if (!self->c) {
        raise_code(DLOCK_EINVAL, self->closed ? "the client is closed" : "the client is not open");
        return -1;
    }
    return 0;
}

static int Client_init(ClientObject *self, PyObject *args, PyObject *kw)
{
    static char *kwlist[] = {"url", "connect_timeout", "op_timeout", NULL};
    const char *url = NULL;
    PyObject *ct = Py_None, *ot = Py_None;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "|z$OO:Client", kwlist, &url, &ct, &ot))
        return -1;
    if (self->c) {
        PyErr_SetString(PyExc_RuntimeError, "Client is already open");
        return -1;
    }
    dlock_client_opts o;
    dlock_client_opts_init(&o);
    int ms;
    if (ct != Py_None) {
        if (timeout_ms_of(ct, &ms) < 0)
            return -1;
        o.connect_timeout_ms = ms < 0 ? INT_MAX : (ms == 0 ? 1 : ms);
    }
    if (ot != Py_None) {
        if (timeout_ms_of(ot, &ms) < 0)
            return -1;
        o.op_timeout_ms = ms < 0 ? INT_MAX : (ms == 0 ? 1 : ms);
    }
    dlock_client *c = NULL;
    int rc;
    char msg[512] = "";
    Py_BEGIN_ALLOW_THREADS
    rc = dlock_client_open(&c, url, &o);
    if (rc)
        snprintf(msg, sizeof msg, "%s", dlock_client_errmsg(NULL)); /* this thread's */
    Py_END_ALLOW_THREADS
    if (rc) {
        raise_code(rc, msg);
        return -1;
    }
    self->c = c;
    self->gen = atomic_load(&fork_gen);
    self->pid = (long)getpid();
    return 0;
}

static void Client_dealloc(ClientObject *self)
{
    if (self->weakrefs)
        PyObject_ClearWeakRefs((PyObject *)self);
    if (self->c && self->gen == atomic_load(&fork_gen)) {
        dlock_client *c = self->c;
        Py_BEGIN_ALLOW_THREADS
        dlock_client_close(c);
        Py_END_ALLOW_THREADS
    }
    self->c = NULL;
    Py_TYPE(self)->tp_free((PyObject *)self);
}

static PyObject *Client_close(ClientObject *self, PyObject *unused)
{
    (void)unused;
    if (!self->c)
        Py_RETURN_NONE; /* closing twice is fine */
    if (self->gen != atomic_load(&fork_gen))
        return client_usable(self) < 0 ? NULL : NULL;
    if (self->users > 0)
        return raise_code(DLOCK_EINVAL,
                          "the client is in use by another thread (waiting for a lock?): "
                          "cancel that first");
    dlock_client *c = self->c;
    self->c = NULL;
    self->closed = 1;
    Py_BEGIN_ALLOW_THREADS
    dlock_client_close(c);
    Py_END_ALLOW_THREADS
    Py_RETURN_NONE;
}

static PyObject *Client_get_url(ClientObject *self, void *unused)
{
    (void)unused;
    if (client_usable(self) < 0)
        return NULL;
    return PyUnicode_FromString(dlock_client_url(self->c));
}

static PyObject *Client_get_backend(ClientObject *self, void *unused)
{
    (void)unused;
    if (client_usable(self) < 0)
        return NULL;
    return PyUnicode_FromString(dlock_client_backend(self->c));
}

static PyObject *Client_get_caps(ClientObject *self, void *unused)
{
    (void)unused;
    if (client_usable(self) < 0)
        return NULL;
    return PyLong_FromUnsignedLong(dlock_client_caps(self->c));
}

static PyObject *Client_get_closed(ClientObject *self, void *unused)
{
    (void)unused;
    return PyBool_FromLong(self->c == NULL);
}

static PyObject *info_tuple(const dlock_info *in)
{
    return Py_BuildValue("(iiiKLLs)", in->held, in->holders, in->waiters,
                         (unsigned long long)in->token, in->held_ms, in->lease_ms, in->holder);
}

/* A copy of this thread's message on c, taken before the GIL is back. */
#define CLIENT_CALL(self, rc, msg, call)                                   \
    do {                                                                   \
        dlock_client *c_ = (self)->c;                                      \
        (self)->users++;                                                   \
        Py_BEGIN_ALLOW_THREADS                                             \
        rc = (call);                                                       \
        if (rc)                                                            \
            snprintf(msg, sizeof msg, "%s", dlock_client_errmsg(c_));      \
        Py_END_ALLOW_THREADS                                               \
        (self)->users--;                                                   \
    } while (0)

/* inspect and break: a name in, what the library knows of it out. */
static PyObject *client_info_call(ClientObject *self, PyObject *args, const char *format,
                                  int (*fn)(dlock_client *, const char *, dlock_info *))
{
    const char *name;
    if (!PyArg_ParseTuple(args, format, &name) || client_usable(self) < 0)
        return NULL;
    dlock_info in;
    memset(&in, 0, sizeof in);
    int rc;
    char msg[512] = "";
    CLIENT_CALL(self, rc, msg, fn(c_, name, &in));
    if (rc)
        return raise_code(rc, msg);
    return info_tuple(&in);
}

static PyObject *Client_inspect(ClientObject *self, PyObject *args)
{
    return client_info_call(self, args, "s:_inspect", dlock_inspect);
}

static PyObject *Client_break(ClientObject *self, PyObject *args)
{
    return client_info_call(self, args, "s:_break", dlock_break);
}

/* Client._claim_inspect(key): KEY's claim record as a tuple (state,
 * attempt, status, result, by, started_ms, finished_ms, fingerprint),
 * None when there is none (dlock_claim_inspect's DLOCK_ENOENT). */
static PyObject *Client_claim_inspect(ClientObject *self, PyObject *args)
{
    const char *key;
    if (!PyArg_ParseTuple(args, "s:_claim_inspect", &key) || client_usable(self) < 0)
        return NULL;
    dlock_claim *cl = NULL;
    int rc;
    char msg[512] = "";
    CLIENT_CALL(self, rc, msg, dlock_claim_inspect(c_, key, &cl));
    if (rc == DLOCK_ENOENT)
        Py_RETURN_NONE;
    if (rc)
        return raise_code(rc, msg);
    size_t n = 0;
    const char *res = dlock_claim_result(cl, &n);
    const char *by = dlock_claim_by(cl);
    PyObject *t = Py_BuildValue("(iIiy#NLLs)", (int)dlock_claim_state(cl),
                                dlock_claim_attempt(cl), dlock_claim_status(cl), res,
                                (Py_ssize_t)n,
                                PyUnicode_DecodeUTF8(by, (Py_ssize_t)strlen(by), "replace"),
                                dlock_claim_started_ms(cl), dlock_claim_finished_ms(cl),
                                dlock_claim_fingerprint(cl));
    dlock_claim_free(cl); /* a record read, no lock: frees without a round trip */
    return t;
}

/* Client._claim_forget(key): dlock_claim_forget; NotFound when there was none. */
static PyObject *Client_claim_forget(ClientObject *self, PyObject *args)
{
    const char *key;
    if (!PyArg_ParseTuple(args, "s:_claim_forget", &key) || client_usable(self) < 0)
        return NULL;
    int rc;
    char msg[512] = "";
    CLIENT_CALL(self, rc, msg, dlock_claim_forget(c_, key));
    if (rc)
        return raise_code(rc, msg);
    Py_RETURN_NONE;
}

static PyObject *Client_leader(ClientObject *self, PyObject *args)
{
    const char *name;
    if (!PyArg_ParseTuple(args, "s:leader", &name) || client_usable(self) < 0)
        return NULL;
    char buf[256] = "";
    int rc;
    char msg[512] = "";
    CLIENT_CALL(self, rc, msg, dlock_leader(c_, name, buf, sizeof buf));
    if (rc == DLOCK_ENOENT)
        Py_RETURN_NONE;
    if (rc)
        return raise_code(rc, msg);
    return PyUnicode_DecodeUTF8(buf, (Py_ssize_t)strlen(buf), "replace");
}

struct names {
    char **v;
    size_t n, cap;
    int oom;
};

static int collect_name(const char *name, void *arg)
{
    struct names *ns = arg;
    if (ns->n == ns->cap) {
        size_t cap = ns->cap ? ns->cap * 2 : 16;
        char **v = realloc(ns->v, cap * sizeof *v);
        if (!v) {
            ns->oom = 1;
            return 1;
        }
        ns->v = v;
        ns->cap = cap;
    }
    if (!(ns->v[ns->n] = strdup(name))) {
        ns->oom = 1;
        return 1;
    }
    ns->n++;
    return 0;
}

static PyObject *Client_list(ClientObject *self, PyObject *args, PyObject *kw)
{
    static char *kwlist[] = {"prefix", NULL};
    const char *prefix = NULL;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "|z:list", kwlist, &prefix) ||
        client_usable(self) < 0)
        return NULL;
    struct names ns = {0};
    int rc;
    char msg[512] = "";
    CLIENT_CALL(self, rc, msg, dlock_list(c_, prefix, collect_name, &ns));
    PyObject *out = NULL;
    if (ns.oom)
        PyErr_NoMemory();
    else if (rc)
        raise_code(rc, msg);
    else if ((out = PyList_New((Py_ssize_t)ns.n))) {
        for (size_t i = 0; i < ns.n; i++) {
            PyObject *s = PyUnicode_DecodeUTF8(ns.v[i], (Py_ssize_t)strlen(ns.v[i]), "replace");
            if (!s) {
                Py_CLEAR(out);
                break;
            }
            PyList_SET_ITEM(out, (Py_ssize_t)i, s);
        }
    }
    for (size_t i = 0; i < ns.n; i++)
        free(ns.v[i]);
    free(ns.v);
    return out;
}

/* ---- Lock ------------------------------------------------------------------ */

typedef struct {
    PyObject_HEAD
    dlock_lock *l;
    ClientObject *client;
    unsigned long gen;
    PyObject *name;
    PyObject *on_lost;    /* callable or NULL */
    PyObject *on_warn;    /* callable or NULL */
    PyObject *lost_event; /* threading.Event, made when first asked for */
    PyObject *timeout;    /* the default of `with` (None: forever) */
    PyObject *weakrefs;
    int busy;             /* a thread is in a call on this handle */
    atomic_int was_lost;  /* lost since the last acquisition (for `lost`) */
    atomic_int dying;
    int kind;
    unsigned permits;
} LockObject;

static PyTypeObject LockType;
static PyObject *threading_Event;

/* Call cb(self) from a library thread: the GIL taken here (the library
 * holds none of its mutexes then); an exception in cb is printed as an
 * unraisable one, never carried into the library. event: a
 * threading.Event to set first, or NULL. */
static void tell_python(LockObject *self, PyObject **cbp, PyObject **eventp)
{
    if (atomic_load(&self->dying) || atomic_load(&shutting_down) || is_finalizing())
        return;
    PyGILState_STATE g = PyGILState_Ensure();
    if (!atomic_load(&self->dying) && !atomic_load(&shutting_down)) {
        Py_INCREF(self);
        if (eventp && *eventp) {
            PyObject *ev = *eventp;
            Py_INCREF(ev);
            PyObject *r = PyObject_CallMethod(ev, "set", NULL);
            if (!r)
                PyErr_WriteUnraisable(ev);
            Py_XDECREF(r);
            Py_DECREF(ev);
        }
        if (*cbp) {
            PyObject *cb = *cbp;
            Py_INCREF(cb);
            PyObject *r = PyObject_CallOneArg(cb, (PyObject *)self);
            if (!r)
                PyErr_WriteUnraisable(cb);
            Py_XDECREF(r);
            Py_DECREF(cb);
        }
        Py_DECREF(self);
    }
    PyGILState_Release(g);
}

/* The library's loss callback, from one of its threads. */
static void lost_cb(dlock_lock *l, void *arg)
{
    (void)l;
    LockObject *self = arg;
    atomic_store(&self->was_lost, 1);
    tell_python(self, &self->on_lost, &self->lost_event);
}

/* The library's warning that the held lease may soon be lost (on_warn). */
static void warn_cb(dlock_lock *l, void *arg)
{
    (void)l;
    LockObject *self = arg;
    tell_python(self, &self->on_warn, NULL);
}

static int lock_usable(LockObject *self)
{
    if (!self->client || !self->l) {
        PyErr_SetString(PyExc_RuntimeError, "Lock was not initialised");
        return -1;
    }
    return client_usable(self->client);
}

/* Take the handle for one blocking call. */
static int lock_enter(LockObject *self)
{
    if (lock_usable(self) < 0)
        return -1;
    if (self->busy) {
        raise_code(DLOCK_EINVAL, "this lock handle is in use by another call (another thread, "
                                 "or an asynchronous acquisition): one call at a time per "
                                 "handle; cancel() is the exception");
        return -1;
    }
    self->busy = 1;
    self->client->users++;
    return 0;
}

static void lock_leave(LockObject *self)
{
    self->busy = 0;
    self->client->users--;
}

static PyObject *lock_raise(LockObject *self, int rc)
{
    return raise_code(rc, dlock_lock_errmsg(self->l));
}

/* After a successful acquisition: a new holding is not lost. */
static int lock_fresh(LockObject *self)
{
    if (dlock_held_count(self->l) == 1)
        atomic_store(&self->was_lost, 0);
    if (self->lost_event && dlock_held_count(self->l) == 1) {
        PyObject *r = PyObject_CallMethod(self->lost_event, "clear", NULL);
        if (!r)
            return -1;
        Py_DECREF(r);
    }
    return 0;
}

/* An optional duration in seconds (None: leave *ms_out as it is): > 0,
 * rounded up to whole milliseconds. */
static int seconds_opt(PyObject *o, const char *what, int *ms_out)
{
    if (o == Py_None)
        return 0;
    double s = PyFloat_AsDouble(o);
    if (s == -1.0 && PyErr_Occurred())
        return -1;
    if (!(s > 0) || s * 1000.0 > (double)INT_MAX) {
        PyErr_Format(PyExc_ValueError, "%s must be None or a number of seconds > 0", what);
        return -1;
    }
    *ms_out = (int)ceil(s * 1000.0);
    return 0;
}

static int Lock_init(LockObject *self, PyObject *args, PyObject *kw)
{
    static char *kwlist[] = {"client",   "name",     "ttl",     "fair",        "shared",
                             "permits",  "on_lost",  "timeout", "max_hold",    "min_hold",
                             "on_warn",  "warn_before", NULL};
    PyObject *client, *name, *ttl = Py_None, *fair = Py_None, *permits = Py_None;
    PyObject *on_lost = Py_None, *timeout = Py_None, *max_hold = Py_None, *min_hold = Py_None;
    PyObject *on_warn = Py_None, *warn_before = Py_None;
    int shared = 0;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "O!U|$OOpOOOOOOO:Lock", kwlist, &ClientType,
                                     &client, &name, &ttl, &fair, &shared, &permits, &on_lost,
                                     &timeout, &max_hold, &min_hold, &on_warn, &warn_before))
        return -1;
    if (self->l) {
        PyErr_SetString(PyExc_RuntimeError, "Lock is already initialised");
        return -1;
    }
    if (on_lost != Py_None && !PyCallable_Check(on_lost)) {
        PyErr_SetString(PyExc_TypeError, "on_lost must be callable (it gets the Lock)");
        return -1;
    }
    if (on_warn != Py_None && !PyCallable_Check(on_warn)) {
        PyErr_SetString(PyExc_TypeError, "on_warn must be callable (it gets the Lock)");
        return -1;
    }
    if (warn_before != Py_None && on_warn == Py_None) {
        PyErr_SetString(PyExc_ValueError, "warn_before needs on_warn");
        return -1;
    }
    int tmo;
    if (timeout_ms_of(timeout, &tmo) < 0)
        return -1;
    dlock_lock_opts o;
    dlock_lock_opts_init(&o);
    if (seconds_opt(ttl, "ttl", &o.ttl_ms) < 0 ||
        seconds_opt(max_hold, "max_hold", &o.max_hold_ms) < 0 ||
        seconds_opt(min_hold, "min_hold", &o.min_hold_ms) < 0 ||
        seconds_opt(warn_before, "warn_before", &o.warn_ms) < 0)
        return -1;
    if (fair == Py_None) {
        o.fair = -1;
    } else {
        int f = PyObject_IsTrue(fair);
        if (f < 0)
            return -1;
        o.fair = f;
    }
    if (permits != Py_None) {
        if (shared) {
            PyErr_SetString(PyExc_ValueError, "a lock is shared or a semaphore (permits), not both");
            return -1;
        }
        long p = PyLong_AsLong(permits);
        if (p == -1 && PyErr_Occurred())
            return -1;
        if (p < 1 || p > 4096) {
            PyErr_SetString(PyExc_ValueError, "permits must be between 1 and 4096");
            return -1;
        }
        o.kind = DLOCK_SEMAPHORE;
        o.permits = (unsigned)p;
    } else if (shared) {
        o.kind = DLOCK_SHARED;
    }
    o.on_lost = lost_cb;
    o.on_lost_arg = self;
    if (on_warn != Py_None) {
        o.on_warn = warn_cb;
        o.on_warn_arg = self;
    }
    ClientObject *cl = (ClientObject *)client;
    if (client_usable(cl) < 0)
        return -1;
    const char *cname = PyUnicode_AsUTF8(name);
    if (!cname)
        return -1;
    dlock_lock *l = NULL;
    int rc;
    char msg[512] = "";
    dlock_client *c = cl->c;
    rc = dlock_lock_new(&l, c, cname, &o);
    if (rc) {
        snprintf(msg, sizeof msg, "%s", dlock_client_errmsg(c));
        raise_code(rc, msg);
        return -1;
    }
    self->l = l;
    self->gen = cl->gen;
    self->kind = (int)o.kind;
    self->permits = o.kind == DLOCK_SEMAPHORE ? o.permits : 0;
    Py_INCREF(client);
    self->client = cl;
    Py_INCREF(name);
    self->name = name;
    if (on_lost != Py_None) {
        Py_INCREF(on_lost);
        self->on_lost = on_lost;
    }
    if (on_warn != Py_None) {
        Py_INCREF(on_warn);
        self->on_warn = on_warn;
    }
    Py_INCREF(timeout);
    self->timeout = timeout;
    return 0;
}

static int Lock_traverse(LockObject *self, visitproc visit, void *arg)
{
    Py_VISIT(self->client);
    Py_VISIT(self->on_lost);
    Py_VISIT(self->on_warn);
    Py_VISIT(self->lost_event);
    Py_VISIT(self->timeout);
    return 0;
}

static int Lock_clear(LockObject *self)
{
    Py_CLEAR(self->on_lost);
    Py_CLEAR(self->on_warn);
    Py_CLEAR(self->lost_event);
    Py_CLEAR(self->timeout);
    return 0;
}

static void Lock_dealloc(LockObject *self)
{
    PyTypeObject *tp = Py_TYPE(self);
    PyObject_GC_UnTrack(self);
    if (self->weakrefs)
        PyObject_ClearWeakRefs((PyObject *)self);
    atomic_store(&self->dying, 1);
    Lock_clear(self);
    if (self->l) {
        dlock_lock *l = self->l;
        self->l = NULL;
        if (self->gen == atomic_load(&fork_gen)) {
            /* releases if held; waits for a loss being told (whose callback
             * needs the GIL, and sees `dying`) */
            Py_BEGIN_ALLOW_THREADS
            dlock_lock_free(l);
            Py_END_ALLOW_THREADS
        } /* else: a forked child's copy of its parent's handle: leave it */
    }
    Py_CLEAR(self->client);
    Py_CLEAR(self->name);
    /* (a Python subclass's instance: subtype_dealloc drops the type) */
    tp->tp_free((PyObject *)self);
}

static PyObject *Lock_acquire(LockObject *self, PyObject *args, PyObject *kw)
{
    static char *kwlist[] = {"timeout", NULL};
    PyObject *timeout = NULL;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "|O:acquire", kwlist, &timeout))
        return NULL;
    int tmo;
    if (timeout_ms_of(timeout ? timeout : self->timeout, &tmo) < 0)
        return NULL;
    if (lock_enter(self) < 0)
        return NULL;
    int rc;
    if (tmo == 0 || !on_main_thread()) {
        dlock_lock *l = self->l;
        Py_BEGIN_ALLOW_THREADS
        rc = dlock_acquire(l, tmo);
        Py_END_ALLOW_THREADS
    } else {
        rc = acquire_main(self->l, tmo);
        if (rc == 1) {
            lock_leave(self);
            return NULL;
        }
    }
    lock_leave(self);
    if (rc)
        return lock_raise(self, rc);
    if (lock_fresh(self) < 0)
        return NULL;
    Py_RETURN_TRUE;
}

static PyObject *Lock_campaign(LockObject *self, PyObject *args)
{
    const char *value;
    PyObject *timeout;
    if (!PyArg_ParseTuple(args, "sO:_campaign", &value, &timeout))
        return NULL;
    if (strlen(value) > 255) {
        PyErr_SetString(PyExc_ValueError, "the leader's value is at most 255 bytes");
        return NULL;
    }
    int tmo;
    if (timeout_ms_of(timeout, &tmo) < 0 || lock_enter(self) < 0)
        return NULL;
    job j;
    if (job_init(&j, JOB_CAMPAIGN, tmo) < 0) {
        lock_leave(self);
        return NULL;
    }
    j.one = self->l;
    snprintf(j.value, sizeof j.value, "%s", value);
    int rc;
    if (tmo == 0 || !on_main_thread()) {
        Py_BEGIN_ALLOW_THREADS
        job_run(&j);
        Py_END_ALLOW_THREADS
    } else if (job_wait(&j) < 0) {
        close(j.done_fd);
        lock_leave(self);
        return NULL;
    }
    close(j.done_fd);
    rc = j.rc;
    lock_leave(self);
    if (rc)
        return lock_raise(self, rc);
    if (lock_fresh(self) < 0)
        return NULL;
    Py_RETURN_NONE;
}

#define LOCK_SIMPLE_CALL(name, call)                                       \
    static PyObject *name(LockObject *self, PyObject *unused)              \
    {                                                                      \
        (void)unused;                                                      \
        if (lock_enter(self) < 0)                                          \
            return NULL;                                                   \
        dlock_lock *l = self->l;                                           \
        int rc;                                                            \
        Py_BEGIN_ALLOW_THREADS                                             \
        rc = call(l);                                                      \
        Py_END_ALLOW_THREADS                                               \
        lock_leave(self);                                                  \
        if (rc)                                                            \
            return lock_raise(self, rc);                                   \
        Py_RETURN_NONE;                                                    \
    }

LOCK_SIMPLE_CALL(Lock_release, dlock_release)
LOCK_SIMPLE_CALL(Lock_resign, dlock_resign)
LOCK_SIMPLE_CALL(Lock_force_loss, dlock_debug_force_loss)

static PyObject *Lock_cancel(LockObject *self, PyObject *unused)
{
    (void)unused;
    if (lock_usable(self) < 0)
        return NULL;
    dlock_cancel(self->l);
    Py_RETURN_NONE;
}

static PyObject *Lock_fileno(LockObject *self, PyObject *unused)
{
    (void)unused;
    if (lock_usable(self) < 0)
        return NULL;
    int fd = dlock_lost_fd(self->l);
    if (fd < 0)
        return lock_raise(self, DLOCK_EIO);
    return PyLong_FromLong(fd);
}

static PyObject *Lock_get_token(LockObject *self, void *unused)
{
    (void)unused;
    if (lock_usable(self) < 0)
        return NULL;
    return PyLong_FromUnsignedLongLong(dlock_token(self->l));
}

static PyObject *Lock_get_state_code(LockObject *self, void *unused)
{
    (void)unused;
    if (lock_usable(self) < 0)
        return NULL;
    return PyLong_FromLong((long)dlock_state(self->l));
}

static PyObject *Lock_get_held(LockObject *self, void *unused)
{
    (void)unused;
    if (lock_usable(self) < 0)
        return NULL;
    return PyBool_FromLong(dlock_state(self->l) == DLOCK_STATE_HELD);
}

static PyObject *Lock_get_count(LockObject *self, void *unused)
{
    (void)unused;
    if (lock_usable(self) < 0)
        return NULL;
    return PyLong_FromUnsignedLong(dlock_held_count(self->l));
}

static PyObject *Lock_get_valid_ms(LockObject *self, void *unused)
{
    (void)unused;
    if (lock_usable(self) < 0)
        return NULL;
    return PyLong_FromLongLong(dlock_valid_ms(self->l));
}

static PyObject *Lock_get_lost(LockObject *self, void *unused)
{
    (void)unused;
    if (!self->lost_event) {
        if (lock_usable(self) < 0)
            return NULL;
        PyObject *ev = PyObject_CallNoArgs(threading_Event);
        if (!ev)
            return NULL;
        self->lost_event = ev;
        /* a loss told before the event existed */
        if (atomic_load(&self->was_lost) || dlock_state(self->l) == DLOCK_STATE_LOST) {
            PyObject *r = PyObject_CallMethod(ev, "set", NULL);
            if (!r)
                return NULL;
            Py_DECREF(r);
        }
    }
    Py_INCREF(self->lost_event);
    return self->lost_event;
}

static PyObject *Lock_get_kind_code(LockObject *self, void *unused)
{
    (void)unused;
    return Py_BuildValue("(iI)", self->kind, self->permits);
}

static PyMemberDef Lock_members[] = {
    {"name", T_OBJECT, offsetof(LockObject, name), READONLY, "The lock's name."},
    {"client", T_OBJECT, offsetof(LockObject, client), READONLY,
     "The Client this lock was made from."},
    {"on_lost", T_OBJECT, offsetof(LockObject, on_lost), READONLY,
     "The loss callback given to client.lock() (None if none)."},
    {"on_warn", T_OBJECT, offsetof(LockObject, on_warn), READONLY,
     "The warning callback given to client.lock() (None if none)."},
    {"timeout", T_OBJECT, offsetof(LockObject, timeout), READONLY,
     "The timeout `with` uses (None: wait for ever)."},
    {NULL, 0, 0, 0, NULL},
};

/* ---- _Wait: an acquisition in the background (asyncio) ---------------------- */

struct ClaimObject;

typedef struct {
    PyObject_HEAD
    job j;
    LockObject *lock;
    int started, finished;
    struct ClaimObject *co; /* JOB_CLAIM: made before the call, filled by finish() */
    PyObject *fp_ref;       /* JOB_CLAIM: keeps j.claim_opts.fingerprint alive */
} WaitObject;

static PyTypeObject WaitType;

static struct ClaimObject *claim_alloc(void);
static PyObject *claim_wrap(struct ClaimObject *co, LockObject *lock, dlock_claim *cl);

/* A _Wait for op on this handle, not yet running (the handle entered). */
static WaitObject *wait_new(LockObject *self, int op, int tmo)
{
    if (lock_enter(self) < 0)
        return NULL;
    WaitObject *w = PyObject_New(WaitObject, &WaitType);
    if (!w) {
        lock_leave(self);
        return NULL;
    }
    w->started = w->finished = 0;
    w->lock = NULL;
    w->co = NULL;
    w->fp_ref = NULL;
    if (job_init(&w->j, op, tmo) < 0) {
        w->j.done_fd = -1;
        lock_leave(self);
        Py_DECREF(w);
        return NULL;
    }
    w->j.one = self->l;
    Py_INCREF(self);
    w->lock = self;
    return w;
}

/* Run w's job on the pool; w itself, or NULL (w freed: the handle left). */
static PyObject *wait_submit(WaitObject *w)
{
    int err = pool_submit(&w->j);
    if (err) {
        errno = err;
        PyErr_SetFromErrno(PyExc_OSError);
        Py_DECREF(w); /* leaves the handle */
        return NULL;
    }
    w->started = 1;
    return (PyObject *)w;
}

static PyObject *Lock_start(LockObject *self, PyObject *args)
{
    PyObject *timeout = Py_None;
    if (!PyArg_ParseTuple(args, "|O:_start", &timeout))
        return NULL;
    int tmo;
    if (timeout_ms_of(timeout, &tmo) < 0)
        return NULL;
    WaitObject *w = wait_new(self, JOB_ACQUIRE, tmo);
    return w ? wait_submit(w) : NULL;
}

static PyObject *Wait_fileno(WaitObject *self, PyObject *unused)
{
    (void)unused;
    return PyLong_FromLong(self->j.done_fd);
}

static PyObject *Wait_done(WaitObject *self, PyObject *unused)
{
    (void)unused;
    return PyBool_FromLong(!self->started || atomic_load(&self->j.done));
}

static PyObject *Wait_cancel(WaitObject *self, PyObject *unused)
{
    (void)unused;
    if (self->started && !atomic_load(&self->j.done))
        job_cancel(&self->j);
    Py_RETURN_NONE;
}

/* The end of the acquisition: blocks (without the GIL) until it returned;
 * raises as acquire() does (a claim's: as _claim_begin, returning the
 * _Claim). undo=True: give back what it took (an attempt it began is
 * abandoned). */
static PyObject *Wait_finish(WaitObject *self, PyObject *args, PyObject *kw)
{
    static char *kwlist[] = {"undo", NULL};
    int undo = 0;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "|p:finish", kwlist, &undo))
        return NULL;
    if (self->finished || !self->lock)
        return raise_code(DLOCK_EINVAL, "this acquisition was already finished");
    if (self->started) {
        job *j = &self->j;
        Py_BEGIN_ALLOW_THREADS
        if (undo) {
            job_cancel_wait(j);
            job_undo(j);
        } else {
            struct pollfd p = {.fd = j->done_fd, .events = POLLIN};
            while (!atomic_load(&j->done))
                (void)poll(&p, 1, 1000);
        }
        Py_END_ALLOW_THREADS
    }
    self->finished = 1;
    LockObject *lk = self->lock;
    lock_leave(lk);
    int rc = self->j.rc;
    if (undo)
        Py_RETURN_NONE;
    if (rc)
        return lock_raise(lk, rc);
    if (self->j.op == JOB_CLAIM) {
        struct ClaimObject *co = self->co;
        dlock_claim *cl = self->j.claim;
        self->co = NULL;
        self->j.claim = NULL;
        return claim_wrap(co, lk, cl);
    }
    if (lock_fresh(lk) < 0)
        return NULL;
    Py_RETURN_NONE;
}

static void Wait_dealloc(WaitObject *self)
{
    if (self->lock) {
        if (self->started && !self->finished) {
            /* abandoned: nobody will use what it takes */
            job *j = &self->j;
            Py_BEGIN_ALLOW_THREADS
            job_cancel_wait(j);
            job_undo(j);
            Py_END_ALLOW_THREADS
        }
        if (!self->finished)
            lock_leave(self->lock);
        Py_CLEAR(self->lock);
    }
    Py_XDECREF((PyObject *)self->co); /* unused: holds no claim */
    Py_CLEAR(self->fp_ref);          /* after the call has returned */
    if (self->j.done_fd >= 0)
        close(self->j.done_fd);
    PyObject_Free(self);
}

static PyMethodDef Wait_methods[] = {
    {"fileno", (PyCFunction)Wait_fileno, METH_NOARGS,
     "A descriptor that becomes readable when the acquisition has returned."},
    {"done", (PyCFunction)Wait_done, METH_NOARGS, "True once the acquisition has returned."},
    {"cancel", (PyCFunction)Wait_cancel, METH_NOARGS,
     "Ask the acquisition to stop waiting (dlock_cancel); it then ends with Cancelled."},
    {"finish", (PyCFunction)(void (*)(void))Wait_finish, METH_VARARGS | METH_KEYWORDS,
     "finish(undo=False): wait until it has returned; raise as acquire() does. "
     "undo=True cancels it and gives back anything it took."},
    {NULL, NULL, 0, NULL},
};

static PyTypeObject WaitType = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "dlock._dlock._Wait",
    .tp_basicsize = sizeof(WaitObject),
    .tp_dealloc = (destructor)Wait_dealloc,
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "An acquisition running on a worker thread (for asyncio): made by Lock._start().",
    .tp_methods = Wait_methods,
};

/* ---- _Claim: work that must happen once (dlock_claim_*) ------------------------ */

typedef struct ClaimObject {
    PyObject_HEAD
    dlock_claim *cl;
    LockObject *lock; /* the handle the claim runs on */
    int open;         /* begun in state RUN, neither finished nor abandoned */
} ClaimObject;

static PyTypeObject ClaimType;

/* An empty _Claim, made before dlock_claim_begin: once a claim has begun,
 * nothing but lock_fresh can fail. */
static ClaimObject *claim_alloc(void)
{
    ClaimObject *co = PyObject_New(ClaimObject, &ClaimType);
    if (co) {
        co->cl = NULL;
        co->lock = NULL;
        co->open = 0;
    }
    return co;
}

/* co (stolen) holding cl, begun on lock; NULL if lock_fresh failed (co and
 * cl freed: the next caller runs attempt N+1). */
static PyObject *claim_wrap(ClaimObject *co, LockObject *lock, dlock_claim *cl)
{
    co->cl = cl;
    co->open = dlock_claim_state(cl) == DLOCK_CLAIM_RUN;
    Py_INCREF(lock);
    co->lock = lock;
    if (co->open && lock_fresh(lock) < 0) {
        Py_DECREF(co);
        return NULL;
    }
    return (PyObject *)co;
}

/* The options of dlock_claim_begin into j: retain seconds or None (a
 * day); fingerprint NULL (none) or a string the caller keeps alive. */
static int claim_opts_set(job *j, PyObject *retain, int retry_failed, const char *fingerprint)
{
    dlock_claim_opts_init(&j->claim_opts);
    j->claim_opts.retry_failed = retry_failed;
    j->claim_opts.fingerprint = fingerprint;
    if (retain != Py_None) {
        double s = PyFloat_AsDouble(retain);
        if (s == -1.0 && PyErr_Occurred())
            return -1;
        if (!(s > 0) || s > 1e12) {
            PyErr_SetString(PyExc_ValueError, "keep must be None or a number of seconds > 0");
            return -1;
        }
        j->claim_opts.retain_ms = (long long)ceil(s * 1000.0);
    }
    return 0;
}

/* Lock._claim_begin(retain, retry_failed, fingerprint, timeout) -> _Claim:
 * dlock_claim_begin on this (idle, exclusive) handle. retain: seconds or
 * None (a day). A wait from the main thread runs on the pool: Ctrl-C
 * cancels it and abandons an attempt it had begun. */
static PyObject *Lock_claim_begin(LockObject *self, PyObject *args)
{
    PyObject *retain, *timeout;
    int retry_failed;
    const char *fingerprint;
    if (!PyArg_ParseTuple(args, "OpzO:_claim_begin", &retain, &retry_failed, &fingerprint,
                          &timeout))
        return NULL;
    int tmo;
    if (timeout_ms_of(timeout, &tmo) < 0)
        return NULL;
    job j;
    if (job_init(&j, JOB_CLAIM, tmo) < 0)
        return NULL;
    /* args keeps the fingerprint alive */
    if (claim_opts_set(&j, retain, retry_failed, fingerprint) < 0)
        goto fail_fd;
    ClaimObject *co = claim_alloc();
    if (!co)
        goto fail_fd;
    if (lock_enter(self) < 0) {
        Py_DECREF(co);
        goto fail_fd;
    }
    j.one = self->l;
    if (tmo == 0 || !on_main_thread()) {
        Py_BEGIN_ALLOW_THREADS
        job_run(&j);
        Py_END_ALLOW_THREADS
    } else if (job_wait(&j) < 0) {
        lock_leave(self);
        Py_DECREF(co);
        goto fail_fd;
    }
    close(j.done_fd);
    lock_leave(self);
    if (j.rc) {
        Py_DECREF(co);
        return lock_raise(self, j.rc);
    }
    return claim_wrap(co, self, j.claim);
fail_fd:
    close(j.done_fd);
    return NULL;
}

/* Lock._start_claim(retain, retry_failed, fingerprint, timeout) -> _Wait:
 * dlock_claim_begin on a worker (asyncio); its finish() returns the _Claim. */
static PyObject *Lock_start_claim(LockObject *self, PyObject *args)
{
    PyObject *retain, *fp, *timeout;
    int retry_failed;
    if (!PyArg_ParseTuple(args, "OpOO:_start_claim", &retain, &retry_failed, &fp, &timeout))
        return NULL;
    const char *fingerprint = NULL;
    if (fp != Py_None) {
        Py_ssize_t n;
        if (!PyUnicode_Check(fp)) {
            PyErr_Format(PyExc_TypeError, "fingerprint must be a str or None, not %s",
                         Py_TYPE(fp)->tp_name);
            return NULL;
        }
        if (!(fingerprint = PyUnicode_AsUTF8AndSize(fp, &n)))
            return NULL;
        if (strlen(fingerprint) != (size_t)n) { /* as _claim_begin's "z" */
            PyErr_SetString(PyExc_ValueError, "fingerprint contains a NUL character");
            return NULL;
        }
    }
    int tmo;
    if (timeout_ms_of(timeout, &tmo) < 0)
        return NULL;
    WaitObject *w = wait_new(self, JOB_CLAIM, tmo);
    if (!w)
        return NULL;
    if (claim_opts_set(&w->j, retain, retry_failed, fingerprint) < 0 ||
        !(w->co = claim_alloc())) {
        Py_DECREF(w); /* not started: leaves the handle */
        return NULL;
    }
    Py_INCREF(fp);
    w->fp_ref = fp;
    return wait_submit(w);
}

static int claim_enter(ClaimObject *self)
{
    if (!self->cl || !self->lock) {
        PyErr_SetString(PyExc_RuntimeError, "_Claim was not begun");
        return -1;
    }
    if (!self->open) {
        raise_code(DLOCK_EINVAL, "this claim is not running here (it was replayed, finished "
                                 "or abandoned)");
        return -1;
    }
    return lock_enter(self->lock);
}

static PyObject *Claim_finish(ClaimObject *self, PyObject *args, PyObject *kw)
{
    static char *kwlist[] = {"result", "status", NULL};
    Py_buffer buf = {0};
    int status = 0;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "|y*i:finish", kwlist, &buf, &status))
        return NULL;
    if (buf.len > DLOCK_CLAIM_RESULT_MAX) {
        PyErr_Format(PyExc_ValueError, "a claim's result is at most %d bytes, not %zd",
                     DLOCK_CLAIM_RESULT_MAX, buf.len);
        PyBuffer_Release(&buf);
        return NULL;
    }
    if (claim_enter(self) < 0) {
        PyBuffer_Release(&buf);
        return NULL;
    }
    dlock_claim *cl = self->cl;
    const void *p = buf.len ? buf.buf : NULL;
    size_t n = (size_t)buf.len;
    int rc;
    Py_BEGIN_ALLOW_THREADS
    rc = dlock_claim_finish(cl, status, p, n);
    Py_END_ALLOW_THREADS
    self->open = 0; /* finished or not, it is over here (dlock.h) */
    lock_leave(self->lock);
    PyBuffer_Release(&buf);
    if (rc)
        return lock_raise(self->lock, rc);
    Py_RETURN_NONE;
}

static PyObject *Claim_abandon(ClaimObject *self, PyObject *unused)
{
    (void)unused;
    if (claim_enter(self) < 0)
        return NULL;
    dlock_claim *cl = self->cl;
    int rc;
    Py_BEGIN_ALLOW_THREADS
    rc = dlock_claim_abandon(cl);
    Py_END_ALLOW_THREADS
    self->open = 0;
    lock_leave(self->lock);
    if (rc)
        return lock_raise(self->lock, rc);
    Py_RETURN_NONE;
}

static void Claim_dealloc(ClaimObject *self)
{
    if (self->cl) {
        dlock_claim *cl = self->cl;
        self->cl = NULL;
        if (self->lock && self->lock->gen == atomic_load(&fork_gen)) {
            /* one still running is left as a crash leaves it (released;
             * the next caller runs attempt N+1) */
            Py_BEGIN_ALLOW_THREADS
            dlock_claim_free(cl);
            Py_END_ALLOW_THREADS
        } /* else a forked child's copy: its parent's to free */
    }
    Py_CLEAR(self->lock);
    PyObject_Free(self);
}

#define CLAIM_GETTER(fname, expr)                                          \
    static PyObject *fname(ClaimObject *self, void *unused)                \
    {                                                                      \
        (void)unused;                                                      \
        if (!self->cl) {                                                   \
            PyErr_SetString(PyExc_RuntimeError, "_Claim was not begun");   \
            return NULL;                                                   \
        }                                                                  \
        const dlock_claim *cl = self->cl;                                  \
        return expr;                                                       \
    }

CLAIM_GETTER(Claim_get_state_code, PyLong_FromLong((long)dlock_claim_state(cl)))
CLAIM_GETTER(Claim_get_attempt, PyLong_FromUnsignedLong(dlock_claim_attempt(cl)))
CLAIM_GETTER(Claim_get_status, PyLong_FromLong(dlock_claim_status(cl)))
CLAIM_GETTER(Claim_get_started_ms, PyLong_FromLongLong(dlock_claim_started_ms(cl)))
CLAIM_GETTER(Claim_get_finished_ms, PyLong_FromLongLong(dlock_claim_finished_ms(cl)))
CLAIM_GETTER(Claim_get_by, PyUnicode_DecodeUTF8(dlock_claim_by(cl),
                                                (Py_ssize_t)strlen(dlock_claim_by(cl)),
                                                "replace"))
CLAIM_GETTER(Claim_get_fingerprint, PyUnicode_FromString(dlock_claim_fingerprint(cl)))

static PyObject *Claim_get_result(ClaimObject *self, void *unused)
{
    (void)unused;
    if (!self->cl) {
        PyErr_SetString(PyExc_RuntimeError, "_Claim was not begun");
        return NULL;
    }
    size_t n = 0;
    const char *r = dlock_claim_result(self->cl, &n);
    return PyBytes_FromStringAndSize(r, (Py_ssize_t)n);
}

static PyObject *Claim_get_open(ClaimObject *self, void *unused)
{
    (void)unused;
    return PyBool_FromLong(self->open);
}

static PyMethodDef Claim_methods[] = {
    {"finish", (PyCFunction)(void (*)(void))Claim_finish, METH_VARARGS | METH_KEYWORDS,
     "finish($self, /, result=b'', status=0)\n--\n\nRecord the outcome (result: at most 65536 "
     "bytes; status: 0 for success) and release the lock. Lost (nothing recorded) if the lock "
     "was lost meanwhile or another runner started."},
    {"abandon", (PyCFunction)Claim_abandon, METH_NOARGS,
     "abandon($self, /)\n--\n\nGive the claim up without an outcome: the next caller runs it "
     "as the next attempt. Lost as finish()."},
    {NULL, NULL, 0, NULL},
};

static PyGetSetDef Claim_getset[] = {
    {"state_code", (getter)Claim_get_state_code, NULL, "dlock_claim_state() as an int.", NULL},
    {"attempt", (getter)Claim_get_attempt, NULL,
     "The attempt number: this run's (1 the first) while running, else the recorded one.",
     NULL},
    {"status", (getter)Claim_get_status, NULL, "The recorded status (0 unless finished).", NULL},
    {"result", (getter)Claim_get_result, NULL, "The recorded result (b'' unless finished).",
     NULL},
    {"by", (getter)Claim_get_by, NULL, "Who ran it (\"pid 123 on host\").", NULL},
    {"started_ms", (getter)Claim_get_started_ms, NULL,
     "When its run started, ms since the epoch (0 unknown).", NULL},
    {"finished_ms", (getter)Claim_get_finished_ms, NULL,
     "When it finished, ms since the epoch (0 not finished).", NULL},
    {"fingerprint", (getter)Claim_get_fingerprint, NULL, "The recorded fingerprint (\"\" none).",
     NULL},
    {"open", (getter)Claim_get_open, NULL,
     "True while this caller runs it (neither finished nor abandoned).", NULL},
    {NULL, NULL, NULL, NULL, NULL},
};

static PyMemberDef Claim_members[] = {
    {"lock", T_OBJECT, offsetof(ClaimObject, lock), READONLY,
     "The Lock the claim runs under (held while open)."},
    {NULL, 0, 0, 0, NULL},
};

static PyTypeObject ClaimType = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "dlock._dlock._Claim",
    .tp_basicsize = sizeof(ClaimObject),
    .tp_dealloc = (destructor)Claim_dealloc,
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "A begun claim (dlock_claim): made by Lock._claim_begin().",
    .tp_methods = Claim_methods,
    .tp_getset = Claim_getset,
    .tp_members = Claim_members,
};

/* ---- acquire_all ---------------------------------------------------------- */

/* locks: a sequence of Lock objects of usable clients. */
static PyObject *mod_acquire_all(PyObject *mod, PyObject *args)
{
    (void)mod;
    PyObject *seq, *timeout;
    if (!PyArg_ParseTuple(args, "OO:_acquire_all", &seq, &timeout))
        return NULL;
    int tmo;
    if (timeout_ms_of(timeout, &tmo) < 0)
        return NULL;
    PyObject *fast = PySequence_Fast(seq, "acquire_all wants a sequence of Locks");
    if (!fast)
        return NULL;
    Py_ssize_t n = PySequence_Fast_GET_SIZE(fast);
    if (n == 0) {
        Py_DECREF(fast);
        Py_RETURN_NONE;
    }
    PyObject **items = PySequence_Fast_ITEMS(fast);
    job j;
    if (job_init(&j, JOB_ACQUIRE_ALL, tmo) < 0) {
        Py_DECREF(fast);
        return NULL;
    }
    j.locks = PyMem_Calloc((size_t)n, sizeof *j.locks);
    j.n = (size_t)n;
    Py_ssize_t entered = 0;
    PyObject *ret = NULL;
    if (!j.locks) {
        PyErr_NoMemory();
        goto out;
    }
    for (; entered < n; entered++) {
        if (!PyObject_TypeCheck(items[entered], &LockType)) {
            PyErr_SetString(PyExc_TypeError, "acquire_all wants Lock objects");
            goto out;
        }
        LockObject *lk = (LockObject *)items[entered];
        for (Py_ssize_t k = 0; k < entered; k++)
            if (items[k] == items[entered]) {
                raise_code(DLOCK_EINVAL, "one Lock appears twice in acquire_all");
                goto out;
            }
        if (lock_enter(lk) < 0)
            goto out;
        j.locks[entered] = lk->l;
    }
    int rc;
    if (tmo == 0 || !on_main_thread()) {
        Py_BEGIN_ALLOW_THREADS
        job_run(&j);
        Py_END_ALLOW_THREADS
    } else if (job_wait(&j) < 0) {
        goto out;
    }
    rc = j.rc;
    if (rc) {
        raise_code(rc, dlock_lock_errmsg(j.locks[0]));
        goto out;
    }
    for (Py_ssize_t i = 0; i < n; i++)
        if (lock_fresh((LockObject *)items[i]) < 0)
            goto out;
    ret = Py_None;
    Py_INCREF(ret);
out:
    for (Py_ssize_t i = 0; i < entered; i++)
        lock_leave((LockObject *)items[i]);
    PyMem_Free(j.locks);
    close(j.done_fd);
    Py_DECREF(fast);
    return ret;
}

/* ---- module functions -------------------------------------------------------- */

static PyObject *mod_backends(PyObject *mod, PyObject *unused)
{
    (void)mod;
    (void)unused;
    size_t n = dlock_backend_count();
    PyObject *out = PyList_New(0);
    if (!out)
        return NULL;
    for (size_t i = 0; i < n; i++) {
        const dlock_backend_info *b = dlock_backend_at(i);
        if (!b)
            break;
        PyObject *t = Py_BuildValue("(ssIizzz)", b->name, b->schemes ? b->schemes : "", b->caps,
                                    b->available, b->missing, b->liveness, b->fencing);
        if (!t || PyList_Append(out, t) < 0) {
            Py_XDECREF(t);
            Py_DECREF(out);
            return NULL;
        }
        Py_DECREF(t);
    }
    return out;
}

static PyObject *mod_version(PyObject *mod, PyObject *unused)
{
    (void)mod;
    (void)unused;
    return PyUnicode_FromString(dlock_version());
}

static PyObject *mod_name_valid(PyObject *mod, PyObject *args)
{
    (void)mod;
    const char *name;
    if (!PyArg_ParseTuple(args, "s:name_error", &name))
        return NULL;
    char why[256] = "";
    if (dlock_name_valid(name, why, sizeof why) == 0)
        Py_RETURN_NONE;
    return PyUnicode_FromString(why);
}

static PyObject *mod_shutdown(PyObject *mod, PyObject *unused)
{
    (void)mod;
    (void)unused;
    atomic_store(&shutting_down, 1);
    Py_RETURN_NONE;
}

static PyObject *mod_fork_generation(PyObject *mod, PyObject *unused)
{
    (void)mod;
    (void)unused;
    return PyLong_FromUnsignedLong(atomic_load(&fork_gen));
}

static PyMethodDef mod_methods[] = {
    {"backends", mod_backends, METH_NOARGS,
     "The registry: (name, schemes, caps, available, missing, liveness, fencing) tuples."},
    {"version", mod_version, METH_NOARGS, "libdlock's version string at run time."},
    {"name_error", mod_name_valid, METH_VARARGS,
     "name_error(name): None if name is a valid lock name, else why not."},
    {"_acquire_all", mod_acquire_all, METH_VARARGS,
     "_acquire_all(locks, timeout): dlock_acquire_all over Lock objects."},
    {"_shutdown", mod_shutdown, METH_NOARGS,
     "At interpreter exit: loss callbacks stop entering Python."},
    {"_fork_generation", mod_fork_generation, METH_NOARGS,
     "How many forks this process is from the one that loaded the module."},
    {NULL, NULL, 0, NULL},
};

/* ---- type tables ------------------------------------------------------------ */

static PyMethodDef Client_methods[] = {
    {"close", (PyCFunction)Client_close, METH_NOARGS,
     "close($self, /)\n--\n\nRelease every lock held through this client and close it. Closing a closed "
     "client does nothing."},
    {"_inspect", (PyCFunction)Client_inspect, METH_VARARGS, "dlock_inspect: an info tuple."},
    {"_break", (PyCFunction)Client_break, METH_VARARGS, "dlock_break: an info tuple."},
    {"_claim_inspect", (PyCFunction)Client_claim_inspect, METH_VARARGS,
     "dlock_claim_inspect: a record tuple, or None when there is none."},
    {"_claim_forget", (PyCFunction)Client_claim_forget, METH_VARARGS,
     "dlock_claim_forget (NotFound when there was none)."},
    {"leader", (PyCFunction)Client_leader, METH_VARARGS,
     "leader($self, name, /)\n--\n\nThe value the current leader of NAME published (None when "
     "there is no leader)."},
    {"list", (PyCFunction)(void (*)(void))Client_list, METH_VARARGS | METH_KEYWORDS,
     "list($self, /, prefix=None)\n--\n\nThe lock names the backend knows, starting with prefix."},
    {NULL, NULL, 0, NULL},
};

static PyGetSetDef Client_getset[] = {
    {"url", (getter)Client_get_url, NULL, "The backend URL, any password shown as ***.", NULL},
    {"backend", (getter)Client_get_backend, NULL, "The backend's name (\"file\", \"redis\", ...).",
     NULL},
    {"caps_code", (getter)Client_get_caps, NULL, "The DLOCK_CAP_* bits this client offers.", NULL},
    {"closed", (getter)Client_get_closed, NULL, "True once close() was called.", NULL},
    {NULL, NULL, NULL, NULL, NULL},
};

static PyMemberDef Client_members[] = {
    {"pid", T_LONG, offsetof(ClientObject, pid), READONLY,
     "The process that opened this client."},
    {NULL, 0, 0, 0, NULL},
};

static PyTypeObject ClientType = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "dlock._dlock.Client",
    .tp_basicsize = sizeof(ClientObject),
    .tp_dealloc = (destructor)Client_dealloc,
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_BASETYPE,
    .tp_weaklistoffset = offsetof(ClientObject, weakrefs),
    .tp_doc = "Client(url=None, *, connect_timeout=None, op_timeout=None): a connection to "
              "one backend (the C layer of dlock.Client).",
    .tp_methods = Client_methods,
    .tp_getset = Client_getset,
    .tp_members = Client_members,
    .tp_init = (initproc)Client_init,
    .tp_new = PyType_GenericNew,
};

static PyMethodDef Lock_methods[] = {
    {"acquire", (PyCFunction)(void (*)(void))Lock_acquire, METH_VARARGS | METH_KEYWORDS,
     "acquire($self, /, timeout=...)\n--\n\nTake the lock; returns True. timeout None waits for ever, 0 "
     "tries once (Busy if held elsewhere), seconds wait at most that long (Timeout). "
     "Re-acquiring a held handle counts one more re-entry and keeps the token. Ctrl-C while "
     "waiting cancels the wait at once and leaves nothing held."},
    {"release", (PyCFunction)Lock_release, METH_NOARGS,
     "release($self, /)\n--\n\nCount one re-entry down; give the lock back at zero. Raises Lost if the lock "
     "was lost while held (the handle is then idle), NotHeld if it is not held."},
    {"cancel", (PyCFunction)Lock_cancel, METH_NOARGS,
     "cancel($self, /)\n--\n\nMake a waiting acquire() on this handle raise Cancelled (from any thread)."},
    {"fileno", (PyCFunction)Lock_fileno, METH_NOARGS,
     "fileno($self, /)\n--\n\nA descriptor that becomes readable when the held lock is lost (for "
     "select, selectors and event loops). Owned by the lock: do not close it."},
    {"resign", (PyCFunction)Lock_resign, METH_NOARGS,
     "resign($self, /)\n--\n\nGive leadership up (after Client.campaign())."},
    {"_campaign", (PyCFunction)Lock_campaign, METH_VARARGS, "dlock_campaign(value, timeout)."},
    {"_claim_begin", (PyCFunction)Lock_claim_begin, METH_VARARGS,
     "_claim_begin(keep, retry_failed, fingerprint, timeout) -> _Claim (dlock_claim_begin)."},
    {"_start_claim", (PyCFunction)Lock_start_claim, METH_VARARGS,
     "_start_claim(keep, retry_failed, fingerprint, timeout) -> _Wait: dlock_claim_begin on a "
     "worker thread (asyncio); its finish() returns the _Claim."},
    {"_start", (PyCFunction)Lock_start, METH_VARARGS,
     "_start(timeout) -> _Wait: an acquisition on a worker thread (asyncio)."},
    {"_force_loss", (PyCFunction)Lock_force_loss, METH_NOARGS,
     "Test hook (dlock_debug_force_loss): behave as if the held lock were lost."},
    {NULL, NULL, 0, NULL},
};

static PyGetSetDef Lock_getset[] = {
    {"token", (getter)Lock_get_token, NULL,
     "The fencing token of the current holding (0 when not held or lost).", NULL},
    {"state_code", (getter)Lock_get_state_code, NULL, "dlock_state() as an int.", NULL},
    {"held", (getter)Lock_get_held, NULL, "True while the lock is held (and not lost).", NULL},
    {"count", (getter)Lock_get_count, NULL, "The re-entry count (0 when not held).", NULL},
    {"valid_ms", (getter)Lock_get_valid_ms, NULL,
     "How many more milliseconds the holding is certain to be valid: -1 when its liveness "
     "has no deadline on this clock (kernel lock, database session), 0 when not held.",
     NULL},
    {"lost", (getter)Lock_get_lost, NULL,
     "A threading.Event set when the held lock is lost (cleared by the next acquisition): "
     "lk.lost.wait(timeout).",
     NULL},
    {"_kind", (getter)Lock_get_kind_code, NULL, "(kind, permits).", NULL},
    {NULL, NULL, NULL, NULL, NULL},
};

static PyTypeObject LockType = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "dlock._dlock.Lock",
    .tp_basicsize = sizeof(LockObject),
    .tp_dealloc = (destructor)Lock_dealloc,
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_BASETYPE | Py_TPFLAGS_HAVE_GC,
    .tp_weaklistoffset = offsetof(LockObject, weakrefs),
    .tp_doc = "Lock(client, name, *, ttl=None, fair=None, shared=False, permits=None, "
              "on_lost=None, timeout=None): one lock handle (the C layer of dlock.Lock).",
    .tp_traverse = (traverseproc)Lock_traverse,
    .tp_clear = (inquiry)Lock_clear,
    .tp_methods = Lock_methods,
    .tp_members = Lock_members,
    .tp_getset = Lock_getset,
    .tp_init = (initproc)Lock_init,
    .tp_new = PyType_GenericNew,
};

/* ---- module -------------------------------------------------------------------- */

static struct PyModuleDef moddef = {
    PyModuleDef_HEAD_INIT, .m_name = "dlock._dlock",
    .m_doc = "The C layer of the dlock package: libdlock's public API on CPython.",
    .m_size = -1, .m_methods = mod_methods,
};

PyMODINIT_FUNC PyInit__dlock(void)
{
    static int atfork_done;
    if (!atfork_done) {
        if (pthread_atfork(NULL, NULL, atfork_child) != 0) {
            PyErr_SetString(PyExc_ImportError, "pthread_atfork failed");
            return NULL;
        }
        atfork_done = 1;
    }
    if (PyType_Ready(&ClientType) < 0 || PyType_Ready(&LockType) < 0 ||
        PyType_Ready(&WaitType) < 0 || PyType_Ready(&ClaimType) < 0)
        return NULL;
    PyObject *m = PyModule_Create(&moddef);
    if (!m)
        return NULL;
    PyObject *threading = PyImport_ImportModule("threading");
    if (!threading)
        goto fail;
    threading_Event = PyObject_GetAttrString(threading, "Event");
    PyObject *main_th = PyObject_CallMethod(threading, "main_thread", NULL);
    Py_DECREF(threading);
    if (!threading_Event || !main_th)
        goto fail;
    PyObject *ident = PyObject_GetAttrString(main_th, "ident");
    Py_DECREF(main_th);
    if (!ident)
        goto fail;
    unsigned long main_ident = PyLong_AsUnsignedLong(ident);
    Py_DECREF(ident);
    if (main_ident == (unsigned long)-1 && PyErr_Occurred())
        goto fail;
    atomic_store(&main_thread_ident, main_ident);
    PyObject *sigmod = PyImport_ImportModule("signal");
    if (!sigmod)
        goto fail;
    signal_set_wakeup_fd = PyObject_GetAttrString(sigmod, "set_wakeup_fd");
    Py_DECREF(sigmod);
    if (!signal_set_wakeup_fd)
        goto fail;
    wakeup_kwargs = Py_BuildValue("{s:O}", "warn_on_full_buffer", Py_False);
    if (!wakeup_kwargs)
        goto fail;
    Error = PyErr_NewExceptionWithDoc(
        "dlock.Error",
        "The base of every dlock error. `code` is the library's DLOCK_E* code (negative; None "
        "for errors of the Python layer), `errname` its name (\"ETIMEDOUT\"); str(e) is the "
        "library's message.",
        NULL, NULL);
    if (!Error || PyModule_AddObjectRef(m, "Error", Error) < 0)
        goto fail;
    PyObject_SetAttrString(Error, "code", Py_None);
    PyObject_SetAttrString(Error, "errname", Py_None);
    for (size_t i = 0; i < sizeof ERRS / sizeof ERRS[0]; i++) {
        char full[64];
        snprintf(full, sizeof full, "dlock.%s", ERRS[i].name);
        PyObject *cls = PyErr_NewExceptionWithDoc(full, ERRS[i].doc, Error, NULL);
        if (!cls)
            goto fail;
        PyObject *c = PyLong_FromLong(ERRS[i].code);
        PyObject_SetAttrString(cls, "code", c);
        Py_XDECREF(c);
        PyObject *nm = PyUnicode_FromString(dlock_err_name(ERRS[i].code));
        PyObject_SetAttrString(cls, "errname", nm);
        Py_XDECREF(nm);
        err_class[-ERRS[i].code] = cls;
        if (PyModule_AddObjectRef(m, ERRS[i].name, cls) < 0)
            goto fail;
    }
    if (PyModule_AddObjectRef(m, "Client", (PyObject *)&ClientType) < 0 ||
        PyModule_AddObjectRef(m, "Lock", (PyObject *)&LockType) < 0 ||
        PyModule_AddObjectRef(m, "_Wait", (PyObject *)&WaitType) < 0 ||
        PyModule_AddObjectRef(m, "_Claim", (PyObject *)&ClaimType) < 0)
        goto fail;
    PyModule_AddStringConstant(m, "HEADER_VERSION", DLOCK_VERSION_STRING);
    return m;
fail:
    Py_DECREF(m);
    return NULL;
}
