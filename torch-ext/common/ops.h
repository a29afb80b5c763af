// The ops' kernels, written once over a backend B: torch-ext/stable/backend.h (the LibTorch
// stable ABI) or versioned/backend.h (ATen). B supplies its tensor type and the few things
// only a tensor library can do: a view of a tensor (TensorView), a contiguous copy, a dtype
// conversion, an empty tensor, torch's thread count and the op's result types. Every
// argument check is in checks.cpp; every rule in the core (csrc/).
//
// The ops draw nothing: each op that samples takes its uniforms (`Tensor? uniforms`), which
// the Python layer draws from a torch.Generator (spec_verify/_uniforms.py) or the caller
// gives (the *_with_uniforms functions). They may be None only where nothing would be
// drawn (temperature 0, greedy); given, they are checked (float64, the count, [0, 1)) even
// where unused.
#pragma once

#include <algorithm>
#include <cstring>
#include <optional>
#include <string>
#include <tuple>
#include <type_traits>
#include <vector>

#include "checks.h"

namespace spec_verify_binding __attribute__((visibility("hidden"))) {

template <class B>
using Opt = std::optional<typename B::Tensor>;

// A checked tensor with unit stride along its last dimension (a copy only if it had none),
// and its view.
template <class B>
struct Dense {
  typename B::Tensor tensor;
  TensorView view;
};

template <class B>
Dense<B> unit_stride(const typename B::Tensor& t, const TensorView& v) {
  if (v.stride(v.dim - 1) == 1) return {t, v};
  typename B::Tensor copy = B::contiguous(t);
  const TensorView copy_view = B::view(copy);
  return {copy, copy_view};
}

// The view of an optional tensor, in *storage, or null when it is absent.
template <class B>
const TensorView* view_of(const Opt<B>& t, TensorView* storage) {
  if (!B::given(t)) return nullptr;
  *storage = B::view(*t);
  return storage;
}

// Given uniforms, checked (checked_uniforms); null when none were given and none are needed
// (`needed` false), else the op refuses the call.
template <class B>
const double* uniforms_of(const char* op, const Opt<B>& uniforms, int64_t count, bool needed, const char* what,
                          std::vector<double>* copy, bool scalar = false, const char* note = "") {
  if (!B::given(uniforms)) {
    if (needed) missing_uniforms(op, count);
    return nullptr;
  }
  return checked_uniforms(op, B::view(*uniforms), count, what, note, scalar, copy);
}

// ---- verify_greedy, accept, accept_logits: a chain of K draft tokens ------------------------

// The rows and tokens of a round: [K+1, V] target rows, optional [K, V] draft rows, K tokens.
template <class B>
struct RoundArgs {
  Dense<B> target;
  std::optional<Dense<B>> draft;  // none: one-hot drafts
  std::vector<int64_t> tokens;
  int64_t k, vocab;
  sv::Method method;

