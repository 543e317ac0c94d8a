"""Bad input to the interpretability plots and widgets: course_utils.interp.heatmaps (plot_head,
plot_all_heads, AttentionExplorer, model_attention) and widgets (Explorer, show,
dimension_explorer), with the table-driven interp checks that draw them. Bad draws and fallbacks
answered with a message, meta or NaN attention, titles and labels of the wrong type.

Moved here from the QA batteries' files (issue 38 and later batteries), grouped by the code under test;
a `# -- battery N` line marks where each battery's cases begin. Helpers shared with other bad-input
files live in tests/bad_input_cases.py."""

from __future__ import annotations

import os
import subprocess
import sys
import warnings
from collections.abc import Callable

import ipywidgets
import matplotlib
import matplotlib.pyplot as plt
import pytest
import torch
from bad_input_cases import ROOT, BadRepr, Case, assert_named, raises_naming, refused, small_model

from course_utils.attention.masks import causal_mask, padding_mask
from course_utils.attention.mha import MultiHeadAttention
from course_utils.attention.mla import MultiHeadLatentAttention, cache_elements_per_token, rope
from course_utils.attention.shapes import trace_shapes
from course_utils.interp import ablation, heatmaps, patching
from course_utils.interp import ablation as A
from course_utils.interp import patching as P
from course_utils.interp import scores as S
from course_utils.interp.circuits import HeadTrace, in_context_mass, trace_heads
from course_utils.interp.heatmaps import AttentionExplorer, model_attention, plot_all_heads, plot_head
from course_utils.interp.scores import (
    agreement_score,
    attention_mass,
    best_head,
    chance_level,
    head_score_table,
    ideal_pattern,
    induction_score,
    mean_by_group,
    role_verdicts,
    verdict,
)
from course_utils.interp.widgets import Explorer, dimension_explorer, show
from course_utils.model.checkpoint import load_checkpoint, save_checkpoint
from course_utils.model.kv_cache import (
    CatCache,
    PreallocatedCache,
    QuantizedCache,
    dequantize_kv,
    quantize_kv,
    quantized_bytes_per_token,
    repeatable_step,
)
from course_utils.model.paged_cache import PagedCache, blocks_needed
from course_utils.model.transformer import ModelConfig, TinyTransformer, convert_model
from course_utils.parallel import parallel_map
from course_utils.tasks import two_relations as tr
from course_utils.tasks.synthetic import AgreementTask, MixtureTask, detokenize

matplotlib.use("Agg")


# -- battery 6 (interp) ------------------------------------------------------------------------------

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


# -- battery 6 (reports) -----------------------------------------------------------------------------

def test_nan_weights_are_drawn_with_a_warning_that_counts_them():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from course_utils.interp.heatmaps import plot_head

    weights = torch.rand(3, 3)
    weights[0, 0] = float("nan")
    with pytest.warns(UserWarning, match=r"weights: 1 of 9 entries are NaN"):
        ax = plot_head(weights, ["a", "b", "c"])
    plt.close(ax.figure)
    with warnings.catch_warnings():  # finite weights: no warning
        warnings.simplefilter("error")
        ax = plot_head(torch.rand(3, 3), ["a", "b", "c"])
    plt.close(ax.figure)


# -- battery 9b --------------------------------------------------------------------------------------

# -- 4. interp helpers: silent results, sizes beyond memory, raw errors ---------------------------
def _interp_cases():
    import math

    import torch

    from course_utils.interp import ablation as A
    from course_utils.interp import circuits as C
    from course_utils.interp import heatmaps as H
    from course_utils.interp import patching as P
    from course_utils.interp import scores as S
    from course_utils.model.transformer import ModelConfig, TinyTransformer

    torch.manual_seed(0)
    config = ModelConfig(vocab_size=10, max_len=8, d_model=8, num_heads=2, num_layers=2)
    model = TinyTransformer(config).eval()
    tokens = torch.randint(0, 10, (2, 6))
    targets = torch.randint(0, 10, (2, 6))
    evaluation = A.loss_evaluation(tokens, targets)
    weights = torch.softmax(torch.randn(2, 2, 5, 5), -1)
    grid = [torch.softmax(torch.randn(1, 2, 6, 6), -1)]
    two_heads = [(0, 0), (0, 1)]
    inf_diagonal = torch.where(torch.eye(4, dtype=torch.bool), math.inf, 0.0)
    return [  # (id, call, error, words: the argument, what was expected, what arrived)
        ("mean_by_group decimals 400",
         lambda: S.mean_by_group({"a": [1.0, 2.0]}, {"g": ["x", "y"]}, decimals=400),
         ValueError, ["decimals", "0..15", "400"]),
        ("head_score_table decimals 400",
         lambda: S.head_score_table({"induction": torch.rand(2, 2)}, decimals=400),
         ValueError, ["decimals", "0..15", "400"]),
        ("mean_by_group NaN label",
         lambda: S.mean_by_group({"a": [1.0, 2.0, 3.0]}, {"g": ["x", math.nan, None]}),
         ValueError, ["groups['g']", "label", "NaN or None", "[1, 2]"]),
        ("mean_by_group str values", lambda: S.mean_by_group({"a": "ab"}, {"g": ["x", "y"]}),
         TypeError, ["values['a']", "numbers, one per sequence", "str 'ab'"]),
        ("agreement_score empty positions", lambda: S.agreement_score(weights, [], []),
         ValueError, ["query_positions", "one position per sequence", "expected 2", "got none"]),
        ("induction_positions huge", lambda: S.induction_positions(10**12, 2, start=0),
         ValueError, ["seq_len", "GiB", "memory"]),
        ("induction_key_mask huge", lambda: S.induction_key_mask(10**12, 2, start=0),
         ValueError, ["seq_len", "GiB", "1,000,000,000,000"]),
        ("ideal_pattern huge", lambda: S.ideal_pattern("previous token", 10**6),
         ValueError, ["seq_len", "GiB", "1,000,000"]),
        ("chance_level huge", lambda: S.chance_level("previous token", 10**15),
         ValueError, ["seq_len", "GiB"]),
        ("chance_level start -1", lambda: S.chance_level("first token", 8, start=-1),
         ValueError, ["start", ">= 0", "-1"]),
        ("pruning_curve repeated count", lambda: A.pruning_curve(model, evaluation, two_heads, counts=[1, 1]),
         ValueError, ["counts", "distinct", "repeats [1]"]),
        ("pruning_curve no count", lambda: A.pruning_curve(model, evaluation, two_heads, counts=[]),
         ValueError, ["counts", "at least one", "[]"]),
        ("prunable_counts repeated head", lambda: P.prunable_counts(model, evaluation, [[(0, 0), (0, 0)]],
                                                                    lambda numbers: True),
         ValueError, ["orders[0]", "lists a head twice", "L0H0 (0, 0)"]),
        ("losses_along_orders repeated head", lambda: P.losses_along_orders(model, tokens, targets,
                                                                            [[(0, 1)], [(1, 0), (1, 0)]], 1),
         ValueError, ["orders[1]", "lists a head twice", "L1H0 (1, 0)"]),
        ("frozen_final_norm inf stream", lambda: C.frozen_final_norm(model, torch.full((2, 8), math.inf),
                                                                     torch.ones(2, 8)),
         ValueError, ["stream", "finite", "inf at index (0, 0)"]),
        ("plot_head inf weight", lambda: H.plot_head(inf_diagonal, list("abcd")),
         ValueError, ["weights", "[0, 1]", "inf at (query, key) (0, 0)"]),
        ("plot_all_heads huge panel", lambda: H.plot_all_heads(grid, list("abcdef"), panel_size=10**6),
         ValueError, ["panel_size", "pixels", "65,536"]),
        ("resampled_rows bool lengths", lambda: P.resampled_rows(torch.tensor([True]), torch.tensor([1]),
                                                                 generator=torch.Generator()),
         ValueError, ["lengths", "integer tensor", "torch.bool"]),
        ("resampled_outputs huge seq_len", lambda: P.resampled_outputs(
            model, torch.tensor([6]), tokens, torch.tensor([6, 6]), 10**9, generator=torch.Generator()),
         ValueError, ["seq_len", "GiB", "1,000,000,000"]),
        ("mean_head_outputs keep on meta", lambda: A.mean_head_outputs(
            model, tokens, keep=torch.ones(2, 6, dtype=torch.bool, device="meta")),
         ValueError, ["keep", "meta device", "(2, 6)"]),
        ("direct_logit_attribution edit_heads 3", lambda: P.direct_logit_attribution(
            model, tokens, torch.tensor([1, 2]), torch.ones(10), edit_heads=3),
         TypeError, ["edit_heads", "a function (layer, heads)", "int 3"]),
        ("resampled_one_at_a_time positions 99", lambda: P.resampled_one_at_a_time(
            model, tokens, A.head_outputs(model, tokens), torch.zeros(1, 2, dtype=torch.long), [(0, 0)],
            positions=torch.tensor([99, 0])),
         ValueError, ["positions", "0..5", "99"]),
    ]


