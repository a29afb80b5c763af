"""The cases compare.py times: rows built so that each op meets a known outcome, and the
columns (op per path, pure-PyTorch reference, floor) that time it.

A builder whose rows are meant to reach an outcome (all drafts matched, rejected at
position 0, the analytic mix, the tree's spine...) checks it before anything is timed (on
every path where it builds one column per path) and raises RuntimeError otherwise. A `Case`
holds the columns timed together for one case of a compare.py table; paired_timing.py times
them.
"""
from __future__ import annotations

import statistics
from dataclasses import dataclass, field

import torch

import torch_reference
from paired_timing import Column

SMALL_V, SMALL_K = 64, 4  # the fixed-cost case: at V = 64 the time is all per-call cost


# ---------------------------------------------------------------- inputs

def rows_buffer(k: int, v: int, seed: int):
    """Target [K+1, V] and draft [K, V] as views of one allocation [target; draft].

    The floor then sums a contiguous slice of the very memory the op reads, in the same
    cache state, instead of a cold copy elsewhere.
    """
    g = torch.Generator().manual_seed(seed)
    logits = torch.randn(k + 1, v, generator=g) * 3
    mem = torch.empty(2 * k + 1, v)
    mem[: k + 1] = torch.softmax(logits, -1)
    # A draft that sees the target's logits through noise: alpha_i around 0.5-0.8.
    sharp = torch.linspace(1.0, 0.6, k)[:, None] if k else torch.ones(0, 1)
    mem[k + 1:] = torch.softmax(logits[:k] * sharp + torch.randn(k, v, generator=g) * 1.2, -1)
    return mem, mem[: k + 1], mem[k + 1:]


def accept_rows_read(n: int, k: int) -> int:
    """Rows the issue counts for accept: rejection at n reads n+1 target rows, n+1 draft rows
    and one more for the sampling pass; all K accepted reads K + K rows and samples row K."""
    return 2 * n + 3 if n < k else 2 * k + 1


def analytic_law(target: torch.Tensor, draft: torch.Tensor) -> torch.Tensor:
    """P(N = n), n = 0..K, for tokens drawn from the draft rows (DESIGN.md, "The analytic law")."""
    k = draft.shape[0]
    p = target[:k].double()
    q = draft.double()
    alpha = torch.minimum(p / p.sum(-1, keepdim=True), q / q.sum(-1, keepdim=True)).sum(-1)
    reach = torch.cat([torch.ones(1, dtype=torch.float64), torch.cumprod(alpha, 0)])
    law = reach.clone()
    law[:-1] *= 1 - alpha
    return law


def mixed_rounds(sv, target, draft, n_rounds: int, seed: int):
    """Draft-token vectors whose outcomes, under the uniforms a generator seeded `seed`
    hands out call after call, occur in the analytic proportions (largest-remainder rounding
    to n_rounds), in a shuffled order. Tokens are genuine draws from the draft rows, kept
    when their round lands on the outcome wanted: the mix is the law's, not a lucky sample."""
    k = draft.shape[0]
    law = analytic_law(target, draft)
    raw = law * n_rounds
    counts = raw.floor().long()
    for i in torch.argsort(raw - counts, descending=True)[: n_rounds - int(counts.sum())]:
        counts[i] += 1
    g = torch.Generator().manual_seed(seed + 1)
    wanted = torch.repeat_interleave(torch.arange(k + 1), counts)[torch.randperm(n_rounds, generator=g)]
    stream = torch.Generator().manual_seed(seed)
    rounds, outcomes = [], []
    for want in wanted.tolist():
        u = torch.rand(k + 1, dtype=torch.float64, generator=stream)
        for _ in range(200):
            cands = torch.multinomial(draft, 64, replacement=True, generator=g)  # [K, 64]
            hit = None
            for j in range(cands.shape[1]):
                tok = cands[:, j].contiguous()
                if sv.accept_with_uniforms(target, draft, tok, u)[0] == want:
                    hit = tok
                    break
            if hit is not None:
                break
        else:
            raise RuntimeError(f"no draft round reaches outcome {want} (law {law.tolist()})")
        rounds.append(hit)
        outcomes.append(want)
    return rounds, outcomes, law


