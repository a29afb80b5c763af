"""Tiny Llama-architecture GGUF models with random weights, written with the `gguf` package.

`write_pair(folder)` writes target.gguf and draft.gguf: vocabulary 512 (a SentencePiece-style
"llama" vocabulary written here: control tokens, the 256 byte tokens llama.cpp falls back
to, and word pieces), hidden size 64, 3 layers, 4 heads (2 key/value heads), feed-forward
192, context 512, float32 weights drawn from a fixed seed. The draft is the target with
Gaussian noise of 6% of each matrix's standard deviation added to every matrix, so the two
agree on most greedy tokens but not all. The output matrix is scaled so that the logits
spread over a few units (a typical gap between the two best tokens of a few tenths), like a
trained model's, rather than the near-uniform rows of a plain random initialisation.

Nothing is downloaded: llama.cpp loads these files as it loads any Llama GGUF.
"""
from __future__ import annotations

from pathlib import Path
from typing import List, Tuple

import numpy as np

VOCAB = 512
HIDDEN = 64
LAYERS = 3
HEADS = 4
KV_HEADS = 2
FFN = 192
CONTEXT = 512
SEED = 20260
DRAFT_NOISE = 0.06

BOS, EOS, UNK = 1, 2, 0
_SPACE = "\u2581"  # SentencePiece's word-boundary mark
_WORDS = ("the a and of to in is it that was for on are with as his they be at one have this from or had "
          "by hot word but what some we can out other were all there when up use your how said an each "
          "she which do their time if will way about many then them write would like so these her long "
          "make thing see him two has look more day could go come did number sound no most people my "
          "over know water than call first who may down side been now find any new work part take get "
          "place made live where after back little only round man year came show every good me give our "
          "under name very through just form sentence great think say help low line differ turn cause "
          "much mean before move right boy old too same tell does set three want air well also play "
          "small end put home read hand port large spell add even land here must big high such").split()


def vocabulary() -> Tuple[List[str], List[float], List[int]]:
    """(pieces, scores, token types) of the 512-token vocabulary."""
    tt = {"normal": 1, "unknown": 2, "control": 3, "byte": 6}
    pieces = ["<unk>", "<s>", "</s>"]
    types = [tt["unknown"], tt["control"], tt["control"]]
    pieces += [f"<0x{b:02X}>" for b in range(256)]
    types += [tt["byte"]] * 256
    # Single characters first, then every prefix of each word with its boundary mark, so
    # that SentencePiece's pairwise merges can build each word a piece at a time.
    normal: List[str] = [_SPACE] + list("abcdefghijklmnopqrstuvwxyz.,")
    seen = set(normal)
    for w in _WORDS:
        for i in range(1, len(w) + 1):
            p = _SPACE + w[:i]
            if p not in seen and len(pieces) + len(normal) < VOCAB:
                seen.add(p)
                normal.append(p)
    pieces += normal
    types += [tt["normal"]] * len(normal)
    assert len(pieces) == VOCAB, len(pieces)
    # Longer pieces merge first (SentencePiece merges the best-scoring pair).
    scores = [0.0] * 3 + [0.0] * 256 + [float(len(p)) - i * 1e-4 for i, p in enumerate(normal)]
    return pieces, scores, types


# A larger pair for benchmarks (benchmarks/llama_cpp_speculative.py --size medium), where
# the target's evaluations, not the loop, take most of the time: about 18M parameters.
MEDIUM = dict(hidden=512, layers=6, heads=8, kv_heads=4, ffn=1408)
TINY = dict(hidden=HIDDEN, layers=LAYERS, heads=HEADS, kv_heads=KV_HEADS, ffn=FFN)


def weights(seed: int = SEED, hidden: int = HIDDEN, layers: int = LAYERS, heads: int = HEADS,
            kv_heads: int = KV_HEADS, ffn: int = FFN) -> dict:
    """The target's tensors by GGUF name, float32 NumPy arrays in GGUF's (numpy) order."""
    rng = np.random.default_rng(seed)

    def mat(rows: int, cols: int, scale: float) -> np.ndarray:
        return (rng.standard_normal((rows, cols)) * scale / np.sqrt(cols)).astype(np.float32)

    head = hidden // heads
    t = {
        "token_embd.weight": rng.standard_normal((VOCAB, hidden)).astype(np.float32),
        "output_norm.weight": np.ones(hidden, np.float32),
        # Logits after the final RMS norm have a standard deviation of about 2.4.
        "output.weight": mat(VOCAB, hidden, 2.4),
    }
    for b in range(layers):
        t[f"blk.{b}.attn_norm.weight"] = np.ones(hidden, np.float32)
        t[f"blk.{b}.attn_q.weight"] = mat(heads * head, hidden, 1.5)
        t[f"blk.{b}.attn_k.weight"] = mat(kv_heads * head, hidden, 1.5)
        t[f"blk.{b}.attn_v.weight"] = mat(kv_heads * head, hidden, 1.0)
        t[f"blk.{b}.attn_output.weight"] = mat(hidden, heads * head, 0.7)
        t[f"blk.{b}.ffn_norm.weight"] = np.ones(hidden, np.float32)
        t[f"blk.{b}.ffn_gate.weight"] = mat(ffn, hidden, 1.0)
        t[f"blk.{b}.ffn_up.weight"] = mat(ffn, hidden, 1.0)
        t[f"blk.{b}.ffn_down.weight"] = mat(hidden, ffn, 0.7)
    return t


