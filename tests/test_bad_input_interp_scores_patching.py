"""Bad input to the interpretability analyses: course_utils.interp.scores (head scores, verdicts,
best_head), ablation (Evaluation, measure, head_importance), patching (direct logit attribution,
path patching, prunable_counts, resampled outputs) and circuits (trace_heads, HeadTrace). Token ids
outside the vocabulary, inference or meta tensors, NaN weights and scores, and empty orders.

Moved here from the QA batteries' files (issue 38 and later batteries), grouped by the code under test;
a `# -- battery N` line marks where each battery's cases begin. Helpers shared with other bad-input
files live in tests/bad_input_cases.py."""

from __future__ import annotations

import dataclasses
import importlib
import re

import matplotlib
import pytest
import torch
from bad_input_cases import Case, assert_named, raises_naming, small_model, tiny_model, train_mode_tiny_model

from course_utils.interp import ablation, circuits, patching
from course_utils.interp import ablation as A
from course_utils.interp import ablation as AB
from course_utils.interp import circuits as CI
from course_utils.interp import patching as P
from course_utils.interp import patching as PT
from course_utils.interp import scores as S
from course_utils.interp.ablation import Evaluation, average_loss, head_outputs, measure
from course_utils.interp.circuits import HeadTrace, ov_copying_score
from course_utils.interp.patching import (
    direct_logit_attribution,
    losses_along_orders,
    path_patched_logits,
    prunable_counts,
    resampled_logits,
    resampled_outputs,
)
from course_utils.interp.scores import agreement_score, mean_by_group
from course_utils.model import transformer as TF
from course_utils.model.transformer import ModelConfig, TinyTransformer
from course_utils.tasks.synthetic import AgreementTask

matplotlib.use("Agg")


# -- battery 5 ---------------------------------------------------------------------------------------

SM = small_model()


TOK = torch.tensor([[1, 2, 3, 4, 1, 2]])


INTERP_CASES = [
    Case("ablated_logits/zero with means",
         lambda: A.ablated_logits(SM, TOK, [(0, 0)], method="zero", means=A.mean_head_outputs(SM, TOK)),
         ValueError, ["means", "method='mean'", "'zero'"]),
    Case("role_verdicts/unknown role", lambda: S.role_verdicts({"zzz": torch.rand(2, 2)}), ValueError,
         ["'zzz'", "'induction'", "chance"]),
    Case("role_verdicts/typo", lambda: S.role_verdicts({"inductin": torch.rand(2, 2)}), ValueError,
         ["did you mean 'induction'"]),
    Case("role_verdicts/chance for a missing role",
         lambda: S.role_verdicts({"induction": torch.rand(2, 2)}, chance={"induction": 0.1, "firs": 0.2}),
         ValueError, ["chance", "['firs']", "['induction']"]),
    Case("final_scale/positions oob", lambda: P.final_scale(SM, TOK, torch.tensor([9])), ValueError,
         ["positions", "0..5", "9"]),
    Case("final_scale/positions neg", lambda: P.final_scale(SM, TOK, torch.tensor([-1])), ValueError,
         ["positions", "0..5", "-1"]),
    Case("resampled_rows/empty ref",
         lambda: P.resampled_rows(torch.tensor([3]), torch.tensor([], dtype=torch.long),
                                  generator=torch.Generator()),
         ValueError, ["reference_lengths", "empty"]),
    Case("resampled_rows/no match",
         lambda: P.resampled_rows(torch.tensor([3]), torch.tensor([2, 4]), generator=torch.Generator()),
         ValueError, ["length 3", "[2, 4]"]),
    Case("frozen_final_norm/shape",
         lambda: CI.frozen_final_norm(SM, torch.randn(1, 6, 8), torch.randn(1, 5, 8)), ValueError,
         ["component (1, 5, 8)", "stream (1, 6, 8)", "broadcast"]),
]


@pytest.mark.parametrize("case", INTERP_CASES, ids=lambda c: c.name)
def test_interp_bad_input_is_named(case):
    assert_named(case)


def test_the_interp_controls_still_work():
    means = A.mean_head_outputs(SM, TOK)
    zero = A.ablated_logits(SM, TOK, [(0, 0)])
    assert not torch.equal(zero, A.ablated_logits(SM, TOK, [(0, 0)], method="mean", means=means))
    table = A.ablation_table(SM, [A.Evaluation(TOK, lambda logits: {"m": float(logits.mean())})],
                             {"off": [(0, 0)]}, method="zero", means=means)  # a loop may pass both
    assert table.loc["off", "m"] == pytest.approx(float(zero.mean()))
    own = S.role_verdicts({"mine": torch.rand(2, 2)}, chance={"mine": 0.25})
    assert own[0].startswith("mine: best")
    assert P.final_scale(SM, TOK, torch.tensor([5])).shape == (1,)
    assert CI.frozen_final_norm(SM, torch.randn(1, 6, 8), torch.randn(3, 1, 6, 8)).shape == (3, 1, 6, 8)


# -- battery 6 (interp) ------------------------------------------------------------------------------

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


# -- battery 7 (b) -----------------------------------------------------------------------------------

# -- interp: a score's name, rounding, chance levels (rows 41-43) -------------------------------
def _interp_cases() -> list[Case]:
    from course_utils.interp import ablation as AB
    from course_utils.interp import scores as SC

    tokens = torch.zeros(2, 4, dtype=torch.long)
    grid = {"previous token": torch.full((2, 4), 0.6)}
    return [
        Case("loss_evaluation name=3", lambda: AB.loss_evaluation(tokens, tokens, 3),
             TypeError, ["name", "non-empty str", "int 3"]),
        Case("loss_evaluation name=''", lambda: AB.loss_evaluation(tokens, tokens, ""),
             ValueError, ["name", "non-empty str", "''"]),
        Case("loss_evaluation float targets", lambda: AB.loss_evaluation(tokens, tokens.float()),
             TypeError, ["targets", "torch.long", "torch.float32"]),
        Case("mean_by_group decimals=-1",
             lambda: SC.mean_by_group({"a": [1.0, 2.0]}, {"g": ["x", "y"]}, decimals=-1),
             ValueError, ["decimals", "0..15", "-1"]),
        Case("mean_by_group values list", lambda: SC.mean_by_group([1.0, 2.0], {"g": ["x", "y"]}),
             TypeError, ["values", "dict", "list"]),
        Case("role_verdicts chance 2.0", lambda: SC.role_verdicts(grid, chance={"previous token": 2.0}),
             ValueError, ["chance['previous token']", "(0, 1]", "2.0"]),
        Case("role_verdicts chance 0", lambda: SC.role_verdicts(grid, chance={"previous token": 0.0}),
             ValueError, ["chance['previous token']", "(0, 1]", "0.0"]),
    ]


@pytest.mark.parametrize("case", _interp_cases(), ids=lambda c: c.name)
def test_interp_helpers_refuse_a_bad_name_rounding_or_chance(case):
    assert_named(case)


def test_interp_helpers_still_take_good_values():
    from course_utils.interp import ablation as AB
    from course_utils.interp import scores as SC

    tokens = torch.zeros(2, 4, dtype=torch.long)
    assert AB.loss_evaluation(tokens, tokens, "loss_copy").score(torch.zeros(2, 4, 3)).keys() == {"loss_copy"}
    table = SC.mean_by_group({"a": [1.0, 2.0]}, {"g": ["x", "y"]}, decimals=0)
    assert table["a"].tolist() == [1.0, 2.0] and table["sentences"].tolist() == [1, 1]
    verdict = SC.role_verdicts({"previous token": torch.full((2, 4), 0.6)}, chance={"previous token": 0.25})
    assert "2.4x chance" in verdict[0]


# -- battery 9b --------------------------------------------------------------------------------------

def test_the_bounded_interp_helpers_still_take_what_they_should():
    import math

    import torch

    from course_utils.interp import scores as S

    table = S.mean_by_group({"a": [1.0, 2.0, 4.0]}, {"g": ["x", "y", "y"]}, decimals=15)
    assert table.loc["y", "a"] == 3.0 and table.loc["y", "sentences"] == 2
    assert S.mean_by_group({"a": [1.0, 2.0]}, {"g": (g for g in (0, 0))}).loc[0, "a"] == 1.5  # any iterable
    assert 0 < S.chance_level("first token", 8, start=0) < 1
    queries, keys = S.induction_positions(9, 3, start=1)
    assert queries.tolist() == [4, 5, 6, 7, 8] and keys.tolist() == [2, 3, 4, 5, 6]
    table = S.head_score_table({"induction": torch.rand(2, 2)}, decimals=15)
    assert not math.isnan(table["top score"].iloc[0])


# -- battery 12 --------------------------------------------------------------------------------------

def test_measure_zeroed_sets_names_head_sets():
    from course_utils.interp import patching as P

    model = TF.TinyTransformer(TF.ModelConfig(vocab_size=10, max_len=8, d_model=8, num_heads=2, num_layers=1))
    tokens = torch.randint(0, 10, (2, 6), generator=torch.Generator().manual_seed(0))
    evaluation = P.Evaluation(tokens, lambda logits: {"mean": float(logits.mean())})
    with pytest.raises(TypeError, match=r"head_sets must be a list of head sets, .* got NoneType None"):
        P.measure_zeroed_sets(model, evaluation, None)
    assert len(P.measure_zeroed_sets(model, evaluation, [[(0, 1)], []])) == 2


# -- battery 13 --------------------------------------------------------------------------------------

