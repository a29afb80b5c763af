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

// Each approximate block sum within kBlockSumBound of the exact sum, checked against the
// canonical block mass (itself within 2^-46 of exact). Sums that overflow float32 (huge
// rows) are allowed to be infinite.
bool within_block_bound(const std::vector<double>& approx, const std::vector<double>& canonical) {
  for (size_t b = 0; b < approx.size(); ++b) {
    if (std::isinf(approx[b]) && canonical[b] > 0x1p127) continue;
    if (!(std::fabs(approx[b] - canonical[b]) <= (sv::kBlockSumBound + 0x1p-45) * canonical[b])) return false;
  }
  return true;
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
      // row_mass_pair_guess: row_mass_pair's answer and bits, and the block sums of
      // max(0, p - q) within kGuessSumBound.
      if (kt->row_mass_pair_guess != nullptr) {
        std::vector<double> pair_p(blocks), pair_q(blocks), guess(blocks, -1.0), exact(blocks, 0.0);
        double pm = -2.0, qm = -2.0;
        const bool ok = kt->row_mass_pair_guess(p.data, q.data, n, pair_p.data(), pair_q.data(), &pm, &qm, guess.data());
        bool same = !(ref_mass_ok && q_ok) || has_negative_zero(pv) || has_negative_zero(qv);
        if (ok) {
          same = ref_mass_ok && q_ok && bits(pm) == bits(ref_mass) && bits(qm) == bits(ref_q_mass);
          for (int64_t b = 0; b < blocks; ++b) {
            same &= bits(pair_p[b]) == bits(ref_blocks[b]) && bits(pair_q[b]) == bits(q_blocks[b]);
            long double e = 0.0L;  // exact enough: 64-bit significand, at most 256 terms
            for (int64_t v = b * sv::kMassBlock; v < std::min(n, (b + 1) * sv::kMassBlock); ++v)
              e += static_cast<long double>(sv::residual_value(p.data[v], q.data[v], 1.0f, 1.0f));
            const bool inf_ok = std::isinf(guess[b]) && e > 0x1p127L;
            same &= inf_ok || std::fabs(static_cast<long double>(guess[b]) - e) <= (sv::kGuessSumBound + 0x1p-45) * e;
          }
        }
        check(same, label(*kt, "row_mass_pair_guess", n, fill, at_end, offset) + (ok ? " (returned true)" : " (returned false)"));
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
        // residual_store: residual_mass's masses, and every r'(v) stored; also in place.
        std::vector<float> stored(n, -1.0f), in_place(p.data, p.data + n);
        std::vector<double> sb(blocks);
        double sm = -3;
        kt->residual_store(p.data, q.data, a, b, n, stored.data(), sb.data(), &sm);
        bool same_s = bits(sm) == bits(rm) && std::memcmp(sb.data(), rb.data(), blocks * 8) == 0;
        for (int64_t v = 0; v < n; ++v)
          same_s &= std::bit_cast<uint32_t>(stored[v]) == std::bit_cast<uint32_t>(sv::residual_value(p.data[v], q.data[v], a, b));
        kt->residual_store(in_place.data(), q.data, a, b, n, in_place.data(), sb.data(), &sm);
        same_s &= bits(sm) == bits(rm) && std::memcmp(in_place.data(), stored.data(), n * 4) == 0;
        check(same_s, label(*kt, "residual_store", n, fill, at_end, offset));
        // Note [Bounded sampling]: the residual's float32 block sums within the bound.
        if (kt->residual_block_sums != nullptr) {
          std::vector<double> fb(blocks, -1.0);
          kt->residual_block_sums(p.data, q.data, a, b, n, fb.data());
          check(within_block_bound(fb, rb), label(*kt, "residual_block_sums within the bound", n, fill, at_end, offset));
        }
      }

      // Note [Bounded sampling]: the row's float32 block sums. For a row row_mass takes,
      // true (or false only for a row holding -0.0) and each sum within the bound of the
      // canonical block mass; for any other row, false or a non-finite total.
      if (kt->row_block_sums != nullptr) {
        std::vector<double> fb(blocks, -1.0);
        const bool f_ok = kt->row_block_sums(p.data, n, fb.data());
        double total = 0.0;
        for (double x : fb) total += x;
        bool good;
        if (ref_mass_ok) good = f_ok ? within_block_bound(fb, ref_blocks) : has_negative_zero(pv);
        else good = !f_ok || !std::isfinite(total);
        check(good, label(*kt, "row_block_sums", n, fill, at_end, offset) + (f_ok ? " (returned true)" : " (returned false)"));
      }
      // Note [Bounded rejection]'s one pass, where a path has it: for two rows row_mass takes,
      // true (or false only if one holds -0.0) with the sums of p and q within the bound of
      // their canonical block masses and those of max(0, p - q) within the bound of their
      // exact sums; for any other pair, false or a non-finite total.
      if (kt->pair_block_sums != nullptr) {
        std::vector<double> fp(blocks, -1.0), fq(blocks, -1.0), fg(blocks, -1.0);
        const bool f_ok = kt->pair_block_sums(p.data, q.data, n, fp.data(), fq.data(), fg.data());
        double total = 0.0;
        for (int64_t b = 0; b < blocks; ++b) total += fp[b] + fq[b];
        bool good;
        if (ref_mass_ok && q_ok) {
          good = f_ok ? within_block_bound(fp, ref_blocks) && within_block_bound(fq, q_blocks)
                      : has_negative_zero(pv) || has_negative_zero(qv);
          for (int64_t b = 0; f_ok && b < blocks; ++b) {
            long double e = 0.0L;  // exact enough: 64-bit significand, at most 256 terms
            for (int64_t v = b * sv::kMassBlock; v < std::min(n, (b + 1) * sv::kMassBlock); ++v)
              e += static_cast<long double>(sv::residual_value(p.data[v], q.data[v], 1.0f, 1.0f));
            const bool inf_ok = std::isinf(fg[b]) && e > 0x1p127L;
            good &= inf_ok || std::fabs(static_cast<long double>(fg[b]) - e) <= (sv::kBlockSumBound + 0x1p-45) * e;
          }
        } else {
          good = !f_ok || !std::isfinite(total);
        }
        check(good, label(*kt, "pair_block_sums", n, fill, at_end, offset) + (f_ok ? " (returned true)" : " (returned false)"));
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
    const sv::Rows one_hot{nullptr, 0};
    const sv::Outcome ref_o = sv::accept_round(sv::scalar_kernels(), target.view(), one_hot, tokens.data(), u.data(), k, n);
    // Positions before d hold a draft row equal to its target row and the argmax as token,
    // so both rules must accept them: the reference itself reaches position d.
    check(ref_g.n_accepted >= d && ref_a.n_accepted >= d,
          "scalar round " + std::to_string(r) + " accepts the first d = " + std::to_string(d) + " positions");
    // A one-hot draft's rejection never emits the rejected token (p without t).
    check(ref_o.error == sv::InputError::kNone && target.row(ref_o.n_accepted)[ref_o.token] > 0.0f &&
              (ref_o.n_accepted == k || ref_o.token != tokens[ref_o.n_accepted]),
          "scalar one-hot round " + std::to_string(r) + " draws its correction without the draft token");
    // Block verification reads every row: every path, before rows are locked.
    for (const sv::Rows& d_rows : {draft.view(), one_hot}) {
      const sv::Outcome ref_b = sv::accept_round(sv::scalar_kernels(), target.view(), d_rows, tokens.data(), u.data(),
                                                 k, n, sv::Method::kBlock);
      check(ref_b.error == sv::InputError::kNone && ref_b.token >= 0 && ref_b.token < n &&
                target.row(ref_b.n_accepted)[ref_b.token] > 0.0f,
            "scalar block round " + std::to_string(r) + " emits a token the target row holds");
      for (const sv::KernelTable* kt : kts) {
        const sv::Outcome b = sv::accept_round(*kt, target.view(), d_rows, tokens.data(), u.data(), k, n, sv::Method::kBlock);
        check(b.error == sv::InputError::kNone && b.n_accepted == ref_b.n_accepted && b.token == ref_b.token,
              std::string(kt->name) + " block round " + std::to_string(r) + (d_rows.data ? "" : " one-hot"));
      }
    }
    // Rows after every token-wise decision become unreadable: a read there ends the program.
    const int64_t last = std::max({ref_g.n_accepted, ref_a.n_accepted, ref_o.n_accepted});
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
      const sv::Outcome o = sv::accept_round(*kt, target.view(), one_hot, tokens.data(), u.data(), k, n);
      check(o.error == sv::InputError::kNone && o.n_accepted == ref_o.n_accepted && o.token == ref_o.token,
            std::string(buf) + " accept one-hot");
    }
  }
}

// ---- warping (Note [Warping], Note [One exp]) ---------------------------------------------

double ulp_distance(float a, float b) {
  const int64_t ia = std::bit_cast<int32_t>(a), ib = std::bit_cast<int32_t>(b);
  return static_cast<double>(ia > ib ? ia - ib : ib - ia);
}

// exp_nonpositive against the correctly rounded exp: within 2 ulp where the result is
// normal, within 2^-148 absolute below; exactly 1 at 0, exactly 0 at -inf and below -104.
void exp_accuracy(Rng& rng) {
  double worst = 0.0;
  bool ok = true;
  for (int i = 0; i < 200000; ++i) {
    const float y = i < 100000 ? static_cast<float>(-87.0 * rng.uniform()) : static_cast<float>(-104.0 * rng.uniform());
    const float got = sv::exp_nonpositive<sv::ScalarOps>(y);
    const float want = static_cast<float>(std::exp(static_cast<double>(y)));
    if (want >= 0x1p-126f) {
      worst = std::max(worst, ulp_distance(got, want));
    } else {
      ok &= std::fabs(static_cast<double>(got) - static_cast<double>(want)) <= 0x1p-148;
    }
  }
  check(ok && worst <= 2.0, "exp_nonpositive within 2 ulp of exp (worst " + std::to_string(worst) + " ulp)");
  check(sv::exp_nonpositive<sv::ScalarOps>(0.0f) == 1.0f && sv::exp_nonpositive<sv::ScalarOps>(-0.0f) == 1.0f,
        "exp(0) is exactly 1");
  check(sv::exp_nonpositive<sv::ScalarOps>(-std::numeric_limits<float>::infinity()) == 0.0f &&
            sv::exp_nonpositive<sv::ScalarOps>(-104.5f) == 0.0f && sv::exp_nonpositive<sv::ScalarOps>(-150.0f) == 0.0f,
        "exp(-inf) and exp(y < -104) are 0");
}

