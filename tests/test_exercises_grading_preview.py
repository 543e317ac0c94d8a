"""While learning, a correct answer that the outside grader would not run as the kernel did is
told so: it reads a variable set in another cell, or uses what the grader refuses."""

from __future__ import annotations

import subprocess
import sys
import textwrap

import pytest

from course_utils.exercises import lesson02, sandbox

CHECK = "lesson02.check_softmax_rows"
IMPORTS = "import numpy as np\n"
RIGHT = textwrap.dedent("""
    def softmax_rows(scores):
        e = np.exp(scores - scores.max(axis=-1, keepdims=True))
        return e / e.sum(axis=-1, keepdims=True)
""")
WITH_A_VARIABLE = textwrap.dedent("""
    def softmax_rows(scores):
        e = np.exp(scores - scores.max(axis=AXIS, keepdims=True))
        return e / e.sum(axis=AXIS, keepdims=True)
""")


def test_functions_and_imports_from_other_cells_are_no_problem():
    helper = "def row_max(s):\n    return s.max(axis=-1, keepdims=True)\n"
    uses_helper = RIGHT.replace("scores.max(axis=-1, keepdims=True)", "row_max(scores)")
    assert sandbox.grading_preview([IMPORTS, helper, uses_helper], "softmax_rows", CHECK) == []
    assert sandbox.grading_preview([IMPORTS, "from math import inf\n", RIGHT], "softmax_rows", CHECK) == []


def test_a_variable_or_a_lambda_from_another_cell_is_named():
    problems = sandbox.grading_preview([IMPORTS, "AXIS = -1\n", WITH_A_VARIABLE], "softmax_rows", CHECK)
    assert len(problems) == 1 and "`AXIS`" in problems[0] and "outside any function" in problems[0]
    lam = RIGHT.replace("np.exp(", "exp(")
    problems = sandbox.grading_preview([IMPORTS, "exp = lambda x: np.exp(x)\n", lam], "softmax_rows", CHECK)
    assert len(problems) == 1 and "`exp`" in problems[0]


def test_a_name_the_grader_refuses_is_named():
    twisted = RIGHT.replace("np.exp(", "getattr(np, 'exp')(")
    problems = sandbox.grading_preview([IMPORTS, twisted], "softmax_rows", CHECK)
    assert len(problems) == 1 and "refuses" in problems[0] and "`getattr`" in problems[0]


def test_an_answer_not_defined_by_def_is_named():
    problems = sandbox.grading_preview([IMPORTS, "softmax_rows = lambda s: s\n"], "softmax_rows", CHECK)
    assert problems == ["no function `softmax_rows` is defined before the test cell"]


def test_the_note_joins_a_correct_verdict_only_with_the_cells_given():
    namespace: dict = {}
    exec(IMPORTS + "AXIS = -1\n" + WITH_A_VARIABLE, namespace)
    answer = namespace["softmax_rows"]
    exercise = lesson02.SOFTMAX_ROWS
    assert exercise._check_key() == CHECK
    test_cell = "# the check\nlesson02.check_softmax_rows(softmax_rows).assert_passed()"
    note = exercise._grading_note(answer, [IMPORTS, "AXIS = -1\n", WITH_A_VARIABLE, test_cell])
    assert note is not None and "`AXIS`" in note
    assert note.startswith("⚠️ But at grading this answer would score 0")
    assert exercise._grading_note(answer, None) is None  # outside IPython: nothing to read
    # a history that does not end in this exercise's check call is not the notebook's: no guess
    assert exercise._grading_note(answer, [IMPORTS, "AXIS = -1\n", WITH_A_VARIABLE, "x = 1"]) is None
    other = "lesson02.check_attention_weights(softmax_rows)"
    assert exercise._grading_note(answer, [IMPORTS, "AXIS = -1\n", WITH_A_VARIABLE, other]) is None
    assert lesson02.check_softmax_rows(answer).passed  # not IPython here: the verdict alone


# Both IPython scenarios run in one fresh process (torch and IPython are imported once): the
# shell keeping no history first, exactly as in a process of its own; then that shell is
# dropped and a new one made, whose history holds only its own cells (the first stored none).
SHELLS = textwrap.dedent(f"""
    from IPython.core.interactiveshell import InteractiveShell
    shell = InteractiveShell.instance()
    for cell in [{IMPORTS!r}, "from course_utils.exercises import lesson02", {RIGHT!r},
                 "lesson02.check_softmax_rows(softmax_rows).assert_passed()"]:
        assert shell.run_cell(cell).success
    print("=== with history", flush=True)
    InteractiveShell.clear_instance()
    shell = InteractiveShell.instance()
    for cell in [{IMPORTS!r}, "from course_utils.exercises import lesson02", "AXIS = -1",
                 {WITH_A_VARIABLE!r}, "lesson02.check_softmax_rows(softmax_rows).assert_passed()",
                 {RIGHT!r}, "lesson02.check_softmax_rows(softmax_rows).assert_passed()"]:
        assert shell.run_cell(cell, store_history=True).success
""")


@pytest.fixture(scope="module")
def shells() -> dict[str, str]:
    """What each IPython scenario printed: "no history" and "history"."""
    out = subprocess.run([sys.executable, "-c", SHELLS], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.count("=== with history\n") == 1, out.stdout
    without, with_history = out.stdout.split("=== with history\n")
    return {"no history": without, "history": with_history}


def test_in_an_ipython_kernel_the_check_reads_the_cells_run_so_far(shells):
    """A real IPython shell, in a fresh process (the shell is a process-wide singleton)."""
    verdicts = [line for line in shells["history"].splitlines() if "2." in line and ":" in line]
    assert len(verdicts) == 2, shells["history"]
    assert "correct" in verdicts[0] and "score 0" in verdicts[0] and "`AXIS`" in verdicts[0]
    assert "correct" in verdicts[1] and "score 0" not in verdicts[1]


def test_a_history_without_the_answer_says_nothing(shells):
    """A shell that keeps no history (store_history=False) must not warn a right answer."""
    out = shells["no history"]
    assert "correct" in out and "score 0" not in out, out
