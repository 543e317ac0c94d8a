"""Battery 21's re-run (issue 38): ``course.py student-tree`` stopped by SIGINT 0.15 s in printed
Python's KeyboardInterrupt traceback from the child's own start-up (its ``site`` and ``.pth``
files, before any handler of the course's) and exited 1. ``cli.call(..., course_tool=True)``
starts a course tool with the stop signals blocked; ``stop_at_once`` lets them through once its
handlers are set, so the signal ends the tool with its one line."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from bad_input_cases import SCRIPTS, import_script

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


def test_course_py_starts_its_own_tools_held_and_other_programs_not(monkeypatch) -> None:
    """publish, release and student-tree run course tools (stop_at_once first thing); lab and test
    run programs that would never let the signals through."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("course_held", SCRIPTS.parent / "course.py")
    course = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(course)
    calls: list[tuple[list[str], dict]] = []
    monkeypatch.setattr(course, "ensure_environment", lambda: None)
    monkeypatch.setattr(course.cli, "call", lambda args, *rest, **kw: calls.append((args, kw)) or 0)
    for argv in (["publish"], ["release"], ["student-tree", "--branch", "student"], ["lab"]):
        assert course.main(argv) == 0, argv
    program = {Path(args[1] if args[0].endswith("python") else args[0]).name: kw.get("course_tool", False)
               for args, kw in calls}
    assert program == {"publish.py": True, "nbgrader_tools.py": True, "student_tree.py": True,
                       "jupyter": False}
