"""Checks for lesson 7, "Grouped-query attention and the KV cache".

* :data:`REPEAT_KV`: expand ``g`` key/value heads to ``h`` (query head i reads K/V head
  ``i // (h // g)``), the copy that the no-copy function avoids.
* :data:`CACHE_BYTES`: the size of a KV cache from a model's shape.
* :data:`DECODE_STEP`: one decoding step with a grouped KV cache.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor

from .core import Case, Exercise, Mistake

__all__ = [
    "REPEAT_KV", "check_repeat_kv",
    "CACHE_BYTES", "check_cache_bytes",
    "DECODE_STEP", "check_decode_step",
]


def _randn(*shape: int, seed: int) -> Tensor:
    return torch.randn(*shape, generator=torch.Generator().manual_seed(seed), dtype=torch.float64)


# -- 7.1 repeat K/V heads ----------------------------------------------------------------

def _repeat_kv(kv: Tensor, num_heads: int) -> Tensor:
    return kv.repeat_interleave(num_heads // kv.shape[1], dim=1)  # (B, h, T, dk)


def _repeat_kv_interleaved(kv: Tensor, num_heads: int) -> Tensor:
    return kv.repeat(1, num_heads // kv.shape[1], 1, 1)  # head i gets K/V head i % g


def _repeat_kv_time_dim(kv: Tensor, num_heads: int) -> Tensor:
    return kv.repeat_interleave(num_heads // kv.shape[1], dim=2)  # (B, g, T*h/g, dk)


def _repeat_kv_by_g(kv: Tensor, num_heads: int) -> Tensor:
    return kv.repeat_interleave(kv.shape[1], dim=1)  # g copies instead of h/g


def _repeat_kv_h_times(kv: Tensor, num_heads: int) -> Tensor:
    return kv.repeat_interleave(num_heads, dim=1)  # g * h heads


def _repeat_kv_flattened(kv: Tensor, num_heads: int) -> Tensor:
    return kv.repeat_interleave(num_heads // kv.shape[1])  # no dim: a flat 1-D tensor


def _repeat_cases() -> list[Case]:
    return [
        Case((_randn(2, 2, 3, 4, seed=71), 6), label="B=2, g=2 K/V heads, h=6 query heads"),
        Case((_randn(1, 4, 5, 2, seed=72), 8), label="B=1, g=4, h=8"),
        Case((_randn(1, 1, 2, 3, seed=73), 3), label="B=1, g=1 (MQA), h=3"),
    ]


REPEAT_KV = Exercise(
    title="Exercise 7.1: repeat K/V heads for their query heads",
    reference=_repeat_kv,
    make_cases=_repeat_cases,
    mistakes=[
        Mistake("interleaved_groups",
                "query head i got K/V head i % g (interleaved), but the convention is blocked: "
                "query heads 0 .. h/g - 1 all read K/V head 0, the next h/g read head 1, ...",
                "kv.repeat(...) tiles the whole head axis; you want each head repeated in place.",
                _repeat_kv_interleaved),
        Mistake("wrong_dim",
                "you repeated along the time axis (dim 2), so the sequence grew and the head count "
                "stayed g.",
                "Heads are dim 1 of (B, g, T, dk).", _repeat_kv_time_dim),
        Mistake("repeated_g_times",
                "you made g copies of each K/V head; each must serve h/g query heads.",
                "The repeat count is num_heads // g.", _repeat_kv_by_g),
        Mistake("repeated_h_times",
                "you made h copies of each K/V head, so there are g * h heads; together the g "
                "K/V heads must make exactly h.",
                "The repeat count is num_heads // g, not num_heads.", _repeat_kv_h_times),
        Mistake("flattened_no_dim",
                "your answer is a flat 1-D tensor: repeat_interleave without dim= flattens its "
                "input first.", "Pass dim=1 (the head axis).", _repeat_kv_flattened),
    ],
    hint="Output (B, h, T, dk); query head i reads K/V head i // (h // g).",
)
check_repeat_kv = REPEAT_KV.check


# -- 7.2 cache size ----------------------------------------------------------------------

def _cache_bytes(num_layers: int, batch: int, num_heads: int, num_kv_heads: int, d_head: int,
                 seq_len: int, bits_per_element: int) -> int:
    return 2 * num_layers * batch * num_kv_heads * d_head * seq_len * bits_per_element // 8


def _cache_no_factor_two(num_layers, batch, num_heads, num_kv_heads, d_head, seq_len, bits):
    return num_layers * batch * num_kv_heads * d_head * seq_len * bits // 8


def _cache_query_heads(num_layers, batch, num_heads, num_kv_heads, d_head, seq_len, bits):
    return 2 * num_layers * batch * num_heads * d_head * seq_len * bits // 8


def _cache_bits(num_layers, batch, num_heads, num_kv_heads, d_head, seq_len, bits):
    return 2 * num_layers * batch * num_kv_heads * d_head * seq_len * bits


def _cache_one_layer(num_layers, batch, num_heads, num_kv_heads, d_head, seq_len, bits):
    return 2 * batch * num_kv_heads * d_head * seq_len * bits // 8


def _cache_no_batch(num_layers, batch, num_heads, num_kv_heads, d_head, seq_len, bits):
    return 2 * num_layers * num_kv_heads * d_head * seq_len * bits // 8


def _cache_cases() -> list[Case]:
    return [
        Case((32, 1, 32, 8, 128, 8192, 16), label="Llama-3-8B shape, batch 1, 8k tokens, 16-bit"),
        Case((80, 4, 64, 8, 128, 4096, 8), label="Llama-3-70B shape, batch 4, 4k tokens, 8-bit"),
        Case((2, 3, 4, 2, 16, 32, 32), label="a tiny model in float32"),
    ]


CACHE_BYTES = Exercise(
    title="Exercise 7.2: KV cache size in bytes",
    reference=_cache_bytes,
    make_cases=_cache_cases,
    mistakes=[
        Mistake("forgot_k_and_v", "your size is half the right one: the cache holds keys *and* "
                "values.", "Count two tensors per layer.", _cache_no_factor_two),
        Mistake("used_query_heads", "you counted the h query heads; only the g key/value heads "
                "are cached (that is the whole saving of GQA).", "Use num_kv_heads.",
                _cache_query_heads),
        Mistake("bits_not_bytes", "your answer is 8 times too large: it is in bits.",
                "Divide by 8 to get bytes.", _cache_bits),
        Mistake("one_layer", "that is one layer's cache: every layer keeps its own.",
                "Multiply by num_layers.", _cache_one_layer),
        Mistake("forgot_batch", "that is the cache of one sequence: every sequence in the batch "
                "keeps its own keys and values.", "Multiply by batch.", _cache_no_batch),
    ],
    hint="2 (K and V) x layers x batch x g x d_head x tokens x bytes per element.",
)
check_cache_bytes = CACHE_BYTES.check


# -- 7.3 one decode step with a grouped cache ---------------------------------------------

def _decode_step(q_new: Tensor, k_new: Tensor, v_new: Tensor, k_cache: Tensor,
                 v_cache: Tensor) -> tuple[Tensor, Tensor, Tensor]:
    k = torch.cat([k_cache, k_new], dim=2)  # (B, g, T+1, dk)
    v = torch.cat([v_cache, v_new], dim=2)
    out = F.scaled_dot_product_attention(q_new, k, v, enable_gqa=True)  # (B, h, 1, dk)
    return out, k, v


def _decode_prepended(q_new, k_new, v_new, k_cache, v_cache):
    k, v = torch.cat([k_new, k_cache], dim=2), torch.cat([v_new, v_cache], dim=2)
    return F.scaled_dot_product_attention(q_new, k, v, enable_gqa=True), k, v


def _decode_without_new_token(q_new, k_new, v_new, k_cache, v_cache):
    out = F.scaled_dot_product_attention(q_new, k_cache, v_cache, enable_gqa=True)
    return out, torch.cat([k_cache, k_new], dim=2), torch.cat([v_cache, v_new], dim=2)


def _decode_is_causal(q_new, k_new, v_new, k_cache, v_cache):
    k, v = torch.cat([k_cache, k_new], dim=2), torch.cat([v_cache, v_new], dim=2)
    return F.scaled_dot_product_attention(q_new, k, v, is_causal=True, enable_gqa=True), k, v


def _decode_interleaved(q_new, k_new, v_new, k_cache, v_cache):
    k, v = torch.cat([k_cache, k_new], dim=2), torch.cat([v_cache, v_new], dim=2)
    copies = q_new.shape[1] // k.shape[1]
    out = F.scaled_dot_product_attention(q_new, k.repeat(1, copies, 1, 1), v.repeat(1, copies, 1, 1))
    return out, k, v


def _decode_unscaled(q_new, k_new, v_new, k_cache, v_cache):
    k, v = torch.cat([k_cache, k_new], dim=2), torch.cat([v_cache, v_new], dim=2)
    out = F.scaled_dot_product_attention(q_new, k, v, enable_gqa=True, scale=1.0)
    return out, k, v


def _decode_returned_old_cache(q_new, k_new, v_new, k_cache, v_cache):
    k, v = torch.cat([k_cache, k_new], dim=2), torch.cat([v_cache, v_new], dim=2)
    return F.scaled_dot_product_attention(q_new, k, v, enable_gqa=True), k_cache, v_cache


def _decode_returned_repeated_cache(q_new, k_new, v_new, k_cache, v_cache):
    copies = q_new.shape[1] // k_cache.shape[1]
    k = torch.cat([k_cache, k_new], dim=2).repeat_interleave(copies, dim=1)  # (B, h, T+1, dk)
    v = torch.cat([v_cache, v_new], dim=2).repeat_interleave(copies, dim=1)
    return F.scaled_dot_product_attention(q_new, k, v), k, v


def _decode_softmax_over_queries(q_new, k_new, v_new, k_cache, v_cache):
    k, v = torch.cat([k_cache, k_new], dim=2), torch.cat([v_cache, v_new], dim=2)
    copies = q_new.shape[1] // k.shape[1]
    scores = q_new @ k.repeat_interleave(copies, dim=1).transpose(-2, -1) / q_new.shape[-1] ** 0.5
    weights = scores.softmax(dim=-2)  # over the single query: every weight becomes 1
    return weights @ v.repeat_interleave(copies, dim=1), k, v


def _decode_cases() -> list[Case]:
    cases = []
    for i, (B, h, g, T, dk) in enumerate([(2, 4, 2, 5, 8), (1, 6, 3, 3, 4), (1, 2, 1, 4, 16)]):
        s = 730 + 10 * i
        tensors = (3 * _randn(B, h, 1, dk, seed=s), _randn(B, g, 1, dk, seed=s + 1),
                   _randn(B, g, 1, dk, seed=s + 2), _randn(B, g, T, dk, seed=s + 3),
                   _randn(B, g, T, dk, seed=s + 4))
        cases.append(Case(tensors, label=f"B={B}, h={h}, g={g}, {T} cached tokens, dk={dk}"))
    return cases


DECODE_STEP = Exercise(
    title="Exercise 7.3: one decoding step with a grouped KV cache",
    reference=_decode_step,
    make_cases=_decode_cases,
    mistakes=[
        Mistake("prepended", "the output is right but the new key/value went to the *front* of "
                "the cache: the cache must stay in position order for the next steps.",
                "Concatenate [cache, new] along the time axis (dim 2).", _decode_prepended),
        Mistake("skipped_new_token", "the new token did not attend to itself: you attended over "
                "the old cache only.", "Append first, then attend.", _decode_without_new_token),
        Mistake("is_causal_in_decode", "is_causal=True with one query and T+1 keys is aligned "
                "top-left: the new token saw only the first key.",
                "A single newest query may see every cached key: no mask is needed.",
                _decode_is_causal),
        Mistake("interleaved_groups", "query head i used K/V head i % g (interleaved); the "
                "convention is i // (h // g).", "Use enable_gqa=True or repeat_interleave.",
                _decode_interleaved),
        Mistake("unscaled", "the scores were not divided by sqrt(dk).",
                "F.scaled_dot_product_attention scales by default; keep scale=None.",
                _decode_unscaled),
        Mistake("returned_old_cache", "the output is right but you returned the caches you were "
                "given: the next step would never see this token.",
                "Return the caches with the new key/value appended (T+1 positions).",
                _decode_returned_old_cache),
        Mistake("returned_repeated_cache", "the output is right but your returned caches have h "
                "heads: you stored the repeated copy, so the cache is h/g times larger, which is "
                "the memory GQA exists to save.",
                "Repeat (or use enable_gqa) only for the attention call; return the g-head caches.",
                _decode_returned_repeated_cache),
        Mistake("softmax_over_queries", "your softmax ran over the query axis (dim=-2): with one "
                "query every weight is 1, so the output is the sum of all values.",
                "Normalise each query's scores over the keys: softmax(dim=-1).",
                _decode_softmax_over_queries),
    ],
    hint="Return (output (B, h, 1, dk), k (B, g, T+1, dk), v (B, g, T+1, dk)); append along "
         "the time axis (dim 2); with F.scaled_dot_product_attention and g < h, pass "
         "enable_gqa=True.",
)
check_decode_step = DECODE_STEP.check

