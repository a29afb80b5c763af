// The argument checks (checks.h) and the messages' pieces (view.h), once for both builds.
#include "checks.h"

#include <algorithm>
#include <cmath>
#include <iterator>
#include <limits>
#include <stdexcept>
#include <utility>

namespace spec_verify_binding __attribute__((visibility("hidden"))) {

std::string shape_of(const TensorView& t) {
  std::ostringstream s;
  s << "[";
  for (int64_t i = 0; i < t.dim; ++i) s << (i ? ", " : "") << t.sizes[i];
  s << "]";
  return s.str();
}

std::string dtype_name(DType t) {
  static constexpr const char* kNames[] = {
      "uint8", "int8", "int16", "int32", "int64", "float16", "float32", "float64", "complex32", "complex64",
      "complex128", "bool", "qint8", "quint8", "qint32", "bfloat16", "quint4x2", "quint2x4", "bits1x8", "bits2x4",
      "bits4x2", "bits8", "bits16", "float8_e5m2", "float8_e4m3fn", "float8_e5m2fnuz", "float8_e4m3fnuz", "uint16",
      "uint32", "uint64"};
  const int i = static_cast<int>(t);
  return std::string("torch.") + (i >= 0 && i < static_cast<int>(std::size(kNames)) ? kNames[i] : "unknown");
}

std::string device_name(int8_t type, int8_t index) {
  const char* name = type == 0    ? "cpu"
                     : type == 1  ? "cuda"
                     : type == 6  ? "hip"
                     : type == 12 ? "xpu"
                     : type == 13 ? "mps"
                     : type == 14 ? "meta"
                     : type == 20 ? "privateuseone"
                                  : "unknown";
  return index >= 0 ? str(name, ":", static_cast<int>(index)) : std::string(name);
}

std::string layout_name(int8_t layout) {
  static constexpr const char* kNames[] = {"Strided",   "Sparse",    "SparseCsr", "Mkldnn",
                                           "SparseCsc", "SparseBsr", "SparseBsc", "Jagged"};
  return layout >= 0 && layout < 8 ? kNames[layout] : "Unknown";
}

bool is_integral(DType t) {
  switch (t) {
    case DType::kUInt8: case DType::kInt8: case DType::kInt16: case DType::kInt32: case DType::kInt64:
    case DType::kUInt16: case DType::kUInt32: case DType::kUInt64:
      return true;
    default:
      return false;
  }
}

bool is_floating(DType t) {
  const int i = static_cast<int>(t);
  return t == DType::kFloat16 || t == DType::kFloat32 || t == DType::kFloat64 || t == DType::kBFloat16 ||
         (i >= 23 && i <= 26);  // the four float8 types
}

bool readable(DType t) {
  return is_integral(t) || t == DType::kFloat16 || t == DType::kFloat32 || t == DType::kFloat64 ||
         t == DType::kBFloat16 || t == DType::kBool;
}

namespace {

// The n values of a dense 1-D tensor (or a 0-d one, n = 1) of a readable dtype, as Out.
template <class Out>
std::vector<Out> values_of(const TensorView& t, int64_t n) {
  std::vector<Out> out(static_cast<size_t>(n));
  const int64_t s = t.dim > 0 ? t.stride(0) : 0;
  const auto read = [&](const auto* d) {
    for (int64_t i = 0; i < n; ++i) out[i] = static_cast<Out>(d[i * s]);
  };
  switch (t.dtype) {
    case DType::kUInt8: read(static_cast<const uint8_t*>(t.data)); break;
    case DType::kInt8: read(static_cast<const int8_t*>(t.data)); break;
    case DType::kInt16: read(static_cast<const int16_t*>(t.data)); break;
    case DType::kInt32: read(static_cast<const int32_t*>(t.data)); break;
    case DType::kInt64: read(static_cast<const int64_t*>(t.data)); break;
    case DType::kUInt16: read(static_cast<const uint16_t*>(t.data)); break;
    case DType::kUInt32: read(static_cast<const uint32_t*>(t.data)); break;
    case DType::kUInt64: read(static_cast<const uint64_t*>(t.data)); break;
    case DType::kFloat32: read(static_cast<const float*>(t.data)); break;
    case DType::kFloat64: read(static_cast<const double*>(t.data)); break;
    case DType::kBool: read(static_cast<const bool*>(t.data)); break;
    case DType::kFloat16: case DType::kBFloat16: {
      const sv::Elem elem = t.dtype == DType::kFloat16 ? sv::Elem::kF16 : sv::Elem::kBF16;
      const auto* d = static_cast<const uint16_t*>(t.data);
      for (int64_t i = 0; i < n; ++i) out[i] = static_cast<Out>(sv::value_at(sv::RowRef(d + i * s, elem), 0));
      break;
    }
    default: break;  // not readable(): ops.h converts such tensors first
  }
  return out;
}

sv::Elem elem_of(DType t) {
  return t == DType::kFloat16 ? sv::Elem::kF16 : t == DType::kBFloat16 ? sv::Elem::kBF16 : sv::Elem::kF32;
}

}  // namespace

const sv::KernelTable& kernels() {
  try {
    return sv::active_kernels();
  } catch (const std::invalid_argument& e) {
    fail(ErrorKind::kValue, str("spec_verify: ", e.what()));
  }
}

void check_cpu(const char* op, const char* name, const TensorView& t) {
  SV_CHECK_VALUE(t.device_type == kCpu, "spec_verify.", op, ": ", name, " must be on the CPU, got a tensor on ",
                 device_name(t.device_type, t.device_index));
  SV_CHECK_TYPE(t.dense(), "spec_verify.", op, ": ", name, " must be a dense (strided) tensor, got layout ",
                layout_name(t.layout), t.nested ? " (nested)" : "", "; convert with .to_dense()");
}

void check_row_dtype(const char* op, const char* name, const TensorView& t) {
  SV_CHECK_TYPE(t.dtype == DType::kFloat32 || t.dtype == DType::kFloat16 || t.dtype == DType::kBFloat16,
                "spec_verify.", op, ": ", name, " must have dtype torch.float32, torch.float16 or torch.bfloat16, got ",
                dtype_name(t.dtype), t.dtype == DType::kFloat64 ? " (convert with .float())" : "");
}

void check_rows(const char* op, const char* name, const TensorView& t, int64_t rows, int64_t vocab,
                const char* expected) {
  check_cpu(op, name, t);
  check_row_dtype(op, name, t);
  SV_CHECK_VALUE(t.dim == 2, "spec_verify.", op, ": ", name, " must be 2-D ", expected, ", got shape ", shape_of(t));
  SV_CHECK_VALUE(t.size(0) == rows && t.size(1) == vocab, "spec_verify.", op, ": ", name, " must have shape ",
                 expected, " = [", rows, ", ", vocab, "], got ", shape_of(t));
}

void check_logits(const char* op, const char* name, const TensorView& t) {
  check_cpu(op, name, t);
  check_row_dtype(op, name, t);
  SV_CHECK_VALUE((t.dim == 1 || t.dim == 2) && t.size(-1) >= 1, "spec_verify.", op, ": ", name,
                 " must be [V] or [R, V] with V >= 1, got shape ", shape_of(t));
}

int64_t checked_k(const char* op, const TensorView& target, const char* name) {
  check_cpu(op, name, target);
  SV_CHECK_VALUE(target.dim == 2 && target.size(0) >= 1 && target.size(1) >= 1, "spec_verify.", op, ": ", name,
                 " must be 2-D [K+1, V] with K >= 0 and V >= 1, got shape ", shape_of(target));
  return target.size(0) - 1;
}

std::vector<int64_t> checked_tokens(const char* op, const TensorView& t, int64_t k, int64_t vocab,
                                    const char* target_name) {
  check_cpu(op, "draft_tokens", t);
  SV_CHECK_TYPE(is_integral(t.dtype), "spec_verify.", op, ": draft_tokens must have an integer dtype, got ",
                dtype_name(t.dtype));
  SV_CHECK_VALUE(t.dim == 1 && t.size(0) == k, "spec_verify.", op, ": draft_tokens must have shape [K] = [", k,
                 "] (K = ", target_name, ".shape[0] - 1), got ", shape_of(t));
  std::vector<int64_t> tokens = values_of<int64_t>(t, k);
  for (int64_t i = 0; i < k; ++i) {
    SV_CHECK_VALUE(tokens[i] >= 0 && tokens[i] < vocab, "spec_verify.", op, ": draft_tokens[", i, "] = ", tokens[i],
                   " is outside the vocabulary [0, ", vocab, ")");
  }
  return tokens;
}

const double* checked_uniforms(const char* op, const TensorView& uniforms, int64_t count, const char* what,
                               const char* note, bool scalar, std::vector<double>* copy) {
  check_cpu(op, "uniforms", uniforms);
  SV_CHECK_TYPE(uniforms.dtype == DType::kFloat64, "spec_verify.", op, ": uniforms must have dtype torch.float64, got ",
                dtype_name(uniforms.dtype));
  SV_CHECK_VALUE(scalar ? uniforms.dim == 0 : (uniforms.dim == 1 && uniforms.size(0) == count), "spec_verify.", op,
                 ": uniforms must have shape ", scalar ? "[] (one row)" : str("[", what, "] = [", count, "]", note),
                 ", got ", shape_of(uniforms));
  const double* u = static_cast<const double*>(uniforms.data);
  if (!scalar && count > 1 && uniforms.stride(0) != 1) {
    *copy = values_of<double>(uniforms, count);
    u = copy->data();
  }
  for (int64_t i = 0; i < count; ++i) {
    SV_CHECK_VALUE(u[i] >= 0.0 && u[i] < 1.0, "spec_verify.", op, ": uniforms[", i, "] = ", u[i], " is outside [0, 1)");
  }
  return u;
}

void missing_uniforms(const char* op, int64_t count) {
  fail(ErrorKind::kValue, str("spec_verify.", op, ": uniforms must be given: this call draws ", count,
                              " (the Python API draws them from a torch.Generator)"));
}

sv::Method checked_method(const char* op, std::string_view method) {
  if (method == "token") return sv::Method::kToken;
  if (method == "block") return sv::Method::kBlock;
  fail(ErrorKind::kValue, str("spec_verify.", op, ": method must be \"token\" or \"block\", got \"", method, "\""));
}

std::string params_problem(double temperature, int64_t top_k, double top_p, double min_p, sv::WarpParams* out) {
  if (!(temperature >= 0.0 && std::isfinite(temperature)))
    return str("temperature must be a finite number >= 0 (0 = greedy), got ", temperature);
  const float t = static_cast<float>(temperature);
  if (!std::isfinite(t))
    return str("temperature = ", temperature, " overflows float32 (at most ", std::numeric_limits<float>::max(), ")");
  if (!(temperature == 0.0 || t > 0.0f))
    return str("temperature = ", temperature,
               " is positive but rounds to 0 in float32; use 0 for greedy or a larger temperature");
  if (top_k < 0) return str("top_k must be >= 0 (0 = off), got ", top_k);
  if (!(top_p > 0.0 && top_p <= 1.0)) return str("top_p must be in (0, 1] (1 = off), got ", top_p);
  if (!(min_p >= 0.0 && min_p < 1.0)) return str("min_p must be in [0, 1) (0 = off), got ", min_p);
  *out = sv::WarpParams{t, top_k, top_p, min_p};
  return {};
}

sv::WarpParams checked_params(const char* op, double temperature, int64_t top_k, double top_p, double min_p) {
  sv::WarpParams p;
  const std::string problem = params_problem(temperature, top_k, top_p, min_p, &p);
  SV_CHECK_VALUE(problem.empty(), "spec_verify.", op, ": ", problem);
  return p;
}

sv::Rows rows_of(const TensorView& t) {
  return sv::Rows{t.data, t.dim == 2 && t.size(0) > 1 ? t.stride(0) : 0, elem_of(t.dtype)};
}

void raise_if_bad(const char* op, const sv::Outcome& out, const RowNames& names) {
  if (out.error == sv::InputError::kNone) return;
  const char* name = out.in_draft ? names.draft : names.target;
  SV_CHECK_VALUE(out.error != sv::InputError::kZeroMass, "spec_verify.", op, ": ", name, "[", out.row,
                 "] has zero mass (every entry is 0); a row must have positive mass");
  SV_CHECK_VALUE(out.error != sv::InputError::kNoFinite, "spec_verify.", op, ": ", name, "[", out.row,
                 "] has no finite value (every entry is -inf)");
  SV_CHECK_VALUE(out.error != sv::InputError::kOverflow, "spec_verify.", op, ": ", name, "[", out.row, ", ", out.col,
                 "] = ", out.value, " divided by the temperature overflows float32; use a larger temperature (or 0 for "
                 "greedy)");
  const char* what = out.error == sv::InputError::kNaN        ? "NaN"
                     : out.error == sv::InputError::kNegative ? "negative"
                                                              : "infinite";
  const char* rule = out.error == sv::InputError::kNaN ? ""
                     : names.logits ? "; logits may be -inf (a masked token) but not +inf"
                                    : "; probabilities must be finite and non-negative";
  fail(ErrorKind::kValue,
       str("spec_verify.", op, ": ", name, "[", out.row, ", ", out.col, "] = ", out.value, " is ", what, rule));
}

namespace {

// A 1-D integer tensor of n values (or a list of ints), as int64.
std::vector<int64_t> checked_ints(const char* op, const char* name, const IntsArg& ints, int64_t n,
                                  const char* rows_name) {
  if (ints.tensor == nullptr) {
    SV_CHECK_VALUE(static_cast<int64_t>(ints.size) == n, "spec_verify.", op, ": ", name, " must have shape [N] = [", n,
                   "] (N = ", rows_name, ".shape[0] - 1), got [", ints.size, "]");
    return std::vector<int64_t>(ints.list, ints.list + n);
  }
  const TensorView& t = *ints.tensor;
  check_cpu(op, name, t);
  SV_CHECK_TYPE(is_integral(t.dtype), "spec_verify.", op, ": ", name, " must have an integer dtype, got ",
                dtype_name(t.dtype));
  SV_CHECK_VALUE(t.dim == 1 && t.size(0) == n, "spec_verify.", op, ": ", name, " must have shape [N] = [", n,
                 "] (N = ", rows_name, ".shape[0] - 1), got ", shape_of(t));
  return values_of<int64_t>(t, n);
}

}  // namespace

TreeShape checked_tree(const char* op, const RowNames& names, const TensorView& target, const TensorView* draft,
                       const TensorView& tokens, const IntsArg& parents, bool greedy) {
  check_cpu(op, names.target, target);
  SV_CHECK_VALUE(target.dim == 2 && target.size(0) >= 1 && target.size(1) >= 1, "spec_verify.", op, ": ",
                 names.target, " must be 2-D [N+1, V] with N >= 0 and V >= 1, got shape ", shape_of(target));
  TreeShape a{target.size(0) - 1, target.size(1), {}, {}};
  check_rows(op, names.target, target, a.n + 1, a.vocab, "[N+1, V]");
  if (draft != nullptr) check_rows(op, names.draft, *draft, a.n + 1, a.vocab, "[N+1, V]");  // when greedy too, unread
  a.tokens = checked_ints(op, "tokens", IntsArg{&tokens, nullptr, 0}, a.n, names.target);
  a.parents = checked_ints(op, "parents", parents, a.n, names.target);
  for (int64_t j = 0; j < a.n; ++j) {
    SV_CHECK_VALUE(a.tokens[j] >= 0 && a.tokens[j] < a.vocab, "spec_verify.", op, ": tokens[", j, "] = ", a.tokens[j],
                   " is outside the vocabulary [0, ", a.vocab, ")");
    SV_CHECK_VALUE(a.parents[j] >= -1 && a.parents[j] < j, "spec_verify.", op, ": parents[", j, "] = ", a.parents[j],
                   " must be in [-1, ", j, "): nodes in topological order, -1 for a child of the root");
  }
  if (greedy || draft != nullptr) return a;
  // Deterministic children are candidates, not draws: a repeated sibling token has no rule.
  std::vector<std::pair<int64_t, int64_t>> seen;  // (parent, token)
  for (int64_t j = 0; j < a.n; ++j) seen.emplace_back(a.parents[j], a.tokens[j]);
  std::vector<std::pair<int64_t, int64_t>> sorted = seen;
  std::sort(sorted.begin(), sorted.end());
  const auto dup = std::adjacent_find(sorted.begin(), sorted.end());
  if (dup == sorted.end()) return a;
  int64_t first = -1, second = -1;
  for (int64_t j = 0; j < a.n; ++j) {
    if (seen[j] != *dup) continue;
    if (first < 0) first = j;
    else if (second < 0) second = j;
  }
  fail(ErrorKind::kValue, str("spec_verify.", op, ": tokens[", second, "] = ", a.tokens[second],
                              " repeats its sibling tokens[", first, "]; without draft rows the children of a node "
                              "must hold distinct tokens (pass ", names.draft, " for children drawn from the draft)"));
}

BatchShape checked_batch(const char* op, const RowNames& names, const TensorView& target,
                         const TensorView& draft_tokens, const TensorView& cu_num_draft_tokens, const TensorView* draft,
                         std::string_view method) {
  BatchShape a;
  a.method = checked_method(op, method);
  const TensorView& cu = cu_num_draft_tokens;
  check_cpu(op, "cu_num_draft_tokens", cu);
  SV_CHECK_TYPE(is_integral(cu.dtype), "spec_verify.", op, ": cu_num_draft_tokens must have an integer dtype, got ",
                dtype_name(cu.dtype));
  SV_CHECK_VALUE(cu.dim == 1, "spec_verify.", op, ": cu_num_draft_tokens must be 1-D [B], got shape ", shape_of(cu));
  a.cu = values_of<int64_t>(cu, cu.size(0));
  a.batch = static_cast<int64_t>(a.cu.size());
  check_cpu(op, "draft_tokens", draft_tokens);
  SV_CHECK_VALUE(draft_tokens.dim == 1, "spec_verify.", op, ": draft_tokens must be 1-D [N], got shape ",
                 shape_of(draft_tokens));
  a.n = draft_tokens.size(0);
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
  SV_CHECK_VALUE(last == a.n, "spec_verify.", op, ": cu_num_draft_tokens ends at ", last, a.batch > 0 ? "" : " (B = 0)",
                 " but draft_tokens holds N = ", a.n,
                 " tokens; the last running total is the number of draft tokens");
  a.width = max_k + 1;
  check_cpu(op, names.target, target);
  SV_CHECK_VALUE(target.dim == 2 && target.size(1) >= 1, "spec_verify.", op, ": ", names.target,
                 " must be 2-D [N + B, V] with V >= 1, got shape ", shape_of(target));
  a.vocab = target.size(1);
  SV_CHECK_VALUE(target.size(0) == a.n + a.batch, "spec_verify.", op, ": ", names.target, " must have N + B = ",
                 a.n + a.batch, " rows (N = ", a.n, " draft tokens, B = ", a.batch,
                 " sequences: K_b + 1 rows for sequence b), got shape ", shape_of(target));
  check_rows(op, names.target, target, a.n + a.batch, a.vocab, "[N + B, V]");
  if (draft != nullptr) {
    check_cpu(op, names.draft, *draft);
    SV_CHECK_VALUE(draft->dim != 2 || draft->size(0) == a.n, "spec_verify.", op, ": ", names.draft, " must have N = ",
                   a.n, " rows, one per draft token, got shape ", shape_of(*draft));
    check_rows(op, names.draft, *draft, a.n, a.vocab, "[N, V]");
  }
  a.tokens = checked_tokens(op, draft_tokens, a.n, a.vocab);
  return a;
}

namespace {

// A per-sequence parameter tensor [B] (none: `fallback` for every sequence) as doubles;
// `integer`: an integer dtype (top_k), else any real dtype but bool.
std::vector<double> batch_param(const char* op, const char* name, const TensorView* t, int64_t batch,
                                double fallback, bool integer) {
  if (t == nullptr) return std::vector<double>(static_cast<size_t>(batch), fallback);
  check_cpu(op, name, *t);
  SV_CHECK_TYPE(integer ? is_integral(t->dtype) : (is_floating(t->dtype) || is_integral(t->dtype)), "spec_verify.",
                op, ": ", name, " must have ", integer ? "an integer" : "a real (not bool)", " dtype, got ",
                dtype_name(t->dtype));
  SV_CHECK_VALUE(t->dim == 1 && t->size(0) == batch, "spec_verify.", op, ": ", name, " must have shape [B] = [",
                 batch, "], one value per sequence, got ", shape_of(*t));
  return values_of<double>(*t, batch);
}

}  // namespace

std::vector<sv::WarpParams> checked_batch_params(const char* op, const TensorView* temperature,
                                                 const TensorView* top_k, const TensorView* top_p,
                                                 const TensorView* min_p, int64_t batch) {
  const std::vector<double> t = batch_param(op, "temperature", temperature, batch, 1.0, false);
  const std::vector<double> p = batch_param(op, "top_p", top_p, batch, 1.0, false);
  const std::vector<double> m = batch_param(op, "min_p", min_p, batch, 0.0, false);
  std::vector<int64_t> k(static_cast<size_t>(batch), 0);
  if (top_k != nullptr) {
    batch_param(op, "top_k", top_k, batch, 0.0, true);  // dtype and shape
    k = values_of<int64_t>(*top_k, batch);
  }
  std::vector<sv::WarpParams> params(static_cast<size_t>(batch));
  for (int64_t b = 0; b < batch; ++b) {
    const std::string problem = params_problem(t[b], k[b], p[b], m[b], &params[b]);
    SV_CHECK_VALUE(problem.empty(), "spec_verify.", op, ": sequence ", b, ": ", problem);
  }
  return params;
}

std::unique_ptr<bool[]> checked_greedy(const char* op, const TensorView* greedy, int64_t batch) {
  if (greedy == nullptr) return nullptr;
  check_cpu(op, "greedy", *greedy);
  SV_CHECK_TYPE(greedy->dtype == DType::kBool, "spec_verify.", op, ": greedy must have dtype torch.bool, got ",
                dtype_name(greedy->dtype));
  SV_CHECK_VALUE(greedy->dim == 1 && greedy->size(0) == batch, "spec_verify.", op, ": greedy must have shape [B] = [",
                 batch, "], one flag per sequence, got ", shape_of(*greedy));
  const std::vector<char> flags = values_of<char>(*greedy, batch);
  auto out = std::make_unique<bool[]>(static_cast<size_t>(batch));
  std::copy(flags.begin(), flags.end(), out.get());
  return out;
}

}  // namespace spec_verify_binding