# ---------------------------------------------------------------- cases

@dataclass
class Case:
    op: str            # "verify_greedy" or "accept"
    v: int
    k: int
    label: str
    rows: float        # rows the op reads (mean over rounds for the mix)
    columns: dict      # name -> Column; op columns are "op:<path>"
    extra: dict = field(default_factory=dict)


def greedy_cases(sv, paths, v, k, mem, target):
    best = target.argmax(-1)
    all_match = best[:k].clone()
    miss0 = all_match.clone()
    miss0[0] = (int(best[0]) + 1) % v
    cases = []
    for label, tok, n_read, want in (
        ("all drafts match", all_match, k + 1, (k, int(best[k]))),
        ("miss at position 0", miss0, 1, (0, int(best[0]))),
    ):
        cols = {}
        for p in paths:
            sv._force_isa(p)
            got = sv.verify_greedy(target, tok)
            if tuple(got) != want:
                raise RuntimeError(f"verify_greedy[{p}] {label}: got {got}, built for {want}")
            cols[f"op:{p}"] = Column(f"op:{p}", sv.verify_greedy, [(target, tok)],
                                     prepare=lambda p=p: sv._force_isa(p))
        cols["ref"] = Column("ref", torch_reference.verify_greedy, [(target, tok)])
        cols["floor"] = Column("floor", torch.sum, [(target[:n_read],)])
        cases.append(Case("verify_greedy", v, k, label, n_read, cols))
    return cases


def accept_cases(sv, paths, v, k, mem, target, draft, n_mix: int, seed: int):
    cases = []
    # All accepted: p = q on rows 0..K-1, so u * q(t) * P < p(t) * Q holds for every u < 1.
    same = mem.clone()
    same[k + 1:] = same[:k]
    t_same, d_same = same[: k + 1], same[k + 1:]
    tok_all = d_same.argmax(-1)
    # Rejected at 0: p_0(t_0) = 0 is always rejected; the rows stay dense otherwise.
    rej = mem.clone()
    tok_rej = rej[k + 1:].argmax(-1)
    rej[0, tok_rej[0]] = 0.0
    t_rej, d_rej = rej[: k + 1], rej[k + 1:]
    # The same with p_0 renormalised to mass 1, as a softmax row would be.
    rej1 = rej.clone()
    rej1[0] /= rej1[0].double().sum().float()
    t_rej1, d_rej1 = rej1[: k + 1], rej1[k + 1:]
    # The mix: an imperfect draft, outcomes in the analytic proportions.
    sv._force_isa("")
    rounds, outcomes, law = mixed_rounds(sv, target, draft, n_mix, seed)

    specs = [
        ("all accepted", same, t_same, d_same, [tok_all], [k]),
        ("rejected at position 0", rej, t_rej, d_rej, [tok_rej], [0]),
        ("rejected at 0, p_0 of mass 1", rej1, t_rej1, d_rej1, [tok_rej], [0]),
        ("imperfect draft, analytic mix", mem, target, draft, rounds, outcomes),
    ]
    for label, buf, t, d, toks, outs in specs:
        mixed = len(toks) > 1
        gens = {}
        cols = {}
        for p in paths:
            gen = gens[p] = torch.Generator().manual_seed(seed)
            sv._force_isa(p)
            got = [sv.accept(t, d, tk, gen)[0] for tk in toks]
            if got != outs:
                raise RuntimeError(f"accept[{p}] {label}: outcomes {got}, built for {outs}")

            def prepare(p=p, gen=gen):
                sv._force_isa(p)
                gen.manual_seed(seed)  # replay the uniforms the outcomes were built for
            cols[f"op:{p}"] = Column(f"op:{p}", sv.accept, [(t, d, tk, gen) for tk in toks],
                                     prepare=prepare, fixed=mixed)
        g_ref = torch.Generator().manual_seed(seed)
        cols["ref"] = Column("ref", torch_reference.accept, [(t, d, tk, g_ref) for tk in toks],
                             prepare=lambda g=g_ref: g.manual_seed(seed))
        cols["floor"] = Column("floor", torch.sum, [(buf[: accept_rows_read(n, k)],) for n in outs],
                               fixed=mixed)
        rows = statistics.fmean(accept_rows_read(n, k) for n in outs)
        extra = {}
        if mixed:
            extra = {"rounds": len(toks), "law": law.tolist(),
                     "analytic_mean_accepted": float(sum(i * x for i, x in enumerate(law.tolist()))),
                     "replayed_mean_accepted": statistics.fmean(outs)}
        cases.append(Case("accept", v, k, label, rows, cols, extra))
    return cases


