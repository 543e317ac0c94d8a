"""Issue 38, interpretability helpers: circuits, scores, heatmaps, ablation and patching.
Each row is a call, the exception it must raise and words its message must hold (the
argument and the value that arrived). NaN in a ranking or a metric is refused by name."""

from __future__ import annotations

import math

import matplotlib
import numpy as np
import pytest
import torch
from bad_input_cases import Case, assert_named, small_model  # noqa: E402

from course_utils.interp.ablation import (
    ablated_logits,
    average_loss,
    head_name,
    head_outputs,
    importance_order,
    mean_head_outputs,
    measure,
    sequence_losses,
)
from course_utils.interp.circuits import (
    direct_logit_attribution,
    frozen_final_norm,
    head_output_norms,
    in_context_mass,
    next_token_loss,
    ov_copying_score,
    trace_heads,
)
from course_utils.interp.heatmaps import AttentionExplorer, plot_all_heads, plot_head
from course_utils.interp.patching import (
    layer_normalised_order,
    patched_logits,
    patching_table,
    position_ablated_logits,
)
from course_utils.interp.scores import (
    agreement_score,
    attention_mass,
    best_head,
    head_score_table,
    induction_positions,
    induction_score,
    previous_token_score,
    role_verdicts,
    verdict,
)
from course_utils.model.transformer import TinyTransformer

matplotlib.use("Agg")


MODEL = small_model()
TOKENS = torch.tensor([[1, 2, 3, 4, 1, 2]])
TRACE = trace_heads(MODEL, TOKENS)
SOURCE = head_outputs(MODEL, TOKENS.flip(1))  # (L, B, h, T, dk)
SCORED = torch.tensor([[False, True, True, True, True, False]])
W2 = torch.softmax(torch.randn(1, 2, 4, 4, generator=torch.Generator().manual_seed(2)), -1)
LOGITS = torch.randn(1, 6, 10, generator=torch.Generator().manual_seed(1))
NAN_GRID = torch.tensor([[0.1, math.nan], [0.3, 0.2]])
ATTENTION = [torch.eye(4).expand(1, 2, 4, 4)]
LABELS = ["a", "b", "c", "d"]

