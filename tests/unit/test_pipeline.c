/* Pipeline schedules on a toy model (stage s: y = w_s * x + b_s elementwise; squared-error loss
 * on the last stage), in forked processes over TCP: per-stage gradients and the loss match a
 * single-process computation; 1F1B never needs more than stages - stage activation slots. With
 * the bf16 wire they match the single process that rounds to bfloat16 where a stage boundary
 * is, and differ from the exact one. With token slices (the D elements cut in 3 uneven slices)
 * every stage sees each micro-batch's slices forward in order and backward in reverse, only
 * after its last slice was forwarded, within the slots pipe_slots gives, and holds that many
 * at its peak (also with a deeper warm-up, warmup_extra). With a tensor
 * group (scatter-gather: each stage held by t processes) the results are the same and each
 * process sends exactly its 1/t share of every unit. On the emulated device (devmem.h) the
 * activations are staged through host buffers as a GPU's are, with the same results. */
#include "test.h"

#include <math.h>
#include <stdint.h>
#include <stdlib.h>

#include "bf16.h"
#include "comm_testutil.h"
#include "pipeline.h"

#define D 37
#define MAXM 8

static float data_x(int mb, int i) { return (float)((mb * 31 + i * 7) % 13) / 13.0f - 0.5f; }
static float data_t(int mb, int i) { return (float)((mb * 17 + i * 5) % 11) / 11.0f; }
static float param_w(int s, int i) { return 0.5f + 0.1f * (float)((s * 3 + i) % 7); }
static float param_b(int s, int i) { return 0.05f * (float)((s + 2 * i) % 5) - 0.1f; }

struct toy {
    int stage, stages, M, slots, S;
    const int *bounds;          /* [S + 1] slice k: elements [bounds[k], bounds[k + 1]) */
    float w[D], b[D], gw[D], gb[D];
    float x[MAXM][D], y[MAXM][D];
    int busy[MAXM], busy_mb[MAXM];
    int fwd_next[MAXM], bwd_next[MAXM]; /* the slice each slot's micro-batch expects next */
    int overflow;
    int in_flight, peak;        /* micro-batches forwarded and not yet backward: now, at most */
};

static const int whole_bounds[] = {0, D};

static int toy_forward(void *ctx, int mb, int slot, int k, const void *in_v, void *out_v,
                       float *loss, herr *e)
{
    struct toy *t = ctx;
    const float *in = in_v;
    float *out = out_v;
    if (k == 0) {
        if (slot >= t->slots || t->busy[slot]) {
            t->overflow = 1;
            return herr_set(e, "slot %d reused while busy", slot);
        }
        t->busy[slot] = 1;
        t->busy_mb[slot] = mb;
        if (++t->in_flight > t->peak)
            t->peak = t->in_flight;
        t->fwd_next[slot] = 0;
        t->bwd_next[slot] = t->S - 1;
    }
    if (!t->busy[slot] || t->busy_mb[slot] != mb || t->fwd_next[slot] != k)
        return herr_set(e, "forward of micro-batch %d slice %d on slot %d out of order", mb, k, slot);
    t->fwd_next[slot] = k + 1;
    int lo = t->bounds[k], hi = t->bounds[k + 1];
    for (int i = lo; i < hi; i++) {
        t->x[slot][i] = in ? in[i - lo] : data_x(mb, i);
        t->y[slot][i] = t->w[i] * t->x[slot][i] + t->b[i];
    }
    if (out)
        memcpy(out, t->y[slot] + lo, (size_t)(hi - lo) * sizeof(float));
    else {
        float l = 0;
        for (int i = lo; i < hi; i++) {
            float d = t->y[slot][i] - data_t(mb, i);
            l += 0.5f * d * d;
        }
        *loss = l / D;
    }
    return 0;
}

static int toy_backward(void *ctx, int mb, int slot, int k, const void *dout_v, void *din_v,
                        herr *e)
{
    struct toy *t = ctx;
    const float *dout = dout_v;
    float *din = din_v;
    if (!t->busy[slot] || t->busy_mb[slot] != mb || t->bwd_next[slot] != k ||
        t->fwd_next[slot] != t->S)
        return herr_set(e, "backward of micro-batch %d slice %d on slot %d out of order", mb, k,
                        slot);
    t->bwd_next[slot] = k - 1;
    if (k == 0) {
        t->busy[slot] = 0;
        t->in_flight--;
    }
    int lo = t->bounds[k], hi = t->bounds[k + 1];
    for (int i = lo; i < hi; i++) {
        float dy = dout ? dout[i - lo] : (t->y[slot][i] - data_t(mb, i)) / D / (float)t->M;
        t->gw[i] += dy * t->x[slot][i];
        t->gb[i] += dy;
        if (din)
            din[i - lo] = dy * t->w[i];
    }
    return 0;
}

