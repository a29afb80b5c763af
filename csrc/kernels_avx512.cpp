// x86-64 AVX-512 path: the scalar reference's results, bit for bit, 16 floats at a time.
//
// AVX-512F only (every AVX-512 CPU has it: Skylake-SP and later Xeons, Ice Lake, Zen 4/5);
// the 16 lanes of Note [Canonical mass order] are two 8-wide float64 registers. As for AVX2,
// only the kernels carry the target attribute and the detection below is baseline code.
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

// GCC 12's avx512fintrin.h passes _mm512_undefined_epi32() as the unused source of the
// masked builtins behind plain intrinsics; once inlined, -Wmaybe-uninitialized reports it.
// Nothing reads that value.
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"

// flatten: the shared drivers and the lane arithmetic are inlined into each kernel.
#define SPEC_VERIFY_AVX512 __attribute__((target("avx512f")))
#define SPEC_VERIFY_AVX512_KERNEL __attribute__((target("avx512f"), flatten))

namespace spec_verify {
namespace {

// Largest value of row[begin, end); sets *nan if any value there is NaN. maxps drops a NaN
// in its first operand, so NaNs are looked for apart: an unordered compare of two vectors
// flags a lane where either holds a NaN, so one compare checks 32 values.
SPEC_VERIFY_AVX512 float block_max(const float* row, int64_t begin, int64_t end, bool* nan) {
  int64_t v = begin;
  float best = -std::numeric_limits<float>::infinity();
  if (end - v >= 64) {
    __m512 m0 = _mm512_set1_ps(best), m1 = m0, m2 = m0, m3 = m0;
    __mmask16 unordered = 0;
    for (; v + 64 <= end; v += 64) {
      __m512 x0 = _mm512_loadu_ps(row + v), x1 = _mm512_loadu_ps(row + v + 16);
      __m512 x2 = _mm512_loadu_ps(row + v + 32), x3 = _mm512_loadu_ps(row + v + 48);
      // Each vector loaded once: without this GCC folds second loads into the compares,
      // and the loop waits on the load ports.
      asm("" : "+v"(x0), "+v"(x1), "+v"(x2), "+v"(x3));
      unordered |= _mm512_cmp_ps_mask(x0, x1, _CMP_UNORD_Q) | _mm512_cmp_ps_mask(x2, x3, _CMP_UNORD_Q);
      m0 = _mm512_max_ps(x0, m0);
      m1 = _mm512_max_ps(x1, m1);
      m2 = _mm512_max_ps(x2, m2);
      m3 = _mm512_max_ps(x3, m3);
    }
    best = _mm512_reduce_max_ps(_mm512_max_ps(_mm512_max_ps(m0, m1), _mm512_max_ps(m2, m3)));
    *nan |= unordered != 0;
  }
  for (; v < end; ++v) {
    const float x = row[v];
    *nan |= std::isnan(x);
    best = x > best ? x : best;
  }
  return best;
}

// First v in [begin, end) with row[v] == value; the caller knows one exists.
SPEC_VERIFY_AVX512 int64_t first_equal(const float* row, int64_t begin, int64_t end, float value) {
  int64_t v = begin;
  const __m512 target = _mm512_set1_ps(value);
  // 64 at a time until a group holds it; the 16-wide loop then finds it within the group.
  for (; v + 64 <= end; v += 64) {
    const __mmask16 e0 = _mm512_cmp_ps_mask(_mm512_loadu_ps(row + v), target, _CMP_EQ_OQ);
    const __mmask16 e1 = _mm512_cmp_ps_mask(_mm512_loadu_ps(row + v + 16), target, _CMP_EQ_OQ);
    const __mmask16 e2 = _mm512_cmp_ps_mask(_mm512_loadu_ps(row + v + 32), target, _CMP_EQ_OQ);
    const __mmask16 e3 = _mm512_cmp_ps_mask(_mm512_loadu_ps(row + v + 48), target, _CMP_EQ_OQ);
    if ((e0 | e1 | e2 | e3) != 0) break;
  }
  for (; v + 16 <= end; v += 16) {
    const unsigned hits = _mm512_cmp_ps_mask(_mm512_loadu_ps(row + v), target, _CMP_EQ_OQ);
    if (hits != 0) return v + __builtin_ctz(hits);
  }
  while (v < end && row[v] != value) ++v;
  return v;
}

// Note [Blocked argmax] (blocked_argmax.h).
SPEC_VERIFY_AVX512_KERNEL bool f32_row_argmax__avx512(const float* row, int64_t n, int64_t* index) {
  return blocked_argmax(row, n, index, block_max, first_equal);
}

// Note [Canonical mass order] in two registers: lo holds lanes 0..7, hi lanes 8..15.
// l[j] += l[j+8] is lo + hi; l[j] += l[j+4] adds its 256-bit halves, l[j] += l[j+2] their
// 128-bit halves, and the block sum is l[0] + l[1]. Each row has only two add chains, so
// the driver sums two blocks side by side.
struct Avx512Lanes {
  static constexpr int kBlocksAtOnce = 2;
  __m512d lo, hi;
  SPEC_VERIFY_AVX512 void clear() { lo = hi = _mm512_setzero_pd(); }
  // Values v .. v+7 (x) and v+8 .. v+15 (y), widened exactly (vcvtps2pd).
  SPEC_VERIFY_AVX512 void add(__m256 x, __m256 y) {
    lo = _mm512_add_pd(lo, _mm512_cvtps_pd(x));
    hi = _mm512_add_pd(hi, _mm512_cvtps_pd(y));
  }
  SPEC_VERIFY_AVX512 double fold() const {
    const __m512d eight = _mm512_add_pd(lo, hi);
    const __m256d four = _mm256_add_pd(_mm512_castpd512_pd256(eight), _mm512_extractf64x4_pd(eight, 1));
    const __m128d two = _mm_add_pd(_mm256_castpd256_pd128(four), _mm256_extractf128_pd(four, 1));
    return _mm_cvtsd_f64(_mm_add_sd(two, _mm_unpackhi_pd(two, two)));
  }
};

// Validation as on AVX2: as unsigned integers, the bits of every float in [+0.0, FLT_MAX]
// lie below those of +inf (0x7f800000) and the bits of every other float (-0.0, negatives,
// infinities, NaNs) at or above them. The row keeps the unsigned max of its bits; only
// when that reaches +inf's bits is it checked value by value. The widening here is a
// conversion, so -0.0 sums as the reference sums it and needs no second pass.
constexpr uint32_t kInfBits = 0x7f800000u;

struct RowValues {
  static constexpr int kRows = 1;
  const float* row;
  __m512i high;  // unsigned max of the bits seen
  bool tail_high;
  SPEC_VERIFY_AVX512 void add16(int64_t v, Avx512Lanes* lanes) {
    high = _mm512_max_epu32(high, _mm512_loadu_si512(row + v));
    lanes[0].add(_mm256_loadu_ps(row + v), _mm256_loadu_ps(row + v + 8));
  }
  SPEC_VERIFY_AVX512 float at(int64_t v, int) {
    tail_high |= std::bit_cast<uint32_t>(row[v]) >= kInfBits;
    return row[v];
  }
  // True if some value seen was not in [+0.0, FLT_MAX].
  SPEC_VERIFY_AVX512 bool flagged() const {
    return tail_high || _mm512_cmpge_epu32_mask(high, _mm512_set1_epi32(static_cast<int>(kInfBits))) != 0;
  }
};

SPEC_VERIFY_AVX512_KERNEL bool f32_row_mass__avx512(const float* row, int64_t n,
                                                    double* block_mass, double* mass) {
  RowValues values{row, _mm512_setzero_si512(), false};
  const double total = blocked_mass<Avx512Lanes>(values, n, block_mass);
  if (values.flagged() && !valid_mass_row(row, n)) return false;
  *mass = total;
  return true;
}

// Both rows of a position side by side: more independent add chains.
SPEC_VERIFY_AVX512_KERNEL bool f32_row_mass_pair__avx512(const float* p, const float* q, int64_t n,
                                                         double* p_blocks, double* q_blocks,
                                                         double* p_mass, double* q_mass) {
  return blocked_mass_pair<Avx512Lanes>(RowValues{p, _mm512_setzero_si512(), false},
                                        RowValues{q, _mm512_setzero_si512(), false}, n,
                                        p_blocks, q_blocks, p_mass, q_mass);
}

// The clamp of residual_value() as an integer max with 0: a float's bits are a negative
// int32 exactly when its sign is set, so -0.0 and every d < 0 become +0.0 and d > 0 stays
// (d is never NaN: the rows are finite and residual_scales() keeps the products finite).
// kStore: each value is also stored to out (residual_store).
template <bool kStore>
struct ResidualValues {
  static constexpr int kRows = 1;
  const float* p;
  const float* q;
  __m512 va, vb;
  float a, b;
  float* out;
  SPEC_VERIFY_AVX512 void add16(int64_t v, Avx512Lanes* lanes) const {
    const __m512 d = _mm512_sub_ps(_mm512_mul_ps(_mm512_loadu_ps(p + v), va),
                                   _mm512_mul_ps(_mm512_loadu_ps(q + v), vb));
    const __m512d r = _mm512_castsi512_pd(_mm512_max_epi32(_mm512_castps_si512(d), _mm512_setzero_si512()));
    if constexpr (kStore) _mm512_storeu_pd(reinterpret_cast<double*>(out + v), r);
    lanes[0].add(_mm256_castpd_ps(_mm512_castpd512_pd256(r)), _mm256_castpd_ps(_mm512_extractf64x4_pd(r, 1)));
  }
  float at(int64_t v, int) const {
    const float r = residual_value(p[v], q[v], a, b);
    if constexpr (kStore) out[v] = r;
    return r;
  }
};

SPEC_VERIFY_AVX512_KERNEL void f32_residual_mass__avx512(const float* p, const float* q, float a,
                                                         float b, int64_t n, double* block_mass,
                                                         double* mass) {
  ResidualValues<false> values{p, q, _mm512_set1_ps(a), _mm512_set1_ps(b), a, b, nullptr};
  *mass = blocked_mass<Avx512Lanes>(values, n, block_mass);
}

SPEC_VERIFY_AVX512_KERNEL void f32_residual_store__avx512(const float* p, const float* q, float a, float b,
                                                          int64_t n, float* out, double* block_mass,
                                                          double* mass) {
  ResidualValues<true> values{p, q, _mm512_set1_ps(a), _mm512_set1_ps(b), a, b, out};
  *mass = blocked_mass<Avx512Lanes>(values, n, block_mass);
}

// Note [One exp], 16 lanes.
struct Avx512Ops {
  using F = __m512;
  static SPEC_VERIFY_AVX512 F splat(float x) { return _mm512_set1_ps(x); }
  static SPEC_VERIFY_AVX512 F add(F a, F b) { return _mm512_add_ps(a, b); }
  static SPEC_VERIFY_AVX512 F sub(F a, F b) { return _mm512_sub_ps(a, b); }
  static SPEC_VERIFY_AVX512 F mul(F a, F b) { return _mm512_mul_ps(a, b); }
  static SPEC_VERIFY_AVX512 F max(F a, F b) { return _mm512_max_ps(a, b); }
  static SPEC_VERIFY_AVX512 F sub_exact_product(F a, F b, F c) { return _mm512_fnmadd_ps(b, c, a); }  // fused: b * c is exact
  // vscalefps: p * 2^n with one rounding, as scale_by_two_factors gives it.
  static SPEC_VERIFY_AVX512 F scale(F p, F n, F) { return _mm512_scalef_ps(p, n); }
};

// The weights as a source of the mass driver: computed, stored and summed in one pass.
struct WeightValues : WeightTail {
  __m512 vt, vm;
  SPEC_VERIFY_AVX512 void add16(int64_t v, Avx512Lanes* lanes) const {
    const __m512 y = _mm512_sub_ps(_mm512_div_ps(_mm512_loadu_ps(x + v), vt), vm);
    const __m512 e = exp_nonpositive<Avx512Ops>(y);
    _mm512_storeu_ps(w + v, e);
    // The upper eight widened from memory rather than extracted: the loop is bound by the
    // vector ports, the load ports have room.
    __m256 upper = _mm256_loadu_ps(w + v + 8);
    asm("" : "+v"(upper));
    lanes[0].add(_mm512_castps512_ps256(e), upper);
  }
};

SPEC_VERIFY_AVX512_KERNEL void f32_row_weights__avx512(const float* x, int64_t n, float temperature,
                                                       float z_max, float* w, double* block_mass,
                                                       double* mass) {
  WeightValues values{{x, w, temperature, z_max}, _mm512_set1_ps(temperature), _mm512_set1_ps(z_max)};
  *mass = blocked_mass<Avx512Lanes>(values, n, block_mass);
}

// r(v) = w(v) >= t ? w(v) : +0.0 (row 0, stored unless r is null) and the w(v) > t (row 1).
template <bool kStore>
struct KeepValues : KeepTail<kStore> {
  using KeepTail<kStore>::w;
  using KeepTail<kStore>::r;
  __m512 vt;
  SPEC_VERIFY_AVX512 KeepValues(const float* w_, float* r_, float t_) : KeepTail<kStore>{w_, r_, t_}, vt(_mm512_set1_ps(t_)) {}
  SPEC_VERIFY_AVX512 void add16(int64_t v, Avx512Lanes* lanes) {
    const __m512 x = _mm512_loadu_ps(w + v);
    const __m512 kept = _mm512_maskz_mov_ps(_mm512_cmp_ps_mask(x, vt, _CMP_GE_OQ), x);
    const __m512 above = _mm512_maskz_mov_ps(_mm512_cmp_ps_mask(x, vt, _CMP_GT_OQ), x);
    if constexpr (kStore) _mm512_storeu_ps(r + v, kept);
    lanes[0].add(_mm512_castps512_ps256(kept), _mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(kept), 1)));
    lanes[1].add(_mm512_castps512_ps256(above), _mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(above), 1)));
  }
};

