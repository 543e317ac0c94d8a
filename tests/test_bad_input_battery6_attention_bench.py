"""Battery 6 (attention and bench): each call that hung, passed silently or failed obscurely
now raises an error naming its argument (or, for causal_mask's negative offset, behaves as
documented)."""

import os

import numpy as np
import pytest
import torch

from course_utils.attention.gqa import GroupedQueryAttention, PublishedConfig, kv_cache_bytes
from course_utils.attention.hooks import HookPoint
from course_utils.attention.masks import causal_mask, masked_softmax
from course_utils.attention.mha import MultiHeadAttention
from course_utils.attention.sdpa_backends import precision_notes
from course_utils.bench.decode_step import SmallDecoder, last_level_cache_bytes, make_read_probe
from course_utils.bench.gqa_speed import DecodeRow, make_kv_caches, stage_times
from course_utils.bench.timing import Timing, paired_ratios, ratio_spread, time_interleaved


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


def test_negative_query_offset_is_the_documented_shift():
    mask = causal_mask(3, query_offset=-1)
    assert not mask[0].any() and mask[1].tolist() == [True, False, False]
    weights = masked_softmax(torch.randn(3, 3), mask)
    assert weights[0].tolist() == [0.0, 0.0, 0.0] and torch.allclose(weights[1:].sum(-1), torch.ones(2))
    with pytest.raises(ValueError, match="query_offset"):
        causal_mask(3, query_offset=-3)


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


def test_kv_cache_bytes_is_exact_for_numpy_ints():
    got = kv_cache_bytes(np.int64(2**40), np.int64(2**30), 1, 1, 1)
    assert type(got) is int and got == 2 * 2**40 * 2**30 * 2
    config = PublishedConfig("x", np.int64(2), 4, 2, 64, "s")
    assert type(config.num_layers) is int
    got = kv_cache_bytes(config.num_layers, 1, config.num_kv_heads, config.d_head, 10)
    assert got == 2 * 2 * 2 * 64 * 10 * 2


def test_smalldecoder_step_still_takes_a_right_x():
    dec = SmallDecoder(64, 4, 4, 1, context=8)
    assert dec.step(torch.randn(1, 64)).shape == (1, 64)


def test_decode_row_reads_its_samples():
    row = DecodeRow(4, 100, {"course": [2.0, 1.0, 3.0]})
    assert row.best_s("course") == 1.0 and row.median_s("course") == 2.0


