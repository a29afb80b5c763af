"""What the two model adapters (`transformers.py`, `llama_cpp.py`) share: the common-prefix
search each cache uses to keep what it already holds, the small model interface each adapter
supplies (`ModelInterface`), and the adapters' functions, written once over it
(`adapter_functions`): `logits_steps`, `speculative_decoder`, `prompt_lookup_decoder` and
`suffix_decoder`, with the same arguments and defaults in `sv.llama_cpp` and `sv.transformers`.

The defaults: k = 4 with a draft model (a draft step costs a model evaluation, and the
adaptive schedule proposes fewer where longer proposals do not pay); k = 16 without one
(`PromptLookup`, `SuffixDrafter`: a proposal costs no model, and 16 ran faster than 8 on every
cost curve simulated in benchmarks/results/e2e-simulated-amd-epyc.md, on both drafters);
method "token" (block verification accepts at least as many tokens but reads every
position); the adaptive schedule.

`tree_decoder` is not among them: it needs a model that scores a whole tree in one call
(`CachedCausalLM.tree_logits`, with a 4-D attention mask), which the llama.cpp wrapper does
not offer, so it lives in `transformers.py` alone. For the same reason `suffix_decoder`'s
`tree=True` works where the interface supplies a `tree_decoder` (transformers) and is refused,
before any model is touched, where it does not (llama.cpp).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, List, NamedTuple, Optional, Tuple

import torch

from ._api import _flag
from ._decoding import Decoder, _method
from ._suffix_tree import SuffixTreeDrafter, TreeSchedule
from ._warping import Warping
from .decoder import SpeculativeDecoder
from .prompt_lookup import PromptLookup
from .schedule import schedule_arg
from .suffix import SuffixDrafter, _positive


def _common_prefix(a: List[int], b: List[int]) -> int:
    # Binary search over slice comparisons: O(len) element compares in C, log(len) steps
    # in Python, where a plain loop would cost a Python step per token every round.
    lo, hi = 0, min(len(a), len(b))
    if a[:hi] == b[:hi]:
        return hi
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if a[lo:mid] == b[lo:mid]:
            lo = mid
        else:
            hi = mid - 1
    return lo


@dataclass(frozen=True)
class ModelInterface:
    """What an adapter supplies for its models: a wrapper that keeps a model's KV cache.

    Attributes:
        name (`str`): the adapter's name in messages ("llama_cpp": "spec_verify.llama_cpp.
            speculative_decoder: top_p must be ...").
        module (`str`): the adapter module's `__name__`; its functions say they belong to it.
        model (`str`): how the docstrings name a model ("`llama_cpp.Llama`").
        cached (`type`): the wrapper, `cached(model, what)` with `what` "draft" or "target":
            `logits(seq, first, keep=None)` returns float32 `[len(seq) - first, V]`, the
            logits after `seq[:first+1]`, ..., after `seq`, feeding only what its cache lacks
            (`keep`: no later call keeps fewer than `keep` tokens of `seq`, a hint a cache may
            use); `reset()` empties the cache. An optional `token_seconds()`, one token's cost
            measured before the model has run, is handed to the schedule.
        check_pair (`Callable`): `check_pair(draft_model, target_model)` raises `ValueError`
            for two models that cannot draft for each other (one `Llama` twice: one KV cache).
        tree_decoder (`Callable`, *optional*): for a model that scores a tree of tokens in one
            call, `tree_decoder(what, target_model, draft_tree, warping, generator)` returns a
            `TreeDecoder` over it (`what` prefixes its messages, `warping` a `Warping`), with
            its wrapper as `target_cache`; None (llama.cpp): `suffix_decoder(tree=True)` is
            refused.
    """

    name: str
    module: str
    model: str
    cached: type
    check_pair: Callable[[Any, Any], None]
    tree_decoder: Optional[Callable] = None


class AdapterFunctions(NamedTuple):
    """An adapter's functions, made by `adapter_functions`."""

    logits_steps: Callable
    speculative_decoder: Callable
    prompt_lookup_decoder: Callable
    suffix_decoder: Callable


def _target_logits_step(target, verified: Optional[List[int]] = None) -> Callable:
    """The target_logits_step of `from_logits` over a model wrapper; with `verified`, it tells
    the draft step the verified prefix's length (the draft's calls of the next round
    continue it, so its sliding-window layers need keep no more)."""
    def target_logits_step(prefix: List[int], proposed: torch.Tensor) -> torch.Tensor:
        if verified is not None:
            verified[0] = len(prefix)
        # keep: the next round's prefix extends this one. prefix: the loop's own copy.
        return target.logits(prefix + proposed.tolist(), len(prefix) - 1, keep=len(prefix))
    target_logits_step.model = target
    return target_logits_step