def noisy(tensors: dict, noise: float = DRAFT_NOISE, seed: int = SEED + 1) -> dict:
    """Each matrix plus Gaussian noise of `noise` times its standard deviation (norms kept)."""
    rng = np.random.default_rng(seed)
    out = {}
    for name, w in tensors.items():
        if w.ndim == 2:
            w = (w + rng.standard_normal(w.shape) * (noise * float(w.std()))).astype(np.float32)
        out[name] = w
    return out


def write(path: Path, tensors: dict, name: str, heads: int = HEADS, kv_heads: int = KV_HEADS,
          quant: str = "") -> Path:
    """Writes a GGUF file: the shapes come from `tensors`, the heads are given; `quant` "q8_0"
    or "q4_0" stores the matrices (token embedding and output included) quantized."""
    import gguf

    hidden = tensors["token_embd.weight"].shape[1]
    layers = sum(1 for n in tensors if n.endswith(".attn_q.weight"))
    w = gguf.GGUFWriter(str(path), "llama")
    w.add_name(name)
    w.add_context_length(CONTEXT)
    w.add_embedding_length(hidden)
    w.add_block_count(layers)
    w.add_feed_forward_length(tensors["blk.0.ffn_up.weight"].shape[0])
    w.add_head_count(heads)
    w.add_head_count_kv(kv_heads)
    w.add_rope_dimension_count(hidden // heads)
    w.add_rope_freq_base(10000.0)
    w.add_layer_norm_rms_eps(1e-5)
    qtype = {"": None, "q8_0": gguf.GGMLQuantizationType.Q8_0, "q4_0": gguf.GGMLQuantizationType.Q4_0}[quant]
    w.add_file_type({"": gguf.LlamaFileType.ALL_F32, "q8_0": gguf.LlamaFileType.MOSTLY_Q8_0,
                     "q4_0": gguf.LlamaFileType.MOSTLY_Q4_0}[quant])
    w.add_vocab_size(VOCAB)
    pieces, scores, types = vocabulary()
    w.add_tokenizer_model("llama")
    w.add_tokenizer_pre("default")
    w.add_token_list(pieces)
    w.add_token_scores(scores)
    w.add_token_types(types)
    w.add_bos_token_id(BOS)
    w.add_eos_token_id(EOS)
    w.add_unk_token_id(UNK)
    w.add_add_bos_token(True)
    w.add_add_eos_token(False)
    for tname, arr in tensors.items():
        if qtype is not None and arr.ndim == 2:
            w.add_tensor(tname, gguf.quants.quantize(arr, qtype), raw_dtype=qtype)
        else:
            w.add_tensor(tname, arr)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return path


def write_pair(folder, size: str = "tiny") -> Tuple[Path, Path]:
    """Writes (target.gguf, draft.gguf) into `folder`; returns their paths.

    "tiny": the tests' pair (the draft is the target with 6% weight noise, float32 both).
    "medium": MEDIUM's shapes, a float32 target and, as its draft, the same weights
    quantized to Q4_0 (a quantized copy of the target, as people draft with on a CPU).
    """
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    if size == "tiny":
        target = weights()
        return (write(folder / "target.gguf", target, "spec-verify tiny target"),
                write(folder / "draft.gguf", noisy(target), "spec-verify tiny draft"))
    if size != "medium":
        raise ValueError(f"size must be 'tiny' or 'medium', got {size!r}")
    target = weights(**MEDIUM)
    heads = dict(heads=MEDIUM["heads"], kv_heads=MEDIUM["kv_heads"])
    return (write(folder / "target-medium.gguf", target, "spec-verify medium target", **heads),
            write(folder / "draft-medium-q4_0.gguf", target, "spec-verify medium draft (Q4_0)", quant="q4_0",
                  **heads))
