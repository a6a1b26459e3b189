/* libFuzzer target: what the Kubernetes API server (or anything answering in its place) sends
 * the operator. The first byte picks:
 *   even: a watch stream, cut into reads of sizes taken from the second byte (events split
 *         across chunks), through the splitter (kube_json_stream_feed) and the event decoding
 *         (kube_watch_event_decode);
 *   odd:  one answer: an object, or a list ({"items": [...]}).
 * Every object then goes where the operator's caches and readers take it: its key and
 * resourceVersion (kube_object_key, kube_meta_str), a TrainingJob's spec (tj_job_from_json,
 * tj_spec_runnable: the controller's checks), a Secret's TLS material (coord_tls_from_secret).
 * A rejection names the field (fuzz_check.h). Seeds: tests/fuzz/seeds/kube_decode, captured from
 * a real kube-apiserver (capture_kube_seeds.sh). */
#include <stdint.h>

#include "coord_tls.h"
#include "fuzz_check.h"
#include "kube_informer.h"
#include "kube_watch.h"
#include "trainingjob.h"

static void decode_object(const cJSON *obj)
{
    char key[600];
    kube_object_key(obj, key, sizeof key);
    (void)kube_meta_str(obj, "resourceVersion");
    const char *kind = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(obj, "kind"));
    if (kind && !strcmp(kind, "Secret")) {
        struct coord_tls t = {0};
        herr e = {0};
        if (coord_tls_from_secret(obj, &t, &e) != 0)
            fuzz_check_rejection("coord_tls_from_secret", &e);
        coord_tls_free(&t);
        return;
    }
    if (!cJSON_GetObjectItemCaseSensitive(obj, "spec"))
        return;
    struct tj_job j;
    struct tj_errors te;
    memset(&j, 0, sizeof j);
    memset(&te, 0, sizeof te);
    if (tj_job_from_json(obj, &j, &te) == 0)
        tj_spec_runnable(&j.spec, "spec", &te);
    int kept = te.count < TJ_MAX_ERRORS ? te.count : TJ_MAX_ERRORS;
    for (int i = 0; i < kept; i++) {
        herr e = {0};
        snprintf(e.msg, sizeof e.msg, "%s", te.msg[i]);
        fuzz_check_rejection("tj_job_from_json", &e);
    }
    tj_job_free(&j);
}

static int on_value(cJSON *v, void *user)
{
    (void)user;
    enum kube_event_type t;
    cJSON *obj = NULL;
    herr e = {0};
    if (kube_watch_event_decode(v, &t, &obj, &e) != 0) {
        fuzz_check_rejection("kube_watch_event_decode", &e);
        return 0;
    }
    (void)kube_event_name(t);
    decode_object(obj);
    cJSON_Delete(obj);
    return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 2)
        return 0;
    if (data[0] & 1) {
        cJSON *v = cJSON_ParseWithLength((const char *)data + 1, size - 1);
        const cJSON *items = cJSON_GetObjectItemCaseSensitive(v, "items");
        if (cJSON_IsArray(items)) {
            const cJSON *it;
            cJSON_ArrayForEach(it, items)
                decode_object(it);
        } else if (cJSON_IsObject(v)) {
            decode_object(v);
        }
        cJSON_Delete(v);
        return 0;
    }
    struct kube_json_stream *s = kube_json_stream_new(1u << 20);
    if (!s)
        return 0;
    size_t chunk = (size_t)data[1] % 64 + 1, off = 2;
    herr e = {0};
    while (off < size) {
        size_t n = size - off < chunk ? size - off : chunk;
        if (kube_json_stream_feed(s, (const char *)data + off, n, on_value, NULL, &e) != 0) {
            fuzz_check_rejection("kube_json_stream_feed", &e);
            break;
        }
        off += n;
    }
    kube_json_stream_free(s);
    return 0;
}
