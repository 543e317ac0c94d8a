"""Battery 11's package findings (issue 38): counts and sizes without an upper bound, arguments
checked after use, tensors with no values and arguments of the wrong kind. Each is now refused
by name, before any work: the argument, what was expected and what arrived."""

from __future__ import annotations

import argparse

import pytest
import torch

from course_utils.bench import cli, decode_step, gqa_speed, timing

HUGE = 10**12


def refused(call, error, words):
    """``call()`` raises ``error`` whose message holds every one of ``words``."""
    with pytest.raises(error) as caught:
        call()
    missing = [w for w in words if w not in str(caught.value)]
    assert not missing, f"{missing} not in {caught.value}"


def never_called():
    raise AssertionError("a function was timed although its counts were refused")


# -- item 1 and 7: timing counts have one upper bound, checked before the progress bar -------------
COUNTS = [
    ("interleaved repeats", lambda: timing.interleaved_samples({"a": never_called}, repeats=HUGE, warmup=0),
     ValueError, ["repeats", "10000", str(HUGE)]),
    ("interleaved warmup", lambda: timing.interleaved_samples({"a": never_called}, repeats=1, warmup=HUGE),
     ValueError, ["warmup", "10000"]),
    ("interleaved inner", lambda: timing.interleaved_samples({"a": never_called}, repeats=1, warmup=0,
                                                             inner=HUGE), ValueError, ["inner", "10000"]),
    ("time_interleaved repeats", lambda: timing.time_interleaved({"a": never_called}, baseline="a",
                                                                 repeats=HUGE), ValueError, ["repeats"]),
    ("time_interleaved warmup", lambda: timing.time_interleaved({"a": never_called}, baseline="a",
                                                                warmup=HUGE), ValueError, ["warmup"]),
    ("time_interleaved inner", lambda: timing.time_interleaved({"a": never_called}, baseline="a",
                                                               inner=HUGE), ValueError, ["inner"]),
    ("time_interleaved repeats str", lambda: timing.time_interleaved({"a": never_called}, baseline="a",
                                                                     repeats="3"), TypeError,
     ["repeats must be an int", "str"]),
    ("time_interleaved repeats None", lambda: timing.time_interleaved({"a": never_called}, baseline="a",
                                                                      repeats=None), TypeError,
     ["repeats must be an int", "None"]),
    ("time_interleaved warmup str", lambda: timing.time_interleaved({"a": never_called}, baseline="a",
                                                                    warmup="3"), TypeError,
     ["warmup must be an int"]),
    ("time_interleaved warmup None", lambda: timing.time_interleaved({"a": never_called}, baseline="a",
                                                                     warmup=None), TypeError,
     ["warmup must be an int"]),
    ("read_bandwidth repeats", lambda: decode_step.read_bandwidth(repeats=HUGE), ValueError, ["repeats"]),
    ("time_flushed repeats", lambda: decode_step.time_flushed({"a": never_called}, torch.ones(4), 0, HUGE),
     ValueError, ["repeats"]),
    ("time_cold repeats str", lambda: gqa_speed.time_cold({"a": never_called}, baseline="a", repeats="9"),
     TypeError, ["repeats must be an int"]),
    ("bench_decode warmup", lambda: gqa_speed.bench_decode(2, 8, 16, 1, [2, 1], repeats=1, warmup=HUGE,
                                                           progress=False), ValueError, ["warmup"]),
    ("stage_times repeats", lambda: gqa_speed.stage_times((2, 1), num_heads=2, d_head=8, context=16,
                                                          num_layers=1, repeats=HUGE), ValueError,
     ["repeats"]),
    ("bench_whole_step repeats", lambda: decode_step.bench_whole_step([(1, 16)], (2, 1), d_model=16,
                                                                      num_heads=2, num_layers=1,
                                                                      repeats=HUGE, progress=False),
     ValueError, ["repeats"]),
]


@pytest.mark.parametrize("label, call, error, words", COUNTS, ids=[c[0] for c in COUNTS])
def test_timing_counts_are_bounded_and_checked_first(label, call, error, words):
    refused(call, error, words)


def test_the_cli_and_the_functions_share_one_cap():
    assert cli.repeat_count(str(timing.MAX_REPEATS)) == timing.MAX_REPEATS
    with pytest.raises(argparse.ArgumentTypeError, match=f"{timing.MAX_REPEATS:,}"):
        cli.repeat_count(str(timing.MAX_REPEATS + 1))
    assert timing.check_round_counts(timing.MAX_REPEATS, timing.MAX_REPEATS, timing.MAX_REPEATS) == (
        timing.MAX_REPEATS, timing.MAX_REPEATS, timing.MAX_REPEATS)
