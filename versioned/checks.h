// The versioned binding's tensor and row checks (ATen API): what every op checks before the
// core sees raw pointers, and the malformed-row errors. torch-ext/stable/checks.h holds the
// same checks on the stable ABI, with the same messages.
#pragma once

#include <ATen/ATen.h>
#include <c10/core/SymInt.h>
#include <c10/util/SmallVector.h>
#include <c10/util/string_view.h>

#include <cstdint>
#include <string>
#include <tuple>

#include "spec_verify.h"

namespace spec_verify_versioned __attribute__((visibility("hidden"))) {

namespace sv = spec_verify;

std::string shape_of(const at::Tensor& t);
// "torch.float64", as users write it.
std::string dtype_name(at::ScalarType t);

// The path in use; a bad SPEC_VERIFY_ISA raises a ValueError here.
const sv::KernelTable& kernels();

void check_cpu(const char* op, const char* name, const at::Tensor& t);
// Rows are float32, float16 or bfloat16 (Note [Half rows]), each tensor its own.
void check_row_dtype(const char* op, const char* name, const at::Tensor& t);

// A [rows, V] probability (or logit) tensor. Returns it with unit stride along V (a copy
// only if it had none), so each row is a plain array.
at::Tensor checked_rows(const char* op, const char* name, const at::Tensor& t, int64_t rows,
                        int64_t vocab, const char* expected);

// The K draft tokens as int64 values in [0, V). An int64 tensor (the usual case) is read in
// place, at its stride; another integer dtype through a converted copy. A round's few tokens
// stay on the stack (TokenVec); a batch's go to a std::vector (the two instances checks.cpp
// defines).
using TokenVec = c10::SmallVector<int64_t, 16>;

template <class Vec = TokenVec>
Vec checked_tokens(const char* op, const at::Tensor& t, int64_t k, int64_t vocab,
                   const char* target_name = "target_probs");

int64_t checked_k(const char* op, const at::Tensor& target, const char* name = "target_probs");

inline sv::Elem elem_of(const at::Tensor& t) {
  return t.scalar_type() == at::kHalf ? sv::Elem::kF16 : t.scalar_type() == at::kBFloat16 ? sv::Elem::kBF16 : sv::Elem::kF32;
}

inline sv::Rows rows_of(const at::Tensor& t) {
  return sv::Rows{t.data_ptr(), t.size(0) > 1 ? t.stride(0) : 0, elem_of(t)};
}

// Row i of a checked [R, V] tensor.
inline sv::RowRef row_of(const at::Tensor& t, int64_t i) { return rows_of(t).row(i); }

// The rows of a draft given as a tensor, or none (one-hot drafts, Note [One-hot drafts]).
inline sv::Rows draft_rows(const at::Tensor& draft) {
  return draft.defined() ? rows_of(draft) : sv::Rows{nullptr, 0};
}

// Turns a malformed row found by a round into the exception the user sees. Probability
// rows (accept) and logits rows (the warping ops) are named by their arguments.
struct RowNames {
  const char* target;
  const char* draft;
  bool logits;
};
constexpr RowNames kProbs{"target_probs", "draft_probs", false};
constexpr RowNames kLogits{"target_logits", "draft_logits", true};

void raise_if_bad(const char* op, const sv::Outcome& out, const RowNames& names = kProbs);

inline std::tuple<c10::SymInt, c10::SymInt> result(const sv::Outcome& out) {
  return {c10::SymInt(out.n_accepted), c10::SymInt(out.token)};
}

// Note [Block verification]'s method by name.
sv::Method checked_method(const char* op, c10::string_view method);

// Uniforms given by the caller: float64, `count` of them (shape [count], or [] for one when
// `scalar`), each in [0, 1). Returns them contiguous.
at::Tensor checked_uniforms(const char* op, const at::Tensor& uniforms, int64_t count,
                            const std::string& expected, bool scalar = false);

}  // namespace spec_verify_versioned
