// Warping parameters and logits rows, checked as torch_binding.cpp checks them.
#pragma once

#include <optional>
#include <string_view>
#include <vector>

#include "checks.h"

namespace spec_verify_stable __attribute__((visibility("hidden"))) {

sv::WarpParams checked_params(const char* op, double temperature, int64_t top_k, double top_p, double min_p);
// A logits tensor [V] or [R, V] with V >= 1, as [R, V] with unit stride along V.
Tensor checked_logits(const char* op, const char* name, const Tensor& t);

struct LogitsArgs {
  Tensor target;
  std::optional<Tensor> draft;  // none: one-hot drafts (or greedy)
  std::vector<int64_t> tokens;
  int64_t k, vocab;
  bool greedy;
  sv::Method method;
};

LogitsArgs checked_logits_args(const char* op, const Tensor& target_logits, const std::optional<Tensor>& draft_logits,
                               const Tensor& draft_tokens, const sv::WarpParams& params, std::string_view method);

}  // namespace spec_verify_stable
