"""Battery 18 (issue 38), helper Rt: course_utils/tasks/*. Each test fails before its fix: the
bad input used to pass without a word (or fail inside pandas); now it is refused by name."""
from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from bad_input_cases import raises_naming

from course_utils.tasks import worked_example as we

_raises = raises_naming  # call() raises error naming every one of words

# -- g12 / g20: worked-example rounding helpers -----------------------------------------------
@pytest.mark.parametrize("call, words", [
    (lambda: we.round_half_up(math.nan), ["x", "finite", "nan"]),
    (lambda: we.round_half_up(np.array([1.0, np.inf])), ["x", "finite", "inf", "(1,)"]),
    (lambda: we.article_matmul(np.ones((2, 3)), np.full((3, 2), np.nan)), ["b", "finite", "nan", "(0, 0)"]),
    (lambda: we.article_matmul(np.full((2, 3), -np.inf), np.ones((3, 2))), ["a", "finite", "-inf"]),
], ids=["round nan", "round inf", "matmul b nan", "matmul a -inf"])
def test_rounding_helpers_refuse_non_finite(call, words):
    _raises(ValueError, words, call)


@pytest.mark.parametrize("call", [
    lambda: we.round_half_up(np.array([1.2345]), -1),
    lambda: we.article_matmul(np.ones((2, 3)), np.ones((3, 2)), decimals=-1),
], ids=["round_half_up", "article_matmul"])
def test_rounding_helpers_refuse_negative_decimals(call):
    _raises(ValueError, ["decimals", ">= 0", "-1"], call)


@pytest.mark.parametrize("weights, value", [(np.full((2, 2), 2.0), "2.0"), (-np.ones((2, 2)), "-1.0")])
def test_output_rounding_budget_weights_are_fractions(weights, value):
    _raises(ValueError, ["weights", "[0, 1]", value, "(0, 0)"],
            lambda: we.output_rounding_budget(weights, np.ones((2, 3))))


def test_rounding_helpers_still_take_good_input():
    assert we.round_half_up(0.0105) == pytest.approx(0.011)
    assert we.round_half_up(np.array([1.25]), 0).tolist() == [1.0]
    assert we.output_rounding_budget(np.full((2, 2), 0.5), np.ones((2, 3))).shape == (2, 3)


# -- g19: Table ---------------------------------------------------------------------------------
@pytest.mark.parametrize("name, values, error, words", [
    ("t", np.zeros((2, 3), dtype=bool), TypeError, ["Table('t').values", "float", "bool"]),
    ("t", np.zeros((2, 3), dtype=np.int64), TypeError, ["Table('t').values", "float", "int64"]),
    ("", np.zeros((2, 3)), ValueError, ["Table.name", "non-empty", "''"]),
], ids=["bool values", "int values", "empty name"])
def test_table_refuses_non_float_values_and_empty_name(name, values, error, words):
    _raises(error, words, lambda: we.Table(name, values, ("a", "b"), ("x", "y", "z")))


# -- two_relations: g05, g15, g16, g17, g18 -----------------------------------------------------
@pytest.fixture(scope="module")
def lookup():
    from course_utils.tasks import two_relations as tr

    task = tr.TwoKeyTask()
    torch.manual_seed(0)
    return tr, task, tr.LookupModel(task, 16, 2), task.sample(8, seed=0)


@pytest.mark.parametrize("name", ["attention_by_copies", "weight_on_keys", "accuracy_by_share", "evaluate",
                                  "swap_fraction"])
def test_lookup_measures_refuse_an_empty_batch(lookup, name):
    tr, _, model, batch = lookup
    empty = tr.LookupBatch(*(t[:0] for t in batch))  # take refuses an empty selection
    _raises(ValueError, ["batch", "at least one example", "0 examples", "(0, 8)"],
            lambda: getattr(tr, name)(model, empty))


@pytest.mark.parametrize("field", ["item_keys", "item_symbols", "query_keys", "answer_symbols", "target"])
def test_lookup_batch_refuses_negative_ids(lookup, field):
    tr, _, _, batch = lookup
    fields = batch._asdict()
    fields[field] = fields[field].clone()
    fields[field][1] = -3  # row 1 (all of it for a 2-D field)
    _raises(ValueError, [f"LookupBatch.{field}", ">= 0", "-3", "row 1"], lambda: tr.LookupBatch(**fields))


def test_lookup_batch_answers_follow_the_items(lookup):
    tr, _, _, batch = lookup
    answers = batch.answer_symbols.clone()
    answers[0, 0] = (answers[0, 0] + 1) % 8
    _raises(ValueError, ["LookupBatch.answer_symbols[:, 0]", "row 0", str(int(answers[0, 0]))],
            lambda: batch._replace(answer_symbols=answers))


@pytest.mark.parametrize("make, words", [
    (lambda b: b._replace(item_keys="x"), ["LookupBatch.item_keys", "int64", "str"]),
    (lambda b: b._replace(item_symbols=b.item_symbols[:3]), ["LookupBatch.item_symbols", "(8, 8)", "(3, 8)"]),
    (lambda b: type(b)._make(["x", *b[1:]]), ["LookupBatch.item_keys", "int64", "str"]),
], ids=["_replace str", "_replace 3 rows", "_make str"])
def test_lookup_batch_copies_are_checked(lookup, make, words):
    batch = lookup[3]
    with pytest.raises((TypeError, ValueError)) as info:
        make(batch)
    for word in words:
        assert word in str(info.value), (word, str(info.value))


def test_lookup_batch_copies_still_work(lookup):
    batch = lookup[3]
    assert batch._replace(target=batch.target.clone()).num_examples == 8
    assert type(batch)._make(list(batch)).num_examples == 8


