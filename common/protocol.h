/* The coordinator protocol: versioned JSON messages between `holmes-node worker` and the
 * coordinator (served by the operator, or embedded by `holmes-operator local`), one message per
 * WebSocket text frame. Every message is an object {"v": 1, "type": "...", ...}. See
 * docs/protocol.md for the sequence and every field.
 *
 *   worker -> coordinator: hello, rendezvous, progress, done, error, notice
 *   coordinator -> worker: assign, start, stop, error
 *
 * proto_parse() checks the version, the type, the size limit and the schema of the type, and
 * returns a typed message; assign/start bodies and rendezvous ids stay cJSON (the planner and the
 * trainer own their inner shape) but their required members are checked. */
#ifndef HOLMES_PROTOCOL_H
#define HOLMES_PROTOCOL_H

#include <stddef.h>
#include <cjson/cJSON.h>

#include "error.h"
#include "nic_summary.h"

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

/* A parsed message. `json` is the whole document (owned); assign/start/rendezvous keep their
 * payload there: `body` points into it. */
struct proto_msg {
    enum proto_type type;
    cJSON *json;
    int attempt;        /* assign, start, rendezvous, stop: the restart attempt (0 first) */
    int rank;           /* assign, rendezvous, done: the worker's global rank */
    const cJSON *body;  /* assign: "assignment" object; start: "peers" array;
                           rendezvous: "ids" object (may be NULL) */
    char endpoint[256]; /* rendezvous: host:port the worker listens on ("" if none) */
    const cJSON *endpoints; /* rendezvous: one host:port per rank of the worker, in its
                               assignment's "ranks" order; NULL when it has one rank */
    long step;          /* start: step training resumes from (0 = fresh); done: last step */
    union {
        struct proto_hello hello;
        struct proto_progress progress;
        struct proto_error error;
        struct proto_stop stop;
        struct proto_notice notice;
    } u;
};

/* Parses and schema-checks one message of `len` bytes (need not be NUL-terminated).
 * Returns 0 and fills `out` (release with proto_msg_free), or -1 with the rule broken in `e`
 * (e.g. "hello.worker: must be an integer in [0, 65535]"). */
int proto_parse(const char *text, size_t len, struct proto_msg *out, herr *e);
void proto_msg_free(struct proto_msg *m);

/* Builders: each returns a malloc'ed NUL-terminated JSON text (caller frees), or NULL on OOM
 * or when an argument breaks the schema (`e` says which). */
char *proto_hello_encode(const struct proto_hello *h, herr *e);
/* `assignment` must hold at least "rank" (int); it is copied. */
char *proto_assign_encode(int attempt, const cJSON *assignment, herr *e);
/* `ids` may be NULL: a map of name -> string (e.g. NCCL unique ids, base64). `endpoints` may be
 * NULL: an array of "host:port" strings, one per rank of the worker (endpoint is the first).
 * Both copied. */
char *proto_rendezvous_encode(int attempt, int rank, const char *endpoint, const cJSON *endpoints,
                              const cJSON *ids, herr *e);
/* `peers`: array of {rank, endpoint[, ids]}; copied. */
char *proto_start_encode(int attempt, long resume_step, const cJSON *peers, herr *e);
char *proto_progress_encode(const struct proto_progress *p, herr *e);
char *proto_done_encode(int rank, long step, herr *e);
char *proto_error_encode(int code, const char *message, herr *e);
char *proto_stop_encode(int attempt, int restart, const char *reason, herr *e);
char *proto_notice_encode(const char *reason, const char *message, herr *e);

#endif
