/* A tensor-parallel group of threads, for tests: the group's sum (gpt_stage_set_tp_sum's
 * contract: every rank's buf[n] becomes the element-wise sum, all ranks calling in the same
 * order) over one shared accumulator. test_gpt_tp (CPU engine) and test_gpu (CUDA engine) run
 * their ranks as threads with it. */
#ifndef HOLMES_TEST_TP_GROUP_H
#define HOLMES_TEST_TP_GROUP_H

#include <pthread.h>
#include <stdlib.h>
#include <string.h>

struct tp_group {
    pthread_barrier_t bar;
    pthread_mutex_t mu;
    float *acc; /* the largest sum's floats, zero between sums */
};

/* 0, or -1 when out of memory. */
static inline int tp_group_init(struct tp_group *g, int ranks, size_t max_floats)
{
    g->acc = calloc(max_floats, sizeof(float));
    if (!g->acc)
        return -1;
    pthread_barrier_init(&g->bar, NULL, (unsigned)ranks);
    pthread_mutex_init(&g->mu, NULL);
    return 0;
}

/* Nothing when tp_group_init failed. */
static inline void tp_group_destroy(struct tp_group *g)
{
    if (!g->acc)
        return;
    pthread_barrier_destroy(&g->bar);
    pthread_mutex_destroy(&g->mu);
    free(g->acc);
}

/* Every rank adds its buffer into acc, then takes the sum back. */
static inline int tp_group_sum(struct tp_group *g, float *buf, size_t n)
{
    pthread_mutex_lock(&g->mu);
    for (size_t i = 0; i < n; i++)
        g->acc[i] += buf[i];
    pthread_mutex_unlock(&g->mu);
    pthread_barrier_wait(&g->bar); /* every rank has added */
    memcpy(buf, g->acc, n * sizeof *buf);
    if (pthread_barrier_wait(&g->bar) == PTHREAD_BARRIER_SERIAL_THREAD) /* every rank has copied */
        memset(g->acc, 0, n * sizeof *buf);
    pthread_barrier_wait(&g->bar); /* zero again before anyone adds */
    return 0;
}

#endif
