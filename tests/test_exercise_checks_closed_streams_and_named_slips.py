"""Battery 32's check findings: a trace function an answer installs is put back by every check
(2.1's probe run outside the time limit left it), and sandbox.grading_preview names a check_key
that names no check."""
from __future__ import annotations

import sys

import numpy as np
import pytest

from course_utils.exercises import lesson02
from course_utils.exercises.sandbox import grading_preview


def _tracer(*args):
    return None


def test_a_trace_function_the_answer_installs_is_put_back_by_the_softmax_rows_check():
    """2.1 runs a right answer once more outside the time limit (its tensor-output probe), after
    the limit put back the trace function: the answer's sys.settrace stayed installed."""
    def softmax_rows(scores):
        sys.settrace(_tracer)
        e = np.exp(scores - scores.max(axis=-1, keepdims=True))
        return e / e.sum(axis=-1, keepdims=True)

    before = sys.gettrace()
    try:
        feedback = lesson02.check_softmax_rows(softmax_rows)
        assert sys.gettrace() is before, feedback
    finally:
        sys.settrace(before)
    assert feedback.passed, feedback


@pytest.mark.parametrize("key", ["nonsense", 123, None, "lesson02.check_softmax_rowz"])
def test_grading_preview_names_a_check_key_that_names_no_check(key):
    code = "import torch\ndef f(x):\n    return torch.softmax(x, -1)\n"
    messages = grading_preview([code], "f", key)
    assert messages and any("check_key" in m for m in messages), messages


def test_grading_preview_with_a_right_check_key_still_previews():
    code = "def softmax_rows(x):\n    return x\n"
    assert grading_preview([code], "softmax_rows", "lesson02.check_softmax_rows") == []
