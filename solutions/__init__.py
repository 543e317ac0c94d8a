"""The exercises' reference solutions and known mistakes, as code: not part of the package.

A learner's kernel must not be able to call or print a reference solution, so the checks in
``course_utils.exercises`` compare answers with stored outputs (``answers/lessonNN.pt``).
This folder holds the code those outputs come from, one module per lesson: ``REFERENCES``
(exercise name -> reference) and ``MISTAKES`` (exercise name -> mistake key -> slip).
``scripts/exercise_answers.py`` builds the store from it; the course's tests call
:func:`attach` to give every check its reference and slips back. The student-only tree
(``course.py student-tree``) leaves this folder out, as it leaves out notebooks/.
"""

from __future__ import annotations

import importlib
from typing import Any

LESSONS = ("lesson01", "lesson02", "lesson03", "lesson04", "lesson05", "lesson06", "lesson07")


def solutions_of(lesson: str) -> Any:
    """The solutions module of ``lesson`` ("lesson02")."""
    return importlib.import_module(f"{__name__}.{lesson}")


def attach() -> None:
    """Give every exercise of the package its reference and each mistake its implementation.
    Raises KeyError naming an exercise or mistake that has no code here."""
    from course_utils.exercises import all_exercises

    for full_name, exercise in all_exercises().items():
        lesson, name = full_name.split(".")
        module = solutions_of(lesson)
        exercise.reference = module.REFERENCES[name]
        slips = module.MISTAKES.get(name, {})
        for mistake in exercise.mistakes:
            if mistake.key not in slips:
                raise KeyError(f"{full_name}: mistake {mistake.key!r} has no implementation "
                               f"in solutions/{lesson}.py")
            mistake.implementation = slips[mistake.key]
