/* One enum and one name table for each concept both binaries speak of: the API spelling
 * (TrainingJob spec), the planner, the plan document, the rank table and the engine all use
 * these. Each *_names table is indexed by its enum; *_parse returns 0, or -1 for an unknown name. */
#ifndef HOLMES_NAMES_H
#define HOLMES_NAMES_H

/* Pipeline schedule. */
enum schedule { SCHED_1F1B = 0, SCHED_GPIPE = 1 };
#define SCHED_COUNT 2
extern const char *const schedule_names[SCHED_COUNT]; /* "1f1b", "gpipe" */

/* Element type: of the weights' math (training.precision), of activations between stages
 * (parallelism.pipelineDtype), of the parameter all-gather (parallelism.paramGatherDtype).
 * The API takes the first two; fp16 is the planner's. */
enum dtype { DTYPE_FP32 = 0, DTYPE_BF16 = 1, DTYPE_FP16 = 2 };
#define DTYPE_COUNT 3
#define DTYPE_API_COUNT 2
extern const char *const dtype_names[DTYPE_COUNT]; /* "fp32", "bf16", "fp16" */

/* Placement policy. The API takes the first two; ethernet is the planner's baseline. */
enum policy { POLICY_HOLMES = 0, POLICY_NAIVE = 1, POLICY_ETHERNET = 2 };
#define POLICY_COUNT 3
#define POLICY_API_COUNT 2
extern const char *const policy_names[POLICY_COUNT]; /* "holmes", "naive", "ethernet" */

/* A communicator's transport. */
enum transport { TRANSPORT_IB = 0, TRANSPORT_ROCE = 1, TRANSPORT_SOCKET = 2 };
#define TRANSPORT_COUNT 3
extern const char *const transport_names[TRANSPORT_COUNT]; /* "ib", "roce", "socket" */

/* A communicator's role: data-, tensor-, pipeline-parallel, the tied embedding (first and
 * last stage, same data- and tensor-parallel rank), or one pipeline link (stage s and s + 1,
 * same data- and tensor-parallel rank: the point-to-point activations and their gradients). */
enum group_kind { GROUP_DP = 0, GROUP_TP = 1, GROUP_PP = 2, GROUP_EMBEDDING = 3, GROUP_LINK = 4 };
#define GROUP_KIND_COUNT 5
extern const char *const group_kind_names[GROUP_KIND_COUNT]; /* "dp", "tp", "pp", "embedding",
                                                                "link" */

const char *schedule_name(enum schedule s);
const char *dtype_name(enum dtype d);
const char *policy_name(enum policy p);
const char *transport_name(enum transport t);
const char *group_kind_name(enum group_kind k);
int schedule_parse(const char *s, enum schedule *out);
int dtype_parse(const char *s, enum dtype *out);
int policy_parse(const char *s, enum policy *out);
int transport_parse(const char *s, enum transport *out);
int group_kind_parse(const char *s, enum group_kind *out);

#endif
