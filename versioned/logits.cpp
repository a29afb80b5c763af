// The ops on probability rows and on logits rows (Note [Warping]), and _row_masses: the
// versioned binding's kernels, as torch_binding.cpp registers them.
#include <ATen/ATen.h>

#include <string>
#include <vector>

#include "generators.h"
#include "logits_args.h"
#include "ops.h"

using namespace spec_verify_versioned;  // the checks (checks.h, logits_args.h) and the draw

namespace {

struct AcceptArgs {
  at::Tensor target, draft;  // draft undefined: one-hot drafts
  TokenVec tokens;
  int64_t k, vocab;
  sv::Method method;
};

AcceptArgs checked_accept_args(const char* op, const at::Tensor& target_probs,
                               const std::optional<at::Tensor>& draft_probs,
                               const at::Tensor& draft_tokens, c10::string_view method) {
  AcceptArgs a;
  a.method = checked_method(op, method);
  a.k = checked_k(op, target_probs);
  a.vocab = target_probs.size(1);
  a.target = checked_rows(op, "target_probs", target_probs, a.k + 1, a.vocab, "[K+1, V]");
  if (draft_probs.has_value() && draft_probs->defined())
    a.draft = checked_rows(op, "draft_probs", *draft_probs, a.k, a.vocab, "[K, V]");
  a.tokens = checked_tokens(op, draft_tokens, a.k, a.vocab);
  return a;
}

sv::Outcome run_accept(const AcceptArgs& a, const double* uniforms) {
  return sv::accept_round(kernels(), rows_of(a.target), draft_rows(a.draft), a.tokens.data(),
                          uniforms, a.k, a.vocab, a.method);
}

struct WarpBuffers {
  std::vector<float> values, widened;
  std::vector<double> blocks;
  explicit WarpBuffers(int64_t vocab) : values(vocab), widened(vocab), blocks(sv::num_blocks(vocab)) {}
};

// One row of sample/sample_with_uniforms: the token, or the row's error.
sv::Outcome sample_row(const at::Tensor& rows, int64_t i, const sv::WarpParams& params, double u) {
  const int64_t vocab = rows.size(1);
  sv::Outcome out = sv::sample_round(kernels(), row_of(rows, i), vocab, params, u);
  out.row = i;
  return out;
}

// A token for each checked row (checked_logits) into `tokens`: the first malformed row's
// error, or kNone. uniforms may be null at temperature 0.
sv::Outcome sample_into(const at::Tensor& rows, const sv::WarpParams& params,
                        const double* uniforms, at::Tensor& tokens) {
  tokens = at::empty({rows.size(0)}, at::TensorOptions().dtype(at::kLong));
  int64_t* out = tokens.data_ptr<int64_t>();
  for (int64_t i = 0; i < rows.size(0); ++i) {
    const sv::Outcome o = sample_row(rows, i, params, uniforms == nullptr ? 0.0 : uniforms[i]);
    if (o.error != sv::InputError::kNone) return o;
    out[i] = o.token;
  }
  return sv::Outcome{};
}

// The uniforms of the sampling ops, one per row of logits ([V]: one, as a 0-d tensor).
at::Tensor row_uniforms(const char* op, const at::Tensor& logits, const at::Tensor& uniforms, int64_t n) {
  return checked_uniforms(op, uniforms, n,
                          logits.dim() == 1 ? std::string("[] (one row)") : "[R] = [" + std::to_string(n) + "]",
                          logits.dim() == 1);
}

// sample_into's tokens shaped as logits.shape[:-1], or its error raised.
at::Tensor sampled(const char* op, const at::Tensor& logits, const sv::Outcome& out,
                   const at::Tensor& tokens) {
  raise_if_bad(op, out, RowNames{"logits", "logits", true});
  return logits.dim() == 1 ? tokens.squeeze(0) : tokens;
}

sv::Outcome run_accept_logits(const LogitsArgs& a, const double* uniforms, const sv::WarpParams& params) {
  if (a.greedy) return sv::verify_greedy_round(kernels(), rows_of(a.target), a.tokens.data(), a.k, a.vocab, true);
  return sv::accept_logits_round(kernels(), rows_of(a.target), draft_rows(a.draft), a.tokens.data(),
                                 uniforms, a.k, a.vocab, params, a.method);
}

// The ops with their uniforms given (the Python API's *_with_uniforms, and the names their
// messages give).
std::tuple<c10::SymInt, c10::SymInt> accept_given(const at::Tensor& target_probs,
                                                  const std::optional<at::Tensor>& draft_probs,
                                                  const at::Tensor& draft_tokens, const at::Tensor& uniforms,
                                                  c10::string_view method) {
  const char* op = "accept_with_uniforms";
  const AcceptArgs a = checked_accept_args(op, target_probs, draft_probs, draft_tokens, method);
  const at::Tensor u = checked_uniforms(op, uniforms, a.k + 1, "[K+1] = [" + std::to_string(a.k + 1) + "]");
  const double* ud = u.data_ptr<double>();
  const sv::Outcome out = run_accept(a, ud);
  raise_if_bad(op, out);
  return result(out);
}

at::Tensor sample_given(const at::Tensor& logits, const at::Tensor& uniforms, double temperature, int64_t top_k,
                        double top_p, double min_p) {
  const char* op = "sample_with_uniforms";
  const sv::WarpParams params = checked_params(op, temperature, top_k, top_p, min_p);
  const at::Tensor rows = checked_logits(op, "logits", logits);
  const int64_t n = rows.size(0);
  const at::Tensor u = row_uniforms(op, logits, uniforms, n);
  at::Tensor tokens;
  const sv::Outcome out = sample_into(rows, params, u.data_ptr<double>(), tokens);
  return sampled(op, logits, out, tokens);
}

std::tuple<c10::SymInt, c10::SymInt> accept_logits_given(
    const at::Tensor& target_logits, const std::optional<at::Tensor>& draft_logits,
    const at::Tensor& draft_tokens, const at::Tensor& uniforms, double temperature, int64_t top_k,
    double top_p, double min_p, c10::string_view method) {
  const char* op = "accept_logits_with_uniforms";
  const sv::WarpParams params = checked_params(op, temperature, top_k, top_p, min_p);
  const LogitsArgs a = checked_logits_args(op, target_logits, draft_logits, draft_tokens, params, method);
  const at::Tensor u = checked_uniforms(op, uniforms, a.k + 1, "[K+1] = [" + std::to_string(a.k + 1) + "]");
  const sv::Outcome out = run_accept_logits(a, u.data_ptr<double>(), params);
  raise_if_bad(op, out, kLogits);
  return result(out);
}

}  // namespace

