"""What the stable-ABI build (torch-stable-abi213-*, torch-ext/stable/) leaves to Python.

The LibTorch stable ABI of torch 2.13 passes a `Generator?` argument to a kernel as a handle
and its device, and no more: a kernel cannot draw from it, nor save and restore its state.
So in that build the nine ops that take a generator get their CPU kernels here. Unless the
call gives its `uniforms` (the Python API's *_with_uniforms), each draws the op's uniforms
from the generator as torch_binding.cpp draws them (one float64 per uniform, in
order: the stream `torch.rand(n, dtype=torch.float64, generator=g)` gives), calls the op's
native `_drawn_` form with them (the op's checks, in its order, and its messages), and puts
the generator back as it was when that call raises; nothing is drawn where the op draws
nothing (temperature 0, greedy). The results and the generator afterwards are those of
torch_binding.cpp's ops, bit for bit.

Put back, never undone for another thread: each generator's save, draw, op and restore run
under its lock (`_lock`), as the native binding holds the generator's own mutex across them,
so no other call of this package draws from that generator in between and a restore can only
undo the raising call's own draws. What decides how many uniforms are drawn (a batch's running
totals) is checked before anything is drawn or allocated: malformed totals go to the op
undrawn, which refuses them with its ValueError.

Nor can a stable kernel raise a TypeError: its type errors (a dtype, a layout) arrive as
RuntimeErrors with the same text. `typed` turns those back into TypeErrors for the Python
API; calling an op of `ops` directly shows the RuntimeError.

In the version-specific builds (torch212-*, torch213-* from torch_binding.cpp) nothing here
is used: `is_stable` is False.
"""
from __future__ import annotations

import re
import threading

import torch

_EMPTY = torch.empty(0, dtype=torch.float64)
_float64 = torch.float64
_rand = torch.rand
_default_generator = torch.default_generator

# A fixed set of locks, a generator's chosen by its seed: a lock per generator without a table
# that grows with the generators a process makes (torch.Generator takes no attribute and no
# weak reference). Not by the Python object's identity: a call through the dispatcher (list
# tokens, method="block", ops.* called directly) hands the kernel a new Python object for the
# same generator. Two generators with seeds alike mod 64 share a lock and only wait on each
# other; a generator reseeded while another thread's call uses it is not covered.
_LOCKS = tuple(threading.Lock() for _ in range(64))


def _lock(g) -> threading.Lock:
    return _LOCKS[g.initial_seed() % len(_LOCKS)]


def is_stable(ops) -> bool:
    """Whether `ops` is the stable-ABI build's op namespace (it has the `_drawn_` forms)."""
    try:
        ops._drawn_accept
    except (AttributeError, RuntimeError):
        return False
    return True


# The stable binding's type errors, the only "spec_verify." RuntimeErrors it throws on purpose
# (SV_CHECK_TYPE in torch-ext/stable/: a dtype or a layout).
_TYPE_ERROR = re.compile(r"^spec_verify\.\w+: \w+ must (have (an integer|a real \(not bool\)) dtype, got |"
                         r"have dtype \S+(, \S+)*( or \S+)?, got |be a dense \(strided\) tensor, got layout )")


def typed(fn):
    """`fn` with the stable build's errors as the Python API raises them: its type errors
    (RuntimeErrors "spec_verify....") as TypeErrors. Torch 2.13 and 2.14 hand its value errors
    (std::invalid_argument) to Python as ValueErrors; torch 2.15 turns every exception of a
    stable kernel into a RuntimeError with the same text, so there the text tells them apart."""
    def call(*args, **kwargs):
        try:
            return fn(*args, **kwargs)
        except RuntimeError as e:
            message = str(e)
            if message.startswith(("spec_verify.", "spec_verify:")):
                raise (TypeError if _TYPE_ERROR.match(message) else ValueError)(message) from None
            raise
    call.__name__ = getattr(fn, "__name__", "op")
    call.__wrapped__ = fn
    return call


def _rows(t) -> int:
    # The rows of a 2-D tensor (the op's checks reject anything else before they draw).
    # A nested or quantized tensor: nothing drawn; the op's refusal (_layouts.py) names it.
    if not isinstance(t, torch.Tensor) or t.dim() != 2 or t.is_nested or t.is_quantized:
        return 0
    return t.shape[0]


