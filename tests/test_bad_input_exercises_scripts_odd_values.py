"""Odd values given to the exercises, the scripts and the small modules (exercises/, scripts/,
cli.py, parallel.py): values whose repr, str or len raises, scripts run without the course's
packages, exceptions whose str raises, stored answers decode never wrote (batteries 30 and 31)."""

from __future__ import annotations

import subprocess
import sys

import pytest
from bad_input_cases import ROOT, SCRIPTS, import_script

from tests.bad_input_cases import BadRepr, LyingLen

load_cli = import_script("course_cli").load_cli

cli = load_cli()


# --- scripts run by a Python without the course's packages (battery 30b) -------------------------

@pytest.mark.parametrize("script, args, command", [
    ("publish.py", ["--check"], "python3 course.py publish"),
    ("nbgrader_tools.py", ["table"], "python3 course.py release"),
    ("exercise_answers.py", ["check"], ".venv/bin/python scripts/exercise_answers.py"),
    ("notebook_tools.py", ["student", "OUT", "notebooks/00_start_here.ipynb"],
     ".venv/bin/python scripts/notebook_tools.py"),
    ("student_tree.py", ["OUT"], "python3 course.py student-tree"),
])
def test_scripts_without_the_course_packages_say_so_on_one_line(tmp_path, script, args, command):
    """Run by a Python that cannot import nbformat (here: -I -S, no site-packages) each script
    ended in a bare ModuleNotFoundError traceback; now one line names the module, the Python
    that ran and the command to use, exit 2, nothing written."""
    args = [str(tmp_path / "out") if a == "OUT" else a for a in args]
    p = subprocess.run([sys.executable, "-I", "-S", str(SCRIPTS / script), *args], cwd=ROOT,
                       capture_output=True, text=True, timeout=120)
    assert p.returncode == 2, p.stderr
    assert "Traceback" not in p.stderr
    assert len(p.stderr.strip().splitlines()) == 1, p.stderr
    assert "'nbformat'" in p.stderr and sys.executable in p.stderr and command in p.stderr
    assert p.stderr.startswith(f"{script}: ") and "nothing was written" in p.stderr
    assert not (tmp_path / "out").exists()


def test_missing_modules_problem_is_none_when_present_and_checks_needs():
    assert cli.missing_modules_problem("publish.py", ("sys", "json")) is None
    problem = cli.missing_modules_problem("version_matrix.py", ("no_such_module_61b",))
    assert "'no_such_module_61b'" in problem and "python3 course.py setup" in problem
    with pytest.raises(TypeError, match="needs must be a tuple of module names"):
        cli.missing_modules_problem("publish.py", "nbformat")


# --- a value whose repr/str raise, a list whose __len__ raises (battery 30a, F10/F11) ------------

KEY = "lesson02.check_softmax_rows"


