#include "checks.h"

#include <torch/csrc/stable/ops.h>

namespace spec_verify_stable __attribute__((visibility("hidden"))) {

using torch::headeronly::Layout;

const sv::KernelTable& kernels() {
  try {
    return sv::active_kernels();
  } catch (const std::invalid_argument& e) {
    throw std::invalid_argument(str("spec_verify: ", e.what()));
  }
}

void check_cpu(const char* op, const char* name, const Tensor& t) {
  SV_CHECK_VALUE(t.is_cpu(), "spec_verify.", op, ": ", name, " must be on the CPU, got a tensor on ",
                 device_name(t.device()));
  SV_CHECK_TYPE(t.layout() == Layout::Strided, "spec_verify.", op, ": ", name,
                " must be a dense (strided) tensor, got layout ", layout_name(t.layout()),
                "; convert with .to_dense()");
}

static bool row_dtype(ScalarType t) {
  return t == ScalarType::Float || t == ScalarType::Half || t == ScalarType::BFloat16;
}

void check_row_dtype(const char* op, const char* name, const Tensor& t) {
  SV_CHECK_TYPE(row_dtype(t.scalar_type()), "spec_verify.", op, ": ", name,
                " must have dtype torch.float32, torch.float16 or torch.bfloat16, got ",
                dtype_name(t.scalar_type()), t.scalar_type() == ScalarType::Double ? " (convert with .float())" : "");
}

Tensor checked_rows(const char* op, const char* name, const Tensor& t, int64_t rows, int64_t vocab,
                    const char* expected) {
  check_cpu(op, name, t);
  check_row_dtype(op, name, t);
  SV_CHECK_VALUE(t.dim() == 2, "spec_verify.", op, ": ", name, " must be 2-D ", expected, ", got shape ",
                 shape_of(t));
  SV_CHECK_VALUE(t.size(0) == rows && t.size(1) == vocab, "spec_verify.", op, ": ", name, " must have shape ",
                 expected, " = [", rows, ", ", vocab, "], got ", shape_of(t));
  return t.stride(1) == 1 ? t : torch::stable::contiguous(t);
}

std::vector<int64_t> checked_tokens(const char* op, const Tensor& t, int64_t k, int64_t vocab,
                                    const char* target_name) {
  check_cpu(op, "draft_tokens", t);
  SV_CHECK_TYPE(is_integral(t.scalar_type()), "spec_verify.", op,
                ": draft_tokens must have an integer dtype, got ", dtype_name(t.scalar_type()));
  SV_CHECK_VALUE(t.dim() == 1 && t.size(0) == k, "spec_verify.", op, ": draft_tokens must have shape [K] = [", k,
                 "] (K = ", target_name, ".shape[0] - 1), got ", shape_of(t));
  std::vector<int64_t> tokens(static_cast<size_t>(k));
  if (t.scalar_type() == ScalarType::Long) {
    const int64_t* data = t.const_data_ptr<int64_t>();
    const int64_t stride = t.stride(0);
    for (int64_t i = 0; i < k; ++i) tokens[i] = data[i * stride];
  } else {
    const Tensor values = torch::stable::contiguous(torch::stable::to(t, ScalarType::Long));
    const int64_t* data = values.const_data_ptr<int64_t>();
    for (int64_t i = 0; i < k; ++i) tokens[i] = data[i];
  }
  for (int64_t i = 0; i < k; ++i) {
    SV_CHECK_VALUE(tokens[i] >= 0 && tokens[i] < vocab, "spec_verify.", op, ": draft_tokens[", i, "] = ",
                   tokens[i], " is outside the vocabulary [0, ", vocab, ")");
  }
  return tokens;
}

int64_t checked_k(const char* op, const Tensor& target, const char* name) {
  check_cpu(op, name, target);
  SV_CHECK_VALUE(target.dim() == 2 && target.size(0) >= 1 && target.size(1) >= 1, "spec_verify.", op, ": ", name,
                 " must be 2-D [K+1, V] with K >= 0 and V >= 1, got shape ", shape_of(target));
  return target.size(0) - 1;
}

Tensor checked_uniforms(const char* op, const Tensor& uniforms, int64_t count, const std::string& expected,
                        bool scalar) {
  check_cpu(op, "uniforms", uniforms);
  SV_CHECK_TYPE(uniforms.scalar_type() == ScalarType::Double, "spec_verify.", op,
                ": uniforms must have dtype torch.float64, got ", dtype_name(uniforms.scalar_type()));
  SV_CHECK_VALUE(scalar ? uniforms.dim() == 0 : (uniforms.dim() == 1 && uniforms.size(0) == count), "spec_verify.",
                 op, ": uniforms must have shape ", expected, ", got ", shape_of(uniforms));
  const Tensor u = uniforms.is_contiguous() ? uniforms : torch::stable::contiguous(uniforms);
  const double* ud = u.const_data_ptr<double>();
  for (int64_t i = 0; i < count; ++i) {
    SV_CHECK_VALUE(ud[i] >= 0.0 && ud[i] < 1.0, "spec_verify.", op, ": uniforms[", i, "] = ", ud[i],
                   " is outside [0, 1)");
  }
  return u;
}

sv::Method checked_method(const char* op, std::string_view method) {
  if (method == "token") return sv::Method::kToken;
  if (method == "block") return sv::Method::kBlock;
  throw std::invalid_argument(
      str("spec_verify.", op, ": method must be \"token\" or \"block\", got \"", method, "\""));
}

static sv::Elem elem_of(const Tensor& t) {
  return t.scalar_type() == ScalarType::Half       ? sv::Elem::kF16
         : t.scalar_type() == ScalarType::BFloat16 ? sv::Elem::kBF16
                                                   : sv::Elem::kF32;
}

sv::Rows rows_of(const Tensor& t) {
  return sv::Rows{t.const_data_ptr(), t.size(0) > 1 ? t.stride(0) : 0, elem_of(t)};
}

sv::Rows draft_rows(const std::optional<Tensor>& draft) {
  return draft.has_value() && draft->defined() ? rows_of(*draft) : sv::Rows{nullptr, 0};
}

void raise_if_bad(const char* op, const sv::Outcome& out, const RowNames& names) {
  if (out.error == sv::InputError::kNone) return;
  const char* name = out.in_draft ? names.draft : names.target;
  if (out.error == sv::InputError::kZeroMass) {
    throw std::invalid_argument(str("spec_verify.", op, ": ", name, "[", out.row,
                                    "] has zero mass (every entry is 0); a row must have positive mass"));
  }
  if (out.error == sv::InputError::kNoFinite) {
    throw std::invalid_argument(
        str("spec_verify.", op, ": ", name, "[", out.row, "] has no finite value (every entry is -inf)"));
  }
  if (out.error == sv::InputError::kOverflow) {
    throw std::invalid_argument(str("spec_verify.", op, ": ", name, "[", out.row, ", ", out.col, "] = ", out.value,
                                    " divided by the temperature overflows float32; use a larger "
                                    "temperature (or 0 for greedy)"));
  }
  const char* what = out.error == sv::InputError::kNaN        ? "NaN"
                     : out.error == sv::InputError::kNegative ? "negative"
                                                              : "infinite";
  const char* rule = out.error == sv::InputError::kNaN ? ""
                     : names.logits ? "; logits may be -inf (a masked token) but not +inf"
                                    : "; probabilities must be finite and non-negative";
  throw std::invalid_argument(
      str("spec_verify.", op, ": ", name, "[", out.row, ", ", out.col, "] = ", out.value, " is ", what, rule));
}

}  // namespace spec_verify_stable
