/* What the file-reading fuzz targets share: a private directory under /dev/shm that each input's
 * files are written into, by the names a user would give them (so that the messages read as a
 * user's do), entered for each input and left after it (libFuzzer writes its corpus relative to
 * where it started), and removed when the target exits. */
#ifndef HOLMES_FUZZ_FILES_H
#define HOLMES_FUZZ_FILES_H

#include <dirent.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static int fuzz_home_fd = -1, fuzz_work_fd = -1;
static char fuzz_work_dir[64];

/* data[size] as the file name (relative to the working directory): 0, or -1. */
static inline int fuzz_write_file(const char *name, const uint8_t *data, size_t size)
{
    FILE *f = fopen(name, "wb");
    if (!f)
        return -1;
    size_t put = size ? fwrite(data, 1, size, f) : 0;
    int rc = fclose(f);
    return put == size && rc == 0 ? 0 : -1;
}

/* Removes every file of dir (relative to the working directory) and, with depth, the files of
 * its folders and the folders. */
static inline void fuzz_empty_dir(const char *dir, int depth)
{
    DIR *d = opendir(dir);
    if (!d)
        return;
    struct dirent *de;
    char path[512];
    while ((de = readdir(d))) {
        if (!strcmp(de->d_name, ".") || !strcmp(de->d_name, ".."))
            continue;
        snprintf(path, sizeof path, "%s/%s", dir, de->d_name);
        struct stat st;
        if (lstat(path, &st) == 0 && S_ISDIR(st.st_mode)) {
            if (depth > 0) {
                fuzz_empty_dir(path, depth - 1);
                rmdir(path);
            }
        } else {
            unlink(path);
        }
    }
    closedir(d);
}

static inline void fuzz_remove_workdir(void)
{
    if (fuzz_home_fd >= 0 && fchdir(fuzz_home_fd) == 0 && fuzz_work_dir[0]) {
        fuzz_empty_dir(fuzz_work_dir, 32); /* nic_sysfs: whole sysfs trees */
        rmdir(fuzz_work_dir);
    }
}

/* Into the private directory (made on the first call: /dev/shm/holmes-fuzz-TAG.XXXXXX). */
static inline void fuzz_enter_workdir(const char *tag)
{
    if (fuzz_work_fd < 0) {
        snprintf(fuzz_work_dir, sizeof fuzz_work_dir, "/dev/shm/holmes-fuzz-%s.XXXXXX", tag);
        fuzz_home_fd = open(".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
        if (fuzz_home_fd < 0 || !mkdtemp(fuzz_work_dir) ||
            (fuzz_work_fd = open(fuzz_work_dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC)) < 0) {
            perror("fuzz: a private directory under /dev/shm");
            abort();
        }
        atexit(fuzz_remove_workdir);
    }
    if (fchdir(fuzz_work_fd) != 0)
        abort();
}

/* Back to where the target started. */
static inline void fuzz_leave_workdir(void)
{
    if (fchdir(fuzz_home_fd) != 0)
        abort();
}

#endif
