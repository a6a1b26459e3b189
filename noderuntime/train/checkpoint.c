/* Per-stage checkpoints (atomic, CRC-checked) and llm.c GPT-2 weight import. */
#include "checkpoint.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

#define HDR_BYTES 256
#define HDR_CRC_AT 252
static const char CKPT_MAGIC[8] = {'H', 'O', 'L', 'M', 'E', 'S', 'C', 'K'};

/* ---------------------------------------------------------------- little helpers */

static uint32_t crc_update(uint32_t crc, const void *p, size_t n)
{
    const unsigned char *b = p;
    while (n > 0) {
        uInt chunk = n > (1u << 30) ? (1u << 30) : (uInt)n;
        crc = (uint32_t)crc32(crc, b, chunk);
        b += chunk;
        n -= chunk;
    }
    return crc;
}

static int write_all(int fd, const void *p, size_t n)
{
    const char *b = p;
    while (n > 0) {
        ssize_t w = write(fd, b, n > (1u << 30) ? (1u << 30) : n);
        if (w < 0) {
            if (errno == EINTR)
                continue;
            return -1;
        }
        if (w == 0) {
            errno = EIO;
            return -1;
        }
        b += w;
        n -= (size_t)w;
    }
    return 0;
}

int ckpt_read_all(int fd, void *p, size_t n, off_t at)
{
    char *b = p;
    while (n > 0) {
        ssize_t r = pread(fd, b, n > (1u << 30) ? (1u << 30) : n, at);
        if (r < 0) {
            if (errno == EINTR)
                continue;
            return -1;
        }
        if (r == 0)
            return 1;
        b += r;
        n -= (size_t)r;
        at += r;
    }
    return 0;
}

static void put32(unsigned char *h, size_t at, uint32_t v) { memcpy(h + at, &v, 4); }
static void put64(unsigned char *h, size_t at, uint64_t v) { memcpy(h + at, &v, 8); }
static uint32_t get32(const unsigned char *h, size_t at)
{
    uint32_t v;
    memcpy(&v, h + at, 4);
    return v;
}
static uint64_t get64(const unsigned char *h, size_t at)
{
    uint64_t v;
    memcpy(&v, h + at, 8);
    return v;
}

static void ckpt_name(char *out, size_t n, int first, int last, int64_t step)
{
    snprintf(out, n, "stage-%d-%d-step-%09" PRId64 ".ckpt", first, last, step);
}

/* parses a checkpoint file name of any stage: its step (and range), or -1 */
static int64_t parse_any_name(const char *name, int *first, int *last)
{
    int f, l, used = 0;
    long long step;
    if (sscanf(name, "stage-%d-%d-step-%lld.ckpt%n", &f, &l, &step, &used) != 3 ||
        name[used] != '\0' || f < 0 || l <= f || step < 0)
        return -1;
    char again[96];
    ckpt_name(again, sizeof again, f, l, step);
    if (strcmp(again, name) != 0)
        return -1;
    *first = f;
    *last = l;
    return step;
}


/* ---------------------------------------------------------------- write */

static void encode_header(unsigned char *h, const struct ckpt_meta *m, uint32_t payload_crc)
{
    memset(h, 0, HDR_BYTES);
    memcpy(h, CKPT_MAGIC, 8);
    put32(h, 8, CKPT_VERSION);
    put32(h, 12, HDR_BYTES);
    int32_t shape[8] = {m->c.layers, m->c.channels, m->c.heads, m->c.vocab, m->c.padded_vocab,
                        m->c.max_seq, m->first, m->last};
    for (int i = 0; i < 8; i++)
        put32(h, 16 + 4 * (size_t)i, (uint32_t)shape[i]);
    put64(h, 48, (uint64_t)m->step);
    put64(h, 56, m->data_pos);
    for (int i = 0; i < 4; i++)
        put64(h, 64 + 8 * (size_t)i, m->rng[i]);
    put64(h, 96, m->nparams);
    put32(h, 104, (uint32_t)(m->has_moments != 0));
    put32(h, 108, payload_crc);
    put32(h, HDR_CRC_AT, crc_update((uint32_t)crc32(0, Z_NULL, 0), h, HDR_CRC_AT));
}

struct ckpt_entry {
    int64_t step;
    int first, last;
    char name[256];
};

static int cmp_entry(const void *a, const void *b)
{
    int64_t x = ((const struct ckpt_entry *)a)->step, y = ((const struct ckpt_entry *)b)->step;
    return (x > y) - (x < y);
}