INTERP = _interp_cases()


@pytest.mark.parametrize("call, error, words", [c[1:] for c in INTERP], ids=[c[0] for c in INTERP])
def test_an_interp_helper_refuses_by_name(call, error, words):
    import matplotlib

    matplotlib.use("Agg")
    with pytest.raises(error) as caught:
        call()
    missing = [w for w in words if w not in str(caught.value)]
    assert not missing, f"{missing} not in {caught.value}"


# -- battery 10 --------------------------------------------------------------------------------------

# -- 2. learner-facing helpers name the argument, what they expected and what arrived ------------
TASK = tr.TwoKeyTask()


MODEL = tr.LookupModel(TASK, 16, 2)


BATCH = TASK.sample(4, seed=0)


INT_TENSOR = torch.ones(2, 4, 8, dtype=torch.long)


LEARNER = [
    ("AgreementTask templates int", lambda: AgreementTask(templates=5), TypeError,
     ["templates", "tuple of template names", "int 5"]),
    ("AgreementTask templates None", lambda: AgreementTask(templates=None), TypeError,
     ["templates", "tuple of template names", "NoneType None"]),
    ("AgreementTask attractor_p str", lambda: AgreementTask(attractor_p="x"), TypeError,
     ["attractor_p", "probability in [0, 1]", "str 'x'"]),
    ("AgreementTask attractor_p None", lambda: AgreementTask(attractor_p=None), TypeError,
     ["attractor_p", "real number", "NoneType None"]),
    ("AgreementTask attractor_p True", lambda: AgreementTask(attractor_p=True), TypeError,
     ["attractor_p", "real number", "bool True"]),
    ("AgreementTask adjective_p str", lambda: AgreementTask(adjective_p="x"), TypeError,
     ["adjective_p", "probability", "str 'x'"]),
    ("MixtureTask induction_share str", lambda: MixtureTask(induction_share="x"), TypeError,
     ["induction_share", "strictly between 0 and 1", "str 'x'"]),
    ("MixtureTask induction_share None", lambda: MixtureTask(induction_share=None), TypeError,
     ["induction_share", "real number", "NoneType"]),
    ("detokenize None", lambda: detokenize(None), TypeError, ["tokens", "integer ids", "NoneType None"]),
    ("evaluate model None", lambda: tr.evaluate(None, BATCH), TypeError,
     ["model", "LookupModel", "NoneType"]),
    ("evaluate model str", lambda: tr.evaluate("x", BATCH), TypeError, ["model", "LookupModel", "str 'x'"]),
    ("evaluate batch int", lambda: tr.evaluate(MODEL, 5), TypeError, ["batch", "LookupBatch", "int 5"]),
    ("accuracy_table str", lambda: tr.accuracy_table("abc"), TypeError,
     ["results", "list of RunResult", "str"]),
    ("accuracy_table [None]", lambda: tr.accuracy_table([None]), TypeError,
     ["results[0]", "RunResult", "NoneType"]),
    ("accuracy_table int", lambda: tr.accuracy_table(5), TypeError, ["results", "list of RunResult", "int"]),
    ("example_table batch None", lambda: tr.example_table(None), TypeError,
     ["batch", "LookupBatch", "NoneType"]),
    ("example_table index str", lambda: tr.example_table(BATCH, "3"), TypeError, ["index", "int", "str '3'"]),
    ("example_table index 9", lambda: tr.example_table(BATCH, 9), IndexError, ["index", "0..3", "got 9"]),
    ("share_on_a model int", lambda: tr.share_on_a(5, BATCH), TypeError, ["model", "LookupModel", "int 5"]),
    ("accuracy_by_share model None", lambda: tr.accuracy_by_share(None, BATCH), TypeError,
     ["model", "LookupModel", "NoneType"]),
    ("plot_item_attention batch str", lambda: tr.plot_item_attention(MODEL, "x"), TypeError,
     ["batch", "LookupBatch", "str 'x'"]),
    ("model_attention of one layer",
     lambda: model_attention(MultiHeadAttention(8, 2), torch.zeros(1, 3).long()), TypeError,
     ["model", "return_attention=True", "TinyTransformer", "MultiHeadAttention", "need_weights=True"]),
    ("trace_shapes integer query", lambda: trace_shapes(MultiHeadAttention(8, 2), INT_TENSOR), TypeError,
     ["query", "floating-point", "torch.int64"]),
    ("trace_shapes integer key_value", lambda: trace_shapes(MultiHeadAttention(8, 2), torch.ones(2, 4, 8),
                                                            INT_TENSOR), TypeError,
     ["key_value", "floating-point", "torch.int64"]),
    ("trace_shapes float64 query", lambda: trace_shapes(MultiHeadAttention(8, 2), INT_TENSOR.double()),
     TypeError, ["query", "torch.float64", "module's parameters are torch.float32"]),
    ("rope positions on another device", lambda: rope(torch.ones(3, 4, device="meta"), torch.arange(3)),
     ValueError, ["positions", "x's device meta", "got device cpu"]),
]


