// Note [Half rows], one value at a time: the scalar path, and every SIMD path's row tails.
#pragma once

#include <bit>
#include <cstdint>

namespace spec_verify {

// IEEE binary16 to float32, exactly. A NaN keeps its payload and sign and comes out quiet,
// as vcvtph2ps and fcvtl give it.
inline float f16_value(uint16_t h) {
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
  const uint32_t exponent = (h >> 10) & 0x1fu;
  const uint32_t mantissa = h & 0x3ffu;
  if (exponent == 0x1fu)  // inf, NaN
    return std::bit_cast<float>(sign | 0x7f800000u | (mantissa << 13) | (mantissa != 0 ? 0x400000u : 0u));
  if (exponent != 0)  // normal: rebias 15 -> 127
    return std::bit_cast<float>(sign | ((exponent + 112u) << 23) | (mantissa << 13));
  // Zero or subnormal: mantissa * 2^-24, exact in float32.
  const float magnitude = static_cast<float>(mantissa) * 0x1p-24f;
  return sign != 0 ? -magnitude : magnitude;
}

// bfloat16 to float32: its bits are the top half of the float's.
inline float bf16_value(uint16_t h) { return std::bit_cast<float>(static_cast<uint32_t>(h) << 16); }

}  // namespace spec_verify
