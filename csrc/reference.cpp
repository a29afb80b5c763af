// The scalar reference: the definition of every result. Each SIMD path must return exactly
// what these loops return, bit for bit. Always built; also the fallback on any CPU.
#include <cmath>
#include <limits>

#include "spec_verify.h"

namespace spec_verify {
namespace {

// Note [Canonical mass order], one block.
template <class Value>
double block_mass_in_lane_order(int64_t begin, int64_t len, Value value) {
  double lane[kLanes] = {};
  const int64_t body = len - len % kLanes;
  for (int64_t g = 0; g < body; g += kLanes) {
    for (int64_t j = 0; j < kLanes; ++j) lane[j] += static_cast<double>(value(begin + g + j));
  }
  for (int64_t j = 0; j < 8; ++j) lane[j] += lane[j + 8];
  for (int64_t j = 0; j < 4; ++j) lane[j] += lane[j + 4];
  for (int64_t j = 0; j < 2; ++j) lane[j] += lane[j + 2];
  double sum = lane[0] + lane[1];
  for (int64_t v = body; v < len; ++v) sum += static_cast<double>(value(begin + v));
  return sum;
}

template <class Value>
double blocked_mass(int64_t n, double* block_mass, Value value) {
  double total = 0.0;
  for (int64_t b = 0, begin = 0; begin < n; ++b, begin += kMassBlock) {
    const int64_t len = n - begin < kMassBlock ? n - begin : kMassBlock;
    block_mass[b] = block_mass_in_lane_order(begin, len, value);
    total += block_mass[b];
  }
  return total;
}

bool f32_argmax__scalar(const float* row, int64_t n, int64_t* index) {
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

bool f32_mass__scalar(const float* row, int64_t n, double* block_mass, double* mass) {
  bool ok = true;
  for (int64_t v = 0; v < n; ++v) {
    const float x = row[v];
    ok &= x >= 0.0f && x <= std::numeric_limits<float>::max();
  }
  if (!ok) return false;
  *mass = blocked_mass(n, block_mass, [row](int64_t v) { return row[v]; });
  return true;
}

bool f32_mass_pair__scalar(const float* p, const float* q, int64_t n, double* p_blocks,
                           double* q_blocks, double* p_mass, double* q_mass) {
  return f32_mass__scalar(p, n, p_blocks, p_mass) && f32_mass__scalar(q, n, q_blocks, q_mass);
}

void f32_residual_mass__scalar(const float* p, const float* q, float a, float b, int64_t n,
                               double* block_mass, double* mass) {
  *mass = blocked_mass(n, block_mass,
                       [=](int64_t v) { return residual_value(p[v], q[v], a, b); });
}

}  // namespace

const KernelTable& scalar_kernels() {
  static const KernelTable table{"scalar", f32_argmax__scalar, f32_mass__scalar,
                                 f32_mass_pair__scalar, f32_residual_mass__scalar};
  return table;
}

}  // namespace spec_verify
