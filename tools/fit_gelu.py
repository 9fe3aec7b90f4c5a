#!/usr/bin/env python3
"""Fits the polynomial coefficients of the CPU provider's vectorized Gelu
(providers/cpu/cpu_vmath.c) and checks them in emulated float32 arithmetic.

Gelu(v) = 0.5 v (1 + erf(y)), y = v / sqrt(2), a = |y|:
  a < 0.5:        erf(y) = y P(a^2), P of degree 6 (least squares on 600
                  Chebyshev points of [0, 0.5], fitted to erf(a) / a):
                  the AVX-512 path only
  a < 4:          erfc(a) = Q_i(a - c_i) on the interval i = floor(2a)
                  (width 0.5, centre c_i), Q_i of degree 7, least squares
                  weighted by 1 / erfc (relative error); then
                  Gelu = v - 0.5 v erfc(a) for y > 0, 0.5 v erfc(a) for y < 0,
                  so the negative tail has no cancellation in 1 + erf. The
                  AVX2 path takes interval 0 too (one path for all lanes);
                  the AVX-512 one starts at interval 1
  a >= 4:         erfc(a) < 1.6e-8: Gelu = v (y > 0) or 0.

Run with Debian's python3-numpy: /usr/bin/python3 tools/fit_gelu.py
It prints the C tables and the worst error of each path against erf/erfc
in double."""
import math

import numpy as np

f32 = np.float32
erf = np.vectorize(math.erf)
erfc = np.vectorize(math.erfc)


def cheb(lo, hi, n=600):
    return (lo + hi) / 2 + (hi - lo) / 2 * np.cos(np.pi * (np.arange(n) + 0.5) / n)


def fit_small(deg=6):
    x = cheb(0.0, 0.5)
    a = np.vstack([(x * x) ** k for k in range(deg + 1)]).T
    return np.linalg.lstsq(a, erf(x) / x, rcond=None)[0]


def fit_interval(i, deg=7):
    c = 0.5 * i + 0.25
    x = cheb(0.5 * i, 0.5 * i + 0.5)
    w = 1.0 / erfc(x)
    a = np.vstack([(x - c) ** k for k in range(deg + 1)]).T
    return np.linalg.lstsq(a * w[:, None], erfc(x) * w, rcond=None)[0]


def fma(a, b, c):  # one rounding, as the hardware's fused multiply-add
    return (a.astype(np.float64) * b.astype(np.float64) + c.astype(np.float64)).astype(f32)


def gelu(v, small, table, first=1):
    """table[i] holds interval i's coefficients; first = 1: the small path
    below a = 0.5 (AVX-512), first = 0: interval 0 there (AVX2)."""
    v = v.astype(f32)
    y = (v * f32(1 / math.sqrt(2))).astype(f32)
    a = np.abs(y)
    hv = (f32(0.5) * v).astype(f32)
    p = np.full_like(a, f32(small[-1]))
    for k in range(len(small) - 2, -1, -1):
        p = fma(p, (a * a).astype(f32), np.full_like(a, f32(small[k])))
    g_small = fma(hv, (y * p).astype(f32), hv)
    idx = np.clip(np.minimum(a * f32(2), f32(7)).astype(np.int32), first, 7)
    t = (a - (idx.astype(f32) * f32(0.5) + f32(0.25))).astype(f32)
    q = np.zeros_like(a)
    for i in range(first, 8):
        c = [f32(x) for x in table[i]]
        r = np.full_like(a, c[-1])
        for k in range(len(c) - 2, -1, -1):
            r = fma(r, t, np.full_like(a, c[k]))
        q = np.where(idx == i, r, q)
    g_large = np.where(y > 0, fma(-hv, q, v), (hv * q).astype(f32))
    g_large = np.where(a >= 4, np.where(y > 0, v, f32(0)), g_large)
    return np.where(a < 0.5, g_small, g_large) if first else g_large


def main():
    small = fit_small()
    table = [fit_interval(i) for i in range(0, 8)]
    xs = np.concatenate([np.linspace(-9, 9, 4000001), np.logspace(-8, 1, 20001),
                         -np.logspace(-8, 1, 20001)]).astype(f32)
    xd = xs.astype(np.float64)
    ref = np.where(xd < 0, 0.5 * xd * erfc(-xd / math.sqrt(2)), 0.5 * xd * (1 + erf(xd / math.sqrt(2))))
    tol = 4e-7 * np.abs(ref) + 1e-7  # tests/unit/cpu/vmath's bound
    for name, first in (("AVX-512 (small path below 0.5)", 1), ("AVX2 (interval 0)", 0)):
        err = np.abs(gelu(xs, small, table, first).astype(np.float64) - ref)
        print("/* %s: worst |error| / (4e-7 |gelu| + 1e-7) over [-9, 9]: %.3f */"
              % (name, (err / tol).max()))
    print("static const float GELU_SMALL[%d] = {%s};" % (len(small), ", ".join("%.9ef" % c for c in small)))
    print("/* GELU_ERFC[k][i]: coefficient k of interval i */")
    print("static const float GELU_ERFC[8][16] = {")
    for k in range(8):
        row = [table[i][k] for i in range(8)]
        print("    {%s}," % ", ".join("%.9ef" % c for c in row))
    print("};")


if __name__ == "__main__":
    main()
