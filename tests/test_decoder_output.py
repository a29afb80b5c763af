"""What SpeculativeDecoder emits over small prefix-dependent toy models (tests/toy_models.py):
plain greedy decoding token for token, exactly max_new tokens, stop tokens, streaming, the
prefixes its callbacks see, rounds of 0..k proposals and one-hot drafts, the verifier hook.
Its statistics are in test_decoder_stats.py, its argument checks in test_decoder_arguments.py."""
from __future__ import annotations

import pytest
import torch

from toy_models import pair, recording, scripted, truncate_at


@pytest.mark.parametrize("k", [0, 1, 4, 7])
def test_greedy_output_equals_plain_greedy_decoding(sv, isa, k):
    target, draft = pair()
    for use_logits in (False, True):
        dec = sv.SpeculativeDecoder(draft.greedy_draft,
                                    lambda prefix, proposed: target.target_rows(prefix, proposed, use_logits),
                                    k=k, greedy=True, schedule="constant")
        for prompt in ([3], [1, 2, 3], [49, 0]):
            assert dec.generate(prompt, max_new=40) == target.greedy_decode(prompt, 40)


def test_max_new_respected_exactly(sv):
    target, draft = pair()
    g = torch.Generator().manual_seed(0)
    for greedy in (True, False):
        dec = sv.SpeculativeDecoder(draft.greedy_draft if greedy else draft.sampling_draft(g),
                                    target.target_rows, k=5, greedy=greedy, generator=g, schedule="constant")
        for max_new in [0, 1, 2, 5, 6, 7, 33]:
            out = dec.generate([4, 2], max_new=max_new)
            assert len(out) == 2 + max_new and out[:2] == [4, 2]


def test_sampling_tokens_in_vocabulary_with_positive_probability(sv):
    target, draft = pair(vocab=30, noise=1.5)
    g = torch.Generator().manual_seed(1)
    dec = sv.SpeculativeDecoder(draft.sampling_draft(g), target.target_rows, k=4, greedy=False, generator=g, schedule="constant")
    out = dec.generate([0], max_new=200)
    for i in range(1, len(out)):
        assert target.probs(out[:i])[out[i]] > 0


# Stop tokens, streaming, K shrinking, the callback contract ---------------------------------

def test_stop_tokens_cut_the_output_even_inside_an_accepted_block(sv):
    target, _ = pair()
    # The target as its own draft: every block is accepted whole, so a stop token emitted
    # in the middle of a block must cut it.
    dec = sv.SpeculativeDecoder(target.greedy_draft, target.target_rows, k=6, schedule="constant")
    prompt = [3, 1]
    free = target.greedy_decode(prompt, 60)
    new = free[len(prompt):]
    inside = next(t for i, t in enumerate(new) if i % 7 not in (0, 6) and t not in new[:i])
    for stops in ([inside], [inside, new[-1]], [new[0]], [new[-1]], [9999]):
        eos = stops[0] if len(stops) == 1 else stops
        out = dec.generate(prompt, max_new=60, eos_token_id=eos)
        assert out == truncate_at(free, len(prompt), set(stops))
        assert dec.stats.new_tokens == len(out) - len(prompt)
        assert dec.stats.stop_reason == ("stop_token" if len(out) < len(free) or free[-1] in stops else "max_new")
    assert dec.stats.acceptance_rate == 1.0
    # A stop token in the prompt does not count.
    assert dec.generate([inside, 2], max_new=10, eos_token_id=inside)[:2] == [inside, 2]


def test_stop_tokens_while_sampling(sv):
    target, draft = pair(vocab=30, noise=1.0)
    g = torch.Generator().manual_seed(5)
    dec = sv.SpeculativeDecoder(draft.sampling_draft(g), target.target_rows, k=4, greedy=False, generator=g, schedule="constant")
    stopped = 0
    for _ in range(30):
        out = dec.generate([0], max_new=40, eos_token_id=(7, 11))
        new = out[1:]
        assert all(t not in (7, 11) for t in new[:-1])
        assert len(new) == 40 or new[-1] in (7, 11)
        stopped += dec.stats.stop_reason == "stop_token"
    assert 0 < stopped < 30


def test_stream_and_callback_deliver_each_round(sv):
    target, draft = pair()
    for greedy in (True, False):
        outs = []
        for form in ("generate", "on_tokens", "stream"):
            g = torch.Generator().manual_seed(3)
            d, t, log = recording(draft, target, greedy, g)
            dec = sv.SpeculativeDecoder(d, t, k=4, greedy=greedy, generator=g, schedule="constant")
            if form == "generate":
                outs.append(dec.generate([5], max_new=37, eos_token_id=13)[1:])
                continue
            chunks = []
            if form == "on_tokens":
                dec.generate([5], max_new=37, eos_token_id=13, on_tokens=chunks.append)
            else:
                it = dec.stream([5], max_new=37, eos_token_id=13)
                assert log == []  # lazy: nothing runs before the first next()
                for c in it:
                    # each chunk arrives as soon as its round is verified
                    assert log[-1][0] == "target" and dec.stats.rounds == len(chunks) + 1
                    chunks.append(c)
            assert all(1 <= len(c) <= 5 for c in chunks) and len(chunks) == dec.stats.rounds
            outs.append(sum(chunks, []))
        assert outs[0] == outs[1] == outs[2]


