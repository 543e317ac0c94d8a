"""Bad input to the benchmark's timing and sweeps: course_utils.bench.timing (Timing, RatioSpread,
paired ratios, clocks, format_table), mha_speed (sweeps, DeviceComparison), gqa_speed (decode
benches, KV caches) and decode_step (SmallDecoder, StepRow, WholeStep, read probes). Inconsistent
records, sizes beyond memory, meta tensors, non-finite samples and labels that are no str.

Moved here from the QA batteries' files (issue 38 and later batteries), grouped by the code under test;
a `# -- battery N` line marks where each battery's cases begin. Helpers shared with other bad-input
files live in tests/bad_input_cases.py."""

from __future__ import annotations

import dataclasses
import gc
import itertools
import math
import os
import re
import weakref

import numpy as np
import pytest
import torch
from bad_input_cases import BEYOND_FLOAT, Case, EqRaises, assert_named, raises_naming, refused

from course_utils.attention import sdpa_backends as SB
from course_utils.attention import validation as V
from course_utils.attention.gqa import GroupedQueryAttention, PublishedConfig
from course_utils.attention.hooks import HookPoint
from course_utils.attention.masks import causal_mask, masked_softmax
from course_utils.attention.mha import MultiHeadAttention
from course_utils.attention.mla import MultiHeadLatentAttention
from course_utils.attention.naive_mha import AttentionHead, NaiveMultiHeadAttention
from course_utils.attention.sdpa_backends import precision_notes
from course_utils.attention.shapes import TraceStep
from course_utils.attention.validation import MAX_THREADS
from course_utils.bench import decode_step, gqa_speed, mha_speed, timing
from course_utils.bench import decode_step as DS
from course_utils.bench import gqa_speed as GS
from course_utils.bench import memory as MEM
from course_utils.bench import mha_speed as MS
from course_utils.bench import timing as TI
from course_utils.bench import timing as TM
from course_utils.bench.decode_step import (
    SmallDecoder,
    StepRow,
    WholeStep,
    last_level_cache_bytes,
    make_read_probe,
)
from course_utils.bench.gqa_speed import DecodeBench, DecodeRow, make_kv_caches, small_cache_note, stage_times
from course_utils.bench.mha_speed import DeviceComparison
from course_utils.bench.timing import (
    RatioSpread,
    Timing,
    check_clock_advanced,
    check_function_name,
    clock_elapsed,
    interleaved_samples,
    paired_ratios,
    ratio_spread,
    time_interleaved,
)
from course_utils.interp.circuits import HeadTrace
from course_utils.model import transformer as TF
from course_utils.tasks.synthetic import AgreementBatch, InductionBatch, MixtureBatch
from course_utils.tasks.two_relations import RunResult
from course_utils.tasks.worked_example import CheapExpansion, Head

# -- battery 5 ---------------------------------------------------------------------------------------

T1 = [TI.Timing("a", 1.0, 1.0, [1.0]), TI.Timing("b", 2.0, 2.0, [2.0])]


def test_format_table_reports_ratios_to_the_baseline_it_names():
    lines = TI.format_table("t", T1, "b", "B").splitlines()
    assert lines[1].endswith("ratio to B")
    assert [line.split()[-1] for line in lines[2:]] == ["0.50x", "1.00x"]  # not the stored ratios


def test_an_integer_clock_that_moves_forward_still_works():
    readings = iter(range(0, 100, 2))
    assert TI.interleaved_samples({"a": lambda: 1}, repeats=2, warmup=0, clock=lambda: next(readings)) == \
        {"a": [2.0, 2.0]}


def test_copy_mib_zero_is_documented_and_leaves_the_copy_out():
    assert "``copy_mib=0`` leaves the copy out" in GS.bench_decode.__doc__
    run = GS.bench_decode(4, 8, 16, 1, [4], copy_mib=0, repeats=1, warmup=0, progress=False)
    assert run.copy_s == () and run.copy_bytes == 0


# -- battery 6 (attention_bench) ---------------------------------------------------------------------

@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="needs FIFOs")
def test_llc_reader_skips_a_fifo_instead_of_blocking(tmp_path, monkeypatch):
    monkeypatch.delenv("COURSE_UTILS_LLC_MIB", raising=False)
    d = tmp_path / "index3"
    d.mkdir()
    (d / "level").write_text("3\n")
    (d / "type").write_text("Unified\n")
    os.mkfifo(d / "size")
    size, where = last_level_cache_bytes(tmp_path)  # returned at all: it did not block
    assert where != str(tmp_path) and size > 0
    (tmp_path / "index2").mkdir()
    for name, text in (("level", "2\n"), ("type", "Unified\n"), ("size", "2048K\n")):
        (tmp_path / "index2" / name).write_text(text)
    assert last_level_cache_bytes(tmp_path) == (2048 * 1024, str(tmp_path))
    with pytest.raises(TypeError, match="sysfs"):
        last_level_cache_bytes(5)


@pytest.mark.parametrize("call, error, words", [
    (lambda: causal_mask(10**6), ValueError, ["num_queries x num_keys", "bytes"]),
    (lambda: causal_mask(3, device="banana"), ValueError, ["device", "banana"]),
    (lambda: causal_mask(3, device=3), TypeError, ["device", "int"]),
    (lambda: masked_softmax(torch.randn(2, 3), torch.ones(4, 5, dtype=torch.bool)), ValueError,
     ["allowed", "(4, 5)", "(2, 3)"]),
    (lambda: masked_softmax(torch.ones(2, 3, dtype=torch.long), None), TypeError, ["scores", "int64"]),
    (lambda: masked_softmax(torch.randn(2, 3), torch.ones(2, 3)), TypeError, ["allowed", "torch.bool"]),
    (lambda: MultiHeadAttention(10**7, 1), ValueError, ["d_model", "bytes"]),
    (lambda: GroupedQueryAttention(10**6, 4, 2), ValueError, ["d_model", "bytes"]),
    (lambda: PublishedConfig("x", -1, 4, 2, 64, "s"), ValueError, ["num_layers", "-1"]),
    (lambda: PublishedConfig("x", 2, 4, 3, 64, "s"), ValueError, ["num_kv_heads", "num_heads=4", "3"]),
    (lambda: PublishedConfig(5, 2, 4, 2, 64, "s"), TypeError, ["name", "int"]),
    (lambda: precision_notes("banana", torch.float32), ValueError, ["device", "banana"]),
    (lambda: HookPoint().add_hook(lambda t: t[:1]), TypeError, ["hook", "(tensor, hook)", "cannot take 2"]),
    (lambda: GroupedQueryAttention(16, 4, 2).project_qkv(*[torch.randn(1, 5, 8)] * 3), ValueError,
     ["query", "d_model=16", "(1, 5, 8)"]),
    (lambda: time_interleaved({"a": lambda: None, "b": lambda: None}, baseline="a", repeats=3, warmup=0,
                              clock=lambda: 1.0), ValueError, ["clock", "advances", "0 s"]),
    (lambda: paired_ratios([Timing("a", 1.5, 1.0, [1.0, 2.0]), Timing("b", 1.0, 1.0, [1.0])], "b", "a"),
     ValueError, ["got 1 for 'b' and 2 for 'a'"]),
    (lambda: ratio_spread([Timing("a", 1.0, 1.0, []), Timing("b", 1.0, 1.0, [])], "b", "a"),
     ValueError, ["got 0 for 'b' and 0 for 'a'"]),
    (lambda: make_kv_caches(16, 64, 10**7, 100, [16]), ValueError, ["context", "bytes"]),
    (lambda: stage_times([16], context=8, num_layers=1, repeats=2, flush_mib=-1), ValueError,
     ["flush_mib", "-1"]),
    (lambda: SmallDecoder(64, 4, 4, 1, context=8, share_from=5), TypeError, ["share_from", "int"]),
    (lambda: SmallDecoder(64, 4, 4, 1, context=8).step(torch.randn(1, 32)), ValueError,
     ["x", "d_model=64", "(1, 32)"]),
    (lambda: SmallDecoder(10**6, 4, 4, 1, context=8), ValueError, ["d_model", "bytes"]),
    (lambda: make_read_probe(5), TypeError, ["buffer", "int"]),
    (lambda: DecodeRow(4, 100, {"course": [1e-3]}).best_s("bogus"), ValueError, ["method", "bogus"]),
    (lambda: DecodeRow(4, 100, {"repeat": [1e-3]}).gb_per_s(), ValueError, ["method", "course"]),
])
def test_battery6_call_is_named(call, error, words):
    with pytest.raises(error) as info:
        call()
    for word in words:
        assert word in str(info.value), (word, str(info.value))


def test_smalldecoder_step_still_takes_a_right_x():
    dec = SmallDecoder(64, 4, 4, 1, context=8)
    assert dec.step(torch.randn(1, 64)).shape == (1, 64)


def test_decode_row_reads_its_samples():
    row = DecodeRow(4, 100, {"course": [2.0, 1.0, 3.0]})
    assert row.best_s("course") == 1.0 and row.median_s("course") == 2.0


# -- battery 7 (a) -----------------------------------------------------------------------------------

def test_numpy_sizes_reach_the_memory_check():
    """Neighbours in the decode benchmark: the byte count that guards the allocation, and the
    small-cache note, were products of int64 sizes too."""
    with pytest.raises(ValueError, match="more than this machine"):
        make_kv_caches(16, np.int64(2**32), np.int64(2**32), 1, [16])
    assert small_cache_note(np.int64(2**40), np.int64(2**30)) is None  # a huge cache: no note


def _timings():
    return [timing.Timing("a", 1.0, 1.0, [1.0, 1.0]), timing.Timing("b", 2.0, 2.0, [2.0, 2.0])]


def _calls_nothing(**hooks):
    """interleaved_samples with hooks, and a function that records whether it ran."""
    ran = []
    timing.interleaved_samples({"a": lambda: ran.append(1)}, repeats=1, warmup=0, **hooks)
    return ran


ROWS_51_54 = [
    # row 51: a list of functions (not a mapping), a function or hook that needs an argument
    (lambda: timing.interleaved_samples([lambda: None], repeats=1, warmup=0), TypeError,
     ["fns", "mapping", "list"]),
    (lambda: timing.time_interleaved([lambda: None], baseline="a", repeats=1), TypeError,
     ["fns", "mapping", "list"]),
    (lambda: timing.interleaved_samples({"a": lambda x: x}, repeats=1, warmup=0), TypeError,
     ["fns['a']", "0 positional", "(x)"]),
    (lambda: _calls_nothing(before_each=lambda x: x), TypeError, ["before_each", "0 positional"]),
    (lambda: _calls_nothing(sync=lambda x: x), TypeError, ["sync", "0 positional"]),
    (lambda: _calls_nothing(after_round=lambda x: x), TypeError, ["after_round", "0 positional"]),
    (lambda: _calls_nothing(clock=lambda x: x), TypeError, ["clock", "0 positional"]),
    # row 51 neighbour: paired_ratios on something that is not a list of Timing
    (lambda: timing.paired_ratios({"a": 1}, "a", "a"), ValueError, ["timings", "list of Timing", "dict"]),
    (lambda: timing.paired_ratios([*_timings(), 3], "a", "b"), TypeError, ["timings[2]", "Timing", "int"]),
    # row 52: a float seed reached torch.manual_seed / torch.Generator
    (lambda: mha_speed.lesson_implementations(8, 2, seed=0.5), TypeError, ["seed", "int", "float 0.5"]),
    (lambda: mha_speed.bench_mha(1, 2, 8, 2, seed=-1), ValueError, ["seed", ">= 0", "-1"]),
    # row 53: repeats=0 returned inf for every stage
    (lambda: gqa_speed.stage_times(repeats=0), ValueError, ["repeats", "positive int", "0"]),
    (lambda: gqa_speed.stage_bandwidth(repeats=0), ValueError, ["repeats", "positive int", "0"]),
    # row 54: format_whole_step(3) ended in AttributeError
    (lambda: decode_step.format_whole_step(3),
     TypeError, ["result", "WholeStep", "int 3"]),
]


