// Warping parameters and logits rows, checked for the ops on logits (the
// versioned binding; torch-ext/stable/logits_args.h checks them alike on the stable ABI).
#pragma once

#include <optional>
#include <vector>

#include "checks.h"

namespace spec_verify_versioned __attribute__((visibility("hidden"))) {

sv::WarpParams checked_params(const char* op, double temperature, int64_t top_k, double top_p,
                              double min_p);
// A logits tensor [V] or [R, V] with V >= 1, as [R, V] with unit stride along V.
at::Tensor checked_logits(const char* op, const char* name, const at::Tensor& t);

struct LogitsArgs {
  at::Tensor target, draft;  // draft undefined: one-hot drafts (or greedy)
  TokenVec tokens;
  int64_t k, vocab;
  bool greedy;
  sv::Method method;
};

LogitsArgs checked_logits_args(const char* op, const at::Tensor& target_logits,
                               const std::optional<at::Tensor>& draft_logits,
                               const at::Tensor& draft_tokens, const sv::WarpParams& params,
                               c10::string_view method);

}  // namespace spec_verify_versioned
