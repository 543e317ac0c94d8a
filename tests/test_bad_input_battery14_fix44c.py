"""Battery 14's findings in the library functions (issue 38, helper fix44c): each bad call now
raises with the argument's name, what was expected and what arrived, or does what its docstring
says; the valid call beside it still works."""

from __future__ import annotations

import pytest
import torch
from bad_input_cases import Case, assert_named

from course_utils.attention import validation as V
from course_utils.bench import timing as TM


def _timings(names=("a", "b")):
    return [TM.Timing(n, 1e-3 * (i + 1), float(i + 1), [1e-3 * (i + 1)] * 3) for i, n in enumerate(names)]


# -- validation's own checks look at their arguments before computing a message from them -------
HEADS = torch.zeros(2, 2, 6, 4)
MASK = torch.ones(3, 3, dtype=torch.bool)
VALIDATION_CASES = [
    Case("check_heads_to_merge/d_k str", lambda: V.check_heads_to_merge(HEADS, 2, "3"), TypeError,
         ["d_k", "int", "str '3'"]),
    Case("check_heads_to_merge/num_heads str", lambda: V.check_heads_to_merge(HEADS, "3", 4), TypeError,
         ["num_heads", "int", "str '3'"]),
    Case("check_heads_to_merge/d_k list", lambda: V.check_heads_to_merge(HEADS, 2, [2]), TypeError,
         ["d_k", "int", "list [2]"]),
    Case("check_mask_fits/target int", lambda: V.check_mask_fits(MASK, 3, "(Tq, Tk)"),
         TypeError, ["target", "tuple of ints", "int 3"]),
    Case("check_record/not a dataclass", lambda: V.check_record(3), TypeError,
         ["check_record", "dataclass", "int 3"]),
    Case("check_record/a dataclass type", lambda: V.check_record(TM.Timing), TypeError,
         ["check_record", "instance of a dataclass", "type"]),
]


@pytest.mark.parametrize("case", VALIDATION_CASES, ids=lambda c: c.name)
def test_validation_checks_refuse_wrong_arguments_by_name(case):
    assert_named(case)


def test_validation_checks_still_pass_good_arguments():
    V.check_heads_to_merge(HEADS, 2, 4)
    V.check_mask_fits(torch.ones(3, 3, dtype=torch.bool), (1, 2, 3, 3), "(B, h, Tq, Tk)")
    V.check_record(_timings()[0])
