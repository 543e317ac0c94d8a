"""The shape trace records real shapes and reproduces the module; parameter and
multiply-add counts agree with real modules; bad sizes get clear errors."""

from __future__ import annotations

import pandas as pd
import pytest
import torch
from torch import nn

from course_utils import MultiHeadAttention
from course_utils.attention.shapes import (
    cost_table,
    count_parameters,
    dimension_report,
    frame_to_text,
    measured_macs,
    mha_macs,
    mha_parameter_count,
    parameter_table,
    peak_allocated_bytes,
    trace_shapes,
    validate_dims,
)
from course_utils.exercises import lesson03

# seed 001's table at batch 2, seq 10, d_model 512, 8 heads (plus the steps it leaves implicit)
SEED_001 = {
    "input": (2, 10, 512),
    "W_Q": (512, 512),
    "W_Q_0": (512, 64),
    "Q": (2, 10, 512),
    "Q_view": (2, 10, 8, 64),
    "Q_heads": (2, 8, 10, 64),
    "K_heads": (2, 8, 10, 64),
    "V_heads": (2, 8, 10, 64),
    "scores": (2, 8, 10, 10),
    "weights": (2, 8, 10, 10),
    "attend": (2, 8, 10, 64),
    "transpose_back": (2, 10, 8, 64),
    "merge": (2, 10, 512),
    "W_O": (512, 512),
    "output": (2, 10, 512),
}


@pytest.fixture(scope="module")
def trace_001():
    torch.manual_seed(0)
    return trace_shapes(MultiHeadAttention(512, 8), torch.randn(2, 10, 512))


def test_trace_matches_the_seed_001_table(trace_001):
    for name, shape in SEED_001.items():
        assert trace_001.shape(name) == shape, name


def test_trace_reproduces_the_module_forward(trace_001):
    assert trace_001.max_abs_diff < 1e-5


def test_trace_layout_view_transpose_contiguous(trace_001):
    assert trace_001["Q_view"].contiguous and not trace_001["Q_heads"].contiguous
    assert not trace_001["transpose_back"].contiguous and trace_001["merge"].contiguous
    # view and transpose move no data: same storage as the projection
    q, q_heads = trace_001.tensors["Q"], trace_001.tensors["Q_heads"]
    assert q_heads.untyped_storage().data_ptr() == q.untyped_storage().data_ptr()


def test_trace_macs_per_step_are_measured_and_match_the_formula(trace_001):
    macs = mha_macs(2, 10, 512, 8)
    assert trace_001["scores"].macs == macs.scores == 2 * 10 * 10 * 512
    assert trace_001["attend"].macs == macs.attend
    assert sum(trace_001[n].macs for n in ("Q", "K", "V")) == macs.qkv_projections
    assert trace_001["output"].macs == macs.output_projection
    assert trace_001.total_macs == macs.total
    for name in ("Q_view", "Q_heads", "transpose_back", "merge", "weights"):
        assert trace_001[name].macs == 0


def test_trace_seed_000_walkthrough_and_head_slices():
    torch.manual_seed(1)
    mha = MultiHeadAttention(512, 8)
    x = torch.randn(1, 3, 512)
    tr = trace_shapes(mha, x, head=5)
    assert tr.shape("W_Q_5") == (512, 64)
    assert tr.shape("Q_heads")[1:] == (8, 3, 64)
    assert tr.shape("output") == (1, 3, 512)
    # head 5's slice of the stacked W_Q gives exactly head 5's queries
    q_5 = x @ tr.tensors["W_Q_5"] + mha.in_proj.bias[5 * 64:6 * 64]
    torch.testing.assert_close(q_5, tr.tensors["Q_heads"][:, 5])
    # concatenating the heads in order is the merge step
    concat = torch.cat([tr.tensors["attend"][:, i] for i in range(8)], dim=-1)
    torch.testing.assert_close(concat, tr.tensors["merge"])


