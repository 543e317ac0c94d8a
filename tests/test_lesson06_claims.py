"""The facts that notebooks/06_head_ablation.ipynb states in words, re-measured on the shipped
checkpoints with the same public functions and the same fixed batches as the notebook.

The first group holds lesson 06 to lesson 05: where the two lessons measure the same thing
(switching heads off with ``head_mask``, scoring with ``agreement_margins`` and
``induction_accuracy``, exactly as tests/test_lesson05_claims.py does), the numbers must agree.
"""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import pytest
import torch
import torch.nn.functional as F

from course_utils.ablation import (
    Evaluation,
    ablated_logits,
    ablation_table,
    all_heads,
    head_importance,
    head_name,
    importance_order,
    loss_evaluation,
    mean_head_outputs,
    measure,
    pruning_curve,
    random_orders,
    sequence_losses,
)
from course_utils.checkpoint import load_checkpoint
from course_utils.env import torch_threads
from course_utils.parallel import parallel_map
from course_utils.tasks import PAD_ID, agreement_margins, induction_accuracy
from course_utils.train import AGREEMENT_TASK, INDUCTION_TASK, MIXTURE_TASK

PREVIOUS = [(0, 1), (0, 2), (0, 0)]
LAYER_1 = [(1, h) for h in range(4)]
ALL_BUT_L1H2 = [(1, 0), (1, 1), (1, 3)]


@pytest.fixture(scope="module", autouse=True)
def one_thread():
    with torch_threads(1):  # as in the notebook: these small models run fastest on one thread
        yield


@pytest.fixture(scope="module")
def induction():
    return load_checkpoint("induction")[0]


@pytest.fixture(scope="module")
def agreement():
    return load_checkpoint("agreement")[0]


@pytest.fixture(scope="module")
def mixture():
    return load_checkpoint("mixture")[0]


@pytest.fixture(scope="module")
def heldout():
    return INDUCTION_TASK.eval_batch(256)


@pytest.fixture(scope="module")
def sentences():
    return AGREEMENT_TASK.eval_batch(2000)


def lesson05_gates(switched_off):
    """Lesson 05's way: a (2, 4) head_mask with zeros on the switched-off heads."""
    gates = torch.ones(2, 4)
    for layer, head in switched_off:
        gates[layer, head] = 0.0
    return gates


def scored_loss(logits, batch) -> float:
    targets = batch.targets.clone()
    targets[~batch.scored] = -100
    return float(F.cross_entropy(logits.flatten(0, 1), targets.flatten()))


# ------------------------------------------------------------------ held to lesson 05
def test_zero_ablation_agrees_with_lesson05(agreement, induction, sentences, heldout):
    for heads in ([(1, 2)], LAYER_1, ALL_BUT_L1H2, PREVIOUS):
        with torch.no_grad():
            for model, batch in ((agreement, sentences), (induction, heldout)):
                expected, _ = model(batch.tokens, head_mask=lesson05_gates(heads))
                torch.testing.assert_close(ablated_logits(model, batch.tokens, heads), expected)
    right = agreement_margins(ablated_logits(agreement, sentences.tokens, [(1, 2)]), sentences) > 0
    singular, plural = sentences.attractor & ~sentences.plural, sentences.attractor & sentences.plural
    assert (int(right[singular].sum()), int(singular.sum())) == (27, 427), "27/427 singular, as in issue 10"
    assert round(float(right[sentences.attractor].float().mean()), 3) == 0.544, "lesson 05's table"
    layer = agreement_margins(ablated_logits(agreement, sentences.tokens, LAYER_1), sentences) > 0
    assert int(plural.sum() - layer[plural].sum()) == 128, "all of layer 1 also breaks 128 plural ones"
    assert round(float(layer[sentences.attractor].float().mean()), 3) == 0.560


