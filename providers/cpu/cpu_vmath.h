/* cpu_vmath.h — float32 transcendental functions over arrays. Erf and Gelu
 * have the provider's own AVX-512/AVX2 polynomials (cpu_vmath.c): Erf within
 * 2 ULP of erf over every float (test_vmath measures about 1.6), Gelu about
 * 2 ULP of erf with no cancellation on the negative side; without AVX2,
 * libm's erff and erfcf. */
#ifndef CPU_VMATH_H
#define CPU_VMATH_H

#include <stddef.h>

/* y[i] = erf(x[i]); x and y may be the same array. */
void cpu_erf_f32(const float* x, float* y, size_t n);
/* y[i] = 0.5 x (1 + erf(x / sqrt 2)) (exact Gelu, within 4e-7 |y| + 1e-7);
 * x and y may alias. */
void cpu_gelu_f32(const float* x, float* y, size_t n);
/* Element-wise float32 activations (x and y may alias). The AVX-512 and
 * AVX2 paths use the provider's own exp (cpu_vmath.c); Log, Softplus, Elu,
 * Selu and Celu need SLEEF's logf/log1pf/expm1f for theirs. The bounds, measured over every
 * float by test_vmath_act, are in docs/providers/cpu.md. */
void cpu_exp_f32(const float* x, float* y, size_t n);
void cpu_log_f32(const float* x, float* y, size_t n);
void cpu_tanh_f32(const float* x, float* y, size_t n);
/* 1 / (1 + exp(-x)), without overflow. */
void cpu_sigmoid_f32(const float* x, float* y, size_t n);
/* x * sigmoid(x) (SiLU, Swish with alpha 1); NaN at x = -inf as the
 * unfused Mul(x, Sigmoid(x)) gives. */
void cpu_silu_f32(const float* x, float* y, size_t n);
/* log(1 + exp(x)) without overflow. */
void cpu_softplus_f32(const float* x, float* y, size_t n);
/* clamp(alpha x + beta, 0, 1). */
void cpu_hardsigmoid_f32(const float* x, float* y, size_t n, float alpha, float beta);
/* x * clamp(x / 6 + 1 / 2, 0, 1). */
void cpu_hardswish_f32(const float* x, float* y, size_t n);
/* x tanh(log(1 + e^x)); NaN at x = -inf as the formula gives. */
void cpu_mish_f32(const float* x, float* y, size_t n);
/* x < 0 ? alpha (e^x - 1) : x. */
void cpu_elu_f32(const float* x, float* y, size_t n, float alpha);
/* gamma (x <= 0 ? alpha (e^x - 1) : x). */
void cpu_selu_f32(const float* x, float* y, size_t n, float alpha, float gamma);
/* max(0, x) + min(0, alpha (e^(x / alpha) - 1)); alpha != 0. */
void cpu_celu_f32(const float* x, float* y, size_t n, float alpha);
/* "avx512", "avx2" or "scalar": which path cpu_erf_f32 takes here. */
const char* cpu_vmath_path(void);

#endif
