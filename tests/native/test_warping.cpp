// Note [Warping] and Note [One exp]: the warping kernels and warp_row on every path against
// the scalar path and against the definitions (top-k, top-p and its ties, min-p); logits
// rounds (sample, accept_logits) at random uniforms and at the rules' boundaries; Note
// [Greedy logits rows].
#include "harness.h"

namespace native_tests {

double ulp_distance(float a, float b) {
  const int64_t ia = std::bit_cast<int32_t>(a), ib = std::bit_cast<int32_t>(b);
  return static_cast<double>(ia > ib ? ia - ib : ib - ia);
}

// exp_nonpositive against the correctly rounded exp: within 2 ulp where the result is
// normal, within 2^-148 absolute below; exactly 1 at 0, exactly 0 at -inf and below -104.
void exp_accuracy(Rng& rng) {
  double worst = 0.0;
  bool ok = true;
  for (int i = 0; i < 200000; ++i) {
    const float y = i < 100000 ? static_cast<float>(-87.0 * rng.uniform()) : static_cast<float>(-104.0 * rng.uniform());
    const float got = sv::exp_nonpositive<sv::ScalarOps>(y);
    const float want = static_cast<float>(std::exp(static_cast<double>(y)));
    if (want >= 0x1p-126f) {
      worst = std::max(worst, ulp_distance(got, want));
    } else {
      ok &= std::fabs(static_cast<double>(got) - static_cast<double>(want)) <= 0x1p-148;
    }
  }
  check(ok && worst <= 2.0, "exp_nonpositive within 2 ulp of exp (worst " + std::to_string(worst) + " ulp)");
  check(sv::exp_nonpositive<sv::ScalarOps>(0.0f) == 1.0f && sv::exp_nonpositive<sv::ScalarOps>(-0.0f) == 1.0f,
        "exp(0) is exactly 1");
  check(sv::exp_nonpositive<sv::ScalarOps>(-std::numeric_limits<float>::infinity()) == 0.0f &&
            sv::exp_nonpositive<sv::ScalarOps>(-104.5f) == 0.0f && sv::exp_nonpositive<sv::ScalarOps>(-150.0f) == 0.0f,
        "exp(-inf) and exp(y < -104) are 0");
}

// A warped row's block masses and mass (Note [Sparse masses]: summed over candidates) are
// the canonical ones of its values, summed densely by the scalar path; and warp_row_lazy
// gives the same row read through its floor, with the same masses.
bool warped_masses_hold(const sv::KernelTable& kt, const float* x, int64_t n, const sv::WarpParams& params,
                        const float* values, const double* blocks, double mass) {
  const int64_t nb = sv::num_blocks(n);
  std::vector<double> dense(nb);
  double dense_mass = -1;
  bool ok = sv::scalar_kernels().row_mass(values, n, dense.data(), &dense_mass) && bits(dense_mass) == bits(mass);
  for (int64_t b = 0; b < nb; ++b) ok &= bits(dense[b]) == bits(blocks[b]);
  std::vector<float> lazy(n);
  std::vector<double> lazy_blocks(nb);
  sv::WarpedRow row{lazy.data(), lazy_blocks.data(), 0.0};
  ok &= sv::warp_row_lazy(kt, x, n, params, &row).error == sv::InputError::kNone && bits(row.mass) == bits(mass);
  for (int64_t b = 0; b < nb; ++b) ok &= bits(lazy_blocks[b]) == bits(blocks[b]);
  for (int64_t v = 0; v < n; ++v) ok &= std::bit_cast<uint32_t>(lazy[v] < row.floor ? 0.0f : lazy[v]) == std::bit_cast<uint32_t>(values[v]);
  sv::materialize(kt, lazy.data(), n, row.floor);
  ok &= same_floats(lazy.data(), values, n);
  return ok;
}

// Every warping kernel and warp_row on every path, bit for bit against the scalar path;
// warp_row against the definition, counted by brute force for small rows.
void warp_parity(Rng& rng, const std::vector<const sv::KernelTable*>& kts, int64_t n) {
  const sv::KernelTable& ref = sv::scalar_kernels();
  const sv::KernelTable& full = ref;
  const int64_t blocks = sv::num_blocks(n);
  for (int kind = 0; kind < 5; ++kind) {
    const std::vector<float> xv = make_logits(rng, n, kind);
    const GuardedRow x(xv, rng.below(2) == 0, 0);
    sv::WarpParams params = random_params(rng, n);
    int64_t top = 0;
    ref.row_argmax(x.data, n, &top);
    if (std::isinf(x.data[top])) continue;  // all -inf: warp_row's error, tested with rounds
    const float z_max = x.data[top] / params.temperature;
    std::vector<float> w_ref(n), w(n), r_ref(n), r(n);
    std::vector<double> wb_ref0(blocks), wb0(blocks);
    double wm_ref = -1, wm = -2;
    ref.row_weights(x.data, n, params.temperature, z_max, w_ref.data(), wb_ref0.data(), &wm_ref);
    std::vector<double> rb_ref(blocks), ab_ref(blocks), rb(blocks), ab(blocks);
    const float t = w_ref[rng.below(n)];
    double rm_ref, am_ref;
    ref.keep_at_least(w_ref.data(), n, t, r_ref.data(), rb_ref.data(), &rm_ref, ab_ref.data(), &am_ref);
    std::vector<float> warped_ref(n);
    std::vector<double> wb_ref(blocks);
    sv::WarpedRow out_ref{warped_ref.data(), wb_ref.data(), 0.0};
    const sv::Outcome e_ref = sv::warp_row(full, x.data, n, params, &out_ref);
    check(e_ref.error == sv::InputError::kNone && out_ref.mass >= 1.0, warp_label(ref, "warp_row keeps the top weight", n, kind, params));
    for (const sv::KernelTable* kt : kts) {
      kt->row_weights(x.data, n, params.temperature, z_max, w.data(), wb0.data(), &wm);
      bool same_weights = same_floats(w.data(), w_ref.data(), n) && bits(wm) == bits(wm_ref);
      for (int64_t b = 0; b < blocks; ++b) same_weights &= bits(wb0[b]) == bits(wb_ref0[b]);
      check(same_weights, warp_label(*kt, "row_weights", n, kind, params));
      double rm = -1, am = -1;
      kt->keep_at_least(w_ref.data(), n, t, r.data(), rb.data(), &rm, ab.data(), &am);
      bool same = same_floats(r.data(), r_ref.data(), n) && bits(rm) == bits(rm_ref) && bits(am) == bits(am_ref);
      for (int64_t b = 0; b < blocks; ++b) same &= bits(rb[b]) == bits(rb_ref[b]) && bits(ab[b]) == bits(ab_ref[b]);
      double rm2 = -1, am2 = -1;
      kt->keep_at_least(w_ref.data(), n, t, nullptr, rb.data(), &rm2, ab.data(), &am2);
      same &= bits(rm2) == bits(rm_ref) && bits(am2) == bits(am_ref);
      check(same, warp_label(*kt, "keep_at_least", n, kind, params));
      const float floor = t > 0.0f ? t : 0x1p-20f;
      std::vector<int64_t> g(n), expected;
      const int64_t m = kt->gather_at_least(w_ref.data(), n, floor, g.data());
      for (int64_t v = 0; v < n; ++v)
        if (w_ref[v] >= floor) expected.push_back(v);
      check(m == static_cast<int64_t>(expected.size()) && std::equal(expected.begin(), expected.end(), g.begin()),
            warp_label(*kt, "gather_at_least", n, kind, params));
      std::vector<float> warped(n);
      std::vector<double> wb(blocks);
      sv::WarpedRow out{warped.data(), wb.data(), 0.0};
      const sv::Outcome e = sv::warp_row(*kt, x.data, n, params, &out);
      bool same_w = e.error == sv::InputError::kNone && same_floats(warped.data(), warped_ref.data(), n) &&
                    bits(out.mass) == bits(out_ref.mass);
      for (int64_t b = 0; b < blocks; ++b) same_w &= bits(wb[b]) == bits(wb_ref[b]);
      check(same_w, warp_label(*kt, "warp_row", n, kind, params));
      check(warped_masses_hold(*kt, x.data, n, params, warped.data(), wb.data(), out.mass),
            warp_label(*kt, "warp_row's masses are its values' and warp_row_lazy agrees", n, kind, params));
    }
    if (n > 300) continue;
    // The definition, by brute force on the scalar path.
    std::vector<float> kept(w_ref);
    std::vector<float> z(n);
    for (int64_t v = 0; v < n; ++v) z[v] = x.data[v] / params.temperature;
    if (params.top_k > 0) {
      for (int64_t v = 0; v < n; ++v) {
        int64_t greater = 0;
        for (int64_t u = 0; u < n; ++u) greater += z[u] > z[v];
        if (greater >= params.top_k) kept[v] = 0.0f;
      }
    }
    std::vector<float> after_p(kept);
    if (params.top_p < 1.0) {
      std::vector<double> b1(blocks), b2(blocks);
      double total = 0, unused = 0;
      ref.keep_at_least(kept.data(), n, 0.0f, nullptr, b1.data(), &total, b2.data(), &unused);
      for (int64_t v = 0; v < n; ++v) {
        if (kept[v] == 0.0f) continue;
        double at_least = 0, above = 0;
        ref.keep_at_least(kept.data(), n, kept[v], nullptr, b1.data(), &at_least, b2.data(), &above);
        if (!(above < params.top_p * total)) after_p[v] = 0.0f;
      }
    }
    bool definition = true;
    for (int64_t v = 0; v < n; ++v) {
      const float want = static_cast<double>(after_p[v]) >= params.min_p ? after_p[v] : 0.0f;
      definition &= std::bit_cast<uint32_t>(want) == std::bit_cast<uint32_t>(warped_ref[v]);
    }
    check(definition, warp_label(ref, "warp_row equals the definition", n, kind, params));
  }
}

// top_p on long flat rows, where the candidates are narrowed by buckets: the kept set is
// {w >= c} for the smallest kept c, mass(w > c) < top_p * total, and for the largest
// weight c' below c, mass(w > c') >= top_p * total (canonical masses, scalar path).
void top_p_long_rows(Rng& rng, const std::vector<const sv::KernelTable*>& kts) {
  const sv::KernelTable& ref = sv::scalar_kernels();
  for (int r = 0; r < 24; ++r) {
    const int64_t n = r % 3 == 0 ? 151936 : (r % 3 == 1 ? 32000 : 5000);
    std::vector<float> x(n);
    const double spread = r % 2 == 0 ? 2.0 : 6.0;
    for (float& v : x) v = static_cast<float>(spread * (rng.uniform() - 0.5));
    if (r % 4 == 3) for (int64_t v = 0; v < n; v += 3) x[v] = x[v - v % 6];  // ties
    sv::WarpParams params;
    params.temperature = 0.9f;
    params.top_p = 0.2 + 0.79 * rng.uniform();
    std::vector<float> w(n), out(n);
    std::vector<double> blocks(sv::num_blocks(n)), b2(sv::num_blocks(n));
    int64_t top = 0;
    ref.row_argmax(x.data(), n, &top);
    double w_mass = 0;
    ref.row_weights(x.data(), n, params.temperature, x[top] / params.temperature, w.data(), blocks.data(), &w_mass);
    double total = 0, unused = 0;
    ref.keep_at_least(w.data(), n, 0.0f, nullptr, blocks.data(), &total, b2.data(), &unused);
    const double target = params.top_p * total;
    for (const sv::KernelTable* kt : kts) {
      sv::WarpedRow row{out.data(), blocks.data(), 0.0};
      const sv::Outcome e = sv::warp_row(*kt, x.data(), n, params, &row);
      float c = 2.0f, below = -1.0f;
      for (int64_t v = 0; v < n; ++v)
        if (out[v] > 0.0f) c = std::min(c, out[v]);
      bool ok = e.error == sv::InputError::kNone;
      for (int64_t v = 0; v < n; ++v) {
        ok &= (w[v] >= c) == (out[v] > 0.0f) && (out[v] == 0.0f || out[v] == w[v]);
        if (w[v] < c) below = std::max(below, w[v]);
      }
      ok &= warped_masses_hold(*kt, x.data(), n, params, out.data(), row.blocks, row.mass);
      double at_least = 0, above = 0;
      ref.keep_at_least(w.data(), n, c, nullptr, blocks.data(), &at_least, b2.data(), &above);
      ok &= above < target;
      if (below >= 0.0f) {
        ref.keep_at_least(w.data(), n, below, nullptr, blocks.data(), &at_least, b2.data(), &above);
        ok &= above >= target;
      }
      char buf[160];
      std::snprintf(buf, sizeof buf, "%s top_p on a flat row n=%lld top_p=%g", kt->name, (long long)n, params.top_p);
      check(ok, buf);
    }
  }
}

// top-p's cutoff where the target sits at a tie group's running mass:
// Gaussian logits (T 0.8), the group where the mass from the top crosses a fraction f of the
// row's mass, and top_p = A (1 + d) / Z for A the canonical mass above the group, Z the
// row's, and d from 0 and +-1 ulp to +-2^-14: the exact rule keeps the group iff
// fl(top_p Z) > A. Every path's warp_row equals the scalar path's, bit for bit.
void top_p_boundary_tests(Rng& rng, const std::vector<const sv::KernelTable*>& kts, int count) {
  const sv::KernelTable& ref = sv::scalar_kernels();
  for (int r = 0; r < count; ++r) {
    const int64_t n = r % 3 == 0 ? 128256 : (r % 3 == 1 ? 32000 : 4000);
    std::vector<float> x(n);
    const double sigma = 2.0 + 2.0 * rng.uniform();
    for (float& v : x) {  // Box-Muller
      const double u1 = 1.0 - rng.uniform(), u2 = rng.uniform();
      v = static_cast<float>(sigma * std::sqrt(-2.0 * std::log(u1)) * std::cos(6.283185307179586 * u2));
    }
    sv::WarpParams params;
    params.temperature = 0.8f;
    const int64_t nb = sv::num_blocks(n);
    int64_t top = 0;
    ref.row_argmax(x.data(), n, &top);
    std::vector<float> w(n);
    std::vector<double> blocks(nb), above_blocks(nb);
    double unused = 0.0, z = 0.0, a = 0.0;
    ref.row_weights(x.data(), n, params.temperature, x[top] / params.temperature, w.data(), blocks.data(), &unused);
    ref.keep_at_least(w.data(), n, 0.0f, nullptr, blocks.data(), &z, above_blocks.data(), &unused);
    std::vector<float> sorted(w);
    std::sort(sorted.begin(), sorted.end(), std::greater<float>());
    const double f = 0.5 + 0.45 * rng.uniform();
    double running = 0.0;
    float group = sorted[0];
    for (const float v : sorted) {
      if (running >= f * z) break;
      group = v;
      running += v;
    }
    ref.keep_at_least(w.data(), n, group, nullptr, blocks.data(), &unused, above_blocks.data(), &a);
    if (!(a > 0.0)) continue;
    const sv::KernelTable& exact = ref;
    std::vector<float> want(n), got(n);
    std::vector<double> want_blocks(nb), got_blocks(nb);
    for (const double d : {0.0, 0x1p-53, -0x1p-53, 0x1p-40, -0x1p-40, 0x1p-30, -0x1p-30, 0x1p-24, -0x1p-24, 0x1p-21,
                           -0x1p-21, 0x1p-19, -0x1p-19, 0x1p-17, -0x1p-17, 0x1p-14, -0x1p-14}) {
      params.top_p = std::min(1.0, a * (1.0 + d) / z);
      sv::WarpedRow out_ref{want.data(), want_blocks.data(), 0.0};
      sv::warp_row(exact, x.data(), n, params, &out_ref);
      for (const sv::KernelTable* kt : kts) {
        sv::WarpedRow out{got.data(), got_blocks.data(), 0.0};
        const sv::Outcome e = sv::warp_row(*kt, x.data(), n, params, &out);
        bool same = e.error == sv::InputError::kNone && same_floats(got.data(), want.data(), n) &&
                    bits(out.mass) == bits(out_ref.mass);
        for (int64_t b = 0; b < nb; ++b) same &= bits(got_blocks[b]) == bits(want_blocks[b]);
        char buf[200];
        std::snprintf(buf, sizeof buf, "%s top_p at a group's running mass n=%lld sigma=%.2f f=%.3f d=%g", kt->name,
                      (long long)n, sigma, f, d);
        check(same, buf);
      }
    }
  }
}

// sample_round and accept_logits_round on every path: the same outcomes, rows after the
// deciding one unreadable, bad rows reported where they are.
void logits_round_tests(Rng& rng, const std::vector<const sv::KernelTable*>& kts, int count, int64_t max_n) {
  for (int r = 0; r < count; ++r) {
    const int64_t k = rng.below(6);
    const int64_t n = 1 + rng.below(max_n);
    PagedRows target(k + 1, n), draft(k, n);
    const int kind = static_cast<int>(rng.below(5));
    for (int64_t i = 0; i <= k; ++i) {
      std::vector<float> v = make_logits(rng, n, kind);
      v[rng.below(n)] = 1.0f;  // a finite value in every row
      std::memcpy(target.row(i), v.data(), n * 4);
    }
    const sv::WarpParams params = random_params(rng, n);
    const int64_t d = rng.below(k + 1);
    std::vector<int64_t> tokens(k);
    for (int64_t i = 0; i < k; ++i) {
      std::vector<float> v = make_logits(rng, n, kind);
      v[rng.below(n)] = 1.0f;
      std::memcpy(draft.row(i), i < d ? target.row(i) : v.data(), n * 4);
      int64_t best = 0;
      sv::scalar_kernels().row_argmax(target.row(i), n, &best);
      tokens[i] = i < d ? best : rng.below(n);
    }
    std::vector<double> u(k + 1);
    for (double& x : u) x = rng.uniform();
    const sv::Outcome ref = sv::accept_logits_round(sv::scalar_kernels(), target.view(), draft.view(), tokens.data(),
                                                    u.data(), k, n, params);
    const sv::Outcome ref_s = sv::sample_round(sv::scalar_kernels(), target.row(0), n, params, u[0]);
    check(ref.error == sv::InputError::kNone && ref.n_accepted >= d,
          "scalar logits round " + std::to_string(r) + " accepts the first d = " + std::to_string(d) + " positions");
    const sv::Rows one_hot{nullptr, 0};
    const sv::Outcome ref_o = sv::accept_logits_round(sv::scalar_kernels(), target.view(), one_hot, tokens.data(),
                                                      u.data(), k, n, params);
    for (const sv::Rows& d_rows : {draft.view(), one_hot}) {
      const sv::Outcome ref_b = sv::accept_logits_round(sv::scalar_kernels(), target.view(), d_rows, tokens.data(),
                                                        u.data(), k, n, params, sv::Method::kBlock);
      check(ref_b.error == sv::InputError::kNone && ref_b.token >= 0 && ref_b.token < n,
            "scalar block logits round " + std::to_string(r));
      for (const sv::KernelTable* kt : kts) {
        const sv::Outcome b = sv::accept_logits_round(*kt, target.view(), d_rows, tokens.data(), u.data(), k, n,
                                                      params, sv::Method::kBlock);
        check(b.error == sv::InputError::kNone && b.n_accepted == ref_b.n_accepted && b.token == ref_b.token,
              std::string(kt->name) + " block logits round " + std::to_string(r) + (d_rows.data ? "" : " one-hot"));
      }
    }
    target.lock_from(std::max(ref.n_accepted, ref_o.n_accepted) + 1);
    draft.lock_from(ref.n_accepted + 1);
    for (const sv::KernelTable* kt : kts) {
      char buf[200];
      std::snprintf(buf, sizeof buf, "%s logits round %d k=%lld n=%lld kind=%d", kt->name, r, (long long)k,
                    (long long)n, kind);
      const sv::Outcome a = sv::accept_logits_round(*kt, target.view(), draft.view(), tokens.data(), u.data(), k, n, params);
      check(a.error == sv::InputError::kNone && a.n_accepted == ref.n_accepted && a.token == ref.token,
            std::string(buf) + " accept_logits");
      const sv::Outcome o = sv::accept_logits_round(*kt, target.view(), one_hot, tokens.data(), u.data(), k, n, params);
      check(o.error == sv::InputError::kNone && o.n_accepted == ref_o.n_accepted && o.token == ref_o.token,
            std::string(buf) + " accept_logits one-hot");
      const sv::Outcome s = sv::sample_round(*kt, target.row(0), n, params, u[0]);
      check(s.error == sv::InputError::kNone && s.token == ref_s.token && s.token >= 0 && s.token < n,
            std::string(buf) + " sample");
    }
  }
  // Malformed rows: NaN, +inf, all -inf, and a logit the temperature makes overflow.
  const float inf = std::numeric_limits<float>::infinity();
  struct Bad { float value; float temperature; sv::InputError kind; };
  const Bad bads[] = {{std::numeric_limits<float>::quiet_NaN(), 1.0f, sv::InputError::kNaN},
                      {inf, 1.0f, sv::InputError::kInfinite},
                      {-inf, 1.0f, sv::InputError::kNoFinite},
                      {3e38f, 0.5f, sv::InputError::kOverflow}};
  for (const Bad& bad : bads) {
    for (const sv::KernelTable* kt : kts) {
      std::vector<float> row(300, bad.kind == sv::InputError::kNoFinite ? -inf : 0.5f);
      row[77] = bad.value;
      sv::WarpParams params;
      params.temperature = bad.temperature;
      std::vector<float> out(300);
      std::vector<double> blocks(sv::num_blocks(300));
      sv::WarpedRow w{out.data(), blocks.data(), 0.0};
      const sv::Outcome e = sv::warp_row(*kt, row.data(), 300, params, &w);
      check(e.error == bad.kind && (bad.kind == sv::InputError::kNoFinite || e.col == 77),
            std::string(kt->name) + " warp_row reports a malformed row");
    }
  }
}

// Logits rounds (temperature, top-p, min-p) give the scalar path's outcomes on every path:
// random uniforms, uniforms at a canonical running sum of the warped row (sample), and
// uniforms at the acceptance boundary u = p(t) Q / (q(t) P) (accept_logits, with draft rows
// and one-hot).
void logits_boundary_rounds(Rng& rng, const std::vector<const sv::KernelTable*>& kts, int count, int64_t max_n) {
  const sv::Rows none{nullptr, 0};
  for (int r = 0; r < count; ++r) {
    const int64_t k = 1 + rng.below(4);
    const int64_t n = 2 + rng.below(max_n);
    const int kind = static_cast<int>(rng.below(5));
    std::vector<float> target = logit_rows(rng, k + 1, n, kind), draft(k * n);
    for (int64_t i = 0; i < k; ++i) {
      // Close to the target (mostly accepted), or the target itself (all accepted).
      for (int64_t v = 0; v < n; ++v)
        draft[i * n + v] = rng.below(3) == 0 ? target[i * n + v]
                                             : target[i * n + v] + static_cast<float>(0.3 * (rng.uniform() - 0.5));
    }
    sv::WarpParams params;
    const float temps[] = {1.0f, 0.7f, 1.3f, 0.05f};
    params.temperature = temps[rng.below(4)];
    if (rng.below(2) == 0) params.top_p = rng.below(4) == 0 ? 0.999 : 0.05 + 0.9 * rng.uniform();
    if (rng.below(4) == 0) params.min_p = 0.2 * rng.uniform();  // after top-p or alone
    std::vector<int64_t> tokens(k);
    for (int64_t i = 0; i < k; ++i) tokens[i] = rng.below(n);
    // The exact warped rows (scalar), for boundary uniforms.
    std::vector<float> wp(n), wq(n);
    std::vector<double> bp(sv::num_blocks(n)), bq(sv::num_blocks(n));
    sv::WarpedRow rp{wp.data(), bp.data(), 0.0}, rq{wq.data(), bq.data(), 0.0};
    sv::warp_row(sv::scalar_kernels(), target.data(), n, params, &rp);
    sv::warp_row(sv::scalar_kernels(), draft.data(), n, params, &rq);
    const int mode = static_cast<int>(rng.below(3));  // 0 random, 1 draw at a running sum, 2 test at its boundary
    std::vector<double> u(k + 1);
    for (double& x : u) x = rng.uniform() * 0.5;  // mostly accepted
    double u_one_hot0 = u[0];
    if (mode == 1) {
      u[k] = boundary_uniform(rng, bp, rp.mass, n, [&wp](int64_t v) { return wp[v]; });
    } else if (mode == 2) {
      const double pt = wp[tokens[0]], qt = wq[tokens[0]];
      if (pt > 0.0 && qt > 0.0) u[0] = std::min(pt * rq.mass / (qt * rp.mass), 0x1.fffffffffffffp-1);
      if (pt > 0.0) u_one_hot0 = std::min(pt / rp.mass, 0x1.fffffffffffffp-1);
      const int64_t nudge = rng.below(5) - 2;
      for (int64_t z = 0; z < std::abs(nudge); ++z) {
        u[0] = std::nextafter(u[0], nudge < 0 ? 0.0 : 1.0);
        u_one_hot0 = std::nextafter(u_one_hot0, nudge < 0 ? 0.0 : 1.0);
      }
    }
    std::vector<double> u1 = u;
    u1[0] = u_one_hot0;
    const sv::Rows t_rows{target.data(), n}, d_rows{draft.data(), n};
    for (const sv::KernelTable* kt : kts) {
      const sv::KernelTable& exact = reference();
      char buf[200];
      std::snprintf(buf, sizeof buf, "%s logits round %d k=%lld n=%lld kind=%d T=%g mode %d", kt->name, r,
                    (long long)k, (long long)n, kind, params.temperature, mode);
      const sv::Outcome s = sv::sample_round(*kt, target.data(), n, params, u[k]);
      const sv::Outcome s_exact = sv::sample_round(exact, target.data(), n, params, u[k]);
      check(s.error == sv::InputError::kNone && s.token == s_exact.token, std::string(buf) + ": sample");
      const sv::Outcome a = sv::accept_logits_round(*kt, t_rows, d_rows, tokens.data(), u.data(), k, n, params);
      const sv::Outcome b = sv::accept_logits_round(exact, t_rows, d_rows, tokens.data(), u.data(), k, n, params);
      check(a.error == sv::InputError::kNone && a.n_accepted == b.n_accepted && a.token == b.token,
            std::string(buf) + ": accept_logits");
      const sv::Outcome c = sv::accept_logits_round(*kt, t_rows, none, tokens.data(), u1.data(), k, n, params);
      const sv::Outcome d = sv::accept_logits_round(exact, t_rows, none, tokens.data(), u1.data(), k, n, params);
      check(c.error == sv::InputError::kNone && c.n_accepted == d.n_accepted && c.token == d.token,
            std::string(buf) + ": accept_logits one-hot");
    }
  }
}

// Logits rounds at temperature only whose first token is often rejected, at random uniforms
// and at the boundaries of u_0 and u_K found by bisection on the scalar round (adjacent
// doubles where its outcome changes, ±2 ulps): the scalar outcome on every path.
void logits_rejection_boundary_tests(Rng& rng, const std::vector<const sv::KernelTable*>& kts, int count, int64_t max_n) {
  int64_t boundaries = 0;
  for (int r = 0; r < count; ++r) {
    const int64_t k = 1 + rng.below(4);
    const int64_t n = 2 + rng.below(max_n);
    const int kind = static_cast<int>(rng.below(5));
    std::vector<float> target = logit_rows(rng, k + 1, n, kind), draft(k * n);
    for (int64_t i = 0; i < k; ++i)
      for (int64_t v = 0; v < n; ++v) draft[i * n + v] = target[i * n + v] + static_cast<float>(3.0 * (rng.uniform() - 0.5));
    sv::WarpParams params;
    const float temps[] = {1.0f, 0.7f, 1.3f};
    params.temperature = temps[rng.below(3)];
    std::vector<int64_t> tokens(k);
    for (int64_t i = 0; i < k; ++i) sv::scalar_kernels().row_argmax(draft.data() + i * n, n, &tokens[i]);
    std::vector<double> u(k + 1);
    for (double& x : u) x = rng.uniform();
    u[0] = 0.5 + 0.5 * u[0];  // more rejections at 0
    const sv::Rows t_rows{target.data(), n}, d_rows{draft.data(), n};
    const sv::KernelTable& ref_exact = reference();
    const auto outcome = [&](const std::vector<double>& uu) {
      const sv::Outcome o = sv::accept_logits_round(ref_exact, t_rows, d_rows, tokens.data(), uu.data(), k, n, params);
      return std::make_pair(o.n_accepted, o.token);
    };
    std::vector<std::vector<double>> cases{u};
    for (int64_t j : {int64_t{0}, k}) {  // boundaries of u_0 (the test) and u_K (the correction)
      const double from = j == k && rng.below(2) ? u[j] : 0.0;  // near the random draw, or anywhere
      const std::vector<std::vector<double>> at = boundary_uniforms(u, j, from, outcome);
      if (at.empty()) continue;
      ++boundaries;
      cases.insert(cases.end(), at.begin(), at.end());
    }
    for (const sv::KernelTable* kt : kts) {
      for (size_t c = 0; c < cases.size(); ++c) {
        const sv::Outcome a = sv::accept_logits_round(*kt, t_rows, d_rows, tokens.data(), cases[c].data(), k, n, params);
        const sv::Outcome b = sv::accept_logits_round(ref_exact, t_rows, d_rows, tokens.data(), cases[c].data(), k, n, params);
        char buf[200];
        std::snprintf(buf, sizeof buf, "%s logits rejection round %d k=%lld n=%lld kind=%d T=%g case %zu", kt->name,
                      r, (long long)k, (long long)n, kind, params.temperature, c);
        check(a.error == b.error && a.n_accepted == b.n_accepted && a.token == b.token, std::string(buf) + ": the scalar outcome");
      }
    }
  }
  check(boundaries > count / 4, "logits round boundaries searched (" + std::to_string(boundaries) + ")");
}

// Note [Greedy logits rows]: at temperature 0 a logits row is refused as at any temperature
// (+inf at its first column, no finite value), by every greedy reader, on every path, float32
// and bfloat16; probability rows (verify_greedy) keep +inf as their argmax.
void greedy_logits_row_tests(const std::vector<const sv::KernelTable*>& kts) {
  const float inf = std::numeric_limits<float>::infinity();
  for (const int64_t n : {1, 7, 255, 1025, 5000}) {
    for (int kind = 0; kind < 3; ++kind) {  // 0: +inf at two columns, 1: all -inf, 2: +inf in a masked row
      std::vector<float> row(2 * n);  // row 0 bad, row 1 fine
      for (int64_t v = 0; v < 2 * n; ++v) row[v] = static_cast<float>((v * 37) % 101) * 0.25f - 9.0f;
      if (kind > 0) std::fill(row.begin(), row.begin() + n, -inf);
      const int64_t col = kind == 1 ? -1 : n / 3, later = (n / 3 + n) / 2;
      if (kind != 1) row[col] = row[later] = inf;
      const sv::InputError want = kind == 1 ? sv::InputError::kNoFinite : sv::InputError::kInfinite;
      std::vector<uint16_t> half(2 * n);
      for (int64_t v = 0; v < 2 * n; ++v) half[v] = to_bf16(row[v]);
      sv::WarpParams greedy;
      greedy.temperature = 0.0f;
      const int64_t token = 0, parent = -1;
      for (const sv::KernelTable* kt : kts) {
        for (const sv::Rows rows : {sv::Rows{row.data(), n}, sv::Rows{half.data(), n, sv::Elem::kBF16}}) {
          const std::string what = std::string(kt->name) + " greedy logits row, n = " + std::to_string(n) +
                                   ", kind " + std::to_string(kind) + (rows.type == sv::Elem::kF32 ? "" : ", bf16");
          const sv::Outcome s = sv::sample_round(*kt, rows.row(0), n, greedy, 0.0);
          const sv::Outcome g = sv::verify_greedy_round(*kt, rows, &token, 1, n, true);
          std::vector<int64_t> path(2, -1);
          const sv::Outcome t = sv::tree_round(*kt, rows, sv::Rows{nullptr, 0}, &token, &parent, 1, nullptr, n, &greedy,
                                               path.data());
          for (const sv::Outcome& o : {s, g, t})
            check(o.error == want && o.row <= 0 && (kind == 1 || o.col == col), what + ": refused, first column");
          check(sv::verify_greedy_round(*kt, rows, &token, 1, n).error == sv::InputError::kNone,
                what + ": probabilities keep +inf (and -inf) rows");
        }
      }
    }
  }
}

}  // namespace native_tests
