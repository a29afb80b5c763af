// The tree ops (Note [Tree verification]) on the stable ABI: torch_binding.cpp's checks,
// rounds and messages.
#include <torch/csrc/stable/ops.h>

#include <algorithm>
#include <utility>

#include "logits_args.h"
#include "ops.h"

namespace spec_verify_stable __attribute__((visibility("hidden"))) {

namespace {

struct TreeArgs {
  Tensor target;
  OptTensor draft;  // none: deterministic children
  std::vector<int64_t> tokens, parents;
  int64_t n, vocab;
};

// A 1-D integer tensor of n values, as int64.
std::vector<int64_t> checked_ints(const char* op, const char* name, const Tensor& t, int64_t n, const char* rows_name) {
  check_cpu(op, name, t);
  SV_CHECK_TYPE(is_integral(t.scalar_type()), "spec_verify.", op, ": ", name, " must have an integer dtype, got ",
                dtype_name(t.scalar_type()));
  SV_CHECK_VALUE(t.dim() == 1 && t.size(0) == n, "spec_verify.", op, ": ", name, " must have shape [N] = [", n,
                 "] (N = ", rows_name, ".shape[0] - 1), got ", shape_of(t));
  std::vector<int64_t> out(static_cast<size_t>(n));
  if (t.scalar_type() == ScalarType::Long) {  // the usual case: read in place, at its stride
    const int64_t* values = t.const_data_ptr<int64_t>();
    const int64_t stride = t.stride(0);
    for (int64_t j = 0; j < n; ++j) out[j] = values[j * stride];
    return out;
  }
  const Tensor values = torch::stable::contiguous(torch::stable::to(t, ScalarType::Long));
  std::copy(values.const_data_ptr<int64_t>(), values.const_data_ptr<int64_t>() + n, out.begin());
  return out;
}

std::vector<int64_t> checked_ints(const char* op, const char* name, const IntList& list, int64_t n,
                                  const char* rows_name) {
  SV_CHECK_VALUE(static_cast<int64_t>(list.size()) == n, "spec_verify.", op, ": ", name, " must have shape [N] = [", n,
                 "] (N = ", rows_name, ".shape[0] - 1), got [", list.size(), "]");
  return list;
}

template <class Parents>
TreeArgs checked_tree(const char* op, const RowNames& names, const Tensor& target, const OptTensor& draft,
                      const Tensor& tokens, const Parents& parents, bool greedy) {
  check_cpu(op, names.target, target);
  SV_CHECK_VALUE(target.dim() == 2 && target.size(0) >= 1 && target.size(1) >= 1, "spec_verify.", op, ": ",
                 names.target, " must be 2-D [N+1, V] with N >= 0 and V >= 1, got shape ", shape_of(target));
  const int64_t n = target.size(0) - 1, vocab = target.size(1);
  TreeArgs a{checked_rows(op, names.target, target, n + 1, vocab, "[N+1, V]"), std::nullopt, {}, {}, n, vocab};
  if (draft.has_value() && draft->defined())  // checked when greedy too, unread
    a.draft = checked_rows(op, names.draft, *draft, a.n + 1, a.vocab, "[N+1, V]");
  a.tokens = checked_ints(op, "tokens", tokens, a.n, names.target);
  a.parents = checked_ints(op, "parents", parents, a.n, names.target);
  for (int64_t j = 0; j < a.n; ++j) {
    SV_CHECK_VALUE(a.tokens[j] >= 0 && a.tokens[j] < a.vocab, "spec_verify.", op, ": tokens[", j, "] = ", a.tokens[j],
                   " is outside the vocabulary [0, ", a.vocab, ")");
    SV_CHECK_VALUE(a.parents[j] >= -1 && a.parents[j] < j, "spec_verify.", op, ": parents[", j, "] = ", a.parents[j],
                   " must be in [-1, ", j, "): nodes in topological order, -1 for a child of the root");
  }
  if (!greedy && !a.draft.has_value()) {
    // Deterministic children are candidates, not draws: a repeated sibling token has no rule.
    std::vector<std::pair<int64_t, int64_t>> seen;  // (parent, token)
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
      throw std::invalid_argument(str("spec_verify.", op, ": tokens[", second, "] = ", a.tokens[second],
                                      " repeats its sibling tokens[", first, "]; without draft rows the children of a "
                                      "node must hold distinct tokens (pass ", names.draft,
                                      " for children drawn from the draft)"));
    }
  }
  return a;
}

Path tree_result(const sv::Outcome& out, const std::vector<int64_t>& path) {
  Tensor p = torch::stable::empty({out.n_accepted}, ScalarType::Long);
  std::copy(path.begin(), path.begin() + out.n_accepted, p.mutable_data_ptr<int64_t>());
  return {p, out.token};
}

sv::Outcome run_tree(const TreeArgs& a, const double* uniforms, const sv::WarpParams* params,
                     std::vector<int64_t>* path) {
  path->assign(static_cast<size_t>(a.n) + 1, -1);
  return sv::tree_round(kernels(), rows_of(a.target), draft_rows(a.draft), a.tokens.data(), a.parents.data(), a.n,
                        uniforms, a.vocab, params, path->data());
}

}  // namespace

