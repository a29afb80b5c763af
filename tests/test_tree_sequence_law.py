"""Whole generated sequences through the decoder's tree mode have the target's law.

The pattern of test_sequence_law.py, with trees. Models: ToyLM pairs over 3 or 4 tokens
(tests/toy_models.py), so the law of every sequence of MAX_NEW = 4 new tokens is computed
exactly (sequence_law) and every sequence counted. Two drafters: deterministic children
(the widths[d] most probable tokens of the draft's row at each node: distinct siblings, no
draft rows) and children drawn independently from the draft's row at their parent (with
the draft rows; siblings often repeat over 3 tokens).
Null hypothesis: the GENERATIONS sequences generated from one prompt are a multinomial
sample from the target's autoregressive law (with a stop token: sequences end at the first
stop token or after MAX_NEW tokens).
Test: tests/law.py's G-test (cells expecting fewer than 5 pooled). Threshold: p < P_MIN =
1e-8 fails; with the 9 cases here a correct decoder fails a run with probability < 1e-7.
Seeds are fixed, so a run is repeatable.
A ninth case drafts with PromptLookupTree (trees of varying shape).
Power: the same test must reject (p < P_MIN) tree verifiers that forget the residual:
deterministic children tried against the whole row (rejected siblings' tokens kept in r),
drawn children accepted with min(1, p / q) and the emitted token drawn from p.
"""
from __future__ import annotations

import pytest
import torch

from law import g_test
from toy_models import ToyLM, sampling_tree_draft, sequence_law, target_tree_rows, topk_tree_draft

pytestmark = pytest.mark.slow  # 12000 generations per case: a few seconds each

GENERATIONS = 12_000
MAX_NEW = 4
P_MIN = 1e-8
PROMPT = [1, 0]


def pair(vocab: int, seed: int):
    target = ToyLM(vocab, seed=seed, sharpness=1.0)
    draft = ToyLM(vocab, seed=seed + 100, base=target, noise=1.2)
    return target, draft


def sample_counts(sv, vocab, widths, drawn, seed, stop=None, verifier=None, logits=False, prompt=PROMPT,
                  drafter=None):
    target, draft = pair(vocab, seed)
    law = sequence_law(target, prompt, MAX_NEW, stop)
    cells = {seq: i for i, seq in enumerate(sorted(law))}
    g = torch.Generator().manual_seed(seed)
    if drafter is None:
        drafter = sampling_tree_draft(draft, widths, g) if drawn else topk_tree_draft(draft, widths)
    if logits:  # temperature 1: the warped logits rows are the probability rows
        dec = sv.TreeDecoder.from_logits(drafter, target_tree_rows(target, logits=True),
                                         temperature=1.0, generator=g, verifier=verifier)
    else:
        dec = sv.TreeDecoder(drafter, target_tree_rows(target), greedy=False, generator=g,
                             verifier=verifier)
    counts = torch.zeros(len(cells), dtype=torch.float64)
    accepted = rounds = 0
    for _ in range(GENERATIONS):
        out = dec.generate(prompt, max_new=MAX_NEW, eos_token_id=stop)
        counts[cells[tuple(out[len(prompt):])]] += 1  # KeyError: an impossible sequence
        accepted += dec.stats.accepted
        rounds += dec.stats.rounds
    expected = torch.tensor([law[seq] for seq in sorted(law)], dtype=torch.float64)
    return counts, expected, accepted / rounds


def forgetting_verifier(target_rows, draft_rows, tokens, parents, generator):
    """Tree verification without residual updates, in float64 Python, N+1 uniforms."""
    p = target_rows.double() / target_rows.double().sum(-1, keepdim=True)
    q = None if draft_rows is None else draft_rows.double() / draft_rows.double().sum(-1, keepdim=True)
    toks, par = tokens.tolist(), parents.tolist()
    u = torch.rand(len(toks) + 1, dtype=torch.float64, generator=generator)
    node, path = -1, []
    while True:
        r = p[node + 1]
        for c in (j for j, pj in enumerate(par) if pj == node):
            t = toks[c]
            acc = float(r[t]) if q is None else min(1.0, float(r[t]) / float(q[node + 1, t]))
            if float(u[c]) < acc:
                path.append(c)
                node = c
                break
        else:
            x = int(torch.searchsorted(r.cumsum(0), u[-1] * r.sum()).clamp(max=r.numel() - 1))
            return path, x


CASES = [  # (vocab, widths, drawn, seed, stop, logits)
    (3, (2, 1), False, 21, None, False),
    (4, (2, 2), False, 22, None, False),
    (4, (3, 1, 1), False, 23, {3}, False),   # a stop token, often inside an accepted path
    (4, (2, 1), False, 24, None, True),      # TreeDecoder.from_logits, temperature 1
    (3, (2, 2), True, 25, None, False),      # drawn children: repeats among siblings
    (4, (3, 1), True, 26, None, False),
    (4, (2, 2, 2), True, 27, {3}, False),
    (3, (1, 1, 1), True, 28, None, False),   # a chain drawn from the draft
]


@pytest.mark.parametrize("vocab,widths,drawn,seed,stop,logits", CASES,
                         ids=[f"V{c[0]}-{'x'.join(map(str, c[1]))}-{'drawn' if c[2] else 'topk'}"
                              + ("-stop" if c[4] else "") + ("-logits" if c[5] else "") for c in CASES])
def test_tree_generations_follow_the_target_law(sv, vocab, widths, drawn, seed, stop, logits):
    counts, law, accepted = sample_counts(sv, vocab, widths, drawn, seed, stop, logits=logits)
    g, df, p = g_test(counts, law)
    assert 0.3 < accepted, f"{accepted:.2f} nodes accepted per round: the case no longer exercises trees"
    assert p > P_MIN, f"G = {g:.1f}, df = {df}, p = {p:.3g}"


@pytest.mark.parametrize("case", [1, 4], ids=["topk", "drawn"])
def test_a_verifier_forgetting_the_residual_fails_the_same_test(sv, case):
    vocab, widths, drawn, seed, stop, logits = CASES[case]
    counts, law, _ = sample_counts(sv, vocab, widths, drawn, seed, stop, verifier=forgetting_verifier)
    g, df, p = g_test(counts, law)
    assert p < P_MIN, f"a verifier without residual updates passed: G = {g:.1f}, df = {df}, p = {p:.3g}"


def test_prompt_lookup_trees_follow_the_target_law(sv):
    """PromptLookupTree as draft_tree: trees whose shape changes from round to round (merged
    branches, fewer where matches are few), deterministic children. Same null hypothesis,
    sample size and threshold; the prompt repeats itself so that most rounds find matches."""
    prompt = [1, 0, 2, 1, 0, 1, 2, 2, 0, 1, 0]
    lookup = sv.PromptLookupTree(max_ngram=2, min_ngram=1, branches=3, depth=3)
    counts, law, accepted = sample_counts(sv, 3, None, False, 29, prompt=prompt, drafter=lookup)
    g, df, p = g_test(counts, law)
    assert 0.3 < accepted, f"{accepted:.2f} nodes accepted per round"
    assert p > P_MIN, f"G = {g:.1f}, df = {df}, p = {p:.3g}"
