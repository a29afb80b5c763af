"""The stable-ABI binding (torch-ext/stable/) against torch_binding.cpp: the same schemas, the
sources build.toml gives kernel-builder, and, in the stable build, the ops that draw in
Python (spec_verify/_stable.py) called directly through torch.ops as the other builds' are.

Results bit for bit: the whole test suite runs on the stable variant under torch 2.13 (`make
pytest`), and scripts/variants.sh compares test_cross_arch.py's rounds under torch 2.12.1
(torch_binding.cpp's variant) and torch 2.14.1 (the stable one) with those recorded here.
"""
from __future__ import annotations

import re
import sys
from pathlib import Path

import pytest
import torch

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "scripts"))
import build as build_script  # noqa: E402  (scripts/build.py)

STRING = r'"((?:[^"\\]|\\.)*)"'
ANY_STRING = r'"(?:[^"\\]|\\.)*"'


def versioned_schemas() -> list:
    text = (ROOT / "versioned" / "torch_binding.cpp").read_text()
    body = text[text.index("TORCH_LIBRARY_EXPAND"):]
    return ["".join(re.findall(STRING, d)) for d in re.findall(r'ops\.def\(((?:' + ANY_STRING + r'\s*)+)', body)]


def stable_table(name: str) -> list:
    text = (ROOT / "torch-ext" / "stable" / "torch_binding.cpp").read_text()
    block = text[text.index(f"{name}[] = {{"):]
    block = block[: block.index("};")]
    return re.findall(STRING, block)


def test_stable_schemas_are_torch_bindings_word_for_word():
    want = versioned_schemas()
    assert len(want) == 15
    assert stable_table("kSchemas") == want


def test_drawn_forms_are_the_generator_ops_with_their_uniforms():
    public = {s.split("(")[0]: s for s in versioned_schemas()}
    drawn = stable_table("kDrawnSchemas")
    names = sorted(name for name, s in public.items() if "Generator?" in s)
    assert len(names) == 9
    assert sorted(s.split("(")[0] for s in drawn) == sorted(
        ("_drawn" if n.startswith("_") else "_drawn_") + n for n in names)
    for s in drawn:
        name = s.split("(")[0]
        base = name[len("_drawn"):] if name[len("_drawn"):] in public else name[len("_drawn_"):]
        head, ret = public[base].rsplit(") ->", 1)
        without_defaults = re.sub(r'=(\\"token\\"|[^,)]*)', "", head[len(base):])
        assert s == name + without_defaults + ", Tensor _uniforms) ->" + ret


def test_build_toml_gives_kernel_builder_the_stable_binding():
    import tomllib

    config = tomllib.loads((ROOT / "build.toml").read_text())
    stable = sorted(str(p.relative_to(ROOT)) for p in (ROOT / "torch-ext" / "stable").glob("*.[ch]*"))
    assert sorted(config["torch"]["src"]) == stable
    assert config["torch"]["stable-abi"] == {"cpu": build_script.STABLE_ABI}


def kernels_variants():
    """kernels' variant parsing and choice: kernels.variants up to 0.17, moved to
    kernels._internals.variants (same functions and arguments) in 0.19."""
    try:
        from kernels._internals import variants
        from kernels._internals.backends import _select_backend
    except ImportError:
        from kernels import variants
        from kernels.variants import _select_backend
    return variants, _select_backend


def test_variant_names_are_kernel_builders():
    variants, _ = kernels_variants()
    TorchStableAbi, parse_variant = variants.TorchStableAbi, variants.parse_variant

    name = build_script.variant_name("2.14.1", "x86_64", "2.13")
    assert name == "torch-stable-abi213-cpu-x86_64-linux"
    v = parse_variant(name)
    assert isinstance(v.framework, TorchStableAbi) and str(v.framework.version) == "2.13"
    assert build_script.variant_name("2.12.1", "aarch64") == "torch212-cxx11-cpu-aarch64-linux"
    assert build_script.target_version_flag("2.13") == "-DTORCH_TARGET_VERSION=0x20d000000000000"


def stable_build(sv) -> bool:
    return Path(sv.__file__).parent.name.startswith("torch-stable-abi")


