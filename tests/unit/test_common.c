#include <errno.h>

#include "test.h"

#include "cli.h"
#include "error.h"
#include "json.h"
#include "log.h"

static int ran;
static int fake_cmd(int argc, char **argv) { ran = argc; (void)argv; return 7; }

/* json_merge_patch / json_merge_diff on RFC 7386's own example, and composing patches. */
static void test_merge_patch(void)
{
    cJSON *t = cJSON_Parse("{\"title\":\"Goodbye!\",\"author\":{\"givenName\":\"John\","
                           "\"familyName\":\"Doe\"},\"tags\":[\"example\",\"sample\"],\"content\":\"x\"}");
    cJSON *p = cJSON_Parse("{\"title\":\"Hello!\",\"phoneNumber\":\"+01-123-456-7890\","
                           "\"author\":{\"familyName\":null},\"tags\":[\"example\"]}");
    cJSON *want = cJSON_Parse("{\"title\":\"Hello!\",\"author\":{\"givenName\":\"John\"},"
                              "\"tags\":[\"example\"],\"content\":\"x\",\"phoneNumber\":\"+01-123-456-7890\"}");
    cJSON *from = cJSON_Duplicate(t, 1);
    CHECK_INT("merge patch applies", json_merge_patch(t, p, 0), 0);
    CHECK("merge patch: RFC 7386's example", cJSON_Compare(t, want, 1));
    cJSON *d = json_merge_diff(from, want);
    CHECK("merge diff: only what changed, null for a removed member",
          d && cJSON_IsNull(cJSON_GetObjectItem(cJSON_GetObjectItem(d, "author"), "familyName")) &&
              !cJSON_GetObjectItem(d, "content") && !cJSON_GetObjectItem(cJSON_GetObjectItem(d, "author"), "givenName"));
    CHECK_INT("merge diff applied to its source", json_merge_patch(from, d, 0), 0);
    CHECK("merge diff applied to its source gives the target", cJSON_Compare(from, want, 1));
    cJSON *same = json_merge_diff(want, want);
    CHECK("merge diff of equal objects is empty", same && !same->child);
    cJSON *p1 = cJSON_Parse("{\"progress\":{\"step\":3,\"loss\":4.5}}");
    cJSON *p2 = cJSON_Parse("{\"progress\":{\"step\":4,\"loss\":null}}");
    json_merge_patch(p1, p2, 1);
    CHECK("composed patches keep the null that removes later",
          cJSON_IsNull(cJSON_GetObjectItem(cJSON_GetObjectItem(p1, "progress"), "loss")));
    cJSON *items[] = {t, p, want, from, d, same, p1, p2};
    for (size_t i = 0; i < sizeof items / sizeof items[0]; i++)
        cJSON_Delete(items[i]);
}

int main(void)
{
    test_merge_patch();
    herr e;
    CHECK_INT("herr_set returns -1", herr_set(&e, "field %s: %d", "spec.workers", 3), -1);
    CHECK_STR("herr_set formats", e.msg, "field spec.workers: 3");
    herr_wrap(&e, "file %s", "job.yaml");
    CHECK_STR("herr_wrap prefixes", e.msg, "file job.yaml: field spec.workers: 3");
    CHECK_INT("herr_set is a fault", e.kind, HERR_FAULT);
    herr_config(&e, "disk %s", "full");
    herr_wrap(&e, "checkpoint at step %d", 20);
    CHECK("herr_wrap keeps a config error's kind", e.kind == HERR_CONFIG &&
          !strcmp(e.msg, "checkpoint at step 20: disk full"));
    herr_peer(&e, "lost rank 2");
    CHECK_INT("herr_peer", e.kind, HERR_PEER);
    herr_set(&e, "again");
    CHECK_INT("herr_set resets the kind", e.kind, HERR_FAULT);
    CHECK("a full disk is a configuration error", herr_kind_of_errno(ENOSPC) == HERR_CONFIG &&
          herr_kind_of_errno(EROFS) == HERR_CONFIG && herr_kind_of_errno(EIO) == HERR_FAULT);
    CHECK_STR("kind names", herr_kind_name(HERR_PEER), "peer");
    CHECK_INT("herr_set NULL ok", herr_set(NULL, "x"), -1);
    /* messages quote what came from outside: cleaned for a log line, an Event, a condition */
    herr_set(&e, "spec.%s: unknown field", "a\nb\x01" "c\xff\xc3(d \xc3\xa9 \xe2\x82\xac");
    CHECK_STR("control characters and broken UTF-8 become '?', good UTF-8 stays", e.msg,
              "spec.a?b?c?" "?(d \xc3\xa9 \xe2\x82\xac: unknown field");
    char cut[] = "ok \xe2\x82";
    herr_clean(cut);
    CHECK_STR("a sequence cut short by truncation", cut, "ok ?" "?");
    cJSON *st = cJSON_Parse("{\"message\": \"cut \\u0001\", \"conditions\": [{\"message\": "
                            "\"ok\"}], \"n\": 3}");
    cJSON *deep = cJSON_GetArrayItem(cJSON_GetObjectItem(st, "conditions"), 0);
    cJSON_ReplaceItemInObject(deep, "message", cJSON_CreateString("waiting: \xe2\x82"));
    json_clean_strings(st);
    CHECK("json_clean_strings: every string, at any depth",
          !strcmp(cJSON_GetObjectItem(st, "message")->valuestring, "cut ?") &&
          !strcmp(cJSON_GetObjectItem(deep, "message")->valuestring, "waiting: ??") &&
          cJSON_GetObjectItem(st, "n")->valuedouble == 3);
    cJSON_Delete(st);
    char path[200];
    json_key_path(path, sizeof path, "spec", "gangTimeout_s-1");
    CHECK_STR("a plain key: parent.key", path, "spec.gangTimeout_s-1");
    json_key_path(path, sizeof path, "rendezvous.ids", "a \"b\": c");
    CHECK_STR("another key: quoted and escaped", path, "rendezvous.ids[\"a \\\"b\\\": c\"]");

    enum log_level lv;
    CHECK_INT("log level parse", log_parse_level("warn", &lv), 0);
    CHECK_INT("log level value", lv, LOG_WARN);
    CHECK_INT("log level bad", log_parse_level("loud", &lv), -1);
    enum log_format lf;
    CHECK_INT("log format bad", log_parse_format("xml", &lf), -1);

    static const struct cli_command cmds[] = {{"go", "test", fake_cmd}, {0, 0, 0}};
    char *argv[] = {"prog", "go", "a", "b", NULL};
    CHECK_INT("dispatch runs command", cli_dispatch("prog", "t", cmds, NULL, 4, argv), 7);
    CHECK_INT("dispatch passes args", ran, 3);
    char *bad[] = {"prog", "nope", NULL};
    CHECK_INT("dispatch unknown", cli_dispatch("prog", "t", cmds, NULL, 2, bad), 2);
    char *help[] = {"x", "--", "--help", NULL};
    CHECK_INT("help after -- ignored", cli_wants_help(3, help), 0);
    TEST_MAIN_END();
}
