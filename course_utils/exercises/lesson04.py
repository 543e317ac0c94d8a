"""Checks for lesson 4, "Multi-head attention in PyTorch".

* :data:`SPLIT_HEADS`: ``(B, T, d) -> (B, h, T, dk)`` with ``view`` and ``transpose``.
* :data:`STACK_HEAD_WEIGHTS`: per-head ``nn.Linear`` weights -> one stacked ``in_proj``.
* :data:`MHA_FORWARD`: a whole batched multi-head self-attention forward pass.
* :data:`MASKS_FOR_TORCH`: course masks -> ``nn.MultiheadAttention``'s convention.
"""

from __future__ import annotations

import math

import torch
from torch import Tensor

from ..masks import causal_mask, padding_mask
from .core import Case, Exercise, Feedback, Mistake

__all__ = [
    "SPLIT_HEADS", "check_split_heads",
    "STACK_HEAD_WEIGHTS", "check_stack_head_weights",
    "MHA_FORWARD", "check_mha_forward",
    "MASKS_FOR_TORCH", "check_masks_for_torch",
]


def _randn(*shape: int, seed: int) -> Tensor:
    return torch.randn(*shape, generator=torch.Generator().manual_seed(seed), dtype=torch.float64)


# -- 4.1 split heads ---------------------------------------------------------------------

