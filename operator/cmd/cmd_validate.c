/* holmes-operator validate FILE...: offline check of TrainingJob manifests. */
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>

#include "cli.h"
#include "commands.h"
#include "trainingjob.h"

static void usage(FILE *f)
{
    fprintf(f, "Usage: holmes-operator validate [--print] FILE...\n"
               "Checks TrainingJob manifests (YAML or JSON, several documents per file allowed,\n"
               "List objects as kubectl prints them, \"-\" for standard input) against every rule\n"
               "of the API and prints each error with its field path. A job the API accepts but\n"
               "this version cannot run yet (bf16 training) is refused with the\n"
               "reason the operator and the coordinator give (docs/api.md).\n"
               "Exit status: 0 when all are valid, 1 when any is not, 2 on usage errors.\n\n"
               "  --print   print each valid job's resolved spec (defaults applied) as JSON\n");
}

static int validate_file(const char *path, int print)
{
    struct tj_job *jobs;
    int n;
    struct tj_errors errs = {0};
    if (tj_load_file(path, &jobs, &n, &errs)) {
        int kept = errs.count < TJ_MAX_ERRORS ? errs.count : TJ_MAX_ERRORS;
        for (int i = 0; i < kept; i++)
            fprintf(stderr, "%s\n", errs.msg[i]);
        if (errs.count > kept)
            fprintf(stderr, "%s: and %d more errors\n", path, errs.count - kept);
        return 1;
    }
    int rc = 0;
    for (int i = 0; i < n; i++) {
        /* valid, but can this version run it? (the operator and the coordinator ask the same) */
        struct tj_errors run = {0};
        if (tj_spec_runnable(&jobs[i].spec, "spec", &run)) {
            char where[300];
            if (n > 1)
                snprintf(where, sizeof where, "%s[%d]", path, i);
            else
                snprintf(where, sizeof where, "%s", path);
            for (int k = 0; k < run.count && k < TJ_MAX_ERRORS; k++)
                fprintf(stderr, "%s: %s\n", where, run.msg[k]);
            rc = 1;
        } else if (print) {
            cJSON *j = tj_spec_to_json(&jobs[i].spec);
            cJSON *tp = jobs[i].spec.pod_template ? cJSON_Duplicate(jobs[i].spec.pod_template, 1)
                                                  : NULL;
            if (j && tp) /* the resolved spec, and the pods' template as given */
                cJSON_AddItemToObject(j, "template", tp);
            else
                cJSON_Delete(tp);
            char *s = j && (tp || !jobs[i].spec.pod_template) ? cJSON_Print(j) : NULL;
            if (!s) {
                fprintf(stderr, "%s: out of memory\n", path);
                rc = 1;
            } else {
                printf("%s\n", s);
            }
            free(s);
            cJSON_Delete(j);
        } else {
            char desc[512];
            tj_spec_describe(&jobs[i].spec, desc, sizeof desc);
            printf("%s: TrainingJob %s valid: %s\n", path, jobs[i].name, desc);
        }
        tj_job_free(&jobs[i]);
    }
    free(jobs);
    return rc;
}

int cmd_validate(int argc, char **argv)
{
    if (cli_wants_help(argc, argv)) {
        usage(stdout);
        return 0;
    }
    int print = 0;
    static const struct option opts[] = {{"print", no_argument, 0, 'p'}, {0, 0, 0, 0}};
    int c;
    optind = 1;
    while ((c = getopt_long(argc, argv, "p", opts, NULL)) != -1) {
        if (c == 'p') {
            print = 1;
        } else {
            usage(stderr);
            return 2;
        }
    }
    if (optind >= argc) {
        usage(stderr);
        return 2;
    }
    int rc = 0;
    for (int i = optind; i < argc; i++)
        if (validate_file(argv[i], print))
            rc = 1;
    return rc;
}
