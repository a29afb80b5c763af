// The batch ops (Note [Ragged batches]) on the stable ABI: torch_binding.cpp's layout and
// parameter checks and messages; the uniforms come drawn (ops.h).
#include <torch/csrc/stable/ops.h>

#include <algorithm>
#include <memory>

#include "logits_args.h"
#include "ops.h"

namespace spec_verify_stable __attribute__((visibility("hidden"))) {

namespace {

struct BatchArgs {
  Tensor target;
  OptTensor draft;  // none: one-hot drafts
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

// The values of a 1-D tensor as Out, read in place for the usual dtypes, else through a
// converted copy.
template <class Out>
std::vector<Out> values_1d(const Tensor& t) {
  std::vector<Out> out(static_cast<size_t>(t.size(0)));
  const auto read = [&](const auto* data, int64_t stride) {
    for (int64_t i = 0; i < t.size(0); ++i) out[i] = static_cast<Out>(data[i * stride]);
  };
  switch (t.scalar_type()) {
    case ScalarType::Long: read(t.const_data_ptr<int64_t>(), t.stride(0)); break;
    case ScalarType::Int: read(t.const_data_ptr<int32_t>(), t.stride(0)); break;
    case ScalarType::Float: read(t.const_data_ptr<float>(), t.stride(0)); break;
    case ScalarType::Double: read(t.const_data_ptr<double>(), t.stride(0)); break;
    default: {
      const bool integral = is_integral(t.scalar_type());
      const Tensor c = torch::stable::contiguous(torch::stable::to(t, integral ? ScalarType::Long : ScalarType::Double));
      if (integral) read(c.const_data_ptr<int64_t>(), 1);
      else read(c.const_data_ptr<double>(), 1);
    }
  }
  return out;
}

std::vector<int64_t> int_values(const char* op, const char* name, const Tensor& t, const char* expected) {
  check_cpu(op, name, t);
  SV_CHECK_TYPE(is_integral(t.scalar_type()), "spec_verify.", op, ": ", name, " must have an integer dtype, got ",
                dtype_name(t.scalar_type()));
  SV_CHECK_VALUE(t.dim() == 1, "spec_verify.", op, ": ", name, " must be 1-D ", expected, ", got shape ", shape_of(t));
  return values_1d<int64_t>(t);
}

void check_batch_layout(const char* op, const RowNames& names, const Tensor& target, const Tensor& draft_tokens,
                        const Tensor& cu_num_draft_tokens, const OptTensor& draft, std::string_view method,
                        BatchArgs& a) {
  a.method = checked_method(op, method);
  a.cu = int_values(op, "cu_num_draft_tokens", cu_num_draft_tokens, "[B]");
  a.batch = static_cast<int64_t>(a.cu.size());
  check_cpu(op, "draft_tokens", draft_tokens);
  SV_CHECK_VALUE(draft_tokens.dim() == 1, "spec_verify.", op, ": draft_tokens must be 1-D [N], got shape ",
                 shape_of(draft_tokens));
  const int64_t n = draft_tokens.size(0);
  int64_t max_k = 0;
  for (int64_t b = 0; b < a.batch; ++b) {
    const int64_t before = b > 0 ? a.cu[b - 1] : 0;
    SV_CHECK_VALUE(b > 0 || a.cu[0] >= 0, "spec_verify.", op, ": cu_num_draft_tokens[0] = ", a.cu[0],
                   " is negative; cu_num_draft_tokens holds running totals of the draft counts, without a "
                   "leading zero");
    SV_CHECK_VALUE(a.cu[b] >= before, "spec_verify.", op, ": cu_num_draft_tokens[", b, "] = ", a.cu[b],
                   " is less than cu_num_draft_tokens[", b - 1, "] = ", before,
                   "; running totals of the draft counts never decrease");
    max_k = std::max(max_k, a.cu[b] - before);
  }
  const int64_t last = a.batch > 0 ? a.cu[a.batch - 1] : 0;
  SV_CHECK_VALUE(last == n, "spec_verify.", op, ": cu_num_draft_tokens ends at ", last, a.batch > 0 ? "" : " (B = 0)",
                 " but draft_tokens holds N = ", n, " tokens; the last running total is the number of draft tokens");
  a.width = max_k + 1;
  check_cpu(op, names.target, target);
  SV_CHECK_VALUE(target.dim() == 2 && target.size(1) >= 1, "spec_verify.", op, ": ", names.target,
                 " must be 2-D [N + B, V] with V >= 1, got shape ", shape_of(target));
  a.vocab = target.size(1);
  SV_CHECK_VALUE(target.size(0) == n + a.batch, "spec_verify.", op, ": ", names.target, " must have N + B = ",
                 n + a.batch, " rows (N = ", n, " draft tokens, B = ", a.batch,
                 " sequences: K_b + 1 rows for sequence b), got shape ", shape_of(target));
  a.target = checked_rows(op, names.target, target, n + a.batch, a.vocab, "[N + B, V]");
  if (draft.has_value() && draft->defined()) {
    check_cpu(op, names.draft, *draft);
    SV_CHECK_VALUE(draft->dim() != 2 || draft->size(0) == n, "spec_verify.", op, ": ", names.draft, " must have N = ",
                   n, " rows, one per draft token, got shape ", shape_of(*draft));
    a.draft = checked_rows(op, names.draft, *draft, n, a.vocab, "[N, V]");
  }
  a.tokens = checked_tokens(op, draft_tokens, n, a.vocab);
}

std::vector<double> batch_param(const char* op, const char* name, const OptTensor& t, int64_t batch, double fallback,
                                bool integer) {
  if (!t.has_value() || !t->defined()) return std::vector<double>(static_cast<size_t>(batch), fallback);
  check_cpu(op, name, *t);
  const ScalarType dtype = t->scalar_type();
  SV_CHECK_TYPE(integer ? is_integral(dtype) : (is_floating(dtype) || is_integral(dtype)), "spec_verify.", op, ": ",
                name, " must have ", integer ? "an integer" : "a real (not bool)", " dtype, got ", dtype_name(dtype));
  SV_CHECK_VALUE(t->dim() == 1 && t->size(0) == batch, "spec_verify.", op, ": ", name, " must have shape [B] = [",
                 batch, "], one value per sequence, got ", shape_of(*t));
  return values_1d<double>(*t);
}

void check_batch_params(const char* op, const OptTensor& temperature, const OptTensor& top_k, const OptTensor& top_p,
                        const OptTensor& min_p, BatchArgs& a) {
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
    } catch (const std::invalid_argument& e) {
      // "spec_verify.<op>: <what>" becomes "spec_verify.<op>: sequence b: <what>".
      const std::string prefix = std::string("spec_verify.") + op + ": ";
      const std::string what = e.what();
      throw std::invalid_argument(
          str(prefix, "sequence ", b, ": ", what.compare(0, prefix.size(), prefix) == 0 ? what.substr(prefix.size()) : what));
    }
  }
}

bool on_cpu(const torch::stable::Generator& g) { return g.device().type() == torch::headeronly::DeviceType::CPU; }

void check_generators(const char* op, const Gen& generator, const GenList& generators, int64_t batch) {
  if (generator.has_value()) {
    SV_CHECK_VALUE(on_cpu(*generator), "spec_verify.", op, ": generator must be a CPU ", "torch.Generator, got one on ",
                   device_name(generator->device()));
  }
  if (!generators.has_value()) return;
  SV_CHECK_VALUE(static_cast<int64_t>(generators->size()) == batch, "spec_verify.", op, ": generators must hold B = ",
                 batch, " entries (one per sequence, None for `generator`), got ", generators->size());
  for (int64_t b = 0; b < batch; ++b) {
    const std::optional<torch::stable::Generator>& g = (*generators)[b];
    SV_CHECK_VALUE(!g.has_value() || on_cpu(*g), "spec_verify.", op, ": generators[", b,
                   "] must be a CPU torch.Generator, got one on ", device_name(g->device()));
  }
}

// Weighted elements (sv::batch_cost) worth waking a thread for (torch_binding.cpp's figure).
constexpr int64_t kCostPerThread = int64_t{1} << 18;

// The batch's sequences on as many threads as torch's setting allows and the batch's cost is
// worth. The stable ABI has no at::in_parallel_region: inside one of torch's parallel regions
// this still uses the pool (the results are the same; only the threads differ).
sv::BatchFailure run_batch_threads(const sv::KernelTable& kt, const sv::Batch& in, const double* uniforms,
                                   const int64_t* uniform_begin, int64_t width, int64_t* out, int64_t* accepted) {
  int64_t threads = std::min<int64_t>(static_cast<int64_t>(torch::stable::get_num_threads()), in.batch);
  if (threads > 1) threads = std::min(threads, std::max<int64_t>(1, sv::batch_cost(in) / kCostPerThread));
  return sv::run_batch_threads(kt, in, uniforms, uniform_begin, width, out, accepted, threads);
}

std::tuple<Tensor, Tensor> batch_result(const char* op, const RowNames& names, const BatchArgs& a,
                                        const Gen& generator, const GenList& generators, const Tensor& uniforms) {
  check_generators(op, generator, generators, a.batch);
  Tensor out = torch::stable::empty({a.batch, a.width}, ScalarType::Long);
  Tensor accepted = torch::stable::empty({a.batch}, ScalarType::Long);
  const sv::KernelTable& kt = kernels();
  const sv::Batch in = a.view();
  std::vector<int64_t> uniform_begin(static_cast<size_t>(a.batch));
  const int64_t count = sv::batch_uniform_offsets(in, uniform_begin.data());
  const double* u = count == 0 ? nullptr : drawn(op, uniforms, count);
  const sv::BatchFailure failure = run_batch_threads(kt, in, u, uniform_begin.data(), a.width,
                                                     out.mutable_data_ptr<int64_t>(), accepted.mutable_data_ptr<int64_t>());
  if (failure.sequence >= 0) {
    const std::string where = std::string(op) + ": sequence " + std::to_string(failure.sequence);
    raise_if_bad(where.c_str(), failure.outcome, names);
  }
  return {out, accepted};
}

}  // namespace

