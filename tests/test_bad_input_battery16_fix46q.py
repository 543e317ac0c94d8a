"""Battery 16a (issue 38), course_utils.interp: each case failed (obscure error or silent result)
before fix46q and is refused now with an error naming the argument and what arrived."""

from __future__ import annotations

from collections.abc import Callable

import matplotlib
import pytest
import torch

from course_utils.interp import ablation as A
from course_utils.interp import patching as P
from course_utils.interp import scores as S
from course_utils.interp.circuits import HeadTrace
from course_utils.interp.heatmaps import plot_all_heads, plot_head
from course_utils.model.transformer import ModelConfig, TinyTransformer

matplotlib.use("Agg")

torch.manual_seed(0)
MODEL = TinyTransformer(ModelConfig(vocab_size=10, max_len=8, d_model=8, num_heads=2, num_layers=2)).eval()
TOKENS = torch.tensor([[1, 2, 3, 4, 1, 2], [2, 3, 4, 1, 2, 3]])
OUTPUTS = A.head_outputs(MODEL, TOKENS)  # (L, B, h, T, dk)
ROWS = torch.zeros(1, 2, dtype=torch.long)
EMPTY_BATCH = torch.full((0, 2, 4, 4), 0.25)
META = "meta"


def _with_inf(x: torch.Tensor) -> torch.Tensor:
    x = x.clone()
    x.view(-1)[0] = float("inf")
    return x


def _with(x: torch.Tensor, value: int) -> torch.Tensor:
    x = x.clone()
    x[0, 0] = value
    return x


def _trace(**change: object) -> HeadTrace:
    fields = dict(logits=torch.zeros(1, 3, 5), attention=[torch.full((1, 2, 3, 3), 1 / 3)],
                  head_outputs=[torch.zeros(1, 2, 3, 4)], residual=[torch.zeros(1, 3, 4)] * 2)
    return HeadTrace(**(fields | change))


STREAM, HEADS_OUT = torch.zeros(2, 6, 8), torch.zeros(2, 2, 6, 4)

