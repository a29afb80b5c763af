#include "logits_args.h"

#include <cmath>
#include <limits>

namespace spec_verify_versioned __attribute__((visibility("hidden"))) {

sv::WarpParams checked_params(const char* op, double temperature, int64_t top_k, double top_p,
                              double min_p) {
  TORCH_CHECK_VALUE(temperature >= 0.0 && std::isfinite(temperature), "spec_verify.", op,
                    ": temperature must be a finite number >= 0 (0 = greedy), got ", temperature);
  sv::WarpParams p;
  p.temperature = static_cast<float>(temperature);
  TORCH_CHECK_VALUE(std::isfinite(p.temperature), "spec_verify.", op, ": temperature = ",
                    temperature, " overflows float32 (at most ", std::numeric_limits<float>::max(), ")");
  TORCH_CHECK_VALUE(temperature == 0.0 || p.temperature > 0.0f, "spec_verify.", op,
                    ": temperature = ", temperature, " is positive but rounds to 0 in float32; "
                    "use 0 for greedy or a larger temperature");
  TORCH_CHECK_VALUE(top_k >= 0, "spec_verify.", op, ": top_k must be >= 0 (0 = off), got ", top_k);
  TORCH_CHECK_VALUE(top_p > 0.0 && top_p <= 1.0, "spec_verify.", op,
                    ": top_p must be in (0, 1] (1 = off), got ", top_p);
  TORCH_CHECK_VALUE(min_p >= 0.0 && min_p < 1.0, "spec_verify.", op,
                    ": min_p must be in [0, 1) (0 = off), got ", min_p);
  p.top_k = top_k;
  p.top_p = top_p;
  p.min_p = min_p;
  return p;
}

at::Tensor checked_logits(const char* op, const char* name, const at::Tensor& t) {
  check_cpu(op, name, t);
  check_row_dtype(op, name, t);
  TORCH_CHECK_VALUE((t.dim() == 1 || t.dim() == 2) && t.size(-1) >= 1, "spec_verify.", op, ": ", name,
                    " must be [V] or [R, V] with V >= 1, got shape ", shape_of(t));
  const at::Tensor rows = t.dim() == 1 ? t.unsqueeze(0) : t;
  return rows.stride(1) == 1 ? rows : rows.contiguous();
}

LogitsArgs checked_logits_args(const char* op, const at::Tensor& target_logits,
                               const std::optional<at::Tensor>& draft_logits,
                               const at::Tensor& draft_tokens, const sv::WarpParams& params,
                               c10::string_view method) {
  LogitsArgs a;
  a.method = checked_method(op, method);
  a.k = checked_k(op, target_logits, "target_logits");
  a.vocab = target_logits.size(1);
  a.greedy = params.temperature == 0.0f;
  a.target = checked_rows(op, "target_logits", target_logits, a.k + 1, a.vocab, "[K+1, V]");
  if (draft_logits.has_value() && draft_logits->defined()) {  // checked at temperature 0 too, unread
    a.draft = checked_rows(op, "draft_logits", *draft_logits, a.k, a.vocab, "[K, V]");
  }
  a.tokens = checked_tokens(op, draft_tokens, a.k, a.vocab, "target_logits");
  return a;
}

}  // namespace spec_verify_versioned
