"""The transformers adapter (`spec_verify.transformers`) on sliding-window and hybrid caches,
and on a cache that cannot drop tokens at all.

Models, built from configs with fixed seeds (nothing is downloaded), each with a sliding
window of 8 tokens, far shorter than the sequences (prompts of 6 to 18 tokens, 40 new):
  gemma3   Gemma3ForCausalLM: two sliding-window layers and one full-attention layer (the
           hybrid pattern of Gemma 3, whose masks are a mapping from layer type)
  mistral  MistralForCausalLM: every layer sliding, one mask for all
  qwen2    Qwen2ForCausalLM with use_sliding_window: a full layer, then a sliding one
Drafts are the target with every weight perturbed by Gaussian noise (3% of its spread), so
they agree with the target most of the time, not always.

Held to: greedy output equal to plain greedy decoding (`generate`) and to the same decoder
over a cache without a window limit (every layer a full `DynamicLayer`: the masks still
apply the window); the tokens fed equal the prompt plus one round's tokens per round (the
emitted token and the proposals), chains and trees alike; every sliding-window layer holds
at most its window plus a round's tokens. Rows of trees scored through the cache equal plain
forwards over each node's path. The sampled law: see test_sampled_sequences_follow_the_law.

A cache that cannot drop tokens (a tiny Mamba, recurrent state): output still exact, one
warning naming the cache, every re-feed counted.
"""
from __future__ import annotations

import copy
import warnings

import pytest
import torch

import transformers  # a test dependency (requirements.txt), never imported by the kernel
from law import g_test

VOCAB = 2048
WINDOW = 8
PROMPTS = [[2, 500, 1200, 7, 99, 1300], [2, 40, 41, 42, 43, 44, 45, 46, 47, 48, 49, 50, 51, 52, 53, 54, 55, 56]]
REPEATING = [2, 500, 1200, 7, 99, 1300, 8, 500, 1200, 7, 99, 1300, 9, 500, 1200, 7]  # prompt lookup finds matches
ARCHS = ["gemma3", "mistral", "qwen2"]


def config(arch: str, vocab: int = VOCAB, window: int = WINDOW, hidden: int = 64):
    common = dict(vocab_size=vocab, hidden_size=hidden, intermediate_size=2 * hidden, num_attention_heads=4,
                  num_key_value_heads=2, max_position_embeddings=512, pad_token_id=0, bos_token_id=2,
                  eos_token_id=1)
    if arch == "gemma3":
        return transformers.Gemma3TextConfig(num_hidden_layers=3, head_dim=hidden // 4, sliding_window=window,
                                             layer_types=["sliding_attention", "sliding_attention", "full_attention"],
                                             **common)
    if arch == "mistral":
        return transformers.MistralConfig(num_hidden_layers=2, sliding_window=window, **common)
    if arch == "qwen2":
        return transformers.Qwen2Config(num_hidden_layers=2, use_sliding_window=True, sliding_window=window,
                                        max_window_layers=1, **common)
    raise ValueError(arch)


def build(arch: str, seed: int = 0, noise: float = 0.03, **kw):
    cfg = config(arch, **kw)
    torch.manual_seed(seed)
    target = transformers.AutoModelForCausalLM.from_config(cfg).eval()
    target.generation_config.eos_token_id = None  # stop only where a test says so
    draft = copy.deepcopy(target)
    g = torch.Generator().manual_seed(seed + 1)
    with torch.no_grad():
        for p in draft.parameters():
            p.add_(torch.randn(p.shape, generator=g) * noise * p.std())
    return target, draft


@pytest.fixture(scope="module", autouse=True)
def one_thread():
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


@pytest.fixture(scope="module", params=ARCHS)
def models(request):
    transformers.utils.logging.set_verbosity_error()
    target, draft = build(request.param)
    kinds = [type(layer).__name__ for layer in transformers.DynamicCache(config=target.config).layers]
    assert "DynamicSlidingWindowLayer" in kinds, kinds  # the case under test
    return target, draft


def hf_greedy(model, prompt, max_new):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        out = model.generate(torch.tensor([prompt]), attention_mask=torch.ones(1, len(prompt), dtype=torch.int64),
                             max_new_tokens=max_new, do_sample=False, eos_token_id=None, pad_token_id=0)
    return out[0].tolist()


