/* The entries of a recorded sysfs tree that fuzz_nic_sysfs changes, in one order its seeds
 * (fuzz_seeds.c) share: every regular file and symbolic link under ROOT, by relative path,
 * sorted. */
#ifndef HOLMES_FUZZ_NIC_SYSFS_H
#define HOLMES_FUZZ_NIC_SYSFS_H

#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

/* Every case under tests/fixtures/sysfs, in this order (the first byte of an input picks one). */
static const char *const FUZZ_SYSFS_CASES[] = {
    "bonded-ethernet", "cx5-roce-100g", "cx6-hdr-ib", "e810-irdma-roce", "gpu-pcie-switch",
    "odd-values", "plain-ethernet", "port-down", "two-ib-subnets",
};
#define FUZZ_SYSFS_NCASES ((int)(sizeof FUZZ_SYSFS_CASES / sizeof FUZZ_SYSFS_CASES[0]))

struct fuzz_sysfs_list {
    char **rel;
    int n, cap;
};

static int fuzz_sysfs_cmp(const void *a, const void *b)
{
    return strcmp(*(char *const *)a, *(char *const *)b);
}

static void fuzz_sysfs_walk(const char *root, const char *rel, struct fuzz_sysfs_list *l)
{
    char dir[1024];
    snprintf(dir, sizeof dir, "%s%s%s", root, rel[0] ? "/" : "", rel);
    DIR *d = opendir(dir);
    if (!d)
        return;
    struct dirent *de;
    while ((de = readdir(d))) {
        if (!strcmp(de->d_name, ".") || !strcmp(de->d_name, ".."))
            continue;
        char sub[1024], full[1100];
        snprintf(sub, sizeof sub, "%s%s%s", rel, rel[0] ? "/" : "", de->d_name);
        snprintf(full, sizeof full, "%s/%s", root, sub);
        struct stat st;
        if (lstat(full, &st) != 0)
            continue;
        if (S_ISDIR(st.st_mode)) {
            fuzz_sysfs_walk(root, sub, l);
        } else if (S_ISREG(st.st_mode) || S_ISLNK(st.st_mode)) {
            if (l->n == l->cap) {
                l->cap = l->cap ? 2 * l->cap : 256;
                if (!(l->rel = realloc(l->rel, (size_t)l->cap * sizeof *l->rel)))
                    abort();
            }
            if (!(l->rel[l->n++] = strdup(sub)))
                abort();
        }
    }
    closedir(d);
}

/* The sorted entries under root (0 when none could be read). */
static inline int fuzz_sysfs_entries(const char *root, struct fuzz_sysfs_list *l)
{
    memset(l, 0, sizeof *l);
    fuzz_sysfs_walk(root, "", l);
    if (l->n > 1)
        qsort(l->rel, (size_t)l->n, sizeof *l->rel, fuzz_sysfs_cmp);
    return l->n;
}

#endif
