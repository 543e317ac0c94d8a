"""Reference solutions and known mistakes of lesson07's exercises (not shipped with the package).

``scripts/exercise_answers.py build`` runs them on each check's test cases and stores the outputs in
``course_utils/exercises/answers/lesson07.pt``; the course's tests attach them to the checks.
"""

# ruff: noqa: F401, F403, F405, E501
from __future__ import annotations

import math
import re

import torch
import torch.nn.functional as F
from torch import Tensor

from course_utils.exercises.core import Case, Exercise, Feedback, Mistake, as_scalar, outputs_close
from course_utils.exercises.lesson07 import *
from course_utils.exercises.raising import DiagnosesRaisingAnswers


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


def _repeat_kv_feature_axis(kv: Tensor, num_heads: int) -> Tensor:
    return kv.repeat_interleave(num_heads // kv.shape[1], dim=-1)  # (B, g, T, dk*h/g)


def _repeat_kv_expanded_only(kv: Tensor, num_heads: int) -> Tensor:
    b, g, t, dk = kv.shape
    return kv[:, :, None].expand(b, g, num_heads // g, t, dk)  # 5-D: never reshaped


def _repeat_kv_float_count(kv: Tensor, num_heads: int) -> Tensor:
    return kv.repeat_interleave(num_heads / kv.shape[1], dim=1)  # raises: a float count


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


def _cache_group_size(num_layers, batch, num_heads, num_kv_heads, d_head, seq_len, bits):
    return 2 * num_layers * batch * (num_heads // num_kv_heads) * d_head * seq_len * bits // 8


def _cache_four_bytes(num_layers, batch, num_heads, num_kv_heads, d_head, seq_len, bits):
    return 2 * num_layers * batch * num_kv_heads * d_head * seq_len * 4  # float32 always


def _cache_two_bytes(num_layers, batch, num_heads, num_kv_heads, d_head, seq_len, bits):
    return 2 * num_layers * batch * num_kv_heads * d_head * seq_len * 2  # 16-bit always


def _cache_no_d_head(num_layers, batch, num_heads, num_kv_heads, d_head, seq_len, bits):
    return 2 * num_layers * batch * num_kv_heads * seq_len * bits // 8


def _cache_floored_bytes(num_layers, batch, num_heads, num_kv_heads, d_head, seq_len, bits):
    return 2 * num_layers * batch * num_kv_heads * d_head * seq_len * (bits // 8)  # 0 for 4-bit


def _cache_whole_byte(num_layers, batch, num_heads, num_kv_heads, d_head, seq_len, bits):
    return 2 * num_layers * batch * num_kv_heads * d_head * seq_len * max(1, bits // 8)  # 1 for 4-bit


def _cache_gib(num_layers, batch, num_heads, num_kv_heads, d_head, seq_len, bits):
    return 2 * num_layers * batch * num_kv_heads * d_head * seq_len * bits / 8 / 2**30


def _decode_step(q_new: Tensor, k_new: Tensor, v_new: Tensor, k_cache: Tensor,
                 v_cache: Tensor) -> tuple[Tensor, Tensor, Tensor]:
    k = torch.cat([k_cache, k_new], dim=2)  # (B, g, T+1, dk): append first, then attend
    v = torch.cat([v_cache, v_new], dim=2)
    B, h, _, dk = q_new.shape
    g = k.shape[1]
    q = q_new.reshape(B, g, h // g, dk)  # group j: query heads j*h/g .. (j+1)*h/g - 1 (blocked)
    scores = q @ k.transpose(-2, -1) / dk**0.5  # (B, g, h/g, T+1): each group reads its K once
    out = torch.softmax(scores, dim=-1) @ v  # (B, g, h/g, dk)
    return out.reshape(B, h, 1, dk), k, v


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


def _decode_softmax_over_group_heads(q_new, k_new, v_new, k_cache, v_cache):
    k, v = torch.cat([k_cache, k_new], dim=2), torch.cat([v_cache, v_new], dim=2)
    B, h, _, dk = q_new.shape
    g = k.shape[1]
    scores = q_new.reshape(B, g, h // g, dk) @ k.transpose(-2, -1) / dk**0.5  # (B, g, h/g, T+1)
    out = torch.softmax(scores, dim=-2) @ v  # over a group's query heads, not the keys
    return out.reshape(B, h, 1, dk), k, v


def _decode_group_axes_swapped(q_new, k_new, v_new, k_cache, v_cache):
    k, v = torch.cat([k_cache, k_new], dim=2), torch.cat([v_cache, v_new], dim=2)
    B, h, _, dk = q_new.shape
    g = k.shape[1]
    q = q_new.reshape(B, h // g, g, dk)  # (h/g, g): raises where h/g != g (and neither is 1)
    out = torch.softmax(q @ k.transpose(-2, -1) / dk**0.5, dim=-1) @ v
    return out.reshape(B, h, 1, dk), k, v


def _decode_scaled_by_dk(q_new, k_new, v_new, k_cache, v_cache):
    k, v = torch.cat([k_cache, k_new], dim=2), torch.cat([v_cache, v_new], dim=2)
    out = F.scaled_dot_product_attention(q_new, k, v, enable_gqa=True, scale=1 / q_new.shape[-1])
    return out, k, v


def _decode_new_token_only(q_new, k_new, v_new, k_cache, v_cache):
    out = F.scaled_dot_product_attention(q_new, k_new, v_new, enable_gqa=True)  # ignores the cache
    return out, torch.cat([k_cache, k_new], dim=2), torch.cat([v_cache, v_new], dim=2)


def _decode_swapped_caches(q_new, k_new, v_new, k_cache, v_cache):
    k, v = torch.cat([k_cache, k_new], dim=2), torch.cat([v_cache, v_new], dim=2)
    return F.scaled_dot_product_attention(q_new, k, v, enable_gqa=True), v, k


def _decode_cat_on_heads(q_new, k_new, v_new, k_cache, v_cache):
    k, v = torch.cat([k_cache, k_new], dim=1), torch.cat([v_cache, v_new], dim=1)  # raises
    return F.scaled_dot_product_attention(q_new, k, v, enable_gqa=True), k, v


def _decode_without_enable_gqa(q_new, k_new, v_new, k_cache, v_cache):
    k, v = torch.cat([k_cache, k_new], dim=2), torch.cat([v_cache, v_new], dim=2)
    return F.scaled_dot_product_attention(q_new, k, v), k, v  # raises when g < h


def _decode_manual_unmatched_heads(q_new, k_new, v_new, k_cache, v_cache):
    k, v = torch.cat([k_cache, k_new], dim=2), torch.cat([v_cache, v_new], dim=2)
    scores = q_new @ k.transpose(-2, -1) / q_new.shape[-1] ** 0.5  # raises: h vs g heads
    return scores.softmax(dim=-1) @ v, k, v


def _decode_softmax_without_max_shift(q_new, k_new, v_new, k_cache, v_cache):
    k, v = torch.cat([k_cache, k_new], dim=2), torch.cat([v_cache, v_new], dim=2)
    copies = q_new.shape[1] // k.shape[1]
    scores = q_new @ k.repeat_interleave(copies, dim=1).transpose(-2, -1) / q_new.shape[-1] ** 0.5
    e = torch.exp(scores)  # no max shift: inf where a score passes ~709
    return (e / e.sum(dim=-1, keepdim=True)) @ v.repeat_interleave(copies, dim=1), k, v


def _merge_halves(out_a: Tensor, lse_a: Tensor, out_b: Tensor, lse_b: Tensor) -> Tensor:
    """Attention over all keys from its two halves: ``out_*`` ``(B, h, dk)``, ``lse_*`` ``(B, h)``
    (the log of each half's sum of exp(scores))."""
    lse = torch.logaddexp(lse_a, lse_b)  # (B, h): log of the whole sum
    return torch.exp(lse_a - lse)[..., None] * out_a + torch.exp(lse_b - lse)[..., None] * out_b


def _merge_averaged(out_a, lse_a, out_b, lse_b):
    return (out_a + out_b) / 2


def _merge_not_normalised(out_a, lse_a, out_b, lse_b):
    return torch.exp(lse_a)[..., None] * out_a + torch.exp(lse_b)[..., None] * out_b


def _merge_max_not_logsumexp(out_a, lse_a, out_b, lse_b):
    top = torch.maximum(lse_a, lse_b)
    return torch.exp(lse_a - top)[..., None] * out_a + torch.exp(lse_b - top)[..., None] * out_b


def _merge_exp_overflow(out_a, lse_a, out_b, lse_b):
    total = torch.exp(lse_a) + torch.exp(lse_b)
    return (torch.exp(lse_a) / total)[..., None] * out_a + (torch.exp(lse_b) / total)[..., None] * out_b


def _merge_lse_as_sum(out_a, lse_a, out_b, lse_b):
    total = lse_a + lse_b
    return (lse_a / total)[..., None] * out_a + (lse_b / total)[..., None] * out_b


def _merge_swapped(out_a, lse_a, out_b, lse_b):
    lse = torch.logaddexp(lse_a, lse_b)
    return torch.exp(lse_b - lse)[..., None] * out_a + torch.exp(lse_a - lse)[..., None] * out_b


def _merge_summed(out_a, lse_a, out_b, lse_b):
    return out_a + out_b


def _merge_log_shares(out_a, lse_a, out_b, lse_b):
    lse = torch.logaddexp(lse_a, lse_b)
    return (lse_a - lse)[..., None] * out_a + (lse_b - lse)[..., None] * out_b


def _merge_kept_one_half(out_a, lse_a, out_b, lse_b):
    return torch.where((lse_a >= lse_b)[..., None], out_a, out_b)


def _merge_out_a_only(out_a, lse_a, out_b, lse_b):
    return out_a  # the first range's attention alone: range b's keys dropped


def _merge_out_b_only(out_a, lse_a, out_b, lse_b):
    return out_b  # the second range's attention alone: range a's keys dropped


def _merge_not_unsqueezed(out_a, lse_a, out_b, lse_b):
    lse = torch.logaddexp(lse_a, lse_b)
    return torch.exp(lse_a - lse) * out_a + torch.exp(lse_b - lse) * out_b  # (B, h) * (B, h, dk)


def _repeat_kv_index_i_div_g(kv: Tensor, num_heads: int) -> Tensor:
    g = kv.shape[1]
    return kv[:, torch.tensor([i // g for i in range(num_heads)])]  # raises: i // g passes g - 1


def _repeat_kv_expand(kv: Tensor, num_heads: int) -> Tensor:
    B, g, T, dk = kv.shape
    return kv.expand(B, num_heads, T, dk)  # raises: expand stretches only size-1 axes


def _repeat_kv_batch_axis(kv: Tensor, num_heads: int) -> Tensor:
    return kv.repeat_interleave(num_heads // kv.shape[1], dim=0)  # (B*h/g, g, T, dk)


def _cache_mib(num_layers, batch, num_heads, num_kv_heads, d_head, seq_len, bits):
    return 2 * num_layers * batch * num_kv_heads * d_head * seq_len * bits / 8 / 2**20


def _cache_g_times_h(num_layers, batch, num_heads, num_kv_heads, d_head, seq_len, bits):
    return 2 * num_layers * batch * num_kv_heads * num_heads * d_head * seq_len * bits // 8


def _cache_times_four(num_layers, batch, num_heads, num_kv_heads, d_head, seq_len, bits):
    return 2 * num_layers * batch * num_kv_heads * d_head * seq_len * bits // 8 * 4


def _decode_repeated_by_g(q_new, k_new, v_new, k_cache, v_cache):
    k, v = torch.cat([k_cache, k_new], dim=2), torch.cat([v_cache, v_new], dim=2)
    g = k.shape[1]
    out = F.scaled_dot_product_attention(q_new, k.repeat_interleave(g, 1), v.repeat_interleave(g, 1))
    return out, k, v  # raises where g != h // g


def _decode_index_i_div_g(q_new, k_new, v_new, k_cache, v_cache):
    k, v = torch.cat([k_cache, k_new], dim=2), torch.cat([v_cache, v_new], dim=2)
    index = torch.tensor([i // k.shape[1] for i in range(q_new.shape[1])])
    return F.scaled_dot_product_attention(q_new, k[:, index], v[:, index]), k, v  # raises where g = 1


def _decode_new_key_in_value_cache(q_new, k_new, v_new, k_cache, v_cache):
    k, v = torch.cat([k_cache, k_new], dim=2), torch.cat([v_cache, k_new], dim=2)
    return F.scaled_dot_product_attention(q_new, k, v, enable_gqa=True), k, v


def _decode_appends_swapped(q_new, k_new, v_new, k_cache, v_cache):
    k, v = torch.cat([k_cache, v_new], dim=2), torch.cat([v_cache, k_new], dim=2)  # each cache got the other's
    return F.scaled_dot_product_attention(q_new, k, v, enable_gqa=True), k, v


def _decode_scaled_by_sqrt_length(q_new, k_new, v_new, k_cache, v_cache):
    k, v = torch.cat([k_cache, k_new], dim=2), torch.cat([v_cache, v_new], dim=2)
    scale = 1 / math.sqrt(k.shape[2])
    return F.scaled_dot_product_attention(q_new, k, v, scale=scale, enable_gqa=True), k, v


def _cache_kib(num_layers, batch, num_heads, num_kv_heads, d_head, seq_len, bits):
    return 2 * num_layers * batch * num_kv_heads * d_head * seq_len * bits / 8 / 2**10


def _decode_dropped_oldest(q_new, k_new, v_new, k_cache, v_cache):
    T = k_cache.shape[2]  # a sliding window of T: the oldest token falls out as the new one comes in
    k, v = torch.cat([k_cache, k_new], dim=2)[:, :, -T:], torch.cat([v_cache, v_new], dim=2)[:, :, -T:]
    return F.scaled_dot_product_attention(q_new, k, v, enable_gqa=True), k, v


def _merge_softmax_over_batch(out_a, lse_a, out_b, lse_b):
    w = torch.softmax(torch.stack([lse_a, lse_b]), dim=1)  # (2, B, h), normalised over B, not the 2
    return w[0][..., None] * out_a + w[1][..., None] * out_b


def _merge_softmax_over_heads(out_a, lse_a, out_b, lse_b):
    w = torch.softmax(torch.stack([lse_a, lse_b], dim=-1), dim=1)  # (B, h, 2), normalised over h
    return w[..., 0, None] * out_a + w[..., 1, None] * out_b


REFERENCES = {
    'REPEAT_KV': _repeat_kv,
    'CACHE_BYTES': _cache_bytes,
    'DECODE_STEP': _decode_step,
    'MERGE_HALVES': _merge_halves,
}

MISTAKES = {
    'REPEAT_KV': {
        'interleaved_groups': _repeat_kv_interleaved,
        'wrong_dim': _repeat_kv_time_dim,
        'repeated_g_times': _repeat_kv_by_g,
        'repeated_h_times': _repeat_kv_h_times,
        'flattened_no_dim': _repeat_kv_flattened,
        'repeated_feature_axis': _repeat_kv_feature_axis,
        'expanded_not_reshaped': _repeat_kv_expanded_only,
        'float_repeat_count': _repeat_kv_float_count,
        'index_i_div_g': _repeat_kv_index_i_div_g,
        'expanded_head_axis': _repeat_kv_expand,
        'repeated_batch_axis': _repeat_kv_batch_axis,
    },
    'CACHE_BYTES': {
        'forgot_k_and_v': _cache_no_factor_two,
        'used_query_heads': _cache_query_heads,
        'bits_not_bytes': _cache_bits,
        'one_layer': _cache_one_layer,
        'forgot_batch': _cache_no_batch,
        'used_group_size': _cache_group_size,
        'assumed_float32': _cache_four_bytes,
        'assumed_16_bit': _cache_two_bytes,
        'floored_bytes_per_element': _cache_floored_bytes,
        'whole_byte_per_element': _cache_whole_byte,
        'forgot_d_head': _cache_no_d_head,
        'returned_gib': _cache_gib,
        'returned_mib': _cache_mib,
        'returned_kib': _cache_kib,
        'counted_g_times_h': _cache_g_times_h,
        'times_four': _cache_times_four,
    },
    'DECODE_STEP': {
        'prepended': _decode_prepended,
        'skipped_new_token': _decode_without_new_token,
        'is_causal_in_decode': _decode_is_causal,
        'interleaved_groups': _decode_interleaved,
        'unscaled': _decode_unscaled,
        'returned_old_cache': _decode_returned_old_cache,
        'returned_repeated_cache': _decode_returned_repeated_cache,
        'softmax_over_queries': _decode_softmax_over_queries,
        'scaled_by_dk': _decode_scaled_by_dk,
        'attended_new_token_only': _decode_new_token_only,
        'returned_caches_swapped': _decode_swapped_caches,
        'appended_on_wrong_axis': _decode_cat_on_heads,
        'forgot_enable_gqa': _decode_without_enable_gqa,
        'repeated_by_g': _decode_repeated_by_g,
        'kv_index_i_div_g': _decode_index_i_div_g,
        'new_key_in_value_cache': _decode_new_key_in_value_cache,
        'appends_swapped': _decode_appends_swapped,
        'scaled_by_sqrt_length': _decode_scaled_by_sqrt_length,
        'softmax_without_max_shift': _decode_softmax_without_max_shift,
        'heads_not_matched': _decode_manual_unmatched_heads,
        'softmax_over_group_heads': _decode_softmax_over_group_heads,
        'group_axes_swapped': _decode_group_axes_swapped,
        'dropped_oldest_token': _decode_dropped_oldest,
    },
    'MERGE_HALVES': {
        'averaged': _merge_averaged,
        'not_normalised': _merge_not_normalised,
        'max_not_logsumexp': _merge_max_not_logsumexp,
        'exp_overflow': _merge_exp_overflow,
        'lse_used_as_sum': _merge_lse_as_sum,
        'weights_swapped': _merge_swapped,
        'summed': _merge_summed,
        'log_shares': _merge_log_shares,
        'kept_one_half': _merge_kept_one_half,
        'returned_out_a_only': _merge_out_a_only,
        'returned_out_b_only': _merge_out_b_only,
        'softmax_over_batch': _merge_softmax_over_batch,
        'softmax_over_heads': _merge_softmax_over_heads,
        'weights_not_unsqueezed': _merge_not_unsqueezed,
    },
}