def _calls():
    from course_utils import parallel
    from course_utils.exercises import answers, autograde, lesson02, raising, sandbox
    from course_utils.exercises.cases import Case
    from course_utils.exercises.core import Exercise

    cases = autograde.cases_of(lesson02.SOFTMAX_ROWS)
    code = "def softmax_rows(x):\n    return x\n"
    run = lambda **kw: sandbox.run_answer(**{"code": code, "name": "softmax_rows", "check_key": KEY,  # noqa: E731
                                             "case_sets": [cases], "per_call": 30, **kw})
    b = BadRepr()
    return {
        "Case label": ("label", lambda: Case(label=b)),
        "Exercise title": ("title", lambda: Exercise(title=b, make_cases=lambda: [])),
        "Exercise make_cases": ("make_cases", lambda: Exercise(title="t", make_cases=b)),
        "DiagnosingExercise title": ("title",
                                     lambda: raising.DiagnosingExercise(title=b, make_cases=lambda: [])),
        "DiagnosingExercise make_cases": ("make_cases",
                                          lambda: raising.DiagnosingExercise(title="t", make_cases=b)),
        "stored lesson": ("lesson", lambda: answers.stored(b, "x")),
        "stored name": ("name", lambda: answers.stored("lesson02", b)),
        "same_raise stored": ("stored", lambda: answers.same_raise(b, "ValueError", "m")),
        "encode_case case": ("case", lambda: answers.encode_case(b)),
        "decode_case data": ("data", lambda: answers.decode_case(b)),
        "cases_signature cases": ("cases", lambda: answers.cases_signature(b)),
        "cases_signature raising len": ("cases", lambda: answers.cases_signature(LyingLen(cases))),
        "answer_source name": ("name", lambda: sandbox.answer_source([code], b)),
        "answer_source answer_cell": ("answer_cell", lambda: sandbox.answer_source([code], "f", b)),
        "answer_source raising len": ("cells", lambda: sandbox.answer_source(LyingLen([code]), "f")),
        "is_stub code": ("code", lambda: sandbox.is_stub(b, "f")),
        "is_stub name": ("name", lambda: sandbox.is_stub(code, b)),
        "store_reads cells": ("cells", lambda: sandbox.store_reads(b)),
        "store_reads raising len": ("cells", lambda: sandbox.store_reads(LyingLen([code]))),
        "rules_broken code": ("code", lambda: sandbox.rules_broken(b, KEY)),
        "rules_broken check_key": ("check_key", lambda: sandbox.rules_broken(code, b)),
        "check_call source": ("source", lambda: sandbox.check_call(b)),
        "grading_note cells": ("cells", lambda: sandbox.grading_note(b, KEY)),
        "grading_note raising len": ("cells", lambda: sandbox.grading_note(LyingLen([code]), KEY)),
        "grading_note check_key": ("check_key", lambda: sandbox.grading_note([code], b)),
        "to_plain where": ("where", lambda: sandbox.to_plain(1, 0, b)),
        "accept where": ("where", lambda: sandbox.accept(1, 0, b)),
        "inputs_after args": ("args", lambda: sandbox.inputs_after(b, {})),
        "inputs_after kwargs": ("kwargs", lambda: sandbox.inputs_after((), b)),
        "hidden_paths extra": ("extra", lambda: sandbox.hidden_paths(b)),
        "hidden_paths raising len": ("extra", lambda: sandbox.hidden_paths(LyingLen([ROOT]))),
        "Refused what": ("what", lambda: sandbox.Refused(b)),
        "Refused where": ("where", lambda: sandbox.Refused("x", b)),
        "run_answer code": ("code", lambda: run(code=b)),
        "run_answer name": ("name", lambda: run(name=b)),
        "run_answer check_key": ("check_key", lambda: run(check_key=b)),
        "run_answer sandbox": ("sandbox", lambda: run(sandbox=b)),
        "run_answer case_sets raising len": ("case_sets", lambda: run(case_sets=LyingLen([cases]))),
        "run_answer case_sets[0] raising len": ("case_sets[0]", lambda: run(case_sets=[LyingLen(cases)])),
        "failed_operation case": ("case", lambda: raising.failed_operation(lambda x: x, b)),
        "requested_shape raising len": ("args", lambda: raising.requested_shape(LyingLen([(2, 3), 6]))),
        "grade_answer solutions_dir": ("solutions_dir", lambda: autograde.grade_answer(
            "lesson02", "check_softmax_rows", code, "softmax_rows", salt=0, solutions_dir=b)),
        "result_cap cases raising len": ("cases", lambda: autograde.result_cap(lesson02.SOFTMAX_ROWS,
                                                                               LyingLen(cases))),
        "write_secrets lessons raising len": ("lessons", lambda: autograde.write_secrets(
            ROOT / "no-such-course-61b", LyingLen(["02_x"]), ROOT / "solutions")),
        "replay cases raising len": ("cases", lambda: autograde.replay("f", LyingLen(cases), [])),
        "replay outcomes raising len": ("outcomes", lambda: autograde.replay("f", [], LyingLen([]))),
        "ArgumentParser conflict_handler": ("conflict_handler",
                                            lambda: cli.ArgumentParser(conflict_handler=b)),
        "parallel_map items": ("items", lambda: parallel.parallel_map(abs, b)),
    }


CALLS = sorted(_calls())