/* Lists the checkpoints in dir of stage [first, last) (first < 0: of every stage), sorted by
 * step; *out is malloc'ed. */
static int list_stage(const char *dir, int first, int last, struct ckpt_entry **out, int *count,
                      herr *e)
{
    *out = NULL;
    *count = 0;
    DIR *d = opendir(dir);
    if (!d) {
        if (errno == ENOENT)
            return 0;
        return herr_set(e, "checkpoint directory %s: cannot open: %s", dir, strerror(errno));
    }
    struct ckpt_entry *v = NULL;
    int n = 0, cap = 0;
    struct dirent *de;
    while ((de = readdir(d))) {
        int f, l;
        int64_t step = parse_any_name(de->d_name, &f, &l);
        if (step < 0 || (first >= 0 && (f != first || l != last)))
            continue;
        if (n == cap) {
            cap = cap ? 2 * cap : 16;
            struct ckpt_entry *nv = realloc(v, (size_t)cap * sizeof *v);
            if (!nv) {
                free(v);
                closedir(d);
                return herr_set(e, "checkpoint directory %s: out of memory", dir);
            }
            v = nv;
        }
        v[n].step = step;
        v[n].first = f;
        v[n].last = l;
        snprintf(v[n].name, sizeof v[n].name, "%s", de->d_name);
        n++;
    }
    closedir(d);
    if (n > 0)
        qsort(v, (size_t)n, sizeof *v, cmp_entry);
    *out = v;
    *count = n;
    return 0;
}

/* 1 when stage [first, last) has a checkpoint of `step` among v[0..n) */
static int has_step(const struct ckpt_entry *v, int n, int first, int last, int64_t step)
{
    for (int i = 0; i < n; i++)
        if (v[i].first == first && v[i].last == last && v[i].step == step)
            return 1;
    return 0;
}

void ckpt_prune(const char *dir, int first, int last, int keep)
{
    struct ckpt_entry *v;
    int n;
    if (list_stage(dir, -1, -1, &v, &n, NULL) < 0)
        return;
    int own = 0;
    for (int i = 0; i < n; i++)
        own += v[i].first == first && v[i].last == last;
    /* the oldest step this stage keeps (v is sorted by step); -1 while it has fewer than keep */
    int64_t cutoff = -1;
    for (int i = 0, seen = 0; i < n; i++)
        if (v[i].first == first && v[i].last == last && ++seen == own - keep + 1)
            cutoff = v[i].step;
    for (int i = 0, seen = 0; i < n; i++) {
        int mine = v[i].first == first && v[i].last == last;
        int overlaps = v[i].first < last && first < v[i].last;
        /* This stage's beyond the newest keep; and another layout's files of these layers (a
         * re-planned job's earlier stage boundaries) once this stage has keep newer sets, or of a
         * step it wrote again (superseded: what was trained since replaced them). */
        int drop = mine ? ++seen <= own - keep
                        : overlaps && ((cutoff >= 0 && v[i].step < cutoff) ||
                                       has_step(v, n, first, last, v[i].step));
        if (!drop)
            continue;
        char p[4096];
        snprintf(p, sizeof p, "%s/%s", dir, v[i].name);
        unlink(p); /* best effort: an old file left behind is harmless */
    }
    free(v);
}

static int decode_header(const char *path, const unsigned char *h, struct ckpt_meta *m,
                         uint32_t *payload_crc, herr *e);

/* Reads a checkpoint back and checks its header and payload CRCs, a chunk at a time. */
static int verify_file(const char *path, herr *e)
{
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return herr_set(e, "checkpoint %s: cannot open: %s", path, strerror(errno));
    unsigned char h[HDR_BYTES];
    struct ckpt_meta meta;
    uint32_t want;
    if (ckpt_read_all(fd, h, sizeof h, 0) != 0 || decode_header(path, h, &meta, &want, e) != 0) {
        close(fd);
        return herr_set(e, "checkpoint %s: the header does not read back", path);
    }
    uint64_t left = (uint64_t)meta.nparams * sizeof(float) * (meta.has_moments ? 3 : 1);
    size_t cap = 1u << 20;
    unsigned char *buf = malloc(cap);
    if (!buf) {
        close(fd);
        return herr_set(e, "checkpoint %s: out of memory", path);
    }
    uint32_t crc = (uint32_t)crc32(0, Z_NULL, 0);
    off_t at = HDR_BYTES;
    int rc = 0;
    while (left > 0 && rc == 0) {
        size_t n = left < cap ? (size_t)left : cap;
        rc = ckpt_read_all(fd, buf, n, at);
        crc = crc_update(crc, buf, n);
        at += (off_t)n;
        left -= n;
    }
    free(buf);
    close(fd);
    if (rc != 0 || crc != want)
        return herr_set(e, "checkpoint %s: the payload does not read back intact", path);
    return 0;
}