def _call(drawn, count, generator, args):
    """drawn(*args, uniforms) with `count` uniforms from generator (None: the default one).
    The op gets the generator as given (its device check; a torch function mode sees it)."""
    gen = _default_generator if generator is None else generator
    if count == 0 or gen.device.type != "cpu":
        # Nothing to draw, or the op's own checks raise (a generator off the CPU among them).
        return drawn(*args, _EMPTY)
    with _lock(gen):
        state = gen.get_state()
        uniforms = _rand(count, dtype=_float64, generator=gen)
        try:
            return drawn(*args, uniforms)
        except BaseException:
            gen.set_state(state)
            raise


def _batch_call(drawn, args, cu, greedy_of, generator, generators):
    """A batch op's `_drawn_` form with every sampled sequence's K_b + 1 uniforms, in batch
    order, each from its generator (generators[b], else `generator`, else the default one);
    every generator involved is put back if the call raises."""
    try:
        totals = cu.tolist() if isinstance(cu, torch.Tensor) and cu.dim() == 1 and not cu.dtype.is_floating_point else None
        batch = len(totals) if totals is not None else 0
        greedy = greedy_of(batch)
        if totals is None or greedy is None or (generators is not None and len(generators) != batch):
            totals = None
    except Exception:  # malformed arguments: the op's checks say what is wrong
        totals = None
    if totals is None or not _valid_totals(totals, args[1]):
        return drawn(*args, _EMPTY)
    plan = []  # (generator, count) per sampled sequence
    before = 0
    for b, total in enumerate(totals):
        k, before = total - before, total
        if greedy[b]:
            continue
        g = generators[b] if generators is not None and generators[b] is not None else generator
        g = _default_generator if g is None else g
        if not isinstance(g, torch.Generator) or g.device.type != "cpu" or k < 0:
            return drawn(*args, _EMPTY)
        plan.append((g, k + 1))
    if not plan:
        return drawn(*args, _EMPTY)
    # Every generator's lock, in the locks' order (two calls sharing generators never wait on
    # each other's), held across the save, the draw, the op and the restore.
    locks = sorted({id(lock): lock for lock in (_lock(g) for g, _ in plan)}.items())
    for _, lock in locks:
        lock.acquire()
    try:
        saved = {}
        for g, _ in plan:
            if id(g) not in saved:
                saved[id(g)] = (g, g.get_state())
        try:
            uniforms = torch.cat([_rand(n, dtype=_float64, generator=g) for g, n in plan])
            return drawn(*args, uniforms)
        except BaseException:
            for g, state in saved.values():
                g.set_state(state)
            raise
    finally:
        for _, lock in reversed(locks):
            lock.release()


def _valid_totals(totals, draft_tokens) -> bool:
    """Whether the running totals are what the op accepts (non-negative, never decreasing,
    ending at N = len(draft_tokens)), so that the uniforms they ask for, at most N + B, are
    bounded by the inputs. Else nothing is drawn: the op's checks name what is wrong."""
    if not (isinstance(draft_tokens, torch.Tensor) and draft_tokens.dim() == 1):
        return False
    before = 0
    for total in totals:
        if total < before:
            return False
        before = total
    return before == draft_tokens.shape[0]


