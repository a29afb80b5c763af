"""SpeculativeDecoder.from_logits: the decoder samples the drafts and verifies from logits.

- Greedy (temperature 0) output is identical to plain greedy decoding of the target.
- Whole generated sequences have the law of the target's warped rows (the sequence-law test
  of tests/test_sequence_law.py with temperature, top-k, top-p and min-p).
  Models: ToyLM pairs (tests/toy_models.py) over 4 or 5 tokens, whose logits depend on the
  last two tokens and the position, so the law of every sequence of MAX_NEW tokens is
  computed exactly from the float64 warped rows (tests/warp_reference.py).
  Null hypothesis: the GENERATIONS sequences from one prompt are a multinomial sample from
  the target's warped autoregressive law. Test: tests/law.py's G-test (cells expecting
  fewer than 5 pooled). Threshold: p < P_MIN = 1e-8 fails; with three cases a correct
  decoder fails a run with probability < 1e-7; seeds are fixed, so a run is repeatable.
  Power: the same test must reject (p < P_MIN) a decoder whose drafts come from the draft's
  rows warped with another top-p than the one the verification applies.
"""
from __future__ import annotations

import numpy as np
import pytest
import torch

import warp_reference as ref
from law import g_test
from toy_models import ToyLM, sequence_law

GENERATIONS = 12_000
MAX_NEW = 4
P_MIN = 1e-8
PROMPT = [1, 0]


class WarpedLM:
    """A ToyLM's rows warped by the float64 reference: the law the decoder must follow."""

    def __init__(self, model: ToyLM, temperature, top_k, top_p, min_p):
        self.model, self.params = model, (temperature, top_k, top_p, min_p)
        self.margins = []

    def probs(self, seq):
        probs, _, _, margin = ref.warp_row(self.model.logits(seq), *self.params)
        self.margins.append(margin)
        return probs


def pair(vocab: int, seed: int):
    target = ToyLM(vocab, seed=seed, sharpness=1.0)
    draft = ToyLM(vocab, seed=seed + 100, base=target, noise=1.2)
    return target, draft


def target_logits(target: ToyLM):
    return lambda prefix, proposed: target.target_rows(prefix, proposed, logits=True)


CASES = [  # vocab, k, seed, (temperature, top_k, top_p, min_p)
    (4, 2, 21, (0.9, 0, 0.75, 0.0)),
    (5, 3, 22, (1.3, 4, 0.9, 0.08)),
]


def law_and_counts(sv, vocab, k, seed, params, make_decoder):
    target, draft = pair(vocab, seed)
    warped = WarpedLM(target, *params)
    law = sequence_law(warped, PROMPT, MAX_NEW)
    assert min(warped.margins) > ref.CLEAR, "a cutoff lies within rounding of its boundary: pick another seed"
    cells = {s: i for i, s in enumerate(sorted(law))}
    g = torch.Generator().manual_seed(seed)
    dec = make_decoder(target, draft, k, params, g)
    counts = torch.zeros(len(cells), dtype=torch.float64)
    accepted = proposed = 0
    for _ in range(GENERATIONS):
        out = dec.generate(PROMPT, max_new=MAX_NEW)
        counts[cells[tuple(out[len(PROMPT):])]] += 1  # KeyError: a sequence of probability 0
        accepted += dec.stats.accepted
        proposed += dec.stats.proposed
    expected = torch.tensor([law[s] for s in sorted(law)], dtype=torch.float64)
    return counts, expected, accepted / max(proposed, 1)


def from_logits(sv):
    def make(target, draft, k, params, g):
        temperature, top_k, top_p, min_p = params
        return sv.SpeculativeDecoder.from_logits(draft.logits, target_logits(target), k, temperature=temperature,
                                                 top_k=top_k, top_p=top_p, min_p=min_p, generator=g, schedule="constant")
    return make


def biased(sv):
    """Drafts drawn from the draft's rows warped with top_p = 1 (no cut), verified by
    accept_logits with the case's top_p: the draft's distribution is not the one verified."""
    def make(target, draft, k, params, g):
        temperature, top_k, top_p, min_p = params

        def draft_step(prefix, k):
            seq, rows = list(prefix), []
            for _ in range(k):
                x = draft.logits(seq)
                seq.append(int(sv.sample(x, temperature=temperature, top_k=top_k, top_p=1.0, min_p=min_p,
                                         generator=g)))
                rows.append(x)
            return torch.tensor(seq[len(prefix):]), torch.stack(rows)

        def verifier(rows, draft_rows, tokens, gen):
            return sv.accept_logits(rows, draft_rows, tokens, temperature=temperature, top_k=top_k, top_p=top_p,
                                    min_p=min_p, generator=gen)
        return sv.SpeculativeDecoder(draft_step, target_logits(target), k, greedy=False, generator=g,
                                     verifier=verifier, schedule="constant")
    return make


@pytest.mark.slow
@pytest.mark.parametrize("vocab,k,seed,params", CASES)
def test_sequences_follow_the_warped_target_law(sv, vocab, k, seed, params):
    counts, law, rate = law_and_counts(sv, vocab, k, seed, params, from_logits(sv))
    g, df, p = g_test(counts, law)
    assert 0.3 < rate < 0.95, f"draft acceptance rate {rate:.2f}: the case no longer exercises both outcomes"
    assert p > P_MIN, f"G = {g:.1f}, df = {df}, p = {p:.3g}"


