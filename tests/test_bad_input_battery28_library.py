"""Battery 28, library findings: each non-clear case refused by name or handled."""
from __future__ import annotations

import pytest
import torch

from tests.bad_input_cases import raises_naming


class BadRepr:
    def __repr__(self) -> str:
        raise RuntimeError("repr raises")

    __str__ = __repr__


def _tiny():
    from course_utils.model.transformer import ModelConfig, TinyTransformer

    torch.manual_seed(0)
    return TinyTransformer(ModelConfig(vocab_size=12, max_len=10, d_model=16, num_heads=4, num_layers=2))


@pytest.mark.parametrize("name", ["directions", "frozen_scale"])
def test_direct_logit_attribution_names_an_inference_tensor(name: str) -> None:
    from course_utils.interp.patching import direct_logit_attribution

    model = _tiny().eval()
    tokens, positions = torch.randint(0, 12, (2, 5)), torch.tensor([4, 3])
    with torch.inference_mode():
        made = {"directions": torch.randn(12), "frozen_scale": torch.ones(2)}[name]
    kwargs = {"directions": torch.randn(12), name: made}
    raises_naming(ValueError, [name, "torch.inference_mode()", f"{name}.clone()"],
                  lambda: direct_logit_attribution(model, tokens, positions, **kwargs))
