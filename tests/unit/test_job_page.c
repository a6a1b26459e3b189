/* The job page's endpoints: /jobs is the embedded HTML, /api/jobs the jobs as JSON; the
 * controller's jobs (status) merged with the coordinator's history (series). */
#include "test.h"

#include <stdlib.h>

#include "coord_history.h"
#include "job_page.h"

static cJSON *history_with_points(void)
{
    struct coord_history *h = coord_history_new(4);
    struct proto_progress p = {.stage = 1, .nsteps = 2};
    p.steps[0] = (struct proto_step){.step = 1, .has_loss = 1, .loss = 5, .tokens_per_s = 10, .step_ms = 20};
    p.steps[1] = (struct proto_step){.step = 2, .has_loss = 1, .loss = 4, .tokens_per_s = 10, .step_ms = 20};
    coord_history_steps(h, "ml", "gpt", &p);
    cJSON *plan = cJSON_Parse("{\"stages\":[{\"index\":0,\"fabric\":\"from-history\"}]}");
    coord_history_plan(h, "ml", "gpt", plan);
    coord_history_event(h, "ml", "gpt", "Normal", "Running", "go");
    coord_history_phase(h, "ml", "old", "Running", NULL); /* not in the controller's list */
    cJSON_Delete(plan);
    herr e = {0};
    cJSON *j = coord_history_json(h, &e);
    coord_history_free(h);
    return j;
}

static void test_merge(void)
{
    cJSON *ctl = cJSON_Parse("[{\"namespace\":\"ml\",\"name\":\"gpt\",\"phase\":\"Running\","
                             "\"conditions\":[{\"type\":\"Valid\",\"status\":\"True\"}],"
                             "\"plan\":{\"stages\":[{\"index\":0,\"fabric\":\"from-status\"}]}},"
                             "{\"namespace\":\"ml\",\"name\":\"waiting\",\"phase\":\"Pending\","
                             "\"conditions\":[],\"plan\":null}]");
    cJSON *jobs = job_page_jobs(ctl, history_with_points());
    CHECK_INT("the controller's jobs are the list", cJSON_GetArraySize(jobs), 2);
    const cJSON *gpt = cJSON_GetArrayItem(jobs, 0), *waiting = cJSON_GetArrayItem(jobs, 1);
    const cJSON *steps = cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(gpt, "points"), "step");
    CHECK_INT("the history's points joined to the job", cJSON_GetArraySize(steps), 2);
    CHECK_INT("and its events", cJSON_GetArraySize(cJSON_GetObjectItemCaseSensitive(gpt, "events")), 1);
    CHECK_STR("the status's plan wins", cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(
                  cJSON_GetArrayItem(cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(gpt, "plan"), "stages"), 0),
                  "fabric")), "from-status");
    CHECK_STR("the status's conditions kept", cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(
                  cJSON_GetArrayItem(cJSON_GetObjectItemCaseSensitive(gpt, "conditions"), 0), "type")), "Valid");
    CHECK("a job the coordinator has not seen has no series",
          !cJSON_GetObjectItemCaseSensitive(waiting, "points") && cJSON_IsNull(cJSON_GetObjectItemCaseSensitive(waiting, "plan")));
    cJSON_Delete(jobs);

    jobs = job_page_jobs(NULL, history_with_points());
    CHECK_INT("no controller (local): the history's jobs", cJSON_GetArraySize(jobs), 2);
    cJSON_Delete(jobs);
}

static void test_serve(void)
{
    struct metrics_buf b = {0};
    const char *type = "text/plain";
    CHECK("its paths", job_page_handles("/jobs") && job_page_handles("/api/jobs") && !job_page_handles("/metrics"));
    int code = job_page_serve("/jobs", NULL, &b, &type);
    CHECK("/jobs: 200 HTML", code == 200 && !strncmp(type, "text/html", 9));
    CHECK("/jobs: the page, with its script inline", b.data && strstr(b.data, "<!DOCTYPE html>") &&
                                                    strstr(b.data, "fetch(\"api/jobs\"") && strstr(b.data, "</html>"));
    CHECK("/jobs: no script or style from elsewhere", b.data && !strstr(b.data, "src=") && !strstr(b.data, "@import"));
    free(b.data);
    b = (struct metrics_buf){0};
    type = "text/plain";
    code = job_page_serve("/api/jobs", job_page_jobs(NULL, history_with_points()), &b, &type);
    cJSON *doc = b.data ? cJSON_Parse(b.data) : NULL;
    CHECK("/api/jobs: 200 JSON", code == 200 && !strcmp(type, "application/json"));
    CHECK("/api/jobs: {generated, jobs}", doc && cJSON_IsNumber(cJSON_GetObjectItemCaseSensitive(doc, "generated")) &&
                                              cJSON_GetArraySize(cJSON_GetObjectItemCaseSensitive(doc, "jobs")) == 2);
    cJSON_Delete(doc);
    free(b.data);
    b = (struct metrics_buf){0};
    CHECK_INT("/api/jobs without a list: 500", job_page_serve("/api/jobs", NULL, &b, &type), 500);
    free(b.data);
    b = (struct metrics_buf){0};
    CHECK_INT("another path: 404", job_page_serve("/jobs/x", NULL, &b, &type), 404);
    free(b.data);
}

int main(void)
{
    test_merge();
    test_serve();
    TEST_MAIN_END();
}
