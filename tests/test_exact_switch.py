"""SPEC_VERIFY_EXACT runs the rules alone: every optional shortcut kernel taken out (csrc/dispatch.cpp,
`exact_kernels`). Every path gives the same outcomes with it as without, bit for bit, over the
cross-architecture rounds (chains, one-hot and block, warps, samples, logits rounds, half rows,
trees); a list of kernel names takes out only those; a name that is no optional kernel is a
ValueError on every call. The switch is read once per process, so each setting runs in its own."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent

# Each path's digest of test_cross_arch's outcomes at V = 32000 (fewer rounds), and whether a
# draft bound from `sample` was a range (decided from the approximate weights) or a point.
SCRIPT = """
import hashlib, json, torch, conftest, test_cross_arch as x
sv = conftest.load_kernel()
inputs = x.make_inputs(32000, 60)
out = {}
for isa in sv.available_isas():
    sv._force_isa(isa)
    got = x.outcomes(sv, inputs, seed=7)
    _, bounds = sv.sample(inputs["target_logits"], generator=torch.Generator().manual_seed(1),
                          return_bounds=True, temperature=0.8)
    ranges = int((bounds[:, 2] > bounds[:, 1]).sum())
    out[isa] = [hashlib.sha256(json.dumps(got, sort_keys=True).encode()).hexdigest(), ranges]
print(json.dumps(out))
"""


def run(setting: str | None) -> subprocess.CompletedProcess:
    env = dict(os.environ)
    env.pop("SPEC_VERIFY_EXACT", None)
    if setting is not None:
        env["SPEC_VERIFY_EXACT"] = setting
    return subprocess.run([sys.executable, "-c", SCRIPT], cwd=HERE, env=env, capture_output=True, text=True,
                          timeout=600)


@pytest.mark.slow  # three subprocesses, each importing torch and running every path
def test_rules_alone_give_the_same_outcomes_on_every_path():
    results = {}
    for setting in (None, "1", "row_weight_sums,row_upper_weight_sums_above"):
        out = run(setting)
        assert out.returncode == 0, out.stderr
        results[setting] = json.loads(out.stdout.strip().splitlines()[-1])
    default, exact, some = results[None], results["1"], results["row_weight_sums,row_upper_weight_sums_above"]
    assert set(default) == set(exact) == set(some)
    for isa in default:
        assert exact[isa][0] == default[isa][0], f"{isa}: outcomes differ with SPEC_VERIFY_EXACT=1"
        assert some[isa][0] == default[isa][0], f"{isa}: outcomes differ with two kernels out"
    # The switch is on: with the approximate weights out, no bound is a range (each is the exact
    # mass, a point), while with them some rows are decided from them (a range) on a path that has them.
    assert all(exact[isa][1] == 0 and some[isa][1] == 0 for isa in exact)
    assert any(default[isa][1] > 0 for isa in default), default


def test_a_name_that_is_no_optional_kernel_is_refused():
    code = ("import conftest, torch; sv = conftest.load_kernel()\n"
            "for _ in range(2):\n"
            "    try:\n        sv.verify_greedy(torch.ones(2, 5), [0])\n"
            "    except ValueError as e:\n        print('ValueError', e)\n")
    env = dict(os.environ, SPEC_VERIFY_EXACT="row_weight_sums,fast_path")
    out = subprocess.run([sys.executable, "-c", code], cwd=HERE, env=env, capture_output=True, text=True,
                         timeout=300)
    lines = out.stdout.strip().splitlines()
    assert len(lines) == 2, out.stdout + out.stderr
    for line in lines:
        assert "SPEC_VERIFY_EXACT names 'fast_path', which is not an optional kernel" in line, line
        assert "row_upper_weight_sums_above" in line, line
