"""Bad command lines and input files for course.py and the scripts: one line on stderr that
names the argument or file and what is wrong, exit status 2, and nothing written.

Every case runs on temporary files; none installs, runs pytest or touches the repository.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import nbformat
import pytest
from bad_input_cases import load_course

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "scripts"))

import notebook_tools  # noqa: E402
import publish  # noqa: E402
import version_matrix  # noqa: E402

course = load_course()


def _one_line(err: str, *words: str) -> None:
    lines = err.strip().splitlines()
    assert len(lines) == 1, err
    missing = [w for w in words if w not in lines[0]]
    assert not missing, f"{missing} not in: {lines[0]}"


@pytest.fixture
def no_install(monkeypatch):
    """course.py must answer before it sets anything up or starts pytest."""
    def refuse(*args, **kwargs):
        raise AssertionError("course.py went on to install or run something")

    monkeypatch.setattr(course, "ensure_environment", refuse)
    monkeypatch.setattr(course.subprocess, "call", refuse)


# -- course.py -------------------------------------------------------------------------------
def test_course_unknown_command_is_named(no_install, capsys):
    assert course.main(["frobnicate"]) == 2
    _one_line(capsys.readouterr().err, "unknown command 'frobnicate'", "lab, test")


def test_course_no_command_prints_the_help(no_install, capsys):
    assert course.main([]) == 2
    assert "python3 course.py lab" in capsys.readouterr().out


def test_course_test_names_a_missing_path_before_starting_pytest(no_install, capsys):
    assert course.main(["test", "no/such/path_test.py"]) == 2
    _one_line(capsys.readouterr().err, "no/such/path_test.py", "no such test file or folder")
    assert course.main(["test", "-q", "tests/test_masks.py::test_x", "tests/nope.py"]) == 2
    err = capsys.readouterr().err
    _one_line(err, "tests/nope.py")
    assert "test_masks" not in err


def test_course_test_paths_and_option_values_are_told_apart():
    args = ["-k", "foo/bar.py", "-m", "not slow", "tests/test_masks.py::test_causal_mask_square_and_offset",
            "--ignore=tests/gone.py", "--ignore", "tests/gone_too.py", "notebooks", "-x",
            "tests/nope.py", "nope.ipynb", "nope::test"]
    assert course.missing_test_paths(args) == ["tests/nope.py", "nope.ipynb", "nope::test"]
    assert course.missing_test_paths(["notebooks/00_start_here.ipynb", "-m", "slow"]) == []


# -- publish.py ------------------------------------------------------------------------------
@pytest.mark.parametrize("argv, word", [(["frobnicate"], "frobnicate"), (["--frob"], "--frob")])
def test_publish_unknown_argument_is_named(argv, word, capsys):
    with pytest.raises(SystemExit) as info:
        publish.main(argv, root=Path("/nonexistent"))
    assert info.value.code == 2 and word in capsys.readouterr().err


# -- notebook_tools.py -----------------------------------------------------------------------
def _notebook(path: Path, source: str = "x = 1\n### BEGIN SOLUTION\ny = 2\n### END SOLUTION") -> Path:
    nbformat.write(nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(source)]), path)
    return path


def _snapshot(root: Path) -> dict[str, bytes]:
    return {p.relative_to(root).as_posix(): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


@pytest.fixture
def files(tmp_path: Path) -> Path:
    _notebook(tmp_path / "good.ipynb")
    (tmp_path / "text.ipynb").write_text("not json")
    (tmp_path / "invalid.ipynb").write_text('{"nbformat": 4, "nbformat_minor": 5, "metadata": {}, '
                                            '"cells": "x"}')
    (tmp_path / "empty.ipynb").write_text("{}")
    (tmp_path / "draft.py").write_text("print('no cell markers')\n")
    (tmp_path / "good_draft.py").write_text("# %%\nx = 1\n")
    (tmp_path / "a_file").write_text("I am not a folder")
    return tmp_path


@pytest.mark.parametrize("argv, words", [
    (["frobnicate", "x"], ["unknown command 'frobnicate'", "build, execute, student, upgrade"]),
    (["student", "{tmp}/out"], ["student takes OUT_DIR NOTEBOOK.ipynb", "'{tmp}/out'"]),
    (["upgrade", "--force", "{tmp}/good.ipynb"], ["unknown option --force", "upgrade"]),
    (["student", "--dry-run", "{tmp}/out", "{tmp}/good.ipynb"], ["unknown option --dry-run"]),
    (["build", "{tmp}/draft.py"], ["build takes DRAFT.py OUT.ipynb"]),
    (["upgrade", "{tmp}/missing.ipynb"], ["{tmp}/missing.ipynb: no such notebook"]),
    (["upgrade", "{tmp}"], ["{tmp}: is a folder, expected a notebook"]),
    (["upgrade", "{tmp}/good.ipynb", "{tmp}/text.ipynb"], ["{tmp}/text.ipynb: not a notebook", "not JSON"]),
    (["upgrade", "{tmp}/invalid.ipynb"], ["{tmp}/invalid.ipynb: not a valid notebook"]),
    (["execute", "{tmp}/empty.ipynb"], ["{tmp}/empty.ipynb: not a valid notebook"]),
    (["student", "{tmp}/a_file", "{tmp}/good.ipynb"], ["{tmp}/a_file: is a file, expected a folder"]),
    (["student", "{tmp}/a_file/out", "{tmp}/good.ipynb"], ["{tmp}/a_file: is a file, expected a folder"]),
    (["student", "{tmp}/out", "{tmp}/good.ipynb", "{tmp}/invalid.ipynb"], ["{tmp}/invalid.ipynb"]),
    (["student", "{tmp}/out", "{tmp}/missing.ipynb"], ["{tmp}/missing.ipynb: no such notebook"]),
    (["student", "/proc/no_such_course_folder", "{tmp}/good.ipynb"],
     ["/proc/no_such_course_folder", "cannot make the student folder"]),
    (["build", "{tmp}/draft.py", "{tmp}/new.ipynb"], ["{tmp}/draft.py", "no '# %%' cell marker"]),
    (["build", "{tmp}/missing.py", "{tmp}/new.ipynb"], ["{tmp}/missing.py: no such draft"]),
    (["build", "{tmp}/good_draft.py", "{tmp}/a_file/new.ipynb"], ["{tmp}/a_file: is a file"]),
    (["build", "{tmp}/good_draft.py", "{tmp}/new.txt"], ["{tmp}/new.txt", "must end in .ipynb"]),
    (["execute", "--timeout"], ["--timeout takes a number of seconds, got nothing"]),
    (["execute", "--timeout", "0", "{tmp}/good.ipynb"], ["whole number of seconds >= 1", "'0'"]),
    (["execute", "--timeout=ten", "{tmp}/good.ipynb"], ["whole number of seconds >= 1", "'ten'"]),
    (["execute", "--timeout", "5"], ["execute takes [--timeout SECONDS] NOTEBOOK.ipynb"]),
])
def test_notebook_tools_bad_input_is_one_line_and_writes_nothing(files, capsys, argv, words):
    before = _snapshot(files)
    fill = lambda text: text.replace("{tmp}", str(files))  # noqa: E731
    assert notebook_tools.main([fill(a) for a in argv]) == 2
    _one_line(capsys.readouterr().err, "notebook_tools.py:", *[fill(w) for w in words])
    assert _snapshot(files) == before


def _solution_notebook(path, source):
    nb = nbformat.v4.new_notebook()
    nb.cells = [nbformat.v4.new_markdown_cell("# T"), nbformat.v4.new_code_cell(source)]
    nbformat.write(nb, path)


@pytest.mark.parametrize("source, words", [
    ("x = 1\n### BEGIN SOLUTION\nanswer = 42\n", ["cell 2, line 2", "BEGIN SOLUTION with no"]),
    ("answer = 42\n### END SOLUTION\n", ["cell 2, line 2", "END SOLUTION with no"]),
    ("### BEGIN SOLUTION\na = 1\n### BEGIN SOLUTION\nb = 2\n### END SOLUTION\n",
     ["cell 2, line 3", "a second ### BEGIN SOLUTION"]),
])
def test_notebook_tools_student_refuses_an_unpaired_solution_marker(tmp_path, capsys, source, words):
    _notebook(tmp_path / "good.ipynb")
    _solution_notebook(tmp_path / "leak.ipynb", source)
    before = _snapshot(tmp_path)
    argv = ["student", str(tmp_path / "out"), str(tmp_path / "good.ipynb"), str(tmp_path / "leak.ipynb")]
    assert notebook_tools.main(argv) == 2
    _one_line(capsys.readouterr().err, "notebook_tools.py:", str(tmp_path / "leak.ipynb"), *words)
    assert _snapshot(tmp_path) == before and not (tmp_path / "out").exists()


@pytest.mark.parametrize("source, argv, words", [
    ("raise ValueError('broken cell')", [], ["a cell raised ValueError: broken cell"]),
    ("import time\ntime.sleep(30)", ["--timeout", "1"], ["longer than the 1 s cell timeout"]),
])
def test_notebook_tools_execute_failure_is_one_line_exit_2(tmp_path, source, argv, words):
    path = _notebook(tmp_path / "bad.ipynb", source)
    before = path.read_bytes()
    done = subprocess.run([sys.executable, str(ROOT / "scripts" / "notebook_tools.py"), "execute",
                           *argv, str(path)], capture_output=True, text=True, timeout=120)
    assert done.returncode == 2, done.stderr
    # the kernel's own log lines share stderr; the tool's report is exactly one line of it
    ours = [line for line in done.stderr.splitlines() if line.startswith("notebook_tools.py:")]
    assert len(ours) == 1, done.stderr
    assert all(w in ours[0] for w in (str(path), *words, "the notebook was not changed")), ours[0]
    assert path.read_bytes() == before


def _student_inputs(tmp_path: Path, existing: bool) -> tuple[Path, Path, Path]:
    """Two lessons and the student folder (absent, or holding an old copy of each)."""
    first, second, out = _notebook(tmp_path / "a.ipynb"), _notebook(tmp_path / "b.ipynb"), tmp_path / "out"
    if existing:
        out.mkdir()
        (out / "a.ipynb").write_text("old a")
        (out / "b.ipynb").write_text("old b")
    return first, second, out


def _after_renames(monkeypatch, into: Path, count: int, then) -> None:
    """Call ``then(destination)`` once ``count`` files have been renamed into ``into``."""
    original, renamed = os.replace, []

    def replace(src, dst, *args, **kwargs):
        if Path(dst).parent == into and Path(src).name.endswith(".tmp"):
            renamed.append(dst)
            if len(renamed) > count:
                then(dst)
        return original(src, dst, *args, **kwargs)

    monkeypatch.setattr(os, "replace", replace)


@pytest.mark.parametrize("existing", [False, True])
def test_notebook_tools_student_failure_leaves_no_half_folder(tmp_path, capsys, monkeypatch, existing):
    """The second copy cannot be written once the first is in place: the first is put back."""
    first, second, out = _student_inputs(tmp_path, existing)
    before = _snapshot(tmp_path)

    def no_space(dst):
        raise OSError(28, "No space left on device")

    _after_renames(monkeypatch, out, 1, no_space)
    assert notebook_tools.main(["student", str(out), str(first), str(second)]) == 2
    _one_line(capsys.readouterr().err, "b.ipynb: cannot be written", "No space left", "left as it was")
    assert _snapshot(tmp_path) == before and out.exists() == existing


def test_notebook_tools_student_with_a_folder_at_a_target_writes_nothing(tmp_path, capsys):
    first, second, out = _student_inputs(tmp_path, True)
    (out / "b.ipynb").unlink()
    (out / "b.ipynb").mkdir()
    before = _snapshot(tmp_path)
    assert notebook_tools.main(["student", str(out), str(first), str(second)]) == 2
    _one_line(capsys.readouterr().err, str(out / "b.ipynb"), "is a folder")
    assert _snapshot(tmp_path) == before and (out / "b.ipynb").is_dir()


@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM])
@pytest.mark.parametrize("existing", [False, True])
def test_notebook_tools_student_interrupted_leaves_every_file_as_it_was(tmp_path, capsys, monkeypatch,
                                                                         existing, signum):
    """Issue 38: a signal once the first copy was written left that copy written."""
    first, second, out = _student_inputs(tmp_path, existing)
    before, handler = _snapshot(tmp_path), signal.getsignal(signum)
    _after_renames(monkeypatch, out, 1, lambda dst: os.kill(os.getpid(), signum))
    assert notebook_tools.main(["student", str(out), str(first), str(second)]) == 128 + signum
    captured = capsys.readouterr()
    _one_line(captured.err, f"interrupted by {signal.Signals(signum).name}", f"{out}/ was left as it was")
    assert "Traceback" not in captured.err and "blanked" not in captured.out
    assert _snapshot(tmp_path) == before and out.exists() == existing
    assert signal.getsignal(signum) is handler


def test_notebook_tools_student_interrupted_once_all_is_written_keeps_it_and_says_so(tmp_path, capsys,
                                                                                      monkeypatch):
    """A signal while the writer clears up after the last rename: every copy is in place, so
    nothing is undone (a new folder is not removed) and the line says they were written."""
    first, second, out = _student_inputs(tmp_path, False)
    monkeypatch.setattr(notebook_tools, "remove_leftovers", lambda path: os.kill(os.getpid(), signal.SIGTERM))
    assert notebook_tools.main(["student", str(out), str(first), str(second)]) == 128 + signal.SIGTERM
    _one_line(capsys.readouterr().err, "interrupted by SIGTERM", f"every student copy was written to {out}/")
    assert sorted(p.name for p in out.iterdir()) == ["a.ipynb", "b.ipynb"]
    assert all("raise NotImplementedError" in (out / name).read_text() for name in ("a.ipynb", "b.ipynb"))


def test_notebook_tools_student_killed_by_another_process_writes_nothing(tmp_path):
    """A real SIGTERM from outside while the tool holds (sleeping) after its first copy's rename."""
    first, second, out = _student_inputs(tmp_path, True)
    started = tmp_path / "started"
    before = _snapshot(tmp_path)
    child = f"""
import os, sys, time
from pathlib import Path
sys.path.insert(0, {str(ROOT / "scripts")!r})
import notebook_tools
original = os.replace
def replace(src, dst, *args, **kwargs):
    original(src, dst, *args, **kwargs)
    if Path(dst).parent == Path({str(out)!r}) and src.endswith(".tmp"):
        Path({str(started)!r}).touch()
        time.sleep(60)
os.replace = replace
sys.exit(notebook_tools.main(["student", {str(out)!r}, {str(first)!r}, {str(second)!r}]))
"""
    run = subprocess.Popen([sys.executable, "-c", child], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                           text=True)
    deadline = time.monotonic() + 60
    while not started.exists() and time.monotonic() < deadline and run.poll() is None:
        time.sleep(0.05)
    assert started.exists(), run.communicate(timeout=60)
    assert (out / "a.ipynb").read_text() != "old a", "the first copy was in place when the signal came"
    run.send_signal(signal.SIGTERM)
    stdout, err = run.communicate(timeout=60)
    assert run.returncode == 128 + signal.SIGTERM, (stdout, err)
    _one_line(err, "interrupted by SIGTERM", "was left as it was")
    started.unlink()
    assert _snapshot(tmp_path) == before


