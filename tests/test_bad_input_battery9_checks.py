"""Battery 9's findings on the exercise checks (issue 38, rows 3, 4, 4b, 9, 10, 14, 15): an
answer (or a cell, or a leftover thread) that tampers with what a check reads is named, the
check puts back what it changed, and the next check grades a right answer as right."""

from __future__ import annotations

import torch

from course_utils.exercises import lesson05


def _previous_token(pattern):
    return pattern.diagonal(offset=-1, dim1=-2, dim2=-1).mean(dim=-1)


# -- row 3: an answer that clears an exercise's own attributes -----------------------------------

def test_an_answer_that_clears_the_exercise_is_named_and_the_check_keeps_working():
    exercise = lesson05.PREVIOUS_TOKEN_SCORE
    saved = dict(exercise.__dict__)

    def clears(pattern):
        exercise.__dict__.clear()
        return _previous_token(pattern)

    def adds_expected(pattern):  # an attribute the check would read: removed again
        exercise.__dict__["_expected"] = [torch.zeros(1)]
        return _previous_token(pattern)

    try:
        first = lesson05.check_previous_token_score(clears)
        second = lesson05.check_previous_token_score(adds_expected)
        right = lesson05.check_previous_token_score(_previous_token)
    finally:
        exercise.__dict__.update(saved)
    assert not first.passed and first.mistake == "tampered_with_check", first
    assert "PREVIOUS_TOKEN_SCORE.title" in first.message
    assert not second.passed and "PREVIOUS_TOKEN_SCORE._expected" in second.message, second
    assert right.passed, right
    assert "_expected" not in exercise.__dict__
