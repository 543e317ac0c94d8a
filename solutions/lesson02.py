"""Reference solutions and known mistakes of lesson02's exercises (not shipped with the package).

``scripts/exercise_answers.py build`` runs them on each check's test cases and stores the outputs in
``course_utils/exercises/answers/lesson02.pt``; the course's tests attach them to the checks.
"""

# ruff: noqa: F401, F403, F405, E501
from __future__ import annotations

import math
import warnings
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F
from torch import Tensor

from course_utils.exercises.core import _EXITS, Case, Exercise, Feedback, Mistake
from course_utils.exercises.lesson02 import *
from course_utils.tasks.worked_example import load_worked_example


def _softmax_rows(scores: np.ndarray) -> np.ndarray:
    shifted = scores - scores.max(axis=-1, keepdims=True)  # the largest entry becomes 0
    e = np.exp(shifted)
    return e / e.sum(axis=-1, keepdims=True)


def _softmax_columns(scores: np.ndarray) -> np.ndarray:
    e = np.exp(scores - scores.max(axis=0, keepdims=True))
    return e / e.sum(axis=0, keepdims=True)


def _softmax_unshifted(scores: np.ndarray) -> np.ndarray:
    with np.errstate(over="ignore", invalid="ignore"):
        e = np.exp(scores)
        return e / e.sum(axis=-1, keepdims=True)


def _softmax_axis_1(scores: np.ndarray) -> np.ndarray:
    e = np.exp(scores - scores.max(axis=1, keepdims=True))  # right for 2-D input only
    return e / e.sum(axis=1, keepdims=True)


def _softmax_sum_axis_1(scores: np.ndarray) -> np.ndarray:
    e = np.exp(scores - scores.max(axis=-1, keepdims=True))
    return e / e.sum(axis=1, keepdims=True)  # the shift per row, the sum over axis 1: 2-D only


def _softmax_mean_shift(scores: np.ndarray) -> np.ndarray:
    with np.errstate(over="ignore", invalid="ignore"):
        e = np.exp(scores - scores.mean(axis=-1, keepdims=True))  # an entry far above the mean overflows
        return e / e.sum(axis=-1, keepdims=True)


def _softmax_min_shift(scores: np.ndarray) -> np.ndarray:
    with np.errstate(over="ignore", invalid="ignore"):
        e = np.exp(scores - scores.min(axis=-1, keepdims=True))  # the largest entry can overflow
        return e / e.sum(axis=-1, keepdims=True)


def _softmax_global_max_shift(scores: np.ndarray) -> np.ndarray:
    with np.errstate(invalid="ignore"):
        e = np.exp(scores - scores.max())  # a row far below the global maximum underflows to 0
        return e / e.sum(axis=-1, keepdims=True)


def _softmax_whole_matrix(scores: np.ndarray) -> np.ndarray:
    e = np.exp(scores - scores.max())
    return e / e.sum()


def _softmax_without_exp(scores: np.ndarray) -> np.ndarray:
    with np.errstate(divide="ignore", invalid="ignore"):
        return scores / scores.sum(axis=-1, keepdims=True)


def _softmax_no_keepdims(scores: np.ndarray) -> np.ndarray:
    e = np.exp(scores - scores.max(axis=-1))  # (..., n) - (...,): lines up with the wrong axis
    return e / e.sum(axis=-1)


def _softmax_in_torch(scores: np.ndarray) -> torch.Tensor:
    return torch.softmax(torch.from_numpy(scores), dim=-1)  # the right numbers, but a tensor


def _softmax_as_list(scores: np.ndarray) -> list:
    return _softmax_rows(scores).tolist()  # the right numbers, but a list


def _scores(q: Tensor, k: Tensor, scale: float) -> Tensor:
    return q @ k.transpose(-2, -1) / scale  # (..., Tq, Tk)


def _attention_weights(q: Tensor, k: Tensor) -> Tensor:
    return torch.softmax(_scores(q, k, math.sqrt(q.shape[-1])), dim=-1)