def _documented(function: Callable, interface: ModelInterface) -> Callable:
    # The function as the adapter module's own: its name, module and docstring there.
    function.__module__ = interface.module
    function.__qualname__ = function.__name__
    function.__doc__ = function.__doc__.format(model=interface.model, cached=interface.cached.__name__,
                                               name=interface.name)
    return function


def adapter_functions(interface: ModelInterface) -> AdapterFunctions:
    """The functions every adapter offers, over one model interface.

    Args:
        interface (`ModelInterface`): what the adapter supplies.

    Returns:
        `AdapterFunctions`: `logits_steps`, `speculative_decoder`, `prompt_lookup_decoder`
        and `suffix_decoder`, documented for the adapter's models.
    """
    cached = interface.cached

    def what(function: str) -> str:
        return f"spec_verify.{interface.name}.{function}"

    def logits_steps(draft_model, target_model) -> Tuple[Callable, Callable]:
        """The two logits callbacks of `SpeculativeDecoder.from_logits` for two models.

        Args:
            draft_model ({model}): the draft model.
            target_model ({model}): the target model, with the draft's vocabulary.

        Returns:
            `Tuple[Callable, Callable]`: `(draft_logits_step, target_logits_step)`:
            `draft_logits_step(seq)` -> float32 `[V]`, `target_logits_step(prefix, proposed)`
            -> float32 `[k+1, V]`. Each has a `.model` attribute, its `{cached}` (tokens fed,
            `reset()`).

        Raises:
            ValueError: two models that cannot draft for each other (see `{cached}`).
        """
        interface.check_pair(draft_model, target_model)
        draft, target = cached(draft_model, "draft"), cached(target_model, "target")
        verified = [0]  # the last verified prefix's length, told by the target step

        def draft_logits_step(seq: List[int]) -> torch.Tensor:
            return draft.logits(seq, len(seq) - 1, keep=min(verified[0], len(seq) - 1))[0]

        draft_logits_step.model = draft
        if callable(getattr(draft, "token_seconds", None)):  # for the schedule, before the draft has run
            draft_logits_step.token_seconds = draft.token_seconds
        return draft_logits_step, _target_logits_step(target, verified)

    def speculative_decoder(
        draft_model,
        target_model,
        k: int = 4,
        *,
        temperature: float = 1.0,
        top_k: int = 0,
        top_p: float = 1.0,
        min_p: float = 0.0,
        generator: Optional[torch.Generator] = None,
        method: str = "token",
        schedule="adaptive",
    ) -> SpeculativeDecoder:
        """A `SpeculativeDecoder` over two models, each with its KV cache (`{cached}`).

        The decoder warps both models' logits with the same parameters, samples the draft
        tokens (`sample`) and verifies them (`accept_logits`): the output has the law of the
        target sampled with `temperature`, `top_k`, `top_p` and `min_p` (transformers'
        warpers, except that a tie group at the top-p cutoff is kept whole). `temperature` 0
        gives the target's greedy decoding.

        Args:
            draft_model ({model}): the draft model.
            target_model ({model}): the target model, with the draft's vocabulary.
            k (`int`, *optional*, defaults to 4): the most draft tokens per round (each costs
                a draft model evaluation).
            temperature (`float`, *optional*, defaults to 1.0): >= 0; 0 = greedy.
            top_k (`int`, *optional*, defaults to 0): >= 0; 0 = off.
            top_p (`float`, *optional*, defaults to 1.0): in (0, 1]; 1 = off.
            min_p (`float`, *optional*, defaults to 0.0): in [0, 1); 0 = off.
            generator (`torch.Generator`, *optional*): the generator of every draw.
            method (`str`, *optional*, defaults to `"token"`): `"token"` or `"block"`
                verification.
            schedule (`str` or `AdaptiveSchedule`, *optional*, defaults to `"adaptive"`): each
                round's proposal length from measured costs (`spec_verify.schedule`): the
                draft model runs only where drafting is estimated to pay, and not at all where
                even drafts that are always accepted could not. `"constant"`: k every round
                (transformers' `num_assistant_tokens_schedule="constant"`).

        Returns:
            `SpeculativeDecoder`: call `generate(prompt_ids, max_new, eos_token_id)` or
            `stream`. Its attributes `draft_cache` and `target_cache` are the two `{cached}`s.

        Raises:
            TypeError, ValueError: a bad warping parameter, before any model is wrapped
                ("spec_verify.{name}.speculative_decoder: top_p must be ..."); as
                `logits_steps`; as `SpeculativeDecoder.from_logits`.
        """
        # The parameters are checked before any model is wrapped.
        warping = Warping(temperature, top_k, top_p, min_p, what=what("speculative_decoder"))
        draft_logits_step, target_logits_step = logits_steps(draft_model, target_model)
        dec = SpeculativeDecoder._from_warping(what("speculative_decoder"), draft_logits_step, target_logits_step, k,
                                               warping, generator, None, method, schedule)
        dec.draft_cache, dec.target_cache = draft_logits_step.model, target_logits_step.model
        return dec

    def _without_draft_model(name: str, target_model, drafter, k, warping: Warping, generator, method, schedule):
        # A drafter of tokens proposes, the target verifies one-hot drafts (from_logits).
        target_logits_step = _target_logits_step(cached(target_model, "target"))
        dec = SpeculativeDecoder._from_warping(what(name), None, target_logits_step, k, warping, generator, drafter,
                                               method, schedule)
        dec.target_cache, dec.drafter = target_logits_step.model, drafter
        return dec

    def prompt_lookup_decoder(
        target_model,
        k: int = 16,
        *,
        max_ngram: int = 3,
        min_ngram: int = 1,
        temperature: float = 1.0,
        top_k: int = 0,
        top_p: float = 1.0,
        min_p: float = 0.0,
        generator: Optional[torch.Generator] = None,
        method: str = "token",
        schedule="adaptive",
    ) -> SpeculativeDecoder:
        """A `SpeculativeDecoder` without a draft model: `PromptLookup` proposes 0..k tokens
        copied from earlier in the text, the target verifies them as one-hot drafts through its
        KV cache (`{cached}`: a round feeds the emitted token and the proposals).

        The output has the law of the target sampled with `temperature`, `top_k`, `top_p` and
        `min_p`; `temperature` 0 gives the target's greedy decoding, token for token.

        Args:
            target_model ({model}): the target model.
            k (`int`, *optional*, defaults to 16): at most this many proposed tokens per round
                (the schedule verifies as many as pay; 16 ran faster than 8 on every cost curve
                simulated in benchmarks/results/e2e-simulated-amd-epyc.md).
            max_ngram, min_ngram: `PromptLookup`'s n-gram sizes.
            temperature, top_k, top_p, min_p, generator, method: as for `speculative_decoder`.
            schedule (`str` or `AdaptiveSchedule`, *optional*, defaults to `"adaptive"`): as for
                `speculative_decoder`; while proposing does not pay, the lookup's proposals are
                only compared with the tokens that follow (no target cost).

        Returns:
            `SpeculativeDecoder`: with `target_cache` (the `{cached}`) and `drafter` (the
            `PromptLookup`).

        Raises:
            TypeError, ValueError: as `PromptLookup` and `SpeculativeDecoder.from_logits`.
        """
        warping = Warping(temperature, top_k, top_p, min_p, what=what("prompt_lookup_decoder"))
        return _without_draft_model("prompt_lookup_decoder", target_model,
                                    PromptLookup(max_ngram=max_ngram, min_ngram=min_ngram), k, warping, generator,
                                    method, schedule)

    def suffix_decoder(
        target_model,
        k: int = 16,
        *,
        cache=None,
        tree: bool = False,
        max_depth: int = 24,
        min_token_prob: float = 0.1,
        max_spec_factor: Optional[float] = None,
        max_spec_offset: int = 0,
        temperature: float = 1.0,
        top_k: int = 0,
        top_p: float = 1.0,
        min_p: float = 0.0,
        generator: Optional[torch.Generator] = None,
        method: str = "token",
        schedule="adaptive",
    ) -> Decoder:
        """A decoder without a draft model that proposes from the current request and from
        earlier requests' outputs: a `SpeculativeDecoder` whose `SuffixDrafter` proposes 0..k
        tokens, verified as one-hot drafts, or with `tree=True` a `TreeDecoder` whose
        `SuffixTreeDrafter` proposes a tree of up to k nodes where several continuations are
        likely. Call `generate` once per request: each finished request's output goes into
        the cache, which persists across `generate` calls (and across decoders given the same
        `SuffixCache`). The adaptive schedule verifies only the positions (the nodes) whose
        estimated acceptance (calibrated as it goes) pays on the measured cost curve: where
        scoring positions is steep, a chain or nothing; where it is flat, side branches too.

        Args:
            target_model ({model}): the target model.
            k (`int`, *optional*, defaults to 16): at most this many proposed tokens per round
                (as `prompt_lookup_decoder`); with `tree=True`, the most nodes a tree has
                (`SuffixTreeDrafter`'s `max_nodes`), in [1, 1024].
            cache (`SuffixCache`, `None` or `False`, *optional*): the cache of earlier outputs:
                None makes one for this decoder, a `SuffixCache` is shared, False: none.
            tree (`bool`, *optional*, defaults to False): propose trees and verify them with
                the tree rule (as `spec_verify.transformers.tree_decoder(target_model,
                draft_tree=SuffixTreeDrafter(cache, ...))` does). Needs a model that scores a
                tree of tokens in one call: the transformers adapter's, not llama.cpp's.
            max_depth, min_token_prob, max_spec_offset: `SuffixDrafter`'s (and
                `SuffixTreeDrafter`'s).
            max_spec_factor (`float` or `None`, *optional*): the length cap's factor, >= 0;
                None (the default): the drafter's own, for chains `SuffixDrafter`'s (4 or 1 by
                the measured cost curve), for trees `SuffixTreeDrafter`'s (4).
            temperature, top_k, top_p, min_p, generator: as for `prompt_lookup_decoder`.
            method (`str`, *optional*, defaults to `"token"`): as for `prompt_lookup_decoder`;
                with `tree=True` only `"token"` (a tree is verified by the tree rule).
            schedule (`str`, `AdaptiveSchedule` or `TreeSchedule`, *optional*, defaults to
                `"adaptive"`): as for `prompt_lookup_decoder`; with `tree=True`, `"adaptive"`
                (a `TreeSchedule` of the drafter's own), `"constant"` (the whole tree every
                round) or a `TreeSchedule`.

        Returns:
            `SpeculativeDecoder` (or `TreeDecoder` with `tree=True`): with `target_cache` (the
            `{cached}`) and `drafter` (the `SuffixDrafter` or `SuffixTreeDrafter`; its `cache`
            the `SuffixCache`).

        Raises:
            TypeError: `tree` not a bool; as `SuffixDrafter` and `SpeculativeDecoder.from_logits`
                (`SuffixTreeDrafter` and `TreeDecoder.from_logits` with `tree=True`).
            ValueError: `tree=True` on an adapter whose model cannot score a tree in one call
                (llama.cpp), before the model is touched; with `tree=True`, `method="block"` or
                k outside [1, 1024]; as the above.
        """
        name = what("suffix_decoder")
        warping = Warping(temperature, top_k, top_p, min_p, what=name)
        tree = _flag(tree, f"{name}: tree")
        # None: the drafter's own default length cap (a chain's by the cost curve, a tree's 4).
        knobs = dict(max_depth=max_depth, min_token_prob=min_token_prob, max_spec_offset=max_spec_offset)
        if max_spec_factor is not None:
            knobs["max_spec_factor"] = max_spec_factor
        if not tree:
            drafter = SuffixDrafter(cache, **knobs)
            return _without_draft_model("suffix_decoder", target_model, drafter, k, warping, generator, method,
                                        schedule)
        if interface.tree_decoder is None:
            raise ValueError(f"{name}: tree=True needs a model that scores a tree of tokens in one call, and "
                             f"{interface.model.strip('`')} cannot (each call scores one sequence); use tree=False "
                             f"(the chain), or a transformers model with spec_verify.transformers.suffix_decoder")
        k = _positive(k, f"{name}: k", 1, SpeculativeDecoder.MAX_K)
        if _method(name, method) != "token":
            raise ValueError(f"{name}: method={method!r} chooses a chain's verification rule; tree=True verifies "
                             f"trees with the tree rule (leave method=\"token\")")
        schedule = schedule_arg(name, schedule, TreeSchedule, "a")
        drafter = SuffixTreeDrafter(cache, max_nodes=k, schedule=schedule, **knobs)
        dec = interface.tree_decoder(name, target_model, drafter, warping, generator)
        dec.drafter = drafter
        return dec

    return AdapterFunctions(*(_documented(f, interface) for f in (logits_steps, speculative_decoder,
                                                                     prompt_lookup_decoder, suffix_decoder)))
