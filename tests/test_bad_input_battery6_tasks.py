"""Battery 6 (tasks): bad input that used to pass without a word or failed naming nothing."""
from __future__ import annotations

import pytest
import torch

from course_utils.tasks.synthetic import AgreementTask, InductionTask, MixtureTask, induction_accuracy
from course_utils.tasks.two_relations import (
    LookupBatch,
    LookupModel,
    TwoKeyTask,
    pair_class,
    swap_chance,
    swap_fraction,
)
from course_utils.tasks.worked_example import compute_steps, load_worked_example, side_by_side


@pytest.mark.parametrize("field", ["train_periods", "heldout_periods"])
def test_induction_task_refuses_period_one(field):
    periods = {"train_periods": (1, 2), "heldout_periods": (1,)}
    with pytest.raises(ValueError, match="every period must be at least 2.*got 1"):
        InductionTask(**{field: periods[field]})
    assert InductionTask(train_periods=(2, 3), heldout_periods=(5,)).train_periods == (2, 3)


def test_induction_sample_refuses_period_one():
    with pytest.raises(ValueError, match="every period must be at least 2.*got 1"):
        InductionTask().sample(2, torch.Generator().manual_seed(0), periods=(1,))


@pytest.mark.parametrize("heldout", ["y", 1, None])
def test_eval_batch_heldout_must_be_a_bool(heldout):
    with pytest.raises(TypeError, match="heldout"):
        InductionTask().eval_batch(4, heldout=heldout)


def test_induction_accuracy_names_a_batch_of_the_wrong_type():
    with pytest.raises(TypeError, match="batch must be an InductionBatch.*got int"):
        induction_accuracy(torch.randn(4, 32, 64), 5)


def test_agreement_task_refuses_a_repeated_template():
    with pytest.raises(ValueError, match=r"templates must list each template once.*repeats \['simple'\]"):
        AgreementTask(templates=("simple", "simple"))


def test_mixture_task_refuses_sentences_longer_than_the_induction_sequences():
    with pytest.raises(ValueError, match="agreement.max_len must be at most induction.seq_len=32.*got 40"):
        MixtureTask(agreement=AgreementTask(max_len=40))
    batch = MixtureTask(agreement=AgreementTask(max_len=32)).sample(4, torch.Generator().manual_seed(0))
    assert batch.tokens.shape == (4, 32)


def test_pair_class_names_mismatched_shapes():
    with pytest.raises(ValueError, match=r"symbol_a and symbol_b must have the same shape.*"
                       r"\(2,\) and \(3,\)"):
        pair_class(torch.tensor([1, 2]), torch.tensor([0, 1, 2]), 8)
    assert pair_class(torch.tensor([1, 2]), torch.tensor([0, 3]), 8).tolist() == [8, 19]


@pytest.mark.parametrize("measure", [swap_fraction, swap_chance])
def test_swap_measures_refuse_an_empty_batch(measure):
    task = TwoKeyTask()
    model = LookupModel(task, 16, 2)
    empty = LookupBatch(*(t[:0] for t in task.sample(4, seed=0)))  # take refuses an empty selection
    with pytest.raises(ValueError, match="batch must hold at least one example.*0 examples"):
        measure(model, empty)


def test_worked_example_tables_refuse_negative_decimals():
    example = load_worked_example()
    step = sorted(compute_steps(example))[0]
    with pytest.raises(ValueError, match="decimals must be None or an int >= 0.*got -1"):
        example.x.frame(decimals=-1)
    with pytest.raises(ValueError, match="decimals must be None or an int >= 0.*got -1"):
        side_by_side(example, step, decimals=-1)
    with pytest.raises(TypeError, match="decimals must be an int, got bool"):
        example.x.frame(decimals=True)
    assert example.x.frame(decimals=0).shape == example.x.values.shape
