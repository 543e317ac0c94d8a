"""Student versions: solutions are blanked cleanly, and no later cell leans on them.

The lessons' rule is that an unfinished exercise must not break the lesson: after an
exercise cell, only the check may call the learner's function (or code that runs only once the
check has passed it: `if check_x(fn).passed:`); everything else uses course_utils' reference
code. This is checked statically on every notebook.
"""

from __future__ import annotations

import ast
import sys
from pathlib import Path

import nbformat
import pytest

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "scripts"))
from notebook_tools import student_version  # noqa: E402

NOTEBOOKS = sorted((ROOT / "notebooks").glob("[0-9][0-9]_*.ipynb"))


def _code_cells(nb) -> list[str]:
    return [c.source for c in nb.cells if c.cell_type == "code"]


def test_student_version_blanks_solutions_and_keeps_indentation():
    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(
        "def f(x):\n    ### BEGIN SOLUTION\n    y = x + 1\n    return y\n    ### END SOLUTION\n\ncheck(f)"
    )])
    out = student_version(nb).cells[0].source
    assert "y = x + 1" not in out
    assert '    raise NotImplementedError("your code here")\n' in out
    assert out.endswith("check(f)")
    compile(out, "cell", "exec")


def _solution_functions(source: str) -> set[str]:
    """Names of functions whose body holds a solution block."""
    names = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.FunctionDef):
            body = ast.get_source_segment(source, node) or ""
            if "### BEGIN SOLUTION" in body:
                names.add(node.name)
    return names


# Helpers that take a learner's function and, like a check, never raise: whatever the function
# does becomes a line of their report (tests/test_your_attention.py holds this).
NEVER_RAISING = {"run_with_your_attention"}


def _uses_outside_checks(source: str, names: set[str]) -> list[str]:
    """Loads of ``names`` that are not an argument of a check call (or of a helper that never
    raises, :data:`NEVER_RAISING`)."""
    tree = ast.parse(source)
    allowed = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Call):
            func = node.func
            func_name = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", "")
            if func_name.startswith("check") or func_name in NEVER_RAISING:
                allowed.update(id(arg) for arg in node.args)
    # a function of this cell handed only to such calls (a wrapper of the learner's function) may
    # call the learner's function inside its body
    handed = {node.id for node in ast.walk(tree) if isinstance(node, ast.Name) and id(node) in allowed}
    inside = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.FunctionDef) and node.name in handed:
            inside.update(id(n) for n in ast.walk(node))
    # the body of `if check_x(fn).passed:` may call fn: it runs only once fn has passed its check
    # (lesson 07's GQA cell, which copies K/V with the learner's repeat_kv when it passes 7.1)
    for node in ast.walk(tree):
        if isinstance(node, ast.If):
            passed = {arg.id for call in ast.walk(node.test) if isinstance(call, ast.Call)
                      and (getattr(call.func, "attr", "") or getattr(call.func, "id", "")).startswith("check")
                      for arg in call.args if isinstance(arg, ast.Name)}
            inside.update(id(n) for stmt in node.body for n in ast.walk(stmt)
                          if isinstance(n, ast.Name) and n.id in passed)
    bad = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Name) and node.id in names and isinstance(node.ctx, ast.Load):
            if id(node) not in allowed and id(node) not in inside:
                bad.append(node.id)
    return bad


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.name)
def test_later_cells_never_use_a_learners_solution(path):
    nb = nbformat.read(path, as_version=4)
    learner_functions: set[str] = set()
    for source in _code_cells(nb):
        try:
            new = _solution_functions(source)
        except SyntaxError:  # IPython magics: not an exercise cell
            continue
        # within the exercise cell itself, only the check may call the function
        bad = _uses_outside_checks(source, learner_functions | new)
        assert not bad, f"{path.name}: a cell uses the learner's {bad} outside a check"
        learner_functions |= new


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.name)
def test_student_version_compiles(path):
    nb = student_version(nbformat.read(path, as_version=4))
    for source in _code_cells(nb):
        if source.lstrip().startswith(("%", "!")):
            continue
        compile(source, path.name, "exec")
        assert "### BEGIN SOLUTION" not in source


def test_a_learners_function_may_run_only_under_its_passed_check():
    """The static rule itself: a call under `if check(fn).passed:` is allowed, one beside it is
    not, and one under an `if` on anything else is not."""
    names, call = {"repeat_kv"}, "y = repeat_kv(k, 8)\n"
    assert _uses_outside_checks("if check_repeat_kv(repeat_kv).passed:\n    " + call, names) == []
    assert _uses_outside_checks("if check_repeat_kv(repeat_kv).passed:\n    pass\n" + call,
                                names) == ["repeat_kv"]
    assert _uses_outside_checks("if ready:\n    " + call, names) == ["repeat_kv"]
    assert _uses_outside_checks("if check_other(f).passed:\n    " + call, names) == ["repeat_kv"]
