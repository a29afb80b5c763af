// The versioned binding's checks (checks.h): tensors' device, layout, dtype, shape and
// values, and the messages of malformed rows.
#include "checks.h"

#include <sstream>
#include <stdexcept>
#include <vector>

namespace spec_verify_versioned __attribute__((visibility("hidden"))) {

std::string shape_of(const at::Tensor& t) {
  std::ostringstream s;
  s << t.sizes();
  return s.str();
}

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
  // Sparse, mkldnn and nested tensors reach these kernels through their own dispatch keys
  // (registered in torch_binding.cpp), so that they get this error instead of torch's
  // "could not run".
  TORCH_CHECK_TYPE(t.layout() == at::kStrided && !t.is_nested(), "spec_verify.", op, ": ", name,
                   " must be a dense (strided) tensor, got layout ", t.layout(),
                   t.is_nested() ? " (nested)" : "", "; convert with .to_dense()");
}

namespace {

bool row_dtype(at::ScalarType t) { return t == at::kFloat || t == at::kHalf || t == at::kBFloat16; }

}  // namespace

void check_row_dtype(const char* op, const char* name, const at::Tensor& t) {
  TORCH_CHECK_TYPE(row_dtype(t.scalar_type()), "spec_verify.", op, ": ", name,
                   " must have dtype torch.float32, torch.float16 or torch.bfloat16, got ",
                   dtype_name(t.scalar_type()), t.scalar_type() == at::kDouble ? " (convert with .float())" : "");
}

at::Tensor checked_rows(const char* op, const char* name, const at::Tensor& t, int64_t rows,
                        int64_t vocab, const char* expected) {
  check_cpu(op, name, t);
  check_row_dtype(op, name, t);
  TORCH_CHECK_VALUE(t.dim() == 2, "spec_verify.", op, ": ", name, " must be 2-D ", expected,
                    ", got shape ", shape_of(t));
  TORCH_CHECK_VALUE(t.size(0) == rows && t.size(1) == vocab, "spec_verify.", op, ": ", name,
                    " must have shape ", expected, " = [", rows, ", ", vocab, "], got ",
                    shape_of(t));
  return t.stride(1) == 1 ? t : t.contiguous();
}

template <class Vec>
Vec checked_tokens(const char* op, const at::Tensor& t, int64_t k, int64_t vocab,
                   const char* target_name) {
  check_cpu(op, "draft_tokens", t);
  TORCH_CHECK_TYPE(at::isIntegralType(t.scalar_type(), /*includeBool=*/false), "spec_verify.",
                   op, ": draft_tokens must have an integer dtype, got ", dtype_name(t.scalar_type()));
  TORCH_CHECK_VALUE(t.dim() == 1 && t.size(0) == k, "spec_verify.", op,
                    ": draft_tokens must have shape [K] = [", k,
                    "] (K = ", target_name, ".shape[0] - 1), got ", shape_of(t));
  Vec tokens(static_cast<size_t>(k));
  if (t.scalar_type() == at::kLong) {
    const int64_t* data = t.const_data_ptr<int64_t>();
    const int64_t stride = t.stride(0);
    for (int64_t i = 0; i < k; ++i) tokens[i] = data[i * stride];
  } else {
    const at::Tensor values = t.to(at::kLong).contiguous();
    const int64_t* data = values.const_data_ptr<int64_t>();
    for (int64_t i = 0; i < k; ++i) tokens[i] = data[i];
  }
  for (int64_t i = 0; i < k; ++i) {
    TORCH_CHECK_VALUE(tokens[i] >= 0 && tokens[i] < vocab, "spec_verify.", op, ": draft_tokens[",
                      i, "] = ", tokens[i], " is outside the vocabulary [0, ", vocab, ")");
  }
  return tokens;
}

template TokenVec checked_tokens<TokenVec>(const char*, const at::Tensor&, int64_t, int64_t, const char*);
template std::vector<int64_t> checked_tokens<std::vector<int64_t>>(const char*, const at::Tensor&, int64_t, int64_t,
                                                                   const char*);

int64_t checked_k(const char* op, const at::Tensor& target, const char* name) {
  check_cpu(op, name, target);
  TORCH_CHECK_VALUE(target.dim() == 2 && target.size(0) >= 1 && target.size(1) >= 1,
                    "spec_verify.", op, ": ", name,
                    " must be 2-D [K+1, V] with K >= 0 and V >= 1, got shape ", shape_of(target));
  return target.size(0) - 1;
}

void raise_if_bad(const char* op, const sv::Outcome& out, const RowNames& names) {
  if (out.error == sv::InputError::kNone) return;
  const char* name = out.in_draft ? names.draft : names.target;
  if (out.error == sv::InputError::kZeroMass) {
    TORCH_CHECK_VALUE(false, "spec_verify.", op, ": ", name, "[", out.row,
                      "] has zero mass (every entry is 0); a row must have positive mass");
  }
  if (out.error == sv::InputError::kNoFinite) {
    TORCH_CHECK_VALUE(false, "spec_verify.", op, ": ", name, "[", out.row,
                      "] has no finite value (every entry is -inf)");
  }
  if (out.error == sv::InputError::kOverflow) {
    TORCH_CHECK_VALUE(false, "spec_verify.", op, ": ", name, "[", out.row, ", ", out.col, "] = ",
                      out.value, " divided by the temperature overflows float32; use a larger "
                      "temperature (or 0 for greedy)");
  }
  const char* what = out.error == sv::InputError::kNaN        ? "NaN"
                     : out.error == sv::InputError::kNegative ? "negative"
                                                              : "infinite";
  const char* rule = out.error == sv::InputError::kNaN ? ""
                     : names.logits ? "; logits may be -inf (a masked token) but not +inf"
                                    : "; probabilities must be finite and non-negative";
  TORCH_CHECK_VALUE(false, "spec_verify.", op, ": ", name, "[", out.row, ", ", out.col, "] = ",
                    out.value, " is ", what, rule);
}

sv::Method checked_method(const char* op, c10::string_view method) {
  if (method == "token") return sv::Method::kToken;
  if (method == "block") return sv::Method::kBlock;
  TORCH_CHECK_VALUE(false, "spec_verify.", op, ": method must be \"token\" or \"block\", got \"",
                    method, "\"");
  return sv::Method::kToken;
}

at::Tensor checked_uniforms(const char* op, const at::Tensor& uniforms, int64_t count,
                            const std::string& expected, bool scalar) {
  check_cpu(op, "uniforms", uniforms);
  TORCH_CHECK_TYPE(uniforms.scalar_type() == at::kDouble, "spec_verify.", op,
                   ": uniforms must have dtype torch.float64, got ", dtype_name(uniforms.scalar_type()));
  TORCH_CHECK_VALUE(scalar ? uniforms.dim() == 0 : (uniforms.dim() == 1 && uniforms.size(0) == count),
                    "spec_verify.", op, ": uniforms must have shape ", expected, ", got ",
                    shape_of(uniforms));
  const at::Tensor u = uniforms.contiguous();
  const double* ud = u.data_ptr<double>();
  for (int64_t i = 0; i < count; ++i) {
    TORCH_CHECK_VALUE(ud[i] >= 0.0 && ud[i] < 1.0, "spec_verify.", op, ": uniforms[", i, "] = ",
                      ud[i], " is outside [0, 1)");
  }
  return u;
}

}  // namespace spec_verify_versioned
