"""The two model adapters, sv.llama_cpp and sv.transformers, offer the same functions with the
same arguments and defaults (written once in _adapters.py over each adapter's model
wrapper). Neither model library is needed: only the functions' signatures are read, and
the arguments checked before a model is touched (suffix_decoder's tree=True, which llama.cpp
refuses)."""
from __future__ import annotations

import inspect

import numpy as np
import pytest

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
    schedule; the warping parameters off (temperature 1); suffix_decoder's trees off."""
    for module in (sv.llama_cpp, sv.transformers):
        for name, k in (("speculative_decoder", 4), ("prompt_lookup_decoder", 16), ("suffix_decoder", 16)):
            params = inspect.signature(getattr(module, name)).parameters
            assert params["k"].default == k, (module.__name__, name)
            assert params["method"].default == "token" and params["schedule"].default == "adaptive"
            assert [params[p].default for p in ("temperature", "top_k", "top_p", "min_p")] == [1.0, 0, 1.0, 0.0]
            assert all(params[p].kind is inspect.Parameter.KEYWORD_ONLY
                       for p in ("temperature", "top_k", "top_p", "min_p", "generator", "method", "schedule"))
    for module in (sv.llama_cpp, sv.transformers):
        param = inspect.signature(module.suffix_decoder).parameters["tree"]
        assert param.default is False and param.kind is inspect.Parameter.KEYWORD_ONLY


class Untouchable:
    """A model that fails a test if anything reads it."""

    def __getattr__(self, name):
        raise AssertionError(f"the adapter touched the model ({name})")


def test_suffix_trees_need_a_model_that_scores_a_tree(sv):
    # llama.cpp's Llama scores one sequence per call: tree=True is refused before the model
    # is read, naming the argument and the way out.
    for tree in (True, np.bool_(True)):
        with pytest.raises(ValueError, match=r"^spec_verify\.llama_cpp\.suffix_decoder: tree=True needs a model "
                                             r"that scores a tree of tokens in one call, and llama_cpp\.Llama "
                                             r"cannot .*; use tree=False"):
            sv.llama_cpp.suffix_decoder(Untouchable(), tree=tree)


def test_suffix_decoder_tree_arguments(sv):
    # Checked before the model is read, in both adapters.
    for module in (sv.llama_cpp, sv.transformers):
        name = module.__name__.rpartition(".")[2]
        for bad, kind in ((1, "int"), ("yes", "str"), (None, "NoneType")):
            with pytest.raises(TypeError, match=rf"^spec_verify\.{name}\.suffix_decoder: tree must be a bool, "
                                                rf"got {kind}$"):
                module.suffix_decoder(Untouchable(), tree=bad)
    what = r"^spec_verify\.transformers\.suffix_decoder: "
    with pytest.raises(ValueError, match=what + r"k must be an int in \[1, 1024\], got 0"):
        sv.transformers.suffix_decoder(Untouchable(), k=0, tree=True)
    with pytest.raises(ValueError, match=what + r"method='block' chooses a chain's verification rule"):
        sv.transformers.suffix_decoder(Untouchable(), tree=True, method="block")
    with pytest.raises(ValueError, match=what + r"method must be"):
        sv.transformers.suffix_decoder(Untouchable(), tree=True, method="tree")
    with pytest.raises(TypeError, match=what + r"schedule must be .* a TreeSchedule, got AdaptiveSchedule"):
        sv.transformers.suffix_decoder(Untouchable(), tree=True, schedule=sv.AdaptiveSchedule())
