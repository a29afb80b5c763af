"""llama-cpp-python's draft-model verification behind the conformance suite's interface.

`Llama.generate` with a `draft_model` evaluates the drafts with the target, then samples a
token at each position through its sampler chain (llama.cpp's, in C) and keeps a draft token
while the sampled token equals it; the first sampled token that differs is emitted. Drafts
carry no probabilities: the suite checks it with one-hot drafts (draft_probs None).

The rows come from the suite, not from a model: the target is the tests' tiny GGUF model
(tests/tiny_gguf.py, vocabulary 512), and a logits processor replaces the logits at each
sampled position with the log of the suite's row (padded with -inf past V), in the order
generate samples them: the prompt's last position first (a one-hot row: token 0), then row
i for draft position i. The draft model returns the suite's tokens. llama.cpp's own seeded
dist sampler draws; each round seeds it from the suite's generator (`Llama.set_seed`), with
temperature 1 and top-k, top-p, min-p off.
"""
from __future__ import annotations

import sys
import tempfile
from pathlib import Path

import numpy as np
import torch

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))

import llama_cpp  # noqa: E402  (ImportError: benchmarks/conformance.py skips this peer)
from llama_cpp.llama_speculative import LlamaDraftModel  # noqa: E402

INTERFACE = "Llama.generate with a draft_model, one-hot drafts, rows through a logits processor"


class FixedDraft(LlamaDraftModel):
    """A draft model that proposes the tokens it is given."""

    def __init__(self):
        self.tokens = np.zeros(0, dtype=np.intc)

    def __call__(self, input_ids, /, **kwargs):
        tokens, self.tokens = self.tokens, np.zeros(0, dtype=np.intc)
        return tokens


class LlamaRound:
    """One round of llama-cpp-python's verification per call, on the suite's rows."""

    def __init__(self, model_path: Path):
        self.draft = FixedDraft()
        self.llm = llama_cpp.Llama(str(model_path), draft_model=self.draft, n_ctx=64, n_threads=1, n_threads_batch=1, verbose=False,
                                   seed=1)
        self.n_vocab = self.llm.n_vocab()
        self.rows = []

    def processor(self, input_ids, scores):
        row = self.rows.pop(0)
        scores[:] = row
        return scores

    def __call__(self, target, draft, tokens, generator):
        if draft is not None:
            raise ValueError("llama-cpp-python's drafts carry no probabilities: draft_probs must be None")
        k, vocab = target.shape[0] - 1, target.shape[1]
        logs = np.full((k + 2, self.n_vocab), -np.inf, dtype=np.float32)
        logs[0, 0] = 0.0  # the prompt's position: token 0, certainly
        logs[1:, :vocab] = torch.log(target.double() / target.double().sum(-1, keepdim=True)).float().numpy()
        self.rows = list(logs)
        self.draft.tokens = np.asarray(tokens.tolist(), dtype=np.intc)
        self.llm.set_seed(int(torch.randint(0, 2**31 - 1, (1,), generator=generator)))
        stream = self.llm.generate([1, 2], temp=1.0, top_k=0, top_p=1.0, min_p=0.0, reset=True,
                                   logits_processor=llama_cpp.LogitsProcessorList([self.processor]))
        next(stream)  # the prompt's token
        n = 0
        try:
            for token in stream:
                if n < k and token == int(tokens[n]):
                    n += 1
                    continue
                return n, int(token)
        finally:
            stream.close()
        raise RuntimeError("generate stopped before the round ended")


def check(t, rounds: int):
    """The suite over llama-cpp-python's verifier (one-hot drafts, float32 rows)."""
    import tiny_gguf

    folder = Path(tempfile.mkdtemp(prefix="conformance-gguf-"))
    target_path, _ = tiny_gguf.write_pair(folder)
    verify = LlamaRound(target_path)
    verify.__name__ = "llama-cpp-python"
    return t.check_verifier(verify, rounds=rounds, draft_rows=False, half=False, name="llama-cpp-python",
                            notes=["one-hot drafts only (a draft model's tokens, no probabilities)",
                                   f"{rounds} rounds per case: each round is a Llama.generate call"])
