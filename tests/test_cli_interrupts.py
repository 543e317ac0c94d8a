"""Ctrl-C and SIGTERM for the course's command-line tools (issue 38, battery 12 item 12b).

Interrupted, a tool stops with one line on stderr saying what was left as it was, exits 128 + the
signal's number (130, 143), and every file is as it was. Each case runs the real tool in a child
process on a copy of the clone's files; the child waits at a chosen point (an audit hook in a
``sitecustomize`` on its path: at the Nth event whose argument names a file, it touches a marker
file and sleeps) and a real signal is sent from here once the marker is there.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import nbformat
import pytest

ROOT = Path(__file__).resolve().parent.parent
HOLD = """
import os, sys, time
_event, _needle, _nth, _marker = os.environ["COURSE_TEST_HOLD"].split("|")
_seen = [0]
def _hold(event, args):
    if event == _event and args and _needle in str(args[0]) + " " + str(args[1] if len(args) > 1 else ""):
        _seen[0] += 1
        if _seen[0] == int(_nth):
            open(_marker, "w").close()
            time.sleep(60)
def _hold_at_exit():
    open(_marker, "w").close()
    time.sleep(3)
if _event == "atexit":  # registered first, so it runs last, as the interpreter shuts down
    import atexit
    atexit.register(_hold_at_exit)
elif os.environ.get("COURSE_TEST_HOLD"):
    sys.addaudithook(_hold)
"""

pytestmark = pytest.mark.skipif(os.name == "nt", reason="POSIX signals")


def test_run_reports_a_signal_a_library_turned_into_its_own_error(capsys):
    """nbgrader's capture_log catches everything and returns a failure; the tool then raises its
    own error. Once a signal came, that is still reported as the interruption, on one line."""
    from course_utils import cli

    def main(argv):
        try:
            os.kill(os.getpid(), signal.SIGINT)
            time.sleep(5)
        except BaseException:  # noqa: BLE001 - what nbgrader does
            pass
        raise RuntimeError("generate_assignment refused")

    handler = signal.getsignal(signal.SIGINT)
    cli.leaving("nothing was written")
    assert cli.run(main, [], "tool.py") == 130
    err = capsys.readouterr().err
    assert err.strip().splitlines() == ["tool.py: interrupted by SIGINT: nothing was written"], err
    assert signal.getsignal(signal.SIGINT) is handler


def test_call_says_one_line_for_a_child_the_signal_killed_silently(capsys):
    from course_utils import cli

    child = [sys.executable, "-c", "import os, signal; os.kill(os.getpid(), signal.SIGTERM)"]
    assert cli.call(child, "course.py release") == 143
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("course.py release: interrupted by SIGTERM: "), err
    assert cli.call([sys.executable, "-c", "raise SystemExit(3)"], "course.py release") == 3


def _copy_clone(tmp_path: Path, *more: str) -> Path:
    """The files the tools read and write, copied (the tools write beside themselves)."""
    clone = tmp_path / "clone"
    ignore = shutil.ignore_patterns("__pycache__", "*.pyc", ".ipynb_checkpoints")
    for folder in ("course_utils", "scripts", "solutions", "notebooks", "student", "data", *more):
        if (ROOT / folder).is_file():
            shutil.copy2(ROOT / folder, clone / folder)
        else:
            shutil.copytree(ROOT / folder, clone / folder, ignore=ignore)
    for name in ("INSTRUCTORS.md", "pyproject.toml", "constraints.txt", "README.md"):
        shutil.copy2(ROOT / name, clone / name)
    shutil.copy2(ROOT / "course.py", clone / "course.py")
    return clone


def _files(folder: Path) -> dict[str, bytes]:
    paths = sorted(p for p in folder.rglob("*") if p.is_file() and "__pycache__" not in p.parts)
    return {p.relative_to(folder).as_posix(): p.read_bytes() for p in paths}


def _interrupt(tmp_path: Path, clone: Path, command: list[str], hold: str, signum: int, *,
               group: bool = False, **more_env: str) -> subprocess.CompletedProcess:
    """Run ``command`` in ``clone`` until it holds at ``hold`` ("event|needle|nth"), then send
    ``signum`` to it (``group``: to its whole process group, as a terminal's Ctrl-C does)."""
    hook = tmp_path / "hook"
    hook.mkdir(exist_ok=True)
    (hook / "sitecustomize.py").write_text(HOLD)
    marker = tmp_path / "holding"
    env = dict(os.environ, PYTHONPATH=str(hook), COURSE_TEST_HOLD=f"{hold}|{marker}",
               COURSE_VENV=str(Path(sys.executable).parent.parent), PYTHONHASHSEED="0", MPLBACKEND="Agg",
               **more_env)
    run = subprocess.Popen(command, cwd=clone, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                           text=True, start_new_session=True)
    deadline = time.monotonic() + 120
    while not marker.exists() and time.monotonic() < deadline and run.poll() is None:
        time.sleep(0.05)
    if not marker.exists():
        if run.poll() is None:
            os.killpg(run.pid, signal.SIGKILL)
        pytest.fail(f"the tool never reached {hold}: {run.communicate(timeout=60)}")
    if group:
        os.killpg(run.pid, signum)
    else:
        run.send_signal(signum)
    stdout, stderr = run.communicate(timeout=120)
    return subprocess.CompletedProcess(command, run.returncode, stdout, stderr)


def _one_line(done: subprocess.CompletedProcess, signum: int, *words: str) -> None:
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1, done.stderr
    assert f"interrupted by {signal.Signals(signum).name}" in lines[0], done.stderr
    assert all(w in lines[0] for w in words), done.stderr
    assert done.returncode == 128 + signum, (done.returncode, done.stderr)


@pytest.mark.slow
@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM])
def test_release_interrupted_in_nbgrader_writes_nothing(tmp_path, signum):
    """The signal while nbgrader generate_assignment reads a lesson (nbgrader catches every
    exception there and reports a failure): one line, not two tracebacks."""
    clone = _copy_clone(tmp_path)
    (clone / "student" / "03_dimension_walkthrough.ipynb").unlink()  # release has a file to write
    before = _files(clone)
    done = _interrupt(tmp_path, clone, [sys.executable, "scripts/nbgrader_tools.py", "release"],
                      f"open|{os.sep}source{os.sep}.{os.sep}02_|1", signum)
    _one_line(done, signum, "nbgrader_tools.py: ", "nothing was written")
    assert _files(clone) == before


