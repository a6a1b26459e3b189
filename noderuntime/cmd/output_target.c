#include "output_target.h"

#include <dirent.h>
#include <errno.h>
#include <libgen.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

/* The file a path names, when there is one (followed through links). */
static int identity(const char *path, struct stat *st)
{
    return path && stat(path, st) == 0;
}

static int same(const struct stat *a, const struct stat *b)
{
    return a->st_dev == b->st_dev && a->st_ino == b->st_ino;
}

/* Where a path that is not there yet would be: its directory resolved, and its name. 0, or -1
 * when the directory does not resolve either (the write will say why). */
static int would_be(const char *path, char *out, size_t cap)
{
    char a[PATH_MAX], b[PATH_MAX], dir[PATH_MAX];
    if (snprintf(a, sizeof a, "%s", path) >= (int)sizeof a ||
        snprintf(b, sizeof b, "%s", path) >= (int)sizeof b || !realpath(dirname(a), dir))
        return -1;
    return snprintf(out, cap, "%s/%s", dir, basename(b)) < (int)cap ? 0 : -1;
}

/* Whether two targets name one file: the same inode when there, else the same place. */
static int same_target(const char *a, const char *b)
{
    struct stat sa, sb;
    int ha = identity(a, &sa), hb = identity(b, &sb);
    if (ha && hb)
        return same(&sa, &sb);
    if (ha || hb)
        return 0;
    char pa[PATH_MAX + NAME_MAX + 2], pb[PATH_MAX + NAME_MAX + 2];
    return would_be(a, pa, sizeof pa) == 0 && would_be(b, pb, sizeof pb) == 0 && !strcmp(pa, pb);
}

/* Whether `t` (the target's file) is a regular file directly inside directory `dir`. */
static int inside(const struct stat *t, const char *dir)
{
    DIR *d = opendir(dir);
    if (!d)
        return 0;
    int found = 0;
    struct dirent *de;
    while (!found && (de = readdir(d))) {
        char p[PATH_MAX];
        struct stat st;
        if (snprintf(p, sizeof p, "%s/%s", dir, de->d_name) < (int)sizeof p &&
            stat(p, &st) == 0 && S_ISREG(st.st_mode))
            found = same(&st, t);
    }
    closedir(d);
    return found;
}

static const char *kind(mode_t m)
{
    return S_ISDIR(m) ? "a directory" : S_ISLNK(m) ? "a symbolic link" : S_ISFIFO(m) ? "a FIFO"
           : S_ISCHR(m) || S_ISBLK(m) ? "a device" : S_ISSOCK(m) ? "a socket"
                                      : "not a regular file";
}

int output_targets_check(const struct output_target *out, int n_out,
                         const struct output_input *in, int n_in, herr *e)
{
    for (int i = 0; i < n_out; i++) {
        const char *p = out[i].path;
        if (!p)
            continue;
        struct stat l, t;
        if (lstat(p, &l) == 0 && !S_ISREG(l.st_mode))
            return herr_config(e, "%s %s: %s is there; give a new file or a regular file to "
                               "replace", out[i].opt, p, kind(l.st_mode));
        int there = identity(p, &t);
        for (int k = 0; there && k < n_in; k++) {
            struct stat s;
            if (!in[k].path)
                continue;
            if (in[k].dir ? inside(&t, in[k].path) : identity(in[k].path, &s) && same(&s, &t))
                return herr_config(e, "%s %s: that is %s%s %s, which this command reads; "
                                   "write elsewhere", out[i].opt, p,
                                   in[k].dir ? "a file of " : "", in[k].opt, in[k].path);
        }
        for (int k = 0; k < i; k++)
            if (out[k].path && same_target(out[k].path, p))
                return herr_config(e, "%s %s: the same file as %s %s; give each its own",
                                   out[i].opt, p, out[k].opt, out[k].path);
    }
    return 0;
}