def windowless(cache):
    """The same CachedCausalLM over a cache without a window limit: a DynamicCache without a
    config keeps every entry in full DynamicLayers (the model's masks still apply the window)."""
    cache._cache_class = lambda config: transformers.DynamicCache()
    return cache


def sliding_layers(cache):
    return [layer for layer in cache.cache.layers if type(layer).__name__ == "DynamicSlidingWindowLayer"]


def no_adapter_warnings(record):
    return [str(w.message) for w in record if "spec_verify" in str(w.message)] == []


@pytest.mark.parametrize("k", [1, 4])
def test_chain_greedy_feeds_one_round_at_a_time(sv, models, k):
    target, draft = models
    for prompt in PROMPTS:
        expected = hf_greedy(target, prompt, 40)
        with warnings.catch_warnings(record=True) as record:
            warnings.simplefilter("always")
            dec = sv.transformers.speculative_decoder(draft, target, k=k, temperature=0, schedule="constant")
            out = dec.generate(prompt, max_new=40)
        assert out == expected
        assert no_adapter_warnings(record)
        stats = dec.stats
        assert stats.new_tokens == 40 and len(out) > 3 * WINDOW
        # The target: the prompt once, then the emitted token and the proposals a round.
        assert dec.target_cache.fed == len(prompt) - 1 + stats.proposed + stats.rounds
        assert dec.draft_cache.fed <= len(prompt) - 1 + stats.proposed + stats.rounds
        assert dec.target_cache.fallbacks == dec.draft_cache.fallbacks == 0
        assert dec.target_cache.refills == dec.draft_cache.refills == 0
        if k == 4:
            assert 0.3 < stats.acceptance_rate < 1.0, stats.summary()
        # Memory bounded as transformers bounds it: the window, plus the entries after the
        # verified prefix (the last round's k + 1 for the target, two rounds for the draft).
        for layer in sliding_layers(dec.target_cache):
            assert layer.keys.shape[-2] <= WINDOW - 1 + k + 1
        for layer in sliding_layers(dec.draft_cache):
            assert layer.keys.shape[-2] <= WINDOW - 1 + 2 * (k + 1)
        # A cache without a window limit: the same tokens, the same feeding.
        free = sv.transformers.speculative_decoder(draft, target, k=k, temperature=0, schedule="constant")
        windowless(free.target_cache), windowless(free.draft_cache)
        assert free.generate(prompt, max_new=40) == expected
        assert free.target_cache.fed == dec.target_cache.fed


def test_prompt_lookup_decoder(sv, models):
    target, _ = models
    expected = hf_greedy(target, REPEATING, 40)
    dec = sv.transformers.prompt_lookup_decoder(target, k=6, temperature=0, schedule="constant")
    assert dec.drafter.max_ngram == 3 and dec.target_cache.model is target
    for rep in range(2):  # a second generation from the same decoder: its prompt is fed again
        with warnings.catch_warnings(record=True) as record:
            warnings.simplefilter("always")
            out = dec.generate(REPEATING, max_new=40)
        assert out == expected and no_adapter_warnings(record)
        stats = dec.stats
        assert stats.proposed > 0
        if rep == 0:
            assert dec.target_cache.fed == len(REPEATING) - 1 + stats.proposed + stats.rounds
        assert dec.target_cache.refills == rep and dec.target_cache.fallbacks == 0
    assert dec.target_cache.forwards == 2 * stats.rounds


def test_suffix_decoder(sv, models):
    target, _ = models
    expected = hf_greedy(target, REPEATING, 40)
    cache = sv.SuffixCache(max_requests=4)
    dec = sv.transformers.suffix_decoder(target, k=6, temperature=0, cache=cache, max_depth=8)
    assert dec.drafter.cache is cache and dec.drafter.max_depth == 8 and dec.target_cache.model is target
    for rep in range(2):  # the first request's output is in the cache for the second
        with warnings.catch_warnings(record=True) as record:
            warnings.simplefilter("always")
            out = dec.generate(REPEATING, max_new=40)
        assert out == expected and no_adapter_warnings(record)
        assert len(cache) == rep + 1 and cache.tokens == 40 * (rep + 1)
    assert dec.stats.proposed > 0 and dec.target_cache.fallbacks == 0
    # Another decoder given the same cache adds to it; one of its own does not.
    other = sv.transformers.suffix_decoder(target, k=4, temperature=0, cache=cache, schedule="constant")
    assert other.generate(REPEATING, max_new=40) == expected and len(cache) == 3
    assert other.stats.proposed > 0
    own = sv.transformers.suffix_decoder(target, k=4, temperature=0)
    assert own.drafter.cache is not cache and len(own.drafter.cache) == 0