def kernels(ops) -> dict:
    """The Python kernels of the ops that take a generator, by op name (the stable build)."""
    d = {name: typed(getattr(ops, name).default._op) for name in (
        "_drawn_accept", "_drawn_sample", "_drawn_accept_logits",
        "_drawn_verify_tree", "_drawn_verify_tree_probs", "_drawn_verify_tree_ints",
        "_drawn_verify_tree_probs_ints", "_drawn_verify_batch", "_drawn_verify_batch_probs")}

    # Given `uniforms` (the *_with_uniforms calls), nothing is drawn: the op's _drawn_ form
    # checks and uses them.
    def accept(target_probs, draft_probs, draft_tokens, generator=None, method="token", uniforms=None):
        return _call(d["_drawn_accept"], 0 if uniforms is not None else _rows(target_probs), generator,
                     (target_probs, draft_probs, draft_tokens, generator, method, uniforms))

    def _sample_rows(logits, temperature):
        if temperature == 0 or not isinstance(logits, torch.Tensor):
            return 0
        return 1 if logits.dim() == 1 else _rows(logits)

    def sample(logits, temperature=1.0, top_k=0, top_p=1.0, min_p=0.0, generator=None, uniforms=None):
        n = 0 if uniforms is not None else _sample_rows(logits, temperature)
        return _call(d["_drawn_sample"], n, generator, (logits, temperature, top_k, top_p, min_p, generator, uniforms))

    def accept_logits(target_logits, draft_logits, draft_tokens, temperature=1.0, top_k=0, top_p=1.0, min_p=0.0,
                      generator=None, method="token", uniforms=None):
        n = 0 if temperature == 0 or uniforms is not None else _rows(target_logits)
        return _call(d["_drawn_accept_logits"], n, generator,
                     (target_logits, draft_logits, draft_tokens, temperature, top_k, top_p, min_p, generator,
                      method, uniforms))

    def tree(drawn):
        def verify_tree(target_logits, tokens, parents, draft_logits=None, temperature=1.0, top_k=0, top_p=1.0,
                        min_p=0.0, generator=None, uniforms=None):
            n = 0 if temperature == 0 or uniforms is not None else _rows(target_logits)
            return _call(drawn, n, generator, (target_logits, tokens, parents, draft_logits, temperature, top_k, top_p,
                                               min_p, generator, uniforms))
        return verify_tree

    def tree_probs(drawn):
        def verify_tree_probs(target_probs, tokens, parents, draft_probs=None, greedy=False, generator=None,
                              uniforms=None):
            n = 0 if greedy or uniforms is not None else _rows(target_probs)
            return _call(drawn, n, generator, (target_probs, tokens, parents, draft_probs, greedy, generator, uniforms))
        return verify_tree_probs

    def verify_batch(target_logits, draft_tokens, cu_num_draft_tokens, draft_logits=None, temperature=None,
                     top_k=None, top_p=None, min_p=None, method="token", generator=None, generators=None):
        def greedy_of(batch):
            if temperature is None:
                return [False] * batch
            if not (isinstance(temperature, torch.Tensor) and temperature.dim() == 1
                    and temperature.shape[0] == batch and temperature.dtype != torch.bool):
                return None
            return [t == 0 for t in temperature.double().tolist()]
        return _batch_call(d["_drawn_verify_batch"],
                           (target_logits, draft_tokens, cu_num_draft_tokens, draft_logits, temperature, top_k,
                            top_p, min_p, method, generator, generators),
                           cu_num_draft_tokens, greedy_of, generator, generators)

    def verify_batch_probs(target_probs, draft_tokens, cu_num_draft_tokens, draft_probs=None, greedy=None,
                           method="token", generator=None, generators=None):
        def greedy_of(batch):
            if greedy is None:
                return [False] * batch
            if not (isinstance(greedy, torch.Tensor) and greedy.dim() == 1 and greedy.shape[0] == batch
                    and greedy.dtype == torch.bool):
                return None
            return greedy.tolist()
        return _batch_call(d["_drawn_verify_batch_probs"],
                           (target_probs, draft_tokens, cu_num_draft_tokens, draft_probs, greedy, method,
                            generator, generators),
                           cu_num_draft_tokens, greedy_of, generator, generators)

    return {"accept": accept, "sample": sample, "accept_logits": accept_logits,
            "verify_tree": tree(d["_drawn_verify_tree"]), "_verify_tree_ints": tree(d["_drawn_verify_tree_ints"]),
            "verify_tree_probs": tree_probs(d["_drawn_verify_tree_probs"]),
            "_verify_tree_probs_ints": tree_probs(d["_drawn_verify_tree_probs_ints"]),
            "verify_batch": verify_batch, "verify_batch_probs": verify_batch_probs}


def register(ops, add_op_namespace_prefix) -> dict:
    """Registers the Python kernels of `kernels(ops)` for the CPU (and the layouts whose
    tensors the native kernels check: sparse, mkldnn), so that `ops.<name>` works as in the
    other builds; returns them for the Python API to call directly."""
    found = kernels(ops)
    for name, fn in found.items():
        for key in ("CPU", "SparseCPU", "SparseCsrCPU", "MkldnnCPU"):
            torch.library.impl(add_op_namespace_prefix(name), key)(fn)
    return found