def _weights_wrong_axis(q: Tensor, k: Tensor) -> Tensor:
    return torch.softmax(_scores(q, k, math.sqrt(q.shape[-1])), dim=-2)


def _weights_no_scale(q: Tensor, k: Tensor) -> Tensor:
    return torch.softmax(_scores(q, k, 1.0), dim=-1)


def _weights_divided_by_dk(q: Tensor, k: Tensor) -> Tensor:
    return torch.softmax(_scores(q, k, q.shape[-1]), dim=-1)


def _weights_scaled_by_num_keys(q: Tensor, k: Tensor) -> Tensor:
    return torch.softmax(_scores(q, k, math.sqrt(k.shape[-2])), dim=-1)


def _weights_scaled_by_num_queries(q: Tensor, k: Tensor) -> Tensor:
    return torch.softmax(_scores(q, k, math.sqrt(q.shape[-2])), dim=-1)  # the tokens, not d_k


def _weights_half_power(q: Tensor, k: Tensor) -> Tensor:
    d_k = q.shape[-1]
    return torch.softmax(q @ k.transpose(-2, -1) / d_k ** 1/2, dim=-1)  # the slip: / d_k, then / 2


def _weights_half_power_bracketed(q: Tensor, k: Tensor) -> Tensor:
    d_k = q.shape[-1]
    return torch.softmax(q @ k.transpose(-2, -1) / (d_k ** 1/2), dim=-1)  # the slip: / (d_k / 2)


def _weights_scaled_after_softmax(q: Tensor, k: Tensor) -> Tensor:
    return torch.softmax(_scores(q, k, 1.0), dim=-1) / math.sqrt(q.shape[-1])  # rows sum to 1/sqrt(d_k)


def _weights_as_numpy(q: Tensor, k: Tensor) -> np.ndarray:
    return _attention_weights(q, k).numpy()  # the right numbers, but an array


def _weights_dim0(q: Tensor, k: Tensor) -> Tensor:
    return torch.softmax(_scores(q, k, math.sqrt(q.shape[-1])), dim=0)


def _weights_dim1(q: Tensor, k: Tensor) -> Tensor:
    return torch.softmax(_scores(q, k, math.sqrt(q.shape[-1])), dim=1)


def _weights_no_softmax(q: Tensor, k: Tensor) -> Tensor:
    return _scores(q, k, math.sqrt(q.shape[-1]))


def _weights_d_k_from_dim_1(q: Tensor, k: Tensor) -> Tensor:
    return torch.softmax(_scores(q, k, math.sqrt(q.shape[1])), dim=-1)  # the tokens, on a batch


def _weights_keys_times_queries(q: Tensor, k: Tensor) -> Tensor:
    return torch.softmax(k @ q.transpose(-2, -1) / math.sqrt(q.shape[-1]), dim=-1)  # (..., Tk, Tq)


def _weights_k_dot_t(q: Tensor, k: Tensor) -> Tensor:
    with warnings.catch_warnings():  # torch warns that k.T on a batch is deprecated: the very slip
        warnings.simplefilter("ignore", UserWarning)  # this model imitates, so no need to print it
        return torch.softmax(q @ k.T / math.sqrt(q.shape[-1]), dim=-1)  # k.T reverses every dim


def _lower_triangle(T: int) -> Tensor:
    return torch.ones(T, T, dtype=torch.bool).tril()  # True = may attend (key j <= query i)


def _causal_weights(q: Tensor, k: Tensor) -> Tensor:
    scores = _scores(q, k, math.sqrt(q.shape[-1]))
    scores = scores.masked_fill(~_lower_triangle(q.shape[-2]), float("-inf"))
    return torch.softmax(scores, dim=-1)


def _causal_mask_after_softmax(q: Tensor, k: Tensor) -> Tensor:
    weights = _attention_weights(q, k)
    return weights.masked_fill(~_lower_triangle(q.shape[-2]), 0.0)


