"""Battery 29's library findings: each input is refused with a message naming the argument, or
handled right (one test per standalone repro)."""
from __future__ import annotations

import pytest
import torch

HUGE = 10**400


class BadRepr:
    def __repr__(self) -> str:
        raise RuntimeError("repr raises")


class BadFloat:
    def __float__(self) -> float:
        raise RuntimeError("float raises")


def test_finite_never_raises():
    from course_utils.attention.validation import finite

    assert finite(torch.ones(2, device="meta").sum()) is False
    assert finite(BadFloat()) is False
    assert finite(1.0) is True


def test_causal_mask_huge_names_num_queries():
    from course_utils.attention.masks import causal_mask

    with pytest.raises(ValueError, match="num_queries"):
        causal_mask(HUGE)


def test_check_dense_non_tensor_names_argument():
    from course_utils.attention.validation import check_dense

    with pytest.raises(TypeError, match=r"x must be a torch.Tensor, got list"):
        check_dense([1.0, 2.0], "x")


def test_check_seed_bad_repr_names_seed():
    from course_utils.env import check_seed

    with pytest.raises(TypeError, match=r"seed must be an int.*BadRepr"):
        check_seed(BadRepr())


def test_copy_module_bad_repr_names_module():
    from course_utils.exercises.cases import copy_module

    with pytest.raises(TypeError, match=r"module must be a torch.nn.Module.*BadRepr"):
        copy_module(BadRepr())


def test_mha_macs_names_num_heads_and_cuts_huge_value():
    from course_utils.attention.shapes import mha_macs

    with pytest.raises(ValueError, match="not divisible by num_heads = 3"):
        mha_macs(2, 4, 8, 3)
    with pytest.raises(ValueError, match="num_heads") as info:
        mha_macs(2, 4, 8, HUGE)
    assert len(str(info.value)) < 400
