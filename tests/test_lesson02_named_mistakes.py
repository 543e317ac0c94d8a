"""Lesson 02: the slips learner trial l5 got only "wrong values" (or a pass) for, written the way
the learner wrote them, now each get a message that names them; the right answers and right
variants still pass. Also the one result-type and precision rule of checks 2.1-2.4."""

import math
import sys

import numpy as np
import pytest
import torch

from course_utils.exercises import lesson02


# -- right answers: written two ways each, they pass -------------------------------------------
def _weights(q, k):
    return torch.softmax(q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1]), dim=-1)


def _weights_einsum(q, k):
    return (torch.einsum("...id,...jd->...ij", q, k) * q.shape[-1] ** -0.5).softmax(-1)


def _causal_tutorial(q, k):
    T = q.shape[-2]
    scores = q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])
    mask = torch.tril(torch.ones(T, T))
    return torch.softmax(scores.masked_fill(mask == 0, -1e9), dim=-1)


def _causal_additive(q, k):
    T = q.shape[-2]
    scores = q @ k.mT / math.sqrt(q.shape[-1])
    return torch.softmax(scores + torch.full((T, T), float("-inf")).triu(1), dim=-1)


def _single_head(x, w_q, w_k, w_v):
    q, k, v = x @ w_q, x @ w_k, x @ w_v
    return torch.softmax(q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1]), dim=-1) @ v


def _single_head_matmul(x, w_q, w_k, w_v):
    return torch.matmul(_weights(x @ w_q, x @ w_k), torch.matmul(x, w_v))


def _softmax(scores):
    e = np.exp(scores - scores.max(axis=-1, keepdims=True))
    return e / e.sum(axis=-1, keepdims=True)


def _softmax_logsumexp(scores):
    m = scores.max(axis=-1)
    return np.exp(scores - (m + np.log(np.exp(scores - m[..., None]).sum(axis=-1)))[..., None])


@pytest.mark.parametrize("check,answer", [
    (lesson02.check_softmax_rows, _softmax), (lesson02.check_softmax_rows, _softmax_logsumexp),
    (lesson02.check_attention_weights, _weights), (lesson02.check_attention_weights, _weights_einsum),
    (lesson02.check_causal_attention_weights, _causal_tutorial),
    (lesson02.check_causal_attention_weights, _causal_additive),
    (lesson02.check_single_head_attention, _single_head),
    (lesson02.check_single_head_attention, _single_head_matmul),
], ids=["2.1", "2.1-lse", "2.2", "2.2-einsum", "2.3-tutorial", "2.3-additive", "2.4", "2.4-matmul"])
def test_right_answers_pass(check, answer):
    feedback = check(answer)
    assert feedback.passed, feedback


# -- 2.2 ---------------------------------------------------------------------------------------
def test_attention_weights_names_the_half_power_precedence_slip():
    def unbracketed(q, k):
        d_k = q.shape[-1]
        return torch.softmax(q @ k.transpose(-2, -1) / d_k ** 1/2, dim=-1)

    def negative_power(q, k):
        d_k = q.shape[-1]
        return torch.softmax(q @ k.transpose(-2, -1) * d_k ** -1/2, dim=-1)

    for answer in (unbracketed, negative_power):
        feedback = lesson02.check_attention_weights(answer)
        assert feedback.mistake == "half_power_precedence", feedback
        assert "2 * d_k" in feedback.message and "** binds tighter than /" in feedback.message

    def bracketed(q, k):
        d_k = q.shape[-1]
        return torch.softmax(q @ k.transpose(-2, -1) / (d_k ** 1/2), dim=-1)
    feedback = lesson02.check_attention_weights(bracketed)
    assert feedback.mistake == "half_power_precedence_bracketed", feedback
    assert "d_k / 2" in feedback.message

    def with_the_exponent_bracketed(q, k):  # the fix the hint gives passes
        d_k = q.shape[-1]
        return torch.softmax(q @ k.transpose(-2, -1) / d_k ** (1/2), dim=-1)
    assert lesson02.check_attention_weights(with_the_exponent_bracketed).passed


