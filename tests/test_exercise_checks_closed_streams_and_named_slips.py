"""Battery 32's check findings: a trace function an answer installs is put back by every check
(2.1's probe run outside the time limit left it), a stream an answer closes is named and the kernel
gets a working one back, and sandbox.grading_preview names a check_key that names no check."""
from __future__ import annotations

import io
import sys

import numpy as np
import pytest
import torch

from course_utils.exercises import lesson01, lesson02
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


@pytest.mark.parametrize("name", ["stdout", "stderr"])
def test_a_stream_the_answer_closes_is_named_and_the_kernel_gets_a_working_one(name, monkeypatch):
    """The learner's own stream (not sys.__stdout__) closed by a right answer: named as
    tampered_with_check, and sys.__stdout__ takes its place so later prints work."""
    own = io.TextIOWrapper(io.BytesIO())
    monkeypatch.setattr(sys, name, own)

    def attend(scores, values):
        result = torch.softmax(scores, dim=-1) @ values
        getattr(sys, name).close()
        return result

    feedback = lesson01.check_attend(attend)
    now = getattr(sys, name)
    assert now is getattr(sys, f"__{name}__") and not now.closed
    assert feedback.status == "mistake" and feedback.mistake == "tampered_with_check", feedback
    assert f"closed sys.{name}" in feedback.message, feedback


def test_a_closed_stream_that_cannot_be_replaced_is_named_and_left(monkeypatch):
    """sys.stdout is sys.__stdout__ itself, closed: nothing to give back, named all the same."""
    own = io.TextIOWrapper(io.BytesIO())
    monkeypatch.setattr(sys, "stdout", own)
    monkeypatch.setattr(sys, "__stdout__", own)

    def attend(scores, values):
        sys.stdout.close()
        return torch.softmax(scores, dim=-1) @ values

    feedback = lesson01.check_attend(attend)
    assert sys.stdout is own
    assert feedback.mistake == "tampered_with_check" and "stays closed" in feedback.message, feedback


def test_a_replaced_stream_is_still_put_back_and_named(monkeypatch):
    own = io.StringIO()
    monkeypatch.setattr(sys, "stdout", own)

    def attend(scores, values):
        sys.stdout = io.StringIO()
        return torch.softmax(scores, dim=-1) @ values

    feedback = lesson01.check_attend(attend)
    assert sys.stdout is own and "replaced sys.stdout" in feedback.message, feedback
    assert "closed" not in feedback.message, feedback


@pytest.mark.parametrize("key", ["nonsense", 123, None, "lesson02.check_softmax_rowz"])
def test_grading_preview_names_a_check_key_that_names_no_check(key):
    code = "import torch\ndef f(x):\n    return torch.softmax(x, -1)\n"
    messages = grading_preview([code], "f", key)
    assert messages and any("check_key" in m for m in messages), messages


def test_grading_preview_with_a_right_check_key_still_previews():
    code = "def softmax_rows(x):\n    return x\n"
    assert grading_preview([code], "softmax_rows", "lesson02.check_softmax_rows") == []
