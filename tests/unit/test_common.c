#include <errno.h>

#include "test.h"

#include "cli.h"
#include "error.h"
#include "log.h"

static int ran;
static int fake_cmd(int argc, char **argv) { ran = argc; (void)argv; return 7; }

int main(void)
{
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
