"""The fake (meta) implementations of the ops, for torch.compile and opcheck: the shapes and
dtypes of each op's outputs, with dynamic sizes where they depend on values. Registered at
import (the package's `__init__` imports this module).
"""
from __future__ import annotations

import torch

from ._ops import add_op_namespace_prefix

@torch.library.register_fake(add_op_namespace_prefix("verify_greedy"))
def _verify_greedy_fake(target_probs, draft_tokens):
    ctx = torch.library.get_ctx()
    return ctx.new_dynamic_size(), ctx.new_dynamic_size()


@torch.library.register_fake(add_op_namespace_prefix("accept"))
def _accept_fake(target_probs, draft_probs, draft_tokens, uniforms=None, method="token"):
    ctx = torch.library.get_ctx()
    return ctx.new_dynamic_size(), ctx.new_dynamic_size()


@torch.library.register_fake(add_op_namespace_prefix("_row_masses"))
def _row_masses_fake(rows):
    return rows.new_empty((rows.shape[0],), dtype=torch.float64)


@torch.library.register_fake(add_op_namespace_prefix("warp"))
def _warp_fake(logits, temperature=1.0, top_k=0, top_p=1.0, min_p=0.0):
    return logits.new_empty(logits.shape, dtype=torch.float32)


@torch.library.register_fake(add_op_namespace_prefix("sample"))
def _sample_fake(logits, temperature=1.0, top_k=0, top_p=1.0, min_p=0.0, uniforms=None):
    return logits.new_empty(logits.shape[:-1], dtype=torch.int64)


@torch.library.register_fake(add_op_namespace_prefix("accept_logits"))
def _accept_logits_fake(target_logits, draft_logits, draft_tokens, temperature=1.0, top_k=0, top_p=1.0,
                        min_p=0.0, uniforms=None, method="token"):
    ctx = torch.library.get_ctx()
    return ctx.new_dynamic_size(), ctx.new_dynamic_size()


def _tree_fake(target, tokens, *args, **kwargs):
    ctx = torch.library.get_ctx()
    return tokens.new_empty((ctx.new_dynamic_size(),), dtype=torch.int64), ctx.new_dynamic_size()


for _name in ("verify_tree", "verify_tree_probs"):
    torch.library.register_fake(add_op_namespace_prefix(_name))(_tree_fake)
    torch.library.register_fake(add_op_namespace_prefix(f"_{_name}_ints"))(_tree_fake)


@torch.library.register_fake(add_op_namespace_prefix("verify_batch"))
def _verify_batch_fake(target_logits, draft_tokens, cu_num_draft_tokens, draft_logits=None, temperature=None,
                       top_k=None, top_p=None, min_p=None, method="token", uniforms=None):
    # The width, max K_b + 1, depends on the values of cu_num_draft_tokens.
    width = torch.library.get_ctx().new_dynamic_size(min=1)
    batch = cu_num_draft_tokens.shape[0]
    return (target_logits.new_empty((batch, width), dtype=torch.int64),
            target_logits.new_empty((batch,), dtype=torch.int64))


@torch.library.register_fake(add_op_namespace_prefix("verify_batch_probs"))
def _verify_batch_probs_fake(target_probs, draft_tokens, cu_num_draft_tokens, draft_probs=None, greedy=None,
                             method="token", uniforms=None):
    width = torch.library.get_ctx().new_dynamic_size(min=1)
    batch = cu_num_draft_tokens.shape[0]
    return (target_probs.new_empty((batch, width), dtype=torch.int64),
            target_probs.new_empty((batch,), dtype=torch.int64))
