/* The seeded random numbers of the planner's randomised tests and benchmark (xorshift64):
 * the same seed, the same clusters and jobs. */
#ifndef HOLMES_PLANNER_TESTUTIL_H
#define HOLMES_PLANNER_TESTUTIL_H

#include <stdint.h>

void planner_test_seed(uint64_t seed); /* 0 is taken as 1 */
uint32_t planner_test_rand(void);
/* A number in [lo, hi]. */
int planner_test_pick(int lo, int hi);

#endif