int ckpt_make_dir(const char *path, herr *e)
{
    char tmp[4096];
    if ((size_t)snprintf(tmp, sizeof tmp, "%s", path) >= sizeof tmp)
        return herr_config(e, "checkpoint directory %s: path too long", path);
    for (char *p = tmp + 1; *p; p++) {
        if (*p != '/')
            continue;
        *p = '\0';
        if (mkdir(tmp, 0755) && errno != EEXIST)
            return herr_set_kind(e, herr_kind_of_errno(errno), "checkpoint directory %s: %s", tmp,
                                 strerror(errno));
        *p = '/';
    }
    if (mkdir(tmp, 0755) && errno != EEXIST)
        return herr_set_kind(e, herr_kind_of_errno(errno), "checkpoint directory %s: %s", tmp,
                             strerror(errno));
    return 0;
}

int ckpt_write(const char *dir, const struct ckpt_meta *meta, const float *params,
               const float *m, const float *v, int keep, char *path, size_t path_len, herr *e)
{
    if (keep < 1)
        return herr_set(e, "checkpoint keep must be at least 1 (got %d)", keep);
    if (meta->has_moments && (!m || !v))
        return herr_set(e, "checkpoint with moments needs both m and v");
    if (mkdir(dir, 0755) < 0 && errno != EEXIST)
        return herr_set_kind(e, herr_kind_of_errno(errno), "checkpoint directory %s: cannot create: %s",
                             dir, strerror(errno));
    char name[96], final[4096], tmp[4096];
    ckpt_name(name, sizeof name, meta->first, meta->last, meta->step);
    if ((size_t)snprintf(final, sizeof final, "%s/%s", dir, name) >= sizeof final ||
        (size_t)snprintf(tmp, sizeof tmp, "%s/.%s.tmp.%ld", dir, name, (long)getpid()) >=
            sizeof tmp)
        return herr_set(e, "checkpoint directory %s: path too long", dir);
    size_t bytes = (size_t)meta->nparams * sizeof(float);
    uint32_t crc = (uint32_t)crc32(0, Z_NULL, 0);
    crc = crc_update(crc, params, bytes);
    if (meta->has_moments) {
        crc = crc_update(crc, m, bytes);
        crc = crc_update(crc, v, bytes);
    }
    unsigned char h[HDR_BYTES];
    encode_header(h, meta, crc);

    int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd < 0)
        return herr_set_kind(e, herr_kind_of_errno(errno), "checkpoint %s: cannot create: %s", tmp,
                             strerror(errno));
    const char *what = "write";
    if (write_all(fd, h, sizeof h) < 0 || write_all(fd, params, bytes) < 0 ||
        (meta->has_moments && (write_all(fd, m, bytes) < 0 || write_all(fd, v, bytes) < 0)))
        goto fail;
    what = "fsync";
    if (fsync(fd) < 0)
        goto fail;
    what = "close";
    int rc = close(fd);
    fd = -1;
    if (rc < 0)
        goto fail;
    what = "rename";
    if (rename(tmp, final) < 0)
        goto fail;
    int dfd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (dfd < 0 || fsync(dfd) < 0) {
        int err = errno;
        if (dfd >= 0)
            close(dfd);
        return herr_set_kind(e, herr_kind_of_errno(err),
                             "checkpoint directory %s: fsync after writing %s: %s", dir, name,
                             strerror(err));
    }
    close(dfd);
    /* Older checkpoints go only once the new one reads back intact. */
    if (verify_file(final, e) != 0)
        return herr_wrap(e, "reading back what was just written (older checkpoints kept)");
    ckpt_prune(dir, meta->first, meta->last, keep);
    if (path)
        snprintf(path, path_len, "%s", final);
    return 0;
