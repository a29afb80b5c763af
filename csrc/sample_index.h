// Note [Blocked sampling]
// Drawing index v from an unnormalised row r with a uniform u: v is the smallest index whose
// running float64 mass exceeds threshold = u * total. The scan costs one pass (the block
// masses, already summed by the kernel that computed the total) plus one block:
// 1. Walk the block masses in order; the chosen block b is the first whose running sum
//    exceeds the threshold. The total is the same sequence of additions, so for u < 1 one
//    normally exists; if rounding leaves none, b is the last block with positive mass.
// 2. Walk block b in index order from the sum of the blocks before it, adding each value as
//    float64; return the first v with r(v) > 0 whose running sum exceeds the threshold.
//    The in-block sum rounds differently from the lane-wise block mass, so the threshold may
//    not be crossed: then return the last v in the block with r(v) > 0.
// The result always has r(v) > 0. Scalar code, shared by every instruction set.
#pragma once

#include <algorithm>
#include <cstdint>
#include <limits>

#include "spec_verify.h"

namespace spec_verify {

// Smallest index whose running mass exceeds threshold; value(v) must return exactly the
// floats the block masses were summed from.
template <class Value>
int64_t sample_index(const double* block_mass, int64_t n, double threshold, Value value) {
  const int64_t blocks = num_blocks(n);
  int64_t chosen = -1;
  double before = 0.0;  // mass of the blocks before the chosen one
  double running = 0.0;
  for (int64_t b = 0; b < blocks; ++b) {
    const double next = running + block_mass[b];
    if (next > threshold) {
      chosen = b;
      before = running;
      break;
    }
    running = next;
  }
  if (chosen < 0) {
    before = 0.0;
    for (int64_t b = 0; b < blocks; ++b) {
      if (block_mass[b] > 0.0) chosen = b;
    }
    for (int64_t b = 0; b < chosen; ++b) before += block_mass[b];
  }
  if (chosen < 0) return -1;  // no positive mass at all: callers never ask for that

  const int64_t begin = chosen * kMassBlock;
  const int64_t end = begin + kMassBlock < n ? begin + kMassBlock : n;
  int64_t last_positive = -1;
  double sum = before;
  for (int64_t v = begin; v < end; ++v) {
    const float x = value(v);
    if (x > 0.0f) {
      sum += static_cast<double>(x);
      if (sum > threshold) return v;
      last_positive = v;
    }
  }
  return last_positive;
}

}  // namespace spec_verify

