/* cpu_vmath.h — float32 transcendental functions over arrays. Erf is
 * vectorized with SLEEF (Debian's libsleef-dev, 1.0 ULP) where the build
 * found it and the machine has AVX-512 or AVX2, else libm's scalar erff.
 * Gelu has its own AVX-512/AVX2 polynomials (cpu_vmath.c, about 2 ULP of
 * erf and no cancellation on the negative side), else libm. */
#ifndef CPU_VMATH_H
#define CPU_VMATH_H

#include <stddef.h>

/* y[i] = erf(x[i]); x and y may be the same array. */
void cpu_erf_f32(const float* x, float* y, size_t n);
/* y[i] = 0.5 x (1 + erf(x / sqrt 2)) (exact Gelu, within 4e-7 |y| + 1e-7);
 * x and y may alias. */
void cpu_gelu_f32(const float* x, float* y, size_t n);
/* "avx512", "avx2" or "scalar": which path cpu_erf_f32 takes here. */
const char* cpu_vmath_path(void);

#endif
