// x86-64 AVX2 path: the scalar reference's results, bit for bit, 8 floats at a time.
//
// Only the kernels carry target("avx2,fma"); the detection below is baseline x86-64 code,
// so loading the library never runs an AVX instruction on a CPU without it. No vector
// constants at namespace scope (they would be built at load time). FMA is enabled only
// because the target attribute must name it for some intrinsics' headers; the file builds
// with -ffp-contract=off, so no multiply-add is ever fused (Note [Residual in float32]).
#include "spec_verify.h"

#if defined(__x86_64__)

#include "blocked_argmax.h"

#include <immintrin.h>

#include <cmath>
#include <limits>

#define SPEC_VERIFY_AVX2 __attribute__((target("avx2,fma")))

namespace spec_verify {
namespace {

SPEC_VERIFY_AVX2 inline float horizontal_max(__m256 v) {
  __m128 m = _mm_max_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  m = _mm_max_ps(m, _mm_movehl_ps(m, m));
  m = _mm_max_ss(m, _mm_movehdup_ps(m));
  return _mm_cvtss_f32(m);
}

// Largest value of row[begin, end); sets *nan if any value there is NaN.
SPEC_VERIFY_AVX2 float block_max(const float* row, int64_t begin, int64_t end, bool* nan) {
  int64_t v = begin;
  float best = -std::numeric_limits<float>::infinity();
  if (end - v >= 32) {
    __m256 m0 = _mm256_set1_ps(best), m1 = m0, m2 = m0, m3 = m0;
    __m256 unordered = _mm256_setzero_ps();
    for (; v + 32 <= end; v += 32) {
      const __m256 x0 = _mm256_loadu_ps(row + v), x1 = _mm256_loadu_ps(row + v + 8);
      const __m256 x2 = _mm256_loadu_ps(row + v + 16), x3 = _mm256_loadu_ps(row + v + 24);
      // maxps drops a NaN in its first operand, so NaNs are caught by one unordered
      // compare per pair of vectors instead.
      m0 = _mm256_max_ps(x0, m0);
      m1 = _mm256_max_ps(x1, m1);
      m2 = _mm256_max_ps(x2, m2);
      m3 = _mm256_max_ps(x3, m3);
      unordered = _mm256_or_ps(unordered, _mm256_cmp_ps(x0, x1, _CMP_UNORD_Q));
      unordered = _mm256_or_ps(unordered, _mm256_cmp_ps(x2, x3, _CMP_UNORD_Q));
    }
    best = horizontal_max(_mm256_max_ps(_mm256_max_ps(m0, m1), _mm256_max_ps(m2, m3)));
    *nan |= _mm256_movemask_ps(unordered) != 0;
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
  for (; v + 8 <= end; v += 8) {
    const int hits = _mm256_movemask_ps(_mm256_cmp_ps(_mm256_loadu_ps(row + v), target, _CMP_EQ_OQ));
    if (hits != 0) return v + __builtin_ctz(static_cast<unsigned>(hits));
  }
  while (v < end && row[v] != value) ++v;
  return v;
}

// Note [Blocked argmax] (blocked_argmax.h).
SPEC_VERIFY_AVX2 bool f32_argmax__avx2(const float* row, int64_t n, int64_t* index) {
  return blocked_argmax(row, n, index, block_max, first_equal);
}

// Note [Canonical mass order] with 16 lanes as four 4-wide accumulators: a0 holds lanes
// 0-3, a1 4-7, a2 8-11, a3 12-15. The fold l[j] += l[j+8], l[j] += l[j+4], l[j] += l[j+2],
// l[0] + l[1] is (a0 + a2) + (a1 + a3), then its low and high halves, then the two lanes.
struct Lanes {
  __m256d a0, a1, a2, a3;
  SPEC_VERIFY_AVX2 void clear() { a0 = a1 = a2 = a3 = _mm256_setzero_pd(); }
  // Elements 16g .. 16g+7 (x) and 16g+8 .. 16g+15 (y) of a group of 16.
  SPEC_VERIFY_AVX2 void add(__m256 x, __m256 y) {
    a0 = _mm256_add_pd(a0, _mm256_cvtps_pd(_mm256_castps256_ps128(x)));
    a1 = _mm256_add_pd(a1, _mm256_cvtps_pd(_mm256_extractf128_ps(x, 1)));
    a2 = _mm256_add_pd(a2, _mm256_cvtps_pd(_mm256_castps256_ps128(y)));
    a3 = _mm256_add_pd(a3, _mm256_cvtps_pd(_mm256_extractf128_ps(y, 1)));
  }
  SPEC_VERIFY_AVX2 double fold() const {
    const __m256d four = _mm256_add_pd(_mm256_add_pd(a0, a2), _mm256_add_pd(a1, a3));
    const __m128d two = _mm_add_pd(_mm256_castpd256_pd128(four), _mm256_extractf128_pd(four, 1));
    return _mm_cvtsd_f64(_mm_add_sd(two, _mm_unpackhi_pd(two, two)));
  }
};

// Block masses of the values a Source yields: source.add16(v, &lanes) adds elements
// v .. v+15 to the lanes, source.at(v) gives one element as a float (for the tail).
template <class Source>
SPEC_VERIFY_AVX2 inline double blocked_mass(Source& source, int64_t n, double* block_mass) {
  double total = 0.0;
  for (int64_t b = 0, begin = 0; begin < n; ++b, begin += kMassBlock) {
    const int64_t len = n - begin < kMassBlock ? n - begin : kMassBlock;
    const int64_t body = len - len % kLanes;
    Lanes lanes;
    lanes.clear();
    for (int64_t g = 0; g < body; g += kLanes) source.add16(begin + g, &lanes);
    double sum = lanes.fold();
    for (int64_t v = body; v < len; ++v) sum += static_cast<double>(source.at(begin + v));
    block_mass[b] = sum;
    total += sum;
  }
  return total;
}

// Validation at no measurable cost: the OR of every value's bits has the sign bit set iff
// some value is negative, -inf, -0.0 or a NaN with its sign set; only then is the row
// checked value by value (so -0.0, which counts as zero, costs a second pass, nothing more).
// Any other NaN, and +inf, make the float64 mass NaN or inf: float32 values cannot overflow
// a float64 sum. Converting straight from memory saves the lane extracts of a 256-bit load.
struct RowValues {
  const float* row;
  __m256i bits;
  bool tail_negative;
  SPEC_VERIFY_AVX2 void add16(int64_t v, Lanes* lanes) {
    const float* x = row + v;
    bits = _mm256_or_si256(bits, _mm256_or_si256(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(x)),
                                                 _mm256_loadu_si256(reinterpret_cast<const __m256i*>(x + 8))));
    lanes->a0 = _mm256_add_pd(lanes->a0, _mm256_cvtps_pd(_mm_loadu_ps(x)));
    lanes->a1 = _mm256_add_pd(lanes->a1, _mm256_cvtps_pd(_mm_loadu_ps(x + 4)));
    lanes->a2 = _mm256_add_pd(lanes->a2, _mm256_cvtps_pd(_mm_loadu_ps(x + 8)));
    lanes->a3 = _mm256_add_pd(lanes->a3, _mm256_cvtps_pd(_mm_loadu_ps(x + 12)));
  }
  SPEC_VERIFY_AVX2 float at(int64_t v) {
    tail_negative |= std::signbit(row[v]);
    return row[v];
  }
};

SPEC_VERIFY_AVX2 bool all_valid(const float* row, int64_t n) {
  for (int64_t v = 0; v < n; ++v) {
    if (!(row[v] >= 0.0f && row[v] <= std::numeric_limits<float>::max())) return false;
  }
  return true;
}

SPEC_VERIFY_AVX2 bool f32_mass__avx2(const float* row, int64_t n, double* block_mass, double* mass) {
  RowValues values{row, _mm256_setzero_si256(), false};
  const double total = blocked_mass(values, n, block_mass);
  const bool signs = _mm256_movemask_ps(_mm256_castsi256_ps(values.bits)) != 0 || values.tail_negative;
  if (!std::isfinite(total) || (signs && !all_valid(row, n))) return false;
  *mass = total;
  return true;
}

// max_ps returns its second operand (+0.0) unless d > 0: the clamp of residual_value().
struct ResidualValues {
  const float* p;
  const float* q;
  __m256 va, vb;
  float a, b;
  SPEC_VERIFY_AVX2 __m256 eight(int64_t v) const {
    const __m256 d = _mm256_sub_ps(_mm256_mul_ps(_mm256_loadu_ps(p + v), va),
                                   _mm256_mul_ps(_mm256_loadu_ps(q + v), vb));
    return _mm256_max_ps(d, _mm256_setzero_ps());
  }
  SPEC_VERIFY_AVX2 void add16(int64_t v, Lanes* lanes) const { lanes->add(eight(v), eight(v + 8)); }
  float at(int64_t v) const { return residual_value(p[v], q[v], a, b); }
};

SPEC_VERIFY_AVX2 void f32_residual_mass__avx2(const float* p, const float* q, float a, float b,
                                              int64_t n, double* block_mass, double* mass) {
  ResidualValues values{p, q, _mm256_set1_ps(a), _mm256_set1_ps(b), a, b};
  *mass = blocked_mass(values, n, block_mass);
}

}  // namespace

const KernelTable* avx2_kernels() {
  static const KernelTable table{"avx2", f32_argmax__avx2, f32_mass__avx2, f32_residual_mass__avx2};
  static const bool supported = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
  return supported ? &table : nullptr;
}

}  // namespace spec_verify

#else  // not x86-64

namespace spec_verify {
const KernelTable* avx2_kernels() { return nullptr; }
}  // namespace spec_verify

#endif
