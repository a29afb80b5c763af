"""spec_verify.llama_cpp against a real llama.cpp (llama-cpp-python), on tests/tiny_gguf.py's
pair of tiny Llama GGUF models (random weights from a fixed seed; the draft is the target
with 6% weight noise). Everything is deterministic: fixed weights, prompts and seeds, one
thread per model.

Numerics. llama.cpp's logits for a block of tokens differ from one-token-at-a-time decoding
in the last bits (other matrix kernels, other summation orders; the KV cache's type on top).
test_block_and_single_token_logits_differ_only_in_the_last_bits measures the difference
on these models; the greedy tests allow a divergence from llama.cpp's own greedy decoding
only at a position whose two best logits are closer than TIE, a bound above that measured
difference, and count such positions (none, at the time of writing, with the f32 cache that
these tests use).
"""
from __future__ import annotations

import ctypes
import os

import numpy as np
import pytest
import torch


def require_llama_cpp():
    """Imports llama_cpp and gguf: an error under `make llama` (SPEC_VERIFY_REQUIRE_LLAMA=1),
    else a module-level skip that says how to run these tests."""
    if os.environ.get("SPEC_VERIFY_REQUIRE_LLAMA") == "1":
        try:
            import gguf  # noqa: F401
            import llama_cpp  # noqa: F401
        except ImportError as e:
            raise RuntimeError(f"the llama.cpp tests need llama_cpp and gguf, which did not import ({e}); "
                               f"`make llama` installs them (scripts/llama_env.sh)") from e
    for name in ("llama_cpp", "gguf"):
        pytest.importorskip(name, reason=f"{name} is not importable: `make llama` installs llama-cpp-python "
                                         f"and gguf and runs these tests")


require_llama_cpp()

import llama_cpp  # noqa: E402
from llama_cpp import Llama  # noqa: E402

import tiny_gguf  # noqa: E402
from law import g_test  # noqa: E402
from warp_reference import warp as warp_reference  # noqa: E402

F32, F16 = llama_cpp.GGML_TYPE_F32, llama_cpp.GGML_TYPE_F16
# Two best logits closer than this are a near-tie, which block and single-token evaluation
# may order differently: above the largest block-vs-single difference measured here with
# the f32 cache (test_block_and_single_token_logits_differ_only_in_the_last_bits asserts
# that bound).
TIE = 1e-4
PROMPTS = [b"the time of day", b"we can make a long way", b"one two three four", b"water is",
           b"there were many people and"]


def load(path, cache=F32, **kw):
    args = dict(model_path=str(path), n_ctx=512, n_batch=512, n_threads=1, n_threads_batch=1,
                logits_all=True, verbose=False, type_k=cache, type_v=cache)
    args.update(kw)
    return Llama(**args)


@pytest.fixture(scope="module")
def models(gguf_pair):
    """(draft, target, reference): the reference is a second target for llama.cpp's own runs
    (with logits_all=True, for its Llama.scores); the decoder's models are made as plain
    decoding makes them."""
    target_path, draft_path = gguf_pair
    return load(draft_path, logits_all=False), load(target_path, logits_all=False), load(target_path)


def prompts(llm):
    return [llm.tokenize(p) for p in PROMPTS]


def llama_greedy(ref, prompt, max_new):
    """llama.cpp's own greedy decoding (Llama.generate at temperature 0, one token per
    evaluation after the prompt): prompt + new tokens, and the gap between the two best
    logits at each new position."""
    ref.reset()
    out = []
    for t in ref.generate(prompt, temp=0.0, repeat_penalty=1.0, reset=True):
        out.append(int(t))
        if len(out) == max_new:
            break
    rows = np.array(ref.scores[len(prompt) - 1:len(prompt) - 1 + max_new])
    top2 = np.sort(rows, axis=1)[:, -2:]
    assert (rows.argmax(1) == np.array(out)).all()  # generate's greedy is the argmax of scores
    return list(prompt) + out, top2[:, 1] - top2[:, 0]


