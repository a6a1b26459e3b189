/* Discovery never crashes on garbage: every file of a recorded tree is overwritten in turn
 * with odd contents (empty, binary, huge, negative, out-of-range numbers) and every symlink
 * is left dangling, and discovery must still succeed with a summary the planner accepts. */
#include "test.h"

#include <ftw.h>
#include <stdlib.h>
#include <unistd.h>

#include "nic_discover.h"
#include "nic_labels.h"
#include "yaml_json.h"

static const char *const patterns[] = {
    "", "\xff\xfe\x00\x01", "-99999999999999999999\n", "4: ACTIVE 4: ACTIVE 4: ACTIVE\n",
    "0x\n", "9999999 Gb/sec (999X HDR)\n", "1e308\n", "fe80::1\n", "RoCE v2\n", "-1\n",
};
#define NPAT (sizeof patterns / sizeof patterns[0])

static char **files;
static int nfiles;

static int collect(const char *path, const struct stat *st, int flag, struct FTW *ftw)
{
    (void)st; (void)ftw;
    if (flag == FTW_F || flag == FTW_SL) {
        char **nf = realloc(files, (size_t)(nfiles + 1) * sizeof *nf);
        if (!nf)
            return 1;
        files = nf;
        files[nfiles++] = strdup(path);
    }
    return 0;
}

static int discover_ok(const char *root, const char *what)
{
    struct nic_report r;
    herr e;
    int ok = nic_discover(&(struct nic_discover_opts){.sysfs_root = root}, &r, &e) == 0;
    struct nic_labels l;
    ok = ok && r.have_summary && r.summary.gbps > 0 && r.summary.fabric[0] &&
         nic_labels_from_summary(&r.summary, &l, &e) == 0;
    cJSON *j = ok ? nic_report_to_json(&r) : NULL;
    struct nic_summary s;
    ok = ok && j && nic_summary_from_json(j, "report", &s, &e) == 0;
    if (!ok)
        printf("  broke on %s\n", what);
    cJSON_Delete(j);
    nic_report_free(&r);
    return ok;
}

static int same_as_expected(const char *root, const char *name)
{
    char path[256];
    snprintf(path, sizeof path, "tests/fixtures/sysfs/%s/expected.json", name);
    herr e;
    char *text = read_file_limited(path, 1 << 20, NULL, &e);
    cJSON *want = text ? cJSON_Parse(text) : NULL;
    free(text);
    struct nic_report r;
    int same = 0;
    if (nic_discover(&(struct nic_discover_opts){.sysfs_root = root}, &r, &e) == 0) {
        cJSON *got = nic_report_to_json(&r);
        same = want && got && cJSON_Compare(got, want, 1);
        cJSON_Delete(got);
    }
    nic_report_free(&r);
    cJSON_Delete(want);
    return same;
}

int main(void)
{
    char tmp[] = "/tmp/holmes-nic-garbage-XXXXXX";
    if (!mkdtemp(tmp)) {
        TEST_FAIL("mkdtemp", "%s", tmp);
        TEST_MAIN_END();
    }
    const char *cases[] = {"cx5-roce-100g", "gpu-pcie-switch"};
    for (size_t c = 0; c < 2; c++) {
        char cmd[512], root[300];
        snprintf(cmd, sizeof cmd, "cp -a tests/fixtures/sysfs/%s/sys %s/%s", cases[c], tmp, cases[c]);
        CHECK(cases[c], system(cmd) == 0);
        snprintf(root, sizeof root, "%s/%s", tmp, cases[c]);
        nfiles = 0;
        files = NULL;
        nftw(root, collect, 16, FTW_PHYS);
        int broken = 0;
        for (int i = 0; i < nfiles; i++) {
            struct stat st;
            if (lstat(files[i], &st) != 0)
                continue;
            if (S_ISLNK(st.st_mode)) {
                char target[512];
                ssize_t n = readlink(files[i], target, sizeof target - 1);
                if (n < 0)
                    continue;
                target[n] = '\0';
                unlink(files[i]);
                if (symlink("../nowhere/at/all", files[i]) == 0) {
                    broken += !discover_ok(root, files[i]);
                    unlink(files[i]);
                }
                if (symlink(target, files[i]) != 0)
                    broken++;
                continue;
            }
            char *orig = NULL;
            size_t len = 0;
            FILE *f = fopen(files[i], "rb");
            if (f) {
                orig = malloc(8192);
                len = orig ? fread(orig, 1, 8192, f) : 0;
                fclose(f);
            }
            /* Two of the patterns per file, rotating, keep the run short. */
            for (size_t k = 0; k < 2; k++) {
                size_t p = ((size_t)i + k * 5) % NPAT;
                f = fopen(files[i], "wb");
                if (!f)
                    continue;
                fwrite(patterns[p], 1, p == 1 ? 4 : strlen(patterns[p]), f);
                if (p == 2)
                    for (int rep = 0; rep < 500; rep++)
                        fputs("AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA", f);
                fclose(f);
                broken += !discover_ok(root, files[i]);
            }
            f = fopen(files[i], "wb");
            if (f) {
                if (orig)
                    fwrite(orig, 1, len, f);
                fclose(f);
            }
            free(orig);
        }
        char name[128];
        snprintf(name, sizeof name, "%s: %d files and links mangled, discovery always usable", cases[c], nfiles);
        CHECK_INT(name, broken, 0);
        snprintf(name, sizeof name, "%s: tree restored, report as expected.json", cases[c]);
        CHECK(name, discover_ok(root, "restored") && same_as_expected(root, cases[c]));
        for (int i = 0; i < nfiles; i++)
            free(files[i]);
        free(files);
    }
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf %s", tmp);
    if (system(cmd) != 0)
        printf("note: could not remove %s\n", tmp);
    TEST_MAIN_END();
}