def test_trace_cross_attention_and_no_bias():
    torch.manual_seed(2)
    mha = MultiHeadAttention(24, 3, bias=False)
    tr = trace_shapes(mha, torch.randn(2, 4, 24), torch.randn(2, 7, 24), keep_tensors=False)
    assert tr.shape("scores") == (2, 3, 4, 7)
    assert tr.shape("attend") == (2, 3, 4, 8)
    assert tr.shape("output") == (2, 4, 24)
    assert tr["scores"].symbolic == ("B", "h", "Tq", "Tk")
    assert tr.max_abs_diff < 1e-5 and tr.tensors == {}
    assert "scores" in tr.format() and "code" not in tr.format(code=False).splitlines()[0]
    assert list(tr.to_frame()["step"]) == tr.names


def test_trace_ignores_dropout_and_restores_training_mode():
    torch.manual_seed(3)
    mha = MultiHeadAttention(16, 4, dropout=0.5).train()
    tr = trace_shapes(mha, torch.randn(1, 5, 16))
    assert mha.training and tr.max_abs_diff < 1e-5


def test_trace_rejects_bad_input():
    mha = MultiHeadAttention(16, 4)
    with pytest.raises(TypeError, match="MultiHeadAttention"):
        trace_shapes(nn.Linear(16, 16), torch.randn(1, 2, 16))
    with pytest.raises(TypeError, match="torch.Tensor"):
        trace_shapes(mha, [[1.0] * 16])
    with pytest.raises(ValueError, match=r"\(B, T, d_model=16\)"):
        trace_shapes(mha, torch.randn(2, 16))
    with pytest.raises(ValueError, match="d_model=16"):
        trace_shapes(mha, torch.randn(1, 2, 15))
    with pytest.raises(ValueError, match="batch size"):
        trace_shapes(mha, torch.randn(1, 2, 16), torch.randn(2, 3, 16))
    with pytest.raises(ValueError, match="head must be in 0..3"):
        trace_shapes(mha, torch.randn(1, 2, 16), head=4)
    with pytest.raises(KeyError, match="no step named"):
        trace_shapes(mha, torch.randn(1, 2, 16))["nope"]


@pytest.mark.parametrize("d_model,num_heads", [(512, 1), (512, 8), (64, 8), (12, 3), (30, 5), (8, 8)])
@pytest.mark.parametrize("bias", [True, False])
def test_parameter_count_matches_real_modules(d_model, num_heads, bias):
    ours = MultiHeadAttention(d_model, num_heads, bias=bias)
    theirs = nn.MultiheadAttention(d_model, num_heads, bias=bias, batch_first=True)
    expected = 4 * d_model**2 + (4 * d_model if bias else 0)
    assert mha_parameter_count(d_model, num_heads, bias=bias) == expected
    assert count_parameters(ours) == count_parameters(theirs) == expected


def test_seed_002_numbers():
    mha = MultiHeadAttention(64, 8, bias=False)
    assert count_parameters(mha) == 16_384
    w_q = mha.in_proj.weight[:64].T  # (d, d) as in x @ W_Q
    slices = [w_q[:, i * 8:(i + 1) * 8] for i in range(8)]
    assert all(s.shape == (64, 8) for s in slices)
    assert sum(s.numel() for s in slices) == 4096
    table = parameter_table(64, [1, 2, 4, 8, 16, 64], bias=False)
    assert (table["module"] == 16_384).all() and table["equal"].all()
    assert table.loc[8, "W_Q^i shape"] == "(64, 8)" and table.loc[8, "h x W_Q^i"] == 4096


def test_parameter_table_leaves_the_random_stream_alone():
    torch.manual_seed(5)
    expected = torch.rand(3)
    torch.manual_seed(5)
    parameter_table(32, [1, 4])
    assert torch.equal(torch.rand(3), expected)


@pytest.mark.parametrize("B,T,d,h", [(2, 10, 512, 8), (1, 3, 512, 8), (3, 7, 24, 3), (1, 1, 8, 8)])
def test_mha_macs_match_a_real_forward_pass(B, T, d, h):
    mha = MultiHeadAttention(d, h)
    macs = mha_macs(B, T, d, h)
    assert measured_macs(mha, torch.randn(B, T, d)) == macs.total
    assert macs.scores == macs.attend == B * T * T * d  # independent of h
    assert macs.flops == 2 * macs.total