# -- b13 silent: role scores and the arguments a role ignores ----------------------------------
def _scores_cases():
    from course_utils.interp import scores as S

    return [
        Case("verdict above 1", lambda: S.verdict(3.0), ValueError, ["score", "[0, 1]", "3.0"]),
        Case("verdict negative", lambda: S.verdict(-0.5), ValueError, ["score", "[0, 1]", "-0.5"]),
        Case("ideal_pattern period str", lambda: S.ideal_pattern("self", 4, period="4"), TypeError,
             ["period", "int", "str '4'"]),
        Case("ideal_pattern start float", lambda: S.ideal_pattern("first token", 4, start=1.5), TypeError,
             ["start", "int", "float 1.5"]),
        Case("chance_level period float", lambda: S.chance_level("previous token", 8, period=2.0),
             TypeError, ["period", "int", "float 2.0"]),
    ]


@pytest.mark.parametrize("case", _scores_cases(), ids=lambda c: c.name)
def test_scores_refuse_what_they_would_have_ignored(case):
    assert_named(case)


def test_scores_controls():
    from course_utils.interp import scores as S

    assert S.verdict(1.0) == "present" and S.verdict(0.0) == "absent"
    assert S.ideal_pattern("induction", 6, period=3).shape == (6, 6)
    assert 0.0 < S.chance_level("previous token", 8, period=None) < 1.0


# -- battery 14 (fix44a) -----------------------------------------------------------------------------

def _trace_parts(B: int = 1, T: int = 3, layers: int = 2) -> dict:
    return {"logits": torch.zeros(B, T, 5), "attention": [torch.zeros(B, 2, T, T) for _ in range(layers)],
            "head_outputs": [torch.zeros(B, 2, T, 4) for _ in range(layers)],
            "residual": [torch.zeros(B, T, 4) for _ in range(layers + 1)]}


@pytest.mark.parametrize(("change", "label"), [
    ({"logits": torch.zeros(3, 5)}, "HeadTrace.logits"),
    ({"residual": [torch.zeros(1, 3, 4)] * 2}, "HeadTrace.residual must hold 3"),
    ({"attention": [torch.zeros(1, 2, 3, 3)]}, "HeadTrace.attention must be empty"),
    ({"head_outputs": [torch.zeros(1, 2, 3, 4), torch.zeros(2, 3, 4)]}, "HeadTrace.head_outputs[1]"),
    ({"head_outputs": [torch.zeros(1, 2, 3, 4), torch.zeros(1, 2, 7, 4)]}, "HeadTrace.head_outputs[1]"),
    ({"residual": [torch.zeros(1, 3, 4), torch.zeros(2, 3, 4), torch.zeros(1, 3, 4)]},
     "HeadTrace.residual[1]"),
])
def test_head_trace_refuses_parts_that_do_not_fit_its_logits(change: dict, label: str) -> None:
    with pytest.raises((TypeError, ValueError), match=re.escape(label)):
        HeadTrace(**{**_trace_parts(), **change})


def test_head_trace_without_attention_is_accepted() -> None:
    assert HeadTrace(**{**_trace_parts(), "attention": []}).attention == ()


@pytest.mark.parametrize("cls_name", ["ablation.Evaluation", "patching.EvaluationAt"])
def test_evaluation_refuses_a_score_of_the_wrong_arity(cls_name: str) -> None:
    module, name = cls_name.split(".")
    cls = getattr(importlib.import_module(f"course_utils.interp.{module}"), name)
    extra = {"positions": torch.zeros(1, dtype=torch.long)} if name == "EvaluationAt" else {}
    with pytest.raises(TypeError, match=rf"{name}\.score .* cannot take 1"):
        cls(tokens=torch.zeros(1, 3, dtype=torch.long), score=lambda: {}, **extra)
    assert "runs when the evaluation does" in " ".join(cls.__doc__.split()) or name == "EvaluationAt"


def test_kept_run_is_internal_as_documented() -> None:
    from course_utils.interp import ablation

    assert "KeptRun" not in ablation.__all__
    assert "checked when built" in " ".join(ablation.KeptRun.__doc__.split())  # since battery 16


# -- battery 14 (fix44c) -----------------------------------------------------------------------------

# -- means given with method='zero': unused as documented (one call loops over both methods), but
# a means that method='mean' could not use is refused, naming both ------------------------------
def _ablation_setup():
    torch.manual_seed(0)
    model = TinyTransformer(ModelConfig(vocab_size=10, max_len=8, d_model=8, num_heads=2, num_layers=1))
    tokens = torch.randint(0, 10, (2, 6))
    targets = torch.randint(0, 10, (2, 6))
    return model, tokens, AB.loss_evaluation(tokens, targets)


def _zero_with(means):
    model, tokens, evaluation = _ablation_setup()
    where = torch.ones(6, dtype=torch.bool)
    return {
        "measure": lambda: AB.measure(model, evaluation, [(0, 0)], means=means),
        "ablation_table": lambda: AB.ablation_table(model, evaluation, {"a": [(0, 0)]}, means=means),
        "pruning_curve": lambda: AB.pruning_curve(model, evaluation, [(0, 0), (0, 1)], means=means),
        "prunable_counts": lambda: PT.prunable_counts(model, evaluation, [[(0, 0)]], lambda n: True,
                                                      means=means),
        "position_ablated_logits": lambda: PT.position_ablated_logits(model, tokens, [(0, 0)], where,
                                                                      means=means),
    }


@pytest.mark.parametrize("means", ["x", object(), float("nan"), [], -1],
                         ids=["str", "obj", "nan", "list", "neg"])
@pytest.mark.parametrize("function", list(_zero_with(None)))
def test_zero_ablation_refuses_means_it_could_not_use(function, means):
    with pytest.raises(TypeError) as info:
        _zero_with(means)[function]()
    message = str(info.value)
    assert "means" in message and "method='zero'" in message and "method='mean'" in message, message
    assert type(means).__name__ in message, message


@pytest.mark.parametrize("function", list(_zero_with(None)))
def test_zero_ablation_still_takes_real_means_unused(function):
    model, tokens, _ = _ablation_setup()
    means = AB.mean_head_outputs(model, tokens)
    _zero_with(means)[function]()  # the documented loop over both methods with one means
    _zero_with(None)[function]()


# -- duplicates refused where check_distinct exists (a repeat would be run or drawn twice) -------
def _pair(text):
    words = text.split()
    return words, [torch.rand(1, 2, len(words), len(words))]


def _dup_cases():
    from course_utils.interp.heatmaps import AttentionExplorer
    from course_utils.tasks.synthetic import InductionTask

    model, tokens, _ = _ablation_setup()
    where = torch.ones(6, dtype=torch.bool)
    return [
        Case("position_ablated_logits/heads repeated",
             lambda: PT.position_ablated_logits(model, tokens, [(0, 0), (0, 0)], where), ValueError,
             ["heads", "lists a head twice", "L0H0 (0, 0)"]),
        Case("InductionTask.sample/periods repeated",
             lambda: InductionTask().sample(4, torch.Generator().manual_seed(0), periods=(2, 2)), ValueError,
             ["periods", "distinct", "repeats [2]"]),
        Case("AttentionExplorer/sentences repeated", lambda: AttentionExplorer(_pair, ["a b", "a b"], 1, 2),
             ValueError, ["sentences", "distinct", "repeats ['a b']"]),
        Case("AttentionExplorer/sentence an int", lambda: AttentionExplorer(_pair, [10**12], 1, 2),
             TypeError, ["sentences[0]", "str", "int 1000000000000"]),
        Case("AttentionExplorer/sentences an int", lambda: AttentionExplorer(_pair, 3, 1, 2),
             TypeError, ["sentences", "list of example texts", "int 3"]),
    ]


@pytest.mark.parametrize("index", range(5))
def test_repeated_entries_and_wrong_sentences_are_refused(index):
    assert_named(_dup_cases()[index])


def test_distinct_entries_still_pass():
    from course_utils.interp.heatmaps import AttentionExplorer
    from course_utils.tasks.synthetic import InductionTask

    model, tokens, _ = _ablation_setup()
    logits = PT.position_ablated_logits(model, tokens, [(0, 0), (0, 1)], torch.ones(6, dtype=torch.bool))
    assert logits.shape == (2, 6, 10)
    batch = InductionTask().sample(4, torch.Generator().manual_seed(0), periods=(2, 3))
    assert set(batch.periods.tolist()) <= {2, 3}
    assert AttentionExplorer(_pair, ["a b", "a c"], 1, 2).sentences == ["a b", "a c"]


def test_prunable_counts_counts_a_repeated_order_as_documented():
    model, _, evaluation = _ablation_setup()
    order = [(0, 1), (0, 0)]
    calls = []
    counts, measured = PT.prunable_counts(model, evaluation, [order, order],
                                          lambda n: calls.append(n) or True)
    assert counts == [2, 2] and len(measured) == 2 and len(calls) == 4
    assert "repeat an order" in PT.prunable_counts.__doc__


# -- meta-device inputs named; the attention base class and run_with_cache say what is missing --
def _model():
    torch.manual_seed(0)
    return TinyTransformer(ModelConfig(vocab_size=10, max_len=8, d_model=8, num_heads=2, num_layers=1))


def _meta_and_base_cases():
    from course_utils.attention.hooks import run_with_cache
    from course_utils.attention.mha import MultiHeadAttention, MultiHeadAttentionBase
    from course_utils.interp.circuits import ov_copying_score
    from course_utils.tasks.synthetic import InductionTask, induction_accuracy
    from course_utils.tasks.worked_example import round_half_up

    batch = InductionTask().sample(4, torch.Generator().manual_seed(0))
    return [
        Case("ov_copying_score/meta model", lambda: ov_copying_score(_model().to("meta"), 0, [1, 2]),
             ValueError, ["model's weights", "meta device"]),
        Case("induction_accuracy/meta logits",
             lambda: induction_accuracy(torch.randn(4, batch.tokens.shape[1], 64, device="meta"), batch),
             ValueError, ["logits", "meta device"]),
        Case("round_half_up/meta", lambda: round_half_up(torch.ones(3, device="meta")), ValueError,
             ["x", "meta device"]),
        Case("MultiHeadAttentionBase()", lambda: MultiHeadAttentionBase(), TypeError,
             ["MultiHeadAttentionBase", "not a layer", "MultiHeadAttention(d_model, num_heads)"]),
        Case("run_with_cache/no inputs", lambda: run_with_cache(MultiHeadAttention(8, 2)), TypeError,
             ["run_with_cache", "MultiHeadAttention.forward", "query"]),
    ]


