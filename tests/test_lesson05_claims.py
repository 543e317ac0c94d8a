"""The facts that the text of notebooks/05_attention_heatmaps.ipynb states in words.

The notebook prints every number it discusses, but its prose also makes claims ("every
layer-1 head is an induction head", "switching L1H2 off breaks singular subjects only").
If the shipped checkpoints or the training code change, these tests fail and say which
sentence of the lesson needs re-checking. They re-measure with the same public functions
the notebook uses, on the same fixed batches.
"""

from __future__ import annotations

import pytest
import torch

from course_utils.checkpoint import load_checkpoint
from course_utils.env import seed_everything
from course_utils.heatmaps import model_attention, sentence_attention_fn
from course_utils.model import TinyTransformer
from course_utils.scores import (
    agreement_score,
    attention_mass,
    chance_level,
    first_token_score,
    induction_positions,
    induction_score,
    previous_token_score,
    verdict,
)
from course_utils.tasks import agreement_margins, induction_accuracy
from course_utils.train import (
    AGREEMENT_TASK,
    INDUCTION_TASK,
    TrainConfig,
    induction_model_config,
    train_model,
)

PERIOD = 10
PROBE_LEN = 1 + 2 * PERIOD
PREPOSITIONAL = ("prepositional", "two_prepositions")
RELATIVE = ("object_relative", "subject_relative")


@pytest.fixture(scope="module")
def probe() -> torch.Tensor:
    tokens = INDUCTION_TASK.sample(64, torch.Generator().manual_seed(5), periods=(PERIOD,)).tokens
    return tokens[:, :PROBE_LEN]


@pytest.fixture(scope="module")
def induction():
    model, _ = load_checkpoint("induction")
    return model


@pytest.fixture(scope="module")
def agreement():
    model, _ = load_checkpoint("agreement")
    return model


@pytest.fixture(scope="module")
def induction_grids(induction, probe):
    attention = model_attention(induction, probe)
    return attention, {"previous token": previous_token_score(attention),
                       "first token": first_token_score(attention),
                       "induction": induction_score(attention, PERIOD, start=1)}


@pytest.fixture(scope="module")
def sentences(agreement):
    batch = AGREEMENT_TASK.eval_batch(2000)
    return batch, model_attention(agreement, batch.tokens)


def rows_of(batch, templates) -> torch.Tensor:
    return torch.tensor([t in templates for t in batch.template])


def agrees_without(model, batch, switched_off) -> torch.Tensor:
    gates = torch.ones(2, 4)
    for layer, head in switched_off:
        gates[layer, head] = 0.0
    with torch.no_grad():
        logits, _ = model(batch.tokens, head_mask=gates)
    return agreement_margins(logits, batch) > 0


def l1h2_mass(batch, attention, rows, key_offset=None, on_bos=False) -> float:
    """L1H2's mean weight, from the predicting position, on subject + key_offset (or <bos>)."""
    T = batch.tokens.shape[1]
    position = torch.arange(T).expand(int(rows.sum()), T)
    keys = position == 0 if on_bos else position == (batch.subject_pos[rows] + key_offset)[:, None]
    return float(attention_mass([w[rows] for w in attention], batch.predict_pos[rows], keys)[1, 2])


# ------------------------------------------------------------------ section 1: the phase change
def test_training_runs_plateau_in_accuracy_not_in_loss(probe):
    heldout = INDUCTION_TASK.eval_batch(256)

    def measure(model):
        attention = model_attention(model, probe)
        logits, _ = model(heldout.tokens)
        return {"acc": induction_accuracy(logits, heldout),
                "ind": float(induction_score(attention, PERIOD, start=1)[1].max()),
                "prev": float(previous_token_score(attention)[0].max())}

    def sample(generator):
        batch = INDUCTION_TASK.sample(64, generator)
        return batch.tokens, batch.targets

    for seed in (0, 1, 2):
        seed_everything(seed)
        history = train_model(TinyTransformer(induction_model_config()), sample, TrainConfig(steps=150),
                              seed=seed, evaluate=measure, eval_every=10, progress=False)
        acc, ind, prev = history.metric("acc"), history.metric("ind"), history.metric("prev")
        assert history.eval_steps[3] == 40 and history.steps[39] == 40
        assert history.loss[39] < history.loss[9] - 0.3, f"seed {seed}: the loss falls during the plateau"
        assert acc[3] < 0.3 and ind[3] < 0.3, f"seed {seed}: accuracy and score are still low at step 40"
        assert acc[-1] > 0.9 and ind[-1] > 0.8, f"seed {seed}: both have jumped by step 150"
        assert prev[-1] > prev[3] + 0.2, f"seed {seed}: the previous-token score rises too"
        first = [next(s for s, v in zip(history.eval_steps, m, strict=True) if v >= 0.5) for m in (acc, ind)]
        assert first[0] == first[1], f"seed {seed}: accuracy and induction score cross 0.5 together"


