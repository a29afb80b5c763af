// The registry of the versioned build (ATen's API; `scripts/build.py --versioned`, and any
// torch older than the stable ABI 2.13: the torch212 and torch210 variants):
// ../torch-ext/common/schemas.h's schemas, and ../torch-ext/common/ops.h's kernels on
// AtenBackend.
#include <torch/library.h>

#include <stdexcept>
#include <string>
#include <vector>

#include "../torch-ext/common/schemas.h"
#include "backend.h"
#include "registration.h"

namespace svb = spec_verify_binding;
namespace sv = spec_verify;
using B = svb::AtenBackend;

namespace spec_verify_binding {

void fail(ErrorKind kind, const std::string& message) {
  if (kind == ErrorKind::kType) C10_THROW_ERROR(TypeError, message);
  C10_THROW_ERROR(ValueError, message);
}

}  // namespace spec_verify_binding

namespace {

std::string isa() { return svb::kernels().name; }

std::vector<std::string> available_isas() { return sv::available_isas(); }

void force_isa(const std::string& name) {
  try {
    sv::force_isa(name);
  } catch (const std::invalid_argument& e) {
    svb::fail(svb::ErrorKind::kValue, svb::str("spec_verify: ", e.what()));
  }
}

}  // namespace

TORCH_LIBRARY_EXPAND(TORCH_EXTENSION_NAME, ops) {
  for (const char* schema : svb::kSchemas) ops.def(schema);
  // The CPU kernels, and the tensor checks for tensors of other layouts (see check_cpu), so
  // that they get its message instead of torch's "could not run".
  for (const c10::DispatchKey key : {c10::DispatchKey::CPU, c10::DispatchKey::SparseCPU, c10::DispatchKey::SparseCsrCPU,
                                     c10::DispatchKey::MkldnnCPU, c10::DispatchKey::NestedTensorCPU}) {
    ops.impl("verify_greedy", key, &svb::verify_greedy<B>);
    ops.impl("accept", key, &svb::accept<B>);
    ops.impl("warp", key, &svb::warp<B>);
    ops.impl("sample", key, &svb::sample<B>);
    ops.impl("accept_logits", key, &svb::accept_logits<B>);
    ops.impl("verify_tree", key, &svb::verify_tree<B, const at::Tensor&>);
    ops.impl("verify_tree_probs", key, &svb::verify_tree_probs<B, const at::Tensor&>);
    ops.impl("_verify_tree_ints", key, &svb::verify_tree<B, B::IntsParam>);
    ops.impl("_verify_tree_probs_ints", key, &svb::verify_tree_probs<B, B::IntsParam>);
    ops.impl("verify_batch", key, &svb::verify_batch<B>);
    ops.impl("verify_batch_probs", key, &svb::verify_batch_probs<B>);
    ops.impl("_row_masses", key, &svb::row_masses<B>);
  }
  // The ops without tensors: one kernel for every backend.
  ops.impl("isa", c10::DispatchKey::CompositeExplicitAutograd, &isa);
  ops.impl("available_isas", c10::DispatchKey::CompositeExplicitAutograd, &available_isas);
  ops.impl("_force_isa", c10::DispatchKey::CompositeExplicitAutograd, &force_isa);
}

REGISTER_EXTENSION(TORCH_EXTENSION_NAME)