@pytest.mark.slow
def test_release_interrupted_between_two_renames_puts_the_first_back(tmp_path):
    """The signal as the second file is renamed into place: the first goes back too."""
    clone = _copy_clone(tmp_path)
    for name in ("03_dimension_walkthrough.ipynb", "04_pytorch_implementation.ipynb"):
        path = clone / "student" / name  # a stale copy: release replaces it
        nb = nbformat.read(path, as_version=4)
        nb.cells[0].source += "\nan edit a release undoes"
        nbformat.write(nb, path)
    before = _files(clone)
    done = _interrupt(tmp_path, clone, [sys.executable, "scripts/nbgrader_tools.py", "release"],
                      f"os.rename|{os.sep}student{os.sep}0|2", signal.SIGINT)
    _one_line(done, signal.SIGINT, "nothing was written")
    assert _files(clone) == before


@pytest.mark.slow
@pytest.mark.parametrize("signum, group", [(signal.SIGINT, True), (signal.SIGTERM, False)])
def test_course_release_relays_the_interruption_on_one_line(tmp_path, signum, group):
    """course.py release: a terminal's Ctrl-C reaches course.py and its child (the group); a
    SIGTERM to course.py alone is relayed to the child. Either way one line, the child's."""
    clone = _copy_clone(tmp_path)
    (clone / "student" / "03_dimension_walkthrough.ipynb").unlink()
    before = _files(clone)
    done = _interrupt(tmp_path, clone, [sys.executable, "course.py", "release"],
                      f"open|{os.sep}source{os.sep}.{os.sep}02_|1", signum, group=group)
    _one_line(done, signum, "nbgrader_tools.py: ", "nothing was written")
    assert "Traceback" not in done.stderr
    assert _files(clone) == before


@pytest.mark.slow
@pytest.mark.parametrize("script, args, hold, signum, said", [
    # exercise_answers build: as the first stored answer file is renamed into place
    ("exercise_answers.py", ["build"], "os.rename|.pt|1", signal.SIGINT, "no stored answer was written"),
    ("exercise_answers.py", ["build"], "os.rename|.pt|1", signal.SIGTERM, "no stored answer was written"),
    # exercise_answers build: while it imports solutions/ (before the slow computing)
    ("exercise_answers.py", ["build"], f"open|{os.sep}solutions{os.sep}|1", signal.SIGINT,
     "no stored answer was written"),
    # nbgrader_tools release: while it imports (traitlets, nbgrader's first)
    ("nbgrader_tools.py", ["release"], f"open|{os.sep}traitlets{os.sep}|1", signal.SIGTERM,
     "nothing was written"),
], ids=["answers-first-write-INT", "answers-first-write-TERM", "answers-computing", "nbgrader-importing"])
def test_a_script_interrupted_says_one_line_and_writes_nothing(tmp_path, script, args, hold, signum, said):
    """A signal at the moment ``hold`` names: one line on stderr, exit 128 + the signal, no file changed."""
    clone = _copy_clone(tmp_path)
    before = _files(clone)
    done = _interrupt(tmp_path, clone, [sys.executable, f"scripts/{script}", *args], hold, signum)
    _one_line(done, signum, f"{script}: ", said)
    assert _files(clone) == before


