/* The activations' type of a kernel emulator (layernorm_emu.cc, encoder_emu.cc; included after
 * kernel_emu.h, inside namespace emu): bf16, as the engine's bf16 build, or fp32 (the checking
 * build's) when built with EMU_FP32. floatX, xf(x) and tof(x) as float, mkx(f) a floatX, VECX the
 * 16-byte vectors' width, PREC the checks' name part (".fp32" or ""). */
#pragma once

#ifdef EMU_FP32
typedef float floatX;
static inline float xf(float x) { return x; }
static inline float mkx(float f) { return f; }
static const int VECX = 4;
#define PREC ".fp32"
#else
typedef bf16 floatX;
static inline float xf(bf16 x) { return bf2f(x); }
static inline bf16 mkx(float f) { return f2bf(f); }
static inline float tof(bf16 x) { return bf2f(x); }
static const int VECX = 8;
#define PREC ""
#endif
static inline float tof(float x) { return x; }
