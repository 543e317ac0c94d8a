"""Checks 5.x-7.x: the slips learner trial l6 got a generic (or no) message for, written the way a
learner writes them, are named, and right answers written several ways still pass."""

import pytest
import torch

from course_utils.exercises import autograde, lesson05


# -- 5.1 / 5.2: an edited pattern, one diagonal --------------------------------------------------
def _previous_right(pattern):
    return pattern.diagonal(offset=-1, dim1=-2, dim2=-1).mean(-1)


def _previous_by_loop(pattern):
    T = pattern.shape[-1]
    i = torch.arange(1, T)
    return pattern[:, i, i - 1].sum(-1) / (T - 1)


def _previous_zeroes_its_input(pattern):
    below = pattern.diagonal(-1, -2, -1)  # a view of pattern
    pattern.zero_()
    return below.mean(-1)


def _previous_halves_its_input(pattern):
    pattern /= 2  # in place
    return pattern.diagonal(-1, -2, -1).mean(-1)


@pytest.mark.parametrize("answer", [_previous_zeroes_its_input, _previous_halves_its_input])
def test_5_1_a_wrong_score_that_edited_the_pattern_is_named(answer):
    fb = lesson05.check_previous_token_score(answer)
    assert not fb.passed and fb.mistake == "edited_pattern_in_place", fb
    assert "changed `pattern`" in fb.message and "clone()" in fb.hint


def test_5_1_a_wrong_score_that_leaves_the_pattern_alone_stays_unnamed():
    fb = lesson05.check_previous_token_score(lambda p: p.diagonal(-1, -2, -1).mean(-1) / 2)
    assert fb.status == "wrong" and fb.mistake is None, fb


@pytest.mark.parametrize("answer", [_previous_right, _previous_by_loop])
def test_5_1_right_answers_pass(answer):
    assert lesson05.check_previous_token_score(answer).passed


def test_5_1_the_grader_names_the_edited_pattern_too():
    code = ("def previous_token_score(pattern):\n"
            "    below = pattern.diagonal(offset=-1, dim1=-2, dim2=-1)\n"
            "    pattern.zero_()\n"
            "    return below.mean(-1)\n")
    fb = autograde.grade_answer("lesson05", "check_previous_token_score", code, "previous_token_score",
                                salt=None, solutions_dir=None, sandboxed=False)
    assert not fb.passed and fb.mistake == "edited_pattern_in_place", fb


def _induction_right(pattern, period):
    T = pattern.shape[-1]
    per_query = [pattern[:, q, torch.arange(q - period + 1, 1, -period)].sum(-1)
                 for q in range(period + 1, T)]
    return torch.stack(per_query, -1).mean(-1)


def _induction_by_mask(pattern, period):
    T = pattern.shape[-1]
    q, k = torch.arange(T)[:, None], torch.arange(T)[None, :]
    keys = ((q - k + 1) % period == 0) & (k >= 2) & (k <= q - period + 1)
    return (pattern * keys).sum(-1)[:, period + 1:].mean(-1)


def _induction_stripe_by_index(pattern, period):
    T = pattern.shape[-1]  # the stripe one period back, read along the whole diagonal
    return torch.stack([pattern[:, q, q - period + 1] for q in range(period - 1, T)], dim=-1).mean(-1)


def _induction_duplicate_diagonal(pattern, period):
    return torch.diagonal(pattern, -period, 1, 2).mean(-1)


@pytest.mark.parametrize("answer", [_induction_stripe_by_index, _induction_duplicate_diagonal])
def test_5_2_one_diagonal_of_the_pattern_is_named_at_any_offset(answer):
    fb = lesson05.check_induction_score(answer)
    assert not fb.passed and fb.mistake == "single_diagonal", fb


def test_5_2_a_wrong_score_that_edited_the_pattern_is_named():
    def clamps_its_input(pattern, period):
        pattern.clamp_(max=0.5)
        return _induction_right(pattern, period)

    fb = lesson05.check_induction_score(clamps_its_input)
    assert not fb.passed and fb.mistake == "edited_pattern_in_place", fb


@pytest.mark.parametrize("answer", [_induction_right, _induction_by_mask])
def test_5_2_right_answers_pass(answer):
    assert lesson05.check_induction_score(answer).passed
