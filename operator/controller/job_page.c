#include "job_page.h"

#include <stdlib.h>
#include <string.h>

#include "clock.h"

/* operator/controller/job_page.html, made a string literal by mk/operator.mk. */
static const char page_html[] =
#include "job_page_html.inc"
    ;

/* The job of list named like `job` (namespace and name), or NULL. */
static cJSON *same_job(cJSON *list, const cJSON *job)
{
    const char *ns = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(job, "namespace"));
    const char *name = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(job, "name"));
    cJSON *j;
    cJSON_ArrayForEach(j, list) {
        const char *jns = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(j, "namespace"));
        const char *jname = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(j, "name"));
        if (ns && name && jns && jname && !strcmp(ns, jns) && !strcmp(name, jname))
            return j;
    }
    return NULL;
}

/* Moves key from `from` to `to`, replacing it there. */
static void move_item(cJSON *to, cJSON *from, const char *key)
{
    cJSON *v = cJSON_DetachItemFromObjectCaseSensitive(from, key);
    if (!v)
        return;
    cJSON_DeleteItemFromObjectCaseSensitive(to, key);
    cJSON_AddItemToObject(to, key, v);
}

cJSON *job_page_jobs(cJSON *controller_jobs, cJSON *history_jobs)
{
    if (!controller_jobs)
        return history_jobs;
    cJSON *j;
    cJSON_ArrayForEach(j, controller_jobs) {
        cJSON *h = same_job(history_jobs, j);
        if (!h)
            continue;
        static const char *const series[] = {"points", "pointsKept", "stages", "events"};
        for (size_t k = 0; k < sizeof series / sizeof *series; k++)
            move_item(j, h, series[k]);
        if (cJSON_IsNull(cJSON_GetObjectItemCaseSensitive(j, "plan")))
            move_item(j, h, "plan");
    }
    cJSON_Delete(history_jobs);
    return controller_jobs;
}

int job_page_handles(const char *path)
{
    return !strcmp(path, JOB_PAGE_PATH) || !strcmp(path, JOB_PAGE_API_PATH);
}

/* {"generated": now, "jobs": jobs} into b; takes jobs. */
static int serve_api(cJSON *jobs, struct metrics_buf *b, const char **type)
{
    cJSON *doc = cJSON_CreateObject();
    if (!jobs || !doc || !cJSON_AddItemToObject(doc, "jobs", jobs)) {
        cJSON_Delete(jobs); /* not added: still ours */
        cJSON_Delete(doc);
        metrics_printf(b, "out of memory\n");
        return 500;
    }
    char *text = cJSON_AddNumberToObject(doc, "generated", clock_wall_s()) ? cJSON_PrintUnformatted(doc) : NULL;
    cJSON_Delete(doc);
    if (!text) {
        metrics_printf(b, "out of memory\n");
        return 500;
    }
    metrics_printf(b, "%s\n", text);
    free(text);
    *type = "application/json";
    return b->oom ? 500 : 200;
}

int job_page_serve(const char *path, cJSON *jobs, struct metrics_buf *b, const char **type)
{
    if (!strcmp(path, JOB_PAGE_API_PATH))
        return serve_api(jobs, b, type);
    cJSON_Delete(jobs);
    if (strcmp(path, JOB_PAGE_PATH) != 0) {
        metrics_printf(b, "not found\n");
        return 404;
    }
    metrics_printf(b, "%s", page_html);
    *type = "text/html; charset=utf-8";
    return b->oom ? 500 : 200;
}
