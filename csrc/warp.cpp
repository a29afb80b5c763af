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
  std::vector<double> above_blocks, unused_blocks;
  std::vector<uint32_t> keys, select;
  std::vector<int64_t> candidates, kept_index;
  std::vector<float> pool;
  std::vector<size_t> group_start;
  std::vector<double> bucket_mass;
};

// top_p's candidate buckets: a positive weight <= 1 by its exponent and top 6 mantissa
// bits, so the bucket order is the value order; counted from the floor's bucket.
constexpr size_t kSortDirectly = 32;
size_t bucket(float x) { return std::bit_cast<uint32_t>(x) >> 17; }
Scratch& scratch(int64_t n) {
  thread_local Scratch s;
  if (s.above_blocks.size() < static_cast<size_t>(num_blocks(n))) {
    s.above_blocks.resize(num_blocks(n));
    s.unused_blocks.resize(num_blocks(n));
  }
  if (s.candidates.size() < static_cast<size_t>(n)) s.candidates.resize(n);
  return s;
}

// Note [Sparse masses]
// A canonical mass (Note [Canonical mass order]) of a row that is +0.0 but at a few indices
// needs only those: adding +0.0 to a float64 sum of values >= +0.0 leaves it unchanged, so
// lane j of a block is the sum of its nonzero values at indices = j mod 16, in index order,
// from +0.0; the fold, the block's tail and the sum of the block masses likewise. A block
// body with at most two nonzero values sums to their one rounded sum whatever the order.
// The masses below follow the order value by value over the candidates only, and so give
// the bits keep_at_least gives over the whole row, on every path.
struct SparseBlock {
  double l[kLanes];
  int64_t count = 0;  // values added (some may be +0.0)
  double first = 0.0, second = 0.0;
  void add(int64_t v, double x) {
    if (count == 2) {  // from the third on, in lanes
      for (double& lane : l) lane = 0.0;
      l[lane_of(v_first)] = first;
      l[lane_of(v_second)] += second;
    }
    if (count < 2) {
      (count == 0 ? first : second) = x;
      (count == 0 ? v_first : v_second) = v;
    } else {
      l[lane_of(v)] += x;
    }
    ++count;
  }
  double sum() {
    if (count <= 2) return first + second;
    for (int j = 0; j < 8; ++j) l[j] += l[j + 8];
    for (int j = 0; j < 4; ++j) l[j] += l[j + 4];
    for (int j = 0; j < 2; ++j) l[j] += l[j + 2];
    return l[0] + l[1];
  }

 private:
  int64_t v_first = 0, v_second = 0;
  static int lane_of(int64_t v) { return static_cast<int>(v & (kLanes - 1)); }
};

