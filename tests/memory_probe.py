"""Memory growth per call of each op family and decoder, measured in a fresh process.

    python tests/memory_probe.py [--calls N] [family ...]     one JSON line per family

Run as a script (tests/test_memory.py starts it in a subprocess with MALLOC_ARENA_MAX=2, so
the measured process holds nothing but the kernel and one family at a time; the script
restarts itself with glibc's thread cache off, see `heap`): each family's
call runs `warm` times (every lazy allocation done: the kernel's thread-local scratch, the
batch thread pool, torch's caches, Python's free lists), then two windows of `calls` calls;
before each reading CPython's type attribute cache is cleared (see `blocks`), the garbage
collector runs and `malloc_trim(0)` returns free heap pages.
Three readings per family, each the least over the windows of its difference divided by the
calls (a leak grows every window; a one-off resize or cache fill falls in one):
  heap   bytes in use by malloc (glibc's mallinfo2: uordblks + hblkhd, over every arena):
         exact to the byte, the figure a leaked C++ object or std::string moves. With
         glibc's per-thread cache (tcache) on, a freed chunk of up to 1 KB that the cache
         keeps (up to 7 a size) counts as in use: 816-896 B steps, in both windows in 4
         processes of 20 (the toy tree decoder); hence GLIBC_TUNABLES=glibc.malloc.tcache_count=0;
  blocks Python objects alive (sys.getallocatedblocks): a leaked Python object of any size.
         CPython 3.11's type attribute cache (4096 entries) keeps a reference to the name of
         each lookup it caches, in a slot chosen by the name object's address: a name built
         afresh per call (torch builds "__torch_function__" so for a positional non-tensor
         argument) stays there until that slot is reused, up to 4096 strings, none of them
         leaked; clearing the cache drops them and frees nothing else;
  rss    resident set size (/proc/self/statm), page-granular: what a user sees.
"""
from __future__ import annotations

import argparse
import ctypes
import gc
import json
import os
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))

_libc = ctypes.CDLL("libc.so.6")


class _MallInfo2(ctypes.Structure):
    _fields_ = [(name, ctypes.c_size_t) for name in
                ("arena", "ordblks", "smblks", "hblks", "hblkhd", "usmblks", "fsmblks", "uordblks", "fordblks",
                 "keepcost")]


_libc.mallinfo2.restype = _MallInfo2
_PAGE = os.sysconf("SC_PAGE_SIZE")
_NO_TCACHE = "glibc.malloc.tcache_count=0"  # glibc's tunable: no per-thread cache of freed chunks


def readings():
    """(heap bytes in use, Python blocks alive, RSS bytes) after a collection and a trim."""
    getattr(sys, "_clear_internal_caches", sys._clear_type_cache)()  # the type cache (3.13: renamed)
    gc.collect()
    _libc.malloc_trim(0)
    info = _libc.mallinfo2()
    with open("/proc/self/statm") as f:
        rss = int(f.read().split()[1]) * _PAGE
    return info.uordblks + info.hblkhd, sys.getallocatedblocks(), rss


