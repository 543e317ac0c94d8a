"""Battery 21 (issue 38), fix pass P: InductionTask keeps its periods as tuples (3) and names the
field of a bad period (4); scaled_dot_product_attention refuses a head width of 0 (5);
AgreementBatch checks its attractor flags against its sentences (10); LookupBatch.take refuses an
empty selection, by the rule of AgreementBatch.take (11); worked-example tables keep read-only
copies of their numbers (12)."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
import torch
from bad_input_cases import raises_naming

from course_utils.attention.gqa import GroupedQueryAttention
from course_utils.attention.mha import MultiHeadAttention, scaled_dot_product_attention
from course_utils.attention.mla import MultiHeadLatentAttention
from course_utils.attention.naive_mha import AttentionHead
from course_utils.interp.patching import flip_subject_number
from course_utils.tasks.synthetic import AgreementTask, InductionTask
from course_utils.tasks.two_relations import TwoKeyTask
from course_utils.tasks.worked_example import Table, load_worked_example


def _agreement():  # 16 sampled sentences of the mixed templates
    return AgreementTask().sample(16, torch.Generator().manual_seed(0))


# -- 3: periods given as a list (range, array) are kept as a tuple of ints ------------------------
@pytest.mark.parametrize("make", [list, np.array, torch.tensor], ids=["list", "array", "tensor"])
def test_induction_task_keeps_periods_as_tuples(make):
    task = InductionTask(train_periods=make([2, 3, 4]), heldout_periods=make([5]))
    assert task.train_periods == (2, 3, 4) and task.heldout_periods == (5,)
    assert all(type(p) is int for p in (*task.train_periods, *task.heldout_periods))
    hash(task)  # a cache key of the evaluation (lru_cache): a list inside made it unhashable
    assert task == InductionTask(train_periods=(2, 3, 4), heldout_periods=(5,))
    assert InductionTask(train_periods=range(2, 5), heldout_periods=range(5, 6)) == task


# -- 4: a bad period names its field and entry -----------------------------------------------------
@pytest.mark.parametrize("field", ["train_periods", "heldout_periods"])
@pytest.mark.parametrize("period, error, words", [
    (-1, ValueError, ["positive int", "-1"]),
    (1, ValueError, ["at least 2", "got 1"]),
    (10**9, ValueError, ["1000000000", "vocab_size=64"]),
    (40, ValueError, ["40", "seq_len=32"]),
    (2.0, TypeError, ["int", "2.0"]),
], ids=["negative", "one", "huge", "too long", "float"])
def test_induction_task_period_errors_name_the_field(field, period, error, words):
    other = {"train_periods": [2, 3], "heldout_periods": [5]}
    other[field] = [period]
    raises_naming(error, [f"InductionTask.{field}[0]", *words], lambda: InductionTask(**other))


def test_induction_sample_period_errors_name_the_entry():
    task = InductionTask()
    raises_naming(ValueError, ["periods[1]", "40", "seq_len=32"],
                  lambda: task.sample(2, torch.Generator().manual_seed(0), periods=(2, 40)))


# -- 5: a head width of 0 is refused by name (0 / sqrt(0) made every weight NaN) ------------------
@pytest.mark.parametrize("shape", [(1, 2, 3, 0), (3, 0)], ids=["4-D", "2-D"])
def test_sdpa_refuses_a_zero_head_width(shape):
    q = torch.randn(shape)
    v = torch.randn(*shape[:-1], 4)
    raises_naming(ValueError, ["q and k", "dk", "0", str(shape)],
                  lambda: scaled_dot_product_attention(q, q.clone(), v))


@pytest.mark.parametrize("make, name", [
    (lambda: MultiHeadAttention(0, 2), "d_model"),
    (lambda: GroupedQueryAttention(0, 2, 1), "d_model"),
    (lambda: MultiHeadLatentAttention(8, 2, 0, 4, 2), "d_head"),
    (lambda: AttentionHead(4, 0), "d_k"),
], ids=["mha", "gqa", "mla", "head"])
def test_attention_layers_refuse_zero_width_heads(make, name):
    raises_naming(ValueError, [name, "got 0"], make)


def test_sdpa_still_takes_a_value_width_of_zero():
    q = torch.randn(1, 3, 2)
    out, _ = scaled_dot_product_attention(q, q, torch.randn(1, 3, 0))
    assert out.shape == (1, 3, 0)


# -- 10: AgreementBatch's attractor flags are checked against its sentences ---------------------
@pytest.mark.parametrize("row", [0, 1, 2, 3])
def test_agreement_batch_refuses_a_wrong_attractor_flag(row):
    batch = _agreement()
    attractor = batch.attractor.clone()
    attractor[row] = ~attractor[row]
    raises_naming(ValueError, ["AgreementBatch.attractor", f"got {bool(attractor[row])}", f"row {row}"],
                  lambda: dataclasses.replace(batch, attractor=attractor))


def test_agreement_batch_attractor_rule_leaves_twins_and_odd_tokens_alone():
    batch = _agreement()
    dataclasses.replace(batch, tokens=flip_subject_number(batch))  # a twin's sentences, facts kept
    dataclasses.replace(batch, tokens=torch.zeros_like(batch.tokens))  # no sentence: not read
    assert AgreementTask().eval_batch(500).attractor.any()  # sampled batches pass


# -- 11: LookupBatch.take refuses an empty selection, as AgreementBatch.take does --------------------
@pytest.mark.parametrize("index", [slice(0, 0), slice(3, 1), [], torch.tensor([], dtype=torch.long),
                                   torch.zeros(4, dtype=torch.bool)],
                         ids=["slice", "reversed slice", "list", "tensor", "mask"])
def test_lookup_batch_take_refuses_an_empty_selection(index):
    batch = TwoKeyTask().sample(4, seed=0)
    raises_naming(ValueError, ["index", "at least one of the 4 examples", "empty selection"],
                  lambda: batch.take(index))


def test_agreement_and_lookup_take_share_the_rule():
    agreement = _agreement().take([0, 1])
    raises_naming(ValueError, ["rows", "at least one of the 2 sentences", "empty selection"],
                  lambda: agreement.take([]))
    batch = TwoKeyTask().sample(4, seed=0)
    assert batch.take(slice(1, 3)).num_examples == 2 and batch.take([3]).num_examples == 1


@pytest.mark.parametrize("index", [slice(0, 4, 0), slice(0.5, 2), slice("a", None)],
                         ids=["zero step", "float bound", "str bound"])
def test_lookup_batch_take_names_a_slice_it_cannot_read(index):
    """Python's own "slice step cannot be zero" named no argument (the battery's re-run)."""
    batch = TwoKeyTask().sample(4, seed=0)
    raises_naming(ValueError, ["index as a slice", repr(index)], lambda: batch.take(index))


def test_lookup_batch_take_reads_a_negative_step_as_python_does():
    batch = TwoKeyTask().sample(4, seed=0)
    assert torch.equal(batch.take(slice(None, None, -1)).item_keys, batch.item_keys.flip(0))


# -- 12: Table (and CheapExpansion) keep read-only copies of their checked numbers -------------
def test_table_values_cannot_be_changed_after_the_check():
    given = np.ones((1, 1))
    table = Table("t", given, ("a",), ("x",))
    given[0, 0] = np.nan  # the caller's array: not the table's
    with pytest.raises(ValueError, match="read-only"):
        table.values[0, 0] = np.nan
    assert np.isfinite(table.frame().to_numpy()).all()


def test_cheap_expansion_arrays_are_read_only():
    cheap = load_worked_example().cheap
    for name in ("head_outputs", "weights", "products"):
        with pytest.raises(ValueError, match="read-only"):
            getattr(cheap, name)[0] = np.nan
