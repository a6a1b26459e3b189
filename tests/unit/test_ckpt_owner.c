/* The claim of a checkpoint directory by one job (ckpt_owner.h): the first job claims, the same
 * job passes again, another job is refused naming both and the file; ranks racing to claim
 * (processes) agree on one owner; an incomplete or foreign claim is an error, not a crash. */
#include <fcntl.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "ckpt_owner.h"
#include "fs_testutil.h"
#include "test.h"

static char dir[64];

static void sub(char *out, size_t n, const char *name)
{
    snprintf(out, n, "%s/%s", dir, name);
    mkdir(out, 0755);
}

static int read_file(const char *path, char *buf, size_t n)
{
    FILE *f = fopen(path, "r");
    if (!f)
        return -1;
    size_t got = fread(buf, 1, n - 1, f);
    buf[got] = 0;
    fclose(f);
    return 0;
}

static void test_claims(void)
{
    char d[128], file[192], text[256];
    sub(d, sizeof d, "one");
    snprintf(file, sizeof file, "%s/%s", d, CKPT_OWNER_FILE);
    herr e = {0};
    int rc = ckpt_claim_dir(d, "team-a/gpt2", &e);
    CHECK_MSG("claim.first_job_claims", rc == 0 && read_file(file, text, sizeof text) == 0 &&
                                            !strcmp(text, "team-a/gpt2\n"),
              "rc %d: %s", rc, e.msg);
    rc = ckpt_claim_dir(d, "team-a/gpt2", &e);
    CHECK_MSG("claim.same_job_again", rc == 0, "rc %d: %s", rc, e.msg);
    e = (herr){0};
    rc = ckpt_claim_dir(d, "team-b/gpt2", &e);
    CHECK_MSG("claim.other_job_refused_naming_both_and_the_file",
              rc == -1 && e.kind == HERR_CONFIG && strstr(e.msg, "job team-a/gpt2") &&
                  strstr(e.msg, "not of job team-b/gpt2") && strstr(e.msg, file),
              "rc %d, kind %d: %s", rc, e.kind, e.msg);
    CHECK("claim.refusal_leaves_the_claim",
          read_file(file, text, sizeof text) == 0 && !strcmp(text, "team-a/gpt2\n"));
    rc = ckpt_claim_check(d, "team-b/gpt2", &e);
    CHECK_MSG("claim.check_refuses_the_other_job_as_the_claim_does",
              rc == -1 && strstr(e.msg, "job team-a/gpt2") && strstr(e.msg, file),
              "rc %d: %s", rc, e.msg);
    CHECK("claim.check_passes_the_owner", ckpt_claim_check(d, "team-a/gpt2", &e) == 0);
    char fresh[128], ffile[192];
    sub(fresh, sizeof fresh, "unclaimed");
    snprintf(ffile, sizeof ffile, "%s/%s", fresh, CKPT_OWNER_FILE);
    CHECK("claim.check_claims_nothing", ckpt_claim_check(fresh, "team-b/gpt2", &e) == 0 &&
                                            access(ffile, F_OK) != 0);
    rc = ckpt_claim_dir(d, "", &e) | ckpt_claim_dir(d, NULL, &e);
    CHECK("claim.no_job_claims_nothing", rc == 0);
    /* handed over: the claim deleted, the other job claims */
    unlink(file);
    rc = ckpt_claim_dir(d, "team-b/gpt2", &e);
    CHECK_MSG("claim.handed_over_after_delete", rc == 0 && read_file(file, text, sizeof text) == 0 &&
                                                    !strcmp(text, "team-b/gpt2\n"),
              "rc %d: %s", rc, e.msg);
}

static void test_bad_claims(void)
{
    char d[128], file[192];
    sub(d, sizeof d, "bad");
    snprintf(file, sizeof file, "%s/%s", d, CKPT_OWNER_FILE);
    FILE *f = fopen(file, "w");
    fputs("half-writ", f); /* no newline: a crash while it was written */
    fclose(f);
    herr e = {0};
    int rc = ckpt_claim_dir(d, "j", &e);
    CHECK_MSG("bad.incomplete_claim_is_an_error", rc == -1 && strstr(e.msg, "incomplete") &&
                                                      strstr(e.msg, file),
              "rc %d: %s", rc, e.msg);
    f = fopen(file, "w");
    for (int i = 0; i < 2000; i++)
        fputc('x', f);
    fclose(f);
    rc = ckpt_claim_dir(d, "j", &e);
    CHECK_MSG("bad.oversized_claim_is_an_error", rc == -1 && strstr(e.msg, "longer than"),
              "rc %d: %s", rc, e.msg);
    unlink(file);
    mkdir(file, 0755); /* a directory where the claim should be */
    rc = ckpt_claim_dir(d, "j", &e);
    CHECK_MSG("bad.claim_is_a_directory", rc == -1 && strstr(e.msg, file), "rc %d: %s", rc, e.msg);
    char nl[] = "two\nlines";
    sub(d, sizeof d, "bad2");
    rc = ckpt_claim_dir(d, nl, &e);
    CHECK_MSG("bad.job_name_with_a_newline", rc == -1 && strstr(e.msg, "cannot be written"),
              "rc %d: %s", rc, e.msg);
}

/* 8 processes of one job and 8 of another claim one fresh directory at once, 20 times: every
 * time one job owns it, all its processes pass and all the other's are refused. */
static void test_race(void)
{
    int ok = 1;
    for (int round = 0; round < 20 && ok; round++) {
        char d[128], name[32];
        snprintf(name, sizeof name, "race%d", round);
        sub(d, sizeof d, name);
        pid_t pids[16];
        for (int i = 0; i < 16; i++) {
            pids[i] = fork();
            if (pids[i] == 0) {
                herr e = {0};
                _exit(ckpt_claim_dir(d, i % 2 ? "odd" : "even", &e) == 0 ? 0 : 1);
            }
        }
        int passed[2] = {0, 0};
        for (int i = 0; i < 16; i++) {
            int st;
            if (pids[i] < 0 || waitpid(pids[i], &st, 0) != pids[i] || !WIFEXITED(st))
                ok = 0;
            else if (WEXITSTATUS(st) == 0)
                passed[i % 2]++;
        }
        if (!((passed[0] == 8 && passed[1] == 0) || (passed[0] == 0 && passed[1] == 8))) {
            printf("round %d: even %d, odd %d passed\n", round, passed[0], passed[1]);
            ok = 0;
        }
    }
    CHECK("race.one_job_owns_each_directory", ok);
}

int main(void)
{
    if (test_in_tmpdir(dir, sizeof dir, "owner",
                       (void (*const[])(void)){test_claims, test_bad_claims, test_race, NULL}))
        return 1;
    TEST_MAIN_END();
}