@pytest.mark.slow
def test_drafts_warped_differently_fail_the_same_test(sv):
    vocab, k, seed, params = CASES[0]
    counts, law, _ = law_and_counts(sv, vocab, k, seed, params, biased(sv))
    g, df, p = g_test(counts, law)
    assert p < P_MIN, f"a draft warped with another top_p passed: G = {g:.1f}, df = {df}, p = {p:.3g}"


@pytest.mark.parametrize("k", [0, 1, 3, 6])
def test_greedy_equals_plain_greedy_decoding(sv, k):
    for seed, vocab in ((31, 7), (32, 50)):
        target, draft = pair(vocab, seed)
        dec = sv.SpeculativeDecoder.from_logits(draft.logits, target_logits(target), k, temperature=0, schedule="constant")
        assert dec.greedy and dec.warping._asdict() == {"temperature": 0.0, "top_k": 0, "top_p": 1.0, "min_p": 0.0}
        for prompt in ([1, 0], [3], [2, 2, 1]):
            g = torch.Generator().manual_seed(0)
            state = g.get_state()
            dec.generator = g
            assert dec.generate(prompt, max_new=30) == target.greedy_decode(prompt, 30)
            assert torch.equal(g.get_state(), state), "greedy decoding drew a uniform"
        if k:
            assert 0 < dec.stats.acceptance_rate < 1


def test_draws_and_calls(sv):
    """Each round: k draft_logits_step calls on growing sequences, one uniform per draft
    token (sample), then K+1 (accept_logits); the same seed gives the same output."""
    target, draft = pair(6, 41)
    calls = []

    def draft_logits_step(seq):
        calls.append(list(seq))
        return draft.logits(seq)

    g = torch.Generator().manual_seed(5)
    dec = sv.SpeculativeDecoder.from_logits(draft_logits_step, target_logits(target), 3, temperature=0.8,
                                            top_p=0.9, generator=g, schedule="constant")
    assert repr(dec) == "SpeculativeDecoder.from_logits(k=3, temperature=0.8, top_k=0, top_p=0.9, min_p=0.0, schedule='constant')"
    out = dec.generate([1, 2], max_new=4)
    # max_new = 4 and k = 3: one round of 3 drafts decides 1 to 4 tokens; a second round, if
    # any, proposes fewer.
    assert calls[:3] == [[1, 2], [1, 2] + [calls[1][-1]], calls[2]] and len(calls[2]) == 4
    # Replay the draws by hand: 3 sample uniforms, then 4 accept uniforms, for round 1.
    h = torch.Generator().manual_seed(5)
    seq = [1, 2]
    rows = []
    for _ in range(3):
        x = draft.logits(seq)
        seq.append(int(sv.sample(x, temperature=0.8, top_p=0.9, generator=h)))
        rows.append(x)
    n, x = sv.accept_logits(target.target_rows([1, 2], torch.tensor(seq[2:]), logits=True), torch.stack(rows),
                            seq[2:], temperature=0.8, top_p=0.9, generator=h)
    assert out[2:2 + n + 1] == seq[2:2 + n] + [x]
    g2 = torch.Generator().manual_seed(5)
    dec2 = sv.SpeculativeDecoder.from_logits(draft.logits, target_logits(target), 3, temperature=0.8, top_p=0.9,
                                             generator=g2, schedule="constant")
    assert dec2.generate([1, 2], max_new=4) == out and torch.equal(g.get_state(), g2.get_state())


def test_callback_form_unchanged(sv):
    """The constructor keeps working as before (probabilities, default verifiers)."""
    target, draft = pair(5, 51)
    dec = sv.SpeculativeDecoder(draft.greedy_draft, target.target_rows, k=3, schedule="constant")
    assert dec.warping is None and repr(dec) == "SpeculativeDecoder(k=3, greedy=True, schedule='constant')"
    assert dec.generate([1], max_new=10) == target.greedy_decode([1], 10)


def test_numpy_integers_where_python_ints_go(sv):
    """NumPy integer scalars and arrays, as transformers users pass them (a tokenizer's
    return_tensors="np" ids, generation_config.eos_token_id read into NumPy), give exactly
    what the same Python ints give: greedy and sampled, with stop tokens."""
    target, draft = pair(9, 61)
    free = target.greedy_decode([1, 2], 30)
    stop = free[8]

    def run(k, top_k, prompt, max_new, eos, temperature):
        dec = sv.SpeculativeDecoder.from_logits(draft.logits, target_logits(target), k, temperature=temperature,
                                                top_k=top_k, generator=torch.Generator().manual_seed(7), schedule="constant")
        return dec.generate(prompt, max_new=max_new, eos_token_id=eos)

    for temperature in (0.0, 0.9):
        want = run(3, 5, [1, 2], 30, stop, temperature)
        assert want[-1] == stop and len(want) < 32
        for prompt in (np.array([1, 2]), np.array([[1, 2]], dtype=np.int64), [np.int32(1), np.int64(2)]):
            for eos in (np.int64(stop), np.array([stop]), [np.uint16(stop)], np.array([stop, 9999], dtype=np.int32)):
                got = run(np.int64(3), np.int64(5), prompt, np.int64(30), eos, np.float32(temperature))
                assert got == want, (temperature, prompt, eos)
    assert isinstance(run(np.int64(2), 0, np.array([1, 2]), np.int16(4), None, 0.0)[-1], int)
