// torch op schemas and tensor checks; everything below this file sees raw pointers.
#include <ATen/ATen.h>
#include <ATen/CPUGeneratorImpl.h>
#include <ATen/core/DistributionsHelper.h>
#include <c10/util/SmallVector.h>
#include <torch/library.h>

#include <mutex>
#include <sstream>
#include <stdexcept>

#include "registration.h"
#include "spec_verify.h"
#include "torch_binding.h"

namespace sv = spec_verify;

namespace {

std::string shape_of(const at::Tensor& t) {
  std::ostringstream s;
  s << t.sizes();
  return s.str();
}

// "torch.float64", as users write it.
std::string dtype_name(at::ScalarType t) { return "torch." + std::string(c10::getDtypeNames(t).first); }

const sv::KernelTable& kernels() {
  try {
    return sv::active_kernels();
  } catch (const std::invalid_argument& e) {
    TORCH_CHECK_VALUE(false, "spec_verify: ", e.what());
  }
}

void check_cpu(const char* op, const char* name, const at::Tensor& t) {
  TORCH_CHECK_VALUE(t.device().is_cpu(), "spec_verify.", op, ": ", name,
                    " must be on the CPU, got a tensor on ", t.device());
}

// A [rows, V] float32 probability (or logit) tensor. Returns it with unit stride along V
// (a copy only if it had none), so each row is a plain float array.
at::Tensor checked_rows(const char* op, const char* name, const at::Tensor& t, int64_t rows,
                        int64_t vocab, const char* expected) {
  check_cpu(op, name, t);
  TORCH_CHECK_TYPE(t.scalar_type() == at::kFloat, "spec_verify.", op, ": ", name,
                   " must have dtype torch.float32, got ", dtype_name(t.scalar_type()),
                   " (convert with .float(); half types are not supported yet)");
  TORCH_CHECK_VALUE(t.dim() == 2, "spec_verify.", op, ": ", name, " must be 2-D ", expected,
                    ", got shape ", shape_of(t));
  TORCH_CHECK_VALUE(t.size(0) == rows && t.size(1) == vocab, "spec_verify.", op, ": ", name,
                    " must have shape ", expected, " = [", rows, ", ", vocab, "], got ",
                    shape_of(t));
  return t.stride(1) == 1 ? t : t.contiguous();
}

// The K draft tokens as int64 values in [0, V).
std::vector<int64_t> checked_tokens(const char* op, const at::Tensor& t, int64_t k,
                                    int64_t vocab) {
  check_cpu(op, "draft_tokens", t);
  TORCH_CHECK_TYPE(at::isIntegralType(t.scalar_type(), /*includeBool=*/false), "spec_verify.",
                   op, ": draft_tokens must have an integer dtype, got ", dtype_name(t.scalar_type()));
  TORCH_CHECK_VALUE(t.dim() == 1 && t.size(0) == k, "spec_verify.", op,
                    ": draft_tokens must have shape [K] = [", k,
                    "] (K = target_probs.shape[0] - 1), got ", shape_of(t));
  const at::Tensor values = t.to(at::kLong).contiguous();
  const int64_t* data = values.data_ptr<int64_t>();
  std::vector<int64_t> tokens(data, data + k);
  for (int64_t i = 0; i < k; ++i) {
    TORCH_CHECK_VALUE(tokens[i] >= 0 && tokens[i] < vocab, "spec_verify.", op, ": draft_tokens[",
                      i, "] = ", tokens[i], " is outside the vocabulary [0, ", vocab, ")");
  }
  return tokens;
}

int64_t checked_k(const char* op, const at::Tensor& target_probs) {
  check_cpu(op, "target_probs", target_probs);
  TORCH_CHECK_VALUE(target_probs.dim() == 2 && target_probs.size(0) >= 1 &&
                        target_probs.size(1) >= 1,
                    "spec_verify.", op,
                    ": target_probs must be 2-D [K+1, V] with K >= 0 and V >= 1, got shape ",
                    shape_of(target_probs));
  return target_probs.size(0) - 1;
}

sv::Rows rows_of(const at::Tensor& t) {
  return sv::Rows{t.data_ptr<float>(), t.size(0) > 1 ? t.stride(0) : 0};
}

// Turns a malformed row found by a round into the exception the user sees.
void raise_if_bad(const char* op, const sv::Outcome& out) {
  if (out.error == sv::InputError::kNone) return;
  const char* name = out.in_draft ? "draft_probs" : "target_probs";
  if (out.error == sv::InputError::kZeroMass) {
    TORCH_CHECK_VALUE(false, "spec_verify.", op, ": ", name, "[", out.row,
                      "] has zero mass (every entry is 0); a row must have positive mass");
  }
  const char* what = out.error == sv::InputError::kNaN        ? "NaN"
                     : out.error == sv::InputError::kNegative ? "negative"
                                                              : "infinite";
  TORCH_CHECK_VALUE(false, "spec_verify.", op, ": ", name, "[", out.row, ", ", out.col, "] = ",
                    out.value, " is ", what,
                    out.error == sv::InputError::kNaN
                        ? ""
                        : "; probabilities must be finite and non-negative");
}

std::tuple<c10::SymInt, c10::SymInt> result(const sv::Outcome& out) {
  return {c10::SymInt(out.n_accepted), c10::SymInt(out.token)};
}

struct AcceptArgs {
  at::Tensor target, draft;
  std::vector<int64_t> tokens;
  int64_t k, vocab;
};

AcceptArgs checked_accept_args(const char* op, const at::Tensor& target_probs,
                               const at::Tensor& draft_probs, const at::Tensor& draft_tokens) {
  AcceptArgs a;
  a.k = checked_k(op, target_probs);
  a.vocab = target_probs.size(1);
  a.target = checked_rows(op, "target_probs", target_probs, a.k + 1, a.vocab, "[K+1, V]");
  a.draft = checked_rows(op, "draft_probs", draft_probs, a.k, a.vocab, "[K, V]");
  a.tokens = checked_tokens(op, draft_tokens, a.k, a.vocab);
  return a;
}

sv::Outcome run_accept(const AcceptArgs& a, const double* uniforms) {
  return sv::accept_round(kernels(), rows_of(a.target), rows_of(a.draft), a.tokens.data(),
                          uniforms, a.k, a.vocab);
}

}  // namespace

