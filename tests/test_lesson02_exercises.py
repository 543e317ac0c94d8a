"""Lesson 02 checks against slips written the way a learner would write them (tests/test_exercises.py
feeds every Mistake implementation itself)."""

import math
import warnings

import numpy as np
import torch
import torch.nn.functional as F

from course_utils.exercises import lesson02


def test_softmax_named_by_what_it_sums_to_however_it_was_shifted():
    def columns(scores):  # shifted by the row max, as the lesson teaches, then summed down the columns
        e = np.exp(scores - scores.max(axis=-1, keepdims=True))
        return e / e.sum(axis=0, keepdims=True)
    assert lesson02.check_softmax_rows(columns).mistake == "wrong_axis"

    def whole(scores):
        e = np.exp(scores - scores.max(axis=-1, keepdims=True))
        return e / e.sum()
    assert lesson02.check_softmax_rows(whole).mistake == "whole_matrix"

    def first_element_shift(scores):  # not the minimum: no longer misnamed as a min shift
        with np.errstate(over="ignore", invalid="ignore"):
            e = np.exp(scores - scores[..., :1])
            return e / e.sum(axis=-1, keepdims=True)
    feedback = lesson02.check_softmax_rows(first_element_shift)
    assert feedback.mistake != "min_shift" and "NaN" in feedback.message


def test_attention_weights_dim0_message_names_queries_and_batch():
    def dim0(q, k):
        return torch.softmax(q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1]), dim=0)
    feedback = lesson02.check_attention_weights(dim0)
    assert "queries" in feedback.message and "right where" not in feedback.message


def test_causal_names_inf_after_softmax_and_a_softmax_without_dim():
    def late_inf(q, k):
        w = torch.softmax(q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1]), dim=-1)
        T = q.shape[-2]
        return w.masked_fill(torch.triu(torch.ones(T, T, dtype=torch.bool), 1), -math.inf)
    assert lesson02.check_causal_attention_weights(late_inf).mistake == "inf_after_softmax"

    def no_dim(q, k):
        T = q.shape[-2]
        s = (q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])).masked_fill(
            torch.ones(T, T).triu(1).bool(), float("-inf"))
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            return F.softmax(s)
    assert lesson02.check_causal_attention_weights(no_dim).mistake == "implicit_softmax_dim"


def test_single_head_names_a_typed_in_scale_k_dot_t_and_dk():
    def typed_in(x, w_q, w_k, w_v):
        q, k, v = x @ w_q, x @ w_k, x @ w_v
        return torch.softmax(q @ k.transpose(-2, -1) / math.sqrt(2), dim=-1) @ v
    assert lesson02.check_single_head_attention(typed_in).mistake == "typed_in_scale"

    def k_dot_t(x, w_q, w_k, w_v):
        q, k, v = x @ w_q, x @ w_k, x @ w_v
        return torch.softmax(q @ k.T / math.sqrt(q.shape[-1]), dim=-1) @ v
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        assert lesson02.check_single_head_attention(k_dot_t).mistake == "k_dot_T"

    def by_dk(x, w_q, w_k, w_v):
        q, k, v = x @ w_q, x @ w_k, x @ w_v
        return torch.softmax(q @ k.transpose(-2, -1) / q.shape[-1], dim=-1) @ v
    assert lesson02.check_single_head_attention(by_dk).mistake == "divided_by_dk"


def test_causal_names_an_additive_mask_with_the_wrong_sign():
    """Learner trial l3: a mask added to the scores, +large on the future instead of -large,
    used to get only 'wrong values'. Named whatever the constant (1e9 rounds the scores away in
    float32, 1e4 does not) and however the mask was built."""
    def plus_1e9(q, k):
        T = q.shape[-2]
        scores = q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])
        return torch.softmax(scores + torch.triu(torch.full((T, T), 1e9), 1), dim=-1)

    def plus_1e4_where(q, k):
        T = q.shape[-2]
        scores = q @ k.mT / q.shape[-1] ** 0.5
        i = torch.arange(T)
        bonus = torch.where(i[None, :] > i[:, None], 1e4, 0.0)
        return (scores + bonus).softmax(dim=-1)

    for answer in (plus_1e9, plus_1e4_where):
        feedback = lesson02.check_causal_attention_weights(answer)
        assert feedback.mistake == "additive_mask_wrong_sign", feedback
        assert "wrong sign" in feedback.message and "-inf" in feedback.hint

    def minus_1e9(q, k):  # the same mask with the right sign passes
        T = q.shape[-2]
        scores = q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])
        return torch.softmax(scores - torch.triu(torch.full((T, T), 1e9), 1), dim=-1)
    assert lesson02.check_causal_attention_weights(minus_1e9).passed


def test_softmax_rows_names_a_sum_over_axis_1_after_a_right_shift():
    """A reading trial's slip: each row's maximum taken along the last axis, the sum along
    axis 1: right on 2-D input, wrong on the 3-D case."""
    def sum_axis_1(scores):
        e = np.exp(scores - scores.max(axis=-1, keepdims=True))
        return e / e.sum(axis=1, keepdims=True)
    feedback = lesson02.check_softmax_rows(sum_axis_1)
    assert feedback.mistake == "sum_axis_1" and "axis=-1" in feedback.hint, feedback
