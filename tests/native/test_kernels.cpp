// Every kernel of the KernelTable on every path against the scalar path, bit for bit, over
// lengths around every vector width and block edge, misaligned starts, special values and
// guard pages (kernel_parity); whole rounds with the rows after the deciding one unreadable
// (round_tests); and main, which runs every file's tests in one fixed order of one random
// stream.
#include "harness.h"

namespace native_tests {

void kernel_parity(Rng& rng, const std::vector<const sv::KernelTable*>& kts, int64_t n) {
  const sv::KernelTable& ref = sv::scalar_kernels();
  const int64_t blocks = sv::num_blocks(n);
  std::vector<double> ref_blocks(blocks), got_blocks(blocks);
  for (int fill = 0; fill < kFillCount; ++fill) {
    const std::vector<float> pv = make_row(rng, n, fill);
    const std::vector<float> qv = make_row(rng, n, fill == kOneNaN ? kUniform : (fill + 1) % kFillCount);
    const bool at_end = rng.below(2) == 0;
    const int64_t offset = at_end ? 0 : rng.below(8);
    const GuardedRow p(pv, at_end, offset), q(qv, !at_end, 7 - offset);

    int64_t ref_index = -1;
    const bool ref_ok = ref.row_argmax(p.data, n, &ref_index);
    double ref_mass = -1.0;
    const bool ref_mass_ok = ref.row_mass(p.data, n, ref_blocks.data(), &ref_mass);
    double ref_q_mass = -1.0;
    std::vector<double> q_blocks(blocks);
    const bool q_ok = ref.row_mass(q.data, n, q_blocks.data(), &ref_q_mass);

    for (const sv::KernelTable* kt : kts) {
      int64_t index = -2;
      const bool ok = kt->row_argmax(p.data, n, &index);
      check(ok == ref_ok && (!ok || index == ref_index), label(*kt, "row_argmax", n, fill, at_end, offset) +
                                                             " index " + std::to_string(index) + " vs " +
                                                             std::to_string(ref_index));
      double mass = -2.0;
      const bool mass_ok = kt->row_mass(p.data, n, got_blocks.data(), &mass);
      bool same = mass_ok == ref_mass_ok;
      if (same && mass_ok) {
        same = bits(mass) == bits(ref_mass);
        for (int64_t b = 0; b < blocks; ++b) same &= bits(got_blocks[b]) == bits(ref_blocks[b]);
      }
      check(same, label(*kt, "row_mass", n, fill, at_end, offset));

      if (ref_mass_ok && q_ok && ref_mass > 0 && ref_q_mass > 0) {
        float a, b;
        sv::residual_scales(ref_mass, ref_q_mass, &a, &b);
        std::vector<double> rb(blocks), gb(blocks);
        double rm = -1, gm = -2;
        ref.residual_mass(p.data, q.data, a, b, n, rb.data(), &rm);
        kt->residual_mass(p.data, q.data, a, b, n, gb.data(), &gm);
        bool same_r = bits(rm) == bits(gm);
        for (int64_t k = 0; k < blocks; ++k) same_r &= bits(rb[k]) == bits(gb[k]);
        check(same_r, label(*kt, "residual_mass", n, fill, at_end, offset));
        // residual_store: residual_mass's masses, and every r'(v) stored; also in place.
        std::vector<float> stored(n, -1.0f), in_place(p.data, p.data + n);
        std::vector<double> sb(blocks);
        double sm = -3;
        kt->residual_store(p.data, q.data, a, b, n, stored.data(), sb.data(), &sm);
        bool same_s = bits(sm) == bits(rm) && std::memcmp(sb.data(), rb.data(), blocks * 8) == 0;
        for (int64_t v = 0; v < n; ++v)
          same_s &= std::bit_cast<uint32_t>(stored[v]) == std::bit_cast<uint32_t>(sv::residual_value(p.data[v], q.data[v], a, b));
        kt->residual_store(in_place.data(), q.data, a, b, n, in_place.data(), sb.data(), &sm);
        same_s &= bits(sm) == bits(rm) && std::memcmp(in_place.data(), stored.data(), n * 4) == 0;
        check(same_s, label(*kt, "residual_store", n, fill, at_end, offset));
      }
    }
  }
}

void round_tests(Rng& rng, const std::vector<const sv::KernelTable*>& kts, int count, int64_t max_n) {
  for (int r = 0; r < count; ++r) {
    const int64_t k = rng.below(7);
    const int64_t n = 1 + rng.below(max_n);
    PagedRows target(k + 1, n), draft(k, n);
    const int fills[] = {kUniform, kSpiky, kSparse, kTies};
    const int fill = fills[rng.below(4)];
    for (int64_t i = 0; i <= k; ++i) {
      const std::vector<float> v = make_row(rng, n, fill);
      std::memcpy(target.row(i), v.data(), n * 4);
      target.row(i)[rng.below(n)] += 0.5f;  // no zero-mass rows
    }
    for (int64_t i = 0; i < k; ++i) {
      const std::vector<float> v = make_row(rng, n, fill);
      std::memcpy(draft.row(i), v.data(), n * 4);
      draft.row(i)[rng.below(n)] += 0.5f;
    }
    // Force the decision at position d: earlier draft rows equal the target rows (always
    // accepted), tokens are the argmax there (greedy accepts); at d, anything can happen.
    const int64_t d = rng.below(k + 1);
    std::vector<int64_t> tokens(k);
    for (int64_t i = 0; i < k; ++i) {
      if (i < d) std::memcpy(draft.row(i), target.row(i), n * 4);
      int64_t best = 0;
      sv::scalar_kernels().row_argmax(target.row(i), n, &best);
      tokens[i] = i < d ? best : rng.below(n);
    }
    std::vector<double> u(k + 1);
    for (double& x : u) x = rng.uniform();

    const sv::Outcome ref_g = sv::verify_greedy_round(sv::scalar_kernels(), target.view(), tokens.data(), k, n);
    const sv::Outcome ref_a = sv::accept_round(sv::scalar_kernels(), target.view(), draft.view(), tokens.data(), u.data(), k, n);
    const sv::Rows one_hot{nullptr, 0};
    const sv::Outcome ref_o = sv::accept_round(sv::scalar_kernels(), target.view(), one_hot, tokens.data(), u.data(), k, n);
    // Positions before d hold a draft row equal to its target row and the argmax as token,
    // so both rules must accept them: the reference itself reaches position d.
    check(ref_g.n_accepted >= d && ref_a.n_accepted >= d,
          "scalar round " + std::to_string(r) + " accepts the first d = " + std::to_string(d) + " positions");
    // A one-hot draft's rejection never emits the rejected token (p without t).
    check(ref_o.error == sv::InputError::kNone && target.row(ref_o.n_accepted)[ref_o.token] > 0.0f &&
              (ref_o.n_accepted == k || ref_o.token != tokens[ref_o.n_accepted]),
          "scalar one-hot round " + std::to_string(r) + " draws its correction without the draft token");
    // Block verification reads every row: every path, before rows are locked.
    for (const sv::Rows& d_rows : {draft.view(), one_hot}) {
      const sv::Outcome ref_b = sv::accept_round(sv::scalar_kernels(), target.view(), d_rows, tokens.data(), u.data(),
                                                 k, n, sv::Method::kBlock);
      check(ref_b.error == sv::InputError::kNone && ref_b.token >= 0 && ref_b.token < n &&
                target.row(ref_b.n_accepted)[ref_b.token] > 0.0f,
            "scalar block round " + std::to_string(r) + " emits a token the target row holds");
      for (const sv::KernelTable* kt : kts) {
        const sv::Outcome b = sv::accept_round(*kt, target.view(), d_rows, tokens.data(), u.data(), k, n, sv::Method::kBlock);
        check(b.error == sv::InputError::kNone && b.n_accepted == ref_b.n_accepted && b.token == ref_b.token,
              std::string(kt->name) + " block round " + std::to_string(r) + (d_rows.data ? "" : " one-hot"));
      }
    }
    // Rows after every token-wise decision become unreadable: a read there ends the program.
    const int64_t last = std::max({ref_g.n_accepted, ref_a.n_accepted, ref_o.n_accepted});
    target.lock_from(last + 1);
    draft.lock_from(last + 1);
    for (const sv::KernelTable* kt : kts) {
      const sv::Outcome g = sv::verify_greedy_round(*kt, target.view(), tokens.data(), k, n);
      const sv::Outcome a = sv::accept_round(*kt, target.view(), draft.view(), tokens.data(), u.data(), k, n);
      char buf[160];
      std::snprintf(buf, sizeof buf, "%s round %d k=%lld n=%lld", kt->name, r, (long long)k, (long long)n);
      check(g.error == sv::InputError::kNone && g.n_accepted == ref_g.n_accepted && g.token == ref_g.token,
            std::string(buf) + " verify_greedy");
      check(a.error == sv::InputError::kNone && a.n_accepted == ref_a.n_accepted && a.token == ref_a.token,
            std::string(buf) + " accept");
      check(a.token >= 0 && a.token < n && target.row(a.n_accepted)[a.token] > 0.0f,
            std::string(buf) + " accept token has positive target probability");
      const sv::Outcome o = sv::accept_round(*kt, target.view(), one_hot, tokens.data(), u.data(), k, n);
      check(o.error == sv::InputError::kNone && o.n_accepted == ref_o.n_accepted && o.token == ref_o.token,
            std::string(buf) + " accept one-hot");
    }
  }
}

}  // namespace native_tests

