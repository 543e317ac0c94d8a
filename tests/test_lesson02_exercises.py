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
