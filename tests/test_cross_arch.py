"""The variant of the other architecture gives the same results as this machine's.

On the native machine (the pytest stage of `make test`, and again at the start of the
emulated stage) the round test runs a few hundred `accept` and `verify_greedy` rounds (and
warps, samples, `accept_logits` rounds from logits, one-hot drafts and block verification on
both) at V = 32000 and V = 128256 on every path, checks that the paths agree, and records
(seed -> digest of the inputs, outcomes) in build/cross-arch/. In the emulated run of
scripts/emulated_tests.sh (aarch64 under qemu on an x86-64 host, x86-64 under qemu on an
aarch64 host; SPEC_VERIFY_REQUIRE_REFERENCE set) it rebuilds the inputs from the same seeds,
checks that they are bit-identical to the recorded ones, and requires every path there
(neon and scalar, or avx2 and scalar) to reproduce the recorded outcomes exactly.

The inputs are made only from torch.rand / torch.randint streams and exactly rounded
arithmetic (products, floor, comparisons, indexing): those give the same bits on both
machines. torch.randn and torch.softmax do not (checked: their vectorised kernels differ
in the last bits between torch 2.13 on x86-64 and torch 2.10 on aarch64), so the inputs
avoid them.
"""
from __future__ import annotations

import hashlib
import json
import os
import platform
from pathlib import Path

import pytest
import torch

ROOT = Path(__file__).resolve().parent.parent
REFERENCE_DIR = ROOT / "build" / "cross-arch"
# The emulated run compares with the record; every other run (the native one) makes it.
COMPARING = bool(os.environ.get("SPEC_VERIFY_REQUIRE_REFERENCE"))
MACHINE = platform.machine()
K = 4
ROUNDS = {32000: 300, 128256: 200}  # vocabulary -> rounds per op (emulated: ~15 s in all)


