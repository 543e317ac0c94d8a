"""Battery 19 (issue 38), helper Rt: course_utils/tasks/*. Each test of a fix fails before it:
the bad input used to be accepted (an empty batch scored as NaN, a record whose facts contradict
each other, an empty Table); now it is refused, naming the field and the value."""
from __future__ import annotations

import dataclasses

import numpy as np
import pytest
import torch

from course_utils.tasks import synthetic as syn
from course_utils.tasks import two_relations as tr
from course_utils.tasks import worked_example as we


def _raises(error: type[Exception], words: list[str], call) -> None:
    """``call()`` raises ``error`` whose message holds every one of ``words``."""
    with pytest.raises(error) as info:
        call()
    message = str(info.value)
    for word in words:
        assert word in message, (word, message)


def _induction() -> syn.InductionBatch:
    task = syn.InductionTask(vocab_size=16, seq_len=8, train_periods=(2, 3), heldout_periods=(4,))
    return task.sample(4, torch.Generator().manual_seed(0))


def _agreement() -> syn.AgreementBatch:
    return syn.AgreementTask().sample(4, torch.Generator().manual_seed(0))


def _mixture() -> syn.MixtureBatch:
    return syn.MixtureTask().sample(4, torch.Generator().manual_seed(0))


# -- g19: empty batches (B = 0) -----------------------------------------------------------------
@pytest.mark.parametrize("make, words", [
    (lambda: dataclasses.replace(b := _induction(), tokens=b.tokens[:0], periods=b.periods[:0],
                                 scored=b.scored[:0]),
     ["InductionBatch.tokens", "at least one", "(0, 8)"]),
    (lambda: syn.AgreementBatch(*(getattr(_agreement(), f.name)[:0]
                                  for f in dataclasses.fields(syn.AgreementBatch) if f.name != "template")),
     ["AgreementBatch.tokens", "at least one", "(0, "]),
    (lambda: dataclasses.replace(b := _mixture(), tokens=b.tokens[:0], targets=b.targets[:0], real=b.real[:0],
                                 num_induction=0),
     ["MixtureBatch.tokens", "at least one", "(0, 32)"]),
    (lambda: _agreement().take(torch.zeros(0, dtype=torch.long)),
     ["rows", "at least one", "4 sentences", "empty"]),
    (lambda: _agreement().take(torch.zeros(4, dtype=torch.bool)),
     ["rows", "at least one", "4 sentences", "empty"]),
    (lambda: _agreement().take([]), ["rows", "at least one", "empty"]),
], ids=["induction", "agreement", "mixture", "take index", "take mask", "take list"])
def test_batch_records_refuse_an_empty_batch(make, words):
    _raises(ValueError, words, make)


# -- good input still passes ---------------------------------------------------------------------
def test_the_batches_the_tasks_make_still_pass():
    generator = torch.Generator().manual_seed(3)
    syn.InductionTask().sample(64, generator)
    syn.InductionTask().eval_batch(64)
    agreement = syn.AgreementTask().sample(64, generator)
    syn.AgreementTask(attractor_p=0.0, opener_p=1.0).sample(64, generator)
    cut = dataclasses.replace(agreement, tokens=agreement.tokens[:, : int(agreement.predict_pos.max()) + 1])
    assert len(cut.take(agreement.attractor)) == int(agreement.attractor.sum())
    syn.MixtureTask().sample(64, generator)
    syn.MixtureTask().agreement_eval(64)
    for seed in range(3):
        tr.TwoKeyTask().sample(32, seed=seed)
    tr.TwoKeyTask(num_symbols=2).sample(32, seed=0).take(slice(0, 0))  # an empty lookup batch stays valid
    assert we.Table("t", np.ones((1, 1)), ("a",), ("b",)).shape == (1, 1)
