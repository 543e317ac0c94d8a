"""The naive list-of-heads module computes the batched module's function, and lesson 4's
checks behave as the lesson says."""

from __future__ import annotations

import pytest
import torch

from course_utils import MultiHeadAttention, causal_mask
from course_utils.exercises import lesson04
from course_utils.naive_mha import NaiveMultiHeadAttention, naive_from_batched, stack_head_weights


@pytest.mark.parametrize("d_model,num_heads,bias",
                         [(16, 4, True), (12, 3, False), (8, 1, True), (8, 8, True)])
def test_naive_and_batched_agree_both_ways(d_model, num_heads, bias):
    torch.manual_seed(0)
    naive = NaiveMultiHeadAttention(d_model, num_heads, bias=bias).double().eval()
    if bias:  # non-zero biases, so that stacking them is tested too
        with torch.no_grad():
            for p in naive.parameters():
                if p.ndim == 1:
                    p.normal_()
    batched = naive.to_batched().eval()
    assert batched.in_proj.weight.dtype == torch.float64
    x = torch.randn(3, 5, d_model, dtype=torch.float64)
    mask = causal_mask(5)
    with torch.no_grad():
        assert (naive(x) - batched(x)[0]).abs().max() < 1e-12
        assert (naive(x, mask) - batched(x, mask=mask)[0]).abs().max() < 1e-12
        back = naive_from_batched(batched)
        assert (back(x) - naive(x)).abs().max() < 1e-12


def test_head_i_is_rows_i_of_each_block():
    naive = NaiveMultiHeadAttention(8, 2)
    w = naive.to_batched().in_proj.weight
    assert torch.equal(w[4:8], naive.heads[1].w_q.weight)
    assert torch.equal(w[8:12], naive.heads[0].w_k.weight)
    assert torch.equal(w[20:24], naive.heads[1].w_v.weight)


def test_to_batched_copies_rather_than_shares():
    naive = NaiveMultiHeadAttention(8, 2)
    batched = naive.to_batched()
    with torch.no_grad():
        batched.in_proj.weight.zero_()
    assert naive.heads[0].w_q.weight.abs().sum() > 0


@pytest.mark.parametrize("args,exc,word", [
    ((8, 3), ValueError, "divisible"), ((8, 0), ValueError, "positive"),
    ((8.0, 2), TypeError, "int"), ((8, True), TypeError, "int"),
])
def test_constructor_errors(args, exc, word):
    with pytest.raises(exc, match=word):
        NaiveMultiHeadAttention(*args)


def test_forward_errors():
    naive = NaiveMultiHeadAttention(8, 2)
    with pytest.raises(ValueError, match=r"\(B, T, d_model=8\)"):
        naive(torch.randn(5, 8))
    with pytest.raises(ValueError, match="d_model=8"):
        naive(torch.randn(1, 5, 6))
    with pytest.raises(TypeError, match="torch.Tensor"):
        naive([[0.0] * 8])


def test_stack_head_weights_errors():
    a, b = torch.zeros(2, 8), torch.zeros(3, 8)
    with pytest.raises(ValueError, match="same non-zero number"):
        stack_head_weights([a], [a, a], [a])
    with pytest.raises(ValueError, match="same non-zero number"):
        stack_head_weights([], [], [])
    with pytest.raises(ValueError, match="same shape"):
        stack_head_weights([a], [b], [a])


def test_naive_from_batched_rejects_other_modules():
    with pytest.raises(TypeError, match="MultiHeadAttention"):
        naive_from_batched(torch.nn.MultiheadAttention(8, 2))


def test_mask_check_accepts_bool_and_names_float_masks():
    good = lesson04.check_masks_for_torch(lambda a, k: (~a, ~k))
    assert good.passed
    floats = lesson04.check_masks_for_torch(lambda a, k: ((~a).float(), (~k).float()))
    assert floats.mistake == "float_masks" and "ADDS" in floats.message
    ints = lesson04.check_masks_for_torch(lambda a, k: ((~a).int(), (~k).int()))
    assert ints.mistake == "float_masks"


def test_forward_check_accepts_the_course_module():
    """The exercise's reference is the same function as MultiHeadAttention."""
    def via_module(x, w_in, b_in, w_out, b_out, num_heads):
        mha = MultiHeadAttention(x.shape[-1], num_heads).double()
        with torch.no_grad():
            mha.in_proj.weight.copy_(w_in)
            mha.in_proj.bias.copy_(b_in)
            mha.out_proj.weight.copy_(w_out)
            mha.out_proj.bias.copy_(b_out)
            return mha(x)[0]

    assert lesson04.check_mha_forward(via_module).passed


def test_stack_check_accepts_the_course_helper():
    assert lesson04.check_stack_head_weights(stack_head_weights).passed
