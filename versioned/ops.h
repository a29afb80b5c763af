// The versioned binding's op kernels (ATen API), as torch_binding.cpp registers them:
// logits.cpp (the probability-row ops, warping and the ops on logits), trees.cpp and
// batches.cpp.
#pragma once

#include <optional>
#include <string>
#include <tuple>
#include <vector>

#include <ATen/core/Generator.h>
#include <ATen/core/List.h>
#include <ATen/core/Tensor.h>
#include <c10/core/SymInt.h>
#include <c10/util/string_view.h>

// Each op that draws takes `Tensor? uniforms=None` last: given, they are the round's uniforms
// (the Python API's *_with_uniforms) and nothing is drawn; a generator beside them is refused.

std::tuple<c10::SymInt, c10::SymInt> verify_greedy(const at::Tensor& target_probs,
                                                   const at::Tensor& draft_tokens);

std::tuple<c10::SymInt, c10::SymInt> accept(const at::Tensor& target_probs,
                                            const std::optional<at::Tensor>& draft_probs,
                                            const at::Tensor& draft_tokens,
                                            const std::optional<at::Generator>& generator,
                                            c10::string_view method,
                                            const std::optional<at::Tensor>& uniforms);

at::Tensor warp(const at::Tensor& logits, double temperature, int64_t top_k, double top_p,
                double min_p);

at::Tensor sample(const at::Tensor& logits, double temperature, int64_t top_k, double top_p,
                  double min_p, const std::optional<at::Generator>& generator,
                  const std::optional<at::Tensor>& uniforms);

std::tuple<c10::SymInt, c10::SymInt> accept_logits(const at::Tensor& target_logits,
                                                   const std::optional<at::Tensor>& draft_logits,
                                                   const at::Tensor& draft_tokens, double temperature,
                                                   int64_t top_k, double top_p, double min_p,
                                                   const std::optional<at::Generator>& generator,
                                                   c10::string_view method,
                                                   const std::optional<at::Tensor>& uniforms);

std::tuple<at::Tensor, c10::SymInt> verify_tree(const at::Tensor& target_logits, const at::Tensor& tokens,
                                                const at::Tensor& parents,
                                                const std::optional<at::Tensor>& draft_logits, double temperature,
                                                int64_t top_k, double top_p, double min_p,
                                                const std::optional<at::Generator>& generator,
                                                const std::optional<at::Tensor>& uniforms);

std::tuple<at::Tensor, c10::SymInt> verify_tree_probs(const at::Tensor& target_probs, const at::Tensor& tokens,
                                                      const at::Tensor& parents,
                                                      const std::optional<at::Tensor>& draft_probs, bool greedy,
                                                      const std::optional<at::Generator>& generator,
                                                      const std::optional<at::Tensor>& uniforms);

// The two tree ops with parents as a list of ints (the ops _verify_tree_ints, _verify_tree_probs_ints).
std::tuple<at::Tensor, c10::SymInt> verify_tree_ints(const at::Tensor& target_logits, const at::Tensor& tokens,
                                                     at::IntArrayRef parents,
                                                     const std::optional<at::Tensor>& draft_logits,
                                                     double temperature, int64_t top_k, double top_p, double min_p,
                                                     const std::optional<at::Generator>& generator,
                                                     const std::optional<at::Tensor>& uniforms);
std::tuple<at::Tensor, c10::SymInt> verify_tree_probs_ints(const at::Tensor& target_probs, const at::Tensor& tokens,
                                                           at::IntArrayRef parents,
                                                           const std::optional<at::Tensor>& draft_probs, bool greedy,
                                                           const std::optional<at::Generator>& generator,
                                                           const std::optional<at::Tensor>& uniforms);

// Note [Ragged batches] (csrc/batch.h): B sequences in vLLM's layout, over threads.
std::tuple<at::Tensor, at::Tensor> verify_batch(
    const at::Tensor& target_logits, const at::Tensor& draft_tokens, const at::Tensor& cu_num_draft_tokens,
    const std::optional<at::Tensor>& draft_logits, const std::optional<at::Tensor>& temperature,
    const std::optional<at::Tensor>& top_k, const std::optional<at::Tensor>& top_p,
    const std::optional<at::Tensor>& min_p, c10::string_view method, const std::optional<at::Generator>& generator,
    const std::optional<c10::List<std::optional<at::Generator>>>& generators);

std::tuple<at::Tensor, at::Tensor> verify_batch_probs(
    const at::Tensor& target_probs, const at::Tensor& draft_tokens, const at::Tensor& cu_num_draft_tokens,
    const std::optional<at::Tensor>& draft_probs, const std::optional<at::Tensor>& greedy,
    c10::string_view method, const std::optional<at::Generator>& generator,
    const std::optional<c10::List<std::optional<at::Generator>>>& generators);

at::Tensor row_masses(const at::Tensor& rows);

std::string isa();
std::vector<std::string> available_isas();
void force_isa(const std::string& name);
