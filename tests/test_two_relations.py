"""The two-key lookup task and the 1-head vs h-head comparison of lesson 01."""

from __future__ import annotations

import math

import pandas as pd
import pytest
import torch

from course_utils.exercises.lesson01 import RELATION_ACCURACY
from course_utils.tasks.two_relations import (
    LookupBatch,
    LookupModel,
    RelationsConfig,
    TwoKeyTask,
    accuracy_by_share,
    accuracy_table,
    attention_by_copies,
    compare_heads,
    count_parameters,
    evaluate,
    example_table,
    pair_class,
    plot_item_attention,
    share_on_a,
    split_pair_class,
    swap_chance,
    swap_fraction,
    train_lookup,
    weight_on_keys,
)

TASK = TwoKeyTask()


def test_sample_is_deterministic_in_the_seed():
    one, two = TASK.sample(500, seed=3), TASK.sample(500, seed=3)
    for a, b in zip(one, two, strict=True):
        assert torch.equal(a, b)
    other = TASK.sample(500, seed=4)
    assert not torch.equal(one.item_keys, other.item_keys)
    from_generator = TASK.sample(500, generator=torch.Generator().manual_seed(3))
    assert torch.equal(from_generator.target, one.target)


def test_sample_shapes_and_types():
    batch = TASK.sample(64, seed=0)
    n, T = 64, TASK.num_items
    assert batch.item_keys.shape == batch.item_symbols.shape == batch.relation.shape == (n, T)
    assert batch.query_keys.shape == batch.answer_symbols.shape == (n, 2)
    assert batch.target.shape == (n,)
    assert all(t.dtype == torch.int64 for t in batch)
    assert batch.num_examples == n and batch.take(slice(0, 10)).num_examples == 10


@pytest.mark.parametrize("task", [TwoKeyTask(), TwoKeyTask(max_repeats=1),
                                  TwoKeyTask(num_items=5, num_keys=3, num_symbols=2, max_repeats=2)])
def test_sample_holds_what_it_claims(task):
    b = task.sample(2000, seed=1)
    a_key, b_key = b.query_keys[:, :1], b.query_keys[:, 1:]
    assert (a_key != b_key).all()
    # an item is relation 0 exactly when it carries key a, relation 1 exactly when key b
    assert torch.equal(b.relation == 0, b.item_keys == a_key)
    assert torch.equal(b.relation == 1, b.item_keys == b_key)
    copies = torch.stack([(b.relation == 0).sum(1), (b.relation == 1).sum(1)], dim=1)
    assert copies.min() == 1 and copies.max() == task.max_repeats
    if task.max_repeats > 1:  # every number of copies occurs
        assert set(copies.flatten().tolist()) == set(range(1, task.max_repeats + 1))
    # every copy of key a holds a's answer; same for b
    holds_a = torch.where(b.relation == 0, b.item_symbols, b.answer_symbols[:, :1])
    holds_b = torch.where(b.relation == 1, b.item_symbols, b.answer_symbols[:, 1:])
    assert torch.equal(holds_a, b.answer_symbols[:, :1].expand_as(holds_a))
    assert torch.equal(holds_b, b.answer_symbols[:, 1:].expand_as(holds_b))
    assert torch.equal(b.target, pair_class(b.answer_symbols[:, 0], b.answer_symbols[:, 1],
                                            task.num_symbols))
    assert b.item_keys.max() < task.num_keys and b.item_symbols.max() < task.num_symbols


def test_target_needs_both_relations():
    """Knowing one of the two symbols leaves the answer at chance among V classes."""
    V = TASK.num_symbols
    b = TASK.sample(40_000, seed=2)
    for half in (0, 1):
        best_guess_right = 0
        for s in range(V):
            rows = b.answer_symbols[:, half] == s
            counts = torch.bincount(b.target[rows], minlength=TASK.num_classes)
            assert (counts > 0).sum() == V  # V different answers remain possible
            best_guess_right += counts.max().item()
        assert best_guess_right / b.num_examples < 1.5 / V  # about 1/V, far from 1
    # changing the symbol under a (or under b) changes the answer
    sa, sb = b.answer_symbols.unbind(1)
    assert (pair_class((sa + 1) % V, sb, V) != b.target).all()
    assert (pair_class(sa, (sb + 1) % V, V) != b.target).all()