def fixed_cost_case(sv, paths, seed):
    """V = 64: the time is all per-call cost. Also splits it (wrapper, dispatch, draw)."""
    k, v = SMALL_K, SMALL_V
    mem, target, draft = rows_buffer(k, v, seed)
    same = mem.clone()
    same[k + 1:] = same[:k]
    t, d = same[: k + 1], same[k + 1:]
    tok = t[:k].argmax(-1)
    cols = {"argmax": Column("argmax", torch.argmax, [(t, -1)])}
    for p in paths:
        force = (lambda p=p: sv._force_isa(p))
        gen = torch.Generator().manual_seed(seed)
        cols[f"verify_greedy:{p}"] = Column(f"verify_greedy:{p}", sv.verify_greedy, [(t, tok)], prepare=force)
        cols[f"accept:{p}"] = Column(f"accept:{p}", sv.accept, [(t, d, tok, gen)], prepare=force)
    # The breakdown, on the default path: the same ops without the Python wrapper (through
    # the OpOverload, and through its builtin as the wrapper calls it in eager mode), with
    # their uniforms given (the ops draw nothing: the wrapper draws them, spec_verify/_uniforms.py),
    # the draw alone, the generator snapshot a call takes to put the generator back if it
    # raises, and the cheapest call into this extension's op namespace (dispatch from Python).
    ops = sv.ops
    gen = torch.Generator().manual_seed(seed)
    u = torch.rand(k + 1, dtype=torch.float64, generator=torch.Generator().manual_seed(seed))
    default = lambda: sv._force_isa("")  # noqa: E731
    builtin = ops.accept.default._op  # the op without OpOverload's Python frame
    parts = {
        "raw verify_greedy": (ops.verify_greedy, (t, tok), default),
        "raw accept, uniforms given": (ops.accept, (t, d, tok, u, "token"), default),
        "builtin accept, uniforms given": (builtin, (t, d, tok, u, "token"), default),
        "generator get_state()": (lambda g: g.get_state(), (gen,), None),
        "torch.rand(K+1) float64": (lambda n, g: torch.rand(n, dtype=torch.float64, generator=g),
                                    (k + 1, gen), None),
        "op isa() (dispatch only)": (ops.isa, (), None),
    }
    # The wrapper's private helpers, timed alone; skipped if the wrapper no longer has them.
    api = getattr(sv, "_api", None)
    if hasattr(api, "_token_tensor"):
        parts["wrapper _token_tensor (list)"] = (
            lambda x: api._token_tensor(x, "draft_tokens"), (tok.tolist(),), None)
    if hasattr(api, "_check_on_cpu"):
        parts["wrapper _check_on_cpu (3 tensors)"] = (
            lambda a, b, c: api._check_on_cpu("accept", target_probs=a, draft_probs=b, draft_tokens=c),
            (t, d, tok), None)
    cols.update({name: Column(name, fn, [a], prepare=prep) for name, (fn, a, prep) in parts.items()})
    return cols


