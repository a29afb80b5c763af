"""The uniforms of the ops that sample, drawn from torch.Generators: the one place they are drawn.

The ops draw nothing (torch-ext/common/ops.h): each that samples takes its uniforms, float64,
where it took a generator. This module turns a call with a generator into a call with
uniforms, in both builds alike:
- it draws exactly the stream `torch.rand(n, dtype=torch.float64, generator=g)` gives (one
  float64 per uniform, in order: K+1 for a round, one per row for `sample`, N+1 for a tree),
  from the default CPU generator when none is given; nothing where the op draws nothing
  (temperature 0, greedy: the op then gets None);
- a batch's sampled sequences draw K_b + 1 each, in batch order, each from its own generator
  (generators[b] when given and not None, else `generator`, else the default one), once its
  running totals are known to be what the op accepts: totals it refuses (negative, decreasing,
  absurd) draw nothing and go to the op, which names what is wrong;
- each generator is locked (`_lock`) across the save, the draw, the op and the restore, and a
  call that raises puts every generator it drew from back, so it changes nothing and no other
  call of this package draws from that generator in between (with a generator shared between
  threads, calls interleave whole; tests/test_shared_generators.py).

Given uniforms (the *_with_uniforms functions) go to the op as they are; the op checks them
even where unused, and its messages then name the *_with_uniforms function (`_errors`).

Each adapter takes the arguments the wrappers pass (the op's arguments with `generator`,
and `uniforms` for the *_with_uniforms calls, where the op had them before it took uniforms)
and calls `native`, the op's builtin in eager calls or its OpOverload, which torch.compile
traces: there the uniforms are drawn in the graph (torch.rand), with no lock or restore.
"""
from __future__ import annotations

import threading

import torch

from ._errors import api_error

_float64 = torch.float64
_rand = torch.rand
_default_generator = torch.default_generator
_is_compiling = torch.compiler.is_compiling

# A fixed set of locks, a generator's chosen by its seed: a lock per generator without a table
# that grows with the generators a process makes (torch.Generator takes no attribute and no
# weak reference), and not by the Python object's identity (two Python objects can hold one
# generator). Two generators with seeds alike mod 64 share a lock and only wait on each other;
# a generator reseeded while another thread's call uses it is not covered. A thread drawing
# from the generator outside this package (torch.rand(..., generator=g)) holds none of these.
_LOCKS = tuple(threading.Lock() for _ in range(64))


def _lock(g) -> threading.Lock:
    return _LOCKS[g.initial_seed() % len(_LOCKS)]


def draw(count, generator=None) -> torch.Tensor:
    """`count` float64 uniforms (a shape: () for one as a 0-d tensor) from `generator` (None:
    the default CPU generator): the stream every op's uniforms come from."""
    return _rand(count, dtype=_float64, generator=generator)


def _check_cpu(op: str, g, what: str = "generator") -> None:
    if g.device.type != "cpu":
        raise ValueError(f"spec_verify.{op}: {what} must be a CPU torch.Generator, got one on {g.device}")


def _drawn(call, count, generator, op: str):
    """call(uniforms) with `count` uniforms drawn from generator (call(None) when count is 0),
    the generator locked throughout and put back if the call raises."""
    if count == 0:
        return call(None)
    if _is_compiling():
        return call(draw(count, generator))
    gen = _default_generator if generator is None else generator
    _check_cpu(op, gen)
    with _lock(gen):
        state = gen.get_state()
        uniforms = draw(count, gen)
        try:
            return call(uniforms)
        except BaseException:
            gen.set_state(state)
            raise


def _run(call, count, generator, op: str, given: bool):
    """`_drawn`, or call(None) with the uniforms given (call already holds them); the op's
    errors as the Python API raises them."""
    try:
        return call(None) if given else _drawn(call, count, generator, op)
    except (RuntimeError, ValueError, TypeError) as e:
        error = api_error(e, op if given else None)
        if error is None:
            raise
        raise error from None