def test_notebook_tools_good_inputs_still_work(files, capsys):
    (files / "draft.py").write_text("# %% [markdown]\n# # Title\n\n# %%\nx = 1\n")
    assert notebook_tools.main(["build", str(files / "draft.py"), str(files / "built.ipynb")]) == 0
    built = nbformat.read(files / "built.ipynb", as_version=4)
    assert [c.cell_type for c in built.cells] == ["markdown", "code"]
    assert notebook_tools.main(["student", str(files / "out"), str(files / "good.ipynb")]) == 0
    assert "raise NotImplementedError" in (files / "out" / "good.ipynb").read_text()
    assert notebook_tools.main(["upgrade", str(files / "good.ipynb")]) == 0
    assert notebook_tools.main(["upgrade", str(files / "good.ipynb")]) == 0
    assert capsys.readouterr().out.splitlines()[-1].endswith("already nbformat 4.5")
    assert not list(files.rglob("*.tmp"))


def test_notebook_tools_as_a_process_prints_one_line(tmp_path):
    done = subprocess.run([sys.executable, str(ROOT / "scripts" / "notebook_tools.py"), "upgrade",
                           str(tmp_path / "missing.ipynb")], capture_output=True, text=True)
    assert done.returncode == 2 and done.stdout == ""
    _one_line(done.stderr, "missing.ipynb: no such notebook")


