"""Lesson 01 checks turn back the library calls the exercises rule out (their 'Library use' lines)."""

import math

import torch

from course_utils import MultiHeadAttention
from course_utils.exercises import lesson01
from course_utils.tasks.two_relations import split_pair_class


def test_relation_accuracy_with_the_library_split_is_turned_back():
    def with_library(logits, target, num_symbols):
        pa, pb = split_pair_class(logits.argmax(-1), num_symbols)
        ta, tb = split_pair_class(target, num_symbols)
        return torch.stack([(pa == ta).double().mean(), (pb == tb).double().mean()])
    feedback = lesson01.check_relation_accuracy(with_library)
    assert not feedback.passed and feedback.mistake == "called_reference"
    assert "split_pair_class" in feedback.message


def test_head_scores_through_the_course_module_is_turned_back():
    def with_module(x, w_q, w_k, num_heads):
        T, d = x.shape
        m = MultiHeadAttention(d, num_heads, bias=False)
        with torch.no_grad():
            m.in_proj.weight[:d] = w_q
            m.in_proj.weight[d:2 * d] = w_k
            q, k, _ = m.project_qkv(x[None], x[None], x[None])  # (1, h, T, dk)
        return (q @ k.transpose(-2, -1))[0] / math.sqrt(d // num_heads)
    feedback = lesson01.check_head_scores(with_module)
    assert not feedback.passed and feedback.mistake == "called_reference"


def test_head_scores_names_a_float_head_width_with_reshape_too():
    def with_reshape(x, w_q, w_k, num_heads):
        T, d = x.shape
        dk = d / num_heads
        q = (x @ w_q.T).reshape(T, num_heads, dk).transpose(0, 1)
        k = (x @ w_k.T).reshape(T, num_heads, dk).transpose(0, 1)
        return q @ k.transpose(-2, -1) / math.sqrt(dk)
    feedback = lesson01.check_head_scores(with_reshape)
    assert feedback.mistake == "float_dk" and "//" in feedback.hint


def test_attend_names_a_scale_by_the_value_width():
    def by_dv(scores, values):
        return torch.softmax(scores / values.shape[1] ** 0.5, dim=1) @ values
    assert lesson01.check_attend(by_dv).mistake == "scaled_by_value_width"


def test_relation_accuracy_names_true_division_and_the_error_rate():
    def true_div(logits, target, num_symbols):
        guess = logits.argmax(-1)
        a = (guess / num_symbols == target / num_symbols).float().mean()
        b = (guess % num_symbols == target % num_symbols).float().mean()
        return torch.stack([a, b])
    assert lesson01.check_relation_accuracy(true_div).mistake == "true_division"

    def errors(logits, target, num_symbols):
        guess = logits.argmax(-1)
        a = (guess // num_symbols != target // num_symbols).float().mean()
        b = (guess % num_symbols != target % num_symbols).float().mean()
        return torch.stack([a, b])
    assert lesson01.check_relation_accuracy(errors).mistake == "error_rate"


def _integer_counts(logits, target, num_symbols):
    guess, V = logits.argmax(-1), num_symbols
    return torch.stack([(guess // V == target // V).sum(), (guess % V == target % V).sum()])  # int64


def test_relation_accuracy_names_integer_counts_as_counts():
    """l19: counts from .sum() of a comparison are int64; the exercise's own "counts" Mistake
    (whose implementation returns floats) names them, not the core's dtype message."""
    feedback = lesson01.check_relation_accuracy(_integer_counts)
    assert feedback.mistake == "counts"
    assert "how many answers" in feedback.message and "torch.int64" in feedback.message


def test_relation_accuracy_integer_message_names_the_result_and_spares_decoding():
    """An integer result no Mistake reproduces (count // n) gets the core's dtype message: it says
    the answer returned whole numbers, and does not rule out the // that decodes a class."""
    def floor_mean(logits, target, num_symbols):
        return _integer_counts(logits, target, num_symbols) // len(target)
    feedback = lesson01.check_relation_accuracy(floor_mean)
    assert not feedback.passed and feedback.mistake is None
    assert "returned whole numbers (dtype torch.int64)" in feedback.message
    assert "decodes indices is fine" in feedback.message


def test_relation_accuracy_names_a_bool_result_as_true_false_values():
    def any_right(logits, target, num_symbols):
        guess, V = logits.argmax(-1), num_symbols
        return torch.stack([(guess // V == target // V).any(), (guess % V == target % V).any()])
    feedback = lesson01.check_relation_accuracy(any_right)
    assert not feedback.passed and "returned True/False values (dtype torch.bool)" in feedback.message


def test_head_scores_with_math_never_imported_says_to_import_it():
    # learner trial l21: lesson 01 imports no math, and an answer's `math.sqrt(dk)` raised a
    # NameError whose hint was the exercise's general one; it now names the import (or dk ** 0.5)
    namespace = {"torch": torch}  # the lesson's kernel: torch, no math
    exec(
        "def head_scores(x, w_q, w_k, num_heads):\n"
        "    T, d = x.shape\n"
        "    dk = d // num_heads\n"
        "    q = (x @ w_q.T).view(T, num_heads, dk).transpose(0, 1)\n"
        "    k = (x @ w_k.T).view(T, num_heads, dk).transpose(0, 1)\n"
        "    return q @ k.transpose(-2, -1) / math.sqrt(dk)\n", namespace)
    feedback = lesson01.check_head_scores(namespace["head_scores"])
    assert feedback.status == "error" and "NameError" in feedback.message
    assert "`import math`" in feedback.hint and "dk ** 0.5" in feedback.hint
