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

Outcome zero_mass_row(bool in_draft, int64_t i) {
  Outcome out;
  out.error = InputError::kZeroMass;
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
    if (!kt.row_argmax(row, vocab, &best)) {
      Outcome out;
      out.error = InputError::kNaN;
      out.row = i;
      for (int64_t v = 0; v < vocab; ++v) {
        if (std::isnan(row[v])) {
          out.col = v;
          out.value = row[v];
          break;
        }
      }
      return out;
    }
    if (i == k || best != tokens[i]) return emitted(i, best);
  }
}

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

    // Accept t with probability min(1, (p(t)/P) / (q(t)/Q)), without dividing:
    // u * q(t) * P < p(t) * Q. p(t) = 0 never passes; q(t) = 0 < p(t) always does.
    const int64_t t = tokens[i];
    const double pt = p[t], qt = q[t];
    if (uniforms[i] * qt * P < pt * Q) continue;

    float a = 0.0f, b = 0.0f;
    residual_scales(P, Q, &a, &b);
    double* r_blocks = scratch(kResidualBlocks, vocab);
    double R = 0.0;
    kt.residual_mass(p, q, a, b, vocab, r_blocks, &R);
    if (R > 0.0) {
      const int64_t x = sample_index(r_blocks, vocab, uniforms[k] * R, [=](int64_t v) {
        return residual_value(p[v], q[v], a, b);
      });
      return emitted(i, x);
    }
    // Zero residual mass happens only through rounding (p and q nearly proportional):
    // the exact residual is then negligible next to p, so draw from p.
    return emitted(i, sample_index(p_blocks, vocab, uniforms[k] * P, [p](int64_t v) { return p[v]; }));
  }
  const float* p = target.row(k);
  double P = 0.0;
  if (!kt.row_mass(p, vocab, p_blocks, &P)) return bad_mass_row(p, vocab, false, k);
  if (P == 0.0) return zero_mass_row(false, k);
  return emitted(k, sample_index(p_blocks, vocab, uniforms[k] * P, [p](int64_t v) { return p[v]; }));
}

}  // namespace spec_verify