def _causal_future_visible(q: Tensor, k: Tensor) -> Tensor:
    scores = _scores(q, k, math.sqrt(q.shape[-1]))
    upper = torch.ones(q.shape[-2], q.shape[-2], dtype=torch.bool).triu()
    return torch.softmax(scores.masked_fill(~upper, float("-inf")), dim=-1)


def _causal_masked_with_zero(q: Tensor, k: Tensor) -> Tensor:
    scores = _scores(q, k, math.sqrt(q.shape[-1]))
    return torch.softmax(scores.masked_fill(~_lower_triangle(q.shape[-2]), 0.0), dim=-1)


def _causal_inverted_mask(q: Tensor, k: Tensor) -> Tensor:
    scores = _scores(q, k, math.sqrt(q.shape[-1]))
    allowed = _lower_triangle(q.shape[-2])
    return torch.softmax(scores.masked_fill(allowed, float("-inf")), dim=-1)  # blocks what is allowed


def _causal_no_scale(q: Tensor, k: Tensor) -> Tensor:
    scores = _scores(q, k, 1.0)
    return torch.softmax(scores.masked_fill(~_lower_triangle(q.shape[-2]), float("-inf")), dim=-1)


def _causal_diagonal_blocked(q: Tensor, k: Tensor) -> Tensor:
    scores = _scores(q, k, math.sqrt(q.shape[-1]))
    strict = torch.ones(q.shape[-2], q.shape[-2], dtype=torch.bool).tril(-1)
    return torch.softmax(scores.masked_fill(~strict, float("-inf")), dim=-1)


def _causal_diagonal_blocked_nan_zeroed(q: Tensor, k: Tensor) -> Tensor:
    scores = _scores(q, k, math.sqrt(q.shape[-1]))
    blocked = torch.ones(q.shape[-2], q.shape[-2], dtype=torch.bool).triu(0)  # the diagonal blocked too
    return torch.nan_to_num(torch.softmax(scores.masked_fill(blocked, float("-inf")), dim=-1))  # row 0: 0


def _causal_diagonal_hidden_first_row_kept(q: Tensor, k: Tensor) -> Tensor:
    scores = _scores(q, k, math.sqrt(q.shape[-1]))
    T = q.shape[-2]
    strict = torch.ones(T, T, dtype=torch.bool).tril(-1)
    strict[0] = True  # the NaN row patched (token 0 sees every key); no other token sees itself
    return torch.softmax(scores.masked_fill(~strict, float("-inf")), dim=-1)


def _causal_diagonal_hidden_first_key_kept(q: Tensor, k: Tensor) -> Tensor:
    scores = _scores(q, k, math.sqrt(q.shape[-1]))
    T = q.shape[-2]
    strict = torch.ones(T, T, dtype=torch.bool).tril(-1)
    strict[0, 0] = True  # the NaN row patched (token 0 sees itself); no other token sees itself
    return torch.softmax(scores.masked_fill(~strict, float("-inf")), dim=-1)


def _causal_sees_next_key(q: Tensor, k: Tensor) -> Tensor:
    scores = _scores(q, k, math.sqrt(q.shape[-1]))
    one_ahead = torch.ones(q.shape[-2], q.shape[-2], dtype=torch.bool).tril(diagonal=1)  # off by one
    return torch.softmax(scores.masked_fill(~one_ahead, float("-inf")), dim=-1)


def _causal_as_numpy(q: Tensor, k: Tensor) -> np.ndarray:
    return _causal_weights(q, k).numpy()  # the right numbers, but an array


def _causal_batch_dim_as_T(q: Tensor, k: Tensor) -> Tensor:
    T = q.shape[0]  # the batch size on batched input, not the sequence length
    scores = _scores(q, k, math.sqrt(q.shape[-1]))
    allowed = torch.ones(T, T, dtype=torch.bool).tril()
    return torch.softmax(scores.masked_fill(~allowed, float("-inf")), dim=-1)


