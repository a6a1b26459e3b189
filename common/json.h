/* Reading JSON the same way everywhere. Two families:
 *  - checked reads of one member of an object, for documents from outside (protocol messages,
 *    plan documents, cluster files): absent and not required leaves *out as it was (set the
 *    default first); a wrong type or a value out of range fails naming "where.key" and the rule;
 *  - lookups by dotted path with a default, for documents already validated (a TrainingJob the
 *    controller reads back from the API server). */
#ifndef HOLMES_JSON_H
#define HOLMES_JSON_H

#include <stddef.h>
#include <cjson/cJSON.h>

#include "error.h"

#define JSON_OPTIONAL 0
#define JSON_REQUIRED 1

/* A whole number in [lo, hi]. */
int json_int(const cJSON *o, const char *where, const char *key, int required, long lo, long hi,
             long *out, herr *e);
/* The same into an int (lo and hi must fit one). */
int json_int32(const cJSON *o, const char *where, const char *key, int required, int lo, int hi,
               int *out, herr *e);
/* A finite number in [lo, hi]. */
int json_num(const cJSON *o, const char *where, const char *key, int required, double lo,
             double hi, double *out, herr *e);
/* A string shorter than cap; a required one must not be empty. Absent and optional: "". */
int json_str(const cJSON *o, const char *where, const char *key, int required, char *dst,
             size_t cap, herr *e);

/* The path of member `key` under `parent` for a message: "parent.key", or, when the key is not
 * a plain name ([A-Za-z0-9_-], as keys from outside may be anything), parent["key"] with the
 * key's quotes and backslashes escaped and at most 60 of its bytes. */
void json_key_path(char *out, size_t n, const char *parent, const char *key);

/* Every string value under j (j included) made well-formed UTF-8 without control characters, in
 * place (herr_clean: what goes into an API object's status, an Event or a log line). */
void json_clean_strings(cJSON *j);

/* The member at "a.b.c", or NULL. */
const cJSON *json_at(const cJSON *o, const char *dotted);
/* Its string, or NULL when absent or not a string. */
const char *json_str_at(const cJSON *o, const char *dotted);
/* Its number, or def when absent or not a number. */
double json_num_at(const cJSON *o, const char *dotted, double def);

/* Writers that replace a member of the same name: a number, a string, or an object (made
 * when absent or not an object) to write into. On out-of-memory they leave `o` as it was
 * (json_child_object then returns NULL). */
void json_set_num(cJSON *o, const char *key, double v);
/* A number as JSON text written with printf's fmt into buf: "null" for NaN and infinities,
 * which JSON cannot hold (a skipped step's loss). Returns the text. */
const char *json_fmt_num(char *buf, size_t cap, const char *fmt, double v);
void json_set_str(cJSON *o, const char *key, const char *v);
cJSON *json_child_object(cJSON *o, const char *key);

/* Applies a JSON merge patch (RFC 7386) to the object `target`: members of `patch` replace
 * those of `target`, objects merge member by member, null removes. With `compose`, `target`
 * is itself a patch and the result the patch doing both: a null is kept, to remove later.
 * -1 when out of memory (`target` then holds part of the patch). */
int json_merge_patch(cJSON *target, const cJSON *patch, int compose);
/* The merge patch that turns object `from` into object `to` (json_merge_patch(from, it, 0)
 * gives `to`): changed members, objects member by member, null for those removed. An empty
 * object when they are equal; NULL when out of memory. */
cJSON *json_merge_diff(const cJSON *from, const cJSON *to);

#endif
