// x86-64 AVX2 path: the scalar reference's results, bit for bit, 8 floats at a time.
//
// Only the kernels carry target("avx2,fma"); the detection below is baseline x86-64 code, so
// loading the library never runs an AVX instruction on a CPU without it. The path asks for
// FMA as well as AVX2 and F16C (every AVX2 CPU of Intel and AMD has all three; a CPU or a
// virtual machine without FMA takes the scalar path): only exp's n * C1, an exact product,
// is fused (the same bits as unfused); nothing else is (intrinsics only, and
// -ffp-contract=off). No vector constants at namespace scope (they would be built at load
// time).
#include "spec_verify.h"

#if defined(__x86_64__)

// exp_nonpositive and scale_by_two_factors (exp_f32.h) are templates without a target
// attribute that return vectors; they are always inlined into the kernels, so the ABI
// note -Wpsabi gives is moot.
#pragma GCC diagnostic ignored "-Wpsabi"

#include "blocked_argmax.h"
#include "blocked_mass.h"
#include "exp_f32.h"
#include "half.h"

#include <immintrin.h>

#include <bit>
#include <cmath>
#include <cstdint>
#include <limits>

// flatten: the shared drivers (blocked_mass.h, blocked_argmax.h) and the lane arithmetic
// they call are inlined into each kernel, compiled for AVX2.
#define SPEC_VERIFY_AVX2 __attribute__((target("avx2,fma")))
#define SPEC_VERIFY_AVX2_KERNEL __attribute__((target("avx2,fma"), flatten))

