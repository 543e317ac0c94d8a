"""The course's attention agrees with PyTorch's to 1e-10 in float64, and rejects bad input."""

from __future__ import annotations

import itertools

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from course_utils import (
    MultiHeadAttention,
    causal_mask,
    padding_mask,
    scaled_dot_product_attention,
    to_torch_attn_mask,
    to_torch_key_padding_mask,
)
from course_utils.attention.naive_mha import naive_from_batched

TOL = 1e-10

# (B, Tq, Tk, d_model, h, self_attention)
SHAPES = [
    (2, 5, 5, 16, 4, True),
    (3, 4, 7, 12, 3, False),  # cross attention, Tq != Tk
    (1, 6, 6, 8, 1, True),  # batch of 1, one head
    (2, 3, 9, 8, 8, False),  # d_k = 1
    (4, 1, 5, 6, 2, False),  # a single query
    (2, 8, 8, 32, 8, True),
]
MASKINGS = ["none", "causal", "padding", "causal+padding"]


def _inputs(B, Tq, Tk, d, self_attention, gen):
    q = torch.randn(B, Tq, d, dtype=torch.float64, generator=gen)
    if self_attention:
        return q, q, q
    kv = torch.randn(B, Tk, d, dtype=torch.float64, generator=gen)
    return q, kv, torch.randn(B, Tk, d, dtype=torch.float64, generator=gen)


def _lengths(B, Tk, gen):
    # at least one real key per sequence, and the first key real: no fully masked rows
    return torch.randint(1, Tk + 1, (B,), generator=gen).tolist()


CASES = list(itertools.product(SHAPES, MASKINGS, [True, False]))


@pytest.mark.parametrize("case", range(len(CASES)))
def test_mha_matches_torch(case):
    shape, masking, bias = CASES[case]
    B, Tq, Tk, d, h, self_attn = shape
    if self_attn:
        Tk = Tq
    gen = torch.Generator().manual_seed(1000 + case)  # one fixed seed per case
    torch.manual_seed(case)
    theirs = nn.MultiheadAttention(d, h, bias=bias, batch_first=True).double().eval()
    if bias:  # make the biases non-zero so that copying them is tested
        with torch.no_grad():
            theirs.in_proj_bias.normal_()
            theirs.out_proj.bias.normal_()
    ours = MultiHeadAttention.from_torch(theirs).eval()
    q, k, v = _inputs(B, Tq, Tk, d, self_attn, gen)

    our_kwargs, their_kwargs = {}, {}
    if "causal" in masking:
        cm = causal_mask(Tq, Tk)
        our_kwargs["mask"] = cm
        their_kwargs["attn_mask"] = to_torch_attn_mask(cm)
    if "padding" in masking:
        kpm = padding_mask(_lengths(B, Tk, gen), Tk)
        our_kwargs["key_padding_mask"] = kpm
        their_kwargs["key_padding_mask"] = to_torch_key_padding_mask(kpm)

    ref_out, ref_w = theirs(q, k, v, average_attn_weights=False, **their_kwargs)
    for need_weights in (False, True):
        out, w = ours(q, k, v, need_weights=need_weights, **our_kwargs)
        assert out.shape == (B, Tq, d)
        assert (out - ref_out).abs().max() < TOL
        if need_weights:
            assert w.shape == (B, h, Tq, Tk)
            assert (w - ref_w).abs().max() < TOL
        else:
            assert w is None
    if self_attn and "padding" not in masking:  # the loop over heads computes the same function
        loop = naive_from_batched(ours).eval()
        assert (loop(q, our_kwargs.get("mask")) - ref_out).abs().max() < TOL


@pytest.mark.parametrize("shape", SHAPES)
def test_is_causal_flag_matches_explicit_mask_and_torch(shape):
    B, Tq, Tk, d, h, self_attn = shape
    if self_attn:
        Tk = Tq
    gen = torch.Generator().manual_seed(7)
    mha = MultiHeadAttention(d, h).double().eval()
    q, k, v = _inputs(B, Tq, Tk, d, self_attn, gen)
    explicit, _ = mha(q, k, v, mask=causal_mask(Tq, Tk))
    for need_weights in (False, True):
        flagged, _ = mha(q, k, v, is_causal=True, need_weights=need_weights)
        assert (flagged - explicit).abs().max() < TOL
    theirs = mha.to_torch().eval()
    ref, _ = theirs(q, k, v, attn_mask=to_torch_attn_mask(causal_mask(Tq, Tk)))
    assert (explicit - ref).abs().max() < TOL


