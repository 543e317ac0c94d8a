"""Battery 16b's findings in the exercises, the command-line helpers and the scripts, each
failing before its fix."""

from __future__ import annotations

import pytest
import torch

import course_utils.exercises.core as core
from course_utils.exercises import lesson01, lesson02, lesson03


def _returns_none(*args, **kwargs):
    return None


# -- 1: an answer that rebinds the check's own helpers (core's module globals) -------------------

@pytest.mark.parametrize("check", [lesson01.check_attend, lesson02.check_softmax_rows,
                                   lesson03.check_split_heads], ids=lambda c: c.__name__)
@pytest.mark.parametrize("helper", ["_same_method", "_torch_wrapped", "_put_back"])
def test_rebinding_the_checks_helpers_is_named_and_put_back(check, helper):
    original, close = getattr(core, helper), core.outputs_close

    def cheat(*args, **kwargs):
        setattr(core, helper, (lambda *a, **k: []) if helper == "_put_back" else (lambda *a, **k: True))
        core.outputs_close = lambda *a, **k: True
        return torch.zeros(1)

    try:
        feedback = check(cheat)
        assert not feedback.passed
        assert f"core.{helper}" in feedback.message and "core.outputs_close" in feedback.message
        assert getattr(core, helper) is original and core.outputs_close is close
        later = lesson01.check_attend(_returns_none)
        assert not later.passed and "None" in later.message
    finally:
        setattr(core, helper, original)
        core.outputs_close = close


# -- 3: sys.setrecursionlimit changed by an answer -----------------------------------------------

@pytest.mark.parametrize("check", [lesson01.check_attend, lesson02.check_attention_weights],
                         ids=lambda c: c.__name__)
def test_an_answers_recursion_limit_is_put_back(check):
    import sys

    before = sys.getrecursionlimit()

    def answer(*args, **kwargs):
        sys.setrecursionlimit(before + 54321)
        return torch.zeros(1)

    try:
        feedback = check(answer)
        assert not feedback.passed
        assert sys.getrecursionlimit() == before, f"recursion limit left at {sys.getrecursionlimit()}"
    finally:
        sys.setrecursionlimit(before)


# -- 2: a time-limit stop that left an entry in _CHECKS_INSIDE_ANSWERS ---------------------------