@pytest.mark.parametrize("index", range(5))
def test_meta_inputs_and_the_base_class_are_named(index):
    assert_named(_meta_and_base_cases()[index])


def test_meta_and_base_good_calls_still_work():
    from course_utils.attention.hooks import run_with_cache
    from course_utils.attention.mha import MultiHeadAttention
    from course_utils.interp.circuits import ov_copying_score
    from course_utils.tasks.worked_example import round_half_up

    assert ov_copying_score(_model(), 0, [1, 2]).shape == (2,)
    assert round_half_up(torch.tensor([0.25], dtype=torch.float64), 1).tolist() == pytest.approx([0.3])
    out, cache = run_with_cache(MultiHeadAttention(8, 2), torch.zeros(1, 3, 8))
    assert out[0].shape == (1, 3, 8) and "hook_pattern" in cache


# -- documented instead of refused: what the docstring says is what happens ---------------------
def test_frozen_final_norm_takes_a_component_with_extra_leading_dims_as_documented():
    from course_utils.interp.circuits import frozen_final_norm

    model, stream = _model(), torch.randn(2, 6, 8)
    parts = torch.randn(3, 2, 6, 8)  # one part per "head"
    each = torch.stack([frozen_final_norm(model, stream, p) for p in parts])
    assert torch.allclose(frozen_final_norm(model, stream, parts), each)
    assert frozen_final_norm(model, stream, parts[:1]).shape == (1, 2, 6, 8)
    assert "leading dims" in frozen_final_norm.__doc__


def test_loss_evaluation_leaves_the_vocabulary_check_to_the_model_as_documented():
    big = torch.full((2, 6), 10**6)
    evaluation = AB.loss_evaluation(big, big)
    assert "checked against a vocabulary where the evaluation meets one" in AB.loss_evaluation.__doc__
    assert_named(Case("measure/out of vocabulary", lambda: AB.measure(_model(), evaluation), ValueError,
                      ["tokens", "vocab_size=10", "1000000"]))


# -- battery 15 (fix45d) -----------------------------------------------------------------------------

def _tiny():
    from course_utils.model.transformer import ModelConfig, TinyTransformer
    torch.manual_seed(0)
    model = TinyTransformer(ModelConfig(vocab_size=12, max_len=10, d_model=16, num_heads=4, num_layers=1))
    return model.eval(), torch.randint(0, 12, (2, 5))


@pytest.mark.parametrize("meta", ["model", "tokens", "lengths", "reference", "reference_lengths"])
def test_resampled_logits_refuses_meta_naming_the_argument(meta):
    from course_utils.interp.patching import resampled_logits
    model, tokens = _tiny()
    args = {"model": model, "tokens": tokens, "lengths": torch.tensor([5, 5]), "reference": tokens,
            "reference_lengths": torch.tensor([5, 5])}
    args[meta] = args[meta].to("meta")
    with pytest.raises(ValueError, match=rf"{meta}.* is on the meta device"):
        resampled_logits(*args.values(), [(0, 0)], generator=torch.Generator().manual_seed(0))


@pytest.mark.parametrize("meta", ["model", "tokens", "positions", "directions", "frozen_scale"])
def test_patching_direct_logit_attribution_refuses_meta_naming_the_argument(meta):
    from course_utils.interp.patching import direct_logit_attribution
    model, tokens = _tiny()
    args = {"model": model, "tokens": tokens, "positions": torch.tensor([4, 4]),
            "directions": torch.randn(12), "frozen_scale": torch.ones(2)}
    args[meta] = args[meta].to("meta")
    with pytest.raises(ValueError, match=rf"{meta}.* is on the meta device"):
        direct_logit_attribution(*list(args.values())[:4], frozen_scale=args["frozen_scale"])


@pytest.mark.parametrize("field", ["logits", "head_outputs", "residual"])
def test_a_head_trace_on_the_meta_device_is_refused_naming_the_field(field):
    import dataclasses

    from course_utils.interp.circuits import trace_heads
    model, tokens = _tiny()
    trace = trace_heads(model, tokens)
    value = getattr(trace, field)
    value = value.to("meta") if isinstance(value, torch.Tensor) else [t.to("meta") for t in value]
    with pytest.raises(ValueError, match=rf"HeadTrace\.{field}.* is on the meta device"):
        dataclasses.replace(trace, **{field: value})


# -- 6. functions passed in are checked against the arguments they will get -----------------------
def test_patching_table_refuses_a_metric_that_cannot_take_the_logits():
    from course_utils.interp.patching import patching_table
    model, tokens = _tiny()
    with pytest.raises(TypeError, match=r"metric must be a function logits .* cannot take 1"):
        patching_table(model, tokens, tokens, lambda: 1.0)


def test_prunable_counts_refuses_within_and_map_fn_of_the_wrong_arity():
    from course_utils.interp.ablation import loss_evaluation
    from course_utils.interp.patching import prunable_counts
    model, tokens = _tiny()
    evaluation = loss_evaluation(tokens[:, :-1], tokens[:, 1:])
    with pytest.raises(TypeError, match=r"within must be a function .* cannot take 1"):
        prunable_counts(model, evaluation, [[(0, 0)]], lambda: True)
    with pytest.raises(TypeError, match=r"map_fn must be a function like map .* cannot take 2"):
        prunable_counts(model, evaluation, [[(0, 0)]], lambda numbers: True, map_fn=lambda parts: parts)


# -- battery 17 (fix47q) -----------------------------------------------------------------------------

# -- S5: direct_logit_attribution's directions must hold floats --------------------------
def _model_and_tokens():
    from course_utils.model.transformer import ModelConfig, TinyTransformer

    torch.manual_seed(0)
    config = ModelConfig(vocab_size=20, max_len=16, d_model=16, num_heads=2, num_layers=2)
    model = TinyTransformer(config).eval()
    tokens = torch.randint(0, 20, (2, 8), generator=torch.Generator().manual_seed(1))
    return model, tokens


@pytest.mark.parametrize("dtype", [torch.int64, torch.int32, torch.bool, torch.complex64])
def test_direct_logit_attribution_refuses_non_float_directions(dtype):
    from course_utils.interp.patching import direct_logit_attribution

    model, tokens = _model_and_tokens()
    directions = torch.ones(2, 20, dtype=dtype)
    wanted = rf"directions must be a float tensor.*got a {dtype} tensor of shape \(2, 20\)"
    with pytest.raises(TypeError, match=wanted):
        direct_logit_attribution(model, tokens, torch.tensor([7, 7]), directions)


# -- O9: a bad list of heads names the argument or entry it came from --------------------
def _evaluation():
    from course_utils.interp.ablation import Evaluation

    _, tokens = _model_and_tokens()
    return Evaluation(tokens, lambda logits: {"mean": float(logits.mean())})


def _heads_call(where: str, bad: object):
    from course_utils.interp import ablation, patching

    model, tokens = _model_and_tokens()
    calls = {
        "cases['zz_bogus']": lambda: ablation.ablation_table(model, _evaluation(),
                                                             {"none": [], "zz_bogus": bad}),
        "order": lambda: ablation.pruning_curve(model, _evaluation(), bad),
        "head_sets[1]": lambda: patching.measure_zeroed_sets(model, _evaluation(), [[], bad]),
        "orders[0]": lambda: patching.losses_along_orders(model, tokens, tokens, [bad], 0),
        "receivers": lambda: patching.path_patched_logits(model, tokens, None, [(0, 0)], bad),
    }
    return calls[where]


@pytest.mark.parametrize("where", ["cases['zz_bogus']", "order", "head_sets[1]", "orders[0]", "receivers"])
@pytest.mark.parametrize("bad, error, arrived", [(1, TypeError, "got int 1"),
                                                 ([(0, 1.5)], TypeError, "got (0, 1.5)"),
                                                 ([(5, 0)], ValueError, "head (5, 0)")])
def test_a_bad_list_of_heads_names_where_it_came_from(where, bad, error, arrived):
    with pytest.raises(error) as raised:
        _heads_call(where, bad)()
    assert where in str(raised.value) and arrived in str(raised.value)


# -- O1: patching/scores messages also say what arrived -----------------------------------
def _arrived_call(target: str, bad: object):
    from course_utils.interp import patching, scores

    model, tokens = _model_and_tokens()
    lengths = torch.tensor([8, 6])

    def gen() -> torch.Generator:
        return torch.Generator().manual_seed(0)

    calls = {
        "resampled_outputs reference_lengths": lambda: patching.resampled_outputs(
            model, lengths, tokens, bad, 8, generator=gen()),
        "resampled_outputs reference_outputs": lambda: patching.resampled_outputs(
            model, lengths, tokens, lengths, 8, generator=gen(), reference_outputs=bad),
        "resampled_logits reference_lengths": lambda: patching.resampled_logits(
            model, tokens, lengths, tokens, bad, [(0, 0)], generator=gen()),
        "resampled_logits reference_outputs": lambda: patching.resampled_logits(
            model, tokens, lengths, tokens, lengths, [(0, 0)], generator=gen(), reference_outputs=bad),
        "losses_along_orders targets": lambda: patching.losses_along_orders(
            model, tokens, bad, [[(0, 0)]], 1),
        "sequence_gate_gradients targets": lambda: patching.sequence_gate_gradients(model, tokens, bad),
        "final_scale positions": lambda: patching.final_scale(model, tokens, bad),
        "head_score_table scores": lambda: scores.head_score_table(bad),
        "role_verdicts scores": lambda: scores.role_verdicts(bad),
    }
    return calls[target]


