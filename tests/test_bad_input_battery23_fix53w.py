"""Battery 23 (b23a), fix pass W: O1, O2, O4, S4 - each bad input refused by name."""
from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from tests.bad_input_cases import raises_naming


# -- O1: check_fast_attention_inputs checked num_heads / num_kv_heads / d_k only through q's layout --
def _heads(num_heads: int = 2, num_kv_heads: int = 2, d_k: int = 4) -> tuple[torch.Tensor, ...]:
    q = torch.zeros(2, num_heads, 4, d_k)
    k = v = torch.zeros(2, num_kv_heads, 4, d_k)
    return q, k, v


@pytest.mark.parametrize("arg", ["num_heads", "num_kv_heads", "d_k"])
@pytest.mark.parametrize("bad, error", [(True, TypeError), (-1, ValueError), (0, ValueError),
                                        (2.5, TypeError), ("2", TypeError), (np.float64(math.nan), TypeError),
                                        (None, TypeError)])
def test_fast_attention_sizes_named(arg: str, bad: object, error: type) -> None:
    from course_utils.attention.validation import check_fast_attention_inputs

    q, k, v = _heads()
    sizes = {"num_heads": 2, "num_kv_heads": 2, "d_k": 4}
    check_fast_attention_inputs(q, k, v, None, False, **sizes)  # the control passes
    sizes[arg] = bad
    raises_naming(error, [arg, str(bad)], lambda: check_fast_attention_inputs(q, k, v, None, False, **sizes))


# -- O2: grouped_query_attention(q on meta, k/v/mask on cpu) blamed the mask -----------------------
def test_gqa_meta_q_names_q_k_v_not_mask() -> None:
    from course_utils.attention.gqa import grouped_query_attention
    from course_utils.attention.masks import causal_mask

    q = torch.randn(2, 4, 4, 2, device="meta")
    k = v = torch.randn(2, 2, 4, 2)
    message = raises_naming(ValueError, ["q meta", "k cpu", "v cpu"],
                            lambda: grouped_query_attention(q, k, v, mask=causal_mask(4)))
    assert "mask" not in message


# -- O4: combine_masks(device=-1) gave torch's bare "Device index must not be negative" ------------
@pytest.mark.parametrize("device, error", [(-1, TypeError), (2.5, TypeError), ("nonsense", ValueError)])
def test_combine_masks_device_named(device: object, error: type) -> None:
    from course_utils.attention.validation import combine_masks

    mask = torch.ones(3, 3, dtype=torch.bool)
    call = lambda: combine_masks(mask, None, batch=2, num_heads=1, num_queries=3,  # noqa: E731
                                 num_keys=3, device=device)
    raises_naming(error, ["device", str(device)], call)
    for good in ("cpu", torch.device("cpu")):  # the control
        assert combine_masks(mask, None, batch=2, num_heads=1, num_queries=3, num_keys=3,
                             device=good).shape == (1, 1, 3, 3)


# -- S4: output_rounding_budget took non-square weights and returned a (0, 3) / (1, 3) budget -------
@pytest.mark.parametrize("shape", [(0, 2), (1, 2)])
def test_rounding_budget_weights_square(shape: tuple[int, int]) -> None:
    from course_utils.tasks.worked_example import output_rounding_budget

    values = np.full((2, 3), 0.5)
    raises_naming(ValueError, ["weights", "(T, T)", str(shape)],
                  lambda: output_rounding_budget(np.full(shape, 0.5), values))
    assert output_rounding_budget(np.full((2, 2), 0.5), values).shape == (2, 3)  # the control
