// Note [Ragged batches]: run_batch equals the single-sequence rounds on each sequence, on one
// thread and on three.
#include "harness.h"

namespace native_tests {

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

}  // namespace native_tests
