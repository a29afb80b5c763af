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

void f16_widen__scalar(const uint16_t* h, int64_t n, float* out) {
  for (int64_t v = 0; v < n; ++v) out[v] = f16_value(h[v]);
}

void bf16_widen__scalar(const uint16_t* h, int64_t n, float* out) {
  for (int64_t v = 0; v < n; ++v) out[v] = bf16_value(h[v]);
}

}  // namespace

const KernelTable& scalar_kernels() {
  static const KernelTable table{
      .name = "scalar",
      .row_argmax = f32_row_argmax__scalar,
      .row_mass = f32_row_mass__scalar,
      .residual_mass = f32_residual_mass__scalar,
      .row_weights = f32_row_weights__scalar,
      .keep_at_least = f32_keep_at_least__scalar,
      .gather_at_least = f32_gather_at_least__scalar,
      .residual_store = f32_residual_store__scalar,
      .widen_f16 = f16_widen__scalar,
      .widen_bf16 = bf16_widen__scalar,
  };
  return table;
}

}  // namespace spec_verify
