// The binding's vocabulary, shared by both builds and free of torch headers: a tensor as the
// argument checks see it (TensorView), the two kinds of argument error, and the messages'
// pieces as c10 prints them. Each build fills a view from its own tensor type and turns an
// ErrorKind into its own exception (torch-ext/stable/backend.h, versioned/backend.h).
#pragma once

#include <cstdint>
#include <sstream>
#include <string>

#include "spec_verify.h"

namespace spec_verify_binding __attribute__((visibility("hidden"))) {

namespace sv = spec_verify;

// torch's ScalarType numbering (stable: torch serializes it), named where the checks use it.
enum class DType : int8_t {
  kUInt8 = 0, kInt8 = 1, kInt16 = 2, kInt32 = 3, kInt64 = 4, kFloat16 = 5, kFloat32 = 6, kFloat64 = 7,
  kBool = 11, kBFloat16 = 15, kUInt16 = 27, kUInt32 = 28, kUInt64 = 29,
};
// torch's Layout and DeviceType numbering, likewise.
constexpr int8_t kStrided = 0;
constexpr int8_t kCpu = 0;

// What the checks read of a tensor. Sizes and strides are borrowed from the tensor (valid
// while it lives); strides and data are null unless the tensor is dense (strided, not nested).
struct TensorView {
  DType dtype;
  int8_t layout;
  bool nested;
  int8_t device_type;
  int8_t device_index;
  int64_t dim;
  const int64_t* sizes;
  const int64_t* strides;
  const void* data;

  int64_t size(int64_t d) const { return sizes[d < 0 ? d + dim : d]; }
  int64_t stride(int64_t d) const { return strides[d]; }
  bool dense() const { return layout == kStrided && !nested; }
};

// kType: a dtype or a layout (a TypeError from the Python API); kValue: everything else.
enum class ErrorKind { kValue, kType };

// Throws the build's exception for `kind` with exactly `message` (each build defines it).
[[noreturn]] void fail(ErrorKind kind, const std::string& message);

template <class... Args>
std::string str(const Args&... args) {
  std::ostringstream s;
  ((s << args), ...);
  return s.str();
}

// TORCH_CHECK_VALUE / TORCH_CHECK_TYPE of the shared code: the message is built on failure only.
#define SV_CHECK_VALUE(cond, ...) \
  if (!(cond)) ::spec_verify_binding::fail(::spec_verify_binding::ErrorKind::kValue, ::spec_verify_binding::str(__VA_ARGS__))
#define SV_CHECK_TYPE(cond, ...) \
  if (!(cond)) ::spec_verify_binding::fail(::spec_verify_binding::ErrorKind::kType, ::spec_verify_binding::str(__VA_ARGS__))

// "[2, 3]", as c10 prints sizes; "torch.float64", as users write a dtype; "cpu", "meta",
// "cuda:0", as c10 prints a device; "Strided", "Sparse", ..., as c10 prints a layout.
std::string shape_of(const TensorView& t);
std::string dtype_name(DType t);
std::string device_name(int8_t type, int8_t index);
std::string layout_name(int8_t layout);

bool is_integral(DType t);  // at::isIntegralType(t, /*includeBool=*/false)
bool is_floating(DType t);  // at::isFloatingType(t)

}  // namespace spec_verify_binding
