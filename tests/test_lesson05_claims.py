"""The facts that the text of notebooks/05_attention_heatmaps.ipynb states in words.

The notebook prints every number it discusses, but its prose also makes claims ("every
layer-1 head is an induction head", "switching L1H2 off breaks singular subjects only").
If the shipped checkpoints or the training code change, these tests fail and say which
sentence of the lesson needs re-checking. They re-measure with the same public functions
the notebook uses, on the same fixed batches.
"""

from __future__ import annotations

import math

import pytest
import torch

from course_utils.env import seed_everything
from course_utils.interp.ablation import ablated_logits, mean_head_outputs
from course_utils.interp.circuits import (
    direct_logit_attribution,
    head_output_norms,
    in_context_mass,
    next_token_loss,
    ov_copying_score,
    trace_heads,
)
from course_utils.interp.heatmaps import model_attention, sentence_attention_fn
from course_utils.interp.scores import (
    agreement_score,
    attention_mass,
    chance_level,
    first_token_score,
    induction_key_mask,
    induction_positions,
    induction_score,
    previous_token_by_position,
    previous_token_score,
    verdict,
)
from course_utils.model.checkpoint import load_checkpoint
from course_utils.model.train import (
    AGREEMENT_TASK,
    INDUCTION_TASK,
    TrainConfig,
    induction_model_config,
    train_model,
)
from course_utils.model.transformer import TinyTransformer
from course_utils.tasks.synthetic import (
    PAD_ID,
    PREPOSITIONS,
    WORD_TO_ID,
    agreement_accuracy,
    agreement_margins,
    induction_accuracy,
)

# Claims recomputed beyond what the lesson prints (training runs, ablations): minutes
# of work in all. CI's slow stage runs them, one worker per file (the
# module fixtures are computed once), and `python3 course.py test --all` runs them here.
pytestmark = [pytest.mark.slow, pytest.mark.xdist_group("lesson05_claims")]

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
def _train_measure(probe, heldout):
    def measure(model):
        attention = model_attention(model, probe)
        logits, _ = model(heldout.tokens)
        return {"acc": induction_accuracy(logits, heldout),
                "ctx": in_context_mass(logits, heldout.tokens, heldout.scored)[0],
                "ind": float(induction_score(attention, PERIOD, start=1)[-1].max()),
                "prev": float(previous_token_score(attention)[0].max())}
    return measure


def _sample(generator):
    batch = INDUCTION_TASK.sample(64, generator)
    return batch.tokens, batch.targets


def _rise(history, key):
    """First evaluation steps reaching 10% and 90% of the rise from the first to the last value."""
    values = history.metric(key)
    start, end = values[0], values[-1]
    return [next(s for s, v in zip(history.eval_steps, values, strict=True) if v >= start + f * (end - start))
            for f in (0.1, 0.9)]


@pytest.fixture(scope="module")
def training_runs(probe):
    heldout = INDUCTION_TASK.eval_batch(256)
    runs = {}
    for seed in (0, 1, 2):
        seed_everything(seed)
        runs[seed] = train_model(TinyTransformer(induction_model_config()), _sample, TrainConfig(steps=150),
                                 seed=seed, evaluate=_train_measure(probe, heldout), eval_every=10,
                                 progress=False)
    return runs


def test_training_runs_plateau_in_accuracy_not_in_loss(training_runs):
    heldout = INDUCTION_TASK.eval_batch(256)
    uniform = in_context_mass(torch.zeros(*heldout.tokens.shape, 64), heldout.tokens, heldout.scored)[0]
    assert 0.12 < uniform < 0.14, "a uniform guess puts about 0.13 on tokens seen in context"
    for seed, history in training_runs.items():
        acc, ind, prev, ctx = (history.metric(k) for k in ("acc", "ind", "prev", "ctx"))
        assert history.eval_steps[3] == 40 and history.steps[39] == 40
        assert history.loss[39] < history.loss[9] - 0.3, f"seed {seed}: the loss falls during the plateau"
        assert acc[3] < 0.3 and ind[3] < 0.3, f"seed {seed}: accuracy and score are still low at step 40"
        assert 2.55 * uniform < ctx[3] < 2.95 * uniform, f"seed {seed}: a bag of tokens, 2.6-2.9x uniform"
        assert acc[-1] > 0.9 and ind[-1] > 0.8, f"seed {seed}: both have jumped by step 150"
        assert prev[-1] > prev[3] + 0.2, f"seed {seed}: the previous-token score rises too"
        (a10, a90), (i10, i90) = _rise(history, "acc"), _rise(history, "ind")
        assert 50 <= a10 <= 70 and 50 <= i10 <= 70, f"seed {seed}: low until step 50 to 70"
        assert 30 <= a90 - a10 <= 50 and 30 <= i90 - i10 <= 50, f"seed {seed}: 10% -> 90% in 30-50 steps"
        assert abs(a10 - i10) <= 10, f"seed {seed}: the two rise together"


