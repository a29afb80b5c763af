"""spec-verify: the verification step of speculative decoding, as CPU kernels.

verify_greedy       temperature 0: the accepted prefix and the target's argmax after it.
accept              speculative (rejection) sampling; the emitted tokens have the target's law.
accept_with_uniforms  accept with its uniforms given (a pure function).
warp                the warped distribution of logits rows (temperature, top-k, top-p, min-p).
sample, sample_with_uniforms  a token per logits row from its warped distribution.
accept_logits, accept_logits_with_uniforms  accept on the warped rows of target and draft logits.
verify_tree, verify_tree_probs (+ _with_uniforms)  tree drafts: several candidate branches
                    verified in one call, greedy or exactly sampled.
verify_batch, verify_batch_probs  a ragged batch of sequences (vLLM's layout) in one call,
                    on torch.set_num_threads threads, each result that of the single-sequence op.
Decoder             the draft/verify loop over user callbacks, generate and stream; its
                    statistics are a RoundStats. Two kinds:
SpeculativeDecoder  chain rounds (or, from_logits, over two logits functions); DecodeStats its
                    statistics; AdaptiveSchedule the proposal length of each round, chosen
                    from measured costs (the default).
TreeDecoder         rounds that verify trees (or, from_logits, trees of logits rows);
                    TreeDecodeStats its statistics.
PromptLookup        a draft_step without a draft model: copies the continuation of the
                    prefix's suffix n-gram from its last earlier occurrence.
PromptLookupTree    a draft_tree: the continuations of several earlier occurrences, merged
                    into a prefix tree.
SuffixDrafter       a draft_step by suffix decoding: the most frequent continuation of the text's
                    end in the current request and in earlier requests' outputs (a SuffixCache,
                    shareable), each token with an estimate of its acceptance.
SuffixTreeDrafter   a draft_tree by the same counts: the likely continuations as a tree, cut
                    by its TreeSchedule to the nodes that pay on the measured cost curve.
transformers        speculative_decoder(draft_model, target_model, ...) for two Hugging Face
                    causal LMs, prompt_lookup_decoder(target_model, ...) and
                    suffix_decoder(target_model, ...) without a draft model (tree=True:
                    suffix trees), tree_decoder (imports transformers only when called).
llama_cpp           the same functions for llama.cpp models (GGUF, llama-cpp-python), with
                    the same arguments, all but tree_decoder and suffix_decoder's tree=True
                    (imports llama_cpp only when called).
isa, available_isas the instruction-set path in use, and those this CPU can run.
testing             check_verifier(verify): a conformance suite that holds any verifier (this
                    package's or another's) to the exact law of speculative sampling; needs
                    no op of this package.

Rows are float32, float16 or bfloat16 [*, V] tensors on the CPU, one row per position: probabilities (need not
be normalised) for verify_greedy/accept, logits for the warping ops. The verification
functions return plain Python ints (SymInts under torch.compile).
`ops` is the raw op namespace (opcheck, benchmarks); its names with a leading underscore
are internal.
"""
from . import _fakes  # noqa: F401  (registers the ops' fake implementations)
from ._batches import verify_batch, verify_batch_probs
from ._chains import _force_isa, accept, accept_with_uniforms, available_isas, isa, verify_greedy  # noqa: F401
from ._logits import accept_logits, accept_logits_with_uniforms, sample, sample_with_uniforms, warp
from ._trees import verify_tree, verify_tree_probs, verify_tree_probs_with_uniforms, verify_tree_with_uniforms
from ._ops import ops  # noqa: F401
from ._decoding import Decoder
from ._stats import DecodeStats, RoundStats, TreeDecodeStats
from .decoder import SpeculativeDecoder
from .schedule import AdaptiveSchedule
from .tree_decoder import TreeDecoder
from .prompt_lookup import PromptLookup, PromptLookupTree
from .suffix import SuffixCache, SuffixDrafter
from ._suffix_tree import SuffixTreeDrafter, TreeSchedule
from . import transformers  # noqa: F401,E402  (a module: transformers itself is imported lazily)
from . import llama_cpp  # noqa: F401,E402  (a module: llama_cpp itself is imported lazily)
from . import testing  # noqa: F401,E402  (torch only; calls no op of this package)

__all__ = [
    "verify_greedy",
    "accept",
    "accept_with_uniforms",
    "warp",
    "sample",
    "sample_with_uniforms",
    "accept_logits",
    "accept_logits_with_uniforms",
    "verify_tree",
    "verify_tree_with_uniforms",
    "verify_tree_probs",
    "verify_tree_probs_with_uniforms",
    "verify_batch",
    "verify_batch_probs",
    "Decoder",
    "SpeculativeDecoder",
    "TreeDecoder",
    "RoundStats",
    "DecodeStats",
    "AdaptiveSchedule",
    "PromptLookup",
    "PromptLookupTree",
    "SuffixDrafter",
    "SuffixCache",
    "SuffixTreeDrafter",
    "TreeSchedule",
    "TreeDecodeStats",
    "isa",
    "available_isas",
]
