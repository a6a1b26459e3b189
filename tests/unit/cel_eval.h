/* A small evaluator for the CEL subset that crds/trainingjob.yaml's x-kubernetes-validations
 * use, so the tests can check the CRD's cross-field rules against the manifest corpus without
 * a kube-apiserver: literals (int, string, map), `self` and field selection, has(), type(),
 * int(), ! - * / % + == != < <= > >= && || ?:, indexing, and list.map(x, e).sum().
 * Errors follow CEL: `true || error` is true, `false && error` is false. Test support only;
 * the real check is kube-apiserver's. */
#ifndef HOLMES_TEST_CEL_EVAL_H
#define HOLMES_TEST_CEL_EVAL_H

#include <cjson/cJSON.h>

#include "schema_check.h"

/* Evaluates `rule` with `self` bound to `self_value`. Returns 1 (true), 0 (false) or -1 (an
 * evaluation or syntax error, described in err). */
int cel_eval_bool(const char *rule, const cJSON *self_value, char *err, size_t errlen);

/* Walks a defaulted value together with its schema and evaluates every x-kubernetes-validations
 * rule; each rule that is false or fails adds a violation at path + fieldPath with its message. */
int cel_check(const cJSON *schema, const cJSON *value, const char *path, struct schema_violations *v);

#endif