def make_inputs(vocab: int, rounds: int) -> dict:
    g = torch.Generator().manual_seed(vocab)
    base = torch.rand(K + 1, vocab, generator=g)
    p = base * base
    p = p * p
    p = p * p  # base**8, multiplied out: peaked rows, every entry > 0
    noise = torch.rand(K, vocab, generator=g)
    q = p[:K] * (noise * noise * 4)
    # A region the draft overrates (mostly rejected there), zeros in the target at position 2
    # (draft tokens on them are always rejected), and an unnormalised draft row.
    q[:, : vocab // 8] *= 50
    p[2, ::2] = 0
    q[1] *= 1e6
    accept_tokens = torch.randint(0, vocab, (rounds, K), generator=g)

    # Integer-valued logits: the row maximum is tied at a dozen places, and -inf appears.
    logits = torch.floor(torch.rand(K + 1, vocab, generator=g) * 2000) - 1000
    logits[torch.rand(K + 1, vocab, generator=g) < 0.05] = float("-inf")
    best = logits.argmax(-1)
    last_best = torch.stack([(row == row.max()).nonzero()[-1, 0] for row in logits])
    greedy_tokens = best[:K].repeat(rounds, 1)
    miss = torch.randint(0, K + 1, (rounds,), generator=g)  # K: every draft token matches
    kind = torch.randint(0, 2, (rounds,), generator=g)
    other = torch.randint(0, vocab, (rounds,), generator=g)
    for r in range(rounds):
        m = int(miss[r])
        if m < K:
            # Either a random token or a later copy of the maximum (ties go to the lowest
            # index, so that copy is a miss too).
            greedy_tokens[r, m] = last_best[m] if kind[r] else other[r]
    # Logits for the warping ops: hundredths (an exactly rounded division), -inf included;
    # the draft's rows are the target's through integer-valued noise.
    target_logits = logits / 100
    draft_logits = target_logits[:K] + (torch.floor(torch.rand(K, vocab, generator=g) * 200) - 100) / 100
    return {"p": p, "q": q, "accept_tokens": accept_tokens, "logits": logits, "greedy_tokens": greedy_tokens,
            "target_logits": target_logits, "draft_logits": draft_logits}


LOGITS_ROUNDS = 30  # accept_logits rounds per vocabulary (each warps up to 2K+1 rows)
MODE_ROUNDS = 40  # rounds per mode of one-hot drafts and block verification (logits: a quarter)
WARPS = [dict(temperature=0.8), dict(temperature=0.8, top_p=0.9),
         dict(temperature=1.3, top_k=50, top_p=0.95, min_p=0.02)]


def digest(inputs: dict) -> str:
    h = hashlib.sha256()
    for name in sorted(inputs):
        h.update(name.encode())
        h.update(inputs[name].contiguous().numpy().tobytes())
    return h.hexdigest()


def outcomes(sv, inputs: dict, seed: int) -> dict:
    p, q, logits = inputs["p"], inputs["q"], inputs["logits"]
    g = torch.Generator().manual_seed(seed)
    accept = [list(sv.accept(p, q, t, g)) for t in inputs["accept_tokens"]]
    # One draw after the rounds: proves every path consumed the same number of uniforms.
    after = torch.rand(1, dtype=torch.float64, generator=g).item().hex()
    greedy = [list(sv.verify_greedy(logits, t)) for t in inputs["greedy_tokens"]]
    # Warping: the warped rows' bits, the tokens sample draws, accept_logits rounds.
    target, draft = inputs["target_logits"], inputs["draft_logits"]
    warped = [hashlib.sha256(sv.warp(target, **w).numpy().tobytes()).hexdigest() for w in WARPS]
    sampled = [sv.sample(target, generator=g, **w).tolist() for w in WARPS]
    accept_logits = [list(sv.accept_logits(target, draft, t, generator=g, **WARPS[r % len(WARPS)]))
                     for r, t in enumerate(inputs["accept_tokens"][:LOGITS_ROUNDS])]
    # One-hot drafts and block verification, on probabilities and on logits.
    modes = [(None, "token"), (q, "block"), (None, "block")]
    tokens = inputs["accept_tokens"][:MODE_ROUNDS]
    one_hot_block = [[list(sv.accept(p, d, t, g, method=m)) for t in tokens] for d, m in modes]
    logit_modes = [(None, "token"), (draft, "block"), (None, "block")]
    one_hot_block_logits = [[list(sv.accept_logits(target, d, t, generator=g, method=m, **WARPS[r % len(WARPS)]))
                             for r, t in enumerate(tokens[:MODE_ROUNDS // 4])] for d, m in logit_modes]
    # Half rows (the same values rounded to bfloat16 / float16 by torch, exactly on both machines).
    p16, q16, l16 = p.half(), q.bfloat16(), logits.bfloat16()  # q[1] is beyond float16
    half = [[list(sv.accept(p16, q16, t, g)) for t in tokens[:20]],
            [list(sv.verify_greedy(l16, t)) for t in inputs["greedy_tokens"][:20]],
            [list(sv.accept_logits(target.half(), draft.bfloat16(), t, generator=g, **WARPS[1]))
             for t in tokens[:5]]]
    # Trees: a fixed two-level tree over the first rows, both sampled modes and greedy.
    parents = [-1, -1, 0, 0, 2]
    tree = []
    for t in tokens[:4]:
        toks = [int(t[0]), (int(t[0]) + 1) % p.shape[1], int(t[1]), (int(t[1]) + 7) % p.shape[1], int(t[2])]
        for rows_t, rows_d in ((p[:4].repeat(2, 1)[:6], None), (p[:4].repeat(2, 1)[:6], q.repeat(2, 1)[:6])):
            path, x = sv.verify_tree_probs(rows_t, toks, parents, rows_d, generator=g)
            tree.append(path.tolist() + [x])
        path, x = sv.verify_tree(target.repeat(2, 1)[:6], toks, parents, draft.repeat(2, 1)[:6], generator=g,
                                 **WARPS[1])
        tree.append(path.tolist() + [x])
    return {"accept": accept, "generator_after": after, "verify_greedy": greedy, "warp": warped, "half": half,
            "tree": tree,
            "sample": sampled, "accept_logits": accept_logits, "one_hot_block": one_hot_block,
            "one_hot_block_logits": one_hot_block_logits,
            "generator_after_logits": torch.rand(1, dtype=torch.float64, generator=g).item().hex()}


def kernel_id(sv) -> str:
    return json.loads((Path(sv.__file__).parent / "metadata.json").read_text())["id"]


def first_difference(got: dict, want: dict) -> str:
    for key in want:
        if got[key] != want[key]:
            if isinstance(want[key], list):
                r = next(i for i, (a, b) in enumerate(zip(got[key], want[key])) if a != b)
                return f"{key} round {r}: got {got[key][r]}, the record gave {want[key][r]}"
            return f"{key}: got {got[key]}, the record gave {want[key]}"
    return "none"


def expected_variant(version: str, machine: str) -> str:
    """The variant get_kernel must choose under torch `version`: the stable-ABI one from torch
    2.13 on (it loads on 2.13 and every later torch), the torch-specific one before."""
    major, minor = (int(x) for x in version.split(".")[:2])
    if (major, minor) >= (2, 13):
        return f"torch-stable-abi213-cpu-{machine}-linux"
    return f"torch{major}{minor}-cxx11-cpu-{machine}-linux"


def test_expected_variant_names():
    assert expected_variant("2.12.1", "x86_64") == "torch212-cxx11-cpu-x86_64-linux"
    assert expected_variant("2.10.0", "aarch64") == "torch210-cxx11-cpu-aarch64-linux"
    assert expected_variant("2.13.0+cpu", "x86_64") == "torch-stable-abi213-cpu-x86_64-linux"
    assert expected_variant("2.14.1+cu130", "x86_64") == "torch-stable-abi213-cpu-x86_64-linux"
    assert expected_variant("2.15.0", "aarch64") == "torch-stable-abi213-cpu-aarch64-linux"


def test_loaded_variant_matches_machine_and_torch(sv):
    """get_kernel picked the variant built for this architecture and this torch."""
    assert Path(sv.__file__).parent.name == expected_variant(torch.__version__, MACHINE)


@pytest.mark.skipif(MACHINE != "aarch64", reason="the NEON path exists on aarch64 only")
def test_neon_is_the_path_in_use(sv):
    assert sv.isa() == "neon"
    assert sv.available_isas() == ["neon", "scalar"]


@pytest.mark.parametrize("vocab", sorted(ROUNDS))
def test_same_results_as_the_native_machine(sv, vocab):
    rounds = ROUNDS[vocab]
    seed = 1000 + vocab
    inputs = make_inputs(vocab, rounds)
    results = {}
    for isa in sv.available_isas():
        sv._force_isa(isa)
        results[isa] = outcomes(sv, inputs, seed)
    sv._force_isa("")
    # The inputs are worth comparing only if rounds end at many different positions.
    assert len({n for n, _ in results["scalar"]["accept"]}) >= 3
    assert {n for n, _ in results["scalar"]["verify_greedy"]} == set(range(K + 1))

    reference = REFERENCE_DIR / f"rounds-V{vocab}.json"
    if not COMPARING:
        for isa, got in results.items():
            assert got == results["scalar"], f"{isa} differs from scalar: {first_difference(got, results['scalar'])}"
        record = {"vocab": vocab, "k": K, "rounds": rounds, "inputs_seed": vocab, "uniforms_seed": seed,
                  "inputs_sha256": digest(inputs), "kernel": kernel_id(sv), "torch": torch.__version__,
                  "machine": MACHINE, "paths": list(results), "outcomes": results["scalar"]}
        REFERENCE_DIR.mkdir(parents=True, exist_ok=True)
        tmp = reference.with_suffix(f".{os.getpid()}.tmp")
        tmp.write_text(json.dumps(record) + "\n")
        os.replace(tmp, reference)  # a concurrent reader sees the old record or the new one
        return

    if not reference.exists():
        pytest.fail(f"no record {reference.relative_to(ROOT)}: run this test natively first")
    record = json.loads(reference.read_text())
    assert record["kernel"] == kernel_id(sv), (
        f"the record was made by kernel {record['kernel']}, this is {kernel_id(sv)}: record it again")
    assert digest(inputs) == record["inputs_sha256"], (
        f"the same seeds gave different inputs here and on {record['machine']}: input generation is not portable")
    for isa, got in results.items():
        assert got == record["outcomes"], (
            f"{isa} on {MACHINE} (torch {torch.__version__}) differs from {record['machine']} (torch {record['torch']}, "
            f"paths {record['paths']}): {first_difference(got, record['outcomes'])}")