def agree_or_near_tie(got, expect, gaps, start, tie=TIE):
    """True if equal; else the first difference must be at a near-tie (returns its gap)."""
    if got == expect:
        return True, None
    i = next(i for i, (a, b) in enumerate(zip(got, expect)) if a != b)
    assert i >= start, "the prompt differs"
    gap = float(gaps[i - start])
    assert gap < tie, (f"diverged from llama.cpp's greedy decoding at new token {i - start} "
                       f"({got[i]} vs {expect[i]}) where the two best logits are {gap:.3g} apart, not a near-tie")
    return False, gap


# Numerics -----------------------------------------------------------------------------------

def block_vs_single(path, cache, k=4, length=120, seed=0):
    """Max |logit difference| between evaluating a random sequence one token at a time and
    in blocks of k+1 (the target's rounds)."""
    ids = np.random.default_rng(seed).integers(3 + 256, tiny_gguf.VOCAB, length).tolist()
    ids[0] = tiny_gguf.BOS
    one, block = load(path, cache), load(path, cache)
    for t in ids:
        one.eval([t])
    for i in range(0, length, k + 1):
        block.eval(ids[i:i + k + 1])
    return float(np.abs(one.scores[:length] - block.scores[:length]).max())


def test_block_and_single_token_logits_differ_only_in_the_last_bits(gguf_pair):
    target_path, _ = gguf_pair
    f32 = block_vs_single(target_path, F32)
    f16 = block_vs_single(target_path, F16)
    print(f"\nmax |block - single-token| logit difference: f32 KV cache {f32:.3g}, f16 KV cache {f16:.3g}")
    assert f32 < TIE / 10  # TIE keeps a factor of 10 over what the f32 cache gives
    assert f16 < 1e-2


# Greedy ------------------------------------------------------------------------------------

@pytest.mark.parametrize("k", [1, 3, 5])
def test_greedy_equals_llama_cpp_greedy_generation(sv, models, k):
    draft, target, ref = models
    dec = sv.llama_cpp.speculative_decoder(draft, target, k=k, temperature=0, schedule="constant")
    near_ties, calls, new = [], 0, 0
    for prompt in prompts(target):
        expect, gaps = llama_greedy(ref, prompt, 40)
        got = dec.generate(prompt, max_new=40)
        same, gap = agree_or_near_tie(got, expect, gaps, len(prompt))
        if not same:
            near_ties.append(gap)
        calls += dec.stats.target_calls
        new += dec.stats.new_tokens
        # With stop tokens: the 8th new token of the reference and one absent from it.
        stop = expect[len(prompt) + 7]
        cut = expect[:expect.index(stop, len(prompt)) + 1]
        got = dec.generate(prompt, max_new=40, eos_token_id=[stop, tiny_gguf.EOS])
        if same:
            assert got == cut
            assert dec.stats.stop_reason == "stop_token"
    print(f"\nk = {k}: {new / calls:.2f} tokens per target call; near-tie divergences {len(near_ties)} of "
          f"{len(PROMPTS)} prompts {near_ties}")
    assert len(near_ties) <= 1
    if k >= 3:
        assert new / calls > 1.5  # the draft is the target with 6% noise: most drafts are accepted