def test_example_table_and_attention_by_copies():
    batch = TASK.sample(300, seed=6)
    assert isinstance(batch, LookupBatch)
    table = example_table(batch, 2)
    assert list(table["key"]) == batch.item_keys[2].tolist()
    assert (table["answers key"] == "a").sum() == (batch.relation[2] == 0).sum().item()
    with pytest.raises(IndexError, match=r"index must be an int in 0\.\.299, got 300"):
        example_table(batch, 300)
    torch.manual_seed(0)
    by_copies = attention_by_copies(LookupModel(TASK, 16, 2), batch, digits=6)
    assert len(by_copies) == TASK.max_repeats**2
    assert list(by_copies.columns) == ["head 0 on a", "head 0 on b", "head 1 on a", "head 1 on b",
                                       "accuracy"]
    on_keys = by_copies[["head 0 on a", "head 0 on b"]].sum(axis=1)
    assert ((on_keys > 0) & (on_keys <= 1)).all()  # a share of one softmax


def test_pair_class_round_trip():
    a, b = torch.arange(8).repeat_interleave(8), torch.arange(8).repeat(8)
    classes = pair_class(a, b, 8)
    assert torch.equal(classes, torch.arange(64))
    back_a, back_b = split_pair_class(classes, 8)
    assert torch.equal(back_a, a) and torch.equal(back_b, b)


@pytest.mark.parametrize("kwargs,error,words", [
    ({"num_items": 4, "max_repeats": 3}, ValueError, r"2 \* max_repeats"),
    ({"num_keys": 2}, ValueError, "num_keys must be an int >= 3"),
    ({"num_symbols": 1}, ValueError, "num_symbols must be an int in 2\\.\\."),
    ({"num_items": 8.0}, TypeError, "num_items must be an int"),
    ({"max_repeats": True}, TypeError, "max_repeats must be an int"),
])
def test_bad_task_settings_raise(kwargs, error, words):
    with pytest.raises(error, match=words):
        TwoKeyTask(**kwargs)


def test_bad_sample_arguments_raise():
    with pytest.raises(ValueError, match="n must be a positive int"):
        TASK.sample(0, seed=0)
    with pytest.raises(ValueError, match="exactly one of"):
        TASK.sample(5)
    with pytest.raises(ValueError, match="exactly one of"):
        TASK.sample(5, seed=0, generator=torch.Generator())
    with pytest.raises(TypeError, match="seed must be an int"):
        TASK.sample(5, seed=1.5)


def test_model_rejects_bad_input():
    with pytest.raises(ValueError, match="not divisible"):
        LookupModel(TASK, d_model=16, num_heads=3)
    with pytest.raises(ValueError, match="values must be"):
        LookupModel(TASK, 16, 2, values="positions")
    with pytest.raises(TypeError, match="TwoKeyTask"):
        LookupModel("task", 16, 2)
    model = LookupModel(TASK, 16, 2)
    with pytest.raises(TypeError, match="LookupBatch"):
        model(TASK.sample(4, seed=0).item_keys)
    other = TwoKeyTask(num_items=10).sample(4, seed=0)
    with pytest.raises(ValueError, match="10 items per example"):
        model(other)


def test_bad_training_arguments_raise():
    with pytest.raises(ValueError, match="lr must be a finite number > 0"):
        RelationsConfig(lr=0.0)
    with pytest.raises(ValueError, match="steps must be a positive int"):
        RelationsConfig(steps=0)
    with pytest.raises(ValueError, match="num_heads must be a positive int"):
        train_lookup(TASK, 0, seed=0)
    with pytest.raises(TypeError, match="RelationsConfig"):
        train_lookup(TASK, 2, seed=0, config={"steps": 5})
    with pytest.raises(ValueError, match="heads must hold at least one int"):
        compare_heads(TASK, heads=(), seeds=(0,))
    with pytest.raises(ValueError, match="which must be"):
        accuracy_table([], which="c")


def test_one_head_and_two_heads_have_the_same_parameters_and_start():
    torch.manual_seed(0)
    one = LookupModel(TASK, 16, 1)
    torch.manual_seed(0)
    two = LookupModel(TASK, 16, 2)
    assert count_parameters(one) == count_parameters(two)
    for (name_1, p_1), (name_2, p_2) in zip(one.named_parameters(), two.named_parameters(),
                                            strict=True):
        assert name_1 == name_2 and torch.equal(p_1, p_2)
    batch = TASK.sample(3, seed=0)
    _, w1 = one(batch, need_weights=True)
    _, w2 = two(batch, need_weights=True)
    assert w1.shape == (3, 1, 1, TASK.num_items) and w2.shape == (3, 2, 1, TASK.num_items)


SHORT = RelationsConfig(steps=150, eval_every=50, eval_size=1024)


def test_short_training_beats_chance_and_is_deterministic():
    first = train_lookup(TASK, 2, seed=0, config=SHORT)
    again = train_lookup(TASK, 2, seed=0, config=SHORT)
    assert first.accuracy == again.accuracy
    assert first.steps == (0, 50, 100, 150)
    chance = 1 / TASK.num_classes
    assert first.accuracy[0] < 3 * chance  # untrained: near chance
    assert first.final_accuracy > 0.5  # trained: far above chance (1/64)
    whole, acc_a, acc_b = evaluate(first.model, TASK.sample(1024, seed=10_000))
    assert whole == first.final_accuracy
    assert whole <= min(acc_a, acc_b)


