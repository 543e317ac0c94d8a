"""Battery 16a's bench cases (issue 38): inconsistent records, unchecked seeds, devices,
containers and labels of course_utils.bench, each refused by name."""

from __future__ import annotations

import math

import pytest

from course_utils.bench import timing
from course_utils.bench.mha_speed import DeviceComparison
from course_utils.bench.timing import RatioSpread, Timing

MHA = "nn.MultiheadAttention"


def _raises(make, error: type[Exception], words: list[str]) -> None:
    """``make()`` raises ``error`` whose message holds every one of ``words``."""
    with pytest.raises(error) as info:
        make()
    for word in words:
        assert word in str(info.value), (word, str(info.value))


def _comparison(**changes) -> DeviceComparison:
    fields = {"title": "t", "timings": [Timing(MHA, 0.1, 1.0, [0.1]), Timing("b", 0.2, 2.0, [0.2])],
              "max_abs_diff": {"b": 1e-6}, "tolerance": 1e-3, "reference_std": 1.0, "agree": {"b": True}}
    return DeviceComparison(**{**fields, **changes})


# -- inconsistent Timing / RatioSpread / DeviceComparison (and the methods that read them) --
@pytest.mark.parametrize(("make", "words"), [
    (lambda: Timing("a", 5.0, 1.0, [0.1, 0.2]), ["Timing('a').median_s", "median of its samples_s", "5.0"]),
    (lambda: RatioSpread("b", "a", 9.0, 1.0, 2.0, 0.5, 3.0, 3), ["RatioSpread('b')", "median=9.0 > q3=2.0"]),
    (lambda: RatioSpread("b", "a", 1.5, 1.0, 2.0, 1.8, 3.0, 3), ["RatioSpread('b')", "low=1.8 > q1=1.0"]),
    (lambda: RatioSpread("b", "a", 0.0, 0.0, 0.0, 0.0, 0.0, 1), ["RatioSpread('b').median", "> 0", "0.0"]),
    (lambda: _comparison(timings=[Timing(MHA, 0.1, 1.0, [0.1])]),
     ["DeviceComparison.max_abs_diff", "'b'", "timings' names"]),
    (lambda: _comparison(timings=[Timing(MHA, 0.1, 1.0), Timing("b", 0.2, 2.0), Timing(MHA, 0.1, 1.0)]),
     ["DeviceComparison.timings' names", "distinct", "repeats ['nn.MultiheadAttention']"]),
    (lambda: _comparison(timings=[Timing("b", 0.2, 2.0)]), ["DeviceComparison.timings", MHA]),
    (lambda: _comparison(max_abs_diff={"b": 1.0}), ["DeviceComparison.agree['b']", "1.0", "atol"]),
    (lambda: _comparison(max_abs_diff={"b": 0.0}, agree={"b": False}),
     ["DeviceComparison.agree['b']", "False"]),
    (lambda: _comparison(max_abs_diff={"zz": 1e-6}, agree={"zz": True}),
     ["DeviceComparison.max_abs_diff", "'zz'"]),
    (lambda: _comparison(reference_std=0.0), ["DeviceComparison.reference_std", "0.0"]),
])
def test_inconsistent_timing_records_are_refused(make, words) -> None:
    _raises(make, ValueError, words)


def test_consistent_timing_records_are_kept() -> None:
    """What the package itself builds still passes, a NaN diff included (an overflowed output), and
    the baseline's own spread (name == baseline, every ratio 1) as format_spread_table prints it."""
    timings = timing.timings_from_samples({MHA: [0.1, 0.3, 0.2], "b": [0.2, 0.1, 0.4]}, MHA)
    assert timings[0].median_s == pytest.approx(0.2)
    spread = timing.ratio_spread(timings, MHA, MHA)
    assert spread.median == pytest.approx(1.0) and "no clear difference" in spread.verdict()
    assert "DIFFERS" in _comparison(max_abs_diff={"b": math.nan}, agree={"b": False}).report()
    assert "agrees" in _comparison().report()


# -- plot_sweep drew str() of a non-str title / ylabel --
@pytest.mark.parametrize(("label", "value"),
                         [("title", 123), ("title", b"t"), ("ylabel", 123), ("ylabel", b"ms")])
def test_plot_sweep_refuses_a_non_str_label(label, value) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import pandas as pd

    from course_utils.bench.mha_speed import plot_sweep

    table = pd.DataFrame({"a": [1.0, 2.0]}, index=pd.Index([64, 128], name="seq_len"))
    fig, ax = plt.subplots()
    try:
        _raises(lambda: plot_sweep(table, ax, **{"title": "t", label: value}), TypeError,
                [label, type(value).__name__, repr(value)])
    finally:
        plt.close(fig)


# -- bench_decode / bench_whole_step / make_kv_caches / random_buffer: arguments named up front --
def _gs():
    from course_utils.bench import gqa_speed

    return gqa_speed