def test_k_shrinks_so_no_draft_token_is_wasted(sv):
    target, draft = pair()
    for max_new in (1, 2, 5, 9, 23):
        d, t, log = recording(draft, target)
        dec = sv.SpeculativeDecoder(d, t, k=4, schedule="constant")
        prompt = [2, 8]
        dec.generate(prompt, max_new=max_new)
        for kind, prefix, x in log:
            k = x if kind == "draft" else len(x)
            assert len(prefix) + k + 1 <= len(prompt) + max_new  # never beyond max_new
            assert k > 0 or kind == "target"  # draft_step is never asked for 0 tokens
        assert dec.stats.proposed == sum(x for kind, _, x in log if kind == "draft")
    assert sv.SpeculativeDecoder(d, t, k=4, schedule="constant").generate([1], max_new=0) == [1]


@pytest.mark.parametrize("greedy", [True, False])
def test_each_prefix_extends_the_last_verified_prefix(sv, greedy):
    # The contract a KV cache relies on: within a round both callbacks see the same
    # prefix; the next round's prefix is it + the accepted proposals + the emitted token.
    target, draft = pair(noise=1.0)
    g = torch.Generator().manual_seed(2)
    d, t, log = recording(draft, target, greedy, g)
    dec = sv.SpeculativeDecoder(d, t, k=3, greedy=greedy, generator=g, schedule="constant")
    out = dec.generate([4, 4], max_new=50)
    targets = [(prefix, proposed) for kind, prefix, proposed in log if kind == "target"]
    drafts = [prefix for kind, prefix, _ in log if kind == "draft"]
    assert drafts == [p for p, proposed in targets if proposed]
    assert targets[0][0] == [4, 4]
    for (prefix, proposed), (following, _) in zip(targets, targets[1:] + [(out, None)]):
        grown = following[len(prefix):]
        assert following[:len(prefix)] == prefix and 1 <= len(grown) <= len(proposed) + 1
        assert grown[:-1] == proposed[:len(grown) - 1]


# The verifier hook --------------------------------------------------------------------------

def test_default_verifiers_are_the_ops(sv):
    # verifier=None means verify_greedy (greedy=True) or accept (greedy=False): passing
    # them explicitly gives the same output from the same seeds.
    target, draft = pair(noise=1.0)
    greedy_op = lambda rows, probs, tokens, generator: sv.verify_greedy(rows, tokens)  # noqa: E731
    for greedy, explicit in ((True, greedy_op), (False, sv.accept)):
        outs = []
        for verifier in (None, explicit):
            g = torch.Generator().manual_seed(8)
            step = draft.greedy_draft if greedy else draft.sampling_draft(g)
            dec = sv.SpeculativeDecoder(step, target.target_rows, k=3, greedy=greedy, generator=g,
                                        verifier=verifier, schedule="constant")
            outs.append(dec.generate([2], max_new=60))
        assert outs[0] == outs[1]
    assert sv.SpeculativeDecoder(draft.greedy_draft, target.target_rows, greedy=False, schedule="constant").verifier is sv.accept


def test_verifier_receives_the_round(sv):
    target, draft = pair(vocab=12, noise=1.0)
    g = torch.Generator().manual_seed(1)
    for greedy in (True, False):
        calls = []

        def verifier(rows, probs, tokens, generator):
            calls.append((rows, probs, tokens, generator))
            return 0, int(rows[0].argmax())

        step = draft.greedy_draft if greedy else draft.sampling_draft(g)
        dec = sv.SpeculativeDecoder(step, target.target_rows, k=3, greedy=greedy, generator=g, verifier=verifier, schedule="constant")
        dec.generate([5], max_new=4)  # rounds of k = 3, 2, 1, 0
        assert [c[2].tolist() != [] for c in calls] == [True, True, True, False]
        for rows, probs, tokens, generator in calls:
            k = tokens.numel()
            assert rows.shape == (k + 1, 12) and tokens.dtype == torch.int64 and generator is g
            if greedy:
                assert probs is None
            else:
                assert probs.dtype == torch.float32 and probs.shape == (k, 12)  # [0, V] when k = 0


# Drafts of 0..k tokens, one-hot drafts ------------------------------------------------------