CASES = [
    # pattern 3: NaN is refused, never ranked
    Case("best_head NaN", lambda: best_head(NAN_GRID), ValueError, ["scores", "NaN", "L0H1"]),
    Case("verdict NaN", lambda: verdict(float("nan")), ValueError, ["score", "nan"]),
    Case("verdict str", lambda: verdict("0.7"), TypeError, ["score", "str", "0.7"]),
    Case("verdict threshold bool", lambda: verdict(0.7, threshold=True), TypeError, ["threshold", "bool"]),
    Case(
        "head_score_table NaN",
        lambda: head_score_table({"induction": NAN_GRID}),
        ValueError,
        ["scores['induction']", "NaN", "L0H1"],
    ),
    Case("role_verdicts NaN", lambda: role_verdicts({"induction": NAN_GRID}), ValueError, ["NaN", "L0H1"]),
    Case("best_head of strings", lambda: best_head("L0H1"), TypeError, ["scores", "str"]),
    Case(
        "next_token_loss 0/1 int mask",
        lambda: next_token_loss(LOGITS, TOKENS, torch.tensor([[0, 1, 1, 1, 0, 0]])),
        TypeError,
        ["scored", "bool", "torch.int64", "scored.bool()"],
    ),
    Case(
        "next_token_loss all False",
        lambda: next_token_loss(LOGITS, TOKENS, torch.zeros(1, 6, dtype=torch.bool)),
        ValueError,
        ["scored", "no position"],
    ),
    Case(
        "next_token_loss only the last",
        lambda: next_token_loss(LOGITS, TOKENS, torch.tensor([[False] * 5 + [True]])),
        ValueError,
        ["scored", "no position before the last"],
    ),
    Case(
        "next_token_loss token 10",
        lambda: next_token_loss(LOGITS, TOKENS.clamp(max=3) + 7, torch.ones(1, 6, dtype=torch.bool)),
        ValueError,
        ["tokens", "V=10", "10"],
    ),
    Case(
        "in_context_mass all False",
        lambda: in_context_mass(LOGITS, TOKENS, torch.zeros(1, 6, dtype=torch.bool)),
        ValueError,
        ["scored", "no position"],
    ),
    Case(
        "in_context_mass ignore -1",
        lambda: in_context_mass(LOGITS, TOKENS, torch.ones(1, 6, dtype=torch.bool), ignore=-1),
        IndexError,
        ["ignore", "-1"],
    ),
    # circuits: indices, keys, token ids
    Case(
        "dla -100 targets",
        lambda: direct_logit_attribution(MODEL, TRACE, torch.tensor([[2, 3, 4, 1, 2, -100]])),
        ValueError,
        ["targets", "-100", "V=10"],
    ),
    Case(
        "dla float targets",
        lambda: direct_logit_attribution(MODEL, TRACE, TOKENS.float()),
        TypeError,
        ["targets", "torch.float32"],
    ),
    Case(
        "dla not a trace",
        lambda: direct_logit_attribution(MODEL, {"logits": 1}, TOKENS),
        TypeError,
        ["trace", "HeadTrace", "dict"],
    ),
    Case(
        "ov layer True", lambda: ov_copying_score(MODEL, True, [1, 2]), TypeError, ["layer", "bool", "True"]
    ),
    Case("ov layer 2", lambda: ov_copying_score(MODEL, 2, [1, 2]), IndexError, ["layer", "0..1", "2"]),
    Case(
        "ov negative token id",
        lambda: ov_copying_score(MODEL, 1, [-1, 2, 3]),
        IndexError,
        ["token_ids[0]", "-1", "0..9"],
    ),
    Case("ov token id 10", lambda: ov_copying_score(MODEL, 1, [1, 10]), IndexError, ["token_ids[1]", "10"]),
    Case("ov duplicate ids", lambda: ov_copying_score(MODEL, 1, [1, 2, 1]), ValueError, ["token_ids", "[1]"]),
    Case("ov token_ids str", lambda: ov_copying_score(MODEL, 1, "12"), TypeError, ["token_ids", "str"]),
    Case(
        "trace keys_without True",
        lambda: trace_heads(MODEL, TOKENS, keys_without={True: [(0, 0)]}),
        TypeError,
        ["keys_without", "True", "bool"],
    ),
    Case(
        "trace keys_without layer 5",
        lambda: trace_heads(MODEL, TOKENS, queries_without={5: [(0, 0)]}),
        ValueError,
        ["queries_without", "5", "0..1"],
    ),
    Case(
        "trace head key float",
        lambda: trace_heads(MODEL, TOKENS, keys_without={1: [(0, 1.0)]}),
        TypeError,
        ["keys_without[1]", "head", "1.0"],
    ),
    Case(
        "trace replace str",
        lambda: trace_heads(MODEL, TOKENS, replace={(0, 0): "zero"}),
        TypeError,
        ["replace[(0, 0)]", "str", "zero"],
    ),
    Case(
        "trace replace wrong shape",
        lambda: trace_heads(MODEL, TOKENS, replace={(0, 0): torch.ones(3)}),
        ValueError,
        ["replace[(0, 0)]", "(3)"],
    ),
    Case(
        "trace keep_attention str",
        lambda: trace_heads(MODEL, TOKENS, keep_attention="no"),
        TypeError,
        ["keep_attention", "no"],
    ),
    Case(
        "trace not a model",
        lambda: trace_heads(torch.nn.Linear(2, 2), TOKENS),
        TypeError,
        ["model", "TinyTransformer", "Linear"],
    ),
    Case("head_output_norms list", lambda: head_output_norms([1, 2]), TypeError, ["trace", "list"]),
    Case(
        "frozen_final_norm width",
        lambda: frozen_final_norm(MODEL, torch.ones(2, 8), torch.ones(2, 5)),
        ValueError,
        ["component", "d_model=8", "(2, 5)"],
    ),
    # heatmaps
    Case(
        "plot_all_heads batch_index True",
        lambda: plot_all_heads(ATTENTION, LABELS, batch_index=True),
        TypeError,
        ["batch_index", "bool", "True"],
    ),
    Case(
        "plot_all_heads batch_index 3",
        lambda: plot_all_heads(ATTENTION, LABELS, batch_index=3),
        ValueError,
        ["batch_index 3", "0..0"],
    ),
    Case(
        "plot_all_heads fontsize 0",
        lambda: plot_all_heads(ATTENTION, LABELS, fontsize=0),
        ValueError,
        ["fontsize", "0"],
    ),
    Case(
        "plot_all_heads panel_size str",
        lambda: plot_all_heads(ATTENTION, LABELS, panel_size="big"),
        TypeError,
        ["panel_size", "big"],
    ),
    Case(
        "plot_all_heads head_titles str",
        lambda: plot_all_heads(ATTENTION, LABELS, head_titles="x"),
        TypeError,
        ["head_titles", "str"],
    ),
    Case(
        "plot_all_heads head_titles returns a number",
        lambda: plot_all_heads(ATTENTION, LABELS, head_titles=lambda layer, head: 0.5),
        TypeError,
        ["head_titles(0, 0)", "float", "0.5"],
    ),
    Case(
        "plot_head colorbar str",
        lambda: plot_head(torch.eye(4), LABELS, colorbar="yes"),
        TypeError,
        ["colorbar", "yes"],
    ),
    Case(
        "plot_head label_axes",
        lambda: plot_head(torch.eye(4), LABELS, label_axes=True),
        TypeError,
        ["label_axes", "True"],
    ),
    Case(
        "plot_head title int",
        lambda: plot_head(torch.eye(4), LABELS, title=3),
        TypeError,
        ["title", "int", "3"],
    ),
    Case(
        "plot_head bool weights",
        lambda: plot_head(torch.eye(4).bool(), LABELS),
        TypeError,
        ["weights", "bool"],
    ),
    # show(fallback=3) now answers with a printed message
    # (battery 17 C1; see test_bad_input_interp_heatmaps_widgets.py)
    # messages that name the argument and the value
    Case("head_name(-1, 2.5)", lambda: head_name(-1, 2.5), TypeError, ["layer", "-1", "head", "float 2.5"]),
    Case("head_name bool", lambda: head_name(1, True), TypeError, ["head", "bool"]),
    Case(
        "induction period float",
        lambda: induction_score(ATTENTION, 2.0, start=0),
        TypeError,
        ["period", "float", "2.0"],
    ),
    Case(
        "patching metric NaN",
        lambda: patching_table(MODEL, TOKENS, TOKENS, lambda logits: float("nan")),
        ValueError,
        ["metric", "L0H0", "nan"],
    ),
    Case(
        "patching metric not callable",
        lambda: patching_table(MODEL, TOKENS, TOKENS, "loss"),
        TypeError,
        ["metric", "str"],
    ),
    Case(
        "layer_normalised_order NaN",
        lambda: layer_normalised_order(NAN_GRID),
        ValueError,
        ["importance", "NaN", "L0H1"],
    ),
    Case("importance_order NaN", lambda: importance_order(NAN_GRID), ValueError, ["importance", "L0H1"]),
    Case(
        "explorer attention_for str",
        lambda: AttentionExplorer("fn", ["a"], 1, 1),
        TypeError,
        ["attention_for", "str", "fn"],
    ),
    Case(
        "measure evaluations dict",
        lambda: measure(MODEL, {"tokens": TOKENS}),
        TypeError,
        ["evaluations", "dict", "tokens"],
    ),
    Case(
        "attention weights NaN",
        lambda: previous_token_score(torch.full((1, 2, 4, 4), math.nan)),
        ValueError,
        ["attention weights", "NaN", "layer 0, head 0"],
    ),
    # issue 38, third pass: tensors without values, NaN that would pass through, dtypes cast silently
    Case(
        "scores meta weights",
        lambda: previous_token_score(torch.ones(1, 2, 4, 4, device="meta")),
        ValueError,
        ["attention weights", "meta device", "(1, 2, 4, 4)"],
    ),
    Case(
        "scores meta layer in a list",
        lambda: induction_score(
            [torch.eye(4).expand(1, 2, 4, 4), torch.ones(1, 2, 4, 4, device="meta")], 2, start=0
        ),
        ValueError,
        ["layer 1's attention weights", "meta device"],
    ),
    Case(
        "patched_logits meta source",
        lambda: patched_logits(MODEL, TOKENS, SOURCE.to("meta"), [(0, 0)]),
        ValueError,
        ["source_outputs", "meta device"],
    ),
    Case(
        "patched_logits NaN source",
        lambda: patched_logits(MODEL, TOKENS, SOURCE * math.nan, [(0, 0)]),
        ValueError,
        ["source_outputs", "finite", "nan", "(0, 0, 0, 0, 0)"],
    ),
    Case(
        "patched_logits int source",
        lambda: patched_logits(MODEL, TOKENS, SOURCE.long(), [(0, 0)]),
        TypeError,
        ["source_outputs", "torch.float32", "torch.int64"],
    ),
    Case(
        "patched_logits meta tokens",
        lambda: patched_logits(MODEL, TOKENS.to("meta"), SOURCE, [(0, 0)]),
        ValueError,
        ["tokens", "meta device", "'cpu'"],
    ),
    Case(
        "average_loss NaN logits",
        lambda: average_loss(torch.full((1, 6, 10), math.nan), TOKENS),
        ValueError,
        ["logits", "finite", "batch 0, position 0", "nan"],
    ),
    Case(
        "average_loss infinite logit",
        lambda: average_loss(
            LOGITS.index_put((torch.tensor(0), torch.tensor(3), torch.tensor(2)), torch.tensor(math.inf)),
            TOKENS,
        ),
        ValueError,
        ["logits", "position 3"],
    ),
    Case(
        "trace_heads replace NaN",
        lambda: trace_heads(MODEL, TOKENS, replace={(0, 1): math.nan}),
        ValueError,
        ["replace[(0, 1)]", "finite", "nan"],
    ),
    Case(
        "trace_heads replace NaN tensor",
        lambda: trace_heads(MODEL, TOKENS, replace={(1, 0): torch.full((8,), math.nan)}),
        ValueError,
        ["replace[(1, 0)]", "finite", "nan"],
    ),
    Case(
        "trace_heads replace int tensor",
        lambda: trace_heads(MODEL, TOKENS, replace={(1, 0): torch.ones(8, dtype=torch.long)}),
        TypeError,
        ["replace[(1, 0)]", "floating", "torch.int64"],
    ),
    Case(
        "trace_heads replace meta tensor",
        lambda: trace_heads(MODEL, TOKENS, replace={(1, 0): torch.ones(8, device="meta")}),
        ValueError,
        ["replace[(1, 0)]", "meta", "model is on cpu"],
    ),
    # issue 38, third pass: the sweep over every public helper
    Case(
        "check_rows 'no'",
        lambda: previous_token_score(W2, check_rows="no"),
        TypeError,
        ["check_rows", "'no'"],
    ),
    Case(
        "agreement positions str",
        lambda: agreement_score(W2, "5", 1),
        TypeError,
        ["query_positions", "str", "'5'"],
    ),
    Case(
        "attention_mass meta key_mask",
        lambda: attention_mass(W2, 3, torch.ones(4, dtype=torch.bool, device="meta")),
        ValueError,
        ["key_mask", "meta device"],
    ),
    Case(
        "best_head meta",
        lambda: best_head(torch.ones(2, 2, device="meta")),
        ValueError,
        ["scores", "meta device"],
    ),
    Case(
        "induction_positions seq_len -1",
        lambda: induction_positions(-1, 2, start=0),
        ValueError,
        ["seq_len", "positive", "-1"],
    ),
    Case(
        "position_ablated_logits meta where",
        lambda: position_ablated_logits(
            MODEL, TOKENS, [(0, 0)], torch.ones(6, dtype=torch.bool, device="meta")
        ),
        ValueError,
        ["where", "meta", "tokens are on cpu"],
    ),
    Case(
        "importance_order int",
        lambda: importance_order(torch.ones(2, 2, dtype=torch.long)),
        TypeError,
        ["importance", "floating", "torch.int64"],
    ),
    Case(
        "layer_normalised_order meta",
        lambda: layer_normalised_order(torch.ones(2, 2, device="meta")),
        ValueError,
        ["importance", "meta device"],
    ),
    Case(
        "importance_order empty",
        lambda: importance_order(torch.ones(2, 0)),
        ValueError,
        ["importance", "(2, 0)"],
    ),
    Case(
        "mean_head_outputs per_position 'no'",
        lambda: mean_head_outputs(MODEL, TOKENS, per_position="no"),
        TypeError,
        ["per_position", "'no'"],
    ),
    Case(
        "ablated_logits float64 means",
        lambda: ablated_logits(
            MODEL, TOKENS, [(0, 0)], method="mean", means=mean_head_outputs(MODEL, TOKENS).double()
        ),
        TypeError,
        ["means", "torch.float64", "torch.float32"],
    ),
    Case(
        "sequence_losses NaN logits",
        lambda: sequence_losses(LOGITS.index_fill(1, torch.tensor([2]), math.nan), TOKENS),
        ValueError,
        ["logits", "finite", "position 2"],
    ),
    Case(
        "average_loss no vocabulary",
        lambda: average_loss(torch.ones(1, 6, 0), TOKENS),
        ValueError,
        ["logits", "V >= 1", "(1, 6, 0)"],
    ),
    Case(
        "next_token_loss NaN logits",
        lambda: next_token_loss(LOGITS * math.nan, TOKENS, SCORED),
        ValueError,
        ["logits", "finite", "nan"],
    ),
    Case(
        "in_context_mass meta scored",
        lambda: in_context_mass(LOGITS, TOKENS, SCORED.to("meta")),
        ValueError,
        ["scored", "meta device"],
    ),
    Case(
        "next_token_loss meta tokens",
        lambda: next_token_loss(LOGITS, TOKENS.to("meta"), SCORED),
        ValueError,
        ["tokens", "meta device"],
    ),
    Case(
        "frozen_final_norm meta stream",
        lambda: frozen_final_norm(MODEL, TRACE.residual[-1].to("meta"), TRACE.residual[-1]),
        ValueError,
        ["stream", "meta", "model is on cpu"],
    ),
    Case(
        "frozen_final_norm float64 component",
        lambda: frozen_final_norm(MODEL, TRACE.residual[-1], TRACE.residual[-1].double()),
        TypeError,
        ["component", "torch.float64", "torch.float32"],
    ),
    Case(
        "head_outputs token id 10",
        lambda: head_outputs(MODEL, TOKENS + 6),
        ValueError,
        ["tokens", "vocab_size=10", "max 10"],
    ),
    Case(
        "generate with NaN weights",
        lambda: _nan_model().generate(TOKENS[:, :3], 2),
        ValueError,
        ["generate", "position 3", "NaN", "token_embedding.weight"],
    ),
]


