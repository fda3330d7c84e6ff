/* settings.c - the table of environment settings (settings.h) and the
   reading and parsing of them.  No Python here: built into the
   extensions and into both fabric libraries. */
#include <arpa/inet.h>
#include <ctype.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "settings.h"

extern char **environ;

#define PYRDMA_SETTING_ROW(id, name, type, dflt, reader, meaning) \
    [PYRDMA_SET_##id] = {name, type, dflt, reader, meaning},
const struct pyrdma_setting pyrdma_settings_table[PYRDMA_NSETTINGS] = {
    PYRDMA_SETTINGS(PYRDMA_SETTING_ROW)
};
#undef PYRDMA_SETTING_ROW

const char *
pyrdma_setting_env(int id)
{
    const char *v = getenv(pyrdma_settings_table[id].name);

    return v != NULL && v[0] != '\0' ? v : NULL;
}

/* "flag": 0 or 1 (and the usual words for them); -1 if neither. */
static int
parse_flag(const char *t)
{
    static const char *const off[] = {"0", "no", "off", "false", "n"};
    static const char *const on[] = {"1", "yes", "on", "true", "y"};
    size_t i;

    for (i = 0; i < sizeof(off) / sizeof(off[0]); i++) {
        if (strcasecmp(t, off[i]) == 0)
            return 0;
        if (strcasecmp(t, on[i]) == 0)
            return 1;
    }
    return -1;
}

/* "size": a number of bytes (decimal, 0x hex), with K, M or G; 0 or -1. */
static int
parse_size(const char *t, unsigned long long *num)
{
    char *end;
    unsigned long long v;
    unsigned shift = 0;

    if (!isdigit((unsigned char)t[0]))
        return -1;
    errno = 0;
    v = strtoull(t, &end, 0);
    if (errno != 0)
        return -1;
    if (*end != '\0' && end[1] == '\0') {
        const char *units = "KMG", *u = strchr(units, toupper(*end));
        if (u == NULL)
            return -1;
        shift = 10 * (unsigned)(u - units + 1);
        end++;
    }
    if (*end != '\0' || (shift && v > (~0ULL >> shift)))
        return -1;
    *num = v << shift;
    return 0;
}

/* "choice a|b|c": the index of t among the words; -1 if none. */
static int
parse_choice(const char *words, const char *t)
{
    size_t len = strlen(t);
    int i = 0;

    for (;;) {
        const char *bar = strchr(words, '|');
        size_t wlen = bar != NULL ? (size_t)(bar - words) : strlen(words);
        if (wlen == len && strncmp(words, t, len) == 0)
            return i;
        if (bar == NULL)
            return -1;
        words = bar + 1;
        i++;
    }
}

/* Parse t as type; 0, or -1 with what was expected in *want. */
static int
parse_as(const char *type, const char *t, unsigned long long *num,
         const char **want)
{
    int r;
    struct in_addr a;

    *num = 0;
    if (strcmp(type, "flag") == 0) {
        *want = "0 or 1";
        r = parse_flag(t);
        *num = r < 0 ? 0 : (unsigned)r;
        return r < 0 ? -1 : 0;
    }
    if (strcmp(type, "size") == 0) {
        *want = "a number of bytes, e.g. 4096 or 64K";
        return parse_size(t, num);
    }
    if (strcmp(type, "ipv4") == 0) {
        *want = "an IPv4 address, e.g. 192.0.2.1";
        if (inet_pton(AF_INET, t, &a) != 1)
            return -1;
        *num = a.s_addr;
        return 0;
    }
    if (strncmp(type, "choice ", 7) == 0) {
        *want = type + 7;
        r = parse_choice(type + 7, t);
        *num = r < 0 ? 0 : (unsigned)r;
        return r < 0 ? -1 : 0;
    }
    return 0;                   /* path, text, secret, ucx: as they are */
}

int
pyrdma_setting_parse(int id, const char *text, unsigned long long *num,
                     char *err, size_t errlen)
{
    const struct pyrdma_setting *row;
    const char *want = "";

    if (id < 0 || id >= PYRDMA_NSETTINGS) {
        snprintf(err, errlen, "no setting %d", id);
        return -1;
    }
    row = &pyrdma_settings_table[id];
    if (text == NULL) {         /* the default; a descriptive one is 0 */
        if (parse_as(row->type, row->dflt, num, &want) < 0)
            *num = 0;
        return 0;
    }
    if (parse_as(row->type, text, num, &want) == 0)
        return 0;
    snprintf(err, errlen, "%s=%s is not valid: expected %s", row->name,
             strcmp(row->type, "secret") == 0 ? "..." : text, want);
    return -1;
}

void
pyrdma_settings_free(struct pyrdma_settings *s)
{
    int i;

    for (i = 0; i < PYRDMA_NSETTINGS; i++) {
        free(s->text[i]);
        s->text[i] = NULL;
        s->num[i] = 0;
    }
    s->read = 0;
}

int
pyrdma_settings_read(struct pyrdma_settings *s, const char *reader,
                     struct pyrdma_status *st)
{
    char err[256];
    int i;

    pyrdma_settings_free(s);
    for (i = 0; i < PYRDMA_NSETTINGS; i++) {
        const char *v = pyrdma_setting_env(i);
        if (reader != NULL &&
            strcmp(pyrdma_settings_table[i].reader, reader) != 0)
            continue;
        if (pyrdma_setting_parse(i, v, &s->num[i], err, sizeof(err)) < 0) {
            pyrdma_settings_free(s);
            return pyrdma_fail(st, EINVAL, "getenv", "%s", err);
        }
        if (v != NULL && (s->text[i] = strdup(v)) == NULL) {
            pyrdma_settings_free(s);
            return pyrdma_fail(st, ENOMEM, "strdup", "settings");
        }
    }
    s->read = 1;
    return 0;
}

/* Edit distance of a and b (each under 64 characters; else a large
   number). */
static size_t
distance(const char *a, const char *b)
{
    size_t la = strlen(a), lb = strlen(b), i, j;
    size_t row[64], prev, cur;

    if (la >= 64 || lb >= 64)
        return 1000;
    for (j = 0; j <= lb; j++)
        row[j] = j;
    for (i = 1; i <= la; i++) {
        prev = row[0];
        row[0] = i;
        for (j = 1; j <= lb; j++) {
            cur = prev + (a[i - 1] != b[j - 1]);
            if (row[j] + 1 < cur)
                cur = row[j] + 1;
            if (row[j - 1] + 1 < cur)
                cur = row[j - 1] + 1;
            prev = row[j];
            row[j] = cur;
        }
    }
    return row[lb];
}

const char *
pyrdma_setting_closest(const char *name)
{
    const char *best = NULL;
    size_t best_d = strlen(name) / 3 + 1, i;

    for (i = 0; i < PYRDMA_NSETTINGS; i++) {
        size_t d = distance(name, pyrdma_settings_table[i].name);
        if (d < best_d) {
            best_d = d;
            best = pyrdma_settings_table[i].name;
        }
    }
    return best;
}

/* 1 if the environment entry e ("NAME=value") names a setting. */
static int
known(const char *e, size_t len)
{
    int i;

    for (i = 0; i < PYRDMA_NSETTINGS; i++) {
        const char *n = pyrdma_settings_table[i].name;
        if (strlen(n) == len && strncmp(n, e, len) == 0)
            return 1;
    }
    return 0;
}

void
pyrdma_settings_warn_unknown(void)
{
    char **e;

    for (e = environ; e != NULL && *e != NULL; e++) {
        const char *eq = strchr(*e, '=');
        size_t len = eq != NULL ? (size_t)(eq - *e) : strlen(*e);
        char name[64];
        const char *near;
        if (strncmp(*e, "RDMA_UCX_", 9) != 0 || known(*e, len))
            continue;
        snprintf(name, sizeof(name), "%.*s", (int)len, *e);
        near = pyrdma_setting_closest(name);
        fprintf(stderr, "rdma (ucx fabric): %s is not a setting of the "
                "fabric%s%s%s (python -m rdma.fabric config lists them)\n",
                name, near != NULL ? "; did you mean " : "",
                near != NULL ? near : "", near != NULL ? "?" : "");
    }
}
