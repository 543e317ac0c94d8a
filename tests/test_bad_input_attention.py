"""Bad input to the attention modules: course_utils.attention.mha (MultiHeadAttention, from_torch/
to_torch, to_batched), gqa, mla, naive_mha, masks, hooks, shapes (trace_shapes, parameter_table),
sdpa_backends, kv_figure and native_output. Wrong types, shapes, dtypes and devices (meta, empty
batches, inference tensors), bad head counts and configs, lying lengths, and the controls beside
them that must still work.

Moved here from the QA batteries' files (issue 38 and later batteries), grouped by the code under test;
a `# -- battery N` line marks where each battery's cases begin. Helpers shared with other bad-input
files live in tests/bad_input_cases.py."""

from __future__ import annotations

import copy as copy_module
import math
import os
import pickle
import subprocess
import sys

import numpy as np
import pytest
import torch
from bad_input_cases import ROOT, Case, LyingLen, assert_named, raises_naming, refused, small_model
from torch import nn

from course_utils.attention import gqa as gqa_module
from course_utils.attention import hooks, kv_figure, naive_mha, native_output, sdpa_backends, shapes
from course_utils.attention import masks as M
from course_utils.attention import sdpa_backends as SB
from course_utils.attention import validation as va
from course_utils.attention.gqa import GroupedQueryAttention, PublishedConfig, kv_cache_bytes
from course_utils.attention.hooks import HookPoint, run_with_cache
from course_utils.attention.kv_figure import plot_kv_sharing
from course_utils.attention.masks import causal_mask, masked_softmax, padding_mask
from course_utils.attention.mha import (
    MultiHeadAttention,
    MultiHeadAttentionBase,
    scaled_dot_product_attention,
)
from course_utils.attention.mla import DEEPSEEK_V2, MLAConfig, MultiHeadLatentAttention
from course_utils.attention.naive_mha import (
    AttentionHead,
    NaiveMultiHeadAttention,
    naive_from_batched,
    stack_head_weights,
)
from course_utils.attention.shapes import (
    ShapeTrace,
    TraceStep,
    count_parameters,
    mha_macs,
    mha_parameter_count,
    trace_shapes,
    validate_dims,
)
from course_utils.attention.validation import ReadOnlyDict

# -- battery 5 ---------------------------------------------------------------------------------------

SM = small_model()


TOK = torch.tensor([[1, 2, 3, 4, 1, 2]])


MHA = MultiHeadAttention(8, 2)


X = torch.randn(2, 5, 8)


def _with_hooks(fwd_hooks):
    with hooks.hooks(SM, fwd_hooks):
        return SM(TOK)


ATTENTION_CASES = [
    Case("cost_table/dup heads", lambda: shapes.cost_table(1, 4, 8, [2, 2]), ValueError,
         ["head_counts", "distinct", "[2, 2]"]),
    Case("design_name/kv 0", lambda: kv_figure.design_name(2, 0), ValueError,
         ["num_kv_heads", "positive", "0"]),
    Case("design_name/kv>heads", lambda: kv_figure.design_name(2, 4), ValueError,
         ["num_kv_heads", "dividing num_heads=2", "4"]),
    Case("design_name/not div", lambda: kv_figure.design_name(8, 3), ValueError,
         ["num_kv_heads", "[1, 2, 4, 8]", "3"]),
    Case("precision_notes/bad dtype", lambda: sdpa_backends.precision_notes("cpu", "float32"), TypeError,
         ["dtype", "floating torch.dtype", "'float32'"]),
    Case("precision_notes/int dtype", lambda: sdpa_backends.precision_notes("cpu", torch.int64), TypeError,
         ["dtype", "floating", "torch.int64"]),
    Case("hook_points/None", lambda: hooks.hook_points(None), TypeError, ["module", "nn.Module", "NoneType"]),
    Case("hooks/not list", lambda: _with_hooks(5), TypeError,
         ["fwd_hooks", "list of (name, fn) pairs", "int"]),
    Case("hooks/not pair", lambda: _with_hooks(["blocks.0.attn.hook_z"]), TypeError,
         ["fwd_hooks[0]", "pair", "str"]),
    Case("hooks/where not str", lambda: _with_hooks([(3, lambda x, hook: x)]), TypeError,
         ["fwd_hooks[0][0]", "name (str)", "int"]),
    Case("run_with_cache/int name", lambda: hooks.run_with_cache(SM, TOK, names=5), TypeError,
         ["names", "list of names", "int"]),
    Case("run_with_cache/int in list", lambda: hooks.run_with_cache(SM, TOK, names=[5]), TypeError,
         ["names[0]", "str", "int"]),
    Case("naive/stack shape mismatch",
         lambda: naive_mha.stack_head_weights([torch.randn(4, 8)] * 2, [torch.randn(3, 8)] * 2,
                                              [torch.randn(4, 8)] * 2),
         ValueError, ["k_parts[0]", "(3, 8)", "same shape as q_parts[0], (4, 8)"]),
]


@pytest.mark.parametrize("case", ATTENTION_CASES, ids=lambda c: c.name)
def test_attention_bad_input_is_named(case):
    assert_named(case)


@pytest.mark.parametrize("where", ["all", "one"])
def test_a_nan_query_is_documented_and_shows_as_nan_with_the_weights(where):
    """The fused path returns zeros for a NaN query (PyTorch's kernel): the module docstring
    says so and names need_weights=True, which must show the NaN in that query's row only."""
    from course_utils.attention import mha

    assert "need_weights=True" in mha.__doc__ and "returns zeros" in mha.__doc__
    query = X * float("nan") if where == "all" else X.clone().index_put_(
        (torch.tensor([0]), torch.tensor([1]), torch.tensor([2])), torch.tensor(float("nan")))
    slow, _ = MHA(query, X, X, need_weights=True)
    rows = query.isnan().any(-1)  # (B, T)
    assert torch.equal(slow.isnan().all(-1), rows) and not slow[~rows].isnan().any()


def test_the_attention_controls_still_work():
    assert [kv_figure.design_name(8, g) for g in (8, 2, 1)] == ["MHA", "GQA", "MQA"]
    assert list(shapes.cost_table(1, 4, 8, [1, 2]).index) == [1, 2]
    assert sdpa_backends.precision_notes("cpu", torch.float32) == []
    out, cache = hooks.run_with_cache(SM, TOK, names=["blocks.0.attn.hook_z"])
    assert list(cache) == ["blocks.0.attn.hook_z"]
    assert torch.equal(_with_hooks([("blocks.0.attn.hook_z", lambda x, hook: x)])[0], out[0])


# -- battery 6 (attention_bench) ---------------------------------------------------------------------

def test_negative_query_offset_is_the_documented_shift():
    mask = causal_mask(3, query_offset=-1)
    assert not mask[0].any() and mask[1].tolist() == [True, False, False]
    weights = masked_softmax(torch.randn(3, 3), mask)
    assert weights[0].tolist() == [0.0, 0.0, 0.0] and torch.allclose(weights[1:].sum(-1), torch.ones(2))
    with pytest.raises(ValueError, match="query_offset"):
        causal_mask(3, query_offset=-3)


def test_kv_cache_bytes_is_exact_for_numpy_ints():
    got = kv_cache_bytes(np.int64(2**40), np.int64(2**30), 1, 1, 1)
    assert type(got) is int and got == 2 * 2**40 * 2**30 * 2
    config = PublishedConfig("x", np.int64(2), 4, 2, 64, "s")
    assert type(config.num_layers) is int
    got = kv_cache_bytes(config.num_layers, 1, config.num_kv_heads, config.d_head, 10)
    assert got == 2 * 2 * 2 * 64 * 10 * 2


