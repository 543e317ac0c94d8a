"""Battery 18b's findings in the commands, the command-line helpers and the outside grader's
configuration (findings 1-7), each failing before its fix."""

from __future__ import annotations

import os
import signal
import sys
from pathlib import Path

import pytest
from bad_input_cases import import_script, load_course

from course_utils import cli

ROOT = Path(__file__).resolve().parent.parent


_script = import_script


def _files(folder: Path) -> dict[str, bytes]:
    return {p.relative_to(folder).as_posix(): p.read_bytes()
            for p in sorted(folder.rglob("*")) if p.is_file()}


def _swallow_a_signal() -> None:
    """What torch's C extension does as it imports numpy: the Interrupted the handler raises is
    taken and cleared (battery 18, finding 1)."""
    try:
        os.kill(os.getpid(), signal.SIGINT)
    except BaseException:  # noqa: BLE001 - the library that swallows it
        pass


# -- 1: a signal a library swallowed still stops the command before any file is changed ---------

pytestmark_posix = pytest.mark.skipif(os.name == "nt", reason="POSIX signals")


@pytestmark_posix
def test_source_stops_before_writing_when_a_library_swallowed_the_signal(tmp_path, monkeypatch, capsys):
    nbgrader_tools = _script("nbgrader_tools")
    course = tmp_path / "course"
    course.mkdir()
    (course / "nbgrader_config.py").write_text("c = get_config()\n")
    before = _files(course)
    stamped = nbgrader_tools._stamped

    def swallowing(*args, **kwargs):
        _swallow_a_signal()
        return stamped(*args, **kwargs)

    monkeypatch.setattr(nbgrader_tools, "_stamped", swallowing)
    assert nbgrader_tools.main(["source", str(course)]) == 130
    err = capsys.readouterr().err
    assert "interrupted by SIGINT" in err and "nothing was written" in err, err
    assert _files(course) == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["course"]  # no staging folder left


@pytestmark_posix
@pytest.mark.parametrize("writer", ["write_atomically", "write_all_atomically"])
def test_atomic_writers_stop_before_the_rename_when_a_library_swallowed_the_signal(writer, tmp_path, capsys):
    tools = _script("notebook_tools")
    target = tmp_path / "a.txt"
    target.write_text("old\n")

    def main(argv):
        _swallow_a_signal()
        if writer == "write_atomically":
            tools.write_atomically(target, "new\n")
        else:
            tools.write_all_atomically({target: "new\n", tmp_path / "b.txt": "b\n"})
        return 0

    cli.leaving(cli.NOTHING_WRITTEN)
    assert cli.run(main, [], "tool.py") == 130
    assert "interrupted by SIGINT: nothing was written" in capsys.readouterr().err
    assert sorted(os.listdir(tmp_path)) == ["a.txt"] and target.read_text() == "old\n"


def test_check_interrupted_does_nothing_outside_run(tmp_path):
    """After a run that was interrupted, the writers still work when called as a library."""
    cli.run(lambda argv: _swallow_a_signal(), [], "tool.py")
    cli.check_interrupted()  # no Interrupted: no run in progress
    _script("notebook_tools").write_atomically(tmp_path / "x.txt", "x\n")
    assert (tmp_path / "x.txt").read_text() == "x\n"


@pytestmark_posix
def test_student_tree_stops_before_the_rename_when_a_library_swallowed_the_signal(tmp_path, monkeypatch,
                                                                                   capsys):
    student_tree = _script("student_tree")
    point = student_tree._point_links_at_the_tree

    def swallowing(folder):
        _swallow_a_signal()
        return point(folder)

    monkeypatch.setattr(student_tree, "_point_links_at_the_tree", swallowing)
    cli.leaving(cli.NOTHING_WRITTEN)
    assert cli.run(lambda argv: student_tree.build(tmp_path / "tree"), [], "student_tree.py") == 130
    assert "interrupted by SIGINT: nothing was written" in capsys.readouterr().err
    assert os.listdir(tmp_path) == []


# -- 2: course.py test '' is refused naming the empty path (it ran the whole quick suite) -------


@pytest.mark.parametrize("args", [[""], ["tests/test_masks.py", ""], ["::test_x"], ["-x", "", "-q"]],
                         ids=repr)
