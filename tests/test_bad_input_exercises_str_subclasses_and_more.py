"""Bad input for the exercises and scripts: a str subclass whose own ``__str__`` or ``__repr__``
raises is taken as the plain str it holds (a lesson, a check or an exercise name), never passed into
an f-string, a path or a message as itself; a names list whose len() raises is named; a library
module run as a command says so; a refused path with control characters is printed on one line;
version_matrix.py reuses only a virtual environment."""
from __future__ import annotations

import os
import runpy
import subprocess
import sys
from pathlib import Path

import pytest

from course_utils.exercises import answers, autograde
from tests.bad_input_cases import BadRepr, LyingLen, LyingStr, import_script, raises_naming

ROOT = Path(__file__).resolve().parent.parent


def test_exercise_of_takes_a_str_subclass_lesson_and_check_as_their_text() -> None:
    plain = autograde.exercise_of("lesson02", "check_softmax_rows")
    assert autograde.exercise_of(LyingStr("lesson02"), LyingStr("check_softmax_rows")) is plain


def test_exercise_of_names_lesson_and_check_when_they_are_not_one() -> None:
    raises_naming(ValueError, ["lesson", "lessonNN", "BadRepr"],
                  lambda: autograde.exercise_of(BadRepr(), "x"))
    raises_naming(ValueError, ["lesson", "lesson99"],
                  lambda: autograde.exercise_of(LyingStr("lesson99"), "x"))
    raises_naming(ValueError, ["check", "lesson02's checks", "check_nope"],
                  lambda: autograde.exercise_of("lesson02", LyingStr("check_nope")))


def test_stored_takes_a_str_subclass_lesson_and_name_as_their_text() -> None:
    plain = answers.stored("lesson02", "SOFTMAX_ROWS")
    assert plain is not None
    assert answers.stored(LyingStr("lesson02"), LyingStr("SOFTMAX_ROWS")).keys() == plain.keys()


def test_stored_never_asks_a_str_subclass_name_whether_it_matches() -> None:
    class Everything(str):  # a lying __eq__ matched the first stored exercise
        def __eq__(self, other: object) -> bool:
            return True

        __hash__ = str.__hash__

    assert answers.stored("lesson02", Everything("NO_SUCH_EXERCISE")) is None


@pytest.mark.parametrize("lesson", [LyingStr("lesson99"), LyingStr("../x"), BadRepr(), 2])
def test_stored_names_a_lesson_that_is_not_one(lesson: object) -> None:
    raises_naming(ValueError, ["lesson"], lambda: answers.stored(lesson, "SOFTMAX_ROWS"))


def test_record_refused_call_names_names_whose_len_raises() -> None:
    from course_utils.exercises.raising import RecordRefusedCall

    message = raises_naming(TypeError, ["names", "LyingLen"], lambda: RecordRefusedCall(LyingLen(["cat"])))
    assert "len lies" not in message
    assert RecordRefusedCall((LyingStr("cat"),))._names == ("cat",)


# ---- library modules run as commands: a usage error, never a silent exit 0 ----

@pytest.mark.parametrize("path", ["course_utils/cli.py", "scripts/course_cli.py"])
def test_a_library_module_run_as_a_command_says_so(path: str, capsys, monkeypatch) -> None:
    monkeypatch.setattr(sys, "argv", [path, "--bogus"])
    with pytest.raises(SystemExit) as stopped:
        runpy.run_path(str(ROOT / path), run_name="__main__")  # as `python PATH --bogus` runs it
    assert stopped.value.code == 2
    out = capsys.readouterr()
    assert "not a command" in out.err and "course.py" in out.err and not out.out


def _package_modules() -> list[str]:
    """Every module and package of course_utils, by its files, but the commands."""
    from course_utils import _starting

    names = []
    for path in sorted((ROOT / "course_utils").rglob("*.py")):
        parts = path.relative_to(ROOT).with_suffix("").parts
        if parts[-1] == "__init__":
            parts = parts[:-1]
        name = ".".join(parts)
        if name not in _starting.ENTRIES:
            names.append(name)
    return names


