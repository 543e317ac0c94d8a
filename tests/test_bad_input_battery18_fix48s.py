"""Battery 18a's bench cases (issue 38): result records frozen once checked (g07, g29), time_cold
naming ``steps`` (g02), repeated names and unequal sample counts (g18), empty or unknown record
fields (g19), plot_sweep's table (g21), SmallDecoder's x dtype (g22), an empty flush buffer (g23)
and the error line of a failed notebook run (g32), each refused by name."""

from __future__ import annotations

import argparse
import dataclasses
import math

import pytest
import torch

from course_utils.bench import decode_step, gqa_speed, memory, mha_speed, timing

MHA = "nn.MultiheadAttention"


def _raises(make, error: type[Exception], words: list[str]) -> None:
    """``make()`` raises ``error`` whose message holds every one of ``words``."""
    with pytest.raises(error) as info:
        make()
    for word in words:
        assert word in str(info.value), (word, str(info.value))


# -- valid records, one of each ---------------------------------------------------------------
def _timing() -> timing.Timing:
    return timing.Timing("a", 1e-3, 1.0, [1e-3, 2e-3, 1e-3])


def _spread() -> timing.RatioSpread:
    return timing.RatioSpread("b", "a", 1.0, 0.9, 1.1, 0.8, 1.2, 5)


def _notebook() -> memory.NotebookMemory:
    return memory.NotebookMemory("a.ipynb", 500.0, 10.0, cells=[memory.CellTime(0, 1.0, "x = 1")])


def _step_row(g: int = 4) -> decode_step.StepRow:
    sizes = decode_step.decoder_bytes(64, 4, g, 1, context=8, batch=1, mlp_ratio=4)  # _whole_step's
    return decode_step.StepRow(1, 8, g, *sizes, [1e-3, 2e-3])


def _whole_step() -> decode_step.WholeStep:
    return decode_step.WholeStep(64, 4, 1, 4, torch.float32, "course", 1, [_step_row(4), _step_row(1)],
                                 [1e-3], 2**20, (2**20, "test"), 2**22, {(1, 8): [1e-3, 1e-3]})


def _decode_row(g: int = 4) -> gqa_speed.DecodeRow:
    return gqa_speed.DecodeRow(g, 16384 * g, {"course": [2e-3, 3e-3, 2e-3]})


def _decode_bench() -> gqa_speed.DecodeBench:
    return gqa_speed.DecodeBench(4, 16, 64, 2, 1, 1, [_decode_row(4), _decode_row(1)], [2e-3] * 3,
                                 [1e-3] * 3, 2**20, read_s=[1e-3] * 3, read_bytes=2**20)


def _comparison() -> mha_speed.DeviceComparison:
    timings = [timing.Timing(MHA, 0.1, 1.0, [0.1]), timing.Timing("b", 0.2, 2.0, [0.2])]
    return mha_speed.DeviceComparison("t", timings, {"b": 1e-6}, 1e-3, 1.0, {"b": True}, notes=["n"])


RECORDS = {"Timing": _timing, "RatioSpread": _spread, "NotebookMemory": _notebook, "StepRow": _step_row,
           "WholeStep": _whole_step, "DecodeRow": _decode_row, "DecodeBench": _decode_bench,
           "DeviceComparison": _comparison}


# -- g07 / g29: a record checked once stays valid ----------------------------------------------
@pytest.mark.parametrize(("record", "field", "value"), [
    ("Timing", "samples_s", [-5.0]),
    ("Timing", "median_s", float("nan")),
    ("RatioSpread", "median", float("nan")),
    ("RatioSpread", "q1", 2.0),
    ("RatioSpread", "repeats", 0),
    ("NotebookMemory", "peak_mb", -5.0),
    ("NotebookMemory", "error", ""),
    ("StepRow", "samples_s", [-1.0]),
    ("WholeStep", "rows", []),
    ("WholeStep", "read_s", []),
    ("DecodeRow", "samples_s", {}),
    ("DecodeBench", "rows", []),
    ("DecodeBench", "read_s", [0.0]),
    ("DeviceComparison", "agree", {"b": False, "x": True}),
])
def test_records_refuse_a_changed_field(record, field, value) -> None:
    made = RECORDS[record]()
    _raises(lambda: setattr(made, field, value), dataclasses.FrozenInstanceError, [field])


