"""Battery 10's findings on the exercise checks (issue 38, findings 1, 2, 7 and 5's exercise
helpers): a check never rolls back the learner's notebook, does not say "correct" for an answer
that replays the shipped stored answers, and treats every int answer by one rule."""

from __future__ import annotations

import sys
import types

import numpy as np
import pytest
import torch

from course_utils.exercises import core, lesson02

# -- finding 1: np.allclose replaced by a notebook function ---------------------------------------

_NOTEBOOK = '''
def my_close(a, b, **kwargs):
    return bool(np.all(np.abs(np.asarray(a) - np.asarray(b)) < 1e-6))

np.allclose = my_close            # a learner experimenting with their own allclose

def softmax_rows(s):              # a first, wrong try
    return s

first = lesson02.check_softmax_rows(softmax_rows)

def softmax_rows(s):              # the fix
    e = np.exp(s - s.max(axis=-1, keepdims=True))
    return e / e.sum(axis=-1, keepdims=True)

second = lesson02.check_softmax_rows(softmax_rows)
'''


def test_a_notebook_allclose_does_not_make_checks_roll_back_the_notebook(monkeypatch):
    notebook = types.ModuleType("__main__")
    namespace = notebook.__dict__
    namespace.update(np=np, lesson02=lesson02)
    monkeypatch.setitem(sys.modules, "__main__", notebook)
    original = np.allclose
    try:
        exec(compile(_NOTEBOOK, "<cell>", "exec"), namespace)
    finally:
        np.allclose = original
    fixed = namespace["softmax_rows"]
    assert fixed(np.array([[0.0, 0.0]])).tolist() == [[0.5, 0.5]]  # the redefinition survived
    assert "numpy.allclose" in namespace["first"].message, namespace["first"]
    second = namespace["second"]
    assert second.passed, second
    assert "softmax_rows" not in second.message and "__main__" not in second.message, second


def test_no_guarded_namespace_is_the_notebooks(monkeypatch):
    notebook = types.ModuleType("__main__")
    exec("def my_close(a, b, **kwargs):\n    return True\n", notebook.__dict__)
    monkeypatch.setitem(sys.modules, "__main__", notebook)
    monkeypatch.setitem(sys.modules, "course_utils._notebook_alias", notebook)  # even under a course name
    monkeypatch.setattr(np, "allclose", notebook.__dict__["my_close"])
    spaces = core._guarded_namespaces()
    assert all(live is not notebook.__dict__ for _, _, live, _ in spaces)
    assert any(label == "numpy._core.numeric" or label == "numpy.core.numeric" for label, *_ in spaces)


# -- finding 2: an answer that replays the shipped stored answers ---------------------------------

_LOOKUP = '''
from course_utils.exercises import answers
S = answers.stored("lesson02", "SOFTMAX_ROWS")
CASES_ = [answers.decode(c["args"]) for c in S["cases"]]
EXP_ = [answers.decode(e) for e in S["expected"]]
'''
_LOOKUP_ANSWER = '''
def fn(s):  # no computation: the stored output whose stored input is this one
    for args, expected in zip(CASES_, EXP_):
        if args[0].shape == s.shape and (args[0] == s).all():
            return expected
    return EXP_[0]
'''
_REPLAY = '''
import itertools
from course_utils.exercises import answers
OUTS = itertools.cycle([answers.decode(e) for e in answers.stored("lesson03", "PARAMETER_COUNT")["expected"]])
'''
_REPLAY_ANSWER = '''
def fn(*args, **kwargs):  # the stored outputs in call order
    return next(OUTS)
'''


class _Shell:
    def __init__(self, cells):
        self.user_ns = {"In": cells}
        self.user_global_ns = self.user_ns


def _kernel(monkeypatch, cells):
    """Pretend to be an IPython kernel whose input history is ``cells``."""
    ipython = types.ModuleType("IPython")
    shell = _Shell(cells)
    ipython.get_ipython = lambda: shell
    monkeypatch.setitem(sys.modules, "IPython", ipython)


def test_a_lookup_of_the_stored_answers_read_in_an_earlier_cell_is_not_graded(monkeypatch):
    namespace: dict = {}
    exec(_LOOKUP + _LOOKUP_ANSWER, namespace)
    _kernel(monkeypatch, ["", _LOOKUP, _LOOKUP_ANSWER, "lesson02.check_softmax_rows(fn)"])
    feedback = lesson02.check_softmax_rows(namespace["fn"])
    assert not feedback.passed, feedback
    assert feedback.message.startswith("not graded: this kernel read the stored answers"), feedback
    assert "`answers`" in feedback.message


def test_a_replay_of_the_stored_outputs_in_call_order_is_not_graded(monkeypatch):
    from course_utils.exercises import lesson03

    namespace: dict = {}
    exec(_REPLAY + _REPLAY_ANSWER, namespace)
    _kernel(monkeypatch, ["", _REPLAY + _REPLAY_ANSWER, "lesson03.check_parameter_count(fn)"])
    feedback = lesson03.check_parameter_count(namespace["fn"])
    assert not feedback.passed and feedback.message.startswith("not graded"), feedback


def test_an_answer_holding_the_store_reader_is_not_graded_outside_ipython():
    from course_utils.exercises import answers, lesson03

    expected = [answers.decode(e) for e in answers.stored("lesson03", "PARAMETER_COUNT")["expected"]]
    outputs = iter(expected * 4)

    def fn(*args, reader=answers.decode, **kwargs):  # holds the reader; no history, no call of it
        return next(outputs)

    feedback = lesson03.check_parameter_count(fn)
    assert not feedback.passed and feedback.message.startswith("not graded"), feedback


