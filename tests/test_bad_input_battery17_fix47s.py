"""Battery 17a's bench cases (issue 38): a meta ``x`` in SmallDecoder, the varied size's fixed value
in sweep_mha, make_read_probe's thread bound, timings_from_samples / paired_ratios / ratio_spread
naming the argument, and check_decoder_fits naming the size that is too large, with its value."""

from __future__ import annotations

import pytest
import torch

from course_utils.attention.validation import MAX_THREADS
from course_utils.bench import decode_step, gqa_speed, mha_speed, timing


def _raises(make, error: type[Exception], words: list[str]) -> None:
    """``make()`` raises ``error`` whose message holds every one of ``words``."""
    with pytest.raises(error) as info:
        make()
    for word in words:
        assert word in str(info.value), (word, str(info.value))


def _decoder() -> decode_step.SmallDecoder:
    return decode_step.SmallDecoder(32, 4, 2, 1, context=16, attention="course")


def _timings() -> list[timing.Timing]:
    return timing.timings_from_samples({"a": [1.0, 1.1, 1.2], "b": [2.0, 2.1, 2.2]}, "a")


# -- S1: a meta x went through weights_pass (a meta result) and step --
@pytest.mark.parametrize("method", ["weights_pass", "step"])
def test_small_decoder_refuses_a_meta_x(method) -> None:
    x = torch.randn(1, 32, device="meta")
    _raises(lambda: getattr(_decoder(), method)(x), ValueError, ["x", "meta device", "(1, 32)"])


# -- S2: sweep_mha ignored whatever was passed for the size it varies --
@pytest.mark.parametrize("vary", ["seq_len", "batch", "d_model", "num_heads"])
@pytest.mark.parametrize("bad", [-1, True, 2.5, "3", 10**12, __import__("numpy").float64(2.0), 4])
def test_sweep_mha_refuses_a_value_for_the_varied_size(vary, bad) -> None:
    sizes = {"batch": 1, "seq_len": 4, "d_model": 16, "num_heads": 4, vary: bad}
    _raises(lambda: mha_speed.sweep_mha(vary, [4], repeats=1, target_sample_s=0.0, **sizes), ValueError,
            [vary, f"vary={vary!r}", repr(bad), "ignored"])


@pytest.mark.parametrize(("name", "bad", "error"), [("batch", "3", TypeError), ("d_model", 2.5, TypeError),
                                                    ("num_heads", True, TypeError), ("batch", 0, ValueError)])
def test_sweep_mha_checks_every_fixed_size(name, bad, error) -> None:
    sizes = {"batch": 1, "d_model": 16, "num_heads": 4, name: bad}
    _raises(lambda: mha_speed.sweep_mha("seq_len", [4], repeats=1, target_sample_s=0.0, **sizes), error,
            [name, repr(bad)])


def test_sweep_mha_still_runs_with_the_varied_size_left_out() -> None:
    table = mha_speed.sweep_mha("seq_len", [4, 8], batch=1, d_model=16, num_heads=4, repeats=1,
                                target_sample_s=0.0)
    assert list(table.index) == [4, 8] and table.index.name == "seq_len"


# -- S7: make_read_probe clamped a huge thread count to the CPU count; read_bandwidth refuses it --
@pytest.mark.parametrize("threads", [10**12, 10**6, MAX_THREADS + 1])
def test_make_read_probe_bounds_threads_like_read_bandwidth(threads) -> None:
    _raises(lambda: decode_step.make_read_probe(torch.ones(1024), threads=threads), ValueError,
            ["threads must be an int in 1..", str(threads)])
    _raises(lambda: decode_step.read_bandwidth(torch.ones(1024), repeats=1, num_threads=threads), ValueError,
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
    _raises(lambda: timing.timings_from_samples(samples, "a"), error, words)


@pytest.mark.parametrize("baseline", [7, "", "bogus", None, True])
def test_timings_from_samples_names_an_unknown_baseline(baseline) -> None:
    _raises(lambda: timing.timings_from_samples({"a": [1.0], "b": [2.0]}, baseline), ValueError,
            [f"baseline {baseline!r} ({type(baseline).__name__}) is not one of", "['a', 'b']"])


# -- O4: "'bogus' is not one of ['a', 'b']" did not say which argument (name or baseline) --
@pytest.mark.parametrize("function", [timing.paired_ratios, timing.ratio_spread])
@pytest.mark.parametrize("name", ["", "bogus", None, True, 7])
def test_paired_ratios_and_ratio_spread_name_the_unknown_name(function, name) -> None:
    _raises(lambda: function(_timings(), name, "a"), ValueError,
            [f"name {name!r} ({type(name).__name__}) is not one of the timings' names", "['a', 'b']"])


@pytest.mark.parametrize("function", [timing.paired_ratios, timing.ratio_spread])
def test_paired_ratios_and_ratio_spread_name_the_unknown_baseline(function) -> None:
    _raises(lambda: function(_timings(), "a", "bogus"), ValueError,
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
    _raises(call, ValueError, [f"{size}=1,000,000,000,000", "GiB"])


def test_check_decoder_fits_still_blames_the_names_given() -> None:
    _raises(lambda: decode_step.check_decoder_fits(32, 4, 2, 1, context=10**12, batch=1,
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
