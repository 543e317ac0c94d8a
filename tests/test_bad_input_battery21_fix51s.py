"""Battery 21 (issue 38), fix pass S (bench): a NumPy int seed reaches torch as a Python int in
mha_speed (2); clock_elapsed refuses bools as clock readings (13); the bench result records refuse
fields that contradict each other, by the formulas the benchmarks use (14)."""

from __future__ import annotations

import numpy as np
import pytest
from bad_input_cases import raises_naming

from course_utils.bench import mha_speed as MS
from course_utils.bench.timing import clock_elapsed


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
def _timings():
    from course_utils.bench.timing import timings_from_samples
    samples = {"nn.MultiheadAttention": [0.1, 0.2, 0.15], "batched": [0.2, 0.3, 0.25]}
    return tuple(timings_from_samples(samples, "nn.MultiheadAttention"))


@pytest.mark.parametrize("name", ["batched", "nn.MultiheadAttention"])
def test_device_comparison_refuses_a_skipped_function_that_was_timed(name: str) -> None:
    diffs = {"nn.MultiheadAttention": 0.0, "batched": 1e-4}
    raises_naming(ValueError, ["DeviceComparison.skipped", repr(name)],
                  lambda: MS.DeviceComparison("t", _timings(), diffs, 1e-3, 1.0, dict.fromkeys(diffs, True),
                                              skipped={name: "no kernel"}))
    kept = MS.DeviceComparison("t", _timings(), diffs, 1e-3, 1.0, dict.fromkeys(diffs, True),
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


def _decode_bench(cache_bytes: dict[int, int]):
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
                  lambda: _decode_bench(sizes))


@pytest.mark.parametrize("element", [2, 4, 8])
def test_decode_bench_keeps_cache_bytes_of_one_floating_dtype(element: int) -> None:
    sizes = {4: _kv(4, element), 1: _kv(1, element)}
    assert {r.num_kv_heads: r.cache_bytes for r in _decode_bench(sizes).rows} == sizes


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
