/* The CUDA engine's kernels on the host, without a GPU: what the emulators of one kernel set
 * (flash_mma_emu.cc, layernorm_emu.cc) share. A kernel's source is compiled by g++ against these
 * stand-ins for what the GPU provides:
 *   - a block's threads are coroutines on one host thread (on x86-64 a switch of the stack and
 *     the callee-saved registers, elsewhere ucontext), switched only at a barrier
 *     or a warp-wide operation, so the order of everything between two switches is one thread's
 *     program order, as on the GPU between two synchronisations;
 *   - two schedules, the two ends of what the hardware may do: lazy (round robin: every thread
 *     advances to its next barrier or warp-wide operation in turn) and eager (a warp at a time,
 *     each as far as it can go before the next starts; an emulator's asynchronous copies land
 *     when issued);
 *   - a warp-wide operation has every lane post its operand, waits for the warp, then computes
 *     this lane's result from all of them (shfl_xor here; ldmatrix and mma.sync in flash's);
 *   - a block's dynamic shared memory starts as garbage; shared and registered global accesses
 *     made through the primitives are bounds-checked, and a write into an input is refused;
 *   - guarded() buffers end at an inaccessible page: a plain read or write past a buffer's end
 *     (an off-by-one in the rows a block takes) stops the run with a FAIL line.
 * A deadlock (a barrier not every thread reaches) is reported, not hung on. */
#pragma once

#include <math.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#if !defined(__x86_64__)
#include <ucontext.h>
#endif
#include <unistd.h>

#include <functional>
#include <vector>

#define __global__
#define __device__
#define __host__
#define __forceinline__ inline
#define __launch_bounds__(n)