@pytest.mark.parametrize("call, error, words", ROWS_51_54)
def test_rows_51_54_are_named(call, error, words):
    refused(call, error, words)


def test_timing_still_takes_a_mapping_and_lists_of_timings():
    assert _calls_nothing(sync=lambda: None, clock=iter(range(100)).__next__) == [1]
    assert timing.paired_ratios(_timings(), "b", "a") == [2.0, 2.0]


@pytest.mark.parametrize("kwargs, error, words", [
    ({"shapes": [(1, 64), (2, 64), (1, 64)]}, ValueError, ["shapes", "distinct", "repeats [(1, 64)]"]),
    ({"shapes": [(1, 64)], "groups": (16, 4, 4)}, ValueError, ["groups", "distinct", "repeats [4]"]),
    ({"shapes": [(1, 0)]}, ValueError, ["shapes[0] context", "0"]),
    ({"shapes": [64]}, TypeError, ["shapes[0]", "(batch, context) pair", "int 64"]),
    ({"shapes": "1x64"}, ValueError, ["shapes", "(batch, context)", "'1x64'"]),
])
def test_whole_step_refuses_repeated_or_bad_shapes_before_timing(monkeypatch, kwargs, error, words):
    """Issue 38: a shape given twice was benchmarked twice and printed twice. Refused before
    the flush buffers are made (nothing is timed)."""
    def made(*args, **kwargs):
        raise AssertionError("a buffer was made before the shapes were checked")

    monkeypatch.setattr(decode_step, "random_buffer", made)
    with pytest.raises(error) as info:
        decode_step.bench_whole_step(progress=False, **kwargs)
    missing = [word for word in words if word not in str(info.value)]
    assert not missing, f"{missing} not in: {info.value}"


# -- battery 9 ---------------------------------------------------------------------------------------

def test_sweep_mha_refuses_a_repeated_size_before_measuring(monkeypatch):
    """sweep_mha('batch', [1, 1]) measured twice and returned one row."""
    measured = []
    monkeypatch.setattr(mha_speed, "bench_mha", lambda *a, **k: measured.append(a) or [])
    with pytest.raises(ValueError) as refused:
        mha_speed.sweep_mha("batch", [1, 1], repeats=1)
    assert "values must list distinct sizes" in str(refused.value) and "repeats [1]" in str(refused.value)
    assert measured == []


# -- battery 10 --------------------------------------------------------------------------------------

HUGE = 10**12


# -- 1. sizes beyond memory are refused before allocating ---------------------------------------
TOO_BIG = [
    ("MLA d_model", lambda: MultiHeadLatentAttention(HUGE, 2, 4, 4, 2), ["d_model asks for", "GiB"]),
    ("MLA num_heads", lambda: MultiHeadLatentAttention(8, HUGE, 4, 4, 2), ["num_heads asks for", "GiB"]),
    ("MLA d_head", lambda: MultiHeadLatentAttention(8, 2, HUGE, 4, 2), ["d_head asks for", "GiB"]),
    ("MLA d_latent", lambda: MultiHeadLatentAttention(8, 2, 4, HUGE, 2), ["d_latent asks for", "GiB"]),
    ("MLA d_rope", lambda: MultiHeadLatentAttention(8, 2, 4, 4, HUGE), ["d_rope asks for", "GiB"]),
    ("AttentionHead d_model", lambda: AttentionHead(HUGE, 4), ["d_model asks for", "d_k=4"]),
    ("AttentionHead d_k", lambda: AttentionHead(4, HUGE), ["d_k asks for", "d_model=4"]),
    ("NaiveMultiHeadAttention d_model", lambda: NaiveMultiHeadAttention(HUGE, 2), ["d_model asks for"]),
    ("lesson_implementations d_model", lambda: mha_speed.lesson_implementations(HUGE, 2),
     ["d_model asks for", "more than this machine's"]),
]


@pytest.mark.parametrize("call, words", [c[1:] for c in TOO_BIG], ids=[c[0] for c in TOO_BIG])
def test_sizes_beyond_memory_are_refused_before_allocating(call, words):
    refused(call, ValueError, words)


# -- battery 11 --------------------------------------------------------------------------------------

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


# -- item 6: repeated head-group counts are refused by every decode benchmark, by one helper ------
DUPLICATES = [
    ("stage_times", lambda: gqa_speed.stage_times((2, 2), num_heads=2, d_head=8, context=16, num_layers=1)),
    ("stage_bandwidth", lambda: gqa_speed.stage_bandwidth((2, 1, 1), num_heads=2, d_head=8, context=16,
                                                          num_layers=1)),
    ("bench_decode", lambda: gqa_speed.bench_decode(2, 8, 16, 1, [2, 2], repeats=1, progress=False)),
    ("make_kv_caches", lambda: gqa_speed.make_kv_caches(2, 8, 16, 1, (2, 1, 1))),
    ("bench_whole_step", lambda: decode_step.bench_whole_step([(1, 16)], (2, 2), d_model=16, num_heads=2,
                                                              num_layers=1, repeats=1, progress=False)),
]


@pytest.mark.parametrize("label, call", DUPLICATES, ids=[c[0] for c in DUPLICATES])
def test_repeated_groups_are_refused(label, call):
    refused(call, ValueError, ["groups must list distinct head-group counts", "which repeats"])


# -- battery 12 --------------------------------------------------------------------------------------

def test_flush_multiple_is_bounded_everywhere():
    for call in (lambda: DS.flush_note(2**20, multiple=10**13), lambda: DS.flush_bytes(10**13)):
        with pytest.raises(ValueError, match=rf"multiple must be an int in 1..{DS.MAX_FLUSH_MULTIPLE}, "
                                             r"got 10000000000000"):
            call()
    llc = DS.last_level_cache_bytes()[0]
    note = DS.flush_note(2**10, multiple=4)  # 1 KiB: no longer shown as "0 MiB"
    assert note is None if 2**10 >= 4 * llc else "flush capped at 0.000977 MiB" in note


# -- 8. NumPy seeds -----------------------------------------------------------------------------
def test_numpy_seeds_accepted_like_python_ints():
    model = TF.TinyTransformer(TF.ModelConfig(vocab_size=10, max_len=8, d_model=8, num_heads=2, num_layers=1))
    converted = TF.convert_model(model, 1, seed=np.int64(2))
    again = TF.convert_model(model, 1, seed=2)
    assert all(torch.equal(a, b) for a, b in zip(converted.state_dict().values(),
                                                 again.state_dict().values(), strict=True))
    decoder = DS.SmallDecoder(64, 2, 1, 1, context=8, seed=np.int64(2), attention="course")
    assert decoder.d_model == 64
    with pytest.raises(TypeError, match="seed must be an int"):
        DS.SmallDecoder(64, 2, 1, 1, context=8, seed=2.0, attention="course")


# -- battery 13 --------------------------------------------------------------------------------------

# -- b13: StageRow(seconds=0).gb_per_s raised ZeroDivisionError; seconds=-1 gave -1e-06 GB/s ------
@pytest.mark.parametrize("seconds, error, words", [
    (0.0, ValueError, ["StageRow.seconds", "> 0", "0.0"]),
    (-1.0, ValueError, ["StageRow.seconds", "> 0", "-1.0"]),
    ("1", TypeError, ["StageRow.seconds", "real number", "str '1'"]),
], ids=["zero", "negative", "str"])
def test_stage_row_needs_a_time_above_zero(seconds, error, words):
    from course_utils.bench import gqa_speed as GS

    assert_named(Case("StageRow", lambda: GS.StageRow("read K and V", 4, seconds, 1000), error, words))
    assert GS.StageRow("read K and V", 4, 1e-6, 1000).gb_per_s == pytest.approx(1.0)  # the control


def test_timing_without_samples_documents_its_best():
    from course_utils.bench.timing import Timing

    assert "median" in Timing.best_s.__doc__
    assert Timing("x", 2.0, 1.0).best_s == 2.0 and Timing("x", 2.0, 1.0, [3.0, 1.5, 2.0]).best_s == 1.5


# -- b13: forward_callables took an x of another dtype than the modules (refused only when called) --
def test_forward_callables_refuse_an_x_the_modules_cannot_take():
    from course_utils.bench import mha_speed as MS

    modules = {"torch": torch.nn.MultiheadAttention(8, 2, batch_first=True)}
    x16 = torch.zeros(1, 3, 8, dtype=torch.float16)
    assert_named(Case("dtype", lambda: MS.forward_callables(modules, x16), TypeError,
                      ["x (for modules['torch'])", "torch.float16", "torch.float32"]))
    assert MS.forward_callables(modules, torch.zeros(1, 3, 8))["torch"]().shape == (1, 3, 8)  # control


# -- b13 obscure: raw Python errors from validators given the wrong kind -------------------------
def _raw_error_cases():
    from course_utils.attention import validation as V
    from course_utils.bench import gqa_speed as GS

    return [
        Case("check_attention_fits batch str", lambda: V.check_attention_fits("3", 4, 8, 2), TypeError,
             ["batch must be an int", "str '3'"]),
        Case("check_attention_fits num_heads str", lambda: V.check_attention_fits(3, 4, 8, "2"), TypeError,
             ["num_heads must be an int", "str '2'"]),
        Case("stage_times groups None", lambda: GS.stage_times(None), TypeError,
             ["groups must be a list of ints", "NoneType"]),
        Case("stage_bandwidth groups None", lambda: GS.stage_bandwidth(None), TypeError,
             ["groups must be a list of ints", "NoneType"]),
        Case("make_kv_caches groups float", lambda: GS.make_kv_caches(4, 2, 8, 1, [4, 2.0]), TypeError,
             ["groups[1] must be an int", "float 2.0"]),
    ]


@pytest.mark.parametrize("case", _raw_error_cases(), ids=lambda c: c.name)
def test_validators_name_a_wrong_kind(case):
    assert_named(case)


# -- battery 14 (fix44a) -----------------------------------------------------------------------------

def _timing():
    from course_utils.bench.timing import Timing

    return Timing("nn.MultiheadAttention", 1e-3, 1.0, [1e-3])


def test_device_comparison_keeps_a_nan_or_inf_difference_as_measured() -> None:
    """An output that overflowed gives a NaN or inf max |diff|: reported as DIFFERS, not refused."""
    from course_utils.bench.timing import Timing

    for diff in (float("nan"), float("inf")):
        timings = [_timing(), Timing("F.sdpa", 1e-3, 1.0, [1e-3])]  # a diff is of a timed function
        report = DeviceComparison("t", timings, {"F.sdpa": diff}, 0.1, 1.0, {"F.sdpa": False}).report()
        assert "DIFFERS" in report


def _step_row() -> StepRow:
    return StepRow(1, 8, 1, 100, 100, [1e-3])


