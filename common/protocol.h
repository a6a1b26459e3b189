/* The coordinator protocol: versioned JSON messages between `holmes-node worker` and the
 * coordinator (served by the operator, or embedded by `holmes-operator local`), one message per
 * WebSocket text frame. Every message is an object {"v": 1, "type": "...", ...}. See
 * docs/protocol.md for the sequence and every field.
 *
 *   worker -> coordinator: hello, rendezvous, progress, done, error, notice
 *   coordinator -> worker: assign, start, stop, error
 *
 * proto_parse() checks the version, the type, the size limit and the schema of the type, and
 * returns a typed message: an assign's assignment decoded by its own decoder (common/plan_doc.h:
 * the plan document and the TrainingJob spec), a start's peers. Rendezvous ids (name -> string,
 * e.g. NCCL unique ids) stay cJSON, opaque to the protocol, but their shape is checked. */
#ifndef HOLMES_PROTOCOL_H
#define HOLMES_PROTOCOL_H

#include <stddef.h>
#include <cjson/cJSON.h>

#include "error.h"
#include "nic_summary.h"
#include "plan_doc.h"

#define PROTO_VERSION 1
/* Largest message either side accepts (bytes of JSON text). */
#define PROTO_MAX_MESSAGE (1024 * 1024)
/* Most step records one progress message may carry. */
#define PROTO_MAX_STEPS 256
/* Most stages a step-time breakdown may name. */
#define PROTO_MAX_STAGES 64

enum proto_type {
    PROTO_HELLO,
    PROTO_ASSIGN,
    PROTO_RENDEZVOUS,
    PROTO_START,
    PROTO_PROGRESS,
    PROTO_DONE,
    PROTO_ERROR,
    PROTO_STOP,
    PROTO_NOTICE,
};

const char *proto_type_name(enum proto_type t);

/* hello: a worker introduces itself. `resume` is set when the worker is mid-training (it
 * reconnects to a new coordinator after an operator restart) and names where it is. */
struct proto_hello {
    char job[128];      /* "name", or "namespace/name" for jobs in a cluster */
    char token[128];
    char pod[128];
    char node[128];
    int worker;         /* worker index in the job, 0..workers-1 */
    int gpus;           /* 0 = CPU worker */
    double tflops;      /* effective TFLOPS per rank (measured or declared); 0 = not sent */
    int tflops_measured; /* with tflops: 1 measured by the worker, 0 declared to it */
    double gpu_memory_gb; /* memory of each of its GPUs (the smallest), GB; 0 = not sent */
    int gpu_memory_measured; /* with gpu_memory_gb: 1 read from the device, 0 declared to it */
    double memory_gbps; /* memory bandwidth per device, GB/s, as its optimizer step sees it;
                           0 = not sent */
    int memory_gbps_measured; /* with memory_gbps: 1 measured (or read from the GPUs), 0 declared */
    struct nic_summary nic;
    int running;        /* 1 when resume_* are meaningful */
    int resume_attempt;
    int resume_rank;
    long resume_step;
};

/* One step of one worker, as measured. `has_loss` only on the last pipeline stage. */
struct proto_step {
    long step;
    int has_loss;
    double loss;
    double lr;
    double tokens_per_s;
    double step_ms;
    double compute_ms;  /* forward + backward + optimizer */
    double comm_ms;     /* time blocked in communication */
    double bubble_ms;   /* pipeline idle time */
    int has_eval;       /* an evaluation ran after this step (training.eval; last stage) */
    double eval_loss;   /* its held-out loss, the mean over the evaluation's batches */
    int skipped;        /* its loss or gradient norm was not finite: no update (every rank's
                           record of the step says so; no loss then) */
    int has_norm;       /* the global gradient norm before clipping (last stage, with the
                           loss; finite) */
    double grad_norm;
};

struct proto_progress {
    int rank;
    int stage;
    int nsteps;
    struct proto_step steps[PROTO_MAX_STEPS];
};

struct proto_error {
    int code;           /* one of enum proto_error_code */
    char message[512];
};

enum proto_error_code {
    PROTO_ERR_BAD_MESSAGE = 1,  /* unparsable, wrong version, schema broken, too large */
    PROTO_ERR_AUTH = 2,         /* missing or wrong token, unknown job */
    PROTO_ERR_UNKNOWN_WORKER = 3, /* pod or index not part of the job */
    PROTO_ERR_DUPLICATE = 4,    /* that worker is already connected */
    PROTO_ERR_WORKER = 10,      /* a worker failed (sent worker -> coordinator); restart */
    PROTO_ERR_PLAN = 11,        /* the planner refused the job */
    PROTO_ERR_PREEMPTED = 12,   /* the worker got SIGTERM: it checkpoints at the next step
                                   boundary and leaves; restart in place, not counted */
    PROTO_ERR_CONFIG = 13,      /* configuration, data or storage error: fails again, no restart */
    PROTO_ERR_PEER = 14,        /* the worker lost a peer: a consequence, not a cause */
};

