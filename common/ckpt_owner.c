/* The claim of a checkpoint directory by one job (ckpt_owner.h). */
#include "ckpt_owner.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define OWNER_MAX 1024
#define INCOMPLETE_WAIT_MS 2000 /* a claim being written by another rank: how long to wait */

/* The claim's text: 1 complete (ends in a newline, stripped), 0 absent, 2 not yet complete,
 * -1 unreadable (e set). */
static int read_claim(const char *path, char *owner, size_t cap, herr *e)
{
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
        if (errno == ENOENT || errno == ENOTDIR)
            return 0;
        return herr_set_kind(e, herr_kind_of_errno(errno), "checkpoint directory claim %s: "
                             "cannot open: %s", path, strerror(errno));
    }
    size_t got = 0;
    while (got < cap - 1) {
        ssize_t r = read(fd, owner + got, cap - 1 - got);
        if (r < 0 && errno == EINTR)
            continue;
        if (r < 0) {
            int err = errno;
            close(fd);
            return herr_set_kind(e, herr_kind_of_errno(err), "checkpoint directory claim %s: "
                                 "cannot read: %s", path, strerror(err));
        }
        if (r == 0)
            break;
        got += (size_t)r;
    }
    close(fd);
    owner[got] = '\0';
    char *nl = memchr(owner, '\n', got);
    if (!nl)
        return got == cap - 1 ? herr_config(e, "checkpoint directory claim %s: longer than %d "
                                            "bytes: not a claim this version wrote; delete it to "
                                            "hand the directory over", path, OWNER_MAX - 1)
                              : 2;
    *nl = '\0';
    return 1;
}

/* Creates the claim: 0 made, 1 another rank made it first, -1 error */
static int make_claim(const char *path, const char *job, herr *e)
{
    int fd = open(path, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
    if (fd < 0) {
        if (errno == EEXIST)
            return 1;
        return herr_set_kind(e, herr_kind_of_errno(errno), "checkpoint directory claim %s: "
                             "cannot create: %s", path, strerror(errno));
    }
    char line[OWNER_MAX + 1];
    int n = snprintf(line, sizeof line, "%s\n", job);
    ssize_t w = write(fd, line, (size_t)n); /* one short write: a reader sees it whole or not */
    int err = w == n ? 0 : w < 0 ? errno : EIO;
    if (!err && fsync(fd) < 0)
        err = errno;
    if (close(fd) < 0 && !err)
        err = errno;
    if (err) {
        unlink(path); /* a half claim would hold every rank up */
        return herr_set_kind(e, herr_kind_of_errno(err), "checkpoint directory claim %s: cannot "
                             "write: %s", path, strerror(err));
    }
    return 0;
}

/* The claim's path in dir; -1 when too long. */
static int claim_path(const char *dir, char *path, size_t cap, herr *e)
{
    if ((size_t)snprintf(path, cap, "%s/%s", dir, CKPT_OWNER_FILE) >= cap)
        return herr_config(e, "checkpoint directory %s: path too long", dir);
    return 0;
}

/* The claim read (waiting a little for one another rank is writing): 1 owner set, 0 none. */
static int read_complete_claim(const char *path, char *owner, size_t cap, herr *e)
{
    for (int waited_ms = 0;; waited_ms += 20) {
        int r = read_claim(path, owner, cap, e);
        if (r != 2)
            return r;
        if (waited_ms >= INCOMPLETE_WAIT_MS)
            return herr_config(e, "checkpoint directory claim %s is incomplete (no newline after "
                               "%d ms: a crash while it was written?); delete it to claim the "
                               "directory again", path, waited_ms);
        struct timespec ts = {0, 20 * 1000000L};
        nanosleep(&ts, NULL);
    }
}

/* 0 when owner is job, else the refusal naming both and the claim */
static int owner_is(const char *dir, const char *path, const char *owner, const char *job,
                    herr *e)
{
    if (strcmp(owner, job) == 0)
        return 0;
    return herr_config(e, "checkpoint directory %s holds the checkpoints of job %s (its claim, "
                       "%s), not of job %s: two jobs in one directory would delete and resume "
                       "from each other's checkpoints; give this job a checkpoint.path of its "
                       "own, or delete %s to hand the directory over", dir, owner, path, job,
                       path);
}

int ckpt_claim_check(const char *dir, const char *job, herr *e)
{
    char path[4096], owner[OWNER_MAX];
    if (!job || !*job)
        return 0;
    if (claim_path(dir, path, sizeof path, e) < 0)
        return -1;
    int r = read_complete_claim(path, owner, sizeof owner, e);
    return r <= 0 ? r : owner_is(dir, path, owner, job, e);
}

int ckpt_claim_dir(const char *dir, const char *job, herr *e)
{
    if (!job || !*job)
        return 0;
    if (strlen(job) >= OWNER_MAX || strchr(job, '\n'))
        return herr_config(e, "checkpoint directory %s: job name \"%.64s...\" cannot be "
                           "written into a claim", dir, job);
    char path[4096], owner[OWNER_MAX];
    if (claim_path(dir, path, sizeof path, e) < 0)
        return -1;
    for (;;) {
        int r = read_complete_claim(path, owner, sizeof owner, e);
        if (r < 0)
            return -1;
        if (r == 1)
            return owner_is(dir, path, owner, job, e);
        int m = make_claim(path, job, e);
        if (m <= 0)
            return m; /* made (0), or an error */
        /* another rank made it first: read it */
    }
}
