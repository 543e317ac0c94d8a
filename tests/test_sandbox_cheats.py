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


# -- 2. N7: an answer nested too deep for the parser -------------------------------------------
def _notebook(answers):
    """An nbgrader notebook of lesson 07: imports, then per (check, name, code) a solution cell
    and its test cell."""
    import nbformat

    cells = [nbformat.v4.new_code_cell(HEAD)]
    for check, name, code in answers:
        grade_id = "lesson07_" + check.removeprefix("check_")
        cells.append(nbformat.v4.new_code_cell(code, metadata={"nbgrader": {
            "solution": True, "grade": False, "grade_id": grade_id}}))
        cells.append(nbformat.v4.new_code_cell(f"lesson07.{check}({name})", metadata={"nbgrader": {
            "solution": False, "grade": True, "grade_id": grade_id + "_test", "points": 1}}))
    return nbformat.v4.new_notebook(cells=cells)


DEEP = "def cache_bytes(num_layers, batch, num_heads, num_kv_heads, d_head, seq_len, bits):\n    return "


@pytest.mark.parametrize("depth", [30_000, 600])
def test_an_answer_too_deep_to_parse_scores_zero_and_the_rest_is_graded(depth):
    nb = _notebook([("check_cache_bytes", "cache_bytes", DEEP + "-" * depth + "1"),
                    ("check_repeat_kv", "repeat_kv", DECORATED[2].replace("@checked\n", ""))])
    results = autograde.grade_notebook(nb, salt=None, solutions_dir=None)
    deep, honest = results["lesson07_cache_bytes_test"], results["lesson07_repeat_kv_test"]
    assert not deep.passed and "nested too deep" in deep.message, deep
    assert honest.passed, honest


# -- 3. N4/N5/N12: the sandbox shows an allow-list of folders -----------------------------------
@pytest.mark.skipif(sandbox.isolation() != "bubblewrap", reason="bubblewrap cannot make a sandbox here")
def test_the_sandbox_shows_only_the_interpreter_the_environment_and_the_package(tmp_path):
    import os
    from pathlib import Path

    from course_utils.exercises import lesson03

    root = Path(sandbox.__file__).resolve().parents[2]  # the clone around course_utils
    sibling = root.parent / f"planted-by-test-{os.getpid()}"  # another clone beside this one (N5)
    sibling.mkdir()
    try:
        (sibling / "solutions.py").write_text("SECRET = 1\n")
        course = tmp_path / "course"
        course.mkdir()
        probe = ("from pathlib import Path\n"
                 "def score_macs(*a):\n"
                 "    read = []\n"
                 f"    for path in ({str(sibling / 'solutions.py')!r}, {str(root / 'solutions' / 'lesson03.py')!r},\n"
                 f"                 {str(root / 'pyproject.toml')!r}, {str(course)!r}):\n"
                 "        try:\n"
                 "            read.append(len(Path(path).read_bytes()))\n"
                 "        except OSError as exc:\n"
                 "            read.append(type(exc).__name__)\n"
                 "    return (read, sorted(p.name for p in Path('/').iterdir()),\n"
                 f"            sorted(p.name for p in Path({str(root)!r}).iterdir()))\n")
        run = sandbox.run_answer(probe, "score_macs", "lesson03.check_score_macs",
                                 [lesson03.SCORE_MACS.make_cases()[:1]], hide=[course], sandbox=True)
        assert run.lost is None and run.defined is None, run
        outcome = run.outcomes[0][0]
        assert outcome.kind == "value", outcome
        read, top, in_clone = outcome.value
        assert read == ["FileNotFoundError"] * 4, read
        shown = set(sandbox.visible_paths())
        allowed = {p.parts[1] for p in shown} | {"proc", "dev", "tmp"}
        allowed |= {d for d in sandbox.SYSTEM_DIRS if (Path("/") / d).exists()}
        assert set(top) <= allowed and {"proc", "usr"} <= set(top), top
        assert "solutions" in os.listdir(root) and "solutions" not in in_clone, in_clone
        assert set(in_clone) <= {p.parts[len(root.parts)] for p in shown if root in p.parents}, in_clone
    finally:
        for path in sibling.iterdir():
            path.unlink()
        sibling.rmdir()