def test_evaluate_agrees_with_the_exercise_reference():
    run = train_lookup(TASK, 1, seed=1, config=RelationsConfig(steps=20, eval_every=20, eval_size=256))
    batch = TASK.sample(256, seed=5)
    with torch.no_grad():
        logits = run.model(batch)[0]
    expected = RELATION_ACCURACY.reference(logits, batch.target, TASK.num_symbols)
    assert torch.allclose(torch.tensor(evaluate(run.model, batch)[1:], dtype=torch.float64), expected)


def test_two_heads_beat_one_head_on_the_repeated_key_task():
    """The lesson's claim at a short budget, on one seed (the lesson shows five)."""
    config = RelationsConfig(steps=300)
    one = train_lookup(TASK, 1, seed=0, config=config)
    two = train_lookup(TASK, 2, seed=0, config=config)
    assert two.final_accuracy > one.final_accuracy + 0.03
    table = accuracy_table([one, two])
    assert list(table.columns) == ["1 head (dk=16)", "2 heads (dk=8)"]
    assert list(table.index) == ["seed 0", "mean"]


class _FixedAnswers(LookupModel):
    """A stand-in model: uniform attention, and the answer ``rule(batch)`` with full confidence."""

    def __init__(self, task, rule):
        super().__init__(task, 16, 2)
        self.rule = rule

    def forward(self, batch, *, need_weights=False):
        n, T = batch.item_keys.shape
        logits = torch.full((n, self.task.num_classes), -10.0)
        logits[torch.arange(n), self.rule(batch)] = 10.0
        weights = torch.full((n, 2, 1, T), 1.0 / T) if need_weights else None
        return logits, weights


def test_swap_fraction_counts_only_swapped_errors():
    batch = TASK.sample(500, seed=8)
    V = TASK.num_symbols
    sa, sb = batch.answer_symbols.unbind(1)
    assert swap_fraction(_FixedAnswers(TASK, lambda b: pair_class(sb, sa, V)), batch) == 1.0
    assert swap_fraction(_FixedAnswers(TASK, lambda b: pair_class(sa, (sa + 1) % V, V)), batch) < 0.05
    assert math.isnan(swap_fraction(_FixedAnswers(TASK, lambda b: b.target), batch))


def test_swap_chance_is_one_over_the_other_classes():
    batch = TASK.sample(500, seed=8)
    V = TASK.num_symbols
    sa, sb = batch.answer_symbols.unbind(1)
    differ = (sa != sb).double().mean().item()  # every answer is wrong below
    chance = swap_chance(_FixedAnswers(TASK, lambda b: pair_class(sa, (sb + 1) % V, V)), batch)
    assert chance == pytest.approx(differ / (V * V - 1))
    assert math.isnan(swap_chance(_FixedAnswers(TASK, lambda b: b.target), batch))


def test_share_on_a_and_accuracy_by_share():
    batch = TASK.sample(400, seed=9)
    torch.manual_seed(1)
    model = LookupModel(TASK, 16, 2)
    share = share_on_a(model, batch, head=1)
    assert share.shape == (400,) and ((share >= 0) & (share <= 1)).all()
    with torch.no_grad():
        weights = model(batch, need_weights=True)[1][:, 1, 0]  # (n, T)
    on_a = (weights * (batch.relation == 0)).sum(-1)
    assert torch.allclose(share, on_a / (on_a + (weights * (batch.relation == 1)).sum(-1)))
    # uniform attention: the share on a is copies of a / (copies of a + copies of b)
    copies_a, copies_b = (batch.relation == 0).sum(1), (batch.relation == 1).sum(1)
    uniform = share_on_a(_FixedAnswers(TASK, lambda b: b.target), batch)
    assert torch.allclose(uniform, copies_a / (copies_a + copies_b))
    table = accuracy_by_share(model, batch, edges=(0.0, 0.5, 1.0), digits=6)
    assert list(table.index) == ["[0.0, 0.5)", "[0.5, 1.0]"]
    assert table["questions"].sum() == 400
    overall = evaluate(model, batch)[0]
    assert abs((table["questions"] * table["accuracy"]).sum() / 400 - overall) < 1e-4
    assert table["wrong"].sum() == round(400 * (1 - overall))
    swapped_model = _FixedAnswers(TASK, lambda b: pair_class(b.answer_symbols[:, 1], b.answer_symbols[:, 0],
                                                            TASK.num_symbols))
    swaps = accuracy_by_share(swapped_model, batch, edges=(0.0, 0.5, 1.0))
    assert (swaps["swapped"] == swaps["wrong"]).all() and swaps["wrong"].sum() > 0


