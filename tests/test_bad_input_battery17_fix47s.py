"""Battery 17a's bench cases (issue 38): a meta ``x`` in SmallDecoder, the varied size's fixed value
in sweep_mha, make_read_probe's thread bound, timings_from_samples / paired_ratios / ratio_spread
naming the argument, and check_decoder_fits naming the size that is too large, with its value."""

from __future__ import annotations

import pytest
import torch

from course_utils.attention.validation import MAX_THREADS
from course_utils.bench import decode_step, mha_speed, timing


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


# -- S7: make_read_probe clamped a huge thread count to the CPU count; read_bandwidth refuses it --
@pytest.mark.parametrize("threads", [10**12, 10**6, MAX_THREADS + 1])
def test_make_read_probe_bounds_threads_like_read_bandwidth(threads) -> None:
    _raises(lambda: decode_step.make_read_probe(torch.ones(1024), threads=threads), ValueError,
            ["threads must be an int in 1..", str(threads)])
    _raises(lambda: decode_step.read_bandwidth(torch.ones(1024), repeats=1, num_threads=threads), ValueError,
            ["num_threads must be an int in 1..", str(threads)])


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