@pytest.mark.parametrize(("make", "label"), [
    (lambda: TraceStep(3, "x", ("B",), (2,), 0, True), "TraceStep.name"),
    (lambda: TraceStep("x", "x", ("B",), (2,), -1, True), "TraceStep.macs"),
    (lambda: TraceStep("x", "x", ("B",), (2,), 0, torch.tensor(True)), "TraceStep.contiguous"),
    (lambda: TraceStep("x", b"x", ("B",), (2,), 0, True), "TraceStep.code"),
    (lambda: TraceStep("x", "x", ("B",), (-2,), 0, True), "TraceStep.shape[0]"),
    (lambda: WholeStep(64, 4, 2, 4, torch.float32, "fused", 1.5, [_step_row()], [1e-3], 10,
                       (0, ""), 0), "WholeStep.threads"),
    (lambda: WholeStep(64, 4, 2, 4, torch.float32, None, 1, [_step_row()], [1e-3], 10,
                       (0, ""), 0), "WholeStep.attention"),
    (lambda: WholeStep(64, 4, 2, 4, torch.float32, "fused", 1, None, [1e-3], 10,
                       (0, ""), 0), "WholeStep.rows"),
    (lambda: DecodeBench(4, 16, 8, 1, None, 1, [], [1e-3], [], 0), "DecodeBench.batch"),
    (lambda: DecodeBench(4, 16, 8, 1, 1, 1, None, [1e-3], [], 0), "DecodeBench.rows"),
    (lambda: DecodeBench(4, 16, 8, 1, 1, 1, [DecodeRow(4, 4096, {"course": [1e-3]})], [1e-3], [], 0,
                         read_one_thread_s=[-1.0]),
     "DecodeBench.read_one_thread_s[0]"),
    (lambda: DeviceComparison("t", [_timing()], {"cpu": "x"}, 0.1, 1.0, {"cpu": True}),
     "DeviceComparison.max_abs_diff"),
    (lambda: DeviceComparison("t", [_timing()], {"cpu": 0.0}, 0.1, float("inf"), {"cpu": True}),
     "DeviceComparison.reference_std"),
    (lambda: DeviceComparison("t", [_timing()], {"cpu": 0.0}, 0.1, 1.0, {"cpu": None}),
     "DeviceComparison.agree"),
    (lambda: DeviceComparison("t", [_timing()], {"cpu": 0.0}, 0.1, 1.0, {"gpu": True}),
     "DeviceComparison.agree"),
    (lambda: DeviceComparison("t", [], {"cpu": 0.0}, 0.1, 1.0, {"cpu": True}), "DeviceComparison.timings"),
    (lambda: HeadTrace(torch.zeros(1, 2, 3), [], None, []), "HeadTrace.head_outputs"),
    (lambda: HeadTrace(torch.zeros(1, 2, 3), [], [], [[1.0]]), "HeadTrace.residual[0]"),
    (lambda: InductionBatch([[1, 2]], torch.zeros(1), torch.zeros(1, 2)), "InductionBatch.tokens"),
    (lambda: InductionBatch(torch.zeros(1, 2), np.zeros(1), torch.zeros(1, 2)), "InductionBatch.periods"),
    (lambda: AgreementBatch(*[torch.zeros(1)] * 3, None, *[torch.zeros(1)] * 4), "AgreementBatch.verb_pos"),
    (lambda: MixtureBatch(torch.zeros(1, 2), None, torch.zeros(1, 2), 0), "MixtureBatch.targets"),
    (lambda: MixtureBatch(torch.zeros(1, 2), torch.zeros(1, 2), torch.zeros(1, 2), 0.5),
     "MixtureBatch.num_induction"),
    (lambda: RunResult(2, 0, [1], 0.5, (0.5, 0.5), torch.nn.Linear(1, 1)), "RunResult.accuracy"),
    (lambda: RunResult(True, 0, [1], [0.5], (0.5, 0.5), torch.nn.Linear(1, 1)), "RunResult.num_heads"),
    (lambda: RunResult(2, 0, [1], [float("nan")], (0.5, 0.5), torch.nn.Linear(1, 1)),
     "RunResult.accuracy[0]"),
    (lambda: Head("a", None, None, None), "Head.w_q"),
    (lambda: Head(3, None, None, None), "Head.name"),
    (lambda: CheapExpansion("x", np.zeros(5), 1.0, (0, 1), np.zeros(2), 1.0), "CheapExpansion.head_outputs"),
    (lambda: CheapExpansion(np.zeros(5), np.zeros(5), float("inf"), (0, 1), np.zeros(2), 1.0),
     "CheapExpansion.total"),
])
def test_battery14_record_constructor_refuses_the_field(make, label: str) -> None:
    with pytest.raises((TypeError, ValueError), match=re.escape(label)):
        make()


# -- fields a method relies on: order, choice, non-empty ------------------------------------------
def test_ratio_spread_refuses_q1_above_q3() -> None:
    from course_utils.bench.timing import RatioSpread

    with pytest.raises(ValueError, match=r"RatioSpread\('a'\) must have .*q1 <= median <= q3"):
        RatioSpread("a", "b", 1.0, 2.0, 0.5, 0.1, 3.0, 5)


def test_ratio_spread_of_equal_ratios_is_accepted() -> None:
    """The ordering check leaves room for the rounding of statistics.quantiles."""
    from course_utils.bench.timing import Timing, ratio_spread

    timings = [Timing("a", 0.3, 3.0, [0.3] * 7), Timing("b", 0.1, 1.0, [0.1] * 7)]
    spread = ratio_spread(timings, "a", "b")
    assert spread.q1 <= spread.q3 * (1 + 1e-9) and "slower" in spread.verdict()


def test_stage_row_refuses_a_stage_it_does_not_time() -> None:
    from course_utils.bench.gqa_speed import StageRow

    with pytest.raises(ValueError, match=r"StageRow\.stage must be one of 'scores'"):
        StageRow("zz", 1, 1.0, 100)


def test_step_row_without_samples_names_the_field_in_best_s() -> None:
    # battery 18: a frozen StepRow can never be filled, so one without samples is refused when made
    with pytest.raises(ValueError, match=r"StepRow\.samples_s must hold at least one item"):
        StepRow(1, 8, 1, 100, 100)


@pytest.mark.parametrize(("make", "label"), [
    (lambda: WholeStep(64, 4, 2, 4, torch.float32, "fused", 1, [], [1e-3], 10, (0, ""), 0), "WholeStep.rows"),
    (lambda: WholeStep(64, 4, 2, 4, torch.float32, "fused", 1, [_step_row()], [], 10, (0, ""), 0),
     "WholeStep.read_s"),
    (lambda: DecodeBench(4, 16, 8, 1, 1, 1, [], [1e-3], [], 0), "DecodeBench.rows"),
])
def test_records_refuse_an_empty_list_their_methods_take_the_best_of(make, label: str) -> None:
    with pytest.raises(ValueError, match=re.escape(label) + " must hold at least one item"):
        make()


def test_decode_bench_names_a_probe_that_was_not_timed() -> None:
    bench = DecodeBench(4, 16, 8, 1, 1, 1, [DecodeRow(4, 4096, {"course": [1e-3]})], [1e-3], [], 0)
    with pytest.raises(ValueError, match=r"DecodeBench\.read_s is empty"):
        bench.read_gb_per_s  # noqa: B018 (the property raises)
    with pytest.raises(ValueError, match=r"DecodeBench\.copy_s is empty"):
        bench.copy_gb_per_s  # noqa: B018


def test_timing_refuses_a_name_that_is_not_a_str_or_a_tuple() -> None:
    from course_utils.bench.timing import Timing

    with pytest.raises(TypeError, match=r"Timing\.name must be a str or a tuple, got list"):
        Timing(["a"], 1e-3, 1.0, [1e-3])
    assert Timing((16, True), 1e-3, 1.0, [1e-3]).name == (16, True)  # lesson 07's (N, cached) rows


# -- battery 14 (fix44c) -----------------------------------------------------------------------------

def _rising_timings(names=("a", "b")):
    """A Timing per name, the i-th taking i + 1 ms (three samples each)."""
    return [TM.Timing(n, 1e-3 * (i + 1), float(i + 1), [1e-3 * (i + 1)] * 3) for i, n in enumerate(names)]


# -- validation's own checks look at their arguments before computing a message from them -------
HEADS = torch.zeros(2, 2, 6, 4)


MASK = torch.ones(3, 3, dtype=torch.bool)


VALIDATION_CASES = [
    Case("check_heads_to_merge/d_k str", lambda: V.check_heads_to_merge(HEADS, 2, "3"), TypeError,
         ["d_k", "int", "str '3'"]),
    Case("check_heads_to_merge/num_heads str", lambda: V.check_heads_to_merge(HEADS, "3", 4), TypeError,
         ["num_heads", "int", "str '3'"]),
    Case("check_heads_to_merge/d_k list", lambda: V.check_heads_to_merge(HEADS, 2, [2]), TypeError,
         ["d_k", "int", "list [2]"]),
    Case("check_mask_fits/target int", lambda: V.check_mask_fits(MASK, 3, "(Tq, Tk)"),
         TypeError, ["target", "tuple of ints", "int 3"]),
    Case("check_record/not a dataclass", lambda: V.check_record(3), TypeError,
         ["check_record", "dataclass", "int 3"]),
    Case("check_record/a dataclass type", lambda: V.check_record(TM.Timing), TypeError,
         ["check_record", "instance of a dataclass", "type"]),
]


@pytest.mark.parametrize("case", VALIDATION_CASES, ids=lambda c: c.name)
def test_validation_checks_refuse_wrong_arguments_by_name(case):
    assert_named(case)


def test_validation_checks_still_pass_good_arguments():
    V.check_heads_to_merge(HEADS, 2, 4)
    V.check_mask_fits(torch.ones(3, 3, dtype=torch.bool), (1, 2, 3, 3), "(B, h, Tq, Tk)")
    V.check_record(_rising_timings()[0])


# -- timing: names are looked up only once they can be; timings name each function once --------
TIMING_CASES = [
    Case("format_table/baseline list", lambda: TM.format_table("t", _rising_timings(), ["a"]), TypeError,
         ["baseline", "function's name", "list ['a']"]),
    Case("paired_ratios/name list", lambda: TM.paired_ratios(_rising_timings(), ["b"], "a"), TypeError,
         ["name", "function's name", "list ['b']"]),
    Case("ratio_spread/baseline list", lambda: TM.ratio_spread(_rising_timings(), "b", ["a"]), TypeError,
         ["baseline", "function's name", "list ['a']"]),
    Case("paired_ratios/timings repeated",
         lambda: TM.paired_ratios(_rising_timings() + _rising_timings(), "b", "a"),
         ValueError, ["timings' names", "distinct", "repeats ['a', 'b']"]),
    Case("format_spread_table/timings repeated",
         lambda: TM.format_spread_table("t", _rising_timings() + _rising_timings(), "a"), ValueError,
         ["timings' names", "distinct", "repeats ['a', 'b']"]),
    Case("time_interleaved/baseline list",
         lambda: TM.time_interleaved({"a": lambda: None}, baseline=["a"], repeats=1, warmup=0), TypeError,
         ["baseline", "function's name", "list ['a']"]),
    Case("time_interleaved/progress object",
         lambda: TM.time_interleaved({"a": lambda: None}, baseline="a", repeats=1, warmup=0,
                                     progress=object()),
         TypeError, ["progress", "str", "or None", "object"]),
    Case("bench_mha/baseline list", lambda: _bench_mha()(1, 4, 8, 2, repeats=1, baseline=["batched"]),
         TypeError,
         ["baseline", "function's name", "list ['batched']"]),
    Case("time_cold/baseline list", lambda: _time_cold()({"a": lambda: None}, baseline=["a"]), TypeError,
         ["baseline", "function's name", "list ['a']"]),
    Case("backend_rejection_reason/label list",
         lambda: SB.backend_rejection_reason(["flash"], *[torch.zeros(1, 1, 2, 4)] * 3), TypeError,
         ["label", "one of", "list ['flash']"]),
]


def _bench_mha():
    from course_utils.bench.mha_speed import bench_mha
    return bench_mha


def _time_cold():
    from course_utils.bench.gqa_speed import time_cold
    return time_cold


@pytest.mark.parametrize("case", TIMING_CASES, ids=lambda c: c.name)
def test_timing_refuses_unhashable_names_and_repeated_timings(case):
    assert_named(case)


def test_timing_still_takes_good_names():
    assert TM.paired_ratios(_rising_timings(), "b", "a") == [2.0, 2.0, 2.0]
    assert "ratio to a" in TM.format_table("t", _rising_timings(), "a")
    rows = TM.time_interleaved({"a": lambda: None, ("b", 1): lambda: None}, baseline="a", repeats=2, warmup=0,
                               progress=None)
    assert [r.name for r in rows] == ["a", ("b", 1)]


# -- decode_step: sizes, x and the flush buffer are checked before they are used ---------------
def _decoder():
    from course_utils.bench.decode_step import SmallDecoder

    return SmallDecoder(d_model=16, num_heads=2, num_kv_heads=2, num_layers=1, context=4, attention="course")


