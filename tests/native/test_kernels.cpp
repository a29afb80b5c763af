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
void warp_parity(Rng& rng, const std::vector<const sv::KernelTable*>& kts, int64_t n) {
  const sv::KernelTable& ref = sv::scalar_kernels();
  const sv::KernelTable& full = ref;
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

// top-p's cutoff where the target sits at a tie group's running mass:
// Gaussian logits (T 0.8), the group where the mass from the top crosses a fraction f of the
// row's mass, and top_p = A (1 + d) / Z for A the canonical mass above the group, Z the
// row's, and d from 0 and +-1 ulp to +-2^-14: the exact rule keeps the group iff
// fl(top_p Z) > A. Every path's warp_row equals the scalar path's, bit for bit.
void top_p_boundary_tests(Rng& rng, const std::vector<const sv::KernelTable*>& kts, int count) {
  const sv::KernelTable& ref = sv::scalar_kernels();
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
    const sv::KernelTable& exact = ref;
    std::vector<float> want(n), got(n);
    std::vector<double> want_blocks(nb), got_blocks(nb);
    for (const double d : {0.0, 0x1p-53, -0x1p-53, 0x1p-40, -0x1p-40, 0x1p-30, -0x1p-30, 0x1p-24, -0x1p-24, 0x1p-21,
                           -0x1p-21, 0x1p-19, -0x1p-19, 0x1p-17, -0x1p-17, 0x1p-14, -0x1p-14}) {
      params.top_p = std::min(1.0, a * (1.0 + d) / z);
      sv::WarpedRow out_ref{want.data(), want_blocks.data(), 0.0};
      sv::warp_row(exact, x.data(), n, params, &out_ref);
      for (const sv::KernelTable* kt : kts) {
        sv::WarpedRow out{got.data(), got_blocks.data(), 0.0};
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

// ---- uniforms at the rules' boundaries ----------------------------------------------------

// The table every path is held to: the scalar reference.
const sv::KernelTable& reference() { return sv::scalar_kernels(); }

// Rounds whose uniforms sit at the acceptance boundary u = p(t) Q / (q(t) P) (and a few
// ulps either side, and for one-hot drafts at p(t) / P) give the scalar path's outcomes on
// every path.
void acceptance_boundary_tests(Rng& rng, const std::vector<const sv::KernelTable*>& kts, int count, int64_t max_n) {
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
      const sv::KernelTable& exact = reference();
      const sv::Outcome a = sv::accept_round(*kt, t_rows, d_rows, tokens.data(), u.data(), k, n);
      const sv::Outcome b = sv::accept_round(exact, t_rows, d_rows, tokens.data(), u.data(), k, n);
      const sv::Outcome c = sv::accept_round(*kt, t_rows, none, tokens.data(), u1.data(), k, n);
      const sv::Outcome d = sv::accept_round(exact, t_rows, none, tokens.data(), u1.data(), k, n);
      check(a.error == b.error && a.n_accepted == b.n_accepted && a.token == b.token,
            std::string(kt->name) + " accept equals scalar at the boundary, round " + std::to_string(r));
      check(c.error == d.error && c.n_accepted == d.n_accepted && c.token == d.token,
            std::string(kt->name) + " one-hot accept equals scalar at the boundary, round " + std::to_string(r));
    }
  }
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

// Draws whose threshold u T lands on a canonical running sum (boundary_uniform): from the
// target row of a round without drafts (K = 0), from the residual of a round rejected at
// position 0 (p_0(t_0) = 0), and from p_0 without t_0 (one-hot, rejected there); rows of
// several kinds and scales. Every path gives the scalar path's token.
void draw_boundary_tests(Rng& rng, const std::vector<const sv::KernelTable*>& kts, int count, int64_t max_n) {
  const sv::KernelTable& exact = reference();
  const int fills[] = {kUniform, kSpiky, kSparse, kDenormal, kTies};
  const double scales[] = {1.0, 0x1p-30, 0x1p40};
  const sv::Rows none{nullptr, 0};
  for (int r = 0; r < count; ++r) {
    const int64_t n = 2 + rng.below(max_n);
    std::vector<float> p(2 * n), q(n);
    for (float* row : {p.data(), p.data() + n, q.data()}) {
      std::vector<float> v = make_row(rng, n, fills[rng.below(5)]);
      const double scale = scales[rng.below(3)];
      for (int64_t i = 0; i < n; ++i) row[i] = static_cast<float>(v[i] * scale);
      row[rng.below(n)] = static_cast<float>(0.5 * scale);
    }
    // t_0 a token p_0 gives 0, with some mass left elsewhere.
    const int64_t t = rng.below(n);
    p[t] = 0.0f;
    if (*std::max_element(p.begin(), p.begin() + n) == 0.0f) p[(t + 1) % n] = 0.5f;
    std::vector<double> blocks(sv::num_blocks(n)), rb(sv::num_blocks(n));
    double P = 0.0, Q = 0.0, R = 0.0;
    exact.row_mass(p.data(), n, blocks.data(), &P);
    exact.row_mass(q.data(), n, rb.data(), &Q);
    const sv::Rows t_rows{p.data(), n}, d_rows{q.data(), n};
    const auto same = [&](const sv::Rows& d, const int64_t* tokens, const double* u, int64_t k, const char* what) {
      const sv::Outcome want = sv::accept_round(exact, t_rows, d, tokens, u, k, n);
      for (const sv::KernelTable* kt : kts) {
        const sv::Outcome got = sv::accept_round(*kt, t_rows, d, tokens, u, k, n);
        check(got.error == want.error && got.n_accepted == want.n_accepted && got.token == want.token,
              std::string(kt->name) + " draw at a running sum, " + what + ", round " + std::to_string(r) +
                  " n=" + std::to_string(n));
      }
    };
    // K = 0: the draw from p_0; one-hot rejected at 0: from p_0 without t_0 (p_0(t_0) = 0).
    const double u0[] = {boundary_uniform(rng, blocks, P, n, [&p](int64_t v) { return p[v]; })};
    same(none, nullptr, u0, 0, "K = 0");
    const double u1[] = {0.5, boundary_uniform(rng, blocks, P, n, [&p](int64_t v) { return p[v]; })};
    same(none, &t, u1, 1, "one-hot, rejected at 0");
    // With a draft row, rejected at 0: the residual's canonical running sums.
    float a = 0.0f, b = 0.0f;
    sv::residual_scales(P, Q, &a, &b);
    exact.residual_mass(p.data(), q.data(), a, b, n, rb.data(), &R);
    if (!(R > 0.0)) continue;
    const double u2[] = {0.5, boundary_uniform(rng, rb, R, n, [&](int64_t v) { return sv::residual_value(p[v], q[v], a, b); })};
    same(d_rows, &t, u2, 1, "the residual, rejected at 0");
  }
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


// Block rounds (with draft rows and one-hot) on every path against the scalar path: at
// random uniforms, and at the boundaries of each uniform's effect found by bisection on the
// scalar round (the two adjacent doubles where its outcome changes, and a few ulps around
// them), on rows normalised or scaled far from mass 1.
void block_boundary_tests(Rng& rng, const std::vector<const sv::KernelTable*>& kts, int count, int64_t max_n) {
  const int fills[] = {kUniform, kSpiky, kSparse, kDenormal, kTies};
  const sv::KernelTable& exact = reference();
  int64_t boundaries = 0;
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
      std::vector<std::vector<double>> cases{u};
      // One uniform's boundary, searched with the scalar round.
      const int64_t j = rng.below(k + 1);
      const auto outcome = [&](const std::vector<double>& uu) {
        const sv::Outcome o = sv::accept_round(exact, t_rows, dr, tokens.data(), uu.data(), k, n, sv::Method::kBlock);
        return std::make_pair(o.n_accepted, o.token);
      };
      const std::vector<std::vector<double>> at = boundary_uniforms(u, j, 0.0, outcome);
      boundaries += !at.empty();
      cases.insert(cases.end(), at.begin(), at.end());
      for (size_t c = 0; c < cases.size(); ++c) {
        const sv::Outcome b = sv::accept_round(exact, t_rows, dr, tokens.data(), cases[c].data(), k, n, sv::Method::kBlock);
        for (const sv::KernelTable* kt : kts) {
          const sv::Outcome a = sv::accept_round(*kt, t_rows, dr, tokens.data(), cases[c].data(), k, n, sv::Method::kBlock);
          char buf[220];
          std::snprintf(buf, sizeof buf, "%s block round %d k=%lld n=%lld %s scales %a %a, case %zu (u_%lld's boundary)",
                        kt->name, r, (long long)k, (long long)n, dr.data ? "draft rows" : "one-hot", sp, sq, c,
                        (long long)j);
          check(a.error == b.error && a.n_accepted == b.n_accepted && a.token == b.token,
                std::string(buf) + ": the scalar outcome");
        }
      }
    }
  }
  if (count >= 20)
    check(boundaries > count / 4, "block round boundaries searched (" + std::to_string(boundaries) + ")");
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

// Logits rounds (temperature, top-p, min-p) give the scalar path's outcomes on every path:
// random uniforms, uniforms at a canonical running sum of the warped row (sample), and
// uniforms at the acceptance boundary u = p(t) Q / (q(t) P) (accept_logits, with draft rows
// and one-hot).
void logits_boundary_rounds(Rng& rng, const std::vector<const sv::KernelTable*>& kts, int count, int64_t max_n) {
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
    if (rng.below(2) == 0) params.top_p = rng.below(4) == 0 ? 0.999 : 0.05 + 0.9 * rng.uniform();
    if (rng.below(4) == 0) params.min_p = 0.2 * rng.uniform();  // after top-p or alone
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
      const sv::KernelTable& exact = reference();
      char buf[200];
      std::snprintf(buf, sizeof buf, "%s logits round %d k=%lld n=%lld kind=%d T=%g mode %d", kt->name, r,
                    (long long)k, (long long)n, kind, params.temperature, mode);
      const sv::Outcome s = sv::sample_round(*kt, target.data(), n, params, u[k]);
      const sv::Outcome s_exact = sv::sample_round(exact, target.data(), n, params, u[k]);
      check(s.error == sv::InputError::kNone && s.token == s_exact.token, std::string(buf) + ": sample");
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
}

// Logits rounds at temperature only whose first token is often rejected, at random uniforms
// and at the boundaries of u_0 and u_K found by bisection on the scalar round (adjacent
// doubles where its outcome changes, ±2 ulps): the scalar outcome on every path.
void logits_rejection_boundary_tests(Rng& rng, const std::vector<const sv::KernelTable*>& kts, int count, int64_t max_n) {
  int64_t boundaries = 0;
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
    const sv::KernelTable& ref_exact = reference();
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
      for (size_t c = 0; c < cases.size(); ++c) {
        const sv::Outcome a = sv::accept_logits_round(*kt, t_rows, d_rows, tokens.data(), cases[c].data(), k, n, params);
        const sv::Outcome b = sv::accept_logits_round(ref_exact, t_rows, d_rows, tokens.data(), cases[c].data(), k, n, params);
        char buf[200];
        std::snprintf(buf, sizeof buf, "%s logits rejection round %d k=%lld n=%lld kind=%d T=%g case %zu", kt->name,
                      r, (long long)k, (long long)n, kind, params.temperature, c);
        check(a.error == b.error && a.n_accepted == b.n_accepted && a.token == b.token, std::string(buf) + ": the scalar outcome");
      }
    }
  }
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


// Spine trees as the benchmark builds them (width w, depth d; at every level the siblings
// before the spine child rejected), on normalised and unnormalised rows, with uniforms at 0,
// random, and at the spine child's acceptance boundary (its exact residual's mass, a few
// ulps either side): every path equals the scalar path.
void spine_tree_tests(Rng& rng, const std::vector<const sv::KernelTable*>& kts, int count, int64_t max_n) {
  const sv::KernelTable& exact = reference();
  int64_t boundaries = 0;
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
    const sv::Outcome want = sv::tree_round(exact, t_rows, d_rows, tokens.data(), parents.data(), n, u.data(), vocab,
                                            nullptr, want_path.data());
    for (const sv::KernelTable* kt : kts) {
      const sv::Outcome got = sv::tree_round(*kt, t_rows, d_rows, tokens.data(), parents.data(), n, u.data(), vocab,
                                             nullptr, path.data());
      char buf[200];
      std::snprintf(buf, sizeof buf, "%s spine tree %d (width %lld, depth %lld, V=%lld, %s, uniforms %s)", kt->name,
                    r, (long long)width, (long long)depth, (long long)vocab, normalised ? "normalised" : "unnormalised",
                    mode == 0 ? "0" : mode == 1 ? "random" : "at a boundary");
      check(got.error == want.error && got.n_accepted == want.n_accepted && got.token == want.token &&
                std::equal(path.begin(), path.begin() + got.n_accepted, want_path.begin()),
            std::string(buf) + ": the scalar outcome");
    }
  }
  if (count >= 50) {
    check(boundaries > count / 16, "tree acceptances at the boundary tried (" + std::to_string(boundaries) + ")");
  }
}

// Chained residuals (Note [Tree verification]): one node with 2 to 7 children drawn from the draft,
// their tokens of four kinds: the draft's ten times its largest value (the residual drops
// them: r(t) = 0 for certain), at the edge of that (q(t) / Q within a few ulps of p(t) / P),
// kept by the first residual and often rejected there (p(t) / P = c q(t) / Q, c in [1, 1.5):
// deciding needs the residual's mass), or any token (repeats allowed). Rows
// normalised or scaled by up to 2^+-40; uniforms random, and at every child's and the draw's
// boundaries found by bisection on the scalar rule. Every path must give the scalar
// outcome. Then the same trees on logits rows at temperature only. A quarter of the drafts
// are the target within 10% or 1% value by value (the residuals' masses then small); a
// quarter are the target times a factor per block.
void chained_tree_tests(Rng& rng, const std::vector<const sv::KernelTable*>& kts, int count, int64_t max_n) {
  const sv::KernelTable& exact = reference();
  const int fills[] = {kUniform, kSpiky, kSparse, kDenormal};
  int64_t boundaries = 0;
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
      const auto want = outcome(exact, trials[i]);
      for (const sv::KernelTable* kt : kts) {
        const auto got = outcome(*kt, trials[i]);
        char buf[200];
        std::snprintf(buf, sizeof buf, "%s chained tree %d (width %lld, V=%lld, kinds %d, uniforms %zu)",
                      kt->name, r, (long long)width, (long long)vocab, kind_set, i);
        check(got == want && std::get<0>(want) == 0, std::string(buf) + ": the scalar outcome");
      }
    }
    // The same tree on logits at temperature only (T log of the rows: weights proportional
    // to them up to rounding): every path against the scalar path, at random uniforms and at
    // each uniform's boundaries on the logits rows.
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
      const auto want = logit_outcome(exact, logit_trials[i]);
      for (const sv::KernelTable* kt : kts) {
        const auto got = logit_outcome(*kt, logit_trials[i]);
        char buf[200];
        std::snprintf(buf, sizeof buf, "%s chained tree on logits %d (width %lld, V=%lld, kinds %d, uniforms %zu)",
                      kt->name, r, (long long)width, (long long)vocab, kind_set, i);
        check(got == want && std::get<0>(want) == 0, std::string(buf) + ": the scalar outcome");
      }
    }
  }
  if (count >= 50) {
    check(boundaries > count, "chained tree boundaries searched (" + std::to_string(boundaries) + ")");
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
  acceptance_boundary_tests(rng, kts, quick ? 200 : 2000, 3000);
  acceptance_boundary_tests(rng, kts, quick ? 4 : 20, 160000);
  draw_boundary_tests(rng, kts, quick ? 200 : 2000, 3000);
  draw_boundary_tests(rng, kts, quick ? 6 : 30, 160000);
  block_boundary_tests(rng, kts, quick ? 100 : 1000, 3000);
  block_boundary_tests(rng, kts, quick ? 4 : 20, 160000);
  logits_boundary_rounds(rng, kts, quick ? 200 : 1500, 3000);
  logits_boundary_rounds(rng, kts, quick ? 6 : 30, 160000);
  logits_rejection_boundary_tests(rng, kts, quick ? 60 : 500, 3000);
  logits_rejection_boundary_tests(rng, kts, quick ? 3 : 12, 160000);
  tree_tests(rng, kts, quick ? 100 : 800, 700);
  tree_tests(rng, kts, quick ? 4 : 20, 40000);
  spine_tree_tests(rng, kts, quick ? 150 : 1500, 3000);
  spine_tree_tests(rng, kts, quick ? 6 : 30, 40000);
  chained_tree_tests(rng, kts, quick ? 60 : 400, 2000);
  chained_tree_tests(rng, kts, quick ? 3 : 12, 40000);
  batch_tests(rng, kts, quick ? 20 : 150, 300);
  batch_tests(rng, kts, quick ? 2 : 6, 32000);
  greedy_logits_row_tests(kts);

  std::printf("native: %lld passed, %lld failed\n", (long long)g_passed, (long long)g_failed);
  return g_failed == 0 ? 0 : 1;
}
