/* SPDX-License-Identifier: MIT */
/*
 * ec_json.h — what the etcd backend reads out of the gateway's bytes: JSON
 * replies and watch streams, the keys and values in them, base64. Pure
 * functions of what arrived (no libcurl): the fuzz target links json.c as
 * it is. Written by hand where no library does it: the gateway's base64
 * (neither libcurl nor cJSON exports a codec) and the splitting of a
 * stream into lines of JSON, and the reading of HTTP replies (reply.c).
 */
#ifndef DLOCK_EC_JSON_H
#define DLOCK_EC_JSON_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <cjson/cJSON.h>

#include "support/support.h"

#define EC_KEY_MAX 512
#define EC_REPLY_MAX (64u << 20) /* a reply larger than this is not etcd's */

/* ---- base64 ---- */

/* n bytes of s into out (4*ceil(n/3)+1 bytes). */
void ec_b64_encode(const void *s, size_t n, char *out);
/* Decode s into out (at most cap-1 bytes, NUL-terminated): the length, or
 * -1 for input that is not base64 or does not fit. */
long ec_b64_decode(const char *s, char *out, size_t cap);

/* ---- replies ---- */

/* An int64 the gateway writes as a string ("12") or a number; def if absent. */
int64_t ec_jint(const cJSON *o, const char *name, int64_t def);
/* A uint64 the gateway writes as a string (member ids use all 64 bits); 0
 * if absent or malformed. */
uint64_t ec_juint(const cJSON *o, const char *name);
/* Member name of o if it is an object (array), else NULL. */
const cJSON *ec_jobj(const cJSON *o, const char *name);
const cJSON *ec_jarr(const cJSON *o, const char *name);
/* A kv's key, decoded into buf: false when absent or malformed. */
bool ec_kv_key(const cJSON *kv, char *buf, size_t len);
/* A kv's value, decoded into buf ("" when absent). */
void ec_kv_value(const cJSON *kv, char *buf, size_t len);
/* Is a reply with HTTP status and body j (NULL: not JSON) etcd's at all? */
bool ec_from_etcd(long status, const cJSON *j);
/* An error reply of the gateway ({"error": ..., "code": N, "message": ...})
 * as a DLOCK_E* code, and a message naming base into err. */
int ec_gateway_error(const char *base, long status, const cJSON *j, char *err, size_t errlen);
/* The header revision of a reply (0 if absent). */
int64_t ec_header_rev(const cJSON *j);
/* A key's value "SINCE HOLDER\nVALUE" (v is cut): the holder into holder,
 * when it got the lock into *since_ms (-1 unknown; since_ms may be NULL),
 * the leader value returned (NULL if none). */
const char *ec_split_value(char *v, char *holder, size_t len, int64_t *since_ms);

/* ---- HTTP/1.1 replies (reply.c) ---- */

enum { EC_REPLY_MORE, EC_REPLY_DONE, EC_REPLY_BAD, EC_REPLY_SINK };

/* A reply being read: its status, and how the connection ends. */
typedef struct ec_reply {
    int state, result; /* result: EC_REPLY_* */
    int status;
    bool http10, close, chunked, has_len;
    uint64_t length; /* Content-Length, when has_len */
    uint64_t left;   /* body or chunk bytes still to come */
    size_t line_len;
    char line[8192];
    char why[96]; /* EC_REPLY_BAD: what was wrong */
} ec_reply;

void ec_reply_init(ec_reply *r);
/* n more bytes of the reply; its body bytes go to sink (false: stop,
 * EC_REPLY_SINK). *used: the bytes read (fewer than n once it is done or
 * failed: bytes after a reply are no part of it). EC_REPLY_MORE until the
 * reply ends (DONE), or it is not HTTP as we read it (BAD, r->why). */
int ec_reply_feed(ec_reply *r, const char *data, size_t n, size_t *used,
                  bool (*sink)(void *arg, const char *data, size_t n), void *arg);
/* The server closed the connection: DONE for a body that runs to the
 * close, else BAD (or the result already reached). */
int ec_reply_eof(ec_reply *r);

/* ---- the queue ---- */

typedef struct ec_entry {
    dl_qpos pos; /* first: dl_queue_blocker reads it */
    char key[EC_KEY_MAX];
    int64_t rev;
    int64_t lease; /* the lease the key is bound to (0: none) */
} ec_entry;

/* "PREFIX/NAME/KIND-LEASE-OWNER" (dir is "PREFIX/NAME/") → e (false for a
 * key of another shape). */
bool ec_entry_parse(const char *dir, const char *key, ec_entry *e);
/* The lease id in an entry's key. */
int64_t ec_entry_lease(const char *dir, const char *key);
/* The queue in a range reply's kvs, ascending by create revision (or
 * descending): its length, -1 when out of memory (*out malloc'd). */
int ec_queue_of(const cJSON *range, const char *dir, bool descending, ec_entry **out);
/* The same, by a layout's rule: any_key (etcdctl lock's, concurrency.Mutex's:
 * every key under dir is an exclusive entry), else dlock's own shape only,
 * the first key under dir of another shape copied into foreign ("" none;
 * foreign may be NULL). */
int ec_queue_read(const cJSON *range, const char *dir, bool descending, bool any_key,
                  ec_entry **out, char *foreign, size_t flen);
/* Does key (under dir) have the shape of etcdctl lock's and Go's
 * concurrency.Mutex/Election keys, DIR<lease in hex>? */
bool ec_mutex_shaped(const char *dir, const char *key);

/* ---- streams ---- */

/* A reply's body as it arrives: whole (unary), or cut into lines of JSON
 * handed to on_line (a stream; NULL for a line that is not JSON). */
typedef struct ec_body {
    char *buf;
    size_t len, cap;
    bool toolarge; /* past EC_REPLY_MAX: the transfer is aborted */
    void (*on_line)(void *arg, cJSON *line);
    void *arg;
} ec_body;

/* n more bytes: n, or 0 to abort the transfer (too large, no memory). */
size_t ec_body_feed(ec_body *b, const char *data, size_t n);

/* A waiter's watch: the deletion of `pred` (or of any key under `pred`
 * when range), any change of it when puts, or the deletion of our own key,
 * after revision rev (the read that found us waiting). */
typedef struct wait_watch {
    const char *pred, *own; /* the keys watched */
    bool chain;       /* exclusive behind exclusive: pred's write says it holds */
    bool pred_held;   /* ... and it came */
    bool pred_gone;   /* an event: pred deleted */
    bool other;       /* an event of another kind or key, or the watch canceled */
    bool fired, failed;
    bool stop;        /* fired, or both watches created: look */
    int created;      /* watches created */
    int64_t at_rev;   /* the store's revision when they were */
    int64_t ev_rev;   /* the revision of the last event */
    int64_t read_rev; /* the read that found us waiting: older events are in it */
    char why[200];
} wait_watch;

/* on_line of a waiter's watch stream (arg: its wait_watch). */
void ec_wait_line(void *arg, cJSON *j);

#endif