# -- version_matrix.py -----------------------------------------------------------------------
@pytest.fixture
def no_venv(monkeypatch):
    def refuse(*args, **kwargs):
        raise AssertionError("version_matrix.py went on to create a venv or run pip")

    monkeypatch.setattr(version_matrix._cli(), "run_in_group", refuse)  # venv and pip both run through it
    monkeypatch.setattr(version_matrix.subprocess, "run", refuse)
    monkeypatch.setattr(version_matrix.subprocess, "call", refuse)


def test_version_matrix_unknown_command_is_named(no_venv, capsys):
    with pytest.raises(SystemExit) as info:
        version_matrix.main(["frobnicate"])
    assert info.value.code == 2 and "invalid choice: 'frobnicate'" in capsys.readouterr().err


@pytest.mark.parametrize("argv", [[], ["--venv", "x"]])
def test_version_matrix_without_a_command_asks_for_it_alone(no_venv, capsys, argv):
    """Issue 38 hunt: it said "the following arguments are required: which, pytest_args", but
    the pytest arguments are optional."""
    with pytest.raises(SystemExit) as info:
        version_matrix.main(argv)
    err = capsys.readouterr().err
    last = err.splitlines()[-1]
    assert info.value.code == 2 and "required: which" in last and "pytest_args" not in last, err


