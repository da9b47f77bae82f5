/* SPDX-License-Identifier: MIT */
/*
 * memcached.c — memcached: an item per held lock, taken with "add",
 * renewed and released only by its owner with compare-and-swap, over
 * memcached's meta protocol (1.6+), which does each in one round trip.
 *
 * Items of a lock NAME (keys "PREFIX" + NAME, or PREFIX "#" and a 128-bit
 * hash where NAME has a space or is too long for a 250-byte key):
 *
 *     KEY        the lock: "OWNER SINCE_MS TOKEN TTL_MS HOLDER" and a line
 *                with the leader's value; its TTL the lease, padded (ttl_seconds)
 *     KEY/N      semaphore slot N < permits, the same
 *     KEY/p      the permits of the semaphore in force (no expiry): every
 *                permit taker rewrites it by compare-and-swap (the CAS it
 *                read before adding its slot) in the request that adds its
 *                slot, so that of two takers of other permits the second
 *                finds the first's value and its slot, and is refused
 *                (DLOCK_ECONFLICT); a value whose slots are all free is
 *                stale and is replaced the same way
 *
 * One name is one lock: a taker writes first and looks after, so of two
 * takers of different kinds at least one sees the other. A permit taker
 * reads KEY in the request that adds its slot; an exclusive taker reads
 * KEY/p in the request that adds KEY (after the add: a connection's
 * requests are served in order) and, when it names permits, that many
 * slots. Whoever sees the other kind held gives its item back and keeps
 * polling (an exclusive taker so waits for every permit).
 *
 * take      ms KEY S T<ttl> ME c   (add), and mg KEY/p v in the same write
 *           (a semaphore's permits: read after the add; one round trip)
 * renew     ms KEY S T<ttl> C<cas> c   (compare-and-swap: EX or NF = lost)
 * release   md KEY C<cas>
 *
 * The token is the CAS value the add gave the item: memcached draws CAS
 * values from one counter per server, raised by every change of every
 * item, so a later grant always has a higher one, with no request of its
 * own (an incr counter would cost a round trip, and eviction would reset
 * it; the CAS counter survives eviction). A restart resets it: tokens are
 * weak. The item's value says TOKEN from its first renewal on (0 before:
 * its CAS is still the token then), for dlock_inspect.
 *
 * memcached has no notification and no queue: a waiter polls with jittered
 * exponential backoff (1 ms doubling to 32 ms), bounded by its deadline and
 * dlock_cancel. Liveness is the item's expiry, counted by the server in
 * whole seconds on a clock that a once-a-second timer advances: the item is
 * set to live ceil(ttl) + 2 s (see ttl_seconds), so that neither rounding
 * nor a late tick ends it before the lease the holder believes in; the core
 * renews every ttl/3 and declares the loss on the holder's own clock.
 *
 * What memcached cannot promise, said plainly (dlock backends, docs): a
 * restart loses every lock and resets the token counters; eviction under
 * memory pressure can drop a held lock's item (its holder learns at its
 * next renewal, and a waiter may take the lock before that); tokens are
 * weak (DLOCK_CAP_FENCING_WEAK). Several servers shard the names by
 * rendezvous hashing: a name always maps to the same server, and a server
 * that goes away makes its names unreachable (they do not move: the lock
 * would then exist twice when it came back).
 *
 * The meta protocol is written by hand: Debian's libmemcached speaks only
 * the classic commands, which need two round trips for an owner-checked
 * release (gets, then cas or delete). Its reply parser (mc_parse, proto.c)
 * is small and fuzzed (fuzz/fuzz_memcached.c).
 */
#include "mc_int.h"
#include "internal.h"
#include "support/support.h"
#include "mc_proto.h"

static const dl_scheme memcached_schemes[] = {
    {"memcached", "memcached", 11211, true, DL_PATH_NONE},
    {NULL, NULL, 0, false, DL_PATH_NONE},
};

#define MC_CAPS                                                                              \
    (DLOCK_CAP_FENCING | DLOCK_CAP_FENCING_WEAK | DLOCK_CAP_SEMAPHORE | DLOCK_CAP_LEASE)
#define MC_LIVENESS                                                                          \
    "an item whose expiry (whole seconds, the server's clock) is renewed by compare-and-"    \
    "swap every ttl/3; the holder is told on its own clock before it can expire. A server " \
    "restart loses every lock, and eviction under memory pressure can drop a held one: "   \
    "its holder learns at its next renewal, and another may take it before"
#define MC_FENCING                                                                           \
    "the CAS value the take gave the lock's item, from the server's CAS counter, which "     \
    "every change of every item raises; weak: a restart resets it (eviction does not)"
#define MC_PARAMS "prefix"

#include <ctype.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

/* ---- connections ------------------------------------------------------------------ */

#define MC_POOL_IDLE_MAX 8
#define MC_BACKOFF_MIN_NS 1000000LL
#define MC_BACKOFF_MAX_NS 32000000LL
#define MC_TTL_MAX_S (30 * 24 * 3600) /* beyond: memcached reads an absolute time */

/* As small as the name allows (a client may hold many locks): the item's
 * value is built again for every write from what it is made of. */
typedef struct mclock {
    mc_server *srv;
    char *leader;   /* the leader value published while held, or NULL */
    uint64_t cas;   /* our item's, from the take and each renewal */
    long long since_ms;
    int slot;       /* semaphore: the slot held (-1: the base key) */
    bool token_known;
    char key[];     /* the base key (see the top) */
} mclock;

mcclient *mcc_of(dlock_client *c)
{
    return c->bstate;
}

