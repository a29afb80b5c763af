#pragma once

#include <optional>
#include <string>
#include <tuple>
#include <vector>

#include <ATen/core/Generator.h>
#include <ATen/core/Tensor.h>
#include <c10/core/SymInt.h>

std::tuple<c10::SymInt, c10::SymInt> verify_greedy(const at::Tensor& target_probs,
                                                   const at::Tensor& draft_tokens);

std::tuple<c10::SymInt, c10::SymInt> accept(const at::Tensor& target_probs,
                                            const at::Tensor& draft_probs,
                                            const at::Tensor& draft_tokens,
                                            const std::optional<at::Generator>& generator);

std::tuple<c10::SymInt, c10::SymInt> accept_with_uniforms(const at::Tensor& target_probs,
                                                          const at::Tensor& draft_probs,
                                                          const at::Tensor& draft_tokens,
                                                          const at::Tensor& uniforms);

at::Tensor row_masses(const at::Tensor& rows);

std::string isa();
std::vector<std::string> available_isas();
void force_isa(const std::string& name);