using namespace native_tests;

// Arguments: --quick (fewer rounds: the emulated runs), --seed N (another random stream, for
// soak runs beyond the fixed one `make native` uses).
int main(int argc, char** argv) {
  bool quick = false;
  uint64_t seed = 20261129;
  for (int i = 1; i < argc; ++i) {
    if (std::strcmp(argv[i], "--quick") == 0) {
      quick = true;
    } else if (std::strcmp(argv[i], "--seed") == 0 && i + 1 < argc) {
      seed = std::strtoull(argv[++i], nullptr, 10);
    } else {
      std::fprintf(stderr, "usage: %s [--quick] [--seed N]\n", argv[0]);
      return 2;
    }
  }
  const std::vector<const sv::KernelTable*> kts = paths();
  std::printf("paths:");
  for (const auto* kt : kts) std::printf(" %s", kt->name);
  std::printf("\n");
  // Paths built for this architecture that this CPU cannot run are said, not silently left out.
#if defined(__x86_64__)
  const char* built[] = {"avx512", "avx2"};
#elif defined(__aarch64__)
  const char* built[] = {"neon"};
#else
  const char* built[] = {"scalar"};
#endif
  const std::vector<std::string> available = sv::available_isas();
  for (const char* name : built) {
    if (std::find(available.begin(), available.end(), name) == available.end())
      std::printf("path %s: NOT TESTED here, this CPU cannot run it\n", name);
  }

  std::printf("seed %llu%s\n", static_cast<unsigned long long>(seed), quick ? ", quick" : "");
  Rng rng{seed};
  std::vector<int64_t> sizes;
  for (int64_t n = 1; n <= 80; ++n) sizes.push_back(n);
  for (int64_t n : {127, 128, 129, 255, 256, 257, 1000, 1023, 1024, 1025, 1039, 1040, 1041, 2047,
                    2048, 2049, 3072, 4111, 32000, 32771, 128256, 151936})
    sizes.push_back(n);
  for (int64_t n : sizes) kernel_parity(rng, kts, n);
  round_tests(rng, kts, quick ? 300 : 3000, 5000);
  round_tests(rng, kts, quick ? 20 : 200, 160000);
  exp_accuracy(rng);
  for (int64_t n : sizes) warp_parity(rng, kts, n);
  top_p_long_rows(rng, kts);
  top_p_boundary_tests(rng, kts, quick ? 6 : 24);
  logits_round_tests(rng, kts, quick ? 100 : 1000, 3000);
  logits_round_tests(rng, kts, quick ? 5 : 40, 160000);
  widen_exhaustive(kts);
  for (int64_t n : sizes) half_parity(rng, kts, n);
  half_round_tests(rng, kts, quick ? 40 : 300, 3000);
  half_round_tests(rng, kts, quick ? 3 : 12, 160000);
  acceptance_boundary_tests(rng, kts, quick ? 200 : 2000, 3000);
  acceptance_boundary_tests(rng, kts, quick ? 4 : 20, 160000);
  draw_boundary_tests(rng, kts, quick ? 200 : 2000, 3000);
  draw_boundary_tests(rng, kts, quick ? 6 : 30, 160000);
  block_boundary_tests(rng, kts, quick ? 100 : 1000, 3000);
  block_boundary_tests(rng, kts, quick ? 4 : 20, 160000);
  logits_boundary_rounds(rng, kts, quick ? 200 : 1500, 3000);
  logits_boundary_rounds(rng, kts, quick ? 6 : 30, 160000);
  logits_rejection_boundary_tests(rng, kts, quick ? 60 : 500, 3000);
  logits_rejection_boundary_tests(rng, kts, quick ? 3 : 12, 160000);
  tree_tests(rng, kts, quick ? 100 : 800, 700);
  tree_tests(rng, kts, quick ? 4 : 20, 40000);
  spine_tree_tests(rng, kts, quick ? 150 : 1500, 3000);
  spine_tree_tests(rng, kts, quick ? 6 : 30, 40000);
  chained_tree_tests(rng, kts, quick ? 60 : 400, 2000);
  chained_tree_tests(rng, kts, quick ? 3 : 12, 40000);
  batch_tests(rng, kts, quick ? 20 : 150, 300);
  batch_tests(rng, kts, quick ? 2 : 6, 32000);
  greedy_logits_row_tests(kts);

  std::printf("native: %lld passed, %lld failed\n", (long long)g_passed, (long long)g_failed);
  return g_failed == 0 ? 0 : 1;
}
