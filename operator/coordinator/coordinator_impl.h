/* Private to operator/coordinator/: the coordinator's state and what its two files share.
 *   coordinator.c  connections and their messages, the libwebsockets glue, the public API
 *   coord_job.c    a job's state machine: failures settled by their cause, in-place restarts,
 *                  the gang barrier, plan, assignments and start, progress aggregation */
#ifndef HOLMES_COORDINATOR_IMPL_H
#define HOLMES_COORDINATOR_IMPL_H

#include <libwebsockets.h>

#include "coordinator.h"
#include "plan_doc.h"

struct outmsg {
    struct outmsg *next;
    size_t len;
    unsigned char buf[]; /* LWS_PRE bytes, then the text */
};

struct job;

struct conn {
    struct lws *wsi;
    struct coordinator *c;
    struct job *job;        /* set once the hello is accepted */
    int worker;             /* index in job, -1 before hello */
    char *rx;
    size_t rx_len, rx_cap;
    size_t rx_discarded;    /* bytes of an oversized message read and dropped so far */
    struct outmsg *head, *tail;
    size_t queued;          /* bytes in the queue */
    int pending;            /* counted in npending: no hello accepted yet */
    int closing;            /* close after the queue drains */
    int close_code;
    char close_reason[100];
    struct conn *prev, *next;
};

struct slot {
    struct coord_worker info;
    struct conn *conn;
    int hello;              /* hello accepted in this gathering round */
    int running;            /* hello said it is mid-training (adoption) */
    int resume_attempt;
    int rendezvous;
    char endpoint[256];     /* of its first rank */
    cJSON *endpoints;       /* one per rank when it has several (rendezvous.endpoints), or NULL */
    cJSON *ids;
    int nranks;             /* from its assignment: a rank per GPU */
    int ranks[PLAN_MAX_LOCAL_RANKS];
    int reported;
    struct proto_step last;
    long eval_step;         /* the last evaluation it reported (0: none) */
    double eval_loss;
    int done;
    /* A worker back (its process restarted) while its gang's failure is being settled: its
     * hello waits for the verdict, then joins the restart (or hears the job is over). */
    int deferred;
    struct proto_hello deferred_hello;
    int lost;               /* elastic: counted as lost; the gang trains without it */
};

/* What a failure report says happened, in order of how much it tells of the cause (see
 * fail_weight): a lost peer is usually a consequence; a disconnect without a word is a crash;
 * a worker's own error (a fault, or a configuration error) is the cause. */
enum fail_rank { FAIL_NONE = 0, FAIL_PEER, FAIL_DISCONNECT, FAIL_FAULT, FAIL_CONFIG };
#define FAILURE_WINDOW_S 1.0

struct job {
    struct job *next;
    char *name, *token;
    int n;
    char **pods;
    int gang_timeout_ms, max_restarts, progress_interval_ms, restart_backoff_ms;
    double resume_at;       /* seconds, monotonic: a restarted gang starts no sooner */
    long total_steps;
    struct coord_hooks hooks;
    void *user;

    enum coord_job_state state;
    int attempt, restarts;
    struct slot *w;
    struct plan_assignment **assign; /* per worker index; NULL until planned */
    int world;              /* ranks of all workers (>= n) */
    int *worker_of_rank;    /* [world] */
    int *local_of_rank;     /* [world]: index among its worker's ranks */
    double gather_since;    /* seconds, monotonic */
    /* A failure being settled: the reports of one failure arrive within a moment of each
     * other, the cause's and its consequences' (peers that lost a connection to it), in any
     * order; the verdict waits FAILURE_WINDOW_S and takes the report that ranks highest. */
    double fail_deadline;   /* 0 = none pending */
    enum fail_rank fail_rank; /* of the report kept */
    char fail_why[700];
    int gang_reported;
    double last_emit;
    struct coord_progress emitted;
    int progress_dirty;
    double pace_t0;         /* the ETA's pace: the aggregate step pace_step0 at pace_t0 */
    long pace_step0;        /* (monotonic seconds), taken at the attempt's first emit */
    int pace_attempt;       /* ... of this attempt (-1: none yet) */
    long skipped_steps;     /* steps the workers skipped for a non-finite loss or norm (each
                               step once, whichever ranks report it) ... */
    long skipped_last;      /* ... the newest of them */
    int min_workers, scale_up; /* elastic when min_workers < n */
    int nlost, replans;
    int capacity_wait;      /* the workers left cannot hold the model: no plan is tried until
                               a lost one is back (spec.elastic.scaleUp) */
};

static inline int co_elastic(const struct job *j) { return j->min_workers > 0 && j->min_workers < j->n; }

struct coordinator {
    struct lws_context *ctx;
    struct lws_protocols protocols[2];
    lws_sorted_usec_list_t tick;
    struct job *jobs;
    struct conn *conns;
    int port;
    int hello_timeout_s;
    int (*resolve_job)(void *user, struct coordinator *c, const char *job);
    void *user;
    long refused;
    void *ssl_ctx;          /* the vhost's SSL_CTX when serving TLS (coord_tls_reload) */
    const char *tls_cert_pem, *tls_key_pem; /* only while the vhost is made */
    int tls_load_failed;
    int max_pending;
    int nconns, npending;   /* open connections; of those, not said hello yet */
};

/* coord_job.c */
void co_job_event(struct job *j, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
void co_set_state(struct job *j, enum coord_job_state s, const char *why);
void co_job_broadcast_stop(struct job *j, int restart, const char *reason);
void co_job_preempted(struct job *j, const char *why);
void co_job_report_failure(struct job *j, enum fail_rank rank, const char *why);
void co_job_settle(struct job *j, double now);
void co_job_succeed_if_all_done(struct job *j);
void co_job_check_gang(struct job *j);
void co_job_send_start(struct job *j);
void co_job_aggregate(const struct job *j, struct coord_progress *p);
void co_job_maybe_emit(struct job *j, int force);
void co_job_forget_plan(struct job *j);
void co_assignment_free(struct plan_assignment *a);
int co_job_lose(struct job *j, int index, const char *why, herr *e);
void co_job_regain(struct job *j, struct conn *k, const struct proto_hello *h);

/* coordinator.c */
int co_conn_send(struct conn *k, char *text);
void co_conn_close_after(struct conn *k, const char *why);
void co_admit(struct conn *k, struct job *j, const struct proto_hello *h);

#endif