std::tuple<c10::SymInt, c10::SymInt> verify_greedy(const at::Tensor& target_probs,
                                                   const at::Tensor& draft_tokens) {
  const char* op = "verify_greedy";
  const int64_t k = checked_k(op, target_probs);
  const int64_t vocab = target_probs.size(1);
  const at::Tensor target = checked_rows(op, "target_probs", target_probs, k + 1, vocab, "[K+1, V]");
  const std::vector<int64_t> tokens = checked_tokens(op, draft_tokens, k, vocab);
  const sv::Outcome out = sv::verify_greedy_round(kernels(), rows_of(target), tokens.data(), k, vocab);
  raise_if_bad(op, out);
  return result(out);
}

std::tuple<c10::SymInt, c10::SymInt> accept(const at::Tensor& target_probs,
                                            const at::Tensor& draft_probs,
                                            const at::Tensor& draft_tokens,
                                            const std::optional<at::Generator>& generator) {
  const char* op = "accept";
  const AcceptArgs a = checked_accept_args(op, target_probs, draft_probs, draft_tokens);
  at::Generator gen = generator.has_value() && generator->defined()
                          ? *generator
                          : at::detail::getDefaultCPUGenerator();
  TORCH_CHECK_VALUE(gen.device().is_cpu(), "spec_verify.accept: generator must be a CPU ",
                    "torch.Generator, got one on ", gen.device());
  auto* engine = at::check_generator<at::CPUGeneratorImpl>(gen);
  std::lock_guard<std::mutex> lock(gen.mutex());
  // Exactly K+1 float64 uniforms per call: the stream torch.rand(K+1, dtype=torch.float64,
  // generator=generator) gives (one random64() per value, in order), drawn without a tensor.
  // The engine is kept so that a malformed row, found only as rows are read, can put the
  // generator back: a call that raises changes nothing.
  const at::mt19937 saved = engine->engine();
  c10::SmallVector<double, 16> uniforms(static_cast<size_t>(a.k + 1));
  at::uniform_real_distribution<double> uniform(0.0, 1.0);  // not const: torch 2.10's operator() is not
  for (double& u : uniforms) u = uniform(engine);
  const sv::Outcome out = run_accept(a, uniforms.data());
  if (out.error != sv::InputError::kNone) {
    engine->set_engine(saved);
    raise_if_bad(op, out);
  }
  return result(out);
}

