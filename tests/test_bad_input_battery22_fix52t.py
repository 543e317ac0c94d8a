"""Battery 22 (b22b), the exercises' fixes: an exercise's fields set by a cell before its check
(G1), a time limit's stop that escapes late (G7), and the answer store's unstorable values and
malformed records (G4)."""

from __future__ import annotations

import pytest

from course_utils.exercises import all_exercises

EXERCISES = sorted(all_exercises())


def _write_field(exercise: object, how: str, field: str, value: object) -> None:
    if how == "attribute":
        object.__setattr__(exercise, field, value)
    else:
        exercise.__dict__[field] = value


# -- G1: a cell run before the check sets the exercise's rtol/atol ---------------------------------
@pytest.mark.parametrize("how", ["attribute", "dict"])
@pytest.mark.parametrize("name", EXERCISES)
def test_tolerances_set_before_the_check_are_put_back_and_named(name, how):
    exercise = all_exercises()[name]
    built = (exercise.rtol, exercise.atol)
    wrong = exercise.mistakes[0].implementation  # a known slip: right only under huge tolerances
    try:
        _write_field(exercise, how, "rtol", 1e9)
        _write_field(exercise, how, "atol", 1e9)
        feedback = exercise.check(wrong)
        assert not feedback.passed, feedback.message
        assert f"{name}.rtol" in feedback.message and f"{name}.atol" in feedback.message, feedback.message
        assert "put back" in feedback.message
        assert (exercise.rtol, exercise.atol) == built
    finally:
        exercise.__dict__["rtol"], exercise.__dict__["atol"] = built


@pytest.mark.parametrize("field", ["hint", "title", "mistakes", "forbidden"])
def test_other_fields_set_before_the_check_are_put_back(field):
    from course_utils.exercises import lesson02

    exercise = lesson02.SOFTMAX_ROWS
    built = exercise.__dict__[field]
    try:
        exercise.__dict__[field] = "x" if isinstance(built, str) else []
        feedback = exercise.check(lambda scores: scores)
        assert not feedback.passed
        assert f"lesson02.SOFTMAX_ROWS.{field}" in feedback.message, feedback.message
        assert exercise.__dict__[field] is built
    finally:
        exercise.__dict__[field] = built


def test_fields_set_on_purpose_are_left_as_set(monkeypatch):
    """make_cases (the grader's and the tests' cases) and reference (solutions.attach) stay."""
    from course_utils.exercises import lesson03

    exercise = lesson03.SCORE_MACS
    cases = exercise.make_cases
    monkeypatch.setattr(exercise, "make_cases", lambda: cases()[:-1])
    feedback = exercise.check(lambda *args: 0)
    assert exercise.make_cases is not cases
    assert "make_cases" not in feedback.message and "reference" not in feedback.message



@pytest.mark.parametrize("key", ["_expected", "_cases"])
@pytest.mark.parametrize("name", ["lesson01.ATTEND", "lesson02.SOFTMAX_ROWS", "lesson03.SCORE_MACS"])
def test_grader_outputs_a_cell_adds_before_the_check_are_removed_and_named(name, key):
    """A cell that gives the exercise the outside grader's attributes (outputs made to match a
    wrong answer) is not graded by them: removed before the check, and named."""
    exercise = all_exercises()[name]
    wrong = exercise.mistakes[0].implementation
    cases = exercise.cases()
    exercise.__dict__["_expected"] = [wrong(*c.args, **c.kwargs) for c in cases]
    if key == "_cases":
        exercise.__dict__.pop("_expected")
        exercise.__dict__["_cases"] = cases[:1]
    try:
        feedback = exercise.check(wrong)
        assert not feedback.passed, feedback.message
        assert f"{name}.{key}" in feedback.message, feedback.message
        assert key not in exercise.__dict__
    finally:
        exercise.__dict__.pop(key, None)


# -- G7: a time limit's stop must never escape from a check ----------------------------------------
def test_an_ended_time_limit_clears_its_trace_functions_and_raises_nothing():
    import signal
    import sys

    from course_utils.exercises.core import TimeLimitExceeded, _Deadline

    def answer():  # a generator: its frame outlives the call that ran it
        while True:
            yield 1

    running = answer()
    next(running)
    trace = sys.gettrace()
    deadline = _Deadline()
    with deadline:
        signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGALRM})  # (the repeat alarm waits for exit)
        deadline.rounds = 1  # the first stop was swallowed: the next one traces the answer's frames
        try:  # (no pytest.raises: until exit, every new frame outside core.py is stopped too)
            deadline._expire(signal.SIGALRM, running.gi_frame)
        except TimeLimitExceeded:
            stopped = True
        traced = running.gi_frame.f_trace == deadline._stop_line
    assert stopped and traced
    assert running.gi_frame.f_trace is None
    assert sys.gettrace() is trace
    _Deadline._active = deadline  # even when found active again, an ended limit raises nothing
    try:
        assert deadline._stop_line(running.gi_frame, "line", None) is None
        assert next(running) == 1
    finally:
        _Deadline._active = None


