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
  static I bits(F x) { return vreinterpretq_s32_f32(x); }
  static F from_bits(I i) { return vreinterpretq_f32_s32(i); }
  static I isplat(int32_t i) { return vdupq_n_s32(i); }
  static I isub(I a, I b) { return vsubq_s32(a, b); }
  static I iadd(I a, I b) { return vaddq_s32(a, b); }
  template <int s> static I srai(I a) { return vshrq_n_s32(a, s); }
  template <int s> static I slli(I a) { return vshlq_n_s32(a, s); }
  static F scale(F p, F, F t) { return scale_by_two_factors<NeonOps>(p, t); }
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
  static const KernelTable table{
      .name = "neon",
      .row_argmax = f32_row_argmax__neon,
      .row_mass = f32_row_mass__neon,
      .residual_mass = f32_residual_mass__neon,
      .row_weights = f32_row_weights__neon,
      .keep_at_least = f32_keep_at_least__neon,
      .gather_at_least = f32_gather_at_least__neon,
      .residual_store = f32_residual_store__neon,
      .widen_f16 = f16_widen__neon,
      .widen_bf16 = bf16_widen__neon,
  };
  return &table;
}

}  // namespace spec_verify

#else  // not aarch64

namespace spec_verify {
const KernelTable* neon_kernels() { return nullptr; }
}  // namespace spec_verify

#endif
