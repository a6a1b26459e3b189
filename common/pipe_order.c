#include "pipe_order.h"

long pipe_warm_units(int stage, int stages, int slices, long units, int extra)
{
    int S = slices > 1 ? slices : 1;
    long w = (long)(stages - stage - 1) + (S - 1);
    if (stage < stages - 1 && extra > 0)
        w += (long)extra * S;
    return w < units ? w : units;
}

int pipe_slots(enum schedule s, int stage, int stages, int micro_batches, int slices, int extra)
{
    if (s == SCHED_GPIPE)
        return micro_batches;
    int S = slices > 1 ? slices : 1;
    /* the forward of unit f = (m + slots) S reuses m's slot: m's last backward (unit m S + S - 1)
     * is done by then, as 1F1B has done f - warm backwards */
    long n = (pipe_warm_units(stage, stages, S, (long)micro_batches * S, extra) + 2L * S - 1) / S;
    return n < micro_batches ? (int)n : micro_batches;
}

int pipe_op_at(enum schedule s, int stage, int stages, long k, long U, int slices, int extra,
               long *unit)
{
    int S = slices > 1 ? slices : 1;
    long j;
    int b;
    if (s == SCHED_GPIPE) {
        b = k >= U;
        j = b ? k - U : k;
    } else {
        long w = pipe_warm_units(stage, stages, S, U, extra), k2 = k - w;
        if (k < w) {
            j = k;
            b = 0;
        } else if (k2 < 2 * (U - w)) {
            b = (int)(k2 % 2);
            j = b ? k2 / 2 : w + k2 / 2;
        } else {
            j = (U - w) + (k2 - 2 * (U - w));
            b = 1;
        }
    }
    *unit = b ? j / S * S + (S - 1 - j % S) : j;
    return b;
}
