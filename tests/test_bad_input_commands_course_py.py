"""Bad input to course.py, the course's command (loaded afresh with bad_input_cases.load_course):
course.py test / lab / student-tree / venv settings. Clobbering pytest options, log files over
tracked files, bad ports and addresses, blank or unexpandable COURSE_VENV, empty or control-
character paths, and interruptions that must leave nothing behind.

Moved here from the QA batteries' files (issue 38 and later batteries), grouped by the code under test;
a `# -- battery N` line marks where each battery's cases begin. Helpers shared with other bad-input
files live in tests/bad_input_cases.py."""

from __future__ import annotations

import ast
import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from bad_input_cases import ROOT, SCRIPTS, import_script, load_course, raises_naming

from course_utils import cli

needs_posix_signals_and_fifos = pytest.mark.skipif(os.name == "nt", reason="POSIX signals and FIFOs")


# -- battery 9 ---------------------------------------------------------------------------------------

def test_release_with_a_file_for_student_says_so_and_writes_nothing(tmp_path, monkeypatch, capsys):
    """`course.py release` with student/ a file raised FileExistsError, after rewriting the lessons."""
    tools = import_script("nbgrader_tools")

    student = tmp_path / "student"
    student.write_text("keep\n")
    monkeypatch.setattr(tools, "STUDENT", student)
    monkeypatch.setattr(tools, "_lessons", lambda: pytest.fail("a lesson was read before the check"))
    assert tools.main(["release"]) == 1
    err = capsys.readouterr().err
    assert f"{student} is a file, not a folder" in err and "nothing was written" in err, err
    assert student.read_text() == "keep\n" and sorted(p.name for p in tmp_path.iterdir()) == ["student"]


# -- battery 13 --------------------------------------------------------------------------------------

# -- b13: `course.py test 'a\x01b'` (a bare word, no such path) ran the whole collection ------------
def test_course_test_refuses_a_bare_word_that_is_no_path(capsys):
    course = load_course()
    assert course.missing_test_paths(["a\x01b"]) == ["a\x01b"]
    assert course.missing_test_paths(["tests", "--maxfail", "3", "-p", "no:cacheprovider"]) == []  # control
    assert course._main(["test", "a\x01b"]) == 2
    err = capsys.readouterr().err
    assert "no such test file or folder: 'a\\x01b'" in err and "nothing was run" in err, err


# -- battery 13b -------------------------------------------------------------------------------------

@pytest.mark.slow
def test_course_lab_refuses_an_unknown_option_by_name(tmp_path):
    """b13 cli:course.py lab-bogus: JupyterLab started with --bogus (an orphan server to kill)."""
    run = subprocess.Popen([sys.executable, str(ROOT / "course.py"), "lab", "--bogus", "--no-browser",
                            "--ServerApp.token=x"], cwd=tmp_path, stdout=subprocess.PIPE,
                           stderr=subprocess.PIPE, text=True, start_new_session=True,
                           env=dict(os.environ, COURSE_VENV=str(Path(sys.executable).parent.parent)))
    try:
        out, err = run.communicate(timeout=120)
    except subprocess.TimeoutExpired:
        os.killpg(run.pid, signal.SIGKILL)
        pytest.fail("JupyterLab was started: the unknown option was not refused")
    assert run.returncode == 2, (out, err)
    assert "unknown option --bogus" in err and "--no-browser" not in err and "not started" in err, err


@pytest.mark.slow  # it asks the installed JupyterLab (2-3 s)
def test_course_lab_knows_jupyterlabs_own_options():
    course = load_course()
    if not course._bin("python").exists():
        pytest.skip("no .venv with JupyterLab here")
    args = ["--no-browser", "--port=8899", "--ip", "0.0.0.0", "--ServerApp.token=x", "--LabApp.x=1",
            "--bogus", "-q", "notebooks/00_start_here.ipynb"]
    assert course.unknown_lab_options(args) == ["--bogus", "-q"]


# -- battery 15 (fix45c) -----------------------------------------------------------------------------

# -- course.py test refuses paths outside the repository before running anything -----------------
def test_course_test_refuses_a_path_outside_the_repository(monkeypatch, capsys, tmp_path):
    course = load_course()

    def refuse(*args, **kwargs):
        raise AssertionError("course.py went on to install or run something")

    monkeypatch.setattr(course, "ensure_environment", refuse)
    outside = tmp_path / "test_elsewhere.py"
    outside.write_text("def test_x():\n    pass\n")
    for path in ("/etc/passwd", str(outside)):
        assert course.main(["test", "-q", path]) == 2
        err = capsys.readouterr().err
        assert path in err and "outside the repository" in err and "nothing was run" in err
    assert course.outside_test_paths(["tests/test_ablation.py", "-k", "x"]) == []


# -- every tool sets its one-line signal guard before its other imports -----------------------------
# what the guard itself needs (course.py notes signals with the built-in _signal before the rest)
_BEFORE_GUARD = {"__future__", "_signal", "sys", "pathlib", "course_cli"}


def _imported(node: ast.stmt) -> set[str]:
    if isinstance(node, ast.Import):
        return {alias.name.split(".")[0] for alias in node.names}
    if isinstance(node, ast.ImportFrom):
        return {(node.module or "").split(".")[0]}
    return set()


