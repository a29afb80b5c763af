"""Tree verification (DESIGN.md, "Trees"; Note [Tree verification]).

Exact tests: a chain gives the chain ops' results with the same uniforms in every mode;
greedy trees against a direct walk; rows of untried subtrees hold NaN and nothing raises;
every malformed tree raises, drawing nothing; opcheck and torch.compile.
Statistical tests: the joint law of (accepted path, emitted token) against the law computed
in float64 by recursion over the tree (for children drawn from the draft, mixed over every
assignment of tokens), G-test; null hypothesis: the counts are multinomial with that law.
ROUNDS rounds per case, threshold p < P_MIN = 1e-8 fails (about 10 cases: a correct kernel
fails a run with probability < 1e-7). Power: the same counts must reject the law of a
verifier that forgets to update the residual (deterministic children: keeps rejected tokens
in r; drawn children: r stays p), wherever that law differs visibly. Seeds are fixed.
"""
from __future__ import annotations

import itertools

import pytest
import torch

from law import g_test, normalise
from conftest import compile_fullgraph

P_MIN = 1e-8
ROUNDS = 30_000
V = 5


def rows(n_rows: int, seed: int, scale: float = 1.5) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    return torch.softmax(torch.randn(n_rows, V, generator=g) * scale, -1)


def children_of(parents, node):
    return [j for j, p in enumerate(parents) if p == node]


# ---- the law, in float64 ----------------------------------------------------------------------

def tree_law(p, q, tokens, parents, forget=False):
    """{(path tuple, x): probability} for fixed tokens. q None: deterministic children."""
    pn = normalise(p)
    qn = None if q is None else normalise(q)
    law = {}

    def walk(node, path, weight):
        row = node + 1
        r = pn[row].clone()
        kids = children_of(parents, node)
        if not kids:
            for x in range(V):
                law[(path, x)] = law.get((path, x), 0.0) + weight * float(r[x])
            return
        reach = weight
        for c in kids:
            t = tokens[c]
            if qn is None:
                mass = float(r.sum())
                acc = float(r[t]) / mass if mass > 0 else 0.0
                if not forget:
                    r[t] = 0.0
            else:
                rn = r / r.sum()
                acc = min(1.0, float(rn[t]) / float(qn[row, t])) if float(qn[row, t]) > 0 else 1.0
                if not forget:
                    res = (rn - qn[row]).clamp(min=0)
                    r = res if float(res.sum()) > 0 else rn
            walk(c, path + (c,), reach * acc)
            reach *= 1.0 - acc
        final = r / r.sum()
        for x in range(V):
            law[(path, x)] = law.get((path, x), 0.0) + reach * float(final[x])

    walk(-1, (), 1.0)
    return law


def mixed_law(p, q, parents, forget=False):
    """Children drawn independently from q at their parent: the mixture over assignments."""
    qn = normalise(q)
    n = len(parents)
    law = {}
    for tokens in itertools.product(range(V), repeat=n):
        w = 1.0
        for j, t in enumerate(tokens):
            w *= float(qn[parents[j] + 1, t])
        if w == 0:
            continue
        for key, pr in tree_law(p, q, list(tokens), parents, forget).items():
            law[key] = law.get(key, 0.0) + w * pr
    return law


def g_against(counts: dict, law: dict):
    keys = sorted(set(law) | set(counts))
    obs = torch.tensor([counts.get(k, 0) for k in keys], dtype=torch.float64)
    exp = torch.tensor([law.get(k, 0.0) for k in keys], dtype=torch.float64)
    return g_test(obs, exp)


TREES = {  # parents
    "two-level": [-1, -1, 0, 0, 1],
    "wide": [-1, -1, -1, 0],
    "deep": [-1, 0, 1, 1],
}


# ---- exact tests ------------------------------------------------------------------------------

