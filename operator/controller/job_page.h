/* The live job page (docs/operator.md, "Job page"): GET /jobs is one HTML page with its CSS,
 * script and SVG inline (nothing is fetched from elsewhere: it works on an air-gapped cluster;
 * the page is operator/controller/job_page.html, made a C string at build time), which polls
 * GET /api/jobs: {"generated": Unix seconds, "jobs": [...]}, each job as coord_history_json
 * describes it. Served on the metrics listener, read-only. */
#ifndef HOLMES_JOB_PAGE_H
#define HOLMES_JOB_PAGE_H

#include <cjson/cJSON.h>

#include "metrics.h"

#define JOB_PAGE_PATH "/jobs"
#define JOB_PAGE_API_PATH "/api/jobs"

/* The page's jobs. controller_jobs (controller_jobs_json; NULL where there is no controller,
 * as in `holmes-operator local`) lists every job with its status: phase, message, conditions,
 * plan and restarts; each gets what the coordinator's history (coord_history_json) holds of
 * it: points, stages, events (and its plan while the status has none). Without a controller
 * the history's jobs are the list. Takes both arrays; NULL out of memory. */
cJSON *job_page_jobs(cJSON *controller_jobs, cJSON *history_jobs);

/* Whether path is the page's (JOB_PAGE_PATH, JOB_PAGE_API_PATH). */
int job_page_handles(const char *path);

/* Serves a path of the page: the HTTP status, the body in b, its type in *type. jobs (taken;
 * only /api/jobs uses it, NULL: the list could not be made) is job_page_jobs's answer. */
int job_page_serve(const char *path, cJSON *jobs, struct metrics_buf *b, const char **type);

#endif