# -- battery 7 (a) -----------------------------------------------------------------------------------

MHA_b7a = MultiHeadAttention(8, 2)


def test_masks_still_go_where_asked():
    assert causal_mask(3, device="meta").shape == (3, 3)
    assert padding_mask([1, 2], device="meta").is_meta  # the lengths are read on their own device
    assert padding_mask([1, 2], 3, device="cpu").tolist() == [[True, False, False], [True, True, False]]


def test_project_qkv_still_projects():
    x, c = torch.randn(1, 3, 8), torch.randn(1, 5, 8)
    q, k, v = MHA_b7a.project_qkv(x, c, c)
    assert q.shape == (1, 2, 3, 4) and k.shape == v.shape == (1, 2, 5, 4)
    q, k, v = MHA_b7a.project_qkv(x, x, x)  # self-attention: the fused matmul, same numbers as forward's
    out = MHA_b7a.out_proj(MHA_b7a.merge_heads(torch.softmax(q @ k.transpose(-2, -1) / 2.0, -1) @ v))
    assert torch.allclose(out, MHA_b7a(x)[0], atol=1e-6)


def test_stacked_parts_and_flags_still_work():
    parts = [torch.randn(4, 8), torch.randn(4, 8)]
    assert stack_head_weights(parts, parts, parts).shape == (24, 8)
    assert stack_head_weights(torch.stack(parts), torch.stack(parts), torch.stack(parts)).shape == (24, 8)
    trace = trace_shapes(MHA_b7a, torch.ones(1, 3, 8), keep_tensors=False)
    assert not trace.tensors and "code" not in trace.format(code=False).splitlines()[0]


@pytest.mark.filterwarnings("error::RuntimeWarning")  # an int64 overflow warns: fail on it
def test_numpy_sizes_give_exact_counts():
    """Rows 39, 40: NumPy int64 sizes used to wrap (mha_macs gave all zeros)."""
    big = (2**20, 2**20, 2**12, 1)
    assert mha_macs(*map(np.int64, big)) == mha_macs(*big)
    assert mha_macs(*map(np.int64, big)).scores == 2**20 * 2**20 * 2**20 * 2**12
    assert mha_parameter_count(np.int64(2**32), 1) == mha_parameter_count(2**32, 1) == 4 * 2**64 + 4 * 2**32
    assert type(validate_dims(np.int64(8), np.int64(2))) is int


# -- battery 8 ---------------------------------------------------------------------------------------

def test_attention_modules_built_from_numpy_ints_run():
    """Battery 8: MultiHeadAttention(np.int64(8), np.int64(2)) and GroupedQueryAttention(8, 4,
    np.int64(2)) were built, then failed inside torch's split in forward."""
    import numpy as np

    from course_utils.attention.gqa import GroupedQueryAttention
    from course_utils.attention.mha import MultiHeadAttention

    x = torch.randn(1, 3, 8)
    mha = MultiHeadAttention(np.int64(8), np.int64(2))
    gqa = GroupedQueryAttention(8, 4, np.int64(2))
    assert type(mha.d_model) is int and type(gqa.num_kv_heads) is int
    outputs = [m(x) for m in (mha, gqa)]
    assert all((out[0] if isinstance(out, tuple) else out).shape == (1, 3, 8) for out in outputs)


# -- battery 9 ---------------------------------------------------------------------------------------

def test_multi_head_attention_with_inf_input_is_documented_not_refused():
    """The check would cost a pass over the data every forward (10% at lesson 04's sizes, and a
    GPU wait), so forward leaves it to check_finite; its docstring says so, and check_finite names
    the input."""
    assert "check_finite" in MultiHeadAttention.forward.__doc__
    x = torch.full((1, 2, 8), math.inf)
    with pytest.raises(ValueError, match=r"query must hold finite numbers, got inf at index \(0, 0, 0\)"):
        va.check_finite(x, "query")


FAST = torch.randn(2, 2, 5, 4)


FAST_ATTENTION = [
    ("list q", ([1], [1], [1], None, False), TypeError, ["q must be a torch.Tensor", "got list"]),
    ("int causal_only", (FAST, FAST, FAST, None, 1), TypeError, ["causal_only", "True or False", "int 1"]),
    ("mask of other Tq, Tk", (FAST, FAST, FAST, torch.ones(3, 3, dtype=torch.bool), False), ValueError,
     ["allowed of shape (3, 3)", "(2, 2, 5, 5)"]),
    ("k of other dk", (FAST, torch.randn(2, 2, 5, 3), FAST, None, False), ValueError,
     ["k must be (B=2, g=2, Tk, dk=4)", "got (2, 2, 5, 3)"]),
]


@pytest.mark.parametrize("args, error, words", [c[1:] for c in FAST_ATTENTION],
                         ids=[c[0] for c in FAST_ATTENTION])
def test_fast_attention_checks_its_inputs_by_name(args, error, words):
    with pytest.raises(error) as refused:
        MultiHeadAttention(8, 2).fast_attention(*args)
    assert all(w in str(refused.value) for w in words), str(refused.value)


def test_fast_attention_still_matches_the_step_by_step_heads():
    m = MultiHeadAttention(8, 2)
    causal = torch.ones(5, 5, dtype=torch.bool).tril()[None, None]
    fused = m.fast_attention(FAST, FAST, FAST, causal.expand(2, 2, 5, 5), False)
    by_steps = torch.softmax((FAST @ FAST.transpose(-2, -1) / 2).masked_fill(~causal, -math.inf), -1) @ FAST
    assert torch.allclose(fused, by_steps, atol=1e-5)


# -- battery 10 --------------------------------------------------------------------------------------

def test_small_modules_still_build():
    assert MultiHeadLatentAttention(16, 2, 4, 4, 2).w_uk.weight.shape == (8, 4)
    assert AttentionHead(8, 4).w_q.weight.shape == (4, 8)
    assert len(NaiveMultiHeadAttention(8, 2).heads) == 2


# -- 5. MLAConfig is checked as its twin PublishedConfig is -------------------------------------
CONFIGS = [
    ("MLAConfig name None", lambda: MLAConfig(None, 60, 128, 128, 512, 64, "s"), TypeError,
     ["MLAConfig.name", "str", "NoneType None"]),
    ("MLAConfig source int", lambda: MLAConfig("n", 60, 128, 128, 512, 64, 5), TypeError,
     ["MLAConfig.source", "str", "int 5"]),
    ("MLAConfig num_layers -1", lambda: MLAConfig("n", -1, 128, 128, 512, 64, "s"), ValueError,
     ["num_layers", "positive int", "-1"]),
    ("MLAConfig d_head str", lambda: MLAConfig("n", 60, 128, "3", 512, 64, "s"), TypeError,
     ["d_head", "int", "str '3'"]),
    ("MLAConfig d_rope -2", lambda: MLAConfig("n", 60, 128, 128, 512, -2, "s"), ValueError,
     ["d_rope", ">= 0", "-2"]),
    ("PublishedConfig name None", lambda: PublishedConfig(None, 32, 32, 8, 128, "s"), TypeError,
     ["PublishedConfig.name", "str", "NoneType None"]),
]


@pytest.mark.parametrize("call, error, words", [c[1:] for c in CONFIGS], ids=[c[0] for c in CONFIGS])
def test_published_configs_check_their_fields(call, error, words):
    refused(call, error, words)


def test_the_released_mla_config_still_builds():
    import numpy as np

    assert DEEPSEEK_V2.d_latent == 512
    config = MLAConfig("n", np.int64(2), 4, 8, 16, 0, "s")
    assert type(config.num_layers) is int and config.d_rope == 0