def _split_heads(x, h):  # a correct answer
    *lead, t, d = x.shape
    return x.reshape(*lead, t, h, d // h).transpose(-3, -2)


def test_an_entry_left_by_a_stopped_answer_does_not_block_later_checks():
    core._CHECKS_INSIDE_ANSWERS.append([])  # what the stop left while the answer was being left
    try:
        feedback = lesson03.check_split_heads(_split_heads)
        assert feedback.passed, feedback.message
        assert core._CHECKS_INSIDE_ANSWERS == []
    finally:
        core._CHECKS_INSIDE_ANSWERS.clear()


def test_a_check_called_by_an_answer_is_still_named():
    def answer(x, h):
        lesson01.check_attend(_returns_none)
        return _split_heads(x, h)

    feedback = lesson03.check_split_heads(answer)
    assert not feedback.passed and "check" in feedback.message
    assert core._CHECKS_INSIDE_ANSWERS == []


# -- 4: the outside grader named torch.Storage for torch.set_default_dtype -----------------------

def test_the_grader_names_a_changed_default_dtype_not_torch_storage():
    from course_utils.exercises import sandbox

    snapshot = sandbox._modules_and_classes()
    before = torch.get_default_dtype()
    torch.set_default_dtype(torch.float64 if before is not torch.float64 else torch.float32)
    try:
        changed = sandbox._changed(snapshot)
    finally:
        torch.set_default_dtype(before)
    assert changed is not None and "default dtype" in changed and "set_default_dtype" in changed
    assert "Storage" not in changed and str(before) in changed


def test_the_grader_still_names_a_replaced_module_attribute():
    from course_utils.exercises import sandbox

    snapshot = sandbox._modules_and_classes()
    original = torch.allclose
    torch.allclose = lambda *a, **k: True
    try:
        changed = sandbox._changed(snapshot)
    finally:
        torch.allclose = original
    assert changed == "`torch.allclose` changed"


# -- 5: safe_collect.py run as documented, the venv not activated --------------------------------

def test_safe_collect_runs_this_interpreters_nbgrader_without_the_venv_on_path(tmp_path):
    import subprocess
    import sys
    from pathlib import Path

    script = Path(__file__).resolve().parent.parent / "scripts" / "safe_collect.py"
    (tmp_path / "exchange" / "c" / "inbound").mkdir(parents=True)
    (tmp_path / "nbgrader_config.py").write_text("c = get_config()\n")  # run in a course folder
    env = {"PATH": "/usr/bin:/bin", "HOME": str(tmp_path)}
    done = subprocess.run([sys.executable, str(script), "01_x", "--exchange", str(tmp_path / "exchange"),
                           "--course", "c"], cwd=tmp_path, env=env, capture_output=True, text=True,
                          timeout=300)
    assert "Traceback" not in done.stderr, done.stderr[-800:]
    assert done.returncode == 0, (done.returncode, done.stderr[-800:])


# -- 7: cli.call blamed the program for a missing cwd --------------------------------------------

@pytest.mark.parametrize("kind", ["missing", "a file"])
def test_call_names_a_bad_cwd_not_the_program(tmp_path, kind):
    from course_utils import cli

    cwd = tmp_path / "nope"
    if kind == "a file":
        cwd.write_text("x")
    with pytest.raises(OSError) as info:
        cli.call(["true"], "p", cwd=str(cwd))
    assert "cwd" in str(info.value) and str(cwd) in str(info.value)
    assert "not found" not in str(info.value)


def test_call_gives_128_plus_the_signal_of_a_killed_child():
    from course_utils import cli

    assert cli.call(["sh", "-c", "kill -KILL $$"], "p") == 128 + 9


# -- 8: cli.run passed main's bool or out-of-range status through --------------------------------

@pytest.mark.parametrize(("returned", "error"), [(True, TypeError), (False, TypeError), (999, ValueError),
                                                 (-1, ValueError)])
def test_run_refuses_a_status_sys_exit_would_misread(returned, error):
    from course_utils import cli

    with pytest.raises(error) as info:
        cli.run(lambda argv: returned, [], "p")
    assert "main(argv) returned" in str(info.value) and repr(returned) in str(info.value)


@pytest.mark.parametrize("returned", [None, 0, 3, 255, "a message"])
def test_run_passes_a_status_sys_exit_reads_right(returned):
    from course_utils import cli

    assert cli.run(lambda argv: returned, [], "p") == returned


# -- 6: nbgrader_tools.py source with an extra COURSE_DIR ----------------------------------------

@pytest.mark.parametrize(("args", "named"), [
    (["c1", "c2"], "extra: c2"), (["c1", "c2", "c3"], "extra: c2 c3"), ([], "missing COURSE_DIR")])
def test_nbgrader_tools_source_names_what_is_extra_or_missing(tmp_path, args, named):
    import subprocess
    import sys
    from pathlib import Path

    script = Path(__file__).resolve().parent.parent / "scripts" / "nbgrader_tools.py"
    done = subprocess.run([sys.executable, str(script), "source", *args], cwd=tmp_path,
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 2 and named in done.stderr, done.stderr
    assert list(tmp_path.iterdir()) == []


# -- 9: sandbox.answer_source with a name that is not an identifier ------------------------------

@pytest.mark.parametrize("name", ["not an id", "", "1abc", "f()"])
def test_answer_source_names_a_name_that_is_not_an_identifier(name):
    from course_utils.exercises import sandbox

    with pytest.raises(ValueError) as info:
        sandbox.answer_source(["def f(): pass"], name)
    assert "name" in str(info.value) and "identifier" in str(info.value) and repr(name) in str(info.value)


def test_the_grader_answers_a_test_cell_whose_argument_is_not_a_name():
    import nbformat

    from course_utils.exercises import autograde

    answer = nbformat.v4.new_code_cell("def attend(q, k, v):\n    return q\n")
    answer.metadata["nbgrader"] = {"grade_id": "lesson01_attend", "solution": True, "grade": False}
    test = nbformat.v4.new_code_cell("lesson01.check_attend(1)")
    test.metadata["nbgrader"] = {"grade_id": "lesson01_attend_test", "grade": True, "solution": False,
                                 "points": 1}
    notebook = nbformat.v4.new_notebook(cells=[answer, test])
    results = autograde.grade_notebook(notebook, salt=None, solutions_dir=None)
    feedback = next(iter(results.values()))
    assert not feedback.passed and "identifier" in feedback.message and "'1'" in feedback.message


def test_the_answer_runs_on_the_package_the_grader_imported(tmp_path) -> None:
    """Graded from a checkout named by PYTHONPATH, the answer's process (``python -I``, which drops
    PYTHONPATH) imported the installed course_utils: other code than the grader's, or under
    bubblewrap (which shows only the grader's package folder) none, so every honest answer got
    "No module named 'course_utils'" (battery 16, re-run). It imports the grader's package now."""
    import shutil
    import subprocess
    import sys
    from pathlib import Path

    root = Path(__file__).resolve().parent.parent
    shutil.copytree(root / "course_utils", tmp_path / "course_utils",
                    ignore=shutil.ignore_patterns("__pycache__"))
    child = tmp_path / "course_utils" / "exercises" / "sandbox.py"
    child.write_text(child.read_text() + (  # this copy's answer process says which code it is
        "\n\ndef _child(*args):\n"
        "    sys.stderr.write('refused: the answer ran on the grader copy\\n')\n"
        "    sys.stderr.flush()\n"
        "    os._exit(REFUSED_EXIT)\n"))
    code = ("from course_utils.exercises import autograde\n"
            "print(autograde.grade_answer('lesson03', 'check_parameter_count', "
            "'def parameter_count(d_model, h, bias=True):\\n    return 4 * d_model * d_model\\n', "
            "'parameter_count', salt=None, solutions_dir=None).message)")
    done = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, capture_output=True, text=True,
                          env={"PATH": "/usr/bin:/bin", "PYTHONPATH": str(tmp_path)}, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    assert "the answer ran on the grader copy" in done.stdout, done.stdout + done.stderr[-2000:]
