"""Battery 22 (issue 38), G3: ``course.py student-tree`` / ``publish`` got a SIGINT/SIGTERM right
after its child tool had done its work ("wrote 94 files ...", exit 0) and exited 130/143 without a
word: ``cli.call`` turned the child's 0 into 128 + the relayed signal (a rule meant for JupyterLab).
A course tool's status is now trusted, and once it has ended the parent ignores the stop signals,
as ``cli.run`` does once ``main`` is done. Each case runs a fake parent and a fake course tool in
child processes; the signals are sent by the processes themselves, at a fixed point, so no timing
is guessed."""

from __future__ import annotations

import os
import signal
import subprocess
import sys

import pytest
from bad_input_cases import SCRIPTS

from course_utils import cli

pytestmark = pytest.mark.skipif(os.name == "nt", reason="POSIX signals")

CHILD = """
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

PARENT = """
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
    child = CHILD.format(scripts=str(SCRIPTS), when=when, signum=int(signum))
    parent = PARENT.format(scripts=str(SCRIPTS), child=child, when=when, signum=int(signum))
    return subprocess.run([sys.executable, "-c", parent], capture_output=True, text=True, timeout=120)


@pytest.mark.parametrize("when", ["after-child-done", "after-call-returned"])
@pytest.mark.parametrize("signum", SIGNALS, ids=[s.name for s in SIGNALS])
def test_a_signal_once_the_course_tool_is_done_is_ignored(when: str, signum: int) -> None:
    """The tool wrote everything and exited 0: the command is done, exit 0, no line about an
    interruption (it was 128 + the signal with no line, or a false "nothing was written")."""
    done = _parent(when, signum)
    assert (done.returncode, done.stderr) == (0, ""), (signal.Signals(signum).name, when, done)
    assert done.stdout == "wrote 94 files\n", done.stdout


@pytest.mark.parametrize("signum", SIGNALS, ids=[s.name for s in SIGNALS])
def test_a_course_tool_stopped_mid_work_still_says_its_one_line(signum: int) -> None:
    done = _parent("mid-work", signum)
    name = signal.Signals(signum).name
    assert done.returncode == 128 + signum, done
    assert done.stderr.splitlines() == [f"child.py: interrupted by {name}: {cli.NOTHING_WRITTEN}"], done
    assert done.stdout == "", done.stdout


def test_call_outside_a_tool_puts_the_handlers_back() -> None:
    """In a library (no stop_at_once), call(course_tool=True) leaves the caller's handlers as they were."""
    before = {sig: signal.getsignal(sig) for sig in cli.STOP_SIGNALS}
    assert cli.call([sys.executable, "-c", "pass"], "test", course_tool=True) == 0
    assert {sig: signal.getsignal(sig) for sig in cli.STOP_SIGNALS} == before