def tree_dec(sv, target, draft, drafter, **kw):
    if drafter == "model":
        return sv.transformers.tree_decoder(target, draft, widths=(2, 2, 1), temperature=0, **kw)
    return sv.transformers.tree_decoder(target, draft_tree=sv.PromptLookupTree(branches=3, depth=4), temperature=0,
                                        **kw)


@pytest.mark.parametrize("drafter", ["model", "lookup"])
def test_tree_greedy_feeds_one_round_at_a_time(sv, models, drafter):
    target, draft = models
    for prompt in (PROMPTS[1], REPEATING):
        expected = hf_greedy(target, prompt, 40)
        with warnings.catch_warnings(record=True) as record:
            warnings.simplefilter("always")
            dec = tree_dec(sv, target, draft, drafter, tree_attention="mask")
            out = dec.generate(prompt, max_new=40)
        assert out == expected and no_adapter_warnings(record)
        stats = dec.stats
        assert stats.accepted > 0
        # One masked forward a round; the target is fed the prompt, then the emitted token
        # and the tree: the accepted path's entries are kept (moved into sequence order).
        assert dec.target_cache.forwards == stats.rounds
        assert dec.target_cache.fed == len(prompt) - 1 + stats.proposed + stats.rounds
        assert dec.target_cache.fallbacks == dec.target_cache.refills == 0
        for layer in sliding_layers(dec.target_cache):
            assert layer.keys.shape[-2] <= WINDOW - 1 + len(stats.node_counts) - 1
        free = tree_dec(sv, target, draft, drafter, tree_attention="mask")
        windowless(free.target_cache)
        if free.draft_cache is not None:
            windowless(free.draft_cache)
        assert free.generate(prompt, max_new=40) == expected
        assert free.target_cache.fed == dec.target_cache.fed


def test_tree_auto_takes_the_per_type_masks(sv, models):
    # "auto" checks the masked rows against one forward per branch once: the masks per layer
    # type (a mapping for the hybrids) must pass.
    target, draft = models
    dec = tree_dec(sv, target, draft, "model")
    assert dec.generate(PROMPTS[0], max_new=24) == hf_greedy(target, PROMPTS[0], 24)
    assert dec.target_cache.tree_attention == "mask" and dec.draft_cache.tree_attention == "mask"
    assert dec.target_cache.fallbacks == dec.draft_cache.fallbacks == 0


def per_node_rows(model, prefix, tokens, parents):
    """Row 0 after prefix, row j+1 after prefix + the path to node j: one plain forward each."""
    ctx = [list(prefix)]
    for t, p in zip(tokens, parents):
        ctx.append(ctx[p + 1] + [t])
    with torch.no_grad():
        return torch.stack([model(torch.tensor([c])).logits[0, -1].float() for c in ctx])


@pytest.mark.parametrize("mode", ["mask", "branches"])
def test_tree_logits_equal_per_branch_forwards(sv, models, mode):
    """Rows of random trees scored through the cache equal plain forwards over each node's
    path, round after round as the prefix grows by a path of the last tree far beyond the
    window, and as a tree grows level by level (fed again whole once a window is full)."""
    target, _ = models
    cache = sv.transformers.CachedCausalLM(target)
    cache.tree_attention = mode
    gen = torch.Generator().manual_seed(0)
    prefix = list(PROMPTS[0])
    for r in range(10):
        n = int(torch.randint(0, 9, (1,), generator=gen))
        parents = [int(torch.randint(-1, j, (1,), generator=gen)) for j in range(n)]
        tokens = torch.randint(0, VOCAB, (n,), generator=gen).tolist()
        before = cache.fed
        rows = cache.tree_logits(prefix, tokens, parents)
        if mode == "mask" and r > 0:
            assert cache.fed - before == 1 + n  # the last tree's path kept, in sequence order
        torch.testing.assert_close(rows, per_node_rows(target, prefix, tokens, parents), atol=2e-5, rtol=1e-4)
        if n:
            grown_t, grown_p = tokens + [5, 6], parents + [n - 1, n]
            torch.testing.assert_close(cache.tree_logits(prefix, grown_t, grown_p),
                                       per_node_rows(target, prefix, grown_t, grown_p), atol=2e-5, rtol=1e-4)
        node, path = (n - 1 if n else -1), []
        while node >= 0:
            path.append(tokens[node])
            node = parents[node]
        prefix = prefix + path[::-1] + [r + 10]
        if r % 3 == 2:  # a chain call in between, as a draft model's would be
            torch.testing.assert_close(cache.logits(prefix, len(prefix) - 1),
                                       per_node_rows(target, prefix, [], []), atol=2e-5, rtol=1e-4)
    assert len(prefix) > 2 * WINDOW and cache.fallbacks == 0