@pytest.mark.parametrize("label", CALLS)
def test_a_raising_repr_or_len_is_named_not_raised_through(label):
    """Each call let the value's own RuntimeError('repr raises' / 'len lies') through (an
    f-string's !r, a len() before any check); now a TypeError or ValueError names the argument."""
    name, call = _calls()[label]
    with pytest.raises((TypeError, ValueError)) as info:
        call()
    assert "repr raises" not in str(info.value) and "len lies" not in str(info.value)
    assert name in str(info.value)


def test_call_reads_its_command_once():
    """cli.call checked the command by iterating it, then gave Popen the list itself, whose
    __len__ raised there; it now runs the words it read."""
    assert cli.call(LyingLen([sys.executable, "-c", "pass"]), "x.py") == 0


def test_never_raising_helpers_answer_for_a_raising_repr():
    from course_utils.exercises import answers, sandbox

    assert "whose repr raised" in str(answers.describe_inputs(BadRepr()))
    assert "whose repr raised" in str(answers.describe_inputs({BadRepr(): 1}))
    for cells, name in ((BadRepr(), "f"), (LyingLen(["x = 1"]), "f"), (["x = 1"], BadRepr())):
        problems = sandbox.grading_preview(cells, name, KEY)
        assert problems and "exploded" not in problems[0]


# --- an answer's exception whose str raises at once (battery 31b) --------------------------------

def test_an_exception_whose_str_raises_is_not_blamed_on_the_time_limit():
    """exc_str_raises_blames_time_limit.py: the feedback said the exception "could not be printed
    within the 3 s time limit" of a __str__ that raised in microseconds."""
    from course_utils.exercises import core, lesson03

    class E(Exception):
        def __str__(self):
            raise RuntimeError("str")

        __repr__ = __str__

    assert core._safe_str(E()) == "a E that could not be printed"

    def parameter_count(d_model, num_heads, bias=True):
        raise E()

    message = lesson03.check_parameter_count(parameter_count).message
    assert "could not be printed" in message and "time limit" not in message


# --- scripts: values shown with cli.shown (sweep of !r in their messages) ------------------------

def test_script_messages_show_a_raising_repr_by_its_type():
    import nbformat

    publish = import_script("publish")

    for call, name in ((lambda: publish.validate(BadRepr(), "v1.0.0"), "repo"),
                       (lambda: publish.validate("owner/name", BadRepr()), "tag"),
                       (lambda: publish.stamp_notebook(nbformat.v4.new_notebook(), BadRepr()),
                        "repo_relative_path")):
        with pytest.raises(ValueError) as info:
            call()
        assert name in str(info.value) and "whose repr raised" in str(info.value)


def test_publish_check_without_pyproject_is_an_input_error(tmp_path):
    """publish_check_missing_pyproject.py (battery 31b): --check in a tree without pyproject.toml
    printed the problem on stdout, exit 1, as a badge disagreement; documented: stderr, exit 2."""
    publish = import_script("publish")

    code = publish.main(["--check"], root=tmp_path)
    assert code == 2


@pytest.mark.parametrize("course_venv", [None, "elsewhere"])
def test_version_matrix_refuses_the_course_environment(tmp_path, monkeypatch, capsys, course_venv):
    """version_matrix_course_venv.py (battery 31b): `floor --venv .venv` was accepted and pip
    began installing the floor pins into the course's own environment."""
    version_matrix = import_script("version_matrix")

    venv = tmp_path / (course_venv or ".venv")
    venv.mkdir()
    if course_venv:
        monkeypatch.setenv("COURSE_VENV", str(venv))
    else:
        monkeypatch.delenv("COURSE_VENV", raising=False)
    assert version_matrix.main(["floor", "--venv", str(venv)], root=tmp_path) == 2
    assert "course's own environment" in capsys.readouterr().err
    assert list(venv.iterdir()) == []


def test_decode_refuses_what_encode_never_writes():
    """answers_decode_passthrough.py (battery 31a): decode(object()) returned the object."""
    from course_utils.exercises import answers

    with pytest.raises(ValueError, match="data: expected a stored value"):
        answers.decode(object())
    with pytest.raises(ValueError, match="data: expected a stored value"):
        answers.decode([1, {"__tuple__": [object()]}])
    assert answers.decode(answers.encode((1, 2.5, "a", None, True))) == (1, 2.5, "a", None, True)
