/* SPDX-License-Identifier: MIT */
/*
 * fuzz_url.c — libFuzzer target for dl_url_parse.
 *
 * The first byte picks a mode. Mode 0 parses the rest as is and checks the
 * result's invariants, including that the redacted form parses back to the
 * same URL with "***" as its password. Mode 1 plants a known password as
 * prefix ":" SECRET "@" suffix and checks it never shows up in `redacted` or
 * in an error message.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fuzz.h"
#include "internal.h"

#define SECRET "QzjVkWxqPfYb"
#define WINDOW 5 /* a leaked fragment this long counts as a leak */


static size_t count(const char *hay, const char *needle)
{
    size_t n = 0;
    if (!needle[0])
        return 0;
    for (const char *p = hay; (p = strstr(p, needle)) != NULL; p++)
        n++;
    return n;
}

/* Does `text` hold a WINDOW-byte piece of SECRET that `input` does not? */
static int leaks(const char *text, const char *input)
{
    static const char secret[] = SECRET;
    char w[WINDOW + 1];
    for (size_t i = 0; i + WINDOW <= sizeof secret - 1; i++) {
        memcpy(w, secret + i, WINDOW);
        w[WINDOW] = '\0';
        if (strstr(text, w) && count(input, w) <= 1)
            return 1;
    }
    return 0;
}

static int same(const char *a, const char *b)
{
    return (!a && !b) || (a && b && strcmp(a, b) == 0);
}

static void check_ok(const char *s, const dl_url *u)
{
    CHECK(u && u->scheme && u->path && u->original && u->redacted);
    CHECK(strcmp(u->original, s) == 0);
    CHECK(strchr(u->scheme, ' ') == NULL);
    CHECK(dl_url_default_port(u->scheme) > 0 || strcmp(u->scheme, "file") == 0);
    if (strcmp(u->scheme, "file") == 0) {
        CHECK(u->nhosts == 0 && u->path[0] == '/');
        CHECK(strcmp(u->path, "/") == 0 || u->path[strlen(u->path) - 1] != '/');
        CHECK(!u->user && !u->password);
    } else {
        CHECK(u->nhosts >= 1 && u->hosts);
    }
    for (size_t i = 0; i < u->nhosts; i++) {
        CHECK(u->hosts[i].host && u->hosts[i].host[0]);
        CHECK(u->hosts[i].port >= 1 && u->hosts[i].port <= 65535);
    }
    CHECK(u->nparams == 0 || u->params);
    for (size_t i = 0; i < u->nparams; i++) {
        CHECK(u->params[i].key && u->params[i].key[0] && u->params[i].value);
        CHECK(dl_url_param(u, u->params[i].key) == u->params[i].value);
    }
    CHECK(!u->user || u->user[0]);
    CHECK(!u->password || u->password[0]);

    const char *pw = u->password;
    if (pw && strlen(pw) >= 4 && !strchr(pw, '*')) {
        /* ":pw@" in the input can only be the password slot (a raw '@' after
         * the host part is refused), so one occurrence must be gone. */
        char slot[4200];
        snprintf(slot, sizeof slot, ":%s@", pw);
        if (strstr(s, slot))
            CHECK(count(u->redacted, pw) < count(s, pw));
    }

    /* The redacted form is the same URL with "***" for the secrets. */
    if (strlen(u->redacted) > 4096)
        return;
    char err[DL_ERRMSG_MAX];
    dl_url *r = NULL;
    int rc = dl_url_parse(u->redacted, &r, err, sizeof err);
    if (rc == DLOCK_ENOMEM)
        return;
    if (rc != 0) {
        fprintf(stderr, "redacted form rejected: %s\n", err);
        abort();
    }
    CHECK(strcmp(r->redacted, u->redacted) == 0); /* idempotent */
    CHECK(strcmp(r->scheme, u->scheme) == 0 && strcmp(r->path, u->path) == 0);
    CHECK(same(r->user, u->user));
    CHECK(u->password ? same(r->password, "***") : r->password == NULL);
    CHECK(r->nhosts == u->nhosts && r->nparams == u->nparams);
    for (size_t i = 0; i < u->nhosts; i++) {
        CHECK(strcmp(r->hosts[i].host, u->hosts[i].host) == 0);
        CHECK(r->hosts[i].port == u->hosts[i].port);
    }
    for (size_t i = 0; i < u->nparams; i++) {
        CHECK(strcmp(r->params[i].key, u->params[i].key) == 0);
        CHECK(strcmp(r->params[i].value, u->params[i].value) == 0 ||
              strcmp(r->params[i].value, "***") == 0);
    }
    dl_url_free(r);
}

static void check_err(int rc, const dl_url *u, const char *err)
{
    CHECK(rc == DLOCK_EURL || rc == DLOCK_ENOMEM);
    CHECK(u == NULL);
    CHECK(err[0] != '\0');
    for (const char *c = err; *c; c++)
        CHECK((unsigned char)*c >= 0x20 && (unsigned char)*c < 0x7f);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 1 || size > 5000)
        return 0;
    int mode = data[0] & 1;
    data++;
    size--;
    size_t split = 0;
    if (mode == 1) {
        if (size < 1)
            return 0;
        split = data[0];
        data++;
        size--;
        if (split > size)
            split = size;
    }
    /* Embedded NULs end the string, as they would for any caller. */
    size_t extra = mode == 1 ? sizeof SECRET + 1 : 0;
    char *s = malloc(size + extra + 1);
    if (!s)
        return 0;
    if (mode == 0) {
        memcpy(s, data, size);
        s[size] = '\0';
    } else {
        memcpy(s, data, split);
        s[split] = ':';
        memcpy(s + split + 1, SECRET, sizeof SECRET - 1);
        s[split + sizeof SECRET] = '@';
        memcpy(s + split + sizeof SECRET + 1, data + split, size - split);
        s[size + extra] = '\0';
        if (strnlen(s, split + 1) < split) { /* NUL in the prefix drops the secret */
            free(s);
            return 0;
        }
    }

    char err[DL_ERRMSG_MAX];
    dl_url *u = NULL;
    int rc = dl_url_parse(s, &u, err, sizeof err);
    if (rc == 0) {
        check_ok(s, u);
        if (mode == 1)
            CHECK(!leaks(u->redacted, s));
        dl_url_free(u);
    } else {
        check_err(rc, u, err);
        if (mode == 1 && leaks(err, s)) {
            fprintf(stderr, "password leaked into: %s\n", err);
            abort();
        }
    }
    free(s);
    return 0;
}