@pytest.mark.parametrize("pyproject, constraints, which, words", [
    (None, "", "floor", ["pyproject.toml: no such file"]),
    (None, "", "newest", ["pyproject.toml: no such file"]),
    ("[project\n", "", "floor", ["pyproject.toml: not valid TOML"]),
    ("[tool.x]\n", "", "floor", ["pyproject.toml: no [project] table"]),
    ('[project]\ndependencies = ["torch<3"]\n[project.optional-dependencies]\n', "", "floor",
     ["pyproject.toml", "'torch<3'", "name>=floor"]),
    ('[project]\ndependencies = ["torch>=2"]\n', "", "floor", ["optional-dependencies", "dict"]),
    ('[project]\ndependencies = ["torch>=2"]\n[project.optional-dependencies]\n', None, "floor",
     ["constraints.txt: no such file"]),
    ('[build-system]\nrequires = "setuptools"\n[project]\ndependencies = ["torch>=2"]\n'
     '[project.optional-dependencies]\n', "", "floor", ["[build-system] requires", "list of strings"]),
])
def test_version_matrix_bad_files_are_named_before_installing(tmp_path, no_venv, capsys, pyproject,
                                                               constraints, which, words):
    if pyproject is not None:
        (tmp_path / "pyproject.toml").write_text(pyproject)
    if constraints is not None:
        (tmp_path / "constraints.txt").write_text(constraints)
    assert version_matrix.main([which, "--venv", str(tmp_path / "env")], root=tmp_path) == 2
    _one_line(capsys.readouterr().err, "version_matrix.py:", *words)
    assert not (tmp_path / "env").exists()


