// The batch ops (Note [Ragged batches]): the versioned binding's kernels, as
// torch_binding.cpp registers them: the batch layout and the per-sequence parameters
// checked, the uniforms drawn (generators.h), the sequences run over torch's threads.
#include <ATen/ATen.h>
#include <ATen/EmptyTensor.h>
#include <ATen/Parallel.h>

#include <algorithm>
#include <memory>
#include <string>
#include <vector>

#include "generators.h"
#include "logits_args.h"
#include "ops.h"

using namespace spec_verify_versioned;  // the checks (checks.h, logits_args.h) and the draw

namespace {

// A batch's tensors, checked, and the per-sequence choices, owned here; view() is what the
// core reads.
struct BatchArgs {
  at::Tensor target, draft;  // draft undefined: one-hot drafts
  std::vector<int64_t> tokens, cu;
  std::vector<sv::WarpParams> params;  // the logits form
  std::unique_ptr<bool[]> greedy;      // the probabilities form (null: no greedy sequence)
  int64_t batch = 0, vocab = 0, width = 1;
  sv::Method method = sv::Method::kToken;

  sv::Batch view() const {
    return sv::Batch{rows_of(target), draft_rows(draft), tokens.data(), cu.data(), batch, vocab, method,
                     params.empty() ? nullptr : params.data(), greedy.get()};
  }
};

// The values of a 1-D tensor as Out, read in place for the usual dtypes (a conversion to a
// new tensor costs more than a small batch's whole round), else through a converted copy.
template <class Out>
std::vector<Out> values_1d(const at::Tensor& t) {
  std::vector<Out> out(static_cast<size_t>(t.size(0)));
  const auto read = [&](const auto* data) {
    for (int64_t i = 0; i < t.size(0); ++i) out[i] = static_cast<Out>(data[i * t.stride(0)]);
  };
  switch (t.scalar_type()) {
    case at::kLong: read(t.const_data_ptr<int64_t>()); break;
    case at::kInt: read(t.const_data_ptr<int32_t>()); break;
    case at::kFloat: read(t.const_data_ptr<float>()); break;
    case at::kDouble: read(t.const_data_ptr<double>()); break;
    default: {
      const bool integral = at::isIntegralType(t.scalar_type(), false);
      const at::Tensor c = t.to(integral ? at::kLong : at::kDouble).contiguous();
      if (integral) read(c.const_data_ptr<int64_t>());
      else read(c.const_data_ptr<double>());
    }
  }
  return out;
}

// A 1-D tensor of an integer dtype (not bool), as int64 values.
std::vector<int64_t> int_values(const char* op, const char* name, const at::Tensor& t, const char* expected) {
  check_cpu(op, name, t);
  TORCH_CHECK_TYPE(at::isIntegralType(t.scalar_type(), /*includeBool=*/false), "spec_verify.", op, ": ", name,
                   " must have an integer dtype, got ", dtype_name(t.scalar_type()));
  TORCH_CHECK_VALUE(t.dim() == 1, "spec_verify.", op, ": ", name, " must be 1-D ", expected, ", got shape ",
                    shape_of(t));
  return values_1d<int64_t>(t);
}

// Shapes, the running totals, the rows and the tokens of a batch (names: the rows' arguments).
void check_batch_layout(const char* op, const RowNames& names, const at::Tensor& target,
                        const at::Tensor& draft_tokens, const at::Tensor& cu_num_draft_tokens,
                        const std::optional<at::Tensor>& draft, c10::string_view method, BatchArgs& a) {
  a.method = checked_method(op, method);
  a.cu = int_values(op, "cu_num_draft_tokens", cu_num_draft_tokens, "[B]");
  a.batch = static_cast<int64_t>(a.cu.size());
  check_cpu(op, "draft_tokens", draft_tokens);
  TORCH_CHECK_VALUE(draft_tokens.dim() == 1, "spec_verify.", op, ": draft_tokens must be 1-D [N], got shape ",
                    shape_of(draft_tokens));
  const int64_t n = draft_tokens.size(0);
  int64_t max_k = 0;
  for (int64_t b = 0; b < a.batch; ++b) {
    const int64_t before = b > 0 ? a.cu[b - 1] : 0;
    TORCH_CHECK_VALUE(b > 0 || a.cu[0] >= 0, "spec_verify.", op, ": cu_num_draft_tokens[0] = ", a.cu[0],
                      " is negative; cu_num_draft_tokens holds running totals of the draft counts, without a "
                      "leading zero");
    TORCH_CHECK_VALUE(a.cu[b] >= before, "spec_verify.", op, ": cu_num_draft_tokens[", b, "] = ", a.cu[b],
                      " is less than cu_num_draft_tokens[", b - 1, "] = ", before,
                      "; running totals of the draft counts never decrease");
    max_k = std::max(max_k, a.cu[b] - before);
  }
  const int64_t last = a.batch > 0 ? a.cu[a.batch - 1] : 0;
  TORCH_CHECK_VALUE(last == n, "spec_verify.", op, ": cu_num_draft_tokens ends at ", last,
                    a.batch > 0 ? "" : " (B = 0)", " but draft_tokens holds N = ", n,
                    " tokens; the last running total is the number of draft tokens");
  a.width = max_k + 1;
  check_cpu(op, names.target, target);
  TORCH_CHECK_VALUE(target.dim() == 2 && target.size(1) >= 1, "spec_verify.", op, ": ", names.target,
                    " must be 2-D [N + B, V] with V >= 1, got shape ", shape_of(target));
  a.vocab = target.size(1);
  TORCH_CHECK_VALUE(target.size(0) == n + a.batch, "spec_verify.", op, ": ", names.target,
                    " must have N + B = ", n + a.batch, " rows (N = ", n, " draft tokens, B = ", a.batch,
                    " sequences: K_b + 1 rows for sequence b), got shape ", shape_of(target));
  a.target = checked_rows(op, names.target, target, n + a.batch, a.vocab, "[N + B, V]");
  if (draft.has_value() && draft->defined()) {
    check_cpu(op, names.draft, *draft);
    TORCH_CHECK_VALUE(draft->dim() != 2 || draft->size(0) == n, "spec_verify.", op, ": ", names.draft,
                      " must have N = ", n, " rows, one per draft token, got shape ", shape_of(*draft));
    a.draft = checked_rows(op, names.draft, *draft, n, a.vocab, "[N, V]");
  }
  a.tokens = checked_tokens<std::vector<int64_t>>(op, draft_tokens, n, a.vocab);
}

// A per-sequence parameter tensor [B] (None: `fallback` for every sequence) as doubles;
// `integer`: an integer dtype (top_k), else any real dtype but bool.
std::vector<double> batch_param(const char* op, const char* name, const std::optional<at::Tensor>& t,
                                int64_t batch, double fallback, bool integer) {
  if (!t.has_value() || !t->defined()) return std::vector<double>(static_cast<size_t>(batch), fallback);
  check_cpu(op, name, *t);
  const at::ScalarType dtype = t->scalar_type();
  TORCH_CHECK_TYPE(integer ? at::isIntegralType(dtype, false)
                           : (at::isFloatingType(dtype) || at::isIntegralType(dtype, false)),
                   "spec_verify.", op, ": ", name, " must have ", integer ? "an integer" : "a real (not bool)",
                   " dtype, got ", dtype_name(dtype));
  TORCH_CHECK_VALUE(t->dim() == 1 && t->size(0) == batch, "spec_verify.", op, ": ", name,
                    " must have shape [B] = [", batch, "], one value per sequence, got ", shape_of(*t));
  return values_1d<double>(*t);
}

// The per-sequence warping parameters, each checked by checked_params's rules; a message
// names the sequence.
void check_batch_params(const char* op, const std::optional<at::Tensor>& temperature,
                        const std::optional<at::Tensor>& top_k, const std::optional<at::Tensor>& top_p,
                        const std::optional<at::Tensor>& min_p, BatchArgs& a) {
  const std::vector<double> t = batch_param(op, "temperature", temperature, a.batch, 1.0, false);
  const std::vector<double> p = batch_param(op, "top_p", top_p, a.batch, 1.0, false);
  const std::vector<double> m = batch_param(op, "min_p", min_p, a.batch, 0.0, false);
  std::vector<int64_t> k(static_cast<size_t>(a.batch), 0);
  if (top_k.has_value() && top_k->defined()) {
    batch_param(op, "top_k", top_k, a.batch, 0.0, true);  // dtype and shape
    k = values_1d<int64_t>(*top_k);
  }
  a.params.resize(static_cast<size_t>(a.batch));
  for (int64_t b = 0; b < a.batch; ++b) {
    try {
      a.params[b] = checked_params(op, t[b], k[b], p[b], m[b]);
    } catch (const c10::ValueError& e) {
      // "spec_verify.<op>: <what>" becomes "spec_verify.<op>: sequence b: <what>".
      const std::string prefix = std::string("spec_verify.") + op + ": ";
      const std::string& what = e.msg();
      TORCH_CHECK_VALUE(false, prefix, "sequence ", b, ": ",
                        what.compare(0, prefix.size(), prefix) == 0 ? what.substr(prefix.size()) : what);
    }
  }
}

// Weighted elements (sv::batch_cost) worth waking a thread for: about eight argmax rows at
// V = 32000, some 20 us, against a few us to wake a parked pool thread.
constexpr int64_t kCostPerThread = int64_t{1} << 18;

// The batch's sequences on as many threads as torch's setting allows (torch.set_num_threads)
// and the batch's cost is worth, each claiming the next sequence from a shared counter
// (sv::run_batch_threads; Note [Batch threads] in batch.cpp). Inside one of torch's parallel
// regions, one thread. Returns the failure of the lowest sequence, the one a single thread
// would meet first.
sv::BatchFailure run_batch_threads(const sv::KernelTable& kt, const sv::Batch& in, const double* uniforms,
                                   const int64_t* uniform_begin, int64_t width, int64_t* out, int64_t* accepted) {
  int64_t threads = at::in_parallel_region() ? 1 : std::min<int64_t>(at::get_num_threads(), in.batch);
  if (threads > 1) threads = std::min(threads, std::max<int64_t>(1, sv::batch_cost(in) / kCostPerThread));
  return sv::run_batch_threads(kt, in, uniforms, uniform_begin, width, out, accepted, threads);
}

// Draws every sampled sequence's K_b + 1 uniforms (BatchUniforms: in batch order, each from
// its generator, every generator locked for the call), then runs the batch; if a malformed
// row turns up, every generator involved is put back as it was before the call. Greedy
// sequences draw nothing.
sv::BatchFailure draw_and_run(const char* op, const BatchArgs& a, const std::optional<at::Generator>& generator,
                              const std::optional<c10::List<std::optional<at::Generator>>>& generators, int64_t* out,
                              int64_t* accepted) {
  const sv::KernelTable& kt = kernels();  // a bad SPEC_VERIFY_ISA raises here, before anything is drawn
  const sv::Batch in = a.view();
  std::vector<int64_t> uniform_begin(static_cast<size_t>(a.batch));
  const int64_t count = sv::batch_uniform_offsets(in, uniform_begin.data());
  if (count == 0) return run_batch_threads(kt, in, nullptr, uniform_begin.data(), a.width, out, accepted);
  BatchUniforms uniforms(in, uniform_begin.data(), count, generator, generators);
  const sv::BatchFailure failure = run_batch_threads(kt, in, uniforms.data(), uniform_begin.data(), a.width, out, accepted);
  if (failure.sequence >= 0) uniforms.put_back();
  return failure;
}

// Runs a checked batch: (output_token_ids [B, max K_b + 1], num_accepted [B]), or raises
// naming the sequence and the row.
std::tuple<at::Tensor, at::Tensor> batch_result(const char* op, const RowNames& names, const BatchArgs& a,
                                                const std::optional<at::Generator>& generator,
                                                const std::optional<c10::List<std::optional<at::Generator>>>& generators) {
  check_generators(op, generator, generators, a.batch);
  // at::detail::empty_cpu: the allocation without a trip through the dispatcher, which
  // would cost a small batch more than its rows.
  const auto options = at::TensorOptions().dtype(at::kLong);
  at::Tensor out = at::detail::empty_cpu({a.batch, a.width}, options);
  at::Tensor accepted = at::detail::empty_cpu({a.batch}, options);
  const sv::BatchFailure failure = draw_and_run(op, a, generator, generators, out.data_ptr<int64_t>(),
                                                accepted.data_ptr<int64_t>());
  if (failure.sequence >= 0) {
    const std::string where = std::string(op) + ": sequence " + std::to_string(failure.sequence);
    raise_if_bad(where.c_str(), failure.outcome, names);
  }
  return {out, accepted};
}

}  // namespace