def test_course_test_refuses_an_empty_path(args, capsys, monkeypatch):
    course = load_course()
    monkeypatch.setattr(course, "ensure_environment", lambda: pytest.fail("it went on past the checks"))
    assert course.main(["test", *args]) == 2
    err = capsys.readouterr().err
    empty = next(a for a in args if not a.split("::", 1)[0] and not a.startswith("-"))
    assert "empty test path" in err and repr(empty) in err and "nothing was run" in err, err


# -- 3: notebook_tools.py build refuses OUT whose folder is missing (it made them without a word) -

@pytest.mark.parametrize("out", ["no/o.ipynb", "no/such/o.ipynb"])
def test_build_refuses_a_missing_folder_of_out(out, tmp_path, capsys):
    draft = tmp_path / "draft.py"
    draft.write_text("# %%\nx = 1\n")
    target = tmp_path / out
    assert _script("notebook_tools").main(["build", str(draft), str(target)]) == 2
    err = capsys.readouterr().err
    assert str(target.parent) in err and "does not exist" in err and "nothing was written" in err, err
    assert sorted(os.listdir(tmp_path)) == ["draft.py"]


# -- 4: safe_collect.py never follows a symbolic link at EXCHANGE/COURSE/inbound ---------------

@pytest.fixture
def linked_inbound(tmp_path):
    elsewhere = tmp_path / "elsewhere"  # what the link leads to: a record the script would copy
    record = elsewhere / "alice+01_x+2024-01-01 00:00:00.000000 UTC"
    record.mkdir(parents=True)
    (record / "01_x.ipynb").write_text("{}")
    (tmp_path / "ex" / "c").mkdir(parents=True)
    (tmp_path / "ex" / "c" / "inbound").symlink_to(elsewhere)
    return tmp_path / "ex" / "c" / "inbound"


@pytest.mark.parametrize("how", ["main", "stage", "read_record"])
def test_safe_collect_refuses_a_linked_inbound(how, linked_inbound, tmp_path, capsys, monkeypatch):
    safe_collect = _script("safe_collect")
    monkeypatch.chdir(tmp_path)  # before the fix, nbgrader collect wrote submitted/ where it ran
    if how == "main":
        with pytest.raises(SystemExit) as info:
            safe_collect.main(["01_x", "--exchange", str(tmp_path / "ex"), "--course", "c", "--owner", "off"])
        assert info.value.code == 2
        message = capsys.readouterr().err
    else:
        with pytest.raises(safe_collect.Refused) as info:
            if how == "stage":
                safe_collect.stage(linked_inbound, "01_x", tmp_path / "dest", owner_check="off", slack=1e12)
            else:
                safe_collect.read_record(linked_inbound, "alice+01_x+2024-01-01 00:00:00.000000 UTC", "01_x",
                                         owner_check="off", slack=1e12)
        message = str(info.value)
    assert str(linked_inbound) in message and "symbolic link" in message, message
    assert not (tmp_path / "dest").exists()


# -- 5: autograde.configure refuses a course_root that is not an existing folder ------------------

@pytest.mark.parametrize("kind, error", [("missing", FileNotFoundError), ("file", NotADirectoryError)])
def test_configure_refuses_a_course_root_that_is_no_folder(kind, error, tmp_path):
    from traitlets.config import Config

    from course_utils.exercises import autograde

    root = tmp_path / "course"
    if kind == "file":
        root.write_text("not a folder")
    c = Config()
    with pytest.raises(error) as info:
        autograde.configure(c, root)
    assert "course_root" in str(info.value) and str(root) in str(info.value)
    assert "GradeOutside" not in c  # nothing was set


# -- 6: the argument helpers check their own name / what arguments --------------------------------

def _helper_calls():
    from course_utils import env, paths

    return {
        "check_path name=None": (lambda: cli.check_path("x", None), "name", "NoneType None"),
        "check_path what=3": (lambda: cli.check_path("x", "p", 3), "what", "int 3"),
        "paths.check_path what=None": (lambda: paths.check_path(None, "p", None), "what", "NoneType None"),
        "check_seed name=None": (lambda: env.check_seed(-1, None), "name", "NoneType None"),
        "check_seed name=5": (lambda: env.check_seed(1, 5), "name", "int 5"),
    }


def test_helpers_refuse_an_empty_name():
    with pytest.raises(ValueError, match=r"^name must be a non-empty str .*got str ''"):
        cli.check_path("x", "")


