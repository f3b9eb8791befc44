/*
 * Minimal JSON reader for the fake NVML scenario file (kubegpu.fleet test fake).
 * Copyright: kubegpu.fleet contributors
 * GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
 */
#include "fake_json.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define FJ_MAX_DEPTH 64

typedef struct {
    const char *s;
    size_t pos;
    char *err;
    size_t errlen;
    int failed;
} fj_parser;

static void fj_fail(fj_parser *p, const char *what)
{
    if (!p->failed) {
        snprintf(p->err, p->errlen, "%s at byte %zu", what, p->pos);
        p->failed = 1;
    }
}

static void fj_ws(fj_parser *p)
{
    while (p->s[p->pos] == ' ' || p->s[p->pos] == '\t' || p->s[p->pos] == '\n' ||
           p->s[p->pos] == '\r')
        p->pos++;
}

static fj_value *fj_new(fj_type t)
{
    fj_value *v = calloc(1, sizeof(*v));
    if (v)
        v->type = t;
    return v;
}

static int fj_push(fj_value *v, char *key, fj_value *item)
{
    fj_value **items = realloc(v->items, (v->n + 1) * sizeof(*items));
    if (!items)
        return -1;
    v->items = items;
    if (v->type == FJ_OBJ) {
        char **keys = realloc(v->keys, (v->n + 1) * sizeof(*keys));
        if (!keys)
            return -1;
        v->keys = keys;
        v->keys[v->n] = key;
    }
    v->items[v->n++] = item;
    return 0;
}

static int fj_hex4(const char *s, unsigned *out)
{
    unsigned v = 0;
    for (int i = 0; i < 4; i++) {
        char c = s[i];
        v <<= 4;
        if (c >= '0' && c <= '9')
            v |= (unsigned)(c - '0');
        else if (c >= 'a' && c <= 'f')
            v |= (unsigned)(c - 'a' + 10);
        else if (c >= 'A' && c <= 'F')
            v |= (unsigned)(c - 'A' + 10);
        else
            return -1;
    }
    *out = v;
    return 0;
}

static size_t fj_utf8(unsigned cp, char *out)
{
    if (cp < 0x80) {
        out[0] = (char)cp;
        return 1;
    }
    if (cp < 0x800) {
        out[0] = (char)(0xC0 | (cp >> 6));
        out[1] = (char)(0x80 | (cp & 0x3F));
        return 2;
    }
    if (cp < 0x10000) {
        out[0] = (char)(0xE0 | (cp >> 12));
        out[1] = (char)(0x80 | ((cp >> 6) & 0x3F));
        out[2] = (char)(0x80 | (cp & 0x3F));
        return 3;
    }
    out[0] = (char)(0xF0 | (cp >> 18));
    out[1] = (char)(0x80 | ((cp >> 12) & 0x3F));
    out[2] = (char)(0x80 | ((cp >> 6) & 0x3F));
    out[3] = (char)(0x80 | (cp & 0x3F));
    return 4;
}

static char *fj_string(fj_parser *p)
{
    /* p->s[p->pos] == '"' */
    size_t cap = 32, len = 0;
    char *out = malloc(cap);
    if (!out) {
        fj_fail(p, "out of memory");
        return NULL;
    }
    p->pos++;
    for (;;) {
        char c = p->s[p->pos];
        char buf[4];
        size_t n = 0;
        if (c == '\0') {
            fj_fail(p, "unterminated string");
            free(out);
            return NULL;
        }
        if ((unsigned char)c < 0x20) {
            fj_fail(p, "control character in string");
            free(out);
            return NULL;
        }
        if (c == '"') {
            p->pos++;
            break;
        }
        if (c == '\\') {
            char e = p->s[p->pos + 1];
            p->pos += 2;
            switch (e) {
            case '"': buf[n++] = '"'; break;
            case '\\': buf[n++] = '\\'; break;
            case '/': buf[n++] = '/'; break;
            case 'b': buf[n++] = '\b'; break;
            case 'f': buf[n++] = '\f'; break;
            case 'n': buf[n++] = '\n'; break;
            case 'r': buf[n++] = '\r'; break;
            case 't': buf[n++] = '\t'; break;
            case 'u': {
                unsigned cp, lo;
                if (fj_hex4(p->s + p->pos, &cp) < 0) {
                    fj_fail(p, "bad \\u escape");
                    free(out);
                    return NULL;
                }
                p->pos += 4;
                if (cp >= 0xD800 && cp <= 0xDBFF && p->s[p->pos] == '\\' &&
                    p->s[p->pos + 1] == 'u' && fj_hex4(p->s + p->pos + 2, &lo) == 0 &&
                    lo >= 0xDC00 && lo <= 0xDFFF) {
                    cp = 0x10000 + ((cp - 0xD800) << 10) + (lo - 0xDC00);
                    p->pos += 6;
                }
                n = fj_utf8(cp, buf);
                break;
            }
            default:
                p->pos -= 1;
                fj_fail(p, "bad escape");
                free(out);
                return NULL;
            }
        } else {
            buf[n++] = c;
            p->pos++;
        }
        if (len + n + 1 > cap) {
            char *bigger;
            cap = (cap + n) * 2;
            bigger = realloc(out, cap);
            if (!bigger) {
                free(out);
                fj_fail(p, "out of memory");
                return NULL;
            }
            out = bigger;
        }
        memcpy(out + len, buf, n);
        len += n;
    }
    out[len] = '\0';
    return out;
}

