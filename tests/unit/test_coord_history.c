/* The job page's history: bounded loss points (replicas merged, the oldest dropped, steps
 * trained again after a restart replacing the old ones), stage times, conditions, events
 * (a bounded ring, oldest first), the plan, and the JSON /api/jobs serves. */
#include "test.h"

#include <stdlib.h>

#include "coord_history.h"

static void step(struct coord_history *h, const char *job, int stage, long s, int has_loss,
                 double loss, double tps)
{
    struct proto_progress p = {.rank = 0, .stage = stage, .nsteps = 1};
    p.steps[0] = (struct proto_step){.step = s, .has_loss = has_loss, .loss = loss,
                                     .tokens_per_s = tps, .step_ms = 100, .compute_ms = 60,
                                     .comm_ms = 25, .bubble_ms = 0,
                                     /* the global norm: steps 1-3 reported, others not */
                                     .has_norm = has_loss && s <= 3, .grad_norm = 0.5 * s};
    coord_history_steps(h, "ml", job, &p);
}

/* The job's object in the JSON (owned by `all`). */
static const cJSON *job_of(const cJSON *all, const char *name)
{
    const cJSON *j;
    cJSON_ArrayForEach(j, all) {
        const cJSON *n = cJSON_GetObjectItemCaseSensitive(j, "name");
        if (cJSON_IsString(n) && !strcmp(n->valuestring, name))
            return j;
    }
    return NULL;
}

static const cJSON *col(const cJSON *job, const char *k)
{
    return cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(job, "points"), k);
}

static double num_at(const cJSON *a, int i)
{
    const cJSON *v = cJSON_GetArrayItem(a, i);
    return cJSON_IsNumber(v) ? v->valuedouble : -1;
}

static void test_points(void)
{
    struct coord_history *h = coord_history_new(8);
    herr e = {0};
    for (long s = 1; s <= 5; s++) {
        step(h, "gpt", 1, s, 1, 10.0 - s, 1000); /* replica 0 of the last stage */
        step(h, "gpt", 1, s, 1, 10.0 - s + 1, 3000); /* replica 1: same step, merged */
        step(h, "gpt", 0, s, 0, 0, 0); /* the first stage reports no loss: no point */
    }
    cJSON *all = coord_history_json(h, &e);
    const cJSON *j = job_of(all, "gpt");
    CHECK("job listed", j != NULL);
    CHECK_INT("one point per step", cJSON_GetArraySize(col(j, "step")), 5);
    CHECK_NEAR("replicas' loss averaged", num_at(col(j, "loss"), 0), 9.5, 1e-9);
    CHECK_NEAR("replicas' tokens/s averaged (each reports the global rate)",
               num_at(col(j, "tokensPerSecond"), 0), 2000, 1e-9);
    CHECK_NEAR("step seconds", num_at(col(j, "stepSeconds"), 4), 0.1, 1e-9);
    CHECK("the gradient norm where reported, null elsewhere",
          cJSON_GetArraySize(col(j, "gradNorm")) == 5 && num_at(col(j, "gradNorm"), 2) == 1.5 &&
              cJSON_IsNull(cJSON_GetArrayItem(col(j, "gradNorm"), 3)));
    const cJSON *st = cJSON_GetObjectItemCaseSensitive(j, "stages");
    CHECK_INT("both stages' times", cJSON_GetArraySize(st), 2);
    const cJSON *s1 = cJSON_GetArrayItem(st, 1);
    CHECK_NEAR("compute", cJSON_GetObjectItemCaseSensitive(s1, "computeSeconds")->valuedouble, 0.06, 1e-9);
    CHECK_NEAR("comm", cJSON_GetObjectItemCaseSensitive(s1, "commSeconds")->valuedouble, 0.025, 1e-9);
    CHECK_NEAR("other = step - compute - comm - bubble",
               cJSON_GetObjectItemCaseSensitive(s1, "otherSeconds")->valuedouble, 0.015, 1e-6);
    cJSON_Delete(all);

    /* Bounded: 20 more steps keep the last 8. */
    for (long s = 6; s <= 25; s++)
        step(h, "gpt", 1, s, 1, 1.0, 100);
    all = coord_history_json(h, &e);
    j = job_of(all, "gpt");
    CHECK_INT("ring holds at most its size", cJSON_GetArraySize(col(j, "step")), 8);
    CHECK_INT("oldest dropped first", (long)num_at(col(j, "step"), 0), 18);
    CHECK_INT("newest last", (long)num_at(col(j, "step"), 7), 25);
    cJSON_Delete(all);

    /* A late report of a step already held merges; an older one than held is dropped. */
    step(h, "gpt", 1, 24, 1, 3.0, 100);
    step(h, "gpt", 1, 2, 1, 3.0, 100);
    all = coord_history_json(h, &e);
    j = job_of(all, "gpt");
    CHECK("a lagging replica's step merges", cJSON_GetArraySize(col(j, "step")) == 8 &&
                                                 fabs(num_at(col(j, "loss"), 6) - 2.0) < 1e-9);
    cJSON_Delete(all);

    /* Restart from the checkpoint at step 20: steps 21.. are trained again and replace. */
    coord_history_restarting(h, "ml", "gpt");
    step(h, "gpt", 1, 21, 1, 7.0, 100);
    all = coord_history_json(h, &e);
    j = job_of(all, "gpt");
    CHECK_INT("restart: later points dropped", cJSON_GetArraySize(col(j, "step")), 4);
    CHECK("restart: the new step's loss only", (long)num_at(col(j, "step"), 3) == 21 &&
                                                   fabs(num_at(col(j, "loss"), 3) - 7.0) < 1e-9);
    cJSON_Delete(all);
    coord_history_free(h);
}

