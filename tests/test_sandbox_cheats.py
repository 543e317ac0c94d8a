"""The outside grader against the third instructor trial's findings (INSTRUCTORS.md, "Grading
outside the notebook"): an honest answer that uses an earlier cell's helper keeps its points,
and each cheat the trial found gets none."""

from __future__ import annotations

import ast

import pytest

from course_utils.exercises import autograde, sandbox

HEAD = "import math\nimport numpy as np\nimport torch\nimport torch.nn.functional as F\n"


def _grade(lesson, check, cells, name, **kwargs):
    code = sandbox.answer_source(cells, name, len(cells) - 1)
    return autograde.grade_answer(lesson, check, code, name, salt=None, solutions_dir=None, **kwargs)


# -- 1. an honest answer with a decorator from an earlier cell ---------------------------------
DECORATED = [HEAD, "def checked(fn):\n    return fn",
             "@checked\ndef repeat_kv(kv, num_heads):\n"
             "    return kv.repeat_interleave(num_heads // kv.shape[1], dim=1)"]


def test_the_answer_comes_after_the_helpers_of_earlier_cells_it_uses():
    code = sandbox.answer_source(DECORATED, "repeat_kv", answer_cell=2)
    names = [n.name for n in ast.parse(code).body if isinstance(n, ast.FunctionDef)]
    assert names == ["checked", "repeat_kv"], code


def test_an_honest_answer_decorated_by_an_earlier_cells_function_scores_in_full():
    feedback = _grade("lesson07", "check_repeat_kv", DECORATED, "repeat_kv")
    assert feedback.passed, feedback
