"""Battery 8's leftovers (issue 38): inputs that gave a silent wrong result, an error naming the
wrong argument, a misleading exercise message or a raw Python error. Each is now refused by
name (what was expected, what arrived), or gives the right result."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from course_utils.attention import validation as va
from course_utils.attention.mha import MultiHeadAttention
from course_utils.attention.shapes import parameter_table, trace_shapes
from course_utils.bench import decode_step, mha_speed, timing
from course_utils.exercises import sandbox
from course_utils.model.checkpoint import checkpoint_paths
from course_utils.tasks import worked_example

# -- 1. silent results --------------------------------------------------------------------------
# (call, error type, words the message must hold: the argument, what was expected, what arrived)
SILENT = [
    ("parameter_table duplicate head count", lambda: parameter_table(8, [2, 2]), ValueError,
     ["head_counts", "distinct", "[2, 2]", "repeats [2]"]),
    ("RatioSpread nan ratio", lambda: timing.RatioSpread("a", "b", math.nan, 1, 1, 1, 1, 3), ValueError,
     ["RatioSpread('a').median", "finite number >= 0", "nan"]),
    ("RatioSpread 0 repeats", lambda: timing.RatioSpread("a", "b", 1.0, 1, 1, 1, 1, 0), ValueError,
     ["RatioSpread('a').repeats", "positive int", "got 0"]),
    ("make_read_probe empty buffer", lambda: decode_step.make_read_probe(torch.empty(0)), ValueError,
     ["buffer", "at least one number", "(0,)"]),
    ("random_buffer seed -1", lambda: decode_step.random_buffer(64, seed=-1), ValueError,
     ["seed", ">= 0", "-1"]),
    ("grading_note cells str", lambda: sandbox.grading_note("x = 1", "lesson02.check_softmax_rows"),
     TypeError, ["cells", "list of str", "str 'x = 1'"]),
    ("grading_note unknown check", lambda: sandbox.grading_note(["x = 1"], "bogus"), ValueError,
     ["check_key", "lessonNN.check_xxx", "'bogus'"]),
    ("ShapeTrace.format code str", lambda: trace_shapes(MultiHeadAttention(8, 2), torch.randn(1, 3, 8))
     .format(code="no"), TypeError, ["code", "True or False", "str 'no'"]),
    ("trace_shapes keep_tensors str", lambda: trace_shapes(MultiHeadAttention(8, 2), torch.randn(1, 3, 8),
                                                           keep_tensors="yes"),
     TypeError, ["keep_tensors", "True or False", "str 'yes'"]),
    ("Table values vs row labels", lambda: worked_example.Table("t", np.ones((2, 2)), ("a",), ("b", "c")),
     ValueError, ["Table 't' values", "one row per row label", "(1, 2)", "(2, 2)"]),
    ("output_rounding_budget nan", lambda: worked_example.output_rounding_budget(
        np.full((2, 2), np.nan), np.ones((2, 2))), ValueError, ["weights", "finite", "nan at index (0, 0)"]),
    ("checkpoint_paths NUL", lambda: checkpoint_paths("ind\x00uction"), ValueError,
     ["name_or_path", "NUL", "'ind\\x00uction'"]),
    ("check_device cpu:3", lambda: va.check_device("cpu:3"), ValueError, ["device", "'cpu:3'", "use 'cpu'"]),
    ("check_distinct nan twice", lambda: va.check_distinct([math.nan, math.nan], "xs"), ValueError,
     ["xs", "distinct", "repeats [nan]"]),
    ("check_tensor_list one tensor", lambda: va.check_tensor_list(torch.ones(2, 2), "parts"), TypeError,
     ["parts", "list or tuple of tensors", "one tensor of shape (2, 2)"]),
    ("check_positive_number inf", lambda: va.check_positive_number(math.inf, "x"), ValueError,
     ["x", "finite number > 0", "inf"]),
    ("check_table duplicate columns", lambda: va.check_table(
        __import__("pandas").DataFrame([[1, 2]], columns=["a", "a"]), "t", ("a",)), ValueError,
     ["t", "distinct column names", "repeats ['a']"]),
    ("check_tensor sparse", lambda: va.check_tensor(torch.ones(2, 2).to_sparse(), "x", ndim=2), TypeError,
     ["x", "dense (strided)", "sparse_coo"]),
    ("check_edited_heads all NaN", lambda: va.check_edited_heads(torch.full((1, 2, 3, 4), math.nan),
                                                                  torch.ones(1, 2, 3, 4)),
     ValueError, ["edit_heads's result", "finite", "nan at index (0, 0, 0, 0)"]),
]


@pytest.mark.parametrize("call, error, words", [c[1:] for c in SILENT], ids=[c[0] for c in SILENT])
def test_a_silent_result_is_now_refused_by_name(call, error, words):
    with pytest.raises(error) as refused:
        call()
    message = str(refused.value)
    assert all(w in message for w in words), message


def test_sweep_mha_refuses_a_repeated_size_before_measuring(monkeypatch):
    """sweep_mha('batch', [1, 1]) measured twice and returned one row."""
    measured = []
    monkeypatch.setattr(mha_speed, "bench_mha", lambda *a, **k: measured.append(a) or [])
    with pytest.raises(ValueError) as refused:
        mha_speed.sweep_mha("batch", [1, 1], repeats=1)
    assert "values must list distinct sizes" in str(refused.value) and "repeats [1]" in str(refused.value)
    assert measured == []


def test_the_loosened_and_kept_rules_still_accept_what_they_should():
    """What the new refusals leave alone: 'cpu' and 'cpu:0', distinct values (NaN once, lists),
    an explicit tensor of parts, infinity where allowed, unequal NaN-free edits."""
    assert va.check_device("cpu") == torch.device("cpu") and va.check_device("cpu:0").type == "cpu"
    assert va.check_distinct([1.0, math.nan, 2.0], "xs")[0] == 1.0
    assert va.check_distinct([[1], [2]], "xs") == [[1], [2]]
    assert len(va.check_tensor_list(torch.ones(3, 2, 2), "parts", stacked_ndim=3)) == 3
    assert va.check_positive_number(math.inf, "timeout", allow_inf=True) == math.inf
    heads = torch.full((1, 2, 3, 4), math.nan)  # NaN in, NaN out: not the edit's doing
    assert va.check_edited_heads(heads.clone(), heads) is not heads
    budget = worked_example.output_rounding_budget(np.eye(2), np.ones((2, 3)))
    assert budget.shape == (2, 3) and np.isfinite(budget).all()
    spread = timing.RatioSpread("a", "b", 2.0, 1.8, 2.2, 1.5, 2.5, 5)
    assert spread.verdict().startswith("a: slower than b")
    assert parameter_table(8, [1, 2]).index.tolist() == [1, 2]


def test_multi_head_attention_with_inf_input_is_documented_not_refused():
    """The check would cost a pass over the data every forward (10% at lesson 04's sizes, and a
    GPU wait), so forward leaves it to check_finite; its docstring says so, and check_finite names
    the input."""
    assert "check_finite" in MultiHeadAttention.forward.__doc__
    x = torch.full((1, 2, 8), math.inf)
    with pytest.raises(ValueError, match=r"query must hold finite numbers, got inf at index \(0, 0, 0\)"):
        va.check_finite(x, "query")
