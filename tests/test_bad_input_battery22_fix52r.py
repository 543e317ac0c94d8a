"""Battery 22 (issue 38), helper R (course_utils/interp/*): the circuits functions that read a
model's weights refuse NaN or infinite weights, naming the parameter (ov_copying_score turned them
into finite scores); Evaluation and EvaluationAt are frozen, so what was checked is what is used."""

from __future__ import annotations

import dataclasses

import pytest
import torch
from bad_input_cases import raises_naming, tiny_model

from course_utils.interp import ablation, circuits, patching

V = 16
TOKENS = torch.randint(0, V, (2, 6), generator=torch.Generator().manual_seed(2))
TOKENS[0, 0] = 1  # token 1 is read everywhere: the entry poisoned below is in its row


def _poisoned(param: str, value: float):
    """The tiny model with one entry of its parameter ``param`` set to ``value`` (a matrix: in row
    1, token 1's row of an embedding or an unembedding)."""
    model = tiny_model()
    weight = dict(model.named_parameters())[param]
    with torch.no_grad():
        weight[(1, 0) if weight.ndim == 2 else 0] = value
    return model


def _dla(model):
    trace = circuits.trace_heads(tiny_model(), TOKENS)  # a finite trace, of the same config
    return circuits.direct_logit_attribution(model, trace, TOKENS)


def _final_norm(model):
    stream = torch.randn(2, 6, 16, generator=torch.Generator().manual_seed(3))
    return circuits.frozen_final_norm(model, stream, stream)


# -- group 5: weights holding NaN or infinity ---------------------------------------------
@pytest.mark.parametrize("call", [
    lambda m: circuits.ov_copying_score(m, 0, [1, 2, 3]),
    lambda m: circuits.trace_heads(m, TOKENS),
], ids=["ov_copying_score", "trace_heads"])
@pytest.mark.parametrize("param", ["token_embedding.weight", "blocks.0.attn.out_proj.weight",
                                   "ln_final.weight", "unembed.weight"])
@pytest.mark.parametrize("value,shown", [(float("nan"), "nan"), (float("inf"), "inf")])
def test_non_finite_weights_are_refused_naming_the_parameter(call, param: str, value: float,
                                                             shown: str) -> None:
    raises_naming(ValueError, ["model's weights", param, shown], lambda: call(_poisoned(param, value)))


@pytest.mark.parametrize("call,param", [
    (_dla, "unembed.weight"),
    (_dla, "ln_final.weight"),
    (_final_norm, "ln_final.weight"),
])
def test_attribution_refuses_non_finite_final_weights(call, param: str) -> None:
    raises_naming(ValueError, ["model's weights", param, "nan"], lambda: call(_poisoned(param, float("nan"))))


def test_finite_weights_still_score() -> None:
    scores = circuits.ov_copying_score(tiny_model(), 0, [1, 2, 3])
    assert scores.shape == (2,) and bool(torch.isfinite(scores).all())


# -- group 8: EvaluationAt (and Evaluation) frozen ------------------------------------------
def _evaluation_at() -> patching.EvaluationAt:
    return patching.EvaluationAt(TOKENS, lambda logits: {"x": 1.0}, torch.tensor([5, 5]))


@pytest.mark.parametrize("make,field,value", [
    (_evaluation_at, "positions", torch.tensor([99, 99])),
    (_evaluation_at, "tokens", TOKENS[:, :2]),
    (lambda: ablation.Evaluation(TOKENS, lambda logits: {"x": 1.0}), "tokens", TOKENS.float()),
    (lambda: ablation.Evaluation(TOKENS, lambda logits: {"x": 1.0}), "score", None),
])
def test_evaluations_cannot_be_changed_after_their_check(make, field: str, value: object) -> None:
    evaluation = make()
    raises_naming(dataclasses.FrozenInstanceError, [field], lambda: setattr(evaluation, field, value))
    assert getattr(evaluation, field) is not value


def test_a_changed_copy_is_checked_again() -> None:
    raises_naming(ValueError, ["EvaluationAt.positions", "0..5", "99"],
                  lambda: dataclasses.replace(_evaluation_at(), positions=torch.tensor([99, 99])))
