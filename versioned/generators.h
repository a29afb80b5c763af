// The versioned binding's generators: uniforms drawn from a torch.Generator as torch.rand
// draws them, and put back when a call raises. (The stable ABI cannot draw from a Generator:
// torch-ext/spec_verify/_stable.py draws for the stable binding, the same stream.)
#pragma once

#include <ATen/CPUGeneratorImpl.h>
#include <ATen/core/DistributionsHelper.h>
#include <ATen/core/Generator.h>
#include <ATen/core/List.h>
#include <c10/util/SmallVector.h>

#include <cstdint>
#include <mutex>
#include <optional>
#include <vector>

#include "checks.h"

namespace spec_verify_versioned __attribute__((visibility("hidden"))) {

using GeneratorList = c10::List<std::optional<at::Generator>>;

// Whether an op's `uniforms` were given (then they decide the round and nothing is drawn);
// a generator beside them has nothing to do and is refused.
inline bool uniforms_given(const char* op, const std::optional<at::Tensor>& uniforms,
                           const std::optional<at::Generator>& generator) {
  if (!uniforms.has_value() || !uniforms->defined()) return false;
  TORCH_CHECK_VALUE(!(generator.has_value() && generator->defined()), "spec_verify.", op,
                    ": pass uniforms or generator, not both (given uniforms, nothing is drawn)");
  return true;
}

// Runs run(uniforms) with `count` float64 uniforms drawn from the generator: the stream
// torch.rand(count, dtype=torch.float64, generator=generator) gives (one random64() per
// value, in order), drawn without a tensor. The engine is kept so that a malformed row,
// found only as rows are read, can put the generator back: a call that raises changes
// nothing.
template <class Run>
sv::Outcome with_uniforms(const char* op, const std::optional<at::Generator>& generator,
                          int64_t count, Run run) {
  kernels();  // a bad SPEC_VERIFY_ISA raises here, before anything is drawn
  // Borrowed, not copied: the caller's generator (or the default one) outlives the call.
  const at::Generator& gen = generator.has_value() && generator->defined()
                                 ? *generator
                                 : at::detail::getDefaultCPUGenerator();
  TORCH_CHECK_VALUE(gen.device().is_cpu(), "spec_verify.", op, ": generator must be a CPU ",
                    "torch.Generator, got one on ", gen.device());
  auto* engine = gen.get<at::CPUGeneratorImpl>();
  std::lock_guard<std::mutex> lock(engine->mutex_);
  const at::mt19937 saved = engine->engine();
  c10::SmallVector<double, 16> uniforms(static_cast<size_t>(count));
  at::uniform_real_distribution<double> uniform(0.0, 1.0);  // not const: torch 2.10's operator() is not
  for (double& u : uniforms) u = uniform(engine);
  const sv::Outcome out = run(uniforms.data());
  if (out.error != sv::InputError::kNone) engine->set_engine(saved);
  return out;
}

// The generators of a batch op: `generator` and each entry of `generators` on the CPU,
// and B entries in `generators`.
void check_generators(const char* op, const std::optional<at::Generator>& generator,
                      const std::optional<GeneratorList>& generators, int64_t batch);

// The uniforms of a batch's sampled sequences (sv::batch_uniform_offsets laid them out:
// uniform_begin, count in all), drawn in batch order, K_b + 1 per sequence, each from its
// generator (generators[b] when given and not None, else `generator`, else the default CPU
// generator) as torch.rand(K_b + 1, dtype=torch.float64, generator=g) would. Every generator
// involved stays locked while this lives (locked in address order, so two calls never wait
// on each other's locks); put_back() restores each as it was before the draw.
class BatchUniforms {
 public:
  BatchUniforms(const sv::Batch& in, const int64_t* uniform_begin, int64_t count,
                const std::optional<at::Generator>& generator, const std::optional<GeneratorList>& generators);
  const double* data() const { return uniforms_.data(); }
  void put_back();

 private:
  // Declared before the locks, so destroyed after them: each lock's mutex is its generator's.
  c10::SmallVector<at::Generator, 4> unique_;
  std::vector<std::unique_lock<std::mutex>> locks_;
  std::vector<at::mt19937> saved_;
  std::vector<double> uniforms_;
};

}  // namespace spec_verify_versioned