def test_mean_ablation_with_lesson05s_reference_gives_its_numbers(agreement, induction, sentences, heldout):
    own = mean_head_outputs(agreement, sentences.tokens, keep=sentences.tokens != PAD_ID)
    accuracy = {}
    for name, heads in (("L1H2", [(1, 2)]), ("layer 1", LAYER_1)):
        logits = ablated_logits(agreement, sentences.tokens, heads, method="mean", means=own)
        accuracy[name] = float((agreement_margins(logits, sentences) > 0)[sentences.attractor].float().mean())
    assert round(accuracy["L1H2"], 3) == 0.547 and round(accuracy["layer 1"], 3) == 0.552
    own_positions = mean_head_outputs(induction, heldout.tokens, per_position=True)
    zero = ablated_logits(induction, heldout.tokens, ALL_BUT_L1H2)
    mean = ablated_logits(induction, heldout.tokens, ALL_BUT_L1H2, method="mean", means=own_positions)
    with torch.no_grad():
        intact, _ = induction(heldout.tokens)
    assert round(induction_accuracy(zero, heldout), 3) == 0.949
    assert [round(scored_loss(x, heldout), 3) for x in (intact, zero, mean)] == [0.001, 0.275, 0.730]


def test_single_head_accuracies_match_lesson05s_table(induction, heldout):
    expected = {(0, 0): 0.988, (0, 1): 0.924, (0, 2): 0.953, (0, 3): 1.000,
                (1, 0): 0.999, (1, 1): 1.000, (1, 2): 0.999, (1, 3): 1.000}
    for head, value in expected.items():
        logits = ablated_logits(induction, heldout.tokens, [head])
        assert round(induction_accuracy(logits, heldout), 3) == value


# ------------------------------------------------------------------ section 2: zero vs mean
def agreement_setup(agreement, sentences):
    train = AGREEMENT_TASK.sample(500, torch.Generator().manual_seed(11))  # the notebook's loss batch
    reference = AGREEMENT_TASK.sample(1000, torch.Generator().manual_seed(12)).tokens
    means = mean_head_outputs(agreement, reference, keep=reference != PAD_ID)

    def attractor(logits):
        right = (agreement_margins(logits, sentences) > 0).float()
        return {"attractor acc": float(right[sentences.attractor].mean())}

    evaluations = [loss_evaluation(train.tokens, train.targets), Evaluation(sentences.tokens, attractor)]
    return evaluations, means, train


def test_the_two_methods_mostly_agree_with_two_exceptions(agreement, sentences):
    evaluations, means, _ = agreement_setup(agreement, sentences)
    cases = {head_name(*h): [h] for h in all_heads(agreement)}
    zero = ablation_table(agreement, evaluations, cases)["attractor acc"]
    mean = ablation_table(agreement, evaluations, cases, method="mean", means=means)["attractor acc"]
    gap = (zero - mean).abs()
    assert gap.median() < 0.001 and gap.idxmax() == "L0H0"
    assert zero["L0H0"] < 0.97 and mean["L0H0"] > 0.99, "zero ablation exaggerates L0H0"
    assert mean["L0H3"] < zero["L0H3"] - 0.02, "L0H3: mean ablation hurts more"
    with_ours = [float((agreement_margins(ablated_logits(agreement, sentences.tokens, heads, method="mean",
                                                         means=means), sentences) > 0)[sentences.attractor]
                       .float().mean()) for heads in ([(1, 2)], LAYER_1)]
    assert abs(with_ours[0] - with_ours[1]) < 0.02, "one head vs the whole layer: about one point apart"


