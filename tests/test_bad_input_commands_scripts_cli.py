"""Bad input to the course's tools: the scripts (notebook_tools, nbgrader_tools, safe_collect,
student_tree, publish, exercise_answers, version_matrix, course_cli) and course_utils.cli (call,
interrupted, check_path, words, shown). Options given twice or unknown, writes through links or into
the clone, unwritable folders, signals while a tool starts or writes (one line, nothing half
written), and helpers that must name what they refuse.

Moved here from the QA batteries' files (issue 38 and later batteries), grouped by the code under test;
a `# -- battery N` line marks where each battery's cases begin. Helpers shared with other bad-input
files live in tests/bad_input_cases.py."""

from __future__ import annotations

import asyncio
import errno
import importlib.util
import os
import shutil
import signal
import stat
import subprocess
import sys
import tempfile
import textwrap
import time
import types
import warnings
from pathlib import Path

import nbformat
import pytest
from bad_input_cases import (
    ROOT,
    SCRIPTS,
    BadRepr,
    Case,
    LyingStr,
    assert_named,
    import_script,
    load_course,
    load_script_copy,
    raises_naming,
)
from test_cli_interrupts import _interrupt, _one_line

from course_utils import cli, env, paths
from course_utils.bench import cli as bench_cli
from course_utils.model import train as TRN

exercise_answers = import_script("exercise_answers")
nbgrader_tools = import_script("nbgrader_tools")

needs_posix_signals_and_fifos = pytest.mark.skipif(os.name == "nt", reason="POSIX signals and FIFOs")

needs_posix_signals = pytest.mark.skipif(os.name == "nt", reason="POSIX signals")


# -- battery 6 (left) --------------------------------------------------------------------------------

def test_an_unreadable_student_copy_is_called_unreadable(tmp_path):
    """`nbgrader_tools.py check` called a student notebook that is not JSON "stale"."""
    pytest.importorskip("nbgrader")
    tools = load_script_copy("nbgrader_tools")
    nb = nbformat.v4.new_notebook()
    (tmp_path / "01_x.ipynb").write_text("{bad")
    nbformat.write(nb, tmp_path / "02_y.ipynb")
    unreadable: dict[str, str] = {}
    stale = tools.stale_students({"01_x.ipynb": nb, "02_y.ipynb": nb}, tmp_path, unreadable)
    assert stale == [str(tmp_path / "01_x.ipynb")]
    assert list(unreadable) == stale and "NotJSONError" in unreadable[stale[0]]


def test_a_failed_copy_of_the_student_tree_is_told_in_words(monkeypatch, capsys):
    """It printed the repr of shutil.Error's list of (source, target, why) tuples."""
    tree = load_script_copy("student_tree")
    failures = [("/src/a.pt", "/dst/a.pt", "[Errno 27] File too large: '/src/a.pt' -> '/dst/a.pt'"),
                ("/src/b.pt", "/dst/b.pt", "[Errno 27] File too large")]

    def build(out):
        raise shutil.Error(failures)

    monkeypatch.setattr(tree, "build", build)
    assert tree.main(["/nonexistent_b6/tree"]) == 2
    message = capsys.readouterr().err
    assert "could not copy 2 file(s)" in message and "/src/a.pt: [Errno 27] File too large" in message
    assert "[(" not in message


# -- battery 7 (b) -----------------------------------------------------------------------------------

# -- scripts/version_matrix.py: a --venv that cannot be written (row 21) -------------------------
@pytest.mark.parametrize("venv", ["/proc/nope/v", "/proc/v"])
def test_version_matrix_names_a_venv_folder_it_cannot_write(venv, monkeypatch, capsys):
    version_matrix = import_script("version_matrix")

    def refuse(*args, **kwargs):
        raise AssertionError("version_matrix.py went on to create a venv or run pip")

    monkeypatch.setattr(version_matrix._cli(), "run_in_group", refuse)  # venv and pip both run through it
    monkeypatch.setattr(version_matrix.subprocess, "run", refuse)
    assert version_matrix.main(["floor", "--venv", venv]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("version_matrix.py: /proc: cannot write there")
    assert f"--venv {venv}" in err and "Traceback" not in err


def test_version_matrix_reports_a_failed_install_on_one_line(tmp_path, monkeypatch, capsys):
    version_matrix = import_script("version_matrix")

    def disk_full(cmd):  # the venv is made first, in a child (battery 21)
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), str(cmd[-1]))

    monkeypatch.setattr(version_matrix._cli(), "run_in_group", disk_full)
    assert version_matrix.main(["newest", "--venv", str(tmp_path / "env")]) == 1
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "cannot prepare the environment" in err and "No space left" in err


# -- battery 9b --------------------------------------------------------------------------------------

def _tree(folder: Path) -> dict[str, bytes | str]:
    """Every path under ``folder``: a file's bytes, a link's target, a folder's mark."""
    found = {}
    for path in sorted(folder.rglob("*")):
        key = str(path.relative_to(folder))
        found[key] = (f"-> {path.readlink()}" if path.is_symlink() else
                      "<folder>" if path.is_dir() else path.read_bytes())
    return found


@pytest.fixture
def course(tmp_path, monkeypatch):
    """A copy of the lessons, student copies and INSTRUCTORS.md that release works on."""
    clone = tmp_path / "clone"
    clone.mkdir()
    for folder in ("notebooks", "student"):
        shutil.copytree(ROOT / folder, clone / folder, ignore=shutil.ignore_patterns(".ipynb_checkpoints"))
    shutil.copy(ROOT / "INSTRUCTORS.md", clone / "INSTRUCTORS.md")
    monkeypatch.setattr(nbgrader_tools, "ROOT", clone)
    monkeypatch.setattr(nbgrader_tools, "NOTEBOOKS", clone / "notebooks")
    monkeypatch.setattr(nbgrader_tools, "STUDENT", clone / "student")
    monkeypatch.setattr(nbgrader_tools, "INSTRUCTORS", clone / "INSTRUCTORS.md")
    return clone


# -- 1. data loss and crashes of release, table and build -----------------------------------------
@pytest.mark.slow
def test_release_replaces_a_student_link_and_never_writes_through_it(course, tmp_path, capsys):
    """A link at student/05 pointing outside the clone: release wrote the student notebook into
    the file outside. Now the link is replaced by the file, as publish and notebook_tools do."""
    student = sorted((course / "student").glob("05_*.ipynb"))[0]
    expected = student.read_bytes()
    outside = tmp_path / "outside.ipynb"
    outside.write_text("OUTSIDE\n")
    student.unlink()
    student.symlink_to(outside)
    assert nbgrader_tools.main(["release"]) == 0, capsys.readouterr().err
    assert outside.read_text() == "OUTSIDE\n"
    assert not student.is_symlink() and student.read_bytes() == expected
    assert f"wrote student/{student.name}" in capsys.readouterr().out


@pytest.mark.slow
def test_release_with_a_folder_for_a_student_notebook_names_it_and_writes_nothing(course, capsys):
    student = sorted((course / "student").glob("05_*.ipynb"))[0]
    student.unlink()
    student.mkdir()
    lesson = sorted((course / "notebooks").glob("01_*.ipynb"))[0]
    nb = nbformat.read(lesson, as_version=4)
    nb.cells.append(nbformat.v4.new_markdown_cell("an edit that release would write"))
    nbformat.write(nb, lesson)
    before = _tree(course)
    assert nbgrader_tools.main(["release"]) == 1
    err = capsys.readouterr().err
    assert str(student) in err and "is a folder" in err and "nothing was written" in err, err
    assert "Traceback" not in err and _tree(course) == before


def test_a_solution_region_with_no_end_is_named_by_file_cell_and_line():
    nb = nbformat.v4.new_notebook()
    nb.cells = [nbformat.v4.new_markdown_cell("# Lesson"),
                nbformat.v4.new_code_cell("def f(x):\n    ### BEGIN SOLUTION\n    return x\n")]
    with pytest.raises(nbgrader_tools.FormatError,
                       match=r"06_x\.ipynb: cell 2, line 2: ### BEGIN SOLUTION with no ### END SOLUTION"):
        nbgrader_tools.convert(nb, "06_x.ipynb")


def test_table_write_with_instructors_a_folder_is_refused_by_name(course, capsys):
    (course / "INSTRUCTORS.md").unlink()
    (course / "INSTRUCTORS.md").mkdir()
    assert nbgrader_tools.main(["table", "--write"]) == 1
    err = capsys.readouterr().err
    assert "INSTRUCTORS.md: is a folder, expected a file" in err and "nothing was written" in err, err


@pytest.mark.parametrize("drop", [0, 1])
def test_table_write_without_its_markers_names_the_missing_one(course, capsys, drop):
    """The markers gone, `table --write` said "INSTRUCTORS.md was current" and wrote nothing."""
    instructors = course / "INSTRUCTORS.md"
    marker = nbgrader_tools.TABLE_MARKERS[drop]
    instructors.write_text(instructors.read_text().replace(marker, ""))
    before = instructors.read_bytes()
    assert nbgrader_tools.main(["table", "--write"]) == 1
    err = capsys.readouterr().err
    assert f"lacks the marker line(s) {marker}" in err and "nothing was written" in err, err
    assert instructors.read_bytes() == before
    assert nbgrader_tools.main(["release"]) == 1  # refused before any lesson is written
    assert "lacks the marker" in capsys.readouterr().err


def test_exercise_answers_build_with_the_store_a_file_is_refused_before_building(tmp_path, monkeypatch,
                                                                                capsys):
    store = tmp_path / "answers"
    store.write_text("not a folder\n")
    monkeypatch.setattr(exercise_answers.answers, "ANSWERS_DIR", store)
    monkeypatch.setattr(exercise_answers, "_attached_solutions", lambda: None)
    monkeypatch.setattr(exercise_answers, "compute", lambda: pytest.fail("built before the check"))
    assert exercise_answers.main(["build"]) == 1
    err = capsys.readouterr().err
    assert f"{store} is a file, not a folder" in err and "no stored answer was written" in err, err
    assert store.read_text() == "not a folder\n"


@pytest.mark.parametrize("argv, said", [([], "no command given; expected 'build' or 'check'"),
                                        (["--bogus"], "unknown arguments: --bogus; expected")])
def test_exercise_answers_without_a_command_says_so(capsys, argv, said):
    """Issue 38 hunt: with no arguments it said "unknown arguments: (none)"."""
    assert exercise_answers.main(argv) == 2
    err = capsys.readouterr().err
    assert err.strip().splitlines()[-1].startswith(said), err


@pytest.mark.parametrize("course_dir", ["", "  ", str(ROOT)])
def test_source_into_an_empty_name_or_the_clone_is_refused(course_dir, capsys, monkeypatch):
    """`nbgrader_tools source ''` wrote source/, the grader's salts and nbgrader_config.py into
    the current folder (the clone's root)."""
    monkeypatch.setattr(nbgrader_tools, "fill_course_source", lambda *a: pytest.fail("it wrote"))
    assert nbgrader_tools.main(["source", course_dir]) == 2
    err = capsys.readouterr().err
    assert "COURSE_DIR" in err and repr(course_dir) in err and "outside" in err, err
    assert "nothing was written" in err


def test_the_graders_secrets_are_ignored_by_git():
    lines = [line.strip() for line in (ROOT / ".gitignore").read_text().splitlines()]
    assert ".course_grader.json" in lines


