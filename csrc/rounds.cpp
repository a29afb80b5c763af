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

// The rows of a round on probabilities: read in place, validated by their masses.
struct ProbRows {
  const KernelTable& kt;
  Rows target, draft;
  int64_t vocab;
  static constexpr bool kWarped = false;

  Outcome read_target(int64_t i, Side* p) const {
    p->row = target.row(i);
    p->floor = kNoFloor;
    if (!typed_mass(kt, p->row, vocab, p->blocks.data(), &p->mass)) return bad_mass_row(p->row, vocab, false, i);
    if (p->mass == 0.0) return zero_mass_row(false, i);
    return Outcome{};
  }
  // The target row's errors come first: a zero-mass target row is reported before the
  // draft row is looked at.
  Outcome read_pair(int64_t i, Side* p, Side* q) const {
    const Outcome bad = read_target(i, p);
    if (bad.error != InputError::kNone) return bad;
    q->row = draft.row(i);
    q->floor = kNoFloor;
    if (!typed_mass(kt, q->row, vocab, q->blocks.data(), &q->mass)) return bad_mass_row(q->row, vocab, true, i);
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

// The rows of a round on logits: warped as they are read (Note [Warping]), left lazy.
struct LogitRows {
  const KernelTable& kt;
  Rows target, draft;
  int64_t vocab;
  const WarpParams& params;
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
  Outcome read_pair(int64_t i, Side* p, Side* q) const {
    const Outcome bad = read_target(i, p);
    if (bad.error != InputError::kNone) return bad;
    return read(draft.row(i), true, i, q);
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
  at.p.materialize(kt, vocab);  // the residual reads the whole rows
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

// ---- token-wise verification (Note [One-hot drafts] for a draft without rows) ------------

template <class Reader>
Outcome token_round(const KernelTable& kt, const Reader& rows, bool one_hot, const int64_t* tokens,
                    const double* u, int64_t k, int64_t vocab) {
  Position& at = positions(vocab, Reader::kWarped)[0];
  for (int64_t i = 0; i < k; ++i) {
    const int64_t t = tokens[i];
    if (one_hot) {
      const Outcome bad = rows.read_target(i, &at.p);
      if (bad.error != InputError::kNone) return bad;
      // q = onehot(t), Q = 1: accept with probability p(t) / P, u * P < p(t).
      if (u[i] * at.p.mass < static_cast<double>(at.p.at(t))) continue;
      return emitted(i, draw_without(kt, at.p, t, u[k], vocab));
    }
    const Outcome bad = rows.read_pair(i, &at.p, &at.q);
    if (bad.error != InputError::kNone) return bad;
    // Accept t with probability min(1, (p(t)/P) / (q(t)/Q)), without dividing:
    // u * q(t) * P < p(t) * Q. p(t) = 0 never passes; q(t) = 0 < p(t) always does.
    const double pt = at.p.at(t), qt = at.q.at(t);
    if (u[i] * qt * at.p.mass < pt * at.q.mass) continue;
    sum_residual(kt, at, 1.0, vocab);
    return emitted(i, draw_residual(at, u[k], vocab));
  }
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

template <class Reader>
Outcome verify_round(const KernelTable& kt, const Reader& rows, bool one_hot, const int64_t* tokens,
                     const double* u, int64_t k, int64_t vocab, Method method) {
  if (method == Method::kToken) return token_round(kt, rows, one_hot, tokens, u, k, vocab);
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

Outcome accept_round(const KernelTable& kt, Rows target, Rows draft, const int64_t* tokens,
                     const double* uniforms, int64_t k, int64_t vocab, Method method) {
  const ProbRows rows{kt, target, draft, vocab};
  return verify_round(kt, rows, draft.data == nullptr, tokens, uniforms, k, vocab, method);
}

Outcome sample_round(const KernelTable& kt, RowRef x, int64_t n, const WarpParams& params, double u) {
  if (params.temperature == 0.0f) {
    Outcome out;
    if (!typed_argmax(kt, x, n, &out.token)) return nan_row(x, n);
    const Outcome bad = greedy_logits_error(x, out.token);  // Note [Greedy logits rows]
    return bad.error != InputError::kNone ? bad : out;
  }
  WarpScratch& s = warp_scratch(n);
  WarpedRow p{s.values.data(), s.blocks.data(), 0.0};
  const Outcome bad = warp_row_lazy(kt, as_floats(kt, x, n, widened_logits(n)), n, params, &p);
  if (bad.error != InputError::kNone) return bad;
  const auto value = [v = p.values, floor = p.floor](int64_t i) { return v[i] < floor ? 0.0f : v[i]; };
  return emitted(0, sample_index(p.blocks, n, u * p.mass, value));
}

Outcome accept_logits_round(const KernelTable& kt, Rows target, Rows draft, const int64_t* tokens,
                            const double* uniforms, int64_t k, int64_t vocab,
                            const WarpParams& params, Method method) {
  const LogitRows rows{kt, target, draft, vocab, params};
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
  std::vector<double> r_blocks[2];
};
TreeScratch& tree_scratch(int64_t vocab) {
  thread_local TreeScratch s;
  if (s.p.size() < static_cast<size_t>(vocab)) {
    for (auto* v : {&s.r[0], &s.r[1], &s.p, &s.q}) v->resize(vocab);
    for (auto* b : {&s.r_blocks[0], &s.r_blocks[1]}) b->resize(num_blocks(vocab));
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
// drawn from the last r in *token. `at` holds the node's rows p and q (materialized) with
// their canonical masses.
int64_t try_independent(const KernelTable& kt, Position& at, int64_t c, const std::vector<int64_t>& next,
                        const int64_t* tokens, const double* u, int64_t n, int64_t vocab, int64_t* token) {
  TreeScratch& s = tree_scratch(vocab);
  const float* qf = as_floats(kt, at.q.row, vocab, s.q.data());
  const float* r = as_floats(kt, at.p.row, vocab, s.p.data());
  const double* r_blocks = at.p.blocks.data();
  const double q_mass = at.q.mass;
  double r_mass = at.p.mass;
  int slot = 0;  // where the next residual goes: never the buffer holding r
  for (; c >= 0; c = next[c]) {
    const int64_t t = tokens[c];
    const double rt = r[t], qt = qf[t];
    if (u[c] * qt * r_mass < rt * q_mass) return c;
    float a = 0.0f, b = 0.0f;
    residual_scales(r_mass, q_mass, &a, &b);
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
  for (;;) {
    const int64_t row = node + 1;
    const int64_t first = children.first[row];
    if (first < 0) {  // a leaf: the bonus token
      const Outcome bad = rows.read_target(row, &at.p);
      if (bad.error != InputError::kNone) return bad;
      return emitted(depth, draw(at.p, u[n], vocab));
    }
    // The draft row only where children are tried (side by side with the target row, the
    // target's errors first, as accept reads a position).
    const Outcome bad = independent ? rows.read_pair(row, &at.p, &at.q) : rows.read_target(row, &at.p);
    if (bad.error != InputError::kNone) return bad;
    int64_t token = -1;
    int64_t child = -1;
    if (independent) {  // the residuals read the whole rows
      at.p.materialize(kt, vocab);
      at.q.materialize(kt, vocab);
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
