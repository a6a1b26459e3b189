/* Minimal test harness. Each check prints "PASS name" or "FAIL name: why";
 * tests/run.sh counts those lines. A test binary exits non-zero on any failure. */
#ifndef HOLMES_TEST_H
#define HOLMES_TEST_H

#include <math.h>
#include <stdio.h>
#include <string.h>

static int test_failures_;
static int test_passes_;

#define TEST_PASS(name) do { printf("PASS %s\n", (name)); test_passes_++; } while (0)
#define TEST_FAIL(name, ...) do { printf("FAIL %s: ", (name)); printf(__VA_ARGS__); \
        printf(" (%s:%d)\n", __FILE__, __LINE__); test_failures_++; } while (0)

/* CHECK(name, cond): one named assertion. */
#define CHECK(name, cond) do { if (cond) TEST_PASS(name); \
        else TEST_FAIL(name, "%s", #cond); } while (0)
/* CHECK_MSG(name, cond, fmt, ...): an assertion that says what it saw when it fails. */
#define CHECK_MSG(name, cond, ...) do { if (cond) TEST_PASS(name); \
        else TEST_FAIL(name, __VA_ARGS__); } while (0)
/* TEST_SKIP(name, why): a check this machine cannot run, said (tests/run.sh shows it). */
#define TEST_SKIP(name, why) printf("SKIP %s: %s\n", (name), (why))
#define CHECK_INT(name, got, want) do { long long g_ = (long long)(got), w_ = (long long)(want); \
        if (g_ == w_) TEST_PASS(name); else TEST_FAIL(name, "got %lld, want %lld", g_, w_); } while (0)
#define CHECK_STR(name, got, want) do { const char *g_ = (got), *w_ = (want); \
        if (g_ && w_ && strcmp(g_, w_) == 0) TEST_PASS(name); \
        else TEST_FAIL(name, "got \"%s\", want \"%s\"", g_ ? g_ : "(null)", w_ ? w_ : "(null)"); } while (0)
#define CHECK_NEAR(name, got, want, rel) do { double g_ = (got), w_ = (want); \
        double d_ = fabs(g_ - w_), s_ = fabs(w_) > 1e-30 ? fabs(w_) : 1.0; \
        if (d_ / s_ <= (rel)) TEST_PASS(name); \
        else TEST_FAIL(name, "got %.9g, want %.9g (rel err %.3g > %.3g)", g_, w_, d_ / s_, (double)(rel)); } while (0)

/* The integer a file starts with, or `def` when it cannot be read. */
static inline long test_read_long(const char *path, long def)
{
    FILE *f = fopen(path, "r");
    long v = def;
    if (f) {
        if (fscanf(f, "%ld", &v) != 1)
            v = def;
        fclose(f);
    }
    return v;
}

#define TEST_MAIN_END() do { return test_failures_ ? 1 : 0; } while (0)

#endif
