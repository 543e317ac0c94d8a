"""Reference solutions and known mistakes of lesson04's exercises (not shipped with the package).

``scripts/exercise_answers.py build`` runs them on each check's test cases and stores the outputs in
``course_utils/exercises/answers/lesson04.pt``; the course's tests attach them to the checks.
"""

# ruff: noqa: F401, F403, F405, E501
from __future__ import annotations

import math

import numpy as np
import torch
from torch import Tensor
from torch.overrides import TorchFunctionMode

from course_utils.attention.masks import causal_mask, padding_mask
from course_utils.exercises.core import _EXITS, Case, Exercise, Feedback, Mistake
from course_utils.exercises.lesson04 import *


def _head_weights(w_in: Tensor, num_heads: int, head: int) -> tuple[Tensor, Tensor, Tensor]:
    d = w_in.shape[1]
    dk = d // num_heads
    rows = slice(head * dk, (head + 1) * dk)  # head i's rows inside one (d, d) block
    w_q, w_k, w_v = w_in.split(d, dim=0)  # 3 x (d, d): the W_Q, W_K, W_V blocks, in that order
    return w_q[rows], w_k[rows], w_v[rows]  # 3 x (dk, d)


def _head_columns(w_in, num_heads, head):
    d = w_in.shape[1]
    cols = slice(head * (d // num_heads), (head + 1) * (d // num_heads))
    return tuple(block[:, cols] for block in w_in.split(d, dim=0))  # 3 x (d, dk): columns


def _head_columns_transposed(w_in, num_heads, head):
    return tuple(w.T for w in _head_columns(w_in, num_heads, head))  # 3 x (dk, d): the right shape


def _head_rows_transposed(w_in, num_heads, head):
    return tuple(w.T for w in _head_weights(w_in, num_heads, head))  # 3 x (d, dk)


def _head_query_block_only(w_in, num_heads, head):
    d = w_in.shape[1]
    dk = d // num_heads
    rows = slice(head * dk, (head + 1) * dk)  # no offset of d for the key and value blocks
    return w_in[rows], w_in[rows], w_in[rows]


def _head_interleaved_rows(w_in, num_heads, head):
    return tuple(block[head::num_heads] for block in w_in.split(w_in.shape[1], dim=0))


def _head_per_head_layout(w_in, num_heads, head):
    dk = w_in.shape[1] // num_heads
    start = 3 * head * dk  # reads in_proj as q_0, k_0, v_0, q_1, k_1, v_1, ...
    return w_in[start:start + dk], w_in[start + dk:start + 2 * dk], w_in[start + 2 * dk:start + 3 * dk]


def _head_q_and_k_swapped(w_in, num_heads, head):
    d = w_in.shape[1]
    dk = d // num_heads
    w_k, w_q, w_v = w_in.split(d, dim=0)  # the first block named K: in_proj stores W_Q first
    rows = slice(head * dk, (head + 1) * dk)
    return w_q[rows], w_k[rows], w_v[rows]


def _head_whole_blocks(w_in, num_heads, head):
    return tuple(w_in.split(w_in.shape[1], dim=0))  # 3 x (d, d): every head at once


def _head_inclusive_end(w_in, num_heads, head):
    d = w_in.shape[1]
    dk = d // num_heads
    rows = slice(head * dk, (head + 1) * dk - 1)  # "to (i+1)*d_k - 1" read as a slice's end
    return tuple(block[rows] for block in w_in.split(d, dim=0))  # 3 x (dk - 1, d)


def _head_counted_from_one(w_in, num_heads, head):
    d = w_in.shape[1]
    dk = d // num_heads
    rows = slice((head - 1) * dk, head * dk)  # heads numbered 1..h as in the formula
    return tuple(block[rows] for block in w_in.split(d, dim=0))


def _head_one_too_far(w_in, num_heads, head):
    d = w_in.shape[1]
    dk = d // num_heads
    rows = slice((head + 1) * dk, (head + 2) * dk)  # the head after: empty past the last head
    return tuple(block[rows] for block in w_in.split(d, dim=0))


def _head_d_from_rows(w_in, num_heads, head):
    d = w_in.shape[0]  # 3 * d_model, taken for d_model
    dk = d // num_heads
    rows = slice(head * dk, (head + 1) * dk)
    return w_in[rows], w_in[d:][rows], w_in[2 * d:][rows]  # K and V start past the end: empty


def _head_float_width(w_in, num_heads, head):
    d = w_in.shape[1]
    dk = d / num_heads  # a float: the slice raises TypeError
    return tuple(block[head * dk:(head + 1) * dk] for block in w_in.split(d, dim=0))


def _head_one_block(w_in, num_heads, head):
    d = w_in.shape[0]  # 3 * d_model: split gives one block, the unpacking raises ValueError
    w_q, w_k, w_v = w_in.split(d, dim=0)
    dk = w_in.shape[1] // num_heads
    return w_q[head * dk:(head + 1) * dk], w_k[head * dk:(head + 1) * dk], w_v[head * dk:(head + 1) * dk]


def _stack(q_parts: list[Tensor], k_parts: list[Tensor], v_parts: list[Tensor]) -> Tensor:
    return torch.cat([*q_parts, *k_parts, *v_parts], dim=0)  # (3*h*dk, d)


def _stack_extends_callers_list(q_parts, k_parts, v_parts) -> Tensor:
    q_parts.extend(k_parts)  # grows the caller's list: right result, changed input
    q_parts.extend(v_parts)
    return torch.cat(q_parts, dim=0)


def _stack_columns(q_parts, k_parts, v_parts) -> Tensor:
    return torch.cat([*q_parts, *k_parts, *v_parts], dim=1)  # (dk, 3*h*d): side by side


def _stack_qvk_order(q_parts, k_parts, v_parts) -> Tensor:
    return torch.cat([*q_parts, *v_parts, *k_parts], dim=0)  # values before keys


def _stack_kqv_order(q_parts, k_parts, v_parts) -> Tensor:
    return torch.cat([*k_parts, *q_parts, *v_parts], dim=0)  # keys before queries


def _stack_reversed_heads(q_parts, k_parts, v_parts) -> Tensor:
    return torch.cat([*q_parts[::-1], *k_parts[::-1], *v_parts[::-1]], dim=0)


def _stack_per_head_qkv(q_parts, k_parts, v_parts) -> Tensor:
    return torch.cat([w for q, k, v in zip(q_parts, k_parts, v_parts, strict=True) for w in (q, k, v)])


def _stack_formula_layout(q_parts, k_parts, v_parts) -> Tensor:
    return torch.cat([w.T for w in (*q_parts, *k_parts, *v_parts)], dim=1)  # (d, 3d)


def _stack_new_axis(q_parts, k_parts, v_parts) -> Tensor:
    return torch.stack([*q_parts, *k_parts, *v_parts])  # (3h, dk, d): a new axis, not rows


def _stack_lists_not_unpacked(q_parts, k_parts, v_parts) -> Tensor:
    return torch.cat([q_parts, k_parts, v_parts], dim=0)  # raises: cat needs tensors, not lists


def _stack_summed_heads(q_parts, k_parts, v_parts) -> Tensor:
    return torch.cat([sum(q_parts), sum(k_parts), sum(v_parts)])  # (3*dk, d): heads added


def _mha_forward(x, w_in, b_in, w_out, b_out, num_heads, *, split="ok", merge="ok", scale="ok",
                 softmax_dim=-1, project=True, w_in_t=True, w_out_t=True, biases=(True, True),
                 causal=False, mask="ok", qkv_layout="blocks", qkv_order="qkv", heads_used=None) -> Tensor:
    """Reference (all options at their defaults) and every mistake, one switch each. ``causal``
    is the exercise's own argument; ``mask`` the slips of its mask."""
    B, T, d = x.shape
    dk = d // num_heads
    qkv = x @ (w_in.T if w_in_t else w_in)  # (B, T, 3d); without .T this raises (d vs 3d)
    qkv = qkv + b_in if biases[0] else qkv
    if qkv_layout == "per_head":  # read as q_0, k_0, v_0, q_1, ...: not how in_proj is stored
        q, k, v = (t.reshape(B, T, d) for t in qkv.view(B, T, num_heads, 3 * dk).split(dk, dim=-1))
    else:
        q, k, v = qkv.split(d, dim=-1)  # 3 x (B, T, d)
    if qkv_order == "qvk":  # the second block read as V and the third as K
        k, v = v, k
    # (T, T) bool, or None: no mask. split_no_transpose's (T, T) mask does not fit its (B, T, h, h)
    # scores and raises; the one with a transpose at the merge sizes its mask from the scores
    allowed = _allowed(num_heads if split == "no_transpose_at_split" else T, causal, mask)
    if heads_used == 1:  # no split at all: one head of width d, scaled by sqrt(d)
        scores = q @ k.transpose(-2, -1) / math.sqrt(d)  # (B, T, T)
        concat = _softmax_masked(scores, allowed, mask, -1) @ v  # (B, T, d)
        return concat @ w_out.T + b_out

    def heads(t: Tensor) -> Tensor:
        if split == "as_b_h_t":
            return t.reshape(B, num_heads, T, dk)  # (view would refuse: t is a column slice)
        if split == "view_as_b_h_t":
            return t.view(B, num_heads, T, dk)  # raises: t is a column slice of qkv
        if split in ("no_transpose", "no_transpose_at_split"):
            return t.view(B, T, num_heads, dk)  # (B, T, h, dk): attention across heads
        if split == "interleaved":
            return t.view(B, T, dk, num_heads).permute(0, 3, 1, 2)  # head i = features i, i+h, ...
        return t.view(B, T, num_heads, dk).transpose(1, 2)  # (B, h, T, dk)

    q, k, v = heads(q), heads(k), heads(v)
    divisor = {"ok": math.sqrt(dk), "none": 1.0, "d_model": math.sqrt(d), "d_k": dk,
               "after_softmax": 1.0, "times_sqrt": 1 / math.sqrt(dk)}[scale]
    scores = q @ k.transpose(-2, -1) / divisor  # (B, h, T, T)
    weights = _softmax_masked(scores, allowed, mask, softmax_dim)
    if scale == "after_softmax":  # the weights, not the scores, divided by sqrt(dk)
        weights = weights / math.sqrt(dk)
    out = weights @ v  # (B, h, T, dk)
    if split == "no_transpose" or merge == "no_transpose":
        concat = out.reshape(B, T, d)
    elif merge == "reversed":
        concat = out.flip(1).transpose(1, 2).reshape(B, T, d)  # head h-1 first
    elif merge == "interleaved":
        concat = out.permute(0, 2, 3, 1).reshape(B, T, d)  # (B, T, dk, h): features interleaved
    elif merge == "view_without_contiguous":
        concat = out.transpose(1, 2).view(B, T, d)  # raises: the transpose is not contiguous
    else:
        concat = out.transpose(1, 2).reshape(B, T, d)  # (B, T, d): head 0 first
    if not project:
        return concat
    y = concat @ (w_out.T if w_out_t else w_out)
    return y + b_out if biases[1] else y


def _allowed(T: int, causal: bool, mask: str) -> Tensor | None:
    """The (T, T) mask, True = may attend, that a switch ``mask`` builds; None for no mask."""
    if mask == "ignored" or not (causal or mask == "always"):
        return None
    ones = torch.ones(T, T, dtype=torch.bool)
    return {"diagonal": ones.tril(-1), "one_ahead": ones.tril(1), "transposed": ones.triu()}.get(
        mask, ones.tril())


def _softmax_masked(scores: Tensor, allowed: Tensor | None, mask: str, dim: int) -> Tensor:
    if allowed is None:
        return torch.softmax(scores, dim=dim)
    if mask == "after_softmax":  # the blocked weights zeroed, the rest left as they were
        return torch.softmax(scores, dim=dim) * allowed
    fill = 0.0 if mask == "zero" else float("-inf")
    return torch.softmax(scores.masked_fill(~allowed, fill), dim=dim)


def _reference_forward(x, w_in, b_in, w_out, b_out, num_heads, causal=False):
    return _mha_forward(x, w_in, b_in, w_out, b_out, num_heads, causal=causal)


def _variant(**switch):
    return lambda x, w_in, b_in, w_out, b_out, num_heads, causal=False: _mha_forward(
        x, w_in, b_in, w_out, b_out, num_heads, causal=causal, **switch)


def _forward_k_dot_t(x, w_in, b_in, w_out, b_out, num_heads, causal=False):
    B, T, d = x.shape
    dk = d // num_heads
    q, k, v = ((x @ w_in.T + b_in).split(d, dim=-1))
    q, k, v = (t.view(B, T, num_heads, dk).transpose(1, 2) for t in (q, k, v))  # (B, h, T, dk)
    scores = q @ k.permute(3, 2, 1, 0) / math.sqrt(dk)  # what k.T does: every axis reversed
    return scores


def _forward_k_swap_1_2(x, w_in, b_in, w_out, b_out, num_heads, causal=False):
    B, T, d = x.shape
    dk = d // num_heads
    q, k, v = ((x @ w_in.T + b_in).split(d, dim=-1))
    q, k, v = (t.view(B, T, num_heads, dk).transpose(1, 2) for t in (q, k, v))  # (B, h, T, dk)
    return q @ k.transpose(1, 2) / math.sqrt(dk)  # (B, T, h, dk): raises


def _forward_not_merged(x, w_in, b_in, w_out, b_out, num_heads, causal=False):
    B, T, d = x.shape
    dk = d // num_heads
    q, k, v = ((x @ w_in.T + b_in).split(d, dim=-1))
    q, k, v = (t.view(B, T, num_heads, dk).transpose(1, 2) for t in (q, k, v))  # (B, h, T, dk)
    heads = torch.softmax(q @ k.transpose(-2, -1) / math.sqrt(dk), dim=-1) @ v  # (B, h, T, dk)
    return heads @ w_out.T + b_out  # raises: (B, h, T, dk) @ (d, d)


def _forward_float_head_width(x, w_in, b_in, w_out, b_out, num_heads, causal=False) -> Tensor:
    B, T, d = x.shape
    q = (x @ w_in.T + b_in).split(d, dim=-1)[0]  # (B, T, d)
    return q.view(B, T, num_heads, d / num_heads)  # d / h is a float: view refuses it


def _to_torch(attn_mask: Tensor, key_padding_mask: Tensor) -> tuple[Tensor, Tensor]:
    return ~attn_mask, ~key_padding_mask


def _not_inverted(attn_mask, key_padding_mask):
    return attn_mask, key_padding_mask


def _only_padding_inverted(attn_mask, key_padding_mask):
    return attn_mask, ~key_padding_mask


def _only_attn_inverted(attn_mask, key_padding_mask):
    return ~attn_mask, key_padding_mask


def _transposed_attn_mask(attn_mask, key_padding_mask):
    return (~attn_mask).T, ~key_padding_mask


def _float_masks(attn_mask, key_padding_mask):
    return (~attn_mask).float(), (~key_padding_mask).float()


def _additive(allowed: Tensor) -> Tensor:
    return torch.zeros(allowed.shape).masked_fill(~allowed, float("-inf"))  # 0 = keep, -inf = block


def _additive_masks(attn_mask, key_padding_mask):
    return _additive(attn_mask), _additive(key_padding_mask)


def _additive_mask_not_inverted(attn_mask, key_padding_mask):
    # -inf where the course mask is True (may attend): additive, and blocking the wrong keys
    return attn_mask.float().masked_fill(attn_mask, float("-inf")), ~key_padding_mask


def _numpy_masks(attn_mask, key_padding_mask):
    return (~attn_mask).numpy(), (~key_padding_mask).numpy()


def _swapped_pair(attn_mask, key_padding_mask):
    return ~key_padding_mask, ~attn_mask  # right masks, wrong order


def _python_not(attn_mask, key_padding_mask):
    return not attn_mask, not key_padding_mask  # raises: Python's `not` wants one True/False


def _one_minus_mask(attn_mask, key_padding_mask):
    return 1 - attn_mask, 1 - key_padding_mask  # raises: no subtraction on bool tensors


REFERENCES = {
    'HEAD_WEIGHTS': _head_weights,
    'STACK_HEAD_WEIGHTS': _stack,
    'MHA_FORWARD': _reference_forward,
    'MASKS_FOR_TORCH': _to_torch,
}

MISTAKES = {
    'HEAD_WEIGHTS': {
        'columns_not_rows': _head_columns,
        'columns_then_transposed': _head_columns_transposed,
        'transposed': _head_rows_transposed,
        'query_block_only': _head_query_block_only,
        'interleaved_rows': _head_interleaved_rows,
        'per_head_qkv_layout': _head_per_head_layout,
        'q_and_k_blocks_swapped': _head_q_and_k_swapped,
        'whole_blocks': _head_whole_blocks,
        'inclusive_end': _head_inclusive_end,
        'heads_counted_from_one': _head_counted_from_one,
        'one_head_too_far': _head_one_too_far,
        'd_model_from_rows': _head_d_from_rows,
        'float_head_width': _head_float_width,
        'one_block_from_split': _head_one_block,
    },
    'STACK_HEAD_WEIGHTS': {
        'stacked_columns': _stack_columns,
        'formula_layout': _stack_formula_layout,
        'reversed_heads': _stack_reversed_heads,
        'per_head_qkv': _stack_per_head_qkv,
        'qvk_order': _stack_qvk_order,
        'kqv_order': _stack_kqv_order,
        'stack_not_cat': _stack_new_axis,
        'lists_not_unpacked': _stack_lists_not_unpacked,
        'summed_heads': _stack_summed_heads,
        # last: it grows the case's own list when the store is built from plain cases
        'changed_callers_list': _stack_extends_callers_list,
    },
    'MHA_FORWARD': {
        'split_no_transpose': _variant(split="no_transpose"),
        'split_as_b_h_t': _variant(split="as_b_h_t"),
        'split_view_as_b_h_t_raises': _variant(split="view_as_b_h_t"),
        'keys_and_values_swapped': _variant(qkv_order="qvk"),
        'no_head_split': _variant(heads_used=1),
        'float_head_width': _forward_float_head_width,
        'merge_view_without_contiguous': _variant(merge="view_without_contiguous"),
        'merge_no_transpose': _variant(merge="no_transpose"),
        'split_interleaved': _variant(split="interleaved"),
        'merge_reversed_heads': _variant(merge="reversed"),
        'merge_interleaved': _variant(merge="interleaved"),
        'split_no_transpose_merge_transposed': _variant(split="no_transpose_at_split"),
        'no_scaling': _variant(scale="none"),
        'scaled_by_d_model': _variant(scale="d_model"),
        'scaled_by_d_k': _variant(scale="d_k"),
        'scaled_after_softmax': _variant(scale="after_softmax"),
        'scores_multiplied_by_sqrt_dk': _variant(scale="times_sqrt"),
        'softmax_over_heads': _variant(softmax_dim=1),
        'softmax_wrong_axis': _variant(softmax_dim=-2),
        'no_output_projection': _variant(project=False),
        'w_in_not_transposed': _variant(w_in_t=False),
        'w_out_not_transposed': _variant(w_out_t=False),
        'no_biases': _variant(biases=(False, False)),
        'no_in_bias': _variant(biases=(False, True)),
        'no_out_bias': _variant(biases=(True, False)),
        'causal_mask_added': _variant(mask="always"),
        'causal_ignored': _variant(mask="ignored"),
        'causal_diagonal_masked': _variant(mask="diagonal"),
        'causal_one_token_ahead': _variant(mask="one_ahead"),
        'causal_mask_transposed': _variant(mask="transposed"),
        'causal_mask_after_softmax': _variant(mask="after_softmax"),
        'causal_filled_with_zero': _variant(mask="zero"),
        'qkv_interleaved_per_head': _variant(qkv_layout="per_head"),
        'k_T_reverses_all_axes': _forward_k_dot_t,
        'k_transposed_wrong_axes': _forward_k_swap_1_2,
        'heads_not_merged': _forward_not_merged,
    },
    'MASKS_FOR_TORCH': {
        'not_inverted': _not_inverted,
        'only_padding_inverted': _only_padding_inverted,
        'only_attn_inverted': _only_attn_inverted,
        'transposed_attn_mask': _transposed_attn_mask,
        'additive_masks': _additive_masks,
        'float_masks': _float_masks,
        'additive_mask_not_inverted': _additive_mask_not_inverted,
        'numpy_masks': _numpy_masks,
        'swapped_pair': _swapped_pair,
        'python_not': _python_not,
        'one_minus_mask': _one_minus_mask,
    },
}
