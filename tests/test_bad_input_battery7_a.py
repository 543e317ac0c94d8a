"""Battery 7 (attention, shapes, worked example, timing, decode): each call that failed
obscurely (a torch or Python error from deep inside) or passed silently (a wrong result, no
error) now raises an error naming its argument, what was expected and what arrived."""

import numpy as np
import pytest
import torch

from course_utils.attention.gqa import GroupedQueryAttention
from course_utils.attention.masks import causal_mask, padding_mask
from course_utils.attention.mha import MultiHeadAttention
from course_utils.attention.naive_mha import stack_head_weights
from course_utils.attention.shapes import (
    mha_macs,
    mha_parameter_count,
    peak_allocated_bytes,
    trace_shapes,
    validate_dims,
)
from course_utils.bench import decode_step, gqa_speed, mha_speed, timing
from course_utils.bench.gqa_speed import make_kv_caches, small_cache_note
from course_utils.env import pick_device
from course_utils.tasks import worked_example as we

# a GPU index no machine here has: on a CPU-only torch "no usable CUDA GPU", else "only N GPU(s)"
MISSING_GPU = f"cuda:{torch.cuda.device_count() + 7}"
MHA = MultiHeadAttention(8, 2)
GQA = GroupedQueryAttention(8, 2, 1)

CASES = [
    # row 1 and its neighbour padding_mask: an absent device is named before torch asserts
    (lambda: causal_mask(3, device=MISSING_GPU), ValueError, ["device", repr(MISSING_GPU), "asked for"]),
    (lambda: padding_mask([1, 2], device=MISSING_GPU), ValueError,
     ["device", repr(MISSING_GPU), "asked for"]),
    (lambda: padding_mask([1, 2], device=3), TypeError, ["device", "int 3"]),
    (lambda: causal_mask(3, device="xpu"), ValueError, ["device", "'cpu'", "'xpu'"]),
    # rows 2-6: the public project_qkv checks its inputs as forward does
    (lambda: MHA.project_qkv(*[torch.ones(8)] * 3), ValueError, ["query", "3-D", "d_model=8", "(8)"]),
    (lambda: MHA.project_qkv(*[torch.ones(1, 3, 8, dtype=torch.int64)] * 3), TypeError,
     ["query", "floating-point", "torch.int64"]),
    (lambda: MHA.project_qkv(*[torch.ones(1, 3, 5)] * 3), ValueError, ["query", "d_model=8", "(1, 3, 5)"]),
    (lambda: MHA.project_qkv([[1.0]], [[1.0]], [[1.0]]), TypeError, ["query", "torch.Tensor", "list"]),
    (lambda: MHA.project_qkv(*[np.ones((1, 3, 8), np.float32)] * 3), TypeError,
     ["query", "torch.Tensor", "ndarray"]),
    (lambda: MHA.project_qkv(*[torch.ones(1, 3, 8, dtype=torch.float64)] * 3), TypeError,
     ["query", "torch.float64", "torch.float32"]),
    (lambda: MHA.project_qkv(torch.ones(1, 3, 8), torch.ones(2, 3, 8), torch.ones(2, 3, 8)), ValueError,
     ["batch size B", "(1, 3, 8)", "(2, 3, 8)"]),
    (lambda: MHA.project_qkv(torch.ones(1, 3, 8), torch.ones(1, 4, 8), torch.ones(1, 3, 8)), ValueError,
     ["key", "value", "Tk", "(1, 4, 8)"]),
    (lambda: GQA.project_qkv(*[torch.ones(1, 3, 8, dtype=torch.float64)] * 3), TypeError,
     ["query", "torch.float64", "torch.float32"]),
    # row 7: one 2-D tensor where a list of per-head parts belongs is no longer cut into rows
    (lambda: stack_head_weights(*[torch.ones(4, 8)] * 3), ValueError,
     ["q_parts", "list of tensors", "3-D", "2-D", "(4, 8)"]),
    # row 8: fn is called with no arguments
    (lambda: peak_allocated_bytes(lambda a: a), TypeError, ["fn", "no arguments", "<lambda>(a)"]),
    # rows 9, 10: int for a bool flag
    (lambda: trace_shapes(MHA, torch.ones(1, 3, 8), keep_tensors=2), TypeError,
     ["keep_tensors", "True or False", "int 2"]),
    (lambda: trace_shapes(MHA, torch.ones(1, 3, 8)).format(code=2), TypeError,
     ["code", "True or False", "int 2"]),
    # rows 48-50: the worked example's helpers take labelled NumPy matrices
    (lambda: we.article_matmul([[1.0]], [[1.0]]), TypeError, ["a", "2-D NumPy array", "list"]),
    (lambda: we.article_matmul(np.ones(3), np.ones((3, 1))), ValueError, ["a", "2-D", "(3,)"]),
    (lambda: we.output_rounding_budget([[1.0]], [[1.0]]), TypeError, ["weights", "2-D NumPy array", "list"]),
    (lambda: we.output_rounding_budget(np.ones((2, 2)), [[1.0]]), TypeError, ["values", "list"]),
    (lambda: we.Table("t", np.ones((2, 2)), ("a",), ("b", "c")), ValueError,
     ["Table('t').values", "one row per row label", "(1, 2)", "(2, 2)"]),
    (lambda: we.Table("t", np.ones((1, 1)), ["a"], ("b",)), TypeError, ["rows", "tuple of strs", "list"]),
    (lambda: we.Table("t", np.array([["x"]]), ("a",), ("b",)), TypeError, ["values", "real numbers", "<U1"]),
]