def _ds():
    from course_utils.bench import decode_step

    return decode_step


SMALL_DECODE = dict(num_heads=4, d_head=16, context=8, num_layers=1, groups=(4, 1), repeats=1, warmup=0,
                    copy_mib=0, flush_multiple=1, progress=False)


def _decode_run(**changes):
    return _gs().bench_decode(**{**SMALL_DECODE, **changes})


@pytest.mark.parametrize(("make", "error", "words"), [
    # seeds reached torch.manual_seed / torch.Generator unchecked
    (lambda: _ds().random_buffer(64, seed=__import__("numpy").int64(2)), None, []),
    (lambda: _gs().make_kv_caches(4, 16, 8, 1, (4, 1), seed=True), TypeError, ["seed", "bool"]),
    (lambda: _gs().make_kv_caches(4, 16, 8, 1, (4, 1), seed=2.5), TypeError, ["seed", "float", "2.5"]),
    (lambda: _gs().make_kv_caches(4, 16, 8, 1, (4, 1), seed="2"), TypeError, ["seed", "str", "'2'"]),
    (lambda: _gs().make_kv_caches(4, 16, 8, 1, (4, 1), seed=math.nan), TypeError, ["seed", "float", "nan"]),
    # flush_multiple was named by flush_bytes' parameter 'multiple'
    (lambda: _decode_run(flush_multiple=-1), ValueError, ["flush_multiple", "-1"]),
    (lambda: _decode_run(flush_multiple=0), ValueError, ["flush_multiple", "0"]),
    (lambda: _decode_run(flush_multiple=True), TypeError, ["flush_multiple", "bool"]),
    (lambda: _decode_run(flush_multiple=2.5), TypeError, ["flush_multiple", "2.5"]),
    (lambda: _decode_run(flush_multiple="2"), TypeError, ["flush_multiple", "'2'"]),
    # devices: '' reached torch.device, b'cpu' was taken
    (lambda: _gs().bench_decode(**SMALL_DECODE, device=""), ValueError, ["device", "''"]),
    (lambda: _gs().bench_decode(**SMALL_DECODE, device=b"cpu"), TypeError, ["device", "bytes", "b'cpu'"]),
    # containers: methods / groups of the wrong type reached `in` or hashing
    (lambda: _gs().bench_decode(**SMALL_DECODE, methods=None), TypeError, ["methods", "NoneType"]),
    (lambda: _gs().bench_decode(**SMALL_DECODE, methods=[["course"]]), ValueError,
     ["methods", "[['course']]"]),
    (lambda: _ds().bench_whole_step([(1, 8)], "abc", d_model=64, num_heads=4, progress=False), TypeError,
     ["groups", "str", "'abc'"]),
    (lambda: _ds().bench_whole_step([(1, 8)], None, d_model=64, num_heads=4, progress=False), TypeError,
     ["groups", "NoneType"]),
    # a meta buffer was "read" in no time
    (lambda: _ds().make_read_probe(__import__("torch").empty(1024, device="meta")), ValueError,
     ["buffer", "meta"]),
    (lambda: _ds().read_bandwidth(__import__("torch").empty(1024, device="meta"), repeats=1), ValueError,
     ["buffer", "meta"]),
])
def test_bench_arguments_are_named(make, error, words) -> None:
    if error is None:  # a NumPy int seed is a seed: taken, not refused
        assert make().numel() == 16
        return
    _raises(make, error, words)


# -- bench records: zero sizes and inconsistent fields (DecodeBench, WholeStep, StepRow) --
def _decode_bench(**changes):
    gs = _gs()
    rows = [gs.DecodeRow(4, 65536, {"course": [2e-3, 3e-3, 2e-3]}),
            gs.DecodeRow(1, 16384, {"course": [1e-3] * 3})]
    fields = dict(num_heads=4, d_head=16, context=64, num_layers=2, batch=1, threads=1, rows=rows,
                  sdpa_mha_s=[2e-3] * 3, copy_s=[1e-3] * 3, copy_bytes=2**20, read_s=[1e-3] * 3,
                  read_bytes=2**20)
    return gs.DecodeBench(**{**fields, **changes})


def _step_row(batch: int, g: int):
    """A row at context 8 with the bytes a SmallDecoder of _whole_step's sizes reads."""
    sizes = _ds().decoder_bytes(64, 4, g, 1, context=8, batch=batch, mlp_ratio=4)
    return _ds().StepRow(batch, 8, g, *sizes, [1e-3, 2e-3])


def _whole_step(**changes):
    ds = _ds()
    rows = [_step_row(1, g) for g in (4, 1)]
    fields = dict(d_model=64, num_heads=4, num_layers=1, mlp_ratio=4,
                  weight_dtype=__import__("torch").float32, attention="course", threads=1, rows=rows,
                  read_s=[1e-3], read_bytes=2**20,
                  llc=(2**20, "test"), flush_bytes=2**22, weights_s={(1, 8): [1e-3, 1e-3]})
    return ds.WholeStep(**{**fields, **changes})


