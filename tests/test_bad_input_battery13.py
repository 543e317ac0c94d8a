"""Battery 13's findings (issue 38) and fix38e's leftovers: each bad call now raises with the
argument's (or field's) name, what was expected and what arrived, or does what its docstring
says; the valid call beside it still works."""

from __future__ import annotations

import pytest
from bad_input_cases import Case, assert_named

from course_utils.bench import train_speed as TS
from course_utils.model import train as TRN

# -- the training loop checks progress before it trains (bench_training(progress=1) ran on) ----
TRAIN_CASES = [
    Case("bench_training/progress int", lambda: TS.bench_training(progress=1), TypeError,
         ["progress", "True or False", "int 1"]),
    Case("train_induction/progress str", lambda: TRN.train_induction(steps=1, progress="no"), TypeError,
         ["progress", "True or False", "str 'no'"]),
]


@pytest.mark.parametrize("case", TRAIN_CASES, ids=lambda c: c.name)
def test_training_refuses_a_progress_that_is_no_bool(case):
    assert_named(case)
