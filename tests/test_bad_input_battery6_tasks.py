"""Battery 6 (tasks): bad input that used to pass without a word or failed naming nothing."""
from __future__ import annotations

import pytest
import torch

from course_utils.tasks.synthetic import InductionTask


@pytest.mark.parametrize("field", ["train_periods", "heldout_periods"])
def test_induction_task_refuses_period_one(field):
    periods = {"train_periods": (1, 2), "heldout_periods": (1,)}
    with pytest.raises(ValueError, match="every period must be at least 2.*got 1"):
        InductionTask(**{field: periods[field]})
    assert InductionTask(train_periods=(2, 3), heldout_periods=(5,)).train_periods == (2, 3)


def test_induction_sample_refuses_period_one():
    with pytest.raises(ValueError, match="every period must be at least 2.*got 1"):
        InductionTask().sample(2, torch.Generator().manual_seed(0), periods=(1,))