_TOOLS = ["course.py"] + sorted(f"scripts/{p.name}" for p in (SCRIPTS).glob("*.py")
                               if "stop_at_once(" in p.read_text(encoding="utf-8"))


@pytest.mark.parametrize("script", _TOOLS)
def test_each_tool_guards_signals_before_its_other_imports(script):
    """A SIGINT while notebook_tools.py student imported its modules (before stop_at_once) gave a
    KeyboardInterrupt traceback: the guard comes first, before any import but what it needs."""
    tree = ast.parse((ROOT / script).read_text(encoding="utf-8"))
    guarded = False
    for node in tree.body:
        guarded = guarded or "stop_at_once(" in ast.unparse(node)
        early = _imported(node) - _BEFORE_GUARD
        assert guarded or not early, f"{script}: imports {sorted(early)} before cli.stop_at_once"
    assert guarded, f"{script}: calls stop_at_once only inside a function, after its imports"


# -- battery 18 (fix48u) -----------------------------------------------------------------------------

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


# -- battery 19 (fix49u) -----------------------------------------------------------------------------

pytestmark_posix = pytest.mark.skipif(os.name == "nt", reason="POSIX signals")


# -- G5: an empty path argument is refused naming the argument, exit 2 --------------------------
@pytest.mark.parametrize("args, named", [
    (["student-tree", ""], "OUT_DIR is empty ('')"),
    (["student-tree", "--branch", ""], "--branch NAME is empty ('')")])
