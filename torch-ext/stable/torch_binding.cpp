// The binding on the LibTorch stable ABI (torch/csrc/stable, torch/headeronly): the registry
// of schemas and kernels. Built by `scripts/build.py --stable-abi 2.13` into
// torch-stable-abi213-cpu-<arch>-linux, which `kernels` loads on torch 2.13 and every later
// torch. The schemas are versioned/torch_binding.cpp's, word for word
// (tests/test_stable_abi.py compares them); the kernels are in logits.cpp, trees.cpp and
// batch.cpp, their checks in checks.cpp and logits_args.cpp.
//
// The stable ABI of torch 2.13 passes a Generator (torch::stable::Generator: a handle and its
// device) but offers no way to draw from it, nor to save and restore its state. So the ops
// that take `Generator?` are defined here with their schemas and get their kernels in Python
// (_stable.py): it draws the uniforms as torch_binding.cpp draws them (one float64 per
// uniform, in order, the stream torch.rand gives), calls the op's `_drawn_` form below with
// them, and puts the generator back if the call raises.
#include <torch/csrc/stable/library.h>

#include "ops.h"
#include "registration.h"

namespace svs = spec_verify_stable;
namespace sv = spec_verify;
using svs::Gen;
using svs::IntList;
using svs::OptTensor;
using svs::Path;
using svs::Tensor;