def test_greedy_with_llama_cpps_default_f16_cache(sv, gguf_pair):
    """llama.cpp's default KV cache is f16, where block and single-token logits differ by
    about 2e-3 here (the numerics test): a greedy divergence is allowed at a gap below 1e-2,
    and counted."""
    target_path, draft_path = gguf_pair
    draft, target = load(draft_path, F16, logits_all=False), load(target_path, F16, logits_all=False)
    ref = load(target_path, F16)
    near_ties = []
    runs = close = 0
    for k in (1, 3, 5):
        dec = sv.llama_cpp.speculative_decoder(draft, target, k=k, temperature=0, schedule="constant")
        for prompt in prompts(target):
            expect, gaps = llama_greedy(ref, prompt, 40)
            close += int((gaps < 1e-2).sum())
            same, gap = agree_or_near_tie(dec.generate(prompt, max_new=40), expect, gaps, len(prompt), tie=1e-2)
            runs += 1
            if not same:
                near_ties.append(gap)
    print(f"\nf16 cache: near-tie divergences in {len(near_ties)} of {runs} runs of 40 tokens {near_ties}; "
          f"{close} of {runs * 40} greedy positions had a gap below 1e-2")
    assert len(near_ties) <= 3


def test_a_quantized_draft(sv, tmp_path_factory):
    """tiny_gguf's medium pair: a float32 target and its Q4_0 quantization as the draft.
    Quantized matrix products ran through llama.cpp's AMX code on this workplace's Xeons
    when built with GGML_NATIVE, and segfaulted there; scripts/llama_env.sh builds without
    AMX. Greedy output equals llama.cpp's own greedy generation (or diverges at a near-tie)."""
    target_path, draft_path = tiny_gguf.write_pair(tmp_path_factory.mktemp("medium"), "medium")
    target, draft, ref = load(target_path), load(draft_path), load(target_path)
    dec = sv.llama_cpp.speculative_decoder(draft, target, k=4, temperature=0, schedule="constant")
    for prompt in prompts(target)[:2]:
        expect, gaps = llama_greedy(ref, prompt, 24)
        agree_or_near_tie(dec.generate(prompt, max_new=24), expect, gaps, len(prompt))
        assert dec.stats.accepted > 0


def test_prompt_lookup_greedy_equals_llama_cpp_greedy_generation(sv, models):
    _, target, ref = models
    dec = sv.llama_cpp.prompt_lookup_decoder(target, k=6, temperature=0, schedule="constant")
    calls = new = 0
    for prompt in prompts(target):
        expect, gaps = llama_greedy(ref, prompt, 60)
        agree_or_near_tie(dec.generate(prompt, max_new=60), expect, gaps, len(prompt))
        calls += dec.stats.target_calls
        new += dec.stats.new_tokens
    print(f"\nprompt lookup, k = 6: {new / calls:.2f} tokens per target call")
    assert new / calls > 1.0  # random weights repeat themselves: some lookups succeed


def test_suffix_decoder_greedy_equals_llama_cpp_greedy_generation(sv, models):
    _, target, ref = models
    cache = sv.SuffixCache()
    # Constant k so that every round drafts (the adaptive schedule may find nothing pays here);
    # a second decoder on the adaptive schedule shares the cache.
    dec = sv.llama_cpp.suffix_decoder(target, k=6, temperature=0, cache=cache, schedule="constant")
    adaptive = sv.llama_cpp.suffix_decoder(target, k=6, temperature=0, cache=cache)
    assert dec.drafter.cache is cache is adaptive.drafter.cache and dec.target_cache.llm is target
    calls = new = 0
    for rep in range(2):  # the second pass drafts from the first pass's outputs too
        for prompt in prompts(target):
            expect, gaps = llama_greedy(ref, prompt, 60)
            agree_or_near_tie(dec.generate(prompt, max_new=60), expect, gaps, len(prompt))
            calls += dec.stats.target_calls
            new += dec.stats.new_tokens
            agree_or_near_tie(adaptive.generate(prompt, max_new=60), expect, gaps, len(prompt))
    assert len(cache) == 4 * len(prompts(target))
    print(f"\nsuffix decoding, k = 6: {new / calls:.2f} tokens per target call")
    assert new / calls > 1.0


# The KV caches --------------------------------------------------------------------------------

