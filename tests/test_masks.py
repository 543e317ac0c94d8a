import pytest
import torch

from course_utils import causal_mask, padding_mask, to_torch_attn_mask, to_torch_key_padding_mask


def test_causal_mask_square_and_offset():
    assert torch.equal(causal_mask(3), torch.tensor([[1, 0, 0], [1, 1, 0], [1, 1, 1]]).bool())
    # two new queries after 3 cached keys: both see the past, the second also sees the first
    m = causal_mask(2, 5, query_offset=3)
    assert torch.equal(m, torch.tensor([[1, 1, 1, 1, 0], [1, 1, 1, 1, 1]]).bool())


def test_causal_mask_matches_torch_is_causal_convention():
    q = torch.randn(1, 3, 4, 8)
    k = torch.randn(1, 3, 6, 8)
    a = torch.nn.functional.scaled_dot_product_attention(q, k, k, is_causal=True)
    b = torch.nn.functional.scaled_dot_product_attention(q, k, k, attn_mask=causal_mask(4, 6))
    assert torch.allclose(a, b, atol=1e-6)


def test_padding_mask():
    m = padding_mask([3, 1], 4)
    assert torch.equal(m, torch.tensor([[1, 1, 1, 0], [1, 0, 0, 0]]).bool())
    assert padding_mask(torch.tensor([2, 2])).shape == (2, 2)


@pytest.mark.parametrize(
    "lengths,max_len,exc,word",
    [([3, 5], 4, ValueError, "shorter"), ([[1, 2]], None, ValueError, "1-D"),
     ([1.5, 2.0], 3, TypeError, "integers"), ([-1, 2], 3, ValueError, ">= 0")],
)
def test_padding_mask_errors(lengths, max_len, exc, word):
    with pytest.raises(exc, match=word):
        padding_mask(lengths, max_len)


def test_conversions_flip_the_convention():
    m = causal_mask(3)
    assert torch.equal(to_torch_attn_mask(m), ~m)
    kpm = padding_mask([2, 3], 3)
    assert torch.equal(to_torch_key_padding_mask(kpm), ~kpm)
    with pytest.raises(TypeError, match="torch.bool"):
        to_torch_attn_mask(m.float())


def test_causal_mask_rejects_bad_sizes():
    with pytest.raises(ValueError, match="num_queries"):
        causal_mask(0)


def test_a_numeric_mask_error_names_each_argument_s_convention_and_both_conversions():
    from course_utils.attention.masks import check_bool_mask

    with pytest.raises(TypeError) as padding:
        check_bool_mask(torch.tensor([[1, 1, 0]]), "key_padding_mask")
    assert "True = real token" in str(padding.value) and "torch.int64" in str(padding.value)
    with pytest.raises(TypeError) as attention:
        check_bool_mask(torch.zeros(3, 3), "mask")
    message = str(attention.value)
    assert "True = may attend" in message and "mask != 0" in message and "mask == 0" in message


def test_a_negative_offset_is_a_building_block_but_not_a_mask_that_sees_nothing():
    window = causal_mask(5) & ~causal_mask(5, query_offset=-3)  # the last 3 keys of each query
    assert window.sum(-1).tolist() == [1, 2, 3, 3, 3]
    assert causal_mask(2, 5, query_offset=-1).sum(-1).tolist() == [0, 1]  # the last query sees a key
    for offset in (-2, -3, -100):
        with pytest.raises(ValueError, match=rf"query_offset={offset} with num_queries=2 leaves every query"):
            causal_mask(2, 5, query_offset=offset)


@pytest.mark.parametrize("offset", [3, 4, 2**62, 2**63 - 1, 2**63, 2**64 - 1, 10**30])
def test_causal_mask_any_offset_past_the_keys_lets_every_query_see_every_key(offset):
    assert causal_mask(2, 3, query_offset=offset).all()


def test_padding_mask_of_no_sequences_and_of_tensors():
    assert padding_mask([]).shape == (0, 0)
    assert padding_mask([], 3).shape == (0, 3)
    assert torch.equal(padding_mask(torch.tensor([1, 2], dtype=torch.int32), 2),
                       torch.tensor([[True, False], [True, True]]))


@pytest.mark.parametrize("lengths, max_len, exc, words", [
    ([1, 2], 2.5, TypeError, ["max_len", "float 2.5"]),
    ([1, 1], True, TypeError, ["max_len", "bool True"]),
    ([1, 2], "4", TypeError, ["max_len", "str '4'"]),
    ([0, 0], -1, ValueError, ["max_len", ">= 0", "-1"]),
    (None, None, TypeError, ["lengths", "NoneType"]),
    ("12", None, TypeError, ["lengths", "str '12'"]),
    ([True, False], None, TypeError, ["lengths", "integers", "bool"]),
    ([2**70], None, ValueError, ["lengths", "int64"]),
])
def test_padding_mask_names_each_bad_argument(lengths, max_len, exc, words):
    with pytest.raises(exc) as info:
        padding_mask(lengths, max_len)
    assert all(w in str(info.value) for w in words), str(info.value)


def test_masked_softmax_gives_zeros_where_a_row_has_no_finite_score():
    """A row whose every score is -inf from the data gives zeros, as a row whose every key is
    blocked does (and as F.scaled_dot_product_attention does); NaN and +inf still spread."""
    from course_utils.attention.masks import masked_softmax

    inf = float("inf")
    scores = torch.tensor([[-inf, -inf, -inf],  # no finite score: zeros, not NaN
                           [0.0, -inf, 1.0],  # a -inf key among finite ones: weight 0
                           [-inf, inf, 0.0],  # +inf: NaN (inf - inf), as in PyTorch
                           [-inf, float("nan"), -inf]])  # NaN: NaN
    for allowed in (None, torch.ones(4, 3, dtype=torch.bool)):
        weights = masked_softmax(scores, allowed)
        assert (weights[0] == 0).all()
        torch.testing.assert_close(weights[1], torch.softmax(torch.tensor([0.0, -inf, 1.0]), -1))
        assert weights[2:].isnan().all()
    allowed = torch.tensor([[True] * 3, [True, False, False], [True, False, True], [True, False, True]])
    weights = masked_softmax(scores, allowed)
    assert (weights[0] == 0).all()
    assert weights[1].tolist() == [1.0, 0.0, 0.0]
    assert torch.equal(weights[2], torch.tensor([0.0, 0.0, 1.0]))  # the +inf key is blocked
    assert (weights[3] == 0).all()  # the NaN key is blocked, the others score -inf: nothing left
    blocked_inf = masked_softmax(torch.tensor([[inf, 0.0, 1.0]]), torch.tensor([[True, True, False]]))
    assert blocked_inf[0, :2].isnan().all() and blocked_inf[0, 2] == 0  # a blocked key stays at 0
    assert masked_softmax(torch.empty(2, 0), None).shape == (2, 0)  # no keys: nothing to reduce