@pytest.mark.parametrize("edges", [(0.1, 1.0), (0.0, 0.5), (0.0, 0.6, 0.4, 1.0), (0.0,)])
def test_accuracy_by_share_rejects_bad_edges(edges):
    with pytest.raises(ValueError, match="edges must rise"):
        accuracy_by_share(LookupModel(TASK, 16, 1), TASK.sample(8, seed=0), edges=edges)


def test_share_on_a_rejects_a_missing_head():
    model, batch = LookupModel(TASK, 16, 2), TASK.sample(8, seed=0)
    with pytest.raises(ValueError, match="head must be < 2"):
        share_on_a(model, batch, head=2)
    with pytest.raises(ValueError, match="head must be an int >= 0"):
        share_on_a(model, batch, head=-1)


def test_plot_item_attention_names_the_question_and_the_verdict():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    batch = TASK.sample(4, seed=2)
    a, b = batch.query_keys[1].tolist()
    ax = plot_item_attention(_FixedAnswers(TASK, lambda bt: bt.target), batch, index=1)
    assert f"asked a = {a}, b = {b}" in ax.get_title() and "(right)" in ax.get_title()
    V = TASK.num_symbols
    wrong = _FixedAnswers(TASK, lambda bt: (bt.target + 1) % (V * V))
    assert "(WRONG)" in plot_item_attention(wrong, batch, index=1).get_title()
    with pytest.raises(IndexError, match=r"index must be an int in 0\.\.3, got 4"):
        plot_item_attention(wrong, batch, index=4)
    plt.close("all")


def test_lesson01_checks_catch_the_usual_slips():
    """Slips the cases were designed to expose: they must not pass."""
    from course_utils.exercises import lesson01

    assert not lesson01.check_attend(lambda s, v: torch.softmax(torch.relu(s), -1) @ v)
    assert not lesson01.check_attend(lambda s, v: torch.softmax(s.abs(), -1) @ v)
    transposed = lesson01.check_attend(lambda s, v: v.T @ torch.softmax(s, -1).T)
    assert "wrong shape" in transposed.message
    bool_mean = lesson01.check_relation_accuracy(
        lambda lg, t, V: torch.stack([(lg.argmax(-1) // V == t // V).mean()] * 2))
    assert not bool_mean and ".float()" in bool_mean.hint


def test_on_eval_sees_every_evaluation_and_weight_on_keys():
    seen = []
    config = RelationsConfig(steps=6, eval_every=3, batch_size=8, eval_size=16)
    result = compare_heads(TASK, heads=(2,), seeds=(0,), config=config,
                           on_eval=lambda h, s, step, model: seen.append((h, s, step)))[0]
    assert seen == [(2, 0, 0), (2, 0, 3), (2, 0, 6)] and result.steps == (0, 3, 6)
    batch = TASK.sample(64, seed=4)
    on_keys = weight_on_keys(result.model, batch)
    assert on_keys.shape == (2, 2) and ((on_keys >= 0) & (on_keys <= 1)).all()
    table = attention_by_copies(result.model, batch, digits=12)
    # the per-cell table weights cells by their size; recompute the plain mean from it
    copies_a, copies_b = (batch.relation == 0).sum(1), (batch.relation == 1).sum(1)
    sizes = pd.Series({(int(a), int(b)): int((copies_a.eq(a) & copies_b.eq(b)).sum())
                       for a, b in table.index})
    mean_a0 = (table["head 0 on a"] * sizes.values).sum() / sizes.sum()
    assert mean_a0 == pytest.approx(on_keys[0, 0].item(), abs=1e-6)
    with pytest.raises(TypeError, match="on_eval must be callable"):
        train_lookup(TASK, 1, 0, config, on_eval=3)


def test_the_old_name_is_the_same_class():
    from course_utils.tasks import two_relations

    assert two_relations.TrainConfig is RelationsConfig


def test_the_progress_bar_counts_runs_and_changes_no_result(capsys):
    """compare_heads(progress=True) trains in rounds of `workers` runs under one bar of runs; the
    runs are the ones the plain call gives, number for number, in the same order."""
    tiny = RelationsConfig(steps=20, eval_every=10, eval_size=256)
    plain = compare_heads(TASK, heads=(1, 2), seeds=(0, 1), config=tiny, workers=2)
    shown = compare_heads(TASK, heads=(1, 2), seeds=(0, 1), config=tiny, workers=2, progress=True)
    def runs(results):
        return [(r.num_heads, r.seed, r.accuracy) for r in results]

    assert runs(shown) == runs(plain)
    err = capsys.readouterr().err
    assert "training 4 runs" in err and "4/4" in err
    with pytest.raises(TypeError, match="progress must be True or False"):
        compare_heads(TASK, heads=(1,), seeds=(0,), config=tiny, progress="yes")
