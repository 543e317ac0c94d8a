"""Battery 10's findings on the exercise checks (issue 38, findings 1, 2, 7 and 5's exercise
helpers): a check never rolls back the learner's notebook, does not say "correct" for an answer
that replays the shipped stored answers, and treats every int answer by one rule."""

from __future__ import annotations

import sys
import types

import numpy as np

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
