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

// GCC 12's avx512fintrin.h passes _mm512_undefined_epi32() (and _pd) as the unused source of the
// masked builtins behind plain intrinsics; once inlined, -Wmaybe-uninitialized reports it.
// Nothing reads that value.
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"

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
// the driver sums two blocks side by side (four for the plain masses: measured 3-8% faster
// there, where nothing else holds registers).
template <int kAtOnce>
struct Avx512LanesOf {
  static constexpr int kBlocksAtOnce = kAtOnce;
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
using Avx512Lanes = Avx512LanesOf<2>;
using Avx512MassLanes = Avx512LanesOf<4>;


// Validation by sign bits and sums: every load of 16 values is or-ed into `signs`, which
// flags any value with its sign bit set (negatives, -inf, a NaN with the sign bit, and
// -0.0, which row_mass takes: a flagged row is checked value by value). A value that is
// +inf or a NaN without the sign bit makes its lane, block mass and row mass non-finite
// (each value widens exactly, and sums of values <= FLT_MAX never overflow a double). So a
// row whose sign bits are clear and whose mass is finite holds only values in [+0.0,
// FLT_MAX]. An or is one uop on either vector port; the unsigned max it replaces ran on
// port 0 only, beside the conversions' port-0 half.
struct RowValues {
  static constexpr int kRows = 1;
  const float* row;
  __m512i signs;
  bool tail_sign;
  SPEC_VERIFY_AVX512 void add16(int64_t v, Avx512MassLanes* lanes) {
    signs = _mm512_or_si512(signs, _mm512_loadu_si512(row + v));
    lanes[0].add(_mm256_loadu_ps(row + v), _mm256_loadu_ps(row + v + 8));
  }
  SPEC_VERIFY_AVX512 float at(int64_t v, int) {
    tail_sign |= std::signbit(row[v]);
    return row[v];
  }
  SPEC_VERIFY_AVX512 bool sign_seen() const {
    return tail_sign || _mm512_cmplt_epi32_mask(signs, _mm512_setzero_si512()) != 0;
  }
};

SPEC_VERIFY_AVX512_KERNEL bool f32_row_mass__avx512(const float* row, int64_t n,
                                                    double* block_mass, double* mass) {
  RowValues values{row, _mm512_setzero_si512(), false};
  const double total = blocked_mass<Avx512MassLanes>(values, n, block_mass);
  if ((values.sign_seen() || !std::isfinite(total)) && !valid_mass_row(row, n)) return false;
  *mass = total;
  return true;
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

// Sixty-four at a time: the four compare masks joined into one 64-bit mask, passed over
// with one branch when it is empty (most groups), else taken apart bit by bit. On Zen 4 this
// beat compressing the indices in vectors (vpcompressq): 1.95 us against 2.65 (compress in a
// register, stored whole, per 16 with hits), 4.58 (the same without the branch) and 15.3
// (a compressing store to memory, as before: microcoded there) for 953 hits in 32000
// weights; 7.0 us against 12-15 and 47 for 1703 hits in 128256.
SPEC_VERIFY_AVX512 int64_t f32_gather_at_least__avx512(const float* w, int64_t n, float t, int64_t* index) {
  const __m512 vt = _mm512_set1_ps(t);
  int64_t m = 0, v = 0;
  const auto hits16 = [&](int64_t at) SPEC_VERIFY_AVX512 {
    return static_cast<uint64_t>(_mm512_cmp_ps_mask(_mm512_loadu_ps(w + at), vt, _CMP_GE_OQ));
  };
  for (; v + 64 <= n; v += 64) {
    uint64_t hits = hits16(v) | hits16(v + 16) << 16 | hits16(v + 32) << 32 | hits16(v + 48) << 48;
    while (hits != 0) {
      index[m++] = v + __builtin_ctzll(hits);
      hits &= hits - 1;
    }
  }
  return gather_at_least_from(w, v, n, t, index, m);
}

}  // namespace

const KernelTable* avx512_kernels() {
  static const KernelTable table{
      .name = "avx512",
      .row_argmax = f32_row_argmax__avx512,
      .row_mass = f32_row_mass__avx512,
      .residual_mass = f32_residual_mass__avx512,
      .row_weights = f32_row_weights__avx512,
      .keep_at_least = f32_keep_at_least__avx512,
      .gather_at_least = f32_gather_at_least__avx512,
      .residual_store = f32_residual_store__avx512,
      .widen_f16 = f16_widen__avx512,
      .widen_bf16 = bf16_widen__avx512,
  };
  static const bool supported = __builtin_cpu_supports("avx512f");
  return supported ? &table : nullptr;
}

}  // namespace spec_verify

#else  // not x86-64

namespace spec_verify {
const KernelTable* avx512_kernels() { return nullptr; }
}  // namespace spec_verify

#endif