/* A new connection to s, made within until_ns. */
static int mc_connect(mc_server *s, int64_t until_ns, int cancel_fd, int *out, char *why,
                      size_t wlen)
{
    char port[16];
    snprintf(port, sizeof port, "%d", s->port);
    struct addrinfo hints = {.ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM}, *ai = NULL;
    int g = getaddrinfo(s->host, port, &hints, &ai);
    if (g != 0) {
        snprintf(why, wlen, "memcached %s:%d: %s", s->host, s->port, gai_strerror(g));
        return DLOCK_EUNREACHABLE;
    }
    int rc = DLOCK_EUNREACHABLE, fd = -1;
    snprintf(why, wlen, "memcached %s:%d: cannot connect", s->host, s->port);
    for (struct addrinfo *a = ai; a && fd < 0; a = a->ai_next) {
        fd = socket(a->ai_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
        if (fd < 0)
            continue;
        int err = 0;
        if (connect(fd, a->ai_addr, a->ai_addrlen) != 0) {
            err = errno;
            if (err == EINPROGRESS) {
                rc = dl_wait_fd(fd, POLLOUT, until_ns, cancel_fd, NULL);
                socklen_t el = sizeof err;
                err = rc ? ETIMEDOUT : (getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &el) ? errno : err);
                if (rc == DLOCK_ECANCELED) {
                    close(fd);
                    fd = -1;
                    snprintf(why, wlen, "canceled while connecting");
                    break;
                }
            }
        }
        /* a connect to a free port of this host can be given that very
         * port and meet itself (TCP simultaneous open) */
        struct sockaddr_storage me, peer;
        socklen_t ml = sizeof me, pl = sizeof peer;
        if (!err && getsockname(fd, (struct sockaddr *)&me, &ml) == 0 &&
            getpeername(fd, (struct sockaddr *)&peer, &pl) == 0 && ml == pl &&
            memcmp(&me, &peer, ml) == 0)
            err = ECONNREFUSED;
        if (err) {
            snprintf(why, wlen, "memcached %s:%d: %s", s->host, s->port,
                     err == ETIMEDOUT ? "no answer in time while connecting" : strerror(err));
            rc = DLOCK_EUNREACHABLE;
            close(fd);
            fd = -1;
            continue;
        }
        rc = 0;
    }
    freeaddrinfo(ai);
    if (fd < 0)
        return rc ? rc : DLOCK_EUNREACHABLE;
    int one = 1;
    (void)setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    dl_socket_keepalive(fd);
    *out = fd;
    return 0;
}

void mc_conn_close(mc_conn *k)
{
    close(k->fd);
    free(k);
}

static void mc_pooled_close(dl_pooled *it)
{
    mc_conn_close(dl_container_of(it, mc_conn, pooled));
}

/* An idle connection to s the server has not ended, else a new one. */
int mc_get_conn(mcclient *mc, mc_server *s, int64_t until_ns, int cancel_fd,
                       mc_conn **out, bool *reused, char *why, size_t wlen)
{
    for (dl_pooled *it; (it = dl_pool_take(&s->idle, NULL, NULL)) != NULL;) {
        mc_conn *k = dl_container_of(it, mc_conn, pooled);
        if (dl_pool_idle_ended(it, k->fd)) {
            mc_conn_close(k);
            continue;
        }
        *out = k;
        *reused = true;
        return 0;
    }
    *reused = false;
    mc_conn *k = calloc(1, sizeof *k);
    if (!k) {
        snprintf(why, wlen, "out of memory");
        return DLOCK_ENOMEM;
    }
    int64_t bound = dl_deadline_in(mc->connect_timeout_ms);
    if (until_ns < bound)
        bound = until_ns;
    int rc = mc_connect(s, bound, cancel_fd, &k->fd, why, wlen);
    if (rc) {
        free(k);
        return rc;
    }
    *out = k;
    return 0;
}

void mc_put_conn(mc_server *s, mc_conn *k)
{
    if (!dl_pool_put(&s->idle, &k->pooled))
        mc_conn_close(k);
}

/* Send req (nrep requests pipelined) to server s and read their nrep
 * replies into rep, within until_ns (and cancel_fd): 0, or a code with the
 * reason in why. A reply that is not memcached's is DLOCK_EPROTO; an
 * error reply is left in rep for the caller (code "ER"). */
int mc_call(mcclient *mc, mc_server *s, const char *req, size_t len, mc_reply *rep,
                   int nrep, int64_t until_ns, int cancel_fd, char *why, size_t wlen)
{
    for (;;) {
        mc_conn *k;
        bool reused;
        int rc = mc_get_conn(mc, s, until_ns, cancel_fd, &k, &reused, why, wlen);
        if (rc)
            return rc;
        int fd = k->fd;
        size_t off = 0;
        while (!rc && off < len) {
            ssize_t n = send(fd, req + off, len - off, MSG_NOSIGNAL);
            if (n > 0)
                off += (size_t)n;
            else if (n < 0 && (errno == EAGAIN || errno == EINTR))
                rc = dl_wait_fd(fd, POLLOUT, until_ns, cancel_fd, NULL);
            else
                rc = DLOCK_EUNREACHABLE;
        }
        char buf[2 * MC_VALUE_MAX + 512];
        size_t have = 0;
        int got = 0;
        bool sent_nothing_back = true;
        /* the replies cannot be there yet: wait for them rather than pay
         * a recv that says EAGAIN first */
        if (!rc)
            rc = dl_wait_fd(fd, POLLIN, until_ns, cancel_fd, NULL);
        while (!rc && got < nrep) {
            long used = have ? mc_parse(buf, have, &rep[got]) : 0;
            if (used < 0) {
                rc = DLOCK_EPROTO;
                break;
            }
            if (used > 0) {
                memmove(buf, buf + used, have - (size_t)used);
                have -= (size_t)used;
                got++;
                continue;
            }
            if (have == sizeof buf) {
                rc = DLOCK_EPROTO;
                break;
            }
            ssize_t n = recv(fd, buf + have, sizeof buf - have, 0);
            if (n > 0) {
                have += (size_t)n;
                sent_nothing_back = false;
            } else if (n < 0 && (errno == EAGAIN || errno == EINTR)) {
                rc = dl_wait_fd(fd, POLLIN, until_ns, cancel_fd, NULL);
            } else {
                rc = DLOCK_EUNREACHABLE;
            }
        }
        if (!rc && have == 0) {
            mc_put_conn(s, k);
            return 0;
        }
        mc_conn_close(k);
        /* a pooled connection the server closed while it idled: again
         * (nothing came back, so nothing was done twice that a lock item
         * would mind: an add is refused the second time) */
        if (dl_pool_again(rc, reused) && sent_nothing_back)
            continue;
        if (!rc)
            rc = DLOCK_EPROTO; /* more bytes than replies */
        snprintf(why, wlen, "memcached %s:%d: %s", s->host, s->port,
                 rc == DLOCK_EPROTO         ? "an answer that is not memcached's meta protocol "
                                              "(memcached 1.6 or later is needed)"
                 : rc == DLOCK_ECANCELED    ? "canceled"
                 : rc == DLOCK_ETIMEDOUT    ? "no answer in time"
                                            : "connection lost");
        return rc == DLOCK_ETIMEDOUT ? DLOCK_EUNREACHABLE : rc;
    }
}