def pipeline_cases(sv, v: int, k: int, seed: int):
    """A whole sampled round from logits, and one sampled row, against transformers' way.

    The round: K calls of sample (one draft row each, as a draft model produces them) and
    one accept_logits; the draft's logits equal the target's first K rows (separate
    memory), so every draft token is accepted and the round reads all 2K+1 rows, like the
    floor. The reference: transformers' warpers + softmax + torch.multinomial for each
    draft row, then warpers + softmax of the K+1 target rows and `accept` on them
    (torch_reference.hf_sampled_round). The floor: one torch.sum over the 2K+1 rows. "exp":
    PyTorch's own vectorised exp (into a buffer) over the K+1 rows the round draws a token
    from (the K draft rows and the target's last), a neutral measure of what one exp of each
    value a draw must weigh costs here, beside the floor.
    """
    g = torch.Generator().manual_seed(seed)
    mem = torch.empty(2 * k + 1, v)
    mem[: k + 1] = torch.randn(k + 1, v, generator=g) * 3
    mem[k + 1:] = mem[:k]
    target, draft = mem[: k + 1], mem[k + 1:]
    cases = []
    for label, temperature, top_p, min_p in (
            ("round, T 0.8, top-p 0.9", 0.8, 0.9, 0.0),
            ("round, T 0.8", 0.8, 1.0, 0.0),
            ("round, T 0.8, min-p 0.05", 0.8, 1.0, 0.05)):
        warpers = torch_reference.hf_warpers(temperature, top_p, min_p)
        gen_op, gen_ref = torch.Generator().manual_seed(seed), torch.Generator().manual_seed(seed)

        def ours(t=temperature, p=top_p, mp=min_p, gen=gen_op):
            tokens = [int(sv.sample(draft[i], temperature=t, top_p=p, min_p=mp, generator=gen)) for i in range(k)]
            return sv.accept_logits(target, draft, tokens, temperature=t, top_p=p, min_p=mp, generator=gen)

        def hf(w=warpers, gen=gen_ref):
            return torch_reference.hf_sampled_round(target, draft, w, sv.accept, gen)

        if ours()[0] != k or hf()[0] != k:
            raise RuntimeError(f"{label}: equal draft and target rows should accept every draft token")
        drawn_rows, exp_out = mem[k:], torch.empty(k + 1, v)
        cols = {"ours": Column("ours", ours, [()]), "ref": Column("ref", hf, [()]),
                "floor": Column("floor", torch.sum, [(mem,)]),
                "exp": Column("exp", lambda x=drawn_rows, o=exp_out: torch.exp(x, out=o), [()])}
        cases.append(Case("pipeline", v, k, label, 2 * k + 1, cols,
                          {"temperature": temperature, "top_p": top_p, "min_p": min_p}))
    row = target[0]
    for label, top_p in (("sample one row, T 0.8, top-p 0.9", 0.9), ("sample one row, T 0.8", 1.0)):
        warpers = torch_reference.hf_warpers(0.8, top_p)
        gen_op, gen_ref = torch.Generator().manual_seed(seed), torch.Generator().manual_seed(seed)
        cols = {"ours": Column("ours", lambda p=top_p, g=gen_op: sv.sample(row, temperature=0.8, top_p=p, generator=g),
                               [()]),
                "ref": Column("ref", lambda w=warpers, g=gen_ref: torch_reference.hf_sample(row, w, g), [()]),
                "floor": Column("floor", torch.sum, [(row,)]),
                "exp": Column("exp", lambda o=torch.empty(v): torch.exp(row, out=o), [()])}
        cases.append(Case("pipeline", v, k, label, 1, cols, {"temperature": 0.8, "top_p": top_p}))
    return cases


