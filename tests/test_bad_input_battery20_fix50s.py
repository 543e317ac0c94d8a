"""Battery 20a's bench cases (issue 38): read_test_report on JSON nested too deeply, clocks that
never advance or read NaN in interleaved_samples and make_read_probe, a last-level cache
override past 1 TiB, and an accuracy above 1 in the training table, each refused by name."""

from __future__ import annotations

import itertools
import math

import pytest
import torch
from bad_input_cases import raises_naming

from course_utils.bench import decode_step
from course_utils.bench.memory import read_test_report
from course_utils.bench.timing import interleaved_samples
from course_utils.bench.train_speed import format_training_table


# -- O5: read_test_report let a RecursionError out of json.loads, naming no file --
def test_a_deeply_nested_test_report_is_refused_naming_the_file(tmp_path) -> None:
    path = tmp_path / "deep.json"
    path.write_text("[" * 100_000 + "]" * 100_000, encoding="utf-8")
    err = raises_naming(ValueError, [str(path), "per-test memory report", "nested too deeply"],
                        lambda: read_test_report(path))
    assert "UTF-8" not in err  # valid UTF-8 and valid JSON: only its depth is the problem


# -- S6: a clock that never advances gave all-zero samples; one reading NaN raced the probes --
def _readings(*values: float):
    """A clock returning ``values`` in turn, then the last one forever."""
    it = itertools.chain(values, itertools.repeat(values[-1]))
    return lambda: next(it)


def test_interleaved_samples_refuses_a_clock_that_never_advances() -> None:
    raises_naming(ValueError, ["clock", "advances", "all 6 samples read 0 s"],
                  lambda: interleaved_samples({"a": lambda: None, "b": lambda: None}, repeats=3,
                                              warmup=0, clock=lambda: 1.0))


def test_interleaved_samples_keeps_a_zero_among_samples_that_advanced() -> None:
    """A coarse clock can miss one short call: only a clock that never moved is refused."""
    clock = _readings(0.0, 0.0, 0.0, 1.0)
    samples = interleaved_samples({"a": lambda: None}, repeats=2, warmup=0, clock=clock)
    assert samples == {"a": [0.0, 1.0]}


def _race_with(monkeypatch, clock):
    """make_read_probe's race between a (fake) compiled sum and torch.sum, timed by ``clock``."""
    buffer = torch.ones(1024)
    total = buffer.sum().item()
    monkeypatch.setattr(decode_step, "_compiled_read_sum", lambda: (lambda address, n, threads: total, "-O2"))
    return decode_step.make_read_probe(buffer, 1, clock=clock)


@pytest.mark.parametrize(("clock", "words"), [
    (lambda: math.nan, ["clock", "nan then nan", "a read by compiled sum"]),
    (lambda: 1.0, ["clock", "advances", "all 6 reads of the race read 0 s"]),
    (_readings(5.0, 4.0), ["clock", "never decrease", "5.0 then 4.0"]),
], ids=["nan", "constant", "backwards"])
def test_make_read_probe_refuses_a_clock_that_reads_nan_or_never_advances(monkeypatch, clock, words) -> None:
    raises_naming(ValueError, words, lambda: _race_with(monkeypatch, clock))


def test_make_read_probe_still_races_on_a_clock_that_advances(monkeypatch) -> None:
    ticks = itertools.count()
    _, what = _race_with(monkeypatch, lambda: float(next(ticks)))
    assert "the faster in a race with" in what


# -- S7: COURSE_UTILS_LLC_MIB=99999999999999999999999 was taken as a 1e29-byte cache --
@pytest.mark.parametrize("value", [str(2**20 + 1), "99999999999999999999999", "9" * 5000,
                                   "\u00b2", "0", "-3", "1.5", "nan", "inf"])
def test_a_last_level_cache_override_out_of_range_is_refused_by_name(monkeypatch, value) -> None:
    monkeypatch.setenv(decode_step.LLC_ENV, value)
    raises_naming(ValueError, [decode_step.LLC_ENV, "whole number of MiB", "1 TiB", repr(value)[:20]],
                  decode_step.last_level_cache_bytes)


def test_a_last_level_cache_override_up_to_1_tib_is_taken(monkeypatch) -> None:
    monkeypatch.setenv(decode_step.LLC_ENV, str(decode_step.MAX_LLC_MIB))
    assert decode_step.last_level_cache_bytes() == (2**40, decode_step.LLC_ENV)


# -- S8: format_training_table printed an accuracy of 1.5 --
@pytest.mark.parametrize(("key", "value"), [("agreement_acc", 1.5), ("induction_heldout_acc", 2),
                                            ("agreement_acc_attractor", 1.0000001)])
def test_an_accuracy_above_one_is_refused_naming_the_row_and_column(key, value) -> None:
    good = {"seed": 0, "induction_seconds": 1.0, "induction_heldout_acc": 0.9, "agreement_acc": 1.0,
            "agreement_acc_attractor": 0.0}
    rows = [good, {**good, "seed": 1, key: value}]
    raises_naming(ValueError, [f"rows[1][{key!r}]", "accuracy", "[0, 1]", repr(value)],
                  lambda: format_training_table(rows))
