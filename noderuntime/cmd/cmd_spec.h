/* The training flags `holmes-node train` and `holmes-node worker` (rank-table mode) share: each
 * sets one field of a TrainingJob spec. The spec starts from the CRD's defaults
 * (tj_spec_defaults), takes a manifest's spec first (--job FILE: a TrainingJob, YAML or JSON,
 * validated as the API validates it), then the flags in their order; the trainer's
 * configuration is trainer_config_from_spec's, the one a TrainingJob's workers get. So both
 * commands have the spec's defaults and every field the trainer reads. */
#ifndef HOLMES_CMD_SPEC_H
#define HOLMES_CMD_SPEC_H

#include <stdio.h>

#include "error.h"
#include "trainer.h"
#include "trainingjob.h"

#define CMD_SPEC_MAX_FLAGS 128

struct cmd_spec {
    const char *cmd;                  /* "holmes-node train", for messages */
    const char *job;                  /* --job FILE, or NULL */
    const char *flag[CMD_SPEC_MAX_FLAGS], *value[CMD_SPEC_MAX_FLAGS]; /* in order */
    int nflags;
    struct tj_spec spec;              /* resolved by cmd_spec_resolve */
    int resolved;
    /* the command's own settings, not the spec's */
    int engine_set;                   /* --engine given */
    enum engine_kind engine;
    int device;                       /* --device (CUDA device of the rank) */
    size_t bucket;                    /* --bucket (ZeRO bucket floats, 0: default) */
};

void cmd_spec_init(struct cmd_spec *cs, const char *cmd);
void cmd_spec_free(struct cmd_spec *cs);
/* One of the flags with its value: 1 taken (its syntax checked; applied by cmd_spec_resolve),
 * 0 not one of them, -1 a bad value (the message printed: the command exits 2). */
int cmd_spec_flag(struct cmd_spec *cs, const char *flag, const char *value);
/* The spec: defaults, --job's, then the flags. -1 with `e` naming the file, field or flag. */
int cmd_spec_resolve(struct cmd_spec *cs, herr *e);
/* The trainer's configuration of the resolved spec (trainer_config_from_spec), with the
 * command's own settings (--engine, --device, --bucket). */
int cmd_spec_config(struct cmd_spec *cs, struct trainer_config *c, herr *e);
/* The flags' help, for the commands' usage. */
void cmd_spec_usage(FILE *f);

#endif