def one_hot_cases(sv, v: int, k: int, seed: int):
    """accept with draft_probs None (one-hot drafts) against the PyTorch way (one-hot draft
    rows built with scatter, then torch_reference.accept) and one read pass over the target
    rows the op must read: n+1 rows when rejected at n (the correction needs no second pass),
    K+1 when every token is accepted."""
    mem, target, _ = rows_buffer(k, v, seed)
    tokens = target[:k].argmax(-1)
    # All accepted: t_i holds nearly all of row i's mass (accepted unless u_i > 1 - 1e-9).
    acc = mem.clone()
    acc[torch.arange(k), tokens] = 1e9
    # Rejected at 0: p_0(t_0) = 0.
    rej = mem.clone()
    rej[0, tokens[0]] = 0.0
    cases = []
    for label, buf, want, rows in (("all accepted", acc, k, k + 1), ("rejected at position 0", rej, 0, 1)):
        t = buf[: k + 1]
        gen_op, gen_ref = torch.Generator().manual_seed(seed), torch.Generator().manual_seed(seed)
        if sv.accept(t, None, tokens, gen_op)[0] != want:
            raise RuntimeError(f"one-hot {label}: built for {want} accepted")

        def ref(t=t, gen=gen_ref):
            one_hot = torch.zeros(k, v).scatter_(1, tokens[:, None], 1.0)
            return torch_reference.accept(t, one_hot, tokens, gen)

        cols = {"ours": Column("ours", sv.accept, [(t, None, tokens, gen_op)],
                               prepare=lambda g=gen_op: g.manual_seed(seed)),
                "ref": Column("ref", ref, [()], prepare=lambda g=gen_ref: g.manual_seed(seed)),
                "floor": Column("floor", torch.sum, [(buf[:rows],)])}
        cases.append(Case("accept one-hot", v, k, label, rows, cols))
    return cases


def block_cases(sv, v: int, k: int, seed: int, rounds: int = 40):
    """Block verification against token-wise accept on the same rounds (an imperfect draft,
    tokens drawn from it, uniforms replayed from one seed), with the floor one read pass over
    all 2K+1 rows (block reads every row; token-wise stops at its decision). Also the mean
    accepted per round of both over 2000 rounds of the same inputs, and token-wise's
    analytic value."""
    mem, target, draft = rows_buffer(k, v, seed)
    g = torch.Generator().manual_seed(seed + 7)
    toks = [torch.multinomial(draft, 1, generator=g)[:, 0].contiguous() for _ in range(rounds)]
    gens = {m: torch.Generator().manual_seed(seed) for m in ("token", "block")}
    cols = {}
    for m, gen in gens.items():
        cols[m] = Column(m, lambda t, d, tk, gen, m=m: sv.accept(t, d, tk, gen, method=m),
                         [(target, draft, tk, gen) for tk in toks],
                         prepare=lambda gen=gen: gen.manual_seed(seed), fixed=True)
    cols["floor"] = Column("floor", torch.sum, [(mem,)] * rounds, fixed=True)
    means = {}
    for m in ("token", "block"):
        gm = torch.Generator().manual_seed(seed + 11)
        n = [sv.accept(target, draft, torch.multinomial(draft, 1, generator=gm)[:, 0].contiguous(), gm,
                       method=m)[0] for _ in range(2000)]
        means[m] = statistics.fmean(n)
    law = analytic_law(target, draft)
    extra = {"mean_accepted_token": means["token"], "mean_accepted_block": means["block"],
             "analytic_mean_accepted_token": float(sum(i * x for i, x in enumerate(law.tolist())))}
    return Case("accept block vs token", v, k, "imperfect draft", 2 * k + 1, cols, extra)


def tree_shape(n_nodes: int, width: int, depth: int):
    """parents of a tree with a spine of `depth` levels, `width` children per spine node (the
    spine continues through the last), padded with single-child chains under the first
    non-spine child to n_nodes; and the spine's nodes."""
    parents, spine, node = [], [], -1
    for _ in range(depth):
        kids = list(range(len(parents), len(parents) + width))
        parents += [node] * width
        spine.append(kids[-1])
        node = kids[-1]
    tail = 0  # chains under node 0 (never on the spine when width > 1)
    while len(parents) < n_nodes:
        parents.append(tail)
        tail = len(parents) - 1
    return parents, spine