  sv::Rows draft_rows() const { return draft ? rows_of(draft->view) : sv::Rows{nullptr, 0}; }
};

template <class B>
RoundArgs<B> checked_round(const char* op, const RowNames& names, const typename B::Tensor& target,
                           const Opt<B>& draft, const typename B::Tensor& tokens, std::string_view method) {
  const sv::Method m = checked_method(op, method);
  const TensorView tv = B::view(target);
  const int64_t k = checked_k(op, tv, names.target);
  const int64_t vocab = tv.size(1);
  check_rows(op, names.target, tv, k + 1, vocab, "[K+1, V]");
  TensorView dv;
  const TensorView* d = view_of<B>(draft, &dv);
  if (d != nullptr) check_rows(op, names.draft, *d, k, vocab, "[K, V]");  // at temperature 0 too, unread
  RoundArgs<B> a{unit_stride<B>(target, tv), std::nullopt, {}, k, vocab, m};
  if (d != nullptr) a.draft = unit_stride<B>(*draft, *d);
  a.tokens = checked_tokens(op, B::view(tokens), k, vocab, names.target);
  return a;
}

template <class B>
typename B::Pair verify_greedy(const typename B::Tensor& target_probs, const typename B::Tensor& draft_tokens) {
  const char* op = "verify_greedy";
  const TensorView tv = B::view(target_probs);
  const int64_t k = checked_k(op, tv);
  const int64_t vocab = tv.size(1);
  check_rows(op, "target_probs", tv, k + 1, vocab, "[K+1, V]");
  const Dense<B> target = unit_stride<B>(target_probs, tv);
  const std::vector<int64_t> tokens = checked_tokens(op, B::view(draft_tokens), k, vocab);
  const sv::Outcome out = sv::verify_greedy_round(kernels(), rows_of(target.view), tokens.data(), k, vocab);
  raise_if_bad(op, out);
  return B::pair(out.n_accepted, out.token);
}

template <class B>
typename B::Pair accept(const typename B::Tensor& target_probs, const Opt<B>& draft_probs,
                        const typename B::Tensor& draft_tokens, const Opt<B>& uniforms, typename B::StrParam method) {
  const char* op = "accept";
  const RoundArgs<B> a = checked_round<B>(op, kProbs, target_probs, draft_probs, draft_tokens, B::text(method));
  std::vector<double> copy;
  const double* u = uniforms_of<B>(op, uniforms, a.k + 1, true, "K+1", &copy);
  const sv::Outcome out = sv::accept_round(kernels(), rows_of(a.target.view), a.draft_rows(), a.tokens.data(), u, a.k,
                                           a.vocab, a.method);
  raise_if_bad(op, out);
  return B::pair(out.n_accepted, out.token);
}

template <class B>
typename B::Pair accept_logits(const typename B::Tensor& target_logits, const Opt<B>& draft_logits,
                               const typename B::Tensor& draft_tokens, double temperature, int64_t top_k, double top_p,
                               double min_p, const Opt<B>& uniforms, typename B::StrParam method) {
  const char* op = "accept_logits";
  const sv::WarpParams params = checked_params(op, temperature, top_k, top_p, min_p);
  const RoundArgs<B> a = checked_round<B>(op, kLogits, target_logits, draft_logits, draft_tokens, B::text(method));
  const bool greedy = params.temperature == 0.0f;
  std::vector<double> copy;
  const double* u = uniforms_of<B>(op, uniforms, a.k + 1, !greedy, "K+1", &copy);
  const sv::KernelTable& kt = kernels();
  const sv::Outcome out =
      greedy ? sv::verify_greedy_round(kt, rows_of(a.target.view), a.tokens.data(), a.k, a.vocab, true)
             : sv::accept_logits_round(kt, rows_of(a.target.view), a.draft_rows(), a.tokens.data(), u, a.k, a.vocab,
                                       params, a.method);
  raise_if_bad(op, out, kLogits);
  return B::pair(out.n_accepted, out.token);
}

// ---- warp, sample: logits rows [V] or [R, V] ------------------------------------------------

constexpr RowNames kLogitsRows{"logits", "logits", true};

// One row of the sampling ops: the token, or the row's error.
inline sv::Outcome sample_row(const TensorView& rows, int64_t i, int64_t vocab, const sv::WarpParams& params,
                              double u) {
  sv::Outcome out = sv::sample_round(kernels(), rows_of(rows).row(i), vocab, params, u);
  out.row = i;
  return out;
}

// The parameters and the [V] or [R, V] rows of warp and sample.
template <class B>
struct LogitsRows {
  sv::WarpParams params;
  Dense<B> rows;
  int64_t n, vocab;
};

template <class B>
LogitsRows<B> checked_logits_rows(const char* op, const typename B::Tensor& logits, double temperature, int64_t top_k,
                                  double top_p, double min_p) {
  const sv::WarpParams params = checked_params(op, temperature, top_k, top_p, min_p);
  const TensorView lv = B::view(logits);
  check_logits(op, "logits", lv);
  return {params, unit_stride<B>(logits, lv), lv.dim == 1 ? 1 : lv.size(0), lv.size(-1)};
}

template <class B>
typename B::Tensor warp(const typename B::Tensor& logits, double temperature, int64_t top_k, double top_p,
                        double min_p) {
  const char* op = "warp";
  const LogitsRows<B> a = checked_logits_rows<B>(op, logits, temperature, top_k, top_p, min_p);
  const sv::WarpParams& params = a.params;
  const Dense<B>& rows = a.rows;
  const int64_t n = a.n, vocab = a.vocab;
  typename B::Tensor out = B::empty(rows.view.sizes, rows.view.dim, DType::kFloat32);
  float* o_all = static_cast<float*>(B::mutable_data(out));
  std::memset(o_all, 0, sizeof(float) * static_cast<size_t>(n * vocab));
  const sv::KernelTable& kt = kernels();
  std::vector<float> values(vocab), widened(vocab);
  std::vector<double> blocks(sv::num_blocks(vocab));
  for (int64_t i = 0; i < n; ++i) {
    float* o = o_all + i * vocab;
    if (params.temperature == 0.0f) {  // greedy: one-hot at sample_round's argmax
      const sv::Outcome greedy = sample_row(rows.view, i, vocab, params, 0.0);
      raise_if_bad(op, greedy, kLogitsRows);
      o[greedy.token] = 1.0f;
      continue;
    }
    const float* x = sv::as_floats(kt, rows_of(rows.view).row(i), vocab, widened.data());
    sv::WarpedRow w{values.data(), blocks.data(), 0.0};
    sv::Outcome bad = sv::warp_row(kt, x, vocab, params, &w);
    bad.row = i;
    raise_if_bad(op, bad, kLogitsRows);
    for (int64_t v = 0; v < vocab; ++v) o[v] = static_cast<float>(static_cast<double>(w.values[v]) / w.mass);
  }
  return out;
}

template <class B>
typename B::Tensor sample(const typename B::Tensor& logits, double temperature, int64_t top_k, double top_p,
                          double min_p, const Opt<B>& uniforms) {
  const char* op = "sample";
  const LogitsRows<B> a = checked_logits_rows<B>(op, logits, temperature, top_k, top_p, min_p);
  const int64_t n = a.n, vocab = a.vocab;
  const bool one = a.rows.view.dim == 1;
  std::vector<double> copy;
  const double* u = uniforms_of<B>(op, uniforms, n, a.params.temperature != 0.0f, "R", &copy, one);
  typename B::Tensor tokens = B::empty(a.rows.view.sizes, a.rows.view.dim - 1, DType::kInt64);
  int64_t* out = static_cast<int64_t*>(B::mutable_data(tokens));
  for (int64_t i = 0; i < n; ++i) {
    const sv::Outcome o = sample_row(a.rows.view, i, vocab, a.params, u == nullptr ? 0.0 : u[i]);
    raise_if_bad(op, o, kLogitsRows);
    out[i] = o.token;
  }
  return tokens;
}

// ---- trees (Note [Tree verification]); parents a tensor, or a list of ints (_ints ops) --------

template <class B, class Parents>
typename B::Path verify_tree_any(const char* op, const RowNames& names, const typename B::Tensor& target,
                                 const typename B::Tensor& tokens, const Parents& parents, const Opt<B>& draft,
                                 const sv::WarpParams* params, bool greedy, const Opt<B>& uniforms) {
  const TensorView tv = B::view(target), kv = B::view(tokens);
  TensorView dv, pv;
  const TensorView* d = view_of<B>(draft, &dv);
  IntsArg ints{nullptr, nullptr, 0};
  if constexpr (std::is_same_v<std::decay_t<Parents>, typename B::Tensor>) {
    pv = B::view(parents);
    ints.tensor = &pv;
  } else {
    ints = IntsArg{nullptr, parents.data(), parents.size()};
  }
  const TreeShape a = checked_tree(op, names, tv, d, kv, ints, greedy);
  const Dense<B> rows = unit_stride<B>(target, tv);
  std::optional<Dense<B>> draft_rows;
  if (d != nullptr) draft_rows = unit_stride<B>(*draft, *d);
  std::vector<double> copy;
  const double* u = uniforms_of<B>(op, uniforms, a.n + 1, !greedy, "N+1", &copy);
  std::vector<int64_t> path(static_cast<size_t>(a.n) + 1, -1);
  const sv::Outcome out = sv::tree_round(kernels(), rows_of(rows.view),
                                         draft_rows ? rows_of(draft_rows->view) : sv::Rows{nullptr, 0},
                                         a.tokens.data(), a.parents.data(), a.n,
                                         params == nullptr && greedy ? nullptr : u, a.vocab, params, path.data());
  raise_if_bad(op, out, names);
  typename B::Tensor p = B::empty(&out.n_accepted, 1, DType::kInt64);
  std::copy(path.begin(), path.begin() + out.n_accepted, static_cast<int64_t*>(B::mutable_data(p)));
  return B::path(p, out.token);
}

template <class B, class Parents>
typename B::Path verify_tree(const typename B::Tensor& target_logits, const typename B::Tensor& tokens,
                             Parents parents, const Opt<B>& draft_logits, double temperature, int64_t top_k,
                             double top_p, double min_p, const Opt<B>& uniforms) {
  const char* op = "verify_tree";
  const sv::WarpParams params = checked_params(op, temperature, top_k, top_p, min_p);
  return verify_tree_any<B>(op, kLogits, target_logits, tokens, parents, draft_logits, &params,
                            params.temperature == 0.0f, uniforms);
}

template <class B, class Parents>
typename B::Path verify_tree_probs(const typename B::Tensor& target_probs, const typename B::Tensor& tokens,
                                   Parents parents, const Opt<B>& draft_probs, bool greedy, const Opt<B>& uniforms) {
  return verify_tree_any<B>("verify_tree_probs", kProbs, target_probs, tokens, parents, draft_probs, nullptr, greedy,
                            uniforms);
}

// ---- batches (Note [Ragged batches]) --------------------------------------------------------

// Weighted elements (sv::batch_cost) worth waking a thread for: about eight argmax rows at
// V = 32000, some 20 us, against a few us to wake a parked pool thread.
constexpr int64_t kCostPerThread = int64_t{1} << 18;

// A parameter tensor whose dtype checks.cpp cannot read in place (the float8 types), as float64.
template <class B>
const TensorView* param_view(const Opt<B>& t, TensorView* storage, Opt<B>* converted) {
  const TensorView* v = view_of<B>(t, storage);
  if (v == nullptr || !v->dense() || v->device_type != kCpu || readable(v->dtype)) return v;
  *converted = B::to(*t, DType::kFloat64);
  *storage = B::view(**converted);
  return storage;
}

// Runs a checked batch: (output_token_ids [B, max K_b + 1], num_accepted [B]), or raises
// naming the sequence and the row. The sampled sequences' uniforms come in batch order, K_b + 1
// each; greedy sequences take none.
template <class B>
std::tuple<typename B::Tensor, typename B::Tensor> run_batch(const char* op, const RowNames& names,
                                                             const BatchShape& shape, const sv::Batch& in,
                                                             const Opt<B>& uniforms) {
  std::vector<int64_t> uniform_begin(static_cast<size_t>(in.batch));
  const int64_t count = sv::batch_uniform_offsets(in, uniform_begin.data());
  std::vector<double> copy;
  const double* u = uniforms_of<B>(op, uniforms, count, count > 0, "U", &copy, false,
                                   " (K_b + 1 per sampled sequence, in batch order)");
  const sv::KernelTable& kt = kernels();
  const int64_t sizes[2] = {in.batch, shape.width};
  typename B::Tensor out = B::empty(sizes, 2, DType::kInt64), accepted = B::empty(sizes, 1, DType::kInt64);
  int64_t threads = std::min<int64_t>(B::max_threads(), in.batch);
  if (threads > 1) threads = std::min(threads, std::max<int64_t>(1, sv::batch_cost(in) / kCostPerThread));
  const sv::BatchFailure failure =
      sv::run_batch_threads(kt, in, u, uniform_begin.data(), shape.width, static_cast<int64_t*>(B::mutable_data(out)),
                            static_cast<int64_t*>(B::mutable_data(accepted)), threads);
  if (failure.sequence >= 0) raise_if_bad(str(op, ": sequence ", failure.sequence).c_str(), failure.outcome, names);
  return {out, accepted};
}

template <class B>
std::tuple<typename B::Tensor, typename B::Tensor> verify_batch(
    const typename B::Tensor& target_logits, const typename B::Tensor& draft_tokens,
    const typename B::Tensor& cu_num_draft_tokens, const Opt<B>& draft_logits, const Opt<B>& temperature,
    const Opt<B>& top_k, const Opt<B>& top_p, const Opt<B>& min_p, typename B::StrParam method,
    const Opt<B>& uniforms) {
  const char* op = "verify_batch";
  const TensorView tv = B::view(target_logits);
  TensorView dv, views[4];
  const TensorView* d = view_of<B>(draft_logits, &dv);
  const BatchShape shape = checked_batch(op, kLogits, tv, B::view(draft_tokens), B::view(cu_num_draft_tokens), d,
                                         B::text(method));
  Opt<B> converted[4];
  const std::vector<sv::WarpParams> params = checked_batch_params(
      op, param_view<B>(temperature, &views[0], &converted[0]), param_view<B>(top_k, &views[1], &converted[1]),
      param_view<B>(top_p, &views[2], &converted[2]), param_view<B>(min_p, &views[3], &converted[3]), shape.batch);
  const Dense<B> target = unit_stride<B>(target_logits, tv);
  std::optional<Dense<B>> draft;
  if (d != nullptr) draft = unit_stride<B>(*draft_logits, *d);
  const sv::Batch in{rows_of(target.view), draft ? rows_of(draft->view) : sv::Rows{nullptr, 0}, shape.tokens.data(),
                     shape.cu.data(), shape.batch, shape.vocab, shape.method, params.empty() ? nullptr : params.data(),
                     nullptr};
  return run_batch<B>(op, kLogits, shape, in, uniforms);
}

template <class B>
std::tuple<typename B::Tensor, typename B::Tensor> verify_batch_probs(
    const typename B::Tensor& target_probs, const typename B::Tensor& draft_tokens,
    const typename B::Tensor& cu_num_draft_tokens, const Opt<B>& draft_probs, const Opt<B>& greedy,
    typename B::StrParam method, const Opt<B>& uniforms) {
  const char* op = "verify_batch_probs";
  const TensorView tv = B::view(target_probs);
  TensorView dv, gv;
  const TensorView* d = view_of<B>(draft_probs, &dv);
  const BatchShape shape = checked_batch(op, kProbs, tv, B::view(draft_tokens), B::view(cu_num_draft_tokens), d,
                                         B::text(method));
  const std::unique_ptr<bool[]> flags = checked_greedy(op, view_of<B>(greedy, &gv), shape.batch);
  const Dense<B> target = unit_stride<B>(target_probs, tv);
  std::optional<Dense<B>> draft;
  if (d != nullptr) draft = unit_stride<B>(*draft_probs, *d);
  const sv::Batch in{rows_of(target.view), draft ? rows_of(draft->view) : sv::Rows{nullptr, 0}, shape.tokens.data(),
                     shape.cu.data(), shape.batch, shape.vocab, shape.method, nullptr, flags.get()};
  return run_batch<B>(op, kProbs, shape, in, uniforms);
}

// ---- _row_masses: the canonical float64 mass of each row (tests and benchmarks) --------------

template <class B>
typename B::Tensor row_masses(const typename B::Tensor& rows) {
  const char* op = "_row_masses";
  const TensorView rv = B::view(rows);
  check_cpu(op, "rows", rv);
  SV_CHECK_VALUE(rv.dim == 2 && rv.size(1) >= 1, "spec_verify._row_masses: rows must be 2-D [N, V] with V >= 1, got "
                 "shape ", shape_of(rv));
  check_rows(op, "rows", rv, rv.size(0), rv.size(1), "[N, V]");
  const Dense<B> r = unit_stride<B>(rows, rv);
  const int64_t n = rv.size(0), vocab = rv.size(1);
  typename B::Tensor out = B::empty(&n, 1, DType::kFloat64);
  double* masses = static_cast<double*>(B::mutable_data(out));
  std::vector<double> blocks(static_cast<size_t>(sv::num_blocks(vocab)));
  const sv::KernelTable& kt = kernels();
  for (int64_t i = 0; i < n; ++i) {
    SV_CHECK_VALUE(sv::typed_mass(kt, rows_of(r.view).row(i), vocab, blocks.data(), masses + i),
                   "spec_verify._row_masses: rows[", i, "] holds a negative, NaN or infinite value");
  }
  return out;
}

}  // namespace spec_verify_binding