def test_a_one_layer_model_learns_no_induction(probe, training_runs):
    heldout = INDUCTION_TASK.eval_batch(256)
    seed_everything(0)
    one = train_model(TinyTransformer(induction_model_config(num_layers=1)), _sample, TrainConfig(steps=150),
                      seed=0, evaluate=_train_measure(probe, heldout), eval_every=150, progress=False)
    final, two = one.eval_metrics[-1], training_runs[0].eval_metrics[-1]
    assert final["acc"] < 0.05 and final["ind"] < 0.1, "no induction head, no held-out accuracy"
    assert final["ctx"] > 0.4, "but it copies as a bag of tokens (well above the uniform 0.13)"
    assert two["acc"] > 0.9 and two["ind"] > 0.8, "the two-layer model, same steps: nearly 1"


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


# ------------------------------------------------------------------ section 4: position, circuit, sinks
@pytest.fixture(scope="module")
def heldout_batch():
    return INDUCTION_TASK.eval_batch(256)


def test_previous_token_heads_work_only_early(induction, heldout_batch):
    attention = model_attention(induction, heldout_batch.tokens)
    by_position = previous_token_by_position(attention)[0]  # (h, 31)
    early, late = by_position[:, :15].mean(-1), by_position[:, 15:30].mean(-1)
    assert all(0.71 < float(early[h]) < 0.96 for h in range(3)), "L0H0-2: 0.72 to 0.95 on queries 1-15"
    assert float(late.max()) < 0.05, "almost nothing after 16"
    whole = previous_token_score(attention)[0]
    assert float(whole.max()) < 0.5, "over 32 tokens no head reaches the line"
    assert 0.45 < float(whole[1]) < 0.5 and 0.33 < float(whole[0]) < 0.4 and 0.4 < float(whole[2]) < 0.45
    # the cause: layer 1 reads its keys from the first copy, which in training ends by position 16
    longest = max(INDUCTION_TASK.train_periods)
    assert longest == 16
    positions = torch.arange(heldout_batch.tokens.shape[1])
    stripes = torch.stack([induction_key_mask(len(positions), int(p), start=1)
                           for p in heldout_batch.periods])
    late_q = positions > longest
    on_stripes = (attention[1] * stripes[:, None]).sum(-1)[..., late_q]
    on_first = (attention[1] * (stripes & (positions <= longest + 1))[:, None]).sum(-1)[..., late_q]
    assert float(on_first.sum() / on_stripes.sum()) > 0.99
    assert float(on_stripes.mean()) > 0.95