def tree_cases(sv, v: int, seed: int):
    """verify_tree_probs_with_uniforms on probability rows with draft rows, built so that at
    every spine level the siblings before the spine child are rejected and the spine child
    is accepted: width * depth children tried, depth + 1 nodes expanded. Three kinds of
    rejected sibling: a token the target gives probability 0 (the nodes' uniforms 0: accept
    iff r(t) > 0; such a child is rejected at any level whatever the masses); a token the
    target keeps (p(t) > 0) that the draft proposes ten times its largest value, rejected by
    uniforms of 0.5 (the residual then drops it: r(t) = 0 after the first rejection); and,
    in the width-4 trees, the second sibling a token the first residual keeps
    (p(t) / P = 1.2 q(t) / Q, so r_1(t) = 0.2 q(t) / Q > 0), rejected by a uniform of 0.999:
    deciding it needs the first residual's mass; that kind also on rows renormalised to
    mass 1 after the edits, as a softmax gives them. The floor: one
    torch.sum over the 2 * depth + 1 rows read (target and draft of each expanded node, the
    leaf's target). The reference: the same rules in PyTorch."""
    cases = []
    shapes_kinds = [(shape, kind) for shape in ((8, 2, 4), (32, 4, 4))
                    for kind in ("p0", "kept", "residual", "residual, mass 1")
                    if not kind.startswith("residual") or shape[1] >= 3]
    for (n_nodes, width, depth), kind in shapes_kinds:
        parents, spine = tree_shape(n_nodes, width, depth)
        g = torch.Generator().manual_seed(seed)
        mem = torch.empty(2 * (n_nodes + 1), v)
        mem[: n_nodes + 1] = torch.softmax(torch.randn(n_nodes + 1, v, generator=g) * 3, -1)
        mem[n_nodes + 1:] = torch.softmax(torch.randn(n_nodes + 1, v, generator=g) * 3, -1)
        target, draft = mem[: n_nodes + 1], mem[n_nodes + 1:]
        tokens = torch.randint(0, v, (n_nodes,), generator=g)
        u = torch.full((n_nodes + 1,), 0.0 if kind == "p0" else 0.5, dtype=torch.float64)
        node = -1
        for level in range(depth):
            kids = [j for j, p in enumerate(parents) if p == node]
            for i, c in enumerate(kids[:-1]):
                if kind == "p0":
                    target[node + 1, tokens[c]] = 0.0  # rejected
                elif not kind.startswith("residual") or i != 1:
                    draft[node + 1, tokens[c]] = draft[node + 1].max() * 10  # rejected with u = 0.5
            # The spine child keeps residual mass through every rejection before it.
            target[node + 1, tokens[kids[-1]]] = target[node + 1].max()
            draft[node + 1, tokens[kids[-1]]] *= 1e-3
            if kind.startswith("residual"):  # last, on the rows' final masses: r_1(t) > 0
                p, q, t = target[node + 1], draft[node + 1], tokens[kids[1]]
                if kind.endswith("mass 1"):  # renormalised, as a softmax gives them
                    p /= p.sum()
                    q /= q.sum()
                q[t] = (q.sum() - q[t]) / (1.2 * p.sum() / p[t] - 1.0)  # q(t) / Q = p(t) / (1.2 P)
                if kind.endswith("mass 1"):
                    q /= q.sum()
                u[kids[1]] = 0.999
            node = spine[level]
        path, _ = sv.verify_tree_probs_with_uniforms(target, tokens, parents, draft, u)
        if path.tolist() != spine:
            raise RuntimeError(f"tree case: path {path.tolist()}, built for {spine}")
        ref_path, _ = torch_reference.verify_tree(target, tokens, parents, draft, u)
        if ref_path != spine:
            raise RuntimeError(f"tree reference: path {ref_path}, built for {spine}")
        # The rows read, contiguous for the floor: expanded nodes' target and draft rows.
        expanded = [0] + [c + 1 for c in spine]
        floor_rows = torch.cat([target[expanded], draft[expanded[:-1]]])
        # The leaf's draw at 16 uniforms across [0, 1), cycled (the same path each time): its
        # cost depends on where the draw falls.
        us = [torch.cat([u[:-1], torch.tensor([(i + 0.5) / 16], dtype=torch.float64)]) for i in range(16)]
        cols = {"ours": Column("ours", sv.verify_tree_probs_with_uniforms,
                               [(target, tokens, parents, draft, uu) for uu in us]),
                "ref": Column("ref", torch_reference.verify_tree, [(target, tokens, parents, draft, uu) for uu in us]),
                "floor": Column("floor", torch.sum, [(floor_rows,)])}
        rejected = {"p0": "p(t) = 0", "kept": "p(t) > 0", "residual": "p(t) > 0, the second with r(t) > 0",
                    "residual, mass 1": "p(t) > 0, the second with r(t) > 0, rows of mass 1"}[kind]
        label = f"{n_nodes} nodes, width {width}, rejected {rejected}"
        cases.append(Case("tree", v, depth, label, 2 * depth + 1, cols,
                          {"nodes": n_nodes, "width": width, "tried": width * depth}))
        if kind in ("p0", "residual"):
            cases.append(logits_tree_case(sv, v, depth, label, target, tokens, parents, draft, us, floor_rows, spine,
                                          {"nodes": n_nodes, "width": width, "tried": width * depth}))
    return cases