@pytest.mark.parametrize(("record", "field", "key"), [
    ("WholeStep", "weights_s", (1, 8)),
    ("DecodeRow", "samples_s", "course"),
    ("DeviceComparison", "agree", "x"),
    ("DeviceComparison", "max_abs_diff", "b"),
    ("DeviceComparison", "skipped", "x"),
])
@pytest.mark.parametrize("change", ["set", "del", "update", "clear", "pop", "setdefault"])
def test_records_refuse_a_changed_dict_field(record, field, key, change) -> None:
    mapping = getattr(RECORDS[record](), field)
    changes = {"set": lambda: mapping.__setitem__(key, ()), "del": lambda: mapping.__delitem__(key),
               "update": lambda: mapping.update({key: ()}), "clear": mapping.clear,
               "pop": lambda: mapping.pop(key), "setdefault": lambda: mapping.setdefault(key, ())}
    _raises(changes[change], TypeError, [f"{record}.{field}", "read-only"])


@pytest.mark.parametrize(("record", "field"), [
    ("Timing", "samples_s"), ("NotebookMemory", "cells"), ("StepRow", "samples_s"), ("WholeStep", "rows"),
    ("WholeStep", "read_s"), ("DecodeBench", "rows"), ("DecodeBench", "sdpa_mha_s"),
    ("DecodeBench", "copy_s"), ("DecodeBench", "read_s"), ("DeviceComparison", "timings"),
    ("DeviceComparison", "notes"),
])
def test_records_keep_their_lists_as_tuples(record, field) -> None:
    value = getattr(RECORDS[record](), field)
    assert isinstance(value, tuple), (record, field, type(value))
    _raises(lambda: value.append(None), AttributeError, ["tuple", "append"])


def test_a_record_does_not_share_the_callers_list() -> None:
    samples = [1e-3, 2e-3, 1e-3]
    made = timing.Timing("a", 1e-3, 1.0, samples)
    samples.append(-5.0)
    assert made.best_s == min(made.samples_s) and len(made.samples_s) == 3 and made.best_s > 0
    rows = {"course": [2e-3, 3e-3]}
    row = gqa_speed.DecodeRow(4, 4096, rows)
    rows["course"].append(-1.0)
    assert len(row.samples_s["course"]) == 2 and row.best_s("course") > 0


def test_frozen_records_still_copy_replace_and_read() -> None:
    import copy
    import pickle

    row = _decode_row()
    again = pickle.loads(pickle.dumps(row))
    assert again == row and copy.deepcopy(row) == row
    _raises(lambda: again.samples_s.__setitem__("course", ()), TypeError, ["DecodeRow.samples_s"])
    _raises(lambda: dataclasses.replace(row, samples_s={"course": []}), ValueError,
            ["DecodeRow.samples_s", "'course'"])
    comparison = _comparison()
    assert all(comparison.agree.values()) and "n" in comparison.report()  # lesson 04's reads
    bench = _decode_bench()
    assert "course" in bench.mha.samples_s and bench.format()  # lesson 07's reads


# -- g02: time_cold names its own argument ------------------------------------------------------
@pytest.mark.parametrize("steps", [{"a": 3}, {"a": lambda: None, "b": "x"}, {"a": lambda x: x}])
def test_time_cold_names_steps(steps) -> None:
    bad = next(k for k, v in steps.items() if not callable(v) or v.__code__.co_argcount)
    _raises(lambda: gqa_speed.time_cold(steps, baseline="a", repeats=1, warmup=0, flush_bytes=1024,
                                        progress=None), TypeError, [f"steps[{bad!r}]"])


