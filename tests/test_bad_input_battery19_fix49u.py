"""Battery 19 (issue 38), fixes by fix49u: course.py, course_utils/cli.py and scripts/."""

from __future__ import annotations

import importlib.util
import os
import shutil
import signal
import sys
from pathlib import Path

import pytest

from course_utils import cli

ROOT = Path(__file__).resolve().parent.parent
pytestmark_posix = pytest.mark.skipif(os.name == "nt", reason="POSIX signals")


def _script(name: str):
    """scripts/NAME.py, imported from scripts/ (as the tools import each other)."""
    scripts = str(ROOT / "scripts")
    if scripts not in sys.path:
        sys.path.insert(0, scripts)
    return __import__(name)


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

