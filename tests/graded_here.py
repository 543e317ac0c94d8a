"""The outside grader's verdict with the answer run in this process (a test-only helper).

``grade_answer`` runs the answer in a sandboxed process of its own (and, with a salt, the
references in another): ~2 CPU-s each, mostly importing torch. Tests about what the grader
concludes from the recorded outcomes (a slip's name, what the feedback on unseen cases
shows) record them here instead, as the answer's process does, and hand them to the same
``autograde.feedback_from``; their end-to-end twins, marked slow, keep the processes.
"""

from __future__ import annotations

from course_utils.exercises import autograde, sandbox


def recorded(fn, *case_sets) -> sandbox.Run:
    """What the answer's process would record for ``fn`` on each list of cases (run here)."""
    return sandbox.Run([_outcomes(fn, cases) for cases in case_sets])


def _outcomes(fn, cases) -> list:
    from course_utils.exercises.core import _is_stub

    outcomes = []
    for case in cases:
        args, kwargs = case.fresh()
        try:
            value = sandbox.to_plain(fn(*args, **kwargs))
            after = sandbox.inputs_after(args, kwargs)
            outcomes.append(sandbox._outcome({"kind": "value", "value": value, "after": after}))
        except sandbox.Refused as exc:
            outcomes.append(sandbox.Outcome("refused", error=("Refused", str(exc))))
        except BaseException as exc:  # noqa: BLE001
            stub = isinstance(exc, NotImplementedError) and _is_stub(fn, exc)
            outcomes.append(sandbox.Outcome("raised", error=(type(exc).__name__, str(exc)), stub=stub))
    return outcomes


def graded_here(lesson: str, check: str, code: str, name: str, salt: int | None = None):
    """grade_answer's Feedback for ``code`` with the answer run here; under ``salt`` also on the
    unseen cases, whose expected outputs are the references' computed here (what the reference
    process computes: the reference called on ``cases_of(exercise, salt)``)."""
    from course_utils.exercises.core import _call

    exercise = autograde.exercise_of(lesson, check)
    broken = sandbox.rules_broken(code, f"{lesson}.{check}")
    assert not broken, f"grade_answer refuses this code before any run: {broken}"
    namespace: dict = {}
    exec(code, namespace)  # noqa: S102 - the test's own answer
    cases = autograde.cases_of(exercise)
    if salt is None:
        return autograde.feedback_from(lesson, check, name, recorded(namespace[name], cases), cases)
    unseen = autograde.cases_of(exercise, salt)
    expected = [_call(exercise.reference, case) for case in unseen]
    run = recorded(namespace[name], cases, unseen)
    return autograde.feedback_from(lesson, check, name, run, cases, unseen, expected)


def graded_outside(lesson: str, check: str, code: str, name: str, salt: int | None = None,
                   solutions_dir: str | None = None, **kwargs):
    """grade_answer itself: the answer (and, under ``salt``, the references) in processes of their own."""
    return autograde.grade_answer(lesson, check, code, name, salt=salt, solutions_dir=solutions_dir, **kwargs)