# -- g18: repeated names, unequal sample counts -------------------------------------------------
@pytest.mark.parametrize("samples", [{"a": [1.0], "b": [1.0, 2.0]}, {"a": [1.0, 2.0, 3.0], "b": [1.0, 2.0]}])
def test_timings_from_samples_refuses_unequal_sample_counts(samples) -> None:
    counts = [f"{k!r}: {len(v)}" for k, v in samples.items()]
    _raises(lambda: timing.timings_from_samples(samples, "a"), ValueError, ["samples", *counts])


@pytest.mark.parametrize("names", [["a.ipynb", "a.ipynb"], ["a.ipynb", "b.ipynb", "a.ipynb"]])
def test_format_memory_table_refuses_repeated_names(names) -> None:
    rows = [memory.NotebookMemory(n, 500.0, 10.0) for n in names]
    _raises(lambda: memory.format_memory_table(rows), ValueError, ["rows' names", "'a.ipynb'"])


def test_bench_memory_refuses_notebooks_of_one_file_name_before_running(tmp_path, capsys) -> None:
    from course_utils.bench.cli import main

    paths = []
    for folder in ("notebooks", "student"):
        (tmp_path / folder).mkdir()
        paths.append(tmp_path / folder / "01_a.ipynb")
        paths[-1].write_text('{"cells": [], "metadata": {}, "nbformat": 4, "nbformat_minor": 5}')
    with pytest.raises(SystemExit) as info:
        main(["memory", *map(str, paths)])
    assert info.value.code == 2
    err = capsys.readouterr().err
    assert "notebooks" in err and "'01_a.ipynb'" in err
    _raises(lambda: memory._check_notebook_names(argparse.Namespace(notebooks=list(map(str, paths)))),
            ValueError, ["notebooks", "01_a.ipynb"])


# -- g19: empty or inconsistent record fields ---------------------------------------------------
@pytest.mark.parametrize(("make", "words"), [
    (lambda: timing.Timing("", 1e-3, 1.0), ["Timing.name", "''"]),
    (lambda: timing.Timing((), 1e-3, 1.0), ["Timing.name", "()"]),
    (lambda: gqa_speed.DecodeRow(4, 1000, {}), ["DecodeRow.samples_s", "at least one"]),
    (lambda: gqa_speed.DecodeRow(4, 1000, {"course": []}), ["DecodeRow.samples_s", "'course'"]),
    (lambda: gqa_speed.DecodeRow(4, 1000, {"bogus": [1.0]}), ["DecodeRow.samples_s", "'bogus'", "course"]),
    (lambda: gqa_speed.DecodeRow(4, 1000, {"course": [1.0], "fused": []}),
     ["DecodeRow.samples_s", "'fused'"]),
    (lambda: decode_step.StepRow(1, 16, 2, 1000, 100), ["StepRow.samples_s", "at least one"]),
    (lambda: decode_step.StepRow(1, 16, 2, 1000, 100, []), ["StepRow.samples_s", "()"]),
])
def test_records_refuse_empty_or_unknown_fields(make, words) -> None:
    _raises(make, ValueError, words)


def test_ratio_spread_of_the_baseline_itself_is_documented() -> None:
    # format_spread_table prints the baseline's own row through ratio_spread(timings, baseline, baseline)
    assert "may equal" in timing.RatioSpread.__doc__
    timings = timing.timings_from_samples({"a": [1.0, 1.1], "b": [2.0, 2.2]}, "a")
    assert timing.ratio_spread(timings, "a", "a").median == 1.0


# -- g21: plot_sweep checks its table as sweep_mha makes it ------------------------------------
def _plot(table):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots()
    try:
        return mha_speed.plot_sweep(table, ax, title="t")
    finally:
        plt.close(fig)


def _table(values, index=(64, 128)):
    import pandas as pd

    return pd.DataFrame({"batched": values}, index=pd.Index(list(index), name="seq_len"))


