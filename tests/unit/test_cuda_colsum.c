/* noderuntime/engine/cuda/colsum_plan.h (how the GPU engine's column sums split their rows into
 * blocks): for every row count up to 200,000, the chunks cover the rows once, no chunk holds more
 * than COLSUM_MAX_ROWS rows, there are enough chunks to fill a GPU (at least 89 % of
 * min(COLSUM_MIN_CHUNKS, rows / COLSUM_MIN_ROWS): 4,096 rows of GPT-2 1.5B at B 4 give 256), and no
 * row count makes more chunks than the partial buffer sized for a larger one holds; past that,
 * to the largest int, never more than COLSUM_MAX_CHUNKS (the grid's y). */
#include "test.h"

#include "cuda/colsum_plan.h"

int main(void)
{
    int cover_bad = -1, size_bad = -1, few_bad = -1, bound_bad = -1, bound_seen = 0;
    int max_seen = 0; /* the most chunks of any n so far: colsum_max_chunks(n) must hold it */
    for (int n = 1; n <= 200000; n++) {
        int r = colsum_rows(n), c = colsum_chunks(n);
        if (cover_bad < 0 && !(r >= 1 && c >= 1 && (long)(c - 1) * r < n && (long)c * r >= n))
            cover_bad = n;
        if (size_bad < 0 && r > COLSUM_MAX_ROWS)
            size_bad = n;
        int want = (n + COLSUM_MIN_ROWS - 1) / COLSUM_MIN_ROWS;
        if (want > COLSUM_MIN_CHUNKS)
            want = COLSUM_MIN_CHUNKS;
        if (few_bad < 0 && (double)c < 0.89 * want)
            few_bad = n;
        if (c > max_seen)
            max_seen = c;
        if (bound_bad < 0 && colsum_max_chunks(n) < max_seen) {
            bound_bad = n;
            bound_seen = max_seen;
        }
    }
    if (cover_bad < 0)
        TEST_PASS("colsum_plan.chunks_cover_every_row_once");
    else
        TEST_FAIL("colsum_plan.chunks_cover_every_row_once", "%d rows: %d chunks of %d", cover_bad,
                  colsum_chunks(cover_bad), colsum_rows(cover_bad));
    if (size_bad < 0)
        TEST_PASS("colsum_plan.at_most_max_rows_a_chunk");
    else
        TEST_FAIL("colsum_plan.at_most_max_rows_a_chunk", "%d rows: %d a chunk", size_bad,
                  colsum_rows(size_bad));
    if (few_bad < 0)
        TEST_PASS("colsum_plan.enough_chunks_to_fill_a_gpu");
    else
        TEST_FAIL("colsum_plan.enough_chunks_to_fill_a_gpu", "%d rows: only %d chunks", few_bad,
                  colsum_chunks(few_bad));
    if (bound_bad < 0)
        TEST_PASS("colsum_plan.partial_buffer_holds_every_smaller_pass");
    else
        TEST_FAIL("colsum_plan.partial_buffer_holds_every_smaller_pass",
                  "up to %d rows: %d chunks seen, the buffer holds %d", bound_bad, bound_seen,
                  colsum_max_chunks(bound_bad));
    if (colsum_rows(4096) == 16 && colsum_chunks(4096) == 256 && colsum_rows(16384) == 64)
        TEST_PASS("colsum_plan.gpt2_shapes");
    else
        TEST_FAIL("colsum_plan.gpt2_shapes", "4096 rows: %d chunks of %d; 16384 rows: %d a chunk",
                  colsum_chunks(4096), colsum_rows(4096), colsum_rows(16384));
    /* past 64 x 65,535 rows: at most COLSUM_MAX_CHUNKS chunks (the grid's y), still covering
     * every row once, to the largest int */
    int big_bad = -1;
    for (long long n = 4000000; n <= 2147483647LL; n = n * 5 / 4 + 7) {
        int nn = (int)n, r = colsum_rows(nn), c = colsum_chunks(nn);
        if (big_bad < 0 && !(c >= 1 && c <= COLSUM_MAX_CHUNKS && (long long)(c - 1) * r < n &&
                             (long long)c * r >= n && colsum_max_chunks(nn) >= c))
            big_bad = nn;
    }
    int top = 2147483647;
    if (!(colsum_chunks(top) <= COLSUM_MAX_CHUNKS && (long long)colsum_chunks(top) * colsum_rows(top) >= top))
        big_bad = top;
    if (big_bad < 0)
        TEST_PASS("colsum_plan.at_most_max_chunks_to_the_largest_int");
    else
        TEST_FAIL("colsum_plan.at_most_max_chunks_to_the_largest_int", "%d rows: %d chunks of %d",
                  big_bad, colsum_chunks(big_bad), colsum_rows(big_bad));
    if (colsum_chunks(0) == 0 && colsum_max_chunks(0) == 0)
        TEST_PASS("colsum_plan.no_rows_no_chunks");
    else
        TEST_FAIL("colsum_plan.no_rows_no_chunks", "%d chunks", colsum_chunks(0));
    TEST_MAIN_END();
}