def _causal_mask_not_applied(q: Tensor, k: Tensor) -> Tensor:
    scores = _scores(q, k, math.sqrt(q.shape[-1]))
    scores.masked_fill(~_lower_triangle(q.shape[-2]), float("-inf"))  # result thrown away
    return torch.softmax(scores, dim=-1)


def _causal_softmax_over_queries(q: Tensor, k: Tensor) -> Tensor:
    scores = _scores(q, k, math.sqrt(q.shape[-1]))
    return torch.softmax(scores.masked_fill(~_lower_triangle(q.shape[-2]), float("-inf")), dim=-2)


def _causal_keys_times_queries(q: Tensor, k: Tensor) -> Tensor:
    scores = k @ q.transpose(-2, -1) / math.sqrt(q.shape[-1])
    return torch.softmax(scores.masked_fill(~_lower_triangle(q.shape[-2]), float("-inf")), dim=-1)


def _causal_k_dot_t(q: Tensor, k: Tensor) -> Tensor:
    scores = q @ k.T / math.sqrt(q.shape[-1])
    allowed = torch.ones(q.shape[-2], q.shape[-2], dtype=torch.bool).tril()
    return torch.softmax(scores.masked_fill(~allowed, float("-inf")), dim=-1)


def _causal_inf_after_softmax(q: Tensor, k: Tensor) -> Tensor:
    return _attention_weights(q, k).masked_fill(~_lower_triangle(q.shape[-2]), float("-inf"))


def _causal_additive_mask_wrong_sign(q: Tensor, k: Tensor) -> Tensor:
    scores = _scores(q, k, math.sqrt(q.shape[-1]))
    T = q.shape[-2]
    future = torch.full((T, T), 1e9, dtype=scores.dtype).triu(1)  # + instead of -: the future wins
    return torch.softmax(scores + future, dim=-1)


def _causal_implicit_softmax_dim(q: Tensor, k: Tensor) -> Tensor:
    scores = _scores(q, k, math.sqrt(q.shape[-1]))
    scores = scores.masked_fill(~_lower_triangle(q.shape[-2]), float("-inf"))
    with warnings.catch_warnings():  # the very warning the learner saw
        warnings.simplefilter("ignore", UserWarning)
        return F.softmax(scores)  # no dim: PyTorch picks dim=1 for 2-D input, dim=0 for 3-D


def _project(x: Tensor, w_q: Tensor, w_k: Tensor, w_v: Tensor) -> tuple[Tensor, Tensor, Tensor]:
    return x @ w_q, x @ w_k, x @ w_v  # (..., T, d_k), (..., T, d_k), (..., T, d_v)


def _single_head(x: Tensor, w_q: Tensor, w_k: Tensor, w_v: Tensor) -> Tensor:
    q, k, v = _project(x, w_q, w_k, w_v)
    return _attention_weights(q, k) @ v  # (..., T, d_v)


def _single_head_keys_as_values(x: Tensor, w_q: Tensor, w_k: Tensor, w_v: Tensor) -> Tensor:
    q, k, _ = _project(x, w_q, w_k, w_v)
    return _attention_weights(q, k) @ k


def _single_head_unprojected(x: Tensor, w_q: Tensor, w_k: Tensor, w_v: Tensor) -> Tensor:
    q, k, _ = _project(x, w_q, w_k, w_v)
    return _attention_weights(q, k) @ x


def _single_head_transposed_weights(x: Tensor, w_q: Tensor, w_k: Tensor, w_v: Tensor) -> Tensor:
    q, k, v = _project(x, w_q, w_k, w_v)
    return _attention_weights(q, k).transpose(-2, -1) @ v


def _single_head_values_first(x: Tensor, w_q: Tensor, w_k: Tensor, w_v: Tensor) -> Tensor:
    q, k, v = _project(x, w_q, w_k, w_v)
    return v @ _attention_weights(q, k)


def _single_head_no_scale(x: Tensor, w_q: Tensor, w_k: Tensor, w_v: Tensor) -> Tensor:
    q, k, v = _project(x, w_q, w_k, w_v)
    return _weights_no_scale(q, k) @ v


