/* cpu_vmath.h — float32 transcendental functions over arrays, vectorized
 * with SLEEF (Debian's libsleef-dev) where the build found it and the
 * machine has AVX-512 or AVX2, else libm's scalar functions. SLEEF's
 * functions used here are accurate to 1.0 ULP. */
#ifndef CPU_VMATH_H
#define CPU_VMATH_H

#include <stddef.h>

/* y[i] = erf(x[i]); x and y may be the same array. */
void cpu_erf_f32(const float* x, float* y, size_t n);
/* y[i] = 0.5 x (1 + erf(x / sqrt 2)) (exact Gelu); x and y may alias. */
void cpu_gelu_f32(const float* x, float* y, size_t n);
/* "avx512", "avx2" or "scalar": which path cpu_erf_f32 takes here. */
const char* cpu_vmath_path(void);

#endif
