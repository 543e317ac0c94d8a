"""Battery 23 (issue 38), fix53x: check_clock_advanced's seconds, evaluate_*'s seed before the
cache. (path_patched_logits's outputs of other tokens, S2: fix54.)"""
from __future__ import annotations

import pytest
import torch
from bad_input_cases import raises_naming

from course_utils.bench.timing import check_clock_advanced
from course_utils.model.train import AGREEMENT_TASK, evaluate_agreement, evaluate_induction
from course_utils.model.transformer import ModelConfig, TinyTransformer
from course_utils.tasks.synthetic import InductionTask


@pytest.mark.parametrize("seconds, error, shown", [
    (None, TypeError, "None"),
    ("ab", TypeError, "'ab'"),
    (["x", "x"], TypeError, "'x'"),
    ([[0.1], -1], TypeError, "-1"),
    ([float("nan")], TypeError, "nan"),
    ([[0.1, float("nan")]], ValueError, "nan"),
    ([["x"]], TypeError, "'x'"),
])
def test_check_clock_advanced_refuses_seconds_not_groups_of_numbers(seconds, error, shown):
    raises_naming(error, ["seconds", shown], lambda: check_clock_advanced(seconds, "samples"))


def test_check_clock_advanced_still_takes_dict_values_and_refuses_all_zero():
    check_clock_advanced({"a": [0.0, 0.1], "b": [0.2]}.values(), "samples")
    raises_naming(ValueError, ["clock"], lambda: check_clock_advanced([[0.0], [0, 0.0]], "samples"))


def _induction_case():
    task = InductionTask(vocab_size=16, seq_len=8, train_periods=(2, 3), heldout_periods=(4,))
    torch.manual_seed(0)
    model = TinyTransformer(ModelConfig(vocab_size=16, max_len=8, d_model=8, num_heads=2, num_layers=1))
    return lambda seed: evaluate_induction(model, task, batch_size=4, seed=seed)


def _agreement_case():
    torch.manual_seed(0)
    model = TinyTransformer(ModelConfig(vocab_size=AGREEMENT_TASK.vocab_size, max_len=AGREEMENT_TASK.max_len,
                                        d_model=8, num_heads=2, num_layers=1))
    return lambda seed: evaluate_agreement(model, batch_size=4, seed=seed)


@pytest.mark.parametrize("case", [_induction_case, _agreement_case])
def test_evaluate_refuses_bool_seed_even_once_its_int_twin_is_cached(case):
    evaluate = case()
    evaluate(1)  # caches seed 1, whose lru_cache key equals True's
    raises_naming(TypeError, ["seed", "bool", "True"], lambda: evaluate(True))
