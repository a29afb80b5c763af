// Note [Warping] on raw rows: validation, the thresholds of top-k, top-p and min-p, and
// the order of the passes. Scalar code shared by every instruction set; the passes over a
// whole row go through the KernelTable (row_argmax, row_weights, row_mass, keep_at_least).
#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>
#include <functional>
#include <limits>
#include <span>
#include <vector>

#include "spec_verify.h"

namespace spec_verify {
namespace {

struct Scratch {
  std::vector<double> above_blocks;
  std::vector<uint32_t> keys, select;
  std::vector<float> candidates, pool;
  std::vector<size_t> group_start;
  std::vector<double> bucket_mass;
};

// top_p's candidate buckets: a positive weight <= 1 by its exponent and top 6 mantissa
// bits, so the bucket order is the value order.
constexpr size_t kSortDirectly = 256;
constexpr size_t kBuckets = (0x3f800000u >> 17) + 1;
size_t bucket(float x) { return std::bit_cast<uint32_t>(x) >> 17; }
Scratch& scratch(int64_t n) {
  thread_local Scratch s;
  if (s.above_blocks.size() < static_cast<size_t>(num_blocks(n))) s.above_blocks.resize(num_blocks(n));
  return s;
}

Outcome bad_value(InputError kind, int64_t col, float value) {
  Outcome out;
  out.error = kind;
  out.col = col;
  out.value = value;
  return out;
}

// A float's bits mapped so that unsigned order is the float order (-0.0 as +0.0).
uint32_t order_key(float z) {
  const uint32_t b = std::bit_cast<uint32_t>(z == 0.0f ? 0.0f : z);
  return (b & 0x80000000u) ? ~b : (b | 0x80000000u);
}

// top_k: zero the weight of every v with top_k or more z strictly greater than z(v), i.e.
// z(v) below the top_k-th largest z (counted with ties). A selection, not a sort.
void apply_top_k(const float* x, int64_t n, const WarpParams& params, float* w) {
  std::vector<uint32_t>& keys = scratch(n).keys;
  keys.resize(n);
  for (int64_t v = 0; v < n; ++v) keys[v] = order_key(x[v] / params.temperature);
  std::vector<uint32_t>& select = scratch(n).select;
  select.assign(keys.begin(), keys.end());
  const auto kth = select.begin() + (params.top_k - 1);
  std::nth_element(select.begin(), kth, select.end(), std::greater<uint32_t>());
  const uint32_t cutoff = *kth;
  for (int64_t v = 0; v < n; ++v) {
    if (keys[v] < cutoff) w[v] = 0.0f;
  }
}

// top_p: the smallest weight c such that the mass of the weights > c is < target, so
// that every weight >= c is kept (a tie group whole). Masses are canonical (keep_at_least),
// so the cutoff is the same on every path: the search only proposes, exact masses decide.
float top_p_cutoff(const KernelTable& kt, const float* w, int64_t n, double target,
                   double* blocks) {
  Scratch& s = scratch(n);
  double at_least = 0.0, above = 0.0;
  // 1. A floor tau with mass(w >= tau) >= target: then every weight below tau has at least
  //    that mass strictly above it (a canonical sum of non-negative values only grows with
  //    the set summed), so it is not kept. Lower tau 2^-12 at a time until it holds.
  float tau = 0x1p-12f;
  for (;;) {
    kt.keep_at_least(w, n, tau, nullptr, blocks, &at_least, s.above_blocks.data(), &above);
    if (at_least >= target || tau == 0.0f) break;
    tau = tau >= 0x1p-136f ? tau * 0x1p-12f : 0.0f;
  }
  // 2. The candidates: the weights >= tau (there are few unless the row is flat).
  std::vector<float>& buffer = s.candidates;
  if (buffer.size() < static_cast<size_t>(n)) buffer.resize(n);
  const float floor = tau > 0.0f ? tau : std::numeric_limits<float>::denorm_min();
  const size_t m = static_cast<size_t>(kt.gather_at_least(w, n, floor, buffer.data()));
  const std::span<const float> c(buffer.data(), m);
  // 3. With more than a few candidates, narrow them first: bucket them by their top bits
  //    (the bucket order is the value order), and keep the bucket where the mass running
  //    down from the top reaches the target. Its first tie group has less than the target
  //    above it, so the last kept group is in it; `greater` starts at the mass above it.
  std::vector<float>& pool = s.pool;
  double greater = 0.0;
  bool narrowed = false;
  if (c.size() > kSortDirectly) {
    std::vector<double>& mass = s.bucket_mass;
    mass.assign(kBuckets, 0.0);
    for (const float x : c) mass[bucket(x)] += static_cast<double>(x);
    size_t b = kBuckets;
    while (b > 0 && greater + mass[b - 1] < target) greater += mass[--b];
    if (b > 0) {
      --b;
      pool.clear();
      for (const float x : c)
        if (bucket(x) == b) pool.push_back(x);
      narrowed = true;
    } else {
      greater = 0.0;
    }
  }
  if (!narrowed) pool.assign(c.begin(), c.end());
  for (;;) {
    std::sort(pool.begin(), pool.end(), std::greater<float>());
    // 4. Propose: walk the tie groups from the top with a running float64 sum (not the
    //    canonical order, but close to it) while the mass above the group stays below the
    //    target. Then confirm with canonical masses, moving a group up or down until
    //    mass(w > cut) < target (cut is kept) and mass(w >= cut) >= target (the next weight
    //    down is not); both hold for some group, and the walk only moves toward it.
    std::vector<size_t>& group_start = s.group_start;
    group_start.clear();
    size_t proposal = 0;
    for (size_t i = 0; i < pool.size();) {
      size_t e = i;
      double sum = 0.0;
      while (e < pool.size() && pool[e] == pool[i]) sum += static_cast<double>(pool[e++]);
      if (greater < target) proposal = group_start.size();
      group_start.push_back(i);
      greater += sum;
      i = e;
    }
    if (group_start.empty()) return 0.0f;  // no positive weight: warp_row keeps the top one
    size_t j = proposal;
    for (;;) {
      const float cut = pool[group_start[j]];
      kt.keep_at_least(w, n, cut, nullptr, blocks, &at_least, s.above_blocks.data(), &above);
      if (above >= target) {
        if (j == 0) break;  // the cutoff is above this bucket (rounding): search them all
        --j;
      } else if (at_least < target) {
        if (j + 1 == group_start.size()) break;  // below this bucket: search them all
        ++j;
      } else {
        return cut;
      }
    }
    // Only a narrowed search can get here (unnarrowed, the top group has nothing above it
    // and the last one has at least the target at or above it).
    pool.assign(c.begin(), c.end());
    greater = 0.0;
  }
}

}  // namespace

Outcome warp_row(const KernelTable& kt, const float* x, int64_t n, const WarpParams& params,
                 WarpedRow* out) {
  int64_t top = 0;
  if (!kt.row_argmax(x, n, &top)) {
    for (int64_t v = 0; v < n; ++v)
      if (std::isnan(x[v])) return bad_value(InputError::kNaN, v, x[v]);
  }
  const float x_max = x[top];
  if (x_max == std::numeric_limits<float>::infinity()) return bad_value(InputError::kInfinite, top, x_max);
  if (x_max == -std::numeric_limits<float>::infinity()) return bad_value(InputError::kNoFinite, -1, x_max);
  const float z_max = x_max / params.temperature;
  if (std::isinf(z_max)) return bad_value(InputError::kOverflow, top, x_max);

  float* w = out->values;
  kt.row_weights(x, n, params.temperature, z_max, w, out->blocks, &out->mass);
  const bool top_k = params.top_k > 0 && params.top_k < n;
  if (!top_k && params.top_p >= 1.0 && params.min_p <= 0.0) return Outcome{};  // r = w
  if (top_k) apply_top_k(x, n, params, w);

  // The final threshold on the weights: top-p's cutoff, then min-p's.
  float t = 0.0f;
  if (params.top_p < 1.0) {
    double kept = out->mass;
    if (top_k) kt.row_mass(w, n, out->blocks, &kept);
    t = top_p_cutoff(kt, w, n, params.top_p * kept, out->blocks);
  }
  if (params.min_p > 0.0) {
    // w(v) >= min_p as reals: the smallest float >= min_p.
    float m = static_cast<float>(params.min_p);
    if (static_cast<double>(m) < params.min_p) m = std::nextafter(m, 2.0f);
    t = std::max(t, m);
  }
  // r overwrites w in place, with its block masses and mass.
  double above = 0.0;
  kt.keep_at_least(w, n, t, w, out->blocks, &out->mass, scratch(n).above_blocks.data(), &above);
  return Outcome{};
}

}  // namespace spec_verify
