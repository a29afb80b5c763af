// The versioned binding (ATen API; the torch212 variants, and torch210 for the emulated
// aarch64 tests): the registry of op schemas and kernels. The kernels are in versioned/:
// logits.cpp, trees.cpp and batches.cpp, their checks in checks.cpp and logits_args.cpp, the
// generators' draws in generators.h. Everything below the binding sees raw pointers.
#include <torch/library.h>

#include <stdexcept>
#include <string>
#include <vector>

#include "registration.h"
#include "checks.h"
#include "ops.h"

namespace sv = spec_verify;

std::string isa() { return spec_verify_versioned::kernels().name; }

std::vector<std::string> available_isas() { return sv::available_isas(); }

void force_isa(const std::string& name) {
  try {
    sv::force_isa(name);
  } catch (const std::invalid_argument& e) {
    TORCH_CHECK_VALUE(false, "spec_verify: ", e.what());
  }
}

TORCH_LIBRARY_EXPAND(TORCH_EXTENSION_NAME, ops) {
  ops.def("verify_greedy(Tensor target_probs, Tensor draft_tokens) -> (SymInt, SymInt)");
  ops.impl("verify_greedy", c10::kCPU, &verify_greedy);
  ops.def("accept(Tensor target_probs, Tensor? draft_probs, Tensor draft_tokens, "
          "Generator? generator=None, str method=\"token\", Tensor? uniforms=None) -> (SymInt, SymInt)");
  ops.impl("accept", c10::kCPU, &accept);
  ops.def("warp(Tensor logits, float temperature=1.0, int top_k=0, float top_p=1.0, "
          "float min_p=0.0) -> Tensor");
  ops.impl("warp", c10::kCPU, &warp);
  ops.def("sample(Tensor logits, float temperature=1.0, int top_k=0, float top_p=1.0, "
          "float min_p=0.0, Generator? generator=None, Tensor? uniforms=None) -> Tensor");
  ops.impl("sample", c10::kCPU, &sample);
  ops.def("accept_logits(Tensor target_logits, Tensor? draft_logits, Tensor draft_tokens, "
          "float temperature=1.0, int top_k=0, float top_p=1.0, float min_p=0.0, "
          "Generator? generator=None, str method=\"token\", Tensor? uniforms=None) -> (SymInt, SymInt)");
  ops.impl("accept_logits", c10::kCPU, &accept_logits);
  ops.def("verify_tree(Tensor target_logits, Tensor tokens, Tensor parents, Tensor? draft_logits=None, "
          "float temperature=1.0, int top_k=0, float top_p=1.0, float min_p=0.0, "
          "Generator? generator=None, Tensor? uniforms=None) -> (Tensor, SymInt)");
  ops.impl("verify_tree", c10::kCPU, &verify_tree);
  ops.def("verify_tree_probs(Tensor target_probs, Tensor tokens, Tensor parents, Tensor? draft_probs=None, "
          "bool greedy=False, Generator? generator=None, Tensor? uniforms=None) -> (Tensor, SymInt)");
  ops.impl("verify_tree_probs", c10::kCPU, &verify_tree_probs);
  // The tree ops again with `parents` as a list of ints (int[]): the wrappers pass a Python
  // list through these, without a tensor made of it (about 1 us a call). Separate names, not
  // overloads: opcheck and users' code take the public ops' packets as single schemas.
  ops.def("_verify_tree_ints(Tensor target_logits, Tensor tokens, int[] parents, Tensor? draft_logits=None, "
          "float temperature=1.0, int top_k=0, float top_p=1.0, float min_p=0.0, "
          "Generator? generator=None, Tensor? uniforms=None) -> (Tensor, SymInt)");
  ops.impl("_verify_tree_ints", c10::kCPU, &verify_tree_ints);
  ops.def("_verify_tree_probs_ints(Tensor target_probs, Tensor tokens, int[] parents, Tensor? draft_probs=None, "
          "bool greedy=False, Generator? generator=None, Tensor? uniforms=None) -> (Tensor, SymInt)");
  ops.impl("_verify_tree_probs_ints", c10::kCPU, &verify_tree_probs_ints);
  ops.def("verify_batch(Tensor target_logits, Tensor draft_tokens, Tensor cu_num_draft_tokens, "
          "Tensor? draft_logits=None, Tensor? temperature=None, Tensor? top_k=None, Tensor? top_p=None, "
          "Tensor? min_p=None, str method=\"token\", Generator? generator=None, "
          "Generator?[]? generators=None) -> (Tensor, Tensor)");
  ops.impl("verify_batch", c10::kCPU, &verify_batch);
  ops.def("verify_batch_probs(Tensor target_probs, Tensor draft_tokens, Tensor cu_num_draft_tokens, "
          "Tensor? draft_probs=None, Tensor? greedy=None, str method=\"token\", Generator? generator=None, "
          "Generator?[]? generators=None) -> (Tensor, Tensor)");
  ops.impl("verify_batch_probs", c10::kCPU, &verify_batch_probs);
  // Internal ops, for tests and benchmarks: private (leading underscore) names.
  ops.def("_row_masses(Tensor rows) -> Tensor");
  ops.impl("_row_masses", c10::kCPU, &row_masses);
  // The tensor checks, for tensors of other layouts (see check_cpu in versioned/checks.cpp).
  for (const c10::DispatchKey key : {c10::DispatchKey::SparseCPU, c10::DispatchKey::SparseCsrCPU,
                                     c10::DispatchKey::MkldnnCPU, c10::DispatchKey::NestedTensorCPU}) {
    ops.impl("verify_greedy", key, &verify_greedy);
    ops.impl("accept", key, &accept);
    ops.impl("warp", key, &warp);
    ops.impl("sample", key, &sample);
    ops.impl("accept_logits", key, &accept_logits);
    ops.impl("verify_batch", key, &verify_batch);
    ops.impl("verify_batch_probs", key, &verify_batch_probs);
    ops.impl("_row_masses", key, &row_masses);
    ops.impl("verify_tree", key, &verify_tree);
    ops.impl("verify_tree_probs", key, &verify_tree_probs);
    ops.impl("_verify_tree_ints", key, &verify_tree_ints);
    ops.impl("_verify_tree_probs_ints", key, &verify_tree_probs_ints);
  }
  ops.def("isa() -> str", &isa);
  ops.def("available_isas() -> str[]", &available_isas);
  ops.def("_force_isa(str name) -> ()", &force_isa);
}

REGISTER_EXTENSION(TORCH_EXTENSION_NAME)