CASES: list[tuple[str, Callable[[], object], type, list[str]]] = [
    # empty batch reaches a torch reduction
    *[(f"{fn.__name__} empty batch", call, ValueError, ["weights", "(0, 2, 4, 4)"]) for fn, call in [
        (S.previous_token_score, lambda: S.previous_token_score(EMPTY_BATCH)),
        (S.first_token_score, lambda: S.first_token_score(EMPTY_BATCH)),
        (S.previous_token_by_position, lambda: S.previous_token_by_position(EMPTY_BATCH)),
        (S.induction_score, lambda: S.induction_score(EMPTY_BATCH, 2, start=0)),
        (S.agreement_score, lambda: S.agreement_score(EMPTY_BATCH, 2, 1)),
        (S.attention_mass, lambda: S.attention_mass(EMPTY_BATCH, 2, torch.ones(4, dtype=torch.bool))),
    ]],
    # wrong container type / NaN in mean_by_group, chance above the threshold
    ("mean_by_group lone number", lambda: S.mean_by_group({"a": [0.1, 0.2], "b": 1}, {"g": [0, 1]}),
     ValueError, ["values['b']", "1-D", "int 1"]),
    ("mean_by_group NaN", lambda: S.mean_by_group({"a": [float("nan"), 0.2]}, {"g": [0, 1]}),
     ValueError, ["values['a']", "NaN", "sequence 0"]),
    ("role_verdicts chance above threshold", lambda: S.role_verdicts(
        {"previous token": torch.rand(2, 2)}, chance={"previous token": 0.9}),
     ValueError, ["chance['previous token']", "0.9", "threshold = 0.5"]),
    # meta tensors reach a value read; int64 / inf head outputs
    ("resampled_one_at_a_time meta reference_outputs", lambda: P.resampled_one_at_a_time(
        MODEL, TOKENS, OUTPUTS.to(META), ROWS, [(0, 0)]), ValueError, ["reference_outputs", "meta"]),
    ("resampled_one_at_a_time int64 reference_outputs", lambda: P.resampled_one_at_a_time(
        MODEL, TOKENS, OUTPUTS.long(), ROWS, [(0, 0)]), TypeError, ["reference_outputs", "torch.int64"]),
    ("resampled_one_at_a_time inf reference_outputs", lambda: P.resampled_one_at_a_time(
        MODEL, TOKENS, _with_inf(OUTPUTS), ROWS, [(0, 0)]), ValueError, ["reference_outputs", "inf"]),
    ("resampled_outputs int64 reference_outputs", lambda: P.resampled_outputs(
        MODEL, torch.tensor([6]), TOKENS, torch.tensor([6, 6]), 6, generator=torch.Generator(),
        reference_outputs=OUTPUTS.long()), TypeError, ["reference_outputs", "torch.int64"]),
    ("resampled_one_at_a_time meta rows", lambda: P.resampled_one_at_a_time(
        MODEL, TOKENS, OUTPUTS, ROWS.to(META), [(0, 0)]), ValueError, ["rows", "meta"]),
    ("EvaluationAt meta positions", lambda: P.EvaluationAt(
        TOKENS, lambda logits: {"a": 1.0}, torch.zeros(2, dtype=torch.long, device=META)),
     ValueError, ["EvaluationAt.positions", "meta"]),
    ("losses_along_orders meta targets", lambda: P.losses_along_orders(
        MODEL, TOKENS, TOKENS.to(META), [[(0, 0)]], 1), ValueError, ["targets", "meta"]),
    # token ids below 0 and targets that are neither ids nor -100
    ("Evaluation negative token", lambda: A.Evaluation(_with(TOKENS, -1), lambda logits: {"a": 1.0}),
     ValueError, ["Evaluation.tokens", "-1"]),
    ("EvaluationAt negative token", lambda: P.EvaluationAt(
        _with(TOKENS, -1), lambda logits: {"a": 1.0}, torch.zeros(2, dtype=torch.long)),
     ValueError, ["EvaluationAt.tokens", "-1"]),
    ("loss_evaluation negative token", lambda: A.loss_evaluation(_with(TOKENS, -1), TOKENS),
     ValueError, ["tokens", "-1"]),
    ("loss_evaluation negative target", lambda: A.loss_evaluation(TOKENS, _with(TOKENS, -1)),
     ValueError, ["targets", "-1", "-100"]),
    ("loss_evaluation meta targets", lambda: A.loss_evaluation(TOKENS, TOKENS.to(META)),
     ValueError, ["targets", "meta"]),
    # NaN scores; prunable_counts' known and map_fn
    ("measure NaN score", lambda: A.measure(MODEL, A.Evaluation(TOKENS, lambda logits: {"a": float("nan")})),
     ValueError, ["evaluations[0].score", "'a'", "nan"]),
    ("prunable_counts known int values", lambda: P.prunable_counts(
        MODEL, A.loss_evaluation(TOKENS, TOKENS), [[(0, 0)]], lambda x: True, known={frozenset({(0, 0)}): 3}),
     TypeError, ["known[{(0, 0)}]", "int 3"]),
    ("prunable_counts map_fn short", lambda: P.prunable_counts(
        MODEL, A.loss_evaluation(TOKENS, TOKENS), [[(0, 0)]], lambda x: True, map_fn=lambda f, xs: []),
     ValueError, ["map_fn", "0 results for 1 parts"]),
    ("prunable_counts map_fn part short", lambda: P.prunable_counts(
        MODEL, A.loss_evaluation(TOKENS, TOKENS), [[(0, 0)]], lambda x: True, map_fn=lambda f, xs: [[]]),
     ValueError, ["map_fn's result 0", "1 measurements", "0 entries"]),
    # KeptRun checks its fields
    ("KeptRun inputs None", lambda: A.KeptRun(None, [HEADS_OUT]), TypeError, ["KeptRun.inputs", "NoneType"]),
    ("KeptRun inputs str", lambda: A.KeptRun("abc", [HEADS_OUT]), TypeError, ["KeptRun.inputs", "str"]),
    ("KeptRun inputs empty", lambda: A.KeptRun([], []), ValueError, ["KeptRun.inputs", "empty"]),
    ("KeptRun inputs element None", lambda: A.KeptRun([None], []),
     TypeError, ["KeptRun.inputs[0]", "NoneType"]),
    ("KeptRun inputs nested", lambda: A.KeptRun([[STREAM]], []), TypeError, ["KeptRun.inputs[0]", "list"]),
    ("KeptRun heads None", lambda: A.KeptRun([STREAM], None), TypeError, ["KeptRun.heads", "NoneType"]),
    ("KeptRun heads str", lambda: A.KeptRun([STREAM], "abc"), TypeError, ["KeptRun.heads", "str"]),
    ("KeptRun heads element None", lambda: A.KeptRun([STREAM], [None]), TypeError, ["KeptRun.heads[0]"]),
    ("KeptRun heads nested", lambda: A.KeptRun([STREAM], [[HEADS_OUT]]),
     TypeError, ["KeptRun.heads[0]", "list"]),
    ("KeptRun heads one too many", lambda: A.KeptRun([STREAM], [HEADS_OUT, HEADS_OUT]),
     ValueError, ["KeptRun.heads", "got 2"]),
    ("KeptRun heads other batch", lambda: A.KeptRun([STREAM, STREAM], [HEADS_OUT[:1]]),
     ValueError, ["KeptRun.heads[0]", "B = 2", "(1, 2, 6, 4)"]),
    # HeadTrace holds finite numbers
    ("HeadTrace NaN logits", lambda: _trace(logits=torch.full((1, 3, 5), float("nan"))),
     ValueError, ["HeadTrace.logits", "nan"]),
    ("HeadTrace inf logits", lambda: _trace(logits=_with_inf(torch.zeros(1, 3, 5))),
     ValueError, ["HeadTrace.logits", "inf"]),
    ("HeadTrace NaN residual", lambda: _trace(residual=[torch.zeros(1, 3, 4),
                                                          torch.full((1, 3, 4), float("nan"))]),
     ValueError, ["HeadTrace.residual[1]", "nan"]),
    # heatmaps: None labels, negative weights
    ("plot_head None label", lambda: plot_head(torch.eye(3), ["a", None, "c"]),
     TypeError, ["tokens", "None", "index 1"]),
    ("plot_head None key label", lambda: plot_head(torch.eye(3), ["a", "b", "c"],
                                                    key_tokens=["a", "b", None]),
     TypeError, ["key_tokens", "None", "index 2"]),
    ("plot_head negative weights", lambda: plot_head(-torch.eye(3), ["a", "b", "c"]),
     ValueError, ["weights", "[0, 1]", "-1"]),
    ("plot_all_heads None label", lambda: plot_all_heads([torch.eye(3).expand(2, 3, 3)], [None, "b", "c"]),
     TypeError, ["tokens", "None", "index 0"]),
]


@pytest.mark.parametrize("call, error, words", [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_refused_naming_the_argument(call: Callable[[], object], error: type, words: list[str]) -> None:
    with pytest.raises(error) as caught:
        call()
    for word in words:
        assert word in str(caught.value), (word, str(caught.value))


def test_documented_uses_still_accepted() -> None:
    """What the docstrings keep: an empty attention list (keep_attention=False), a KeptRun without
    head outputs, and ids beyond a vocabulary no model has given yet."""
    assert _trace(attention=[]).attention == ()
    assert A.KeptRun([STREAM, STREAM], []).heads == []
    assert A.KeptRun([STREAM, STREAM], [HEADS_OUT]).inputs[0] is STREAM
    assert A.loss_evaluation(_with(TOKENS, 10**6), _with(TOKENS, -100)).tokens[0, 0] == 10**6
