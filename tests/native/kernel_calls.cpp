// Calls one kernel of one path on rows of V elements, a given number of times, so that
// the instructions executed inside the kernel files can be counted under qemu
// (scripts/insn_budget.py). Usage: kernel_calls argmax|mass|residual|weights|keep|gather PATH V REPS
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "spec_verify.h"

namespace sv = spec_verify;

int main(int argc, char** argv) {
  if (argc != 5) {
    std::fprintf(stderr, "usage: %s argmax|mass|residual|weights|keep|gather PATH V REPS\n", argv[0]);
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
  std::vector<double> blocks(sv::num_blocks(n));
  double P = 0, Q = 0, R = 0;
  sv::scalar_kernels().row_mass(p.data(), n, blocks.data(), &P);
  sv::scalar_kernels().row_mass(q.data(), n, blocks.data(), &Q);
  float a, b;
  sv::residual_scales(P, Q, &a, &b);

  // Logits for the weights (spread over 8 units at temperature 0.8) and weights for keep.
  std::vector<float> x(n), w(n), out(n);
  float x_max = -1.0f;
  for (int64_t v = 0; v < n; ++v) {
    x[v] = 8.0f * p[v];
    x_max = x[v] > x_max ? x[v] : x_max;
  }
  // Outside the kernel files (libm), so the setup adds nothing to the counts.
  for (int64_t v = 0; v < n; ++v) w[v] = std::exp((x[v] - x_max) / 0.8f);
  std::vector<double> above(sv::num_blocks(n));

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
      sink += static_cast<double>(kt.gather_at_least(w.data(), n, 0.5f, out.data()));
    } else if (kernel == "keep") {
      double m = 0, a = 0;
      kt.keep_at_least(w.data(), n, 0.01f, out.data(), blocks.data(), &m, above.data(), &a);
      sink += m + a;
    } else {
      std::fprintf(stderr, "unknown kernel %s\n", kernel.c_str());
      return 2;
    }
  }
  std::printf("%s %s %lld %.17g\n", kernel.c_str(), kt.name, static_cast<long long>(n), sink);
  return 0;
}
