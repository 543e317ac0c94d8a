"""Battery 20 (issue 38), fix pass P: ReadOnlyDict given a non-mapping (O1), run_with_cache on a
module with no hook point (O2), records with an empty ``name`` refused at the root, in
check_record (S1), check_increasing given NaN or a str (S3)."""

from __future__ import annotations

import dataclasses

import pytest
import torch
from bad_input_cases import raises_naming

from course_utils.attention.hooks import run_with_cache
from course_utils.attention.mha import MultiHeadAttention
from course_utils.attention.shapes import TraceStep
from course_utils.attention.validation import ReadOnlyDict, check_increasing, check_record
from course_utils.bench.memory import NotebookMemory
from course_utils.bench.timing import RatioSpread


# -- O1: ReadOnlyDict's items must be a mapping or (key, value) pairs -----------------------------
@pytest.mark.parametrize("items", [None, 3, [1], [(1, 2, 3)]], ids=["None", "int", "list of int", "triple"])
def test_read_only_dict_refuses_a_non_mapping_by_name(items):
    raises_naming(TypeError, ["items", "mapping", type(items).__name__, repr(items)],
                  lambda: ReadOnlyDict(items, "Rec.field"))


def test_read_only_dict_still_takes_a_mapping_and_pairs():
    assert ReadOnlyDict({"a": 1}) == ReadOnlyDict([("a", 1)]) == {"a": 1}
    assert ReadOnlyDict() == {}


# -- O2: run_with_cache on a module with no hook point is refused before it runs -----------------
@pytest.mark.parametrize("module", [torch.nn.Linear(2, 2), torch.nn.Sequential(torch.nn.Embedding(16, 2))],
                         ids=["Linear", "Sequential"])
def test_run_with_cache_refuses_a_module_without_hook_points(module):
    tokens = torch.randint(1, 16, (2, 6))
    raises_naming(ValueError, ["module", type(module).__name__, "hook point"],
                  lambda: run_with_cache(module, tokens))


def test_run_with_cache_still_records_a_course_layer():
    _, cache = run_with_cache(MultiHeadAttention(8, 2), torch.zeros(1, 3, 8))
    assert "hook_z" in cache


# -- S1: a record's name is never empty, whichever record (checked once, in check_record) ---------
@pytest.mark.parametrize("make, label", [
    (lambda: TraceStep("", "x", ("B", "T"), (2, 5), 0, True), "TraceStep.name"),
    (lambda: RatioSpread("", "base", 2.0, 1.9, 2.1, 1.8, 2.2, 3), "RatioSpread.name"),
    (lambda: NotebookMemory("", 100.0, 1.0), "NotebookMemory.name"),
], ids=["TraceStep", "RatioSpread", "NotebookMemory"])
def test_records_refuse_an_empty_name(make, label):
    raises_naming(ValueError, [label, "non-empty", "''"], make)


@dataclasses.dataclass(frozen=True)
class _Named:
    name: str
    note: str = ""  # another str field: may stay empty

    def __post_init__(self) -> None:
        check_record(self)


def test_check_record_refuses_an_empty_name_without_being_asked():
    raises_naming(ValueError, ["_Named.name", "non-empty", "''"], lambda: _Named(""))
    assert _Named("a").note == ""  # only the name is held to it
    assert NotebookMemory("nb.ipynb", 100.0, 1.0).error == ""


# -- S3: check_increasing reads ints only (NaN or a str would compare "in order") -----------------
@pytest.mark.parametrize("steps, words", [
    ([1, float("nan")], ["steps[1]", "int", "nan"]),
    ("ab", ["steps", "list of ints", "'ab'"]),
    ([1, "2"], ["steps[1]", "int", "'2'"]),
    ([1.0, 2.5], ["steps[0]", "int", "1.0"]),
], ids=["nan", "str", "str entry", "floats"])
def test_check_increasing_refuses_non_int_steps(steps, words):
    raises_naming(TypeError, words, lambda: check_increasing(steps, "steps"))


def test_check_increasing_still_takes_increasing_ints():
    check_increasing([], "steps")
    check_increasing((1, 2, 5), "steps")
    raises_naming(ValueError, ["steps[0] = 2", "steps[1] = 1"], lambda: check_increasing([2, 1], "steps"))