def test_plot_kv_sharing_refuses_a_repeated_design():
    """kv_heads=[1, 1] drew the same panel twice."""
    refused(lambda: plot_kv_sharing(8, [1, 1]), ValueError, ["kv_heads", "distinct", "repeats [1]"])


# -- battery 11 --------------------------------------------------------------------------------------

def test_a_module_taking_tensor_and_hook_is_still_a_hook():
    from course_utils.attention.hooks import HookPoint

    class Double(torch.nn.Module):
        def forward(self, x, hook):
            return 2 * x

    point = HookPoint()
    point.add_hook(Double())
    x = torch.ones(1, 2, 3, 4)
    assert torch.equal(point(x), 2 * x)


def test_masked_softmax_still_computes_shapes_on_meta():
    from course_utils.attention.masks import causal_mask, masked_softmax

    weights = masked_softmax(torch.zeros(2, 3, 3, device="meta"), causal_mask(3).to("meta"))
    assert weights.shape == (2, 3, 3) and weights.is_meta
    on_cpu = masked_softmax(torch.zeros(2, 3, 3), torch.tensor(True))  # a 0-D mask broadcasts from the CPU
    assert torch.allclose(on_cpu.sum(-1), torch.ones(2, 3))


# -- the NaN policy of the attention modules is written down, and holds ---------------------------
def _nan_cases():
    from course_utils.attention import mla, naive_mha
    from course_utils.attention.mha import MultiHeadAttention

    torch.manual_seed(0)
    x = torch.randn(1, 4, 8)
    x[0, 1, 0] = float("nan")
    return [
        ("MultiHeadAttention", MultiHeadAttention.__doc__,
         lambda: MultiHeadAttention(8, 2)(x, x, x, need_weights=True)[0]),
        ("naive_mha", naive_mha.__doc__, lambda: naive_mha.NaiveMultiHeadAttention(8, 2)(x)),
        ("mla", mla.__doc__, lambda: mla.MultiHeadLatentAttention(8, 2, 4, 4, 2)(x)),
        ("rope", mla.__doc__, lambda: mla.rope(x, torch.arange(4))),
    ]


@pytest.mark.parametrize("label, doc, run", _nan_cases(), ids=[c[0] for c in _nan_cases()])
def test_nan_in_is_documented_as_propagating_and_does(label, doc, run):
    assert "Non-finite inputs" in doc and "propagates to NaN" in doc, f"{label}: no NaN policy written"
    assert bool(run().isnan().any()), f"{label}: a NaN in the input gave no NaN out, as its docstring says"


# -- battery 13 --------------------------------------------------------------------------------------

# -- b13 precision_notes('cuda:9') -> note: documented (the device is only parsed); 'meta' is
# refused since battery 17 (fix47p) -----------------------------------------------------------------
def test_precision_notes_only_parses_the_device(monkeypatch):
    from course_utils.attention import sdpa_backends as SB

    assert "only parsed" in SB.precision_notes.__doc__
    monkeypatch.setattr(torch, "get_float32_matmul_precision", lambda: "high")
    assert SB.precision_notes("cuda:9", torch.float32)  # any CUDA device gets the note, GPU or none
    assert SB.precision_notes("cpu", torch.float32) == []


# -- b13 obscure: check_config_fields(texts=None / config='x') raised raw attribute errors ---------
def _config_cases():
    from course_utils.attention import validation as V
    from course_utils.attention.mla import MLAConfig

    config = MLAConfig("tiny", 1, 2, 4, 8, 2, "a test")
    return [
        Case("config str", lambda: V.check_config_fields("x", ("name",), {}), TypeError,
             ["config must be a config dataclass", "str 'x'"]),
        Case("texts None", lambda: V.check_config_fields(config, None, {}), TypeError,
             ["texts must be a tuple", "NoneType"]),
        Case("texts str", lambda: V.check_config_fields(config, "name", {}), TypeError,
             ["texts must be a tuple", "str 'name'"]),
        Case("unknown field", lambda: V.check_config_fields(config, ("nope",), {}), ValueError,
             ["MLAConfig has no field 'nope'"]),
    ]


@pytest.mark.parametrize("case", _config_cases(), ids=lambda c: c.name)
def test_check_config_fields_names_its_own_arguments(case):
    assert_named(case)


# -- b13: NaN/inf and 1e38 in the model's float streams: documented (they spread, unchecked) --------
def test_model_streams_document_that_non_finite_values_spread():
    from course_utils.attention import mha
    from course_utils.model import transformer as TF

    assert "Non-finite values" in TF.__doc__ and "1e38" in TF.__doc__ and "1e38" in mha.__doc__
    model = TF.TinyTransformer(TF.ModelConfig(vocab_size=10, max_len=8, d_model=8, num_heads=2, num_layers=1,
                                              mlp=True))
    out, _ = model.run_blocks(torch.full((1, 3, 8), float("nan")))
    assert out.isnan().all()  # as documented: no refusal, NaN out
    mlp = TF.MLP(8, 16)
    assert mlp(torch.full((1, 2, 8), float("nan"))).isnan().all()


# -- battery 14 (fix44a) -----------------------------------------------------------------------------

@pytest.mark.parametrize("symbolic", [(), ("B", "T")])
def test_trace_step_refuses_symbolic_names_that_do_not_match_its_shape(symbolic: tuple) -> None:
    with pytest.raises(ValueError, match=r"TraceStep\.symbolic must name each of the 1 dims"):
        TraceStep("x", "x", symbolic, (2,), 0, True)


# -- battery 15 (fix45a) -----------------------------------------------------------------------------

_raises = raises_naming


# -- 2. empty config names and sources -------------------------------------------------------------
@pytest.mark.parametrize(("make", "label"), [
    (lambda: PublishedConfig("", 32, 32, 8, 128, "s"), "PublishedConfig.name"),
    (lambda: PublishedConfig("n", 32, 32, 8, 128, "  "), "PublishedConfig.source"),
    (lambda: MLAConfig("", 60, 128, 128, 512, 64, "s"), "MLAConfig.name"),
    (lambda: MLAConfig("n", 60, 128, 128, 512, 64, ""), "MLAConfig.source"),
])
def test_configs_refuse_an_empty_name_or_source(make, label: str) -> None:
    _raises(ValueError, [label, "non-empty"], make)


def test_published_config_names_num_kv_heads_as_its_field() -> None:
    _raises(ValueError, ["PublishedConfig.num_kv_heads", "3"], lambda: PublishedConfig("n", 2, 32, 3, 8, "s"))


# -- battery 15 (fix45d) -----------------------------------------------------------------------------

# -- 1. from_torch: every nn.MultiheadAttention setting is carried over or refused ----------------
def test_from_torch_refuses_add_zero_attn_naming_it():
    torch_module = nn.MultiheadAttention(16, 2, batch_first=True, add_zero_attn=True)
    with pytest.raises(ValueError, match="add_zero_attn=True"):
        MultiHeadAttention.from_torch(torch_module)


@pytest.mark.parametrize("training", [False, True])
def test_from_torch_and_to_torch_keep_the_train_eval_mode(training):
    torch_module = nn.MultiheadAttention(16, 2, dropout=0.5, batch_first=True).train(training)
    ours = MultiHeadAttention.from_torch(torch_module)
    assert ours.training is training
    assert ours.to_torch().training is training


def test_from_torch_of_an_eval_module_with_dropout_computes_what_it_computes():
    torch.manual_seed(0)
    torch_module = nn.MultiheadAttention(16, 2, dropout=0.5, batch_first=True).eval()
    x = torch.randn(2, 5, 16)
    ours = MultiHeadAttention.from_torch(torch_module)
    torch.testing.assert_close(ours(x)[0], torch_module(x, x, x, need_weights=False)[0])


