// The stable binding's kernels (torch_binding.cpp registers them). The ops that take a
// Generator? are here as their `_drawn_` forms: the same arguments and checks, plus the
// uniforms the Python layer drew from the generator (_stable.py): the stable ABI of torch
// 2.13 passes a Generator but cannot draw from it or save and restore its state. Given
// `uniforms` (the Python API's *_with_uniforms), a `_drawn_` form runs the op's
// *_with_uniforms function below, which checks them and names them in its messages.
#pragma once

#include <torch/csrc/stable/generator.h>
#include <torch/csrc/stable/stableivalue_conversions.h>

#include <optional>
#include <string>
#include <string_view>
#include <tuple>
#include <vector>

#include "checks.h"

namespace spec_verify_stable __attribute__((visibility("hidden"))) {

using Gen = std::optional<torch::stable::Generator>;
using GenList = std::optional<std::vector<std::optional<torch::stable::Generator>>>;
using OptTensor = std::optional<Tensor>;
using Pair = std::tuple<int64_t, int64_t>;
using Path = std::tuple<Tensor, int64_t>;

// A `str` argument of a boxed kernel (the ops' `method`). TORCH_BOX turns a std::string_view
// parameter into a std::string made by torch 2.13's to<std::string>, which copies the text
// into a `new std::string` it never deletes: 48 bytes of heap lost per call, and on a heap
// that other calls grow and trim, about a page of resident memory per call (issue 54). This
// type's conversion (below) copies the text and frees torch's handle, owning nothing else.
struct StrArg {
  std::string text;
  operator std::string_view() const { return text; }
};

// The generator's device check of torch_binding.cpp's with_uniforms, at the point it makes it.
void check_generator(const char* op, const Gen& generator);
// Whether a `_drawn_` op's `uniforms` were given (they decide the round; nothing was drawn);
// a generator beside them is refused.
bool uniforms_given(const char* op, const OptTensor& uniforms, const Gen& generator);
// The uniforms a `_drawn_` op was handed: `count` float64 values (the Python layer's draw).
const double* drawn(const char* op, const Tensor& uniforms, int64_t count);

std::tuple<int64_t, int64_t> verify_greedy(const Tensor& target_probs, const Tensor& draft_tokens);
Pair accept_with_uniforms(const Tensor& target_probs, const OptTensor& draft_probs, const Tensor& draft_tokens,
                          const Tensor& uniforms, std::string_view method);
Pair drawn_accept(const Tensor& target_probs, const OptTensor& draft_probs, const Tensor& draft_tokens,
                  const Gen& generator, const StrArg& method, const OptTensor& given, const Tensor& uniforms);

Tensor warp(const Tensor& logits, double temperature, int64_t top_k, double top_p, double min_p);
Tensor sample_with_uniforms(const Tensor& logits, const Tensor& uniforms, double temperature, int64_t top_k,
                            double top_p, double min_p);
Tensor drawn_sample(const Tensor& logits, double temperature, int64_t top_k, double top_p, double min_p,
                    const Gen& generator, const OptTensor& given, const Tensor& uniforms);
Pair accept_logits_with_uniforms(const Tensor& target_logits, const OptTensor& draft_logits,
                                 const Tensor& draft_tokens, const Tensor& uniforms, double temperature,
                                 int64_t top_k, double top_p, double min_p, std::string_view method);
Pair drawn_accept_logits(const Tensor& target_logits, const OptTensor& draft_logits, const Tensor& draft_tokens,
                         double temperature, int64_t top_k, double top_p, double min_p, const Gen& generator,
                         const StrArg& method, const OptTensor& given, const Tensor& uniforms);

Tensor row_masses(const Tensor& rows);

}  // namespace spec_verify_stable

namespace spec_verify_stable __attribute__((visibility("hidden"))) {

// Trees (Note [Tree verification]); Parents: a tensor, or a list of ints (the _ints ops).
using IntList = std::vector<int64_t>;
template <class Parents>
Path tree_logits_with_uniforms(const char* op, const Tensor& target_logits, const Tensor& tokens,
                               const Parents& parents, const OptTensor& draft_logits, const Tensor& uniforms,
                               double temperature, int64_t top_k, double top_p, double min_p);
template <class Parents>
Path drawn_tree_logits(const char* op, const Tensor& target_logits, const Tensor& tokens, const Parents& parents,
                       const OptTensor& draft_logits, double temperature, int64_t top_k, double top_p, double min_p,
                       const Gen& generator, const OptTensor& given, const Tensor& uniforms);
template <class Parents>
Path tree_probs_with_uniforms(const char* op, const Tensor& target_probs, const Tensor& tokens, const Parents& parents,
                              const OptTensor& draft_probs, const Tensor& uniforms, bool greedy);
template <class Parents>
Path drawn_tree_probs(const char* op, const Tensor& target_probs, const Tensor& tokens, const Parents& parents,
                      const OptTensor& draft_probs, bool greedy, const Gen& generator, const OptTensor& given,
                      const Tensor& uniforms);

// Batches (Note [Ragged batches]); the `_drawn_` forms take the uniforms of every sampled
// sequence in batch order, K_b + 1 each (greedy sequences draw nothing).
std::tuple<Tensor, Tensor> drawn_verify_batch(const Tensor& target_logits, const Tensor& draft_tokens,
                                              const Tensor& cu_num_draft_tokens, const OptTensor& draft_logits,
                                              const OptTensor& temperature, const OptTensor& top_k,
                                              const OptTensor& top_p, const OptTensor& min_p, const StrArg& method,
                                              const Gen& generator, const GenList& generators,
                                              const Tensor& uniforms);
std::tuple<Tensor, Tensor> drawn_verify_batch_probs(const Tensor& target_probs, const Tensor& draft_tokens,
                                                    const Tensor& cu_num_draft_tokens, const OptTensor& draft_probs,
                                                    const OptTensor& greedy, const StrArg& method,
                                                    const Gen& generator, const GenList& generators,
                                                    const Tensor& uniforms);

}  // namespace spec_verify_stable

// StrArg from a boxed kernel's stack: the text of torch's string handle, which is then freed
// (as torch's own conversion does, without its leaked copy).
HIDDEN_NAMESPACE_BEGIN(torch, stable, detail)
template <>
struct ToImpl<spec_verify_stable::StrArg> {
  static spec_verify_stable::StrArg call(StableIValue val, [[maybe_unused]] uint64_t extension_build_version,
                                         [[maybe_unused]] bool is_internal) {
    StringHandle handle = torch::stable::detail::to<StringHandle>(val);
    size_t length = 0;
    const char* data = nullptr;
    spec_verify_stable::StrArg out;
    try {
      STABLE_TORCH_ERROR_CODE_CHECK(torch_string_length(handle, &length));
      STABLE_TORCH_ERROR_CODE_CHECK(torch_string_c_str(handle, &data));
      out.text.assign(data, length);
    } catch (...) {
      torch_delete_string(handle);
      throw;
    }
    STABLE_TORCH_ERROR_CODE_CHECK(torch_delete_string(handle));
    return out;
  }
};
HIDDEN_NAMESPACE_END(torch, stable, detail)
