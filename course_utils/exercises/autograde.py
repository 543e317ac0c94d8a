"""Grading that does not trust the student's kernel: what nbgrader's hidden tests call.

The visible test cell of an exercise (``lesson02.check_softmax_rows(fn).assert_passed()``)
runs in the student's kernel after the student's own cells, which could have replaced the
check, patched :class:`~.core.Feedback`, or unset ``NBGRADER_EXECUTION``. The instructor's
copy of each test cell therefore also holds a hidden test (``nbgrader_tools.py source``
writes it; nbgrader strips it from the student's release and puts it back at autograde)
that imports this module afresh, with every ``course_utils`` module dropped from
``sys.modules`` first, and calls :func:`grade`. :func:`grade`

* checks that the fresh checks come from files whose sha256 matches the manifest the
  instructor's copy was made with, and that every ``course_utils`` module was loaded from
  the installed package (so a planted or edited copy fails);
* runs the check from those fresh modules, with the call watch of :mod:`.core` (a reference
  twin called under any name or in any thread, or the profiler switched off, is named);
* refuses answers from a kernel whose history shows the known ways around grading
  (reading the stored answers, replacing a check or ``assert_passed``, switching the
  profiler off), and raises ``AssertionError`` unless the answer is correct.

What this cannot stop is written in INSTRUCTORS.md ("What grading can and cannot stop").
"""

from __future__ import annotations

import hashlib
import re
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

PACKAGE_ROOT = Path(__file__).resolve().parent.parent

# Code in the student's cells that has no place in an honest answer (matched on the kernel's
# input history): reading the stored answers, rebinding a check or the grading hooks,
# switching the call watch off, editing a function's code object.
TAMPERING = {
    "reads the checks' stored answers": re.compile(
        r"exercises\.answers|exercises import answers|answers\.(stored|decode|_load)|answers/lesson|"
        r"lesson\d\d\.pt|\btorch\.load\b"),
    "replaces a check or its feedback": re.compile(
        r"\b(check_\w+|assert_passed|_check|_grade|check_trusted|Feedback|Exercise)\s*=[^=]|"
        r"setattr\([^)]*(check_|assert_passed|Feedback|Exercise)"),
    "switches the check's call watch off": re.compile(r"\bsetprofile\b|\bsettrace\b|sys\.monitoring"),
    "edits a function's code": re.compile(r"__code__\s*=|__kwdefaults__\s*=|__globals__\["),
}


def manifest() -> str:
    """sha256 over the checks' files (``course_utils/exercises``: code and stored answers), by
    relative path. The rest of the package may change (a fix to a benchmark) without
    invalidating assignments already released."""
    digest = hashlib.sha256()
    for path in sorted((PACKAGE_ROOT / "exercises").rglob("*")):
        if path.suffix not in (".py", ".pt", ".c") or "__pycache__" in path.parts:
            continue
        digest.update(path.relative_to(PACKAGE_ROOT).as_posix().encode() + b"\0")
        digest.update(hashlib.sha256(path.read_bytes()).digest())
    return digest.hexdigest()


def _loaded_from_package() -> list[str]:
    """``course_utils`` modules now loaded whose file is not inside :data:`PACKAGE_ROOT`."""
    strays = []
    for name, module in list(sys.modules.items()):
        if name != "course_utils" and not name.startswith("course_utils."):
            continue
        file = getattr(module, "__file__", None)
        if file is None or PACKAGE_ROOT not in Path(file).resolve().parents:
            strays.append(name)
    return strays


def tampering_in(sources: list[str]) -> list[str]:
    """The kinds of tampering (keys of :data:`TAMPERING`) that ``sources`` show."""
    found = []
    for what, pattern in TAMPERING.items():
        if any(pattern.search(src or "") for src in sources):
            found.append(what)
    return found


def _kernel_history() -> list[str]:
    try:
        from IPython import get_ipython
    except ImportError:
        return []
    shell = get_ipython()
    if shell is None:
        return []
    history = list(shell.user_ns.get("In", []) or [])
    try:
        history += [src for _, _, src in shell.history_manager.get_range(output=False)]
    except Exception:  # noqa: BLE001 - no history database: the In list is still there
        pass
    return history


def grade(lesson: str, check: str, answer: Callable[..., Any], expected_manifest: str,
          history: list[str] | None = None, kept: dict[str, Any] | None = None) -> None:
    """Grade ``answer`` with the check ``check`` (e.g. "check_softmax_rows") of ``lesson``
    ("lesson02"), trusting only files that match ``expected_manifest``. ``kept`` holds the
    student's earlier copy of the package (module name -> module), whose library twins the
    call watch covers as well. Prints the feedback; raises ``AssertionError`` unless correct."""
    import importlib

    found = manifest()
    if found != expected_manifest:
        raise AssertionError(
            "autograde: the installed checks (course_utils/exercises) differ from the ones this "
            f"assignment was made with (manifest {found[:12]} vs {expected_manifest[:12]}); "
            "autograde with the course_utils the assignment was generated from, or run "
            "`nbgrader_tools.py source` and `generate_assignment` again.")
    strays = _loaded_from_package()
    if strays:
        raise AssertionError(f"autograde: modules {strays} were not loaded from the course package")
    history = _kernel_history() if history is None else history
    tampering = tampering_in(history[:-1] if history else [])  # the last entry is this test cell
    if tampering:
        raise AssertionError("autograde: the notebook's code " + "; ".join(tampering)
                             + ". Answers that interfere with grading get no points; ask your "
                             "instructor if this is a mistake.")
    module = importlib.import_module(f"course_utils.exercises.{lesson}")
    core = importlib.import_module("course_utils.exercises.core")
    core.OTHER_COPIES[:] = [kept] if kept else []
    try:
        feedback = getattr(module, check)(answer)
    finally:
        core.OTHER_COPIES.clear()
    print(feedback)
    if feedback.status != "correct":
        raise AssertionError(str(feedback))


def hidden_test(lesson: str, check: str, answer_name: str, expected_manifest: str) -> str:
    """The hidden-test block nbgrader puts back into a test cell at autograde."""
    return (
        "### BEGIN HIDDEN TESTS\n"
        "import sys as _sys\n"
        "_kept = {_k: _sys.modules.pop(_k) for _k in list(_sys.modules)\n"
        "         if _k == 'course_utils' or _k.startswith('course_utils.')}\n"
        "try:\n"
        "    import course_utils.exercises.autograde as _autograde\n"
        f"    _autograde.grade({lesson!r}, {check!r}, {answer_name}, {expected_manifest!r}, kept=_kept)\n"
        "finally:\n"
        "    _sys.modules.update(_kept)\n"
        "### END HIDDEN TESTS"
    )
