/* The coordinator's per-job gauges: set, rendered with their labels, forgotten. */
#include "test.h"

#include <stdlib.h>

#include "coord_metrics.h"

static char *render(struct coord_metrics *m)
{
    struct metrics_buf b = {0};
    coord_metrics_render(m, &b);
    return b.data ? b.data : calloc(1, 1);
}

int main(void)
{
    struct coord_metrics *m = coord_metrics_new();
    CHECK("created", m != NULL);
    if (!m)
        TEST_MAIN_END();
    char *t = render(m);
    CHECK("no job: families but no samples", strstr(t, "# TYPE holmes_job_step_seconds gauge") &&
                                                 !strstr(t, "holmes_job_step_seconds{"));
    free(t);
    coord_metrics_plan(m, "ml", "gpt", 0.25, 2, 2);
    coord_metrics_progress(m, "ml", "gpt", 0.5, 1234.5, 1.5);
    coord_metrics_stage(m, "ml", "gpt", 1, 0.3, 0.1, 0.05);
    coord_metrics_stage(m, "ml", "gpt", 99, 1, 1, 1); /* beyond the protocol's stages: ignored */
    coord_metrics_restarts(m, "ml", "gpt", 3);
    coord_metrics_loss(m, "ml", "gpt", 2.75);
    coord_metrics_eval(m, "ml", "gpt", 2.875);
    coord_metrics_grad_norm(m, "ml", "gpt", 0.625);
    coord_metrics_skipped(m, "ml", "gpt", 4);
    coord_metrics_progress(m, "ml", "other", 0.1, 10, 0.1);
    t = render(m);
    CHECK("predicted step", strstr(t, "holmes_job_predicted_step_seconds{namespace=\"ml\",job=\"gpt\"} 0.25\n"));
    CHECK("groups on TCP", strstr(t, "holmes_job_socket_groups{namespace=\"ml\",job=\"gpt\"} 2\n"));
    CHECK("step time", strstr(t, "holmes_job_step_seconds{namespace=\"ml\",job=\"gpt\"} 0.5\n"));
    CHECK("tokens/s", strstr(t, "holmes_job_tokens_per_second{namespace=\"ml\",job=\"gpt\"} 1234.5\n"));
    CHECK("restarts", strstr(t, "holmes_job_restarts{namespace=\"ml\",job=\"gpt\"} 3\n"));
    CHECK("stage parts", strstr(t, "holmes_job_stage_seconds{namespace=\"ml\",job=\"gpt\",stage=\"1\",part=\"compute\"} 0.3\n") &&
                             strstr(t, "stage=\"1\",part=\"bubble\"} 0.05\n") && !strstr(t, "stage=\"99\""));
    CHECK("loss, held-out loss, gradient norm, steps skipped",
          strstr(t, "holmes_job_loss{namespace=\"ml\",job=\"gpt\"} 2.75\n") &&
              strstr(t, "holmes_job_eval_loss{namespace=\"ml\",job=\"gpt\"} 2.875\n") &&
              strstr(t, "holmes_job_grad_norm{namespace=\"ml\",job=\"gpt\"} 0.625\n") &&
              strstr(t, "holmes_job_skipped_steps{namespace=\"ml\",job=\"gpt\"} 4\n"));
    CHECK("a job with no loss reported has none, and 0 steps skipped",
          !strstr(t, "holmes_job_loss{namespace=\"ml\",job=\"other\"}") &&
              strstr(t, "holmes_job_skipped_steps{namespace=\"ml\",job=\"other\"} 0\n"));
    CHECK("an unplanned job has no prediction", !strstr(t, "predicted_step_seconds{namespace=\"ml\",job=\"other\"}") &&
                                                    strstr(t, "holmes_job_step_seconds{namespace=\"ml\",job=\"other\"} 0.1\n"));
    free(t);
    coord_metrics_forget(m, "ml", "gpt");
    t = render(m);
    CHECK("forgotten: its series end", !strstr(t, "job=\"gpt\"") && strstr(t, "job=\"other\""));
    free(t);
    coord_metrics_free(m);
    coord_metrics_progress(NULL, "ml", "x", 1, 1, 1); /* no table: nothing, no crash */
    TEST_PASS("a NULL table is ignored");
    TEST_MAIN_END();
}