@pytest.mark.parametrize("mode", ["greedy", "deterministic", "independent"])
@pytest.mark.parametrize("logits", [False, True], ids=["probs", "logits"])
def test_a_chain_is_the_chain_op(sv, isa, mode, logits):
    g = torch.Generator().manual_seed(3)
    vocab, k = 50, 4
    for _ in range(60):
        target = torch.randn(k + 1, vocab, generator=g) * 2
        draft = target + torch.randn(k + 1, vocab, generator=g)
        if not logits:
            target, draft = target.softmax(-1), draft.softmax(-1)
        best = target[:k].argmax(-1)
        tokens = torch.where(torch.rand(k, generator=g) < 0.6, best, torch.randint(0, vocab, (k,), generator=g))
        parents = torch.arange(k) - 1
        u = torch.rand(k + 1, dtype=torch.float64, generator=g)
        d = draft if mode == "independent" else None
        if logits:
            params = dict(temperature=0.0) if mode == "greedy" else dict(temperature=0.9, top_p=0.9)
            path, x = sv.verify_tree_with_uniforms(target, tokens, parents, d, u, **params)
            n, y = sv.accept_logits_with_uniforms(target, None if d is None else d[:k], tokens, u, **params)
        else:
            path, x = sv.verify_tree_probs_with_uniforms(target, tokens, parents, d, u, greedy=mode == "greedy")
            n, y = (sv.verify_greedy(target, tokens) if mode == "greedy"
                    else sv.accept_with_uniforms(target, None if d is None else d[:k], tokens, u))
        assert (len(path), x) == (n, y) and path.tolist() == list(range(n))


def test_greedy_tree_follows_the_argmax(sv, isa):
    g = torch.Generator().manual_seed(4)
    for _ in range(100):
        n = int(torch.randint(1, 12, (1,), generator=g))
        parents = [int(torch.randint(-1, j, (1,), generator=g)) if j else -1 for j in range(n)]
        logits = torch.randn(n + 1, 6, generator=g)
        best = logits.argmax(-1)
        tokens = [int(best[parents[j] + 1]) if torch.rand(1, generator=g) < 0.7 else
                  int(torch.randint(0, 6, (1,), generator=g)) for j in range(n)]
        node, want = -1, []
        while True:
            nxt = [c for c in children_of(parents, node) if tokens[c] == int(best[node + 1])]
            if not nxt:
                break
            node = nxt[0]
            want.append(node)
        path, x = sv.verify_tree(logits, tokens, parents, temperature=0.0)
        assert path.tolist() == want and x == int(best[node + 1])
        assert sv.verify_tree_probs(logits.softmax(-1), tokens, parents, greedy=True)[0].tolist() == want


def test_unread_subtrees_may_hold_nan(sv, isa):
    """Root's first child holds all of p_0's mass: accepted for sure, so the root's second
    child and its subtree are never tried, and their rows (NaN here) are never read."""
    p = rows(6, 1)
    p[0] = torch.tensor([0.0, 1.0, 0.0, 0.0, 0.0])
    parents, tokens = [-1, -1, 1, 0], [1, 2, 3, 4]
    p[2:4] = float("nan")  # rows of node 1 (second child) and node 2 (its child)
    for draft in (None, rows(5, 2)):
        path, x = sv.verify_tree_probs(p[:5], tokens, parents, draft, generator=torch.Generator().manual_seed(0))
        assert path.tolist()[:1] == [0]
    logits = torch.log(p[:5].clamp(min=1e-30))
    logits[2:4] = float("nan")
    path, _ = sv.verify_tree(logits, tokens, parents, generator=torch.Generator().manual_seed(0))
    assert path.tolist()[:1] == [0]


def test_half_rows_equal_float32(sv, isa):
    g = torch.Generator().manual_seed(9)
    for _ in range(30):
        t = torch.randn(5, 40, generator=g)
        d = torch.randn(5, 40, generator=g)
        parents, tokens = [-1, -1, 0, 1], torch.randint(0, 40, (4,), generator=g).tolist()
        tokens[1] = (tokens[0] + 1) % 40  # distinct siblings
        u = torch.rand(5, dtype=torch.float64, generator=g)
        for draft in (None, d):
            want = sv.verify_tree_with_uniforms(t.bfloat16().float(), tokens, parents,
                                                None if draft is None else draft.half().float(), u, temperature=0.8)
            got = sv.verify_tree_with_uniforms(t.bfloat16(), tokens, parents,
                                               None if draft is None else draft.half(), u, temperature=0.8)
            assert got[0].tolist() == want[0].tolist() and got[1] == want[1]