# ------------------------------------------------------------------ section 3: narrow drop
def test_l1h2_loss_increase_sits_on_the_verb(agreement, sentences):
    evaluations, _, train = agreement_setup(agreement, sentences)
    intact, ablated = measure(agreement, evaluations), measure(agreement, evaluations, [(1, 2)])
    assert ablated["attractor acc"] < 0.6 and ablated["loss"] - intact["loss"] < 0.2
    with torch.no_grad():
        before, _ = agreement(train.tokens)
    after = ablated_logits(agreement, train.tokens, [(1, 2)])

    def losses(logits):
        return F.cross_entropy(logits.flatten(0, 1), train.targets.flatten(),
                               reduction="none").view(train.targets.shape)

    counted = train.targets != -100
    increase = (losses(after) - losses(before)) * counted
    verb = torch.zeros_like(counted)
    verb[torch.arange(len(train)), train.predict_pos] = True
    assert 0.1 < float(verb.sum() / counted.sum()) < 0.15
    assert float(increase[verb].sum() / increase.sum()) > 1.0, "all of the increase, and more"


# ------------------------------------------------------------------ section 4: redundancy
def test_heads_back_each_other_up(induction, heldout):
    def accuracy(heads):
        return induction_accuracy(ablated_logits(induction, heldout.tokens, heads), heldout)

    singles = [accuracy([h]) for h in PREVIOUS]
    assert min(singles) > 0.9 and accuracy(PREVIOUS[:2]) < 0.5 and accuracy(PREVIOUS) < 0.2
    assert (1 - accuracy(PREVIOUS)) > 3 * sum(1 - s for s in singles), "far more than the sum"
    assert min(accuracy([(1, h)]) for h in range(4)) >= 0.99 and accuracy(LAYER_1) < 0.05


def test_previous_token_heads_matter_at_late_keys_too(induction, heldout):
    """Split by the key an induction head must find (t - period + 1), both ablations."""
    reference = INDUCTION_TASK.sample(256, torch.Generator().manual_seed(12)).tokens
    means = mean_head_outputs(induction, reference, per_position=True)
    scored = heldout.scored[:, :-1]
    query = torch.arange(scored.shape[1]).expand_as(scored)
    key = query - heldout.periods[:, None] + 1
    early, late = scored & (key <= 15), scored & (key >= 16)
    assert (int(early.sum()), int(late.sum())) == (3584, 1864)
    with torch.no_grad():
        intact = induction_accuracy(induction(heldout.tokens)[0], heldout)
    assert intact > 0.999
    expected = {"zero": (0.102, 0.168), "mean": (0.087, 0.226)}
    for method, (at_early, at_late) in expected.items():
        logits = ablated_logits(induction, heldout.tokens, PREVIOUS, method=method, means=means)
        correct = logits[:, :-1].argmax(-1) == heldout.tokens[:, 1:]
        assert round(float(correct[early].float().mean()), 3) == at_early
        assert round(float(correct[late].float().mean()), 3) == at_late
        assert at_late < 0.25, "late keys break too, far below the intact model"


def test_l1h2_breaks_singular_agreement_with_or_without_an_attractor(agreement, sentences):
    right = agreement_margins(ablated_logits(agreement, sentences.tokens, [(1, 2)]), sentences) > 0
    counts = {}
    for has_attractor in (True, False):
        for plural in (False, True):
            rows = (sentences.attractor == has_attractor) & (sentences.plural == plural)
            counts[has_attractor, plural] = (int(right[rows].sum()), int(rows.sum()))
    assert counts == {(True, False): (27, 427), (True, True): (451, 452),
                      (False, False): (227, 557), (False, True): (564, 564)}
    assert round(27 / 427, 2) == 0.06 and round(227 / 557, 2) == 0.41, "6% right instead of 41%"
    share_plural = 452 / 879
    assert abs((27 + 451) / 879 - share_plural) < 0.035, "0.544 is close to the plural share"


# ------------------------------------------------------------------ sections 5-6: the mixture model
ATTRACTOR_COUNT = 400  # the notebook's subset: the first 400 of the 879 attractor sentences


def attractor_sentences(batch, count):
    """As in the notebook: the first `count` sentences of `batch` with an attractor."""
    return batch.take(batch.attractor.nonzero().squeeze(1)[:count])


