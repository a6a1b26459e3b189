/* libFuzzer target: what the coordinator (or anyone the worker connects to) sends a worker. The
 * worker's parser (proto_parse), its assignment decoding (plan_assignment_from_json: the plan
 * document, the spec), and its start's peers into the plan (worker_plan_endpoints). The input is
 * one message, or an assign and a start separated by a NUL byte (the start is read against that
 * assignment, as the worker does). A rejection names the field (fuzz_check.h). Seeds:
 * tests/fuzz/seeds/worker_message (real messages with real plans, fuzz_seeds.c). */
#include <stdint.h>

#include "fuzz_check.h"
#include "plan_doc.h"
#include "protocol.h"
#include "worker_peers.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    const uint8_t *nul = memchr(data, 0, size);
    size_t first = nul ? (size_t)(nul - data) : size;
    struct proto_msg m;
    herr e = {0};
    if (proto_parse((const char *)data, first, &m, &e) != 0) {
        fuzz_check_rejection("proto_parse", &e);
        return 0;
    }
    if (m.type != PROTO_ASSIGN) {
        proto_msg_free(&m);
        return 0;
    }
    struct plan_assignment a;
    memset(&a, 0, sizeof a);
    if (plan_assignment_from_json(m.body, &a, &e) != 0) {
        fuzz_check_rejection("plan_assignment_from_json", &e);
        plan_assignment_free(&a);
        proto_msg_free(&m);
        return 0;
    }
    cJSON *again = plan_assignment_to_json(&a);
    cJSON_Delete(again);
    if (nul) {
        struct proto_msg s;
        if (proto_parse((const char *)nul + 1, size - first - 1, &s, &e) != 0) {
            fuzz_check_rejection("proto_parse", &e);
        } else {
            if (s.type == PROTO_START && worker_plan_endpoints(&a.plan, s.body, &e) != 0)
                fuzz_check_rejection("worker_plan_endpoints", &e);
            proto_msg_free(&s);
        }
    }
    plan_assignment_free(&a);
    proto_msg_free(&m);
    return 0;
}