def _single_head_softmax_dim0(x: Tensor, w_q: Tensor, w_k: Tensor, w_v: Tensor) -> Tensor:
    q, k, v = _project(x, w_q, w_k, w_v)
    return torch.softmax(_scores(q, k, math.sqrt(q.shape[-1])), dim=0) @ v


def _single_head_scaled_by_d_model(x: Tensor, w_q: Tensor, w_k: Tensor, w_v: Tensor) -> Tensor:
    q, k, v = _project(x, w_q, w_k, w_v)
    return torch.softmax(_scores(q, k, math.sqrt(x.shape[-1])), dim=-1) @ v


def _single_head_causal(x: Tensor, w_q: Tensor, w_k: Tensor, w_v: Tensor) -> Tensor:
    q, k, v = _project(x, w_q, w_k, w_v)
    return _causal_weights(q, k) @ v


def _single_head_softmax_dim1(x: Tensor, w_q: Tensor, w_k: Tensor, w_v: Tensor) -> Tensor:
    q, k, v = _project(x, w_q, w_k, w_v)
    return torch.softmax(_scores(q, k, math.sqrt(q.shape[-1])), dim=1) @ v


def _single_head_scaled_by_d_v(x: Tensor, w_q: Tensor, w_k: Tensor, w_v: Tensor) -> Tensor:
    q, k, v = _project(x, w_q, w_k, w_v)
    return torch.softmax(_scores(q, k, math.sqrt(v.shape[-1])), dim=-1) @ v


def _single_head_linear_layout(x: Tensor, w_q: Tensor, w_k: Tensor, w_v: Tensor) -> Tensor:
    q, k, v = x @ w_q.T, x @ w_k.T, x @ w_v.T  # lesson 01's nn.Linear habit: (out, in) weights
    return _attention_weights(q, k) @ v


def _single_head_weights_only(x: Tensor, w_q: Tensor, w_k: Tensor, w_v: Tensor) -> Tensor:
    q, k, _ = _project(x, w_q, w_k, w_v)
    return _attention_weights(q, k)  # (..., T, T): the weights, not the output


def _single_head_no_softmax(x: Tensor, w_q: Tensor, w_k: Tensor, w_v: Tensor) -> Tensor:
    q, k, v = _project(x, w_q, w_k, w_v)
    return _scores(q, k, math.sqrt(q.shape[-1])) @ v


def _single_head_keys_from_w_q(x: Tensor, w_q: Tensor, w_k: Tensor, w_v: Tensor) -> Tensor:
    return _single_head(x, w_q, w_q, w_v)  # w_q where w_k belongs


def _single_head_scale_of_2(x: Tensor, w_q: Tensor, w_k: Tensor, w_v: Tensor) -> Tensor:
    q, k, v = _project(x, w_q, w_k, w_v)
    return torch.softmax(_scores(q, k, math.sqrt(2)), dim=-1) @ v  # the worked example's d_k, typed in


def _single_head_divided_by_dk(x: Tensor, w_q: Tensor, w_k: Tensor, w_v: Tensor) -> Tensor:
    q, k, v = _project(x, w_q, w_k, w_v)
    return _weights_divided_by_dk(q, k) @ v


def _single_head_as_numpy(x: Tensor, w_q: Tensor, w_k: Tensor, w_v: Tensor) -> np.ndarray:
    return _single_head(x, w_q, w_k, w_v).numpy()  # the right numbers, but an array


def _single_head_k_dot_t(x: Tensor, w_q: Tensor, w_k: Tensor, w_v: Tensor) -> Tensor:
    q, k, v = _project(x, w_q, w_k, w_v)
    return _weights_k_dot_t(q, k) @ v


REFERENCES = {
    'SOFTMAX_ROWS': _softmax_rows,
    'ATTENTION_WEIGHTS': _attention_weights,
    'CAUSAL_ATTENTION_WEIGHTS': _causal_weights,
    'SINGLE_HEAD_ATTENTION': _single_head,
}