def mixture_means(mixture):
    reference = MIXTURE_TASK.sample(128, torch.Generator().manual_seed(12))
    return mean_head_outputs(mixture, reference.tokens, keep=reference.real)


@pytest.fixture(scope="module")
def mixture_setup(mixture):
    """The notebook's batches for section 5, and its one-head-off tables, zero and mean."""
    train = MIXTURE_TASK.sample(128, torch.Generator().manual_seed(11))
    heldout = MIXTURE_TASK.induction_eval(128)
    sentences = attractor_sentences(AGREEMENT_TASK.eval_batch(2000), ATTRACTOR_COUNT)

    def attractor(logits):
        return {"attractor acc": float((agreement_margins(logits, sentences) > 0).float().mean())}

    def induction_acc(logits):
        return {"induction acc": induction_accuracy(logits, heldout)}

    evaluations = [loss_evaluation(train.tokens, train.targets), Evaluation(heldout.tokens, induction_acc),
                   Evaluation(sentences.tokens, attractor)]
    means = mixture_means(mixture)
    cases = {"none": []} | {head_name(*h): [h] for h in all_heads(mixture)}
    methods = ["zero", "mean"]  # side by side on one core each, as in the notebook
    tables = dict(zip(methods, parallel_map(
        lambda method: ablation_table(mixture, evaluations, cases, method=method,
                                      means=means if method == "mean" else None), methods), strict=True))
    return train, evaluations, tables, sentences


def drops(table, column):
    return table.loc["none", column] - table.drop("none")[column]


def test_the_mixture_checkpoint_is_the_documented_one(mixture):
    _, meta = load_checkpoint("mixture")
    config = mixture.config
    shape = (config.num_layers, config.num_heads, config.d_model, config.mlp, config.d_mlp)
    assert shape == (3, 8, 64, True, 128), "3 layers x 8 heads, MLPs of width 128"
    assert meta["sha256"].startswith("9dcf064f")
    assert meta["command"].startswith("python -m course_utils.train mixture --seed 0 --steps 800 "
                                      "--out data/checkpoints/mixture")
    assert meta["training"]["steps"] == 800 and round(meta["training"]["train_seconds"], 1) == 47.6
    # the training provenance moved from README.md to docs/benchmarks.md
    docs = (Path(__file__).resolve().parent.parent / "docs" / "benchmarks.md").read_text()
    assert "MLPs of width 128" in docs and "take 47.6 s of training" in docs, "docs/benchmarks.md, training"
    assert round(meta["metrics"]["induction"], 3) == 0.999 and round(meta["metrics"]["attractor"], 3) == 0.999


def test_induction_leans_on_one_head_that_leaves_most_of_the_skill(mixture_setup, induction, heldout):
    _, _, tables, _ = mixture_setup
    zero, mean = tables["zero"], tables["mean"]
    intact = zero.loc["none"]
    assert [round(intact[c], 3) for c in ("loss", "induction acc", "attractor acc")] == [1.304, 0.999, 1.0]
    for table, expected in ((zero, 0.275), (mean, 0.276)):
        drop = drops(table, "induction acc")
        assert drop.idxmax() == "L0H4" and round(drop.max(), 3) == expected
        assert (drop > 0.02).sum() == 1, "no other head costs induction more than 0.02"
    assert round(zero.loc["L0H4", "induction acc"], 2) == 0.72, "about 0.72 survives without L0H4"
    worst_in_induction_model = max(
        1 - induction_accuracy(ablated_logits(induction, heldout.tokens, [h]), heldout)
        for h in all_heads(induction))
    assert round(worst_in_induction_model, 3) == 0.076, "section 4: at most 0.076"
    assert drops(zero, "induction acc").max() > worst_in_induction_model, "more than any induction-model head"


