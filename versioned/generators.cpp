// The batch ops' generators (generators.h): their checks and the batch's locked draw.
#include "generators.h"

#include <algorithm>

namespace spec_verify_versioned __attribute__((visibility("hidden"))) {

namespace {

// Sequence b's generator: generators[b] when given and not None, else `generator`, else the
// default CPU generator.
at::Generator sequence_generator(const std::optional<at::Generator>& generator,
                                 const std::optional<GeneratorList>& generators, int64_t b) {
  if (generators.has_value()) {
    const std::optional<at::Generator> g = generators->get(b);
    if (g.has_value() && g->defined()) return *g;
  }
  return generator.has_value() && generator->defined() ? *generator : at::detail::getDefaultCPUGenerator();
}

}  // namespace

void check_generators(const char* op, const std::optional<at::Generator>& generator,
                      const std::optional<GeneratorList>& generators, int64_t batch) {
  if (generator.has_value() && generator->defined()) {
    TORCH_CHECK_VALUE(generator->device().is_cpu(), "spec_verify.", op, ": generator must be a CPU ",
                      "torch.Generator, got one on ", generator->device());
  }
  if (!generators.has_value()) return;
  TORCH_CHECK_VALUE(static_cast<int64_t>(generators->size()) == batch, "spec_verify.", op,
                    ": generators must hold B = ", batch, " entries (one per sequence, None for `generator`), got ",
                    generators->size());
  for (int64_t b = 0; b < batch; ++b) {
    const std::optional<at::Generator> g = generators->get(b);
    TORCH_CHECK_VALUE(!g.has_value() || !g->defined() || g->device().is_cpu(), "spec_verify.", op,
                      ": generators[", b, "] must be a CPU torch.Generator, got one on ", g->device());
  }
}

BatchUniforms::BatchUniforms(const sv::Batch& in, const int64_t* uniform_begin, int64_t count,
                             const std::optional<at::Generator>& generator,
                             const std::optional<GeneratorList>& generators) {
  c10::SmallVector<at::Generator, 4> gens;  // per sampled sequence, in batch order
  for (int64_t b = 0; b < in.batch; ++b) {
    if (uniform_begin[b] < 0) continue;
    gens.push_back(sequence_generator(generator, generators, b));
    if (std::none_of(unique_.begin(), unique_.end(), [&](const at::Generator& g) { return g == gens.back(); })) {
      unique_.push_back(gens.back());
    }
  }
  std::sort(unique_.begin(), unique_.end(), [](const at::Generator& x, const at::Generator& y) {
    return x.unsafeGetGeneratorImpl() < y.unsafeGetGeneratorImpl();
  });
  locks_.reserve(unique_.size());
  saved_.reserve(unique_.size());
  for (at::Generator& g : unique_) {
    locks_.emplace_back(g.mutex());
    saved_.push_back(at::check_generator<at::CPUGeneratorImpl>(g)->engine());
  }
  uniforms_.resize(static_cast<size_t>(count));
  at::uniform_real_distribution<double> uniform(0.0, 1.0);  // not const: torch 2.10's operator() is not
  size_t next = 0;
  for (int64_t b = 0; b < in.batch; ++b) {
    if (uniform_begin[b] < 0) continue;
    auto* engine = at::check_generator<at::CPUGeneratorImpl>(gens[next++]);
    double* u = uniforms_.data() + uniform_begin[b];
    for (int64_t j = 0; j <= sv::batch_k(in, b); ++j) u[j] = uniform(engine);
  }
}

void BatchUniforms::put_back() {
  for (size_t i = 0; i < unique_.size(); ++i) at::check_generator<at::CPUGeneratorImpl>(unique_[i])->set_engine(saved_[i]);
}

}  // namespace spec_verify_versioned
