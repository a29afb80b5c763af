// Note [Tree verification]: random trees, spine trees at the spine child's boundary and
// chained residuals, every path against the scalar path.
#include "harness.h"

namespace native_tests {

// Random trees: chains, and trees of up to 12 nodes, in every mode, on every path against
// the scalar path; a chain against the chain rounds; and the rows of nodes whose children
// were never tried poisoned with NaN afterwards, which must change nothing.
void tree_tests(Rng& rng, const std::vector<const sv::KernelTable*>& kts, int count, int64_t max_n) {
  const sv::KernelTable& ref = sv::scalar_kernels();
  const float nan = std::numeric_limits<float>::quiet_NaN();
  for (int r = 0; r < count; ++r) {
    const int64_t vocab = 1 + rng.below(max_n);
    const bool chain = rng.below(3) == 0;
    const int64_t n = rng.below(chain ? 7 : 13);
    std::vector<int64_t> parents(n), tokens(n);
    for (int64_t j = 0; j < n; ++j) parents[j] = chain ? j - 1 : rng.below(j + 1) - 1;
    // Rows: probabilities (positive mass) and logits (a finite value), target and draft.
    std::vector<float> tp, dp, tl, dl;
    for (int64_t i = 0; i <= n; ++i) {
      for (auto* rows : {&tp, &dp}) {
        std::vector<float> v = make_row(rng, vocab, rng.below(2) ? kUniform : kSparse);
        v[rng.below(vocab)] = 0.5f;
        rows->insert(rows->end(), v.begin(), v.end());
      }
      for (auto* rows : {&tl, &dl}) {
        std::vector<float> v = make_row(rng, vocab, kLogits);
        v[rng.below(vocab)] = 1.0f;
        rows->insert(rows->end(), v.begin(), v.end());
      }
    }
    // Tokens: often the argmax of the parent's target row, so paths go deep; siblings
    // distinct (the deterministic mode's requirement) by skipping repeats.
    for (int64_t j = 0; j < n; ++j) {
      int64_t best = 0;
      ref.row_argmax(tp.data() + (parents[j] + 1) * vocab, vocab, &best);
      int64_t t = rng.below(2) ? best : rng.below(vocab);
      for (int64_t tries = 0; tries < vocab; ++tries) {
        bool repeat = false;
        for (int64_t s = 0; s < j; ++s) repeat |= parents[s] == parents[j] && tokens[s] == t;
        if (!repeat) break;
        t = (t + 1) % vocab;
      }
      tokens[j] = t;
    }
    std::vector<double> u(n + 1);
    for (double& x : u) x = rng.uniform();
    sv::WarpParams params;
    params.temperature = 0.9f;
    params.top_p = rng.below(2) ? 0.85 : 1.0;
    const sv::Rows none{nullptr, 0};
    struct Mode { const char* name; bool logits, draft, greedy; };
    const Mode modes[] = {{"greedy probs", false, false, true},   {"deterministic probs", false, false, false},
                          {"independent probs", false, true, false}, {"greedy logits", true, false, true},
                          {"deterministic logits", true, false, false}, {"independent logits", true, true, false}};
    for (const Mode& m : modes) {
      std::vector<float> target = m.logits ? tl : tp, draft = m.logits ? dl : dp;
      const sv::Rows t_rows{target.data(), vocab}, d_rows = m.draft ? sv::Rows{draft.data(), vocab} : none;
      sv::WarpParams wp = params;
      if (m.greedy) wp.temperature = 0.0f;
      const sv::WarpParams* pp = m.logits ? &wp : nullptr;
      const double* uu = m.greedy && !m.logits ? nullptr : u.data();
      std::vector<int64_t> ref_path(n + 1, -1), path(n + 1, -1);
      const sv::Outcome want = sv::tree_round(ref, t_rows, d_rows, tokens.data(), parents.data(), n, uu, vocab, pp,
                                              ref_path.data());
      char buf[160];
      std::snprintf(buf, sizeof buf, "tree %d (%s, n=%lld, V=%lld) %s", r, chain ? "chain" : "tree", (long long)n,
                    (long long)vocab, m.name);
      bool valid = want.error == sv::InputError::kNone && want.token >= 0 && want.token < vocab;
      for (int64_t d = 0; d < want.n_accepted; ++d)
        valid &= ref_path[d] >= 0 && parents[ref_path[d]] == (d == 0 ? -1 : ref_path[d - 1]);
      check(valid, std::string("scalar ") + buf + ": a path down the tree and a token");
      if (chain) {  // the chain rounds with the same uniforms
        const int64_t k = n;
        sv::Outcome c;
        if (m.greedy) c = sv::verify_greedy_round(ref, t_rows, tokens.data(), k, vocab);
        else if (m.logits) c = sv::accept_logits_round(ref, t_rows, d_rows, tokens.data(), u.data(), k, vocab, params);
        else c = sv::accept_round(ref, t_rows, d_rows, tokens.data(), u.data(), k, vocab);
        check(c.n_accepted == want.n_accepted && c.token == want.token, std::string(buf) + " equals the chain round");
      }
      // Poison every row the round had no reason to read: only the root and the path's
      // nodes are read (target rows; draft rows too where children were tried).
      std::vector<bool> read(n + 1, false);
      read[0] = true;
      for (int64_t d = 0; d < want.n_accepted; ++d) read[ref_path[d] + 1] = true;
      for (int64_t i = 0; i <= n; ++i)
        if (!read[i]) {
          std::fill(target.begin() + i * vocab, target.begin() + (i + 1) * vocab, nan);
          std::fill(draft.begin() + i * vocab, draft.begin() + (i + 1) * vocab, nan);
        }
      for (const sv::KernelTable* kt : kts) {
        const sv::Outcome got = sv::tree_round(*kt, t_rows, d_rows, tokens.data(), parents.data(), n, uu, vocab, pp,
                                               path.data());
        check(got.error == sv::InputError::kNone && got.n_accepted == want.n_accepted && got.token == want.token &&
                  std::equal(path.begin(), path.begin() + got.n_accepted, ref_path.begin()),
              std::string(kt->name) + " " + buf + " (unread rows NaN)");
      }
    }
  }
}

// Spine trees as the benchmark builds them (width w, depth d; at every level the siblings
// before the spine child rejected), on normalised and unnormalised rows, with uniforms at 0,
// random, and at the spine child's acceptance boundary (its exact residual's mass, a few
// ulps either side): every path equals the scalar path.
void spine_tree_tests(Rng& rng, const std::vector<const sv::KernelTable*>& kts, int count, int64_t max_n) {
  const sv::KernelTable& exact = reference();
  int64_t boundaries = 0;
  for (int r = 0; r < count; ++r) {
    const int64_t vocab = 2 + rng.below(max_n);
    const int64_t width = 1 + rng.below(4), depth = 1 + rng.below(3);
    std::vector<int64_t> parents, spine;
    int64_t node = -1;
    for (int64_t l = 0; l < depth; ++l) {
      for (int64_t c = 0; c < width; ++c) parents.push_back(node);
      node = static_cast<int64_t>(parents.size()) - 1;
      spine.push_back(node);
    }
    const int64_t n = static_cast<int64_t>(parents.size());
    const bool normalised = rng.below(2) == 0;
    const int fills[] = {kUniform, kSpiky, kSparse, kDenormal};
    std::vector<float> tp, dp;
    for (int64_t i = 0; i <= n; ++i) {
      for (auto* rows : {&tp, &dp}) {
        std::vector<float> v = make_row(rng, vocab, fills[rng.below(4)]);
        // A draft row nearly disjoint from the target's at times: the residual then keeps
        // nearly all of p's mass (residual_mass_ceiling's case).
        if (rows == &dp && rng.below(4) == 0) {
          std::fill(v.begin(), v.end(), 0.0f);
          for (int k = 0; k < 3; ++k) v[rng.below(vocab)] = 0.01f;
        }
        v[rng.below(vocab)] = 0.5f;
        if (normalised) {
          double sum = 0.0;
          for (float x : v) sum += x;
          for (float& x : v) x = static_cast<float>(x / sum);
        }
        rows->insert(rows->end(), v.begin(), v.end());
      }
    }
    std::vector<int64_t> tokens(n);
    for (int64_t j = 0; j < n; ++j) tokens[j] = rng.below(vocab);
    // Siblings before the spine child: often tokens the target row lacks (rejected for
    // sure); the spine child often the row's largest value.
    const int mode = rng.below(3);  // uniforms 0, random, the first spine child's at its boundary
    node = -1;
    for (int64_t l = 0; l < depth; ++l) {
      float* row = tp.data() + (node + 1) * vocab;
      for (int64_t j = 0; j < n; ++j)
        if (parents[j] == node && j != spine[l] && ((mode == 2 && l == 0) || rng.below(3) != 0)) row[tokens[j]] = 0.0f;
      if (rng.below(2)) tokens[spine[l]] = std::max_element(row, row + vocab) - row;
      node = spine[l];
    }
    std::vector<double> u(n + 1);
    for (double& x : u) x = mode == 0 ? 0.0 : rng.uniform();
    if (mode == 2) {
      // The first spine child at its boundary u = r1(t) Q / (q(t) M1), r1 the exact residual
      // after the siblings before it (scalar, canonical masses; r1 = p, M1 = P for width 1).
      const float* p = tp.data();
      const float* q = dp.data();
      std::vector<double> blocks(sv::num_blocks(vocab));
      std::vector<float> res(p, p + vocab), out(vocab);
      double P = 0, Q = 0;
      exact.row_mass(p, vocab, blocks.data(), &P);
      exact.row_mass(q, vocab, blocks.data(), &Q);
      double M = P;
      bool ok = true;
      for (int64_t c = 0; c + 1 < width && ok; ++c) {
        float a, b;
        sv::residual_scales(M, Q, &a, &b);
        exact.residual_store(res.data(), q, a, b, vocab, out.data(), blocks.data(), &M);
        ok = M > 0.0;
        res = out;
      }
      // The spine child's token: where r1 / q is least, so that the boundary lies below 1.
      int64_t t = -1;
      for (int64_t v = 0; v < vocab; ++v)
        if (res[v] > 0.0f && q[v] > 0.0f && (t < 0 || res[v] * q[t] < res[t] * q[v])) t = v;
      if (ok && t >= 0) {
        tokens[spine[0]] = t;
        const double bound = static_cast<double>(res[t]) * Q / (static_cast<double>(q[t]) * M);
        if (bound < 1.0) {
          u[spine[0]] = std::nextafter(bound, rng.below(2) ? 0.0 : 1.0);
          ++boundaries;
        }
        for (int64_t s = rng.below(3); s > 0; --s) u[spine[0]] = std::nextafter(u[spine[0]], 0.0);
      }
    }
    if (mode == 2 && width == 2 && rng.below(2) == 0) {
      // Or the first child at its boundary u = p(t) Q / (q(t) P), its token where p / q is
      // least (with p(t) > 0), and the second child at the row's largest value.
      float* p = tp.data();
      const float* q = dp.data();
      std::vector<double> blocks(sv::num_blocks(vocab));
      double P = 0, Q = 0;
      exact.row_mass(p, vocab, blocks.data(), &P);
      exact.row_mass(q, vocab, blocks.data(), &Q);
      int64_t t = -1;
      for (int64_t v = 0; v < vocab; ++v)
        if (p[v] > 0.0f && q[v] > 0.0f && (t < 0 || p[v] * q[t] < p[t] * q[v])) t = v;
      if (t >= 0) {
        tokens[0] = t;
        tokens[1] = std::max_element(p, p + vocab) - p;
        const double bound = static_cast<double>(p[t]) * Q / (static_cast<double>(q[t]) * P);
        if (bound < 1.0) {
          u[0] = std::nextafter(bound, rng.below(2) ? 0.0 : 1.0);
          u[1] = rng.uniform();
          ++boundaries;
        }
      }
    }
    const sv::Rows t_rows{tp.data(), vocab}, d_rows{dp.data(), vocab};
    std::vector<int64_t> want_path(n + 1, -1), path(n + 1, -1);
    const sv::Outcome want = sv::tree_round(exact, t_rows, d_rows, tokens.data(), parents.data(), n, u.data(), vocab,
                                            nullptr, want_path.data());
    for (const sv::KernelTable* kt : kts) {
      const sv::Outcome got = sv::tree_round(*kt, t_rows, d_rows, tokens.data(), parents.data(), n, u.data(), vocab,
                                             nullptr, path.data());
      char buf[200];
      std::snprintf(buf, sizeof buf, "%s spine tree %d (width %lld, depth %lld, V=%lld, %s, uniforms %s)", kt->name,
                    r, (long long)width, (long long)depth, (long long)vocab, normalised ? "normalised" : "unnormalised",
                    mode == 0 ? "0" : mode == 1 ? "random" : "at a boundary");
      check(got.error == want.error && got.n_accepted == want.n_accepted && got.token == want.token &&
                std::equal(path.begin(), path.begin() + got.n_accepted, want_path.begin()),
            std::string(buf) + ": the scalar outcome");
    }
  }
  if (count >= 50) {
    check(boundaries > count / 16, "tree acceptances at the boundary tried (" + std::to_string(boundaries) + ")");
  }
}

// Chained residuals (Note [Tree verification]): one node with 2 to 7 children drawn from the draft,
// their tokens of four kinds: the draft's ten times its largest value (the residual drops
// them: r(t) = 0 for certain), at the edge of that (q(t) / Q within a few ulps of p(t) / P),
// kept by the first residual and often rejected there (p(t) / P = c q(t) / Q, c in [1, 1.5):
// deciding needs the residual's mass), or any token (repeats allowed). Rows
// normalised or scaled by up to 2^+-40; uniforms random, and at every child's and the draw's
// boundaries found by bisection on the scalar rule. Every path must give the scalar
// outcome. Then the same trees on logits rows at temperature only. A quarter of the drafts
// are the target within 10% or 1% value by value (the residuals' masses then small); a
// quarter are the target times a factor per block.
void chained_tree_tests(Rng& rng, const std::vector<const sv::KernelTable*>& kts, int count, int64_t max_n) {
  const sv::KernelTable& exact = reference();
  const int fills[] = {kUniform, kSpiky, kSparse, kDenormal};
  int64_t boundaries = 0;
  for (int r = 0; r < count; ++r) {
    const int64_t vocab = 8 + rng.below(max_n);
    const int64_t width = 2 + rng.below(6);
    std::vector<int64_t> parents(width, -1), tokens(width);
    std::vector<float> rows[2];
    for (auto& v : rows) {
      v = make_row(rng, vocab, fills[rng.below(4)]);
      v[rng.below(vocab)] = 0.5f;
      double sum = 0.0;
      for (float x : v) sum += x;
      const double scale = rng.below(2) ? 1.0 / sum : std::ldexp(1.0 / sum, static_cast<int>(rng.below(81)) - 40);
      for (float& x : v) x = static_cast<float>(x * scale);
    }
    std::vector<float>& p = rows[0];
    std::vector<float>& q = rows[1];
    const int64_t draft_kind = rng.below(4);
    if (draft_kind == 0) {  // a draft close to the target: small residual masses
      const double spread = rng.below(2) ? 0.2 : 0.02;
      for (int64_t v = 0; v < vocab; ++v) q[v] = static_cast<float>(p[v] * (1.0 + spread * (rng.uniform() - 0.5)));
    } else if (draft_kind == 1) {
      // The target times a factor per block (1/4 to 4): each block's residual values all of
      // one sign, so the block masses' lower bound on M_1 is tight (up to its margins).
      const double scale = rng.below(2) ? 1.0 : std::ldexp(1.0, static_cast<int>(rng.below(41)) - 20);
      for (int64_t b = 0; b < sv::num_blocks(vocab); ++b) {
        const double f = scale * std::ldexp(1.0, static_cast<int>(rng.below(5)) - 2) * (1.0 + 0.1 * rng.uniform());
        for (int64_t v = b * sv::kMassBlock; v < std::min(vocab, (b + 1) * sv::kMassBlock); ++v)
          q[v] = static_cast<float>(p[v] * f);
      }
    }
    const auto masses = [&](double* P, double* Q) {
      std::vector<double> blocks(sv::num_blocks(vocab));
      exact.row_mass(p.data(), vocab, blocks.data(), P);
      exact.row_mass(q.data(), vocab, blocks.data(), Q);
    };
    const int kind_set = rng.below(4);  // which kinds this round's tokens take
    std::vector<int> kinds_of(width, 3);
    for (int64_t c = 0; c < width; ++c) {
      const int64_t t = rng.below(vocab);
      tokens[c] = t;
      const int mix[] = {0, 1, 2, 2, 3};
      const int kind = c == 0 && rng.below(4) != 0 ? 0 : kind_set == 3 ? mix[rng.below(5)] : kind_set;
      kinds_of[c] = kind;
      double P = 0, Q = 0;
      masses(&P, &Q);
      if (kind == 0) {
        q[t] = 10.0f * *std::max_element(q.begin(), q.end());
      } else if (kind == 2 && c > 0) {
        if (p[t] == 0.0f) p[t] = static_cast<float>(P / static_cast<double>(vocab));
        masses(&P, &Q);
        q[t] = static_cast<float>(static_cast<double>(p[t]) / (1.0 + 0.5 * rng.uniform()) * Q / P);
      }
    }
    // The edge kind last, on the rows' final masses: q(t) = p(t) (Q - q(t)) / (P - p(t)),
    // that is q(t) / Q = p(t) / P, then up to 3 ulps off.
    for (int64_t c = 0; c < width; ++c) {
      const int64_t t = tokens[c];
      if (kinds_of[c] != 1 || !(p[t] > 0.0f)) continue;
      double P = 0, Q = 0;
      masses(&P, &Q);
      float x = static_cast<float>(static_cast<double>(p[t]) * (Q - q[t]) / (P - p[t]));
      for (int64_t s = static_cast<int64_t>(rng.below(7)) - 3; s != 0; s += s > 0 ? -1 : 1)
        x = std::nextafter(x, s > 0 ? 1.0f : 0.0f);
      if (x > 0.0f && std::isfinite(x)) q[t] = x;  // (P - p(t)) can be tiny next to a scaled p(t)
    }
    std::vector<double> u(width + 1);
    for (double& x : u) x = rng.uniform();
    // The children's rows (an accepted child's target row gives the bonus token).
    std::vector<float> target = p, draft = q;
    for (int64_t c = 0; c < width; ++c) {
      const std::vector<float> leaf = make_row(rng, vocab, kUniform);
      target.insert(target.end(), leaf.begin(), leaf.end());
      draft.insert(draft.end(), leaf.begin(), leaf.end());
    }
    const sv::Rows t_rows{target.data(), vocab}, d_rows{draft.data(), vocab};
    // The round's outcome on rows (t, d), logits warped by params when given.
    const auto outcome_on = [&](sv::Rows t, sv::Rows d, const sv::WarpParams* params) {
      return [&, t, d, params](const sv::KernelTable& kt, const std::vector<double>& uu) {
        std::vector<int64_t> path(width + 1, -1);
        const sv::Outcome o =
            sv::tree_round(kt, t, d, tokens.data(), parents.data(), width, uu.data(), vocab, params, path.data());
        return std::make_tuple(static_cast<int>(o.error), o.n_accepted, o.token, path[0]);
      };
    };
    // The uniforms to try: the random ones, then each uniform's boundaries on the exact rule.
    const auto trials_of = [&](const auto& outcome) {
      std::vector<std::vector<double>> trials = {u};
      for (int64_t j = 0; j <= width; ++j)
        for (const auto& uu :
             boundary_uniforms(u, j, 0.0, [&](const std::vector<double>& x) { return outcome(exact, x); })) {
          trials.push_back(uu);
          ++boundaries;
        }
      return trials;
    };
    const auto outcome = outcome_on(t_rows, d_rows, nullptr);
    const std::vector<std::vector<double>> trials = trials_of(outcome);
    for (size_t i = 0; i < trials.size(); ++i) {
      const auto want = outcome(exact, trials[i]);
      for (const sv::KernelTable* kt : kts) {
        const auto got = outcome(*kt, trials[i]);
        char buf[200];
        std::snprintf(buf, sizeof buf, "%s chained tree %d (width %lld, V=%lld, kinds %d, uniforms %zu)",
                      kt->name, r, (long long)width, (long long)vocab, kind_set, i);
        check(got == want && std::get<0>(want) == 0, std::string(buf) + ": the scalar outcome");
      }
    }
    // The same tree on logits at temperature only (T log of the rows: weights proportional
    // to them up to rounding): every path against the scalar path, at random uniforms and at
    // each uniform's boundaries on the logits rows.
    sv::WarpParams wp;
    wp.temperature = 0.9f;
    std::vector<float> tl(target.size()), dl(draft.size());
    for (size_t v = 0; v < tl.size(); ++v) {
      tl[v] = target[v] > 0.0f ? 0.9f * std::log(target[v]) : -std::numeric_limits<float>::infinity();
      dl[v] = draft[v] > 0.0f ? 0.9f * std::log(draft[v]) : -std::numeric_limits<float>::infinity();
    }
    // The edge kind again on the warped rows: the draft's logit at t moved to where its
    // weight over Q is nearest the target's over P (then up to 3 ulps off), as the
    // logarithms round it away from the edge.
    for (int64_t c = 0; c < width; ++c) {
      const int64_t t = tokens[c];
      if (kinds_of[c] != 1 || !std::isfinite(tl[t]) || !std::isfinite(dl[t])) continue;
      const auto warped_mass = [&](const std::vector<float>& x, float* z_max) {
        int64_t top = 0;
        exact.row_argmax(x.data(), vocab, &top);
        *z_max = x[top] / 0.9f;
        std::vector<float> w(vocab);
        std::vector<double> blocks(sv::num_blocks(vocab));
        double mass = 0.0;
        exact.row_weights(x.data(), vocab, 0.9f, *z_max, w.data(), blocks.data(), &mass);
        return mass;
      };
      float zp = 0.0f, zq = 0.0f;
      const double P = warped_mass(tl, &zp), Q = warped_mass(dl, &zq);
      const double want = static_cast<double>(sv::weight(tl[t], 0.9f, zp)) * Q / P;
      float x = dl[t];
      for (int step = 0; step < 64; ++step) {  // weight is monotone in x: walk towards want
        const double w = sv::weight(x, 0.9f, zq);
        const float next = std::nextafter(x, w < want ? std::numeric_limits<float>::infinity() : -1e30f);
        if (std::fabs(sv::weight(next, 0.9f, zq) - want) >= std::fabs(w - want)) break;
        x = next;
      }
      for (int64_t s = static_cast<int64_t>(rng.below(7)) - 3; s != 0; s += s > 0 ? -1 : 1)
        x = std::nextafter(x, s > 0 ? std::numeric_limits<float>::infinity() : -1e30f);
      if (x <= zq * 0.9f) dl[t] = x;  // not above the row's largest logit
    }
    const auto logit_outcome = outcome_on(sv::Rows{tl.data(), vocab}, sv::Rows{dl.data(), vocab}, &wp);
    const std::vector<std::vector<double>> logit_trials = trials_of(logit_outcome);
    for (size_t i = 0; i < logit_trials.size(); ++i) {
      const auto want = logit_outcome(exact, logit_trials[i]);
      for (const sv::KernelTable* kt : kts) {
        const auto got = logit_outcome(*kt, logit_trials[i]);
        char buf[200];
        std::snprintf(buf, sizeof buf, "%s chained tree on logits %d (width %lld, V=%lld, kinds %d, uniforms %zu)",
                      kt->name, r, (long long)width, (long long)vocab, kind_set, i);
        check(got == want && std::get<0>(want) == 0, std::string(buf) + ": the scalar outcome");
      }
    }
  }
  if (count >= 50) {
    check(boundaries > count, "chained tree boundaries searched (" + std::to_string(boundaries) + ")");
  }
}

}  // namespace native_tests
