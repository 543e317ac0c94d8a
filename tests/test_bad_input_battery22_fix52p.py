"""Battery 22 (issue 38), fix pass P: ReadOnlyDict checks its label (10); check_distinct refuses a
meta tensor and compares a tensor by its values (11); the module type errors name ``module`` (12);
parse_worked_example names ``data``, not "the file" (13); TwoKeyTask.sample checks its generator
first (14); native_stderr_captured refuses re-entry and an exit without entry by name (15)."""

from __future__ import annotations

import pickle

import pytest
import torch
from bad_input_cases import raises_naming
from torch import nn

from course_utils.attention import native_output
from course_utils.attention.gqa import GroupedQueryAttention
from course_utils.attention.mha import MultiHeadAttention
from course_utils.attention.naive_mha import naive_from_batched
from course_utils.attention.shapes import count_parameters
from course_utils.attention.validation import ReadOnlyDict, check_distinct
from course_utils.tasks.two_relations import TwoKeyTask
from course_utils.tasks.worked_example import WorkedExampleError, parse_worked_example


# -- 10: ReadOnlyDict's label (what its refusals print) is a non-empty str --------------------------
@pytest.mark.parametrize(("label", "error"), [(3, TypeError), (None, TypeError), (b"x", TypeError),
                                              ("", ValueError), ("  ", ValueError)],
                         ids=["int", "None", "bytes", "empty", "blank"])
def test_read_only_dict_refuses_a_bad_label(label, error):
    raises_naming(error, ["label", repr(label)], lambda: ReadOnlyDict({"a": 1}, label))


def test_read_only_dict_with_a_label_still_works():
    d = ReadOnlyDict({"a": 1}, "Rec.field")
    assert d == {"a": 1} and pickle.loads(pickle.dumps(d)).label == "Rec.field"
    raises_naming(TypeError, ["Rec.field", "read-only"], lambda: d.update(b=2))


# -- 11: check_distinct on a tensor: a meta one is refused, others compared by value ---------------
def test_check_distinct_refuses_a_meta_tensor():
    raises_naming(ValueError, ["xs", "meta"], lambda: check_distinct(torch.ones(2).to("meta"), "xs"))


@pytest.mark.parametrize("values", [torch.tensor([1, 1]), torch.tensor([[1, 2], [1, 2]]),
                                    torch.tensor([float("nan")] * 2)], ids=["ints", "rows", "nan"])
def test_check_distinct_compares_a_tensor_by_value(values):
    raises_naming(ValueError, ["xs", "distinct", "repeats"], lambda: check_distinct(values, "xs"))


def test_check_distinct_refuses_a_0d_tensor_and_keeps_distinct_ones():
    raises_naming(TypeError, ["xs", "Tensor"], lambda: check_distinct(torch.tensor(1), "xs"))
    assert [int(v) for v in check_distinct(torch.tensor([1, 2]), "xs")] == [1, 2]


# -- 12: the module type errors name the argument and what arrived ----------------------------------
@pytest.mark.parametrize("call", [naive_from_batched, MultiHeadAttention.from_torch, count_parameters],
                         ids=["naive_from_batched", "from_torch", "count_parameters"])
@pytest.mark.parametrize("bad", [None, 3, "x"], ids=["None", "int", "str"])
def test_module_type_errors_name_module(call, bad):
    raises_naming(TypeError, ["module must be", type(bad).__name__], lambda: call(bad))


@pytest.mark.parametrize(("call", "bad"), [
    (naive_from_batched, nn.Linear(4, 4)), (naive_from_batched, nn.MultiheadAttention(16, 4)),
    (naive_from_batched, GroupedQueryAttention(16, 4, 2)), (MultiHeadAttention.from_torch, nn.Linear(4, 4)),
    (MultiHeadAttention.from_torch, MultiHeadAttention(16, 4)),
], ids=["naive-linear", "naive-torch", "naive-gqa", "from_torch-linear", "from_torch-course"])
def test_module_type_errors_name_module_for_the_wrong_module(call, bad):
    raises_naming(TypeError, ["module must be", type(bad).__name__], lambda: call(bad))


# -- 13: parse_worked_example names its argument, data, where no file is involved -------------------
@pytest.mark.parametrize("data", [None, 3, "x", [1]], ids=["None", "int", "str", "list"])
def test_parse_worked_example_names_data(data):
    message = raises_naming(WorkedExampleError, ["data", type(data).__name__],
                            lambda: parse_worked_example(data))
    assert "the file" not in message


def test_parse_worked_example_names_data_for_a_missing_key():
    message = raises_naming(WorkedExampleError, ["data", "'people'"], lambda: parse_worked_example({}))
    assert "the file" not in message


# -- 14: TwoKeyTask.sample checks its generator before using it ------------------------------------
@pytest.mark.parametrize("generator", [3, "g", 1.5, torch.tensor(0)], ids=["int", "str", "float", "tensor"])
def test_two_key_sample_checks_its_generator(generator):
    raises_naming(TypeError, ["generator must be a torch.Generator", type(generator).__name__],
                  lambda: TwoKeyTask().sample(4, generator=generator))


# -- 15: native_stderr_captured used out of order is a RuntimeError naming the misuse --------------
def test_native_stderr_captured_refuses_entering_twice():
    block = native_output.native_stderr_captured()
    block.__enter__()
    try:
        raises_naming(RuntimeError, ["native_stderr_captured", "entered twice"], block.__enter__)
    finally:
        block.__exit__(None, None, None)  # descriptor 2 given back


@pytest.mark.parametrize("entered", [False, True], ids=["never-entered", "exited-already"])
def test_native_stderr_captured_refuses_exit_out_of_order(entered):
    block = native_output.native_stderr_captured()
    if entered:
        with block:
            pass
    word = "exited twice" if entered else "without being entered"
    raises_naming(RuntimeError, ["native_stderr_captured", word], lambda: block.__exit__(None, None, None))


def test_native_stderr_captured_still_captures():
    import os

    with native_output.native_stderr_captured() as printed:
        os.write(2, b"from C++\n")
    assert "from C++" in printed.text