fail:;
    int err = errno;
    if (fd >= 0)
        close(fd);
    unlink(tmp);
    return herr_set_kind(e, herr_kind_of_errno(err),
                         "checkpoint %s: %s failed: %s (previous checkpoints untouched)", final,
                         what, strerror(err));
}

/* ---------------------------------------------------------------- read */

static int decode_header(const char *path, const unsigned char *h, struct ckpt_meta *m,
                         uint32_t *payload_crc, herr *e)
{
    if (memcmp(h, CKPT_MAGIC, 8) != 0)
        return herr_config(e, "checkpoint %s: not a Holmes checkpoint (bad magic)", path);
    uint32_t version = get32(h, 8);
    if (version != CKPT_VERSION)
        return herr_config(e, "checkpoint %s: version %u is not supported (want %d)", path, version,
                           CKPT_VERSION);
    uint32_t hcrc = crc_update((uint32_t)crc32(0, Z_NULL, 0), h, HDR_CRC_AT);
    if (get32(h, 12) != HDR_BYTES || get32(h, HDR_CRC_AT) != hcrc)
        return herr_config(e, "checkpoint %s: header CRC mismatch (corrupt header)", path);
    memset(m, 0, sizeof *m);
    int32_t shape[8];
    for (int i = 0; i < 8; i++)
        shape[i] = (int32_t)get32(h, 16 + 4 * (size_t)i);
    m->c = (struct gpt_config){shape[0], shape[1], shape[2], shape[3], shape[4], shape[5]};
    m->first = shape[6];
    m->last = shape[7];
    m->step = (int64_t)get64(h, 48);
    m->data_pos = get64(h, 56);
    for (int i = 0; i < 4; i++)
        m->rng[i] = get64(h, 64 + 8 * (size_t)i);
    m->nparams = get64(h, 96);
    m->has_moments = get32(h, 104) != 0;
    *payload_crc = get32(h, 108);
    /* the sizes and offsets below (3 n floats after the header) must not wrap */
    if (m->nparams > (uint64_t)(INT64_MAX - HDR_BYTES) / (3 * sizeof(float)))
        return herr_config(e, "checkpoint %s: a parameter count of %" PRIu64 " is more than a "
                           "file can hold (corrupt header)", path, m->nparams);
    return 0;
}

int ckpt_read_meta(const char *path, struct ckpt_meta *meta, herr *e)
{
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return herr_config(e, "checkpoint %s: cannot open: %s", path, strerror(errno));
    unsigned char h[HDR_BYTES];
    int rc = ckpt_read_all(fd, h, sizeof h, 0);
    int err = errno;
    close(fd);
    if (rc < 0)
        return herr_config(e, "checkpoint %s: cannot read: %s", path, strerror(err));
    if (rc > 0)
        return herr_config(e, "checkpoint %s: truncated header (shorter than %d bytes)", path,
                           HDR_BYTES);
    uint32_t crc;
    return decode_header(path, h, meta, &crc, e);
}

int ckpt_check_shape(const char *path, const struct ckpt_meta *got, const struct gpt_config *want,
                     int first, int last, herr *e)
{
    const char *names[] = {"layers", "channels", "heads", "vocab", "padded_vocab", "max_seq",
                           "first layer", "last layer"};
    int g[8] = {got->c.layers, got->c.channels, got->c.heads, got->c.vocab, got->c.padded_vocab,
                got->c.max_seq, got->first, got->last};
    int w[8] = {want->layers, want->channels, want->heads, want->vocab, want->padded_vocab,
                want->max_seq, first, last};
    for (int i = 0; i < 8; i++)
        if (g[i] != w[i])
            return herr_config(e, "checkpoint %s: %s is %d but the job has %d", path, names[i], g[i],
                               w[i]);
    return 0;
}

/* Opens the checkpoint at path and reads its header into meta (want_crc: the payload's CRC it
 * records); the file's size must be what the header describes. The open file, or -1 with e. */
