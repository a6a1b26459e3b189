#include "clock.h"

#include <errno.h>
#include <time.h>

static double read_s(clockid_t id)
{
    struct timespec ts;
    clock_gettime(id, &ts); /* cannot fail for these clocks with a valid pointer */
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

double clock_mono_s(void) { return read_s(CLOCK_MONOTONIC); }
double clock_mono_ms(void) { return read_s(CLOCK_MONOTONIC) * 1e3; }
double clock_wall_s(void) { return read_s(CLOCK_REALTIME); }

void clock_sleep_s(double s)
{
    if (s <= 0)
        return;
    struct timespec ts = {(time_t)s, (long)((s - (double)(time_t)s) * 1e9)};
    while (nanosleep(&ts, &ts) != 0 && errno == EINTR) {
    }
}

struct timespec clock_deadline(clockid_t id, double s)
{
    struct timespec dl;
    clock_gettime(id, &dl);
    dl.tv_sec += (time_t)s;
    dl.tv_nsec += (long)((s - (double)(time_t)s) * 1e9);
    if (dl.tv_nsec >= 1000000000L) {
        dl.tv_sec++;
        dl.tv_nsec -= 1000000000L;
    }
    return dl;
}