def test_from_torch_names_kdim_and_vdim_it_got():
    with pytest.raises(ValueError, match=r"kdim=8, vdim=8, embed_dim=16"):
        MultiHeadAttention.from_torch(nn.MultiheadAttention(16, 2, kdim=8, vdim=8, batch_first=True))


# -- 4. frame_to_text: decimals within MAX_DECIMALS -------------------------------------------------
@pytest.mark.parametrize("decimals", [16, 10**6])
def test_frame_to_text_refuses_decimals_beyond_max_decimals(decimals):
    import pandas as pd

    from course_utils.attention.shapes import frame_to_text
    with pytest.raises(ValueError, match=rf"decimals.*{decimals}"):
        frame_to_text(pd.DataFrame({"a": [1.5]}), decimals=decimals)
    assert frame_to_text(pd.DataFrame({"a": [1.5]}), decimals=15).split()[-1] == "1.500000000000000"


# -- 5. NaiveMultiHeadAttention.to_batched: a mix of biased and unbiased projections --------------
def _naive_with_mixed_biases(bias: bool):
    from course_utils.attention.naive_mha import NaiveMultiHeadAttention
    naive = NaiveMultiHeadAttention(8, 2, bias=bias)
    if bias:
        naive.heads[1].w_q.bias = None
    else:
        naive.heads[0].w_k.bias = nn.Parameter(torch.ones(4))
    return naive


def test_to_batched_names_the_heads_with_and_without_bias():
    with pytest.raises(ValueError, match=r"heads\[0\]\.w_q.*have a bias.*heads\[1\]\.w_q do not"):
        _naive_with_mixed_biases(True).to_batched()


def test_to_batched_does_not_drop_one_heads_bias():
    with pytest.raises(ValueError, match=r"heads\[0\]\.w_k have a bias.*out_proj do not"):
        _naive_with_mixed_biases(False).to_batched()


# -- NaiveMultiHeadAttention.forward after its heads were changed: the check to_batched has --------
def _naive_changed(change):
    naive = NaiveMultiHeadAttention(8, 2)
    change(naive)
    return naive


def _replace_w_v(naive):
    naive.heads[1].w_v = nn.Linear(8, 3)


@pytest.mark.parametrize("change, error, words", [
    (lambda n: n.heads.append(AttentionHead(8, 4)), ValueError,
     ["heads", "num_heads=2", "got 3", "deleted or added after construction"]),
    (lambda n: n.heads.__delitem__(1), ValueError, ["heads", "num_heads=2", "got 1", "deleted or added"]),
    (lambda n: setattr(n, "heads", nn.ModuleList([AttentionHead(8, 4)])), ValueError,
     ["heads", "num_heads=2", "got 1"]),
    (lambda n: n.heads.__setitem__(0, AttentionHead(8, 5)), ValueError,
     ["heads[0].w_q", "shape (4, 8)", "got shape (5, 8)", "forward reads it"]),
    (_replace_w_v, ValueError, ["heads[1].w_v", "nn.Linear(8, 4)", "got shape (3, 8)"]),
    (lambda n: n.heads.__setitem__(1, nn.Linear(8, 4)), TypeError,
     ["heads[1]", "AttentionHead(8, 4)", "Linear"]),
    (lambda n: setattr(n, "out_proj", nn.Linear(12, 8)), ValueError, ["out_proj", "shape (8, 8)", "(8, 12)"]),
], ids=["head appended", "head deleted", "heads replaced", "narrow head", "w_v replaced", "head not a head",
       "out_proj"])
def test_naive_forward_names_heads_changed_since_construction(change, error, words):
    """forward reads the heads as to_batched copies them: a change is named before the maths, not
    met as torch's "mat1 and mat2 shapes cannot be multiplied" (and to_batched says the same)."""
    naive = _naive_changed(change)
    message = raises_naming(error, words, lambda: naive(torch.randn(1, 3, 8)))
    assert "mat1" not in message
    raises_naming(error, words[:2], naive.to_batched)


def test_naive_forward_with_heads_as_built_still_matches_to_batched():
    torch.manual_seed(0)
    naive, x = NaiveMultiHeadAttention(8, 2).eval(), torch.randn(2, 3, 8)
    out, _ = naive.to_batched().eval()(x)
    torch.testing.assert_close(naive(x), out)


# -- 2. a query whose every score is NaN: what each path gives, and what the docstrings say ------
@pytest.mark.parametrize("num_keys", [3, 40])
def test_every_key_nan_gives_nan_on_the_step_by_step_path_and_as_documented_on_the_fast_one(num_keys):
    import course_utils.attention.mha as mha
    assert "every key it may attend to NaN" in mha.__doc__  # the rule below, stated
    torch.manual_seed(0)
    module = MultiHeadAttention(32, 2, bias=False).eval()
    x, keys = torch.randn(1, 2, 32), torch.full((1, num_keys, 32), float("nan"))
    values = torch.randn(1, num_keys, 32)
    with torch.no_grad():
        slow = module(x, keys, values, need_weights=True)[0]
        fast = module(x, keys, values)[0]
    assert slow.isnan().all()
    # PyTorch's kernel: zero heads (output = 0 without bias) over few keys, NaN over more (torch
    # 2.13 on CPU switches at 16 keys; the module docstring says so): one or the other, never a mix
    assert bool(fast.isnan().all()) or not bool(fast.abs().max())


def test_every_key_masked_gives_zeros_on_both_paths():
    torch.manual_seed(0)
    module = MultiHeadAttention(32, 2, bias=False).eval()
    x, blocked = torch.randn(1, 3, 32), torch.zeros(3, 3, dtype=torch.bool)
    with torch.no_grad():
        for need_weights in (False, True):
            assert module(x, mask=blocked, need_weights=need_weights)[0].abs().max() == 0


# -- battery 16 (fix46p) -----------------------------------------------------------------------------

# -- an empty batch is refused before a reshape or a reduction --------------------------------
def _mla():
    torch.manual_seed(0)
    return MultiHeadLatentAttention(16, 4, 4, 8, 4)


@pytest.mark.parametrize("call, name", [
    (lambda: _mla()(torch.randn(0, 5, 16)), "x"),
    (lambda: _mla().decode(torch.randn(0, 1, 16)), "x_new"),
    (lambda: trace_shapes(MultiHeadAttention(16, 4), torch.randn(0, 5, 16)), "query"),
    (lambda: trace_shapes(MultiHeadAttention(16, 4), torch.randn(2, 5, 16), torch.randn(2, 0, 16)),
     "key_value"),
])
def test_an_empty_batch_or_sequence_is_refused_by_name(call, name):
    with pytest.raises(ValueError, match=rf"^{name} must hold at least one .*got shape \("):
        call()


# -- a names test must answer True or False ---------------------------------------------------
@pytest.mark.parametrize("answer", ["yes", 1, None])
def test_a_names_test_answering_a_non_bool_is_refused(answer):
    mha = MultiHeadAttention(16, 4)
    with pytest.raises(TypeError, match=rf"^names \(a test on hook point names\).*'hook_q'.*"
                                        rf"must be True or False, got {type(answer).__name__}"):
        run_with_cache(mha, torch.randn(2, 5, 16), names=lambda name: answer)
    with pytest.raises(TypeError, match=r"^fwd_hooks\[0\]\[0\] \(a test"):
        with hooks.hooks(mha, [(lambda name: answer, lambda x, hook: None)]):
            pass
    assert not any(p.has_hooks for p in mha.modules() if hasattr(p, "has_hooks"))