BAD = [
    ("parents not topological", dict(parents=[-1, 2, 0]), r"parents\[1\] = 2 must be in \[-1, 1\)"),
    ("parent below -1", dict(parents=[-2, -1, 0]), r"parents\[0\] = -2 must be in \[-1, 0\)"),
    ("self parent", dict(parents=[-1, 1, 0]), r"parents\[1\] = 1 must be in \[-1, 1\)"),
    ("token out of range", dict(tokens=[1, 2, 7]), r"tokens\[2\] = 7 is outside the vocabulary \[0, 5\)"),
    ("repeated siblings", dict(tokens=[1, 1, 2]), r"tokens\[1\] = 1 repeats its sibling tokens\[0\]"),
    ("too few tokens", dict(tokens=[1, 2]), r"tokens must have shape \[N\] = \[3\]"),
    ("parents wrong length", dict(parents=[-1, 0]), r"parents must have shape \[N\] = \[3\]"),
    ("draft rows N", dict(draft=rows(3, 5)), r"draft_probs must have shape \[N\+1, V\] = \[4, 5\]"),
    ("target NaN", dict(target=torch.full((4, V), float("nan"))), r"target_probs\[0, 0\] = nan is NaN"),
]


@pytest.mark.parametrize("name, change, pattern", BAD, ids=[b[0] for b in BAD])
def test_malformed_trees_raise_and_draw_nothing(sv, name, change, pattern):
    args = dict(target=rows(4, 1), tokens=[1, 2, 3], parents=[-1, -1, 0], draft=None)
    args.update(change)
    g = torch.Generator().manual_seed(2)
    state = g.get_state()
    with pytest.raises(ValueError, match=r"^spec_verify\.verify_tree_probs: " + pattern):
        sv.verify_tree_probs(args["target"], args["tokens"], args["parents"], args["draft"], generator=g)
    assert torch.equal(g.get_state(), state)
    with pytest.raises(ValueError, match=pattern.replace("_probs", "_logits")):
        sv.verify_tree(args["target"], args["tokens"], args["parents"], args["draft"], generator=g)
    assert torch.equal(g.get_state(), state)


def test_repeated_siblings_are_fine_with_draft_rows_and_when_greedy(sv):
    p = rows(4, 1)
    sv.verify_tree_probs(p, [1, 1, 2], [-1, -1, 0], rows(4, 2))
    sv.verify_tree_probs(p, [1, 1, 2], [-1, -1, 0], greedy=True)


def test_token_and_parent_forms_agree(sv):
    """Lists, int64 tensors (contiguous or strided views, read in place), other integer
    dtypes and NumPy arrays give the same results, for both row kinds."""
    import numpy as np
    p, q = rows(6, 1), rows(6, 2)
    logits = torch.log(p)
    tokens, parents = [1, 2, 3, 0, 4], [-1, -1, 0, 0, 1]
    u = torch.rand(6, dtype=torch.float64, generator=torch.Generator().manual_seed(3))

    def strided(values):
        wide = torch.zeros(2 * len(values), dtype=torch.int64)
        wide[::2] = torch.tensor(values)
        return wide[::2]

    forms = [lambda x: x, lambda x: torch.tensor(x), strided, lambda x: torch.tensor(x, dtype=torch.int32),
             lambda x: np.array(x)]
    for draft in (None, q):
        want = sv.verify_tree_probs_with_uniforms(p, tokens, parents, draft, u)
        want_logits = sv.verify_tree_with_uniforms(logits, tokens, parents, None if draft is None else torch.log(q),
                                                   u, temperature=1.0)
        for form in forms:
            got = sv.verify_tree_probs_with_uniforms(p, form(tokens), form(parents), draft, u)
            assert got[0].tolist() == want[0].tolist() and got[1] == want[1]
            got = sv.verify_tree_with_uniforms(logits, form(tokens), form(parents),
                                               None if draft is None else torch.log(q), u, temperature=1.0)
            assert got[0].tolist() == want_logits[0].tolist() and got[1] == want_logits[1]