MISTAKES = {
    'SOFTMAX_ROWS': {
        'wrong_axis': _softmax_columns,
        'no_max_shift': _softmax_unshifted,
        'axis_1': _softmax_axis_1,
        'sum_axis_1': _softmax_sum_axis_1,
        'min_shift': _softmax_min_shift,
        'mean_shift': _softmax_mean_shift,
        'global_max_shift': _softmax_global_max_shift,
        'whole_matrix': _softmax_whole_matrix,
        'no_exp': _softmax_without_exp,
        'no_keepdims': _softmax_no_keepdims,
        'returned_tensor': _softmax_in_torch,
        'returned_list': _softmax_as_list,
    },
    'ATTENTION_WEIGHTS': {
        'wrong_axis': _weights_wrong_axis,
        'missing_scale': _weights_no_scale,
        'divided_by_dk': _weights_divided_by_dk,
        'scaled_by_num_keys': _weights_scaled_by_num_keys,
        'scaled_by_num_queries': _weights_scaled_by_num_queries,
        'half_power_precedence': _weights_half_power,
        'half_power_precedence_bracketed': _weights_half_power_bracketed,
        'scaled_after_softmax': _weights_scaled_after_softmax,
        'returned_numpy': _weights_as_numpy,
        'softmax_dim0': _weights_dim0,
        'softmax_dim1': _weights_dim1,
        'no_softmax': _weights_no_softmax,
        'd_k_from_dim_1': _weights_d_k_from_dim_1,
        'keys_times_queries': _weights_keys_times_queries,
        'k_dot_T': _weights_k_dot_t,
    },
    'CAUSAL_ATTENTION_WEIGHTS': {
        'mask_after_softmax': _causal_mask_after_softmax,
        'future_visible': _causal_future_visible,
        'masked_with_zero': _causal_masked_with_zero,
        'diagonal_blocked': _causal_diagonal_blocked,
        'diagonal_blocked_nan_zeroed': _causal_diagonal_blocked_nan_zeroed,
        'diagonal_hidden': _causal_diagonal_hidden_first_row_kept,
        'diagonal_hidden_first_key_kept': _causal_diagonal_hidden_first_key_kept,
        'sees_next_key': _causal_sees_next_key,
        'inverted_mask': _causal_inverted_mask,
        'missing_scale': _causal_no_scale,
        'mask_not_applied': _causal_mask_not_applied,
        'softmax_over_queries': _causal_softmax_over_queries,
        'keys_times_queries': _causal_keys_times_queries,
        'inf_after_softmax': _causal_inf_after_softmax,
        'implicit_softmax_dim': _causal_implicit_softmax_dim,
        'additive_mask_wrong_sign': _causal_additive_mask_wrong_sign,
        'k_dot_T': _causal_k_dot_t,
        'batch_dim_as_T': _causal_batch_dim_as_T,
        'returned_numpy': _causal_as_numpy,
    },
    'SINGLE_HEAD_ATTENTION': {
        'keys_as_values': _single_head_keys_as_values,
        'returned_weights': _single_head_weights_only,
        'no_softmax': _single_head_no_softmax,
        'keys_from_w_q': _single_head_keys_from_w_q,
        'unprojected_values': _single_head_unprojected,
        'transposed_weights': _single_head_transposed_weights,
        'values_first': _single_head_values_first,
        'missing_scale': _single_head_no_scale,
        'scaled_by_d_model': _single_head_scaled_by_d_model,
        'softmax_dim0': _single_head_softmax_dim0,
        'causal_mask_applied': _single_head_causal,
        'softmax_dim1': _single_head_softmax_dim1,
        'scaled_by_d_v': _single_head_scaled_by_d_v,
        'typed_in_scale': _single_head_scale_of_2,
        'divided_by_dk': _single_head_divided_by_dk,
        'k_dot_T': _single_head_k_dot_t,
        'linear_layout': _single_head_linear_layout,
        'returned_numpy': _single_head_as_numpy,
    },
}