def test_a_names_test_answering_a_bool_still_works():
    _, cache = run_with_cache(MultiHeadAttention(16, 4), torch.randn(2, 5, 16),
                              names=lambda name: name.endswith("hook_z"))
    assert list(cache) == ["hook_z"]


# -- MLAConfig.d_rope is even ------------------------------------------------------------------
def test_mla_config_refuses_an_odd_d_rope():
    with pytest.raises(ValueError, match=r"d_rope must be even.*got 63"):
        MLAConfig("x", 60, 128, 128, 512, 63, "src")
    MLAConfig("x", 60, 128, 128, 512, 0, "src")  # no RoPE key at all is still allowed


# -- documented instead of refused -------------------------------------------------------------
def test_gqa_docstring_states_the_fused_path_all_nan_exception():
    doc = " ".join(gqa_module.__doc__.split())
    assert "every* score of a query's head is NaN" in doc and "need_weights=False" in doc
    x, nan_keys = torch.randn(2, 5, 16), torch.full((2, 5, 16), float("nan"))
    out, _ = GroupedQueryAttention(16, 4, 2).eval()(x, nan_keys, x, need_weights=True)
    assert torch.isnan(out).all()  # the step-by-step path gives NaN, as the docstring says


def test_from_multi_head_documents_and_keeps_the_unused_generator():
    doc = " ".join(GroupedQueryAttention.from_multi_head.__doc__.split())
    assert '``generator`` (None or a ``torch.Generator``) is read by ``"random"`` only' in doc
    generator = torch.Generator().manual_seed(0)
    state = generator.get_state()
    GroupedQueryAttention.from_multi_head(MultiHeadAttention(16, 4), 2, "mean", generator=generator)
    assert torch.equal(generator.get_state(), state)  # untouched, as documented


# -- battery 17 (fix47p) -----------------------------------------------------------------------------

# -- S1: meta q/k/v and a meta device are refused where nothing computes on them ------------------
QKV = torch.randn(2, 4, 5, 4)


@pytest.mark.parametrize("label", ["math", "flash"])
@pytest.mark.parametrize("which", ["q", "k", "v"])
def test_backend_rejection_reason_refuses_meta_tensors(label, which):
    tensors = {"q": QKV, "k": QKV, "v": QKV, which: QKV.to("meta")}
    refused(lambda: SB.backend_rejection_reason(label, **tensors), ValueError,
            [f"{which} is on the meta device", "(2, 4, 5, 4)"])


@pytest.mark.parametrize("device", ["meta", torch.device("meta")], ids=["str", "torch.device"])
def test_precision_notes_refuses_meta(device):
    refused(lambda: SB.precision_notes(device, torch.float32), ValueError, ["device", "'meta'"])


def test_precision_notes_still_only_parses_other_devices(monkeypatch):
    monkeypatch.setattr(torch, "get_float32_matmul_precision", lambda: "high")
    assert SB.precision_notes("cuda:9", torch.float32)  # a note about a GPU needs no GPU here
    assert SB.precision_notes("cpu", torch.float32) == []


# -- S1 documented: the masks and merge_heads keep meta, the shape computation of a meta layer -----
@pytest.mark.parametrize("function", [M.causal_mask, M.padding_mask, M.to_torch_attn_mask,
                                      M.to_torch_key_padding_mask, MultiHeadAttentionBase],
                         ids=lambda f: f.__name__)
def test_meta_kept_on_purpose_is_documented(function):
    """merge_heads is documented in its class: lesson 04 prints merge_heads' own source."""
    doc = " ".join(function.__doc__.split())
    assert "meta" in doc and "on purpose" in doc, doc
    if function is MultiHeadAttentionBase:
        assert "merge_heads" in doc


@pytest.mark.parametrize("layer", ["mha", "gqa"])
def test_a_layer_built_on_meta_still_computes_shapes(layer):
    with torch.device("meta"):
        module = MultiHeadAttention(16, 4) if layer == "mha" else GroupedQueryAttention(16, 4, 2)
    x = torch.empty(2, 5, 16, device="meta")
    assert module(x, is_causal=True)[0].shape == (2, 5, 16)
    out = module(x, key_padding_mask=M.padding_mask([5, 3], device="meta"))[0]
    assert out.shape == (2, 5, 16) and out.is_meta
    with torch.device("meta"):
        theirs = torch.nn.MultiheadAttention(16, 4, batch_first=True)
    out = theirs(x, x, x, attn_mask=M.to_torch_attn_mask(M.causal_mask(5, device="meta")),
                 key_padding_mask=M.to_torch_key_padding_mask(M.padding_mask([5, 3], device="meta")))[0]
    assert out.shape == (2, 5, 16)


def test_a_meta_mask_for_inputs_with_values_is_still_refused():
    refused(lambda: MultiHeadAttention(16, 4)(torch.randn(1, 3, 16), mask=M.causal_mask(3, device="meta")),
            ValueError, ["mask", "meta"])


# -- battery 18 (fix48p) -----------------------------------------------------------------------------

def _trace() -> ShapeTrace:
    return trace_shapes(MultiHeadAttention(16, 2), torch.randn(2, 5, 16))


# -- g06 / g07: a ShapeTrace checked once stays valid --------------------------------------
MUTATIONS = [
    pytest.param(lambda t: t.steps.append("junk"), id="steps.append"),
    pytest.param(lambda t: setattr(t, "steps", None), id="steps=None"),
    pytest.param(lambda t: t.sizes.__setitem__("B", -1), id="sizes[B]=-1"),
    pytest.param(lambda t: t.tensors.__setitem__("input", torch.zeros(1)), id="tensors[input]"),
    pytest.param(lambda t: setattr(t, "max_abs_diff", -5.0), id="max_abs_diff=-5"),
]


@pytest.mark.parametrize("mutate", MUTATIONS)
def test_shape_trace_cannot_be_changed_after_its_check(mutate):
    trace = _trace()
    before = trace.format()
    with pytest.raises((TypeError, AttributeError)):
        mutate(trace)
    assert trace.format() == before and list(trace.to_frame()["step"]) == trace.names


def test_shape_trace_keeps_copies_of_what_it_was_given():
    trace = _trace()
    steps, sizes, tensors = list(trace.steps), dict(trace.sizes), dict(trace.tensors)
    copy = ShapeTrace(sizes, steps, tensors, trace.max_abs_diff)
    steps.append("junk")
    sizes["B"] = -1
    tensors.clear()
    assert isinstance(copy.steps, tuple) and isinstance(copy.sizes, ReadOnlyDict)
    assert copy.format() == trace.format() and set(copy.tensors) == set(trace.tensors)


def _step(name: str = "input", shape: tuple[int, ...] = (2, 5, 16)) -> TraceStep:
    return TraceStep(name, "x", ("B", "T", "d"), shape, 0, True)


SIZES = {"B": 2, "T": 5, "d": 16}


INCONSISTENT = [
    pytest.param(lambda: ShapeTrace(SIZES, [_step(shape=(3, 5, 16))]), ["ShapeTrace.steps[0]", "(3, 5, 16)",
                                                                        "(2, 5, 16)"], id="step shape"),
    pytest.param(lambda: ShapeTrace({"B": 2, "T": 5}, [_step()]), ["ShapeTrace.steps[0]", "'d'"],
                 id="unknown symbol"),
    pytest.param(lambda: ShapeTrace(SIZES, [_step(), _step()]), ["ShapeTrace.steps[1]", "'input'"],
                 id="repeated name"),
    pytest.param(lambda: ShapeTrace(SIZES, [_step()], {"input": torch.zeros(2, 5)}),
                 ["ShapeTrace.tensors['input']", "(2, 5)"], id="tensor shape"),
    pytest.param(lambda: ShapeTrace(SIZES, [_step()], {"other": torch.zeros(2, 5, 16)}),
                 ["ShapeTrace.tensors['other']", "no step"], id="tensor of no step"),
]


