/* libFuzzer target: NIC discovery (nic_discover) on a recorded sysfs tree the input changes.
 *
 * The kernel's sysfs is the discovery's input: drivers write their own strings there (rates,
 * GID tables, firmware versions, link layers, NUMA nodes), and a node may carry a NIC no fixture
 * models. The input is: a byte that picks one of the recorded trees (tests/fixtures/sysfs), then
 * records {op, entry (2 bytes, little-endian), length, bytes}: op even sets the entry (a file's
 * content, a symbolic link's target) to the bytes, op odd removes it. After discovery the tree
 * is restored.
 *
 * What must hold, whatever sysfs says (a finding aborts):
 *   - discovery succeeds (it fails only out of memory; the rest are warnings);
 *   - the report prints as JSON that parses back (it is `holmes-node nic --json`);
 *   - its summary, as the worker sends it in hello, is accepted by the coordinator's reader
 *     (nic_summary_from_json) and reads back the same: a node the coordinator refuses could
 *     never join a job;
 *   - the Node labels made of it are valid Kubernetes label values.
 * The trees are copied at start into a private directory under /dev/shm (fuzz_files.h); the
 * fixtures are found under tests/fixtures/sysfs of the working directory, or
 * $HOLMES_SYSFS_FIXTURES.
 */
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "fuzz_files.h"
#include "fuzz_nic_sysfs.h"
#include "nic_discover.h"
#include "nic_labels.h"
#include "nic_report.h"
#include "nic_summary.h"

#define MAX_RECORDS 32

struct entry {
    int link;     /* a symbolic link (target in data) or a regular file (content) */
    char *data;
    size_t len;
};

static struct {
    char root[128]; /* <workdir>/<case>/sys */
    struct fuzz_sysfs_list list;
    struct entry *orig;
} cases[FUZZ_SYSFS_NCASES];

static void fail(const char *what, const char *detail)
{
    fprintf(stderr, "fuzz_nic_sysfs: %s: %s\n", what, detail ? detail : "");
    abort();
}

static void load_entry(const char *path, struct entry *en)
{
    struct stat st;
    if (lstat(path, &st) != 0)
        fail("lstat", path);
    en->link = S_ISLNK(st.st_mode);
    en->data = malloc((size_t)st.st_size + 1);
    if (!en->data)
        fail("out of memory", path);
    if (en->link) {
        ssize_t n = readlink(path, en->data, (size_t)st.st_size + 1);
        if (n < 0)
            fail("readlink", path);
        en->len = (size_t)n;
    } else {
        FILE *f = fopen(path, "rb");
        if (!f)
            fail("open", path);
        en->len = fread(en->data, 1, (size_t)st.st_size, f);
        fclose(f);
    }
}

/* Sets path to a file of data[len] or a link to it (removing what is there). */
static void put_entry(const char *path, int link, const char *data, size_t len)
{
    unlink(path);
    if (link) {
        char target[256];
        size_t n = len < sizeof target - 1 ? len : sizeof target - 1;
        memcpy(target, data, n);
        target[n] = 0;
        if (!target[0] || symlink(target, path) != 0)
            return; /* an empty or impossible target: the entry stays removed */
        return;
    }
    FILE *f = fopen(path, "wb");
    if (!f)
        return;
    if (len)
        fwrite(data, 1, len, f);
    fclose(f);
}

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    (void)argc, (void)argv;
    const char *src = getenv("HOLMES_SYSFS_FIXTURES");
    char from[1024];
    snprintf(from, sizeof from, "%s", src && src[0] ? src : "tests/fixtures/sysfs");
    if (from[0] != '/') {
        char cwd[512];
        if (!getcwd(cwd, sizeof cwd))
            fail("getcwd", strerror(errno));
        char abs[1100];
        snprintf(abs, sizeof abs, "%s/%s", cwd, from);
        snprintf(from, sizeof from, "%s", abs);
    }
    fuzz_enter_workdir("nic");
    for (int c = 0; c < FUZZ_SYSFS_NCASES; c++) {
        char cmd[2400];
        snprintf(cmd, sizeof cmd, "cp -a '%s/%s' '%s/'", from, FUZZ_SYSFS_CASES[c], fuzz_work_dir);
        if (system(cmd) != 0)
            fail("cannot copy the recorded sysfs trees (run from the repository, or set "
                 "HOLMES_SYSFS_FIXTURES)", cmd);
        snprintf(cases[c].root, sizeof cases[c].root, "%s/%s/sys", fuzz_work_dir,
                 FUZZ_SYSFS_CASES[c]);
        if (fuzz_sysfs_entries(cases[c].root, &cases[c].list) == 0)
            fail("no entries", cases[c].root);
        cases[c].orig = calloc((size_t)cases[c].list.n, sizeof *cases[c].orig);
        if (!cases[c].orig)
            fail("out of memory", "");
        for (int i = 0; i < cases[c].list.n; i++) {
            char p[1200];
            snprintf(p, sizeof p, "%s/%s", cases[c].root, cases[c].list.rel[i]);
            load_entry(p, &cases[c].orig[i]);
        }
    }
    fuzz_leave_workdir();
    return 0;
}