def test_l0h4_is_a_previous_token_head_and_layer_1_does_the_copying(mixture):
    from course_utils.heatmaps import model_attention
    from course_utils.scores import induction_score, previous_token_by_position

    heldout = MIXTURE_TASK.induction_eval(128)
    attention = model_attention(mixture, heldout.tokens)
    by_position = previous_token_by_position(attention)[0]  # layer 0: (h, T-1)
    early, late = by_position[:, :15].mean(-1), by_position[:, 15:].mean(-1)
    assert [round(float(early[h]), 2) for h in (4, 1, 3)] == [0.97, 0.82, 0.89]
    assert round(float(late[4]), 2) == 0.04 and float(late.max()) < 0.05
    periods = heldout.periods
    induction = sum(induction_score([a[periods == p] for a in attention], p, start=1)
                    * float((periods == p).float().mean()) for p in periods.unique().tolist())
    assert round(float(induction[1].min()), 2) == 0.75 and round(float(induction[1].max()), 2) == 0.95
    assert float(induction[0].max()) < 0.15 and float(induction[2].max()) < 0.15, "only layer 1 copies"


def test_the_subset_is_400_attractor_sentences():
    full = AGREEMENT_TASK.eval_batch(2000)
    subset = attractor_sentences(full, ATTRACTOR_COUNT)
    assert int(full.attractor.sum()) == 879 and len(subset) == 400 and bool(subset.attractor.all())
    assert 1 / len(subset) == 0.0025, "one sentence is 0.0025 of accuracy"
    assert subset.tokens.shape[1] <= 16, "at most 16 tokens"
    first = full.attractor.nonzero().squeeze(1)[:400]
    assert torch.equal(subset.tokens, full.tokens[first])
    assert torch.equal(subset.correct_id, full.correct_id[first])


AGREEMENT_HEADS = ["L1H7", "L0H3", "L0H1", "L0H4", "L1H1"]


def test_agreement_is_spread_over_five_heads_led_by_three(mixture_setup):
    _, _, tables, sentences = mixture_setup
    count = len(sentences)
    for method, worst in (("zero", 0.070), ("mean", 0.080)):
        drop = drops(tables[method], "attractor acc")
        over = drop[drop.round(4) > 0.02].sort_values(ascending=False)
        assert list(over.index) == AGREEMENT_HEADS, f"the same five heads, {method}"
        assert drop.idxmax() == "L1H7" and round(drop.max(), 3) == worst
    lost = (drops(tables["zero"], "attractor acc") * count).round().astype(int).sort_values(ascending=False)
    assert lost.head(6).to_dict() == {"L1H7": 28, "L0H3": 25, "L0H1": 19, "L0H4": 11, "L1H1": 9, "L0H0": 8}
    assert lost["L1H7"] - lost["L0H3"] == 3, "first by three sentences"
    assert [round(drops(tables["zero"], "attractor acc")[h], 3) for h in ("L1H7", "L0H3")] == [0.07, 0.062]
    assert round(0.02 * count) == 8 and lost["L0H0"] == 8, "L0H0 exactly on the cut-off, not counted"
    zero = tables["zero"]
    assert drops(zero, "attractor acc").max() < drops(zero, "induction acc").max() / 3, "none like L0H4"


def test_l1h7_barely_moves_the_loss(mixture_setup):
    _, _, tables, _ = mixture_setup
    zero = tables["zero"]
    loss_change = zero.drop("none")["loss"] - zero.loc["none", "loss"]
    rank = loss_change.rank(ascending=False).astype(int)
    assert loss_change.idxmax() == "L0H4" and round(loss_change["L0H4"], 3) == 0.569
    assert round(loss_change["L1H7"], 3) == 0.002 and rank["L1H7"] == 17
    assert round(drops(zero, "attractor acc")["L1H7"], 2) == 0.07, "seven points of attractor accuracy"
    assert (rank["L0H1"], rank["L0H3"]) == (4, 3)


