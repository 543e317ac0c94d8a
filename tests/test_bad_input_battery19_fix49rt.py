"""Battery 19 (issue 38), helper Rt: course_utils/tasks/*. Each test of a fix fails before it:
the bad input used to be accepted (an empty batch scored as NaN, a record whose facts contradict
each other, an empty Table); now it is refused, naming the field and the value."""
from __future__ import annotations

import dataclasses

import numpy as np
import pytest
import torch
from bad_input_cases import raises_naming

from course_utils.tasks import synthetic as syn
from course_utils.tasks import two_relations as tr
from course_utils.tasks import worked_example as we

_raises = raises_naming  # call() raises error naming every one of words

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


# -- g18: batch records whose facts contradict each other ----------------------------------------
def _shift_scored(b: syn.InductionBatch) -> dict:
    scored = b.scored.clone()
    scored[1] = False
    return {"scored": scored}


def _break_repeat(b: syn.InductionBatch) -> dict:
    tokens = b.tokens.clone()
    tokens[2, -1] = (tokens[2, -1] % 15) + 1  # another ordinary token
    return {"tokens": tokens}


@pytest.mark.parametrize("change, words", [
    (lambda b: {"scored": torch.zeros_like(b.scored)},
     ["InductionBatch.scored", "period", "got False", "row 0"]),
    (_shift_scored, ["InductionBatch.scored", "got False", "row 1"]),
    (lambda b: {"periods": b.periods + 1}, ["InductionBatch.", "period", "row 0"]),
    (_break_repeat, ["InductionBatch.tokens", "repeat with the row's period", "row 2", "position 7"]),
], ids=["scored none", "scored a row off", "periods off by one", "tokens do not repeat"])
def test_induction_batch_facts_must_agree(change, words):
    batch = _induction()
    _raises(ValueError, words, lambda: dataclasses.replace(batch, **change(batch)))


def _subject(b: syn.AgreementBatch) -> torch.Tensor:
    return b.tokens.gather(1, b.subject_pos[:, None])[:, 0]


_NEXT_LEMMA = {a: b for cycle in (("is", "was", "has"), ("are", "were", "have"))
               for a, b in zip(cycle, cycle[1:] + cycle[:1], strict=True)}


def _other_lemma(b: syn.AgreementBatch) -> dict:
    """wrong_id in the other number, but of another verb (were for is, ...)."""
    wrong = [syn.WORD_TO_ID[_NEXT_LEMMA[syn.AGREEMENT_VOCAB[i]]] for i in b.wrong_id.tolist()]
    return {"wrong_id": torch.tensor(wrong)}


@pytest.mark.parametrize("change, words", [
    (lambda b: {"correct_id": _subject(b)}, ["AgreementBatch.correct_id", "final verb", "row 0"]),
    (lambda b: {"plural": ~b.plural}, ["AgreementBatch.correct_id", "AgreementBatch.plural is", "row 0"]),
    (_other_lemma, ["AgreementBatch.wrong_id", "other number", "row 0"]),
], ids=["correct_id a noun", "plural flipped", "wrong_id another verb"])
def test_agreement_batch_verbs_must_agree_with_plural(change, words):
    batch = _agreement()
    _raises(ValueError, words, lambda: dataclasses.replace(batch, **change(batch)))


def test_agreement_batch_may_carry_a_twins_sentences():
    """Documented, not refused: tokens are not checked against the facts (a twin's sentences)."""
    from course_utils.interp.patching import flip_subject_number

    batch = _agreement()
    twin = flip_subject_number(batch)
    dataclasses.replace(batch, tokens=twin)
    # with the twin's facts, its attractor flags too (checked against tokens since battery 21):
    # one intervening noun, so the twin has an attractor where the sentence has none
    batch = syn.AgreementTask(templates=("simple", "prepositional", "object_relative", "subject_relative")
                              ).sample(8, torch.Generator().manual_seed(0))
    twin_attractor = ~batch.attractor & torch.tensor([name != "simple" for name in batch.template])
    dataclasses.replace(batch, tokens=flip_subject_number(batch), plural=~batch.plural,
                        correct_id=batch.wrong_id, wrong_id=batch.correct_id, attractor=twin_attractor)


def test_mixture_batch_real_must_mark_the_padding():
    batch = _mixture()
    _raises(ValueError, ["MixtureBatch.real", "induction rows", "got False", "row 0, column 0"],
            lambda: dataclasses.replace(batch, real=torch.zeros_like(batch.real)))
    real = batch.real.clone()
    real[batch.num_induction:] = True  # the sentences' padding marked real
    _raises(ValueError, ["MixtureBatch.real", "<pad>", "got True", f"row {batch.num_induction}"],
            lambda: dataclasses.replace(batch, real=real))


def _lookup() -> tr.LookupBatch:
    return tr.TwoKeyTask(num_items=4, num_keys=8, num_symbols=4, max_repeats=2).sample(6, seed=0)


@pytest.mark.parametrize("change", [
    lambda t: (t + 1) % 16,
    lambda t: t + 16,
    lambda t: torch.cat([t[:1], t[1:] + 1]),
], ids=["target + 1", "target + V * V", "all but the first + 1"])
def test_lookup_batch_target_must_be_the_pair_class(change):
    batch = _lookup()
    target = change(batch.target)
    row = int((target != batch.target).nonzero()[0, 0])
    _raises(ValueError, ["LookupBatch.target", "a * V + b", f"got {int(target[row])}"],
            lambda: batch._replace(target=target))


def test_lookup_batch_target_is_checked_with_no_items():
    none = torch.zeros(2, 0, dtype=torch.long)  # T = 0: the symbols are only the answers'
    make = lambda target: tr.LookupBatch(none, none, torch.tensor([[0, 1], [0, 1]]),  # noqa: E731
                                         torch.tensor([[1, 2], [1, 3]]), none, torch.tensor(target))
    assert make([6, 7]).target.tolist() == [6, 7]
    _raises(ValueError, ["LookupBatch.target", "a * V + b", "row 1", "got 7"], lambda: make([7, 7]))


# -- g23: Table of no rows or no columns ---------------------------------------------------------
@pytest.mark.parametrize("shape, rows, cols, words", [
    ((0, 0), (), (), ["Table('t').rows", "at least one row", "()"]),
    ((0, 2), (), ("a", "b"), ["Table('t').rows", "at least one row"]),
    ((2, 0), ("a", "b"), (), ["Table('t').cols", "at least one column"]),
], ids=["0 x 0", "0 x 2", "2 x 0"])
def test_table_refuses_no_rows_or_columns(shape, rows, cols, words):
    _raises(ValueError, words, lambda: we.Table("t", np.ones(shape), rows, cols))


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
    tr.LookupBatch(*(t[:0] for t in tr.TwoKeyTask(num_symbols=2).sample(32, seed=0)))  # an empty one is valid
    assert we.Table("t", np.ones((1, 1)), ("a",), ("b",)).shape == (1, 1)
