/* A checker for the subset of OpenAPI v3 (Kubernetes structural schemas) that
 * crds/trainingjob.yaml uses: type, properties, additionalProperties, required, enum,
 * minimum/maximum (exclusive too), minLength/maxLength, pattern, minItems/maxItems, items,
 * x-kubernetes-int-or-string, x-kubernetes-preserve-unknown-fields, nullable and default.
 * Unknown fields are violations (kubectl's strict field validation). CEL rules
 * (x-kubernetes-validations) are not evaluated. Test support only. */
#ifndef HOLMES_TEST_SCHEMA_CHECK_H
#define HOLMES_TEST_SCHEMA_CHECK_H

#include <cjson/cJSON.h>

#define SCHEMA_MAX_VIOLATIONS 64

struct schema_violations {
    int count;
    char path[SCHEMA_MAX_VIOLATIONS][256]; /* "spec.parallelism.tensor" */
    char rule[SCHEMA_MAX_VIOLATIONS][256]; /* "minimum 1" */
};

/* The openAPIV3Schema of the first version of a CRD document, or NULL. */
const cJSON *schema_of_crd(const cJSON *crd);
/* Checks `value` at `path` against `schema`; appends violations. Returns their number. */
int schema_check(const cJSON *schema, const cJSON *value, const char *path, struct schema_violations *v);
/* Fills absent fields that have a default, recursively, as the API server does. Returns -1 on OOM. */
int schema_apply_defaults(const cJSON *schema, cJSON *value);
/* The Kubernetes structural-schema rules a CRD must meet to be accepted (the subset this CRD can
 * break): every node has a type (or is int-or-string / preserve-unknown-fields), no
 * additionalProperties beside properties, list-map keys required, CEL entries with rule and
 * message, and every default valid against its own node. Returns the number of problems. */
int schema_structural_problems(const cJSON *schema, const char *path, struct schema_violations *v);
/* Counts the x-kubernetes-validations rules anywhere in the schema. */
int schema_count_cel_rules(const cJSON *schema);

#endif
