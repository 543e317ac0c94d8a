"""Reference solutions and known mistakes of lesson01's exercises (not shipped with the package).

``scripts/exercise_answers.py build`` runs them on each check's test cases and stores the outputs in
``course_utils/exercises/answers/lesson01.pt``; the course's tests attach them to the checks.
"""

# ruff: noqa: F401, F403, F405, E501
from __future__ import annotations

import math

import torch
from torch import Tensor

from course_utils.exercises.core import Case, Exercise, Mistake
from course_utils.exercises.lesson01 import *
from course_utils.exercises.raising import DiagnosingExercise, RaisingMistake


def _attend(scores: Tensor, values: Tensor) -> Tensor:
    return torch.softmax(scores, dim=-1) @ values  # (Tq, dv)


def _attend_wrong_axis(scores: Tensor, values: Tensor) -> Tensor:
    return torch.softmax(scores, dim=0) @ values


def _attend_no_softmax(scores: Tensor, values: Tensor) -> Tensor:
    return scores @ values


def _attend_no_exp(scores: Tensor, values: Tensor) -> Tensor:
    return (scores / scores.sum(dim=-1, keepdim=True)) @ values


def _attend_exp_not_normalised(scores: Tensor, values: Tensor) -> Tensor:
    return scores.exp() @ values


def _attend_sigmoid(scores: Tensor, values: Tensor) -> Tensor:
    return torch.sigmoid(scores) @ values  # each weight squashed on its own: rows do not sum to 1


def _attend_scaled_by_num_keys(scores: Tensor, values: Tensor) -> Tensor:
    return torch.softmax(scores / math.sqrt(scores.shape[-1]), dim=-1) @ values  # 1/sqrt(Tk)


def _attend_whole_matrix(scores: Tensor, values: Tensor) -> Tensor:
    weights = torch.softmax(scores.flatten(), dim=0).view_as(scores)  # the whole matrix sums to 1
    return weights @ values


def _attend_ignores_scores(scores: Tensor, values: Tensor) -> Tensor:
    return values.mean(dim=0, keepdim=True).expand(scores.shape[0], -1)


def _attend_returned_weights(scores: Tensor, values: Tensor) -> Tensor:
    return torch.softmax(scores, dim=-1)  # (Tq, Tk): the weights, not the blend


def _attend_scaled_by_value_width(scores: Tensor, values: Tensor) -> Tensor:
    return torch.softmax(scores / math.sqrt(values.shape[-1]), dim=-1) @ values  # 1/sqrt(dv)


def _head_scores(x: Tensor, w_q: Tensor, w_k: Tensor, num_heads: int) -> Tensor:
    T, d = x.shape
    dk = d // num_heads
    q = (x @ w_q.T).view(T, num_heads, dk).transpose(0, 1)  # (h, T, dk)
    k = (x @ w_k.T).view(T, num_heads, dk).transpose(0, 1)  # (h, T, dk)
    return q @ k.transpose(-2, -1) / math.sqrt(dk)  # (h, T, T)


def _head_scores_in_out_layout(x: Tensor, w_q: Tensor, w_k: Tensor, num_heads: int) -> Tensor:
    T, d = x.shape
    dk = d // num_heads
    q = (x @ w_q).view(T, num_heads, dk).transpose(0, 1)  # lesson 02's x @ W: reads w_q as (in, out)
    k = (x @ w_k).view(T, num_heads, dk).transpose(0, 1)
    return q @ k.transpose(-2, -1) / math.sqrt(dk)


def _head_scores_interleaved(x: Tensor, w_q: Tensor, w_k: Tensor, num_heads: int) -> Tensor:
    T, d = x.shape
    dk = d // num_heads
    q = (x @ w_q.T).view(T, dk, num_heads).permute(2, 0, 1)  # head i gets features i, i+h, ...
    k = (x @ w_k.T).view(T, dk, num_heads).permute(2, 0, 1)
    return q @ k.transpose(-2, -1) / math.sqrt(dk)


def _head_scores_divided_by_dk(x: Tensor, w_q: Tensor, w_k: Tensor, num_heads: int) -> Tensor:
    dk = x.shape[1] // num_heads
    return _head_scores(x, w_q, w_k, num_heads) / math.sqrt(dk)  # / dk in all


