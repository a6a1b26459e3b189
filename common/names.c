#include "names.h"

#include <string.h>

const char *const schedule_names[SCHED_COUNT] = {"1f1b", "gpipe"};
const char *const dtype_names[DTYPE_COUNT] = {"fp32", "bf16", "fp16"};
const char *const policy_names[POLICY_COUNT] = {"holmes", "naive", "ethernet"};
const char *const transport_names[TRANSPORT_COUNT] = {"ib", "roce", "socket"};
const char *const group_kind_names[GROUP_KIND_COUNT] = {"dp", "tp", "pp", "embedding",
                                                              "link"};

static const char *name_of(const char *const *names, int n, int v)
{
    return v >= 0 && v < n ? names[v] : "unknown";
}

static int index_of(const char *const *names, int n, const char *s)
{
    for (int i = 0; s && i < n; i++)
        if (!strcmp(names[i], s))
            return i;
    return -1;
}

const char *schedule_name(enum schedule s) { return name_of(schedule_names, SCHED_COUNT, (int)s); }
const char *dtype_name(enum dtype d) { return name_of(dtype_names, DTYPE_COUNT, (int)d); }
const char *policy_name(enum policy p) { return name_of(policy_names, POLICY_COUNT, (int)p); }
const char *transport_name(enum transport t) { return name_of(transport_names, TRANSPORT_COUNT, (int)t); }
const char *group_kind_name(enum group_kind k)
{
    return name_of(group_kind_names, GROUP_KIND_COUNT, (int)k);
}

#define PARSE(fn, type, names, count)                                                           \
    int fn(const char *s, enum type *out)                                                       \
    {                                                                                           \
        int i = index_of(names, count, s);                                                      \
        if (i < 0)                                                                              \
            return -1;                                                                          \
        *out = (enum type)i;                                                                    \
        return 0;                                                                               \
    }
PARSE(schedule_parse, schedule, schedule_names, SCHED_COUNT)
PARSE(dtype_parse, dtype, dtype_names, DTYPE_COUNT)
PARSE(policy_parse, policy, policy_names, POLICY_COUNT)
PARSE(transport_parse, transport, transport_names, TRANSPORT_COUNT)
PARSE(group_kind_parse, group_kind, group_kind_names, GROUP_KIND_COUNT)