@pytest.mark.parametrize("cell", ["answers = [1, 2]", "for answers in range(3):\n    pass",
                                  "note = 'my answers/notes'"])
def test_a_learners_own_variable_called_answers_is_no_read_of_the_store(monkeypatch, cell):
    """The kernel rule counts the store module, its readers and its files, not the word: an honest
    learner who calls a list `answers` (or writes the word in a string) is graded as usual."""
    from course_utils.exercises import lesson01, sandbox

    assert sandbox.store_reads([cell]) == []
    _kernel(monkeypatch, ["", cell, "lesson01.check_attend(attend)"])
    feedback = lesson01.check_attend(lambda scores, values: torch.softmax(scores, dim=-1) @ values)
    assert feedback.passed, feedback


def test_the_kernel_rule_is_the_graders_and_the_lessons_do_not_trip_it():
    from course_utils.exercises import sandbox

    broken = sandbox.rules_broken(_REPLAY + _REPLAY_ANSWER, "lesson03.check_parameter_count")
    assert "`answers` (the course's stored answers)" in broken, broken
    assert sandbox.store_reads([_LOOKUP]) and sandbox.store_reads(["open('answers/lesson02.pt', 'rb')"])
    import json
    from pathlib import Path

    root = Path(__file__).resolve().parent.parent
    for notebook in sorted((root / "notebooks").glob("*.ipynb")) + sorted((root / "student").glob("*.ipynb")):
        cells = ["".join(c["source"]) for c in json.loads(notebook.read_text())["cells"]
                 if c["cell_type"] == "code"]
        assert sandbox.store_reads(cells) == [], notebook.name


# -- finding 7: one rule for every int answer ------------------------------------------------------

@pytest.mark.parametrize("key", ["lesson03.PARAMETER_COUNT", "lesson03.SCORE_MACS", "lesson07.CACHE_BYTES"])
@pytest.mark.parametrize("wrap", [torch.tensor, np.array], ids=["0-d tensor", "0-d array"])
def test_a_tensor_where_the_answer_is_an_int_is_named_in_every_int_exercise(key, wrap):
    import solutions
    from course_utils.exercises import all_exercises

    lesson, name = key.split(".")
    reference = solutions.solutions_of(lesson).REFERENCES[name]
    exercise = all_exercises()[key]
    feedback = exercise.check_trusted(lambda *a, **k: wrap(reference(*a, **k)))
    assert feedback.mistake == "returned_tensor", feedback
    assert "the value is right but you returned a" in feedback.message and "not an int" in feedback.message
    assert exercise.check_trusted(lambda *a, **k: np.int64(reference(*a, **k))).passed  # NumPy ints are ints


# -- finding 5: the exercises' helpers name a bad argument -----------------------------------------

def _helper_calls():
    from course_utils.exercises import answers, raising, sandbox
    from course_utils.exercises.cases import Case

    return [
        ("read_store(5)", lambda: answers.read_store(5), TypeError, "path"),
        ("read_store(None)", lambda: answers.read_store(None), TypeError, "path"),
        ("decode_case(None)", lambda: answers.decode_case(None), TypeError, "data"),
        ("decode_case(5)", lambda: answers.decode_case(5), TypeError, "data"),
        ("describe_inputs(depth='3')", lambda: answers.describe_inputs(1, depth="3"), TypeError, "depth"),
        ("describe_inputs(depth=-1)", lambda: answers.describe_inputs(1, depth=-1), ValueError, "depth"),
        ("failed_operation(None, case)", lambda: raising.failed_operation(None, Case((1,))), TypeError, "fn"),
        ("failed_operation(fn, None)", lambda: raising.failed_operation(len, None), TypeError, "case"),
        ("requested_shape(5)", lambda: raising.requested_shape(5), TypeError, "args"),
        ("accept(depth='3')", lambda: sandbox.accept(1, depth="3"), TypeError, "depth"),
        ("to_plain(depth='3')", lambda: sandbox.to_plain(1, depth="3"), TypeError, "depth"),
        ("answer_source(cells=5)", lambda: sandbox.answer_source(5, "f"), TypeError, "cells"),
        ("answer_source(cells=None)", lambda: sandbox.answer_source(None, "f"), TypeError, "cells"),
        ("answer_source(name=None)", lambda: sandbox.answer_source(["def f():\n    pass\n"], None),
         TypeError, "name"),
    ]


@pytest.mark.parametrize("index", range(14), ids=[c[0] for c in _helper_calls()])
def test_the_exercise_helpers_name_a_bad_argument(index):
    label, call, kind, name = _helper_calls()[index]
    with pytest.raises(kind) as raised:
        call()
    assert str(raised.value).startswith(name), (label, raised.value)


def test_a_notebook_class_put_into_torch_nn_is_not_guarded(monkeypatch):
    notebook = types.ModuleType("__main__")
    exec("import torch\nclass MyLayer(torch.nn.Module):\n    pass\n", notebook.__dict__)
    layer = notebook.__dict__["MyLayer"]
    monkeypatch.setattr(torch.nn, "MyLayer", layer, raising=False)
    monkeypatch.setattr(torch, "Tensor", layer)  # (put back by monkeypatch, as a check would)
    assert all(owner is not layer for _, owner, _, _ in core._guarded_namespaces())