static int open_checked(const char *path, struct ckpt_meta *meta, uint32_t *want_crc, herr *e)
{
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return herr_config(e, "checkpoint %s: cannot open: %s", path, strerror(errno));
    unsigned char h[HDR_BYTES];
    struct stat st;
    int rc = ckpt_read_all(fd, h, sizeof h, 0);
    if (rc != 0) {
        int err = errno;
        close(fd);
        return rc < 0 ? herr_config(e, "checkpoint %s: cannot read: %s", path, strerror(err))
                      : herr_config(e, "checkpoint %s: truncated header (shorter than %d bytes)",
                                    path, HDR_BYTES);
    }
    if (decode_header(path, h, meta, want_crc, e) < 0 || fstat(fd, &st) < 0) {
        close(fd);
        return -1;
    }
    uint64_t want_size = HDR_BYTES + meta->nparams * sizeof(float) * (meta->has_moments ? 3 : 1);
    if ((uint64_t)st.st_size != want_size) {
        close(fd);
        return herr_config(e, "checkpoint %s: %lld bytes but the header describes %" PRIu64
                           " (%s)", path, (long long)st.st_size, want_size,
                           (uint64_t)st.st_size < want_size ? "truncated" : "trailing bytes");
    }
    return fd;
}

int ckpt_read(const char *path, struct ckpt_meta *meta, float *params, float *m, float *v,
              size_t n, herr *e)
{
    uint32_t want_crc;
    int fd = open_checked(path, meta, &want_crc, e);
    if (fd < 0)
        return -1;
    if (meta->nparams != n) {
        close(fd);
        return herr_config(e, "checkpoint %s: holds %" PRIu64 " parameters but the stage has %zu",
                           path, meta->nparams, n);
    }
    size_t bytes = n * sizeof(float);
    float *scratch = NULL;
    if (meta->has_moments && (!m || !v)) { /* still read them for the CRC */
        scratch = malloc(bytes ? bytes : 1);
        if (!scratch) {
            close(fd);
            return herr_set(e, "checkpoint %s: out of memory", path);
        }
    }
    float *dst[3] = {params, m && v ? m : scratch, m && v ? v : scratch};
    int parts = meta->has_moments ? 3 : 1;
    uint32_t crc = (uint32_t)crc32(0, Z_NULL, 0);
    for (int i = 0; i < parts; i++) {
        int rc = ckpt_read_all(fd, dst[i], bytes, HDR_BYTES + (off_t)bytes * i);
        if (rc != 0) {
            int err = errno;
            free(scratch);
            close(fd);
            return herr_config(e, "checkpoint %s: cannot read the payload: %s", path,
                               rc < 0 ? strerror(err) : "unexpected end of file");
        }
        crc = crc_update(crc, dst[i], bytes);
    }
    free(scratch);
    close(fd);
    if (crc != want_crc)
        return herr_config(e, "checkpoint %s: payload CRC mismatch (file is corrupt)", path);
    if (!meta->has_moments && m && v) {
        memset(m, 0, bytes);
        memset(v, 0, bytes);
    }
    return 0;
}

int ckpt_latest(const char *dir, int first, int last, char *path, size_t path_len, herr *e)
{
    struct ckpt_entry *v;
    int n;
    if (list_stage(dir, first, last, &v, &n, e) < 0)
        return -1;
    if (n == 0) {
        free(v);
        return 1;
    }
    snprintf(path, path_len, "%s/%s", dir, v[n - 1].name);
    free(v);
    return 0;
}

int ckpt_steps(const char *dir, int first, int last, int64_t **steps, int *n, herr *e)
{
    struct ckpt_entry *v;
    *steps = NULL;
    if (list_stage(dir, first, last, &v, n, e) < 0)
        return -1;
    if (*n > 0) {
        *steps = malloc((size_t)*n * sizeof **steps);
        if (!*steps) {
            free(v);
            return herr_set(e, "checkpoint directory %s: out of memory", dir);
        }
        for (int i = 0; i < *n; i++)
            (*steps)[i] = v[i].step;
    }
    free(v);
    return 0;
}

int ckpt_list(const char *dir, struct ckpt_file **files, int *n, herr *e)
{
    struct ckpt_entry *v;
    *files = NULL;
    if (list_stage(dir, -1, -1, &v, n, e) < 0)
        return -1;
    if (*n > 0) {
        *files = malloc((size_t)*n * sizeof **files);
        if (!*files) {
            free(v);
            return herr_set(e, "checkpoint directory %s: out of memory", dir);
        }
        for (int i = 0; i < *n; i++)
            (*files)[i] = (struct ckpt_file){v[i].first, v[i].last, v[i].step};
    }
    free(v);
    return 0;
}