/* ---- names to keys and servers ------------------------------------------------- */

static void hash128(const char *s, uint64_t *h1, uint64_t *h2)
{
    uint64_t a = 0xcbf29ce484222325ULL, b = 0x84222325cbf29ce4ULL;
    for (const unsigned char *p = (const unsigned char *)s; *p; p++) {
        a = (a ^ *p) * 0x100000001b3ULL;
        b = (b ^ *p) * 0x100000001b3ULL;
        b ^= b >> 29;
    }
    *h1 = a;
    *h2 = b;
}

/* The base key of a name: PREFIX NAME where that is a valid key with room
 * for our suffixes ("/t", "/NNNN"), else PREFIX "#" and 32 hex digits. */
static void key_of(const mcclient *mc, const char *name, char *out, size_t len)
{
    size_t pl = strlen(mc->prefix), nl = strlen(name);
    /* a name that starts with '#' could be another name's hashed key */
    if (name[0] != '#' && !strchr(name, ' ') && pl + nl + 6 <= MC_KEY_MAX && pl + nl < len) {
        memcpy(out, mc->prefix, pl);
        memcpy(out + pl, name, nl + 1);
        return;
    }
    uint64_t h1, h2;
    hash128(name, &h1, &h2);
    snprintf(out, len, "%s#%016" PRIx64 "%016" PRIx64, mc->prefix, h1, h2);
}

/* Rendezvous hashing: the server with the highest hash of (name, server)
 * holds the name; a server that leaves moves only its own names. */
mc_server *mc_server_of(const mcclient *mc, const char *name)
{
    mc_server *best = &mc->servers[0];
    uint64_t top = 0;
    for (size_t i = 0; i < mc->nservers; i++) {
        char k[DL_NAME_MAX + 300];
        snprintf(k, sizeof k, "%s\n%s:%d", name, mc->servers[i].host, mc->servers[i].port);
        uint64_t h1, h2;
        hash128(k, &h1, &h2);
        if (i == 0 || h1 > top) {
            top = h1;
            best = &mc->servers[i];
        }
    }
    return best;
}

/* Seconds an item lives for a lease of ttl_ms: rounded up, and two more.
 * memcached stamps an item's expiry from its clock of whole seconds, which a
 * timer sets once a second and re-arms a second after each run. A punctual
 * tick lags a true second by under one: an item of T seconds lives more
 * than T - 1. A late tick (a loaded or stalled server) that crosses a
 * second boundary moves the clock by two: items stamped before it lose
 * that second too (measured: a 2 s item gone 0.55 s after its write while
 * the server stalled up to 0.4 s at a time; test_late_tick_keeps_the_lease).
 * Two more seconds keep the item past the holder's lease unless a tick is
 * a whole second late. */
static long ttl_seconds(int64_t ttl_ms)
{
    long long s = ((long long)ttl_ms + 999) / 1000 + 2;
    return s > MC_TTL_MAX_S ? MC_TTL_MAX_S : (long)s;
}

static void slot_key(const mclock *ml, int slot, char *out, size_t len)
{
    if (slot < 0)
        snprintf(out, len, "%s", ml->key);
    else
        snprintf(out, len, "%s/%d", ml->key, slot);
}

/* ---- locks ----------------------------------------------------------------------- */

static int mc_lock_init(dlock_lock *l)
{
    mcclient *mc = mcc_of(l->c);
    char key[MC_KEY_MAX + 1];
    key_of(mc, l->name, key, sizeof key);
    mclock *ml = calloc(1, sizeof *ml + strlen(key) + 1);
    if (!ml)
        return dl_lock_err(l, DLOCK_ENOMEM, "out of memory");
    memcpy(ml->key, key, strlen(key) + 1);
    ml->srv = mc_server_of(mc, l->name);
    ml->slot = -1;
    l->bstate = ml;
    return 0;
}

static void mc_lock_fini(dlock_lock *l)
{
    mclock *ml = l->bstate;
    if (ml)
        free(ml->leader);
    free(ml);
    l->bstate = NULL;
}

/* Our item's value: owner, since, token (0 until known), lease, holder, and
 * the leader's value (value, NULL: none), into out[MC_VALUE_MAX + 1]. */
static void item_value(dlock_lock *l, const char *value, char *out)
{
    mclock *ml = l->bstate;
    mc_item it = {.since_ms = ml->since_ms,
                  .token = ml->token_known ? atomic_load(&l->token) : 0,
                  .ttl_ms = l->opts.ttl_ms,
                  .has_value = value != NULL};
    snprintf(it.owner, sizeof it.owner, "%s", l->owner);
    snprintf(it.holder, sizeof it.holder, "%s", mcc_of(l->c)->holder);
    snprintf(it.value, sizeof it.value, "%s", value ? value : "");
    if (mc_item_format(&it, out, MC_VALUE_MAX + 1) < 0)
        out[0] = '\0'; /* not reached: every part is bounded */
}

