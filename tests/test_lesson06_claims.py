"""The facts that notebooks/06_head_ablation.ipynb states in words, re-measured on the shipped
checkpoints with the same public functions and the same fixed batches as the notebook.

The first group holds lesson 06 to lesson 05: where the two lessons measure the same thing
(switching heads off with ``head_mask``, scoring with ``agreement_margins`` and
``induction_accuracy``, exactly as tests/test_lesson05_claims.py does), the numbers must agree.
"""

from __future__ import annotations

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
)
from course_utils.checkpoint import load_checkpoint
from course_utils.env import torch_threads
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
    train = AGREEMENT_TASK.sample(1000, torch.Generator().manual_seed(11))
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


def test_previous_token_heads_matter_early_and_late(induction, heldout):
    logits = ablated_logits(induction, heldout.tokens, PREVIOUS)
    correct = logits[:, :-1].argmax(-1) == heldout.tokens[:, 1:]
    scored = heldout.scored[:, :-1]
    position = torch.arange(scored.shape[1]).expand_as(scored)
    early, late = scored & (position <= 15), scored & (position >= 16)
    assert float(correct[early].float().mean()) < 0.2 and float(correct[late].float().mean()) < 0.2


# ------------------------------------------------------------------ sections 5-6: the mixture model
@pytest.fixture(scope="module")
def mixture_setup(mixture):
    train = MIXTURE_TASK.sample(128, torch.Generator().manual_seed(11))
    heldout = MIXTURE_TASK.induction_eval(128)
    sentences = AGREEMENT_TASK.eval_batch(400)

    def attractor(logits):
        right = (agreement_margins(logits, sentences) > 0).float()
        return {"attractor acc": float(right[sentences.attractor].mean())}

    def induction_acc(logits):
        return {"induction acc": induction_accuracy(logits, heldout)}

    evaluations = [loss_evaluation(train.tokens, train.targets), Evaluation(heldout.tokens, induction_acc),
                   Evaluation(sentences.tokens, attractor)]
    cases = {"none": []} | {head_name(*h): [h] for h in all_heads(mixture)}
    return train, evaluations, ablation_table(mixture, evaluations, cases)


def test_the_mixture_checkpoint_is_the_documented_one(mixture):
    _, meta = load_checkpoint("mixture")
    assert mixture.config.num_layers * mixture.config.num_heads == 24 and mixture.config.mlp
    assert meta["command"].startswith("python -m course_utils.train mixture --seed 0 --steps 800 "
                                      "--out data/checkpoints/mixture")
    assert meta["metrics"]["induction"] > 0.99 and meta["metrics"]["attractor"] > 0.99


def test_induction_rests_on_one_head_and_agreement_on_several(mixture_setup):
    _, _, table = mixture_setup
    intact, rows = table.loc["none"], table.drop("none")
    induction_drop = intact["induction acc"] - rows["induction acc"]
    attractor_drop = intact["attractor acc"] - rows["attractor acc"]
    assert induction_drop.max() > 0.7 and induction_drop.idxmax().startswith("L0")
    assert (induction_drop > 0.02).sum() == 1
    assert (attractor_drop > 0.02).sum() >= 4 and attractor_drop.max() < 0.3
    loss_change = rows["loss"] - intact["loss"]
    assert loss_change.idxmax() != attractor_drop.idxmax(), "agreement's worst head is not the loss's"


def test_importance_and_pruning(mixture, mixture_setup):
    train, evaluations, table = mixture_setup
    importance = head_importance(mixture, train.tokens, train.targets)
    loss_change = (table.drop("none")["loss"] - table.loc["none", "loss"]).to_numpy()
    ranks = importance.flatten().argsort().argsort().to(torch.float64)
    loss_ranks = torch.tensor(loss_change.argsort().argsort(), dtype=torch.float64)
    assert float(torch.corrcoef(torch.stack([ranks, loss_ranks]))[0, 1]) > 0.5, "Spearman"
    greedy = importance_order(importance)
    counts = list(range(0, 25, 3))

    def prunable(order):
        curve = pruning_curve(mixture, evaluations, order, counts=counts)
        start = curve.iloc[0]
        ok = ((curve["induction acc"] >= start["induction acc"] - 0.05)
              & (curve["attractor acc"] >= start["attractor acc"] - 0.05))
        return float(curve["fraction"].iloc[(ok.idxmin() if not ok.all() else len(curve)) - 1])

    random = sorted(prunable(order) for order in random_orders(mixture, range(5)))
    assert prunable(greedy) == 0.25 and prunable(greedy[::-1]) == 0.0 and random[2] < prunable(greedy)
    assert random[-1] > prunable(greedy), "one random order goes further than greedy"
