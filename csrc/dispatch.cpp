// The one place a path is chosen. Compiled without any instruction-set flags, so loading the
// library never executes an instruction the CPU lacks.
#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <iterator>
#include <memory>
#include <mutex>
#include <stdexcept>
#include <utility>

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

bool never_vouches(const float*, int64_t, float*) { return false; }

// Each optional kernel a shortcut rests on, and how to take it out. row_sum_f32 is not
// optional: a version that never vouches sends every row to row_mass.
struct Shortcut {
  const char* name;
  void (*take_out)(KernelTable&);
};

const Shortcut kShortcuts[] = {
    {"row_mass_pair", [](KernelTable& t) { t.row_mass_pair = nullptr; }},
    {"row_sum_f32", [](KernelTable& t) { t.row_sum_f32 = never_vouches; }},
    {"row_block_sums", [](KernelTable& t) { t.row_block_sums = nullptr; }},
    {"residual_block_sums", [](KernelTable& t) { t.residual_block_sums = nullptr; }},
    {"row_mass_pair_guess", [](KernelTable& t) { t.row_mass_pair_guess = nullptr; }},
    {"pair_block_sums", [](KernelTable& t) { t.pair_block_sums = nullptr; }},
    {"row_weight_sums", [](KernelTable& t) { t.row_weight_sums = nullptr; }},
    {"row_upper_weight_sums", [](KernelTable& t) { t.row_upper_weight_sums = nullptr; }},
    {"row_upper_weight_sums_above", [](KernelTable& t) { t.row_upper_weight_sums_above = nullptr; }},
    {"row_argmax_upper_weight_sums", [](KernelTable& t) { t.row_argmax_upper_weight_sums = nullptr; }},
};

// SPEC_VERIFY_EXACT: "" or unset = shortcuts on; "1" = all out; else a list of field names.
const char* exact_setting() {
  static const char* setting = [] {
    const char* v = std::getenv("SPEC_VERIFY_EXACT");
    return v == nullptr || *v == '\0' || std::string(v) == "0" ? nullptr : v;
  }();
  return setting;
}

// The exact version of each path's table, made once per path on first use.
const KernelTable& maybe_exact(const KernelTable& kt) {
  const char* setting = exact_setting();
  if (setting == nullptr) return kt;
  static std::mutex lock;
  static std::vector<std::pair<const KernelTable*, std::unique_ptr<KernelTable>>> made;
  std::lock_guard<std::mutex> guard(lock);
  for (const auto& m : made)
    if (m.first == &kt) return *m.second;
  const std::string only = std::string(setting) == "1" ? "" : setting;
  made.emplace_back(&kt, std::make_unique<KernelTable>(exact_kernels(kt, only)));
  return *made.back().second;
}

}  // namespace

KernelTable exact_kernels(const KernelTable& kt, const std::string& only) {
  KernelTable t = kt;
  std::vector<bool> used(std::size(kShortcuts), only.empty());
  size_t start = 0;
  while (!only.empty() && start <= only.size()) {
    const size_t end = std::min(only.find(',', start), only.size());
    const std::string name = only.substr(start, end - start);
    bool known = false;
    for (size_t i = 0; i < std::size(kShortcuts); ++i)
      if (name == kShortcuts[i].name) used[i] = known = true;
    if (!known) {
      std::string list;
      for (const Shortcut& s : kShortcuts) list += (list.empty() ? "" : ", ") + std::string(s.name);
      throw std::invalid_argument("SPEC_VERIFY_EXACT names '" + name +
                                  "', which is not an optional kernel; expected 1 or a comma-separated list of: " + list);
    }
    start = end + 1;
  }
  for (size_t i = 0; i < std::size(kShortcuts); ++i)
    if (used[i]) kShortcuts[i].take_out(t);
  return t;
}

std::vector<std::string> shortcut_kernels() {
  std::vector<std::string> names;
  for (const Shortcut& s : kShortcuts) names.emplace_back(s.name);
  return names;
}

std::vector<std::string> available_isas() {
  std::vector<std::string> names;
  for (const Candidate& c : candidates())
    if (c.table != nullptr) names.emplace_back(c.name);
  return names;
}

const KernelTable& active_kernels() {
  const KernelTable* forced = g_forced.load(std::memory_order_acquire);
  return maybe_exact(forced != nullptr ? *forced : environment_choice());
}

void force_isa(const std::string& name) {
  g_forced.store(name.empty() ? nullptr : &by_name(name, "force_isa"), std::memory_order_release);
}

}  // namespace spec_verify