static void check_report(const struct nic_report *r)
{
    cJSON *j = nic_report_to_json(r);
    if (!j)
        return; /* out of memory */
    char *txt = cJSON_PrintUnformatted(j);
    cJSON_Delete(j);
    if (txt) {
        cJSON *back = cJSON_Parse(txt);
        if (!back)
            fail("the report's JSON does not parse back", txt);
        cJSON_Delete(back);
        free(txt);
    }
    if (!r->have_summary)
        return;
    cJSON *s = nic_summary_to_json(&r->summary);
    if (!s)
        return;
    struct nic_summary got;
    herr e = {0};
    if (nic_summary_from_json(s, "hello.nic", &got, &e) != 0) {
        char *p = cJSON_PrintUnformatted(s);
        fprintf(stderr, "summary: %s\n", p ? p : "");
        fail("the coordinator refuses the summary discovery made", e.msg);
    }
    cJSON_Delete(s);
    if (got.cls != r->summary.cls || strcmp(got.fabric, r->summary.fabric) ||
        strcmp(got.ib_hca, r->summary.ib_hca) || got.gid_index != r->summary.gid_index ||
        strcmp(got.socket_ifname, r->summary.socket_ifname) ||
        !(got.gbps == r->summary.gbps || (got.gbps != got.gbps && r->summary.gbps != r->summary.gbps)))
        fail("the summary reads back otherwise", r->summary.fabric);
    struct nic_labels l;
    if (nic_labels_from_summary(&r->summary, &l, &e) == 0) {
        if (!nic_label_value_valid(l.cls) || !nic_label_value_valid(l.fabric) ||
            !nic_label_value_valid(l.gbps))
            fail("a Node label value is not valid", l.gbps);
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 1)
        return 0;
    int c = data[0] % FUZZ_SYSFS_NCASES;
    int changed[MAX_RECORDS], nchanged = 0;
    size_t at = 1;
    while (nchanged < MAX_RECORDS && at + 4 <= size) {
        int op = data[at];
        int idx = (data[at + 1] | data[at + 2] << 8) % cases[c].list.n;
        size_t len = data[at + 3];
        at += 4;
        if (len > size - at)
            len = size - at;
        char p[1200];
        snprintf(p, sizeof p, "%s/%s", cases[c].root, cases[c].list.rel[idx]);
        if (op & 1)
            unlink(p);
        else
            put_entry(p, cases[c].orig[idx].link, (const char *)data + at, len);
        at += len;
        changed[nchanged++] = idx;
    }
    struct nic_discover_opts o = {.sysfs_root = cases[c].root};
    struct nic_report r;
    herr e = {0};
    int rc = nic_discover(&o, &r, &e);
    if (rc != 0 && !strstr(e.msg, "out of memory"))
        fail("discovery failed", e.msg);
    if (rc == 0)
        check_report(&r);
    nic_report_free(&r);
    for (int i = 0; i < nchanged; i++) {
        const struct entry *en = &cases[c].orig[changed[i]];
        char p[1200];
        snprintf(p, sizeof p, "%s/%s", cases[c].root, cases[c].list.rel[changed[i]]);
        put_entry(p, en->link, en->data, en->len);
    }
    return 0;
}