def _rows(t) -> int:
    # The rows of a 2-D tensor (the op refuses anything else before it reads a uniform); a
    # nested or quantized tensor: nothing drawn, the op's refusal (_layouts.py) names it.
    if not isinstance(t, torch.Tensor) or t.dim() != 2 or t.is_nested or t.is_quantized:
        return 0
    return t.shape[0]


def accept(native):
    def call(target_probs, draft_probs, draft_tokens, generator=None, method="token", uniforms=None):
        return _run(lambda u: native(target_probs, draft_probs, draft_tokens, uniforms if u is None else u, method),
                    _rows(target_probs), generator, "accept", uniforms is not None)
    return call


def sample(native):
    def call(logits, temperature=1.0, top_k=0, top_p=1.0, min_p=0.0, generator=None, uniforms=None):
        count = 0
        if temperature != 0 and isinstance(logits, torch.Tensor):
            count = () if logits.dim() == 1 and not (logits.is_nested or logits.is_quantized) else _rows(logits)
        return _run(lambda u: native(logits, temperature, top_k, top_p, min_p, uniforms if u is None else u),
                    count, generator, "sample", uniforms is not None)
    return call


def accept_logits(native):
    def call(target_logits, draft_logits, draft_tokens, temperature=1.0, top_k=0, top_p=1.0, min_p=0.0,
             generator=None, method="token", uniforms=None):
        return _run(lambda u: native(target_logits, draft_logits, draft_tokens, temperature, top_k, top_p, min_p,
                                     uniforms if u is None else u, method),
                    0 if temperature == 0 else _rows(target_logits), generator, "accept_logits", uniforms is not None)
    return call


def verify_tree(native):
    def call(target_logits, tokens, parents, draft_logits=None, temperature=1.0, top_k=0, top_p=1.0, min_p=0.0,
             generator=None, uniforms=None):
        return _run(lambda u: native(target_logits, tokens, parents, draft_logits, temperature, top_k, top_p, min_p,
                                     uniforms if u is None else u),
                    0 if temperature == 0 else _rows(target_logits), generator, "verify_tree", uniforms is not None)
    return call


def verify_tree_probs(native):
    def call(target_probs, tokens, parents, draft_probs=None, greedy=False, generator=None, uniforms=None):
        return _run(lambda u: native(target_probs, tokens, parents, draft_probs, greedy, uniforms if u is None else u),
                    0 if greedy else _rows(target_probs), generator, "verify_tree_probs", uniforms is not None)
    return call


def _batch_plan(op, cu, draft_tokens, greedy, generator, generators):
    """(generator, K_b + 1) per sampled sequence, in batch order; None when the running totals
    or the greedy flags are malformed (the op names what is wrong, nothing drawn)."""
    try:
        if not (isinstance(cu, torch.Tensor) and cu.dim() == 1 and not cu.dtype.is_floating_point
                and isinstance(draft_tokens, torch.Tensor) and draft_tokens.dim() == 1):
            return None
        totals = cu.tolist()
        flags = greedy(len(totals))
    except Exception:  # malformed arguments: the op's checks say what is wrong
        return None
    before = 0
    for total in totals:  # non-negative, never decreasing, ending at N: at most N + B uniforms
        if total < before:
            return None
        before = total
    if flags is None or before != draft_tokens.shape[0]:
        return None
    if generator is not None:
        _check_cpu(op, generator)
    if generators is not None:
        if len(generators) != len(totals):
            raise ValueError(f"spec_verify.{op}: generators must hold B = {len(totals)} entries (one per sequence, "
                             f"None for `generator`), got {len(generators)}")
        for b, g in enumerate(generators):
            if g is not None:
                _check_cpu(op, g, f"generators[{b}]")
    plan, before = [], 0
    for b, total in enumerate(totals):
        k, before = total - before, total
        if not flags[b]:
            g = generators[b] if generators is not None and generators[b] is not None else generator
            plan.append((_default_generator if g is None else g, k + 1))
    return plan