namespace spec_verify {
namespace {

SPEC_VERIFY_AVX2 inline float horizontal_max(__m256 v) {
  __m128 m = _mm_max_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  m = _mm_max_ps(m, _mm_movehl_ps(m, m));
  m = _mm_max_ss(m, _mm_movehdup_ps(m));
  return _mm_cvtss_f32(m);
}

// Largest value of row[begin, end); sets *nan if any value there is NaN. maxps drops a NaN
// in its first operand, so NaNs are looked for on the integer side, off the pipes the maxps
// use: the bits of |x| exceed those of +inf (0x7f800000) exactly when x is NaN.
SPEC_VERIFY_AVX2 float block_max(const float* row, int64_t begin, int64_t end, bool* nan) {
  int64_t v = begin;
  float best = -std::numeric_limits<float>::infinity();
  if (end - v >= 32) {
    __m256 m0 = _mm256_set1_ps(best), m1 = m0, m2 = m0, m3 = m0;
    const __m256i magnitude = _mm256_set1_epi32(0x7fffffff);
    __m256i high = _mm256_setzero_si256();  // max of |x|'s bits
    for (; v + 32 <= end; v += 32) {
      __m256 x0 = _mm256_loadu_ps(row + v), x1 = _mm256_loadu_ps(row + v + 8);
      __m256 x2 = _mm256_loadu_ps(row + v + 16), x3 = _mm256_loadu_ps(row + v + 24);
      // Each vector loaded once: without this GCC folds second loads into the ands, and
      // the loop waits on the load ports.
      asm("" : "+x"(x0), "+x"(x1), "+x"(x2), "+x"(x3));
      m0 = _mm256_max_ps(x0, m0);
      m1 = _mm256_max_ps(x1, m1);
      m2 = _mm256_max_ps(x2, m2);
      m3 = _mm256_max_ps(x3, m3);
      const __m256i a01 = _mm256_max_epi32(_mm256_and_si256(_mm256_castps_si256(x0), magnitude),
                                           _mm256_and_si256(_mm256_castps_si256(x1), magnitude));
      const __m256i a23 = _mm256_max_epi32(_mm256_and_si256(_mm256_castps_si256(x2), magnitude),
                                           _mm256_and_si256(_mm256_castps_si256(x3), magnitude));
      high = _mm256_max_epi32(high, _mm256_max_epi32(a01, a23));
    }
    best = horizontal_max(_mm256_max_ps(_mm256_max_ps(m0, m1), _mm256_max_ps(m2, m3)));
    *nan |= _mm256_movemask_epi8(_mm256_cmpgt_epi32(high, _mm256_set1_epi32(0x7f800000))) != 0;
  }
  for (; v < end; ++v) {
    const float x = row[v];
    *nan |= std::isnan(x);
    best = x > best ? x : best;
  }
  return best;
}

// First v in [begin, end) with row[v] == value; the caller knows one exists.
SPEC_VERIFY_AVX2 int64_t first_equal(const float* row, int64_t begin, int64_t end, float value) {
  int64_t v = begin;
  const __m256 target = _mm256_set1_ps(value);
  // 32 at a time until a group holds it; the 8-wide loop then finds it within the group.
  for (; v + 32 <= end; v += 32) {
    const __m256 e0 = _mm256_cmp_ps(_mm256_loadu_ps(row + v), target, _CMP_EQ_OQ);
    const __m256 e1 = _mm256_cmp_ps(_mm256_loadu_ps(row + v + 8), target, _CMP_EQ_OQ);
    const __m256 e2 = _mm256_cmp_ps(_mm256_loadu_ps(row + v + 16), target, _CMP_EQ_OQ);
    const __m256 e3 = _mm256_cmp_ps(_mm256_loadu_ps(row + v + 24), target, _CMP_EQ_OQ);
    if (_mm256_movemask_ps(_mm256_or_ps(_mm256_or_ps(e0, e1), _mm256_or_ps(e2, e3))) != 0) break;
  }
  for (; v + 8 <= end; v += 8) {
    const int hits = _mm256_movemask_ps(_mm256_cmp_ps(_mm256_loadu_ps(row + v), target, _CMP_EQ_OQ));
    if (hits != 0) return v + __builtin_ctz(static_cast<unsigned>(hits));
  }
  while (v < end && row[v] != value) ++v;
  return v;
}

// Note [Blocked argmax] (blocked_argmax.h).
SPEC_VERIFY_AVX2 bool f32_row_argmax__avx2(const float* row, int64_t n, int64_t* index) {
  return blocked_argmax(row, n, index, block_max, first_equal);
}

// Note [Widening by integer multiply]
// vcvtps2pd issues at one per cycle on common x86-64 cores, which caps any loop that widens
// every float. A float's bits can be widened exactly with an integer multiply instead:
// for a finite float x >= 0 (exponent field e, mantissa m), the 64-bit word bits(x) * 2^29
// holds e in the float64 exponent field and m at the top of the float64 mantissa, i.e. the
// float64 x * 2^-896 (e > 0: 2^(e-1023) * (1 + m/2^23); e = 0: 2^-1022 * m/2^23, a float64
// subnormal). vpmuludq forms that product from the low 32 bits of each 64-bit lane on the
// multiply pipes, leaving the add pipes to the sums. Sums of scaled values are the scaled
// sums, bit for bit: an addition whose exact result is >= 2^-1022 rounds the same way at
// either scale (the scale is a power of two), and one below 2^-1022 is exact at both (the
// scaled result is a multiple of 2^-1074, the unscaled one a multiple of 2^-178 below 2^-126,
// so it fits in 52 bits). Multiplying the folded block sum by 2^896 is exact too. So a path
// may widen this way and still return the canonical bits; nothing outside the lanes sees a
// scaled value. Values with the sign bit set must not reach it (-0.0 would become 2^129).
struct ScaledLanes {
  static constexpr int kBlocksAtOnce = 1;
  // The layout the integer widening gives: e0 holds lanes 0 2 4 6, o0 1 3 5 7, e1 8 10 12 14,
  // o1 9 11 13 15.
  __m256d e0, o0, e1, o1;
  SPEC_VERIFY_AVX2 void clear() { e0 = o0 = e1 = o1 = _mm256_setzero_pd(); }
  // Elements 16g .. 16g+7 (x) and 16g+8 .. 16g+15 (y) as float bits, none negative.
  SPEC_VERIFY_AVX2 void add(__m256i x, __m256i y) {
    const __m256i scale = _mm256_set1_epi64x(int64_t{1} << 29);
    e0 = _mm256_add_pd(e0, _mm256_castsi256_pd(_mm256_mul_epu32(x, scale)));
    o0 = _mm256_add_pd(o0, _mm256_castsi256_pd(_mm256_mul_epu32(_mm256_srli_epi64(x, 32), scale)));
    e1 = _mm256_add_pd(e1, _mm256_castsi256_pd(_mm256_mul_epu32(y, scale)));
    o1 = _mm256_add_pd(o1, _mm256_castsi256_pd(_mm256_mul_epu32(_mm256_srli_epi64(y, 32), scale)));
  }
  // l[j] += l[j+8] is e0 + e1 (lanes 0 2 4 6) and o0 + o1 (1 3 5 7); l[j] += l[j+4] adds the
  // 128-bit halves of each; l[j] += l[j+2] pairs lanes 0 with 2 and 1 with 3 across them.
  SPEC_VERIFY_AVX2 double fold() const {
    const __m256d even = _mm256_add_pd(e0, e1), odd = _mm256_add_pd(o0, o1);
    const __m128d e = _mm_add_pd(_mm256_castpd256_pd128(even), _mm256_extractf128_pd(even, 1));
    const __m128d o = _mm_add_pd(_mm256_castpd256_pd128(odd), _mm256_extractf128_pd(odd, 1));
    const __m128d two = _mm_add_pd(_mm_unpacklo_pd(e, o), _mm_unpackhi_pd(e, o));
    return _mm_cvtsd_f64(_mm_add_sd(two, _mm_unpackhi_pd(two, two))) * 0x1p896;
  }
};

// Validation at no measurable cost: as unsigned integers, the bits of every float in
// [+0.0, FLT_MAX] lie below those of +inf (0x7f800000) and the bits of every other float
// (-0.0, negatives, infinities, NaNs) at or above them. So the row keeps the unsigned max of
// its bits, and only when that reaches 0x7f800000 is it checked value by value. A row that
// passes then holds -0.0 (which counts as zero), whose sign bit the integer widening must
// not see: it is summed again with the sign bits cleared. -0.0 costs a second pass, nothing
// more.
constexpr uint32_t kInfBits = 0x7f800000u;

template <bool kClearSigns>
struct RowValues {
  static constexpr int kRows = 1;
  const float* row;
  __m256i high;  // unsigned max of the bits seen (not kept when clearing signs)
  bool tail_high;
  SPEC_VERIFY_AVX2 void add16(int64_t v, ScaledLanes* lanes) {
    __m256i x = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(row + v));
    __m256i y = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(row + v + 8));
    if constexpr (kClearSigns) {
      const __m256i magnitude = _mm256_set1_epi32(0x7fffffff);
      x = _mm256_and_si256(x, magnitude);
      y = _mm256_and_si256(y, magnitude);
    } else {
      high = _mm256_max_epu32(high, _mm256_max_epu32(x, y));
    }
    lanes->add(x, y);
  }
  // The tail adds floats as they are (-0.0 added to a sum leaves it unchanged).
  SPEC_VERIFY_AVX2 float at(int64_t v, int) {
    tail_high |= std::bit_cast<uint32_t>(row[v]) >= kInfBits;
    return row[v];
  }
  // True if some value seen was not in [+0.0, FLT_MAX]: some lane of `high` is at or above
  // kInfBits as an unsigned integer, i.e. max(high, kInfBits) == high there.
  SPEC_VERIFY_AVX2 bool flagged() const {
    const __m256i inf = _mm256_set1_epi32(static_cast<int>(kInfBits));
    return tail_high || _mm256_movemask_epi8(_mm256_cmpeq_epi32(_mm256_max_epu32(high, inf), high)) != 0;
  }
};