static int64_t op_until(const dlock_lock *l, const mcclient *mc)
{
    return dl_deadline_in(dl_op_timeout_ms(l, mc->op_timeout_ms));
}

/* The held slots among the first `permits` of the semaphore at key (one
 * pipelined request): a count, or a code. */
static int slots_held(dlock_lock *l, long permits, char *why, size_t wlen)
{
    mcclient *mc = mcc_of(l->c);
    mclock *ml = l->bstate;
    size_t cap = (size_t)permits * (MC_KEY_MAX + 24);
    char *req = malloc(cap);
    mc_reply *rep = calloc((size_t)permits, sizeof *rep);
    int rc = req && rep ? 0 : DLOCK_ENOMEM;
    if (rc)
        snprintf(why, wlen, "out of memory");
    size_t off = 0;
    for (long i = 0; !rc && i < permits; i++)
        off += (size_t)snprintf(req + off, cap - off, "mg %s/%ld\r\n", ml->key, i);
    if (!rc)
        rc = mc_call(mc, ml->srv, req, off, rep, (int)permits, op_until(l, mc), -1, why, wlen);
    int held = 0;
    for (long i = 0; !rc && i < permits; i++)
        held += strcmp(rep[i].code, "HD") == 0;
    free(req);
    free(rep);
    return rc ? rc : held;
}

/* Our item given back (a try that met another kind). */
static void give_item(dlock_lock *l, int slot, uint64_t cas)
{
    mcclient *mc = mcc_of(l->c);
    mclock *ml = l->bstate;
    char k[MC_KEY_MAX + 16], req[MC_KEY_MAX + 64], why[200];
    slot_key(ml, slot, k, sizeof k);
    int n = snprintf(req, sizeof req, "md %s C%" PRIu64 "\r\n", k, cas);
    mc_reply r;
    (void)mc_call(mc, ml->srv, req, (size_t)n, &r, 1, op_until(l, mc), -1, why, sizeof why);
    ml->slot = -1;
    ml->token_known = false;
}

/* The permits in force as KEY/p's reply r says (0: none written). */
static long permits_in(const mc_reply *r)
{
    long v = strcmp(r->code, "VA") == 0 ? strtol(r->value, NULL, 10) : 0;
    return v > 0 && v <= DLOCK_PERMITS_MAX ? v : 0;
}

/* One add of slot (-1: the lock's own item): 1 ours (ml->slot, ml->cas and
 * the token set), 0 someone holds it (or, for a semaphore, KEY/p changed
 * since p_cas or KEY is held: see the top of the file), or a code. A
 * permit's add also writes KEY/p (by CAS p_cas, or an add when 0) and reads
 * KEY, in the same request. The lock's own add reads KEY/p in the same
 * request too (the server answers in order, so the read comes after the
 * add), and *in_force says the permits it names (0: none): one round trip
 * per take, not two. */
static int add_item(dlock_lock *l, int slot, uint64_t p_cas, long *in_force, char *why,
                    size_t wlen)
{
    mcclient *mc = mcc_of(l->c);
    mclock *ml = l->bstate;
    char k[MC_KEY_MAX + 16], req[MC_VALUE_MAX + 3 * MC_KEY_MAX];
    slot_key(ml, slot, k, sizeof k);
    ml->since_ms = dl_realtime_ms();
    ml->token_known = false;
    free(ml->leader); /* a new hold publishes no leader value yet */
    ml->leader = NULL;
    char val[MC_VALUE_MAX + 1];
    item_value(l, NULL, val);
    long ttl = ttl_seconds(l->opts.ttl_ms);
    int n = snprintf(req, sizeof req, "ms %s %zu T%ld ME c\r\n%s\r\n", k, strlen(val), ttl, val);
    int nrep = 2;
    if (slot < 0) {
        n += snprintf(req + n, sizeof req - (size_t)n, "mg %s/p v\r\n", ml->key);
    } else {
        char p[16], mode[32];
        int pl = snprintf(p, sizeof p, "%u", l->opts.permits);
        if (p_cas)
            snprintf(mode, sizeof mode, "C%" PRIu64, p_cas);
        else
            snprintf(mode, sizeof mode, "ME");
        n += snprintf(req + n, sizeof req - (size_t)n, "ms %s/p %d T0 %s\r\n%s\r\nmg %s\r\n",
                      ml->key, pl, mode, p, ml->key);
        nrep = 3;
    }
    mc_reply rep[3];
    int rc = mc_call(mc, ml->srv, req, (size_t)n, rep, nrep, op_until(l, mc), -1, why, wlen);
    if (rc)
        return rc;
    if (slot >= 0 && strcmp(rep[0].code, "HD") == 0 && rep[0].has_cas &&
        (strcmp(rep[1].code, "HD") != 0 || strcmp(rep[2].code, "EN") != 0)) {
        ml->slot = slot;
        give_item(l, slot, rep[0].cas);
        return 0;
    }
    if (strcmp(rep[0].code, "NS") == 0)
        return 0;
    if (strcmp(rep[0].code, "HD") != 0) {
        snprintf(why, wlen, "memcached refused the add: %s",
                 rep[0].error[0] ? rep[0].error : rep[0].code);
        return DLOCK_EPROTO;
    }
    if (!rep[0].has_cas || rep[0].cas == 0) {
        /* we hold it, but without a CAS value it can be neither renewed
         * nor released by its owner alone: give it back */
        n = snprintf(req, sizeof req, "md %s\r\n", k);
        (void)mc_call(mc, ml->srv, req, (size_t)n, rep, 1, op_until(l, mc), -1, why, wlen);
        snprintf(why, wlen, "memcached %s:%d keeps no CAS values (started with -C?): locks need them",
                 ml->srv->host, ml->srv->port);
        return DLOCK_ENOTSUP;
    }
    ml->slot = slot;
    ml->cas = rep[0].cas;
    atomic_store(&l->token, rep[0].cas);
    ml->token_known = true;
    if (in_force)
        *in_force = permits_in(&rep[1]);
    return 1;
}