def test_score_cost_is_independent_of_h_and_kv_len_counts():
    scores = {h: mha_macs(1, 16, 64, h).scores for h in (1, 2, 4, 8, 16, 32, 64)}
    assert set(scores.values()) == {16 * 16 * 64}
    cross = mha_macs(2, 4, 16, 4, kv_len=9)
    assert cross.scores == 2 * 4 * 9 * 16
    assert cross.qkv_projections == 2 * (4 + 2 * 9) * 16 * 16


def test_cost_table_formula_equals_measured():
    table = cost_table(2, 10, 64, [1, 2, 8, 64])
    assert table["equal"].all()
    assert (table["QK^T all heads"] == 2 * 10 * 10 * 64).all()
    assert list(table["QK^T per head"]) == [12800, 6400, 1600, 200]
    assert "12,800" in frame_to_text(table)


def test_frame_to_text_formats_floats_without_negative_zero():
    frame = pd.DataFrame({"x": [1.23456, -0.0001, -0.0, 2.5], "n": [1000, 2, 3, 4],
                          "ok": [True, False, True, True]})
    text = frame_to_text(frame)
    assert "1.235" in text and "1,000" in text and "False" in text
    assert "-0.000" not in text and text.count("0.000") == 2
    assert "1.2346" in frame_to_text(frame, decimals=4)
    with pytest.raises(ValueError, match=r"decimals must be an int in 0\.\.15, got -1"):
        frame_to_text(frame, decimals=-1)


@pytest.mark.parametrize(
    "args,error,match",
    [
        (dict(d_model=500, num_heads=3), ValueError, "not divisible by num_heads = 3"),
        (dict(d_model=0, num_heads=1), ValueError, "d_model must be a positive int"),
        (dict(d_model=8, num_heads=-2), ValueError, "num_heads must be a positive int"),
        (dict(d_model=8.0, num_heads=2), TypeError, "d_model must be an int"),
        (dict(d_model=8, num_heads=True), TypeError, "num_heads must be an int"),
        (dict(d_model=8, num_heads=2, batch=0), ValueError, "batch must be a positive int"),
        (dict(d_model=8, num_heads=2, seq_len="3"), TypeError, "seq_len must be an int"),
    ],
)
def test_bad_sizes_get_clear_errors(args, error, match):
    with pytest.raises(error, match=match):
        validate_dims(**args)
    sizes = {"batch": 1, "seq_len": 1, **args}
    with pytest.raises(error, match=match):
        mha_macs(sizes["batch"], sizes["seq_len"], sizes["d_model"], sizes["num_heads"])


def test_parameter_count_errors():
    with pytest.raises(ValueError, match="not divisible"):
        mha_parameter_count(10, 4)
    with pytest.raises(TypeError, match="bias must be True or False, got int 1"):
        mha_parameter_count(8, 2, bias=1)
    with pytest.raises(TypeError, match="nn.Module"):
        count_parameters("not a module")


def test_dimension_report_valid():
    text = dimension_report(2, 10, 512, 8)
    assert "d_k = d_v = 64" in text
    assert "[2, 8, 10, 10]" in text and "[2, 10, 8, 64]" in text
    assert "1,050,624" in text and "21,176,320" in text


@pytest.mark.parametrize(
    "args,words",
    [
        ((2, 10, 500, 3), "not divisible"),
        ((2, 10, 0, 1), "d_model must be a positive int"),
        ((0, 10, 16, 2), "batch must be a positive int"),
        ((2, 10, 16.5, 2), "must be an int"),
        ((2, 10, 16, None), "must be an int"),
        ((64, 4096, 4096, 1), "Too large"),
    ],
)
def test_dimension_report_invalid_returns_a_message(args, words):
    text = dimension_report(*args)
    assert isinstance(text, str) and words in text and "Traceback" not in text


def test_dimension_report_leaves_the_random_stream_alone():
    torch.manual_seed(7)
    expected = torch.rand(3)
    torch.manual_seed(7)
    dimension_report(1, 4, 16, 2)
    assert torch.equal(torch.rand(3), expected)


# -- lesson 03's GPT-3 line and its common-confusions cell -------------------------------------

