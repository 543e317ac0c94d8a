"""Battery 19 (issue 38), fix pass P: row selections mixing bools and ints (g26)."""

from __future__ import annotations

import pytest
import torch

from course_utils.attention.validation import check_rows
from course_utils.tasks.synthetic import AgreementTask
from course_utils.tasks.two_relations import TwoKeyTask


# -- g26: a list mixing bools and ints is neither a mask nor indices -----------------------------
@pytest.mark.parametrize("rows", [[True, 0], (0, False), [1, 2, True, 3]], ids=["list", "tuple", "late bool"])
def test_check_rows_refuses_bools_mixed_with_ints(rows):
    with pytest.raises(TypeError) as info:
        check_rows(rows, "rows", 4)
    message = str(info.value)
    assert "rows[" in message and "mix" in message and "bool" in message


def _agreement_batch():
    return AgreementTask().sample(4, torch.Generator().manual_seed(0))


def _lookup_batch():
    return TwoKeyTask(num_items=4, num_keys=8, num_symbols=4, max_repeats=2).sample(6, seed=0)


@pytest.mark.parametrize("make, name, size", [(_agreement_batch, "rows", 4), (_lookup_batch, "index", 6)],
                         ids=["AgreementBatch", "LookupBatch"])
def test_batch_take_refuses_a_mixed_selection(make, name, size):
    batch = make()
    with pytest.raises(TypeError, match=rf"{name}\[1\] is int 0"):
        batch.take([True, 0])
    batch.take([1, 0])  # indices alone, and a full mask, still select
    batch.take([True, False] * (size // 2))
