"""Reference solutions and known mistakes of lesson03's exercises (not shipped with the package).

``scripts/exercise_answers.py build`` runs them on each check's test cases and stores the outputs in
``course_utils/exercises/answers/lesson03.pt``; the course's tests attach them to the checks.
"""

# ruff: noqa: F401, F403, F405, E501
from __future__ import annotations

import math

import torch
from torch import Tensor

from course_utils.exercises.core import Case, Exercise, Mistake
from course_utils.exercises.lesson03 import *
from course_utils.exercises.raising import DiagnosesRaisingAnswers, requested_shape


def _split_reference(x: Tensor, num_heads: int) -> Tensor:
    *lead, T, d = x.shape
    return x.view(*lead, T, num_heads, d // num_heads).transpose(-3, -2)  # (..., h, T, dk)


def _split_view_only(x: Tensor, num_heads: int) -> Tensor:
    *lead, T, d = x.shape
    return x.view(*lead, num_heads, T, d // num_heads)  # right shape, features scrambled


def _split_no_transpose(x: Tensor, num_heads: int) -> Tensor:
    *lead, T, d = x.shape
    return x.view(*lead, T, num_heads, d // num_heads)  # (..., T, h, dk)


def _split_wrong_dims(x: Tensor, num_heads: int) -> Tensor:
    *lead, T, d = x.shape
    return x.view(*lead, T, num_heads, d // num_heads).transpose(-2, -1)  # (..., T, dk, h)


def _split_transpose_first(x: Tensor, num_heads: int) -> Tensor:
    *lead, T, d = x.shape
    return x.transpose(-2, -1).reshape(*lead, num_heads, T, d // num_heads)  # right shape, wrong values


def _split_interleaved(x: Tensor, num_heads: int) -> Tensor:
    *lead, T, d = x.shape
    return x.view(*lead, T, d // num_heads, num_heads).movedim(-1, -3)  # head i = columns i, i+h, ...


def _split_dk_h_swapped(x: Tensor, num_heads: int) -> Tensor:
    *lead, T, d = x.shape
    return x.view(*lead, T, d // num_heads, num_heads).transpose(-3, -2)  # (..., dk, T, h)


def _split_front_axes(x: Tensor, num_heads: int) -> Tensor:
    *lead, T, d = x.shape
    return x.view(*lead, T, num_heads, d // num_heads).transpose(1, 2)  # right only with one leading axis


def _split_batch_assumed(x: Tensor, num_heads: int) -> Tensor:
    B, T, d = x.shape  # ValueError on (T, d) and on (B, S, T, d)
    return x.view(B, T, num_heads, d // num_heads).transpose(1, 2)


def _split_then_zero_x(x: Tensor, num_heads: int) -> Tensor:
    heads = x.view(*x.shape[:-1], num_heads, -1).transpose(-3, -2)
    x.zero_()  # in place: the caller's x and the view of it both become zeros
    return heads


def _split_float_width(x: Tensor, num_heads: int) -> Tensor:
    *lead, T, d = x.shape
    return x.view(*lead, T, num_heads, d / num_heads).transpose(-3, -2)  # TypeError: a float size


def _split_permute_four_axes(x: Tensor, num_heads: int) -> Tensor:
    return x.view(*x.shape[:-1], num_heads, -1).permute(0, 2, 1, 3)  # right only for (B, T, d)


def _split_einsum_four_letters(x: Tensor, num_heads: int) -> Tensor:
    return torch.einsum("bthk->bhtk", x.view(*x.shape[:-1], num_heads, -1))  # right only for (B, T, d)


def _merge_reference(heads: Tensor) -> Tensor:
    B, h, T, dk = heads.shape
    return heads.transpose(1, 2).contiguous().view(B, T, h * dk)  # (B, T, d)


def _merge_view_only(heads: Tensor) -> Tensor:
    B, h, T, dk = heads.shape
    return heads.reshape(B, T, h * dk)  # no transpose back: heads and tokens mixed


def _merge_interleaved(heads: Tensor) -> Tensor:
    B, h, T, dk = heads.shape
    return heads.permute(0, 2, 3, 1).reshape(B, T, h * dk)  # features interleaved across heads


def _merge_summed(heads: Tensor) -> Tensor:
    return heads.sum(dim=1)  # (B, T, dk): heads added, not concatenated


def _merge_averaged(heads: Tensor) -> Tensor:
    return heads.mean(dim=1)  # (B, T, dk): heads averaged, not concatenated


def _merge_not_flattened(heads: Tensor) -> Tensor:
    return heads.transpose(1, 2)  # (B, T, h, dk): the right order, but h and dk not joined


def _merge_along_tokens(heads: Tensor) -> Tensor:
    return torch.cat(heads.unbind(1), dim=1)  # (B, h*T, dk): heads one after another as tokens


def _merge_view_no_contiguous(heads: Tensor) -> Tensor:
    B, h, T, dk = heads.shape
    return heads.transpose(1, 2).view(B, T, h * dk)  # raises: the transpose is not contiguous


def _merge_last_two_swapped(heads: Tensor) -> Tensor:
    B, h, T, dk = heads.shape
    return heads.transpose(-1, -2).reshape(B, T, h * dk)  # (B, h, dk, T) flattened: scrambled


def _merge_mean_tiled(heads: Tensor) -> Tensor:
    return heads.mean(dim=1).repeat(1, 1, heads.shape[1])  # (B, T, d), every head's block the same


def _merge_sum_tiled(heads: Tensor) -> Tensor:
    return heads.sum(dim=1).repeat(1, 1, heads.shape[1])  # (B, T, d), every head's block the same sum


def _params_reference(d_model: int, num_heads: int, bias: bool = True) -> int:
    d_k = d_model // num_heads
    weights = 3 * num_heads * d_model * d_k + d_model * d_model  # W_Q, W_K, W_V in h slices; W_O
    return weights + (4 * d_model if bias else 0)


def _params_no_bias(d_model: int, num_heads: int, bias: bool = True) -> int:
    return 4 * d_model * d_model


def _params_three_matrices(d_model: int, num_heads: int, bias: bool = True) -> int:
    return 3 * d_model * d_model + (3 * d_model if bias else 0)


def _params_w_o_per_head(d_model: int, num_heads: int, bias: bool = True) -> int:
    return (3 + num_heads) * d_model * d_model + ((3 + num_heads) * d_model if bias else 0)


def _params_full_width_heads(d_model: int, num_heads: int, bias: bool = True) -> int:
    return (3 * num_heads + 1) * d_model * d_model + ((3 * num_heads + 1) * d_model if bias else 0)


def _params_whole_layer_per_head(d_model: int, num_heads: int, bias: bool = True) -> int:
    return num_heads * (4 * d_model * d_model + (4 * d_model if bias else 0))  # a whole layer per head


def _params_bias_always(d_model: int, num_heads: int, bias: bool = True) -> int:
    return 4 * d_model * d_model + 4 * d_model  # the bias argument ignored


def _params_no_out_bias(d_model: int, num_heads: int, bias: bool = True) -> int:
    return 4 * d_model * d_model + (3 * d_model if bias else 0)  # b_Q, b_K, b_V but no b_O


def _params_bias_per_head(d_model: int, num_heads: int, bias: bool = True) -> int:
    per_head = 3 * num_heads * d_model + d_model  # a full-width bias for every head's Q, K, V
    return 4 * d_model * d_model + (per_head if bias else 0)


def _params_all_biases_per_head(d_model: int, num_heads: int, bias: bool = True) -> int:
    return 4 * d_model * d_model + (4 * num_heads * d_model if bias else 0)  # b_O per head too


def _params_one_head(d_model: int, num_heads: int, bias: bool = True) -> int:
    d_k = d_model // num_heads  # one head's W_Q^i, W_K^i, W_V^i and their biases, then W_O
    return 3 * d_model * d_k + d_model * d_model + ((3 * d_k + d_model) if bias else 0)


def _params_bias_width_dk(d_model: int, num_heads: int, bias: bool = True) -> int:
    return 4 * d_model * d_model + (4 * (d_model // num_heads) if bias else 0)  # one head's bias each


def _params_square_heads(d_model: int, num_heads: int, bias: bool = True) -> int:
    d_k = d_model // num_heads  # four (d_k, d_k) squares per head, W_O included
    return num_heads * 4 * d_k * d_k + (4 * d_model if bias else 0)


def _score_reference(seq_len: int, d_model: int, num_heads: int) -> int:
    d_k = d_model // num_heads
    return num_heads * seq_len * seq_len * d_k  # h heads, each (T, dk) @ (dk, T)


def _score_h_twice(seq_len: int, d_model: int, num_heads: int) -> int:
    return num_heads * seq_len * seq_len * d_model


def _score_one_head(seq_len: int, d_model: int, num_heads: int) -> int:
    return seq_len * seq_len * (d_model // num_heads)


def _score_flops(seq_len: int, d_model: int, num_heads: int) -> int:
    return 2 * seq_len * seq_len * d_model  # FLOPs of Q K^T, or MACs of Q K^T plus weights @ V


def _score_linear_in_t(seq_len: int, d_model: int, num_heads: int) -> int:
    return seq_len * d_model


def _score_causal_half(seq_len: int, d_model: int, num_heads: int) -> int:
    return seq_len * seq_len * d_model // 2  # only "half" of the score matrix


def _score_causal_triangle(seq_len: int, d_model: int, num_heads: int) -> int:
    return seq_len * (seq_len + 1) // 2 * d_model  # only the entries a causal mask keeps


def _score_with_qk_projections(seq_len: int, d_model: int, num_heads: int) -> int:
    return seq_len * seq_len * d_model + 2 * seq_len * d_model * d_model  # + computing Q and K


def _score_with_qkv_projections(seq_len: int, d_model: int, num_heads: int) -> int:
    return seq_len * seq_len * d_model + 3 * seq_len * d_model * d_model  # + Q, K and V


def _score_one_mac_per_score(seq_len: int, d_model: int, num_heads: int) -> int:
    return num_heads * seq_len * seq_len  # the number of scores, not the work per score


def _score_exact_flops(seq_len: int, d_model: int, num_heads: int) -> int:
    d_k = d_model // num_heads  # d_k multiplications and d_k - 1 additions per score
    return num_heads * seq_len * seq_len * (2 * d_k - 1)


def _score_with_scaling(seq_len: int, d_model: int, num_heads: int) -> int:
    return seq_len * seq_len * d_model + num_heads * seq_len * seq_len  # + one division per score


def _score_projection(seq_len: int, d_model: int, num_heads: int) -> int:
    return seq_len * d_model * d_model  # the cost of x @ W_Q, not of Q K^T


def _score_sizes_multiplied(seq_len: int, d_model: int, num_heads: int) -> int:
    d_k = d_model // num_heads
    return num_heads * (seq_len * d_k) * (d_k * seq_len)  # the shared d_k counted twice


def _score_sqrt_dk(seq_len: int, d_model: int, num_heads: int) -> float:
    return num_heads * seq_len * seq_len * math.sqrt(d_model // num_heads)  # the scale, not the length


def _params_float_dk(d_model: int, num_heads: int, bias: bool = True) -> float:
    d_k = d_model / num_heads  # a float: every count built from it is one too
    weights = 3 * num_heads * d_model * d_k + d_model * d_model
    return weights + (4 * d_model if bias else 0)


def _score_float_dk(seq_len: int, d_model: int, num_heads: int) -> float:
    return num_heads * seq_len ** 2 * (d_model / num_heads)  # right value, as a float


REFERENCES = {
    'SPLIT_HEADS': _split_reference,
    'MERGE_HEADS': _merge_reference,
    'PARAMETER_COUNT': _params_reference,
    'SCORE_MACS': _score_reference,
}

MISTAKES = {
    'SPLIT_HEADS': {
        'view_without_transpose': _split_view_only,
        'missing_transpose': _split_no_transpose,
        'transposed_wrong_dims': _split_wrong_dims,
        'transpose_before_split': _split_transpose_first,
        'interleaved': _split_interleaved,
        'heads_and_width_swapped': _split_dk_h_swapped,
        'axes_counted_from_the_front': _split_front_axes,
        'batch_axis_assumed': _split_batch_assumed,
        'edited_x_in_place': _split_then_zero_x,
        'float_head_width': _split_float_width,
        'permute_lists_four_axes': _split_permute_four_axes,
        'einsum_letters_for_every_axis': _split_einsum_four_letters,
    },
    'MERGE_HEADS': {
        'view_without_transpose_back': _merge_view_only,
        'heads_interleaved': _merge_interleaved,
        'summed_heads': _merge_summed,
        'averaged_heads': _merge_averaged,
        'not_flattened': _merge_not_flattened,
        'concatenated_along_tokens': _merge_along_tokens,
        'last_two_axes_swapped': _merge_last_two_swapped,
        'averaged_then_tiled': _merge_mean_tiled,
        'summed_then_tiled': _merge_sum_tiled,
        'view_without_contiguous': _merge_view_no_contiguous,
    },
    'PARAMETER_COUNT': {
        'forgot_biases': _params_no_bias,
        'only_three_matrices': _params_three_matrices,
        'w_o_per_head': _params_w_o_per_head,
        'full_width_heads': _params_full_width_heads,
        'whole_layer_per_head': _params_whole_layer_per_head,
        'bias_always_added': _params_bias_always,
        'forgot_output_bias': _params_no_out_bias,
        'bias_per_head': _params_bias_per_head,
        'all_biases_per_head': _params_all_biases_per_head,
        'bias_width_d_k': _params_bias_width_dk,
        'square_head_matrices': _params_square_heads,
        'one_head_projections': _params_one_head,
        'float_count': _params_float_dk,
    },
    'SCORE_MACS': {
        'heads_counted_twice': _score_h_twice,
        'one_head_only': _score_one_head,
        'twice_the_scores': _score_flops,
        'linear_in_length': _score_linear_in_t,
        'causal_half': _score_causal_half,
        'causal_triangle': _score_causal_triangle,
        'projections_added_qk': _score_with_qk_projections,
        'projections_added_qkv': _score_with_qkv_projections,
        'one_mac_per_score': _score_one_mac_per_score,
        'exact_flops': _score_exact_flops,
        'scaling_counted': _score_with_scaling,
        'projection_cost': _score_projection,
        'sizes_multiplied': _score_sizes_multiplied,
        'sqrt_d_k_per_score': _score_sqrt_dk,
        'float_count': _score_float_dk,
    },
}