def _publish_copy(tmp_path: Path) -> Path:
    from publish_copy import copy_for_publish

    copy = tmp_path / "published"
    copy.mkdir()
    return copy_for_publish(copy)


def test_publish_with_nothing_changed_writes_nothing(tmp_path, capsys):
    """`course.py publish` with the config unchanged rewrote all 8 lessons (the set-up cell's
    execution_count 1 -> null) while `publish --check` said everything agreed."""
    publish = import_script("publish")

    copy = _publish_copy(tmp_path)
    executed = [p for p in sorted((copy / "notebooks").glob("*.ipynb"))
                if any(publish._tagged(c, publish.SETUP_TAG) and c.execution_count
                       for c in nbformat.read(p, as_version=4).cells)]
    assert executed, "no lesson stores an executed set-up cell: this test checks nothing"
    assert publish.main(["--check"], root=copy) == 0
    before = _tree(copy)
    assert publish.main([], root=copy) == 0
    assert "nothing to change" in capsys.readouterr().out
    assert _tree(copy) == before


def test_publish_to_a_new_tag_clears_the_old_setup_run(tmp_path):
    """The set-up cell's source changes with the tag: the old count and outputs belong to the
    old code, so they go."""
    publish = import_script("publish")

    copy = _publish_copy(tmp_path)
    assert publish.main(["--repo", "someone/elsewhere", "--tag", "v9.9.9"], root=copy) == 0
    for path in sorted((copy / "notebooks").glob("*.ipynb")):
        setup = [c for c in nbformat.read(path, as_version=4).cells if publish._tagged(c, publish.SETUP_TAG)]
        assert setup and all(c.execution_count is None and c.outputs == [] for c in setup), path.name
        assert all("v9.9.9" in c.source or "someone/elsewhere" in c.source for c in setup), setup[0].source


def test_a_solution_marker_after_code_with_no_end_is_named_too():
    """A BEGIN that is not at the start of its line passes the line check, and met max() of an
    empty sequence when the check call was split off."""
    nb = nbformat.v4.new_notebook()
    nb.cells = [nbformat.v4.new_code_cell("def f(x):\n    y = x  ### BEGIN SOLUTION\n    return y\n")]
    with pytest.raises(nbgrader_tools.FormatError, match=r"06_x\.ipynb, cell 0: unmatched solution markers"):
        nbgrader_tools.convert(nb, "06_x.ipynb")


# -- battery 11 --------------------------------------------------------------------------------------

# -- item 8: notebook_tools.py interrupted says so on one line, exits non-zero, writes nothing ----
def _notebook(path: Path, source: str) -> bytes:
    nb = nbformat.v4.new_notebook()
    nb.cells = [nbformat.v4.new_code_cell(source)]
    nbformat.write(nb, str(path))
    return path.read_bytes()


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT])
def test_notebook_tools_interrupted_between_files_says_so(tmp_path, monkeypatch, capsys, signum):
    """The signal arrives as the tool works on a file (here: upgrade, in this process)."""
    notebook_tools = import_script("notebook_tools")

    path = tmp_path / "a.ipynb"
    before = _notebook(path, "1 + 1")
    monkeypatch.setattr(notebook_tools, "upgrade", lambda p: os.kill(os.getpid(), signum))
    previous = signal.getsignal(signum)
    assert notebook_tools.main(["upgrade", str(path)]) == 128 + signum
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and f"interrupted by {signal.Signals(signum).name}" in err, err
    assert "Traceback" not in err and path.read_bytes() == before
    assert signal.getsignal(signum) is previous, "main leaves the signal handlers as it found them"


@pytest.mark.slow
def test_notebook_tools_execute_interrupted_by_sigterm_writes_nothing(tmp_path):
    """Battery 11 item 8: SIGTERM during a run gave exit 1 and nbclient's traceback."""
    started = tmp_path / "started"
    path = tmp_path / "slow.ipynb"
    before = _notebook(path, f"import pathlib, time\npathlib.Path({str(started)!r}).touch()\ntime.sleep(60)")
    tool = str(SCRIPTS / "notebook_tools.py")
    run = subprocess.Popen([sys.executable, tool, "execute", str(path)],
                           stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 60
    while not started.exists() and time.monotonic() < deadline and run.poll() is None:
        time.sleep(0.1)
    assert started.exists(), "the cell never started"
    run.send_signal(signal.SIGTERM)
    out, err = run.communicate(timeout=60)
    assert run.returncode == 128 + signal.SIGTERM, (out, err)
    assert "Traceback" not in err, err
    assert err.strip().splitlines()[-1].startswith("notebook_tools.py: interrupted by SIGTERM"), err
    assert str(path) in err and "was not changed" in err
    assert path.read_bytes() == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["slow.ipynb", "started"], "no temporary file left"


# -- battery 13 --------------------------------------------------------------------------------------

# -- fix38e left 1: an interrupted notebook run stops the tool (bench memory exited 0) ---------
class _ClientStoppedBySignal:
    """nbclient without a kernel: it sets the loop's SIGINT/SIGTERM handlers (they shut its kernel
    down), a signal arrives while a cell runs, and the dead kernel then fails the run with an
    AssertionError, as the real one does."""

    def __init__(self, nb, **kwargs) -> None:
        self.nb = nb

    async def async_execute(self, **kwargs):
        import asyncio
        import os
        import signal

        loop = asyncio.get_running_loop()
        stopped = asyncio.Event()
        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(sig, stopped.set)
        os.kill(os.getpid(), signal.SIGTERM)
        await asyncio.wait_for(stopped.wait(), 5)
        raise AssertionError  # what the shut kernel gives


def _tiny_lesson(tmp_path):
    import nbformat

    path = tmp_path / "01_lesson.ipynb"
    nbformat.write(nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell("x = 1")]), path)
    return path


@pytest.mark.skipif(__import__("os").name == "nt", reason="POSIX signals")
def test_bench_memory_interrupted_stops_with_one_line(tmp_path, monkeypatch, capsys):
    import signal

    import nbclient

    from course_utils import cli
    from course_utils.bench import cli as bench_cli

    monkeypatch.setattr(nbclient, "NotebookClient", _ClientStoppedBySignal)
    handler = signal.getsignal(signal.SIGTERM)
    code = cli.run(bench_cli.main, ["memory", str(_tiny_lesson(tmp_path))], "python -m course_utils.bench")
    err = capsys.readouterr().err
    assert code == 143, err
    assert err.strip().splitlines() == ["python -m course_utils.bench: interrupted by SIGTERM: the kernel "
                                        "running 01_lesson.ipynb was shut down; nothing was written"], err
    assert signal.getsignal(signal.SIGTERM) is handler


@pytest.mark.skipif(__import__("os").name == "nt", reason="POSIX signals")
def test_notebook_peak_memory_raises_interrupted_not_a_row(tmp_path, monkeypatch):
    import signal

    import nbclient

    from course_utils import cli
    from course_utils.bench import memory

    monkeypatch.setattr(nbclient, "NotebookClient", _ClientStoppedBySignal)
    previous = signal.signal(signal.SIGTERM, lambda *a: pytest.fail("the loop's handler did not run"))
    try:
        with pytest.raises(cli.Interrupted, match="SIGTERM: the kernel running 01_lesson.ipynb"):
            memory.notebook_peak_memory(_tiny_lesson(tmp_path))
    finally:
        signal.signal(signal.SIGTERM, previous)


# -- fix38e left 4: an unknown option typed alone is named, not hidden by "required: ..." ------
def _tool_main(name):
    return import_script(name).main


@pytest.mark.parametrize("tool, argv", [
    ("train", ["--bogus"]),
    ("train", ["--seed", "1", "--bogus"]),
    ("safe_collect", ["--bogus"]),
    ("version_matrix", ["--bogus"]),
])
def test_an_unknown_option_is_named_before_missing_arguments(tool, argv, capsys):
    main = TRN.main if tool == "train" else _tool_main(tool)
    with pytest.raises(SystemExit) as info:
        main(argv)
    err = capsys.readouterr().err
    assert info.value.code == 2 and "unrecognized arguments: --bogus" in err, err
    assert "required" not in err, err


@pytest.mark.parametrize("tool", ["train", "safe_collect", "version_matrix"])
def test_missing_arguments_are_still_named(tool, capsys):
    main = TRN.main if tool == "train" else _tool_main(tool)
    with pytest.raises(SystemExit):
        main([])
    err = capsys.readouterr().err
    assert "the following arguments are required" in err and "unrecognized" not in err, err


# -- b13 silent: cli.leaving took None, an int or bytes (printed later, as the signal came) ------
@pytest.mark.parametrize("text, error", [(None, TypeError), (3, TypeError), (b"x", TypeError),
                                         ("", ValueError), ("  ", ValueError)], ids=repr)
def test_leaving_refuses_what_is_no_text(text, error):
    from course_utils import cli

    assert_named(Case("leaving", lambda: cli.leaving(text), error, ["text", "non-empty str", repr(text)]))
    cli.leaving(cli.NOTHING_WRITTEN)  # the control


# -- b13: `course.py student-tree notebooks/out` wrote 92 files inside the clone ------------------
def test_student_tree_inside_the_repository_is_refused():
    student_tree = import_script("student_tree")
    target = ROOT / "notebooks" / "out_by_test13"
    with pytest.raises(ValueError, match="inside this repository") as info:
        student_tree.build(target)
    assert "notebooks/out_by_test13/" in str(info.value) and not target.exists()


# -- b13: `notebook_tools build` of a draft whose markdown cell holds a bare line overwrote the lesson --
def test_build_refuses_a_markdown_line_that_is_no_comment(tmp_path, capsys):
    notebook_tools = _tool_main("notebook_tools").__globals__  # the script's module namespace
    draft, out = tmp_path / "draft.py", tmp_path / "out.ipynb"
    out.write_text("kept")
    draft.write_text("# %% [markdown]\n# # Title\nnot a comment\n# %%\nx = 1\n")
    assert notebook_tools["main"](["build", str(draft), str(out)]) == 2
    err = capsys.readouterr().err
    assert "line 3" in err and "'not a comment'" in err and "does not start with '# '" in err, err
    assert out.read_text() == "kept"
    draft.write_text("# %% [markdown]\n# # Title\n#\n\n# %%\nx = 1\n")  # the control
    assert notebook_tools["main"](["build", str(draft), str(out)]) == 0
    assert '"x = 1"' in out.read_text()


# -- b13 obscure: cli.run/cli.call and the tools' main(argv) given no command line ---------------
def _command_line_cases():
    from course_utils import cli
    from course_utils.bench import cli as bench_cli

    return [
        Case("run main None", lambda: cli.run(None, [], "tool.py"), TypeError, ["main must be", "NoneType"]),
        Case("run main str", lambda: cli.run("main", [], "tool.py"), TypeError, ["main must be", "str"]),
        Case("run argv int", lambda: cli.run(lambda a: 0, 3, "tool.py"), TypeError,
             ["argv must be a list of str", "int 3"]),
        Case("call command empty", lambda: cli.call([], "tool.py"), ValueError, ["command must hold", "[]"]),
        Case("call command None", lambda: cli.call(None, "tool.py"), TypeError,
             ["command must be a list of str", "NoneType"]),
        Case("call command str", lambda: cli.call("ls -l", "tool.py"), TypeError,
             ["command must be a list of str", "str 'ls -l'"]),
        Case("bench main int", lambda: bench_cli.main(3), TypeError, ["argv must be a list of str", "int 3"]),
        Case("train main int", lambda: TRN.main(3), TypeError, ["argv must be a list of str", "int 3"]),
    ]