def test_gpt3_attention_layer_on_the_meta_device():
    """d_model 12288, 96 heads of 128 (seed 004 names the 96 heads)."""
    with torch.device("meta"):
        layer = MultiHeadAttention(12_288, 96)
    assert layer.d_k == 128
    assert tuple(layer.in_proj.weight.shape) == (36_864, 12_288)
    assert tuple(layer.out_proj.weight.shape) == (12_288, 12_288)
    assert count_parameters(layer) == mha_parameter_count(12_288, 96) == 604_028_928
    assert mha_parameter_count(12_288, 1) == mha_parameter_count(12_288, 12) == 604_028_928


def test_confusions_every_head_reads_the_whole_input_and_w_o_mixes_them():
    torch.manual_seed(0)
    mha = MultiHeadAttention(512, 8)
    x = torch.randn(1, 3, 512)
    changed = x.clone()
    changed[..., :64] += 1.0  # "head 0's slice" of the input
    with torch.no_grad():
        before = trace_shapes(mha, x)
        after = trace_shapes(mha, changed).tensors["Q_heads"][0]  # (h, T, dk)
    moved = (after - before.tensors["Q_heads"][0]).abs().amax(dim=(1, 2))
    assert (moved > 1e-3).all()  # every head's queries move, not only head 0's
    merge, output = before.tensors["merge"], before.tensors["output"]
    assert merge.shape == output.shape == x.shape  # T tokens in, T token vectors out
    assert not torch.allclose(merge, output)  # the output is not the concatenation
    assert len({mha_parameter_count(512, n) for n in (1, 8, 64)}) == 1
    assert len({mha_macs(1, 10, 512, n).total for n in (1, 8, 64)}) == 1
    assert mha_macs(1, 10, 512, 8).total == 10_588_160


# -- peak_allocated_bytes -------------------------------------------------------------------

def test_peak_allocated_bytes_counts_what_a_call_allocates():
    assert peak_allocated_bytes(lambda: torch.empty(1000, dtype=torch.float32)) == 4000
    assert peak_allocated_bytes(lambda: None) == 0

    def two_then_one():
        a = torch.empty(2_000)  # 8 kB
        b = torch.empty(2_000)  # 8 kB: peak 16 kB while both exist
        del a, b
        return torch.empty(1_000)

    assert peak_allocated_bytes(two_then_one) == 16_000


def test_peak_allocated_bytes_rejects_non_callables():
    with pytest.raises(TypeError, match="fn must be a function taking no arguments, got Tensor"):
        peak_allocated_bytes(torch.empty(3))


# -- Exercises 3.3 and 3.4: slips written as a learner would -----------------------------------

@pytest.mark.parametrize("fn,key", [
    (lambda d, h, bias=True: 4 * d * d + 4 * d, "bias_always_added"),
    (lambda d, h, bias=True: 4 * d * d + (3 * d if bias else 0), "forgot_output_bias"),
    (lambda d, h, bias=True: 4 * d * d + ((3 * h + 1) * d if bias else 0), "bias_per_head"),
])
def test_parameter_count_check_names_bias_slips(fn, key):
    assert lesson03.check_parameter_count(fn).mistake == key


@pytest.mark.parametrize("fn,key", [
    (lambda T, d, h: T * T * d / 2, "causal_half"),
    (lambda T, d, h: h * sum(range(1, T + 1)) * (d // h), "causal_triangle"),
    (lambda T, d, h: 2 * T * d * d + h * T * T * (d // h), "projections_added_qk"),
    (lambda T, d, h: 3 * T * d * d + T * T * d, "projections_added_qkv"),
    (lambda T, d, h: h * T**2, "one_mac_per_score"),
])
def test_score_macs_check_names_counting_slips(fn, key):
    assert lesson03.check_score_macs(fn).mistake == key


def test_the_trace_checks_each_step_against_the_modules_own_forward():
    """max_abs_diff reads the module's hook points: a module whose values are edited on their way
    (here doubled at hook_v) no longer matches the steps written out, and the trace says so."""
    from course_utils.attention.hooks import hooks

    torch.manual_seed(0)
    mha = MultiHeadAttention(16, 4).eval()
    x = torch.randn(2, 5, 16)
    assert trace_shapes(mha, x).max_abs_diff < 1e-6
    with hooks(mha, [("hook_v", lambda v, hook: 2 * v)]):
        assert trace_shapes(mha, x).max_abs_diff > 1e-2