def test_going_below_keep_refeeds_and_counts(sv, models):
    """A call that goes back below an earlier `keep`, further than the window kept: right
    rows, the whole sequence fed again, counted in refills (not a fallback, no warning)."""
    target, _ = models
    cache = sv.transformers.CachedCausalLM(target)
    seq = list(range(100, 130))
    cache.logits(seq, len(seq) - 1)  # keep = first: nothing before it will be dropped
    with warnings.catch_warnings(record=True) as record:
        warnings.simplefilter("always")
        short = seq[:12] + [7]
        rows = cache.logits(short, 10)
    assert no_adapter_warnings(record)
    torch.testing.assert_close(rows[-1], per_node_rows(target, short, [], [])[0], atol=2e-5, rtol=1e-4)
    assert cache.refills == 1 and cache.fallbacks == 0 and cache.fed == 30 + 13


# A cache that cannot drop tokens: Mamba's recurrent state ----------------------------------

class RecordingLookup:
    """PromptLookup, recording how many tokens each round proposes."""

    def __init__(self, sv):
        self.inner, self.lengths = sv.PromptLookup(), []

    def __call__(self, prefix, k):
        tokens, probs = self.inner(prefix, k)
        self.lengths.append(len(tokens))
        return tokens, probs


def test_a_cache_that_cannot_drop_tokens_warns_once_and_counts(sv):
    cfg = transformers.MambaConfig(vocab_size=VOCAB, hidden_size=32, state_size=4, num_hidden_layers=2,
                                   conv_kernel=4, expand=2, pad_token_id=0, bos_token_id=2, eos_token_id=1)
    torch.manual_seed(0)
    model = transformers.MambaForCausalLM(cfg).eval()
    model.generation_config.eos_token_id = None
    transformers.utils.logging.set_verbosity_error()
    prompt = REPEATING
    expected = hf_greedy(model, prompt, 24)
    cache = sv.transformers.CachedCausalLM(model)
    lookup = RecordingLookup(sv)
    dec = sv.SpeculativeDecoder.from_logits(
        None, lambda prefix, proposed: cache.logits(prefix + proposed.tolist(), len(prefix) - 1, keep=len(prefix)),
        4, temperature=0, draft_step=lookup, schedule="constant")
    with warnings.catch_warnings(record=True) as record:
        warnings.simplefilter("always")
        chunks = list(dec.stream(prompt, max_new=24))
    assert sum(chunks, []) == expected[len(prompt):]
    mine = [str(w.message) for w in record if "spec_verify" in str(w.message)]
    assert len(mine) == 1, mine
    assert "cannot drop tokens" in mine[0] and "DynamicCache" in mine[0] and "LinearAttentionLayer" in mine[0]
    # Every round but the last that rejected a proposal makes the next call drop tokens: a
    # new cache, the whole sequence fed again. The others feed the emitted token and the
    # proposals.
    # (No lookup with one token left: the last round proposes nothing.)
    proposed = lookup.lengths + [0] * (len(chunks) - len(lookup.lengths))
    assert len(lookup.lengths) >= len(chunks) - 1
    rejected = [len(c) - 1 < j for c, j in zip(chunks, proposed)]
    assert any(rejected[:-1]) and not all(rejected[:-1])  # both kinds of round occur
    assert cache.fallbacks == sum(rejected[:-1])
    fed, length = len(prompt) + proposed[0], len(prompt)
    for r in range(1, len(chunks)):
        length += len(chunks[r - 1])
        fed += (length + proposed[r]) if rejected[r - 1] else 1 + proposed[r]
    assert cache.fed == fed
    # A second generation: still one warning in all.
    with warnings.catch_warnings(record=True) as record:
        warnings.simplefilter("always")
        assert dec.generate(prompt, max_new=24) == expected
    assert [w for w in record if "spec_verify" in str(w.message)] == []


# The sampled law ---------------------------------------------------------------------------