// Canonical masses of the w(v) >= t (*at_least, block masses into at_least_blocks unless
// null, which the caller has set to +0.0) and of the w(v) > t (*above unless null), others
// +0.0, from the candidates: ascending indices holding every v with w(v) >= t (others add
// +0.0, so whether a candidate is kept costs no branch).
void sparse_masses(const float* w, int64_t n, const int64_t* index, size_t m, float t,
                   double* at_least_blocks, double* at_least, double* above) {
  double ge_total = 0.0, gt_total = 0.0;
  size_t i = 0;
  while (i < m) {
    const int64_t b = index[i] / kMassBlock;
    const int64_t begin = b * kMassBlock;
    const int64_t end = std::min(n, begin + kMassBlock);
    const int64_t body_end = end - (end - begin) % kLanes;
    SparseBlock ge, gt;
    for (; i < m && index[i] < body_end; ++i) {
      const float x = w[index[i]];
      ge.add(index[i], x >= t ? x : 0.0f);
      if (above != nullptr) gt.add(index[i], x > t ? x : 0.0f);
    }
    double ge_sum = ge.sum(), gt_sum = gt.sum();
    for (; i < m && index[i] < end; ++i) {
      const float x = w[index[i]];
      ge_sum += x >= t ? x : 0.0f;
      gt_sum += x > t ? x : 0.0f;
    }
    if (at_least_blocks != nullptr) at_least_blocks[b] = ge_sum;
    ge_total += ge_sum;
    gt_total += gt_sum;
  }
  *at_least = ge_total;
  if (above != nullptr) *above = gt_total;
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
// that every weight >= c is kept (a tie group whole). Masses are canonical (Note [Sparse
// masses]: over the candidates, the same bits as keep_at_least over the row), so the
// cutoff is the same on every path: the search only proposes, exact masses decide. The
// candidates (every v with w(v) >= the cutoff, ascending) are left in s.candidates[0..*m),
// and the block masses and mass of the w >= cutoff (others +0.0) in blocks and *kept.
float top_p_cutoff(const KernelTable& kt, float* w, int64_t n, double target, size_t* m, double* blocks,
                   double* kept) {
  Scratch& s = scratch(n);
  std::vector<int64_t>& index = s.candidates;
  double at_least = 0.0, above = 0.0;
  // 1. A floor tau with mass(w >= tau) >= target: then every weight below tau has at least
  //    that mass strictly above it (a canonical sum of non-negative values only grows with
  //    the set summed), so it is not kept. Lower tau 2^-4 at a time until it holds (a
  //    coarser step overshoots: 2^-24 gathers most of a Gaussian row). The
  //    candidates are the weights >= tau (there are few unless the row is flat). Their
  //    sum in any order is within m 2^-53 of the exact sum, relatively, and so is the
  //    canonical one: only a sum within 2^-50 m of the target asks for the canonical sum.
  float tau = 0x1p-12f, floor = tau;
  for (;;) {
    floor = tau > 0.0f ? tau : std::numeric_limits<float>::denorm_min();
    *m = static_cast<size_t>(kt.gather_at_least(w, n, floor, index.data()));
    double sums[4] = {0.0, 0.0, 0.0, 0.0};
    size_t i = 0;
    for (; i + 4 <= *m; i += 4)
      for (int j = 0; j < 4; ++j) sums[j] += static_cast<double>(w[index[i + j]]);
    for (; i < *m; ++i) sums[0] += static_cast<double>(w[index[i]]);
    const double sum = (sums[0] + sums[1]) + (sums[2] + sums[3]);
    const double margin = static_cast<double>(*m) * 0x1p-50;
    bool enough = sum * (1.0 - margin) >= target;
    if (!enough && !(sum * (1.0 + margin) < target)) {
      sparse_masses(w, n, index.data(), *m, floor, nullptr, &at_least, nullptr);
      enough = at_least >= target;
    }
    if (enough || tau == 0.0f) break;
    tau = tau >= 0x1p-144f ? tau * 0x1p-4f : 0.0f;
  }
  const std::span<const int64_t> c(index.data(), *m);
  // 2. With more than a few candidates, narrow them first: bucket them by their top bits
  //    (the bucket order is the value order), and keep the bucket where the mass running
  //    down from the top reaches the target. Its first tie group has less than the target
  //    above it, so the last kept group is in it; `greater` starts at the mass above it.
  std::vector<float>& pool = s.pool;
  double greater = 0.0;
  bool narrowed = false;
  if (c.size() > kSortDirectly) {
    // Two levels, so that the walk down is short: the buckets of each exponent (64 of them)
    // summed together, walked first, then the buckets of the exponent where the target is
    // reached. (Any bucket is only a proposal: the confirmation below decides.)
    std::vector<double>& mass = s.bucket_mass;
    const size_t base = bucket(floor);  // every candidate is >= floor
    const size_t coarse_base = base >> 6;
    mass.assign(bucket(1.0f) - base + 1, 0.0);
    for (const int64_t v : c) mass[bucket(w[v]) - base] += static_cast<double>(w[v]);
    // Each exponent's 64 buckets summed (four chains: any order will do for a proposal).
    double coarse[256] = {};
    for (size_t e = coarse_base; e <= bucket(1.0f) >> 6; ++e) {
      const size_t lo = std::max(e << 6, base) - base, hi = std::min((e + 1) << 6, bucket(1.0f) + 1) - base;
      double part[4] = {0.0, 0.0, 0.0, 0.0};
      size_t b = lo;
      for (; b + 4 <= hi; b += 4)
        for (int j = 0; j < 4; ++j) part[j] += mass[b + j];
      for (; b < hi; ++b) part[0] += mass[b];
      coarse[e - coarse_base] = (part[0] + part[1]) + (part[2] + part[3]);
    }
    size_t e = (bucket(1.0f) >> 6) - coarse_base + 1;
    while (e > 0 && greater + coarse[e - 1] < target) greater += coarse[--e];
    size_t b = 0;
    if (e > 0) {
      --e;
      const size_t lo = (e + coarse_base) << 6 > base ? ((e + coarse_base) << 6) - base : 0;
      b = std::min(mass.size(), ((e + coarse_base + 1) << 6) - base);
      while (b > lo && greater + mass[b - 1] < target) greater += mass[--b];
      if (b == lo) b = 0;  // not reached in this exponent (rounding): no narrowing
    }
    if (b > 0) {
      --b;
      pool.clear();
      for (const int64_t v : c)
        if (bucket(w[v]) - base == b) pool.push_back(w[v]);
      narrowed = true;
    } else {
      greater = 0.0;
    }
  }
  const auto all_candidates = [&] {
    pool.clear();
    for (const int64_t v : c) pool.push_back(w[v]);
  };
  if (!narrowed) all_candidates();
  for (;;) {
    std::sort(pool.begin(), pool.end(), std::greater<float>());
    // 3. Propose: walk the tie groups from the top with a running float64 sum (not the
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
      std::fill(blocks, blocks + num_blocks(n), 0.0);
      // Over the candidates >= cut alone (still ascending, still every v with w(v) >= cut):
      // the kept ones, often a fraction of the candidates.
      std::vector<int64_t>& kept_index = s.kept_index;
      kept_index.resize(c.size());
      size_t n_kept = 0;
      for (const int64_t v : c) {  // without a branch: about half are kept, unpredictably
        kept_index[n_kept] = v;
        n_kept += w[v] >= cut;
      }
      sparse_masses(w, n, kept_index.data(), n_kept, cut, blocks, &at_least, &above);
      if (above >= target) {
        if (j == 0) break;  // the cutoff is above this bucket (rounding): search them all
        --j;
      } else if (at_least < target) {
        if (j + 1 == group_start.size()) break;  // below this bucket: search them all
        ++j;
      } else {  // mass(w > cut) < target <= mass(w >= cut)
        *kept = at_least;
        return cut;
      }
    }
    // Only a narrowed search can get here (unnarrowed, the top group has nothing above it
    // and the last one has at least the target at or above it).
    all_candidates();
    greater = 0.0;
  }
}

}  // namespace