int ckpt_read_ranges(const char *path, struct ckpt_meta *meta, const struct ckpt_range *r, int nr,
                     float *params, float *m, float *v, herr *e)
{
    uint32_t want_crc;
    int fd = open_checked(path, meta, &want_crc, e);
    if (fd < 0)
        return -1;
    uint64_t n = meta->nparams;
    int parts = meta->has_moments ? 3 : 1;
    for (int i = 0; i < nr; i++)
        if (r[i].src > n || r[i].n > n - r[i].src) {
            close(fd);
            return herr_config(e, "checkpoint %s: holds %" PRIu64 " parameters, fewer than the "
                               "range [%" PRIu64 ", %" PRIu64 ") asked of it", path, n, r[i].src,
                               r[i].src + r[i].n);
        }
    /* The payload streamed a chunk at a time: all of it through the CRC, the ranges copied. */
    size_t cap = 1u << 18; /* floats */
    float *buf = malloc(cap * sizeof *buf);
    if (!buf) {
        close(fd);
        return herr_set(e, "checkpoint %s: out of memory", path);
    }
    float *dst[3] = {params, m && v ? m : NULL, m && v ? v : NULL};
    uint32_t crc = (uint32_t)crc32(0, Z_NULL, 0);
    int rc = 0;
    for (int p = 0; p < parts && rc == 0; p++) {
        for (uint64_t at = 0; at < n && rc == 0; at += cap) {
            size_t k = n - at < cap ? (size_t)(n - at) : cap;
            rc = ckpt_read_all(fd, buf, k * sizeof *buf,
                          HDR_BYTES + (off_t)((uint64_t)p * n + at) * (off_t)sizeof *buf);
            if (rc != 0)
                break;
            crc = crc_update(crc, buf, k * sizeof *buf);
            for (int i = 0; dst[p] && i < nr; i++) {
                uint64_t lo = r[i].src > at ? r[i].src : at;
                uint64_t hi = r[i].src + r[i].n < at + k ? r[i].src + r[i].n : at + k;
                if (lo < hi)
                    memcpy(dst[p] + r[i].dst + (lo - r[i].src), buf + (lo - at),
                           (size_t)(hi - lo) * sizeof *buf);
            }
        }
    }
    int err = errno;
    free(buf);
    close(fd);
    if (rc != 0)
        return herr_config(e, "checkpoint %s: cannot read the payload: %s", path,
                           rc < 0 ? strerror(err) : "unexpected end of file");
    if (crc != want_crc)
        return herr_config(e, "checkpoint %s: payload CRC mismatch (file is corrupt)", path);
    for (int i = 0; !meta->has_moments && m && v && i < nr; i++) {
        memset(m + r[i].dst, 0, r[i].n * sizeof *m);
        memset(v + r[i].dst, 0, r[i].n * sizeof *v);
    }
    return 0;
}

int ckpt_path(const char *dir, int first, int last, int64_t step, char *path, size_t cap, herr *e)
{
    char name[96];
    ckpt_name(name, sizeof name, first, last, step);
    if ((size_t)snprintf(path, cap, "%s/%s", dir, name) >= cap)
        return herr_config(e, "checkpoint directory %s: path too long", dir);
    return 0;
}

/* ---------------------------------------------------------------- llm.c import */

double ckpt_model_floats(const struct gpt_config *c)
{
    double C = c->channels;
    return (double)c->padded_vocab * C + (double)c->max_seq * C +
           (double)c->layers * (12.0 * C * C + 13.0 * C) + 2.0 * C;
}