@pytest.mark.parametrize(("build", "words"), INCONSISTENT)
def test_shape_trace_fields_must_agree(build, words):
    with pytest.raises(ValueError) as err:
        build()
    for word in words:
        assert word in str(err.value)


# -- g28: the mask converters take the ranks nn.MultiheadAttention takes ---------------------
def _bool(*shape: int) -> torch.Tensor:
    return torch.ones(shape, dtype=torch.bool)


@pytest.mark.parametrize(("convert", "name", "shape"), [
    pytest.param(M.to_torch_attn_mask, "mask", (), id="attn 0-D"),
    pytest.param(M.to_torch_attn_mask, "mask", (4,), id="attn 1-D"),
    pytest.param(M.to_torch_attn_mask, "mask", (2, 2, 4, 4), id="attn 4-D"),
    pytest.param(M.to_torch_attn_mask, "mask", (2, 2, 2, 2, 2), id="attn 5-D"),
    pytest.param(M.to_torch_key_padding_mask, "key_padding_mask", (4,), id="padding 1-D"),
    pytest.param(M.to_torch_key_padding_mask, "key_padding_mask", (2, 1, 4), id="padding 3-D"),
    pytest.param(M.to_torch_key_padding_mask, "key_padding_mask", (2, 1, 1, 4), id="padding 4-D"),
])
def test_torch_mask_converters_refuse_other_ranks(convert, name, shape):
    with pytest.raises(ValueError) as err:
        convert(_bool(*shape))
    message = str(err.value)
    assert message.startswith(f"{name} must be 2-D") and f"{len(shape)}-D shape {shape}" in message


def test_torch_attn_mask_takes_a_per_head_mask():
    theirs = nn.MultiheadAttention(8, 2, batch_first=True)
    allowed = M.causal_mask(5).expand(2 * 2, 5, 5)  # (B*h, Tq, Tk)
    x = torch.randn(2, 5, 8)
    out = theirs(x, x, x, attn_mask=M.to_torch_attn_mask(allowed))[0]
    ref = theirs(x, x, x, attn_mask=M.to_torch_attn_mask(M.causal_mask(5)))[0]
    torch.testing.assert_close(out, ref)


# -- g29: copying a MultiHeadAttention whose layers were changed after construction ----------
def _set(name: str, value: object):
    def change(module: MultiHeadAttention) -> None:
        owner, _, attr = name.rpartition(".")
        setattr(module.get_submodule(owner) if owner else module, attr, value)
    return change


CHANGES = [
    pytest.param(_set("in_proj", nn.Linear(16, 40)), ValueError,
                 ["MultiHeadAttention.in_proj.weight", "(40, 16)"], id="in_proj 40 wide"),
    pytest.param(_set("out_proj", nn.Linear(16, 8)), ValueError,
                 ["MultiHeadAttention.out_proj.weight", "(8, 16)"], id="out_proj 8 wide"),
    pytest.param(_set("in_proj", nn.Identity()), TypeError, ["MultiHeadAttention.in_proj", "Identity"],
                 id="in_proj not Linear"),
    pytest.param(_set("out_proj.bias", None), ValueError, ["MultiHeadAttention.out_proj", "bias=None"],
                 id="out_proj bias dropped"),
    pytest.param(_set("out_proj", nn.Linear(16, 16).double()), TypeError,
                 ["MultiHeadAttention.out_proj.weight", "torch.float64"], id="out_proj float64"),
    pytest.param(_set("num_heads", 3), ValueError, ["MultiHeadAttention.num_heads", "3"], id="num_heads 3"),
    pytest.param(_set("d_model", 8), ValueError, ["MultiHeadAttention.d_model", "d_model=8"], id="d_model 8"),
    pytest.param(_set("dropout", 2.0), ValueError, ["MultiHeadAttention.dropout", "2.0"], id="dropout 2"),
]


COPIES = [
    pytest.param(lambda m: m.to_torch(), id="to_torch"),
    pytest.param(lambda m: GroupedQueryAttention.from_multi_head(m, 2), id="from_multi_head"),
    pytest.param(lambda m: naive_from_batched(m), id="naive_from_batched"),
]


@pytest.mark.parametrize("copy", COPIES)
@pytest.mark.parametrize(("change", "error", "words"), CHANGES)
def test_copies_name_the_layer_changed_after_construction(change, error, words, copy):
    module = MultiHeadAttention(16, 2)
    change(module)
    with pytest.raises(error) as err:
        copy(module)
    for word in words:
        assert word in str(err.value)


@pytest.mark.parametrize("copy", COPIES)
def test_copies_of_an_unchanged_module_still_work(copy):
    assert copy(MultiHeadAttention(16, 2, bias=False).double()) is not None


@pytest.mark.parametrize("copy", [
    pytest.param(lambda t: pickle.loads(pickle.dumps(t)), id="pickle"),
    pytest.param(copy_module.deepcopy, id="deepcopy"),
])
def test_a_frozen_trace_pickles_and_deep_copies(copy):
    trace = _trace()
    again = copy(trace)
    assert all(isinstance(m, ReadOnlyDict) for m in (again.sizes, again.tensors))
    assert again.format() == trace.format() and again.sizes == trace.sizes
    assert all(torch.equal(again.tensors[name], trace.tensors[name]) for name in trace.tensors)


# -- battery 19 (fix49p) -----------------------------------------------------------------------------

# -- g02: a hook point passes tensors only --------------------------------------------------------
@pytest.mark.parametrize("x", [[1.0], "text", 3.0, None], ids=["list", "str", "float", "None"])
def test_hook_point_refuses_a_non_tensor(x):
    point = HookPoint()
    point.name = "blocks.0.attn.hook_q"
    with pytest.raises(TypeError) as info:
        point(x)
    message = str(info.value)
    assert "x " in message and "blocks.0.attn.hook_q" in message and type(x).__name__ in message
    ids = torch.arange(3)  # any tensor still passes, unchanged
    assert point(ids) is ids


# -- g28: a TraceStep keeps its shape (and symbols) as tuples -------------------------------------
@pytest.mark.parametrize("symbolic, shape", [(["B", "T", "d"], [2, 5, 8]), (("B", "T", "d"), [2, 5, 8]),
                                             (["B", "T", "d"], (2, 5, 8))], ids=["both lists", "shape list",
                                                                                "symbolic list"])
def test_trace_step_keeps_tuples(symbolic, shape):
    step = TraceStep("q", "x @ W", symbolic, shape, 10, True)
    assert isinstance(step.shape, tuple) and isinstance(step.symbolic, tuple)
    assert step.shape == tuple(shape) and step.symbolic == tuple(symbolic)
    with pytest.raises(AttributeError):
        step.shape.append(3)  # checked once, it stays as checked
    with pytest.raises(TypeError, match="TraceStep.shape"):
        TraceStep("q", "x @ W", ("B",), "2", 10, True)  # a str is still refused, not split


# -- g29: a MultiHeadAttentionBase subclass without its setup --------------------------------------
class _NoSetup(MultiHeadAttentionBase):
    pass


class _NoHooks(MultiHeadAttentionBase):
    def __init__(self) -> None:
        super().__init__()
        self.d_model, self.num_heads, self.num_kv_heads, self.d_k, self.dropout = 8, 2, 2, 4, 0.0
        self.out_proj = torch.nn.Linear(8, 8)

    def project_qkv(self, query, key, value):
        return MultiHeadAttention(8, 2).project_qkv(query, key, value)