namespace spec_verify {

// Note [Bounded sampling] (spec_verify.h): sample_index(B, n, u * T, value) from block sums
// F within kBlockSumBound of the exact block sums, T the canonical total of B. True with
// that index in *index when every comparison is certain; false otherwise (nothing decided).
// value(v) must return exactly the floats F and B were summed from (all >= 0); u in [0, 1).
//
// Margins. With E the exact sums: each canonical block mass is within 36 * 2^-53 of its E
// (at most 35 float64 roundings per value), and a running sum of j of them within j * 2^-53
// more, so every canonical running sum R_j (and T) is within eps_c = 2^-46 + nb * 2^-52 of
// the exact running sum; the running sums A_j of F (float64, in order) are within
// kBlockSumBound + nb * 2^-52 of it. Hence R_j = A_j (1 +- d), d = kBlockSumBound + 2^-40 +
// nb * 2^-49 (products of the factors and the rounding of the bounds themselves included),
// the threshold u * T (one more rounding) = u * A_last (1 +- d) (A_last, the total, summed in
// four interleaved parts by sum_in_fours: within the same bound), and the scan of the chosen
// block, adding at most 256 values to R_{b-1} in float64 (each rounding 2^-53), stays within
// A_{b-1} * d + s * 2^-43 of the same scan started from A_{b-1}. Sums of values >= 0 never
// underflow harmfully (a sum of floats below the normal range is exact).
// *total_out gets the sum of the F (0 exactly when every value is +0.0).
//
// block_err (optional): F[b] may also be off by up to block_err[b] (absolute, >= 0) from the
// exact sum of the values, beyond kBlockSumBound: the F were summed from other values
// (guessed factors). Running sums then carry the sum of those errors, taken 2^-20 larger to
// cover the relative factors applied to them.
// approximate (with block_err): value(v) returns not the exact values but the ones the F
// were summed from, each within its share of block_err of the exact one (the errors of a
// block's values sum to at most block_err[b]; Note [Bounded rejection]). The scan of the
// chosen block then carries that block's whole error as well, which covers every exact
// running sum between two checks (a value read as +0.0 may be a small positive one: the
// next check, at a positive value, still bounds the exact sum before it), and answers
// nothing where the exact scan would end on its last positive value (not known).
// d of the margins below: every canonical running sum over `blocks` blocks (and the total)
// is within d of the running sum of block sums within kBlockSumBound, relatively.
inline double block_sums_margin(int64_t blocks) {
  return kBlockSumBound + 0x1p-40 + static_cast<double>(blocks) * 0x1p-49;
}

// Note [Bounded warping]: the canonical mass of the weights whose approximate block sums are
// sums[0..num_blocks(n)) (each within kWeightSumBound F_b + kWeightSumFloor of its block's
// exact sum) lies in [*lo, *hi]; each block's error goes to err (optional).
inline void weight_mass_range(const double* sums, int64_t n, double* err, double* lo, double* hi) {
  const int64_t nb = num_blocks(n);
  double total = 0.0, total_err = 0.0;
  for (int64_t b = 0; b < nb; ++b) {
    const double e = sums[b] * kWeightSumBound + kWeightSumFloor;
    if (err != nullptr) err[b] = e;
    total += sums[b];
    total_err += e;
  }
  const double d = block_sums_margin(nb);
  total_err *= 1.0 + 0x1p-20;
  *lo = (total - total_err) * (1.0 - d);
  *hi = (total + total_err) * (1.0 + d);
}

// The sum of n float64 values >= 0 in four interleaved partial sums, added as
// (s0 + s1) + (s2 + s3): within (n - 1) 2^-53 of exact, relatively, as the sum in order is
// (Note [Bounded sampling]'s margins allow nb 2^-52), at a quarter of its latency chain.
// Only bounded draws use it; canonical masses keep Note [Canonical mass order].
inline double sum_in_fours(const double* x, int64_t n) {
  double s0 = 0.0, s1 = 0.0, s2 = 0.0, s3 = 0.0;
  int64_t i = 0;
  for (; i + 4 <= n; i += 4) {
    s0 += x[i];
    s1 += x[i + 1];
    s2 += x[i + 2];
    s3 += x[i + 3];
  }
  for (; i < n; ++i) s0 += x[i];
  return (s0 + s1) + (s2 + s3);
}

// The margin of a block's guessed residual sum g, the float32 sum of r'(v) = max(0, p(v) ga -
// q(v) gb) (Note [Residual in float32]) at guessed factors ga, gb, as a sum of r'(v) at the
// true factors a, b, where |a - ga| <= da, a <= a_hi, |b - gb| <= db, b <= b_hi, and the
// block's exact masses of p and q are at most pb and qb. Per value: each r' is within
// 2^-23 (a p + b q) of max(0, p a - q b) computed exactly (rounding p a, q b and their
// difference; 2^-149 more below the normal range), and that moves by at most
// |a - ga| p + |b - gb| q with the factors; then the guessed sum's own (kGuessSumBound).
// The same bound holds value by value, so a block's values are within it of their guesses
// in total (bounded_sample_index's `approximate`).
inline double guess_block_err(double pb, double qb, double g, double ga, double gb, double da, double db, double a_hi,
                       double b_hi) {
  constexpr double r = 0x1p-23 + 0x1p-40;
  return da * pb + db * qb + r * ((a_hi + ga) * pb + (b_hi + gb) * qb) + 0x1p-139 + kGuessSumBound * g;
}

template <class Value>
bool bounded_sample_index(const double* block_sum, int64_t n, double u, Value value, int64_t* index,
                          double* total_out = nullptr, const double* block_err = nullptr,
                          bool approximate = false) {
  const int64_t blocks = num_blocks(n);
  const double d = block_sums_margin(blocks);
  const double total = sum_in_fours(block_sum, blocks);
  const double total_err = (block_err != nullptr ? sum_in_fours(block_err, blocks) : 0.0) * (1.0 + 0x1p-20);
  if (total_out != nullptr) *total_out = total;
  if (!(total > 0.0) || !(total <= std::numeric_limits<double>::max()) || !(total_err <= total)) return false;
  const double theta = u * total;
  const double theta_err = theta * d + u * (total_err * (1.0 + d));
  const double theta_lo = theta - theta_err, theta_hi = theta + theta_err;
  // The block: the first whose running sum certainly exceeds the threshold, every one
  // before it certainly not.
  int64_t chosen = -1;
  double before = 0.0, running = 0.0, running_err = 0.0, before_err = 0.0;
  for (int64_t b = 0; b < blocks; ++b) {
    const double next = running + block_sum[b];
    const double next_err = block_err != nullptr ? running_err + block_err[b] * (1.0 + 0x1p-20) : 0.0;
    const double err = next * d + next_err * (1.0 + d);
    if (next - err > theta_hi) {
      chosen = b;
      before = running;
      before_err = running_err;
      break;
    }
    if (!(next + err < theta_lo)) return false;
    running = next;
    running_err = next_err;
  }
  if (chosen < 0) return false;
  if (approximate) before_err += block_err[chosen] * (1.0 + 0x1p-20);
  before_err = before * d + before_err * (1.0 + d);
  const int64_t begin = chosen * kMassBlock;
  const int64_t end = begin + kMassBlock < n ? begin + kMassBlock : n;
  int64_t last_positive = -1;
  double sum = before;
  int64_t v = begin;
  // Runs of 16 values whose whole sum certainly stays below the threshold are passed in one
  // step: their sum in four partial sums (no longer a chain of 16 dependent adds), added to
  // the running sum. Any order of adding a run's values >= 0 stays within the scan's 2^-43
  // margin, so a skipped run is one the value-by-value scan would certainly have passed;
  // the run that may hold the crossing is scanned value by value.
  for (; v + 16 <= end; v += 16) {
    double part[4] = {0.0, 0.0, 0.0, 0.0};
    int64_t last = last_positive;
    for (int64_t j = 0; j < 16; ++j) {
      const float x = value(v + j);
      part[j & 3] += x > 0.0f ? static_cast<double>(x) : 0.0;
      last = x > 0.0f ? v + j : last;
    }
    const double after = sum + ((part[0] + part[1]) + (part[2] + part[3]));
    if (!(after + (before_err + after * 0x1p-43) < theta_lo)) break;
    sum = after;
    last_positive = last;
  }
  for (; v < end; ++v) {
    const float x = value(v);
    if (x > 0.0f) {
      sum += static_cast<double>(x);
      const double err = before_err + sum * 0x1p-43;
      if (sum - err > theta_hi) {
        *index = v;
        return true;
      }
      if (!(sum + err < theta_lo)) return false;
      last_positive = v;
    }
  }
  if (last_positive < 0 || approximate) return false;
  *index = last_positive;
  return true;
}

}  // namespace spec_verify

