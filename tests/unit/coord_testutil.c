#include "coord_testutil.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static void *serve(void *arg)
{
    struct coord_thread *t = arg;
    while (!t->quit) {
        pthread_mutex_lock(&t->mu);
        coord_service(t->c);
        pthread_mutex_unlock(&t->mu);
        usleep(200); /* let the test thread take the lock */
    }
    return NULL;
}

int coord_thread_start(struct coord_thread *t)
{
    t->quit = 0;
    return pthread_create(&t->th, NULL, serve, t) == 0 ? 0 : -1;
}

void coord_thread_stop(struct coord_thread *t)
{
    t->quit = 1;
    pthread_join(t->th, NULL);
    coord_destroy(t->c);
    t->c = NULL;
}

int coord_test_assign(struct plan_assignment *a, int rank, int peer)
{
    a->rank = rank;
    if (peer < 0)
        return 0;
    if (!(a->peers = malloc(sizeof *a->peers)))
        return -1;
    a->peers[0] = peer;
    a->npeers = 1;
    return 0;
}

int coord_thread_serve(struct coord_thread *t, int port, const struct coord_job_spec *js)
{
    struct coord_options o = {.bind = "127.0.0.1", .port = port};
    herr e = {0};
    t->c = NULL;
    for (int tries = 0; tries < 50; tries++) { /* the old socket may linger briefly */
        if (coord_create(&t->c, &o, &e) == 0)
            break;
        usleep(100000);
    }
    if (!t->c) {
        printf("# coord_create: %s\n", e.msg);
        return -1;
    }
    if (coord_add_job(t->c, js, &e)) {
        printf("# coord_add_job: %s\n", e.msg);
        return -1;
    }
    return coord_thread_start(t);
}

enum coord_job_state coord_thread_job_state(struct coord_thread *t, const char *job)
{
    enum coord_job_state st = COORD_FAILED;
    pthread_mutex_lock(&t->mu);
    coord_job_state(t->c, job, &st);
    pthread_mutex_unlock(&t->mu);
    return st;
}

int coord_thread_wait_state(struct coord_thread *t, const char *job, enum coord_job_state want)
{
    for (int i = 0; i < 500; i++) {
        if (coord_thread_job_state(t, job) == want)
            return 1;
        usleep(10000);
    }
    return 0;
}

struct coord_client *coord_test_connect(struct coord_thread *t)
{
    char url[64];
    snprintf(url, sizeof url, "ws://127.0.0.1:%d/", coord_port(t->c));
    struct coord_client *cl = NULL;
    herr e = {0};
    if (coord_client_create(&cl, url, &e) || coord_client_connect(cl, 5000, &e)) {
        printf("# connect: %s\n", e.msg);
        coord_client_destroy(cl);
        return NULL;
    }
    return cl;
}

int coord_test_send(struct coord_client *cl, char *text)
{
    int rc = coord_client_send(cl, text);
    coord_client_flush(cl, 2000);
    return rc;
}

void coord_test_record_event(char *events, size_t cap, enum coord_job_state st, const char *msg)
{
    size_t u = strlen(events);
    snprintf(events + u, cap - u, "[%s] %s\n", coord_state_name(st), msg);
}

int coord_test_expect(struct coord_client *cl, enum proto_type want, struct proto_msg *m)
{
    herr e = {0};
    int rc = cl ? coord_client_poll(cl, 5000, m, &e) : -1;
    if (rc != 1) {
        printf("# expected %s, poll returned %d: %s\n", proto_type_name(want), rc, e.msg);
        return 0;
    }
    if (m->type != want) {
        printf("# expected %s, got %s\n", proto_type_name(want), proto_type_name(m->type));
        proto_msg_free(m);
        return 0;
    }
    return 1;
}

int coord_test_rendezvous(struct coord_client **cl, const int *idx, int n, int attempt,
                          int port_base, int *ranks)
{
    struct proto_msg m;
    for (int i = 0; i < n; i++) {
        if (!coord_test_expect(cl[idx ? idx[i] : i], PROTO_ASSIGN, &m))
            return 0;
        ranks[i] = m.rank;
        int ok = m.attempt == attempt;
        proto_msg_free(&m);
        if (!ok)
            return 0;
    }
    for (int i = 0; i < n; i++) {
        char ep[64];
        snprintf(ep, sizeof ep, "127.0.0.1:%d", port_base + ranks[i]);
        if (coord_test_send(cl[idx ? idx[i] : i],
                            proto_rendezvous_encode(attempt, ranks[i], ep, NULL, NULL, NULL)))
            return 0;
    }
    return 1;
}
