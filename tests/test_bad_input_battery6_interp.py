"""Battery 6 (interp): bad input that used to pass without a word."""
from __future__ import annotations

import pytest
import torch

from course_utils.interp.ablation import Evaluation
from course_utils.interp.patching import direct_logit_attribution, losses_along_orders, prunable_counts
from course_utils.interp.widgets import dimension_explorer
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


def test_losses_along_orders_names_an_empty_orders():
    evaluation, model = _evaluation_and_model()
    tokens = evaluation.tokens
    with pytest.raises(ValueError, match="orders must hold at least one order.*got an empty list"):
        losses_along_orders(model, tokens, tokens, [], 1)


def test_direct_logit_attribution_says_what_arrived():
    evaluation, model = _evaluation_and_model()
    tokens = evaluation.tokens  # (2, 9), vocab 13
    with pytest.raises(ValueError, match=r"positions must lie in 0\.\.8 .*got 0\.\.99"):
        direct_logit_attribution(model, tokens, torch.tensor([0, 99]), torch.randn(2, 13))
    with pytest.raises(TypeError, match=r"directions must be .*got a torch\.float32 "
                       r"tensor of shape \(2, 5\)"):
        direct_logit_attribution(model, tokens, torch.tensor([0, 1]), torch.randn(2, 5))


@pytest.mark.parametrize("bad, words", [
    ({"num_heads": 0}, "num_heads=0"), ({"batch": "2"}, "batch='2'"),
    ({"d_model": 10**9}, "d_model=1000000000"), ({"batch": -5}, "batch=-5"),
    ({"seq_len": 2.5}, "seq_len=2.5"),
])
def test_dimension_explorer_answers_bad_start_values_with_a_message(bad, words, capsys):
    explorer = dimension_explorer(**bad)
    assert words in capsys.readouterr().out
    assert words in explorer.last_text and "not on the slider" in explorer.last_text
    assert "d_k = d_v" not in explorer.last_text  # no table for values nobody asked for
    assert explorer.output.outputs[0]["text"].startswith(words)
    explorer.controls["seq_len"].value = 6  # moving a slider draws the table again
    assert "d_k = d_v" in explorer.last_text


def test_explorer_names_a_draw_that_is_no_function():
    from ipywidgets import IntSlider

    from course_utils.interp.widgets import Explorer
    with pytest.raises(TypeError, match="draw must be None or a function.*got int 5"):
        Explorer(lambda x: str(x), {"x": IntSlider(1)}, draw=5)
