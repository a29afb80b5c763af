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

// Note [Bounded warping]'s approximate exp, for bounds only (never a result): the same
// reduction as exp_nonpositive, then e^r by its degree-6 Taylor polynomial (|r| <= ln 2 / 2:
// truncation below 1.8e-7 = 2^-22.4), evaluated with Ops::mul_add (a * b + c, fused where
// the path has FMA, else two roundings). Against exp_nonpositive's w (itself within 2 ulp
// of exp) each result is within kApproxWeightBound w + 2^-148 (the absolute part for subnormal results: 2^-20 w alone is
// below their spacing); the native tests check it over a dense grid of arguments (scalar,
// the most roundings) and every path's block sums against their bound.
template <class Ops>
inline __attribute__((always_inline)) typename Ops::F exp_approx(const typename Ops::F& y) {
  using F = typename Ops::F;
  const F magic = Ops::splat(12582912.0f);  // 1.5 * 2^23
  const F yc = Ops::max(y, Ops::splat(-104.0f));
  const F t = Ops::mul_add(yc, Ops::splat(1.44269504088896341f), magic);
  const F n = Ops::sub(t, magic);
  const F r = Ops::mul_add(n, Ops::splat(2.12194440e-4f), Ops::sub_exact_product(yc, n, Ops::splat(0.693359375f)));
  F p = Ops::mul_add(Ops::splat(1.0f / 720.0f), r, Ops::splat(1.0f / 120.0f));
  p = Ops::mul_add(p, r, Ops::splat(1.0f / 24.0f));
  p = Ops::mul_add(p, r, Ops::splat(1.0f / 6.0f));
  p = Ops::mul_add(p, r, Ops::splat(0.5f));
  p = Ops::mul_add(p, r, Ops::splat(1.0f));
  p = Ops::mul_add(p, r, Ops::splat(1.0f));
  return Ops::scale(p, n, t);
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
  static constexpr int kLanes = 1;
  static F sub_exact_product(F a, F b, F c) { return a - b * c; }  // -ffp-contract=off: unfused
  static F mul_add(F a, F b, F c) { return a * b + c; }            // unfused
  static F load(const float* x) { return *x; }
  static void store(float* w, F e) { *w = e; }
  static F div(F a, F b) { return a / b; }
  static float hsum(F a) { return a; }
  static I bits(F x) { return std::bit_cast<I>(x); }
  static F from_bits(I i) { return std::bit_cast<F>(i); }
  static I isplat(int32_t i) { return i; }
  static I isub(I a, I b) { return static_cast<I>(static_cast<uint32_t>(a) - static_cast<uint32_t>(b)); }
  static I iadd(I a, I b) { return static_cast<I>(static_cast<uint32_t>(a) + static_cast<uint32_t>(b)); }
  template <int s> static I srai(I a) { return a >> s; }
  template <int s> static I slli(I a) { return static_cast<I>(static_cast<uint32_t>(a) << s); }
  static F scale(F p, F, F t) { return scale_by_two_factors<ScalarOps>(p, t); }
  // The float whose bits are the integer part of max(0, t), for t < 2^31 (a NaN gives 0):
  // here truncation of max(t, 0); the x86-64 paths clamp the truncated integer instead
  // (the same bits: a t in (-1, 0] truncates to 0 either way; the clamp runs on an integer
  // port, Note [Argmax with upper sums]). t >= 2^31 (a weight beyond float32's range, z more
  // than about 89 above the floats' reference) gives 0 here and on x86-64, NaN bits on NEON
  // (its conversion saturates); the caller then forms the floats again against the max
  // (Note [Shifted upper bounds]: d > 60), so those sums are never used.
  static F nonnegative_bits(F t) {
    const F c = max(t, 0.0f);
    return std::bit_cast<F>(c < 0x1p31f ? static_cast<I>(c) : I{0});
  }
  static F keep_above(F a, F t) { return a > t ? a : 0.0f; }
  struct MaxTrack {  // Note [Argmax with upper sums]
    float m;
    bool seen_nan = false;
    void reset() { m = -std::numeric_limits<float>::infinity(); }
    void add(float x) {
      seen_nan |= x != x;
      m = x > m ? x : m;
    }
    float block_max() const { return m; }
    bool exceeds(float best) const { return m > best; }
    bool nan() const { return seen_nan; }
  };
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

// Blocked float32 sums of S per-value functions of the logits, for a path's Ops (kLanes = L
// floats per F; load, hsum in a tree of log2 L adds): Note [Bounded warping]'s block sums in
// 256 / 8L accumulators (at least one) of at most 8 vectors each, added pairwise, the lanes
// summed, and the last block's tail (under L values) summed apart and added: at most 16 adds
// lie between a value and its block's sum (8 + log2(256 / 8L) + log2 L + 1 = 14, or 15 + 1
// through the tail). values(F, F* e) writes the S values of L lanes into e[0..S),
// scalars(float, float* e) those of one value (the tails); stream s's block sums go to
// block_sums[s], each stream summed in the same order as alone; with kStore stream 0's
// values are stored into w too. on_block(b) runs after block b's sums are written.
struct NoBlockHook {
  void operator()(int64_t) const {}
};
template <class Ops, int S, bool kStore, class Values, class Scalars, class OnBlock = NoBlockHook>
inline __attribute__((always_inline)) void blocked_stream_sums(const float* x, int64_t n, Values values,
                                                               Scalars scalars, float* w, double* const* block_sums,
                                                               OnBlock on_block = {}) {
  using F = typename Ops::F;
  constexpr int64_t L = Ops::kLanes;
  // Accumulators of at most 8 values per lane each (a block holds 256 / L vectors).
  constexpr int kAcc = 256 / (8 * L) > 1 ? static_cast<int>(256 / (8 * L)) : 1;
  const auto add_at = [&](int64_t v, F* acc) {
    F e[S];
    values(Ops::load(x + v), e);
    if constexpr (kStore) Ops::store(w + v, e[0]);
    for (int s = 0; s < S; ++s) acc[s * kAcc] = Ops::add(acc[s * kAcc], e[s]);
  };
  for (int64_t begin = 0, b = 0; begin < n; begin += kMassBlock, ++b) {
    const int64_t end = n - begin < kMassBlock ? n : begin + kMassBlock;
    F acc[S * kAcc];  // stream s's accumulators at acc[s * kAcc .. (s + 1) * kAcc)
    for (F& a : acc) a = Ops::splat(0.0f);
    int64_t v = begin;
    for (; v + kAcc * L <= end; v += kAcc * L)
      for (int j = 0; j < kAcc; ++j) add_at(v + j * L, acc + j);
    for (int j = 0; v + L <= end; v += L, ++j) add_at(v, acc + j);
    for (int s = 0; s < S; ++s)
      for (int half = kAcc / 2; half >= 1; half /= 2)
        for (int j = 0; j < half; ++j) acc[s * kAcc + j] = Ops::add(acc[s * kAcc + j], acc[s * kAcc + j + half]);
    float tail[S] = {};
    for (; v < end; ++v) {
      float e[S];
      scalars(x[v], e);
      if constexpr (kStore) w[v] = e[0];
      for (int s = 0; s < S; ++s) tail[s] += e[s];
    }
    for (int s = 0; s < S; ++s) block_sums[s][b] = Ops::hsum(acc[s * kAcc]) + tail[s];
    on_block(b);
  }
}

// One stream of blocked_stream_sums: value(F) -> F, scalar(float) -> float.
template <class Ops, bool kStore, class Value, class Scalar>
inline __attribute__((always_inline)) void blocked_value_sums(const float* x, int64_t n, Value value, Scalar scalar,
                                                              float* w, double* block_sum) {
  double* const sums[1] = {block_sum};
  blocked_stream_sums<Ops, 1, kStore>(
      x, n, [&](const typename Ops::F& v, typename Ops::F* e) { e[0] = value(v); }, [&](float v, float* e) { e[0] = scalar(v); },
      w, sums);
}

// row_weight_sums for a path's Ops (load, div, mul_add): the approximate weights
// exp_approx(x / temperature - z_max), summed by blocked_value_sums.
template <class Ops, bool kStore>
inline __attribute__((always_inline)) void approx_weight_sums(const float* x, int64_t n, float temperature,
                                                              float z_max, float* w, double* block_sum) {
  const typename Ops::F vt = Ops::splat(temperature), vm = Ops::splat(z_max);
  blocked_value_sums<Ops, kStore>(
      x, n, [&](const typename Ops::F& v) { return exp_approx<Ops>(Ops::sub(Ops::div(v, vt), vm)); },
      [&](float v) { return exp_approx<ScalarOps>(v / temperature - z_max); }, w, block_sum);
}

// Note [Weight upper bounds]'s values: the float whose bits are the integer part of
// max(0, x * c1 + c0) (Ops::mul_add, then Ops::nonnegative_bits), block sums by
// blocked_value_sums.
template <class Ops>
inline __attribute__((always_inline)) typename Ops::F upper_weight(typename Ops::F x, typename Ops::F c1,
                                                                   typename Ops::F c0) {
  return Ops::nonnegative_bits(Ops::mul_add(x, c1, c0));
}
template <class Ops>
inline __attribute__((always_inline)) void upper_weight_sums(const float* x, int64_t n, float c1, float c0,
                                                             double* block_sum) {
  const typename Ops::F v1 = Ops::splat(c1), v0 = Ops::splat(c0);
  blocked_value_sums<Ops, false>(
      x, n, [&](const typename Ops::F& v) { return upper_weight<Ops>(v, v1, v0); },
      [&](float v) { return upper_weight<ScalarOps>(v, c1, c0); }, nullptr, block_sum);
}

// Note [Argmax with upper sums]
// A logits row at temperature needs its max z before Note [Weight upper bounds]' floats can
// be formed (c0 holds it), so the bounds cost an argmax pass and then theirs: two reads, the
// first from memory, the second compute-bound (four vector operations a vector). This kernel
// does both in one pass over floats formed against any reference (the caller's c0, from a
// guess R of the max; rounds.cpp then rescales the bounds by exp(R - z_max), Note [Shifted
// upper bounds]): the block sums are exactly upper_weight_sums' (the same values, summed in
// the same order), and the index exactly row_argmax's (the lowest index of the largest value,
// +0.0 == -0.0): each mass block's largest value, the first block holding the row's largest
// (strict >), the first index there equal to it. False if the row holds a NaN (then nothing
// else is specified). A path supplies Ops::MaxTrack: reset() (lanes' maxima to -inf; a NaN
// seen stays seen), add(F) (a vector of the row), block_max() (the lanes' largest),
// exceeds(best) (whether block_max() > best, without the reduction where a path can) and
// nan().
// Cost (AVX-512, Zen 4, V = 32000, rows from L3): a read 1.35 us a row; this pass 2.7 us with
// the float clamp max(0, y) and a reduction of the lanes' maxima every block, 2.2 us with the
// clamp on the truncated integer (vpmaxsd, an integer port; the same bits) and the reduction
// only where exceeds says a block may hold a new maximum. Six vector operations a vector
// (compare for NaN, max, fma, truncate, clamp, add) on four ports: still compute-bound.
template <class Ops>
inline __attribute__((always_inline)) bool argmax_upper_weight_sums(const float* x, int64_t n, float c1, float c0,
                                                                    int64_t* index, double* block_sum) {
  using F = typename Ops::F;
  const F v1 = Ops::splat(c1), v0 = Ops::splat(c0);
  typename Ops::MaxTrack track;
  track.reset();
  float tail = -std::numeric_limits<float>::infinity(), best = tail;
  bool tail_nan = false;
  int64_t best_block = 0;
  double* const sums[1] = {block_sum};
  blocked_stream_sums<Ops, 1, false>(
      x, n,
      [&](const F& v, F* e) {
        track.add(v);
        e[0] = upper_weight<Ops>(v, v1, v0);
      },
      [&](float v, float* e) {
        tail_nan |= v != v;
        tail = v > tail ? v : tail;
        e[0] = upper_weight<ScalarOps>(v, c1, c0);
      },
      nullptr, sums,
      [&](int64_t b) {
        // The lanes' largest is formed only for a block that holds a new maximum (a few
        // blocks a row): exceeds is a compare, block_max a reduction. Past block 0 either
        // test passing makes the block's largest exceed best.
        if (b == 0 || tail > best || track.exceeds(best)) {
          const float m = track.block_max();
          best = tail > m ? tail : m;
          best_block = b;
        }
        track.reset();
        tail = -std::numeric_limits<float>::infinity();
      });
  if (track.nan() || tail_nan) return false;
  const int64_t end = n - best_block * kMassBlock < kMassBlock ? n : (best_block + 1) * kMassBlock;
  int64_t v = best_block * kMassBlock;
  while (v + 1 < end && x[v] != best) ++v;
  *index = v;
  return true;
}

// Note [Top-p upper bounds]: upper_weight_sums into block_sum and, in the same pass, the
// block sums of the values above tau alone (Ops::keep_above: v > tau ? v : +0.0) into
// above_sum; each stream summed as upper_weight_sums sums it alone.
template <class Ops>
inline __attribute__((always_inline)) void upper_weight_sums_above(const float* x, int64_t n, float c1, float c0,
                                                                   float tau, double* block_sum, double* above_sum) {
  using F = typename Ops::F;
  const F v1 = Ops::splat(c1), v0 = Ops::splat(c0), vt = Ops::splat(tau);
  double* const sums[2] = {block_sum, above_sum};
  blocked_stream_sums<Ops, 2, false>(
      x, n,
      [&](const F& v, F* e) {
        e[0] = upper_weight<Ops>(v, v1, v0);
        e[1] = Ops::keep_above(e[0], vt);
      },
      [&](float v, float* e) {
        e[0] = upper_weight<ScalarOps>(v, c1, c0);
        e[1] = ScalarOps::keep_above(e[0], tau);
      },
      nullptr, sums);
}

}  // namespace spec_verify
