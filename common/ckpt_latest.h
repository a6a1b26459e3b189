/* The step a checkpoint directory's latest-step file names.
 *
 * The trainer writes <dir>/latest-step once every stage has written that step's file; resume
 * starts there. The workers read it (resume, export) and so does `holmes-operator local` (is
 * the directory a finished run's?), both through this one strict reader: a torn or edited
 * file is refused naming the file and what it holds, never read as some other step.
 */
#ifndef HOLMES_CKPT_LATEST_H
#define HOLMES_CKPT_LATEST_H

#include "error.h"

/* 0 and *step, 1 when there is no such file, -1 (naming the file and what it holds) when it is
 * not a step number: decimal digits, an optional newline, at most 2^53. */
int ckpt_read_latest_step(const char *dir, long long *step, herr *e);

#endif
