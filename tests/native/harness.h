#pragma once
// What the native tests of the core (no torch) share: the pass/fail count, a portable random
// stream, rows against guard pages that fault on any read outside them, row fills with
// special values, and the paths this CPU can run. The tests are split by rule, one file each
// (tests/native/test_*.cpp, declared at the end); test_kernels.cpp's main runs them all in one
// fixed order of one random stream and prints a closing "N passed, N failed" line.
//
// Usage: test_kernels [--quick] [--seed N]   (--quick: fewer random rounds, for emulated runs)
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <limits>
#include <memory>
#include <string>
#include <vector>

#include "exp_f32.h"
#include "half.h"
#include "sample_index.h"
#include "spec_verify.h"

namespace sv = spec_verify;

namespace native_tests {

inline int64_t g_passed = 0, g_failed = 0;

inline void check(bool ok, const std::string& what) {
  if (ok) {
    ++g_passed;
  } else {
    ++g_failed;
    if (g_failed <= 50) std::printf("FAIL %s\n", what.c_str());
  }
}

inline uint64_t bits(double x) {
  uint64_t u;
  std::memcpy(&u, &x, sizeof u);
  return u;
}

// splitmix64: a small, fixed, portable generator, so both architectures see the same rows.
struct Rng {
  uint64_t s;
  uint64_t next() {
    uint64_t z = (s += 0x9e3779b97f4a7c15ULL);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
  }
  double uniform() { return static_cast<double>(next() >> 11) * 0x1.0p-53; }
  int64_t below(int64_t n) { return static_cast<int64_t>(next() % static_cast<uint64_t>(n)); }
};

inline const int64_t kPage = sysconf(_SC_PAGESIZE);

// A region of readable pages between two unreadable ones; memory is never reused, so a
// stray read through an old pointer faults too.
struct Guarded {
  char* base = nullptr;
  size_t bytes = 0;
  char* lo = nullptr;  // first readable byte
  char* hi = nullptr;  // one past the last readable byte
  explicit Guarded(size_t payload) {
    const size_t pages = (payload + kPage - 1) / kPage + 2;
    bytes = pages * kPage;
    base = static_cast<char*>(mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0));
    if (base == MAP_FAILED) {
      std::perror("mmap");
      std::abort();
    }
    mprotect(base, kPage, PROT_NONE);
    mprotect(base + bytes - kPage, kPage, PROT_NONE);
    lo = base + kPage;
    hi = base + bytes - kPage;
  }
  ~Guarded() { munmap(base, bytes); }
  Guarded(const Guarded&) = delete;
  Guarded& operator=(const Guarded&) = delete;
};

// A row of n floats placed either flush against the guard page after it (at_end) or
// `offset` floats after the guard page before it.
struct GuardedRow {
  Guarded mem;
  float* data;
  GuardedRow(const std::vector<float>& values, bool at_end, int64_t offset)
      : mem((values.size() + offset) * sizeof(float) + 64) {
    const size_t n = values.size();
    data = at_end ? reinterpret_cast<float*>(mem.hi) - n : reinterpret_cast<float*>(mem.lo) + offset;
    std::memcpy(data, values.data(), n * sizeof(float));
  }
};

enum Fill {
  kUniform, kSpiky, kSparse, kConstant, kTies, kDenormal, kHuge, kLogits, kInfinities,
  kSignedZeros, kOneNaN, kOneInf, kOneNegative, kAllZero, kFillCount
};

inline const char* fill_name(int f) {
  static const char* names[] = {"uniform", "spiky", "sparse", "constant", "ties", "denormal", "huge",
                                "logits", "infinities", "signed_zeros", "one_nan", "one_inf",
                                "one_negative", "all_zero"};
  return names[f];
}

