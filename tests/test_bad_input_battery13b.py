"""Battery 13's CLI and grading findings taken by fix43b (issue 38; the rest is in
test_bad_input_battery13.py). Each test failed before its fix."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import nbformat
import pytest
from test_cli_interrupts import _interrupt, _one_line

ROOT = Path(__file__).resolve().parent.parent
NOTEBOOK_TOOLS = ROOT / "scripts" / "notebook_tools.py"


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
