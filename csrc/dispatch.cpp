// The one place a path is chosen. Compiled without any instruction-set flags, so loading the
// library never executes an instruction the CPU lacks.
#include <atomic>
#include <cstdlib>
#include <stdexcept>

#include "spec_verify.h"

namespace spec_verify {
namespace {

// Every path this build knows, best first; nullptr where the build or the CPU lacks it.
struct Candidate {
  const char* name;
  const KernelTable* table;
};

std::vector<Candidate> candidates() {
  return {{"neon", neon_kernels()},
          {"avx512", avx512_kernels()},
          {"avx2", avx2_kernels()},
          {"scalar", &scalar_kernels()}};
}

const KernelTable& by_name(const std::string& name, const char* origin) {
  for (const Candidate& c : candidates()) {
    if (name != c.name) continue;
    if (c.table == nullptr) {
      throw std::invalid_argument(std::string(origin) + " asks for the '" + name +
                                  "' path, which this build or this CPU cannot run; available: " +
                                  [] {
                                    std::string list;
                                    for (const std::string& n : available_isas())
                                      list += (list.empty() ? "" : ", ") + n;
                                    return list;
                                  }());
    }
    return *c.table;
  }
  throw std::invalid_argument(std::string(origin) + " = '" + name +
                              "' is not a path; expected one of: neon, avx512, avx2, scalar");
}

const KernelTable& environment_choice() {
  // Chosen once. If SPEC_VERIFY_ISA is bad, the initialiser throws, nothing is cached, and
  // every call reports the same error instead of silently falling back.
  static const KernelTable& chosen = []() -> const KernelTable& {
    const char* forced = std::getenv("SPEC_VERIFY_ISA");
    if (forced != nullptr && *forced != '\0') return by_name(forced, "SPEC_VERIFY_ISA");
    for (const Candidate& c : candidates())
      if (c.table != nullptr) return *c.table;
    return scalar_kernels();
  }();
  return chosen;
}

std::atomic<const KernelTable*> g_forced{nullptr};

}  // namespace

std::vector<std::string> available_isas() {
  std::vector<std::string> names;
  for (const Candidate& c : candidates())
    if (c.table != nullptr) names.emplace_back(c.name);
  return names;
}

const KernelTable& active_kernels() {
  const KernelTable* forced = g_forced.load(std::memory_order_acquire);
  return forced != nullptr ? *forced : environment_choice();
}

void force_isa(const std::string& name) {
  g_forced.store(name.empty() ? nullptr : &by_name(name, "force_isa"), std::memory_order_release);
}

}  // namespace spec_verify