@pytest.mark.parametrize("call, error, words", [c[1:] for c in LEARNER], ids=[c[0] for c in LEARNER])
def test_learner_facing_helpers_name_a_wrong_argument(call, error, words):
    refused(call, error, words)


# -- battery 11 --------------------------------------------------------------------------------------

# -- items 11-13: a tensor on the meta device is named before its values are read ------------------
def _meta_cases():
    from course_utils.attention.masks import causal_mask, masked_softmax
    from course_utils.interp.heatmaps import model_attention, plot_head
    from course_utils.model.transformer import ModelConfig, TinyTransformer
    from course_utils.tasks import two_relations as tr

    scores, allowed = torch.zeros(1, 3, 3), causal_mask(3)
    a = torch.tensor([1, 2])
    torch.manual_seed(0)
    config = ModelConfig(vocab_size=8, max_len=8, d_model=8, num_heads=2, num_layers=1)
    model = TinyTransformer(config)
    with torch.device("meta"):
        meta_model = TinyTransformer(config)
    tokens = torch.tensor([[1, 2, 3]])
    return [
        ("masked_softmax scores meta", lambda: masked_softmax(scores.to("meta"), allowed), ValueError,
         ["scores and allowed must be on one device", "meta (a shape without values)", "cpu"]),
        ("masked_softmax allowed meta", lambda: masked_softmax(scores, allowed.to("meta")), ValueError,
         ["allowed on device meta (a shape without values)"]),
        ("model_attention tokens meta", lambda: model_attention(model, tokens.to("meta")), ValueError,
         ["tokens is on the meta device"]),
        ("model_attention model meta", lambda: model_attention(meta_model, tokens), ValueError,
         ["model's", "meta device"]),
        ("plot_head weights meta", lambda: plot_head(torch.eye(2).to("meta"), ["a", "b"]), ValueError,
         ["weights is on the meta device"]),
        ("pair_class a meta", lambda: tr.pair_class(a.to("meta"), a, 8), ValueError,
         ["symbol_a is on the meta device"]),
        ("pair_class b meta", lambda: tr.pair_class(a, a.to("meta"), 8), ValueError,
         ["symbol_b is on the meta device"]),
        ("split_pair_class meta", lambda: tr.split_pair_class(a.to("meta"), 8), ValueError,
         ["classes is on the meta device"]),
    ]


META = _meta_cases()


@pytest.mark.parametrize("label, call, error, words", META, ids=[c[0] for c in META])
def test_meta_tensors_are_named_before_use(label, call, error, words):
    refused(call, error, words)


# -- battery 12 --------------------------------------------------------------------------------------

# -- 10. explorers answer an unknown keyword with a message --------------------------------------
@pytest.mark.slow  # the first explorer of a process takes seconds (ipywidgets)
def test_dimension_explorer_names_its_sliders(capsys):
    from course_utils.interp import widgets as W

    explorer = W.show_dimension_explorer(zzz=3, batch=2)
    message = explorer.last_text
    assert "zzz=3" in message and all(k in message for k in ("batch", "seq_len", "d_model", "num_heads"))
    assert "zzz=3 is not a slider" in capsys.readouterr().out


# -- battery 13 --------------------------------------------------------------------------------------

# -- b13 obscure: AttentionExplorer unpacked a list of two layers as (labels, one layer), miscounting --
def test_attention_explorer_names_a_function_that_returns_no_pair():
    from course_utils.interp.heatmaps import AttentionExplorer

    two_layers = lambda text: [torch.rand(1, 4, 2, 2)] * 2  # noqa: E731 - weights alone, no labels
    assert_named(Case("explorer", lambda: AttentionExplorer(two_layers, ["the cat"], 2, 4), ValueError,
                      ["attention_for must return a pair", "list of 2 item(s), the first a Tensor"]))
    pair = lambda text: (["the", "cat"], [torch.rand(1, 4, 2, 2)] * 2)  # noqa: E731 - the control
    assert AttentionExplorer(pair, ["the cat"], 2, 4).num_layers == 2


# -- battery 14 (fix44c) -----------------------------------------------------------------------------

# -- env, widgets, training: each argument checked where it arrives -----------------------------
def _explorer(**kwargs):
    import ipywidgets as widgets

    from course_utils.interp.widgets import Explorer

    return Explorer(lambda n: f"n={n}", {"n": widgets.IntSlider(value=1, min=0, max=3)}, **kwargs)


def _train(**kwargs):
    from course_utils.model.train import TrainConfig, train_model

    model = TinyTransformer(ModelConfig(vocab_size=10, max_len=8, d_model=8, num_heads=2, num_layers=1))
    batch = lambda g: (torch.randint(0, 10, (2, 6), generator=g),) * 2  # noqa: E731
    return train_model(model, batch, TrainConfig(steps=1), progress=False, **kwargs)


