// Warping parameters, logits rows and draft bounds, checked as torch_binding.cpp checks them.
#pragma once

#include <optional>
#include <string_view>
#include <vector>

#include "checks.h"

namespace spec_verify_stable __attribute__((visibility("hidden"))) {

sv::WarpParams checked_params(const char* op, double temperature, int64_t top_k, double top_p, double min_p);
// A logits tensor [V] or [R, V] with V >= 1, as [R, V] with unit stride along V.
Tensor checked_logits(const char* op, const char* name, const Tensor& t);
std::vector<sv::DraftBound> checked_draft_bounds(const char* op, const Tensor& t, int64_t k, const char* rows = "K");

struct LogitsArgs {
  Tensor target;
  std::optional<Tensor> draft;  // none: one-hot drafts (or greedy)
  std::vector<int64_t> tokens;
  int64_t k, vocab;
  bool greedy;
  sv::Method method;
  std::vector<sv::DraftBound> bounds;  // Note [Draft bounds]: k of them, or none
};

LogitsArgs checked_logits_args(const char* op, const Tensor& target_logits, const std::optional<Tensor>& draft_logits,
                               const Tensor& draft_tokens, const sv::WarpParams& params, std::string_view method,
                               const std::optional<Tensor>& draft_bounds);

}  // namespace spec_verify_stable
