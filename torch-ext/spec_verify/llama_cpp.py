"""Speculative decoding with GGUF models through llama.cpp (llama-cpp-python), with KV caches.

    from llama_cpp import Llama

    target = Llama("target.gguf", n_threads=4, n_threads_batch=4)
    draft = Llama("draft.gguf", n_threads=4, n_threads_batch=4)
    dec = sv.llama_cpp.speculative_decoder(draft, target, k=4, temperature=0.8, top_p=0.95,
                                           generator=torch.Generator().manual_seed(0))
    ids = dec.generate(target.tokenize(b"Once upon a time"), max_new=64,
                       eos_token_id=target.token_eos())

    # No draft model: prompt lookup proposes, the llama.cpp target verifies.
    dec = sv.llama_cpp.prompt_lookup_decoder(target, temperature=0)

`sv.llama_cpp` offers the functions `sv.transformers` offers, with the same arguments and
defaults (`logits_steps`, `speculative_decoder`, `prompt_lookup_decoder`, `suffix_decoder`:
written once in `_adapters.py`, over `CachedLlama`), all but `tree_decoder` and
`suffix_decoder(tree=True)`, which raises (a llama.cpp batch cannot score a tree in one call
here). All are `SpeculativeDecoder.from_logits` over
llama.cpp's logits: the decoder warps every
row (draft and target alike) with the same parameters and the package's own warping ops,
samples the draft tokens with `sample` and verifies with `accept_logits`, so the output
has the law of the target sampled with those parameters (temperature 0: the target's
greedy decoding; see the README for the near-tie caveat). llama.cpp's own samplers are not
used.

Each `Llama` keeps its KV cache across rounds. A call keeps the longest common prefix of
the tokens the cache holds and the new sequence, removes the rest from the cache
(`llama_memory_seq_rm`, whose result is checked: recurrent and hybrid models may refuse a
partial removal, and then the cache is cleared and the whole sequence is evaluated again)
and evaluates only the remaining tokens through llama.cpp's batch API (`llama_decode`),
asking for logits only at the positions the round reads: the target's k+1, the draft's
last. So a prompt is evaluated as plain decoding evaluates it (one logits row, not one per
prompt position: with Gemma 3's 262144-token vocabulary a row costs half a decode step),
whether or not the `Llama` was made with `logits_all=True`, and a draft model that the
schedule does not run is never evaluated at all (it catches up on the text when it next
drafts). The rows are returned without a copy: tensor views of llama.cpp's logits buffer,
which the next evaluation of the same `Llama` overwrites (the decoder reads them before
that). `Llama.scores` is not filled.

Both `Llama` instances must share one vocabulary (the same tokenizer; `n_vocab()` is
checked) and must not be used for anything else while a generation runs.

llama_cpp is imported only inside these functions: the package itself needs only torch.
"""
from __future__ import annotations

from typing import List, Optional

import ctypes
import time

import torch

from ._adapters import ModelInterface, _common_prefix, adapter_functions


def _lib():
    # The low-level bindings (ctypes functions of libllama); looked up at each call so that
    # a test can stand in for one of them.
    from llama_cpp import llama_cpp as lib

    return lib


