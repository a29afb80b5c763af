"""The two builds of the one binding: the stable-ABI one (torch-ext/stable/) and the versioned
one (versioned/), both ../common/ops.h's kernels over a backend, registering the one schema
list (torch-ext/common/schemas.h); the sources build.toml gives kernel-builder; no Python
function as an op's kernel.

Results bit for bit: the whole test suite runs on the stable variant under torch 2.13 (`make
pytest`), and scripts/variants.sh compares test_cross_arch.py's rounds under torch 2.12.1
(the versioned build's variant) and torch 2.14.1 (the stable one) with those recorded here.
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
import build_sources  # noqa: E402  (scripts/build_sources.py)

STRING = r'"((?:[^"\\]|\\.)*)"'
REGISTRIES = (ROOT / "torch-ext" / "stable" / "torch_binding.cpp", ROOT / "versioned" / "torch_binding.cpp")


def schema_list() -> list:
    """kSchemas of torch-ext/common/schemas.h, C string literals joined as the compiler joins
    adjacent ones."""
    text = (ROOT / "torch-ext" / "common" / "schemas.h").read_text()
    block = text[text.index("kSchemas[] = {"):]
    block = block[: block.index("};")]
    return [bytes("".join(re.findall(STRING, item)), "utf-8").decode("unicode_escape")
            for item in re.split(r",\s*\n", block.split("{", 1)[1]) if re.search(STRING, item)]


def test_both_builds_register_the_one_schema_list():
    schemas = schema_list()
    assert len(schemas) == 15 and len({s.split("(")[0] for s in schemas}) == 15
    for registry in REGISTRIES:
        text = registry.read_text()
        assert '#include "' in text and "schemas.h" in text, registry
        # Every schema comes from the list: one loop over it, and no other def.
        assert len(re.findall(r"for \(const char\* schema : svb::kSchemas\) ops\.def\(schema\);", text)) == 1, registry
        assert len(re.findall(r"\.def\(", text)) == 1, registry


def test_the_loaded_build_registers_the_list(sv):
    """What the build in use (stable under torch 2.13+, versioned under 2.12 and the emulated
    2.10) registered, schema for schema, is the list."""
    namespace = sv._ops.add_op_namespace_prefix("x").split("::")[0]
    for text in schema_list():
        name = text.split("(")[0]
        registered = getattr(sv.ops, name).default._schema
        assert str(registered) == str(torch._C.parse_schema(f"{namespace}::{text}")), name


def test_no_python_function_is_an_op_kernel(sv):
    """Every op's kernels (CPU, the sparse and mkldnn layouts it refuses, the tensorless ops'
    CompositeExplicitAutograd) are C++; Python registers only the fakes (Meta, _fakes.py) and
    the nested and quantized refusals (_layouts.py), which raise before anything is read."""
    for text in schema_list():
        dump = torch._C._dispatch_dump(sv._ops.add_op_namespace_prefix(text.split("(")[0]))
        kernels = dict(re.findall(r"^(\w+): registered at (\S+)", dump, re.M))
        compute = {k: v for k, v in kernels.items() if k not in ("Meta", "AutogradNestedTensor", "QuantizedCPU")}
        assert compute and all(re.search(r"\.cpp:\d+$", v) for v in compute.values()), (text, kernels)


def test_build_toml_gives_kernel_builder_the_stable_binding():
    import tomllib

    config = tomllib.loads((ROOT / "build.toml").read_text())
    files = lambda *dirs: sorted(str(p.relative_to(ROOT)) for d in dirs for p in (ROOT / d).glob("*.[ch]*"))  # noqa: E731
    assert sorted(config["torch"]["src"]) == files("torch-ext/stable", "torch-ext/common")
    assert sorted(build_sources.VERSIONED_BINDING) == files("versioned", "torch-ext/common")
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


def test_a_call_through_the_op_overload_that_raises_leaves_the_generator(sv):
    """List tokens take the OpOverload (not the builtin): the draw and the restore are the same."""
    g = torch.Generator().manual_seed(3)
    p = torch.softmax(torch.randn(5, 40, generator=g), -1)
    p[0, 3] = float("nan")  # read only once the round reaches row 0's token 3
    before = g.get_state()
    with pytest.raises(ValueError, match=r"^spec_verify\.accept: target_probs\[0, 3\] = nan is NaN$"):
        sv.accept(p, None, [3, 1, 4, 1], g)
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