/* What crosses a stage boundary: x itself, or x rounded to bfloat16 (bf16). */
static float wire(float x, int bf16) { return bf16 ? bf16_to_float(bf16_from_float(x)) : x; }

/* Whole model in one process: gradients of stage `want` and the total loss; bf16: values are
 * rounded to bfloat16 where they cross a stage boundary. */
static void reference(int stages, int M, int want, int bf16, float *gw, float *gb, float *loss)
{
    memset(gw, 0, D * sizeof *gw);
    memset(gb, 0, D * sizeof *gb);
    *loss = 0;
    for (int mb = 0; mb < M; mb++) {
        float xs[8][D], y[D], dy[D];
        for (int i = 0; i < D; i++)
            y[i] = data_x(mb, i);
        for (int s = 0; s < stages; s++)
            for (int i = 0; i < D; i++) {
                xs[s][i] = s > 0 ? wire(y[i], bf16) : y[i];
                y[i] = param_w(s, i) * xs[s][i] + param_b(s, i);
            }
        float l = 0;
        for (int i = 0; i < D; i++) {
            float d = y[i] - data_t(mb, i);
            l += 0.5f * d * d;
            dy[i] = d / D / (float)M;
        }
        *loss += l / D;
        for (int s = stages - 1; s >= 0; s--)
            for (int i = 0; i < D; i++) {
                if (s == want) {
                    gw[i] += dy[i] * xs[s][i];
                    gb[i] += dy[i];
                }
                dy[i] = dy[i] * param_w(s, i);
                if (s > 0)
                    dy[i] = wire(dy[i], bf16);
            }
    }
}

struct case_arg {
    int M;
    enum schedule sched;
    enum dtype wire;
    int S;               /* token slices (0: none) */
    int tp;              /* processes per stage (0: 1) */
    int emulated;        /* buffers in the emulated device's memory */
    int warm;            /* 1F1B: warmup_extra (pipe_order.h) */
};

static const int three_slices[] = {0, 5, 17, D};

/* The group of `size` members whose global ranks are first + i * stride, as member `index`. */
static int sub_group(struct comm **c, struct tcp_listener *l, const struct tcp_endpoint *eps,
                     const char *name, uint32_t id, int first, int stride, int size, int index)
{
    struct tcp_endpoint sub[8];
    for (int i = 0; i < size; i++)
        sub[i] = eps[first + i * stride];
    struct tcp_group_spec s;
    herr e;
    group_spec(&s, name, id, size, index, sub, 20);
    if (comm_create(c, l, &s, &e) != 0) {
        fprintf(stderr, "%s: %s\n", name, e.msg);
        return -1;
    }
    return 0;
}

/* Bytes one tensor rank sends on its pipeline links in a run: its chunk of every unit, each way. */
static uint64_t share_bytes(const struct case_arg *ca, int stage, int stages, int tp, int tpr)
{
    int S = ca->S > 1 ? ca->S : 1;
    const int *b = ca->S > 1 ? three_slices : whole_bounds;
    size_t esz = ca->wire == DTYPE_BF16 ? 2 : 4;
    int ways = (stage > 0) + (stage < stages - 1);
    uint64_t sum = 0;
    for (int k = 0; k < S; k++) {
        size_t off, len;
        tcp_chunk((size_t)(b[k + 1] - b[k]), tp, tpr, &off, &len);
        sum += (uint64_t)len * esz;
    }
    return sum * (uint64_t)ca->M * (uint64_t)ways;
}