def test_caches_feed_what_the_prefix_contract_allows(sv, models):
    """Per round, the target evaluates its j+1 new tokens once; the draft evaluates one token
    per draft step, plus the previous round's last proposal when all of them were accepted
    (it is never evaluated in its own round). In the first round, an empty cache takes the
    whole prompt; a cache still holding the last generation from the same prompt keeps all
    of it but the last prompt token (whose row is needed again)."""
    draft, target, _ = models
    k, max_new = 3, 50
    for prompt in prompts(target):
        dec = sv.llama_cpp.speculative_decoder(draft, target, k=k, temperature=0, schedule="constant")
        t, d = dec.target_cache, dec.draft_cache
        t.reset()
        d.reset()
        for again in (False, True):  # an empty cache, then the previous generation's
            last = (t.fed, d.fed, t.evals, d.evals)
            remaining, prev, first = max_new, None, True
            for chunk in dec.stream(prompt, max_new=max_new):
                j = min(k, remaining - 1)
                n = len(chunk) - 1
                now = (t.fed, d.fed, t.evals, d.evals)
                fed_t, fed_d, evals_t, evals_d = (a - b for a, b in zip(now, last))
                assert evals_t == 1 and evals_d == j
                if first:
                    assert fed_t == (1 if again else len(prompt)) + j
                    assert fed_d == (1 if again else len(prompt)) + j - 1
                else:
                    assert fed_t == 1 + j
                    if j:
                        assert fed_d == j + (prev[0] == prev[1]), (prev, j)
                prev, last, first = (n, j), now, False
                remaining -= len(chunk)
            assert remaining == 0


def test_results_equal_a_run_without_the_cache(sv, gguf_pair):
    target_path, draft_path = gguf_pair
    runs = []
    for cached in (True, False):
        draft, target = load(draft_path, logits_all=False), load(target_path, logits_all=False)
        d_step, t_step = sv.llama_cpp.logits_steps(draft, target)
        if not cached:
            def forget(step):
                def f(*args):
                    step.model.reset()
                    return step(*args)
                f.model = step.model
                return f
            d_step, t_step = forget(d_step), forget(t_step)
        out = []
        for temperature in (0.0, 0.9):
            g = torch.Generator().manual_seed(4)
            dec = sv.SpeculativeDecoder.from_logits(d_step, t_step, 4, temperature=temperature, top_k=50,
                                                    generator=g, schedule="constant")
            out += [dec.generate(p, max_new=40) for p in prompts(target)]
        runs.append((out, t_step.model.fed, d_step.model.fed))
    (with_cache, fed_t, fed_d), (without, fed_t0, fed_d0) = runs
    assert with_cache == without
    assert fed_t < fed_t0 / 3 and fed_d < fed_d0 / 3


def test_a_refused_truncation_falls_back_to_reevaluation(sv, models, gguf_pair, monkeypatch):
    """llama.cpp may refuse to drop a suffix of the cache (recurrent and hybrid models):
    llama_memory_seq_rm returns false and leaves the cache as it was. Simulated here: every
    partial removal is refused (Llama.eval's own unchecked call included)."""
    draft, target, ref = models
    expected = [dec_out for dec_out in
                (sv.llama_cpp.speculative_decoder(draft, target, k=3, temperature=0, schedule="constant")
                 .generate(p, max_new=30)
                 for p in prompts(target))]
    calls = []

    def refuse(mem, seq_id, p0, p1):
        calls.append(p0)
        return False

    monkeypatch.setattr(llama_cpp.llama_cpp, "llama_memory_seq_rm", refuse)
    target_path, draft_path = gguf_pair
    dec = sv.llama_cpp.speculative_decoder(load(draft_path, logits_all=False), load(target_path, logits_all=False),
                                           k=3, temperature=0, schedule="constant")
    got = [dec.generate(p, max_new=30) for p in prompts(target)]
    assert calls and dec.target_cache.fallbacks > 0 and dec.draft_cache.fallbacks > 0
    assert got == expected
    # Every fallback re-evaluated the whole sequence.
    assert dec.target_cache.fed > dec.target_cache.evals * len(prompts(target)[0])