def _split_heads(x: Tensor, num_heads: int) -> Tensor:
    B, T, d = x.shape
    return x.view(B, T, num_heads, d // num_heads).transpose(1, 2)  # (B, h, T, dk)


def _split_view_as_b_h_t(x: Tensor, num_heads: int) -> Tensor:
    B, T, d = x.shape
    return x.view(B, num_heads, T, d // num_heads)  # right shape, wrong numbers


def _split_interleaved(x: Tensor, num_heads: int) -> Tensor:
    B, T, d = x.shape
    return x.view(B, T, d // num_heads, num_heads).permute(0, 3, 1, 2)  # head i = columns i, i+h, ...


def _split_no_transpose(x: Tensor, num_heads: int) -> Tensor:
    B, T, d = x.shape
    return x.view(B, T, num_heads, d // num_heads)  # (B, T, h, dk)


def _split_cases() -> list[Case]:
    return [
        Case((_randn(2, 3, 8, seed=40), 2), label="x of shape (2, 3, 8), 2 heads"),
        Case((_randn(1, 5, 12, seed=41), 3), label="x of shape (1, 5, 12), 3 heads"),
    ]


SPLIT_HEADS = Exercise(
    title="Exercise 4.1: split into heads",
    reference=_split_heads,
    make_cases=_split_cases,
    mistakes=[
        Mistake("view_as_b_h_t",
                "you viewed x directly as (B, h, T, dk): the shape is right, but each 'head' now "
                "holds slices of several tokens' vectors, not one slice of every token.",
                "view as (B, T, h, dk) first (that cuts each token's d numbers into h pieces), then "
                "transpose(1, 2).",
                _split_view_as_b_h_t),
        Mistake("interleaved",
                "your head i takes columns i, i+h, i+2h, ...: the heads are interleaved instead of "
                "being consecutive blocks of d_k columns.",
                "view(B, T, h, dk) puts head i in columns i*dk to (i+1)*dk - 1, which is where the "
                "stacked W_Q puts head i's rows.",
                _split_interleaved),
        Mistake("no_transpose",
                "you returned (B, T, h, dk): the heads are split but not moved next to the batch, so "
                "attention would compare heads with each other instead of tokens.",
                "add .transpose(1, 2) to get (B, h, T, dk).",
                _split_no_transpose),
    ],
    hint="unpack B, T, d = x.shape; a view can cut the last axis into (h, d_k); then move the head "
         "axis next to the batch axis.",
)
check_split_heads = SPLIT_HEADS.check


# -- 4.2 stack per-head weights into one in_proj ----------------------------------------

def _stack(q_parts: list[Tensor], k_parts: list[Tensor], v_parts: list[Tensor]) -> Tensor:
    return torch.cat([*q_parts, *k_parts, *v_parts], dim=0)  # (3*h*dk, d)


def _stack_columns(q_parts, k_parts, v_parts) -> Tensor:
    return torch.cat([torch.cat(q_parts, dim=1), torch.cat(k_parts, dim=1), torch.cat(v_parts, dim=1)])


def _stack_reversed_heads(q_parts, k_parts, v_parts) -> Tensor:
    return torch.cat([*q_parts[::-1], *k_parts[::-1], *v_parts[::-1]], dim=0)


def _stack_per_head_qkv(q_parts, k_parts, v_parts) -> Tensor:
    return torch.cat([w for q, k, v in zip(q_parts, k_parts, v_parts, strict=True) for w in (q, k, v)])


def _stack_formula_layout(q_parts, k_parts, v_parts) -> Tensor:
    return torch.cat([w.T for w in (*q_parts, *k_parts, *v_parts)], dim=1)  # (d, 3d)


def _stack_cases() -> list[Case]:
    cases = []
    for seed, (d, h) in enumerate([(6, 3), (8, 2)]):
        dk = d // h
        parts = [[_randn(dk, d, seed=100 + 10 * seed + 3 * i + j) for i in range(h)] for j in range(3)]
        cases.append(Case(tuple(parts), label=f"d_model={d}, {h} heads of width {dk}"))
    return cases


STACK_HEAD_WEIGHTS = Exercise(
    title="Exercise 4.2: stack per-head weights into one in_proj",
    reference=_stack,
    make_cases=_stack_cases,
    mistakes=[
        Mistake("stacked_columns",
                "you concatenated the heads side by side (dim=1). That is right for the formula's "
                "W_Q^i (d x dk), but nn.Linear stores the transpose, (dk x d): its heads go one "
                "under the other.",
                "torch.cat(list_of_dk_by_d_weights, dim=0) stacks rows.",
                _stack_columns),
        Mistake("formula_layout",
                "you built the formula's (d x 3d) matrix [W_Q | W_K | W_V]; in_proj.weight is its "
                "transpose, (3d x d), because nn.Linear computes x @ weight.T.",
                "stack the nn.Linear weights as they are, along dim=0, without transposing them.",
                _stack_formula_layout),
        Mistake("reversed_heads",
                "your heads are in reverse order: view(B, T, h, dk) reads head 0 from the first dk "
                "rows of W_Q, so head 0 must come first.",
                "keep the list order: q_parts[0], q_parts[1], ...",
                _stack_reversed_heads),
        Mistake("per_head_qkv",
                "you stacked q_0, k_0, v_0, q_1, k_1, v_1, ...: some libraries use that layout, but "
                "this course (and nn.MultiheadAttention) stacks all of W_Q, then all of W_K, then "
                "all of W_V.",
                "put all query heads first (in order), then all key heads, then all value heads.",
                _stack_per_head_qkv),
    ],
    hint="nn.Linear weights are (d_k, d): they stack along dim 0, all query heads first, then the key "
         "heads, then the value heads, giving (3d, d).",
)
check_stack_head_weights = STACK_HEAD_WEIGHTS.check


# -- 4.3 the whole batched forward pass -------------------------------------------------

def _mha_forward(x, w_in, b_in, w_out, b_out, num_heads, *, split="ok", merge="ok",
                 scale="ok", softmax_dim=-1, project=True) -> Tensor:
    """Reference (all options at their defaults) and every mistake, one switch each."""
    B, T, d = x.shape
    dk = d // num_heads
    q, k, v = (x @ w_in.T + b_in).split(d, dim=-1)  # 3 x (B, T, d)

    def heads(t: Tensor) -> Tensor:
        if split == "as_b_h_t":
            return t.reshape(B, num_heads, T, dk)  # (view would refuse: t is a column slice)
        if split == "no_transpose":
            return t.view(B, T, num_heads, dk)  # (B, T, h, dk): attention across heads
        return t.view(B, T, num_heads, dk).transpose(1, 2)  # (B, h, T, dk)

    q, k, v = heads(q), heads(k), heads(v)
    divisor = {"ok": math.sqrt(dk), "none": 1.0, "d_model": math.sqrt(d)}[scale]
    weights = torch.softmax(q @ k.transpose(-2, -1) / divisor, dim=softmax_dim)
    out = weights @ v  # (B, h, T, dk)
    if split == "no_transpose" or merge == "no_transpose":
        concat = out.reshape(B, T, d)
    else:
        concat = out.transpose(1, 2).reshape(B, T, d)  # (B, T, d): head 0 first
    return concat @ w_out.T + b_out if project else concat


def _reference_forward(x, w_in, b_in, w_out, b_out, num_heads):
    return _mha_forward(x, w_in, b_in, w_out, b_out, num_heads)


def _variant(**switch):
    return lambda x, w_in, b_in, w_out, b_out, num_heads: _mha_forward(
        x, w_in, b_in, w_out, b_out, num_heads, **switch)


def _forward_cases() -> list[Case]:
    cases = []
    for seed, (B, T, d, h) in enumerate([(2, 5, 8, 2), (1, 4, 12, 3)]):
        s = 200 + 10 * seed
        args = (_randn(B, T, d, seed=s), _randn(3 * d, d, seed=s + 1) / math.sqrt(d),
                _randn(3 * d, seed=s + 2), _randn(d, d, seed=s + 3) / math.sqrt(d),
                _randn(d, seed=s + 4), h)
        cases.append(Case(args, label=f"B={B}, T={T}, d_model={d}, {h} heads"))
    return cases


MHA_FORWARD = Exercise(
    title="Exercise 4.3: batched multi-head attention, forward pass",
    reference=_reference_forward,
    make_cases=_forward_cases,
    mistakes=[
        Mistake("split_no_transpose",
                "you split into (B, T, h, dk) and never transposed: each token's attention ran across "
                "its h heads instead of across the T tokens.",
                "after .view(B, T, h, dk) call .transpose(1, 2) to get (B, h, T, dk).",
                _variant(split="no_transpose")),
        Mistake("split_as_b_h_t",
                "you viewed the projections as (B, h, T, dk) directly: the shapes work, but each "
                "'head' mixes pieces of different tokens.",
                "view as (B, T, h, dk), then transpose(1, 2).",
                _variant(split="as_b_h_t")),
        Mistake("merge_no_transpose",
                "the heads were split correctly but merged in the wrong order: reshaping (B, h, T, dk) "
                "straight to (B, T, d) scrambles tokens and heads.",
                "undo the split in reverse: .transpose(1, 2).reshape(B, T, d) (or .contiguous().view).",
                _variant(merge="no_transpose")),
        Mistake("no_scaling",
                "you forgot to divide the scores by sqrt(d_k).",
                "scores = q @ k.transpose(-2, -1) / math.sqrt(dk)",
                _variant(scale="none")),
        Mistake("scaled_by_d_model",
                "you divided the scores by sqrt(d_model); each head's dot products have d_k terms, so "
                "the scale is 1/sqrt(d_k) with d_k = d_model / h.",
                "dk = d // num_heads; divide by math.sqrt(dk).",
                _variant(scale="d_model")),
        Mistake("softmax_wrong_axis",
                "your softmax normalised over the queries (dim=-2): each query's weights over the keys "
                "must sum to 1.",
                "torch.softmax(scores, dim=-1)",
                _variant(softmax_dim=-2)),
        Mistake("no_output_projection",
                "you returned the concatenated heads without the output projection W_O.",
                "finish with concat @ w_out.T + b_out.",
                _variant(project=False)),
    ],
    hint="project with w_in (x @ w_in.T + b_in), split q, k, v into heads, attend, merge the heads, "
         "project with w_out.",
)
check_mha_forward = MHA_FORWARD.check


# -- 4.4 masks for nn.MultiheadAttention ------------------------------------------------

def _to_torch(attn_mask: Tensor, key_padding_mask: Tensor) -> tuple[Tensor, Tensor]:
    return ~attn_mask, ~key_padding_mask


def _not_inverted(attn_mask, key_padding_mask):
    return attn_mask, key_padding_mask


def _only_padding_inverted(attn_mask, key_padding_mask):
    return attn_mask, ~key_padding_mask


def _only_attn_inverted(attn_mask, key_padding_mask):
    return ~attn_mask, key_padding_mask


def _float_masks(attn_mask, key_padding_mask):
    return (~attn_mask).float(), (~key_padding_mask).float()


def _mask_cases() -> list[Case]:
    window = causal_mask(5) & ~causal_mask(5, query_offset=-3)  # the last 3 tokens only
    return [
        Case((causal_mask(4), padding_mask([4, 2], 4)), label="causal 4x4, lengths [4, 2]"),
        Case((window, padding_mask([5, 3, 1], 5)), label="sliding window 5x5, lengths [5, 3, 1]"),
    ]


class _BoolMaskExercise(Exercise):
    """An exercise whose answer must also be *boolean*: nn.MultiheadAttention adds a float
    mask to the scores instead of reading it as allowed/blocked."""

    float_mistake: Mistake | None = None

    def check(self, fn) -> Feedback:
        feedback = super().check(fn)
        if not feedback.passed:
            return feedback
        args, kwargs = self.make_cases()[0].fresh()
        outputs = fn(*args, **kwargs)
        if any(isinstance(t, Tensor) and t.dtype != torch.bool for t in outputs):
            m = self.float_mistake
            return Feedback(self.title, "mistake", m.message, m.hint, mistake=m.key)
        return feedback


_FLOAT_MASKS = Mistake(
    "float_masks",
    "your masks have the right pattern but are not boolean (float or int): nn.MultiheadAttention "
    "ADDS a float mask to the scores (1.0 would nudge a score, not block it).",
    "keep them boolean: ~mask flips True and False without changing the dtype.",
    _float_masks,
)

MASKS_FOR_TORCH = _BoolMaskExercise(
    title="Exercise 4.4: course masks -> nn.MultiheadAttention masks",
    reference=_to_torch,
    make_cases=_mask_cases,
    mistakes=[
        Mistake("not_inverted",
                "you passed the course masks through unchanged: nn.MultiheadAttention reads True as "
                "BLOCKED, so it would attend to exactly the keys you meant to hide.",
                "invert both with ~ (logical not).",
                _not_inverted),
        Mistake("only_padding_inverted",
                "you inverted the key padding mask but not attn_mask: nn.MultiheadAttention uses "
                "True = blocked for both.",
                "return ~attn_mask as well.",
                _only_padding_inverted),
        Mistake("only_attn_inverted",
                "you inverted attn_mask but not the key padding mask: nn.MultiheadAttention's "
                "key_padding_mask also uses True = ignore this key.",
                "return ~key_padding_mask as well.",
                _only_attn_inverted),
        _FLOAT_MASKS,
    ],
    hint="both of nn.MultiheadAttention's masks use True = blocked; the course uses True = may attend.",
)
MASKS_FOR_TORCH.float_mistake = _FLOAT_MASKS
check_masks_for_torch = MASKS_FOR_TORCH.check
