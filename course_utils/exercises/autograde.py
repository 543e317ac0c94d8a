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

import contextlib
import copy
import hashlib
import os
import re
import subprocess
import sys
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np
import torch

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


@contextlib.contextmanager
def salted_seeds(salt: int) -> Iterator[None]:
    """While active, every ``torch.Generator().manual_seed(s)``, ``torch.manual_seed(s)`` and
    ``np.random.default_rng(s)`` seeds with ``s`` mixed with ``salt``: the checks' case
    builders then make other inputs than the ones whose outputs ship with the package."""
    mixed = lambda seed: (int(seed) * 1_000_003 + salt) % 2**62  # noqa: E731

    class SaltedGenerator(torch.Generator):
        def manual_seed(self, seed: int) -> torch.Generator:
            return super().manual_seed(mixed(seed))

    generator, manual_seed, default_rng = torch.Generator, torch.manual_seed, np.random.default_rng
    torch.Generator = SaltedGenerator  # type: ignore[misc]
    torch.manual_seed = lambda seed: manual_seed(mixed(seed))  # type: ignore[assignment]
    np.random.default_rng = lambda seed=None: default_rng(None if seed is None else mixed(seed))
    try:
        yield
    finally:
        torch.Generator, torch.manual_seed = generator, manual_seed  # type: ignore[misc]
        np.random.default_rng = default_rng


def unseen_cases(exercise: Any, salt: int) -> list[Any]:
    """The exercise's test cases built under :func:`salted_seeds`."""
    with salted_seeds(salt):
        return list(exercise.make_cases())


def reference_outputs(solutions_dir: str, lesson: str, name: str, salt: int, timeout: float = 300) -> list:
    """The reference's outputs on the unseen cases, computed in a separate Python process that
    imports ``solutions/`` from the instructor's clone (so the reference code never enters the
    student's kernel). Raises RuntimeError when that process fails."""
    script = (
        "import sys, torch\n"
        f"sys.path.insert(0, {str(Path(solutions_dir).parent)!r})\n"
        "import solutions\n"
        "solutions.attach()\n"
        "from course_utils.exercises import all_exercises, answers, autograde\n"
        "from course_utils.exercises.core import _call\n"
        f"ex = all_exercises()[{lesson + '.' + name!r}]\n"
        f"cases = autograde.unseen_cases(ex, {salt})\n"
        "torch.save([answers.encode(_call(ex.reference, c)) for c in cases], sys.argv[1])\n"
    )
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "expected.pt"
        done = subprocess.run([sys.executable, "-I", "-c", script, str(out)], capture_output=True, text=True,
                              timeout=timeout, env={**os.environ, "PYTHONPATH": ""}, cwd=tmp)
        if done.returncode != 0 or not out.exists():
            raise RuntimeError(f"the reference outputs for the unseen cases could not be computed:\n"
                               f"{done.stderr[-2000:]}")
        from .answers import decode

        return [decode(v) for v in torch.load(out, weights_only=True)]


def _check_unseen(exercise: Any, check: Callable[..., Any], answer: Callable[..., Any], salt: int,
                  solutions_dir: str) -> Any:
    """Grade ``answer`` on unseen cases: a copy of the exercise whose cases are salted and whose
    expected outputs come from :func:`reference_outputs`."""
    key = exercise._store_key()
    expected = reference_outputs(solutions_dir, key[0], key[1], salt)
    cases = unseen_cases(exercise, salt)
    probe = copy.copy(exercise)
    probe.make_cases = lambda: cases
    probe.__dict__["_key"] = key  # the lesson's library twins stay watched
    probe.__dict__["_expected"] = expected
    return type(exercise).check(probe, answer)


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
          history: list[str] | None = None, kept: dict[str, Any] | None = None, *,
          salt: int | None = None, solutions_dir: str | None = None) -> None:
    """Grade ``answer`` with the check ``check`` (e.g. "check_softmax_rows") of ``lesson``
    ("lesson02"), trusting only files that match ``expected_manifest``. ``kept`` holds the
    student's earlier copy of the package (module name -> module), whose library twins the
    call watch covers as well. With ``salt`` and ``solutions_dir`` (the instructor's clone's
    ``solutions/``), the answer is also graded on unseen cases (:func:`salted_seeds`) against
    the reference run in a separate process, so outputs looked up in the shipped store do not
    pass. Prints the feedback; raises ``AssertionError`` unless correct."""
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
        print(feedback)
        if feedback.status != "correct":
            raise AssertionError(str(feedback))
        exercise = getattr(getattr(module, check), "__self__", None) or _exercise_of(module, check)
        if salt is not None and solutions_dir is not None and exercise is not None:
            unseen = _check_unseen(exercise, check, answer, salt, solutions_dir)
            if unseen.status != "correct":
                raise AssertionError(f"autograde, on test cases your notebook has not seen: {unseen}")
            print(f"autograde: also correct on {len(unseen_cases(exercise, salt))} unseen test case(s).")
    finally:
        core.OTHER_COPIES.clear()


def _exercise_of(module: Any, check: str) -> Any:
    """The Exercise a check function of ``module`` grades with (a wrapper's exercise, e.g. 5.3)."""
    from .core import Exercise

    exercises = [v for v in vars(module).values() if isinstance(v, Exercise)]
    named = check.removeprefix("check_").upper()
    return next((e for e in exercises if e._store_key() and e._store_key()[1].endswith(named)), None)


def hidden_test(lesson: str, check: str, answer_name: str, expected_manifest: str,
                salt: int | None = None, solutions_dir: str | None = None) -> str:
    """The hidden-test block nbgrader puts back into a test cell at autograde."""
    return (
        "### BEGIN HIDDEN TESTS\n"
        "import sys as _sys\n"
        "_kept = {_k: _sys.modules.pop(_k) for _k in list(_sys.modules)\n"
        "         if _k == 'course_utils' or _k.startswith('course_utils.')}\n"
        "try:\n"
        "    import course_utils.exercises.autograde as _autograde\n"
        f"    _autograde.grade({lesson!r}, {check!r}, {answer_name}, {expected_manifest!r}, kept=_kept,\n"
        f"                     salt={salt!r}, solutions_dir={solutions_dir!r})\n"
        "finally:\n"
        "    _sys.modules.update(_kept)\n"
        "### END HIDDEN TESTS"
    )
