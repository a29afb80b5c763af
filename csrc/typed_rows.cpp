// Note [Half rows]: the float32 kernels on rows of any element type, a chunk at a time.
// Scalar code shared by every instruction set; the widening and the passes go through the
// KernelTable.
#include <algorithm>
#include <cstdint>

#include "half.h"
#include "spec_verify.h"

namespace spec_verify {
namespace {

// Two chunk buffers per thread (a residual widens p and q side by side): 32 KB, in L1.
float* chunk_buffer(int slot) {
  alignas(64) thread_local float buffers[2][kHalfChunk];
  return buffers[slot];
}

const uint16_t* halves(RowRef row, int64_t begin) { return static_cast<const uint16_t*>(row.data) + begin; }

// Values [begin, begin + n) of a row as float32: the row itself, or widened into buffer.
const float* chunk(const KernelTable& kt, RowRef row, int64_t begin, int64_t n, float* buffer) {
  if (row.type == Elem::kF32) return static_cast<const float*>(row.data) + begin;
  widen(kt, RowRef(halves(row, begin), row.type), n, buffer);
  return buffer;
}

}  // namespace

float value_at(RowRef row, int64_t v) {
  switch (row.type) {
    case Elem::kF32:
      return static_cast<const float*>(row.data)[v];
    case Elem::kBF16:
      return bf16_value(halves(row, v)[0]);
    case Elem::kF16:
      break;
  }
  return f16_value(halves(row, v)[0]);
}

void widen(const KernelTable& kt, RowRef row, int64_t n, float* out) {
  if (row.type == Elem::kF16) kt.widen_f16(static_cast<const uint16_t*>(row.data), n, out);
  if (row.type == Elem::kBF16) kt.widen_bf16(static_cast<const uint16_t*>(row.data), n, out);
}

const float* as_floats(const KernelTable& kt, RowRef row, int64_t n, float* buffer) {
  if (row.type == Elem::kF32) return static_cast<const float*>(row.data);
  widen(kt, row, n, buffer);
  return buffer;
}

bool typed_argmax(const KernelTable& kt, RowRef row, int64_t n, int64_t* index) {
  if (row.type == Elem::kF32) return kt.row_argmax(static_cast<const float*>(row.data), n, index);
  // The largest of the chunks' maxima, the earliest on ties (+0.0 and -0.0 are equal).
  int64_t best = 0;
  float best_value = 0.0f;
  for (int64_t begin = 0; begin < n; begin += kHalfChunk) {
    const int64_t len = std::min(kHalfChunk, n - begin);
    const float* x = chunk(kt, row, begin, len, chunk_buffer(0));
    int64_t i = 0;
    if (!kt.row_argmax(x, len, &i)) return false;
    if (begin == 0 || x[i] > best_value) {
      best = begin + i;
      best_value = x[i];
    }
  }
  *index = best;
  return true;
}

bool typed_mass(const KernelTable& kt, RowRef row, int64_t n, double* block_mass, double* mass) {
  if (row.type == Elem::kF32) return kt.row_mass(static_cast<const float*>(row.data), n, block_mass, mass);
  // Chunks start on block boundaries, so each chunk's block masses are the row's; the row
  // mass is their sum in block order, as Note [Canonical mass order] defines it.
  for (int64_t begin = 0; begin < n; begin += kHalfChunk) {
    const int64_t len = std::min(kHalfChunk, n - begin);
    double unused = 0.0;
    if (!kt.row_mass(chunk(kt, row, begin, len, chunk_buffer(0)), len, block_mass + begin / kMassBlock, &unused))
      return false;
  }
  double total = 0.0;
  for (int64_t b = 0; b < num_blocks(n); ++b) total += block_mass[b];
  *mass = total;
  return true;
}

void typed_residual(const KernelTable& kt, RowRef p, RowRef q, float a, float b, int64_t n,
                    double* block_mass, double* mass) {
  if (p.type == Elem::kF32 && q.type == Elem::kF32) {
    kt.residual_mass(static_cast<const float*>(p.data), static_cast<const float*>(q.data), a, b, n,
                     block_mass, mass);
    return;
  }
  for (int64_t begin = 0; begin < n; begin += kHalfChunk) {
    const int64_t len = std::min(kHalfChunk, n - begin);
    double unused = 0.0;
    kt.residual_mass(chunk(kt, p, begin, len, chunk_buffer(0)), chunk(kt, q, begin, len, chunk_buffer(1)), a, b,
                     len, block_mass + begin / kMassBlock, &unused);
  }
  double total = 0.0;
  for (int64_t blk = 0; blk < num_blocks(n); ++blk) total += block_mass[blk];
  *mass = total;
}

}  // namespace spec_verify