def test_list_parents_take_the_ints_ops(sv):
    """A list of ints for `parents` goes through the ops' `_ints` twins (no tensor made of
    it): the same results as a tensor with the same generator state, for all four tree ops
    (greedy too), and the same errors: wrong length, out of range (ValueError naming
    parents), bools (TypeError), values beyond int64 (ValueError)."""
    p, q = rows(6, 1), rows(6, 2)
    logits = torch.log(p)
    tokens, parents = torch.tensor([1, 2, 3, 0, 4]), [-1, -1, 0, 0, 1]
    calls = [lambda par, g: sv.verify_tree_probs(p, tokens, par, q, generator=g),
             lambda par, g: sv.verify_tree_probs(p, tokens, par, None, generator=g),
             lambda par, g: sv.verify_tree_probs(p, tokens, par, q, greedy=True),
             lambda par, g: sv.verify_tree(logits, tokens, par, torch.log(q), temperature=0.8, generator=g),
             lambda par, g: sv.verify_tree(logits, tokens, par, None, temperature=0.0),
             lambda par, g: sv.verify_tree_probs_with_uniforms(p, tokens, par, q,
                                                               torch.rand(6, dtype=torch.float64, generator=g)),
             lambda par, g: sv.verify_tree_with_uniforms(logits, tokens, par, None,
                                                         torch.rand(6, dtype=torch.float64, generator=g),
                                                         temperature=1.3, top_p=0.9)]
    for call in calls:
        for seed in range(5):
            a = call(parents, torch.Generator().manual_seed(seed))
            b = call(torch.tensor(parents), torch.Generator().manual_seed(seed))
            assert a[0].tolist() == b[0].tolist() and a[1] == b[1]
    for bad, err, match in (([-1, -1, 0, 0], ValueError, r"parents must have shape \[N\] = \[5\].*got \[4\]"),
                            ([-1, -1, 0, 0, 4], ValueError, r"parents\[4\] = 4 must be in \[-1, 4\)"),
                            ([-1, -1, 0, 0, True], TypeError, "parents"),
                            ([-1, -1, 0, 0, 1 << 64], ValueError, "parents")):
        for call in calls:
            with pytest.raises(err, match=match):
                call(bad, torch.Generator().manual_seed(0))


def test_uniform_budget(sv):
    p, q = rows(6, 1), rows(6, 2)
    for draft in (None, q):
        for seed in range(30):
            g, h = torch.Generator().manual_seed(seed), torch.Generator().manual_seed(seed)
            sv.verify_tree_probs(p, [1, 2, 3, 0, 4], [-1, -1, 0, 0, 1], draft, generator=g)
            torch.rand(6, dtype=torch.float64, generator=h)
            assert torch.equal(g.get_state(), h.get_state())


def test_opcheck_and_compile(sv):
    p, q = rows(5, 1), rows(5, 2)
    t, par = torch.tensor([1, 2, 3, 0]), torch.tensor([-1, -1, 0, 2])
    u = torch.rand(5, dtype=torch.float64)
    # The uniforms given (the *_with_uniforms wrappers pass them), or drawn (the others).
    torch.library.opcheck(sv.ops.verify_tree_probs, (p, t, par, q, False, u))
    torch.library.opcheck(sv.ops.verify_tree_probs, (p, t, par, None, False, u))
    torch.library.opcheck(sv.ops.verify_tree_probs, (p, t, par, None, True, None))  # greedy: none drawn
    torch.library.opcheck(sv.ops.verify_tree, (p.log(), t, par, None, 0.8, 0, 0.9, 0.0, u))
    torch.library.opcheck(sv.ops.verify_tree, (p.log(), t, par, q.log(), 0.8, 0, 1.0, 0.0, u))
    # The twins that take parents as a list of ints (what the wrappers call with a list).
    torch.library.opcheck(sv.ops._verify_tree_probs_ints, (p, t, par.tolist(), q, False, u))
    torch.library.opcheck(sv.ops._verify_tree_ints, (p.log(), t, par.tolist(), None, 0.8, 0, 0.9, 0.0, u))
    torch.library.opcheck(sv.ops._verify_tree_ints, (p.log(), t, par.tolist(), q.log(), 0.8, 0, 1.0, 0.0, u))
    torch.library.opcheck(sv.ops._verify_tree_probs_ints, (p, t, par.tolist(), q, False, u))

    def f(p, q, u):
        path, x = sv.verify_tree_probs_with_uniforms(p, t, par, q, u)
        return path, x

    compiled = compile_fullgraph(f)
    for _ in range(3):
        u = torch.rand(5, dtype=torch.float64)
        a, b = compiled(p, q, u), f(p, q, u)
        assert torch.equal(a[0], b[0]) and a[1] == b[1]


# ---- laws ---------------------------------------------------------------------------------------

def sample_counts(sv, p, q, tokens_fn, parents, logits_params=None, seed=0, rounds=ROUNDS):
    g = torch.Generator().manual_seed(seed)
    counts = {}
    for _ in range(rounds):
        tokens = tokens_fn(g)
        if logits_params is None:
            path, x = sv.verify_tree_probs(p, tokens, parents, q, generator=g)
        else:
            path, x = sv.verify_tree(p, tokens, parents, q, generator=g, **logits_params)
        key = (tuple(path.tolist()), x)
        counts[key] = counts.get(key, 0) + 1
    return counts


