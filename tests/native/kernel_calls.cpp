// Calls one kernel of one path on rows of V elements, a given number of times, so that
// the instructions executed inside the kernel files can be counted under qemu
// (scripts/insn_budget.py). Usage: kernel_calls KERNEL PATH V REPS, KERNEL one of argmax, mass,
// residual, residual_store, weights, keep, gather, and for half rows (Note [Half rows]) widen_f16,
// widen_bf16, argmax_bf16 and mass_f16 (a half row through typed_argmax / typed_mass).
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "spec_verify.h"

namespace sv = spec_verify;

int main(int argc, char** argv) {
  if (argc != 5) {
    std::fprintf(stderr, "usage: %s KERNEL PATH V REPS\n", argv[0]);
    return 2;
  }
  const std::string kernel = argv[1];
  sv::force_isa(argv[2]);
  const sv::KernelTable& kt = sv::active_kernels();
  const int64_t n = std::atoll(argv[3]);
  const int reps = std::atoi(argv[4]);

  // Softmax-like rows without libm: a fixed pseudo-random spread of positive values.
  std::vector<float> p(n), q(n);
  uint32_t s = 12345;
  for (int64_t v = 0; v < n; ++v) {
    s = s * 1664525u + 1013904223u;
    p[v] = static_cast<float>(s >> 8) * 0x1.0p-24f;
    s = s * 1664525u + 1013904223u;
    q[v] = static_cast<float>(s >> 8) * 0x1.0p-24f;
  }
  std::vector<double> blocks(sv::num_blocks(n)), blocks_q(sv::num_blocks(n));
  double P = 0, Q = 0, R = 0;
  sv::scalar_kernels().row_mass(p.data(), n, blocks.data(), &P);
  sv::scalar_kernels().row_mass(q.data(), n, blocks.data(), &Q);
  float a, b;
  sv::residual_scales(P, Q, &a, &b);

  // Logits for the weights (spread over 8 units at temperature 0.8) and weights for keep.
  std::vector<float> x(n), w(n), out(n);
  std::vector<int64_t> index(n);
  float x_max = -1.0f;
  for (int64_t v = 0; v < n; ++v) {
    x[v] = 8.0f * p[v];
    x_max = x[v] > x_max ? x[v] : x_max;
  }
  // Outside the kernel files (libm), so the setup adds nothing to the counts.
  for (int64_t v = 0; v < n; ++v) w[v] = std::exp((x[v] - x_max) / 0.8f);
  std::vector<double> above(sv::num_blocks(n));
  // The same probabilities as halves: bfloat16 by truncation, binary16 of values in (0, 1)
  // built from the float's bits (rounded down; exact values are not the point here).
  std::vector<uint16_t> p_bf16(n), p_f16(n);
  for (int64_t v = 0; v < n; ++v) {
    uint32_t bits = 0;
    std::memcpy(&bits, &p[v], 4);
    p_bf16[v] = static_cast<uint16_t>(bits >> 16);
    const int e = static_cast<int>((bits >> 23) & 0xff) - 127;  // in [-24, -1] for most values
    p_f16[v] = e < -14 ? 0x0400 : static_cast<uint16_t>(((e + 15) << 10) | ((bits >> 13) & 0x3ff));
  }

  double sink = 0;
  for (int r = 0; r < reps; ++r) {
    if (kernel == "argmax") {
      int64_t index = 0;
      kt.row_argmax(p.data(), n, &index);
      sink += static_cast<double>(index);
    } else if (kernel == "mass") {
      double m = 0;
      kt.row_mass(p.data(), n, blocks.data(), &m);
      sink += m;
    } else if (kernel == "residual") {
      kt.residual_mass(p.data(), q.data(), a, b, n, blocks.data(), &R);
      sink += R;
    } else if (kernel == "weights") {
      double m = 0;
      kt.row_weights(x.data(), n, 0.8f, x_max / 0.8f, out.data(), blocks.data(), &m);
      sink += m;
    } else if (kernel == "gather") {
      sink += static_cast<double>(kt.gather_at_least(w.data(), n, 0.5f, index.data()));
    } else if (kernel == "keep") {
      double m = 0, a = 0;
      kt.keep_at_least(w.data(), n, 0.01f, out.data(), blocks.data(), &m, above.data(), &a);
      sink += m + a;
    } else if (kernel == "residual_store") {
      kt.residual_store(p.data(), q.data(), a, b, n, out.data(), blocks.data(), &R);
      sink += R;
    } else if (kernel == "widen_f16") {
      kt.widen_f16(p_f16.data(), n, out.data());
      sink += out[n - 1];
    } else if (kernel == "widen_bf16") {
      kt.widen_bf16(p_bf16.data(), n, out.data());
      sink += out[n - 1];
    } else if (kernel == "argmax_bf16") {
      int64_t index = 0;
      sv::typed_argmax(kt, sv::RowRef(p_bf16.data(), sv::Elem::kBF16), n, &index);
      sink += static_cast<double>(index);
    } else if (kernel == "mass_f16") {
      double m = 0;
      sv::typed_mass(kt, sv::RowRef(p_f16.data(), sv::Elem::kF16), n, blocks.data(), &m);
      sink += m;
    } else {
      std::fprintf(stderr, "unknown kernel %s\n", kernel.c_str());
      return 2;
    }
  }
  std::printf("%s %s %lld %.17g\n", kernel.c_str(), kt.name, static_cast<long long>(n), sink);
  return 0;
}