@pytest.mark.parametrize("case", _command_line_cases(), ids=lambda c: c.name)
def test_command_line_helpers_name_what_is_no_command_line(case):
    assert_named(case)


# -- battery 13b -------------------------------------------------------------------------------------

NOTEBOOK_TOOLS = SCRIPTS / "notebook_tools.py"


def _tiny_notebooks(folder: Path, *sources: str) -> list[Path]:
    """One-cell notebooks (a.ipynb, b.ipynb, ...) that running changes (it adds the outputs)."""
    paths = []
    for name, source in zip("abcdefgh", sources, strict=False):
        nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(source)])
        path = folder / f"{name}.ipynb"
        nbformat.write(nb, path)
        paths.append(path)
    return paths


def _tool(*args: str, cwd: Path = ROOT) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, *args], cwd=cwd, capture_output=True, text=True, timeout=300)


# --- data loss: `notebook_tools execute A B` is all or nothing -------------------------------
@pytest.mark.slow
@pytest.mark.skipif(os.name == "nt", reason="POSIX signals")
def test_execute_interrupted_on_the_second_notebook_leaves_the_first_as_it_was(tmp_path):
    """b13 cli:notebook_tools SIGINT@15s execute-2nbs: the first notebook was already rewritten."""
    work = tmp_path / "nbs"
    work.mkdir()
    paths = _tiny_notebooks(work, "print('first')", "print('second')")
    before = {p: p.read_bytes() for p in paths}
    done = _interrupt(tmp_path, work, [sys.executable, str(NOTEBOOK_TOOLS), "execute", "a.ipynb", "b.ipynb"],
                      "open|b.ipynb|2", signal.SIGINT)  # b opened to run it: a has run
    _one_line(done, signal.SIGINT, "notebook_tools.py: ", "not written")
    assert {p: p.read_bytes() for p in paths} == before
    assert sorted(p.name for p in work.iterdir()) == ["a.ipynb", "b.ipynb"]  # no temporary left


@pytest.mark.slow
def test_execute_with_a_failing_second_notebook_leaves_the_first_as_it_was(tmp_path):
    paths = _tiny_notebooks(tmp_path, "print('first')", "raise ValueError('broken on purpose')")
    before = {p: p.read_bytes() for p in paths}
    done = _tool(str(NOTEBOOK_TOOLS), "execute", *map(str, paths))
    assert done.returncode == 2, done
    assert "ValueError" in done.stderr and "not written" in done.stderr, done.stderr
    assert {p: p.read_bytes() for p in paths} == before


@pytest.mark.slow
def test_execute_of_two_good_notebooks_writes_both(tmp_path):
    paths = _tiny_notebooks(tmp_path, "print('first')", "print('second')")
    done = _tool(str(NOTEBOOK_TOOLS), "execute", *map(str, paths))
    assert done.returncode == 0, done
    outputs = [nbformat.read(p, as_version=4).cells[0].outputs for p in paths]
    assert [o[0]["text"] for o in outputs] == ["first\n", "second\n"]


# --- CLI ------------------------------------------------------------------------------------
@pytest.mark.parametrize("draft, said", [
    ("# %% [markdown]\n# # Title\nnot a comment\n\n# %%\nx = 1\n", "line 3: in a markdown cell"),
    ("x = 1\n# %%\ny = 2\n", "line 1: text before the first '# %%'"),
])
def test_build_of_a_malformed_draft_leaves_the_notebook_as_it_was(tmp_path, draft, said):
    """b13 cli:notebook_tools build-overwrite-lesson-bad-draft: exit 0, the lesson overwritten."""
    lesson = tmp_path / "02_lesson.ipynb"
    nbformat.write(nbformat.v4.new_notebook(cells=[nbformat.v4.new_markdown_cell("kept")]), lesson)
    before = lesson.read_bytes()
    (tmp_path / "d.py").write_text(draft)
    done = _tool(str(NOTEBOOK_TOOLS), "build", str(tmp_path / "d.py"), str(lesson))
    assert done.returncode == 2 and said in done.stderr and "was not written" in done.stderr, done
    assert lesson.read_bytes() == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["02_lesson.ipynb", "d.py"]


def test_build_of_a_good_draft_still_replaces_the_notebook(tmp_path):
    lesson = tmp_path / "02_lesson.ipynb"
    nbformat.write(nbformat.v4.new_notebook(cells=[nbformat.v4.new_markdown_cell("old")]), lesson)
    (tmp_path / "d.py").write_text("#!/usr/bin/env python\n# %% [markdown]\n# # Title\n#\n# text\n\n"
                                   "# %%\nx = 1\n")
    done = _tool(str(NOTEBOOK_TOOLS), "build", str(tmp_path / "d.py"), str(lesson))
    assert done.returncode == 0, done
    cells = nbformat.read(lesson, as_version=4).cells
    assert [(c.cell_type, c.source) for c in cells] == [("markdown", "# Title\n\ntext"), ("code", "x = 1")]


def _inside_the_clone(tmp_path: Path, how: str) -> tuple[Path, Path]:
    """An OUT_DIR inside the clone (a new folder, removed by the caller), directly or through a link."""
    inside = ROOT / f".b13b-student-tree-{os.getpid()}"
    if how == "direct":
        return inside, inside / "tree"
    (tmp_path / "ln").symlink_to(ROOT)
    return inside, tmp_path / "ln" / inside.name / "tree"


@pytest.mark.parametrize("how", ["direct", "symlink"])
def test_student_tree_into_the_clone_is_refused_before_writing(tmp_path, how):
    """b13 cli:course.py student-tree-inside / student_tree.py out-symlink-into-clone: 92 files
    written inside the clone."""
    inside, out = _inside_the_clone(tmp_path, how)
    try:
        done = _tool(str(SCRIPTS / "student_tree.py"), str(out), cwd=tmp_path)
        assert done.returncode == 2 and "inside this repository" in done.stderr, done
        assert len(done.stderr.strip().splitlines()) == 1 and "nothing was written" in done.stderr
        assert not inside.exists()
    finally:
        import shutil

        shutil.rmtree(inside, ignore_errors=True)


def test_student_tree_through_a_symlink_loop_says_so(tmp_path):
    (tmp_path / "l1").symlink_to(tmp_path / "l2")
    (tmp_path / "l2").symlink_to(tmp_path / "l1")
    done = _tool(str(SCRIPTS / "student_tree.py"), str(tmp_path / "l1" / "tree"), cwd=tmp_path)
    assert done.returncode == 2 and "loops" in done.stderr and "Traceback" not in done.stderr, done


def test_nbgrader_tools_source_on_a_symlink_loop_says_so_in_one_line(tmp_path):
    """b13 cli:nbgrader_tools source-symlink-loop: exit 1 and a Python traceback."""
    (tmp_path / "l1").symlink_to(tmp_path / "l2")
    (tmp_path / "l2").symlink_to(tmp_path / "l1")
    done = _tool(str(SCRIPTS / "nbgrader_tools.py"), "source", str(tmp_path / "l1"), cwd=tmp_path)
    assert done.returncode == 2, done
    assert done.stderr.strip().splitlines() == [done.stderr.strip()] and "loops" in done.stderr, done.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == ["l1", "l2"]


def test_course_test_refuses_a_path_with_a_control_character_before_running_anything(tmp_path):
    """b13 cli:course.py test-nul: `course.py test 'a\\x01b'` started pytest -n 2 (exit 5)."""
    done = _tool(str(ROOT / "course.py"), "test", "a\x01b", cwd=tmp_path)
    assert done.returncode == 2, done
    assert done.stderr.strip() == (f"course.py test: no such test file or folder: 'a\\x01b' (paths are "
                                   f"relative to {ROOT}; nothing was run)"), done.stderr
    assert done.stdout == ""


# -- battery 14 (fix44b) -----------------------------------------------------------------------------

# -- cli.call and cli.Interrupted name what they cannot use ---------------------------------
CLI_CASES = [
    Case("Interrupted str", lambda: cli.Interrupted("x"), TypeError, ["signum", "SIGINT (2)", "str 'x'"]),
    Case("Interrupted SIGHUP", lambda: cli.Interrupted(1), ValueError, ["signum", "SIGTERM (15)", "got 1"]),
    Case("Interrupted message int", lambda: cli.Interrupted(2, 5), TypeError, ["message", "str", "int 5"]),
    Case("call relay 999", lambda: cli.call(["true"], "p", relay=(999,)), ValueError,
         ["relay", "stop signal", "999"]),
    Case("call relay int", lambda: cli.call(["true"], "p", relay=2), TypeError, ["relay", "tuple", "int 2"]),
    Case("call a folder", lambda: cli.call(["/"], "p"), PermissionError, ["command[0]", "'/'", "a folder"]),
    Case("call a missing program", lambda: cli.call(["/nope/zz"], "p"), FileNotFoundError,
         ["command[0]", "'/nope/zz'", "not found"]),
]


@pytest.mark.parametrize("case", CLI_CASES, ids=lambda c: c.name)
def test_cli_call_and_interrupted_name_a_bad_argument(case):
    assert_named(case)


def test_cli_call_and_interrupted_controls():
    assert cli.Interrupted(signal.SIGTERM, "x").signum == 15
    assert cli.call([sys.executable, "-c", "pass"], "p", relay=(signal.SIGTERM,)) == 0
    assert cli.call([sys.executable, "-c", "raise SystemExit(3)"], "p", relay=[signal.SIGINT]) == 3


def test_options_given_once_and_adding_options_still_parse():
    args = bench_cli.build_parser().parse_args(["mha", "--repeats", "2"])
    assert args.repeats == 2
    parser = cli.ArgumentParser()
    parser.add_argument("--tag", action="append")
    parser.add_argument("-v", action="count", default=0)
    parser.add_argument("--x", type=int)
    args = parser.parse_args(["--tag", "a", "--tag", "b", "-v", "-v", "--x", "1"])
    assert (args.tag, args.v, args.x) == (["a", "b"], 2, 1)


def test_place_in_names_inside_outside_and_a_loop(tmp_path):
    assert cli.place_in(tmp_path, tmp_path) == "."
    assert cli.place_in(tmp_path / "a" / "b", tmp_path) == "a/b"
    assert cli.place_in(tmp_path.parent, tmp_path) is None
    (tmp_path / "loop").symlink_to(tmp_path / "loop")
    with pytest.raises(ValueError, match="loops"):
        cli.place_in(tmp_path / "loop" / "x", tmp_path)


# -- cli.run: a signal as main returns is the one line and 130, not a traceback and exit 1 -----
def test_run_reports_a_signal_that_comes_as_the_handlers_are_put_back(monkeypatch, capsys):
    import os

    put_back = cli._put_back
    sent = []

    def signal_first(previous):  # the signal lands after main returned, in run's finally
        if not sent:
            sent.append(True)
            os.kill(os.getpid(), signal.SIGINT)
        put_back(previous)

    monkeypatch.setattr(cli, "_put_back", signal_first)
    before = signal.getsignal(signal.SIGINT)
    cli.leaving("lesson01.pt written")
    try:
        code = cli.run(lambda argv: 0, [], "tool.py")
    finally:
        cli.leaving(cli.NOTHING_WRITTEN)
    assert code == 130
    assert capsys.readouterr().err == "tool.py: interrupted by SIGINT: lesson01.pt written\n"
    assert signal.getsignal(signal.SIGINT) is before  # put back all the same