static int run_stage(int rank, int n, struct tcp_listener *l, const struct tcp_endpoint *eps, void *arg)
{
    struct case_arg *ca = arg;
    herr e;
    int tp = ca->tp > 1 ? ca->tp : 1, tpr = rank % tp;
    n /= tp;          /* stages */
    rank /= tp;       /* this process's stage */
    struct comm *c = NULL, *tc = NULL;
    struct devmem *mem = ca->emulated ? devmem_emulated() : devmem_host();
    if (n > 1 && sub_group(&c, l, eps, "pipeline", 21 + (uint32_t)tpr, tpr, tp, n, rank) != 0)
        return 1;
    if (tp > 1 && sub_group(&tc, l, eps, "tensor", 41 + (uint32_t)rank, rank * tp, 1, tp, tpr) != 0)
        return 1;
    if ((c && comm_set_devmem(c, mem, &e) != 0) || (tc && comm_set_devmem(tc, mem, &e) != 0))
        return 1;
    static struct toy t;
    memset(&t, 0, sizeof t);
    t.stage = rank;
    t.stages = n;
    t.M = ca->M;
    t.S = ca->S > 1 ? ca->S : 1;
    t.bounds = ca->S > 1 ? three_slices : whole_bounds;
    t.slots = pipe_slots(ca->sched, rank, n, ca->M, ca->S, ca->warm);
    for (int i = 0; i < D; i++) {
        t.w[i] = param_w(rank, i);
        t.b[i] = param_b(rank, i);
    }
    struct pipe_stage_ops ops = {&t, D, toy_forward, toy_backward};
    struct pipe_config cfg = {.stage = rank, .stages = n, .micro_batches = ca->M,
                              .schedule = ca->sched, .prev = {c, c, rank - 1},
                              .next = {c, c, rank + 1}, .wire = ca->wire, .slices = ca->S,
                              .bounds = ca->S > 1 ? three_slices : NULL, .mem = mem,
                              .act_bytes = 4, .tp = tc, .warmup_extra = ca->warm};
    struct pipe_runner *p;
    int bad = 0;
    float loss = 0;
    if (pipe_runner_create(&p, &cfg, &ops, &e) != 0 || pipe_run(p, &loss, &e) != 0) {
        fprintf(stderr, "rank %d: %s\n", rank, e.msg);
        bad = 1;
    } else {
        pipe_runner_free(p);
    }
    /* the schedule holds as many micro-batches at once as its slots: the warm-up took effect */
    if (!bad && t.peak != t.slots) {
        fprintf(stderr, "stage %d: at most %d micro-batches in flight, %d slots\n", rank, t.peak,
                t.slots);
        bad = 1;
    }
    if (c && !bad) {
        uint64_t want = share_bytes(ca, rank, n, tp, tpr), sent = comm_bytes_sent(c);
        if (sent != want) {
            fprintf(stderr, "stage %d tensor rank %d sent %llu bytes, its share is %llu\n", rank,
                    tpr, (unsigned long long)sent, (unsigned long long)want);
            bad = 1;
        }
        if ((comm_bytes_staged(c) > 0) != (ca->emulated != 0)) {
            fprintf(stderr, "stage %d: %llu bytes staged\n", rank,
                    (unsigned long long)comm_bytes_staged(c));
            bad = 1;
        }
    }
    float gw[D], gb[D], rloss, xw[D], xb[D], xloss;
    int bf16 = ca->wire == DTYPE_BF16;
    reference(n, ca->M, rank, bf16, gw, gb, &rloss);
    reference(n, ca->M, rank, 0, xw, xb, &xloss);
    if (bf16 && n > 1 && !bad) { /* the rounding must show: somewhere the exact gradient differs */
        int differs = 0;
        for (int i = 0; i < D; i++)
            differs |= fabsf(xw[i] - t.gw[i]) > 1e-6f * (1 + fabsf(xw[i]));
        if (!differs && rank < n - 1) {
            fprintf(stderr, "rank %d: bf16 wire gave the exact (fp32) gradients\n", rank);
            bad = 1;
        }
    }
    for (int i = 0; i < D && !bad; i++)
        if (fabsf(gw[i] - t.gw[i]) > 1e-6f * (1 + fabsf(gw[i])) ||
            fabsf(gb[i] - t.gb[i]) > 1e-6f * (1 + fabsf(gb[i]))) {
            fprintf(stderr, "rank %d: gradient %d differs: %g vs %g\n", rank, i, t.gw[i], gw[i]);
            bad = 1;
        }
    if (!bad && rank == n - 1 && fabsf(loss - rloss) > 1e-6f * rloss) {
        fprintf(stderr, "rank %d: loss %g vs %g\n", rank, loss, rloss);
        bad = 1;
    }
    if (c && comm_barrier(c, &e) != 0)
        bad = 1;
    if (tc && comm_barrier(tc, &e) != 0)
        bad = 1;
    comm_free(c);
    comm_free(tc);
    return bad;
}