_TENSOR_ARGS = ["resampled_outputs reference_lengths", "resampled_logits reference_lengths",
                "resampled_outputs reference_outputs", "resampled_logits reference_outputs",
                "losses_along_orders targets", "sequence_gate_gradients targets", "final_scale positions"]


_BAD_TENSORS = [
    (None, "got NoneType"), ([8, 6], "got list"), ("abc", "got str"),
    (torch.zeros(1, 2, dtype=torch.long), "got a torch.int64 tensor of shape (1, 2)"),
    (torch.zeros(0, dtype=torch.float32), "got a torch.float32 tensor of shape (0)"),
]


# reference_outputs=None is the default (the outputs are computed), so it is left out there
@pytest.mark.parametrize("target, bad, arrived", [
    (target, bad, arrived) for target in _TENSOR_ARGS for bad, arrived in _BAD_TENSORS
    if not (bad is None and target.endswith("reference_outputs"))])
def test_patching_messages_say_what_arrived(target, bad, arrived):
    with pytest.raises((TypeError, ValueError)) as raised:
        _arrived_call(target, bad)()
    message = str(raised.value)
    assert f"{target.split()[1]} must be" in message and arrived in message


@pytest.mark.parametrize("target", ["head_score_table scores", "role_verdicts scores"])
@pytest.mark.parametrize("bad", [None, [], {}, True])
def test_score_tables_say_what_arrived(target, bad):
    with pytest.raises(ValueError) as raised:
        _arrived_call(target, bad)()
    assert "scores must be a non-empty dict" in str(raised.value)
    assert f"got {type(bad).__name__} {bad!r}" in str(raised.value)


# -- battery 18 (fix48q) -----------------------------------------------------------------------------

V, MAX_LEN = 16, 12


MODEL = tiny_model()


TOKENS = torch.randint(0, V, (3, 6), generator=torch.Generator().manual_seed(1))


TOO_HIGH = TOKENS + V  # ids V..2V-1


TOO_LONG = torch.zeros(2, MAX_LEN + 3, dtype=torch.long)


def _loss(tokens: torch.Tensor) -> ablation.Evaluation:
    return ablation.Evaluation(tokens, lambda logits: {"mean": float(logits.mean())})


def _metric(logits: torch.Tensor) -> float:
    return float(logits.mean())


# -- g01: ids checked under the caller's argument name, before the forward -----------------
IDS_CASES = {
    "mean_head_outputs": (lambda t: ablation.mean_head_outputs(MODEL, t), "reference_tokens"),
    "measure one": (lambda t: ablation.measure(MODEL, _loss(t)), "evaluations.tokens"),
    "measure list": (lambda t: ablation.measure(MODEL, [_loss(TOKENS), _loss(t)]), "evaluations[1].tokens"),
    "ablation_table": (lambda t: ablation.ablation_table(MODEL, [_loss(TOKENS), _loss(t)], {"none": []}),
                       "evaluations[1].tokens"),
    "pruning_curve": (lambda t: ablation.pruning_curve(MODEL, _loss(t), [(0, 0)]), "evaluations.tokens"),
    "measure_zeroed_sets": (lambda t: patching.measure_zeroed_sets(MODEL, _loss(t), [[(0, 0)]]),
                            "evaluations.tokens"),
    "patching_table": (lambda t: patching.patching_table(MODEL, TOKENS[:, :t.shape[1]], t, _metric),
                       "source_tokens"),
}


@pytest.mark.parametrize("case", list(IDS_CASES))
def test_ids_beyond_the_vocabulary_are_named_as_the_callers_argument(case: str) -> None:
    call, name = IDS_CASES[case]
    with pytest.raises(ValueError) as info:
        call(TOO_HIGH)
    message = str(info.value)
    assert message.startswith(f"{name} must hold ids in [0, vocab_size={V})"), message
    assert f"max {int(TOO_HIGH.max())}" in message


@pytest.mark.parametrize("case", ["mean_head_outputs", "measure list", "patching_table"])
def test_sequences_beyond_max_len_are_named_as_the_callers_argument(case: str) -> None:
    call, name = IDS_CASES[case]
    if case == "patching_table":
        call = (lambda t: patching.patching_table(MODEL, t, t + 1, _metric))
        name = "tokens"
    with pytest.raises(ValueError) as info:
        call(TOO_LONG)
    assert str(info.value).startswith(f"{name} is a sequence too long for the model: {MAX_LEN + 3} tokens"), \
        str(info.value)
    assert f"max_len={MAX_LEN}" in str(info.value)


# -- g09 + g30: HeadTrace is one model's consistent, frozen trace --------------------------
TRACE = circuits.trace_heads(MODEL, TOKENS)


@pytest.mark.parametrize("other,wrong", [
    ({"num_layers": 3}, "num_layers=3 (model: 2)"),
    ({"num_heads": 4}, "num_heads=4 (model: 2)"),
    ({"d_model": 8}, "d_model=8 (model: 16)"),
    ({"vocab_size": V + 4}, f"vocab_size={V + 4} (model: {V})"),
])
def test_dla_refuses_a_trace_of_another_model(other: dict, wrong: str) -> None:
    trace = circuits.trace_heads(tiny_model(**other), TOKENS)
    with pytest.raises(ValueError) as info:
        circuits.direct_logit_attribution(MODEL, trace, TOKENS)
    assert str(info.value).startswith("trace must be a trace of model") and wrong in str(info.value)


def test_dla_refuses_a_trace_of_another_dtype() -> None:
    trace = circuits.trace_heads(tiny_model().double(), TOKENS)
    with pytest.raises(TypeError, match=r"trace\.residual\[-1\] has dtype torch\.float64"):
        circuits.direct_logit_attribution(MODEL, trace, TOKENS)


def _parts(**change: object) -> dict:
    parts = {"logits": TRACE.logits, "attention": list(TRACE.attention),
             "head_outputs": list(TRACE.head_outputs), "residual": list(TRACE.residual)}
    return parts | change


@pytest.mark.parametrize("change,label,wanted", [
    ({"head_outputs": [], "residual": [TRACE.residual[0]], "attention": []},
     "HeadTrace.head_outputs", "at least one"),
    ({"head_outputs": [TRACE.head_outputs[0], TRACE.head_outputs[1][:, :1]]}, "HeadTrace.head_outputs[1]",
     "h=2, d=16"),
    ({"head_outputs": [TRACE.head_outputs[0], TRACE.head_outputs[1][..., :8]]}, "HeadTrace.head_outputs[1]",
     "h=2, d=16"),
    ({"residual": [*TRACE.residual[:2], TRACE.residual[2][..., :8]]}, "HeadTrace.residual[2]", "d=16"),
    ({"attention": [TRACE.attention[0], TRACE.attention[1][:, :1]]}, "HeadTrace.attention[1]", "h=2"),
])
def test_headtrace_refuses_inconsistent_layers(change: dict, label: str, wanted: str) -> None:
    with pytest.raises(ValueError) as info:
        circuits.HeadTrace(**_parts(**change))
    assert str(info.value).startswith(label) and wanted in str(info.value)


@pytest.mark.parametrize("field", ["logits", "attention", "head_outputs", "residual"])
def test_headtrace_is_frozen_once_checked(field: str) -> None:
    trace = circuits.HeadTrace(**_parts())
    assert isinstance(trace.head_outputs, tuple) and isinstance(trace.residual, tuple)
    with pytest.raises(dataclasses.FrozenInstanceError):
        setattr(trace, field, [])
    assert len(trace.head_outputs) == 2  # still the trace that was checked
    assert circuits.head_output_norms(trace).shape == (2, 3, 2, 6)


# -- g10: bool positions -----------------------------------------------------------------
@pytest.mark.parametrize("queries,subjects,label", [
    ([True, 5], [0, 2], "query_positions[0]"),
    ([4, 5], [1, True], "subject_positions[1]"),
    ((5, False), [0, 0], "query_positions[1]"),
])
def test_agreement_score_refuses_bool_positions(queries, subjects, label: str) -> None:
    weights = torch.ones(2, 1, 6, 6) / 6
    with pytest.raises(TypeError) as info:
        agreement_score(weights, queries, subjects)
    assert str(info.value).startswith(f"{label} must be an int, got bool")


# -- g12: finite directions in patching.direct_logit_attribution --------------------------
@pytest.mark.parametrize("bad", [float("nan"), float("inf"), -float("inf")])
def test_patching_dla_refuses_non_finite_directions(bad: float) -> None:
    directions = torch.zeros(V)
    directions[3] = bad
    with pytest.raises(ValueError) as info:
        patching.direct_logit_attribution(MODEL, TOKENS, torch.tensor([5, 5, 5]), directions)
    assert str(info.value).startswith("directions must hold finite numbers") and str(bad) in str(info.value)


# -- g27: names are non-empty str --------------------------------------------------------
@pytest.mark.parametrize("name,error", [(3, TypeError), ((0, 0), TypeError), ("", ValueError),
                                        ("  ", ValueError)])
def test_ablation_table_refuses_a_case_name_that_is_no_label(name: object, error: type) -> None:
    with pytest.raises(error) as info:
        ablation.ablation_table(MODEL, _loss(TOKENS), {"none": [], name: [(0, 0)]})
    assert "cases" in str(info.value) and f"{type(name).__name__} {name!r}" in str(info.value)


# -- g31: flip_subject_number names a token with no partner ---------------------------------
@pytest.mark.parametrize("fill,word", [(0, "'<pad>'"), (1, None)])
def test_flip_subject_number_names_a_token_without_a_partner(fill: int, word: str | None) -> None:
    batch = AgreementTask().eval_batch(4)
    broken = dataclasses.replace(batch, tokens=torch.full_like(batch.tokens, fill))
    with pytest.raises(ValueError) as info:
        patching.flip_subject_number(broken)
    message = str(info.value)
    assert message.startswith(f"batch.tokens[0, {int(batch.subject_pos[0])}] (the subject noun) is id {fill}")
    assert word is None or word in message