def test_layer_one_copies_and_its_keys_read_layer_zero(induction, probe, heldout_batch):
    copying = ov_copying_score(induction, 1, range(1, 64))
    assert bool((copying == 1).all()), "every layer-1 head maps every token to itself"
    trace = trace_heads(induction, probe)
    direct = direct_logit_attribution(induction, trace, probe.roll(-1, dims=1))
    second = direct[..., PERIOD + 1 : PROBE_LEN - 1].mean(dim=(2, 3))  # (L, h)
    first = direct[1][..., 1:PERIOD].mean(dim=(1, 2))
    assert float(second[1].min()) > 2.0 and float(second[0].abs().max()) < 0.1
    assert float(first.abs().max()) < 0.1
    layer0 = [(0, h) for h in range(4)]

    def patched(**edit):
        on_probe = trace_heads(induction, probe, **edit)
        on_heldout = trace_heads(induction, heldout_batch.tokens, keep_attention=False, **edit)
        return induction_score(on_probe.attention, PERIOD, start=1)[1], induction_accuracy(on_heldout.logits,
                                                                                            heldout_batch)

    ind, acc = patched(keys_without={1: layer0})
    assert float(ind.max()) < 0.1 and acc < 0.2, "layer 0 out of the keys: prefix matching collapses"
    ind, acc = patched(queries_without={1: layer0})
    assert float(ind.min()) > 0.9 and acc > 0.99, "out of the queries: nothing changes"
    singles = {h: patched(keys_without={1: [(0, h)]}) for h in range(4)}
    drop = {h: float(singles[h][0].mean()) for h in range(4)}
    assert min(drop, key=drop.get) == 1, "L0H1 costs the most"
    assert min(drop.values()) > 0.6 and min(acc for _, acc in singles.values()) > 0.85, "none indispensable"


def test_parked_heads_write_large_vectors_the_model_uses(induction, probe, induction_grids):
    attention, _ = induction_grids
    trace = trace_heads(induction, probe)
    first, second = slice(1, PERIOD + 1), slice(PERIOD + 1, PROBE_LEN)
    layer1 = attention[1]
    parked_first = layer1[..., first, :2].sum(-1).mean(dim=(0, 2))
    parked_second = layer1[..., second, :2].sum(-1).mean(dim=(0, 2))
    uniform = torch.tril(torch.ones(PROBE_LEN, PROBE_LEN)) / torch.arange(1, PROBE_LEN + 1)[:, None]
    chance_first = float(uniform[first, :2].sum(-1).mean())
    chance_second = float(uniform[second, :2].sum(-1).mean())
    assert abs(chance_first - 0.404) < 0.001 and abs(chance_second - 0.125) < 0.001
    assert float(parked_first.min()) > 2 * chance_first and float(parked_second.max()) < chance_second / 2
    norms = head_output_norms(trace)[1]  # (64, h, 21)
    stream = trace.residual[1].norm(dim=-1)
    n_first, n_second = norms[..., first].mean(dim=(0, 2)), norms[..., second].mean(dim=(0, 2))
    assert 13 < float(stream[:, first].mean()) < 16
    assert float(n_first.min()) > 3 * float(stream[:, first].mean()), "several times the stream's norm"
    assert float((n_first / n_second).min()) > 2.5, "several times what it writes when copying"
    assert 15 < float(n_second.min()) and float(n_second.max()) < 25
    writes = trace.head_outputs[1][:, :, first]
    cosine = torch.cosine_similarity(writes, writes.mean(dim=0, keepdim=True), dim=-1).mean(dim=(0, 2))
    assert float(cosine.min()) > 0.85, "nearly the same vector in every sequence"
    replace = {}
    for head in range(4):
        written = trace.head_outputs[1][:, head].clone()
        written[:, first] = 0.0
        replace[(1, head)] = written
    removed = trace_heads(induction, probe, replace=replace)
    rows = torch.zeros_like(probe, dtype=torch.bool)
    rows[:, 1:PERIOD] = True
    even = sum(math.log(63 - seen) for seen in range(1, PERIOD)) / (PERIOD - 1)
    with_parked = next_token_loss(trace.logits, probe, rows)
    without = next_token_loss(removed.logits, probe, rows)
    assert without - with_parked > 1.5, "about 2 nats worse without the parked writes"
    assert 0 < with_parked - even < 0.3, "otherwise close to the even guess"


def test_induction_score_normalisation(induction_grids):
    attention, grids = induction_grids
    all_rows = induction_score(attention, PERIOD, start=1, average_over="all rows")[1]
    assert float(all_rows.max()) < 0.48 and float(all_rows.min()) > 0.44, "the same heads score 0.45-0.47"
    assert float((grids["induction"][1] / all_rows).min()) > 2.0, "less than half as much"