inline std::vector<float> make_row(Rng& rng, int64_t n, int fill) {
  std::vector<float> r(n);
  const float inf = std::numeric_limits<float>::infinity();
  for (int64_t v = 0; v < n; ++v) {
    const double u = rng.uniform();
    switch (fill) {
      case kUniform: r[v] = static_cast<float>(u); break;
      case kSpiky: r[v] = static_cast<float>(std::pow(u, 12.0)); break;
      case kSparse: r[v] = u < 0.9 ? 0.0f : static_cast<float>(rng.uniform()); break;
      case kConstant: r[v] = 0.25f; break;
      case kTies: r[v] = static_cast<float>(rng.below(3)); break;
      case kDenormal: r[v] = static_cast<float>(u * 1e-39); break;
      case kHuge: r[v] = static_cast<float>(u * 3e38); break;
      case kLogits: r[v] = static_cast<float>((u - 0.6) * 40.0); break;
      case kInfinities: r[v] = u < 0.3 ? -inf : (u < 0.32 ? inf : static_cast<float>(u)); break;
      case kSignedZeros: r[v] = u < 0.5 ? -0.0f : 0.0f; break;
      default: r[v] = static_cast<float>(u); break;
    }
  }
  // A single special value at a position that stresses tails and block edges.
  const int64_t spots[] = {0, n - 1, n / 2, n - 1 - n % 16, sv::kMassBlock - 1, sv::kMassBlock};
  const int64_t spot = spots[rng.below(6)];
  const int64_t at = spot >= 0 && spot < n ? spot : n - 1;
  if (fill == kOneNaN) r[at] = std::numeric_limits<float>::quiet_NaN();
  if (fill == kOneInf) r[at] = inf;
  if (fill == kOneNegative) r[at] = -1e-30f;
  if (fill == kAllZero) std::fill(r.begin(), r.end(), 0.0f);
  return r;
}

inline std::vector<const sv::KernelTable*> paths() {
  std::vector<const sv::KernelTable*> out;
  for (const std::string& name : sv::available_isas()) {
    sv::force_isa(name);
    out.push_back(&sv::active_kernels());
  }
  sv::force_isa("");
  return out;
}

inline std::string label(const sv::KernelTable& kt, const char* kernel, int64_t n, int fill, bool at_end, int64_t offset) {
  char buf[200];
  std::snprintf(buf, sizeof buf, "%s %s n=%lld fill=%s %s offset=%lld", kt.name, kernel, (long long)n,
                fill_name(fill), at_end ? "end-guard" : "start-guard", (long long)offset);
  return buf;
}

// K+1 target rows and K draft rows, each ending at a page boundary, so that every page of
// the rows after a given position can be made unreadable.
struct PagedRows {
  int64_t n, stride, rows;
  Guarded mem;
  float* first;
  PagedRows(int64_t rows_, int64_t n_)
      : n(n_),
        stride(((n_ * 4 + kPage - 1) / kPage) * kPage / 4),
        rows(rows_),
        mem(static_cast<size_t>(rows_ > 0 ? rows_ : 1) * (((n_ * 4 + kPage - 1) / kPage) * kPage)) {
    first = reinterpret_cast<float*>(mem.lo) + (stride - n);
  }
  float* row(int64_t i) { return first + i * stride; }
  sv::Rows view() { return sv::Rows{first, stride}; }
  void lock_from(int64_t i) {  // rows i.. become unreadable
    if (i < rows) mprotect(mem.lo + i * stride * 4, (rows - i) * stride * 4, PROT_NONE);
  }
};

// Logits rows: random, with -inf entries, ties, one dominant value, gaps that make
// subnormal weights.
inline std::vector<float> make_logits(Rng& rng, int64_t n, int kind) {
  std::vector<float> x(n);
  const float inf = std::numeric_limits<float>::infinity();
  for (int64_t v = 0; v < n; ++v) {
    const double u = rng.uniform();
    switch (kind % 5) {
      case 0: x[v] = static_cast<float>(8.0 * (rng.uniform() - 0.5)); break;
      case 1: x[v] = u < 0.2 ? -inf : static_cast<float>(4.0 * rng.uniform()); break;
      case 2: x[v] = static_cast<float>(rng.below(4)); break;                  // ties
      case 3: x[v] = static_cast<float>(-95.0 - 15.0 * u); break;             // subnormal weights
      default: x[v] = static_cast<float>(30.0 * (rng.uniform() - 0.9)); break;  // one value dominates
    }
  }
  if (kind % 5 == 3) x[rng.below(n)] = 0.0f;
  return x;
}

