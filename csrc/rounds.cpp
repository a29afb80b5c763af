// The op contracts on raw rows: which rows are read, the acceptance test, what is sampled.
// Scalar code shared by every instruction set; the O(V) work goes through the KernelTable.
#include <algorithm>
#include <cmath>
#include <limits>
#include <type_traits>
#include <vector>

#include "exp_f32.h"
#include "sample_index.h"
#include "spec_verify.h"

namespace spec_verify {
namespace {

// Error path only: the first element of a row that a mass may not contain.
Outcome bad_mass_row(RowRef row, int64_t n, bool in_draft, int64_t i) {
  Outcome out;
  out.in_draft = in_draft;
  out.row = i;
  for (int64_t v = 0; v < n; ++v) {
    const float x = value_at(row, v);
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
Outcome nan_row(RowRef row, int64_t n) {
  Outcome out;
  out.error = InputError::kNaN;
  for (int64_t v = 0; v < n; ++v) {
    if (std::isnan(value_at(row, v))) {
      out.col = v;
      out.value = value_at(row, v);
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

// Note [Draft bounds] that do not hold for draft row i.
Outcome draft_bounds_error(int64_t i) {
  Outcome out;
  out.error = InputError::kDraftBounds;
  out.in_draft = true;
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

int residual_scales(double P, double Q, float* a, float* b) {
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
  return s;
}

// Note [Greedy logits rows]
// At temperature 0 a logits row is read by its argmax alone, yet it obeys warp_row's rules:
// NaN (the argmax reports it), +inf, and no finite value are errors. The argmax's value
// tells the other two: the lowest index of the largest value holds +inf iff the row has
// one, and the first such (warp_row names that column too); -inf iff every value is -inf
// (no NaN). One read of one element, the same on every path (the index is).
Outcome greedy_logits_error(RowRef row, int64_t best) {
  Outcome out;
  const float x = value_at(row, best);
  if (x == std::numeric_limits<float>::infinity()) {
    out.error = InputError::kInfinite;
    out.col = best;
    out.value = x;
  } else if (x == -std::numeric_limits<float>::infinity()) {
    out.error = InputError::kNoFinite;
    out.value = x;
  }
  return out;
}

Outcome verify_greedy_round(const KernelTable& kt, Rows target, const int64_t* tokens,
                            int64_t k, int64_t vocab, bool logits) {
  for (int64_t i = 0;; ++i) {
    const RowRef row = target.row(i);
    int64_t best = 0;
    if (!typed_argmax(kt, row, vocab, &best)) return in_row(nan_row(row, vocab), false, i);
    if (logits) {
      const Outcome bad = greedy_logits_error(row, best);
      if (bad.error != InputError::kNone) return in_row(bad, false, i);
    }
    if (i == k || best != tokens[i]) return emitted(i, best);
  }
}

namespace {

constexpr float kNoFloor = -std::numeric_limits<float>::infinity();

// One row as a round sees it: its values (the caller's row in place, of any element type,
// or a warped copy in `buffer`), its block masses and its mass. A warped row may be left
// lazy (warp_row_lazy): values below `floor` read as +0.0 until materialize() zeroes them,
// which only what reads the whole row (a residual) needs.
struct Side {
  std::vector<float> buffer;
  std::vector<double> blocks;
  RowRef row{static_cast<const float*>(nullptr)};
  double mass = 0.0;
  float floor = kNoFloor;
  float at(int64_t v) const {
    const float x = value_at(row, v);
    return x < floor ? 0.0f : x;
  }
  void materialize(const KernelTable& kt, int64_t vocab) {
    if (floor > 0.0f) spec_verify::materialize(kt, buffer.data(), vocab, floor);
    floor = kNoFloor;
  }
};

// Position n of a round: target row p, draft row q (unused for one-hot drafts) and, when a
// residual was summed, its float32 factors, block masses and mass. Block verification
// also keeps rho_n and n for the position it may end at.
struct Position {
  Side p, q;
  std::vector<double> r_blocks;
  std::vector<double> guess_err;  // Note [Bounded sampling]: margins of guessed residual sums
  bool guessed = false;           // r_blocks holds row_mass_pair_guess's sums
  double r_mass = -1.0;  // < 0: not summed
  float a = 0.0f, b = 0.0f;
  double rho = 1.0;
  int64_t index = 0;
  void fit(int64_t vocab, bool warped) {
    const auto blocks = static_cast<size_t>(num_blocks(vocab));
    for (Side* s : {&p, &q}) {
      if (s->blocks.size() < blocks) s->blocks.resize(blocks);
      if (warped && s->buffer.size() < static_cast<size_t>(vocab)) s->buffer.resize(vocab);
    }
    if (r_blocks.size() < blocks) r_blocks.resize(blocks);
    if (guess_err.size() < blocks) guess_err.resize(blocks);
  }
};

// Two positions per thread, reused across calls: block verification keeps the position it
// may end at in one while it reads the next into the other.
Position* positions(int64_t vocab, bool warped) {
  thread_local Position slots[2];
  slots[0].fit(vocab, warped);
  slots[1].fit(vocab, warped);
  return slots;
}

// Draws Note [Bounded sampling] left to the canonical masses, on this thread.
thread_local int64_t t_bounded_fallbacks = 0;
thread_local int64_t t_top_p_accepted = 0;  // Note [Top-p upper bounds]'s acceptances (a test hook)
thread_local int64_t t_block_rejections = 0;  // Note [Tree bounds]' rejections from block masses (a test hook)
thread_local int64_t t_cheap_nodes = 0;  // logits tree nodes decided by cheap_node (a test hook)
thread_local int64_t t_coarse_draws = 0;  // draws decided by Note [Coarse draws] (a test hook)

// w of Note [Mass bounds] for rows of n values (0: no bound).
double mass_bound_width(int64_t n) {
  const double g = static_cast<double>(n - 1) * 0x1p-24;
  return g < 0.25 ? 2.0 * g / (1.0 - g) + 0x1p-28 : 0.0;
}

// Note [Tree bounds]: an upper bound on the canonical mass of r(v) = max(0, x(v) * a - q(v) * b)
// over n values whose canonical mass is at most x_mass, without reading them: each r(v) is at
// most the float x(v) * a (subtracting q(v) * b >= 0 and clamping never raise it), which is
// within 2^-24 of the exact product (or 2^-149 below the normal range), and a canonical sum
// of n values >= 0 is within n 2^-53 of exact (x_mass's and r's alike): 2^-20 + n 2^-50
// covers them, and this bound's own roundings, with room.
double residual_mass_ceiling(float a, double x_mass, int64_t n) {
  const double nd = static_cast<double>(n);
  return static_cast<double>(a) * x_mass * (1.0 + 0x1p-20 + nd * 0x1p-50) + nd * 0x1p-149;
}

// Note [Bounded sampling]: draw_without's answer (row x without token t, uniform u) from the
// row's float32 block sums `blocks` (row_block_sums), t's block summed again with t as
// +0.0 (overwritten in blocks), if certain; false: nothing decided.
bool bounded_draw_without(const KernelTable& kt, const float* x, int64_t vocab, int64_t t, double u, double* blocks,
                          int64_t* token) {
  const int64_t b = t / kMassBlock, begin = b * kMassBlock;
  const int64_t len = std::min(kMassBlock, vocab - begin);
  float block[kMassBlock];
  std::copy(x + begin, x + begin + len, block);
  block[t - begin] = 0.0f;
  kt.row_block_sums(block, len, &blocks[b]);
  double rest = -1.0;
  if (bounded_sample_index(blocks, vocab, u, [x, t](int64_t v) { return v == t ? 0.0f : x[v]; }, token, &rest))
    return true;
  if (rest == 0.0) {  // nothing but t has mass: draw_without's answer
    *token = t;
    return true;
  }
  return false;
}

// Note [Bounded rejection]'s factors a = 1 / X and b = 1 / Q rounded to float32 (s = 0) for
// X in [x_lo, x_hi] and Q in [q_lo, q_hi]: the rounded quotients are monotone, so a and b lie
// between the factors of the bounds. guess() takes the factors a residual is summed at and
// their distance to those ranges; err() is then guess_block_err for one block.
struct GuessedFactors {
  double a_lo, a_hi, b_lo, b_hi;
  float ga = 0.0f, gb = 0.0f;
  double da = 0.0, db = 0.0;
  GuessedFactors(double x_lo, double x_hi, double q_lo, double q_hi)
      : a_lo(static_cast<float>(1.0 / x_hi)), a_hi(static_cast<float>(1.0 / x_lo)),
        b_lo(static_cast<float>(1.0 / q_hi)), b_hi(static_cast<float>(1.0 / q_lo)) {}
  void guess(float a, float b) {
    ga = a;
    gb = b;
    da = std::max(std::fabs(a_lo - ga), std::fabs(a_hi - ga));
    db = std::max(std::fabs(b_lo - gb), std::fabs(b_hi - gb));
  }
  // At the middles of the ranges of X and Q.
  void guess_middle(double x_mid, double q_mid) {
    guess(static_cast<float>(1.0 / x_mid), static_cast<float>(1.0 / q_mid));
  }
  double err(double pb, double qb, double g) const { return guess_block_err(pb, qb, g, ga, gb, da, db, a_hi, b_hi); }
};

// Note [Tree bounds]: the chained residuals of a node's rejected children on probability
// rows, r_k = max(0, r_{k-1} * a_k - q * b) (r_0 = p) with a_k = 1 / M_{k-1} (M_0 = P, M_k the
// canonical mass of r_k) and b = 1 / Q, each a quotient rounded once to float32 while the
// masses stay in [kLow, kHigh] (residual_scales' power of two is then 2^0). Known: each a_k
// in [a_lo[k], a_hi[k]] (a_hi infinite while M_{k-1} has no lower bound), b in [b_lo, b_hi],
// every M_k <= ceiling, and M_1 .. M_summed in [m_lo, m_hi] once summed.
struct ChainBounds {
  static constexpr double kLow = 0x1p-120, kHigh = 0x1p120;
  static constexpr int64_t kLevels = 33;  // residuals a node may chain through bounds (32)
  float a_lo[kLevels + 1], a_hi[kLevels + 1];
  double m_lo[kLevels + 1], m_hi[kLevels + 1];
  float b_lo, b_hi;
  double q_lo, q_hi;  // Q's range
  double ceiling;
  int64_t vocab, summed = 0;
  float ga = 0.0f, gb = 0.0f;  // the factors the last summed level was guessed at
  // Rows summed in place of the exact ones (approximate weights, Note [Bounded warping]):
  // each value within value_err of the exact one, relatively (plus 2^-148).
  double value_err = 0.0;
  // Lower bounds on M_1 .. M_block_levels from the rows' block masses alone (block_lower):
  // block_m[k] >= kLow for k <= block_levels; block_done once a level fell below kLow.
  double block_m[kLevels + 1] = {};
  int64_t block_levels = 0;
  bool block_done = false;
  ChainBounds(double p_lo, double p_hi, double q_lo, double q_hi, int64_t n)
      : b_lo(static_cast<float>(1.0 / q_hi)), b_hi(static_cast<float>(1.0 / q_lo)), q_lo(q_lo), q_hi(q_hi),
        vocab(n) {
    // a_k * M_{k-1} <= 1 + 2^-22, so M_k <= ceiling (residual_mass_ceiling) at every level,
    // and a_k >= 1 / ceiling for k >= 2.
    ceiling = residual_mass_ceiling(1.0f, 1.0 + 0x1p-22, n);
    a_lo[1] = static_cast<float>(1.0 / p_hi);
    a_hi[1] = static_cast<float>(1.0 / p_lo);
    for (int64_t k = 2; k <= kLevels; ++k) {
      a_lo[k] = static_cast<float>(1.0 / ceiling);
      a_hi[k] = std::numeric_limits<float>::infinity();
    }
  }
  // Lower and upper values of r_j(t) from p(t) and q(t): residual_value is monotone (up in
  // x and a, down in b), so the exact chain lies between the chains at the factors' ends.
  // *in_range: every M_k for k < j, which the exact rule used to make a factor, is certainly
  // in [kLow, kHigh] (summed, or at least the lower r_k(t) >= kLow; M_k <= ceiling).
  float lower(float x, float qt, int64_t j, bool* in_range) const {
    *in_range = true;
    for (int64_t k = 1; k <= j; ++k) {
      x = residual_value(x, qt, a_lo[k], b_hi);
      if (k < j && k > summed && k > block_levels) *in_range &= x >= static_cast<float>(kLow);
    }
    return x;
  }
  float upper(float x, float qt, int64_t j) const {
    for (int64_t k = 1; k <= j && x > 0.0f; ++k)
      x = std::isinf(a_hi[k]) ? a_hi[k] : residual_value(x, qt, a_hi[k], b_lo);
    return x;
  }
  // Sums level k = summed + 1 at guessed factors into fr (block margins into ferr), and
  // bounds M_k and a_{k+1}; false (nothing decided) if M_k is not certainly in range.
  //
  // In real arithmetic r_k(v) = max(0, p(v) A_k - q(v) B_k) with A_k = a_1 ... a_k and
  // B_k = B_{k-1} a_k + b (B_1 = b): a value negative at one level stays negative. Rounding
  // puts each float r_k(v) within 2^-23 (1 + 2^-17) (k p(v) A_k + q(v) B_k) of it (each level
  // rounds r_{k-1} a_k, q b and their difference, and scales the error before it by a_k; up
  // to 32 levels), plus 2^-146 B_k / b below the normal range (the sum over levels of the
  // later factors' products is B_k / b). The guessed values max(0, p ga - q gb) move from
  // the real ones by at most |A_k - ga| p + |B_k - gb| q: guess_block_err with k A_k's and
  // B_k's upper bounds for the true factors' rounding. at_one: fr already holds the sums at
  // ga = gb = 1 (used where the factors' distance to 1 is below 2^-12). With value_err, p
  // and q are approximations of the exact rows: the factors times each value's error more
  // (fp and fq then bound the block masses of both).
  bool sum_next(const KernelTable& kt, const float* p, const float* q, const double* fp, const double* fq,
                double* fr, double* ferr, bool at_one) {
    const int64_t k = summed + 1;
    double A_lo = 1.0, A_hi = 1.0, B_lo = 0.0, B_hi = 0.0;
    for (int64_t l = 1; l <= k; ++l) {
      A_lo *= a_lo[l];
      A_hi *= a_hi[l];
      B_lo = B_lo * a_lo[l] + b_lo;
      B_hi = B_hi * a_hi[l] + b_hi;
    }
    // 2k float64 roundings at most on the way: 2^-45 covers them.
    A_lo *= 1.0 - 0x1p-45;
    B_lo *= 1.0 - 0x1p-45;
    A_hi *= 1.0 + 0x1p-45;
    B_hi *= 1.0 + 0x1p-45;
    const auto dist = [](double lo, double hi, float g) { return std::max(std::fabs(lo - g), std::fabs(hi - g)); };
    double da = dist(A_lo, A_hi, 1.0f), db = dist(B_lo, B_hi, 1.0f);
    if (at_one && std::max(da, db) < 0x1p-12) {
      ga = gb = 1.0f;
    } else {
      ga = static_cast<float>(0.5 * (A_lo + A_hi));
      gb = static_cast<float>(0.5 * (B_lo + B_hi));
      da = dist(A_lo, A_hi, ga);
      db = dist(B_lo, B_hi, gb);
      kt.residual_block_sums(p, q, ga, gb, vocab, fr);
    }
    const double ka = static_cast<double>(k) * A_hi * (1.0 + 0x1p-17), kb = B_hi * (1.0 + 0x1p-17);
    const double floor = 0x1p-138 * (B_hi / b_lo) + (value_err > 0.0 ? (A_hi + B_hi) * 0x1p-140 : 0.0);
    for (int64_t b = 0; b < num_blocks(vocab); ++b) {
      const double pb = fp[b] * (1.0 + 0x1p-20), qb = fq[b] * (1.0 + 0x1p-20);
      ferr[b] = guess_block_err(pb, qb, fr[b], ga, gb, da, db, ka, kb) + value_err * (A_hi * pb + B_hi * qb) + floor;
    }
    double lo = 0.0, hi = 0.0;
    if (!bounded_mass_range(fr, vocab, &lo, &hi, ferr) || !(lo >= kLow) || !(hi <= kHigh)) return false;
    m_lo[k] = k <= block_levels ? std::max(lo, block_m[k]) : lo;
    m_hi[k] = std::min(hi, ceiling);
    a_lo[k + 1] = static_cast<float>(1.0 / m_hi[k]);
    a_hi[k + 1] = static_cast<float>(1.0 / m_lo[k]);
    summed = k;
    return true;
  }
  // Note [Tree bounds], block lower bounds: lower bounds on M_1 .. M_j from the node rows'
  // block masses, no pass (levels added to those known; used while nothing is summed).
  // bounds(b) gives a lower bound on block b's exact mass of p and an upper bound on q's;
  // x holds the last level's block bounds (room for num_blocks(vocab)).
  //
  // Each float r_k(v) = max(0, fl(fl(r_{k-1}(v) a_k) - fl(q(v) b))) is at least
  // (1 - 2^-24) (r_{k-1}(v) a_k (1 - 2^-24) - q(v) b (1 + 2^-24) - 2^-149) (each product
  // rounded at most 2^-24 relatively, or 2^-150 below the normal range; a positive
  // difference rounded down at most 2^-24; otherwise 0, which is above that), so a block's
  // sum of r_k is at least the same expression in the block's sums of r_{k-1} and q (a sum
  // of max(0, .) is at least the max of the sum), with a_k >= a_lo[k], b <= b_hi; 2^-22 for
  // 2^-24 leaves room for the float64 roundings here. Blocks where p dominates q value by
  // value lose nothing; a block holding both signs loses what cancels inside it. M_k, the
  // canonical sum, is within n 2^-53 of the exact sum. Each level known bounds a_{k+1}.
  template <class BlockBounds>
  void block_lower(int64_t j, BlockBounds bounds, double* x) {
    const int64_t nb = num_blocks(vocab);
    if (block_levels == 0 && !block_done)
      for (int64_t b = 0; b < nb; ++b) x[b] = bounds(b).first;
    const double shrink = (1.0 - static_cast<double>(nb) * 0x1p-52) * (1.0 - static_cast<double>(vocab) * 0x1p-52);
    while (!block_done && block_levels < std::min(j, kLevels - 1)) {
      const int64_t k = block_levels + 1;
      const double a = static_cast<double>(a_lo[k]) * (1.0 - 0x1p-22), bq = static_cast<double>(b_hi) * (1.0 + 0x1p-22);
      double total = 0.0;
      for (int64_t b = 0; b < nb; ++b) {
        const double d = a * x[b] - bq * bounds(b).second - 0x1p-139;
        x[b] = d > 0.0 ? d * (1.0 - 0x1p-22) : 0.0;
        total += x[b];
      }
      const double m = total * shrink;
      if (!(m >= kLow)) {
        block_done = true;
        break;
      }
      block_m[k] = m;
      block_levels = k;
      a_hi[k + 1] = std::min(a_hi[k + 1], static_cast<float>(1.0 / m));
    }
  }
};

// Note [Tree bounds]: the children after a rejected first child c (then next[c], ...)
// against the chained residuals of ch, the node's rows summed as sp and sq (the rows
// themselves, or approximations of them within ch.value_err) with fp and fq bounding their
// block masses; values(t) gives the exact rows' p(t) and q(t). at_one: fr already holds the
// first residual's sums at factors 1. Returns the accepted child; -2 when every child is
// rejected, with the token drawn with u_draw into *token; or -1: nothing decided.
template <class Values, class BlockBounds>
int64_t chained_children(const KernelTable& kt, ChainBounds& ch, int64_t c, const std::vector<int64_t>& next,
                         const int64_t* tokens, const double* u, double u_draw, const float* sp, const float* sq,
                         const double* fp, const double* fq, bool at_one, double* fr, double* ferr, int64_t* token,
                         Values values, BlockBounds block_bounds, bool may_sum = true) {
  const auto sum_to = [&](int64_t j) {
    if (!may_sum) return false;
    for (; ch.summed < j; at_one = false)
      if (!ch.sum_next(kt, sp, sq, fp, fq, fr, ferr, at_one)) return false;
    return true;
  };
  int64_t j = 1;  // residuals made before child cj
  for (int64_t cj = next[c]; cj >= 0; cj = next[cj], ++j) {
    if (j >= ChainBounds::kLevels) return -1;
    const auto [pj, qj] = values(tokens[cj]);
    // r_j(t) = 0 for certain: rejected whatever M_j (M_j > 0 is the exact rule's condition
    // for trying it; a later acceptance or the final draw proves it).
    if (ch.upper(pj, qj, j) == 0.0f) continue;
    const double uqj = u[cj] * static_cast<double>(qj);
    // Accepted even if every residual kept all its mass (M_j <= ceiling): no pass at all.
    bool in_range = false;
    float lo = ch.lower(pj, qj, j, &in_range);
    if (in_range && uqj * ch.ceiling < static_cast<double>(lo) * ch.q_lo) return cj;
    // Rejected against the block masses' lower bound on M_j, no pass (while nothing is
    // summed: ferr is free), where certain.
    if (ch.summed == 0) {
      ch.block_lower(j, block_bounds, ferr);
      if (j <= ch.block_levels) {
        ch.lower(pj, qj, j, &in_range);
        if (in_range && uqj * ch.block_m[j] >= static_cast<double>(ch.upper(pj, qj, j)) * ch.q_hi) {
          ++t_block_rejections;
          continue;
        }
      }
    }
    // The masses up to M_j from the residuals summed at guessed factors.
    if (!sum_to(j)) return -1;
    lo = ch.lower(pj, qj, j, &in_range);
    const float hi = ch.upper(pj, qj, j);
    if (uqj * ch.m_hi[j] < static_cast<double>(lo) * ch.q_lo) return cj;
    if (uqj * ch.m_lo[j] >= static_cast<double>(hi) * ch.q_hi) continue;
    return -1;
  }
  // Every child rejected: the draw from r_j (the exact rule draws from it as M_j > 0).
  if (j >= ChainBounds::kLevels || !sum_to(j)) return -1;
  const float ga = ch.ga, gb = ch.gb;
  const auto guess = [sp, sq, ga, gb](int64_t v) { return residual_value(sp[v], sq[v], ga, gb); };
  if (bounded_sample_index(fr, ch.vocab, u_draw, guess, token, nullptr, ferr, true)) return -2;
  ++t_bounded_fallbacks;
  return -1;
}

// What a float32 pass decided at a one-hot position (ProbRows::bounded_one_hot).
enum class BoundedStep { kNone, kUnknown, kAccepted, kRejected };

// The rows of a round on probabilities: read in place, validated by their mass pass.
struct ProbRows {
  const KernelTable& kt;
  Rows target, draft;
  int64_t vocab;
  double width = mass_bound_width(vocab);
  static constexpr bool kWarped = false;
  // Note [Draft bounds] are for logits only.
  BoundedStep handed_off(int64_t, int64_t, double, Position*, Outcome*) const { return BoundedStep::kNone; }
  Outcome read_draft(int64_t, Side*) const { return Outcome{}; }
  bool bounds_hold(int64_t, int64_t, const Side&) const { return true; }

  // Note [Mass bounds]: true if position i certainly accepts t with uniform u (a one-hot
  // draft when `one_hot`), from float32 sums alone; false means nothing (read it exactly).
  // The sums go to *sp and *sq (unchanged where not taken).
  bool surely_accepted(int64_t i, bool one_hot, int64_t t, double u, double* sp, double* sq) const {
    const RowRef p = target.row(i);
    if (width == 0.0 || p.type != Elem::kF32) return false;
    float fp = 0.0f;
    if (!kt.row_sum_f32(static_cast<const float*>(p.data), vocab, &fp) || !(fp > 0.0f)) return false;
    *sp = fp;
    const double pt = value_at(p, t);
    if (one_hot) return u * (fp * (1.0 + width)) < pt;  // q = onehot(t), Q = 1
    const RowRef q = draft.row(i);
    if (q.type != Elem::kF32) return false;
    float fq = 0.0f;
    if (!kt.row_sum_f32(static_cast<const float*>(q.data), vocab, &fq) || !(fq > 0.0f)) return false;
    *sq = fq;
    return u * value_at(q, t) * (fp * (1.0 + width)) < pt * (fq * (1.0 - width));
  }
  // Whether the float32 sums are worth taking at position i: only where acceptance is
  // likely, judged by the masses seen last (a position that rejects pays for the sums and
  // then the exact masses). A guess: it changes the time, never the outcome.
  bool likely_accepted(int64_t i, bool one_hot, int64_t t, double u, double last_p, double last_q) const {
    if (width == 0.0) return false;
    const double pt = value_at(target.row(i), t);
    if (one_hot) return u * last_p < pt;
    return u * value_at(draft.row(i), t) * last_p < pt * last_q;
  }

  // Note [Tree bounds] (spec_verify.h): node row i's children (first c, then next[c]) decided
  // from float32 block sums of its rows alone, where certain. Returns the accepted child; -2
  // when every child is rejected, with the token drawn with uniform u_draw in *token; or -1:
  // nothing decided (read the node exactly; that also reports a malformed row). at's block
  // masses, fr, ferr: room for block sums.
  int64_t bounded_node(int64_t i, int64_t c, const std::vector<int64_t>& next, const int64_t* tokens,
                       const double* u, double u_draw, Position& at, double* fr, double* ferr, int64_t* token,
                       double* last_p, double* last_q) const {
    double* fp = at.p.blocks.data();
    double* fq = at.q.blocks.data();
    const RowRef pr = target.row(i), qr = draft.row(i);
    if (kt.row_block_sums == nullptr || kt.residual_block_sums == nullptr || pr.type != Elem::kF32 ||
        qr.type != Elem::kF32)
      return -1;
    const float* p = static_cast<const float*>(pr.data);
    const float* q = static_cast<const float*>(qr.data);
    // p's and q's sums, and max(0, p - q)'s in the same pass (the first residual guessed at
    // factors 1) where the path has it and the node likely needs them.
    const bool fused = kt.pair_block_sums != nullptr && first_residual_likely_summed(p, q, c, next, tokens, u,
                                                                                     *last_p, *last_q);
    if (fused ? !kt.pair_block_sums(p, q, vocab, fp, fq, fr)
              : !kt.row_block_sums(p, vocab, fp) || !kt.row_block_sums(q, vocab, fq))
      return -1;
    double p_lo = 0.0, p_hi = 0.0, q_lo = 0.0, q_hi = 0.0;
    if (!bounded_mass_range(fp, vocab, &p_lo, &p_hi) || !bounded_mass_range(fq, vocab, &q_lo, &q_hi)) return -1;
    *last_p = 0.5 * (p_lo + p_hi);
    *last_q = 0.5 * (q_lo + q_hi);
    if (!(p_lo >= ChainBounds::kLow) || !(p_hi <= ChainBounds::kHigh) || !(q_lo >= ChainBounds::kLow) ||
        !(q_hi <= ChainBounds::kHigh))
      return -1;
    // The exact test is u * q(t) * P < p(t) * Q; rounding is monotone, so bounds on P and Q
    // that decide it decide the exact one.
    const int64_t t = tokens[c];
    const double uq = u[c] * static_cast<double>(q[t]), pt = p[t];
    if (uq * p_hi < pt * q_lo) return c;
    if (!(uq * p_lo >= pt * q_hi)) return -1;
    // Rejected: the later children against the chained residuals.
    ChainBounds ch(p_lo, p_hi, q_lo, q_hi, vocab);
    const int64_t block_rejections = t_block_rejections;
    const int64_t decided = chained_children(
        kt, ch, c, next, tokens, u, u_draw, p, q, fp, fq, fused, fr, ferr, token,
        [p, q](int64_t v) { return std::make_pair(p[v], q[v]); },
        [fp, fq](int64_t b) {  // each sum within kBlockSumBound of its block's mass
          return std::make_pair(fp[b] * (1.0 - 0x1p-20), fq[b] * (1.0 + 0x1p-20));
        });
    t_blocks_sufficed = decided != -1 && ch.summed == 0 && t_block_rejections > block_rejections;
    return decided;
  }
  // Whether the last node with a rejected first child was decided by the block masses'
  // bounds with no residual summed (first_residual_likely_summed's guess), on this thread.
  static inline thread_local bool t_blocks_sufficed = false;
  // Whether bounded_node will likely need the first residual's sums at factors near 1,
  // judged at the masses seen last (P ~ last_p, Q ~ last_q): both near 1, the first child
  // likely rejected, and then the first later child whose token keeps residual mass not
  // clearly accepted against the ceiling, or none (the draw needs them); not while the last
  // such node needed no residual's sums (the block masses' bounds decided it). A guess: it
  // changes the time (the fused pass costs more than p's and q's alone on some cores), never
  // the outcome.
  static bool first_residual_likely_summed(const float* p, const float* q, int64_t c, const std::vector<int64_t>& next,
                                           const int64_t* tokens, const double* u, double last_p, double last_q) {
    if (!(std::fabs(last_p - 1.0) < 0x1p-12 && std::fabs(last_q - 1.0) < 0x1p-12) || t_blocks_sufficed) return false;
    if (u[c] * static_cast<double>(q[tokens[c]]) * last_p < static_cast<double>(p[tokens[c]]) * last_q) return false;
    const float a = static_cast<float>(1.0 / last_p), b = static_cast<float>(1.0 / last_q);
    for (int64_t cj = next[c]; cj >= 0; cj = next[cj]) {
      const float r = residual_value(p[tokens[cj]], q[tokens[cj]], a, b);
      if (r > 0.0f) return !(u[cj] * static_cast<double>(q[tokens[cj]]) * 1.001 < static_cast<double>(r) * last_q);
    }
    return true;
  }
  // Whether bounded_node can run on node row i (float32 rows on a path with the kernels).
  bool bounded_node_worth(int64_t i) const {
    return kt.row_block_sums != nullptr && kt.residual_block_sums != nullptr &&
           target.row(i).type == Elem::kF32 && draft.row(i).type == Elem::kF32;
  }
  // A node's first child without draft rows, accepted where certain (logits rows only).
  bool surely_first_child(int64_t, int64_t, double) const { return false; }

  // Note [Bounded sampling]: a draw from target row i with uniform u from its float32 block
  // sums (into p's block masses, which read_target overwrites), if certain; false means
  // nothing (read the row exactly: that also reports a malformed row).
  bool bounded_draw(int64_t i, double u, Side* p, int64_t* token) const {
    const RowRef row = target.row(i);
    if (kt.row_block_sums == nullptr || row.type != Elem::kF32) return false;
    const float* x = static_cast<const float*>(row.data);
    if (!kt.row_block_sums(x, vocab, p->blocks.data())) return false;
    if (bounded_sample_index(p->blocks.data(), vocab, u, [x](int64_t v) { return x[v]; }, token)) return true;
    ++t_bounded_fallbacks;
    return false;
  }

  // Note [Bounded sampling] at a one-hot position i (token t, uniform u; u_draw draws the
  // correction): the row's float32 block sums (into p's block masses) bound P, which decides
  // u * P < p(t) where that is certain; on a certain rejection the correction is drawn from
  // the sums with t's block summed again without t. kUnknown: nothing decided (read the
  // position exactly); kNone: no float32 pass was made. *mass_guess gets the sums' total.
  BoundedStep bounded_one_hot(int64_t i, int64_t t, double u, double u_draw, Side* p, double* mass_guess,
                              int64_t* token) const {
    const RowRef row = target.row(i);
    if (kt.row_block_sums == nullptr || row.type != Elem::kF32) return BoundedStep::kNone;
    const float* x = static_cast<const float*>(row.data);
    double* blocks = p->blocks.data();
    if (!kt.row_block_sums(x, vocab, blocks)) return BoundedStep::kUnknown;
    const int64_t nb = num_blocks(vocab);
    const double total = sum_in_fours(blocks, nb);
    if (!(total > 0.0) || !(total <= std::numeric_limits<double>::max())) return BoundedStep::kUnknown;
    *mass_guess = total;
    // P = total (1 +- d) (bounded_sample_index's margins); u * P rounds once more, inside d.
    const double d = block_sums_margin(nb);
    const double pt = x[t];
    if (u * (total + total * d) < pt) return BoundedStep::kAccepted;
    if (!(u * (total - total * d) > pt)) {
      ++t_bounded_fallbacks;
      return BoundedStep::kUnknown;
    }
    if (bounded_draw_without(kt, x, vocab, t, u_draw, blocks, token)) return BoundedStep::kRejected;
    ++t_bounded_fallbacks;
    return BoundedStep::kUnknown;
  }

  // Note [Bounded rejection]: position i with draft rows (token t, uniform u; u_draw draws
  // the correction) from float32 block sums alone: of p and q, then of the residual at
  // guessed factors (into at's p and q block masses, r_blocks and guess_err). Accepted, or
  // rejected with the correction drawn, where certain; kUnknown: nothing decided (read the
  // position exactly); kNone: no pass made. *sp and *sq get the middles of P's and Q's ranges.
  BoundedStep bounded_pair(int64_t i, int64_t t, double u, double u_draw, Position* at, double* sp, double* sq,
                           int64_t* token) const {
    const RowRef pr = target.row(i), qr = draft.row(i);
    if (kt.row_block_sums == nullptr || kt.residual_block_sums == nullptr || pr.type != Elem::kF32 ||
        qr.type != Elem::kF32)
      return BoundedStep::kNone;
    const float* p = static_cast<const float*>(pr.data);
    const float* q = static_cast<const float*>(qr.data);
    double* fp = at->p.blocks.data();
    double* fq = at->q.blocks.data();
    double* fg = at->r_blocks.data();
    // One pass with the residual guessed at factors 1 (rows of mass near 1) where the path
    // has it and the last rejection's rows on this thread were near mass 1 (a guess: it
    // changes the time, never the outcome), else the two rows' sums alone.
    thread_local bool t_near_one = true;
    const bool fused = kt.pair_block_sums != nullptr && t_near_one;
    if (fused ? !kt.pair_block_sums(p, q, vocab, fp, fq, fg)
              : !kt.row_block_sums(p, vocab, fp) || !kt.row_block_sums(q, vocab, fq))
      return BoundedStep::kUnknown;
    double p_lo = 0.0, p_hi = 0.0, q_lo = 0.0, q_hi = 0.0;
    if (!bounded_mass_range(fp, vocab, &p_lo, &p_hi) || !bounded_mass_range(fq, vocab, &q_lo, &q_hi))
      return BoundedStep::kUnknown;
    *sp = 0.5 * (p_lo + p_hi);
    *sq = 0.5 * (q_lo + q_hi);
    // Masses in [2^-120, 2^120] keep residual_scales' power of two at s = 0: a = 1 / P and
    // b = 1 / Q, each rounded to float32 (through float64) once, monotone in the mass.
    constexpr double kLow = 0x1p-120, kHigh = 0x1p120;
    if (!(p_lo >= kLow) || !(p_hi <= kHigh) || !(q_lo >= kLow) || !(q_hi <= kHigh)) return BoundedStep::kUnknown;
    // The exact test u * q(t) * P < p(t) * Q, rounded monotonically in P and Q.
    const double uq = u * static_cast<double>(q[t]), pt = p[t];
    if (uq * p_hi < pt * q_lo) return BoundedStep::kAccepted;
    if (!(uq * p_lo >= pt * q_hi)) return BoundedStep::kUnknown;
    // Rejected: the correction from the residual at factors guessed from the middle of the
    // masses' ranges, with margins for the true factors anywhere in theirs.
    GuessedFactors f(p_lo, p_hi, q_lo, q_hi);
    double* err = at->guess_err.data();
    const auto draw = [&] {
      for (int64_t j = 0; j < num_blocks(vocab); ++j) err[j] = f.err(fp[j] * (1.0 + 0x1p-20), fq[j] * (1.0 + 0x1p-20), fg[j]);
      const float ga = f.ga, gb = f.gb;
      const auto guess = [p, q, ga, gb](int64_t v) { return residual_value(p[v], q[v], ga, gb); };
      return bounded_sample_index(fg, vocab, u_draw, guess, token, nullptr, err, true);
    };
    // The pass's own guess first, where the factors are near 1 (else its margins decide
    // nothing); then a pass at the middle of the factors' ranges.
    f.guess(1.0f, 1.0f);
    const bool near_one = std::max(f.da, f.db) < 0x1p-12;
    t_near_one = near_one;
    if (fused && near_one && draw()) return BoundedStep::kRejected;
    f.guess_middle(*sp, *sq);
    kt.residual_block_sums(p, q, f.ga, f.gb, vocab, fg);
    return draw() ? BoundedStep::kRejected : BoundedStep::kUnknown;
  }

  Outcome read_target(int64_t i, Side* p) const {
    p->row = target.row(i);
    p->floor = kNoFloor;
    if (!typed_mass(kt, p->row, vocab, p->blocks.data(), &p->mass)) return bad_mass_row(p->row, vocab, false, i);
    if (p->mass == 0.0) return zero_mass_row(false, i);
    return Outcome{};
  }
  // The target row's errors come first: a zero-mass target row is reported before the
  // draft row is looked at.
  // guess_sum (optional): where row_mass_pair_guess may put its residual sums; *guessed
  // says whether it did.
  Outcome read_pair(int64_t i, Side* p, Side* q, double* guess_sum = nullptr, bool* guessed = nullptr) const {
    p->row = target.row(i);
    q->row = draft.row(i);
    p->floor = q->floor = kNoFloor;
    const bool floats = p->row.type == Elem::kF32 && q->row.type == Elem::kF32;
    const float* pf = static_cast<const float*>(p->row.data);
    const float* qf = static_cast<const float*>(q->row.data);
    bool ok = false;
    if (guessed != nullptr) *guessed = false;
    if (floats && guess_sum != nullptr && kt.row_mass_pair_guess != nullptr) {
      ok = kt.row_mass_pair_guess(pf, qf, vocab, p->blocks.data(), q->blocks.data(), &p->mass, &q->mass, guess_sum);
      if (guessed != nullptr) *guessed = ok;
    } else if (floats && kt.row_mass_pair != nullptr) {
      ok = kt.row_mass_pair(pf, qf, vocab, p->blocks.data(), q->blocks.data(), &p->mass, &q->mass);
    }
    if (!ok) {
      // Row by row (no fast path, or it declined): the masses, or which row is at fault.
      const Outcome bad = read_target(i, p);
      if (bad.error != InputError::kNone) return bad;
      if (!typed_mass(kt, q->row, vocab, q->blocks.data(), &q->mass)) return bad_mass_row(q->row, vocab, true, i);
    }
    if (p->mass == 0.0) return zero_mass_row(false, i);
    if (q->mass == 0.0) return zero_mass_row(true, i);
    return Outcome{};
  }
};

// A half logits row widened whole (Note [Half rows]), per thread.
float* widened_logits(int64_t vocab) {
  thread_local std::vector<float> buffer;
  if (buffer.size() < static_cast<size_t>(vocab)) buffer.resize(vocab);
  return buffer.data();
}

// ---- Note [Bounded warping] --------------------------------------------------------------

// Temperature only: no top-k, top-p or min-p to apply after the weights.
bool temperature_only(const WarpParams& params, int64_t vocab) {
  return !(params.top_k > 0 && params.top_k < vocab) && params.top_p >= 1.0 && params.min_p <= 0.0;
}

// One float32 logits row's approximate block sums and what they bound, per thread.
struct WeightBounds {
  const float* x = nullptr;
  int64_t n = 0;
  float temperature = 1.0f, z_max = 0.0f;
  std::vector<double> sums, err;  // F_b and its absolute margin
  std::vector<float> w;           // the approximate weights the F_b were summed from
  double lo = 0.0, hi = 0.0;      // the canonical mass P lies in [lo, hi]
  std::vector<float> block;       // the exact weights of one block (a draw's), on demand
  int64_t cached = -1;

  // The buffers for a row of n (the approximate weights w too where with_w), grown as needed;
  // and the row whose exact weights block_value computes.
  void size_for(int64_t n_, bool with_w) {
    const int64_t nb = num_blocks(n_);
    if (sums.size() < static_cast<size_t>(nb)) {
      sums.resize(nb);
      err.resize(nb);
    }
    if (block.size() < static_cast<size_t>(kMassBlock)) block.resize(kMassBlock);
    if (with_w && w.size() < static_cast<size_t>(n_)) w.resize(n_);
  }
  void row_is(const float* x_, int64_t n_, float temperature_, float z_max_) {
    x = x_;
    n = n_;
    temperature = temperature_;
    z_max = z_max_;
    cached = -1;
  }
  // An upper bound on block b's sums of both the exact weights and the approximate ones.
  double block_upper(int64_t b) const {
    return std::max(sums[b] + err[b], sums[b] * (1.0 + 0x1p-19)) * (1.0 + 0x1p-40);
  }
  // A lower bound on block b's sum of the exact weights.
  double block_lower(int64_t b) const { return std::max(0.0, sums[b] - err[b]) * (1.0 - 0x1p-40); }
  // The exact weight of v (row_weights' bits: Note [One exp]).
  float weight_at(int64_t v) const { return weight(x[v], temperature, z_max); }
  // value(v) for bounded_sample_index: the exact weights of v's block, computed once.
  float block_value(const KernelTable& kt, int64_t v) {
    const int64_t b = v / kMassBlock;
    if (b != cached) {
      const int64_t begin = b * kMassBlock, len = std::min(kMassBlock, n - begin);
      double unused_block = 0.0, unused_mass = 0.0;
      kt.row_weights(x + begin, len, temperature, z_max, block.data(), &unused_block, &unused_mass);
      cached = b;
    }
    return block[v - b * kMassBlock];
  }
};

// z of the row's largest value x_top: NaN where it is infinite (+inf, or -inf: no finite
// value) or the quotient overflows.
float z_of_max(float x_top, float temperature) {
  const float z = x_top / temperature;
  return std::isinf(x_top) || std::isinf(z) ? std::numeric_limits<float>::quiet_NaN() : z;
}

// max x / temperature of row x, or NaN if the row is malformed (NaN, +inf, no finite value)
// or the quotient overflows (the exact warp then reports it).
float row_z_max(const KernelTable& kt, const float* x, int64_t n, float temperature) {
  int64_t top = 0;
  if (!kt.row_argmax(x, n, &top)) return std::numeric_limits<float>::quiet_NaN();
  return z_of_max(x[top], temperature);
}

// The bounds of row x (n logits, temperature > 0): false, with nothing decided, if the path
// has no row_weight_sums or the row is malformed (the exact warp then reports it). The
// approximate weights are kept in wb->w (storing them costs the pass a few percent; a
// rejection then sums its residual from them without a second pass).
// known_z_max: max x / temperature of this row as weight_mass_upper found it in this call
// (the row then known to be well formed), to save the argmax pass; NaN: not known.
bool bound_weights(const KernelTable& kt, const float* x, int64_t n, float temperature, WeightBounds* wb,
                   float known_z_max = std::numeric_limits<float>::quiet_NaN()) {
  wb->x = nullptr;  // until these bounds are whole: a failed call leaves none to reuse
  if (kt.row_weight_sums == nullptr) return false;
  const float z_max = std::isnan(known_z_max) ? row_z_max(kt, x, n, temperature) : known_z_max;
  if (std::isnan(z_max)) return false;
  wb->size_for(n, true);
  wb->row_is(x, n, temperature, z_max);
  kt.row_weight_sums(x, n, temperature, z_max, wb->w.data(), wb->sums.data());
  weight_mass_range(wb->sums.data(), n, wb->err.data(), &wb->lo, &wb->hi);
  return wb->lo > 0.0;
}

WeightBounds& weight_bounds(int which) {
  thread_local WeightBounds slots[2];
  return slots[which];
}

}  // namespace

namespace {

// Note [Shifted upper bounds]
// Note [Argmax with upper sums] forms the floats s_R(v) against a reference R (c0 from R),
// before the row's max z_max is known: here R = max x / T over the row's first kMassBlock
// values (so R <= z_max; those values are then in L1 for the pass). Nothing in Note [Weight
// upper bounds]' argument needs the reference to be the max: against R it bounds the reals
// exp(x / T - R) as it bounds exp(x / T - z_max), with these changes for
// d = z_max - R >= 0 (this code takes d <= 60, else it forms the floats again against z_max):
//  - the values whose weights are not 0 have x / T - R in [-104 + d, d], so the integer
//    x c1 + c0 reaches 2^23 (127 + d log2 e) < 2^31 and its roundings, and c0's, grow with
//    |R| and d: e becomes 2^-15 + (|z_max| + |R| + d + 104) 2^-21, which covers them as the
//    unshifted e covers |z_max|;
//  - w = exp_nonpositive(x / T - z_max) is within the same 2 ulp of
//    g exp(x / T - R) for g = exp(R - z_max), taken as exp(-d) (d in float64 within
//    d 2^-53, exp_negative within 2^-44) times 1 +- 2^-40;
//  - the absolute 2^-126 a value covers the floats below exponent 1 relative to R, so it
//    scales with g; w's own subnormal rounding does not, so a second 2^-126 a value stays
//    unscaled.
// So P <= g_hi (S (1 + 2^-19)(1 + e) + n 2^-126) + n 2^-126 (times the canonical sum's
// and these expressions' factors, as before), P >= g_lo (S (1 - 2^-19)(1 - e) / 1.0615 -
// n 2^-126) - n 2^-126, and the same per block. With R = z_max (d = 0) the bounds are the
// unshifted ones, bit for bit.

// exp(-d) for d in [0, 60], within 2^-44 relatively, without libm (exp's symbol version,
// GLIBC_2.29, is beyond manylinux_2_28): d = k ln 2 + r with k the nearest integer to d / ln 2
// (|r| <= 0.35 and a little: k ln 2 and the subtraction within 2^-47 absolutely for k <= 87),
// e^-r by its Taylor series to degree 16 (the rest below 2^-70; the sum's roundings within
// 2^-49), times 2^-k exactly.
double exp_negative(double d) {
  const double ln2 = 0.6931471805599453;
  const int k = static_cast<int>(d / ln2 + 0.5);
  const double r = d - k * ln2;
  double term = 1.0, sum = 1.0;
  for (int i = 1; i <= 16; ++i) {
    term *= -r / i;
    sum += term;
  }
  return sum * std::bit_cast<double>(static_cast<uint64_t>(1023 - k) << 52);
}

// Note [Weight upper bounds]'s constants for a row of max z zm at this temperature: false if
// |zm| > 2^20 (NaN included: a malformed row) or they overflow. set(R) then shift(z_max):
// Note [Shifted upper bounds].
struct UpperWeightScale {
  float c1 = 0.0f, c0 = 0.0f;
  double e = 0.0;  // the relative margin of each value's bound
  double ref = 0.0, g_hi = 1.0, g_lo = 1.0, floor = 0.0;  // the reference R; g's range; the unscaled floor
  bool set(double zm, float temperature) {
    if (!(std::fabs(zm) <= 0x1p20)) return false;
    const double log2e = 1.4426950408889634;
    c1 = static_cast<float>(0x1p23 * log2e / static_cast<double>(temperature));
    c0 = static_cast<float>(0x1p23 * (127.0 - zm * log2e));
    e = 0x1p-15 + (std::fabs(zm) + 104.0) * 0x1p-21;
    ref = zm;
    g_hi = g_lo = 1.0;
    floor = 0.0;
    return std::isfinite(c1) && std::isfinite(c0);
  }
  // The floats were formed against set()'s R; the row's max z is zm >= R (false if further
  // above than 60, or |zm| > 2^20).
  bool shift(double zm) {
    const double d = zm - ref;
    if (!(d >= 0.0 && d <= 60.0 && std::fabs(zm) <= 0x1p20)) return false;
    if (d == 0.0) return true;
    e = 0x1p-15 + (std::fabs(zm) + std::fabs(ref) + d + 104.0) * 0x1p-21;
    const double g = exp_negative(d);
    g_hi = g * (1.0 + 0x1p-40);
    g_lo = g * (1.0 - 0x1p-40);
    floor = 0x1p-126;
    return true;
  }
  // Bounds on the canonical sum of the exact weights of the values whose floats sum (block
  // by block, nb blocks) to `sums`, over a row of n.
  double upper(const double* sums, int64_t nb, int64_t n) const {
    const double total = sum_in_fours(sums, nb);  // (within nb 2^-53: inside 2^-40)
    const double dn = static_cast<double>(n);
    return (g_hi * (total * (1.0 + 0x1p-19) * (1.0 + e) + dn * 0x1p-126) + dn * floor) * (1.0 + dn * 0x1p-53) *
           (1.0 + 0x1p-40);
  }
  // The same for one block whose floats sum to s (kMassBlock values at most).
  double block_upper(double s) const {
    return g_hi * (s * ((1.0 + 0x1p-19) * (1.0 + e)) + static_cast<double>(kMassBlock) * 0x1p-126) +
           static_cast<double>(kMassBlock) * floor;
  }
  double block_lower(double s) const {
    return std::max(0.0, g_lo * (s * ((1.0 - 0x1p-19) / kUpperWeightExcess * (1.0 - e)) -
                                 static_cast<double>(kMassBlock) * 0x1p-126) -
                             static_cast<double>(kMassBlock) * floor);
  }
  double lower(const double* sums, int64_t nb, int64_t n) const {
    const double total = sum_in_fours(sums, nb);
    const double dn = static_cast<double>(n);
    const double l =
        (g_lo * (total * (1.0 - 0x1p-19) / kUpperWeightExcess * (1.0 - e) - dn * 0x1p-126) - dn * floor) *
        (1.0 - dn * 0x1p-53);
    return std::max(0.0, l * (1.0 - 0x1p-40));
  }
};

std::vector<double>& upper_sums(int which, int64_t n) {
  thread_local std::vector<double> sums[2];
  if (sums[which].size() < static_cast<size_t>(num_blocks(n))) sums[which].resize(num_blocks(n));
  return sums[which];
}

// Row x's max z into *z_max and Note [Weight upper bounds]' block sums into this thread's
// buffer `which` (*sums), with their scale *k: in one pass where the path has
// row_argmax_upper_weight_sums (Note [Shifted upper bounds]: the reference from the first
// block's max; the floats formed again where the max is more than 60 above it), else an
// argmax pass and then theirs. False where nothing is bounded: *z_max NaN for a malformed row
// (NaN, +inf, no finite value, a max z that overflows), else the row's max z.
bool upper_pass(const KernelTable& kt, const float* x, int64_t n, float temperature, int which, UpperWeightScale* k,
                float* z_max, double** sums) {
  *sums = upper_sums(which, n).data();
  *z_max = std::numeric_limits<float>::quiet_NaN();
  if (kt.row_upper_weight_sums == nullptr) {
    *z_max = row_z_max(kt, x, n, temperature);
    return false;
  }
  const float ref = kt.row_argmax_upper_weight_sums != nullptr
                        ? row_z_max(kt, x, std::min(n, kMassBlock), temperature)
                        : std::numeric_limits<float>::quiet_NaN();
  if (!std::isnan(ref) && k->set(ref, temperature)) {
    int64_t top = 0;
    if (!kt.row_argmax_upper_weight_sums(x, n, k->c1, k->c0, &top, *sums)) return false;
    *z_max = z_of_max(x[top], temperature);
    if (std::isnan(*z_max)) return false;
    if (k->shift(*z_max)) return true;
  } else {
    *z_max = row_z_max(kt, x, n, temperature);
  }
  if (std::isnan(*z_max) || !k->set(*z_max, temperature)) return false;
  kt.row_upper_weight_sums(x, n, k->c1, k->c0, *sums);
  return true;
}

}  // namespace

// Note [Coarse draws]
// A draw from a warped row at temperature only first tries Note [Weight upper bounds]' block
// bounds, from the one pass that also finds the row's max (upper_pass): each block's exact
// mass lies in [block_lower, block_upper] (about 6% apart), so bounded_sample_index takes the
// midpoints as block sums with half the widths as absolute errors (block_err). It is certain
// where the threshold u P falls inside one block clear of the uncertainty the blocks before it
// carry (about 3% of their mass), and inside that block clear of its exact weights' running
// sums; then the exact weights of that block alone are computed, and the row's exp pass is
// spared. A row whose mass is spread thin over many blocks rarely gives that (the threshold's
// uncertainty spans blocks); rows a few tokens dominate, and thresholds near either end, do.
// Otherwise the approximate weights decide as before (Note [Bounded warping]), the one pass
// having found the max for them, and the thread skips the try for the next 1, 3, 7, then 15
// draws after 1, 2, 3, 4 or more failures in a row (rows where it decides still fail where
// u sits near 1 or near a boundary between the few heavy tokens; rows of thinly spread mass
// fail every time): a guess, it changes the time, never the outcome. Not for a draw that
// hands over its bounds (a draft row's: 6% would be too loose for the test that reads them).
bool bounded_weights_draw(const KernelTable& kt, const float* x, int64_t n, float temperature, double u,
                          int64_t* token, bool coarse = true) {
  thread_local int64_t skip = 0, failures = 0;
  WeightBounds& wb = weight_bounds(0);
  const auto draw = [&wb, &kt, n, u, token] {
    return bounded_sample_index(wb.sums.data(), n, u, [&wb, &kt](int64_t v) { return wb.block_value(kt, v); },
                                token, nullptr, wb.err.data());
  };
  float z = std::numeric_limits<float>::quiet_NaN();
  if (coarse && skip == 0 && kt.row_argmax_upper_weight_sums != nullptr) {
    UpperWeightScale k;
    double* sums = nullptr;
    if (upper_pass(kt, x, n, temperature, 0, &k, &z, &sums)) {
      wb.size_for(n, false);
      for (int64_t b = 0; b < num_blocks(n); ++b) {  // (mid, half-width: both rounded, covered by 2^-40 and 2^-60 mid)
        const double lo = k.block_lower(sums[b]), hi = k.block_upper(sums[b]);
        wb.sums[b] = 0.5 * (lo + hi);
        wb.err[b] = 0.5 * (hi - lo) * (1.0 + 0x1p-40) + wb.sums[b] * 0x1p-60;
      }
      // block_value reads the row; lo, hi and w stay unset (x reset below, so no later step
      // takes these for the row's bounds).
      wb.row_is(x, n, temperature, z);
      const bool certain = draw();
      wb.x = nullptr;
      if (certain) {
        ++t_coarse_draws;
        failures = 0;
        return true;
      }
      failures = std::min<int64_t>(failures + 1, 4);
      skip = (int64_t{1} << failures) - 1;
    }
    if (std::isnan(z)) return false;  // a malformed row: the exact warp reports it
  } else if (coarse && skip > 0) {
    --skip;
  }
  if (!bound_weights(kt, x, n, temperature, &wb, z)) return false;
  if (draw()) return true;
  ++t_bounded_fallbacks;
  return false;
}

bool weight_mass_bounds_one_pass(const KernelTable& kt, const float* x, int64_t n, float temperature, double* upper,
                                 float* z_max, double* lower) {
  UpperWeightScale k;
  double* sums = nullptr;
  if (!upper_pass(kt, x, n, temperature, 0, &k, z_max, &sums)) return false;
  *upper = k.upper(sums, num_blocks(n), n);
  if (lower != nullptr) *lower = k.lower(sums, num_blocks(n), n);
  return std::isfinite(*upper);
}

bool weight_mass_upper(const KernelTable& kt, const float* x, int64_t n, float temperature, double* upper,
                       float* z_max, double* lower, bool z_max_known) {
  if (kt.row_upper_weight_sums == nullptr) return false;
  if (!z_max_known) *z_max = row_z_max(kt, x, n, temperature);
  UpperWeightScale k;
  if (!k.set(*z_max, temperature)) return false;  // (NaN for a malformed row)
  double* sums = upper_sums(0, n).data();
  kt.row_upper_weight_sums(x, n, k.c1, k.c0, sums);
  *upper = k.upper(sums, num_blocks(n), n);
  if (lower != nullptr) *lower = k.lower(sums, num_blocks(n), n);
  return std::isfinite(*upper);
}

namespace {

// row_upper_weight_sums_above at tau for a row whose scale k is set: the row's block sums
// and those of the floats above tau, in this thread's two buffers.
void sums_above(const KernelTable& kt, const float* x, int64_t n, const UpperWeightScale& k, float tau,
                double** sums, double** above) {
  *sums = upper_sums(0, n).data();
  *above = upper_sums(1, n).data();
  kt.row_upper_weight_sums_above(x, n, k.c1, k.c0, tau, *sums, *above);
}

}  // namespace

bool top_p_mass_bounds(const KernelTable& kt, const float* x, int64_t n, float temperature, float z_max, float w_t,
                       double* lower, double* upper, double* above_upper) {
  if (kt.row_upper_weight_sums_above == nullptr) return false;
  UpperWeightScale k;
  if (!k.set(z_max, temperature)) return false;
  // Every v with w(v) > w_t has s(v) (1 + e) + 2^-126 >= w(v) > w_t, so s(v) > tau for any
  // tau <= (w_t - 2^-126) / (1 + e): the quotient's two roundings covered by 2^-50, then
  // the float below where the conversion rounds up.
  const double bound = (static_cast<double>(w_t) - 0x1p-126) / (1.0 + k.e) * (1.0 - 0x1p-50);
  float tau = static_cast<float>(bound);
  if (static_cast<double>(tau) > bound) tau = std::nextafter(tau, -1.0f);
  double *sums = nullptr, *above = nullptr;
  sums_above(kt, x, n, k, tau, &sums, &above);
  *upper = k.upper(sums, num_blocks(n), n);
  *lower = k.lower(sums, num_blocks(n), n);
  *above_upper = k.upper(above, num_blocks(n), n);
  return std::isfinite(*upper);
}

bool mass_at_least_lower(const KernelTable& kt, const float* x, int64_t n, float temperature, float z_max,
                         float threshold, double* lower, double* row_lower) {
  if (kt.row_upper_weight_sums_above == nullptr) return false;
  UpperWeightScale k;
  if (!k.set(z_max, temperature)) return false;
  // Every v with s(v) > tau has w(v) >= s(v) (1 - e) / 1.0615 - 2^-126 > threshold for any
  // tau >= (threshold + 2^-126) 1.0615 / (1 - e): the roundings covered by 2^-50, then the
  // float above where the conversion rounds down.
  const double bound =
      (static_cast<double>(threshold) + 0x1p-126) * kUpperWeightExcess / (1.0 - k.e) * (1.0 + 0x1p-50);
  float tau = static_cast<float>(bound);
  if (static_cast<double>(tau) < bound) tau = std::nextafter(tau, 2.0f);
  double *sums = nullptr, *above = nullptr;
  sums_above(kt, x, n, k, tau, &sums, &above);
  *lower = k.lower(above, num_blocks(n), n);
  if (row_lower != nullptr) *row_lower = k.lower(sums, num_blocks(n), n);
  return true;
}

namespace {

// The rows of a round on logits: warped as they are read (Note [Warping]).
struct LogitRows {
  const KernelTable& kt;
  Rows target, draft;
  int64_t vocab;
  const WarpParams& params;
  const DraftBound* handoff = nullptr;  // Note [Draft bounds], k of them, or none
  // The target row handed_off bounded in this call (weight_bounds(0) holds its bounds).
  mutable int64_t target_bounded = -1;
  static constexpr bool kWarped = true;

  Outcome read(RowRef x, bool in_draft, int64_t i, Side* s) const {
    WarpedRow w{s->buffer.data(), s->blocks.data(), 0.0};
    const Outcome bad = warp_row_lazy(kt, as_floats(kt, x, vocab, widened_logits(vocab)), vocab, params, &w);
    if (bad.error != InputError::kNone) return in_row(bad, in_draft, i);
    s->row = RowRef(w.values);
    s->floor = w.floor;
    s->mass = w.mass;  // positive: the largest weight, 1, is always kept
    return Outcome{};
  }
  Outcome read_target(int64_t i, Side* p) const { return read(target.row(i), false, i, p); }
  Outcome read_draft(int64_t i, Side* q) const { return read(draft.row(i), true, i, q); }
  // Note [Draft bounds]: position i tested from its handed-over draft bound. kAccepted; or
  // kUnknown with the target row read exactly into at->p (the caller reads the draft row
  // and decides); or kNone: nothing read exactly (no bounds, or the target's weight bounds
  // could not accept; the position goes the usual way). A malformed target row: *bad.
  BoundedStep handed_off(int64_t i, int64_t t, double u, Position* at, Outcome* bad) const {
    if (handoff == nullptr) return BoundedStep::kNone;
    const DraftBound& d = handoff[i];
    const double uq = u * static_cast<double>(d.weight);
    if (bounded(i, false)) {
      // Note [Weight upper bounds] first: about a read, where the bounds' pass costs several.
      const float* xp = static_cast<const float*>(target.row(i).data);
      const Cheap cp = cheap(xp, false);
      if (cp.ok && uq * cp.hi < cp.weight_at(xp, t, params.temperature) * d.lo) return BoundedStep::kAccepted;
      WeightBounds& p = weight_bounds(0);
      if (!bound_weights(kt, xp, vocab, params.temperature, &p, cp.z)) return BoundedStep::kNone;
      target_bounded = i;
      return uq * p.hi < static_cast<double>(p.weight_at(t)) * d.lo ? BoundedStep::kAccepted : BoundedStep::kNone;
    }
    if (top_p_bounded(i, true)) {  // Note [Top-p upper bounds]
      const Kept kp = surely_kept(static_cast<const float*>(target.row(i).data), t);
      if (kp.ok && uq * kp.p_hi < kp.w_t * d.lo) {
        ++t_top_p_accepted;
        return BoundedStep::kAccepted;
      }
    }
    *bad = read_target(i, &at->p);
    if (bad->error != InputError::kNone) return BoundedStep::kUnknown;
    return uq * at->p.mass < static_cast<double>(at->p.at(t)) * d.lo ? BoundedStep::kAccepted : BoundedStep::kUnknown;
  }
  // The handed-over bound of draft row i against the row read exactly into q.
  bool bounds_hold(int64_t i, int64_t t, const Side& q) const {
    if (handoff == nullptr) return true;
    const DraftBound& d = handoff[i];
    return std::bit_cast<uint32_t>(q.at(t)) == std::bit_cast<uint32_t>(d.weight) && d.lo <= q.mass && q.mass <= d.hi;
  }
  Outcome read_pair(int64_t i, Side* p, Side* q, double* = nullptr, bool* guessed = nullptr) const {
    if (guessed != nullptr) *guessed = false;
    const Outcome bad = read_target(i, p);
    if (bad.error != InputError::kNone) return bad;
    return read(draft.row(i), true, i, q);
  }
  // Bounds of row x at this call's temperature, computed since the row was last bounded.
  bool fresh(const WeightBounds& wb, const float* x) const {
    return wb.x == x && wb.n == vocab && wb.temperature == params.temperature;
  }
  // Note [Weight upper bounds] of row x: its max z (NaN for a malformed row; the later
  // passes reuse it), and, when ok, its mass's cheap upper bound and (with `lower`) lower
  // bound. z_known: the max z found already.
  struct Cheap {
    float z = std::numeric_limits<float>::quiet_NaN();
    double hi = 0.0, lo = 0.0;
    bool ok = false;
    double weight_at(const float* x, int64_t t, float temperature) const { return weight(x[t], temperature, z); }
  };
  Cheap cheap(const float* x, bool lower, float z_known = std::numeric_limits<float>::quiet_NaN()) const {
    Cheap c;
    if (std::isnan(z_known)) {  // the max z and the bounds in one pass where the path can
      c.ok = weight_mass_bounds_one_pass(kt, x, vocab, params.temperature, &c.hi, &c.z, lower ? &c.lo : nullptr);
      return c;
    }
    c.z = z_known;
    if (!std::isnan(c.z))
      c.ok = weight_mass_upper(kt, x, vocab, params.temperature, &c.hi, &c.z, lower ? &c.lo : nullptr, true);
    return c;
  }
  // Note [Bounded warping], at temperature only on float32 rows: the approximate weight
  // sums bound P and Q, the weights at t are exact, and the test is decided where certain.
  bool bounded(int64_t i, bool one_hot) const {
    return kt.row_weight_sums != nullptr && temperature_only(params, vocab) && target.type == Elem::kF32 &&
           (one_hot || draft.type == Elem::kF32) && i >= 0;
  }
  // Note [Top-p upper bounds]: top-p and/or min-p, no top-k, on float32 rows (the target's,
  // and unless one_hot the draft's).
  bool top_p_bounded(int64_t i, bool one_hot) const {
    return kt.row_upper_weight_sums_above != nullptr && kt.row_upper_weight_sums != nullptr &&
           !(params.top_k > 0 && params.top_k < vocab) && (params.top_p < 1.0 || params.min_p > 0.0) &&
           target.type == Elem::kF32 && (one_hot || draft.type == Elem::kF32) && i >= 0;
  }
  // Token t of logits row x surely kept by top-p and min-p: its weight w_t (then its warped
  // value) and an upper bound on the kept mass (the row's mass bounds it). ok false: not
  // certain, or a malformed row (the exact warp reports it), or w_t <= at_least (then the
  // caller's test fails whatever the bounds: the pass is spared).
  struct Kept {
    bool ok = false;
    double w_t = 0.0, p_hi = 0.0;
  };
  Kept surely_kept(const float* x, int64_t t, double at_least = 0.0) const {
    Kept k;
    const float z = row_z_max(kt, x, vocab, params.temperature);
    if (std::isnan(z)) return k;
    const float w_t = weight(x[t], params.temperature, z);
    if (!(w_t > at_least)) return k;
    const float mp = params.min_p > 0.0 ? min_p_threshold(params.min_p) : 0.0f;
    if (params.min_p > 0.0 && !(w_t >= mp)) return k;  // min-p drops t
    double lo = 0.0, hi = std::numeric_limits<double>::infinity(), above = 0.0;
    if (params.top_p < 1.0) {
      if (!top_p_mass_bounds(kt, x, vocab, params.temperature, z, w_t, &lo, &hi, &above)) return k;
      // Kept iff the canonical mass of the weights > w_t is < top_p times the row's mass (a
      // double product, rounded monotonically in the mass).
      if (!(above < params.top_p * lo)) return k;
    }
    if (params.min_p > 0.0) {  // P <= the mass of the weights >= mp (those > the float below)
      double unused = 0.0, min_p_mass = 0.0;
      if (!top_p_mass_bounds(kt, x, vocab, params.temperature, z, std::nextafter(mp, 0.0f), &unused, &unused,
                             &min_p_mass))
        return k;
      hi = std::min(hi, min_p_mass);
    }
    k.ok = true;
    k.w_t = w_t;
    k.p_hi = hi;
    return k;
  }
  // Note [Top-p upper bounds]: position i accepted where u q(t) P < p(t) Q holds for every P
  // and Q in their ranges: p(t) = w(t) with t surely kept, P <= surely_kept's bound, and the
  // draft's kept mass Q >= top_p times its row's (with min-p, the smaller of that and its
  // weights >= the threshold, and >= 1); q(t) <= its weight, kept or not.
  bool surely_accepted_top_p(int64_t i, bool one_hot, int64_t t, double u) const {
    // One-hot: u M_hi < w(t) needs w(t) > u, since M >= 1 (the largest weight is 1).
    const Kept kp = surely_kept(static_cast<const float*>(target.row(i).data), t, one_hot ? u : 0.0);
    if (!kp.ok) return false;
    bool accepted = false;
    if (one_hot) {
      accepted = u * kp.p_hi < kp.w_t;  // q = onehot(t), Q = 1
    } else {
      const float* xq = static_cast<const float*>(draft.row(i).data);
      if (params.min_p > 0.0) {
        // Q >= the smaller of top_p M_q and the mass of the weights >= min-p's float (both
        // cuts keep a top stretch of the weights), and >= 1 (the weight-1 token is kept).
        const float zq = row_z_max(kt, xq, vocab, params.temperature);
        double q_lo = 0.0, m_lo = 0.0;  // (the same pass bounds the row's mass M_q)
        if (!std::isnan(zq) && mass_at_least_lower(kt, xq, vocab, params.temperature, zq,
                                                   min_p_threshold(params.min_p), &q_lo, &m_lo) &&
            params.top_p < 1.0)
          q_lo = std::min(q_lo, params.top_p * m_lo);
        accepted = !std::isnan(zq) &&
                   u * weight(xq[t], params.temperature, zq) * kp.p_hi < kp.w_t * std::max(1.0, q_lo);
      } else {
        const Cheap cq = cheap(xq, true);
        accepted = cq.ok && u * cq.weight_at(xq, t, params.temperature) * kp.p_hi < kp.w_t * (params.top_p * cq.lo);
      }
    }
    t_top_p_accepted += accepted;
    return accepted;
  }
  bool surely_accepted(int64_t i, bool one_hot, int64_t t, double u, double*, double*) const {
    if (!bounded(i, one_hot)) return top_p_bounded(i, one_hot) && surely_accepted_top_p(i, one_hot, t, u);
    WeightBounds& p = weight_bounds(0);
    const float* xp = static_cast<const float*>(target.row(i).data);
    const float* xq = one_hot ? nullptr : static_cast<const float*>(draft.row(i).data);
    // Note [Weight upper bounds] first (unless handed_off bounded the target row just now;
    // bounds from an earlier call are never reused: the buffer may hold new logits). Their
    // max z then spares the bounds' argmax passes.
    Cheap cp, cq;
    if (target_bounded != i) {
      cp = cheap(xp, false);
      if (cp.ok) {
        const double pt = cp.weight_at(xp, t, params.temperature);
        if (one_hot && u * cp.hi < pt) return true;
        if (!one_hot) cq = cheap(xq, true);
        if (cq.ok && u * cq.weight_at(xq, t, params.temperature) * cp.hi < pt * cq.lo) return true;
      }
    }
    if (target_bounded != i && !bound_weights(kt, xp, vocab, params.temperature, &p, cp.z)) return false;
    const double pt = p.weight_at(t);
    if (one_hot) return u * p.hi < pt;  // u * P < p(t) for every P in [lo, hi]
    WeightBounds& q = weight_bounds(1);
    if (!bound_weights(kt, xq, vocab, params.temperature, &q, cq.z)) return false;
    const double qt = q.weight_at(t);
    // u * q(t) * P < p(t) * Q, each side rounded monotonically in P and Q.
    return u * qt * p.hi < pt * q.lo;
  }
  bool bounded_draw(int64_t i, double u, Side*, int64_t* token) const {
    if (!bounded(i, true)) return false;
    return bounded_weights_draw(kt, static_cast<const float*>(target.row(i).data), vocab, params.temperature, u,
                                token);
  }
  BoundedStep bounded_one_hot(int64_t, int64_t, double, double, Side*, double*, int64_t*) const {
    return BoundedStep::kNone;
  }
  // Note [Bounded rejection] on warped rows (Note [Bounded warping], temperature only): the
  // position's weight bounds (surely_accepted's) decide a rejection where certain; the
  // correction is then drawn from the residual of the approximate weights (kept by
  // bound_weights) at guessed factors, with margins for the factors' ranges and for each
  // approximate weight's 2^-20 (+ 2^-148).
  BoundedStep bounded_pair(int64_t i, int64_t t, double u, double u_draw, Position* at, double* sp, double* sq,
                           int64_t* token) const {
    if (!bounded(i, false) || kt.residual_block_sums == nullptr) return BoundedStep::kNone;
    const float* xp = static_cast<const float*>(target.row(i).data);
    const float* xq = static_cast<const float*>(draft.row(i).data);
    const float temperature = params.temperature;
    WeightBounds& p = weight_bounds(0);
    WeightBounds& q = weight_bounds(1);
    if ((!fresh(p, xp) && !bound_weights(kt, xp, vocab, temperature, &p)) ||
        (!fresh(q, xq) && !bound_weights(kt, xq, vocab, temperature, &q)))
      return BoundedStep::kUnknown;
    if (handoff != nullptr) {  // bounds that cannot be this row's: the exact path says so
      const DraftBound& d = handoff[i];
      if (std::bit_cast<uint32_t>(q.weight_at(t)) != std::bit_cast<uint32_t>(d.weight) || d.hi < q.lo || q.hi < d.lo)
        return BoundedStep::kUnknown;
    }
    constexpr double kLow = 0x1p-120, kHigh = 0x1p120;
    if (!(p.lo >= kLow) || !(p.hi <= kHigh) || !(q.lo >= kLow) || !(q.hi <= kHigh)) return BoundedStep::kUnknown;
    *sp = 0.5 * (p.lo + p.hi);
    *sq = 0.5 * (q.lo + q.hi);
    const double pt = p.weight_at(t), uq = u * static_cast<double>(q.weight_at(t));
    if (uq * p.hi < pt * q.lo) return BoundedStep::kAccepted;
    if (!(uq * p.lo >= pt * q.hi)) return BoundedStep::kUnknown;
    GuessedFactors f(p.lo, p.hi, q.lo, q.hi);
    f.guess_middle(*sp, *sq);
    const float ga = f.ga, gb = f.gb;
    const float* wp = p.w.data();
    const float* wq = q.w.data();
    double* fg = at->r_blocks.data();
    double* err = at->guess_err.data();
    kt.residual_block_sums(wp, wq, ga, gb, vocab, fg);
    for (int64_t j = 0; j < num_blocks(vocab); ++j) {
      const double pb = p.block_upper(j), qb = q.block_upper(j);
      err[j] = f.err(pb, qb, fg[j]) + f.a_hi * (kApproxWeightBound * pb + 0x1p-140) +
               f.b_hi * (kApproxWeightBound * qb + 0x1p-140);
    }
    const auto guess = [wp, wq, ga, gb](int64_t v) { return residual_value(wp[v], wq[v], ga, gb); };
    if (bounded_sample_index(fg, vocab, u_draw, guess, token, nullptr, err, true)) return BoundedStep::kRejected;
    return BoundedStep::kUnknown;
  }
  // Without a cheap look at the masses, every position tries the bounds first (a rejection
  // then pays for them on top of the exact warp: at most once a round).
  bool likely_accepted(int64_t i, bool one_hot, int64_t, double, double, double) const {
    return bounded(i, one_hot) || top_p_bounded(i, one_hot);
  }
  // Note [Tree bounds] on warped rows at temperature only (Note [Bounded warping]): node row
  // i's children decided from the approximate weights of its rows (kept by bound_weights),
  // whose block sums bound P and Q, and the exact weights at the children's tokens, as on
  // probability rows (ChainBounds): the residuals' sums are taken over the approximate
  // weights, with each weight's error (kApproxWeightBound) in the margins. Returns the
  // accepted child; -2 when every child is rejected, with the token drawn into *token; or
  // -1: nothing decided (the node is warped and read exactly).
  int64_t bounded_node(int64_t i, int64_t c, const std::vector<int64_t>& next, const int64_t* tokens,
                       const double* u, double u_draw, Position& at, double* fr, double* ferr, int64_t* token,
                       double*, double*) const {
    if (!bounded(i, false)) {  // Note [Top-p upper bounds]: the first child, as a chain position
      return top_p_bounded(i, false) && surely_accepted_top_p(i, false, tokens[c], u[c]) ? c : -1;
    }
    if (kt.residual_block_sums == nullptr) return -1;
    const float* xp = static_cast<const float*>(target.row(i).data);
    const float* xq = static_cast<const float*>(draft.row(i).data);
    // Note [Weight upper bounds] first (cheap_node). The rows' max z, found there, spares the
    // bounds' argmax passes either way.
    float zp = std::numeric_limits<float>::quiet_NaN(), zq = zp;
    const int64_t decided = cheap_node(xp, xq, c, next, tokens, u, ferr, &zp, &zq);
    if (decided != -1) return decided;
    WeightBounds& p = weight_bounds(0);
    WeightBounds& q = weight_bounds(1);
    if (!bound_weights(kt, xp, vocab, params.temperature, &p, zp) ||
        !bound_weights(kt, xq, vocab, params.temperature, &q, zq))
      return -1;
    const float* wp = p.w.data();
    const float* wq = q.w.data();
    if (!(p.lo >= ChainBounds::kLow) || !(p.hi <= ChainBounds::kHigh) || !(q.lo >= ChainBounds::kLow) ||
        !(q.hi <= ChainBounds::kHigh))
      return -1;
    const int64_t t = tokens[c];
    const double uq = u[c] * static_cast<double>(q.weight_at(t)), pt = p.weight_at(t);
    if (uq * p.hi < pt * q.lo) return c;
    if (!(uq * p.lo >= pt * q.hi)) return -1;
    ChainBounds ch(p.lo, p.hi, q.lo, q.hi, vocab);
    ch.value_err = kApproxWeightBound;
    // Block sums bounding both the exact weights' and the approximate ones'.
    double* fp = at.p.blocks.data();
    double* fq = at.q.blocks.data();
    for (int64_t b = 0; b < num_blocks(vocab); ++b) {
      fp[b] = p.block_upper(b);
      fq[b] = q.block_upper(b);
    }
    return chained_children(kt, ch, c, next, tokens, u, u_draw, wp, wq, fp, fq, false, fr, ferr, token,
                            [&p, &q](int64_t v) { return std::make_pair(p.weight_at(v), q.weight_at(v)); },
                            [&p, fq](int64_t b) { return std::make_pair(p.block_lower(b), fq[b]); });
  }
  // Note [Tree bounds] from Note [Weight upper bounds]' passes alone (about a read each,
  // against about three for the approximate weights): the bounds on P and Q they give (about
  // 6% apart) decide the first child where certain, and the later ones where no residual's
  // sum is needed (a residual value certainly 0, the ceiling, the block masses' lower bounds
  // on the residuals' masses). Returns as bounded_node; -1 also where a later step needs a
  // pass (the approximate weights then decide the node: these passes are lost). Tried where
  // the first child looks likely accepted (u q(t) < p(t): P ~ Q guessed), and otherwise unless
  // the last try on this thread failed, then again after 16 nodes: a guess, it changes the
  // time, never the outcome.
  // The rows' max z go to *zp and *zq (NaN: a malformed row) whatever the outcome. While
  // tries succeed, each row's max z and floats come from one pass (upper_pass); after a
  // failure the argmax passes come first, and the floats' passes only where tried.
  int64_t cheap_node(const float* xp, const float* xq, int64_t c, const std::vector<int64_t>& next,
                     const int64_t* tokens, const double* u, double* scratch, float* zp_out, float* zq_out) const {
    thread_local int64_t skip = 0;
    const float temperature = params.temperature;
    const int64_t t = tokens[c];
    UpperWeightScale kp, kq;
    double *sp = nullptr, *sq = nullptr;
    if (skip == 0) {
      const bool ok_p = upper_pass(kt, xp, vocab, temperature, 0, &kp, zp_out, &sp);
      const bool ok_q = upper_pass(kt, xq, vocab, temperature, 1, &kq, zq_out, &sq);
      if (!ok_p || !ok_q) return -1;
    } else {
      *zp_out = row_z_max(kt, xp, vocab, temperature);
      *zq_out = row_z_max(kt, xq, vocab, temperature);
    }
    const float zp = *zp_out, zq = *zq_out;
    if (std::isnan(zp) || std::isnan(zq)) return -1;
    const double pt = weight(xp[t], temperature, zp);
    const double uq = u[c] * static_cast<double>(weight(xq[t], temperature, zq));
    if (skip > 0) {
      if (kt.row_upper_weight_sums == nullptr || !kp.set(zp, temperature) || !kq.set(zq, temperature)) return -1;
      if (!(uq < pt)) {
        --skip;
        return -1;
      }
      sp = upper_sums(0, vocab).data();
      sq = upper_sums(1, vocab).data();
      kt.row_upper_weight_sums(xp, vocab, kp.c1, kp.c0, sp);
      kt.row_upper_weight_sums(xq, vocab, kq.c1, kq.c0, sq);
    }
    const int64_t nb = num_blocks(vocab);
    const double p_lo = kp.lower(sp, nb, vocab), p_hi = kp.upper(sp, nb, vocab);
    const double q_lo = kq.lower(sq, nb, vocab), q_hi = kq.upper(sq, nb, vocab);
    int64_t decided = -1;
    if (p_lo >= ChainBounds::kLow && p_hi <= ChainBounds::kHigh && q_lo >= ChainBounds::kLow &&
        q_hi <= ChainBounds::kHigh) {
      if (uq * p_hi < pt * q_lo) {
        decided = c;
      } else if (uq * p_lo >= pt * q_hi) {
        ChainBounds ch(p_lo, p_hi, q_lo, q_hi, vocab);
        decided = chained_children(
            kt, ch, c, next, tokens, u, 0.0, nullptr, nullptr, nullptr, nullptr, false, nullptr, scratch, nullptr,
            [&](int64_t v) { return std::make_pair(weight(xp[v], temperature, zp), weight(xq[v], temperature, zq)); },
            [&](int64_t b) { return std::make_pair(kp.block_lower(sp[b]), kq.block_upper(sq[b])); }, false);
      }
    }
    skip = decided == -1 ? 16 : 0;
    t_cheap_nodes += decided != -1;
    return decided;
  }
  bool bounded_node_worth(int64_t i) const { return bounded(i, false) || top_p_bounded(i, false); }
  // A node's first child without draft rows (accepted iff u P < p(t), as a one-hot chain
  // position), where certain: Note [Weight upper bounds] at temperature only, Note [Top-p
  // upper bounds] at top-p and/or min-p.
  bool surely_first_child(int64_t i, int64_t t, double u) const {
    if (bounded(i, true)) {
      const float* xp = static_cast<const float*>(target.row(i).data);
      // u M_hi < w(t) needs w(t) > u (M >= 1: the largest weight is 1): the argmax pass alone
      // rules out most rejections.
      const float z = row_z_max(kt, xp, vocab, params.temperature);
      if (std::isnan(z) || !(weight(xp[t], params.temperature, z) > u)) return false;
      const Cheap cp = cheap(xp, false, z);
      return cp.ok && u * cp.hi < cp.weight_at(xp, t, params.temperature);
    }
    return top_p_bounded(i, true) && surely_accepted_top_p(i, true, t, u);
  }
};

// A draw from row p (mass > 0) with uniform u.
int64_t draw(const Side& p, double u, int64_t vocab) {
  return sample_index(p.blocks.data(), vocab, u * p.mass, [&p](int64_t v) { return p.at(v); });
}

// A draw from row p without token t (Note [One-hot drafts]): p's block masses with t's
// block summed again, t as +0.0, by the same kernel; that block mass in p.blocks is
// overwritten. If nothing but t has mass, t.
int64_t draw_without(const KernelTable& kt, Side& p, int64_t t, double u, int64_t vocab) {
  const int64_t b = t / kMassBlock;
  const int64_t begin = b * kMassBlock;
  const int64_t len = std::min(kMassBlock, vocab - begin);
  float block[kMassBlock];
  for (int64_t v = 0; v < len; ++v) block[v] = p.at(begin + v);
  block[t - begin] = 0.0f;
  double block_total = 0.0;
  kt.row_mass(block, len, &p.blocks[b], &block_total);
  double mass = 0.0;
  for (int64_t j = 0; j < num_blocks(vocab); ++j) mass += p.blocks[j];
  if (!(mass > 0.0)) return t;
  return sample_index(p.blocks.data(), vocab, u * mass, [&p, t](int64_t v) { return v == t ? 0.0f : p.at(v); });
}

// Sums the residual max(0, rho * p / P - q / Q), scaled (Note [Residual in float32]), into
// at's residual fields; returns the scale 2^s as s.
int sum_residual(const KernelTable& kt, Position& at, double rho, int64_t vocab) {
  at.p.materialize(kt, vocab);
  at.q.materialize(kt, vocab);
  const int s = residual_scales(at.p.mass / rho, at.q.mass, &at.a, &at.b);
  typed_residual(kt, at.p.row, at.q.row, at.a, at.b, vocab, at.r_blocks.data(), &at.r_mass);
  return s;
}

// The correction drawn at position `at` from its summed residual, or from p if rounding
// left that residual without mass (the exact one is then negligible next to p).
int64_t draw_residual(const Position& at, double u, int64_t vocab) {
  if (!(at.r_mass > 0.0)) return draw(at.p, u, vocab);
  const float a = at.a, b = at.b;
  return sample_index(at.r_blocks.data(), vocab, u * at.r_mass,
                      [&at, a, b](int64_t v) { return residual_value(at.p.at(v), at.q.at(v), a, b); });
}

// The sums of max(0, p - q) from the pass over p and q (row_mass_pair_guess, in at.r_blocks)
// as block sums of the residual with factors a and b: each block's margin for a and b not
// being 1 into at.guess_err (Note [Bounded sampling]). False (nothing set) if there are no
// such sums or the factors are not near 1, where the margins would decide nothing.
bool guess_margins(Position& at, float a, float b, int64_t vocab) {
  if (!at.guessed || !(std::fabs(a - 1.0f) < 0x1p-12f) || !(std::fabs(b - 1.0f) < 0x1p-12f)) return false;
  const double da = std::fabs(static_cast<double>(a) - 1.0), db = std::fabs(static_cast<double>(b) - 1.0);
  for (int64_t j = 0; j < num_blocks(vocab); ++j)
    at.guess_err[j] = guess_block_err(at.p.blocks[j] * (1.0 + 0x1p-40), at.q.blocks[j] * (1.0 + 0x1p-40),
                                      at.r_blocks[j], 1.0, 1.0, da, db, a, b);
  return true;
}

// The correction at a token-wise rejection at `at` (masses read, r = max(0, p Q - q P)):
// Note [Bounded sampling] from the residual's float32 block sums where both rows are float32
// and the path has the kernel; the canonical residual masses otherwise, or if not certain.
int64_t draw_correction(const KernelTable& kt, Position& at, double u, int64_t vocab) {
  if (kt.residual_block_sums != nullptr && at.p.row.type == Elem::kF32 && at.q.row.type == Elem::kF32) {
    // The kernels below read the rows raw: a lazily warped row's values under its floor
    // must read +0.0 there too (no-op for probability rows).
    at.p.materialize(kt, vocab);
    at.q.materialize(kt, vocab);
    const float* p = static_cast<const float*>(at.p.row.data);
    const float* q = static_cast<const float*>(at.q.row.data);
    residual_scales(at.p.mass, at.q.mass, &at.a, &at.b);
    const float a = at.a, b = at.b;
    const auto value = [p, q, a, b](int64_t v) { return residual_value(p[v], q[v], a, b); };
    int64_t index = -1;
    if (guess_margins(at, a, b, vocab) &&
        bounded_sample_index(at.r_blocks.data(), vocab, u, value, &index, nullptr, at.guess_err.data()))
      return index;
    kt.residual_block_sums(p, q, a, b, vocab, at.r_blocks.data());
    double total = -1.0;
    if (bounded_sample_index(at.r_blocks.data(), vocab, u, value, &index, &total)) return index;
    // Every r'(v) is +0.0 exactly when the sums are: the canonical mass is 0 as well.
    if (total == 0.0) return draw(at.p, u, vocab);
    ++t_bounded_fallbacks;
  }
  sum_residual(kt, at, 1.0, vocab);
  return draw_residual(at, u, vocab);
}

// ---- token-wise verification (Note [One-hot drafts] for a draft without rows) ------------

template <class Reader>
Outcome token_round(const KernelTable& kt, const Reader& rows, bool one_hot, const int64_t* tokens,
                    const double* u, int64_t k, int64_t vocab) {
  Position& at = positions(vocab, Reader::kWarped)[0];
  double last_p = 1.0, last_q = 1.0;  // the masses seen last (Note [Mass bounds]'s guess)
  for (int64_t i = 0; i < k; ++i) {
    const int64_t t = tokens[i];
    if (!one_hot) {  // Note [Draft bounds]
      Outcome bad;
      const BoundedStep step = rows.handed_off(i, t, u[i], &at, &bad);
      if (bad.error != InputError::kNone) return bad;
      if (step == BoundedStep::kAccepted) continue;
      if (step == BoundedStep::kUnknown) {  // the target row read exactly: the draft's now
        at.guessed = false;
        const Outcome bad_q = rows.read_draft(i, &at.q);
        if (bad_q.error != InputError::kNone) return bad_q;
        if (!rows.bounds_hold(i, t, at.q)) return draft_bounds_error(i);
        if (u[i] * at.q.at(t) * at.p.mass < at.p.at(t) * at.q.mass) continue;
        return emitted(i, draw_correction(kt, at, u[k], vocab));
      }
    }
    const bool likely = rows.likely_accepted(i, one_hot, t, u[i], last_p, last_q);
    if (likely && rows.surely_accepted(i, one_hot, t, u[i], &last_p, &last_q)) continue;
    // One-hot, a likely rejection: one float32 pass may decide the position and draw the
    // correction (the block sums cost a little more than the float32 sum of a likely
    // acceptance).
    if (one_hot && !likely) {
      int64_t token = -1;
      const BoundedStep step = rows.bounded_one_hot(i, t, u[i], u[k], &at.p, &last_p, &token);
      if (step == BoundedStep::kAccepted) continue;
      if (step == BoundedStep::kRejected) return emitted(i, token);
    }
    if (one_hot) {
      const Outcome bad = rows.read_target(i, &at.p);
      if (bad.error != InputError::kNone) return bad;
      // q = onehot(t), Q = 1: accept with probability p(t) / P, u * P < p(t).
      last_p = at.p.mass;
      if (u[i] * at.p.mass < static_cast<double>(at.p.at(t))) continue;
      return emitted(i, draw_without(kt, at.p, t, u[k], vocab));
    }
    // With draft rows, a likely rejection: float32 passes over p and q may decide the
    // position and draw the correction (Note [Bounded rejection]).
    // (On warped rows every position first tries the bounds: then a rejection may use them.)
    if (!likely || Reader::kWarped) {
      int64_t token = -1;
      const BoundedStep step = rows.bounded_pair(i, t, u[i], u[k], &at, &last_p, &last_q, &token);
      if (step == BoundedStep::kAccepted) continue;
      if (step == BoundedStep::kRejected) return emitted(i, token);
    }
    const Outcome bad = rows.read_pair(i, &at.p, &at.q, at.r_blocks.data(), &at.guessed);
    if (bad.error != InputError::kNone) return bad;
    if (!rows.bounds_hold(i, t, at.q)) return draft_bounds_error(i);
    // Accept t with probability min(1, (p(t)/P) / (q(t)/Q)), without dividing:
    // u * q(t) * P < p(t) * Q. p(t) = 0 never passes; q(t) = 0 < p(t) always does.
    const double pt = at.p.at(t), qt = at.q.at(t);
    last_p = at.p.mass;
    last_q = at.q.mass;
    if (u[i] * qt * at.p.mass < pt * at.q.mass) continue;
    return emitted(i, draw_correction(kt, at, u[k], vocab));
  }
  int64_t token = -1;
  if (rows.bounded_draw(k, u[k], &at.p, &token)) return emitted(k, token);
  const Outcome bad = rows.read_target(k, &at.p);
  if (bad.error != InputError::kNone) return bad;
  return emitted(k, draw(at.p, u[k], vocab));
}

// ---- block verification (Note [Block verification]) ---------------------------------------

// rho_{n+1} = min(1, rho_n * p_n(t) / q_n(t)) on normalised rows, from position n's rows.
double next_rho(double rho, const Position& at, int64_t t, bool one_hot) {
  const double pt = at.p.at(t);
  if (rho == 0.0 || pt == 0.0) return 0.0;
  if (one_hot) return std::min(1.0, rho * (pt / at.p.mass));
  const double qt = at.q.at(t);
  if (qt == 0.0) return 1.0;  // p(t) > 0 = q(t): an infinite ratio
  return std::min(1.0, rho * ((pt * at.q.mass) / (qt * at.p.mass)));
}

// Z_n = sum_x max(0, rho * p(x) - q(x)) on normalised rows, rho = rho_n > 0; for a draft
// with rows it sums the residual into `at`, ready to be drawn from.
double block_z(const KernelTable& kt, Position& at, double rho, int64_t t, bool one_hot, int64_t vocab) {
  if (one_hot) return rho * (std::max(0.0, at.p.mass - at.p.at(t)) / at.p.mass);
  // Below 2^-200, rho * p is lost next to q in float32: h_n < 2^-200 is taken as 0.
  if (rho < 0x1p-200) return 0.0;
  const int s = sum_residual(kt, at, rho, vocab);
  return std::ldexp(at.r_mass, -s);
}

template <class Reader>
Outcome block_round(const KernelTable& kt, const Reader& rows, bool one_hot, const int64_t* tokens,
                    const double* u, int64_t k, int64_t vocab) {
  if (k == 0) return token_round(kt, rows, one_hot, tokens, u, k, vocab);
  Position* slots = positions(vocab, Reader::kWarped);
  Position* end = &slots[0];   // the position tau the round ends at so far
  Position* next = &slots[1];  // the position being read
  const auto read = [&](int64_t i, Position* at) {
    at->r_mass = -1.0;
    return one_hot ? rows.read_target(i, &at->p) : rows.read_pair(i, &at->p, &at->q);
  };
  Outcome bad = read(0, end);
  if (bad.error != InputError::kNone) return bad;
  end->rho = 1.0;
  end->index = 0;
  double rho = next_rho(1.0, *end, tokens[0], one_hot);  // rho_1
  for (int64_t n = 1; n < k; ++n) {
    bad = read(n, next);
    if (bad.error != InputError::kNone) return bad;
    const double z = rho > 0.0 ? block_z(kt, *next, rho, tokens[n], one_hot, vocab) : 0.0;
    const double denominator = z + (1.0 - rho);
    const double h = denominator > 0.0 ? z / denominator : 1.0;
    const double rho_next = next_rho(rho, *next, tokens[n], one_hot);
    if (u[n - 1] < h) {  // tau >= n
      next->rho = rho;
      next->index = n;
      std::swap(end, next);
    }
    rho = rho_next;
  }
  bad = rows.read_target(k, &next->p);
  if (bad.error != InputError::kNone) return bad;
  if (u[k - 1] < rho) return emitted(k, draw(next->p, u[k], vocab));  // h_K = rho_K
  // The correction at tau from max(0, rho_tau * p - q): p without t for a one-hot draft.
  if (one_hot) return emitted(end->index, draw_without(kt, end->p, tokens[end->index], u[k], vocab));
  if (end->r_mass < 0.0) sum_residual(kt, *end, end->rho, vocab);  // tau = 0: not summed yet
  return emitted(end->index, draw_residual(*end, u[k], vocab));
}

// ---- Note [Bounded blocks] ------------------------------------------------------------------

// An interval [lo, hi] that holds a float64 value the exact round computes. pad() widens one
// made by a monotone real function of bounds, for the handful of float64 roundings the
// exact computation and the bound's own make on the way (each 2^-53; 2^-48 covers 32).
struct Range {
  double lo, hi;
  bool exact() const { return lo == hi; }
};
Range pad(double lo, double hi) { return Range{lo * (1.0 - 0x1p-48), hi * (1.0 + 0x1p-48)}; }

struct BlockScratch {
  std::vector<double> fp, fq, fg, err;  // per position: block sums of p and q, guessed residual sums, margins
  std::vector<Range> P, Q;
  std::vector<float> ga, gb;
  void fit(int64_t k, int64_t nb) {
    const auto size = static_cast<size_t>((k + 1) * nb);
    for (auto* v : {&fp, &fq, &fg, &err})
      if (v->size() < size) v->resize(size);
    if (P.size() < static_cast<size_t>(k + 1)) {
      P.resize(k + 1);
      Q.resize(k + 1);
      ga.resize(k + 1);
      gb.resize(k + 1);
    }
  }
};

// Block verification (Note [Block verification]) on float32 probability rows from float32
// block sums alone, where every decision is certain (Note [Bounded blocks]); false:
// nothing decided (block_round decides it exactly, and reports any malformed row).
bool bounded_block_round(const KernelTable& kt, const ProbRows& rows, bool one_hot, const int64_t* tokens,
                         const double* u, int64_t k, int64_t vocab, Outcome* out) {
  if (kt.row_block_sums == nullptr || kt.residual_block_sums == nullptr || rows.target.type != Elem::kF32 ||
      (!one_hot && rows.draft.type != Elem::kF32) || k < 1)
    return false;
  thread_local BlockScratch s;
  const int64_t nb = num_blocks(vocab);
  s.fit(k, nb);
  constexpr double kLow = 0x1p-120, kHigh = 0x1p120;
  const auto p_row = [&](int64_t n) { return static_cast<const float*>(rows.target.row(n).data); };
  const auto q_row = [&](int64_t n) { return static_cast<const float*>(rows.draft.row(n).data); };
  // The bounds of P_n (and Q_n): false if a row cannot be vouched for or its mass leaves
  // [2^-120, 2^120] (where the residual's power of two stays 0).
  const auto read = [&](int64_t n, bool with_q) {
    double* fp = &s.fp[n * nb];
    if (!kt.row_block_sums(p_row(n), vocab, fp) || !bounded_mass_range(fp, vocab, &s.P[n].lo, &s.P[n].hi) ||
        !(s.P[n].lo >= kLow) || !(s.P[n].hi <= kHigh))
      return false;
    if (!with_q) return true;
    double* fq = &s.fq[n * nb];
    return kt.row_block_sums(q_row(n), vocab, fq) && bounded_mass_range(fq, vocab, &s.Q[n].lo, &s.Q[n].hi) &&
           s.Q[n].lo >= kLow && s.Q[n].hi <= kHigh;
  };
  // The residual max(0, rho p_n / P_n - q_n / Q_n) as r' at factors a = 1 / fl(P / rho),
  // b = 1 / Q (residual_scales with s = 0), summed at factors guessed from the middles of
  // the ranges, with guess_block_err's margins for the true ones; z gets its mass's range.
  const auto residual = [&](int64_t n, Range r, Range* z) {
    const Range x{s.P[n].lo / r.hi, s.P[n].hi / r.lo};  // fl(P / rho), monotone in both
    if (!(x.lo >= kLow) || !(x.hi <= kHigh)) return false;
    GuessedFactors f(x.lo, x.hi, s.Q[n].lo, s.Q[n].hi);
    f.guess_middle(0.5 * (x.lo + x.hi), 0.5 * (s.Q[n].lo + s.Q[n].hi));
    double* fg = &s.fg[n * nb];
    double* err = &s.err[n * nb];
    kt.residual_block_sums(p_row(n), q_row(n), f.ga, f.gb, vocab, fg);
    for (int64_t j = 0; j < nb; ++j)
      err[j] = f.err(s.fp[n * nb + j] * (1.0 + 0x1p-20), s.fq[n * nb + j] * (1.0 + 0x1p-20), fg[j]);
    s.ga[n] = f.ga;
    s.gb[n] = f.gb;
    return bounded_mass_range(fg, vocab, &z->lo, &z->hi, err);
  };
  // rho_{n+1} from rho_n (next_rho): 0 and 1 exactly where its branches make them.
  const auto next = [&](int64_t n, Range r, Range* out_rho) {
    const double pt = p_row(n)[tokens[n]];
    if ((r.exact() && r.hi == 0.0) || pt == 0.0) {
      *out_rho = Range{0.0, 0.0};
      return true;
    }
    if (!(r.lo > 0.0)) return false;  // rho may be 0 or not: the branch is not known
    Range v;
    if (one_hot) {
      v = pad(r.lo * (pt / s.P[n].hi), r.hi * (pt / s.P[n].lo));
    } else {
      const double qt = q_row(n)[tokens[n]];
      if (qt == 0.0) {
        *out_rho = Range{1.0, 1.0};
        return true;
      }
      v = pad(r.lo * ((pt * s.Q[n].lo) / (qt * s.P[n].hi)), r.hi * ((pt * s.Q[n].hi) / (qt * s.P[n].lo)));
    }
    *out_rho = Range{std::min(1.0, v.lo), std::min(1.0, v.hi)};
    return true;
  };

  if (!read(0, !one_hot)) return false;
  int64_t tau = 0;
  Range rho{1.0, 1.0};
  if (!next(0, rho, &rho)) return false;
  for (int64_t n = 1; n < k; ++n) {
    if (!read(n, !one_hot)) return false;
    // Z_n, then h_n = Z_n / (Z_n + 1 - rho_n) (1 if the denominator is 0).
    Range z{0.0, 0.0};
    if (rho.exact() && rho.hi == 0.0) {
      // rho = 0: Z = 0 without a pass.
    } else if (one_hot) {
      const double pt = p_row(n)[tokens[n]];
      z = pad(rho.lo * (std::max(0.0, s.P[n].lo - pt) / s.P[n].lo), rho.hi * (std::max(0.0, s.P[n].hi - pt) / s.P[n].hi));
    } else if (rho.hi < 0x1p-200) {
      // taken as 0 (block_z)
    } else if (!(rho.lo >= 0x1p-200) || !residual(n, rho, &z)) {
      return false;
    }
    const Range c{1.0 - rho.hi, 1.0 - rho.lo};  // fl(1 - rho), monotone
    Range h;
    if (z.exact() && z.hi == 0.0 && c.lo > 0.0) {
      h = Range{0.0, 0.0};
    } else if (c.lo > 0.0 || z.lo > 0.0) {
      // z / (z + c): increasing in z, decreasing in c.
      const double lo = z.lo > 0.0 ? z.lo / (z.lo + c.hi) : 0.0;
      h = pad(lo, z.hi / (z.hi + c.lo));
    } else {
      return false;  // the denominator may be 0
    }
    const double un = u[n - 1];
    if (un < h.lo) {
      tau = n;  // its residual (at rho_n) is the one summed above
    } else if (!(un >= h.hi)) {
      return false;
    }
    if (!next(n, rho, &rho)) return false;
  }
  // Row K: its draw with h_K = rho_K, else the correction at tau.
  if (!read(k, false)) return false;
  const double uk = u[k - 1];
  int64_t token = -1;
  if (uk < rho.lo) {
    const float* x = p_row(k);
    if (!bounded_sample_index(&s.fp[k * nb], vocab, u[k], [x](int64_t v) { return x[v]; }, &token)) return false;
    *out = emitted(k, token);
    return true;
  }
  if (!(uk >= rho.hi)) return false;
  const float* p = p_row(tau);
  if (one_hot) {  // p_tau without t_tau
    if (!bounded_draw_without(kt, p, vocab, tokens[tau], u[k], &s.fp[tau * nb], &token)) return false;
    *out = emitted(tau, token);
    return true;
  }
  Range z;
  if (tau == 0 && !residual(0, Range{1.0, 1.0}, &z)) return false;  // tau >= 1: summed for Z_tau
  const float* q = q_row(tau);
  const float ga = s.ga[tau], gb = s.gb[tau];
  if (!bounded_sample_index(&s.fg[tau * nb], vocab, u[k],
                            [p, q, ga, gb](int64_t v) { return residual_value(p[v], q[v], ga, gb); }, &token, nullptr,
                            &s.err[tau * nb], true))
    return false;
  *out = emitted(tau, token);
  return true;
}

template <class Reader>
Outcome verify_round(const KernelTable& kt, const Reader& rows, bool one_hot, const int64_t* tokens,
                     const double* u, int64_t k, int64_t vocab, Method method) {
  if (method == Method::kToken) return token_round(kt, rows, one_hot, tokens, u, k, vocab);
  if constexpr (std::is_same_v<Reader, ProbRows>) {
    Outcome out;
    if (bounded_block_round(kt, rows, one_hot, tokens, u, k, vocab, &out)) return out;
  }
  return block_round(kt, rows, one_hot, tokens, u, k, vocab);
}

// Warp scratch of sample_round, reused across calls on the same thread.
struct WarpScratch {
  std::vector<float> values;
  std::vector<double> blocks;
};
WarpScratch& warp_scratch(int64_t vocab) {
  thread_local WarpScratch s;
  if (s.values.size() < static_cast<size_t>(vocab)) {
    s.values.resize(vocab);
    s.blocks.resize(num_blocks(vocab));
  }
  return s;
}

}  // namespace

int64_t bounded_draw_fallbacks() { return t_bounded_fallbacks; }
int64_t top_p_bounded_acceptances() { return t_top_p_accepted; }
int64_t tree_block_rejections() { return t_block_rejections; }
int64_t tree_cheap_nodes() { return t_cheap_nodes; }
int64_t coarse_draws() { return t_coarse_draws; }

Outcome accept_round(const KernelTable& kt, Rows target, Rows draft, const int64_t* tokens,
                     const double* uniforms, int64_t k, int64_t vocab, Method method) {
  const ProbRows rows{kt, target, draft, vocab};
  return verify_round(kt, rows, draft.data == nullptr, tokens, uniforms, k, vocab, method);
}

Outcome sample_round(const KernelTable& kt, RowRef x, int64_t n, const WarpParams& params,
                     double u, DraftBound* bound) {
  if (params.temperature == 0.0f) {
    Outcome out;
    if (!typed_argmax(kt, x, n, &out.token)) return nan_row(x, n);
    const Outcome bad = greedy_logits_error(x, out.token);  // Note [Greedy logits rows]
    if (bad.error != InputError::kNone) return bad;
    if (bound != nullptr) *bound = DraftBound{1.0f, 1.0, 1.0};
    return out;
  }
  int64_t token = -1;
  if (x.type == Elem::kF32 && temperature_only(params, n) &&
      bounded_weights_draw(kt, static_cast<const float*>(x.data), n, params.temperature, u, &token,
                           bound == nullptr)) {
    if (bound != nullptr) {
      const WeightBounds& wb = weight_bounds(0);
      *bound = DraftBound{wb.weight_at(token), wb.lo, wb.hi};
    }
    return emitted(0, token);
  }
  WarpScratch& s = warp_scratch(n);
  WarpedRow p{s.values.data(), s.blocks.data(), 0.0};
  const Outcome bad = warp_row_lazy(kt, as_floats(kt, x, n, widened_logits(n)), n, params, &p);
  if (bad.error != InputError::kNone) return bad;
  const auto value = [v = p.values, floor = p.floor](int64_t i) { return v[i] < floor ? 0.0f : v[i]; };
  token = sample_index(p.blocks, n, u * p.mass, value);
  if (bound != nullptr) *bound = DraftBound{value(token), p.mass, p.mass};
  return emitted(0, token);
}

Outcome accept_logits_round(const KernelTable& kt, Rows target, Rows draft, const int64_t* tokens,
                            const double* uniforms, int64_t k, int64_t vocab,
                            const WarpParams& params, Method method, const DraftBound* bounds) {
  const LogitRows rows{kt, target, draft, vocab, params, draft.data == nullptr ? nullptr : bounds};
  return verify_round(kt, rows, draft.data == nullptr, tokens, uniforms, k, vocab, method);
}

// ---- trees (Note [Tree verification]) -------------------------------------------------------
namespace {

// The children of every node in index order, as first-child and next-sibling links; slot 0
// is the root (node -1), slot j + 1 node j.
struct Children {
  std::vector<int64_t> first, next;
  Children(const int64_t* parents, int64_t n) : first(n + 1, -1), next(n, -1) {
    for (int64_t j = n - 1; j >= 0; --j) {
      next[j] = first[parents[j] + 1];
      first[parents[j] + 1] = j;
    }
  }
};

// Residual rows of the independent rule (two, so the one before a rejection survives it) and
// the float32 forms of half rows, per thread.
struct TreeScratch {
  std::vector<float> r[2], p, q;
  std::vector<double> r_blocks[2], sums;
};
TreeScratch& tree_scratch(int64_t vocab) {
  thread_local TreeScratch s;
  if (s.p.size() < static_cast<size_t>(vocab)) {
    for (auto* v : {&s.r[0], &s.r[1], &s.p, &s.q}) v->resize(vocab);
    for (auto* b : {&s.r_blocks[0], &s.r_blocks[1], &s.sums}) b->resize(num_blocks(vocab));
  }
  return s;
}

bool holds(const std::vector<int64_t>& tokens, int64_t t) {
  return std::find(tokens.begin(), tokens.end(), t) != tokens.end();
}

// Deterministic children of the node whose target row is p, first child c: r = p without
// the tokens of the children rejected so far. Returns the accepted child, or -1 with the
// token drawn from what is left of r in *token. p's block masses are updated in place.
int64_t try_deterministic(const KernelTable& kt, Side& p, int64_t c, const std::vector<int64_t>& next,
                          const int64_t* tokens, const double* u, int64_t n, int64_t vocab, int64_t* token) {
  std::vector<int64_t> removed;
  double mass = p.mass;
  for (; c >= 0; c = next[c]) {
    const int64_t t = tokens[c];
    const double rt = holds(removed, t) ? 0.0 : static_cast<double>(p.at(t));
    if (u[c] * mass < rt) return c;  // q = onehot(t): accept with probability r(t) / mass(r)
    removed.push_back(t);
    // t's block summed again with every removed token in it as +0.0, by the same kernel.
    const int64_t b = t / kMassBlock, begin = b * kMassBlock;
    const int64_t len = std::min(kMassBlock, vocab - begin);
    float block[kMassBlock];
    for (int64_t v = 0; v < len; ++v) block[v] = holds(removed, begin + v) ? 0.0f : p.at(begin + v);
    double unused = 0.0;
    kt.row_mass(block, len, &p.blocks[b], &unused);
    mass = 0.0;
    for (int64_t j = 0; j < num_blocks(vocab); ++j) mass += p.blocks[j];
  }
  if (!(mass > 0.0)) {  // nothing left but removed tokens (only by rounding): the last one
    *token = removed.back();
    return -1;
  }
  *token = sample_index(p.blocks.data(), vocab, u[n] * mass,
                        [&](int64_t v) { return holds(removed, v) ? 0.0f : p.at(v); });
  return -1;
}

// Children drawn independently from q (SpecInfer's rule): r = p; a child c is accepted iff
// u_c * q(c) * mass(r) < r(c) * Q; on rejection r = max(0, r / mass(r) - q / Q), scaled and
// stored (Note [Residual in float32]). Returns the accepted child, or -1 with the token
// drawn from the last r in *token. `at` holds the node's rows p and q with their canonical
// masses, and in at.r_blocks the guessed residual sums if at.guessed.
//
// Note [Tree bounds] (spec_verify.h): a rejected child's residual r' is summed exactly
// (residual_store, a float64 pass) only where the next step needs its canonical mass to
// define the residual after it. Where the next step is the last one at this node, bounds
// decide it when certain:
// - the next sibling, with r'(t) > 0 (one value, from r(t) and q(t)): accepted if
//   u * q(t) * M < r'(t) * Q holds with M an upper bound on the canonical mass of r' (the
//   ceiling a * mass(r) without a pass, else bounded_mass_upper of its block sums); r'(t) >
//   0 makes that mass positive, so the exact rule would not have stopped at r';
// - no sibling left: the draw from r' by bounded_sample_index, whose answer is sample_index's
//   on the canonical masses (it answers only if some r'(v) > 0, so the mass is positive).
// The sums are those guessed during the pass over p and q (r = p, factors near 1) or
// residual_block_sums' over r and q. A next sibling with r'(t) = 0 is rejected whatever the
// mass, and one whose acceptance is not certain is decided exactly: both go on to the exact
// residual.
int64_t try_independent(const KernelTable& kt, Position& at, int64_t c, const std::vector<int64_t>& next,
                        const int64_t* tokens, const double* u, int64_t n, int64_t vocab, int64_t* token) {
  TreeScratch& s = tree_scratch(vocab);
  const float* qf = as_floats(kt, at.q.row, vocab, s.q.data());
  const float* r = as_floats(kt, at.p.row, vocab, s.p.data());
  const double* r_blocks = at.p.blocks.data();
  const double q_mass = at.q.mass;
  double r_mass = at.p.mass;
  bool guessed = at.guessed;  // at.r_blocks sums max(0, r - q) while r is p
  int slot = 0;  // where the next residual goes: never the buffer holding r
  for (; c >= 0; c = next[c]) {
    const int64_t t = tokens[c];
    const double rt = r[t], qt = qf[t];
    if (u[c] * qt * r_mass < rt * q_mass) return c;
    float a = 0.0f, b = 0.0f;
    residual_scales(r_mass, q_mass, &a, &b);
    const int64_t c2 = next[c];
    const float rt2 = c2 >= 0 ? residual_value(r[tokens[c2]], qf[tokens[c2]], a, b) : 0.0f;
    // Accepted even if r' kept all of r's mass (residual_mass_ceiling): no pass at all.
    if (c2 >= 0 && rt2 > 0.0f && kt.residual_block_sums != nullptr &&
        u[c2] * static_cast<double>(qf[tokens[c2]]) * residual_mass_ceiling(a, r_mass, vocab) <
            static_cast<double>(rt2) * q_mass)
      return c2;
    if (kt.residual_block_sums != nullptr && (c2 < 0 || rt2 > 0.0f)) {
      const double* sums = s.sums.data();
      const double* err = nullptr;
      if (guessed && guess_margins(at, a, b, vocab)) {
        sums = at.r_blocks.data();
        err = at.guess_err.data();
      } else {
        kt.residual_block_sums(r, qf, a, b, vocab, s.sums.data());
      }
      if (c2 >= 0) {
        double upper = 0.0;
        if (bounded_mass_upper(sums, vocab, &upper, err) && u[c2] * static_cast<double>(qf[tokens[c2]]) * upper <
                                                                 static_cast<double>(rt2) * q_mass)
          return c2;
      } else {
        const auto value = [r, qf, a, b](int64_t v) { return residual_value(r[v], qf[v], a, b); };
        if (bounded_sample_index(sums, vocab, u[n], value, token, nullptr, err)) return -1;
        ++t_bounded_fallbacks;
      }
    }
    guessed = false;
    double mass = 0.0;
    kt.residual_store(r, qf, a, b, vocab, s.r[slot].data(), s.r_blocks[slot].data(), &mass);
    // Rounding left no mass: the exact residual is negligible next to r, and every later
    // sibling would be rejected; draw from r.
    if (!(mass > 0.0)) break;
    r = s.r[slot].data();
    r_blocks = s.r_blocks[slot].data();
    r_mass = mass;
    slot ^= 1;
  }
  *token = sample_index(r_blocks, vocab, u[n] * r_mass, [r](int64_t v) { return r[v]; });
  return -1;
}

template <class Reader>
Outcome tree_sampled(const KernelTable& kt, const Reader& rows, bool independent, const int64_t* tokens,
                     const Children& children, int64_t n, const double* u, int64_t vocab, int64_t* path) {
  Position& at = positions(vocab, Reader::kWarped)[0];
  int64_t node = -1, depth = 0;
  double last_p = 1.0, last_q = 1.0;  // the masses seen last (Note [Mass bounds]'s guess)
  for (;;) {
    const int64_t row = node + 1;
    const int64_t first = children.first[row];
    if (first < 0) {  // a leaf: the bonus token, from float32 block sums where certain
      int64_t token = -1;
      if (rows.bounded_draw(row, u[n], &at.p, &token)) return emitted(depth, token);
      const Outcome bad = rows.read_target(row, &at.p);
      if (bad.error != InputError::kNone) return bad;
      return emitted(depth, draw(at.p, u[n], vocab));
    }
    // Note [Tree bounds]: the node decided from float32 block sums of its rows, where certain.
    if (independent && rows.bounded_node_worth(row)) {
      TreeScratch& s = tree_scratch(vocab);
      int64_t token = -1;
      const int64_t child = rows.bounded_node(row, first, children.next, tokens, u, u[n], at, s.sums.data(),
                                              s.r_blocks[0].data(), &token, &last_p, &last_q);
      if (child == -2) return emitted(depth, token);
      if (child >= 0) {
        path[depth++] = child;
        node = child;
        continue;
      }
    }
    if (!independent && rows.surely_first_child(row, tokens[first], u[first])) {
      path[depth++] = first;
      node = first;
      continue;
    }
    // The draft row only where children are tried (side by side with the target row, the
    // target's errors first, as accept reads a position).
    // The guessed residual sums (row_mass_pair_guess) only where the masses seen last were near
    // 1: elsewhere the residual's factors are far from 1 and the guess is never used.
    const bool near_one = std::fabs(last_p - 1.0) < 0x1p-12 && std::fabs(last_q - 1.0) < 0x1p-12;
    const Outcome bad = independent ? rows.read_pair(row, &at.p, &at.q, near_one ? at.r_blocks.data() : nullptr,
                                                     &at.guessed)
                                    : rows.read_target(row, &at.p);
    if (bad.error != InputError::kNone) return bad;
    int64_t token = -1;
    int64_t child = -1;
    if (independent) {  // the residuals read the whole rows
      at.p.materialize(kt, vocab);
      at.q.materialize(kt, vocab);
      last_p = at.p.mass;
      last_q = at.q.mass;
      child = try_independent(kt, at, first, children.next, tokens, u, n, vocab, &token);
    } else {
      child = try_deterministic(kt, at.p, first, children.next, tokens, u, n, vocab, &token);
    }
    if (child < 0) return emitted(depth, token);
    path[depth++] = child;
    node = child;
  }
}

}  // namespace

Outcome tree_round(const KernelTable& kt, Rows target, Rows draft, const int64_t* tokens, const int64_t* parents,
                   int64_t n, const double* uniforms, int64_t vocab, const WarpParams* params, int64_t* path) {
  const Children children(parents, n);
  const bool greedy = params != nullptr ? params->temperature == 0.0f : uniforms == nullptr;
  if (greedy) {
    // Level by level: the first child holding the argmax of the current row.
    int64_t node = -1, depth = 0;
    for (;;) {
      const RowRef row = target.row(node + 1);
      int64_t best = 0;
      if (!typed_argmax(kt, row, vocab, &best)) return in_row(nan_row(row, vocab), false, node + 1);
      if (params != nullptr) {  // logits rows: Note [Greedy logits rows]
        const Outcome bad = greedy_logits_error(row, best);
        if (bad.error != InputError::kNone) return in_row(bad, false, node + 1);
      }
      int64_t c = children.first[node + 1];
      while (c >= 0 && tokens[c] != best) c = children.next[c];
      if (c < 0) return emitted(depth, best);
      path[depth++] = c;
      node = c;
    }
  }
  const bool independent = draft.data != nullptr;
  if (params == nullptr)
    return tree_sampled(kt, ProbRows{kt, target, draft, vocab}, independent, tokens, children, n, uniforms, vocab, path);
  return tree_sampled(kt, LogitRows{kt, target, draft, vocab, *params}, independent, tokens, children, n, uniforms,
                      vocab, path);
}

}  // namespace spec_verify