def _families(sv):
    """name -> (call, share): a call of the family, with its inputs made once, and the share of
    the calls asked for that it is measured over."""
    torch.manual_seed(0)
    V, K = 64, 4
    p = torch.rand(K + 1, V) + 0.01
    q = torch.rand(K, V) + 0.01
    toks = torch.randint(0, V, (K,))
    tok_list = toks.tolist()
    logits = torch.randn(K + 1, V)
    dlogits = torch.randn(K, V)
    bad = p.clone()
    bad[0, 0] = float("nan")
    g = torch.Generator().manual_seed(1)
    u = torch.rand(K + 1, dtype=torch.float64)
    tree_tokens = torch.tensor([1, 2, 3, 4])
    tree_parents = torch.tensor([-1, 0, -1, 2])
    tree_rows = torch.randn(5, V)
    B = 3
    cu = torch.tensor([2, 2, 4])
    batch_tokens = torch.randint(0, V, (4,))
    batch_target = torch.randn(4 + B, V)
    batch_probs = torch.rand(4 + B, V) + 0.01
    gens = [torch.Generator().manual_seed(i) for i in range(B)]
    batch_u = torch.rand(4 + B, dtype=torch.float64)  # every sequence sampled: K_b + 1 each

    def raises(fn):
        def call():
            try:
                fn()
            except (ValueError, TypeError):
                return
            raise AssertionError("expected an error")
        return call

    ops = sv.ops
    f = {
        "verify_greedy": lambda: sv.verify_greedy(p, toks),
        "verify_greedy list tokens": lambda: sv.verify_greedy(p, tok_list),
        "accept": lambda: sv.accept(p, q, toks),
        "accept generator": lambda: sv.accept(p, q, toks, g),
        "accept one-hot": lambda: sv.accept(p, None, toks, g),
        "accept list tokens": lambda: sv.accept(p, q, tok_list, g),
        "accept block": lambda: sv.accept(p, q, toks, g, method="block"),
        "accept error": raises(lambda: sv.accept(bad, q, toks, g)),
        "accept wrong method": raises(lambda: sv.accept(p, q, toks, g, method="nope")),
        "accept_with_uniforms": lambda: sv.accept_with_uniforms(p, q, toks, u),
        "accept_logits": lambda: sv.accept_logits(logits, dlogits, toks, temperature=0.8, generator=g),
        "accept_logits block": lambda: sv.accept_logits(logits, dlogits, toks, generator=g, method="block"),
        "accept_logits error": raises(lambda: sv.accept_logits(bad.log(), dlogits, toks, generator=g)),
        "sample": lambda: sv.sample(logits, temperature=0.7, top_k=5, generator=g),
        "warp": lambda: sv.warp(logits, temperature=0.7, top_p=0.9),
        "verify_tree": lambda: sv.verify_tree(tree_rows, tree_tokens, tree_parents, generator=g),
        "verify_tree list parents": lambda: sv.verify_tree(tree_rows, tree_tokens, [-1, 0, -1, 2], generator=g),
        "verify_tree_probs": lambda: sv.verify_tree_probs(tree_rows.softmax(-1), tree_tokens, tree_parents,
                                                          generator=g),
        "verify_tree greedy": lambda: sv.verify_tree(tree_rows, tree_tokens, tree_parents, temperature=0),
        "verify_batch": lambda: sv.verify_batch(batch_target, batch_tokens, cu, generator=g),
        "verify_batch generators": lambda: sv.verify_batch(batch_target, batch_tokens, cu, generators=gens),
        "verify_batch error": raises(lambda: sv.verify_batch(batch_target, batch_tokens, torch.tensor([2, 1, 4]),
                                                             generators=gens)),
        "verify_batch_probs": lambda: sv.verify_batch_probs(batch_probs, batch_tokens, cu, generator=g),
        "verify_batch_probs generators": lambda: sv.verify_batch_probs(batch_probs, batch_tokens, cu,
                                                                       generators=gens, method="block"),
        "ops.accept": lambda: ops.accept(p, q, toks, u, "token"),
        "ops.accept_logits": lambda: ops.accept_logits(logits, dlogits, toks, uniforms=u),
        "ops.sample": lambda: ops.sample(logits, uniforms=u),
        "ops.verify_tree": lambda: ops.verify_tree(tree_rows, tree_tokens, tree_parents, uniforms=u),
        "ops.verify_batch": lambda: ops.verify_batch(batch_target, batch_tokens, cu, uniforms=batch_u),
        "ops.verify_greedy": lambda: ops.verify_greedy(p, toks),
    }
    return {name: (fn, 1) for name, fn in f.items()}


