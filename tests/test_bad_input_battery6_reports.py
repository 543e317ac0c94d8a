"""Battery 6, the last cases of the memory reports and the heatmap: bad records, bad rows,
a file that is not a notebook, and NaN weights answer with a message that names them."""

from __future__ import annotations

import json
import warnings

import pytest
import torch

from course_utils.bench.memory import (
    format_memory_table,
    format_test_report,
    notebook_peak_memory,
    read_test_report,
)


def test_a_report_record_without_a_numeric_peak_is_named(tmp_path):
    report = tmp_path / "report.json"
    report.write_text(json.dumps({"tests": {"a": {"peak_rss_mb": "x"}}}))
    with pytest.raises(ValueError, match=r"record of 'a' has no numeric 'peak_mb'"):
        read_test_report(report)
    with pytest.raises(ValueError, match=r"tests: the record of 'a'"):
        format_test_report({"a": {}})
    with pytest.raises(TypeError, match="tests must be a dict"):
        format_test_report(5)
    assert "1 tests; 0 over" in format_test_report({"a": {"peak_mb": 100.0, "start_mb": 90.0}})


def test_memory_table_rows_must_be_measurements():
    with pytest.raises(TypeError, match="rows must be a list of NotebookMemory"):
        format_memory_table([5])


def test_a_file_that_is_not_a_notebook_is_named(tmp_path):
    bad = tmp_path / "bad.ipynb"
    bad.write_text("{")
    with pytest.raises(ValueError, match=r"bad\.ipynb is not a notebook"):
        notebook_peak_memory(bad)


def test_nan_weights_are_drawn_with_a_warning_that_counts_them():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from course_utils.interp.heatmaps import plot_head

    weights = torch.rand(3, 3)
    weights[0, 0] = float("nan")
    with pytest.warns(UserWarning, match=r"weights: 1 of 9 entries are NaN"):
        ax = plot_head(weights, ["a", "b", "c"])
    plt.close(ax.figure)
    with warnings.catch_warnings():  # finite weights: no warning
        warnings.simplefilter("error")
        ax = plot_head(torch.rand(3, 3), ["a", "b", "c"])
    plt.close(ax.figure)
