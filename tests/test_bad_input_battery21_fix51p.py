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