def test_version_matrix_venv_that_is_a_file_is_named(tmp_path, no_venv, capsys):
    (tmp_path / "a_file").write_text("")
    assert version_matrix.main(["newest", "--venv", str(tmp_path / "a_file")], root=ROOT) == 2
    _one_line(capsys.readouterr().err, f"{tmp_path / 'a_file'}: is a file, expected a folder", "--venv")


def _snapshot(folder):
    return {p.relative_to(folder).as_posix(): p.read_bytes() if p.is_file() else None
            for p in sorted(folder.rglob("*"))}


@pytest.mark.parametrize("which", ["newest", "floor"])
def test_version_matrix_never_empties_a_folder_of_other_files(tmp_path, no_venv, capsys, monkeypatch, which):
    """Battery 8: `--venv` at a folder of the user's files (or '', the current folder: a whole
    clone once) was emptied by venv's clear=True. It is refused by course.py's own rule, named,
    and every file stays; an empty folder or our own environment is still used."""
    work = tmp_path / "work"
    (work / "sub").mkdir(parents=True)
    (work / "mywork.txt").write_text("mine")
    (work / "sub" / "chapter1.tex").write_text("also mine")
    before = _snapshot(work)
    assert version_matrix.main([which, "--venv", str(work)]) == 2
    _one_line(capsys.readouterr().err, "version_matrix.py:", f"--venv {work}", "mywork.txt, sub",
              "Point --venv at a new or empty folder")
    monkeypatch.chdir(work)
    assert version_matrix.main([which, "--venv", ""]) == 2
    _one_line(capsys.readouterr().err, "version_matrix.py:", "the current folder", "would be emptied")
    assert _snapshot(work) == before
    assert version_matrix._check_venv(tmp_path / "empty") is None  # new: allowed
    (tmp_path / "env" / "bin").mkdir(parents=True)
    (tmp_path / "env" / "constraints-floor.txt").write_text("")
    assert version_matrix._check_venv(tmp_path / "env") is None  # what it made itself: allowed