namespace {

// Every schema of torch_binding.cpp's TORCH_LIBRARY block, in its order.
constexpr const char* kSchemas[] = {
    "verify_greedy(Tensor target_probs, Tensor draft_tokens) -> (SymInt, SymInt)",
    "accept(Tensor target_probs, Tensor? draft_probs, Tensor draft_tokens, Generator? generator=None, str method=\"token\", Tensor? uniforms=None) -> (SymInt, SymInt)",
    "warp(Tensor logits, float temperature=1.0, int top_k=0, float top_p=1.0, float min_p=0.0) -> Tensor",
    "sample(Tensor logits, float temperature=1.0, int top_k=0, float top_p=1.0, float min_p=0.0, Generator? generator=None, Tensor? uniforms=None) -> Tensor",
    "accept_logits(Tensor target_logits, Tensor? draft_logits, Tensor draft_tokens, float temperature=1.0, int top_k=0, float top_p=1.0, float min_p=0.0, Generator? generator=None, str method=\"token\", Tensor? uniforms=None) -> (SymInt, SymInt)",
    "verify_tree(Tensor target_logits, Tensor tokens, Tensor parents, Tensor? draft_logits=None, float temperature=1.0, int top_k=0, float top_p=1.0, float min_p=0.0, Generator? generator=None, Tensor? uniforms=None) -> (Tensor, SymInt)",
    "verify_tree_probs(Tensor target_probs, Tensor tokens, Tensor parents, Tensor? draft_probs=None, bool greedy=False, Generator? generator=None, Tensor? uniforms=None) -> (Tensor, SymInt)",
    "_verify_tree_ints(Tensor target_logits, Tensor tokens, int[] parents, Tensor? draft_logits=None, float temperature=1.0, int top_k=0, float top_p=1.0, float min_p=0.0, Generator? generator=None, Tensor? uniforms=None) -> (Tensor, SymInt)",
    "_verify_tree_probs_ints(Tensor target_probs, Tensor tokens, int[] parents, Tensor? draft_probs=None, bool greedy=False, Generator? generator=None, Tensor? uniforms=None) -> (Tensor, SymInt)",
    "verify_batch(Tensor target_logits, Tensor draft_tokens, Tensor cu_num_draft_tokens, Tensor? draft_logits=None, Tensor? temperature=None, Tensor? top_k=None, Tensor? top_p=None, Tensor? min_p=None, str method=\"token\", Generator? generator=None, Generator?[]? generators=None) -> (Tensor, Tensor)",
    "verify_batch_probs(Tensor target_probs, Tensor draft_tokens, Tensor cu_num_draft_tokens, Tensor? draft_probs=None, Tensor? greedy=None, str method=\"token\", Generator? generator=None, Generator?[]? generators=None) -> (Tensor, Tensor)",
    "_row_masses(Tensor rows) -> Tensor",
    "isa() -> str",
    "available_isas() -> str[]",
    "_force_isa(str name) -> ()",
};

// The `_drawn_` forms of the ops that take a Generator: the same arguments (without defaults:
// _stable.py passes every one), then the uniforms.
constexpr const char* kDrawnSchemas[] = {
    "_drawn_accept(Tensor target_probs, Tensor? draft_probs, Tensor draft_tokens, Generator? generator, str method, Tensor? uniforms, Tensor _uniforms) -> (SymInt, SymInt)",
    "_drawn_sample(Tensor logits, float temperature, int top_k, float top_p, float min_p, Generator? generator, Tensor? uniforms, Tensor _uniforms) -> Tensor",
    "_drawn_accept_logits(Tensor target_logits, Tensor? draft_logits, Tensor draft_tokens, float temperature, int top_k, float top_p, float min_p, Generator? generator, str method, Tensor? uniforms, Tensor _uniforms) -> (SymInt, SymInt)",
    "_drawn_verify_tree(Tensor target_logits, Tensor tokens, Tensor parents, Tensor? draft_logits, float temperature, int top_k, float top_p, float min_p, Generator? generator, Tensor? uniforms, Tensor _uniforms) -> (Tensor, SymInt)",
    "_drawn_verify_tree_probs(Tensor target_probs, Tensor tokens, Tensor parents, Tensor? draft_probs, bool greedy, Generator? generator, Tensor? uniforms, Tensor _uniforms) -> (Tensor, SymInt)",
    "_drawn_verify_tree_ints(Tensor target_logits, Tensor tokens, int[] parents, Tensor? draft_logits, float temperature, int top_k, float top_p, float min_p, Generator? generator, Tensor? uniforms, Tensor _uniforms) -> (Tensor, SymInt)",
    "_drawn_verify_tree_probs_ints(Tensor target_probs, Tensor tokens, int[] parents, Tensor? draft_probs, bool greedy, Generator? generator, Tensor? uniforms, Tensor _uniforms) -> (Tensor, SymInt)",
    "_drawn_verify_batch(Tensor target_logits, Tensor draft_tokens, Tensor cu_num_draft_tokens, Tensor? draft_logits, Tensor? temperature, Tensor? top_k, Tensor? top_p, Tensor? min_p, str method, Generator? generator, Generator?[]? generators, Tensor _uniforms) -> (Tensor, Tensor)",
    "_drawn_verify_batch_probs(Tensor target_probs, Tensor draft_tokens, Tensor cu_num_draft_tokens, Tensor? draft_probs, Tensor? greedy, str method, Generator? generator, Generator?[]? generators, Tensor _uniforms) -> (Tensor, Tensor)",
};

Path drawn_verify_tree(const Tensor& t, const Tensor& tokens, const Tensor& parents, const OptTensor& d,
                       double temperature, int64_t top_k, double top_p, double min_p, const Gen& g, const OptTensor& given,
                       const Tensor& u) {
  return svs::drawn_tree_logits("verify_tree", t, tokens, parents, d, temperature, top_k, top_p, min_p, g, given, u);
}
Path drawn_verify_tree_ints(const Tensor& t, const Tensor& tokens, const IntList& parents, const OptTensor& d,
                            double temperature, int64_t top_k, double top_p, double min_p, const Gen& g,
                            const OptTensor& given, const Tensor& u) {
  return svs::drawn_tree_logits("verify_tree", t, tokens, parents, d, temperature, top_k, top_p, min_p, g, given, u);
}
Path drawn_verify_tree_probs(const Tensor& t, const Tensor& tokens, const Tensor& parents, const OptTensor& d,
                             bool greedy, const Gen& g, const OptTensor& given, const Tensor& u) {
  return svs::drawn_tree_probs("verify_tree_probs", t, tokens, parents, d, greedy, g, given, u);
}
Path drawn_verify_tree_probs_ints(const Tensor& t, const Tensor& tokens, const IntList& parents, const OptTensor& d,
                                  bool greedy, const Gen& g, const OptTensor& given, const Tensor& u) {
  return svs::drawn_tree_probs("verify_tree_probs", t, tokens, parents, d, greedy, g, given, u);
}

std::string isa() { return svs::kernels().name; }

std::vector<std::string> available_isas() { return sv::available_isas(); }

void force_isa(std::string name) {
  try {
    sv::force_isa(name);
  } catch (const std::invalid_argument& e) {
    throw std::invalid_argument(svs::str("spec_verify: ", e.what()));
  }
}

// The kernels of the tensor ops, for one dispatch key.
void register_tensor_kernels(torch::stable::detail::StableLibrary& ops) {
  ops.impl("verify_greedy", TORCH_BOX(&svs::verify_greedy));
  ops.impl("warp", TORCH_BOX(&svs::warp));
  ops.impl("_row_masses", TORCH_BOX(&svs::row_masses));
  ops.impl("_drawn_accept", TORCH_BOX(&svs::drawn_accept));
  ops.impl("_drawn_sample", TORCH_BOX(&svs::drawn_sample));
  ops.impl("_drawn_accept_logits", TORCH_BOX(&svs::drawn_accept_logits));
  ops.impl("_drawn_verify_tree", TORCH_BOX(&drawn_verify_tree));
  ops.impl("_drawn_verify_tree_probs", TORCH_BOX(&drawn_verify_tree_probs));
  ops.impl("_drawn_verify_tree_ints", TORCH_BOX(&drawn_verify_tree_ints));
  ops.impl("_drawn_verify_tree_probs_ints", TORCH_BOX(&drawn_verify_tree_probs_ints));
  ops.impl("_drawn_verify_batch", TORCH_BOX(&svs::drawn_verify_batch));
  ops.impl("_drawn_verify_batch_probs", TORCH_BOX(&svs::drawn_verify_batch_probs));
}

}  // namespace