SPEC_VERIFY_AVX512_KERNEL void f32_keep_at_least__avx512(const float* w, int64_t n, float t,
                                                         float* r, double* r_blocks,
                                                         double* r_mass, double* above_blocks,
                                                         double* above_mass) {
  blocked_keep_at_least<Avx512Lanes, KeepValues>(w, n, t, r, r_blocks, r_mass, above_blocks, above_mass);
}

// Note [Mass bounds]: four float32 accumulators of 16 lanes; the unsigned max of the bits
// vouches for every value in [+0.0, FLT_MAX] (-0.0 too is refused: row_mass takes it).
SPEC_VERIFY_AVX512 bool f32_row_sum_f32__avx512(const float* row, int64_t n, float* sum) {
  __m512 s0 = _mm512_setzero_ps(), s1 = s0, s2 = s0, s3 = s0;
  __m512i high = _mm512_setzero_si512();
  int64_t v = 0;
  for (; v + 64 <= n; v += 64) {
    const __m512i x0 = _mm512_loadu_si512(row + v), x1 = _mm512_loadu_si512(row + v + 16);
    const __m512i x2 = _mm512_loadu_si512(row + v + 32), x3 = _mm512_loadu_si512(row + v + 48);
    high = _mm512_max_epu32(high, _mm512_max_epu32(_mm512_max_epu32(x0, x1), _mm512_max_epu32(x2, x3)));
    s0 = _mm512_add_ps(s0, _mm512_castsi512_ps(x0));
    s1 = _mm512_add_ps(s1, _mm512_castsi512_ps(x1));
    s2 = _mm512_add_ps(s2, _mm512_castsi512_ps(x2));
    s3 = _mm512_add_ps(s3, _mm512_castsi512_ps(x3));
  }
  if (_mm512_cmpge_epu32_mask(high, _mm512_set1_epi32(static_cast<int>(kInfBits))) != 0) return false;
  float s = _mm512_reduce_add_ps(_mm512_add_ps(_mm512_add_ps(s0, s1), _mm512_add_ps(s2, s3)));
  for (; v < n; ++v) {
    if (std::bit_cast<uint32_t>(row[v]) >= kInfBits) return false;
    s += row[v];
  }
  *sum = s;
  return std::isfinite(s);
}