SPEC_VERIFY_AVX2_KERNEL bool f32_row_mass__avx2(const float* row, int64_t n, double* block_mass,
                                                double* mass) {
  RowValues<false> values{row, _mm256_setzero_si256(), false};
  double total = blocked_mass<ScaledLanes>(values, n, block_mass);
  if (values.flagged()) {
    if (!valid_mass_row(row, n)) return false;
    RowValues<true> cleared{row, _mm256_setzero_si256(), false};
    total = blocked_mass<ScaledLanes>(cleared, n, block_mass);
  }
  *mass = total;
  return true;
}

// The clamp of residual_value() as an integer max with 0: a float's bits are a negative
// int32 exactly when its sign is set, so -0.0 and every d < 0 become +0.0 and d > 0 stays
// (d is never NaN: the rows are finite and residual_scales() keeps the products finite).
// The results carry no sign bit, as the integer widening needs; it runs on the multiply
// pipes, where this loop has room (Note [Widening by integer multiply]).
// kStore: each value is also stored to out (residual_store).
template <bool kStore>
struct ResidualValues {
  static constexpr int kRows = 1;
  const float* p;
  const float* q;
  __m256 va, vb;
  float a, b;
  float* out;
  SPEC_VERIFY_AVX2 __m256i eight(int64_t v) const {
    const __m256 d = _mm256_sub_ps(_mm256_mul_ps(_mm256_loadu_ps(p + v), va),
                                   _mm256_mul_ps(_mm256_loadu_ps(q + v), vb));
    const __m256i r = _mm256_max_epi32(_mm256_castps_si256(d), _mm256_setzero_si256());
    if constexpr (kStore) _mm256_storeu_si256(reinterpret_cast<__m256i*>(out + v), r);
    return r;
  }
  SPEC_VERIFY_AVX2 void add16(int64_t v, ScaledLanes* lanes) const { lanes->add(eight(v), eight(v + 8)); }
  float at(int64_t v, int) const {
    const float r = residual_value(p[v], q[v], a, b);
    if constexpr (kStore) out[v] = r;
    return r;
  }
};