std::tuple<at::Tensor, at::Tensor> verify_batch(
    const at::Tensor& target_logits, const at::Tensor& draft_tokens, const at::Tensor& cu_num_draft_tokens,
    const std::optional<at::Tensor>& draft_logits, const std::optional<at::Tensor>& temperature,
    const std::optional<at::Tensor>& top_k, const std::optional<at::Tensor>& top_p,
    const std::optional<at::Tensor>& min_p, c10::string_view method, const std::optional<at::Generator>& generator,
    const std::optional<c10::List<std::optional<at::Generator>>>& generators) {
  const char* op = "verify_batch";
  BatchArgs a;
  check_batch_layout(op, kLogits, target_logits, draft_tokens, cu_num_draft_tokens, draft_logits, method, a);
  check_batch_params(op, temperature, top_k, top_p, min_p, a);
  return batch_result(op, kLogits, a, generator, generators);
}

std::tuple<at::Tensor, at::Tensor> verify_batch_probs(
    const at::Tensor& target_probs, const at::Tensor& draft_tokens, const at::Tensor& cu_num_draft_tokens,
    const std::optional<at::Tensor>& draft_probs, const std::optional<at::Tensor>& greedy,
    c10::string_view method, const std::optional<at::Generator>& generator,
    const std::optional<c10::List<std::optional<at::Generator>>>& generators) {
  const char* op = "verify_batch_probs";
  BatchArgs a;
  check_batch_layout(op, kProbs, target_probs, draft_tokens, cu_num_draft_tokens, draft_probs, method, a);
  if (greedy.has_value() && greedy->defined()) {
    check_cpu(op, "greedy", *greedy);
    TORCH_CHECK_TYPE(greedy->scalar_type() == at::kBool, "spec_verify.", op,
                     ": greedy must have dtype torch.bool, got ", dtype_name(greedy->scalar_type()));
    TORCH_CHECK_VALUE(greedy->dim() == 1 && greedy->size(0) == a.batch, "spec_verify.", op,
                      ": greedy must have shape [B] = [", a.batch, "], one flag per sequence, got ",
                      shape_of(*greedy));
    const at::Tensor flags = greedy->contiguous();
    a.greedy = std::make_unique<bool[]>(static_cast<size_t>(a.batch));
    std::copy(flags.data_ptr<bool>(), flags.data_ptr<bool>() + a.batch, a.greedy.get());
  }
  return batch_result(op, kProbs, a, generator, generators);
}
