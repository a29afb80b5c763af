// The scalar path: the reference that defines every result. Each SIMD path must return
// exactly what these loops return, bit for bit. Always built; also the fallback on any CPU.
#include <cmath>
#include <limits>

#include "blocked_mass.h"
#include "exp_f32.h"
#include "half.h"
#include "spec_verify.h"

namespace spec_verify {
namespace {

// Note [Canonical mass order], lane by lane.
struct ScalarLanes {
  static constexpr int kBlocksAtOnce = 1;
  double l[kLanes];
  void clear() {
    for (double& x : l) x = 0.0;
  }
  double fold() {
    for (int j = 0; j < 8; ++j) l[j] += l[j + 8];
    for (int j = 0; j < 4; ++j) l[j] += l[j + 4];
    for (int j = 0; j < 2; ++j) l[j] += l[j + 2];
    return l[0] + l[1];
  }
};

// A source of one row whose values value(v) gives.
template <class Value>
struct ScalarValues {
  static constexpr int kRows = 1;
  Value value;
  void add16(int64_t v, ScalarLanes* lanes) {
    for (int j = 0; j < kLanes; ++j) lanes[0].l[j] += static_cast<double>(value(v + j));
  }
  float at(int64_t v, int) { return value(v); }
};

template <class Value>
double scalar_mass(int64_t n, double* block_mass, Value value) {
  ScalarValues<Value> source{value};
  return blocked_mass<ScalarLanes>(source, n, block_mass);
}

bool f32_row_argmax__scalar(const float* row, int64_t n, int64_t* index) {
  int64_t best = 0;
  float best_value = row[0];
  bool has_nan = std::isnan(best_value);
  for (int64_t v = 1; v < n; ++v) {
    const float x = row[v];
    has_nan |= std::isnan(x);
    if (x > best_value) {
      best_value = x;
      best = v;
    }
  }
  *index = best;
  return !has_nan;
}

bool f32_row_mass__scalar(const float* row, int64_t n, double* block_mass, double* mass) {
  if (!valid_mass_row(row, n)) return false;
  *mass = scalar_mass(n, block_mass, [row](int64_t v) { return row[v]; });
  return true;
}

void f32_residual_mass__scalar(const float* p, const float* q, float a, float b, int64_t n,
                               double* block_mass, double* mass) {
  *mass = scalar_mass(n, block_mass, [=](int64_t v) { return residual_value(p[v], q[v], a, b); });
}

void f32_residual_store__scalar(const float* p, const float* q, float a, float b, int64_t n, float* out,
                                double* block_mass, double* mass) {
  *mass = scalar_mass(n, block_mass, [=](int64_t v) { return out[v] = residual_value(p[v], q[v], a, b); });
}

void f32_row_weights__scalar(const float* x, int64_t n, float temperature, float z_max, float* w,
                             double* block_mass, double* mass) {
  *mass = scalar_mass(n, block_mass, [=](int64_t v) { return w[v] = weight(x[v], temperature, z_max); });
}

void f32_row_weight_sums__scalar(const float* x, int64_t n, float temperature, float z_max, float* w,
                                 double* block_sum) {
  if (w == nullptr) approx_weight_sums<ScalarOps, false>(x, n, temperature, z_max, w, block_sum);
  else approx_weight_sums<ScalarOps, true>(x, n, temperature, z_max, w, block_sum);
}

void f32_row_upper_weight_sums__scalar(const float* x, int64_t n, float c1, float c0, double* block_sum) {
  upper_weight_sums<ScalarOps>(x, n, c1, c0, block_sum);
}

bool f32_row_argmax_upper_weight_sums__scalar(const float* x, int64_t n, float c1, float c0, int64_t* index,
                                              double* block_sum) {
  return argmax_upper_weight_sums<ScalarOps>(x, n, c1, c0, index, block_sum);
}

void f32_row_upper_weight_sums_above__scalar(const float* x, int64_t n, float c1, float c0, float tau,
                                             double* block_sum, double* above_sum) {
  upper_weight_sums_above<ScalarOps>(x, n, c1, c0, tau, block_sum, above_sum);
}

// Note [Canonical mass order] lane by lane over KeepTail's values.
template <bool kStore>
struct KeepValues : KeepTail<kStore> {
  KeepValues(const float* w, float* r, float t) : KeepTail<kStore>{w, r, t} {}
  void add16(int64_t v, ScalarLanes* lanes) {
    for (int j = 0; j < kLanes; ++j) {
      lanes[0].l[j] += static_cast<double>(this->at(v + j, 0));
      lanes[1].l[j] += static_cast<double>(this->at(v + j, 1));
    }
  }
};

void f32_keep_at_least__scalar(const float* w, int64_t n, float t, float* r, double* r_blocks,
                               double* r_mass, double* above_blocks, double* above_mass) {
  blocked_keep_at_least<ScalarLanes, KeepValues>(w, n, t, r, r_blocks, r_mass, above_blocks, above_mass);
}

int64_t f32_gather_at_least__scalar(const float* w, int64_t n, float t, int64_t* index) {
  return gather_at_least_from(w, 0, n, t, index, 0);
}

bool f32_row_sum_f32__scalar(const float* row, int64_t n, float* sum) {
  float s = 0.0f;
  for (int64_t v = 0; v < n; ++v) {
    if (!(row[v] >= 0.0f)) return false;  // negative or NaN
    s += row[v];
  }
  *sum = s;
  return std::isfinite(s);  // an infinite value, or overflow
}

// Note [Bounded sampling]: the shared float32 block sums (blocked_mass.h).
struct RowF32 {
  const float* row;
  float f32(int64_t v) const { return row[v]; }
};

bool f32_row_block_sums__scalar(const float* row, int64_t n, double* block_sum) {
  for (int64_t v = 0; v < n; ++v) {
    if (!(row[v] >= 0.0f)) return false;  // negative or NaN; infinities make the sums infinite
  }
  RowF32 source{row};
  block_sums_f32_from(source, n, block_sum);
  return true;
}

struct ResidualF32 {
  const float* p;
  const float* q;
  float a, b;
  float f32(int64_t v) const { return residual_value(p[v], q[v], a, b); }
};

void f32_residual_block_sums__scalar(const float* p, const float* q, float a, float b, int64_t n,
                                     double* block_sum) {
  ResidualF32 source{p, q, a, b};
  block_sums_f32_from(source, n, block_sum);
}

void f16_widen__scalar(const uint16_t* h, int64_t n, float* out) {
  for (int64_t v = 0; v < n; ++v) out[v] = f16_value(h[v]);
}

void bf16_widen__scalar(const uint16_t* h, int64_t n, float* out) {
  for (int64_t v = 0; v < n; ++v) out[v] = bf16_value(h[v]);
}

// pair_block_sums (Note [Bounded rejection]) as its three one-row passes: the reference
// has no pass to save, but the instruction budgets count it beside NEON's.
bool f32_pair_block_sums__scalar(const float* p, const float* q, int64_t n, double* p_sum, double* q_sum,
                                 double* guess_sum) {
  if (!f32_row_block_sums__scalar(p, n, p_sum) || !f32_row_block_sums__scalar(q, n, q_sum)) return false;
  f32_residual_block_sums__scalar(p, q, 1.0f, 1.0f, n, guess_sum);
  return true;
}

}  // namespace

const KernelTable& scalar_kernels() {
  static const KernelTable table{
      .name = "scalar",
      .row_argmax = f32_row_argmax__scalar,
      .row_mass = f32_row_mass__scalar,
      .row_mass_pair = nullptr,
      .residual_mass = f32_residual_mass__scalar,
      .row_weights = f32_row_weights__scalar,
      .keep_at_least = f32_keep_at_least__scalar,
      .gather_at_least = f32_gather_at_least__scalar,
      .residual_store = f32_residual_store__scalar,
      .row_sum_f32 = f32_row_sum_f32__scalar,
      .widen_f16 = f16_widen__scalar,
      .widen_bf16 = bf16_widen__scalar,
      .row_block_sums = f32_row_block_sums__scalar,
      .residual_block_sums = f32_residual_block_sums__scalar,
      .row_mass_pair_guess = nullptr,
      .row_weight_sums = f32_row_weight_sums__scalar,
      .pair_block_sums = f32_pair_block_sums__scalar,
      .row_upper_weight_sums = f32_row_upper_weight_sums__scalar,
      .row_upper_weight_sums_above = f32_row_upper_weight_sums_above__scalar,
      .row_argmax_upper_weight_sums = f32_row_argmax_upper_weight_sums__scalar,
  };
  return table;
}

}  // namespace spec_verify