def _decoders(sv):
    """The decoders over toy models (tests/toy_models.py) and over a tiny transformers model
    through the adapter: one `generate` per call."""
    from toy_models import ToyLM

    class Unmemoised(ToyLM):
        # ToyLM keeps every row it computed (for the law tests): growth that is not a leak.
        def probs(self, prefix):
            return torch.softmax(self.logits(prefix).double(), -1).float()

    V = 48
    target = Unmemoised(V, seed=3)
    draft = Unmemoised(V, seed=4, base=target, noise=0.3)
    g = torch.Generator().manual_seed(5)
    prompt = [1, 2, 3]

    def tree_step(prefix, tokens, parents):
        return torch.stack([target.probs(prefix + path) for path in _paths(tokens.tolist(), parents.tolist())])

    def draft_tree(prefix):
        a, b = int(target.probs(prefix).argmax()), (int(target.probs(prefix).argmax()) + 1) % V
        return [a, b, int(target.probs(prefix + [a]).argmax())], [-1, -1, 0], None

    def logits_tree_step(prefix, tokens, parents):
        return torch.stack([target.logits(prefix + path) for path in _paths(tokens.tolist(), parents.tolist())])

    decoders = {
        "decoder greedy": sv.SpeculativeDecoder(draft.greedy_draft, target.target_rows, k=3, greedy=True),
        "decoder sampled": sv.SpeculativeDecoder(draft.sampling_draft(g), target.target_rows, k=3, greedy=False,
                                                 generator=g),
        "decoder sampled block": sv.SpeculativeDecoder(draft.sampling_draft(g), target.target_rows, k=3,
                                                       greedy=False, generator=g, method="block"),
        "decoder from_logits": sv.SpeculativeDecoder.from_logits(
            lambda seq: draft.logits(seq), lambda prefix, proposed: target.target_rows(prefix, proposed, True),
            k=3, temperature=0.9, generator=g),
        "decoder tree greedy": sv.TreeDecoder(draft_tree, tree_step, greedy=True),
        "decoder tree sampled": sv.TreeDecoder(draft_tree, tree_step, greedy=False, generator=g),
        "decoder tree logits": sv.TreeDecoder.from_logits(draft_tree, logits_tree_step,
                                                         temperature=0.8, generator=g),
    }
    found = {name: ((lambda d=d: d.generate(prompt, max_new=24)), 1) for name, d in decoders.items()}
    found.update(_transformers_decoders(sv))
    return found


def _paths(tokens, parents):
    # The path (token list) from the root to each node, the root's (empty) first.
    paths = [[]]
    for t, parent in zip(tokens, parents):
        paths.append(paths[parent + 1] + [t])
    return paths


def _transformers_decoders(sv):
    try:
        import transformers
        from transformers import LlamaConfig, LlamaForCausalLM
    except ImportError:
        return {}
    transformers.utils.logging.set_verbosity_error()
    config = LlamaConfig(vocab_size=256, hidden_size=32, intermediate_size=64, num_hidden_layers=1,
                         num_attention_heads=2, num_key_value_heads=1, max_position_embeddings=256)
    torch.manual_seed(0)
    target = LlamaForCausalLM(config).eval()
    target.generation_config.eos_token_id = None
    torch.manual_seed(1)
    draft = LlamaForCausalLM(config).eval()
    g = torch.Generator().manual_seed(7)
    prompt = [1, 5, 9, 5, 9, 5]
    decoders = {
        "transformers pair sampled": sv.transformers.speculative_decoder(draft, target, k=3, temperature=0.9,
                                                                         generator=g),
        "transformers lookup greedy": sv.transformers.prompt_lookup_decoder(target, temperature=0),
        "transformers tree greedy": sv.transformers.tree_decoder(draft, target, temperature=0),
    }
    # A generate costs 5-10 times a toy decoder's: 0.4 as many are measured.
    return {name: ((lambda d=d: d.generate(prompt, max_new=12)), 0.4) for name, d in decoders.items()}


