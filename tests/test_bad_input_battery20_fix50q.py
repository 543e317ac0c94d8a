"""Battery 20a's interp / tasks / model cases (issue 38): ov_copying_score on a grouped-query
model, an evaluation that measures nothing, TwoKeyTask's seed range, infinite logits scored as
predictions, and a History whose device torch cannot name."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from course_utils.interp.ablation import Evaluation, measure
from course_utils.interp.circuits import ov_copying_score
from course_utils.model.train import History
from course_utils.model.transformer import ModelConfig, TinyTransformer
from course_utils.tasks.synthetic import (
    AgreementTask,
    InductionTask,
    agreement_accuracy,
    agreement_margins,
    induction_accuracy,
)
from course_utils.tasks.two_relations import TwoKeyTask
from tests.bad_input_cases import raises_naming


# -- S5: an evaluation whose score returns {} measured nothing ---------------------------------
def test_measure_refuses_a_score_that_returns_no_number() -> None:
    model = TinyTransformer(ModelConfig(vocab_size=16, max_len=8, d_model=16, num_heads=2, num_layers=2)).eval()
    tokens = torch.randint(1, 16, (2, 6))
    good = Evaluation(tokens, lambda logits: {"m": 1.0})
    raises_naming(ValueError, ["evaluations[1].score", "at least one number", "{}"],
                  lambda: measure(model, [good, Evaluation(tokens, lambda logits: {})], [(0, 1)]))


# -- S4: +inf / -inf logits are refused where a metric reads them, as NaN is ------------------
_INDUCTION = InductionTask(vocab_size=16, seq_len=8, train_periods=(2, 3), heldout_periods=(4,))
_AGREEMENT = AgreementTask()


def _induction_call(value: float):
    batch = _INDUCTION.eval_batch(4)
    logits = torch.zeros(4, 8, 16)
    logits[batch.scored] = value
    return lambda: induction_accuracy(logits, batch)


def _agreement_call(fn, value: float):
    batch = _AGREEMENT.sample(4, torch.Generator().manual_seed(0))
    logits = torch.zeros(4, batch.tokens.shape[1], _AGREEMENT.vocab_size)
    logits[torch.arange(4), batch.predict_pos, batch.wrong_id] = value
    return lambda: fn(logits, batch)


@pytest.mark.parametrize("value", [float("inf"), float("-inf")], ids=["+inf", "-inf"])
@pytest.mark.parametrize("make", [
    _induction_call,
    lambda value: _agreement_call(agreement_margins, value),
    lambda value: _agreement_call(agreement_accuracy, value),
], ids=["induction_accuracy", "agreement_margins", "agreement_accuracy"])
def test_infinite_logits_are_refused_where_read(make, value: float) -> None:
    kind = "+inf" if value > 0 else "-inf"
    raises_naming(ValueError, ["logits", kind, "no prediction"], make(value))


def test_nan_logits_still_named_as_nan() -> None:
    raises_naming(ValueError, ["logits hold NaN at scored positions"], _induction_call(float("nan")))


# -- S2: History.device is a device torch names (present on this machine or not) --------------
@pytest.mark.parametrize("device", ["gpu9", "", "CPU", "cuda:-1", "meta"])
def test_history_refuses_a_device_torch_cannot_name(device: str) -> None:
    raises_naming(ValueError, ["History.device", repr(device)], lambda: History("t", device=device))


def test_history_keeps_a_device_of_another_machine() -> None:
    assert History("t", device="cuda:3").device == "cuda:3"  # a GPU run's history read on a CPU
