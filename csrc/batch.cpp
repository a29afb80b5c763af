// Note [Ragged batches] (spec_verify.h): a batch of sequences, each verified by the
// single-sequence round on its own rows. No threads are started here: run_batch runs on the
// threads its caller gives it (the torch binding uses at::parallel_for).
#include <algorithm>

#include "spec_verify.h"

namespace spec_verify {
namespace {

// Relative cost of reading one row at a given V, for choosing how many threads are worth
// starting (results never depend on it). Single-row calls at V = 32000 on the Xeon, their
// call overhead included, took about 1 (argmax), 5 (a warp with temperature), 12 (and
// top-p) and 50 (and top-k) times the argmax call; a probability row's float64 mass pass
// costs about twice a float32 read.
int64_t row_cost(const Batch& in, int64_t b) {
  if (batch_greedy(in, b)) return 1;
  if (in.params == nullptr) return 2;
  const WarpParams& p = in.params[b];
  return p.top_k > 0 ? 50 : p.top_p < 1.0 ? 12 : 5;
}

}  // namespace

int64_t batch_cost(const Batch& in) {
  int64_t total = 0;
  for (int64_t b = 0; b < in.batch; ++b) {
    const int64_t k = batch_k(in, b);
    const bool greedy = batch_greedy(in, b);
    const int64_t rows = !greedy && in.draft.data != nullptr ? 2 * k + 1 : k + 1;
    total += rows * in.vocab * row_cost(in, b);
  }
  return total;
}

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

namespace {

// Sequence b: its round, its output row and num_accepted[b]; or the malformed row it met.
BatchFailure run_sequence(const KernelTable& kt, const Batch& in, const double* uniforms,
                          const int64_t* uniform_begin, int64_t b, int64_t width, int64_t* out,
                          int64_t* num_accepted) {
  const int64_t k = batch_k(in, b);
  const int64_t first_draft = batch_draft_begin(in, b);
  const int64_t first_target = batch_target_begin(in, b);
  const Rows target{in.target.row(first_target).data, in.target.stride, in.target.type};
  const Rows draft = in.draft.data == nullptr ? Rows{nullptr, 0}
                                              : Rows{in.draft.row(first_draft).data, in.draft.stride, in.draft.type};
  const int64_t* tokens = in.tokens + first_draft;
  Outcome o;
  if (batch_greedy(in, b)) {
    o = verify_greedy_round(kt, target, tokens, k, in.vocab);
  } else if (in.params != nullptr) {
    o = accept_logits_round(kt, target, draft, tokens, uniforms + uniform_begin[b], k, in.vocab, in.params[b],
                            in.method);
  } else {
    o = accept_round(kt, target, draft, tokens, uniforms + uniform_begin[b], k, in.vocab, in.method);
  }
  BatchFailure failure;
  if (o.error != InputError::kNone) {
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
  return failure;
}

}  // namespace

BatchFailure run_batch(const KernelTable& kt, const Batch& in, const double* uniforms,
                       const int64_t* uniform_begin, int64_t width, int64_t* out, int64_t* num_accepted,
                       std::atomic<int64_t>* next) {
  if (next == nullptr) {
    for (int64_t b = 0; b < in.batch; ++b) {
      const BatchFailure f = run_sequence(kt, in, uniforms, uniform_begin, b, width, out, num_accepted);
      if (f.sequence >= 0) return f;
    }
    return BatchFailure{};
  }
  for (int64_t b = next->fetch_add(1, std::memory_order_relaxed); b < in.batch;
       b = next->fetch_add(1, std::memory_order_relaxed)) {
    const BatchFailure f = run_sequence(kt, in, uniforms, uniform_begin, b, width, out, num_accepted);
    if (f.sequence >= 0) return f;
  }
  return BatchFailure{};
}

}  // namespace spec_verify
