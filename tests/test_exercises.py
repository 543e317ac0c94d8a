"""Every exercise: the reference passes (on the trusted path), each known mistake gets
its own diagnosis, and the outside grader gives both the notebook's verdict; an unattempted
stub is reported as not attempted, and a learner who hands in the reference itself, or a
wrapper of it, is told so."""

import functools

import pytest
import torch
from graded_here import recorded

from course_utils.exercises import all_exercises, autograde

EXERCISES = all_exercises()
MISTAKES = [(name, m) for name, ex in EXERCISES.items() for m in ex.mistakes]


@functools.cache
def _check_and_cases(name: str) -> tuple[str, list]:
    """The name of exercise ``name``'s check in its lesson module, and the cases the grader uses."""
    exercise = EXERCISES[name]
    lesson = name.split(".")[0]
    module = __import__(f"course_utils.exercises.{lesson}", fromlist=["_"])
    check = next(k for k, v in vars(module).items() if k.startswith("check_") and callable(v)
                 and autograde.exercise_of(lesson, k) is exercise)
    return check, autograde.cases_of(exercise)


def _the_grader_agrees(name: str, fn, in_the_notebook) -> None:
    """Replaying ``fn``'s recorded outputs through the exercise's check, as the outside grader
    does, gives the status and the named mistake the check gives in the notebook
    (``in_the_notebook``): slips keep their names, scores stay as they were. (A slip that raises
    is named in the notebook by running it again under a record of its tensor operations;
    outside, it is reported as the error it raised, for no points either.)"""
    lesson = name.split(".")[0]
    check, cases = _check_and_cases(name)
    run = recorded(fn, cases)
    outside = autograde.feedback_from(lesson, check, "answer", run, cases)
    assert outside.passed == in_the_notebook.passed, (name, outside, in_the_notebook)
    raised = any(o.kind == "raised" for o in run.outcomes[0])
    if not (raised and outside.status == "error"):
        assert (outside.status, outside.mistake) == (in_the_notebook.status, in_the_notebook.mistake), (
            name, getattr(fn, "__name__", fn), outside, in_the_notebook)


@pytest.mark.parametrize("name", sorted(EXERCISES))
def test_reference_passes(name):
    ex = EXERCISES[name]
    fb = ex.check_trusted(ex.reference)
    assert fb.passed, fb
    _the_grader_agrees(name, ex.reference, fb)


@pytest.mark.parametrize("name", sorted(EXERCISES))
def test_handing_in_the_reference_is_named(name):
    ex = EXERCISES[name]
    reference = ex.reference
    for answer in (reference, lambda *args, **kwargs: reference(*args, **kwargs)):
        fb = ex.check(answer)
        assert not fb.passed and fb.mistake == "called_reference", fb


@pytest.mark.parametrize("name", sorted(EXERCISES))
def test_stub_is_not_attempted(name):
    def stub(*args, **kwargs):
        raise NotImplementedError

    fb = EXERCISES[name].check(stub)
    assert fb.status == "not attempted"
    assert fb.hint == "" and "Hint" not in str(fb), "Run All must not print a hint that answers the exercise"


@pytest.mark.parametrize("name,mistake", MISTAKES, ids=[f"{n}:{m.key}" for n, m in MISTAKES])
def test_each_mistake_is_named(name, mistake):
    fb = EXERCISES[name].check_trusted(mistake.implementation)
    assert not fb.passed
    assert fb.mistake == mistake.key, f"expected diagnosis {mistake.key!r}, got {fb}"
    _the_grader_agrees(name, mistake.implementation, fb)


@pytest.mark.parametrize("name", sorted(EXERCISES))
def test_every_exercise_knows_at_least_two_mistakes(name):
    assert len(EXERCISES[name].mistakes) >= 2


@pytest.mark.parametrize("name", sorted(EXERCISES))
@pytest.mark.parametrize("exit_with", [SystemExit(0), KeyboardInterrupt(), GeneratorExit()],
                         ids=["sys.exit", "KeyboardInterrupt", "GeneratorExit"])
def test_an_answer_that_exits_gets_feedback_not_an_exit(name, exit_with):
    """Checks never raise: not even when the learner's function calls sys.exit(), and not
    when a check runs the function a second time to find which operation failed."""
    def exits(*args, **kwargs):
        raise exit_with

    fb = EXERCISES[name].check(exits)
    assert fb.status == "error" and not fb.passed, fb


def _as_numpy(x):
    if isinstance(x, torch.Tensor):
        return x.detach().numpy()
    if isinstance(x, (tuple, list)):
        return type(x)(_as_numpy(v) for v in x)
    return x


def _returns_a_tensor(ex) -> bool:
    args, kwargs = ex.cases()[0].fresh()
    out = ex.reference(*args, **kwargs)
    return isinstance(out, torch.Tensor) or (isinstance(out, (tuple, list))
                                             and any(isinstance(v, torch.Tensor) for v in out))


TENSOR_EXERCISES = [name for name in sorted(EXERCISES) if _returns_a_tensor(EXERCISES[name])]


def test_the_tensor_exercises_are_found():
    assert {"lesson01.ATTEND", "lesson01.HEAD_SCORES", "lesson07.DECODE_STEP"} <= set(TENSOR_EXERCISES)


@pytest.mark.parametrize("name", TENSOR_EXERCISES)
def test_the_right_numbers_as_a_numpy_array_are_named(name):
    """Every exercise whose answer is a tensor names a NumPy array with the right numbers
    (lesson 01's learner trial: 1.1 and 1.2 passed one, 2.2 named it)."""
    ex = EXERCISES[name]
    reference = ex.reference
    fb = ex.check_trusted(lambda *args, **kwargs: _as_numpy(reference(*args, **kwargs)))
    assert not fb.passed
    expected = "numpy_masks" if name == "lesson04.MASKS_FOR_TORCH" else "returned_numpy"
    assert fb.mistake == expected, fb
    if expected == "returned_numpy":
        assert fb.message.startswith("the numbers are right, but"), fb