# Sampling ------------------------------------------------------------------------------------

def warped_law(ref, prompt, params):
    """The target's warped law of the first two new tokens, [V, V] float64, from single-token
    evaluation and the reference warp (tests/warp_reference.py)."""
    def warped(position):
        w = warp_reference(torch.from_numpy(np.array(ref.scores[position])), **params)
        # The decoder's rows come from blocks, their logits up to TIE / 10 away from these
        # (the numerics test), which moves each weight exp(x / T - max) by a relative
        # 2 (TIE / 10) / T at most: no top-p cut may lie that close to its boundary, or the
        # decoder's kept set could differ from this one.
        assert float(w.margin[0]) > 2 * (TIE / 10) / params["temperature"]
        return w.probs[0]

    ref.reset()
    ref.eval(prompt)
    first = warped(len(prompt) - 1)
    law = torch.zeros(tiny_gguf.VOCAB, tiny_gguf.VOCAB, dtype=torch.float64)
    for t1 in first.nonzero().flatten().tolist():
        ref.n_tokens = len(prompt)
        ref.eval([t1])
        law[t1] = first[t1] * warped(len(prompt))
    return law


@pytest.mark.parametrize("method", ["token", "block"])
def test_sampled_first_two_tokens_follow_the_targets_warped_law(sv, models, method):
    """Null hypothesis: over N = 6000 generations of 3 tokens (k = 3: the first round
    proposes 2), the first two new tokens are a sample of the target's warped law
    P(t1) P(t2 | t1) (temperature 0.8, top-k 40, top-p 0.95, computed from single-token
    evaluation). G-tests of the pair and of the first token alone; fail at p < 1e-6. Seeds
    fixed. The same counts against the law at temperature 1.0 must fail (the test has power)."""
    draft, target, ref = models
    params = dict(temperature=0.8, top_k=40, top_p=0.95)
    prompt = prompts(target)[1]
    law = warped_law(ref, prompt, params)
    g = torch.Generator().manual_seed(2026 + len(method))
    dec = sv.llama_cpp.speculative_decoder(draft, target, k=3, generator=g, method=method, schedule="constant",
                                           **params)
    n = 6000
    counts = torch.zeros_like(law)
    accepted = 0
    for _ in range(n):
        out = dec.generate(prompt, max_new=3)
        counts[out[len(prompt)], out[len(prompt) + 1]] += 1
        accepted += dec.stats.accepted
    _, _, p_pair = g_test(counts, law)
    _, _, p_first = g_test(counts.sum(1), law.sum(1))
    print(f"\n{method}: pair p = {p_pair:.3g}, first token p = {p_first:.3g}, "
          f"{accepted / n:.2f} draft tokens accepted per generation")
    assert p_pair > 1e-6 and p_first > 1e-6
    wrong = warped_law(ref, prompt, dict(params, temperature=1.0))
    assert g_test(counts, wrong)[2] < 1e-6


# Refusals and NumPy -----------------------------------------------------------------------------

def test_models_made_with_or_without_logits_all_decode_alike(sv, gguf_pair, models):
    """The adapter asks llama.cpp for logits only where a round reads them, whichever way the
    Llama was made: the same greedy output, and the prompt's round computes j + 1 rows (not one
    per prompt position)."""
    target_path, draft_path = gguf_pair
    draft, target, _ = models
    full_t, full_d = load(target_path), load(draft_path)  # logits_all=True
    for prompt in prompts(target)[:3]:
        outs = []
        for d, t in ((draft, target), (full_d, full_t)):
            dec = sv.llama_cpp.speculative_decoder(d, t, k=3, temperature=0, schedule="constant")
            dec.target_cache.reset()
            dec.draft_cache.reset()
            chunks = dec.stream(prompt, max_new=30)
            first = next(chunks)
            assert dec.target_cache.rows == 4 and dec.target_cache.fed == len(prompt) + 3  # j + 1 = 4 rows
            assert dec.draft_cache.rows == 3  # the draft's last position, at each of its 3 steps
            outs.append(prompt + first + [t for c in chunks for t in c])
        assert outs[0] == outs[1]
    with pytest.raises(ValueError, match="same Llama instance"):
        sv.llama_cpp.speculative_decoder(target, target, k=3)


