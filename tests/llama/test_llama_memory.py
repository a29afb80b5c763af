"""No memory grows with `generate` through the llama.cpp adapter (tests/memory_probe.py over
tests/tiny_gguf.py's pair, in a fresh process; thresholds as tests/test_memory.py's for the
transformers adapter: heap <= 128 B, RSS <= 8 KB, Python blocks <= 10 a generate)."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from test_llama_cpp import require_llama_cpp

require_llama_cpp()

PROBE = Path(__file__).resolve().parent.parent / "memory_probe.py"


def test_no_llama_cpp_decoder_grows_memory():
    env = dict(os.environ, MALLOC_ARENA_MAX="2", OMP_NUM_THREADS="1")
    done = subprocess.run([sys.executable, str(PROBE), "--llama", "--generates", "40", "--decoder-warm", "3"],
                          env=env, capture_output=True, text=True, timeout=900)
    assert done.returncode == 0, done.stderr[-3000:]
    results = [json.loads(line) for line in done.stdout.splitlines() if line.startswith("{")]
    assert len(results) == 3
    over = [r for r in results if r["heap"] > 128 or r["blocks"] > 10 or r["rss"] > 8192]
    assert not over, "growth per generate above the thresholds:\n" + "\n".join(map(str, over))
