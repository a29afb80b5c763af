// The registry of the stable-ABI build (`scripts/build.py --stable-abi 2.13`: the variant
// torch-stable-abi213-cpu-<arch>-linux, which `kernels` loads on torch 2.13 and every later
// torch): ../common/schemas.h's schemas, and ../common/ops.h's kernels on StableBackend.
#include <torch/csrc/stable/library.h>

#include <stdexcept>

#include "../common/schemas.h"
#include "backend.h"
#include "registration.h"

namespace svb = spec_verify_binding;
namespace sv = spec_verify;
using B = svb::StableBackend;

namespace spec_verify_binding {

void fail(ErrorKind kind, const std::string& message) {
  if (kind == ErrorKind::kType) throw std::runtime_error(message);
  throw std::invalid_argument(message);
}

}  // namespace spec_verify_binding

namespace {

std::string isa() { return svb::kernels().name; }

std::vector<std::string> available_isas() { return sv::available_isas(); }

void force_isa(std::string name) {
  try {
    sv::force_isa(name);
  } catch (const std::invalid_argument& e) {
    svb::fail(svb::ErrorKind::kValue, svb::str("spec_verify: ", e.what()));
  }
}

// The kernels of the tensor ops, for one dispatch key.
void register_tensor_kernels(torch::stable::detail::StableLibrary& ops) {
  ops.impl("verify_greedy", TORCH_BOX(&svb::verify_greedy<B>));
  ops.impl("accept", TORCH_BOX(&svb::accept<B>));
  ops.impl("warp", TORCH_BOX(&svb::warp<B>));
  ops.impl("sample", TORCH_BOX(&svb::sample<B>));
  ops.impl("accept_logits", TORCH_BOX(&svb::accept_logits<B>));
  ops.impl("verify_tree", TORCH_BOX((&svb::verify_tree<B, const B::Tensor&>)));
  ops.impl("verify_tree_probs", TORCH_BOX((&svb::verify_tree_probs<B, const B::Tensor&>)));
  ops.impl("_verify_tree_ints", TORCH_BOX((&svb::verify_tree<B, B::IntsParam>)));
  ops.impl("_verify_tree_probs_ints", TORCH_BOX((&svb::verify_tree_probs<B, B::IntsParam>)));
  ops.impl("verify_batch", TORCH_BOX(&svb::verify_batch<B>));
  ops.impl("verify_batch_probs", TORCH_BOX(&svb::verify_batch_probs<B>));
  ops.impl("_row_masses", TORCH_BOX(&svb::row_masses<B>));
}

}  // namespace

STABLE_TORCH_LIBRARY_EXPAND(TORCH_EXTENSION_NAME, ops) {
  for (const char* schema : svb::kSchemas) ops.def(schema);
}

STABLE_TORCH_LIBRARY_IMPL_EXPAND(TORCH_EXTENSION_NAME, CPU, ops) { register_tensor_kernels(ops); }

// The tensor checks for tensors of other layouts (see check_cpu), so that they get its
// message. NestedTensorCPU is left out: the stable ABI has no is_nested(), and a nested
// tensor's sizes cannot be read through it; such a call meets torch's own error.
STABLE_TORCH_LIBRARY_IMPL_EXPAND(TORCH_EXTENSION_NAME, SparseCPU, ops) { register_tensor_kernels(ops); }
STABLE_TORCH_LIBRARY_IMPL_EXPAND(TORCH_EXTENSION_NAME, SparseCsrCPU, ops) { register_tensor_kernels(ops); }
STABLE_TORCH_LIBRARY_IMPL_EXPAND(TORCH_EXTENSION_NAME, MkldnnCPU, ops) { register_tensor_kernels(ops); }

// The ops without tensors: one kernel for every backend.
STABLE_TORCH_LIBRARY_IMPL_EXPAND(TORCH_EXTENSION_NAME, CompositeExplicitAutograd, ops) {
  ops.impl("isa", TORCH_BOX(&isa));
  ops.impl("available_isas", TORCH_BOX(&available_isas));
  ops.impl("_force_isa", TORCH_BOX(&force_isa));
}

REGISTER_EXTENSION(TORCH_EXTENSION_NAME)