def test_the_work_is_only_partly_divided(mixture_setup):
    _, _, tables, sentences = mixture_setup
    zero = tables["zero"]
    induction_top = set(drops(zero, "induction acc").nlargest(3).index)
    attractor_top = set(drops(zero, "attractor acc").nlargest(3).index)
    assert induction_top == {"L0H4", "L0H3", "L0H1"} and attractor_top == {"L1H7", "L0H1", "L0H3"}
    assert "L0H4" not in attractor_top and "L1H7" not in induction_top
    assert induction_top & attractor_top == {"L0H1", "L0H3"}
    induction_drop, attractor_drop = drops(zero, "induction acc"), drops(zero, "attractor acc")
    assert [round(induction_drop[h], 3) for h in ("L0H1", "L0H3")] == [0.011, 0.018], "a little to induction"
    assert max(induction_drop[["L0H1", "L0H3"]]) < min(attractor_drop[["L0H1", "L0H3"]]), "more to agreement"
    assert round(attractor_drop["L0H4"] * len(sentences)) == 11, "L0H4 costs agreement 11 sentences"


def test_agreement_heads_hold_on_all_879_attractor_sentences(mixture):
    """Robustness: the lesson scores 400 of the 879; its claims about agreement heads hold on all."""
    sentences = attractor_sentences(AGREEMENT_TASK.eval_batch(2000), None)
    assert len(sentences) == 879
    means = mixture_means(mixture)
    for method in ("zero", "mean"):
        def accuracy(heads, method=method):
            logits = ablated_logits(mixture, sentences.tokens, heads, method=method, means=means)
            return float((agreement_margins(logits, sentences) > 0).double().mean())

        intact = accuracy([])
        drop = pd.Series({head_name(*h): intact - accuracy([h]) for h in all_heads(mixture)})
        assert set(drop.nlargest(3).index) == {"L1H7", "L0H3", "L0H1"}, f"the same three lead ({method})"
        assert drop.nlargest(3).min() > 0.04 and drop.drop(["L1H7", "L0H3", "L0H1"]).max() < 0.04
        assert set(drop[drop > 0.02].index) <= set(AGREEMENT_HEADS), "no head outside the lesson's five"
        assert drop.max() - drop.nlargest(3).min() < 0.05, "none decisively first"
        assert drop.max() < 0.275 / 3, "no head matters to agreement as L0H4 does to induction"


def test_importance_matches_a_finite_difference_and_ranks_like_ablation(mixture, mixture_setup):
    train, _, tables, _ = mixture_setup
    importance = head_importance(mixture, train.tokens, train.targets)
    top = importance_order(importance)[-1]
    assert head_name(*top) == "L2H3" and round(float(importance[top]), 4) == 0.0475
    losses = []
    for sign in (1, -1):
        gates = torch.ones(3, 8)
        gates[top] = 1 + sign * 1e-3
        with torch.no_grad():
            logits, _ = mixture(train.tokens, head_mask=gates)
        losses.append(sequence_losses(logits, train.targets))
    assert round(float(((losses[0] - losses[1]) / 2e-3).abs().mean()), 4) == 0.0475
    zero = tables["zero"]
    loss_change = (zero.drop("none")["loss"] - zero.loc["none", "loss"]).to_numpy()
    ranks = pd.DataFrame({"importance": importance.flatten().numpy(), "loss": loss_change})
    assert round(ranks.corr(method="spearman").iloc[0, 1], 2) == 0.79
    assert loss_change.argmax() != importance.flatten().argmax(), "the score's top head is not the loss's"


@pytest.fixture(scope="module")
def pruning_orders(mixture, mixture_setup):
    train, evaluations, _, _ = mixture_setup
    greedy = importance_order(head_importance(mixture, train.tokens, train.targets))
    orders = {"greedy": greedy, "reverse": greedy[::-1]} | {
        f"random {seed}": order for seed, order in enumerate(random_orders(mixture, range(5)))}
    counts = list(range(0, 25, 3))
    def curve(order):
        return pruning_curve(mixture, evaluations, order, counts=counts)

    curves = dict(zip(orders, parallel_map(curve, orders.values()), strict=True))  # one core per order
    return curves, greedy


