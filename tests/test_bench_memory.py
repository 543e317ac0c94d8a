"""The notebook memory benchmark measures what a kernel really holds."""

from __future__ import annotations

import json
import subprocess
import sys

import nbformat
import pytest

from course_utils.bench.memory import (
    NotebookMemory,
    format_memory_table,
    format_slowest_cells,
    format_test_report,
    notebook_peak_memory,
    read_test_report,
)

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


def test_cell_times_name_the_slow_cell(tmp_path):
    path = tmp_path / "two.ipynb"
    nbformat.write(nbformat.v4.new_notebook(cells=[
        nbformat.v4.new_markdown_cell("# a heading"), nbformat.v4.new_code_cell("x = 1"),
        nbformat.v4.new_code_cell("import time\ntime.sleep(0.5)  # the slow one")]), path)
    row = notebook_peak_memory(path)
    assert [c.index for c in row.cells] == [1, 2]  # code cells only, by their place in the notebook
    assert row.cells[1].seconds >= 0.5 and row.cells[1].first_line == "import time"
    listing = format_slowest_cells(row, 1)
    assert "cell   2" in listing and "cell   1" not in listing


_PEAK_PROBE = """
from course_utils.bench.memory import peak_rss_bytes, reset_peak_rss
assert reset_peak_rss()
before = peak_rss_bytes()
block = b"\\x01" * (200 * 2**20)
del block
raised = peak_rss_bytes()
assert raised - before > 0.9 * 200 * 2**20, (before, raised)  # the peak stays up after the free
assert reset_peak_rss()
assert peak_rss_bytes() < raised - 0.5 * 200 * 2**20, (raised, peak_rss_bytes())  # and comes down
"""


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="VmHWM and clear_refs are Linux's")
def test_the_peak_can_be_reset_so_each_test_gets_its_own():
    # In a fresh interpreter: a long-lived test worker may already hold 200 MB of freed heap, and
    # the block then reuses resident pages without raising the peak (seen on CI). Every byte of
    # the block is written, so its pages are resident, unlike a calloc'd zero bytearray.
    result = subprocess.run([sys.executable, "-c", _PEAK_PROBE], capture_output=True, text=True,
                            timeout=120)
    assert result.returncode == 0, result.stderr[-2000:]


def test_the_test_report_lists_the_largest_first(tmp_path):
    path = tmp_path / "report.json"
    path.write_text(json.dumps({"tests": {
        "tests/a.py::small": {"peak_mb": 300.0, "start_mb": 290.0, "children_mb": None, "seconds": 0.1},
        "tests/b.py::huge": {"peak_mb": 17100.0, "start_mb": 600.0, "children_mb": None, "seconds": 4.0},
        "tests/c.py::middle": {"peak_mb": 900.0, "children_mb": 450.0, "seconds": 1.0}}}))
    text = format_test_report(read_test_report(path), top=2)
    lines = text.splitlines()
    assert "3 tests; 1 over Binder's 2 GB" in lines[0] and "450 MB" in lines[0]
    assert "huge" in lines[2] and "OVER 2 GB" in lines[2] and "+16,500 MB" in lines[2]
    assert "middle" in lines[3] and " - " in lines[3]  # no start size: no rise
    assert "largest rises" in lines[4] and "huge" in lines[5] and "small" in lines[6] and len(lines) == 7
    with pytest.raises(FileNotFoundError, match="run the tests first"):
        read_test_report(tmp_path / "missing.json")
    (tmp_path / "other.json").write_text("[1, 2]")
    with pytest.raises(ValueError, match="not a per-test memory report"):
        read_test_report(tmp_path / "other.json")