std::tuple<c10::SymInt, c10::SymInt> verify_greedy(const at::Tensor& target_probs,
                                                   const at::Tensor& draft_tokens) {
  const char* op = "verify_greedy";
  const int64_t k = checked_k(op, target_probs);
  const int64_t vocab = target_probs.size(1);
  const at::Tensor target = checked_rows(op, "target_probs", target_probs, k + 1, vocab, "[K+1, V]");
  const TokenVec tokens = checked_tokens(op, draft_tokens, k, vocab);
  const sv::Outcome out = sv::verify_greedy_round(kernels(), rows_of(target), tokens.data(), k, vocab);
  raise_if_bad(op, out);
  return result(out);
}

std::tuple<c10::SymInt, c10::SymInt> accept(const at::Tensor& target_probs,
                                            const std::optional<at::Tensor>& draft_probs,
                                            const at::Tensor& draft_tokens,
                                            const std::optional<at::Generator>& generator,
                                            c10::string_view method,
                                            const std::optional<at::Tensor>& uniforms) {
  if (uniforms_given("accept", uniforms, generator))
    return accept_given(target_probs, draft_probs, draft_tokens, *uniforms, method);
  const char* op = "accept";
  const AcceptArgs a = checked_accept_args(op, target_probs, draft_probs, draft_tokens, method);
  const sv::Outcome out = with_uniforms(op, generator, a.k + 1, [&](const double* u) { return run_accept(a, u); });
  raise_if_bad(op, out);
  return result(out);
}