# ------------------------------------------------------------------ section 4: the induction model
def test_induction_model_splits_the_work_by_layer(induction_grids):
    _, grids = induction_grids
    chance = chance_level("previous token", PROBE_LEN)
    prev, first, ind = grids["previous token"], grids["first token"], grids["induction"]
    verdicts = [verdict(float(s)) for s in prev[0]]
    assert sorted(verdicts) == ["absent", "borderline", "present", "present"], "two clear, one borderline"
    assert all(float(s) >= 4 * chance for s in prev[0] if s >= 0.45), "each at four times chance or more"
    assert float(prev[1].max()) < 0.45, "no previous-token head in layer 1"
    assert float(ind[1].min()) > 0.9 and float(ind[0].max()) < 0.2, "every layer-1 head, and only those"
    assert float(first.max()) < 0.45, "no sink on every query"


def test_induction_heads_park_on_the_first_positions_only_in_the_first_copy(induction_grids):
    attention, _ = induction_grids
    layer1 = attention[1]
    first = layer1[:, :, 1 : PERIOD + 1, :2].sum(-1).mean(dim=(0, 2))  # (h,)
    second = layer1[:, :, PERIOD + 1 :, :2].sum(-1).mean(dim=(0, 2))
    assert float(first.min()) > 0.8 and float(second.max()) < 0.1


def test_the_summed_induction_score_holds_on_several_copies(induction):
    for period in INDUCTION_TASK.heldout_periods:
        tokens = INDUCTION_TASK.sample(64, torch.Generator().manual_seed(period), periods=(period,)).tokens
        attention = model_attention(induction, tokens)
        assert float(induction_score(attention, period, start=1)[1].min()) > 0.95
        if period == 5:
            queries, keys = induction_positions(tokens.shape[1], period, start=1)
            one_back = attention[1][..., queries, keys].mean(dim=(0, 2))
            assert float(one_back.max()) < 0.3, "one period back under-reports at period 5"


# ------------------------------------------------------------------ section 5: the agreement model
def test_l1h2_is_a_conditional_subject_head(sentences):
    batch, attention = sentences
    singular, plural = ~batch.plural, batch.plural
    for templates in (PREPOSITIONAL, ("simple",)):
        rows = rows_of(batch, templates)
        assert l1h2_mass(batch, attention, rows & singular, 0) > 0.99, f"{templates}: singular -> subject"
        assert 0.95 < l1h2_mass(batch, attention, rows & plural, on_bos=True), f"{templates}: plural -> <bos>"
    assert l1h2_mass(batch, attention, rows_of(batch, ("object_relative",)), 1) > 0.99, "reads 'that'"
    assert l1h2_mass(batch, attention, rows_of(batch, ("subject_relative",)) & singular, 1) > 0.99
    subj_rel_plural = rows_of(batch, ("subject_relative",)) & plural
    assert 0.5 < l1h2_mass(batch, attention, subj_rel_plural, 1) < 0.8
    assert l1h2_mass(batch, attention, subj_rel_plural, 2) > 0.2, "the rest goes one word further"


def test_on_average_no_head_looks_at_the_subject(sentences):
    batch, attention = sentences
    keep = ~rows_of(batch, ("simple",))
    kept = [w[keep] for w in attention]
    query, subject = batch.predict_pos[keep], batch.subject_pos[keep]
    position = torch.arange(batch.tokens.shape[1]).expand(len(query), -1)
    on_subject = attention_mass(kept, query, position == subject[:, None])
    between = attention_mass(kept, query, (position > subject[:, None]) & (position < query[:, None]))
    on_bos = attention_mass(kept, query, position == 0)
    assert float(on_subject.max()) < 0.3 and verdict(float(on_subject.max())) == "absent"
    assert all(float(between[1, h]) > 0.99 for h in (0, 1, 3)), "three heads read the words in between"
    assert 0.2 < float(on_subject[1, 2]) < 0.3 and 0.2 < float(on_bos[1, 2]) < 0.3
    assert 0.45 < float(between[1, 2]) < 0.55, "a quarter, a quarter and a half"


