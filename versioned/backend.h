// The ops of ../torch-ext/common/ops.h on ATen (the versioned build: torch212 for torch 2.12
// users, torch210 for the emulated aarch64 tests): the view of an at::Tensor, the few tensor
// operations the ops need, and the kernels' argument types. Errors are c10's ValueError and
// TypeError (versioned/torch_binding.cpp), which Python raises as ValueError and TypeError.
#pragma once

#include <ATen/ATen.h>
#include <ATen/EmptyTensor.h>
#include <ATen/Parallel.h>
#include <c10/core/SymInt.h>
#include <c10/util/string_view.h>

#include <optional>
#include <string_view>
#include <tuple>

#include "../torch-ext/common/ops.h"

namespace spec_verify_binding __attribute__((visibility("hidden"))) {

struct AtenBackend {
  using Tensor = at::Tensor;
  using Pair = std::tuple<c10::SymInt, c10::SymInt>;
  using Path = std::tuple<at::Tensor, c10::SymInt>;
  using StrParam = c10::string_view;
  using IntsParam = at::IntArrayRef;

  static std::string_view text(c10::string_view s) { return std::string_view(s.data(), s.size()); }
  static bool given(const std::optional<at::Tensor>& t) { return t.has_value() && t->defined(); }
  static TensorView view(const at::Tensor& t) {
    TensorView v{};
    v.dtype = static_cast<DType>(t.scalar_type());
    v.layout = static_cast<int8_t>(t.layout());
    v.nested = t.is_nested();
    v.device_type = static_cast<int8_t>(t.device().type());
    v.device_index = static_cast<int8_t>(t.device().index());
    v.dim = t.dim();
    if (!v.nested) v.sizes = t.sizes().data();  // a nested tensor has none to read
    if (v.dense() && v.device_type == kCpu) {
      v.strides = t.strides().data();
      v.data = t.const_data_ptr();
    }
    return v;
  }
  static at::Tensor contiguous(const at::Tensor& t) { return t.contiguous(); }
  static at::Tensor to(const at::Tensor& t, DType d) { return t.to(static_cast<at::ScalarType>(d)); }
  // at::detail::empty_cpu: the allocation without a trip through the dispatcher, which would
  // cost a small batch more than its rows.
  static at::Tensor empty(const int64_t* sizes, int64_t dim, DType d) {
    return at::detail::empty_cpu(at::IntArrayRef(sizes, static_cast<size_t>(dim)),
                                 at::TensorOptions().dtype(static_cast<at::ScalarType>(d)));
  }
  static void* mutable_data(const at::Tensor& t) { return t.data_ptr(); }
  // Inside one of torch's parallel regions, one thread.
  static int64_t max_threads() { return at::in_parallel_region() ? 1 : at::get_num_threads(); }
  static Pair pair(int64_t n, int64_t token) { return {c10::SymInt(n), c10::SymInt(token)}; }
  static Path path(const at::Tensor& p, int64_t token) { return {p, c10::SymInt(token)}; }
};

}  // namespace spec_verify_binding