static uint16_t bits_bf16(uint32_t u)
{
    float x;
    memcpy(&x, &u, sizeof x);
    return bf16_from_float(x);
}

int main(void)
{
    static const int Ps[] = {1, 2, 3, 4};
    static const int Ms[] = {2, 5};
    for (int si = 0; si < 2; si++)
        for (size_t pi = 0; pi < 4; pi++)
            for (size_t mi = 0; mi < 2; mi++) {
                struct case_arg ca = {Ms[mi], si ? SCHED_1F1B : SCHED_GPIPE, DTYPE_FP32, 0, 1, 0, 0};
                char name[96];
                snprintf(name, sizeof name, "%s %d stages %d micro-batches matches single process",
                         schedule_name(ca.sched), Ps[pi], Ms[mi]);
                CHECK_INT(name, run_group(Ps[pi], run_stage, &ca, -1, 60), 0);
            }
    for (int si = 0; si < 2; si++)
        for (size_t pi = 1; pi < 4; pi++) {
            struct case_arg ca = {5, si ? SCHED_1F1B : SCHED_GPIPE, DTYPE_BF16, 0, 1, 0, 0};
            char name[96];
            snprintf(name, sizeof name, "%s %d stages, bf16 wire: the rounded single process",
                     schedule_name(ca.sched), Ps[pi]);
            CHECK_INT(name, run_group(Ps[pi], run_stage, &ca, -1, 60), 0);
        }
    for (int si = 0; si < 2; si++)
        for (size_t pi = 0; pi < 4; pi++)
            for (size_t mi = 0; mi < 2; mi++) {
                struct case_arg ca = {Ms[mi], si ? SCHED_1F1B : SCHED_GPIPE, DTYPE_FP32, 3, 1, 0, 0};
                char name[112];
                snprintf(name, sizeof name, "%s %d stages %d micro-batches x 3 token slices "
                         "matches single process", schedule_name(ca.sched), Ps[pi], Ms[mi]);
                CHECK_INT(name, run_group(Ps[pi], run_stage, &ca, -1, 60), 0);
            }
    /* scatter-gather across a tensor group of 2 and 3, with slices, the bf16 wire, and on the
     * emulated device */
    struct {
        int P, tp, S, emu;
        enum schedule sched;
        enum dtype wire;
    } sg[] = {{2, 2, 0, 0, SCHED_1F1B, DTYPE_FP32}, {3, 2, 3, 0, SCHED_GPIPE, DTYPE_FP32},
              {2, 3, 3, 0, SCHED_1F1B, DTYPE_BF16}, {2, 2, 0, 1, SCHED_1F1B, DTYPE_FP32},
              {3, 2, 3, 1, SCHED_1F1B, DTYPE_BF16}, {4, 1, 0, 1, SCHED_GPIPE, DTYPE_FP32}};
    for (size_t i = 0; i < sizeof sg / sizeof sg[0]; i++) {
        struct case_arg ca = {5, sg[i].sched, sg[i].wire, sg[i].S, sg[i].tp, sg[i].emu, 0};
        char name[160];
        snprintf(name, sizeof name, "%s %d stages x tensor %d%s%s%s: single process, each sends "
                 "its share", schedule_name(ca.sched), sg[i].P, sg[i].tp,
                 ca.S ? ", 3 token slices" : "", ca.wire == DTYPE_BF16 ? ", bf16 wire" : "",
                 ca.emulated ? ", emulated device (staged)" : "");
        CHECK_INT(name, run_group(sg[i].P * sg[i].tp, run_stage, &ca, -1, 60), 0);
    }
    /* a deeper 1F1B warm-up (pipe_order.h): the same results, the extra micro-batches in flight
     * on every stage but the last (the first stage up to all of them) */
    struct {
        int P, M, S, warm;
    } wu[] = {{2, 5, 0, 1}, {3, 5, 0, 2}, {4, 8, 0, 1}, {4, 5, 0, 9}, {3, 5, 3, 1}, {2, 2, 3, 4}};
    for (size_t i = 0; i < sizeof wu / sizeof wu[0]; i++) {
        struct case_arg ca = {wu[i].M, SCHED_1F1B, DTYPE_FP32, wu[i].S, 1, 0, wu[i].warm};
        char name[160];
        snprintf(name, sizeof name, "1f1b %d stages %d micro-batches%s, warm-up +%d: single "
                 "process, %d in flight on the first stage", wu[i].P, wu[i].M,
                 wu[i].S ? " x 3 token slices" : "", wu[i].warm,
                 pipe_slots(SCHED_1F1B, 0, wu[i].P, wu[i].M, wu[i].S, wu[i].warm));
        CHECK_INT(name, run_group(wu[i].P, run_stage, &ca, -1, 60), 0);
    }
    CHECK_INT("warm-up +2: the first of 4 stages holds 4 + 2", pipe_slots(SCHED_1F1B, 0, 4, 8, 1, 2), 6);
    CHECK_INT("warm-up +2: the last stage keeps 1", pipe_slots(SCHED_1F1B, 3, 4, 8, 1, 2), 1);
    CHECK_INT("warm-up +9 of 5 micro-batches: all of them", pipe_slots(SCHED_1F1B, 0, 4, 5, 1, 9), 5);
    CHECK_INT("warm-up +1 with 4 slices: (6 + 4 + 7) / 4 on the first of 4 stages", pipe_slots(SCHED_1F1B, 0, 4, 8, 4, 1), 4);
    {
        /* the order: stage 0 of 3 with +1 forwards 3 units, then alternates, then backwards */
        static const int want[] = {0, 0, 0, 0, 1, 0, 1, 1, 1, 1};
        int ok = 1;
        long prev_b = -1;
        for (long k = 0; k < 10; k++) {
            long u;
            int b = pipe_op_at(SCHED_1F1B, 0, 3, k, 5, 1, 1, &u);
            ok &= b == want[k];
            if (b) {
                ok &= u == prev_b + 1; /* backwards keep their order: the same gradient sums */
                prev_b = u;
            }
        }
        CHECK("warm-up +1, stage 0 of 3, 5 micro-batches: F F F F B F B B B B, backwards in order", ok);
    }
    /* round to nearest even on the 16 bits kept */
    CHECK_INT("bf16 1.0", bits_bf16(0x3f800000u), 0x3f80);
    CHECK_INT("bf16 rounds a tie down to even", bits_bf16(0x3f808000u), 0x3f80);
    CHECK_INT("bf16 rounds a tie up to even", bits_bf16(0x3f818000u), 0x3f82);
    CHECK_INT("bf16 rounds above the tie up", bits_bf16(0x3f808001u), 0x3f81);
    CHECK_INT("bf16 -0", bits_bf16(0x80000000u), 0x8000);
    CHECK_INT("bf16 infinity", bits_bf16(0x7f800000u), 0x7f80);
    CHECK_INT("bf16 FLT_MAX rounds to infinity", bits_bf16(0x7f7fffffu), 0x7f80);
    uint16_t nan = bits_bf16(0x7f800001u); /* payload only in the low bits */
    CHECK("bf16 NaN stays NaN", (nan & 0x7f80) == 0x7f80 && (nan & 0x7f) != 0);
    CHECK("bf16 widened back exactly", bf16_to_float(0x3fc0) == 1.5f);
    CHECK_INT("1f1b slots bounded by stages - stage", pipe_slots(SCHED_1F1B, 1, 4, 8, 1, 0), 3);
    CHECK_INT("gpipe slots = micro-batches", pipe_slots(SCHED_GPIPE, 1, 4, 8, 1, 0), 8);
    CHECK_INT("1f1b with 4 slices: the last stage holds 2 micro-batches", pipe_slots(SCHED_1F1B, 3, 4, 8, 4, 0), 2);
    CHECK_INT("1f1b with 4 slices: the first of 4 stages (6 units of warm-up) holds 3", pipe_slots(SCHED_1F1B, 0, 4, 8, 4, 0), 3);
    enum schedule s;
    CHECK_INT("bad schedule rejected", schedule_parse("zigzag", &s), -1);
    CHECK("schedule names round-trip", schedule_parse(schedule_name(SCHED_GPIPE), &s) == 0 &&
                                           s == SCHED_GPIPE);
    TEST_MAIN_END();
}
