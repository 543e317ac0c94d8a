"""Bad input to the exercises, the scripts and the small modules, pass 4 (battery 30's findings in
course_utils/exercises/, scripts/, cli.py, parallel.py; battery 31's repros)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
SCRIPTS = ROOT / "scripts"
sys.path.insert(0, str(SCRIPTS))
from course_cli import load_cli  # noqa: E402

cli = load_cli()


# --- scripts run by a Python without the course's packages (battery 30b) -------------------------

@pytest.mark.parametrize("script, args, command", [
    ("publish.py", ["--check"], "python3 course.py publish"),
    ("nbgrader_tools.py", ["table"], "python3 course.py release"),
    ("exercise_answers.py", ["check"], ".venv/bin/python scripts/exercise_answers.py"),
    ("notebook_tools.py", ["student", "OUT", "notebooks/00_start_here.ipynb"],
     ".venv/bin/python scripts/notebook_tools.py"),
    ("student_tree.py", ["OUT"], "python3 course.py student-tree"),
])
def test_scripts_without_the_course_packages_say_so_on_one_line(tmp_path, script, args, command):
    """Run by a Python that cannot import nbformat (here: -I -S, no site-packages) each script
    ended in a bare ModuleNotFoundError traceback; now one line names the module, the Python
    that ran and the command to use, exit 2, nothing written."""
    args = [str(tmp_path / "out") if a == "OUT" else a for a in args]
    p = subprocess.run([sys.executable, "-I", "-S", str(SCRIPTS / script), *args], cwd=ROOT,
                       capture_output=True, text=True, timeout=120)
    assert p.returncode == 2, p.stderr
    assert "Traceback" not in p.stderr
    assert len(p.stderr.strip().splitlines()) == 1, p.stderr
    assert "'nbformat'" in p.stderr and sys.executable in p.stderr and command in p.stderr
    assert p.stderr.startswith(f"{script}: ") and "nothing was written" in p.stderr
    assert not (tmp_path / "out").exists()


def test_missing_modules_problem_is_none_when_present_and_checks_needs():
    assert cli.missing_modules_problem("publish.py", ("sys", "json")) is None
    problem = cli.missing_modules_problem("version_matrix.py", ("no_such_module_61b",))
    assert "'no_such_module_61b'" in problem and "python3 course.py setup" in problem
    with pytest.raises(TypeError, match="needs must be a tuple of module names"):
        cli.missing_modules_problem("publish.py", "nbformat")
