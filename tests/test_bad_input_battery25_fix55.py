"""Battery 25, fix pass 55: each bad input it found refused by name (or documented)."""
from __future__ import annotations

import pytest
import torch

from tests.bad_input_cases import raises_naming, tiny_model


# -- a head listed twice was switched off, patched or counted once, without a word ------------------------
def _twice_cases():
    from course_utils.interp import ablation as A
    from course_utils.interp import patching as P

    model = tiny_model()
    tokens = torch.randint(0, 16, (2, 8), generator=torch.Generator().manual_seed(0))
    outputs = A.head_outputs(model, tokens)  # (L, B, h, T, dk)
    evaluation = A.loss_evaluation(tokens, tokens)
    lengths = torch.full((2,), 8)
    twice, other, x = [(0, 1), (0, 1)], [(1, 0)], "L0H1 (0, 1)"
    return [
        ("gates_without", lambda: A.gates_without(model, twice), "heads", x),
        ("ablated_logits", lambda: A.ablated_logits(model, tokens, twice), "heads", x),
        ("measure", lambda: A.measure(model, evaluation, twice), "heads", x),
        ("ablation_table", lambda: A.ablation_table(model, evaluation, {"pair": twice}), "cases['pair']", x),
        ("pruning_curve", lambda: A.pruning_curve(model, evaluation, twice), "order", x),
        ("patched_logits", lambda: P.patched_logits(model, tokens, outputs, twice), "heads", x),
        ("position_ablated_logits",
         lambda: P.position_ablated_logits(model, tokens, twice, torch.ones(8, dtype=torch.bool)),
         "heads", x),
        ("path_patched_logits senders", lambda: P.path_patched_logits(model, tokens, outputs, twice, other),
         "senders", x),
        ("path_patched_logits receivers",
         lambda: P.path_patched_logits(model, tokens, outputs, [(0, 0)], [(1, 1), (1, 1)]), "receivers",
         "L1H1 (1, 1)"),
        ("resampled_logits", lambda: P.resampled_logits(model, tokens, lengths, tokens, lengths, twice,
                                                        generator=torch.Generator().manual_seed(0)),
         "heads", x),
        ("measure_zeroed_sets", lambda: P.measure_zeroed_sets(model, evaluation, [other, twice]),
         "head_sets[1]", x),
    ]


@pytest.mark.parametrize("index", range(11))
def test_a_head_listed_twice_is_refused_by_name(index: int) -> None:
    """One rule (ablation._check_heads) for every list of heads: each head at most once."""
    _, call, name, head = _twice_cases()[index]
    raises_naming(ValueError, [name, "lists a head twice", head], call)


# -- tasks: a batch longer than the mixture, and a memory refusal that named only n ----------------------
def test_a_mixture_refuses_an_agreement_batch_longer_than_its_sequences() -> None:
    import dataclasses

    from course_utils.tasks.synthetic import AgreementTask, MixtureTask

    mixture, batch = MixtureTask(), AgreementTask().sample(4, torch.Generator().manual_seed(0))
    extra = torch.zeros(4, mixture.seq_len, dtype=torch.long)  # a batch padded wider than the mixture
    longer = dataclasses.replace(batch, tokens=torch.cat([batch.tokens, extra], dim=1))
    raises_naming(ValueError, ["batch", f"seq_len={mixture.seq_len}", f"got {longer.tokens.shape[1]}"],
                  lambda: mixture.pad(longer))
    assert mixture.pad(batch).tokens.shape[1] == mixture.seq_len


def test_two_key_sampling_names_num_keys_when_it_would_not_fit() -> None:
    from course_utils.tasks.two_relations import TwoKeyTask

    raises_naming(ValueError, ["n asks for", "num_keys=1,000,000,000,000"],
                  lambda: TwoKeyTask(num_keys=10**12).sample(2, seed=0))


# -- a check put back neither the warnings filters, torch's thread count nor sys.stdout/stderr -------------
def _right_softmax_that(change):
    import numpy as np

    def softmax_rows(scores):
        change()
        e = np.exp(scores - scores.max(axis=-1, keepdims=True))
        return e / e.sum(axis=-1, keepdims=True)
    return softmax_rows


def test_check_puts_back_the_warnings_filters_without_a_word() -> None:
    import warnings

    from course_utils.exercises import lesson02

    with warnings.catch_warnings():
        before = list(warnings.filters)
        feedback = lesson02.check_softmax_rows(_right_softmax_that(lambda: warnings.simplefilter("error")))
        assert warnings.filters == before
    assert feedback.passed, feedback  # an import inside an answer may set filters: no blame


def test_check_puts_back_torchs_thread_count_and_names_it() -> None:
    from course_utils.exercises import lesson02

    before = torch.get_num_threads()
    try:
        feedback = lesson02.check_softmax_rows(_right_softmax_that(lambda: torch.set_num_threads(before + 3)))
        after = torch.get_num_threads()
    finally:
        torch.set_num_threads(before)
    assert after == before
    assert not feedback.passed and f"thread count from {before} to {before + 3}" in feedback.message, feedback


def test_check_puts_back_sys_stdout_and_names_it() -> None:
    import io
    import sys

    from course_utils.exercises import lesson02

    before = sys.stdout, sys.stderr

    def replace() -> None:
        sys.stdout = io.StringIO()

    try:
        feedback = lesson02.check_softmax_rows(_right_softmax_that(replace))
        after = sys.stdout, sys.stderr
    finally:
        sys.stdout, sys.stderr = before
    assert after == before
    assert not feedback.passed and "replaced sys.stdout" in feedback.message, feedback


def test_check_prints_no_warning_of_its_own_for_a_list_of_arrays(recwarn) -> None:
    import numpy as np

    from course_utils.exercises import lesson02

    feedback = lesson02.check_softmax_rows(lambda scores: [np.zeros_like(scores), np.ones_like(scores)])
    assert not feedback.passed
    assert not [w for w in recwarn if "extremely slow" in str(w.message)], recwarn.list


# -- a Feedback's fields set after it was made were not checked --------------------------------------------
@pytest.mark.parametrize(("field", "value", "error", "words"), [
    ("status", "bogus", ValueError, ["Feedback.status", "'correct'", "'bogus'"]),
    ("stopped", 1, TypeError, ["Feedback.stopped", "True or False", "int 1"]),
    ("message", None, TypeError, ["Feedback.message", "str", "None"]),
])
def test_a_feedback_field_set_later_is_checked_and_kept(field, value, error, words) -> None:
    from course_utils.exercises.core import Feedback

    feedback = Feedback("Exercise 9.9", "wrong", "the values differ.")
    feedback.message += " More."  # what the diagnoses do: still allowed
    raises_naming(error, words, lambda: setattr(feedback, field, value))
    kept = (feedback.status, feedback.stopped, feedback.message)
    assert kept == ("wrong", False, "the values differ. More.")


def test_check_puts_back_the_interrupt_handler_and_names_it() -> None:
    import signal

    from course_utils.exercises import lesson02

    before = signal.getsignal(signal.SIGINT)
    try:
        feedback = lesson02.check_softmax_rows(
            _right_softmax_that(lambda: signal.signal(signal.SIGINT, signal.SIG_IGN)))
        after = signal.getsignal(signal.SIGINT)
    finally:
        signal.signal(signal.SIGINT, before)
    assert after is before
    assert not feedback.passed and "SIGINT or SIGTERM" in feedback.message, feedback
