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
//   Source: Source::kRows rows of n values read side by side (one row, a target row and its
//   draft row, a residual computed from two rows).
//     add16(v, lanes)  adds values v .. v+15 of row r to lanes[r], value v+j to lane j;
//     at(v, r)         value v of row r as a float (the block tails).
//
// The driver is inlined into each path's kernel (SPEC_VERIFY_INLINE), so that the lane
// arithmetic, compiled for that path's instruction set, is inlined into it in turn.
#pragma once

#include <cstdint>

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

}  // namespace spec_verify
