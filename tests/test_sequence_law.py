"""Whole generated sequences through SpeculativeDecoder have the target's autoregressive law.

Models: ToyLM pairs (tests/toy_models.py) over a vocabulary of 3 or 4 tokens, whose rows
depend on the last two tokens and the position, so the law of every sequence of 4 new
tokens can be computed exactly (sequence_law) and every such sequence counted.
Null hypothesis: the GENERATIONS sequences generated from one prompt are a multinomial
sample from the target's autoregressive law (with a stop token: sequences end at the first
stop token or after MAX_NEW tokens).
Test: tests/law.py's G-test (cells expecting fewer than 5 pooled). Threshold: a p-value
below P_MIN = 1e-8 fails; with the handful of cases here a correct decoder fails a run with
probability < 1e-7. Seeds are fixed, so a run is repeatable.
Power: the same test must reject (p < P_MIN) two deliberately wrong verifiers: one that
accepts every draft token, one that draws the correction from the target row instead of
the residual.
"""
from __future__ import annotations

import pytest
import torch

from law import g_test
from toy_models import ToyLM, sequence_law

pytestmark = pytest.mark.slow  # 12000 generations per case: about 3 s each

GENERATIONS = 12_000
MAX_NEW = 4
P_MIN = 1e-8
PROMPT = [1, 0]


def pair(vocab: int, seed: int):
    target = ToyLM(vocab, seed=seed, sharpness=1.0)
    # noise 1.2 keeps the draft's acceptance rate around 0.7-0.8: both outcomes are common.
    draft = ToyLM(vocab, seed=seed + 100, base=target, noise=1.2)
    return target, draft


def sample_counts(sv, vocab, k, seed, stop=None, verifier=None):
    target, draft = pair(vocab, seed)
    law = sequence_law(target, PROMPT, MAX_NEW, stop)
    cells = {seq: i for i, seq in enumerate(sorted(law))}
    g = torch.Generator().manual_seed(seed)
    dec = sv.SpeculativeDecoder(draft.sampling_draft(g), target.target_rows, k=k, greedy=False, generator=g,
                                verifier=verifier, schedule="constant")
    counts = torch.zeros(len(cells), dtype=torch.float64)
    accepted = proposed = 0
    for _ in range(GENERATIONS):
        out = dec.generate(PROMPT, max_new=MAX_NEW, eos_token_id=stop)
        counts[cells[tuple(out[len(PROMPT):])]] += 1  # KeyError: an impossible sequence
        accepted += dec.stats.accepted
        proposed += dec.stats.proposed
    expected = torch.tensor([law[seq] for seq in sorted(law)], dtype=torch.float64)
    return counts, expected, accepted / max(proposed, 1)


# Wrong verifiers, plugged in through SpeculativeDecoder's `verifier` argument.

def wrong_always_accept(target_probs, draft_probs, tokens, generator):
    k = tokens.numel()
    return k, int(torch.multinomial(target_probs[k], 1, generator=generator))


def wrong_correction_from_target(target_probs, draft_probs, tokens, generator):
    # The textbook acceptance test, but a rejected token is replaced by a draw from p
    # instead of the residual max(0, p - q): every token is then biased towards q.
    p = target_probs.double() / target_probs.double().sum(-1, keepdim=True)
    q = draft_probs.double() / draft_probs.double().sum(-1, keepdim=True)
    u = torch.rand(tokens.numel(), dtype=torch.float64, generator=generator)
    for i, t in enumerate(tokens.tolist()):
        if u[i] * q[i, t] >= p[i, t]:
            return i, int(torch.multinomial(p[i], 1, generator=generator))
    return tokens.numel(), int(torch.multinomial(p[-1], 1, generator=generator))


def python_block_verifier(h_is_rho: bool):
    """Block verification in float64 Python (DESIGN.md, "Block verification"); with
    h_is_rho, the wrong h_n = rho_n (the residual mass Z_n ignored) for n < K."""
    def verify(target_probs, draft_probs, tokens, generator):
        p = target_probs.double() / target_probs.double().sum(-1, keepdim=True)
        q = draft_probs.double() / draft_probs.double().sum(-1, keepdim=True)
        k = tokens.numel()
        u = torch.rand(k + 1, dtype=torch.float64, generator=generator)
        t = tokens.tolist()
        rho = [1.0]
        for n in range(1, k + 1):
            rho.append(min(1.0, rho[-1] * float(p[n - 1, t[n - 1]]) / float(q[n - 1, t[n - 1]])))
        tau = 0
        for n in range(1, k + 1):
            if n < k:
                z = float((rho[n] * p[n] - q[n]).clamp(min=0).sum())
                h = rho[n] if h_is_rho else (z / (z + 1 - rho[n]) if z + 1 - rho[n] > 0 else 1.0)
            else:
                h = rho[k]
            if u[n - 1] < h:
                tau = n
        row = p[k] if tau == k else (rho[tau] * p[tau] - q[tau]).clamp(min=0)
        if float(row.sum()) <= 0:  # a wrong h can stop where the residual is empty
            row = p[tau]
        return tau, int(torch.multinomial(row, 1, generator=generator))
    return verify


