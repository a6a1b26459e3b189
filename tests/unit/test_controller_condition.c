/* controller_merge_condition: one condition set, the others kept (the coordinator's GangReady,
 * Planned and Running beside the controller's Valid, PodsReady, ...), lastTransitionTime only
 * when the status changes, nothing to write when nothing changed. */
#include "test.h"

#include <cjson/cJSON.h>
#include <stdlib.h>
#include <string.h>

#include "controller.h"

static const cJSON *cond(const cJSON *st, const char *type)
{
    const cJSON *it;
    cJSON_ArrayForEach(it, cJSON_GetObjectItemCaseSensitive(st, "conditions")) {
        const cJSON *t = cJSON_GetObjectItemCaseSensitive(it, "type");
        if (cJSON_IsString(t) && !strcmp(t->valuestring, type))
            return it;
    }
    return NULL;
}

static const char *field(const cJSON *c, const char *k)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(c, k);
    return cJSON_IsString(v) ? v->valuestring : "(none)";
}

int main(void)
{
    cJSON *status = cJSON_Parse(
        "{\"phase\":\"Discovering\",\"conditions\":["
        "{\"type\":\"Valid\",\"status\":\"True\",\"reason\":\"SpecValid\",\"message\":\"\","
        "\"lastTransitionTime\":\"2026-01-01T00:00:00Z\"},"
        "{\"type\":\"PodsReady\",\"status\":\"True\",\"reason\":\"AllReady\",\"message\":\"4/4\","
        "\"lastTransitionTime\":\"2026-01-01T00:00:01Z\"}]}");
    int changed = -1;
    cJSON *a = controller_merge_condition(status, "GangReady", 0, "GangTimeout",
                                          "1 of 4 workers missing: 3 (j-worker-3)",
                                          "2026-01-01T00:01:00Z", &changed);
    CHECK("new condition: changed", a && changed == 1);
    CHECK_INT("new condition: the others kept", cJSON_GetArraySize(cJSON_GetObjectItem(a, "conditions")), 3);
    CHECK_STR("kept Valid reason", field(cond(a, "Valid"), "reason"), "SpecValid");
    CHECK_STR("kept PodsReady time", field(cond(a, "PodsReady"), "lastTransitionTime"), "2026-01-01T00:00:01Z");
    CHECK_STR("GangReady status", field(cond(a, "GangReady"), "status"), "False");
    CHECK_STR("GangReady reason", field(cond(a, "GangReady"), "reason"), "GangTimeout");
    CHECK("GangReady message names the pod", strstr(field(cond(a, "GangReady"), "message"), "j-worker-3") != NULL);
    CHECK_STR("GangReady time", field(cond(a, "GangReady"), "lastTransitionTime"), "2026-01-01T00:01:00Z");
    CHECK("only conditions in the patch", cJSON_GetArraySize(a) == 1);

    /* The same again: nothing to write. */
    cJSON *b = controller_merge_condition(a, "GangReady", 0, "GangTimeout",
                                          "1 of 4 workers missing: 3 (j-worker-3)",
                                          "2026-01-01T00:02:00Z", &changed);
    CHECK("same condition: unchanged", b && changed == 0);
    CHECK_STR("same condition: time kept", field(cond(b, "GangReady"), "lastTransitionTime"), "2026-01-01T00:01:00Z");

    /* Another message, same status: changed, but no transition. */
    cJSON *c = controller_merge_condition(b, "GangReady", 0, "GangTimeout", "2 of 4 missing",
                                          "2026-01-01T00:03:00Z", &changed);
    CHECK("new message: changed", c && changed == 1);
    CHECK_STR("new message: time kept", field(cond(c, "GangReady"), "lastTransitionTime"), "2026-01-01T00:01:00Z");
    CHECK_STR("new message carried", field(cond(c, "GangReady"), "message"), "2 of 4 missing");

    /* Status flips: transition time moves. */
    cJSON *d = controller_merge_condition(c, "GangReady", 1, "AllWorkersConnected", "all 4",
                                          "2026-01-01T00:04:00Z", &changed);
    CHECK("flip: changed", d && changed == 1);
    CHECK_STR("flip: status", field(cond(d, "GangReady"), "status"), "True");
    CHECK_STR("flip: time moves", field(cond(d, "GangReady"), "lastTransitionTime"), "2026-01-01T00:04:00Z");
    CHECK_INT("flip: still 3 conditions", cJSON_GetArraySize(cJSON_GetObjectItem(d, "conditions")), 3);

    /* A status without conditions (or with garbage there) gets a list of one. */
    cJSON *bare = cJSON_Parse("{\"conditions\":\"oops\"}");
    cJSON *f = controller_merge_condition(bare, "Planned", 1, "Planned", "ok", "t", &changed);
    CHECK("garbage conditions replaced by a list of one",
          f && changed == 1 && cJSON_GetArraySize(cJSON_GetObjectItem(f, "conditions")) == 1);
    cJSON *g = controller_merge_condition(NULL, "Planned", 1, "Planned", NULL, "t", &changed);
    CHECK("no status at all", g && changed == 1 && !strcmp(field(cond(g, "Planned"), "message"), ""));
    cJSON_Delete(status);
    cJSON_Delete(a);
    cJSON_Delete(b);
    cJSON_Delete(c);
    cJSON_Delete(d);
    cJSON_Delete(bare);
    cJSON_Delete(f);
    cJSON_Delete(g);
    TEST_MAIN_END();
}
