"""SpeculativeDecoder on a pair of Hugging Face transformers causal LMs, through the adapter
in examples/transformers_adapter.py (a KV cache per model).

Both models are built from a config with fixed seeds (nothing is downloaded): a 2-layer
Llama with hidden size 64 and a 32000-token vocabulary as the target, and as the draft the
same model with every weight tensor perturbed by Gaussian noise (3% of its spread), so the
draft agrees with the target most of the time, not always.
"""
from __future__ import annotations

import copy
import importlib.util
import warnings
from pathlib import Path

import pytest
import torch

import transformers  # a test dependency (requirements.txt), never imported by the kernel

ROOT = Path(__file__).resolve().parent.parent
_spec = importlib.util.spec_from_file_location("transformers_adapter", ROOT / "examples" / "transformers_adapter.py")
adapter = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(adapter)

VOCAB = 32000
PROMPTS = [[1, 500, 1200, 7, 99, 3000], [1, 31999]]


def build_pair(seed: int = 0, noise: float = 0.03):
    from transformers import LlamaConfig, LlamaForCausalLM

    config = LlamaConfig(vocab_size=VOCAB, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                         num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=512)
    torch.manual_seed(seed)
    target = LlamaForCausalLM(config).eval()
    target.generation_config.eos_token_id = None  # stop only where a test says so
    draft = copy.deepcopy(target)
    g = torch.Generator().manual_seed(seed + 1)
    with torch.no_grad():
        for p in draft.parameters():
            p.add_(torch.randn(p.shape, generator=g) * noise * p.std())
    return target, draft


@pytest.fixture(scope="module", autouse=True)
def one_thread():
    # Tiny matrices: a second intra-op thread only adds synchronisation, which costs 10x on
    # a loaded 2-core machine.
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


@pytest.fixture(scope="module")
def models():
    transformers.utils.logging.set_verbosity_error()
    return build_pair()


def hf_greedy(model, prompt, max_new, eos=None):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        out = model.generate(torch.tensor([prompt]), attention_mask=torch.ones(1, len(prompt), dtype=torch.int64),
                             max_new_tokens=max_new, do_sample=False, eos_token_id=eos, pad_token_id=0)
    return out[0].tolist()


@pytest.mark.parametrize("k", [1, 4, 7])
def test_greedy_equals_transformers_generate(sv, models, k):
    target, draft = models
    for prompt in PROMPTS:
        draft_step, target_step = adapter.speculative_steps(draft, target)
        dec = sv.SpeculativeDecoder(draft_step, target_step, k=k, greedy=True)
        out = dec.generate(prompt, max_new=48)
        assert out == hf_greedy(target, prompt, 48)
        stats = dec.stats
        assert stats.new_tokens == 48 and stats.stop_reason == "max_new"
        # The KV cache works: the target is fed the prompt once, then k+1 tokens a round
        # (the emitted token and the next proposals), never the prefix again.
        assert target_step.model.fed == len(prompt) - 1 + stats.proposed + stats.rounds
        if k == 4:
            # The perturbed draft agrees with the target most of the time, not always.
            assert 0.5 < stats.acceptance_rate < 0.98, stats.summary()


def test_greedy_stop_tokens_equal_transformers_generate(sv, models):
    target, draft = models
    prompt = PROMPTS[0]
    free = hf_greedy(target, prompt, 48)[len(prompt):]
    # Stop tokens picked from the free-running output, so the stop happens mid-stream.
    first_seen = [t for i, t in enumerate(free) if t not in free[:i]]
    one, two = first_seen[20], first_seen[12]
    draft_step, target_step = adapter.speculative_steps(draft, target)
    dec = sv.SpeculativeDecoder(draft_step, target_step, k=4)
    for eos in (one, [one, two]):
        expected = hf_greedy(target, prompt, 48, eos=eos)
        assert expected[-1] in ([eos] if isinstance(eos, int) else eos)
        assert len(expected) < len(prompt) + 48
        assert dec.generate(prompt, max_new=48, eos_token_id=eos) == expected
        assert dec.stats.stop_reason == "stop_token"


def test_sampling_is_reproducible_and_valid(sv, models):
    target, draft = models
    outs = []
    for _ in range(2):
        g = torch.Generator().manual_seed(7)
        draft_step, target_step = adapter.speculative_steps(draft, target, temperature=0.7, generator=g)
        dec = sv.SpeculativeDecoder(draft_step, target_step, k=4, greedy=False, generator=g)
        chunks = list(dec.stream(PROMPTS[0], max_new=40))
        outs.append(sum(chunks, []))
        assert all(1 <= len(c) <= 5 for c in chunks) and len(outs[-1]) == 40
        assert all(0 <= t < VOCAB for t in outs[-1])
        assert dec.stats.rounds == len(chunks) and 0.3 < dec.stats.acceptance_rate <= 1.0
    assert outs[0] == outs[1]


def test_cache_follows_a_new_prompt(sv, models):
    # A second generation with another prompt must not reuse the first one's cache rows.
    target, draft = models
    draft_step, target_step = adapter.speculative_steps(draft, target)
    dec = sv.SpeculativeDecoder(draft_step, target_step, k=3)
    for prompt in (PROMPTS[0], PROMPTS[1], PROMPTS[0][:3], PROMPTS[0]):
        assert dec.generate(prompt, max_new=12) == hf_greedy(target, prompt, 12)