class CachedLlama:
    """One `llama_cpp.Llama` and its KV cache, following the sequences it is asked about.

    Args:
        llm (`llama_cpp.Llama`): a model, made with or without `logits_all=True` (the
            logits are asked for only where a round reads them either way).
        what (`str`, *optional*): how messages name it ("target", "draft").

    Attributes:
        llm: the model.
        fed (`int`): tokens evaluated so far, a measure of the work done.
        evals (`int`): calls that evaluated tokens (one or more `llama_decode` calls each,
            one per `n_batch` tokens).
        rows (`int`): logits rows llama.cpp computed (a row costs the output layer).
        fallbacks (`int`): partial cache removals that llama.cpp refused, each followed by
            a cleared cache and a full re-evaluation.
    """

    def __init__(self, llm, what: str = "model"):
        self.llm = llm
        self.what = what
        self.ids: List[int] = []  # what the cache holds, as we left it
        self.fed = 0
        self.evals = 0
        self.rows = 0
        self.fallbacks = 0
        self._token_seconds: Optional[float] = None

    def reset(self) -> None:
        """Empties the cache (the next call evaluates its whole sequence)."""
        self.llm.reset()
        self._clear()
        self.ids = []

    def _remove_from(self, p0: int) -> bool:
        """Removes positions >= p0 from the cache; False if llama.cpp refuses."""
        lib = _lib()
        mem = lib.llama_get_memory(self.llm.ctx)
        return mem is not None and bool(lib.llama_memory_seq_rm(mem, -1, p0, -1))

    def _clear(self) -> None:
        lib = _lib()
        mem = lib.llama_get_memory(self.llm.ctx)
        if mem is not None:
            lib.llama_memory_clear(mem, True)

    def logits(self, seq: List[int], first: int, keep: Optional[int] = None) -> torch.Tensor:
        """The next-token logits after `seq[:first+1]`, ..., after `seq`.

        Args:
            seq (`List[int]`): token ids.
            first (`int`): the first position whose output is returned, `0 <= first < len(seq)`.
            keep (`int`, *optional*): the adapters' hint that no later call keeps fewer tokens
                of `seq` (`ModelInterface`); unused, since llama.cpp's cache can drop any
                suffix.

        Returns:
            `torch.Tensor`: float32 `[len(seq) - first, V]`, a view of llama.cpp's logits
            buffer (valid until this model's next evaluation) where the rows came from one
            `llama_decode` call, else a copy.

        Raises:
            ValueError: `first` out of range; `seq` longer than the context (`n_ctx`).
            RuntimeError: llama.cpp's `llama_decode` failed (its code in the message).
        """
        llm, n = self.llm, len(seq)
        if not 0 <= first < n:
            raise ValueError(f"need 0 <= first < len(seq), got first = {first}, len(seq) = {n}")
        if n > llm.n_ctx():
            raise ValueError(f"spec_verify.llama_cpp: {n} tokens do not fit the {self.what}'s context of "
                             f"n_ctx = {llm.n_ctx()} tokens (Llama(..., n_ctx=...))")
        ids = self.ids
        held = llm.n_tokens
        if held != len(ids) or (held and int(llm.input_ids[held - 1]) != ids[-1]):
            # Someone else evaluated with this Llama since our last call: read its state.
            ids = self.ids = llm.input_ids[:held].tolist()
        start = min(_common_prefix(ids, seq), first)
        if start < held and not self._remove_from(start):
            # A recurrent or hybrid model's memory cannot drop a suffix: start afresh.
            self._clear()
            self.fallbacks += 1
            start = 0
        llm.n_tokens = start
        self.ids = ids[:start]
        rows = self._decode(seq, start, first)
        llm.input_ids[start:n] = seq[start:]  # Llama's own record, as Llama.eval keeps it
        llm.n_tokens = n
        self.evals += 1
        self.fed += n - start
        self.rows += n - first
        self.ids = list(seq)
        return rows

    def _decode(self, seq: List[int], start: int, first: int) -> torch.Tensor:
        """Evaluates seq[start:] in batches of n_batch tokens, with logits requested only at
        positions >= first: the rows, float32 [len(seq) - first, V]."""
        lib, llm = _lib(), self.llm
        batch, size, vocab, n = llm._batch.batch, llm.n_batch, llm.n_vocab(), len(seq)
        parts = []
        for c0 in range(start, n, size):
            c1 = min(n, c0 + size)
            batch.n_tokens = c1 - c0
            for i, p in enumerate(range(c0, c1)):
                batch.token[i] = seq[p]
                batch.pos[i] = p
                batch.n_seq_id[i] = 1
                batch.seq_id[i][0] = 0
                batch.logits[i] = p >= first
            code = lib.llama_decode(llm.ctx, batch)
            if code != 0:
                raise RuntimeError(f"spec_verify.llama_cpp: llama_decode returned {code} on the {self.what} "
                                   f"(positions {c0}..{c1 - 1})")
            m = c1 - max(c0, first)
            if m > 0:
                address = ctypes.cast(lib.llama_get_logits(llm.ctx), ctypes.c_void_p).value
                view = torch.frombuffer((ctypes.c_float * (m * vocab)).from_address(address),
                                        dtype=torch.float32).view(m, vocab)
                parts.append(view if c1 == n else view.clone())  # the next decode overwrites it
        return parts[0] if len(parts) == 1 else torch.cat(parts)

    def token_seconds(self) -> float:
        """Seconds of one one-token evaluation, measured once: the second of two evaluations
        of token 0 appended at the end of the cache, then removed (the first touches the
        weights). The estimate a schedule needs before this model has drafted."""
        if self._token_seconds is None:
            llm, times = self.llm, []
            held = llm.n_tokens
            if held >= llm.n_ctx() - 1:
                return 0.0
            for _ in range(2):
                t0 = time.perf_counter()
                self._decode([0] * (held + 1), held, held)
                times.append(time.perf_counter() - t0)
                if not self._remove_from(held):
                    self._clear()
                    self.fallbacks += 1
                    llm.n_tokens, self.ids = 0, []
                    held = 0
            self._token_seconds = times[-1]
        return self._token_seconds


def _check_pair(draft, target) -> None:
    """Two `Llama`s that can draft for each other: two instances (each holds its KV cache)
    with one vocabulary."""
    if draft is target:
        raise ValueError("spec_verify.llama_cpp: draft and target are the same Llama instance; each needs its "
                         "own KV cache (load the model twice)")
    if draft.n_vocab() != target.n_vocab():
        raise ValueError(f"spec_verify.llama_cpp: the draft's vocabulary has {draft.n_vocab()} tokens, the "
                         f"target's {target.n_vocab()}; speculative decoding needs one vocabulary")


# The adapter's functions, written once for both adapters (_adapters.py).
logits_steps, speculative_decoder, prompt_lookup_decoder, suffix_decoder = adapter_functions(ModelInterface(
    name="llama_cpp", module=__name__, model="`llama_cpp.Llama`", cached=CachedLlama, check_pair=_check_pair))
