// The argument checks of every op, written once over TensorView: what each op checks before
// the core sees raw pointers, in the ops' order, with the messages the tests hold them to.
// Everything here is torch-free; ops.h calls it from both builds.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "view.h"

namespace spec_verify_binding __attribute__((visibility("hidden"))) {

// The path in use; a bad SPEC_VERIFY_ISA raises a ValueError here.
const sv::KernelTable& kernels();

// On the CPU (a ValueError) and dense (a TypeError: sparse, mkldnn and nested tensors reach the
// kernels through their own dispatch keys, so that they get this message).
void check_cpu(const char* op, const char* name, const TensorView& t);
// Rows are float32, float16 or bfloat16 (Note [Half rows]), each tensor its own.
void check_row_dtype(const char* op, const char* name, const TensorView& t);
// A [rows, V] row tensor (`expected` names the shape, e.g. "[K+1, V]").
void check_rows(const char* op, const char* name, const TensorView& t, int64_t rows, int64_t vocab,
                const char* expected);
// A logits tensor [V] or [R, V] with V >= 1.
void check_logits(const char* op, const char* name, const TensorView& t);
// K of a [K+1, V] target with K >= 0 and V >= 1.
int64_t checked_k(const char* op, const TensorView& target, const char* name = "target_probs");
// The K draft tokens as int64 values in [0, V), read in place at their stride.
std::vector<int64_t> checked_tokens(const char* op, const TensorView& t, int64_t k, int64_t vocab,
                                    const char* target_name = "target_probs");
// `count` float64 uniforms in [0, 1) ([count], named "[<what>] = [count]<note>" in messages,
// or [] for one when `scalar`): their values, in place when contiguous, else copied into *copy.
const double* checked_uniforms(const char* op, const TensorView& uniforms, int64_t count, const char* what,
                               const char* note, bool scalar, std::vector<double>* copy);
// An op that draws, called without its uniforms where it needs them.
[[noreturn]] void missing_uniforms(const char* op, int64_t count);
// Note [Block verification]'s method by name.
sv::Method checked_method(const char* op, std::string_view method);

// The warping parameters (Note [Warping]), one rule and one message per mistake: the empty
// string and *out filled, or what is wrong ("temperature must be ...").
std::string params_problem(double temperature, int64_t top_k, double top_p, double min_p, sv::WarpParams* out);
sv::WarpParams checked_params(const char* op, double temperature, int64_t top_k, double top_p, double min_p);

// The rows of a checked dense tensor with unit stride along V ([V] is one row).
sv::Rows rows_of(const TensorView& t);

// A malformed row found by a round, as the exception the user sees; rows are named by
// their arguments.
struct RowNames {
  const char* target;
  const char* draft;
  bool logits;
};
constexpr RowNames kProbs{"target_probs", "draft_probs", false};
constexpr RowNames kLogits{"target_logits", "draft_logits", true};
void raise_if_bad(const char* op, const sv::Outcome& out, const RowNames& names = kProbs);

// A tree's parents: a 1-D integer tensor, or a list of ints (the _ints ops).
struct IntsArg {
  const TensorView* tensor;
  const int64_t* list;
  size_t size;
};

// A tree (Note [Tree verification]): rows [N+1, V], tokens in [0, V), parents[j] in [-1, j),
// and with no draft rows (deterministic children, sampled) distinct tokens among siblings.
struct TreeShape {
  int64_t n, vocab;
  std::vector<int64_t> tokens, parents;
};
TreeShape checked_tree(const char* op, const RowNames& names, const TensorView& target, const TensorView* draft,
                       const TensorView& tokens, const IntsArg& parents, bool greedy);

// A batch (Note [Ragged batches]): the method, the running totals, the rows and the tokens.
struct BatchShape {
  std::vector<int64_t> tokens, cu;
  int64_t batch = 0, vocab = 0, width = 1, n = 0;
  sv::Method method = sv::Method::kToken;
};
BatchShape checked_batch(const char* op, const RowNames& names, const TensorView& target,
                         const TensorView& draft_tokens, const TensorView& cu_num_draft_tokens, const TensorView* draft,
                         std::string_view method);
// The per-sequence warping parameters ([B] tensors or none), each by params_problem's rule.
std::vector<sv::WarpParams> checked_batch_params(const char* op, const TensorView* temperature,
                                                 const TensorView* top_k, const TensorView* top_p,
                                                 const TensorView* min_p, int64_t batch);
// The greedy flags of verify_batch_probs (null: none).
std::unique_ptr<bool[]> checked_greedy(const char* op, const TensorView* greedy, int64_t batch);
// Whether the values of a dense tensor of this dtype can be read in place (else ops.h converts
// it to float64 first).
bool readable(DType t);

}  // namespace spec_verify_binding
