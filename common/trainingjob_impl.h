/* Private to common/: what the TrainingJob files share.
 *   trainingjob.c           names, model presets, errors, defaults, lifetime, tj_load_file
 *   trainingjob_parse.c     the JSON field readers and the parser (tj_spec_from_json,
 *                           tj_job_from_json)
 *   trainingjob_validate.c  tj_spec_validate, tj_spec_runnable
 *   trainingjob_to_json.c   tj_spec_to_json */
#ifndef HOLMES_TRAININGJOB_IMPL_H
#define HOLMES_TRAININGJOB_IMPL_H

#include "trainingjob.h"

/* The API's names of enum tj_lr_schedule, enum tj_data_format and the NIC classes. */
extern const char *const tj_lr_names[4];
extern const char *const tj_format_names[2];
extern const char *const tj_class_names[3];
extern const char *const tj_gang_names[TJ_GANG_COUNT]; /* [TJ_GANG_DEFAULT] is "" */

#endif