@pytest.mark.parametrize("which", ["floor", "newest"])
def test_version_matrix_installs_the_build_requirements_first(tmp_path, monkeypatch, capsys, which):
    """The floor run of 2026-11-29: the venv's setuptools was 66 (Python 3.11.2's), the
    packaging tests build the wheel without isolation, and pyproject.toml needs setuptools>=77:
    [build-system] requires goes into the environment before the course."""
    env = tmp_path / "env"
    (env / "bin").mkdir(parents=True)
    (env / "bin" / "python").write_text("")  # an environment of ours, reused: no venv made
    (env / "pyvenv.cfg").write_text("home = /usr/bin\n")  # (a venv: version_matrix reuses no other)
    ran = []

    def run(cmd, **kwargs):
        ran.append([str(c) for c in cmd])
        return subprocess.CompletedProcess(cmd, 0, stdout="torch 0\n", stderr="")

    monkeypatch.setattr(version_matrix._cli(), "run_in_group", run)  # venv and pip run through it
    monkeypatch.setattr(version_matrix.subprocess, "run", run)
    monkeypatch.setattr(version_matrix.subprocess, "call", lambda cmd, **kwargs: ran.append(cmd) or 0)
    assert version_matrix.main([which, "--venv", str(env)]) == 0
    requires = version_matrix.tomllib.loads((ROOT / "pyproject.toml").read_text())["build-system"]["requires"]
    first, install = ran[0], ran[1]
    assert first[1:4] == ["-m", "pip", "install"] and all(r in first for r in requires), first
    assert "-e" in install and "-e" not in first  # the build requirements first, on their own
    assert ("--upgrade" in first) == (which == "newest")


def test_version_matrix_floor_constraints_of_the_real_project():
    text = version_matrix.floor_constraints()
    assert text.startswith("# generated") and "torch==" in text


def test_version_matrix_passes_what_follows_the_double_dash_to_pytest(tmp_path, monkeypatch):
    """`newest --venv DIR -- ARGS`, as its docstring writes it, reaches pytest with ARGS."""
    calls = []
    monkeypatch.setattr(version_matrix._cli(), "run_in_group", lambda cmd: calls.append(cmd))  # venv, pip
    monkeypatch.setattr(version_matrix.subprocess, "run", lambda cmd, **kw: calls.append(cmd)
                        or subprocess.CompletedProcess(cmd, 0, "", ""))
    monkeypatch.setattr(version_matrix.subprocess, "call", lambda cmd, **kw: calls.append(cmd) or 0)
    version_matrix.main(["newest", "--venv", str(tmp_path / "env"), "--", "-q", "tests/test_masks.py"])
    pytest_call = next(c for c in calls if "pytest" in c)
    assert pytest_call[-2:] == ["-q", "tests/test_masks.py"]


def test_course_setup_refuses_arguments_it_would_ignore(no_install, capsys):
    # battery 5: `course.py setup --force` exited 0 and ignored --force
    assert course.main(["setup", "--force"]) == 2
    _one_line(capsys.readouterr().err, "course.py setup: takes no arguments", "--force", "nothing was done")


