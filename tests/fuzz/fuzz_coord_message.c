/* libFuzzer target: what a worker (or anyone reaching the port) sends the coordinator. The
 * coordinator's parser (proto_parse: version, type, size, the schema of each type), then what
 * the coordinator does with an accepted message before its job's state machine: a hello's NIC
 * summary into the pod labels, and every accepted message said back the way the encoders say it
 * (re-encoded, it parses to the same type and fields). A rejection names the field
 * (fuzz_check.h). Seeds: tests/fuzz/seeds/coord_message (real messages, fuzz_seeds.c). */
#include <stdint.h>

#include "fuzz_check.h"
#include "nic_labels.h"
#include "protocol.h"

static char *encode_again(const struct proto_msg *m, herr *e)
{
    switch (m->type) {
    case PROTO_HELLO: return proto_hello_encode(&m->u.hello, e);
    case PROTO_RENDEZVOUS:
        return proto_rendezvous_encode(m->attempt, m->rank, m->endpoint, m->endpoints, m->body, e);
    case PROTO_PROGRESS: return proto_progress_encode(&m->u.progress, e);
    case PROTO_DONE: return proto_done_encode(m->rank, m->step, e);
    case PROTO_ERROR: return proto_error_encode(m->u.error.code, m->u.error.message, e);
    case PROTO_NOTICE: return proto_notice_encode(m->u.notice.reason, m->u.notice.message, e);
    default: return NULL; /* the coordinator's own types: refused from a worker */
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    struct proto_msg m;
    herr e = {0};
    if (proto_parse((const char *)data, size, &m, &e) != 0) {
        fuzz_check_rejection("proto_parse", &e);
        return 0;
    }
    if (m.type == PROTO_HELLO) { /* the pod's labels from its NIC summary */
        struct nic_labels nl;
        herr le = {0};
        if (nic_labels_from_summary(&m.u.hello.nic, &nl, &le) == 0) {
            if (!nic_label_value_valid(nl.cls) || !nic_label_value_valid(nl.fabric) ||
                !nic_label_value_valid(nl.gbps)) {
                fprintf(stderr, "a hello's NIC makes a label value Kubernetes refuses\n");
                abort();
            }
            cJSON_Delete(nic_labels_to_json(&nl));
        } else {
            fuzz_check_rejection("nic_labels_from_summary", &le);
        }
    }
    if (m.type == PROTO_HELLO || m.type == PROTO_RENDEZVOUS || m.type == PROTO_PROGRESS ||
        m.type == PROTO_DONE || m.type == PROTO_ERROR || m.type == PROTO_NOTICE) {
        char *again = encode_again(&m, &e);
        if (!again) {
            fprintf(stderr, "an accepted %s does not encode again: %s\n", proto_type_name(m.type), e.msg);
            abort();
        }
        struct proto_msg m2;
        if (proto_parse(again, strlen(again), &m2, &e) != 0 || m2.type != m.type) {
            fprintf(stderr, "an accepted %s, encoded again, does not parse: %s\n%s\n",
                    proto_type_name(m.type), e.msg, again);
            abort();
        }
        if ((m.type == PROTO_HELLO && (strcmp(m.u.hello.token, m2.u.hello.token) ||
                                       m.u.hello.worker != m2.u.hello.worker)) ||
            (m.type == PROTO_PROGRESS && m.u.progress.nsteps != m2.u.progress.nsteps) ||
            (m.type == PROTO_DONE && m.step != m2.step)) {
            fprintf(stderr, "an accepted %s changed when encoded again\n", proto_type_name(m.type));
            abort();
        }
        proto_msg_free(&m2);
        free(again);
    }
    proto_msg_free(&m);
    return 0;
}