def _nan_model() -> TinyTransformer:
    model = TinyTransformer(MODEL.config)
    with torch.no_grad():
        model.token_embedding.weight.fill_(math.nan)
    return model


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_bad_input_is_named(case):
    assert_named(case)
    matplotlib.pyplot.close("all")


def test_valid_input_still_works_with_numpy_integers():
    """Pattern 1 also accepts: NumPy integers as layers, heads and keys; valid results unchanged."""
    plain = ov_copying_score(MODEL, 1, [1, 2, 3])
    assert torch.equal(ov_copying_score(MODEL, np.int64(1), np.arange(1, 4)), plain)
    assert head_name(np.int64(1), np.int32(0)) == "L1H0"
    removed = trace_heads(MODEL, TOKENS, keys_without={np.int64(1): [(np.int64(0), 1)]})
    assert torch.equal(removed.logits, trace_heads(MODEL, TOKENS, keys_without={1: [(0, 1)]}).logits)
    scored = torch.tensor([[False, True, True, True, True, False]])
    loss = next_token_loss(LOGITS, TOKENS, scored)
    by_hand = torch.nn.functional.cross_entropy(LOGITS[0, 1:5].double(), TOKENS[0, 2:6])
    assert loss == pytest.approx(float(by_hand))
    assert best_head(torch.tensor([[0.1, 0.4], [0.3, 0.2]])) == (0, 1)
    assert verdict(0.7) == "present" and verdict(np.float32(0.3)) == "absent"


