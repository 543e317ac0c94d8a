"""The notebook memory benchmark measures what a kernel really holds."""

from __future__ import annotations

import sys

import nbformat
import pytest

from course_utils.bench.memory import NotebookMemory, format_memory_table, notebook_peak_memory

pytestmark = pytest.mark.skipif(sys.platform == "win32", reason="needs the resource module")


def _notebook(tmp_path, name: str, source: str):
    path = tmp_path / name
    nbformat.write(nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(source)]), path)
    return path


def test_peak_memory_sees_a_300_mb_allocation(tmp_path):
    small = notebook_peak_memory(_notebook(tmp_path, "small.ipynb", "x = 1"))
    big = notebook_peak_memory(_notebook(tmp_path, "big.ipynb", "x = b'\\x01' * (300 * 2**20)\ndel x"))
    assert small.peak_mb is not None and big.peak_mb is not None
    assert 20 < small.peak_mb < 1000
    assert big.peak_mb - small.peak_mb > 0.9 * 300 * 2**20 / 1e6  # the peak, though x was freed


def test_a_failing_notebook_is_a_row_not_a_crash(tmp_path):
    row = notebook_peak_memory(_notebook(tmp_path, "broken.ipynb", "raise ValueError('boom')"))
    assert row.peak_mb is None and "boom" in row.error
    table = format_memory_table([row, NotebookMemory("fine.ipynb", 512.0, 3.2),
                                 NotebookMemory("huge.ipynb", 2500.0, 9.0)])
    assert "not measured" in table and "512 MB" in table and "over Binder's 2 GB" in table
    assert max(len(line) for line in table.splitlines()) <= 100


def test_bad_path_is_a_clear_error(tmp_path):
    with pytest.raises(ValueError, match="path must be an existing .ipynb"):
        notebook_peak_memory(tmp_path / "missing.ipynb")
