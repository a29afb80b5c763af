// Uniforms at the rules' boundaries, every path against the scalar round: the acceptance
// test u q(t) P < p(t) Q, draws whose threshold lands on a canonical running sum (Note
// [Blocked sampling]), and block verification's uniforms (Note [Block verification]).
#include "harness.h"

namespace native_tests {

// Rounds whose uniforms sit at the acceptance boundary u = p(t) Q / (q(t) P) (and a few
// ulps either side, and for one-hot drafts at p(t) / P) give the scalar path's outcomes on
// every path.
void acceptance_boundary_tests(Rng& rng, const std::vector<const sv::KernelTable*>& kts, int count, int64_t max_n) {
  const sv::Rows none{nullptr, 0};
  for (int r = 0; r < count; ++r) {
    const int64_t k = 1 + rng.below(5);
    const int64_t n = 1 + rng.below(max_n);
    std::vector<float> p((k + 1) * n), q(k * n);
    const int fills[] = {kUniform, kSpiky, kSparse, kHuge, kDenormal};
    for (int64_t i = 0; i <= k; ++i) {
      std::vector<float> v = make_row(rng, n, fills[rng.below(5)]);
      v[rng.below(n)] = rng.below(2) ? 0.5f : 3e30f;
      std::copy(v.begin(), v.end(), p.begin() + i * n);
    }
    for (int64_t i = 0; i < k; ++i) {
      std::vector<float> v = make_row(rng, n, fills[rng.below(5)]);
      v[rng.below(n)] = 0.25f;
      std::copy(v.begin(), v.end(), q.begin() + i * n);
    }
    std::vector<int64_t> tokens(k);
    std::vector<double> u(k + 1), u1(k + 1);
    std::vector<double> blocks(sv::num_blocks(n));
    for (int64_t i = 0; i < k; ++i) {
      int64_t best = 0;
      sv::scalar_kernels().row_argmax(p.data() + i * n, n, &best);
      tokens[i] = rng.below(3) ? best : rng.below(n);
      double P = 0, Q = 0;
      sv::scalar_kernels().row_mass(p.data() + i * n, n, blocks.data(), &P);
      sv::scalar_kernels().row_mass(q.data() + i * n, n, blocks.data(), &Q);
      const double pt = p[i * n + tokens[i]], qt = q[i * n + tokens[i]];
      const int64_t nudge = rng.below(7) - 3;  // ulps from the boundary
      const double b = qt > 0 ? pt * Q / (qt * P) : 0.5, b1 = pt / P;
      u[i] = std::min(0x1.fffffffffffffp-1, std::max(0.0, std::nextafter(b, nudge < 0 ? 0.0 : 2.0) * 1.0));
      u1[i] = std::min(0x1.fffffffffffffp-1, std::max(0.0, b1));
      for (int64_t z = 0; z < std::abs(nudge); ++z) {
        u[i] = std::min(0x1.fffffffffffffp-1, std::nextafter(u[i], nudge < 0 ? 0.0 : 2.0));
        u1[i] = std::min(0x1.fffffffffffffp-1, std::nextafter(u1[i], nudge < 0 ? 0.0 : 2.0));
      }
    }
    u[k] = u1[k] = rng.uniform();
    const sv::Rows t_rows{p.data(), n}, d_rows{q.data(), n};
    for (const sv::KernelTable* kt : kts) {
      const sv::KernelTable& exact = reference();
      const sv::Outcome a = sv::accept_round(*kt, t_rows, d_rows, tokens.data(), u.data(), k, n);
      const sv::Outcome b = sv::accept_round(exact, t_rows, d_rows, tokens.data(), u.data(), k, n);
      const sv::Outcome c = sv::accept_round(*kt, t_rows, none, tokens.data(), u1.data(), k, n);
      const sv::Outcome d = sv::accept_round(exact, t_rows, none, tokens.data(), u1.data(), k, n);
      check(a.error == b.error && a.n_accepted == b.n_accepted && a.token == b.token,
            std::string(kt->name) + " accept equals scalar at the boundary, round " + std::to_string(r));
      check(c.error == d.error && c.n_accepted == d.n_accepted && c.token == d.token,
            std::string(kt->name) + " one-hot accept equals scalar at the boundary, round " + std::to_string(r));
    }
  }
}

// Draws whose threshold u T lands on a canonical running sum (boundary_uniform): from the
// target row of a round without drafts (K = 0), from the residual of a round rejected at
// position 0 (p_0(t_0) = 0), and from p_0 without t_0 (one-hot, rejected there); rows of
// several kinds and scales. Every path gives the scalar path's token.
void draw_boundary_tests(Rng& rng, const std::vector<const sv::KernelTable*>& kts, int count, int64_t max_n) {
  const sv::KernelTable& exact = reference();
  const int fills[] = {kUniform, kSpiky, kSparse, kDenormal, kTies};
  const double scales[] = {1.0, 0x1p-30, 0x1p40};
  const sv::Rows none{nullptr, 0};
  for (int r = 0; r < count; ++r) {
    const int64_t n = 2 + rng.below(max_n);
    std::vector<float> p(2 * n), q(n);
    for (float* row : {p.data(), p.data() + n, q.data()}) {
      std::vector<float> v = make_row(rng, n, fills[rng.below(5)]);
      const double scale = scales[rng.below(3)];
      for (int64_t i = 0; i < n; ++i) row[i] = static_cast<float>(v[i] * scale);
      row[rng.below(n)] = static_cast<float>(0.5 * scale);
    }
    // t_0 a token p_0 gives 0, with some mass left elsewhere.
    const int64_t t = rng.below(n);
    p[t] = 0.0f;
    if (*std::max_element(p.begin(), p.begin() + n) == 0.0f) p[(t + 1) % n] = 0.5f;
    std::vector<double> blocks(sv::num_blocks(n)), rb(sv::num_blocks(n));
    double P = 0.0, Q = 0.0, R = 0.0;
    exact.row_mass(p.data(), n, blocks.data(), &P);
    exact.row_mass(q.data(), n, rb.data(), &Q);
    const sv::Rows t_rows{p.data(), n}, d_rows{q.data(), n};
    const auto same = [&](const sv::Rows& d, const int64_t* tokens, const double* u, int64_t k, const char* what) {
      const sv::Outcome want = sv::accept_round(exact, t_rows, d, tokens, u, k, n);
      for (const sv::KernelTable* kt : kts) {
        const sv::Outcome got = sv::accept_round(*kt, t_rows, d, tokens, u, k, n);
        check(got.error == want.error && got.n_accepted == want.n_accepted && got.token == want.token,
              std::string(kt->name) + " draw at a running sum, " + what + ", round " + std::to_string(r) +
                  " n=" + std::to_string(n));
      }
    };
    // K = 0: the draw from p_0; one-hot rejected at 0: from p_0 without t_0 (p_0(t_0) = 0).
    const double u0[] = {boundary_uniform(rng, blocks, P, n, [&p](int64_t v) { return p[v]; })};
    same(none, nullptr, u0, 0, "K = 0");
    const double u1[] = {0.5, boundary_uniform(rng, blocks, P, n, [&p](int64_t v) { return p[v]; })};
    same(none, &t, u1, 1, "one-hot, rejected at 0");
    // With a draft row, rejected at 0: the residual's canonical running sums.
    float a = 0.0f, b = 0.0f;
    sv::residual_scales(P, Q, &a, &b);
    exact.residual_mass(p.data(), q.data(), a, b, n, rb.data(), &R);
    if (!(R > 0.0)) continue;
    const double u2[] = {0.5, boundary_uniform(rng, rb, R, n, [&](int64_t v) { return sv::residual_value(p[v], q[v], a, b); })};
    same(d_rows, &t, u2, 1, "the residual, rejected at 0");
  }
}

// Block rounds (with draft rows and one-hot) on every path against the scalar path: at
// random uniforms, and at the boundaries of each uniform's effect found by bisection on the
// scalar round (the two adjacent doubles where its outcome changes, and a few ulps around
// them), on rows normalised or scaled far from mass 1.
void block_boundary_tests(Rng& rng, const std::vector<const sv::KernelTable*>& kts, int count, int64_t max_n) {
  const int fills[] = {kUniform, kSpiky, kSparse, kDenormal, kTies};
  const sv::KernelTable& exact = reference();
  int64_t boundaries = 0;
  for (int r = 0; r < count; ++r) {
    const int64_t k = 1 + rng.below(5);
    const int64_t n = 2 + rng.below(max_n);
    const double scales[] = {1.0, 1.0, 0x1p-30, 0x1p40, 0x1p-126};
    const double sp = scales[rng.below(5)], sq = rng.below(2) ? sp : scales[rng.below(5)];
    std::vector<float> p((k + 1) * n), q(k * n);
    for (int64_t i = 0; i <= k; ++i) {
      for (int side = 0; side < (i < k ? 2 : 1); ++side) {
        std::vector<float> v = make_row(rng, n, fills[rng.below(5)]);
        v[rng.below(n)] = 0.5f;
        double sum = 0.0;
        for (float x : v) sum += x;
        const double scale = side == 0 ? sp : sq;
        for (float& x : v) x = static_cast<float>(x * (scale / sum));
        std::copy(v.begin(), v.end(), (side == 0 ? p.begin() + i * n : q.begin() + i * n));
      }
    }
    // Drafts that often pass: the draft row's argmax, or a random token.
    std::vector<int64_t> tokens(k);
    for (int64_t i = 0; i < k; ++i) {
      if (rng.below(3)) sv::scalar_kernels().row_argmax(q.data() + i * n, n, &tokens[i]);
      else tokens[i] = rng.below(n);
    }
    const sv::Rows t_rows{p.data(), n}, d_rows{q.data(), n}, none{nullptr, 0};
    for (const sv::Rows& dr : {d_rows, none}) {
      std::vector<double> u(k + 1);
      for (double& x : u) x = rng.uniform();
      std::vector<std::vector<double>> cases{u};
      // One uniform's boundary, searched with the scalar round.
      const int64_t j = rng.below(k + 1);
      const auto outcome = [&](const std::vector<double>& uu) {
        const sv::Outcome o = sv::accept_round(exact, t_rows, dr, tokens.data(), uu.data(), k, n, sv::Method::kBlock);
        return std::make_pair(o.n_accepted, o.token);
      };
      const std::vector<std::vector<double>> at = boundary_uniforms(u, j, 0.0, outcome);
      boundaries += !at.empty();
      cases.insert(cases.end(), at.begin(), at.end());
      for (size_t c = 0; c < cases.size(); ++c) {
        const sv::Outcome b = sv::accept_round(exact, t_rows, dr, tokens.data(), cases[c].data(), k, n, sv::Method::kBlock);
        for (const sv::KernelTable* kt : kts) {
          const sv::Outcome a = sv::accept_round(*kt, t_rows, dr, tokens.data(), cases[c].data(), k, n, sv::Method::kBlock);
          char buf[220];
          std::snprintf(buf, sizeof buf, "%s block round %d k=%lld n=%lld %s scales %a %a, case %zu (u_%lld's boundary)",
                        kt->name, r, (long long)k, (long long)n, dr.data ? "draft rows" : "one-hot", sp, sq, c,
                        (long long)j);
          check(a.error == b.error && a.n_accepted == b.n_accepted && a.token == b.token,
                std::string(buf) + ": the scalar outcome");
        }
      }
    }
  }
  if (count >= 20)
    check(boundaries > count / 4, "block round boundaries searched (" + std::to_string(boundaries) + ")");
}

}  // namespace native_tests
