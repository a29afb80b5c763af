// Note [Half rows]: the widenings of all 65536 halves, the typed kernels and whole rounds on
// float16 and bfloat16 rows, against the float32 kernels on the widened rows, every path.
#include "harness.h"

namespace native_tests {

// Every one of the 65536 halves: the scalar widening against the value's definition, and every
// path's widening against the scalar one, bit for bit (NaNs included).
void widen_exhaustive(const std::vector<const sv::KernelTable*>& kts) {
  std::vector<uint16_t> all(65536);
  for (uint32_t h = 0; h < 65536; ++h) all[h] = static_cast<uint16_t>(h);
  bool defined = true;
  for (uint32_t h = 0; h < 65536; ++h) {
    const int sign = h >> 15, e = (h >> 10) & 31, m = h & 1023;
    const float x = sv::f16_value(static_cast<uint16_t>(h));
    double want;
    if (e == 31) {
      defined &= m == 0 ? (std::isinf(x) && std::signbit(x) == (sign != 0))
                        : (std::isnan(x) && (std::bit_cast<uint32_t>(x) & 0x400000u) != 0);
      continue;
    }
    want = e == 0 ? std::ldexp(static_cast<double>(m), -24) : std::ldexp(1.0 + m / 1024.0, e - 15);
    defined &= static_cast<double>(x) == (sign ? -want : want) && std::signbit(x) == (sign != 0);
    defined &= sv::bf16_value(static_cast<uint16_t>(h)) == std::bit_cast<float>(h << 16) ||
               std::isnan(std::bit_cast<float>(h << 16));
  }
  check(defined, "f16_value is binary16's value for every half");
  std::vector<float> ref16(65536), refbf(65536), got(65536);
  sv::scalar_kernels().widen_f16(all.data(), 65536, ref16.data());
  sv::scalar_kernels().widen_bf16(all.data(), 65536, refbf.data());
  for (const sv::KernelTable* kt : kts) {
    for (int64_t off : {0, 1, 3, 7}) {  // misaligned starts and every tail length
      kt->widen_f16(all.data() + off, 65536 - off, got.data());
      check(same_bits_floats(got.data(), ref16.data() + off, 65536 - off),
            std::string(kt->name) + " widen_f16, all halves, offset " + std::to_string(off));
      kt->widen_bf16(all.data() + off, 65536 - off, got.data());
      check(same_bits_floats(got.data(), refbf.data() + off, 65536 - off),
            std::string(kt->name) + " widen_bf16, all halves, offset " + std::to_string(off));
    }
  }
}

// typed_argmax, typed_mass and typed_residual on half rows equal the float32 kernels on the
// widened rows, on every path, over the row-length sweep and the special fills.
void half_parity(Rng& rng, const std::vector<const sv::KernelTable*>& kts, int64_t n) {
  const sv::KernelTable& ref = sv::scalar_kernels();
  for (int fill = 0; fill < kFillCount; ++fill) {
    const std::vector<float> row = make_row(rng, n, fill);
    const std::vector<float> other = make_row(rng, n, kUniform);
    for (const sv::Elem type : {sv::Elem::kF16, sv::Elem::kBF16}) {
      std::vector<uint16_t> h(n), g(n);
      for (int64_t v = 0; v < n; ++v) {
        h[v] = type == sv::Elem::kF16 ? to_f16(row[v]) : to_bf16(row[v]);
        g[v] = type == sv::Elem::kF16 ? to_f16(other[v]) : to_bf16(other[v]);
      }
      std::vector<float> wide(n), wide_other(n);
      for (int64_t v = 0; v < n; ++v) {
        wide[v] = type == sv::Elem::kF16 ? sv::f16_value(h[v]) : sv::bf16_value(h[v]);
        wide_other[v] = type == sv::Elem::kF16 ? sv::f16_value(g[v]) : sv::bf16_value(g[v]);
      }
      const bool at_end = rng.below(2) == 1;
      const GuardedHalves gh(h, at_end), go(g, !at_end);
      const sv::RowRef hr(gh.data, type), gr(go.data, type);
      int64_t ref_index = -1;
      const bool ref_ok = ref.row_argmax(wide.data(), n, &ref_index);
      std::vector<double> ref_blocks(sv::num_blocks(n)), blocks(sv::num_blocks(n));
      double ref_mass = 0.0, mass = 0.0;
      const bool ref_mass_ok = ref.row_mass(wide.data(), n, ref_blocks.data(), &ref_mass);
      const char* tname = type == sv::Elem::kF16 ? "f16" : "bf16";
      for (const sv::KernelTable* kt : kts) {
        char buf[160];
        std::snprintf(buf, sizeof buf, "%s %s rows n=%lld fill=%s", kt->name, tname, (long long)n, fill_name(fill));
        int64_t index = -1;
        const bool ok = sv::typed_argmax(*kt, hr, n, &index);
        check(ok == ref_ok && (!ok || index == ref_index), std::string(buf) + " typed_argmax");
        const bool mass_ok = sv::typed_mass(*kt, hr, n, blocks.data(), &mass);
        check(mass_ok == ref_mass_ok && (!mass_ok || (bits(mass) == bits(ref_mass) &&
                                                      std::memcmp(blocks.data(), ref_blocks.data(), blocks.size() * 8) == 0)),
              std::string(buf) + " typed_mass");
        // A residual of a half row against a float32 row and against a half row.
        if (ref_mass_ok && ref_mass > 0.0) {
          std::vector<double> rb_ref(sv::num_blocks(n)), rb(sv::num_blocks(n));
          double r_ref = 0.0, r = 0.0;
          float a = 0.0f, b = 0.0f;
          double other_mass = 0.0;
          ref.row_mass(wide_other.data(), n, rb_ref.data(), &other_mass);
          if (other_mass > 0.0) {
            sv::residual_scales(ref_mass, other_mass, &a, &b);
            ref.residual_mass(wide.data(), wide_other.data(), a, b, n, rb_ref.data(), &r_ref);
            sv::typed_residual(*kt, hr, gr, a, b, n, rb.data(), &r);
            check(bits(r) == bits(r_ref) && std::memcmp(rb.data(), rb_ref.data(), rb.size() * 8) == 0,
                  std::string(buf) + " typed_residual half-half");
            sv::typed_residual(*kt, hr, sv::RowRef(wide_other.data()), a, b, n, rb.data(), &r);
            check(bits(r) == bits(r_ref), std::string(buf) + " typed_residual half-float");
          }
        }
        std::vector<float> out(n);
        const float* f = sv::as_floats(*kt, hr, n, out.data());
        check(same_bits_floats(f, wide.data(), n), std::string(buf) + " as_floats");
      }
    }
  }
}

// Whole rounds on half rows (target and draft of different types) equal the rounds on the
// rows widened to float32, on every path: accept (token and block, with draft rows and
// one-hot), verify_greedy, and accept_logits and sample on logits rows.
void half_round_tests(Rng& rng, const std::vector<const sv::KernelTable*>& kts, int count, int64_t max_n) {
  const sv::Rows none{nullptr, 0};
  for (int r = 0; r < count; ++r) {
    const int64_t k = rng.below(6);
    const int64_t n = 1 + rng.below(max_n);
    const sv::Elem tt = rng.below(2) ? sv::Elem::kF16 : sv::Elem::kBF16;
    const sv::Elem dt = rng.below(3) == 0 ? sv::Elem::kF32 : (rng.below(2) ? sv::Elem::kF16 : sv::Elem::kBF16);
    const auto half_of = [](sv::Elem t, float x) { return t == sv::Elem::kF16 ? to_f16(x) : to_bf16(x); };
    const auto value_of = [](sv::Elem t, uint16_t h) { return t == sv::Elem::kF16 ? sv::f16_value(h) : sv::bf16_value(h); };
    // Probabilities (positive mass in every row) and logits (a finite value in every row).
    std::vector<uint16_t> tp((k + 1) * n), tl((k + 1) * n), dh(k * n), dlh(k * n);
    std::vector<float> tpw((k + 1) * n), tlw((k + 1) * n), dpw(k * n), dlw(k * n);
    for (int64_t i = 0; i <= k; ++i) {
      std::vector<float> v = make_row(rng, n, rng.below(2) ? kUniform : kSpiky);
      v[rng.below(n)] = 0.5f;
      std::vector<float> l = make_row(rng, n, kLogits);
      for (int64_t j = 0; j < n; ++j) {
        tp[i * n + j] = half_of(tt, v[j]);
        tpw[i * n + j] = value_of(tt, tp[i * n + j]);
        tl[i * n + j] = half_of(tt, l[j]);
        tlw[i * n + j] = value_of(tt, tl[i * n + j]);
      }
    }
    for (int64_t i = 0; i < k; ++i) {
      std::vector<float> v = make_row(rng, n, kUniform);
      v[rng.below(n)] = 0.5f;
      std::vector<float> l = make_row(rng, n, kLogits);
      for (int64_t j = 0; j < n; ++j) {
        if (dt == sv::Elem::kF32) {
          dpw[i * n + j] = v[j];
          dlw[i * n + j] = l[j];
        } else {
          dh[i * n + j] = half_of(dt, v[j]);
          dpw[i * n + j] = value_of(dt, dh[i * n + j]);
          dlh[i * n + j] = half_of(dt, l[j]);
          dlw[i * n + j] = value_of(dt, dlh[i * n + j]);
        }
      }
    }
    std::vector<int64_t> tokens(k);
    for (int64_t i = 0; i < k; ++i) {
      int64_t best = 0;
      sv::scalar_kernels().row_argmax(tpw.data() + i * n, n, &best);
      tokens[i] = rng.below(2) ? best : rng.below(n);
    }
    std::vector<double> u(k + 1);
    for (double& x : u) x = rng.uniform();
    const sv::Rows tp_rows{tp.data(), n, tt}, tl_rows{tl.data(), n, tt};
    const sv::Rows dp_rows = dt == sv::Elem::kF32 ? sv::Rows{dpw.data(), n} : sv::Rows{dh.data(), n, dt};
    const sv::Rows dl_rows = dt == sv::Elem::kF32 ? sv::Rows{dlw.data(), n} : sv::Rows{dlh.data(), n, dt};
    const sv::Rows tpw_rows{tpw.data(), n}, tlw_rows{tlw.data(), n}, dpw_rows{dpw.data(), n}, dlw_rows{dlw.data(), n};
    sv::WarpParams params;
    params.temperature = 0.8f;
    params.top_p = rng.below(2) ? 0.9 : 1.0;
    params.top_k = rng.below(3) == 0 ? 5 : 0;
    const sv::KernelTable& ref = sv::scalar_kernels();
    struct Want { const char* what; sv::Outcome out; };
    std::vector<Want> want;
    for (const sv::Method m : {sv::Method::kToken, sv::Method::kBlock}) {
      want.push_back({"accept", sv::accept_round(ref, tpw_rows, dpw_rows, tokens.data(), u.data(), k, n, m)});
      want.push_back({"accept one-hot", sv::accept_round(ref, tpw_rows, none, tokens.data(), u.data(), k, n, m)});
      want.push_back({"accept_logits", sv::accept_logits_round(ref, tlw_rows, dlw_rows, tokens.data(), u.data(), k, n, params, m)});
      want.push_back({"accept_logits one-hot", sv::accept_logits_round(ref, tlw_rows, none, tokens.data(), u.data(), k, n, params, m)});
    }
    want.push_back({"verify_greedy", sv::verify_greedy_round(ref, tpw_rows, tokens.data(), k, n)});
    want.push_back({"sample", sv::sample_round(ref, tlw.data(), n, params, u[0])});
    for (const sv::KernelTable* kt : kts) {
      std::vector<sv::Outcome> got;
      for (const sv::Method m : {sv::Method::kToken, sv::Method::kBlock}) {
        got.push_back(sv::accept_round(*kt, tp_rows, dp_rows, tokens.data(), u.data(), k, n, m));
        got.push_back(sv::accept_round(*kt, tp_rows, none, tokens.data(), u.data(), k, n, m));
        got.push_back(sv::accept_logits_round(*kt, tl_rows, dl_rows, tokens.data(), u.data(), k, n, params, m));
        got.push_back(sv::accept_logits_round(*kt, tl_rows, none, tokens.data(), u.data(), k, n, params, m));
      }
      got.push_back(sv::verify_greedy_round(*kt, tp_rows, tokens.data(), k, n));
      got.push_back(sv::sample_round(*kt, sv::RowRef(tl.data(), tt), n, params, u[0]));
      for (size_t c = 0; c < want.size(); ++c) {
        const bool same = got[c].error == want[c].out.error && got[c].n_accepted == want[c].out.n_accepted &&
                          got[c].token == want[c].out.token;
        check(same, std::string(kt->name) + " half round " + std::to_string(r) + " " + want[c].what +
                        " n=" + std::to_string(n));
      }
    }
  }
}

}  // namespace native_tests