class _NoProjection(MultiHeadAttentionBase):
    def __init__(self) -> None:
        super().__init__()
        self.d_model, self.num_heads, self.num_kv_heads, self.d_k, self.dropout = 8, 2, 2, 4, 0.0
        self.out_proj = torch.nn.Linear(8, 8)
        self._add_hook_points()


ALL_SETUP = ["d_model", "num_heads", "num_kv_heads", "d_k", "dropout", "out_proj", "project_qkv",
             "hook_q", "hook_k", "hook_v", "hook_pattern", "hook_z"]


HOOKS = ALL_SETUP[-5:]


@pytest.mark.parametrize("cls, missing", [(_NoSetup, ALL_SETUP),
                                          (_NoHooks, HOOKS),
                                          (_NoProjection, ["project_qkv"])],
                         ids=["nothing", "no hook points", "no project_qkv"])
def test_mha_base_subclass_names_what_its_setup_misses(cls, missing):
    with pytest.raises(TypeError) as info:
        cls()(torch.randn(2, 5, 8))
    message = str(info.value)
    assert cls.__name__ in message
    assert message.split("missing ")[1].split(".")[0].split(", ") == missing  # exactly those


def test_mha_base_subclass_with_its_setup_runs():
    layer = _NoHooks()
    layer._add_hook_points()
    out, _ = layer(torch.randn(2, 5, 8))
    assert out.shape == (2, 5, 8)


# -- battery 20 (fix50p) -----------------------------------------------------------------------------

# -- O2: run_with_cache on a module with no hook point is refused before it runs -----------------
@pytest.mark.parametrize("module", [torch.nn.Linear(2, 2), torch.nn.Sequential(torch.nn.Embedding(16, 2))],
                         ids=["Linear", "Sequential"])
def test_run_with_cache_refuses_a_module_without_hook_points(module):
    tokens = torch.randint(1, 16, (2, 6))
    raises_naming(ValueError, ["module", type(module).__name__, "hook point"],
                  lambda: run_with_cache(module, tokens))


def test_run_with_cache_still_records_a_course_layer():
    _, cache = run_with_cache(MultiHeadAttention(8, 2), torch.zeros(1, 3, 8))
    assert "hook_z" in cache


# -- battery 21 (fix51p) -----------------------------------------------------------------------------

# -- 5: a head width of 0 is refused by name (0 / sqrt(0) made every weight NaN) ------------------
@pytest.mark.parametrize("shape", [(1, 2, 3, 0), (3, 0)], ids=["4-D", "2-D"])
def test_sdpa_refuses_a_zero_head_width(shape):
    q = torch.randn(shape)
    v = torch.randn(*shape[:-1], 4)
    raises_naming(ValueError, ["q and k", "dk", "0", str(shape)],
                  lambda: scaled_dot_product_attention(q, q.clone(), v))


@pytest.mark.parametrize("make, name", [
    (lambda: MultiHeadAttention(0, 2), "d_model"),
    (lambda: GroupedQueryAttention(0, 2, 1), "d_model"),
    (lambda: MultiHeadLatentAttention(8, 2, 0, 4, 2), "d_head"),
    (lambda: AttentionHead(4, 0), "d_k"),
], ids=["mha", "gqa", "mla", "head"])
def test_attention_layers_refuse_zero_width_heads(make, name):
    raises_naming(ValueError, [name, "got 0"], make)


def test_sdpa_still_takes_a_value_width_of_zero():
    q = torch.randn(1, 3, 2)
    out, _ = scaled_dot_product_attention(q, q, torch.randn(1, 3, 0))
    assert out.shape == (1, 3, 0)


# -- battery 22 (fix52p) -----------------------------------------------------------------------------

# -- 12: the module type errors name the argument and what arrived ----------------------------------
@pytest.mark.parametrize("call", [naive_from_batched, MultiHeadAttention.from_torch, count_parameters],
                         ids=["naive_from_batched", "from_torch", "count_parameters"])
@pytest.mark.parametrize("bad", [None, 3, "x"], ids=["None", "int", "str"])
def test_module_type_errors_name_module(call, bad):
    raises_naming(TypeError, ["module must be", type(bad).__name__], lambda: call(bad))


@pytest.mark.parametrize(("call", "bad"), [
    (naive_from_batched, nn.Linear(4, 4)), (naive_from_batched, nn.MultiheadAttention(16, 4)),
    (naive_from_batched, GroupedQueryAttention(16, 4, 2)), (MultiHeadAttention.from_torch, nn.Linear(4, 4)),
    (MultiHeadAttention.from_torch, MultiHeadAttention(16, 4)),
], ids=["naive-linear", "naive-torch", "naive-gqa", "from_torch-linear", "from_torch-course"])
def test_module_type_errors_name_module_for_the_wrong_module(call, bad):
    raises_naming(TypeError, ["module must be", type(bad).__name__], lambda: call(bad))


# -- 15: native_stderr_captured used out of order is a RuntimeError naming the misuse --------------
def test_native_stderr_captured_refuses_entering_twice():
    block = native_output.native_stderr_captured()
    block.__enter__()
    try:
        raises_naming(RuntimeError, ["native_stderr_captured", "entered twice"], block.__enter__)
    finally:
        block.__exit__(None, None, None)  # descriptor 2 given back


@pytest.mark.parametrize("entered", [False, True], ids=["never-entered", "exited-already"])
def test_native_stderr_captured_refuses_exit_out_of_order(entered):
    block = native_output.native_stderr_captured()
    if entered:
        with block:
            pass
    word = "exited twice" if entered else "without being entered"
    raises_naming(RuntimeError, ["native_stderr_captured", word], lambda: block.__exit__(None, None, None))


def test_native_stderr_captured_still_captures():
    import os

    with native_output.native_stderr_captured() as printed:
        os.write(2, b"from C++\n")
    assert "from C++" in printed.text


# -- battery 23 (fix53w) -----------------------------------------------------------------------------

# -- O2: grouped_query_attention(q on meta, k/v/mask on cpu) blamed the mask -----------------------
def test_gqa_meta_q_names_q_k_v_not_mask() -> None:
    from course_utils.attention.gqa import grouped_query_attention
    from course_utils.attention.masks import causal_mask

    q = torch.randn(2, 4, 4, 2, device="meta")
    k = v = torch.randn(2, 2, 4, 2)
    message = raises_naming(ValueError, ["q meta", "k cpu", "v cpu"],
                            lambda: grouped_query_attention(q, k, v, mask=causal_mask(4)))
    assert "mask" not in message


# -- battery 24 (fix54a) -----------------------------------------------------------------------------

# -- O2: a module given as a names test was called with a str: torch's "linear(): argument 'input'" --
def _tiny_model():
    from course_utils.model.transformer import ModelConfig, TinyTransformer

    torch.manual_seed(0)
    return TinyTransformer(ModelConfig(vocab_size=8, d_model=16, num_heads=4, num_layers=1, max_len=8))


@pytest.mark.parametrize("route", ["run_with_cache", "method", "list", "hooks"])
def test_a_module_is_no_test_on_hook_names(route: str) -> None:
    from course_utils.attention.hooks import hooks, run_with_cache

    model, tokens, module = _tiny_model(), torch.zeros(1, 4, dtype=torch.long), torch.nn.Linear(2, 2)
    calls = {
        "run_with_cache": (lambda: run_with_cache(model, tokens, names=module), "names"),
        "method": (lambda: model.run_with_cache(tokens, names=module), "names"),
        "list": (lambda: run_with_cache(model, tokens, names=[module]), "names[0]"),
        "hooks": (lambda: hooks(model, [(module, lambda z, hook: z)]).__enter__(), "fwd_hooks[0][0]"),
    }
    call, name = calls[route]
    raises_naming(TypeError, [f"{name} must be", "Linear", "a module is callable"], call)
    assert "blocks.0.attn.hook_z" in model.run_with_cache(tokens, names=lambda n: n.endswith("hook_z"))[1]