std::tuple<Tensor, Tensor> drawn_verify_batch(const Tensor& target_logits, const Tensor& draft_tokens,
                                              const Tensor& cu_num_draft_tokens, const OptTensor& draft_logits,
                                              const OptTensor& temperature, const OptTensor& top_k,
                                              const OptTensor& top_p, const OptTensor& min_p, const StrArg& method,
                                              const Gen& generator, const GenList& generators,
                                              const Tensor& uniforms) {
  const char* op = "verify_batch";
  BatchArgs a;
  check_batch_layout(op, kLogits, target_logits, draft_tokens, cu_num_draft_tokens, draft_logits, method, a);
  check_batch_params(op, temperature, top_k, top_p, min_p, a);
  return batch_result(op, kLogits, a, generator, generators, uniforms);
}

std::tuple<Tensor, Tensor> drawn_verify_batch_probs(const Tensor& target_probs, const Tensor& draft_tokens,
                                                    const Tensor& cu_num_draft_tokens, const OptTensor& draft_probs,
                                                    const OptTensor& greedy, const StrArg& method,
                                                    const Gen& generator, const GenList& generators,
                                                    const Tensor& uniforms) {
  const char* op = "verify_batch_probs";
  BatchArgs a;
  check_batch_layout(op, kProbs, target_probs, draft_tokens, cu_num_draft_tokens, draft_probs, method, a);
  if (greedy.has_value() && greedy->defined()) {
    check_cpu(op, "greedy", *greedy);
    SV_CHECK_TYPE(greedy->scalar_type() == ScalarType::Bool, "spec_verify.", op,
                  ": greedy must have dtype torch.bool, got ", dtype_name(greedy->scalar_type()));
    SV_CHECK_VALUE(greedy->dim() == 1 && greedy->size(0) == a.batch, "spec_verify.", op,
                   ": greedy must have shape [B] = [", a.batch, "], one flag per sequence, got ", shape_of(*greedy));
    const Tensor flags = greedy->is_contiguous() ? *greedy : torch::stable::contiguous(*greedy);
    a.greedy = std::make_unique<bool[]>(static_cast<size_t>(a.batch));
    std::copy(flags.const_data_ptr<bool>(), flags.const_data_ptr<bool>() + a.batch, a.greedy.get());
  }
  return batch_result(op, kProbs, a, generator, generators, uniforms);
}

}  // namespace spec_verify_stable
