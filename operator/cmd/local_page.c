#include "local_page.h"

#include <stdio.h>
#include <string.h>

#include "coord_plan.h"
#include "job_page.h"

void local_page_plan(struct local_page *pg, const struct plan *p, const struct coord_worker *w,
                     int n)
{
    cJSON *pj = coord_plan_status_json(p, w);
    coord_history_plan(pg->history, pg->ns, pg->name, pj);
    cJSON_Delete(pj);
    char gang[96];
    snprintf(gang, sizeof gang, "all %d workers said hello", n);
    coord_history_condition(pg->history, pg->ns, pg->name, "GangReady", 1, "AllWorkersConnected",
                            gang);
    coord_history_condition(pg->history, pg->ns, pg->name, "Planned", 1, "Planned", "planned");
}

void local_page_state(struct local_page *pg, enum coord_job_state s, const char *msg,
                      int restarts)
{
    static const char *const phases[] = {
        [COORD_GATHERING] = "Discovering", [COORD_RENDEZVOUS] = "Planning",
        [COORD_RUNNING] = "Running", [COORD_RESTARTING] = "Running",
        [COORD_SUCCEEDED] = "Succeeded", [COORD_FAILED] = "Failed"};
    struct coord_history *h = pg->history;
    const char *ns = pg->ns, *name = pg->name;
    int warn = s == COORD_RESTARTING || s == COORD_FAILED || strstr(msg, "gang timeout") ||
               strncmp(msg, "refused", 7) == 0;
    coord_history_event(h, ns, name, warn ? "Warning" : "Normal", coord_state_name(s), msg);
    coord_history_phase(h, ns, name, phases[s], s == COORD_FAILED ? msg : NULL);
    if (s == COORD_RUNNING)
        coord_history_condition(h, ns, name, "Running", 1, "Running", msg);
    else if (s == COORD_RESTARTING) {
        coord_history_condition(h, ns, name, "Running", 0, "Restarting", msg);
        coord_history_restarting(h, ns, name);
        coord_history_restarts(h, ns, name, restarts);
    } else if (s == COORD_FAILED)
        coord_history_condition(h, ns, name, "Failed", 1, "JobFailed", msg);
    else if (s == COORD_SUCCEEDED)
        coord_history_condition(h, ns, name, "Succeeded", 1, "Succeeded", msg);
}

void local_page_event(struct local_page *pg, const char *type, const char *reason,
                      const char *msg)
{
    coord_history_event(pg->history, pg->ns, pg->name, type, reason, msg);
}

void local_page_notice(struct local_page *pg, const char *reason, const char *msg)
{
    coord_history_event(pg->history, pg->ns, pg->name, "Warning", reason, msg);
    coord_history_condition(pg->history, pg->ns, pg->name, reason, 1, reason, msg);
}

void local_page_steps(struct local_page *pg, const struct proto_progress *p)
{
    coord_history_steps(pg->history, pg->ns, pg->name, p);
}

static int page_handler(void *user, const struct http_request *req, struct metrics_buf *b,
                        const char **type)
{
    struct local_page *pg = user;
    cJSON *jobs = NULL;
    herr e = {0};
    if (strcmp(req->path, JOB_PAGE_API_PATH) == 0)
        jobs = job_page_jobs(NULL, coord_history_json(pg->history, &e));
    return job_page_serve(req->path, jobs, b, type);
}

int local_page_start(struct local_page *pg, const char *addr, const char *ns, const char *name)
{
    pg->ns = ns;
    pg->name = name;
    if (!(pg->history = coord_history_new(0))) {
        fprintf(stderr, "holmes-operator local: out of memory\n");
        return -1;
    }
    if (strcmp(addr, "0") == 0)
        return 0;
    herr e = {0};
    if (!(pg->server = http_server_start(addr, page_handler, pg, NULL, &e))) {
        fprintf(stderr, "holmes-operator local: --page-addr: %s\n", e.msg);
        return -1;
    }
    const char *colon = strrchr(addr, ':');
    int hl = (int)(colon - addr);
    int any = hl == 0 || (hl == 7 && strncmp(addr, "0.0.0.0", 7) == 0);
    printf("job page: http://%.*s:%d%s\n", any ? 9 : hl, any ? "127.0.0.1" : addr,
           http_server_port(pg->server), JOB_PAGE_PATH);
    return 0;
}

void local_page_stop(struct local_page *pg)
{
    http_server_stop(pg->server);
    pg->server = NULL;
    coord_history_free(pg->history);
    pg->history = NULL;
}