/* The lock's own item, kept only if no permit of a semaphore is held. */
static int take_exclusive(dlock_lock *l, char *why, size_t wlen)
{
    mclock *ml = l->bstate;
    long in_force = 0;
    int rc = add_item(l, -1, 0, &in_force, why, wlen);
    if (rc != 1)
        return rc;
    int held = in_force ? slots_held(l, in_force, why, wlen) : 0;
    if (held != 0) { /* permits are held: wait for every one */
        give_item(l, -1, ml->cas);
        return held < 0 ? held : 0;
    }
    return 1;
}

#define MC_PROBE_MAX 256 /* semaphore slots looked at per round trip */

/* One try: the lock's item, or for a semaphore a look at its slots (one
 * round trip) and an add of each free one until one is ours. 1 taken, 0
 * all held, or a code. */
static int take_once(dlock_lock *l, char *why, size_t wlen)
{
    mcclient *mc = mcc_of(l->c);
    mclock *ml = l->bstate;
    if (l->opts.kind != DLOCK_SEMAPHORE)
        return take_exclusive(l, why, wlen);
    unsigned n = l->opts.permits, start = 0;
    (void)dl_random(&start, sizeof start);
    unsigned probe = n < MC_PROBE_MAX ? n : MC_PROBE_MAX;
    size_t cap = (size_t)(probe + 2) * (MC_KEY_MAX + 24);
    char *req = malloc(cap);
    mc_reply *rep = calloc(probe + 2, sizeof *rep);
    int *slots = calloc(probe, sizeof *slots);
    int rc = req && rep && slots ? 0 : DLOCK_ENOMEM;
    size_t off = 0;
    if (!rc) /* KEY (an exclusive holder) and KEY/p (the permits in force) first */
        off = (size_t)snprintf(req, cap, "mg %s\r\nmg %s/p v c\r\n", ml->key, ml->key);
    for (unsigned i = 0; !rc && i < probe; i++) {
        char k[MC_KEY_MAX + 16];
        slots[i] = (int)((start + i) % n);
        slot_key(ml, slots[i], k, sizeof k);
        off += (size_t)snprintf(req + off, cap - off, "mg %s\r\n", k);
    }
    if (!rc)
        rc = mc_call(mc, ml->srv, req, off, rep, (int)probe + 2, op_until(l, mc), -1, why,
                     wlen);
    else
        snprintf(why, wlen, "out of memory");
    int taken = 0;
    uint64_t p_cas = 0;
    if (!rc && strcmp(rep[0].code, "EN") != 0)
        probe = 0; /* held exclusively (or an error the next try meets) */
    else if (!rc && strcmp(rep[1].code, "EN") != 0) {
        long in_force = permits_in(&rep[1]);
        p_cas = rep[1].has_cas ? rep[1].cas : 0;
        if (!p_cas) {
            snprintf(why, wlen, "memcached returned no CAS value for %s/p", ml->key);
            rc = DLOCK_EPROTO;
        } else if (in_force && in_force != (long)n) {
            int held = slots_held(l, in_force, why, wlen);
            if (held > 0)
                rc = dl_conflict_err(l, 's', (unsigned)in_force);
            else if (held < 0)
                rc = held;
        }
    }
    for (unsigned i = 0; !rc && !taken && i < probe; i++) {
        if (strcmp(rep[i + 2].code, "EN") != 0)
            continue; /* held (HD), or an error the add will meet too */
        int t = add_item(l, slots[i], p_cas, NULL, why, wlen);
        if (t == 0)
            break; /* KEY/p changed or KEY is held: look again on the next try */
        if (t < 0)
            rc = t;
        else
            taken = t;
    }
    free(req);
    free(rep);
    free(slots);
    return rc ? rc : taken;
}

static int mc_acquire(dlock_lock *l, int64_t deadline_ns)
{
    mcclient *mc = mcc_of(l->c);
    if (l->opts.kind == DLOCK_SHARED)
        return dl_lock_err(l, DLOCK_ENOTSUP,
                           "lock \"%s\": memcached has exclusive locks and semaphores, not "
                           "shared locks",
                           l->name);
    char why[400];
    int cancel = deadline_ns == 0 ? -1 : dl_cancel_fd(l);
    int64_t backoff_ns = MC_BACKOFF_MIN_NS;
    for (;;) {
        int64_t start = dl_now_ns();
        int rc = take_once(l, why, sizeof why);
        if (rc == 1) {
            l->lease_start_ns = start; /* the lease counts from before the add */
            return 0;
        }
        /* A request cut short by the caller's deadline proves nothing
         * about the server (it had less than op_timeout_ms): a time-out. */
        if (dl_deadline_cut(l, rc, deadline_ns))
            return dl_lock_err(l, DLOCK_ETIMEDOUT,
                               "lock \"%s\" not acquired within the timeout (%s)", l->name, why);
        if (rc == DLOCK_ECONFLICT)
            return rc; /* its message is set */
        if (rc < 0)
            return dl_lock_err(l, rc, "lock \"%s\": %s (%s)", l->name, why, mc->redacted);
        if (deadline_ns == 0)
            return dl_lock_err(l, DLOCK_EBUSY, "lock \"%s\" is held by another owner", l->name);
        int64_t pause = dl_backoff_ns(&backoff_ns, MC_BACKOFF_MAX_NS);
        if (deadline_ns > 0) {
            int64_t left = deadline_ns - dl_now_ns();
            if (left <= 0)
                return dl_lock_err(l, DLOCK_ETIMEDOUT,
                                   "lock \"%s\" not acquired within the timeout", l->name);
            if (pause > left)
                pause = left;
        }
        if (dl_nap_ns(pause, cancel) == DLOCK_ECANCELED)
            return dl_lock_err(l, DLOCK_ECANCELED, "lock \"%s\": canceled", l->name);
    }
}

