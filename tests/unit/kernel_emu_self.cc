/* The kernel emulator's own checks (tests/unit/kernel_emu.h): what every kernel emulator
 * (flash_mma_emu.cc, layernorm_emu.cc, ...) relies on, under both schedules:
 *   - a thread's locals (kept in registers across its switches) survive a thousand barriers and
 *     warp-wide operations, its stack is aligned as after a call (a 16-byte-aligned local, a
 *     printf of a double: SSE stores that fault on a misaligned stack) and deep enough for a
 *     recursion of 64 KB;
 *   - a block barrier waits for every thread (each reads what its neighbour wrote before it);
 *   - shfl_xor gives each lane lane ^ m's value;
 *   - every (block, thread) of a 2-D grid runs exactly once, with its own indices;
 *   - a barrier one thread never reaches is reported as a deadlock, and a read past a buffer's end
 *     as a guard-page fault (each in a child process: both end the emulator), both with a FAIL
 *     line naming the emulator.
 * Built and run by `make emu-self-check` (mk/cuda.mk; make test runs it in cuda_build.sh). */
#include "kernel_emu.h"

#include <sys/wait.h>

#include <string>

namespace emu {

/* a recursion using about 1 KB of stack a level */
__attribute__((noinline)) static unsigned deep(int n, unsigned seed)
{
    volatile unsigned char pad[1000];
    for (int i = 0; i < 1000; i++)
        pad[i] = (unsigned char)(seed + i);
    if (n == 0)
        return pad[999];
    return pad[n % 1000] + deep(n - 1, seed * 31u + 7u);
}

static void locals_case()
{
    const int n = 256, rounds = 1000;
    char name[96];
    snprintf(name, sizeof name, "kernel_emu_self.locals_across_switches%s", eager ? ".eager" : "");
    std::vector<int> bad(n, 1);
    std::vector<int> misaligned(n, 1), printed(n, 0), deep_ok(n, 0);
    launch(dim3e{1, 1, 1}, dim3e{(unsigned)n, 1, 1}, 0, [&] {
        int me = (int)threadIdx.x;
        /* several live values, more than the caller-saved registers hold */
        long a = me, b = 3L * me + 1, c = 7L * me + 2, d = 11L * me + 3, e = 13L * me + 5;
        double f = me * 0.5, g = me * 0.25 + 1.0;
        for (int r = 0; r < rounds; r++) {
            a += 1; b += 3; c += 7; d += 11; e += 13;
            f += 0.5; g += 0.25;
            if (r % 2)
                block_sync();
            else
                (void)shfl_xor((float)me, 1);
        }
        bad[me] = a != me + rounds || b != 3L * me + 1 + 3L * rounds || c != 7L * me + 2 + 7L * rounds ||
                  d != 11L * me + 3 + 11L * rounds || e != 13L * me + 5 + 13L * rounds ||
                  f != me * 0.5 + 0.5 * rounds || g != me * 0.25 + 1.0 + 0.25 * rounds;
        alignas(16) float v[4] = {1, 2, 3, (float)me};
        misaligned[me] = (int)((uintptr_t)v % 16);
        char text[64];
        snprintf(text, sizeof text, "%.3f", (double)v[3] + 0.5);
        printed[me] = atof(text) == me + 0.5;
        deep_ok[me] = deep(64, (unsigned)me) == deep(64, (unsigned)me);
    });
    int nbad = 0, nmis = 0, nprint = 0, ndeep = 0;
    for (int i = 0; i < n; i++) {
        nbad += bad[i];
        nmis += misaligned[i] != 0;
        nprint += !printed[i];
        ndeep += !deep_ok[i];
    }
    check(name, nbad == 0, "%.0f of %.0f threads lost a local across their switches", nbad, n);
    snprintf(name, sizeof name, "kernel_emu_self.stack_aligned%s", eager ? ".eager" : "");
    check(name, nmis == 0 && nprint == 0, "%.0f misaligned 16-byte locals, %.0f bad printf", nmis, nprint);
    snprintf(name, sizeof name, "kernel_emu_self.deep_stack%s", eager ? ".eager" : "");
    check(name, ndeep == 0, "%.0f threads' 64 KB recursion differed", ndeep);
}

static void barrier_case()
{
    const int n = 128;
    char name[96];
    snprintf(name, sizeof name, "kernel_emu_self.block_barrier%s", eager ? ".eager" : "");
    std::vector<int> seen(n, -1);
    launch(dim3e{1, 1, 1}, dim3e{(unsigned)n, 1, 1}, n * sizeof(int), [&] {
        int me = (int)threadIdx.x;
        int *sm = (int *)smem_base;
        for (int r = 0; r < 3; r++) { /* three rounds: each write lands before any read of it */
            sm[me] = me * 10 + r;
            block_sync();
            int got = sm[(me + 1) % n];
            block_sync();
            if (got != ((me + 1) % n) * 10 + r)
                seen[me] = got;
            else if (r == 2)
                seen[me] = got;
        }
    });
    int wrong = 0;
    for (int i = 0; i < n; i++)
        wrong += seen[i] != ((i + 1) % n) * 10 + 2;
    check(name, wrong == 0, "%.0f of %.0f threads read a neighbour's value before its write", wrong, n);

    snprintf(name, sizeof name, "kernel_emu_self.shfl_xor%s", eager ? ".eager" : "");
    std::vector<float> got(64 * 5);
    launch(dim3e{1, 1, 1}, dim3e{64, 1, 1}, 0, [&] {
        int me = (int)threadIdx.x, k = 0;
        for (int m = 1; m < 32; m <<= 1)
            got[me * 5 + k++] = shfl_xor((float)(me * 100), m);
    });
    int wrong2 = 0;
    for (int i = 0; i < 64; i++)
        for (int k = 0, m = 1; m < 32; m <<= 1, k++) /* within the warp: lane i ^ m of i's warp */
            wrong2 += got[i * 5 + k] != (float)((i ^ m) * 100);
    check(name, wrong2 == 0, "%.0f of %.0f shuffles gave another lane's value", wrong2, 64 * 5);
}

static void grid_case()
{
    char name[96];
    snprintf(name, sizeof name, "kernel_emu_self.grid_each_thread_once%s", eager ? ".eager" : "");
    const unsigned gx = 3, gy = 2, bx = 32, by = 2;
    std::vector<int> runs(gx * gy * bx * by, 0);
    launch(dim3e{gx, gy, 1}, dim3e{bx, by, 1}, 0, [&] {
        unsigned blk = blockIdx.y * gx + blockIdx.x, t = threadIdx.y * bx + threadIdx.x;
        runs[blk * bx * by + t]++;
        block_sync();
    });
    int wrong = 0;
    for (int r : runs)
        wrong += r != 1;
    check(name, wrong == 0, "%.0f of %.0f (block, thread) pairs ran other than once", wrong,
          (double)runs.size());
}

/* runs fn in a child whose standard output comes back; its exit status in *status */
template <typename F> static std::string in_child(F fn, int *status)
{
    int p[2];
    if (pipe(p) != 0)
        die("pipe");
    fflush(stdout);
    pid_t pid = fork();
    if (pid < 0)
        die("fork");
    if (pid == 0) {
        close(p[0]);
        if (dup2(p[1], 1) < 0)
            _exit(3);
        fn();
        fflush(stdout);
        _exit(0);
    }
    close(p[1]);
    std::string out;
    char b[512];
    ssize_t r;
    while ((r = read(p[0], b, sizeof b)) > 0)
        out.append(b, (size_t)r);
    close(p[0]);
    if (waitpid(pid, status, 0) != pid)
        die("waitpid");
    return out;
}

static void fault_cases()
{
    int st = 0;
    std::string out = in_child([] {
        launch(dim3e{1, 1, 1}, dim3e{64, 1, 1}, 0, [] {
            if (threadIdx.x != 5) /* thread 5 never reaches the barrier */
                block_sync();
        });
    }, &st);
    check("kernel_emu_self.deadlock_reported",
          !(WIFEXITED(st) && WEXITSTATUS(st) == 0) &&
              out.find("FAIL kernel_emu_self: deadlock") != std::string::npos,
          "the child ended with status %.0f and did not say 'deadlock'", st);

    out = in_child([] {
        float *x = buf<float>(100, false);
        volatile float s = 0;
        launch(dim3e{1, 1, 1}, dim3e{32, 1, 1}, 0, [&] {
            if (threadIdx.x == 31)
                for (int i = 0; i < 2000; i++) /* reads past the end, into the guard page */
                    s = s + x[i];
        });
    }, &st);
    check("kernel_emu_self.guard_page_reported",
          WIFEXITED(st) && WEXITSTATUS(st) == 1 &&
              out.find("FAIL kernel_emu_self: an access past a buffer's end") != std::string::npos,
          "the child ended with status %.0f and did not name the guard page", st);
}

} /* namespace emu */

int main()
{
    using namespace emu;
    emu_prog = "kernel_emu_self";
    for (int e = 0; e < 2; e++) {
        eager = e;
        locals_case();
        barrier_case();
        grid_case();
    }
    eager = false;
    fault_cases();
    printf("%d passed, %d failed\n", passes, failures);
    return failures ? 1 : 0;
}