def test_attention_weights_names_a_scale_by_the_number_of_queries():
    def by_queries(q, k):
        return torch.softmax(q @ k.transpose(-2, -1) / math.sqrt(q.shape[-2]), dim=-1)
    feedback = lesson02.check_attention_weights(by_queries)
    assert feedback.mistake == "scaled_by_num_queries", feedback
    assert "number of queries" in feedback.message


def test_attention_weights_names_a_division_after_the_softmax_by_what_rows_sum_to():
    def after(q, k):
        return torch.softmax(q @ k.transpose(-2, -1), dim=-1) / math.sqrt(q.shape[-1])

    def twice(q, k):  # scaled before *and* after: no stored slip has these numbers
        d_k = q.shape[-1]
        return torch.softmax(q @ k.transpose(-2, -1) / math.sqrt(d_k), dim=-1) / math.sqrt(d_k)

    for answer in (after, twice):
        feedback = lesson02.check_attention_weights(answer)
        assert feedback.mistake == "scaled_after_softmax", feedback
        assert "1/sqrt(d_k)" in feedback.message and "after the softmax" in feedback.message


# -- 2.3 ---------------------------------------------------------------------------------------
def test_causal_names_the_off_by_one_mask_that_sees_the_next_key():
    def tril_1(q, k):
        T = q.shape[-2]
        scores = q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])
        allowed = torch.tril(torch.ones(T, T, dtype=torch.bool), diagonal=1)
        return torch.softmax(scores.masked_fill(~allowed, float("-inf")), dim=-1)
    feedback = lesson02.check_causal_attention_weights(tril_1)
    assert feedback.mistake == "sees_next_key", feedback
    assert "next key" in feedback.message


def test_causal_hints_point_to_the_idea_not_the_answer_line():
    def not_assigned(q, k):
        T = q.shape[-2]
        s = q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])
        allowed = torch.ones(T, T, dtype=torch.bool).tril()
        s.masked_fill(~allowed, float("-inf"))
        return torch.softmax(s, dim=-1)
    feedback = lesson02.check_causal_attention_weights(not_assigned)
    assert feedback.mistake == "mask_not_applied", feedback
    assert "keep its result" in feedback.message and "returns" in feedback.hint
    for mistake in lesson02.CAUSAL_ATTENTION_WEIGHTS.mistakes:  # no hint is a line to paste
        assert "masked_fill(~" not in mistake.hint and ".tril()" not in mistake.hint, mistake.key


# -- NumPy where torch is asked (2.2-2.4) ------------------------------------------------------
def test_a_numpy_result_is_named_in_every_torch_exercise():
    def weights_np(q, k):
        return _weights(q, k).numpy()

    def causal_np(q, k):
        return _causal_additive(q, k).numpy()

    def single_np(x, w_q, w_k, w_v):  # section 1's numpy, batched properly: every case returns
        X, Wq, Wk, Wv = (t.numpy() for t in (x, w_q, w_k, w_v))
        Q, K, V = X @ Wq, X @ Wk, X @ Wv
        return _softmax(Q @ np.swapaxes(K, -1, -2) / math.sqrt(Q.shape[-1])) @ V

    for check, answer in ((lesson02.check_attention_weights, weights_np),
                          (lesson02.check_causal_attention_weights, causal_np),
                          (lesson02.check_single_head_attention, single_np)):
        feedback = check(answer)
        assert feedback.mistake == "returned_numpy", feedback
        assert feedback.message.startswith("the numbers are right") and "tensor" in feedback.message

    def wrong_and_numpy(q, k):
        return (q @ k.transpose(-2, -1)).softmax(-1).numpy()
    feedback = lesson02.check_attention_weights(wrong_and_numpy)
    assert feedback.mistake == "returned_numpy" and "do not match" in feedback.message, feedback