int llmc_read_config(const char *path, struct gpt_config *c, herr *e)
{
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return herr_config(e, "llm.c checkpoint %s: cannot open: %s", path, strerror(errno));
    int32_t h[256];
    struct stat st;
    int rc = ckpt_read_all(fd, h, sizeof h, 0);
    int st_rc = fstat(fd, &st);
    close(fd);
    if (rc != 0 || st_rc < 0)
        return herr_config(e, "llm.c checkpoint %s: truncated header (shorter than 1024 bytes)",
                           path);
    if (h[0] != LLMC_MAGIC)
        return herr_config(e, "llm.c checkpoint %s: magic %d is not llm.c's GPT-2 magic %d", path,
                           h[0], LLMC_MAGIC);
    if (h[1] != 3)
        return herr_config(e, "llm.c checkpoint %s: version %d is not supported (want 3: fp32 with "
                           "padded vocabulary)", path, h[1]);
    *c = (struct gpt_config){.layers = h[4], .channels = h[6], .heads = h[5], .vocab = h[3],
                             .padded_vocab = h[7], .max_seq = h[2]};
    herr inner;
    if (c->padded_vocab == 0 || gpt_config_check(c, &inner) < 0)
        return herr_config(e, "llm.c checkpoint %s: bad shape: %s", path,
                           c->padded_vocab == 0 ? "padded vocab is 0" : inner.msg);
    uint64_t C = (uint64_t)c->channels, L = (uint64_t)c->layers;
    /* at the int32 extremes of layers and max_seq the 64-bit count below would wrap */
    if (ckpt_model_floats(c) > 1e18)
        return herr_config(e, "llm.c checkpoint %s: bad shape: %d layers of %d channels and %d "
                           "positions are more parameters than a file can hold", path, c->layers,
                           c->channels, c->max_seq);
    uint64_t n = (uint64_t)c->padded_vocab * C + (uint64_t)c->max_seq * C + L * (12 * C * C + 13 * C)
                 + 2 * C;
    if ((uint64_t)st.st_size != 1024 + 4 * n)
        return herr_config(e, "llm.c checkpoint %s: %lld bytes but its shape needs %" PRIu64 " (%s)",
                           path, (long long)st.st_size, 1024 + 4 * n,
                           (uint64_t)st.st_size < 1024 + 4 * n ? "truncated" : "trailing bytes");
    return 0;
}

/* llm.c's parameter groups, in file order; per-layer groups hold all layers back to back */
static const struct { const char *suffix; int per_layer; } llmc_groups[16] = {
    {"wte", 0}, {"wpe", 0}, {"ln_1.weight", 1}, {"ln_1.bias", 1}, {"attn.qkv.weight", 1},
    {"attn.qkv.bias", 1}, {"attn.proj.weight", 1}, {"attn.proj.bias", 1}, {"ln_2.weight", 1},
    {"ln_2.bias", 1}, {"mlp.fc.weight", 1}, {"mlp.fc.bias", 1}, {"mlp.proj.weight", 1},
    {"mlp.proj.bias", 1}, {"ln_f.weight", 0}, {"ln_f.bias", 0}};

int llmc_load_stage(const char *path, struct gpt_stage *s, herr *e)
{
    struct gpt_config fc;
    if (llmc_read_config(path, &fc, e) < 0)
        return -1;
    const struct gpt_config *c = gpt_stage_config(s);
    struct ckpt_meta as_meta = {.c = fc, .first = 0, .last = 0};
    int first, last;
    gpt_stage_range(s, &first, &last);
    as_meta.first = first;
    as_meta.last = last;
    if (ckpt_check_shape(path, &as_meta, c, first, last, e) < 0)
        return -1;
    uint64_t C = (uint64_t)c->channels, L = (uint64_t)c->layers;
    uint64_t size[16] = {(uint64_t)c->padded_vocab * C, (uint64_t)c->max_seq * C, C, C, 3 * C * C,
                         3 * C, C * C, C, C, C, 4 * C * C, 4 * C, 4 * C * C, C, C, C};
    uint64_t start[16];
    uint64_t off = 0;
    for (int g = 0; g < 16; g++) {
        start[g] = off;
        off += size[g] * (llmc_groups[g].per_layer ? L : 1);
    }
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return herr_config(e, "llm.c checkpoint %s: cannot open: %s", path, strerror(errno));
    const struct gpt_tensor *t;
    int nt = gpt_stage_tensors(s, &t);
    float *p = gpt_stage_params(s);
    for (int i = 0; i < nt; i++) {
        int layer = -1, used = 0;
        const char *suffix = t[i].name;
        if (sscanf(t[i].name, "h%d.%n", &layer, &used) == 1 && used > 0)
            suffix = t[i].name + used;
        int g = 0;
        while (g < 16 && strcmp(llmc_groups[g].suffix, suffix) != 0)
            g++;
        if (g == 16 || (llmc_groups[g].per_layer != (layer >= 0))) {
            close(fd);
            return herr_config(e, "llm.c import: no llm.c tensor for %s", t[i].name);
        }
        uint64_t at = start[g] + (layer >= 0 ? (uint64_t)layer * size[g] : 0);
        if (ckpt_read_all(fd, p + t[i].offset, t[i].size * sizeof(float), 1024 + (off_t)(at * 4)) != 0) {
            int err = errno;
            close(fd);
            return herr_config(e, "llm.c checkpoint %s: cannot read %s: %s", path, t[i].name,
                               strerror(err));
        }
    }
    close(fd);
    return 0;
}
