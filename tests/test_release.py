"""What a user of today's `kernels` and torch meets: the variants' integrity digests and the
README's usage line.

Since kernels 0.19, every load hashes the variant's files and compares them with the digest
its metadata.json records (scripts/variant_digest.py writes it, as `kernel-builder hash`
does): without one the load warns, with a file that differs it fails. These tests hold every
variant in build/ to kernels' own hash (`kernels._rust.Digest.hash_variant`, the kernels-data
crate's, which kernel-builder uses too) under whichever kernels runs them, and check that a
changed, added or removed file is caught. scripts/variants.sh runs this file under torch
2.12.1, 2.13.0, 2.14.1 and 2.15.0, each with kernels 0.17.2 and 0.19.1; `make pytest` under
requirements.txt's pair.
"""
from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import kernels
import pytest
import torch
from kernels._rust import Digest, DigestValidationError, Metadata
from packaging.version import Version

from test_cross_arch import expected_variant

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "scripts"))
import variant_digest  # noqa: E402  (scripts/variant_digest.py)

VARIANT = re.compile(r"^torch(\d+-cxx11|-stable-abi\d+)-cpu-(x86_64|aarch64)-linux$")
# kernels verifies the digest at every load from 0.19 on; before, only `kernels
# verify-signature` did.
VERIFIES_AT_LOAD = Version(kernels.__version__) >= Version("0.19")


def built_variants() -> list:
    build = ROOT / "build"
    return sorted(p.name for p in build.iterdir() if p.is_dir() and VARIANT.match(p.name)) if build.is_dir() else []


def kernels_digest(variant: Path):
    """(recorded, computed): the digest metadata.json records and kernels' hash of the files."""
    recorded = Metadata.read_from_file(variant / "metadata.json").digest
    assert recorded is not None, f"{variant.name}: metadata.json records no digest"
    return recorded, Digest.hash_variant(recorded.algorithm, variant)


def violations(variant: Path) -> list:
    recorded, computed = kernels_digest(variant)
    try:
        recorded.validate(computed)
    except DigestValidationError as e:
        return [str(v) for v in e.violations]
    return []


def test_build_has_the_variant_of_this_torch():
    assert expected_variant(torch.__version__, os.uname().machine) in built_variants()


@pytest.mark.parametrize("name", built_variants())
def test_each_variant_matches_its_digest_by_kernels_own_hash(name):
    """Every variant in build/ (after `make variants`: both arches, torch212 and the stable
    ABI one): kernels' hash of its files equals the recorded digest, file for file, and so
    does scripts/variant_digest.py's (the same algorithm, written without kernels)."""
    variant = ROOT / "build" / name
    recorded, computed = kernels_digest(variant)
    assert str(recorded.algorithm) == str(computed.algorithm)
    assert violations(variant) == []
    assert variant_digest.variant_digest(variant)["files"] == computed.files
    # Every file kernels loads from is covered: the extension, _ops.py and the package.
    covered = set(computed.files)
    assert {"__init__.py", "_ops.py", "metadata.json"} - covered == {"metadata.json"}
    assert any(f.endswith(".abi3.so") for f in covered)
    assert {p.name for p in variant.iterdir() if p.is_file()} - covered == {"metadata.json"}


def copy_variant(sv, dest: Path) -> Path:
    source = Path(sv.__file__).parent
    target = dest / "build" / source.name
    shutil.copytree(source, target, ignore=shutil.ignore_patterns("__pycache__"))
    return target


def test_a_changed_added_or_removed_file_is_detected(sv, tmp_path):
    variant = copy_variant(sv, tmp_path)
    assert violations(variant) == []
    so = next(variant.glob("*.abi3.so"))
    data = bytearray(so.read_bytes())
    data[len(data) // 2] ^= 1  # one bit in the middle of the extension
    so.write_bytes(bytes(data))
    (variant / "extra.py").write_text("print('not shipped')\n")
    (variant / "_api.py").unlink()
    (variant / "__pycache__").mkdir()
    (variant / "__pycache__" / "x.cpython-311.pyc").write_bytes(b"interpreter output, not hashed")
    found = violations(variant)
    assert len(found) == 3, found
    assert any(so.name in v and "mismatch" in v.lower() for v in found), found
    assert any("_api.py" in v and "missing" in v.lower() for v in found), found
    assert any("extra.py" in v and "unknown" in v.lower() for v in found), found
    assert variant_digest.digest_problems(variant) == [
        f"changed: {so.name}", "missing: _api.py", "not in the digest: extra.py"]


def load_in_fresh_python(build: Path) -> subprocess.CompletedProcess:
    env = dict(os.environ, LOCAL_KERNELS=f"phanerozoic/spec-verify={build}")
    code = ("from kernels import get_kernel; "
            "sv = get_kernel('phanerozoic/spec-verify', version=1, backend='cpu', trust_remote_code=True); "
            "print(sv.__file__)")
    return subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=300)


@pytest.mark.slow  # two fresh interpreters importing torch
def test_loading_checks_the_digest(sv, tmp_path):
    """Loaded as users load it: a copy of the variant loads without a word; one changed byte
    of a Python file makes kernels 0.19 and later refuse the load (older ones do not check)."""
    variant = copy_variant(sv, tmp_path)
    clean = load_in_fresh_python(variant.parent)
    assert clean.returncode == 0, clean.stderr
    assert clean.stdout.strip() == str(variant / "__init__.py")
    assert "digest" not in clean.stderr and "integrity" not in clean.stderr, clean.stderr

    api = variant / "_api.py"
    api.write_bytes(api.read_bytes().replace(b"def ", b"def  ", 1))
    changed = load_in_fresh_python(variant.parent)
    if VERIFIES_AT_LOAD:
        assert changed.returncode != 0
        assert "do not match the digest" in changed.stderr and "_api.py" in changed.stderr, changed.stderr
    else:
        assert changed.returncode == 0, changed.stderr


@pytest.mark.slow  # a fresh interpreter importing torch
def test_readme_usage_line_as_written():
    """The Quick start's block, run as printed (scripts/readme_usage.py) in a fresh Python:
    it loads this torch's variant, on a CPU or a CUDA build of torch, with no warning."""
    r = subprocess.run([sys.executable, str(ROOT / "scripts" / "readme_usage.py")],
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    report = json.loads(r.stdout)
    assert report["torch"] == torch.__version__ and report["kernels"] == kernels.__version__
    assert report["cuda_build"] == (torch.version.cuda is not None)
    assert report["variant"] == expected_variant(torch.__version__, os.uname().machine)
    assert report["warnings"] == []


def get_kernel_calls(path: Path) -> list:
    return re.findall(r"get_kernel\((?:[^()]|\([^()]*\))*\)", path.read_text())


def test_every_usage_example_names_the_cpu_backend():
    """Without backend="cpu", kernels on a CUDA build of torch (PyPI's default) looks for
    CUDA variants only, and finds none: every call users copy says it."""
    files = [ROOT / "README.md"] + sorted((ROOT / "examples").glob("*.py"))
    calls = {f.name: get_kernel_calls(f) for f in files}
    assert sum(map(len, calls.values())) >= 7, calls
    for name, found in calls.items():
        for call in found:
            if call.startswith('get_kernel("phanerozoic/spec-verify"'):
                assert 'backend="cpu"' in call, f"{name}: {call}"
