// Note [Blocked argmax]
// The first block whose maximum is the row's maximum, then the first index in it holding
// that value, is the lowest index of the maximum (+0.0 == -0.0 both in the block comparison
// and in the search): the index the scalar loop finds. The row is read once, plus one block,
// and no index travels through the vector loop. Shared by the SIMD paths, which supply:
//   block_max(row, begin, end, &nan): the largest value of row[begin, end), setting nan if
//       any value there is NaN;
//   first_equal(row, begin, end, value): the first v in [begin, end) with row[v] == value.
#pragma once

#include <cstdint>

#include "spec_verify.h"

namespace spec_verify {

template <class BlockMax, class FirstEqual>
bool blocked_argmax(const float* row, int64_t n, int64_t* index, BlockMax block_max,
                    FirstEqual first_equal) {
  bool nan = false;
  int64_t best_begin = 0;
  float best = block_max(row, 0, n < kArgmaxBlock ? n : kArgmaxBlock, &nan);
  for (int64_t begin = kArgmaxBlock; begin < n; begin += kArgmaxBlock) {
    const float m = block_max(row, begin, n - begin < kArgmaxBlock ? n : begin + kArgmaxBlock, &nan);
    if (m > best) {  // strict: ties keep the earlier block
      best = m;
      best_begin = begin;
    }
  }
  if (nan) return false;
  const int64_t end = n - best_begin < kArgmaxBlock ? n : best_begin + kArgmaxBlock;
  *index = first_equal(row, best_begin, end, best);
  return true;
}

}  // namespace spec_verify