def test_a_draft_that_cannot_pay_is_never_evaluated(sv, models):
    """The default schedule, told by the draft's measured one-token cost that even drafts that
    are always accepted could not beat plain steps (here: a draft costing as much as the
    target), never evaluates the draft, not even its prompt; the output is the target's greedy
    decoding."""
    draft, target, ref = models
    dec = sv.llama_cpp.speculative_decoder(draft, target, k=4, temperature=0)
    dec.draft_cache.reset()
    dec.schedule.draft_token_hint = lambda: 10.0  # seconds: far above any target step
    prompt = prompts(target)[0]
    expect, gaps = llama_greedy(ref, prompt, 30)
    agree_or_near_tie(dec.generate(prompt, max_new=30), expect, gaps, len(prompt))
    assert dec.draft_cache.fed == 0 and dec.stats.draft_calls == 0
    assert dec.stats.schedule_reasons.get("never pays", 0) >= 20 and dec.stats.chosen_length_counts[0] == 30
    assert dec.draft_cache.token_seconds() > 0 and dec.draft_cache.fed == 0  # measured, then removed


def test_context_overflow_is_reported(sv, models):
    draft, target, _ = models
    dec = sv.llama_cpp.speculative_decoder(draft, target, k=3, temperature=0, schedule="constant")
    with pytest.raises(ValueError, match="do not fit the .*context of n_ctx = 512"):
        dec.generate([tiny_gguf.BOS] * 500, max_new=40)


def test_numpy_callbacks_over_llama_cpp(sv, models):
    """The decoder takes what llama-cpp-python hands out: llama-cpp-python's own prompt-lookup
    drafter (np.intc token arrays) as draft_step, llama.cpp's logits rows as NumPy arrays from
    target_step, a NumPy prompt and stop tokens; the rows reach the verifier uncopied."""
    from llama_cpp.llama_speculative import LlamaPromptLookupDecoding

    _, target, ref = models
    cache = sv.llama_cpp.CachedLlama(target, "target")
    lookup = LlamaPromptLookupDecoding(max_ngram_size=2, num_pred_tokens=4)

    def draft_step(prefix, k):
        return lookup(np.array(prefix, dtype=np.intc))[:k], None

    def target_step(prefix, proposed):
        return cache.logits(prefix + proposed.tolist(), len(prefix) - 1).numpy()

    seen = []

    def verifier(rows, probs, tokens, gen):
        logits = ctypes.cast(llama_cpp.llama_cpp.llama_get_logits(target.ctx), ctypes.c_void_p).value
        seen.append(rows.data_ptr() - logits)
        return sv.verify_greedy(rows, tokens)

    dec = sv.SpeculativeDecoder(draft_step, target_step, k=4, verifier=verifier, schedule="constant")
    for prompt in prompts(target):
        expect, gaps = llama_greedy(ref, prompt, 40)
        same, _ = agree_or_near_tie(dec.generate(np.array(prompt, dtype=np.intc), max_new=40), expect, gaps,
                                    len(prompt))
        if same:
            stop = np.array([expect[len(prompt) + 5]], dtype=np.intc)
            got = dec.generate(np.array(prompt, dtype=np.intc), max_new=40, eos_token_id=stop)
            assert got == expect[:expect.index(int(stop[0]), len(prompt)) + 1]
    # Each row tensor is llama.cpp's own logits buffer: a view, not a copy.
    assert seen and set(seen) == {0}