# -- run_kernel: a kernel cancelled while starting, a dead kernel's poll: the one interruption --
def test_run_kernel_turns_a_cancelled_start_into_interrupted():
    import asyncio
    import os

    async def starting_kernel():  # nbclient's handler cancels the start (CancelledError, exit 1)
        asyncio.get_running_loop().add_signal_handler(signal.SIGINT, asyncio.current_task().cancel)
        os.kill(os.getpid(), signal.SIGINT)
        await asyncio.sleep(5)

    before = signal.getsignal(signal.SIGINT)
    with pytest.raises(cli.Interrupted) as info:
        cli.run_kernel(starting_kernel(), "the kernel was shut down")
    assert info.value.signum == signal.SIGINT and "the kernel was shut down" in str(info.value)
    assert signal.getsignal(signal.SIGINT) is before


def test_run_kernel_leaves_no_failed_task_unretrieved(caplog):
    import asyncio
    import gc
    import os

    async def poll_dead_kernel():
        raise AssertionError  # what nbclient's _async_poll_kernel_alive gives once the kernel is gone

    async def cell_running():
        loop = asyncio.get_running_loop()
        stopped = asyncio.Event()
        loop.add_signal_handler(signal.SIGTERM, stopped.set)
        asyncio.ensure_future(poll_dead_kernel())
        await asyncio.sleep(0.01)  # the poll has failed; nobody awaits it
        os.kill(os.getpid(), signal.SIGTERM)
        await asyncio.wait_for(stopped.wait(), 5)
        raise AssertionError

    with caplog.at_level("ERROR", logger="asyncio"), pytest.raises(cli.Interrupted):
        cli.run_kernel(cell_running(), "the kernel was shut down")
    gc.collect()
    assert "never retrieved" not in caplog.text, caplog.text


def test_publish_refuses_an_option_given_twice(capsys):
    publish = import_script("publish")
    with pytest.raises(SystemExit) as info:
        publish.main(["--repo", "a/b", "--repo", "c/d", "--tag", "v1"])
    err = capsys.readouterr().err
    assert info.value.code == 2 and "argument --repo: given more than once (a/b, then c/d)" in err, err


# -- battery 15 (fix45c) -----------------------------------------------------------------------------

async def _nothing() -> int:
    return 7


# -- cli.py's helpers look at their arguments' types before using them ----------------------------
CLI_HELPER_TYPE_CASES = [
    Case("run_kernel/work not awaitable", lambda: cli.run_kernel(3, "left"), TypeError,
         ["work", "coroutine", "int 3"]),
    Case("run_kernel/work not called", lambda: cli.run_kernel(_nothing, "left"), TypeError,
         ["work", "call it", "function"]),
    Case("run_kernel/message not str", lambda: cli.run_kernel(asyncio.sleep(0), 3), TypeError,
         ["message", "str", "int 3"]),
    Case("stop_at_once/prog int", lambda: cli.stop_at_once(3), TypeError, ["prog", "str", "int 3"]),
    Case("place_in/path int", lambda: cli.place_in(3, "/tmp"), TypeError, ["path", "str or Path", "int 3"]),
    Case("place_in/root None", lambda: cli.place_in("/tmp", None), TypeError,
         ["root", "str or Path", "NoneType None"]),
    Case("parse_args/int items", lambda: cli.ArgumentParser().parse_args([1, 2]), TypeError,
         ["args", "list of str", "[1, 2]"]),
    Case("parse_known_args/int items", lambda: cli.ArgumentParser().parse_known_args(["a", 2]), TypeError,
         ["args", "list of str", "['a', 2]"]),
]


@pytest.mark.parametrize("case", CLI_HELPER_TYPE_CASES, ids=lambda c: c.name)
def test_cli_helpers_refuse_wrong_argument_types_by_name(case):
    with warnings.catch_warnings():
        warnings.simplefilter("error", RuntimeWarning)  # a refused coroutine is closed, never left un-awaited
        assert_named(case)


def test_cli_helpers_still_take_good_arguments(tmp_path):
    assert cli.run_kernel(_nothing(), "nothing was written") == 7
    assert cli.place_in(tmp_path / "a", tmp_path) == "a"
    parser = cli.ArgumentParser(prog="t")
    parser.add_argument("--n", type=int)
    assert parser.parse_args(("--n", "2")).n == 2


# -- notebook_tools.py execute takes --timeout anywhere among the notebooks ------------------------
@pytest.mark.parametrize("argv", [["execute", "a.ipynb", "--timeout", "5"],
                                  ["execute", "a.ipynb", "--timeout=5"],
                                  ["execute", "--timeout", "5", "a.ipynb"]])
def test_execute_takes_its_timeout_before_or_after_the_notebooks(argv):
    assert import_script("notebook_tools")._parse(argv) == ("execute", ["a.ipynb"], 5)


@pytest.mark.parametrize("argv, words", [
    (["execute", "a.ipynb", "--timeout"], ["--timeout", "got nothing"]),
    (["execute", "a.ipynb", "--timeout", "x"], ["--timeout", "whole number", "'x'"]),
    (["execute", "--timeout", "5", "a.ipynb", "--timeout=6"], ["--timeout", "more than once", "5, 6"]),
    (["execute", "a.ipynb", "--bogus"], ["--bogus", "--timeout SECONDS and file names"]),
])
def test_execute_refuses_a_wrong_timeout_by_name(argv, words):
    tools = import_script("notebook_tools")
    assert_named(Case(" ".join(argv), lambda: tools._parse(argv), tools.ToolError, words))


# -- battery 16 (fix46t) -----------------------------------------------------------------------------

# -- 5: safe_collect.py run as documented, the venv not activated --------------------------------
def test_safe_collect_runs_this_interpreters_nbgrader_without_the_venv_on_path(tmp_path):
    import subprocess
    import sys

    script = SCRIPTS / "safe_collect.py"
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

    script = SCRIPTS / "nbgrader_tools.py"
    done = subprocess.run([sys.executable, str(script), "source", *args], cwd=tmp_path,
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 2 and named in done.stderr, done.stderr
    assert list(tmp_path.iterdir()) == []


# -- battery 17 (fix47u) -----------------------------------------------------------------------------

# -- 3: cli.run refuses an exit status of another type (a float read as 1 by sys.exit) ----------
@pytest.mark.parametrize("returned", [2.0, 0.0, [1], b"x"], ids=repr)
def test_run_refuses_a_status_that_is_not_an_int_none_or_str(returned):
    with pytest.raises(TypeError) as info:
        cli.run(lambda argv: returned, [], "p")
    message = str(info.value)
    assert "main(argv) returned" in message and repr(returned) in message
    assert type(returned).__name__ in message


# -- 4: notebook_tools.py build into a folder that cannot be written: one line naming OUT, exit 2 -
def test_build_into_an_unwritable_folder_names_out_on_one_line(tmp_path, capsys):
    draft = tmp_path / "draft.py"
    draft.write_text("# %%\nx = 1\n", encoding="utf-8")
    out = "/proc/fix47u_no_such.ipynb"
    assert import_script("notebook_tools").main(["build", str(draft), out]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "Traceback" not in err, err
    assert f"notebook_tools.py: {out}: cannot be written" in err and ".tmp" not in err, err


def test_write_atomically_names_the_file_it_cannot_write():
    tools = import_script("notebook_tools")
    with pytest.raises(tools.ToolError) as info:
        tools.write_atomically(Path("/proc/fix47u_no_such.txt"), "text")
    assert "/proc/fix47u_no_such.txt: cannot be written" in str(info.value)


# -- 6: notebook_tools.py student interrupted at any moment leaves no new folder ----------------
@pytest.mark.parametrize("stage", ["student_version", "write_all_atomically"])
def test_an_interrupted_student_run_leaves_no_new_folder(stage, tmp_path, monkeypatch):
    tools = import_script("notebook_tools")
    src = tmp_path / "src" / "01_x.ipynb"
    src.parent.mkdir()
    nbformat.write(nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell("x = 1")]), src)
    new_top = tmp_path / "new"
    out_dir = new_top / "deeper" / "student"

    def interrupted(*args, **kwargs):
        raise tools.Interrupted(signal.SIGINT, "test")

    monkeypatch.setattr(tools, stage, interrupted)  # the signal arrives during that stage
    with pytest.raises(tools.Interrupted):
        tools._run("student", [str(out_dir), str(src)])
    assert not new_top.exists(), f"{stage}: left {sorted(p.name for p in new_top.rglob('*'))}"


# -- 5: safe_collect.py refuses a student id nbgrader collect would drop ('.', '..', hidden) ----
@pytest.mark.parametrize("student", [".", "..", ".hidden"])
def test_safe_collect_refuses_a_student_nbgrader_would_drop(student, tmp_path):
    safe_collect = load_script_copy("safe_collect")
    inbound = tmp_path / "inbound"
    name = f"{student}+01_x+2026-11-29 10:00:00 UTC"
    (inbound / name).mkdir(parents=True)
    (inbound / name / "01_x.ipynb").write_text("{}")
    dest = tmp_path / "private"
    dest.mkdir()
    taken, refused = safe_collect.stage(inbound, "01_x", dest, owner_check="off", slack=1e12)
    assert taken == [] and len(refused) == 1
    record, why = refused[0]
    assert record == name and repr(student) in why and "starts with '.'" in why
    assert list(dest.iterdir()) == []


# -- 4 (sibling): nbgrader_tools.py table --write into a file that cannot be written -------------
def test_nbgrader_tools_table_write_failure_is_one_line(monkeypatch, capsys):
    tools = load_script_copy("nbgrader_tools")
    target = Path("/proc/fix47u_no_such/INSTRUCTORS.md")
    monkeypatch.setattr(tools, "INSTRUCTORS", target)
    monkeypatch.setattr(tools, "table_texts", lambda: ("old table", "new table"))
    assert tools.main(["table", "--write"]) == 1
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "Traceback" not in err, err
    assert f"table: {target}: cannot be written" in err, err


# -- battery 18 (fix48u) -----------------------------------------------------------------------------

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
    nbgrader_tools = import_script("nbgrader_tools")
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
    tools = import_script("notebook_tools")
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
    import_script("notebook_tools").write_atomically(tmp_path / "x.txt", "x\n")
    assert (tmp_path / "x.txt").read_text() == "x\n"


@pytestmark_posix
def test_student_tree_stops_before_the_rename_when_a_library_swallowed_the_signal(tmp_path, monkeypatch,
                                                                                   capsys):
    student_tree = import_script("student_tree")
    point = student_tree._point_links_at_the_tree

    def swallowing(folder):
        _swallow_a_signal()
        return point(folder)

    monkeypatch.setattr(student_tree, "_point_links_at_the_tree", swallowing)
    cli.leaving(cli.NOTHING_WRITTEN)
    assert cli.run(lambda argv: student_tree.build(tmp_path / "tree"), [], "student_tree.py") == 130
    assert "interrupted by SIGINT: nothing was written" in capsys.readouterr().err
    assert os.listdir(tmp_path) == []


