/* What `holmes-operator local` prints while the job runs: the placement of each plan, a live
 * progress line (redrawn in place on a terminal, a line every 5 s otherwise) and the notices
 * between them ("[Running] ...", "[local] ..."), each on a line of its own. */
#ifndef HOLMES_LOCAL_CONSOLE_H
#define HOLMES_LOCAL_CONSOLE_H

#include <stddef.h>

#include "coordinator.h"
#include "planner.h"

struct local_console {
    int tty;           /* standard output is a terminal: the progress line is redrawn */
    int quiet;         /* --quiet: no progress line */
    int line_open;     /* a progress line is drawn without its newline */
    double last_print; /* not a terminal: when the last progress line was printed */
    long eval_said;    /* the step of the last evaluation said */
};

/* Ends an open progress line, so that what comes next starts a line of its own. */
void local_console_end_line(struct local_console *con);
/* "[tag] message" on a line of its own, flushed. */
void local_console_say(struct local_console *con, const char *tag, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
/* The plan: its shape, each stage's fabric, layers and workers, the data-parallel groups'
 * transports, the predicted step time and the token slicing. */
void local_console_placement(struct local_console *con, const struct plan *p,
                             const struct coord_worker *w);
/* The progress line: step, loss, tokens/s, ms/step, ETA. */
void local_console_progress(struct local_console *con, const struct coord_progress *p);
/* Seconds as "42s", "3m07s", "1h05m" ("?" when negative). */
void local_console_duration(double s, char *buf, size_t cap);

#endif