@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM])
def test_safe_collect_interrupted_while_copying_leaves_no_private_copy(tmp_path, signum):
    """safe_collect.py stopped as it copies the first record into its private inbound: one line,
    exit 130/143, the exchange as it was and the private copy removed (it ended in a traceback,
    or silently with -15, and left nothing to tell what it had done)."""
    clone = _copy_clone(tmp_path)
    record = clone / "exchange" / "c" / "inbound" / "me+01_x+2026-01-02 03:04:05.000000 UTC"
    record.mkdir(parents=True)
    (record / "01_x.ipynb").write_text('{"cells": []}')
    (record / "timestamp.txt").write_text("2026-01-02 03:04:05.000000 UTC")
    (clone / "nbgrader_config.py").write_text("c = get_config()\n")  # run in a course folder
    temp = tmp_path / "temp"
    temp.mkdir()
    before = _files(clone)
    command = [sys.executable, "scripts/safe_collect.py", "01_x", "--exchange", "exchange", "--course", "c",
               "--owner", "off"]
    done = _interrupt(tmp_path, clone, command, f"open|{os.sep}safe_collect_|1", signum, TMPDIR=str(temp))
    _one_line(done, signum, "safe_collect.py: ", "nothing was written")
    assert _files(clone) == before and list(temp.iterdir()) == []


@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM])
def test_version_matrix_interrupted_while_making_the_venv_removes_it(tmp_path, signum):
    """version_matrix.py stopped as it makes a new --venv: one line, exit 130/143, no half-made
    environment left (a rerun would have taken it for one of ours and reused it)."""
    clone = _copy_clone(tmp_path)
    env_dir = tmp_path / "env"
    before = _files(clone)
    done = _interrupt(tmp_path, clone, [sys.executable, "scripts/version_matrix.py", "newest", "--venv",
                                        str(env_dir)], f"os.mkdir|{env_dir}|2", signum)
    _one_line(done, signum, "version_matrix.py: ", f"{env_dir} was removed")
    assert _files(clone) == before and not env_dir.exists()


@pytest.mark.slow
@pytest.mark.skipif(not Path("/proc/cpuinfo").exists(), reason="holds as it reads /proc/cpuinfo (Linux)")
@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM])
def test_bench_interrupted_while_it_runs_says_one_line(tmp_path, signum):
    """`python -m course_utils.bench gqa` stopped once started (as it reads the CPU's name for its
    header): one line, 130/143; it was KeyboardInterrupt's traceback (or -15), then a line that
    said "while starting" (the early handler was never replaced by cli.run's)."""
    clone = _copy_clone(tmp_path)
    done = _interrupt(tmp_path, clone, [sys.executable, "-m", "course_utils.bench", "gqa", "--repeats", "1",
                                        "--context", "32", "--layers", "1"], "open|/proc/cpuinfo|1", signum)
    _one_line(done, signum, "python -m course_utils.bench: ", "nothing was written")
    assert "while starting" not in done.stderr


def test_python_m_of_a_module_that_is_no_tool_is_left_alone():
    """course_utils/_starting.py sets the handler for the tools only: importing cli there for
    `python -m course_utils.cli` made runpy warn that it was imported before it ran. Run as a
    command, the library module says it is none: one line, exit 2, no warning."""
    done = subprocess.run([sys.executable, "-m", "course_utils.cli"], cwd=ROOT, capture_output=True,
                          text=True, timeout=120)
    assert done.returncode == 2 and len(done.stderr.splitlines()) == 1, done
    assert done.stderr.startswith("python -m course_utils.cli: a library module, not a command"), done


@pytest.mark.parametrize("module, args", [("course_utils.model.train", ["induction", "--steps", "2"]),
                                          ("course_utils.bench", ["mha"])], ids=["train", "bench"])