/* A compare-and-swap write (or delete, del) of our item: the request for l
 * at req[0..len), its length (0 when it does not fit). The value is
 * the one renewals keep writing, with value as the leader's if not NULL; a
 * write makes the item live for a lease of ttl_ms. */
static size_t own_request(dlock_lock *l, bool del, const char *value, int64_t ttl_ms, char *req,
                          size_t len)
{
    mclock *ml = l->bstate;
    char k[MC_KEY_MAX + 16];
    slot_key(ml, ml->slot, k, sizeof k);
    int n;
    if (del) {
        n = snprintf(req, len, "md %s C%" PRIu64 "\r\n", k, ml->cas);
    } else {
        char val[MC_VALUE_MAX + 1];
        item_value(l, value ? value : ml->leader, val);
        n = snprintf(req, len, "ms %s %zu T%ld C%" PRIu64 " c\r\n%s\r\n", k, strlen(val),
                     ttl_seconds(ttl_ms), ml->cas, val);
    }
    return n > 0 && (size_t)n < len ? (size_t)n : 0;
}

#define MC_OWN_REQ_MAX (MC_VALUE_MAX + 2 * MC_KEY_MAX + 64)

/* What the reply to own_request says: 0 (a write's new CAS kept),
 * DLOCK_ELOST when the item is no longer ours, or a code. */
static int own_reply(dlock_lock *l, bool del, const mc_reply *r)
{
    mclock *ml = l->bstate;
    if (strcmp(r->code, "HD") == 0) {
        if (!del && r->has_cas)
            ml->cas = r->cas;
        return 0;
    }
    if (strcmp(r->code, "EX") == 0 || strcmp(r->code, "NF") == 0)
        return dl_lock_err(l, DLOCK_ELOST,
                           "lock \"%s\": its item %s (expired, evicted, broken, or the server "
                           "restarted)",
                           l->name,
                           strcmp(r->code, "NF") == 0 ? "is gone" : "belongs to another owner");
    return dl_lock_err(l, DLOCK_EPROTO, "lock \"%s\": memcached said %s", l->name,
                       r->error[0] ? r->error : r->code);
}

/* Compare-and-swap on our item: write it again with a new expiry (and
 * value: the leader's, kept for later renewals), or delete it. 0,
 * DLOCK_ELOST when it is no longer ours, or a code. */
static int own_item(dlock_lock *l, bool del, const char *value, int64_t ttl_ms)
{
    mcclient *mc = mcc_of(l->c);
    mclock *ml = l->bstate;
    char req[MC_OWN_REQ_MAX], why[400];
    size_t n = own_request(l, del, value, ttl_ms, req, sizeof req);
    mc_reply r;
    int rc = mc_call(mc, ml->srv, req, n, &r, 1, op_until(l, mc), -1, why, sizeof why);
    if (rc)
        return dl_lock_err(l, rc, "lock \"%s\": %s (%s)", l->name, why, mc->redacted);
    rc = own_reply(l, del, &r);
    if (rc == 0 && value) {
        char *keep = strdup(value);
        if (!keep)
            return dl_lock_err(l, DLOCK_ENOMEM, "lock \"%s\": out of memory", l->name);
        free(ml->leader);
        ml->leader = keep;
    }
    return rc;
}

/* Renew many locks: per server, every compare-and-swap write in one
 * pipelined request and the replies in one read (the meta protocol answers
 * in order). A call that fails fails each lock of its server (transient:
 * the core's watchdog decides at each one's deadline). */
static void mc_renew_batch(dlock_client *c, dlock_lock *const *ls, int *rcs, size_t n)
{
    mcclient *mc = mcc_of(c);
    char *req = malloc(n * MC_OWN_REQ_MAX);
    mc_reply *reps = malloc(n * sizeof *reps);
    size_t *idx = malloc(n * sizeof *idx);
    for (size_t s = 0; s < mc->nservers; s++) {
        mc_server *srv = &mc->servers[s];
        size_t k = 0, off = 0;
        for (size_t i = 0; i < n; i++) {
            if (((mclock *)ls[i]->bstate)->srv != srv)
                continue;
            if (!req || !reps || !idx) {
                rcs[i] = dl_lock_err(ls[i], DLOCK_ENOMEM, "lock \"%s\": out of memory to renew",
                                     ls[i]->name);
                continue;
            }
            off += own_request(ls[i], false, NULL, ls[i]->opts.ttl_ms, req + off, MC_OWN_REQ_MAX);
            idx[k++] = i;
        }
        if (k == 0)
            continue;
        char why[400];
        int rc = mc_call(mc, srv, req, off, reps, (int)k, op_until(ls[idx[0]], mc), -1, why,
                         sizeof why);
        for (size_t j = 0; j < k; j++) {
            dlock_lock *l = ls[idx[j]];
            rcs[idx[j]] = rc ? dl_lock_err(l, rc, "lock \"%s\": %s (%s)", l->name, why,
                                           mc->redacted)
                             : own_reply(l, false, &reps[j]);
        }
    }
    free(idx);
    free(reps);
    free(req);
}

static int mc_release(dlock_lock *l)
{
    return own_item(l, true, NULL, 0);
}

static int mc_renew(dlock_lock *l)
{
    return own_item(l, false, NULL, l->opts.ttl_ms);
}

/* The item, written again to live ms more (whole seconds, rounded up, as
 * every lease here), is the release: takers add it again once it is gone. */
static int mc_release_at(dlock_lock *l, int64_t ms)
{
    return own_item(l, false, NULL, ms);
}

static void mc_abandon(dlock_lock *l)
{
    (void)own_item(l, true, NULL, 0); /* the owner check leaves anyone else's alone */
}

static int mc_set_value(dlock_lock *l, const char *value)
{
    return own_item(l, false, value, l->opts.ttl_ms);
}

/* What the items of a name say: its lock item, or a semaphore's slots
 * (their count from KEY/p). */
typedef struct mc_view {
    int holders;
    mc_item first; /* the longest holder */
    long long ttl;
    uint64_t token; /* the newest holder's */
} mc_view;