template <class Parents>
Path drawn_tree_logits(const char* op, const Tensor& target_logits, const Tensor& tokens, const Parents& parents,
                       const OptTensor& draft_logits, double temperature, int64_t top_k, double top_p, double min_p,
                       const Gen& generator, const OptTensor& given, const Tensor& uniforms) {
  if (uniforms_given(op, given, generator))
    return tree_logits_with_uniforms("verify_tree_with_uniforms", target_logits, tokens, parents, draft_logits,
                                     *given, temperature, top_k, top_p, min_p);
  const sv::WarpParams params = checked_params(op, temperature, top_k, top_p, min_p);
  const bool greedy = params.temperature == 0.0f;
  const TreeArgs a = checked_tree(op, kLogits, target_logits, draft_logits, tokens, parents, greedy);
  std::vector<int64_t> path;
  sv::Outcome out;
  if (greedy) {
    out = run_tree(a, nullptr, &params, &path);
  } else {
    check_generator(op, generator);
    out = run_tree(a, drawn(op, uniforms, a.n + 1), &params, &path);
  }
  raise_if_bad(op, out, kLogits);
  return tree_result(out, path);
}

template <class Parents>
Path tree_logits_with_uniforms(const char* op, const Tensor& target_logits, const Tensor& tokens,
                               const Parents& parents, const OptTensor& draft_logits, const Tensor& uniforms,
                               double temperature, int64_t top_k, double top_p, double min_p) {
  const sv::WarpParams params = checked_params(op, temperature, top_k, top_p, min_p);
  const bool greedy = params.temperature == 0.0f;
  const TreeArgs a = checked_tree(op, kLogits, target_logits, draft_logits, tokens, parents, greedy);
  const Tensor u = checked_uniforms(op, uniforms, a.n + 1, "[N+1] = [" + std::to_string(a.n + 1) + "]");
  std::vector<int64_t> path;
  const sv::Outcome out = run_tree(a, u.const_data_ptr<double>(), &params, &path);
  raise_if_bad(op, out, kLogits);
  return tree_result(out, path);
}

template <class Parents>
Path drawn_tree_probs(const char* op, const Tensor& target_probs, const Tensor& tokens, const Parents& parents,
                      const OptTensor& draft_probs, bool greedy, const Gen& generator, const OptTensor& given,
                      const Tensor& uniforms) {
  if (uniforms_given(op, given, generator))
    return tree_probs_with_uniforms("verify_tree_probs_with_uniforms", target_probs, tokens, parents, draft_probs,
                                    *given, greedy);
  const TreeArgs a = checked_tree(op, kProbs, target_probs, draft_probs, tokens, parents, greedy);
  std::vector<int64_t> path;
  sv::Outcome out;
  if (greedy) {
    out = run_tree(a, nullptr, nullptr, &path);
  } else {
    check_generator(op, generator);
    out = run_tree(a, drawn(op, uniforms, a.n + 1), nullptr, &path);
  }
  raise_if_bad(op, out, kProbs);
  return tree_result(out, path);
}

template <class Parents>
Path tree_probs_with_uniforms(const char* op, const Tensor& target_probs, const Tensor& tokens, const Parents& parents,
                              const OptTensor& draft_probs, const Tensor& uniforms, bool greedy) {
  const TreeArgs a = checked_tree(op, kProbs, target_probs, draft_probs, tokens, parents, greedy);
  const Tensor u = checked_uniforms(op, uniforms, a.n + 1, "[N+1] = [" + std::to_string(a.n + 1) + "]");
  std::vector<int64_t> path;
  const sv::Outcome out = run_tree(a, greedy ? nullptr : u.const_data_ptr<double>(), nullptr, &path);
  raise_if_bad(op, out, kProbs);
  return tree_result(out, path);
}

// The forms torch_binding.cpp calls.
template Path drawn_tree_logits<Tensor>(const char*, const Tensor&, const Tensor&, const Tensor&, const OptTensor&,
                                        double, int64_t, double, double, const Gen&, const OptTensor&,
                                        const Tensor&);
template Path drawn_tree_logits<IntList>(const char*, const Tensor&, const Tensor&, const IntList&, const OptTensor&,
                                         double, int64_t, double, double, const Gen&, const OptTensor&,
                                         const Tensor&);
template Path drawn_tree_probs<Tensor>(const char*, const Tensor&, const Tensor&, const Tensor&, const OptTensor&, bool,
                                       const Gen&, const OptTensor&, const Tensor&);
template Path drawn_tree_probs<IntList>(const char*, const Tensor&, const Tensor&, const IntList&, const OptTensor&,
                                        bool, const Gen&, const OptTensor&, const Tensor&);

}  // namespace spec_verify_stable
