"""The two model adapters, sv.llama_cpp and sv.transformers, offer the same functions with the
same arguments and defaults (written once in _adapters.py over each adapter's model
wrapper). Neither model library is needed: only the functions' signatures are read."""
from __future__ import annotations

import inspect

SHARED = ("logits_steps", "speculative_decoder", "prompt_lookup_decoder", "suffix_decoder")


def public_functions(module) -> set:
    """The public functions a module offers as its own."""
    return {name for name, obj in vars(module).items()
            if not name.startswith("_") and inspect.isfunction(obj) and obj.__module__ == module.__name__}


def test_both_adapters_offer_the_same_functions_and_signatures(sv):
    for name in SHARED:
        llama, hf = getattr(sv.llama_cpp, name), getattr(sv.transformers, name)
        assert inspect.signature(llama) == inspect.signature(hf), name
        # Each is its adapter's own function, documented for its models.
        assert llama.__module__ == sv.llama_cpp.__name__ and hf.__module__ == sv.transformers.__name__
        assert "llama_cpp.Llama" in llama.__doc__ and "transformers.PreTrainedModel" in hf.__doc__, name
        assert "{" not in llama.__doc__ and "{" not in hf.__doc__, name
    # tree_decoder needs a model that scores a tree in one call: the transformers adapter's alone.
    assert public_functions(sv.llama_cpp) == set(SHARED)
    assert public_functions(sv.transformers) == set(SHARED) | {"tree_decoder"}


def test_the_defaults(sv):
    """k = 4 with a draft model, 16 without one; token-wise verification; the adaptive
    schedule; the warping parameters off (temperature 1)."""
    for module in (sv.llama_cpp, sv.transformers):
        for name, k in (("speculative_decoder", 4), ("prompt_lookup_decoder", 16), ("suffix_decoder", 16)):
            params = inspect.signature(getattr(module, name)).parameters
            assert params["k"].default == k, (module.__name__, name)
            assert params["method"].default == "token" and params["schedule"].default == "adaptive"
            assert [params[p].default for p in ("temperature", "top_k", "top_p", "min_p")] == [1.0, 0, 1.0, 0.0]
            assert all(params[p].kind is inspect.Parameter.KEYWORD_ONLY
                       for p in ("temperature", "top_k", "top_p", "min_p", "generator", "method", "schedule"))
