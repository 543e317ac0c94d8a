"""Battery 32's check findings: sandbox.grading_preview names a check_key that names no check."""
from __future__ import annotations

import pytest

from course_utils.exercises.sandbox import grading_preview


@pytest.mark.parametrize("key", ["nonsense", 123, None, "lesson02.check_softmax_rowz"])
def test_grading_preview_names_a_check_key_that_names_no_check(key):
    code = "import torch\ndef f(x):\n    return torch.softmax(x, -1)\n"
    messages = grading_preview([code], "f", key)
    assert messages and any("check_key" in m for m in messages), messages


def test_grading_preview_with_a_right_check_key_still_previews():
    code = "def softmax_rows(x):\n    return x\n"
    assert grading_preview([code], "softmax_rows", "lesson02.check_softmax_rows") == []