def test_switching_heads_off(agreement, sentences):
    batch, _ = sentences
    l1h2_off = agrees_without(agreement, batch, [(1, 2)])
    others_off = agrees_without(agreement, batch, [(1, 0), (1, 1), (1, 3)])
    layer1_off = agrees_without(agreement, batch, [(1, h) for h in range(4)])
    assert bool(agrees_without(agreement, batch, []).all())
    assert bool(others_off.all()), "the other three layer-1 heads together: accuracy stays 1.000"
    for template in ("prepositional", "two_prepositions", "object_relative", "subject_relative", "simple"):
        rows = rows_of(batch, (template,))
        assert float(l1h2_off[rows & batch.plural].float().mean()) >= 0.99, f"{template}: plural survives"
        singular = float(l1h2_off[rows & ~batch.plural].float().mean())
        assert (singular > 0.9) if template == "simple" else (singular < 0.3), f"{template}: singular"
    assert 0.45 < float(l1h2_off[rows_of(batch, ("prepositional",))].float().mean()) < 0.55
    assert float(l1h2_off[batch.attractor & ~batch.plural].float().mean()) < 0.1
    attractor = batch.attractor
    assert float(l1h2_off[attractor].float().mean()) < float(layer1_off[attractor].float().mean()), \
        "L1H2 alone hurts more than all of layer 1"
    singles = {(lay, h): float(agrees_without(agreement, batch, [(lay, h)])[attractor].float().mean())
               for lay in range(2) for h in range(4)}
    assert min(singles, key=singles.get) == (1, 2), "the worst single head is L1H2"


def test_layer0_relay_from_the_word_after_the_subject(sentences):
    batch, attention = sentences
    relay = {}
    for name, templates in (("preposition", PREPOSITIONAL), ("that", RELATIVE)):
        rows = rows_of(batch, templates)
        relay[name] = agreement_score([w[rows] for w in attention], batch.subject_pos[rows] + 1,
                                      batch.subject_pos[rows])[0]
    that = sorted(relay["that"].tolist())
    assert that[-1] > 0.9 and that[-2] > 0.5, "one head nearly all, another more than half"
    assert verdict(float(relay["preposition"].max())) == "borderline", "the preposition's link: about half"


def test_agreement_textbook_scores(sentences):
    batch, attention = sentences
    length = int(batch.lengths.mode().values)
    same = [w[batch.lengths == length][..., :length, :length] for w in attention]
    prev, first = previous_token_score(same), first_token_score(same)
    assert verdict(float(prev.max())) == "borderline"
    assert 1.8 < float(prev.max()) / chance_level("previous token", length) < 2.2, "twice chance"
    assert verdict(float(first.max())) == "absent"


def test_the_figures_show_what_the_text_says(agreement, sentences):
    attention_for = sentence_attention_fn(agreement)

    def looks_at(text, head):
        words, attention = attention_for(text)
        return words[int(attention[1][0, head, -2].argmax())]  # the row that predicts the verb

    assert looks_at("the keys on the table are", 2) == "<bos>"
    assert looks_at("the key on the tables is", 2) == "key"
    assert looks_at("the cat that the dogs chase is", 2) == "that"
    batch, attention = sentences
    keep = ~rows_of(batch, ("simple",))
    kept = [w[keep] for w in attention]
    toward = agreement_score(kept, batch.predict_pos[keep], batch.subject_pos[keep] + 2)
    assert int(toward[1].argmax()) == 0, "L1H0 is the subject + 2 head of section 8"
    words, weights = attention_for("the key on the tables is")
    assert int(weights[1][0, 0, -2].argmax()) == words.index("key") + 2  # 'the', two words after 'key'


# ------------------------------------------------------------------ section 9: redundancy
def test_induction_heads_are_redundant(induction):
    heldout = INDUCTION_TASK.eval_batch(256)

    def accuracy(switched_off):
        gates = torch.ones(2, 4)
        for layer, head in switched_off:
            gates[layer, head] = 0.0
        with torch.no_grad():
            logits, _ = induction(heldout.tokens, head_mask=gates)
        return induction_accuracy(logits, heldout)

    assert min(accuracy([(1, h)]) for h in range(4)) > 0.9, "one induction head off changes little"
    assert accuracy([(0, h) for h in range(4)]) < 0.3 and accuracy([(1, h) for h in range(4)]) < 0.3
