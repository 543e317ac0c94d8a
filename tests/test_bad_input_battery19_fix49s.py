"""Battery 19a's bench cases (issue 38): check_function_name's own arguments, per-test memory
records with a peak below the start, and training rows with NaN or negative numbers, each
refused by name."""

from __future__ import annotations

import pytest

from course_utils.bench.timing import check_function_name


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