@pytest.mark.parametrize(("make", "error", "words"), [
    (lambda: _decode_bench(copy_s=[]), ValueError, ["DecodeBench.copy_s", "copy_bytes=1048576"]),
    (lambda: _decode_bench(copy_s=[1e-3] * 2), ValueError, ["DecodeBench.copy_s", "3 samples", "got 2"]),
    (lambda: _decode_bench(copy_s=[1e-3] * 4), ValueError, ["DecodeBench.copy_s", "3 samples", "got 4"]),
    (lambda: _decode_bench(read_s=[1e-3] * 2), ValueError, ["DecodeBench.read_s", "3 samples", "got 2"]),
    (lambda: _decode_bench(read_s=[1e-3] * 4), ValueError, ["DecodeBench.read_s", "got 4"]),
    (lambda: _decode_bench(threads=2, read_one_thread_s=[1e-3] * 2), ValueError,
     ["DecodeBench.read_one_thread_s", "got 2"]),
    (lambda: _decode_bench(threads=2, read_one_thread_s=[1e-3] * 4), ValueError,
     ["DecodeBench.read_one_thread_s", "got 4"]),
    (lambda: _ds().StepRow(1, 64, 2, 1000, 1, [1e-3]), ValueError, ["StepRow.cache_bytes", "260", "got 1"]),
    (lambda: _whole_step(weight_dtype=__import__("torch").int64), TypeError,
     ["WholeStep.weight_dtype", "int64"]),
    (lambda: _whole_step(attention=""), ValueError, ["WholeStep.attention", "''"]),
    (lambda: _whole_step(attention="no_such_value"), ValueError, ["WholeStep.attention", "'no_such_value'"]),
    (lambda: _whole_step(rows=[*_whole_step().rows, *(_step_row(2, g) for g in (4, 1))]),
     ValueError, ["WholeStep.weights_s", "(2, 8)"]),
    (lambda: _whole_step(weights_s={(1, 8): [1e-3]}), ValueError, ["WholeStep.weights_s", "2 samples"]),
])
def test_inconsistent_bench_records_are_refused(make, error, words) -> None:
    _raises(make, error, words)


def test_consistent_bench_records_are_kept() -> None:
    """The records as the benchmarks build them: no copy (copy_mib=0), no weights timed, one thread."""
    bench = _decode_bench(copy_s=[], copy_bytes=0)
    assert bench.speedup(1) == pytest.approx(2.0) and isinstance(bench.noise_warnings(), list)
    assert _decode_bench().copy_gb_per_s > 0
    assert _whole_step(weights_s={}).speedup(1, 8, 1) == pytest.approx(1.0)
    assert _whole_step(attention="fused").attention == "fused"


# -- bench.memory: NotebookMemory and the per-test report accepted inconsistent or NaN values --
def _memory():
    from course_utils.bench import memory

    return memory


@pytest.mark.parametrize(("make", "words"), [
    (lambda: _memory().NotebookMemory("x", None, 1.0), ["NotebookMemory('x')", "peak_mb=None", "error=''"]),
    (lambda: _memory().NotebookMemory("x", 1.0, 1.0, "KeyError: k"), ["NotebookMemory('x')", "peak_mb=1.0"]),
    (lambda: _memory().NotebookMemory("x", 1.0, 3.0, cells=[_memory().CellTime(0, 1.0, "a")] * 2),
     ["NotebookMemory('x').cells", "[0, 0]"]),
    (lambda: _memory().NotebookMemory("x", 1.0, 1.0, cells=[_memory().CellTime(0, 50.0, "a")]),
     ["NotebookMemory('x').cells", "seconds=1.0", "50.0"]),
    (lambda: _memory().format_test_report({"a": {"peak_mb": math.nan}}), ["'a'", "peak_mb=nan"]),
    (lambda: _memory().format_test_report({"a": {"peak_mb": 5.0, "start_mb": math.inf}}),
     ["'a'", "start_mb=inf"]),
    (lambda: _memory().format_test_report({"a": {"peak_mb": 0.0}}), ["'a'", "peak_mb=0.0", "> 0"]),
])
def test_inconsistent_memory_records_are_refused(make, words) -> None:
    _raises(make, ValueError, words)


def test_read_test_report_refuses_a_nan_peak(tmp_path) -> None:
    report = tmp_path / "peaks.json"
    report.write_text('{"tests": {"a": {"peak_mb": NaN}}}', encoding="utf-8")  # what json.dumps writes
    before = report.read_bytes()
    _raises(lambda: _memory().read_test_report(report), ValueError, [str(report), "'a'", "peak_mb=nan"])
    assert report.read_bytes() == before
    report.write_text('{"tests": {"a": {"peak_mb": 12.5, "start_mb": null, "seconds": 0.5}}}',
                      encoding="utf-8")
    assert "12 MB" in _memory().format_test_report(_memory().read_test_report(report))
