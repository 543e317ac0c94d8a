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
    (lambda: _comparison(max_abs_diff={"b": 0.0}, agree={"b": False}), ["DeviceComparison.agree['b']", "False"]),
    (lambda: _comparison(max_abs_diff={"zz": 1e-6}, agree={"zz": True}), ["DeviceComparison.max_abs_diff", "'zz'"]),
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
@pytest.mark.parametrize(("label", "value"), [("title", 123), ("title", b"t"), ("ylabel", 123), ("ylabel", b"ms")])
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
