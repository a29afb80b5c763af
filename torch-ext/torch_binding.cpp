// torch op schemas and tensor checks; everything below this file sees raw pointers.
#include <ATen/ATen.h>
#include <ATen/CPUGeneratorImpl.h>
#include <ATen/EmptyTensor.h>
#include <ATen/Parallel.h>
#include <ATen/core/DistributionsHelper.h>
#include <c10/util/SmallVector.h>
#include <torch/library.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <memory>
#include <mutex>
#include <sstream>
#include <stdexcept>

#include "registration.h"
#include "spec_verify.h"
#include "torch_binding.h"

namespace sv = spec_verify;

namespace {

std::string shape_of(const at::Tensor& t) {
  std::ostringstream s;
  s << t.sizes();
  return s.str();
}

// "torch.float64", as users write it.
std::string dtype_name(at::ScalarType t) { return "torch." + std::string(c10::getDtypeNames(t).first); }

const sv::KernelTable& kernels() {
  try {
    return sv::active_kernels();
  } catch (const std::invalid_argument& e) {
    TORCH_CHECK_VALUE(false, "spec_verify: ", e.what());
  }
}

void check_cpu(const char* op, const char* name, const at::Tensor& t) {
  TORCH_CHECK_VALUE(t.device().is_cpu(), "spec_verify.", op, ": ", name,
                    " must be on the CPU, got a tensor on ", t.device());
  // Sparse, mkldnn and nested tensors reach these kernels through their own dispatch keys
  // (registered below), so that they get this error instead of torch's "could not run".
  TORCH_CHECK_TYPE(t.layout() == at::kStrided && !t.is_nested(), "spec_verify.", op, ": ", name,
                   " must be a dense (strided) tensor, got layout ", t.layout(),
                   t.is_nested() ? " (nested)" : "", "; convert with .to_dense()");
}

// Rows are float32, float16 or bfloat16 (Note [Half rows]), each tensor its own.
bool row_dtype(at::ScalarType t) { return t == at::kFloat || t == at::kHalf || t == at::kBFloat16; }

void check_row_dtype(const char* op, const char* name, const at::Tensor& t) {
  TORCH_CHECK_TYPE(row_dtype(t.scalar_type()), "spec_verify.", op, ": ", name,
                   " must have dtype torch.float32, torch.float16 or torch.bfloat16, got ",
                   dtype_name(t.scalar_type()), t.scalar_type() == at::kDouble ? " (convert with .float())" : "");
}

// A [rows, V] probability (or logit) tensor. Returns it with unit stride along V (a copy
// only if it had none), so each row is a plain array.
at::Tensor checked_rows(const char* op, const char* name, const at::Tensor& t, int64_t rows,
                        int64_t vocab, const char* expected) {
  check_cpu(op, name, t);
  check_row_dtype(op, name, t);
  TORCH_CHECK_VALUE(t.dim() == 2, "spec_verify.", op, ": ", name, " must be 2-D ", expected,
                    ", got shape ", shape_of(t));
  TORCH_CHECK_VALUE(t.size(0) == rows && t.size(1) == vocab, "spec_verify.", op, ": ", name,
                    " must have shape ", expected, " = [", rows, ", ", vocab, "], got ",
                    shape_of(t));
  return t.stride(1) == 1 ? t : t.contiguous();
}

// The K draft tokens as int64 values in [0, V). An int64 tensor (the usual case) is read in
// place, at its stride; another integer dtype through a converted copy. A round's few tokens
// stay on the stack (TokenVec); a batch's go to a std::vector.
using TokenVec = c10::SmallVector<int64_t, 16>;

template <class Vec = TokenVec>
Vec checked_tokens(const char* op, const at::Tensor& t, int64_t k, int64_t vocab,
                   const char* target_name = "target_probs") {
  check_cpu(op, "draft_tokens", t);
  TORCH_CHECK_TYPE(at::isIntegralType(t.scalar_type(), /*includeBool=*/false), "spec_verify.",
                   op, ": draft_tokens must have an integer dtype, got ", dtype_name(t.scalar_type()));
  TORCH_CHECK_VALUE(t.dim() == 1 && t.size(0) == k, "spec_verify.", op,
                    ": draft_tokens must have shape [K] = [", k,
                    "] (K = ", target_name, ".shape[0] - 1), got ", shape_of(t));
  Vec tokens(static_cast<size_t>(k));
  if (t.scalar_type() == at::kLong) {
    const int64_t* data = t.const_data_ptr<int64_t>();
    const int64_t stride = t.stride(0);
    for (int64_t i = 0; i < k; ++i) tokens[i] = data[i * stride];
  } else {
    const at::Tensor values = t.to(at::kLong).contiguous();
    const int64_t* data = values.const_data_ptr<int64_t>();
    for (int64_t i = 0; i < k; ++i) tokens[i] = data[i];
  }
  for (int64_t i = 0; i < k; ++i) {
    TORCH_CHECK_VALUE(tokens[i] >= 0 && tokens[i] < vocab, "spec_verify.", op, ": draft_tokens[",
                      i, "] = ", tokens[i], " is outside the vocabulary [0, ", vocab, ")");
  }
  return tokens;
}

int64_t checked_k(const char* op, const at::Tensor& target, const char* name = "target_probs") {
  check_cpu(op, name, target);
  TORCH_CHECK_VALUE(target.dim() == 2 && target.size(0) >= 1 && target.size(1) >= 1,
                    "spec_verify.", op, ": ", name,
                    " must be 2-D [K+1, V] with K >= 0 and V >= 1, got shape ", shape_of(target));
  return target.size(0) - 1;
}

sv::Elem elem_of(const at::Tensor& t) {
  return t.scalar_type() == at::kHalf ? sv::Elem::kF16 : t.scalar_type() == at::kBFloat16 ? sv::Elem::kBF16 : sv::Elem::kF32;
}

sv::Rows rows_of(const at::Tensor& t) {
  return sv::Rows{t.data_ptr(), t.size(0) > 1 ? t.stride(0) : 0, elem_of(t)};
}

// Row i of a checked [R, V] tensor.
sv::RowRef row_of(const at::Tensor& t, int64_t i) { return rows_of(t).row(i); }

// Turns a malformed row found by a round into the exception the user sees. Probability
// rows (accept) and logits rows (the warping ops) are named by their arguments.
struct RowNames {
  const char* target;
  const char* draft;
  bool logits;
};
constexpr RowNames kProbs{"target_probs", "draft_probs", false};
constexpr RowNames kLogits{"target_logits", "draft_logits", true};

void raise_if_bad(const char* op, const sv::Outcome& out, const RowNames& names = kProbs) {
  if (out.error == sv::InputError::kNone) return;
  const char* name = out.in_draft ? names.draft : names.target;
  if (out.error == sv::InputError::kZeroMass) {
    TORCH_CHECK_VALUE(false, "spec_verify.", op, ": ", name, "[", out.row,
                      "] has zero mass (every entry is 0); a row must have positive mass");
  }
  if (out.error == sv::InputError::kNoFinite) {
    TORCH_CHECK_VALUE(false, "spec_verify.", op, ": ", name, "[", out.row,
                      "] has no finite value (every entry is -inf)");
  }
  if (out.error == sv::InputError::kDraftBounds) {
    TORCH_CHECK_VALUE(false, "spec_verify.", op, ": draft_bounds[", out.row, "] does not hold for ", name, "[",
                      out.row, "] and its draft token: pass the bounds `sample(..., return_bounds=True)` "
                      "returned for these rows with these warping parameters");
  }
  if (out.error == sv::InputError::kOverflow) {
    TORCH_CHECK_VALUE(false, "spec_verify.", op, ": ", name, "[", out.row, ", ", out.col, "] = ",
                      out.value, " divided by the temperature overflows float32; use a larger "
                      "temperature (or 0 for greedy)");
  }
  const char* what = out.error == sv::InputError::kNaN        ? "NaN"
                     : out.error == sv::InputError::kNegative ? "negative"
                                                              : "infinite";
  const char* rule = out.error == sv::InputError::kNaN ? ""
                     : names.logits ? "; logits may be -inf (a masked token) but not +inf"
                                    : "; probabilities must be finite and non-negative";
  TORCH_CHECK_VALUE(false, "spec_verify.", op, ": ", name, "[", out.row, ", ", out.col, "] = ",
                    out.value, " is ", what, rule);
}

std::tuple<c10::SymInt, c10::SymInt> result(const sv::Outcome& out) {
  return {c10::SymInt(out.n_accepted), c10::SymInt(out.token)};
}

// Note [Block verification]'s method by name.
sv::Method checked_method(const char* op, c10::string_view method) {
  if (method == "token") return sv::Method::kToken;
  if (method == "block") return sv::Method::kBlock;
  TORCH_CHECK_VALUE(false, "spec_verify.", op, ": method must be \"token\" or \"block\", got \"",
                    method, "\"");
  return sv::Method::kToken;
}

// The rows of a draft given as a tensor, or none (one-hot drafts, Note [One-hot drafts]).
sv::Rows draft_rows(const at::Tensor& draft) {
  return draft.defined() ? rows_of(draft) : sv::Rows{nullptr, 0};
}

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

// Uniforms given by the caller: float64, `count` of them (shape [count], or [] for one when
// `scalar`), each in [0, 1). Returns them contiguous.
at::Tensor checked_uniforms(const char* op, const at::Tensor& uniforms, int64_t count,
                            const std::string& expected, bool scalar = false) {
  check_cpu(op, "uniforms", uniforms);
  TORCH_CHECK_TYPE(uniforms.scalar_type() == at::kDouble, "spec_verify.", op,
                   ": uniforms must have dtype torch.float64, got ", dtype_name(uniforms.scalar_type()));
  TORCH_CHECK_VALUE(scalar ? uniforms.dim() == 0 : (uniforms.dim() == 1 && uniforms.size(0) == count),
                    "spec_verify.", op, ": uniforms must have shape ", expected, ", got ",
                    shape_of(uniforms));
  const at::Tensor u = uniforms.contiguous();
  const double* ud = u.data_ptr<double>();
  for (int64_t i = 0; i < count; ++i) {
    TORCH_CHECK_VALUE(ud[i] >= 0.0 && ud[i] < 1.0, "spec_verify.", op, ": uniforms[", i, "] = ",
                      ud[i], " is outside [0, 1)");
  }
  return u;
}

sv::Outcome run_accept(const AcceptArgs& a, const double* uniforms) {
  return sv::accept_round(kernels(), rows_of(a.target), draft_rows(a.draft), a.tokens.data(),
                          uniforms, a.k, a.vocab, a.method);
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

namespace {

// Runs run(uniforms) with `count` float64 uniforms drawn from the generator: the stream
// torch.rand(count, dtype=torch.float64, generator=generator) gives (one random64() per
// value, in order), drawn without a tensor. The engine is kept so that a malformed row,
// found only as rows are read, can put the generator back: a call that raises changes
// nothing.
template <class Run>
sv::Outcome with_uniforms(const char* op, const std::optional<at::Generator>& generator,
                          int64_t count, Run run) {
  kernels();  // a bad SPEC_VERIFY_ISA raises here, before anything is drawn
  // Borrowed, not copied: the caller's generator (or the default one) outlives the call.
  const at::Generator& gen = generator.has_value() && generator->defined()
                                 ? *generator
                                 : at::detail::getDefaultCPUGenerator();
  TORCH_CHECK_VALUE(gen.device().is_cpu(), "spec_verify.", op, ": generator must be a CPU ",
                    "torch.Generator, got one on ", gen.device());
  auto* engine = gen.get<at::CPUGeneratorImpl>();
  std::lock_guard<std::mutex> lock(engine->mutex_);
  const at::mt19937 saved = engine->engine();
  c10::SmallVector<double, 16> uniforms(static_cast<size_t>(count));
  at::uniform_real_distribution<double> uniform(0.0, 1.0);  // not const: torch 2.10's operator() is not
  for (double& u : uniforms) u = uniform(engine);
  const sv::Outcome out = run(uniforms.data());
  if (out.error != sv::InputError::kNone) engine->set_engine(saved);
  return out;
}

}  // namespace

std::tuple<c10::SymInt, c10::SymInt> accept(const at::Tensor& target_probs,
                                            const std::optional<at::Tensor>& draft_probs,
                                            const at::Tensor& draft_tokens,
                                            const std::optional<at::Generator>& generator,
                                            c10::string_view method) {
  const char* op = "accept";
  const AcceptArgs a = checked_accept_args(op, target_probs, draft_probs, draft_tokens, method);
  const sv::Outcome out = with_uniforms(op, generator, a.k + 1, [&](const double* u) { return run_accept(a, u); });
  raise_if_bad(op, out);
  return result(out);
}

std::tuple<c10::SymInt, c10::SymInt> accept_with_uniforms(const at::Tensor& target_probs,
                                                          const std::optional<at::Tensor>& draft_probs,
                                                          const at::Tensor& draft_tokens,
                                                          const at::Tensor& uniforms,
                                                          c10::string_view method) {
  const char* op = "accept_with_uniforms";
  const AcceptArgs a = checked_accept_args(op, target_probs, draft_probs, draft_tokens, method);
  const at::Tensor u = checked_uniforms(op, uniforms, a.k + 1, "[K+1] = [" + std::to_string(a.k + 1) + "]");
  const double* ud = u.data_ptr<double>();
  const sv::Outcome out = run_accept(a, ud);
  raise_if_bad(op, out);
  return result(out);
}

// ---- logits in: Note [Warping] -----------------------------------------------------------
namespace {

sv::WarpParams checked_params(const char* op, double temperature, int64_t top_k, double top_p,
                              double min_p) {
  TORCH_CHECK_VALUE(temperature >= 0.0 && std::isfinite(temperature), "spec_verify.", op,
                    ": temperature must be a finite number >= 0 (0 = greedy), got ", temperature);
  sv::WarpParams p;
  p.temperature = static_cast<float>(temperature);
  TORCH_CHECK_VALUE(std::isfinite(p.temperature), "spec_verify.", op, ": temperature = ",
                    temperature, " overflows float32 (at most ", std::numeric_limits<float>::max(), ")");
  TORCH_CHECK_VALUE(temperature == 0.0 || p.temperature > 0.0f, "spec_verify.", op,
                    ": temperature = ", temperature, " is positive but rounds to 0 in float32; "
                    "use 0 for greedy or a larger temperature");
  TORCH_CHECK_VALUE(top_k >= 0, "spec_verify.", op, ": top_k must be >= 0 (0 = off), got ", top_k);
  TORCH_CHECK_VALUE(top_p > 0.0 && top_p <= 1.0, "spec_verify.", op,
                    ": top_p must be in (0, 1] (1 = off), got ", top_p);
  TORCH_CHECK_VALUE(min_p >= 0.0 && min_p < 1.0, "spec_verify.", op,
                    ": min_p must be in [0, 1) (0 = off), got ", min_p);
  p.top_k = top_k;
  p.top_p = top_p;
  p.min_p = min_p;
  return p;
}

// A logits tensor [V] or [R, V] with V >= 1, as [R, V] with unit stride along V.
at::Tensor checked_logits(const char* op, const char* name, const at::Tensor& t) {
  check_cpu(op, name, t);
  check_row_dtype(op, name, t);
  TORCH_CHECK_VALUE((t.dim() == 1 || t.dim() == 2) && t.size(-1) >= 1, "spec_verify.", op, ": ", name,
                    " must be [V] or [R, V] with V >= 1, got shape ", shape_of(t));
  const at::Tensor rows = t.dim() == 1 ? t.unsqueeze(0) : t;
  return rows.stride(1) == 1 ? rows : rows.contiguous();
}

struct WarpBuffers {
  std::vector<float> values, widened;
  std::vector<double> blocks;
  explicit WarpBuffers(int64_t vocab) : values(vocab), widened(vocab), blocks(sv::num_blocks(vocab)) {}
};

// One row of sample/sample_with_uniforms: the token, or the row's error.
sv::Outcome sample_row(const at::Tensor& rows, int64_t i, const sv::WarpParams& params, double u,
                       sv::DraftBound* bound = nullptr) {
  const int64_t vocab = rows.size(1);
  sv::Outcome out = sv::sample_round(kernels(), row_of(rows, i), vocab, params, u, bound);
  out.row = i;
  return out;
}

// A token for each checked row (checked_logits) into `tokens`: the first malformed row's
// error, or kNone. uniforms may be null at temperature 0.
// With bounds non-null, each row's Note [Draft bounds] too, as [R, 3] float64.
sv::Outcome sample_into(const at::Tensor& rows, const sv::WarpParams& params,
                        const double* uniforms, at::Tensor& tokens, at::Tensor* bounds = nullptr) {
  tokens = at::empty({rows.size(0)}, at::TensorOptions().dtype(at::kLong));
  int64_t* out = tokens.data_ptr<int64_t>();
  double* b = nullptr;
  if (bounds != nullptr) {
    *bounds = at::empty({rows.size(0), 3}, at::TensorOptions().dtype(at::kDouble));
    b = bounds->data_ptr<double>();
  }
  for (int64_t i = 0; i < rows.size(0); ++i) {
    sv::DraftBound bound;
    const sv::Outcome o = sample_row(rows, i, params, uniforms == nullptr ? 0.0 : uniforms[i],
                                     b == nullptr ? nullptr : &bound);
    if (o.error != sv::InputError::kNone) return o;
    out[i] = o.token;
    if (b != nullptr) {
      b[3 * i] = static_cast<double>(bound.weight);
      b[3 * i + 1] = bound.lo;
      b[3 * i + 2] = bound.hi;
    }
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

struct LogitsArgs {
  at::Tensor target, draft;  // draft undefined: one-hot drafts (or greedy)
  TokenVec tokens;
  int64_t k, vocab;
  bool greedy;
  sv::Method method;
  std::vector<sv::DraftBound> bounds;  // Note [Draft bounds]: k of them, or none
};

// draft_bounds as `sample(..., return_bounds=True)` returns them for K draft rows: float64
// [K, 3] rows (weight, lo, hi) with weight a float32 value >= 0 and 0 < lo <= hi finite.
std::vector<sv::DraftBound> checked_draft_bounds(const char* op, const at::Tensor& t, int64_t k,
                                                 const char* rows = "K") {
  check_cpu(op, "draft_bounds", t);
  TORCH_CHECK_TYPE(t.scalar_type() == at::kDouble, "spec_verify.", op,
                   ": draft_bounds must have dtype torch.float64, got ", dtype_name(t.scalar_type()));
  TORCH_CHECK_VALUE(t.dim() == 2 && t.size(0) == k && t.size(1) == 3, "spec_verify.", op,
                    ": draft_bounds must have shape [", rows, ", 3] = [", k, ", 3], got ", shape_of(t));
  const at::Tensor c = t.contiguous();
  const double* d = c.data_ptr<double>();
  std::vector<sv::DraftBound> out(k);
  for (int64_t i = 0; i < k; ++i) {
    const double w = d[3 * i], lo = d[3 * i + 1], hi = d[3 * i + 2];
    TORCH_CHECK_VALUE(w >= 0.0 && w <= 1.0 && static_cast<double>(static_cast<float>(w)) == w && lo > 0.0 &&
                          lo <= hi && std::isfinite(hi),
                      "spec_verify.", op, ": draft_bounds[", i, "] = (", w, ", ", lo, ", ", hi,
                      ") is not (a float32 weight in [0, 1], 0 < lo <= hi finite): pass the bounds "
                      "`sample(..., return_bounds=True)` returned");
    out[i] = sv::DraftBound{static_cast<float>(w), lo, hi};
  }
  return out;
}

LogitsArgs checked_logits_args(const char* op, const at::Tensor& target_logits,
                               const std::optional<at::Tensor>& draft_logits,
                               const at::Tensor& draft_tokens, const sv::WarpParams& params,
                               c10::string_view method, const std::optional<at::Tensor>& draft_bounds) {
  LogitsArgs a;
  a.method = checked_method(op, method);
  a.k = checked_k(op, target_logits, "target_logits");
  a.vocab = target_logits.size(1);
  a.greedy = params.temperature == 0.0f;
  a.target = checked_rows(op, "target_logits", target_logits, a.k + 1, a.vocab, "[K+1, V]");
  if (draft_logits.has_value() && draft_logits->defined()) {  // checked at temperature 0 too, unread
    a.draft = checked_rows(op, "draft_logits", *draft_logits, a.k, a.vocab, "[K, V]");
  }
  a.tokens = checked_tokens(op, draft_tokens, a.k, a.vocab, "target_logits");
  if (draft_bounds.has_value() && draft_bounds->defined()) {
    TORCH_CHECK_VALUE(draft_logits.has_value() && draft_logits->defined(), "spec_verify.", op,
                      ": draft_bounds describe draft rows: pass draft_logits too (one-hot drafts have none)");
    a.bounds = checked_draft_bounds(op, *draft_bounds, a.k);
  }
  return a;
}

sv::Outcome run_accept_logits(const LogitsArgs& a, const double* uniforms, const sv::WarpParams& params) {
  if (a.greedy) return sv::verify_greedy_round(kernels(), rows_of(a.target), a.tokens.data(), a.k, a.vocab, true);
  return sv::accept_logits_round(kernels(), rows_of(a.target), draft_rows(a.draft), a.tokens.data(),
                                 uniforms, a.k, a.vocab, params, a.method,
                                 a.bounds.empty() ? nullptr : a.bounds.data());
}

}  // namespace

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
                  double min_p, const std::optional<at::Generator>& generator) {
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

at::Tensor sample_with_uniforms(const at::Tensor& logits, const at::Tensor& uniforms,
                                double temperature, int64_t top_k, double top_p, double min_p) {
  const char* op = "sample_with_uniforms";
  const sv::WarpParams params = checked_params(op, temperature, top_k, top_p, min_p);
  const at::Tensor rows = checked_logits(op, "logits", logits);
  const int64_t n = rows.size(0);
  const at::Tensor u = row_uniforms(op, logits, uniforms, n);
  at::Tensor tokens;
  const sv::Outcome out = sample_into(rows, params, u.data_ptr<double>(), tokens);
  return sampled(op, logits, out, tokens);
}

std::tuple<at::Tensor, at::Tensor> sample_with_bounds(const at::Tensor& logits,
                                                      const std::optional<at::Tensor>& uniforms,
                                                      double temperature, int64_t top_k, double top_p,
                                                      double min_p, const std::optional<at::Generator>& generator) {
  const bool given = uniforms.has_value() && uniforms->defined();
  const char* op = given ? "sample_with_uniforms" : "sample";
  const sv::WarpParams params = checked_params(op, temperature, top_k, top_p, min_p);
  const at::Tensor rows = checked_logits(op, "logits", logits);
  const int64_t n = rows.size(0);
  at::Tensor tokens, bounds;
  sv::Outcome out;
  if (given) {
    const at::Tensor u = row_uniforms(op, logits, *uniforms, n);
    out = sample_into(rows, params, u.data_ptr<double>(), tokens, &bounds);
  } else {
    out = params.temperature == 0.0f
              ? sample_into(rows, params, nullptr, tokens, &bounds)
              : with_uniforms(op, generator, n, [&](const double* u) { return sample_into(rows, params, u, tokens, &bounds); });
  }
  at::Tensor t = sampled(op, logits, out, tokens);
  return {t, logits.dim() == 1 ? bounds.squeeze(0) : bounds};
}

std::tuple<c10::SymInt, c10::SymInt> accept_logits(const at::Tensor& target_logits,
                                                   const std::optional<at::Tensor>& draft_logits,
                                                   const at::Tensor& draft_tokens, double temperature,
                                                   int64_t top_k, double top_p, double min_p,
                                                   const std::optional<at::Generator>& generator,
                                                   c10::string_view method,
                                                   const std::optional<at::Tensor>& draft_bounds) {
  const char* op = "accept_logits";
  const sv::WarpParams params = checked_params(op, temperature, top_k, top_p, min_p);
  const LogitsArgs a =
      checked_logits_args(op, target_logits, draft_logits, draft_tokens, params, method, draft_bounds);
  const sv::Outcome out =
      a.greedy ? run_accept_logits(a, nullptr, params)
               : with_uniforms(op, generator, a.k + 1, [&](const double* u) { return run_accept_logits(a, u, params); });
  raise_if_bad(op, out, kLogits);
  return result(out);
}

std::tuple<c10::SymInt, c10::SymInt> accept_logits_with_uniforms(
    const at::Tensor& target_logits, const std::optional<at::Tensor>& draft_logits,
    const at::Tensor& draft_tokens, const at::Tensor& uniforms, double temperature, int64_t top_k,
    double top_p, double min_p, c10::string_view method, const std::optional<at::Tensor>& draft_bounds) {
  const char* op = "accept_logits_with_uniforms";
  const sv::WarpParams params = checked_params(op, temperature, top_k, top_p, min_p);
  const LogitsArgs a =
      checked_logits_args(op, target_logits, draft_logits, draft_tokens, params, method, draft_bounds);
  const at::Tensor u = checked_uniforms(op, uniforms, a.k + 1, "[K+1] = [" + std::to_string(a.k + 1) + "]");
  const sv::Outcome out = run_accept_logits(a, u.data_ptr<double>(), params);
  raise_if_bad(op, out, kLogits);
  return result(out);
}

// ---- trees: Note [Tree verification] ------------------------------------------------------
namespace {

struct TreeArgs {
  at::Tensor target, draft;  // draft undefined: deterministic children
  std::vector<int64_t> tokens, parents;
  int64_t n, vocab;
};

// A 1-D integer tensor of n values, as int64.
std::vector<int64_t> checked_ints(const char* op, const char* name, const at::Tensor& t, int64_t n,
                                  const char* rows_name) {
  check_cpu(op, name, t);
  TORCH_CHECK_TYPE(at::isIntegralType(t.scalar_type(), /*includeBool=*/false), "spec_verify.", op, ": ", name,
                   " must have an integer dtype, got ", dtype_name(t.scalar_type()));
  TORCH_CHECK_VALUE(t.dim() == 1 && t.size(0) == n, "spec_verify.", op, ": ", name, " must have shape [N] = [", n,
                    "] (N = ", rows_name, ".shape[0] - 1), got ", shape_of(t));
  if (t.scalar_type() == at::kLong) {  // the usual case: read in place, at its stride
    const int64_t* values = t.const_data_ptr<int64_t>();
    const int64_t stride = t.stride(0);
    std::vector<int64_t> out(static_cast<size_t>(n));
    for (int64_t j = 0; j < n; ++j) out[j] = values[j * stride];
    return out;
  }
  const at::Tensor values = t.to(at::kLong).contiguous();
  return std::vector<int64_t>(values.data_ptr<int64_t>(), values.data_ptr<int64_t>() + n);
}

// The same from a list of ints (the _ints ops: a Python list of parents reaches the op
// without a tensor made of it).
std::vector<int64_t> checked_ints(const char* op, const char* name, at::IntArrayRef list, int64_t n,
                                  const char* rows_name) {
  TORCH_CHECK_VALUE(static_cast<int64_t>(list.size()) == n, "spec_verify.", op, ": ", name, " must have shape [N] = [",
                    n, "] (N = ", rows_name, ".shape[0] - 1), got [", list.size(), "]");
  return std::vector<int64_t>(list.begin(), list.end());
}

// The tree: rows [N+1, V], tokens in [0, V), parents[j] in [-1, j), and with no draft rows
// (deterministic children, sampled) distinct tokens among siblings. Parents: a tensor or a
// list of ints.
template <class Parents>
TreeArgs checked_tree(const char* op, const RowNames& names, const at::Tensor& target,
                      const std::optional<at::Tensor>& draft, const at::Tensor& tokens, const Parents& parents,
                      bool greedy) {
  TreeArgs a;
  check_cpu(op, names.target, target);
  TORCH_CHECK_VALUE(target.dim() == 2 && target.size(0) >= 1 && target.size(1) >= 1, "spec_verify.", op, ": ",
                    names.target, " must be 2-D [N+1, V] with N >= 0 and V >= 1, got shape ", shape_of(target));
  a.n = target.size(0) - 1;
  a.vocab = target.size(1);
  a.target = checked_rows(op, names.target, target, a.n + 1, a.vocab, "[N+1, V]");
  if (draft.has_value() && draft->defined())  // checked when greedy too, unread
    a.draft = checked_rows(op, names.draft, *draft, a.n + 1, a.vocab, "[N+1, V]");
  a.tokens = checked_ints(op, "tokens", tokens, a.n, names.target);
  a.parents = checked_ints(op, "parents", parents, a.n, names.target);
  for (int64_t j = 0; j < a.n; ++j) {
    TORCH_CHECK_VALUE(a.tokens[j] >= 0 && a.tokens[j] < a.vocab, "spec_verify.", op, ": tokens[", j, "] = ",
                      a.tokens[j], " is outside the vocabulary [0, ", a.vocab, ")");
    TORCH_CHECK_VALUE(a.parents[j] >= -1 && a.parents[j] < j, "spec_verify.", op, ": parents[", j, "] = ",
                      a.parents[j], " must be in [-1, ", j, "): nodes in topological order, -1 for a child of "
                      "the root");
  }
  if (!greedy && !a.draft.defined()) {
    // Deterministic children are candidates, not draws: a repeated sibling token has no rule.
    std::vector<std::pair<int64_t, int64_t>> seen;  // (parent, token), sorted
    for (int64_t j = 0; j < a.n; ++j) seen.emplace_back(a.parents[j], a.tokens[j]);
    std::vector<std::pair<int64_t, int64_t>> sorted = seen;
    std::sort(sorted.begin(), sorted.end());
    const auto dup = std::adjacent_find(sorted.begin(), sorted.end());
    if (dup != sorted.end()) {
      int64_t first = -1, second = -1;
      for (int64_t j = 0; j < a.n; ++j) {
        if (seen[j] != *dup) continue;
        if (first < 0) first = j;
        else if (second < 0) second = j;
      }
      TORCH_CHECK_VALUE(false, "spec_verify.", op, ": tokens[", second, "] = ", a.tokens[second],
                        " repeats its sibling tokens[", first, "]; without draft rows the children of a node "
                        "must hold distinct tokens (pass ", names.draft, " for children drawn from the draft)");
    }
  }
  return a;
}

// The result: the path as an int64 tensor, and the emitted token.
std::tuple<at::Tensor, c10::SymInt> tree_result(const sv::Outcome& out, const std::vector<int64_t>& path) {
  at::Tensor p = at::empty({out.n_accepted}, at::TensorOptions().dtype(at::kLong));
  std::copy(path.begin(), path.begin() + out.n_accepted, p.data_ptr<int64_t>());
  return {p, c10::SymInt(out.token)};
}

sv::Outcome run_tree(const TreeArgs& a, const double* uniforms, const sv::WarpParams* params,
                     std::vector<int64_t>* path) {
  path->assign(static_cast<size_t>(a.n) + 1, -1);
  return sv::tree_round(kernels(), rows_of(a.target), draft_rows(a.draft), a.tokens.data(), a.parents.data(), a.n,
                        uniforms, a.vocab, params, path->data());
}

}  // namespace

namespace {

template <class Parents>
std::tuple<at::Tensor, c10::SymInt> tree_logits(const char* op, const at::Tensor& target_logits,
                                                const at::Tensor& tokens, const Parents& parents,
                                                const std::optional<at::Tensor>& draft_logits, double temperature,
                                                int64_t top_k, double top_p, double min_p,
                                                const std::optional<at::Generator>& generator) {
  const sv::WarpParams params = checked_params(op, temperature, top_k, top_p, min_p);
  const bool greedy = params.temperature == 0.0f;
  const TreeArgs a = checked_tree(op, kLogits, target_logits, draft_logits, tokens, parents, greedy);
  std::vector<int64_t> path;
  const sv::Outcome out = greedy ? run_tree(a, nullptr, &params, &path)
                                 : with_uniforms(op, generator, a.n + 1,
                                                 [&](const double* u) { return run_tree(a, u, &params, &path); });
  raise_if_bad(op, out, kLogits);
  return tree_result(out, path);
}

template <class Parents>
std::tuple<at::Tensor, c10::SymInt> tree_logits_with_uniforms(const char* op, const at::Tensor& target_logits,
                                                              const at::Tensor& tokens, const Parents& parents,
                                                              const std::optional<at::Tensor>& draft_logits,
                                                              const at::Tensor& uniforms, double temperature,
                                                              int64_t top_k, double top_p, double min_p) {
  const sv::WarpParams params = checked_params(op, temperature, top_k, top_p, min_p);
  const bool greedy = params.temperature == 0.0f;
  const TreeArgs a = checked_tree(op, kLogits, target_logits, draft_logits, tokens, parents, greedy);
  const at::Tensor u = checked_uniforms(op, uniforms, a.n + 1, "[N+1] = [" + std::to_string(a.n + 1) + "]");
  std::vector<int64_t> path;
  const sv::Outcome out = run_tree(a, u.data_ptr<double>(), &params, &path);
  raise_if_bad(op, out, kLogits);
  return tree_result(out, path);
}

template <class Parents>
std::tuple<at::Tensor, c10::SymInt> tree_probs(const char* op, const at::Tensor& target_probs,
                                               const at::Tensor& tokens, const Parents& parents,
                                               const std::optional<at::Tensor>& draft_probs, bool greedy,
                                               const std::optional<at::Generator>& generator) {
  const TreeArgs a = checked_tree(op, kProbs, target_probs, draft_probs, tokens, parents, greedy);
  std::vector<int64_t> path;
  const sv::Outcome out = greedy ? run_tree(a, nullptr, nullptr, &path)
                                 : with_uniforms(op, generator, a.n + 1,
                                                 [&](const double* u) { return run_tree(a, u, nullptr, &path); });
  raise_if_bad(op, out, kProbs);
  return tree_result(out, path);
}

template <class Parents>
std::tuple<at::Tensor, c10::SymInt> tree_probs_with_uniforms(const char* op, const at::Tensor& target_probs,
                                                             const at::Tensor& tokens, const Parents& parents,
                                                             const std::optional<at::Tensor>& draft_probs,
                                                             const at::Tensor& uniforms, bool greedy) {
  const TreeArgs a = checked_tree(op, kProbs, target_probs, draft_probs, tokens, parents, greedy);
  const at::Tensor u = checked_uniforms(op, uniforms, a.n + 1, "[N+1] = [" + std::to_string(a.n + 1) + "]");
  std::vector<int64_t> path;
  const sv::Outcome out = run_tree(a, greedy ? nullptr : u.data_ptr<double>(), nullptr, &path);
  raise_if_bad(op, out, kProbs);
  return tree_result(out, path);
}

}  // namespace

std::tuple<at::Tensor, c10::SymInt> verify_tree(const at::Tensor& target_logits, const at::Tensor& tokens,
                                                const at::Tensor& parents,
                                                const std::optional<at::Tensor>& draft_logits, double temperature,
                                                int64_t top_k, double top_p, double min_p,
                                                const std::optional<at::Generator>& generator) {
  return tree_logits("verify_tree", target_logits, tokens, parents, draft_logits, temperature, top_k, top_p, min_p,
                     generator);
}

std::tuple<at::Tensor, c10::SymInt> verify_tree_ints(const at::Tensor& target_logits, const at::Tensor& tokens,
                                                     at::IntArrayRef parents,
                                                     const std::optional<at::Tensor>& draft_logits,
                                                     double temperature, int64_t top_k, double top_p, double min_p,
                                                     const std::optional<at::Generator>& generator) {
  return tree_logits("verify_tree", target_logits, tokens, parents, draft_logits, temperature, top_k, top_p, min_p,
                     generator);
}

std::tuple<at::Tensor, c10::SymInt> verify_tree_with_uniforms(const at::Tensor& target_logits,
                                                              const at::Tensor& tokens, const at::Tensor& parents,
                                                              const std::optional<at::Tensor>& draft_logits,
                                                              const at::Tensor& uniforms, double temperature,
                                                              int64_t top_k, double top_p, double min_p) {
  return tree_logits_with_uniforms("verify_tree_with_uniforms", target_logits, tokens, parents, draft_logits,
                                   uniforms, temperature, top_k, top_p, min_p);
}

std::tuple<at::Tensor, c10::SymInt> verify_tree_with_uniforms_ints(const at::Tensor& target_logits,
                                                                   const at::Tensor& tokens, at::IntArrayRef parents,
                                                                   const std::optional<at::Tensor>& draft_logits,
                                                                   const at::Tensor& uniforms, double temperature,
                                                                   int64_t top_k, double top_p, double min_p) {
  return tree_logits_with_uniforms("verify_tree_with_uniforms", target_logits, tokens, parents, draft_logits,
                                   uniforms, temperature, top_k, top_p, min_p);
}

std::tuple<at::Tensor, c10::SymInt> verify_tree_probs(const at::Tensor& target_probs, const at::Tensor& tokens,
                                                      const at::Tensor& parents,
                                                      const std::optional<at::Tensor>& draft_probs, bool greedy,
                                                      const std::optional<at::Generator>& generator) {
  return tree_probs("verify_tree_probs", target_probs, tokens, parents, draft_probs, greedy, generator);
}

std::tuple<at::Tensor, c10::SymInt> verify_tree_probs_ints(const at::Tensor& target_probs, const at::Tensor& tokens,
                                                           at::IntArrayRef parents,
                                                           const std::optional<at::Tensor>& draft_probs, bool greedy,
                                                           const std::optional<at::Generator>& generator) {
  return tree_probs("verify_tree_probs", target_probs, tokens, parents, draft_probs, greedy, generator);
}

std::tuple<at::Tensor, c10::SymInt> verify_tree_probs_with_uniforms(const at::Tensor& target_probs,
                                                                    const at::Tensor& tokens,
                                                                    const at::Tensor& parents,
                                                                    const std::optional<at::Tensor>& draft_probs,
                                                                    const at::Tensor& uniforms, bool greedy) {
  return tree_probs_with_uniforms("verify_tree_probs_with_uniforms", target_probs, tokens, parents, draft_probs,
                                  uniforms, greedy);
}

std::tuple<at::Tensor, c10::SymInt> verify_tree_probs_with_uniforms_ints(const at::Tensor& target_probs,
                                                                         const at::Tensor& tokens,
                                                                         at::IntArrayRef parents,
                                                                         const std::optional<at::Tensor>& draft_probs,
                                                                         const at::Tensor& uniforms, bool greedy) {
  return tree_probs_with_uniforms("verify_tree_probs_with_uniforms", target_probs, tokens, parents, draft_probs,
                                  uniforms, greedy);
}

// ---- batches: Note [Ragged batches] ------------------------------------------------------
namespace {

// A batch's tensors, checked, and the per-sequence choices, owned here; view() is what the
// core reads.
struct BatchArgs {
  at::Tensor target, draft;  // draft undefined: one-hot drafts
  std::vector<int64_t> tokens, cu;
  std::vector<sv::WarpParams> params;  // the logits form
  std::unique_ptr<bool[]> greedy;      // the probabilities form (null: no greedy sequence)
  std::vector<sv::DraftBound> bounds;  // the logits form: N draft bounds, or none
  int64_t batch = 0, vocab = 0, width = 1;
  sv::Method method = sv::Method::kToken;

  sv::Batch view() const {
    return sv::Batch{rows_of(target), draft_rows(draft), tokens.data(), cu.data(), batch, vocab, method,
                     params.empty() ? nullptr : params.data(), greedy.get(),
                     bounds.empty() ? nullptr : bounds.data()};
  }
};

// The values of a 1-D tensor as Out, read in place for the usual dtypes (a conversion to a
// new tensor costs more than a small batch's whole round), else through a converted copy.
template <class Out>
std::vector<Out> values_1d(const at::Tensor& t) {
  std::vector<Out> out(static_cast<size_t>(t.size(0)));
  const auto read = [&](const auto* data) {
    for (int64_t i = 0; i < t.size(0); ++i) out[i] = static_cast<Out>(data[i * t.stride(0)]);
  };
  switch (t.scalar_type()) {
    case at::kLong: read(t.const_data_ptr<int64_t>()); break;
    case at::kInt: read(t.const_data_ptr<int32_t>()); break;
    case at::kFloat: read(t.const_data_ptr<float>()); break;
    case at::kDouble: read(t.const_data_ptr<double>()); break;
    default: {
      const bool integral = at::isIntegralType(t.scalar_type(), false);
      const at::Tensor c = t.to(integral ? at::kLong : at::kDouble).contiguous();
      if (integral) read(c.const_data_ptr<int64_t>());
      else read(c.const_data_ptr<double>());
    }
  }
  return out;
}

// A 1-D tensor of an integer dtype (not bool), as int64 values.
std::vector<int64_t> int_values(const char* op, const char* name, const at::Tensor& t, const char* expected) {
  check_cpu(op, name, t);
  TORCH_CHECK_TYPE(at::isIntegralType(t.scalar_type(), /*includeBool=*/false), "spec_verify.", op, ": ", name,
                   " must have an integer dtype, got ", dtype_name(t.scalar_type()));
  TORCH_CHECK_VALUE(t.dim() == 1, "spec_verify.", op, ": ", name, " must be 1-D ", expected, ", got shape ",
                    shape_of(t));
  return values_1d<int64_t>(t);
}

// Shapes, the running totals, the rows and the tokens of a batch (names: the rows' arguments).
void check_batch_layout(const char* op, const RowNames& names, const at::Tensor& target,
                        const at::Tensor& draft_tokens, const at::Tensor& cu_num_draft_tokens,
                        const std::optional<at::Tensor>& draft, c10::string_view method, BatchArgs& a) {
  a.method = checked_method(op, method);
  a.cu = int_values(op, "cu_num_draft_tokens", cu_num_draft_tokens, "[B]");
  a.batch = static_cast<int64_t>(a.cu.size());
  check_cpu(op, "draft_tokens", draft_tokens);
  TORCH_CHECK_VALUE(draft_tokens.dim() == 1, "spec_verify.", op, ": draft_tokens must be 1-D [N], got shape ",
                    shape_of(draft_tokens));
  const int64_t n = draft_tokens.size(0);
  int64_t max_k = 0;
  for (int64_t b = 0; b < a.batch; ++b) {
    const int64_t before = b > 0 ? a.cu[b - 1] : 0;
    TORCH_CHECK_VALUE(b > 0 || a.cu[0] >= 0, "spec_verify.", op, ": cu_num_draft_tokens[0] = ", a.cu[0],
                      " is negative; cu_num_draft_tokens holds running totals of the draft counts, without a "
                      "leading zero");
    TORCH_CHECK_VALUE(a.cu[b] >= before, "spec_verify.", op, ": cu_num_draft_tokens[", b, "] = ", a.cu[b],
                      " is less than cu_num_draft_tokens[", b - 1, "] = ", before,
                      "; running totals of the draft counts never decrease");
    max_k = std::max(max_k, a.cu[b] - before);
  }
  const int64_t last = a.batch > 0 ? a.cu[a.batch - 1] : 0;
  TORCH_CHECK_VALUE(last == n, "spec_verify.", op, ": cu_num_draft_tokens ends at ", last,
                    a.batch > 0 ? "" : " (B = 0)", " but draft_tokens holds N = ", n,
                    " tokens; the last running total is the number of draft tokens");
  a.width = max_k + 1;
  check_cpu(op, names.target, target);
  TORCH_CHECK_VALUE(target.dim() == 2 && target.size(1) >= 1, "spec_verify.", op, ": ", names.target,
                    " must be 2-D [N + B, V] with V >= 1, got shape ", shape_of(target));
  a.vocab = target.size(1);
  TORCH_CHECK_VALUE(target.size(0) == n + a.batch, "spec_verify.", op, ": ", names.target,
                    " must have N + B = ", n + a.batch, " rows (N = ", n, " draft tokens, B = ", a.batch,
                    " sequences: K_b + 1 rows for sequence b), got shape ", shape_of(target));
  a.target = checked_rows(op, names.target, target, n + a.batch, a.vocab, "[N + B, V]");
  if (draft.has_value() && draft->defined()) {
    check_cpu(op, names.draft, *draft);
    TORCH_CHECK_VALUE(draft->dim() != 2 || draft->size(0) == n, "spec_verify.", op, ": ", names.draft,
                      " must have N = ", n, " rows, one per draft token, got shape ", shape_of(*draft));
    a.draft = checked_rows(op, names.draft, *draft, n, a.vocab, "[N, V]");
  }
  a.tokens = checked_tokens<std::vector<int64_t>>(op, draft_tokens, n, a.vocab);
}

// A per-sequence parameter tensor [B] (None: `fallback` for every sequence) as doubles;
// `integer`: an integer dtype (top_k), else any real dtype but bool.
std::vector<double> batch_param(const char* op, const char* name, const std::optional<at::Tensor>& t,
                                int64_t batch, double fallback, bool integer) {
  if (!t.has_value() || !t->defined()) return std::vector<double>(static_cast<size_t>(batch), fallback);
  check_cpu(op, name, *t);
  const at::ScalarType dtype = t->scalar_type();
  TORCH_CHECK_TYPE(integer ? at::isIntegralType(dtype, false)
                           : (at::isFloatingType(dtype) || at::isIntegralType(dtype, false)),
                   "spec_verify.", op, ": ", name, " must have ", integer ? "an integer" : "a real (not bool)",
                   " dtype, got ", dtype_name(dtype));
  TORCH_CHECK_VALUE(t->dim() == 1 && t->size(0) == batch, "spec_verify.", op, ": ", name,
                    " must have shape [B] = [", batch, "], one value per sequence, got ", shape_of(*t));
  return values_1d<double>(*t);
}

// The per-sequence warping parameters, each checked by checked_params's rules; a message
// names the sequence.
void check_batch_params(const char* op, const std::optional<at::Tensor>& temperature,
                        const std::optional<at::Tensor>& top_k, const std::optional<at::Tensor>& top_p,
                        const std::optional<at::Tensor>& min_p, BatchArgs& a) {
  const std::vector<double> t = batch_param(op, "temperature", temperature, a.batch, 1.0, false);
  const std::vector<double> p = batch_param(op, "top_p", top_p, a.batch, 1.0, false);
  const std::vector<double> m = batch_param(op, "min_p", min_p, a.batch, 0.0, false);
  std::vector<int64_t> k(static_cast<size_t>(a.batch), 0);
  if (top_k.has_value() && top_k->defined()) {
    batch_param(op, "top_k", top_k, a.batch, 0.0, true);  // dtype and shape
    k = values_1d<int64_t>(*top_k);
  }
  a.params.resize(static_cast<size_t>(a.batch));
  for (int64_t b = 0; b < a.batch; ++b) {
    try {
      a.params[b] = checked_params(op, t[b], k[b], p[b], m[b]);
    } catch (const c10::ValueError& e) {
      // "spec_verify.<op>: <what>" becomes "spec_verify.<op>: sequence b: <what>".
      const std::string prefix = std::string("spec_verify.") + op + ": ";
      const std::string& what = e.msg();
      TORCH_CHECK_VALUE(false, prefix, "sequence ", b, ": ",
                        what.compare(0, prefix.size(), prefix) == 0 ? what.substr(prefix.size()) : what);
    }
  }
}

// Sequence b's generator: generators[b] when given and not None, else `generator`, else the
// default CPU generator.
at::Generator sequence_generator(const std::optional<at::Generator>& generator,
                                 const std::optional<c10::List<std::optional<at::Generator>>>& generators, int64_t b) {
  if (generators.has_value()) {
    const std::optional<at::Generator> g = generators->get(b);
    if (g.has_value() && g->defined()) return *g;
  }
  return generator.has_value() && generator->defined() ? *generator : at::detail::getDefaultCPUGenerator();
}

void check_generators(const char* op, const std::optional<at::Generator>& generator,
                      const std::optional<c10::List<std::optional<at::Generator>>>& generators, int64_t batch) {
  if (generator.has_value() && generator->defined()) {
    TORCH_CHECK_VALUE(generator->device().is_cpu(), "spec_verify.", op, ": generator must be a CPU ",
                      "torch.Generator, got one on ", generator->device());
  }
  if (!generators.has_value()) return;
  TORCH_CHECK_VALUE(static_cast<int64_t>(generators->size()) == batch, "spec_verify.", op,
                    ": generators must hold B = ", batch, " entries (one per sequence, None for `generator`), got ",
                    generators->size());
  for (int64_t b = 0; b < batch; ++b) {
    const std::optional<at::Generator> g = generators->get(b);
    TORCH_CHECK_VALUE(!g.has_value() || !g->defined() || g->device().is_cpu(), "spec_verify.", op,
                      ": generators[", b, "] must be a CPU torch.Generator, got one on ", g->device());
  }
}

// Weighted elements (sv::batch_cost) worth waking a thread for: about eight argmax rows at
// V = 32000, some 20 us, against a few us to wake a parked pool thread.
constexpr int64_t kCostPerThread = int64_t{1} << 18;

// The batch's sequences on as many threads as torch's setting allows (torch.set_num_threads)
// and the batch's cost is worth, each claiming the next sequence from a shared counter
// (sv::run_batch_threads; Note [Batch threads] in batch.cpp). Inside one of torch's parallel
// regions, one thread. Returns the failure of the lowest sequence, the one a single thread
// would meet first.
sv::BatchFailure run_batch_threads(const sv::KernelTable& kt, const sv::Batch& in, const double* uniforms,
                                   const int64_t* uniform_begin, int64_t width, int64_t* out, int64_t* accepted) {
  int64_t threads = at::in_parallel_region() ? 1 : std::min<int64_t>(at::get_num_threads(), in.batch);
  if (threads > 1) threads = std::min(threads, std::max<int64_t>(1, sv::batch_cost(in) / kCostPerThread));
  return sv::run_batch_threads(kt, in, uniforms, uniform_begin, width, out, accepted, threads);
}

// Draws every sampled sequence's K_b + 1 uniforms, in batch order, each from its generator
// (sequence_generator) as torch.rand(K_b + 1, dtype=torch.float64, generator=g) would, then
// runs the batch. Every generator involved is locked for the call (in address order, so two
// calls never wait on each other's locks) and, if a malformed row turns up, put back as it
// was before the call. Greedy sequences draw nothing.
sv::BatchFailure draw_and_run(const char* op, const BatchArgs& a, const std::optional<at::Generator>& generator,
                              const std::optional<c10::List<std::optional<at::Generator>>>& generators, int64_t* out,
                              int64_t* accepted) {
  const sv::KernelTable& kt = kernels();  // a bad SPEC_VERIFY_ISA raises here, before anything is drawn
  const sv::Batch in = a.view();
  std::vector<int64_t> uniform_begin(static_cast<size_t>(a.batch));
  const int64_t count = sv::batch_uniform_offsets(in, uniform_begin.data());
  if (count == 0) return run_batch_threads(kt, in, nullptr, uniform_begin.data(), a.width, out, accepted);

  c10::SmallVector<at::Generator, 4> gens;  // per sampled sequence, in batch order
  c10::SmallVector<at::Generator, 4> unique;
  for (int64_t b = 0; b < a.batch; ++b) {
    if (uniform_begin[b] < 0) continue;
    gens.push_back(sequence_generator(generator, generators, b));
    if (std::none_of(unique.begin(), unique.end(), [&](const at::Generator& g) { return g == gens.back(); })) {
      unique.push_back(gens.back());
    }
  }
  std::sort(unique.begin(), unique.end(), [](const at::Generator& x, const at::Generator& y) {
    return x.unsafeGetGeneratorImpl() < y.unsafeGetGeneratorImpl();
  });
  std::vector<std::unique_lock<std::mutex>> locks;
  std::vector<at::mt19937> saved;
  locks.reserve(unique.size());
  saved.reserve(unique.size());
  for (at::Generator& g : unique) {
    locks.emplace_back(g.mutex());
    saved.push_back(at::check_generator<at::CPUGeneratorImpl>(g)->engine());
  }
  std::vector<double> uniforms(static_cast<size_t>(count));
  at::uniform_real_distribution<double> uniform(0.0, 1.0);  // not const: torch 2.10's operator() is not
  size_t next = 0;
  for (int64_t b = 0; b < a.batch; ++b) {
    if (uniform_begin[b] < 0) continue;
    auto* engine = at::check_generator<at::CPUGeneratorImpl>(gens[next++]);
    double* u = uniforms.data() + uniform_begin[b];
    for (int64_t j = 0; j <= sv::batch_k(in, b); ++j) u[j] = uniform(engine);
  }
  const sv::BatchFailure failure = run_batch_threads(kt, in, uniforms.data(), uniform_begin.data(), a.width, out, accepted);
  if (failure.sequence >= 0) {
    for (size_t i = 0; i < unique.size(); ++i) at::check_generator<at::CPUGeneratorImpl>(unique[i])->set_engine(saved[i]);
  }
  return failure;
}

// Runs a checked batch: (output_token_ids [B, max K_b + 1], num_accepted [B]), or raises
// naming the sequence and the row.
std::tuple<at::Tensor, at::Tensor> batch_result(const char* op, const RowNames& names, const BatchArgs& a,
                                                const std::optional<at::Generator>& generator,
                                                const std::optional<c10::List<std::optional<at::Generator>>>& generators) {
  check_generators(op, generator, generators, a.batch);
  // at::detail::empty_cpu: the allocation without a trip through the dispatcher, which
  // would cost a small batch more than its rows.
  const auto options = at::TensorOptions().dtype(at::kLong);
  at::Tensor out = at::detail::empty_cpu({a.batch, a.width}, options);
  at::Tensor accepted = at::detail::empty_cpu({a.batch}, options);
  const sv::BatchFailure failure = draw_and_run(op, a, generator, generators, out.data_ptr<int64_t>(),
                                                accepted.data_ptr<int64_t>());
  if (failure.sequence >= 0) {
    const std::string where = std::string(op) + ": sequence " + std::to_string(failure.sequence);
    raise_if_bad(where.c_str(), failure.outcome, names);
  }
  return {out, accepted};
}

}  // namespace

std::tuple<at::Tensor, at::Tensor> verify_batch(
    const at::Tensor& target_logits, const at::Tensor& draft_tokens, const at::Tensor& cu_num_draft_tokens,
    const std::optional<at::Tensor>& draft_logits, const std::optional<at::Tensor>& temperature,
    const std::optional<at::Tensor>& top_k, const std::optional<at::Tensor>& top_p,
    const std::optional<at::Tensor>& min_p, c10::string_view method, const std::optional<at::Generator>& generator,
    const std::optional<c10::List<std::optional<at::Generator>>>& generators,
    const std::optional<at::Tensor>& draft_bounds) {
  const char* op = "verify_batch";
  BatchArgs a;
  check_batch_layout(op, kLogits, target_logits, draft_tokens, cu_num_draft_tokens, draft_logits, method, a);
  check_batch_params(op, temperature, top_k, top_p, min_p, a);
  if (draft_bounds.has_value() && draft_bounds->defined()) {
    TORCH_CHECK_VALUE(a.draft.defined(), "spec_verify.", op,
                      ": draft_bounds describe draft rows: pass draft_logits too (one-hot drafts have none)");
    a.bounds = checked_draft_bounds(op, *draft_bounds, static_cast<int64_t>(a.tokens.size()), "N");
  }
  return batch_result(op, kLogits, a, generator, generators);
}

std::tuple<at::Tensor, at::Tensor> verify_batch_probs(
    const at::Tensor& target_probs, const at::Tensor& draft_tokens, const at::Tensor& cu_num_draft_tokens,
    const std::optional<at::Tensor>& draft_probs, const std::optional<at::Tensor>& greedy,
    c10::string_view method, const std::optional<at::Generator>& generator,
    const std::optional<c10::List<std::optional<at::Generator>>>& generators) {
  const char* op = "verify_batch_probs";
  BatchArgs a;
  check_batch_layout(op, kProbs, target_probs, draft_tokens, cu_num_draft_tokens, draft_probs, method, a);
  if (greedy.has_value() && greedy->defined()) {
    check_cpu(op, "greedy", *greedy);
    TORCH_CHECK_TYPE(greedy->scalar_type() == at::kBool, "spec_verify.", op,
                     ": greedy must have dtype torch.bool, got ", dtype_name(greedy->scalar_type()));
    TORCH_CHECK_VALUE(greedy->dim() == 1 && greedy->size(0) == a.batch, "spec_verify.", op,
                      ": greedy must have shape [B] = [", a.batch, "], one flag per sequence, got ",
                      shape_of(*greedy));
    const at::Tensor flags = greedy->contiguous();
    a.greedy = std::make_unique<bool[]>(static_cast<size_t>(a.batch));
    std::copy(flags.data_ptr<bool>(), flags.data_ptr<bool>() + a.batch, a.greedy.get());
  }
  return batch_result(op, kProbs, a, generator, generators);
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

std::string isa() { return kernels().name; }

std::vector<std::string> available_isas() { return sv::available_isas(); }

void force_isa(const std::string& name) {
  try {
    sv::force_isa(name);
  } catch (const std::invalid_argument& e) {
    TORCH_CHECK_VALUE(false, "spec_verify: ", e.what());
  }
}

TORCH_LIBRARY_EXPAND(TORCH_EXTENSION_NAME, ops) {
  ops.def("verify_greedy(Tensor target_probs, Tensor draft_tokens) -> (SymInt, SymInt)");
  ops.impl("verify_greedy", c10::kCPU, &verify_greedy);
  ops.def("accept(Tensor target_probs, Tensor? draft_probs, Tensor draft_tokens, "
          "Generator? generator=None, str method=\"token\") -> (SymInt, SymInt)");
  ops.impl("accept", c10::kCPU, &accept);
  ops.def("accept_with_uniforms(Tensor target_probs, Tensor? draft_probs, Tensor draft_tokens, "
          "Tensor uniforms, str method=\"token\") -> (SymInt, SymInt)");
  ops.impl("accept_with_uniforms", c10::kCPU, &accept_with_uniforms);
  ops.def("warp(Tensor logits, float temperature=1.0, int top_k=0, float top_p=1.0, "
          "float min_p=0.0) -> Tensor");
  ops.impl("warp", c10::kCPU, &warp);
  ops.def("sample(Tensor logits, float temperature=1.0, int top_k=0, float top_p=1.0, "
          "float min_p=0.0, Generator? generator=None) -> Tensor");
  ops.impl("sample", c10::kCPU, &sample);
  ops.def("sample_with_uniforms(Tensor logits, Tensor uniforms, float temperature=1.0, int top_k=0, "
          "float top_p=1.0, float min_p=0.0) -> Tensor");
  ops.impl("sample_with_uniforms", c10::kCPU, &sample_with_uniforms);
  ops.def("sample_with_bounds(Tensor logits, Tensor? uniforms=None, float temperature=1.0, int top_k=0, "
          "float top_p=1.0, float min_p=0.0, Generator? generator=None) -> (Tensor, Tensor)");
  ops.impl("sample_with_bounds", c10::kCPU, &sample_with_bounds);
  ops.def("accept_logits(Tensor target_logits, Tensor? draft_logits, Tensor draft_tokens, "
          "float temperature=1.0, int top_k=0, float top_p=1.0, float min_p=0.0, "
          "Generator? generator=None, str method=\"token\", Tensor? draft_bounds=None) -> (SymInt, SymInt)");
  ops.impl("accept_logits", c10::kCPU, &accept_logits);
  ops.def("accept_logits_with_uniforms(Tensor target_logits, Tensor? draft_logits, "
          "Tensor draft_tokens, Tensor uniforms, float temperature=1.0, int top_k=0, "
          "float top_p=1.0, float min_p=0.0, str method=\"token\", Tensor? draft_bounds=None) -> (SymInt, SymInt)");
  ops.impl("accept_logits_with_uniforms", c10::kCPU, &accept_logits_with_uniforms);
  ops.def("verify_tree(Tensor target_logits, Tensor tokens, Tensor parents, Tensor? draft_logits=None, "
          "float temperature=1.0, int top_k=0, float top_p=1.0, float min_p=0.0, "
          "Generator? generator=None) -> (Tensor, SymInt)");
  ops.impl("verify_tree", c10::kCPU, &verify_tree);
  ops.def("verify_tree_with_uniforms(Tensor target_logits, Tensor tokens, Tensor parents, "
          "Tensor? draft_logits, Tensor uniforms, float temperature=1.0, int top_k=0, float top_p=1.0, "
          "float min_p=0.0) -> (Tensor, SymInt)");
  ops.impl("verify_tree_with_uniforms", c10::kCPU, &verify_tree_with_uniforms);
  ops.def("verify_tree_probs(Tensor target_probs, Tensor tokens, Tensor parents, Tensor? draft_probs=None, "
          "bool greedy=False, Generator? generator=None) -> (Tensor, SymInt)");
  ops.impl("verify_tree_probs", c10::kCPU, &verify_tree_probs);
  ops.def("verify_tree_probs_with_uniforms(Tensor target_probs, Tensor tokens, Tensor parents, "
          "Tensor? draft_probs, Tensor uniforms, bool greedy=False) -> (Tensor, SymInt)");
  ops.impl("verify_tree_probs_with_uniforms", c10::kCPU, &verify_tree_probs_with_uniforms);
  // The tree ops again with `parents` as a list of ints (int[]): the wrappers pass a Python
  // list through these, without a tensor made of it (about 1 us a call). Separate names, not
  // overloads: opcheck and users' code take the public ops' packets as single schemas.
  ops.def("_verify_tree_ints(Tensor target_logits, Tensor tokens, int[] parents, Tensor? draft_logits=None, "
          "float temperature=1.0, int top_k=0, float top_p=1.0, float min_p=0.0, "
          "Generator? generator=None) -> (Tensor, SymInt)");
  ops.impl("_verify_tree_ints", c10::kCPU, &verify_tree_ints);
  ops.def("_verify_tree_with_uniforms_ints(Tensor target_logits, Tensor tokens, int[] parents, "
          "Tensor? draft_logits, Tensor uniforms, float temperature=1.0, int top_k=0, float top_p=1.0, "
          "float min_p=0.0) -> (Tensor, SymInt)");
  ops.impl("_verify_tree_with_uniforms_ints", c10::kCPU, &verify_tree_with_uniforms_ints);
  ops.def("_verify_tree_probs_ints(Tensor target_probs, Tensor tokens, int[] parents, Tensor? draft_probs=None, "
          "bool greedy=False, Generator? generator=None) -> (Tensor, SymInt)");
  ops.impl("_verify_tree_probs_ints", c10::kCPU, &verify_tree_probs_ints);
  ops.def("_verify_tree_probs_with_uniforms_ints(Tensor target_probs, Tensor tokens, int[] parents, "
          "Tensor? draft_probs, Tensor uniforms, bool greedy=False) -> (Tensor, SymInt)");
  ops.impl("_verify_tree_probs_with_uniforms_ints", c10::kCPU, &verify_tree_probs_with_uniforms_ints);
  ops.def("verify_batch(Tensor target_logits, Tensor draft_tokens, Tensor cu_num_draft_tokens, "
          "Tensor? draft_logits=None, Tensor? temperature=None, Tensor? top_k=None, Tensor? top_p=None, "
          "Tensor? min_p=None, str method=\"token\", Generator? generator=None, "
          "Generator?[]? generators=None, Tensor? draft_bounds=None) -> (Tensor, Tensor)");
  ops.impl("verify_batch", c10::kCPU, &verify_batch);
  ops.def("verify_batch_probs(Tensor target_probs, Tensor draft_tokens, Tensor cu_num_draft_tokens, "
          "Tensor? draft_probs=None, Tensor? greedy=None, str method=\"token\", Generator? generator=None, "
          "Generator?[]? generators=None) -> (Tensor, Tensor)");
  ops.impl("verify_batch_probs", c10::kCPU, &verify_batch_probs);
  // Internal ops, for tests and benchmarks: private (leading underscore) names.
  ops.def("_row_masses(Tensor rows) -> Tensor");
  ops.impl("_row_masses", c10::kCPU, &row_masses);
  // The tensor checks above, for tensors of other layouts (see check_cpu).
  for (const c10::DispatchKey key : {c10::DispatchKey::SparseCPU, c10::DispatchKey::SparseCsrCPU,
                                     c10::DispatchKey::MkldnnCPU, c10::DispatchKey::NestedTensorCPU}) {
    ops.impl("verify_greedy", key, &verify_greedy);
    ops.impl("accept", key, &accept);
    ops.impl("accept_with_uniforms", key, &accept_with_uniforms);
    ops.impl("warp", key, &warp);
    ops.impl("sample", key, &sample);
    ops.impl("sample_with_uniforms", key, &sample_with_uniforms);
    ops.impl("sample_with_bounds", key, &sample_with_bounds);
    ops.impl("accept_logits", key, &accept_logits);
    ops.impl("accept_logits_with_uniforms", key, &accept_logits_with_uniforms);
    ops.impl("verify_batch", key, &verify_batch);
    ops.impl("verify_batch_probs", key, &verify_batch_probs);
    ops.impl("_row_masses", key, &row_masses);
    ops.impl("verify_tree", key, &verify_tree);
    ops.impl("verify_tree_with_uniforms", key, &verify_tree_with_uniforms);
    ops.impl("verify_tree_probs", key, &verify_tree_probs);
    ops.impl("verify_tree_probs_with_uniforms", key, &verify_tree_probs_with_uniforms);
    ops.impl("_verify_tree_ints", key, &verify_tree_ints);
    ops.impl("_verify_tree_with_uniforms_ints", key, &verify_tree_with_uniforms_ints);
    ops.impl("_verify_tree_probs_ints", key, &verify_tree_probs_ints);
    ops.impl("_verify_tree_probs_with_uniforms_ints", key, &verify_tree_probs_with_uniforms_ints);
  }
  ops.def("isa() -> str", &isa);
  ops.def("available_isas() -> str[]", &available_isas);
  ops.def("_force_isa(str name) -> ()", &force_isa);
}

REGISTER_EXTENSION(TORCH_EXTENSION_NAME)