# -- 3: notebook_tools.py build refuses OUT whose folder is missing (it made them without a word) -
@pytest.mark.parametrize("out", ["no/o.ipynb", "no/such/o.ipynb"])
def test_build_refuses_a_missing_folder_of_out(out, tmp_path, capsys):
    draft = tmp_path / "draft.py"
    draft.write_text("# %%\nx = 1\n")
    target = tmp_path / out
    assert import_script("notebook_tools").main(["build", str(draft), str(target)]) == 2
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
    safe_collect = import_script("safe_collect")
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

    tools = import_script("notebook_tools")
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
            import_script("exercise_answers")._write_all({target: {"new": 1}})
        else:
            staging = tmp_path / "staging"
            staging.mkdir()
            (staging / "a.ipynb").write_text("new\n")
            import_script("nbgrader_tools")._swap_in(staging, tmp_path)
        return 0

    cli.leaving(cli.NOTHING_WRITTEN)
    assert cli.run(main, [], "tool.py") == 130
    monkeypatch.undo()
    assert "interrupted by SIGINT" in capsys.readouterr().err
    assert sorted(p.name for p in tmp_path.iterdir() if p.name != "staging") == ["a.ipynb"]
    assert target.read_text() == "old\n"


# -- exercise_answers.py writes through notebook_tools.write_atomically (bytes too) ----------------
def test_exercise_answers_build_names_a_store_it_cannot_write(tmp_path, monkeypatch, capsys):
    answers_script = import_script("exercise_answers")
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
        import_script("notebook_tools").write_atomically(tmp_path / "a.txt", text)
    assert "text must be" in str(info.value) and type(text).__name__ in str(info.value)
    assert os.listdir(tmp_path) == []


# -- battery 19 (fix49u) -----------------------------------------------------------------------------

# -- G6: nbgrader_tools.py source stopped right after the course was swapped in -----------------
@pytestmark_posix
@pytest.mark.skipif(importlib.util.find_spec("nbgrader") is None, reason="no nbgrader")
@pytest.mark.parametrize("moment", ["after _swap_in", "during the staging clean-up"])
def test_source_stopped_after_the_swap_says_what_was_written(moment, tmp_path, monkeypatch, capsys):
    tools = import_script("nbgrader_tools")
    course = tmp_path / "course"
    real_swap_in, real_rmtree = tools._swap_in, shutil.rmtree

    def swap_in_then_signal(staging, target):
        real_swap_in(staging, target)
        os.kill(os.getpid(), signal.SIGTERM)  # a real signal, right after the course was swapped in

    def rmtree_signalled(path, *args, **kwargs):
        if Path(path).name.startswith(".course-source-"):
            os.kill(os.getpid(), signal.SIGTERM)  # as the clean-up starts
        return real_rmtree(path, *args, **kwargs)

    if moment == "after _swap_in":
        monkeypatch.setattr(tools, "_swap_in", swap_in_then_signal)
    else:
        monkeypatch.setattr(shutil, "rmtree", rmtree_signalled)
    cli.leaving(cli.NOTHING_WRITTEN)
    code = cli.run(lambda argv: tools.fill_course_source(course) and 0, [], "nbgrader_tools.py")
    monkeypatch.undo()
    err = capsys.readouterr().err
    assert code == 143, err
    assert f"every file of {course} was written" in err and "nothing was written" not in err, err
    assert (course / ".course_grader.json").exists() and (course / "nbgrader_config.py").exists()
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".course-source-")] == [], err


# version_matrix.py --venv '' is refused by its own rule ("the current folder ... would be emptied")
@pytest.mark.parametrize("script, argv, option", [
    ("safe_collect", ["03_dimension_walkthrough", "--exchange", "", "--course", "mha-course"], "--exchange")])
def test_an_empty_path_option_is_refused(script, argv, option, tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)  # '' was read as this folder
    with pytest.raises(SystemExit) as stopped:
        import_script(script).main(argv)
    err = capsys.readouterr().err
    assert stopped.value.code == 2, err
    assert f"argument {option}: " in err and "an empty path ''" in err, err


@pytest.mark.parametrize("what", ["", 3])
def test_path_type_checks_what(what):
    with pytest.raises(TypeError if what == 3 else ValueError, match="^what must be a non-empty str"):
        cli.path_type(what)


# -- battery 20 (fix50u) -----------------------------------------------------------------------------

# -- F2: the name label of pick_device and cli.words is checked, as check_seed's is -------------
@pytest.mark.parametrize("call, label", [
    (lambda label: env.pick_device("gpu", name=label), 5),
    (lambda label: env.pick_device("cpu", name=label), None),
    (lambda label: env.pick_device(None, name=label), ""),
    (lambda label: cli.words(3, name=label), None),
    (lambda label: cli.words(["a"], name=label), 7),
    (lambda label: cli.words(["a"], name=label), "  "),
])
def test_a_wrong_name_label_is_refused_naming_name(call, label):
    error = ValueError if isinstance(label, str) else TypeError
    message = raises_naming(error, ["name must be a non-empty str", repr(label)], lambda: call(label))
    assert not message.startswith(repr(label)), message  # "5 must be one of ...": the value as the name


# -- F3: cli.run checks a raised SystemExit's code as it checks a returned one ------------------
@pytest.mark.parametrize("code, error", [(True, TypeError), (False, TypeError), (2.5, TypeError),
                                         ((1, 2), TypeError), (300, ValueError), (-1, ValueError)])
def test_run_refuses_a_raised_systemexit_with_a_wrong_code(code, error):
    def main(argv):
        raise SystemExit(code)

    raises_naming(error, ["main(argv) raised SystemExit", repr(code), "expected an exit status"],
                  lambda: cli.run(main, [], "demo"))


@pytest.mark.parametrize("code", [None, 0, 2, 255, "a message"])
def test_run_lets_a_raised_systemexit_with_a_good_code_through(code):
    def main(argv):
        raise SystemExit(code)

    with pytest.raises(SystemExit) as stopped:
        cli.run(main, [], "demo")
    assert stopped.value.code == code


# -- F4: a --venv (or output folder) that is a FIFO or a device is named as what it is ------------
def _not_a_folder(kind: str, tmp_path: Path) -> Path:
    if kind == "FIFO":
        if not hasattr(os, "mkfifo"):
            pytest.skip("no FIFOs here")
        os.mkfifo(tmp_path / "fifo")
        return tmp_path / "fifo"
    if not (os.path.exists("/dev/null") and stat.S_ISCHR(os.stat("/dev/null").st_mode)):
        pytest.skip("no /dev/null character device here")
    return Path("/dev/null")


_KINDS = [("FIFO", "a FIFO (named pipe)"), ("device", "a character device")]


@pytest.mark.parametrize("below", [False, True])
@pytest.mark.parametrize("kind, words", _KINDS)
def test_version_matrix_venv_names_what_is_there(kind, words, below, tmp_path):
    version_matrix = import_script("version_matrix")
    there = _not_a_folder(kind, tmp_path)
    env_dir = there / "venv" if below else there
    message = raises_naming(version_matrix.InputError, [f"{there}: is {words}, expected a folder",
                                                        f"--venv {env_dir}"],
                            lambda: version_matrix._check_venv(env_dir))
    assert "is a file" not in message, message


@pytest.mark.parametrize("kind, words", _KINDS)
def test_notebook_tools_output_folder_names_what_is_there(kind, words, tmp_path):
    notebook_tools = import_script("notebook_tools")
    there = _not_a_folder(kind, tmp_path)
    raises_naming(notebook_tools.ToolError, [f"{there}: is {words}, expected a folder"],
                  lambda: notebook_tools.output_folder(there / "out"))


@pytest.mark.parametrize("kind, words", _KINDS)
def test_course_venv_folder_problem_names_what_is_there(kind, words, tmp_path):
    there = _not_a_folder(kind, tmp_path)
    problem = load_course().venv_folder_problem(there, "--venv")
    assert problem is not None and f"--venv {there} is {words}, not a folder" in problem, problem


def test_paths_path_kind_is_the_cli_rule(tmp_path):
    if hasattr(os, "mkfifo"):
        os.mkfifo(tmp_path / "fifo")
    (tmp_path / "f").write_text("x")
    for path in (tmp_path / "fifo", tmp_path / "f", tmp_path, tmp_path / "missing"):
        assert paths.path_kind(path) == cli.path_kind(path)
    raises_naming(TypeError, ["path must be", "int 3"], lambda: paths.path_kind(3))


# -- battery 20 (rerun) ------------------------------------------------------------------------------

@pytest.fixture
def interrupted_while_clearing_up(monkeypatch):
    """notebook_tools with a SIGINT arriving during its clearing up, as the handler raises it."""
    tools = import_script("notebook_tools")

    def signal_now(path):
        raise cli.Interrupted(signal.SIGINT, cli._left[0])

    monkeypatch.setattr(tools, "remove_leftovers", signal_now)
    yield tools
    cli.leaving(cli.NOTHING_WRITTEN)


@pytest.mark.parametrize("written, said", [
    ("every stamped file was written", "every stamped file was written"),
    (None, "it came once every file was written"),
])
def test_an_interruption_after_every_file_is_in_place_says_so(tmp_path, interrupted_while_clearing_up,
                                                               written, said):
    texts = {tmp_path / "a.txt": "new a", tmp_path / "b.txt": "new b"}
    (tmp_path / "a.txt").write_text("old a")
    with pytest.raises(cli.Interrupted) as caught:
        interrupted_while_clearing_up.write_all_atomically(texts, written=written)
    assert said in str(caught.value) and cli.NOTHING_WRITTEN not in str(caught.value), caught.value
    assert {p.name: p.read_text() for p in texts} == {"a.txt": "new a", "b.txt": "new b"}


def test_publish_names_what_it_wrote_when_stopped_after_writing(tmp_path, interrupted_while_clearing_up):
    publish = import_script("publish")
    target = tmp_path / "README.md"
    target.write_text("old")
    with pytest.raises(cli.Interrupted, match="every stamped file was written"):
        publish.write_all({target: "new"})
    assert target.read_text() == "new"


def test_an_interrupt_inside_a_weakref_callback_prints_one_line(tmp_path):
    script = tmp_path / "tool.py"
    script.write_text(textwrap.dedent(f"""
        import os, signal, sys, time
        sys.path.insert(0, {str(ROOT)!r})
        from course_utils import cli

        class Noisy:
            def __del__(self):  # the handler's Interrupted is raised here: Python cannot pass it on
                os.kill(os.getpid(), signal.SIGINT)
                time.sleep(0.05)

        def main(argv):
            thing = Noisy()
            del thing
            return 0

        sys.exit(cli.run(main, [], "tool.py"))
    """))
    # a guard on the test run only: at load 12 on 2 cores the child took over 60 s
    done = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=240)
    assert done.returncode == 130, done
    assert done.stderr.strip() == "tool.py: interrupted by SIGINT: nothing was written", done.stderr


# -- battery 21 (fix51u) -----------------------------------------------------------------------------

# -- group 2: an interruption while the venv is made leaves no folder behind -------------------------

# A stand-in for the standard library's venv (first on PYTHONPATH, so `import venv` and `python -m
# venv` both find it): create() starts a grandchild, as ensurepip starts pip, that writes into the
# new folder for a few seconds, then sleeps. Nothing is installed.
FAKE_VENV = '''
import os, subprocess, sys, time
WRITER = """
import os, sys, time
folder, marker = sys.argv[1], sys.argv[2]
open(marker, "w").close()
end = time.monotonic() + 6
while time.monotonic() < end:
    os.makedirs(os.path.join(folder, "lib"), exist_ok=True)
    open(os.path.join(folder, "lib", "pip-%d" % time.monotonic_ns()), "w").close()
    time.sleep(0.02)
"""
class EnvBuilder:
    def __init__(self, **kwargs):
        pass
    def create(self, env_dir):
        os.makedirs(env_dir, exist_ok=True)
        subprocess.Popen([sys.executable, "-c", WRITER, str(env_dir), os.environ["FAKE_VENV_MARKER"]])
        time.sleep(30)
'''