def test_the_ops_that_draw_work_through_torch_ops(sv):
    """ops.accept and the other generator ops, called as ops (the dispatcher, then _stable.py's
    kernel in the stable build), draw what the functions draw and leave the generator alike."""
    g1, g2 = torch.Generator().manual_seed(7), torch.Generator().manual_seed(7)
    p = torch.softmax(torch.randn(5, 40, generator=g1), -1)
    q = torch.softmax(torch.randn(4, 40, generator=g2), -1)
    g2.set_state(g1.get_state())
    tokens = torch.tensor([3, 1, 4, 1])
    assert tuple(sv.ops.accept(p, q, tokens, g1)) == tuple(sv.accept(p, q, tokens, g2))
    assert tuple(sv.ops.accept_logits(p.log(), q.log(), tokens, 0.7, 0, 1.0, 0.0, g1)) == tuple(
        sv.accept_logits(p.log(), q.log(), tokens, temperature=0.7, generator=g2))
    assert torch.equal(sv.ops.sample(p.log(), 1.0, 0, 1.0, 0.0, g1), sv.sample(p.log(), generator=g2))
    path1, x1 = sv.ops.verify_tree_probs(p, tokens, torch.tensor([-1, 0, 0, 1]), None, False, g1)
    path2, x2 = sv.verify_tree_probs(p, tokens, [-1, 0, 0, 1], generator=g2)
    assert path1.tolist() == path2.tolist() and x1 == x2
    assert torch.equal(g1.get_state(), g2.get_state())


def test_a_call_that_raises_through_torch_ops_leaves_the_generator(sv):
    g = torch.Generator().manual_seed(3)
    p = torch.softmax(torch.randn(5, 40, generator=g), -1)
    p[0, 3] = float("nan")  # read only once the round reaches row 0's token 3
    before = g.get_state()
    with pytest.raises(ValueError, match=r"^spec_verify\.accept: target_probs\[0, 3\] = nan is NaN$"):
        sv.ops.accept(p, None, torch.tensor([3, 1, 4, 1]), g)
    assert torch.equal(g.get_state(), before)


def test_type_errors(sv):
    """The Python API raises TypeError in every build; a stable kernel cannot, so there a
    direct op call shows the same message as a RuntimeError."""
    p = torch.softmax(torch.randn(3, 10), -1).double()
    message = r"^spec_verify\.verify_greedy: target_probs must have dtype torch\.float32, torch\.float16 or torch\.bfloat16, got torch\.float64 \(convert with \.float\(\)\)$"
    with pytest.raises(TypeError, match=message):
        sv.verify_greedy(p, torch.tensor([1, 2]))
    with pytest.raises(RuntimeError if stable_build(sv) else TypeError, match=message):
        sv.ops.verify_greedy(p, torch.tensor([1, 2]))


@pytest.mark.parametrize("machine", ["x86_64", "aarch64"])
def test_kernels_chooses_torch212_then_the_stable_variant(machine):
    """What `kernels` (0.17.2 and 0.19.1: scripts/variants.sh runs this under both) picks among
    the Hub folder's variants (scripts/hub.py's release set, with the emulated tests' torch210
    beside it) on each torch with backend="cpu": torch212 on 2.12, the stable one on 2.13 and
    every later torch, nothing before 2.10 or on 2.11."""
    from packaging.version import Version

    variants, _select_backend = kernels_variants()
    _resolve_variant_for_system, parse_variant = variants._resolve_variant_for_system, variants.parse_variant

    names = ["torch212-cxx11-cpu-x86_64-linux", "torch212-cxx11-cpu-aarch64-linux",
             "torch-stable-abi213-cpu-x86_64-linux", "torch-stable-abi213-cpu-aarch64-linux",
             "torch210-cxx11-cpu-aarch64-linux"]
    variants = [parse_variant(n) for n in names]
    want = {"2.9": None, "2.10": "torch210-cxx11-cpu-aarch64-linux" if machine == "aarch64" else None,
            "2.11": None, "2.12": f"torch212-cxx11-cpu-{machine}-linux"}
    want.update({v: f"torch-stable-abi213-cpu-{machine}-linux" for v in ("2.13", "2.14", "2.15", "2.20")})
    for version, expected in want.items():
        chosen, _ = _resolve_variant_for_system(variants, _select_backend("cpu"), machine, "linux",
                                                Version(version), True, None)
        got = None
        if chosen:
            got = next(n for n, v in zip(names, variants) if v == chosen[0])
        assert got == expected, f"torch {version} on {machine}: {got}, expected {expected}"