def _batch_drawn(call, plan):
    """call(uniforms) with every sampled sequence's uniforms, each from its generator, every
    generator locked (in the locks' order: two calls sharing generators never wait on each
    other's) and put back if the call raises."""
    if not plan:
        return call(None)
    locks = sorted({id(lock): lock for lock in (_lock(g) for g, _ in plan)}.items())
    for _, lock in locks:
        lock.acquire()
    try:
        saved = {}
        for g, _ in plan:
            if id(g) not in saved:
                saved[id(g)] = (g, g.get_state())
        try:
            return call(torch.cat([draw(n, g) for g, n in plan]))
        except BaseException:
            for g, state in saved.values():
                g.set_state(state)
            raise
    finally:
        for _, lock in reversed(locks):
            lock.release()


def _traced_count(cu, n, sampled):
    """Under torch.compile: the batch's count, sum of K_b + 1 over the sampled sequences, which
    depends on the values of `cu` and `sampled` (a [B] bool tensor, or None: every sequence),
    as a size the graph carries (the length of a nonzero), so the draw is the eager one."""
    if sampled is None:
        return n + cu.shape[0]
    ks = torch.diff(cu, prepend=cu.new_zeros(1))
    count = ((ks + 1) * sampled).sum()
    return torch.nonzero(torch.arange(n + cu.shape[0]) < count).shape[0]


def _batch_run(call, op, cu, draft_tokens, greedy, sampled, generator, generators):
    if _is_compiling():
        if generators is not None:
            raise NotImplementedError(f"spec_verify.{op}: per-sequence generators under torch.compile")
        # torch.rand is empty(...).uniform_(0, 1): the same stream, with a size the graph carries.
        count = _traced_count(cu, draft_tokens.shape[0], sampled())
        return call(torch.empty(count, dtype=_float64).uniform_(0.0, 1.0, generator=generator))
    try:
        plan = _batch_plan(op, cu, draft_tokens, greedy, generator, generators)
        return call(None) if plan is None else _batch_drawn(call, plan)
    except RuntimeError as e:
        error = api_error(e)
        if error is None:
            raise
        raise error from None


def verify_batch(native):
    def call(target_logits, draft_tokens, cu_num_draft_tokens, draft_logits=None, temperature=None, top_k=None,
             top_p=None, min_p=None, method="token", generator=None, generators=None):
        def greedy(batch):
            if temperature is None:
                return [False] * batch
            if not (isinstance(temperature, torch.Tensor) and temperature.dim() == 1
                    and temperature.shape[0] == batch and temperature.dtype != torch.bool):
                return None
            return [t == 0 for t in temperature.double().tolist()]
        return _batch_run(lambda u: native(target_logits, draft_tokens, cu_num_draft_tokens, draft_logits, temperature,
                                           top_k, top_p, min_p, method, u),
                          "verify_batch", cu_num_draft_tokens, draft_tokens, greedy,
                          lambda: None if temperature is None else temperature != 0, generator, generators)
    return call


def verify_batch_probs(native):
    def call(target_probs, draft_tokens, cu_num_draft_tokens, draft_probs=None, greedy=None, method="token",
             generator=None, generators=None):
        def flags(batch):
            if greedy is None:
                return [False] * batch
            if not (isinstance(greedy, torch.Tensor) and greedy.dim() == 1 and greedy.shape[0] == batch
                    and greedy.dtype == torch.bool):
                return None
            return greedy.tolist()
        return _batch_run(lambda u: native(target_probs, draft_tokens, cu_num_draft_tokens, draft_probs, greedy,
                                           method, u),
                          "verify_batch_probs", cu_num_draft_tokens, draft_tokens, flags,
                          lambda: None if greedy is None else ~greedy, generator, generators)
    return call


# The adapter of each op that samples, by op name (the _ints twins draw as their ops).
ADAPTERS = {"accept": accept, "sample": sample, "accept_logits": accept_logits, "verify_tree": verify_tree,
            "_verify_tree_ints": verify_tree, "verify_tree_probs": verify_tree_probs,
            "_verify_tree_probs_ints": verify_tree_probs, "verify_batch": verify_batch,
            "verify_batch_probs": verify_batch_probs}
