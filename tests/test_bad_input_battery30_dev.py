"""Battery 30's development run, the cases fixed on main: an int the package has checked is used
as a plain int from then on (an int subclass whose str and repr raise is a valid int, yet shapes,
sizes and messages built from the argument itself raised the value's own error); cli.shown's width
follows its twin's rule; a timings list whose len() raises is named."""
from __future__ import annotations

import pytest
import torch


class Int(int):
    def __repr__(self) -> str:
        raise RuntimeError("repr exploded")

    __str__ = __repr__


def _calls():
    from course_utils.attention.masks import causal_mask, padding_mask
    from course_utils.attention.shapes import dimension_report
    from course_utils.model.kv_cache import PreallocatedCache, SlidingWindowCache
    from course_utils.model.paged_cache import PagedCache
    from course_utils.tasks.synthetic import InductionTask

    return {
        "padding_mask": lambda: padding_mask([3, 5], Int(6)),
        "PreallocatedCache": lambda: PreallocatedCache(2, 1, 2, 8, Int(16)),
        "SlidingWindowCache": lambda: SlidingWindowCache(1, 1, 2, 8, Int(4)),
        "PagedCache": lambda: PagedCache(8, 4, 2, Int(8)),
        "InductionTask.sample": lambda: InductionTask().sample(Int(4), torch.Generator().manual_seed(0)),
        "causal_mask": lambda: causal_mask(Int(3), Int(4)),
        "dimension_report": lambda: dimension_report(Int(2), 8, 16, 4),
    }


@pytest.mark.parametrize("label", list(_calls()))
def test_a_valid_int_subclass_is_used_as_a_plain_int(label):
    result = _calls()[label]()
    if label == "dimension_report":
        assert isinstance(result, str) and "Invalid" not in result, result


@pytest.mark.parametrize("width", [2.5, -1, True])
def test_cli_shown_refuses_a_bad_width_by_name_as_its_twin_does(width):
    from course_utils.attention import validation
    from course_utils.cli import shown

    for twin in (shown, validation.shown):
        with pytest.raises(TypeError, match="width must be None or an int >= 0"):
            twin([1, 2, 3], width)


def test_a_timings_list_whose_len_raises_is_named():
    from course_utils.bench.timing import format_table, timings_from_samples

    class RaisingLen(list):
        def __len__(self):
            raise RuntimeError("len exploded")

    timings = RaisingLen(timings_from_samples({"a": [1.0, 1.1], "b": [2.0, 2.1]}, "a"))
    with pytest.raises(TypeError, match="timings must be a non-empty list of Timing"):
        format_table("t", timings, "a")


def test_the_grader_runs_no_case_after_the_time_limit_struck():
    """After one call ran past per_call, every later case waited its full limit too (a 60 s
    sleep held autograde about 11 minutes per exercise, for 0 points). The cases after it are
    now not run, each recorded as stopped by the same limit: the answer is wrong either way."""
    from course_utils.exercises import autograde, lesson02, sandbox

    cases = autograde.cases_of(lesson02.check_softmax_rows.__self__)
    code = "def softmax_rows(s):\n    while True:\n        pass\n"
    run = sandbox.run_answer(code, "softmax_rows", "lesson02.check_softmax_rows", [cases, cases], per_call=1)
    kinds = [[o.kind for o in row] for row in run.outcomes]
    errors = [o.error for row in run.outcomes for o in row]
    assert kinds == [["raised"] * len(cases)] * 2, kinds
    assert errors[0] == ("TimeoutError", "the call took longer than the grader's time limit"), errors[0]
    later = [e for e in errors[1:]
             if e[0] != "TimeoutError" or not e[1].startswith("not run: an earlier call")]
    assert later == [], later


def test_check_head_dims_names_its_own_heads_name():
    from course_utils.attention.validation import check_head_dims

    assert check_head_dims(16, 4, heads_name="num_kv_heads") == 4
    with pytest.raises(TypeError, match="check_head_dims's heads_name must be a str"):
        check_head_dims(16, 4, heads_name=5)