def test_evaluate_refuses_a_batch_of_another_task(lookup):
    tr, _, model, _ = lookup
    other = tr.TwoKeyTask(num_symbols=4).sample(4, seed=0)
    _raises(ValueError, ["batch.target", "V = 8", "not from the model's task"],
            lambda: tr.evaluate(model, other))


@pytest.mark.parametrize("steps, words", [
    ([25, 0], ["RunResult.steps", "strictly increase", "= 25 then", "= 0"]),
    ([0, 0], ["RunResult.steps", "strictly increase", "= 0 then"]),
])
def test_run_result_steps_go_forward(lookup, steps, words):
    tr, _, model, _ = lookup
    _raises(ValueError, words, lambda: tr.RunResult(2, 0, steps, [0.1, 0.5], (0.5, 0.5), model))


def test_run_result_is_frozen_with_tuples(lookup):
    import dataclasses

    tr, _, model, _ = lookup
    run = tr.RunResult(2, 0, [0, 25], [0.1, 0.5], [0.5, 0.5], model)
    assert run.steps == (0, 25) and run.accuracy == (0.1, 0.5) and run.relation_accuracy == (0.5, 0.5)
    with pytest.raises(dataclasses.FrozenInstanceError):
        run.steps = [25, 0]
    with pytest.raises(AttributeError):
        run.accuracy.append(2.0)
    _raises(ValueError, ["RunResult.steps", "strictly increase"],
            lambda: dataclasses.replace(run, steps=[3, 1]))


def test_accuracy_table_refuses_repeated_runs(lookup):
    tr, _, model, _ = lookup
    runs = [tr.RunResult(2, seed, [0, 25], [0.1, 0.5], (0.5, 0.5), model) for seed in (0, 1)]
    for call in (tr.accuracy_table, tr.plot_learning_curves):
        _raises(ValueError, ["results", "distinct", "repeats", "(2, 0)"],
                lambda call=call: call(runs + runs[:1]))


# -- synthetic: g07 (MixtureBatch), g13, g14 and the frozen batch records ----------------------
def test_induction_batch_refuses_a_scored_last_column():
    from course_utils.tasks.synthetic import InductionBatch, InductionTask

    b = InductionTask().eval_batch(4)
    scored = b.scored.clone()
    scored[2, -1] = True
    _raises(ValueError, ["InductionBatch.scored", "last column", "row 2"],
            lambda: InductionBatch(b.tokens, b.periods, scored))
    assert InductionBatch(b.tokens, b.periods, b.scored).scored is b.scored


def test_induction_accuracy_refuses_a_batch_with_nothing_scored():
    from course_utils.tasks.synthetic import InductionBatch, InductionTask, induction_accuracy

    b = InductionTask().sample(4, torch.Generator().manual_seed(0), periods=(5,))
    # cut to T = 7 (BOS + one copy + 1): period 5 fixes no position with a next token, so
    # nothing is scored, and the record (which checks scored against the periods) agrees
    none = InductionBatch(b.tokens[:, :7], b.periods, torch.zeros(4, 7, dtype=torch.bool))
    _raises(ValueError, ["batch", "at least one position", "no scored position", "(4, 7)"],
            lambda: induction_accuracy(torch.randn(4, 7, 64), none))


@pytest.mark.parametrize("names, bad", [(["nope"] * 8, "'nope'"), (["simple"] * 7 + [""], "''")])
def test_agreement_batch_templates_are_templates(names, bad):
    import dataclasses

    from course_utils.tasks.synthetic import AgreementTask

    batch = AgreementTask().eval_batch(8)
    _raises(ValueError, ["AgreementBatch.template", "TEMPLATES", bad],
            lambda: dataclasses.replace(batch, template=names))


def _batches():
    from course_utils.tasks.synthetic import AgreementTask, InductionTask, MixtureTask

    return {"induction": InductionTask().eval_batch(4), "agreement": AgreementTask().eval_batch(4),
            "mixture": MixtureTask().sample(8, torch.Generator().manual_seed(0))}


@pytest.mark.parametrize("kind, field, value", [
    ("mixture", "num_induction", 9), ("induction", "scored", None), ("agreement", "template", ["nope"] * 4),
])
def test_batch_records_are_frozen(kind, field, value):
    import dataclasses

    batch = _batches()[kind]
    with pytest.raises(dataclasses.FrozenInstanceError):
        setattr(batch, field, value)


def test_mixture_task_parts_after_a_replace_is_checked():
    import dataclasses

    batch = _batches()["mixture"]
    _raises(ValueError, ["MixtureBatch.num_induction", "9"],
            lambda: dataclasses.replace(batch, num_induction=9).task_parts())
    assert [t.shape[0] for t, _ in batch.task_parts()] == [4, 4]


def test_agreement_template_is_a_tuple():
    batch = _batches()["agreement"]
    assert isinstance(batch.template, tuple) and len(batch.template) == 4
    assert batch.take([0, 2]).template == (batch.template[0], batch.template[2])


def test_evaluate_induction_with_a_batch_that_misses_a_period():
    # a small batch can hold no sequence of some held-out period: that entry is NaN, not an error
    import math

    from course_utils.model.train import evaluate_induction, induction_model_config
    from course_utils.model.transformer import TinyTransformer

    torch.manual_seed(0)
    result = evaluate_induction(TinyTransformer(induction_model_config()), batch_size=1)
    periods = [k for k in result if k.startswith("period_")]
    assert len(periods) == 3 and any(math.isnan(result[k]) for k in periods)
    assert 0 <= result["heldout"] <= 1
