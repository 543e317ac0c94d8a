"""Battery 19a's bench cases (issue 38): check_function_name's own arguments, per-test memory
records with a peak below the start, and training rows with NaN or negative numbers, each
refused by name."""

from __future__ import annotations

import json
import math

import pytest

from course_utils.bench.memory import format_test_report, read_test_report
from course_utils.bench.timing import check_function_name
from course_utils.bench.train_speed import format_training_table


def _raises(make, error: type[Exception], words: list[str]) -> None:
    """``make()`` raises ``error`` whose message holds every one of ``words``."""
    with pytest.raises(error) as info:
        make()
    for word in words:
        assert word in str(info.value), (word, str(info.value))


# -- g04, g05: check_function_name checked the value, not its own name, among and what --
@pytest.mark.parametrize(("kwargs", "error", "words"), [
    ({"among": 3}, TypeError, ["among", "iterable", "int 3"]),
    ({"among": "ab"}, TypeError, ["among", "iterable", "str 'ab'"]),
    ({"name": 3}, TypeError, ["name", "str", "int 3"]),
    ({"name": ""}, ValueError, ["name", "non-empty", "''"]),
    ({"what": None}, TypeError, ["what", "str", "None"]),
], ids=["among int", "among str", "name int", "name empty", "what None"])
def test_check_function_name_checks_its_own_arguments(kwargs, error, words) -> None:
    args = {"value": "a", "name": "baseline", "among": ["a", "b"], "what": "the names of fns"}
    _raises(lambda: check_function_name(**{**args, **kwargs}), error, words)


def test_check_function_name_still_takes_a_dict_and_no_among() -> None:
    check_function_name("a", "baseline", {"a": len, "b": len}, "the names of fns")
    check_function_name(("a", 1), "baseline")
    _raises(lambda: check_function_name("c", "baseline", ("a", "b")), ValueError, ["baseline", "'c'"])


# -- g06: a peak below the size a test began with was printed as a negative rise --
@pytest.mark.parametrize(("peak", "start"), [(5, 50), (1.0, 5.0), (600.0, 620.0)])
def test_a_peak_below_the_start_is_refused(tmp_path, peak, start) -> None:
    record = {"peak_mb": peak, "start_mb": start, "children_mb": 0, "seconds": 1}
    words = ["'t'", f"peak_mb={peak!r}", f"start_mb={start!r}"]
    _raises(lambda: format_test_report({"t": record}), ValueError, words)
    report = tmp_path / "peaks.json"
    report.write_text(json.dumps({"tests": {"t": record}}), encoding="utf-8")
    before = report.read_bytes()
    _raises(lambda: read_test_report(report), ValueError, [str(report), *words])
    assert report.read_bytes() == before


def test_a_peak_a_reading_below_the_start_is_kept_and_rises_by_0() -> None:
    """Linux's per-CPU RSS counters: the course's own reports hold peaks 0.1-0.3 MB below the start."""
    record = {"peak_mb": 605.0, "start_mb": 605.1, "children_mb": None, "seconds": 0.2}
    text = format_test_report({"t": record})
    assert "+0 MB" in text and "-0 MB" not in text


# -- g09: format_training_table printed NaN and negative numbers and their medians --
@pytest.mark.parametrize(("key", "value"), [
    ("induction_seconds", math.nan), ("agreement_seconds", -1.0), ("agreement_seconds", math.inf),
    ("induction_steps", -5), ("agreement_accuracy", -0.5),
])
def test_training_rows_with_nan_or_negative_numbers_are_refused(key, value) -> None:
    good = {"seed": 0, "induction_steps": 100, "induction_seconds": 1.0, "agreement_seconds": 2.0,
            "agreement_accuracy": 0.9}
    rows = [good, {**good, "seed": 1, key: value}]
    _raises(lambda: format_training_table(rows), ValueError, [f"rows[1][{key!r}]", ">= 0", repr(value)])


def test_training_rows_with_zero_and_none_still_print() -> None:
    rows = [{"seed": 0, "steps": None, "seconds": 0.0, "acc": 0.0},
            {"seed": 1, "steps": 10**30, "seconds": 1.0, "acc": 1.0}]
    assert format_training_table(rows).splitlines()[-1].split()[:2] == ["median", "never"]