namespace emu {

struct dim3e {
    unsigned x, y, z;
};
static dim3e gridDim, blockIdx, blockDim;

/* A coroutine's context. On x86-64 its saved stack pointer, the callee-saved registers pushed
 * below it (emu_switch): swapcontext makes a system call (the signal mask) at every switch,
 * which took half of an emulator's time. Elsewhere ucontext. */
#if defined(__x86_64__)
struct emu_ctx {
    void *sp;
};
/* saves this coroutine's registers on its stack and its stack pointer in *save, then resumes
 * the one whose stack pointer is load */
extern "C" void emu_switch(void **save, void *load);
asm(".text\n.globl emu_switch\n.type emu_switch, @function\nemu_switch:\n"
    "pushq %rbp\npushq %rbx\npushq %r12\npushq %r13\npushq %r14\npushq %r15\n"
    "movq %rsp, (%rdi)\nmovq %rsi, %rsp\n"
    "popq %r15\npopq %r14\npopq %r13\npopq %r12\npopq %rbx\npopq %rbp\nret\n"
    ".size emu_switch, .-emu_switch\n");
#else
struct emu_ctx {
    ucontext_t uc;
};
#endif

static const int MAXT = 1024; /* threads a block, at most (as on the GPU) */
struct emu_thread {
    emu_ctx ctx;
    dim3e idx;
    bool done;
};
static emu_thread th[MAXT];
static int emu_cur, nth;
static emu_ctx sched_ctx;
static unsigned long progress; /* barrier arrivals and thread ends: a round without any is a deadlock */
static bool eager;
static const char *emu_prog = "kernel_emu"; /* the emulator's name, in FAIL lines */
#define threadIdx (th[emu_cur].idx)
#define lane_id (emu_cur % 32)
#define warp_id (emu_cur / 32)
/* from thread emu_cur to the scheduler, and from the scheduler to thread emu_cur */
static inline void yield_to_scheduler()
{
#if defined(__x86_64__)
    emu_switch(&th[emu_cur].ctx.sp, sched_ctx.sp);
#else
    swapcontext(&th[emu_cur].ctx.uc, &sched_ctx.uc);
#endif
}
static inline void resume_thread()
{
#if defined(__x86_64__)
    emu_switch(&sched_ctx.sp, th[emu_cur].ctx.sp);
#else
    swapcontext(&sched_ctx.uc, &th[emu_cur].ctx.uc);
#endif
}

struct cobarrier {
    int n, count;
    unsigned gen;
};
static inline void bar_wait(cobarrier &b)
{
    unsigned g = b.gen;
    progress++;
    if (++b.count == b.n) {
        b.count = 0;
        b.gen++;
        return;
    }
    while (b.gen == g)
        yield_to_scheduler();
}

struct bf16 {
    uint16_t u;
};
static inline float bf2f(bf16 h)
{
    uint32_t x = (uint32_t)h.u << 16;
    float f;
    memcpy(&f, &x, 4);
    return f;
}
static inline bf16 f2bf(float f) /* round to nearest even, as __float2bfloat16_rn */
{
    uint32_t x;
    memcpy(&x, &f, 4);
    if ((x & 0x7fffffffu) > 0x7f800000u)
        return bf16{0x7fc0};
    return bf16{(uint16_t)((x + 0x7fffu + ((x >> 16) & 1u)) >> 16)};
}

static void die(const char *what)
{
    printf("FAIL %s: %s\n", emu_prog, what);
    fflush(stdout);
    abort();
}

/* memory the kernels may touch: shared (this block's), and the global buffers registered */
static unsigned char *smem_base;
static size_t smem_size;
struct region {
    const void *lo;
    size_t bytes;
    bool writable;
};
static std::vector<region> regions;
static inline void check_global(const void *p, size_t n, bool write)
{
    for (const region &r : regions)
        if ((const char *)p >= (const char *)r.lo && (const char *)p + n <= (const char *)r.lo + r.bytes) {
            if (write && !r.writable)
                die("a write into an input buffer");
            return;
        }
    die(write ? "a global write out of bounds" : "a global read out of bounds");
}
static inline void check_shared(const void *p, size_t n, size_t align)
{
    const unsigned char *c = (const unsigned char *)p;
    if (c < smem_base || c + n > smem_base + smem_size)
        die("a shared-memory access out of the block's dynamic shared memory");
    if ((size_t)(c - smem_base) % align)
        die("a misaligned shared-memory access");
}

/* `bytes` whose end (rounded up to 16) abuts an inaccessible page, 16-byte aligned; never freed
 * (an emulator's buffers live as long as it) */
static inline void on_guard_fault(int sig)
{
    (void)sig;
    static const char msg[] = ": an access past a buffer's end (its guard page)\n";
    if (write(1, "FAIL ", 5) < 0 || write(1, emu_prog, strlen(emu_prog)) < 0 ||
        write(1, msg, sizeof msg - 1) < 0)
        _exit(2);
    _exit(1);
}
static inline void *guarded(size_t bytes)
{
    static bool handler;
    if (!handler) {
        struct sigaction sa;
        memset(&sa, 0, sizeof sa);
        sa.sa_handler = on_guard_fault;
        sigemptyset(&sa.sa_mask);
        if (sigaction(SIGSEGV, &sa, NULL) != 0)
            die("sigaction");
        handler = true;
    }
    size_t pg = (size_t)sysconf(_SC_PAGESIZE), b16 = (bytes + 15) / 16 * 16;
    size_t data = (b16 + pg - 1) / pg * pg;
    void *m = mmap(NULL, data + pg, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (m == MAP_FAILED)
        die("mmap");
    if (mprotect((char *)m + data, pg, PROT_NONE) != 0)
        die("mprotect");
    return (char *)m + data - b16;
}
/* a guarded buffer of n T (at least one), registered for the bounds checks (writable or not) */
template <typename T> static T *buf(size_t n, bool writable)
{
    T *p = (T *)guarded((n ? n : 1) * sizeof(T));
    regions.push_back(region{p, (n ? n : 1) * sizeof(T), writable});
    return p;
}

/* a warp's exchange: what its lanes post for a warp-wide operation */
struct warp_x {
    uint32_t ops[32][6];
    const void *addr[32];
    float f[32];
    cobarrier bar;
};
static warp_x warps[MAXT / 32];
static cobarrier block_bar;
static inline void wsync() { bar_wait(warps[warp_id].bar); }
static inline void block_sync() { bar_wait(block_bar); }

/* __shfl_xor_sync over the whole warp */
static inline float shfl_xor(float v, int m)
{
    warp_x &W = warps[warp_id];
    W.f[lane_id] = v;
    wsync();
    float r = W.f[lane_id ^ m];
    wsync();
    return r;
}

/* the warp's sum and max, every lane gets it (cuda_common.cuh's, in the same order) */
static inline float warp_sum(float v)
{
    for (int o = 16; o > 0; o >>= 1)
        v += shfl_xor(v, o);
    return v;
}
static inline float warp_max(float v)
{
    for (int o = 16; o > 0; o >>= 1)
        v = fmaxf(v, shfl_xor(v, o));
    return v;
}

/* 16 bytes of T, and the 16-byte global accesses (alignment- and bounds-checked) */
template <typename T> struct alignas(16) pack16 {
    static constexpr int N = 16 / sizeof(T);
    T v[N];
};
template <typename T> static inline pack16<T> load16(const T *p)
{
    if ((uintptr_t)p % 16)
        die("a misaligned 16-byte load");
    check_global(p, 16, false);
    pack16<T> r;
    memcpy(&r, p, 16);
    return r;
}
template <typename T> static inline void store16(T *p, const pack16<T> &x)
{
    if ((uintptr_t)p % 16)
        die("a misaligned 16-byte store");
    check_global(p, 16, true);
    memcpy(p, &x, 16);
}

/* called for each block before its threads start and after they end (thread count) */
static void (*block_begin_hook)(int);
static void (*block_end_hook)(int);

/* one launch: the grid's blocks one after another, each as block.x * block.y coroutines */
static const std::function<void()> *body_fn;
/* a thread's body; a thread that ends goes back to the scheduler for good (its context is made
 * anew for the next block) */
static void thread_main()
{
    (*body_fn)();
    th[emu_cur].done = true;
    progress++;
#if defined(__x86_64__)
    yield_to_scheduler(); /* never resumed */
    die("an ended thread resumed");
#endif
}
/* thread i's context on its stack, starting at thread_main */
#if defined(__x86_64__)
static inline void new_context(int i, char *stack, size_t bytes)
{
    /* emu_switch's frame: the six registers, then its return address (thread_main), then
     * thread_main's own return address (none: it never returns), so that thread_main starts with
     * the stack 8 bytes past a 16-byte boundary, as after a call */
    void **sp = (void **)(((uintptr_t)stack + bytes) & ~(uintptr_t)15);
    *--sp = NULL;
    *--sp = (void *)thread_main;
    for (int k = 0; k < 6; k++)
        *--sp = NULL;
    th[i].ctx.sp = sp;
}
#else
/* (apart: getcontext returns twice, nothing of the caller's may live across it) */
__attribute__((noinline)) static inline void new_context(int i, char *stack, size_t bytes)
{
    if (getcontext(&th[i].ctx.uc) != 0)
        die("getcontext");
    th[i].ctx.uc.uc_stack.ss_sp = stack;
    th[i].ctx.uc.uc_stack.ss_size = bytes;
    th[i].ctx.uc.uc_link = &sched_ctx.uc;
    makecontext(&th[i].ctx.uc, thread_main, 0);
}
#endif

static const size_t STACK = 256 * 1024;
static char *stacks; /* MAXT stacks of STACK bytes */
/* whether p is on a thread's stack (a kernel's local variable, not global memory) */
static inline bool on_stack(const void *p)
{
    return stacks && (const char *)p >= stacks && (const char *)p < stacks + (size_t)MAXT * STACK;
}

static inline void launch(dim3e grid, dim3e block, size_t smem_bytes, const std::function<void()> &body)
{
    if (!stacks) { /* reserved, touched only as deep as the kernels go */
        void *m = mmap(NULL, (size_t)MAXT * STACK, PROT_READ | PROT_WRITE,
                       MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
        if (m == MAP_FAILED)
            die("mmap of the threads' stacks");
        stacks = (char *)m;
    }
    nth = (int)(block.x * (block.y ? block.y : 1));
    if (nth < 1 || nth > MAXT || nth % 32)
        die("a block's threads must be a multiple of 32, at most MAXT");
    gridDim = grid;
    blockDim = dim3e{block.x, block.y ? block.y : 1, 1};
    std::vector<unsigned char> sm(smem_bytes ? smem_bytes : 1);
    smem_base = sm.data();
    smem_size = smem_bytes;
    body_fn = &body;
    for (unsigned by = 0; by < (grid.y ? grid.y : 1); by++)
        for (unsigned bx = 0; bx < grid.x; bx++) {
            memset(sm.data(), 0xa5, sm.size()); /* garbage: a read before its write shows */
            blockIdx = dim3e{bx, by, 0};
            block_bar = cobarrier{nth, 0, 0};
            for (int w = 0; w < nth / 32; w++)
                warps[w].bar = cobarrier{32, 0, 0};
            if (block_begin_hook)
                block_begin_hook(nth);
            for (int i = 0; i < nth; i++) {
                th[i].idx = dim3e{(unsigned)i % blockDim.x, (unsigned)i / blockDim.x, 0};
                th[i].done = false;
                new_context(i, stacks + (size_t)i * STACK, STACK);
            }
            for (int left = nth; left > 0;) {
                unsigned long before = progress;
                left = 0;
                for (int w = 0; w < nth / 32; w++) /* eager: warp w until it stalls */
                    for (unsigned long wp = progress + 1; wp != progress;) {
                        wp = progress;
                        for (emu_cur = 32 * w; emu_cur < 32 * w + 32; emu_cur++)
                            if (!th[emu_cur].done)
                                resume_thread();
                        if (!eager)
                            break; /* lazy: one turn each */
                    }
                for (int i = 0; i < nth; i++)
                    left += !th[i].done;
                if (left > 0 && progress == before)
                    die("deadlock: a barrier or warp-wide operation not reached by every thread");
            }
            if (block_end_hook)
                block_end_hook(nth);
        }
}

/* ---------------------------------------------------------------- the checks */

static int passes, failures;
static uint64_t rng = 7;
static inline float frand() /* uniform [-1, 1) */
{
    rng = rng * 6364136223846793005ull + 1442695040888963407ull;
    return (float)((rng >> 40) & 0xffffff) / 16777216.0f * 2.0f - 1.0f;
}
static inline void check(const char *name, bool ok, const char *fmt = "", double a = 0, double b = 0)
{
    if (ok) {
        printf("PASS %s\n", name);
        passes++;
    } else {
        printf("FAIL %s: ", name);
        printf(fmt, a, b);
        printf("\n");
        failures++;
    }
}

/* worst |got - want| over the largest magnitude: a value's magnitude is the sum of the absolute
 * values of the terms it sums (the scale its rounding errors have, however much the terms cancel) */
/* the largest |got - want| and the largest magnitude; a NaN or infinite difference counts as
 * infinite (fmax alone would pass over a NaN) */
static inline double absdiff(double got, double want)
{
    double x = fabs(got - want);
    return std::isfinite(x) ? x : INFINITY;
}
struct maxdiff {
    double d = 0, m = 0;
    void add(double got, double want, double mag)
    {
        d = fmax(d, absdiff(got, want));
        m = fmax(m, mag);
    }
    double rel() const { return m > 0 ? d / m : d; }
};

} /* namespace emu */