MISC_CASES = [
    Case("Explorer/rows nan", lambda: _explorer(rows=float("nan")), TypeError,
         ["rows", "list of rows", "float nan"]),
    Case("Explorer/rows object", lambda: _explorer(rows=object()), TypeError,
         ["rows", "list of rows", "object"]),
    Case("Explorer/note int", lambda: _explorer(note=123), TypeError, ["note", "str", "int 123"]),
    Case("train_model/evaluate -1", lambda: _train(evaluate=-1), TypeError,
         ["evaluate", "function model", "int -1"]),
]


@pytest.mark.parametrize("case", MISC_CASES, ids=lambda c: c.name)
def test_misc_arguments_checked_where_they_arrive(case):
    assert_named(case)


def test_misc_good_arguments_still_work():
    assert _explorer(rows=[["n"]], note="no widgets here").note == "no widgets here"
    history = _train(evaluate=lambda model: {"x": 1.0}, eval_every=1)
    assert history is not None


# -- battery 15 (fix45d) -----------------------------------------------------------------------------

def test_plot_all_heads_refuses_head_titles_of_the_wrong_arity():
    from course_utils.interp.heatmaps import plot_all_heads
    with pytest.raises(TypeError, match=r"head_titles must be a function \(layer, head\).* cannot take 2"):
        plot_all_heads(torch.full((1, 1, 2, 2), 0.5), ["a", "b"], head_titles=lambda head: "x")


# -- battery 16 (fix46q) -----------------------------------------------------------------------------

matplotlib.use("Agg")


ABLATION_MODEL = small_model()


TOKENS = torch.tensor([[1, 2, 3, 4, 1, 2], [2, 3, 4, 1, 2, 3]])


OUTPUTS = A.head_outputs(ABLATION_MODEL, TOKENS)  # (L, B, h, T, dk)


ROWS = torch.zeros(1, 2, dtype=torch.long)


EMPTY_BATCH = torch.full((0, 2, 4, 4), 0.25)


