"""The scripts' writers are all or nothing, and they refuse a FIFO before opening it.

publish and ``nbgrader_tools convert`` rewrite several files; when one of them cannot be
written (an immutable file, a full disk) every file is left as it was. A FIFO given as a
notebook or draft is refused at once instead of blocking the read forever.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "scripts"))

import notebook_tools  # noqa: E402
import publish  # noqa: E402


def _files(folder: Path) -> dict[str, bytes]:
    paths = sorted(p for p in folder.rglob("*") if p.is_file())
    return {p.relative_to(folder).as_posix(): p.read_bytes() for p in paths}


def _failing_replace(monkeypatch, nth: int) -> None:
    original, calls = os.replace, []

    def replace(src, dst, *args, **kwargs):
        calls.append(dst)
        if len(calls) == nth:
            raise PermissionError(1, "Operation not permitted", str(dst))
        return original(src, dst, *args, **kwargs)

    monkeypatch.setattr(os, "replace", replace)


def test_write_all_atomically_puts_every_file_back_when_one_fails(tmp_path, monkeypatch):
    for name in ("a.txt", "b.txt", "c.txt"):
        (tmp_path / name).write_text(f"old {name}\n")
    before = _files(tmp_path)
    _failing_replace(monkeypatch, 3)
    texts = {tmp_path / n: f"new {n}\n" for n in ("a.txt", "b.txt", "c.txt", "new.txt")}
    with pytest.raises(notebook_tools.ToolError, match=r"c\.txt: cannot be written .* left as it was"):
        notebook_tools.write_all_atomically(texts)
    assert _files(tmp_path) == before


class _Stop(BaseException):
    """What a signal handler raises (like course_utils.cli.Interrupted, a BaseException)."""


@pytest.mark.parametrize("nth", [1, 2, 3])
def test_write_all_atomically_undoes_a_rename_a_signal_follows(tmp_path, monkeypatch, nth):
    """A signal is handled as os.replace returns, before the writer notes the rename: the
    file renamed into place is put back too (and one made new is removed)."""
    for name in ("a.txt", "b.txt"):
        (tmp_path / name).write_text(f"old {name}\n")
    before = _files(tmp_path)
    original, calls = os.replace, []

    def replace(src, dst, *args, **kwargs):
        original(src, dst, *args, **kwargs)
        calls.append(dst)
        if len(calls) == nth:
            raise _Stop

    texts = {tmp_path / n: f"new {n}\n" for n in ("a.txt", "b.txt", "new.txt")}
    monkeypatch.setattr(os, "replace", replace)
    with pytest.raises(_Stop):
        notebook_tools.write_all_atomically(texts)
    assert _files(tmp_path) == before


def test_a_rerun_removes_what_a_killed_write_left_behind(tmp_path):
    # battery 5: publish SIGKILLed in its rename phase left 32 .tmp/.old files that no rerun removed
    texts = {tmp_path / n: f"new {n}\n" for n in ("a.txt", "b.txt", "c.txt")}
    for path in texts:
        path.write_text(f"old {path.name}\n")
    (tmp_path / ".a.txt.notmine.tmp").write_text("someone else's")  # not the writer's pattern
    pid = os.fork()
    if pid == 0:  # the writer, killed (no clean-up runs) at its second rename
        calls = []

        def replace(src, dst, *args, **kwargs):
            calls.append(dst)
            if len(calls) == 2:
                os._exit(9)
            return os.rename(src, dst)

        os.replace = replace
        notebook_tools.write_all_atomically(texts)
        os._exit(0)
    _, status = os.waitpid(pid, 0)
    assert os.WEXITSTATUS(status) == 9
    left = sorted(p.name for p in tmp_path.iterdir() if p.name.endswith((".tmp", ".old")))
    assert len(left) >= 4, left  # the temporaries and the kept-aside copies of the killed run
    notebook_tools.write_all_atomically(texts)
    assert _files(tmp_path) == {**{p.name: t.encode() for p, t in texts.items()},
                                ".a.txt.notmine.tmp": b"someone else's"}


def test_publish_leaves_every_file_as_it_was_when_one_cannot_be_written(tmp_path, monkeypatch, capsys):
    from publish_copy import copy_for_publish

    copy_for_publish(tmp_path)
    before = _files(tmp_path)
    _failing_replace(monkeypatch, 4)
    assert publish.main(["--repo", "x/y", "--tag", "v9.9.9"], root=tmp_path) == 1
    assert "every file was left as it was" in capsys.readouterr().err
    assert _files(tmp_path) == before


def _run(script: str, *args: str, cwd: Path = ROOT) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(ROOT / "scripts" / script), *args], cwd=cwd,
                          capture_output=True, text=True, timeout=120)


def _stripped_notebook(tmp_path: Path, name: str) -> Path:
    nb = json.loads((ROOT / "notebooks" / "03_dimension_walkthrough.ipynb").read_text())
    for cell in nb["cells"]:
        cell.get("metadata", {}).pop("nbgrader", None)
    path = tmp_path / name
    path.write_text(json.dumps(nb, indent=1))
    return path


@pytest.mark.skipif(not (hasattr(os, "geteuid") and os.geteuid() == 0 and shutil.which("chattr")),
                    reason="chattr +i needs root")
def test_convert_with_one_immutable_notebook_changes_no_file(tmp_path):
    first, second = _stripped_notebook(tmp_path, "c03.ipynb"), _stripped_notebook(tmp_path, "c03b.ipynb")
    if subprocess.run(["chattr", "+i", str(second)], capture_output=True).returncode != 0:
        pytest.skip("this file system has no immutable flag")
    try:
        before = _files(tmp_path)
        proc = _run("nbgrader_tools.py", "convert", str(first), str(second))
        after = _files(tmp_path)
    finally:
        subprocess.run(["chattr", "-i", str(second)])
    assert proc.returncode == 1, proc.stderr
    assert "c03b.ipynb" in proc.stderr and "Traceback" not in proc.stderr
    assert after == before


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="no FIFOs here")
@pytest.mark.parametrize("argv", [("nbgrader_tools.py", "convert", "{fifo}"),
                                  ("notebook_tools.py", "build", "{fifo}", "{out}")])
def test_a_fifo_is_refused_before_it_is_opened(tmp_path, argv):
    fifo = tmp_path / "fifo.ipynb"
    os.mkfifo(fifo)
    args = [a.format(fifo=fifo, out=tmp_path / "out.ipynb") for a in argv[1:]]
    proc = _run(argv[0], *args)  # a read would block: the 120 s timeout fails the test
    assert proc.returncode != 0
    assert "fifo.ipynb" in proc.stderr and "FIFO" in proc.stderr and "Traceback" not in proc.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == ["fifo.ipynb"]


def test_build_into_a_folder_named_ipynb_is_a_one_line_error(tmp_path):
    draft = tmp_path / "draft.py"
    draft.write_text("# %% [markdown]\n# # Title\n\n# %%\nx = 1\n")
    (tmp_path / "out.ipynb").mkdir()
    proc = _run("notebook_tools.py", "build", str(draft), str(tmp_path / "out.ipynb"))
    assert proc.returncode != 0
    assert "out.ipynb" in proc.stderr and "folder" in proc.stderr and "Traceback" not in proc.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == ["draft.py", "out.ipynb"]


def test_source_into_a_file_is_a_one_line_error(tmp_path):
    (tmp_path / "afile").write_text("x")
    for target in (tmp_path / "afile", tmp_path / "afile" / "sub"):
        proc = _run("nbgrader_tools.py", "source", str(target))
        assert proc.returncode == 2 and "Traceback" not in proc.stderr
        assert "COURSE_DIR must be a folder" in proc.stderr and "afile is a file" in proc.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == ["afile"]


def test_publish_names_a_missing_tool_course_table(tmp_path, capsys):
    for name in ("README.md", "pyproject.toml"):
        shutil.copy(ROOT / name, tmp_path / name)
    pyproject = tmp_path / "pyproject.toml"
    pyproject.write_text(pyproject.read_text().replace("[tool.course]", "[tool.coursex]"))
    assert publish.main([], root=tmp_path) == 2
    assert "no [tool.course] table" in capsys.readouterr().err


# -- nbgrader_tools.py source: a broken lesson or a failed write changes nothing ----------------
def _source_course(tmp_path: Path, monkeypatch) -> tuple:
    """A course folder made by a good ``source`` (plus an instructor's own files in it) and a
    copy of the lessons that the next ``source`` reads."""
    import nbgrader_tools

    lessons = tmp_path / "notebooks"
    shutil.copytree(ROOT / "notebooks", lessons, ignore=shutil.ignore_patterns(".ipynb_checkpoints"))
    monkeypatch.setattr(nbgrader_tools, "NOTEBOOKS", lessons)
    course = tmp_path / "course"
    assert nbgrader_tools.main(["source", str(course)]) == 0
    (course / "gradebook.db").write_bytes(b"the instructor's grades")
    config = course / "nbgrader_config.py"
    config.write_text("c.CourseDirectory.course_id = 'mine'\n" + config.read_text())
    return nbgrader_tools, lessons, course


def test_source_with_a_broken_lesson_leaves_the_course_as_it_was(tmp_path, monkeypatch, capsys):
    tools, lessons, course = _source_course(tmp_path, monkeypatch)
    before = _files(course)
    first = sorted(lessons.glob("01_*.ipynb"))[0]
    nb = json.loads(first.read_text())
    nb["cells"].append({"cell_type": "markdown", "id": "b5a-edit", "metadata": {},
                        "source": "an edit for the next release"})
    first.write_text(json.dumps(nb))
    broken = sorted(lessons.glob("04_*.ipynb"))[0]
    broken.write_text("{bad")
    capsys.readouterr()
    assert tools.main(["source", str(course)]) == 1
    err = capsys.readouterr().err
    assert broken.name in err and "not" in err and "nothing in" in err and "Traceback" not in err
    assert _files(course) == before  # no mixed release: lesson 01 and the salts are the old ones
    assert tools.main(["source", str(tmp_path / "new" / "course")]) == 1
    assert not (tmp_path / "new").exists()  # no half-made folder either


def test_source_that_cannot_write_one_file_puts_every_file_back(tmp_path, monkeypatch, capsys):
    tools, lessons, course = _source_course(tmp_path, monkeypatch)
    before = _files(course)
    for nth in (1, 3):
        monkeypatch.undo()
        monkeypatch.setattr(tools, "NOTEBOOKS", lessons)
        _failing_replace(monkeypatch, nth)
        capsys.readouterr()
        assert tools.main(["source", str(course)]) == 1
        err = capsys.readouterr().err
        assert "cannot write" in err and "Operation not permitted" in err
        assert _files(course) == before
        assert not [p for p in course.rglob(".*") if p.name != ".course_grader.json"]
    monkeypatch.undo()
    monkeypatch.setattr(tools, "NOTEBOOKS", lessons)
    assert tools.main(["source", str(course)]) == 0
    after = _files(course)
    assert after["gradebook.db"] == before["gradebook.db"]
    assert after["nbgrader_config.py"].startswith(b"c.CourseDirectory.course_id = 'mine'\n")
    assert after[".course_grader.json"] != before[".course_grader.json"]  # new salts
    assert (course / ".course_grader.json").stat().st_mode & 0o077 == 0


def test_release_and_check_name_a_broken_lesson_and_write_nothing(tmp_path, monkeypatch, capsys):
    # battery 5: a 30-line nbformat traceback that never named the file
    import nbgrader_tools

    lessons, student = tmp_path / "notebooks", tmp_path / "student"
    shutil.copytree(ROOT / "notebooks", lessons, ignore=shutil.ignore_patterns(".ipynb_checkpoints"))
    shutil.copytree(ROOT / "student", student)
    (lessons / "03_zz_broken.ipynb").write_text("{not json")
    first = sorted(lessons.glob("01_*.ipynb"))[0]
    first.write_text(first.read_text().replace('"nbgrader"', '"nbgrader_old"', 1))  # would be rewritten
    monkeypatch.setattr(nbgrader_tools, "NOTEBOOKS", lessons)
    monkeypatch.setattr(nbgrader_tools, "STUDENT", student)
    before = {**_files(lessons), **{f"s/{k}": v for k, v in _files(student).items()}}
    for command in ("release", "check"):
        capsys.readouterr()
        assert nbgrader_tools.main([command]) == 1
        err = capsys.readouterr().err
        assert "03_zz_broken.ipynb" in err and "NotJSONError" in err and "nothing was written" in err
        assert len(err.strip().splitlines()) == 1, err
    assert {**_files(lessons), **{f"s/{k}": v for k, v in _files(student).items()}} == before


def test_a_broken_student_copy_is_stale_not_a_crash(tmp_path):
    import nbformat
    import nbgrader_tools

    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_markdown_cell("x")])
    (tmp_path / "02_x.ipynb").write_text("{bad")
    assert nbgrader_tools.stale_students({"02_x.ipynb": nb}, tmp_path) == [str(tmp_path / "02_x.ipynb")]


def test_exercise_answers_names_a_solutions_file_that_is_not_python(tmp_path, monkeypatch, capsys):
    # battery 5: a raw import traceback ending "SyntaxError: invalid syntax"
    import exercise_answers

    from course_utils.exercises import answers

    fake = tmp_path / "solutions"
    fake.mkdir()
    (fake / "__init__.py").write_text("def attach():\n    from . import lesson02  # noqa: F401\n")
    (fake / "lesson02.py").write_text("x = 1\ndef broken(:\n")
    for name in [m for m in sys.modules if m == "solutions" or m.startswith("solutions.")]:
        monkeypatch.delitem(sys.modules, name)
    monkeypatch.syspath_prepend(str(tmp_path))
    before = _files(answers.ANSWERS_DIR)
    try:
        for command in ("build", "check"):
            assert exercise_answers.main([command]) == 1
            err = capsys.readouterr().err
            assert "lesson02.py, line 2: SyntaxError" in err and "no stored answer was written" in err, err
            assert len(err.strip().splitlines()) == 1, err
    finally:  # no later test may import the fake
        for name in [m for m, mod in sys.modules.items() if m.split(".")[0] == "solutions"
                     and str(getattr(mod, "__file__", "")).startswith(str(tmp_path))]:
            del sys.modules[name]
    assert _files(answers.ANSWERS_DIR) == before
