/* Which job a checkpoint directory belongs to.
 *
 * Two jobs given one checkpoint.path would prune each other's files (same stage names) and a
 * restart of one could resume from the other's weights, silently when the shapes agree. So the
 * first job to write a directory claims it: <dir>/holmes-job holds its name (namespace/name on
 * Kubernetes, the manifest's name for `holmes-operator local`) and a newline. The same job
 * (restarted, re-planned, deleted and applied again to resume) passes; another job is refused
 * before it writes anything, with an error naming the directory, both jobs and the file. A
 * directory with checkpoints but no claim (written by holmes-node train, or before claims) is
 * claimed as it is. Every rank of a job claims; exactly one creates the file (O_EXCL), the
 * others read it. In common/: the workers claim, `holmes-operator local` reads the claim before
 * it moves a finished run's directory aside.
 */
#ifndef HOLMES_CKPT_OWNER_H
#define HOLMES_CKPT_OWNER_H

#include "error.h"

#define CKPT_OWNER_FILE "holmes-job"

/* Claims dir (which exists) for job ("" or NULL: no job, nothing claimed). 0 when the directory
 * is job's (now or already); -1 with HERR_CONFIG when another job's (or its claim is unreadable
 * or incomplete), or with the errno's kind when the file cannot be made. */
int ckpt_claim_dir(const char *dir, const char *job, herr *e);

/* The same check without claiming (`holmes-operator local`, before it moves a finished run's
 * directory): 0 when dir is unclaimed (or absent) or job's, -1 as ckpt_claim_dir refuses. */
int ckpt_claim_check(const char *dir, const char *job, herr *e);

#endif
