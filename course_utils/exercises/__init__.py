"""Exercise checks, one module per lesson. Each check names the mistake it recognises.

Usage in a notebook::

    from course_utils.exercises import lesson02
    lesson02.check_attention_weights(my_attention_weights)

Every :class:`~course_utils.exercises.core.Exercise` is listed in :data:`ALL_EXERCISES`
so the test suite can feed it the reference and every known mistake.
"""

from __future__ import annotations

import importlib
import pkgutil

from . import sandbox as _sandbox  # noqa: F401 - gives the checks their autograde preview
from .core import Case, Exercise, Feedback, Mistake, _capture_originals, outputs_close

__all__ = ["Case", "Exercise", "Feedback", "Mistake", "outputs_close", "all_exercises"]


def all_exercises() -> dict[str, Exercise]:
    """Every exercise in every ``lessonNN`` module, keyed ``"lessonNN.NAME"``."""
    found: dict[str, Exercise] = {}
    for info in sorted(pkgutil.iter_modules(__path__), key=lambda i: i.name):
        if not info.name.startswith("lesson"):
            continue
        module = importlib.import_module(f"{__name__}.{info.name}")
        for name, value in vars(module).items():
            if isinstance(value, Exercise):
                found[f"{info.name}.{name}"] = value
    return found


_capture_originals()  # the guarded names as imported: each check starts by putting them back