# -- battery 19 (fix49q) -----------------------------------------------------------------------------

# ----------------------------------------------------------------------------- g17: prunable_counts' known
LOSS = Evaluation(TOKENS, lambda logits: {"loss": average_loss(logits, TOKENS)})


ORDERS = [[(0, 0), (0, 1), (1, 0), (1, 1)]]


@pytest.mark.parametrize("known, error, named", [
    ({frozenset({(9, 9)}): {"loss": 1.0}}, ValueError, "(9, 9)"),  # a head the model lacks
    ({frozenset({(0, 2)}): {"loss": 1.0}}, ValueError, "(0, 2)"),
    ({frozenset({7}): {"loss": 1.0}}, TypeError, "7"),  # not a (layer, head) pair
    ({frozenset(): {}}, ValueError, "loss"),  # a measurement without the evaluations' number
    ({frozenset({(0, 0)}): {"acc": 1.0}}, ValueError, "acc"),  # another evaluation's number
    ({frozenset({(0, 0)}): {"loss": 1.0, "acc": 1.0}}, ValueError, "acc"),
    ({frozenset({(0, 0)}): {"loss": 1.0}, frozenset({(0, 1)}): {"acc": 1.0}}, ValueError, "acc"),
])
@pytest.mark.parametrize("incremental", [False, True])
def test_prunable_counts_refuses_known_it_cannot_use(known, error, named, incremental):
    with pytest.raises(error, match="known") as caught:
        prunable_counts(MODEL, LOSS, ORDERS, lambda n: n["loss"] < 10, known=known,
                        incremental=incremental)
    assert named in str(caught.value)


def test_prunable_counts_refuses_known_whose_names_disagree_when_nothing_is_measured():
    known = {frozenset(ORDERS[0][:k]): {"loss": 1.0} for k in range(1, 5)}
    known[frozenset(ORDERS[0][:2])] = {"acc": 1.0}
    with pytest.raises(ValueError, match=r"known\[.*acc"):
        prunable_counts(MODEL, LOSS, ORDERS, lambda n: n["loss"] < 10, known=known)


def test_prunable_counts_still_reuses_its_own_measurements():
    counts, measured = prunable_counts(MODEL, LOSS, ORDERS, lambda n: n["loss"] < 10)
    again = prunable_counts(MODEL, LOSS, ORDERS, lambda n: n["loss"] < 10, known=measured)
    assert again == (counts, measured)
    part = {frozenset(ORDERS[0][:1]): measured[frozenset(ORDERS[0][:1])]}
    assert prunable_counts(MODEL, LOSS, ORDERS, lambda n: n["loss"] < 10, known=part)[0] == counts


# ------------------------------------------------------------------------ g15: lengths within their batch
REFERENCE = torch.randint(0, V, (4, 6), generator=torch.Generator().manual_seed(2))


@pytest.mark.parametrize("target", ["resampled_outputs", "resampled_logits"])
@pytest.mark.parametrize("name, lengths, reference_lengths, shown", [
    ("reference_lengths", [6, 6, 6], [9, 6, 6, 6], "max 9"),  # longer than the reference's 6 positions
    ("reference_lengths", [6, 6, 6], [6, 6, 6, 7], "max 7"),
    ("reference_lengths", [6, 6, 6], [6, -1, 6, 6], "min -1"),
    ("lengths", [6, 8, 6], [6, 6, 8, 6], "max 8"),  # longer than the sequences' 6 positions
])
def test_resampling_refuses_lengths_beyond_their_batch(target, name, lengths, reference_lengths, shown):
    lengths, reference_lengths = torch.tensor(lengths), torch.tensor(reference_lengths)
    generator = torch.Generator().manual_seed(0)
    with pytest.raises(ValueError, match=name) as caught:
        if target == "resampled_outputs":
            resampled_outputs(MODEL, lengths, REFERENCE, reference_lengths, 6, generator=generator)
        else:
            resampled_logits(MODEL, TOKENS, lengths, REFERENCE, reference_lengths, [(0, 0)],
                             generator=generator)
    assert str(caught.value).startswith(name) and shown in str(caught.value)


# ------------------------------------------------------------------------ g11: mean_by_group's labels
@pytest.mark.parametrize("labels, shown", [
    ([["a"], "b"], "groups['g'][0]"),  # a list
    (["a", {"b"}], "groups['g'][1]"),  # a set
    (["a", ("b", ["c"])], "groups['g'][1]"),  # a tuple holding a list
    ([{"a": 1}, "b"], "groups['g'][0]"),  # a dict
])
def test_mean_by_group_refuses_unhashable_labels_by_position(labels, shown):
    with pytest.raises(TypeError, match="hashable") as caught:
        mean_by_group({"v": [1.0, 2.0]}, {"g": labels})
    assert str(caught.value).startswith(shown)


def test_mean_by_group_refuses_labels_it_cannot_sort():
    with pytest.raises(TypeError, match=r"groups \['g'\] must be sortable"):
        mean_by_group({"v": [1.0, 2.0]}, {"g": [int, str]})


def test_mean_by_group_still_groups_tuples_and_mixed_labels():
    table = mean_by_group({"v": [1.0, 2.0, 3.0]}, {"g": [(1, "a"), (1, "a"), (2, "b")]})
    assert table["sentences"].tolist() == [2, 1]
    assert mean_by_group({"v": [1.0, 2.0]}, {"g": [1, "a"]})["sentences"].tolist() == [1, 1]


# -- battery 20 (fix50q) -----------------------------------------------------------------------------

