"""Battery 19 (issue 38), fixes by fix49u: course.py, course_utils/cli.py and scripts/."""

from __future__ import annotations

import importlib.util
import os
import shutil
import signal
import sys
from pathlib import Path

import pytest
from bad_input_cases import import_script

from course_utils import cli

ROOT = Path(__file__).resolve().parent.parent
pytestmark_posix = pytest.mark.skipif(os.name == "nt", reason="POSIX signals")


_script = import_script


# -- G6: nbgrader_tools.py source stopped right after the course was swapped in -----------------

@pytestmark_posix
@pytest.mark.skipif(importlib.util.find_spec("nbgrader") is None, reason="no nbgrader")
@pytest.mark.parametrize("moment", ["after _swap_in", "during the staging clean-up"])
def test_source_stopped_after_the_swap_says_what_was_written(moment, tmp_path, monkeypatch, capsys):
    tools = _script("nbgrader_tools")
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


# version_matrix.py --venv '' is refused by its own rule ("the current folder ... would be emptied")
@pytest.mark.parametrize("script, argv, option", [
    ("safe_collect", ["03_dimension_walkthrough", "--exchange", "", "--course", "mha-course"], "--exchange")])
def test_an_empty_path_option_is_refused(script, argv, option, tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)  # '' was read as this folder
    with pytest.raises(SystemExit) as stopped:
        _script(script).main(argv)
    err = capsys.readouterr().err
    assert stopped.value.code == 2, err
    assert f"argument {option}: " in err and "an empty path ''" in err, err


@pytest.mark.parametrize("what", ["", 3])
def test_path_type_checks_what(what):
    with pytest.raises(TypeError if what == 3 else ValueError, match="^what must be a non-empty str"):
        cli.path_type(what)


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