def logits_tree_case(sv, v, depth, label, target, tokens, parents, draft, us, floor_rows, spine, extra):
    """The same tree on logits at temperature 0.8 (0.8 log of the rows: the warped rows are
    the probability rows up to rounding), verify_tree_with_uniforms against the PyTorch way
    (softmax of every row at the temperature, then the same rules) and one read pass; the
    uniforms `us` cycled."""
    tl, dl = target.log() * 0.8, draft.log() * 0.8
    for u in us:
        path, _ = sv.verify_tree_with_uniforms(tl, tokens, parents, dl, u, temperature=0.8)
        if path.tolist() != spine:
            raise RuntimeError(f"logits tree case: path {path.tolist()}, built for {spine}")

    def ref(u):
        return torch_reference.verify_tree(torch.softmax(tl / 0.8, -1), tokens, parents,
                                           torch.softmax(dl / 0.8, -1), u)

    cols = {"ours": Column("ours", lambda u: sv.verify_tree_with_uniforms(tl, tokens, parents, dl, u, temperature=0.8),
                           [(u,) for u in us]),
            "ref": Column("ref", ref, [(u,) for u in us]),
            "floor": Column("floor", torch.sum, [(floor_rows,)])}
    return Case("tree", v, depth, f"{label}, logits T 0.8", 2 * depth + 1, cols, extra)


def half_cases(sv, v: int, k: int, seed: int):
    """verify_greedy (every draft matches: K+1 rows) and accept (every token accepted) on
    bfloat16 and float16 rows against the same calls on float32 rows, and against
    `rows.float()` alone (the conversion a user would otherwise pay first)."""
    mem, target, draft = rows_buffer(k, v, seed)
    same = mem.clone()
    same[k + 1:] = same[:k]
    t32, d32 = same[: k + 1], same[k + 1:]
    tokens = t32[:k].argmax(-1)
    cases = []
    for dtype in (torch.bfloat16, torch.float16):
        t16, d16 = t32.to(dtype), d32.to(dtype)
        if sv.verify_greedy(t16, tokens)[0] != k:
            raise RuntimeError("half rows: every draft token should match")
        gens = {name: torch.Generator().manual_seed(seed) for name in ("acc32", "acc16")}
        cols = {"greedy32": Column("greedy32", sv.verify_greedy, [(t32, tokens)]),
                "greedy16": Column("greedy16", sv.verify_greedy, [(t16, tokens)]),
                "acc32": Column("acc32", sv.accept, [(t32, d32, tokens, gens["acc32"])]),
                "acc16": Column("acc16", sv.accept, [(t16, d16, tokens, gens["acc16"])]),
                "convert": Column("convert", lambda t=t16: t.float(), [()])}
        cases.append(Case("half rows", v, k, str(dtype).replace("torch.", ""), k + 1, cols))
    return cases
