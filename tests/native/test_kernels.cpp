// Native tests of the core (no torch): every kernel on every path this CPU can run, bit for
// bit against the scalar reference, over lengths around every vector width and block edge,
// misaligned starts, special values, and guard pages that fault on any read outside a row.
// Then whole rounds: identical outcomes on every path, and rows after the decision put in
// unreadable memory. Prints one line per failure and a closing "N passed, N failed" line.
//
// Usage: test_kernels [--quick]   (--quick: fewer random rounds, for emulated runs)
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <limits>
#include <string>
#include <vector>

#include "spec_verify.h"

namespace sv = spec_verify;

namespace {

int64_t g_passed = 0, g_failed = 0;

void check(bool ok, const std::string& what) {
  if (ok) {
    ++g_passed;
  } else {
    ++g_failed;
    if (g_failed <= 50) std::printf("FAIL %s\n", what.c_str());
  }
}

uint64_t bits(double x) {
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

const int64_t kPage = sysconf(_SC_PAGESIZE);

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
const char* fill_name(int f) {
  static const char* names[] = {"uniform", "spiky", "sparse", "constant", "ties", "denormal", "huge",
                                "logits", "infinities", "signed_zeros", "one_nan", "one_inf",
                                "one_negative", "all_zero"};
  return names[f];
}

std::vector<float> make_row(Rng& rng, int64_t n, int fill) {
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

bool has_negative_zero(const std::vector<float>& row) {
  for (float x : row)
    if (x == 0.0f && std::signbit(x)) return true;
  return false;
}

std::vector<const sv::KernelTable*> paths() {
  std::vector<const sv::KernelTable*> out;
  for (const std::string& name : sv::available_isas()) {
    sv::force_isa(name);
    out.push_back(&sv::active_kernels());
  }
  sv::force_isa("");
  return out;
}

std::string label(const sv::KernelTable& kt, const char* kernel, int64_t n, int fill, bool at_end, int64_t offset) {
  char buf[200];
  std::snprintf(buf, sizeof buf, "%s %s n=%lld fill=%s %s offset=%lld", kt.name, kernel, (long long)n,
                fill_name(fill), at_end ? "end-guard" : "start-guard", (long long)offset);
  return buf;
}

void kernel_parity(Rng& rng, const std::vector<const sv::KernelTable*>& kts, int64_t n) {
  const sv::KernelTable& ref = sv::scalar_kernels();
  const int64_t blocks = sv::num_blocks(n);
  std::vector<double> ref_blocks(blocks), got_blocks(blocks);
  for (int fill = 0; fill < kFillCount; ++fill) {
    const std::vector<float> pv = make_row(rng, n, fill);
    const std::vector<float> qv = make_row(rng, n, fill == kOneNaN ? kUniform : (fill + 1) % kFillCount);
    const bool at_end = rng.below(2) == 0;
    const int64_t offset = at_end ? 0 : rng.below(8);
    const GuardedRow p(pv, at_end, offset), q(qv, !at_end, 7 - offset);

    int64_t ref_index = -1;
    const bool ref_ok = ref.row_argmax(p.data, n, &ref_index);
    double ref_mass = -1.0;
    const bool ref_mass_ok = ref.row_mass(p.data, n, ref_blocks.data(), &ref_mass);
    double ref_q_mass = -1.0;
    std::vector<double> q_blocks(blocks);
    const bool q_ok = ref.row_mass(q.data, n, q_blocks.data(), &ref_q_mass);

    for (const sv::KernelTable* kt : kts) {
      int64_t index = -2;
      const bool ok = kt->row_argmax(p.data, n, &index);
      check(ok == ref_ok && (!ok || index == ref_index), label(*kt, "row_argmax", n, fill, at_end, offset) +
                                                             " index " + std::to_string(index) + " vs " +
                                                             std::to_string(ref_index));
      double mass = -2.0;
      const bool mass_ok = kt->row_mass(p.data, n, got_blocks.data(), &mass);
      bool same = mass_ok == ref_mass_ok;
      if (same && mass_ok) {
        same = bits(mass) == bits(ref_mass);
        for (int64_t b = 0; b < blocks; ++b) same &= bits(got_blocks[b]) == bits(ref_blocks[b]);
      }
      check(same, label(*kt, "row_mass", n, fill, at_end, offset));

      // The pair, where a path has it: true only for two valid rows, and then row_mass's
      // bits for each. The contract allows false for anything, but a fast path that declines
      // plain valid rows would be no fast path: false only for rows that hold -0.0.
      if (kt->row_mass_pair != nullptr) {
        std::vector<double> pair_p(blocks), pair_q(blocks);
        double pm = -2.0, qm = -2.0;
        const bool pair_ok = kt->row_mass_pair(p.data, q.data, n, pair_p.data(), pair_q.data(), &pm, &qm);
        bool pair_same = !(ref_mass_ok && q_ok) || has_negative_zero(pv) || has_negative_zero(qv);
        if (pair_ok) {
          pair_same = ref_mass_ok && q_ok && bits(pm) == bits(ref_mass) && bits(qm) == bits(ref_q_mass);
          for (int64_t b = 0; b < blocks; ++b)
            pair_same &= bits(pair_p[b]) == bits(ref_blocks[b]) && bits(pair_q[b]) == bits(q_blocks[b]);
        }
        check(pair_same, label(*kt, "row_mass_pair", n, fill, at_end, offset) +
                             (pair_ok ? " (returned true)" : " (returned false)"));
      }

      if (ref_mass_ok && q_ok && ref_mass > 0 && ref_q_mass > 0) {
        float a, b;
        sv::residual_scales(ref_mass, ref_q_mass, &a, &b);
        std::vector<double> rb(blocks), gb(blocks);
        double rm = -1, gm = -2;
        ref.residual_mass(p.data, q.data, a, b, n, rb.data(), &rm);
        kt->residual_mass(p.data, q.data, a, b, n, gb.data(), &gm);
        bool same_r = bits(rm) == bits(gm);
        for (int64_t k = 0; k < blocks; ++k) same_r &= bits(rb[k]) == bits(gb[k]);
        check(same_r, label(*kt, "residual_mass", n, fill, at_end, offset));
      }
    }
  }
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

void round_tests(Rng& rng, const std::vector<const sv::KernelTable*>& kts, int count, int64_t max_n) {
  for (int r = 0; r < count; ++r) {
    const int64_t k = rng.below(7);
    const int64_t n = 1 + rng.below(max_n);
    PagedRows target(k + 1, n), draft(k, n);
    const int fills[] = {kUniform, kSpiky, kSparse, kTies};
    const int fill = fills[rng.below(4)];
    for (int64_t i = 0; i <= k; ++i) {
      const std::vector<float> v = make_row(rng, n, fill);
      std::memcpy(target.row(i), v.data(), n * 4);
      target.row(i)[rng.below(n)] += 0.5f;  // no zero-mass rows
    }
    for (int64_t i = 0; i < k; ++i) {
      const std::vector<float> v = make_row(rng, n, fill);
      std::memcpy(draft.row(i), v.data(), n * 4);
      draft.row(i)[rng.below(n)] += 0.5f;
    }
    // Force the decision at position d: earlier draft rows equal the target rows (always
    // accepted), tokens are the argmax there (greedy accepts); at d, anything can happen.
    const int64_t d = rng.below(k + 1);
    std::vector<int64_t> tokens(k);
    for (int64_t i = 0; i < k; ++i) {
      if (i < d) std::memcpy(draft.row(i), target.row(i), n * 4);
      int64_t best = 0;
      sv::scalar_kernels().row_argmax(target.row(i), n, &best);
      tokens[i] = i < d ? best : rng.below(n);
    }
    std::vector<double> u(k + 1);
    for (double& x : u) x = rng.uniform();

    const sv::Outcome ref_g = sv::verify_greedy_round(sv::scalar_kernels(), target.view(), tokens.data(), k, n);
    const sv::Outcome ref_a = sv::accept_round(sv::scalar_kernels(), target.view(), draft.view(), tokens.data(), u.data(), k, n);
    // Positions before d hold a draft row equal to its target row and the argmax as token,
    // so both rules must accept them: the reference itself reaches position d.
    check(ref_g.n_accepted >= d && ref_a.n_accepted >= d,
          "scalar round " + std::to_string(r) + " accepts the first d = " + std::to_string(d) + " positions");
    // Rows after both decisions become unreadable: a read there ends the program.
    const int64_t last = std::max(ref_g.n_accepted, ref_a.n_accepted);
    target.lock_from(last + 1);
    draft.lock_from(last + 1);
    for (const sv::KernelTable* kt : kts) {
      const sv::Outcome g = sv::verify_greedy_round(*kt, target.view(), tokens.data(), k, n);
      const sv::Outcome a = sv::accept_round(*kt, target.view(), draft.view(), tokens.data(), u.data(), k, n);
      char buf[160];
      std::snprintf(buf, sizeof buf, "%s round %d k=%lld n=%lld", kt->name, r, (long long)k, (long long)n);
      check(g.error == sv::InputError::kNone && g.n_accepted == ref_g.n_accepted && g.token == ref_g.token,
            std::string(buf) + " verify_greedy");
      check(a.error == sv::InputError::kNone && a.n_accepted == ref_a.n_accepted && a.token == ref_a.token,
            std::string(buf) + " accept");
      check(a.token >= 0 && a.token < n && target.row(a.n_accepted)[a.token] > 0.0f,
            std::string(buf) + " accept token has positive target probability");
    }
  }
}

}  // namespace

int main(int argc, char** argv) {
  const bool quick = argc > 1 && std::strcmp(argv[1], "--quick") == 0;
  const std::vector<const sv::KernelTable*> kts = paths();
  std::printf("paths:");
  for (const auto* kt : kts) std::printf(" %s", kt->name);
  std::printf("\n");
  // Paths built for this architecture that this CPU cannot run are said, not silently left out.
#if defined(__x86_64__)
  const char* built[] = {"avx512", "avx2"};
#elif defined(__aarch64__)
  const char* built[] = {"neon"};
#else
  const char* built[] = {"scalar"};
#endif
  const std::vector<std::string> available = sv::available_isas();
  for (const char* name : built) {
    if (std::find(available.begin(), available.end(), name) == available.end())
      std::printf("path %s: NOT TESTED here, this CPU cannot run it\n", name);
  }

  Rng rng{20261129};
  std::vector<int64_t> sizes;
  for (int64_t n = 1; n <= 80; ++n) sizes.push_back(n);
  for (int64_t n : {127, 128, 129, 255, 256, 257, 1000, 1023, 1024, 1025, 1039, 1040, 1041, 2047,
                    2048, 2049, 3072, 4111, 32000, 32771, 128256, 151936})
    sizes.push_back(n);
  for (int64_t n : sizes) kernel_parity(rng, kts, n);
  round_tests(rng, kts, quick ? 300 : 3000, 5000);
  round_tests(rng, kts, quick ? 20 : 200, 160000);

  std::printf("native: %lld passed, %lld failed\n", (long long)g_passed, (long long)g_failed);
  return g_failed == 0 ? 0 : 1;
}