def check(counts, law, wrong, what):
    g, df, pval = g_against(counts, law)
    assert pval > P_MIN, f"{what}: G = {g:.1f}, df = {df}, p = {pval:.3g}"
    keys = set(law) | set(wrong)
    if max(abs(law.get(k, 0) - wrong.get(k, 0)) for k in keys) > 0.02:
        assert g_against(counts, wrong)[2] < P_MIN, f"{what}: cannot tell the law from a forgetful verifier's"
        return True
    return False


@pytest.mark.slow
@pytest.mark.parametrize("shape", sorted(TREES))
def test_deterministic_children_law(sv, shape):
    parents = TREES[shape]
    n = len(parents)
    p = rows(n + 1, 10 + n)
    # Distinct sibling tokens: each node's token is its rank among its siblings (0, 1, ...).
    tokens = [children_of(parents, parents[j]).index(j) for j in range(n)]
    counts = sample_counts(sv, p, None, lambda g: tokens, parents, seed=21)
    check(counts, tree_law(p, None, tokens, parents), tree_law(p, None, tokens, parents, forget=True), shape)


@pytest.mark.slow
@pytest.mark.parametrize("shape", sorted(TREES))
def test_independent_children_law(sv, shape):
    """Children drawn from the draft row of their parent (repeats among siblings happen)."""
    parents = TREES[shape]
    n = len(parents)
    p, q = rows(n + 1, 30 + n), rows(n + 1, 40 + n, scale=1.0)
    qn = normalise(q)

    def draw(g):
        return [int(torch.multinomial(qn[parents[j] + 1], 1, generator=g)) for j in range(n)]

    counts = sample_counts(sv, p, q, draw, parents, seed=22)
    check(counts, mixed_law(p, q, parents), mixed_law(p, q, parents, forget=True), shape)


def test_forgetful_laws_differ(sv):
    """The power checks above are not vacuous: the forgetful laws differ visibly."""
    differs = 0
    for shape, parents in TREES.items():
        n = len(parents)
        p, q = rows(n + 1, 30 + n), rows(n + 1, 40 + n, scale=1.0)
        a, b = mixed_law(p, q, parents), mixed_law(p, q, parents, forget=True)
        differs += max(abs(a.get(k, 0) - b.get(k, 0)) for k in set(a) | set(b)) > 0.02
    assert differs >= 2


@pytest.mark.slow
def test_logits_law_with_warping(sv):
    """On logits with temperature and top-p: the law from the warped rows (`warp`)."""
    parents = TREES["two-level"]
    n = len(parents)
    g0 = torch.Generator().manual_seed(5)
    t, d = torch.randn(n + 1, V, generator=g0) * 1.5, torch.randn(n + 1, V, generator=g0)
    params = dict(temperature=0.8, top_p=0.9)
    wp, wq = sv.warp(t, **params).double(), sv.warp(d, **params).double()

    def draw(g):
        return [int(torch.multinomial(wq[parents[j] + 1], 1, generator=g)) for j in range(n)]

    counts = sample_counts(sv, t, d, draw, parents, logits_params=params, seed=23)
    g, df, pval = g_against(counts, mixed_law(wp, wq, parents))
    assert pval > P_MIN, f"G = {g:.1f}, df = {df}, p = {pval:.3g}"


@pytest.mark.slow
def test_first_token_has_the_target_law(sv):
    """Whatever the tree, the first token of a round has law p_0 (both sampled modes).
    Null hypothesis: first tokens ~ p_0 (normalised row 0); 30000 rounds; p > 1e-8."""
    parents = TREES["wide"]
    n = len(parents)
    p, q = rows(n + 1, 50), rows(n + 1, 51, scale=0.5)
    qn = normalise(q)
    for draft in (None, q):
        g = torch.Generator().manual_seed(24)
        first = torch.zeros(V)
        for _ in range(ROUNDS):
            tokens = ([0, 1, 2, 3] if draft is None else
                      [int(torch.multinomial(qn[parents[j] + 1], 1, generator=g)) for j in range(n)])
            path, x = sv.verify_tree_probs(p, tokens, parents, draft, generator=g)
            first[tokens[int(path[0])] if len(path) else x] += 1
        assert g_test(first, normalise(p)[0])[2] > P_MIN
