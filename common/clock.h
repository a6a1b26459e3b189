/* The one clock: seconds as doubles. Monotonic for intervals, deadlines and rates (never
 * jumps); wall for what is shown to people or compared across processes (timestamps). */
#ifndef HOLMES_CLOCK_H
#define HOLMES_CLOCK_H

#include <time.h>

double clock_mono_s(void);  /* CLOCK_MONOTONIC */
double clock_mono_ms(void); /* the same in milliseconds */
double clock_wall_s(void);  /* CLOCK_REALTIME: Unix seconds */
/* Sleeps s seconds (nothing when s <= 0), going on after a signal handler ran. */
void clock_sleep_s(double s);
/* The moment s seconds from now on clock id, for a timed wait (pthread_cond_timedwait: the
 * condition variable's clock, CLOCK_REALTIME unless it was set). */
struct timespec clock_deadline(clockid_t id, double s);

#endif
