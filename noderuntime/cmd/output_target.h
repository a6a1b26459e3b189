/* Where a command may write a file it makes whole (a temporary file renamed over the target:
 * holmes-node export, eval --scores-out). The rename replaces whatever is at the path, so
 * before anything is read or written the targets are checked against what the command reads:
 *   - a target that is there must be a regular file (not a directory, a symbolic link, a FIFO
 *     or a device: the rename would replace the link or the node itself);
 *   - a target must not be a file the command reads: one of its input files, or a regular file
 *     directly inside one of its input directories (a checkpoint set), whatever the path that
 *     names it (compared by device and inode);
 *   - two targets of one command must not be the same file.
 * Each refusal names the option and the path (a usage error: the command exits 2). */
#ifndef HOLMES_OUTPUT_TARGET_H
#define HOLMES_OUTPUT_TARGET_H

#include "error.h"

struct output_input {
    const char *opt;  /* "--choices" */
    const char *path; /* NULL: not given */
    int dir;          /* 1: a directory whose regular files the command reads */
};

struct output_target {
    const char *opt;  /* "--llmc" */
    const char *path; /* NULL: not given */
};

int output_targets_check(const struct output_target *out, int n_out,
                         const struct output_input *in, int n_in, herr *e);

#endif
