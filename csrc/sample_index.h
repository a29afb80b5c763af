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
