"""The llama.cpp tests: a real llama.cpp (llama-cpp-python) on tiny GGUF models written here.

`make llama` installs llama-cpp-python once into a cached folder (scripts/llama_env.sh),
puts it on PYTHONPATH and sets SPEC_VERIFY_REQUIRE_LLAMA=1: there a missing llama_cpp is an
error, never a skip (test_llama_cpp.py checks). Run elsewhere without llama_cpp (a plain
`pytest tests`), the module is skipped with a reason that says how to run it. `make test`
leaves this folder out.
"""
from __future__ import annotations

import pytest


@pytest.fixture(scope="session")
def gguf_pair(tmp_path_factory):
    """(target.gguf, draft.gguf): tests/tiny_gguf.py's pair, written once per session."""
    import tiny_gguf

    return tiny_gguf.write_pair(tmp_path_factory.mktemp("gguf"))