@pytest.fixture(scope="module")
def pruning(pruning_orders):
    return pruning_orders[0]


def prunable(curve, tolerance=0.05):
    start = curve.iloc[0]
    drop = (start - curve).round(4)  # as in the notebook: a drop of exactly 0.05 counts as within
    ok = (drop["induction acc"] <= tolerance) & (drop["attractor acc"] <= tolerance)
    return float(curve["fraction"].iloc[(ok.idxmin() if not ok.all() else len(curve)) - 1])


def test_greedy_pruning_is_no_better_than_the_median_random_order(pruning):
    greedy = prunable(pruning["greedy"])
    random = {name: prunable(curve) for name, curve in pruning.items() if name.startswith("random")}
    assert greedy == 0.125 and prunable(pruning["reverse"]) == 0.0, "at least 3 and fewer than 6 heads"
    assert random == {"random 0": 0.0, "random 1": 0.125, "random 2": 0.25, "random 3": 0.0, "random 4": 0.25}
    ordered = sorted(random.values())
    assert ordered[2] == greedy < ordered[-1], "greedy = the median; the best two random orders beat it"
    attractor_at_3 = pruning["random 4"].set_index("pruned").loc[3, "attractor acc"]
    assert round(attractor_at_3 * 400) == 380, "random 4 loses exactly 20 sentences at 3 off"
    for name, expected in (("random 0", [0.92, 0.863]), ("random 3", [0.945, 0.827])):
        at = pruning[name].set_index("pruned")["attractor acc"]
        assert [round(at[3], 3), round(at[6], 3)] == expected, "break a task within three heads"


def test_agreement_gives_way_first_along_the_greedy_order(pruning):
    curve = pruning["greedy"].set_index("pruned")
    six, half = curve.loc[6], curve.loc[12]
    assert [round(six[c], 3) for c in ("loss", "induction acc", "attractor acc")] == [1.321, 1.0, 0.935]
    assert round((curve.loc[0, "attractor acc"] - six["attractor acc"]) * 400) == 26, "26 sentences lost"
    assert curve.loc[3, "attractor acc"] >= 0.95 and curve.loc[3, "induction acc"] >= 0.95
    assert [round(half[c], 3) for c in ("loss", "induction acc", "attractor acc")] == [1.607, 0.907, 0.767]


def test_greedy_prunes_no_agreement_head_early(pruning_orders, mixture_setup):
    _, greedy = pruning_orders
    names = [head_name(*head) for head in greedy]
    assert names[:6] == ["L2H7", "L0H5", "L1H2", "L2H5", "L0H6", "L2H2"]
    attractor_drop = drops(mixture_setup[2]["zero"], "attractor acc").round(4)
    assert round(attractor_drop[names[:6]].max(), 3) == 0.01, "none of the first six costs over 0.010 alone"
    places = {h: names.index(h) + 1 for h in AGREEMENT_HEADS}
    assert places == {"L1H7": 10, "L0H3": 16, "L0H1": 19, "L0H4": 22, "L1H1": 23}


def test_the_loss_is_lowest_along_greedy_and_the_random_orders_catch_up_with_reverse(pruning):
    random = pd.concat([curve.set_index("pruned")["loss"] for name, curve in pruning.items()
                        if name.startswith("random")], axis=1)
    greedy = pruning["greedy"].set_index("pruned")["loss"]
    reverse = pruning["reverse"].set_index("pruned")["loss"]
    inner = list(range(3, 24, 3))
    assert (greedy[inner] < random.loc[inner].min(axis=1)).all(), "greedy lowest at every step"
    assert (greedy[inner] < reverse[inner]).all()
    assert reverse[3] > random.loc[3].max(), "reverse rises fastest at first"
    assert (random.loc[range(12, 24, 3)].max(axis=1) >= reverse[range(12, 24, 3)]).all(), "random catches up"