def test_course_test_names_a_path_that_is_not_a_file_or_folder(tmp_path):
    # battery 5: a FIFO passed the path check and pytest said "no tests ran" 22 s later
    import os

    os.mkfifo(tmp_path / "fifo_test.py")
    (tmp_path / "real_test.py").write_text("")
    args = ["fifo_test.py", "real_test.py", "-k", "x"]
    assert course.special_test_paths(args, root=tmp_path) == ["fifo_test.py"]
    assert course.missing_test_paths(args, root=tmp_path) == []


def test_a_failed_venv_create_removes_the_half_made_venv_and_names_the_cause(tmp_path, monkeypatch):
    venv_dir = tmp_path / ".venv"
    monkeypatch.setattr(course, "VENV", venv_dir)
    monkeypatch.setattr(course, "STAMP", tmp_path / "stamp")
    monkeypatch.setattr(course, "_venv_is_usable", lambda: False)

    def half_create(self, env_dir):
        (Path(env_dir) / "bin").mkdir(parents=True)
        raise subprocess.CalledProcessError(1, ["python", "-m", "ensurepip"],
                                            output=b"Traceback\nNo module named ensurepip\n")

    monkeypatch.setattr(course.venv.EnvBuilder, "create", half_create)
    with pytest.raises(SystemExit) as exit_info:
        course.ensure_environment()
    message = str(exit_info.value.code)
    assert "CalledProcessError: No module named ensurepip" in message and "removed" in message
    assert not venv_dir.exists()


def test_an_empty_course_venv_means_the_default_not_the_current_folder():
    """`COURSE_VENV= python3 course.py setup` once made the current folder the venv and emptied it."""
    probe = subprocess.run([sys.executable, "-c", "import runpy, sys; sys.argv = ['course.py'];"
                            "g = runpy.run_path('course.py', run_name='not_main'); print(g['VENV'])"],
                           cwd=ROOT, env={"COURSE_VENV": "", "PATH": "/usr/bin:/bin"},
                           capture_output=True, text=True, check=True)
    assert probe.stdout.strip() == str(ROOT / ".venv")


@pytest.fixture
def venv_at(tmp_path, monkeypatch):
    """Point course.py at a venv folder that is not usable, and fail if it would create one."""
    def point(folder: Path) -> None:
        monkeypatch.setattr(course, "VENV", folder)
        monkeypatch.setattr(course, "STAMP", folder / ".course-install-stamp")
        monkeypatch.setattr(course, "_venv_is_usable", lambda: False)
        monkeypatch.setenv("COURSE_VENV", str(folder))

        def refuse(self, env_dir):
            raise AssertionError("course.py went on to empty and create the folder")

        monkeypatch.setattr(course.venv.EnvBuilder, "create", refuse)
    return point


def test_course_venv_at_a_folder_of_other_files_is_refused_and_left_intact(tmp_path, venv_at):
    work = tmp_path / "thesis"
    (work / "sub").mkdir(parents=True)
    (work / "notes.txt").write_text("mine")
    (work / "sub" / "chapter1.tex").write_text("also mine")
    venv_at(work)
    with pytest.raises(SystemExit) as exit_info:
        course.ensure_environment()
    message = str(exit_info.value.code)
    assert f"COURSE_VENV={work}" in message and "notes.txt, sub" in message and "leaves it alone" in message
    assert (work / "notes.txt").read_text() == "mine"
    assert (work / "sub" / "chapter1.tex").read_text() == "also mine"


@pytest.mark.parametrize("make, words", [
    (lambda p: p.write_text("x"), "is a file, not a folder"),
    (lambda p: p.symlink_to(p.parent / "nowhere"), "is a broken symlink"),
    (lambda p: p.symlink_to(p), "is a symlink loop"),  # was "a broken symbolic link" (battery 21)
])
def test_course_venv_that_is_a_file_or_broken_link_is_named(tmp_path, venv_at, make, words):
    target = tmp_path / "env"
    make(target)
    venv_at(target)
    with pytest.raises(SystemExit) as exit_info:
        course.ensure_environment()
    message = str(exit_info.value.code)
    assert words in message and f"COURSE_VENV={target}" in message
    assert "removed" not in message and "python3-venv" not in message
    assert target.is_symlink() or target.read_text() == "x"


