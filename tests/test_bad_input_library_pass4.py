"""Bad input to the library, pass 4 (battery 30's remaining cases, battery 31's repros): each is
refused by name, with the value shown by ``shown`` (never its own raising repr), or handled."""
from __future__ import annotations

import pytest
import torch

from tests.bad_input_cases import raises_naming


class Int(int):
    """A valid int whose repr and str raise: it must be accepted and work."""

    def __repr__(self) -> str:
        raise RuntimeError("repr exploded")

    __str__ = __repr__


class BadLen(list):
    """A list whose len() raises: refused naming the argument, not with its own error."""

    def __len__(self) -> int:
        raise RuntimeError("len exploded")


def _tiny(**overrides):
    from course_utils.model.transformer import ModelConfig, TinyTransformer

    torch.manual_seed(0)
    fields = dict(vocab_size=12, max_len=10, d_model=16, num_heads=4, num_layers=2)
    fields.update(overrides)
    return TinyTransformer(ModelConfig(**fields))


@pytest.mark.parametrize("kind", ["induction", "agreement", "mixture"])
def test_evaluate_names_the_models_nan_weight(kind: str) -> None:
    from course_utils.model import train

    config = {"induction": train.induction_model_config, "agreement": train.agreement_model_config,
              "mixture": train.mixture_model_config}[kind](num_layers=1)
    model = train._build_model(config, 0, torch.device("cpu"))
    with torch.no_grad():
        model.blocks[0].ln_attn.weight[0] = float("nan")
    evaluate = {"induction": lambda: train.evaluate_induction(model, batch_size=16),
                "agreement": lambda: train.evaluate_agreement(model, batch_size=16),
                "mixture": lambda: train.evaluate_mixture(model)}[kind]
    raises_naming(ValueError, ["model's weights", "blocks.0.ln_attn.weight", "nan"], evaluate)

