"""Battery 22a (issue 38), fix pass S (bench): make_read_probe's probe keeps its buffer alive (1);
decoder_bytes checks every size under its own name (4); StageRow is frozen (8); RatioSpread's
baseline and DeviceComparison's title are refused empty (9)."""

from __future__ import annotations

import dataclasses
import gc
import weakref

import numpy as np
import pytest
import torch
from bad_input_cases import raises_naming

from course_utils.bench import decode_step as DS
from course_utils.bench import gqa_speed as GS
from course_utils.bench import mha_speed as MS
from course_utils.bench import timing as TM


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