SPEC_VERIFY_AVX2_KERNEL void f32_residual_mass__avx2(const float* p, const float* q, float a,
                                                     float b, int64_t n, double* block_mass,
                                                     double* mass) {
  ResidualValues<false> values{p, q, _mm256_set1_ps(a), _mm256_set1_ps(b), a, b, nullptr};
  *mass = blocked_mass<ScaledLanes>(values, n, block_mass);
}

SPEC_VERIFY_AVX2_KERNEL void f32_residual_store__avx2(const float* p, const float* q, float a, float b,
                                                      int64_t n, float* out, double* block_mass,
                                                      double* mass) {
  ResidualValues<true> values{p, q, _mm256_set1_ps(a), _mm256_set1_ps(b), a, b, out};
  *mass = blocked_mass<ScaledLanes>(values, n, block_mass);
}

// Note [One exp], 8 lanes.
struct Avx2Ops {
  using F = __m256;
  using I = __m256i;
  static SPEC_VERIFY_AVX2 F splat(float x) { return _mm256_set1_ps(x); }
  static SPEC_VERIFY_AVX2 F add(F a, F b) { return _mm256_add_ps(a, b); }
  static SPEC_VERIFY_AVX2 F sub(F a, F b) { return _mm256_sub_ps(a, b); }
  static SPEC_VERIFY_AVX2 F mul(F a, F b) { return _mm256_mul_ps(a, b); }
  static SPEC_VERIFY_AVX2 F max(F a, F b) { return _mm256_max_ps(a, b); }
  static SPEC_VERIFY_AVX2 F sub_exact_product(F a, F b, F c) { return _mm256_fnmadd_ps(b, c, a); }  // fused: b * c is exact
  static SPEC_VERIFY_AVX2 I bits(F x) { return _mm256_castps_si256(x); }
  static SPEC_VERIFY_AVX2 F from_bits(I i) { return _mm256_castsi256_ps(i); }
  static SPEC_VERIFY_AVX2 I isplat(int32_t i) { return _mm256_set1_epi32(i); }
  static SPEC_VERIFY_AVX2 I isub(I a, I b) { return _mm256_sub_epi32(a, b); }
  static SPEC_VERIFY_AVX2 I iadd(I a, I b) { return _mm256_add_epi32(a, b); }
  template <int s> static SPEC_VERIFY_AVX2 I srai(I a) { return _mm256_srai_epi32(a, s); }
  template <int s> static SPEC_VERIFY_AVX2 I slli(I a) { return _mm256_slli_epi32(a, s); }
  static SPEC_VERIFY_AVX2 F scale(F p, F, F t) { return scale_by_two_factors<Avx2Ops>(p, t); }
};

// The weights as a source of the mass driver: computed, stored and summed in one pass.
struct WeightValues : WeightTail {
  __m256 vt, vm;
  SPEC_VERIFY_AVX2 __m256 eight(int64_t v) const {
    const __m256 y = _mm256_sub_ps(_mm256_div_ps(_mm256_loadu_ps(x + v), vt), vm);
    const __m256 e = exp_nonpositive<Avx2Ops>(y);
    _mm256_storeu_ps(w + v, e);
    return e;
  }
  SPEC_VERIFY_AVX2 void add16(int64_t v, ScaledLanes* lanes) const {
    lanes->add(_mm256_castps_si256(eight(v)), _mm256_castps_si256(eight(v + 8)));
  }
};

SPEC_VERIFY_AVX2_KERNEL void f32_row_weights__avx2(const float* x, int64_t n, float temperature,
                                                   float z_max, float* w, double* block_mass,
                                                   double* mass) {
  WeightValues values{{x, w, temperature, z_max}, _mm256_set1_ps(temperature), _mm256_set1_ps(z_max)};
  *mass = blocked_mass<ScaledLanes>(values, n, block_mass);
}