at::Tensor warp(const at::Tensor& logits, double temperature, int64_t top_k, double top_p,
                double min_p) {
  const char* op = "warp";
  const sv::WarpParams params = checked_params(op, temperature, top_k, top_p, min_p);
  const at::Tensor rows = checked_logits(op, "logits", logits);
  const int64_t n = rows.size(0), vocab = rows.size(1);
  at::Tensor out = at::zeros({n, vocab}, at::TensorOptions().dtype(at::kFloat));
  const sv::KernelTable& kt = kernels();
  WarpBuffers buffers(vocab);
  for (int64_t i = 0; i < n; ++i) {
    const float* x = sv::as_floats(kt, row_of(rows, i), vocab, buffers.widened.data());
    float* o = out.data_ptr<float>() + i * vocab;
    if (params.temperature == 0.0f) {  // greedy: one-hot at sample_round's argmax
      const sv::Outcome greedy = sample_row(rows, i, params, 0.0);
      raise_if_bad(op, greedy, RowNames{"logits", "logits", true});
      o[greedy.token] = 1.0f;
      continue;
    }
    sv::WarpedRow w{buffers.values.data(), buffers.blocks.data(), 0.0};
    sv::Outcome bad = sv::warp_row(kt, x, vocab, params, &w);
    bad.row = i;
    raise_if_bad(op, bad, RowNames{"logits", "logits", true});
    for (int64_t v = 0; v < vocab; ++v) o[v] = static_cast<float>(static_cast<double>(w.values[v]) / w.mass);
  }
  return logits.dim() == 1 ? out.squeeze(0) : out;
}

at::Tensor sample(const at::Tensor& logits, double temperature, int64_t top_k, double top_p,
                  double min_p, const std::optional<at::Generator>& generator,
                  const std::optional<at::Tensor>& uniforms) {
  if (uniforms_given("sample", uniforms, generator))
    return sample_given(logits, *uniforms, temperature, top_k, top_p, min_p);
  const char* op = "sample";
  const sv::WarpParams params = checked_params(op, temperature, top_k, top_p, min_p);
  const at::Tensor rows = checked_logits(op, "logits", logits);
  at::Tensor tokens;
  // At temperature 0 nothing is drawn; otherwise a malformed row puts the generator back.
  const sv::Outcome out =
      params.temperature == 0.0f
          ? sample_into(rows, params, nullptr, tokens)
          : with_uniforms(op, generator, rows.size(0), [&](const double* u) { return sample_into(rows, params, u, tokens); });
  return sampled(op, logits, out, tokens);
}

std::tuple<c10::SymInt, c10::SymInt> accept_logits(const at::Tensor& target_logits,
                                                   const std::optional<at::Tensor>& draft_logits,
                                                   const at::Tensor& draft_tokens, double temperature,
                                                   int64_t top_k, double top_p, double min_p,
                                                   const std::optional<at::Generator>& generator,
                                                   c10::string_view method,
                                                   const std::optional<at::Tensor>& uniforms) {
  if (uniforms_given("accept_logits", uniforms, generator))
    return accept_logits_given(target_logits, draft_logits, draft_tokens, *uniforms, temperature, top_k, top_p,
                               min_p, method);
  const char* op = "accept_logits";
  const sv::WarpParams params = checked_params(op, temperature, top_k, top_p, min_p);
  const LogitsArgs a = checked_logits_args(op, target_logits, draft_logits, draft_tokens, params, method);
  const sv::Outcome out =
      a.greedy ? run_accept_logits(a, nullptr, params)
               : with_uniforms(op, generator, a.k + 1, [&](const double* u) { return run_accept_logits(a, u, params); });
  raise_if_bad(op, out, kLogits);
  return result(out);
}

at::Tensor row_masses(const at::Tensor& rows) {
  const char* op = "_row_masses";
  check_cpu(op, "rows", rows);
  TORCH_CHECK_VALUE(rows.dim() == 2 && rows.size(1) >= 1, "spec_verify._row_masses: rows must be "
                    "2-D [N, V] with V >= 1, got shape ", shape_of(rows));
  const at::Tensor r = checked_rows(op, "rows", rows, rows.size(0), rows.size(1), "[N, V]");
  const int64_t n = r.size(0), vocab = r.size(1);
  at::Tensor out = at::empty({n}, at::TensorOptions().dtype(at::kDouble));
  std::vector<double> blocks(static_cast<size_t>(sv::num_blocks(vocab)));
  const sv::KernelTable& kt = kernels();
  for (int64_t i = 0; i < n; ++i) {
    TORCH_CHECK_VALUE(sv::typed_mass(kt, row_of(r, i), vocab, blocks.data(), out.data_ptr<double>() + i),
                      "spec_verify._row_masses: rows[", i, "] holds a negative, NaN or infinite value");
  }
  return out;
}
