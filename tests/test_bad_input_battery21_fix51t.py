"""Battery 21 (b21b, issue 38), groups 4, 5, 6, 7 and 12: outputs_close on lying or non-strided
values, check_narrow_head's wording for plain containers, the outside grader on async and
generator answers, grade_notebook on non-dict nbgrader metadata, read_secrets on bad salts.
Each test fails before its fix."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from course_utils.exercises import outputs_close
from tests.bad_input_cases import raises_naming


class _LyingArray(np.ndarray):
    """An ndarray subclass whose comparisons say yes to anything."""

    def __eq__(self, other):
        return np.ones(self.shape, bool)

    def __array_function__(self, func, types, args, kwargs):
        if func.__name__ in ("allclose", "array_equal"):
            return True
        if func.__name__ == "isclose":
            return np.ones(np.shape(args[0]), bool)
        return super().__array_function__(func, types, args, kwargs)


class _LyingShape(np.ndarray):
    @property
    def shape(self):
        return (2,)


class _LyingTensor(torch.Tensor):
    """A Tensor subclass whose .numpy() hands back zeros."""

    @classmethod
    def __torch_function__(cls, func, types, args=(), kwargs=None):
        if getattr(func, "__name__", "") == "numpy":
            return np.zeros(2)
        return super().__torch_function__(func, types, args, kwargs or {})


@pytest.mark.parametrize("got, expected", [
    (np.ones(2).view(_LyingArray), np.zeros(2)),
    (np.ones(1).view(_LyingShape), np.ones(2)),
    (torch.ones(2).as_subclass(_LyingTensor), torch.zeros(2)),
], ids=["array_function", "shape", "torch_function"])
def test_outputs_close_a_lying_subclass_does_not_match(got, expected):
    assert outputs_close(got, expected) is False


def test_outputs_close_an_honest_subclass_still_matches():
    assert outputs_close(np.ones(2).view(_LyingShape), np.ones(2).view(_LyingArray).view(np.ndarray))
    assert outputs_close(torch.nn.Parameter(torch.ones(2)), torch.ones(2))


class _FakeTensor:
    @property
    def __class__(self):
        return torch.Tensor

    def __getattr__(self, name):
        return lambda *args, **kwargs: True


@pytest.mark.parametrize("which", ["got", "expected"])
def test_outputs_close_a_fake_class_is_named(which):
    args = (_FakeTensor(), torch.zeros(2)) if which == "got" else (torch.zeros(2), _FakeTensor())
    raises_naming(TypeError, [which, "_FakeTensor", "__class__"], lambda: outputs_close(*args))


@pytest.mark.parametrize("make, word", [
    (lambda: torch.zeros(2, 2).to_sparse(), "sparse_coo"),
    (lambda: torch.zeros(2, 2).to_sparse_csr(), "sparse_csr"),
    (lambda: torch.nested.nested_tensor([torch.zeros(2), torch.zeros(3)]), "nested"),
], ids=["coo", "csr", "nested"])
@pytest.mark.parametrize("which", ["got", "expected"])
def test_outputs_close_a_non_strided_tensor_is_named(make, word, which):
    args = (make(), torch.ones(2, 2)) if which == "got" else (torch.ones(2, 2), make())
    raises_naming(TypeError, [which, word, "dense"], lambda: outputs_close(*args))


@pytest.mark.parametrize("value, kind", [
    (("L1H0", "L1H0"), "tuple"), (["L1H0"], "list"), (np.array(["L1H0"]), "array"),
], ids=["tuple", "list", "ndarray"])
def test_narrow_head_calls_only_pandas_objects_pandas(value, kind):
    from course_utils.exercises import lesson06

    feedback = lesson06.check_narrow_head(lambda *args, **kwargs: value)
    assert not feedback.passed and feedback.mistake == "not_a_name"
    assert kind in feedback.message and "pandas" not in feedback.message, feedback.message


def test_narrow_head_still_names_a_pandas_index():
    import pandas as pd

    from course_utils.exercises import lesson06

    feedback = lesson06.check_narrow_head(lambda *args, **kwargs: pd.Index(["L1H0"]))
    assert feedback.mistake == "not_a_name" and "a pandas Index" in feedback.message


def _notebook_with_cell_metadata(metadata):
    import nbformat

    cell = nbformat.v4.new_code_cell("x = 1")
    cell.metadata = metadata
    return nbformat.from_dict({"cells": [nbformat.v4.new_markdown_cell("hi"), cell], "metadata": {},
                               "nbformat": 4, "nbformat_minor": 5})


@pytest.mark.parametrize("metadata, where, shown", [
    ({"nbgrader": 5}, "metadata['nbgrader']", "int 5"),
    ({"nbgrader": "grade"}, "metadata['nbgrader']", "str 'grade'"),
    ({"nbgrader": [1]}, "metadata['nbgrader']", "list [1]"),
    ({"nbgrader": None}, "metadata['nbgrader']", "NoneType None"),
    (7, "metadata", "int 7"),
], ids=["int", "str", "list", "none", "metadata_int"])
def test_grade_notebook_refuses_non_dict_nbgrader_metadata(metadata, where, shown):
    from course_utils.exercises import autograde

    nb = _notebook_with_cell_metadata(metadata)
    raises_naming(ValueError, ["nb", f"cells[1].{where}", shown, "dict"],
                  lambda: autograde.grade_notebook(nb, salt=None, solutions_dir=None))
    raises_naming(ValueError, [f"cells[1].{where}", shown], lambda: autograde.make_inert(nb))


def _secrets(tmp_path, salts, solutions_dir=None):
    import json

    from course_utils.exercises import autograde

    data = {"salts": salts} if solutions_dir is None else {"salts": salts, "solutions_dir": solutions_dir}
    (tmp_path / autograde.SECRETS_NAME).write_text(json.dumps(data))
    (tmp_path / autograde.SECRETS_NAME).chmod(0o600)  # owner-only, as write_secrets makes it
    return autograde.SECRETS_NAME


@pytest.mark.parametrize("salt, shown", [
    ("abc", "str 'abc'"), (True, "bool True"), (1.5, "float 1.5"), (0, "int 0"), (-3, "int -3"),
    (2**31, f"int {2**31}"), (None, "NoneType None"),
], ids=["str", "bool", "float", "zero", "negative", "too_big", "none"])
def test_read_secrets_names_a_bad_salt(tmp_path, salt, shown):
    from course_utils.exercises import autograde

    name = _secrets(tmp_path, {"02_single_head_attention": salt})
    raises_naming(ValueError, [name, "salts['02_single_head_attention']", shown, "int"],
                  lambda: autograde.read_secrets(tmp_path))


def test_read_secrets_names_an_unknown_lesson(tmp_path):
    from course_utils.exercises import autograde
    from course_utils.paths import REPO_ROOT

    name = _secrets(tmp_path, {"02_single_head_attention": 5, "99_nope": 7}, str(REPO_ROOT / "solutions"))
    raises_naming(ValueError, [name, "'99_nope'", "notebooks"], lambda: autograde.read_secrets(tmp_path))


def test_read_secrets_keeps_a_good_file(tmp_path):
    from course_utils.exercises import autograde
    from course_utils.paths import REPO_ROOT

    _secrets(tmp_path, {"02_single_head_attention": 5}, str(REPO_ROOT / "solutions"))
    assert autograde.read_secrets(tmp_path)["salts"] == {"02_single_head_attention": 5}


@pytest.mark.parametrize("code, words", [
    ("async def softmax_rows(scores):\n    return scores\n", ["coroutine", "async def"]),
    ("def softmax_rows(scores):\n    yield scores\n", ["generator", "yield"]),
    ("async def softmax_rows(scores):\n    yield scores\n", ["async generator", "yield"]),
], ids=["async_def", "generator", "async_generator"])
def test_the_grader_names_an_answer_whose_call_does_not_run(code, words):
    from course_utils.exercises import autograde

    feedback = autograde.grade_answer("lesson02", "check_softmax_rows", code, "softmax_rows", salt=None,
                                      solutions_dir=None, per_call=20)
    assert not feedback.passed
    assert all(w in feedback.message for w in words) and "tracemalloc" not in feedback.message, feedback


def test_to_plain_closes_a_coroutine_it_refuses():
    import warnings

    from course_utils.exercises import sandbox

    async def answer():
        return 1

    coroutine = answer()
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        with pytest.raises(sandbox.Refused, match="coroutine"):
            sandbox.to_plain(coroutine)
    assert coroutine.cr_frame is None  # closed: no "never awaited" warning when it is collected