// Note [Half rows], sixteen at a time: vcvtph2ps (AVX-512F), and bfloat16 zero-extended and
// shifted into the top half.
SPEC_VERIFY_AVX512 void f16_widen__avx512(const uint16_t* h, int64_t n, float* out) {
  int64_t v = 0;
  for (; v + 16 <= n; v += 16)
    _mm512_storeu_ps(out + v, _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(h + v))));
  for (; v < n; ++v) out[v] = f16_value(h[v]);
}

SPEC_VERIFY_AVX512 void bf16_widen__avx512(const uint16_t* h, int64_t n, float* out) {
  int64_t v = 0;
  for (; v + 16 <= n; v += 16) {
    const __m512i wide = _mm512_cvtepu16_epi32(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(h + v)));
    _mm512_storeu_si512(out + v, _mm512_slli_epi32(wide, 16));
  }
  for (; v < n; ++v) out[v] = bf16_value(h[v]);
}

// Sixteen at a time: the indices of the hits compressed into place, eight int64 at a time
// (most groups of 64 values hold none, and are passed over with one branch).
SPEC_VERIFY_AVX512 int64_t f32_gather_at_least__avx512(const float* w, int64_t n, float t, int64_t* index) {
  const __m512 vt = _mm512_set1_ps(t);
  const __m512i lo = _mm512_setr_epi64(0, 1, 2, 3, 4, 5, 6, 7);
  const __m512i hi = _mm512_setr_epi64(8, 9, 10, 11, 12, 13, 14, 15);
  int64_t m = 0, v = 0;
  const auto take = [&](int64_t at, __mmask16 hits) SPEC_VERIFY_AVX512 {
    const __m512i base = _mm512_set1_epi64(at);
    const __mmask8 h0 = static_cast<__mmask8>(hits), h1 = static_cast<__mmask8>(hits >> 8);
    if (h0 != 0) {
      _mm512_mask_compressstoreu_epi64(index + m, h0, _mm512_add_epi64(base, lo));
      m += __builtin_popcount(h0);
    }
    if (h1 != 0) {
      _mm512_mask_compressstoreu_epi64(index + m, h1, _mm512_add_epi64(base, hi));
      m += __builtin_popcount(h1);
    }
  };
  for (; v + 64 <= n; v += 64) {
    const __mmask16 h0 = _mm512_cmp_ps_mask(_mm512_loadu_ps(w + v), vt, _CMP_GE_OQ);
    const __mmask16 h1 = _mm512_cmp_ps_mask(_mm512_loadu_ps(w + v + 16), vt, _CMP_GE_OQ);
    const __mmask16 h2 = _mm512_cmp_ps_mask(_mm512_loadu_ps(w + v + 32), vt, _CMP_GE_OQ);
    const __mmask16 h3 = _mm512_cmp_ps_mask(_mm512_loadu_ps(w + v + 48), vt, _CMP_GE_OQ);
    if ((h0 | h1 | h2 | h3) == 0) continue;
    take(v, h0);
    take(v + 16, h1);
    take(v + 32, h2);
    take(v + 48, h3);
  }
  for (; v + 16 <= n; v += 16) take(v, _mm512_cmp_ps_mask(_mm512_loadu_ps(w + v), vt, _CMP_GE_OQ));
  return gather_at_least_from(w, v, n, t, index, m);
}

}  // namespace

const KernelTable* avx512_kernels() {
  static const KernelTable table{"avx512", f32_row_argmax__avx512, f32_row_mass__avx512,
                                 f32_row_mass_pair__avx512, f32_residual_mass__avx512,
                                 f32_row_weights__avx512, f32_keep_at_least__avx512,
                                 f32_gather_at_least__avx512, f32_residual_store__avx512, f32_row_sum_f32__avx512,
                                 f16_widen__avx512, bf16_widen__avx512};
  static const bool supported = __builtin_cpu_supports("avx512f");
  return supported ? &table : nullptr;
}

}  // namespace spec_verify

#else  // not x86-64

namespace spec_verify {
const KernelTable* avx512_kernels() { return nullptr; }
}  // namespace spec_verify

#endif
