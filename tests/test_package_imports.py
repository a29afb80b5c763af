"""What importing the kernel package pulls in: the standard library and torch only; the
transformers and llama.cpp adapters import their libraries inside their functions."""
from __future__ import annotations


def test_kernel_package_imports_only_stdlib_torch_and_itself(sv):
    """At import, the package needs the standard library and torch only. The transformers
    adapter (transformers.py, _hf_cache.py) imports transformers inside its functions, when
    called, and the llama.cpp adapter (llama_cpp.py) llama_cpp likewise."""
    import ast
    import sys
    from pathlib import Path

    allowed = set(sys.stdlib_module_names) | {"torch", "__future__"}
    # What an adapter may import inside its functions (the transformers adapter's cache
    # handling is in _hf_cache.py).
    lazy_allowed = {"transformers.py": "transformers", "_hf_cache.py": "transformers", "llama_cpp.py": "llama_cpp"}
    for path in Path(sv.__file__).parent.rglob("*.py"):  # spec_verify.testing too
        tree = ast.parse(path.read_text())
        lazy = {id(node) for f in ast.walk(tree) if isinstance(f, (ast.FunctionDef, ast.AsyncFunctionDef))
                for node in ast.walk(f)}
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom) and node.level == 0:
                names = [node.module]
            else:
                continue
            for name in names:
                ok = name.split(".")[0] in allowed or (
                    id(node) in lazy and name.split(".")[0] == lazy_allowed.get(path.name))
                assert ok, f"{path.name} imports {name}"


def test_package_imports_only_torch(sv):
    """Importing the kernel (and reaching sv.transformers) does not import transformers, in a
    fresh interpreter. (Here, not in test_torch_integration.py: the emulated aarch64 run
    cannot start a subprocess.)"""
    import subprocess
    import sys

    code = ("import sys, os; from kernels import get_kernel; "
            "sv = get_kernel('phanerozoic/spec-verify', version=1, trust_remote_code=True); "
            "assert sv.transformers.speculative_decoder and sv.llama_cpp.speculative_decoder; "
            "print(sorted(m for m in ('transformers', 'numpy', 'llama_cpp') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert "transformers" not in out.stdout and "llama_cpp" not in out.stdout, out.stdout