def test_a_stop_that_reaches_the_check_late_is_the_time_limit_message():
    import math

    from course_utils.exercises.core import Case, Exercise, TimeLimitExceeded

    class LateStop:  # what the check returns makes the stop reach the check's own code after it
        passed = False

        @property
        def message(self):
            raise TimeLimitExceeded(3.0)

    class Late(Exercise):
        def check(self, fn):
            return LateStop()

    exercise = Late("Exercise 0.1: late stop", lambda: [Case((1,), {}, "one")])
    tau = math.tau
    math.tau = 6.0  # put back before the check, which then tells so (adding to the message)
    try:
        feedback = exercise.check(lambda x: x)
    finally:
        math.tau = tau
    assert feedback.status == "error" and feedback.stopped
    assert "ran for more than 3 s" in feedback.message


# -- G4: the answer store's unstorable values and malformed records ---------------------------------
def test_encoding_a_meta_tensor_is_unstorable_naming_it():
    import torch

    from course_utils.exercises import answers
    from tests.bad_input_cases import raises_naming

    raises_naming(answers.UnstorableValue, ["meta", "(2, 3)"],
                  lambda: answers.encode(torch.ones(2, 3, device="meta")))
    nested = [1, (torch.ones(1, device="meta"),)]
    raises_naming(answers.UnstorableValue, ["meta"], lambda: answers.encode(nested))


@pytest.mark.parametrize("record, words", [
    ({"__ndarray__": "not a tensor", "dtype": "float64"},
     ["'__ndarray__'", "torch.Tensor", "str 'not a tensor'"]),
    ({"__ndarray__": None, "dtype": "float64"}, ["'__ndarray__'", "torch.Tensor", "NoneType None"]),
    ({"__ndarray__": [1.0], "dtype": 5}, ["'__ndarray__'", "torch.Tensor", "list [1.0]"]),
    ({"__tuple__": 5}, ["'__tuple__'", "a list", "int 5"]),
    ({"__tuple__": "ab"}, ["'__tuple__'", "a list", "str 'ab'"]),
    ({"__tensor__": 3}, ["'__tensor__'", "torch.Tensor", "int 3"]),
])
def test_decoding_a_malformed_record_names_it(record, words):
    from course_utils.exercises import answers
    from tests.bad_input_cases import raises_naming

    raises_naming(ValueError, ["data: a stored", "damaged", *words], lambda: answers.decode(record))


def test_decoding_an_array_record_with_a_bad_dtype_names_it():
    import torch

    from course_utils.exercises import answers
    from tests.bad_input_cases import raises_naming

    record = {"__ndarray__": torch.ones(2), "dtype": 5}
    raises_naming(ValueError, ["'dtype'", "int 5"], lambda: answers.decode(record))


# -- notes: lesson04.check_masks_for_torch on what is not a function -------------------------------
@pytest.mark.parametrize("answer, described", [(None, "NoneType None"), (42, "int 42"), ("x", "str 'x'")])
def test_masks_check_on_a_non_function_says_expected_a_function(answer, described):
    from course_utils.exercises import lesson04

    feedback = lesson04.check_masks_for_torch(answer)
    assert feedback.status == "error"
    assert f"expected a function, got {described}" in feedback.message, feedback.message
    assert "could not grade" not in feedback.message


# -- notes: read_secrets on a secrets file others may read, or a link -------------------------------
def _good_secrets(folder):
    import json

    from course_utils.exercises import autograde

    path = folder / autograde.SECRETS_NAME
    path.write_text(json.dumps({"salts": {"02_single_head_attention": 5}}))
    path.chmod(0o600)
    return path


@pytest.mark.parametrize("mode", [0o644, 0o640, 0o604, 0o660])
def test_read_secrets_refuses_a_file_others_may_read(tmp_path, mode):
    from course_utils.exercises import autograde
    from tests.bad_input_cases import raises_naming

    path = _good_secrets(tmp_path)
    path.chmod(mode)
    raises_naming(ValueError, [str(path), f"{mode:04o}", "0600", "chmod 600"],
                  lambda: autograde.read_secrets(tmp_path))
    path.chmod(0o600)
    assert autograde.read_secrets(tmp_path)["salts"] == {"02_single_head_attention": 5}


def test_read_secrets_refuses_a_link_to_another_courses_secrets(tmp_path):
    from course_utils.exercises import autograde
    from tests.bad_input_cases import raises_naming

    other = tmp_path / "other"
    other.mkdir()
    target = _good_secrets(other)
    course = tmp_path / "course"
    course.mkdir()
    (course / autograde.SECRETS_NAME).symlink_to(target)
    raises_naming(ValueError, [str(course / autograde.SECRETS_NAME), "symbolic link", str(target)],
                  lambda: autograde.read_secrets(course))