def block(sv, one_hot: bool):
    """The kernel's block verification through the decoder's verifier hook (one_hot: the
    draft's probabilities withheld, so its sampled tokens are verified as one-hot drafts)."""
    return lambda t, q, tokens, g: sv.accept(t, None if one_hot else q, tokens, g, method="block")


def one_hot_token(sv):
    return lambda t, q, tokens, g: sv.accept(t, None, tokens, g)


CASES = [  # (vocab, k, seed, stop tokens)
    (3, 1, 11, None),
    (3, 3, 12, None),
    (3, 6, 13, None),   # k > MAX_NEW: K shrinks every generation
    (4, 2, 14, {3}),    # a stop token, often inside an accepted block
]


@pytest.mark.parametrize("vocab,k,seed,stop", CASES)
def test_generated_sequences_follow_the_target_law(sv, vocab, k, seed, stop):
    counts, law, rate = sample_counts(sv, vocab, k, seed, stop)
    g, df, p = g_test(counts, law)
    assert 0.3 < rate < 0.95, f"draft acceptance rate {rate:.2f}: the case no longer exercises both outcomes"
    assert p > P_MIN, f"G = {g:.1f}, df = {df}, p = {p:.3g}"


@pytest.mark.parametrize("wrong", [wrong_always_accept, wrong_correction_from_target])
def test_a_wrong_verifier_fails_the_same_test(sv, wrong):
    vocab, k, seed, stop = CASES[1]
    counts, law, _ = sample_counts(sv, vocab, k, seed, stop, verifier=wrong)
    g, df, p = g_test(counts, law)
    assert p < P_MIN, f"a wrong verifier passed: G = {g:.1f}, df = {df}, p = {p:.3g}"


# Block verification and one-hot drafts: the same law, whole sequences. (The draft still
# samples its tokens from its rows; with them withheld, the tokens are verified as one-hot
# drafts, which is exact for proposals from any source.)
MODES = [("block", 1, False), ("block", 3, False), ("block", 6, False), ("block", 3, True), ("token", 3, True)]


@pytest.mark.parametrize("method,k,one_hot", MODES,
                         ids=[f"{m}-k{k}" + ("-one-hot" if o else "") for m, k, o in MODES])
def test_block_and_one_hot_sequences_follow_the_target_law(sv, method, k, one_hot):
    vocab, _, seed, stop = CASES[1]
    verifier = block(sv, one_hot) if method == "block" else one_hot_token(sv)
    counts, law, rate = sample_counts(sv, vocab, k, seed, stop, verifier=verifier)
    g, df, p = g_test(counts, law)
    assert 0.1 < rate < 0.95, f"acceptance rate {rate:.2f}: the case no longer exercises both outcomes"
    assert p > P_MIN, f"G = {g:.1f}, df = {df}, p = {p:.3g}"


@pytest.mark.parametrize("h_is_rho", [False, True], ids=["reference", "wrong-h"])
def test_python_block_verifier_passes_only_with_the_right_h(sv, h_is_rho):
    """Calibration and power: the float64 Python block verifier passes the sequence-law test,
    and the same verifier with h_n = rho_n (instead of Z_n / (Z_n + 1 - rho_n)) fails it."""
    vocab, k, seed, stop = CASES[1]
    counts, law, _ = sample_counts(sv, vocab, k, seed, stop, verifier=python_block_verifier(h_is_rho))
    g, df, p = g_test(counts, law)
    if h_is_rho:
        assert p < P_MIN, f"a block verifier with h = rho passed: G = {g:.1f}, df = {df}, p = {p:.3g}"
    else:
        assert p > P_MIN, f"the reference block verifier failed: G = {g:.1f}, df = {df}, p = {p:.3g}"