def test_every_library_module_run_with_python_m_says_it_is_no_command() -> None:
    """`python -m course_utils.attention.mha` (48 of 53 modules) ran its definitions and exited 0
    without a word; now each says it is a library module, exit 2, before torch is imported."""
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    silent = []
    for name in _package_modules():
        done = subprocess.run([sys.executable, "-m", name], capture_output=True, text=True, timeout=120,
                              env=env, stdin=subprocess.DEVNULL, cwd=ROOT)
        said = f"python -m {name}: a library module, not a command"
        if done.returncode != 2 or not done.stderr.startswith(said) or len(done.stderr.splitlines()) != 1:
            silent.append((name, done.returncode, done.stderr[-200:]))
    assert not silent


# ---- a refused path with control characters: escaped, on one line ----

ODD = "x\x1b[31mRED\nline2"


def test_one_line_escapes_what_a_terminal_would_run() -> None:
    from course_utils import cli

    assert cli.one_line(f"{ODD}: no such draft") == "x\\x1b[31mRED\\nline2: no such draft"
    assert cli.one_line("trée/ok: fine") == "trée/ok: fine"
    raises_naming(TypeError, ["one_line", "message", "BadRepr"], lambda: cli.one_line(BadRepr()))


def test_notebook_tools_prints_an_odd_missing_draft_on_one_line(tmp_path, capsys) -> None:
    notebook_tools = import_script("notebook_tools")
    assert notebook_tools.main(["build", str(tmp_path / f"{ODD}.py"), str(tmp_path / "out.ipynb")]) == 2
    err = capsys.readouterr().err.strip()
    assert "\x1b" not in err and len(err.splitlines()) == 1 and "no such" in err
    assert not (tmp_path / "out.ipynb").exists()


def test_student_tree_prints_an_odd_folder_inside_the_repo_on_one_line(capsys) -> None:
    student_tree = import_script("student_tree")
    assert student_tree.main([str(ROOT / ODD)]) == 2
    err = capsys.readouterr().err.strip()
    assert "\x1b" not in err and len(err.splitlines()) == 1 and "inside this repository" in err
    assert not (ROOT / ODD).exists()


# ---- version_matrix.py --venv: only a virtual environment is reused ----

def test_version_matrix_refuses_a_folder_with_a_python_that_is_no_venv(tmp_path) -> None:
    version_matrix = import_script("version_matrix")
    fake = tmp_path / "not_a_venv"
    (fake / "bin").mkdir(parents=True)
    (fake / "thesis.txt").write_text("a user's file\n")
    (fake / "bin" / "python").write_text("#!/bin/sh\nexit 1\n")
    raises_naming(version_matrix.InputError, ["--venv", "not a virtual environment", "pyvenv.cfg"],
                  lambda: version_matrix._check_venv(fake, ROOT))
    (fake / "thesis.txt").unlink()  # bin/python alone: still no environment
    raises_naming(version_matrix.InputError, ["pyvenv.cfg"], lambda: version_matrix._check_venv(fake, ROOT))
    (fake / "pyvenv.cfg").write_text("home = /usr/bin\n")  # one this tool made: reused
    version_matrix._check_venv(fake, ROOT)


def test_version_matrix_prints_an_odd_refused_venv_on_one_line(tmp_path, capsys) -> None:
    version_matrix = import_script("version_matrix")
    fake = tmp_path / ODD
    (fake / "bin").mkdir(parents=True)
    (fake / "bin" / "python").write_text("#!/bin/sh\nexit 1\n")
    assert version_matrix.main(["floor", "--venv", str(fake)], root=ROOT) == 2
    err = capsys.readouterr().err.strip()
    assert "\x1b" not in err and len(err.splitlines()) == 1 and "pyvenv.cfg" in err
