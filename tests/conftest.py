"""Every test loads the kernel the way users do: get_kernel(...) resolved through
LOCAL_KERNELS to this repository's build/ (`make test` builds it first)."""
from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(Path(__file__).resolve().parent))
os.environ.setdefault("LOCAL_KERNELS", f"phanerozoic/spec-verify={ROOT / 'build'}")


def load_kernel():
    import torch
    from kernels import get_kernel

    # On a CUDA build of torch (PyPI's torch 2.12 for x86-64, which `make variants` tests
    # under), `kernels` picks a CPU variant only when asked, as users of that torch must.
    backend = {"backend": "cpu"} if torch.version.cuda else {}
    return get_kernel("phanerozoic/spec-verify", version=1, trust_remote_code=True, **backend)


@pytest.fixture(scope="session")
def sv():
    return load_kernel()


def compile_fullgraph(fn):
    """torch.compile(fn, fullgraph=True, backend="eager") as a user of this torch must ask for
    it over ops whose int outputs depend on the data (every round op returns SymInts): torch
    2.10 and later allow those under fullgraph by themselves; torch 2.9 (the Raspberry Pi 4's:
    README, "Quick start") needs torch._dynamo.config.capture_dynamic_output_shape_ops, set
    here around each call (compilation happens at the first)."""
    import torch

    compiled = torch.compile(fn, fullgraph=True, backend="eager")
    if tuple(int(x) for x in torch.__version__.split("+")[0].split(".")[:2]) >= (2, 10):
        return compiled

    def run(*args, **kwargs):
        with torch._dynamo.config.patch(capture_dynamic_output_shape_ops=True):
            return compiled(*args, **kwargs)

    return run


def pytest_configure(config):
    # The development tier: `make test-fast` runs `pytest -m "not slow"`. `make test`,
    # `make pytest` and CI run every test, slow ones included.
    config.addinivalue_line(
        "markers", "slow: a long test (a statistical test over many rounds, or over a second for "
        "another reason); deselected by `make test-fast`")
    # A pytest-xdist worker (`make pytest` runs two, one a core) keeps to one intra-op thread:
    # two workers of two OpenMP threads each on two cores wait in every parallel region for a
    # thread the other worker holds (a 1000-element searchsorted took 1 ms on two threads, 0.1
    # ms on one, with the cores busy). Tests of threading set their own counts (test_batch.py).
    if os.environ.get("PYTEST_XDIST_WORKER"):
        import torch

        torch.set_num_threads(1)


# The SIMD paths each architecture's build carries (the scalar path is everywhere).
BUILT_PATHS = {"x86_64": ["avx512", "avx2"], "aarch64": ["neon"]}


def pytest_generate_tests(metafunc):
    # Tests that take `isa` run once per instruction-set path this machine can run; a path
    # the build carries but this CPU cannot run appears as a skip that names it, so a run
    # on a CPU without AVX-512 says what it did not test.
    if "isa" in metafunc.fixturenames:
        available = load_kernel().available_isas()
        params = [pytest.param(name, id=name) for name in available]
        for name in BUILT_PATHS.get(os.uname().machine, []):
            if name not in available:
                params.append(pytest.param(name, id=name, marks=pytest.mark.skip(
                    reason=f"the {name} path is built but this CPU cannot run it: not tested here")))
        metafunc.parametrize("isa", params, scope="module")


@pytest.fixture(autouse=True)
def _path(request, sv):
    isa = request.getfixturevalue("isa") if "isa" in request.fixturenames else ""
    sv._force_isa(isa)
    yield
    sv._force_isa("")
