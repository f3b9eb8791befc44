/*
 * Minimal JSON reader for the fake NVML scenario file (kubegpu.fleet test fake).
 * Copyright: kubegpu.fleet contributors
 * GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
 *
 * A small recursive-descent parser into a DOM: enough for scenario files (objects, arrays,
 * strings with escapes incl. \uXXXX, numbers, true/false/null). Errors carry a byte offset.
 */
#ifndef KUBEGPU_FAKE_JSON_H
#define KUBEGPU_FAKE_JSON_H

#include <stddef.h>

typedef enum { FJ_NULL, FJ_BOOL, FJ_NUM, FJ_STR, FJ_ARR, FJ_OBJ } fj_type;

typedef struct fj_value {
    fj_type type;
    int boolean;
    double num;
    char *str;                 /* FJ_STR */
    size_t n;                  /* FJ_ARR / FJ_OBJ: number of items */
    struct fj_value **items;   /* FJ_ARR / FJ_OBJ */
    char **keys;               /* FJ_OBJ */
} fj_value;

/* Parse text; on failure return NULL and describe the problem in err. */
fj_value *fj_parse(const char *text, char *err, size_t errlen);
void fj_free(fj_value *v);

/* Object member or NULL (also NULL when obj is not an object). */
const fj_value *fj_get(const fj_value *obj, const char *key);
/* Convenience accessors with defaults. */
const char *fj_get_str(const fj_value *obj, const char *key, const char *def);
long long fj_get_int(const fj_value *obj, const char *key, long long def);
int fj_get_bool(const fj_value *obj, const char *key, int def);

#endif
