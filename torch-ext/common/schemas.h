// The op schemas, the one list both builds register (torch-ext/stable/torch_binding.cpp and
// versioned/torch_binding.cpp; tests/test_stable_abi.py holds both to it and to what each
// build registers). The ops that sample take `Tensor? uniforms` where they took a generator:
// they draw nothing (the Python layer draws: spec_verify/_uniforms.py). The tree ops' _ints
// twins take `parents` as int[], so a Python list reaches them without a tensor made of it;
// separate names, not overloads, since opcheck and users' code take the public ops' packets
// as single schemas. Internal ops, for tests and benchmarks, have private names.
#pragma once

namespace spec_verify_binding {

constexpr const char* kSchemas[] = {
    "verify_greedy(Tensor target_probs, Tensor draft_tokens) -> (SymInt, SymInt)",
    "accept(Tensor target_probs, Tensor? draft_probs, Tensor draft_tokens, Tensor? uniforms=None, "
    "str method=\"token\") -> (SymInt, SymInt)",
    "warp(Tensor logits, float temperature=1.0, int top_k=0, float top_p=1.0, float min_p=0.0) -> Tensor",
    "sample(Tensor logits, float temperature=1.0, int top_k=0, float top_p=1.0, float min_p=0.0, "
    "Tensor? uniforms=None) -> Tensor",
    "accept_logits(Tensor target_logits, Tensor? draft_logits, Tensor draft_tokens, float temperature=1.0, "
    "int top_k=0, float top_p=1.0, float min_p=0.0, Tensor? uniforms=None, str method=\"token\") -> (SymInt, SymInt)",
    "verify_tree(Tensor target_logits, Tensor tokens, Tensor parents, Tensor? draft_logits=None, "
    "float temperature=1.0, int top_k=0, float top_p=1.0, float min_p=0.0, Tensor? uniforms=None) -> (Tensor, SymInt)",
    "verify_tree_probs(Tensor target_probs, Tensor tokens, Tensor parents, Tensor? draft_probs=None, "
    "bool greedy=False, Tensor? uniforms=None) -> (Tensor, SymInt)",
    "_verify_tree_ints(Tensor target_logits, Tensor tokens, int[] parents, Tensor? draft_logits=None, "
    "float temperature=1.0, int top_k=0, float top_p=1.0, float min_p=0.0, Tensor? uniforms=None) -> (Tensor, SymInt)",
    "_verify_tree_probs_ints(Tensor target_probs, Tensor tokens, int[] parents, Tensor? draft_probs=None, "
    "bool greedy=False, Tensor? uniforms=None) -> (Tensor, SymInt)",
    "verify_batch(Tensor target_logits, Tensor draft_tokens, Tensor cu_num_draft_tokens, Tensor? draft_logits=None, "
    "Tensor? temperature=None, Tensor? top_k=None, Tensor? top_p=None, Tensor? min_p=None, str method=\"token\", "
    "Tensor? uniforms=None) -> (Tensor, Tensor)",
    "verify_batch_probs(Tensor target_probs, Tensor draft_tokens, Tensor cu_num_draft_tokens, "
    "Tensor? draft_probs=None, Tensor? greedy=None, str method=\"token\", Tensor? uniforms=None) -> (Tensor, Tensor)",
    "_row_masses(Tensor rows) -> Tensor",
    "isa() -> str",
    "available_isas() -> str[]",
    "_force_isa(str name) -> ()",
};

}  // namespace spec_verify_binding