// Logits rows: random, with -inf entries, ties, one dominant value, gaps that make
// subnormal weights.
std::vector<float> make_logits(Rng& rng, int64_t n, int kind) {
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

std::string warp_label(const sv::KernelTable& kt, const char* what, int64_t n, int kind, const sv::WarpParams& w) {
  char buf[200];
  std::snprintf(buf, sizeof buf, "%s %s n=%lld kind=%d T=%g top_k=%lld top_p=%g min_p=%g", kt.name, what,
                (long long)n, kind, w.temperature, (long long)w.top_k, w.top_p, w.min_p);
  return buf;
}

sv::WarpParams random_params(Rng& rng, int64_t n) {
  sv::WarpParams p;
  const float temps[] = {1.0f, 0.7f, 1.3f, 0.05f};
  p.temperature = temps[rng.below(4)];
  p.top_k = rng.below(3) == 0 ? 1 + rng.below(n + 2) : 0;
  p.top_p = rng.below(2) == 0 ? 0.05 + 0.95 * rng.uniform() : 1.0;
  p.min_p = rng.below(3) == 0 ? 0.3 * rng.uniform() : 0.0;
  return p;
}

bool same_floats(const float* a, const float* b, int64_t n) {
  return std::memcmp(a, b, n * sizeof(float)) == 0;
}

// A warped row's block masses and mass (Note [Sparse masses]: summed over candidates) are
// the canonical ones of its values, summed densely by the scalar path; and warp_row_lazy
// gives the same row read through its floor, with the same masses.
bool warped_masses_hold(const sv::KernelTable& kt, const float* x, int64_t n, const sv::WarpParams& params,
                        const float* values, const double* blocks, double mass) {
  const int64_t nb = sv::num_blocks(n);
  std::vector<double> dense(nb);
  double dense_mass = -1;
  bool ok = sv::scalar_kernels().row_mass(values, n, dense.data(), &dense_mass) && bits(dense_mass) == bits(mass);
  for (int64_t b = 0; b < nb; ++b) ok &= bits(dense[b]) == bits(blocks[b]);
  std::vector<float> lazy(n);
  std::vector<double> lazy_blocks(nb);
  sv::WarpedRow row{lazy.data(), lazy_blocks.data(), 0.0};
  ok &= sv::warp_row_lazy(kt, x, n, params, &row).error == sv::InputError::kNone && bits(row.mass) == bits(mass);
  for (int64_t b = 0; b < nb; ++b) ok &= bits(lazy_blocks[b]) == bits(blocks[b]);
  for (int64_t v = 0; v < n; ++v) ok &= std::bit_cast<uint32_t>(lazy[v] < row.floor ? 0.0f : lazy[v]) == std::bit_cast<uint32_t>(values[v]);
  sv::materialize(kt, lazy.data(), n, row.floor);
  ok &= same_floats(lazy.data(), values, n);
  return ok;
}

// Every warping kernel and warp_row on every path, bit for bit against the scalar path;
// warp_row against the definition, counted by brute force for small rows.
sv::KernelTable without_bounds(const sv::KernelTable& kt);

// Every path against the scalar path; warp_row also against the scalar path without Note
// [Bounded warping] (the definition computed in full).
void warp_parity(Rng& rng, const std::vector<const sv::KernelTable*>& kts, int64_t n) {
  const sv::KernelTable& ref = sv::scalar_kernels();
  const sv::KernelTable full = without_bounds(ref);
  const int64_t blocks = sv::num_blocks(n);
  for (int kind = 0; kind < 5; ++kind) {
    const std::vector<float> xv = make_logits(rng, n, kind);
    const GuardedRow x(xv, rng.below(2) == 0, 0);
    sv::WarpParams params = random_params(rng, n);
    int64_t top = 0;
    ref.row_argmax(x.data, n, &top);
    if (std::isinf(x.data[top])) continue;  // all -inf: warp_row's error, tested with rounds
    const float z_max = x.data[top] / params.temperature;
    std::vector<float> w_ref(n), w(n), r_ref(n), r(n);
    std::vector<double> wb_ref0(blocks), wb0(blocks);
    double wm_ref = -1, wm = -2;
    ref.row_weights(x.data, n, params.temperature, z_max, w_ref.data(), wb_ref0.data(), &wm_ref);
    std::vector<double> rb_ref(blocks), ab_ref(blocks), rb(blocks), ab(blocks);
    const float t = w_ref[rng.below(n)];
    double rm_ref, am_ref;
    ref.keep_at_least(w_ref.data(), n, t, r_ref.data(), rb_ref.data(), &rm_ref, ab_ref.data(), &am_ref);
    std::vector<float> warped_ref(n);
    std::vector<double> wb_ref(blocks);
    sv::WarpedRow out_ref{warped_ref.data(), wb_ref.data(), 0.0};
    const sv::Outcome e_ref = sv::warp_row(full, x.data, n, params, &out_ref);
    check(e_ref.error == sv::InputError::kNone && out_ref.mass >= 1.0, warp_label(ref, "warp_row keeps the top weight", n, kind, params));
    for (const sv::KernelTable* kt : kts) {
      kt->row_weights(x.data, n, params.temperature, z_max, w.data(), wb0.data(), &wm);
      bool same_weights = same_floats(w.data(), w_ref.data(), n) && bits(wm) == bits(wm_ref);
      for (int64_t b = 0; b < blocks; ++b) same_weights &= bits(wb0[b]) == bits(wb_ref0[b]);
      check(same_weights, warp_label(*kt, "row_weights", n, kind, params));
      double rm = -1, am = -1;
      kt->keep_at_least(w_ref.data(), n, t, r.data(), rb.data(), &rm, ab.data(), &am);
      bool same = same_floats(r.data(), r_ref.data(), n) && bits(rm) == bits(rm_ref) && bits(am) == bits(am_ref);
      for (int64_t b = 0; b < blocks; ++b) same &= bits(rb[b]) == bits(rb_ref[b]) && bits(ab[b]) == bits(ab_ref[b]);
      double rm2 = -1, am2 = -1;
      kt->keep_at_least(w_ref.data(), n, t, nullptr, rb.data(), &rm2, ab.data(), &am2);
      same &= bits(rm2) == bits(rm_ref) && bits(am2) == bits(am_ref);
      check(same, warp_label(*kt, "keep_at_least", n, kind, params));
      const float floor = t > 0.0f ? t : 0x1p-20f;
      std::vector<int64_t> g(n), expected;
      const int64_t m = kt->gather_at_least(w_ref.data(), n, floor, g.data());
      for (int64_t v = 0; v < n; ++v)
        if (w_ref[v] >= floor) expected.push_back(v);
      check(m == static_cast<int64_t>(expected.size()) && std::equal(expected.begin(), expected.end(), g.begin()),
            warp_label(*kt, "gather_at_least", n, kind, params));
      std::vector<float> warped(n);
      std::vector<double> wb(blocks);
      sv::WarpedRow out{warped.data(), wb.data(), 0.0};
      const sv::Outcome e = sv::warp_row(*kt, x.data, n, params, &out);
      bool same_w = e.error == sv::InputError::kNone && same_floats(warped.data(), warped_ref.data(), n) &&
                    bits(out.mass) == bits(out_ref.mass);
      for (int64_t b = 0; b < blocks; ++b) same_w &= bits(wb[b]) == bits(wb_ref[b]);
      check(same_w, warp_label(*kt, "warp_row", n, kind, params));
      check(warped_masses_hold(*kt, x.data, n, params, warped.data(), wb.data(), out.mass),
            warp_label(*kt, "warp_row's masses are its values' and warp_row_lazy agrees", n, kind, params));
    }
    if (n > 300) continue;
    // The definition, by brute force on the scalar path.
    std::vector<float> kept(w_ref);
    std::vector<float> z(n);
    for (int64_t v = 0; v < n; ++v) z[v] = x.data[v] / params.temperature;
    if (params.top_k > 0) {
      for (int64_t v = 0; v < n; ++v) {
        int64_t greater = 0;
        for (int64_t u = 0; u < n; ++u) greater += z[u] > z[v];
        if (greater >= params.top_k) kept[v] = 0.0f;
      }
    }
    std::vector<float> after_p(kept);
    if (params.top_p < 1.0) {
      std::vector<double> b1(blocks), b2(blocks);
      double total = 0, unused = 0;
      ref.keep_at_least(kept.data(), n, 0.0f, nullptr, b1.data(), &total, b2.data(), &unused);
      for (int64_t v = 0; v < n; ++v) {
        if (kept[v] == 0.0f) continue;
        double at_least = 0, above = 0;
        ref.keep_at_least(kept.data(), n, kept[v], nullptr, b1.data(), &at_least, b2.data(), &above);
        if (!(above < params.top_p * total)) after_p[v] = 0.0f;
      }
    }
    bool definition = true;
    for (int64_t v = 0; v < n; ++v) {
      const float want = static_cast<double>(after_p[v]) >= params.min_p ? after_p[v] : 0.0f;
      definition &= std::bit_cast<uint32_t>(want) == std::bit_cast<uint32_t>(warped_ref[v]);
    }
    check(definition, warp_label(ref, "warp_row equals the definition", n, kind, params));
  }
}

// top_p on long flat rows, where the candidates are narrowed by buckets: the kept set is
// {w >= c} for the smallest kept c, mass(w > c) < top_p * total, and for the largest
// weight c' below c, mass(w > c') >= top_p * total (canonical masses, scalar path).
void top_p_long_rows(Rng& rng, const std::vector<const sv::KernelTable*>& kts) {
  const sv::KernelTable& ref = sv::scalar_kernels();
  for (int r = 0; r < 24; ++r) {
    const int64_t n = r % 3 == 0 ? 151936 : (r % 3 == 1 ? 32000 : 5000);
    std::vector<float> x(n);
    const double spread = r % 2 == 0 ? 2.0 : 6.0;
    for (float& v : x) v = static_cast<float>(spread * (rng.uniform() - 0.5));
    if (r % 4 == 3) for (int64_t v = 0; v < n; v += 3) x[v] = x[v - v % 6];  // ties
    sv::WarpParams params;
    params.temperature = 0.9f;
    params.top_p = 0.2 + 0.79 * rng.uniform();
    std::vector<float> w(n), out(n);
    std::vector<double> blocks(sv::num_blocks(n)), b2(sv::num_blocks(n));
    int64_t top = 0;
    ref.row_argmax(x.data(), n, &top);
    double w_mass = 0;
    ref.row_weights(x.data(), n, params.temperature, x[top] / params.temperature, w.data(), blocks.data(), &w_mass);
    double total = 0, unused = 0;
    ref.keep_at_least(w.data(), n, 0.0f, nullptr, blocks.data(), &total, b2.data(), &unused);
    const double target = params.top_p * total;
    for (const sv::KernelTable* kt : kts) {
      sv::WarpedRow row{out.data(), blocks.data(), 0.0};
      const sv::Outcome e = sv::warp_row(*kt, x.data(), n, params, &row);
      float c = 2.0f, below = -1.0f;
      for (int64_t v = 0; v < n; ++v)
        if (out[v] > 0.0f) c = std::min(c, out[v]);
      bool ok = e.error == sv::InputError::kNone;
      for (int64_t v = 0; v < n; ++v) {
        ok &= (w[v] >= c) == (out[v] > 0.0f) && (out[v] == 0.0f || out[v] == w[v]);
        if (w[v] < c) below = std::max(below, w[v]);
      }
      ok &= warped_masses_hold(*kt, x.data(), n, params, out.data(), row.blocks, row.mass);
      double at_least = 0, above = 0;
      ref.keep_at_least(w.data(), n, c, nullptr, blocks.data(), &at_least, b2.data(), &above);
      ok &= above < target;
      if (below >= 0.0f) {
        ref.keep_at_least(w.data(), n, below, nullptr, blocks.data(), &at_least, b2.data(), &above);
        ok &= above >= target;
      }
      char buf[160];
      std::snprintf(buf, sizeof buf, "%s top_p on a flat row n=%lld top_p=%g", kt->name, (long long)n, params.top_p);
      check(ok, buf);
    }
  }
}

// Note [Bounded warping]'s top-p cutoff where the target sits at a tie group's running mass:
// Gaussian logits (T 0.8), the group where the mass from the top crosses a fraction f of the
// row's mass, and top_p = A (1 + d) / Z for A the canonical mass above the group, Z the
// row's, and d from 0 and +-1 ulp to +-2^-14: the exact rule keeps the group iff
// fl(top_p Z) > A. Every path's warp_row equals the warp without bounds, bit for bit, and
// Note [Refined mass range] decides some of the cutoffs the first range could not.
// An adversarial row_weight_sums: every approximate weight 7 float32 ulps (7 2^-23 <= 0.875
// kApproxWeightBound relatively) off the exact one, all one way (g_weight_skew), and block
// sums of those in float64 (far inside kWeightSumBound): the rest of the approximate weights
// err as far as the bound allows, together (subnormal ones are left exact).
int g_weight_skew = 1;
void skewed_weight_sums(const float* x, int64_t n, float temperature, float z_max, float* w, double* block_sum) {
  std::vector<float> own(w == nullptr ? n : 0);
  float* out = w == nullptr ? own.data() : w;
  std::vector<double> blocks(sv::num_blocks(n));
  double mass = 0.0;
  sv::scalar_kernels().row_weights(x, n, temperature, z_max, out, blocks.data(), &mass);
  for (int64_t v = 0; v < n; ++v)
    for (int i = 0; i < 7 && out[v] >= 0x1p-126f; ++i) out[v] = std::nextafter(out[v], g_weight_skew > 0 ? 2.0f : 0.0f);
  for (int64_t b = 0; b < sv::num_blocks(n); ++b) {
    double sum = 0.0;
    for (int64_t v = b * sv::kMassBlock; v < std::min(n, (b + 1) * sv::kMassBlock); ++v) sum += out[v];
    block_sum[b] = sum;
  }
}

void top_p_boundary_tests(Rng& rng, std::vector<const sv::KernelTable*> kts, int count) {
  const sv::KernelTable& ref = sv::scalar_kernels();
  sv::KernelTable skewed = ref;
  skewed.name = "scalar, skewed approximate weights";
  skewed.row_weight_sums = skewed_weight_sums;
  kts.push_back(&skewed);
  const int64_t refined_before = sv::refined_top_p_cutoffs();
  for (int r = 0; r < count; ++r) {
    const int64_t n = r % 3 == 0 ? 128256 : (r % 3 == 1 ? 32000 : 4000);
    std::vector<float> x(n);
    const double sigma = 2.0 + 2.0 * rng.uniform();
    for (float& v : x) {  // Box-Muller
      const double u1 = 1.0 - rng.uniform(), u2 = rng.uniform();
      v = static_cast<float>(sigma * std::sqrt(-2.0 * std::log(u1)) * std::cos(6.283185307179586 * u2));
    }
    sv::WarpParams params;
    params.temperature = 0.8f;
    const int64_t nb = sv::num_blocks(n);
    int64_t top = 0;
    ref.row_argmax(x.data(), n, &top);
    std::vector<float> w(n);
    std::vector<double> blocks(nb), above_blocks(nb);
    double unused = 0.0, z = 0.0, a = 0.0;
    ref.row_weights(x.data(), n, params.temperature, x[top] / params.temperature, w.data(), blocks.data(), &unused);
    ref.keep_at_least(w.data(), n, 0.0f, nullptr, blocks.data(), &z, above_blocks.data(), &unused);
    std::vector<float> sorted(w);
    std::sort(sorted.begin(), sorted.end(), std::greater<float>());
    const double f = 0.5 + 0.45 * rng.uniform();
    double running = 0.0;
    float group = sorted[0];
    for (const float v : sorted) {
      if (running >= f * z) break;
      group = v;
      running += v;
    }
    ref.keep_at_least(w.data(), n, group, nullptr, blocks.data(), &unused, above_blocks.data(), &a);
    if (!(a > 0.0)) continue;
    const sv::KernelTable exact = without_bounds(ref);
    std::vector<float> want(n), got(n);
    std::vector<double> want_blocks(nb), got_blocks(nb);
    for (const double d : {0.0, 0x1p-53, -0x1p-53, 0x1p-40, -0x1p-40, 0x1p-30, -0x1p-30, 0x1p-24, -0x1p-24, 0x1p-21,
                           -0x1p-21, 0x1p-19, -0x1p-19, 0x1p-17, -0x1p-17, 0x1p-14, -0x1p-14}) {
      params.top_p = std::min(1.0, a * (1.0 + d) / z);
      sv::WarpedRow out_ref{want.data(), want_blocks.data(), 0.0};
      sv::warp_row(exact, x.data(), n, params, &out_ref);
      g_weight_skew = r % 2 == 0 ? 1 : -1;
      for (const sv::KernelTable* kt : kts) {
        sv::WarpedRow out{got.data(), got_blocks.data(), 0.0};
        sv::forget_top_p_misses();
        const sv::Outcome e = sv::warp_row(*kt, x.data(), n, params, &out);
        bool same = e.error == sv::InputError::kNone && same_floats(got.data(), want.data(), n) &&
                    bits(out.mass) == bits(out_ref.mass);
        for (int64_t b = 0; b < nb; ++b) same &= bits(got_blocks[b]) == bits(want_blocks[b]);
        char buf[200];
        std::snprintf(buf, sizeof buf, "%s top_p at a group's running mass n=%lld sigma=%.2f f=%.3f d=%g", kt->name,
                      (long long)n, sigma, f, d);
        check(same, buf);
      }
    }
  }
  const int64_t refined = sv::refined_top_p_cutoffs() - refined_before;
  check(count < 6 || refined > 0, "the refined mass range decided top-p cutoffs (" + std::to_string(refined) + ")");
}

// sample_round and accept_logits_round on every path: the same outcomes, rows after the
// deciding one unreadable, bad rows reported where they are.
void logits_round_tests(Rng& rng, const std::vector<const sv::KernelTable*>& kts, int count, int64_t max_n) {
  for (int r = 0; r < count; ++r) {
    const int64_t k = rng.below(6);
    const int64_t n = 1 + rng.below(max_n);
    PagedRows target(k + 1, n), draft(k, n);
    const int kind = static_cast<int>(rng.below(5));
    for (int64_t i = 0; i <= k; ++i) {
      std::vector<float> v = make_logits(rng, n, kind);
      v[rng.below(n)] = 1.0f;  // a finite value in every row
      std::memcpy(target.row(i), v.data(), n * 4);
    }
    const sv::WarpParams params = random_params(rng, n);
    const int64_t d = rng.below(k + 1);
    std::vector<int64_t> tokens(k);
    for (int64_t i = 0; i < k; ++i) {
      std::vector<float> v = make_logits(rng, n, kind);
      v[rng.below(n)] = 1.0f;
      std::memcpy(draft.row(i), i < d ? target.row(i) : v.data(), n * 4);
      int64_t best = 0;
      sv::scalar_kernels().row_argmax(target.row(i), n, &best);
      tokens[i] = i < d ? best : rng.below(n);
    }
    std::vector<double> u(k + 1);
    for (double& x : u) x = rng.uniform();
    const sv::Outcome ref = sv::accept_logits_round(sv::scalar_kernels(), target.view(), draft.view(), tokens.data(),
                                                    u.data(), k, n, params);
    const sv::Outcome ref_s = sv::sample_round(sv::scalar_kernels(), target.row(0), n, params, u[0]);
    check(ref.error == sv::InputError::kNone && ref.n_accepted >= d,
          "scalar logits round " + std::to_string(r) + " accepts the first d = " + std::to_string(d) + " positions");
    const sv::Rows one_hot{nullptr, 0};
    const sv::Outcome ref_o = sv::accept_logits_round(sv::scalar_kernels(), target.view(), one_hot, tokens.data(),
                                                      u.data(), k, n, params);
    for (const sv::Rows& d_rows : {draft.view(), one_hot}) {
      const sv::Outcome ref_b = sv::accept_logits_round(sv::scalar_kernels(), target.view(), d_rows, tokens.data(),
                                                        u.data(), k, n, params, sv::Method::kBlock);
      check(ref_b.error == sv::InputError::kNone && ref_b.token >= 0 && ref_b.token < n,
            "scalar block logits round " + std::to_string(r));
      for (const sv::KernelTable* kt : kts) {
        const sv::Outcome b = sv::accept_logits_round(*kt, target.view(), d_rows, tokens.data(), u.data(), k, n,
                                                      params, sv::Method::kBlock);
        check(b.error == sv::InputError::kNone && b.n_accepted == ref_b.n_accepted && b.token == ref_b.token,
              std::string(kt->name) + " block logits round " + std::to_string(r) + (d_rows.data ? "" : " one-hot"));
      }
    }
    target.lock_from(std::max(ref.n_accepted, ref_o.n_accepted) + 1);
    draft.lock_from(ref.n_accepted + 1);
    for (const sv::KernelTable* kt : kts) {
      char buf[200];
      std::snprintf(buf, sizeof buf, "%s logits round %d k=%lld n=%lld kind=%d", kt->name, r, (long long)k,
                    (long long)n, kind);
      const sv::Outcome a = sv::accept_logits_round(*kt, target.view(), draft.view(), tokens.data(), u.data(), k, n, params);
      check(a.error == sv::InputError::kNone && a.n_accepted == ref.n_accepted && a.token == ref.token,
            std::string(buf) + " accept_logits");
      const sv::Outcome o = sv::accept_logits_round(*kt, target.view(), one_hot, tokens.data(), u.data(), k, n, params);
      check(o.error == sv::InputError::kNone && o.n_accepted == ref_o.n_accepted && o.token == ref_o.token,
            std::string(buf) + " accept_logits one-hot");
      const sv::Outcome s = sv::sample_round(*kt, target.row(0), n, params, u[0]);
      check(s.error == sv::InputError::kNone && s.token == ref_s.token && s.token >= 0 && s.token < n,
            std::string(buf) + " sample");
    }
  }
  // Malformed rows: NaN, +inf, all -inf, and a logit the temperature makes overflow.
  const float inf = std::numeric_limits<float>::infinity();
  struct Bad { float value; float temperature; sv::InputError kind; };
  const Bad bads[] = {{std::numeric_limits<float>::quiet_NaN(), 1.0f, sv::InputError::kNaN},
                      {inf, 1.0f, sv::InputError::kInfinite},
                      {-inf, 1.0f, sv::InputError::kNoFinite},
                      {3e38f, 0.5f, sv::InputError::kOverflow}};
  for (const Bad& bad : bads) {
    for (const sv::KernelTable* kt : kts) {
      std::vector<float> row(300, bad.kind == sv::InputError::kNoFinite ? -inf : 0.5f);
      row[77] = bad.value;
      sv::WarpParams params;
      params.temperature = bad.temperature;
      std::vector<float> out(300);
      std::vector<double> blocks(sv::num_blocks(300));
      sv::WarpedRow w{out.data(), blocks.data(), 0.0};
      const sv::Outcome e = sv::warp_row(*kt, row.data(), 300, params, &w);
      check(e.error == bad.kind && (bad.kind == sv::InputError::kNoFinite || e.col == 77),
            std::string(kt->name) + " warp_row reports a malformed row");
    }
  }
}

// ---- half rows (Note [Half rows]) -----------------------------------------------------------

// The halves of float32 values: bfloat16 by truncation, binary16 by the nearest value with
// ties to even (overflow to inf, NaN kept), so every special a float row holds has a half.
uint16_t to_bf16(float x) { return static_cast<uint16_t>(std::bit_cast<uint32_t>(x) >> 16); }
uint16_t to_f16(float x) {
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

bool same_bits_floats(const float* a, const float* b, int64_t n) {
  return std::memcmp(a, b, n * sizeof(float)) == 0;
}

// Every one of the 65536 halves: the scalar widening against the value's definition, and every
// path's widening against the scalar one, bit for bit (NaNs included).
void widen_exhaustive(const std::vector<const sv::KernelTable*>& kts) {
  std::vector<uint16_t> all(65536);
  for (uint32_t h = 0; h < 65536; ++h) all[h] = static_cast<uint16_t>(h);
  bool defined = true;
  for (uint32_t h = 0; h < 65536; ++h) {
    const int sign = h >> 15, e = (h >> 10) & 31, m = h & 1023;
    const float x = sv::f16_value(static_cast<uint16_t>(h));
    double want;
    if (e == 31) {
      defined &= m == 0 ? (std::isinf(x) && std::signbit(x) == (sign != 0))
                        : (std::isnan(x) && (std::bit_cast<uint32_t>(x) & 0x400000u) != 0);
      continue;
    }
    want = e == 0 ? std::ldexp(static_cast<double>(m), -24) : std::ldexp(1.0 + m / 1024.0, e - 15);
    defined &= static_cast<double>(x) == (sign ? -want : want) && std::signbit(x) == (sign != 0);
    defined &= sv::bf16_value(static_cast<uint16_t>(h)) == std::bit_cast<float>(h << 16) ||
               std::isnan(std::bit_cast<float>(h << 16));
  }
  check(defined, "f16_value is binary16's value for every half");
  std::vector<float> ref16(65536), refbf(65536), got(65536);
  sv::scalar_kernels().widen_f16(all.data(), 65536, ref16.data());
  sv::scalar_kernels().widen_bf16(all.data(), 65536, refbf.data());
  for (const sv::KernelTable* kt : kts) {
    for (int64_t off : {0, 1, 3, 7}) {  // misaligned starts and every tail length
      kt->widen_f16(all.data() + off, 65536 - off, got.data());
      check(same_bits_floats(got.data(), ref16.data() + off, 65536 - off),
            std::string(kt->name) + " widen_f16, all halves, offset " + std::to_string(off));
      kt->widen_bf16(all.data() + off, 65536 - off, got.data());
      check(same_bits_floats(got.data(), refbf.data() + off, 65536 - off),
            std::string(kt->name) + " widen_bf16, all halves, offset " + std::to_string(off));
    }
  }
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

// typed_argmax, typed_mass and typed_residual on half rows equal the float32 kernels on the
// widened rows, on every path, over the row-length sweep and the special fills.
void half_parity(Rng& rng, const std::vector<const sv::KernelTable*>& kts, int64_t n) {
  const sv::KernelTable& ref = sv::scalar_kernels();
  for (int fill = 0; fill < kFillCount; ++fill) {
    const std::vector<float> row = make_row(rng, n, fill);
    const std::vector<float> other = make_row(rng, n, kUniform);
    for (const sv::Elem type : {sv::Elem::kF16, sv::Elem::kBF16}) {
      std::vector<uint16_t> h(n), g(n);
      for (int64_t v = 0; v < n; ++v) {
        h[v] = type == sv::Elem::kF16 ? to_f16(row[v]) : to_bf16(row[v]);
        g[v] = type == sv::Elem::kF16 ? to_f16(other[v]) : to_bf16(other[v]);
      }
      std::vector<float> wide(n), wide_other(n);
      for (int64_t v = 0; v < n; ++v) {
        wide[v] = type == sv::Elem::kF16 ? sv::f16_value(h[v]) : sv::bf16_value(h[v]);
        wide_other[v] = type == sv::Elem::kF16 ? sv::f16_value(g[v]) : sv::bf16_value(g[v]);
      }
      const bool at_end = rng.below(2) == 1;
      const GuardedHalves gh(h, at_end), go(g, !at_end);
      const sv::RowRef hr(gh.data, type), gr(go.data, type);
      int64_t ref_index = -1;
      const bool ref_ok = ref.row_argmax(wide.data(), n, &ref_index);
      std::vector<double> ref_blocks(sv::num_blocks(n)), blocks(sv::num_blocks(n));
      double ref_mass = 0.0, mass = 0.0;
      const bool ref_mass_ok = ref.row_mass(wide.data(), n, ref_blocks.data(), &ref_mass);
      const char* tname = type == sv::Elem::kF16 ? "f16" : "bf16";
      for (const sv::KernelTable* kt : kts) {
        char buf[160];
        std::snprintf(buf, sizeof buf, "%s %s rows n=%lld fill=%s", kt->name, tname, (long long)n, fill_name(fill));
        int64_t index = -1;
        const bool ok = sv::typed_argmax(*kt, hr, n, &index);
        check(ok == ref_ok && (!ok || index == ref_index), std::string(buf) + " typed_argmax");
        const bool mass_ok = sv::typed_mass(*kt, hr, n, blocks.data(), &mass);
        check(mass_ok == ref_mass_ok && (!mass_ok || (bits(mass) == bits(ref_mass) &&
                                                      std::memcmp(blocks.data(), ref_blocks.data(), blocks.size() * 8) == 0)),
              std::string(buf) + " typed_mass");
        // A residual of a half row against a float32 row and against a half row.
        if (ref_mass_ok && ref_mass > 0.0) {
          std::vector<double> rb_ref(sv::num_blocks(n)), rb(sv::num_blocks(n));
          double r_ref = 0.0, r = 0.0;
          float a = 0.0f, b = 0.0f;
          double other_mass = 0.0;
          ref.row_mass(wide_other.data(), n, rb_ref.data(), &other_mass);
          if (other_mass > 0.0) {
            sv::residual_scales(ref_mass, other_mass, &a, &b);
            ref.residual_mass(wide.data(), wide_other.data(), a, b, n, rb_ref.data(), &r_ref);
            sv::typed_residual(*kt, hr, gr, a, b, n, rb.data(), &r);
            check(bits(r) == bits(r_ref) && std::memcmp(rb.data(), rb_ref.data(), rb.size() * 8) == 0,
                  std::string(buf) + " typed_residual half-half");
            sv::typed_residual(*kt, hr, sv::RowRef(wide_other.data()), a, b, n, rb.data(), &r);
            check(bits(r) == bits(r_ref), std::string(buf) + " typed_residual half-float");
          }
        }
        std::vector<float> out(n);
        const float* f = sv::as_floats(*kt, hr, n, out.data());
        check(same_bits_floats(f, wide.data(), n), std::string(buf) + " as_floats");
      }
    }
  }
}

// Whole rounds on half rows (target and draft of different types) equal the rounds on the
// rows widened to float32, on every path: accept (token and block, with draft rows and
// one-hot), verify_greedy, and accept_logits and sample on logits rows.
void half_round_tests(Rng& rng, const std::vector<const sv::KernelTable*>& kts, int count, int64_t max_n) {
  const sv::Rows none{nullptr, 0};
  for (int r = 0; r < count; ++r) {
    const int64_t k = rng.below(6);
    const int64_t n = 1 + rng.below(max_n);
    const sv::Elem tt = rng.below(2) ? sv::Elem::kF16 : sv::Elem::kBF16;
    const sv::Elem dt = rng.below(3) == 0 ? sv::Elem::kF32 : (rng.below(2) ? sv::Elem::kF16 : sv::Elem::kBF16);
    const auto half_of = [](sv::Elem t, float x) { return t == sv::Elem::kF16 ? to_f16(x) : to_bf16(x); };
    const auto value_of = [](sv::Elem t, uint16_t h) { return t == sv::Elem::kF16 ? sv::f16_value(h) : sv::bf16_value(h); };
    // Probabilities (positive mass in every row) and logits (a finite value in every row).
    std::vector<uint16_t> tp((k + 1) * n), tl((k + 1) * n), dh(k * n), dlh(k * n);
    std::vector<float> tpw((k + 1) * n), tlw((k + 1) * n), dpw(k * n), dlw(k * n);
    for (int64_t i = 0; i <= k; ++i) {
      std::vector<float> v = make_row(rng, n, rng.below(2) ? kUniform : kSpiky);
      v[rng.below(n)] = 0.5f;
      std::vector<float> l = make_row(rng, n, kLogits);
      for (int64_t j = 0; j < n; ++j) {
        tp[i * n + j] = half_of(tt, v[j]);
        tpw[i * n + j] = value_of(tt, tp[i * n + j]);
        tl[i * n + j] = half_of(tt, l[j]);
        tlw[i * n + j] = value_of(tt, tl[i * n + j]);
      }
    }
    for (int64_t i = 0; i < k; ++i) {
      std::vector<float> v = make_row(rng, n, kUniform);
      v[rng.below(n)] = 0.5f;
      std::vector<float> l = make_row(rng, n, kLogits);
      for (int64_t j = 0; j < n; ++j) {
        if (dt == sv::Elem::kF32) {
          dpw[i * n + j] = v[j];
          dlw[i * n + j] = l[j];
        } else {
          dh[i * n + j] = half_of(dt, v[j]);
          dpw[i * n + j] = value_of(dt, dh[i * n + j]);
          dlh[i * n + j] = half_of(dt, l[j]);
          dlw[i * n + j] = value_of(dt, dlh[i * n + j]);
        }
      }
    }
    std::vector<int64_t> tokens(k);
    for (int64_t i = 0; i < k; ++i) {
      int64_t best = 0;
      sv::scalar_kernels().row_argmax(tpw.data() + i * n, n, &best);
      tokens[i] = rng.below(2) ? best : rng.below(n);
    }
    std::vector<double> u(k + 1);
    for (double& x : u) x = rng.uniform();
    const sv::Rows tp_rows{tp.data(), n, tt}, tl_rows{tl.data(), n, tt};
    const sv::Rows dp_rows = dt == sv::Elem::kF32 ? sv::Rows{dpw.data(), n} : sv::Rows{dh.data(), n, dt};
    const sv::Rows dl_rows = dt == sv::Elem::kF32 ? sv::Rows{dlw.data(), n} : sv::Rows{dlh.data(), n, dt};
    const sv::Rows tpw_rows{tpw.data(), n}, tlw_rows{tlw.data(), n}, dpw_rows{dpw.data(), n}, dlw_rows{dlw.data(), n};
    sv::WarpParams params;
    params.temperature = 0.8f;
    params.top_p = rng.below(2) ? 0.9 : 1.0;
    params.top_k = rng.below(3) == 0 ? 5 : 0;
    const sv::KernelTable& ref = sv::scalar_kernels();
    struct Want { const char* what; sv::Outcome out; };
    std::vector<Want> want;
    for (const sv::Method m : {sv::Method::kToken, sv::Method::kBlock}) {
      want.push_back({"accept", sv::accept_round(ref, tpw_rows, dpw_rows, tokens.data(), u.data(), k, n, m)});
      want.push_back({"accept one-hot", sv::accept_round(ref, tpw_rows, none, tokens.data(), u.data(), k, n, m)});
      want.push_back({"accept_logits", sv::accept_logits_round(ref, tlw_rows, dlw_rows, tokens.data(), u.data(), k, n, params, m)});
      want.push_back({"accept_logits one-hot", sv::accept_logits_round(ref, tlw_rows, none, tokens.data(), u.data(), k, n, params, m)});
    }
    want.push_back({"verify_greedy", sv::verify_greedy_round(ref, tpw_rows, tokens.data(), k, n)});
    want.push_back({"sample", sv::sample_round(ref, tlw.data(), n, params, u[0])});
    for (const sv::KernelTable* kt : kts) {
      std::vector<sv::Outcome> got;
      for (const sv::Method m : {sv::Method::kToken, sv::Method::kBlock}) {
        got.push_back(sv::accept_round(*kt, tp_rows, dp_rows, tokens.data(), u.data(), k, n, m));
        got.push_back(sv::accept_round(*kt, tp_rows, none, tokens.data(), u.data(), k, n, m));
        got.push_back(sv::accept_logits_round(*kt, tl_rows, dl_rows, tokens.data(), u.data(), k, n, params, m));
        got.push_back(sv::accept_logits_round(*kt, tl_rows, none, tokens.data(), u.data(), k, n, params, m));
      }
      got.push_back(sv::verify_greedy_round(*kt, tp_rows, tokens.data(), k, n));
      got.push_back(sv::sample_round(*kt, sv::RowRef(tl.data(), tt), n, params, u[0]));
      for (size_t c = 0; c < want.size(); ++c) {
        const bool same = got[c].error == want[c].out.error && got[c].n_accepted == want[c].out.n_accepted &&
                          got[c].token == want[c].out.token;
        check(same, std::string(kt->name) + " half round " + std::to_string(r) + " " + want[c].what +
                        " n=" + std::to_string(n));
      }
    }
  }
}

// ---- Note [Mass bounds] ---------------------------------------------------------------------

// The rules alone (the library's exact_kernels, what SPEC_VERIFY_EXACT=1 runs): every
// optional shortcut kernel out, so every position is read exactly.
sv::KernelTable without_bounds(const sv::KernelTable& kt) { return sv::exact_kernels(kt); }

// Rounds whose uniforms sit at the acceptance boundary u = p(t) Q / (q(t) P) (and a few
// ulps either side, and for one-hot drafts at p(t) / P) give the same outcomes with the
// bound as without it, on every path.
void mass_bound_tests(Rng& rng, const std::vector<const sv::KernelTable*>& kts, int count, int64_t max_n) {
  const sv::Rows none{nullptr, 0};
  for (int r = 0; r < count; ++r) {
    const int64_t k = 1 + rng.below(5);
    const int64_t n = 1 + rng.below(max_n);
    std::vector<float> p((k + 1) * n), q(k * n);
    const int fills[] = {kUniform, kSpiky, kSparse, kHuge, kDenormal};
    for (int64_t i = 0; i <= k; ++i) {
      std::vector<float> v = make_row(rng, n, fills[rng.below(5)]);
      v[rng.below(n)] = rng.below(2) ? 0.5f : 3e30f;
      std::copy(v.begin(), v.end(), p.begin() + i * n);
    }
    for (int64_t i = 0; i < k; ++i) {
      std::vector<float> v = make_row(rng, n, fills[rng.below(5)]);
      v[rng.below(n)] = 0.25f;
      std::copy(v.begin(), v.end(), q.begin() + i * n);
    }
    std::vector<int64_t> tokens(k);
    std::vector<double> u(k + 1), u1(k + 1);
    std::vector<double> blocks(sv::num_blocks(n));
    for (int64_t i = 0; i < k; ++i) {
      int64_t best = 0;
      sv::scalar_kernels().row_argmax(p.data() + i * n, n, &best);
      tokens[i] = rng.below(3) ? best : rng.below(n);
      double P = 0, Q = 0;
      sv::scalar_kernels().row_mass(p.data() + i * n, n, blocks.data(), &P);
      sv::scalar_kernels().row_mass(q.data() + i * n, n, blocks.data(), &Q);
      const double pt = p[i * n + tokens[i]], qt = q[i * n + tokens[i]];
      const int64_t nudge = rng.below(7) - 3;  // ulps from the boundary
      const double b = qt > 0 ? pt * Q / (qt * P) : 0.5, b1 = pt / P;
      u[i] = std::min(0x1.fffffffffffffp-1, std::max(0.0, std::nextafter(b, nudge < 0 ? 0.0 : 2.0) * 1.0));
      u1[i] = std::min(0x1.fffffffffffffp-1, std::max(0.0, b1));
      for (int64_t z = 0; z < std::abs(nudge); ++z) {
        u[i] = std::min(0x1.fffffffffffffp-1, std::nextafter(u[i], nudge < 0 ? 0.0 : 2.0));
        u1[i] = std::min(0x1.fffffffffffffp-1, std::nextafter(u1[i], nudge < 0 ? 0.0 : 2.0));
      }
    }
    u[k] = u1[k] = rng.uniform();
    const sv::Rows t_rows{p.data(), n}, d_rows{q.data(), n};
    for (const sv::KernelTable* kt : kts) {
      const sv::KernelTable exact = without_bounds(*kt);
      const sv::Outcome a = sv::accept_round(*kt, t_rows, d_rows, tokens.data(), u.data(), k, n);
      const sv::Outcome b = sv::accept_round(exact, t_rows, d_rows, tokens.data(), u.data(), k, n);
      const sv::Outcome c = sv::accept_round(*kt, t_rows, none, tokens.data(), u1.data(), k, n);
      const sv::Outcome d = sv::accept_round(exact, t_rows, none, tokens.data(), u1.data(), k, n);
      check(a.error == b.error && a.n_accepted == b.n_accepted && a.token == b.token,
            std::string(kt->name) + " bounded accept equals exact at the boundary, round " + std::to_string(r));
      check(c.error == d.error && c.n_accepted == d.n_accepted && c.token == d.token,
            std::string(kt->name) + " bounded one-hot accept equals exact at the boundary, round " + std::to_string(r));
    }
  }
}

// ---- Note [Bounded sampling] ------------------------------------------------------------------

// The table without the float32 shortcuts: canonical masses everywhere.
sv::KernelTable exact_only(const sv::KernelTable& kt) { return without_bounds(kt); }

// A table whose residual_block_sums counts its calls: a rejection drawn from the sums
// guessed during the pass over p and q never calls it.
const sv::KernelTable* g_counted = nullptr;
int64_t g_residual_sums_calls = 0;
void counted_residual_sums(const float* p, const float* q, float a, float b, int64_t n, double* sums) {
  ++g_residual_sums_calls;
  g_counted->residual_block_sums(p, q, a, b, n, sums);
}

// A uniform whose threshold u * T lands on a canonical running sum of the draw (Note
// [Blocked sampling]), give or take up to two ulps: the end of the blocks before a random
// one (if they hold mass), or the in-block running sum at a random positive value of it. blocks: the canonical block
// masses, total their sum; value(v) the row's values.
template <class Value>
double boundary_uniform(Rng& rng, const std::vector<double>& blocks, double total, int64_t n, Value value) {
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

// bounded_sample_index against sample_index on the canonical masses, on every path's block
// sums: an answer is always sample_index's, and a threshold on a running sum (a boundary
// uniform) is never answered (the fallback fires). Then whole rounds with the last row's
// draw (all accepted) and the correction's draw (rejected at 0) at such boundaries and at
// random uniforms: the same outcomes as with canonical masses only, and the fallback counted.
void bounded_sampling_tests(Rng& rng, const std::vector<const sv::KernelTable*>& kts, int count, int64_t max_n) {
  const sv::KernelTable& ref = sv::scalar_kernels();
  int64_t answered = 0;
  for (int r = 0; r < count; ++r) {
    const int64_t n = 1 + rng.below(max_n);
    const int fills[] = {kUniform, kSpiky, kSparse, kDenormal, kHuge, kConstant, kTies};
    const int fill = fills[rng.below(7)];
    std::vector<float> row = make_row(rng, n, fill);
    row[rng.below(n)] = fill == kHuge ? 1e30f : 0.5f;  // some mass
    const int64_t nb = sv::num_blocks(n);
    std::vector<double> blocks(nb), approx(nb);
    double total = 0.0;
    check(ref.row_mass(row.data(), n, blocks.data(), &total) && total > 0.0, "bounded sampling: a valid row");
    const auto value = [&row](int64_t v) { return row[v]; };
    for (int c = 0; c < 4; ++c) {
      const bool boundary = c >= 2;
      const double u = boundary ? boundary_uniform(rng, blocks, total, n, value) : rng.uniform();
      const int64_t want = sv::sample_index(blocks.data(), n, u * total, value);
      for (const sv::KernelTable* kt : kts) {
        if (kt->row_block_sums == nullptr || !kt->row_block_sums(row.data(), n, approx.data())) continue;
        int64_t got = -7;
        const bool ok = sv::bounded_sample_index(approx.data(), n, u, value, &got);
        answered += ok;
        char buf[200];
        std::snprintf(buf, sizeof buf, "%s bounded draw n=%lld fill=%s u=%a %s", kt->name, (long long)n, fill_name(fill),
                      u, boundary ? "at a running sum" : "random");
        check(!ok || got == want, std::string(buf) + ": sample_index's answer");
        if (boundary) check(!ok, std::string(buf) + ": not answered");
      }
    }
  }
  check(answered > count, "bounded sampling answers most random draws (" + std::to_string(answered) + ")");

  // Rounds: K target rows accepted for sure (draft row = target row, token its argmax), or
  // rejected at 0 (p_0(t_0) = 0).
  int64_t guessed_draws = 0;
  for (int r = 0; r < count / 4; ++r) {
    const int64_t k = 1 + rng.below(4);
    const int64_t n = 2 + rng.below(max_n);
    const int fills[] = {kUniform, kSpiky, kSparse, kDenormal};
    std::vector<float> p((k + 1) * n), q(k * n);
    for (int64_t i = 0; i <= k; ++i) {
      std::vector<float> v = make_row(rng, n, fills[rng.below(4)]);
      v[rng.below(n)] = 0.5f;
      std::copy(v.begin(), v.end(), p.begin() + i * n);
    }
    const bool reject = rng.below(2) == 0;
    // Rows of mass near 1 in half the rounds: the residual's factors are then within a few
    // ulps of 1 and a rejection tries the sums guessed during the pass over p and q.
    const bool normalised = rng.below(2) == 0;
    const auto normalise = [&](std::vector<float>& v) {
      double sum = 0.0;
      for (float x : v) sum += x;
      for (float& x : v) x = static_cast<float>(x / sum);
    };
    if (normalised) {
      for (int64_t i = 0; i <= k; ++i) {
        std::vector<float> v(p.begin() + i * n, p.begin() + (i + 1) * n);
        normalise(v);
        std::copy(v.begin(), v.end(), p.begin() + i * n);
      }
    }
    std::vector<int64_t> tokens(k);
    for (int64_t i = 0; i < k; ++i) {
      std::vector<float> v(p.begin() + i * n, p.begin() + (i + 1) * n);
      if (reject && i == 0) {
        v = make_row(rng, n, kUniform);
        v[rng.below(n)] = 0.5f;
        if (normalised) normalise(v);
      }
      std::copy(v.begin(), v.end(), q.begin() + i * n);
      int64_t best = 0;
      ref.row_argmax(v.data(), n, &best);
      tokens[i] = best;
    }
    if (reject) p[tokens[0]] = 0.0f;
    // The draw's canonical masses: row K, or the residual at 0.
    const int64_t nb = sv::num_blocks(n);
    std::vector<double> blocks(nb);
    double total = 0.0;
    std::vector<float> drawn(n);
    if (reject) {
      double P = 0, Q = 0;
      ref.row_mass(p.data(), n, blocks.data(), &P);
      ref.row_mass(q.data(), n, blocks.data(), &Q);
      float a, b;
      sv::residual_scales(P, Q, &a, &b);
      for (int64_t v = 0; v < n; ++v) drawn[v] = sv::residual_value(p[v], q[v], a, b);
    } else {
      std::copy(p.begin() + k * n, p.end(), drawn.begin());
    }
    ref.row_mass(drawn.data(), n, blocks.data(), &total);
    if (!(total > 0.0)) continue;  // a residual without mass: the draw is from p, exactly
    std::vector<double> u(k + 1, 0.0);
    for (int64_t i = 0; i < k; ++i) u[i] = rng.uniform();
    const bool boundary = rng.below(2) == 0;
    u[k] = boundary ? boundary_uniform(rng, blocks, total, n, [&drawn](int64_t v) { return drawn[v]; })
                    : rng.uniform();
    const sv::Rows t_rows{p.data(), n}, d_rows{q.data(), n};
    for (const sv::KernelTable* kt : kts) {
      const sv::KernelTable exact = exact_only(*kt);
      sv::KernelTable counted = *kt;
      if (kt->residual_block_sums != nullptr) {
        g_counted = kt;
        counted.residual_block_sums = counted_residual_sums;
      }
      // Note [Bounded rejection] would decide most rejections before any pass over the
      // canonical masses; without row_block_sums the guessed residual sums of that pass
      // draw them (a second round, whose outcome is checked the same way).
      sv::KernelTable guessing = counted;
      guessing.row_block_sums = nullptr;
      const int64_t calls = g_residual_sums_calls;
      const sv::Outcome g = sv::accept_round(guessing, t_rows, d_rows, tokens.data(), u.data(), k, n);
      guessed_draws += kt->row_mass_pair_guess != nullptr && reject && !boundary && g_residual_sums_calls == calls;
      const int64_t before = sv::bounded_draw_fallbacks();
      const sv::Outcome a = sv::accept_round(counted, t_rows, d_rows, tokens.data(), u.data(), k, n);
      const int64_t fallbacks = sv::bounded_draw_fallbacks() - before;
      const sv::Outcome b = sv::accept_round(exact, t_rows, d_rows, tokens.data(), u.data(), k, n);
      char buf[200];
      std::snprintf(buf, sizeof buf, "%s bounded round %d k=%lld n=%lld %s, u_K %s", kt->name, r, (long long)k,
                    (long long)n, reject ? "rejected at 0" : "all accepted", boundary ? "at a running sum" : "random");
      check(a.error == b.error && a.n_accepted == b.n_accepted && a.token == b.token &&
                a.n_accepted == (reject ? 0 : k),
            std::string(buf) + ": the exact outcome");
      check(g.error == b.error && g.n_accepted == b.n_accepted && g.token == b.token,
            std::string(buf) + ": the exact outcome from the guessed sums");
      const bool has = reject ? kt->residual_block_sums != nullptr : kt->row_block_sums != nullptr;
      if (has && boundary) check(fallbacks == 1, std::string(buf) + ": the fallback fired");
      if (!has) check(fallbacks == 0, std::string(buf) + ": nothing to fall back from");
    }
  }

  if (count >= 80 && std::any_of(kts.begin(), kts.end(), [](auto* kt) { return kt->row_mass_pair_guess != nullptr; }))
    check(guessed_draws > 0, "rejections drawn from the guessed residual sums (" + std::to_string(guessed_draws) + ")");

  // One-hot drafts: a position decided and its correction drawn from one float32 pass.
  // Rejected at 0 (u_0 well above p(t) / P) with u_K at a running sum of p without t, or
  // random; or u_0 on the acceptance boundary p(t) / P (the decision falls back).
  const sv::Rows none{nullptr, 0};
  int64_t boundary_decisions = 0;
  for (int r = 0; r < count / 4; ++r) {
    const int64_t k = 1 + rng.below(4);
    const int64_t n = 2 + rng.below(max_n);
    const int fills[] = {kUniform, kSpiky, kSparse, kDenormal};
    std::vector<float> p((k + 1) * n);
    for (int64_t i = 0; i <= k; ++i) {
      std::vector<float> v = make_row(rng, n, fills[rng.below(4)]);
      v[rng.below(n)] = 0.5f;
      v[rng.below(n)] = 0.25f;
      // Masses about 1/2: a boundary uniform p(t) / P is then above p(t), where the round's
      // first guess (mass 1) sees a likely rejection and takes the block sums.
      double sum = 0.0;
      for (float x : v) sum += x;
      for (float& x : v) x = static_cast<float>(x * (0.5 / sum));
      std::copy(v.begin(), v.end(), p.begin() + i * n);
    }
    std::vector<int64_t> tokens(k);
    for (int64_t i = 0; i < k; ++i) tokens[i] = rng.below(n);
    const int64_t nb = sv::num_blocks(n);
    std::vector<double> blocks(nb);
    double P = 0.0;
    ref.row_mass(p.data(), n, blocks.data(), &P);
    const double pt = p[tokens[0]];
    const int mode = static_cast<int>(rng.below(3));  // 0 random draw, 1 draw at a running sum, 2 decision at the boundary
    std::vector<double> u(k + 1);
    for (double& x : u) x = rng.uniform();
    if (mode == 2) {
      if (!(pt > 0.0)) continue;  // p(t) = 0: rejected whatever u, no boundary
      u[0] = std::min(pt / P, 0x1.fffffffffffffp-1);
      const int64_t nudge = rng.below(5) - 2;
      for (int64_t z = 0; z < std::abs(nudge); ++z) u[0] = std::nextafter(u[0], nudge < 0 ? 0.0 : 1.0);
    } else {
      if (!(pt / P < 0.99)) continue;
      u[0] = 0.995;  // rejected
      std::vector<float> without(p.begin(), p.begin() + n);
      without[tokens[0]] = 0.0f;
      double rest = 0.0;
      ref.row_mass(without.data(), n, blocks.data(), &rest);
      if (!(rest > 0.0)) continue;
      if (mode == 1) u[k] = boundary_uniform(rng, blocks, rest, n, [&without](int64_t v) { return without[v]; });
    }
    const sv::Rows t_rows{p.data(), n};
    for (const sv::KernelTable* kt : kts) {
      const sv::KernelTable exact = exact_only(*kt);
      const int64_t before = sv::bounded_draw_fallbacks();
      const sv::Outcome a = sv::accept_round(*kt, t_rows, none, tokens.data(), u.data(), k, n);
      const int64_t fallbacks = sv::bounded_draw_fallbacks() - before;
      const sv::Outcome b = sv::accept_round(exact, t_rows, none, tokens.data(), u.data(), k, n);
      char buf[200];
      std::snprintf(buf, sizeof buf, "%s bounded one-hot round %d k=%lld n=%lld mode %d", kt->name, r, (long long)k,
                    (long long)n, mode);
      check(a.error == b.error && a.n_accepted == b.n_accepted && a.token == b.token &&
                (mode == 2 || a.n_accepted == 0),
            std::string(buf) + ": the exact outcome");
      // Position 0 goes to the block sums when its acceptance looks unlikely from mass 1
      // (the first guess of Note [Mass bounds]).
      const bool tried = !(u[0] * 1.0 < pt);
      if (kt->row_block_sums != nullptr && mode >= 1 && tried) check(fallbacks >= 1, std::string(buf) + ": the fallback fired");
      boundary_decisions += kt->row_block_sums != nullptr && mode == 2 && tried;
    }
  }
  if (count >= 80)  // enough rounds for some to land there
    check(boundary_decisions > 0, "bounded one-hot decisions at the boundary were tried (" +
                                      std::to_string(boundary_decisions) + ")");
}

// ---- Note [Bounded rejection] ------------------------------------------------------------------

// A table whose canonical pair passes count their calls: a position Note [Bounded
// rejection] decides makes none.
const sv::KernelTable* g_pair_counted = nullptr;
int64_t g_pair_calls = 0;
bool counted_pair_guess(const float* p, const float* q, int64_t n, double* pb, double* qb, double* pm, double* qm,
                        double* guess) {
  ++g_pair_calls;
  return g_pair_counted->row_mass_pair_guess(p, q, n, pb, qb, pm, qm, guess);
}
bool counted_pair(const float* p, const float* q, int64_t n, double* pb, double* qb, double* pm, double* qm) {
  ++g_pair_calls;
  return g_pair_counted->row_mass_pair(p, q, n, pb, qb, pm, qm);
}

// First bounded_sample_index's `approximate` mode on its own: block sums and values of the
// residual at factors guessed near the true ones (as Note [Bounded rejection] guesses them
// from float32 masses), the margins of guess_block_err's form, against sample_index on the
// canonical residual at the true factors; a threshold on an exact running sum is never
// answered. Then rounds rejected at 0 (p_0(t_0) = 0, or u_0 at the acceptance boundary) on
// rows of every kind and scale, with u_K random or on a running sum of the exact residual:
// the outcome of the canonical masses on every path, and most random ones decided without
// a canonical pass.
void bounded_rejection_tests(Rng& rng, const std::vector<const sv::KernelTable*>& kts, int count, int64_t max_n) {
  const sv::KernelTable& ref = sv::scalar_kernels();
  const int fills[] = {kUniform, kSpiky, kSparse, kDenormal, kTies, kHuge};
  int64_t answered = 0, tried = 0;
  for (int r = 0; r < count; ++r) {
    const int64_t n = 2 + rng.below(max_n);
    std::vector<float> p = make_row(rng, n, fills[rng.below(6)]), q = make_row(rng, n, fills[rng.below(6)]);
    p[rng.below(n)] = 0.5f;
    q[rng.below(n)] = 0.5f;
    const int64_t nb = sv::num_blocks(n);
    std::vector<double> pb(nb), qb(nb), blocks(nb), sums(nb), err(nb);
    double P = 0, Q = 0, R = 0;
    ref.row_mass(p.data(), n, pb.data(), &P);
    ref.row_mass(q.data(), n, qb.data(), &Q);
    float a, b;
    if (sv::residual_scales(P, Q, &a, &b) != 0) continue;
    std::vector<float> exact(n);
    for (int64_t v = 0; v < n; ++v) exact[v] = sv::residual_value(p[v], q[v], a, b);
    ref.row_mass(exact.data(), n, blocks.data(), &R);
    if (!(R > 0.0)) continue;
    // Guessed factors up to 2^-15 off the true ones, relatively (Note [Bounded rejection]'s
    // are within about 2^-20; farther guesses make margins that matter).
    const float ga = a * static_cast<float>(1.0 + (rng.uniform() - 0.5) * 0x1p-14);
    const float gb = b * static_cast<float>(1.0 + (rng.uniform() - 0.5) * 0x1p-14);
    const double da = std::fabs(static_cast<double>(a) - ga), db = std::fabs(static_cast<double>(b) - gb);
    const auto guess = [&](int64_t v) { return sv::residual_value(p[v], q[v], ga, gb); };
    for (const sv::KernelTable* kt : kts) {
      if (kt->residual_block_sums == nullptr) continue;
      kt->residual_block_sums(p.data(), q.data(), ga, gb, n, sums.data());
      for (int64_t j = 0; j < nb; ++j)
        err[j] = sv::guess_block_err(pb[j] * (1.0 + 0x1p-40), qb[j] * (1.0 + 0x1p-40), sums[j], ga, gb, da, db, a, b);
      for (int c = 0; c < 4; ++c) {
        const bool boundary = c >= 2;
        const double u = boundary ? boundary_uniform(rng, blocks, R, n, [&exact](int64_t v) { return exact[v]; })
                                  : rng.uniform();
        const int64_t want = sv::sample_index(blocks.data(), n, u * R, [&exact](int64_t v) { return exact[v]; });
        int64_t got = -7;
        const bool ok = sv::bounded_sample_index(sums.data(), n, u, guess, &got, nullptr, err.data(), true);
        answered += ok && !boundary;
        tried += !boundary;
        char buf[200];
        std::snprintf(buf, sizeof buf, "%s approximate bounded draw r=%d n=%lld u=%a %s", kt->name, r, (long long)n, u,
                      boundary ? "at a running sum" : "random");
        check(!ok || got == want, std::string(buf) + ": sample_index's answer on the exact residual");
        if (boundary) check(!ok, std::string(buf) + ": not answered");
      }
    }
  }
  // On long rows the guesses' margins (2^-15 of the masses) reach the values themselves:
  // there only the outcomes are checked.
  if (max_n <= 5000)
    check(answered * 4 > tried * 3, "approximate bounded draws answer most random draws (" + std::to_string(answered) +
                                        " of " + std::to_string(tried) + ")");

  int64_t decided = 0, random_rounds = 0;
  for (int r = 0; r < count; ++r) {
    const int64_t k = 1 + rng.below(4);
    const int64_t n = 2 + rng.below(max_n);
    // Row scales: masses near 1, far from it, and beyond the range the bounds keep (2^+-120).
    const double scales[] = {1.0, 0x1p-60, 0x1p60, 0x1p-126, 0x1p126};
    const double sp = scales[rng.below(5)], sq = rng.below(2) ? sp : scales[rng.below(5)];
    std::vector<float> p((k + 1) * n), q(k * n);
    for (int64_t i = 0; i <= k; ++i) {
      std::vector<float> v = make_row(rng, n, fills[rng.below(5)]);
      v[rng.below(n)] = 0.5f;
      double sum = 0.0;
      for (float x : v) sum += x;
      for (float& x : v) x = static_cast<float>(x * (sp / sum));
      std::copy(v.begin(), v.end(), p.begin() + i * n);
      if (i == k) break;
      std::vector<float> w = make_row(rng, n, fills[rng.below(5)]);
      w[rng.below(n)] = 0.5f;
      sum = 0.0;
      for (float x : w) sum += x;
      for (float& x : w) x = static_cast<float>(x * (sq / sum));
      std::copy(w.begin(), w.end(), q.begin() + i * n);
    }
    std::vector<int64_t> tokens(k);
    for (int64_t i = 0; i < k; ++i) ref.row_argmax(q.data() + i * n, n, &tokens[i]);
    std::vector<double> u(k + 1);
    for (double& x : u) x = rng.uniform();
    const int mode = static_cast<int>(rng.below(3));  // 0: p(t) = 0, u_K random; 1: u_K on a running sum; 2: u_0 on the boundary
    const int64_t nb = sv::num_blocks(n);
    std::vector<double> blocks(nb);
    double P = 0, Q = 0, R = 0;
    if (mode < 2) p[tokens[0]] = 0.0f;
    ref.row_mass(p.data(), n, blocks.data(), &P);
    ref.row_mass(q.data(), n, blocks.data(), &Q);
    if (!(P > 0.0) || !(Q > 0.0)) continue;
    if (mode == 2) {
      const double pt = p[tokens[0]], qt = q[tokens[0]];
      u[0] = std::min(pt * Q / (qt * P), 0x1.fffffffffffffp-1);
      const int64_t nudge = rng.below(5) - 2;
      for (int64_t z = 0; z < std::abs(nudge); ++z) u[0] = std::nextafter(u[0], nudge < 0 ? 0.0 : 1.0);
    }
    if (mode == 1) {
      float a, b;
      sv::residual_scales(P, Q, &a, &b);
      std::vector<float> res(n);
      for (int64_t v = 0; v < n; ++v) res[v] = sv::residual_value(p[v], q[v], a, b);
      ref.row_mass(res.data(), n, blocks.data(), &R);
      if (!(R > 0.0)) continue;
      u[k] = boundary_uniform(rng, blocks, R, n, [&res](int64_t v) { return res[v]; });
    }
    const sv::Rows t_rows{p.data(), n}, d_rows{q.data(), n};
    for (const sv::KernelTable* kt : kts) {
      sv::KernelTable counted = *kt;
      g_pair_counted = kt;
      if (kt->row_mass_pair_guess != nullptr) counted.row_mass_pair_guess = counted_pair_guess;
      if (kt->row_mass_pair != nullptr) counted.row_mass_pair = counted_pair;
      const int64_t calls = g_pair_calls;
      const sv::Outcome a = sv::accept_round(counted, t_rows, d_rows, tokens.data(), u.data(), k, n);
      const bool no_pass = g_pair_calls == calls;
      const sv::Outcome b = sv::accept_round(exact_only(*kt), t_rows, d_rows, tokens.data(), u.data(), k, n);
      char buf[200];
      std::snprintf(buf, sizeof buf, "%s bounded rejection round %d k=%lld n=%lld scales %a %a mode %d", kt->name, r,
                    (long long)k, (long long)n, sp, sq, mode);
      check(a.error == b.error && a.n_accepted == b.n_accepted && a.token == b.token, std::string(buf) + ": the exact outcome");
      if (mode == 1 && kt->row_mass_pair_guess != nullptr) check(!no_pass, std::string(buf) + ": the canonical pass made");
      if (mode == 0 && kt->row_block_sums != nullptr && sp == 1.0 && sq == 1.0) {
        decided += no_pass && b.n_accepted == 0;
        random_rounds += 1;
      }
    }
  }
  if (random_rounds >= 20)
    check(decided * 2 > random_rounds, "bounded rejections decided without a canonical pass (" + std::to_string(decided) +
                                           " of " + std::to_string(random_rounds) + ")");
}

// ---- Note [Bounded blocks] ---------------------------------------------------------------------
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


// A table whose canonical row passes count their calls: a block round Note [Bounded blocks]
// decides makes none.
const sv::KernelTable* g_mass_counted = nullptr;
int64_t g_mass_calls = 0;
bool counted_row_mass(const float* row, int64_t n, double* blocks, double* mass) {
  ++g_mass_calls;
  return g_mass_counted->row_mass(row, n, blocks, mass);
}
bool counted_row_mass_pair(const float* p, const float* q, int64_t n, double* pb, double* qb, double* pm, double* qm) {
  ++g_mass_calls;
  return g_mass_counted->row_mass_pair(p, q, n, pb, qb, pm, qm);
}

// Block rounds (with draft rows and one-hot) from float32 bounds against block_round on the
// canonical masses, on every path: at random uniforms, and at the boundaries of each
// uniform's effect found by bisection on the exact round (the two adjacent doubles where
// its outcome changes, and a few ulps around them), where the bounds must fall back.
void bounded_block_tests(Rng& rng, const std::vector<const sv::KernelTable*>& kts, int count, int64_t max_n) {
  const int fills[] = {kUniform, kSpiky, kSparse, kDenormal, kTies};
  int64_t decided = 0, random_rounds = 0, boundaries = 0;
  for (int r = 0; r < count; ++r) {
    const int64_t k = 1 + rng.below(5);
    const int64_t n = 2 + rng.below(max_n);
    const double scales[] = {1.0, 1.0, 0x1p-30, 0x1p40, 0x1p-126};
    const double sp = scales[rng.below(5)], sq = rng.below(2) ? sp : scales[rng.below(5)];
    std::vector<float> p((k + 1) * n), q(k * n);
    for (int64_t i = 0; i <= k; ++i) {
      for (int side = 0; side < (i < k ? 2 : 1); ++side) {
        std::vector<float> v = make_row(rng, n, fills[rng.below(5)]);
        v[rng.below(n)] = 0.5f;
        double sum = 0.0;
        for (float x : v) sum += x;
        const double scale = side == 0 ? sp : sq;
        for (float& x : v) x = static_cast<float>(x * (scale / sum));
        std::copy(v.begin(), v.end(), (side == 0 ? p.begin() + i * n : q.begin() + i * n));
      }
    }
    // Drafts that often pass: the draft row's argmax, or a random token.
    std::vector<int64_t> tokens(k);
    for (int64_t i = 0; i < k; ++i) {
      if (rng.below(3)) sv::scalar_kernels().row_argmax(q.data() + i * n, n, &tokens[i]);
      else tokens[i] = rng.below(n);
    }
    const sv::Rows t_rows{p.data(), n}, d_rows{q.data(), n}, none{nullptr, 0};
    for (const sv::Rows& dr : {d_rows, none}) {
      std::vector<double> u(k + 1);
      for (double& x : u) x = rng.uniform();
      for (const sv::KernelTable* kt : kts) {
        const sv::KernelTable exact = exact_only(*kt);
        sv::KernelTable counted = *kt;
        g_mass_counted = kt;
        counted.row_mass = counted_row_mass;
        if (kt->row_mass_pair != nullptr) counted.row_mass_pair = counted_row_mass_pair;
        const auto same = [&](const std::vector<double>& uu, const char* what) {
          const int64_t calls = g_mass_calls;
          const sv::Outcome a = sv::accept_round(counted, t_rows, dr, tokens.data(), uu.data(), k, n, sv::Method::kBlock);
          const sv::Outcome b = sv::accept_round(exact, t_rows, dr, tokens.data(), uu.data(), k, n, sv::Method::kBlock);
          char buf[220];
          std::snprintf(buf, sizeof buf, "%s bounded block round %d k=%lld n=%lld %s scales %a %a, %s", kt->name, r,
                        (long long)k, (long long)n, dr.data ? "draft rows" : "one-hot", sp, sq, what);
          check(a.error == b.error && a.n_accepted == b.n_accepted && a.token == b.token,
                std::string(buf) + ": the exact outcome");
          return g_mass_calls == calls;
        };
        const bool no_pass = same(u, "random uniforms");
        if (sp == 1.0 && sq == 1.0 && kt->row_block_sums != nullptr) {
          decided += no_pass;
          random_rounds += 1;
        }
        if (kt != kts.front()) continue;  // boundaries once per round (they are searched with the exact round)
        // One uniform's boundary, searched with the exact round.
        const int64_t j = rng.below(k + 1);
        const auto outcome = [&](const std::vector<double>& uu) {
          const sv::Outcome o = sv::accept_round(exact, t_rows, dr, tokens.data(), uu.data(), k, n, sv::Method::kBlock);
          return std::make_pair(o.n_accepted, o.token);
        };
        const std::vector<std::vector<double>> at = boundary_uniforms(u, j, 0.0, outcome);
        if (at.empty()) continue;
        boundaries += 1;
        for (const sv::KernelTable* kb : kts) {
          counted = *kb;
          g_mass_counted = kb;
          counted.row_mass = counted_row_mass;
          if (kb->row_mass_pair != nullptr) counted.row_mass_pair = counted_row_mass_pair;
          const sv::KernelTable exact_b = exact_only(*kb);
          for (int z = -2; z <= 2; ++z) {
            const std::vector<double>& uu = at[z + 2];
            const sv::Outcome a = sv::accept_round(counted, t_rows, dr, tokens.data(), uu.data(), k, n, sv::Method::kBlock);
            const sv::Outcome b = sv::accept_round(exact_b, t_rows, dr, tokens.data(), uu.data(), k, n, sv::Method::kBlock);
            char buf[220];
            std::snprintf(buf, sizeof buf, "%s bounded block round %d k=%lld n=%lld %s, u_%lld at a boundary %+d", kb->name,
                          r, (long long)k, (long long)n, dr.data ? "draft rows" : "one-hot", (long long)j, z);
            check(a.error == b.error && a.n_accepted == b.n_accepted && a.token == b.token,
                  std::string(buf) + ": the exact outcome");
          }
        }
      }
    }
  }
  if (random_rounds >= 20)
    check(decided * 2 > random_rounds, "bounded block rounds decided without a canonical pass (" +
                                           std::to_string(decided) + " of " + std::to_string(random_rounds) + ")");
  if (count >= 20)  // (a handful of rounds may all be decided before any boundary search)
    check(boundaries > count / 4, "block round boundaries searched (" + std::to_string(boundaries) + ")");
}

// ---- Note [Bounded warping] ------------------------------------------------------------------

// exp_approx against exp_nonpositive (both scalar; the SIMD paths round less, being fused or
// equal): within kApproxWeightBound w + 2^-148 (the absolute part for subnormal results),
// over a dense grid of [-104, 0] and random arguments; then every path's row_weight_sums
// within kWeightSumBound F_b + kWeightSumFloor of the exact block sums of row_weights' w.
void bounded_warping_kernels(Rng& rng, const std::vector<const sv::KernelTable*>& kts) {
  double worst = 0.0;
  bool ok = true;
  const auto one = [&](float y) {
    const float w = sv::exp_nonpositive<sv::ScalarOps>(y), a = sv::exp_approx<sv::ScalarOps>(y);
    const double err = std::fabs(static_cast<double>(a) - static_cast<double>(w));
    if (w >= 0x1p-126f) worst = std::max(worst, err / w);
    ok &= err <= sv::kApproxWeightBound * w + 0x1p-148;
  };
  for (int i = 0; i <= 4000000; ++i) one(static_cast<float>(-104.0 * i / 4000000.0));
  for (int i = 0; i < 1000000; ++i) one(static_cast<float>(-104.0 * rng.uniform() * rng.uniform()));
  for (float y = -0x1p-30f; y > -1.0f; y *= 1.01f) one(y);
  check(ok && worst <= sv::kApproxWeightBound,
        "exp_approx within 2^-20 of exp_nonpositive (worst 2^" + std::to_string(std::log2(worst)) + ")");

  for (int r = 0; r < 300; ++r) {
    const int64_t n = 1 + rng.below(r < 200 ? 3000 : 140000);
    std::vector<float> x = make_logits(rng, n, static_cast<int>(rng.below(5)));
    x[rng.below(n)] = 1.0f;
    const float temps[] = {1.0f, 0.7f, 1.3f, 0.05f, 3.0f};
    const float temperature = temps[rng.below(5)];
    int64_t top = 0;
    sv::scalar_kernels().row_argmax(x.data(), n, &top);
    const float z_max = x[top] / temperature;
    const int64_t nb = sv::num_blocks(n);
    std::vector<float> w(n);
    std::vector<double> blocks(nb), sums(nb);
    double mass = 0.0;
    sv::scalar_kernels().row_weights(x.data(), n, temperature, z_max, w.data(), blocks.data(), &mass);
    for (const sv::KernelTable* kt : kts) {
      if (kt->row_weight_sums == nullptr) continue;
      std::vector<float> approx(n, -1.0f);
      kt->row_weight_sums(x.data(), n, temperature, z_max, r % 2 ? approx.data() : nullptr, sums.data());
      bool held = true;
      for (int64_t v = 0; r % 2 && v < n; ++v)
        held &= std::fabs(static_cast<double>(approx[v]) - w[v]) <= sv::kApproxWeightBound * w[v] + 0x1p-148;
      for (int64_t b = 0; b < nb; ++b) {
        double exact = 0.0;  // within 2^-45 of the exact sum: far inside the bound's slack
        for (int64_t v = b * sv::kMassBlock; v < std::min(n, (b + 1) * sv::kMassBlock); ++v) exact += w[v];
        held &= std::fabs(sums[b] - exact) <= sums[b] * sv::kWeightSumBound * 0.999 + sv::kWeightSumFloor;
      }
      check(held, std::string(kt->name) + " row_weight_sums within its bound, n=" + std::to_string(n));
    }
  }
}

// The canonical mass of row x's exact weights at a temperature (scalar path), and its max z.
double exact_weight_mass(const std::vector<float>& x, float temperature, float* z_max) {
  const int64_t n = static_cast<int64_t>(x.size());
  int64_t top = 0;
  sv::scalar_kernels().row_argmax(x.data(), n, &top);
  *z_max = x[top] / temperature;
  if (std::isinf(*z_max)) return 0.0;
  std::vector<float> w(n);
  std::vector<double> blocks(sv::num_blocks(n));
  double mass = 0.0;
  sv::scalar_kernels().row_weights(x.data(), n, temperature, *z_max, w.data(), blocks.data(), &mass);
  return mass;
}

// Rows for the upper-bound tests (round r of 240): up to 3000 logits (140000 after the
// first 200) of a random kind with a 1.0 somewhere, scaled by 1, 30 or 4096, and a
// temperature from 0.05 to 3.
struct ScaledRow {
  std::vector<float> x;
  float scale, temperature;
};
ScaledRow scaled_logit_row(Rng& rng, int r) {
  const int64_t n = 1 + rng.below(r < 200 ? 3000 : 140000);
  ScaledRow row{make_logits(rng, n, static_cast<int>(rng.below(5))), 1.0f, 1.0f};
  row.x[rng.below(n)] = 1.0f;
  const float scales[] = {1.0f, 1.0f, 30.0f, 4096.0f};
  row.scale = scales[rng.below(4)];
  for (float& v : row.x) v *= row.scale;
  const float temps[] = {1.0f, 0.7f, 1.3f, 0.05f, 3.0f};
  row.temperature = temps[rng.below(5)];
  return row;
}

// Note [Weight upper bounds]: weight_mass_upper bounds the canonical mass of the exact
// weights from above on every path, for rows of every kind (-inf entries, ties, subnormal
// weights, one value holding all the mass), logits scaled up to 2^12, temperatures from 0.05
// to 3; and it is no looser than Schraudolph's 6.2% plus its margins (the kernel computes
// what the note says). Also the value itself: upper_weight's float is at least the exact
// weight (to 2^-126) on a dense grid of arguments.
void upper_weight_bound_tests(Rng& rng, const std::vector<const sv::KernelTable*>& kts) {
  bool ok = true;
  double worst = 0.0;
  for (const float temperature : {1.0f, 0.7f, 0.05f}) {
    for (int i = 0; i <= 400000; ++i) {
      const float z_max = i % 3 == 0 ? 0.0f : (i % 3 == 1 ? 17.25f : -3000.5f);
      const float x = (z_max - static_cast<float>(110.0 * i / 400000.0)) * temperature;
      const double log2e = 1.4426950408889634;
      const float c1 = static_cast<float>(0x1p23 * log2e / temperature);
      const float c0 = static_cast<float>(0x1p23 * (127.0 - z_max * log2e));
      const float s = sv::upper_weight<sv::ScalarOps>(x, c1, c0);
      const float w = sv::weight(x, temperature, z_max);
      const double e = 0x1p-15 + (std::fabs(z_max) + 104.0) * 0x1p-21;
      ok &= w <= s * (1.0 + e) + 0x1p-126;
      if (w >= 0x1p-120f) worst = std::max(worst, static_cast<double>(s) / w);
    }
  }
  check(ok && worst <= 1.0625, "upper_weight >= the exact weight (worst ratio " + std::to_string(worst) + ")");
  int64_t decided = 0;
  for (int r = 0; r < 240; ++r) {
    const ScaledRow row = scaled_logit_row(rng, r);
    const std::vector<float>& x = row.x;
    const int64_t n = static_cast<int64_t>(x.size());
    const float scale = row.scale, temperature = row.temperature;
    float z_max = 0.0f;
    const double mass = exact_weight_mass(x, temperature, &z_max);
    if (std::isinf(z_max)) continue;
    for (const sv::KernelTable* kt : kts) {
      double upper = 0.0, lower = -1.0;
      float zm = 0.0f;
      if (!sv::weight_mass_upper(*kt, x.data(), n, temperature, &upper, &zm, &lower)) {
        check(kt->row_upper_weight_sums == nullptr || !(std::fabs(z_max) <= 0x1p20),
              std::string(kt->name) + " weight_mass_upper bounds a good row, n=" + std::to_string(n));
        continue;
      }
      ++decided;
      const double e = 0x1p-15 + (std::fabs(z_max) + 104.0) * 0x1p-21;
      const double loose = (mass * 1.0625 * (1.0 + e) + static_cast<double>(n) * 0x1p-125) * (1.0 + 0x1p-18);
      char buf[160];
      std::snprintf(buf, sizeof buf, "%s weight_mass_upper: P %.17g <= bound %.17g <= %.17g, n=%lld T=%g scale=%g",
                    kt->name, mass, upper, loose, (long long)n, temperature, scale);
      check(zm == z_max && mass <= upper && upper <= loose && lower <= mass && lower >= 0.0 &&
                lower * 1.0625 * (1.0 + 0x1p-18) >= mass * (1.0 - e) * (1.0 - e) - static_cast<double>(n) * 0x1p-125,
            buf);
    }
  }
  check(decided >= 200 * static_cast<int64_t>(kts.size()),
        "weight_mass_upper bounded rows (" + std::to_string(decided) + " of 240 a path)");
  // Where Schraudolph's float is exact (exponent fractions near 0 or 1: weights at powers of
  // two) the upper bound's margin e alone must cover the roundings, which grow with |z_max|,
  // and where it is furthest above (fraction 0.4427) the lower bound's: rows of logits at
  // z_max - (k + d) ln 2 (+- a few ulps), k = 0..120, d = 0 or 0.5573.
  for (const float temperature : {1.0f, 0.7f, 0.05f}) {
    for (const float z_max : {0.0f, 17.25f, -3000.5f, 20000.0f, -250000.0f})
    for (const double d : {0.0, 0.5573}) {
      std::vector<float> x;
      for (int k = 0; k <= 120; ++k) {  // (the heaviest many times over, so the max's own weight 1 counts little)
        float v = static_cast<float>((z_max - (k + d) * 0.6931471805599453) * temperature);
        for (int j = 0; j < 7; ++j, v = std::nextafter(v, j < 4 ? 1e30f : -1e30f))
          for (int copies = k < 3 ? 100 : 1; copies > 0; --copies) x.push_back(v);
      }
      x.push_back(z_max * temperature);
      const int64_t n = static_cast<int64_t>(x.size());
      float zm = 0.0f;
      const double mass = exact_weight_mass(x, temperature, &zm);
      for (const sv::KernelTable* kt : kts) {
        double upper = 0.0, lower = -1.0;
        float z = 0.0f;
        const bool got = sv::weight_mass_upper(*kt, x.data(), n, temperature, &upper, &z, &lower);
        char buf[200];
        std::snprintf(buf, sizeof buf, "%s weight_mass_upper at powers of two (d %g): %.17g <= P %.17g <= %.17g, T=%g "
                      "z_max=%g", kt->name, d, lower, mass, upper, temperature, zm);
        check(kt->row_upper_weight_sums == nullptr || (got && lower <= mass && mass <= upper), buf);
      }
    }
  }
}

// Note [Argmax with upper sums]: on every path, row_argmax_upper_weight_sums gives
// row_argmax's index and row_upper_weight_sums' block sums bit for bit, at references below,
// at and above the row's max z, and false exactly where row_argmax finds a NaN (anywhere: a
// vector body, a block's tail); rows of every kind (ties, +0.0 and -0.0 maxima, -inf
// entries, all -inf) and lengths from 1 (shorter than a vector) to past a block boundary.
void argmax_upper_kernel_tests(Rng& rng, const std::vector<const sv::KernelTable*>& kts) {
  int64_t compared = 0, nan_rows = 0;
  for (int r = 0; r < 400; ++r) {
    const int64_t lengths[] = {1, 7, 15, 16, 17, 255, 256, 257, 1000, 4099, 40000};
    const int64_t n = r < 330 ? lengths[r % 11] + (r % 11 >= 5 ? rng.below(40) : 0) : 1 + rng.below(140000);
    std::vector<float> x = make_logits(rng, n, r % 5);
    const int shape = static_cast<int>(rng.below(6));
    if (shape == 1) x[rng.below(n)] = std::numeric_limits<float>::quiet_NaN();  // anywhere, tails included
    if (shape == 2) x[n - 1] = std::numeric_limits<float>::quiet_NaN();         // the last value (a tail)
    if (shape == 3) {                                                            // zeros of both signs on top
      for (float& v : x) v = v > 0.0f ? -v : v;
      x[rng.below(n)] = -0.0f;
      x[rng.below(n)] = 0.0f;
    }
    if (shape == 4) std::fill(x.begin(), x.end(), -std::numeric_limits<float>::infinity());
    const float temperature = 0.05f + static_cast<float>(rng.uniform()) * 2.0f;
    int64_t want = -1;
    const bool finite_max = sv::scalar_kernels().row_argmax(x.data(), n, &want);
    const double z = finite_max && std::isfinite(x[want]) ? x[want] / temperature : 0.0;
    const double refs[] = {z, z - 0.3, z - 40.0 * rng.uniform(), z + 0.7};
    const double ref = refs[rng.below(4)];
    const double log2e = 1.4426950408889634;
    const float c1 = static_cast<float>(0x1p23 * log2e / temperature);
    const float c0 = static_cast<float>(0x1p23 * (127.0 - ref * log2e));
    const int64_t nb = sv::num_blocks(n);
    nan_rows += !finite_max;
    for (const sv::KernelTable* kt : kts) {
      if (kt->row_argmax_upper_weight_sums == nullptr) continue;
      std::vector<double> plain(nb), fused(nb);
      int64_t index = -1, plain_index = -1;
      const bool got = kt->row_argmax_upper_weight_sums(x.data(), n, c1, c0, &index, fused.data());
      const bool plain_got = kt->row_argmax(x.data(), n, &plain_index);
      kt->row_upper_weight_sums(x.data(), n, c1, c0, plain.data());
      bool same = got == plain_got && got == finite_max;
      if (got) {
        same &= index == plain_index && index == want;
        for (int64_t b = 0; b < nb; ++b) same &= bits(plain[b]) == bits(fused[b]);
      }
      ++compared;
      check(same, std::string(kt->name) + " row_argmax_upper_weight_sums is row_argmax and row_upper_weight_sums, n=" +
                      std::to_string(n) + " shape " + std::to_string(shape));
    }
  }
  check(compared >= 400 * static_cast<int64_t>(kts.size()) && nan_rows >= 60, "argmax_upper_kernel_tests compared " + std::to_string(compared) +
                                                   " rows, " + std::to_string(nan_rows) + " malformed");
}

// Note [Shifted upper bounds]: weight_mass_bounds_one_pass bounds the canonical mass of the
// exact weights on every path as weight_mass_upper does (rows of every kind, logits scaled up
// to 2^12, temperatures 0.05 to 3), no looser than Schraudolph's 6.2% and the shifted margins;
// malformed rows bound nothing (z NaN); and where the bounds are tight against the reference
// R (the first block's max) rather than the max: rows whose logits sit at R + (j - f) ln 2
// (+- a few ulps), the max d = J ln 2 above R (J up to 86: d up to 59.6; J = 90 re-forms the
// floats against the max), f = 0 (the floats exact powers of two: the upper bound within its
// margins) and f = 0.5573 (the floats 1.0615 times above: the lower bound's). A bound that
// forgot g = exp(R - z_max), or took it from the wrong side, fails these.
void shifted_upper_bound_tests(Rng& rng, const std::vector<const sv::KernelTable*>& kts) {
  int64_t decided = 0;
  for (int r = 0; r < 240; ++r) {
    const ScaledRow row = scaled_logit_row(rng, r);
    const std::vector<float>& x = row.x;
    const int64_t n = static_cast<int64_t>(x.size());
    float z_max = 0.0f;
    const double mass = exact_weight_mass(x, row.temperature, &z_max);
    if (std::isinf(z_max)) continue;
    for (const sv::KernelTable* kt : kts) {
      double upper = 0.0, lower = -1.0;
      float zm = 0.0f;
      if (!sv::weight_mass_bounds_one_pass(*kt, x.data(), n, row.temperature, &upper, &zm, &lower)) {
        check(kt->row_upper_weight_sums == nullptr || !(std::fabs(z_max) <= 0x1p20),
              std::string(kt->name) + " weight_mass_bounds_one_pass bounds a good row, n=" + std::to_string(n));
        continue;
      }
      ++decided;
      // e at its widest: |R| <= |z_max| + 60, d <= 60. The floats themselves lie within
      // 1.0625 (1 + e) of the exact weights and the bound widens their sum by 1 + e again:
      // (1 + e)^2 on each side (e is about 0.3 for |z| near 3e5, as at T = 0.05 here).
      const double e = 0x1p-15 + (2.0 * std::fabs(z_max) + 224.0) * 0x1p-21;
      const double loose =
          (mass * 1.0625 * (1.0 + e) * (1.0 + e) + static_cast<double>(n) * 0x1p-124) * (1.0 + 0x1p-18);
      char buf[200];
      std::snprintf(buf, sizeof buf, "%s weight_mass_bounds_one_pass: %.17g <= P %.17g <= %.17g <= %.17g, n=%lld "
                    "T=%g", kt->name, lower, mass, upper, loose, (long long)n, row.temperature);
      check(zm == z_max && mass <= upper && upper <= loose && lower <= mass && lower >= 0.0 &&
                lower * 1.0625 * (1.0 + 0x1p-18) >= mass * (1.0 - e) * (1.0 - e) - static_cast<double>(n) * 0x1p-124,
            buf);
    }
  }
  check(decided >= 200 * static_cast<int64_t>(kts.size()),
        "weight_mass_bounds_one_pass bounded rows (" + std::to_string(decided) + " of 240 a path)");
  // Malformed rows: nothing bounded, z NaN (a NaN in the head, after it, +inf, all -inf).
  for (int kind = 0; kind < 4; ++kind) {
    std::vector<float> x = make_logits(rng, 3000, 0);
    const float inf = std::numeric_limits<float>::infinity();
    if (kind == 0) x[5] = std::numeric_limits<float>::quiet_NaN();
    if (kind == 1) x[2999] = std::numeric_limits<float>::quiet_NaN();
    if (kind == 2) x[1700] = inf;
    if (kind == 3) std::fill(x.begin(), x.end(), -inf);
    for (const sv::KernelTable* kt : kts) {
      double upper = 0.0;
      float zm = 0.0f;
      const bool got = sv::weight_mass_bounds_one_pass(*kt, x.data(), 3000, 0.8f, &upper, &zm);
      check(!got && std::isnan(zm), std::string(kt->name) + " weight_mass_bounds_one_pass on a malformed row, kind " +
                                        std::to_string(kind));
    }
  }
  // The tight rows, and a masked head (the reference then from the max itself).
  const double ln2 = 0.6931471805599453;
  for (const float temperature : {1.0f, 0.7f, 0.05f}) {
    for (const double ref : {0.0, 17.25, -3000.5}) {
      // top 140: the floats against R overflow (z - R above about 129 ln 2; the one pass's
      // sums are then of no use and the bounds come from floats formed again at the max).
      for (const int top : {0, 1, 8, 30, 86, 90, 140}) {
        for (const double f : {0.0, 0.5573}) {
          for (const bool masked_head : {false, true}) {
            std::vector<float> x(sv::kMassBlock, masked_head ? -std::numeric_limits<float>::infinity()
                                                            : static_cast<float>((ref - 50.0 * ln2) * temperature));
            if (!masked_head) x[17] = static_cast<float>(ref * temperature);
            for (int j = top; j >= top - 120; --j) {
              float v = static_cast<float>((ref + (j - f) * ln2) * temperature);
              for (int i = 0; i < 7; ++i, v = std::nextafter(v, i < 4 ? 1e30f : -1e30f))
                for (int copies = j > top - 3 ? 100 : 1; copies > 0; --copies) x.push_back(v);
            }
            const int64_t n = static_cast<int64_t>(x.size());
            float z_max = 0.0f;
            const double mass = exact_weight_mass(x, temperature, &z_max);
            for (const sv::KernelTable* kt : kts) {
              double upper = 0.0, lower = -1.0;
              float zm = 0.0f;
              const bool got = sv::weight_mass_bounds_one_pass(*kt, x.data(), n, temperature, &upper, &zm, &lower);
              char buf[220];
              std::snprintf(buf, sizeof buf, "%s weight_mass_bounds_one_pass, tight (J %d f %g%s): %.17g <= P %.17g "
                            "<= %.17g, T=%g R=%g", kt->name, top, f, masked_head ? ", masked head" : "", lower, mass,
                            upper, temperature, ref);
              check(kt->row_upper_weight_sums == nullptr || (got && zm == z_max && lower <= mass && mass <= upper),
                    buf);
            }
          }
        }
      }
    }
  }
}

// Note [Coarse draws]: `sample` at temperature only gives the exact draw on every path with
// the draw first tried from the one pass's block bounds: rows a few tokens dominate (where
// the coarse draw decides), rows of every kind (where it mostly falls back), uniforms at 0,
// at random and on the draw's running sums (+- 2 ulps, where it must not answer wrongly). In
// the second half only dominated rows come (a failed try makes the thread skip a few draws),
// and the coarse draw must decide at least half of their random draws there.
void coarse_draw_tests(Rng& rng, const std::vector<const sv::KernelTable*>& kts, int count) {
  const sv::KernelTable exact = without_bounds(sv::scalar_kernels());
  int64_t dominated_draws = 0, decided = 0;
  for (int r = 0; r < count; ++r) {
    const int64_t n = 1 + rng.below(r % 10 == 0 ? 40000 : 3000);
    const int kind = r < count / 2 ? static_cast<int>(rng.below(7)) : 5 + static_cast<int>(rng.below(2));
    const float temps[] = {1.0f, 0.7f, 0.05f, 2.0f};
    sv::WarpParams params;
    params.temperature = temps[rng.below(4)];
    std::vector<float> x = make_logits(rng, n, kind % 5);
    if (kind >= 5) {  // 1 or 3 tokens hold all but about e^-4 of the mass
      for (float& v : x) v = static_cast<float>(8.0 * (rng.uniform() - 0.5));
      const double gap = std::log(static_cast<double>(n)) + 4.0 + 6.0 * rng.uniform();
      for (int j = 0; j < (kind == 5 ? 1 : 3); ++j)
        x[rng.below(n)] = static_cast<float>(4.0 + params.temperature * (gap + 0.1 * rng.uniform()));
    }
    float z_max = 0.0f;
    int64_t top = 0;
    sv::scalar_kernels().row_argmax(x.data(), n, &top);
    z_max = x[top] / params.temperature;
    if (!std::isfinite(z_max)) continue;
    std::vector<float> w(n);
    std::vector<double> blocks(sv::num_blocks(n));
    double total = 0.0;
    sv::scalar_kernels().row_weights(x.data(), n, params.temperature, z_max, w.data(), blocks.data(), &total);
    for (int c = r < count / 2 ? 0 : 1; c < (r < count / 2 ? 4 : 2); ++c) {  // (the second half: random u only)
      const double u = c == 0 ? 0.0 : c == 1 ? rng.uniform()
                                             : boundary_uniform(rng, blocks, total, n, [&w](int64_t v) { return w[v]; });
      const sv::Outcome want = sv::sample_round(exact, x.data(), n, params, u);
      for (const sv::KernelTable* kt : kts) {
        const int64_t before = sv::coarse_draws();
        const sv::Outcome got = sv::sample_round(*kt, x.data(), n, params, u);
        if (r >= count / 2 + 10 && c == 1 && kt->row_argmax_upper_weight_sums != nullptr) {
          ++dominated_draws;
          decided += sv::coarse_draws() > before;
        }
        char buf[160];
        std::snprintf(buf, sizeof buf, "%s coarse draw: token %lld, exact %lld, n=%lld kind=%d T=%g u=%.17g", kt->name,
                      (long long)got.token, (long long)want.token, (long long)n, kind, params.temperature, u);
        check(got.error == want.error && got.token == want.token, buf);
      }
    }
  }
  check(decided * 2 >= dominated_draws && dominated_draws > 0,
        "coarse draws decided " + std::to_string(decided) + " of " + std::to_string(dominated_draws) +
            " random draws from dominated rows");
}

// The canonical mass of the exact weights w(v) of row x for which keep(w(v), w(t)) holds,
// the others as +0.0 (scalar path).
template <class Keep>
double exact_mass_where(const std::vector<float>& x, float temperature, int64_t t, Keep keep) {
  const int64_t n = static_cast<int64_t>(x.size());
  int64_t top = 0;
  sv::scalar_kernels().row_argmax(x.data(), n, &top);
  const float z_max = x[top] / temperature;
  std::vector<float> w(n);
  std::vector<double> blocks(sv::num_blocks(n));
  double mass = 0.0;
  sv::scalar_kernels().row_weights(x.data(), n, temperature, z_max, w.data(), blocks.data(), &mass);
  const float wt = w[t];
  for (float& v : w) v = keep(v, wt) ? v : 0.0f;
  sv::scalar_kernels().row_mass(w.data(), n, blocks.data(), &mass);
  return mass;
}

// Note [Top-p upper bounds]' kernel and bounds: row_upper_weight_sums_above's first stream is
// row_upper_weight_sums' bits on every path, and top_p_mass_bounds bounds the row's canonical
// mass from both sides and the canonical mass of the weights strictly greater than w(t) from
// above, no looser than Schraudolph's 6.2% over the weights above w(t) / 1.07 plus margins;
// on rows of every kind, logits scaled up to 2^12, and on rows of weights at powers of two
// (Schraudolph's float exact there, within roundings) with many copies a few ulps either
// side of each, t taken among them, where only the margins cover a weight just above w(t)
// whose float is not.
void top_p_bound_kernel_tests(Rng& rng, const std::vector<const sv::KernelTable*>& kts) {
  int64_t bounded_rows = 0;
  const auto check_row = [&](const std::vector<float>& x, float temperature, int64_t t, const char* what) {
    const int64_t n = static_cast<int64_t>(x.size());
    float z_max = 0.0f;
    const double mass = exact_weight_mass(x, temperature, &z_max);
    if (std::isinf(z_max) || !(std::fabs(z_max) <= 0x1p20)) return;
    const float wt = sv::weight(x[t], temperature, z_max);
    const double above = exact_mass_where(x, temperature, t, std::greater<float>());
    // Loose: every weight whose float can exceed tau (about w(t) / (1 + e)), 1.0625 times,
    // plus margins (e grows with |z_max|: 0.16 at z_max = 2^18).
    const double e = 0x1p-15 + (std::fabs(z_max) + 104.0) * 0x1p-21;
    std::vector<float> w(n);
    for (int64_t v = 0; v < n; ++v) w[v] = sv::weight(x[v], temperature, z_max);
    double near_above = 0.0;
    for (int64_t v = 0; v < n; ++v)
      if (w[v] > wt / (1.07 * (1.0 + e))) near_above += w[v];
    const double loose = (near_above * 1.0625 * (1.0 + e) + static_cast<double>(n) * 0x1p-125) * (1.0 + 0x1p-18);
    for (const sv::KernelTable* kt : kts) {
      if (kt->row_upper_weight_sums_above == nullptr) continue;
      double lo = -1.0, hi = 0.0, hi_above = 0.0;
      const bool got = sv::top_p_mass_bounds(*kt, x.data(), n, temperature, z_max, wt, &lo, &hi, &hi_above);
      char buf[240];
      std::snprintf(buf, sizeof buf, "%s top_p_mass_bounds (%s): %.17g <= M %.17g <= %.17g; above w(t) %.17g <= "
                    "%.17g <= %.17g, n=%lld T=%g", kt->name, what, lo, mass, hi, above, hi_above, loose,
                    (long long)n, temperature);
      check(got && lo <= mass && mass <= hi && above <= hi_above && hi_above <= loose, buf);
      ++bounded_rows;
      // min-p's lower bound: the canonical mass of the weights >= w(t) from below, no looser
      // than the weights >= 1.07 w(t) less Schraudolph's 6.2% and the margins (found wanting
      // by a soak over seeds 1-8 before the second e).
      double at_least = -1.0;
      const double exact_at_least = exact_mass_where(x, temperature, t, std::greater_equal<float>());
      double far_above = 0.0;
      for (int64_t v = 0; v < n; ++v)
        if (w[v] >= wt * 1.07f) far_above += w[v];
      // (each float s >= (w - 2^-126) / (1 + e): the margin e on both sides)
      const double tight =
          far_above / 1.0625 * (1.0 - e) / (1.0 + e) * (1.0 - 0x1p-18) - static_cast<double>(n) * 0x1p-125;
      const bool got_lower = sv::mass_at_least_lower(*kt, x.data(), n, temperature, z_max, wt, &at_least);
      std::snprintf(buf, sizeof buf, "%s mass_at_least_lower (%s): %.17g <= %.17g <= %.17g, n=%lld T=%g", kt->name,
                    what, tight, at_least, exact_at_least, (long long)n, temperature);
      check(got_lower && at_least <= exact_at_least && at_least >= tight, buf);
      // The first stream is row_upper_weight_sums' (the same floats, summed in the same order).
      const double log2e = 1.4426950408889634;
      const float c1 = static_cast<float>(0x1p23 * log2e / temperature);
      const float c0 = static_cast<float>(0x1p23 * (127.0 - static_cast<double>(z_max) * log2e));
      const int64_t nb = sv::num_blocks(n);
      std::vector<double> plain(nb), both(nb), masked(nb), all(nb), none(nb), unused(nb);
      const float tau = wt * 0.75f;
      kt->row_upper_weight_sums(x.data(), n, c1, c0, plain.data());
      kt->row_upper_weight_sums_above(x.data(), n, c1, c0, tau, both.data(), masked.data());
      kt->row_upper_weight_sums_above(x.data(), n, c1, c0, -1.0f, unused.data(), all.data());
      kt->row_upper_weight_sums_above(x.data(), n, c1, c0, std::numeric_limits<float>::infinity(), unused.data(),
                                      none.data());
      // Tau below every float: the second stream is the first; above every float: zeros.
      bool same = true;
      for (int64_t b = 0; b < nb; ++b)
        same &= bits(plain[b]) == bits(both[b]) && bits(plain[b]) == bits(all[b]) && none[b] == 0.0;
      // The second stream at tau: the block sums of the floats above tau, within 2^-20 (1 +
      // 2^-19), on the scalar path (the paths that fuse x c1 + c0 have floats of their own).
      bool near = true;
      for (int64_t b = 0; b < nb && std::strcmp(kt->name, "scalar") == 0; ++b) {
        double exact = 0.0;
        for (int64_t v = b * sv::kMassBlock; v < std::min(n, (b + 1) * sv::kMassBlock); ++v) {
          const float f = sv::upper_weight<sv::ScalarOps>(x[v], c1, c0);
          if (f > tau) exact += f;
        }
        near &= std::fabs(masked[b] - exact) <= exact * 0x1p-20 * (1.0 + 0x1p-19);
      }
      check(same && near, std::string(kt->name) + " row_upper_weight_sums_above's streams (" + what + ")");
    }
  };
  for (int r = 0; r < 240; ++r) {
    const ScaledRow row = scaled_logit_row(rng, r);
    const int64_t n = static_cast<int64_t>(row.x.size());
    int64_t top = 0;
    sv::scalar_kernels().row_argmax(row.x.data(), n, &top);
    check_row(row.x, row.temperature, rng.below(2) ? top : rng.below(n), "random rows");
  }
  for (const float temperature : {1.0f, 0.7f, 0.05f}) {
    for (const float z_max : {0.0f, 17.25f, -3000.5f, 20000.0f}) {
      std::vector<float> x;
      std::vector<int64_t> at_powers;
      for (int k = 0; k <= 40; ++k) {
        float v = static_cast<float>((z_max - k * 0.6931471805599453) * temperature);
        for (int j = 0; j < 7; ++j, v = std::nextafter(v, j < 4 ? 1e30f : -1e30f)) {
          if (j == 0) at_powers.push_back(static_cast<int64_t>(x.size()));
          for (int copies = 40; copies > 0; --copies) x.push_back(v);
        }
      }
      x.push_back(z_max * temperature);
      for (size_t i = 0; i < at_powers.size(); i += 3) check_row(x, temperature, at_powers[i], "powers of two");
    }
  }
  check(bounded_rows >= 200, "top_p_mass_bounds bounded rows (" + std::to_string(bounded_rows) + ")");
}

// Rows whose weights sit at powers of two (Schraudolph's float within roundings of them,
// so the mass bounds are tight but for the lower one's 1.0615): a top group of `top`
// weights 1, then `mid` weights 2^-1 .. 2^-4 and the rest 2^-30 (n >= 1 + top + mid).
std::vector<float> power_row(Rng& rng, int64_t n, int64_t top, int64_t mid, float temperature) {
  std::vector<float> x(n, static_cast<float>(-30.0 * 0.6931471805599453 * temperature));
  for (int64_t i = 0; i < top + mid; ++i) {
    const int k = i < top ? 0 : 1 + static_cast<int>(rng.below(4));
    x[rng.below(n)] = static_cast<float>(-k * 0.6931471805599453 * temperature);
  }
  return x;
}

// Note [Top-p upper bounds] in rounds: accept_logits at top-p alone (with draft rows, with
// their handed-over bounds, and one-hot) gives the outcome of the exact rule on every path,
// for rows where those bounds are tight enough to decide: weights at powers of two (a
// kept token t in a target's top group of 1 to 4, drafts whose top-p cut removes much of
// their mass, so that Q is well below the draft row's mass and P near the target's, and
// random rows of every kind), top_p from 0.3 to 0.999 (and 1), a third with min-p after it
// (or alone), uniforms random and at the exact
// acceptance boundary u = p(t) Q / (q(t) P) and a few ulps either side; the bounds must have
// accepted positions. A bound that took the draft's row mass for Q, or top_p times the
// target's row mass for P, would accept here where the rule rejects. The same rounds as
// chains of tree nodes (verify_tree's first children), and at temperature only too.
void top_p_bound_rounds(Rng& rng, const std::vector<const sv::KernelTable*>& kts, int count, int64_t max_n) {
  const sv::Rows none{nullptr, 0};
  const int64_t before = sv::top_p_bounded_acceptances();
  int64_t positions = 0;
  for (int r = 0; r < count; ++r) {
    const int64_t k = 1 + rng.below(4);
    const int64_t n = 16 + rng.below(max_n);
    sv::WarpParams params;
    const float temps[] = {1.0f, 0.7f, 1.3f};
    params.temperature = temps[rng.below(3)];
    const double top_ps[] = {0.3, 0.5, 0.7, 0.9, 0.999, 1.0};  // (1: temperature only, Note [Weight upper bounds])
    params.top_p = top_ps[rng.below(6)];
    const double min_ps[] = {0.05, 0.2, 0.4};  // min-p after top-p, or alone
    if (rng.below(3) == 0) params.min_p = min_ps[rng.below(3)];
    const bool powers = rng.below(4) != 0;
    const int kind = static_cast<int>(rng.below(5));
    std::vector<float> target((k + 1) * n), draft(k * n);
    std::vector<int64_t> tokens(k);
    for (int64_t i = 0; i <= k; ++i) {
      std::vector<float> row = powers ? power_row(rng, n, 1 + rng.below(4), rng.below(8), params.temperature)
                                      : make_logits(rng, n, kind);
      int64_t top = 0;
      row[rng.below(n)] = powers ? 0.0f : 1.0f;  // (a finite value; for powers, one more weight 1)
      sv::scalar_kernels().row_argmax(row.data(), n, &top);
      std::copy(row.begin(), row.end(), target.begin() + i * n);
      if (i == k) break;
      // A draft whose top token is the target's top token (kept in both), its other mass
      // largely cut; or a draft near the target.
      std::vector<float> d = powers ? power_row(rng, n, 1, 1 + rng.below(8), params.temperature) : row;
      if (powers) {
        int64_t dtop = 0;
        sv::scalar_kernels().row_argmax(d.data(), n, &dtop);
        std::swap(d[dtop], d[top]);
      } else {
        for (float& v : d)
          if (std::isfinite(v)) v += static_cast<float>(0.2 * (rng.uniform() - 0.5));
      }
      std::copy(d.begin(), d.end(), draft.begin() + i * n);
      tokens[i] = rng.below(4) != 0 ? top : rng.below(n);
    }
    // The exact warps, for boundary uniforms.
    std::vector<float> wp(n), wq(n);
    std::vector<double> bp(sv::num_blocks(n)), bq(sv::num_blocks(n));
    sv::WarpedRow rp{wp.data(), bp.data(), 0.0}, rq{wq.data(), bq.data(), 0.0};
    const int64_t j = rng.below(k);
    sv::warp_row(sv::scalar_kernels(), target.data() + j * n, n, params, &rp);
    sv::warp_row(sv::scalar_kernels(), draft.data() + j * n, n, params, &rq);
    std::vector<double> u(k + 1), u1(k + 1);
    for (int64_t i = 0; i <= k; ++i) u[i] = u1[i] = rng.uniform();
    if (rng.below(2) == 0) {  // position j at its boundary, the ones before it accepted
      for (int64_t i = 0; i < j; ++i) u[i] = u1[i] = 0.0;
      const double pt = wp[tokens[j]], qt = wq[tokens[j]];
      if (pt > 0.0 && qt > 0.0) u[j] = std::min(pt * rq.mass / (qt * rp.mass), 0x1.fffffffffffffp-1);
      if (pt > 0.0) u1[j] = std::min(pt / rp.mass, 0x1.fffffffffffffp-1);
      const int64_t nudge = rng.below(7) - 3;
      for (int64_t z = 0; z < std::abs(nudge); ++z) {
        u[j] = std::nextafter(u[j], nudge < 0 ? 0.0 : 1.0);
        u1[j] = std::nextafter(u1[j], nudge < 0 ? 0.0 : 1.0);
      }
    }
    const sv::Rows t_rows{target.data(), n}, d_rows{draft.data(), n};
    for (const sv::KernelTable* kt : kts) {
      const sv::KernelTable exact = without_bounds(*kt);
      char buf[200];
      std::snprintf(buf, sizeof buf, "%s top-p bounded round %d k=%lld n=%lld top_p=%g min_p=%g T=%g %s", kt->name, r,
                    (long long)k, (long long)n, params.top_p, params.min_p, params.temperature,
                    powers ? "powers" : "random");
      std::vector<sv::DraftBound> bounds(k);
      for (int64_t i = 0; i < k; ++i) {
        const sv::Outcome s = sv::sample_round(*kt, draft.data() + i * n, n, params, 0.5, &bounds[i]);
        if (s.token != tokens[i]) {  // bounds are the drawn token's: draw it by its weight's range
          sv::WarpedRow w{wq.data(), bq.data(), 0.0};
          sv::warp_row(sv::scalar_kernels(), draft.data() + i * n, n, params, &w);
          bounds[i] = sv::DraftBound{wq[tokens[i]], w.mass, w.mass};
        }
      }
      const sv::Outcome want = sv::accept_logits_round(exact, t_rows, d_rows, tokens.data(), u.data(), k, n, params);
      const sv::Outcome got = sv::accept_logits_round(*kt, t_rows, d_rows, tokens.data(), u.data(), k, n, params);
      const sv::Outcome handed = sv::accept_logits_round(*kt, t_rows, d_rows, tokens.data(), u.data(), k, n, params,
                                                         sv::Method::kToken, bounds.data());
      const sv::Outcome want1 = sv::accept_logits_round(exact, t_rows, none, tokens.data(), u1.data(), k, n, params);
      const sv::Outcome got1 = sv::accept_logits_round(*kt, t_rows, none, tokens.data(), u1.data(), k, n, params);
      const auto same = [](const sv::Outcome& a, const sv::Outcome& b) {
        return a.error == b.error && a.n_accepted == b.n_accepted && a.token == b.token;
      };
      check(want.error == sv::InputError::kNone && same(got, want) && same(handed, want),
            std::string(buf) + ": accept_logits, with draft rows and with their bounds");
      check(want1.error == sv::InputError::kNone && same(got1, want1), std::string(buf) + ": accept_logits one-hot");
      // The same rounds as chains of tree nodes (a node's first child tries the same tests):
      // children drawn from the draft rows, and deterministic children (one-hot).
      std::vector<float> tree_draft = draft;
      tree_draft.insert(tree_draft.end(), target.end() - n, target.end());  // the leaf's (never read)
      std::vector<int64_t> chain(k), path(k + 1, -1), path1(k + 1, -1);
      for (int64_t i = 0; i < k; ++i) chain[i] = i - 1;
      const sv::Outcome tree = sv::tree_round(*kt, t_rows, sv::Rows{tree_draft.data(), n}, tokens.data(), chain.data(),
                                              k, u.data(), n, &params, path.data());
      const sv::Outcome tree1 =
          sv::tree_round(*kt, t_rows, none, tokens.data(), chain.data(), k, u1.data(), n, &params, path1.data());
      bool chained = same(tree, want) && same(tree1, want1);
      for (int64_t d = 0; d < tree.n_accepted && d < k; ++d) chained &= path[d] == d;
      for (int64_t d = 0; d < tree1.n_accepted && d < k; ++d) chained &= path1[d] == d;
      check(chained, std::string(buf) + ": the chains as trees");
      positions += 5 * k;
    }
  }
  const int64_t accepted = sv::top_p_bounded_acceptances() - before;
  if (count >= 100)
    check(accepted * 20 >= positions, "Note [Top-p upper bounds] accepted positions (" + std::to_string(accepted) +
                                          " of " + std::to_string(positions) + ")");
}

// `rows` rows of n logits of one kind (make_logits), one after another, each with a finite
// value (1.0) at a random place.
std::vector<float> logit_rows(Rng& rng, int64_t rows, int64_t n, int kind) {
  std::vector<float> out(rows * n);
  for (int64_t i = 0; i < rows; ++i) {
    std::vector<float> v = make_logits(rng, n, kind);
    v[rng.below(n)] = 1.0f;
    std::copy(v.begin(), v.end(), out.begin() + i * n);
  }
  return out;
}

// Rounds at temperature only give the same outcomes with Note [Bounded warping] as without
// it, on every path: random uniforms, uniforms at a canonical running sum of the warped row
// (sample), and uniforms at the acceptance boundary u = p(t) Q / (q(t) P) (accept_logits,
// with draft rows and one-hot), where the bounds must fall back.
void bounded_warping_rounds(Rng& rng, const std::vector<const sv::KernelTable*>& kts, int count, int64_t max_n) {
  int64_t tried = 0, boundary_fallbacks = 0;
  const sv::Rows none{nullptr, 0};
  for (int r = 0; r < count; ++r) {
    const int64_t k = 1 + rng.below(4);
    const int64_t n = 2 + rng.below(max_n);
    const int kind = static_cast<int>(rng.below(5));
    std::vector<float> target = logit_rows(rng, k + 1, n, kind), draft(k * n);
    for (int64_t i = 0; i < k; ++i) {
      // Close to the target (mostly accepted), or the target itself (all accepted).
      for (int64_t v = 0; v < n; ++v)
        draft[i * n + v] = rng.below(3) == 0 ? target[i * n + v]
                                             : target[i * n + v] + static_cast<float>(0.3 * (rng.uniform() - 0.5));
    }
    sv::WarpParams params;
    const float temps[] = {1.0f, 0.7f, 1.3f, 0.05f};
    params.temperature = temps[rng.below(4)];
    if (rng.below(2) == 0) params.top_p = rng.below(4) == 0 ? 0.999 : 0.05 + 0.9 * rng.uniform();  // bounded too
    if (rng.below(4) == 0) params.min_p = 0.2 * rng.uniform();  // after top-p or alone: bounded
    std::vector<int64_t> tokens(k);
    for (int64_t i = 0; i < k; ++i) tokens[i] = rng.below(n);
    // The exact warped rows (scalar), for boundary uniforms.
    std::vector<float> wp(n), wq(n);
    std::vector<double> bp(sv::num_blocks(n)), bq(sv::num_blocks(n));
    sv::WarpedRow rp{wp.data(), bp.data(), 0.0}, rq{wq.data(), bq.data(), 0.0};
    sv::warp_row(sv::scalar_kernels(), target.data(), n, params, &rp);
    sv::warp_row(sv::scalar_kernels(), draft.data(), n, params, &rq);
    const int mode = static_cast<int>(rng.below(3));  // 0 random, 1 draw at a running sum, 2 test at its boundary
    std::vector<double> u(k + 1);
    for (double& x : u) x = rng.uniform() * 0.5;  // mostly accepted
    double u_one_hot0 = u[0];
    if (mode == 1) {
      u[k] = boundary_uniform(rng, bp, rp.mass, n, [&wp](int64_t v) { return wp[v]; });
    } else if (mode == 2) {
      const double pt = wp[tokens[0]], qt = wq[tokens[0]];
      if (pt > 0.0 && qt > 0.0) u[0] = std::min(pt * rq.mass / (qt * rp.mass), 0x1.fffffffffffffp-1);
      if (pt > 0.0) u_one_hot0 = std::min(pt / rp.mass, 0x1.fffffffffffffp-1);
      const int64_t nudge = rng.below(5) - 2;
      for (int64_t z = 0; z < std::abs(nudge); ++z) {
        u[0] = std::nextafter(u[0], nudge < 0 ? 0.0 : 1.0);
        u_one_hot0 = std::nextafter(u_one_hot0, nudge < 0 ? 0.0 : 1.0);
      }
    }
    std::vector<double> u1 = u;
    u1[0] = u_one_hot0;
    const sv::Rows t_rows{target.data(), n}, d_rows{draft.data(), n};
    for (const sv::KernelTable* kt : kts) {
      const sv::KernelTable exact = without_bounds(*kt);
      char buf[200];
      std::snprintf(buf, sizeof buf, "%s bounded warping round %d k=%lld n=%lld kind=%d T=%g mode %d", kt->name, r,
                    (long long)k, (long long)n, kind, params.temperature, mode);
      const int64_t before = sv::bounded_draw_fallbacks();
      const sv::Outcome s = sv::sample_round(*kt, target.data(), n, params, u[k]);
      const sv::Outcome s_exact = sv::sample_round(exact, target.data(), n, params, u[k]);
      check(s.error == sv::InputError::kNone && s.token == s_exact.token, std::string(buf) + ": sample");
      if (mode == 1) {
        ++tried;
        boundary_fallbacks += sv::bounded_draw_fallbacks() - before;
      }
      const sv::Outcome a = sv::accept_logits_round(*kt, t_rows, d_rows, tokens.data(), u.data(), k, n, params);
      const sv::Outcome b = sv::accept_logits_round(exact, t_rows, d_rows, tokens.data(), u.data(), k, n, params);
      check(a.error == sv::InputError::kNone && a.n_accepted == b.n_accepted && a.token == b.token,
            std::string(buf) + ": accept_logits");
      const sv::Outcome c = sv::accept_logits_round(*kt, t_rows, none, tokens.data(), u1.data(), k, n, params);
      const sv::Outcome d = sv::accept_logits_round(exact, t_rows, none, tokens.data(), u1.data(), k, n, params);
      check(c.error == sv::InputError::kNone && c.n_accepted == d.n_accepted && c.token == d.token,
            std::string(buf) + ": accept_logits one-hot");
    }
  }
  if (count >= 100)
    check(boundary_fallbacks > 0, "bounded warping draws at a running sum fell back (" +
                                      std::to_string(boundary_fallbacks) + " of " + std::to_string(tried) + ")");
}

// Note [Draft bounds]: draft tokens drawn by sample_round, which hands over each draft row's
// bound; accept_logits_round with those bounds gives the outcome it gives without them, on
// every path, for random parameters (temperature only, top-k, top-p, min-p), draft rows
// close to the target (most positions accepted) or independent, and uniforms random, small,
// or at position i's acceptance boundary u = p(t) Q / (q(t) P) and a few ulps either side
// (from exact warps); rows after the deciding one unreadable. sample_round's bound holds the
// exact warped q(t) and Q. Bounds that are not the row's (q(t) one ulp off, or a range
// missing Q) are reported as that draft row's kDraftBounds wherever the position does not
// pass on the bounds alone (Q's by more than the width of the weight bounds' ranges).
void draft_bound_tests(Rng& rng, const std::vector<const sv::KernelTable*>& kts, int count, int64_t max_n) {
  int64_t accepted_on_bounds = 0, rejections = 0, caught = 0;
  for (int r = 0; r < count; ++r) {
    const int64_t k = 1 + rng.below(5);
    const int64_t n = 2 + rng.below(max_n);
    const int kind = static_cast<int>(rng.below(5));
    const std::vector<float> t_rows = logit_rows(rng, k + 1, n, kind);
    const bool close = rng.below(3) != 0;
    std::vector<float> d_rows = close ? t_rows : logit_rows(rng, k, n, kind);
    d_rows.resize(k * n);
    for (float& x : d_rows)
      if (close && std::isfinite(x)) x += static_cast<float>(0.2 * (rng.uniform() - 0.5));
    sv::WarpParams params = random_params(rng, n);
    if (rng.below(2) == 0) params.top_k = 0, params.top_p = 1.0, params.min_p = 0.0;  // temperature only: bounded
    const sv::KernelTable& ref = sv::scalar_kernels();
    // The exact warps, for boundary uniforms and to check the bounds.
    std::vector<float> wp((k + 1) * n), wq(k * n);
    std::vector<double> bp(sv::num_blocks(n)), mp(k + 1), mq(k);
    for (int64_t i = 0; i <= k; ++i) {
      sv::WarpedRow w{wp.data() + i * n, bp.data(), 0.0};
      sv::warp_row(ref, t_rows.data() + i * n, n, params, &w);
      mp[i] = w.mass;
      if (i == k) break;
      sv::WarpedRow v{wq.data() + i * n, bp.data(), 0.0};
      sv::warp_row(ref, d_rows.data() + i * n, n, params, &v);
      mq[i] = v.mass;
    }
    std::vector<int64_t> tokens(k);
    std::vector<sv::DraftBound> bounds(k);
    for (int64_t i = 0; i < k; ++i) {
      const double u = rng.uniform();
      const sv::Outcome plain = sv::sample_round(ref, d_rows.data() + i * n, n, params, u);
      for (const sv::KernelTable* kt : kts) {
        sv::DraftBound b;
        const sv::Outcome s = sv::sample_round(*kt, d_rows.data() + i * n, n, params, u, &b);
        const bool holds = s.error == sv::InputError::kNone && s.token == plain.token &&
                           bits(b.weight) == bits(wq[i * n + s.token]) && b.lo <= mq[i] && mq[i] <= b.hi;
        check(holds, std::string(kt->name) + " sample_round's draft bound holds the exact q(t) and Q, round " +
                         std::to_string(r));
        bounds[i] = b;
      }
      tokens[i] = plain.token;
    }
    std::vector<double> u(k + 1);
    const int mode = static_cast<int>(rng.below(3));  // 0 random, 1 small, 2 at position j's boundary
    for (double& x : u) x = mode == 1 ? 0.3 * rng.uniform() : rng.uniform();
    int64_t j = rng.below(k);
    for (int64_t tries = 0; tries < k; ++tries, j = (j + 1) % k)  // a position the rule may reject
      if (wp[j * n + tokens[j]] * mq[j] < wq[j * n + tokens[j]] * mp[j]) break;
    if (mode == 2) {
      for (int64_t i = 0; i < j; ++i) u[i] = 0.0;
      const double pt = wp[j * n + tokens[j]], qt = wq[j * n + tokens[j]];
      if (pt > 0.0) u[j] = std::min(pt * mq[j] / (qt * mp[j]), 0x1.fffffffffffffp-1);
      const int64_t nudge = rng.below(7) - 3;
      for (int64_t z = 0; z < std::abs(nudge); ++z) u[j] = std::nextafter(u[j], nudge < 0 ? 0.0 : 1.0);
    }
    const sv::Outcome want = sv::accept_logits_round(without_bounds(ref), sv::Rows{t_rows.data(), n},
                                                     sv::Rows{d_rows.data(), n}, tokens.data(), u.data(), k, n, params);
    PagedRows target(k + 1, n), draft(k, n);
    for (int64_t i = 0; i <= k; ++i) std::memcpy(target.row(i), t_rows.data() + i * n, n * 4);
    for (int64_t i = 0; i < k; ++i) std::memcpy(draft.row(i), d_rows.data() + i * n, n * 4);
    target.lock_from(want.n_accepted + 1);
    draft.lock_from(want.n_accepted + 1);
    rejections += want.n_accepted < k;
    for (const sv::KernelTable* kt : kts) {
      char buf[200];
      std::snprintf(buf, sizeof buf, "%s draft bounds round %d k=%lld n=%lld kind=%d T=%g top_k=%lld top_p=%g mode %d",
                    kt->name, r, (long long)k, (long long)n, kind, params.temperature, (long long)params.top_k,
                    params.top_p, mode);
      const sv::Outcome got = sv::accept_logits_round(*kt, target.view(), draft.view(), tokens.data(), u.data(), k, n,
                                                      params, sv::Method::kToken, bounds.data());
      check(got.error == sv::InputError::kNone && got.n_accepted == want.n_accepted && got.token == want.token, buf);
      // Any range holding Q will do: one 2^-8 wider each way (the test must use its low end).
      std::vector<sv::DraftBound> wide = bounds;
      for (sv::DraftBound& b : wide) b.lo *= 1.0 - 0x1p-8, b.hi *= 1.0 + 0x1p-8;
      const sv::Outcome got_wide = sv::accept_logits_round(*kt, target.view(), draft.view(), tokens.data(), u.data(), k,
                                                           n, params, sv::Method::kToken, wide.data());
      check(got_wide.error == sv::InputError::kNone && got_wide.n_accepted == want.n_accepted &&
                got_wide.token == want.token,
            std::string(buf) + " wider bounds");
      // Block verification reads every row and leaves the bounds unused.
      const sv::Rows all_t{t_rows.data(), n}, all_d{d_rows.data(), n};
      const sv::Outcome blocked = sv::accept_logits_round(*kt, all_t, all_d, tokens.data(), u.data(), k, n, params,
                                                          sv::Method::kBlock, bounds.data());
      const sv::Outcome blocked_plain =
          sv::accept_logits_round(*kt, all_t, all_d, tokens.data(), u.data(), k, n, params, sv::Method::kBlock);
      check(blocked.error == sv::InputError::kNone && blocked.n_accepted == blocked_plain.n_accepted &&
                blocked.token == blocked_plain.token,
            std::string(buf) + " block");
    }
    // Bounds that are not the row's, at the first position not accepted.
    if (want.n_accepted < k) {
      const int64_t i = want.n_accepted;
      for (int how = 0; how < 3; ++how) {
        std::vector<sv::DraftBound> bad = bounds;
        if (how == 0) bad[i].weight = std::nextafter(bad[i].weight, 2.0f);
        // (Off by more than Note [Bounded warping]'s ranges: a position decided from the row's
        // weight bounds checks the handed-over range against those.)
        if (how == 1) bad[i].lo = bad[i].hi = mq[i] * (1.0 + 0x1p-12);
        if (how == 2) bad[i].lo = bad[i].hi = mq[i] * (1.0 - 0x1p-12);
        for (const sv::KernelTable* kt : kts) {  // (a bound that passes reads on: the rows unlocked)
          const sv::Outcome got = sv::accept_logits_round(*kt, sv::Rows{t_rows.data(), n}, sv::Rows{d_rows.data(), n},
                                                          tokens.data(), u.data(), k, n, params, sv::Method::kToken,
                                                          bad.data());
          // A bound that makes the position pass (a larger weight or Q's range below it may) goes
          // unnoticed: the contract; anything else is caught.
          const bool passed = got.error == sv::InputError::kNone && got.n_accepted > i;
          const bool reported = got.error == sv::InputError::kDraftBounds && got.in_draft && got.row == i;
          caught += reported;
          accepted_on_bounds += passed;
          check(reported || passed, std::string(kt->name) + " draft bounds not the row's, round " + std::to_string(r) +
                                        " how " + std::to_string(how));
        }
      }
    }
  }
  if (count >= 100)
    check(rejections > 0 && caught > 0, "draft bounds: rounds with a rejection (" + std::to_string(rejections) +
                                            "), bad bounds caught (" + std::to_string(caught) + ")");
}

// Note [Bounded rejection] on warped rows (temperature only): rounds whose first token is
// rejected, at random uniforms and at the boundaries of u_0 and u_K found by bisection on
// the exact round (adjacent doubles where its outcome changes, ±2 ulps), against the rounds
// on exact warps, every path; most random rejections decided without an exact warp.
const sv::KernelTable* g_weights_counted = nullptr;
int64_t g_weights_calls = 0;
void counted_row_weights(const float* x, int64_t n, float temperature, float z_max, float* w, double* blocks,
                         double* mass) {
  ++g_weights_calls;
  g_weights_counted->row_weights(x, n, temperature, z_max, w, blocks, mass);
}

// Rows read again at the same addresses with new contents (a model writing its logits into
// one buffer): a round at temperature only must see what the rows hold now. Every path
// decides a round on good rows, then the same buffers with a NaN, a +inf or every value
// -inf in one row (target or draft, position 0 or 1, rejected or accepted there) must
// report that row, as the exact rule does; and the good rows again, the first outcome.
void reused_logit_buffer_tests(Rng& rng, const std::vector<const sv::KernelTable*>& kts, int count) {
  const sv::KernelTable exact = without_bounds(sv::scalar_kernels());
  const float inf = std::numeric_limits<float>::infinity();
  sv::WarpParams wp;
  wp.temperature = 0.8f;
  for (int r = 0; r < count; ++r) {
    const int64_t vocab = 2 + rng.below(3000), k = 2;
    std::vector<float> target, draft;
    for (int64_t i = 0; i <= k; ++i) {
      const std::vector<float> row = make_row(rng, vocab, kLogits);
      target.insert(target.end(), row.begin(), row.end());
      if (i < k) {
        std::vector<float> d = row;
        if (rng.below(2)) d[rng.below(vocab)] += 5.0f;
        draft.insert(draft.end(), d.begin(), d.end());
      }
    }
    std::vector<int64_t> tokens(k);
    for (int64_t i = 0; i < k; ++i) sv::scalar_kernels().row_argmax(draft.data() + i * vocab, vocab, &tokens[i]);
    std::vector<double> u(k + 1);
    for (double& x : u) x = rng.uniform();
    const sv::Rows t_rows{target.data(), vocab}, d_rows{draft.data(), vocab};
    const bool in_draft = rng.below(2) != 0;
    const int64_t row = rng.below(k);
    const int bad = rng.below(3);
    for (const sv::KernelTable* kt : kts) {
      const sv::Outcome good = sv::accept_logits_round(*kt, t_rows, d_rows, tokens.data(), u.data(), k, vocab, wp);
      std::vector<float>& rows = in_draft ? draft : target;
      const std::vector<float> saved(rows.begin() + row * vocab, rows.begin() + (row + 1) * vocab);
      if (bad == 2) std::fill(rows.begin() + row * vocab, rows.begin() + (row + 1) * vocab, -inf);
      else rows[row * vocab + rng.below(vocab)] = bad == 0 ? std::numeric_limits<float>::quiet_NaN() : inf;
      const sv::Outcome want = sv::accept_logits_round(exact, t_rows, d_rows, tokens.data(), u.data(), k, vocab, wp);
      const sv::Outcome got = sv::accept_logits_round(*kt, t_rows, d_rows, tokens.data(), u.data(), k, vocab, wp);
      std::copy(saved.begin(), saved.end(), rows.begin() + row * vocab);
      const sv::Outcome again = sv::accept_logits_round(*kt, t_rows, d_rows, tokens.data(), u.data(), k, vocab, wp);
      char buf[160];
      std::snprintf(buf, sizeof buf, "%s reused logits buffer %d (V=%lld, %s row %lld, %s)", kt->name, r,
                    (long long)vocab, in_draft ? "draft" : "target", (long long)row,
                    bad == 0 ? "NaN" : bad == 1 ? "+inf" : "all -inf");
      check(got.error == want.error && got.row == want.row && got.in_draft == want.in_draft &&
                (want.error != sv::InputError::kNone || (got.n_accepted == want.n_accepted && got.token == want.token)),
            std::string(buf) + ": the new contents' outcome");
      check(again.error == good.error && again.n_accepted == good.n_accepted && again.token == good.token,
            std::string(buf) + ": the good rows' outcome again");
    }
  }
}

void bounded_logit_rejection_tests(Rng& rng, const std::vector<const sv::KernelTable*>& kts, int count, int64_t max_n) {
  int64_t decided = 0, rejected_rounds = 0, boundaries = 0;
  for (int r = 0; r < count; ++r) {
    const int64_t k = 1 + rng.below(4);
    const int64_t n = 2 + rng.below(max_n);
    const int kind = static_cast<int>(rng.below(5));
    std::vector<float> target = logit_rows(rng, k + 1, n, kind), draft(k * n);
    for (int64_t i = 0; i < k; ++i)
      for (int64_t v = 0; v < n; ++v) draft[i * n + v] = target[i * n + v] + static_cast<float>(3.0 * (rng.uniform() - 0.5));
    sv::WarpParams params;
    const float temps[] = {1.0f, 0.7f, 1.3f};
    params.temperature = temps[rng.below(3)];
    std::vector<int64_t> tokens(k);
    for (int64_t i = 0; i < k; ++i) sv::scalar_kernels().row_argmax(draft.data() + i * n, n, &tokens[i]);
    std::vector<double> u(k + 1);
    for (double& x : u) x = rng.uniform();
    u[0] = 0.5 + 0.5 * u[0];  // more rejections at 0
    const sv::Rows t_rows{target.data(), n}, d_rows{draft.data(), n};
    const sv::KernelTable& ref_exact = without_bounds(sv::scalar_kernels());
    const auto outcome = [&](const std::vector<double>& uu) {
      const sv::Outcome o = sv::accept_logits_round(ref_exact, t_rows, d_rows, tokens.data(), uu.data(), k, n, params);
      return std::make_pair(o.n_accepted, o.token);
    };
    std::vector<std::vector<double>> cases{u};
    for (int64_t j : {int64_t{0}, k}) {  // boundaries of u_0 (the test) and u_K (the correction)
      const double from = j == k && rng.below(2) ? u[j] : 0.0;  // near the random draw, or anywhere
      const std::vector<std::vector<double>> at = boundary_uniforms(u, j, from, outcome);
      if (at.empty()) continue;
      ++boundaries;
      cases.insert(cases.end(), at.begin(), at.end());
    }
    for (const sv::KernelTable* kt : kts) {
      const sv::KernelTable exact = without_bounds(*kt);
      sv::KernelTable counted = *kt;
      g_weights_counted = kt;
      counted.row_weights = counted_row_weights;
      for (size_t c = 0; c < cases.size(); ++c) {
        const int64_t calls = g_weights_calls;
        const sv::Outcome a = sv::accept_logits_round(counted, t_rows, d_rows, tokens.data(), cases[c].data(), k, n, params);
        const bool no_warp = g_weights_calls == calls;
        const sv::Outcome b = sv::accept_logits_round(exact, t_rows, d_rows, tokens.data(), cases[c].data(), k, n, params);
        char buf[200];
        std::snprintf(buf, sizeof buf, "%s bounded logits rejection round %d k=%lld n=%lld kind=%d T=%g case %zu", kt->name,
                      r, (long long)k, (long long)n, kind, params.temperature, c);
        check(a.error == b.error && a.n_accepted == b.n_accepted && a.token == b.token, std::string(buf) + ": the exact outcome");
        if (c == 0 && b.n_accepted < k && kt->row_weight_sums != nullptr) {
          ++rejected_rounds;
          decided += no_warp;
        }
      }
    }
  }
  if (rejected_rounds >= 20 && max_n <= 5000)  // long rows: margins reach single values (see above)
    check(decided * 2 > rejected_rounds, "bounded logits rejections decided without an exact warp (" +
                                             std::to_string(decided) + " of " + std::to_string(rejected_rounds) + ")");
  check(boundaries > count / 4, "logits round boundaries searched (" + std::to_string(boundaries) + ")");
}

// ---- trees (Note [Tree verification]) ---------------------------------------------------------

// Random trees: chains, and trees of up to 12 nodes, in every mode, on every path against
// the scalar path; a chain against the chain rounds; and the rows of nodes whose children
// were never tried poisoned with NaN afterwards, which must change nothing.
void tree_tests(Rng& rng, const std::vector<const sv::KernelTable*>& kts, int count, int64_t max_n) {
  const sv::KernelTable& ref = sv::scalar_kernels();
  const float nan = std::numeric_limits<float>::quiet_NaN();
  for (int r = 0; r < count; ++r) {
    const int64_t vocab = 1 + rng.below(max_n);
    const bool chain = rng.below(3) == 0;
    const int64_t n = rng.below(chain ? 7 : 13);
    std::vector<int64_t> parents(n), tokens(n);
    for (int64_t j = 0; j < n; ++j) parents[j] = chain ? j - 1 : rng.below(j + 1) - 1;
    // Rows: probabilities (positive mass) and logits (a finite value), target and draft.
    std::vector<float> tp, dp, tl, dl;
    for (int64_t i = 0; i <= n; ++i) {
      for (auto* rows : {&tp, &dp}) {
        std::vector<float> v = make_row(rng, vocab, rng.below(2) ? kUniform : kSparse);
        v[rng.below(vocab)] = 0.5f;
        rows->insert(rows->end(), v.begin(), v.end());
      }
      for (auto* rows : {&tl, &dl}) {
        std::vector<float> v = make_row(rng, vocab, kLogits);
        v[rng.below(vocab)] = 1.0f;
        rows->insert(rows->end(), v.begin(), v.end());
      }
    }
    // Tokens: often the argmax of the parent's target row, so paths go deep; siblings
    // distinct (the deterministic mode's requirement) by skipping repeats.
    for (int64_t j = 0; j < n; ++j) {
      int64_t best = 0;
      ref.row_argmax(tp.data() + (parents[j] + 1) * vocab, vocab, &best);
      int64_t t = rng.below(2) ? best : rng.below(vocab);
      for (int64_t tries = 0; tries < vocab; ++tries) {
        bool repeat = false;
        for (int64_t s = 0; s < j; ++s) repeat |= parents[s] == parents[j] && tokens[s] == t;
        if (!repeat) break;
        t = (t + 1) % vocab;
      }
      tokens[j] = t;
    }
    std::vector<double> u(n + 1);
    for (double& x : u) x = rng.uniform();
    sv::WarpParams params;
    params.temperature = 0.9f;
    params.top_p = rng.below(2) ? 0.85 : 1.0;
    const sv::Rows none{nullptr, 0};
    struct Mode { const char* name; bool logits, draft, greedy; };
    const Mode modes[] = {{"greedy probs", false, false, true},   {"deterministic probs", false, false, false},
                          {"independent probs", false, true, false}, {"greedy logits", true, false, true},
                          {"deterministic logits", true, false, false}, {"independent logits", true, true, false}};
    for (const Mode& m : modes) {
      std::vector<float> target = m.logits ? tl : tp, draft = m.logits ? dl : dp;
      const sv::Rows t_rows{target.data(), vocab}, d_rows = m.draft ? sv::Rows{draft.data(), vocab} : none;
      sv::WarpParams wp = params;
      if (m.greedy) wp.temperature = 0.0f;
      const sv::WarpParams* pp = m.logits ? &wp : nullptr;
      const double* uu = m.greedy && !m.logits ? nullptr : u.data();
      std::vector<int64_t> ref_path(n + 1, -1), path(n + 1, -1);
      const sv::Outcome want = sv::tree_round(ref, t_rows, d_rows, tokens.data(), parents.data(), n, uu, vocab, pp,
                                              ref_path.data());
      char buf[160];
      std::snprintf(buf, sizeof buf, "tree %d (%s, n=%lld, V=%lld) %s", r, chain ? "chain" : "tree", (long long)n,
                    (long long)vocab, m.name);
      {  // Note [Tree bounds]: the same answer with every float32 bound switched off
        std::vector<int64_t> exact_path(n + 1, -1);
        const sv::Outcome e = sv::tree_round(without_bounds(ref), t_rows, d_rows, tokens.data(), parents.data(), n, uu,
                                             vocab, pp, exact_path.data());
        check(e.error == want.error && e.n_accepted == want.n_accepted && e.token == want.token &&
                  std::equal(exact_path.begin(), exact_path.begin() + e.n_accepted, ref_path.begin()),
              std::string("scalar ") + buf + ": equals the exact rule (no bounds)");
      }
      bool valid = want.error == sv::InputError::kNone && want.token >= 0 && want.token < vocab;
      for (int64_t d = 0; d < want.n_accepted; ++d)
        valid &= ref_path[d] >= 0 && parents[ref_path[d]] == (d == 0 ? -1 : ref_path[d - 1]);
      check(valid, std::string("scalar ") + buf + ": a path down the tree and a token");
      if (chain) {  // the chain rounds with the same uniforms
        const int64_t k = n;
        sv::Outcome c;
        if (m.greedy) c = sv::verify_greedy_round(ref, t_rows, tokens.data(), k, vocab);
        else if (m.logits) c = sv::accept_logits_round(ref, t_rows, d_rows, tokens.data(), u.data(), k, vocab, params);
        else c = sv::accept_round(ref, t_rows, d_rows, tokens.data(), u.data(), k, vocab);
        check(c.n_accepted == want.n_accepted && c.token == want.token, std::string(buf) + " equals the chain round");
      }
      // Poison every row the round had no reason to read: only the root and the path's
      // nodes are read (target rows; draft rows too where children were tried).
      std::vector<bool> read(n + 1, false);
      read[0] = true;
      for (int64_t d = 0; d < want.n_accepted; ++d) read[ref_path[d] + 1] = true;
      for (int64_t i = 0; i <= n; ++i)
        if (!read[i]) {
          std::fill(target.begin() + i * vocab, target.begin() + (i + 1) * vocab, nan);
          std::fill(draft.begin() + i * vocab, draft.begin() + (i + 1) * vocab, nan);
        }
      for (const sv::KernelTable* kt : kts) {
        const sv::Outcome got = sv::tree_round(*kt, t_rows, d_rows, tokens.data(), parents.data(), n, uu, vocab, pp,
                                               path.data());
        check(got.error == sv::InputError::kNone && got.n_accepted == want.n_accepted && got.token == want.token &&
                  std::equal(path.begin(), path.begin() + got.n_accepted, ref_path.begin()),
              std::string(kt->name) + " " + buf + " (unread rows NaN)");
      }
    }
  }
}


// Note [Tree bounds]: spine trees as the benchmark builds them (width w, depth d; at every
// level the siblings before the spine child rejected), on normalised and unnormalised rows,
// with uniforms at 0, random, and at the spine child's acceptance boundary (its exact
// residual's mass, a few ulps either side): every path with its bounds equals the scalar
// path without them. The bounded decisions must have answered in some rounds (fewer
// residual_store calls than the exact rule).
int64_t g_store_calls = 0;
const sv::KernelTable* g_store_table = nullptr;
void counted_store(const float* p, const float* q, float a, float b, int64_t n, float* out, double* blocks,
                   double* mass) {
  ++g_store_calls;
  g_store_table->residual_store(p, q, a, b, n, out, blocks, mass);
}

void tree_bound_tests(Rng& rng, const std::vector<const sv::KernelTable*>& kts, int count, int64_t max_n) {
  const sv::KernelTable exact = without_bounds(sv::scalar_kernels());
  int64_t saved = 0, boundaries = 0;
  for (int r = 0; r < count; ++r) {
    const int64_t vocab = 2 + rng.below(max_n);
    const int64_t width = 1 + rng.below(4), depth = 1 + rng.below(3);
    std::vector<int64_t> parents, spine;
    int64_t node = -1;
    for (int64_t l = 0; l < depth; ++l) {
      for (int64_t c = 0; c < width; ++c) parents.push_back(node);
      node = static_cast<int64_t>(parents.size()) - 1;
      spine.push_back(node);
    }
    const int64_t n = static_cast<int64_t>(parents.size());
    const bool normalised = rng.below(2) == 0;
    const int fills[] = {kUniform, kSpiky, kSparse, kDenormal};
    std::vector<float> tp, dp;
    for (int64_t i = 0; i <= n; ++i) {
      for (auto* rows : {&tp, &dp}) {
        std::vector<float> v = make_row(rng, vocab, fills[rng.below(4)]);
        // A draft row nearly disjoint from the target's at times: the residual then keeps
        // nearly all of p's mass (residual_mass_ceiling's case).
        if (rows == &dp && rng.below(4) == 0) {
          std::fill(v.begin(), v.end(), 0.0f);
          for (int k = 0; k < 3; ++k) v[rng.below(vocab)] = 0.01f;
        }
        v[rng.below(vocab)] = 0.5f;
        if (normalised) {
          double sum = 0.0;
          for (float x : v) sum += x;
          for (float& x : v) x = static_cast<float>(x / sum);
        }
        rows->insert(rows->end(), v.begin(), v.end());
      }
    }
    std::vector<int64_t> tokens(n);
    for (int64_t j = 0; j < n; ++j) tokens[j] = rng.below(vocab);
    // Siblings before the spine child: often tokens the target row lacks (rejected for
    // sure); the spine child often the row's largest value.
    const int mode = rng.below(3);  // uniforms 0, random, the first spine child's at its boundary
    node = -1;
    for (int64_t l = 0; l < depth; ++l) {
      float* row = tp.data() + (node + 1) * vocab;
      for (int64_t j = 0; j < n; ++j)
        if (parents[j] == node && j != spine[l] && ((mode == 2 && l == 0) || rng.below(3) != 0)) row[tokens[j]] = 0.0f;
      if (rng.below(2)) tokens[spine[l]] = std::max_element(row, row + vocab) - row;
      node = spine[l];
    }
    std::vector<double> u(n + 1);
    for (double& x : u) x = mode == 0 ? 0.0 : rng.uniform();
    if (mode == 2) {
      // The first spine child at its boundary u = r1(t) Q / (q(t) M1), r1 the exact residual
      // after the siblings before it (scalar, canonical masses; r1 = p, M1 = P for width 1).
      const float* p = tp.data();
      const float* q = dp.data();
      std::vector<double> blocks(sv::num_blocks(vocab));
      std::vector<float> res(p, p + vocab), out(vocab);
      double P = 0, Q = 0;
      exact.row_mass(p, vocab, blocks.data(), &P);
      exact.row_mass(q, vocab, blocks.data(), &Q);
      double M = P;
      bool ok = true;
      for (int64_t c = 0; c + 1 < width && ok; ++c) {
        float a, b;
        sv::residual_scales(M, Q, &a, &b);
        exact.residual_store(res.data(), q, a, b, vocab, out.data(), blocks.data(), &M);
        ok = M > 0.0;
        res = out;
      }
      // The spine child's token: where r1 / q is least, so that the boundary lies below 1.
      int64_t t = -1;
      for (int64_t v = 0; v < vocab; ++v)
        if (res[v] > 0.0f && q[v] > 0.0f && (t < 0 || res[v] * q[t] < res[t] * q[v])) t = v;
      if (ok && t >= 0) {
        tokens[spine[0]] = t;
        const double bound = static_cast<double>(res[t]) * Q / (static_cast<double>(q[t]) * M);
        if (bound < 1.0) {
          u[spine[0]] = std::nextafter(bound, rng.below(2) ? 0.0 : 1.0);
          ++boundaries;
        }
        for (int64_t s = rng.below(3); s > 0; --s) u[spine[0]] = std::nextafter(u[spine[0]], 0.0);
      }
    }
    if (mode == 2 && width == 2 && rng.below(2) == 0) {
      // Or the first child at its boundary u = p(t) Q / (q(t) P), its token where p / q is
      // least (with p(t) > 0), and the second child at the row's largest value.
      float* p = tp.data();
      const float* q = dp.data();
      std::vector<double> blocks(sv::num_blocks(vocab));
      double P = 0, Q = 0;
      exact.row_mass(p, vocab, blocks.data(), &P);
      exact.row_mass(q, vocab, blocks.data(), &Q);
      int64_t t = -1;
      for (int64_t v = 0; v < vocab; ++v)
        if (p[v] > 0.0f && q[v] > 0.0f && (t < 0 || p[v] * q[t] < p[t] * q[v])) t = v;
      if (t >= 0) {
        tokens[0] = t;
        tokens[1] = std::max_element(p, p + vocab) - p;
        const double bound = static_cast<double>(p[t]) * Q / (static_cast<double>(q[t]) * P);
        if (bound < 1.0) {
          u[0] = std::nextafter(bound, rng.below(2) ? 0.0 : 1.0);
          u[1] = rng.uniform();
          ++boundaries;
        }
      }
    }
    const sv::Rows t_rows{tp.data(), vocab}, d_rows{dp.data(), vocab};
    std::vector<int64_t> want_path(n + 1, -1), path(n + 1, -1);
    g_store_table = &exact;
    sv::KernelTable counted_exact = exact;
    counted_exact.residual_store = counted_store;
    g_store_calls = 0;
    const sv::Outcome want = sv::tree_round(counted_exact, t_rows, d_rows, tokens.data(), parents.data(), n, u.data(),
                                            vocab, nullptr, want_path.data());
    const int64_t exact_stores = g_store_calls;
    for (const sv::KernelTable* kt : kts) {
      sv::KernelTable counted = *kt;
      g_store_table = kt;
      counted.residual_store = counted_store;
      g_store_calls = 0;
      const sv::Outcome got = sv::tree_round(counted, t_rows, d_rows, tokens.data(), parents.data(), n, u.data(),
                                             vocab, nullptr, path.data());
      saved += exact_stores - g_store_calls;
      char buf[200];
      std::snprintf(buf, sizeof buf, "%s bounded tree %d (width %lld, depth %lld, V=%lld, %s, uniforms %s)", kt->name,
                    r, (long long)width, (long long)depth, (long long)vocab, normalised ? "normalised" : "unnormalised",
                    mode == 0 ? "0" : mode == 1 ? "random" : "at a boundary");
      check(got.error == want.error && got.n_accepted == want.n_accepted && got.token == want.token &&
                std::equal(path.begin(), path.begin() + got.n_accepted, want_path.begin()) &&
                g_store_calls <= exact_stores,
            std::string(buf) + ": the exact rule's outcome, with no more residual passes");
    }
  }
  if (count >= 50) {
    check(saved > 0, "bounded tree decisions answered (" + std::to_string(saved) + " residual passes saved)");
    check(boundaries > count / 16, "tree acceptances at the boundary tried (" + std::to_string(boundaries) + ")");
  }
}

// A path whose float32 block sums are as far from exact as their contract allows: each is
// the exact sum of its block's values (long double) moved by 0.9 kBlockSumBound of it, all of
// a call's sums up or all down, at random. Bounds that rely on the sums being closer than
// promised (their errors cancelling, or factors guessed from them being right) fail against it.
uint64_t g_adversary = 1;
template <class Value>
void adversarial_sums(int64_t n, double* block_sum, Value value) {
  g_adversary = g_adversary * 6364136223846793005ull + 1442695040888963407ull;
  const long double move = ((g_adversary >> 63) != 0 ? 0.9L : -0.9L) * static_cast<long double>(sv::kBlockSumBound);
  for (int64_t b = 0; b < sv::num_blocks(n); ++b) {
    long double s = 0.0L;
    for (int64_t v = b * sv::kMassBlock; v < std::min(n, (b + 1) * sv::kMassBlock); ++v) s += value(v);
    block_sum[b] = static_cast<double>(s * (1.0L + move));
  }
}
sv::KernelTable adversarial_kernels() {
  sv::KernelTable t = sv::scalar_kernels();
  t.name = "adversarial";
  t.row_block_sums = [](const float* row, int64_t n, double* block_sum) {
    if (!sv::scalar_kernels().row_block_sums(row, n, block_sum)) return false;
    adversarial_sums(n, block_sum, [row](int64_t v) { return row[v]; });
    return true;
  };
  t.residual_block_sums = [](const float* p, const float* q, float a, float b, int64_t n, double* block_sum) {
    adversarial_sums(n, block_sum, [=](int64_t v) { return sv::residual_value(p[v], q[v], a, b); });
  };
  t.pair_block_sums = [](const float* p, const float* q, int64_t n, double* ps, double* qs, double* gs) {
    if (!sv::scalar_kernels().pair_block_sums(p, q, n, ps, qs, gs)) return false;
    adversarial_sums(n, ps, [p](int64_t v) { return p[v]; });
    adversarial_sums(n, qs, [q](int64_t v) { return q[v]; });
    adversarial_sums(n, gs, [=](int64_t v) { return sv::residual_value(p[v], q[v], 1.0f, 1.0f); });
    return true;
  };
  return t;
}

// Note [Tree bounds], chained residuals: one node with 2 to 7 children drawn from the draft,
// their tokens of four kinds: the draft's ten times its largest value (the residual drops
// them: r(t) = 0 for certain), at the edge of that (q(t) / Q within a few ulps of p(t) / P),
// kept by the first residual and often rejected there (p(t) / P = c q(t) / Q, c in [1, 1.5):
// deciding needs the residual's mass), or any token (repeats allowed). Rows
// normalised or scaled by up to 2^+-40; uniforms random, and at every child's and the draw's
// boundaries found by bisection on the exact rule. Every path with its bounds, and a path
// whose block sums are as far off as allowed (adversarial_kernels), must give the exact
// rule's outcome; the chained bounds must have decided rejections of tokens the
// residual keeps, and draws after every child was rejected, in some rounds, and rejected
// children from the block masses' lower bounds alone (no pass) in more rounds than not. Then
// the same trees on logits rows at temperature only. A quarter of the drafts are the target
// within 10% or 1% value by value: the residuals' masses are then small and the guessed
// factors' margins large next to them; a quarter are the target times a factor per block,
// where the block masses bound M_1 tightly.
void chained_tree_bound_tests(Rng& rng, std::vector<const sv::KernelTable*> kts, int count, int64_t max_n) {
  const sv::KernelTable exact = without_bounds(sv::scalar_kernels());
  const sv::KernelTable adversary = adversarial_kernels();
  kts.push_back(&adversary);
  const int fills[] = {kUniform, kSpiky, kSparse, kDenormal};
  int64_t decided_kept = 0, decided_draws = 0, decided_logit_nodes = 0, boundaries = 0;
  const int64_t block_rejections_before = sv::tree_block_rejections();
  for (int r = 0; r < count; ++r) {
    const int64_t vocab = 8 + rng.below(max_n);
    const int64_t width = 2 + rng.below(6);
    std::vector<int64_t> parents(width, -1), tokens(width);
    std::vector<float> rows[2];
    for (auto& v : rows) {
      v = make_row(rng, vocab, fills[rng.below(4)]);
      v[rng.below(vocab)] = 0.5f;
      double sum = 0.0;
      for (float x : v) sum += x;
      const double scale = rng.below(2) ? 1.0 / sum : std::ldexp(1.0 / sum, static_cast<int>(rng.below(81)) - 40);
      for (float& x : v) x = static_cast<float>(x * scale);
    }
    std::vector<float>& p = rows[0];
    std::vector<float>& q = rows[1];
    const int64_t draft_kind = rng.below(4);
    if (draft_kind == 0) {  // a draft close to the target: small residual masses
      const double spread = rng.below(2) ? 0.2 : 0.02;
      for (int64_t v = 0; v < vocab; ++v) q[v] = static_cast<float>(p[v] * (1.0 + spread * (rng.uniform() - 0.5)));
    } else if (draft_kind == 1) {
      // The target times a factor per block (1/4 to 4): each block's residual values all of
      // one sign, so the block masses' lower bound on M_1 is tight (up to its margins).
      const double scale = rng.below(2) ? 1.0 : std::ldexp(1.0, static_cast<int>(rng.below(41)) - 20);
      for (int64_t b = 0; b < sv::num_blocks(vocab); ++b) {
        const double f = scale * std::ldexp(1.0, static_cast<int>(rng.below(5)) - 2) * (1.0 + 0.1 * rng.uniform());
        for (int64_t v = b * sv::kMassBlock; v < std::min(vocab, (b + 1) * sv::kMassBlock); ++v)
          q[v] = static_cast<float>(p[v] * f);
      }
    }
    const auto masses = [&](double* P, double* Q) {
      std::vector<double> blocks(sv::num_blocks(vocab));
      exact.row_mass(p.data(), vocab, blocks.data(), P);
      exact.row_mass(q.data(), vocab, blocks.data(), Q);
    };
    const int kind_set = rng.below(4);  // which kinds this round's tokens take
    bool kept_kind = false;
    std::vector<int> kinds_of(width, 3);
    for (int64_t c = 0; c < width; ++c) {
      const int64_t t = rng.below(vocab);
      tokens[c] = t;
      const int mix[] = {0, 1, 2, 2, 3};
      const int kind = c == 0 && rng.below(4) != 0 ? 0 : kind_set == 3 ? mix[rng.below(5)] : kind_set;
      kinds_of[c] = kind;
      double P = 0, Q = 0;
      masses(&P, &Q);
      if (kind == 0) {
        q[t] = 10.0f * *std::max_element(q.begin(), q.end());
      } else if (kind == 2 && c > 0) {
        if (p[t] == 0.0f) p[t] = static_cast<float>(P / static_cast<double>(vocab));
        masses(&P, &Q);
        q[t] = static_cast<float>(static_cast<double>(p[t]) / (1.0 + 0.5 * rng.uniform()) * Q / P);
        kept_kind = true;
      }
    }
    // The edge kind last, on the rows' final masses: q(t) = p(t) (Q - q(t)) / (P - p(t)),
    // that is q(t) / Q = p(t) / P, then up to 3 ulps off.
    for (int64_t c = 0; c < width; ++c) {
      const int64_t t = tokens[c];
      if (kinds_of[c] != 1 || !(p[t] > 0.0f)) continue;
      double P = 0, Q = 0;
      masses(&P, &Q);
      float x = static_cast<float>(static_cast<double>(p[t]) * (Q - q[t]) / (P - p[t]));
      for (int64_t s = static_cast<int64_t>(rng.below(7)) - 3; s != 0; s += s > 0 ? -1 : 1)
        x = std::nextafter(x, s > 0 ? 1.0f : 0.0f);
      if (x > 0.0f && std::isfinite(x)) q[t] = x;  // (P - p(t)) can be tiny next to a scaled p(t)
    }
    std::vector<double> u(width + 1);
    for (double& x : u) x = rng.uniform();
    // The children's rows (an accepted child's target row gives the bonus token).
    std::vector<float> target = p, draft = q;
    for (int64_t c = 0; c < width; ++c) {
      const std::vector<float> leaf = make_row(rng, vocab, kUniform);
      target.insert(target.end(), leaf.begin(), leaf.end());
      draft.insert(draft.end(), leaf.begin(), leaf.end());
    }
    const sv::Rows t_rows{target.data(), vocab}, d_rows{draft.data(), vocab};
    // The round's outcome on rows (t, d), logits warped by params when given.
    const auto outcome_on = [&](sv::Rows t, sv::Rows d, const sv::WarpParams* params) {
      return [&, t, d, params](const sv::KernelTable& kt, const std::vector<double>& uu) {
        std::vector<int64_t> path(width + 1, -1);
        const sv::Outcome o =
            sv::tree_round(kt, t, d, tokens.data(), parents.data(), width, uu.data(), vocab, params, path.data());
        return std::make_tuple(static_cast<int>(o.error), o.n_accepted, o.token, path[0]);
      };
    };
    // The uniforms to try: the random ones, then each uniform's boundaries on the exact rule.
    const auto trials_of = [&](const auto& outcome) {
      std::vector<std::vector<double>> trials = {u};
      for (int64_t j = 0; j <= width; ++j)
        for (const auto& uu :
             boundary_uniforms(u, j, 0.0, [&](const std::vector<double>& x) { return outcome(exact, x); })) {
          trials.push_back(uu);
          ++boundaries;
        }
      return trials;
    };
    const auto outcome = outcome_on(t_rows, d_rows, nullptr);
    const std::vector<std::vector<double>> trials = trials_of(outcome);
    for (size_t i = 0; i < trials.size(); ++i) {
      g_store_table = &exact;
      sv::KernelTable counted_exact = exact;
      counted_exact.residual_store = counted_store;
      g_store_calls = 0;
      const auto want = outcome(counted_exact, trials[i]);
      const int64_t exact_stores = g_store_calls;
      for (const sv::KernelTable* kt : kts) {
        sv::KernelTable counted = *kt;
        g_store_table = kt;
        counted.residual_store = counted_store;
        g_store_calls = 0;
        const auto got = outcome(counted, trials[i]);
        if (i == 0 && g_store_calls < exact_stores && std::get<1>(want) == 0) ++decided_draws;
        if (i == 0 && kept_kind && g_store_calls < exact_stores && exact_stores >= 2) ++decided_kept;
        char buf[200];
        std::snprintf(buf, sizeof buf, "%s chained tree bounds %d (width %lld, V=%lld, kinds %d, uniforms %zu)",
                      kt->name, r, (long long)width, (long long)vocab, kind_set, i);
        check(got == want && std::get<0>(want) == 0 && g_store_calls <= exact_stores,
              std::string(buf) + ": the exact rule's outcome");
      }
    }
    // The same tree on logits at temperature only (T log of the rows: weights proportional
    // to them up to rounding), whose nodes Note [Tree bounds] decides from approximate weight
    // sums: every path against the exact rule without bounds, at random uniforms and at each
    // uniform's boundaries on the logits rows. A node decided by bounds warps neither row
    // exactly (fewer row_weights calls).
    sv::WarpParams wp;
    wp.temperature = 0.9f;
    std::vector<float> tl(target.size()), dl(draft.size());
    for (size_t v = 0; v < tl.size(); ++v) {
      tl[v] = target[v] > 0.0f ? 0.9f * std::log(target[v]) : -std::numeric_limits<float>::infinity();
      dl[v] = draft[v] > 0.0f ? 0.9f * std::log(draft[v]) : -std::numeric_limits<float>::infinity();
    }
    // The edge kind again on the warped rows: the draft's logit at t moved to where its
    // weight over Q is nearest the target's over P (then up to 3 ulps off), as the
    // logarithms round it away from the edge.
    for (int64_t c = 0; c < width; ++c) {
      const int64_t t = tokens[c];
      if (kinds_of[c] != 1 || !std::isfinite(tl[t]) || !std::isfinite(dl[t])) continue;
      const auto warped_mass = [&](const std::vector<float>& x, float* z_max) {
        int64_t top = 0;
        exact.row_argmax(x.data(), vocab, &top);
        *z_max = x[top] / 0.9f;
        std::vector<float> w(vocab);
        std::vector<double> blocks(sv::num_blocks(vocab));
        double mass = 0.0;
        exact.row_weights(x.data(), vocab, 0.9f, *z_max, w.data(), blocks.data(), &mass);
        return mass;
      };
      float zp = 0.0f, zq = 0.0f;
      const double P = warped_mass(tl, &zp), Q = warped_mass(dl, &zq);
      const double want = static_cast<double>(sv::weight(tl[t], 0.9f, zp)) * Q / P;
      float x = dl[t];
      for (int step = 0; step < 64; ++step) {  // weight is monotone in x: walk towards want
        const double w = sv::weight(x, 0.9f, zq);
        const float next = std::nextafter(x, w < want ? std::numeric_limits<float>::infinity() : -1e30f);
        if (std::fabs(sv::weight(next, 0.9f, zq) - want) >= std::fabs(w - want)) break;
        x = next;
      }
      for (int64_t s = static_cast<int64_t>(rng.below(7)) - 3; s != 0; s += s > 0 ? -1 : 1)
        x = std::nextafter(x, s > 0 ? std::numeric_limits<float>::infinity() : -1e30f);
      if (x <= zq * 0.9f) dl[t] = x;  // not above the row's largest logit
    }
    const auto logit_outcome = outcome_on(sv::Rows{tl.data(), vocab}, sv::Rows{dl.data(), vocab}, &wp);
    const std::vector<std::vector<double>> logit_trials = trials_of(logit_outcome);
    for (size_t i = 0; i < logit_trials.size(); ++i) {
      g_weights_counted = &exact;
      sv::KernelTable counted_exact = exact;
      counted_exact.row_weights = counted_row_weights;
      g_weights_calls = 0;
      const auto want = logit_outcome(counted_exact, logit_trials[i]);
      const int64_t exact_calls = g_weights_calls;
      for (const sv::KernelTable* kt : kts) {
        if (kt->row_weight_sums == nullptr) continue;
        sv::KernelTable counted = *kt;
        g_weights_counted = kt;
        counted.row_weights = counted_row_weights;
        g_weights_calls = 0;
        const auto got = logit_outcome(counted, logit_trials[i]);
        if (i == 0 && g_weights_calls < exact_calls) ++decided_logit_nodes;
        char buf[200];
        std::snprintf(buf, sizeof buf, "%s chained tree bounds on logits %d (width %lld, V=%lld, kinds %d, uniforms %zu)",
                      kt->name, r, (long long)width, (long long)vocab, kind_set, i);
        check(got == want && std::get<0>(want) == 0, std::string(buf) + ": the exact rule's outcome");
      }
    }
  }
  if (count >= 50) {
    check(decided_logit_nodes * 2 > count,
          "tree nodes on logits decided by bounds (" + std::to_string(decided_logit_nodes) + ")");
    check(decided_kept * 8 > count, "chained bounds decided rejections of kept tokens (" + std::to_string(decided_kept) + ")");
    check(decided_draws * 4 > count, "chained bounds decided draws after every child (" + std::to_string(decided_draws) + ")");
    check(boundaries > count, "chained tree boundaries searched (" + std::to_string(boundaries) + ")");
    const int64_t block_rejections = sv::tree_block_rejections() - block_rejections_before;
    check(block_rejections > count, "children rejected from block masses alone (" + std::to_string(block_rejections) + ")");
  }
}

// Note [Tree bounds] on logits from Note [Weight upper bounds]' passes alone (cheap_node),
// on rows where those bounds are tight: target weights at 2^-(k + 0.4427) below its top
// weight 1 (exponents k from 3 to 6; Schraudolph's float the most above its weight there, so P's lower bound is
// within roundings of P), draft weights at powers of two (floats exact: Q's upper bound
// near Q), the draft the target times 2^(d + 0.4427) in each block (d from -2 to 2: each
// block's residual of one sign, so the block masses' bound on M_1 is near M_1). The root's
// 2 to 6 children: tokens the residual drops (the draft's weight 1), tokens in blocks the
// residual keeps, any token; uniforms random and at each child's and the draw's boundaries
// on the exact rule. Every path must give the exact rule's outcome, and the cheap passes
// must have decided nodes and rejected children from block masses. A lower bound on P
// without Schraudolph's 1.0615, or block bounds on q without its excess, reject children
// the rule accepts here.
void cheap_tree_bound_tests(Rng& rng, const std::vector<const sv::KernelTable*>& kts, int count, int64_t max_n) {
  const sv::KernelTable exact = without_bounds(sv::scalar_kernels());
  const float temperature = 0.9f;
  const double ln2 = 0.6931471805599453;
  const int64_t cheap_before = sv::tree_cheap_nodes(), block_before = sv::tree_block_rejections();
  int64_t boundaries = 0;
  for (int r = 0; r < count; ++r) {
    const int64_t vocab = 1000 + rng.below(max_n);
    const int64_t width = 2 + rng.below(5);
    std::vector<int64_t> parents(width, -1), tokens(width);
    std::vector<int> exponent(vocab), shift(sv::num_blocks(vocab));
    for (int& d : shift) d = static_cast<int>(rng.below(5)) - 2;
    std::vector<float> target(vocab * (width + 1)), draft(vocab * (width + 1));
    // The top in the first block: the one pass's reference R (that block's max) is then the
    // row's max, and the floats are formed against it as the tight rows need (against another
    // R their fractions, hence their excesses, shift: the bounds stay valid, not tight).
    const int64_t top = rng.below(std::min<int64_t>(vocab, sv::kMassBlock));
    for (int64_t v = 0; v < vocab; ++v) {
      exponent[v] = 3 + static_cast<int>(rng.below(4));
      const int d = shift[v / sv::kMassBlock];
      target[v] = v == top ? 0.0f : static_cast<float>(-(exponent[v] + 0.4427) * ln2 * temperature);
      draft[v] = v == top ? 0.0f : static_cast<float>(-(exponent[v] - d) * ln2 * temperature);
    }
    // The shift d whose blocks have p(t) / P = (Q / P) 2^-(d + 0.4427) q(t) / Q least above q(t) / Q.
    double P = 0.0, Q = 0.0;
    for (int64_t v = 0; v < vocab; ++v) {
      P += std::exp2(v == top ? 0.0 : -(exponent[v] + 0.4427));
      Q += std::exp2(v == top ? 0.0 : -(exponent[v] - shift[v / sv::kMassBlock]));
    }
    int kept_shift = -2;
    for (int d = -2; d <= 2; ++d)
      if (Q / P * std::exp2(-(d + 0.4427)) > 1.0) kept_shift = d;
    for (int64_t c = 0; c < width; ++c) {
      // Kind 0 in a block where the draft is highest against the target (its weight 1 then
      // costs the block masses' bound little), kind 1 where p(t) / P is least above
      // q(t) / Q (the residual keeps t, and a uniform may reject it), kind 2 anywhere. Every
      // other round starts with kinds 0 and 1, the order whose second child only the block
      // masses can reject without a pass (random kinds reach that too rarely for the count
      // below on some seeds).
      const int kind = r % 2 == 0 && c < 2 ? static_cast<int>(c) : static_cast<int>(rng.below(3));
      int64_t t = rng.below(vocab);
      for (int tries = 0; tries < 20 && kind < 2 && shift[t / sv::kMassBlock] != (kind == 0 ? 2 : kept_shift); ++tries)
        t = rng.below(vocab);
      tokens[c] = t;
      if (kind == 0) draft[t] = 0.0f;  // the draft's largest weight: the residual drops t
    }
    for (int64_t row = 1; row <= width; ++row)  // the leaves' rows: any logits
      for (int64_t v = 0; v < vocab; ++v) {
        target[row * vocab + v] = static_cast<float>(3.0 * (rng.uniform() - 0.5));
        draft[row * vocab + v] = target[row * vocab + v];
      }
    sv::WarpParams wp;
    wp.temperature = temperature;
    const auto outcome = [&](const sv::KernelTable& kt, const std::vector<double>& uu) {
      std::vector<int64_t> path(width + 1, -1);
      const sv::Outcome o = sv::tree_round(kt, sv::Rows{target.data(), vocab}, sv::Rows{draft.data(), vocab},
                                           tokens.data(), parents.data(), width, uu.data(), vocab, &wp, path.data());
      return std::make_tuple(static_cast<int>(o.error), o.n_accepted, o.token, path[0]);
    };
    std::vector<double> u(width + 1);
    for (double& x : u) x = rng.uniform();
    std::vector<std::vector<double>> trials = {u};
    for (int64_t j = 0; j <= width; ++j)
      for (const auto& uu : boundary_uniforms(u, j, 0.0, [&](const std::vector<double>& x) { return outcome(exact, x); })) {
        trials.push_back(uu);
        ++boundaries;
      }
    for (size_t i = 0; i < trials.size(); ++i) {
      const auto want = outcome(exact, trials[i]);
      for (const sv::KernelTable* kt : kts) {
        char buf[160];
        std::snprintf(buf, sizeof buf, "%s cheap tree bounds %d (width %lld, V=%lld, uniforms %zu)", kt->name, r,
                      (long long)width, (long long)vocab, i);
        check(outcome(*kt, trials[i]) == want && std::get<0>(want) == 0, std::string(buf) + ": the exact rule's outcome");
      }
    }
  }
  if (count >= 50) {
    const int64_t cheap = sv::tree_cheap_nodes() - cheap_before, blocks = sv::tree_block_rejections() - block_before;
    check(cheap > count, "logits tree nodes decided from the cheap passes (" + std::to_string(cheap) + ")");
    check(blocks > count / 4, "children rejected from the cheap block bounds (" + std::to_string(blocks) + ")");
    check(boundaries > count, "cheap tree boundaries searched (" + std::to_string(boundaries) + ")");
  }
}

// Note [Ragged batches]: run_batch on random ragged batches (mixed greedy and sampled
// sequences, K_b from 0 to 6, probability and logits rows, with and without draft rows,
// both methods) equals the single-sequence rounds on each sequence's rows with the same
// uniforms, on one thread and on three (the pool of Note [Batch threads]); with malformed
// rows in two sequences, both report the lower one.
void batch_tests(Rng& rng, const std::vector<const sv::KernelTable*>& kts, int rounds, int64_t vocab) {
  for (int r = 0; r < rounds; ++r) {
    const int64_t batch = 1 + rng.below(24);
    std::vector<int64_t> cu(batch);
    for (int64_t b = 0, total = 0; b < batch; ++b) cu[b] = total += rng.below(7);
    const int64_t n = cu[batch - 1];
    const bool logits = rng.below(2), with_draft = rng.below(2);
    const sv::Method method = rng.below(2) ? sv::Method::kBlock : sv::Method::kToken;
    std::vector<float> target((n + batch) * vocab), draft(std::max<int64_t>(n, 1) * vocab);
    for (float& x : draft) x = logits ? static_cast<float>(rng.uniform() * 8.0 - 4.0) : static_cast<float>(rng.uniform());
    std::vector<int64_t> tokens(n);
    for (int64_t b = 0; b < batch; ++b) {
      const int64_t first = b > 0 ? cu[b - 1] : 0, k = cu[b] - first;
      for (int64_t i = 0; i <= k; ++i) {  // target row i of sequence b: its draft row, nudged
        float* row = target.data() + (first + b + i) * vocab;
        for (int64_t v = 0; v < vocab; ++v) {
          const float d = i < k ? draft[(first + i) * vocab + v] : static_cast<float>(rng.uniform());
          row[v] = logits ? d + static_cast<float>(rng.uniform() - 0.5) : d * static_cast<float>(0.5 + rng.uniform());
        }
        if (i < k) {
          int64_t best = 0;
          kts[0]->row_argmax(draft.data() + (first + i) * vocab, vocab, &best);
          tokens[first + i] = rng.below(3) ? best : rng.below(vocab);
        }
      }
    }
    std::vector<sv::WarpParams> params(batch);
    std::unique_ptr<bool[]> greedy(new bool[batch]);
    for (int64_t b = 0; b < batch; ++b) {
      greedy[b] = rng.below(3) == 0;
      params[b].temperature = greedy[b] ? 0.0f : 0.6f + static_cast<float>(rng.uniform());
      params[b].top_p = rng.below(2) ? 0.8 : 1.0;
      params[b].top_k = rng.below(3) == 0 ? 5 : 0;
    }
    const sv::Rows t_rows{target.data(), vocab};
    const sv::Rows d_rows = with_draft ? sv::Rows{draft.data(), vocab} : sv::Rows{nullptr, 0};
    sv::Batch in{t_rows, d_rows, tokens.data(), cu.data(), batch, vocab, method,
                 logits ? params.data() : nullptr, logits ? nullptr : greedy.get()};
    std::vector<int64_t> begin(batch);
    std::vector<double> u(static_cast<size_t>(sv::batch_uniform_offsets(in, begin.data())));
    for (double& x : u) x = rng.uniform();
    int64_t width = 1;
    for (int64_t b = 0; b < batch; ++b) width = std::max(width, sv::batch_k(in, b) + 1);
    char buf[160];
    std::snprintf(buf, sizeof buf, "batch %d (B=%lld, N=%lld, V=%lld, %s, %s, %s)", r, (long long)batch,
                  (long long)n, (long long)vocab, logits ? "logits" : "probs", with_draft ? "draft rows" : "one-hot",
                  method == sv::Method::kBlock ? "block" : "token");
    for (const sv::KernelTable* kt : kts) {
      bool same = true;
      std::vector<int64_t> want(batch * width, -1), want_n(batch);
      for (int64_t b = 0; b < batch; ++b) {  // the single-sequence rounds
        const int64_t first = b > 0 ? cu[b - 1] : 0, k = cu[b] - first;
        const sv::Rows t{target.data() + (first + b) * vocab, vocab};
        const sv::Rows d = with_draft ? sv::Rows{draft.data() + first * vocab, vocab} : sv::Rows{nullptr, 0};
        const double* ub = begin[b] < 0 ? nullptr : u.data() + begin[b];
        const sv::Outcome o = sv::batch_greedy(in, b) ? sv::verify_greedy_round(*kt, t, tokens.data() + first, k, vocab)
                              : logits ? sv::accept_logits_round(*kt, t, d, tokens.data() + first, ub, k, vocab, params[b], method)
                                       : sv::accept_round(*kt, t, d, tokens.data() + first, ub, k, vocab, method);
        same &= o.error == sv::InputError::kNone;
        std::copy(tokens.begin() + first, tokens.begin() + first + o.n_accepted, want.begin() + b * width);
        want[b * width + o.n_accepted] = o.token;
        want_n[b] = o.n_accepted;
      }
      check(same, std::string(kt->name) + " " + buf + ": single rounds succeed");
      for (int threads : {1, 3}) {
        std::vector<int64_t> out(batch * width, 7), accepted(batch, -7);
        // run_batch_threads: the caller and pool workers (Note [Batch threads]).
        const sv::BatchFailure f =
            sv::run_batch_threads(*kt, in, u.data(), begin.data(), width, out.data(), accepted.data(), threads);
        const bool ok = out == want && accepted == want_n && f.sequence < 0;
        check(ok, std::string(kt->name) + " " + buf + ", " + std::to_string(threads) + " thread(s): the single rounds");
      }
      // NaN in the first target row of two sequences, which every sequence reads.
      if (batch >= 3) {
        const int64_t lo = 1 + rng.below(batch - 2), hi = lo + 1 + rng.below(batch - lo - 1);
        std::vector<float> bad = target;
        for (int64_t b : {lo, hi}) bad[sv::batch_target_begin(in, b) * vocab + 1] = std::nanf("");
        sv::Batch in_bad = in;
        in_bad.target = sv::Rows{bad.data(), vocab};
        for (int threads : {1, 3}) {
          std::vector<int64_t> out(batch * width), accepted(batch);
          const int64_t first = sv::run_batch_threads(*kt, in_bad, u.data(), begin.data(), width, out.data(),
                                                      accepted.data(), threads).sequence;
          check(first == lo, std::string(kt->name) + " " + buf + ", " + std::to_string(threads) +
                                 " thread(s): the lower malformed sequence is reported");
        }
      }
    }
  }
}

}  // namespace

// Arguments: --quick (fewer rounds: the emulated runs), --seed N (another random stream, for
// soak runs beyond the fixed one `make native` uses).
// Note [Greedy logits rows]: at temperature 0 a logits row is refused as at any temperature
// (+inf at its first column, no finite value), by every greedy reader, on every path, float32
// and bfloat16; probability rows (verify_greedy) keep +inf as their argmax.
void greedy_logits_row_tests(const std::vector<const sv::KernelTable*>& kts) {
  const float inf = std::numeric_limits<float>::infinity();
  for (const int64_t n : {1, 7, 255, 1025, 5000}) {
    for (int kind = 0; kind < 3; ++kind) {  // 0: +inf at two columns, 1: all -inf, 2: +inf in a masked row
      std::vector<float> row(2 * n);  // row 0 bad, row 1 fine
      for (int64_t v = 0; v < 2 * n; ++v) row[v] = static_cast<float>((v * 37) % 101) * 0.25f - 9.0f;
      if (kind > 0) std::fill(row.begin(), row.begin() + n, -inf);
      const int64_t col = kind == 1 ? -1 : n / 3, later = (n / 3 + n) / 2;
      if (kind != 1) row[col] = row[later] = inf;
      const sv::InputError want = kind == 1 ? sv::InputError::kNoFinite : sv::InputError::kInfinite;
      std::vector<uint16_t> half(2 * n);
      for (int64_t v = 0; v < 2 * n; ++v) half[v] = to_bf16(row[v]);
      sv::WarpParams greedy;
      greedy.temperature = 0.0f;
      const int64_t token = 0, parent = -1;
      for (const sv::KernelTable* kt : kts) {
        for (const sv::Rows rows : {sv::Rows{row.data(), n}, sv::Rows{half.data(), n, sv::Elem::kBF16}}) {
          const std::string what = std::string(kt->name) + " greedy logits row, n = " + std::to_string(n) +
                                   ", kind " + std::to_string(kind) + (rows.type == sv::Elem::kF32 ? "" : ", bf16");
          const sv::Outcome s = sv::sample_round(*kt, rows.row(0), n, greedy, 0.0);
          const sv::Outcome g = sv::verify_greedy_round(*kt, rows, &token, 1, n, true);
          std::vector<int64_t> path(2, -1);
          const sv::Outcome t = sv::tree_round(*kt, rows, sv::Rows{nullptr, 0}, &token, &parent, 1, nullptr, n, &greedy,
                                               path.data());
          for (const sv::Outcome& o : {s, g, t})
            check(o.error == want && o.row <= 0 && (kind == 1 || o.col == col), what + ": refused, first column");
          check(sv::verify_greedy_round(*kt, rows, &token, 1, n).error == sv::InputError::kNone,
                what + ": probabilities keep +inf (and -inf) rows");
        }
      }
    }
  }
}

int main(int argc, char** argv) {
  bool quick = false;
  uint64_t seed = 20261129;
  for (int i = 1; i < argc; ++i) {
    if (std::strcmp(argv[i], "--quick") == 0) {
      quick = true;
    } else if (std::strcmp(argv[i], "--seed") == 0 && i + 1 < argc) {
      seed = std::strtoull(argv[++i], nullptr, 10);
    } else {
      std::fprintf(stderr, "usage: %s [--quick] [--seed N]\n", argv[0]);
      return 2;
    }
  }
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

  std::printf("seed %llu%s\n", static_cast<unsigned long long>(seed), quick ? ", quick" : "");
  Rng rng{seed};
  std::vector<int64_t> sizes;
  for (int64_t n = 1; n <= 80; ++n) sizes.push_back(n);
  for (int64_t n : {127, 128, 129, 255, 256, 257, 1000, 1023, 1024, 1025, 1039, 1040, 1041, 2047,
                    2048, 2049, 3072, 4111, 32000, 32771, 128256, 151936})
    sizes.push_back(n);
  for (int64_t n : sizes) kernel_parity(rng, kts, n);
  round_tests(rng, kts, quick ? 300 : 3000, 5000);
  round_tests(rng, kts, quick ? 20 : 200, 160000);
  exp_accuracy(rng);
  for (int64_t n : sizes) warp_parity(rng, kts, n);
  top_p_long_rows(rng, kts);
  top_p_boundary_tests(rng, kts, quick ? 6 : 24);
  logits_round_tests(rng, kts, quick ? 100 : 1000, 3000);
  logits_round_tests(rng, kts, quick ? 5 : 40, 160000);
  widen_exhaustive(kts);
  for (int64_t n : sizes) half_parity(rng, kts, n);
  half_round_tests(rng, kts, quick ? 40 : 300, 3000);
  half_round_tests(rng, kts, quick ? 3 : 12, 160000);
  mass_bound_tests(rng, kts, quick ? 200 : 2000, 3000);
  mass_bound_tests(rng, kts, quick ? 4 : 20, 160000);
  bounded_sampling_tests(rng, kts, quick ? 200 : 2000, 3000);
  bounded_sampling_tests(rng, kts, quick ? 8 : 40, 160000);
  bounded_rejection_tests(rng, kts, quick ? 150 : 1500, 3000);
  bounded_rejection_tests(rng, kts, quick ? 6 : 30, 160000);
  bounded_block_tests(rng, kts, quick ? 100 : 1000, 3000);
  bounded_block_tests(rng, kts, quick ? 4 : 20, 160000);
  bounded_warping_kernels(rng, kts);
  upper_weight_bound_tests(rng, kts);
  argmax_upper_kernel_tests(rng, kts);
  shifted_upper_bound_tests(rng, kts);
  coarse_draw_tests(rng, kts, quick ? 150 : 1500);
  top_p_bound_kernel_tests(rng, kts);
  top_p_bound_rounds(rng, kts, quick ? 150 : 1200, 3000);
  top_p_bound_rounds(rng, kts, quick ? 4 : 20, 160000);
  bounded_warping_rounds(rng, kts, quick ? 200 : 1500, 3000);
  bounded_warping_rounds(rng, kts, quick ? 6 : 30, 160000);
  draft_bound_tests(rng, kts, quick ? 150 : 1200, 3000);
  draft_bound_tests(rng, kts, quick ? 4 : 20, 160000);
  bounded_logit_rejection_tests(rng, kts, quick ? 60 : 500, 3000);
  reused_logit_buffer_tests(rng, kts, quick ? 100 : 600);
  bounded_logit_rejection_tests(rng, kts, quick ? 3 : 12, 160000);
  tree_tests(rng, kts, quick ? 100 : 800, 700);
  tree_tests(rng, kts, quick ? 4 : 20, 40000);
  tree_bound_tests(rng, kts, quick ? 150 : 1500, 3000);
  tree_bound_tests(rng, kts, quick ? 6 : 30, 40000);
  chained_tree_bound_tests(rng, kts, quick ? 60 : 400, 2000);
  chained_tree_bound_tests(rng, kts, quick ? 3 : 12, 40000);
  cheap_tree_bound_tests(rng, kts, quick ? 50 : 200, 3000);
  batch_tests(rng, kts, quick ? 20 : 150, 300);
  batch_tests(rng, kts, quick ? 2 : 6, 32000);
  greedy_logits_row_tests(kts);

  std::printf("native: %lld passed, %lld failed\n", (long long)g_passed, (long long)g_failed);
  return g_failed == 0 ? 0 : 1;
}
