"""Battery 19 (b19b) fixes in course_utils/exercises: G2 run_with_your_attention and a Tensor
subclass, G3 causal_attention_with on a meta / non-finite x, G4 check_score_macs on an int beyond
float's range, G1 an answer's thread left running during the in-kernel check."""

import pytest

from course_utils.exercises import lesson03


# --- G4 ------------------------------------------------------------------------------
@pytest.mark.parametrize("huge", [10**400, -(10**400)], ids=["huge", "minus_huge"])
def test_score_macs_names_an_int_beyond_float_range(huge):
    feedback = lesson03.check_score_macs(lambda T, d, h: huge)
    assert not feedback.passed
    text = str(feedback)
    assert "OverflowError" not in text
    assert "expected int" in text and f"got int {str(huge)[:20]}" in text