static void view_add(mc_view *v, const mc_reply *r)
{
    mc_item it;
    if (strcmp(r->code, "VA") != 0 || !mc_item_parse(r->value, r->vlen, &it))
        return;
    uint64_t token = it.token ? it.token : r->cas; /* before its first renewal: its CAS */
    if (v->holders == 0 || it.since_ms < v->first.since_ms) {
        v->first = it;
        v->ttl = r->ttl;
    }
    if (token > v->token)
        v->token = token;
    v->holders++;
}

static int view_of(dlock_client *c, const char *name, mc_view *v, char *why, size_t wlen)
{
    mcclient *mc = mcc_of(c);
    memset(v, 0, sizeof *v);
    v->ttl = -1;
    char key[MC_KEY_MAX + 1], req[3 * MC_KEY_MAX + 64];
    key_of(mc, name, key, sizeof key);
    mc_server *s = mc_server_of(mc, name);
    int n = snprintf(req, sizeof req, "mg %s v t c\r\nmg %s/p v\r\n", key, key);
    mc_reply r[2];
    int64_t until = dl_deadline_in(mc->op_timeout_ms);
    int rc = mc_call(mc, s, req, (size_t)n, r, 2, until, -1, why, wlen);
    if (rc)
        return rc;
    view_add(v, &r[0]);
    long permits = strcmp(r[1].code, "VA") == 0 ? strtol(r[1].value, NULL, 10) : 0;
    if (permits <= 0 || permits > DLOCK_PERMITS_MAX)
        return 0;
    /* a semaphore: its slots, in one write */
    size_t cap = (size_t)permits * (MC_KEY_MAX + 24);
    char *sreq = malloc(cap);
    mc_reply *sr = calloc((size_t)permits, sizeof *sr);
    if (!sreq || !sr) {
        free(sreq);
        free(sr);
        snprintf(why, wlen, "out of memory");
        return DLOCK_ENOMEM;
    }
    size_t off = 0;
    for (long i = 0; i < permits; i++)
        off += (size_t)snprintf(sreq + off, cap - off, "mg %s/%ld v t c\r\n", key, i);
    rc = mc_call(mc, s, sreq, off, sr, (int)permits, until, -1, why, wlen);
    for (long i = 0; !rc && i < permits; i++)
        view_add(v, &sr[i]);
    free(sreq);
    free(sr);
    return rc;
}

static int mc_inspect(dlock_client *c, const char *name, dlock_info *info)
{
    mcclient *mc = mcc_of(c);
    memset(info, 0, sizeof *info);
    char why[400];
    mc_view v;
    int rc = view_of(c, name, &v, why, sizeof why);
    if (rc)
        return dl_client_err(c, rc, "inspect \"%s\": %s (%s)", name, why, mc->redacted);
    info->held = v.holders > 0;
    info->holders = v.holders;
    info->waiters = v.holders ? -1 : 0; /* waiters poll: nothing counts them */
    info->token = v.token;
    info->held_ms = -1;
    info->lease_ms = -1;
    if (v.holders) {
        snprintf(info->holder, sizeof info->holder, "%s", v.first.holder);
        long long now = dl_realtime_ms();
        info->held_ms = now >= v.first.since_ms ? now - v.first.since_ms : 0;
        /* the item lives two seconds longer than the lease (see
         * ttl_seconds), and its TTL is whole seconds: never more than the
         * lease itself */
        long long left = v.ttl >= 0 ? (v.ttl > 2 ? (v.ttl - 2) * 1000 : 0) : -1;
        if (left > v.first.ttl_ms)
            left = v.first.ttl_ms;
        info->lease_ms = left;
    }
    return 0;
}

static int mc_get_value(dlock_client *c, const char *name, char *buf, size_t len)
{
    mcclient *mc = mcc_of(c);
    char why[400];
    mc_view v;
    int rc = view_of(c, name, &v, why, sizeof why);
    if (rc)
        return dl_client_err(c, rc, "leader of \"%s\": %s (%s)", name, why, mc->redacted);
    if (!v.holders || !v.first.has_value)
        return dl_client_err(c, DLOCK_ENOENT, "\"%s\" has no leader", name);
    snprintf(buf, len, "%s", v.first.value);
    return 0;
}

/* Delete the name's items (lock, slots): each holder learns at its next
 * renewal (ttl/3), its compare-and-swap finding nothing. */
static int mc_break(dlock_client *c, const char *name, dlock_info *broken)
{
    mcclient *mc = mcc_of(c);
    int rc = mc_inspect(c, name, broken);
    if (dl_nothing_to_break(rc, broken))
        return rc;
    char key[MC_KEY_MAX + 1], why[400];
    key_of(mc, name, key, sizeof key);
    /* the base key, and the slots up to the permits the semaphore wrote */
    char req[8 * MC_KEY_MAX];
    int n = snprintf(req, sizeof req, "mg %s/p v\r\n", key);
    mc_reply pr;
    mc_server *s = mc_server_of(mc, name);
    int64_t until = dl_deadline_in(mc->op_timeout_ms);
    rc = mc_call(mc, s, req, (size_t)n, &pr, 1, until, -1, why, sizeof why);
    long permits = !rc && strcmp(pr.code, "VA") == 0 ? strtol(pr.value, NULL, 10) : 0;
    if (permits < 0 || permits > DLOCK_PERMITS_MAX)
        permits = 0;
    size_t cap = (size_t)(permits + 1) * (MC_KEY_MAX + 24);
    char *dreq = rc ? NULL : malloc(cap);
    mc_reply *dr = rc ? NULL : calloc((size_t)permits + 1, sizeof *dr);
    if (!rc && (!dreq || !dr)) {
        rc = DLOCK_ENOMEM;
        snprintf(why, sizeof why, "out of memory");
    }
    if (!rc) {
        size_t off = (size_t)snprintf(dreq, cap, "md %s\r\n", key);
        for (long i = 0; i < permits; i++)
            off += (size_t)snprintf(dreq + off, cap - off, "md %s/%ld\r\n", key, i);
        rc = mc_call(mc, s, dreq, off, dr, (int)permits + 1, until, -1, why, sizeof why);
    }
    free(dreq);
    free(dr);
    if (rc)
        return dl_client_err(c, rc, "break \"%s\": %s (%s)", name, why, mc->redacted);
    return 0;
}

