"""Battery 18 (issue 38), helper Q (course_utils/interp/*): token ids named under the caller's
argument, meta attention in plot_all_heads, HeadTrace consistency (frozen, one model's trace),
bool positions, finite DLA directions, non-empty str names, flip_subject_number's unknown token."""

from __future__ import annotations

import dataclasses

import matplotlib

matplotlib.use("Agg")

import ipywidgets  # noqa: E402
import pytest  # noqa: E402
import torch  # noqa: E402
from bad_input_cases import tiny_model  # noqa: E402

from course_utils.interp import ablation, circuits, patching  # noqa: E402
from course_utils.interp.heatmaps import plot_all_heads  # noqa: E402
from course_utils.interp.scores import agreement_score  # noqa: E402
from course_utils.interp.widgets import Explorer  # noqa: E402
from course_utils.tasks.synthetic import AgreementTask  # noqa: E402

V, MAX_LEN = 16, 12


_model = tiny_model  # vocabulary V, max_len MAX_LEN


MODEL = _model()
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


# -- g04: meta attention in plot_all_heads -----------------------------------------------
@pytest.mark.parametrize("attention,name", [
    ([torch.empty(1, 2, 4, 4, device="meta")] * 2, "attention[0]"),
    ([torch.rand(1, 2, 4, 4), torch.empty(1, 2, 4, 4, device="meta")], "attention[1]"),
    (torch.empty(1, 2, 4, 4, device="meta"), "attention"),
])
def test_plot_all_heads_refuses_meta_attention_by_name(attention, name: str) -> None:
    with pytest.raises(ValueError) as info:
        plot_all_heads(attention, list("abcd"))
    assert str(info.value).startswith(f"{name} ") and "meta device" in str(info.value)


# -- g09 + g30: HeadTrace is one model's consistent, frozen trace --------------------------
TRACE = circuits.trace_heads(MODEL, TOKENS)


@pytest.mark.parametrize("other,wrong", [
    ({"num_layers": 3}, "num_layers=3 (model: 2)"),
    ({"num_heads": 4}, "num_heads=4 (model: 2)"),
    ({"d_model": 8}, "d_model=8 (model: 16)"),
    ({"vocab_size": V + 4}, f"vocab_size={V + 4} (model: {V})"),
])
def test_dla_refuses_a_trace_of_another_model(other: dict, wrong: str) -> None:
    trace = circuits.trace_heads(_model(**other), TOKENS)
    with pytest.raises(ValueError) as info:
        circuits.direct_logit_attribution(MODEL, trace, TOKENS)
    assert str(info.value).startswith("trace must be a trace of model") and wrong in str(info.value)


def test_dla_refuses_a_trace_of_another_dtype() -> None:
    trace = circuits.trace_heads(_model().double(), TOKENS)
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


@pytest.mark.parametrize("name,error", [(3, TypeError), (None, TypeError), ("", ValueError)])
def test_explorer_refuses_a_control_name_that_is_no_str(name: object, error: type) -> None:
    with pytest.raises(error) as info:
        Explorer(lambda **values: "x", {"a": ipywidgets.IntSlider(), name: ipywidgets.IntSlider()})
    assert "controls' names" in str(info.value) and f"{type(name).__name__} {name!r}" in str(info.value)


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