def _decode_cases():
    from course_utils.bench import decode_step as DS

    sizes = dict(context=4, batch=1)
    return [
        Case("check_decoder_fits/d_model None", lambda: DS.check_decoder_fits(None, 2, 2, 1, **sizes),
             TypeError, ["d_model", "int", "NoneType None"]),
        Case("check_decoder_fits/num_heads None", lambda: DS.check_decoder_fits(16, None, 2, 1, **sizes),
             TypeError, ["num_heads", "int", "NoneType None"]),
        Case("check_decoder_fits/names one",
             lambda: DS.check_decoder_fits(16, 2, 2, 1, **sizes, names=["a"]), TypeError,
             ["names", "pair of str", "list ['a']"]),
        *(Case(f"weights_pass/x {label}", lambda x=x: _decoder().weights_pass(x), error, ["x", shown])
          for label, x, error, shown in (("str", "x", TypeError, "str"), ("neg", -1, TypeError, "int"),
                                         ("nan", float("nan"), TypeError, "float"),
                                         ("list", [], TypeError, "list"),
                                         ("wrong shape", torch.zeros(3, 16), ValueError, "(3, 16)"))),
        Case("time_flushed/flush None", lambda: DS.time_flushed({"a": lambda: None}, None, 0, 1), TypeError,
             ["flush", "tensor", "NoneType None"]),
        Case("time_flushed/flush meta",
             lambda: DS.time_flushed({"a": lambda: None}, torch.ones(4, device="meta"), 0, 1), ValueError,
             ["flush", "meta device"]),
    ]


@pytest.mark.parametrize("index", range(10))
def test_decode_step_checks_sizes_x_and_flush(index):
    assert_named(_decode_cases()[index])


def test_decode_step_still_runs_good_calls():
    from course_utils.bench import decode_step as DS

    DS.check_decoder_fits(16, 2, 2, 1, context=4, batch=1)
    decoder = _decoder()
    assert decoder.weights_pass().shape == decoder.weights_pass(torch.zeros(1, 16)).shape == (1, 16)
    assert list(DS.time_flushed({"a": lambda: None}, torch.ones(4), 0, 2)) == ["a"]


# -- battery 15 (fix45b) -----------------------------------------------------------------------------

MiB = 2**20


def _decode_row(g: int = 4, samples=(2e-3, 3e-3)) -> GS.DecodeRow:
    return GS.DecodeRow(g, 1024 * g, {"course": list(samples)})


def _decode_bench(**changes) -> GS.DecodeBench:
    """A consistent DecodeBench, h = 4: rows at g = 4 and g = 1, two repeats; ``changes`` replace fields."""
    fields = dict(num_heads=4, d_head=16, context=8, num_layers=1, batch=1, threads=1,
                  rows=[_decode_row(4), _decode_row(1, (1e-3, 1.5e-3))], sdpa_mha_s=[2e-3, 2e-3], copy_s=[],
                  copy_bytes=0, read_s=[1e-3, 1e-3], read_bytes=MiB)
    return GS.DecodeBench(**{**fields, **changes})


def _whole_step_row(g: int = 4, batch: int = 1, context: int = 8, samples=(1e-3, 2e-3)) -> DS.StepRow:
    # the bytes a SmallDecoder of _whole_step's sizes reads (WholeStep checks them)
    sizes = DS.decoder_bytes(64, 4, g, 1, context=context, batch=batch, mlp_ratio=4)
    return DS.StepRow(batch, context, g, *sizes, list(samples))


def _whole_step(**changes) -> DS.WholeStep:
    """A consistent WholeStep, h = 4: one shape, rows at g = 4 and g = 1; ``changes`` replace fields."""
    fields = dict(d_model=64, num_heads=4, num_layers=1, mlp_ratio=4, weight_dtype=torch.float32,
                  attention="course", threads=1, rows=[_whole_step_row(4), _whole_step_row(1)], read_s=[1e-3],
                  read_bytes=MiB, llc=(MiB, "test"), flush_bytes=4 * MiB, weights_s={(1, 8): [1e-3, 1e-3]})
    return DS.WholeStep(**{**fields, **changes})


# -- 1. result records refuse zero and absurd sizes, counts, thread counts and times ------------------
RECORD_CASES = [
    Case("DecodeBench context 0", lambda: _decode_bench(context=0), ValueError,
         ["DecodeBench.context", "positive int", "got 0"]),
    Case("DecodeBench threads 0", lambda: _decode_bench(threads=0), ValueError,
         ["DecodeBench.threads", "positive int", "got 0"]),
    Case("DecodeBench sdpa time 0", lambda: _decode_bench(sdpa_mha_s=[2e-3, 0.0]), ValueError,
         ["DecodeBench.sdpa_mha_s[1]", "> 0", "0.0"]),
    Case("DecodeBench read probe of 0 bytes", lambda: _decode_bench(read_bytes=0), ValueError,
         ["DecodeBench.read_bytes", "> 0", "read_s", "got 0"]),
    Case("DecodeBench no g = h row", lambda: _decode_bench(rows=[_decode_row(1)]), ValueError,
         ["DecodeBench.rows", "num_heads=4", "got g = [1]"]),
    Case("DecodeBench g not a divisor", lambda: _decode_bench(rows=[_decode_row(4), _decode_row(3)]),
         ValueError, ["DecodeBench.rows", "divisor", "[4, 3]"]),
    Case("DecodeBench repeats disagree",
         lambda: _decode_bench(rows=[_decode_row(4), _decode_row(1, (1e-3,))]), ValueError,
         ["DecodeBench.rows[g=1].samples_s", "2 samples", "{'course': 1}"]),
    Case("DecodeRow g 0", lambda: GS.DecodeRow(0, 100), ValueError,
         ["DecodeRow.num_kv_heads", "positive int", "got 0"]),
    Case("DecodeRow cache 0 bytes", lambda: GS.DecodeRow(4, 0), ValueError,
         ["DecodeRow.cache_bytes", "positive int", "got 0"]),
    Case("DecodeRow step of 0 s", lambda: _decode_row(4, (1e-3, 0.0)), ValueError,
         ["DecodeRow.samples_s['course'][1]", "> 0", "0.0"]),
    Case("StageRow g 0", lambda: GS.StageRow("scores", 0, 1e-3, 100), ValueError,
         ["StageRow.num_kv_heads", "positive int", "got 0"]),
    Case("StageRow 0 bytes", lambda: GS.StageRow("scores", 4, 1e-3, 0), ValueError,
         ["StageRow.bytes_moved", "positive int", "got 0"]),
    Case("StepRow batch 0", lambda: DS.StepRow(0, 8, 4, 100, 100), ValueError,
         ["StepRow.batch", "positive int", "got 0"]),
    Case("StepRow cache 0 bytes", lambda: DS.StepRow(1, 8, 4, 100, 0), ValueError,
         ["StepRow.cache_bytes", "positive int", "got 0"]),
    Case("StepRow step of 0 s", lambda: _whole_step_row(samples=(0.0,)), ValueError,
         ["StepRow.samples_s[0]", "> 0", "0.0"]),
    Case("WholeStep threads 0", lambda: _whole_step(threads=0), ValueError,
         ["WholeStep.threads", "positive int", "got 0"]),
    Case("WholeStep mlp_ratio 0", lambda: _whole_step(mlp_ratio=0), ValueError,
         ["WholeStep.mlp_ratio", "positive int", "got 0"]),
    Case("WholeStep probe of 0 s", lambda: _whole_step(read_s=[0.0]), ValueError,
         ["WholeStep.read_s[0]", "> 0", "0.0"]),
    Case("WholeStep weights of 0 s", lambda: _whole_step(weights_s={(1, 8): [0.0]}), ValueError,
         ["WholeStep.weights_s[(1, 8)]", "> 0", "0.0"]),
    Case("WholeStep shape without g = h", lambda: _whole_step(rows=[_whole_step_row(1)]), ValueError,
         ["WholeStep.rows", "batch=1, context=8", "g=4", "{1: 2}"]),
    Case("WholeStep weights of a shape not run", lambda: _whole_step(weights_s={(2, 8): [1e-3]}), ValueError,
         ["WholeStep.weights_s", "(2, 8)"]),
    Case("Timing ratio 0", lambda: TM.Timing("a", 1e-3, 0.0, [1e-3]), ValueError,
         ["Timing('a').ratio", "> 0", "0.0"]),
    Case("Timing median 0", lambda: TM.Timing("a", 0.0, 1.0, [0.0]), ValueError,
         ["Timing('a').median_s", "> 0", "0.0"]),
    Case("NotebookMemory peak 0 MB", lambda: MEM.NotebookMemory("n.ipynb", 0.0, 1.0), ValueError,
         ["NotebookMemory.peak_mb", "> 0", "0.0"]),
    Case("DeviceComparison tolerance 0", lambda: MS.DeviceComparison(
        "t", [TM.Timing("nn.MultiheadAttention", 1e-3, 1.0, [1e-3])], {"x": 0.0}, 0.0, 1.0, {"x": True}),
         ValueError, ["DeviceComparison.tolerance", "> 0", "0.0"]),
]


@pytest.mark.parametrize("case", RECORD_CASES, ids=lambda c: c.name)
def test_records_refuse_zero_sizes_counts_and_times(case: Case) -> None:
    assert_named(case)


def test_the_valid_records_beside_them_are_made() -> None:
    bench, whole = _decode_bench(), _whole_step()
    assert bench.speedup(1) == pytest.approx(2.0) and whole.speedup(1, 8, 1) == pytest.approx(1.0)
    assert TM.Timing("a", 1e-3, 1.0, [0.0, 1e-3, 2e-3]).best_s == 0.0  # one sample may read 0 s
    assert MEM.CellTime(0, 0.0, "x = 1").seconds == 0.0
    assert MEM.NotebookMemory("n", None, 0.5, "KeyError: k").verdict


def test_a_timing_run_whose_clock_never_advanced_names_the_function() -> None:
    """time_interleaved refused a zero baseline median; another function's zero median now too
    (its Timing would refuse it with a less helpful message)."""
    clock = iter([0.0, 1.0, 5.0, 5.0] * 3)  # a: 1 s per call, b: 0 s
    with pytest.raises(ValueError, match=r"'b' took a median of 0\.0 s over 3 repeats"):
        TM.time_interleaved({"a": lambda: None, "b": lambda: None}, baseline="a", repeats=3, warmup=0,
                            progress=None, clock=lambda: next(clock))


# -- 2. bool flags of the bench functions refuse a truthy string ---------------------------------------
FLAG_CASES = [
    Case("bench_decode full 'yes'", lambda: GS.bench_decode(full="yes"), TypeError,
         ["full", "True or False", "str 'yes'"]),
    Case("bench_decode progress 1", lambda: GS.bench_decode(progress=1), TypeError,
         ["progress", "True or False", "int 1"]),
    Case("bench_whole_step full 'yes'", lambda: DS.bench_whole_step(full="yes"), TypeError,
         ["full", "True or False", "str 'yes'"]),
    Case("bench_whole_step progress 'no'", lambda: DS.bench_whole_step(progress="no"), TypeError,
         ["progress", "True or False", "str 'no'"]),
    Case("bench_mha lesson 'no'", lambda: MS.bench_mha(1, 4, 8, 2, lesson="no"), TypeError,
         ["lesson", "True or False", "str 'no'"]),
    Case("plot_sweep logy 'no'", lambda: _plot_sweep(logy="no"), TypeError,
         ["logy", "True or False", "str 'no'"]),
]


def _plot_sweep(**kwargs):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import pandas as pd

    fig, ax = plt.subplots()
    try:
        return MS.plot_sweep(pd.DataFrame({"a": [1.0, 2.0]}, index=pd.Index([1, 2], name="batch")), ax,
                             title="t", **kwargs)
    finally:
        plt.close(fig)


