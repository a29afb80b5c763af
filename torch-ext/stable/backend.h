// The ops of ../common/ops.h on the LibTorch stable ABI (torch/csrc/stable, torch/headeronly):
// the view of a torch::stable::Tensor, the few tensor operations the ops need, and the
// argument types of the boxed kernels.
//
// Errors: the stable ABI has no c10::ValueError or c10::TypeError. A std::invalid_argument
// thrown by a stable kernel reaches Python as a ValueError with exactly its what() under torch
// 2.13 and 2.14 (2.15: a RuntimeError); nothing thrown through it becomes a TypeError, so type
// errors are std::runtime_error with the same text, and the Python API raises them as
// TypeErrors (spec_verify/_errors.py).
#pragma once

#include <torch/csrc/stable/ops.h>
#include <torch/csrc/stable/stableivalue_conversions.h>
#include <torch/csrc/stable/tensor.h>

#include <optional>
#include <string>
#include <string_view>
#include <tuple>

#include "../common/ops.h"

namespace spec_verify_binding __attribute__((visibility("hidden"))) {

// A `str` argument of a boxed kernel (the ops' `method`). TORCH_BOX turns a std::string_view
// parameter into a std::string made by torch 2.13's to<std::string>, which copies the text
// into a `new std::string` it never deletes: 48 bytes of heap lost per call, and on a heap
// that other calls grow and trim, about a page of resident memory per call (issue 54). This
// type's conversion (below) copies the text and frees torch's handle, owning nothing else.
struct StrArg {
  std::string text;
};

struct StableBackend {
  using Tensor = torch::stable::Tensor;
  using Pair = std::tuple<int64_t, int64_t>;
  using Path = std::tuple<Tensor, int64_t>;
  using StrParam = const StrArg&;
  using IntsParam = const std::vector<int64_t>&;

  static std::string_view text(const StrArg& s) { return s.text; }
  static bool given(const std::optional<Tensor>& t) { return t.has_value(); }
  static TensorView view(const Tensor& t) {
    TensorView v{};
    v.dtype = static_cast<DType>(t.scalar_type());
    v.layout = static_cast<int8_t>(t.layout());
    const torch::stable::Device device = t.device();
    v.device_type = static_cast<int8_t>(device.type());
    v.device_index = static_cast<int8_t>(device.index());
    v.dim = t.dim();
    v.sizes = t.sizes().data();
    if (v.dense() && v.device_type == kCpu) {
      v.strides = t.strides().data();
      v.data = t.const_data_ptr();
    }
    return v;
  }
  static Tensor contiguous(const Tensor& t) { return torch::stable::contiguous(t); }
  static Tensor to(const Tensor& t, DType d) { return torch::stable::to(t, static_cast<torch::headeronly::ScalarType>(d)); }
  static Tensor empty(const int64_t* sizes, int64_t dim, DType d) {
    return torch::stable::empty(torch::headeronly::IntHeaderOnlyArrayRef(sizes, static_cast<size_t>(dim)),
                                static_cast<torch::headeronly::ScalarType>(d));
  }
  static void* mutable_data(const Tensor& t) { return t.mutable_data_ptr(); }
  // No at::in_parallel_region() on the stable ABI: inside one of torch's parallel regions a
  // batch still uses the pool (the same results; only the threads differ).
  static int64_t max_threads() { return static_cast<int64_t>(torch::stable::get_num_threads()); }
  static Pair pair(int64_t n, int64_t token) { return {n, token}; }
  static Path path(const Tensor& p, int64_t token) { return {p, token}; }
};

}  // namespace spec_verify_binding

// StrArg from a boxed kernel's stack: the text of torch's string handle, which is then freed
// (as torch's own conversion does, without its leaked copy).
HIDDEN_NAMESPACE_BEGIN(torch, stable, detail)
template <>
struct ToImpl<spec_verify_binding::StrArg> {
  static spec_verify_binding::StrArg call(StableIValue val, [[maybe_unused]] uint64_t extension_build_version,
                                          [[maybe_unused]] bool is_internal) {
    StringHandle handle = torch::stable::detail::to<StringHandle>(val);
    size_t length = 0;
    const char* data = nullptr;
    spec_verify_binding::StrArg out;
    try {
      STABLE_TORCH_ERROR_CODE_CHECK(torch_string_length(handle, &length));
      STABLE_TORCH_ERROR_CODE_CHECK(torch_string_c_str(handle, &data));
      out.text.assign(data, length);
    } catch (...) {
      torch_delete_string(handle);
      throw;
    }
    STABLE_TORCH_ERROR_CODE_CHECK(torch_delete_string(handle));
    return out;
  }
};
HIDDEN_NAMESPACE_END(torch, stable, detail)
