"""The analytic law of speculative sampling and the G-test, for the tests, the examples and the
benchmarks: one reference, spec_verify.testing.law (torch-ext/spec_verify/testing/law.py),
which the conformance suite and its users share. It is loaded here from the source tree by
path (torch only, no build needed); this module adds the laws of the plausible bugs the tests
show their power against.

With draft token t_i drawn from q_i independently and p_i fixed (rows normalised),
alpha_i = sum_v min(p_i(v), q_i(v)) and the pair (N, emitted token x) has the law
    P(N = n, x) = (prod_{i<n} alpha_i) * max(0, p_n(x) - q_n(x))   for n < K,
    P(N = K, x) = (prod_{i<K} alpha_i) * p_K(x).
One-hot drafts and block verification: see the package module's docstring.
"""
from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import torch

_NAME = "spec_verify_testing_source"
if _NAME not in sys.modules:
    _folder = Path(__file__).resolve().parent.parent / "torch-ext" / "spec_verify" / "testing"
    _spec = importlib.util.spec_from_file_location(_NAME, _folder / "__init__.py", submodule_search_locations=[str(_folder)])
    sys.modules[_NAME] = importlib.util.module_from_spec(_spec)
    _spec.loader.exec_module(sys.modules[_NAME])
testing = sys.modules[_NAME]
_law = testing.law

normalise = _law.normalise
acceptance_rates = _law.acceptance_rates
reach_probabilities = _law.reach_probabilities
joint_law = _law.joint_law
accepted_length_law = _law.accepted_length_law
expected_accepted = _law.expected_accepted
mean_accepted = _law.mean_accepted
chi2_sf = _law.chi2_sf
g_test = _law.g_test
one_hot_rates = _law.one_hot_rates
one_hot_joint_law = _law.one_hot_joint_law
block_weights = _law.block_weights
block_law_fixed = _law.block_law_fixed
block_joint_law = _law.block_joint_law


def one_hot_law_residual_with_token(p: torch.Tensor, r: torch.Tensor) -> torch.Tensor:
    """The law of a plausible bug: on rejection the correction is drawn from p_n, t_n included."""
    k = r.shape[0]
    pn = normalise(p)
    beta = one_hot_rates(p, r)
    reach = reach_probabilities(beta)
    law = torch.empty_like(pn)
    if k:
        law[:k] = (reach[:k] * (1 - beta))[:, None] * pn[:k]
    law[k] = reach[k] * pn[k]
    return law