def _is_named(call, error, words):
    with pytest.raises(error) as info:
        call()
    missing = [word for word in words if word not in str(info.value)]
    assert not missing, f"{missing} not in: {info.value}"


@pytest.mark.parametrize("call, error, words", CASES)
def test_battery7_call_is_named(call, error, words):
    _is_named(call, error, words)


def test_a_missing_gpu_gets_pick_devices_sentence():
    """One sentence for one mistake: the masks say what pick_device says."""
    with pytest.raises(ValueError) as ours:
        causal_mask(3, device=MISSING_GPU)
    with pytest.raises(ValueError) as theirs:
        pick_device(MISSING_GPU, "device")  # named as the masks' argument (its own is prefer)
    assert str(ours.value) == str(theirs.value)


@pytest.mark.skipif(torch.backends.mps.is_available(), reason="needs a machine without MPS")
def test_an_absent_mps_gets_one_sentence():
    """pick_device and the masks share check_device_present: one sentence for MPS too."""
    with pytest.raises(ValueError) as ours:
        padding_mask([1, 2], device="mps")
    with pytest.raises(ValueError) as theirs:
        pick_device("mps", "device")  # named as the masks' argument (its own is prefer)
    assert str(ours.value) == str(theirs.value)
    assert "'mps' asked for" in str(theirs.value)


def test_masks_still_go_where_asked():
    assert causal_mask(3, device="meta").shape == (3, 3)
    assert padding_mask([1, 2], device="meta").is_meta  # the lengths are read on their own device
    assert padding_mask([1, 2], 3, device="cpu").tolist() == [[True, False, False], [True, True, False]]


def test_project_qkv_still_projects():
    x, c = torch.randn(1, 3, 8), torch.randn(1, 5, 8)
    q, k, v = MHA.project_qkv(x, c, c)
    assert q.shape == (1, 2, 3, 4) and k.shape == v.shape == (1, 2, 5, 4)
    q, k, v = MHA.project_qkv(x, x, x)  # self-attention: the fused matmul, same numbers as forward's
    out = MHA.out_proj(MHA.merge_heads(torch.softmax(q @ k.transpose(-2, -1) / 2.0, -1) @ v))
    assert torch.allclose(out, MHA(x)[0], atol=1e-6)


def test_stacked_parts_and_flags_still_work():
    parts = [torch.randn(4, 8), torch.randn(4, 8)]
    assert stack_head_weights(parts, parts, parts).shape == (24, 8)
    assert stack_head_weights(torch.stack(parts), torch.stack(parts), torch.stack(parts)).shape == (24, 8)
    trace = trace_shapes(MHA, torch.ones(1, 3, 8), keep_tensors=False)
    assert not trace.tensors and "code" not in trace.format(code=False).splitlines()[0]


@pytest.mark.filterwarnings("error::RuntimeWarning")  # an int64 overflow warns: fail on it
def test_numpy_sizes_give_exact_counts():
    """Rows 39, 40: NumPy int64 sizes used to wrap (mha_macs gave all zeros)."""
    big = (2**20, 2**20, 2**12, 1)
    assert mha_macs(*map(np.int64, big)) == mha_macs(*big)
    assert mha_macs(*map(np.int64, big)).scores == 2**20 * 2**20 * 2**20 * 2**12
    assert mha_parameter_count(np.int64(2**32), 1) == mha_parameter_count(2**32, 1) == 4 * 2**64 + 4 * 2**32
    assert type(validate_dims(np.int64(8), np.int64(2))) is int


def test_numpy_sizes_reach_the_memory_check():
    """Neighbours in the decode benchmark: the byte count that guards the allocation, and the
    small-cache note, were products of int64 sizes too."""
    with pytest.raises(ValueError, match="more than this machine"):
        make_kv_caches(16, np.int64(2**32), np.int64(2**32), 1, [16])
    assert small_cache_note(np.int64(2**40), np.int64(2**30)) is None  # a huge cache: no note


def test_the_worked_example_still_builds_its_tables():
    example = we.load_worked_example()
    assert we.compare_with_article(example)["verdict"].isin(["rounding", "inherited", "slip"]).all()
    assert we.Table("t", np.ones((1, 2)), ("a",), ("b", "c")).frame().shape == (1, 2)


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
    _is_named(call, error, words)


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
