/* The manifests the tests read: every .yaml and .json file of a folder (tests/manifests/valid,
 * tests/manifests/invalid, examples), in name order; a job object's spec, parsed; the errors
 * found in one. */
#ifndef HOLMES_MANIFEST_TESTUTIL_H
#define HOLMES_MANIFEST_TESTUTIL_H

#include <cjson/cJSON.h>

/* Calls fn for each file of dir whose name ends in .yaml or .json, in name order (the first 512).
 * The number of files, or -1 when dir cannot be read. */
int for_each_manifest(const char *dir, void (*fn)(const char *path));

struct tj_spec;
struct tj_errors;
/* Whether one of the errors holds needle. */
int tj_errors_have(const struct tj_errors *errs, const char *needle);
/* Each error on a line of its own, after prefix. */
void tj_errors_print(const struct tj_errors *errs, const char *prefix);

/* The spec of a TrainingJob object (its "spec", by tj_spec_from_json), every error printed:
 * 0 when valid. Free *s with tj_spec_free either way. */
int spec_of_job(const cJSON *job, struct tj_spec *s);

#endif