# -- O3: ov_copying_score on a GQA model: each query head reads its group's W_V ---------------
def _expanded_to_mha(gqa_model: TinyTransformer) -> TinyTransformer:
    """The same model with its K/V heads repeated to full multi-head attention (query head i
    gets K/V head i // (h / g), the blocked grouping)."""
    config = gqa_model.config
    h, g, dk = config.num_heads, config.num_kv_heads, config.d_head
    mha = TinyTransformer(ModelConfig(**{**config.to_dict(), "num_kv_heads": h}))
    state = {key: value for key, value in gqa_model.state_dict().items()
             if not any(f".attn.{name}_proj." in key for name in "qkv")}

    def expand(t: torch.Tensor) -> torch.Tensor:  # (g * dk, ...) -> (h * dk, ...): group i // (h/g)
        rest = t.shape[1:]
        return t.reshape(g, dk, *rest).repeat_interleave(h // g, dim=0).reshape(h * dk, *rest)

    for i, block in enumerate(gqa_model.blocks):
        attn = block.attn
        for part in ("weight", "bias"):
            state[f"blocks.{i}.attn.in_proj.{part}"] = torch.cat([
                getattr(attn.q_proj, part), expand(getattr(attn.k_proj, part)),
                expand(getattr(attn.v_proj, part))])
    mha.load_state_dict(state)
    return mha.eval()


@pytest.mark.parametrize(("num_heads", "num_kv_heads"), [(4, 2), (4, 1), (6, 3)],
                         ids=["h4 g2", "h4 g1 (MQA)", "h6 g3"])
def test_ov_copying_score_on_gqa_matches_the_expanded_mha_model(num_heads: int, num_kv_heads: int) -> None:
    torch.manual_seed(0)
    gqa = TinyTransformer(ModelConfig(vocab_size=24, max_len=8, d_model=24, num_heads=num_heads,
                                      num_layers=2, num_kv_heads=num_kv_heads, mlp=True)).eval()
    mha = _expanded_to_mha(gqa)
    tokens = torch.randint(0, 24, (2, 8))
    assert torch.allclose(gqa(tokens)[0], mha(tokens)[0], atol=1e-5)  # the expansion is the same model
    for layer in range(2):
        got = ov_copying_score(gqa, layer, range(24))
        assert got.shape == (num_heads,)
        assert torch.allclose(got, ov_copying_score(mha, layer, range(24)))


# -- S5: an evaluation whose score returns {} measured nothing ---------------------------------
def test_measure_refuses_a_score_that_returns_no_number() -> None:
    config = ModelConfig(vocab_size=16, max_len=8, d_model=16, num_heads=2, num_layers=2)
    model = TinyTransformer(config).eval()
    tokens = torch.randint(1, 16, (2, 6))
    good = Evaluation(tokens, lambda logits: {"m": 1.0})
    raises_naming(ValueError, ["evaluations[1].score", "at least one number", "{}"],
                  lambda: measure(model, [good, Evaluation(tokens, lambda logits: {})], [(0, 1)]))


# -- battery 21 (fix51r) -----------------------------------------------------------------------------

# -- group 7: a trace of another model with the same sizes --------------------------------
@pytest.mark.parametrize("other,wrong", [
    ({"mlp": True}, "mlp=True (model: False)"),
    ({"mlp": True, "d_mlp": 8}, "d_mlp=8 (model: None)"),
    ({"num_kv_heads": 1}, "num_kv_heads=1 (model: 2)"),
    ({"max_len": MAX_LEN + 4}, f"max_len={MAX_LEN + 4} (model: {MAX_LEN})"),
])
def test_dla_refuses_a_trace_of_another_model_of_the_same_sizes(other: dict, wrong: str) -> None:
    trace = circuits.trace_heads(tiny_model(**other), TOKENS)
    message = raises_naming(ValueError, ["trace must be a trace of model", wrong],
                            lambda: circuits.direct_logit_attribution(MODEL, trace, TOKENS))
    assert message.startswith("trace")


def test_trace_records_the_model_config_and_still_reads_its_own_model() -> None:
    trace = circuits.trace_heads(MODEL, TOKENS)
    assert trace.config == MODEL.config
    assert circuits.direct_logit_attribution(MODEL, trace, TOKENS).shape == (2, 2, 3, 6)
    # same config
    assert circuits.direct_logit_attribution(tiny_model(), trace, TOKENS).shape == (2, 2, 3, 6)


@pytest.mark.parametrize("config,wrong", [
    (ModelConfig(V, MAX_LEN, d_model=16, num_heads=2, num_layers=3), "num_layers=2 (config: 3)"),
    (ModelConfig(V + 1, MAX_LEN, d_model=16, num_heads=2, num_layers=2), f"vocab_size={V} (config: {V + 1})"),
    (ModelConfig(V, MAX_LEN, d_model=16, num_heads=4, num_layers=2), "num_heads=2 (config: 4)"),
])
def test_headtrace_refuses_a_config_its_shapes_contradict(config: ModelConfig, wrong: str) -> None:
    trace = circuits.trace_heads(MODEL, TOKENS)
    raises_naming(ValueError, ["HeadTrace.config", wrong], lambda: dataclasses.replace(trace, config=config))


def test_headtrace_refuses_a_config_that_is_not_one() -> None:
    trace = circuits.trace_heads(MODEL, TOKENS)
    raises_naming(TypeError, ["HeadTrace.config", "dict"],
                  lambda: dataclasses.replace(trace, config=MODEL.config.to_dict()))


# -- battery 22 (fix52r) -----------------------------------------------------------------------------

POISON_TOKENS = torch.randint(0, V, (2, 6), generator=torch.Generator().manual_seed(2))


POISON_TOKENS[0, 0] = 1  # token 1 is read everywhere: the entry poisoned below is in its row


def _poisoned(param: str, value: float):
    """The tiny model with one entry of its parameter ``param`` set to ``value`` (a matrix: in row
    1, token 1's row of an embedding or an unembedding)."""
    model = tiny_model()
    weight = dict(model.named_parameters())[param]
    with torch.no_grad():
        weight[(1, 0) if weight.ndim == 2 else 0] = value
    return model


def _dla(model):
    trace = circuits.trace_heads(tiny_model(), POISON_TOKENS)  # a finite trace, of the same config
    return circuits.direct_logit_attribution(model, trace, POISON_TOKENS)


def _final_norm(model):
    stream = torch.randn(2, 6, 16, generator=torch.Generator().manual_seed(3))
    return circuits.frozen_final_norm(model, stream, stream)


# -- group 5: weights holding NaN or infinity ---------------------------------------------
@pytest.mark.parametrize("call", [
    lambda m: circuits.ov_copying_score(m, 0, [1, 2, 3]),
    lambda m: circuits.trace_heads(m, POISON_TOKENS),
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
    return patching.EvaluationAt(POISON_TOKENS, lambda logits: {"x": 1.0}, torch.tensor([5, 5]))


@pytest.mark.parametrize("make,field,value", [
    (_evaluation_at, "positions", torch.tensor([99, 99])),
    (_evaluation_at, "tokens", POISON_TOKENS[:, :2]),
    (lambda: ablation.Evaluation(POISON_TOKENS, lambda logits: {"x": 1.0}), "tokens", POISON_TOKENS.float()),
    (lambda: ablation.Evaluation(POISON_TOKENS, lambda logits: {"x": 1.0}), "score", None),
])
def test_evaluations_cannot_be_changed_after_their_check(make, field: str, value: object) -> None:
    evaluation = make()
    raises_naming(dataclasses.FrozenInstanceError, [field], lambda: setattr(evaluation, field, value))
    assert getattr(evaluation, field) is not value


def test_a_changed_copy_is_checked_again() -> None:
    raises_naming(ValueError, ["EvaluationAt.positions", "0..5", "99"],
                  lambda: dataclasses.replace(_evaluation_at(), positions=torch.tensor([99, 99])))


# -- battery 23 (fix54) ------------------------------------------------------------------------------

# -- path_patched_logits compares the senders' outputs in `outputs` with its own run --------------
def _three_layer_model_and_tokens():
    torch.manual_seed(0)
    model = TinyTransformer(ModelConfig(vocab_size=16, max_len=8, d_model=8, num_heads=2, num_layers=3))
    tokens = torch.randint(0, 16, (2, 6), generator=torch.Generator().manual_seed(2))
    return model, tokens


@pytest.mark.parametrize("other", [lambda t: t.flip(1), lambda t: t.flip(0), lambda t: (t + 1) % 16],
                         ids=["positions reversed", "batch reversed", "other ids"])
def test_path_patching_refuses_outputs_of_other_tokens(other):
    """Battery 23: head outputs of other tokens were used silently (logits off by up to 0.047)."""
    model, tokens = _three_layer_model_and_tokens()
    source = head_outputs(model, tokens.flip(0))
    raises_naming(ValueError, ["outputs", "L0H1", "other tokens"],
                  lambda: path_patched_logits(model, tokens, source, [(0, 1)], [(1, 0), (2, 1)],
                                              outputs=head_outputs(model, other(tokens))))


def test_path_patching_takes_outputs_of_these_tokens_and_gives_the_same_logits():
    model, tokens = _three_layer_model_and_tokens()
    source = head_outputs(model, tokens.flip(0))
    senders, receivers = [(0, 1), (1, 0)], [(2, 0), (2, 1)]
    given = path_patched_logits(model, tokens, source, senders, receivers,
                                outputs=head_outputs(model, tokens))
    computed = path_patched_logits(model, tokens, source, senders, receivers)
    torch.testing.assert_close(given, computed)


def test_path_patching_names_outputs_not_source_outputs_for_a_misshaped_outputs():
    model, tokens = _three_layer_model_and_tokens()
    raises_naming(ValueError, ["outputs must be head_outputs(model, tokens)", "(3, 2, 2, 6, 4)"],
                  lambda: path_patched_logits(model, tokens, head_outputs(model, tokens), [(0, 1)], [(1, 0)],
                                              outputs=torch.zeros(3, 2, 2, 5, 4)))


# -- battery 25 (fix55) ------------------------------------------------------------------------------

# -- a head listed twice was switched off, patched or counted once, without a word ------------------------
def _twice_cases():
    from course_utils.interp import ablation as A
    from course_utils.interp import patching as P

    model = tiny_model()
    tokens = torch.randint(0, 16, (2, 8), generator=torch.Generator().manual_seed(0))
    outputs = A.head_outputs(model, tokens)  # (L, B, h, T, dk)
    evaluation = A.loss_evaluation(tokens, tokens)
    lengths = torch.full((2,), 8)
    twice, other, x = [(0, 1), (0, 1)], [(1, 0)], "L0H1 (0, 1)"
    return [
        ("gates_without", lambda: A.gates_without(model, twice), "heads", x),
        ("ablated_logits", lambda: A.ablated_logits(model, tokens, twice), "heads", x),
        ("measure", lambda: A.measure(model, evaluation, twice), "heads", x),
        ("ablation_table", lambda: A.ablation_table(model, evaluation, {"pair": twice}), "cases['pair']", x),
        ("pruning_curve", lambda: A.pruning_curve(model, evaluation, twice), "order", x),
        ("patched_logits", lambda: P.patched_logits(model, tokens, outputs, twice), "heads", x),
        ("position_ablated_logits",
         lambda: P.position_ablated_logits(model, tokens, twice, torch.ones(8, dtype=torch.bool)),
         "heads", x),
        ("path_patched_logits senders", lambda: P.path_patched_logits(model, tokens, outputs, twice, other),
         "senders", x),
        ("path_patched_logits receivers",
         lambda: P.path_patched_logits(model, tokens, outputs, [(0, 0)], [(1, 1), (1, 1)]), "receivers",
         "L1H1 (1, 1)"),
        ("resampled_logits", lambda: P.resampled_logits(model, tokens, lengths, tokens, lengths, twice,
                                                        generator=torch.Generator().manual_seed(0)),
         "heads", x),
        ("measure_zeroed_sets", lambda: P.measure_zeroed_sets(model, evaluation, [other, twice]),
         "head_sets[1]", x),
    ]


@pytest.mark.parametrize("index", range(11))
def test_a_head_listed_twice_is_refused_by_name(index: int) -> None:
    """One rule (ablation._check_heads) for every list of heads: each head at most once."""
    _, call, name, head = _twice_cases()[index]
    raises_naming(ValueError, [name, "lists a head twice", head], call)


# -- battery 26 (fix56) ------------------------------------------------------------------------------

def test_verdict_refuses_a_margin_that_leaves_no_score_present() -> None:
    from course_utils.interp.scores import verdict

    raises_naming(ValueError, ["margin", "threshold + margin <= 1", "threshold=0.99", "margin=0.5"],
                  lambda: verdict(0.7, threshold=0.99, margin=0.5))
    assert verdict(1.0, threshold=0.9, margin=0.1) == "present"  # at the edge, still reachable


# -- library, battery 26's final run ---------------------------------------------------------------------
def _tiny_transformer():
    from course_utils.model.transformer import ModelConfig, TinyTransformer

    torch.manual_seed(0)
    return TinyTransformer(ModelConfig(vocab_size=8, max_len=6, d_model=8, num_heads=2, num_layers=1))


def test_inference_tensors_as_ids_gates_or_targets_are_named() -> None:
    from course_utils.interp.ablation import head_importance

    model = _tiny_transformer()
    with torch.inference_mode():
        tokens, gates = torch.randint(0, 8, (2, 6)), torch.ones(1, 2)
    raises_naming(ValueError, ["tokens", "torch.inference_mode()", "tokens.clone()"],
                  lambda: model(tokens))
    raises_naming(ValueError, ["head_mask", "torch.inference_mode()"],
                  lambda: model(tokens.clone(), head_mask=gates))
    raises_naming(ValueError, ["targets", "torch.inference_mode()"],
                  lambda: head_importance(model, tokens.clone(), tokens))
    with torch.no_grad():
        assert model(tokens, head_mask=gates)[0].shape == (2, 6, 8)  # where it can run, it runs


def test_train_model_names_a_model_with_every_parameter_frozen() -> None:
    from course_utils.model.train import TrainConfig, train_model

    model = _tiny_transformer()
    for p in model.parameters():
        p.requires_grad_(False)
    tokens = torch.randint(0, 8, (4, 6), generator=torch.Generator().manual_seed(0))
    raises_naming(ValueError, ["model", "none requires grad", "requires_grad_(True)"],
                  lambda: train_model(model, lambda g: (tokens, tokens), TrainConfig(steps=2),
                                      progress=False))


# -- battery 27 (fix57) ------------------------------------------------------------------------------

def test_a_model_with_a_block_removed_is_named() -> None:
    from course_utils.interp.ablation import head_importance

    model = tiny_model()
    model.blocks = model.blocks[:1]
    tokens = torch.randint(0, 16, (2, 6))
    raises_naming(ValueError, ["1 blocks", "num_layers=2", "after construction"],
                  lambda: head_importance(model, tokens, tokens))


# -- gradients, dtypes and NaN -------------------------------------------------------------------------
def test_gradient_functions_name_inference_mode() -> None:
    from course_utils.interp.ablation import head_importance
    from course_utils.interp.patching import sequence_gate_gradients

    model, tokens = tiny_model(), torch.randint(0, 16, (2, 6))
    for f in (head_importance, sequence_gate_gradients):
        with torch.inference_mode():
            raises_naming(RuntimeError, [f.__name__, "inference_mode()"],
                          lambda f=f: f(model, tokens, tokens))


def test_gates_and_caches_keep_their_dtype_under_a_float64_default() -> None:
    from course_utils.interp.ablation import gates_without, head_importance
    from course_utils.interp.patching import sequence_gate_gradients
    from course_utils.model.kv_cache import QuantizedCache

    model, tokens = tiny_model(), torch.randint(0, 16, (2, 6))
    before = torch.get_default_dtype()
    torch.set_default_dtype(torch.float64)
    try:
        assert head_importance(model, tokens, tokens).shape == (2, 2)
        assert sequence_gate_gradients(model, tokens, tokens).shape == (2, 2, 2)
        assert gates_without(model, [(0, 1)]).dtype == torch.float32
        cache = QuantizedCache(1, 1, 2, 4, 8, group=2)
    finally:
        torch.set_default_dtype(before)
    cache.append(0, torch.randn(1, 2, 1, 4), torch.randn(1, 2, 1, 4))
    assert cache.length == 1


# -- the same root cause in the bench helpers and measure (battery 27's final run) ---------------------
def _huge_int_cases():
    import pandas as pd

    from course_utils.bench import memory as MEM
    from course_utils.bench import mha_speed as MS
    from course_utils.bench import timing as TM
    from course_utils.interp import ablation as AB

    huge = 10**400
    tokens = torch.randint(0, 16, (2, 6), generator=torch.Generator().manual_seed(0))
    record = {"t": {"peak_mb": 1, "start_mb": 1, "children_mb": 0, "seconds": huge}}
    return [
        (lambda: MS.bench_mha(1, 4, 8, 2, repeats=1, target_sample_s=huge), "target_sample_s"),
        (lambda: TM.Timing("a", huge, 1.0, (huge,)), "Timing('a').median_s"),
        (lambda: TM.clock_elapsed(0, huge, "x"), "clock"),
        (lambda: MEM.format_test_report(record), "seconds="),
        (lambda: MS.plot_sweep(pd.DataFrame({"a": [huge]}, index=[1], dtype=object), None, title="t"),
         "table['a']"),
        (lambda: AB.measure(tiny_model(), AB.Evaluation(tokens, lambda logits: {"a": huge})),
         "numbers a float holds"),
    ]


@pytest.mark.parametrize("index", range(6))
def test_an_int_no_float_holds_is_named_by_the_bench_helpers_and_measure(index: int) -> None:
    call, words = _huge_int_cases()[index]
    raises_naming(ValueError, [words], call)


# -- battery 28 (library) ----------------------------------------------------------------------------

@pytest.mark.parametrize("name", ["directions", "frozen_scale"])
def test_direct_logit_attribution_names_an_inference_tensor(name: str) -> None:
    from course_utils.interp.patching import direct_logit_attribution

    model = train_mode_tiny_model().eval()
    tokens, positions = torch.randint(0, 12, (2, 5)), torch.tensor([4, 3])
    with torch.inference_mode():
        made = {"directions": torch.randn(12), "frozen_scale": torch.ones(2)}[name]
    kwargs = {"directions": torch.randn(12), name: made}
    raises_naming(ValueError, [name, "torch.inference_mode()", f"{name}.clone()"],
                  lambda: direct_logit_attribution(model, tokens, positions, **kwargs))


@pytest.mark.parametrize("value, word", [(float("inf"), "inf"), (float("-inf"), "-inf")])
def test_best_head_refuses_an_infinite_score(value: float, word: str) -> None:
    from course_utils.interp.scores import best_head

    grid = torch.tensor([[0.1, 0.2], [0.3, 0.4]])
    grid[1, 0] = value
    raises_naming(ValueError, ["scores", f"holds {word} for L1H0", "finite"], lambda: best_head(grid))
    raises_naming(ValueError, ["scores", f"holds {word} for L0H1"], lambda: best_head(grid[1].flip(0)))


def test_head_trace_keeps_copies_of_the_tensors_it_was_given() -> None:
    from course_utils.interp.circuits import HeadTrace, trace_heads

    model = train_mode_tiny_model().eval()
    tokens = torch.randint(0, 12, (2, 5))
    traced = trace_heads(model, tokens)
    given = [traced.logits.clone(), [t.clone() for t in traced.attention],
             [t.clone() for t in traced.head_outputs], [t.clone() for t in traced.residual]]
    trace = HeadTrace(*given)
    before = [trace.logits.clone(), *(t.clone() for t in trace.head_outputs)]
    given[0].fill_(float("nan"))  # after the check: the trace must not see it
    given[2][0].mul_(1000.0)
    given[3][-1].zero_()
    assert torch.isfinite(trace.logits).all()
    torch.testing.assert_close(trace.logits, before[0])
    torch.testing.assert_close(trace.head_outputs[0], before[1])
    torch.testing.assert_close(trace.residual[-1], traced.residual[-1])


# -- battery 29 (library) ----------------------------------------------------------------------------

def test_ov_copying_score_0d_token_ids_named():
    from course_utils.interp.circuits import ov_copying_score
    from course_utils.model.transformer import ModelConfig, TinyTransformer

    model = TinyTransformer(ModelConfig(vocab_size=16, max_len=8, d_model=8, num_heads=2)).eval()
    with pytest.raises(ValueError, match="token_ids"):
        ov_copying_score(model, 0, torch.tensor(2))
    assert ov_copying_score(model, 0, torch.tensor([1, 2, 3])).shape == (2,)


# -- battery 30 --------------------------------------------------------------------------------------

# -- next_token_loss_inference_scored: torch's bare refusal of an inference-mode scored -------------
@pytest.mark.parametrize("metric", ["next_token_loss", "in_context_mass"])
def test_circuit_metrics_name_an_inference_mode_scored(metric):
    from course_utils.interp import circuits

    logits = torch.randn(2, 5, 7, requires_grad=True)
    tokens = torch.randint(0, 7, (2, 5))
    with torch.inference_mode():
        scored = torch.ones(2, 5, dtype=torch.bool)
    with pytest.raises(ValueError, match=r"^scored was made under torch.inference_mode\(\)"):
        getattr(circuits, metric)(logits, tokens, scored)
    with torch.no_grad():
        getattr(circuits, metric)(logits, tokens, scored)  # no gradients recorded: fine


# -- path_patched_nan_model_blames_source: a NaN in the model's own run blamed source_outputs --------
def test_path_patched_logits_names_the_model_nan_weight_not_source_outputs():
    from course_utils.interp.ablation import head_outputs
    from course_utils.interp.patching import path_patched_logits
    from course_utils.model.transformer import ModelConfig, TinyTransformer

    torch.manual_seed(0)
    model = TinyTransformer(ModelConfig(vocab_size=8, d_model=8, num_heads=2, num_layers=2, max_len=4))
    tokens = torch.randint(0, 8, (2, 4))
    source = head_outputs(model, tokens)
    with torch.no_grad():
        model.token_embedding.weight[0, 0] = float("nan")
    tokens[:, 0] = 0
    with pytest.raises(ValueError, match=r"^model's weights \(token_embedding\.weight\) must hold finite"):
        path_patched_logits(model, tokens, source, [(0, 1)], [(1, 0)])


# -- keys named like the columns a table adds (they overwrote them, or failed inside pandas) --------
_GRID = torch.tensor([[0.9, 0.1], [0.2, 0.3]])


@pytest.mark.parametrize("role", ["head", "layer", "index", "top role", "top score"])
@pytest.mark.parametrize("builder", ["head_score_table", "role_verdicts"])
def test_a_role_named_like_a_column_of_the_head_table_is_refused(builder, role):
    from bad_input_cases import LyingStr

    def build(key):
        if builder == "head_score_table":
            return S.head_score_table({key: _GRID * 0.1, "previous token": _GRID})
        return S.role_verdicts({key: _GRID * 0.1, "previous token": _GRID}, chance={key: 0.01})

    for key in (role, LyingStr(role)):  # a str subclass is compared by its value, as pandas does
        raises_naming(ValueError, ["scores has the key", repr(role), "'top role' or 'top score'", "rename"],
                      lambda key=key: build(key))


@pytest.mark.parametrize(("values", "groups", "key", "taken"), [
    ({"sentences": [1.0, 2.0, 3.0]}, {"g": ["x", "x", "y"]}, "values", "'sentences'"),
    ({"g": [10.0, 20.0, 30.0]}, {"g": ["a", "a", "b"]}, "values", "'g'"),
    ({"v": [1.0, 2.0, 3.0]}, {"t": [1, 1, 2], "g": ["a", "a", "b"]}, None, None),
    ({"g": [1.0, 2.0, 3.0]}, {"t": [1, 1, 2], "g": ["a", "a", "b"]}, "values", "'g'"),
    ({"v": [1.0, 2.0, 3.0]}, {"sentences": ["a", "a", "b"]}, "groups", "'sentences'"),
])
def test_mean_by_group_refuses_a_value_named_like_its_own_columns(values, groups, key, taken):
    if key is None:  # distinct names: the table as before
        table = mean_by_group(values, groups)
        assert list(table.columns) == ["sentences", "v"] and list(table["sentences"]) == [2, 1]
        return
    raises_naming(ValueError, [f"{key} has the key {taken}", "'sentences'", "rename"],
                  lambda: mean_by_group(values, groups))


@pytest.mark.parametrize("metric", ["pruned", "fraction"])
def test_pruning_curve_refuses_a_metric_named_like_its_own_columns(metric):
    model = small_model()
    tokens = torch.randint(0, 10, (2, 6), generator=torch.Generator().manual_seed(0))
    evaluation = ablation.loss_evaluation(tokens, tokens, name=metric)
    raises_naming(ValueError, ["evaluations", f"the key {metric!r}", "'pruned' or 'fraction'", "rename"],
                  lambda: ablation.pruning_curve(model, evaluation, ablation.all_heads(model), counts=[0, 1]))
    table = ablation.pruning_curve(model, ablation.loss_evaluation(tokens, tokens, name="my loss"),
                                   ablation.all_heads(model), counts=[0, 1])
    assert list(table["pruned"]) == [0, 1] and list(table["fraction"]) == [0.0, 0.25]


# -- battery 31 --------------------------------------------------------------------------------------

# -- pruning_curve_empty_order: order=[] with counts=[0, 2] read 'counts must be ints in 0..0', naming
# nothing of order, whose length set that range
@pytest.mark.parametrize("order, wanted", [([], r"0\.\.0 \(order lists 0 heads\)"),
                                           ([(0, 0)], r"0\.\.1 \(order lists 1 head\)")])
def test_pruning_curve_counts_beyond_order_say_how_many_heads_order_lists(order, wanted):
    model, _ = _model_and_tokens()
    with pytest.raises(ValueError, match=rf"^counts must be ints in {wanted}, got \[0, 2\]"):
        ablation.pruning_curve(model, _evaluation(), order, counts=[0, 2])
    assert list(ablation.pruning_curve(model, _evaluation(), order)["pruned"]) == list(range(len(order) + 1))


# -- battery 34 (g3) ---------------------------------------------------------------------------------

# -- patching_dla_edit_heads_none: an edit_heads that returned None died on the function's own
# recording hook ("'NoneType' object has no attribute 'detach'"); model(tokens, edit_heads=...) names it
@pytest.mark.parametrize("edit, error, words", [
    (lambda layer, heads: None, TypeError, ["edit_heads must return heads of the shape (2, 2, 5, 8)",
                                            "got NoneType", "forget to return the heads?"]),
    (lambda layer, heads: heads[:, :1], ValueError, ["edit_heads must return", "got shape (2, 1, 5, 8)"]),
    (lambda layer, heads: heads.double(), TypeError, ["edit_heads must return", "got dtype torch.float64"]),
], ids=["None", "one head", "float64"])
def test_direct_logit_attribution_checks_what_edit_heads_returns(edit, error, words):
    model = tiny_model()
    tokens = torch.randint(0, 16, (2, 5), generator=torch.Generator().manual_seed(1))
    positions = torch.tensor([4, 4])
    directions = torch.randn(2, 16, generator=torch.Generator().manual_seed(2))
    raises_naming(error, words, lambda: direct_logit_attribution(model, tokens, positions, directions,
                                                                 edit_heads=edit))
    raises_naming(error, words, lambda: model(tokens, edit_heads=edit))  # the same words as the model's
    zeroed = direct_logit_attribution(model, tokens, positions, directions,
                                      edit_heads=lambda layer, heads: heads * 0)
    assert float(zeroed[[c for c in zeroed.columns if c.startswith("L") and "H" in c]].abs().max().max()) == 0


# -- ablated_logits_streams_other_tokens: streams=block_inputs(model, other_tokens) gave the logits of a
# run entering layer 1 with the other tokens' stream (off by up to 0.23), without a word. streams[0] is
# compared with the tokens' embedding, as path_patched_logits compares its outputs (one helper)
def test_ablated_logits_refuses_the_streams_of_other_tokens():
    model = tiny_model()
    tokens = torch.randint(0, 16, (2, 5), generator=torch.Generator().manual_seed(1))
    other = (tokens + 1) % 16
    raises_naming(ValueError, ["streams must be block_inputs(model, tokens) of these tokens", "streams[0]",
                               "differs from this run's by up to", "other tokens"],
                  lambda: ablation.ablated_logits(model, tokens, [(1, 0)],
                                                  streams=ablation.block_inputs(model, other)))
    own = ablation.block_inputs(model, tokens)
    for heads in ([(1, 0)], [(0, 1)], []):
        torch.testing.assert_close(ablation.ablated_logits(model, tokens, heads, streams=own),
                                   ablation.ablated_logits(model, tokens, heads))
    doubled = [s.double() for s in own]
    raises_naming(TypeError, ["streams[0]", "torch.float64", "torch.float32"],
                  lambda: ablation.ablated_logits(model, tokens, [(1, 0)], streams=doubled))


def test_path_patched_logits_still_refuses_the_outputs_of_other_tokens():
    model = tiny_model()
    tokens = torch.randint(0, 16, (2, 5), generator=torch.Generator().manual_seed(1))
    other = (tokens + 1) % 16
    source = head_outputs(model, other)
    raises_naming(ValueError, ["outputs must be head_outputs(model, tokens) of these tokens", "sender L0H1",
                               "(head outputs of other tokens?); leave outputs out to compute them"],
                  lambda: path_patched_logits(model, tokens, source, [(0, 1)], [(1, 0)], outputs=source))
    torch.testing.assert_close(
        path_patched_logits(model, tokens, source, [(0, 1)], [(1, 0)], outputs=head_outputs(model, tokens)),
        path_patched_logits(model, tokens, source, [(0, 1)], [(1, 0)]))


# -- hostile containers: a list or dict whose len() or iteration raises is named, its error chained
class _BadIter(list):
    def __iter__(self):
        raise RuntimeError("iter boom")


class _BadLen(list):
    def __len__(self):
        raise RuntimeError("len boom")


class _BadLenDict(dict):
    def __len__(self):
        raise RuntimeError("len boom")


def _hostile_calls():
    from course_utils.attention.masks import causal_mask, masked_softmax
    from course_utils.interp.ablation import ablated_logits, ablation_table, loss_evaluation
    from course_utils.interp.patching import patched_logits, position_ablated_logits
    from course_utils.interp.scores import head_score_table, role_verdicts

    model = tiny_model()
    tokens = torch.randint(0, 11, (2, 5), generator=torch.Generator().manual_seed(1))
    ev, source = loss_evaluation(tokens, tokens), head_outputs(model, (tokens + 1) % 11)
    weights = masked_softmax(torch.randn(2, 2, 6, 6), causal_mask(6))
    where = torch.ones(2, 5, dtype=torch.bool)
    grid = {"previous token": torch.rand(2, 2)}
    return {
        "ablated_logits heads": (lambda: ablated_logits(model, tokens, _BadIter([(0, 0)])), "heads"),
        "ablated_logits a head": (lambda: ablated_logits(model, tokens, [_BadLen([0, 0])]), "each head"),
        "head_score_table": (lambda: head_score_table(_BadLenDict(a=torch.rand(2, 2))), "scores"),
        "measure heads": (lambda: measure(model, ev, _BadIter([(0, 0)])), "heads"),
        "measure evaluations": (lambda: measure(model, _BadIter([ev])), "evaluations"),
        "ablation_table cases": (lambda: ablation_table(model, ev, _BadLenDict(a=[(0, 0)])), "cases"),
        "patched_logits": (lambda: patched_logits(model, tokens, source, _BadIter([(0, 0)])), "heads"),
        "path_patched_logits": (lambda: path_patched_logits(model, tokens, source, _BadIter([(0, 0)]),
                                                            [(1, 0)]), "senders"),
        "position_ablated_logits": (
            lambda: position_ablated_logits(model, tokens, _BadIter([(0, 0)]), where), "heads"),
        "losses_along_orders": (lambda: losses_along_orders(model, tokens, tokens, _BadIter([[(0, 0)]]), 1),
                                "orders"),
        "prunable_counts": (
            lambda: prunable_counts(model, ev, _BadIter([[(0, 0)]]), lambda r: True), "orders"),
        "trace_heads replace": (
            lambda: circuits.trace_heads(model, tokens, replace=_BadLenDict({(0, 0): 0.0})), "replace"),
        "trace_heads keys_without": (lambda: circuits.trace_heads(model, tokens,
                                                                  keys_without={1: _BadIter([(0, 0)])}),
                                     "keys_without[1]"),
        "agreement_score": (lambda: agreement_score(weights, _BadIter([5, 4]), [1, 2]), "query_positions"),
        "role_verdicts scores": (lambda: role_verdicts(_BadLenDict(grid)), "scores"),
        "role_verdicts chance": (lambda: role_verdicts(grid, chance=_BadLenDict({"previous token": 0.1})),
                                 "chance"),
    }


@pytest.mark.parametrize("which", list(_hostile_calls()))
def test_a_container_whose_len_or_iteration_raises_is_named(which):
    call, name = _hostile_calls()[which]
    raises_naming(TypeError, [name, "must be", "raised RuntimeError", "(chained below)"], call)
    with pytest.raises(TypeError) as info:
        call()
    assert isinstance(info.value.__cause__, RuntimeError)
    assert "boom" in str(info.value.__cause__)