// r(v) = w(v) >= t ? w(v) : +0.0 (row 0, stored unless r is null) and the w(v) > t (row 1).
// The masked values carry no sign bit, as the integer widening needs.
template <bool kStore>
struct KeepValues : KeepTail<kStore> {
  using KeepTail<kStore>::w;
  using KeepTail<kStore>::r;
  __m256 vt;
  SPEC_VERIFY_AVX2 KeepValues(const float* w_, float* r_, float t_) : KeepTail<kStore>{w_, r_, t_}, vt(_mm256_set1_ps(t_)) {}
  SPEC_VERIFY_AVX2 void add16(int64_t v, ScaledLanes* lanes) {
    const __m256 x = _mm256_loadu_ps(w + v), y = _mm256_loadu_ps(w + v + 8);
    const __m256 kx = _mm256_and_ps(x, _mm256_cmp_ps(x, vt, _CMP_GE_OQ));
    const __m256 ky = _mm256_and_ps(y, _mm256_cmp_ps(y, vt, _CMP_GE_OQ));
    if constexpr (kStore) {
      _mm256_storeu_ps(r + v, kx);
      _mm256_storeu_ps(r + v + 8, ky);
    }
    lanes[0].add(_mm256_castps_si256(kx), _mm256_castps_si256(ky));
    lanes[1].add(_mm256_castps_si256(_mm256_and_ps(x, _mm256_cmp_ps(x, vt, _CMP_GT_OQ))),
                 _mm256_castps_si256(_mm256_and_ps(y, _mm256_cmp_ps(y, vt, _CMP_GT_OQ))));
  }
};

SPEC_VERIFY_AVX2_KERNEL void f32_keep_at_least__avx2(const float* w, int64_t n, float t, float* r,
                                                     double* r_blocks, double* r_mass,
                                                     double* above_blocks, double* above_mass) {
  blocked_keep_at_least<ScaledLanes, KeepValues>(w, n, t, r, r_blocks, r_mass, above_blocks, above_mass);
}

// Note [Half rows], eight at a time: F16C's vcvtph2ps, and bfloat16 zero-extended and
// shifted into the top half.
__attribute__((target("avx2,f16c"))) void f16_widen__avx2(const uint16_t* h, int64_t n, float* out) {
  int64_t v = 0;
  for (; v + 8 <= n; v += 8)
    _mm256_storeu_ps(out + v, _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(h + v))));
  for (; v < n; ++v) out[v] = f16_value(h[v]);
}

SPEC_VERIFY_AVX2 void bf16_widen__avx2(const uint16_t* h, int64_t n, float* out) {
  int64_t v = 0;
  for (; v + 8 <= n; v += 8) {
    const __m256i wide = _mm256_cvtepu16_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(h + v)));
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(out + v), _mm256_slli_epi32(wide, 16));
  }
  for (; v < n; ++v) out[v] = bf16_value(h[v]);
}

// Eight at a time; a group with any value >= t is taken apart lane by lane.
SPEC_VERIFY_AVX2 int64_t f32_gather_at_least__avx2(const float* w, int64_t n, float t, int64_t* index) {
  const __m256 vt = _mm256_set1_ps(t);
  int64_t m = 0, v = 0;
  for (; v + 8 <= n; v += 8) {
    unsigned hits = static_cast<unsigned>(_mm256_movemask_ps(_mm256_cmp_ps(_mm256_loadu_ps(w + v), vt, _CMP_GE_OQ)));
    while (hits != 0) {
      index[m++] = v + __builtin_ctz(hits);
      hits &= hits - 1;
    }
  }
  return gather_at_least_from(w, v, n, t, index, m);
}

}  // namespace

const KernelTable* avx2_kernels() {
  static const KernelTable table{
      .name = "avx2",
      .row_argmax = f32_row_argmax__avx2,
      .row_mass = f32_row_mass__avx2,
      .residual_mass = f32_residual_mass__avx2,
      .row_weights = f32_row_weights__avx2,
      .keep_at_least = f32_keep_at_least__avx2,
      .gather_at_least = f32_gather_at_least__avx2,
      .residual_store = f32_residual_store__avx2,
      .widen_f16 = f16_widen__avx2,
      .widen_bf16 = bf16_widen__avx2,
  };
  // Every CPU with AVX2 has F16C and FMA too; all three are checked all the same.
  static const bool supported = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("f16c") &&
                                __builtin_cpu_supports("fma");
  return supported ? &table : nullptr;
}

}  // namespace spec_verify

#else  // not x86-64

namespace spec_verify {
const KernelTable* avx2_kernels() { return nullptr; }
}  // namespace spec_verify

#endif
