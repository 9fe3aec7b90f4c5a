/* cpu_grad_bn.h — internal to the CPU provider: the float32 plane loops of
 * BatchNormalization in training mode (cpu_norm.c) and of
 * BatchNormalizationGrad (cpu_grad.c), with AVX-512 where the provider's
 * GEMM runs it and portable C otherwise (cpu_grad_bn.c).
 *
 * The sums run over one plane (one image's values of one channel) in float
 * lanes, 32 with AVX-512 and 8 otherwise, each lane summing every 32nd (8th)
 * value in order; the lanes are then added in double in a fixed order onto
 * the caller's double totals. Sums about a reference value m (close to the
 * channel's mean) keep the float lanes' terms small; the caller adds the
 * planes' totals in image order, so results do not depend on the number of
 * threads. */
#ifndef CPU_GRAD_BN_H
#define CPU_GRAD_BN_H

#include <stddef.h>

/* *s1 += sum (x - m), *s2 += sum (x - m)^2 over x[0 .. len). */
void cpu_bn_moments(const float* x, size_t len, float m, double* s1, double* s2);

/* *sb += sum dy, *ss += sum dy (x - m), and when s1 is not NULL also
 * *s1 += sum (x - m), *s2 += sum (x - m)^2: one pass over x and dy. */
void cpu_bn_grad_sums(const float* x, const float* dy, size_t len, float m, double* sb, double* ss,
                      double* s1, double* s2);

/* y = x a + b (y may be x). */
void cpu_bn_affine(const float* x, float* y, size_t len, float a, float b);

/* dx = a (dy - mb - (x - mu) k) (dx may be dy). */
void cpu_bn_grad_dx(const float* x, const float* dy, float* dx, size_t len, float a, float mb,
                    float mu, float k);

#endif /* CPU_GRAD_BN_H */
