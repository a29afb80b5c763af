"""The warping parameters as one value (`_warping.Warping`): each bad parameter rejected with
its one message, whoever asks (the value itself, the ops, the decoders at construction); good
ones kept as Python numbers in the ops' argument order; and no way of making an unchecked one."""
from __future__ import annotations

import re

import numpy as np
import pytest
import torch

from test_logits_errors import BAD_PARAMS, GOOD_PARAMS

V = 20
IDS = [f"{next(iter(c[0]))}={next(iter(c[0].values()))!r}"[:40] for c in BAD_PARAMS]


@pytest.fixture(scope="module")
def Warping(sv):
    return sv._warping.Warping


@pytest.mark.parametrize("case", BAD_PARAMS, ids=IDS)
def test_each_bad_parameter_has_its_one_message(sv, Warping, case):
    """The value raises the message the ops raise (test_logits_errors.py), with the asker's
    name in front: "Warping" by default."""
    params, exc, pattern = case
    with pytest.raises(exc, match=r"^Warping: " + pattern):
        Warping(**params)
    with pytest.raises(exc, match=r"^someone: " + pattern):
        Warping(**params, what="someone")
    good = Warping()
    with pytest.raises(exc, match=r"^Warping: " + pattern):
        good._replace(**params)
    with pytest.raises(exc, match=r"^Warping: " + pattern):
        Warping._make([params.get(name, value) for name, value in good._asdict().items()])


@pytest.mark.parametrize("case", BAD_PARAMS, ids=IDS)
def test_a_decoder_with_bad_warping_fails_at_construction(sv, case):
    """Both decoders on logits, and the transformers adapter's factories, refuse a bad
    parameter when they are made, with the same message (nothing is generated)."""
    params, exc, pattern = case
    calls = []
    step = lambda seq: calls.append(seq) or torch.zeros(V)  # noqa: E731
    target = lambda prefix, proposed: calls.append(prefix) or torch.zeros(len(proposed) + 1, V)  # noqa: E731
    tree_target = lambda prefix, tokens, parents: calls.append(prefix) or torch.zeros(len(tokens) + 1, V)  # noqa: E731
    with pytest.raises(exc, match=r"^SpeculativeDecoder\.from_logits: " + pattern):
        sv.SpeculativeDecoder.from_logits(step, target, **params)
    with pytest.raises(exc, match=r"^SpeculativeDecoder\.from_logits: " + pattern):
        sv.SpeculativeDecoder.from_logits(None, target, draft_step=sv.PromptLookup(), **params)
    with pytest.raises(exc, match=r"^TreeDecoder\.from_logits: " + pattern):
        sv.TreeDecoder.from_logits(lambda prefix: ([], [], None), tree_target, **params)
    # The adapters check before they touch a model: none is needed to see the message.
    for module in (sv.transformers, sv.llama_cpp):
        name = module.__name__.rpartition(".")[2]
        for factory, args in (("speculative_decoder", (None, None)), ("prompt_lookup_decoder", (None,)),
                              ("suffix_decoder", (None,))):
            with pytest.raises(exc, match=rf"^spec_verify\.{name}\.{factory}: " + pattern):
                getattr(module, factory)(*args, **params)
    with pytest.raises(exc, match=r"^spec_verify\.transformers\.tree_decoder: " + pattern):
        sv.transformers.tree_decoder(None, draft_tree=lambda prefix: ([], [], None), **params)
    assert calls == []


@pytest.mark.parametrize("params", GOOD_PARAMS, ids=range(len(GOOD_PARAMS)))
def test_good_parameters_become_python_numbers_in_the_ops_order(sv, Warping, params):
    w = Warping(**params)
    assert [type(x) for x in w] == [float, int, float, float]
    assert tuple(w) == (w.temperature, w.top_k, w.top_p, w.min_p)
    expected = {"temperature": 1.0, "top_k": 0, "top_p": 1.0, "min_p": 0.0}
    for name, value in params.items():
        expected[name] = float(value) if name != "top_k" else int(value)
    assert w._asdict() == expected
    assert w.greedy == (w.temperature == 0.0)
    assert str(w) == ", ".join(f"{k}={v}" for k, v in expected.items())


def test_a_decoder_keeps_its_warping_and_the_ops_get_it_unpacked(sv, Warping):
    """The decoder's value is the one it was made with (shown by repr), and its rounds give
    the ops the same numbers as the keywords would: equal output to a decoder made with
    NumPy scalars of the same values."""
    rows = torch.randn(40, V, generator=torch.Generator().manual_seed(3))
    target = lambda prefix, proposed: rows[len(prefix):len(prefix) + len(proposed) + 1]  # noqa: E731
    draft = lambda seq: rows[len(seq)] * 0.5  # noqa: E731
    outs = []
    for temperature, top_p in ((0.8, 0.9), (np.float64(0.8), torch.tensor(0.9, dtype=torch.float64))):
        dec = sv.SpeculativeDecoder.from_logits(draft, target, 3, temperature=temperature, top_p=top_p,
                                                generator=torch.Generator().manual_seed(1), schedule="constant")
        assert isinstance(dec.warping, Warping)
        assert repr(dec) == ("SpeculativeDecoder.from_logits(k=3, temperature=0.8, top_k=0, top_p=0.9, min_p=0.0, "
                             "schedule='constant')")
        outs.append(dec.generate([0], max_new=30))
    assert outs[0] == outs[1]
    assert re.fullmatch(r"TreeDecoder\.from_logits\(temperature=0\.0, top_k=2, top_p=1\.0, min_p=0\.0\)",
                        repr(sv.TreeDecoder.from_logits(lambda p: ([], [], None), target, temperature=0, top_k=2)))