static void test_status(void)
{
    struct coord_history *h = coord_history_new(0);
    herr e = {0};
    coord_history_phase(h, "ml", "gpt", "Running", "all in");
    coord_history_condition(h, "ml", "gpt", "Planned", 1, "Planned", "2 stages");
    coord_history_condition(h, "ml", "gpt", "Running", 1, "Running", "go");
    coord_history_condition(h, "ml", "gpt", "Running", 0, "Restarting", "worker 1 died");
    for (int i = 0; i < COORD_HISTORY_EVENTS + 5; i++) {
        char msg[32];
        snprintf(msg, sizeof msg, "event %d", i);
        coord_history_event(h, "ml", "gpt", "Normal", "Test", msg);
    }
    coord_history_restarts(h, "ml", "gpt", 2);
    cJSON *plan = cJSON_Parse("{\"pipeline\":2,\"stages\":[{\"index\":0,\"fabric\":\"ib-a\","
                              "\"workers\":[\"w-0\"]}]}");
    coord_history_plan(h, "ml", "gpt", plan);
    cJSON_Delete(plan); /* copied */
    cJSON *all = coord_history_json(h, &e);
    const cJSON *j = job_of(all, "gpt");
    CHECK_STR("phase", cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(j, "phase")), "Running");
    const cJSON *c = cJSON_GetObjectItemCaseSensitive(j, "conditions");
    CHECK_INT("a condition type is replaced, not added", cJSON_GetArraySize(c), 2);
    CHECK_STR("replaced condition's status",
              cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(cJSON_GetArrayItem(c, 1), "status")),
              "False");
    const cJSON *ev = cJSON_GetObjectItemCaseSensitive(j, "events");
    CHECK_INT("events bounded", cJSON_GetArraySize(ev), COORD_HISTORY_EVENTS);
    CHECK_STR("events oldest first, the oldest dropped",
              cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(cJSON_GetArrayItem(ev, 0), "message")),
              "event 5");
    CHECK_INT("restarts", cJSON_GetObjectItemCaseSensitive(j, "restarts")->valueint, 2);
    const cJSON *pl = cJSON_GetObjectItemCaseSensitive(j, "plan");
    CHECK_STR("plan kept", cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(
                               cJSON_GetArrayItem(cJSON_GetObjectItemCaseSensitive(pl, "stages"), 0),
                               "fabric")), "ib-a");
    CHECK("no points yet: empty columns", cJSON_GetArraySize(col(j, "step")) == 0);
    char *text = cJSON_PrintUnformatted(all);
    cJSON *back = text ? cJSON_Parse(text) : NULL;
    CHECK("the JSON parses back", back && cJSON_IsArray(back));
    cJSON_Delete(back);
    free(text);
    cJSON_Delete(all);

    coord_history_forget(h, "ml", "gpt");
    all = coord_history_json(h, &e);
    CHECK_INT("forgotten", cJSON_GetArraySize(all), 0);
    cJSON_Delete(all);
    coord_history_free(h);

    coord_history_phase(NULL, "ml", "x", "Running", NULL); /* no history: nothing, no crash */
    all = coord_history_json(NULL, &e);
    CHECK("a NULL history is an empty list", all && cJSON_GetArraySize(all) == 0);
    cJSON_Delete(all);
}

/* Messages longer than the history keeps (511 bytes), cut where a two-byte character stands
 * across the limit: the phase's message, a condition's and an event's come out well-formed
 * UTF-8 (the job page and status would otherwise carry half a character). */
static void test_long_messages(void)
{
    struct coord_history *h = coord_history_new(0);
    herr e = {0};
    char m[1024] = "xy"; /* then U+00E9s: byte 510, the last kept, starts one */
    for (int i = 0; i < 400; i++)
        strcat(m, "\xc3\xa9");
    coord_history_phase(h, "ml", "long", "Failed", m);
    coord_history_condition(h, "ml", "long", "Running", 0, "Failed", m);
    coord_history_event(h, "ml", "long", "Warning", "Failed", m);
    cJSON *all = coord_history_json(h, &e);
    const cJSON *j = job_of(all, "long");
    const char *got[3] = {
        cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(j, "message")),
        cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(
            cJSON_GetArrayItem(cJSON_GetObjectItemCaseSensitive(j, "conditions"), 0), "message")),
        cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(
            cJSON_GetArrayItem(cJSON_GetObjectItemCaseSensitive(j, "events"), 0), "message"))};
    int clean = 1;
    for (int i = 0; i < 3; i++) {
        char c[1024];
        snprintf(c, sizeof c, "%s", got[i] ? got[i] : "");
        herr_clean(c);
        clean &= got[i] && strlen(got[i]) == 511 && strcmp(c, got[i]) == 0;
    }
    CHECK("long messages cut on a character's boundary (phase, condition, event)", clean);
    cJSON_Delete(all);
    coord_history_free(h);
}

int main(void)
{
    test_points();
    test_status();
    test_long_messages();
    TEST_MAIN_END();
}
