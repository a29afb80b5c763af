#include "errors.h"

#include <torch/headeronly/core/DeviceType.h>

namespace spec_verify_stable __attribute__((visibility("hidden"))) {

std::string shape_of(const Tensor& t) {
  std::ostringstream s;
  s << "[";
  for (int64_t i = 0; i < t.dim(); ++i) s << (i ? ", " : "") << t.size(i);
  s << "]";
  return s.str();
}

std::string dtype_name(ScalarType t) {
  const char* name = "unknown";
  switch (t) {
    case ScalarType::Byte: name = "uint8"; break;
    case ScalarType::Char: name = "int8"; break;
    case ScalarType::Short: name = "int16"; break;
    case ScalarType::Int: name = "int32"; break;
    case ScalarType::Long: name = "int64"; break;
    case ScalarType::Half: name = "float16"; break;
    case ScalarType::Float: name = "float32"; break;
    case ScalarType::Double: name = "float64"; break;
    case ScalarType::ComplexHalf: name = "complex32"; break;
    case ScalarType::ComplexFloat: name = "complex64"; break;
    case ScalarType::ComplexDouble: name = "complex128"; break;
    case ScalarType::Bool: name = "bool"; break;
    case ScalarType::BFloat16: name = "bfloat16"; break;
    case ScalarType::UInt16: name = "uint16"; break;
    case ScalarType::UInt32: name = "uint32"; break;
    case ScalarType::UInt64: name = "uint64"; break;
    case ScalarType::Float8_e5m2: name = "float8_e5m2"; break;
    case ScalarType::Float8_e4m3fn: name = "float8_e4m3fn"; break;
    case ScalarType::Float8_e5m2fnuz: name = "float8_e5m2fnuz"; break;
    case ScalarType::Float8_e4m3fnuz: name = "float8_e4m3fnuz"; break;
    default: break;
  }
  return std::string("torch.") + name;
}

std::string device_name(const torch::stable::Device& d) {
  using torch::headeronly::DeviceType;
  const char* type = "unknown";
  switch (d.type()) {
    case DeviceType::CPU: type = "cpu"; break;
    case DeviceType::CUDA: type = "cuda"; break;
    case DeviceType::Meta: type = "meta"; break;
    case DeviceType::MPS: type = "mps"; break;
    case DeviceType::XPU: type = "xpu"; break;
    case DeviceType::HIP: type = "hip"; break;
    case DeviceType::PrivateUse1: type = "privateuseone"; break;
    default: break;
  }
  return d.index() >= 0 ? str(type, ":", static_cast<int>(d.index())) : std::string(type);
}

std::string layout_name(torch::headeronly::Layout l) {
  using torch::headeronly::Layout;
  switch (l) {
    case Layout::Strided: return "Strided";
    case Layout::Sparse: return "Sparse";
    case Layout::SparseCsr: return "SparseCsr";
    case Layout::SparseCsc: return "SparseCsc";
    case Layout::SparseBsr: return "SparseBsr";
    case Layout::SparseBsc: return "SparseBsc";
    case Layout::Mkldnn: return "Mkldnn";
    case Layout::Jagged: return "Jagged";
    default: return "Unknown";
  }
}

bool is_integral(ScalarType t) {
  switch (t) {
    case ScalarType::Byte: case ScalarType::Char: case ScalarType::Short: case ScalarType::Int:
    case ScalarType::Long: case ScalarType::UInt16: case ScalarType::UInt32: case ScalarType::UInt64:
      return true;
    default:
      return false;
  }
}

bool is_floating(ScalarType t) {
  switch (t) {
    case ScalarType::Half: case ScalarType::Float: case ScalarType::Double: case ScalarType::BFloat16:
    case ScalarType::Float8_e5m2: case ScalarType::Float8_e4m3fn: case ScalarType::Float8_e5m2fnuz:
    case ScalarType::Float8_e4m3fnuz:
      return true;
    default:
      return false;
  }
}

}  // namespace spec_verify_stable