/* notice: something the user must hear of that is not a failure (e.g. a checkpoint fallback);
 * the coordinator makes it a Warning Event and a status condition named by `reason`. */
struct proto_notice {
    char reason[64];    /* CamelCase, e.g. "CheckpointFallback" */
    char message[512];
};

struct proto_stop {
    int restart;        /* 1: reconnect and hello again (in-place restart); 0: exit */
    char reason[512];
};

#define PROTO_ENDPOINT_MAX 256

/* One entry of start.peers: where global rank `rank` listens, and on a worker's first rank the
 * ids its rendezvous sent. */
struct proto_peer {
    int rank;
    char endpoint[PROTO_ENDPOINT_MAX]; /* "host:port" ("" if none) */
    const cJSON *ids;   /* name -> string, or NULL; not owned (parsed: inside the message) */
};

/* start: every peer the worker needs (all ranks, unless its assignment named some). */
struct proto_start {
    int npeers;
    struct proto_peer *peers; /* owned */
};

/* A parsed message. `json` is the whole document (owned); rendezvous ids and endpoints point
 * into it. */
struct proto_msg {
    enum proto_type type;
    cJSON *json;
    int attempt;        /* assign, start, rendezvous, stop: the restart attempt (0 first) */
    int rank;           /* assign, rendezvous, done: the worker's global rank */
    const cJSON *ids;   /* rendezvous: "ids" object (may be NULL) */
    char endpoint[PROTO_ENDPOINT_MAX]; /* rendezvous: host:port the worker listens on ("" if none) */
    const cJSON *endpoints; /* rendezvous: one host:port per rank of the worker, in its
                               assignment's "ranks" order; NULL when it has one rank */
    long step;          /* start: step training resumes from (0 = fresh); done: last step */
    union {
        struct proto_hello hello;
        struct plan_assignment assign; /* owned: take it with proto_take_assignment */
        struct proto_start start;
        struct proto_progress progress;
        struct proto_error error;
        struct proto_stop stop;
        struct proto_notice notice;
    } u;
};

/* Parses and schema-checks one message of `len` bytes (need not be NUL-terminated).
 * Returns 0 and fills `out` (release with proto_msg_free), or -1 with the rule broken in `e`
 * (e.g. "hello.worker: must be an integer in [0, 65535]"). An assign whose assignment does not
 * decode (plan_assignment_from_json: a plan or a spec this worker cannot run) is refused with
 * kind HERR_CONFIG: it would be the same again. */
int proto_parse(const char *text, size_t len, struct proto_msg *out, herr *e);
void proto_msg_free(struct proto_msg *m);
/* Moves an assign's assignment into *a (free it with plan_assignment_free); m keeps none. */
void proto_take_assignment(struct proto_msg *m, struct plan_assignment *a);

/* Builders: each returns a malloc'ed NUL-terminated JSON text (caller frees), or NULL on OOM
 * or when an argument breaks the schema (`e` says which). */
char *proto_hello_encode(const struct proto_hello *h, herr *e);
/* The assignment by its own encoder (plan_assignment_to_json). */
char *proto_assign_encode(int attempt, const struct plan_assignment *assignment, herr *e);
/* `ids` may be NULL: a map of name -> string (e.g. NCCL unique ids, base64). `endpoints` may be
 * NULL: an array of "host:port" strings, one per rank of the worker (endpoint is the first).
 * Both copied. */
char *proto_rendezvous_encode(int attempt, int rank, const char *endpoint, const cJSON *endpoints,
                              const cJSON *ids, herr *e);
/* `peers[0..npeers)`: {rank, endpoint[, ids]}; ids copied. */
char *proto_start_encode(int attempt, long resume_step, const struct proto_peer *peers,
                         int npeers, herr *e);
char *proto_progress_encode(const struct proto_progress *p, herr *e);
char *proto_done_encode(int rank, long step, herr *e);
char *proto_error_encode(int code, const char *message, herr *e);
char *proto_stop_encode(int attempt, int restart, const char *reason, herr *e);
char *proto_notice_encode(const char *reason, const char *message, herr *e);

#endif
