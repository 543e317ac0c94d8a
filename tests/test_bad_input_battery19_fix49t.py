"""Battery 19 (b19b) fixes in course_utils/exercises: G2 run_with_your_attention and a Tensor
subclass, G3 causal_attention_with on a meta / non-finite x, G4 check_score_macs on an int beyond
float's range, G1 an answer's thread left running during the in-kernel check."""

import pytest
import torch

from course_utils.exercises import lesson03
from course_utils.exercises.your_attention import causal_attention_with, run_with_your_attention
from course_utils.model.checkpoint import load_checkpoint


class _Lie(torch.Tensor):
    """A tensor subclass whose comparisons always say yes."""

    @classmethod
    def __torch_function__(cls, func, types, args=(), kwargs=None):
        if getattr(func, "__name__", "") in ("allclose", "equal", "isclose", "eq", "__eq__"):
            return True
        return super().__torch_function__(func, types, args, kwargs or {})


def _zeros_as(kind):
    def fn(x, w_in, b_in, w_out, b_out, num_heads, causal=False):
        return torch.zeros_like(x).as_subclass(kind)
    return fn


@pytest.fixture(scope="module")
def attn():
    return load_checkpoint("induction")[0].blocks[0].attn


# --- G2 ------------------------------------------------------------------------------
def test_a_subclass_result_is_reported_not_raised():
    report = run_with_your_attention(_zeros_as(_Lie), batch_size=4)
    assert report.yours is None
    assert "_Lie" in report.error and "subclass" in report.error


def test_causal_attention_with_refuses_a_subclass_result(attn):
    x = torch.randn(1, 3, attn.d_model)
    with pytest.raises(TypeError, match=r"_Lie.*not a torch.Tensor"):
        causal_attention_with(_zeros_as(_Lie), x, attn)


# --- G3 ------------------------------------------------------------------------------
@pytest.mark.parametrize(("bad", "shown"), [
    (lambda d: torch.empty(1, 3, d, device="meta"), "meta"),
    (lambda d: torch.full((1, 3, d), float("nan")), "nan"),
    (lambda d: torch.zeros(1, 3, d).index_fill_(2, torch.tensor([1]), float("inf")), "inf"),
])
def test_causal_attention_with_refuses_an_x_without_finite_values(attn, bad, shown):
    def never(*args, causal=False):
        raise AssertionError("fn must not be called on a bad x")
    with pytest.raises(ValueError, match=r"\bx\b") as info:
        causal_attention_with(never, bad(attn.d_model), attn)
    assert shown in str(info.value)


# --- G4 ------------------------------------------------------------------------------
@pytest.mark.parametrize("huge", [10**400, -(10**400)], ids=["huge", "minus_huge"])
def test_score_macs_names_an_int_beyond_float_range(huge):
    feedback = lesson03.check_score_macs(lambda T, d, h: huge)
    assert not feedback.passed
    text = str(feedback)
    assert "OverflowError" not in text
    assert "expected int" in text and f"got int {str(huge)[:20]}" in text


def test_a_nan_answer_is_blamed_on_the_answer_not_on_x():
    def nan_answer(x, w_in, b_in, w_out, b_out, num_heads, causal=False):
        return torch.full_like(x, float("nan"))
    report = run_with_your_attention(nan_answer, batch_size=4)
    assert report.yours is None and "nan" in report.error and "x must" not in report.error