@pytest.mark.parametrize("case", FLAG_CASES, ids=lambda c: c.name)
def test_bench_flags_refuse_what_is_not_a_bool(case: Case) -> None:
    assert_named(case)


# -- 3. WholeStep's lookups take ints and a StepRow -----------------------------------------------
LOOKUP_CASES = [
    Case("speedup batch True", lambda: _whole_step().speedup(True, 8, 1), TypeError,
         ["batch", "int", "bool True"]),
    Case("speedup batch 1.0", lambda: _whole_step().speedup(1.0, 8, 1), TypeError,
         ["batch", "int", "float 1.0"]),
    Case("weights_gb_per_s batch True", lambda: _whole_step().weights_gb_per_s(True, 8), TypeError,
         ["batch", "int", "bool True"]),
    Case("weights_gb_per_s context 8.0", lambda: _whole_step().weights_gb_per_s(1, 8.0), TypeError,
         ["context", "int", "float 8.0"]),
    Case("weights_gb_per_s shape without weights", lambda: _whole_step(weights_s={}).weights_gb_per_s(1, 8),
         ValueError, ["batch=1, context=8", "none"]),
    Case("byte_bound g True", lambda: _whole_step().byte_bound(1, 8, True), TypeError,
         ["num_kv_heads", "int", "bool True"]),
    Case("row not measured", lambda: _whole_step().row(1, 8, 2), ValueError,
         ["g=2", "(1, 8, 4)", "(1, 8, 1)"]),
    Case("read_share of an int", lambda: _whole_step().read_share(3), TypeError, ["row", "StepRow", "int 3"]),
    Case("read_share of a tuple", lambda: _whole_step().read_share((1, 8, 4)), TypeError,
         ["row", "StepRow", "tuple"]),
]


@pytest.mark.parametrize("case", LOOKUP_CASES, ids=lambda c: c.name)
def test_whole_step_lookups_are_checked(case: Case) -> None:
    assert_named(case)


# -- 4. DecodeBench's lookups name the method or g asked for and those measured -----------------------
DECODE_LOOKUP_CASES = [
    Case("ratio_to_sdpa method", lambda: _decode_bench().ratio_to_sdpa("fused"), ValueError,
         ["method", "['course']", "'fused'"]),
    Case("speedup method", lambda: _decode_bench().speedup(1, "repeat"), ValueError,
         ["method", "['course']", "'repeat'"]),
    Case("speedup g", lambda: _decode_bench().speedup(2), ValueError, ["num_kv_heads", "[4, 1]", "got 2"]),
    Case("speedup g bool", lambda: _decode_bench().speedup(True), TypeError, ["num_kv_heads", "int", "bool"]),
    Case("speedup_over_fastest_mha method", lambda: _decode_bench().speedup_over_fastest_mha(1, "fused"),
         ValueError, ["method", "['course']", "'fused'"]),
    Case("read_share method", lambda: _decode_bench().read_share(1, "enable_gqa"), ValueError,
         ["method", "['course']", "'enable_gqa'"]),
]


@pytest.mark.parametrize("case", DECODE_LOOKUP_CASES, ids=lambda c: c.name)
def test_decode_bench_lookups_name_what_was_measured(case: Case) -> None:
    assert_named(case)


def test_decode_bench_lookups_still_answer() -> None:
    bench = _decode_bench()
    assert bench.ratio_to_sdpa() == pytest.approx(1.25)
    assert bench.speedup_over_fastest_mha(1, "course") == pytest.approx(5 / 3)  # medians of 2 and 4/3


# -- 5. forward_callables checks x's width against every module's, before anything is timed -----------
def test_forward_callables_refuses_x_of_the_wrong_width_up_front() -> None:
    modules = MS.lesson_implementations(32, 4)
    with pytest.raises(ValueError) as info:
        MS.forward_callables(modules, torch.randn(1, 3, 16))
    assert "x (for modules['loop over heads'])" in str(info.value) and "d_model=32" in str(info.value)
    assert "(1, 3, 16)" in str(info.value)
    with pytest.raises(ValueError, match=r"modules\[\"torch's\"\].*d_model=32"):
        MS.forward_callables({"torch's": modules["nn.MultiheadAttention"]}, torch.randn(1, 3, 16))
    calls = MS.forward_callables(modules, torch.randn(1, 3, 32))  # the right width still runs
    assert all(fn().shape == (1, 3, 32) for fn in calls.values())


# -- battery 16 (fix46s) -----------------------------------------------------------------------------