static fj_value *fj_value_at(fj_parser *p, int depth);

static fj_value *fj_container(fj_parser *p, int depth, int is_obj)
{
    fj_value *v = fj_new(is_obj ? FJ_OBJ : FJ_ARR);
    char close = is_obj ? '}' : ']';
    if (!v) {
        fj_fail(p, "out of memory");
        return NULL;
    }
    p->pos++;
    fj_ws(p);
    if (p->s[p->pos] == close) {
        p->pos++;
        return v;
    }
    for (;;) {
        char *key = NULL;
        fj_value *item;
        fj_ws(p);
        if (is_obj) {
            if (p->s[p->pos] != '"') {
                fj_fail(p, "expected object key");
                break;
            }
            key = fj_string(p);
            if (!key)
                break;
            fj_ws(p);
            if (p->s[p->pos] != ':') {
                free(key);
                fj_fail(p, "expected ':'");
                break;
            }
            p->pos++;
        }
        item = fj_value_at(p, depth + 1);
        if (!item) {
            free(key);
            break;
        }
        if (fj_push(v, key, item) < 0) {
            free(key);
            fj_free(item);
            fj_fail(p, "out of memory");
            break;
        }
        fj_ws(p);
        if (p->s[p->pos] == ',') {
            p->pos++;
            continue;
        }
        if (p->s[p->pos] == close) {
            p->pos++;
            return v;
        }
        fj_fail(p, is_obj ? "expected ',' or '}'" : "expected ',' or ']'");
        break;
    }
    fj_free(v);
    return NULL;
}

static fj_value *fj_value_at(fj_parser *p, int depth)
{
    const char *s;
    if (depth > FJ_MAX_DEPTH) {
        fj_fail(p, "nesting too deep");
        return NULL;
    }
    fj_ws(p);
    s = p->s + p->pos;
    switch (*s) {
    case '{':
        return fj_container(p, depth, 1);
    case '[':
        return fj_container(p, depth, 0);
    case '"': {
        char *str = fj_string(p);
        fj_value *v;
        if (!str)
            return NULL;
        v = fj_new(FJ_STR);
        if (!v) {
            free(str);
            fj_fail(p, "out of memory");
            return NULL;
        }
        v->str = str;
        return v;
    }
    case 't':
        if (strncmp(s, "true", 4) == 0) {
            fj_value *v = fj_new(FJ_BOOL);
            p->pos += 4;
            if (v)
                v->boolean = 1;
            return v;
        }
        break;
    case 'f':
        if (strncmp(s, "false", 5) == 0) {
            p->pos += 5;
            return fj_new(FJ_BOOL);
        }
        break;
    case 'n':
        if (strncmp(s, "null", 4) == 0) {
            p->pos += 4;
            return fj_new(FJ_NULL);
        }
        break;
    default:
        if (*s == '-' || (*s >= '0' && *s <= '9')) {
            char *end;
            double d = strtod(s, &end);
            fj_value *v;
            if (end == s) {
                fj_fail(p, "bad number");
                return NULL;
            }
            p->pos += (size_t)(end - s);
            v = fj_new(FJ_NUM);
            if (v)
                v->num = d;
            return v;
        }
    }
    fj_fail(p, "unexpected character");
    return NULL;
}

fj_value *fj_parse(const char *text, char *err, size_t errlen)
{
    fj_parser p = { text, 0, err, errlen, 0 };
    fj_value *v;
    if (errlen)
        err[0] = '\0';
    v = fj_value_at(&p, 0);
    if (!v)
        return NULL;
    fj_ws(&p);
    if (p.s[p.pos] != '\0') {
        fj_fail(&p, "trailing data");
        fj_free(v);
        return NULL;
    }
    return v;
}

void fj_free(fj_value *v)
{
    if (!v)
        return;
    for (size_t i = 0; i < v->n; i++) {
        fj_free(v->items[i]);
        if (v->keys)
            free(v->keys[i]);
    }
    free(v->items);
    free(v->keys);
    free(v->str);
    free(v);
}

const fj_value *fj_get(const fj_value *obj, const char *key)
{
    if (!obj || obj->type != FJ_OBJ)
        return NULL;
    for (size_t i = 0; i < obj->n; i++)
        if (strcmp(obj->keys[i], key) == 0)
            return obj->items[i];
    return NULL;
}

const char *fj_get_str(const fj_value *obj, const char *key, const char *def)
{
    const fj_value *v = fj_get(obj, key);
    return (v && v->type == FJ_STR) ? v->str : def;
}

long long fj_get_int(const fj_value *obj, const char *key, long long def)
{
    const fj_value *v = fj_get(obj, key);
    return (v && v->type == FJ_NUM) ? (long long)v->num : def;
}

int fj_get_bool(const fj_value *obj, const char *key, int def)
{
    const fj_value *v = fj_get(obj, key);
    if (!v)
        return def;
    if (v->type == FJ_BOOL)
        return v->boolean;
    if (v->type == FJ_NUM)
        return v->num != 0;
    return def;
}