META_DEVICE = "meta"


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
        ABLATION_MODEL, TOKENS, OUTPUTS.to(META_DEVICE), ROWS, [(0, 0)]),
     ValueError, ["reference_outputs", "meta"]),
    ("resampled_one_at_a_time int64 reference_outputs", lambda: P.resampled_one_at_a_time(
        ABLATION_MODEL, TOKENS, OUTPUTS.long(), ROWS, [(0, 0)]), TypeError,
     ["reference_outputs", "torch.int64"]),
    ("resampled_one_at_a_time inf reference_outputs", lambda: P.resampled_one_at_a_time(
        ABLATION_MODEL, TOKENS, _with_inf(OUTPUTS), ROWS, [(0, 0)]), ValueError,
     ["reference_outputs", "inf"]),
    ("resampled_outputs int64 reference_outputs", lambda: P.resampled_outputs(
        ABLATION_MODEL, torch.tensor([6]), TOKENS, torch.tensor([6, 6]), 6, generator=torch.Generator(),
        reference_outputs=OUTPUTS.long()), TypeError, ["reference_outputs", "torch.int64"]),
    ("resampled_one_at_a_time meta rows", lambda: P.resampled_one_at_a_time(
        ABLATION_MODEL, TOKENS, OUTPUTS, ROWS.to(META_DEVICE), [(0, 0)]), ValueError, ["rows", "meta"]),
    ("EvaluationAt meta positions", lambda: P.EvaluationAt(
        TOKENS, lambda logits: {"a": 1.0}, torch.zeros(2, dtype=torch.long, device=META_DEVICE)),
     ValueError, ["EvaluationAt.positions", "meta"]),
    ("losses_along_orders meta targets", lambda: P.losses_along_orders(
        ABLATION_MODEL, TOKENS, TOKENS.to(META_DEVICE), [[(0, 0)]], 1), ValueError, ["targets", "meta"]),
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
    ("loss_evaluation meta targets", lambda: A.loss_evaluation(TOKENS, TOKENS.to(META_DEVICE)),
     ValueError, ["targets", "meta"]),
    # NaN scores; prunable_counts' known and map_fn
    ("measure NaN score",
     lambda: A.measure(ABLATION_MODEL, A.Evaluation(TOKENS, lambda logits: {"a": float("nan")})),
     ValueError, ["evaluations[0].score", "'a'", "nan"]),
    ("prunable_counts known int values", lambda: P.prunable_counts(
        ABLATION_MODEL, A.loss_evaluation(TOKENS, TOKENS), [[(0, 0)]], lambda x: True,
        known={frozenset({(0, 0)}): 3}),
     TypeError, ["known[{(0, 0)}]", "int 3"]),
    ("prunable_counts map_fn short", lambda: P.prunable_counts(
        ABLATION_MODEL, A.loss_evaluation(TOKENS, TOKENS), [[(0, 0)]], lambda x: True,
        map_fn=lambda f, xs: []),
     ValueError, ["map_fn", "0 results for 1 parts"]),
    ("prunable_counts map_fn part short", lambda: P.prunable_counts(
        ABLATION_MODEL, A.loss_evaluation(TOKENS, TOKENS), [[(0, 0)]], lambda x: True,
        map_fn=lambda f, xs: [[]]),
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


# -- battery 17 (fix47q) -----------------------------------------------------------------------------

def _uniform_attention(text: str) -> tuple[list[str], list[torch.Tensor]]:
    words = text.split()
    n = len(words)
    weights = torch.ones(n, n).tril()
    weights = weights / weights.sum(-1, keepdim=True)
    return words, [weights.expand(1, 2, n, n).clone() for _ in range(2)]


# -- C1: explorer calls never raise at a bad draw / explorer / fallback --------------------
@pytest.mark.parametrize("draw", ["abc", 7, True, lambda: None])
def test_attention_explorer_answers_a_bad_draw_with_a_message(draw, capsys):
    explorer = AttentionExplorer(_uniform_attention, ["the cat sat"], 2, 2)
    result = explorer.explorer("the cat sat", 0, 0, draw=draw)
    out = capsys.readouterr().out
    assert isinstance(result, Explorer)
    assert "draw must be None or a function" in out and type(draw).__name__ in out
    assert result.output in result.widget.children  # drawn in its own output area instead


@pytest.mark.parametrize("bad", [None, "abc", True, 7, []])
def test_show_answers_a_non_explorer_with_a_message(bad, capsys):
    assert show(bad) is None
    out = capsys.readouterr().out
    assert "explorer must be an Explorer" in out and f"got {type(bad).__name__} {bad!r}" in out


@pytest.mark.parametrize("bad", [True, 7])
def test_show_answers_a_bad_fallback_with_a_message(bad, capsys):
    explorer = dimension_explorer()
    capsys.readouterr()
    show(explorer, fallback=bad)
    out = capsys.readouterr().out
    assert f"fallback must be a str (the text to print) or None, got {type(bad).__name__} {bad!r}" in out
    assert explorer.last_text in out  # the explorer's own text instead


# -- C2: an exception in a draw callback becomes a message -------------------------------
def test_explorer_answers_a_failing_draw_with_a_message():
    explorer = Explorer(lambda **kw: "x", {"a": ipywidgets.IntSlider(1)}, draw=lambda r: 1 / 0)
    explorer.refresh()
    assert "draw raised ZeroDivisionError" in explorer.last_text
    assert explorer.output in explorer.widget.children  # shown under the controls
    assert "ZeroDivisionError" in explorer.output.outputs[0]["text"]


# -- S4 / O10: fontsize has an upper bound, checked before anything is drawn ---------------
@pytest.mark.parametrize("plot", ["plot_head", "plot_all_heads"])
@pytest.mark.parametrize("fontsize", [10**12, 1e6, 101])
def test_plots_refuse_a_huge_fontsize_by_name(plot, fontsize):
    import matplotlib.pyplot as plt

    from course_utils.interp import heatmaps

    weights = torch.full((4, 4), 0.25)
    args = (weights, list("abcd")) if plot == "plot_head" else ([weights.expand(1, 2, 4, 4)], list("abcd"))
    with pytest.raises(ValueError, match=f"fontsize must be .*got {fontsize!r}"):
        getattr(heatmaps, plot)(*args, fontsize=fontsize)
    plt.close("all")


# battery 18: an error whose str() itself raises escaped refresh (explorers never raise)
class _Unprintable(Exception):
    def __str__(self) -> str:
        raise ValueError("no str")


@pytest.mark.parametrize("broken", ["render", "draw"])
def test_an_error_whose_message_cannot_be_shown_is_still_a_message(broken):
    from course_utils.interp import widgets

    def fail(*args, **kwargs):
        raise _Unprintable()

    explorer = widgets.Explorer(fail if broken == "render" else (lambda x: x),
                                controls={"x": __import__("ipywidgets").IntSlider(value=1)},
                                **({"draw": fail} if broken == "draw" else {}))
    explorer.refresh()
    assert "_Unprintable (its message could not be shown)" in explorer.last_text


# -- battery 18 (fix48q) -----------------------------------------------------------------------------

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


@pytest.mark.parametrize("name,error", [(3, TypeError), (None, TypeError), ("", ValueError)])
def test_explorer_refuses_a_control_name_that_is_no_str(name: object, error: type) -> None:
    with pytest.raises(error) as info:
        Explorer(lambda **values: "x", {"a": ipywidgets.IntSlider(), name: ipywidgets.IntSlider()})
    assert "controls' names" in str(info.value) and f"{type(name).__name__} {name!r}" in str(info.value)


# -- battery 19 (fix49q) -----------------------------------------------------------------------------

# ----------------------------------------------------------------------------- g14: never raise
class _UnprintableRuntimeError(Exception):
    def __str__(self) -> str:
        raise RuntimeError("no str")


class _NoRepr:
    def __repr__(self) -> str:
        raise ZeroDivisionError("no repr")


def _attention_for(text: str) -> tuple[list[str], list[torch.Tensor]]:
    if text.startswith("b"):
        raise _UnprintableRuntimeError()
    if text.startswith("c"):
        return _NoRepr()  # type: ignore[return-value]
    T = len(text.split())
    w = torch.full((2, T, T), 1.0 / T)
    return text.split(), [w, w]


EXPLORER = AttentionExplorer(_attention_for, ["a b c", "a b"], 2, 2)


@pytest.mark.parametrize("text, layer, head, named", [
    ("b c a b", 0, 0, "_Unprintable"),  # an attention_for error whose str() raises
    ("c a", 0, 0, "_NoRepr"),  # an attention_for result whose repr raises
    ("a b", _NoRepr(), 0, "layer"),  # a layer whose repr raises
    ("a b", 0, _NoRepr(), "head"),
])
def test_attention_explorer_static_answers_unprintable_values(text, layer, head, named, capsys):
    result = EXPLORER.static(text, layer, head)
    assert isinstance(result, str) and named in result
    assert named in capsys.readouterr().out


@pytest.mark.parametrize("name", ["batch", "seq_len", "d_model", "num_heads"])
def test_dimension_explorer_answers_a_value_whose_repr_raises(name, capsys):
    explorer = dimension_explorer(**{name: _NoRepr()})
    assert name in explorer.last_text and "_NoRepr" in explorer.last_text
    assert name in capsys.readouterr().out


def test_dimension_explorer_answers_an_unknown_keyword_whose_repr_raises(capsys):
    explorer = dimension_explorer(typo=_NoRepr())
    assert "typo" in explorer.last_text and "_NoRepr" in explorer.last_text


@pytest.mark.parametrize("kwargs, named", [
    ({"explorer": _NoRepr()}, "explorer must be an Explorer"),
    ({"fallback": _NoRepr()}, "fallback must be a str"),
])
def test_show_answers_a_value_whose_repr_raises(kwargs, named, capsys):
    explorer = kwargs.pop("explorer", None) or dimension_explorer()
    show(explorer, **kwargs)
    out = capsys.readouterr().out
    assert named in out and "_NoRepr" in out


# -- battery 21 (fix51r) -----------------------------------------------------------------------------

MAX = getattr(heatmaps, "MAX_POSITIONS", 512)  # the limits plot_head states


LABELLED = getattr(heatmaps, "MAX_LABELLED_POSITIONS", 64)


# -- group 8: plot_head on thousands of positions -----------------------------------------
@pytest.mark.parametrize("shape", [(MAX + 1, MAX + 1), (1, MAX + 1), (MAX + 1, 2)])
def test_plot_head_refuses_more_positions_than_it_draws(shape: tuple[int, int]) -> None:
    weights = torch.zeros(shape)
    rows, cols = [str(i) for i in range(shape[0])], [str(i) for i in range(shape[1])]
    raises_naming(ValueError, ["weights", str(shape), str(MAX)],
                  lambda: heatmaps.plot_head(weights, rows, key_tokens=cols))


def test_plot_all_heads_refuses_them_before_making_a_figure() -> None:
    figures = plt.get_fignums()
    raises_naming(ValueError, ["attention", f"(1, 2, {MAX + 1}, {MAX + 1})", str(MAX)],
                  lambda: heatmaps.plot_all_heads(torch.zeros(1, 2, MAX + 1, MAX + 1), ["a"] * (MAX + 1)))
    assert plt.get_fignums() == figures  # no figure left behind


@pytest.mark.parametrize("length", [LABELLED + 1, MAX])
def test_plot_head_labels_every_kth_position_of_a_long_axis(length: int) -> None:
    labels = [f"t{i}" for i in range(length)]
    ax = heatmaps.plot_head(torch.eye(length), labels)
    try:
        for ticks in (ax.get_xticklabels(), ax.get_yticklabels()):
            texts = [t.get_text() for t in ticks]
            assert 1 < len(texts) <= LABELLED and texts[0] == "t0"
            step = int(texts[1][1:])
            assert texts == labels[::step]  # each tick names its own position
            assert list(ax.get_xticks()[:2]) == [0.5, step + 0.5]
    finally:
        plt.close(ax.figure)


def test_plot_head_labels_every_position_of_a_lesson_sized_axis() -> None:
    labels = [f"t{i}" for i in range(LABELLED)]
    ax = heatmaps.plot_head(torch.eye(len(labels)), labels)
    try:
        assert [t.get_text() for t in ax.get_xticklabels()] == labels
        assert [t.get_text() for t in ax.get_yticklabels()] == labels
    finally:
        plt.close(ax.figure)


# -- group 9: AttentionExplorer.show's messages outside a kernel --------------------------
def _identity_attention_explorer() -> heatmaps.AttentionExplorer:
    def attention_for(text: str) -> tuple[list[str], list[torch.Tensor]]:
        words = ["<bos>", *text.split()]
        return words, [torch.eye(len(words))[None, None].expand(1, 2, -1, -1)] * 2

    return heatmaps.AttentionExplorer(attention_for, ["the cat sat"], num_layers=2, num_heads=2)


@pytest.mark.parametrize("text,layer,message", [
    ("", 0, "Type a sentence first."),
    ("   ", 1, "Type a sentence first."),
    (3, 0, "The sentence must be a str"),
])
def test_show_prints_its_message_as_text_outside_a_kernel(capsys: pytest.CaptureFixture, text: object,
                                                          layer: int, message: str) -> None:
    _identity_attention_explorer().show(text=text, layer=layer)
    out = capsys.readouterr().out
    assert message in out and "object>" not in out and "object at 0x" not in out, out
    assert heatmaps.CONTROLS_NOTE in out


def test_show_displays_its_message_in_a_kernel_as_before(monkeypatch: pytest.MonkeyPatch) -> None:
    import IPython.display

    from course_utils.interp import widgets

    shown = []
    monkeypatch.setattr(widgets, "in_jupyter_kernel", lambda: True)
    monkeypatch.setattr(IPython.display, "display", lambda obj, **kwargs: shown.append(obj))
    _identity_attention_explorer().show(text="")
    assert isinstance(shown[0], IPython.display.Pretty) and shown[0].data == "Type a sentence first."
    assert isinstance(shown[-1], widgets.Explorer) and len(shown) == 2


# -- battery 27 (fix57) ------------------------------------------------------------------------------

# -- explorers never raise, even on an ASCII stdout ------------------------------------------------------
def test_an_explorer_prints_on_an_ascii_stdout() -> None:
    code = ("from course_utils.interp.widgets import dimension_explorer; "
            "dimension_explorer(heads='\\u00e9t\\u00e9')")
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120,
                            env=dict(os.environ, PYTHONPATH=str(ROOT), PYTHONIOENCODING="ascii"))
    assert result.returncode == 0, result.stderr
    assert "heads='\\xe9t\\xe9' is not a slider" in result.stdout, result.stdout