# -- battery 26 (fix56) ------------------------------------------------------------------------------

def test_an_inference_tensor_is_named_when_the_module_tracks_gradients() -> None:
    from course_utils.attention.mha import MultiHeadAttention

    module = MultiHeadAttention(16, 4)
    with torch.inference_mode():
        x = torch.randn(2, 4, 16)
    raises_naming(ValueError, ["query", "torch.inference_mode()", "torch.no_grad()", "query.clone()"],
                  lambda: module(x))
    with torch.no_grad():
        assert module(x)[0].shape == (2, 4, 16)  # where it can run, it runs


def test_backend_rejection_reason_refuses_shapes_no_attention_takes() -> None:
    from course_utils.attention.sdpa_backends import backend_rejection_reason

    x = torch.randn(2, 2, 4, 8)
    raises_naming(ValueError, ["q and k", "same last dim", "(2, 2, 4, 0)"],
                  lambda: backend_rejection_reason("math", x[..., :0], x, x))
    raises_naming(ValueError, ["k and v", "same length Tk"],
                  lambda: backend_rejection_reason("math", x, x, x[:, :, :3]))


# -- battery 27 (fix57) ------------------------------------------------------------------------------

def test_the_shape_trace_names_a_folder_deleted_after_torch_loaded() -> None:
    code = ("import os, tempfile\nfrom course_utils.attention.shapes import dimension_report\n"
            "d = tempfile.mkdtemp(); os.chdir(d); os.rmdir(d)\n"
            "try:\n    dimension_report(2, 10, 512, 8)\nexcept FileNotFoundError as e:\n    print(e)\n")
    result = subprocess.run([sys.executable, "-c", code], env=dict(os.environ, PYTHONPATH=str(ROOT)),
                            capture_output=True, text=True, timeout=120)
    assert "the current folder cannot be read" in result.stdout, result.stdout + result.stderr
    assert "FlopCounterMode" in result.stdout


# -- modules and models changed after construction -------------------------------------------------------
@pytest.mark.parametrize(("edit", "error", "words"), [
    (lambda m: setattr(m, "num_heads", 4), ValueError, ["MultiHeadAttention.d_model", "num_heads=4"]),
    (lambda m: setattr(m, "in_proj", torch.nn.Linear(8, 12)), ValueError,
     ["MultiHeadAttention.in_proj.weight", "(24, 8)", "(12, 8)", "forward reads it"]),
    (lambda m: setattr(m, "out_proj", None), TypeError, ["MultiHeadAttention.out_proj", "None"]),
])
def test_forward_names_a_size_or_layer_changed_after_construction(edit, error, words) -> None:
    from course_utils import MultiHeadAttention

    module = MultiHeadAttention(8, 2)
    edit(module)
    raises_naming(error, words, lambda: module(torch.randn(1, 3, 8)))


# -- battery 28 (library) ----------------------------------------------------------------------------

def test_merge_heads_refuses_a_meta_tensor() -> None:
    from course_utils.attention.mha import MultiHeadAttention

    module = MultiHeadAttention(8, 2)
    raises_naming(ValueError, ["heads", "meta device", "(1, 2, 3, 4)"],
                  lambda: module.merge_heads(torch.ones(1, 2, 3, 4, device="meta")))
    assert module.merge_heads(torch.ones(1, 2, 3, 4)).shape == (1, 3, 8)
    with torch.device("meta"):  # a layer built on meta still merges meta heads: it computes shapes
        on_meta = MultiHeadAttention(8, 2)
    assert on_meta.merge_heads(torch.ones(1, 2, 3, 4, device="meta")).shape == (1, 3, 8)


# -- battery 29 (library) ----------------------------------------------------------------------------

HUGE = 10**400


def test_causal_mask_huge_names_num_queries():
    from course_utils.attention.masks import causal_mask

    with pytest.raises(ValueError, match="num_queries"):
        causal_mask(HUGE)


def test_mha_macs_names_num_heads_and_cuts_huge_value():
    from course_utils.attention.shapes import mha_macs

    with pytest.raises(ValueError, match="not divisible by num_heads = 3"):
        mha_macs(2, 4, 8, 3)
    with pytest.raises(ValueError, match="num_heads") as info:
        mha_macs(2, 4, 8, HUGE)
    assert len(str(info.value)) < 400


def test_mla_latents_huge_start_names_start():
    from course_utils.attention.mla import MultiHeadLatentAttention

    m = MultiHeadLatentAttention(8, 2, 4, 4, 2)
    with pytest.raises(ValueError, match="start"):
        m.latents(torch.randn(2, 3, 8), start=HUGE)


# -- battery 29 (rerun) ------------------------------------------------------------------------------

W = torch.zeros(4, 2)


def test_stack_head_weights_lying_len_names_the_parts():
    from course_utils.attention.naive_mha import stack_head_weights

    with pytest.raises(TypeError, match="k_parts must be a list of tensors, got LyingLen"):
        stack_head_weights([W], LyingLen([W]), [W])


# -- battery 31 --------------------------------------------------------------------------------------

# -- cost_table / parameter_table_head_counts_not_dividing: named num_heads, which the caller never passed
@pytest.mark.parametrize("table", [lambda counts: shapes.cost_table(1, 4, 8, counts),
                                   lambda counts: shapes.parameter_table(8, counts)],
                         ids=["cost_table", "parameter_table"])
def test_tables_name_the_head_counts_entry_that_does_not_divide_d_model(table):
    with pytest.raises(ValueError, match=r"^d_model = 8 is not divisible by head_counts\[1\] = 3\b") as err:
        table([2, 3])
    assert "num_heads" not in str(err.value) and "[1, 2, 4, 8]" in str(err.value)
    assert list(table([2, 4]).index) == [2, 4]




# -- hooks_where_predicate_arity / run_with_cache_names_predicate_arity: a test on names of the wrong
# arity raised Python's bare "<lambda>() missing 1 required positional argument" from hooks.py
def _with_model_hooks(fwd_hooks):
    with SM.hooks(fwd_hooks):
        return SM(TOK)


_NO_HOOK = ("blocks.0.attn.hook_z", lambda x, hook: None)


@pytest.mark.parametrize("call, named", [
    (lambda test: _with_hooks([(test, lambda x, hook: None)]), r"fwd_hooks\[0\]\[0\]"),
    (lambda test: _with_model_hooks([_NO_HOOK, (test, lambda x, hook: None)]), r"fwd_hooks\[1\]\[0\]"),
    (lambda test: hooks.run_with_cache(SM, TOK, names=test), "names"),
    (lambda test: SM.run_with_cache(TOK, names=[test]), r"names\[0\]"),
], ids=["hooks", "model.hooks", "run_with_cache", "model.run_with_cache list"])
@pytest.mark.parametrize("test", [lambda a, b: True, lambda: True], ids=["two arguments", "none"])
def test_a_test_on_hook_point_names_of_the_wrong_arity_is_named(call, named, test):
    with pytest.raises(TypeError, match=rf"^{named} must be a hook point's name \(str\) or a function name "
                                        rf"-> bool, called with 1 positional argument, but <lambda>"):
        call(test)
    call(lambda name: name == "blocks.0.attn.hook_z")  # a test of one argument is still taken