def test_importing_the_package_leaves_cli_unloaded():
    # python -m course_utils.cli warns when the package's import already loaded cli.py
    import subprocess

    done = subprocess.run([sys.executable, "-c", "import sys, course_utils.env, course_utils.interp; "
                           "print('course_utils.cli' in sys.modules)"], capture_output=True, text=True,
                          timeout=120)
    assert done.stdout.strip() == "False", done


@pytest.mark.parametrize("case", list(_helper_calls()))
def test_helpers_refuse_a_wrong_name_or_what(case):
    call, argument, got = _helper_calls()[case]
    with pytest.raises(TypeError) as info:
        call()
    message = str(info.value)
    assert message.startswith(f"{argument} must be ") and got in message, message


# -- 7: a signal just as the temporary file is made leaves no .NAME.XXXX.tmp / .old behind --------

@pytestmark_posix
@pytest.mark.parametrize("writer, suffix", [
    ("write_atomically", ".tmp"), ("write_all_atomically", ".tmp"), ("write_all_atomically", ".old"),
    ("nbgrader _swap_in", ".old"), ("exercise_answers", ".tmp")])
def test_a_signal_as_the_temporary_is_made_leaves_none(writer, suffix, tmp_path, monkeypatch, capsys):
    import tempfile

    tools = _script("notebook_tools")
    target = tmp_path / "a.ipynb"
    target.write_text("old\n")

    def signalled(real):
        def call(*args, **kwargs):
            made = real(*args, **kwargs)
            names = [a for a in args if isinstance(a, str | Path)] + [kwargs.get("suffix") or ""]
            if any(str(name).endswith(suffix) for name in names):
                os.kill(os.getpid(), signal.SIGINT)  # a real signal, as the file was just made
            return made
        return call

    def main(argv):
        for module, name in ((tempfile, "mkstemp"), (os, "open"), (os, "link")):  # whichever makes it
            monkeypatch.setattr(module, name, signalled(getattr(module, name)))
        if writer == "write_atomically":
            tools.write_atomically(target, "new\n")
        elif writer == "write_all_atomically":
            tools.write_all_atomically({target: "new\n"})
        elif writer == "exercise_answers":
            _script("exercise_answers")._write_all({target: {"new": 1}})
        else:
            staging = tmp_path / "staging"
            staging.mkdir()
            (staging / "a.ipynb").write_text("new\n")
            _script("nbgrader_tools")._swap_in(staging, tmp_path)
        return 0

    cli.leaving(cli.NOTHING_WRITTEN)
    assert cli.run(main, [], "tool.py") == 130
    monkeypatch.undo()
    assert "interrupted by SIGINT" in capsys.readouterr().err
    assert sorted(p.name for p in tmp_path.iterdir() if p.name != "staging") == ["a.ipynb"]
    assert target.read_text() == "old\n"


# -- exercise_answers.py writes through notebook_tools.write_atomically (bytes too) ----------------

def test_exercise_answers_build_names_a_store_it_cannot_write(tmp_path, monkeypatch, capsys):
    answers_script = _script("exercise_answers")
    store = tmp_path / "answers"
    (store / "lesson01.pt").mkdir(parents=True)  # os.replace onto a folder fails: an OSError
    monkeypatch.setattr(answers_script.answers, "ANSWERS_DIR", store)
    monkeypatch.setattr(answers_script, "_attached_solutions", lambda: None)
    monkeypatch.setattr(answers_script, "_unwritable_store", lambda: None)  # past the early check
    monkeypatch.setattr(answers_script, "compute", lambda: {"lesson01": {"exercises": {}}})
    assert answers_script.main(["build"]) == 1
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "exercise_answers build: " in err, err
    assert str(store / "lesson01.pt") in err, err
    assert sorted(os.listdir(store)) == ["lesson01.pt"]


@pytest.mark.parametrize("text", [None, 3, ["a"]], ids=repr)
def test_write_atomically_refuses_contents_that_are_not_str_or_bytes(text, tmp_path):
    with pytest.raises(TypeError) as info:
        _script("notebook_tools").write_atomically(tmp_path / "a.txt", text)
    assert "text must be" in str(info.value) and type(text).__name__ in str(info.value)
    assert os.listdir(tmp_path) == []