# -- battery 28 (library) ----------------------------------------------------------------------------

def test_say_prints_a_fallback_for_a_value_whose_str_raises(capsys) -> None:
    from course_utils.interp.widgets import say

    say(BadRepr())
    assert capsys.readouterr().out == "<a BadRepr whose str() raised RuntimeError>\n"
    say(12)  # anything else as print shows it
    assert capsys.readouterr().out == "12\n"


def test_the_explorers_show_a_value_whose_repr_raises_as_validation_shown_does(capsys) -> None:
    from course_utils.attention.validation import shown
    from course_utils.interp import widgets

    assert not hasattr(widgets, "_safe_repr")  # one helper for this, validation.shown
    widgets.show(BadRepr())
    out = capsys.readouterr().out
    assert "explorer must be an Explorer" in out and shown(BadRepr()) in out
    assert "BadRepr whose repr raised RuntimeError" in out


# -- battery 29 (library) ----------------------------------------------------------------------------

def test_say_never_raises_on_a_raising_stream(monkeypatch):
    import sys

    from course_utils.interp.widgets import say

    class BrokenStream:
        encoding = "utf-8"

        def write(self, s):
            raise RuntimeError("stream broken")

        def flush(self):
            pass

    monkeypatch.setattr(sys, "stdout", BrokenStream())
    say("x")  # nothing printed, nothing raised


# -- battery (issue 38 closing check) ----------------------------------------------------------------

M = small_model()


TOK = torch.tensor([[1, 2, 3, 4]])


W = torch.softmax(torch.randn(1, 2, 4, 4, generator=torch.Generator().manual_seed(0)), -1)


EV = ablation.loss_evaluation(TOK, TOK.roll(-1, 1))


one = torch.ones(1, 2, 1, 4)


