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
//     at(v, r)         value v of row r as a float (the block tails);
//     end_block(b, lanes)  (optional) called once block b is summed, with its lanes
//                      (lanes[r] for row r), for sources that keep sums of their own per
//                      block (in lanes of a Lanes type with room for them).
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
      if constexpr (requires { source.end_block(b, lanes[k]); }) source.end_block(b + k, lanes[k]);
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
    if constexpr (requires { source.end_block(b, lanes); }) source.end_block(b, lanes);
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

// Two one-row sources read side by side: a position's target row and its draft row, so a
// path gets twice the independent add chains. Row needs add16, at and flagged() (true
// when the row may hold a value row_mass rejects, or one the path's widening cannot take).
template <class Row>
struct RowPair {
  static constexpr int kRows = 2;
  Row p, q;
  template <class Lanes>
  SPEC_VERIFY_INLINE void add16(int64_t v, Lanes* lanes) {
    p.add16(v, &lanes[0]);
    q.add16(v, &lanes[1]);
  }
  SPEC_VERIFY_INLINE float at(int64_t v, int r) { return r == 0 ? p.at(v, 0) : q.at(v, 0); }
};

// row_mass_pair on the driver: false (the caller goes row by row) if either row is flagged.
template <class Lanes, class Row>
SPEC_VERIFY_INLINE bool blocked_mass_pair(const Row& p, const Row& q, int64_t n, double* p_blocks,
                                          double* q_blocks, double* p_mass, double* q_mass) {
  RowPair<Row> rows{p, q};
  double* const blocks[2] = {p_blocks, q_blocks};
  double masses[2];
  blocked_mass<Lanes>(rows, n, blocks, masses);
  if (rows.p.flagged() || rows.q.flagged()) return false;
  *p_mass = masses[0];
  *q_mass = masses[1];
  return true;
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

// Note [Bounded sampling]: approximate block sums within kBlockSumBound. Inside a block, group
// g of 16 values goes to float32 accumulator g % 4 lane by lane (each from +0.0, so at most
// four values and three rounding adds per lane), the four accumulators are added as
// (0 + 1) + (2 + 3), and the 16 lanes and the block's last len % 16 values are summed in
// float64: at most five float32 roundings on the way from a value to its block sum.
// Source::f32(v) is value v as a float; the SIMD paths follow the same scheme in vectors
// (any scheme within the bound would do: the sums decide only whether a draw is certain).
template <class Source>
inline void block_sums_f32_from(Source& source, int64_t n, double* block_sum) {
  for (int64_t b = 0, begin = 0; begin < n; ++b, begin += kMassBlock) {
    const int64_t end = n - begin < kMassBlock ? n : begin + kMassBlock;
    const int64_t body_end = end - (end - begin) % kLanes;
    float acc[4][kLanes] = {};
    for (int64_t v = begin, g = 0; v < body_end; v += kLanes, ++g)
      for (int j = 0; j < kLanes; ++j) acc[g % 4][j] += source.f32(v + j);
    double sum = 0.0;
    for (int j = 0; j < kLanes; ++j) sum += static_cast<double>((acc[0][j] + acc[1][j]) + (acc[2][j] + acc[3][j]));
    for (int64_t v = body_end; v < end; ++v) sum += static_cast<double>(source.f32(v));
    block_sum[b] = sum;
  }
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