FAKE_VENV_MAIN = "import sys, venv\nvenv.EnvBuilder(with_pip=True, clear=True).create(sys.argv[-1])\n"


@needs_posix_signals_and_fifos
@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM])
def test_version_matrix_stopped_while_pip_writes_removes_the_new_venv(tmp_path, signum):
    fake = tmp_path / "fake" / "venv"
    fake.mkdir(parents=True)
    (fake / "__init__.py").write_text(FAKE_VENV)
    (fake / "__main__.py").write_text(FAKE_VENV_MAIN)
    marker, env_dir = tmp_path / "writing", tmp_path / "new-venv"
    env = dict(os.environ, PYTHONPATH=f"{fake.parent}{os.pathsep}{ROOT}", FAKE_VENV_MARKER=str(marker))
    run = subprocess.Popen([sys.executable, str(SCRIPTS / "version_matrix.py"), "floor", "--venv",
                            str(env_dir)], cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                           text=True, start_new_session=True)
    try:
        deadline = time.monotonic() + 60
        while not marker.exists() and run.poll() is None and time.monotonic() < deadline:
            time.sleep(0.05)
        assert marker.exists(), run.communicate(timeout=30)
        time.sleep(0.3)  # the grandchild is writing into env_dir now
        run.send_signal(signum)
        _, err = run.communicate(timeout=60)
        assert run.returncode == 128 + signum, err
        assert f"{env_dir} was removed" in err, err
        time.sleep(1.0)  # a grandchild still running would have made the folder again by now
        assert not env_dir.exists(), f"{env_dir} holds {sorted(p.name for p in env_dir.rglob('*'))[:5]}"
    finally:
        try:
            os.killpg(run.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        time.sleep(0.1)


# -- group 9: a read-only folder is the writer's one-line ToolError, not the clean-up's OSError -------
@needs_posix_signals_and_fifos
def test_a_write_into_a_read_only_folder_names_the_file(tmp_path, monkeypatch):
    import errno

    from bad_input_cases import import_script, raises_naming

    notebook_tools = import_script("notebook_tools")
    folder = tmp_path / "student"
    folder.mkdir()
    target = folder / "02_single_head_attention.ipynb"
    target.write_text("old")

    def read_only(*args, **kwargs):  # what a read-only mount answers, even for a name that is not there
        raise OSError(errno.EROFS, os.strerror(errno.EROFS), str(args[0]))

    monkeypatch.setattr(notebook_tools, "_new_file", read_only)
    monkeypatch.setattr(Path, "unlink", read_only)
    raises_naming(notebook_tools.ToolError, [str(target), "cannot be written", "Read-only file system"],
                  lambda: notebook_tools.write_all_atomically({target: "new"}))
    monkeypatch.undo()
    assert target.read_text() == "old" and sorted(p.name for p in folder.iterdir()) == [target.name]


# -- battery 21 (fix51v) -----------------------------------------------------------------------------

# -- group 11: cli.words's none_reads_sys_argv must be a bool -------------------------------------
@pytest.mark.parametrize("flag", ["no", "", 0, 1, None, [False]])
def test_words_refuses_a_non_bool_flag_naming_it(flag):
    raises_naming(TypeError, ["none_reads_sys_argv", "bool", type(flag).__name__, repr(flag)[:20]],
                  lambda: cli.words(None, none_reads_sys_argv=flag))


# -- group 13: cli.check_label checks name and what before the value ------------------------------
@pytest.mark.parametrize("value, name, what, error, words", [
    ("", None, "w", TypeError, ["name", "NoneType", "None"]),
    ("x", 3, "w", TypeError, ["name", "int", "3"]),
    ("x", "  ", "w", ValueError, ["name", "'  '"]),
    ("x", "label", None, TypeError, ["what", "NoneType"]),
    ("x", "label", "", ValueError, ["what", "''"]),
])
def test_check_label_names_a_wrong_name_or_what(value, name, what, error, words):
    message = raises_naming(error, words, lambda: cli.check_label(value, name, what))
    assert message.startswith(("name must", "what must")), message


def test_check_label_still_names_the_argument_for_a_wrong_value():
    raises_naming(ValueError, ["label", "''"], lambda: cli.check_label("", "label", "a row"))


# -- group 10: a signal while course_cli.load_cli loads cli.py ------------------------------------

# The child sends itself the signal while cli.py's code runs (an audit hook on its exec), i.e.
# before any handler of the course's exists: deterministic, unlike a timed kill.
_LOADING = """
import os, signal, sys
sys.path.insert(0, {scripts!r})
def hook(event, args):
    if event == "exec" and getattr(args[0], "co_filename", "").endswith("course_utils/cli.py"):
        os.kill(os.getpid(), signal.{sig})
sys.addaudithook(hook)
"""


def _child(code: str, sig: str) -> subprocess.CompletedProcess:
    source = _LOADING.format(scripts=str(SCRIPTS), sig=sig) + textwrap.dedent(code)
    return subprocess.run([sys.executable, "-c", source], capture_output=True, text=True, timeout=60)


@pytest.mark.parametrize("sig, status", [("SIGINT", 130), ("SIGTERM", 143)])
def test_a_signal_while_a_tool_loads_cli_gives_its_one_line(sig, status):
    done = _child("""
        from course_cli import load_cli
        load_cli().stop_at_once("demo_tool.py")
        print("went on")
    """, sig)
    assert "Traceback" not in done.stderr, done.stderr
    assert done.stderr.strip() == f"demo_tool.py: interrupted by {sig} while starting; nothing was written"
    assert done.returncode == status and "went on" not in done.stdout


def test_a_signal_while_a_library_loads_cli_reaches_its_handler_afterwards():
    done = _child("""
        import signal, sys, types
        lib = types.ModuleType("lib")  # a caller that is no tool's __main__
        exec("def get():\\n    from course_cli import load_cli\\n    return load_cli()", lib.__dict__)
        try:
            lib.get()
        except KeyboardInterrupt:
            print("interrupted after loading:", hasattr(sys.modules["course_utils.cli"], "run"))
        print("handler put back:", signal.getsignal(signal.SIGINT) is signal.default_int_handler)
    """, "SIGINT")
    assert done.returncode == 0, done.stderr
    assert "interrupted after loading: True" in done.stdout
    assert "handler put back: True" in done.stdout


# -- battery 21 (rerun) ------------------------------------------------------------------------------

CHILD = """
import pathlib, sys, time
pathlib.Path({marker!r}).write_text("started")
time.sleep(1.5)  # the interpreter still starting: no handler of the course's is set yet
sys.path.insert(0, {scripts!r})
from course_cli import load_cli
load_cli().stop_at_once("child.py")
print("ran to the end")
"""


PARENT = """
import sys
sys.path.insert(0, {scripts!r})
from course_cli import load_cli
sys.exit(load_cli().call([sys.executable, "-c", {child!r}], "parent.py", course_tool={tool}))
"""


def _stopped_while_starting(tmp_path: Path, send, course_tool: bool = True) -> subprocess.CompletedProcess:
    marker = tmp_path / "started"
    child = CHILD.format(marker=str(marker), scripts=str(SCRIPTS))
    parent = subprocess.Popen([sys.executable, "-c", PARENT.format(scripts=str(SCRIPTS), child=child,
                                                                    tool=course_tool)],
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                              start_new_session=True)
    deadline = time.monotonic() + 60
    while not marker.exists() and time.monotonic() < deadline and parent.poll() is None:
        time.sleep(0.01)
    assert marker.exists(), "the child never started"
    send(parent.pid)
    out, err = parent.communicate(timeout=60)
    return subprocess.CompletedProcess(parent.args, parent.returncode, out, err)


@pytest.mark.parametrize("send", [lambda pid: os.killpg(pid, signal.SIGINT),  # a terminal's Ctrl-C
                                  lambda pid: os.kill(pid, signal.SIGINT)],  # to the parent: relayed
                         ids=["to the whole group", "to the parent"])
def test_a_course_tool_stopped_while_its_interpreter_starts_says_one_line(tmp_path, send) -> None:
    done = _stopped_while_starting(tmp_path, send)
    assert done.returncode == 130, done
    assert "Traceback" not in done.stderr and "KeyboardInterrupt" not in done.stderr, done.stderr
    assert "child.py: interrupted by SIGINT while starting" in done.stderr
    assert "ran to the end" not in done.stdout


def test_call_leaves_the_callers_signal_mask_as_it_was(tmp_path) -> None:
    cli = import_script("course_cli").load_cli()
    before = signal.pthread_sigmask(signal.SIG_BLOCK, [])
    assert cli.call([sys.executable, "-c", "pass"], "test", course_tool=True) == 0
    with pytest.raises(OSError, match="command\\[0\\]"):
        cli.call([str(tmp_path / "no-such-program")], "test", course_tool=True)
    with pytest.raises(TypeError):  # Popen's own refusal of an unknown keyword
        cli.call([sys.executable, "-c", "pass"], "test", course_tool=True, no_such_option=1)
    assert signal.pthread_sigmask(signal.SIG_BLOCK, []) == before


@pytest.mark.parametrize("value", ["yes", 1, None])
def test_call_refuses_a_course_tool_that_is_not_a_bool(value) -> None:
    cli = import_script("course_cli").load_cli()
    with pytest.raises(TypeError, match="course_tool must be a bool"):
        cli.call([sys.executable, "-c", "pass"], "test", course_tool=value)


# -- battery 22 (fix52u) -----------------------------------------------------------------------------

tools = import_script("nbgrader_tools")


def _file_bytes(folder: Path) -> dict[str, bytes]:
    """Every file under ``folder`` (links not followed) with its bytes."""
    return {p.relative_to(folder).as_posix(): p.read_bytes()
            for p in sorted(folder.rglob("*")) if p.is_file() and not p.is_symlink()}


# -- G2: a course nbgrader_config.py that does not load is refused, not kept ------------------------
BROKEN_CONFIGS = {
    "syntax error": ("c = get_config()\nc.Exchange.course_id = (\n", "SyntaxError", 2),
    "NameError": ("c = get_config()\nc.Exchange.root = undefined_root\n", "NameError", 2),
    "raises SystemExit": ("c = get_config()\n\nraise SystemExit(3)\n", "SystemExit", 3),
    "broken after an old block": ("c = get_config()\n" + tools.grading_config_block()
                                  + "c.X.y = missing\n", "NameError", 7),
}


@pytest.mark.parametrize("case", list(BROKEN_CONFIGS))
def test_source_refuses_a_course_config_that_does_not_load(case, tmp_path, capsys):
    text, error, line = BROKEN_CONFIGS[case]
    course = tmp_path / "course"
    course.mkdir()
    (course / "nbgrader_config.py").write_text(text)
    raises_naming(tools.SourceError, ["nbgrader_config.py", error, f"line {line}"],
                  lambda: tools.grading_config_text(course))
    assert tools.main(["source", str(course)]) == 2
    err = capsys.readouterr().err
    assert "nbgrader_config.py" in err and error in err and f"line {line}" in err
    assert "nothing was written" in err and err.count("\n") == 1
    assert _file_bytes(course) == {"nbgrader_config.py": text.encode()}  # nothing written


@pytest.mark.parametrize("kept", [
    'c = get_config()\nc.CourseDirectory.course_id = "mha"\n',
    'c.CourseDirectory.course_id = "mha"\n',  # traitlets gives c: no get_config() needed
    'c.CourseDirectory.course_id = "mha"\nc = get_config()\n',  # c used before it is asked for
], ids=["get_config first", "c alone", "c before get_config"])
def test_a_config_that_loads_is_kept_with_the_grading_block(kept, tmp_path):
    course = tmp_path / "course"
    course.mkdir()
    (course / "nbgrader_config.py").write_text(kept + tools.grading_config_block())
    text = tools.grading_config_text(course)
    assert kept in text and text.count(tools.CONFIG_BEGIN) == 1  # c = get_config() put first if missing


# -- battery 34 (g5): a grading block whose markers are out of order, missing or doubled -------------
MISPLACED_MARKERS = {
    "end before begin": (f"c = get_config()\n{tools.CONFIG_END}\nc.X = 1\n{tools.CONFIG_BEGIN}\n",
                         "end marker before its begin marker"),
    "begin without end": (f"c = get_config()\n{tools.CONFIG_BEGIN}\nc.X = 1\n",
                          "begin marker without its end marker"),
    "end without begin": (f"c = get_config()\nc.X = 1\n{tools.CONFIG_END}\n",
                          "end marker without its begin marker"),
    "two begins": (f"c = get_config()\n{tools.CONFIG_BEGIN}\n{tools.grading_config_block()}",
                   "2 begin and 1 end markers"),
}


@pytest.mark.parametrize("case", list(MISPLACED_MARKERS))
def test_source_refuses_misplaced_grading_markers_naming_the_file(case, tmp_path, capsys):
    """QA battery 34: an end marker before the begin one was a ValueError traceback (not enough values
    to unpack) from grading_config_text; a begin without an end got a second block appended."""
    text, found = MISPLACED_MARKERS[case]
    course = tmp_path / "course"
    course.mkdir()
    (course / "nbgrader_config.py").write_text(text)
    raises_naming(tools.SourceError, ["nbgrader_config.py", found], lambda: tools.grading_config_text(course))
    assert tools.main(["source", str(course)]) == 2
    err = capsys.readouterr().err
    assert "nbgrader_config.py" in err and found in err and "Traceback" not in err
    assert "nothing was written" in err and err.count("\n") == 1
    assert _file_bytes(course) == {"nbgrader_config.py": text.encode()}  # nothing written


def test_build_reads_a_draft_that_starts_with_a_byte_order_mark(tmp_path, capsys):
    """QA battery 34: a draft saved with a UTF-8 BOM (Windows editors) was said to have no '# %%'
    marker, though its first line is one; notebooks and configs read through read_text alike."""
    tools = import_script("notebook_tools")
    draft, out = tmp_path / "draft.py", tmp_path / "out.ipynb"
    draft.write_bytes(b"\xef\xbb\xbf# %%\nx = 1\n")
    assert tools.main(["build", str(draft), str(out)]) == 0, capsys.readouterr().err
    cells = nbformat.read(out, as_version=4).cells
    assert [(c.cell_type, c.source) for c in cells] == [("code", "x = 1")]
    notebook = tmp_path / "bom.ipynb"
    notebook.write_bytes(b"\xef\xbb\xbf" + out.read_bytes())
    assert tools.read_notebook(notebook).cells[0].source == "x = 1"
    draft.write_bytes(b"\xef\xbb\xbf# %%\n\xff\n")  # the byte named is counted from the file's start
    raises_naming(tools.ToolError, [str(draft), "not UTF-8 text", "at byte 8"],
                  lambda: tools.read_text(draft, "draft"))


# -- G5: source never writes through a link below COURSE_DIR, nor inside the clone ------------------
@pytest.mark.parametrize("case", ["source is a link", "a lesson folder is a link", "course links into clone"])
def test_swap_in_refuses_a_destination_through_a_link_or_in_the_clone(case, tmp_path, monkeypatch):
    clone = tmp_path / "clone"
    (clone / "docs").mkdir(parents=True)
    (clone / "notebooks").mkdir()
    (clone / "notebooks" / "02_x.ipynb").write_text("instructor's lesson")
    monkeypatch.setattr(tools, "ROOT", clone)
    staging = tmp_path / "staging"
    (staging / "source" / "02_x").mkdir(parents=True)
    (staging / "source" / "02_x" / "02_x.ipynb").write_text("student copy")
    (staging / "nbgrader_config.py").write_text("c = get_config()\n")
    course = tmp_path / "course"
    if case == "source is a link":
        course.mkdir()
        os.symlink(clone / "docs", course / "source")
        named = course / "source"
    elif case == "a lesson folder is a link":
        (course / "source").mkdir(parents=True)
        os.symlink(clone / "notebooks", course / "source" / "02_x")
        named = course / "source" / "02_x"
    else:
        os.symlink(clone / "docs", course)
        named = course
    before = _file_bytes(clone)
    raises_naming(tools.SourceError, [str(named)], lambda: tools._swap_in(staging, course))
    assert _file_bytes(clone) == before
    assert sorted(p.name for p in (clone / "docs").iterdir()) == []


# -- battery 22 (fix52v) -----------------------------------------------------------------------------

STOPPING_CHILD_TOOL = """
import atexit, os, signal, sys, time
sys.path.insert(0, {scripts!r})
from course_cli import load_cli
cli = load_cli()
cli.stop_at_once("child.py")

def main(argv):
    if {when!r} == "mid-work":  # the parent is stopped while the tool works: relayed to it
        os.kill(os.getppid(), {signum})
        time.sleep(30)
    print("wrote 94 files", flush=True)

def stopped_once_done():  # the work is done; the parent gets the signal while this one ends
    os.kill(os.getppid(), {signum})
    time.sleep(0.5)

if {when!r} == "after-child-done":
    atexit.register(stopped_once_done)
sys.exit(cli.run(main, [], "child.py"))
"""


CALLING_PARENT_TOOL = """
import signal, sys
sys.path.insert(0, {scripts!r})
from course_cli import load_cli
cli = load_cli()
cli.stop_at_once("parent.py")

def main(argv):
    code = cli.call([sys.executable, "-c", {child!r}], "parent.py student-tree", course_tool=True)
    if {when!r} == "after-call-returned":  # the signal reaches the parent just after call() returned
        signal.raise_signal({signum})
    return code

cli.leaving(cli.NOTHING_WRITTEN)
sys.exit(cli.run(main, [], "parent.py"))
"""


SIGNALS = [signal.SIGINT, signal.SIGTERM]


def _parent(when: str, signum: int) -> subprocess.CompletedProcess:
    child = STOPPING_CHILD_TOOL.format(scripts=str(SCRIPTS), when=when, signum=int(signum))
    parent = CALLING_PARENT_TOOL.format(scripts=str(SCRIPTS), child=child, when=when, signum=int(signum))
    return subprocess.run([sys.executable, "-c", parent], capture_output=True, text=True, timeout=120)


@needs_posix_signals
@pytest.mark.parametrize("when", ["after-child-done", "after-call-returned"])
@pytest.mark.parametrize("signum", SIGNALS, ids=[s.name for s in SIGNALS])
def test_a_signal_once_the_course_tool_is_done_is_ignored(when: str, signum: int) -> None:
    """The tool wrote everything and exited 0: the command is done, exit 0, no line about an
    interruption (it was 128 + the signal with no line, or a false "nothing was written")."""
    done = _parent(when, signum)
    assert (done.returncode, done.stderr) == (0, ""), (signal.Signals(signum).name, when, done)
    assert done.stdout == "wrote 94 files\n", done.stdout


@needs_posix_signals
@pytest.mark.parametrize("signum", SIGNALS, ids=[s.name for s in SIGNALS])
def test_a_course_tool_stopped_mid_work_still_says_its_one_line(signum: int) -> None:
    done = _parent("mid-work", signum)
    name = signal.Signals(signum).name
    assert done.returncode == 128 + signum, done
    assert done.stderr.splitlines() == [f"child.py: interrupted by {name}: {cli.NOTHING_WRITTEN}"], done
    assert done.stdout == "", done.stdout


@needs_posix_signals
def test_call_outside_a_tool_puts_the_handlers_back() -> None:
    """In a library (no stop_at_once), call(course_tool=True) leaves the caller's handlers as they were."""
    before = {sig: signal.getsignal(sig) for sig in cli.STOP_SIGNALS}
    assert cli.call([sys.executable, "-c", "pass"], "test", course_tool=True) == 0
    assert {sig: signal.getsignal(sig) for sig in cli.STOP_SIGNALS} == before


# -- battery 23 (fix54) ------------------------------------------------------------------------------

# -- exercise_answers.py: a solutions module that raises at import is one line ---------------------
def test_exercise_answers_names_the_solutions_line_that_raised(monkeypatch, capsys):
    """Battery 23: ZeroDivisionError at import of solutions/lesson04.py printed a traceback."""
    script = import_script("exercise_answers")
    where = ROOT / "solutions" / "lesson04.py"
    code = compile("\n" * 9 + "def attach():\n    1 / 0\n", str(where), "exec")
    fake = types.ModuleType("solutions")
    exec(code, fake.__dict__)
    monkeypatch.setitem(sys.modules, "solutions", fake)
    monkeypatch.setattr(script, "compute", lambda: pytest.fail("built past a solutions module that raised"))
    assert script.main(["build"]) == 1
    err = capsys.readouterr().err
    assert err.count("\n") == 1, err
    assert "solutions/lesson04.py, line 11: ZeroDivisionError: division by zero" in err, err
    assert "no stored answer was written" in err, err


# -- battery 24 (fix54b) -----------------------------------------------------------------------------

# -- run_kernel's message ------------------------------------------------------------------------------
def test_run_kernel_refuses_an_empty_message_and_closes_the_coroutine():
    async def work():
        return 1

    coroutine = work()
    raises_naming(ValueError, ["message", "non-empty"], lambda: cli.run_kernel(coroutine, " "))
    assert coroutine.cr_frame is None  # closed: no "never awaited" warning
    assert asyncio.iscoroutine(coroutine)


# -- battery 26 (fix56) ------------------------------------------------------------------------------

# -- commands and grading ------------------------------------------------------------------------------
def test_check_path_names_a_path_like_whose_fspath_is_no_path() -> None:
    import os

    from course_utils import paths
    from course_utils.cli import check_path

    class BadFspath(os.PathLike):
        def __fspath__(self):
            return 7

    for check in (check_path, paths.check_path):
        raises_naming(TypeError, ["my_arg", "a notebook", "BadFspath", "__fspath__", "not int"],
                      lambda check=check: check(BadFspath(), "my_arg", "a notebook"))


def test_words_names_the_word_that_is_not_exactly_str() -> None:
    from course_utils.cli import words

    class StrSub(str):
        pass

    raises_naming(TypeError, ["my_argv[1]", "StrSub", "'b'", "not exactly str"],
                  lambda: words(["a", StrSub("b")], "my_argv"))


# -- battery 27 (fix57) ------------------------------------------------------------------------------

# -- a deleted current folder ----------------------------------------------------------------------------
def _in_a_deleted_folder(*command: str) -> subprocess.CompletedProcess:
    gone = tempfile.mkdtemp()
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    return subprocess.run(["sh", "-c", f'cd "{gone}" && rmdir "{gone}" && exec "$@"', "sh", *command],
                          env=env, capture_output=True, text=True, timeout=120)


def test_a_tool_started_in_a_deleted_folder_says_so_in_one_line() -> None:
    result = _in_a_deleted_folder(sys.executable, "-m", "course_utils.bench", "mha", "--repeats", "1")
    assert result.returncode == 2, result.stderr
    assert "python -m course_utils.bench: the current folder cannot be read" in result.stderr
    assert "Traceback" not in result.stderr and "FATAL" not in result.stderr


def test_importing_the_package_in_a_deleted_folder_is_an_import_error_saying_why() -> None:
    result = _in_a_deleted_folder(sys.executable, "-c", "import course_utils")
    assert result.returncode == 1, result.stderr
    assert "ImportError: course_utils cannot be imported: the current folder cannot be read" in result.stderr


# -- battery 28 (grading) ----------------------------------------------------------------------------

def test_safe_collect_outside_a_course_folder_collects_nothing_and_writes_nothing(tmp_path):
    (tmp_path / "exchange" / "c" / "inbound").mkdir(parents=True)
    here = tmp_path / "not_a_course"
    here.mkdir()
    done = subprocess.run([sys.executable, str(SCRIPTS / "safe_collect.py"), "01_x", "--exchange",
                           str(tmp_path / "exchange"), "--course", "c", "--owner", "off"], cwd=here,
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 2, (done.returncode, done.stdout, done.stderr[-800:])
    assert "expected nbgrader_config.py" in done.stderr and "nothing was collected" in done.stderr
    assert list(here.iterdir()) == []


def test_words_reads_a_list_whose_len_lies():
    from course_utils import cli

    class Lying(list):
        def __len__(self) -> int:
            return -1

    assert cli.words(Lying(["a", "b"])) == ["a", "b"]
    with pytest.raises(TypeError, match=r"argv\[1\] is int 3"):
        cli.words(Lying(["a", 3]))


# -- battery 28 (library) ----------------------------------------------------------------------------

def _repr_raising_cases() -> list:
    from course_utils import cli
    from course_utils.bench import cli as bench_cli
    from course_utils.bench.mha_speed import sweep_mha

    bad = BadRepr()
    return [
        ("Interrupted message", lambda: cli.Interrupted(2, bad), TypeError, ["message"]),
        ("check_path", lambda: cli.check_path(bad, "out"), TypeError, ["out"]),
        ("check_label value", lambda: cli.check_label(bad, "prog", "the tool"), TypeError, ["prog"]),
        ("check_label name", lambda: cli.check_label("x", bad, "the tool"), TypeError, ["name"]),
        ("words", lambda: cli.words(bad), TypeError, ["argv"]),
        ("words item", lambda: cli.words(["a", bad]), TypeError, ["argv[1]"]),
        ("words flag", lambda: cli.words([], none_reads_sys_argv=bad), TypeError, ["none_reads_sys_argv"]),
        ("run_in_group check", lambda: cli.run_in_group(["true"], check=bad), TypeError, ["check"]),
        ("run_in_group patience", lambda: cli.run_in_group(["true"], patience=bad), ValueError, ["patience"]),
        ("bench check_text", lambda: bench_cli.check_text(bad, "positive_int"), TypeError, ["positive_int"]),
        ("bench check_subparsers", lambda: bench_cli.check_subparsers(bad, "mha"), TypeError, ["subparsers"]),
        ("bench Distinct key", lambda: bench_cli.Distinct(["--x"], "x", key=bad), TypeError, ["key"]),
        ("sweep_mha varied size", lambda: sweep_mha("batch", [1, 2], batch=bad), ValueError, ["batch"]),
    ]


@pytest.mark.parametrize("case", range(13))
def test_a_value_whose_repr_raises_leaves_the_message_intact(case: int) -> None:
    label, call, error, words = _repr_raising_cases()[case]
    raises_naming(error, [*words, "BadRepr whose repr raised RuntimeError"], call)


# -- battery 29 (commands) ---------------------------------------------------------------------------

# --- student-tree: a second run at once, and an OUT stdout cannot encode --------------------
def test_student_tree_made_meanwhile_by_another_run_is_named_not_an_errno(tmp_path, monkeypatch):
    """b29 student_tree_two_runs_errno: the slower of two runs at once said "[Errno 39] Directory
    not empty: '.../.tree.xxxx' -> '.../tree'", naming a staging folder the user never chose."""
    tree = load_script_copy("student_tree")
    out = tmp_path / "tree"

    def the_other_run_finishes(folder):  # while this run copies, the other one renames its tree
        out.mkdir()
        (out / "README.md").write_text("the other run's tree")

    monkeypatch.setattr(tree, "_point_links_at_the_tree", the_other_run_finishes)
    with pytest.raises(FileExistsError, match="already exists") as caught:
        tree.build(out)
    assert "Errno" not in str(caught.value) and ".tree." not in str(caught.value)
    assert [p.name for p in tmp_path.iterdir()] == ["tree"]  # no staging folder left
    assert (out / "README.md").read_text() == "the other run's tree"


def test_student_tree_into_a_folder_stdout_cannot_encode_succeeds(tmp_path, monkeypatch):
    """b29 student_tree_ascii_out_fails_after_writing: with PYTHONIOENCODING=ascii and OUT 'trée',
    the tree was written, then printing "wrote N files into trée" failed: exit 2, tree left behind."""
    import io

    tree = load_script_copy("student_tree")
    out = tmp_path / "tr\u00e9e"

    def build(folder):
        folder.mkdir()
        return ["README.md"]

    monkeypatch.setattr(tree, "build", build)
    stdout = io.TextIOWrapper(io.BytesIO(), encoding="ascii")
    monkeypatch.setattr(sys, "stdout", stdout)
    code = tree._main([str(out)])
    stdout.flush()
    written = stdout.buffer.getvalue().decode("ascii")
    monkeypatch.undo()
    assert code == 0 and out.is_dir(), written
    assert "wrote 1 files into" in written and "tr\\xe9e" in written


# -- battery 29 (rerun) ------------------------------------------------------------------------------

@pytest.mark.parametrize("args, name", [
    (("README.md", LyingStr(".")), "root"),
    ((LyingStr("README.md"), "."), "path"),
])
def test_place_in_path_whose_str_raises_named_not_a_loop(args, name):
    from course_utils.cli import place_in

    with pytest.raises(TypeError, match=f"{name} must be a str or Path .*whose str\\(\\) raised"):
        place_in(*args)


def test_path_kind_path_whose_str_raises_named():
    from course_utils.cli import path_kind

    with pytest.raises(TypeError, match="path must be a str or Path .*whose str\\(\\) raised"):
        path_kind(LyingStr("README.md"))


# -- battery 30 (dev) --------------------------------------------------------------------------------

@pytest.mark.parametrize("width", [2.5, -1, True])
def test_cli_shown_refuses_a_bad_width_by_name_as_its_twin_does(width):
    from course_utils.attention import validation
    from course_utils.cli import shown

    for twin in (shown, validation.shown):
        with pytest.raises(TypeError, match="width must be None or an int >= 0"):
            twin([1, 2, 3], width)


# -- battery 30 (e) ----------------------------------------------------------------------------------

def test_place_in_in_deleted_current_folder_says_so():
    import os
    import tempfile

    import pytest

    from course_utils.cli import place_in

    here = os.getcwd()
    gone = tempfile.mkdtemp()
    os.chdir(gone)
    os.rmdir(gone)
    try:
        with pytest.raises(ValueError, match="current folder") as info:
            place_in("x", ".")
        assert "symbolic link" not in str(info.value)
    finally:
        os.chdir(here)


def test_check_label_returns_the_plain_str_a_subclass_holds():
    """The root of the label family: check_label handed a str subclass back as it came, so each
    caller's f-string called its own raising ``__str__`` (timing wrapped it in plain_str by hand)."""
    from course_utils.bench.timing import check_function_name

    label = cli.check_label(LyingStr("baseline"), "name", "a label")
    assert type(label) is str and label == "baseline"
    raises_naming(ValueError, ["baseline", "f"],
                  lambda: check_function_name("g", LyingStr("baseline"), ["f"]))


# -- battery 33: a path with a name longer than the file system takes (ENAMETOOLONG) -------------------
LONG_NAME = "n" * 300


@pytest.mark.parametrize(("script", "args", "named"), [
    ("nbgrader_tools", ["source", "{long}"], "COURSE_DIR must name"),
    ("nbgrader_tools", ["convert", "{long}.ipynb"], "NOTEBOOK.ipynb must name"),
    ("notebook_tools", ["student", "{long}", str(ROOT / "notebooks" / "02_single_head_attention.ipynb")],
     "OUT_DIR must name"),
    ("notebook_tools", ["build", "{long}.py", "{tmp}/out.ipynb"], "DRAFT.py must name"),
    ("notebook_tools", ["execute", "{long}.ipynb"], "NOTEBOOK.ipynb must name"),
    ("safe_collect", ["--exchange", "{long}", "--course", "c", "03_dimension_walkthrough"], "--exchange"),
    ("version_matrix", ["floor", "--venv", "{long}"], "--venv"),
    ("student_tree", ["{long}"], "OUT_DIR must name"),
], ids=lambda v: v if isinstance(v, str) and not v.endswith("must name") else None)
def test_a_path_with_a_name_too_long_is_one_line_naming_the_argument(tmp_path, script, args, named):
    """QA battery 33: a 300-character folder or file name gave a raw "OSError: [Errno 36] File
    name too long" traceback from stat or mkdir. cli.path_problem names it on one line, exit 2,
    before anything is made."""
    long = str(tmp_path / LONG_NAME)
    argv = [a.format(long=long, tmp=tmp_path) for a in args]
    done = subprocess.run([sys.executable, str(SCRIPTS / f"{script}.py"), *argv], capture_output=True,
                          text=True, timeout=300, cwd=tmp_path,
                          env=dict(os.environ, PYTHONPATH=str(ROOT), COURSE_VENV=sys.prefix))
    last = done.stderr.strip().splitlines()[-1] if done.stderr.strip() else ""
    assert done.returncode == 2 and "Traceback" not in done.stderr, done.stderr[-2000:]
    assert named in last and "File name too long" in last and "255 bytes" in last, done.stderr
    assert sorted(os.listdir(tmp_path)) == [], os.listdir(tmp_path)


def test_path_problem_names_each_path_the_system_cannot_take(tmp_path):
    assert cli.path_problem(tmp_path, "--out", "a folder") is None
    assert cli.path_problem(tmp_path / "new" / "deeper", "--out", "a folder") is None  # may be made
    long = cli.path_problem(tmp_path / "missing" / LONG_NAME, "--out", "a folder")
    assert long.startswith("--out must name a folder, each name in it at most 255 bytes") and "300" in long
    assert f"got '{tmp_path}"[:40] in long  # cut in the middle: its start and its end show
    assert long.endswith("nnnn' with a name of 300 bytes (File name too long)")
    whole = cli.path_problem(str(tmp_path) + "/a" * 3000, "--out", "a folder")
    assert "fewer than 4096 bytes in all" in whole and "File name too long" in whole
    (tmp_path / "loop").symlink_to(tmp_path / "loop")
    loop = cli.path_problem(tmp_path / "loop" / "x", "COURSE_DIR", "a folder")
    assert loop.startswith("COURSE_DIR must name a folder, got") and "loops" in loop
    assert cli.path_problem("", "--out", "a folder").startswith("--out must name a folder, got an empty")
    assert "a path with a name longer" in cli.path_kind(tmp_path / LONG_NAME)