std::tuple<c10::SymInt, c10::SymInt> accept_with_uniforms(const at::Tensor& target_probs,
                                                          const at::Tensor& draft_probs,
                                                          const at::Tensor& draft_tokens,
                                                          const at::Tensor& uniforms) {
  const char* op = "accept_with_uniforms";
  const AcceptArgs a = checked_accept_args(op, target_probs, draft_probs, draft_tokens);
  check_cpu(op, "uniforms", uniforms);
  TORCH_CHECK_TYPE(uniforms.scalar_type() == at::kDouble, "spec_verify.", op,
                   ": uniforms must have dtype torch.float64, got ", dtype_name(uniforms.scalar_type()));
  TORCH_CHECK_VALUE(uniforms.dim() == 1 && uniforms.size(0) == a.k + 1, "spec_verify.", op,
                    ": uniforms must have shape [K+1] = [", a.k + 1, "], got ", shape_of(uniforms));
  const at::Tensor u = uniforms.contiguous();
  const double* ud = u.data_ptr<double>();
  for (int64_t i = 0; i <= a.k; ++i) {
    TORCH_CHECK_VALUE(ud[i] >= 0.0 && ud[i] < 1.0, "spec_verify.", op, ": uniforms[", i, "] = ",
                      ud[i], " is outside [0, 1)");
  }
  const sv::Outcome out = run_accept(a, ud);
  raise_if_bad(op, out);
  return result(out);
}

at::Tensor row_masses(const at::Tensor& rows) {
  const char* op = "_row_masses";
  check_cpu(op, "rows", rows);
  TORCH_CHECK_VALUE(rows.dim() == 2 && rows.size(1) >= 1, "spec_verify._row_masses: rows must be "
                    "2-D [N, V] with V >= 1, got shape ", shape_of(rows));
  const at::Tensor r = checked_rows(op, "rows", rows, rows.size(0), rows.size(1), "[N, V]");
  const int64_t n = r.size(0), vocab = r.size(1);
  at::Tensor out = at::empty({n}, at::TensorOptions().dtype(at::kDouble));
  std::vector<double> blocks(static_cast<size_t>(sv::num_blocks(vocab)));
  const sv::KernelTable& kt = kernels();
  for (int64_t i = 0; i < n; ++i) {
    const float* row = r.data_ptr<float>() + i * r.stride(0);
    TORCH_CHECK_VALUE(kt.row_mass(row, vocab, blocks.data(), out.data_ptr<double>() + i),
                      "spec_verify._row_masses: rows[", i, "] holds a negative, NaN or infinite value");
  }
  return out;
}

std::string isa() { return kernels().name; }

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
  ops.def("accept(Tensor target_probs, Tensor draft_probs, Tensor draft_tokens, "
          "Generator? generator=None) -> (SymInt, SymInt)");
  ops.impl("accept", c10::kCPU, &accept);
  ops.def("accept_with_uniforms(Tensor target_probs, Tensor draft_probs, Tensor draft_tokens, "
          "Tensor uniforms) -> (SymInt, SymInt)");
  ops.impl("accept_with_uniforms", c10::kCPU, &accept_with_uniforms);
  // Internal ops, for tests and benchmarks: private (leading underscore) names.
  ops.def("_row_masses(Tensor rows) -> Tensor");
  ops.impl("_row_masses", c10::kCPU, &row_masses);
  ops.def("isa() -> str", &isa);
  ops.def("available_isas() -> str[]", &available_isas);
  ops.def("_force_isa(str name) -> ()", &force_isa);
}

REGISTER_EXTENSION(TORCH_EXTENSION_NAME)