inline std::string warp_label(const sv::KernelTable& kt, const char* what, int64_t n, int kind, const sv::WarpParams& w) {
  char buf[200];
  std::snprintf(buf, sizeof buf, "%s %s n=%lld kind=%d T=%g top_k=%lld top_p=%g min_p=%g", kt.name, what,
                (long long)n, kind, w.temperature, (long long)w.top_k, w.top_p, w.min_p);
  return buf;
}

inline sv::WarpParams random_params(Rng& rng, int64_t n) {
  sv::WarpParams p;
  const float temps[] = {1.0f, 0.7f, 1.3f, 0.05f};
  p.temperature = temps[rng.below(4)];
  p.top_k = rng.below(3) == 0 ? 1 + rng.below(n + 2) : 0;
  p.top_p = rng.below(2) == 0 ? 0.05 + 0.95 * rng.uniform() : 1.0;
  p.min_p = rng.below(3) == 0 ? 0.3 * rng.uniform() : 0.0;
  return p;
}

inline bool same_floats(const float* a, const float* b, int64_t n) {
  return std::memcmp(a, b, n * sizeof(float)) == 0;
}

// The halves of float32 values: bfloat16 by truncation, binary16 by the nearest value with
// ties to even (overflow to inf, NaN kept), so every special a float row holds has a half.
inline uint16_t to_bf16(float x) { return static_cast<uint16_t>(std::bit_cast<uint32_t>(x) >> 16); }
inline uint16_t to_f16(float x) {
  const uint32_t b = std::bit_cast<uint32_t>(x);
  const uint16_t sign = static_cast<uint16_t>((b >> 16) & 0x8000u);
  if (std::isnan(x)) return sign | 0x7e00u;
  const float a = std::fabs(x);
  if (a >= 65520.0f) return sign | 0x7c00u;
  if (a < 0x1p-14f) return sign | static_cast<uint16_t>(std::nearbyint(a * 0x1p24f));  // subnormal
  int e = 0;
  const float m = std::frexp(a, &e);  // a = m * 2^e, m in [0.5, 1)
  const uint32_t mant = static_cast<uint32_t>(std::nearbyint(m * 2048.0f));  // 11 bits, may carry
  return sign | static_cast<uint16_t>(((e + 14) << 10) + (mant - 1024));
}

inline bool same_bits_floats(const float* a, const float* b, int64_t n) {
  return std::memcmp(a, b, n * sizeof(float)) == 0;
}

// Half rows placed against guard pages.
struct GuardedHalves {
  Guarded mem;
  uint16_t* data;
  GuardedHalves(const std::vector<uint16_t>& values, bool at_end)
      : mem(values.size() * 2 + 64) {
    data = at_end ? reinterpret_cast<uint16_t*>(mem.hi) - values.size() : reinterpret_cast<uint16_t*>(mem.lo);
    std::memcpy(data, values.data(), values.size() * 2);
  }
};

// The table every path is held to: the scalar reference.
inline const sv::KernelTable& reference() { return sv::scalar_kernels(); }

// A uniform whose threshold u * T lands on a canonical running sum of the draw (Note
// [Blocked sampling]), give or take up to two ulps: the end of the blocks before a random
// one (if they hold mass), or the in-block running sum at a random positive value of it. blocks: the canonical block
// masses, total their sum; value(v) the row's values.
template <class Value>
inline double boundary_uniform(Rng& rng, const std::vector<double>& blocks, double total, int64_t n, Value value) {
  const int64_t nb = static_cast<int64_t>(blocks.size());
  int64_t b = rng.below(nb);
  while (!(blocks[b] > 0.0)) b = (b + 1) % nb;
  double before = 0.0;
  for (int64_t j = 0; j < b; ++j) before += blocks[j];
  double target = before;
  if (before == 0.0 || rng.below(3) != 0) {  // in the block: the running sum at a positive value
    const int64_t begin = b * sv::kMassBlock, end = std::min(n, begin + sv::kMassBlock);
    std::vector<double> sums;
    double sum = before;
    for (int64_t v = begin; v < end; ++v) {
      if (value(v) > 0.0f) {
        sum += static_cast<double>(value(v));
        sums.push_back(sum);
      }
    }
    target = sums[rng.below(static_cast<int64_t>(sums.size()))];
  }
  double u = std::min(target / total, 0x1.fffffffffffffp-1);
  const int64_t nudge = rng.below(5) - 2;
  for (int64_t z = 0; z < std::abs(nudge); ++z) u = std::nextafter(u, nudge < 0 ? 0.0 : 1.0);
  return u;
}