def _llama_decoders(sv):
    """The llama.cpp adapter over tests/tiny_gguf.py's pair (`make llama`'s environment)."""
    import tempfile

    import llama_cpp
    import tiny_gguf

    folder = Path(tempfile.mkdtemp(prefix="spec-verify-memory-"))
    target_path, draft_path = tiny_gguf.write_pair(folder)

    def load(path):
        return llama_cpp.Llama(model_path=str(path), n_ctx=512, n_batch=512, n_threads=1, n_threads_batch=1,
                               verbose=False)

    target, draft = load(target_path), load(draft_path)
    prompt = target.tokenize(b"one two three four")
    g = torch.Generator().manual_seed(3)
    decoders = {
        "llama_cpp pair sampled": sv.llama_cpp.speculative_decoder(draft, target, k=3, temperature=0.9, generator=g),
        "llama_cpp pair greedy": sv.llama_cpp.speculative_decoder(draft, target, k=3, temperature=0),
        "llama_cpp lookup greedy": sv.llama_cpp.prompt_lookup_decoder(target, temperature=0),
    }
    return {name: ((lambda d=d: d.generate(prompt, max_new=12)), 0.4) for name, d in decoders.items()}


def measure(call, calls: int, warm: int, windows: int = 2) -> dict:
    """Growth per call over `windows` consecutive windows of `calls` calls each, after `warm`
    calls: each reading's least over the windows. A leak grows every window; what a process
    does once (a dict or free list resized, a cache filled) falls in one window at most."""
    for _ in range(warm):
        call()
    growth = []
    seconds = 0.0
    before = readings()
    for _ in range(windows):
        start = time.perf_counter()
        for _ in range(calls):
            call()
        seconds += time.perf_counter() - start
        after = readings()
        growth.append([(a - b) / calls for a, b in zip(after, before)])
        before = after
    heap, blocks, rss = (min(g[i] for g in growth) for i in range(3))
    return {"calls": calls, "windows": windows, "heap": heap, "blocks": blocks, "rss": rss,
            "seconds": round(seconds, 3)}


def main(argv=None):
    ap = argparse.ArgumentParser()
    ap.add_argument("families", nargs="*")
    ap.add_argument("--calls", type=int, default=20000, help="calls of an op family")
    ap.add_argument("--generates", type=int, default=300, help="calls of a decoder (generate)")
    ap.add_argument("--warm", type=float, default=0.5, help="warm-up calls, as a fraction of the calls")
    ap.add_argument("--decoder-warm", type=float, default=3.0,
                    help="warm-up generates, as a fraction of the generates (Python's and torch's caches fill "
                         "over a few hundred generates)")
    ap.add_argument("--windows", type=int, default=2, help="windows of calls measured (the least growth counts)")
    ap.add_argument("--ops", action="store_true", help="every op family")
    ap.add_argument("--decoders", action="store_true", help="every decoder")
    ap.add_argument("--llama", action="store_true", help="the llama.cpp adapter's decoders (needs llama_cpp)")
    ap.add_argument("--list", action="store_true")
    args = ap.parse_args(argv)
    from conftest import load_kernel

    sv = load_kernel()
    everything = not (args.ops or args.decoders or args.llama)
    # The op families first, measured before the decoders' models exist (transformers' import
    # makes every garbage collection of the readings slower).
    groups = ([_families] if args.ops or everything else []) + ([_decoders] if args.decoders or everything else [])
    groups += [_llama_decoders] if args.llama else []
    torch.set_num_threads(1)
    for make in groups:
        families = make(sv)
        if args.list:
            print("\n".join(families))
            continue
        for name in [n for n in args.families if n in families] if args.families else list(families):
            call, share = families[name]
            is_decoder = name.startswith(("decoder", "transformers", "llama_cpp"))
            n = max(1, int(share * (args.generates if is_decoder else args.calls)))
            result = measure(call, n, max(1, int(n * (args.decoder_warm if is_decoder else args.warm))), args.windows)
            print(json.dumps({"family": name, **result}), flush=True)


if __name__ == "__main__":
    tunables = os.environ.get("GLIBC_TUNABLES", "")
    if _NO_TCACHE not in tunables.split(":"):
        # glibc reads its tunables at start: run again with the thread cache off (see `heap`).
        env = dict(os.environ, GLIBC_TUNABLES=":".join(filter(None, [tunables, _NO_TCACHE])))
        os.execve(sys.executable, [sys.executable, *sys.argv], env)
    main()
