// The tree ops (Note [Tree verification]): the versioned binding's kernels, as
// torch_binding.cpp registers them, for parents as a tensor and as a list of ints.
#include <ATen/ATen.h>

#include <algorithm>
#include <string>
#include <utility>
#include <vector>

#include "generators.h"
#include "logits_args.h"
#include "ops.h"

using namespace spec_verify_versioned;  // the checks (checks.h, logits_args.h) and the draw

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

// The tree ops with their uniforms given (the Python API's *_with_uniforms, the names their
// messages give).
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

template <class Parents>
std::tuple<at::Tensor, c10::SymInt> tree_logits(const char* op, const at::Tensor& target_logits,
                                                const at::Tensor& tokens, const Parents& parents,
                                                const std::optional<at::Tensor>& draft_logits, double temperature,
                                                int64_t top_k, double top_p, double min_p,
                                                const std::optional<at::Generator>& generator,
                                                const std::optional<at::Tensor>& uniforms) {
  if (uniforms_given(op, uniforms, generator))
    return tree_logits_with_uniforms("verify_tree_with_uniforms", target_logits, tokens, parents, draft_logits,
                                     *uniforms, temperature, top_k, top_p, min_p);
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
std::tuple<at::Tensor, c10::SymInt> tree_probs(const char* op, const at::Tensor& target_probs,
                                               const at::Tensor& tokens, const Parents& parents,
                                               const std::optional<at::Tensor>& draft_probs, bool greedy,
                                               const std::optional<at::Generator>& generator,
                                               const std::optional<at::Tensor>& uniforms) {
  if (uniforms_given(op, uniforms, generator))
    return tree_probs_with_uniforms("verify_tree_probs_with_uniforms", target_probs, tokens, parents, draft_probs,
                                    *uniforms, greedy);
  const TreeArgs a = checked_tree(op, kProbs, target_probs, draft_probs, tokens, parents, greedy);
  std::vector<int64_t> path;
  const sv::Outcome out = greedy ? run_tree(a, nullptr, nullptr, &path)
                                 : with_uniforms(op, generator, a.n + 1,
                                                 [&](const double* u) { return run_tree(a, u, nullptr, &path); });
  raise_if_bad(op, out, kProbs);
  return tree_result(out, path);
}

}  // namespace

std::tuple<at::Tensor, c10::SymInt> verify_tree(const at::Tensor& target_logits, const at::Tensor& tokens,
                                                const at::Tensor& parents,
                                                const std::optional<at::Tensor>& draft_logits, double temperature,
                                                int64_t top_k, double top_p, double min_p,
                                                const std::optional<at::Generator>& generator,
                                                const std::optional<at::Tensor>& uniforms) {
  return tree_logits("verify_tree", target_logits, tokens, parents, draft_logits, temperature, top_k, top_p, min_p,
                     generator, uniforms);
}

std::tuple<at::Tensor, c10::SymInt> verify_tree_ints(const at::Tensor& target_logits, const at::Tensor& tokens,
                                                     at::IntArrayRef parents,
                                                     const std::optional<at::Tensor>& draft_logits,
                                                     double temperature, int64_t top_k, double top_p, double min_p,
                                                     const std::optional<at::Generator>& generator,
                                                     const std::optional<at::Tensor>& uniforms) {
  return tree_logits("verify_tree", target_logits, tokens, parents, draft_logits, temperature, top_k, top_p, min_p,
                     generator, uniforms);
}

std::tuple<at::Tensor, c10::SymInt> verify_tree_probs(const at::Tensor& target_probs, const at::Tensor& tokens,
                                                      const at::Tensor& parents,
                                                      const std::optional<at::Tensor>& draft_probs, bool greedy,
                                                      const std::optional<at::Generator>& generator,
                                                      const std::optional<at::Tensor>& uniforms) {
  return tree_probs("verify_tree_probs", target_probs, tokens, parents, draft_probs, greedy, generator, uniforms);
}

std::tuple<at::Tensor, c10::SymInt> verify_tree_probs_ints(const at::Tensor& target_probs, const at::Tensor& tokens,
                                                           at::IntArrayRef parents,
                                                           const std::optional<at::Tensor>& draft_probs, bool greedy,
                                                           const std::optional<at::Generator>& generator,
                                                           const std::optional<at::Tensor>& uniforms) {
  return tree_probs("verify_tree_probs", target_probs, tokens, parents, draft_probs, greedy, generator, uniforms);
}

