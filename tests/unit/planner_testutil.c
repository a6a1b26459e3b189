#include "planner_testutil.h"

static uint64_t rng = 1;

void planner_test_seed(uint64_t seed) { rng = seed ? seed : 1; }

uint32_t planner_test_rand(void)
{
    rng ^= rng << 13;
    rng ^= rng >> 7;
    rng ^= rng << 17;
    return (uint32_t)(rng >> 11);
}

int planner_test_pick(int lo, int hi)
{
    return lo + (int)(planner_test_rand() % (uint32_t)(hi - lo + 1));
}