def test_a_venv_create_that_cannot_write_does_not_advise_python3_venv(tmp_path, monkeypatch):
    venv_dir = tmp_path / ".venv"
    monkeypatch.setattr(course, "VENV", venv_dir)
    monkeypatch.setattr(course, "STAMP", tmp_path / "stamp")
    monkeypatch.setattr(course, "_venv_is_usable", lambda: False)
    monkeypatch.delenv("COURSE_VENV", raising=False)

    def read_only(self, env_dir):
        raise PermissionError(13, "Permission denied", str(env_dir))

    monkeypatch.setattr(course.venv.EnvBuilder, "create", read_only)
    with pytest.raises(SystemExit) as exit_info:
        course.ensure_environment()
    message = str(exit_info.value.code)
    assert "PermissionError" in message and "can be written" in message
    assert "python3-venv" not in message and "removed" not in message


def test_a_venv_folder_is_recognised_as_one():
    assert course.venv_folder_problem(ROOT / "no-such-folder") is None
    venv_like = {p.name for p in (ROOT / ".venv").iterdir()} if (ROOT / ".venv").is_dir() else set()
    assert venv_like <= course.VENV_ENTRIES, venv_like - course.VENV_ENTRIES


@pytest.mark.parametrize("flag", ["--help", "-h", "help"])
def test_course_py_help_prints_its_usage_and_exits_0(flag, capsys):
    """Every other tool of the course answers --help, and `python -m course_utils.cli` sends the
    user to course.py's; it was refused as an unknown command (a cold battery's course_py_help)."""
    assert course._main([flag]) == 0
    out = capsys.readouterr()
    assert "python3 course.py lab" in out.out and out.err == ""
    assert course._main([]) == 2  # no command at all stays a usage error


@pytest.mark.parametrize("command", ["setup", "release", "student-tree"])
@pytest.mark.parametrize("flag", ["--help", "-h"])
def test_course_py_commands_answer_help_without_installing(command, flag, capsys, monkeypatch):
    """`course.py setup --help` was refused as an argument (exit 2), and `student-tree --help` as an
    unknown option: a command's own --help now prints its usage line, installs nothing, exit 0."""
    monkeypatch.setattr(course, "ensure_environment", lambda: pytest.fail("--help installed"))
    assert course._main([command, flag]) == 0
    out = capsys.readouterr()
    assert f"python3 course.py {command}" in out.out and out.err == ""
    if command != "release":  # (release's arguments are judged by nbgrader_tools.py, after the install)
        assert course._main([command, flag, "extra"]) == 2  # more than the flag is still refused


@pytest.mark.parametrize("script", ["notebook_tools.py", "nbgrader_tools.py", "exercise_answers.py",
                                    "student_tree.py", "publish.py", "safe_collect.py",
                                    "version_matrix.py"])
def test_every_script_answers_help_with_exit_0(script):
    """course.py and cli.not_a_command send users to "the tools in scripts/ (each with --help)", yet
    four of them refused --help as an unknown command or option (exit 2). (-h answers the same way:
    one quick script holds it, since each run imports torch.)"""
    for flag in ("--help", "-h") if script == "student_tree.py" else ("--help",):
        done = subprocess.run([sys.executable, str(ROOT / "scripts" / script), flag], capture_output=True,
                              text=True, timeout=120, cwd=ROOT)
        assert done.returncode == 0, (flag, done.stderr)
        assert done.stdout.strip() and "Traceback" not in done.stderr, (flag, done.stderr)


def test_course_py_usage_into_a_closed_pipe_ends_quietly():
    """``python3 course.py | head -1``: a reader that closed the pipe made print raise
    BrokenPipeError and course.py end with a traceback on stderr."""
    read_end, write_end = os.pipe()
    os.close(read_end)  # the reader is gone before course.py writes a byte
    try:
        done = subprocess.run([sys.executable, str(Path(course.__file__)), "--help"], stdout=write_end,
                              stderr=subprocess.PIPE, text=True, timeout=120)
    finally:
        os.close(write_end)
    assert "Traceback" not in done.stderr and "BrokenPipeError" not in done.stderr, done.stderr