MHA = "nn.MultiheadAttention"


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
    refused(make, ValueError, words)


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
        refused(lambda: plot_sweep(table, ax, **{"title": "t", label: value}), TypeError,
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
    (lambda: _gs().bench_decode(**SMALL_DECODE, methods=[["course"]]), TypeError,
     ["methods[0] must be one of 'course'", "(a str)", "list ['course']"]),
    # an option whose == raises escaped as its own error (check_choice reads it by type first)
    (lambda: _gs().bench_decode(**SMALL_DECODE, methods=["course", EqRaises()]), TypeError,
     ["methods[1] must be one of 'course'", "got EqRaises"]),
    (lambda: _gs().bench_decode(**SMALL_DECODE, methods=["course", "fuse"]), ValueError,
     ["methods[1] must be one of 'course'", "got 'fuse'", "did you mean 'fused'?"]),
    (lambda: _ds().bench_whole_step([(1, 8)], (4,), d_model=64, num_heads=4, progress=False,
                                    attention=EqRaises()), TypeError,
     ["attention must be one of 'auto', 'fused' or 'course' (a str)", "got EqRaises"]),
    (lambda: _ds().bench_whole_step([(1, 8)], (4,), d_model=64, num_heads=4, progress=False,
                                    attention="corse"), ValueError,
     ["attention must be one of 'auto', 'fused' or 'course'", "got 'corse'"]),
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
    refused(make, error, words)


# -- bench records: zero sizes and inconsistent fields (DecodeBench, WholeStep, StepRow) --
def _bench_3_samples(**changes):
    """A consistent DecodeBench, h = 4, context 64, 2 layers: three samples of every time."""
    gs = _gs()
    rows = [gs.DecodeRow(4, 65536, {"course": [2e-3, 3e-3, 2e-3]}),
            gs.DecodeRow(1, 16384, {"course": [1e-3] * 3})]
    fields = dict(num_heads=4, d_head=16, context=64, num_layers=2, batch=1, threads=1, rows=rows,
                  sdpa_mha_s=[2e-3] * 3, copy_s=[1e-3] * 3, copy_bytes=2**20, read_s=[1e-3] * 3,
                  read_bytes=2**20)
    return gs.DecodeBench(**{**fields, **changes})


@pytest.mark.parametrize(("make", "error", "words"), [
    (lambda: _bench_3_samples(copy_s=[]), ValueError, ["DecodeBench.copy_s", "copy_bytes=1048576"]),
    (lambda: _bench_3_samples(copy_s=[1e-3] * 2), ValueError, ["DecodeBench.copy_s", "3 samples", "got 2"]),
    (lambda: _bench_3_samples(copy_s=[1e-3] * 4), ValueError, ["DecodeBench.copy_s", "3 samples", "got 4"]),
    (lambda: _bench_3_samples(read_s=[1e-3] * 2), ValueError, ["DecodeBench.read_s", "3 samples", "got 2"]),
    (lambda: _bench_3_samples(read_s=[1e-3] * 4), ValueError, ["DecodeBench.read_s", "got 4"]),
    (lambda: _bench_3_samples(threads=2, read_one_thread_s=[1e-3] * 2), ValueError,
     ["DecodeBench.read_one_thread_s", "got 2"]),
    (lambda: _bench_3_samples(threads=2, read_one_thread_s=[1e-3] * 4), ValueError,
     ["DecodeBench.read_one_thread_s", "got 4"]),
    (lambda: _ds().StepRow(1, 64, 2, 1000, 1, [1e-3]), ValueError, ["StepRow.cache_bytes", "260", "got 1"]),
    (lambda: _whole_step(weight_dtype=__import__("torch").int64), TypeError,
     ["WholeStep.weight_dtype", "int64"]),
    (lambda: _whole_step(attention=""), ValueError, ["WholeStep.attention", "''"]),
    (lambda: _whole_step(attention="no_such_value"), ValueError,
     ["WholeStep.attention", "'no_such_value'"]),
    (lambda: _whole_step(rows=[*_whole_step().rows, *(_whole_step_row(g, 2) for g in (4, 1))]),
     ValueError, ["WholeStep.weights_s", "(2, 8)"]),
    (lambda: _whole_step(weights_s={(1, 8): [1e-3]}), ValueError, ["WholeStep.weights_s", "2 samples"]),
])
def test_inconsistent_bench_records_are_refused(make, error, words) -> None:
    refused(make, error, words)


def test_consistent_bench_records_are_kept() -> None:
    """The records as the benchmarks build them: no copy (copy_mib=0), no weights timed, one thread."""
    bench = _bench_3_samples(copy_s=[], copy_bytes=0)
    assert bench.speedup(1) == pytest.approx(2.0) and isinstance(bench.noise_warnings(), list)
    assert _bench_3_samples().copy_gb_per_s > 0
    assert _whole_step(weights_s={}).speedup(1, 8, 1) == pytest.approx(1.0)
    assert _whole_step(attention="fused").attention == "fused"


# -- battery 17 (fix47s) -----------------------------------------------------------------------------

def _gqa_decoder() -> decode_step.SmallDecoder:
    return decode_step.SmallDecoder(32, 4, 2, 1, context=16, attention="course")


def _sampled_timings() -> list[timing.Timing]:
    return timing.timings_from_samples({"a": [1.0, 1.1, 1.2], "b": [2.0, 2.1, 2.2]}, "a")


# -- S1: a meta x went through weights_pass (a meta result) and step --
@pytest.mark.parametrize("method", ["weights_pass", "step"])
def test_small_decoder_refuses_a_meta_x(method) -> None:
    x = torch.randn(1, 32, device="meta")
    refused(lambda: getattr(_gqa_decoder(), method)(x), ValueError, ["x", "meta device", "(1, 32)"])


# -- S2: sweep_mha ignored whatever was passed for the size it varies --
@pytest.mark.parametrize("vary", ["seq_len", "batch", "d_model", "num_heads"])
@pytest.mark.parametrize("bad", [-1, True, 2.5, "3", 10**12, __import__("numpy").float64(2.0), 4])
def test_sweep_mha_refuses_a_value_for_the_varied_size(vary, bad) -> None:
    sizes = {"batch": 1, "seq_len": 4, "d_model": 16, "num_heads": 4, vary: bad}
    refused(lambda: mha_speed.sweep_mha(vary, [4], repeats=1, target_sample_s=0.0, **sizes), ValueError,
            [vary, f"vary={vary!r}", repr(bad), "ignored"])


@pytest.mark.parametrize(("name", "bad", "error"), [("batch", "3", TypeError), ("d_model", 2.5, TypeError),
                                                    ("num_heads", True, TypeError), ("batch", 0, ValueError)])
def test_sweep_mha_checks_every_fixed_size(name, bad, error) -> None:
    sizes = {"batch": 1, "d_model": 16, "num_heads": 4, name: bad}
    refused(lambda: mha_speed.sweep_mha("seq_len", [4], repeats=1, target_sample_s=0.0, **sizes), error,
            [name, repr(bad)])


def test_sweep_mha_still_runs_with_the_varied_size_left_out() -> None:
    table = mha_speed.sweep_mha("seq_len", [4, 8], batch=1, d_model=16, num_heads=4, repeats=1,
                                target_sample_s=0.0)
    assert list(table.index) == [4, 8] and table.index.name == "seq_len"


# -- S7: make_read_probe clamped a huge thread count to the CPU count; read_bandwidth refuses it --
@pytest.mark.parametrize("threads", [10**12, 10**6, MAX_THREADS + 1])
def test_make_read_probe_bounds_threads_like_read_bandwidth(threads) -> None:
    refused(lambda: decode_step.make_read_probe(torch.ones(1024), threads=threads), ValueError,
            ["threads must be an int in 1..", str(threads)])
    refused(lambda: decode_step.read_bandwidth(torch.ones(1024), repeats=1, num_threads=threads), ValueError,
            ["num_threads must be an int in 1..", str(threads)])


# -- O3: timings_from_samples read samples and baseline unchecked (bare AttributeError, KeyError) --
@pytest.mark.parametrize(("samples", "error", "words"), [
    ([("a", [1.0]), ("b", [2.0])], TypeError, ["samples", "mapping", "list"]),
    (None, TypeError, ["samples", "mapping", "NoneType None"]),
    (True, TypeError, ["samples", "mapping", "bool True"]),
    ({}, ValueError, ["samples", "non-empty", "dict {}"]),
    ({"a": [1.0], "b": 1}, TypeError, ["samples['b']", "list of seconds", "int 1"]),
    ({"a": [1.0], "b": []}, ValueError, ["samples['b']", "non-empty", "[]"]),
    ({"a": [1.0], "b": [2.0, "x"]}, TypeError, ["samples['b'][1]", "str 'x'"]),
    ({"a": [1.0], "b": [2.0, -1.0]}, ValueError, ["samples['b'][1]", "-1.0"]),
])
def test_timings_from_samples_names_bad_samples(samples, error, words) -> None:
    refused(lambda: timing.timings_from_samples(samples, "a"), error, words)


@pytest.mark.parametrize("baseline", [7, "", "bogus", None, True])
def test_timings_from_samples_names_an_unknown_baseline(baseline) -> None:
    refused(lambda: timing.timings_from_samples({"a": [1.0], "b": [2.0]}, baseline), ValueError,
            [f"baseline {baseline!r} ({type(baseline).__name__}) is not one of", "['a', 'b']"])


# -- O4: "'bogus' is not one of ['a', 'b']" did not say which argument (name or baseline) --
@pytest.mark.parametrize("function", [timing.paired_ratios, timing.ratio_spread])
@pytest.mark.parametrize("name", ["", "bogus", None, True, 7])
def test_paired_ratios_and_ratio_spread_name_the_unknown_name(function, name) -> None:
    refused(lambda: function(_sampled_timings(), name, "a"), ValueError,
            [f"name {name!r} ({type(name).__name__}) is not one of the timings' names", "['a', 'b']"])


@pytest.mark.parametrize("function", [timing.paired_ratios, timing.ratio_spread])
def test_paired_ratios_and_ratio_spread_name_the_unknown_baseline(function) -> None:
    refused(lambda: function(_sampled_timings(), "a", "bogus"), ValueError,
            ["baseline 'bogus' (str) is not one of the timings' names"])


# -- O7: the memory refusal blamed d_model, whatever size was too large, and showed no value --
@pytest.mark.parametrize(("size", "call"), [
    ("mlp_ratio", lambda: decode_step.check_decoder_fits(32, 4, 2, 1, context=16, batch=1, mlp_ratio=10**12)),
    ("num_kv_heads", lambda: decode_step.check_decoder_fits(32, 4, 10**12, 1, context=16, batch=1)),
    ("num_layers", lambda: decode_step.check_decoder_fits(32, 4, 2, 10**12, context=16, batch=1)),
    ("context", lambda: decode_step.check_decoder_fits(32, 4, 2, 1, context=10**12, batch=1)),
    ("batch", lambda: decode_step.check_decoder_fits(32, 4, 2, 1, context=16, batch=10**12)),
    ("mlp_ratio", lambda: decode_step.SmallDecoder(32, 4, 2, 1, context=16, mlp_ratio=10**12,
                                                   attention="course")),
])
def test_check_decoder_fits_blames_the_size_that_is_too_large(size, call) -> None:
    refused(call, ValueError, [f"{size}=1,000,000,000,000", "GiB"])


def test_check_decoder_fits_still_blames_the_names_given() -> None:
    refused(lambda: decode_step.check_decoder_fits(32, 4, 2, 1, context=10**12, batch=1,
                                                   names=("--layers 1", "--context 10**12")),
            ValueError, ["--context 10**12 asks for"])
    decode_step.check_decoder_fits(32, 4, 2, 1, context=16, batch=1)


# battery 17's re-run: two more memory refusals blamed a fixed name (sweep_mha's varied size,
# make_kv_caches' context) whatever was too large; they now name the argument and its value
@pytest.mark.parametrize("call, named", [
    (lambda: mha_speed.sweep_mha("seq_len", [4, 8], batch=10**12, d_model=16, num_heads=4),
     "batch=1,000,000,000,000"),
    (lambda: mha_speed.sweep_mha("seq_len", [4, 8], batch=2, d_model=10**9, num_heads=4),
     "d_model=1,000,000,000"),
    (lambda: gqa_speed.make_kv_caches(4, 8, 16, 2, [1, 2, 4], batch=10**12), "batch asks for"),
    (lambda: gqa_speed.make_kv_caches(4, 8, 16, 10**9, [1, 2, 4]), "num_layers asks for"),
])
def test_sweep_and_cache_memory_refusals_name_the_size_that_is_too_large(call, named):
    with pytest.raises(ValueError, match="more than this machine") as raised:
        call()
    assert named in str(raised.value)


# -- battery 18 (fix48s) -----------------------------------------------------------------------------

def test_a_record_does_not_share_the_callers_list() -> None:
    samples = [1e-3, 2e-3, 1e-3]
    made = timing.Timing("a", 1e-3, 1.0, samples)
    samples.append(-5.0)
    assert made.best_s == min(made.samples_s) and len(made.samples_s) == 3 and made.best_s > 0
    rows = {"course": [2e-3, 3e-3]}
    row = gqa_speed.DecodeRow(4, 4096, rows)
    rows["course"].append(-1.0)
    assert len(row.samples_s["course"]) == 2 and row.best_s("course") > 0


# -- g02: time_cold names its own argument ------------------------------------------------------
@pytest.mark.parametrize("steps", [{"a": 3}, {"a": lambda: None, "b": "x"}, {"a": lambda x: x}])
def test_time_cold_names_steps(steps) -> None:
    bad = next(k for k, v in steps.items() if not callable(v) or v.__code__.co_argcount)
    refused(lambda: gqa_speed.time_cold(steps, baseline="a", repeats=1, warmup=0, flush_bytes=1024,
                                        progress=None), TypeError, [f"steps[{bad!r}]"])


# -- g18: repeated names, unequal sample counts -------------------------------------------------
@pytest.mark.parametrize("samples", [{"a": [1.0], "b": [1.0, 2.0]}, {"a": [1.0, 2.0, 3.0], "b": [1.0, 2.0]}])
def test_timings_from_samples_refuses_unequal_sample_counts(samples) -> None:
    counts = [f"{k!r}: {len(v)}" for k, v in samples.items()]
    refused(lambda: timing.timings_from_samples(samples, "a"), ValueError, ["samples", *counts])


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
    refused(make, ValueError, words)


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
    refused(lambda: _plot(make()), error, words)


# -- g22: SmallDecoder's x has the dtype and device of its stream ------------------------------
@pytest.mark.parametrize("method", ["step", "weights_pass"])
@pytest.mark.parametrize("dtype", [torch.float64, torch.float16, torch.bfloat16])
@pytest.mark.parametrize("weight_dtype", [torch.float32, torch.bfloat16])
def test_small_decoder_refuses_an_x_of_another_dtype(method, dtype, weight_dtype) -> None:
    decoder = decode_step.SmallDecoder(32, 4, 2, 1, context=8, attention="course", weight_dtype=weight_dtype)
    x = torch.randn(1, 32, dtype=dtype)
    refused(lambda: getattr(decoder, method)(x), TypeError, ["x must be torch.float32", str(dtype)])


# -- g23: an empty flush buffer evicts nothing --------------------------------------------------
@pytest.mark.parametrize("shape", [(0,), (4, 0)])
def test_time_flushed_refuses_an_empty_flush(shape) -> None:
    refused(lambda: decode_step.time_flushed({"a": lambda: None}, torch.empty(shape), 0, 1), ValueError,
            ["flush", "at least one element", str(shape)])


# -- battery 19 (fix49s) -----------------------------------------------------------------------------

# -- g04, g05: check_function_name checked the value, not its own name, among and what --
@pytest.mark.parametrize(("kwargs", "error", "words"), [
    ({"among": 3}, TypeError, ["among", "iterable", "int 3"]),
    ({"among": "ab"}, TypeError, ["among", "iterable", "str 'ab'"]),
    ({"name": 3}, TypeError, ["name", "str", "int 3"]),
    ({"name": ""}, ValueError, ["name", "non-empty", "''"]),
    ({"what": None}, TypeError, ["what", "str", "None"]),
], ids=["among int", "among str", "name int", "name empty", "what None"])
def test_check_function_name_checks_its_own_arguments(kwargs, error, words) -> None:
    args = {"value": "a", "name": "baseline", "among": ["a", "b"], "what": "the names of fns"}
    refused(lambda: check_function_name(**{**args, **kwargs}), error, words)


def test_check_function_name_still_takes_a_dict_and_no_among() -> None:
    check_function_name("a", "baseline", {"a": len, "b": len}, "the names of fns")
    check_function_name(("a", 1), "baseline")
    refused(lambda: check_function_name("c", "baseline", ("a", "b")), ValueError, ["baseline", "'c'"])


# -- battery 20 (fix50s) -----------------------------------------------------------------------------

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


# -- battery 21 (fix51s) -----------------------------------------------------------------------------

# -- 2: a NumPy int seed (check_seed accepts it) is passed on as the Python int it returns -------
@pytest.mark.parametrize("seed", [np.int64(0), np.int32(3), np.uint8(1)], ids=repr)
def test_bench_mha_takes_a_numpy_int_seed(seed) -> None:
    timings = MS.bench_mha(1, 4, 8, 2, repeats=1, seed=seed)
    assert {t.name for t in timings} == set(MS.IMPLEMENTATIONS)


@pytest.mark.parametrize("seed", [np.int64(0), np.int32(3)], ids=repr)
def test_compare_on_device_takes_a_numpy_int_seed(seed) -> None:
    result = MS.compare_on_device("cpu", batch=1, seq_len=4, d_model=8, num_heads=2,
                                  dtype=MS.torch.float32, repeats=1, seed=seed)
    assert "nn.MultiheadAttention" in result.max_abs_diff


# -- 13: a bool is no clock reading (True - 0.5 would time 0.5 s) --------------------------------
@pytest.mark.parametrize(("start", "end"), [(True, 2.0), (1.0, True), (False, 1.0), (False, False)],
                         ids=["start True", "end True", "start False", "both False"])
def test_clock_elapsed_refuses_bool_readings(start, end) -> None:
    raises_naming(ValueError, ["clock", "not a bool", repr(start), repr(end), "around 'f'"],
                  lambda: clock_elapsed(start, end, "'f'"))


def test_clock_elapsed_still_takes_int_and_float_readings() -> None:
    assert clock_elapsed(1, 3, "f") == 2.0
    assert clock_elapsed(0.25, 0.75, "f") == pytest.approx(0.5)


# -- 14: bench result records refuse fields that contradict each other ---------------------------
def _mha_and_batched_timings():
    from course_utils.bench.timing import timings_from_samples
    samples = {"nn.MultiheadAttention": [0.1, 0.2, 0.15], "batched": [0.2, 0.3, 0.25]}
    return tuple(timings_from_samples(samples, "nn.MultiheadAttention"))


@pytest.mark.parametrize("name", ["batched", "nn.MultiheadAttention"])
def test_device_comparison_refuses_a_skipped_function_that_was_timed(name: str) -> None:
    diffs = {"nn.MultiheadAttention": 0.0, "batched": 1e-4}
    raises_naming(ValueError, ["DeviceComparison.skipped", repr(name)],
                  lambda: MS.DeviceComparison("t", _mha_and_batched_timings(), diffs, 1e-3, 1.0,
                                              dict.fromkeys(diffs, True),
                                              skipped={name: "no kernel"}))
    kept = MS.DeviceComparison("t", _mha_and_batched_timings(), diffs, 1e-3, 1.0, dict.fromkeys(diffs, True),
                               skipped={"flash": "no kernel"})  # a function that did not run: kept
    assert dict(kept.skipped) == {"flash": "no kernel"}


@pytest.fixture(scope="module")
def whole_step():
    from course_utils.bench import decode_step as DS
    return DS.bench_whole_step(shapes=[(1, 8)], groups=(4, 1), d_model=32, num_heads=4, num_layers=1,
                               mlp_ratio=2, repeats=2, warmup=0, num_threads=1, flush_multiple=1,
                               progress=False)


def test_read_share_refuses_a_row_of_another_result(whole_step) -> None:
    import dataclasses

    from course_utils.bench.decode_step import StepRow
    for row in whole_step.rows:  # its own rows (also as row() gives them) are taken
        assert whole_step.read_share(row) == whole_step.read_share(whole_step.row(1, 8, row.num_kv_heads))
    stranger = StepRow(1, 8, 2, 100, 50, (0.1,))
    raises_naming(ValueError, ["row must be one of", "batch=1", "context=8", "g=2"],
                  lambda: whole_step.read_share(stranger))
    retimed = dataclasses.replace(whole_step.rows[0], samples_s=(123.0,))  # same shape, other times
    raises_naming(ValueError, ["row must be one of", f"g={retimed.num_kv_heads}"],
                  lambda: whole_step.read_share(retimed))


def _decode_bench_of_cache_bytes(cache_bytes: dict[int, int]):
    """h = 4, d_head = 16, context = 8, 2 layers, batch 1: a row per g of ``cache_bytes``."""
    from course_utils.bench.gqa_speed import DecodeBench, DecodeRow
    rows = [DecodeRow(g, size, {"course": [2e-3, 3e-3]}) for g, size in cache_bytes.items()]
    return DecodeBench(4, 16, 8, 2, 1, 1, rows, [2e-3, 2e-3], [], 0)


def _kv(g: int, element: int) -> int:
    from course_utils.attention.gqa import kv_cache_bytes
    return kv_cache_bytes(2, 1, g, 16, 8, element)  # the formula bench_decode sizes its rows by


@pytest.mark.parametrize("sizes", [
    lambda: {4: 7 * _kv(4, 4), 1: 7 * _kv(1, 4)},  # every row x7: an element of 28 bytes
    lambda: {4: _kv(4, 4), 1: _kv(1, 2)},  # rows of two dtypes in one run
    lambda: {4: _kv(4, 4) + 1, 1: _kv(1, 4)},  # one byte off
    lambda: {4: _kv(1, 4), 1: _kv(4, 4)},  # the rows' sizes swapped
], ids=["x7", "two element sizes", "one byte off", "swapped"])
def test_decode_bench_refuses_cache_bytes_that_do_not_match_its_sizes(sizes) -> None:
    sizes = sizes()
    raises_naming(ValueError, ["DecodeBench.rows' cache_bytes", "kv_cache_bytes", "g=4", str(sizes[4])],
                  lambda: _decode_bench_of_cache_bytes(sizes))


@pytest.mark.parametrize("element", [2, 4, 8])
def test_decode_bench_keeps_cache_bytes_of_one_floating_dtype(element: int) -> None:
    sizes = {4: _kv(4, element), 1: _kv(1, element)}
    assert {r.num_kv_heads: r.cache_bytes for r in _decode_bench_of_cache_bytes(sizes).rows} == sizes


@pytest.mark.parametrize(("field", "change"), [
    ("weight_bytes", lambda n: 1),
    ("weight_bytes", lambda n: n + 1),
    ("weight_bytes", lambda n: n // 2),  # float16's weights in a float32 result
    ("cache_bytes", lambda n: 7 * n),
    ("cache_bytes", lambda n: n - 1),
])
def test_whole_step_refuses_row_bytes_that_do_not_match_its_sizes(whole_step, field: str, change) -> None:
    import dataclasses
    first = whole_step.rows[0]
    bad = dataclasses.replace(first, **{field: change(getattr(first, field))})
    words = ["WholeStep.rows[", f"g={first.num_kv_heads}", f"{field}={getattr(bad, field)}", "decoder_bytes"]
    message = raises_naming(ValueError, words,
                            lambda: dataclasses.replace(whole_step, rows=(bad, *whole_step.rows[1:])))
    assert f"{field}={getattr(first, field)}" in message  # what the run's sizes give


def test_whole_step_keeps_the_bytes_its_decoders_read(whole_step) -> None:
    from course_utils.bench.decode_step import SmallDecoder
    for row in whole_step.rows:  # bench_whole_step measured them on real SmallDecoders: accepted
        decoder = SmallDecoder(32, 4, row.num_kv_heads, 1, context=row.context, batch=row.batch, mlp_ratio=2)
        assert (row.weight_bytes, row.cache_bytes) == (decoder.weight_bytes, decoder.cache_bytes)


# -- battery 22 (fix52s) -----------------------------------------------------------------------------

# -- 1: the compiled-sum probe kept only buffer.data_ptr(): called after the caller dropped the
# buffer, it read freed memory (garbage sums, SIGSEGV for a large buffer) --------------------
def _compiled_wins(monkeypatch) -> None:
    """The race always goes to the compiled sum (the probe that read through an address)."""
    monkeypatch.setattr(DS, "_race", lambda probes, clock, reads=DS.PROBE_RACE_READS:
                        {name: 1.0 if name == "torch.sum" else 0.5 for name in probes})


def test_make_read_probe_keeps_its_buffer_alive(monkeypatch) -> None:
    _compiled_wins(monkeypatch)
    buffer = torch.ones(1024)
    monkeypatch.setattr(DS, "_compiled_read_sum", lambda: (lambda address, n, threads: 1024.0, "-O2"))
    probe, what = DS.make_read_probe(buffer, 1)
    assert what.startswith("compiled sum")
    alive = weakref.ref(buffer)
    del buffer
    gc.collect()
    assert alive() is not None, "the probe must hold the buffer it reads"


@pytest.mark.parametrize("shape", [(1024,), ()], ids=["1024 ones", "0-d"])
def test_make_read_probe_reads_the_right_sum_after_the_caller_dropped_the_buffer(monkeypatch, shape) -> None:
    if DS._compiled_read_sum()[0] is None:
        pytest.skip(f"no compiled read_sum here: {DS._compiled_read_sum()[1]}")
    _compiled_wins(monkeypatch)
    buffer = torch.ones(shape)
    expected = buffer.sum().item()
    probe, what = DS.make_read_probe(buffer, 1)
    assert what.startswith("compiled sum")
    del buffer
    gc.collect()
    reuse = torch.full((1024,), 7.0)  # what would take the freed memory's place
    assert probe() == pytest.approx(expected)
    del reuse


# -- 4: decoder_bytes checked nothing: mlp_ratio=-3 gave -49152 weight bytes, num_heads=0 a bare
# ZeroDivisionError, a bad d_model or context was blamed on 'd_head' or 'seq_len' --------------
_GOOD = {"d_model": 64, "num_heads": 4, "num_kv_heads": 2, "num_layers": 1, "context": 8, "batch": 1,
         "mlp_ratio": 2, "weight_element": 4}


_BAD = [(True, TypeError, "bool True"), (2.0, TypeError, "float 2.0"),
        (np.float64(2.0), TypeError, "float64"), (torch.tensor(2), TypeError, "Tensor"),
        ("3", TypeError, "str '3'"), (0, ValueError, "got 0"), (-3, ValueError, "got -3")]


def _decoder_bytes(**change: object) -> tuple[int, int]:
    sizes = _GOOD | change
    positional = [sizes.pop(k) for k in ("d_model", "num_heads", "num_kv_heads", "num_layers")]
    return DS.decoder_bytes(*positional, **sizes)


@pytest.mark.parametrize("name", list(_GOOD))
@pytest.mark.parametrize(("value", "error", "shown"), _BAD, ids=[repr(v) for v, _, _ in _BAD])
def test_decoder_bytes_checks_each_size_under_its_own_name(name, value, error, shown) -> None:
    message = raises_naming(error, [name, shown], lambda: _decoder_bytes(**{name: value}))
    assert "d_head" not in message and "seq_len" not in message


@pytest.mark.parametrize("d_model", [2, 66], ids=repr)
def test_decoder_bytes_refuses_a_d_model_the_heads_do_not_divide(d_model) -> None:
    # d_model=2, num_heads=4 was blamed on 'd_head', d_model=66 counted as 64 (a floored head width)
    message = raises_naming(ValueError, ["d_model must be a multiple of num_heads", f"d_model={d_model}",
                                         "num_heads=4"], lambda: _decoder_bytes(d_model=d_model))
    assert "d_head" not in message


def test_small_decoder_names_a_num_kv_heads_that_does_not_divide() -> None:
    raises_naming(ValueError, ["num_kv_heads must divide num_heads", "num_heads=4", "num_kv_heads=3"],
                  lambda: DS.SmallDecoder(64, 4, 3, 1, context=8, attention="course"))


def test_decoder_bytes_still_counts_a_small_decoder_s_bytes() -> None:
    decoder = DS.SmallDecoder(64, 4, 2, 1, context=8, batch=1, mlp_ratio=2, attention="course")
    sizes = _decoder_bytes(d_model=np.int64(64), context=np.int32(8))  # NumPy ints are ints
    assert sizes == (decoder.weight_bytes, decoder.cache_bytes)
    assert all(type(n) is int for n in sizes)


# -- 8: StageRow was a mutable dataclass checked only when made (seconds=NaN -> gb_per_s NaN) ---
@pytest.mark.parametrize("value", [float("nan"), 0.0], ids=["nan", "zero"])
def test_stage_row_is_frozen(value) -> None:
    row = GS.StageRow("scores", 4, 0.1, 1000)
    raises_naming(dataclasses.FrozenInstanceError, ["seconds"], lambda: setattr(row, "seconds", value))
    assert row.seconds == 0.1


# -- 9: RatioSpread(baseline='') and DeviceComparison(title='') were accepted (blank labels) ----
def _device_comparison(title: object) -> MS.DeviceComparison:
    timings = (TM.Timing("nn.MultiheadAttention", 1.0, 1.0), TM.Timing("b", 2.0, 2.0))
    return MS.DeviceComparison(title, timings, {"nn.MultiheadAttention": 0.0, "b": 0.1}, 0.01, 1.0,
                               {"nn.MultiheadAttention": True, "b": False})


@pytest.mark.parametrize(("make", "field"), [
    (lambda: TM.RatioSpread("b", "", 1.0, 0.9, 1.1, 0.8, 1.2, 5), "RatioSpread.baseline"),
    (lambda: _device_comparison(""), "DeviceComparison.title"),
], ids=["RatioSpread.baseline", "DeviceComparison.title"])
def test_an_empty_label_is_refused_by_name(make, field) -> None:
    raises_naming(ValueError, [field, "non-empty str", "''"], make)


def test_non_empty_labels_are_still_taken() -> None:
    assert "slower than a" in TM.RatioSpread("b", "a", 2.0, 1.9, 2.1, 1.8, 2.2, 5).verdict()
    assert _device_comparison("cpu").title == "cpu"


# -- battery 23 (fix53x) -----------------------------------------------------------------------------

@pytest.mark.parametrize("seconds, error, shown", [
    (None, TypeError, "None"),
    ("ab", TypeError, "'ab'"),
    (["x", "x"], TypeError, "'x'"),
    ([[0.1], -1], TypeError, "-1"),
    ([float("nan")], TypeError, "nan"),
    ([[0.1, float("nan")]], ValueError, "nan"),
    ([["x"]], TypeError, "'x'"),
])
def test_check_clock_advanced_refuses_seconds_not_groups_of_numbers(seconds, error, shown):
    raises_naming(error, ["seconds", shown], lambda: check_clock_advanced(seconds, "samples"))


def test_check_clock_advanced_still_takes_dict_values_and_refuses_all_zero():
    check_clock_advanced({"a": [0.0, 0.1], "b": [0.2]}.values(), "samples")
    raises_naming(ValueError, ["clock"], lambda: check_clock_advanced([[0.0], [0, 0.0]], "samples"))


# -- battery 24 (fix54a) -----------------------------------------------------------------------------

# -- S3: SmallDecoder.step / weights_pass took NaN or inf in x and returned NaN ------------------------
@pytest.mark.parametrize("method", ["step", "weights_pass"])
@pytest.mark.parametrize("bad", [float("nan"), float("inf"), -float("inf")])
def test_small_decoder_refuses_a_non_finite_x(method: str, bad: float) -> None:
    from course_utils.bench.decode_step import SmallDecoder

    decoder = SmallDecoder(d_model=16, num_heads=2, num_kv_heads=2, num_layers=1, context=4,
                           attention="course")
    run = getattr(decoder, method)
    x = torch.zeros(1, 16)
    assert torch.isfinite(run(x)).all()  # the control
    x[0, 3] = bad
    raises_naming(ValueError, ["x must hold finite numbers", str(bad), "(0, 3)"], lambda: run(x))
    assert torch.isfinite(run()).all()  # the default input is not checked again


# -- battery 26 (fix56) ------------------------------------------------------------------------------

def test_bench_decode_reads_a_generator_of_groups_once() -> None:
    from course_utils.bench.gqa_speed import bench_decode

    result = bench_decode(4, 8, 16, 1, (g for g in [4, 2]), repeats=1, warmup=0, methods=("course",),
                          copy_mib=0, progress=False)
    assert [row.num_kv_heads for row in result.rows] == [4, 2]


def test_check_clock_advanced_refuses_a_negative_time() -> None:
    from course_utils.bench.timing import check_clock_advanced

    raises_naming(ValueError, ["seconds", ">= 0", "-1.0", "runs backwards"],
                  lambda: check_clock_advanced([[1.0, -1.0]], "calls"))


# -- battery 28 (fix58) ------------------------------------------------------------------------------

def test_compare_on_device_names_a_dtype_that_is_no_dtype() -> None:
    from course_utils.bench.mha_speed import compare_on_device

    raises_naming(ValueError, ["dtype must be one of", "got []"],
                  lambda: compare_on_device("cpu", batch=1, seq_len=4, d_model=8, num_heads=2, dtype=[],
                                            repeats=2))


def test_a_generator_of_groups_is_read_once() -> None:
    from course_utils.bench.gqa_speed import make_kv_caches, stage_times

    _, caches = make_kv_caches(2, 4, 8, 1, (g for g in (2, 1)))
    assert sorted(caches) == [1, 2]
    times = stage_times(groups=(g for g in (2, 1)), num_heads=2, d_head=4, context=16, num_layers=1,
                        repeats=1, flush_mib=1)
    assert all(sorted(stage) == [1, 2] for stage in times.values())


# -- battery 28 (library) ----------------------------------------------------------------------------

@pytest.mark.parametrize("name, item", [(("a", ["b"]), "item [1] is list ['b']"),
                                        ((1, ("c", {2: 3})), "item [1] is tuple ('c', {2: 3})")])
def test_timing_refuses_a_name_that_is_not_hashable(name: tuple, item: str) -> None:
    from course_utils.bench.timing import Timing

    raises_naming(TypeError, ["Timing.name", "hashable", item], lambda: Timing(name, 1.0, 1.0, [1.0]))


@pytest.mark.skipif(torch.cuda.is_available(), reason="names the device only where CUDA cannot run")
def test_compare_on_device_names_a_device_whose_repr_raises() -> None:
    from course_utils.bench.mha_speed import compare_on_device

    class BadStr(str):
        def __repr__(self) -> str:
            raise RuntimeError("repr raises")

    raises_naming(RuntimeError,
                  ["compare_on_device(device='cuda' (a BadStr whose repr raised RuntimeError))"],
                  lambda: compare_on_device(BadStr("cuda")))


# -- battery 29 (library) ----------------------------------------------------------------------------

def test_clock_elapsed_huge_names_clock():
    from course_utils.bench.timing import clock_elapsed

    with pytest.raises(ValueError, match="clock"):
        clock_elapsed(BEYOND_FLOAT, 2.0, "x")


# -- battery 30 --------------------------------------------------------------------------------------

# -- str_subclass_eq_baseline: a str whose == says True passed, then a bare KeyError ----------------
def test_timings_refuse_a_baseline_equal_to_everything_by_name():
    from course_utils.bench.timing import timings_from_samples

    class EqAll(str):
        def __eq__(self, other):
            return True

        __hash__ = str.__hash__

    with pytest.raises(ValueError, match="baseline .* is not one of the names of samples"):
        timings_from_samples({"a": [1.0, 1.1], "b": [2.0, 2.1]}, EqAll("zzz"))
    assert [t.name for t in timings_from_samples({"a": [1.0, 1.1], "b": [2.0, 2.1]}, "a")] == ["a", "b"]


# -- battery 30 (dev) --------------------------------------------------------------------------------

def test_a_timings_list_whose_len_raises_is_named():
    from course_utils.bench.timing import format_table, timings_from_samples

    class RaisingLen(list):
        def __len__(self):
            raise RuntimeError("len exploded")

    timings = RaisingLen(timings_from_samples({"a": [1.0, 1.1], "b": [2.0, 2.1]}, "a"))
    with pytest.raises(TypeError, match="timings must be a non-empty list of Timing"):
        format_table("t", timings, "a")


# -- battery 31 --------------------------------------------------------------------------------------

# -- time_interleaved_int_keys / _empty_key: a key Timing.name cannot hold failed after all the timing,
# naming Timing.name; now refused before any call, naming fns
@pytest.mark.parametrize("keys, error, shown", [((1, 2), TypeError, "got int 1"),
                                                (("", "b"), ValueError, "got the empty str ''"),
                                                (((), "b"), ValueError, r"got tuple \(\)")])
def test_time_interleaved_names_fns_for_a_key_no_timing_can_hold(keys, error, shown):
    calls = []
    fns = {key: (lambda: calls.append(1)) for key in keys}
    with pytest.raises(error, match=rf"^fns must be keyed by .*{shown}"):
        timing.time_interleaved(fns, baseline=keys[0], repeats=3, warmup=0)
    assert calls == []  # refused before anything was timed
    with pytest.raises(error, match=rf"^samples must be keyed by .*{shown}"):
        timing.timings_from_samples({key: [1.0, 1.1] for key in keys}, keys[0])


def test_time_interleaved_still_takes_str_and_tuple_keys():
    rows = timing.time_interleaved({"a": lambda: 1, (64, True): lambda: 2}, baseline="a", repeats=3,
                                   warmup=0)
    assert [row.name for row in rows] == ["a", (64, True)]


# -- battery 34: NumPy floats are numbers in the bench helpers -----------------------------------------
# (each refused np.float32 as "not a number" while np.float64, a float subclass, passed)

def test_timing_records_take_numpy_floats_as_python_floats():
    row = Timing("a", np.float32(1.0), np.float16(1.0), (np.float32(1.0),))
    assert (row.median_s, row.ratio, row.samples_s) == (1.0, 1.0, (1.0,))
    assert all(type(v) is float for v in (row.median_s, row.ratio, *row.samples_s))
    spread = RatioSpread("a", "b", np.float32(1.0), 1.0, 1.0, 1.0, 1.0, 3)
    assert type(spread.median) is float and spread.median == 1.0
    rows = timing.timings_from_samples({"a": [np.float32(1.0), np.float32(2.0)]}, "a")
    assert rows[0].median_s == 1.5 and type(rows[0].median_s) is float


@pytest.mark.parametrize("value, error", [(True, TypeError), ("1.0", TypeError),
                                          (np.float32("nan"), ValueError), (np.float32(0.0), ValueError)])
def test_timing_still_refuses_bools_strs_nan_and_zero_naming_the_field(value, error):
    with pytest.raises(error, match=r"^Timing\('a'\)\.median_s must be"):
        Timing("a", value, 1.0)


def test_clock_elapsed_takes_numpy_float_readings():
    assert clock_elapsed(np.float32(1.0), np.float32(2.0), "x") == 1.0
    assert clock_elapsed(10**18, 10**18 + 1, "x") == 1.0  # ints: subtracted exactly
    ticks = iter(np.arange(1, 1000, dtype=np.float32))
    rows = timing.time_interleaved({"a": lambda: 1}, baseline="a", repeats=2, warmup=0,
                                   clock=lambda: next(ticks))
    assert rows[0].median_s == 1.0
    for start, end in ((np.float32(2.0), np.float32(1.0)), (True, 2.0), ("1", 2.0)):
        with pytest.raises(ValueError, match="^clock must return seconds that never decrease"):
            clock_elapsed(start, end, "x")


def test_bench_mha_takes_a_numpy_float_target_sample_s():
    rows = MS.bench_mha(1, 3, 8, 2, repeats=2, target_sample_s=np.float32(1e-4))
    assert len(rows) == len(MS.IMPLEMENTATIONS)
    with pytest.raises(TypeError, match="^target_sample_s must be a number of seconds >= 0"):
        MS.bench_mha(1, 3, 8, 2, repeats=2, target_sample_s="0.1")
    with pytest.raises(ValueError, match="^target_sample_s must be a finite number of seconds >= 0"):
        MS.bench_mha(1, 3, 8, 2, repeats=2, target_sample_s=np.float32(-1.0))


def test_format_training_table_takes_numpy_numbers_as_the_numbers_they_are():
    from course_utils.bench.train_speed import format_training_table

    row = {"seed": np.int64(0), "steps": 4, "seconds": np.float32(0.25), "heldout_acc": np.float32(0.5)}
    assert format_training_table([row]) == format_training_table(
        [{"seed": 0, "steps": 4, "seconds": 0.25, "heldout_acc": 0.5}])
    assert type(row["seconds"]) is np.float32  # the caller's row is not changed
    with pytest.raises(TypeError, match=r"^rows\[0\]\['seconds'\] must be a number or None, got str"):
        format_training_table([{**row, "seconds": "0.25"}])
    with pytest.raises(ValueError, match=r"^rows\[0\]\['seconds'\] must be a finite number"):
        format_training_table([{**row, "seconds": np.float32("nan")}])


def test_llc_an_impossible_sysfs_size_is_not_reported_and_says_why(tmp_path, monkeypatch):
    """A sysfs size of 1e53 bytes was returned as the cache: now out of COURSE_UTILS_LLC_MIB's
    range means not reported, lscpu (or the stated guess) is asked, and the source says why."""
    monkeypatch.delenv(DS.LLC_ENV, raising=False)
    index = tmp_path / "index0"
    index.mkdir()
    for name, text in (("level", "3\n"), ("type", "Unified\n"), ("size", "9" * 44 + "G\n")):
        (index / name).write_text(text)
    monkeypatch.setattr(DS, "_from_lscpu", lambda: 16 * 2**20)
    size, where = DS.last_level_cache_bytes(tmp_path)
    assert size == 16 * 2**20 and where.startswith("lscpu (") and str(tmp_path) in where
    assert "ignored" in where and "1048576 MiB" in where
    monkeypatch.setattr(DS, "_from_lscpu", lambda: (DS.MAX_LLC_MIB + 1) * 2**20)
    size, where = DS.last_level_cache_bytes(tmp_path)
    assert size == DS.FALLBACK_LLC_BYTES and "assumed" in where and "lscpu reported" in where
    (index / "size").write_text("9" * 400 + "\n")  # more digits than a float holds: no OverflowError
    size, where = DS.last_level_cache_bytes(tmp_path)
    assert size == DS.FALLBACK_LLC_BYTES
    (index / "size").write_text(f"{DS.MAX_LLC_MIB}M\n")  # the largest figure taken
    assert DS.last_level_cache_bytes(tmp_path) == (DS.MAX_LLC_MIB * 2**20, str(tmp_path))