# ------------------------------------------------------------------ section 5: norms and the previous word
def test_parked_l1h2_still_writes(agreement, sentences):
    batch, _ = sentences
    prep = rows_of(batch, PREPOSITIONAL)
    trace = trace_heads(agreement, batch.tokens[prep], keep_attention=False)
    rows, at_verb = torch.arange(int(prep.sum())), batch.predict_pos[prep]
    written = trace.head_outputs[1][rows, 2, at_verb].norm(dim=-1)
    stream = trace.residual[1][rows, at_verb].norm(dim=-1)
    plural = batch.plural[prep]
    singular_norm, plural_norm = float(written[~plural].mean()), float(written[plural].mean())
    assert 0.5 * singular_norm < plural_norm < singular_norm, "more than half as long: not silence"
    assert 42 < singular_norm < 44 and 23.5 < plural_norm < 25, "24 against 43 (the printed norms)"
    assert float(stream[plural].mean()) < 2 * plural_norm, "in a stream not much longer than that"


def test_l0h3_is_a_previous_token_head_for_that(sentences):
    batch, attention = sentences
    on_previous = attention[0].diagonal(offset=-1, dim1=-2, dim2=-1)
    word = batch.tokens[:, 1:]
    real = torch.arange(1, batch.tokens.shape[1]) < batch.lengths[:, None]
    is_that = (word == WORD_TO_ID["that"]) & real
    is_prep = torch.isin(word, torch.tensor([WORD_TO_ID[p] for p in PREPOSITIONS])) & real
    l0h3 = {name: float(on_previous.transpose(1, 2)[rows].mean(0)[3])
            for name, rows in (("that", is_that), ("prep", is_prep), ("other", real & ~is_that & ~is_prep))}
    assert l0h3["that"] > 0.9 and l0h3["prep"] < 0.05 and 0.25 < l0h3["other"] < 0.45
    # in this grammar the word after the subject always follows it directly
    after_subject = batch.tokens[torch.arange(len(batch)), batch.subject_pos + 1]
    relational = rows_of(batch, PREPOSITIONAL + RELATIVE)
    assert bool(torch.isin(after_subject[relational],
                           torch.tensor([WORD_TO_ID["that"], *[WORD_TO_ID[p] for p in PREPOSITIONS]])).all())


# ------------------------------------------------------------------ section 9: loss and mean ablation
def test_ablation_losses_and_mean_ablation(induction, agreement, sentences, heldout_batch):
    batch, _ = sentences
    models = {"induction": (induction, heldout_batch.tokens), "agreement": (agreement, batch.tokens)}
    means = {"induction": mean_head_outputs(induction, heldout_batch.tokens, per_position=True),
             "agreement": mean_head_outputs(agreement, batch.tokens, keep=batch.tokens != PAD_ID)}

    computed = {}  # (name, heads, how) -> logits: a case read twice is computed once

    @torch.no_grad()
    def logits(name, off, how):
        key = (name, tuple(off), how)
        if key not in computed:
            model, tokens = models[name]
            if how == "zero":
                gates = torch.ones(2, 4)
                for layer, head in off:
                    gates[layer, head] = 0.0
                computed[key] = model(tokens, head_mask=gates)[0]
            else:
                computed[key] = ablated_logits(model, tokens, off, method="mean", means=means[name])
        return computed[key]

    def ind_loss(off, how="zero"):
        return next_token_loss(logits("induction", off, how), heldout_batch.tokens, heldout_batch.scored)

    def agr_loss(off):
        return next_token_loss(logits("agreement", off, "zero"), batch.tokens, batch.targets != -100)

    one_left = [(1, 0), (1, 1), (1, 3)]
    assert ind_loss([]) < 0.005
    assert induction_accuracy(logits("induction", one_left, "zero"), heldout_batch) > 0.94
    assert 0.27 < ind_loss(one_left) < 0.28, "one head left: the loss rises from 0.001 to 0.275"
    assert 0.72 < ind_loss(one_left, "mean") < 0.74, "and to 0.730 under mean ablation"
    assert induction_accuracy(logits("induction", one_left, "mean"), heldout_batch) > 0.9
    base = agr_loss([])
    assert max(agr_loss([(lay, h)]) - base for lay in range(2) for h in range(4)) < 0.2
    attractor = batch.attractor

    def split(off, how):
        right = agreement_margins(logits("agreement", off, how), batch) > 0
        singular, plural = right[attractor & ~batch.plural], right[attractor & batch.plural]
        return (float(right[attractor].float().mean()), float(singular.float().mean()),
                float(plural.float().mean()), int((~plural).sum()))

    layer1 = [(1, h) for h in range(4)]
    zero_l1h2, zero_layer, mean_l1h2, mean_layer = (split([(1, 2)], "zero"), split(layer1, "zero"),
                                                    split([(1, 2)], "mean"), split(layer1, "mean"))
    assert zero_l1h2[1] < 0.1 and zero_l1h2[2] > 0.99, "zero: singular fails, plural right"
    assert zero_layer[3] > 100, "all of layer 1 also breaks many plural subjects"
    assert abs(zero_l1h2[0] - zero_layer[0]) < 0.03, "similar averages"
    assert abs(mean_l1h2[0] - zero_l1h2[0]) < 0.02, "L1H2 needed whichever way it is switched off"
    assert mean_l1h2[1] < 0.1 and mean_l1h2[3] <= 2, "mean: the same failure as zero ablation"
    assert (mean_layer[3], zero_layer[3]) == (52, 128), "the prose: 52 against 128 of 452 plural errors"
    assert (round(zero_layer[1], 3), round(zero_layer[2], 3)) == (0.393, 0.717), "all of layer 1 breaks both"
    assert abs(mean_l1h2[0] - mean_layer[0]) < 0.02, "the totals differ by about a point"
    assert agreement_accuracy(logits("agreement", [(1, 2)], "mean"), batch)["attractor"] < 0.6