@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize("masking", MASKINGS)
def test_sdpa_matches_functional(shape, masking):
    B, Tq, Tk, d, h, _ = shape
    gen = torch.Generator().manual_seed(11)
    dk = max(d // h, 1)
    q = torch.randn(B, h, Tq, dk, dtype=torch.float64, generator=gen)
    k = torch.randn(B, h, Tk, dk, dtype=torch.float64, generator=gen)
    v = torch.randn(B, h, Tk, dk + 1, dtype=torch.float64, generator=gen)  # dv != dk
    mask = None
    if "padding" in masking:
        mask = padding_mask(_lengths(B, Tk, gen), Tk)[:, None, None, :].expand(B, 1, Tq, Tk)
    is_causal = "causal" in masking
    out, w = scaled_dot_product_attention(q, k, v, mask=mask, is_causal=is_causal)
    full = mask
    if is_causal:
        cm = causal_mask(Tq, Tk)
        full = cm if full is None else full & cm
    ref = F.scaled_dot_product_attention(q, k, v, attn_mask=full)
    assert (out - ref).abs().max() < TOL
    assert torch.allclose(w.sum(-1), torch.ones(B, h, Tq, dtype=torch.float64))


def test_to_torch_round_trip_and_from_torch_copy():
    torch.manual_seed(0)
    ours = MultiHeadAttention(16, 4).double()
    theirs = ours.to_torch()
    again = MultiHeadAttention.from_torch(theirs)
    for a, b in zip(ours.state_dict().values(), again.state_dict().values(), strict=False):
        assert torch.equal(a, b)
    assert again.in_proj.weight.data_ptr() != theirs.in_proj_weight.data_ptr()


def test_fully_masked_query_row_gives_zeros_not_nan():
    mha = MultiHeadAttention(8, 2, bias=False).double().eval()
    x = torch.randn(1, 3, 8, dtype=torch.float64)
    mask = torch.ones(3, 3, dtype=torch.bool)
    mask[1] = False  # query 1 may attend to nothing
    for need_weights in (False, True):
        out, w = mha(x, mask=mask, need_weights=need_weights)
        assert torch.isfinite(out).all()
        assert torch.allclose(out[0, 1], torch.zeros(8, dtype=torch.float64))
        if w is not None:
            assert torch.equal(w[0, :, 1], torch.zeros(2, 3, dtype=torch.float64))


def test_fully_masked_query_with_bias_outputs_the_bias():
    """Every head's output is zero there, so the module's output is out_proj.bias."""
    mha = MultiHeadAttention(8, 2).double().eval()
    torch.nn.init.normal_(mha.out_proj.bias)
    x = torch.randn(1, 3, 8, dtype=torch.float64)
    mask = torch.ones(3, 3, dtype=torch.bool)
    mask[1] = False
    for need_weights in (False, True):
        out, _ = mha(x, mask=mask, need_weights=need_weights)
        assert torch.allclose(out[0, 1], mha.out_proj.bias)
        assert not torch.allclose(out[0, 0], mha.out_proj.bias)


def test_empty_sequence_gives_an_empty_output():
    mha = MultiHeadAttention(8, 2).eval()
    for need_weights in (False, True):
        out, _ = mha(torch.randn(2, 0, 8), is_causal=True, need_weights=need_weights)
        assert out.shape == (2, 0, 8)


def test_nan_spreads_as_the_docstring_says():
    """A NaN key reaches the queries that may see it; a NaN value reaches every query."""
    q = torch.randn(1, 4, 8)
    k, v = q.clone(), q.clone()
    k[0, 2, 0] = v[0, 2, 0] = float("nan")
    out, _ = scaled_dot_product_attention(q, k, q, is_causal=True)
    assert torch.isfinite(out[0, :2]).all() and torch.isnan(out[0, 2:]).all()
    out, _ = scaled_dot_product_attention(q, q, v, is_causal=True)
    assert torch.isnan(out).any(-1).all()


def test_dropout_only_in_training_mode():
    torch.manual_seed(0)
    mha = MultiHeadAttention(16, 4, dropout=0.5)
    x = torch.randn(2, 6, 16)
    mha.eval()
    a, _ = mha(x)
    b, _ = mha(x)
    assert torch.equal(a, b)
    mha.train()
    c, _ = mha(x)
    assert not torch.allclose(a, c)


# ---------------------------------------------------------------- bad input
@pytest.mark.parametrize(
    "args,exc,words",
    [
        ((10, 3), ValueError, ["d_model = 10", "num_heads = 3", "divisible"]),
        ((8, 0), ValueError, ["num_heads", "positive", "0"]),
        ((8, -2), ValueError, ["num_heads", "-2"]),
        ((8.0, 2), TypeError, ["d_model", "int", "float"]),
        ((8, 2.0), TypeError, ["num_heads", "int", "float"]),
    ],
)
def test_constructor_errors(args, exc, words):
    with pytest.raises(exc) as info:
        MultiHeadAttention(*args)
    for word in words:
        assert word in str(info.value)


@pytest.fixture
def mha():
    return MultiHeadAttention(16, 4).eval()


def _raises(exc, words, fn, *args, **kwargs):
    with pytest.raises(exc) as info:
        fn(*args, **kwargs)
    for word in words:
        assert word in str(info.value), f"{word!r} not in {info.value!s}"


def test_wrong_last_dim(mha):
    _raises(ValueError, ["d_model=16", "(2, 5, 12)"], mha, torch.randn(2, 5, 12))


def test_two_d_input(mha):
    _raises(ValueError, ["3-D", "2-D", "(5, 16)", "unsqueeze"], mha, torch.randn(5, 16))


def test_not_a_tensor(mha):
    _raises(TypeError, ["query", "Tensor", "list"], mha, [[1.0] * 16])


def test_key_value_length_mismatch(mha):
    q = torch.randn(2, 4, 16)
    _raises(ValueError, ["key and value", "(2, 6, 16)", "(2, 7, 16)"], mha, q,
            torch.randn(2, 6, 16), torch.randn(2, 7, 16))


def test_batch_mismatch(mha):
    _raises(ValueError, ["batch", "(2, 4, 16)", "(3, 4, 16)"], mha, torch.randn(2, 4, 16),
            torch.randn(3, 4, 16), torch.randn(3, 4, 16))


@pytest.mark.parametrize(
    "mask_shape",
    [(5, 4), (4, 5, 5), (2, 3, 5, 5), (5,), (1, 1, 1, 5, 5), (2, 4, 1, 5)],
)
def test_mask_of_wrong_shape(mha, mask_shape):
    x = torch.randn(2, 5, 16)
    _raises(ValueError, ["mask of shape", "(2, 4, 5, 5)", "(Tq, Tk)"], mha, x,
            mask=torch.ones(mask_shape, dtype=torch.bool))


@pytest.mark.parametrize("mask_shape", [(5, 5), (2, 5, 5), (1, 5, 5), (2, 1, 5, 5),
                                        (1, 4, 5, 5), (2, 4, 5, 5)])
def test_masks_that_fit(mha, mask_shape):
    x = torch.randn(2, 5, 16)
    out, _ = mha(x, mask=torch.ones(mask_shape, dtype=torch.bool))
    assert out.shape == x.shape


def test_float_mask_is_rejected(mha):
    x = torch.randn(2, 5, 16)
    _raises(TypeError, ["torch.bool", "float32"], mha, x, mask=torch.zeros(5, 5))


def test_key_padding_mask_errors(mha):
    x = torch.randn(2, 5, 16)
    _raises(ValueError, ["(B, Tk) = (2, 5)", "(5, 2)"], mha, x,
            key_padding_mask=torch.ones(5, 2, dtype=torch.bool))
    _raises(TypeError, ["key_padding_mask", "torch.bool"], mha, x,
            key_padding_mask=torch.ones(2, 5, dtype=torch.long))


def test_sdpa_errors():
    q = torch.randn(2, 4, 8)
    _raises(ValueError, ["same last dim", "(2, 4, 8)", "(2, 6, 7)"], scaled_dot_product_attention,
            q, torch.randn(2, 6, 7), torch.randn(2, 6, 8))
    _raises(ValueError, ["same length Tk", "(2, 6, 8)", "(2, 5, 8)"],
            scaled_dot_product_attention, q, torch.randn(2, 6, 8), torch.randn(2, 5, 8))
    _raises(ValueError, ["leading"], scaled_dot_product_attention, q, torch.randn(3, 6, 8),
            torch.randn(3, 6, 8))
    _raises(ValueError, ["mask of shape"], scaled_dot_product_attention, q, q, q,
            mask=torch.ones(4, 5, dtype=torch.bool))
    _raises(TypeError, ["Tensor"], scaled_dot_product_attention, q.numpy(), q, q)


def test_from_torch_rejects_sequence_first():
    _raises(ValueError, ["batch_first=True"], MultiHeadAttention.from_torch,
            nn.MultiheadAttention(8, 2))