LAW_VOCAB, LAW_WINDOW, LAW_NEW, LAW_PROMPT = 3, 3, 4, [2, 0, 1, 2, 0, 1, 1, 0]
GENERATIONS = 1500
P_MIN = 1e-8


def law_model(window: int):
    """A Gemma 3 style hybrid over 3 tokens, window 3, its logits scaled up (final norm) so
    the rows are far from uniform: a wrong window or a stale cache entry shows in the law."""
    cfg = config("gemma3", vocab=LAW_VOCAB, window=window, hidden=16)
    cfg.pad_token_id, cfg.bos_token_id, cfg.eos_token_id = 0, 2, 1
    torch.manual_seed(3)
    model = transformers.AutoModelForCausalLM.from_config(cfg).eval()
    with torch.no_grad():
        model.model.norm.weight.fill_(11.0)  # Gemma's RMSNorm scales by 1 + weight
    return model


def sequence_law(model, prompt, new):
    """P(every continuation of `new` tokens), from plain forwards without a cache."""
    law = {(): 1.0}
    for _ in range(new):
        nxt = {}
        for seq, p in law.items():
            with torch.no_grad():
                row = torch.softmax(model(torch.tensor([prompt + list(seq)])).logits[0, -1].double(), -1)
            for t in range(row.numel()):
                nxt[seq + (t,)] = p * float(row[t])
        law = nxt
    return law


@pytest.mark.slow
@pytest.mark.parametrize("mode", ["chain", "tree"])
def test_sampled_sequences_follow_the_law(sv, mode):
    """Null hypothesis: the GENERATIONS continuations of LAW_NEW tokens sampled at temperature
    1 by prompt lookup (a chain, k = 3; or PromptLookupTree trees, mask mode) over the window-3
    hybrid, its cache dropping rejected tokens from full windows every round, are a
    multinomial sample from the model's autoregressive law (computed exactly, from plain
    forwards without a cache, over all 81 continuations). Test: tests/law.py's G-test (cells
    expecting fewer than 5 pooled); fails at p < P_MIN = 1e-8. Seeds fixed, repeatable.
    Power: the same counts must reject (p < P_MIN) the law of the same model with a window
    one longer (4; KL 0.071 from the true law, so G about 2 * 1500 * 0.071 = 214 expected,
    where p < 1e-8 needs about 80 at these degrees of freedom) and with no window at all
    (sliding_window 64, KL 1.6): the test sees an off-by-one in the window."""
    model = law_model(LAW_WINDOW)
    law = sequence_law(model, LAW_PROMPT, LAW_NEW)
    cells = {seq: i for i, seq in enumerate(sorted(law))}
    g = torch.Generator().manual_seed(17)
    if mode == "chain":
        dec = sv.transformers.prompt_lookup_decoder(model, k=3, max_ngram=2, temperature=1.0, generator=g, schedule="constant")
    else:
        dec = sv.transformers.tree_decoder(model, draft_tree=sv.PromptLookupTree(max_ngram=2, branches=3, depth=3),
                                           temperature=1.0, generator=g, tree_attention="mask")
    counts = torch.zeros(len(cells), dtype=torch.float64)
    accepted = rounds = 0
    with warnings.catch_warnings(record=True) as record:
        warnings.simplefilter("always")
        for _ in range(GENERATIONS):
            out = dec.generate(LAW_PROMPT, max_new=LAW_NEW)
            counts[cells[tuple(out[len(LAW_PROMPT):])]] += 1
            accepted += dec.stats.accepted
            rounds += dec.stats.rounds
    assert no_adapter_warnings(record)
    assert dec.target_cache.fallbacks == 0
    assert accepted / rounds > 0.3, f"{accepted / rounds:.2f} accepted per round: too few drops to test"
    expected = torch.tensor([law[seq] for seq in sorted(law)], dtype=torch.float64)
    g_stat, df, p = g_test(counts, expected)
    assert p > P_MIN, f"G = {g_stat:.1f}, df = {df}, p = {p:.3g}"
    for window in (LAW_WINDOW + 1, 64):
        wrong = sequence_law(law_model(window), LAW_PROMPT, LAW_NEW)
        g_stat, df, p = g_test(counts, torch.tensor([wrong[seq] for seq in sorted(wrong)], dtype=torch.float64))
        assert p < P_MIN, f"the law with window {window} passed too: G = {g_stat:.1f}, df = {df}, p = {p:.3g}"