@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM])
def test_python_m_interrupted_while_torch_imports_says_one_line(tmp_path, module, args, signum):
    """`python -m course_utils.X` stopped as it imports torch (the package's __init__ runs before
    X's own handler is set): one line, 130/143, not KeyboardInterrupt's traceback (or -15)."""
    clone = _copy_clone(tmp_path)
    before = _files(clone)
    done = _interrupt(tmp_path, clone, [sys.executable, "-m", module, *args],
                      f"open|{os.sep}torch{os.sep}|1", signum)
    _one_line(done, signum, f"python -m {module}: ", "while starting; nothing was written")
    assert _files(clone) == before


@pytest.mark.slow
@pytest.mark.parametrize("nth, said", [(1, "nothing was written"), (2, "no checkpoint was written")])
def test_train_interrupted_writes_no_checkpoint(tmp_path, nth, said):
    """``python -m course_utils.model.train induction --out ...`` stopped as it checks that --out
    can be written (before training: the first file it opens there) or as it saves (the second:
    the sidecar, once the weights' temporary file is written): no file is left there."""
    clone = _copy_clone(tmp_path)
    out = tmp_path / "ckpt" / "induction"
    out.parent.mkdir()
    before = _files(clone)
    done = _interrupt(tmp_path, clone, [sys.executable, "-m", "course_utils.model.train", "induction",
                                        "--steps", "2", "--out", str(out), "--no-progress"],
                      f"open|{out.parent}{os.sep}|{nth}", signal.SIGINT)
    _one_line(done, signal.SIGINT, "course_utils.model.train: ", said)
    assert _files(clone) == before and list(out.parent.iterdir()) == []


@pytest.mark.slow
@pytest.mark.parametrize("hold, said", [
    (f"open|{os.sep}nbformat{os.sep}|1", "while starting; nothing was written"),  # importing nbformat
    (f"open|notebooks{os.sep}03_|2", "files finished before the signal were written"),  # 2nd read: upgrading
])
def test_notebook_tools_upgrade_interrupted_says_so(tmp_path, hold, said):
    """`notebook_tools upgrade` exited -2 with nothing on stderr (the signal came as it imported)."""
    clone = _copy_clone(tmp_path)
    before = _files(clone)
    lessons = sorted(str(p.relative_to(clone)) for p in (clone / "notebooks").glob("0*.ipynb"))
    done = _interrupt(tmp_path, clone, [sys.executable, "scripts/notebook_tools.py", "upgrade", *lessons],
                      hold, signal.SIGINT)
    _one_line(done, signal.SIGINT, "notebook_tools.py: ", said)
    assert _files(clone) == before


@pytest.mark.slow
def test_publish_interrupted_between_two_renames_writes_nothing(tmp_path):
    clone = _copy_clone(tmp_path, "docs", "tests", "binder")  # the files the links point at
    before = _files(clone)
    command = [sys.executable, "scripts/publish.py", "--repo", "a/b", "--tag", "v9.9.9"]
    done = _interrupt(tmp_path, clone, command, f"os.rename|{clone}{os.sep}|2", signal.SIGTERM)
    _one_line(done, signal.SIGTERM, "publish.py: ", "nothing was written")
    assert _files(clone) == before


@pytest.mark.slow
def test_student_tree_interrupted_while_copying_leaves_no_out_dir(tmp_path):
    clone = _copy_clone(tmp_path, "binder", "environment.yml", "LICENSE", ".gitignore")
    before, out = _files(clone), tmp_path / "new" / "tree"
    done = _interrupt(tmp_path, clone, [sys.executable, "scripts/student_tree.py", str(out)],
                      f"shutil.copyfile|{os.sep}data{os.sep}|2", signal.SIGINT)
    _one_line(done, signal.SIGINT, "student_tree.py: ", f"{out} was not made")
    assert _files(clone) == before and not out.parent.exists()


@pytest.mark.slow
def test_a_signal_once_the_work_is_done_is_ignored(tmp_path):
    """A signal as the tool exits (its atexit clean-ups; Jupyter's take a moment) neither kills it
    silently nor prints a line about an interruption that stopped nothing: exit 0, stderr empty."""
    clone = _copy_clone(tmp_path)
    lessons = sorted(str(p.relative_to(clone)) for p in (clone / "notebooks").glob("0*.ipynb"))
    done = _interrupt(tmp_path, clone, [sys.executable, "scripts/notebook_tools.py", "upgrade", *lessons],
                      "atexit|-|1", signal.SIGINT)
    assert (done.returncode, done.stderr) == (0, ""), done
    assert done.stdout.count("already nbformat 4.5") == len(lessons)
