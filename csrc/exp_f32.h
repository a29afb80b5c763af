// Note [One exp]
// The warping weights w(v) = exp(z(v) - max z) are float32 values that every path must
// produce bit for bit, so exp is defined once, as a sequence of IEEE float32 operations
// that each path performs lane by lane in the same order (no FMA, no libm):
//   y = max(y, -104)                     (exp(-104) < 2^-150 rounds to +0.0 below)
//   t = y * log2(e) + 1.5 * 2^23         (round to nearest: t - 1.5 * 2^23 = n, an integer)
//   n = t - 1.5 * 2^23
//   r = (y - n * C1) - n * C2            (C1 + C2 = ln 2; C1 has 9 significant bits, so
//                                         n * C1 is exact for |n| < 2^15, and a fused
//                                         y - n * C1 rounds the same difference once)
//   p = ((((((P0 * r + P1) * r + P2) * r + P3) * r + P4) * r + P5) * (r * r) + r) + 1
//   w = p * 2^n, rounded once             (n in [-150, 0]; p in [0.7, 1.42])
// y = -104 (any y below, -inf included) gives n = -150 and p < 1, so w rounds to +0.0.
// Cody and Waite's reduction with Cephes' expf polynomial; within 2 ulp of exp for
// y in [-87, 0], and exp(0) is exactly 1 (r = 0, n = 0). The argument is never NaN or
// positive here (callers validate the row and subtract its maximum).
//
// A path supplies Ops: a lane type F with splat, add, sub, mul, max, sub_exact_product(a,
// b, c) = a - b * c for an exact product b * c (sub(a, mul(b, c)), or one fused
// multiply-subtract where the path has it: the same single rounding), and scale(p, n, t),
// p * 2^n rounded once, given n as a float and t = n + 1.5 * 2^23 (whose low bits hold n).
// scale_by_two_factors is that for any path with 32-bit integer lanes: p * 2^(n >> 1) is
// exact (a normal float), so multiplying by 2^(n - (n >> 1)) rounds once.
#pragma once

#include <bit>
#include <cstdint>
#include <limits>

#include "spec_verify.h"

namespace spec_verify {

template <class Ops>
inline __attribute__((always_inline)) typename Ops::F exp_nonpositive(const typename Ops::F& y) {
  using F = typename Ops::F;
  const F magic = Ops::splat(12582912.0f);  // 1.5 * 2^23
  const F yc = Ops::max(y, Ops::splat(-104.0f));
  const F t = Ops::add(Ops::mul(yc, Ops::splat(1.44269504088896341f)), magic);
  const F n = Ops::sub(t, magic);
  const F r = Ops::sub(Ops::sub_exact_product(yc, n, Ops::splat(0.693359375f)),
                       Ops::mul(n, Ops::splat(-2.12194440e-4f)));
  F p = Ops::splat(1.9875691500e-4f);
  p = Ops::add(Ops::mul(p, r), Ops::splat(1.3981999507e-3f));
  p = Ops::add(Ops::mul(p, r), Ops::splat(8.3334519073e-3f));
  p = Ops::add(Ops::mul(p, r), Ops::splat(4.1665795894e-2f));
  p = Ops::add(Ops::mul(p, r), Ops::splat(1.6666665459e-1f));
  p = Ops::add(Ops::mul(p, r), Ops::splat(5.0000001201e-1f));
  p = Ops::add(Ops::add(Ops::mul(p, Ops::mul(r, r)), r), Ops::splat(1.0f));
  return Ops::scale(p, n, t);
}

// Ops::scale through integer lanes: I with bits (F -> I), from_bits, isplat, isub, iadd,
// srai<s> (arithmetic shift) and slli<s>.
template <class Ops>
inline __attribute__((always_inline)) typename Ops::F scale_by_two_factors(const typename Ops::F& p,
                                                                            const typename Ops::F& t) {
  using I = typename Ops::I;
  const I n = Ops::isub(Ops::bits(t), Ops::isplat(0x4b400000));  // t's bits minus 1.5 * 2^23's
  const I n1 = Ops::template srai<1>(n);
  const I n2 = Ops::isub(n, n1);
  const typename Ops::F s1 = Ops::from_bits(Ops::template slli<23>(Ops::iadd(n1, Ops::isplat(127))));
  const typename Ops::F s2 = Ops::from_bits(Ops::template slli<23>(Ops::iadd(n2, Ops::isplat(127))));
  return Ops::mul(Ops::mul(p, s1), s2);
}

// One lane: the scalar path, and every SIMD path's row tails.
struct ScalarOps {
  using F = float;
  using I = int32_t;
  static F splat(float x) { return x; }
  static F add(F a, F b) { return a + b; }
  static F sub(F a, F b) { return a - b; }
  static F mul(F a, F b) { return a * b; }
  static F max(F a, F b) { return a > b ? a : b; }
  static F sub_exact_product(F a, F b, F c) { return a - b * c; }  // -ffp-contract=off: unfused
  static I bits(F x) { return std::bit_cast<I>(x); }
  static F from_bits(I i) { return std::bit_cast<F>(i); }
  static I isplat(int32_t i) { return i; }
  static I isub(I a, I b) { return static_cast<I>(static_cast<uint32_t>(a) - static_cast<uint32_t>(b)); }
  static I iadd(I a, I b) { return static_cast<I>(static_cast<uint32_t>(a) + static_cast<uint32_t>(b)); }
  template <int s> static I srai(I a) { return a >> s; }
  template <int s> static I slli(I a) { return static_cast<I>(static_cast<uint32_t>(a) << s); }
  static F scale(F p, F, F t) { return scale_by_two_factors<ScalarOps>(p, t); }
};

// The weight of one logit: exp(x / temperature - z_max) (Note [Warping] in spec_verify.h).
inline float weight(float x, float temperature, float z_max) {
  return exp_nonpositive<ScalarOps>(x / temperature - z_max);
}

// The scalar half of every path's weights source (Source::at, the block tails): the
// weight of logit v, stored.
struct WeightTail {
  static constexpr int kRows = 1;
  const float* x;
  float* w;
  float t, m;
  float at(int64_t v, int) const { return w[v] = weight(x[v], t, m); }
};

}  // namespace spec_verify