def test_rounds_with_0_to_k_proposals(sv):
    target, draft = pair(noise=1.0)
    seen = []

    def target_step(prefix, proposed):
        seen.append(proposed.shape[0])
        assert proposed.dtype == torch.int64 and proposed.is_contiguous()
        return target.target_rows(prefix, proposed)

    counts = [0, 3, 1, 4, 2, 0, 0, 4]
    for use_probs in (False, True):
        step, calls = scripted(draft, counts, with_probs=use_probs)
        seen.clear()
        dec = sv.SpeculativeDecoder(step, target_step, k=4, schedule="constant")
        assert dec.generate([2, 7], max_new=80) == target.greedy_decode([2, 7], 80)
        s = dec.stats
        # target_step got exactly the proposal ([0] included); the last round may have had
        # k = 0 (one token left), when draft_step is not called
        assert seen[:len(calls)] == [j for _, _, j in calls] and seen[len(calls):] in ([], [0])
        assert s.draft_calls == len(calls) and s.rounds == len(seen) == s.target_calls
        assert s.proposed_length_counts == [seen.count(j) for j in range(5)]
        assert s.proposed == sum(seen) and s.new_tokens == 80 == s.accepted + s.rounds
        assert s.proposed_length_counts[0] >= 3 and s.full_acceptance_counts[0] == s.proposed_length_counts[0]
        assert s.decided_by_position[0] == s.rounds - s.proposed_length_counts[0]  # j = 0 decides nothing
    # A draft that never proposes: plain greedy decoding, one target call per token.
    dec = sv.SpeculativeDecoder(lambda prefix, k: ([], None), target.target_rows, k=4, schedule="constant")
    assert dec.generate([2, 7], max_new=30) == target.greedy_decode([2, 7], 30)
    assert dec.stats.rounds == 30 == dec.stats.draft_calls + 1 and dec.stats.proposed == 0  # the last round: k = 0
    assert dec.stats.tokens_per_target_call == 1.0 and dec.stats.acceptance_rate != dec.stats.acceptance_rate


def test_sampled_rounds_with_0_to_k_proposals_and_probs(sv):
    # Sampling with probs: every round is verified by accept on its j proposals; the output
    # tokens have positive target probability, the statistics count what was proposed.
    target, draft = pair(vocab=30, noise=1.0)
    g = torch.Generator().manual_seed(9)
    step, calls = scripted(draft, [2, 0, 4, 1, 3], greedy=False, generator=g)
    dec = sv.SpeculativeDecoder(step, target.target_rows, k=4, greedy=False, generator=g, schedule="constant")
    out = dec.generate([0], max_new=300)
    for i in range(1, len(out)):
        assert target.probs(out[:i])[out[i]] > 0
    s = dec.stats
    assert s.proposed == sum(j for _, _, j in calls) and s.draft_calls == len(calls)
    assert s.proposed_length_counts == [sum(1 for *_, j in calls if j == m) for m in range(5)]
    assert 0 < s.acceptance_rate < 1


def test_verifier_gets_one_hot_drafts_as_none(sv):
    # Sampling with a draft that returns no probs: the verifier gets None (one-hot drafts),
    # or an empty [0, V] when nothing was proposed.
    target, draft = pair(vocab=12)
    got = []

    def verifier(rows, probs, tokens, generator):
        got.append((tokens.numel(), probs if probs is None else tuple(probs.shape)))
        return 0, int(rows[0].argmax())

    step, calls = scripted(draft, [2, 0, 3], with_probs=False)
    dec = sv.SpeculativeDecoder(step, target.target_rows, k=3, greedy=False, verifier=verifier, schedule="constant")
    dec.generate([1], max_new=6)
    assert got == [(2, None), (0, (0, 12)), (3, None), (2, None), (0, (0, 12)), (0, (0, 12))]


# These need the one-hot and block kernels (accept(target, None, ...), method="block").

@pytest.mark.parametrize("method", ["token", "block"])
def test_sampling_with_one_hot_drafts_and_variable_proposals(sv, method):
    target, draft = pair(vocab=30, noise=1.0)
    g = torch.Generator().manual_seed(10)
    for with_probs in (False, True):
        step, calls = scripted(draft, [2, 0, 4, 1, 3], greedy=False, generator=g, with_probs=with_probs)
        dec = sv.SpeculativeDecoder(step, target.target_rows, k=4, greedy=False, generator=g, method=method, schedule="constant")
        out = dec.generate([0], max_new=200)
        for i in range(1, len(out)):
            assert target.probs(out[:i])[out[i]] > 0
        s = dec.stats
        assert s.proposed == sum(j for *_, j in calls) and 0 < s.acceptance_rate < 1
    # from_logits with a token drafter: accept_logits(target, None, tokens) on warped rows.
    logits = lambda p, proposed: target.target_rows(p, proposed, logits=True)  # noqa: E731
    step, calls = scripted(draft, [3, 0, 1], with_probs=False)
    dec = sv.SpeculativeDecoder.from_logits(None, logits, 3, temperature=0.8, top_p=0.9, generator=g,
                                            draft_step=step, method=method, schedule="constant")
    out = dec.generate([4], max_new=100)
    assert len(out) == 101 and 0 < dec.stats.acceptance_rate < 1
