"""Battery 18 (issue 38), helper Rt: course_utils/tasks/*. Each test fails before its fix: the
bad input used to pass without a word (or fail inside pandas); now it is refused by name."""
from __future__ import annotations

import math

import numpy as np
import pytest

from course_utils.tasks import worked_example as we


def _raises(error: type[Exception], words: list[str], call) -> None:
    """``call()`` raises ``error`` whose message holds every one of ``words``."""
    with pytest.raises(error) as info:
        call()
    message = str(info.value)
    for word in words:
        assert word in message, (word, message)


# -- g12 / g20: worked-example rounding helpers -----------------------------------------------
@pytest.mark.parametrize("call, words", [
    (lambda: we.round_half_up(math.nan), ["x", "finite", "nan"]),
    (lambda: we.round_half_up(np.array([1.0, np.inf])), ["x", "finite", "inf", "(1,)"]),
    (lambda: we.article_matmul(np.ones((2, 3)), np.full((3, 2), np.nan)), ["b", "finite", "nan", "(0, 0)"]),
    (lambda: we.article_matmul(np.full((2, 3), -np.inf), np.ones((3, 2))), ["a", "finite", "-inf"]),
], ids=["round nan", "round inf", "matmul b nan", "matmul a -inf"])
def test_rounding_helpers_refuse_non_finite(call, words):
    _raises(ValueError, words, call)


@pytest.mark.parametrize("call", [
    lambda: we.round_half_up(np.array([1.2345]), -1),
    lambda: we.article_matmul(np.ones((2, 3)), np.ones((3, 2)), decimals=-1),
], ids=["round_half_up", "article_matmul"])
def test_rounding_helpers_refuse_negative_decimals(call):
    _raises(ValueError, ["decimals", ">= 0", "-1"], call)


@pytest.mark.parametrize("weights, value", [(np.full((2, 2), 2.0), "2.0"), (-np.ones((2, 2)), "-1.0")])
def test_output_rounding_budget_weights_are_fractions(weights, value):
    _raises(ValueError, ["weights", "[0, 1]", value, "(0, 0)"],
            lambda: we.output_rounding_budget(weights, np.ones((2, 3))))


def test_rounding_helpers_still_take_good_input():
    assert we.round_half_up(0.0105) == pytest.approx(0.011)
    assert we.round_half_up(np.array([1.25]), 0).tolist() == [1.0]
    assert we.output_rounding_budget(np.full((2, 2), 0.5), np.ones((2, 3))).shape == (2, 3)


# -- g19: Table ---------------------------------------------------------------------------------
@pytest.mark.parametrize("name, values, error, words", [
    ("t", np.zeros((2, 3), dtype=bool), TypeError, ["Table('t').values", "float", "bool"]),
    ("t", np.zeros((2, 3), dtype=np.int64), TypeError, ["Table('t').values", "float", "int64"]),
    ("", np.zeros((2, 3)), ValueError, ["Table.name", "non-empty", "''"]),
], ids=["bool values", "int values", "empty name"])
def test_table_refuses_non_float_values_and_empty_name(name, values, error, words):
    _raises(error, words, lambda: we.Table(name, values, ("a", "b"), ("x", "y", "z")))
