// The ops on logits rows (Note [Warping]) and the probability-row ops, on the stable ABI:
// torch_binding.cpp's checks, rounds and messages.
#include <torch/csrc/stable/ops.h>

#include <cmath>
#include <cstring>
#include <limits>

#include "logits_args.h"
#include "ops.h"

namespace spec_verify_stable __attribute__((visibility("hidden"))) {

namespace {

Pair result(const sv::Outcome& out) { return {out.n_accepted, out.token}; }

struct AcceptArgs {
  Tensor target;
  OptTensor draft;  // none: one-hot drafts
  std::vector<int64_t> tokens;
  int64_t k, vocab;
  sv::Method method;
};

AcceptArgs checked_accept_args(const char* op, const Tensor& target_probs, const OptTensor& draft_probs,
                               const Tensor& draft_tokens, std::string_view method) {
  const sv::Method m = checked_method(op, method);
  const int64_t k = checked_k(op, target_probs);
  const int64_t vocab = target_probs.size(1);
  AcceptArgs a{checked_rows(op, "target_probs", target_probs, k + 1, vocab, "[K+1, V]"), std::nullopt, {}, k,
               vocab, m};
  if (draft_probs.has_value() && draft_probs->defined())
    a.draft = checked_rows(op, "draft_probs", *draft_probs, a.k, a.vocab, "[K, V]");
  a.tokens = checked_tokens(op, draft_tokens, a.k, a.vocab);
  return a;
}

sv::Outcome run_accept(const AcceptArgs& a, const double* uniforms) {
  return sv::accept_round(kernels(), rows_of(a.target), draft_rows(a.draft), a.tokens.data(), uniforms, a.k,
                          a.vocab, a.method);
}

// One row of the sampling ops: the token, or the row's error.
sv::Outcome sample_row(const Tensor& rows, int64_t i, const sv::WarpParams& params, double u) {
  sv::Outcome out = sv::sample_round(kernels(), rows_of(rows).row(i), rows.size(1), params, u);
  out.row = i;
  return out;
}

// A token for each checked row into `tokens`: the first malformed row's error, or kNone.
sv::Outcome sample_into(const Tensor& rows, const sv::WarpParams& params, const double* uniforms, Tensor& tokens) {
  tokens = torch::stable::empty({rows.size(0)}, ScalarType::Long);
  int64_t* out = tokens.mutable_data_ptr<int64_t>();
  for (int64_t i = 0; i < rows.size(0); ++i) {
    const sv::Outcome o = sample_row(rows, i, params, uniforms == nullptr ? 0.0 : uniforms[i]);
    if (o.error != sv::InputError::kNone) return o;
    out[i] = o.token;
  }
  return sv::Outcome{};
}

Tensor row_uniforms(const char* op, const Tensor& logits, const Tensor& uniforms, int64_t n) {
  return checked_uniforms(op, uniforms, n,
                          logits.dim() == 1 ? std::string("[] (one row)") : "[R] = [" + std::to_string(n) + "]",
                          logits.dim() == 1);
}

Tensor sampled(const char* op, const Tensor& logits, const sv::Outcome& out, const Tensor& tokens) {
  raise_if_bad(op, out, RowNames{"logits", "logits", true});
  return logits.dim() == 1 ? torch::stable::squeeze(tokens, 0) : tokens;
}

sv::Outcome run_accept_logits(const LogitsArgs& a, const double* uniforms, const sv::WarpParams& params) {
  if (a.greedy) return sv::verify_greedy_round(kernels(), rows_of(a.target), a.tokens.data(), a.k, a.vocab, true);
  return sv::accept_logits_round(kernels(), rows_of(a.target), draft_rows(a.draft), a.tokens.data(), uniforms, a.k,
                                 a.vocab, params, a.method);
}

}  // namespace

void check_generator(const char* op, const Gen& generator) {
  kernels();  // a bad SPEC_VERIFY_ISA raises here, as with_uniforms does before it draws
  if (!generator.has_value()) return;
  const torch::stable::Device d = generator->device();
  SV_CHECK_VALUE(d.type() == torch::headeronly::DeviceType::CPU, "spec_verify.", op,
                 ": generator must be a CPU ", "torch.Generator, got one on ", device_name(d));
}

bool uniforms_given(const char* op, const OptTensor& uniforms, const Gen& generator) {
  if (!uniforms.has_value()) return false;
  SV_CHECK_VALUE(!generator.has_value(), "spec_verify.", op,
                 ": pass uniforms or generator, not both (given uniforms, nothing is drawn)");
  return true;
}

const double* drawn(const char* op, const Tensor& uniforms, int64_t count) {
  if (!(uniforms.scalar_type() == ScalarType::Double && uniforms.dim() == 1 && uniforms.size(0) == count &&
        uniforms.is_contiguous() && uniforms.is_cpu())) {
    throw std::runtime_error(str("spec_verify._drawn_", op, ": expected ", count,
                                 " contiguous float64 uniforms drawn by the Python layer, got ", shape_of(uniforms)));
  }
  return uniforms.const_data_ptr<double>();
}

std::tuple<int64_t, int64_t> verify_greedy(const Tensor& target_probs, const Tensor& draft_tokens) {
  const char* op = "verify_greedy";
  const int64_t k = checked_k(op, target_probs);
  const int64_t vocab = target_probs.size(1);
  const Tensor target = checked_rows(op, "target_probs", target_probs, k + 1, vocab, "[K+1, V]");
  const std::vector<int64_t> tokens = checked_tokens(op, draft_tokens, k, vocab);
  const sv::Outcome out = sv::verify_greedy_round(kernels(), rows_of(target), tokens.data(), k, vocab);
  raise_if_bad(op, out);
  return result(out);
}

Pair accept_with_uniforms(const Tensor& target_probs, const OptTensor& draft_probs, const Tensor& draft_tokens,
                          const Tensor& uniforms, std::string_view method) {
  const char* op = "accept_with_uniforms";
  const AcceptArgs a = checked_accept_args(op, target_probs, draft_probs, draft_tokens, method);
  const Tensor u = checked_uniforms(op, uniforms, a.k + 1, "[K+1] = [" + std::to_string(a.k + 1) + "]");
  const sv::Outcome out = run_accept(a, u.const_data_ptr<double>());
  raise_if_bad(op, out);
  return result(out);
}

Pair drawn_accept(const Tensor& target_probs, const OptTensor& draft_probs, const Tensor& draft_tokens,
                  const Gen& generator, const StrArg& method, const OptTensor& given,
                  const Tensor& uniforms) {
  const char* op = "accept";
  if (uniforms_given(op, given, generator))
    return accept_with_uniforms(target_probs, draft_probs, draft_tokens, *given, method);
  const AcceptArgs a = checked_accept_args(op, target_probs, draft_probs, draft_tokens, method);
  check_generator(op, generator);
  const sv::Outcome out = run_accept(a, drawn(op, uniforms, a.k + 1));
  raise_if_bad(op, out);
  return result(out);
}

Tensor warp(const Tensor& logits, double temperature, int64_t top_k, double top_p, double min_p) {
  const char* op = "warp";
  const sv::WarpParams params = checked_params(op, temperature, top_k, top_p, min_p);
  const Tensor rows = checked_logits(op, "logits", logits);
  const int64_t n = rows.size(0), vocab = rows.size(1);
  Tensor out = torch::stable::empty({n, vocab}, ScalarType::Float);
  float* o_all = out.mutable_data_ptr<float>();
  std::memset(o_all, 0, sizeof(float) * static_cast<size_t>(n * vocab));
  const sv::KernelTable& kt = kernels();
  std::vector<float> values(vocab), widened(vocab);
  std::vector<double> blocks(sv::num_blocks(vocab));
  for (int64_t i = 0; i < n; ++i) {
    const float* x = sv::as_floats(kt, rows_of(rows).row(i), vocab, widened.data());
    float* o = o_all + i * vocab;
    if (params.temperature == 0.0f) {  // greedy: one-hot at sample_round's argmax
      const sv::Outcome greedy = sample_row(rows, i, params, 0.0);
      raise_if_bad(op, greedy, RowNames{"logits", "logits", true});
      o[greedy.token] = 1.0f;
      continue;
    }
    sv::WarpedRow w{values.data(), blocks.data(), 0.0};
    sv::Outcome bad = sv::warp_row(kt, x, vocab, params, &w);
    bad.row = i;
    raise_if_bad(op, bad, RowNames{"logits", "logits", true});
    for (int64_t v = 0; v < vocab; ++v) o[v] = static_cast<float>(static_cast<double>(w.values[v]) / w.mass);
  }
  return logits.dim() == 1 ? torch::stable::squeeze(out, 0) : out;
}

Tensor drawn_sample(const Tensor& logits, double temperature, int64_t top_k, double top_p, double min_p,
                    const Gen& generator, const OptTensor& given, const Tensor& uniforms) {
  const char* op = "sample";
  if (uniforms_given(op, given, generator))
    return sample_with_uniforms(logits, *given, temperature, top_k, top_p, min_p);
  const sv::WarpParams params = checked_params(op, temperature, top_k, top_p, min_p);
  const Tensor rows = checked_logits(op, "logits", logits);
  Tensor tokens;
  sv::Outcome out;
  if (params.temperature == 0.0f) {
    out = sample_into(rows, params, nullptr, tokens);
  } else {
    check_generator(op, generator);
    out = sample_into(rows, params, drawn(op, uniforms, rows.size(0)), tokens);
  }
  return sampled(op, logits, out, tokens);
}

Tensor sample_with_uniforms(const Tensor& logits, const Tensor& uniforms, double temperature, int64_t top_k,
                            double top_p, double min_p) {
  const char* op = "sample_with_uniforms";
  const sv::WarpParams params = checked_params(op, temperature, top_k, top_p, min_p);
  const Tensor rows = checked_logits(op, "logits", logits);
  const Tensor u = row_uniforms(op, logits, uniforms, rows.size(0));
  Tensor tokens;
  const sv::Outcome out = sample_into(rows, params, u.const_data_ptr<double>(), tokens);
  return sampled(op, logits, out, tokens);
}

Pair drawn_accept_logits(const Tensor& target_logits, const OptTensor& draft_logits, const Tensor& draft_tokens,
                         double temperature, int64_t top_k, double top_p, double min_p, const Gen& generator,
                         const StrArg& method, const OptTensor& given, const Tensor& uniforms) {
  const char* op = "accept_logits";
  if (uniforms_given(op, given, generator))
    return accept_logits_with_uniforms(target_logits, draft_logits, draft_tokens, *given, temperature, top_k, top_p,
                                       min_p, method);
  const sv::WarpParams params = checked_params(op, temperature, top_k, top_p, min_p);
  const LogitsArgs a = checked_logits_args(op, target_logits, draft_logits, draft_tokens, params, method);
  sv::Outcome out;
  if (a.greedy) {
    out = run_accept_logits(a, nullptr, params);
  } else {
    check_generator(op, generator);
    out = run_accept_logits(a, drawn(op, uniforms, a.k + 1), params);
  }
  raise_if_bad(op, out, kLogits);
  return result(out);
}

Pair accept_logits_with_uniforms(const Tensor& target_logits, const OptTensor& draft_logits,
                                 const Tensor& draft_tokens, const Tensor& uniforms, double temperature,
                                 int64_t top_k, double top_p, double min_p, std::string_view method) {
  const char* op = "accept_logits_with_uniforms";
  const sv::WarpParams params = checked_params(op, temperature, top_k, top_p, min_p);
  const LogitsArgs a = checked_logits_args(op, target_logits, draft_logits, draft_tokens, params, method);
  const Tensor u = checked_uniforms(op, uniforms, a.k + 1, "[K+1] = [" + std::to_string(a.k + 1) + "]");
  const sv::Outcome out = run_accept_logits(a, u.const_data_ptr<double>(), params);
  raise_if_bad(op, out, kLogits);
  return result(out);
}

Tensor row_masses(const Tensor& rows) {
  const char* op = "_row_masses";
  check_cpu(op, "rows", rows);
  SV_CHECK_VALUE(rows.dim() == 2 && rows.size(1) >= 1, "spec_verify._row_masses: rows must be "
                 "2-D [N, V] with V >= 1, got shape ", shape_of(rows));
  const Tensor r = checked_rows(op, "rows", rows, rows.size(0), rows.size(1), "[N, V]");
  const int64_t n = r.size(0), vocab = r.size(1);
  Tensor out = torch::stable::empty({n}, ScalarType::Double);
  std::vector<double> blocks(static_cast<size_t>(sv::num_blocks(vocab)));
  const sv::KernelTable& kt = kernels();
  for (int64_t i = 0; i < n; ++i) {
    SV_CHECK_VALUE(sv::typed_mass(kt, rows_of(r).row(i), vocab, blocks.data(), out.mutable_data_ptr<double>() + i),
                   "spec_verify._row_masses: rows[", i, "] holds a negative, NaN or infinite value");
  }
  return out;
}

}  // namespace spec_verify_stable