// The uniforms at one uniform's boundary: bisection on u[j], others as in u, between from
// and just below 1, for the two adjacent doubles where outcome(u) changes; returns the five
// uniforms from 2 ulps below the lower to 1 ulp above the upper (index z + 2 for z in
// -2..2), or none if the outcome is the same at both ends.
template <class Outcome>
std::vector<std::vector<double>> boundary_uniforms(const std::vector<double>& u, int64_t j, double from, Outcome outcome) {
  std::vector<double> lo = u, hi = u;
  lo[j] = from;
  hi[j] = 0x1.fffffffffffffp-1;
  if (outcome(lo) == outcome(hi)) return {};
  for (int it = 0; it < 80 && std::nextafter(lo[j], 1.0) < hi[j]; ++it) {
    std::vector<double> mid = lo;
    mid[j] = 0.5 * (lo[j] + hi[j]);
    (outcome(mid) == outcome(lo) ? lo : hi) = mid;
  }
  std::vector<std::vector<double>> out;
  for (int z = -2; z <= 2; ++z) {
    std::vector<double> uu = z <= 0 ? lo : hi;
    for (int w = 0; w < std::abs(z) - (z > 0 ? 1 : 0); ++w) uu[j] = std::nextafter(uu[j], z < 0 ? 0.0 : 1.0);
    uu[j] = std::min(uu[j], 0x1.fffffffffffffp-1);
    out.push_back(uu);
  }
  return out;
}

// `rows` rows of n logits of one kind (make_logits), one after another, each with a finite
// value (1.0) at a random place.
inline std::vector<float> logit_rows(Rng& rng, int64_t rows, int64_t n, int kind) {
  std::vector<float> out(rows * n);
  for (int64_t i = 0; i < rows; ++i) {
    std::vector<float> v = make_logits(rng, n, kind);
    v[rng.below(n)] = 1.0f;
    std::copy(v.begin(), v.end(), out.begin() + i * n);
  }
  return out;
}

// The tests, one file per rule, in the order main (test_kernels.cpp) runs them.
using Paths = std::vector<const sv::KernelTable*>;
// test_kernels.cpp
void kernel_parity(Rng& rng, const Paths& kts, int64_t n);
void round_tests(Rng& rng, const Paths& kts, int count, int64_t max_n);
// test_warping.cpp
void exp_accuracy(Rng& rng);
void warp_parity(Rng& rng, const Paths& kts, int64_t n);
void top_p_long_rows(Rng& rng, const Paths& kts);
void top_p_boundary_tests(Rng& rng, const Paths& kts, int count);
void logits_round_tests(Rng& rng, const Paths& kts, int count, int64_t max_n);
void logits_boundary_rounds(Rng& rng, const Paths& kts, int count, int64_t max_n);
void logits_rejection_boundary_tests(Rng& rng, const Paths& kts, int count, int64_t max_n);
void greedy_logits_row_tests(const Paths& kts);
// test_half_rows.cpp
void widen_exhaustive(const Paths& kts);
void half_parity(Rng& rng, const Paths& kts, int64_t n);
void half_round_tests(Rng& rng, const Paths& kts, int count, int64_t max_n);
// test_boundaries.cpp
void acceptance_boundary_tests(Rng& rng, const Paths& kts, int count, int64_t max_n);
void draw_boundary_tests(Rng& rng, const Paths& kts, int count, int64_t max_n);
void block_boundary_tests(Rng& rng, const Paths& kts, int count, int64_t max_n);
// test_trees.cpp
void tree_tests(Rng& rng, const Paths& kts, int count, int64_t max_n);
void spine_tree_tests(Rng& rng, const Paths& kts, int count, int64_t max_n);
void chained_tree_tests(Rng& rng, const Paths& kts, int count, int64_t max_n);
// test_batches.cpp
void batch_tests(Rng& rng, const Paths& kts, int rounds, int64_t vocab);

}  // namespace native_tests