def test_mean_ablation_is_the_same_through_trace_heads_and_lesson_06s_module(induction, heldout_batch):
    """Lesson 05 patches with trace_heads and mean-ablates with course_utils.interp.ablation: one quantity."""
    tokens = heldout_batch.tokens
    per_position = mean_head_outputs(induction, tokens, per_position=True)  # (L, h, T, dk)
    written = [o.mean(0) for o in trace_heads(induction, tokens, keep_attention=False).head_outputs]
    for off in ([(1, 0)], [(0, 1), (1, 2)]):
        through_model = ablated_logits(induction, tokens, off, method="mean", means=per_position)
        through_trace = trace_heads(induction, tokens, keep_attention=False,
                                    replace={k: written[k[0]][k[1]] for k in off}).logits
        assert torch.allclose(through_model, through_trace, atol=1e-4)


def test_three_layer_0_heads_are_local_only_early_and_layer_1_looks_far_and_sharply(induction):
    """Section 7's 'near and far', against an even spread (4.0 back on queries 1-15, 11.75 on
    16-31): early, L0H1 looks about 1.2 back (largest weight 0.95), L0H0 and L0H2 about 2, L0H3
    no nearer than even; late, layer 0 spreads thinly (largest weight about 0.2); layer 1 is
    sharp throughout (about 0.9) and looks about 17 back late."""
    heldout = INDUCTION_TASK.eval_batch(256)
    with torch.no_grad():
        attention = model_attention(induction, heldout.tokens)  # [(256, h, 32, 32)] per layer
    positions = torch.arange(heldout.tokens.shape[1])
    distance = (positions[:, None] - positions[None, :]).clamp(min=0).float()
    early, late = slice(1, 16), slice(16, None)
    even_early, even_late = (float((positions[q].float() / 2).mean()) for q in (early, late))  # uniform
    assert even_early == pytest.approx(4.0) and even_late == pytest.approx(11.75)

    def reach(layer, queries):
        return (attention[layer] * distance).sum(-1)[:, :, queries].mean(dim=(0, 2))  # (h,)

    def peak(layer, queries):
        return attention[layer].max(dim=-1).values[:, :, queries].mean(dim=(0, 2))  # (h,)

    assert 1.0 < reach(0, early)[1] < 1.5 and peak(0, early)[1] > 0.9
    assert reach(0, early)[0] < 2.5 and reach(0, early)[2] < 2.5
    assert reach(0, early)[3] > even_early and peak(0, early)[3] < 0.5
    assert peak(0, late).max() < 0.3 and (reach(0, late) - even_late).abs().max() < 1.5
    assert peak(1, early).min() > 0.85 and peak(1, late).min() > 0.85 and reach(1, late).min() > 16