STABLE_TORCH_LIBRARY_EXPAND(TORCH_EXTENSION_NAME, ops) {
  for (const char* schema : kSchemas) ops.def(schema);
  for (const char* schema : kDrawnSchemas) ops.def(schema);
}

STABLE_TORCH_LIBRARY_IMPL_EXPAND(TORCH_EXTENSION_NAME, CPU, ops) { register_tensor_kernels(ops); }

// The tensor checks for tensors of other layouts (see check_cpu), as torch_binding.cpp
// registers them. NestedTensorCPU is left out: the stable ABI has no is_nested(), and a
// nested tensor's sizes cannot be read through it; such a call meets torch's own error.
STABLE_TORCH_LIBRARY_IMPL_EXPAND(TORCH_EXTENSION_NAME, SparseCPU, ops) { register_tensor_kernels(ops); }
STABLE_TORCH_LIBRARY_IMPL_EXPAND(TORCH_EXTENSION_NAME, SparseCsrCPU, ops) { register_tensor_kernels(ops); }
STABLE_TORCH_LIBRARY_IMPL_EXPAND(TORCH_EXTENSION_NAME, MkldnnCPU, ops) { register_tensor_kernels(ops); }

// The ops without tensors: one kernel for every backend.
STABLE_TORCH_LIBRARY_IMPL_EXPAND(TORCH_EXTENSION_NAME, CompositeExplicitAutograd, ops) {
  ops.impl("isa", TORCH_BOX(&isa));
  ops.impl("available_isas", TORCH_BOX(&available_isas));
  ops.impl("_force_isa", TORCH_BOX(&force_isa));
}

REGISTER_EXTENSION(TORCH_EXTENSION_NAME)