Outcome warp_row_lazy(const KernelTable& kt, const float* x, int64_t n, const WarpParams& params,
                      WarpedRow* out) {
  out->floor = 0.0f;
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
  const bool top_k = params.top_k > 0 && params.top_k < n;
  float t = 0.0f;
  size_t m = 0;  // candidates: every v with w(v) >= t when m > 0
  double cut_mass = 0.0;  // with top-p, the mass of the w >= t, its block masses in blocks
  Scratch& s = scratch(n);
  kt.row_weights(x, n, params.temperature, z_max, w, out->blocks, &out->mass);
  if (!top_k && params.top_p >= 1.0 && params.min_p <= 0.0) return Outcome{};  // r = w
  if (top_k) {
    apply_top_k(x, n, params, w);
    kt.row_mass(w, n, out->blocks, &out->mass);
  }
  // The final threshold on the weights: top-p's cutoff, then min-p's.
  if (params.top_p < 1.0)
    t = top_p_cutoff(kt, w, n, params.top_p * out->mass, &m, s.unused_blocks.data(), &cut_mass);
  const float cut = t;
  if (params.min_p > 0.0) t = std::max(t, min_p_threshold(params.min_p));
  if (!(t > 0.0f)) return Outcome{};  // r = w (after top-k): every weight is >= +0.0
  // r(v) = w(v) >= t ? w(v) : +0.0, its masses over the candidates (Note [Sparse masses]);
  // the values below t stay in `values`, to be read as +0.0.
  if (t == cut) {  // top-p's: its masses are r's
    std::copy(s.unused_blocks.data(), s.unused_blocks.data() + num_blocks(n), out->blocks);
    out->mass = cut_mass;
  } else {
    if (m == 0) m = static_cast<size_t>(kt.gather_at_least(w, n, t, s.candidates.data()));
    std::fill(out->blocks, out->blocks + num_blocks(n), 0.0);
    sparse_masses(w, n, s.candidates.data(), m, t, out->blocks, &out->mass, nullptr);
  }
  out->floor = t;
  return Outcome{};
}

float min_p_threshold(double min_p) {
  // w(v) >= min_p as reals: the smallest float >= min_p.
  float mp = static_cast<float>(min_p);
  if (static_cast<double>(mp) < min_p) mp = std::nextafter(mp, 2.0f);
  return mp;
}

void materialize(const KernelTable& kt, float* values, int64_t n, float floor) {
  if (!(floor > 0.0f)) return;
  Scratch& s = scratch(n);
  double mass = 0.0, above = 0.0;
  kt.keep_at_least(values, n, floor, values, s.unused_blocks.data(), &mass, s.above_blocks.data(), &above);
}

Outcome warp_row(const KernelTable& kt, const float* x, int64_t n, const WarpParams& params,
                 WarpedRow* out) {
  const Outcome result = warp_row_lazy(kt, x, n, params, out);
  if (result.error == InputError::kNone) materialize(kt, out->values, n, out->floor);
  out->floor = 0.0f;
  return result;
}

}  // namespace spec_verify
