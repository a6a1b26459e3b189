#include "local_console.h"

#include <stdarg.h>
#include <stdio.h>

#include "clock.h"

void local_console_duration(double s, char *buf, size_t cap)
{
    if (s < 0) {
        snprintf(buf, cap, "?");
        return;
    }
    long t = (long)(s + 0.5);
    if (t >= 3600)
        snprintf(buf, cap, "%ldh%02ldm", t / 3600, (t / 60) % 60);
    else if (t >= 60)
        snprintf(buf, cap, "%ldm%02lds", t / 60, t % 60);
    else
        snprintf(buf, cap, "%lds", t);
}

void local_console_end_line(struct local_console *con)
{
    if (con->line_open) {
        printf("\n");
        con->line_open = 0;
    }
}

void local_console_say(struct local_console *con, const char *tag, const char *fmt, ...)
{
    local_console_end_line(con);
    printf("[%s] ", tag);
    va_list ap;
    va_start(ap, fmt);
    vprintf(fmt, ap);
    va_end(ap);
    printf("\n");
    fflush(stdout);
}

/* TeraPipe: the slicing the plan carries, beside the unsliced prediction. */
static void print_slices(const struct plan *p)
{
    if (p->slices > 1) {
        char lens[512];
        plan_doc_slice_lengths(p->slice_bounds, p->slices, lens, sizeof lens);
        printf("  token slices: %d (%s tokens), chosen by the %s; unsliced: %.3f s\n", p->slices,
               lens, p->slices_auto ? "planner" : "spec", p->unsliced_step_s);
    } else if (p->slices_auto) {
        printf("  token slices: none (tokenSlices auto: slicing does not pay here%s)\n",
               p->auto_rejected_slices > 1 ? ", the best found was slower" : "");
    }
}

/* The workers of stage s, each once ("x2" when it holds two ranks, GPUs, of the stage), with
 * their NICs. */
static void stage_workers(const struct plan *p, const struct coord_worker *w, int s, char *ws,
                          size_t cap)
{
    size_t used = 0;
    ws[0] = '\0';
    for (int r = 0; r < p->n_ranks; r++) {
        int wi = p->ranks[r].worker, seen = 0, here = 0;
        if (p->ranks[r].stage != s)
            continue;
        for (int q = 0; q < p->n_ranks; q++)
            if (p->ranks[q].stage == s && p->ranks[q].worker == wi) {
                seen += q < r;
                here++;
            }
        if (seen)
            continue;
        const struct coord_worker *cw = &w[wi];
        char times[16] = "";
        if (here > 1)
            snprintf(times, sizeof times, " x%d", here);
        int k = snprintf(ws + used, cap - used, "%s%s%s (%s %g Gb/s)", used ? ", " : "", cw->pod,
                         times, nic_class_name(cw->nic.cls), cw->nic.gbps);
        if (k > 0 && (size_t)k < cap - used)
            used += (size_t)k;
    }
}

void local_console_placement(struct local_console *con, const struct plan *p,
                             const struct coord_worker *w)
{
    local_console_end_line(con);
    char tensor[32] = "";
    if (p->tensor > 1) /* a tensor group inside each worker */
        snprintf(tensor, sizeof tensor, "tensor %d x ", p->tensor);
    char sched[256];
    plan_schedule_text(p, sched, sizeof sched);
    printf("placement (%s policy): %spipeline %d x data %d, %d micro-batches of %d, %s\n",
           policy_name(p->policy), tensor, p->pipeline, p->data, p->micro_batches,
           p->micro_batch_size, sched);
    printf("  %-6s %-12s %-9s %s\n", "stage", "fabric", "layers", "workers");
    for (int s = 0; s < p->n_stages; s++) {
        char ws[512], layers[32];
        stage_workers(p, w, s, ws, sizeof ws);
        snprintf(layers, sizeof layers, "%d-%d", p->stages[s].first_layer,
                 p->stages[s].last_layer - 1);
        printf("  %-6d %-12s %-9s %s\n", s, p->stages[s].fabric, layers, ws);
    }
    for (int g = 0; g < p->n_groups; g++) {
        const struct plan_group *pg = &p->groups[g];
        if (pg->kind != GROUP_DP || pg->n < 2)
            continue;
        printf("  data-parallel group of stage %d: %s%s%s\n", pg->stage,
               transport_name(pg->transport.kind), pg->transport.reason[0] ? " - " : "",
               pg->transport.reason);
    }
    printf("  predicted step time %.3f s (model's estimate for the emulated fabrics)\n",
           p->step_s);
    print_slices(p);
    fflush(stdout);
}

void local_console_progress(struct local_console *con, const struct coord_progress *p)
{
    if (con->quiet)
        return;
    if (p->eval_step > con->eval_said) { /* training.eval: each new held-out loss, once */
        con->eval_said = p->eval_step;
        local_console_say(con, "Eval", "held-out loss %.4f after step %ld", p->eval_loss,
                          p->eval_step);
    }
    char eta[32], loss[32] = "-", norm[32] = "", skipped[48] = "";
    local_console_duration(p->eta_s, eta, sizeof eta);
    if (p->has_loss) /* none: the workers' newest step was skipped (not finite) */
        snprintf(loss, sizeof loss, "%.4f", p->loss);
    if (p->has_norm)
        snprintf(norm, sizeof norm, "  norm %.3g", p->grad_norm);
    if (p->skipped_steps > 0)
        snprintf(skipped, sizeof skipped, "  %ld skipped", p->skipped_steps);
    char line[256];
    snprintf(line, sizeof line, "step %ld/%ld  loss %s%s  %.0f tokens/s  %.0f ms/step  ETA %s%s",
             p->step, p->total_steps, loss, norm, p->tokens_per_s, p->step_ms, eta, skipped);
    if (con->tty) {
        printf("\r%-100s", line);
        con->line_open = 1;
    } else {
        double t = clock_mono_s();
        if (t - con->last_print < 5.0 && p->step < p->total_steps)
            return;
        con->last_print = t;
        printf("%s\n", line);
    }
    fflush(stdout);
}
