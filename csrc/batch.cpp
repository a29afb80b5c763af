// Note [Ragged batches] (spec_verify.h): a batch of sequences, each verified by the
// single-sequence round on its own rows. No threads here: the caller runs the ranges
// batch_partition gives on whatever threads it has (the torch binding uses at::parallel_for).
#include <algorithm>

#include "spec_verify.h"

namespace spec_verify {
namespace {

// Relative cost of reading one row, per kind of read, for balancing only (results never
// depend on it): a greedy row is one argmax pass, a probability row one mass pass (two for a
// pair, counted as two rows), a logits row a warp (the maximum, the weights with their
// exp, and the cuts: measured about three argmax passes at V = 32000).
constexpr int64_t kPlainRowCost = 1;
constexpr int64_t kWarpedRowCost = 3;

// The elements sequence b may read, weighted: every row of a round that is not decided early.
int64_t sequence_cost(const Batch& in, int64_t b) {
  const int64_t k = batch_k(in, b);
  if (batch_greedy(in, b)) return (k + 1) * in.vocab * kPlainRowCost;
  const int64_t rows = in.draft.data != nullptr ? 2 * k + 1 : k + 1;
  return rows * in.vocab * (in.params != nullptr ? kWarpedRowCost : kPlainRowCost);
}

}  // namespace

int64_t batch_uniform_offsets(const Batch& in, int64_t* uniform_begin) {
  int64_t total = 0;
  for (int64_t b = 0; b < in.batch; ++b) {
    if (batch_greedy(in, b)) {
      uniform_begin[b] = -1;
    } else {
      uniform_begin[b] = total;
      total += batch_k(in, b) + 1;
    }
  }
  return total;
}

std::vector<int64_t> batch_partition(const Batch& in, int64_t parts, int64_t min_cost) {
  std::vector<int64_t> bounds{0};
  if (in.batch == 0) {
    bounds.push_back(0);
    return bounds;
  }
  int64_t total = 0;
  for (int64_t b = 0; b < in.batch; ++b) total += sequence_cost(in, b);
  parts = std::max<int64_t>(1, std::min({parts, in.batch, total / std::max<int64_t>(min_cost, 1)}));
  // Part i ends at the first sequence whose running cost reaches i/parts of the total, so
  // each part holds about total/parts (one expensive sequence can make a part larger).
  int64_t running = 0;
  for (int64_t b = 0; b < in.batch && static_cast<int64_t>(bounds.size()) < parts; ++b) {
    running += sequence_cost(in, b);
    const auto i = static_cast<int64_t>(bounds.size());
    // running >= total * i / parts, in integers without overflow for realistic sizes
    if (static_cast<double>(running) * parts >= static_cast<double>(total) * i && b + 1 < in.batch) {
      bounds.push_back(b + 1);
    }
  }
  bounds.push_back(in.batch);
  return bounds;
}

BatchFailure run_batch(const KernelTable& kt, const Batch& in, const double* uniforms,
                       const int64_t* uniform_begin, int64_t begin, int64_t end, int64_t width,
                       int64_t* out, int64_t* num_accepted) {
  const bool one_hot = in.draft.data == nullptr;
  for (int64_t b = begin; b < end; ++b) {
    const int64_t k = batch_k(in, b);
    const int64_t first_draft = batch_draft_begin(in, b);
    const int64_t first_target = batch_target_begin(in, b);
    const Rows target{in.target.row(first_target).data, in.target.stride, in.target.type};
    const Rows draft = one_hot ? Rows{nullptr, 0} : Rows{in.draft.row(first_draft).data, in.draft.stride, in.draft.type};
    const int64_t* tokens = in.tokens + first_draft;
    Outcome o;
    if (batch_greedy(in, b)) {
      o = verify_greedy_round(kt, target, tokens, k, in.vocab);
    } else if (in.params != nullptr) {
      o = accept_logits_round(kt, target, draft, tokens, uniforms + uniform_begin[b], k, in.vocab,
                              in.params[b], in.method);
    } else {
      o = accept_round(kt, target, draft, tokens, uniforms + uniform_begin[b], k, in.vocab, in.method);
    }
    if (o.error != InputError::kNone) {
      BatchFailure failure;
      failure.sequence = b;
      failure.outcome = o;
      failure.outcome.row += o.in_draft ? first_draft : first_target;
      return failure;
    }
    int64_t* row = out + b * width;
    std::copy(tokens, tokens + o.n_accepted, row);
    row[o.n_accepted] = o.token;
    std::fill(row + o.n_accepted + 1, row + width, int64_t{-1});
    num_accepted[b] = o.n_accepted;
  }
  return BatchFailure{};
}

}  // namespace spec_verify
