"""Issue 35: ``past`` given to ``MultiHeadAttentionBase.forward`` as a function (a cache's append)
has its result checked as the ``(k, v)`` pair form is: a pair of ``(B, g, T, dk)`` tensors of one
shape with the module's dtype and device. Before, a non-pair gave "cannot unpack non-iterable int
object" and a key of the wrong width a bmm error from deep inside torch; now each names ``past``,
what was expected and what arrived."""

from __future__ import annotations

import pytest
import torch
from bad_input_cases import Case, assert_named  # noqa: E402

from course_utils.attention.gqa import GroupedQueryAttention
from course_utils.attention.mha import MultiHeadAttention
from course_utils.model.kv_cache import CatCache

X = torch.randn(2, 3, 32, generator=torch.Generator().manual_seed(0))  # (B, T, d)


def _layer() -> MultiHeadAttention:
    torch.manual_seed(0)
    return MultiHeadAttention(32, 4).eval()  # dk = 8


RESULT = "past(k, v)'s result"
CASES = [
    Case("a number", lambda: _layer()(X, past=lambda k, v: 5), TypeError,
         [RESULT, "(k, v) pair", "(B, g, T, dk)", "got int"]),
    Case("nothing returned", lambda: _layer()(X, past=lambda k, v: None), TypeError,
         [RESULT, "(k, v) pair", "got NoneType", "forget to return"]),
    Case("one tensor in a tuple", lambda: _layer()(X, past=lambda k, v: (k,)), TypeError,
         [RESULT, "(k, v) pair", "tuple of 1 item"]),
    Case("three tensors", lambda: _layer()(X, past=lambda k, v: (k, v, v)), TypeError,
         [RESULT, "tuple of 3 items"]),
    Case("k of the wrong head width", lambda: _layer()(X, past=lambda k, v: (k[..., :4], v)), ValueError,
         [f"{RESULT} k", "(B=2, g=4, T, dk=8)", "got (2, 4, 3, 4)"]),
    Case("v of the wrong head width", lambda: _layer()(X, past=lambda k, v: (k, v[..., :4])), ValueError,
         [f"{RESULT} v", "(B=2, g=4, T, dk=8)", "got (2, 4, 3, 4)"]),
    Case("the wrong batch", lambda: _layer()(X, past=lambda k, v: (k[:1], v[:1])), ValueError,
         [f"{RESULT} k", "B=2", "got (1, 4, 3, 8)"]),
    Case("3-D tensors", lambda: _layer()(X, past=lambda k, v: (k[0], v[0])), ValueError,
         [f"{RESULT} k", "4-D", "got 3-D shape (4, 3, 8)"]),
    Case("k and v of different lengths", lambda: _layer()(X, past=lambda k, v: (k, v[:, :, :1])), ValueError,
         [f"{RESULT} k and v", "one shape", "(2, 4, 3, 8)", "(2, 4, 1, 8)"]),
    Case("float64 from a float32 module", lambda: _layer()(X, past=lambda k, v: (k.double(), v.double())),
         TypeError, [f"{RESULT} k", "torch.float64", "torch.float32"]),
    Case("integers", lambda: _layer()(X, past=lambda k, v: (k.long(), v.long())), TypeError,
         [f"{RESULT} k", "floating-point", "torch.int64"]),
    Case("numpy arrays", lambda: _layer()(X, past=lambda k, v: (k.numpy(), v.numpy())), TypeError,
         [f"{RESULT} k", "torch.Tensor", "ndarray"]),
]


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_a_bad_past_function_result_is_named(case: Case) -> None:
    with torch.no_grad():
        assert_named(case)


def test_the_pair_form_keeps_its_messages() -> None:
    """The pair form and the function form share one check; the pair keeps its own name."""
    with pytest.raises(ValueError, match=r"past k must be \(B=2, g=4, T_past, dk=8\), got \(2, 4, 3, 4\)"):
        _layer()(X, past=(torch.zeros(2, 4, 3, 4), torch.zeros(2, 4, 3, 4)))
    with pytest.raises(TypeError, match=r"past must be a \(k, v\) pair .* append function or None"):
        _layer()(X, past=5)


def test_a_good_past_function_still_runs_and_gives_the_pair_forms_output() -> None:
    """The check lets a correct append through: the function form, the pair form and one pass
    over the whole sequence give the same output for the last tokens (within float rounding)."""
    layer = _layer()
    with torch.no_grad():
        full, _ = layer(X, is_causal=True)
        first, _, (k, v) = layer(X[:, :2], is_causal=True, return_kv=True)
        by_pair, _ = layer(X[:, 2:], is_causal=True, past=(k, v))
        by_function, _ = layer(X[:, 2:], is_causal=True,
                               past=lambda k_new, v_new: (torch.cat([k, k_new], 2), torch.cat([v, v_new], 2)))
    torch.testing.assert_close(by_function, by_pair, rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(by_function[:, 0], full[:, 2], rtol=1e-5, atol=1e-6)


def test_a_cache_append_on_a_grouped_layer_passes_the_check() -> None:
    """A real cache's append, on a layer whose K/V heads are fewer than its query heads (g = 2
    of h = 4): the check reads g from the layer, not h."""
    torch.manual_seed(1)
    layer = GroupedQueryAttention(32, 4, 2).eval()
    cache = CatCache(1)
    with torch.no_grad():
        out, _ = layer(X, past=lambda k, v: cache.append(0, k, v))
        again, _ = layer(X[:, :1], past=lambda k, v: cache.append(0, k, v))
    assert out.shape == (2, 3, 32) and again.shape == (2, 1, 32)
    assert cache.layers[0][0].shape == (2, 2, 4, 8)
    with pytest.raises(ValueError, match=r"past\(k, v\)'s result k must be \(B=2, g=2, T, dk=8\)"):
        layer(X, past=lambda k, v: (k.repeat(1, 2, 1, 1), v.repeat(1, 2, 1, 1)))  # h heads, not g