torch.manual_seed(0)


mla = MultiHeadLatentAttention(16, 2, 4, 8, 4)


TMP = "/nonexistent-dir-for-bad-input"  # never written: each save below is refused first


CASES_b0 = [
    Case(
        "QuantizedCache keys='row'",
        lambda: QuantizedCache(1, 1, 2, 4, 8, keys="row"),
        ValueError,
        ["keys", "'row'"],
    ),
    Case("quantize_kv per=1", lambda: quantize_kv(torch.ones(2, 4), per=1), TypeError, ["per", "int 1"]),
    Case(
        "dequantize_kv int dtype",
        lambda: dequantize_kv(quantize_kv(torch.ones(2, 4)), dtype=torch.int8),
        TypeError,
        ["dtype", "int8"],
    ),
    Case(
        "quantized_bytes group 0",
        lambda: quantized_bytes_per_token(2, 8, group=0),
        ValueError,
        ["group", "0"],
    ),
    Case(
        "PagedCache attend float64 q",
        lambda: (
            lambda c: (
                c.add_sequence("a"),
                c.append("a", torch.ones(2, 1, 4), torch.ones(2, 1, 4)),
                c.attend("a", torch.ones(2, 1, 4, dtype=torch.float64)),
            )
        )(PagedCache(4, 2, 2, 4)),
        TypeError,
        ["q", "float64"],
    ),
    Case("blocks_needed -1", lambda: blocks_needed(-1, 4), ValueError, ["length", "-1"]),
    Case("PagedCache 0 blocks", lambda: PagedCache(0, 4, 2, 8), ValueError, ["num_blocks", "0"]),
    Case(
        "CatCache.from_layers window -2",
        lambda: CatCache.from_layers([(one, one)], window=-2),
        ValueError,
        ["window", "-2"],
    ),
    Case(
        "Preallocated.from_layers too long",
        lambda: PreallocatedCache.from_layers([(torch.ones(1, 2, 3, 4),) * 2], max_len=2),
        ValueError,
        ["2", "3"],
    ),
    Case(
        "repeatable_step str cache",
        lambda: repeatable_step(M, "cache", torch.tensor([[1]]))(),
        TypeError,
        ["cache", "str"],
    ),
    Case("MLA odd d_rope", lambda: MultiHeadLatentAttention(16, 2, 4, 8, 3), ValueError, ["d_rope", "3"]),
    Case(
        "MLA decode 2 tokens", lambda: mla.decode(torch.ones(1, 2, 16)), ValueError, ["x_new", "(1, 2, 16)"]
    ),
    Case(
        "MLA decode cache 1-tuple",
        lambda: mla.decode(torch.ones(1, 1, 16), cache=(torch.ones(1, 1, 8),)),
        TypeError,
        ["cache", "tuple"],
    ),
    Case(
        "cache_elements kind 'mha'",
        lambda: cache_elements_per_token("mha", num_heads=2, d_head=4),
        ValueError,
        ["kind", "'mha'"],
    ),
    Case(
        "causal_mask offset 1.5", lambda: causal_mask(3, query_offset=1.5), TypeError, ["query_offset", "1.5"]
    ),
    Case(
        "padding_mask float lengths",
        lambda: padding_mask(torch.tensor([1.5])),
        TypeError,
        ["lengths", "float"],
    ),
    Case(
        "ModelConfig mlp='yes'",
        lambda: ModelConfig(vocab_size=10, max_len=8, mlp="yes"),
        TypeError,
        ["mlp", "str"],
    ),
    Case(
        "ModelConfig.from_dict missing",
        lambda: ModelConfig.from_dict({"vocab_size": 10}),
        ValueError,
        ["max_len"],
    ),
    Case("generate num_new -1", lambda: M.generate(TOK, -1), ValueError, ["num_new", "-1"]),
    Case("convert_model 3 kv heads", lambda: convert_model(M, 3), ValueError, ["num_kv_heads", "3"]),
    Case("load_checkpoint 123", lambda: load_checkpoint(123), TypeError, ["name_or_path", "int"]),
    Case("load_checkpoint ''", lambda: load_checkpoint(""), ValueError, ["name_or_path", "''"]),
    Case(
        "save_checkpoint task=3",
        lambda: save_checkpoint(M, TMP + "/x", task=3, metrics={}, command="c"),
        TypeError,
        ["task", "int"],
    ),
    Case(
        "save_checkpoint NaN metric",
        lambda: save_checkpoint(M, TMP + "/y", task="t", metrics={"loss": float("nan")}, command="c"),
        ValueError,
        ["metrics", "loss", "nan"],
    ),
    Case("parallel_map items=5", lambda: parallel_map(abs, 5), TypeError, ["items", "int"]),
    Case(
        "parallel_map timeout '10'",
        lambda: parallel_map(abs, [1], timeout="10"),
        TypeError,
        ["timeout", "'10'"],
    ),
    Case(
        "agreement_score float positions",
        lambda: agreement_score(W, [1.0], 0),
        TypeError,
        ["query_positions", "float"],
    ),
    Case(
        "attention_mass int key_mask",
        lambda: attention_mass(W, 1, torch.ones(4, dtype=torch.long)),
        TypeError,
        ["key_mask", "int64"],
    ),
    Case(
        "mean_by_group lengths differ",
        lambda: mean_by_group({"a": [1.0, 2.0]}, {"g": [1]}),
        ValueError,
        ["a=2", "g=1"],
    ),
    Case(
        "ideal_pattern period 1", lambda: ideal_pattern("induction", 8, period=1), ValueError, ["period", "1"]
    ),
    Case("chance_level no period", lambda: chance_level("induction", 8), ValueError, ["period"]),
    Case("induction_score start -1", lambda: induction_score(W, 2, start=-1), ValueError, ["start", "-1"]),
    Case("verdict margin 0.6", lambda: verdict(0.5, margin=0.6), ValueError, ["margin", "0.6"]),
    Case(
        "role_verdicts chance str",
        lambda: role_verdicts({"a": torch.ones(2)}, chance={"a": "x"}),
        TypeError,
        ["chance['a']", "x"],
    ),
    Case("best_head empty", lambda: best_head(torch.tensor([])), ValueError, ["shape", "(0,)"]),
    Case(
        "head_score_table decimals -1",
        lambda: head_score_table({"a": torch.ones(2)}, decimals=-1),
        ValueError,
        ["decimals", "-1"],
    ),
    Case(
        "plot_head 3 labels for 4", lambda: plot_head(torch.eye(4), ["a", "b", "c"]), ValueError, ["3", "4"]
    ),
    Case(
        "model_attention float tokens",
        lambda: model_attention(M, TOK.float()),
        TypeError,
        ["tokens", "float32"],
    ),
    Case("trace_heads 1-D tokens", lambda: trace_heads(M, TOK[0]), ValueError, ["tokens", "(4)"]),
    Case(
        "in_context_mass ignore True",
        lambda: in_context_mass(torch.randn(1, 4, 10), TOK, torch.ones(1, 4, dtype=torch.bool), ignore=True),
        TypeError,
        ["ignore", "bool"],
    ),
    Case(
        "head_importance chunk 0",
        lambda: ablation.head_importance(M, TOK, TOK, chunk_size=0),
        ValueError,
        ["chunk_size", "0"],
    ),
    Case("random_orders [1.5]", lambda: ablation.random_orders(M, [1.5]), TypeError, ["seeds", "1.5"]),
    Case(
        "pruning_curve counts [True]",
        lambda: ablation.pruning_curve(M, EV, [(0, 0)], counts=[True]),
        TypeError,
        ["counts", "True"],
    ),
    Case("ablation_table cases []", lambda: ablation.ablation_table(M, EV, []), TypeError, ["cases", "list"]),
    Case(
        "trimmed_by_length groups 0",
        lambda: patching.trimmed_by_length(_agreement(), 0),
        ValueError,
        ["groups", "0"],
    ),
    Case(
        "position_ablated where int",
        lambda: patching.position_ablated_logits(M, TOK, [(0, 0)], torch.ones(4, dtype=torch.long)),
        TypeError,
        ["where", "int64"],
    ),
    Case(
        "losses_along_orders most -1",
        lambda: patching.losses_along_orders(M, TOK, TOK, [[(0, 0)]], -1),
        ValueError,
        ["most", "-1"],
    ),
    Case(
        "AttentionExplorer no sentences",
        lambda: AttentionExplorer(lambda t: None, [], 1, 1),
        ValueError,
        ["sentences"],
    ),
]