@pytest.mark.parametrize(("make", "error", "words"), [
    (lambda: __import__("pandas").DataFrame(), ValueError, ["table", "at least one row", "(0, 0)"]),
    (lambda: _table([1.0, 2.0]).iloc[:0], ValueError, ["table", "(0, 1)"]),
    (lambda: _table([1.0, -1.0]), ValueError, ["table['batched']", "seq_len=128", "-1.0"]),
    (lambda: _table([float("nan"), 1.0]), ValueError, ["table['batched']", "seq_len=64", "nan"]),
    (lambda: _table([1.0, math.inf]), ValueError, ["table['batched']", "inf"]),
    (lambda: _table([0.0, 1.0]), ValueError, ["table['batched']", "0.0"]),
    (lambda: _table(["1", "2"]), ValueError, ["table['batched']", "str '1'"]),
    (lambda: _table([1.0, 2.0], (0, 1)), ValueError, ["table.index[0]", "got 0"]),
    (lambda: _table([1.0, 2.0], (64, 64)), ValueError, ["table.index", "repeats [64]"]),
    (lambda: _table([1.0, 2.0], ("a", "b")), TypeError, ["table.index[0]", "'a'"]),
])
def test_plot_sweep_refuses_a_table_sweep_mha_would_not_make(make, error, words) -> None:
    _raises(lambda: _plot(make()), error, words)


# -- g22: SmallDecoder's x has the dtype and device of its stream ------------------------------
@pytest.mark.parametrize("method", ["step", "weights_pass"])
@pytest.mark.parametrize("dtype", [torch.float64, torch.float16, torch.bfloat16])
@pytest.mark.parametrize("weight_dtype", [torch.float32, torch.bfloat16])
def test_small_decoder_refuses_an_x_of_another_dtype(method, dtype, weight_dtype) -> None:
    decoder = decode_step.SmallDecoder(32, 4, 2, 1, context=8, attention="course", weight_dtype=weight_dtype)
    x = torch.randn(1, 32, dtype=dtype)
    _raises(lambda: getattr(decoder, method)(x), TypeError, ["x must be torch.float32", str(dtype)])


# -- g23: an empty flush buffer evicts nothing --------------------------------------------------
@pytest.mark.parametrize("shape", [(0,), (4, 0)])
def test_time_flushed_refuses_an_empty_flush(shape) -> None:
    _raises(lambda: decode_step.time_flushed({"a": lambda: None}, torch.empty(shape), 0, 1), ValueError,
            ["flush", "at least one element", str(shape)])


# -- g32: the error line of a failed notebook run -----------------------------------------------
def _timeout_error() -> Exception:
    from nbclient.exceptions import CellTimeoutError
    from nbformat.v4 import new_code_cell

    return CellTimeoutError.error_from_timeout_and_cell("Cell execution timed out", 2,
                                                        new_code_cell("while True: pass"))


@pytest.mark.parametrize(("make", "wanted"), [
    (_timeout_error, "CellTimeoutError: A cell timed out while it was being executed, after 2 seconds."),
    (lambda: RuntimeError("Traceback\n\x1b[0;31mValueError\x1b[0m: boom\n\n-----\n"),
     "RuntimeError: ValueError: boom"),
    (lambda: RuntimeError(""), "RuntimeError: "),
])
def test_notebook_peak_memory_keeps_the_telling_error_line(tmp_path, monkeypatch, make, wanted) -> None:
    notebook = tmp_path / "a.ipynb"
    notebook.write_text('{"cells": [], "metadata": {}, "nbformat": 4, "nbformat_minor": 5}')

    def failing_run(coroutine, message):
        coroutine.close()  # never started: no kernel
        raise make()

    monkeypatch.setattr(memory.cli, "run_kernel", failing_run)
    row = memory.notebook_peak_memory(notebook, timeout=2)
    assert row.peak_mb is None and row.error == wanted
