/* Stand-in for <zlib.h> in the self-contained GPU build (mk/cuda.mk): checkpoint.c needs only
 * crc32, which cpu_shim.c implements bit-for-bit as zlib's (the CRC-32 of ISO 3309 / PNG). */
#ifndef HOLMES_SHIM_ZLIB_H
#define HOLMES_SHIM_ZLIB_H

#define Z_NULL 0
typedef unsigned int uInt;
typedef unsigned char Bytef;
unsigned long holmes_shim_crc32(unsigned long crc, const unsigned char *buf, unsigned len);
#define crc32 holmes_shim_crc32

#endif
