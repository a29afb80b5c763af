// The one implementation of Note [Canonical mass order] (spec_verify.h). Every path sums its
// masses through blocked_mass(), so the order lives here and nowhere else; a path supplies
// only its lane arithmetic and a source of values.
//
//   Lanes: 16 float64 lanes in whatever registers the path has.
//     kBlocksAtOnce  how many whole blocks the driver sums side by side (1 or more): each
//                    block has its own lanes, so this only adds independent add chains
//                    for a path whose loop would otherwise wait on add latency;
//     clear()        sets every lane to +0.0;
//     fold()         the block sum: l[j] += l[j+8] (j < 8), l[j] += l[j+4] (j < 4),
//                    l[j] += l[j+2] (j < 2), then l[0] + l[1].
//   Source: Source::kRows rows of n values read side by side (one row, a residual computed
//   from two rows, a kept row and the part of it above its threshold).
//     add16(v, lanes)  adds values v .. v+15 of row r to lanes[r], value v+j to lane j;
//     at(v, r)         value v of row r as a float (the block tails).
//
// The driver is inlined into each path's kernel (SPEC_VERIFY_INLINE), so that the lane
// arithmetic, compiled for that path's instruction set, is inlined into it in turn.
#pragma once

#include <cstdint>
#include <limits>

#include "spec_verify.h"

#define SPEC_VERIFY_INLINE inline __attribute__((always_inline))

namespace spec_verify {

// Block masses into block_mass[r][0 .. num_blocks(n)) and row masses into mass[r], for each
// row r of the source.
template <class Lanes, class Source>
SPEC_VERIFY_INLINE void blocked_mass(Source& source, int64_t n, double* const* block_mass,
                                     double* mass) {
  constexpr int kRows = Source::kRows;
  constexpr int kAtOnce = Lanes::kBlocksAtOnce;
  double total[kRows] = {};
  int64_t b = 0, begin = 0;
  // Whole blocks, kAtOnce at a time: the same sums, added to the totals in block order.
  for (; kAtOnce > 1 && n - begin >= kAtOnce * kMassBlock; b += kAtOnce, begin += kAtOnce * kMassBlock) {
    Lanes lanes[kAtOnce][kRows];
    for (auto& block : lanes)
      for (Lanes& l : block) l.clear();
    for (int64_t g = 0; g < kMassBlock; g += kLanes)
      for (int k = 0; k < kAtOnce; ++k) source.add16(begin + k * kMassBlock + g, lanes[k]);
    for (int k = 0; k < kAtOnce; ++k) {
      for (int r = 0; r < kRows; ++r) {
        const double sum = lanes[k][r].fold();
        block_mass[r][b + k] = sum;
        total[r] += sum;
      }
    }
  }
  for (; begin < n; ++b, begin += kMassBlock) {
    const int64_t end = n - begin < kMassBlock ? n : begin + kMassBlock;
    const int64_t body_end = end - (end - begin) % kLanes;
    Lanes lanes[kRows];
    for (Lanes& l : lanes) l.clear();
    for (int64_t v = begin; v < body_end; v += kLanes) source.add16(v, lanes);
    for (int r = 0; r < kRows; ++r) {
      double sum = lanes[r].fold();
      for (int64_t v = body_end; v < end; ++v) sum += static_cast<double>(source.at(v, r));
      block_mass[r][b] = sum;
      total[r] += sum;
    }
  }
  for (int r = 0; r < kRows; ++r) mass[r] = total[r];
}

// One row: returns its mass.
template <class Lanes, class Source>
SPEC_VERIFY_INLINE double blocked_mass(Source& source, int64_t n, double* block_mass) {
  static_assert(Source::kRows == 1);
  double mass = 0.0;
  blocked_mass<Lanes>(source, n, &block_mass, &mass);
  return mass;
}

// The scalar half of every path's keep source: its fields and its block tails
// (Source::at). Row 0 is w >= t ? w : 0, stored into r when kStore; row 1 is w > t ? w : 0.
// With r == w (in place), at(v, 1) reads what at(v, 0) stored, which is w(v) or, when
// w(v) < t, 0: either way the same row-1 value.
template <bool kStore>
struct KeepTail {
  static constexpr int kRows = 2;
  const float* w;
  float* r;
  float t;
  float at(int64_t v, int row) {
    const float x = w[v];
    const float kept = (row == 0 ? x >= t : x > t) ? x : 0.0f;
    if (kStore && row == 0) r[v] = kept;
    return kept;
  }
};

// keep_at_least on the driver. KeepSource<kStore> is a path's two-row source over weights w
// (row 0: w >= t ? w : 0, stored into r when kStore; row 1: w > t ? w : 0), constructed
// from (w, r, t).
template <class Lanes, template <bool> class KeepSource>
SPEC_VERIFY_INLINE void blocked_keep_at_least(const float* w, int64_t n, float t, float* r,
                                              double* r_blocks, double* r_mass,
                                              double* above_blocks, double* above_mass) {
  double* const blocks[2] = {r_blocks, above_blocks};
  double masses[2];
  if (r != nullptr) {
    KeepSource<true> source(w, r, t);
    blocked_mass<Lanes>(source, n, blocks, masses);
  } else {
    KeepSource<false> source(w, r, t);
    blocked_mass<Lanes>(source, n, blocks, masses);
  }
  *r_mass = masses[0];
  *above_mass = masses[1];
}

// gather_at_least from index v on, m values already in out: the scalar path whole and the
// SIMD paths' tails. Branch-free: most weights are below t.
inline int64_t gather_at_least_from(const float* w, int64_t v, int64_t n, float t, int64_t* index,
                                    int64_t m) {
  for (; v < n; ++v) {
    index[m] = v;
    m += w[v] >= t;
  }
  return m;
}

// What row_mass accepts: every value in [+0.0, FLT_MAX] (-0.0 counts as zero). The SIMD
// paths check a row value by value only when their vector check flagged it.
inline bool valid_mass_row(const float* row, int64_t n) {
  for (int64_t v = 0; v < n; ++v) {
    if (!(row[v] >= 0.0f && row[v] <= std::numeric_limits<float>::max())) return false;
  }
  return true;
}

}  // namespace spec_verify
