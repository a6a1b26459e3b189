#include "manifest_testutil.h"

#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "trainingjob.h"

static int cmp_str(const void *a, const void *b) { return strcmp(*(char *const *)a, *(char *const *)b); }

static int is_manifest(const char *name)
{
    size_t l = strlen(name);
    return l > 5 && (!strcmp(name + l - 5, ".yaml") || !strcmp(name + l - 5, ".json"));
}

int for_each_manifest(const char *dir, void (*fn)(const char *path))
{
    DIR *d = opendir(dir);
    if (!d)
        return -1;
    char *names[512];
    int n = 0;
    struct dirent *de;
    while ((de = readdir(d)) && n < 512)
        if (is_manifest(de->d_name))
            names[n++] = strdup(de->d_name);
    closedir(d);
    qsort(names, (size_t)n, sizeof names[0], cmp_str);
    for (int i = 0; i < n; i++) {
        if (!names[i])
            continue;
        char path[1024];
        snprintf(path, sizeof path, "%s/%s", dir, names[i]);
        fn(path);
        free(names[i]);
    }
    return n;
}

int spec_of_job(const cJSON *job, struct tj_spec *s)
{
    static struct tj_errors errs;
    memset(&errs, 0, sizeof errs);
    int rc = tj_spec_from_json(cJSON_GetObjectItemCaseSensitive(job, "spec"), "spec", s, &errs);
    for (int i = 0; i < errs.count && i < TJ_MAX_ERRORS; i++)
        printf("    spec error: %s\n", errs.msg[i]);
    return rc;
}

int tj_errors_have(const struct tj_errors *errs, const char *needle)
{
    for (int i = 0; i < errs->count && i < TJ_MAX_ERRORS; i++)
        if (strstr(errs->msg[i], needle))
            return 1;
    return 0;
}

void tj_errors_print(const struct tj_errors *errs, const char *prefix)
{
    for (int i = 0; i < errs->count && i < TJ_MAX_ERRORS; i++)
        printf("%s%s\n", prefix, errs->msg[i]);
}
