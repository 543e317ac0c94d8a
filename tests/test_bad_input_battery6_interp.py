"""Battery 6 (interp): bad input that used to pass without a word."""
from __future__ import annotations

import pytest
import torch

from course_utils.interp.ablation import Evaluation
from course_utils.interp.patching import prunable_counts
from course_utils.model.transformer import ModelConfig, TinyTransformer


def _evaluation_and_model():
    torch.manual_seed(0)
    config = ModelConfig(vocab_size=13, max_len=10, d_model=12, num_heads=3, num_layers=2)
    model = TinyTransformer(config).double().eval()
    tokens = torch.randint(0, 13, (2, 9), generator=torch.Generator().manual_seed(1))
    return Evaluation(tokens, lambda logits: {"mean": float(logits.mean())}), model


@pytest.mark.parametrize("answer", ["no", 1, None])
def test_prunable_counts_refuses_a_within_that_returns_no_bool(answer):
    evaluation, model = _evaluation_and_model()
    with pytest.raises(TypeError, match=r"within must return a bool.*got " + type(answer).__name__):
        prunable_counts(model, evaluation, [[(0, 0)]], lambda numbers: answer)


def test_prunable_counts_still_takes_a_bool():
    evaluation, model = _evaluation_and_model()
    counts, _ = prunable_counts(model, evaluation, [[(0, 0)]], lambda numbers: False)
    assert counts == [0]