def _agreement():
    from course_utils.tasks.synthetic import AgreementTask

    return AgreementTask().sample(4, generator=torch.Generator().manual_seed(0))


@pytest.mark.parametrize("case", CASES_b0, ids=[c.name for c in CASES_b0])
def test_fresh_bad_input_is_named(case):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        with pytest.raises(case.error) as info:
            case.call()
    message = str(info.value)
    missing = [w for w in case.words if w not in message]
    assert not missing, f"{case.name}: {missing} not in {message!r}"


# -- battery 34 (g5): str and int subclasses whose own methods raise -----------------------------------
class _StrRaises(str):
    """A str subclass whose own methods raise: an explorer reads the plain str it holds."""

    def strip(self, *chars: object) -> str:
        raise RuntimeError("strip boom")

    def split(self, *args: object) -> list[str]:
        raise RuntimeError("split boom")

    def __len__(self) -> int:
        raise RuntimeError("len boom")

    def __format__(self, spec: str) -> str:
        raise RuntimeError("format boom")

    __hash__ = str.__hash__
    __eq__ = str.__eq__


class _IntRaises(int):
    """An int subclass whose own conversions raise: an explorer reads the plain int it holds."""

    def __int__(self) -> int:
        raise RuntimeError("int boom")

    def __index__(self) -> int:
        raise RuntimeError("index boom")

    def __format__(self, spec: str) -> str:
        raise RuntimeError("format boom")


def _split_attention(text: str) -> tuple[list[str], list[torch.Tensor]]:
    words = str.split(text)
    return words, [torch.full((1, 2, len(words), len(words)), 1.0 / len(words))] * 2


@pytest.mark.parametrize("text, layer, head", [
    (_StrRaises("a bb"), 0, 0),
    ("a bb", _IntRaises(1), 0),
    ("a bb", 0, _IntRaises(1)),
    (_StrRaises("a bb"), _IntRaises(1), _IntRaises(1)),
], ids=["text", "layer", "head", "all"])
@pytest.mark.parametrize("method", ["render", "static", "explorer", "widget", "show"])
def test_attention_explorer_reads_str_and_int_subclasses_by_their_plain_values(method, text, layer, head,
                                                                               capsys):
    explorer = AttentionExplorer(_split_attention, ["a bb ccc"], 2, 2)
    result = getattr(explorer, method)(text, layer, head)
    try:
        if method in ("render", "static"):
            assert isinstance(result, matplotlib.figure.Figure), result
            assert result.axes[0].get_title() == f"layer {int.__int__(layer)}, head {int.__int__(head)}"
        elif method == "explorer":
            assert explorer.controls["sentence"].value == "a bb"
            assert isinstance(explorer.last, matplotlib.figure.Figure), explorer.last
    finally:
        plt.close("all")
    assert "boom" not in capsys.readouterr().out


def test_attention_explorer_answers_an_int_subclass_out_of_range_with_a_message(capsys):
    explorer = AttentionExplorer(_split_attention, ["a bb ccc"], 2, 2)
    assert explorer.render("a bb", _IntRaises(5), 0) == ("Choose a layer in 0..1 and a head in 0..1 "
                                                         "(got layer 5, head 0).")
    explorer.show("a bb", _IntRaises(5), 0)
    assert "Starting from layer 1, head 0 instead." in capsys.readouterr().out
    plt.close("all")


def test_dimension_explorer_and_show_read_subclasses_by_their_plain_values(capsys):
    assert dimension_explorer(batch=_IntRaises(3)).controls["batch"].value == 3
    explorer = dimension_explorer(batch=_IntRaises(99))
    assert "is not on the slider" in explorer.last_text and explorer.controls["batch"].value == 2
    assert "typo=1 is not a slider" in dimension_explorer(**{_StrRaises("typo"): 1}).last_text
    capsys.readouterr()
    show(dimension_explorer(), _StrRaises("the fallback"))
    assert capsys.readouterr().out.startswith("the fallback")
