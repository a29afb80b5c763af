// The argument checks of torch_binding.cpp on torch::stable::Tensor: the same conditions,
// in the same order, with the same messages (errors.h says how their exception types map).
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "errors.h"
#include "spec_verify.h"

namespace spec_verify_stable __attribute__((visibility("hidden"))) {

namespace sv = spec_verify;

const sv::KernelTable& kernels();

void check_cpu(const char* op, const char* name, const Tensor& t);
void check_row_dtype(const char* op, const char* name, const Tensor& t);
// A [rows, V] row tensor, with unit stride along V (a copy only if it had none).
Tensor checked_rows(const char* op, const char* name, const Tensor& t, int64_t rows, int64_t vocab,
                    const char* expected);
// The K draft tokens as int64 values in [0, V).
std::vector<int64_t> checked_tokens(const char* op, const Tensor& t, int64_t k, int64_t vocab,
                                    const char* target_name = "target_probs");
int64_t checked_k(const char* op, const Tensor& target, const char* name = "target_probs");
// float64 uniforms in [0, 1): `count` of them ([count], or [] when `scalar`), contiguous.
Tensor checked_uniforms(const char* op, const Tensor& uniforms, int64_t count, const std::string& expected,
                        bool scalar = false);
sv::Method checked_method(const char* op, std::string_view method);

sv::Rows rows_of(const Tensor& t);
sv::Rows draft_rows(const std::optional<Tensor>& draft);

struct RowNames {
  const char* target;
  const char* draft;
  bool logits;
};
constexpr RowNames kProbs{"target_probs", "draft_probs", false};
constexpr RowNames kLogits{"target_logits", "draft_logits", true};

// A malformed row found by a round, as the exception the user sees.
void raise_if_bad(const char* op, const sv::Outcome& out, const RowNames& names = kProbs);

}  // namespace spec_verify_stable