def test_single_head_names_numpy_on_one_sequence_that_raises_on_the_batch():
    """The learner's copy of section 1 (K.T): an array on x (3, 6), a ValueError on the batch."""
    def section_one(x, w_q, w_k, w_v):
        X = x.numpy()
        Q, K, V = X @ w_q.numpy(), X @ w_k.numpy(), X @ w_v.numpy()
        return _softmax(Q @ K.T / math.sqrt(K.shape[-1])) @ V
    feedback = lesson02.check_single_head_attention(section_one)
    assert feedback.mistake == "returned_numpy", feedback
    assert "NumPy array" in feedback.message and "raised ValueError on batched x" in feedback.message

    def raises_without_numpy(x, w_q, w_k, w_v):  # a raise alone keeps the plain error message
        if x.dim() == 3:
            raise ValueError("a bug of its own")
        return _single_head(x, w_q, w_k, w_v)
    feedback = lesson02.check_single_head_attention(raises_without_numpy)
    assert feedback.status == "error" and "a bug of its own" in feedback.message, feedback

    def numpy_then_exits(x, w_q, w_k, w_v):  # the check's second run does not let it escape
        if x.dim() == 3:
            sys.exit(1)
        return _single_head(x, w_q, w_k, w_v).numpy()
    feedback = lesson02.check_single_head_attention(numpy_then_exits)
    assert not feedback.passed and feedback.mistake == "returned_numpy", feedback


# -- precision: one rule in 2.1-2.4 ------------------------------------------------------------
def test_float32_where_float64_is_expected_is_accepted_everywhere():
    def softmax32(scores):  # every 2.1 case is float64
        return _softmax(scores.astype(np.float32))
    assert lesson02.check_softmax_rows(softmax32).passed
    # 2.2 and 2.4: the worked-example case is float64, the others float32
    assert lesson02.check_attention_weights(lambda q, k: _weights(q.float(), k.float())).passed
    assert lesson02.check_single_head_attention(
        lambda x, w_q, w_k, w_v: _single_head(x.float(), w_q.float(), w_k.float(), w_v.float())).passed


def test_half_precision_is_named_everywhere():
    def softmax16(scores):
        return _softmax(scores.astype(np.float16))
    feedback = lesson02.check_softmax_rows(softmax16)
    assert feedback.mistake == "half_precision" and "float16" in feedback.message, feedback

    def causal_half(q, k):
        return _causal_additive(q, k).half()
    for check, answer in ((lesson02.check_attention_weights, lambda q, k: _weights(q, k).half()),
                          (lesson02.check_causal_attention_weights, causal_half),
                          (lesson02.check_single_head_attention,
                           lambda x, w_q, w_k, w_v: _single_head(x, w_q, w_k, w_v).to(torch.bfloat16))):
        feedback = check(answer)
        assert feedback.mistake == "half_precision", feedback


def test_float64_where_float32_is_expected_is_named_in_the_torch_exercises():
    def widened(q, k):
        return _weights(q.double(), k.double())
    assert lesson02.check_attention_weights(widened).mistake == "widened_to_float64"

    def widened_single(x, w_q, w_k, w_v):
        return _single_head(x.double(), w_q.double(), w_k.double(), w_v.double())
    assert lesson02.check_single_head_attention(widened_single).mistake == "widened_to_float64"


def test_a_widened_numpy_softmax_is_named_by_the_numpy_rule():
    """2.1's cases are all float64, so its float64-where-float32 branch is tried on a copy of the
    exercise whose cases are float32 (the rule must hold for any case the check is given)."""
    import copy

    from course_utils.exercises.core import Case

    rng = np.random.default_rng(5)
    cases = [Case((rng.normal(size=(3, 4)).astype(np.float32),), label="a float32 (3, 4) array")]
    exercise = copy.copy(lesson02.SOFTMAX_ROWS)
    exercise.__dict__["_cases"] = cases
    exercise.__dict__["_expected"] = [_softmax(c.args[0]) for c in cases]
    assert exercise.check(_softmax).passed
    feedback = exercise.check(lambda s: _softmax(s.astype(np.float64)))
    assert feedback.mistake == "widened_to_float64", feedback