@pytest.mark.parametrize("count, keys, wanted", [
    (1, [5], r"keyed by evaluation index 0..0, got key int 5, which names no evaluation"),
    (2, [0], r"means has no entry for evaluations\[1\] \(keys given: \[0\]\)"),
])
def test_measure_means_dict_names_the_evaluation_without_means(count, keys, wanted):
    """A dict means with no entry for an evaluation (or a key naming none) was read as means=None:
    'method=mean needs means=..., got NoneType', though means was given. The evaluation without
    an entry, or the stray key, is named, before any run; every ablation entry point agrees."""
    from course_utils.interp.ablation import ablation_table, loss_evaluation, pruning_curve
    from course_utils.interp.patching import prunable_counts

    evaluations = [loss_evaluation(TOKENS, TOKENS, name=f"loss{i}") for i in range(count)]
    means = {key: mean_head_outputs(MODEL, TOKENS) for key in keys}
    calls = [lambda: measure(MODEL, evaluations, [(0, 0)], method="mean", means=means),
             lambda: ablation_table(MODEL, evaluations, {"one": [(0, 0)]}, method="mean", means=means),
             lambda: pruning_curve(MODEL, evaluations, [(0, 0)], method="mean", means=means),
             lambda: prunable_counts(MODEL, evaluations, [[(0, 0)]], within=lambda n: True,
                                     method="mean", means=means)]
    for call in calls:
        with pytest.raises(ValueError, match=wanted) as caught:
            call()
        assert "NoneType" not in str(caught.value)
    full = {i: mean_head_outputs(MODEL, TOKENS) for i in range(count)}
    assert measure(MODEL, evaluations, [(0, 0)], method="mean", means=full)  # one entry each: measured
