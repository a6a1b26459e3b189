/* YAML documents (libyaml) as cJSON trees, so one JSON code path reads both
 * API objects and manifest files. Scalars become strings unless plain (unquoted) and
 * spelled as a YAML 1.2 core-schema null, bool, int or float. */
#ifndef HOLMES_YAML_JSON_H
#define HOLMES_YAML_JSON_H

#include <stddef.h>
#include <cjson/cJSON.h>

#include "error.h"

/* Parses every document of `text` into a JSON array (one element per document; empty
 * documents are skipped). `name` labels errors: "job.yaml:12:3: mapping values are not allowed".
 * Nesting deeper than 64 levels, anchors/aliases and non-scalar keys are errors. */
cJSON *yaml_parse_documents(const char *text, size_t len, const char *name, herr *e);
/* Reads a whole file (at most 16 MiB) and parses it as above. */
cJSON *yaml_parse_file(const char *path, herr *e);
/* Reads a whole file into a NUL-terminated buffer (at most max bytes). Caller frees. */
char *read_file_limited(const char *path, size_t max, size_t *len_out, herr *e);

#endif