def _head_scores_one_big_head(x: Tensor, w_q: Tensor, w_k: Tensor, num_heads: int) -> Tensor:
    d = x.shape[1]
    full = (x @ w_q.T) @ (x @ w_k.T).T / math.sqrt(d)  # (T, T): one score matrix
    return full.expand(num_heads, -1, -1)


def _head_scores_sqrt_d_model(x: Tensor, w_q: Tensor, w_k: Tensor, num_heads: int) -> Tensor:
    dk = x.shape[1] // num_heads
    return _head_scores(x, w_q, w_k, num_heads) * math.sqrt(dk) / math.sqrt(x.shape[1])


def _head_scores_no_scale(x: Tensor, w_q: Tensor, w_k: Tensor, num_heads: int) -> Tensor:
    return _head_scores(x, w_q, w_k, num_heads) * math.sqrt(x.shape[1] // num_heads)


def _head_scores_reshape_no_transpose(x: Tensor, w_q: Tensor, w_k: Tensor, num_heads: int) -> Tensor:
    T, d = x.shape
    dk = d // num_heads
    q = (x @ w_q.T).reshape(num_heads, T, dk)  # the same numbers, cut in the wrong places
    k = (x @ w_k.T).reshape(num_heads, T, dk)
    return q @ k.transpose(-2, -1) / math.sqrt(dk)


def _head_scores_softmax(x: Tensor, w_q: Tensor, w_k: Tensor, num_heads: int) -> Tensor:
    return torch.softmax(_head_scores(x, w_q, w_k, num_heads), dim=-1)


def _head_scores_keys_first(x: Tensor, w_q: Tensor, w_k: Tensor, num_heads: int) -> Tensor:
    return _head_scores(x, w_q, w_k, num_heads).transpose(-2, -1)  # k @ q^T


def _head_scores_float_dk(x: Tensor, w_q: Tensor, w_k: Tensor, num_heads: int) -> Tensor:
    T, d = x.shape
    dk = d / num_heads  # a float: view() refuses it
    q = (x @ w_q.T).view(T, num_heads, dk).transpose(0, 1)
    k = (x @ w_k.T).view(T, num_heads, dk).transpose(0, 1)
    return q @ k.transpose(-2, -1) / math.sqrt(dk)


def _head_scores_keys_from_w_q(x: Tensor, w_q: Tensor, w_k: Tensor, num_heads: int) -> Tensor:
    return _head_scores(x, w_q, w_q, num_heads)  # w_q where w_k belongs


def _relation_accuracy(logits: Tensor, target: Tensor, num_symbols: int) -> Tensor:
    predicted = logits.argmax(dim=-1)  # (n,)
    right_a = predicted // num_symbols == target // num_symbols
    right_b = predicted % num_symbols == target % num_symbols
    return torch.stack([right_a.double().mean(), right_b.double().mean()])  # (2,)


def _relation_accuracy_swapped(logits: Tensor, target: Tensor, num_symbols: int) -> Tensor:
    return _relation_accuracy(logits, target, num_symbols).flip(0)


def _relation_accuracy_whole_answer(logits: Tensor, target: Tensor, num_symbols: int) -> Tensor:
    whole = (logits.argmax(dim=-1) == target).double().mean()
    return torch.stack([whole, whole])


def _relation_accuracy_both_with_mod(logits: Tensor, target: Tensor, num_symbols: int) -> Tensor:
    predicted = logits.argmax(dim=-1)
    right_a = predicted % num_symbols == target % num_symbols  # a decoded with % too
    right_b = predicted % num_symbols == target % num_symbols
    return torch.stack([right_a.double().mean(), right_b.double().mean()])


def _relation_accuracy_mixed_decoding(logits: Tensor, target: Tensor, num_symbols: int) -> Tensor:
    predicted = logits.argmax(dim=-1)
    right_a = predicted % num_symbols == target // num_symbols
    right_b = predicted // num_symbols == target % num_symbols
    return torch.stack([right_a.double().mean(), right_b.double().mean()])


def _relation_accuracy_probabilities(logits: Tensor, target: Tensor, num_symbols: int) -> Tensor:
    n, V = logits.shape[0], num_symbols
    probs = torch.softmax(logits, dim=-1).view(n, V, V)  # (n, symbol a, symbol b)
    prob_a = probs.sum(dim=2).gather(1, (target // V)[:, None])  # (n, 1)
    prob_b = probs.sum(dim=1).gather(1, (target % V)[:, None])  # (n, 1)
    return torch.stack([prob_a.double().mean(), prob_b.double().mean()])


def _relation_accuracy_per_symbol(logits: Tensor, target: Tensor, num_symbols: int) -> Tensor:
    n, V = logits.shape[0], num_symbols
    probs = torch.softmax(logits, dim=-1).view(n, V, V)  # (n, symbol a, symbol b)
    pred_a, pred_b = probs.sum(dim=2).argmax(dim=1), probs.sum(dim=1).argmax(dim=1)  # each symbol alone
    right_a, right_b = pred_a == target // V, pred_b == target % V
    return torch.stack([right_a.double().mean(), right_b.double().mean()])


def _relation_accuracy_counts(logits: Tensor, target: Tensor, num_symbols: int) -> Tensor:
    predicted, V = logits.argmax(dim=-1), num_symbols
    return torch.stack([(predicted // V == target // V).sum(), (predicted % V == target % V).sum()]).double()


def _relation_accuracy_bool_mean(logits: Tensor, target: Tensor, num_symbols: int) -> Tensor:
    predicted, V = logits.argmax(dim=-1), num_symbols
    return torch.stack([(predicted // V == target // V).mean(), (predicted % V == target % V).mean()])


def _relation_accuracy_true_division(logits: Tensor, target: Tensor, num_symbols: int) -> Tensor:
    predicted = logits.argmax(dim=-1)
    right_a = predicted / num_symbols == target / num_symbols  # fractions: the whole class, not a's part
    right_b = predicted % num_symbols == target % num_symbols
    return torch.stack([right_a.double().mean(), right_b.double().mean()])


def _relation_error_rate(logits: Tensor, target: Tensor, num_symbols: int) -> Tensor:
    return 1 - _relation_accuracy(logits, target, num_symbols)


REFERENCES = {
    'ATTEND': _attend,
    'HEAD_SCORES': _head_scores,
    'RELATION_ACCURACY': _relation_accuracy,
}

MISTAKES = {
    'ATTEND': {
        'wrong_axis': _attend_wrong_axis,
        'no_softmax': _attend_no_softmax,
        'no_exp': _attend_no_exp,
        'exp_not_normalised': _attend_exp_not_normalised,
        'sigmoid_weights': _attend_sigmoid,
        'ignores_scores': _attend_ignores_scores,
        'scaled_by_num_keys': _attend_scaled_by_num_keys,
        'scaled_by_value_width': _attend_scaled_by_value_width,
        'whole_matrix': _attend_whole_matrix,
        'returned_weights': _attend_returned_weights,
    },
    'HEAD_SCORES': {
        'in_out_layout': _head_scores_in_out_layout,
        'interleaved_heads': _head_scores_interleaved,
        'divided_by_dk': _head_scores_divided_by_dk,
        'one_big_head': _head_scores_one_big_head,
        'sqrt_d_model': _head_scores_sqrt_d_model,
        'no_scale': _head_scores_no_scale,
        'reshape_no_transpose': _head_scores_reshape_no_transpose,
        'softmax': _head_scores_softmax,
        'keys_first': _head_scores_keys_first,
        'keys_from_w_q': _head_scores_keys_from_w_q,
        'float_dk': _head_scores_float_dk,
    },
    'RELATION_ACCURACY': {
        'swapped': _relation_accuracy_swapped,
        'whole_answer': _relation_accuracy_whole_answer,
        'mixed_decoding': _relation_accuracy_mixed_decoding,
        'both_with_mod': _relation_accuracy_both_with_mod,
        'probabilities': _relation_accuracy_probabilities,
        'per_symbol_argmax': _relation_accuracy_per_symbol,
        'counts': _relation_accuracy_counts,
        'true_division': _relation_accuracy_true_division,
        'error_rate': _relation_error_rate,
        'bool_mean': _relation_accuracy_bool_mean,
    },
}
