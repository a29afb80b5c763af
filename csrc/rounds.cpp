// The op contracts on raw rows: which rows are read, the acceptance test, what is sampled.
// Scalar code shared by every instruction set; the O(V) work goes through the KernelTable.
#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "sample_index.h"
#include "spec_verify.h"

namespace spec_verify {
namespace {

// Block-mass scratch, reused across calls on the same thread.
double* scratch(int slot, int64_t n) {
  thread_local std::vector<double> buffers[3];
  std::vector<double>& buffer = buffers[slot];
  const auto needed = static_cast<size_t>(num_blocks(n));
  if (buffer.size() < needed) buffer.resize(needed);
  return buffer.data();
}
enum Slot { kTargetBlocks = 0, kDraftBlocks = 1, kResidualBlocks = 2 };

// Error path only: the first element of a row that a mass may not contain.
Outcome bad_mass_row(const float* row, int64_t n, bool in_draft, int64_t i) {
  Outcome out;
  out.in_draft = in_draft;
  out.row = i;
  for (int64_t v = 0; v < n; ++v) {
    const float x = row[v];
    InputError kind = InputError::kNone;
    if (std::isnan(x)) kind = InputError::kNaN;
    else if (x < 0.0f) kind = InputError::kNegative;
    else if (std::isinf(x)) kind = InputError::kInfinite;
    if (kind != InputError::kNone) {
      out.error = kind;
      out.col = v;
      out.value = x;
      return out;
    }
  }
  return out;  // unreachable for a row the kernel rejected
}

// Error path only: the first NaN of a row the argmax rejected.
Outcome nan_row(const float* row, int64_t n) {
  Outcome out;
  out.error = InputError::kNaN;
  for (int64_t v = 0; v < n; ++v) {
    if (std::isnan(row[v])) {
      out.col = v;
      out.value = row[v];
      break;
    }
  }
  return out;
}

Outcome zero_mass_row(bool in_draft, int64_t i) {
  Outcome out;
  out.error = InputError::kZeroMass;
  out.in_draft = in_draft;
  out.row = i;
  return out;
}

Outcome in_row(Outcome out, bool in_draft, int64_t i) {
  out.in_draft = in_draft;
  out.row = i;
  return out;
}

Outcome emitted(int64_t n_accepted, int64_t token) {
  Outcome out;
  out.n_accepted = n_accepted;
  out.token = token;
  return out;
}

}  // namespace

void residual_scales(double P, double Q, float* a, float* b) {
  // a = 2^s / P lies in (2^(s-eP-1), 2^(s-eP)]. Keep a and b normal floats with headroom
  // ([2^-125, 2^126]) and p * a <= 2^s * (1 + 2^-24) far below FLT_MAX; prefer s = 0
  // (normalised rows). Only masses more than 2^240 apart leave no such s: then the factor
  // of the larger mass underflows and the caller falls back to sampling from p.
  const int eP = std::ilogb(P);
  const int eQ = std::ilogb(Q);
  const int lo = std::max(eP, eQ) - 124;
  const int hi = std::min(std::min(eP, eQ) + 126, 125);
  const int s = lo > hi ? hi : std::clamp(0, lo, hi);
  *a = static_cast<float>(std::ldexp(1.0, s) / P);
  *b = static_cast<float>(std::ldexp(1.0, s) / Q);
}

Outcome verify_greedy_round(const KernelTable& kt, Rows target, const int64_t* tokens,
                            int64_t k, int64_t vocab) {
  for (int64_t i = 0;; ++i) {
    const float* row = target.row(i);
    int64_t best = 0;
    if (!kt.row_argmax(row, vocab, &best)) return in_row(nan_row(row, vocab), false, i);
    if (i == k || best != tokens[i]) return emitted(i, best);
  }
}

namespace {

// A draw from row p (mass P > 0, block masses p_blocks) with uniform u.
int64_t draw(const float* p, const double* p_blocks, double P, double u, int64_t vocab) {
  return sample_index(p_blocks, vocab, u * P, [p](int64_t v) { return p[v]; });
}

// Position i of a round, rows p and q with masses P, Q > 0: true and the emitted token in
// *token if draft token t is rejected, false if it is accepted.
bool rejected(const KernelTable& kt, const float* p, const float* q, double P, double Q,
              const double* p_blocks, int64_t t, double u_i, double u_k, int64_t vocab,
              int64_t* token) {
  // Accept t with probability min(1, (p(t)/P) / (q(t)/Q)), without dividing:
  // u * q(t) * P < p(t) * Q. p(t) = 0 never passes; q(t) = 0 < p(t) always does.
  const double pt = p[t], qt = q[t];
  if (u_i * qt * P < pt * Q) return false;

  float a = 0.0f, b = 0.0f;
  residual_scales(P, Q, &a, &b);
  double* r_blocks = scratch(kResidualBlocks, vocab);
  double R = 0.0;
  kt.residual_mass(p, q, a, b, vocab, r_blocks, &R);
  if (R > 0.0) {
    *token = sample_index(r_blocks, vocab, u_k * R, [=](int64_t v) { return residual_value(p[v], q[v], a, b); });
  } else {
    // Zero residual mass happens only through rounding (p and q nearly proportional):
    // the exact residual is then negligible next to p, so draw from p.
    *token = draw(p, p_blocks, P, u_k, vocab);
  }
  return true;
}

// Warp scratch, reused across calls on the same thread: the target's and the draft's
// warped row.
struct WarpScratch {
  std::vector<float> p, q;
  std::vector<double> p_blocks, q_blocks;
  void fit(int64_t vocab) {
    if (p.size() < static_cast<size_t>(vocab)) {
      p.resize(vocab);
      q.resize(vocab);
      p_blocks.resize(num_blocks(vocab));
      q_blocks.resize(num_blocks(vocab));
    }
  }
};
WarpScratch& warp_scratch(int64_t vocab) {
  thread_local WarpScratch s;
  s.fit(vocab);
  return s;
}

}  // namespace

Outcome accept_round(const KernelTable& kt, Rows target, Rows draft, const int64_t* tokens,
                     const double* uniforms, int64_t k, int64_t vocab) {
  double* p_blocks = scratch(kTargetBlocks, vocab);
  double* q_blocks = scratch(kDraftBlocks, vocab);
  for (int64_t i = 0; i < k; ++i) {
    const float* p = target.row(i);
    const float* q = draft.row(i);
    double P = 0.0, Q = 0.0;
    if (kt.row_mass_pair == nullptr || !kt.row_mass_pair(p, q, vocab, p_blocks, q_blocks, &P, &Q)) {
      // Row by row (no fast path, or it declined): the masses, or which row is at fault. The
      // target row's errors come first: a zero-mass target row is reported below before
      // the draft row is looked at.
      if (!kt.row_mass(p, vocab, p_blocks, &P)) return bad_mass_row(p, vocab, false, i);
      if (P != 0.0 && !kt.row_mass(q, vocab, q_blocks, &Q)) return bad_mass_row(q, vocab, true, i);
    }
    if (P == 0.0) return zero_mass_row(false, i);
    if (Q == 0.0) return zero_mass_row(true, i);
    int64_t x = -1;
    if (rejected(kt, p, q, P, Q, p_blocks, tokens[i], uniforms[i], uniforms[k], vocab, &x)) return emitted(i, x);
  }
  const float* p = target.row(k);
  double P = 0.0;
  if (!kt.row_mass(p, vocab, p_blocks, &P)) return bad_mass_row(p, vocab, false, k);
  if (P == 0.0) return zero_mass_row(false, k);
  return emitted(k, draw(p, p_blocks, P, uniforms[k], vocab));
}

Outcome sample_round(const KernelTable& kt, const float* x, int64_t n, const WarpParams& params,
                     double u) {
  if (params.temperature == 0.0f) {
    Outcome out;
    if (!kt.row_argmax(x, n, &out.token)) return nan_row(x, n);
    return out;
  }
  WarpScratch& s = warp_scratch(n);
  WarpedRow p{s.p.data(), s.p_blocks.data(), 0.0};
  const Outcome bad = warp_row(kt, x, n, params, &p);
  if (bad.error != InputError::kNone) return bad;
  return emitted(0, draw(p.values, p.blocks, p.mass, u, n));
}

Outcome accept_logits_round(const KernelTable& kt, Rows target, Rows draft, const int64_t* tokens,
                            const double* uniforms, int64_t k, int64_t vocab,
                            const WarpParams& params) {
  WarpScratch& s = warp_scratch(vocab);
  WarpedRow p{s.p.data(), s.p_blocks.data(), 0.0};
  WarpedRow q{s.q.data(), s.q_blocks.data(), 0.0};
  for (int64_t i = 0; i < k; ++i) {
    Outcome bad = warp_row(kt, target.row(i), vocab, params, &p);
    if (bad.error != InputError::kNone) return in_row(bad, false, i);
    bad = warp_row(kt, draft.row(i), vocab, params, &q);
    if (bad.error != InputError::kNone) return in_row(bad, true, i);
    // Warped rows have positive mass: the largest weight, 1, is always kept.
    int64_t x = -1;
    if (rejected(kt, p.values, q.values, p.mass, q.mass, p.blocks, tokens[i], uniforms[i], uniforms[k],
                 vocab, &x))
      return emitted(i, x);
  }
  const Outcome bad = warp_row(kt, target.row(k), vocab, params, &p);
  if (bad.error != InputError::kNone) return in_row(bad, false, k);
  return emitted(k, draw(p.values, p.blocks, p.mass, uniforms[k], vocab));
}

}  // namespace spec_verify