static int mc_list(dlock_client *c, const char *prefix, dlock_list_fn fn, void *arg)
{
    (void)prefix;
    (void)fn;
    (void)arg;
    return dl_client_err(c, DLOCK_ENOTSUP,
                         "list: memcached cannot enumerate its keys safely (lru_crawler "
                         "metadump walks the whole cache and is a debugging aid): ask "
                         "`dlock status NAME` for a name you know");
}

/* ---- clients ---------------------------------------------------------------------- */

static void mc_client_close(dlock_client *c)
{
    mcclient *mc = mcc_of(c);
    if (!mc)
        return;
    for (size_t i = 0; i < mc->nservers; i++) {
        mc_server *s = &mc->servers[i];
        dl_pool_stop(&s->idle, mc_pooled_close);
        dl_pool_fini(&s->idle);
        free(s->host);
    }
    free(mc->servers);
    free(mc);
    c->bstate = NULL;
}

static bool prefix_ok(const char *p)
{
    size_t n = strlen(p);
    if (n > 48)
        return false;
    for (; *p; p++)
        if ((unsigned char)*p <= 0x20 || (unsigned char)*p >= 0x7f)
            return false;
    return true;
}

static int mc_client_open(dlock_client *c, const dl_url *u)
{
    /* memcached's text protocol has no log-in (SASL needs the binary one,
     * which dlock does not speak): credentials would be silently ignored */
    if (u->user || u->password)
        return dl_client_err(c, DLOCK_EURL,
                             "%s: memcached takes no user name or password (dlock speaks the "
                             "text protocol, which has no authentication): remove "
                             "\"user:password@\", and keep the servers on a private network",
                             u->redacted);
    const char *prefix = dl_url_param(u, "prefix");
    if (!prefix)
        prefix = "dlock:";
    if (!prefix_ok(prefix))
        return dl_client_err(c, DLOCK_EURL,
                             "%s: prefix= takes at most 48 printable characters without spaces",
                             u->redacted);
    mcclient *mc = calloc(1, sizeof *mc);
    if (!mc)
        return dl_client_err(c, DLOCK_ENOMEM, "out of memory");
    c->bstate = mc;
    mc->servers = calloc(u->nhosts, sizeof *mc->servers);
    if (!mc->servers) {
        mc_client_close(c);
        return dl_client_err(c, DLOCK_ENOMEM, "out of memory");
    }
    for (size_t i = 0; i < u->nhosts; i++) {
        mc->servers[i].host = strdup(u->hosts[i].host);
        mc->servers[i].port = u->hosts[i].port;
        dl_pool_init(&mc->servers[i].idle, MC_POOL_IDLE_MAX);
        mc->nservers++;
        if (!mc->servers[i].host) {
            mc_client_close(c);
            return dl_client_err(c, DLOCK_ENOMEM, "out of memory");
        }
    }
    snprintf(mc->prefix, sizeof mc->prefix, "%s", prefix);
    dl_self_desc(mc->holder, sizeof mc->holder);
    mc->redacted = u->redacted;
    mc->op_timeout_ms = c->opts.op_timeout_ms;
    mc->connect_timeout_ms = c->opts.connect_timeout_ms;
    /* The servers speak the meta protocol (mn: MN). One that does not
     * answer now is not an error while another does: its names fail on
     * their own (EUNREACHABLE), the others work. */
    int up = 0, rc = 0;
    char why[400] = "";
    for (size_t i = 0; i < mc->nservers; i++) {
        char w[400];
        mc_reply r;
        int64_t until = dl_deadline_in(mc->connect_timeout_ms);
        int src = mc_call(mc, &mc->servers[i], "mn\r\n", 4, &r, 1, until, -1, w, sizeof w);
        if (!src && strcmp(r.code, "MN") != 0) {
            src = DLOCK_EPROTO;
            snprintf(w, sizeof w,
                     "memcached %s:%d does not speak the meta protocol (%s): memcached 1.6 or "
                     "later is needed",
                     mc->servers[i].host, mc->servers[i].port, r.error[0] ? r.error : r.code);
        }
        if (!src) {
            up++;
        } else if (!rc || src != DLOCK_EUNREACHABLE) {
            rc = src; /* the first failure, or one that is not the network's */
            snprintf(why, sizeof why, "%s", w);
        }
        if (src && src != DLOCK_EUNREACHABLE)
            break;
    }
    if (rc && (rc != DLOCK_EUNREACHABLE || up == 0)) {
        mc_client_close(c);
        return dl_client_err(c, rc, "%s: %s", u->redacted, why);
    }
    return 0;
}

static const dl_backend_ops mc_ops = {
    .client_open = mc_client_open,
    .client_close = mc_client_close,
    .lock_init = mc_lock_init,
    .lock_fini = mc_lock_fini,
    .acquire = mc_acquire,
    .release = mc_release,
    .renew = mc_renew,
    .renew_batch = mc_renew_batch,
    .abandon = mc_abandon,
    .inspect = mc_inspect,
    .list = mc_list,
    .set_value = mc_set_value,
    .get_value = mc_get_value,
    .break_lock = mc_break,
    .release_at = mc_release_at,
};
#define MC_OPS .ops = &mc_ops

const dl_backend dl_backend_memcached = {
    .name = "memcached",
    .schemes = memcached_schemes,
    .caps = MC_CAPS,
    .liveness = MC_LIVENESS,
    .fencing = MC_FENCING,
    .params = MC_PARAMS,
    .no_claims = "it may evict it at any moment",
    MC_OPS,
};
