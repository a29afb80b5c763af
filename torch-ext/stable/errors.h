// The stable binding's errors and the text of its messages, as torch_binding.cpp writes them.
//
// The LibTorch stable ABI has no c10::ValueError or c10::TypeError. A std::invalid_argument
// thrown by a stable kernel reaches Python as a ValueError with exactly its what(), as
// TORCH_CHECK_VALUE's message does; nothing thrown from C++ through the stable ABI becomes a
// TypeError. TypeErrors are thrown as std::runtime_error (RuntimeError in Python) with the
// same text: a difference from torch_binding.cpp that DESIGN.md ("The stable-ABI binding") notes.
#pragma once

#include <torch/csrc/stable/device.h>
#include <torch/csrc/stable/tensor.h>
#include <torch/headeronly/core/Layout.h>
#include <torch/headeronly/core/ScalarType.h>

#include <sstream>
#include <stdexcept>
#include <string>

namespace spec_verify_stable __attribute__((visibility("hidden"))) {

using torch::headeronly::ScalarType;
using torch::stable::Tensor;

template <class... Args>
std::string str(const Args&... args) {
  std::ostringstream s;
  ((s << args), ...);
  return s.str();
}

// TORCH_CHECK_VALUE / TORCH_CHECK_TYPE with the same messages.
#define SV_CHECK_VALUE(cond, ...) \
  if (!(cond)) throw std::invalid_argument(::spec_verify_stable::str(__VA_ARGS__))
#define SV_CHECK_TYPE(cond, ...) \
  if (!(cond)) throw std::runtime_error(::spec_verify_stable::str(__VA_ARGS__))

// "[2, 3]", as c10 prints sizes.
std::string shape_of(const Tensor& t);
// "torch.float64", as c10::getDtypeNames names dtypes.
std::string dtype_name(ScalarType t);
// "cpu", "meta", "cuda:0", as c10 prints a Device.
std::string device_name(const torch::stable::Device& d);
// "Strided", "Sparse", ..., as c10 prints a Layout.
std::string layout_name(torch::headeronly::Layout l);

bool is_integral(ScalarType t);  // at::isIntegralType(t, /*includeBool=*/false)
bool is_floating(ScalarType t);  // at::isFloatingType(t)

}  // namespace spec_verify_stable