def test_course_student_tree_refuses_an_empty_path(args, named, tmp_path):
    import subprocess

    before = sorted(p.name for p in ROOT.iterdir())
    done = subprocess.run([sys.executable, str(ROOT / "course.py"), *args], cwd=tmp_path,
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 2, done.stderr
    assert named in done.stderr and "already exists" not in done.stderr, done.stderr
    assert sorted(p.name for p in ROOT.iterdir()) == before and list(tmp_path.iterdir()) == []


# -- G7: a child that exits 0 on a relayed stop signal (JupyterLab on SIGTERM) gives 128 + signum --
_CLEAN_STOPPER = """
import signal, sys, time
from pathlib import Path
signal.signal(signal.SIGTERM, lambda *a: sys.exit(0))  # as JupyterLab: stop cleanly, status 0
signal.signal(signal.SIGINT, lambda *a: sys.exit(0))
Path(sys.argv[1]).write_text("ready")
time.sleep(float(sys.argv[2]))
"""


@pytestmark_posix
@pytest.mark.parametrize("signum, relay, expected", [
    (signal.SIGTERM, cli.STOP_SIGNALS, 143), (signal.SIGINT, cli.STOP_SIGNALS, 130),
    (signal.SIGTERM, (signal.SIGTERM,), 143),
    (signal.SIGINT, (signal.SIGTERM,), 0)])  # not relayed (course.py lab's Ctrl-C): waited out, the child's 0
def test_call_reports_a_relayed_stop_the_child_answered_with_0(signum, relay, expected, tmp_path):
    import threading
    import time

    ready = tmp_path / "ready"

    def send() -> None:
        for _ in range(600):
            if ready.exists():
                break
            time.sleep(0.05)
        os.kill(os.getpid(), signum)

    sender = threading.Thread(target=send)
    sender.start()
    try:  # an unrelayed signal: the child ends by itself after 2 s
        code = cli.call([sys.executable, "-c", _CLEAN_STOPPER, str(ready), "2"], "course.py lab", relay=relay)
    finally:
        sender.join()
    assert code == expected, f"{signal.Signals(signum).name} relayed={relay}: exit {code}"


# -- battery 20 (fix50u) -----------------------------------------------------------------------------

def test_a_regular_file_is_still_called_a_file(tmp_path):
    (tmp_path / "a_file").write_text("x")
    problem = load_course().venv_folder_problem(tmp_path / "a_file", "--venv")
    assert "a_file is a file, not a folder" in problem
    raises_naming(import_script("version_matrix").InputError, [f"{tmp_path / 'a_file'}: is a file, expected"],
                  lambda: import_script("version_matrix")._check_venv(tmp_path / "a_file"))


# -- battery 21 (fix51u) -----------------------------------------------------------------------------

# -- group 3: exercise_answers.py build checks every store before it writes the first ------------------
def _fifo(path: Path) -> None:
    os.mkfifo(path)


def _folder(path: Path) -> None:
    path.mkdir()


def _link_to_folder(path: Path) -> None:
    (path.parent / "elsewhere").mkdir()
    path.symlink_to(path.parent / "elsewhere")


@needs_posix_signals_and_fifos
@pytest.mark.parametrize("early", [True, False], ids=["early-check", "all-or-nothing-writer"])
@pytest.mark.parametrize("make, words", [(_fifo, "a FIFO"), (_folder, "a directory"),
                                         (_link_to_folder, "a directory")])
def test_exercise_answers_build_writes_nothing_when_a_later_store_is_no_file(make, words, early, tmp_path,
                                                                              monkeypatch, capsys):
    """The early check names it before the build; past it (``early`` False: it came after the
    check), the one all-or-nothing writer puts lesson01.pt and lesson02.pt back."""
    from bad_input_cases import import_script

    exercise_answers = import_script("exercise_answers")
    if not early:
        monkeypatch.setattr(exercise_answers, "_unwritable_store", lambda: None)
        words = "is a folder or a special file"
    lessons = sorted({key.split(".")[0] for key in exercise_answers.all_exercises()})
    assert len(lessons) >= 3
    store = tmp_path / "answers"
    store.mkdir()
    for lesson in lessons[:2]:
        (store / f"{lesson}.pt").write_bytes(b"old " + lesson.encode())
    bad = store / f"{lessons[2]}.pt"
    make(bad)
    monkeypatch.setattr(exercise_answers.answers, "ANSWERS_DIR", store)
    monkeypatch.setattr(exercise_answers, "_attached_solutions", lambda: None)
    monkeypatch.setattr(exercise_answers, "compute", lambda: {lesson: {"format": 1, "exercises": {}}
                                                              for lesson in lessons})
    assert exercise_answers.main(["build"]) == 1
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and bad.name in err and words in err and "no stored answer was written" in err
    for lesson in lessons[:2]:
        assert (store / f"{lesson}.pt").read_bytes() == b"old " + lesson.encode()


# -- group 1: course.py checks pyproject.toml and constraints.txt before it reads them -----------------
@needs_posix_signals_and_fifos
@pytest.mark.parametrize("name", ["pyproject.toml", "constraints.txt"])
@pytest.mark.parametrize("make, words", [(lambda p: None, "missing"), (_folder, "a directory"),
                                         (_fifo, "a FIFO")])
def test_course_names_an_input_that_is_no_file_before_reading_it(name, make, words, tmp_path,
                                                                 monkeypatch, capsys):
    course = load_course()
    for other in course.INPUTS:
        if other != name:
            (tmp_path / other).write_text("")
    make(tmp_path / name)
    monkeypatch.setattr(course, "ROOT", tmp_path)
    monkeypatch.setattr(course, "ensure_environment",
                        lambda: pytest.fail("went on to read the inputs and install"))
    assert course.main(["setup"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1, err
    assert f"course.py setup: {tmp_path / name} is {words}" in err and "nothing was installed" in err, err


# -- battery 21 (rerun) ------------------------------------------------------------------------------

def test_course_py_starts_its_own_tools_held_and_other_programs_not(monkeypatch) -> None:
    """publish, release and student-tree run course tools (stop_at_once first thing); lab and test
    run programs that would never let the signals through."""
    course = load_course()
    calls: list[tuple[list[str], dict]] = []
    monkeypatch.setattr(course, "ensure_environment", lambda: None)
    monkeypatch.setattr(course.cli, "call", lambda args, *rest, **kw: calls.append((args, kw)) or 0)
    for argv in (["publish"], ["release"], ["student-tree", "--branch", "student"], ["lab"]):
        assert course.main(argv) == 0, argv
    program = {Path(args[1] if args[0].endswith("python") else args[0]).name: kw.get("course_tool", False)
               for args, kw in calls}
    assert program == {"publish.py": True, "nbgrader_tools.py": True, "student_tree.py": True,
                       "jupyter": False}


# -- battery 22 (fix52u) -----------------------------------------------------------------------------

course_py = load_course()


# -- G6: course.py test refuses a --basetemp / --junitxml that would destroy a file of the repo -----
@pytest.fixture
def no_run(monkeypatch):
    def refuse(*args, **kwargs):
        raise AssertionError("course.py went on to install or run something")

    monkeypatch.setattr(course_py, "ensure_environment", refuse)


@pytest.mark.parametrize(("args", "option", "value"), [
    (["--basetemp=docs"], "--basetemp", "docs"),
    (["--basetemp", "docs"], "--basetemp", "docs"),
    (["--basetemp=tests/../README.md"], "--basetemp", "tests/../README.md"),
    (["--basetemp="], "--basetemp", ""),
    (["--junitxml=README.md"], "--junitxml", "README.md"),
    (["--junit-xml", "pyproject.toml"], "--junit-xml", "pyproject.toml"),
])
def test_course_test_refuses_an_output_option_that_clobbers_the_repo(args, option, value, no_run, capsys):
    assert course_py.main(["test", "-q", *args, "tests/test_masks.py"]) == 2
    err = capsys.readouterr().err
    assert option in err and repr(value) in err and "nothing was run" in err and err.count("\n") == 1


@pytest.mark.parametrize("args", [["--junitxml=artifacts/report.xml"], ["--junitxml", "a_new_report.xml"],
                                  ["--basetemp=a_new_basetemp"], ["-k", "--basetemp=docs"]])
def test_course_test_lets_a_new_or_artifacts_output_path_through(args):
    assert course_py.clobbered_output_paths([*args, "tests/test_masks.py"]) == []


# -- battery 27 (fix57) ------------------------------------------------------------------------------

def test_course_py_names_a_pyproject_that_is_not_toml(tmp_path: Path) -> None:
    course = load_course()
    for name in course.INPUTS:
        (tmp_path / name).write_text((ROOT / name).read_text())
    assert course.inputs_problem(tmp_path) is None
    (tmp_path / "pyproject.toml").write_text("[[[ not toml")
    problem = course.inputs_problem(tmp_path)
    assert problem is not None and "pyproject.toml is not valid TOML" in problem, problem


# -- battery 29 (commands) ---------------------------------------------------------------------------

# --- course.py lab: --port and --ip values are checked before anything starts -----------------
@pytest.mark.parametrize(("arg", "shown"), [
    ("--port=-5", "--port=-5 is out of range"),
    ("--port=99999", "--port=99999 is out of range"),
    ("--ServerApp.port=-1", "--ServerApp.port=-1 is out of range"),
    ("--port=eighty", "--port='eighty' is not a port number"),
    ("--ip=no such host", "--ip='no such host' is not an address"),
])
def test_course_lab_refuses_a_bad_port_or_address_before_starting(monkeypatch, capsys, arg, shown):
    """b29 lab_port_negative_traceback, lab_port_out_of_range_starts, lab_bad_ip_traceback: a
    socket.gaierror traceback from jupyter_server, or JupyterLab started on port 99999."""
    course = load_course()

    def never(*args, **kwargs):
        raise AssertionError("the environment was set up: the option was not refused first")

    monkeypatch.setattr(course, "ensure_environment", never)
    monkeypatch.setattr(course.cli, "call", never)
    assert course._main(["lab", "--no-browser", arg]) == 2
    err = capsys.readouterr().err
    assert shown in err and "JupyterLab was not started" in err and "Traceback" not in err, err


def test_course_lab_takes_good_ports_and_addresses():
    course = load_course()
    assert course.lab_value_problems(["--port=0", "--port", "8888", "--ServerApp.port=65535", "--ip=*",
                                      "--ip", "127.0.0.1", "--ServerApp.ip=localhost", "--ip="]) == []


# --- course.py test names a test id the file does not define ----------------------------------
def test_course_test_names_a_missing_test_id_before_running(monkeypatch, capsys):
    """b29 test_missing_nodeid_unnamed: `course.py test tests/test_attention.py::no_such_test` ran
    pytest for 40 s and ended in "no tests ran" (exit 5), naming nothing."""
    course = load_course()

    def never(*args, **kwargs):
        raise AssertionError("pytest was run: the missing test was not named first")

    monkeypatch.setattr(course, "ensure_environment", never)
    monkeypatch.setattr(course.cli, "call", never)
    assert course._main(["test", "tests/test_attention.py::no_such_test"]) == 2
    err = capsys.readouterr().err
    assert "no such test: tests/test_attention.py::no_such_test" in err and "nothing was run" in err, err
    named = ["tests/test_attention.py", "tests/test_attention.py::test_mha_matches_torch",
             "tests/test_bad_input_exercise_checks_lessons.py::test_common_slips_get_a_named_mistake[1.1-sigmoid]"]
    assert course.missing_test_names(named) == []


# -- battery 30 (f) ----------------------------------------------------------------------------------

@pytest.fixture(autouse=True)
def _nothing_installed(monkeypatch):
    """A command that gets past its checks fails at once here, rather than installing or running."""
    def refuse():
        raise AssertionError("course.py went on to install the environment")
    monkeypatch.setattr(course_py, "ensure_environment", refuse)


# -- pytest_addopts_clobbers: PYTEST_ADDOPTS is guarded as the command line is -----------------------
def test_test_refuses_clobbering_options_from_pytest_addopts(monkeypatch, capsys):
    monkeypatch.setenv("PYTEST_ADDOPTS", "--basetemp=docs --junitxml=README.md")
    assert course_py._main(["test", "tests/test_attention.py"]) == 2
    err = capsys.readouterr().err
    assert "PYTEST_ADDOPTS" in err and "--basetemp" in err and "nothing was run" in err


def test_addopts_args_splits_as_a_shell_and_tolerates_a_bad_quote():
    assert course_py.addopts_args("--junitxml='a b.xml' -x") == ["--junitxml=a b.xml", "-x"]
    assert course_py.addopts_args("--junitxml='unclosed") == []


# -- pytest_log_file_clobbers: --log-file, --debug and -o log_file= overwrite their file -------------
@pytest.mark.parametrize("args", [["--log-file=README.md"], ["--log-file", "README.md"],
                                  ["--debug=docs/lessons.md"], ["--debug", "README.md"],
                                  ["-o", "log_file=LICENSE"], ["-olog_file=LICENSE"],
                                  ["--override-ini=log_file=LICENSE"],
                                  ["--override-ini", "log_file=LICENSE"]],
                         ids=lambda a: " ".join(a))
def test_test_refuses_a_log_file_over_a_tracked_file(args):
    problems = course_py.clobbered_output_paths(args)
    assert len(problems) == 1 and "overwrite" in problems[0]


@pytest.mark.parametrize("args", [["--debug"], ["--debug", "-x"], ["--log-file=artifacts/run.log"],
                                  ["-o", "log_cli=true"], ["--log-file=new-file-here.log"]],
                         ids=lambda a: " ".join(a))
def test_test_lets_a_new_log_file_or_other_settings_pass(args):
    assert course_py.clobbered_output_paths(args) == []


# -- course_venv_tilde_blank: COURSE_VENV='~/x' is the home folder's x; a blank one is refused --------
@pytest.mark.parametrize("setting", [" ", "\t", "~no_such_user_b30f/venv"],
                         ids=["space", "tab", "unknown-user"])
def test_course_venv_blank_or_unexpandable_is_refused(setting, monkeypatch, capsys):
    assert "COURSE_VENV" in course_py.venv_setting_problem(setting)
    monkeypatch.setenv("COURSE_VENV", setting)
    assert course_py._main(["publish", "--check"]) == 2
    assert "COURSE_VENV" in capsys.readouterr().err


@pytest.mark.parametrize("setting", [None, "", "/tmp/some-venv", "~/venvs/mha"])
def test_course_venv_usable_settings_pass(setting):
    assert course_py.venv_setting_problem(setting) is None


def test_course_venv_tilde_is_the_home_folder(monkeypatch, tmp_path):
    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.setenv("COURSE_VENV", "~/venvs/mha")
    fresh = load_course()
    assert fresh.VENV == tmp_path / "venvs" / "mha"


# -- lab_port_without_value: `lab --port` (value forgotten) is named, not fed the lesson's path ------
@pytest.mark.parametrize("args", [["--port"], ["--no-browser", "--port"], ["--port", "--no-browser"],
                                  ["--ServerApp.port"], ["--ip"], ["--ServerApp.ip", "--no-browser"]],
                         ids=lambda a: " ".join(a))
def test_lab_option_without_its_value_is_named(args, capsys):
    option = next(a for a in args if a != "--no-browser")
    assert course_py.lab_value_problems(args) == [course_py.lab_value_problems(args)[0]]
    assert course_py.lab_value_problems(args)[0].startswith(f"{option} needs a value")
    assert course_py._main(["lab", *args]) == 2
    assert "needs a value" in capsys.readouterr().err


@pytest.mark.parametrize("args", [["--port", "8888"], ["--port=0"], ["--ip", "127.0.0.1", "--no-browser"]])
def test_lab_option_with_its_value_passes(args):
    assert course_py.lab_value_problems(args) == []


@pytest.mark.parametrize(("args", "shown"), [
    (["--port-retries=-3"], "--port-retries=-3 is out of range (a number of further ports to try"),
    (["--port-retries", "-1"], "--port-retries=-1 is out of range"),
    (["--ServerApp.port_retries=lots"], "--ServerApp.port_retries='lots' is not a number of further ports"),
    (["--port-retries"], "--port-retries needs a value (e.g. --port-retries=50)"),
    (["--ServerApp.shutdown_no_activity_timeout=-60"], "shutdown_no_activity_timeout=-60 is out of range"),
    (["--ServerApp.max_body_size=0"], "max_body_size=0 is out of range (a size in bytes: 1 or more)"),
], ids=lambda a: a if isinstance(a, str) else " ".join(a))
def test_lab_numeric_options_are_checked_before_starting(monkeypatch, capsys, args, shown):
    """`course.py lab --port-retries=-3`: JupyterLab started, tried no port and stopped with "no
    available port could be found", naming neither the option nor its value."""
    def never(*args, **kwargs):
        raise AssertionError("the environment was set up: the option was not refused first")

    monkeypatch.setattr(course_py, "ensure_environment", never)
    monkeypatch.setattr(course_py.cli, "call", never)
    assert course_py._main(["lab", "--no-browser", *args]) == 2
    err = capsys.readouterr().err
    assert shown in err and "JupyterLab was not started" in err and len(err.splitlines()) == 1, err
    assert course_py.lab_value_problems(["--port-retries=0", "--ServerApp.port_retries", "65535"]) == []


@pytest.mark.parametrize("args", [["-k", "(("], ["-k((", "-m", "not slow"], ["-m", "not slow and"]],
                         ids=lambda a: " ".join(a))
def test_course_test_names_an_expression_pytest_cannot_read(monkeypatch, capsys, args):
    """`course.py test -k "((" tests/test_shapes.py`: spread over xdist workers, pytest ended in an
    INTERNALERROR traceback from xdist (exit 3) with no word about -k. Refused before pytest runs,
    in pytest's words, naming the option and the expression."""
    course = load_course()

    def never(*args, **kwargs):
        raise AssertionError("pytest was run: the expression was not refused first")

    monkeypatch.setattr(course, "_bin", lambda name: Path(sys.executable))  # the course's pytest
    monkeypatch.setattr(course, "ensure_environment", never)
    monkeypatch.setattr(course.cli, "call", never)
    assert course._main(["test", *args, "tests/test_shapes.py"]) == 2
    err = capsys.readouterr().err
    bad = next(option for option, text in course._expression_args(args) if text in ("((", "not slow and"))
    assert len(err.splitlines()) == 1 and f"{bad} '" in err and "is not an expression" in err, err
    assert "got end of input" in err and "nothing was run" in err and "Traceback" not in err, err
    assert course.expression_problems(["-k", "attention and not slow", "-mslow"], Path(sys.executable)) == []


@pytest.mark.parametrize(("argv", "venv", "named"), [
    (["test", "tests/" + "n" * 300 + ".py"], None, "course.py test: a test path must name a test file"),
    (["test", "tests/test_shapes.py"], "/tmp/" + "n" * 300, "course.py test: COURSE_VENV must name a folder"),
    (["student-tree", "/tmp/" + "n" * 300], None, "course.py student-tree: OUT_DIR must name a new folder"),
], ids=["test path", "COURSE_VENV", "student-tree OUT_DIR"])
def test_course_py_names_a_path_with_a_name_too_long(monkeypatch, capsys, argv, venv, named):
    """QA battery 33: `course.py test tests/NAME.py` with a 300-character NAME gave a raw
    "OSError: [Errno 36] File name too long" traceback; every path course.py takes is now
    checked by cli.path_problem: one line, exit 2, nothing installed or run."""
    def never(*args, **kwargs):
        raise AssertionError("something ran: the path was not refused first")

    if venv is not None:
        monkeypatch.setenv("COURSE_VENV", venv)
    course = load_course()
    monkeypatch.setattr(course, "ensure_environment", never)
    monkeypatch.setattr(course.cli, "call", never)
    assert course._main(argv) == 2
    err = capsys.readouterr().err
    assert err.startswith(named) and len(err.splitlines()) == 1 and "File name too long" in err, err


def test_lab_names_a_path_to_open_with_a_name_too_long(monkeypatch, capsys):
    """QA battery 33's long names, for lab's notebook to open: refused before anything starts (an
    option's value, such as --port's 8888, is no path)."""
    def never(*args, **kwargs):
        raise AssertionError("the environment was set up: the path was not refused first")

    monkeypatch.setattr(course_py, "ensure_environment", never)
    monkeypatch.setattr(course_py.cli, "call", never)
    assert course_py._main(["lab", "--no-browser", "student/" + "n" * 300 + ".ipynb"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("course.py lab: a path to open must name a notebook or folder, each name in it")
    assert "File name too long" in err and len(err.splitlines()) == 1, err
    assert course_py.lab_value_problems(["--port", "8888", "--app-dir", "n" * 300, "student"]) == []


def test_lab_negative_port_is_out_of_range_not_missing():
    assert "out of range" in course_py.lab_value_problems(["--port", "-1"])[0]


# -- student_tree_branch_named_like_tag: --branch NAME where NAME is a tag is refused ------------------
def test_student_tree_refuses_a_branch_named_like_a_tag(tmp_path, monkeypatch):
    import subprocess

    from bad_input_cases import import_script, raises_naming

    student_tree = import_script("student_tree")
    repo = tmp_path / "repo"
    repo.mkdir()
    git = ["git", "-C", str(repo), "-c", "user.name=t", "-c", "user.email=t@t"]
    subprocess.run([*git, "init", "-q"], check=True)
    subprocess.run([*git, "commit", "-q", "--allow-empty", "-m", "x"], check=True)
    subprocess.run([*git, "tag", "v9.8.7"], check=True)
    monkeypatch.setattr(student_tree, "ROOT", repo)
    monkeypatch.setattr(student_tree, "build", lambda out: pytest.fail("built a tree for a tag's name"))
    raises_naming(ValueError, ["--branch", "'v9.8.7'", "tag"],
                  lambda: student_tree.commit_to_branch("v9.8.7"))
    assert subprocess.run([*git, "for-each-ref", "refs/heads/v9.8.7"], capture_output=True,
                          text=True).stdout == ""


@pytest.mark.parametrize("name, words", [
    ("origin/main", ["--branch", "'origin/main'", "remote-tracking branch"]),
    ("origin/student", ["--branch", "'origin/student'", "starts with the remote 'origin'"]),
])
def test_student_tree_refuses_a_branch_that_shadows_a_remote(tmp_path, monkeypatch, name, words):
    """``--branch origin/main`` made refs/heads/origin/main, which shadows the remote-tracking
    branch (git: "refname 'origin/main' is ambiguous"); a cold battery's branch_shadows_remote."""
    import subprocess

    from bad_input_cases import import_script, raises_naming

    student_tree = import_script("student_tree")
    upstream, repo = tmp_path / "upstream", tmp_path / "repo"
    git_id = ["-c", "user.name=t", "-c", "user.email=t@t"]
    subprocess.run(["git", "init", "-q", "-b", "main", str(upstream)], check=True)
    subprocess.run(["git", "-C", str(upstream), *git_id, "commit", "-q", "--allow-empty", "-m", "x"],
                   check=True)
    subprocess.run(["git", "clone", "-q", str(upstream), str(repo)], check=True)
    monkeypatch.setattr(student_tree, "ROOT", repo)
    monkeypatch.setattr(student_tree, "build", lambda out: pytest.fail("built a tree for a shadowing name"))
    raises_naming(ValueError, words, lambda: student_tree.commit_to_branch(name))
    assert subprocess.run(["git", "-C", str(repo), "for-each-ref", "refs/heads/origin"],
                          capture_output=True, text=True).stdout == ""


# -- table_ascii_stdout_traceback: `nbgrader_tools.py table` on an ASCII stdout escapes the stars ----
def test_table_on_an_ascii_stdout_prints_escaped(monkeypatch, capsys):
    import io
    import sys

    from bad_input_cases import import_script

    tools = import_script("nbgrader_tools")
    if "★" not in tools.table():
        pytest.skip("the table has no star to escape")
    out = io.TextIOWrapper(io.BytesIO(), encoding="ascii")
    monkeypatch.setattr(sys, "stdout", out)
    assert tools._main(["table"]) in (0, None)
    out.flush()
    text = out.buffer.getvalue().decode("ascii")
    assert "\\u2605" in text


# -- test_memory_default_relative_to_cwd: the default report is the repository's, from any folder ----
def test_test_memory_default_report_is_the_repositorys(tmp_path, monkeypatch):
    import argparse
    from pathlib import Path

    from course_utils.bench import memory

    assert memory.DEFAULT_TEST_REPORT == ROOT / "artifacts" / "test_peak_rss.json"
    monkeypatch.chdir(tmp_path)
    parser = argparse.ArgumentParser()
    memory.add_bench_parser(parser.add_subparsers(dest="command"))
    assert Path(parser.parse_args(["test-memory"]).report) == ROOT / "artifacts" / "test_peak_rss.json"


# -- check_leaves_torch_modes: a check leaves the answer's torch modes and autocast ------------------
def _enters_function_mode(s, v):
    from torch.overrides import TorchFunctionMode

    TorchFunctionMode().__enter__()
    return torch.softmax(s, -1) @ v


def _enters_dispatch_mode(s, v):
    from torch.utils._python_dispatch import TorchDispatchMode

    class Passing(TorchDispatchMode):
        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            return func(*args, **(kwargs or {}))

    Passing().__enter__()
    return torch.softmax(s, -1) @ v


def _enters_autocast(s, v):
    torch.autocast("cpu", dtype=torch.bfloat16).__enter__()
    return torch.softmax(s, -1) @ v


@pytest.mark.parametrize("answer", [_enters_function_mode, _enters_dispatch_mode, _enters_autocast],
                         ids=["function-mode", "dispatch-mode", "autocast"])
def test_a_check_leaves_the_answers_torch_modes(answer, monkeypatch):
    from course_utils.exercises import lesson01

    monkeypatch.setenv("COURSE_CHECK_TIMEOUT", "5")
    before = (torch._C._len_torch_function_stack(), torch._C._len_torch_dispatch_stack(),
              torch.is_autocast_enabled("cpu"))
    try:
        lesson01.check_attend(answer)
        after = (torch._C._len_torch_function_stack(), torch._C._len_torch_dispatch_stack(),
                 torch.is_autocast_enabled("cpu"))
    finally:  # never leave a mode on for the other tests, whatever the check did
        while torch._C._len_torch_function_stack() > before[0]:
            torch._C._pop_torch_function_stack()
        from torch.utils._python_dispatch import _pop_mode
        while torch._C._len_torch_dispatch_stack() > before[1]:
            _pop_mode()
        torch.set_autocast_enabled("cpu", before[2])
    assert after == before


# -- a SIGINT while course.py imports what its guard needs gets the one line, not a traceback -------
_SIGNAL_AT_IMPORT = r"""
import builtins, runpy, signal, sys
module, course = sys.argv[1:3]
real = builtins.__import__
def signal_first(name, *args, **kwargs):
    if name == module and sys._getframe(1).f_code.co_filename == course:
        # Ctrl-C just as course.py imports it: deterministic, no timing
        builtins.__import__ = real
        signal.raise_signal(signal.SIGINT)
    return real(name, *args, **kwargs)
builtins.__import__ = signal_first
sys.argv = [course, "publish", "--check"]
runpy.run_path(course, run_name="__main__")
"""


@pytest.mark.parametrize("module", ["sys", "pathlib", "course_cli"])
def test_course_py_sigint_while_importing_its_guard_gets_one_line(module, tmp_path):
    """A Ctrl-C in course.py's first ~0.2 s (importing pathlib and scripts/course_cli.py, before
    cli.stop_at_once) gave a KeyboardInterrupt traceback from _load_cli: course.py notes the
    signals first thing, with the built-in _signal, and stops once its handlers are set."""
    done = subprocess.run([sys.executable, "-c", _SIGNAL_AT_IMPORT, module, str(ROOT / "course.py")],
                          cwd=tmp_path, capture_output=True, text=True, timeout=120,
                          env=dict(os.environ, COURSE_VENV=sys.prefix))
    assert "Traceback" not in done.stderr, done.stderr
    assert done.returncode == 130, (done.returncode, done.stderr)
    assert done.stderr.strip() == "course.py: interrupted by SIGINT while starting; nothing was written", \
        done.stderr


def test_course_py_sets_its_signal_note_before_any_import_that_runs_python_code():
    """Even `from __future__ import annotations` runs the import system's Python code (__future__
    is not loaded at start-up), where an early Ctrl-C gave a traceback at course.py's line 34:
    the first statement after the docstring imports the built-in _signal and the next sets the note."""
    body = ast.parse((ROOT / "course.py").read_text(encoding="utf-8")).body
    assert isinstance(body[0], ast.Expr)  # the docstring
    assert _imported(body[1]) == {"_signal"}, ast.unparse(body[1])
    assert "_signal.signal(" in ast.unparse(body[3]) and not _imported(body[2]) | _imported(body[3]), \
        ast.unparse(body[3])


def test_course_py_checks_the_python_version_before_any_annotation_is_evaluated():
    """course.py has no `from __future__ import annotations` (above), so on Python 3.9 a def with
    `-> str | None` would raise TypeError before ensure_environment's "needs Python 3.10" line:
    the version check is a module-level statement ahead of every def and annotated assignment."""
    body = ast.parse((ROOT / "course.py").read_text(encoding="utf-8")).body
    check = next(i for i, node in enumerate(body)
                 if isinstance(node, ast.If) and "sys.version_info < (3, 10)" in ast.unparse(node.test))
    assert "needs Python 3.10 or newer" in ast.unparse(body[check])
    first_annotated = next(i for i, node in enumerate(body)
                           if isinstance(node, ast.FunctionDef | ast.AnnAssign | ast.ClassDef))
    assert check < first_annotated, ast.unparse(body[first_annotated])[:80]


# -- lab --notebook-dir: a root folder that does not hold the lesson, or no folder, refused at once ----
@pytest.mark.parametrize("args", [["--notebook-dir=."], ["--notebook-dir", "student"],
                                  ["--ServerApp.root_dir=student", "--no-browser"]])
def test_course_lab_takes_a_root_folder_that_holds_the_lesson(args):
    course = load_course()
    assert course.lab_value_problems(args) == []
    assert course.lab_args(["--notebook-dir=."])[-1].endswith("00_start_here.ipynb")
    assert course.lab_value_problems([f"--notebook-dir={ROOT.parent}"]) == []  # a folder above holds it too


@pytest.mark.parametrize("args, named", [  # OUTSIDE: a folder that does not hold the repository
    (["--notebook-dir=OUTSIDE"], "--notebook-dir OUTSIDE does not hold student/00_start_here.ipynb"),
    (["--ServerApp.root_dir", "OUTSIDE"],
     "--ServerApp.root_dir OUTSIDE does not hold student/00_start_here.ipynb"),
    (["--notebook-dir=/no/such/folder"], "--notebook-dir '/no/such/folder' is not a folder"),
    (["--ServerApp.root_dir", "/no/such/folder"], "--ServerApp.root_dir '/no/such/folder' is not a folder"),
    (["--no-browser", "--notebook-dir"], "--notebook-dir needs a value"),
])
def test_course_lab_refuses_a_root_folder_it_cannot_use_before_starting(args, named, monkeypatch, capsys,
                                                                      tmp_path):
    """course.py appended student/00_start_here.ipynb after --notebook-dir=/tmp: JupyterLab started,
    then stopped with "`root_dir` and `file_to_run` are incompatible"; a missing folder, "Bad config".
    (Not /tmp itself here: a clone in /tmp, as CI's, lies inside it, and the lesson with it.)"""
    outside = tmp_path / "elsewhere"
    outside.mkdir()
    assert not ROOT.resolve().is_relative_to(outside.resolve())
    args = [str(outside) if a == "OUTSIDE" else a.replace("OUTSIDE", str(outside)) for a in args]
    named = named.replace("OUTSIDE", str(outside))
    course = load_course()
    monkeypatch.setattr(course, "ensure_environment", lambda: pytest.fail("installed or started"))
    monkeypatch.setattr(course.cli, "call", lambda *a, **k: pytest.fail("JupyterLab started"))
    assert course.main(["lab", *args]) == 2
    err = capsys.readouterr().err
    assert named in err and err.count("\n") == 1 and "Traceback" not in err, err


# -- COURSE_VENV holding another checkout's install: refused, not repointed (battery 34) ----------
def _venv_with_course_from(folder: Path, source: Path) -> Path:
    record = (folder / "lib" / "python3.11" / "site-packages" / "course_utils-0.2.0.dist-info"
              / "direct_url.json")
    record.parent.mkdir(parents=True)
    record.write_text(json.dumps({"url": source.as_uri(), "dir_info": {"editable": True}}), encoding="utf-8")
    return folder


def test_course_venv_of_another_existing_checkout_is_refused_before_installing(tmp_path, monkeypatch):
    """A tester ran course.py from a clone with COURSE_VENV pointing at the main checkout's .venv:
    a changed pyproject.toml made it reinstall there, and the main checkout's environment then
    imported the clone's course_utils without a word."""
    course = load_course()
    other = tmp_path / "other"
    other.mkdir()
    (other / "course.py").write_text("", encoding="utf-8")
    shared = _venv_with_course_from(tmp_path / "shared", other)
    before = sorted(p.relative_to(tmp_path) for p in tmp_path.rglob("*"))
    monkeypatch.setenv("COURSE_VENV", str(shared))
    monkeypatch.setattr(course, "VENV", shared)
    monkeypatch.setattr(course, "STAMP", shared / ".course-install-stamp")
    problem = course.other_checkout_problem()
    assert problem and f"installed from another checkout, {other}" in problem
    assert "Unset COURSE_VENV" in problem
    with pytest.raises(SystemExit) as info:
        course.ensure_environment()
    assert "Cannot install the course: COURSE_VENV=" in str(info.value.code)
    assert sorted(p.relative_to(tmp_path) for p in tmp_path.rglob("*")) == before


@pytest.mark.parametrize("case", ["unset", "this checkout", "checkout gone", "not a file url"])
def test_course_venv_of_this_or_a_vanished_checkout_is_installed_into(case, tmp_path, monkeypatch):
    course = load_course()
    source = {"this checkout": ROOT, "checkout gone": tmp_path / "moved"}.get(case, tmp_path)
    shared = _venv_with_course_from(tmp_path / "shared", source)
    if case == "not a file url":
        record = next(shared.rglob("direct_url.json"))
        record.write_text('{"url": "https://example.org/x"}', encoding="utf-8")
    if case != "unset":
        monkeypatch.setenv("COURSE_VENV", str(shared))
    else:
        monkeypatch.delenv("COURSE_VENV", raising=False)
    assert course.other_checkout_problem(shared) is None
