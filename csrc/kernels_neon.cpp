// aarch64 NEON path: the scalar reference's results, bit for bit, 4 floats at a time.
//
// Baseline armv8-a only (a Raspberry Pi 4's Cortex-A72 is armv8.0): NEON and float64
// vectors are part of every aarch64 CPU, so no run-time check is needed. Anything newer
// (fp16 arithmetic, dot products) would need a getauxval(AT_HWCAP) check first.
#include "spec_verify.h"

#if defined(__aarch64__)

#include "blocked_argmax.h"
#include "blocked_mass.h"
#include "exp_f32.h"
#include "half.h"

#include <arm_neon.h>

#include <cmath>
#include <limits>

namespace spec_verify {
namespace {

// Largest value of row[begin, end); sets *nan if any value there is NaN. FMAX (unlike
// FMAXNM) returns NaN when either input is NaN, so a NaN anywhere survives to the block's
// maximum: no separate NaN test in the loop.
float block_max(const float* row, int64_t begin, int64_t end, bool* nan) {
  int64_t v = begin;
  float best = -std::numeric_limits<float>::infinity();
  if (end - v >= 32) {
    float32x4_t m0 = vdupq_n_f32(best), m1 = m0, m2 = m0, m3 = m0;
    for (; v + 32 <= end; v += 32) {
      const float32x4x4_t a = vld1q_f32_x4(row + v);
      const float32x4x4_t b = vld1q_f32_x4(row + v + 16);
      m0 = vmaxq_f32(m0, a.val[0]);
      m1 = vmaxq_f32(m1, a.val[1]);
      m2 = vmaxq_f32(m2, a.val[2]);
      m3 = vmaxq_f32(m3, a.val[3]);
      m0 = vmaxq_f32(m0, b.val[0]);
      m1 = vmaxq_f32(m1, b.val[1]);
      m2 = vmaxq_f32(m2, b.val[2]);
      m3 = vmaxq_f32(m3, b.val[3]);
    }
    best = vmaxvq_f32(vmaxq_f32(vmaxq_f32(m0, m1), vmaxq_f32(m2, m3)));
    *nan |= std::isnan(best);
  }
  for (; v < end; ++v) {
    const float x = row[v];
    *nan |= std::isnan(x);
    best = x > best ? x : best;
  }
  return best;
}

// First v in [begin, end) with row[v] == value; the caller knows one exists.
int64_t first_equal(const float* row, int64_t begin, int64_t end, float value) {
  int64_t v = begin;
  const float32x4_t target = vdupq_n_f32(value);
  for (; v + 4 <= end; v += 4) {
    if (vmaxvq_u32(vceqq_f32(vld1q_f32(row + v), target)) != 0) break;
  }
  while (v < end && row[v] != value) ++v;
  return v;
}

// Note [Blocked argmax] (blocked_argmax.h).
bool f32_row_argmax__neon(const float* row, int64_t n, int64_t* index) {
  return blocked_argmax(row, n, index, block_max, first_equal);
}

// Note [Canonical mass order] with 16 lanes as eight 2-wide accumulators: acc[k] holds
// lanes 2k and 2k+1. The fold l[j] += l[j+8], l[j] += l[j+4], l[j] += l[j+2], l[0] + l[1]
// is acc[k] += acc[k+4], acc[k] += acc[k+2], acc[0] += acc[1], then its two lanes.
struct NeonLanes {
  static constexpr int kBlocksAtOnce = 1;
  float64x2_t acc[8];
  void clear() {
    for (float64x2_t& a : acc) a = vdupq_n_f64(0.0);
  }
  // Adds 16 floats (four vectors, values v .. v+15 of a row).
  void add(const float32x4x4_t& x) {
    for (int i = 0; i < 4; ++i) {
      acc[2 * i] = vaddq_f64(acc[2 * i], vcvt_f64_f32(vget_low_f32(x.val[i])));
      acc[2 * i + 1] = vaddq_f64(acc[2 * i + 1], vcvt_high_f64_f32(x.val[i]));
    }
  }
  double fold() {
    for (int k = 0; k < 4; ++k) acc[k] = vaddq_f64(acc[k], acc[k + 4]);
    for (int k = 0; k < 2; ++k) acc[k] = vaddq_f64(acc[k], acc[k + 2]);
    const float64x2_t two = vaddq_f64(acc[0], acc[1]);
    return vgetq_lane_f64(two, 0) + vgetq_lane_f64(two, 1);
  }
};

// A row, validated as it is summed: FMIN propagates NaN, so `smallest` ends NaN (any NaN) or
// negative (any negative value, -inf included); +inf makes the float64 mass infinite.
struct RowValues {
  static constexpr int kRows = 1;
  const float* row;
  float32x4_t smallest;
  bool bad_tail;
  void add16(int64_t v, NeonLanes* lanes) {
    const float32x4x4_t x = vld1q_f32_x4(row + v);
    smallest = vminq_f32(smallest, vminq_f32(vminq_f32(x.val[0], x.val[1]), vminq_f32(x.val[2], x.val[3])));
    lanes[0].add(x);
  }
  float at(int64_t v, int) {
    bad_tail |= !(row[v] >= 0.0f);
    return row[v];
  }
};

bool f32_row_mass__neon(const float* row, int64_t n, double* block_mass, double* mass) {
  RowValues values{row, vdupq_n_f32(0.0f), false};
  const double total = blocked_mass<NeonLanes>(values, n, block_mass);
  if (!(vminvq_f32(values.smallest) >= 0.0f) || values.bad_tail || !std::isfinite(total)) return false;
  *mass = total;
  return true;
}

// FMAX(d, +0.0) is d when d > 0 and +0.0 otherwise (FMAX orders -0.0 below +0.0): the
// clamp of residual_value(). Two products and a difference, each rounded (no FMLS).
// kStore: each value is also stored to out (residual_store).
template <bool kStore>
struct ResidualValues {
  static constexpr int kRows = 1;
  const float* p;
  const float* q;
  float32x4_t va, vb;
  float a, b;
  float* out;
  void add16(int64_t v, NeonLanes* lanes) const {
    const float32x4x4_t pv = vld1q_f32_x4(p + v);
    const float32x4x4_t qv = vld1q_f32_x4(q + v);
    float32x4x4_t r;
    for (int i = 0; i < 4; ++i)
      r.val[i] = vmaxq_f32(vsubq_f32(vmulq_f32(pv.val[i], va), vmulq_f32(qv.val[i], vb)), vdupq_n_f32(0.0f));
    if constexpr (kStore) vst1q_f32_x4(out + v, r);
    lanes[0].add(r);
  }
  float at(int64_t v, int) const {
    const float r = residual_value(p[v], q[v], a, b);
    if constexpr (kStore) out[v] = r;
    return r;
  }
};

void f32_residual_mass__neon(const float* p, const float* q, float a, float b, int64_t n,
                             double* block_mass, double* mass) {
  ResidualValues<false> values{p, q, vdupq_n_f32(a), vdupq_n_f32(b), a, b, nullptr};
  *mass = blocked_mass<NeonLanes>(values, n, block_mass);
}

void f32_residual_store__neon(const float* p, const float* q, float a, float b, int64_t n, float* out,
                              double* block_mass, double* mass) {
  ResidualValues<true> values{p, q, vdupq_n_f32(a), vdupq_n_f32(b), a, b, out};
  *mass = blocked_mass<NeonLanes>(values, n, block_mass);
}

// Note [Bounded sampling]: block_sums_f32_from's scheme (blocked_mass.h), 16 lanes as four
// vectors of 4 per accumulator: group g of a block into accumulator g % 4 (three roundings
// per lane), (0 + 1) + (2 + 3), then the 16 lanes and the block's tail in float64.
// Source::load16(v) gives values v .. v+15, Source::at(v) one value.
// Whole blocks here (the accumulators stay in registers); a last, shorter block value by
// value through block_sums_f32_from (Source::f32).
template <class Source>
inline __attribute__((always_inline)) void block_sums_f32_neon(Source& source, int64_t n, double* block_sum) {
  int64_t b = 0, begin = 0;
  for (; n - begin >= kMassBlock; ++b, begin += kMassBlock) {
    float32x4x4_t acc[4];
    for (auto& a : acc)
      for (auto& x : a.val) x = vdupq_n_f32(0.0f);
    for (int64_t v = begin; v < begin + kMassBlock; v += 4 * kLanes) {
      for (int k = 0; k < 4; ++k) {
        const float32x4x4_t x = source.load16(v + k * kLanes);
        for (int i = 0; i < 4; ++i) acc[k].val[i] = vaddq_f32(acc[k].val[i], x.val[i]);
      }
    }
    float64x2_t wide = vdupq_n_f64(0.0);
    for (int i = 0; i < 4; ++i) {
      const float32x4_t s = vaddq_f32(vaddq_f32(acc[0].val[i], acc[1].val[i]), vaddq_f32(acc[2].val[i], acc[3].val[i]));
      wide = vaddq_f64(wide, vaddq_f64(vcvt_f64_f32(vget_low_f32(s)), vcvt_high_f64_f32(s)));
    }
    block_sum[b] = vaddvq_f64(wide);
  }
  if (begin < n) {
    struct Tail {
      Source& source;
      int64_t begin;
      float f32(int64_t v) { return source.at(begin + v); }
    } tail{source, begin};
    block_sums_f32_from(tail, n - begin, block_sum + b);
  }
}

// The row's values; the smallest kept (as row_sum_f32 does): a negative or a NaN makes it
// fail >= 0; a +inf makes the sums infinite, which the caller checks. -0.0 passes (it sums
// as zero).
struct RowF32Values {
  const float* row;
  float32x4_t smallest;
  bool tail_bad;
  float32x4x4_t load16(int64_t v) {
    const float32x4x4_t x = vld1q_f32_x4(row + v);
    smallest = vminq_f32(smallest, vminq_f32(vminq_f32(x.val[0], x.val[1]), vminq_f32(x.val[2], x.val[3])));
    return x;
  }
  float at(int64_t v) {
    tail_bad |= !(row[v] >= 0.0f);
    return row[v];
  }
};

bool f32_row_block_sums__neon(const float* row, int64_t n, double* block_sum) {
  RowF32Values source{row, vdupq_n_f32(0.0f), false};
  block_sums_f32_neon(source, n, block_sum);
  return !source.tail_bad && vminvq_f32(source.smallest) >= 0.0f;
}

struct ResidualF32Values {
  const float* p;
  const float* q;
  float32x4_t va, vb;
  float a, b;
  float32x4x4_t load16(int64_t v) const {
    const float32x4x4_t pv = vld1q_f32_x4(p + v);
    const float32x4x4_t qv = vld1q_f32_x4(q + v);
    float32x4x4_t r;
    for (int i = 0; i < 4; ++i)
      r.val[i] = vmaxq_f32(vsubq_f32(vmulq_f32(pv.val[i], va), vmulq_f32(qv.val[i], vb)), vdupq_n_f32(0.0f));
    return r;
  }
  float at(int64_t v) const { return residual_value(p[v], q[v], a, b); }
};

void f32_residual_block_sums__neon(const float* p, const float* q, float a, float b, int64_t n, double* block_sum) {
  ResidualF32Values source{p, q, vdupq_n_f32(a), vdupq_n_f32(b), a, b};
  block_sums_f32_neon(source, n, block_sum);
}

// pair_block_sums (Note [Bounded rejection]): the block sums of p, of q and of
// max(0, p - q) in one pass. Three rows of 16 lanes in the 32 registers leave room for one
// accumulator each, so the 16 groups of a block go in four steps of four, each step's groups
// added as a tree ((g0 + g1) + (g2 + g3)) before its accumulator: five float32 adds from a
// value to its lane, then the lanes in float64 (block_sums_f32_neon's bound). vmaxq with
// +0.0 is residual_value's clamp at factors 1 (FMAX orders -0.0 below +0.0; a NaN fails the
// rows anyway). The smallest value of each row is kept, as row_block_sums does; the last,
// shorter block goes through the one-row kernels.
bool f32_pair_block_sums__neon(const float* p, const float* q, int64_t n, double* p_sum, double* q_sum,
                               double* guess_sum) {
  float32x4_t smallest = vdupq_n_f32(0.0f);
  const float32x4_t zero = vdupq_n_f32(0.0f);
  int64_t b = 0, begin = 0;
  for (; n - begin >= kMassBlock; ++b, begin += kMassBlock) {
    float32x4_t ap[4], aq[4], ag[4];
    for (int64_t step = 0; step < 4; ++step) {
      const int64_t v = begin + 64 * step;
      for (int i = 0; i < 4; ++i) {  // lanes 4i..4i+3 of the four groups
        float32x4_t x[4], y[4], g[4];
        for (int j = 0; j < 4; ++j) {
          x[j] = vld1q_f32(p + v + 16 * j + 4 * i);
          y[j] = vld1q_f32(q + v + 16 * j + 4 * i);
          g[j] = vmaxq_f32(vsubq_f32(x[j], y[j]), zero);
        }
        smallest = vminq_f32(smallest, vminq_f32(vminq_f32(x[0], x[1]), vminq_f32(x[2], x[3])));
        smallest = vminq_f32(smallest, vminq_f32(vminq_f32(y[0], y[1]), vminq_f32(y[2], y[3])));
        const float32x4_t tp = vaddq_f32(vaddq_f32(x[0], x[1]), vaddq_f32(x[2], x[3]));
        const float32x4_t tq = vaddq_f32(vaddq_f32(y[0], y[1]), vaddq_f32(y[2], y[3]));
        const float32x4_t tg = vaddq_f32(vaddq_f32(g[0], g[1]), vaddq_f32(g[2], g[3]));
        ap[i] = step == 0 ? tp : vaddq_f32(ap[i], tp);
        aq[i] = step == 0 ? tq : vaddq_f32(aq[i], tq);
        ag[i] = step == 0 ? tg : vaddq_f32(ag[i], tg);
      }
    }
    const auto fold = [](const float32x4_t* a) {
      float64x2_t wide = vdupq_n_f64(0.0);
      for (int i = 0; i < 4; ++i) wide = vaddq_f64(wide, vaddq_f64(vcvt_f64_f32(vget_low_f32(a[i])), vcvt_high_f64_f32(a[i])));
      return vaddvq_f64(wide);
    };
    p_sum[b] = fold(ap);
    q_sum[b] = fold(aq);
    guess_sum[b] = fold(ag);
  }
  if (begin < n) {
    if (!f32_row_block_sums__neon(p + begin, n - begin, p_sum + b) ||
        !f32_row_block_sums__neon(q + begin, n - begin, q_sum + b))
      return false;
    f32_residual_block_sums__neon(p + begin, q + begin, 1.0f, 1.0f, n - begin, guess_sum + b);
  }
  return vminvq_f32(smallest) >= 0.0f;
}

// Note [One exp], 4 lanes.
struct NeonOps {
  using F = float32x4_t;
  using I = int32x4_t;
  static F splat(float x) { return vdupq_n_f32(x); }
  static F add(F a, F b) { return vaddq_f32(a, b); }
  static F sub(F a, F b) { return vsubq_f32(a, b); }
  static F mul(F a, F b) { return vmulq_f32(a, b); }
  static F max(F a, F b) { return vmaxq_f32(a, b); }
  static F sub_exact_product(F a, F b, F c) { return vfmsq_f32(a, b, c); }  // fused: b * c is exact
  // For exp_approx and approx_weight_sums (Note [Bounded warping]) only.
  static constexpr int kLanes = 4;
  static F mul_add(F a, F b, F c) { return vfmaq_f32(c, a, b); }
  static F load(const float* x) { return vld1q_f32(x); }
  static void store(float* w, F e) { vst1q_f32(w, e); }
  static F div(F a, F b) { return vdivq_f32(a, b); }
  static float hsum(F a) { return vaddvq_f32(a); }
  static I bits(F x) { return vreinterpretq_s32_f32(x); }
  static F from_bits(I i) { return vreinterpretq_f32_s32(i); }
  static I isplat(int32_t i) { return vdupq_n_s32(i); }
  static I isub(I a, I b) { return vsubq_s32(a, b); }
  static I iadd(I a, I b) { return vaddq_s32(a, b); }
  template <int s> static I srai(I a) { return vshrq_n_s32(a, s); }
  template <int s> static I slli(I a) { return vshlq_n_s32(a, s); }
  static F scale(F p, F, F t) { return scale_by_two_factors<NeonOps>(p, t); }
  static F nonnegative_bits(F t) { return vreinterpretq_f32_s32(vcvtq_s32_f32(vmaxq_f32(t, vdupq_n_f32(0.0f)))); }
  static F keep_above(F a, F t) { return vreinterpretq_f32_u32(vandq_u32(vcgtq_f32(a, t), vreinterpretq_u32_f32(a))); }
  struct MaxTrack {  // Note [Argmax with upper sums]: fmax and fmaxv carry a NaN through
    float32x4_t m;
    bool seen_nan = false;
    void reset() { m = vdupq_n_f32(-std::numeric_limits<float>::infinity()); }
    void add(float32x4_t x) { m = vmaxq_f32(x, m); }
    float block_max() {
      const float b = vmaxvq_f32(m);
      seen_nan |= b != b;
      return b;
    }
    bool exceeds(float best) { return block_max() > best; }  // the NaN check is block_max's
    bool nan() const { return seen_nan; }
  };
};

// The weights as a source of the mass driver: computed, stored and summed in one pass.
struct WeightValues : WeightTail {
  float32x4_t vt, vm;
  void add16(int64_t v, NeonLanes* lanes) const {
    float32x4x4_t e;
    for (int i = 0; i < 4; ++i)
      e.val[i] = exp_nonpositive<NeonOps>(vsubq_f32(vdivq_f32(vld1q_f32(x + v + 4 * i), vt), vm));
    vst1q_f32_x4(w + v, e);
    lanes[0].add(e);
  }
};

void f32_row_weights__neon(const float* x, int64_t n, float temperature, float z_max, float* w,
                           double* block_mass, double* mass) {
  WeightValues values{{x, w, temperature, z_max}, vdupq_n_f32(temperature), vdupq_n_f32(z_max)};
  *mass = blocked_mass<NeonLanes>(values, n, block_mass);
}

void f32_row_weight_sums__neon(const float* x, int64_t n, float temperature, float z_max, float* w,
                               double* block_sum) {
  if (w == nullptr) approx_weight_sums<NeonOps, false>(x, n, temperature, z_max, w, block_sum);
  else approx_weight_sums<NeonOps, true>(x, n, temperature, z_max, w, block_sum);
}

void f32_row_upper_weight_sums__neon(const float* x, int64_t n, float c1, float c0, double* block_sum) {
  upper_weight_sums<NeonOps>(x, n, c1, c0, block_sum);
}

bool f32_row_argmax_upper_weight_sums__neon(const float* x, int64_t n, float c1, float c0, int64_t* index,
                                            double* block_sum) {
  return argmax_upper_weight_sums<NeonOps>(x, n, c1, c0, index, block_sum);
}

void f32_row_upper_weight_sums_above__neon(const float* x, int64_t n, float c1, float c0, float tau,
                                           double* block_sum, double* above_sum) {
  upper_weight_sums_above<NeonOps>(x, n, c1, c0, tau, block_sum, above_sum);
}

// r(v) = w(v) >= t ? w(v) : +0.0 (row 0, stored unless r is null) and the w(v) > t (row 1).
template <bool kStore>
struct KeepValues : KeepTail<kStore> {
  using KeepTail<kStore>::w;
  using KeepTail<kStore>::r;
  float32x4_t vt;
  KeepValues(const float* w_, float* r_, float t_) : KeepTail<kStore>{w_, r_, t_}, vt(vdupq_n_f32(t_)) {}
  void add16(int64_t v, NeonLanes* lanes) {
    const float32x4x4_t x = vld1q_f32_x4(w + v);
    float32x4x4_t kept, above;
    for (int i = 0; i < 4; ++i) {
      const uint32x4_t bits = vreinterpretq_u32_f32(x.val[i]);
      kept.val[i] = vreinterpretq_f32_u32(vandq_u32(bits, vcgeq_f32(x.val[i], vt)));
      above.val[i] = vreinterpretq_f32_u32(vandq_u32(bits, vcgtq_f32(x.val[i], vt)));
    }
    if constexpr (kStore) vst1q_f32_x4(r + v, kept);
    lanes[0].add(kept);
    lanes[1].add(above);
  }
};

void f32_keep_at_least__neon(const float* w, int64_t n, float t, float* r, double* r_blocks,
                             double* r_mass, double* above_blocks, double* above_mass) {
  blocked_keep_at_least<NeonLanes, KeepValues>(w, n, t, r, r_blocks, r_mass, above_blocks, above_mass);
}

// Note [Mass bounds]: four float32 accumulators of 4 lanes; the smallest value (vminq
// keeps a NaN) vouches for no value below +0.0 and no NaN, the finite sum for no infinity.
bool f32_row_sum_f32__neon(const float* row, int64_t n, float* sum) {
  float32x4_t s0 = vdupq_n_f32(0.0f), s1 = s0, s2 = s0, s3 = s0, smallest = s0;
  int64_t v = 0;
  for (; v + 16 <= n; v += 16) {
    const float32x4x4_t x = vld1q_f32_x4(row + v);
    smallest = vminq_f32(smallest, vminq_f32(vminq_f32(x.val[0], x.val[1]), vminq_f32(x.val[2], x.val[3])));
    s0 = vaddq_f32(s0, x.val[0]);
    s1 = vaddq_f32(s1, x.val[1]);
    s2 = vaddq_f32(s2, x.val[2]);
    s3 = vaddq_f32(s3, x.val[3]);
  }
  if (!(vminvq_f32(smallest) >= 0.0f)) return false;
  float s = vaddvq_f32(vaddq_f32(vaddq_f32(s0, s1), vaddq_f32(s2, s3)));
  for (; v < n; ++v) {
    if (!(row[v] >= 0.0f)) return false;
    s += row[v];
  }
  *sum = s;
  return std::isfinite(s);
}

// Note [Half rows], eight at a time: fcvtl/fcvtl2 (armv8.0), and bfloat16 by shll/shll2
// (a shift by 16 into the top half).
void f16_widen__neon(const uint16_t* h, int64_t n, float* out) {
  int64_t v = 0;
  for (; v + 8 <= n; v += 8) {
    const uint16x8_t x = vld1q_u16(h + v);
    vst1q_f32(out + v, vcvt_f32_f16(vreinterpret_f16_u16(vget_low_u16(x))));
    vst1q_f32(out + v + 4, vcvt_high_f32_f16(vreinterpretq_f16_u16(x)));
  }
  for (; v < n; ++v) out[v] = f16_value(h[v]);
}

void bf16_widen__neon(const uint16_t* h, int64_t n, float* out) {
  int64_t v = 0;
  for (; v + 8 <= n; v += 8) {
    const uint16x8_t x = vld1q_u16(h + v);
    vst1q_f32(out + v, vreinterpretq_f32_u32(vshll_n_u16(vget_low_u16(x), 16)));
    vst1q_f32(out + v + 4, vreinterpretq_f32_u32(vshll_high_n_u16(x, 16)));
  }
  for (; v < n; ++v) out[v] = bf16_value(h[v]);
}

// Four at a time; a group with any value >= t is taken apart lane by lane.
int64_t f32_gather_at_least__neon(const float* w, int64_t n, float t, int64_t* index) {
  const float32x4_t vt = vdupq_n_f32(t);
  int64_t m = 0, v = 0;
  // Eight at a time, passed over with one test when neither four holds a hit; a four that
  // does is taken apart lane by lane.
  const auto take4 = [&](int64_t at) {
    for (int j = 0; j < 4; ++j)
      if (w[at + j] >= t) index[m++] = at + j;
  };
  for (; v + 8 <= n; v += 8) {
    const uint32x4_t h0 = vcgeq_f32(vld1q_f32(w + v), vt);
    const uint32x4_t h1 = vcgeq_f32(vld1q_f32(w + v + 4), vt);
    if (vmaxvq_u32(vorrq_u32(h0, h1)) == 0) continue;
    if (vmaxvq_u32(h0) != 0) take4(v);
    if (vmaxvq_u32(h1) != 0) take4(v + 4);
  }
  for (; v + 4 <= n; v += 4)
    if (vmaxvq_u32(vcgeq_f32(vld1q_f32(w + v), vt)) != 0) take4(v);
  return gather_at_least_from(w, v, n, t, index, m);
}

}  // namespace

const KernelTable* neon_kernels() {
  // No row_mass_pair: with eight 2-wide accumulators per row the NEON mass loop is not
  // latency bound, so reading a pair of rows side by side would gain nothing.
  static const KernelTable table{
      .name = "neon",
      .row_argmax = f32_row_argmax__neon,
      .row_mass = f32_row_mass__neon,
      .row_mass_pair = nullptr,
      .residual_mass = f32_residual_mass__neon,
      .row_weights = f32_row_weights__neon,
      .keep_at_least = f32_keep_at_least__neon,
      .gather_at_least = f32_gather_at_least__neon,
      .residual_store = f32_residual_store__neon,
      .row_sum_f32 = f32_row_sum_f32__neon,
      .widen_f16 = f16_widen__neon,
      .widen_bf16 = bf16_widen__neon,
      .row_block_sums = f32_row_block_sums__neon,
      .residual_block_sums = f32_residual_block_sums__neon,
      .row_mass_pair_guess = nullptr,
      .row_weight_sums = f32_row_weight_sums__neon,
      .pair_block_sums = f32_pair_block_sums__neon,
      .row_upper_weight_sums = f32_row_upper_weight_sums__neon,
      .row_upper_weight_sums_above = f32_row_upper_weight_sums_above__neon,
      .row_argmax_upper_weight_sums = f32_row_argmax_upper_weight_sums__neon,
  };
  return &table;
}

}  // namespace spec_verify

#else  // not aarch64

namespace spec_verify {
const KernelTable* neon_kernels() { return nullptr; }
}  // namespace spec_verify

#endif