namespace spec_verify {

// Note [Bounded sampling]'s margins for the total alone: an upper bound on the canonical
// mass (Note [Canonical mass order]) of the values the block sums F were summed from, with
// block_err as for bounded_sample_index (optional). The canonical total is within d of the
// sum of the F, relatively, plus the sum of the block_err taken 2^-20 larger; the bound is
// taken 2^-40 larger again for its own roundings. False if the F give no finite bound.
// bounded_mass_range: both bounds.
// The canonical total lies in [*lower, *upper] (*lower >= 0).
inline bool bounded_mass_range(const double* block_sum, int64_t n, double* lower, double* upper,
                               const double* block_err = nullptr) {
  const int64_t blocks = num_blocks(n);
  const double d = block_sums_margin(blocks);
  double total = 0.0, total_err = 0.0;
  for (int64_t b = 0; b < blocks; ++b) total += block_sum[b];
  if (block_err != nullptr)
    for (int64_t b = 0; b < blocks; ++b) total_err += block_err[b];
  total_err *= 1.0 + 0x1p-20;
  const double hi = (total + total * d + total_err * (1.0 + d)) * (1.0 + 0x1p-40);
  if (!(total >= 0.0) || !(hi <= std::numeric_limits<double>::max())) return false;
  *lower = std::max(0.0, (total - total * d - total_err * (1.0 + d)) * (1.0 - 0x1p-40));
  *upper = hi;
  return true;
}

inline bool bounded_mass_upper(const double* block_sum, int64_t n, double* upper, const double* block_err = nullptr) {
  const int64_t blocks = num_blocks(n);
  const double d = block_sums_margin(blocks);
  double total = 0.0, total_err = 0.0;
  for (int64_t b = 0; b < blocks; ++b) total += block_sum[b];
  if (block_err != nullptr)
    for (int64_t b = 0; b < blocks; ++b) total_err += block_err[b];
  total_err *= 1.0 + 0x1p-20;
  const double bound = (total + total * d + total_err * (1.0 + d)) * (1.0 + 0x1p-40);
  if (!(total >= 0.0) || !(bound <= std::numeric_limits<double>::max())) return false;
  *upper = bound;
  return true;
}

}  // namespace spec_verify
